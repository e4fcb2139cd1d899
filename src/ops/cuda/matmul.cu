// ops/cuda/matmul.cu — the small kernels around the matrix products: bias add, bias gradient, LoRA dropout
// conversion and dx term of the general (GEMM) LoRA path. (The one-pass LoRA kernels are in lora.cu, the LM-head
// cross-entropy kernels in cross_entropy.cu.)
//
// Invariants:
//  - Loads convert to fp32, all math in fp32 (expf/logf, no fast-math intrinsics), stores round once
//    (__float2bfloat16_rn / __float2half_rn).
//  - Every kernel is deterministic: each output element has one writer and a fixed summation order.
//  - The dropout multiplier of element (row, col) of an (N, k) operand is dropout_draw(seed, g) >= threshold ?
//    keep_scale : 0 with g = dropout_index(map, row, col, k) (ops/philox.h), applied as x * multiplier (NaN stays
//    NaN), as the CPU kernels do. The identity map (g = flat index) keeps the half-block-per-thread path; a mapped
//    operand draws each element through a PhiloxCursor.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>
#include <type_traits>

#include "ops/cuda/kernels_matmul.cuh"
#include "ops/philox.h"

namespace swift::ops::cuda {

namespace {

__device__ __forceinline__ float load_f(const void* p, int dtype, int64_t i) {
  switch (dtype) {
    case 1: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case 2: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void store_f(void* p, int dtype, int64_t i, float v) {
  switch (dtype) {
    case 1: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case 2: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

unsigned grid_for(int64_t work, int threads, int64_t cap = 65535) {
  int64_t blocks = (work + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < cap ? blocks : cap);
}

// ---- bias / scale ----
__global__ void scale_add_bias_kernel(void* d, int d_dtype, int64_t n, int64_t m, int64_t ldd, float beta,
                                      const void* bias, int bias_dtype) {
  const int64_t total = n * m;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e / m, j = e - i * m;
    const int64_t at = i * ldd + j;
    float v = beta == 0.0f ? 0.0f : beta * load_f(d, d_dtype, at);
    if (bias != nullptr) v += load_f(bias, bias_dtype, j);
    store_f(d, d_dtype, at, v);
  }
}

// Blocks of 32 x 16 threads over (32 columns, a chunk of rows): thread (tx, ty) sums the chunk's rows ty, ty + 16,
// ... in order (kUnroll loads issued before their additions), then a fixed tree over ty; the chunk's sums go to
// part[chunk][j] (or are added to out[j] with a single chunk).
constexpr int kSumRowsMin = 256;      // rows per chunk at least
constexpr int kSumTargetBlocks = 528;  // ~4 blocks per SM of an H100 / H200 (a constant: see the invariants)

int64_t column_sum_rows_per_chunk(int64_t n, int64_t m) {
  const int64_t col_blocks = (m + 31) / 32;
  const int64_t want = (kSumTargetBlocks + col_blocks - 1) / col_blocks;
  const int64_t rows = (n + want - 1) / want;
  return rows > kSumRowsMin ? rows : kSumRowsMin;
}

template <typename T>
__device__ __forceinline__ float load_t(const T* p, int64_t i) {
  if constexpr (sizeof(T) == 4) {
    return p[i];
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __bfloat162float(p[i]);
  } else {
    return __half2float(p[i]);
  }
}

template <typename T>
__global__ void column_sums_kernel(const T* x, int64_t n, int64_t m, int64_t rows, float* part, float* out) {
  constexpr int kUnroll = 8;
  __shared__ float sums[16][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = blockIdx.x * 32 + tx;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows;
  const int64_t r1 = r0 + rows < n ? r0 + rows : n;
  float s = 0.0f;
  if (j < m) {
    int64_t i = r0 + ty;
    for (; i + 16 * (kUnroll - 1) < r1; i += 16 * kUnroll) {
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = load_t(x, (i + 16 * u) * m + j);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) s += v[u];
    }
    for (; i < r1; i += 16) s += load_t(x, i * m + j);
  }
  sums[ty][tx] = s;
  __syncthreads();
  for (int stride = 8; stride > 0; stride >>= 1) {
    if (ty < stride) sums[ty][tx] += sums[ty + stride][tx];
    __syncthreads();
  }
  if (ty != 0 || j >= m) return;
  if (part != nullptr) {
    part[static_cast<int64_t>(blockIdx.y) * m + j] = sums[0][tx];
  } else {
    out[j] += sums[0][tx];
  }
}

// out[j] += the chunks' sums of column j, added in chunk order.
__global__ void column_sums_reduce_kernel(const float* part, int64_t chunks, int64_t m, float* out) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < m;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) s += part[c * m + j];
    out[j] += s;
  }
}

// ---- LoRA dropout ----
// The 4 multipliers of flat elements 4q .. 4q + 3 of an (N, k) operand (threshold 0: all keep_scale = 1). The
// identity map takes half q % 2 of block q / 2 (draws 4q .. 4q + 3); a mapped one (`mapped`) draws each element at
// its stream index.
__device__ __forceinline__ void quad_multipliers(int64_t q, int64_t k, uint64_t seed, uint32_t threshold,
                                                 float keep_scale, const DropoutMap& map, bool mapped, float mult[4]) {
  if (threshold == 0) {
#pragma unroll
    for (int w = 0; w < 4; ++w) mult[w] = keep_scale;
    return;
  }
  if (!mapped) {
    const PhiloxBlock blk = philox_block(seed, static_cast<uint64_t>(q >> 1));
    const uint32_t w0 = (q & 1) != 0 ? blk.w[2] : blk.w[0], w1 = (q & 1) != 0 ? blk.w[3] : blk.w[1];
    const uint32_t draws[4] = {w0 & 0xFFFFu, w0 >> 16, w1 & 0xFFFFu, w1 >> 16};
#pragma unroll
    for (int w = 0; w < 4; ++w) mult[w] = draws[w] >= threshold ? keep_scale : 0.0f;
    return;
  }
  PhiloxCursor cursor(seed);
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const int64_t e = q * 4 + w;
    mult[w] = cursor.draw(dropout_index(map, e / k, e % k, k)) >= threshold ? keep_scale : 0.0f;
  }
}

// Each thread handles 4 consecutive flat indices (half a philox block) intersected with [begin, end).
__global__ void dropout_rows_to_f32_kernel(const void* x, int x_dtype, int64_t begin, int64_t end, int64_t k,
                                           uint64_t seed, uint32_t threshold, float keep_scale, DropoutMap map,
                                           bool mapped, float* out) {
  const int64_t q0 = begin >> 2, q1 = (end + 3) >> 2;
  for (int64_t q = q0 + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < q1;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float mult[4];
    quad_multipliers(q, k, seed, threshold, keep_scale, map, mapped, mult);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int64_t e = q * 4 + w;
      if (e < begin || e >= end) continue;
      out[e - begin] = load_f(x, x_dtype, e) * mult[w];
    }
  }
}

