// tests/gpu/test_cuda_gemm_sm90.cpp — our own Hopper GEMM (ops/cuda/gemm_sm90.cuh, under SWIFT_GEMM_SM90) against
// the CPU reference and against cuBLASLt, and the products it leaves to cuBLASLt. Label gpu: needs a CUDA device;
// on a device other than sm_90 (or a build without sm_90a code) the tests check that nothing runs on it.
//
// Invariants:
//  - Odd shapes on purpose: partial tiles in n and m (TMA zero-fills the loads past the edges and clips the stores),
//    k not a multiple of 64, row strides wider than the rows (column slices of a wider matrix).
//  - Tolerances: BF16 outputs (one rounding, 2^-9 relative) 1e-2 relative norm against the reference in double, as
//    test_cuda_matmul.cpp; against cuBLASLt (both fp32 accumulation in k order, each rounded once) 1e-2 too: the
//    probe of docs/PERFORMANCE.md run 23 found the same bits on the 7B's shapes, which this test reports and does not
//    require (cuBLASLt's algorithm may split k).
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "gpu/gpu_test_util.h"
#include "ops/backends.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/gemm_sm90.cuh"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

// The switch on for one test, off again after.
struct Sm90On {
  Sm90On() : was(ops::cuda::gemm_sm90_enabled()) { ops::cuda::set_gemm_sm90(true); }
  ~Sm90On() { ops::cuda::set_gemm_sm90(was); }
  bool was;
};

bool sm90_here() { return ops::cuda::gemm_sm90_available(0); }

TEST(OpsCudaGemmSm90, MatchesTheReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  Sm90On on;
  struct Case { int64_t n, k, m; };
  // n, m across tile edges (128 x 256), k across the 64-wide blocks; the smallest that TMA's 16-byte strides allow.
  // The reference is a plain loop (~0.1 GFLOP/s): the 7B's whole shapes are EqualsCublasLtOnModelShapes' (1031 x 3584
  // x 3584 here took 200 s).
  const Case cases[] = {{1, 8, 8}, {77, 72, 200}, {128, 64, 256}, {129, 1000, 264}, {300, 4104, 520},
                        {131, 3584, 392}, {257, 520, 18944 / 8}};
  uint32_t seed = 9000;
  for (const Case& cs : cases) {
    for (bool tb : {true, false}) {
      g_tag = "gemm_sm90 BF16";
      SCOPED_TRACE(fmt::format("N={} K={} M={} b {}", cs.n, cs.k, cs.m, tb ? "(m, k)" : "(k, m)"));
      Input a = make_input({cs.n, cs.k}, DType::BF16, ++seed);
      Input b = make_input(tb ? Shape{cs.m, cs.k} : Shape{cs.k, cs.m}, DType::BF16, ++seed);
      DeviceOut c({cs.n, cs.m}, DType::BF16);
      Tensor c_ref = Tensor::empty({cs.n, cs.m}, DType::F32);
      const int64_t before = ops::cuda::gemm_sm90_launches();
      ops::gemm(false, tb, 1.0f, a.dev, b.dev, 0.0f, c.tensor);
      ops::ref::gemm(false, tb, 1.0f, a.ref, b.ref, 0.0f, c_ref);
      expect_close(c.fetch(), c_ref, 1e-2, "c");
      EXPECT_EQ(ops::cuda::gemm_sm90_launches() - before, sm90_here() ? 1 : 0) << "which kernel ran";
    }
  }
}

