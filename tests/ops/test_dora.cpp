// tests/ops/test_dora.cpp — the DoRA linear (PEFT's DoraLinearLayer): weight norm (and its squares, with the roots
// taken after a tensor-parallel all-reduce: dora_norm_from_squares), forward and backward, fast ==
// reference on odd shapes (F32 and BF16 frozen weights, dropout 0 / 0.1 / 0.5), finite differences of every
// gradient (the weight norm held constant, as PEFT detaches it), and the identities DoRA is built on.
//
// Invariants:
//  - Outputs are guarded; accumulated gradients (da, db, dmagnitude) start from random values.
//  - Tolerances are sums of fp32 roundings: 2 eps per term of the longest dot product feeding a value, scaled by
//    the magnitude of the terms (as tests/ops/test_lora.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "grad_check.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

constexpr double kEps = 1.1920929e-7;
double sum_tol(int64_t terms) { return 2.0 * kEps * static_cast<double>(std::max<int64_t>(terms, 1)); }
constexpr double kFdRel = 2e-6;
constexpr double kFdRtol = 1e-5;

// y = x w^T + g h - xd w^T with h = xd w^T + scale (xd a^T) b^T, g = mag / norm (norm a constant).
Vec dora_d(const Vec& x, const Vec& w, const Vec& a, const Vec& b, const Vec& mag, const Vec& norm, double scale,
           const ops::Dropout& drop, int64_t n, int64_t k, int64_t m, int64_t r) {
  Vec xd(x.size());
  for (size_t i = 0; i < x.size(); ++i) xd[i] = x[i] * dropout_mult_d(drop, static_cast<int64_t>(i));
  const Vec base = linear_d(x, w, {}, n, k, m), base_d = linear_d(xd, w, {}, n, k, m);
  const Vec l = linear_d(linear_d(xd, a, {}, n, k, r), b, {}, n, r, m);
  Vec y(base.size());
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t o = 0; o < m; ++o) {
      const size_t e = static_cast<size_t>(row * m + o);
      const double g = mag[static_cast<size_t>(o)] / norm[static_cast<size_t>(o)];
      y[e] = base[e] + g * (base_d[e] + scale * l[e]) - base_d[e];
    }
  }
  return y;
}

struct DoraShape {
  int64_t n, k, m, r;
};
const DoraShape kShapes[] = {{1, 1, 1, 1}, {1, 5, 7, 2}, {5, 7, 13, 3}, {13, 33, 5, 8}, {33, 64, 200, 8},
                             {129, 200, 97, 8}, {300, 13, 7, 1}};

class OpsDora : public ::testing::TestWithParam<std::tuple<DType, float>> {};

