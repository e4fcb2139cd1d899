// ops/cuda/embedding_rope.cu — embedding lookup and its backward, rotary position embedding, and the per-device
// record of data-dependent errors those kernels find (ids outside the vocabulary, negative positions).
//
// Invariants:
//  - Token ids and positions live on the device; the kernels never read out of bounds: a bad id writes a zero
//    row (forward) or is skipped (backward), and the first bad value is recorded in g_error (a __device__
//    global: one per device context) with an atomic compare-and-swap; the host reads and clears it with
//    device_error_read_and_clear at its synchronising ops.
//  - embedding_backward is deterministic: ids are sorted with their token index (cub's stable radix sort, so
//    equal ids keep token order), then one block per distinct id adds its dout rows to the F32 dtable row in
//    token order, each column by one thread: dtable[id][j] += dout[t][j] in the same fp32 order as the CPU.
//  - rope: one block per token computes cos/sin of its D/2 angles once in shared memory (angle = float(position)
//    * inv_freq[i] in fp32, c = cos * scaling, s = direction * (sin * scaling)), then rotates every head's pairs
//    (i, i + D/2): x1' = x1 c - x2 s, x2' = x2 c + x1 s, each product and sum rounded (no contraction).
//    sincosf is CUDA's (<= 2 ulp), not glibc's: results match the CPU to a few ulp, not bit for bit. With
//    half % 8 == 0 and 16-byte aligned rows (and `vectorized`, SWIFT_ROPE_VEC) rope_vec_kernel does the same
//    arithmetic over several tokens per block with 16-byte accesses: the same bits. rope_qkv_vec_kernel rotates q's
//    and k's heads and copies v's columns of packed q/k/v rows in one launch, with the same arithmetic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cub/device/device_radix_sort.cuh>

#include "ops/cuda/kernels_elementwise.cuh"

namespace swift::ops::cuda {

namespace {

__device__ DeviceErrorRecord g_error;

__device__ void record_error(int32_t op, int64_t position, int64_t value, int64_t limit) {
  if (atomicCAS(&g_error.op, 0, op) == 0) {
    g_error.position = position;
    g_error.value = value;
    g_error.limit = limit;
  }
}

// ---- embedding -----------------------------------------------------------------------------------------------
template <typename W, typename T>
// vocab_offset >= 0: the table is a vocabulary shard (rows [vocab_offset, vocab_offset + vocab)); ids outside it are
// another rank's and give zero rows without an error (negative ids are still recorded). -1: the whole table.
__global__ void embedding_kernel(const W* table, const int32_t* ids, T* out, int64_t vocab, int64_t c,
                                 int64_t vocab_offset) {
  const int64_t t = blockIdx.x;
  const int64_t id = static_cast<int64_t>(ids[t]) - (vocab_offset > 0 ? vocab_offset : 0);
  T* row = out + t * c;
  if (id < 0 || id >= vocab) {
    if (threadIdx.x == 0 && (vocab_offset < 0 || ids[t] < 0)) record_error(kDeviceErrorEmbedding, t, ids[t], vocab);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) store_f32(row, j, 0.0f);
    return;
  }
  const W* src = table + static_cast<int64_t>(id) * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) store_f32(row, j, load_f32(src, j));
}

template <typename W, typename T>
cudaError_t embedding_typed(const void* table, const int32_t* ids, void* out, int64_t tokens, int64_t vocab,
                            int64_t c, int64_t vocab_offset, cudaStream_t stream) {
  const int threads = c >= 256 ? 256 : 128;
  embedding_kernel<<<static_cast<unsigned>(tokens), threads, 0, stream>>>(static_cast<const W*>(table), ids,
                                                                          static_cast<T*>(out), vocab, c, vocab_offset);
  return cudaGetLastError();
}

template <typename T>
cudaError_t embedding_out(int table_dtype, const void* table, const int32_t* ids, void* out, int64_t tokens,
                          int64_t vocab, int64_t c, int64_t vocab_offset, cudaStream_t stream) {
  switch (table_dtype) {
    case 0: return embedding_typed<float, T>(table, ids, out, tokens, vocab, c, vocab_offset, stream);
    case 1: return embedding_typed<__nv_bfloat16, T>(table, ids, out, tokens, vocab, c, vocab_offset, stream);
    case 2: return embedding_typed<__half, T>(table, ids, out, tokens, vocab, c, vocab_offset, stream);
    default: return cudaErrorInvalidValue;
  }
}

