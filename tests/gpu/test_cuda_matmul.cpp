// tests/gpu/test_cuda_matmul.cpp — CUDA linear, gemm, linear_backward, LoRA linear (+ backward) against the CPU
// references (ops::ref), and the caching allocator. (LM head + cross-entropy: test_cuda_cross_entropy.cpp.)
// Label gpu: needs a CUDA device.
//
// Invariants:
//  - Fresh random inputs per case (seeded), odd shapes. BF16 activations are compared with the reference fed the
//    same bf16-rounded values as F32 (the reference computes in double).
//  - Outputs start as NaN inside guarded device storage (sentinel bytes around them): every element must be
//    written, nothing outside it. Accumulating outputs start from random values instead.
//  - Tolerances (relative norm ||out - ref|| / ||ref||, and an element-wise max-abs bound):
//      F32 products (pure fp32 in cuBLASLt, no TF32): 1e-5 relative norm (K up to ~4000: fp32 rounding ~1e-6).
//      BF16 activations: 1e-2 relative norm (one bf16 rounding of each output, 2^-9 relative, plus rounded LoRA
//      factors / head rows where the op converts them); per-element |err| <= 2e-2 * max|ref| + 1e-2 * |ref|.
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "gpu/gpu_test_util.h"
#include "gpu/gpu_timing.h"
#include "ops/backends.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

// The LoRA tests below check lora_linear's and lora_linear_backward's two-step forms (cuBLASLt's product, then the
// rank passes): the B product and the dx term inside our Hopper GEMM (SWIFT_LORA_B_IN_GEMM, SWIFT_LORA_DX_SM90, on by
// default) are test_cuda_gemm_sm90.cpp's; off for one test here.
struct BInGemmOff {
  BInGemmOff() : was(ops::cuda::lora_b_in_gemm()), was_dx(ops::cuda::lora_dx_sm90()) {
    ops::cuda::set_lora_b_in_gemm(false);
    ops::cuda::set_lora_dx_sm90(false);
  }
  ~BInGemmOff() {
    ops::cuda::set_lora_b_in_gemm(was);
    ops::cuda::set_lora_dx_sm90(was_dx);
  }
  bool was, was_dx;
};

// F16 (10 mantissa bits) rounds 8x finer than BF16 (7): BF16's bound / 8, rounded up.
double tol_for(DType act) { return act == DType::F32 ? 1e-5 : (act == DType::F16 ? 2e-3 : 1e-2); }
const char* name(DType d) { return dtype_name(d); }

// ---- linear / gemm ----------------------------------------------------------------------------------------------
TEST(OpsCudaMatmul, LinearMatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m; };
  const Case cases[] = {{1, 1, 1}, {7, 13, 5}, {37, 45, 29}, {129, 300, 67}, {257, 1029, 515}, {3, 4096, 4500}};
  uint32_t seed = 100;
  int variant = 0;
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16}) {
      for (DType wd : {DType::F32, DType::BF16, DType::F16}) {
        if (cs.k == 4096 && wd == DType::F32 && act == DType::F32) continue;  // the chunked-conversion case only
        ++variant;
        const bool accumulate = variant % 2 == 0;
        const int bias_kind = variant % 3;  // 0 none, 1 F32, 2 w's dtype
        g_tag = std::string("linear ") + name(act);
        SCOPED_TRACE(fmt::format("N={} K={} M={} act={} w={} bias={} acc={}", cs.n, cs.k, cs.m, name(act), name(wd),
                                 bias_kind, accumulate));
        Input x = make_input({cs.n, cs.k}, act, ++seed);
        Input w = make_weight({cs.m, cs.k}, wd, ++seed);
        Input bias;
        if (bias_kind) bias = make_weight({cs.m}, bias_kind == 1 ? DType::F32 : wd, ++seed);
        DeviceOut y({cs.n, cs.m}, act);
        Tensor y_ref = Tensor::empty({cs.n, cs.m}, DType::F32);
        if (accumulate) {
          Tensor y0 = rounded(random_tensor({cs.n, cs.m}, DType::F32, ++seed), act);
          y.set(y0);
          y_ref.copy_from(y0);
        }
        ops::linear(x.dev, w.dev, bias.dev, y.tensor, accumulate);
        ops::ref::linear(x.ref, w.ref, bias.ref, y_ref, accumulate);
        // BF16 activations with F32/F16 weights: the weight is rounded to bf16 (documented), one more 2^-9.
        expect_close(y.fetch(), y_ref, tol_for(act), "y");
      }
    }
  }
}

// linear_residual: the residual read as the product's C (aligned as y), copied into y first (a residual 2 bytes off
// y's alignment), or y itself, with the weight as is or converted in pieces; y must be linear onto a copy of the
// residual up to the output's rounding (cuBLASLt may add a C apart from D in another order: 1e-6 relative norm in
// F32, 4e-3 in BF16, a few outputs rounded the other way), and the residual must stay untouched.
TEST(OpsCudaMatmul, LinearResidualIsLinearOntoACopy) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m; };
  const Case cases[] = {{1, 1, 1}, {37, 45, 29}, {129, 300, 67}, {257, 1029, 515}, {3, 4096, 4500}};
  uint32_t seed = 900;
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16}) {
      for (DType wd : {act, DType::F16}) {
        for (int where : {0, 1, 2}) {  // 0: a buffer of its own, 1: one element off y's alignment, 2: y itself
          SCOPED_TRACE(fmt::format("N={} K={} M={} act={} w={} residual {}", cs.n, cs.k, cs.m, name(act), name(wd),
                                   where));
          const Device d = Device::cuda();
          const Tensor x = random_tensor({cs.n, cs.k}, DType::F32, ++seed).to_dtype(act).to(d);
          const Tensor w = random_tensor({cs.m, cs.k}, DType::F32, ++seed, -0.1f, 0.1f).to_dtype(wd).to(d);
          const Tensor bias = random_tensor({cs.m}, DType::F32, ++seed).to(d);
          const Tensor r_host = random_tensor({cs.n, cs.m}, DType::F32, ++seed).to_dtype(act);
          // A residual one element into a larger buffer: its rows start 2 (or 4) bytes off the 256-byte alignment.
          Tensor holder = Tensor::zeros({cs.n * cs.m + 1}, act, d);
          Tensor residual = where == 1 ? holder.slice_rows(1, cs.n * cs.m + 1).view({cs.n, cs.m})
                                       : Tensor::empty({cs.n, cs.m}, act, d);
          residual.copy_from(r_host);
          Tensor y = where == 2 ? residual : Tensor::empty({cs.n, cs.m}, act, d);
          Tensor want = Tensor::empty({cs.n, cs.m}, act, d);
          want.copy_from(r_host);
          ops::linear(x, w, bias, want, /*accumulate=*/true);
          ops::linear_residual(x, w, bias, residual, y);
          const Tensor got_f32 = y.to(Device::cpu()).to_dtype(DType::F32);
          const Tensor want_f32 = want.to(Device::cpu()).to_dtype(DType::F32);
          EXPECT_LE(rel_norm(got_f32, want_f32), act == DType::F32 ? 1e-6 : 4e-3);
          if (where != 2) {
            EXPECT_TRUE(bit_equal(residual.to(Device::cpu()), r_host));
          }
        }
      }
    }
  }
  // A residual of another shape, or overlapping y in part, is refused by name.
  const Device d = Device::cuda();
  const Tensor x = Tensor::zeros({4, 8}, DType::F32, d), w = Tensor::zeros({6, 8}, DType::F32, d);
  Tensor y = Tensor::zeros({4, 6}, DType::F32, d), none;
  EXPECT_TRUE(throws_error([&] { ops::linear_residual(x, w, none, Tensor::zeros({4, 5}, DType::F32, d), y); },
                           {"linear_residual", "residual", "same shape"}));
  Tensor big = Tensor::zeros({5, 6}, DType::F32, d);
  Tensor top = big.slice_rows(0, 4), bottom = big.slice_rows(1, 5);
  EXPECT_TRUE(throws_error([&] { ops::linear_residual(x, w, none, bottom, top); },
                           {"linear_residual", "partly overlaps"}));
}

TEST(OpsCudaMatmul, GemmAllTransposes) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m; };
  const Case cases[] = {{1, 1, 1}, {5, 3, 7}, {33, 65, 17}, {130, 257, 95}};
  uint32_t seed = 500;
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16}) {
      const std::vector<DType> c_dtypes = act == DType::F32 ? std::vector<DType>{DType::F32}
                                                            : std::vector<DType>{DType::F32, DType::BF16};
      for (DType cd : c_dtypes) {
        for (int t = 0; t < 4; ++t) {
          const bool ta = t & 1, tb = t & 2;
          for (float beta : {0.0f, 1.3f}) {
            g_tag = std::string("gemm ") + name(act);
            SCOPED_TRACE(fmt::format("N={} K={} M={} act={} c={} ta={} tb={} beta={}", cs.n, cs.k, cs.m, name(act),
                                     name(cd), ta, tb, beta));
            Input a = make_input(ta ? Shape{cs.k, cs.n} : Shape{cs.n, cs.k}, act, ++seed);
            Input b = make_input(tb ? Shape{cs.m, cs.k} : Shape{cs.k, cs.m}, act, ++seed);
            DeviceOut c({cs.n, cs.m}, cd);
            Tensor c_ref = Tensor::empty({cs.n, cs.m}, DType::F32);
            if (beta != 0.0f) {
              Tensor c0 = rounded(random_tensor({cs.n, cs.m}, DType::F32, ++seed), cd);
              c.set(c0);
              c_ref.copy_from(c0);
            }
            ops::gemm(ta, tb, 0.7f, a.dev, b.dev, beta, c.tensor);
            ops::ref::gemm(ta, tb, 0.7f, a.ref, b.ref, beta, c_ref);
            // F32 c: bf16 inputs are exact in fp32, so fp32 accuracy; BF16 c: one bf16 rounding.
            expect_close(c.fetch(), c_ref, cd == DType::F32 ? 1e-5 : 1e-2, "c");
          }
        }
      }
    }
  }
}

