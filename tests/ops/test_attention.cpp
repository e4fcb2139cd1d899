// tests/ops/test_attention.cpp — the flash-style CPU attention against the reference: packed variable-length
// batches, grouped-query heads (ratios 1, 3, 7, Hkv = 1), sliding windows, lse, degenerate sequences, errors.
//
// Invariants:
//  - Outputs and lse are guarded and start as NaN; every case checks guards, finiteness and the reference.
//  - Packing must not change a bit: the kernel blocks queries and keys relative to each sequence's start, so
//    a sequence run inside a packed batch and alone goes through the same arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

// Online softmax in fp32 with exp_approx (<= 1 ulp) and fp32 sums over up to a few hundred keys, against a
// double reference: outputs are convex combinations of |v| <= 1, so absolute error ~ 1e-6; 2e-6 leaves slack.
constexpr double kAttnAtol = 2e-6;
constexpr double kAttnRtol = 2e-6;
// lse = m + log(l): l is an fp32 sum of up to ~300 terms of <= 1; relative error of l ~ 1e-6 -> absolute in lse.
constexpr double kLseAtol = 2e-6;
// Packed vs alone: the same arithmetic in the same order.
constexpr double kBitExact = 0.0;

struct AttnCase {
  std::vector<int32_t> lengths;
  int64_t hq, hkv, d, window;
  float q_range = 1.0f;  // larger values sharpen the softmax
};

Tensor cu_from_lengths(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), cu.begin() + 1);
  return Tensor::from_i32({static_cast<int64_t>(cu.size())}, cu);
}

std::string describe(const AttnCase& c) {
  std::string s = "lengths={";
  for (int32_t l : c.lengths) s += std::to_string(l) + ",";
  return s + "} Hq=" + std::to_string(c.hq) + " Hkv=" + std::to_string(c.hkv) + " D=" + std::to_string(c.d) +
         " window=" + std::to_string(c.window) + " q_range=" + std::to_string(c.q_range);
}

void check_against_reference(const AttnCase& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  const int64_t t = std::accumulate(c.lengths.begin(), c.lengths.end(), int64_t{0});
  Tensor q = random_tensor({t, c.hq, c.d}, DType::F32, seed, -c.q_range, c.q_range);
  Tensor k = random_tensor({t, c.hkv, c.d}, DType::F32, seed + 1);
  Tensor v = random_tensor({t, c.hkv, c.d}, DType::F32, seed + 2);
  Tensor cu = cu_from_lengths(c.lengths);
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  Guarded out({t, c.hq, c.d}, DType::F32), lse({c.hq, t}, DType::F32);
  Guarded out_ref({t, c.hq, c.d}, DType::F32), lse_ref({c.hq, t}, DType::F32);
  ops::attention(q, k, v, cu, scale, c.window, out.tensor, lse.tensor);
  ops::ref::attention(q, k, v, cu, scale, c.window, out_ref.tensor, lse_ref.tensor);
  EXPECT_TRUE(out.guards_intact());
  EXPECT_TRUE(lse.guards_intact());
  EXPECT_TRUE(all_finite(out.tensor));
  EXPECT_TRUE(all_finite(lse.tensor));
  EXPECT_TRUE(all_close(out.tensor, out_ref.tensor, kAttnAtol, kAttnRtol));
  EXPECT_TRUE(all_close(lse.tensor, lse_ref.tensor, kLseAtol, kAttnRtol));
  // Without lse the output is the same.
  Guarded out2({t, c.hq, c.d}, DType::F32);
  Tensor no_lse;
  ops::attention(q, k, v, cu, scale, c.window, out2.tensor, no_lse);
  EXPECT_TRUE(bit_equal(out2.tensor, out.tensor));
}

