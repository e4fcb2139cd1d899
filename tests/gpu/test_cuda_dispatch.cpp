// tests/gpu/test_cuda_dispatch.cpp — ops on CUDA tensors: the kernels that exist (cast) match the CPU reference
// bit for bit; ops without a CUDA kernel refuse by name. Compiled only in CUDA builds; label gpu: fails without a device.
//
// Invariants: inputs are made on the CPU, copied to the device, and results copied back for comparison.
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include "ops/op_test_util.h"
#include "ops/backends.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

bool have_device() {
  ops::init_backends();
  return ops::cuda_device_count() > 0;
}

TEST(OpsCuda, CastMatchesReferenceBitExactly) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const DType dtypes[] = {DType::F32, DType::BF16, DType::F16};
  for (int64_t n : {1, 13 * 33, 70001}) {
    for (DType from : dtypes) {
      for (DType to : dtypes) {
        SCOPED_TRACE(std::string(dtype_name(from)) + "->" + dtype_name(to) + " n=" + std::to_string(n));
        Tensor src = random_tensor({n}, from, 21, -70000.0f, 70000.0f);
        Tensor dst = Tensor::empty({n}, to, Device::cuda());
        ops::cast(src.to(Device::cuda()), dst);
        Tensor expected = Tensor::empty({n}, to);
        ops::ref::cast(src, expected);
        EXPECT_TRUE(bit_equal(dst.to(Device::cpu()), expected));
      }
    }
  }
}

TEST(OpsCuda, OpsWithoutKernelsThrowByName) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  Tensor x = Tensor::zeros({3, 5}, DType::F32, Device::cuda());
  Tensor w = Tensor::zeros({7, 5}, DType::BF16, Device::cuda());
  Tensor y = Tensor::zeros({3, 7}, DType::F32, Device::cuda());
  EXPECT_TRUE(throws_error([&] { ops::linear(x, w, Tensor(), y); }, {"op linear: no CUDA kernel yet"}));
  EXPECT_TRUE(throws_error([&] { ops::cast(x, y); }, {"cast:", "element count"}));
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
