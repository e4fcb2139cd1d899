// data/formats.cpp — ms-swift's AutoPreprocessor in C++: column renames, layout detection and per-row conversion.
// Row failures travel as RowError inside this file and come out of convert_row as a message, never as a throw.
#include "data/formats.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "core/error.h"
#include "data/random.h"
#include "data/readers.h"

namespace swift::data {
namespace {

using json = nlohmann::ordered_json;
using text::ChatMessage;

struct RowError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void row_error(fmt::format_string<Args...> format, Args&&... args) {
  throw RowError(fmt::format(format, std::forward<Args>(args)...));
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// ms-swift's safe_rename_columns: case-insensitive match, conflicting targets dropped, identities dropped.
std::vector<std::pair<std::string, std::string>> safe_renames(const std::vector<std::string>& columns,
                                                              const ColumnMap& mapping) {
  std::map<std::string, std::string> by_lower;
  for (const auto& c : columns) by_lower[lower(c)] = c;
  std::vector<std::pair<std::string, std::string>> safe;
  for (const auto& [from, to] : mapping) {
    auto it = by_lower.find(lower(from));
    if (it == by_lower.end()) continue;
    auto existing = std::find_if(safe.begin(), safe.end(), [&](const auto& p) { return p.first == it->second; });
    if (existing != safe.end()) {
      existing->second = to;
    } else {
      safe.emplace_back(it->second, to);
    }
  }
  std::map<std::string, int> count;
  for (const auto& p : safe) ++count[p.second];
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& p : safe) {
    if (count[p.second] > 1 || p.first == p.second) continue;
    out.push_back(p);
  }
  return out;
}

std::vector<std::string> apply_renames(const std::vector<std::string>& columns,
                                       const std::vector<std::pair<std::string, std::string>>& renames) {
  std::vector<std::string> out;
  for (const auto& c : columns) {
    auto it = std::find_if(renames.begin(), renames.end(), [&](const auto& p) { return p.first == c; });
    out.push_back(it == renames.end() ? c : it->second);
  }
  return out;
}

ColumnMap alias_map(RowFormat format) {
  ColumnMap m;
  auto add = [&](std::initializer_list<const char*> keys, const char* to) {
    for (const char* k : keys) m.emplace_back(k, to);
  };
  if (format == RowFormat::Messages) {
    add({"messages", "conversation", "conversations"}, "messages");
    add({"system", "system_prompt"}, "system");
    return m;
  }
  add({"system", "system_prompt"}, "system");
  add({"query", "prompt", "input", "instruction", "question", "problem"}, "query");
  add({"response", "answer", "output", "targets", "target", "answer_key", "answers", "solution", "text",
       "completion", "content"},
      "response");
  return m;
}

// ---- values ---------------------------------------------------------------------------------------------------

// A text field: strings as they are, numbers and booleans as JSON text, lists of content parts joined.
std::optional<std::string> as_text(const json& v, std::string_view field) {
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number() || v.is_boolean()) return v.dump();
  if (v.is_array()) {
    std::string out;
    for (const auto& part : v) {
      if (part.is_string()) {
        out += part.get<std::string>();
      } else if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        out += part["text"].get<std::string>();
      } else {
        row_error("field '{}' is a list with a {} part; expected a string or a list of text parts", field,
                  part.type_name());
      }
    }
    return out;
  }
  row_error("field '{}' is a JSON {}; expected a string", field, v.type_name());
}

bool truthy(const std::optional<std::string>& s) { return s.has_value() && !s->empty(); }

std::optional<bool> as_loss(const json& v) {
  if (v.is_null()) return std::nullopt;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number()) return v.get<double>() != 0.0;
  if (v.is_string()) {
    std::string s = lower(v.get<std::string>());
    if (s == "true" || s == "1") return true;
    if (s == "false" || s == "0") return false;
  }
  row_error("message field 'loss' is {}; expected true, false, 1 or 0", v.dump());
}