TEST_P(OpsDora, ForwardAndBackwardMatchReference) {
  Margin margin;
  auto [wdtype, p] = GetParam();
  uint32_t seed = 7000;
  for (const DoraShape& s : kShapes) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE("N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) + " M=" + std::to_string(s.m) +
                   " r=" + std::to_string(s.r) + (with_bias ? " bias" : ""));
      const ops::Dropout drop{p, 99 + seed};
      const float scale = 16.0f / static_cast<float>(s.r);
      Tensor x = random_tensor({s.n, s.k}, DType::F32, ++seed), w = random_tensor({s.m, s.k}, wdtype, ++seed);
      Tensor bias = with_bias ? random_tensor({s.m}, wdtype, ++seed) : Tensor();
      Tensor a = random_tensor({s.r, s.k}, DType::F32, ++seed, -0.2f, 0.2f);
      Tensor b = random_tensor({s.m, s.r}, DType::F32, ++seed, -0.2f, 0.2f);
      // Weight norm: an r-term then a K-term sum of squares of |w + s b a| <= 1 + 0.04 s r.
      Guarded norm({s.m}, DType::F32), norm_ref({s.m}, DType::F32);
      ops::dora_weight_norm(w, a, b, scale, norm.tensor);
      ops::ref::dora_weight_norm(w, a, b, scale, norm_ref.tensor);
      EXPECT_TRUE(norm.guards_intact());
      EXPECT_TRUE(close_in(margin, norm.tensor, norm_ref.tensor, 0.0, sum_tol(s.r) * (1.0 + 0.04 * scale * s.r) + 4 * kEps));
      {  // squares (tensor parallelism's row-parallel blocks): the sums themselves, then their roots in place
        Guarded sq({s.m}, DType::F32), sq_ref({s.m}, DType::F32);
        ops::dora_weight_norm(w, a, b, scale, sq.tensor, /*squares=*/true);
        ops::ref::dora_weight_norm(w, a, b, scale, sq_ref.tensor, /*squares=*/true);
        EXPECT_TRUE(sq.guards_intact());
        const double sq_rtol = 2 * sum_tol(s.r) * (1.0 + 0.04 * scale * s.r) + 4 * kEps;
        EXPECT_TRUE(close_in(margin, sq.tensor, sq_ref.tensor, 0.0, sq_rtol));
        Tensor roots = sq_ref.tensor.clone(), roots_ref = sq_ref.tensor.clone();
        ops::dora_norm_from_squares(roots);
        ops::ref::dora_norm_from_squares(roots_ref);
        for (int64_t j = 0; j < s.m; ++j) {
          EXPECT_EQ(roots.data<float>()[j], roots_ref.data<float>()[j]) << "correctly rounded roots, row " << j;
        }
        EXPECT_TRUE(close_in(margin, roots_ref, norm_ref.tensor, 0.0, 4 * kEps));
      }
      Tensor mag = random_tensor({s.m}, DType::F32, ++seed, 0.5f, 2.0f);
      Guarded y({s.n, s.m}, DType::F32), y_ref({s.n, s.m}, DType::F32), xa({s.n, s.r}, DType::F32),
          xa_ref({s.n, s.r}, DType::F32), h({s.n, s.m}, DType::F32), h_ref({s.n, s.m}, DType::F32);
      ops::dora_linear(x, w, bias, a, b, mag, norm_ref.tensor, scale, drop, y.tensor, xa.tensor, h.tensor);
      ops::ref::dora_linear(x, w, bias, a, b, mag, norm_ref.tensor, scale, drop, y_ref.tensor, xa_ref.tensor,
                            h_ref.tensor);
      for (Guarded* g : {&y, &xa, &h}) {
        EXPECT_TRUE(g->guards_intact());
        EXPECT_TRUE(all_finite(g->tensor));
      }
      // h and y: K-term dots of |x w| <= 1 (up to 1/(1-p)), times g <= 2 / norm, plus the rank-r product.
      double g_max = 0;
      for (int64_t j = 0; j < s.m; ++j) g_max = std::max(g_max, mag.item(j) / norm_ref.tensor.item(j));
      const double out_tol = sum_tol(s.k) * (1.0 + scale * 0.1 * s.r) / (1.0 - p);
      EXPECT_TRUE(close_in(margin, xa.tensor, xa_ref.tensor, sum_tol(s.k) * 0.5 / (1.0 - p), 4 * kEps));
      EXPECT_TRUE(close_in(margin, h.tensor, h_ref.tensor, out_tol, 8 * kEps));
      EXPECT_TRUE(close_in(margin, y.tensor, y_ref.tensor, out_tol * (2.0 + g_max), 8 * kEps));
      // Backward: dx (=, then +=), da, db and dmagnitude (+=).
      Tensor dy = random_tensor({s.n, s.m}, DType::F32, ++seed);
      Tensor da0 = random_tensor({s.r, s.k}, DType::F32, ++seed), db0 = random_tensor({s.m, s.r}, DType::F32, ++seed);
      Tensor dm0 = random_tensor({s.m}, DType::F32, ++seed), dx0 = random_tensor({s.n, s.k}, DType::F32, ++seed);
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(accumulate ? "accumulate dx" : "assign dx");
        Guarded dx({s.n, s.k}, DType::F32), dx_ref({s.n, s.k}, DType::F32), da({s.r, s.k}, DType::F32),
            da_ref({s.r, s.k}, DType::F32), db({s.m, s.r}, DType::F32), db_ref({s.m, s.r}, DType::F32),
            dm({s.m}, DType::F32), dm_ref({s.m}, DType::F32);
        if (accumulate) {
          dx.set(dx0);
          dx_ref.set(dx0);
        }
        for (Guarded* g : {&da, &da_ref}) g->set(da0);
        for (Guarded* g : {&db, &db_ref}) g->set(db0);
        for (Guarded* g : {&dm, &dm_ref}) g->set(dm0);
        ops::dora_linear_backward(dy, x, w, a, b, mag, norm_ref.tensor, xa_ref.tensor, h_ref.tensor, scale, drop,
                                  dx.tensor, da.tensor, db.tensor, dm.tensor, accumulate);
        ops::ref::dora_linear_backward(dy, x, w, a, b, mag, norm_ref.tensor, xa_ref.tensor, h_ref.tensor, scale, drop,
                                       dx_ref.tensor, da_ref.tensor, db_ref.tensor, dm_ref.tensor, accumulate);
        for (Guarded* g : {&dx, &da, &db, &dm}) {
          EXPECT_TRUE(g->guards_intact());
          EXPECT_TRUE(all_finite(g->tensor));
        }
        const double lora_gain = g_max * scale / (1.0 - p) * 0.2 * s.r * 0.2;
        EXPECT_TRUE(close_in(margin, dx.tensor, dx_ref.tensor,
                             sum_tol(s.m) * (2.0 + 2.0 * g_max + 2.0 * lora_gain) / (1.0 - p), 8 * kEps));
        EXPECT_TRUE(close_in(margin, da.tensor, da_ref.tensor,
                             sum_tol(s.n) * g_max * scale / (1.0 - p) * (1.0 + 0.2 * s.m) * 2.0, 8 * kEps));
        EXPECT_TRUE(close_in(margin, db.tensor, db_ref.tensor,
                             sum_tol(s.n) * g_max * scale * (1.0 + 0.2 * s.k) * 2.0, 8 * kEps));
        // dmagnitude: an N-term dot of dy and h (|h| <= out scale), over the norm.
        double inv_norm_max = 0;
        for (int64_t j = 0; j < s.m; ++j) inv_norm_max = std::max(inv_norm_max, 1.0 / norm_ref.tensor.item(j));
        EXPECT_TRUE(close_in(margin, dm.tensor, dm_ref.tensor,
                             sum_tol(s.n) * inv_norm_max * s.k * (1.0 + scale * 0.04 * s.r) / (1.0 - p), 8 * kEps));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WeightsDropout, OpsDora,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16),
                                            ::testing::Values(0.0f, 0.1f, 0.5f)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_p" +
                                  std::to_string(static_cast<int>(std::get<1>(info.param) * 100));
                         });

