// tests/gpu/test_cuda_layout.cpp — swap_outer_axes and copy_columns on CUDA against the CPU reference, and
// rope_columns against copy_columns + rope on CUDA: odd shapes (A, B, E in
// 1..13, both A <= B and A > B, which take the two copy directions), byte widths 1, 2 and 4, guard bytes around
// the device output. Compiled only in CUDA builds; label gpu: fails without a device.
//
// Tolerance: none (a byte copy): bit-equal to the reference.
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <cstring>
#include <vector>

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

// Aligned blocks take the 16-byte copy kernel, column 1 (odd byte offsets) the 2-D copy: both bit-equal.
TEST(CudaCopyColumns, BitEqualToTheReference) {
  ops::init_backends();
  ASSERT_GT(ops::cuda_device_count(), 0) << "no CUDA device";
  for (DType dtype : {DType::F32, DType::BF16, DType::U8}) {
    for (int64_t N : {1, 5, 300}) {
      Tensor x = Tensor::empty({N, 1152}, dtype);
      auto* bytes = static_cast<unsigned char*>(x.raw());
      for (size_t i = 0; i < x.nbytes(); ++i) bytes[i] = static_cast<unsigned char>((i * 2654435761u + 3) >> 9);
      for (auto [col, cols] : {std::pair<int64_t, int64_t>{0, 896}, {896, 128}, {1024, 128}, {1, 1151}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " N=" + std::to_string(N) + " col=" + std::to_string(col));
        Tensor ref = Tensor::zeros({N, cols}, dtype);
        ops::ref::copy_columns(x, col, ref, 0, cols);
        Tensor y = Tensor::zeros({N, cols}, dtype, Device::cuda());
        ops::copy_columns(x.to(Device::cuda()), col, y, 0, cols);
        EXPECT_EQ(std::memcmp(y.to(Device::cpu()).raw(), ref.raw(), ref.nbytes()), 0);
        Tensor packed = Tensor::zeros({N, 1152}, dtype, Device::cuda()), packed_ref = Tensor::zeros({N, 1152}, dtype);
        ops::copy_columns(y, 0, packed, col, cols);
        ops::ref::copy_columns(ref, 0, packed_ref, col, cols);
        EXPECT_EQ(std::memcmp(packed.to(Device::cpu()).raw(), packed_ref.raw(), packed_ref.nbytes()), 0);
      }
    }
  }
}

// rope_columns on CUDA: the same bits as copy_columns then rope / rope_backward in place on CUDA (one kernel, other
// strides), out of and back into a packed (T, 1152) row of the 0.5B's q/k/v shape.
TEST(CudaRopeColumns, IsCopyThenRopeInPlace) {
  ops::init_backends();
  ASSERT_GT(ops::cuda_device_count(), 0) << "no CUDA device";
  const int64_t T = 37, D = 64, hq = 14, hkv = 2, width = (hq + 2 * hkv) * D;
  ops::RopeConfig config;
  config.theta = 1000000.0;
  const ops::RopeFrequencies f = ops::rope_frequencies(config, D, 4096);
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>((t * 131) % 4000);
  const Device d = Device::cuda();
  const Tensor positions = Tensor::from_i32({T}, pos).to(d);
  for (DType dtype : {DType::F32, DType::BF16}) {
    Tensor host = Tensor::empty({T, width}, DType::F32);
    for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1.0f;
    const Tensor packed = host.to_dtype(dtype).to(d);
    for (bool backward : {false, true}) {
      for (auto [col, heads] : {std::pair<int64_t, int64_t>{0, hq}, {hq * D, hkv}}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " backward " + std::to_string(backward) + " col " +
                     std::to_string(col));
        Tensor got = Tensor::zeros({T, heads * D}, dtype, d), want = Tensor::zeros({T, heads * D}, dtype, d);
        ops::rope_columns(packed, col, got, 0, heads, positions, f, backward);
        ops::copy_columns(packed, col, want, 0, heads * D);
        Tensor want3 = want.view({T, heads, D});
        backward ? ops::rope_backward(want3, positions, f) : ops::rope(want3, positions, f);
        EXPECT_EQ(std::memcmp(got.to(Device::cpu()).raw(), want.to(Device::cpu()).raw(), got.nbytes()), 0);
        Tensor back = Tensor::zeros({T, width}, dtype, d), expect = Tensor::zeros({T, width}, dtype, d);
        ops::rope_columns(want, 0, back, col, heads, positions, f, backward);
        Tensor again = want.to(Device::cpu()).to(d);
        Tensor again3 = again.view({T, heads, D});
        backward ? ops::rope_backward(again3, positions, f) : ops::rope(again3, positions, f);
        ops::copy_columns(again, 0, expect, col, heads * D);
        EXPECT_EQ(std::memcmp(back.to(Device::cpu()).raw(), expect.to(Device::cpu()).raw(), back.nbytes()), 0);
      }
    }
  }
}

}  // namespace
}  // namespace swift::test
#endif