// ---- embedding backward ------------------------------------------------------------------------------------------
__global__ void iota_kernel(int32_t* v, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    v[i] = static_cast<int32_t>(i);
  }
}

// Block i owns sorted position i when it starts a run of equal ids; it adds the run's rows in token order.
template <typename T>
__global__ void embedding_backward_kernel(const T* dout, const int32_t* sorted_ids, const int32_t* sorted_tokens,
                                          float* dtable, int64_t tokens, int64_t vocab, int64_t c,
                                          int64_t padding_id, int64_t vocab_offset) {
  const int64_t i = blockIdx.x;
  const int32_t id = sorted_ids[i];
  if (i > 0 && sorted_ids[i - 1] == id) return;
  if (id == padding_id) return;
  const int64_t row_id = static_cast<int64_t>(id) - (vocab_offset > 0 ? vocab_offset : 0);
  if (row_id < 0 || row_id >= vocab) {  // a shard skips other ranks' ids silently
    if (threadIdx.x == 0 && (vocab_offset < 0 || id < 0)) {
      record_error(kDeviceErrorEmbeddingBackward, sorted_tokens[i], id, vocab);
    }
    return;
  }
  int64_t end = i + 1;
  while (end < tokens && sorted_ids[end] == id) ++end;
  float* row = dtable + row_id * c;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
    float acc = row[j];
    for (int64_t r = i; r < end; ++r) {
      acc = __fadd_rn(acc, load_f32(dout, static_cast<int64_t>(sorted_tokens[r]) * c + j));
    }
    row[j] = acc;
  }
}

size_t align_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

struct BackwardScratch {
  int32_t* keys_out;
  int32_t* values_in;
  int32_t* values_out;
  void* cub_temp;
  size_t cub_bytes;
};

// Lays out the scratch; with base == nullptr only computes the total size.
cudaError_t layout_backward_scratch(void* base, int64_t tokens, BackwardScratch& s, size_t& total) {
  size_t cub_bytes = 0;
  cudaError_t status = cub::DeviceRadixSort::SortPairs(nullptr, cub_bytes, static_cast<const int32_t*>(nullptr),
                                                       static_cast<int32_t*>(nullptr),
                                                       static_cast<const int32_t*>(nullptr),
                                                       static_cast<int32_t*>(nullptr), static_cast<int>(tokens));
  if (status != cudaSuccess) return status;
  const size_t ints = align_up(static_cast<size_t>(tokens) * sizeof(int32_t));
  total = 3 * ints + align_up(cub_bytes);
  char* p = static_cast<char*>(base);
  s.keys_out = reinterpret_cast<int32_t*>(p);
  s.values_in = reinterpret_cast<int32_t*>(p + ints);
  s.values_out = reinterpret_cast<int32_t*>(p + 2 * ints);
  s.cub_temp = p + 3 * ints;
  s.cub_bytes = cub_bytes;
  return cudaSuccess;
}

// ---- rope --------------------------------------------------------------------------------------------------------
// Token t's heads from in + t * in_stride into out + t * out_stride (in place: the same pointer and stride).
template <typename T>
__global__ void rope_kernel(const T* in, int64_t in_stride, T* out, int64_t out_stride, const int32_t* positions,
                            int64_t heads, int64_t half, RopeParams params) {
  __shared__ float cs[kRopeMaxHalf];
  __shared__ float sn[kRopeMaxHalf];
  const int64_t t = blockIdx.x;
  const int32_t pos = positions[t];
  if (pos < 0 && threadIdx.x == 0) record_error(params.error_op, t, pos, 0);
  const float p = static_cast<float>(pos);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = __fmul_rn(p, params.inv_freq[i]);
    float s, c;
    sincosf(angle, &s, &c);
    cs[i] = __fmul_rn(c, params.attention_scaling);
    sn[i] = __fmul_rn(params.direction, __fmul_rn(s, params.attention_scaling));
  }
  __syncthreads();
  const T* src = in + t * in_stride;
  T* dst = out + t * out_stride;
  const int64_t pairs = heads * half;
  for (int64_t q = threadIdx.x; q < pairs; q += blockDim.x) {
    const int64_t h = q / half, i = q - h * half;
    const T* s1 = src + h * 2 * half + i;
    T* x1 = dst + h * 2 * half + i;
    T* x2 = x1 + half;
    const float a = load_f32(s1, 0), b = load_f32(s1 + half, 0);
    store_f32(x1, 0, __fsub_rn(__fmul_rn(a, cs[i]), __fmul_rn(b, sn[i])));
    store_f32(x2, 0, __fadd_rn(__fmul_rn(b, cs[i]), __fmul_rn(a, sn[i])));
  }
}

