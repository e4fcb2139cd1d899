// text/chat_template.h — built-in chat templates (C++, no Jinja at run time) and per-token loss masks following
// ms-swift's --loss_scale.
//
// Invariants:
//  - For every built-in template, render_text() equals Hugging Face `apply_chat_template(messages,
//    tokenize=False, add_generation_prompt=...)` with the model's real Jinja template, and encode_chat()'s ids
//    equal `apply_chat_template(..., tokenize=True)` (fixtures made with transformers).
//  - A template renders to segments; every character of the text belongs to exactly one segment, and segment
//    boundaries fall where tokenization cannot merge across them (special tokens, or as the tests prove), so
//    tokenizing segment by segment gives the same ids as tokenizing the whole text.
//  - Loss masks: `default` trains on every assistant response (its content and the end-of-turn tokens that
//    follow it, as ms-swift does), `last_round` only on the last assistant response, `all` on every token;
//    a message's "loss": true/false overrides for that message. The generation prompt is never trained.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "text/tokenizer.h"

namespace swift::text {

struct ChatMessage {
  std::string role;               // system | user | assistant | tool
  std::string content;
  std::string reasoning_content;  // qwen3 thinking (<think>...</think>) when given separately
  nlohmann::json tool_calls;      // assistant tool calls (null when none)
  std::optional<bool> loss;       // per-message override of the loss mask
};

enum class LossScale { Default, LastRound, All };
LossScale loss_scale_from_string(const std::string& name);  // "default", "last_round", "all"; throws otherwise

struct TemplateOptions {
  std::optional<std::string> system;  // --system: replaces the template's default system prompt
  bool add_generation_prompt = false; // append the assistant header (inference)
  bool enable_thinking = true;        // qwen3: false renders an empty think block, as its template does
};

struct TemplateSegment {
  std::string text;
  int message_index = -1;  // the message this text renders (-1: template scaffolding, e.g. the BOS token)
  bool response = false;   // part of an assistant response (content and its end-of-turn tokens)
};

class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;
  // Built-in names: qwen2_5, qwen3, llama3, llama3_1 (alias llama3_2), llama2, mistral, chatml, phi3, gemma.
  static std::unique_ptr<ChatTemplate> create(const std::string& name);
  static std::vector<std::string> names();
  // Picks the template from --template, else from the tokenizer's own chat template text / model type.
  static std::string detect(const std::string& model_type, const Tokenizer& tokenizer);

  virtual std::string name() const = 0;
  virtual std::string default_system() const = 0;  // empty when the template has none
  virtual std::vector<TemplateSegment> render(const std::vector<ChatMessage>& messages,
                                              const TemplateOptions& options) const = 0;
  std::string render_text(const std::vector<ChatMessage>& messages, const TemplateOptions& options) const;
};

struct EncodedChat {
  std::vector<int32_t> ids;
  std::vector<uint8_t> loss_mask;  // 1: the token is a training target
};
EncodedChat encode_chat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                        const std::vector<ChatMessage>& messages, const TemplateOptions& options, LossScale loss_scale);

}  // namespace swift::text