TEST(OpsAttention, MatchesReference) {
  const AttnCase cases[] = {
      {{1}, 1, 1, 8, 0},
      {{5}, 3, 3, 5, 0},                      // odd head dim
      {{5, 7, 13}, 3, 1, 12, 0},              // GQA 3:1
      {{33, 1, 77}, 6, 2, 16, 0},             // GQA 3:2
      {{33, 1, 77}, 6, 2, 16, 5},             // sliding window
      {{33, 1, 77}, 6, 2, 16, 1},             // window 1: each query sees itself only
      {{200}, 9, 3, 64, 0},                   // SmolLM2-135M head layout
      {{200}, 9, 3, 64, 64},                  // window equal to the key block
      {{130, 70}, 4, 4, 32, 100},             // GQA ratio 1, window crossing block boundaries
      {{0, 5, 0, 7, 0}, 2, 1, 8, 0},          // empty sequences anywhere
      {{65, 64, 63}, 7, 1, 24, 0},            // Hkv = 1, Hq = 7; lengths around the block size
      {{150}, 2, 1, 32, 0, 6.0f},             // sharp softmax
      {{97}, 4, 2, 128, 30, 3.0f},
  };
  uint32_t seed = 1000;
  for (const AttnCase& c : cases) check_against_reference(c, seed += 10);
}

TEST(OpsAttention, PackedBatchEqualsEachSequenceAlone) {
  const std::vector<int32_t> lengths = {1, 70, 0, 5, 129, 64};
  for (int64_t window : {int64_t{0}, int64_t{17}}) {
    const int64_t hq = 6, hkv = 2, d = 16;
    const int64_t t = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
    Tensor q = random_tensor({t, hq, d}, DType::F32, 1);
    Tensor k = random_tensor({t, hkv, d}, DType::F32, 2);
    Tensor v = random_tensor({t, hkv, d}, DType::F32, 3);
    Tensor cu = cu_from_lengths(lengths);
    Tensor out = Tensor::empty({t, hq, d}, DType::F32), lse = Tensor::empty({hq, t}, DType::F32);
    ops::attention(q, k, v, cu, 0.25f, window, out, lse);
    int64_t begin = 0;
    for (int32_t len : lengths) {
      SCOPED_TRACE("window " + std::to_string(window) + " sequence at " + std::to_string(begin) + " length " +
                   std::to_string(len));
      if (len > 0) {
        Tensor qs = q.slice_rows(begin, begin + len).clone(), ks = k.slice_rows(begin, begin + len).clone();
        Tensor vs = v.slice_rows(begin, begin + len).clone();
        Guarded alone({len, hq, d}, DType::F32), alone_lse({hq, len}, DType::F32);
        ops::attention(qs, ks, vs, cu_from_lengths({len}), 0.25f, window, alone.tensor, alone_lse.tensor);
        EXPECT_TRUE(all_close(out.slice_rows(begin, begin + len), alone.tensor, kBitExact, kBitExact));
        for (int64_t h = 0; h < hq; ++h) {
          for (int64_t i = 0; i < len; ++i) EXPECT_EQ(lse.item(h * t + begin + i), alone_lse.tensor.item(h * len + i));
        }
      }
      begin += len;
    }
  }
}

TEST(OpsAttention, WindowAtLeastSequenceLengthEqualsUnlimited) {
  const int64_t t = 90, hq = 4, hkv = 2, d = 8;
  Tensor q = random_tensor({t, hq, d}, DType::F32, 7), k = random_tensor({t, hkv, d}, DType::F32, 8);
  Tensor v = random_tensor({t, hkv, d}, DType::F32, 9);
  Tensor cu = cu_from_lengths({40, 50});
  Tensor a = Tensor::empty({t, hq, d}, DType::F32), b = Tensor::empty({t, hq, d}, DType::F32), none;
  ops::attention(q, k, v, cu, 0.3f, 0, a, none);
  ops::attention(q, k, v, cu, 0.3f, 50, b, none);
  EXPECT_TRUE(bit_equal(a, b));
}

