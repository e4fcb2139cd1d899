// ops/cuda/attention_cudnn.h — attention forward / backward through cuDNN's fused flash attention (the backend
// graph API: the runtime-fusion SDPA pattern of primitive operations), the default CUDA attention path on Hopper
// for BF16 / F16 activations; our own flash-attention-2 kernels (kernels_attention.cuh) remain the fallback and
// are selected with SWIFT_ATTENTION=flash2.
//
// Invariants:
//  - try_cudnn_attention_* return false (nothing launched) when cuDNN cannot take the call: not built with
//    cuDNN, F32 activations, SWIFT_ATTENTION=flash2, a device below sm_90, a head dim outside {8k <= 256}, offsets
//    beyond I32, or cuDNN has no engine for the graph (remembered per plan key, so asked once per shape).
//    Any other cuDNN failure throws swift::Error naming the op, the call, cudnnGetErrorString and
//    cudnnGetLastErrorString.
//  - Packed batches go to cuDNN as ragged tensors: batch B padded to a power of two with empty sequences, max
//    length S (the longest sequence rounded up to 64, or to 256 beyond 256), per-sequence lengths and element
//    offsets computed on the device from cu_seqlens (attention_cudnn_kernels.cu).
//  - cuDNN's softmax statistics are (B, Hq, S) padded; lse keeps the ops.h contract (Hq, T) through two small
//    conversion kernels (forward: stats -> lse; backward: lse -> stats, padded rows 0).
//  - A plan whose cuDNN workspace exceeds SWIFT_CUDNN_ATTENTION_MAX_WORKSPACE_MB (default 8192) falls back too:
//    the deterministic backward's workspace grows with B * Hq * S^2 * 2 bytes (~1 GiB at 4 x 2048, Hq 28).
//  - The backward is the deterministic graph variant by default (dQ written by its product, no fp32 atomics);
//    SWIFT_CUDNN_ATTENTION_BWD=nondeterministic selects the fp32 dQ-accumulator variant (fp32 atomics, ~9x
//    smaller workspace, no faster: 0.920 vs 0.912 ms at 4 x 2048, Hq 28, Hkv 4, D 128 on the H200).
//  - Everything runs on cuda::stream(device); one cuDNN handle per device (process lifetime).
#pragma once

#include <cstdint>
#include <string>

#include "core/tensor.h"
#include "ops/cuda/attention_cudnn_kernels.cuh"
#include "ops/cuda/kernels_attention.cuh"

namespace swift::ops::cuda {

// out (T, Hq, D); lse (Hq, T) F32 or undefined. Returns false when the call must go to our kernels.
bool try_cudnn_attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& cu_seqlens, Tensor& out, Tensor& lse);
// dq (T, Hq, D), dk / dv (T, Hkv, D) written with =. Returns false when the call must go to our kernels.
bool try_cudnn_attention_backward(const AttentionShape& s, const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens,
                                  Tensor& dq, Tensor& dk, Tensor& dv);

// ops::enable_full_determinism (--full_determinism): the deterministic backward whatever SWIFT_CUDNN_ATTENTION_BWD
// says (on for the rest of the process; false returns to the variable's choice, for tests).
void force_deterministic_attention_backward(bool on);

// Which implementation ran (counted per process, for tests and benchmarks) and why cuDNN last declined a call.
struct AttentionPathCounts {
  int64_t cudnn_forward = 0, cudnn_backward = 0, flash2_forward = 0, flash2_backward = 0;
  int64_t cudnn_backward_launches = 0;  // cuDNN executions of the backward: one per head group of each call
  int64_t cudnn_dense = 0;  // cuDNN calls (either direction) on the dense graphs: every sequence of one bucket length
};
AttentionPathCounts attention_path_counts();
void count_flash2_attention(bool backward);
std::string cudnn_attention_last_fallback();
// One line per cuDNN plan built so far: direction, shape, engine index and numerical notes, workspace bytes.
std::string cudnn_attention_plan_info();

}  // namespace swift::ops::cuda
