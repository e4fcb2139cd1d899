// ops/cuda/attention_cudnn_kernels.cuh — launchers of the small device kernels around cuDNN's fused attention
// (attention_cudnn_kernels.cu, used by attention_cudnn.cpp).
//
// Invariants: cu_seqlens is validated (monotone from 0 to T); offsets fit I32 (checked by the caller); every
// launcher enqueues on `stream` and returns the launch status.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace swift::ops::cuda {

// ---- device helpers (attention_cudnn_kernels.cu) ----
// From cu_seqlens (B+1), for a batch padded to Bp >= B with empty sequences at the end of the tokens:
// seqlen (Bp) = lengths (0 past B); off_q (Bp+1) = cu * hq * d; off_kv (Bp+1) = cu * hkv * d (cu[B] past B).
cudaError_t launch_cudnn_seqinfo(const int32_t* cu_seqlens, int32_t batch, int32_t padded_batch, int32_t hq,
                                 int32_t hkv, int32_t d, int32_t* seqlen, int32_t* off_q, int32_t* off_kv,
                                 cudaStream_t stream);
// stats (B, Hq, S) -> lse (Hq, T): lse[h, cu[b] + i] = stats[b, h, i] for i < len(b).
cudaError_t launch_cudnn_stats_to_lse(const float* stats, const int32_t* cu_seqlens, int32_t batch, int32_t hq,
                                      int32_t s, int64_t tokens, float* lse, cudaStream_t stream);
// lse (Hq, T) -> stats (Bp, Hq, S), rows i >= len(b) and batches b >= B set to 0.
cudaError_t launch_cudnn_lse_to_stats(const float* lse, const int32_t* cu_seqlens, int32_t batch,
                                      int32_t padded_batch, int32_t hq, int32_t s, int64_t tokens, float* stats,
                                      cudaStream_t stream);

}  // namespace swift::ops::cuda