// SWIFT_GEMM_AUTOTUNE: the timing runs write a scratch D and read the real one as C, so a product that accumulates
// (beta != 0) still adds exactly once; shapes no earlier test made (new plans, each tuned on first use).
TEST(OpsCudaMatmul, GemmAutotuneKeepsTheResult) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  // The choices go to a record of this test's own (not the user's cache), one entry per product.
  const std::string record = (std::filesystem::temp_directory_path() /
                              ("swift-gemm-autotune-test-" + std::to_string(::getpid()) + ".json")).string();
  std::filesystem::remove(record);
  ops::cuda::set_gemm_autotune_record(record);
  const bool autotune_was = ops::cuda::gemm_autotune_enabled();
  ops::cuda::set_gemm_autotune(true);
  struct Case { int64_t n, k, m; };
  const Case cases[] = {{257, 129, 383}, {1031, 520, 264}, {64, 2056, 1000}};
  uint32_t seed = 4200;
  for (const Case& cs : cases) {
    for (float beta : {0.0f, 1.0f}) {
      SCOPED_TRACE(fmt::format("N={} K={} M={} beta={}", cs.n, cs.k, cs.m, beta));
      Input a = make_input({cs.n, cs.k}, DType::BF16, ++seed);
      Input b = make_input({cs.m, cs.k}, DType::BF16, ++seed);
      DeviceOut c({cs.n, cs.m}, DType::F32);
      Tensor c_ref = Tensor::empty({cs.n, cs.m}, DType::F32);
      if (beta != 0.0f) {
        Tensor c0 = random_tensor({cs.n, cs.m}, DType::F32, ++seed);
        c.set(c0);
        c_ref.copy_from(c0);
      }
      for (int call = 0; call < 2; ++call) {  // the first call tunes, the second uses the choice
        ops::gemm(false, true, 1.0f, a.dev, b.dev, beta, c.tensor);
        ops::ref::gemm(false, true, 1.0f, a.ref, b.ref, beta, c_ref);
        expect_close(c.fetch(), c_ref, 1e-5, "c");
      }
    }
  }
  ops::cuda::set_gemm_autotune(autotune_was);
  ops::cuda::set_gemm_autotune_record("");
  // The shapes whose heuristic offered more than one algorithm (all of them on an H200) were timed once (beta does
  // not change the plan) and their choice recorded under this GPU.
  std::ifstream in(record);
  ASSERT_TRUE(in.good()) << "no autotune record at " << record;
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  EXPECT_NE(json.find("\"format\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find("cublasLt"), std::string::npos) << json;
  int recorded = 0;
  for (const char* product : {"n257 m383 k129", "n1031 m264 k520", "n64 m1000 k2056"}) {
    recorded += json.find(product) != std::string::npos ? 1 : 0;
  }
  EXPECT_GE(recorded, 1) << json;
  std::filesystem::remove(record);
}

TEST(OpsCudaMatmul, LinearBackwardMatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m; };
  const Case cases[] = {{1, 1, 1}, {9, 17, 11}, {67, 129, 45}, {300, 257, 513}, {5, 4096, 4500}};
  uint32_t seed = 900;
  int variant = 0;
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16}) {
      for (DType wd : {DType::F32, DType::BF16}) {
        ++variant;
        const bool accumulate_dx = variant % 2 == 1;
        const bool accumulate_dw = variant % 5 != 0;  // else dw is written (=) over its stale values
        const bool want_dx = variant % 4 != 3, want_dw = variant % 4 != 2, want_db = variant % 3 != 0;
        if (cs.k == 4096 && !(act == DType::F32 && wd == DType::BF16)) continue;  // chunked conversion only
        g_tag = std::string("linear_backward ") + name(act);
        SCOPED_TRACE(fmt::format("N={} K={} M={} act={} w={} dx={} acc={} dw={} acc_dw={} db={}", cs.n, cs.k, cs.m,
                                 name(act), name(wd), want_dx, accumulate_dx, want_dw, accumulate_dw, want_db));
        Input dy = make_input({cs.n, cs.m}, act, ++seed);
        Input x = make_input({cs.n, cs.k}, act, ++seed);
        Input w = make_weight({cs.m, cs.k}, wd, ++seed);
        DeviceOut dx({cs.n, cs.k}, act), dw({cs.m, cs.k}, DType::F32), db({cs.m}, DType::F32);
        Tensor dx_ref = Tensor::empty({cs.n, cs.k}, DType::F32);
        Tensor dw_ref = random_tensor({cs.m, cs.k}, DType::F32, ++seed);
        Tensor db_ref = random_tensor({cs.m}, DType::F32, ++seed);
        dw.set(dw_ref);
        db.set(db_ref);
        if (accumulate_dx) {
          Tensor dx0 = rounded(random_tensor({cs.n, cs.k}, DType::F32, ++seed), act);
          dx.set(dx0);
          dx_ref.copy_from(dx0);
        }
        Tensor none;
        ops::linear_backward(dy.dev, x.dev, w.dev, want_dx ? dx.tensor : none, want_dw ? dw.tensor : none,
                             want_db ? db.tensor : none, accumulate_dx, accumulate_dw);
        Tensor n1, n2, n3;
        ops::ref::linear_backward(dy.ref, x.ref, w.ref, want_dx ? dx_ref : n1, want_dw ? dw_ref : n2,
                                  want_db ? db_ref : n3, accumulate_dx, accumulate_dw);
        if (want_dx) {
          expect_close(dx.fetch(), dx_ref, tol_for(act), "dx");
        } else {
          Tensor untouched = dx.fetch();  // undefined output: still NaN / its initial values
          if (!accumulate_dx) {
            EXPECT_TRUE(std::isnan(untouched.item(0)));
          }
        }
        // dw, db accumulate into F32; bf16 inputs are exact in fp32, so the products are fp32-accurate.
        expect_close(dw.fetch(), dw_ref, 1e-5, "dw");
        expect_close(db.fetch(), db_ref, 1e-5, "dbias");
      }
    }
  }
}

