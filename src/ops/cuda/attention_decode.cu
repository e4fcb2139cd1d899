// ops/cuda/attention_decode.cu — attention of new queries against a KV cache (decoding), flash-decoding style:
// grid (query rows x heads, key splits); a block scores its chunk of keys, takes the chunk's softmax and its
// weighted sum of values; a combine kernel merges the chunks of a row by their maxima.
//
// Invariants:
//  - Math in fp32 whatever the storage dtype: the query is scaled before the dot products (as ops::attention),
//    the softmax subtracts the maximum, exponentials are expf, sums are fp32; the result is rounded once.
//  - Every (query, head) row has at least one visible key (its own position), so its first split is never empty
//    and the combined sum is positive; an empty later split records max = -inf, sum = 0 and contributes nothing.
//  - Pass 1: one warp per key (lanes split D, shuffle reduction); pass 2: threads own (key group, column) pairs,
//    reading value rows coalesced. Scores of the chunk live in shared memory (chunk <= kAttentionDecodeMaxChunk).
//  - No atomics: results are deterministic run to run.
//  - With Params::start_device the position of query 0 is read on the device (the launch is then replayable by a CUDA
//    graph); the grid and chunks depend only on the host-side bound, never on the position read.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "ops/cuda/kernels_attention_decode.cuh"

