// apps/commands.h — the subcommands of the `swift` executable.
//
// Invariants: each command takes its arguments (after the subcommand name), returns the process exit
// status, and lets swift::Error propagate to main(), which prints it once and exits 1.
#pragma once

#include <string>
#include <vector>

namespace swift::apps {

using Args = std::vector<std::string>;

int cmd_info(const Args& args);     // model summary: config, parameters, weight dtypes, load time
int cmd_forward(const Args& args);  // forward pass on token ids: next-token predictions, greedy continuation

}  // namespace swift::apps