// ---- LoRA ---------------------------------------------------------------------------------------------------------
TEST(OpsCudaMatmul, LoraLinearForwardAndBackward) {
  const BInGemmOff b_in_gemm_off;
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m, r; };
  // r 8 / 16 with K % 8 == 0 take the one-pass kernels of lora.cu (xa forward, dx and da backward; the B product
  // too when M % 8 == 0): N not a multiple of their 64-row tiles, K not a multiple of their 512-column tiles (several
  // column splits of xa), N >= 128 splitting da into row slices, a lane's 8 columns straddling a tile edge never
  // (K % 8 == 0); the dy pass (g and db) when M % 8 == 0, with several 256-column tiles for M > 256; K % 8 != 0
  // or other ranks take the chunked dropout + GEMM path.
  const Case cases[] = {{1, 3, 2, 1},       {13, 37, 29, 8},   {131, 259, 193, 16}, {515, 300, 130, 64},
                        {67, 1028, 45, 8},  {33, 516, 20, 16}, {1, 4, 3, 8},        {1100, 260, 30, 8},
                        {77, 1032, 40, 8},  {300, 2056, 24, 16}, {2100, 520, 64, 8}, {65, 8, 16, 16},
                        {3, 1544, 8, 8},    {150, 264, 520, 8}, {700, 16, 264, 16}};
  uint32_t seed = 1500;
  int variant = 0;
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16, DType::F16}) {  // inputs in [-1, 1]: in fp16's range
      for (float p : {0.0f, 0.25f}) {
        ++variant;
        const DType wd = variant % 2 ? DType::BF16 : DType::F32;
        const bool accumulate = variant % 3 == 1, with_bias = variant % 2 == 0;
        const ops::Dropout drop{p, 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(variant)};
        const float scale = 2.0f / static_cast<float>(cs.r);
        g_tag = std::string("lora ") + name(act);
        SCOPED_TRACE(fmt::format("N={} K={} M={} r={} act={} w={} p={} acc={} bias={}", cs.n, cs.k, cs.m, cs.r,
                                 name(act), name(wd), p, accumulate, with_bias));
        Input x = make_input({cs.n, cs.k}, act, ++seed);
        Input w = make_weight({cs.m, cs.k}, wd, ++seed);
        Input a = make_weight({cs.r, cs.k}, DType::F32, ++seed, -0.5f, 0.5f);
        Input b = make_weight({cs.m, cs.r}, DType::F32, ++seed, -0.5f, 0.5f);
        Input bias;
        if (with_bias) bias = make_weight({cs.m}, DType::F32, ++seed);
        // Forward.
        DeviceOut y({cs.n, cs.m}, act), xa({cs.n, cs.r}, DType::F32);
        Tensor y_ref = Tensor::empty({cs.n, cs.m}, DType::F32), xa_ref = Tensor::empty({cs.n, cs.r}, DType::F32);
        Tensor y0_kept;
        if (accumulate) {
          Tensor y0 = rounded(random_tensor({cs.n, cs.m}, DType::F32, ++seed), act);
          y.set(y0);
          y_ref.copy_from(y0);
          y0_kept = y0;
        }
        ops::lora_linear(x.dev, w.dev, bias.dev, a.dev, b.dev, scale, drop, y.tensor, xa.tensor, accumulate);
        ops::ref::lora_linear(x.ref, w.ref, bias.ref, a.ref, b.ref, scale, drop, y_ref, xa_ref, accumulate);
        expect_close(y.fetch(), y_ref, tol_for(act), "y");
        expect_close(xa.fetch(), xa_ref, 1e-5, "xa");  // fp32 dropout(x) a^T from exact inputs
        {  // lora_xa: lora_linear's xa alone, the same bits
          DeviceOut xa_alone({cs.n, cs.r}, DType::F32);
          ops::lora_xa(x.dev, a.dev, drop, xa_alone.tensor);
          EXPECT_EQ(std::memcmp(xa_alone.fetch().raw(), xa.fetch().raw(), xa_ref.nbytes()), 0) << "lora_xa";
        }
        {  // lora_b_product after the frozen product: lora_linear's y, the same bits
          DeviceOut y_parts({cs.n, cs.m}, act);
          if (accumulate) y_parts.set(y0_kept);
          ops::linear(x.dev, w.dev, bias.dev, y_parts.tensor, accumulate);
          ops::lora_b_product(y_parts.tensor, ops::LoraBProduct{xa.tensor, b.dev}, scale);
          const Tensor got = y_parts.fetch(), want = y.fetch();
          EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << "lora_b_product";
        }
        if (!accumulate) {  // SWIFT_LORA_B_FIRST's order (B product written first, the frozen product onto it)
          ops::cuda::set_lora_b_first(true);
          DeviceOut y_first({cs.n, cs.m}, act), xa_first({cs.n, cs.r}, DType::F32);
          ops::lora_linear(x.dev, w.dev, bias.dev, a.dev, b.dev, scale, drop, y_first.tensor, xa_first.tensor, false);
          ops::cuda::set_lora_b_first(false);
          expect_close(y_first.fetch(), y_ref, tol_for(act), "y (B product first)");
        }
        // Backward, from the reference's xa.
        Input dy = make_input({cs.n, cs.m}, act, ++seed);
        const bool accumulate_dx = variant % 2 == 1;
        DeviceOut dx({cs.n, cs.k}, act), da({cs.r, cs.k}, DType::F32), db({cs.m, cs.r}, DType::F32);
        Tensor dx_ref = Tensor::empty({cs.n, cs.k}, DType::F32);
        Tensor da_ref = random_tensor({cs.r, cs.k}, DType::F32, ++seed);
        Tensor db_ref = random_tensor({cs.m, cs.r}, DType::F32, ++seed);
        da.set(da_ref);
        db.set(db_ref);
        if (accumulate_dx) {
          Tensor dx0 = rounded(random_tensor({cs.n, cs.k}, DType::F32, ++seed), act);
          dx.set(dx0);
          dx_ref.copy_from(dx0);
        }
        const Tensor xa_dev = xa_ref.to(Device::cuda());
        ops::lora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, xa_dev, scale, drop, dx.tensor, da.tensor,
                                  db.tensor, accumulate_dx);
        ops::ref::lora_linear_backward(dy.ref, x.ref, w.ref, a.ref, b.ref, xa_ref, scale, drop, dx_ref, da_ref, db_ref,
                                       accumulate_dx);
        expect_close(dx.fetch(), dx_ref, tol_for(act), "dx");
        if (!accumulate_dx) {  // SWIFT_LORA_DX_FIRST's order (the dx term written first, the input gradient onto it)
          ops::cuda::set_lora_dx_first(true);
          DeviceOut dx_first({cs.n, cs.k}, act), da_first({cs.r, cs.k}, DType::F32), db_first({cs.m, cs.r}, DType::F32);
          da_first.set(Tensor::zeros({cs.r, cs.k}, DType::F32));
          db_first.set(Tensor::zeros({cs.m, cs.r}, DType::F32));
          ops::lora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, xa_dev, scale, drop, dx_first.tensor,
                                    da_first.tensor, db_first.tensor, false);
          ops::cuda::set_lora_dx_first(false);
          expect_close(dx_first.fetch(), dx_ref, tol_for(act), "dx (dx term first)");
        }
        // da, db are F32, but with 16-bit activations b / xa are rounded to bf16 / fp16 before meeting dy
        // (documented): tol_for(act) for them too.
        expect_close(da.fetch(), da_ref, tol_for(act), "da");
        expect_close(db.fetch(), db_ref, tol_for(act), "db");
        // Undefined dx and da: db alone.
        Tensor none1, none2;
        DeviceOut db2({cs.m, cs.r}, DType::F32);
        Tensor db2_ref = random_tensor({cs.m, cs.r}, DType::F32, ++seed);
        db2.set(db2_ref);
        ops::lora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, xa_dev, scale, drop, none1, none2, db2.tensor);
        Tensor n1, n2;
        ops::ref::lora_linear_backward(dy.ref, x.ref, w.ref, a.ref, b.ref, xa_ref, scale, drop, n1, n2, db2_ref);
        expect_close(db2.fetch(), db2_ref, tol_for(act), "db alone");
      }
    }
  }
}

// A LoRA linear's operands for the mapped-dropout and keep-bits tests: x (N, K) in `act`, the frozen W (M, K) BF16,
// A (r, K) and B (M, r) F32 in [-0.5, 0.5); seeds taken in that order from `seed`.
struct LoraOperands {
  Input x, w, a, b;
};
LoraOperands lora_operands(int64_t n, int64_t k, int64_t m, int64_t r, DType act, uint32_t& seed) {
  LoraOperands o;
  o.x = make_input({n, k}, act, ++seed);
  o.w = make_weight({m, k}, DType::BF16, ++seed);
  o.a = make_weight({r, k}, DType::F32, ++seed, -0.5f, 0.5f);
  o.b = make_weight({m, r}, DType::F32, ++seed, -0.5f, 0.5f);
  return o;
}

// A dropout map (ops/philox.h: a parallel rank's block of the full tensor) on the one-pass kernels and on the GEMM
// path, against the reference with the same map: whole-width row blocks (sequence parallel: stream runs start at
// row_offset * K, a multiple of 4 or not) and column blocks (tensor parallel's row-parallel inputs, offsets not a
// multiple of 4: the kernels' word-by-word branch); also ops::dropout with a map.
TEST(OpsCudaMatmul, LoraLinearWithDropoutMapMatchesReference) {
  const BInGemmOff b_in_gemm_off;
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m, r; ops::DropoutMap map; };
  const Case cases[] = {{131, 264, 72, 8, {37, 0, 0}},       {70, 520, 24, 16, {3, 1040, 520}},
                        {45, 264, 40, 8, {5, 301, 13}},       {33, 37, 29, 8, {11, 0, 0}},
                        {29, 37, 20, 4, {2, 50, 9}},          {300, 16, 264, 16, {1, 19, 3}}};
  uint32_t seed = 9100;
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16}) {
      ops::Dropout drop{0.25f, 0x5EED5EEDull + seed};
      drop.map = cs.map;
      const float scale = 2.0f / static_cast<float>(cs.r);
      g_tag = std::string("lora mapped ") + name(act);
      SCOPED_TRACE(fmt::format("N={} K={} M={} r={} act={} map=({}, {}, {})", cs.n, cs.k, cs.m, cs.r, name(act),
                               cs.map.row_offset, cs.map.full_cols, cs.map.col_offset));
      auto [x, w, a, b] = lora_operands(cs.n, cs.k, cs.m, cs.r, act, seed);
      Input bias;
      DeviceOut y({cs.n, cs.m}, act), xa({cs.n, cs.r}, DType::F32);
      Tensor y_ref = Tensor::empty({cs.n, cs.m}, DType::F32), xa_ref = Tensor::empty({cs.n, cs.r}, DType::F32);
      ops::lora_linear(x.dev, w.dev, bias.dev, a.dev, b.dev, scale, drop, y.tensor, xa.tensor);
      ops::ref::lora_linear(x.ref, w.ref, bias.ref, a.ref, b.ref, scale, drop, y_ref, xa_ref);
      expect_close(y.fetch(), y_ref, tol_for(act), "y");
      expect_close(xa.fetch(), xa_ref, 1e-5, "xa");
      Input dy = make_input({cs.n, cs.m}, act, ++seed);
      DeviceOut dx({cs.n, cs.k}, act), da({cs.r, cs.k}, DType::F32), db({cs.m, cs.r}, DType::F32);
      Tensor dx_ref = Tensor::empty({cs.n, cs.k}, DType::F32);
      Tensor da_ref = random_tensor({cs.r, cs.k}, DType::F32, ++seed);
      Tensor db_ref = random_tensor({cs.m, cs.r}, DType::F32, ++seed);
      da.set(da_ref);
      db.set(db_ref);
      const Tensor xa_dev = xa_ref.to(Device::cuda());
      ops::lora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, xa_dev, scale, drop, dx.tensor, da.tensor,
                                db.tensor);
      ops::ref::lora_linear_backward(dy.ref, x.ref, w.ref, a.ref, b.ref, xa_ref, scale, drop, dx_ref, da_ref, db_ref);
      expect_close(dx.fetch(), dx_ref, tol_for(act), "dx");
      expect_close(da.fetch(), da_ref, tol_for(act), "da");
      expect_close(db.fetch(), db_ref, tol_for(act), "db");
      // ops::dropout of the same block: the reference's mask exactly (x * multiplier, one rounding).
      DeviceOut out({cs.n, cs.k}, act);
      Tensor out_ref = Tensor::empty({cs.n, cs.k}, DType::F32);
      ops::dropout(x.dev, drop, out.tensor);
      ops::ref::dropout(x.ref, drop, out_ref);
      const Tensor got = out.fetch();
      for (int64_t i = 0; i < got.numel(); ++i) {
        ASSERT_EQ(got.item(i) == 0.0, out_ref.item(i) == 0.0) << "element " << i;
      }
      expect_close(got, out_ref, act == DType::F32 ? 1e-7 : tol_for(act), "dropout");
    }
  }
}

