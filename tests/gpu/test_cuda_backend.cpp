// tests/gpu/test_cuda_backend.cpp — device memory round trips and accounting (label gpu; needs a CUDA device).
#include <gtest/gtest.h>

#include "core/tensor.h"
#include "ops/backends.h"

namespace swift {
namespace {

TEST(CudaBackend, RoundTripAndAccounting) {
  ops::init_backends();
  ASSERT_GT(ops::cuda_device_count(), 0) << "no CUDA device visible";
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f - 7.0f;
  Tensor host = Tensor::from_f32({10, 100}, values);
  int64_t before = memory_stats(1).current[static_cast<int>(MemoryCategory::Weights)];
  {
    Tensor device = host.to(Device::cuda(0), MemoryCategory::Weights);
    EXPECT_EQ(memory_stats(1).current[static_cast<int>(MemoryCategory::Weights)] - before, 4000);
    Tensor back = device.slice_rows(3, 5).to(Device::cpu());
    ASSERT_EQ(back.numel(), 200);
    for (int64_t i = 0; i < 200; ++i) EXPECT_EQ(back.item(i), values[static_cast<size_t>(300 + i)]);
    device.zero_();
    Tensor zeros = device.to(Device::cpu());
    for (int64_t i = 0; i < zeros.numel(); ++i) ASSERT_EQ(zeros.item(i), 0.0);
  }
  EXPECT_EQ(memory_stats(1).current[static_cast<int>(MemoryCategory::Weights)], before);
}

}  // namespace
}  // namespace swift
