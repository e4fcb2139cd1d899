// text/chat_template.cpp — the template registry (create, names, detect), render_text, and the Python/Jinja
// helpers every template shares (chat_template_internal.h): str.strip, `tojson`, message checks, SegmentBuilder.
//
// Invariants:
//  - names() lists exactly what create() accepts; an unknown name throws swift::Error listing them.
//  - detect() answers only from evidence: a distinctive substring of a real template we implement, or, when the
//    tokenizer carries no template, the model_type; anything else throws (see chat_template.h).
//  - py_json reproduces Python's json.dumps(ensure_ascii=False) byte for byte for every JSON value, floats
//    included (repr's shortest round-trip digits; exponent form below 1e-4 and from 1e16 up).
#include "text/chat_template.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"
#include "text/chat_template_internal.h"
#include "text/tokenizer.h"

namespace swift::text {
namespace chat_detail {

// ---- Python string semantics ------------------------------------------------------------------------------
bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

namespace {

// Decodes the UTF-8 code point starting at s[i]; returns its length in bytes (1 for an invalid byte, whose
// value is then reported as U+FFFD so it is never whitespace).
size_t decode_at(std::string_view s, size_t i, char32_t& cp) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char b = byte(i);
  size_t len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 0;
  if (len == 0 || i + len > s.size()) {
    cp = 0xfffd;
    return 1;
  }
  if (len == 1) {
    cp = b;
    return 1;
  }
  char32_t v = b & (0x7f >> len);
  for (size_t k = 1; k < len; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) {
      cp = 0xfffd;
      return 1;
    }
    v = (v << 6) | (byte(i + k) & 0x3f);
  }
  cp = v;
  return len;
}

// The start of the code point that ends at s[end - 1].
size_t start_before(std::string_view s, size_t end) {
  size_t i = end - 1;
  size_t steps = 0;
  while (i > 0 && steps < 3 && (static_cast<unsigned char>(s[i]) & 0xc0) == 0x80) {
    --i;
    ++steps;
  }
  char32_t cp;
  return decode_at(s, i, cp) == end - i ? i : end - 1;
}

}  // namespace

std::pair<size_t, size_t> py_strip_range(std::string_view s, bool left, bool right) {
  size_t begin = 0, end = s.size();
  char32_t cp;
  if (left) {
    while (begin < end) {
      size_t len = decode_at(s, begin, cp);
      if (!py_isspace(cp)) break;
      begin += len;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = start_before(s, end);
      decode_at(s, start, cp);
      if (!py_isspace(cp)) break;
      end = start;
    }
  }
  return {begin, end};
}

std::string py_strip(std::string_view s) {
  auto [begin, end] = py_strip_range(s);
  return std::string(s.substr(begin, end - begin));
}

std::string strip_chars(std::string_view s, std::string_view chars, bool left, bool right) {
  size_t begin = 0, end = s.size();
  if (left) {
    while (begin < end && chars.find(s[begin]) != std::string_view::npos) ++begin;
  }
  if (right) {
    while (end > begin && chars.find(s[end - 1]) != std::string_view::npos) --end;
  }
  return std::string(s.substr(begin, end - begin));
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// ---- tojson ------------------------------------------------------------------------------------------------
std::string py_json_string(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

namespace {

// Python's float.__repr__ (as json.dumps writes floats).
std::string py_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);  // shortest round trip
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  int exponent = std::atoi(sci.c_str() + e + 1);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  int decpt = exponent + 1;  // digits d1 d2 ... represent 0.d1d2... * 10^decpt
  std::string out = negative ? "-" : "";
  if (decpt > 16 || decpt < -3) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out += digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return out;
}

template <class J>
void dump(const J& v, int indent, int level, std::string& out) {
  using value_t = nlohmann::detail::value_t;
  auto newline = [&](int lvl) {
    out += '\n';
    out.append(static_cast<size_t>(indent * lvl), ' ');
  };
  switch (v.type()) {
    case value_t::null: out += "null"; return;
    case value_t::boolean: out += v.template get<bool>() ? "true" : "false"; return;
    case value_t::number_integer: out += std::to_string(v.template get<int64_t>()); return;
    case value_t::number_unsigned: out += std::to_string(v.template get<uint64_t>()); return;
    case value_t::number_float: out += py_float(v.template get<double>()); return;
    case value_t::string: out += py_json_string(v.template get_ref<const std::string&>()); return;
    case value_t::array:
    case value_t::object: {
      bool object = v.is_object();
      if (v.empty()) {
        out += object ? "{}" : "[]";
        return;
      }
      out += object ? '{' : '[';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(level + 1);
        if (object) {
          out += py_json_string(it.key());
          out += ": ";
        }
        dump(it.value(), indent, level + 1, out);
      }
      if (indent >= 0) newline(level);
      out += object ? '}' : ']';
      return;
    }
    default: fail("tojson: cannot serialize a binary or discarded JSON value");
  }
}

}  // namespace