// cos / sin of tokens t0 .. t0 + count - 1 into cs / sn ((count, half), as rope_kernel rounds them); the caller
// synchronises the block before reading them.
__device__ __forceinline__ void rope_table(const int32_t* positions, int64_t t0, int64_t count, int64_t half,
                                           const RopeParams& params, float* cs, float* sn) {
  for (int64_t k = threadIdx.x; k < count * half; k += blockDim.x) {
    const int64_t tt = k / half, i = k - tt * half;
    const int32_t pos = positions[t0 + tt];
    if (pos < 0 && i == 0) record_error(params.error_op, t0 + tt, pos, 0);
    const float angle = __fmul_rn(static_cast<float>(pos), params.inv_freq[i]);
    float sv, cv;
    sincosf(angle, &sv, &cv);
    cs[k] = __fmul_rn(cv, params.attention_scaling);
    sn[k] = __fmul_rn(params.direction, __fmul_rn(sv, params.attention_scaling));
  }
}

// The pairs (x1[i0 .. i0 + 7], x2[...]) of one head, src -> dst (x2 = x1 + half), rounded as rope_kernel.
template <typename T>
__device__ __forceinline__ void rotate8(const T* src, T* dst, int64_t half, const float* c, const float* sv) {
  float a[8], b[8], x1[8], x2[8];
  load8_f32(src, 0, a);
  load8_f32(src + half, 0, b);
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    x1[e] = __fsub_rn(__fmul_rn(a[e], c[e]), __fmul_rn(b[e], sv[e]));
    x2[e] = __fadd_rn(__fmul_rn(b[e], c[e]), __fmul_rn(a[e], sv[e]));
  }
  store8_f32(dst, 0, x1);
  store8_f32(dst + half, 0, x2);
}

// The same rotation with 16-byte accesses (half % 8 == 0, 16-byte aligned rows): a block takes `per_block` tokens,
// computes their cos / sin once into shared memory (as rope_kernel), then each thread rotates groups of 8 pairs
// (x1[i .. i + 7], x2[i .. i + 7]) of one head of one token. Every element is rounded as in rope_kernel: the same
// bits. In place: each group is read and written by one thread.
constexpr int kRopeVecThreads = 256;
constexpr int kRopeVecMaxTokens = 16;  // cos / sin of 16 tokens x 256 pairs: 32 KiB of shared memory

// The block's tokens [t0, t0 + count) (t0 returned; per_block per block) and their cos / sin in cs / sn
// (rope_table), visible to the whole block on return.
__device__ __forceinline__ int64_t rope_block_tokens(const int32_t* positions, int64_t tokens, int per_block,
                                                     int64_t half, const RopeParams& params, float* cs, float* sn,
                                                     int64_t& count) {
  const int64_t t0 = blockIdx.x * int64_t{per_block};
  count = tokens - t0 < per_block ? tokens - t0 : per_block;
  rope_table(positions, t0, count, half, params, cs, sn);
  __syncthreads();
  return t0;
}

template <typename T>
__global__ void __launch_bounds__(kRopeVecThreads) rope_vec_kernel(const T* in, int64_t in_stride, T* out,
                                                                   int64_t out_stride, const int32_t* positions,
                                                                   int64_t tokens, int64_t heads, int64_t half,
                                                                   int per_block, RopeParams params) {
  __shared__ float cs[kRopeVecMaxTokens * kRopeMaxHalf];
  __shared__ float sn[kRopeVecMaxTokens * kRopeMaxHalf];
  int64_t count = 0;
  const int64_t t0 = rope_block_tokens(positions, tokens, per_block, half, params, cs, sn, count);
  const int64_t groups = half / 8, per_token = heads * groups;
  for (int64_t k = threadIdx.x; k < count * per_token; k += kRopeVecThreads) {
    const int64_t tt = k / per_token, r = k - tt * per_token;
    const int64_t h = r / groups, i0 = (r - h * groups) * 8;
    rotate8(in + (t0 + tt) * in_stride + h * 2 * half + i0, out + (t0 + tt) * out_stride + h * 2 * half + i0, half,
            cs + tt * half + i0, sn + tt * half + i0);
  }
}

