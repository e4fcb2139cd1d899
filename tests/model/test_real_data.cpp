// tests/model/test_real_data.cpp — the data pipeline with the real SmolLM2-135M-Instruct GGUF tokenizer and its
// chatml template (label slow: needs models/, from scripts/fetch-model.sh):
//  - GSM8K (the committed 20-row slice) through prepare_data: every sequence decodes to the template's text of
//    its sample, the trained tokens decode to exactly "<answer><|im_end|>\n", and the cache reloads it
//    identically;
//  - `swift pt` encoding decodes to question + answer + the tokenizer's EOS, with split into max_length chunks;
//  - hh-rlhf preference pairs: chosen and rejected share their token prefix up to the last answer;
//  - GSM8K train (7,473 rows, from ../shared when present) loaded and tokenized with 1 and 2 threads gives the
//    same sequences; wall and CPU times are printed (a measurement, not a pass criterion: on a shared machine the
//    CPU time is the steadier number).
// A missing model FAILS with the command to fetch it; the shared GSM8K file is optional (CI has no ../shared).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "data/loader.h"
#include "data/pipeline.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace swift {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = std::string(SWIFT_FIXTURES_DIR) + "/data";

std::unique_ptr<text::Tokenizer> smollm2() {
  const std::string path = std::string(SWIFT_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(path)) {
    ADD_FAILURE() << path << " is missing: run scripts/fetch-model.sh";
    return nullptr;
  }
  return text::Tokenizer::load(path);
}

std::string shared_gsm8k() {
  fs::path p = fs::path(SWIFT_FIXTURES_DIR) / ".." / ".." / ".." / "shared" / "data" / "datasets" / "gsm8k" /
               "train.jsonl";
  std::error_code ec;
  return fs::exists(p, ec) ? p.string() : std::string();
}

std::string decode(const text::Tokenizer& tok, std::span<const int32_t> ids) {
  return tok.decode(std::vector<int32_t>(ids.begin(), ids.end()));
}

// The trained runs of a sequence, decoded.
std::vector<std::string> trained_text(const text::Tokenizer& tok, std::span<const int32_t> ids,
                                      std::span<const uint8_t> mask) {
  std::vector<std::string> runs;
  std::vector<int32_t> cur;
  for (size_t i = 0; i <= ids.size(); ++i) {
    if (i < ids.size() && mask[i]) {
      cur.push_back(ids[i]);
    } else if (!cur.empty()) {
      runs.push_back(tok.decode(cur));
      cur.clear();
    }
  }
  return runs;
}

TEST(RealData, Gsm8kChatmlThroughTheCache) {
  auto tok = smollm2();
  ASSERT_TRUE(tok);
  ASSERT_EQ(text::ChatTemplate::detect("llama", *tok), "chatml");
  auto tmpl = text::ChatTemplate::create("chatml");
  data::TemplateChatEncoder encoder(*tok, *tmpl, {}, text::LossScale::Default);
  fs::path cache = fs::temp_directory_path() / ("swift-real-data-cache-" + std::to_string(::getpid()));
  data::DataPipelineOptions o;
  o.dataset.dataset = {kFixtures + "/gsm8k-train-20.jsonl"};
  o.encode.mode = data::EncodeMode::Chat;
  o.encode.chat = &encoder;
  o.encode.max_length = 2048;
  o.load_from_cache_file = true;
  o.cache_dir = cache.string();
  data::PreparedData d = data::prepare_data(o);
  ASSERT_FALSE(d.cache_hit);
  ASSERT_EQ(d.train->size(), 20);
  for (int64_t i = 0; i < d.train->size(); ++i) {
    const data::Sample& s = d.train_samples[static_cast<size_t>(d.train->sample_index(i))];
    EXPECT_EQ(decode(*tok, d.train->ids(i)), tmpl->render_text(s.messages, {}));
    EXPECT_EQ(trained_text(*tok, d.train->ids(i), d.train->loss_mask(i)),
              std::vector<std::string>{s.messages[1].content + "<|im_end|>\n"});
  }
  data::PreparedData again = data::prepare_data(o);
  EXPECT_TRUE(again.cache_hit);
  ASSERT_EQ(again.train->num_tokens(), d.train->num_tokens());
  EXPECT_TRUE(std::equal(d.train->view().ids, d.train->view().ids + d.train->num_tokens(), again.train->view().ids));
  // A packed loader over the real sequences.
  auto plan = data::make_pack_plan(*again.train, 2048);
  auto report = data::packing_report(again.train->lengths(), *plan, 4);
  std::printf("[data] gsm8k slice, chatml: %s\n", report.summary().c_str());
  data::DataLoader loader(again.train, {.batch_size = 1}, plan);
  int64_t tokens = 0;
  while (auto b = loader.next()) tokens += b->num_tokens;
  EXPECT_EQ(tokens, again.train->num_tokens());
  fs::remove_all(cache);
}

