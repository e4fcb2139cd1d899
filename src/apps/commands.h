// apps/commands.h — the subcommands of the `swift` executable.
//
// Invariants: each command takes its arguments (after the subcommand name), returns the process exit
// status, and lets swift::Error propagate to main(), which prints it once and exits 1.
#pragma once

#include <string>
#include <vector>

namespace swift::apps {

using Args = std::vector<std::string>;

int cmd_sft(const Args& args);       // supervised fine-tuning (LoRA or full)
int cmd_pt(const Args& args);        // continued pre-training on raw text
int cmd_infer(const Args& args);     // chat REPL or batch inference
int cmd_info(const Args& args);     // model summary: config, parameters, weight dtypes, load time
int cmd_forward(const Args& args);  // forward pass on token ids: next-token predictions, greedy continuation
int cmd_tokenize(const Args& args); // text <-> ids; a dataset's rendered samples with ids and loss masks

}  // namespace swift::apps
