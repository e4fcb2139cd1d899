// tests/gpu/test_cuda_dispatch.cpp — ops on CUDA tensors: cast matches the CPU reference bit for bit; calls that
// mix a CPU and a CUDA tensor refuse, naming both devices (every op has a CUDA kernel). Compiled only in CUDA
// builds; label gpu: fails without a device.
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

TEST(OpsCuda, MixedDevicesThrowNamingBoth) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  // Every op has a CUDA kernel now; what is still refused is a call mixing devices (never a silent copy).
  Tensor w = Tensor::zeros({7, 5}, DType::BF16, Device::cuda());
  Tensor a = Tensor::zeros({2, 5}, DType::F32);  // on the CPU
  Tensor b = Tensor::zeros({7, 2}, DType::F32, Device::cuda());
  Tensor norm = Tensor::zeros({7}, DType::F32, Device::cuda());
  EXPECT_TRUE(throws_error([&] { ops::dora_weight_norm(w, a, b, 1.0f, norm); },
                           {"dora_weight_norm:", "different devices", "cuda:0", "cpu"}));
  Tensor x = Tensor::zeros({3, 5}, DType::F32);
  Tensor y = Tensor::zeros({3, 5}, DType::F32, Device::cuda());
  EXPECT_TRUE(throws_error([&] { ops::add(x, x, y); }, {"add:", "different devices", "cpu", "cuda:0"}));
  Tensor y7 = Tensor::zeros({3, 7}, DType::F32, Device::cuda());
  EXPECT_TRUE(throws_error([&] { ops::cast(y, y7); }, {"cast:", "element count"}));
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
