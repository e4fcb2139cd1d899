// tests/ops/test_lora.cpp — counter-based dropout and the LoRA linear: Philox known answers, mask statistics
// and reproducibility, fast == reference, finite differences of the forward (with a fixed dropout mask), and the
// p = 0 path equal to a plain linear plus the rank-r product.
//
// Invariants:
//  - The dropout mask is a pure function of (seed, flat index, p): the fast op (block-wise generation), the
//    reference (element by element) and the backward (regenerated) must agree exactly.
//  - Outputs are guarded; accumulated gradients (da, db) start from random values.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "grad_check.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "ops/philox.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

constexpr double kEps = 1.1920929e-7;
double sum_tol(int64_t terms) { return 2.0 * kEps * static_cast<double>(std::max<int64_t>(terms, 1)); }
constexpr double kFdRel = 2e-6;
constexpr double kFdRtol = 1e-5;

TEST(OpsPhilox, KnownAnswersOfRandom123) {
  // Random123's kat_vectors for philox4x32-10.
  const ops::PhiloxBlock a = ops::philox4x32_10({{0, 0, 0, 0}}, 0);
  EXPECT_EQ(a.w[0], 0x6627e8d5u);
  EXPECT_EQ(a.w[1], 0xe169c58du);
  EXPECT_EQ(a.w[2], 0xbc57ac4cu);
  EXPECT_EQ(a.w[3], 0x9b00dbd8u);
  const ops::PhiloxBlock b = ops::philox4x32_10({{~0u, ~0u, ~0u, ~0u}}, ~uint64_t{0});
  EXPECT_EQ(b.w[0], 0x408f276du);
  EXPECT_EQ(b.w[3], 0x6d5451fdu);
  const ops::PhiloxBlock c =
      ops::philox4x32_10({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, (uint64_t{0x299f31d0u} << 32) | 0xa4093822u);
  EXPECT_EQ(c.w[0], 0xd16cfe09u);
  EXPECT_EQ(c.w[1], 0x94fdccebu);
  EXPECT_EQ(c.w[2], 0x5001e420u);
  EXPECT_EQ(c.w[3], 0x24126ea1u);
  // Dropout's 16-bit draws: block b's word w holds draws 8b + 2w (low half) and 8b + 2w + 1 (high half).
  EXPECT_EQ(ops::dropout_draw(0, 0), 0xe8d5u);
  EXPECT_EQ(ops::dropout_draw(0, 1), 0x6627u);
  EXPECT_EQ(ops::dropout_draw(0, 6), 0xdbd8u);
  EXPECT_EQ(ops::dropout_draw(0, 7), 0x9b00u);
  const ops::PhiloxBlock second = ops::philox4x32_10({{1, 0, 0, 0}}, 0);
  EXPECT_EQ(ops::dropout_draw(0, 8 + 5), second.w[2] >> 16);
  ops::PhiloxCursor cursor(0);
  EXPECT_EQ(cursor.draw(13), second.w[2] >> 16);
  EXPECT_EQ(cursor.draw(6), 0xdbd8u);
  // Draws e8d5 6627 c58d e169 ac4c bc57 dbd8 9b00 against 0x9b01: draws 1 and 7 dropped.
  EXPECT_EQ(ops::dropout_keep_bits8(a, 0x9b01u), 0x7Du);
  EXPECT_EQ(ops::dropout_threshold(0.0f), 0u);
  EXPECT_EQ(ops::dropout_threshold(0.5f), 0x8000u);
  EXPECT_EQ(ops::dropout_threshold(0.05f), 3277u);
  EXPECT_EQ(ops::dropout_threshold(0.99999f), 65535u);
  EXPECT_EQ(ops::dropout_threshold(0.999999f), 65536u);  // rounds to 1: nothing is kept
}

TEST(OpsDropout, DropsAboutPAndIsReproducible) {
  const int64_t n = 1 << 20;
  Tensor x = random_tensor({n}, DType::F32, 1, 0.5f, 1.5f);  // never zero: a zero output means dropped
  for (float p : {0.05f, 0.1f, 0.5f, 0.9f}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    Guarded out({n}, DType::F32);
    ops::dropout(x, {p, 1234}, out.tensor);
    EXPECT_TRUE(out.guards_intact());
    int64_t dropped = 0;
    const float keep = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < n; ++i) {
      const float o = out.tensor.data<float>()[i];
      if (o == 0.0f) {
        ++dropped;
      } else {
        ASSERT_EQ(o, x.data<float>()[i] * keep) << i;
      }
    }
    // Binomial(n, p): standard deviation sqrt(n p (1 - p)) <= 512; 6 sigma.
    const double expected = static_cast<double>(p) * n, sigma = std::sqrt(n * p * (1.0 - p));
    EXPECT_NEAR(static_cast<double>(dropped), expected, 6.0 * sigma);
    // Same seed: the same mask; the reference agrees bit for bit; another seed differs.
    Tensor again = Tensor::empty({n}, DType::F32), ref = Tensor::empty({n}, DType::F32), other = Tensor::empty({n}, DType::F32);
    ops::dropout(x, {p, 1234}, again);
    ops::ref::dropout(x, {p, 1234}, ref);
    ops::dropout(x, {p, 1235}, other);
    EXPECT_TRUE(bit_equal(again, out.tensor));
    EXPECT_TRUE(bit_equal(ref, out.tensor));
    EXPECT_FALSE(bit_equal(other, out.tensor));
  }
  // Masks of neighbouring elements and seeds are uncorrelated enough: pairs (i, i+1) both dropped ~ p^2.
  Tensor out = Tensor::empty({n}, DType::F32);
  ops::dropout(x, {0.5f, 99}, out);
  int64_t both = 0;
  for (int64_t i = 0; i + 1 < n; i += 2) both += (out.data<float>()[i] == 0.0f && out.data<float>()[i + 1] == 0.0f);
  EXPECT_NEAR(static_cast<double>(both), 0.25 * (n / 2), 6.0 * std::sqrt(0.25 * 0.75 * (n / 2)));
  // p = 0 is the identity; in place works; odd sizes and offsets agree with the reference.
  Tensor same = Tensor::empty({n}, DType::F32);
  ops::dropout(x, {0.0f, 5}, same);
  EXPECT_TRUE(bit_equal(same, x));
  for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{5}, int64_t{7}, int64_t{33}, int64_t{40001}}) {
    Tensor xm = random_tensor({m}, DType::F32, 3), fast = xm.clone(), ref = Tensor::empty({m}, DType::F32);
    ops::dropout(fast, {0.3f, 7}, fast);
    ops::ref::dropout(xm, {0.3f, 7}, ref);
    EXPECT_TRUE(bit_equal(fast, ref)) << m;
  }
  EXPECT_TRUE(throws_error([&] { ops::dropout(x, {1.0f, 1}, same); }, {"dropout", "[0, 1)"}));
}

