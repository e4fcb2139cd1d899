// text/chat_template.h — built-in chat templates (C++, no Jinja at run time) and per-token loss masks following
// ms-swift's --loss_scale.
//
// Invariants:
//  - For every built-in template, render_text() equals Hugging Face `apply_chat_template(messages,
//    tokenize=False, add_generation_prompt=...)` with the model's real Jinja template, and encode_chat()'s ids
//    equal `apply_chat_template(..., tokenize=True)` (fixtures made with transformers:
//    scripts/golden/make_chat_template_fixtures.py). Where a real template silently drops or raises, we say so
//    in the template's file (e.g. Gemma-2 has no system role: we merge it into the first user turn).
//  - A template renders to segments; every byte of the text belongs to exactly one segment, in order.
//    encode_chat() tokenizes the whole text once (so its ids are exactly the tokenizer's) and maps segment
//    boundaries onto tokens: a token that straddles a boundary belongs to the later segment.
//  - Loss masks (ms-swift 3.x/4.x: swift/loss_scale/base.py, Template._swift_encode, Template._add_dynamic_eos):
//      default    every assistant response: its content (with qwen3's think block and tool calls) and the
//                 end-of-turn tokens that close it ("<|im_end|>\n", "<|eot_id|>", " </s>", "<end_of_turn>\n",
//                 "<|end|>\n"); ms-swift trains them as the template suffix (last turn) and through
//                 _add_dynamic_eos (earlier turns, when the response before them is trained);
//      last_round only the responses after the last user message (ms-swift's get_last_user_round: an agent
//                 turn of assistant tool calls + tool results + answer after the last user query counts whole);
//      all        every token (system, user, tool results, headers, BOS);
//      a message's "loss" true/false overrides the default for that assistant response and its end-of-turn
//      (under `all`, loss=false untrains the response content only, as ms-swift does); "loss" on other roles is
//      ignored, as in ms-swift. The generation prompt is never trained, and neither is token 0 (ms-swift sets
//      labels[0] = -100: nothing predicts the first token). Two corner cases differ from ms-swift on purpose:
//      there, the final end-of-turn is trained even when its response has loss=false, and the end-of-turn of an
//      earlier response with empty content is not trained; here the end-of-turn always follows its response.
//  - Templates are stateless: create() once, then render / encode_chat from any number of threads.
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
  std::string reasoning_content;  // qwen3 thinking (<think>...</think>) when given separately (empty: none)
  // Assistant tool calls (null or [] when none): [{"type": "function", "function": {"name": ..., "arguments":
  // {...} or "json text"}}] (the "function" wrapper is optional). Object arguments are serialized in
  // nlohmann::json's key order (sorted); a string is rendered as each template does with strings.
  nlohmann::json tool_calls;
  std::optional<bool> loss;       // per-message override of the loss mask (assistant messages)
};

enum class LossScale { Default, LastRound, All };
LossScale loss_scale_from_string(const std::string& name);  // "default", "last_round", "all"; throws otherwise

struct TemplateOptions {
  // --system: replaces the template's default system prompt. It acts exactly as a system message placed first
  // when the conversation does not start with one (a conversation's own system message wins); "" is an empty
  // system message (rendered as such where the template renders empty ones).
  std::optional<std::string> system;
  bool add_generation_prompt = false; // append the assistant header (inference)
  bool enable_thinking = true;        // qwen3: false renders an empty think block, as its template does
  // Tool definitions (the `tools` argument of apply_chat_template: a JSON array of {"type": "function",
  // "function": {...}}); null/empty: none. Rendered by qwen2_5, qwen3, llama3_1/llama3_2; other templates
  // throw. ordered_json keeps the caller's key order, which the templates serialize (`tojson`).
  nlohmann::ordered_json tools;
  // llama3_1/llama3_2: the "Today Date" of the system header (Jinja `date_string`). Unset: llama3_1 renders
  // "26 Jul 2024" (the 3.1 template's default), llama3_2 today's local date as "%d %b %Y" (its strftime_now).
  std::optional<std::string> date_string;
};

struct TemplateSegment {
  std::string text;
  int message_index = -1;  // the message this text renders (-1: template scaffolding, e.g. the BOS token)
  bool response = false;   // part of an assistant response (content and its end-of-turn tokens)
  bool end_of_turn = false;        // (response only) the end-of-turn tokens that close the response
  bool generation_prompt = false;  // the assistant header of add_generation_prompt (message_index -1)
};

class ChatTemplate {
 public:
  virtual ~ChatTemplate() = default;
  // Built-in names: qwen2_5, qwen3, llama3, llama3_1, llama3_2 (the 3.1 template; its date is today by default),
  // llama2, mistral, chatml, phi3, gemma.
  static std::unique_ptr<ChatTemplate> create(const std::string& name);
  static std::vector<std::string> names();
  // Picks the template from the tokenizer's own chat template text (distinctive substrings of the real
  // templates above), else, when the tokenizer has none, from the config's model_type (qwen2 -> qwen2_5, qwen3,
  // llama -> llama3 / chatml / llama2 by vocabulary, mistral, phi3, gemma/gemma2 -> gemma). A chat template we
  // do not implement, or an unknown model_type, throws swift::Error listing the --template names: guessing a
  // format would train the model on the wrong one. (--template itself is resolved by the caller: create().)
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