TEST(RealData, PretrainTextAndSplit) {
  auto tok = smollm2();
  ASSERT_TRUE(tok);
  data::DatasetOptions dopt;
  dopt.dataset = {kFixtures + "/gsm8k-train-20.jsonl#3"};
  dopt.dataset_shuffle = false;
  auto splits = data::load_datasets(dopt);
  data::EncodeOptions e;
  e.mode = data::EncodeMode::Pretrain;
  e.tokenizer = tok.get();
  auto d = data::encode_samples(splits.train, e);
  ASSERT_EQ(d.size(), 3);
  const auto& s = splits.train[0];
  // The tokenizer's EOS: SmolLM2-Instruct's GGUF says <|im_end|> (ms-swift appends tokenizer.eos_token too).
  EXPECT_EQ(tok->special_tokens().eos_text, "<|im_end|>");
  EXPECT_EQ(decode(*tok, d.ids(0)), s.messages[0].content + s.messages[1].content + "<|im_end|>");
  e.max_length = 32;
  e.truncation = data::TruncationStrategy::Split;
  auto chunks = data::encode_samples(splits.train, e);
  EXPECT_GT(chunks.size(), 3);
  EXPECT_EQ(chunks.num_tokens(), d.num_tokens());
}

TEST(RealData, HhRlhfPairsSharePromptTokens) {
  auto tok = smollm2();
  ASSERT_TRUE(tok);
  auto tmpl = text::ChatTemplate::create("chatml");
  data::TemplateChatEncoder encoder(*tok, *tmpl, {}, text::LossScale::LastRound);
  data::DatasetOptions dopt;
  dopt.dataset = {kFixtures + "/hh-rlhf-harmless-base-50.jsonl.gz"};
  auto splits = data::load_datasets(dopt);
  data::EncodeOptions e;
  e.mode = data::EncodeMode::Preference;
  e.chat = &encoder;
  e.num_threads = 2;
  auto d = data::encode_samples(splits.train, e);
  ASSERT_EQ(d.size(), 50);
  for (int64_t i = 0; i < d.size(); ++i) {
    const auto& s = splits.train[static_cast<size_t>(d.sample_index(i))];
    auto prompt = s.messages;
    prompt.pop_back();
    text::TemplateOptions gen;
    gen.add_generation_prompt = true;
    size_t prefix = tok->encode(tmpl->render_text(prompt, gen), false, true).size();
    auto c = d.ids(i), r = d.rejected_ids(i);
    ASSERT_GE(c.size(), prefix);
    ASSERT_GE(r.size(), prefix);
    EXPECT_TRUE(std::equal(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(prefix), r.begin())) << s.source;
    EXPECT_EQ(trained_text(*tok, d.rejected_ids(i), d.rejected_loss_mask(i)),
              std::vector<std::string>{s.rejected_messages.back().content + "<|im_end|>\n"});
  }
}

TEST(RealData, Gsm8kTrainThroughputOneAndTwoThreads) {
  auto tok = smollm2();
  ASSERT_TRUE(tok);
  std::string path = shared_gsm8k();
  if (path.empty()) GTEST_SKIP() << "../shared/data/datasets/gsm8k is absent; the throughput needs the full file";
  auto tmpl = text::ChatTemplate::create("chatml");
  data::TemplateChatEncoder encoder(*tok, *tmpl, {}, text::LossScale::Default);
  std::vector<std::vector<int32_t>> first_ids;
  for (int threads : {1, 2}) {
    data::DatasetOptions dopt;
    dopt.dataset = {path};
    dopt.dataset_num_proc = threads;
    std::clock_t c0 = std::clock();
    auto t0 = std::chrono::steady_clock::now();
    auto splits = data::load_datasets(dopt);
    auto t1 = std::chrono::steady_clock::now();
    data::EncodeOptions e;
    e.mode = data::EncodeMode::Chat;
    e.chat = &encoder;
    e.max_length = 2048;
    e.num_threads = threads;
    auto d = data::encode_samples(splits.train, e);
    auto t2 = std::chrono::steady_clock::now();
    double cpu_s = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    double load_s = std::chrono::duration<double>(t1 - t0).count();
    double enc_s = std::chrono::duration<double>(t2 - t1).count();
    ASSERT_EQ(d.size(), 7473);
    std::printf("[data] gsm8k train, %d thread(s): load %.3f s, tokenize %.3f s wall (%.0f rows/s, %.0f tokens/s); "
                "%.3f s CPU in all threads; %lld tokens\n",
                threads, load_s, enc_s, 7473 / (load_s + enc_s), static_cast<double>(d.num_tokens()) / enc_s, cpu_s,
                static_cast<long long>(d.num_tokens()));
    std::vector<int32_t> all(d.view().ids, d.view().ids + d.num_tokens());
    if (first_ids.empty()) {
      auto lengths = d.lengths();
      for (int64_t capacity : {int64_t{2048}, int64_t{8192}}) {
        auto plan = data::pack_best_fit_decreasing(lengths, capacity);
        std::printf("[data] gsm8k train: %s\n", data::packing_report(lengths, plan, 8).summary().c_str());
      }
      first_ids.push_back(std::move(all));
    } else {
      EXPECT_EQ(all, first_ids[0]);
    }
  }
}

}  // namespace
}  // namespace swift