struct LoraShape {
  int64_t n, k, m, r;
};
const LoraShape kLoraShapes[] = {{1, 1, 1, 1}, {1, 5, 7, 2}, {5, 7, 13, 3}, {13, 33, 5, 8}, {33, 64, 200, 8},
                                 {129, 576, 192, 8}, {70, 200, 700, 16}, {300, 13, 7, 1}};

class OpsLora : public ::testing::TestWithParam<std::tuple<DType, float>> {};

TEST_P(OpsLora, ForwardAndBackwardMatchReference) {
  Margin margin;
  auto [wdtype, p] = GetParam();
  uint32_t seed = 4000;
  for (const LoraShape& s : kLoraShapes) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE("N=" + std::to_string(s.n) + " K=" + std::to_string(s.k) + " M=" + std::to_string(s.m) +
                   " r=" + std::to_string(s.r) + (with_bias ? " bias" : ""));
      const ops::Dropout drop{p, 42 + seed};
      const float scale = 32.0f / static_cast<float>(s.r);
      Tensor x = random_tensor({s.n, s.k}, DType::F32, ++seed), w = random_tensor({s.m, s.k}, wdtype, ++seed);
      Tensor bias = with_bias ? random_tensor({s.m}, wdtype, ++seed) : Tensor();
      Tensor a = random_tensor({s.r, s.k}, DType::F32, ++seed, -0.2f, 0.2f);
      Tensor b = random_tensor({s.m, s.r}, DType::F32, ++seed, -0.2f, 0.2f);
      Guarded y({s.n, s.m}, DType::F32), y_ref({s.n, s.m}, DType::F32), xa({s.n, s.r}, DType::F32),
          xa_ref({s.n, s.r}, DType::F32);
      ops::lora_linear(x, w, bias, a, b, scale, drop, y.tensor, xa.tensor);
      ops::ref::lora_linear(x, w, bias, a, b, scale, drop, y_ref.tensor, xa_ref.tensor);
      for (Guarded* g : {&y, &xa}) {
        EXPECT_TRUE(g->guards_intact());
        EXPECT_TRUE(all_finite(g->tensor));
      }
      // xa: a K-term fp32 dot; y: base K-term dot + scale * r-term dot of |xa| <= ~0.2 K (1 + p).
      EXPECT_TRUE(close_in(margin, xa.tensor, xa_ref.tensor, sum_tol(s.k) * 0.5, 4 * kEps));
      EXPECT_TRUE(close_in(margin, y.tensor, y_ref.tensor, sum_tol(s.k) * (1.0 + scale * 0.1 * s.r), 8 * kEps));
      // Backward: dx (=, then +=), da and db (+=).
      Tensor dy = random_tensor({s.n, s.m}, DType::F32, ++seed);
      Tensor da0 = random_tensor({s.r, s.k}, DType::F32, ++seed), db0 = random_tensor({s.m, s.r}, DType::F32, ++seed);
      Tensor dx0 = random_tensor({s.n, s.k}, DType::F32, ++seed);
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(accumulate ? "accumulate dx" : "assign dx");
        Guarded dx({s.n, s.k}, DType::F32), dx_ref({s.n, s.k}, DType::F32), da({s.r, s.k}, DType::F32),
            da_ref({s.r, s.k}, DType::F32), db({s.m, s.r}, DType::F32), db_ref({s.m, s.r}, DType::F32);
        if (accumulate) {
          dx.set(dx0);
          dx_ref.set(dx0);
        }
        for (Guarded* g : {&da, &da_ref}) g->set(da0);
        for (Guarded* g : {&db, &db_ref}) g->set(db0);
        ops::lora_linear_backward(dy, x, w, a, b, xa.tensor, scale, drop, dx.tensor, da.tensor, db.tensor, accumulate);
        ops::ref::lora_linear_backward(dy, x, w, a, b, xa.tensor, scale, drop, dx_ref.tensor, da_ref.tensor,
                                       db_ref.tensor, accumulate);
        for (Guarded* g : {&dx, &da, &db}) {
          EXPECT_TRUE(g->guards_intact());
          EXPECT_TRUE(all_finite(g->tensor));
        }
        // dx: M-term base dot + scale/(1-p) * (r-term dot of g = M-term dots times |a| <= 0.2).
        const double lora_gain = scale / (1.0 - p) * 0.2 * s.r * 0.2;
        EXPECT_TRUE(close_in(margin, dx.tensor, dx_ref.tensor, sum_tol(s.m) * (1.0 + 2.0 * lora_gain), 8 * kEps));
        // da: scale * N-term dot of g (|g| <= 0.2 M) and dropout(x); db: scale * N-term dot of dy and xa.
        EXPECT_TRUE(close_in(margin, da.tensor, da_ref.tensor, sum_tol(s.n) * scale / (1.0 - p) * (1.0 + 0.2 * s.m) * 2.0, 8 * kEps));
        EXPECT_TRUE(close_in(margin, db.tensor, db_ref.tensor, sum_tol(s.n) * scale * (1.0 + 0.2 * s.k) * 2.0, 8 * kEps));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WeightsDropout, OpsLora,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16), ::testing::Values(0.0f, 0.1f, 0.5f)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_p" +
                                  std::to_string(static_cast<int>(std::get<1>(info.param) * 100));
                         });