TEST(OpsAttention, FirstTokenCopiesItsValueAndLseIsItsScore) {
  // A query that sees only itself outputs v exactly (weight 1) with lse = its own scaled score.
  const int64_t hq = 2, d = 4;
  Tensor q = random_tensor({3, hq, d}, DType::F32, 1), k = random_tensor({3, 1, d}, DType::F32, 2);
  Tensor v = random_tensor({3, 1, d}, DType::F32, 3);
  Tensor out = Tensor::empty({3, hq, d}, DType::F32), lse = Tensor::empty({hq, 3}, DType::F32);
  ops::attention(q, k, v, cu_from_lengths({1, 2}), 0.5f, 0, out, lse);
  for (int64_t h = 0; h < hq; ++h) {
    double score = 0;
    for (int64_t e = 0; e < d; ++e) {
      EXPECT_EQ(out.item(h * d + e), v.item(e));
      EXPECT_EQ(out.item((1 * hq + h) * d + e), v.item(1 * d + e));  // first token of the second sequence
      score += q.item(h * d + e) * k.item(e);
    }
    EXPECT_NEAR(lse.item(h * 3), 0.5 * score, kLseAtol);
  }
}

TEST(OpsAttention, ErrorsThrowNamingTheProblem) {
  Tensor q = Tensor::zeros({6, 4, 8}, DType::F32), k = Tensor::zeros({6, 3, 8}, DType::F32);
  Tensor out = Tensor::zeros({6, 4, 8}, DType::F32), none;
  Tensor cu = cu_from_lengths({2, 4});
  EXPECT_TRUE(throws_error([&] { ops::attention(q, k, k, cu, 1.0f, 0, out, none); }, {"attention:", "multiple"}));
  Tensor k2 = Tensor::zeros({6, 2, 8}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::attention(q, k2, k2, cu, 1.0f, -1, out, none); }, {"attention: window"}));
  Tensor lse_bad = Tensor::zeros({6, 4}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::attention(q, k2, k2, cu, 1.0f, 0, out, lse_bad); }, {"attention: lse"}));
  EXPECT_TRUE(throws_error([&] { ops::attention(q, k2, k2, cu, 1.0f, 0, q, none); }, {"attention: out", "overlaps"}));
  Tensor k_short = Tensor::zeros({5, 2, 8}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::attention(q, k_short, k_short, cu, 1.0f, 0, out, none); }, {"attention:"}));
  // cu_seqlens: every rule.
  auto run = [&](const Tensor& c) { ops::attention(q, k2, k2, c, 1.0f, 0, out, none); };
  EXPECT_TRUE(throws_error([&] { run(Tensor::from_i32({3}, {1, 2, 6})); }, {"cu_seqlens", "must start at 0"}));
  EXPECT_TRUE(throws_error([&] { run(Tensor::from_i32({3}, {0, 4, 3})); }, {"cu_seqlens", "decreases at index 2"}));
  EXPECT_TRUE(throws_error([&] { run(Tensor::from_i32({3}, {0, 2, 5})); }, {"cu_seqlens", "ends at 5", "T = 6"}));
  EXPECT_TRUE(throws_error([&] { run(Tensor::from_i32({1}, {0})); }, {"cu_seqlens", "at least 2"}));
  EXPECT_TRUE(throws_error([&] { run(Tensor::zeros({3}, DType::I64)); }, {"cu_seqlens", "I32"}));
  EXPECT_TRUE(throws_error([&] { run(Tensor::zeros({1, 3}, DType::I32)); }, {"cu_seqlens", "one dimension"}));
  EXPECT_TRUE(throws_error([&] { ops::ref::attention(q, k2, k2, Tensor::from_i32({2}, {0, 7}), 1.0f, 0, out, none); },
                           {"cu_seqlens", "ends at 7"}));
  EXPECT_NO_THROW(ops::check_cu_seqlens(Tensor::from_i32({4}, {0, 0, 6, 6}), 6, "test"));
}

}  // namespace
}  // namespace swift::test
