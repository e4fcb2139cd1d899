// ops/cuda/attention_cudnn_kernels.cu — the small device kernels around cuDNN's fused attention
// (attention_cudnn.cpp): per-sequence lengths and ragged element offsets from cu_seqlens, and the conversion of
// the softmax statistics between cuDNN's padded (B, Hq, S) layout and our lse (Hq, T).
//
// Invariants: cu_seqlens is validated (monotone from 0 to T); offsets fit I32 (checked by the caller); every
// kernel runs on the given stream and only reads / writes the ranges named in attention_cudnn_kernels.cuh.
#include "ops/cuda/attention_cudnn_kernels.cuh"

namespace swift::ops::cuda {

namespace {

// Entries b >= batch (up to padded_batch) are empty sequences at the end of the tokens.
__global__ void seqinfo_kernel(const int32_t* cu, int32_t batch, int32_t padded_batch, int32_t q_mult,
                               int32_t kv_mult, int32_t* seqlen, int32_t* off_q, int32_t* off_kv) {
  for (int32_t b = threadIdx.x; b <= padded_batch; b += blockDim.x) {
    const int32_t start = cu[b < batch ? b : batch];
    if (b < padded_batch) seqlen[b] = b < batch ? cu[b + 1] - start : 0;
    off_q[b] = start * q_mult;
    off_kv[b] = start * kv_mult;
  }
}

// One block per (b, h); threads over the S padded rows.
__global__ void stats_to_lse_kernel(const float* stats, const int32_t* cu, int32_t hq, int32_t s, int64_t tokens,
                                    float* lse) {
  const int32_t b = blockIdx.x / hq, h = blockIdx.x % hq;
  const int32_t start = cu[b], len = cu[b + 1] - start;
  const float* row = stats + (static_cast<int64_t>(b) * hq + h) * s;
  for (int32_t i = threadIdx.x; i < len; i += blockDim.x) lse[h * tokens + start + i] = row[i];
}

__global__ void lse_to_stats_kernel(const float* lse, const int32_t* cu, int32_t batch, int32_t hq, int32_t s,
                                    int64_t tokens, float* stats) {
  const int32_t b = blockIdx.x / hq, h = blockIdx.x % hq;
  const int32_t start = b < batch ? cu[b] : 0, len = b < batch ? cu[b + 1] - start : 0;
  float* row = stats + (static_cast<int64_t>(b) * hq + h) * s;
  for (int32_t i = threadIdx.x; i < s; i += blockDim.x) row[i] = i < len ? lse[h * tokens + start + i] : 0.0f;
}

}  // namespace

cudaError_t launch_cudnn_seqinfo(const int32_t* cu_seqlens, int32_t batch, int32_t padded_batch, int32_t hq,
                                 int32_t hkv, int32_t d, int32_t* seqlen, int32_t* off_q, int32_t* off_kv,
                                 cudaStream_t stream) {
  seqinfo_kernel<<<1, 256, 0, stream>>>(cu_seqlens, batch, padded_batch, hq * d, hkv * d, seqlen, off_q, off_kv);
  return cudaGetLastError();
}

cudaError_t launch_cudnn_stats_to_lse(const float* stats, const int32_t* cu_seqlens, int32_t batch, int32_t hq,
                                      int32_t s, int64_t tokens, float* lse, cudaStream_t stream) {
  if (batch == 0) return cudaSuccess;
  stats_to_lse_kernel<<<batch * hq, 256, 0, stream>>>(stats, cu_seqlens, hq, s, tokens, lse);
  return cudaGetLastError();
}

cudaError_t launch_cudnn_lse_to_stats(const float* lse, const int32_t* cu_seqlens, int32_t batch,
                                      int32_t padded_batch, int32_t hq, int32_t s, int64_t tokens, float* stats,
                                      cudaStream_t stream) {
  if (padded_batch == 0) return cudaSuccess;
  lse_to_stats_kernel<<<padded_batch * hq, 256, 0, stream>>>(lse, cu_seqlens, batch, hq, s, tokens, stats);
  return cudaGetLastError();
}

}  // namespace swift::ops::cuda