// Column slices: A, B and D as views of wider matrices (row strides larger than the rows).
TEST(OpsCudaGemmSm90, TakesRowStridesWiderThanTheRows) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  Sm90On on;
  const int64_t n = 200, k = 136, m = 264, pad = 24;
  Input a = make_input({n, k + pad}, DType::BF16, 31);
  Input b = make_input({m, k + pad}, DType::BF16, 32);
  DeviceOut c({n, m + pad}, DType::BF16);
  Tensor c0 = random_tensor({n, m + pad}, DType::F32, 33);
  c.set(c0);
  ops::cuda::MatmulArgs args;
  args.trans_b = true;
  args.n = n;
  args.m = m;
  args.k = k;
  args.a = a.dev.raw();
  args.lda = k + pad;
  args.b = b.dev.raw();
  args.ldb = k + pad;
  args.ab_dtype = 1;
  args.d = c.tensor.raw();
  args.ldd = m + pad;
  args.d_dtype = 1;
  const int64_t before = ops::cuda::gemm_sm90_launches();
  ops::cuda::matmul("gemm_sm90 test", 0, args);
  EXPECT_EQ(ops::cuda::gemm_sm90_launches() - before, sm90_here() ? 1 : 0);
  const Tensor got = c.fetch();
  const Tensor c0_bf16 = rounded(c0, DType::BF16);
  double worst = 0.0, scale = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m + pad; ++j) {
      if (j >= m) {  // past the slice: untouched
        EXPECT_EQ(got.item(i * (m + pad) + j), c0_bf16.item(i * (m + pad) + j)) << "row " << i << " col " << j;
        continue;
      }
      double ref = 0.0;
      for (int64_t t = 0; t < k; ++t) ref += a.ref.item(i * (k + pad) + t) * b.ref.item(j * (k + pad) + t);
      worst = std::max(worst, std::fabs(got.item(i * (m + pad) + j) - ref));
      scale = std::max(scale, std::fabs(ref));
    }
  }
  EXPECT_LE(worst, 1e-2 * scale) << "worst |error| " << worst << " of max |ref| " << scale;
}

TEST(OpsCudaGemmSm90, EqualsCublasLtOnModelShapes) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m; bool tb; };
  // The 7B's linears at 1,024 tokens: q / o, k / v forward and their input gradients, gate / up, down.
  const Case cases[] = {{1024, 3584, 3584, true}, {1024, 3584, 512, true}, {1024, 512, 3584, false},
                        {1024, 3584, 18944, true}, {1024, 18944, 3584, true}, {1024, 3584, 3584, false}};
  uint32_t seed = 9100;
  for (const Case& cs : cases) {
    SCOPED_TRACE(fmt::format("N={} K={} M={} b {}", cs.n, cs.k, cs.m, cs.tb ? "(m, k)" : "(k, m)"));
    Input a = make_input({cs.n, cs.k}, DType::BF16, ++seed);
    Input b = make_input(cs.tb ? Shape{cs.m, cs.k} : Shape{cs.k, cs.m}, DType::BF16, ++seed);
    DeviceOut ours({cs.n, cs.m}, DType::BF16), theirs({cs.n, cs.m}, DType::BF16);
    {
      Sm90On on;
      ops::gemm(false, cs.tb, 1.0f, a.dev, b.dev, 0.0f, ours.tensor);
    }
    ops::gemm(false, cs.tb, 1.0f, a.dev, b.dev, 0.0f, theirs.tensor);
    const Tensor x = ours.fetch(), y = theirs.fetch();
    g_tag = "gemm_sm90 vs cuBLASLt";
    expect_close(x, y, 1e-2, "c");
    int64_t same = 0;
    for (int64_t i = 0; i < x.numel(); ++i) same += x.item(i) == y.item(i) ? 1 : 0;
    std::printf("[ gemm_sm90 ] N=%lld K=%lld M=%lld %s: %lld of %lld elements the same bits as cuBLASLt%s\n",
                static_cast<long long>(cs.n), static_cast<long long>(cs.k), static_cast<long long>(cs.m),
                cs.tb ? "(m, k)" : "(k, m)", static_cast<long long>(same), static_cast<long long>(x.numel()),
                sm90_here() ? "" : " (not run: no sm_90 kernel here)");
  }
}

