// tests/text/test_chat_template_ids.cpp — encode_chat with the real tokenizers: its ids equal Hugging Face's
// apply_chat_template(tokenize=True) for every fixture case that has ids (qwen2_5 and qwen3 with the Qwen3
// tokenizer, llama3 / llama3_1 / llama3_2 with Llama-3's, llama2 with the archive's llama2/ tokenizer), and the
// loss masks decode to the expected text on each tokenizer family (byte-level BPE and SentencePiece-style BPE).
// chatml's ids need SmolLM2's GGUF: tests/model/test_real_chat_template.cpp.
//
// Invariants:
//  - Tokenizer files come from tests/fixtures/tokenizers/<name>/ (committed with the tokenizer engine), else from
//    the copy CMake extracted from ../shared/data/tokenizers.tar.xz (SWIFT_SHARED_TOKENIZERS_DIR); with neither
//    the test FAILS (it is a unit test: CI must have the files).
//  - Every case is checked; the summary line gives the pass count per template.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "text/chat_template.h"
#include "text/test_chat_template_util.h"
#include "text/tokenizer.h"

namespace swift {
namespace {

namespace fs = std::filesystem;
using text::ChatTemplate;
using text::LossScale;
using Runs = std::vector<std::string>;

const text::Tokenizer* tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<text::Tokenizer>> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second.get();
  std::vector<fs::path> dirs = {fs::path(SWIFT_FIXTURES_DIR) / "tokenizers" / name};
#ifdef SWIFT_TOKENIZER_FIXTURES_DIR  // the committed tokenizer archive, unpacked at configure time (CI has no ../shared)
  dirs.push_back(fs::path(SWIFT_TOKENIZER_FIXTURES_DIR) / name);
#endif
#ifdef SWIFT_SHARED_TOKENIZERS_DIR
  dirs.push_back(fs::path(SWIFT_SHARED_TOKENIZERS_DIR) / name);
#endif
  for (const fs::path& dir : dirs) {
    if (!fs::exists(dir / "tokenizer.json")) continue;
    const fs::path config = dir / "tokenizer_config.json";
    auto tok = text::Tokenizer::from_tokenizer_json((dir / "tokenizer.json").string(),
                                                    fs::exists(config) ? config.string() : "");
    return (cache[name] = std::move(tok)).get();
  }
  ADD_FAILURE() << "tokenizer '" << name << "': no tokenizer.json in " << dirs[0]
                << " nor in the shared-data copy; commit it or configure with -DSWIFT_SHARED_DATA_DIR=<dir>";
  return nullptr;
}

void check_ids(const std::string& template_name, const std::string& tokenizer_name) {
  const text::Tokenizer* tok = tokenizer(tokenizer_name);
  if (!tok) return;
  auto tmpl = ChatTemplate::create(template_name);
  size_t checked = 0, passed = 0;
  for (const auto& c : chat_fixture::load_cases(template_name)) {
    if (!c.has_ids) continue;
    ++checked;
    const auto& conv = chat_fixture::conversation(c.conversation);
    for (LossScale scale : {LossScale::Default, LossScale::LastRound, LossScale::All}) {
      const text::EncodedChat enc = text::encode_chat(*tok, *tmpl, conv.messages, c.options, scale);
      const std::string diff = chat_fixture::ids_difference(c.ids, enc.ids);
      if (!diff.empty()) {
        ADD_FAILURE() << template_name << " / " << chat_fixture::case_label(c) << ": " << diff;
        break;
      }
      ASSERT_EQ(enc.loss_mask.size(), enc.ids.size());
      if (scale == LossScale::Default) ++passed;
    }
  }
  EXPECT_GT(checked, 0u);
  std::printf("[chat_template] %s (%s tokenizer): %zu/%zu id lists equal Hugging Face's\n", template_name.c_str(),
              tokenizer_name.c_str(), passed, checked);
}

TEST(ChatTemplateIds, Qwen2_5) { check_ids("qwen2_5", "qwen3"); }
TEST(ChatTemplateIds, Qwen3) { check_ids("qwen3", "qwen3"); }
TEST(ChatTemplateIds, Llama3) { check_ids("llama3", "llama3"); }
TEST(ChatTemplateIds, Llama3_1) { check_ids("llama3_1", "llama3"); }
TEST(ChatTemplateIds, Llama3_2) { check_ids("llama3_2", "llama3"); }
TEST(ChatTemplateIds, Llama2) { check_ids("llama2", "llama2"); }

Runs trained(const std::string& tokenizer_name, const std::string& template_name, const std::string& conversation,
             LossScale scale, const std::map<size_t, bool>& loss = {}) {
  const text::Tokenizer* tok = tokenizer(tokenizer_name);
  if (!tok) return {"<no tokenizer>"};
  auto messages = chat_fixture::conversation(conversation).messages;
  for (auto [i, v] : loss) messages[i].loss = v;
  text::TemplateOptions options;
  options.tools = chat_fixture::conversation(conversation).tools;
  return chat_fixture::trained_runs(
      *tok, text::encode_chat(*tok, *ChatTemplate::create(template_name), messages, options, scale));
}

TEST(ChatTemplateIds, MasksOnByteLevelTokenizers) {
  const Runs qwen = {"7 is prime.<|im_end|>\n", "2 is the only even prime.<|im_end|>\n", "You're welcome!<|im_end|>\n"};
  EXPECT_EQ(trained("qwen3", "qwen2_5", "multi_turn", LossScale::Default), qwen);
  EXPECT_EQ(trained("qwen3", "qwen2_5", "multi_turn", LossScale::LastRound), Runs{qwen.back()});
  EXPECT_EQ(trained("qwen3", "qwen2_5", "multi_turn", LossScale::Default, {{1, false}, {5, false}}), Runs{qwen[1]});
  EXPECT_EQ(trained("qwen3", "qwen3", "think_in_content_multi_turn", LossScale::Default),
            (Runs{"5<|im_end|>\n", "<think>\n5 * 4 = 20\n</think>\n\n20<|im_end|>\n"}));
  EXPECT_EQ(trained("qwen3", "qwen3", "think_multi_step_tool", LossScale::LastRound),
            (Runs{"<think>\nI should call the tool.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                  "\"arguments\": {\"city\": \"Cairo\"}}\n</tool_call><|im_end|>\n",
                  "<think>\nThe tool says 31.\n</think>\n\nIt is 31 °C in Cairo.<|im_end|>\n"}));
  // Qwen's pre-tokenizer merges the header's "\n" with the content's leading "\n\n": that token is trained.
  EXPECT_EQ(trained("qwen3", "qwen2_5", "whitespace_edges", LossScale::Default),
            (Runs{"\n\n\nAnswer after blank lines.\n\n  <|im_end|>\n", " leading space only<|im_end|>\n"}));
  EXPECT_EQ(trained("llama3", "llama3_1", "multi_turn", LossScale::Default),
            (Runs{"7 is prime.<|eot_id|>", "2 is the only even prime.<|eot_id|>", "You're welcome!<|eot_id|>"}));
  EXPECT_EQ(trained("llama3", "llama3", "unicode_emoji", LossScale::LastRound), (Runs{"Très bien ! 🎉👨‍👩‍👧 日本語もOK。<|eot_id|>"}));
  const text::Tokenizer* tok = tokenizer("llama3");
  if (tok) {
    const auto messages = chat_fixture::conversation("single_turn").messages;
    const auto enc = text::encode_chat(*tok, *ChatTemplate::create("llama3_1"), messages, {}, LossScale::All);
    EXPECT_EQ(chat_fixture::trained_runs(*tok, enc),
              Runs{ChatTemplate::create("llama3_1")->render_text(messages, {}).substr(std::string("<|begin_of_text|>").size())});
  }
}

TEST(ChatTemplateIds, MasksOnSentencePieceTokenizer) {
  // SentencePiece-style BPE: "[/INST] 7" tokenizes as "▁", "7"; the response segment starts with that space, so
  // "▁" is trained (its decode drops the leading space, as Hugging Face's decoder does).
  EXPECT_EQ(trained("llama2", "llama2", "multi_turn", LossScale::Default),
            (Runs{"7 is prime. </s>", "2 is the only even prime. </s>", "You're welcome! </s>"}));
  EXPECT_EQ(trained("llama2", "llama2", "multi_turn", LossScale::LastRound), Runs{"You're welcome! </s>"});
  EXPECT_EQ(trained("llama2", "llama2", "single_turn_system", LossScale::Default), Runs{"4. </s>"});
}

}  // namespace
}  // namespace swift
