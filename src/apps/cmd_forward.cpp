// apps/cmd_forward.cpp — `swift info` and `swift forward`: load a model (HF directory or GGUF) and run it.
//
// `forward` takes token ids (the tokenizer arrives with the text layer), prints the top next-token
// predictions and optionally a greedy continuation. The continuation re-runs the whole sequence each step
// (no KV cache here; `swift infer` brings one).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/commands.h"
#include "core/error.h"
#include "io/gguf.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/lora.h"
#include "text/byte_level.h"

namespace swift::apps {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Parses the command line with CLI11; returns an exit status when parsing ends the command (help, error).
std::optional<int> parse(CLI::App& app, const Args& args) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    fail("{} (run `swift {} --help`)", e.what(), app.get_name());
  }
  return std::nullopt;
}

// Token strings for display, when the model file carries a vocabulary (GGUF).
std::vector<std::string> load_vocabulary(const std::string& model_path) {
  std::vector<std::string> vocab;
  if (model_path.size() < 5 || model_path.substr(model_path.size() - 5) != ".gguf") return vocab;
  io::GgufFile file = io::GgufFile::open(model_path);
  if (!file.has("tokenizer.ggml.tokens")) return vocab;
  bool byte_level = file.get_string_or("tokenizer.ggml.model", "") == "gpt2";
  for (const auto& token : file.metadata("tokenizer.ggml.tokens")) {
    std::string s = token.get<std::string>();
    if (byte_level) {
      try {
        s = text::byte_level_decode(s);
      } catch (const Error&) {
      }
    }
    vocab.push_back(s);
  }
  return vocab;
}

std::string show_token(const std::vector<std::string>& vocab, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= vocab.size()) return "";
  std::string s = vocab[static_cast<size_t>(id)];
  std::string out;
  for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      long value = std::stol(item, &used);
      SWIFT_CHECK(used == item.size() || item.find_first_not_of(" ", used) == std::string::npos, "");
      ids.push_back(static_cast<int32_t>(value));
    } catch (const std::exception&) {
      fail("--ids: '{}' is not an integer token id (expected a comma-separated list like 1,9690,198)", item);
    }
  }
  SWIFT_CHECK(!ids.empty(), "--ids: no token ids given");
  return ids;
}

}  // namespace

int cmd_info(const Args& args) {
  CLI::App app("Load a model and print its configuration, parameter count and weights", "info");
  std::string model;
  bool list_weights = false;
  app.add_option("--model", model, "Hugging Face model directory or .gguf file")->required();
  app.add_flag("--list_weights", list_weights, "Print every weight with its dtype and shape");
  if (auto status = parse(app, args)) return *status;

  auto start = Clock::now();
  auto lm = model::CausalLM::load(model);
  double load_s = seconds_since(start);
  const io::ModelConfig& c = lm->config();
  std::printf("%s\nloaded in %.2f s; memory:\n%s", c.summary().c_str(), load_s, memory_report(0).c_str());
  if (list_weights) {
    const model::ModelWeights& w = lm->weights();
    std::printf("embed_tokens %s\nlm_head %s%s\n", w.embed_tokens.str().c_str(), w.lm_head.str().c_str(),
                c.tie_word_embeddings ? " (tied)" : "");
  }
  return 0;
}

int cmd_forward(const Args& args) {
  CLI::App app("Run a forward pass on token ids; print next-token predictions and a greedy continuation",
               "forward");
  std::string model, ids_text, adapters, logits_out;
  int top_k = 5, max_new_tokens = 0;
  app.add_option("--model", model, "Hugging Face model directory or .gguf file")->required();
  app.add_option("--ids", ids_text, "Comma-separated prompt token ids")->required();
  app.add_option("--adapters", adapters, "PEFT adapter directory (LoRA, DoRA, modules_to_save) applied to the model");
  app.add_option("--logits_out", logits_out,
                 "Write the logits of every prompt position, (T, V) F32 'logits', to this .safetensors file");
  app.add_option("--top_k", top_k, "How many next-token candidates to print")->check(CLI::Range(1, 100));
  app.add_option("--max_new_tokens", max_new_tokens, "Greedy continuation length (0: none)")
      ->check(CLI::Range(0, 4096));
  if (auto status = parse(app, args)) return *status;

  std::vector<int32_t> ids = parse_ids(ids_text);
  auto start = Clock::now();
  auto lm = model::CausalLM::load(model);
  std::vector<std::string> vocab = load_vocabulary(model);
  const io::ModelConfig& c = lm->config();
  if (!adapters.empty()) lm->set_lora(model::lora_from_peft(io::load_peft_adapter(adapters), c));
  std::printf("%s%s\nloaded in %.2f s\n", c.summary().c_str(), adapters.empty() ? "" : (", adapter " + adapters).c_str(),
              seconds_since(start));

  start = Clock::now();
  Tensor logits = lm->forward(ids);
  double forward_s = seconds_since(start);
  if (!logits_out.empty()) {
    io::save_safetensors(logits_out, {{"logits", logits}, {"input_ids", Tensor::from_i32({static_cast<int64_t>(ids.size())}, ids)}},
                         {{"format", "pt"}});
  }
  const int64_t V = c.vocab_size;
  const float* last = logits.data<float>() + (logits.size(0) - 1) * V;
  double max_logit = *std::max_element(last, last + V), sum = 0;
  for (int64_t j = 0; j < V; ++j) sum += std::exp(last[j] - max_logit);
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                    [&](int32_t a, int32_t b) { return last[a] > last[b]; });
  std::printf("forward: %zu tokens in %.3f s (%.0f tokens/s)\nnext-token predictions:\n", ids.size(), forward_s,
              ids.size() / forward_s);
  for (int i = 0; i < top_k; ++i) {
    int32_t id = order[static_cast<size_t>(i)];
    std::printf("  %6d  p=%.4f  logit=%8.4f  '%s'\n", id, std::exp(last[id] - max_logit) / sum, last[id],
                show_token(vocab, id).c_str());
  }
  if (max_new_tokens > 0) {
    std::string text;
    start = Clock::now();
    int generated = 0;
    for (; generated < max_new_tokens; ++generated) {
      Tensor step = lm->forward(ids);
      const float* row = step.data<float>() + (step.size(0) - 1) * V;
      int32_t next = static_cast<int32_t>(std::max_element(row, row + V) - row);
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), next) != c.eos_token_ids.end()) break;
      ids.push_back(next);
      text += vocab.empty() ? fmt::format("[{}]", next) : vocab[static_cast<size_t>(next)];
    }
    std::printf("greedy continuation (%d tokens, %.2f s, no KV cache):\n%s\n", generated, seconds_since(start),
                text.c_str());
  }
  return 0;
}

}  // namespace swift::apps