std::optional<bool> as_label(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1)) return v.get<int64_t>() == 1;
  if (v.is_number_float() && (v.get<double>() == 0.0 || v.get<double>() == 1.0)) return v.get<double>() == 1.0;
  if (v.is_string()) {
    std::string s = lower(v.get<std::string>());
    if (s == "true" || s == "1") return true;
    if (s == "false" || s == "0") return false;
  }
  return std::nullopt;
}

// A column that may hold a literal as a string (ms-swift repairs with ast.literal_eval).
json repair(const json& v, std::string_view field) {
  if (!v.is_string()) return v;
  try {
    return parse_python_literal(v.get<std::string>());
  } catch (const Error& e) {
    row_error("field '{}' is a string that is not a list literal ({})", field, e.what());
  }
}

json take(json& row, const char* key) {
  auto it = row.find(key);
  if (it == row.end()) return nullptr;
  json v = std::move(*it);
  row.erase(it);
  return v;
}

// ---- messages ---------------------------------------------------------------------------------------------

// ms-swift's role names to ours; "tool_call" marks an assistant tool call.
std::string standard_role(const std::string& role) {
  static const std::map<std::string, std::string> roles = {
      {"system", "system"},
      {"user", "user"},
      {"human", "user"},
      {"assistant", "assistant"},
      {"gpt", "assistant"},
      {"bot", "assistant"},
      {"tool", "tool"},
      {"tool_response", "tool"},
      {"function_response", "tool"},
      {"observation", "tool"},
      {"observations", "tool"},
      {"function", "tool"},
      {"tool_call", "tool_call"},
      {"function_call", "tool_call"},
  };
  std::string key = role;
  std::replace(key.begin(), key.end(), '-', '_');
  auto it = roles.find(key);
  return it == roles.end() ? std::string() : it->second;
}

// Moves the first present key of `keys` (the last one wins when several exist, as ms-swift) to `to`.
void to_std_key(json& m, std::initializer_list<const char*> keys, const char* to) {
  for (const char* k : keys) {
    auto it = m.find(k);
    if (it != m.end()) {
      json v = std::move(*it);
      m.erase(it);
      m[to] = std::move(v);
    }
  }
}

