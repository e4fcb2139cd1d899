// tests/ops/test_backward_attention.cpp — attention_backward: finite differences of a double forward, the
// flash-style CPU kernel against the exact double reference (packed variable-length batches, GQA ratios 1, 3, 7,
// sliding windows, lengths around the block sizes), packed == alone bit for bit, and argument errors.
//
// Invariants:
//  - The forward (ops::attention) produces out and lse; the backward gets them as in training.
//  - Gradients are guarded and start as NaN: every element of dq, dk, dv must be written.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "grad_check.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

// Fast (fp32, exp_approx, sgemm blocks) vs the exact double gradient, with |q|, |k|, |v|, |dout| <= 1 (q up to 6
// for sharp softmaxes): dS = P (dP - Delta) is a difference of O(1) terms (|dP| <= D |dout||v|), so its
// absolute error is ~1e-6 relative to D, and dq/dk sum up to a few hundred such terms times |k|, |q| <= 1:
// ~1e-5 worst case. 2e-5 absolute + 1e-5 relative leaves margin; a wrong mask or scale is off by O(0.1).
constexpr double kAttnBwdAtol = 2e-5;
constexpr double kAttnBwdRtol = 1e-5;
constexpr double kFdRel = 2e-6;
constexpr double kFdRtol = 1e-5;

Tensor cu_from_lengths(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), cu.begin() + 1);
  return Tensor::from_i32({static_cast<int64_t>(cu.size())}, cu);
}

struct Case {
  std::vector<int32_t> lengths;
  int64_t hq, hkv, d, window;
  float q_range = 1.0f;
};

std::string describe(const Case& c) {
  std::string s = "lengths={";
  for (int32_t l : c.lengths) s += std::to_string(l) + ",";
  return s + "} Hq=" + std::to_string(c.hq) + " Hkv=" + std::to_string(c.hkv) + " D=" + std::to_string(c.d) +
         " window=" + std::to_string(c.window) + " q_range=" + std::to_string(c.q_range);
}

struct Inputs {
  Tensor q, k, v, dout, cu, out, lse;
  int64_t t;
};

Inputs make_inputs(const Case& c, uint32_t seed, float scale) {
  Inputs in;
  in.t = std::accumulate(c.lengths.begin(), c.lengths.end(), int64_t{0});
  in.q = random_tensor({in.t, c.hq, c.d}, DType::F32, seed, -c.q_range, c.q_range);
  in.k = random_tensor({in.t, c.hkv, c.d}, DType::F32, seed + 1);
  in.v = random_tensor({in.t, c.hkv, c.d}, DType::F32, seed + 2);
  in.dout = random_tensor({in.t, c.hq, c.d}, DType::F32, seed + 3);
  in.cu = cu_from_lengths(c.lengths);
  in.out = Tensor::empty({in.t, c.hq, c.d}, DType::F32);
  in.lse = Tensor::empty({c.hq, in.t}, DType::F32);
  ops::attention(in.q, in.k, in.v, in.cu, scale, c.window, in.out, in.lse);
  return in;
}

void check_against_reference(Margin& margin, const Case& c, uint32_t seed) {
  SCOPED_TRACE(describe(c));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  Inputs in = make_inputs(c, seed, scale);
  Guarded dq({in.t, c.hq, c.d}, DType::F32), dk({in.t, c.hkv, c.d}, DType::F32), dv({in.t, c.hkv, c.d}, DType::F32);
  Tensor dq_ref = Tensor::empty({in.t, c.hq, c.d}, DType::F32), dk_ref = Tensor::empty({in.t, c.hkv, c.d}, DType::F32);
  Tensor dv_ref = Tensor::empty({in.t, c.hkv, c.d}, DType::F32);
  ops::attention_backward(in.dout, in.q, in.k, in.v, in.out, in.lse, in.cu, scale, c.window, dq.tensor, dk.tensor,
                          dv.tensor);
  ops::ref::attention_backward(in.dout, in.q, in.k, in.v, in.out, in.lse, in.cu, scale, c.window, dq_ref, dk_ref, dv_ref);
  for (Guarded* g : {&dq, &dk, &dv}) {
    EXPECT_TRUE(g->guards_intact());
    EXPECT_TRUE(all_finite(g->tensor));
  }
  EXPECT_TRUE(close_in(margin, dq.tensor, dq_ref, kAttnBwdAtol, kAttnBwdRtol));
  EXPECT_TRUE(close_in(margin, dk.tensor, dk_ref, kAttnBwdAtol, kAttnBwdRtol));
  EXPECT_TRUE(close_in(margin, dv.tensor, dv_ref, kAttnBwdAtol, kAttnBwdRtol));
}

