// ops/reference/layout.cpp — reference of the layout ops: element by element, no memcpy of runs.
//
// Invariants: checks through detail::check_<op> first (the same rules as ops::); bytes are copied unchanged.
#include "ops/op_checks.h"
#include "ops/reference.h"

namespace swift::ops::ref {

void swap_outer_axes(const Tensor& x, Tensor& y) {
  detail::check_swap_outer_axes(x, y);
  SWIFT_CHECK(x.device().is_cpu(), "ref::swap_outer_axes: the reference runs on CPU tensors, got {}", x.str());
  const int64_t A = x.size(0), B = x.size(1), E = x.size(2);
  const size_t elem = dtype_bytes(x.dtype(), 1);
  const auto* src = static_cast<const unsigned char*>(x.raw());
  auto* dst = static_cast<unsigned char*>(y.raw());
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t e = 0; e < E; ++e) {
        for (size_t byte = 0; byte < elem; ++byte) {
          dst[((b * A + a) * E + e) * static_cast<int64_t>(elem) + static_cast<int64_t>(byte)] =
              src[((a * B + b) * E + e) * static_cast<int64_t>(elem) + static_cast<int64_t>(byte)];
        }
      }
    }
  }
}

void copy_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t cols) {
  detail::check_copy_columns(x, x_col, y, y_col, cols);
  SWIFT_CHECK(x.device().is_cpu(), "ref::copy_columns: the reference runs on CPU tensors, got {}", x.str());
  const int64_t N = x.size(0), X = x.size(1), Y = y.size(1);
  const auto elem = static_cast<int64_t>(dtype_bytes(x.dtype(), 1));
  const auto* src = static_cast<const unsigned char*>(x.raw());
  auto* dst = static_cast<unsigned char*>(y.raw());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < cols; ++j) {
      for (int64_t byte = 0; byte < elem; ++byte) {
        dst[(n * Y + y_col + j) * elem + byte] = src[(n * X + x_col + j) * elem + byte];
      }
    }
  }
}

}  // namespace swift::ops::ref