TEST(OpsDoraFd, FiniteDifferencesWithAFixedMaskAndADetachedNorm) {
  Margin margin;
  const int64_t n = 5, k = 7, m = 6, r = 3;
  for (float p : {0.0f, 0.3f}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    const ops::Dropout drop{p, 177};
    const float scale = 2.5f;
    Tensor x = random_tensor({n, k}, DType::F32, 11), w = random_tensor({m, k}, DType::F32, 12);
    Tensor a = random_tensor({r, k}, DType::F32, 13), b = random_tensor({m, r}, DType::F32, 14);
    Tensor mag = random_tensor({m}, DType::F32, 15, 0.5f, 2.0f), dy = random_tensor({n, m}, DType::F32, 16);
    Tensor norm = Tensor::empty({m}, DType::F32);
    ops::ref::dora_weight_norm(w, a, b, scale, norm);
    const Vec vx = to_vec(x), vw = to_vec(w), va = to_vec(a), vb = to_vec(b), vm = to_vec(mag), vn = to_vec(norm),
              vdy = to_vec(dy);
    auto f = [&](const Vec& qx, const Vec& qa, const Vec& qb, const Vec& qm) {
      return dot(vdy, dora_d(qx, vw, qa, qb, qm, vn, scale, drop, n, k, m, r));
    };
    const Vec fd_x = numeric_gradient([&](const Vec& q) { return f(q, va, vb, vm); }, vx);
    const Vec fd_a = numeric_gradient([&](const Vec& q) { return f(vx, q, vb, vm); }, va);
    const Vec fd_b = numeric_gradient([&](const Vec& q) { return f(vx, va, q, vm); }, vb);
    const Vec fd_m = numeric_gradient([&](const Vec& q) { return f(vx, va, vb, q); }, vm);
    for (bool use_ref : {false, true}) {
      SCOPED_TRACE(use_ref ? "reference" : "fast");
      Tensor y = Tensor::empty({n, m}, DType::F32), xa = Tensor::empty({n, r}, DType::F32),
             h = Tensor::empty({n, m}, DType::F32);
      (use_ref ? ops::ref::dora_linear : ops::dora_linear)(x, w, Tensor(), a, b, mag, norm, scale, drop, y, xa, h,
                                                           false);
      EXPECT_TRUE(close_in(margin, y, to_tensor({n, m}, dora_d(vx, vw, va, vb, vm, vn, scale, drop, n, k, m, r)), 1e-5,
                           1e-5));
      Tensor dx = Tensor::empty({n, k}, DType::F32), da = Tensor::zeros({r, k}, DType::F32),
             db = Tensor::zeros({m, r}, DType::F32), dm = Tensor::zeros({m}, DType::F32);
      (use_ref ? ops::ref::dora_linear_backward : ops::dora_linear_backward)(dy, x, w, a, b, mag, norm, xa, h, scale,
                                                                             drop, dx, da, db, dm, false);
      EXPECT_TRUE(matches_fd(margin, dx, fd_x, kFdRel, kFdRtol));
      EXPECT_TRUE(matches_fd(margin, da, fd_a, kFdRel, kFdRtol));
      EXPECT_TRUE(matches_fd(margin, db, fd_b, kFdRel, kFdRtol));
      EXPECT_TRUE(matches_fd(margin, dm, fd_m, kFdRel, kFdRtol));
    }
  }
}