// add_lora_residual (the residual stream after o / down: y = y + residual + scale xa b^T, one rounding): against the
// double-precision sum of the same rounded inputs, on the one-pass kernel (r 8, M % 8 == 0: odd rows, several column
// tiles) and on the fallback (r 4, an odd M); the residual is read only; F32 / BF16 / F16.
TEST(OpsCudaMatmul, AddLoraResidualMatchesTheSum) {
  const BInGemmOff b_in_gemm_off;
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, m, r; };
  const Case cases[] = {{70, 1032, 8}, {33, 40, 8}, {300, 520, 8}, {19, 50, 4}, {1, 8, 8}};
  uint32_t seed = 9800;
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(fmt::format("N={} M={} r={} act={}", cs.n, cs.m, cs.r, name(act)));
      g_tag = std::string("add_lora_residual ") + name(act);
      const float scale = 4.0f / static_cast<float>(cs.r);
      const Tensor y0 = rounded(random_tensor({cs.n, cs.m}, DType::F32, ++seed), act);
      const Tensor res = rounded(random_tensor({cs.n, cs.m}, DType::F32, ++seed), act);
      const Tensor xa = random_tensor({cs.n, cs.r}, DType::F32, ++seed);
      const Tensor b = random_tensor({cs.m, cs.r}, DType::F32, ++seed, -0.5f, 0.5f);
      DeviceOut y({cs.n, cs.m}, act);
      y.set(y0);
      const Tensor res_dev = (act == DType::F32 ? res : res.to_dtype(act)).to(Device::cuda());
      ops::add_lora_residual(y.tensor, res_dev, ops::LoraBProduct{xa.to(Device::cuda()), b.to(Device::cuda())}, scale);
      Tensor want = Tensor::empty({cs.n, cs.m}, DType::F32);
      for (int64_t i = 0; i < cs.n; ++i) {
        for (int64_t j = 0; j < cs.m; ++j) {
          double t = 0.0;
          for (int64_t q = 0; q < cs.r; ++q) t += static_cast<double>(xa.data<float>()[i * cs.r + q]) * b.data<float>()[j * cs.r + q];
          want.data<float>()[i * cs.m + j] = static_cast<float>(static_cast<double>(y0.data<float>()[i * cs.m + j]) +
                                                                res.data<float>()[i * cs.m + j] + scale * t);
        }
      }
      expect_close(y.fetch(), want, tol_for(act), "y");
      const Tensor res_back = res_dev.to(Device::cpu());
      EXPECT_TRUE(bit_equal(act == DType::F32 ? res_back : res_back.to_dtype(DType::F32), res)) << "the residual is read only";
    }
  }
}

// The keep-bits cache (ops.h Dropout::keep_bits): a forward on the one-pass path stores exactly the reference's mask
// (dropout_keep at each element's stream index, maps with row / column offsets included), leaves y and xa as without
// the cache, and a backward reading it gives the same bits as one drawing the mask again (r 8 and 16, odd N, K
// with several column tiles, F32 / BF16 / F16 activations).
void expect_bit_equal(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0) << what << ": not the same bits";
}

// swiglu_lora (gate's and up's B products added in the swiglu's pass): gate, up and out have the bits of lora_linear
// with its B product then swiglu, on the fused kernel (r 8, widths % 8 == 0, odd rows, partial column tiles, several
// row blocks) and on the fallback (r 4 and 16, a width % 8 != 0); F32 / BF16 / F16.
TEST(OpsCudaMatmul, SwigluLoraEqualsBProductThenSwiglu) {
  const BInGemmOff b_in_gemm_off;
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, f, r; };
  const Case cases[] = {{70, 96, 1032, 8}, {33, 40, 200, 8}, {300, 64, 520, 8}, {19, 24, 50, 4}, {21, 32, 72, 16},
                        {37, 48, 60, 8}};
  uint32_t seed = 9700;
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(fmt::format("N={} K={} F={} r={} act={}", cs.n, cs.k, cs.f, cs.r, name(act)));
      const ops::Dropout drop_gate{0.1f, 0xABCDull + seed}, drop_up{0.1f, 0xBCDEull + seed};
      const float scale = 4.0f / static_cast<float>(cs.r);
      auto [x, wg, ag, bg] = lora_operands(cs.n, cs.k, cs.f, cs.r, act, seed);
      auto [x_unused, wu, au, bu] = lora_operands(cs.n, cs.k, cs.f, cs.r, act, seed);
      auto dev = [](const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype, Device::cuda()); };
      auto host = [](const Tensor& t) { return t.to(Device::cpu()); };
      const Tensor none;
      Tensor gate = dev({cs.n, cs.f}, act), up = dev({cs.n, cs.f}, act);
      Tensor xag = dev({cs.n, cs.r}, DType::F32), xau = dev({cs.n, cs.r}, DType::F32);
      ops::lora_linear(x.dev, wg.dev, none, ag.dev, bg.dev, scale, drop_gate, gate, xag);
      ops::lora_linear(x.dev, wu.dev, none, au.dev, bu.dev, scale, drop_up, up, xau);
      Tensor out_want = dev({cs.n, cs.f}, act);
      ops::swiglu(gate, up, out_want);
      Tensor gate_base = dev({cs.n, cs.f}, act), up_base = dev({cs.n, cs.f}, act);
      Tensor xag2 = dev({cs.n, cs.r}, DType::F32), xau2 = dev({cs.n, cs.r}, DType::F32);
      ops::lora_linear(x.dev, wg.dev, none, ag.dev, bg.dev, scale, drop_gate, gate_base, xag2, false, false);
      ops::lora_linear(x.dev, wu.dev, none, au.dev, bu.dev, scale, drop_up, up_base, xau2, false, false);
      expect_bit_equal(host(xag2), host(xag), "xa of gate");
      const ops::LoraBProduct gate_b{xag2, bg.dev}, up_b{xau2, bu.dev};
      Tensor out = dev({cs.n, cs.f}, act);
      ops::swiglu_lora(gate_base, up_base, gate_b, up_b, scale, out);
      expect_bit_equal(host(gate_base), host(gate), "gate");
      expect_bit_equal(host(up_base), host(up), "up");
      expect_bit_equal(host(out), host(out_want), "out");
    }
  }
}

// The MLP's down backward through the swiglu (lora_linear_swiglu_backward; lora_ring.cu's fused pass where r 8 and the
// ring take the width) is lora_linear_backward into act's gradient then swiglu_backward: the same bits of dgate, dup
// (written over up), da and db, with the mask drawn, read from the forward's keep-bits cache, or absent, over widths the
// fused pass takes (several 128-column blocks, 256-row blocks, a last partial one) and widths left to the two ops (r
// 16; F % 8 != 0; cached bits with F % 32 != 0), in F32, BF16 and F16; and the same with the fused pass switched off.
TEST(OpsCudaMatmul, LoraSwigluBackwardIsTheTwoOps) {
  const BInGemmOff b_in_gemm_off;
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, f, m, r; };
  const Case cases[] = {{70, 1056, 96, 8}, {600, 256, 72, 8}, {33, 200, 40, 8}, {1, 128, 8, 8}, {19, 64, 24, 16},
                        {37, 60, 48, 8}, {300, 520, 64, 8}};
  uint32_t seed = 9800;
  auto dev = [](const Shape& shape, DType dtype) { return Tensor::empty(shape, dtype, Device::cuda()); };
  enum class Mask { kNone, kDrawn, kCached };
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16, DType::F16}) {
      for (Mask mask : {Mask::kNone, Mask::kDrawn, Mask::kCached}) {
        for (bool fused : {true, false}) {
          SCOPED_TRACE(fmt::format("N={} F={} M={} r={} act={} mask={} fused={}", cs.n, cs.f, cs.m, cs.r, name(act),
                                   static_cast<int>(mask), fused));
          ops::cuda::set_lora_swiglu_backward_fused(fused);
          ops::Dropout drop{mask == Mask::kNone ? 0.0f : 0.1f, 0x5EEDull + seed};
          if (mask == Mask::kCached) {
            drop.keep_bits = Tensor::zeros({cs.n, (cs.f + 7) / 8}, DType::U8).to(Device::cuda());
          }
          const float scale = 4.0f / static_cast<float>(cs.r);
          auto [x_unused, w, a, b] = lora_operands(cs.n, cs.f, cs.m, cs.r, act, seed);
          const Input gate = make_input({cs.n, cs.f}, act, ++seed, -4.0f, 4.0f);
          const Input up = make_input({cs.n, cs.f}, act, ++seed);
          const Input dy = make_input({cs.n, cs.m}, act, ++seed);
          Tensor act_t = dev({cs.n, cs.f}, act), xa = dev({cs.n, cs.r}, DType::F32);
          ops::swiglu(gate.dev, up.dev, act_t);
          ops::lora_xa(act_t, a.dev, drop, xa);  // writes the keep bits of a cached mask
          const Tensor da0 = random_tensor({cs.r, cs.f}, DType::F32, ++seed);
          const Tensor db0 = random_tensor({cs.m, cs.r}, DType::F32, ++seed);
          DeviceOut dgate_want({cs.n, cs.f}, act), dup_want({cs.n, cs.f}, act), da_want({cs.r, cs.f}, DType::F32),
              db_want({cs.m, cs.r}, DType::F32);
          da_want.set(da0);
          db_want.set(db0);
          ops::lora_linear_backward(dy.dev, act_t, w.dev, a.dev, b.dev, xa, scale, drop, dgate_want.tensor,
                                    da_want.tensor, db_want.tensor);
          ops::swiglu_backward(dgate_want.tensor, gate.dev, up.dev, dgate_want.tensor, dup_want.tensor);
          DeviceOut dgate({cs.n, cs.f}, act), up_in_place({cs.n, cs.f}, act), da({cs.r, cs.f}, DType::F32),
              db({cs.m, cs.r}, DType::F32);
          up_in_place.set(up.ref);
          da.set(da0);
          db.set(db0);
          ops::lora_linear_swiglu_backward(dy.dev, act_t, w.dev, a.dev, b.dev, xa, scale, drop, gate.dev,
                                           up_in_place.tensor, dgate.tensor, up_in_place.tensor, da.tensor, db.tensor);
          expect_bit_equal(dgate.fetch(), dgate_want.fetch(), "dgate");
          expect_bit_equal(up_in_place.fetch(), dup_want.fetch(), "dup");
          expect_bit_equal(da.fetch(), da_want.fetch(), "da");
          expect_bit_equal(db.fetch(), db_want.fetch(), "db");
        }
      }
    }
  }
  ops::cuda::set_lora_swiglu_backward_fused(false);
}

