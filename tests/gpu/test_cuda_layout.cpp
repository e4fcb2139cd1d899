// tests/gpu/test_cuda_layout.cpp — swap_outer_axes on CUDA against the CPU reference: odd shapes (A, B, E in
// 1..13, both A <= B and A > B, which take the two copy directions), byte widths 1, 2 and 4, guard bytes around
// the device output. Compiled only in CUDA builds; label gpu: fails without a device.
//
// Tolerance: none (a byte copy): bit-equal to the reference.
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <cstring>

#include "ops/backends.h"
#include "ops/op_test_util.h"
#include "ops/ops.h"
#include "ops/reference.h"

namespace swift::test {
namespace {

TEST(CudaSwapOuterAxes, BitEqualToTheReference) {
  ops::init_backends();
  ASSERT_GT(ops::cuda_device_count(), 0) << "no CUDA device";
  for (DType dtype : {DType::F32, DType::BF16, DType::U8}) {
    for (int64_t A : {1, 2, 7}) {
      for (int64_t B : {1, 3, 13}) {
        for (int64_t E : {1, 5, 11}) {
          SCOPED_TRACE(std::string(dtype_name(dtype)) + " A=" + std::to_string(A) + " B=" + std::to_string(B) +
                       " E=" + std::to_string(E));
          Tensor x = Tensor::empty({A, B, E}, dtype);
          auto* bytes = static_cast<unsigned char*>(x.raw());
          for (size_t i = 0; i < x.nbytes(); ++i) bytes[i] = static_cast<unsigned char>((i * 2654435761u + 7) >> 9);
          Tensor ref = Tensor::empty({B, A, E}, dtype);
          ops::ref::swap_outer_axes(x, ref);
          // The device output sits between guard bytes that must stay untouched.
          const size_t guard = 256, n = ref.nbytes();
          auto storage = Storage::allocate(n + 2 * guard, Device::cuda(), MemoryCategory::Other);
          std::vector<unsigned char> host(n + 2 * guard, 0xA5);
          device_backend(DeviceType::CUDA)->copy(storage->data(), Device::cuda(), host.data(), Device::cpu(), host.size());
          Tensor y(storage, guard, {B, A, E}, dtype);
          ops::swap_outer_axes(x.to(Device::cuda()), y);
          device_backend(DeviceType::CUDA)->copy(host.data(), Device::cpu(), storage->data(), Device::cuda(), host.size());
          for (size_t i = 0; i < guard; ++i) {
            ASSERT_EQ(host[i], 0xA5) << "guard byte " << i << " before the output";
            ASSERT_EQ(host[guard + n + i], 0xA5) << "guard byte " << i << " after the output";
          }
          EXPECT_EQ(std::memcmp(host.data() + guard, ref.raw(), n), 0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace swift::test
#endif
