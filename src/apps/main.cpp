// apps/main.cpp — `swift <subcommand> [args]`: dispatches to the subcommands, prints errors once.
//
// Invariants: unknown subcommands and subcommands not built yet exit non-zero with a message saying so;
// a swift::Error from any layer ends as one line "swift <cmd>: error: ..." and exit status 1.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "apps/commands.h"
#include "core/error.h"
#include "dist/launcher.h"
#include "ops/backends.h"

namespace {

struct Subcommand {
  const char* name;
  const char* summary;
  int (*run)(const swift::apps::Args&);  // nullptr: not built yet
  const char* planned;                   // what brings it, for those not built yet
};

const Subcommand kSubcommands[] = {
    {"sft", "supervised fine-tuning (LoRA, full)", swift::apps::cmd_sft, nullptr},
    {"pt", "continued pre-training on raw text", swift::apps::cmd_pt, nullptr},
    {"rlhf", "preference and RL alignment (DPO, GRPO, KTO, ORPO, SimPO, CPO)", nullptr, "a later issue"},
    {"infer", "chat on the terminal or batch inference to a jsonl file", swift::apps::cmd_infer, nullptr},
    {"deploy", "OpenAI-compatible HTTP server", nullptr, "a later issue"},
    {"export", "merge LoRA, quantize, convert to GGUF", nullptr, "a later issue"},
    {"eval", "evaluate on gsm8k or a dataset file", nullptr, "a later issue"},
    {"web-ui", "dashboard: live training curves, chat playground", nullptr, "a later issue"},
    {"info", "load a model and print its configuration, parameters and weights", swift::apps::cmd_info, nullptr},
    {"forward", "run a forward pass on token ids; print next-token predictions", swift::apps::cmd_forward, nullptr},
    {"tokenize", "tokenize text, decode ids, show a dataset's ids and loss masks", swift::apps::cmd_tokenize, nullptr},
};

void print_help() {
  std::printf(
      "swift.cpp — fine-tune, align, run, serve, export and evaluate decoder-only LLMs (ms-swift's command line)\n\n"
      "usage: swift <subcommand> [--argument value ...]\n\nsubcommands:\n");
  for (const Subcommand& s : kSubcommands) {
    std::printf("  %-8s %s%s\n", s.name, s.summary, s.run ? "" : "  [not built yet]");
  }
  std::printf("\nRun `swift <subcommand> --help` for its arguments.\n");
}

}  // namespace

int main(int argc, char** argv) {
  swift::ops::tune_cpu_environment(argc, argv);
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    print_help();
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::printf("swift.cpp 0.1.0\n");
    return 0;
  }
  // NPROC_PER_NODE=N: this process becomes the launcher of N ranks (each a copy of this command) and returns
  // their exit status; a launched rank (RANK set) carries on.
  if (const int code = swift::dist::maybe_launch(argc, argv); code >= 0) return code;
  swift::ops::init_backends();
  const std::string name = argv[1];
  for (const Subcommand& s : kSubcommands) {
    if (name != s.name) continue;
    if (s.run == nullptr) {
      std::fprintf(stderr, "swift %s: not built yet (%s); it arrives with %s.\n", s.name, s.summary, s.planned);
      return 2;
    }
    try {
      return s.run(swift::apps::Args(argv + 2, argv + argc));
    } catch (const swift::Error& e) {
      std::fprintf(stderr, "swift %s: error: %s\n", s.name, e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "swift %s: internal error: %s\n", s.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "swift: unknown subcommand '%s'; run `swift --help` for the list.\n", name.c_str());
  return 2;
}