TEST(OpsAttentionBackward, MatchesReference) {
  Margin margin;
  const Case cases[] = {
      {{1}, 1, 1, 8, 0},
      {{5}, 3, 3, 5, 0},                // odd head dim
      {{5, 7, 13}, 3, 1, 12, 0},        // GQA 3:1
      {{33, 1, 77}, 6, 2, 16, 0},       // GQA 3:2
      {{33, 1, 77}, 6, 2, 16, 5},       // sliding window
      {{33, 1, 77}, 6, 2, 16, 1},       // window 1: each query sees itself only
      {{200}, 9, 3, 64, 0},             // SmolLM2-135M head layout, several key blocks
      {{200}, 9, 3, 64, 64},            // window = query block
      {{300}, 7, 1, 24, 130},           // GQA 7:1, window crossing the 128-key blocks
      {{130, 70}, 4, 4, 32, 100},       // GQA 1
      {{0, 5, 0, 7, 0}, 2, 1, 8, 0},    // empty sequences anywhere
      {{65, 64, 63, 129, 127}, 7, 7, 8, 0},  // lengths around the block sizes
      {{150}, 2, 1, 32, 0, 6.0f},       // sharp softmax
      {{97}, 4, 2, 128, 30, 3.0f},
  };
  uint32_t seed = 2000;
  for (const Case& c : cases) check_against_reference(margin, c, seed += 10);
}

TEST(OpsAttentionBackward, FiniteDifferences) {
  Margin margin;
  for (const Case& c : {Case{{5, 8}, 3, 1, 5, 0, 2.0f}, Case{{9, 4}, 4, 2, 3, 3, 2.0f}}) {
    SCOPED_TRACE(describe(c));
    const float scale = 0.7f;
    Inputs in = make_inputs(c, 77, scale);
    const std::vector<int32_t> cu(in.cu.data<int32_t>(), in.cu.data<int32_t>() + in.cu.numel());
    const Vec vq = to_vec(in.q), vk = to_vec(in.k), vv = to_vec(in.v), vd = to_vec(in.dout);
    auto f = [&](const Vec& q, const Vec& k, const Vec& v) {
      return dot(vd, attention_d(q, k, v, cu, scale, c.window, in.t, c.hq, c.hkv, c.d));
    };
    const Vec fd_q = numeric_gradient([&](const Vec& p) { return f(p, vk, vv); }, vq);
    const Vec fd_k = numeric_gradient([&](const Vec& p) { return f(vq, p, vv); }, vk);
    const Vec fd_v = numeric_gradient([&](const Vec& p) { return f(vq, vk, p); }, vv);
    for (bool use_ref : {false, true}) {
      SCOPED_TRACE(use_ref ? "reference" : "fast");
      Tensor dq = Tensor::empty(in.q.shape(), DType::F32), dk = Tensor::empty(in.k.shape(), DType::F32);
      Tensor dv = Tensor::empty(in.k.shape(), DType::F32);
      (use_ref ? ops::ref::attention_backward : ops::attention_backward)(in.dout, in.q, in.k, in.v, in.out, in.lse,
                                                                         in.cu, scale, c.window, dq, dk, dv);
      EXPECT_TRUE(matches_fd(margin, dq, fd_q, kFdRel, kFdRtol));
      EXPECT_TRUE(matches_fd(margin, dk, fd_k, kFdRel, kFdRtol));
      EXPECT_TRUE(matches_fd(margin, dv, fd_v, kFdRel, kFdRtol));
    }
  }
}

TEST(OpsAttentionBackward, PackedBatchEqualsEachSequenceAloneBitForBit) {
  const std::vector<int32_t> lengths = {1, 70, 0, 5, 129, 64, 200};
  for (int64_t window : {int64_t{0}, int64_t{17}, int64_t{150}}) {
    for (auto [hq, hkv] : {std::pair<int64_t, int64_t>{6, 2}, {7, 1}}) {
      const int64_t d = 16;
      Case c{lengths, hq, hkv, d, window};
      Inputs in = make_inputs(c, 5, 0.25f);
      Tensor dq = Tensor::empty(in.q.shape(), DType::F32), dk = Tensor::empty(in.k.shape(), DType::F32);
      Tensor dv = Tensor::empty(in.k.shape(), DType::F32);
      ops::attention_backward(in.dout, in.q, in.k, in.v, in.out, in.lse, in.cu, 0.25f, window, dq, dk, dv);
      int64_t begin = 0;
      for (int32_t len : lengths) {
        SCOPED_TRACE("window " + std::to_string(window) + " Hq " + std::to_string(hq) + " sequence at " +
                     std::to_string(begin) + " length " + std::to_string(len));
        if (len > 0) {
          auto rows = [&](const Tensor& t) { return t.slice_rows(begin, begin + len).clone(); };
          Tensor lse_alone = Tensor::empty({hq, len}, DType::F32);
          for (int64_t h = 0; h < hq; ++h) {
            for (int64_t i = 0; i < len; ++i) lse_alone.data<float>()[h * len + i] = in.lse.data<float>()[h * in.t + begin + i];
          }
          Tensor aq = Tensor::empty({len, hq, d}, DType::F32), ak = Tensor::empty({len, hkv, d}, DType::F32);
          Tensor av = Tensor::empty({len, hkv, d}, DType::F32);
          ops::attention_backward(rows(in.dout), rows(in.q), rows(in.k), rows(in.v), rows(in.out), lse_alone,
                                  cu_from_lengths({len}), 0.25f, window, aq, ak, av);
          EXPECT_TRUE(bit_equal(dq.slice_rows(begin, begin + len).clone(), aq));
          EXPECT_TRUE(bit_equal(dk.slice_rows(begin, begin + len).clone(), ak));
          EXPECT_TRUE(bit_equal(dv.slice_rows(begin, begin + len).clone(), av));
        }
        begin += len;
      }
    }
  }
}