std::string py_json(const nlohmann::json& value, int indent) {
  std::string out;
  dump(value, indent, 0, out);
  return out;
}
std::string py_json(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  dump(value, indent, 0, out);
  return out;
}

// ---- messages ----------------------------------------------------------------------------------------------
void template_error(const std::string& template_name, const std::string& what) {
  fail("chat template '{}': {}", template_name, what);
}

std::vector<Msg> prepare_messages(const std::string& template_name, const std::vector<ChatMessage>& messages,
                                  const TemplateOptions& options, ChatMessage& storage) {
  if (messages.empty()) template_error(template_name, "the conversation has no messages");
  std::vector<Msg> out;
  out.reserve(messages.size() + 1);
  if (options.system && messages[0].role != "system") {
    storage = ChatMessage{};
    storage.role = "system";
    storage.content = *options.system;
    out.push_back({&storage, -1});
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      template_error(template_name, fmt::format("message {} has role '{}'; expected system, user, assistant or tool",
                                                i, role));
    }
    if (!messages[i].tool_calls.is_null() && !messages[i].tool_calls.empty()) {
      if (role != "assistant") {
        template_error(template_name, fmt::format("message {} (role '{}') has tool_calls; only assistant messages "
                                                  "may", i, role));
      }
      if (!messages[i].tool_calls.is_array()) {
        template_error(template_name, fmt::format("message {}: tool_calls must be a JSON array", i));
      }
    }
    out.push_back({&messages[i], static_cast<int>(i)});
  }
  return out;
}

bool has_tools(const TemplateOptions& options) { return !options.tools.is_null() && !options.tools.empty(); }

void reject_tools(const std::string& template_name, const std::vector<Msg>& messages, const TemplateOptions& options,
                  bool allow_tool_role) {
  const std::string hint = "tool use is rendered by qwen2_5, qwen3, llama3_1 and llama3_2";
  if (has_tools(options)) template_error(template_name, "this template cannot render tool definitions; " + hint);
  for (const Msg& m : messages) {
    if (m.has_tool_calls()) {
      template_error(template_name, fmt::format("message {} has tool_calls, which this template cannot render; {}",
                                                m.index, hint));
    }
    if (!allow_tool_role && m.role() == "tool") {
      template_error(template_name, fmt::format("message {} has role 'tool', which this template cannot render; {}",
                                                m.index, hint));
    }
  }
}

const nlohmann::json& tool_function(const std::string& template_name, const nlohmann::json& tool_call) {
  if (!tool_call.is_object()) template_error(template_name, "a tool call must be a JSON object");
  auto fn = tool_call.find("function");
  const nlohmann::json& f = (fn != tool_call.end() && fn->is_object()) ? *fn : tool_call;
  auto name = f.find("name");
  if (name == f.end() || !name->is_string()) {
    template_error(template_name, "a tool call has no string \"name\": " + tool_call.dump());
  }
  if (f.find("arguments") == f.end()) {
    template_error(template_name, "tool call '" + name->get<std::string>() + "' has no \"arguments\"");
  }
  return f;
}

std::string tool_name(const std::string& template_name, const nlohmann::json& tool_call) {
  return tool_function(template_name, tool_call).at("name").get<std::string>();
}

// ---- segments ----------------------------------------------------------------------------------------------
void SegmentBuilder::push(std::string_view text, int message, bool response, bool end_of_turn,
                          bool generation_prompt) {
  if (text.empty()) return;
  if (!segments_.empty()) {
    TemplateSegment& last = segments_.back();
    if (last.message_index == message && last.response == response && last.end_of_turn == end_of_turn &&
        last.generation_prompt == generation_prompt) {
      last.text += text;
      return;
    }
  }
  TemplateSegment s;
  s.text = std::string(text);
  s.message_index = message;
  s.response = response;
  s.end_of_turn = end_of_turn;
  s.generation_prompt = generation_prompt;
  segments_.push_back(std::move(s));
}

void SegmentBuilder::add(std::string_view text, int message, bool response, bool end_of_turn) {
  push(text, message, response, end_of_turn, false);
}

void SegmentBuilder::add_generation_prompt(std::string_view text) { push(text, -1, false, false, true); }

void SegmentBuilder::add_stripped(std::initializer_list<Part> parts) {
  std::string joined;
  for (const Part& p : parts) joined += p.text;
  auto [begin, end] = py_strip_range(joined);
  size_t offset = 0;
  for (const Part& p : parts) {
    size_t lo = std::max(offset, begin), hi = std::min(offset + p.text.size(), end);
    if (lo < hi) push(p.text.substr(lo - offset, hi - lo), p.message, p.response, p.end_of_turn, false);
    offset += p.text.size();
  }
}

}  // namespace chat_detail