std::vector<ChatMessage> normalize_messages(const json& raw, const std::optional<std::string>& system,
                                            std::string_view field) {
  json list = repair(raw, field);
  if (list.is_object()) list = json::array({list});
  if (!list.is_array()) row_error("field '{}' is a JSON {}; expected a list of messages", field, list.type_name());
  if (list.empty()) row_error("field '{}' is an empty list; expected at least one message", field);
  for (size_t k = 0; k < list.size(); ++k) {
    if (!list[k].is_object()) {
      row_error("field '{}' message {} is a JSON {}; expected an object with role and content", field, k,
                list[k].type_name());
    }
    to_std_key(list[k], {"role", "from"}, "role");
    to_std_key(list[k], {"content", "value"}, "content");
  }
  std::vector<ChatMessage> out;
  auto push = [&](std::string role, std::optional<std::string> content, const json& m, size_t k) {
    ChatMessage msg;
    if (role == "tool_call") {
      nlohmann::json call = nullptr;
      if (content) {
        try {
          call = nlohmann::json::parse(*content);
        } catch (const nlohmann::json::exception&) {
          call = nullptr;
        }
      }
      if (!call.is_object()) {
        row_error("field '{}' message {} is a tool call whose content is not a JSON object; expected "
                  "{{\"name\": ..., \"arguments\": ...}}",
                  field, k);
      }
      if (!out.empty() && out.back().role == "assistant" && out.back().content.empty() &&
          out.back().tool_calls.is_array()) {
        out.back().tool_calls.push_back(std::move(call));  // consecutive calls: one turn
        return;
      }
      msg.role = "assistant";
      msg.tool_calls = nlohmann::json::array({std::move(call)});
    } else {
      msg.role = std::move(role);
      if (m.contains("tool_calls") && !m["tool_calls"].is_null()) msg.tool_calls = nlohmann::json(m["tool_calls"]);
      if (!content && !(msg.role == "assistant" && msg.tool_calls.is_array())) {
        row_error("field '{}' message {} ({}) has no content; expected a string", field, k, msg.role);
      }
      msg.content = content.value_or("");
    }
    if (m.contains("loss")) msg.loss = as_loss(m["loss"]);
    if (m.contains("reasoning_content")) {
      msg.reasoning_content = as_text(m["reasoning_content"], "reasoning_content").value_or("");
    }
    out.push_back(std::move(msg));
  };
  const json& first = list[0];
  if (!first.contains("role") && !first.contains("content")) {
    // Old ShareGPT: [{"human": q, "assistant": r}, ...].
    if (system) push("system", system, json::object(), 0);
    for (size_t k = 0; k < list.size(); ++k) {
      json m = list[k];
      to_std_key(m, {"user", "human"}, "user");
      to_std_key(m, {"assistant", "gpt", "bot"}, "assistant");
      if (!m.contains("user") || !m.contains("assistant")) {
        row_error("field '{}' turn {} has keys {}; expected role/content (or from/value) messages, or ShareGPT "
                  "pairs with human and assistant (or gpt) keys",
                  field, k, [&] {
                    std::vector<std::string> keys;
                    for (auto it = list[k].begin(); it != list[k].end(); ++it) keys.push_back(it.key());
                    return fmt::format("[{}]", fmt::join(keys, ", "));
                  }());
      }
      push("user", as_text(m["user"], "user"), json::object(), k);
      push("assistant", as_text(m["assistant"], "assistant"), json::object(), k);
    }
    return out;
  }
  for (size_t k = 0; k < list.size(); ++k) {
    const json& m = list[k];
    if (!m.contains("role") || !m["role"].is_string()) {
      row_error("field '{}' message {} has no role; expected \"role\" (or \"from\") with a string", field, k);
    }
    std::string role = standard_role(m["role"].get<std::string>());
    if (role.empty()) {
      row_error("field '{}' message {} has role '{}'; expected system, user/human, assistant/gpt, tool, "
                "tool_call/function_call or tool_response/observation",
                field, k, m["role"].get<std::string>());
    }
    if (k == 0 && role != "system" && system) push("system", system, json::object(), 0);
    push(role, m.contains("content") ? as_text(m["content"], "content") : std::nullopt, m, k);
  }
  return out;
}

std::vector<std::string> split_hh(const std::string& text) {
  static const std::string_view delims[] = {"\n\nHuman:", "\n\nAssistant:", "\n\nHum:"};
  auto strip = [](std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return std::string(s);
  };
  std::string t = strip(text);
  std::vector<std::string> parts;
  size_t pos = 0;
  for (;;) {
    size_t best = std::string::npos, len = 0;
    for (auto d : delims) {
      size_t p = t.find(d, pos);
      if (p < best) {
        best = p;
        len = d.size();
      }
    }
    if (best == std::string::npos) {
      parts.push_back(strip(std::string_view(t).substr(pos)));
      break;
    }
    parts.push_back(strip(std::string_view(t).substr(pos, best - pos)));
    pos = best + len;
  }
  if (!parts.empty() && parts[0].rfind("Human:", 0) == 0) parts[0] = strip(std::string_view(parts[0]).substr(6));
  return parts;
}

bool looks_like_hh(const std::string& s) {
  size_t first = s.find_first_not_of(" \t\r\n");
  return (first != std::string::npos && s.compare(first, 6, "Human:") == 0) ||
         s.find("\n\nHuman:") != std::string::npos || s.find("\n\nAssistant:") != std::string::npos;
}

// ---- layouts ----------------------------------------------------------------------------------------------

