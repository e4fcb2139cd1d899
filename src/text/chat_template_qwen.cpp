// text/chat_template_qwen.cpp — qwen2_5 (Qwen2.5-Instruct) and qwen3 (Qwen3, hybrid thinking), rewritten in C++
// from their real Jinja templates (../shared/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja,
// Qwen-Qwen3-0.6B.jinja).
//
// Invariants (what the Jinja does, and so what we do):
//  - ChatML turns "<|im_start|>{role}\n{content}<|im_end|>\n"; the first message, when it is a system message,
//    is the system block; later system messages render as ordinary turns.
//  - qwen2_5 always has a system block: without a system message it uses "You are Qwen, created by Alibaba
//    Cloud. You are a helpful assistant."; with tools the tool list is appended to that block. qwen3 has no
//    default system; with tools it opens a system block anyway.
//  - Consecutive tool messages share one "<|im_start|>user" turn of "<tool_response>" blocks.
//  - qwen3: thinking comes from reasoning_content, else from "<think>...</think>" in the content (split at the
//    last "</think>"). An assistant turn after the last real user query (tool-response user turns do not count)
//    renders "<think>\n{reasoning}\n</think>\n\n{content}" when it is the last message or has reasoning; every
//    earlier assistant turn renders its content without the think block. enable_thinking=false appends
//    "<think>\n\n</think>\n\n" to the generation prompt.
//  - Segments: "<|im_start|>assistant\n" is the prompt part of an assistant turn; everything after it up to
//    "<|im_end|>\n" is the response (think block and tool calls included); "<|im_end|>\n" is its end-of-turn.
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "text/chat_template_internal.h"

namespace swift::text::chat_detail {
namespace {

constexpr const char* kQwen25DefaultSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr const char* kToolsIntro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\n<tools>";
constexpr const char* kToolsOutro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

std::string tools_block(const TemplateOptions& options) {
  std::string s = kToolsIntro;
  for (const auto& tool : options.tools) {
    s += '\n';
    s += py_json(tool);
  }
  s += kToolsOutro;
  return s;
}

// A tool message: opens the shared user turn when the previous message is not a tool, closes it when the next
// is not.
void add_tool_message(SegmentBuilder& b, const std::vector<Msg>& msgs, size_t k) {
  const Msg& m = msgs[k];
  if (k == 0 || msgs[k - 1].role() != "tool") b.add("<|im_start|>user", m.index);
  b.add("\n<tool_response>\n" + m.content() + "\n</tool_response>", m.index);
  if (k + 1 == msgs.size() || msgs[k + 1].role() != "tool") b.add("<|im_end|>\n", m.index);
}

class Qwen25Template final : public ChatTemplate {
 public:
  std::string name() const override { return "qwen2_5"; }
  std::string default_system() const override { return kQwen25DefaultSystem; }

  std::vector<TemplateSegment> render(const std::vector<ChatMessage>& messages,
                                      const TemplateOptions& options) const override {
    ChatMessage system_storage;
    std::vector<Msg> msgs = prepare_messages(name(), messages, options, system_storage);
    SegmentBuilder b;
    const bool first_is_system = msgs[0].role() == "system";
    const int system_index = first_is_system ? msgs[0].index : -1;
    const std::string system = first_is_system ? msgs[0].content() : std::string(kQwen25DefaultSystem);
    if (has_tools(options)) {
      b.add("<|im_start|>system\n" + system + "\n\n" + tools_block(options), system_index);
    } else {
      b.add("<|im_start|>system\n" + system + "<|im_end|>\n", system_index);
    }
    for (size_t k = 0; k < msgs.size(); ++k) {
      const Msg& m = msgs[k];
      const std::string& role = m.role();
      if (role == "user" || (role == "system" && k > 0)) {
        b.add("<|im_start|>" + role + "\n" + m.content() + "<|im_end|>\n", m.index);
      } else if (role == "assistant") {
        b.add("<|im_start|>assistant\n", m.index);
        if (!m.has_tool_calls()) {
          b.add(m.content(), m.index, true);
        } else {
          // Jinja: '<|im_start|>assistant' ['\n' + content] then '\n<tool_call>...' per call: the first '\n' is
          // always there, so it sits in the prompt part above.
          std::string body = m.content();
          bool first = body.empty();
          for (const nlohmann::json& call : m.m->tool_calls) {
            const nlohmann::json& f = tool_function(name(), call);
            body += first ? "" : "\n";
            first = false;
            body += "<tool_call>\n{\"name\": \"" + f.at("name").get<std::string>() + "\", \"arguments\": " +
                    py_json(f.at("arguments")) + "}\n</tool_call>";
          }
          b.add(body, m.index, true);
        }
        b.add("<|im_end|>\n", m.index, true, true);
      } else if (role == "tool") {
        add_tool_message(b, msgs, k);
      }
    }
    if (options.add_generation_prompt) b.add_generation_prompt("<|im_start|>assistant\n");
    return b.take();
  }
};

class Qwen3Template final : public ChatTemplate {
 public:
  std::string name() const override { return "qwen3"; }
  std::string default_system() const override { return ""; }