// swiglu_backward_lora_dy in one pass (lora_dy.cu, BF16, r 8) has the bits of the swiglu's backward then each step's
// dy pass (SWIFT_LORA_SWIGLU_DY=0's path): dgate and dup in place over dout and up and apart, g and db, over odd rows,
// partial column tiles, several row blocks and one 7B MLP's width; F32 / F16 and r 16 take that path themselves.
TEST(OpsCudaMatmul, SwigluBackwardLoraDyIsTheSwigluBackwardThenTheDyPasses) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, f, r; DType act; };
  const Case cases[] = {{300, 264, 8, DType::BF16}, {1100, 1032, 8, DType::BF16}, {1, 8, 8, DType::BF16},
                        {129, 520, 8, DType::BF16}, {2048, 18944, 8, DType::BF16}, {77, 264, 8, DType::F32},
                        {65, 136, 8, DType::F16}, {90, 264, 16, DType::BF16}};
  uint32_t seed = 9900;
  const bool was = ops::cuda::lora_swiglu_dy_fused();
  for (const Case& cs : cases) {
    const Input dout = make_input({cs.n, cs.f}, cs.act, ++seed);
    const Input gate = make_input({cs.n, cs.f}, cs.act, ++seed, -4.0f, 4.0f);
    const Input up = make_input({cs.n, cs.f}, cs.act, ++seed);
    Input b[2], xa[2];
    Tensor db0[2];
    for (int j = 0; j < 2; ++j) {
      b[j] = make_weight({cs.f, cs.r}, DType::F32, ++seed, -0.5f, 0.5f);
      xa[j] = make_weight({cs.n, cs.r}, DType::F32, ++seed);
      db0[j] = random_tensor({cs.f, cs.r}, DType::F32, ++seed);
    }
    struct Run { Tensor dgate, dup, g[2], db[2]; };
    auto run = [&](bool fused, bool in_place) {
      ops::cuda::set_lora_swiglu_dy_fused(fused);
      DeviceOut dgate({cs.n, cs.f}, cs.act), dup({cs.n, cs.f}, cs.act);
      if (in_place) {
        dgate.set(dout.ref);
        dup.set(up.ref);
      }
      std::vector<DeviceOut> g, db;
      g.reserve(2);
      db.reserve(2);
      for (int j = 0; j < 2; ++j) {
        g.emplace_back(Shape{cs.n, cs.r}, DType::F32);
        db.emplace_back(Shape{cs.f, cs.r}, DType::F32);
        db.back().set(db0[j]);
      }
      ops::swiglu_backward_lora_dy(in_place ? dgate.tensor : dout.dev, gate.dev, in_place ? dup.tensor : up.dev,
                                   dgate.tensor, dup.tensor, {b[0].dev, xa[0].dev, g[0].tensor, db[0].tensor},
                                   {b[1].dev, xa[1].dev, g[1].tensor, db[1].tensor}, 0.75f);
      Run out{dgate.fetch(), dup.fetch(), {g[0].fetch(), g[1].fetch()}, {db[0].fetch(), db[1].fetch()}};
      return out;
    };
    const Run want = run(false, false);
    for (bool in_place : {true, false}) {
      SCOPED_TRACE(fmt::format("N={} F={} r={} act={} in_place={}", cs.n, cs.f, cs.r, name(cs.act), in_place));
      const Run got = run(true, in_place);
      expect_bit_equal(got.dgate, want.dgate, "dgate");
      expect_bit_equal(got.dup, want.dup, "dup");
      for (int j = 0; j < 2; ++j) {
        SCOPED_TRACE(j == 0 ? "gate's step" : "up's step");
        expect_bit_equal(got.g[j], want.g[j], "g");
        expect_bit_equal(got.db[j], want.db[j], "db");
      }
    }
  }
  ops::cuda::set_lora_swiglu_dy_fused(was);
}

TEST(OpsCudaMatmul, LoraKeepBitsCacheIsTheMask) {
  const BInGemmOff b_in_gemm_off;
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m, r; ops::DropoutMap map; };
  const Case cases[] = {{131, 264, 72, 8, {}},          {70, 520, 24, 16, {3, 1040, 520}},
                        {45, 1032, 40, 8, {5, 1301, 13}}, {300, 16, 264, 16, {1, 0, 0}},
                        {1100, 264, 30, 8, {}}};
  uint32_t seed = 9700;
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16, DType::F16}) {
      ops::Dropout plain{0.25f, 0xB175ull + seed};
      plain.map = cs.map;
      ops::Dropout cached = plain;
      cached.keep_bits = Tensor::zeros({cs.n, (cs.k + 7) / 8}, DType::U8).to(Device::cuda());
      const float scale = 2.0f / static_cast<float>(cs.r);
      SCOPED_TRACE(fmt::format("N={} K={} M={} r={} act={} map=({}, {}, {})", cs.n, cs.k, cs.m, cs.r, name(act),
                               cs.map.row_offset, cs.map.full_cols, cs.map.col_offset));
      auto [x, w, a, b] = lora_operands(cs.n, cs.k, cs.m, cs.r, act, seed);
      Tensor none;
      DeviceOut y1({cs.n, cs.m}, act), xa1({cs.n, cs.r}, DType::F32), y2({cs.n, cs.m}, act),
          xa2({cs.n, cs.r}, DType::F32);
      ops::lora_linear(x.dev, w.dev, none, a.dev, b.dev, scale, plain, y1.tensor, xa1.tensor);
      ops::lora_linear(x.dev, w.dev, none, a.dev, b.dev, scale, cached, y2.tensor, xa2.tensor);
      expect_bit_equal(y1.fetch(), y2.fetch(), "y");
      expect_bit_equal(xa1.fetch(), xa2.fetch(), "xa");
      const Tensor bits = cached.keep_bits.to(Device::cpu());
      const uint32_t threshold = ops::dropout_threshold(plain.p);
      int64_t wrong = 0;
      for (int64_t i = 0; i < cs.n; ++i) {
        for (int64_t j = 0; j < cs.k; ++j) {
          const bool keep = ops::dropout_keep(plain.seed, ops::dropout_index(cs.map, i, j, cs.k), threshold);
          const bool bit = (bits.data<uint8_t>()[i * ((cs.k + 7) / 8) + j / 8] >> (j % 8)) & 1;
          wrong += keep != bit;
        }
      }
      EXPECT_EQ(wrong, 0) << "keep bits that differ from the mask";
      Input dy = make_input({cs.n, cs.m}, act, ++seed);
      const Tensor da0 = random_tensor({cs.r, cs.k}, DType::F32, ++seed);
      const Tensor db0 = random_tensor({cs.m, cs.r}, DType::F32, ++seed);
      DeviceOut dx1({cs.n, cs.k}, act), da1({cs.r, cs.k}, DType::F32), db1({cs.m, cs.r}, DType::F32);
      DeviceOut dx2({cs.n, cs.k}, act), da2({cs.r, cs.k}, DType::F32), db2({cs.m, cs.r}, DType::F32);
      for (DeviceOut* o : {&da1, &da2}) o->set(da0);
      for (DeviceOut* o : {&db1, &db2}) o->set(db0);
      const Tensor xa_dev = xa1.fetch().to(Device::cuda());
      ops::lora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, xa_dev, scale, plain, dx1.tensor, da1.tensor,
                                db1.tensor);
      ops::lora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, xa_dev, scale, cached, dx2.tensor, da2.tensor,
                                db2.tensor);
      expect_bit_equal(dx1.fetch(), dx2.fetch(), "dx");
      expect_bit_equal(da1.fetch(), da2.fetch(), "da");
      expect_bit_equal(db1.fetch(), db2.fetch(), "db");
    }
  }
}

// ops::swiglu_drawing_mask (the MLP's swiglu with down's dropout mask drawn in its pass) then lora_xa reading the mask
// (Dropout::keep_bits_drawn), against swiglu then lora_xa drawing it: act, the keep bits and xa bit for bit, the bits
// also against the mask itself (0 past F). One-pass shapes (16-bit, F % 8 == 0, identity map: partial and several
// 256-column tiles, odd rows, the 7B's 18,944) and the two-pass ones (F32, F % 8 != 0, a column-block map).
TEST(OpsCudaMatmul, SwigluDrawingMaskThenXaFromTheBitsIsSwigluThenXa) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, f, r; DType act; ops::DropoutMap map; bool one_pass; };
  const Case cases[] = {{333, 264, 8, DType::BF16, {}, true},        {1, 8, 8, DType::BF16, {}, true},
                        {1100, 2056, 8, DType::BF16, {}, true},      {2048, 18944, 8, DType::BF16, {}, true},
                        {129, 520, 16, DType::F16, {}, true},         {77, 100, 8, DType::BF16, {}, false},
                        {65, 264, 8, DType::F32, {}, false},          {45, 264, 8, DType::BF16, {3, 1040, 520}, false}};
  uint32_t seed = 9800;
  for (const Case& cs : cases) {
    SCOPED_TRACE(fmt::format("N={} F={} r={} act={} map=({}, {}, {})", cs.n, cs.f, cs.r, name(cs.act),
                             cs.map.row_offset, cs.map.full_cols, cs.map.col_offset));
    const Input gate = make_input({cs.n, cs.f}, cs.act, ++seed, -4.0f, 4.0f);
    const Input up = make_input({cs.n, cs.f}, cs.act, ++seed);
    const Input a = make_weight({cs.r, cs.f}, DType::F32, ++seed, -0.5f, 0.5f);
    const int64_t bytes = (cs.f + 7) / 8;
    ops::Dropout drawn{0.05f, 0xD0ull + seed};
    drawn.map = cs.map;
    drawn.keep_bits = Tensor::zeros({cs.n, bytes}, DType::U8).to(Device::cuda());
    ops::Dropout read = drawn;
    read.keep_bits = Tensor::zeros({cs.n, bytes}, DType::U8).to(Device::cuda());
    DeviceOut act1({cs.n, cs.f}, cs.act), act2({cs.n, cs.f}, cs.act);
    DeviceOut xa1({cs.n, cs.r}, DType::F32), xa2({cs.n, cs.r}, DType::F32);
    ops::swiglu(gate.dev, up.dev, act1.tensor);
    ops::lora_xa(act1.tensor, a.dev, drawn, xa1.tensor);
    EXPECT_EQ(ops::swiglu_drawing_mask_in_one_pass(act2.tensor, read), cs.one_pass);
    ops::swiglu_drawing_mask(gate.dev, up.dev, act2.tensor, read);
    const Tensor bits_made = read.keep_bits.to(Device::cpu());
    read.keep_bits_drawn = true;
    ops::lora_xa(act2.tensor, a.dev, read, xa2.tensor);
    expect_bit_equal(act2.fetch(), act1.fetch(), "act");
    expect_bit_equal(xa2.fetch(), xa1.fetch(), "xa");
    const Tensor bits_after = read.keep_bits.to(Device::cpu());
    const Tensor bits_xa = drawn.keep_bits.to(Device::cpu());
    const uint32_t threshold = ops::dropout_threshold(drawn.p);
    int64_t wrong = 0, wrong_xa = 0, changed = 0;
    for (int64_t i = 0; i < cs.n; ++i) {
      for (int64_t c = 0; c < bytes; ++c) {
        uint32_t want = 0;
        for (int64_t j = 8 * c; j < std::min(8 * c + 8, cs.f); ++j) {
          want |= (ops::dropout_keep(drawn.seed, ops::dropout_index(cs.map, i, j, cs.f), threshold) ? 1u : 0u)
                  << (j - 8 * c);
        }
        const uint8_t made = bits_made.data<uint8_t>()[i * bytes + c];
        wrong += made != want;
        changed += bits_after.data<uint8_t>()[i * bytes + c] != made;
        if (cs.f % 8 == 0) wrong_xa += bits_xa.data<uint8_t>()[i * bytes + c] != made;
      }
    }
    EXPECT_EQ(wrong, 0) << "keep bits that differ from the mask";
    EXPECT_EQ(changed, 0) << "keep bits that the xa pass changed";
    EXPECT_EQ(wrong_xa, 0) << "keep bits that differ from the ones lora_xa stores";
  }
}

