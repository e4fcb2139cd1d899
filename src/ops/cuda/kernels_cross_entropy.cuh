// ops/cuda/kernels_cross_entropy.cuh — launchers of the kernels of the LM head + cross-entropy (ops_cross_entropy.cpp),
// callable from C++ (g++) translation units.
//
// Invariants: as kernels.cuh — .cu files include only CUDA headers and this header; launchers take raw device
// pointers, sizes, dtype codes (0 F32, 1 BF16, 2 F16) and a stream, and return the launch status. Row-major; `ld` is
// a row stride in elements. All math in fp32 (expf / logf); 16-bit outputs are rounded once (nearest even). Launches
// with nothing to do return cudaSuccess. Logits blocks are (rows, cols) F32 with ld % 4 == 0 and a 16-byte aligned
// base (every row is then a run of float4), else the launch returns cudaErrorInvalidValue.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace swift::ops::cuda {

// dst[i] = src[rows[i]] for i < count.   src: (T, c); dst: (count, c); same dtype (element size from it).
cudaError_t launch_gather_rows(const void* src, int dtype, const int32_t* rows, int64_t count, int64_t c, void* dst,
                               cudaStream_t stream);

// Per row i of a logits block (one thread block per row, one read of the row): lse[i] = log sum_j exp(z[i, j]),
// label_logit[i] = z[i, labels[i]] (0 when labels[i] lies outside [0, cols): a vocabulary shard's token whose label
// is another shard's), loss[i] = lse[i] - label_logit[i], argmax[i] = the first j of the largest z[i, j] (0 when no
// logit exceeds -inf), row_max[i] = that largest logit (row_max may be null).
cudaError_t launch_ce_row_stats(const float* logits, int64_t rows, int64_t cols, int64_t ld, const int32_t* labels,
                                float* lse, float* label_logit, float* loss, int32_t* argmax, float* row_max,
                                cudaStream_t stream);

// In place: overwrites each logits row with dz[i, j] = coef[i] * (exp(z[i, j] - lse[i]) - (j == labels[i])) (labels
// outside [0, cols) match no column; lse may be the whole vocabulary's, for a shard of it) in
// dz_dtype (0 F32, 1 BF16, 2 F16). Row i of dz starts where row i of z starts: its row stride is ld * 4 /
// sizeof(dz element) elements (ld for F32, 2 ld for 16-bit), so a 16-bit dz fills the first half of each fp32 row.
// Columns [cols, round_up(cols, 4)) of dz are set to 0.
cudaError_t launch_ce_dlogits_in_place(float* logits, int64_t rows, int64_t cols, int64_t ld, const int32_t* labels,
                                       const float* lse, const float* coef, int dz_dtype, cudaStream_t stream);

// One read of each row for the gradients (instead of launch_ce_row_stats, then launch_ce_dlogits_in_place): the
// statistics of launch_ce_row_stats (the same bits), and the row overwritten in place (a 16-bit P in the first half
// of each fp32 row, as dz) with unnormalised probabilities P[i, j] = exp(z[i, j] - shift[i]), except
// P[i, labels[i]] = expm1(z[i, labels[i]] - lse_dz[i]) / E[i]; row_e[i] = E[i] = exp(shift[i] - lse_dz[i]), where
// lse_dz = whole_lse (a vocabulary shard: the whole vocabulary's lse) or, when whole_lse is null, the row's own lse.
// Then dz[i, :] = coef[i] E[i] P[i, :] is launch_ce_dlogits_in_place's dz: the products read P and apply coef E per
// row (launch_scatter_rows_f32, launch_ce_scale_rows). shift[i] is chosen in the pass (the first tile's largest
// logit, moved up past later ones that exceed it by 40): every P <= e^40 and E >= e^-52 (fp32 and bf16 normal
// range). Columns [cols, round_up(cols, 4)) of P are set to 0.
cudaError_t launch_ce_one_pass(float* logits, int64_t rows, int64_t cols, int64_t ld, const int32_t* labels,
                               const float* whole_lse, float* lse, float* label_logit, float* loss, int32_t* argmax,
                               float* row_max, float* row_e, int p_dtype, cudaStream_t stream);
// dst[i, :] = src[i, :] * row_e[i] * (coef[i] / coef_div) for i < count, rounded once to dtype (src and dst: (count,
// c) of that dtype). The one-pass gradient's per-row factor moved onto the rows of H for dhead += P^T (E coef H).
cudaError_t launch_ce_scale_rows(const void* src, int dtype, int64_t count, int64_t c, const float* row_e,
                                 const float* coef, float coef_div, void* dst, cudaStream_t stream);

// out[positions[i], :] = acc[i, :] (times row_e[i] * coef[i] when both are given) for i < count, converted to out's
// dtype.   acc: (count, c) F32; out: (T, c).
cudaError_t launch_scatter_rows_f32(const float* acc, const int32_t* positions, int64_t count, int64_t c, void* out,
                                    int out_dtype, cudaStream_t stream, const float* row_e = nullptr,
                                    const float* coef = nullptr);
// logp[positions[i]] = label_logit[i] - lse[i].
cudaError_t launch_ce_logp(const float* lse, const float* label_logit, const int32_t* positions, int64_t count,
                           float* logp, cudaStream_t stream);
// coef[i] = -dlogp[positions[i]].
cudaError_t launch_ce_coef_from_dlogp(const float* dlogp, const int32_t* positions, int64_t count, float* coef,
                                      cudaStream_t stream);

}  // namespace swift::ops::cuda
