// tests/ops/test_host_mirror.cpp — ops.h HostMirror / host_values on the CPU: a CPU tensor is its own host copy
// (no mirror consulted), and a mirror whose dtype or element count differs from its device tensor, or that is not
// on the CPU, is refused naming both tensors. Which copy a device tensor's lookup takes is tested on CUDA
// (tests/gpu/test_host_mirror_cuda.cpp).
#include <gtest/gtest.h>

#include "core/error.h"
#include "ops/ops.h"

namespace swift::test {
namespace {

TEST(HostMirror, CpuTensorsAreTheirOwnHostValues) {
  const Tensor t = Tensor::from_i32({3}, {0, 4, 9});
  const Tensor other = Tensor::from_i32({3}, {7, 7, 7});
  ops::HostMirror mirror(t, other);  // a CPU "device" tensor: the mirror is never consulted
  const Tensor h = ops::host_values(t);
  EXPECT_EQ(h.raw(), t.raw());
  EXPECT_EQ(h.data<int32_t>()[1], 4);
}

TEST(HostMirror, MismatchedMirrorsAreRefusedNamingBoth) {
  const Tensor cu = Tensor::from_i32({3}, {0, 4, 9});
  const Tensor longer = Tensor::from_i32({4}, {0, 4, 9, 12});
  try {
    ops::HostMirror mirror(cu, longer);
    FAIL() << "a mirror of another element count was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("does not match"), std::string::npos) << what;
    EXPECT_NE(what.find(cu.str()), std::string::npos) << what;
    EXPECT_NE(what.find(longer.str()), std::string::npos) << what;
  }
  const Tensor f = Tensor::zeros({3}, DType::F32);
  EXPECT_THROW(ops::HostMirror(cu, f), Error);
  EXPECT_THROW(ops::HostMirror(cu, Tensor()), Error);
}

}  // namespace
}  // namespace swift::test
