// data/sample.h — the normalized training sample every dataset format turns into (ms-swift's "standard format").
//
// Invariants:
//  - messages is non-empty; roles are "system" (first message only, when present), "user", "assistant" or
//    "tool"; contents are strings (an assistant turn that only calls tools has empty content and tool_calls).
//  - A preference sample has rejected_messages (a full rejected dialogue that shares the prompt, as hh-rlhf
//    gives) or rejected_response (the rejected last assistant turn), never both.
//  - label is set only for a boolean-like `label` column (KTO); any other `label` stays in extra.
//  - extra is a JSON object holding every column no format consumed (e.g. GRPO's `solution`, ids).
//  - tools (ms-swift's `tools` column) keeps its key order: templates serialize it as given.
//  - Pre-training text (`text`, `content`, ... with no prompt) is one assistant message, as ms-swift stores it;
//    `swift pt` encodes the contents without a chat template.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/chat_template.h"

namespace swift::data {

struct Sample {
  std::vector<text::ChatMessage> messages;
  std::vector<text::ChatMessage> rejected_messages;  // empty unless a full rejected dialogue was given
  std::optional<std::string> rejected_response;
  std::optional<bool> label;                          // KTO: desirable (true) / undesirable (false)
  nlohmann::ordered_json tools;                       // tool definitions for the template (null: none)
  nlohmann::json extra = nlohmann::json::object();
  std::string source;                                 // "path:line" of the row

  bool is_preference() const { return !rejected_messages.empty() || rejected_response.has_value(); }
  // The rejected side of a preference pair as a full dialogue: rejected_messages, or messages with the last
  // assistant turn's content replaced by rejected_response. Throws when the sample is no preference pair.
  std::vector<text::ChatMessage> rejected_dialogue() const;
};

}  // namespace swift::data
