// tests/gpu/test_cuda_attention_cudnn.cpp — the cuDNN fused-attention path of ops::attention /
// ops::attention_backward (src/ops/cuda/attention_cudnn.cpp) against the CPU references (ops::ref, double
// precision): BF16 and F16, packed variable-length batches with odd lengths (including 1), head dims 64 and 128,
// GQA 1:1, 2:1, 4:1 and 7:1 (Qwen2.5-7B: 28 query heads, 4 kv heads, D 128), sliding windows, batches that the
// plan-count bucketing pads with empty sequences (B 3, 5, 9 -> 4, 8, 16), batches of one bucket length (the dense
// graphs); forward out + lse,
// backward dq / dk / dv, and that the backward is bit-reproducible. Also: SWIFT_ATTENTION=flash2 and F32
// activations select our kernels.
//
// Invariants:
//  - Every case asserts that cuDNN ran it (the path counters of attention_cudnn.h), printing cuDNN's reason when
//    it declined, so a silent fallback cannot pass for the cuDNN path. Needs a Hopper (sm_90+) device.
//  - Device outputs live inside a NaN-filled buffer with 64 NaN elements of padding on each side: every output
//    element must be written (finite) and the padding must stay untouched.
//  - Tolerances (those of test_cuda_attention.cpp, for the same roundings: bf16 / f16 storage of the results and
//    of the P / dS operands of the tensor-core products; cuDNN also rounds each query head's dK / dV share to the
//    io dtype before the kv-group sum, well inside them): BF16 rel-norm 1.5e-2 and max-abs 4e-2 * max|ref|;
//    F16 rel-norm 2e-3 and max-abs 5e-3 * max|ref|; lse (F32) abs 2e-3.
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/memory.h"
#include "gpu/attention_test_util.h"
#include "ops/backends.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

bool have_hopper() {
  ops::init_backends();
  if (ops::cuda_device_count() == 0) return false;
  int major = 0;
  return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess && major >= 9;
}


