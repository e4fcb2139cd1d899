// ops/cuda/kernels_matmul.cuh — launchers of the small kernels around the matrix products (bias, dbias, LoRA
// dropout), callable from C++ (g++) translation units.
//
// Invariants: as kernels.cuh — .cu files include only CUDA headers, this header and ops/philox.h; launchers take
// raw device pointers, sizes, dtype codes (0 F32, 1 BF16, 2 F16) and a stream, and return the launch status.
// Row-major everywhere; `ld` is a row stride in elements. All math in fp32; 16-bit outputs are rounded once
// (round to nearest even). Launches with nothing to do return cudaSuccess.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "ops/philox.h"

namespace swift::ops::cuda {

// d[i, j] = (beta == 0 ? 0 : beta * d[i, j]) + (bias ? bias[j] : 0)      d: (n, m) row stride ldd; bias: (m) or null.
cudaError_t launch_scale_add_bias(void* d, int d_dtype, int64_t n, int64_t m, int64_t ldd, float beta,
                                  const void* bias, int bias_dtype, cudaStream_t stream);

// out[j] += sum over the n rows of x[i, j], in a fixed order that depends on (n, m) only (deterministic): row chunks
// summed in parallel into `partial` (column_sums_partial_floats(n, m) floats, unused when that is 0), then the chunks
// in order.   x: (n, m) F32 / BF16 / F16; out: (m) F32.
int64_t column_sums_partial_floats(int64_t n, int64_t m);
cudaError_t launch_column_sums_add(const void* x, int x_dtype, int64_t n, int64_t m, float* out, float* partial,
                                   cudaStream_t stream);

// Dropout multipliers of ops.h: element (i, j) of the (N, k) operand keeps when dropout_draw(seed,
// dropout_index(map, i, j, k)) >= threshold (map {}: the flat index e = i * k + j); kept elements are scaled by
// keep_scale (threshold 0, keep_scale 1: identity, no RNG).
// out[e - row0 * k] = x[e] * multiplier(e) for flat e in [row0 * k, (row0 + rows) * k).   x: (N, k); out: (rows, k) F32.
cudaError_t launch_dropout_rows_to_f32(const void* x, int x_dtype, int64_t row0, int64_t rows, int64_t k,
                                       uint64_t seed, uint32_t threshold, float keep_scale, const DropoutMap& map,
                                       float* out, cudaStream_t stream);
// dx[e] += scale * (multiplier(e) * ga[e - row0 * k]) for flat e in the same range.   dx: (N, k); ga: (rows, k) F32.
cudaError_t launch_lora_dx_add(void* dx, int dx_dtype, const float* ga, int64_t row0, int64_t rows, int64_t k,
                               float scale, uint64_t seed, uint32_t threshold, float keep_scale, const DropoutMap& map,
                               cudaStream_t stream);

}  // namespace swift::ops::cuda