TEST(OpsLoraFd, FiniteDifferencesWithAFixedMask) {
  Margin margin;
  const int64_t n = 5, k = 7, m = 6, r = 3;
  for (float p : {0.0f, 0.3f}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    const ops::Dropout drop{p, 77};
    const float scale = 2.5f;
    Tensor x = random_tensor({n, k}, DType::F32, 1), w = random_tensor({m, k}, DType::F32, 2);
    Tensor a = random_tensor({r, k}, DType::F32, 3), b = random_tensor({m, r}, DType::F32, 4);
    Tensor dy = random_tensor({n, m}, DType::F32, 5);
    const Vec vx = to_vec(x), vw = to_vec(w), va = to_vec(a), vb = to_vec(b), vdy = to_vec(dy);
    const Vec fd_x = numeric_gradient([&](const Vec& q) { return dot(vdy, lora_d(q, vw, va, vb, scale, drop, n, k, m, r)); }, vx);
    const Vec fd_a = numeric_gradient([&](const Vec& q) { return dot(vdy, lora_d(vx, vw, q, vb, scale, drop, n, k, m, r)); }, va);
    const Vec fd_b = numeric_gradient([&](const Vec& q) { return dot(vdy, lora_d(vx, vw, va, q, scale, drop, n, k, m, r)); }, vb);
    for (bool use_ref : {false, true}) {
      SCOPED_TRACE(use_ref ? "reference" : "fast");
      Tensor y = Tensor::empty({n, m}, DType::F32), xa = Tensor::empty({n, r}, DType::F32);
      if (use_ref) {
        ops::ref::lora_linear(x, w, Tensor(), a, b, scale, drop, y, xa, false);
      } else {
        ops::lora_linear(x, w, Tensor(), a, b, scale, drop, y, xa, false);
      }
      EXPECT_TRUE(close_in(margin, y, to_tensor({n, m}, lora_d(vx, vw, va, vb, scale, drop, n, k, m, r)), 1e-5, 1e-5));
      Tensor dx = Tensor::empty({n, k}, DType::F32), da = Tensor::zeros({r, k}, DType::F32), db = Tensor::zeros({m, r}, DType::F32);
      (use_ref ? ops::ref::lora_linear_backward : ops::lora_linear_backward)(dy, x, w, a, b, xa, scale, drop, dx, da, db, false);
      EXPECT_TRUE(matches_fd(margin, dx, fd_x, kFdRel, kFdRtol));
      EXPECT_TRUE(matches_fd(margin, da, fd_a, kFdRel, kFdRtol));
      EXPECT_TRUE(matches_fd(margin, db, fd_b, kFdRel, kFdRtol));
    }
  }
}

// swiglu_lora on the CPU: lora_linear without its B product then swiglu_lora give the gate, up and out of lora_linear
// then swiglu, bit for bit (odd shapes, ranks 1 to 16, with dropout).
TEST(OpsLora, SwigluLoraEqualsBProductThenSwiglu) {
  const LoraShape shapes[] = {{1, 1, 1, 1}, {5, 7, 13, 3}, {33, 64, 200, 8}, {70, 200, 72, 16}};
  uint32_t seed = 6100;
  for (const LoraShape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "n=" << s.n << " k=" << s.k << " f=" << s.m << " r=" << s.r);
    const ops::Dropout drop_gate{0.2f, 11 + seed}, drop_up{0.2f, 12 + seed};
    const float scale = 1.5f;
    Tensor x = random_tensor({s.n, s.k}, DType::F32, ++seed);
    Tensor wg = random_tensor({s.m, s.k}, DType::F32, ++seed), wu = random_tensor({s.m, s.k}, DType::F32, ++seed);
    Tensor ag = random_tensor({s.r, s.k}, DType::F32, ++seed), au = random_tensor({s.r, s.k}, DType::F32, ++seed);
    Tensor bg = random_tensor({s.m, s.r}, DType::F32, ++seed), bu = random_tensor({s.m, s.r}, DType::F32, ++seed);
    auto empty = [](int64_t a, int64_t b) { return Tensor::empty({a, b}, DType::F32); };
    Tensor gate = empty(s.n, s.m), up = empty(s.n, s.m), xag = empty(s.n, s.r), xau = empty(s.n, s.r);
    ops::lora_linear(x, wg, Tensor(), ag, bg, scale, drop_gate, gate, xag);
    ops::lora_linear(x, wu, Tensor(), au, bu, scale, drop_up, up, xau);
    Tensor out_want = empty(s.n, s.m);
    ops::swiglu(gate, up, out_want);
    Tensor gate_base = empty(s.n, s.m), up_base = empty(s.n, s.m), xag2 = empty(s.n, s.r), xau2 = empty(s.n, s.r);
    ops::lora_linear(x, wg, Tensor(), ag, bg, scale, drop_gate, gate_base, xag2, false, false);
    ops::lora_linear(x, wu, Tensor(), au, bu, scale, drop_up, up_base, xau2, false, false);
    EXPECT_TRUE(bit_equal(xag2, xag));
    const ops::LoraBProduct gate_b{xag2, bg}, up_b{xau2, bu};
    Tensor out = empty(s.n, s.m);
    ops::swiglu_lora(gate_base, up_base, gate_b, up_b, scale, out);
    EXPECT_TRUE(bit_equal(gate_base, gate));
    EXPECT_TRUE(bit_equal(up_base, up));
    EXPECT_TRUE(bit_equal(out, out_want));
  }
  // Factors of the wrong shape are refused by name.
  Tensor g = Tensor::empty({4, 8}, DType::F32), o = Tensor::empty({4, 8}, DType::F32);
  const ops::LoraBProduct bad{Tensor::empty({4, 2}, DType::F32), Tensor::empty({7, 2}, DType::F32)};
  EXPECT_TRUE(throws_error([&] { ops::swiglu_lora(g, g, bad, bad, 1.0f, o); }, {"swiglu_lora", "b_gate"}));
}

// add_lora_residual on the CPU: lora_linear without accumulate or its B product (y = the frozen product) then
// add_lora_residual give lora_linear accumulated onto the residual, within fp32 rounding (the additions run in
// another order); the residual is not written; factors of the wrong shape are refused by name.
TEST(OpsLora, AddLoraResidualEqualsTheLinearOntoTheResidual) {
  const LoraShape shapes[] = {{1, 1, 1, 1}, {5, 7, 13, 3}, {33, 64, 200, 8}, {70, 200, 72, 16}};
  uint32_t seed = 6300;
  for (const LoraShape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "n=" << s.n << " k=" << s.k << " m=" << s.m << " r=" << s.r);
    const ops::Dropout drop{0.2f, 13 + seed};
    const float scale = 1.5f;
    Tensor x = random_tensor({s.n, s.k}, DType::F32, ++seed);
    Tensor w = random_tensor({s.m, s.k}, DType::F32, ++seed);
    Tensor a = random_tensor({s.r, s.k}, DType::F32, ++seed), b = random_tensor({s.m, s.r}, DType::F32, ++seed);
    Tensor residual = random_tensor({s.n, s.m}, DType::F32, ++seed);
    const Tensor residual_before = residual.clone();
    Tensor want = residual.clone(), xa_want = Tensor::empty({s.n, s.r}, DType::F32);
    ops::lora_linear(x, w, Tensor(), a, b, scale, drop, want, xa_want, /*accumulate=*/true);
    Tensor y = Tensor::empty({s.n, s.m}, DType::F32), xa = Tensor::empty({s.n, s.r}, DType::F32);
    ops::lora_linear(x, w, Tensor(), a, b, scale, drop, y, xa, false, false);
    EXPECT_TRUE(bit_equal(xa, xa_want));
    ops::add_lora_residual(y, residual, ops::LoraBProduct{xa, b}, scale);
    EXPECT_TRUE(bit_equal(residual, residual_before)) << "the residual is read only";
    double worst = 0.0, largest = 0.0;
    for (int64_t i = 0; i < y.numel(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(y.data<float>()[i]) - want.data<float>()[i]));
      largest = std::max(largest, std::fabs(static_cast<double>(want.data<float>()[i])));
    }
    EXPECT_LE(worst, 1e-5 * std::max(largest, 1.0)) << "fp32 rounding of three additions in another order";
  }
  Tensor y = Tensor::empty({4, 8}, DType::F32), res = Tensor::empty({4, 8}, DType::F32);
  const ops::LoraBProduct bad{Tensor::empty({4, 2}, DType::F32), Tensor::empty({7, 2}, DType::F32)};
  EXPECT_TRUE(throws_error([&] { ops::add_lora_residual(y, res, bad, 1.0f); }, {"add_lora_residual", "b"}));
  Tensor other = Tensor::empty({4, 9}, DType::F32);
  const ops::LoraBProduct good{Tensor::empty({4, 2}, DType::F32), Tensor::empty({8, 2}, DType::F32)};
  EXPECT_TRUE(throws_error([&] { ops::add_lora_residual(y, other, good, 1.0f); }, {"add_lora_residual", "residual"}));
}

