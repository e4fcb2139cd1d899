// tests/data/test_dataset.cpp — --dataset loading: `path#N` sampling counts, --split_dataset_ratio, --val_dataset,
// several datasets, shuffling and its seed, thread invariance, bad-row policies and their messages.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "core/error.h"
#include "data/dataset.h"
#include "data_test_util.h"

namespace swift::data {
namespace {

using testing::fixtures_dir;
using testing::shared_datasets_dir;
using testing::TempDir;

// n rows {"query": "q<i>", "response": "r<i>"}.
std::string rows_jsonl(int n, const std::string& prefix = "") {
  std::string s;
  for (int i = 0; i < n; ++i) s += fmt::format("{{\"query\": \"{}q{}\", \"response\": \"r{}\"}}\n", prefix, i, i);
  return s;
}

std::vector<std::string> queries(const std::vector<Sample>& samples) {
  std::vector<std::string> q;
  for (const auto& s : samples) q.push_back(s.messages[0].content);
  return q;
}

DatasetOptions quiet(std::vector<std::string> datasets, std::vector<std::string>* warnings = nullptr) {
  DatasetOptions o;
  o.dataset = std::move(datasets);
  o.warn = [warnings](const std::string& w) {
    if (warnings) warnings->push_back(w);
  };
  return o;
}

TEST(Dataset, SpecParsing) {
  auto s = parse_dataset_spec("data/a.jsonl#100");
  EXPECT_EQ(s.path, "data/a.jsonl");
  EXPECT_EQ(s.sample_count, 100);
  s = parse_dataset_spec("data/a#b.jsonl");
  EXPECT_EQ(s.path, "data/a#b.jsonl");
  EXPECT_FALSE(s.sample_count.has_value());
  EXPECT_THROW(parse_dataset_spec("a.jsonl#0"), Error);
  EXPECT_THROW(parse_dataset_spec("#5"), Error);
}

TEST(Dataset, SampleIndicesFollowMsSwift) {
  Rng rng(1);
  auto idx = sample_indices(10, 4, true, rng);
  EXPECT_EQ(idx.size(), 4u);
  EXPECT_EQ(std::set<int64_t>(idx.begin(), idx.end()).size(), 4u);  // without replacement
  idx = sample_indices(10, 25, true, rng);  // 2 full repeats + 5 drawn
  std::map<int64_t, int> count;
  for (auto i : idx) ++count[i];
  int thrice = 0;
  for (auto [i, c] : count) {
    EXPECT_TRUE(c == 2 || c == 3);
    thrice += c == 3;
  }
  EXPECT_EQ(thrice, 5);
  idx = sample_indices(10, 13, false, rng);  // no shuffle: the file, then its first rows
  EXPECT_EQ(idx, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2}));
}

TEST(Dataset, SamplingCountsAndSeveralDatasets) {
  TempDir dir;
  std::string a = dir.write("a.jsonl", rows_jsonl(10, "a"));
  std::string b = dir.write("b.jsonl", rows_jsonl(7, "b"));
  auto splits = load_datasets(quiet({a + "#25", b + "#3", a}));
  EXPECT_EQ(splits.train.size(), 25u + 3u + 10u);
  EXPECT_TRUE(splits.val.empty());
  std::map<std::string, int> count;
  for (const auto& q : queries(splits.train)) ++count[q];
  int a_total = 0, b_total = 0;
  for (auto [q, c] : count) (q[0] == 'a' ? a_total : b_total) += c;
  EXPECT_EQ(a_total, 35);
  EXPECT_EQ(b_total, 3);
  ASSERT_EQ(splits.report.files.size(), 3u);
  EXPECT_EQ(splits.report.files[1].samples, 7);
  EXPECT_EQ(splits.report.train, 38);
  EXPECT_EQ(splits.train[0].source.rfind(dir.path().string(), 0), 0u);
}

