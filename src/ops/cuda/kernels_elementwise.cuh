// ops/cuda/kernels_elementwise.cuh — launchers of the element-wise, norm, rope, dropout, embedding and optimizer
// kernels (elementwise.cu, embedding_rope.cu, rmsnorm.cu,
// optimizer.cu), callable from C++ (g++) translation units, plus the device-side load/store helpers those .cu
// files share (compiled only under nvcc).
//
// Invariants:
//  - dtype codes are core/dtype.h's values: 0 = F32, 1 = BF16, 2 = F16. Activations are F32 or BF16 (one code per
//    call); weights (embedding table, norm weight) F32/BF16/F16; everything else named `float*` is F32.
//  - Math is fp32 (fp64 where a sum is named so); 16-bit values are widened exactly and rounded once on store
//    (__float2bfloat16_rn / __float2half_rn, round to nearest even).
//  - Launchers take raw device pointers and the stream, enqueue only (never synchronise) and return the launch
//    status; n == 0 launches nothing. Aliasing rules are those of ops.h: element-wise outputs may be their
//    inputs (each element is read before it is written, by the same thread).
//  - Scratch: launchers that need temporary device memory take it from the caller (`scratch`, at least the bytes
//    the matching *_scratch_bytes function returns, aligned to 256 bytes); the caller keeps it untouched until
//    the stream has run the enqueued work (the .cpp side serialises users of its per-device scratch).
//  - Data-dependent errors (token ids outside the vocabulary, negative rope positions) cannot be seen by the host
//    when the op runs: the kernel records the first one in a per-device error record (device_error_*), which the
//    C++ side reads back at its synchronising ops (grad_norm, clip_grad_norm) and via check_device_errors().
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "ops/philox.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace swift::ops::cuda {

// ---- device error record -------------------------------------------------------------------------------------
enum DeviceErrorOp : int32_t {
  kDeviceErrorNone = 0,
  kDeviceErrorEmbedding = 1,          // value = token id, limit = vocabulary size
  kDeviceErrorEmbeddingBackward = 2,  // value = token id, limit = vocabulary size (padding id excluded)
  kDeviceErrorRope = 3,               // value = negative position
  kDeviceErrorRopeBackward = 4,
};
struct DeviceErrorRecord {
  int32_t op;         // DeviceErrorOp of the first error since the last read, or 0
  int32_t pad;
  int64_t position;   // token index
  int64_t value;      // the offending id / position
  int64_t limit;      // vocabulary size (embedding ops)
};
// Copies the current device's record into *out, clears it when it held an error, and synchronises `stream`.
cudaError_t device_error_read_and_clear(DeviceErrorRecord* out, cudaStream_t stream);
// C++ side (ops_elementwise.cpp): synchronises the device's stream, reads and clears its record, and throws
// swift::Error naming the op that recorded an error (called by grad_norm and clip_grad_norm; callable anywhere).
void check_device_errors(int device_index);

// ---- element-wise (elementwise.cu) -----------------------------------------------------------------------------
// out = a + b.                                              a, b, out: (n) activation dtype
cudaError_t launch_add(const void* a, const void* b, void* out, int dtype, int64_t n, cudaStream_t stream);
// out = gate / (1 + exp(-gate)) * up.                       gate, up, out: (n)
cudaError_t launch_swiglu(const void* gate, const void* up, void* out, int dtype, int64_t n, cudaStream_t stream);
// launch_swiglu over (rows, cols), and bits (rows, ceil(cols / 8)) the keep bits of out's dropout mask (seed,
// threshold, map: ops/philox.h; bit j of byte (row, c) = column 8c + j kept, bits past cols 0). One pass where
// swiglu_keep_bits_in_one_pass holds (16-bit, 16-byte aligned, cols % 8 == 0, the identity map), else swiglu and then
// a pass over the bits.
bool swiglu_keep_bits_in_one_pass(const void* gate, const void* up, const void* out, int dtype, int64_t cols,
                                  const DropoutMap& map);
cudaError_t launch_swiglu_keep_bits(const void* gate, const void* up, void* out, int dtype, int64_t rows, int64_t cols,
                                    uint64_t seed, uint32_t threshold, const DropoutMap& map, uint8_t* bits,
                                    cudaStream_t stream);
// dup = dout * silu(gate); dgate = ((dout * up) * sig) * (1 + gate * (1 - sig)), every op rounded as torch.
cudaError_t launch_swiglu_backward(const void* dout, const void* gate, const void* up, void* dgate, void* dup,
                                   int dtype, int64_t n, cudaStream_t stream);
// out[i] = x[i] * (dropout_draw(seed, i) >= threshold ? keep_scale : 0). threshold 0 and keep_scale 1: a copy.
cudaError_t launch_dropout(const void* x, void* out, int dtype, int64_t n, uint64_t seed, uint32_t threshold,
                           float keep_scale, cudaStream_t stream);