// Packed q/k/v in one launch (rope_qkv): per token the q heads and the k heads rotated (as rope_vec_kernel, one
// cos / sin table for both) and v's columns copied, between the packed row (packed + t * packed_stride: q, k, v side
// by side) and the three buffers' rows. to_packed false: packed -> q, k, v (forward); true: q, k, v -> packed
// (backward, params.direction -1). Units of 8 elements: hq * groups + hkv * groups rotations, then 2 * hkv * groups
// copies per token.
template <typename T>
__global__ void __launch_bounds__(kRopeVecThreads) rope_qkv_vec_kernel(T* packed, int64_t packed_stride, T* q, T* k,
                                                                       T* v, const int32_t* positions, int64_t tokens,
                                                                       int64_t hq, int64_t hkv, int64_t half,
                                                                       int per_block, bool to_packed,
                                                                       RopeParams params) {
  __shared__ float cs[kRopeVecMaxTokens * kRopeMaxHalf];
  __shared__ float sn[kRopeVecMaxTokens * kRopeMaxHalf];
  int64_t count = 0;
  const int64_t t0 = rope_block_tokens(positions, tokens, per_block, half, params, cs, sn, count);
  const int64_t groups = half / 8, d = 2 * half, nq = hq * d, nkv = hkv * d;
  const int64_t rotations = (hq + hkv) * groups, per_token = rotations + 2 * hkv * groups;
  for (int64_t u = threadIdx.x; u < count * per_token; u += kRopeVecThreads) {
    const int64_t tt = u / per_token, r = u - tt * per_token, t = t0 + tt;
    T* row = packed + t * packed_stride;
    if (r < rotations) {
      const int64_t h = r / groups, i0 = (r - h * groups) * 8;
      const bool is_q = h < hq;
      const int64_t col = is_q ? h * d + i0 : (h - hq) * d + i0;  // in q's / k's own row
      T* own = is_q ? q + t * nq + col : k + t * nkv + col;
      T* in_packed = row + (is_q ? 0 : nq) + col;
      const float* c = cs + tt * half + i0;
      const float* sv = sn + tt * half + i0;
      if (to_packed) {
        rotate8(own, in_packed, half, c, sv);
      } else {
        rotate8(in_packed, own, half, c, sv);
      }
    } else {
      const int64_t col = (r - rotations) * 8;
      float x[8];
      if (to_packed) {
        load8_f32(v + t * nkv + col, 0, x);
        store8_f32(row + nq + nkv + col, 0, x);
      } else {
        load8_f32(row + nq + nkv + col, 0, x);
        store8_f32(v + t * nkv + col, 0, x);
      }
    }
  }
}

template <typename T>
bool rope_vec_fits(const void* in, int64_t in_stride, const void* out, int64_t out_stride, int64_t half) {
  const auto aligned = [](int64_t bytes) { return bytes % 16 == 0; };
  return half % 8 == 0 && aligned(static_cast<int64_t>(reinterpret_cast<uintptr_t>(in))) &&
         aligned(static_cast<int64_t>(reinterpret_cast<uintptr_t>(out))) &&
         aligned(in_stride * static_cast<int64_t>(sizeof(T))) && aligned(out_stride * static_cast<int64_t>(sizeof(T)));
}

// Tokens per block of the vectorized kernels: about two units of 8 elements per thread, within the shared table.
int rope_tokens_per_block(int64_t units_per_token) {
  const int64_t want = (2 * kRopeVecThreads + units_per_token - 1) / units_per_token;
  return static_cast<int>(want < 1 ? 1 : want > kRopeVecMaxTokens ? kRopeVecMaxTokens : want);
}

