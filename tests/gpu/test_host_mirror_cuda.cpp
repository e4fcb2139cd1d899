// tests/gpu/test_host_mirror_cuda.cpp — ops.h HostMirror on CUDA: host_values of a device tensor takes its registered
// mirror (made to differ from the device values here, which no real caller may do, so the test sees which copy was
// read), the newest of nested mirrors, and the device values again once the mirrors are gone or when the pointer,
// dtype or element count does not match.
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include "ops/backends.h"
#include "ops/ops.h"

namespace swift::test {
namespace {

bool have_cuda() {
  ops::init_backends();
  return ops::cuda_device_count() > 0;
}

int32_t second(const Tensor& t) { return ops::host_values(t).data<int32_t>()[1]; }

TEST(HostMirrorCuda, LookupsTakeTheRegisteredMirror) {
  ASSERT_TRUE(have_cuda()) << "no CUDA device visible (gpu tests need one)";
  const Tensor dev = Tensor::from_i32({3}, {0, 4, 9}).to(Device::cuda());
  EXPECT_EQ(second(dev), 4);  // no mirror: read back
  {
    ops::HostMirror outer(dev, Tensor::from_i32({3}, {0, 5, 9}));
    EXPECT_EQ(second(dev), 5);
    {
      ops::HostMirror inner(dev, Tensor::from_i32({3}, {0, 6, 9}));
      EXPECT_EQ(second(dev), 6);  // the newest wins
      const Tensor view = dev.slice_rows(0, 2);  // same pointer, another element count: not a match
      EXPECT_EQ(second(view), 4);
    }
    EXPECT_EQ(second(dev), 5);
  }
  EXPECT_EQ(second(dev), 4);
}

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
