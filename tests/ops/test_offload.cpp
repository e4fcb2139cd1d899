// tests/ops/test_offload.cpp — ActivationOffloader (ops/offload.h) on the CPU: the bytes that come back are the bytes
// that left (F32 and BF16, odd sizes), the device tensor's memory leaves the Activations category when retired and the
// host copy is counted under Other, a slot in flight is handed back without a copy, clear() empties every slot, and
// misuse (storing a slot twice, fetching an empty one) fails naming the slot. The CUDA protocol is in
// tests/gpu/test_cuda_offload.cpp.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "core/memory.h"
#include "ops/offload.h"
#include "ops/op_test_util.h"

namespace swift::test {
namespace {

constexpr int kActivations = static_cast<int>(MemoryCategory::Activations);
constexpr int kOther = static_cast<int>(MemoryCategory::Other);

Tensor activation(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu(), MemoryCategory::Activations);
  t.copy_from(random_tensor(shape, dtype, seed));
  return t;
}

TEST(ActivationOffloader, BytesComeBackAndMemoryMovesOffTheActivations) {
  ops::ActivationOffloader off(Device::cpu());
  const Tensor a_want = random_tensor({37, 13}, DType::F32, 1), b_want = random_tensor({5, 111}, DType::BF16, 2);
  const int64_t before = memory_stats(0).current[kActivations];
  {
    Tensor a = activation({37, 13}, DType::F32, 1), b = activation({5, 111}, DType::BF16, 2);
    off.store(7, a);
    off.store(8, b);
  }  // the offloader holds both until retired
  EXPECT_EQ(memory_stats(0).current[kActivations] - before, 37 * 13 * 4 + 5 * 111 * 2);
  off.retire(1);  // the oldest (slot 7) goes
  EXPECT_EQ(memory_stats(0).current[kActivations] - before, 5 * 111 * 2);
  off.retire(0);
  EXPECT_EQ(memory_stats(0).current[kActivations] - before, 0);
  EXPECT_EQ(off.host_bytes(), 37 * 13 * 4 + 5 * 111 * 2);
  EXPECT_TRUE(off.holds(7) && off.holds(8));
  off.prefetch(8);
  EXPECT_TRUE(off.prefetched(8));
  const Tensor a = off.take(7), b = off.take(8);
  EXPECT_FALSE(off.holds(7) || off.holds(8));
  ASSERT_EQ(a.shape(), a_want.shape());
  ASSERT_EQ(b.dtype(), DType::BF16);
  EXPECT_EQ(std::memcmp(a.raw(), a_want.raw(), a.nbytes()), 0);
  EXPECT_EQ(std::memcmp(b.raw(), b_want.raw(), b.nbytes()), 0);
  EXPECT_EQ(memory_stats(0).current[kActivations] - before, 37 * 13 * 4 + 5 * 111 * 2);  // back as activations
}

TEST(ActivationOffloader, HostBuffersAreReusedAndCountedAsOther) {
  const int64_t other_before = memory_stats(0).current[kOther];
  {
    ops::ActivationOffloader off(Device::cpu());
    for (int step = 0; step < 3; ++step) {  // smaller, then larger: the buffer grows once and is kept
      const Shape shape = step == 2 ? Shape{64, 9} : Shape{16, 9};
      off.store(0, activation(shape, DType::F32, 10 + step));
      off.retire(0);
      const Tensor back = off.take(0);
      EXPECT_EQ(std::memcmp(back.raw(), random_tensor(shape, DType::F32, 10 + step).raw(), back.nbytes()), 0);
    }
    EXPECT_EQ(off.host_bytes(), 64 * 9 * 4);
    EXPECT_EQ(memory_stats(0).current[kOther] - other_before, 64 * 9 * 4);
  }
  EXPECT_EQ(memory_stats(0).current[kOther], other_before);
}

TEST(ActivationOffloader, ASlotStillInFlightComesBackAsItself) {
  ops::ActivationOffloader off(Device::cpu());
  Tensor t = activation({3, 4}, DType::F32, 5);
  off.store(1, t);
  const Tensor back = off.take(1);  // not retired: the very tensor, no copy
  EXPECT_EQ(back.raw(), t.raw());
  off.store(1, t);  // the slot is free again
  off.clear();
  EXPECT_FALSE(off.holds(1));
}

TEST(ActivationOffloader, MisuseNamesTheSlot) {
  ops::ActivationOffloader off(Device::cpu());
  off.store(4, activation({2, 2}, DType::F32, 1));
  try {
    off.store(4, activation({2, 2}, DType::F32, 1));
    FAIL() << "storing a slot twice must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot 4 already holds a tensor"), std::string::npos) << e.what();
  }
  try {
    off.take(9);
    FAIL() << "taking an empty slot must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot 9 holds nothing to fetch"), std::string::npos) << e.what();
  }
  try {
    off.store(5, Tensor());
    FAIL() << "an undefined tensor must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot 5 must hold a tensor on cpu"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace swift::test
