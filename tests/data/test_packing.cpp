// tests/data/test_packing.cpp — best-fit decreasing against a direct transcription of binpacking's
// to_constant_volume (and ms-swift's windowed driver), packing invariants, the padding report, and packed
// batches: every token of every sequence exactly once, boundaries, positions, labels and targets.
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <random>

#include "core/error.h"
#include "data/loader.h"
#include "data/packing.h"
#include "data_test_util.h"

namespace swift::data {
namespace {

// binpacking.to_constant_volume, written as plainly as the Python: O(n * bins).
std::vector<std::vector<int64_t>> reference_bfd(const std::vector<int64_t>& items, const std::vector<int64_t>& lengths,
                                                int64_t capacity) {
  std::vector<int64_t> order = items;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lengths[a] > lengths[b]; });
  std::vector<std::vector<int64_t>> bins(1);
  std::vector<int64_t> sums(1, 0);
  for (size_t k = 0; k < order.size(); ++k) {
    int64_t w = lengths[order[k]];
    int64_t best = -1;
    for (size_t b = 0; b < sums.size(); ++b) {
      if (sums[b] + w <= capacity && (best < 0 || sums[b] > sums[best])) best = static_cast<int64_t>(b);
    }
    if (best < 0) {
      if (k > 0) {
        bins.emplace_back();
        sums.push_back(0);
      }
      best = static_cast<int64_t>(bins.size()) - 1;
    }
    bins[best].push_back(order[k]);
    sums[best] += w;
  }
  if (order.empty()) bins.clear();
  return bins;
}

// ms-swift's create_packed_idx: windows of `window`, the last bin of each window carried into the next.
std::vector<std::vector<int64_t>> reference_windowed(const std::vector<int64_t>& lengths, int64_t capacity,
                                                     int64_t window) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> input;
  int64_t n = static_cast<int64_t>(lengths.size());
  for (int64_t i = 0;; ) {
    for (int64_t k = i; k < std::min(n, i + window); ++k) input.push_back(k);
    if (input.empty()) break;
    i += window;
    bool finished = i >= n;
    auto bins = reference_bfd(input, lengths, capacity);
    input.clear();
    if (!finished && !bins.empty()) {
      input = bins.back();
      bins.pop_back();
    }
    for (auto& b : bins) out.push_back(b);
    if (finished) break;
  }
  return out;
}

std::vector<std::vector<int64_t>> rows_of(const PackPlan& plan) {
  std::vector<std::vector<int64_t>> rows;
  for (int64_t r = 0; r < plan.rows(); ++r) rows.emplace_back(plan.row(r).begin(), plan.row(r).end());
  return rows;
}

std::vector<int64_t> random_lengths(int n, int max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> l(static_cast<size_t>(n));
  for (auto& x : l) x = 1 + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_len));
  return l;
}

TEST(Packing, MatchesBinpackingToConstantVolume) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    auto lengths = random_lengths(300 + static_cast<int>(seed) * 7, 500, seed);
    std::vector<int64_t> all(lengths.size());
    std::iota(all.begin(), all.end(), int64_t{0});
    auto plan = pack_best_fit_decreasing(lengths, 512);
    ASSERT_EQ(rows_of(plan), reference_bfd(all, lengths, 512)) << "seed " << seed;
  }
}

TEST(Packing, WindowedMatchesMsSwiftDriver) {
  for (uint32_t seed = 0; seed < 5; ++seed) {
    auto lengths = random_lengths(2500, 300, 100 + seed);
    auto plan = pack_best_fit_decreasing(lengths, 1024, 1000);
    ASSERT_EQ(rows_of(plan), reference_windowed(lengths, 1024, 1000)) << "seed " << seed;
  }
}

TEST(Packing, EverySequenceOnceAndRowsWithinCapacity) {
  auto lengths = random_lengths(5000, 2048, 9);
  for (int64_t window : {int64_t{0}, int64_t{1000}, int64_t{7}}) {
    auto plan = pack_best_fit_decreasing(lengths, 2048, window);
    std::vector<int> seen(lengths.size(), 0);
    int64_t tokens = 0;
    for (int64_t r = 0; r < plan.rows(); ++r) {
      int64_t sum = 0;
      for (int64_t s : plan.row(r)) {
        ++seen[static_cast<size_t>(s)];
        sum += lengths[static_cast<size_t>(s)];
      }
      ASSERT_LE(sum, 2048);
      ASSERT_GT(sum, 0);
      tokens += sum;
    }
    for (int c : seen) ASSERT_EQ(c, 1);
    EXPECT_EQ(tokens, std::accumulate(lengths.begin(), lengths.end(), int64_t{0}));
    auto report = packing_report(lengths, plan, 4);
    EXPECT_GT(report.fill, window == 7 ? 0.5 : 0.95) << report.summary();
  }
}

