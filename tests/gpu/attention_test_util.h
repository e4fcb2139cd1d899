// tests/gpu/attention_test_util.h — shared by the CUDA attention tests (ours and cuDNN's): outputs written into
// NaN-padded device buffers (every element must be written, nothing outside), and error metrics against the CPU
// reference (relative L2 norm, largest absolute error, largest reference magnitude).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/tensor.h"
#include "ops/op_test_util.h"

namespace swift::test {

constexpr int64_t kPad = 64;

// A device tensor of `shape` in the middle of a NaN-filled device buffer (kPad NaN elements on each side).
struct DeviceOut {
  DeviceOut(const Shape& shape, DType dtype) : shape(shape), dtype(dtype) {
    const int64_t n = shape_numel(shape) + 2 * kPad;
    Tensor host = Tensor::empty({n}, dtype);
    for (int64_t i = 0; i < n; ++i) {
      if (dtype == DType::F32) static_cast<float*>(host.raw())[i] = std::nanf("");
      else static_cast<uint16_t*>(host.raw())[i] = 0x7fc0;
    }
    flat = host.to(Device::cuda());
    tensor = Tensor(flat.storage(), flat.byte_offset() + dtype_bytes(dtype, kPad), shape, dtype);
  }
  // The output as F32 on the CPU, after checking every element was written and the padding is intact.
  Tensor result(const char* what) const {
    Tensor host = flat.to(Device::cpu());
    const int64_t n = shape_numel(shape);
    for (int64_t i = 0; i < kPad; ++i) {
      EXPECT_TRUE(std::isnan(host.item(i)) && std::isnan(host.item(kPad + n + i))) << what << ": padding written at " << i;
    }
    Tensor inner(host.storage(), dtype_bytes(dtype, kPad), shape, dtype);
    EXPECT_TRUE(all_finite(inner)) << what << ": element not written or not finite";
    return dtype == DType::F32 ? inner.clone() : inner.to_dtype(DType::F32);
  }
  Shape shape;
  DType dtype;
  Tensor flat, tensor;
};

struct Metrics {
  double rel = 0, max_abs = 0, max_ref = 0;
};
inline Metrics compare(const Tensor& got, const Tensor& ref) {
  Metrics m;
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double a = got.item(i), e = ref.item(i), d = a - e;
    num += d * d;
    den += e * e;
    m.max_abs = std::max(m.max_abs, std::fabs(d));
    m.max_ref = std::max(m.max_ref, std::fabs(e));
  }
  m.rel = den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);  // inf when the reference is all zeros
  if (!std::isfinite(num)) m.rel = INFINITY;
  return m;
}

}  // namespace swift::test