// ---- registry ----------------------------------------------------------------------------------------------
namespace {

struct Builtin {
  const char* name;
  std::unique_ptr<ChatTemplate> (*make)();
};

const Builtin kBuiltins[] = {
    {"qwen2_5", chat_detail::make_qwen2_5}, {"qwen3", chat_detail::make_qwen3},
    {"llama3", chat_detail::make_llama3},   {"llama3_1", chat_detail::make_llama3_1},
    {"llama3_2", chat_detail::make_llama3_2}, {"llama2", chat_detail::make_llama2},
    {"mistral", chat_detail::make_mistral}, {"chatml", chat_detail::make_chatml},
    {"phi3", chat_detail::make_phi3},       {"gemma", chat_detail::make_gemma},
};

std::string name_list() {
  std::string out;
  for (const Builtin& b : kBuiltins) out += (out.empty() ? "" : ", ") + std::string(b.name);
  return out;
}

bool contains(std::string_view text, std::string_view needle) { return text.find(needle) != std::string_view::npos; }

// The built-in whose real template this is, by substrings no other known template has; "" when none.
std::string detect_from_text(std::string_view t) {
  if (contains(t, "<|im_start|>")) {
    if (contains(t, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")) return "qwen2_5";
    if (contains(t, "last_query_index") && contains(t, "reasoning_content") && contains(t, "enable_thinking")) {
      return "qwen3";
    }
    if (contains(t, "You are a helpful AI assistant named SmolLM, trained by Hugging Face") &&
        !contains(t, "think")) {
      return "chatml";
    }
    return "";
  }
  if (contains(t, "<|start_header_id|>") && contains(t, "<|eot_id|>")) {
    if (contains(t, "Cutting Knowledge Date")) return contains(t, "strftime_now") ? "llama3_2" : "llama3_1";
    if (contains(t, "'<|start_header_id|>' + message['role'] + '<|end_header_id|>")) return "llama3";
    return "";
  }
  if (contains(t, "<<SYS>>") && contains(t, "[INST] ")) return "llama2";
  if (contains(t, "\"[INST]\" + message[\"content\"] + \"[/INST]\"")) return "mistral";
  if (contains(t, "<|user|>") && contains(t, "<|assistant|>") && contains(t, "<|end|>")) return "phi3";
  if (contains(t, "<start_of_turn>") && contains(t, "<end_of_turn>") && contains(t, "model")) return "gemma";
  return "";
}

}  // namespace

std::unique_ptr<ChatTemplate> ChatTemplate::create(const std::string& name) {
  for (const Builtin& b : kBuiltins) {
    if (name == b.name) return b.make();
  }
  fail("--template '{}': unknown chat template; built-in templates: {}", name, name_list());
}

std::vector<std::string> ChatTemplate::names() {
  std::vector<std::string> out;
  for (const Builtin& b : kBuiltins) out.emplace_back(b.name);
  return out;
}

std::string ChatTemplate::detect(const std::string& model_type, const Tokenizer& tokenizer) {
  const std::string& text = tokenizer.chat_template();
  if (!text.empty()) {
    std::string name = detect_from_text(text);
    if (!name.empty()) return name;
    fail("the tokenizer's chat template (model_type '{}') is none of the built-in templates, so swift.cpp cannot "
         "render it; pass --template with one of: {} (only if the model was trained with that format)",
         model_type, name_list());
  }
  if (model_type == "qwen2") return "qwen2_5";
  if (model_type == "qwen3") return "qwen3";
  if (model_type == "mistral") return "mistral";
  if (model_type == "phi3") return "phi3";
  if (model_type == "gemma" || model_type == "gemma2") return "gemma";
  if (model_type == "llama") {
    if (tokenizer.token_to_id("<|start_header_id|>") >= 0 && tokenizer.token_to_id("<|eot_id|>") >= 0) return "llama3";
    if (tokenizer.token_to_id("<|im_start|>") >= 0 && tokenizer.token_to_id("<|im_end|>") >= 0) return "chatml";
    return "llama2";
  }
  fail("cannot pick a chat template: the tokenizer has none and model_type '{}' has no default; pass --template "
       "with one of: {}", model_type, name_list());
}

std::string ChatTemplate::render_text(const std::vector<ChatMessage>& messages, const TemplateOptions& options) const {
  std::string text;
  for (const TemplateSegment& s : render(messages, options)) text += s.text;
  return text;
}

LossScale loss_scale_from_string(const std::string& name) {
  if (name == "default") return LossScale::Default;
  if (name == "last_round") return LossScale::LastRound;
  if (name == "all") return LossScale::All;
  fail("--loss_scale '{}': expected default, last_round or all", name);
}

}  // namespace swift::text
