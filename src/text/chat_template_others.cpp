// text/chat_template_others.cpp — chatml (SmolLM2-Instruct's template), mistral (Mistral-Nemo-Instruct-2407),
// phi3 (Phi-3.5-mini-instruct) and gemma (Gemma-2-it), from their real Jinja templates.
//
// Invariants (what the Jinja does, and so what we do):
//  - chatml: "<|im_start|>{role}\n{content}<|im_end|>\n" for every message, any role (a tool message renders as
//    role "tool"); without a first system message it opens with SmolLM2's "You are a helpful AI assistant named
//    SmolLM, trained by Hugging Face". tool_calls and tool definitions throw (the template would drop them).
//  - mistral (Nemo): "<s>" then "[INST]{user}[/INST]" and "{assistant}</s>" with no spaces; roles must alternate
//    (else throw, as the template raises). The system message is put into the LAST user turn
//    ("[INST]{system}\n\n{user}[/INST]") only when that user turn is the last message: a conversation that ends
//    with an assistant reply renders without its system message. This is the real template's behaviour (kept,
//    since text must equal Hugging Face's). add_generation_prompt adds nothing. Tools throw (Nemo's
//    [AVAILABLE_TOOLS]/[TOOL_CALLS] need 9-character call ids we do not carry).
//  - phi3: "<|system|>\n...<|end|>\n" (only when the system content is non-empty), "<|user|>\n...<|end|>\n",
//    "<|assistant|>\n...<|end|>\n"; then "<|assistant|>\n" with add_generation_prompt, else the eos token
//    "<|endoftext|>" (template scaffolding: not part of any turn, trained only under loss_scale all).
//  - gemma: Gemma-2 raises on a system message; we merge it into the first user turn as
//    "{system}\n\n{user content}" (what Gemma-3's template does), then apply the Gemma-2 rendering:
//    "<bos>" + "<start_of_turn>{user|model}\n{content|trim}<end_of_turn>\n"; roles must alternate starting with
//    user (else throw, as the template raises).
//  - Segments: the role header is the prompt part of an assistant turn; content is the response and the
//    closing tag (with its newline) the end-of-turn.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "text/chat_template.h"
#include "text/chat_template_internal.h"

namespace swift::text::chat_detail {
namespace {

constexpr const char* kSmolLMSystem = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

class ChatmlTemplate final : public ChatTemplate {
 public:
  std::string name() const override { return "chatml"; }
  std::string default_system() const override { return kSmolLMSystem; }

  std::vector<TemplateSegment> render(const std::vector<ChatMessage>& messages,
                                      const TemplateOptions& options) const override {
    ChatMessage system_storage;
    std::vector<Msg> msgs = prepare_messages(name(), messages, options, system_storage);
    reject_tools(name(), msgs, options, /*allow_tool_role=*/true);
    SegmentBuilder b;
    if (msgs[0].role() != "system") b.add(std::string("<|im_start|>system\n") + kSmolLMSystem + "<|im_end|>\n", -1);
    for (const Msg& m : msgs) {
      const bool assistant = m.role() == "assistant";
      b.add("<|im_start|>" + m.role() + "\n", m.index);
      b.add(m.content(), m.index, assistant);
      b.add("<|im_end|>\n", m.index, assistant, assistant);
    }
    if (options.add_generation_prompt) b.add_generation_prompt("<|im_start|>assistant\n");
    return b.take();
  }
};

// Throws unless roles alternate user, assistant, user, ... from msgs[start].
void require_alternation(const std::string& name, const std::vector<Msg>& msgs, size_t start, const char* note) {
  for (size_t k = start; k < msgs.size(); ++k) {
    const char* expected = (k - start) % 2 == 0 ? "user" : "assistant";
    if (msgs[k].role() != expected) {
      template_error(name, fmt::format("message {} has role '{}' where '{}' is expected: {}", msgs[k].index,
                                       msgs[k].role(), expected, note));
    }
  }
}

class MistralTemplate final : public ChatTemplate {
 public:
  std::string name() const override { return "mistral"; }
  std::string default_system() const override { return ""; }