// What the kernel does not take goes to cuBLASLt, with the same results as without the switch.
TEST(OpsCudaGemmSm90, LeavesWhatItCannotRunToCublasLt) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  Sm90On on;
  struct Case {
    const char* why;
    int64_t n, k, m;
    bool ta;
    float alpha, beta;
    DType c_dtype;
  };
  const Case cases[] = {{"F32 output", 64, 64, 64, false, 1.0f, 0.0f, DType::F32},
                        {"beta 1", 64, 64, 64, false, 1.0f, 1.0f, DType::BF16},
                        {"alpha 0.5", 64, 64, 64, false, 0.5f, 0.0f, DType::BF16},
                        {"A transposed", 64, 64, 64, true, 1.0f, 0.0f, DType::BF16},
                        {"k 13: A's row stride not a multiple of 16 bytes", 64, 13, 64, false, 1.0f, 0.0f, DType::BF16}};
  uint32_t seed = 9200;
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.why);
    Input a = make_input(cs.ta ? Shape{cs.k, cs.n} : Shape{cs.n, cs.k}, DType::BF16, ++seed);
    Input b = make_input({cs.m, cs.k}, DType::BF16, ++seed);
    DeviceOut c({cs.n, cs.m}, cs.c_dtype);
    Tensor c_ref = Tensor::empty({cs.n, cs.m}, DType::F32);
    if (cs.beta != 0.0f) {
      Tensor c0 = rounded(random_tensor({cs.n, cs.m}, DType::F32, ++seed), cs.c_dtype);
      c.set(c0);
      c_ref.copy_from(c0);
    }
    const int64_t before = ops::cuda::gemm_sm90_launches();
    ops::gemm(cs.ta, true, cs.alpha, a.dev, b.dev, cs.beta, c.tensor);
    ops::ref::gemm(cs.ta, true, cs.alpha, a.ref, b.ref, cs.beta, c_ref);
    g_tag = "gemm_sm90 refused";
    expect_close(c.fetch(), c_ref, cs.c_dtype == DType::F32 ? 1e-5 : 1e-2, "c");
    EXPECT_EQ(ops::cuda::gemm_sm90_launches(), before) << "ran on our kernel";
  }
}

// Shapes alone: what TMA can address.
TEST(OpsCudaGemmSm90, FitsWhatTmaCanAddress) {
  ops::cuda::Sm90Gemm g;
  alignas(16) static char buffer[64];
  g.n = 10;
  g.m = 16;
  g.k = 24;
  g.a = g.b = g.d = buffer;
  g.lda = 24;
  g.ldb = 24;
  g.ldd = 16;
  EXPECT_TRUE(ops::cuda::gemm_sm90_fits(g));
  ops::cuda::Sm90Gemm odd = g;
  odd.lda = 25;
  odd.k = 25;
  EXPECT_FALSE(ops::cuda::gemm_sm90_fits(odd)) << "a row stride of 50 bytes";
  ops::cuda::Sm90Gemm narrow = g;
  narrow.lda = 16;
  EXPECT_FALSE(ops::cuda::gemm_sm90_fits(narrow)) << "lda < k";
  ops::cuda::Sm90Gemm off = g;
  off.d = buffer + 8;
  EXPECT_FALSE(ops::cuda::gemm_sm90_fits(off)) << "D 8-byte aligned";
  ops::cuda::Sm90Gemm empty = g;
  empty.k = 0;
  EXPECT_FALSE(ops::cuda::gemm_sm90_fits(empty));
  ops::cuda::Sm90Gemm kmajor = g;
  kmajor.b_transposed = false;  // B (k, m): its row stride must cover m
  kmajor.ldb = 8;
  EXPECT_FALSE(ops::cuda::gemm_sm90_fits(kmajor));
  kmajor.ldb = 16;
  EXPECT_TRUE(ops::cuda::gemm_sm90_fits(kmajor));
}