void expect_close(const char* what, DType dtype, const Tensor& got, const Tensor& ref) {
  const Metrics m = compare(got, ref);
  const bool f16 = dtype == DType::F16;
  const double rel_tol = f16 ? 2e-3 : 1.5e-2;
  const double abs_tol = (f16 ? 5e-3 : 4e-2) * m.max_ref + 1e-5;  // + floor: exact-zero references (length 1)
  if (m.max_ref > 1e-3) {
    EXPECT_LE(m.rel, rel_tol) << what << " relative norm error";
  }
  EXPECT_LE(m.max_abs, abs_tol) << what << " max abs error (max |ref| " << m.max_ref << ")";
  std::printf("    %-4s %s: rel %.2e  max-abs %.2e  (max|ref| %.2e)\n", dtype_name(dtype), what, m.rel, m.max_abs,
              m.max_ref);
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

std::pair<Tensor, Tensor> random_pair(const Shape& shape, DType dtype, uint32_t seed, float lo, float hi) {
  Tensor t = random_tensor(shape, dtype, seed, lo, hi);
  return {t, t.to_dtype(DType::F32)};
}

void run_case(const Case& c, DType dtype, uint32_t seed) {
  int64_t tokens = 0;
  std::string lens;
  for (int32_t l : c.lens) {
    tokens += l;
    lens += std::to_string(l) + " ";
  }
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

  Tensor ref_out = Tensor::empty(qs, DType::F32), ref_lse = Tensor::empty({c.hq, tokens}, DType::F32);
  ops::ref::attention(q32, k32, v32, cu, scale, c.window, ref_out, ref_lse);
  const Tensor dq_ = q.to(Device::cuda()), dk_ = k.to(Device::cuda()), dv_ = v.to(Device::cuda());
  const Tensor dcu = cu.to(Device::cuda());

  const ops::cuda::AttentionPathCounts before = ops::cuda::attention_path_counts();
  DeviceOut out(qs, dtype), lse({c.hq, tokens}, DType::F32);
  ops::attention(dq_, dk_, dv_, dcu, scale, c.window, out.tensor, lse.tensor);
  ASSERT_EQ(ops::cuda::attention_path_counts().cudnn_forward, before.cudnn_forward + 1)
      << "cuDNN did not run the forward: " << ops::cuda::cudnn_attention_last_fallback();
  // The dense graphs run exactly where every sequence has one bucket length (64 up to 256, multiples of 256 beyond).
  const bool dense = std::all_of(c.lens.begin(), c.lens.end(), [&](int32_t l) { return l == c.lens[0]; }) &&
                     (c.lens[0] % (c.lens[0] <= 256 ? 64 : 256)) == 0;
  EXPECT_EQ(ops::cuda::attention_path_counts().cudnn_dense, before.cudnn_dense + (dense ? 1 : 0));
  const Tensor got_out = out.result("out");
  expect_close("out", dtype, got_out, ref_out);
  const Metrics lm = compare(lse.result("lse"), ref_lse);
  EXPECT_LE(lm.max_abs, 2e-3) << "lse max abs error";
  std::printf("    %-4s lse: max-abs %.2e\n", dtype_name(dtype), lm.max_abs);

  DeviceOut out2(qs, dtype);
  Tensor no_lse;
  ops::attention(dq_, dk_, dv_, dcu, scale, c.window, out2.tensor, no_lse);
  EXPECT_TRUE(bit_equal(out2.result("out (no lse)"), got_out)) << "forward without lse differs";

  Tensor ref_dq = Tensor::empty(qs, DType::F32), ref_dk = Tensor::empty(ks, DType::F32);
  Tensor ref_dv = Tensor::empty(ks, DType::F32);
  ops::ref::attention_backward(dout32, q32, k32, v32, ref_out, ref_lse, cu, scale, c.window, ref_dq, ref_dk, ref_dv);
  const Tensor ddout = dout.to(Device::cuda());
  DeviceOut gq(qs, dtype), gk(ks, dtype), gv(ks, dtype);
  const ops::cuda::AttentionPathCounts mid = ops::cuda::attention_path_counts();
  ops::attention_backward(ddout, dq_, dk_, dv_, out.tensor, lse.tensor, dcu, scale, c.window, gq.tensor, gk.tensor,
                          gv.tensor);
  ASSERT_EQ(ops::cuda::attention_path_counts().cudnn_backward, mid.cudnn_backward + 1)
      << "cuDNN did not run the backward: " << ops::cuda::cudnn_attention_last_fallback();
  EXPECT_EQ(ops::cuda::attention_path_counts().cudnn_dense, mid.cudnn_dense + (dense ? 1 : 0));
  const Tensor got_dq = gq.result("dq"), got_dk = gk.result("dk"), got_dv = gv.result("dv");
  expect_close("dq", dtype, got_dq, ref_dq);
  expect_close("dk", dtype, got_dk, ref_dk);
  expect_close("dv", dtype, got_dv, ref_dv);

  DeviceOut gq2(qs, dtype), gk2(ks, dtype), gv2(ks, dtype);
  ops::attention_backward(ddout, dq_, dk_, dv_, out.tensor, lse.tensor, dcu, scale, c.window, gq2.tensor,
                          gk2.tensor, gv2.tensor);
  EXPECT_TRUE(bit_equal(gq2.result("dq 2"), got_dq)) << "dq not reproducible";
  EXPECT_TRUE(bit_equal(gk2.result("dk 2"), got_dk)) << "dk not reproducible";
  EXPECT_TRUE(bit_equal(gv2.result("dv 2"), got_dv)) << "dv not reproducible";
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {{1}, 2, 1, 64, 0},                     // a single token
      {{7, 63, 65}, 4, 2, 64, 0},             // GQA 2, lengths around 64
      {{130, 1, 65}, 8, 2, 128, 0},           // GQA 4, a length-1 sequence in the middle
      {{200, 37}, 4, 4, 128, 0},              // no grouping
      {{300, 1, 257, 19}, 28, 4, 128, 0},     // Qwen2.5-7B heads: GQA 7
      {{5, 1, 3, 64, 2}, 2, 2, 64, 0},        // many short sequences (B 5 padded to 8 with empty ones)
      {{3, 17, 1, 40, 9, 2, 31, 5, 11}, 4, 1, 64, 0},  // B 9 padded to 16, GQA 4
      {{130, 70, 129}, 6, 3, 64, 64},         // window
      {{300, 45}, 14, 2, 128, 100},           // window spanning tiles, GQA 7
      // Dense graphs (every sequence one bucket length: exact B, no ragged offsets or padding mask)
      {{64, 64, 64}, 14, 2, 64, 0},           // B 3 (not padded), the 0.5B's heads
      {{256}, 28, 4, 128, 0},                 // one sequence
      {{512, 512}, 4, 4, 64, 0},              // no grouping, length past the 256 bucket step
      {{256, 256}, 6, 3, 64, 100},            // window
  };
  return all;
}

