// tests/gpu/test_cuda_f16_kernels.cpp — F16 activations in the CUDA element-wise kernels (add, swiglu,
// swiglu_backward, dropout, rmsnorm), called through their launchers with dtype code 2, one level below the op
// (written while the ops' checks still refused F16; ops::require_activation now accepts F16 on CUDA, and the
// attention and LoRA kernels' F16 paths are tested through their ops in test_cuda_attention / test_cuda_decode /
// test_cuda_matmul).
// Compiled only in CUDA builds; label gpu: fails without a device.
//
// Invariants:
//  - Inputs are drawn in [-4, 4] and rounded to fp16 (in range: fp16's largest finite value is 65504); the
//    reference is ops::ref on those rounded values in fp32.
//  - Tolerance: the device computes in fp32 and rounds each output once to fp16, so it is within one fp16 rounding
//    of the fp32 reference: |got - ref| <= 2^-10 |ref| + 2^-24 (one ulp at 10 mantissa bits, allowing a rounding
//    boundary crossed by a last-bit fp32 difference, plus the smallest subnormal). rmsnorm's fp64 row sum and
//    torch-order products are the reference's too: the same bound. Dropout keeps or zeroes exactly the F32 mask.
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <cmath>
#include <string>

#include "ops/backends.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels_elementwise.cuh"
#include "ops/op_test_util.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

constexpr double kF16Rtol = 1.0 / 1024.0;       // 2^-10
constexpr double kF16Atol = 5.9604644775390625e-8;  // 2^-24

bool have_device() {
  ops::init_backends();
  return ops::cuda_device_count() > 0;
}

Tensor f16_rounded(const Tensor& f32) { return f32.to_dtype(DType::F16).to_dtype(DType::F32); }

// The host F32 values of an F16 device tensor.
Tensor host_f32(const Tensor& dev) { return dev.to(Device::cpu()).to_dtype(DType::F32); }

void expect_within_f16_rounding(const Tensor& got, const Tensor& ref, const std::string& what) {
  ASSERT_EQ(got.numel(), ref.numel()) << what;
  int64_t bad = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double g = got.item(i), r = ref.item(i);
    if (!(std::fabs(g - r) <= kF16Rtol * std::fabs(r) + kF16Atol)) {
      if (++bad <= 3) ADD_FAILURE() << what << " element " << i << ": got " << g << ", reference " << r;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

cudaStream_t device_stream() { return ops::cuda::stream(0); }

TEST(OpsCudaF16, MapKernelsAndDropoutMatchReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4099}, int64_t{100003}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const Tensor a = f16_rounded(random_tensor({n}, DType::F32, 11, -4.0f, 4.0f));
    const Tensor b = f16_rounded(random_tensor({n}, DType::F32, 12, -4.0f, 4.0f));
    const Tensor d = f16_rounded(random_tensor({n}, DType::F32, 13, -4.0f, 4.0f));
    const Tensor da = a.to_dtype(DType::F16).to(Device::cuda()), db = b.to_dtype(DType::F16).to(Device::cuda());
    const Tensor dd = d.to_dtype(DType::F16).to(Device::cuda());
    Tensor out = Tensor::zeros({n}, DType::F16, Device::cuda()), out2 = Tensor::zeros({n}, DType::F16, Device::cuda());
    Tensor ref = Tensor::zeros({n}, DType::F32), ref2 = Tensor::zeros({n}, DType::F32);

    ASSERT_EQ(ops::cuda::launch_add(da.raw(), db.raw(), out.raw(), 2, n, device_stream()), cudaSuccess);
    ops::ref::add(a, b, ref);
    expect_within_f16_rounding(host_f32(out), ref, "add");

    ASSERT_EQ(ops::cuda::launch_swiglu(da.raw(), db.raw(), out.raw(), 2, n, device_stream()), cudaSuccess);
    ops::ref::swiglu(a, b, ref);
    expect_within_f16_rounding(host_f32(out), ref, "swiglu");

    ASSERT_EQ(ops::cuda::launch_swiglu_backward(dd.raw(), da.raw(), db.raw(), out.raw(), out2.raw(), 2, n,
                                                device_stream()),
              cudaSuccess);
    ops::ref::swiglu_backward(d, a, b, ref, ref2);
    expect_within_f16_rounding(host_f32(out), ref, "swiglu_backward dgate");
    expect_within_f16_rounding(host_f32(out2), ref2, "swiglu_backward dup");

    // Dropout p = 0.25: the F16 kernel draws the F32 kernel's mask; kept values are x * keep_scale rounded once.
    const uint32_t threshold = 1u << 30;
    const float keep_scale = 1.0f / 0.75f;
    const Tensor a32 = a.to(Device::cuda());
    Tensor out32 = Tensor::zeros({n}, DType::F32, Device::cuda());
    ASSERT_EQ(ops::cuda::launch_dropout(a32.raw(), out32.raw(), 0, n, 99, threshold, keep_scale, device_stream()),
              cudaSuccess);
    ASSERT_EQ(ops::cuda::launch_dropout(da.raw(), out.raw(), 2, n, 99, threshold, keep_scale, device_stream()),
              cudaSuccess);
    const Tensor want = f16_rounded(out32.to(Device::cpu()));
    const Tensor got = host_f32(out);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got.item(i), want.item(i)) << "dropout element " << i;
  }
}

TEST(OpsCudaF16, RmsnormMatchesReference) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  // c <= 1024 takes the warp-per-row kernels (896: the narrow one), larger c the block-per-row kernels.
  for (auto [n, c] : {std::pair<int64_t, int64_t>{5, 33}, {11, 896}, {3, 1025}, {17, 4096}}) {
    SCOPED_TRACE("n=" + std::to_string(n) + " c=" + std::to_string(c));
    const Tensor x = f16_rounded(random_tensor({n, c}, DType::F32, 21, -4.0f, 4.0f));
    const Tensor w = random_tensor({c}, DType::F32, 22, 0.5f, 1.5f);
    Tensor ref = Tensor::zeros({n, c}, DType::F32), ref_rstd = Tensor::zeros({n}, DType::F32);
    ops::ref::rmsnorm(x, w, 1e-6f, ref, ref_rstd);
    const Tensor dx = x.to_dtype(DType::F16).to(Device::cuda()), dw = w.to(Device::cuda());
    Tensor y = Tensor::zeros({n, c}, DType::F16, Device::cuda()), rstd = Tensor::zeros({n}, DType::F32, Device::cuda());
    ASSERT_EQ(ops::cuda::launch_rmsnorm(dx.raw(), dw.raw(), 0, y.raw(), rstd.data<float>(), 2, n, c, 1e-6f, true,
                                        device_stream()),
              cudaSuccess);
    expect_within_f16_rounding(host_f32(y), ref, "rmsnorm y");
    const Tensor got_rstd = rstd.to(Device::cpu());
    for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(got_rstd.item(i), ref_rstd.item(i)) << "rstd row " << i;
  }
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
