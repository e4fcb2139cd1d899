// text/chat_template_internal.h — what the built-in chat templates share (private to src/text/chat_template*.cpp):
// Python/Jinja string semantics (str.strip, `| trim`, `tojson`), the segment builder, message checks, and the
// factories of each template family.
//
// Invariants:
//  - py_strip / py_isspace follow Python's str.strip() / str.isspace() on UTF-8 text (Unicode whitespace such
//    as U+00A0 and U+3000 included); invalid UTF-8 bytes are never whitespace and are kept as they are.
//  - py_json(x) equals transformers' `tojson` filter: json.dumps(x, ensure_ascii=False) with Python's
//    separators (", ", ": "), or with indent the (",", ": ") form and newline-indented items; keys in the
//    container's own order.
//  - SegmentBuilder only appends: the text of the result is the concatenation of everything added, in order;
//    adjacent pieces with the same attribution are merged; empty pieces vanish.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/chat_template.h"

namespace swift::text::chat_detail {

// ---- Python string semantics ------------------------------------------------------------------------------
bool py_isspace(char32_t c);
// The byte range [first, second) that Python's s.strip() (both ends), lstrip() or rstrip() keeps.
std::pair<size_t, size_t> py_strip_range(std::string_view s, bool left = true, bool right = true);
std::string py_strip(std::string_view s);
// s.strip(chars) / lstrip(chars) / rstrip(chars) for a set of ASCII characters (e.g. "\n").
std::string strip_chars(std::string_view s, std::string_view chars, bool left, bool right);
bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);

// ---- tojson ------------------------------------------------------------------------------------------------
std::string py_json(const nlohmann::json& value, int indent = -1);
std::string py_json(const nlohmann::ordered_json& value, int indent = -1);
std::string py_json_string(std::string_view s);  // json.dumps of a str

// ---- messages ----------------------------------------------------------------------------------------------
// A message as the template sees it: the caller's message and its index, or the --system option (index -1).
struct Msg {
  const ChatMessage* m;
  int index;
  const std::string& role() const { return m->role; }
  const std::string& content() const { return m->content; }
  bool has_tool_calls() const { return !m->tool_calls.is_null() && !m->tool_calls.empty(); }
};

// The conversation with options.system placed first when it has no system message (`storage` keeps that
// message alive). Throws when it is empty or a role is not system/user/assistant/tool.
std::vector<Msg> prepare_messages(const std::string& template_name, const std::vector<ChatMessage>& messages,
                                  const TemplateOptions& options, ChatMessage& storage);
bool has_tools(const TemplateOptions& options);

// Throws swift::Error "chat template '<name>': <what>".
[[noreturn]] void template_error(const std::string& template_name, const std::string& what);
// For templates without tool support: throws on options.tools, assistant tool_calls, and (unless allowed,
// as where the real template renders any role) role "tool".
void reject_tools(const std::string& template_name, const std::vector<Msg>& messages, const TemplateOptions& options,
                  bool allow_tool_role);

// A tool call's function object ({"name", "arguments"}), with or without the {"function": ...} wrapper; throws
// when the name is not a string or the arguments are missing.
const nlohmann::json& tool_function(const std::string& template_name, const nlohmann::json& tool_call);
std::string tool_name(const std::string& template_name, const nlohmann::json& tool_call);

// ---- segments ----------------------------------------------------------------------------------------------
struct Part {
  std::string_view text;
  int message = -1;
  bool response = false;
  bool end_of_turn = false;
};

class SegmentBuilder {
 public:
  void add(std::string_view text, int message, bool response = false, bool end_of_turn = false);
  void add_generation_prompt(std::string_view text);
  // The parts concatenated and passed through Python's strip() (Jinja `| trim`); each part keeps its attribution.
  void add_stripped(std::initializer_list<Part> parts);
  std::vector<TemplateSegment> take() { return std::move(segments_); }

 private:
  void push(std::string_view text, int message, bool response, bool end_of_turn, bool generation_prompt);
  std::vector<TemplateSegment> segments_;
};

// ---- template families (one factory per built-in name) -----------------------------------------------------
std::unique_ptr<ChatTemplate> make_qwen2_5();
std::unique_ptr<ChatTemplate> make_qwen3();
std::unique_ptr<ChatTemplate> make_llama3();
std::unique_ptr<ChatTemplate> make_llama3_1();
std::unique_ptr<ChatTemplate> make_llama3_2();
std::unique_ptr<ChatTemplate> make_llama2();
std::unique_ptr<ChatTemplate> make_mistral();
std::unique_ptr<ChatTemplate> make_chatml();
std::unique_ptr<ChatTemplate> make_phi3();
std::unique_ptr<ChatTemplate> make_gemma();

}  // namespace swift::text::chat_detail