TEST(Packing, ReportNumbers) {
  std::vector<int64_t> lengths = {6, 2, 4, 4, 8, 1};
  auto plan = pack_best_fit_decreasing(lengths, 8);
  // Longest first: 8 | 6+2 | 4+4 | 1.
  EXPECT_EQ(rows_of(plan), (std::vector<std::vector<int64_t>>{{4}, {0, 1}, {2, 3}, {5}}));
  auto r = packing_report(lengths, plan, 2);
  EXPECT_EQ(r.tokens, 25);
  EXPECT_DOUBLE_EQ(r.fill, 25.0 / 32.0);
  // Unpacked batches of 2 in dataset order: (6,2)->12, (4,4)->8, (8,1)->16: 36 slots for 25 tokens.
  EXPECT_DOUBLE_EQ(r.padding_unpacked, 1.0 - 25.0 / 36.0);
  EXPECT_NE(r.summary().find("into 4 rows of 8"), std::string::npos) << r.summary();
  EXPECT_THROW(pack_best_fit_decreasing(std::vector<int64_t>{9}, 8), Error);
  EXPECT_THROW(pack_best_fit_decreasing(std::vector<int64_t>{1}, 0), Error);
}

// A dataset whose token values encode (sequence, position), so every token can be traced.
TokenizedDataset traceable_dataset(const std::vector<int64_t>& lengths) {
  TokenizedDataset::Parts p;
  for (size_t s = 0; s < lengths.size(); ++s) {
    for (int64_t j = 0; j < lengths[s]; ++j) {
      p.ids.push_back(static_cast<int32_t>(s * 10000 + j));
      p.loss_mask.push_back(j == 0 ? 0 : ((s + j) % 3 != 0));
    }
    p.offsets.push_back(static_cast<int64_t>(p.ids.size()));
    p.sample_index.push_back(static_cast<int64_t>(s));
    p.label.push_back(-1);
  }
  return TokenizedDataset::from_parts(std::move(p));
}

TEST(Packing, PackedBatchesHoldEveryTokenOnceWithCleanBoundaries) {
  auto lengths = random_lengths(700, 120, 4);
  auto data = std::make_shared<const TokenizedDataset>(traceable_dataset(lengths));
  auto plan = std::make_shared<const PackPlan>(pack_best_fit_decreasing(data->lengths(), 256));
  LoaderOptions o;
  o.batch_size = 3;
  DataLoader loader(data, o, plan);
  loader.start(0);
  std::map<int64_t, int> token_seen;
  while (auto b = loader.next()) {
    const int32_t* ids = b->ids.data<int32_t>();
    const int32_t* pos = b->positions.data<int32_t>();
    const int32_t* cu = b->cu_seqlens.data<int32_t>();
    const int32_t* lab = b->labels.data<int32_t>();
    const int32_t* tgt = b->targets.data<int32_t>();
    const int64_t nseq = b->cu_seqlens.numel() - 1;
    ASSERT_EQ(nseq, static_cast<int64_t>(b->sequences.size()));
    ASSERT_EQ(cu[0], 0);
    ASSERT_EQ(cu[nseq], b->num_tokens);
    ASSERT_LE(b->num_tokens, 3 * 256);
    for (int64_t k = 0; k < nseq; ++k) {
      int64_t s = b->sequences[static_cast<size_t>(k)];
      ASSERT_EQ(cu[k + 1] - cu[k], lengths[static_cast<size_t>(s)]);
      for (int32_t t = cu[k]; t < cu[k + 1]; ++t) {
        int32_t j = t - cu[k];
        ASSERT_EQ(ids[t], s * 10000 + j);  // the sequence's own token, in order
        ASSERT_EQ(pos[t], j);              // positions restart per sequence
        ++token_seen[ids[t]];
        bool trained = data->loss_mask(s)[static_cast<size_t>(j)];
        ASSERT_EQ(lab[t], trained ? ids[t] : -100);
        if (t + 1 < cu[k + 1]) {
          ASSERT_EQ(tgt[t], lab[t + 1]);
        } else {
          ASSERT_EQ(tgt[t], -100);  // never predicts across the boundary
        }
      }
      ASSERT_EQ(lab[cu[k]], -100);  // the first token of every sequence is never a target
    }
  }
  int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  ASSERT_EQ(static_cast<int64_t>(token_seen.size()), total);
  for (auto [id, c] : token_seen) ASSERT_EQ(c, 1) << id;
}

}  // namespace
}  // namespace swift::data
