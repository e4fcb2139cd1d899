// tests/ops/test_attention_decode.cpp — attention against a KV cache: fast kernel vs the naive reference, and vs
// ops::attention over the whole sequence (the rows of the new queries must agree), with GQA and windows.
#include <gtest/gtest.h>

#include <cmath>
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

}  // namespace
}  // namespace swift