namespace swift::ops::cuda {

namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;

__device__ __forceinline__ float load_f32(const float* p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load_f32(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load_f32(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ __forceinline__ void store(float* p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

struct Params {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  float* ws;  // [rows][splits][D] unnormalised outputs, then [rows][splits] maxima, then [rows][splits] sums
  int64_t queries, start, window;
  int hq, hkv, d, splits, chunk;
  float scale;
  const int32_t* start_device;  // null: `start` is the position of query 0
};

__device__ __forceinline__ int64_t query_start(const Params& p) {
  return p.start_device != nullptr ? int64_t{*p.start_device} : p.start;
}

// The first visible key of the query at `pos`.
__device__ __forceinline__ int64_t first_key(int64_t pos, int64_t window) {
  return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) decode_chunk(Params p) {
  const int64_t row = blockIdx.x;  // i * hq + h
  const int split = blockIdx.y;
  const int64_t i = row / p.hq;
  const int h = static_cast<int>(row % p.hq);
  const int kvh = h / (p.hq / p.hkv);
  const int d = p.d, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t pos = query_start(p) + i;
  const int64_t j0 = first_key(pos, p.window) + int64_t{split} * p.chunk;
  const int64_t j1 = min(pos + 1, j0 + p.chunk);  // keys [j0, j1)
  const int64_t kv_stride = int64_t{p.hkv} * d;

  extern __shared__ float smem[];
  float* qs = smem;                 // (D) scaled query
  float* scores = qs + d;           // (chunk) scores, then exponentials
  float* partial = scores + p.chunk;  // (kThreads) pass-2 partial sums
  float* red = partial + kThreads;    // (kWarps) reductions

  const int64_t ws_rows = p.queries * p.hq * p.splits;
  float* ws_acc = p.ws;
  float* ws_max = p.ws ? p.ws + ws_rows * d : nullptr;
  float* ws_sum = p.ws ? ws_max + ws_rows : nullptr;
  const int64_t slot = row * p.splits + split;

  if (j0 >= j1) {  // an empty later split: contributes nothing to the combine
    for (int c = tid; c < d; c += kThreads) ws_acc[slot * d + c] = 0.0f;
    if (tid == 0) {
      ws_max[slot] = -INFINITY;
      ws_sum[slot] = 0.0f;
    }
    return;
  }
  const T* q = static_cast<const T*>(p.q) + row * d;
  for (int c = tid; c < d; c += kThreads) qs[c] = load_f32(q, c) * p.scale;
  __syncthreads();

  // Pass 1: scores, one warp per key.
  const T* k = static_cast<const T*>(p.k) + kvh * int64_t{d};
  float local_max = -INFINITY;
  for (int64_t j = j0 + warp; j < j1; j += kWarps) {
    const T* kr = k + j * kv_stride;
    float s = 0.0f;
    for (int c = lane; c < d; c += 32) s += qs[c] * load_f32(kr, c);
    s = warp_sum(s);
    if (lane == 0) scores[j - j0] = s;
    local_max = fmaxf(local_max, s);
  }
  if (lane == 0) red[warp] = local_max;
  __syncthreads();
  float m = red[0];
  for (int w = 1; w < kWarps; ++w) m = fmaxf(m, red[w]);
  __syncthreads();  // red is reused below

  const int n = static_cast<int>(j1 - j0);
  float local_sum = 0.0f;
  for (int t = tid; t < n; t += kThreads) {
    const float e = expf(scores[t] - m);
    scores[t] = e;
    local_sum += e;
  }
  local_sum = warp_sum(local_sum);
  if (lane == 0) red[warp] = local_sum;
  __syncthreads();
  float l = 0.0f;
  for (int w = 0; w < kWarps; ++w) l += red[w];

  // Pass 2: out[c] = sum_j e_j v[j][c]; with D <= kThreads, kThreads / D key groups share the keys.
  const T* v = static_cast<const T*>(p.v) + kvh * int64_t{d};
  const bool direct = p.splits == 1;
  T* out = static_cast<T*>(p.out) + row * d;
  if (d <= kThreads) {
    const int groups = kThreads / d;
    const int g = tid / d, c = tid % d;
    if (g < groups) {
      float acc = 0.0f;
      for (int t = g; t < n; t += groups) acc += scores[t] * load_f32(v + (j0 + t) * kv_stride, c);
      partial[g * d + c] = acc;
    }
    __syncthreads();
    if (tid < d) {
      float acc = 0.0f;
      for (int gg = 0; gg < groups; ++gg) acc += partial[gg * d + tid];
      if (direct) store(out, tid, acc / l);
      else ws_acc[slot * d + tid] = acc;
    }
  } else {
    for (int c = tid; c < d; c += kThreads) {
      float acc = 0.0f;
      for (int t = 0; t < n; ++t) acc += scores[t] * load_f32(v + (j0 + t) * kv_stride, c);
      if (direct) store(out, c, acc / l);
      else ws_acc[slot * d + c] = acc;
    }
  }
  if (!direct && tid == 0) {
    ws_max[slot] = m;
    ws_sum[slot] = l;
  }
}

// One block per row: out = sum_s acc_s e^(m_s - M) / sum_s l_s e^(m_s - M), M = max_s m_s.
template <typename T>
__global__ void __launch_bounds__(kThreads) decode_combine(Params p) {
  const int64_t row = blockIdx.x;
  const int d = p.d, splits = p.splits, tid = threadIdx.x;
  const int64_t ws_rows = p.queries * p.hq * splits;
  const float* ws_acc = p.ws + row * splits * int64_t{d};
  const float* ws_max = p.ws + ws_rows * d + row * splits;
  const float* ws_sum = p.ws + ws_rows * d + ws_rows + row * splits;
  extern __shared__ float weights[];  // (splits)
  __shared__ float total;
  if (tid == 0) {
    float m = -INFINITY;
    for (int s = 0; s < splits; ++s) m = fmaxf(m, ws_max[s]);
    float l = 0.0f;
    for (int s = 0; s < splits; ++s) {
      const float w = ws_max[s] == -INFINITY ? 0.0f : expf(ws_max[s] - m);
      weights[s] = w;
      l += ws_sum[s] * w;
    }
    total = l;
  }
  __syncthreads();
  T* out = static_cast<T*>(p.out) + row * d;
  const float inv = 1.0f / total;
  for (int c = tid; c < d; c += kThreads) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) acc += ws_acc[int64_t{s} * d + c] * weights[s];
    store(out, c, acc * inv);
  }
}

template <typename T>
cudaError_t launch(const Params& p, cudaStream_t stream) {
  const int64_t rows = p.queries * p.hq;
  const size_t smem = sizeof(float) * (static_cast<size_t>(p.d) + p.chunk + kThreads + kWarps);
  decode_chunk<T><<<dim3(static_cast<unsigned>(rows), static_cast<unsigned>(p.splits)), kThreads, smem, stream>>>(p);
  if (p.splits == 1) return cudaGetLastError();
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  decode_combine<T><<<static_cast<unsigned>(rows), kThreads, sizeof(float) * p.splits, stream>>>(p);
  return cudaGetLastError();
}

// One thread per element of the new rows; k and v in the same launch.
template <typename E>
__global__ void kv_write(const E* k_new, const E* v_new, E* k_cache, E* v_cache, const int32_t* row, int64_t rows,
                         int64_t row_elems, int64_t capacity) {
  const int64_t n = rows * row_elems;
  const int64_t base = int64_t{*row};
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n; e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = base + e / row_elems;
    if (r < 0 || r >= capacity) continue;
    const int64_t dst = r * row_elems + e % row_elems;
    k_cache[dst] = k_new[e];
    v_cache[dst] = v_new[e];
  }
}

}  // namespace

cudaError_t launch_kv_cache_write(const void* k_new, const void* v_new, void* k_cache, void* v_cache, const int32_t* row,
                                  int64_t rows, int64_t row_elems, int64_t capacity, int elem_bytes, cudaStream_t stream) {
  const int64_t n = rows * row_elems;
  if (n == 0) return cudaSuccess;
  if (row == nullptr || (elem_bytes != 2 && elem_bytes != 4)) return cudaErrorInvalidValue;
  constexpr int kBlock = 256;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const unsigned grid = static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
  if (elem_bytes == 2) {
    kv_write<uint16_t><<<grid, kBlock, 0, stream>>>(static_cast<const uint16_t*>(k_new),
                                                    static_cast<const uint16_t*>(v_new), static_cast<uint16_t*>(k_cache),
                                                    static_cast<uint16_t*>(v_cache), row, rows, row_elems, capacity);
  } else {
    kv_write<uint32_t><<<grid, kBlock, 0, stream>>>(static_cast<const uint32_t*>(k_new),
                                                    static_cast<const uint32_t*>(v_new), static_cast<uint32_t*>(k_cache),
                                                    static_cast<uint32_t*>(v_cache), row, rows, row_elems, capacity);
  }
  return cudaGetLastError();
}

int64_t attention_decode_max_keys(const AttentionDecodeArgs& a) {
  const int64_t last = a.start + a.queries;  // keys seen by the last query
  return a.window > 0 && a.window < last ? a.window : last;
}

AttentionDecodeSplit attention_decode_split(const AttentionDecodeArgs& a, int sm_count) {
  const int64_t rows = a.queries * a.hq, keys = attention_decode_max_keys(a);
  const int64_t target_blocks = 2 * static_cast<int64_t>(sm_count > 0 ? sm_count : 1);
  const int64_t wanted = rows >= target_blocks ? 1 : (target_blocks + rows - 1) / rows;
  auto round64 = [](int64_t x) { return (x + 63) / 64 * 64; };
  int64_t chunk = round64((keys + wanted - 1) / wanted);
  chunk = chunk < 64 ? 64 : (chunk > kAttentionDecodeMaxChunk ? kAttentionDecodeMaxChunk : chunk);
  if ((keys + chunk - 1) / chunk > kAttentionDecodeMaxSplits) chunk = round64((keys + kAttentionDecodeMaxSplits - 1) / kAttentionDecodeMaxSplits);
  AttentionDecodeSplit s;
  s.chunk = static_cast<int32_t>(chunk > INT32_MAX ? INT32_MAX : chunk);
  s.splits = static_cast<int32_t>((keys + chunk - 1) / chunk);
  return s;
}

int64_t attention_decode_workspace_floats(const AttentionDecodeArgs& a, const AttentionDecodeSplit& s) {
  if (s.splits <= 1) return 0;
  return a.queries * a.hq * s.splits * (int64_t{a.head_dim} + 2);
}

cudaError_t launch_attention_decode(const AttentionDecodeArgs& a, const AttentionDecodeSplit& s, float* workspace,
                                    cudaStream_t stream) {
  if (a.queries == 0 || a.hq == 0 || a.head_dim == 0) return cudaSuccess;
  if (a.hkv <= 0 || a.hq % a.hkv != 0 || a.head_dim > kAttentionDecodeMaxHeadDim || s.splits < 1 ||
      s.chunk < 1 || s.chunk > kAttentionDecodeMaxChunk || s.splits > kAttentionDecodeMaxSplits ||
      (s.splits > 1 && workspace == nullptr) || a.queries * a.hq > 0x7fffffff || a.dtype < 0 || a.dtype > 2) {
    return cudaErrorInvalidValue;
  }
  Params p{a.q, a.k, a.v, a.out, s.splits > 1 ? workspace : nullptr, a.queries, a.start, a.window,
           a.hq, a.hkv, a.head_dim, s.splits, s.chunk, a.scale, a.start_device};
  if (a.dtype == 1) return launch<__nv_bfloat16>(p, stream);
  if (a.dtype == 2) return launch<__half>(p, stream);
  return launch<float>(p, stream);
}

}  // namespace swift::ops::cuda