// lora_xa: lora_linear's xa alone, the same bits (with and without dropout, a mapped dropout, r 0); errors name the op
// and the argument.
TEST(OpsLora, XaAloneIsLoraLinearsXa) {
  const LoraShape shapes[] = {{1, 1, 1, 1}, {5, 7, 13, 3}, {33, 64, 200, 8}, {70, 200, 72, 16}, {9, 16, 4, 0}};
  uint32_t seed = 6500;
  for (const LoraShape& s : shapes) {
    for (float p : {0.0f, 0.3f}) {
      SCOPED_TRACE(::testing::Message() << "n=" << s.n << " k=" << s.k << " r=" << s.r << " p=" << p);
      ops::Dropout drop{p, 17 + seed};
      drop.map.row_offset = 3;
      Tensor x = random_tensor({s.n, s.k}, DType::F32, ++seed), w = random_tensor({s.m, s.k}, DType::F32, ++seed);
      Tensor a = random_tensor({s.r, s.k}, DType::F32, ++seed), b = random_tensor({s.m, s.r}, DType::F32, ++seed);
      Tensor y = Tensor::empty({s.n, s.m}, DType::F32), want = Tensor::zeros({s.n, s.r}, DType::F32);
      ops::lora_linear(x, w, Tensor(), a, b, 1.0f, drop, y, want);
      Tensor xa = Tensor::zeros({s.n, s.r}, DType::F32);
      ops::lora_xa(x, a, drop, xa);
      EXPECT_TRUE(bit_equal(xa, want));
    }
  }
  Tensor x = Tensor::zeros({3, 5}, DType::F32), a = Tensor::zeros({2, 5}, DType::F32);
  Tensor xa_bad = Tensor::zeros({3, 3}, DType::F32), a_bad = Tensor::zeros({2, 4}, DType::F32);
  Tensor xa = Tensor::zeros({3, 2}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::lora_xa(x, a, {}, xa_bad); }, {"lora_xa: xa", "(N, r)"}));
  EXPECT_TRUE(throws_error([&] { ops::lora_xa(x, a_bad, {}, xa); }, {"lora_xa: a", "(r, K)"}));
  EXPECT_TRUE(throws_error([&] { ops::lora_xa(x, a, {1.5f, 0}, xa); }, {"lora_xa", "dropout"}));
}

// lora_b_product: lora_linear's B product alone, onto y holding the frozen product: the same bits as lora_linear (a
// bias, accumulate, r 0); errors name the op and the argument.
TEST(OpsLora, BProductAloneIsLoraLinearsY) {
  const LoraShape shapes[] = {{1, 1, 1, 1}, {5, 7, 13, 3}, {33, 64, 200, 8}, {70, 200, 72, 16}, {9, 16, 4, 0}};
  uint32_t seed = 6600;
  for (const LoraShape& s : shapes) {
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "n=" << s.n << " k=" << s.k << " m=" << s.m << " r=" << s.r
                                        << " accumulate=" << accumulate);
      const ops::Dropout drop{0.3f, 31 + seed};
      Tensor x = random_tensor({s.n, s.k}, DType::F32, ++seed), w = random_tensor({s.m, s.k}, DType::F32, ++seed);
      Tensor bias = random_tensor({s.m}, DType::F32, ++seed), y0 = random_tensor({s.n, s.m}, DType::F32, ++seed);
      Tensor a = random_tensor({s.r, s.k}, DType::F32, ++seed), b = random_tensor({s.m, s.r}, DType::F32, ++seed);
      Tensor want = y0.clone(), xa = Tensor::zeros({s.n, s.r}, DType::F32);
      ops::lora_linear(x, w, bias, a, b, 0.75f, drop, want, xa, accumulate);
      Tensor got = y0.clone();
      ops::linear(x, w, bias, got, accumulate);
      ops::lora_b_product(got, ops::LoraBProduct{xa, b}, 0.75f);
      EXPECT_TRUE(bit_equal(got, want));
    }
  }
  Tensor y = Tensor::zeros({4, 8}, DType::F32);
  const ops::LoraBProduct bad{Tensor::empty({4, 2}, DType::F32), Tensor::empty({7, 2}, DType::F32)};
  EXPECT_TRUE(throws_error([&] { ops::lora_b_product(y, bad, 1.0f); }, {"lora_b_product", "(M, r)"}));
}