// The rank-8 dx term as our GEMM's first k-block (Sm90Gemm's tail_* with B stored (k, m), masked by tail_bits;
// SWIFT_LORA_DX_SM90, from any number of rows here): lora_linear_backward with the input gradient's LoRA term added in
// our GEMM before rounding, against cuBLASLt's product then the term's pass over dx. The two passes
// round twice, round(round(P) + T), where the fused form rounds once, round(P + T): they differ by at most half a
// bf16 step of P and half of each result, so every element within 1.5 steps at the largest of |P|, |u|, |f| (P the
// product alone, from a call with a = 0; with cancellation the step at |u| alone is too small), and most the same
// bits. da and db the same bits (they do not depend on the product). Rows across the 128-row tiles (odd n: rows past
// n read no g), in features of one and several 256-column tiles, no dropout and the forward's keep-bits cache.
TEST(OpsCudaGemmSm90, LoraDxTermInTheEpilogueIsTheTwoPasses) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  if (!sm90_here()) GTEST_SKIP() << "not an sm_90a device and build";
  struct Case { int64_t n, k, m; };  // x (n, k), w (m, k), dy (n, m)
  const Case cases[] = {{1, 256, 64}, {131, 512, 200}, {300, 768, 1024}, {1031, 3584, 512}};
  uint32_t seed = 9900;
  for (const Case& cs : cases) {
    for (float p : {0.0f, 0.1f}) {
      SCOPED_TRACE(fmt::format("N={} K={} M={} p={}", cs.n, cs.k, cs.m, p));
      Input x = make_input({cs.n, cs.k}, DType::BF16, ++seed);
      Input w = make_weight({cs.m, cs.k}, DType::BF16, ++seed);
      Input a = make_weight({8, cs.k}, DType::F32, ++seed, -0.5f, 0.5f);
      Input b = make_weight({cs.m, 8}, DType::F32, ++seed, -0.5f, 0.5f);
      Input dy = make_input({cs.n, cs.m}, DType::BF16, ++seed);
      ops::Dropout drop{p, 0xD0ull + seed};
      if (p > 0.0f) drop.keep_bits = Tensor::zeros({cs.n, cs.k / 8}, DType::U8).to(Device::cuda());
      Tensor none;
      DeviceOut y({cs.n, cs.m}, DType::BF16), xa({cs.n, 8}, DType::F32);
      ops::lora_linear(x.dev, w.dev, none, a.dev, b.dev, 4.0f, drop, y.tensor, xa.tensor);  // xa and the keep bits
      const Tensor xa_dev = xa.fetch().to(Device::cuda());
      const Tensor da0 = random_tensor({8, cs.k}, DType::F32, ++seed), db0 = random_tensor({cs.m, 8}, DType::F32, ++seed);
      struct Out { Tensor dx, da, db; int64_t launches; };
      const Tensor a_zero = Tensor::zeros({8, cs.k}, DType::F32).to(Device::cuda());
      const bool was_on = ops::cuda::lora_dx_sm90();
      const int64_t was_rows = ops::cuda::lora_b_in_gemm_min_rows();
      auto run = [&](bool fused, const Tensor& a_used) {
        ops::cuda::set_lora_dx_sm90(fused);
        ops::cuda::set_lora_b_in_gemm_min_rows(1);
        DeviceOut dx({cs.n, cs.k}, DType::BF16), da({8, cs.k}, DType::F32), db({cs.m, 8}, DType::F32);
        da.set(da0);
        db.set(db0);
        const int64_t before = ops::cuda::gemm_sm90_launches();
        ops::lora_linear_backward(dy.dev, x.dev, w.dev, a_used, b.dev, xa_dev, 4.0f, drop, dx.tensor, da.tensor,
                                  db.tensor);
        Out o{dx.fetch(), da.fetch(), db.fetch(), ops::cuda::gemm_sm90_launches() - before};
        ops::cuda::set_lora_dx_sm90(was_on);
        ops::cuda::set_lora_b_in_gemm_min_rows(was_rows);
        return o;
      };
      const Out two = run(false, a.dev), one = run(true, a.dev), product = run(false, a_zero);
      EXPECT_EQ(two.launches, 0);
      EXPECT_EQ(one.launches, 1) << "the fused product did not run";
      EXPECT_EQ(std::memcmp(one.da.raw(), two.da.raw(), two.da.nbytes()), 0) << "da";
      EXPECT_EQ(std::memcmp(one.db.raw(), two.db.raw(), two.db.nbytes()), 0) << "db";
      int64_t far = 0, same = 0;
      for (int64_t i = 0; i < two.dx.numel(); ++i) {
        const float u = two.dx.data<float>()[i], f = one.dx.data<float>()[i], pv = product.dx.data<float>()[i];
        const float mag = std::max({std::fabs(u), std::fabs(f), std::fabs(pv)});
        const float step = mag > 0.0f ? std::ldexp(1.0f, std::ilogb(mag) - 7) : 0.0f;  // one bf16 step at mag
        far += std::fabs(u - f) > 1.5f * step;
        same += u == f;
      }
      EXPECT_EQ(far, 0) << "dx elements more than one bf16 step from the two-pass value";
      std::printf("[ gemm_sm90 ] LoRA dx term N=%lld K=%lld M=%lld p=%.1f: %lld of %lld the two passes' bits\n",
                  static_cast<long long>(cs.n), static_cast<long long>(cs.k), static_cast<long long>(cs.m), p,
                  static_cast<long long>(same), static_cast<long long>(two.dx.numel()));
    }
  }
}

