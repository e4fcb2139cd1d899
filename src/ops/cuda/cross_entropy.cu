// ops/cuda/cross_entropy.cu — the kernels of the LM head + cross-entropy: row gather / scatter, per-row statistics
// of a full-vocabulary logits block, and the in-place turn of logits into dz (ops_cross_entropy.cpp drives them).
//
// Invariants:
//  - Loads convert to fp32, all math in fp32 (expf/logf, no fast-math intrinsics), stores round once
//    (__float2bfloat16_rn / __float2half_rn).
//  - Deterministic: each output element has one writer and a fixed order of operations (per-thread sweeps in
//    increasing column order, then a fixed reduction tree).
//  - argmax is the first maximal index (ties resolved to the smaller vocabulary id), as torch.argmax. A NaN logit
//    never wins the max and makes the row's lse and loss NaN, as in the CPU reference.
//  - Logits rows are runs of float4 (ld % 4 == 0, 16-byte aligned base): a thread block owns one row.
//  - In-place dz with a 16-bit dtype: each tile of a row (logits [j0, j0 + n)) is read completely into registers,
//    then a barrier, then written. Its writes cover bytes [2 j0, 2 j0 + 2 n) of the row, i.e. logits below j0 + n:
//    this tile's (read before the barrier) or earlier tiles'. The next tile reads from byte 4 (j0 + n) on, past
//    every write of this one, so no thread ever reads a logit another thread has overwritten.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/kernels_cross_entropy.cuh"