// The ops over several linears sharing x (lora_xa_shared, lora_linear_backward_shared) are the single ops: the same
// xa, da and db bits, and dx's (summed over the jobs onto dx with accumulate_dx, in ops.h's order: the frozen products
// first, then the terms; made from the single ops as their calls with a = 0, which add exact zero terms, then with
// w = 0, which add exact zero products); bad jobs are named.
TEST(OpsLora, SharedXPassesAreTheSingleOps) {
  uint32_t seed = 6900;
  const int64_t n = 33, k = 40;
  const std::vector<int64_t> widths = {24, 8, 8};
  const Tensor x = random_tensor({n, k}, DType::F32, ++seed);
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "accumulate_dx=" << accumulate);
    std::vector<Tensor> ws, as, bs, dys;
    std::vector<ops::Dropout> drops;
    for (int64_t m : widths) {
      ws.push_back(random_tensor({m, k}, DType::F32, ++seed));
      as.push_back(random_tensor({3, k}, DType::F32, ++seed));
      bs.push_back(random_tensor({m, 3}, DType::F32, ++seed));
      dys.push_back(random_tensor({n, m}, DType::F32, ++seed));
      drops.push_back({0.2f, 70 + seed});
    }
    const Tensor dx0 = random_tensor({n, k}, DType::F32, ++seed);
    std::vector<Tensor> xa_one, xa_shared, da_one, da_shared, db_one, db_shared;
    std::vector<ops::LoraSharedXa> xa_jobs;
    std::vector<ops::LoraSharedBackward> back_jobs;
    Tensor dx_one = dx0.clone(), dx_shared = dx0.clone();
    for (size_t j = 0; j < widths.size(); ++j) {
      xa_one.push_back(Tensor::zeros({n, 3}, DType::F32));
      xa_shared.push_back(Tensor::zeros({n, 3}, DType::F32));
      const Tensor da0 = random_tensor({3, k}, DType::F32, ++seed), db0 = random_tensor({widths[j], 3}, DType::F32, ++seed);
      da_one.push_back(da0.clone());
      da_shared.push_back(da0.clone());
      db_one.push_back(db0.clone());
      db_shared.push_back(db0.clone());
      ops::lora_xa(x, as[j], drops[j], xa_one[j]);
      xa_jobs.push_back({as[j], drops[j], xa_shared[j]});
      ops::lora_linear_backward(dys[j], x, ws[j], Tensor::zeros({3, k}, DType::F32), bs[j], xa_one[j], 0.5f, drops[j],
                                dx_one, da_one[j], db_one[j], j > 0 || accumulate);
      back_jobs.push_back({dys[j], ws[j], as[j], bs[j], xa_shared[j], drops[j], da_shared[j], db_shared[j], Tensor()});
    }
    for (size_t j = 0; j < widths.size(); ++j) {  // the terms; da and db again, not kept
      Tensor da_spare = da_one[j].clone(), db_spare = db_one[j].clone();
      ops::lora_linear_backward(dys[j], x, Tensor::zeros({widths[j], k}, DType::F32), as[j], bs[j], xa_one[j], 0.5f,
                                drops[j], dx_one, da_spare, db_spare, true);
    }
    ops::lora_xa_shared(x, xa_jobs);
    ops::lora_linear_backward_shared(x, back_jobs, 0.5f, dx_shared, accumulate);
    for (size_t j = 0; j < widths.size(); ++j) {
      EXPECT_TRUE(bit_equal(xa_shared[j], xa_one[j])) << "xa of job " << j;
      EXPECT_TRUE(bit_equal(da_shared[j], da_one[j])) << "da of job " << j;
      EXPECT_TRUE(bit_equal(db_shared[j], db_one[j])) << "db of job " << j;
    }
    EXPECT_TRUE(bit_equal(dx_shared, dx_one));
  }
  // A bad job is named; two jobs writing one xa or one keep-bits cache are refused, and so is a backward without jobs.
  Tensor xa = Tensor::zeros({n, 3}, DType::F32);
  const Tensor a = random_tensor({3, k}, DType::F32, ++seed), a_wide = random_tensor({3, k + 1}, DType::F32, ++seed);
  EXPECT_TRUE(throws_error([&] { ops::lora_xa_shared(x, {{a, {}, xa}, {a_wide, {}, Tensor::zeros({n, 3}, DType::F32)}}); },
                           {"lora_xa_shared job 1", "lora_xa"}));
  EXPECT_TRUE(throws_error([&] { ops::lora_xa_shared(x, {{a, {}, xa}, {a, {}, xa}}); },
                           {"lora_xa_shared job 1", "overlaps job 0"}));
  ops::Dropout cached{0.2f, 7};
  cached.keep_bits = Tensor::zeros({n, k / 8}, DType::U8);
  EXPECT_TRUE(throws_error(
      [&] { ops::lora_xa_shared(x, {{a, cached, xa}, {a, cached, Tensor::zeros({n, 3}, DType::F32)}}); },
      {"lora_xa_shared job 1", "dropout.keep_bits overlaps job 0"}));
  Tensor dx;
  EXPECT_TRUE(throws_error([&] { ops::lora_linear_backward_shared(x, {{}}, 1.0f, dx); },
                           {"lora_linear_backward_shared", "dx"}));
  Tensor dx_ok = Tensor::zeros({n, k}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::lora_linear_backward_shared(x, {}, 1.0f, dx_ok); },
                           {"lora_linear_backward_shared", "no jobs"}));
}

// The MLP's down backward through the swiglu (lora_linear_swiglu_backward) is lora_linear_backward into act's gradient
// then swiglu_backward: the same bits, with up overwritten by dup in place; outputs that would clobber an input it
// still reads are named.
TEST(OpsLora, SwigluBackwardThroughTheDownIsTheTwoOps) {
  uint32_t seed = 7100;
  const int64_t n = 19, f = 24, m = 11, r = 3;
  const Tensor gate = random_tensor({n, f}, DType::F32, ++seed), up = random_tensor({n, f}, DType::F32, ++seed);
  Tensor act = Tensor::zeros({n, f}, DType::F32);
  ops::swiglu(gate, up, act);
  const Tensor w = random_tensor({m, f}, DType::F32, ++seed), a = random_tensor({r, f}, DType::F32, ++seed);
  const Tensor b = random_tensor({m, r}, DType::F32, ++seed), dy = random_tensor({n, m}, DType::F32, ++seed);
  for (float p : {0.0f, 0.25f}) {
    SCOPED_TRACE(::testing::Message() << "p=" << p);
    const ops::Dropout drop{p, 90 + seed};
    Tensor xa = Tensor::zeros({n, r}, DType::F32);
    ops::lora_xa(act, a, drop, xa);
    const Tensor da0 = random_tensor({r, f}, DType::F32, ++seed), db0 = random_tensor({m, r}, DType::F32, ++seed);
    Tensor da_want = da0.clone(), db_want = db0.clone(), dgate_want = Tensor::zeros({n, f}, DType::F32);
    Tensor dup_want = Tensor::zeros({n, f}, DType::F32);
    ops::lora_linear_backward(dy, act, w, a, b, xa, 0.5f, drop, dgate_want, da_want, db_want);
    ops::swiglu_backward(dgate_want, gate, up, dgate_want, dup_want);
    Tensor da = da0.clone(), db = db0.clone(), dgate = Tensor::zeros({n, f}, DType::F32), up_in_place = up.clone();
    ops::lora_linear_swiglu_backward(dy, act, w, a, b, xa, 0.5f, drop, gate, up_in_place, dgate, up_in_place, da, db);
    EXPECT_TRUE(bit_equal(dgate, dgate_want));
    EXPECT_TRUE(bit_equal(up_in_place, dup_want));
    EXPECT_TRUE(bit_equal(da, da_want));
    EXPECT_TRUE(bit_equal(db, db_want));
  }
  Tensor xa = Tensor::zeros({n, r}, DType::F32), none;
  Tensor gate_copy = gate.clone(), dup = Tensor::zeros({n, f}, DType::F32), dgate = Tensor::zeros({n, f}, DType::F32);
  EXPECT_TRUE(throws_error(
      [&] { ops::lora_linear_swiglu_backward(dy, act, w, a, b, xa, 1.0f, {}, gate_copy, up, gate_copy, dup, none, none); },
      {"lora_linear_swiglu_backward", "dgate", "overlaps gate"}));
  Tensor act_copy = act.clone();
  EXPECT_TRUE(throws_error(
      [&] { ops::lora_linear_swiglu_backward(dy, act_copy, w, a, b, xa, 1.0f, {}, gate, up, dgate, act_copy, none, none); },
      {"lora_linear_swiglu_backward", "dup", "overlaps act"}));
  Tensor dgate_narrow = Tensor::zeros({n, f - 8}, DType::F32);
  EXPECT_TRUE(throws_error(
      [&] { ops::lora_linear_swiglu_backward(dy, act, w, a, b, xa, 1.0f, {}, gate, up, dgate_narrow, dup, none, none); },
      {"lora_linear_swiglu_backward", "dx"}));
}