__global__ void lora_dx_add_kernel(void* dx, int dx_dtype, const float* ga, int64_t begin, int64_t end, int64_t k,
                                   float scale, uint64_t seed, uint32_t threshold, float keep_scale, DropoutMap map,
                                   bool mapped) {
  const int64_t q0 = begin >> 2, q1 = (end + 3) >> 2;
  for (int64_t q = q0 + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < q1;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float mult[4];
    quad_multipliers(q, k, seed, threshold, keep_scale, map, mapped, mult);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int64_t e = q * 4 + w;
      if (e < begin || e >= end) continue;
      store_f(dx, dx_dtype, e, load_f(dx, dx_dtype, e) + scale * (mult[w] * ga[e - begin]));
    }
  }
}

}  // namespace

cudaError_t launch_scale_add_bias(void* d, int d_dtype, int64_t n, int64_t m, int64_t ldd, float beta,
                                  const void* bias, int bias_dtype, cudaStream_t stream) {
  if (n <= 0 || m <= 0) return cudaSuccess;
  scale_add_bias_kernel<<<grid_for(n * m, 256), 256, 0, stream>>>(d, d_dtype, n, m, ldd, beta, bias, bias_dtype);
  return cudaGetLastError();
}

int64_t column_sums_partial_floats(int64_t n, int64_t m) {
  if (n <= 0 || m <= 0) return 0;
  const int64_t chunks = (n + column_sum_rows_per_chunk(n, m) - 1) / column_sum_rows_per_chunk(n, m);
  return chunks > 1 ? chunks * m : 0;
}

cudaError_t launch_column_sums_add(const void* x, int x_dtype, int64_t n, int64_t m, float* out, float* partial,
                                   cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  const int64_t rows = column_sum_rows_per_chunk(n, m);
  const int64_t chunks = (n + rows - 1) / rows;
  const int64_t col_blocks = (m + 31) / 32;
  if (col_blocks > 0x7fffffff || chunks > 65535 || (chunks > 1 && partial == nullptr)) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(chunks));
  float* part = chunks > 1 ? partial : nullptr;
  switch (x_dtype) {
    case 0: column_sums_kernel<<<grid, dim3(32, 16), 0, stream>>>(static_cast<const float*>(x), n, m, rows, part, out); break;
    case 1:
      column_sums_kernel<<<grid, dim3(32, 16), 0, stream>>>(static_cast<const __nv_bfloat16*>(x), n, m, rows, part, out);
      break;
    case 2: column_sums_kernel<<<grid, dim3(32, 16), 0, stream>>>(static_cast<const __half*>(x), n, m, rows, part, out); break;
    default: return cudaErrorInvalidValue;
  }
  if (chunks == 1) return cudaGetLastError();
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  column_sums_reduce_kernel<<<grid_for(m, 256), 256, 0, stream>>>(partial, chunks, m, out);
  return cudaGetLastError();
}

cudaError_t launch_dropout_rows_to_f32(const void* x, int x_dtype, int64_t row0, int64_t rows, int64_t k,
                                       uint64_t seed, uint32_t threshold, float keep_scale, const DropoutMap& map,
                                       float* out, cudaStream_t stream) {
  if (rows <= 0 || k <= 0) return cudaSuccess;
  const int64_t begin = row0 * k, end = begin + rows * k;
  const int64_t quads = ((end + 3) >> 2) - (begin >> 2);
  dropout_rows_to_f32_kernel<<<grid_for(quads, 256), 256, 0, stream>>>(
      x, x_dtype, begin, end, k, seed, threshold, keep_scale, map, !dropout_map_identity(map, k), out);
  return cudaGetLastError();
}

cudaError_t launch_lora_dx_add(void* dx, int dx_dtype, const float* ga, int64_t row0, int64_t rows, int64_t k,
                               float scale, uint64_t seed, uint32_t threshold, float keep_scale, const DropoutMap& map,
                               cudaStream_t stream) {
  if (rows <= 0 || k <= 0) return cudaSuccess;
  const int64_t begin = row0 * k, end = begin + rows * k;
  const int64_t quads = ((end + 3) >> 2) - (begin >> 2);
  lora_dx_add_kernel<<<grid_for(quads, 256), 256, 0, stream>>>(dx, dx_dtype, ga, begin, end, k, scale, seed, threshold,
                                                              keep_scale, map, !dropout_map_identity(map, k));
  return cudaGetLastError();
}

}  // namespace swift::ops::cuda