TEST(Dataset, SplitRatioCarvesADisjointValidationSet) {
  TempDir dir;
  std::string a = dir.write("a.jsonl", rows_jsonl(50));
  auto o = quiet({a});
  o.split_dataset_ratio = 0.1;
  auto splits = load_datasets(o);
  EXPECT_EQ(splits.val.size(), 5u);
  EXPECT_EQ(splits.train.size(), 45u);
  std::set<std::string> all;
  for (const auto& q : queries(splits.train)) all.insert(q);
  for (const auto& q : queries(splits.val)) EXPECT_TRUE(all.insert(q).second) << q << " in both";
  EXPECT_EQ(all.size(), 50u);
  // #N with a split: val = max(floor(min(rows, N) * ratio), 1), train = N - val.
  o.dataset = {a + "#20"};
  splits = load_datasets(o);
  EXPECT_EQ(splits.val.size(), 2u);
  EXPECT_EQ(splits.train.size(), 18u);
  o.split_dataset_ratio = 0.001;  // at least one validation row
  splits = load_datasets(o);
  EXPECT_EQ(splits.val.size(), 1u);
  o.dataset = {dir.write("one.jsonl", rows_jsonl(1))};
  o.split_dataset_ratio = 0.5;
  EXPECT_THROW(load_datasets(o), Error);
}

TEST(Dataset, ValDatasetWinsOverSplitRatio) {
  TempDir dir;
  std::vector<std::string> warnings;
  auto o = quiet({dir.write("t.jsonl", rows_jsonl(8))}, &warnings);
  o.val_dataset = {dir.write("v.jsonl", rows_jsonl(6, "v")) + "#4"};
  o.split_dataset_ratio = 0.5;
  auto splits = load_datasets(o);
  EXPECT_EQ(splits.train.size(), 8u);
  EXPECT_EQ(splits.val.size(), 4u);
  for (const auto& q : queries(splits.val)) EXPECT_EQ(q[0], 'v');
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("--split_dataset_ratio is ignored"), std::string::npos);
}

TEST(Dataset, ShuffleIsSeededAndOptional) {
  TempDir dir;
  std::string a = dir.write("a.jsonl", rows_jsonl(40));
  auto o = quiet({a});
  auto first = queries(load_datasets(o).train);
  EXPECT_EQ(first, queries(load_datasets(o).train));
  std::vector<std::string> in_order;
  for (int i = 0; i < 40; ++i) in_order.push_back(fmt::format("q{}", i));
  EXPECT_NE(first, in_order);
  o.data_seed = 7;
  EXPECT_NE(first, queries(load_datasets(o).train));
  o.dataset_shuffle = false;
  EXPECT_EQ(queries(load_datasets(o).train), in_order);
  o.dataset = {a + "#5"};
  EXPECT_EQ(queries(load_datasets(o).train), (std::vector<std::string>{"q0", "q1", "q2", "q3", "q4"}));
}

TEST(Dataset, SameSamplesForAnyThreadCount) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 3000; ++i) {
    if (i % 50 == 3) {
      text += "{\"nothing\": 1}\n";
    } else {
      text += fmt::format("{{\"query\": \"q{}\", \"response\": [\"a{}\", \"b{}\", \"c{}\"]}}\n", i, i, i, i);
    }
  }
  auto o = quiet({dir.write("big.jsonl", text) + "#2500"});
  o.split_dataset_ratio = 0.05;
  o.dataset_num_proc = 1;
  auto one = load_datasets(o);
  o.dataset_num_proc = 3;
  auto three = load_datasets(o);
  ASSERT_EQ(one.train.size(), three.train.size());
  ASSERT_EQ(one.val.size(), three.val.size());
  for (size_t i = 0; i < one.train.size(); ++i) {
    ASSERT_EQ(one.train[i].source, three.train[i].source);
    ASSERT_EQ(one.train[i].messages[1].content, three.train[i].messages[1].content);
  }
  EXPECT_EQ(one.report.files[0].unusable, 60);
}

