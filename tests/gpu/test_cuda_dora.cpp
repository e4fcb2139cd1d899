// tests/gpu/test_cuda_dora.cpp — CUDA DoRA (dora_weight_norm, dora_linear, dora_linear_backward) against the CPU
// references (ops::ref). Label gpu: needs a CUDA device.
//
// Invariants:
//  - Fresh random inputs per case (seeded), odd shapes, r = 0 and N = 0 included; one case spans two F32 row chunks
//    (N * K * 4 > 64 MiB) and one weight-norm case two (b a) chunks. BF16 activations are compared with the
//    reference fed the same bf16-rounded values as F32 (the reference computes in double).
//  - weight_norm is the reference's (uploaded), magnitude = weight_norm * U[0.5, 1.5): g - 1 is of order one, so the
//    dropout terms of y and dx (x w^T - xd w^T, (dh - dy) w) do not cancel away.
//  - Outputs start as NaN inside guarded device storage (sentinel bytes around them): every element must be
//    written, nothing outside it; undefined optional gradients leave their storage untouched (still NaN).
//    Accumulating outputs (y with accumulate, dx with accumulate_dx, da, db, dmagnitude) start from random values.
//  - Tolerances (relative norm ||out - ref|| / ||ref||, plus an element-wise bound 2 tol max|ref| + tol |ref|):
//      F32 activations (pure fp32 products, fp64 sums): 1e-5.
//      BF16 activations: 1e-2 for y, h, dx (bf16 outputs, bf16 xd / dh / (g-1) dy, w rounded to bf16 when its
//      dtype differs) and for da, db (dh and xa / b rounded to bf16 before their products); xa 1e-5 (fp32 from
//      exact inputs); dmagnitude 1e-5 (dy is exact, h F32, fp64 sums).
//      weight_norm: 1e-5 for every w dtype (w exact in fp32, b a in fp32, fp64 sum of squares).
//  - Determinism: repeated calls give bit-identical results (fixed reductions, no atomics).
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include <fmt/format.h>

#include "ops/backends.h"
#include "gpu/gpu_test_util.h"
#include "ops/op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

// Every element still NaN: an undefined output was not written.
void expect_untouched(DeviceOut& out, const std::string& what) {
  SCOPED_TRACE(what);
  const Tensor t = out.fetch();
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_TRUE(std::isnan(t.item(i))) << what << " element " << i << " written";
}

double tol_for(DType act) { return act == DType::F32 ? 1e-5 : 1e-2; }
const char* name(DType d) { return dtype_name(d); }

// ---- weight norm ---------------------------------------------------------------------------------------------------
TEST(OpsCudaDora, WeightNormMatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t m, k, r; };
  // {4500, 4096, 3}: (b a) is formed in two row chunks of at most 64 MiB.
  const Case cases[] = {{1, 1, 1}, {7, 13, 0}, {29, 37, 8}, {193, 259, 16}, {515, 1029, 64}, {4500, 4096, 3}};
  uint32_t seed = 7000;
  for (const Case& cs : cases) {
    for (DType wd : {DType::F32, DType::BF16, DType::F16}) {
      if (cs.m == 4500 && wd == DType::F16) continue;
      g_tag = std::string("dora_weight_norm w=") + name(wd);
      SCOPED_TRACE(fmt::format("M={} K={} r={} w={}", cs.m, cs.k, cs.r, name(wd)));
      const float scale = cs.r > 0 ? 2.0f / static_cast<float>(cs.r) : 1.0f;
      Input w = make_weight({cs.m, cs.k}, wd, ++seed);
      Input a = make_weight({cs.r, cs.k}, DType::F32, ++seed, -0.5f, 0.5f);
      Input b = make_weight({cs.m, cs.r}, DType::F32, ++seed, -0.5f, 0.5f);
      DeviceOut norm({cs.m}, DType::F32);
      Tensor norm_ref = Tensor::empty({cs.m}, DType::F32);
      ops::dora_weight_norm(w.dev, a.dev, b.dev, scale, norm.tensor);
      ops::ref::dora_weight_norm(w.ref, a.ref, b.ref, scale, norm_ref);
      const Tensor got = norm.fetch();
      expect_close(got, norm_ref, 1e-5, "norm");
      // Deterministic: a second call gives the same bits.
      DeviceOut again({cs.m}, DType::F32);
      ops::dora_weight_norm(w.dev, a.dev, b.dev, scale, again.tensor);
      EXPECT_TRUE(bit_equal(again.fetch(), got));
      // Squares (tensor parallelism's row-parallel blocks), then their roots: the reference's squares, and roots
      // bit-equal to the CPU's (both correctly rounded).
      DeviceOut squares({cs.m}, DType::F32);
      Tensor squares_ref = Tensor::empty({cs.m}, DType::F32);
      ops::dora_weight_norm(w.dev, a.dev, b.dev, scale, squares.tensor, /*squares=*/true);
      ops::ref::dora_weight_norm(w.ref, a.ref, b.ref, scale, squares_ref, /*squares=*/true);
      const Tensor got_squares = squares.fetch();
      expect_close(got_squares, squares_ref, 2e-5, "squares");
      ops::dora_norm_from_squares(squares.tensor);
      Tensor roots_ref = got_squares.clone();
      ops::ref::dora_norm_from_squares(roots_ref);
      EXPECT_TRUE(bit_equal(squares.fetch(), roots_ref));
    }
  }
}

