// tests/data/test_encode.cpp — encoding with test doubles (FakeTokenizer, FakeChatEncoder): the chat, pt,
// preference and prompt modes, every truncation strategy, the first-token rule, untrained and failed samples,
// KTO labels and thread invariance.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/encode.h"
#include "data_test_util.h"

namespace swift::data {
namespace {

using testing::FakeChatEncoder;
using testing::FakeTokenizer;
using testing::render_fake;

text::ChatMessage msg(std::string role, std::string content) { return {std::move(role), std::move(content), "", nullptr, std::nullopt}; }

Sample chat_sample(const std::string& q, const std::string& a, std::string source = "mem:1") {
  Sample s;
  s.messages = {msg("user", q), msg("assistant", a)};
  s.source = std::move(source);
  return s;
}

Sample user_only(const std::string& q, std::string source) {
  Sample s;
  s.messages = {msg("user", q)};
  s.source = std::move(source);
  return s;
}

std::vector<int32_t> span_vec(std::span<const int32_t> s) { return {s.begin(), s.end()}; }
std::vector<uint8_t> mask_vec(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

struct Fixture : ::testing::Test {
  FakeTokenizer tok;
  FakeChatEncoder chat{tok};
  EncodeOptions opts(EncodeMode mode = EncodeMode::Chat) {
    EncodeOptions o;
    o.mode = mode;
    o.chat = &chat;
    o.tokenizer = &tok;
    return o;
  }
};

using DataEncode = Fixture;

TEST_F(DataEncode, ChatSequencesAndMasks) {
  auto d = encode_samples({chat_sample("hi", "hello")}, opts());
  ASSERT_EQ(d.size(), 1);
  std::string text = render_fake({msg("user", "hi"), msg("assistant", "hello")});
  EXPECT_EQ(span_vec(d.ids(0)), tok.encode(text));
  auto mask = mask_vec(d.loss_mask(0));
  EXPECT_EQ(mask[0], 0);
  // Trained: "hello<|im_end|>\n" = 5 + 1 + 1 tokens.
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 7);
  EXPECT_EQ(d.stats().target_tokens, 7);
  EXPECT_EQ(d.sample_index(0), 0);
  EXPECT_EQ(d.label(0), -1);
  EXPECT_FALSE(d.has_rejected());
}

TEST_F(DataEncode, PretrainIsTextPlusEosAllTrainedButTheFirst) {
  Sample s;
  s.messages = {msg("system", "ignored"), msg("user", "ab"), msg("assistant", "cd")};
  auto d = encode_samples({s}, opts(EncodeMode::Pretrain));
  EXPECT_EQ(span_vec(d.ids(0)), (std::vector<int32_t>{3 + 'a', 3 + 'b', 3 + 'c', 3 + 'd', FakeTokenizer::kEos}));
  EXPECT_EQ(mask_vec(d.loss_mask(0)), (std::vector<uint8_t>{0, 1, 1, 1, 1}));
  // A tokenizer that adds BOS (Llama) gets it first; special-looking text stays text.
  FakeTokenizer bos_tok(/*add_bos=*/true);
  auto o = opts(EncodeMode::Pretrain);
  o.tokenizer = &bos_tok;
  Sample t;
  t.messages = {msg("assistant", "</s>")};
  d = encode_samples({t}, o);
  EXPECT_EQ(span_vec(d.ids(0)), (std::vector<int32_t>{1, 3 + '<', 3 + '/', 3 + 's', 3 + '>', 2}));
}

TEST_F(DataEncode, TruncationDeleteLeftRight) {
  std::vector<Sample> samples = {chat_sample("q", "short"), chat_sample("question", std::string(100, 'x'))};
  const int64_t long_len = static_cast<int64_t>(tok.encode(render_fake(samples[1].messages)).size());
  auto o = opts();
  o.max_length = 60;
  auto d = encode_samples(samples, o);
  EXPECT_EQ(d.size(), 1);
  EXPECT_EQ(d.stats().deleted, 1);
  EXPECT_EQ(d.stats().longest_input, long_len);
  auto full = tok.encode(render_fake(samples[1].messages));
  o.truncation = TruncationStrategy::Right;
  d = encode_samples(samples, o);
  ASSERT_EQ(d.size(), 2);
  EXPECT_EQ(d.length(1), 60);
  EXPECT_EQ(span_vec(d.ids(1)), std::vector<int32_t>(full.begin(), full.begin() + 60));
  EXPECT_EQ(d.stats().truncated, 1);
  o.truncation = TruncationStrategy::Left;
  d = encode_samples(samples, o);
  EXPECT_EQ(span_vec(d.ids(1)), std::vector<int32_t>(full.end() - 60, full.end()));
  EXPECT_EQ(d.loss_mask(1)[0], 0);  // the new first token is not trained
  EXPECT_EQ(d.loss_mask(1)[1], 1);
  o.truncation = TruncationStrategy::Raise;
  try {
    encode_samples(samples, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed --max_length 60"), std::string::npos) << e.what();
  }
}

TEST_F(DataEncode, RightTruncationThatCutsEveryTargetDropsTheSample) {
  auto o = opts();
  o.max_length = 8;  // "<|im_start|>user\nquestion..." never reaches the answer
  o.truncation = TruncationStrategy::Right;
  auto d = encode_samples({chat_sample("a long question", "answer")}, o);
  EXPECT_EQ(d.size(), 0);
  EXPECT_EQ(d.stats().untrained, 1);
}

TEST_F(DataEncode, SplitCutsPretrainTextIntoChunks) {
  Sample s;
  s.messages = {msg("assistant", std::string(25, 'z'))};  // 26 tokens with EOS
  auto o = opts(EncodeMode::Pretrain);
  o.max_length = 10;
  o.truncation = TruncationStrategy::Split;
  auto d = encode_samples({s}, o);
  ASSERT_EQ(d.size(), 3);  // 10 + 10 + 6
  EXPECT_EQ(d.length(0), 10);
  EXPECT_EQ(d.length(2), 6);
  EXPECT_EQ(d.num_tokens(), 26);
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(d.loss_mask(i)[0], 0);
    EXPECT_EQ(d.sample_index(i), 0);
  }
  EXPECT_EQ(d.ids(2).back(), FakeTokenizer::kEos);
  EXPECT_EQ(d.stats().split_chunks, 2);
  // A one-token tail has no target and is dropped.
  s.messages = {msg("assistant", std::string(20, 'z'))};  // 21 tokens: 10 + 10 + 1
  d = encode_samples({s}, o);
  EXPECT_EQ(d.size(), 2);
  // split is for pre-training only, as in ms-swift.
  auto c = opts();
  c.max_length = 10;
  c.truncation = TruncationStrategy::Split;
  EXPECT_THROW(encode_samples({chat_sample("q", "a")}, c), Error);
}

TEST_F(DataEncode, PreferencePairs) {
  Sample p = chat_sample("q", "good answer");
  p.rejected_response = "bad";
  Sample h = chat_sample("q2", "yes");
  h.rejected_messages = {msg("user", "q2"), msg("assistant", "no")};
  auto d = encode_samples({p, h}, opts(EncodeMode::Preference));
  ASSERT_TRUE(d.has_rejected());
  ASSERT_EQ(d.size(), 2);
  EXPECT_EQ(span_vec(d.rejected_ids(0)), tok.encode(render_fake({msg("user", "q"), msg("assistant", "bad")})));
  EXPECT_EQ(span_vec(d.rejected_ids(1)), tok.encode(render_fake(h.rejected_messages)));
  EXPECT_EQ(d.rejected_loss_mask(0)[0], 0);
  // Deleted when either side is too long.
  auto o = opts(EncodeMode::Preference);
  Sample longer = chat_sample("q", "ok");
  longer.rejected_response = std::string(200, 'n');
  o.max_length = 100;
  d = encode_samples({p, longer}, o);
  EXPECT_EQ(d.size(), 1);
  EXPECT_EQ(d.stats().deleted, 1);
  // Not a pair: failed (dropped), or an error with strict.
  d = encode_samples({p, chat_sample("q", "a", "f.jsonl:9")}, opts(EncodeMode::Preference));
  EXPECT_EQ(d.size(), 1);
  EXPECT_EQ(d.stats().failed, 1);
  ASSERT_EQ(d.stats().problems.size(), 1u);
  EXPECT_EQ(d.stats().problems[0].rfind("f.jsonl:9: not a preference pair", 0), 0u);
}

TEST_F(DataEncode, PromptModeDropsTheAnswerAndAddsTheGenerationPrompt) {
  auto d = encode_samples({chat_sample("q", "a"), user_only("only", "m:2")},
                          opts(EncodeMode::Prompt));
  ASSERT_EQ(d.size(), 2);
  EXPECT_EQ(span_vec(d.ids(0)), tok.encode(render_fake({msg("user", "q")}) + "<|im_start|>assistant\n"));
  auto mask = mask_vec(d.loss_mask(0));
  EXPECT_EQ(std::count(mask.begin(), mask.end(), 1), 0);
}

TEST_F(DataEncode, EncoderFailuresAreCountedOrStrict) {
  FakeChatEncoder failing(tok, /*fail_on_tool=*/true);
  auto o = opts();
  o.chat = &failing;
  Sample tool = chat_sample("q", "a", "tools.jsonl:4");
  tool.messages.insert(tool.messages.begin() + 1, msg("tool", "result"));
  auto d = encode_samples({chat_sample("q", "a"), tool}, o);
  EXPECT_EQ(d.size(), 1);
  EXPECT_EQ(d.stats().failed, 1);
  EXPECT_NE(d.stats().summary().find("tools.jsonl:4: fake template has no tool role"), std::string::npos);
  o.strict = true;
  try {
    encode_samples({tool}, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sample tools.jsonl:4: cannot encode it"), std::string::npos) << e.what();
  }
}

TEST_F(DataEncode, UntrainedChatSamplesAreDropped) {
  Sample prompt_only = user_only("q", "m:1");
  Sample no_loss = chat_sample("q", "a");
  no_loss.messages[1].loss = false;
  auto d = encode_samples({prompt_only, no_loss, chat_sample("q", "a")}, opts());
  EXPECT_EQ(d.size(), 1);
  EXPECT_EQ(d.sample_index(0), 2);
  EXPECT_EQ(d.stats().untrained, 2);
}

TEST_F(DataEncode, KtoLabelsTravelWithSequences) {
  Sample good = chat_sample("q", "a");
  good.label = true;
  Sample bad = chat_sample("q", "b");
  bad.label = false;
  auto d = encode_samples({good, bad, chat_sample("q", "c")}, opts());
  EXPECT_EQ(d.label(0), 1);
  EXPECT_EQ(d.label(1), 0);
  EXPECT_EQ(d.label(2), -1);
}

TEST_F(DataEncode, SameOutputForAnyThreadCount) {
  std::vector<Sample> samples;
  for (int i = 0; i < 20000; ++i) {
    samples.push_back(chat_sample(std::string(i % 37, 'q'), std::string(1 + i % 91, 'a'), fmt::format("m:{}", i)));
    if (i % 101 == 0) samples.back().messages[1].loss = false;
  }
  auto o = opts();
  o.max_length = 100;
  o.num_threads = 1;
  auto one = encode_samples(samples, o);
  o.num_threads = 4;
  auto four = encode_samples(samples, o);
  ASSERT_EQ(one.size(), four.size());
  ASSERT_EQ(one.num_tokens(), four.num_tokens());
  EXPECT_TRUE(std::equal(one.view().ids, one.view().ids + one.num_tokens(), four.view().ids));
  EXPECT_TRUE(std::equal(one.view().loss_mask, one.view().loss_mask + one.num_tokens(), four.view().loss_mask));
  EXPECT_TRUE(std::equal(one.view().sample_index, one.view().sample_index + one.size(), four.view().sample_index));
  EXPECT_EQ(one.stats().to_json(), four.stats().to_json());
  EXPECT_GT(one.stats().deleted, 0);
  EXPECT_GT(one.stats().untrained, 0);
}

TEST_F(DataEncode, NamesAndFingerprints) {
  EXPECT_EQ(truncation_from_string("left"), TruncationStrategy::Left);
  EXPECT_THROW(truncation_from_string("middle"), Error);
  EXPECT_EQ(opts().fingerprint(), "chat:fake-chat-v1");
  std::string a = tokenizer_fingerprint(tok);
  EXPECT_EQ(a, tokenizer_fingerprint(FakeTokenizer()));
  EXPECT_NE(a, tokenizer_fingerprint(FakeTokenizer(/*add_bos=*/true)));
  EXPECT_EQ(prompt_messages({msg("user", "q"), msg("assistant", "a")}).size(), 1u);
}

}  // namespace
}  // namespace swift::data
