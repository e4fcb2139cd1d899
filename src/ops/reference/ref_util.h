// ops/reference/ref_util.h — element access shared by the reference ops (internal to src/ops/reference).
//
// Invariants: load converts one stored element (F32/BF16/F16) to fp32 exactly; store rounds a double once to
// fp32 and then to the tensor's dtype (round to nearest even). Flat indices; contiguous tensors.
#pragma once

#include "core/tensor.h"

namespace swift::ops::ref::util {

// Element i of a F32/BF16/F16 tensor as fp32.
inline float load(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::F32: return static_cast<const float*>(t.raw())[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(t.raw())[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(t.raw())[i]);
    default: fail("ref: dtype {} is not a float dtype", dtype_name(t.dtype()));
  }
}

inline void store(const Tensor& t, int64_t i, double value) {
  const float v = static_cast<float>(value);
  switch (t.dtype()) {
    case DType::F32: static_cast<float*>(t.raw())[i] = v; break;
    case DType::BF16: static_cast<uint16_t*>(t.raw())[i] = f32_to_bf16(v); break;
    case DType::F16: static_cast<uint16_t*>(t.raw())[i] = f32_to_f16(v); break;
    default: fail("ref: dtype {} is not a float dtype", dtype_name(t.dtype()));
  }
}

}  // namespace swift::ops::ref::util
