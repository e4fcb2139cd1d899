// ops/cuda/ops_attention.cpp — attention and attention_backward on CUDA tensors: unpacks the Tensors, reads the
// (tiny) cu_seqlens back to the host for the batch size and the longest sequence, and runs cuDNN's fused flash
// attention (attention_cudnn.cpp: BF16 / F16 on sm_90+, the default) or, when cuDNN cannot take the call or
// SWIFT_ATTENTION=flash2, the flash-attention launchers of kernels_attention.cuh on the device's stream.
// attention_decode (queries against a KV cache) calls the split-K launcher of kernels_attention_decode.cuh with a
// workspace for the splits' partial results; attention_decode_at / kv_cache_write are its replayable forms (position
// read on the device, caller's workspace: they allocate nothing, so a CUDA graph may capture them).
//
// Invariants:
//  - Arguments were validated by ops/op_checks (shapes, one device, dtypes, cu_seqlens monotone from 0 to T).
//  - Activations are F32, BF16 or F16 (one dtype per call); lse and the backward's delta scratch are F32.
//  - Launch failures become swift::Error naming the op. Results are deterministic (no atomics; cuDNN's backward
//    is its deterministic variant unless SWIFT_CUDNN_ATTENTION_BWD=nondeterministic).
#include "ops/cuda/cuda_ops.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/kernels_attention.cuh"
#include "ops/cuda/kernels_attention_decode.cuh"

namespace swift::ops::cuda {

namespace {

void check_launch(const char* op, cudaError_t status) {
  if (status != cudaSuccess) fail("op {}: CUDA kernel launch failed: {}", op, cudaGetErrorString(status));
}

int dtype_code(const char* op, const Tensor& t) {
  if (t.dtype() == DType::F32) return 0;
  if (t.dtype() == DType::BF16) return 1;
  if (t.dtype() == DType::F16) return 2;
  fail("op {}: activations must be F32, BF16 or F16 on CUDA, got {}", op, dtype_name(t.dtype()));
}

AttentionShape shape_of(const char* op, const Tensor& q, const Tensor& k, const Tensor& cu_seqlens, float scale,
                        int64_t window) {
  AttentionShape s;
  s.tokens = q.size(0);
  s.hq = static_cast<int32_t>(q.size(1));
  s.hkv = static_cast<int32_t>(k.size(1));
  s.head_dim = static_cast<int32_t>(q.size(2));
  s.scale = scale;
  s.window = window;
  if (s.head_dim > 512) fail("op {}: head dim D = {} is above the CUDA kernels' limit of 512", op, s.head_dim);
  if (s.tokens > INT32_MAX) fail("op {}: T = {} tokens exceeds the I32 range of cu_seqlens", op, s.tokens);
  const Tensor host = host_values(cu_seqlens);  // its HostMirror (ops.h) when the caller registered one
  const int32_t* cu = host.data<int32_t>();
  s.batch = static_cast<int32_t>(host.size(0) - 1);
  for (int32_t b = 0; b < s.batch; ++b) s.max_seqlen = std::max(s.max_seqlen, cu[b + 1] - cu[b]);
  return s;
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
               int64_t window, Tensor& out, Tensor& lse) {
  const char* op = "attention";
  const AttentionShape s = shape_of(op, q, k, cu_seqlens, scale, window);
  if (try_cudnn_attention_forward(s, q, k, v, cu_seqlens, out, lse)) return;
  count_flash2_attention(false);
  check_launch(op, launch_attention_forward(s, q.raw(), k.raw(), v.raw(), cu_seqlens.data<int32_t>(), out.raw(),
                                            lse.defined() ? lse.data<float>() : nullptr, dtype_code(op, q),
                                            stream(q.device().index)));
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, float scale, int64_t window, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  const char* op = "attention_backward";
  const AttentionShape s = shape_of(op, q, k, cu_seqlens, scale, window);
  if (try_cudnn_attention_backward(s, dout, q, k, v, out, lse, cu_seqlens, dq, dk, dv)) return;
  count_flash2_attention(true);
  // delta (Hq, T) scratch from the caching allocator (Workspace); released after the enqueue, which is safe: every
  // kernel of the device runs on its one stream, so a later owner's work is ordered after these launches.
  Tensor delta = Tensor::empty({q.size(1), q.size(0)}, DType::F32, q.device(), MemoryCategory::Workspace);
  check_launch(op, launch_attention_backward(s, dout.raw(), q.raw(), k.raw(), v.raw(), out.raw(), lse.data<float>(),
                                             cu_seqlens.data<int32_t>(), delta.data<float>(), dq.raw(), dk.raw(),
                                             dv.raw(), dtype_code(op, q), stream(q.device().index)));
}

namespace {
// Multiprocessors of a device (asked once per device).
int sm_count(int device) {
  static std::array<int, 64> counts{};
  if (device < 0 || device >= static_cast<int>(counts.size())) return 1;
  if (counts[static_cast<size_t>(device)] == 0) {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n <= 0) {
      cudaGetLastError();
      n = 1;
    }
    counts[static_cast<size_t>(device)] = n;
  }
  return counts[static_cast<size_t>(device)];
}
}  // namespace

namespace {
// The launch arguments of attention_decode / attention_decode_at (start: the position, or its bound).
AttentionDecodeArgs decode_args(const char* op, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                int64_t start, float scale, int64_t window, Tensor& out) {
  AttentionDecodeArgs a;
  a.q = q.raw();
  a.k = k_cache.raw();
  a.v = v_cache.raw();
  a.out = out.raw();
  a.queries = q.size(0);
  a.start = start;
  a.window = window;
  a.hq = static_cast<int32_t>(q.size(1));
  a.hkv = static_cast<int32_t>(k_cache.size(1));
  a.head_dim = static_cast<int32_t>(q.size(2));
  a.scale = scale;
  a.dtype = dtype_code(op, q);
  if (q.size(2) > kAttentionDecodeMaxHeadDim) {
    fail("op {}: head dim D = {} is above the CUDA kernel's limit of {}", op, q.size(2), kAttentionDecodeMaxHeadDim);
  }
  if (q.size(0) * q.size(1) > INT32_MAX) fail("op {}: {} query rows x heads exceed the kernel's grid", op, q.size(0) * q.size(1));
  return a;
}

AttentionDecodeSplit decode_split(const char* op, const AttentionDecodeArgs& a, int device) {
  const AttentionDecodeSplit split = attention_decode_split(a, sm_count(device));
  if (split.chunk > kAttentionDecodeMaxChunk) {
    fail("op {}: {} visible keys exceed the CUDA kernel's limit of {} (use a sliding window or a shorter context)", op,
         attention_decode_max_keys(a), int64_t{kAttentionDecodeMaxChunk} * kAttentionDecodeMaxSplits);
  }
  return split;
}
}  // namespace

void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start, float scale,
                      int64_t window, Tensor& out) {
  const char* op = "attention_decode";
  const AttentionDecodeArgs a = decode_args(op, q, k_cache, v_cache, start, scale, window, out);
  const AttentionDecodeSplit split = decode_split(op, a, q.device().index);
  // Partial results of the splits from the caching allocator, released after the enqueue: every kernel of the
  // device runs on its one stream, so a later owner's work is ordered after these launches.
  const int64_t floats = attention_decode_workspace_floats(a, split);
  Tensor workspace = floats > 0 ? Tensor::empty({floats}, DType::F32, q.device(), MemoryCategory::Workspace) : Tensor();
  check_launch(op, launch_attention_decode(a, split, floats > 0 ? workspace.data<float>() : nullptr,
                                           stream(q.device().index)));
}

