// tests/ops/op_test_util.h — helpers of the op tests: deterministic random tensors, guarded outputs,
// NaN/Inf checks and tolerance comparisons with readable failure messages.
//
// Invariants:
//  - Random data depends only on the seed passed in (std::mt19937 + our own uniform mapping), so failures
//    reproduce on any machine.
//  - A Guarded tensor lives inside a larger storage whose bytes outside the tensor hold a sentinel pattern;
//    the tensor's own bytes start as NaN, so an element a kernel forgets to write fails the finite check.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace swift::test {

// Uniform in [lo, hi), from a fixed-seed generator; F32/BF16/F16 tensors get the value rounded to their dtype.
inline Tensor random_tensor(const Shape& shape, DType dtype, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  Tensor t = Tensor::empty(shape, dtype);
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float u = static_cast<float>(gen() >> 8) * (1.0f / 16777216.0f);
    const float v = lo + (hi - lo) * u;
    switch (dtype) {
      case DType::F32: static_cast<float*>(t.raw())[i] = v; break;
      case DType::BF16: static_cast<uint16_t*>(t.raw())[i] = f32_to_bf16(v); break;
      case DType::F16: static_cast<uint16_t*>(t.raw())[i] = f32_to_f16(v); break;
      default: ADD_FAILURE() << "random_tensor: unsupported dtype"; break;
    }
  }
  return t;
}

// A tensor view in the middle of a storage padded by `guard` sentinel bytes on both sides.
class Guarded {
 public:
  static constexpr uint8_t kSentinel = 0xA5;
  static constexpr size_t kGuardBytes = 256;

  Guarded(const Shape& shape, DType dtype) {
    const size_t bytes = dtype_bytes(dtype, shape_numel(shape));
    storage_ = Storage::allocate(bytes + 2 * kGuardBytes, Device::cpu(), MemoryCategory::Other);
    std::memset(storage_->data(), kSentinel, bytes + 2 * kGuardBytes);
    tensor = Tensor(storage_, kGuardBytes, shape, dtype);
    fill_nan();
  }
  // Sets every element to NaN (float dtypes).
  void fill_nan() {
    const int64_t n = tensor.numel();
    if (tensor.dtype() == DType::F32) {
      for (int64_t i = 0; i < n; ++i) static_cast<float*>(tensor.raw())[i] = std::nanf("");
    } else if (tensor.dtype() == DType::BF16 || tensor.dtype() == DType::F16) {
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(tensor.raw())[i] = 0x7fc0;  // NaN in both
    }
  }
  // Copies values in (for outputs that are also inputs: accumulate, beta != 0, in-place ops).
  void set(const Tensor& values) { tensor.copy_from(values); }
  // True when no byte outside the tensor changed.
  ::testing::AssertionResult guards_intact() const {
    const uint8_t* bytes = static_cast<const uint8_t*>(storage_->data());
    const size_t inner = tensor.nbytes();
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (bytes[i] != kSentinel) return ::testing::AssertionFailure() << "guard byte " << i << " before the output changed";
      if (bytes[kGuardBytes + inner + i] != kSentinel) {
        return ::testing::AssertionFailure() << "guard byte " << i << " after the output changed";
      }
    }
    return ::testing::AssertionSuccess();
  }

  Tensor tensor;

 private:
  std::shared_ptr<Storage> storage_;
};

// Every element finite (no NaN, no Inf).
inline ::testing::AssertionResult all_finite(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = t.item(i);
    if (!std::isfinite(v)) return ::testing::AssertionFailure() << t.str() << " element " << i << " is " << v;
  }
  return ::testing::AssertionSuccess();
}

// |actual - expected| <= atol + rtol * |expected| element-wise; reports the worst element and the count.
inline ::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  if (actual.numel() != expected.numel()) {
    return ::testing::AssertionFailure() << "element counts differ: " << actual.str() << " vs " << expected.str();
  }
  int64_t bad = 0, worst = -1;
  double worst_excess = 0.0, max_abs = 0.0;
  for (int64_t i = 0; i < actual.numel(); ++i) {
    const double a = actual.item(i), e = expected.item(i);
    const double diff = std::fabs(a - e);
    if (!(std::isfinite(a) && std::isfinite(e))) {
      if (!(std::isnan(a) && std::isnan(e)) && a != e) {
        ++bad;
        if (worst < 0) worst = i;
      }
      continue;
    }
    max_abs = std::max(max_abs, diff);
    const double excess = diff - (atol + rtol * std::fabs(e));
    if (excess > 0) {
      ++bad;
      if (worst < 0 || excess > worst_excess) {
        worst = i;
        worst_excess = excess;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess() << "max abs error " << max_abs;
  return ::testing::AssertionFailure() << bad << " of " << actual.numel() << " elements differ beyond atol " << atol
                                       << " rtol " << rtol << "; worst at " << worst << ": " << actual.item(worst)
                                       << " vs expected " << expected.item(worst) << " (max abs error " << max_abs
                                       << ")";
}

// Bit-identical float tensors.
inline ::testing::AssertionResult bit_equal(const Tensor& a, const Tensor& b) {
  if (a.nbytes() != b.nbytes() || a.dtype() != b.dtype()) {
    return ::testing::AssertionFailure() << a.str() << " vs " << b.str();
  }
  if (std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0) return ::testing::AssertionSuccess();
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (a.item(i) != b.item(i)) {
      return ::testing::AssertionFailure() << "first difference at element " << i << ": " << a.item(i) << " vs "
                                           << b.item(i);
    }
  }
  return ::testing::AssertionFailure() << "bytes differ (NaN payloads?)";
}

// Distance in units in the last place between two finite floats of the same sign region.
inline int64_t ulp_distance(float a, float b) {
  auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  const int64_t d = key(a) - key(b);
  return d < 0 ? -d : d;
}

// Runs `fn` and checks it throws swift::Error whose message contains every string in `parts`.
template <typename Fn>
::testing::AssertionResult throws_error(Fn&& fn, std::vector<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& part : parts) {
      if (message.find(part) == std::string::npos) {
        return ::testing::AssertionFailure() << "message '" << message << "' lacks '" << part << "'";
      }
    }
    return ::testing::AssertionSuccess() << message;
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-swift exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "did not throw";
}

// What ops::rope_qkv is defined as, spelled out for its tests: q's and k's blocks roped and v's copied, out of the
// packed rows (forward) or back into them (backward, q / k / v holding their gradients).
inline void rope_qkv_in_parts(Tensor& packed, Tensor& q, Tensor& k, Tensor& v, const Tensor& positions,
                              const ops::RopeFrequencies& freqs, bool backward) {
  const int64_t d = 2 * static_cast<int64_t>(freqs.inv_freq.size()), nq = q.size(1), nkv = k.size(1);
  if (backward) {
    ops::rope_columns(q, 0, packed, 0, nq / d, positions, freqs, true);
    ops::rope_columns(k, 0, packed, nq, nkv / d, positions, freqs, true);
    ops::copy_columns(v, 0, packed, nq + nkv, nkv);
  } else {
    ops::rope_columns(packed, 0, q, 0, nq / d, positions, freqs, false);
    ops::rope_columns(packed, nq, k, 0, nkv / d, positions, freqs, false);
    ops::copy_columns(packed, nq + nkv, v, 0, nkv);
  }
}

}  // namespace swift::test