  std::vector<TemplateSegment> render(const std::vector<ChatMessage>& messages,
                                      const TemplateOptions& options) const override {
    ChatMessage system_storage;
    std::vector<Msg> msgs = prepare_messages(name(), messages, options, system_storage);
    reject_tools(name(), msgs, options, /*allow_tool_role=*/false);
    const bool has_system = msgs[0].role() == "system";
    const size_t start = has_system ? 1 : 0;
    require_alternation(name(), msgs, start,
                        "after an optional first system message, roles must alternate user/assistant/...");
    SegmentBuilder b;
    b.add("<s>", -1);
    for (size_t k = start; k < msgs.size(); ++k) {
      const Msg& m = msgs[k];
      if (m.role() == "user") {
        b.add("[INST]", m.index);
        if (has_system && k + 1 == msgs.size()) b.add(msgs[0].content() + "\n\n", msgs[0].index);
        b.add(m.content() + "[/INST]", m.index);
      } else {
        b.add(m.content(), m.index, true);
        b.add("</s>", m.index, true, true);
      }
    }
    return b.take();
  }
};

class Phi3Template final : public ChatTemplate {
 public:
  std::string name() const override { return "phi3"; }
  std::string default_system() const override { return ""; }

  std::vector<TemplateSegment> render(const std::vector<ChatMessage>& messages,
                                      const TemplateOptions& options) const override {
    ChatMessage system_storage;
    std::vector<Msg> msgs = prepare_messages(name(), messages, options, system_storage);
    reject_tools(name(), msgs, options, /*allow_tool_role=*/false);
    SegmentBuilder b;
    for (const Msg& m : msgs) {
      if (m.role() == "system") {
        if (!m.content().empty()) b.add("<|system|>\n" + m.content() + "<|end|>\n", m.index);
      } else if (m.role() == "user") {
        b.add("<|user|>\n" + m.content() + "<|end|>\n", m.index);
      } else {
        b.add("<|assistant|>\n", m.index);
        b.add(m.content(), m.index, true);
        b.add("<|end|>\n", m.index, true, true);
      }
    }
    if (options.add_generation_prompt) {
      b.add_generation_prompt("<|assistant|>\n");
    } else {
      b.add("<|endoftext|>", -1);
    }
    return b.take();
  }
};

class GemmaTemplate final : public ChatTemplate {
 public:
  std::string name() const override { return "gemma"; }
  std::string default_system() const override { return ""; }

  std::vector<TemplateSegment> render(const std::vector<ChatMessage>& messages,
                                      const TemplateOptions& options) const override {
    ChatMessage system_storage;
    std::vector<Msg> msgs = prepare_messages(name(), messages, options, system_storage);
    reject_tools(name(), msgs, options, /*allow_tool_role=*/false);
    const bool has_system = msgs[0].role() == "system";
    const size_t start = has_system ? 1 : 0;
    if (has_system && (msgs.size() < 2 || msgs[1].role() != "user")) {
      template_error(name(), "Gemma has no system role: the system message is merged into the first user turn, so "
                             "a user message must follow it");
    }
    require_alternation(name(), msgs, start,
                        "Gemma conversations alternate user/assistant/... (a system message may come first)");
    SegmentBuilder b;
    b.add("<bos>", -1);
    for (size_t k = start; k < msgs.size(); ++k) {
      const Msg& m = msgs[k];
      if (m.role() == "user") {
        b.add("<start_of_turn>user\n", m.index);
        if (k == start && has_system) {
          const std::string system = msgs[0].content() + "\n\n";
          b.add_stripped({Part{system, msgs[0].index}, Part{m.content(), m.index}});
        } else {
          b.add_stripped({Part{m.content(), m.index}});
        }
        b.add("<end_of_turn>\n", m.index);
      } else {
        b.add("<start_of_turn>model\n", m.index);
        b.add_stripped({Part{m.content(), m.index, true}});
        b.add("<end_of_turn>\n", m.index, true, true);
      }
    }
    if (options.add_generation_prompt) b.add_generation_prompt("<start_of_turn>model\n");
    return b.take();
  }
};

}  // namespace

std::unique_ptr<ChatTemplate> make_chatml() { return std::make_unique<ChatmlTemplate>(); }
std::unique_ptr<ChatTemplate> make_mistral() { return std::make_unique<MistralTemplate>(); }
std::unique_ptr<ChatTemplate> make_phi3() { return std::make_unique<Phi3Template>(); }
std::unique_ptr<ChatTemplate> make_gemma() { return std::make_unique<GemmaTemplate>(); }

}  // namespace swift::text::chat_detail