// LoRA's B product inside the frozen product (SWIFT_LORA_B_IN_GEMM: our GEMM with the tail k-block of bf16 pieces,
// lora_tail.cu): lora_linear's y is x w^T + scale xa b^T rounded once. Against the sum in double from the same xa,
// every element within half a bf16 step at its magnitude plus fp32 summation's bound over the k + 48 products
// (2^-24 (k + 48) sum |terms|); lora_linear_from_xa with that xa gives the same bits; over tile edges in n and m,
// k not a multiple of 64, with and without a dropout (its keep bits), with a BF16 or F32 bias (in the tail too); a
// decode's few rows keep the two-step form.
TEST(OpsCudaGemmSm90, LoraBProductInTheProductIsRoundedOnce) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  if (!sm90_here()) GTEST_SKIP() << "not an sm_90a device and build";
  struct Case { int64_t n, k, m; };  // x (n, k), w (m, k)
  // n from ops_matmul.cpp's kMinTailRows (512) up, across tile edges; fewer rows keep the two-step form (below).
  const Case cases[] = {{512, 64, 8}, {600, 520, 200}, {777, 72, 264}, {520, 3584, 264}};
  uint32_t seed = 9950;
  const bool was_on = ops::cuda::lora_b_in_gemm();
  for (const Case& cs : cases) {
    for (int variant = 0; variant < 4; ++variant) {  // p 0 / 0.1, then a BF16 and an F32 bias (p 0.1)
      const float p = variant == 0 ? 0.0f : 0.1f;
      const DType bias_dtype = variant == 3 ? DType::F32 : DType::BF16;
      SCOPED_TRACE(fmt::format("N={} K={} M={} p={} bias={}", cs.n, cs.k, cs.m, p,
                               variant >= 2 ? dtype_name(bias_dtype) : "none"));
      Input x = make_input({cs.n, cs.k}, DType::BF16, ++seed);
      Input w = make_weight({cs.m, cs.k}, DType::BF16, ++seed);
      Input a = make_weight({8, cs.k}, DType::F32, ++seed, -0.5f, 0.5f);
      Input b = make_weight({cs.m, 8}, DType::F32, ++seed, -0.5f, 0.5f);
      Input bias_in = make_weight({cs.m}, bias_dtype, ++seed);
      const Tensor bias = variant >= 2 ? bias_in.dev : Tensor();
      const Tensor bias_f = bias_in.ref.to_dtype(DType::F32);
      ops::Dropout drop{p, 0xB1ull + seed};
      if (p > 0.0f) drop.keep_bits = Tensor::zeros({cs.n, cs.k / 8}, DType::U8).to(Device::cuda());
      const float scale = 4.0f;
      ops::cuda::set_lora_b_in_gemm(true);
      DeviceOut y({cs.n, cs.m}, DType::BF16), xa({cs.n, 8}, DType::F32), y2({cs.n, cs.m}, DType::BF16);
      const int64_t before = ops::cuda::gemm_sm90_launches();
      ops::lora_linear(x.dev, w.dev, bias, a.dev, b.dev, scale, drop, y.tensor, xa.tensor);
      const int64_t launches = ops::cuda::gemm_sm90_launches() - before;
      const Tensor xa_host = xa.fetch(), xa_dev = xa_host.to(Device::cuda());
      ops::lora_linear_from_xa(x.dev, w.dev, bias, b.dev, xa_dev, scale, y2.tensor);
      // With the residual stream's residual in the same sums (apart from y, and as y itself).
      Input res = make_input({cs.n, cs.m}, DType::BF16, ++seed);
      DeviceOut y3({cs.n, cs.m}, DType::BF16);
      const int64_t before3 = ops::cuda::gemm_sm90_launches();
      ops::lora_linear_residual_from_xa(x.dev, w.dev, bias, b.dev, xa_dev, scale, res.dev, y3.tensor);
      const int64_t launches3 = ops::cuda::gemm_sm90_launches() - before3;
      Tensor in_place = res.dev.clone();
      ops::lora_linear_residual_from_xa(x.dev, w.dev, bias, b.dev, xa_dev, scale, in_place, in_place);
      ops::cuda::set_lora_b_in_gemm(was_on);
      EXPECT_EQ(launches, 1) << "the product with the tail did not run";
      EXPECT_EQ(launches3, 1) << "the product with the tail and the residual did not run";
      const Tensor got = y.fetch(), got2 = y2.fetch(), got3 = y3.fetch(), wf = w.ref.to_dtype(DType::F32);
      const Tensor got_in_place = in_place.to(Device::cpu()).to_dtype(DType::F32);
      EXPECT_EQ(std::memcmp(got.raw(), got2.raw(), got.nbytes()), 0) << "lora_linear_from_xa";
      EXPECT_EQ(std::memcmp(got3.raw(), got_in_place.raw(), got3.nbytes()), 0) << "the residual as y";
      int64_t far = 0, far3 = 0;
      double worst = 0.0, worst3 = 0.0;
      // got within half a bf16 step at its magnitude plus fp32 summation's bound over `terms` products of the exact sum.
      auto check = [](double got_v, double sum, double abs_sum, int64_t terms, int64_t& far_n, double& worst_r) {
        const double mag = std::max(std::fabs(got_v), std::fabs(sum));
        const double step = mag > 0.0 ? std::ldexp(1.0, std::ilogb(mag) - 7) : 0.0;
        const double bound = 0.5 * step + std::ldexp(double(terms), -24) * abs_sum;
        far_n += std::fabs(got_v - sum) > bound;
        worst_r = std::max(worst_r, bound > 0.0 ? std::fabs(got_v - sum) / bound : 0.0);
      };
      for (int64_t i = 0; i < cs.n; ++i) {
        for (int64_t j = 0; j < cs.m; ++j) {
          double sum = bias.defined() ? bias_f.data<float>()[j] : 0.0, abs_sum = std::fabs(sum);
          for (int64_t t = 0; t < cs.k; ++t) {
            const double v = double(x.ref.data<float>()[i * cs.k + t]) * wf.data<float>()[j * cs.k + t];
            sum += v;
            abs_sum += std::fabs(v);
          }
          for (int64_t rr = 0; rr < 8; ++rr) {
            const double v = double(scale) * xa_host.data<float>()[i * 8 + rr] * b.ref.data<float>()[j * 8 + rr];
            sum += v;
            abs_sum += std::fabs(v);
          }
          check(got.data<float>()[i * cs.m + j], sum, abs_sum, cs.k + 48, far, worst);
          const double rv = res.ref.data<float>()[i * cs.m + j];
          check(got3.data<float>()[i * cs.m + j], sum + rv, abs_sum + std::fabs(rv), cs.k + 49, far3, worst3);
        }
      }
      EXPECT_EQ(far, 0) << "elements past half a bf16 step (+ fp32 summation's bound) from the exact sum; worst "
                        << worst << " of the bound";
      EXPECT_EQ(far3, 0) << "with the residual: elements past half a bf16 step (+ fp32 summation's bound) from the "
                         << "exact sum; worst " << worst3 << " of the bound";
    }
  }
  // A decode's few rows: cuBLASLt's product and the B product's pass, as with the switch off (the same bits).
  Input x = make_input({3, 264}, DType::BF16, ++seed), w = make_weight({520, 264}, DType::BF16, ++seed);
  Input a = make_weight({8, 264}, DType::F32, ++seed), b = make_weight({520, 8}, DType::F32, ++seed);
  Tensor none;
  DeviceOut y_on({3, 520}, DType::BF16), y_off({3, 520}, DType::BF16), xa({3, 8}, DType::F32);
  ops::cuda::set_lora_b_in_gemm(true);
  const int64_t before = ops::cuda::gemm_sm90_launches();
  ops::lora_linear(x.dev, w.dev, none, a.dev, b.dev, 2.0f, {}, y_on.tensor, xa.tensor);
  EXPECT_EQ(ops::cuda::gemm_sm90_launches() - before, 0) << "3 rows took the tail";
  ops::cuda::set_lora_b_in_gemm(false);
  ops::lora_linear(x.dev, w.dev, none, a.dev, b.dev, 2.0f, {}, y_off.tensor, xa.tensor);
  ops::cuda::set_lora_b_in_gemm(was_on);
  const Tensor on = y_on.fetch(), off = y_off.fetch();
  EXPECT_EQ(std::memcmp(on.raw(), off.raw(), on.nbytes()), 0) << "3 rows";
}

}  // namespace
}  // namespace swift::test

#endif  // SWIFT_WITH_CUDA