template <typename T>
cudaError_t launch_rope_typed(const void* in, int64_t in_stride, void* out, int64_t out_stride,
                              const int32_t* positions, int64_t tokens, int64_t heads, int64_t half,
                              const RopeParams& params, bool vectorized, cudaStream_t stream) {
  const T* src = static_cast<const T*>(in);
  T* dst = static_cast<T*>(out);
  if (vectorized && rope_vec_fits<T>(in, in_stride, out, out_stride, half)) {
    const int per_block = rope_tokens_per_block(heads * (half / 8));
    const int64_t blocks = (tokens + per_block - 1) / per_block;
    rope_vec_kernel<<<static_cast<unsigned>(blocks), kRopeVecThreads, 0, stream>>>(
        src, in_stride, dst, out_stride, positions, tokens, heads, half, per_block, params);
    return cudaGetLastError();
  }
  const int threads = heads * half >= 256 ? 256 : 128;
  rope_kernel<<<static_cast<unsigned>(tokens), threads, 0, stream>>>(src, in_stride, dst, out_stride, positions,
                                                                     heads, half, params);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_rope_qkv_typed(void* packed, int64_t packed_stride, void* q, void* k, void* v,
                                  const int32_t* positions, int64_t tokens, int64_t hq, int64_t hkv, int64_t half,
                                  bool to_packed, const RopeParams& params, cudaStream_t stream) {
  const int per_block = rope_tokens_per_block((hq + 3 * hkv) * (half / 8));
  const int64_t blocks = (tokens + per_block - 1) / per_block;
  rope_qkv_vec_kernel<<<static_cast<unsigned>(blocks), kRopeVecThreads, 0, stream>>>(
      static_cast<T*>(packed), packed_stride, static_cast<T*>(q), static_cast<T*>(k), static_cast<T*>(v), positions,
      tokens, hq, hkv, half, per_block, to_packed, params);
  return cudaGetLastError();
}

}  // namespace

cudaError_t device_error_read_and_clear(DeviceErrorRecord* out, cudaStream_t stream) {
  cudaError_t status = cudaMemcpyFromSymbolAsync(out, g_error, sizeof(DeviceErrorRecord), 0, cudaMemcpyDeviceToHost,
                                                 stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  if (status != cudaSuccess || out->op == kDeviceErrorNone) return status;
  const DeviceErrorRecord cleared{};
  status = cudaMemcpyToSymbolAsync(g_error, &cleared, sizeof(DeviceErrorRecord), 0, cudaMemcpyHostToDevice, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);  // `cleared` lives on this stack frame
  return status;
}

cudaError_t launch_embedding(const void* table, int table_dtype, const int32_t* ids, void* out, int out_dtype,
                             int64_t tokens, int64_t vocab, int64_t c, int64_t vocab_offset, cudaStream_t stream) {
  if (tokens == 0) return cudaSuccess;
  if (tokens > 0x7fffffff) return cudaErrorInvalidValue;
  switch (out_dtype) {
    case 0: return embedding_out<float>(table_dtype, table, ids, out, tokens, vocab, c, vocab_offset, stream);
    case 1: return embedding_out<__nv_bfloat16>(table_dtype, table, ids, out, tokens, vocab, c, vocab_offset, stream);
    case 2: return embedding_out<__half>(table_dtype, table, ids, out, tokens, vocab, c, vocab_offset, stream);
    default: return cudaErrorInvalidValue;
  }
}

size_t embedding_backward_scratch_bytes(int64_t tokens) {
  if (tokens == 0 || tokens > 0x7fffffff) return 0;
  BackwardScratch s;
  size_t total = 0;
  if (layout_backward_scratch(nullptr, tokens, s, total) != cudaSuccess) return 0;
  return total;
}

cudaError_t launch_embedding_backward(const void* dout, int dtype, const int32_t* ids, float* dtable, int64_t tokens,
                                      int64_t vocab, int64_t c, int64_t padding_id, int64_t vocab_offset,
                                      void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  if (tokens == 0 || c == 0) return cudaSuccess;
  if (tokens > 0x7fffffff || dtype < 0 || dtype > 2) return cudaErrorInvalidValue;
  BackwardScratch s;
  size_t total = 0;
  cudaError_t status = layout_backward_scratch(scratch, tokens, s, total);
  if (status != cudaSuccess) return status;
  if (scratch == nullptr || scratch_bytes < total) return cudaErrorInvalidValue;
  const int64_t iota_blocks = (tokens + 255) / 256;
  iota_kernel<<<static_cast<unsigned>(iota_blocks < 4096 ? iota_blocks : 4096), 256, 0, stream>>>(s.values_in, tokens);
  status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  size_t cub_bytes = s.cub_bytes;
  status = cub::DeviceRadixSort::SortPairs(s.cub_temp, cub_bytes, ids, s.keys_out, s.values_in, s.values_out,
                                           static_cast<int>(tokens), 0, 32, stream);
  if (status != cudaSuccess) return status;
  const int threads = c >= 256 ? 256 : 128;
  if (dtype == 0) {
    embedding_backward_kernel<<<static_cast<unsigned>(tokens), threads, 0, stream>>>(
        static_cast<const float*>(dout), s.keys_out, s.values_out, dtable, tokens, vocab, c, padding_id, vocab_offset);
  } else if (dtype == 2) {
    embedding_backward_kernel<<<static_cast<unsigned>(tokens), threads, 0, stream>>>(
        static_cast<const __half*>(dout), s.keys_out, s.values_out, dtable, tokens, vocab, c, padding_id, vocab_offset);
  } else {
    embedding_backward_kernel<<<static_cast<unsigned>(tokens), threads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(dout), s.keys_out, s.values_out, dtable, tokens, vocab, c, padding_id, vocab_offset);
  }
  return cudaGetLastError();
}