TEST(OpsAttentionBackward, GqaEqualsRepeatedKvHeads) {
  Margin margin;
  // GQA's dk, dv are the sums over the query heads of a group: equal to MHA with k, v repeated per query head,
  // then summed over each group.
  const int64_t t = 45, hq = 6, hkv = 2, d = 8, g = hq / hkv;
  Case c{{20, 25}, hq, hkv, d, 0};
  Inputs in = make_inputs(c, 9, 0.4f);
  Tensor k_rep = Tensor::empty({t, hq, d}, DType::F32), v_rep = Tensor::empty({t, hq, d}, DType::F32);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t h = 0; h < hq; ++h) {
      for (int64_t e = 0; e < d; ++e) {
        k_rep.data<float>()[(i * hq + h) * d + e] = in.k.data<float>()[(i * hkv + h / g) * d + e];
        v_rep.data<float>()[(i * hq + h) * d + e] = in.v.data<float>()[(i * hkv + h / g) * d + e];
      }
    }
  }
  Tensor dq = Tensor::empty({t, hq, d}, DType::F32), dk = Tensor::empty({t, hkv, d}, DType::F32);
  Tensor dv = Tensor::empty({t, hkv, d}, DType::F32);
  ops::attention_backward(in.dout, in.q, in.k, in.v, in.out, in.lse, in.cu, 0.4f, 0, dq, dk, dv);
  Tensor dq2 = Tensor::empty({t, hq, d}, DType::F32), dk2 = Tensor::empty({t, hq, d}, DType::F32);
  Tensor dv2 = Tensor::empty({t, hq, d}, DType::F32);
  ops::attention_backward(in.dout, in.q, k_rep, v_rep, in.out, in.lse, in.cu, 0.4f, 0, dq2, dk2, dv2);
  EXPECT_TRUE(close_in(margin, dq, dq2, kAttnBwdAtol, kAttnBwdRtol));
  Tensor dk_sum = Tensor::zeros({t, hkv, d}, DType::F32), dv_sum = Tensor::zeros({t, hkv, d}, DType::F32);
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t h = 0; h < hq; ++h) {
      for (int64_t e = 0; e < d; ++e) {
        dk_sum.data<float>()[(i * hkv + h / g) * d + e] += dk2.data<float>()[(i * hq + h) * d + e];
        dv_sum.data<float>()[(i * hkv + h / g) * d + e] += dv2.data<float>()[(i * hq + h) * d + e];
      }
    }
  }
  EXPECT_TRUE(close_in(margin, dk, dk_sum, kAttnBwdAtol, kAttnBwdRtol));
  EXPECT_TRUE(close_in(margin, dv, dv_sum, kAttnBwdAtol, kAttnBwdRtol));
}

TEST(OpsAttentionBackward, ErrorsThrowNamingTheProblem) {
  Case c{{2, 4}, 4, 2, 8, 0};
  Inputs in = make_inputs(c, 1, 0.5f);
  Tensor dq = Tensor::empty({6, 4, 8}, DType::F32), dk = Tensor::empty({6, 2, 8}, DType::F32);
  Tensor dv = Tensor::empty({6, 2, 8}, DType::F32), none;
  EXPECT_TRUE(throws_error([&] { ops::attention_backward(in.dout, in.q, in.k, in.v, in.out, none, in.cu, 0.5f, 0, dq, dk, dv); },
                           {"attention_backward", "lse"}));
  EXPECT_TRUE(throws_error([&] { ops::attention_backward(in.dout, in.q, in.k, in.v, in.out, in.lse, in.cu, 0.5f, 0, dq, dk, dk); },
                           {"attention_backward", "overlaps"}));
  Tensor dk_bad = Tensor::empty({6, 4, 8}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::attention_backward(in.dout, in.q, in.k, in.v, in.out, in.lse, in.cu, 0.5f, 0, dq, dk_bad, dv); },
                           {"attention_backward", "dk"}));
  EXPECT_TRUE(throws_error([&] { ops::attention_backward(in.dout, in.q, in.k, in.v, in.out, in.lse, Tensor::from_i32({2}, {0, 5}), 0.5f, 0, dq, dk, dv); },
                           {"attention_backward", "cu_seqlens", "ends at 5"}));
}

}  // namespace
}  // namespace swift::test
