// tests/gpu/test_cuda_profile_events.cpp — SWIFT_PROFILE=events on CUDA (ops/cuda/profile_events.h): ops are timed
// by CUDA events without a synchronisation per op (the stream still has work queued right after the ops return),
// every op and every nested LoRA part gets a positive device time, more than DeviceRegion::kMaxPending timings
// resolve without losing one, and the breakdown counts the LoRA parts once. Compiled only in CUDA builds; label gpu.
//
// Invariants: each test leaves the profile Off with an empty table (nothing printed at exit).
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <cuda_runtime.h>

#include <chrono>
#include <string>
#include <thread>

#include "core/profile.h"
#include "ops/backends.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/profile_events.h"
#include "ops/ops.h"

namespace swift::test {
namespace {

bool have_device() {
  ops::init_backends();
  return ops::cuda_device_count() > 0;
}

struct EventsOn {
  EventsOn() {
    profile::set_mode(profile::Mode::Events);
    profile::reset();
  }
  ~EventsOn() {
    profile::reset();
    profile::set_mode(profile::Mode::Off);
  }
};

const profile::Region* find(const std::vector<profile::Region>& rows, const std::string& name) {
  for (const profile::Region& r : rows) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

TEST(ProfileEventsCuda, OpsAreTimedWithoutSynchronising) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const int64_t n = 4096;  // F32 (no TF32): a few ms per product, far longer than enqueueing one
  Tensor a = Tensor::zeros({n, n}, DType::F32, Device::cuda());
  Tensor b = Tensor::zeros({n, n}, DType::F32, Device::cuda());
  Tensor c = Tensor::zeros({n, n}, DType::F32, Device::cuda());
  ops::gemm(false, false, 1.0f, a, b, 0.0f, c);  // warm-up (cuBLASLt heuristics), not profiled
  ops::add(c, c, c);  // loads add's kernel now: a lazy module load in the timed part can wait for the stream
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EventsOn on;
  constexpr int kProducts = 10;
  for (int i = 0; i < kProducts; ++i) ops::gemm(false, false, 1.0f, a, b, 0.0f, c);
  ops::add(c, c, c);
  // Synchronised per op, the stream would be idle now.
  EXPECT_EQ(cudaStreamQuery(ops::cuda::stream(0)), cudaErrorNotReady);
  const std::vector<profile::Region> rows = profile::regions();  // waits for the end events
  const profile::Region* gemm = find(rows, "gemm");
  const profile::Region* add = find(rows, "add");
  ASSERT_TRUE(gemm && add);
  EXPECT_EQ(gemm->calls, kProducts);
  EXPECT_EQ(add->calls, 1);
  EXPECT_GT(gemm->seconds, 0.0);
  EXPECT_GT(add->seconds, 0.0);
  EXPECT_GT(gemm->seconds / kProducts, add->seconds);  // device time, not enqueue time
}

TEST(ProfileEventsCuda, ManyPendingTimingsAllResolve) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  Tensor x = Tensor::zeros({256}, DType::F32, Device::cuda());
  EventsOn on;
  const int calls = static_cast<int>(ops::cuda::DeviceRegion::kMaxPending) * 2 + 17;  // resolves the oldest half twice
  for (int i = 0; i < calls; ++i) ops::add(x, x, x);
  const std::vector<profile::Region> rows = profile::regions();
  const profile::Region* add = find(rows, "add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->calls, calls);
  EXPECT_GT(add->seconds, 0.0);
}

// A LoRA linear's operands on the device (zeros), and the op.
struct LoraOnDevice {
  static constexpr int64_t n = 512, k = 1024, m = 1024, r = 16;
  Tensor x = Tensor::zeros({n, k}, DType::BF16, Device::cuda());
  Tensor w = Tensor::zeros({m, k}, DType::BF16, Device::cuda());
  Tensor a = Tensor::zeros({r, k}, DType::F32, Device::cuda());
  Tensor b = Tensor::zeros({m, r}, DType::F32, Device::cuda());
  Tensor y = Tensor::zeros({n, m}, DType::BF16, Device::cuda());
  Tensor xa = Tensor::zeros({n, r}, DType::F32, Device::cuda());
  void run() { ops::lora_linear(x, w, Tensor(), a, b, 2.0f, ops::Dropout{}, y, xa); }
};

TEST(ProfileEventsCuda, LoraPartsAreNestedAndCountedOnce) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  LoraOnDevice lora;
  EventsOn on;
  for (int i = 0; i < 3; ++i) lora.run();
  const std::vector<profile::Region> rows = profile::regions();
  const profile::Region* op = find(rows, "lora_linear");
  ASSERT_NE(op, nullptr);
  EXPECT_EQ(op->calls, 3);
  double parts = 0;
  for (const char* name : {"lora_linear.frozen_gemm", "lora_linear.xa", "lora_linear.b_product"}) {
    const profile::Region* part = find(rows, name);
    ASSERT_NE(part, nullptr) << name;
    EXPECT_EQ(part->calls, 3) << name;
    EXPECT_GT(part->seconds, 0.0) << name;
    parts += part->seconds;
  }
  EXPECT_LE(parts, op->seconds * 1.01);  // the parts lie inside the op
  const profile::Breakdown bd = profile::breakdown_of(rows, 1.0);
  EXPECT_DOUBLE_EQ(bd.busy_s, op->seconds);  // the parts are not added again
}

// The device's idle time before an outermost op: a host pause between two ops shows as "(idle before) <second op>"
// (at least most of the pause), the ops' nested parts get no line of their own, and the lines are no op (no category).
TEST(ProfileEventsCuda, IdleTimeIsCountedBeforeTheOpThatWaited) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  LoraOnDevice lora;
  Tensor v = Tensor::zeros({256}, DType::F32, Device::cuda());
  lora.run();  // warm-up (plans), not profiled
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EventsOn on;
  ops::add(v, v, v);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the device idles
  lora.run();
  const std::vector<profile::Region> rows = profile::regions();
  const profile::Region* idle = find(rows, "(idle before) lora_linear");
  ASSERT_NE(idle, nullptr);
  EXPECT_EQ(idle->calls, 1);
  EXPECT_GE(idle->seconds, 0.025);
  EXPECT_LT(idle->seconds, 1.0);
  EXPECT_EQ(find(rows, "(idle before) lora_linear.xa"), nullptr);  // parts are inside their op: no gap of their own
  EXPECT_EQ(find(rows, "(idle before) add"), nullptr);  // the first op has no previous one since the reset
  EXPECT_EQ(profile::category("(idle before) lora_linear"), nullptr);
}

}  // namespace
}  // namespace swift::test
#endif