// The swiglu's backward with gate's and up's first backward step (swiglu_backward_lora_dy), then their shared backward
// with those g given, is swiglu_backward then the shared backward making g itself: the same dgate, dup (in place over
// dout and up), dx, da and db bits. Steps that do not fit are named.
TEST(OpsLora, SwigluBackwardLoraDyIsTheSwigluBackwardThenTheDyStep) {
  uint32_t seed = 7300;
  const int64_t n = 21, f = 24, c = 16, r = 3;
  const Tensor gate = random_tensor({n, f}, DType::F32, ++seed), up = random_tensor({n, f}, DType::F32, ++seed);
  const Tensor dout = random_tensor({n, f}, DType::F32, ++seed), h2 = random_tensor({n, c}, DType::F32, ++seed);
  struct Linear { Tensor w, a, b, xa, da0, db0; ops::Dropout drop; };
  std::vector<Linear> lin;
  for (int j = 0; j < 2; ++j) {
    Linear L{random_tensor({f, c}, DType::F32, ++seed), random_tensor({r, c}, DType::F32, ++seed),
             random_tensor({f, r}, DType::F32, ++seed), Tensor::zeros({n, r}, DType::F32),
             random_tensor({r, c}, DType::F32, ++seed), random_tensor({f, r}, DType::F32, ++seed), {0.25f, 40u + seed}};
    ops::lora_xa(h2, L.a, L.drop, L.xa);
    lin.push_back(L);
  }
  struct Out { Tensor dgate, dup, dx, da[2], db[2]; };
  auto backward = [&](bool with_dy) {
    Out o{Tensor::zeros({n, f}, DType::F32), Tensor::zeros({n, f}, DType::F32), Tensor::zeros({n, c}, DType::F32), {},
          {}};
    for (int j = 0; j < 2; ++j) {
      o.da[j] = lin[j].da0.clone();
      o.db[j] = lin[j].db0.clone();
    }
    Tensor g[2];
    if (with_dy) {  // in place, as the model runs it: dgate over dout's copy, dup over up's
      o.dgate = dout.clone();
      o.dup = up.clone();
      for (Tensor& t : g) t = Tensor::zeros({n, r}, DType::F32);
      ops::swiglu_backward_lora_dy(o.dgate, gate, o.dup, o.dgate, o.dup, {lin[0].b, lin[0].xa, g[0], o.db[0]},
                                   {lin[1].b, lin[1].xa, g[1], o.db[1]}, 0.5f);
    } else {
      ops::swiglu_backward(dout, gate, up, o.dgate, o.dup);
    }
    std::vector<ops::LoraSharedBackward> jobs;
    for (int j = 0; j < 2; ++j) {
      jobs.push_back({j == 0 ? o.dgate : o.dup, lin[j].w, lin[j].a, lin[j].b, lin[j].xa, lin[j].drop, o.da[j], o.db[j],
                      g[j]});
    }
    ops::lora_linear_backward_shared(h2, jobs, 0.5f, o.dx);
    return o;
  };
  const Out want = backward(false), got = backward(true);
  EXPECT_TRUE(bit_equal(got.dgate, want.dgate));
  EXPECT_TRUE(bit_equal(got.dup, want.dup));
  EXPECT_TRUE(bit_equal(got.dx, want.dx));
  for (int j = 0; j < 2; ++j) {
    EXPECT_TRUE(bit_equal(got.da[j], want.da[j])) << "da of job " << j;
    EXPECT_TRUE(bit_equal(got.db[j], want.db[j])) << "db of job " << j;
  }
  Tensor dgate = Tensor::zeros({n, f}, DType::F32), dup = Tensor::zeros({n, f}, DType::F32);
  Tensor g = Tensor::zeros({n, r}, DType::F32), g_short = Tensor::zeros({n - 1, r}, DType::F32);
  const ops::LoraDyStep ok{lin[1].b, lin[1].xa, Tensor::zeros({n, r}, DType::F32), Tensor()};
  EXPECT_TRUE(throws_error(
      [&] { ops::swiglu_backward_lora_dy(dout, gate, up, dgate, dup, {lin[0].b, lin[0].xa, g_short, Tensor()}, ok, 1.0f); },
      {"swiglu_backward_lora_dy gate_step", "g", "(N, r)"}));
  EXPECT_TRUE(throws_error(
      [&] { ops::swiglu_backward_lora_dy(dout, gate, up, dgate, dup, {lin[0].b, lin[0].xa, dup, Tensor()}, ok, 1.0f); },
      {"swiglu_backward_lora_dy gate_step", "g"}));
  EXPECT_TRUE(throws_error(
      [&] { ops::swiglu_backward_lora_dy(dout, gate, up, dgate, dup, {lin[0].b, lin[0].xa, g, Tensor()},
                                         {lin[1].b, lin[1].xa, g, Tensor()}, 1.0f); },
      {"swiglu_backward_lora_dy", "overlap"}));
  std::vector<ops::LoraSharedBackward> bad = {{dout, lin[0].w, lin[0].a, lin[0].b, lin[0].xa, {}, Tensor(), Tensor(),
                                               g_short}};
  Tensor dx = Tensor::zeros({n, c}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::lora_linear_backward_shared(h2, bad, 1.0f, dx); },
                           {"lora_linear_backward_shared job 0", "g", "(N, r)"}));
}