// The backward's dy pass (launch_lora_dy: g = dy b and db += scale dy^T xa in one read of dy, r 8, BF16, tensor
// cores): against the two-product path (SWIFT_LORA_DY_FUSED=0: cuBLASLt with the same bf16-rounded b / xa and fp32
// accumulation, so only the summation order differs: 1e-4 for the F32 da / db), the same bits on a second call and
// with only one of its outputs asked for (dx and da undefined: db alone), over shapes with one and several
// 256-column tiles (a last one of 8 columns), odd row counts and several row blocks. F32 / F16 take the two products
// both ways.
TEST(OpsCudaMatmul, LoraDyPassMatchesTheTwoProducts) {
  const BInGemmOff b_in_gemm_off;
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m; };
  const Case cases[] = {{4100, 264, 1032}, {333, 40, 8}, {77, 520, 264}, {1, 16, 2056}, {9000, 24, 520}};
  uint32_t seed = 9900;
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE(fmt::format("N={} K={} M={} act={}", cs.n, cs.k, cs.m, name(act)));
      const ops::Dropout drop{0.1f, 0x5EEDull + seed};
      const float scale = 4.0f;
      auto [x, w, a, b] = lora_operands(cs.n, cs.k, cs.m, 8, act, seed);
      Input dy = make_input({cs.n, cs.m}, act, ++seed);
      const Tensor xa = random_tensor({cs.n, 8}, DType::F32, ++seed).to(Device::cuda());
      const Tensor da0 = random_tensor({8, cs.k}, DType::F32, ++seed);
      const Tensor db0 = random_tensor({cs.m, 8}, DType::F32, ++seed);
      struct Run { Tensor dx, da, db; };
      auto run = [&](bool fused, bool db_only) {
        ops::cuda::set_lora_dy_fused(fused);
        DeviceOut dx({cs.n, cs.k}, act), da({8, cs.k}, DType::F32), db({cs.m, 8}, DType::F32);
        da.set(da0);
        db.set(db0);
        Tensor none1, none2;
        ops::lora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, xa, scale, drop, db_only ? none1 : dx.tensor,
                                  db_only ? none2 : da.tensor, db.tensor);
        ops::cuda::set_lora_dy_fused(true);
        return Run{db_only ? Tensor() : dx.fetch(), db_only ? Tensor() : da.fetch(), db.fetch()};
      };
      const Run fused = run(true, false), again = run(true, false), alone = run(true, true);
      const Run two = run(false, false);
      expect_bit_equal(again.dx, fused.dx, "dx, second call");
      expect_bit_equal(again.da, fused.da, "da, second call");
      expect_bit_equal(again.db, fused.db, "db, second call");
      expect_bit_equal(alone.db, fused.db, "db without dx and da");
      // The two-product path rounds b and xa to the activation dtype: its tolerance.
      expect_close(fused.dx, two.dx, tol_for(act), "dx fused vs two products");
      expect_close(fused.da, two.da, 1e-4, "da fused vs two products");
      expect_close(fused.db, two.db, 1e-4, "db fused vs two products");
    }
  }
}

// The x passes on tensor cores (lora_x_mma_kernel: xa forward, da backward; r 8, BF16 x, the fp32 factor as three
// bf16 terms, so every product is exact) against the CUDA-core kernels (set_lora_x_mma(false)): both sum exact
// products in fp32, only the order differs, so xa and da agree to 1e-5 (relative norm); the same bits on a second
// call; with and without a dropout (drawn in the forward, the keep-bits cache read in the backward); one and several
// 256-column tiles (a last one of 8 columns), odd row counts, several row blocks.
TEST(OpsCudaMatmul, LoraXPassOnTensorCoresMatchesTheCudaCoreKernels) {
  const BInGemmOff b_in_gemm_off;
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m; };
  const Case cases[] = {{4100, 264, 40}, {333, 40, 8}, {77, 520, 24}, {1, 16, 16}, {9000, 24, 8}, {2050, 3592, 16}};
  uint32_t seed = 12100;
  for (const Case& cs : cases) {
    for (float p : {0.0f, 0.1f}) {
      SCOPED_TRACE(fmt::format("N={} K={} M={} p={}", cs.n, cs.k, cs.m, p));
      const float scale = 4.0f;
      auto [x, w, a, b] = lora_operands(cs.n, cs.k, cs.m, 8, DType::BF16, seed);
      Input dy = make_input({cs.n, cs.m}, DType::BF16, ++seed);
      const Tensor da0 = random_tensor({8, cs.k}, DType::F32, ++seed);
      struct Run { Tensor xa, da, y, dx; };
      auto run = [&](bool mma) {
        ops::cuda::set_lora_x_mma(mma);
        ops::Dropout drop{p, 0x5EEDull + seed};
        if (p > 0.0f) drop.keep_bits = Tensor::zeros({cs.n, cs.k / 8}, DType::U8).to(Device::cuda());
        DeviceOut y({cs.n, cs.m}, DType::BF16), xa({cs.n, 8}, DType::F32);
        ops::lora_linear(x.dev, w.dev, Tensor(), a.dev, b.dev, scale, drop, y.tensor, xa.tensor);
        DeviceOut dx({cs.n, cs.k}, DType::BF16), da({8, cs.k}, DType::F32), db({cs.m, 8}, DType::F32);
        da.set(da0);
        db.set(Tensor::zeros({cs.m, 8}, DType::F32));
        ops::lora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, xa.tensor, scale, drop, dx.tensor, da.tensor,
                                  db.tensor);
        ops::cuda::set_lora_x_mma(true);
        return Run{xa.fetch(), da.fetch(), y.fetch(), dx.fetch()};
      };
      const Run mma = run(true), again = run(true), cores = run(false);
      expect_bit_equal(again.xa, mma.xa, "xa, second call");
      expect_bit_equal(again.da, mma.da, "da, second call");
      expect_close(mma.xa, cores.xa, 1e-5, "xa tensor cores vs CUDA cores");
      expect_close(mma.da, cores.da, 1e-5, "da tensor cores vs CUDA cores");
      expect_close(mma.y, cores.y, tol_for(DType::BF16), "y");
      expect_close(mma.dx, cores.dx, tol_for(DType::BF16), "dx");
    }
  }
}

