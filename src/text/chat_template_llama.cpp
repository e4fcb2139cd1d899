// text/chat_template_llama.cpp — llama3 (Llama-3-Instruct), llama3_1 / llama3_2 (Llama-3.1/3.2-Instruct, with
// the "Cutting Knowledge Date" system header and tool calling) and llama2 (Llama-2-chat, [INST] <<SYS>>), from
// their real Jinja templates.
//
// Invariants (what the Jinja does, and so what we do):
//  - Jinja `| trim` and Python's str.strip() strip Unicode whitespace (U+00A0, U+3000, ...): py_strip.
//  - llama3: "<|begin_of_text|>" then every message as "<|start_header_id|>{role}<|end_header_id|>\n\n
//    {content|trim}<|eot_id|>", any role. Meta's first Llama-3-Instruct template appended the assistant header
//    even without add_generation_prompt; we follow the later fix (header only with add_generation_prompt).
//  - llama3_1/llama3_2: a system block always: "Cutting Knowledge Date: December 2023\nToday Date: {date}\n\n"
//    then the system message (trimmed) if the conversation starts with one. Date: options.date_string, else
//    llama3_1 "26 Jul 2024" (the 3.1 template's fixed default: transformers passes no date_string) and llama3_2
//    today's local date "%d %b %Y" (the 3.2 template calls strftime_now; so does ms-swift's llama3_2). With
//    tools: "Environment: ipython\n" opens the system block and the tool list (json, indent 4) goes into the
//    first message after the system one (tools_in_user_message, the template's default). An assistant message
//    with tool_calls renders exactly one call as {"name": ..., "parameters": ...} (more throws, as the template
//    does; its content is dropped); a tool message renders under the "ipython" header as json.dumps of its
//    content: a string comes out quoted (the template's `content is iterable` holds for strings).
//    builtin_tools (brave_search, wolfram_alpha, <|eom_id|>) are not supported.
//  - llama2: roles must alternate user/assistant after an optional first system message (else throw, as the
//    template raises); the system goes into the first user turn as "<<SYS>>\n{system}\n<</SYS>>\n\n"; each user
//    turn is "<s>[INST] {strip(content)} [/INST]", each assistant turn " {strip(content)} </s>".
//    add_generation_prompt adds nothing ("[/INST]" already ends the prompt).
//  - Segments: the header (or nothing, llama2) is the prompt part of an assistant turn; its content is the
//    response and "<|eot_id|>" / " </s>" the end-of-turn.
#include <ctime>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "text/chat_template.h"
#include "text/chat_template_internal.h"

namespace swift::text::chat_detail {
namespace {

std::string header(const std::string& role) { return "<|start_header_id|>" + role + "<|end_header_id|>\n\n"; }

class Llama3Template final : public ChatTemplate {
 public:
  std::string name() const override { return "llama3"; }
  std::string default_system() const override { return ""; }

  std::vector<TemplateSegment> render(const std::vector<ChatMessage>& messages,
                                      const TemplateOptions& options) const override {
    ChatMessage system_storage;
    std::vector<Msg> msgs = prepare_messages(name(), messages, options, system_storage);
    reject_tools(name(), msgs, options, /*allow_tool_role=*/true);
    SegmentBuilder b;
    b.add("<|begin_of_text|>", -1);
    for (const Msg& m : msgs) {
      const bool assistant = m.role() == "assistant";
      b.add(header(m.role()), m.index);
      b.add_stripped({Part{m.content(), m.index, assistant}});
      b.add("<|eot_id|>", m.index, assistant, assistant);
    }
    if (options.add_generation_prompt) b.add_generation_prompt(header("assistant"));
    return b.take();
  }
};

class Llama31Template final : public ChatTemplate {
 public:
  explicit Llama31Template(bool today) : today_(today) {}
  std::string name() const override { return today_ ? "llama3_2" : "llama3_1"; }
  std::string default_system() const override { return ""; }

