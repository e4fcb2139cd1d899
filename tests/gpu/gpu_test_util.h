// tests/gpu/gpu_test_util.h — helpers shared by the CUDA op tests that compare against the CPU reference:
// inputs made once on the CPU and copied to the device, device outputs inside guard bytes that start as NaN,
// and a relative-norm comparison that records the worst error per (op, dtype, output) for a Summary test.
//
// Invariants: everything sits in an unnamed namespace, so each test file keeps its own worst-error table and tag.
// Include only in CUDA builds (after #ifdef SWIFT_WITH_CUDA).
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "ops/backends.h"
#include "ops/op_test_util.h"

namespace swift::test {
namespace {

bool have_device() {
  ops::init_backends();
  return ops::cuda_device_count() > 0;
}

// A host tensor's values as they look after rounding to `dtype` (F32 tensor).
Tensor rounded(const Tensor& f32, DType dtype) {
  if (dtype == DType::F32) return f32.clone();
  return f32.to_dtype(dtype).to_dtype(DType::F32);
}

// An input: the reference's F32 CPU copy (rounded to dtype) and the device tensor of dtype.
struct Input {
  Tensor ref, dev;
};
Input make_input(const Shape& shape, DType dtype, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Tensor base = random_tensor(shape, DType::F32, seed, lo, hi);
  Input in;
  in.ref = rounded(base, dtype);
  in.dev = (dtype == DType::F32 ? base : base.to_dtype(dtype)).to(Device::cuda());
  return in;
}
// A weight (F32/BF16/F16) for the reference (same dtype, CPU) and the device.
[[maybe_unused]] Input make_weight(const Shape& shape, DType dtype, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  Input in;
  in.ref = random_tensor(shape, dtype, seed, lo, hi);
  in.dev = in.ref.to(Device::cuda());
  return in;
}

// An output on the device inside guard bytes; starts NaN (or `initial`, converted to dtype).
class DeviceOut {
 public:
  static constexpr size_t kGuard = 256;
  DeviceOut(const Shape& shape, DType dtype) : host_(shape, dtype) {
    const size_t total = host_.tensor.nbytes() + 2 * kGuard;
    storage_ = Storage::allocate(total, Device::cuda(), MemoryCategory::Other);
    tensor = Tensor(storage_, kGuard, shape, dtype);
    upload();
  }
  void set(const Tensor& f32) {
    host_.set(host_.tensor.dtype() == DType::F32 ? f32 : f32.to_dtype(host_.tensor.dtype()));
    upload();
  }
  // The output as F32 on the CPU; also checks the guard bytes.
  Tensor fetch() {
    const size_t total = host_.tensor.nbytes() + 2 * kGuard;
    device_backend(DeviceType::CUDA)->copy(host_bytes(), Device::cpu(), storage_->data(), Device::cuda(), total);
    EXPECT_TRUE(host_.guards_intact());
    return host_.tensor.dtype() == DType::F32 ? host_.tensor.clone() : host_.tensor.to_dtype(DType::F32);
  }
  Tensor tensor;

 private:
  void* host_bytes() { return static_cast<char*>(host_.tensor.raw()) - kGuard; }
  void upload() {
    const size_t total = host_.tensor.nbytes() + 2 * kGuard;
    device_backend(DeviceType::CUDA)->copy(storage_->data(), Device::cuda(), host_bytes(), Device::cpu(), total);
  }
  Guarded host_;
  std::shared_ptr<Storage> storage_;
};

// Worst relative-norm error per (op, dtype, output), printed by the Summary test at the end.
std::map<std::string, double>& worst_errors() {
  static std::map<std::string, double> m;
  return m;
}
std::string g_tag;  // "op activation-dtype" of the case being checked

double rel_norm(const Tensor& out, const Tensor& ref) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double d = out.item(i) - ref.item(i);
    num += d * d;
    den += ref.item(i) * ref.item(i);
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Finite, relative norm within tol, and element-wise within tol-scaled bounds.
void expect_close(const Tensor& out, const Tensor& ref, double tol, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(out.numel(), ref.numel());
  EXPECT_TRUE(all_finite(out));
  const double rn = rel_norm(out, ref);
  double& worst = worst_errors()[g_tag + " " + what];
  worst = std::max(worst, rn);
  EXPECT_LE(rn, tol) << what << ": relative norm error " << rn;
  double max_ref = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i) max_ref = std::max(max_ref, std::fabs(ref.item(i)));
  EXPECT_TRUE(all_close(out, ref, 2.0 * tol * max_ref + 1e-30, tol));
}

}  // namespace
}  // namespace swift::test
