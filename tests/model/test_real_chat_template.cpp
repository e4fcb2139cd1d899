// tests/model/test_real_chat_template.cpp — the chatml template (SmolLM2-Instruct's) end to end on the real
// SmolLM2-135M-Instruct GGUF (label slow: needs models/, from scripts/fetch-model.sh): detect() picks chatml from
// the GGUF's tokenizer.chat_template, encode_chat's ids equal what transformers' apply_chat_template(tokenize=True)
// gives with the tokenizer it builds from the same file (tests/fixtures/chat_templates/chatml.json), and the loss
// masks decode to the expected text.
//
// Invariants: every fixture case is checked; a missing model FAILS with the command to fetch it, never skips.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "text/test_chat_template_util.h"
#include "text/tokenizer.h"

namespace swift {
namespace {

using text::ChatTemplate;
using text::LossScale;

TEST(RealChatTemplate, SmolLM2GgufChatml) {
  const std::string path = std::string(SWIFT_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: run scripts/fetch-model.sh";
  auto tok = text::Tokenizer::load(path);
  ASSERT_TRUE(tok);
  EXPECT_EQ(ChatTemplate::detect("llama", *tok), "chatml");

  auto tmpl = ChatTemplate::create("chatml");
  size_t checked = 0, passed = 0;
  for (const auto& c : chat_fixture::load_cases("chatml")) {
    if (!c.has_ids) continue;
    ++checked;
    const auto& conv = chat_fixture::conversation(c.conversation);
    const text::EncodedChat enc = text::encode_chat(*tok, *tmpl, conv.messages, c.options, LossScale::Default);
    const std::string diff = chat_fixture::ids_difference(c.ids, enc.ids);
    if (diff.empty()) {
      ++passed;
    } else {
      ADD_FAILURE() << "chatml / " << chat_fixture::case_label(c) << ": " << diff;
    }
  }
  EXPECT_GT(checked, 0u);
  std::printf("[chat_template] chatml (SmolLM2 GGUF tokenizer): %zu/%zu id lists equal Hugging Face's\n", passed,
              checked);

  const auto& multi = chat_fixture::conversation("multi_turn").messages;
  auto runs = [&](LossScale scale) {
    return chat_fixture::trained_runs(*tok, text::encode_chat(*tok, *tmpl, multi, {}, scale));
  };
  EXPECT_EQ(runs(LossScale::Default), (std::vector<std::string>{"7 is prime.<|im_end|>\n",
                                                                "2 is the only even prime.<|im_end|>\n",
                                                                "You're welcome!<|im_end|>\n"}));
  EXPECT_EQ(runs(LossScale::LastRound), std::vector<std::string>{"You're welcome!<|im_end|>\n"});
  EXPECT_EQ(runs(LossScale::All),
            std::vector<std::string>{tmpl->render_text(multi, {}).substr(std::string("<|im_start|>").size())});
}

}  // namespace
}  // namespace swift
