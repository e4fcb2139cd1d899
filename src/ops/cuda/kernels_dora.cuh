// ops/cuda/kernels_dora.cuh — launchers of the small DoRA kernels (dora.cu) used by ops_dora.cpp around the
// matrix products: the per-row weight norm, the magnitude scaling g = magnitude / weight_norm of the output and of
// dy, and the deterministic magnitude-gradient column reduction. Callable from C++ (g++) translation units.
//
// Invariants:
//  - As kernels.cuh: dora.cu includes only CUDA headers and this header (no fmt, core/error.h, core/tensor.h);
//    launchers take raw device pointers, sizes, dtype codes (0 F32, 1 BF16, 2 F16) and a stream, only
//    enqueue (never synchronise) and return the launch status; launches with nothing to do return cudaSuccess.
//  - Row-major, contiguous: element (i, j) of an (n, m) matrix is at i * m + j.
//  - Math in fp32; sums named "fp64" accumulate in double. g[j] is one fp32 division magnitude[j] / weight_norm[j]
//    (as ops/cpu/dora.cpp), recomputed where it is used. 16-bit outputs are rounded once.
//  - Deterministic: every output element has one writer and a fixed summation order (no atomics); the fp64 row
//    chunks of the magnitude gradient depend only on (n, m).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace swift::ops::cuda {

// norm[j] = float(sqrt(sum_i double(v)^2)), v = w[j, i] + scale * ba[j, i] (fp32), for j < rows; squares: the sum
// itself, float(sum_i double(v)^2) (tensor parallelism all-reduces those before launch_dora_sqrt).
//   w: (rows, k) of w_dtype; ba: (rows, k) F32 = (b a) rows, or null (r = 0: v = w); norm: (rows) F32.
//   One block per row; per-thread fp64 partials, then a fixed tree. k == 0 writes 0.
cudaError_t launch_dora_row_norm(const void* w, int w_dtype, const float* ba, int64_t rows, int64_t k, float scale,
                                 bool squares, float* norm, cudaStream_t stream);
// x[i] = sqrt(x[i]) (IEEE round to nearest, __fsqrt_rn: the CPU's std::sqrt bits), i < n.
cudaError_t launch_dora_sqrt(float* x, int64_t n, cudaStream_t stream);

// out[i, j] = (magnitude[j] / weight_norm[j] + offset) * src[i, j]       src, out: (n, m) of dtype (may alias).
//   offset 0: dh = g dy; offset -1: dh - dy = (g - 1) dy.
cudaError_t launch_dora_scale_rows(const void* src, int dtype, const float* magnitude, const float* weight_norm,
                                   float offset, int64_t n, int64_t m, void* out, cudaStream_t stream);

// y[i, j] (=|+= with accumulate) (t[i, j] + bias[j]) + g[j] * h[i, j].
//   y: (n, m) of y_dtype; h: (n, m) F32; t: (n, m) F32 or null (0); bias: (m) of bias_dtype or null (0).
cudaError_t launch_dora_output(void* y, int y_dtype, const float* h, const float* t, const void* bias, int bias_dtype,
                               const float* magnitude, const float* weight_norm, int64_t n, int64_t m, bool accumulate,
                               cudaStream_t stream);

// Row chunks of the magnitude gradient: each chunk's fp64 column partials are one slice of the scratch. At most
// 128 chunks (grid.y) of at least 64 rows; a function of n only, so the summation order is fixed.
inline int64_t dora_magnitude_rows_per_chunk(int64_t n) {
  const int64_t per = (n + 127) / 128;
  return per < 64 ? 64 : per;
}
inline int64_t dora_magnitude_chunks(int64_t n) {
  const int64_t per = dora_magnitude_rows_per_chunk(n);
  return n <= 0 ? 0 : (n + per - 1) / per;
}
// Bytes of scratch launch_dora_magnitude_grad needs: dora_magnitude_chunks(n) * m doubles.
inline size_t dora_magnitude_scratch_bytes(int64_t n, int64_t m) {
  return static_cast<size_t>(dora_magnitude_chunks(n)) * static_cast<size_t>(m < 0 ? 0 : m) * sizeof(double);
}
// dmagnitude[j] = float(double(dmagnitude[j]) + (sum_i double(dy[i, j]) * double(h[i, j])) / weight_norm[j]).
//   dy: (n, m) of dy_dtype; h: (n, m) F32; dmagnitude, weight_norm: (m) F32. scratch: at least
//   dora_magnitude_scratch_bytes(n, m) bytes, 8-byte aligned, untouched by others until the stream ran the work.
//   Pass 1: per (32-column tile, row chunk) block, fp64 partial per column; pass 2: per column, the chunks'
//   partials summed in chunk order.
cudaError_t launch_dora_magnitude_grad(const void* dy, int dy_dtype, const float* h, const float* weight_norm,
                                       int64_t n, int64_t m, float* dmagnitude, void* scratch, size_t scratch_bytes,
                                       cudaStream_t stream);

}  // namespace swift::ops::cuda