namespace swift::ops::cuda {

namespace {

constexpr int kRowThreads = 256;  // threads per row block
constexpr int kUnroll = 4;        // float4 loads in flight per thread (a tile is kRowThreads * kUnroll float4)
constexpr int32_t kNoIndex = INT32_MAX;

unsigned grid_for(int64_t work, int threads, int64_t cap = 65535) {
  int64_t blocks = (work + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < cap ? blocks : cap);
}

__device__ __forceinline__ void store_f(void* p, int dtype, int64_t i, float v) {
  switch (dtype) {
    case 1: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case 2: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

// ---- gather / scatter ----
__global__ void gather_rows_kernel(const char* src, int64_t row_bytes, const int32_t* rows, int64_t count, char* dst) {
  // row_bytes is a multiple of 2; copy in 2-byte units (rows of 16-bit or 32-bit elements).
  const int64_t units = row_bytes / 2;
  for (int64_t i = blockIdx.y; i < count; i += gridDim.y) {
    const uint16_t* s = reinterpret_cast<const uint16_t*>(src + static_cast<int64_t>(rows[i]) * row_bytes);
    uint16_t* d = reinterpret_cast<uint16_t*>(dst + i * row_bytes);
    for (int64_t u = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; u < units;
         u += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      d[u] = s[u];
    }
  }
}

__global__ void scatter_rows_f32_kernel(const float* acc, const int32_t* positions, int64_t count, int64_t c, void* out,
                                        int out_dtype) {
  for (int64_t i = blockIdx.y; i < count; i += gridDim.y) {
    const int64_t dst = static_cast<int64_t>(positions[i]) * c;
    for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < c;
         e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      store_f(out, out_dtype, dst + e, acc[i * c + e]);
    }
  }
}

// ---- per-row statistics ----
// Running softmax statistics of a set of logits: max m, sum s of exp(z - m), first index of the max.
struct RowState {
  float m;
  float s;
  int32_t arg;
};

// Adds logit v at column j (columns of one thread arrive in increasing order: strict > keeps the first max).
__device__ __forceinline__ void push(RowState& st, float v, int32_t j) {
  if (v > st.m) {
    st.s = st.s * expf(st.m - v) + 1.0f;  // st.m == -inf: s is 0 and expf(-inf) is 0
    st.m = v;
    st.arg = j;
  } else {
    st.s += v == -INFINITY ? 0.0f : expf(v - st.m);  // a NaN v (or +inf twice) makes s NaN
  }
}

// a := a merged with b (either may hold a lower index; ties in the max go to the smaller index).
__device__ __forceinline__ void merge(RowState& a, const RowState& b) {
  const float m = fmaxf(a.m, b.m);
  const float sa = a.m == m ? a.s : a.s * expf(a.m - m);
  const float sb = b.m == m ? b.s : b.s * expf(b.m - m);
  const int32_t arg = (a.m > b.m || (a.m == b.m && a.arg < b.arg)) ? a.arg : b.arg;
  a.m = m;
  a.s = sa + sb;
  a.arg = arg;
}

__device__ __forceinline__ RowState shuffle_down(const RowState& st, int delta) {
  RowState o;
  o.m = __shfl_down_sync(0xffffffffu, st.m, delta);
  o.s = __shfl_down_sync(0xffffffffu, st.s, delta);
  o.arg = __shfl_down_sync(0xffffffffu, st.arg, delta);
  return o;
}

__global__ void __launch_bounds__(kRowThreads)
    ce_row_stats_kernel(const float* logits, int64_t cols, int64_t ld, const int32_t* labels, float* lse,
                        float* label_logit, float* loss, int32_t* argmax, float* row_max) {
  const int64_t row = blockIdx.x;
  const float* z = logits + row * ld;
  const float4* z4 = reinterpret_cast<const float4*>(z);
  const int64_t quads = (cols + 3) / 4;
  RowState st{-INFINITY, 0.0f, kNoIndex};
  for (int64_t q0 = threadIdx.x; q0 < quads; q0 += static_cast<int64_t>(kRowThreads) * kUnroll) {
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t q = q0 + static_cast<int64_t>(u) * kRowThreads;
      if (q < quads) v[u] = z4[q];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = 4 * (q0 + static_cast<int64_t>(u) * kRowThreads);
      if (j >= cols) break;
      push(st, v[u].x, static_cast<int32_t>(j));
      if (j + 1 < cols) push(st, v[u].y, static_cast<int32_t>(j + 1));
      if (j + 2 < cols) push(st, v[u].z, static_cast<int32_t>(j + 2));
      if (j + 3 < cols) push(st, v[u].w, static_cast<int32_t>(j + 3));
    }
  }
  // Fixed tree: within each warp, then the warps' results in warp order.
  for (int delta = 16; delta > 0; delta >>= 1) {
    const RowState other = shuffle_down(st, delta);
    merge(st, other);
  }
  __shared__ RowState warp_state[kRowThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_state[warp] = st;
  __syncthreads();
  if (threadIdx.x == 0) {
    RowState total = warp_state[0];
    for (int w = 1; w < kRowThreads / 32; ++w) merge(total, warp_state[w]);
    const float row_lse = total.m + logf(total.s);
    const int32_t label = labels[row];  // outside [0, cols): a vocabulary shard's token labelled in another shard
    const float lab = label >= 0 && label < cols ? z[label] : 0.0f;
    lse[row] = row_lse;
    label_logit[row] = lab;
    loss[row] = row_lse - lab;
    argmax[row] = total.arg == kNoIndex ? 0 : total.arg;
    if (row_max != nullptr) row_max[row] = total.m;
  }
}

// ---- dz in place ----
template <typename T>
__device__ __forceinline__ void store4(T* p, int64_t i, const float (&d)[4]) {
  if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(p + i) = make_float4(d[0], d[1], d[2], d[3]);
  } else {
    T h[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        h[k] = __float2bfloat16_rn(d[k]);
      } else {
        h[k] = __float2half_rn(d[k]);
      }
    }
    *reinterpret_cast<uint2*>(p + i) = *reinterpret_cast<const uint2*>(h);
  }
}

template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    ce_dlogits_in_place_kernel(float* logits, int64_t cols, int64_t ld, const int32_t* labels, const float* lse,
                               const float* coef) {
  const int64_t row = blockIdx.x;
  float* z = logits + row * ld;
  const float4* z4 = reinterpret_cast<const float4*>(z);
  T* dz = reinterpret_cast<T*>(z);
  const float row_lse = lse[row], cf = coef[row];
  const int64_t label = labels[row];
  const int64_t quads = (cols + 3) / 4;
  constexpr int64_t kTile = static_cast<int64_t>(kRowThreads) * kUnroll;
  for (int64_t t0 = 0; t0 < quads; t0 += kTile) {  // uniform over the block: the barrier below is reached by all
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t q = t0 + static_cast<int64_t>(u) * kRowThreads + threadIdx.x;
      if (q < quads) v[u] = z4[q];
    }
    if constexpr (sizeof(T) < sizeof(float)) __syncthreads();  // the tile is read before any of it is overwritten
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t q = t0 + static_cast<int64_t>(u) * kRowThreads + threadIdx.x;
      if (q >= quads) continue;
      const float in[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
      float d[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int64_t j = 4 * q + k;
        d[k] = j < cols ? cf * (expf(in[k] - row_lse) - (j == label ? 1.0f : 0.0f)) : 0.0f;
      }
      store4(dz, 4 * q, d);
    }
  }
}

