// tests/gpu/test_cuda_attention.cpp — attention and attention_backward on CUDA against the CPU references
// (ops::ref, double precision): F32 (generic fp32 kernels), BF16 and F16 through the default path (cuDNN's fused
// attention on sm_90+, see test_cuda_attention_cudnn.cpp) and through our kernels (SWIFT_ATTENTION=flash2:
// tensor-core kernels for D = 64/128, the generic kernel for other D), packed variable-length batches with odd
// lengths, GQA ratios 1/2/7, windows. Also prints (does not assert) the time and TFLOP/s of a T = 8192
// (4 x 2048), Hq 28, Hkv 4, D 128 BF16 case (bench/bench_attention compares the paths).
//
// Invariants:
//  - Fresh random inputs per case (seeded); BF16 results are compared with the reference fed the same
//    bf16-rounded inputs, computed in F32/double.
//  - Device outputs live inside a NaN-filled buffer with 64 NaN elements of padding on each side: every output
//    element must be written (finite) and the padding must stay untouched.
//  - Tolerances (written once, with why): F32 rel-norm 2e-5, max-abs 2e-5 * (1 + max|ref|) — fp32 sums vs
//    double; BF16 out/dq/dk/dv rel-norm 1.5e-2 and max-abs 4e-2 * max|ref| — bf16 storage of the result
//    (2^-9 relative) plus bf16 P / dS operands of the tensor-core products (measured ~2e-3 .. 3.5e-3 rel);
//    F16 (10 mantissa bits, 8x finer roundings than bf16's 7) BF16's bounds / 8 rounded up: rel-norm 2e-3,
//    max-abs 5e-3 * max|ref|; lse (always F32) abs 2e-5 (F32) and 2e-3 (BF16, F16). The relative norm is
//    skipped when the reference is ~0.
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gpu/attention_test_util.h"
#include "ops/backends.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

bool have_device() {
  ops::init_backends();
  return ops::cuda_device_count() > 0;
}


void expect_close(const char* what, DType dtype, const Tensor& got, const Tensor& ref) {
  const Metrics m = compare(got, ref);
  const bool f32 = dtype == DType::F32, f16 = dtype == DType::F16;
  // F16 (10 mantissa bits) rounds P, dS and the outputs 8x finer than BF16 (7): BF16's bounds / 8, rounded up.
  const double rel_tol = f32 ? 2e-5 : (f16 ? 2e-3 : 1.5e-2);
  // The absolute floor covers references that are exactly zero (a single-token sequence has dq = dk = 0: the
  // kernels' dP - delta cancels to rounding level, ~1e-7, instead of exactly).
  const double abs_tol = f32 ? 2e-5 * (1.0 + m.max_ref) : (f16 ? 5e-3 : 4e-2) * m.max_ref + 1e-5;
  if (m.max_ref > 1e-3) {
    EXPECT_LE(m.rel, rel_tol) << what << " relative norm error";
  }
  EXPECT_LE(m.max_abs, abs_tol) << what << " max abs error (max |ref| " << m.max_ref << ")";
  std::printf("    %-4s %s: rel %.2e  max-abs %.2e  (max|ref| %.2e)\n", dtype_name(dtype), what, m.rel, m.max_abs,
              m.max_ref);
}

void expect_lse_close(DType dtype, const Tensor& got, const Tensor& ref) {
  const Metrics m = compare(got, ref);
  const double tol = dtype == DType::F32 ? 2e-5 : 2e-3;
  EXPECT_LE(m.max_abs, tol) << "lse max abs error";
  std::printf("    %-4s lse: max-abs %.2e\n", dtype_name(dtype), m.max_abs);
}

struct Case {
  std::vector<int32_t> lens;
  int64_t hq, hkv, d, window;
};

Tensor cu_seqlens_of(const std::vector<int32_t>& lens) {
  std::vector<int32_t> cu{0};
  for (int32_t l : lens) cu.push_back(cu.back() + l);
  return Tensor::from_i32({static_cast<int64_t>(cu.size())}, cu);
}

// Random activations of `dtype` (so BF16 inputs are exactly representable) and their F32 copy for the reference.
std::pair<Tensor, Tensor> random_pair(const Shape& shape, DType dtype, uint32_t seed, float lo, float hi) {
  Tensor t = random_tensor(shape, dtype, seed, lo, hi);
  return {t, dtype == DType::F32 ? t : t.to_dtype(DType::F32)};
}