// ---- linear forward and backward ---------------------------------------------------------------------------------
TEST(OpsCudaDora, LinearForwardAndBackward) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m, r; };
  // {4100, 4096, 5, 2}: N * K * 4 > 64 MiB, so the F32 row-chunked paths (xa, da, dx's dropout term) run twice.
  const Case cases[] = {{1, 3, 2, 1},      {13, 37, 29, 8},  {7, 33, 9, 0},        {0, 5, 4, 2},
                        {131, 259, 193, 16}, {515, 300, 130, 64}, {4100, 4096, 5, 2}};
  const DType wdtypes[] = {DType::BF16, DType::F32, DType::F16};
  uint32_t seed = 8000;
  int variant = 0;
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16}) {
      for (float p : {0.0f, 0.25f}) {
        if (cs.n == 4100 && p == 0.0f) continue;  // the big case: the dropout path only
        ++variant;
        const DType wd = wdtypes[variant % 3];
        const bool accumulate = variant % 2 == 0;
        const int bias_kind = variant % 3;  // 0 none, 1 F32, 2 w's dtype
        const bool accumulate_dx = variant % 4 == 1 || variant % 4 == 2;
        const int grads = variant % 5;  // 0 all; 1 no dx; 2 no da, db; 3 no dmagnitude; 4 dmagnitude only
        const bool want_dx = grads != 1 && grads != 4, want_da = grads != 2 && grads != 4,
                   want_db = grads != 2 && grads != 4, want_dm = grads != 3;
        const ops::Dropout drop{p, 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(variant)};
        const float scale = cs.r > 0 ? 2.0f / static_cast<float>(cs.r) : 1.0f;
        g_tag = std::string("dora ") + name(act);
        SCOPED_TRACE(fmt::format("N={} K={} M={} r={} act={} w={} p={} acc={} bias={} acc_dx={} grads={}", cs.n, cs.k,
                                 cs.m, cs.r, name(act), name(wd), p, accumulate, bias_kind, accumulate_dx, grads));
        Input x = make_input({cs.n, cs.k}, act, ++seed);
        Input w = make_weight({cs.m, cs.k}, wd, ++seed);
        Input a = make_weight({cs.r, cs.k}, DType::F32, ++seed, -0.5f, 0.5f);
        Input b = make_weight({cs.m, cs.r}, DType::F32, ++seed, -0.5f, 0.5f);
        Input bias;
        if (bias_kind) bias = make_weight({cs.m}, bias_kind == 1 ? DType::F32 : wd, ++seed);
        // weight_norm from the reference; magnitude = weight_norm * U[0.5, 1.5).
        Tensor norm_ref = Tensor::empty({cs.m}, DType::F32);
        ops::ref::dora_weight_norm(w.ref, a.ref, b.ref, scale, norm_ref);
        Tensor mag_ref = random_tensor({cs.m}, DType::F32, ++seed, 0.5f, 1.5f);
        for (int64_t j = 0; j < cs.m; ++j) {
          static_cast<float*>(mag_ref.raw())[j] *= static_cast<float*>(norm_ref.raw())[j];
        }
        const Tensor norm_dev = norm_ref.to(Device::cuda()), mag_dev = mag_ref.to(Device::cuda());

        // Forward.
        DeviceOut y({cs.n, cs.m}, act), xa({cs.n, cs.r}, DType::F32), h({cs.n, cs.m}, DType::F32);
        Tensor y_ref = Tensor::empty({cs.n, cs.m}, DType::F32), xa_ref = Tensor::empty({cs.n, cs.r}, DType::F32);
        Tensor h_ref = Tensor::empty({cs.n, cs.m}, DType::F32);
        if (accumulate) {
          Tensor y0 = rounded(random_tensor({cs.n, cs.m}, DType::F32, ++seed), act);
          y.set(y0);
          y_ref.copy_from(y0);
        }
        ops::dora_linear(x.dev, w.dev, bias.dev, a.dev, b.dev, mag_dev, norm_dev, scale, drop, y.tensor, xa.tensor,
                         h.tensor, accumulate);
        ops::ref::dora_linear(x.ref, w.ref, bias.ref, a.ref, b.ref, mag_ref, norm_ref, scale, drop, y_ref, xa_ref,
                              h_ref, accumulate);
        expect_close(y.fetch(), y_ref, tol_for(act), "y");
        expect_close(xa.fetch(), xa_ref, 1e-5, "xa");
        expect_close(h.fetch(), h_ref, tol_for(act), "h");

        // Backward, from the reference's xa and h.
        Input dy = make_input({cs.n, cs.m}, act, ++seed);
        const Tensor xa_dev = xa_ref.to(Device::cuda()), h_dev = h_ref.to(Device::cuda());
        DeviceOut dx({cs.n, cs.k}, act), da({cs.r, cs.k}, DType::F32), db({cs.m, cs.r}, DType::F32);
        DeviceOut dm({cs.m}, DType::F32);
        Tensor dx_ref = Tensor::empty({cs.n, cs.k}, DType::F32);
        Tensor da_ref = random_tensor({cs.r, cs.k}, DType::F32, ++seed);
        Tensor db_ref = random_tensor({cs.m, cs.r}, DType::F32, ++seed);
        Tensor dm_ref = random_tensor({cs.m}, DType::F32, ++seed);
        if (want_da) da.set(da_ref);
        if (want_db) db.set(db_ref);
        if (want_dm) dm.set(dm_ref);
        if (accumulate_dx && want_dx) {
          Tensor dx0 = rounded(random_tensor({cs.n, cs.k}, DType::F32, ++seed), act);
          dx.set(dx0);
          dx_ref.copy_from(dx0);
        }
        Tensor none;
        ops::dora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, mag_dev, norm_dev, xa_dev, h_dev, scale, drop,
                                  want_dx ? dx.tensor : none, want_da ? da.tensor : none, want_db ? db.tensor : none,
                                  want_dm ? dm.tensor : none, accumulate_dx);
        Tensor n1, n2, n3, n4;
        ops::ref::dora_linear_backward(dy.ref, x.ref, w.ref, a.ref, b.ref, mag_ref, norm_ref, xa_ref, h_ref, scale,
                                       drop, want_dx ? dx_ref : n1, want_da ? da_ref : n2, want_db ? db_ref : n3,
                                       want_dm ? dm_ref : n4, accumulate_dx);
        if (want_dx) {
          expect_close(dx.fetch(), dx_ref, tol_for(act), "dx");
        } else {
          expect_untouched(dx, "dx (undefined)");
        }
        // da, db are F32, but with BF16 activations dh (and b / xa) are rounded to bf16 before their products.
        if (want_da) {
          expect_close(da.fetch(), da_ref, tol_for(act), "da");
        } else {
          expect_untouched(da, "da (undefined)");
        }
        if (want_db) {
          expect_close(db.fetch(), db_ref, tol_for(act), "db");
        } else {
          expect_untouched(db, "db (undefined)");
        }
        if (want_dm) {
          const Tensor got = dm.fetch();
          expect_close(got, dm_ref, 1e-5, "dmagnitude");
          // Deterministic: the same accumulation from the same start gives the same bits.
          DeviceOut dm2({cs.m}, DType::F32);
          const Tensor start = random_tensor({cs.m}, DType::F32, ++seed);
          dm2.set(start);
          dm.set(start);
          Tensor u1, u2, u3;
          ops::dora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, mag_dev, norm_dev, xa_dev, h_dev, scale, drop,
                                    u1, u2, u3, dm.tensor, false);
          ops::dora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, mag_dev, norm_dev, xa_dev, h_dev, scale, drop,
                                    u1, u2, u3, dm2.tensor, false);
          EXPECT_TRUE(bit_equal(dm.fetch(), dm2.fetch()));
        } else {
          expect_untouched(dm, "dmagnitude (undefined)");
        }
      }
    }
  }
}

