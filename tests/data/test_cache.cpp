// tests/data/test_cache.cpp — the tokenized cache: round trips, misses on any change of data or options, the
// default directory, corruption detected and rebuilt with a warning, and prepare_data end to end.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "data/cache.h"
#include "data/pipeline.h"
#include "data_test_util.h"

namespace swift::data {
namespace {

using testing::FakeChatEncoder;
using testing::FakeTokenizer;
using testing::fixtures_dir;
using testing::TempDir;

void expect_same(const TokenizedDataset& a, const TokenizedDataset& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.num_tokens(), b.num_tokens());
  ASSERT_EQ(a.has_rejected(), b.has_rejected());
  for (int64_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::ranges::equal(a.ids(i), b.ids(i))) << i;
    ASSERT_TRUE(std::ranges::equal(a.loss_mask(i), b.loss_mask(i))) << i;
    ASSERT_EQ(a.sample_index(i), b.sample_index(i));
    ASSERT_EQ(a.label(i), b.label(i));
    if (a.has_rejected()) {
      ASSERT_TRUE(std::ranges::equal(a.rejected_ids(i), b.rejected_ids(i))) << i;
      ASSERT_TRUE(std::ranges::equal(a.rejected_loss_mask(i), b.rejected_loss_mask(i))) << i;
    }
  }
}

TokenizedDataset small(bool preference) {
  TokenizedDataset::Parts p;
  if (preference) p.rejected_offsets.push_back(0);
  for (int s = 0; s < 37; ++s) {
    for (int j = 0; j <= s % 5; ++j) {
      p.ids.push_back(s * 7 + j);
      p.loss_mask.push_back(j % 2);
      if (preference) {
        p.rejected_ids.push_back(-s - j);
        p.rejected_loss_mask.push_back(1);
      }
    }
    p.offsets.push_back(static_cast<int64_t>(p.ids.size()));
    if (preference) p.rejected_offsets.push_back(static_cast<int64_t>(p.rejected_ids.size()));
    p.sample_index.push_back(s * 2);
    p.label.push_back(static_cast<int8_t>(s % 3 - 1));
  }
  EncodeStats st;
  st.samples = 40;
  st.deleted = 3;
  return TokenizedDataset::from_parts(std::move(p), st);
}

TEST(Cache, RoundTripAndKeyCheck) {
  TempDir dir;
  for (bool preference : {false, true}) {
    auto d = small(preference);
    std::string path = cache_file_path(dir.path().string(), "key-a");
    write_cache(path, "key-a", {{"encode", d.stats().to_json()}, {"x", 1}}, d);
    std::string why;
    auto loaded = load_cache(path, "key-a", &why);
    ASSERT_TRUE(loaded.has_value()) << why;
    expect_same(d, loaded->data);
    EXPECT_EQ(loaded->meta["x"], 1);
    EXPECT_EQ(loaded->data.stats().deleted, 3);
    EXPECT_FALSE(load_cache(path, "key-b", &why).has_value());
    EXPECT_EQ(why, "written for another dataset/options key");
    EXPECT_FALSE(load_cache(dir.file("none.swdc"), "key-a", &why).has_value());
    EXPECT_EQ(why, "absent");
  }
  // No temporary files are left behind.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.path().extension() == ".swdc" ? 1 : 100;
  EXPECT_EQ(files, 1);
}

TEST(Cache, CorruptionIsDetected) {
  TempDir dir;
  auto d = small(false);
  std::string path = dir.file("c.swdc");
  write_cache(path, "k", {}, d);
  std::string good = testing::read_bytes(path);
  auto check = [&](std::string bytes, const char* expected) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    std::string why;
    EXPECT_FALSE(load_cache(path, "k", &why).has_value());
    EXPECT_NE(why.find(expected), std::string::npos) << why;
  };
  std::string flipped = good;
  flipped[flipped.size() - 70] ^= 1;
  check(flipped, "payload checksum mismatch");
  std::string header = good;
  header[45] ^= 1;
  check(header, "header checksum mismatch");
  check(good.substr(0, good.size() - 1), "size");
  check(good.substr(0, 50), "truncated");
  check(std::string(200, 'x'), "bad magic");
  std::ofstream(path, std::ios::binary | std::ios::trunc) << good;
  std::string why;
  EXPECT_TRUE(load_cache(path, "k", &why).has_value()) << why;
}