void run_case(const Case& c, DType dtype, uint32_t seed) {
  int64_t tokens = 0;
  for (int32_t l : c.lens) tokens += l;
  std::string lens;
  for (int32_t l : c.lens) lens += std::to_string(l) + " ";
  SCOPED_TRACE(std::string(dtype_name(dtype)) + " lens [" + lens + "] Hq " + std::to_string(c.hq) + " Hkv " +
               std::to_string(c.hkv) + " D " + std::to_string(c.d) + " window " + std::to_string(c.window));
  std::printf("  case %s lens [%s] Hq %lld Hkv %lld D %lld window %lld\n", dtype_name(dtype), lens.c_str(),
              static_cast<long long>(c.hq), static_cast<long long>(c.hkv), static_cast<long long>(c.d),
              static_cast<long long>(c.window));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));
  const Shape qs{tokens, c.hq, c.d}, ks{tokens, c.hkv, c.d};
  auto [q, q32] = random_pair(qs, dtype, seed + 1, -2.0f, 2.0f);
  auto [k, k32] = random_pair(ks, dtype, seed + 2, -2.0f, 2.0f);
  auto [v, v32] = random_pair(ks, dtype, seed + 3, -1.0f, 1.0f);
  auto [dout, dout32] = random_pair(qs, dtype, seed + 4, -1.0f, 1.0f);
  const Tensor cu = cu_seqlens_of(c.lens);

  // forward
  Tensor ref_out = Tensor::empty(qs, DType::F32), ref_lse = Tensor::empty({c.hq, tokens}, DType::F32);
  ops::ref::attention(q32, k32, v32, cu, scale, c.window, ref_out, ref_lse);
  const Tensor dq_ = q.to(Device::cuda()), dk_ = k.to(Device::cuda()), dv_ = v.to(Device::cuda());
  const Tensor dcu = cu.to(Device::cuda());
  DeviceOut out(qs, dtype), lse({c.hq, tokens}, DType::F32);
  ops::attention(dq_, dk_, dv_, dcu, scale, c.window, out.tensor, lse.tensor);
  const Tensor got_out = out.result("out");
  expect_close("out", dtype, got_out, ref_out);
  expect_lse_close(dtype, lse.result("lse"), ref_lse);

  // forward without lse (inference) writes the same out
  DeviceOut out2(qs, dtype);
  Tensor no_lse;
  ops::attention(dq_, dk_, dv_, dcu, scale, c.window, out2.tensor, no_lse);
  EXPECT_TRUE(bit_equal(out2.result("out (no lse)"), got_out)) << "forward without lse differs";

  // backward, fed the device forward's out and lse
  Tensor ref_dq = Tensor::empty(qs, DType::F32), ref_dk = Tensor::empty(ks, DType::F32);
  Tensor ref_dv = Tensor::empty(ks, DType::F32);
  ops::ref::attention_backward(dout32, q32, k32, v32, ref_out, ref_lse, cu, scale, c.window, ref_dq, ref_dk, ref_dv);
  const Tensor ddout = dout.to(Device::cuda());
  DeviceOut gq(qs, dtype), gk(ks, dtype), gv(ks, dtype);
  ops::attention_backward(ddout, dq_, dk_, dv_, out.tensor, lse.tensor, dcu, scale, c.window, gq.tensor, gk.tensor,
                          gv.tensor);
  const Tensor got_dq = gq.result("dq"), got_dk = gk.result("dk"), got_dv = gv.result("dv");
  expect_close("dq", dtype, got_dq, ref_dq);
  expect_close("dk", dtype, got_dk, ref_dk);
  expect_close("dv", dtype, got_dv, ref_dv);

  // deterministic: a second backward is bit-identical
  DeviceOut gq2(qs, dtype), gk2(ks, dtype), gv2(ks, dtype);
  ops::attention_backward(ddout, dq_, dk_, dv_, out.tensor, lse.tensor, dcu, scale, c.window, gq2.tensor,
                          gk2.tensor, gv2.tensor);
  EXPECT_TRUE(bit_equal(gq2.result("dq 2"), got_dq)) << "dq not deterministic";
  EXPECT_TRUE(bit_equal(gk2.result("dk 2"), got_dk)) << "dk not deterministic";
  EXPECT_TRUE(bit_equal(gv2.result("dv 2"), got_dv)) << "dv not deterministic";
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {{1}, 2, 1, 64, 0},
      {{7, 63, 65}, 4, 2, 64, 0},
      {{130, 1, 65}, 7, 1, 128, 0},          // GQA 7
      {{200, 37}, 4, 4, 128, 17},            // small window
      {{130, 70, 129}, 6, 3, 64, 64},        // window = tile size
      {{300}, 2, 1, 128, 100},               // window spanning tiles
      {{5, 1, 3, 64, 2}, 2, 2, 64, 3},       // many short sequences
      {{67, 129}, 4, 2, 80, 0},              // odd D (generic kernel)
      {{33, 7}, 2, 1, 24, 5},                // small odd D with a window
      {{160, 97}, 14, 2, 128, 0},            // GQA 7 over several tiles
  };
  return all;
}

TEST(OpsCudaAttention, F32MatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  uint32_t seed = 100;
  for (const Case& c : cases()) run_case(c, DType::F32, seed += 10);
}

TEST(OpsCudaAttention, BF16MatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  uint32_t seed = 500;
  for (const Case& c : cases()) run_case(c, DType::BF16, seed += 10);
}