TEST(OpsCudaAttentionCudnn, BF16MatchesReference) {
  if (!have_hopper()) GTEST_SKIP() << "the cuDNN attention path needs an sm_90+ device";
  uint32_t seed = 7000;
  for (const Case& c : cases()) run_case(c, DType::BF16, seed += 10);
  std::printf("%s", ops::cuda::cudnn_attention_plan_info().c_str());
}

TEST(OpsCudaAttentionCudnn, F16MatchesReference) {
  if (!have_hopper()) GTEST_SKIP() << "the cuDNN attention path needs an sm_90+ device";
  uint32_t seed = 8000;
  for (const Case& c : cases()) run_case(c, DType::F16, seed += 10);
}

// ops::enable_full_determinism (--full_determinism): products stop timing candidates (the heuristic's first
// algorithm) and the attention backward stays the deterministic variant although SWIFT_CUDNN_ATTENTION_BWD asks for
// the atomic one: the plan built for a new shape carries no "(nondeterministic)" note; against the reference as
// every case. The switches are put back afterwards (the rest of the binary runs the defaults).
TEST(OpsCudaAttentionCudnn, FullDeterminismKeepsTheDeterministicBackward) {
  if (!have_hopper()) GTEST_SKIP() << "the cuDNN attention path needs an sm_90+ device";
  setenv("SWIFT_CUDNN_ATTENTION_BWD", "nondeterministic", 1);
  ops::enable_full_determinism();
  EXPECT_FALSE(ops::cuda::gemm_autotune_enabled());
  run_case(Case{{37, 211}, 6, 3, 48, 0}, DType::BF16, 9500);  // a shape no other test plans
  const std::string info = ops::cuda::cudnn_attention_plan_info();
  unsetenv("SWIFT_CUDNN_ATTENTION_BWD");
  ops::cuda::force_deterministic_attention_backward(false);
  ops::cuda::set_gemm_autotune(true);
  std::printf("%s", info.c_str());
  EXPECT_NE(info.find("backward"), std::string::npos);
  EXPECT_EQ(info.find("(nondeterministic)"), std::string::npos) << info;
}

// The deterministic backward over groups of kv heads (SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB=0: one kv head per
// launch, the most groups): every case against the reference, reproducible, still on cuDNN.
TEST(OpsCudaAttentionCudnn, BackwardOverHeadGroupsMatchesReference) {
  if (!have_hopper()) GTEST_SKIP() << "the cuDNN attention path needs an sm_90+ device";
  setenv("SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB", "0", 1);
  uint32_t seed = 9000;
  for (const Case& c : cases()) run_case(c, DType::BF16, seed += 10);
  unsetenv("SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB");
  std::printf("%s", ops::cuda::cudnn_attention_plan_info().c_str());
}

// Without SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB the backward's workspace stays under the process's memory peak: one
// 8k sequence of 4 query heads (a 512 MiB dP estimate) splits in two kv-head groups right after the peaks are reset
// (room: the 256 MiB floor) and runs in one launch once a freed 1 GiB buffer has raised the peak; both give the same
// bits.
TEST(OpsCudaAttentionCudnn, BackwardSplitsOnlyWhereItWouldRaiseThePeak) {
  if (!have_hopper()) GTEST_SKIP() << "the cuDNN attention path needs an sm_90+ device";
  unsetenv("SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB");
  const int64_t tokens = 8192, hq = 4, hkv = 2, d = 64;
  const float scale = 0.125f;
  const Tensor cu = cu_seqlens_of({static_cast<int32_t>(tokens)}).to(Device::cuda());
  const Tensor q = random_tensor({tokens, hq, d}, DType::BF16, 11).to(Device::cuda());
  const Tensor k = random_tensor({tokens, hkv, d}, DType::BF16, 12).to(Device::cuda());
  const Tensor v = random_tensor({tokens, hkv, d}, DType::BF16, 13).to(Device::cuda());
  const Tensor dout = random_tensor({tokens, hq, d}, DType::BF16, 14).to(Device::cuda());
  Tensor out = Tensor::empty({tokens, hq, d}, DType::BF16, Device::cuda());
  Tensor lse = Tensor::empty({hq, tokens}, DType::F32, Device::cuda());
  ops::attention(q, k, v, cu, scale, 0, out, lse);
  auto backward = [&](int64_t expected_launches) {
    Tensor dq = Tensor::empty({tokens, hq, d}, DType::BF16, Device::cuda());
    Tensor dk = Tensor::empty({tokens, hkv, d}, DType::BF16, Device::cuda());
    Tensor dv = Tensor::empty({tokens, hkv, d}, DType::BF16, Device::cuda());
    const ops::cuda::AttentionPathCounts before = ops::cuda::attention_path_counts();
    ops::attention_backward(dout, q, k, v, out, lse, cu, scale, 0, dq, dk, dv);
    const ops::cuda::AttentionPathCounts after = ops::cuda::attention_path_counts();
    EXPECT_EQ(after.cudnn_backward, before.cudnn_backward + 1) << ops::cuda::cudnn_attention_last_fallback();
    EXPECT_EQ(after.cudnn_backward_launches - before.cudnn_backward_launches, expected_launches);
    return std::vector<Tensor>{dq.to(Device::cpu()), dk.to(Device::cpu()), dv.to(Device::cpu())};
  };
  memory_reset_peaks(1);
  const std::vector<Tensor> split = backward(2);
  {
    Tensor big = Tensor::empty({int64_t{1} << 29}, DType::BF16, Device::cuda());  // 1 GiB, freed at once
  }
  const std::vector<Tensor> whole = backward(1);
  for (size_t i = 0; i < split.size(); ++i) {
    EXPECT_EQ(std::memcmp(split[i].raw(), whole[i].raw(), static_cast<size_t>(split[i].numel()) * 2), 0)
        << "gradient " << i << ": head groups changed the bits";
  }
}