// The r 8 rank updates and swiglu_lora with each lane's factor columns in registers and the rows through the cp.async
// ring (lora_ring.cu) against the shared-memory forms (set_lora_factor_in_registers(false)): the same per-element
// arithmetic, so the same bits: lora_linear's y (B product), the backward's dx and da (dropout drawn, or the keep-bits
// cache: the ring reads it where k % 32 == 0, here K = 96 and 352), add_lora_residual and swiglu_lora; odd rows
// (several 256-row blocks, items of 4 rows cut by n), widths not a multiple of 128; F32 / BF16 / F16.
TEST(OpsCudaMatmul, LoraFactorInRegistersIsTheSharedMemoryForm) {
  const BInGemmOff b_in_gemm_off;
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k, m; };
  const Case cases[] = {{70, 96, 1032}, {333, 40, 200}, {600, 264, 520}, {1, 16, 8}, {257, 136, 72}, {301, 352, 136}};
  uint32_t seed = 13100;
  auto host = [](const Tensor& t) { return t.to(Device::cpu()); };
  for (const Case& cs : cases) {
    for (DType act : {DType::F32, DType::BF16, DType::F16}) {
      for (int cached = 0; cached < 2; ++cached) {
        SCOPED_TRACE(fmt::format("N={} K={} M={} act={} cached={}", cs.n, cs.k, cs.m, name(act), cached));
        const float scale = 4.0f;
        auto [x, w, a, b] = lora_operands(cs.n, cs.k, cs.m, 8, act, seed);
        auto [x2, w2, a2, b2] = lora_operands(cs.n, cs.k, cs.m, 8, act, seed);
        Input dy = make_input({cs.n, cs.m}, act, ++seed);
        Input res = make_input({cs.n, cs.m}, act, ++seed);
        const Tensor da0 = random_tensor({8, cs.k}, DType::F32, ++seed);
        struct Run { Tensor y, xa, dx, da, db, yr, gate, up, out; };
        auto run = [&](bool registers) {
          ops::cuda::set_lora_factor_in_registers(registers);
          ops::Dropout drop{0.1f, 0x5EEDull + seed};
          if (cached != 0) drop.keep_bits = Tensor::zeros({cs.n, cs.k / 8}, DType::U8).to(Device::cuda());
          DeviceOut y({cs.n, cs.m}, act), xa({cs.n, 8}, DType::F32);
          ops::lora_linear(x.dev, w.dev, Tensor(), a.dev, b.dev, scale, drop, y.tensor, xa.tensor);
          DeviceOut dx({cs.n, cs.k}, act), da({8, cs.k}, DType::F32), db({cs.m, 8}, DType::F32);
          da.set(da0);
          db.set(Tensor::zeros({cs.m, 8}, DType::F32));
          ops::lora_linear_backward(dy.dev, x.dev, w.dev, a.dev, b.dev, xa.tensor, scale, drop, dx.tensor, da.tensor,
                                    db.tensor);
          // add_lora_residual on a copy of y, then swiglu_lora with y as gate and a second linear as up.
          Tensor yr = Tensor::empty({cs.n, cs.m}, act, Device::cuda());
          yr.copy_from(y.tensor);
          ops::add_lora_residual(yr, res.dev, ops::LoraBProduct{xa.tensor, b.dev}, scale);
          Tensor gate = Tensor::empty({cs.n, cs.m}, act, Device::cuda());
          Tensor up = Tensor::empty({cs.n, cs.m}, act, Device::cuda());
          Tensor xa2 = Tensor::empty({cs.n, 8}, DType::F32, Device::cuda());
          ops::lora_linear(x.dev, w.dev, Tensor(), a.dev, b.dev, scale, {}, gate, xa.tensor, false, false);
          ops::lora_linear(x2.dev, w2.dev, Tensor(), a2.dev, b2.dev, scale, {}, up, xa2, false, false);
          Tensor out = Tensor::empty({cs.n, cs.m}, act, Device::cuda());
          ops::swiglu_lora(gate, up, ops::LoraBProduct{xa.tensor, b.dev}, ops::LoraBProduct{xa2, b2.dev}, scale, out);
          ops::cuda::set_lora_factor_in_registers(true);
          return Run{y.fetch(), xa.fetch(), dx.fetch(), da.fetch(), db.fetch(), host(yr), host(gate), host(up),
                     host(out)};
        };
        const Run regs = run(true), shared = run(false);
        expect_bit_equal(regs.y, shared.y, "y");
        expect_bit_equal(regs.dx, shared.dx, "dx");
        expect_bit_equal(regs.da, shared.da, "da");
        expect_bit_equal(regs.db, shared.db, "db");
        expect_bit_equal(regs.yr, shared.yr, "add_lora_residual");
        expect_bit_equal(regs.gate, shared.gate, "swiglu_lora gate");
        expect_bit_equal(regs.up, shared.up, "swiglu_lora up");
        expect_bit_equal(regs.out, shared.out, "swiglu_lora out");
      }
    }
  }
}

// Worst relative-norm errors seen above (runs after them: tests run in definition order).
// lora_xa_shared / lora_linear_backward_shared (several LoRA linears over one x: the xa and da passes of 2 or 3 in
// one launch, lora.cu launch_lora_xa_group / launch_lora_da_group; the dx terms in one pass, lora_ring.cu
// launch_lora_rank_update_group) against the single ops: the same bits for xa, the keep bits, da and db, and for dx
// (summed over the jobs in ops.h's order: the frozen products first, then the terms; made from the single ops as
// their calls with a = 0, which add exact zero terms, then with w = 0, which add exact zero products), with the dx
// terms grouped and one pass per job; with a dropout (each job its own seed and keep-bits cache, as the training step)
// and without; BF16 (the tensor-core x passes, grouped) and F32 (the CUDA-core kernels, one launch each); output
// widths of a layer's q, k, v (one wide, two narrow) and gate, up; odd rows, one and several 256-column tiles.
TEST(OpsCudaMatmul, LoraSharedXPassesAreTheSingleOps) {
  const BInGemmOff b_in_gemm_off;
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  struct Case { int64_t n, k; std::vector<int64_t> ms; };
  const Case cases[] = {{4100, 264, {40, 8, 8}}, {333, 3592, {24, 16}}, {77, 520, {264, 24, 8}}, {1, 16, {16, 8}},
                        {2050, 3584, {3584, 512, 512}}};
  uint32_t seed = 14100;
  const float scale = 4.0f;
  for (const Case& cs : cases) {
    for (DType act : {DType::BF16, DType::F32}) {
      for (float p : {0.0f, 0.1f}) {
        SCOPED_TRACE(fmt::format("N={} K={} jobs={} act={} p={}", cs.n, cs.k, cs.ms.size(), name(act), p));
        const Input x = make_input({cs.n, cs.k}, act, ++seed);
        struct Job { Input w, a, b, dy; Tensor da0, db0; uint64_t seed; Tensor w0, a0; };
        std::vector<Job> jobs;
        for (int64_t m : cs.ms) {
          jobs.push_back({make_weight({m, cs.k}, DType::BF16, ++seed), make_weight({8, cs.k}, DType::F32, ++seed, -0.5f, 0.5f),
                          make_weight({m, 8}, DType::F32, ++seed, -0.5f, 0.5f), make_input({cs.n, m}, act, ++seed),
                          random_tensor({8, cs.k}, DType::F32, ++seed), random_tensor({m, 8}, DType::F32, ++seed),
                          0xC0DEull + seed});
          jobs.back().w0 = Tensor::zeros({m, cs.k}, DType::BF16).to(Device::cuda());
          jobs.back().a0 = Tensor::zeros({8, cs.k}, DType::F32).to(Device::cuda());
        }
        auto dropout_of = [&](const Job& j) {
          ops::Dropout d{p, j.seed};
          if (p > 0.0f) d.keep_bits = Tensor::zeros({cs.n, cs.k / 8}, DType::U8).to(Device::cuda());
          return d;
        };
        struct Run { std::vector<Tensor> xa, bits, da, db; Tensor dx; };
        auto run = [&](bool shared, bool grouped) {
          ops::cuda::set_lora_group_dx_terms(grouped);
          Run out;
          std::vector<ops::Dropout> drops;
          std::vector<DeviceOut> xas, das, dbs;
          xas.reserve(jobs.size());
          das.reserve(jobs.size());
          dbs.reserve(jobs.size());
          for (const Job& j : jobs) {
            drops.push_back(dropout_of(j));
            xas.emplace_back(Shape{cs.n, 8}, DType::F32);
          }
          if (shared) {
            std::vector<ops::LoraSharedXa> xa_jobs;
            for (size_t j = 0; j < jobs.size(); ++j) xa_jobs.push_back({jobs[j].a.dev, drops[j], xas[j].tensor});
            ops::lora_xa_shared(x.dev, xa_jobs);
          } else {
            for (size_t j = 0; j < jobs.size(); ++j) ops::lora_xa(x.dev, jobs[j].a.dev, drops[j], xas[j].tensor);
          }
          DeviceOut dx({cs.n, cs.k}, act);
          for (const Job& j : jobs) {
            das.emplace_back(Shape{8, cs.k}, DType::F32);
            dbs.emplace_back(Shape{j.w.dev.size(0), 8}, DType::F32);
            das.back().set(j.da0);
            dbs.back().set(j.db0);
          }
          if (shared) {
            std::vector<ops::LoraSharedBackward> back;
            for (size_t j = 0; j < jobs.size(); ++j) {
              back.push_back({jobs[j].dy.dev, jobs[j].w.dev, jobs[j].a.dev, jobs[j].b.dev, xas[j].tensor, drops[j],
                              das[j].tensor, dbs[j].tensor, Tensor()});
            }
            ops::lora_linear_backward_shared(x.dev, back, scale, dx.tensor);
          } else {
            for (size_t j = 0; j < jobs.size(); ++j) {  // the frozen products (zero terms), da and db
              ops::lora_linear_backward(jobs[j].dy.dev, x.dev, jobs[j].w.dev, jobs[j].a0, jobs[j].b.dev,
                                        xas[j].tensor, scale, drops[j], dx.tensor, das[j].tensor, dbs[j].tensor, j > 0);
            }
            for (size_t j = 0; j < jobs.size(); ++j) {  // the terms (zero products); da and db again, not kept
              Tensor da_spare = das[j].tensor.clone(), db_spare = dbs[j].tensor.clone();
              ops::lora_linear_backward(jobs[j].dy.dev, x.dev, jobs[j].w0, jobs[j].a.dev, jobs[j].b.dev, xas[j].tensor,
                                        scale, drops[j], dx.tensor, da_spare, db_spare, true);
            }
          }
          for (size_t j = 0; j < jobs.size(); ++j) {
            out.xa.push_back(xas[j].fetch());
            out.bits.push_back(p > 0.0f ? drops[j].keep_bits.to(Device::cpu()) : Tensor());
            out.da.push_back(das[j].fetch());
            out.db.push_back(dbs[j].fetch());
          }
          out.dx = dx.fetch();
          return out;
        };
        const Run single = run(false, true);
        for (bool grouped : {true, false}) {
          SCOPED_TRACE(grouped ? "dx terms grouped" : "dx terms one pass each");
          const Run shared = run(true, grouped);
          for (size_t j = 0; j < jobs.size(); ++j) {
            SCOPED_TRACE(fmt::format("job {}", j));
            expect_bit_equal(shared.xa[j], single.xa[j], "xa");
            if (p > 0.0f) expect_bit_equal(shared.bits[j], single.bits[j], "keep bits");
            expect_bit_equal(shared.da[j], single.da[j], "da");
            expect_bit_equal(shared.db[j], single.db[j], "db");
          }
          expect_bit_equal(shared.dx, single.dx, "dx");
        }
        ops::cuda::set_lora_group_dx_terms(true);
      }
    }
  }
}

