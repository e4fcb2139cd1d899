// ops/cuda/kernels_matmul.cuh — launchers of the small kernels around the matrix products (bias, dbias, LoRA
// dropout, LM-head cross-entropy passes), callable from C++ (g++) translation units.
//
// Invariants: as kernels.cuh — .cu files include only CUDA headers, this header and ops/philox.h; launchers take
// raw device pointers, sizes, dtype codes (0 F32, 1 BF16, 2 F16) and a stream, and return the launch status.
// Row-major everywhere; `ld` is a row stride in elements. All math in fp32; 16-bit outputs are rounded once
// (round to nearest even). Launches with nothing to do return cudaSuccess.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace swift::ops::cuda {

// d[i, j] = (beta == 0 ? 0 : beta * d[i, j]) + (bias ? bias[j] : 0)      d: (n, m) row stride ldd; bias: (m) or null.
cudaError_t launch_scale_add_bias(void* d, int d_dtype, int64_t n, int64_t m, int64_t ldd, float beta,
                                  const void* bias, int bias_dtype, cudaStream_t stream);

// out[j] += sum over the n rows of x[i, j], in a fixed order (deterministic).   x: (n, m); out: (m) F32.
cudaError_t launch_column_sums_add(const void* x, int x_dtype, int64_t n, int64_t m, float* out, cudaStream_t stream);

// Dropout multipliers of ops.h: flat element e keeps when philox_word(seed, e) >= threshold; kept elements are
// scaled by keep_scale (threshold 0, keep_scale 1: identity, no RNG).
// out[e - row0 * k] = x[e] * multiplier(e) for flat e in [row0 * k, (row0 + rows) * k).   x: (N, k); out: (rows, k) F32.
// xa (n, r) F32 = dropout(x) a^T in one pass over x (the multiplier as launch_dropout_rows_to_f32's), for
// r in {8, 16}, x F32 or BF16 (dtype 0 / 1) 16-byte aligned with k % 4 == 0; a: (r, k) F32. Other cases:
// cudaErrorInvalidValue (the caller uses the chunked GEMM path).
cudaError_t launch_lora_xa(const void* x, int x_dtype, const float* a, int64_t n, int64_t k, int r, uint64_t seed,
                           uint32_t threshold, float keep_scale, float* xa, cudaStream_t stream);
// dx (n, k) += scale * multiplier * (g a) in one read and write of dx; g: (n, r) F32, a: (r, k) F32; same
// conditions as launch_lora_xa (dx 16-byte aligned, k % 4 == 0, r in {8, 16}).
cudaError_t launch_lora_dx_fused(void* dx, int dx_dtype, const float* g, const float* a, int64_t n, int64_t k, int r,
                                 float scale, uint64_t seed, uint32_t threshold, float keep_scale, cudaStream_t stream);
// Row slices of the fused da pass for n rows (part needs lora_da_slices(n) * r * k floats).
int64_t lora_da_slices(int64_t n);
// da (r, k) += scale * g^T dropout(x) in one read of x: partial sums per row slice into `part`, then added in slice
// order (deterministic). Same conditions as launch_lora_xa.
cudaError_t launch_lora_da_fused(const void* x, int x_dtype, const float* g, int64_t n, int64_t k, int r, float scale,
                                 uint64_t seed, uint32_t threshold, float keep_scale, float* part, float* da,
                                 cudaStream_t stream);
cudaError_t launch_dropout_rows_to_f32(const void* x, int x_dtype, int64_t row0, int64_t rows, int64_t k,
                                       uint64_t seed, uint32_t threshold, float keep_scale, float* out,
                                       cudaStream_t stream);
// dx[e] += scale * (multiplier(e) * ga[e - row0 * k]) for flat e in the same range.   dx: (N, k); ga: (rows, k) F32.
cudaError_t launch_lora_dx_add(void* dx, int dx_dtype, const float* ga, int64_t row0, int64_t rows, int64_t k,
                               float scale, uint64_t seed, uint32_t threshold, float keep_scale, cudaStream_t stream);

// ---- LM head + cross-entropy (chunked; see ops_matmul.cpp) ----
// dst[i] = src[rows[i]] for i < count.   src: (T, c); dst: (count, c); same dtype (element size from it).
cudaError_t launch_gather_rows(const void* src, int dtype, const int32_t* rows, int64_t count, int64_t c, void* dst,
                               cudaStream_t stream);
// Folds one logits chunk (rows, cols) (row stride ld, vocabulary ids v0 + j) into the running per-row statistics:
// max m, sum l of exp(z - m), first argmax, and the label's logit when the label lies in the chunk.
// first: initialise the statistics from this chunk.
cudaError_t launch_ce_chunk_stats(const float* logits, int64_t rows, int64_t cols, int64_t ld, int64_t v0,
                                  const int32_t* labels, bool first, float* m, float* l, int32_t* argmax,
                                  float* label_logit, cudaStream_t stream);
// lse[i] = m[i] + log(l[i]); loss[i] = lse[i] - label_logit[i].
cudaError_t launch_ce_finish(const float* m, const float* l, const float* label_logit, int64_t rows, float* lse,
                             float* loss, cudaStream_t stream);
// dz[i, j] = coef[i] * (exp(z[i, j] - lse[i]) - (v0 + j == labels[i]))    z: F32 row stride ld; dz: row stride ldz.
cudaError_t launch_ce_dlogits(const float* logits, int64_t rows, int64_t cols, int64_t ld, int64_t v0,
                              const int32_t* labels, const float* lse, const float* coef, void* dz, int dz_dtype,
                              int64_t ldz, cudaStream_t stream);
// out[positions[i], :] = acc[i, :] for i < count (converted to out's dtype).   acc: (count, c) F32; out: (T, c).
cudaError_t launch_scatter_rows_f32(const float* acc, const int32_t* positions, int64_t count, int64_t c, void* out,
                                    int out_dtype, cudaStream_t stream);
// logp[positions[i]] = label_logit[i] - lse[i].
cudaError_t launch_ce_logp(const float* lse, const float* label_logit, const int32_t* positions, int64_t count,
                           float* logp, cudaStream_t stream);
// coef[i] = -dlogp[positions[i]].
cudaError_t launch_ce_coef_from_dlogp(const float* dlogp, const int32_t* positions, int64_t count, float* coef,
                                      cudaStream_t stream);

}  // namespace swift::ops::cuda