cudaError_t launch_rope(const void* in, int64_t in_stride, void* out, int64_t out_stride, int dtype,
                        const int32_t* positions, int64_t tokens, int64_t heads, int64_t half, const RopeParams& params,
                        bool vectorized, cudaStream_t stream) {
  if (tokens == 0 || heads == 0 || half == 0) return cudaSuccess;
  if (half > kRopeMaxHalf || tokens > 0x7fffffff) return cudaErrorInvalidValue;
  switch (dtype) {
    case 0: return launch_rope_typed<float>(in, in_stride, out, out_stride, positions, tokens, heads, half, params,
                                            vectorized, stream);
    case 1: return launch_rope_typed<__nv_bfloat16>(in, in_stride, out, out_stride, positions, tokens, heads, half,
                                                    params, vectorized, stream);
    case 2: return launch_rope_typed<__half>(in, in_stride, out, out_stride, positions, tokens, heads, half, params,
                                             vectorized, stream);
    default: return cudaErrorInvalidValue;
  }
}

bool rope_qkv_fits(const void* packed, int64_t packed_stride, const void* q, const void* k, const void* v, int dtype,
                   int64_t hq, int64_t hkv, int64_t half) {
  const int64_t elem = dtype == 0 ? 4 : 2;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return half % 8 == 0 && half <= kRopeMaxHalf && aligned(packed) && aligned(q) && aligned(k) && aligned(v) &&
         (packed_stride * elem) % 16 == 0 && (hq * 2 * half * elem) % 16 == 0 && (hkv * 2 * half * elem) % 16 == 0;
}

cudaError_t launch_rope_qkv(void* packed, int64_t packed_stride, void* q, void* k, void* v, int dtype,
                            const int32_t* positions, int64_t tokens, int64_t hq, int64_t hkv, int64_t half,
                            bool to_packed, const RopeParams& params, cudaStream_t stream) {
  if (tokens == 0 || half == 0 || hq + hkv == 0) return cudaSuccess;
  if (!rope_qkv_fits(packed, packed_stride, q, k, v, dtype, hq, hkv, half) || tokens > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  switch (dtype) {
    case 0: return launch_rope_qkv_typed<float>(packed, packed_stride, q, k, v, positions, tokens, hq, hkv, half,
                                                to_packed, params, stream);
    case 1: return launch_rope_qkv_typed<__nv_bfloat16>(packed, packed_stride, q, k, v, positions, tokens, hq, hkv,
                                                        half, to_packed, params, stream);
    case 2: return launch_rope_qkv_typed<__half>(packed, packed_stride, q, k, v, positions, tokens, hq, hkv, half,
                                                 to_packed, params, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace swift::ops::cuda
