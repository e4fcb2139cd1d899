// ops/cuda/ops_layout.cpp — layout ops on CUDA: swap_outer_axes as strided 2-D copies (cudaMemcpy2DAsync), and
// copy_columns through launch_copy_rows (a 16-byte copy kernel where aligned, else a 2-D copy).
//
// Invariants: arguments passed detail::check_swap_outer_axes (3-D, same dtype, same device, no overlap); copies are
// enqueued on cuda::stream(device) and return at once; bytes are copied unchanged (bit-equal to the reference). One
// 2-D copy per index of the shorter outer axis (the parallel degree P in practice: a handful of copies per call).
#include <cuda_runtime.h>

#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels_elementwise.cuh"

namespace swift::ops::cuda {

void swap_outer_axes(const Tensor& x, Tensor& y) {
  const int64_t A = x.size(0), B = x.size(1);
  const size_t run = dtype_bytes(x.dtype(), x.size(2));  // bytes of one (E) row
  if (run == 0 || A == 0 || B == 0) return;
  const auto* src = static_cast<const char*>(x.raw());
  auto* dst = static_cast<char*>(y.raw());
  const cudaStream_t s = stream(x.device().index);
  cudaError_t status = cudaSuccess;
  if (A <= B) {  // for each a: x[a] (B contiguous rows) -> y[:, a] (B rows, pitch A runs)
    for (int64_t a = 0; a < A && status == cudaSuccess; ++a) {
      status = cudaMemcpy2DAsync(dst + static_cast<size_t>(a) * run, static_cast<size_t>(A) * run,
                                 src + static_cast<size_t>(a * B) * run, run, run, static_cast<size_t>(B),
                                 cudaMemcpyDeviceToDevice, s);
    }
  } else {  // for each b: x[:, b] (A rows, pitch B runs) -> y[b] (A contiguous rows)
    for (int64_t b = 0; b < B && status == cudaSuccess; ++b) {
      status = cudaMemcpy2DAsync(dst + static_cast<size_t>(b * A) * run, run, src + static_cast<size_t>(b) * run,
                                 static_cast<size_t>(B) * run, run, static_cast<size_t>(A), cudaMemcpyDeviceToDevice, s);
    }
  }
  if (status != cudaSuccess) fail("op swap_outer_axes: cudaMemcpy2DAsync failed: {}", cudaGetErrorString(status));
}

void copy_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t cols) {
  const int64_t N = x.size(0);
  const auto elem = static_cast<int64_t>(dtype_bytes(x.dtype(), 1));
  if (cols == 0 || N == 0) return;
  const cudaError_t status =
      launch_copy_rows(static_cast<const char*>(x.raw()) + elem * x_col, elem * x.size(1),
                       static_cast<char*>(y.raw()) + elem * y_col, elem * y.size(1), elem * cols, N,
                       stream(x.device().index));
  if (status != cudaSuccess) fail("copy_columns: the row copy failed: {}", cudaGetErrorString(status));
}

}  // namespace swift::ops::cuda