// A recompute with the same dropout seed (activation checkpointing) reproduces y, xa and h bit for bit.
TEST(OpsCudaDora, DropoutRecomputeIsBitIdentical) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const int64_t n = 67, k = 129, m = 45, r = 8;
  for (DType act : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(name(act));
    Input x = make_input({n, k}, act, 9001);
    Input w = make_weight({m, k}, DType::BF16, 9002);
    Input a = make_weight({r, k}, DType::F32, 9003, -0.5f, 0.5f);
    Input b = make_weight({m, r}, DType::F32, 9004, -0.5f, 0.5f);
    const Tensor mag = random_tensor({m}, DType::F32, 9005, 0.5f, 1.5f).to(Device::cuda());
    const Tensor norm = random_tensor({m}, DType::F32, 9006, 0.5f, 1.5f).to(Device::cuda());
    const ops::Dropout drop{0.3f, 12345};
    Tensor none;
    DeviceOut y1({n, m}, act), xa1({n, r}, DType::F32), h1({n, m}, DType::F32);
    DeviceOut y2({n, m}, act), xa2({n, r}, DType::F32), h2({n, m}, DType::F32);
    ops::dora_linear(x.dev, w.dev, none, a.dev, b.dev, mag, norm, 0.25f, drop, y1.tensor, xa1.tensor, h1.tensor);
    ops::dora_linear(x.dev, w.dev, none, a.dev, b.dev, mag, norm, 0.25f, drop, y2.tensor, xa2.tensor, h2.tensor);
    EXPECT_TRUE(bit_equal(y1.fetch(), y2.fetch()));
    EXPECT_TRUE(bit_equal(xa1.fetch(), xa2.fetch()));
    EXPECT_TRUE(bit_equal(h1.fetch(), h2.fetch()));
  }
}

TEST(OpsCudaDora, Summary) {
  std::printf("%-44s %s\n", "op activation-dtype output", "worst ||out-ref||/||ref||");
  for (const auto& [key, err] : worst_errors()) std::printf("%-44s %.3e\n", key.c_str(), err);
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