std::vector<ChatMessage> history_to_messages(json& r, uint64_t seed) {
  json response = take(r, "response");
  if (response.is_array()) {
    if (response.empty()) {
      response = nullptr;
    } else {
      Rng rng(seed);
      response = response[rng.below(response.size())];
    }
  }
  json history = repair(take(r, "history"), "history");
  if (history.is_null()) history = json::array();
  if (!history.is_array()) row_error("field 'history' is a JSON {}; expected [[query, response], ...]", history.type_name());
  auto query = as_text(take(r, "query"), "query");
  auto system = as_text(take(r, "system"), "system");
  std::vector<ChatMessage> out;
  if (system) out.push_back({"system", *system, "", nullptr, std::nullopt});
  for (size_t k = 0; k < history.size(); ++k) {
    const json& h = history[k];
    if (!h.is_array() || h.size() != 2) {
      row_error("field 'history' entry {} is {}; expected a [query, response] pair", k, h.dump());
    }
    if (auto q = as_text(h[0], "history")) out.push_back({"user", *q, "", nullptr, std::nullopt});
    if (auto a = as_text(h[1], "history")) out.push_back({"assistant", *a, "", nullptr, std::nullopt});
  }
  if (query) out.push_back({"user", *query, "", nullptr, std::nullopt});
  if (auto a = as_text(response, "response")) out.push_back({"assistant", *a, "", nullptr, std::nullopt});
  return out;
}

void convert_alpaca(json& r) {
  auto instruction = as_text(take(r, "instruction"), "instruction");
  auto input = as_text(take(r, "input"), "input");
  json output = take(r, "output");
  if (!output.is_null()) r["response"] = std::move(output);
  std::optional<std::string> query;
  if (truthy(instruction) && truthy(input)) {
    query = *instruction + "\n" + *input;
  } else {
    query = truthy(instruction) ? instruction : input;
  }
  if (!query) row_error("alpaca row has neither 'instruction' nor 'input'; expected at least one of them");
  r["query"] = *query;
}

void convert_preference(json& r, Sample& s, uint64_t seed) {
  json chosen = take(r, "chosen");
  json rejected = take(r, "rejected");
  if (chosen.is_null() || rejected.is_null()) {
    row_error("preference row has an empty '{}'; expected both 'chosen' and 'rejected'",
              chosen.is_null() ? "chosen" : "rejected");
  }
  if (chosen.is_string() && rejected.is_string()) {
    const auto& c = chosen.get_ref<const std::string&>();
    if (looks_like_hh(c)) {
      auto system = as_text(take(r, "system"), "system");
      s.messages = hh_transcript_to_messages(c);
      s.rejected_messages = hh_transcript_to_messages(rejected.get<std::string>());
      if (s.messages.empty() || s.rejected_messages.empty()) {
        row_error("field '{}' holds no complete Human/Assistant exchange; expected \"\\n\\nHuman: ...\\n\\n"
                  "Assistant: ...\" turns",
                  s.messages.empty() ? "chosen" : "rejected");
      }
      if (system) {
        ChatMessage sys{"system", *system, "", nullptr, std::nullopt};
        s.messages.insert(s.messages.begin(), sys);
        s.rejected_messages.insert(s.rejected_messages.begin(), sys);
      }
      return;
    }
    r["response"] = std::move(chosen);
    r["rejected_response"] = std::move(rejected);
    s.messages = history_to_messages(r, seed);
    return;
  }
  std::vector<ChatMessage> prompt;
  json q = take(r, "query");
  auto system = as_text(take(r, "system"), "system");
  if (q.is_array() || q.is_object()) {
    prompt = normalize_messages(q, system, "prompt");
  } else {
    if (system) prompt.push_back({"system", *system, "", nullptr, std::nullopt});
    if (auto text = as_text(q, "prompt")) prompt.push_back({"user", *text, "", nullptr, std::nullopt});
  }
  auto side = [&](const json& v, const char* name) {
    std::vector<ChatMessage> m = prompt;
    auto tail = normalize_messages(v, std::nullopt, name);
    m.insert(m.end(), tail.begin(), tail.end());
    return m;
  };
  s.messages = side(chosen, "chosen");
  s.rejected_messages = side(rejected, "rejected");
}

