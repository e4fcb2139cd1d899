// ops/cpu/layout.cpp — layout ops on the CPU: swap_outer_axes copies runs of E elements, copy_columns a run of
// columns per row; rows in parallel.
//
// Invariants: arguments passed detail::check_swap_outer_axes (3-D, same dtype, no overlap); bytes are copied
// unchanged, so the result equals the reference bit for bit.
#include <cstring>

#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"

namespace swift::ops::cpu {

void swap_outer_axes(const Tensor& x, Tensor& y) {
  SWIFT_PROFILE("swap_outer_axes");
  const int64_t A = x.size(0), B = x.size(1);
  const size_t run = dtype_bytes(x.dtype(), x.size(2));  // bytes of one (E) row
  const auto* src = static_cast<const char*>(x.raw());
  auto* dst = static_cast<char*>(y.raw());
#pragma omp parallel for collapse(2) schedule(static) if (A * B * static_cast<int64_t>(run) > (1 << 16))
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t a = 0; a < A; ++a) {
      std::memcpy(dst + static_cast<size_t>(b * A + a) * run, src + static_cast<size_t>(a * B + b) * run, run);
    }
  }
}

void copy_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t cols) {
  SWIFT_PROFILE("copy_columns");
  const int64_t N = x.size(0);
  const size_t elem = dtype_bytes(x.dtype(), 1), run = elem * static_cast<size_t>(cols);
  const size_t x_row = elem * static_cast<size_t>(x.size(1)), y_row = elem * static_cast<size_t>(y.size(1));
  const auto* src = static_cast<const char*>(x.raw()) + elem * static_cast<size_t>(x_col);
  auto* dst = static_cast<char*>(y.raw()) + elem * static_cast<size_t>(y_col);
  if (run == 0) return;
#pragma omp parallel for schedule(static) if (N * static_cast<int64_t>(run) > (1 << 16))
  for (int64_t n = 0; n < N; ++n) std::memcpy(dst + static_cast<size_t>(n) * y_row, src + static_cast<size_t>(n) * x_row, run);
}

}  // namespace swift::ops::cpu