// Our kernels for the activations cuDNN would otherwise take (SWIFT_ATTENTION=flash2 for the test's duration).
struct Flash2Only {
  Flash2Only() { setenv("SWIFT_ATTENTION", "flash2", 1); }
  ~Flash2Only() { unsetenv("SWIFT_ATTENTION"); }
};

TEST(OpsCudaAttention, BF16Flash2MatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const Flash2Only flash2;
  uint32_t seed = 1500;
  for (const Case& c : cases()) run_case(c, DType::BF16, seed += 10);
}

TEST(OpsCudaAttention, F16Flash2MatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const Flash2Only flash2;
  uint32_t seed = 1900;
  for (const Case& c : cases()) run_case(c, DType::F16, seed += 10);
}

// F16 through the default path (F16Flash2MatchesReference: the tensor-core kernels' f16 mma path for D 64 / 128
// and the generic kernel for other D). Inputs as BF16's
// (q, k in [-2, 2]): in fp16's range. lse keeps BF16's bound (fp32 math on exact 16-bit inputs either way).
TEST(OpsCudaAttention, F16MatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  uint32_t seed = 900;
  for (const Case& c : cases()) run_case(c, DType::F16, seed += 10);
}

// Prints (does not assert) forward and backward time for the model-sized shape; checks only that it runs.
TEST(OpsCudaAttention, BF16TimingT8192Hq28Hkv4D128) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const int64_t seqs = 4, len = 2048, tokens = seqs * len, hq = 28, hkv = 4, d = 128;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const Tensor q = random_tensor({tokens, hq, d}, DType::BF16, 1, -2.0f, 2.0f).to(Device::cuda());
  const Tensor k = random_tensor({tokens, hkv, d}, DType::BF16, 2, -2.0f, 2.0f).to(Device::cuda());
  const Tensor v = random_tensor({tokens, hkv, d}, DType::BF16, 3).to(Device::cuda());
  const Tensor dout = random_tensor({tokens, hq, d}, DType::BF16, 4).to(Device::cuda());
  const Tensor cu = cu_seqlens_of(std::vector<int32_t>(seqs, static_cast<int32_t>(len))).to(Device::cuda());
  Tensor out = Tensor::empty({tokens, hq, d}, DType::BF16, Device::cuda());
  Tensor lse = Tensor::empty({hq, tokens}, DType::F32, Device::cuda());
  Tensor dq = Tensor::empty({tokens, hq, d}, DType::BF16, Device::cuda());
  Tensor dk = Tensor::empty({tokens, hkv, d}, DType::BF16, Device::cuda());
  Tensor dv = Tensor::empty({tokens, hkv, d}, DType::BF16, Device::cuda());
  cudaStream_t st = ops::cuda::stream(0);
  cudaEvent_t e0, e1;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  auto time_ms = [&](auto&& fn) {
    for (int i = 0; i < 3; ++i) fn();
    std::vector<float> ms;
    for (int i = 0; i < 10; ++i) {
      EXPECT_EQ(cudaEventRecord(e0, st), cudaSuccess);
      fn();
      EXPECT_EQ(cudaEventRecord(e1, st), cudaSuccess);
      EXPECT_EQ(cudaEventSynchronize(e1), cudaSuccess);
      float t = 0;
      EXPECT_EQ(cudaEventElapsedTime(&t, e0, e1), cudaSuccess);
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const double fwd = time_ms([&] { ops::attention(q, k, v, cu, scale, 0, out, lse); });
  const double bwd = time_ms([&] { ops::attention_backward(dout, q, k, v, out, lse, cu, scale, 0, dq, dk, dv); });
  EXPECT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  // Causal FLOPs: pairs (i, j <= i) per sequence and head; forward 2 products (4 D flops per pair), backward 5
  // (10 D flops per pair, the usual flash-attention count; our deterministic dq pass recomputes S and dP).
  const double pairs = static_cast<double>(seqs) * hq * (len * (len + 1) / 2);
  const double fwd_flops = 4.0 * d * pairs, bwd_flops = 10.0 * d * pairs;
  std::printf("  attention bf16 T=%lld (4 x 2048) Hq=%lld Hkv=%lld D=%lld causal: forward %.3f ms (%.1f TFLOP/s), "
              "backward %.3f ms (%.1f TFLOP/s), total %.3f ms\n",
              static_cast<long long>(tokens), static_cast<long long>(hq), static_cast<long long>(hkv),
              static_cast<long long>(d), fwd, fwd_flops / fwd * 1e-9, bwd, bwd_flops / bwd * 1e-9, fwd + bwd);
  for (int w : {512}) {
    const double fw = time_ms([&] { ops::attention(q, k, v, cu, scale, w, out, lse); });
    const double bw = time_ms([&] { ops::attention_backward(dout, q, k, v, out, lse, cu, scale, w, dq, dk, dv); });
    std::printf("  same with window %d: forward %.3f ms, backward %.3f ms\n", w, fw, bw);
  }
  EXPECT_TRUE(all_finite(lse.to(Device::cpu())));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