TEST(OpsDoraFd, MagnitudeAtItsInitialValueGivesTheLoraOutput) {
  // PEFT initialises the magnitude to the weight norm, so g = 1 and DoRA starts as the plain LoRA layer.
  Margin margin;
  const int64_t n = 37, k = 45, m = 29, r = 4;
  Tensor x = random_tensor({n, k}, DType::F32, 1), w = random_tensor({m, k}, DType::BF16, 2);
  Tensor bias = random_tensor({m}, DType::F32, 3), a = random_tensor({r, k}, DType::F32, 4, -0.3f, 0.3f);
  Tensor b = random_tensor({m, r}, DType::F32, 5, -0.3f, 0.3f);
  Tensor norm = Tensor::empty({m}, DType::F32);
  ops::dora_weight_norm(w, a, b, 2.0f, norm);
  for (float p : {0.0f, 0.25f}) {
    Tensor y = Tensor::empty({n, m}, DType::F32), xa = Tensor::empty({n, r}, DType::F32),
           h = Tensor::empty({n, m}, DType::F32), y_lora = Tensor::empty({n, m}, DType::F32),
           xa_lora = Tensor::empty({n, r}, DType::F32);
    ops::dora_linear(x, w, bias, a, b, norm, norm, 2.0f, {p, 8}, y, xa, h);
    ops::lora_linear(x, w, bias, a, b, 2.0f, {p, 8}, y_lora, xa_lora);
    EXPECT_TRUE(close_in(margin, y, y_lora, sum_tol(k) * 4, 8 * kEps)) << p;
    EXPECT_TRUE(bit_equal(xa, xa_lora)) << p;  // same dropout mask, same product
    // A recompute (gradient checkpointing) regenerates everything bit for bit.
    Tensor y2 = Tensor::empty({n, m}, DType::F32), xa2 = Tensor::empty({n, r}, DType::F32),
           h2 = Tensor::empty({n, m}, DType::F32);
    ops::dora_linear(x, w, bias, a, b, norm, norm, 2.0f, {p, 8}, y2, xa2, h2);
    EXPECT_TRUE(bit_equal(y2, y) && bit_equal(h2, h) && bit_equal(xa2, xa)) << p;
  }
  // Doubling the magnitude of row j doubles that row's direction output: y_j - bias_j = g_j h_j (p = 0).
  Tensor mag = norm.clone();
  mag.data<float>()[3] *= 2.0f;
  Tensor y = Tensor::empty({n, m}, DType::F32), xa = Tensor::empty({n, r}, DType::F32), h = Tensor::empty({n, m}, DType::F32);
  ops::dora_linear(x, w, bias, a, b, mag, norm, 2.0f, {}, y, xa, h);
  for (int64_t row = 0; row < n; ++row) {
    EXPECT_NEAR(y.data<float>()[row * m + 3] - bias.data<float>()[3], 2.0f * h.data<float>()[row * m + 3], 1e-5);
    EXPECT_NEAR(y.data<float>()[row * m + 4] - bias.data<float>()[4], h.data<float>()[row * m + 4], 1e-5);
  }
}