  std::vector<TemplateSegment> render(const std::vector<ChatMessage>& messages,
                                      const TemplateOptions& options) const override {
    ChatMessage system_storage;
    std::vector<Msg> msgs = prepare_messages(name(), messages, options, system_storage);
    SegmentBuilder b;
    const bool first_is_system = msgs[0].role() == "system";
    if (has_tools(options)) {
      std::string s = "<|im_start|>system\n";
      if (first_is_system) s += msgs[0].content() + "\n\n";
      b.add(s + tools_block(options), first_is_system ? msgs[0].index : -1);
    } else if (first_is_system) {
      b.add("<|im_start|>system\n" + msgs[0].content() + "<|im_end|>\n", msgs[0].index);
    }
    // The last user message that is a real query (not a wrapped tool response).
    size_t last_query = msgs.size() - 1;
    for (size_t k = msgs.size(); k-- > 0;) {
      const std::string& c = msgs[k].content();
      if (msgs[k].role() == "user" && !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
        last_query = k;
        break;
      }
    }
    for (size_t k = 0; k < msgs.size(); ++k) {
      const Msg& m = msgs[k];
      const std::string& role = m.role();
      if (role == "user" || (role == "system" && k > 0)) {
        b.add("<|im_start|>" + role + "\n" + m.content() + "<|im_end|>\n", m.index);
      } else if (role == "assistant") {
        add_assistant(b, m, k > last_query && (k + 1 == msgs.size() || has_reasoning(m)));
      } else if (role == "tool") {
        add_tool_message(b, msgs, k);
      }
    }
    if (options.add_generation_prompt) {
      b.add_generation_prompt(options.enable_thinking ? "<|im_start|>assistant\n"
                                                      : "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    }
    return b.take();
  }

 private:
  struct Split {
    std::string content, reasoning;
  };

  static Split split(const ChatMessage& m) {
    if (!m.reasoning_content.empty()) return {m.content, m.reasoning_content};
    const std::string& c = m.content;
    size_t close = c.find("</think>");
    if (close == std::string::npos) return {c, ""};
    // content.split('</think>')[-1].lstrip('\n'); reasoning: split('</think>')[0].rstrip('\n')
    //   .split('<think>')[-1].lstrip('\n')
    std::string content = strip_chars(std::string_view(c).substr(c.rfind("</think>") + 8), "\n", true, false);
    std::string before = strip_chars(std::string_view(c).substr(0, close), "\n", false, true);
    size_t open = before.rfind("<think>");
    if (open != std::string::npos) before = before.substr(open + 7);
    return {content, strip_chars(before, "\n", true, false)};
  }

  static bool has_reasoning(const Msg& m) { return !split(*m.m).reasoning.empty(); }

  void add_assistant(SegmentBuilder& b, const Msg& m, bool with_think) const {
    Split s = split(*m.m);
    b.add("<|im_start|>assistant\n", m.index);
    std::string body = with_think ? "<think>\n" + strip_chars(s.reasoning, "\n", true, true) + "\n</think>\n\n" +
                                        strip_chars(s.content, "\n", true, false)
                                  : s.content;
    if (m.has_tool_calls()) {
      bool first = true;
      for (const nlohmann::json& call : m.m->tool_calls) {
        const nlohmann::json& f = tool_function(name(), call);
        if (!first || !s.content.empty()) body += "\n";
        first = false;
        const nlohmann::json& args = f.at("arguments");
        body += "<tool_call>\n{\"name\": \"" + f.at("name").get<std::string>() + "\", \"arguments\": " +
                (args.is_string() ? args.get<std::string>() : py_json(args)) + "}\n</tool_call>";
      }
    }
    b.add(body, m.index, true);
    b.add("<|im_end|>\n", m.index, true, true);
  }
};

}  // namespace

std::unique_ptr<ChatTemplate> make_qwen2_5() { return std::make_unique<Qwen25Template>(); }
std::unique_ptr<ChatTemplate> make_qwen3() { return std::make_unique<Qwen3Template>(); }

}  // namespace swift::text::chat_detail