  std::vector<TemplateSegment> render(const std::vector<ChatMessage>& messages,
                                      const TemplateOptions& options) const override {
    ChatMessage system_storage;
    std::vector<Msg> msgs = prepare_messages(name(), messages, options, system_storage);
    const bool tools = has_tools(options);
    SegmentBuilder b;
    b.add("<|begin_of_text|>", -1);
    size_t k = 0;
    int system_index = -1;
    std::string system;
    if (msgs[0].role() == "system") {
      system_index = msgs[0].index;
      system = msgs[0].content();
      k = 1;
    }
    std::string head = "<|start_header_id|>system<|end_header_id|>\n\n";
    if (tools) head += "Environment: ipython\n";
    head += "Cutting Knowledge Date: December 2023\nToday Date: " + date(options) + "\n\n";
    b.add(head, system_index);
    b.add_stripped({Part{system, system_index}});
    b.add("<|eot_id|>", system_index);
    if (tools) {
      if (k == msgs.size()) template_error(name(), "tools need a first user message to go into; there is none");
      const Msg& first = msgs[k++];
      std::string s = header("user") +
                      "Given the following functions, please respond with a JSON for a function call with its proper "
                      "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function "
                      "name, \"parameters\": dictionary of argument name and its value}.Do not use variables.\n\n";
      for (const auto& tool : options.tools) s += py_json(tool, 4) + "\n\n";
      b.add(s, first.index);
      b.add_stripped({Part{first.content(), first.index}});
      b.add("<|eot_id|>", first.index);
    }
    for (; k < msgs.size(); ++k) {
      const Msg& m = msgs[k];
      if (m.has_tool_calls()) {
        if (m.m->tool_calls.size() != 1) {
          template_error(name(), fmt::format("message {} has {} tool calls; Llama 3.1/3.2 render exactly one per "
                                             "assistant message (the template raises otherwise)",
                                             m.index, m.m->tool_calls.size()));
        }
        const nlohmann::json& f = tool_function(name(), m.m->tool_calls[0]);
        b.add(header("assistant"), m.index);
        b.add("{\"name\": \"" + f.at("name").get<std::string>() + "\", \"parameters\": " +
                  py_json(f.at("arguments")) + "}",
              m.index, true);
        b.add("<|eot_id|>", m.index, true, true);
      } else if (m.role() == "tool") {
        b.add(header("ipython") + py_json_string(m.content()) + "<|eot_id|>", m.index);
      } else {
        const bool assistant = m.role() == "assistant";
        b.add(header(m.role()), m.index);
        b.add_stripped({Part{m.content(), m.index, assistant}});
        b.add("<|eot_id|>", m.index, assistant, assistant);
      }
    }
    if (options.add_generation_prompt) b.add_generation_prompt(header("assistant"));
    return b.take();
  }

 private:
  std::string date(const TemplateOptions& options) const {
    if (options.date_string) return *options.date_string;
    if (!today_) return "26 Jul 2024";
    std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[32];
    std::strftime(buf, sizeof(buf), "%d %b %Y", &local);
    return buf;
  }

  bool today_;
};

class Llama2Template final : public ChatTemplate {
 public:
  std::string name() const override { return "llama2"; }
  std::string default_system() const override { return ""; }

  std::vector<TemplateSegment> render(const std::vector<ChatMessage>& messages,
                                      const TemplateOptions& options) const override {
    ChatMessage system_storage;
    std::vector<Msg> msgs = prepare_messages(name(), messages, options, system_storage);
    reject_tools(name(), msgs, options, /*allow_tool_role=*/false);
    size_t start = 0;
    int system_index = -1;
    std::string system_block;
    const bool has_system = msgs[0].role() == "system";
    if (has_system) {
      system_index = msgs[0].index;
      system_block = "<<SYS>>\n" + msgs[0].content() + "\n<</SYS>>\n\n";
      start = 1;
    }
    for (size_t k = start; k < msgs.size(); ++k) {
      const bool user_expected = (k - start) % 2 == 0;
      if (msgs[k].role() != (user_expected ? "user" : "assistant")) {
        template_error(name(), fmt::format("message {} has role '{}': after an optional first system message, "
                                           "roles must alternate user/assistant/user/assistant/...",
                                           msgs[k].index, msgs[k].role()));
      }
    }
    SegmentBuilder b;
    for (size_t k = start; k < msgs.size(); ++k) {
      const Msg& m = msgs[k];
      if (m.role() == "user") {
        b.add("<s>[INST] ", m.index);
        if (k == start && has_system) {
          b.add_stripped({Part{system_block, system_index}, Part{m.content(), m.index}});
        } else {
          b.add_stripped({Part{m.content(), m.index}});
        }
        b.add(" [/INST]", m.index);
      } else {
        b.add(" ", m.index, true);
        b.add_stripped({Part{m.content(), m.index, true}});
        b.add(" </s>", m.index, true, true);
      }
    }
    return b.take();  // a lone system message renders nothing: the template has no user turn to carry it
  }
};

}  // namespace

std::unique_ptr<ChatTemplate> make_llama3() { return std::make_unique<Llama3Template>(); }
std::unique_ptr<ChatTemplate> make_llama3_1() { return std::make_unique<Llama31Template>(false); }
std::unique_ptr<ChatTemplate> make_llama3_2() { return std::make_unique<Llama31Template>(true); }
std::unique_ptr<ChatTemplate> make_llama2() { return std::make_unique<Llama2Template>(); }

}  // namespace swift::text::chat_detail
