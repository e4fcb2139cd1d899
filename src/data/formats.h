// data/formats.h — rows of any supported layout to Samples, following ms-swift's AutoPreprocessor
// (swift/llm/dataset/preprocessor/core.py).
//
// Per file, from the union of its columns (as ms-swift decides per dataset from its features):
//  1. --columns renames first (case-insensitive match of the column name).
//  2. The layout: messages if a column is named messages / conversation / conversations; alpaca if both
//     `instruction` and `input` exist; preference (our addition) if `chosen` and `rejected` exist; otherwise
//     query/response.
//  3. That layout's aliases rename columns, matched case-insensitively; when two columns would get the same
//     name, neither is renamed (so an existing `query` beats `question`), exactly as ms-swift:
//       system   <- system, system_prompt
//       query    <- query, prompt, input, instruction, question, problem
//       response <- response, answer, output, targets, target, answer_key, answers, solution, text, completion,
//                   content
//       messages <- messages, conversation, conversations   (messages layout)
//  4. A `solution` column is also kept, untouched, in extra (ms-swift: "compat GRPO: the solution field will be
//     retained"), so GRPO reward functions see it even when it became the response.
//
// Layouts:
//  - messages: [{"role"|"from": ..., "content"|"value": ..., "loss": bool?}], roles user/human, assistant/gpt/bot,
//    system, tool/tool_response/function_response/observation/observations/function (-> "tool"), tool_call /
//    function_call (-> an assistant turn whose tool_calls hold the parsed call); old ShareGPT pairs
//    [{"human": q, "assistant": r}]; a `system` column is prepended unless the first message is a system one;
//    a string column is parsed as a Python/JSON literal (ms-swift's ast.literal_eval).
//  - query/response: optional system and history [[q, r], ...]; a missing response gives a prompt-only sample
//    (GRPO, inference), a missing query a response-only one (pre-training text); a list response picks one
//    element with the row's seed (ms-swift picks at random).
//  - alpaca: query = instruction + "\n" + input when both are non-empty, else the non-empty one; output.
//  - preference: `chosen`/`rejected` full hh-rlhf transcripts ("\n\nHuman:" / "\n\nAssistant:" turns, split as
//    ms-swift's HHRLHFPreprocessor) -> messages + rejected_messages; message lists (TRL style, with an optional
//    `prompt` list or string) -> messages + rejected_messages; plain strings -> response + rejected_response.
//  - Standard columns anywhere: rejected_response, rejected_messages, label (KTO when boolean-like), tools (a
//    list, or its JSON text, of tool definitions for the chat template; key order kept).
//
// Invariants:
//  - convert_row never throws for bad data: it returns nullopt with a message naming the field and what was
//    expected (the caller adds file and line). A row yielding no user/assistant/tool message is unusable.
//  - The result depends only on (row, plan, row_seed).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/sample.h"

namespace swift::data {

using ColumnMap = std::vector<std::pair<std::string, std::string>>;  // --columns: from -> to, in order

enum class RowFormat { Messages, Alpaca, Response, Preference };
const char* row_format_name(RowFormat format);

struct FormatPlan {
  RowFormat format = RowFormat::Response;
  std::vector<std::pair<std::string, std::string>> renames;  // original column -> final name
  bool keep_solution = false;                                // copy the original `solution` into extra
  std::string solution_column;                               // its original name
  std::string describe() const;                              // "response (question->query, answer->response)"
};

// Decides the layout and renames from a file's columns; throws for an impossible --columns mapping.
FormatPlan plan_format(const std::vector<std::string>& columns, const ColumnMap& user_columns = {});

// One row to a Sample (source left empty). On failure: nullopt and *error says what was wrong.
std::optional<Sample> convert_row(const nlohmann::ordered_json& row, const FormatPlan& plan, uint64_t row_seed,
                                  std::string* error);

// hh-rlhf transcript ("\n\nHuman: ...\n\nAssistant: ...") to alternating user/assistant messages (a dangling
// last human turn is dropped, as ms-swift does).
std::vector<text::ChatMessage> hh_transcript_to_messages(const std::string& transcript);

// Parses `--columns '{"a": "query"}'` (a JSON object) into a ColumnMap.
ColumnMap parse_column_map(const std::string& json_text);

}  // namespace swift::data
