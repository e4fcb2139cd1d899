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
//
// Replayable decoding (CUDA graphs, model/decode_plan.cpp): attention_decode_at reads the position of query 0 from a
// (1) I32 tensor on the tensors' device, never from the host, and sizes its key split from the host-side bound
// `max_keys` alone, so a captured launch replays correctly at any position under the bound, and launches with the
// same bound are the same kernels on the same chunks (bit-identical to each other, eager or replayed).
// kv_cache_write appends this step's keys and values at a row read on the device likewise. Both leave the host
// position unchecked on CUDA (the caller keeps it in bounds: the host cannot read it without a synchronisation);
// on the CPU they read and check it.
#pragma once

#include "core/tensor.h"

namespace swift::ops {

void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start, float scale,
                      int64_t window, Tensor& out);

// q, caches, out as above; start: (1) I32 on q's device, the position of query 0, with start + Tq <= max_keys <= Tk.
// workspace: F32 on q's device with at least attention_decode_workspace(q, k_cache, max_keys, window) elements
// (undefined when that is 0); the op allocates nothing.
void attention_decode_at(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& start,
                         int64_t max_keys, float scale, int64_t window, Tensor& out, const Tensor& workspace);
// F32 elements of workspace attention_decode_at needs for these shapes and bound (0 on the CPU or with one split).
int64_t attention_decode_workspace(const Tensor& q, const Tensor& k_cache, int64_t max_keys, int64_t window);

// Copies k_new, v_new (T, Hkv, D) into rows [row, row + T) of k_cache, v_cache (Tk, Hkv, D); row: (1) I32 on their
// device (read by the host on the CPU and checked against Tk; on CUDA rows past Tk are skipped).
void kv_cache_write(const Tensor& k_new, const Tensor& v_new, Tensor& k_cache, Tensor& v_cache, const Tensor& row);

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