// SWIFT_ATTENTION=flash2 selects our kernels for BF16 (which cuDNN would take), and F32 always goes to ours.
TEST(OpsCudaAttentionCudnn, Flash2SelectedByEnvAndForF32) {
  ops::init_backends();
  if (ops::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const int64_t tokens = 40, hq = 4, hkv = 2, d = 64;
  const float scale = 0.125f;
  const Tensor cu = cu_seqlens_of({17, 23}).to(Device::cuda());
  for (DType dtype : {DType::BF16, DType::F32}) {
    const Tensor q = random_tensor({tokens, hq, d}, dtype, 1).to(Device::cuda());
    const Tensor k = random_tensor({tokens, hkv, d}, dtype, 2).to(Device::cuda());
    const Tensor v = random_tensor({tokens, hkv, d}, dtype, 3).to(Device::cuda());
    Tensor out = Tensor::empty({tokens, hq, d}, dtype, Device::cuda());
    Tensor lse = Tensor::empty({hq, tokens}, DType::F32, Device::cuda());
    Tensor dq = Tensor::empty({tokens, hq, d}, dtype, Device::cuda());
    Tensor dk = Tensor::empty({tokens, hkv, d}, dtype, Device::cuda());
    Tensor dv = Tensor::empty({tokens, hkv, d}, dtype, Device::cuda());
    const bool forced = dtype == DType::BF16;
    if (forced) setenv("SWIFT_ATTENTION", "flash2", 1);
    const ops::cuda::AttentionPathCounts before = ops::cuda::attention_path_counts();
    ops::attention(q, k, v, cu, scale, 0, out, lse);
    ops::attention_backward(out, q, k, v, out, lse, cu, scale, 0, dq, dk, dv);
    const ops::cuda::AttentionPathCounts after = ops::cuda::attention_path_counts();
    if (forced) unsetenv("SWIFT_ATTENTION");
    EXPECT_EQ(after.flash2_forward, before.flash2_forward + 1) << dtype_name(dtype);
    EXPECT_EQ(after.flash2_backward, before.flash2_backward + 1) << dtype_name(dtype);
    EXPECT_EQ(after.cudnn_forward, before.cudnn_forward) << dtype_name(dtype);
    EXPECT_EQ(after.cudnn_backward, before.cudnn_backward) << dtype_name(dtype);
  }
#ifdef SWIFT_WITH_CUDNN
  setenv("SWIFT_ATTENTION", "bogus", 1);
  const Tensor q = random_tensor({tokens, hq, d}, DType::BF16, 1).to(Device::cuda());
  const Tensor k = random_tensor({tokens, hkv, d}, DType::BF16, 2).to(Device::cuda());
  Tensor out = Tensor::empty({tokens, hq, d}, DType::BF16, Device::cuda());
  Tensor no_lse;
  EXPECT_THROW(ops::attention(q, k, k, cu, scale, 0, out, no_lse), Error);
  unsetenv("SWIFT_ATTENTION");
#endif
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