TEST(Cache, DefaultDirectoryFollowsTheEnvironment) {
  const char* old = std::getenv("SWIFT_CACHE_DIR");
  std::string saved = old ? old : "";
  ::setenv("SWIFT_CACHE_DIR", "/some/where", 1);
  EXPECT_EQ(default_cache_dir(), "/some/where");
  ::unsetenv("SWIFT_CACHE_DIR");
  const char* home = std::getenv("HOME");
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (home && !xdg) {
    EXPECT_EQ(default_cache_dir(), std::string(home) + "/.cache/swift-cpp/datasets");
  }
  if (old) ::setenv("SWIFT_CACHE_DIR", saved.c_str(), 1);
}

struct DataPipeline : ::testing::Test {
  FakeTokenizer tok;
  FakeChatEncoder chat{tok};
  TempDir dir;
  std::vector<std::string> warnings;
  DataPipelineOptions options(const std::string& data_file) {
    DataPipelineOptions o;
    o.dataset.dataset = {data_file};
    o.dataset.split_dataset_ratio = 0.1;
    o.dataset.warn = [this](const std::string& w) { warnings.push_back(w); };
    o.encode.mode = EncodeMode::Chat;
    o.encode.chat = &chat;
    o.encode.max_length = 4096;
    o.load_from_cache_file = true;
    o.cache_dir = dir.file("cache");
    return o;
  }
};

TEST_F(DataPipeline, SecondRunLoadsTheCache) {
  std::string data = fixtures_dir() + "/gsm8k-train-20.jsonl";
  auto o = options(data);
  PreparedData first = prepare_data(o);
  EXPECT_FALSE(first.cache_hit);
  EXPECT_EQ(first.train_samples.size(), 18u);
  EXPECT_EQ(first.val->size(), 2);
  ASSERT_TRUE(std::filesystem::exists(first.train_cache_path));
  ASSERT_TRUE(std::filesystem::exists(first.val_cache_path));
  PreparedData second = prepare_data(o);
  EXPECT_TRUE(second.cache_hit);
  EXPECT_TRUE(second.train_samples.empty());  // no rows were read
  expect_same(*first.train, *second.train);
  expect_same(*first.val, *second.val);
  EXPECT_EQ(second.load_report.train, 18);
  EXPECT_EQ(second.train->stats().to_json(), first.train->stats().to_json());
  EXPECT_NE(second.summary().find("loaded from the tokenized cache"), std::string::npos);
  // More threads: same key, still a hit.
  o.dataset.dataset_num_proc = 3;
  EXPECT_TRUE(prepare_data(o).cache_hit);
  EXPECT_TRUE(warnings.empty());
}

TEST_F(DataPipeline, AnyRelevantChangeMisses) {
  std::string data = dir.write("d.jsonl", testing::read_bytes(fixtures_dir() + "/gsm8k-train-20.jsonl"));
  auto o = options(data);
  prepare_data(o);
  ASSERT_TRUE(prepare_data(o).cache_hit);
  auto changed = [&](auto&& edit) {
    auto c = options(data);
    edit(c);
    return !prepare_data(c).cache_hit;
  };
  EXPECT_TRUE(changed([](DataPipelineOptions& c) { c.encode.max_length = 300; }));
  EXPECT_TRUE(changed([](DataPipelineOptions& c) { c.encode.truncation = TruncationStrategy::Left; }));
  EXPECT_TRUE(changed([](DataPipelineOptions& c) { c.dataset.data_seed = 1; }));
  EXPECT_TRUE(changed([](DataPipelineOptions& c) { c.dataset.split_dataset_ratio = 0.2; }));
  EXPECT_TRUE(changed([&](DataPipelineOptions& c) { c.dataset.dataset = {data + "#10"}; }));
  EXPECT_TRUE(changed([&](DataPipelineOptions& c) { c.encode.mode = EncodeMode::Prompt; }));
  // The file's bytes changed (same name, same size).
  std::string bytes = testing::read_bytes(data);
  bytes[bytes.find("Natalia")] = 'M';
  dir.write("d.jsonl", bytes);
  EXPECT_FALSE(prepare_data(o).cache_hit);
  EXPECT_TRUE(prepare_data(o).cache_hit);
}