TEST(OpsDoraFd, Errors) {
  Tensor x = Tensor::zeros({3, 5}, DType::F32), w = Tensor::zeros({7, 5}, DType::BF16), a = Tensor::zeros({2, 5}, DType::F32);
  Tensor b = Tensor::zeros({7, 2}, DType::F32), y = Tensor::zeros({3, 7}, DType::F32), xa = Tensor::zeros({3, 2}, DType::F32);
  Tensor h = Tensor::zeros({3, 7}, DType::F32), mag = Tensor::from_f32({7}, std::vector<float>(7, 1.0f)),
         norm = Tensor::from_f32({7}, std::vector<float>(7, 1.0f));
  EXPECT_NO_THROW(ops::dora_linear(x, w, Tensor(), a, b, mag, norm, 1.0f, {}, y, xa, h));
  Tensor mag_bad = Tensor::zeros({6}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::dora_linear(x, w, Tensor(), a, b, mag_bad, norm, 1.0f, {}, y, xa, h); },
                           {"dora_linear: magnitude", "(M)"}));
  Tensor h_bad = Tensor::zeros({3, 6}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::dora_linear(x, w, Tensor(), a, b, mag, norm, 1.0f, {}, y, xa, h_bad); },
                           {"dora_linear: h", "(N, M)"}));
  EXPECT_TRUE(throws_error([&] { ops::dora_linear(x, w, Tensor(), a, b, mag, norm, 1.0f, {}, y, xa, y); },
                           {"dora_linear", "overlaps"}));
  Tensor norm16 = Tensor::zeros({7}, DType::BF16);
  EXPECT_TRUE(throws_error([&] { ops::dora_weight_norm(w, a, b, 1.0f, norm16); }, {"dora_weight_norm: norm", "F32"}));
  Tensor dy = Tensor::zeros({3, 7}, DType::F32), dx = Tensor::zeros({3, 5}, DType::F32), none;
  EXPECT_TRUE(throws_error([&] { ops::dora_linear_backward(dy, x, w, a, b, mag, norm, xa, h, 1.0f, {}, dx, none, none, mag); },
                           {"dora_linear_backward: dmagnitude", "overlaps magnitude"}));
  EXPECT_TRUE(throws_error([&] { ops::dora_linear_backward(dy, x, w, a, b, mag, norm, xa, h, 1.0f, {}, dx, a, none, none); },
                           {"dora_linear_backward", "da", "overlaps a"}));
}

}  // namespace
}  // namespace swift::test
