// ops/cuda/kernels_attention.cuh — launchers of the flash-attention kernels (attention_fwd.cu, attention_bwd.cu),
// callable from C++ (g++) translation units.
//
// Invariants:
//  - Plain arguments only (no fmt, no core/error.h, no Tensor): raw device pointers, sizes, dtype codes
//    (0 = F32, 1 = BF16, 2 = F16 as in core/dtype.h), the stream; each launcher returns the launch status.
//  - Layouts are row-major and contiguous: q/out/dout/dq (T, Hq, D); k/v/dk/dv (T, Hkv, D); lse/delta (Hq, T) F32.
//    cu_seqlens is the (B+1) I32 device array; max_seqlen is the longest sequence (host-computed).
//  - Activations share one dtype; math is fp32 (BF16 / F16 operands of tensor-core products, fp32 accumulation);
//    results are rounded once when stored. No atomics: results are deterministic run to run.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace swift::ops::cuda {

struct AttentionShape {
  int64_t tokens = 0;      // T
  int32_t batch = 0;       // B (sequences)
  int32_t max_seqlen = 0;  // longest sequence
  int32_t hq = 0, hkv = 0, head_dim = 0;
  float scale = 1.0f;
  int64_t window = 0;  // 0 = unlimited
};

// out (T, Hq, D) and, when lse != nullptr, lse (Hq, T) F32 (natural log-sum-exp of the scaled scores).
cudaError_t launch_attention_forward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                     const int32_t* cu_seqlens, void* out, float* lse, int dtype,
                                     cudaStream_t stream);

// dq (T, Hq, D), dk/dv (T, Hkv, D) written with =. delta: device workspace of Hq * T floats (scratch).
cudaError_t launch_attention_backward(const AttentionShape& s, const void* dout, const void* q, const void* k,
                                      const void* v, const void* out, const float* lse, const int32_t* cu_seqlens,
                                      float* delta, void* dq, void* dk, void* dv, int dtype, cudaStream_t stream);

}  // namespace swift::ops::cuda