TEST_F(DataPipeline, CorruptCacheIsRebuiltWithAWarning) {
  auto o = options(fixtures_dir() + "/gsm8k-train-20.jsonl");
  PreparedData first = prepare_data(o);
  std::string bytes = testing::read_bytes(first.train_cache_path);
  bytes[bytes.size() / 2] ^= 0x55;
  std::ofstream(first.train_cache_path, std::ios::binary | std::ios::trunc) << bytes;
  PreparedData rebuilt = prepare_data(o);
  EXPECT_FALSE(rebuilt.cache_hit);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("is unusable (payload checksum mismatch); rebuilding it"), std::string::npos) << warnings[0];
  expect_same(*first.train, *rebuilt.train);
  EXPECT_TRUE(prepare_data(o).cache_hit);
}

TEST_F(DataPipeline, WithoutCachingNothingIsWritten) {
  auto o = options(fixtures_dir() + "/gsm8k-train-20.jsonl");
  o.load_from_cache_file = false;
  PreparedData d = prepare_data(o);
  EXPECT_FALSE(d.cache_hit);
  EXPECT_FALSE(std::filesystem::exists(dir.file("cache")));
  EXPECT_EQ(d.train->size(), 18);
}

TEST_F(DataPipeline, UnwritableCacheIsOnlyAWarning) {
  auto o = options(fixtures_dir() + "/gsm8k-train-20.jsonl");
  dir.write("blocker", "a file where the cache directory should be");
  o.cache_dir = dir.file("blocker") + "/sub";
  PreparedData d = prepare_data(o);
  EXPECT_EQ(d.train->size(), 18);
  ASSERT_FALSE(warnings.empty());
  EXPECT_NE(warnings.back().find("could not write the dataset cache"), std::string::npos) << warnings.back();
}

TEST_F(DataPipeline, TooShortMaxLengthExplainsItself) {
  auto o = options(fixtures_dir() + "/gsm8k-train-20.jsonl");
  o.encode.max_length = 20;
  o.load_from_cache_file = false;
  try {
    prepare_data(o);
    FAIL();
  } catch (const Error& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("no training sequences after tokenization"), std::string::npos) << w;
    EXPECT_NE(w.find("18 deleted as longer than max_length"), std::string::npos) << w;
  }
}

TEST_F(DataPipeline, PromptModeAlwaysLoadsTheSamples) {
  std::string data = dir.write("grpo.jsonl", "{\"problem\": \"1+1?\", \"solution\": \"2\"}\n{\"problem\": \"2+2?\", "
                                             "\"solution\": \"4\"}\n");
  auto o = options(data);
  o.dataset.split_dataset_ratio = 0;
  o.encode.mode = EncodeMode::Prompt;
  for (int run = 0; run < 2; ++run) {
    PreparedData d = prepare_data(o);
    EXPECT_FALSE(d.cache_hit);
    ASSERT_EQ(d.train_samples.size(), 2u);
    ASSERT_EQ(d.train->size(), 2);
    const Sample& s = d.train_samples[static_cast<size_t>(d.train->sample_index(0))];
    EXPECT_TRUE(s.extra.contains("solution"));
    std::string text = tok.decode(std::vector<int32_t>(d.train->ids(0).begin(), d.train->ids(0).end()));
    EXPECT_EQ(text.find(s.extra["solution"].get<std::string>() + "<|im_end|>"), std::string::npos) << text;
    EXPECT_EQ(text.substr(text.size() - 22), "<|im_start|>assistant\n");
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("cache")));
}

TEST_F(DataPipeline, PackPlanOverThePreparedSet) {
  auto o = options(fixtures_dir() + "/gsm8k-train-20.jsonl");
  o.load_from_cache_file = false;
  PreparedData d = prepare_data(o);
  auto plan = make_pack_plan(*d.train, 1024);
  EXPECT_EQ(static_cast<int64_t>(plan->sequences.size()), d.train->size());
  EXPECT_LT(plan->rows(), d.train->size());
}

}  // namespace
}  // namespace swift::data
