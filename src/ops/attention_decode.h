// ops/attention_decode.h — attention of new queries against a KV cache (incremental decoding of one sequence).
//
//   q: (Tq, Hq, D) the new tokens' queries, at absolute positions start .. start + Tq - 1
//   k_cache, v_cache: (Tk, Hkv, D) keys and values of positions 0 .. Tk - 1 (Tk >= start + Tq; rows past
//                     start + Tq - 1 are ignored, so a cache buffer with spare capacity may be passed)
//   out: (Tq, Hq, D). Query i sees keys j with j <= start + i, and start + i - j < window when window > 0.
//   Hq % Hkv == 0: query head h reads kv head h / (Hq / Hkv).
//
// Invariants: same numerics as ops::attention (scaled scores, softmax in fp32 with the max subtracted), so
// prefill through ops::attention and decoding through this op give the same logits up to rounding; the
// reference (ops::ref::attention_decode) loops naively in double. Activations are F32, or BF16 / F16 on CUDA (one
// dtype for q, the caches and out; fp32 math). ops::attention_decode dispatches on the tensors' device
// (ops/attention_decode.cpp): the CPU kernel (ops/cpu/attention_decode.cpp) or the split-K CUDA kernel
// (ops/cuda/attention_decode.cu); never a silent fallback.
#pragma once

#include "core/tensor.h"

namespace swift::ops {

void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start, float scale,
                      int64_t window, Tensor& out);

namespace detail {
// Throws naming the op and the tensor at fault; shared by the kernels and the reference. Returns the device of
// the tensors.
Device check_attention_decode(const char* op, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                              int64_t start, int64_t window, const Tensor& out);
}  // namespace detail

namespace cpu {
// The fast CPU kernel; arguments already checked (F32 CPU tensors).
void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start, float scale,
                      int64_t window, Tensor& out);
}  // namespace cpu

namespace ref {
void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start, float scale,
                      int64_t window, Tensor& out);
}  // namespace ref

}  // namespace swift::ops