// The same with x seen as (n / cols, cols) (cols divides n) and element (i, j)'s draw at dropout_index(map, i, j,
// cols) (ops/philox.h DropoutMap: its place in the full tensor; the identity map is the call above).
cudaError_t launch_dropout(const void* x, void* out, int dtype, int64_t n, int64_t cols, uint64_t seed,
                           uint32_t threshold, float keep_scale, const DropoutMap& map, cudaStream_t stream);
// rows runs of `run` bytes from src + r * src_pitch to dst + r * dst_pitch (bytes; no overlap), on stream.
cudaError_t launch_copy_rows(const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch, int64_t run,
                             int64_t rows, cudaStream_t stream);

// ---- embedding (embedding_rope.cu, which also owns the device error record) ------------------------------------
// out[t] = table[ids[t]]: table (vocab, c) table_dtype; ids (tokens) I32; out (tokens, c) out_dtype. An id outside
// [0, vocab) writes a zero row and records kDeviceErrorEmbedding. vocab_offset >= 0: the table is the vocabulary shard
// [vocab_offset, vocab_offset + vocab) (embedding_shard): out[t] = table[ids[t] - vocab_offset], a zero row without
// an error for ids outside it (a negative id is still recorded); -1: the whole table.
cudaError_t launch_embedding(const void* table, int table_dtype, const int32_t* ids, void* out, int out_dtype,
                             int64_t tokens, int64_t vocab, int64_t c, int64_t vocab_offset, cudaStream_t stream);
// dtable[ids[t]] += dout[t] for every t with ids[t] != padding_id, in token order per row (deterministic: a
// stable radix sort of (id, t), then one block per distinct id adds its rows in token order). An id outside
// [0, vocab) other than padding_id is skipped and recorded (kDeviceErrorEmbeddingBackward). vocab_offset >= 0: a shard,
// as launch_embedding (dtable[ids[t] - vocab_offset]; other ranks' ids skipped silently); -1: the whole table.
//   dout (tokens, c) dtype; dtable (vocab, c) F32.
size_t embedding_backward_scratch_bytes(int64_t tokens);
cudaError_t launch_embedding_backward(const void* dout, int dtype, const int32_t* ids, float* dtable, int64_t tokens,
                                      int64_t vocab, int64_t c, int64_t padding_id, int64_t vocab_offset,
                                      void* scratch, size_t scratch_bytes, cudaStream_t stream);

// ---- rmsnorm (rmsnorm.cu) and rope (embedding_rope.cu) ---------------------------------------------------------
// y = weight * (x * rstd), rstd = 1 / sqrt(float(sum(double(x^2)) / c) + eps).   x, y: (n, c); rstd: (n) or null.
// narrow_kernels: rows of 256 <= C <= 1024 (C % 8 == 0, 16-byte aligned) take a warp per row with 16-byte accesses
// (another summation order than the strided kernel: rstd may differ in the last bit).
cudaError_t launch_rmsnorm(const void* x, const void* weight, int weight_dtype, void* y, float* rstd, int dtype,
                           int64_t n, int64_t c, float eps, bool narrow_kernels, cudaStream_t stream);
// dx = (dy * w) * rstd + x * coef (+= with accumulate_dx; dx may be dy without accumulate_dx), coef =
// float(-rstd^3 * sum(double(dy * w) * x) / c); dweight (c) += sum over rows of dy * (x * rstd) in fp64,
// per-row-chunk partials in scratch then a fixed-order reduction. dx or dweight may be null. narrow_kernels: rows of
// 256 <= C <= 1024 (C % 8 == 0, 16-byte aligned) take one warp-per-row pass of 16-byte accesses for dx and the
// partials together (SWIFT_RMSNORM_NARROW=0 keeps the strided kernels: A/B).
size_t rmsnorm_backward_scratch_bytes(int64_t n, int64_t c);
cudaError_t launch_rmsnorm_backward(const void* dy, const void* x, const void* weight, int weight_dtype,
                                    const float* rstd, void* dx, float* dweight, int dtype, int64_t n, int64_t c,
                                    bool accumulate_dx, bool narrow_kernels, void* scratch, size_t scratch_bytes,
                                    cudaStream_t stream);

constexpr int kRopeMaxHalf = 256;  // D / 2 at most (head dims up to 512)
struct RopeParams {
  float inv_freq[kRopeMaxHalf];
  float attention_scaling;
  float direction;  // +1 forward, -1 backward (sin negated)
  int32_t error_op; // kDeviceErrorRope or kDeviceErrorRopeBackward
};
// Token t's (heads, 2 * half) block from in + t * in_stride (elements), rotated, into out + t * out_stride (in place
// when in == out with one stride); positions (tokens) I32. vectorized: 16-byte accesses where half % 8 == 0 and the
// rows are 16-byte aligned (the same bits; SWIFT_ROPE_VEC=0 keeps the per-pair kernel: A/B).
cudaError_t launch_rope(const void* in, int64_t in_stride, void* out, int64_t out_stride, int dtype,
                        const int32_t* positions, int64_t tokens, int64_t heads, int64_t half, const RopeParams& params,
                        bool vectorized, cudaStream_t stream);