TEST(OpsCudaMatmul, Summary) {
  std::printf("%-44s %s\n", "op activation-dtype output", "worst ||out-ref||/||ref||");
  for (const auto& [key, err] : worst_errors()) std::printf("%-44s %.3e\n", key.c_str(), err);
}

// Timings of model-sized calls (Qwen2.5-7B shapes, 8192 tokens, BF16); runs only with SWIFT_GPU_BENCH=1.
TEST(OpsCudaMatmul, BenchModelShapes) {
  const BInGemmOff b_in_gemm_off;
  if (std::getenv("SWIFT_GPU_BENCH") == nullptr) GTEST_SKIP() << "set SWIFT_GPU_BENCH=1 to time model-sized calls";
  ASSERT_TRUE(have_device());
  const Device d = Device::cuda();
  auto time = [](auto&& fn) { return time_ms(fn, 5); };
  const int64_t n = 8192, c = 3584, f = 18944, vocab = 152064, r = 8;
  auto rnd = [&](const Shape& s, DType t, uint32_t seed) { return random_tensor(s, t, seed, -0.05f, 0.05f).to(d); };
  Tensor x = rnd({n, c}, DType::BF16, 1), w = rnd({f, c}, DType::BF16, 2), y = Tensor::empty({n, f}, DType::BF16, d);
  Tensor dy = rnd({n, f}, DType::BF16, 3), dx = Tensor::empty({n, c}, DType::BF16, d);
  Tensor dw = Tensor::zeros({f, c}, DType::F32, d), none;
  const double gemm_flop = 2.0 * n * c * f;
  double ms = time([&] { ops::linear(x, w, none, y); });
  std::printf("linear bf16 (%ld x %ld) x (%ld x %ld)^T: %.3f ms, %.0f TFLOP/s\n", n, c, f, c, ms, gemm_flop / ms / 1e9);
  ms = time([&] { ops::linear_backward(dy, x, w, dx, none, none); });
  std::printf("linear_backward dx only: %.3f ms, %.0f TFLOP/s\n", ms, gemm_flop / ms / 1e9);
  ms = time([&] { ops::linear_backward(dy, x, w, none, dw, none); });
  std::printf("linear_backward dw (F32 +=): %.3f ms, %.0f TFLOP/s\n", ms, gemm_flop / ms / 1e9);
  Tensor a = rnd({r, c}, DType::F32, 4), b = rnd({f, r}, DType::F32, 5), xa = Tensor::empty({n, r}, DType::F32, d);
  Tensor da = Tensor::zeros({r, c}, DType::F32, d), db = Tensor::zeros({f, r}, DType::F32, d);
  const ops::Dropout drop{0.05f, 42};
  ms = time([&] { ops::lora_linear(x, w, none, a, b, 4.0f, drop, y, xa); });
  std::printf("lora_linear r=8 p=0.05 (base + adapter): %.3f ms\n", ms);
  ms = time([&] { ops::lora_linear_backward(dy, x, w, a, b, xa, 4.0f, drop, dx, da, db); });
  std::printf("lora_linear_backward (dx, da, db): %.3f ms\n", ms);
  Tensor head = rnd({vocab, c}, DType::BF16, 6), dhead = Tensor::zeros({vocab, c}, DType::F32, d);
  Tensor dhidden = Tensor::empty({n, c}, DType::BF16, d);
  std::vector<int32_t> lab(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) lab[static_cast<size_t>(i)] = i % 4 == 0 ? -100 : static_cast<int32_t>((i * 7919) % vocab);
  const Tensor labels = Tensor::from_i32({n}, lab).to(d);
  const double head_flop = 2.0 * 0.75 * n * c * vocab;
  ms = time([&] { ops::cross_entropy(x, head, labels, 1.0f / n, none, none); });
  std::printf("cross_entropy loss only (6144 valid tokens, V=152064): %.3f ms, %.0f TFLOP/s\n", ms, head_flop / ms / 1e9);
  ms = time([&] { ops::cross_entropy(x, head, labels, 1.0f / n, dhidden, dhead); });
  std::printf("cross_entropy + dhidden + dhead: %.3f ms, %.0f TFLOP/s (3 head-sized products)\n", ms,
              3 * head_flop / ms / 1e9);
}

// The linears of a Qwen2.5-0.5B full fine-tuning step one by one (16,384 tokens, BF16, q / k / v with a bias; dx
// accumulating as the model's q / k / v and gate / up accumulate; dw F32 +=), so the step's GEMM time can be split by
// shape and set against torch's products on the same shapes (scripts/bench/peer_gemm_shapes.py). Runs only with
// SWIFT_GPU_BENCH=1.
TEST(OpsCudaMatmul, BenchQwen05bLinears) {
  if (std::getenv("SWIFT_GPU_BENCH") == nullptr) GTEST_SKIP() << "set SWIFT_GPU_BENCH=1 to time model-sized calls";
  ASSERT_TRUE(have_device());
  const Device d = Device::cuda();
  const int64_t n = 16384;
  struct Shape2 { const char* name; int64_t in, out; bool bias, accumulate_dx; };
  const Shape2 shapes[] = {{"q", 896, 896, true, false},     {"k", 896, 128, true, true},
                           {"v", 896, 128, true, true},      {"o", 896, 896, false, false},
                           {"gate", 896, 4864, false, false}, {"up", 896, 4864, false, true},
                           {"down", 4864, 896, false, false}};
  auto rnd = [&](const Shape& s, DType t, uint32_t seed) { return random_tensor(s, t, seed, -0.05f, 0.05f).to(d); };
  double total = 0.0;
  std::printf("%-5s %10s %8s %10s %8s %10s %8s\n", "linear", "fwd ms", "TFLOP/s", "dx ms", "TFLOP/s", "dw ms", "TFLOP/s");
  for (const Shape2& sh : shapes) {
    Tensor x = rnd({n, sh.in}, DType::BF16, 1), w = rnd({sh.out, sh.in}, DType::BF16, 2);
    Tensor bias = sh.bias ? rnd({sh.out}, DType::BF16, 3) : Tensor();
    Tensor y = Tensor::empty({n, sh.out}, DType::BF16, d), dy = rnd({n, sh.out}, DType::BF16, 4);
    Tensor dx = rnd({n, sh.in}, DType::BF16, 5), dw = Tensor::zeros({sh.out, sh.in}, DType::F32, d), none;
    const double flop = 2.0 * n * sh.in * sh.out;
    const double fwd = time_ms([&] { ops::linear(x, w, bias, y); }, 5);
    const double bdx = time_ms([&] { ops::linear_backward(dy, x, w, dx, none, none, sh.accumulate_dx); }, 5);
    const double bdw = time_ms([&] { ops::linear_backward(dy, x, w, none, dw, none); }, 5);
    Tensor dbias = Tensor::zeros({sh.out}, DType::F32, d);
    const double bdb = sh.bias ? time_ms([&] { ops::linear_backward(dy, x, w, none, none, dbias); }, 5) : 0.0;
    total += fwd + bdx + bdw + bdb;
    std::printf("%-5s %10.4f %8.0f %10.4f %8.0f %10.4f %8.0f", sh.name, fwd, flop / fwd / 1e9, bdx, flop / bdx / 1e9,
                bdw, flop / bdw / 1e9);
    if (sh.bias) std::printf("   dbias %.4f ms (%.0f GB/s)", bdb, 2.0 * n * sh.out / bdb / 1e6);
    std::printf("\n");
  }
  std::printf("per layer %.3f ms, x 24 layers %.1f ms\n", total, 24 * total);
}

// ---- caching allocator -------------------------------------------------------------------------------------------
TEST(CudaAllocator, ReusesFreedBlocksAndExplainsOutOfMemory) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const ops::cuda::AllocatorStats before = ops::cuda::allocator_stats(0);
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({3 * 1000 * 1000 + 7}, DType::F32, Device::cuda(), MemoryCategory::Activations);
    first = t.raw();
  }
  Tensor again = Tensor::empty({3 * 1000 * 1000 + 7}, DType::F32, Device::cuda(), MemoryCategory::Activations);
  const ops::cuda::AllocatorStats after = ops::cuda::allocator_stats(0);
  if (after.caching) {
    EXPECT_EQ(again.raw(), first) << "a freed block of the same size class is reused";
    EXPECT_GT(after.cache_hits, before.cache_hits);
    EXPECT_GE(after.reserved_bytes, static_cast<int64_t>(again.nbytes()));
  }
  // The data path still works on a reused block.
  Tensor host = random_tensor({3 * 1000 * 1000 + 7}, DType::F32, 9);
  again.copy_from(host);
  EXPECT_TRUE(bit_equal(again.to(Device::cpu()), host));
  // Accounting is by the bytes asked for, not the size class.
  const int64_t acts = memory_stats(1).current[static_cast<int>(MemoryCategory::Activations)];
  {
    Tensor extra = Tensor::empty({1001}, DType::F32, Device::cuda(), MemoryCategory::Activations);
    EXPECT_EQ(memory_stats(1).current[static_cast<int>(MemoryCategory::Activations)] - acts, 4004);
  }
  EXPECT_EQ(memory_stats(1).current[static_cast<int>(MemoryCategory::Activations)], acts);
  // An absurd request fails with the explanatory message, and the allocator keeps working.
  EXPECT_TRUE(throws_error(
      [&] { Tensor::empty({int64_t{1} << 48}, DType::F32, Device::cuda(), MemoryCategory::Activations); },
      {"CUDA out of memory allocating", "MiB free of", "activations", "weights", "--max_length",
       "--gradient_checkpointing"}));
  Tensor small = Tensor::zeros({17}, DType::F32, Device::cuda());
  EXPECT_EQ(small.to(Device::cpu()).item(16), 0.0);
  ops::cuda::empty_cache(0);
  EXPECT_EQ(ops::cuda::allocator_stats(0).cached_bytes, 0);
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