int64_t attention_decode_workspace(const Tensor& q, const Tensor& k_cache, int64_t max_keys, int64_t window) {
  const char* op = "attention_decode_at";
  Tensor out = q;  // only its shape and dtype are read
  const AttentionDecodeArgs a = decode_args(op, q, k_cache, k_cache, max_keys - q.size(0), 1.0f, window, out);
  return attention_decode_workspace_floats(a, decode_split(op, a, q.device().index));
}

void attention_decode_at(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& start,
                         int64_t max_keys, float scale, int64_t window, Tensor& out, const Tensor& workspace) {
  const char* op = "attention_decode_at";
  AttentionDecodeArgs a = decode_args(op, q, k_cache, v_cache, max_keys - q.size(0), scale, window, out);
  a.start_device = start.data<int32_t>();
  const AttentionDecodeSplit split = decode_split(op, a, q.device().index);
  const int64_t floats = attention_decode_workspace_floats(a, split);
  if (floats > 0 && (!workspace.defined() || workspace.numel() < floats)) {
    fail("op {}: the workspace {} is smaller than the {} F32 elements this launch needs (size it with "
         "attention_decode_workspace)", op, workspace.defined() ? workspace.str() : std::string("(undefined)"), floats);
  }
  check_launch(op, launch_attention_decode(a, split, floats > 0 ? workspace.data<float>() : nullptr,
                                           stream(q.device().index)));
}

void kv_cache_write(const Tensor& k_new, const Tensor& v_new, Tensor& k_cache, Tensor& v_cache, const Tensor& row) {
  const int64_t row_elems = k_new.size(1) * k_new.size(2);
  check_launch("kv_cache_write",
               launch_kv_cache_write(k_new.raw(), v_new.raw(), k_cache.raw(), v_cache.raw(), row.data<int32_t>(),
                                     k_new.size(0), row_elems, k_cache.size(0), static_cast<int>(dtype_bytes(k_new.dtype(), 1)),
                                     stream(k_new.device().index)));
}

}  // namespace swift::ops::cuda
