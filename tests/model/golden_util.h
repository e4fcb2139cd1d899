// tests/model/golden_util.h — comparing logits (or any F32 tensor) with a reference for the golden tests:
// max abs error, relative L2 error, non-finite count, and where the worst element is, printed in terms a
// reader can act on (token, sequence, position, vocabulary id).
//
// Invariants:
//  - Both tensors are CPU, contiguous, F32 (BF16/F16 are widened); same number of elements (else throws).
//  - Errors are accumulated in double. A NaN or Inf in `actual` makes the comparison fail whatever the
//    tolerances: max_abs becomes +inf.
//  - rel_l2 = ||actual - expected||_2 / ||expected||_2 (expected of norm 0 gives ||actual - expected||_2).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace swift::golden {

struct TensorDiff {
  Shape shape;
  int64_t count = 0;
  int64_t nonfinite = 0;      // NaN/Inf in actual
  double max_abs = 0.0;       // max |actual - expected|
  int64_t worst = -1;         // flat index of the max
  double worst_actual = 0.0, worst_expected = 0.0;
  double rel_l2 = 0.0;
  double expected_abs_max = 0.0;

  bool within(double max_abs_tol, double rel_l2_tol) const {
    return nonfinite == 0 && max_abs <= max_abs_tol && rel_l2 <= rel_l2_tol;
  }
};

inline double element(const Tensor& t, const float* f32, int64_t i) {
  return f32 ? static_cast<double>(f32[i]) : t.item(i);
}

inline TensorDiff compare(const Tensor& actual, const Tensor& expected) {
  SWIFT_CHECK(actual.device().is_cpu() && expected.device().is_cpu(), "golden compare: tensors must be on the CPU");
  SWIFT_CHECK(actual.numel() == expected.numel(), "golden compare: actual {} vs expected {}: element counts differ",
              actual.str(), expected.str());
  const float* a32 = actual.dtype() == DType::F32 ? actual.data<float>() : nullptr;
  const float* e32 = expected.dtype() == DType::F32 ? expected.data<float>() : nullptr;
  TensorDiff d;
  d.shape = expected.shape();
  d.count = expected.numel();
  double diff2 = 0.0, ref2 = 0.0;
  for (int64_t i = 0; i < d.count; ++i) {
    const double a = element(actual, a32, i), e = element(expected, e32, i);
    ref2 += e * e;
    d.expected_abs_max = std::max(d.expected_abs_max, std::abs(e));
    if (!std::isfinite(a)) {
      if (d.nonfinite++ == 0) {
        d.worst = i;
        d.worst_actual = a;
        d.worst_expected = e;
      }
      d.max_abs = std::numeric_limits<double>::infinity();
      continue;
    }
    const double err = std::abs(a - e);
    diff2 += err * err;
    if (d.nonfinite == 0 && err > d.max_abs) {
      d.max_abs = err;
      d.worst = i;
      d.worst_actual = a;
      d.worst_expected = e;
    }
  }
  d.rel_l2 = d.nonfinite ? std::numeric_limits<double>::infinity()
                         : (ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2));
  return d;
}

// Names a flat index of a (T, N) tensor of a packed batch: "token 17 (sequence 1, position 4), column 40".
// `cu_seqlens` (B+1, I32) may be undefined (then only the row is named); `column_name` names the column kind.
inline std::string locate(const TensorDiff& d, int64_t index, const Tensor& cu_seqlens = Tensor(),
                          const char* column_name = "column") {
  std::ostringstream out;
  if (d.shape.size() != 2) {
    out << "element " << index;
    return out.str();
  }
  const int64_t cols = d.shape[1];
  const int64_t row = index / cols, col = index % cols;
  out << "row " << row;
  if (cu_seqlens.defined()) {
    const int32_t* cu = cu_seqlens.data<int32_t>();
    for (int64_t b = 0; b + 1 < cu_seqlens.numel(); ++b) {
      if (row >= cu[b] && row < cu[b + 1]) {
        out << " (sequence " << b << ", position " << row - cu[b] << ")";
        break;
      }
    }
  }
  out << ", " << column_name << " " << col;
  return out.str();
}

inline std::string describe(const TensorDiff& d, const Tensor& cu_seqlens = Tensor(), const char* column_name = "column") {
  std::ostringstream out;
  out.precision(4);
  out << "shape " << shape_str(d.shape) << ": max_abs " << std::scientific << d.max_abs << ", rel_l2 " << d.rel_l2
      << ", |expected| max " << std::defaultfloat << d.expected_abs_max;
  if (d.nonfinite) out << ", " << d.nonfinite << " non-finite value(s) in actual, first";
  if (d.worst >= 0) {
    out.precision(8);
    out << "; worst at " << locate(d, d.worst, cu_seqlens, column_name) << ": actual " << d.worst_actual
        << " expected " << d.worst_expected;
  }
  return out.str();
}

// gtest assertion: EXPECT_TRUE(golden::close("case x logits", actual, expected, tol_abs, tol_rel, cu)).
inline ::testing::AssertionResult close(const std::string& what, const Tensor& actual, const Tensor& expected,
                                        double max_abs_tol, double rel_l2_tol, const Tensor& cu_seqlens = Tensor(),
                                        const char* column_name = "column") {
  const TensorDiff d = compare(actual, expected);
  std::ostringstream tol;
  tol.precision(3);
  tol << std::scientific << " [tolerances: max_abs " << max_abs_tol << ", rel_l2 " << rel_l2_tol << "]";
  if (d.within(max_abs_tol, rel_l2_tol)) {
    return ::testing::AssertionSuccess() << what << ": " << describe(d, cu_seqlens, column_name) << tol.str();
  }
  return ::testing::AssertionFailure() << what << " differs from the reference: " << describe(d, cu_seqlens, column_name)
                                       << tol.str();
}

}  // namespace swift::golden