// Packed q/k/v (ops.h rope_qkv) in one launch: token t's packed row (packed + t * packed_stride: hq + 2 hkv heads of
// 2 * half) and the contiguous rows of q (hq heads), k and v (hkv heads each); q and k rotated, v copied; forward
// (to_packed false) from the packed row, backward (to_packed true, params.direction -1) into it. Only where
// rope_qkv_fits (half % 8 == 0, every pointer and row 16-byte aligned); cudaErrorInvalidValue otherwise.
bool rope_qkv_fits(const void* packed, int64_t packed_stride, const void* q, const void* k, const void* v, int dtype,
                   int64_t hq, int64_t hkv, int64_t half);
cudaError_t launch_rope_qkv(void* packed, int64_t packed_stride, void* q, void* k, void* v, int dtype,
                            const int32_t* positions, int64_t tokens, int64_t hq, int64_t hkv, int64_t half,
                            bool to_packed, const RopeParams& params, cudaStream_t stream);

// ---- optimizer and gradient norms (optimizer.cu) ------------------------------------------------------------------
// Work over many F32 tensors in one launch: chunks of kMultiTensorChunk elements, one block each, described by a
// device array of MultiTensorChunk (the tensors' pointers repeated per chunk: no second table to index).
constexpr int64_t kMultiTensorChunk = 16384;
struct MultiTensorChunk {
  float* p[4];      // adamw: param, grad, exp_avg, exp_avg_sq; norms and scaling: p[0] = grad
  int64_t begin, end;
  void* product;          // adamw: the updated param also stored here (AdamWTensor::product), or null
  int32_t product_dtype;  // 0 F32, 1 BF16, 2 F16
};
struct AdamWKernelScalars {
  float decay, w1, w1_m1, beta2, w2, bc2_sqrt, eps, step_size_neg;
  float grad_scale;      // each gradient read as grad * grad_scale (ops.h AdamWConfig)
  int32_t small_weight;  // |w1| < 0.5: torch's lerp branch
  int32_t apply_decay;   // weight_decay != 0
};
cudaError_t launch_adamw(const MultiTensorChunk* chunks, int64_t count, const AdamWKernelScalars& scalars,
                         cudaStream_t stream);
// partials (count) fp64 sums of squares per chunk (fixed order), then *total = sum of partials in a fixed tree.
// partials and total are device memory.
cudaError_t launch_sum_squares(const MultiTensorChunk* chunks, int64_t count, double* partials, double* total,
                               cudaStream_t stream);
// p[0][i] *= coef over every chunk.
cudaError_t launch_scale(const MultiTensorChunk* chunks, int64_t count, float coef, cudaStream_t stream);
// Every chunk's p[0] elements set to +0.
cudaError_t launch_zero(const MultiTensorChunk* chunks, int64_t count, cudaStream_t stream);

#if defined(__CUDACC__)
// ---- device helpers shared by the .cu files ----------------------------------------------------------------------
__device__ __forceinline__ float load_f32(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f32(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load_f32(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store_f32(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store_f32(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_f32(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

// 8 consecutive elements p[i .. i + 7] as fp32 (exact widening) / rounded once from fp32; i % 8 == 0 and p 16-byte
// aligned: one 16-byte access for 16-bit types, two for F32.
__device__ __forceinline__ void load8_f32(const float* p, int64_t i, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p + i), b = *reinterpret_cast<const float4*>(p + i + 4);
  v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void load8_f32(const __nv_bfloat16* p, int64_t i, float (&v)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p + i);
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {  // bf16 -> fp32 is the high half of the word
    v[2 * k] = __uint_as_float(w[k] << 16);
    v[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}
__device__ __forceinline__ void load8_f32(const __half* p, int64_t i, float (&v)[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p + i);
  const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = __half22float2(h[k]);
    v[2 * k] = f.x;
    v[2 * k + 1] = f.y;
  }
}
__device__ __forceinline__ void store8_f32(float* p, int64_t i, const float (&v)[8]) {
  *reinterpret_cast<float4*>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
  *reinterpret_cast<float4*>(p + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void store8_f32(__nv_bfloat16* p, int64_t i, const float (&v)[8]) {
  __nv_bfloat162 h[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
  *reinterpret_cast<uint4*>(p + i) = *reinterpret_cast<const uint4*>(h);
}
__device__ __forceinline__ void store8_f32(__half* p, int64_t i, const float (&v)[8]) {
  __half2 h[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) h[k] = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
  *reinterpret_cast<uint4*>(p + i) = *reinterpret_cast<const uint4*>(h);
}

#endif

}  // namespace swift::ops::cuda