// swiglu_drawing_mask: swiglu's bits, and the keep bits of its dropout over out (through the map; 0 past F), which
// lora_xa with keep_bits_drawn takes as the same mask. Bad arguments are named.
TEST(OpsLora, SwigluDrawingMaskIsSwigluAndTheMask) {
  uint32_t seed = 7400;
  struct Case { int64_t n, f; ops::DropoutMap map; };
  for (const Case& cs : {Case{7, 24, {}}, Case{5, 37, {}}, Case{4, 20, {2, 61, 9}}}) {
    SCOPED_TRACE(fmt::format("N={} F={}", cs.n, cs.f));
    const Tensor gate = random_tensor({cs.n, cs.f}, DType::F32, ++seed);
    const Tensor up = random_tensor({cs.n, cs.f}, DType::F32, ++seed);
    const int64_t bytes = (cs.f + 7) / 8;
    ops::Dropout mask{0.3f, 90u + seed};
    mask.map = cs.map;
    mask.keep_bits = Tensor::zeros({cs.n, bytes}, DType::U8);
    Tensor want = Tensor::zeros({cs.n, cs.f}, DType::F32), got = Tensor::zeros({cs.n, cs.f}, DType::F32);
    ops::swiglu(gate, up, want);
    ops::swiglu_drawing_mask(gate, up, got, mask);
    EXPECT_TRUE(bit_equal(got, want));
    const uint32_t threshold = ops::dropout_threshold(mask.p);
    int64_t wrong = 0;
    for (int64_t i = 0; i < cs.n; ++i) {
      for (int64_t c = 0; c < bytes; ++c) {
        uint32_t byte = 0;
        for (int64_t j = 8 * c; j < std::min(8 * c + 8, cs.f); ++j) {
          const bool keep = ops::dropout_keep(mask.seed, ops::dropout_index(cs.map, i, j, cs.f), threshold);
          byte |= (keep ? 1u : 0u) << (j - 8 * c);
        }
        wrong += mask.keep_bits.data<uint8_t>()[i * bytes + c] != byte;
      }
    }
    EXPECT_EQ(wrong, 0);
    const Tensor a = random_tensor({3, cs.f}, DType::F32, ++seed);
    Tensor xa_drawn = Tensor::zeros({cs.n, 3}, DType::F32), xa_read = Tensor::zeros({cs.n, 3}, DType::F32);
    ops::Dropout plain = mask;
    plain.keep_bits = Tensor();
    ops::lora_xa(got, a, plain, xa_drawn);
    mask.keep_bits_drawn = true;
    ops::lora_xa(got, a, mask, xa_read);
    EXPECT_TRUE(bit_equal(xa_read, xa_drawn));
  }
  const Tensor g = random_tensor({3, 16}, DType::F32, ++seed), u = random_tensor({3, 16}, DType::F32, ++seed);
  Tensor out = Tensor::zeros({3, 16}, DType::F32);
  ops::Dropout none{0.0f, 1u};
  none.keep_bits = Tensor::zeros({3, 2}, DType::U8);
  EXPECT_TRUE(throws_error([&] { ops::swiglu_drawing_mask(g, u, out, none); }, {"swiglu_drawing_mask", "p = 0"}));
  ops::Dropout no_bits{0.1f, 1u};
  EXPECT_TRUE(throws_error([&] { ops::swiglu_drawing_mask(g, u, out, no_bits); },
                           {"swiglu_drawing_mask", "mask.keep_bits"}));
  ops::Dropout short_bits{0.1f, 1u};
  short_bits.keep_bits = Tensor::zeros({3, 1}, DType::U8);
  EXPECT_TRUE(throws_error([&] { ops::swiglu_drawing_mask(g, u, out, short_bits); },
                           {"swiglu_drawing_mask", "mask.keep_bits", "(N, ceil(F / 8))"}));
  ops::Dropout drawn_without{0.1f, 1u};
  drawn_without.keep_bits_drawn = true;
  Tensor xa = Tensor::zeros({3, 3}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::lora_xa(g, random_tensor({3, 16}, DType::F32, 1), drawn_without, xa); },
                           {"lora_xa", "keep_bits_drawn"}));
}

// lora_linear_from_xa with lora_linear's own xa gives lora_linear's y (with and without accumulate, with a bias).
TEST(OpsLora, LinearFromXaIsLoraLinear) {
  uint32_t seed = 7300;
  const int64_t n = 13, k = 20, m = 9, r = 4;
  const Tensor x = random_tensor({n, k}, DType::F32, ++seed), w = random_tensor({m, k}, DType::F32, ++seed);
  const Tensor bias = random_tensor({m}, DType::F32, ++seed), a = random_tensor({r, k}, DType::F32, ++seed);
  const Tensor b = random_tensor({m, r}, DType::F32, ++seed), y0 = random_tensor({n, m}, DType::F32, ++seed);
  for (bool accumulate : {false, true}) {
    Tensor want = y0.clone(), xa = Tensor::zeros({n, r}, DType::F32), got = y0.clone();
    ops::lora_linear(x, w, bias, a, b, 0.5f, {0.3f, 5}, want, xa, accumulate);
    ops::lora_linear_from_xa(x, w, bias, b, xa, 0.5f, got, accumulate);
    EXPECT_TRUE(bit_equal(got, want)) << "accumulate=" << accumulate;
  }
  Tensor y = Tensor::zeros({n, m}, DType::F32), xa_short = Tensor::zeros({n - 1, r}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::lora_linear_from_xa(x, w, bias, b, xa_short, 1.0f, y); },
                           {"lora_linear_from_xa"}));
}

// lora_linear_residual_from_xa is lora_linear_from_xa then add (the residual apart from y and y itself); a residual of
// another shape is refused, naming it.
TEST(OpsLora, ResidualFromXaIsLinearFromXaThenAdd) {
  uint32_t seed = 7400;
  const int64_t n = 11, k = 24, m = 10, r = 8;
  const Tensor x = random_tensor({n, k}, DType::F32, ++seed), w = random_tensor({m, k}, DType::F32, ++seed);
  const Tensor bias = random_tensor({m}, DType::F32, ++seed), b = random_tensor({m, r}, DType::F32, ++seed);
  const Tensor xa = random_tensor({n, r}, DType::F32, ++seed), residual = random_tensor({n, m}, DType::F32, ++seed);
  Tensor want = Tensor::zeros({n, m}, DType::F32);
  ops::lora_linear_from_xa(x, w, bias, b, xa, 0.5f, want);
  ops::add(residual, want, want);
  Tensor got = Tensor::zeros({n, m}, DType::F32), in_place = residual.clone();
  ops::lora_linear_residual_from_xa(x, w, bias, b, xa, 0.5f, residual, got);
  ops::lora_linear_residual_from_xa(x, w, bias, b, xa, 0.5f, in_place, in_place);
  EXPECT_TRUE(bit_equal(got, want));
  EXPECT_TRUE(bit_equal(in_place, want)) << "the residual as y";
  const Tensor narrow = random_tensor({n, m - 1}, DType::F32, ++seed);
  EXPECT_TRUE(throws_error([&] { ops::lora_linear_residual_from_xa(x, w, bias, b, xa, 0.5f, narrow, got); },
                           {"lora_linear_residual_from_xa", "residual"}));
  Tensor whole = Tensor::zeros({n + 1, m}, DType::F32), part = whole.slice_rows(1, n + 1);
  Tensor overlapping = whole.slice_rows(0, n);
  EXPECT_TRUE(throws_error([&] { ops::lora_linear_residual_from_xa(x, w, bias, b, xa, 0.5f, overlapping, part); },
                           {"lora_linear_residual_from_xa", "partly overlaps"}));
}