TEST(Dataset, UnusableRowsAreDroppedOrStrictErrors) {
  TempDir dir;
  std::string p = dir.write("mixed.jsonl", "{\"query\": \"q\", \"response\": \"r\"}\n{\"foo\": 1}\n"
                                           "{\"query\": \"q2\", \"response\": \"r2\"}\n");
  std::vector<std::string> warnings;
  auto o = quiet({p}, &warnings);
  auto splits = load_datasets(o);
  EXPECT_EQ(splits.train.size(), 2u);
  EXPECT_EQ(splits.report.files[0].unusable, 1);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("dropped 0 malformed and 1 unusable of 3 rows (first: line 2: no usable fields"),
            std::string::npos)
      << warnings[0];
  o.strict = true;
  try {
    load_datasets(o);
    FAIL() << "strict did not fail";
  } catch (const Error& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("mixed.jsonl:2': no usable fields"), std::string::npos) << w;
    EXPECT_NE(w.find("--strict false"), std::string::npos) << w;
  }
}

TEST(Dataset, MalformedRowsErrorUnlessSkipped) {
  TempDir dir;
  std::string p = dir.write("bad.jsonl", "{\"query\": \"q\", \"response\": \"r\"}\n{\"query\": \n");
  auto o = quiet({p});
  try {
    load_datasets(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl' line 2: malformed JSON"), std::string::npos) << e.what();
  }
  o.skip_malformed_rows = true;
  auto splits = load_datasets(o);
  EXPECT_EQ(splits.train.size(), 1u);
  EXPECT_EQ(splits.report.files[0].malformed, 1);
}

TEST(Dataset, EmptyAfterFilteringIsAnError) {
  TempDir dir;
  std::string p = dir.write("useless.csv", "a,b\n1,2\n3,4\n");
  try {
    load_datasets(quiet({p}));
    FAIL();
  } catch (const Error& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("useless.csv': no usable samples after filtering (2 rows read"), std::string::npos) << w;
    EXPECT_NE(w.find("first problem: line 2: no usable fields (columns [a, b])"), std::string::npos) << w;
  }
  EXPECT_THROW(load_datasets(quiet({dir.write("empty.jsonl", "\n\n")})), Error);
  EXPECT_THROW(load_datasets(DatasetOptions{}), Error);
}

TEST(Dataset, EveryFileTypeLoads) {
  TempDir dir;
  std::vector<std::string> files = {
      dir.write("a.jsonl", "{\"query\": \"q\", \"response\": \"r\"}\n"),
      dir.write("b.json", "[{\"instruction\": \"i\", \"input\": \"x\", \"output\": \"o\"}]"),
      dir.write("c.csv", "question,answer\nq,\"a, with comma\"\n"),
      dir.write("d.txt", "plain text line\n"),
      fixtures_dir() + "/hh-rlhf-harmless-base-50.jsonl.gz#5",
  };
  auto o = quiet(files);
  o.dataset_shuffle = false;
  auto splits = load_datasets(o);
  ASSERT_EQ(splits.train.size(), 9u);
  EXPECT_EQ(splits.train[1].messages[0].content, "i\nx");
  EXPECT_EQ(splits.train[2].messages[1].content, "a, with comma");
  EXPECT_EQ(splits.train[3].messages[0].role, "assistant");
  EXPECT_FALSE(splits.train[8].rejected_messages.empty());
  EXPECT_EQ(splits.train[2].source, files[2] + ":2");
}

TEST(Dataset, Gsm8kTrainFromSharedData) {
  std::string dir = shared_datasets_dir();
  if (dir.empty()) GTEST_SKIP() << "../shared/data/datasets is absent (CI)";
  auto o = quiet({dir + "/gsm8k/train.jsonl"});
  o.split_dataset_ratio = 0.01;
  o.dataset_num_proc = 2;
  auto splits = load_datasets(o);
  EXPECT_EQ(splits.val.size(), 74u);
  EXPECT_EQ(splits.train.size(), 7473u - 74u);
}

}  // namespace
}  // namespace swift::data