__global__ void ce_logp_kernel(const float* lse, const float* label_logit, const int32_t* positions, int64_t count,
                               float* logp) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    logp[positions[i]] = label_logit[i] - lse[i];
  }
}

__global__ void ce_coef_kernel(const float* dlogp, const int32_t* positions, int64_t count, float* coef) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    coef[i] = -dlogp[positions[i]];
  }
}

bool rows_of_float4(const float* logits, int64_t rows, int64_t cols, int64_t ld) {
  return reinterpret_cast<uintptr_t>(logits) % 16 == 0 && ld % 4 == 0 && ld >= cols && rows <= 0x7fffffff &&
         cols <= 0x7ffffff0;
}

}  // namespace

cudaError_t launch_gather_rows(const void* src, int dtype, const int32_t* rows, int64_t count, int64_t c, void* dst,
                               cudaStream_t stream) {
  if (count <= 0 || c <= 0) return cudaSuccess;
  const int64_t row_bytes = c * (dtype == 0 ? 4 : 2);
  dim3 grid(grid_for(row_bytes / 2, 256, 64), static_cast<unsigned>(count < 65535 ? count : 65535));
  gather_rows_kernel<<<grid, 256, 0, stream>>>(static_cast<const char*>(src), row_bytes, rows, count,
                                               static_cast<char*>(dst));
  return cudaGetLastError();
}

cudaError_t launch_ce_row_stats(const float* logits, int64_t rows, int64_t cols, int64_t ld, const int32_t* labels,
                                float* lse, float* label_logit, float* loss, int32_t* argmax, float* row_max,
                                cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (!rows_of_float4(logits, rows, cols, ld)) return cudaErrorInvalidValue;
  ce_row_stats_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(logits, cols, ld, labels, lse,
                                                                               label_logit, loss, argmax, row_max);
  return cudaGetLastError();
}

cudaError_t launch_ce_dlogits_in_place(float* logits, int64_t rows, int64_t cols, int64_t ld, const int32_t* labels,
                                       const float* lse, const float* coef, int dz_dtype, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (!rows_of_float4(logits, rows, cols, ld)) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>(rows);
  switch (dz_dtype) {
    case 0: ce_dlogits_in_place_kernel<float><<<grid, kRowThreads, 0, stream>>>(logits, cols, ld, labels, lse, coef); break;
    case 1:
      ce_dlogits_in_place_kernel<__nv_bfloat16><<<grid, kRowThreads, 0, stream>>>(logits, cols, ld, labels, lse, coef);
      break;
    case 2: ce_dlogits_in_place_kernel<__half><<<grid, kRowThreads, 0, stream>>>(logits, cols, ld, labels, lse, coef); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_scatter_rows_f32(const float* acc, const int32_t* positions, int64_t count, int64_t c, void* out,
                                    int out_dtype, cudaStream_t stream) {
  if (count <= 0 || c <= 0) return cudaSuccess;
  dim3 grid(grid_for(c, 256, 64), static_cast<unsigned>(count < 65535 ? count : 65535));
  scatter_rows_f32_kernel<<<grid, 256, 0, stream>>>(acc, positions, count, c, out, out_dtype);
  return cudaGetLastError();
}

cudaError_t launch_ce_logp(const float* lse, const float* label_logit, const int32_t* positions, int64_t count,
                           float* logp, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  ce_logp_kernel<<<grid_for(count, 256), 256, 0, stream>>>(lse, label_logit, positions, count, logp);
  return cudaGetLastError();
}

cudaError_t launch_ce_coef_from_dlogp(const float* dlogp, const int32_t* positions, int64_t count, float* coef,
                                      cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  ce_coef_kernel<<<grid_for(count, 256), 256, 0, stream>>>(dlogp, positions, count, coef);
  return cudaGetLastError();
}

}  // namespace swift::ops::cuda
