// tests/ops/test_attention_decode.cpp — attention against a KV cache: fast kernel vs the naive reference, and vs
// ops::attention over the whole sequence (the rows of the new queries must agree), with GQA and windows; the
// replayable forms (attention_decode_at with the position in a tensor, kv_cache_write) equal the host-position op
// bit for bit on the CPU and check the position they read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "ops/attention_decode.h"
#include "ops/ops.h"

namespace swift {
namespace {

// fp32 dot products and softmax against a double reference / a blocked flash kernel: rounding only.
constexpr double kTol = 2e-5;

Tensor random_tensor(const Shape& shape, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Tensor t = Tensor::empty(shape, DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.item(i) - b.item(i)));
  return m;
}

TEST(OpsAttentionDecode, MatchesReferenceAndFullAttention) {
  std::mt19937 rng(11);
  struct Case { int64_t t, hq, hkv, d, start, window; };
  for (const Case c : {Case{13, 4, 2, 12, 12, 0}, Case{13, 6, 1, 20, 7, 0}, Case{33, 3, 3, 8, 20, 5},
                       Case{7, 9, 3, 64, 0, 0}, Case{5, 2, 1, 7, 4, 1}}) {
    const Tensor q = random_tensor({c.t, c.hq, c.d}, rng);
    const Tensor k = random_tensor({c.t, c.hkv, c.d}, rng);
    const Tensor v = random_tensor({c.t, c.hkv, c.d}, rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    Tensor full = Tensor::empty({c.t, c.hq, c.d}, DType::F32), none;
    ops::attention(q, k, v, Tensor::from_i32({2}, {0, static_cast<int32_t>(c.t)}), scale, c.window, full, none);
    const Tensor q_new = q.slice_rows(c.start, c.t);
    Tensor fast = Tensor::empty(q_new.shape(), DType::F32), ref = Tensor::empty(q_new.shape(), DType::F32);
    ops::attention_decode(q_new, k, v, c.start, scale, c.window, fast);
    ops::ref::attention_decode(q_new, k, v, c.start, scale, c.window, ref);
    EXPECT_LT(max_abs_diff(fast, ref), kTol) << "T " << c.t << " start " << c.start;
    EXPECT_LT(max_abs_diff(fast, full.slice_rows(c.start, c.t)), kTol) << "T " << c.t << " start " << c.start;
    for (int64_t i = 0; i < fast.numel(); ++i) ASSERT_TRUE(std::isfinite(fast.item(i)));
  }
}

TEST(OpsAttentionDecode, BadArgumentsThrowNamingTheOp) {
  Tensor q = Tensor::zeros({2, 4, 8}, DType::F32), k = Tensor::zeros({5, 2, 8}, DType::F32);
  Tensor out = Tensor::zeros({2, 4, 8}, DType::F32);
  EXPECT_THROW(ops::attention_decode(q, k, k, 4, 1.0f, 0, out), Error);  // queries past the cache
  Tensor k3 = Tensor::zeros({5, 3, 8}, DType::F32);
  try {
    ops::attention_decode(q, k3, k3, 0, 1.0f, 0, out);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_decode"), std::string::npos);
  }
}

TEST(OpsAttentionDecode, AtDevicePositionEqualsHostPositionBitForBit) {
  std::mt19937 rng(12);
  struct Case { int64_t tq, hq, hkv, d, start, rows, max_keys, window; };
  for (const Case c : {Case{1, 4, 2, 12, 9, 16, 16, 0}, Case{1, 6, 1, 20, 0, 8, 4, 0}, Case{3, 3, 3, 8, 5, 12, 8, 2}}) {
    const Tensor q = random_tensor({c.tq, c.hq, c.d}, rng);
    const Tensor k = random_tensor({c.rows, c.hkv, c.d}, rng), v = random_tensor({c.rows, c.hkv, c.d}, rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    Tensor want = Tensor::empty(q.shape(), DType::F32), got = Tensor::empty(q.shape(), DType::F32);
    ops::attention_decode(q, k, v, c.start, scale, c.window, want);
    EXPECT_EQ(ops::attention_decode_workspace(q, k, c.max_keys, c.window), 0);  // the CPU kernel needs none
    ops::attention_decode_at(q, k, v, Tensor::from_i32({1}, {static_cast<int32_t>(c.start)}), c.max_keys, scale,
                             c.window, got, Tensor());
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), static_cast<size_t>(want.numel()) * 4), 0) << "start " << c.start;
  }
}

TEST(OpsAttentionDecode, AtDevicePositionRefusesPositionsPastTheBound) {
  Tensor q = Tensor::zeros({1, 2, 8}, DType::F32), k = Tensor::zeros({10, 1, 8}, DType::F32);
  Tensor out = Tensor::zeros({1, 2, 8}, DType::F32);
  for (const int32_t start : {-1, 6}) {  // max_keys 6: queries at [6, 7) are past it
    try {
      ops::attention_decode_at(q, k, k, Tensor::from_i32({1}, {start}), 6, 1.0f, 0, out, Tensor());
      ADD_FAILURE() << "start " << start << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("attention_decode_at"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(ops::attention_decode_at(q, k, k, Tensor::from_i32({1}, {0}), 11, 1.0f, 0, out, Tensor()), Error);
  EXPECT_THROW(ops::attention_decode_at(q, k, k, Tensor::from_i32({2}, {0, 0}), 6, 1.0f, 0, out, Tensor()), Error);
}

TEST(OpsKvCacheWrite, CopiesRowsAtThePositionAndChecksIt) {
  std::mt19937 rng(13);
  Tensor k_cache = Tensor::zeros({6, 2, 4}, DType::F32), v_cache = Tensor::zeros({6, 2, 4}, DType::F32);
  const Tensor k = random_tensor({2, 2, 4}, rng), v = random_tensor({2, 2, 4}, rng);
  ops::kv_cache_write(k, v, k_cache, v_cache, Tensor::from_i32({1}, {3}));
  for (int64_t r = 0; r < 6; ++r) {
    for (int64_t e = 0; e < 8; ++e) {
      const bool written = r == 3 || r == 4;
      EXPECT_EQ(k_cache.item(r * 8 + e), written ? k.item((r - 3) * 8 + e) : 0.0) << r << " " << e;
      EXPECT_EQ(v_cache.item(r * 8 + e), written ? v.item((r - 3) * 8 + e) : 0.0) << r << " " << e;
    }
  }
  EXPECT_THROW(ops::kv_cache_write(k, v, k_cache, v_cache, Tensor::from_i32({1}, {5})), Error);  // rows 5, 6
  try {
    ops::kv_cache_write(k, v, k_cache, v_cache, Tensor::from_i32({1}, {-1}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_cache_write"), std::string::npos) << e.what();
  }
  Tensor narrow = Tensor::zeros({6, 1, 4}, DType::F32);
  EXPECT_THROW(ops::kv_cache_write(k, v, narrow, narrow, Tensor::from_i32({1}, {0})), Error);
}

}  // namespace
}  // namespace swift