std::string column_list(const json& row) {
  std::vector<std::string> keys;
  for (auto it = row.begin(); it != row.end(); ++it) keys.push_back(it.key());
  return fmt::format("[{}]", fmt::join(keys, ", "));
}

}  // namespace

const char* row_format_name(RowFormat format) {
  switch (format) {
    case RowFormat::Messages: return "messages";
    case RowFormat::Alpaca: return "alpaca";
    case RowFormat::Response: return "query/response";
    case RowFormat::Preference: return "preference";
  }
  return "?";
}

std::string FormatPlan::describe() const {
  std::vector<std::string> parts;
  for (const auto& [from, to] : renames) parts.push_back(from + "->" + to);
  std::string s = row_format_name(format);
  if (!parts.empty()) s += fmt::format(" ({})", fmt::join(parts, ", "));
  return s;
}

FormatPlan plan_format(const std::vector<std::string>& columns, const ColumnMap& user_columns) {
  auto user = safe_renames(columns, user_columns);
  for (const auto& [from, to] : user) {
    bool exists = std::find(columns.begin(), columns.end(), to) != columns.end();
    bool moved = std::any_of(user.begin(), user.end(), [&](const auto& p) { return p.first == to; });
    if (exists && !moved) {
      fail("--columns maps '{}' to '{}', but the dataset already has a '{}' column; map that one elsewhere too or "
           "drop the mapping",
           from, to, to);
    }
  }
  std::vector<std::string> after_user = apply_renames(columns, user);
  std::set<std::string> has(after_user.begin(), after_user.end());
  FormatPlan plan;
  if (has.count("messages") || has.count("conversation") || has.count("conversations")) {
    plan.format = RowFormat::Messages;
  } else if (has.count("instruction") && has.count("input")) {
    plan.format = RowFormat::Alpaca;
  } else if (has.count("chosen") && has.count("rejected")) {
    plan.format = RowFormat::Preference;
  } else {
    plan.format = RowFormat::Response;
  }
  if (has.count("solution")) {
    plan.keep_solution = true;
    for (size_t k = 0; k < columns.size(); ++k) {
      if (after_user[k] == "solution") plan.solution_column = columns[k];
    }
  }
  ColumnMap aliases = alias_map(plan.format);
  auto alias = safe_renames(after_user, aliases);
  std::vector<std::string> final_names = apply_renames(after_user, alias);
  for (size_t k = 0; k < columns.size(); ++k) {
    if (final_names[k] != columns[k]) plan.renames.emplace_back(columns[k], final_names[k]);
  }
  return plan;
}

