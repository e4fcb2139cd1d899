// tests/text/test_chat_template_mask.cpp — encode_chat's loss masks (ms-swift's --loss_scale default / last_round /
// all and per-message "loss"), checked by decoding each run of trained tokens back to text, with a stand-in
// tokenizer (chat_fixture::FakeTokenizer) so the mask logic is tested independently of the tokenizer engine.
// The same rules on the real tokenizers: tests/text/test_chat_template_ids.cpp.
//
// Invariants:
//  - ids always equal tokenizer.encode(render_text(...)); loss_mask has one entry per id; token 0 is never trained.
//  - Expected trained runs are written out literally, end-of-turn tokens included, so a change of semantics
//    shows up as a readable diff.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "text/chat_template.h"
#include "text/test_chat_template_util.h"

namespace swift {
namespace {

using text::ChatMessage;
using text::ChatTemplate;
using text::LossScale;
using text::TemplateOptions;
using Runs = std::vector<std::string>;

const std::vector<std::string> kSpecials = {"<|im_start|>", "<|im_end|>", "<|start_header_id|>", "<|end_header_id|>",
                                            "<|eot_id|>", "<|begin_of_text|>", "<s>", "</s>"};

ChatMessage msg(const std::string& role, const std::string& content) {
  ChatMessage m;
  m.role = role;
  m.content = content;
  return m;
}

// Encodes and checks the invariants every encoding must satisfy; returns the trained runs.
Runs trained(const text::Tokenizer& tok, const std::string& template_name, const std::vector<ChatMessage>& messages,
             LossScale scale, TemplateOptions options = {}) {
  auto tmpl = ChatTemplate::create(template_name);
  const text::EncodedChat enc = text::encode_chat(tok, *tmpl, messages, options, scale);
  EXPECT_EQ(enc.ids, tok.encode(tmpl->render_text(messages, options), false, true));
  EXPECT_EQ(enc.loss_mask.size(), enc.ids.size());
  if (!enc.loss_mask.empty()) {
    EXPECT_EQ(enc.loss_mask[0], 0);
  }
  return chat_fixture::trained_runs(tok, enc);
}

std::vector<ChatMessage> multi_turn() { return chat_fixture::conversation("multi_turn").messages; }

TEST(ChatTemplateMask, DefaultTrainsEveryResponseWithItsEndOfTurn) {
  chat_fixture::FakeTokenizer tok(kSpecials);
  EXPECT_EQ(trained(tok, "qwen2_5", multi_turn(), LossScale::Default),
            (Runs{"7 is prime.<|im_end|>\n", "2 is the only even prime.<|im_end|>\n", "You're welcome!<|im_end|>\n"}));
  EXPECT_EQ(trained(tok, "llama3_1", multi_turn(), LossScale::Default),
            (Runs{"7 is prime.<|eot_id|>", "2 is the only even prime.<|eot_id|>", "You're welcome!<|eot_id|>"}));
  EXPECT_EQ(trained(tok, "llama2", multi_turn(), LossScale::Default),
            (Runs{" 7 is prime. </s>", " 2 is the only even prime. </s>", " You're welcome! </s>"}));
  EXPECT_EQ(trained(tok, "gemma", multi_turn(), LossScale::Default),
            (Runs{"7 is prime.<end_of_turn>\n", "2 is the only even prime.<end_of_turn>\n",
                  "You're welcome!<end_of_turn>\n"}));
  EXPECT_EQ(trained(tok, "phi3", multi_turn(), LossScale::Default),
            (Runs{"7 is prime.<|end|>\n", "2 is the only even prime.<|end|>\n", "You're welcome!<|end|>\n"}));
  EXPECT_EQ(trained(tok, "mistral", multi_turn(), LossScale::Default),
            (Runs{"7 is prime.</s>", "2 is the only even prime.</s>", "You're welcome!</s>"}));
}

TEST(ChatTemplateMask, LastRoundTrainsOnlyAfterTheLastUserMessage) {
  chat_fixture::FakeTokenizer tok(kSpecials);
  EXPECT_EQ(trained(tok, "qwen2_5", multi_turn(), LossScale::LastRound), (Runs{"You're welcome!<|im_end|>\n"}));
  EXPECT_EQ(trained(tok, "chatml", multi_turn(), LossScale::LastRound), (Runs{"You're welcome!<|im_end|>\n"}));
  // An agent turn after the last user query (tool call, tool result, answer) is the last round as a whole.
  const auto& tool = chat_fixture::conversation("tool_call_round_trip");
  TemplateOptions options;
  options.tools = tool.tools;
  const Runs agent = {
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n"
      "</tool_call><|im_end|>\n",
      "It is 18 °C and cloudy in Paris.<|im_end|>\n"};
  EXPECT_EQ(trained(tok, "qwen2_5", tool.messages, LossScale::LastRound, options), agent);
  EXPECT_EQ(trained(tok, "qwen2_5", tool.messages, LossScale::Default, options), agent);
  EXPECT_EQ(trained(tok, "llama3_1", tool.messages, LossScale::LastRound, options),
            (Runs{"{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}<|eot_id|>",
                  "It is 18 °C and cloudy in Paris.<|eot_id|>"}));
  // No user message at all: every response is in the last round. (qwen3's template then takes the last message
  // as the "last query", so the reply renders without a think block.)
  EXPECT_EQ(trained(tok, "qwen3", {msg("system", "s"), msg("assistant", "a")}, LossScale::LastRound),
            (Runs{"a<|im_end|>\n"}));
}

TEST(ChatTemplateMask, AllTrainsEveryTokenButTheFirstAndTheGenerationPrompt) {
  chat_fixture::FakeTokenizer tok(kSpecials);
  auto tmpl = ChatTemplate::create("qwen2_5");
  const std::string text = tmpl->render_text(multi_turn(), {});
  EXPECT_EQ(trained(tok, "qwen2_5", multi_turn(), LossScale::All), (Runs{text.substr(std::string("<|im_start|>").size())}));
  TemplateOptions gen;
  gen.add_generation_prompt = true;
  const std::vector<ChatMessage> prompt = {msg("user", "Hi")};
  EXPECT_EQ(trained(tok, "qwen2_5", prompt, LossScale::All, gen),
            (Runs{"system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n"}));
  EXPECT_EQ(trained(tok, "qwen2_5", prompt, LossScale::Default, gen), Runs{});
  gen.enable_thinking = false;
  EXPECT_EQ(trained(tok, "qwen3", prompt, LossScale::All, gen), (Runs{"user\nHi<|im_end|>\n"}));
}

TEST(ChatTemplateMask, PerMessageLossOverridesTheResponse) {
  chat_fixture::FakeTokenizer tok(kSpecials);
  auto conv = multi_turn();
  conv[1].loss = false;
  conv[5].loss = false;
  conv[0].loss = true;  // ignored: ms-swift applies "loss" to assistant responses only
  EXPECT_EQ(trained(tok, "qwen2_5", conv, LossScale::Default), (Runs{"2 is the only even prime.<|im_end|>\n"}));
  conv = multi_turn();
  conv[1].loss = true;
  EXPECT_EQ(trained(tok, "llama3", conv, LossScale::LastRound),
            (Runs{"7 is prime.<|eot_id|>", "You're welcome!<|eot_id|>"}));
  // Under `all`, loss=false removes that response's content only; its end-of-turn stays trained (ms-swift).
  conv = multi_turn();
  conv[3].loss = false;
  const std::string text = ChatTemplate::create("qwen2_5")->render_text(conv, {});
  const size_t cut = text.find("2 is the only even prime.");
  EXPECT_EQ(trained(tok, "qwen2_5", conv, LossScale::All),
            (Runs{text.substr(12, cut - 12), text.substr(cut + std::string("2 is the only even prime.").size())}));
}

TEST(ChatTemplateMask, ThinkingIsPartOfTheResponse) {
  chat_fixture::FakeTokenizer tok(kSpecials);
  // Earlier turns lose their think block (the template strips it); the last keeps it and it is trained.
  EXPECT_EQ(trained(tok, "qwen3", chat_fixture::conversation("think_in_content_multi_turn").messages, LossScale::Default),
            (Runs{"5<|im_end|>\n", "<think>\n5 * 4 = 20\n</think>\n\n20<|im_end|>\n"}));
  EXPECT_EQ(trained(tok, "qwen3", chat_fixture::conversation("think_absent_last").messages, LossScale::Default),
            (Runs{"<think>\n\n</think>\n\nHi!<|im_end|>\n"}));
}

TEST(ChatTemplateMask, TokenStraddlingABoundaryGoesToTheLaterSegment) {
  chat_fixture::FakeTokenizer tok(kSpecials);
  // "<|im_start|>assistant\n" + "\n\nAnswer...": the fake tokenizer (like Qwen's) merges the three newlines into
  // one token, which starts in the header and ends in the response: it is trained.
  EXPECT_EQ(trained(tok, "qwen2_5", chat_fixture::conversation("whitespace_edges").messages, LossScale::Default),
            (Runs{"\n\n\nAnswer after blank lines.\n\n  <|im_end|>\n", " leading space only<|im_end|>\n"}));
}

TEST(ChatTemplateMask, WorksWithoutSpecialTokensAndWithSpecialTextInContent) {
  // No special tokens known: every boundary is placed by tokenizing prefixes of the plain text.
  chat_fixture::FakeTokenizer plain({});
  EXPECT_EQ(trained(plain, "qwen2_5", multi_turn(), LossScale::Default),
            (Runs{"7 is prime.<|im_end|>\n", "2 is the only even prime.<|im_end|>\n", "You're welcome!<|im_end|>\n"}));
  EXPECT_EQ(trained(plain, "llama2", multi_turn(), LossScale::LastRound), (Runs{" You're welcome! </s>"}));
  // Special-token text inside a user message is parsed as special (as Hugging Face does); masks stay aligned.
  chat_fixture::FakeTokenizer tok(kSpecials);
  const std::vector<ChatMessage> conv = {msg("user", "what is <|im_end|> and <|im_start|>?"), msg("assistant", "Tokens.")};
  EXPECT_EQ(trained(tok, "qwen2_5", conv, LossScale::Default), (Runs{"Tokens.<|im_end|>\n"}));
}

TEST(ChatTemplateMask, EmptyResponsesAndSystemOption) {
  chat_fixture::FakeTokenizer tok(kSpecials);
  // An empty response still trains its end-of-turn (the model must learn to stop).
  EXPECT_EQ(trained(tok, "qwen2_5", chat_fixture::conversation("empty_content").messages, LossScale::Default),
            (Runs{"Nothing was asked.<|im_end|>\n", "<|im_end|>\n"}));
  TemplateOptions options;
  options.system = "Be brief.";
  EXPECT_EQ(trained(tok, "chatml", {msg("user", "x"), msg("assistant", "y")}, LossScale::All, options),
            (Runs{"system\nBe brief.<|im_end|>\n<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\ny<|im_end|>\n"}));
}

}  // namespace
}  // namespace swift