TEST(OpsLoraFd, ZeroBGivesTheBaseLinearAndRecomputeGivesTheSameMask) {
  Margin margin;
  const int64_t n = 37, k = 45, m = 29, r = 4;
  Tensor x = random_tensor({n, k}, DType::F32, 1), w = random_tensor({m, k}, DType::BF16, 2);
  Tensor bias = random_tensor({m}, DType::F32, 3), a = random_tensor({r, k}, DType::F32, 4);
  Tensor b0 = Tensor::zeros({m, r}, DType::F32);
  Tensor y = Tensor::empty({n, m}, DType::F32), xa = Tensor::empty({n, r}, DType::F32), base = Tensor::empty({n, m}, DType::F32);
  ops::lora_linear(x, w, bias, a, b0, 4.0f, {0.2f, 3}, y, xa);
  ops::linear(x, w, bias, base);
  EXPECT_TRUE(bit_equal(y, base));  // B = 0 at PEFT init: exactly the base layer
  // Recompute (gradient checkpointing): the same xa bit for bit.
  Tensor y2 = Tensor::empty({n, m}, DType::F32), xa2 = Tensor::empty({n, r}, DType::F32);
  ops::lora_linear(x, w, bias, a, b0, 4.0f, {0.2f, 3}, y2, xa2);
  EXPECT_TRUE(bit_equal(xa2, xa));
  // xa with dropout equals dropout(x) a^T computed from the dropout op.
  Tensor xd = Tensor::empty({n, k}, DType::F32), xa3 = Tensor::empty({n, r}, DType::F32);
  ops::dropout(x, {0.2f, 3}, xd);
  ops::gemm(false, true, 1.0f, xd, a, 0.0f, xa3);
  EXPECT_TRUE(close_in(margin, xa3, xa, sum_tol(k), 4 * kEps));
  // Accumulate adds onto y.
  Tensor acc = base.clone();
  ops::lora_linear(x, w, Tensor(), a, b0, 4.0f, {}, acc, xa, true);
  Tensor twice = Tensor::empty({n, m}, DType::F32);
  ops::linear(x, w, Tensor(), twice);
  for (int64_t i = 0; i < n * m; ++i) ASSERT_FLOAT_EQ(acc.data<float>()[i], base.data<float>()[i] + twice.data<float>()[i]);
}

TEST(OpsLoraFd, Errors) {
  Tensor x = Tensor::zeros({3, 5}, DType::F32), w = Tensor::zeros({7, 5}, DType::BF16), a = Tensor::zeros({2, 5}, DType::F32);
  Tensor b = Tensor::zeros({7, 2}, DType::F32), y = Tensor::zeros({3, 7}, DType::F32), xa = Tensor::zeros({3, 2}, DType::F32);
  EXPECT_NO_THROW(ops::lora_linear(x, w, Tensor(), a, b, 1.0f, {}, y, xa));
  Tensor a_bad = Tensor::zeros({2, 4}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::lora_linear(x, w, Tensor(), a_bad, b, 1.0f, {}, y, xa); }, {"lora_linear: a", "(r, K)"}));
  Tensor b16 = Tensor::zeros({7, 2}, DType::BF16);
  EXPECT_TRUE(throws_error([&] { ops::lora_linear(x, w, Tensor(), a, b16, 1.0f, {}, y, xa); }, {"lora_linear: b", "F32"}));
  EXPECT_TRUE(throws_error([&] { ops::lora_linear(x, w, Tensor(), a, b, 1.0f, {-0.1f, 0}, y, xa); }, {"lora_linear", "dropout"}));
  Tensor xa_bad = Tensor::zeros({3, 3}, DType::F32);
  EXPECT_TRUE(throws_error([&] { ops::lora_linear(x, w, Tensor(), a, b, 1.0f, {}, y, xa_bad); }, {"lora_linear: xa"}));
  Tensor dy = Tensor::zeros({3, 7}, DType::F32), dx = Tensor::zeros({3, 5}, DType::F32), none;
  EXPECT_TRUE(throws_error([&] { ops::lora_linear_backward(dy, x, w, a, b, xa, 1.0f, {}, dx, a, none); },
                           {"lora_linear_backward: da", "overlaps a"}));
  // The keep-bits cache: (N, ceil(K / 8)) U8; the CPU accepts it and draws the mask itself (results unchanged).
  ops::Dropout d{0.25f, 7};
  d.keep_bits = Tensor::zeros({3, 2}, DType::I32);
  EXPECT_TRUE(throws_error([&] { ops::lora_linear(x, w, Tensor(), a, b, 1.0f, d, y, xa); },
                           {"lora_linear: dropout.keep_bits", "U8"}));
  d.keep_bits = Tensor::zeros({3, 5}, DType::U8);
  EXPECT_TRUE(throws_error([&] { ops::lora_linear_backward(dy, x, w, a, b, xa, 1.0f, d, dx, none, none); },
                           {"lora_linear_backward: dropout.keep_bits", "(N, ceil(K / 8))"}));
  d.keep_bits = Tensor::zeros({3, 1}, DType::U8);
  Tensor y_plain = Tensor::zeros({3, 7}, DType::F32), xa_plain = Tensor::zeros({3, 2}, DType::F32);
  Tensor x1 = random_tensor({3, 5}, DType::F32, 11), b1 = random_tensor({7, 2}, DType::F32, 12);
  Tensor a1 = random_tensor({2, 5}, DType::F32, 13);
  ops::lora_linear(x1, w, Tensor(), a1, b1, 1.0f, d, y, xa);
  ops::lora_linear(x1, w, Tensor(), a1, b1, 1.0f, ops::Dropout{0.25f, 7}, y_plain, xa_plain);
  EXPECT_EQ(std::memcmp(xa.raw(), xa_plain.raw(), xa.nbytes()), 0);
  EXPECT_EQ(std::memcmp(y.raw(), y_plain.raw(), y.nbytes()), 0);
}

}  // namespace
}  // namespace swift::test