std::optional<Sample> convert_row(const json& row, const FormatPlan& plan, uint64_t row_seed, std::string* error) {
  try {
    if (!row.is_object()) row_error("the row is a JSON {}; expected an object", row.type_name());
    json r = json::object();
    for (auto it = row.begin(); it != row.end(); ++it) {
      auto rn = std::find_if(plan.renames.begin(), plan.renames.end(), [&](const auto& p) { return p.first == it.key(); });
      r[rn == plan.renames.end() ? it.key() : rn->second] = it.value();
    }
    Sample s;
    switch (plan.format) {
      case RowFormat::Messages: {
        json messages = take(r, "messages");
        if (messages.is_null()) {
          row_error("field 'messages' is missing or null; expected a list of messages");
        }
        auto system = as_text(take(r, "system"), "system");
        s.messages = normalize_messages(messages, system, "messages");
        break;
      }
      case RowFormat::Alpaca:
        convert_alpaca(r);
        s.messages = history_to_messages(r, row_seed);
        break;
      case RowFormat::Response:
        s.messages = history_to_messages(r, row_seed);
        break;
      case RowFormat::Preference:
        convert_preference(r, s, row_seed);
        break;
    }
    bool usable = std::any_of(s.messages.begin(), s.messages.end(), [](const auto& m) { return m.role != "system"; });
    if (!usable) {
      row_error("no usable fields (columns {}); expected messages/conversations, query/response (or an alias such "
                "as question/answer, prompt/completion, instruction/output), chosen/rejected, or text",
                column_list(row));
    }
    if (json rm = take(r, "rejected_messages"); !rm.is_null()) {
      if (!s.rejected_messages.empty()) row_error("both 'chosen/rejected' and 'rejected_messages'; give one");
      s.rejected_messages = normalize_messages(rm, std::nullopt, "rejected_messages");
    }
    if (json rr = take(r, "rejected_response"); !rr.is_null()) {
      if (!s.rejected_messages.empty()) {
        row_error("both 'rejected_response' and a rejected dialogue; give one of them");
      }
      s.rejected_response = as_text(rr, "rejected_response");
      if (*s.rejected_response == s.messages.back().content) {
        row_error("'rejected_response' equals the chosen response; expected a different response");
      }
    }
    if (!s.rejected_messages.empty() && s.rejected_messages.size() == s.messages.size()) {
      bool same = true;
      for (size_t k = 0; k < s.messages.size() && same; ++k) {
        same = s.messages[k].role == s.rejected_messages[k].role && s.messages[k].content == s.rejected_messages[k].content;
      }
      if (same) row_error("the chosen and rejected dialogues are identical; expected them to differ");
    }
    if (json label = take(r, "label"); !label.is_null()) {
      if (auto b = as_label(label)) {
        s.label = *b;
      } else {
        s.extra["label"] = nlohmann::json(label);
      }
    }
    if (json tools = take(r, "tools"); !tools.is_null()) {
      if (tools.is_string()) {
        try {
          tools = json::parse(tools.get<std::string>());
        } catch (const json::exception& e) {
          row_error("field 'tools' is a string that is not JSON ({}); expected a list of tool definitions", e.what());
        }
      }
      if (!tools.is_array()) row_error("field 'tools' is a JSON {}; expected a list of tool definitions", tools.type_name());
      s.tools = std::move(tools);
    }
    for (auto it = r.begin(); it != r.end(); ++it) s.extra[it.key()] = nlohmann::json(it.value());
    if (plan.keep_solution && !s.extra.contains("solution") && row.contains(plan.solution_column)) {
      s.extra["solution"] = nlohmann::json(row[plan.solution_column]);
    }
    return s;
  } catch (const RowError& e) {
    if (error) *error = e.what();
    return std::nullopt;
  } catch (const json::exception& e) {
    if (error) *error = std::string("unexpected value: ") + e.what();
    return std::nullopt;
  }
}

std::vector<ChatMessage> hh_transcript_to_messages(const std::string& transcript) {
  auto parts = split_hh(transcript);
  std::vector<ChatMessage> out;
  for (size_t k = 0; k + 1 < parts.size(); k += 2) {
    out.push_back({"user", parts[k], "", nullptr, std::nullopt});
    out.push_back({"assistant", parts[k + 1], "", nullptr, std::nullopt});
  }
  return out;
}

ColumnMap parse_column_map(const std::string& json_text) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("--columns: '{}' is not JSON ({}); expected an object such as '{{\"text1\": \"query\", \"text2\": "
         "\"response\"}}'",
         json_text, e.what());
  }
  if (!j.is_object()) fail("--columns: expected a JSON object of column -> name, got a {}", j.type_name());
  ColumnMap m;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!it->is_string()) fail("--columns: the value for '{}' is not a string", it.key());
    m.emplace_back(it.key(), it->get<std::string>());
  }
  return m;
}

std::vector<ChatMessage> Sample::rejected_dialogue() const {
  if (!rejected_messages.empty()) return rejected_messages;
  SWIFT_CHECK(rejected_response.has_value(), "sample {}: no rejected response or rejected messages", source);
  std::vector<ChatMessage> out = messages;
  for (auto it = out.rbegin(); it != out.rend(); ++it) {
    if (it->role == "assistant") {
      it->content = *rejected_response;
      it->tool_calls = nullptr;
      it->reasoning_content.clear();
      return out;
    }
  }
  out.push_back({"assistant", *rejected_response, "", nullptr, std::nullopt});
  return out;
}

}  // namespace swift::data
