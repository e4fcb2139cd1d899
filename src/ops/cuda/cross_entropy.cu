// ops/cuda/cross_entropy.cu — the kernels of the LM head + cross-entropy: row gather / scatter, per-row statistics
// of a full-vocabulary logits block, the one-pass gradient (the statistics and unnormalised probabilities written in
// place, one read of the row), the two-pass form's in-place turn of logits into dz, and the per-row factors
// (ops_cross_entropy.cpp drives them).
//
// Invariants:
//  - Loads convert to fp32, all math in fp32 (expf/logf/expm1f, no fast-math intrinsics), stores round once
//    (__float2bfloat16_rn / __float2half_rn; kernels_elementwise.cuh's load_f32 / store_f32), except the rare rescale
//    of a row already written (a second rounding of values at most e^-40 of the row's largest).
//  - Deterministic: each output element has one writer and a fixed order of operations (per-thread sweeps in
//    increasing column order, then a fixed reduction tree); the statistics of a row do not depend on whether the
//    gradient pass writes it.
//  - argmax is the first maximal index (ties resolved to the smaller vocabulary id), as torch.argmax. A NaN logit
//    never wins the max and makes the row's lse and loss NaN, as in the CPU reference.
//  - Logits rows are runs of float4 (ld % 4 == 0, 16-byte aligned base): a thread block owns one row.
//  - In place with a 16-bit dtype (dz, P): each tile of a row (logits [j0, j0 + n)) is read completely into
//    registers, then a barrier, then written. Its writes cover bytes [2 j0, 2 j0 + 2 n) of the row, i.e. logits below
//    j0 + n: this tile's (read before the barrier) or earlier tiles'. The next tile reads from byte 4 (j0 + n) on,
//    past every write of this one, so no thread ever reads a logit another thread has overwritten.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/kernels_cross_entropy.cuh"
#include "ops/cuda/kernels_elementwise.cuh"  // load_f32 / store_f32

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
                                        int out_dtype, const float* row_e, const float* coef) {
  for (int64_t i = blockIdx.y; i < count; i += gridDim.y) {
    const int64_t dst = static_cast<int64_t>(positions[i]) * c;
    const bool scaled = row_e != nullptr;
    const float e_i = scaled ? row_e[i] : 1.0f, coef_i = scaled ? coef[i] : 1.0f;
    for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < c;
         e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      store_f(out, out_dtype, dst + e, scaled ? acc[i * c + e] * e_i * coef_i : acc[i * c + e]);
    }
  }
}

// ---- per-row statistics, and the one-pass gradient's unnormalised probabilities ----
constexpr float kShiftSlack = 40.0f;  // a logit above shift + this moves the shift up (what was summed rescaled)
constexpr float kLseSlack = 52.0f;    // lse_dz above shift + this: the written row rescaled at the end (a shard)

// Block-wide max of x (NaN ignored, as fmaxf); every thread gets it. buf: kRowThreads / 32 floats of shared memory.
__device__ __forceinline__ float block_max(float x, float* buf) {
  for (int delta = 16; delta > 0; delta >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, delta));
  __syncthreads();  // buf's previous readers are done
  if ((threadIdx.x & 31) == 0) buf[threadIdx.x >> 5] = x;
  __syncthreads();
  float m = buf[0];
  for (int w = 1; w < kRowThreads / 32; ++w) m = fmaxf(m, buf[w]);
  return m;
}

// (m, arg) := the larger of (m, arg) and (om, oarg), ties to the smaller index (first maximal, as torch.argmax).
__device__ __forceinline__ void merge_max(float& m, int32_t& arg, float om, int32_t oarg) {
  if (om > m || (om == m && oarg < arg)) {
    m = om;
    arg = oarg;
  }
}

// Multiplies elements [0, n) of a written row by r (the rare shift move); callers put a barrier after.
template <typename T>
__device__ void rescale_written(T* p, int64_t n, float r) {
  for (int64_t e = threadIdx.x; e < n; e += kRowThreads) store_f32(p, e, load_f32(p, e) * r);
}

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

// One block per row, one read of it, tiles of kRowThreads x kUnroll float4 (thread x takes float4 x, x + 256, ...
// of each tile: its columns in increasing order). A uniform shift: the first tile's largest logit (the first tile
// with a finite one; 0 before it), moved up to the largest so far when a later tile holds a logit above
// shift + kShiftSlack (the sums so far multiplied by exp(old - new)). Each thread sums exp(z - shift) over its
// columns in order and keeps its largest logit and first index of it; the threads' sums and maxima merge in a fixed
// tree (within each warp, then the warps in order): lse = shift + log(sum). The statistics depend only on the row,
// so both instantiations give the same bits.
// kWrite (the one-pass gradient): the row is also overwritten in place with P[j] = exp(z[j] - shift) in T (16-bit:
// the first half of the row), tile by tile: each tile is read completely, then a barrier, then written (its writes
// cover logits already read), the part already written rescaled with the sums when the shift moves (every P <=
// e^40). At the end, with lse_dz = whole_lse[row] (a shard) or the row's own lse: P[label] = expm1(z[label] - lse_dz)
// / E and row_e[row] = E = exp(shift - lse_dz) (E >= e^-52: the written row is rescaled first when lse_dz lies
// further above shift), so that coef E P = coef (softmax - onehot) = dz.
// Row blocks per SM: 6 for the statistics (40 registers), 5 with the writes (48; 4 at the 58 the compiler would take:
// 1.34 ms against 1.26 on a 5,462-row 0.5B block, PERFORMANCE run 17).
template <typename T, bool kWrite>
__global__ void __launch_bounds__(kRowThreads, kWrite ? 5 : 6)
    ce_rows_kernel(float* logits, int64_t cols, int64_t ld, const int32_t* labels, const float* whole_lse, float* lse,
                   float* label_logit, float* loss, int32_t* argmax, float* row_max, float* row_e) {
  const int64_t row = blockIdx.x;
  float* z = logits + row * ld;
  const float4* z4 = reinterpret_cast<const float4*>(z);
  T* out = reinterpret_cast<T*>(z);
  const int32_t label = labels[row];
  const int n = static_cast<int>(cols);  // < 2^31 (rows_of_float4): 32-bit column arithmetic
  const int quads = (n + 3) / 4;
  constexpr int kTile = kRowThreads * kUnroll;
  __shared__ float max_buf[kRowThreads / 32];
  __shared__ float warp_m[kRowThreads / 32], warp_s[kRowThreads / 32];
  __shared__ int32_t warp_arg[kRowThreads / 32];
  __shared__ float label_value, lse_dz_shared;
  float m = -INFINITY, sum = 0.0f, shift = 0.0f;
  int32_t arg = kNoIndex;
  bool have_shift = false;
  for (int t0 = 0; t0 < quads; t0 += kTile) {  // uniform over the block: its barriers are reached by all
    float4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int q = t0 + u * kRowThreads + static_cast<int>(threadIdx.x);
      if (q < quads) v[u] = z4[q];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = 4 * (t0 + u * kRowThreads + static_cast<int>(threadIdx.x));
      if (j >= n) break;
      const float in[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (j + k < n) {
          if (in[k] > m) {  // a NaN never wins
            m = in[k];
            arg = j + k;
          }
          if (j + k == label) label_value = in[k];
        }
      }
    }
    // Barriers here: the tile is read before any of it is overwritten, and the shift is uniform.
    if (!have_shift) {
      const float bm = block_max(m, max_buf);
      have_shift = isfinite(bm);
      if (have_shift) shift = bm;
    } else if (__syncthreads_or(m > shift + kShiftSlack && m < INFINITY)) {  // rare
      const float bm = block_max(m, max_buf);
      if (bm > shift && bm < INFINITY) {
        const float r = expf(shift - bm);
        sum *= r;
        if constexpr (kWrite) rescale_written(out, int64_t{4} * t0, r);
        shift = bm;
      }
      __syncthreads();
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int q = t0 + u * kRowThreads + static_cast<int>(threadIdx.x);
      if (q >= quads) continue;
      const float in[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
      float d[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        d[k] = 4 * q + k < n ? expf(in[k] - shift) : 0.0f;
        sum += d[k];
      }
      if constexpr (kWrite) store4(out, 4 * q, d);
    }
  }
  for (int delta = 16; delta > 0; delta >>= 1) {
    const float om = __shfl_down_sync(0xffffffffu, m, delta);
    const float os = __shfl_down_sync(0xffffffffu, sum, delta);
    const int32_t oarg = __shfl_down_sync(0xffffffffu, arg, delta);
    merge_max(m, arg, om, oarg);
    sum += os;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_m[warp] = m;
    warp_s[warp] = sum;
    warp_arg[warp] = arg;
  }
  __syncthreads();  // also: every write of the row is done
  if (threadIdx.x == 0) {
    float total_m = warp_m[0], total_s = warp_s[0];
    int32_t total_arg = warp_arg[0];
    for (int w = 1; w < kRowThreads / 32; ++w) {
      merge_max(total_m, total_arg, warp_m[w], warp_arg[w]);
      total_s += warp_s[w];
    }
    const float row_lse = shift + logf(total_s);
    const float lab = label >= 0 && label < n ? label_value : 0.0f;  // outside: a shard's token of another shard
    lse[row] = row_lse;
    label_logit[row] = lab;
    loss[row] = row_lse - lab;
    argmax[row] = total_arg == kNoIndex ? 0 : total_arg;
    if (row_max != nullptr) row_max[row] = total_m;
    lse_dz_shared = whole_lse != nullptr ? whole_lse[row] : row_lse;
  }
  if constexpr (kWrite) {
    __syncthreads();
    const float lse_dz = lse_dz_shared;
    if (isfinite(lse_dz) && lse_dz > shift + kLseSlack) {  // uniform; a shard whose logits lie far below the whole's
      rescale_written(out, int64_t{4} * quads, expf(shift - (lse_dz - kLseSlack)));
      shift = lse_dz - kLseSlack;
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      row_e[row] = expf(shift - lse_dz);
      if (label >= 0 && label < n) store_f32(out, label, expm1f(label_value - lse_dz) * expf(lse_dz - shift));
    }
  }
}

// ---- dz in place ----
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

// dst[i, :] = src[i, :] * row_e[i] * (coef[i] / coef_div), in dst's dtype (src: the activation dtype).
template <typename T>
__global__ void ce_scale_rows_kernel(const T* src, int64_t count, int64_t c, const float* row_e, const float* coef,
                                     float coef_div, T* dst) {
  for (int64_t i = blockIdx.y; i < count; i += gridDim.y) {
    const float f = row_e[i] * (coef[i] / coef_div);
    for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < c;
         e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      store_f32(dst, i * c + e, load_f32(src, i * c + e) * f);
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
  ce_rows_kernel<float, false><<<static_cast<unsigned>(rows), kRowThreads, 0, stream>>>(
      const_cast<float*>(logits), cols, ld, labels, nullptr, lse, label_logit, loss, argmax, row_max, nullptr);
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
                                    int out_dtype, cudaStream_t stream, const float* row_e, const float* coef) {
  if (count <= 0 || c <= 0) return cudaSuccess;
  if ((row_e == nullptr) != (coef == nullptr)) return cudaErrorInvalidValue;
  dim3 grid(grid_for(c, 256, 64), static_cast<unsigned>(count < 65535 ? count : 65535));
  scatter_rows_f32_kernel<<<grid, 256, 0, stream>>>(acc, positions, count, c, out, out_dtype, row_e, coef);
  return cudaGetLastError();
}

cudaError_t launch_ce_one_pass(float* logits, int64_t rows, int64_t cols, int64_t ld, const int32_t* labels,
                               const float* whole_lse, float* lse, float* label_logit, float* loss, int32_t* argmax,
                               float* row_max, float* row_e, int p_dtype, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (!rows_of_float4(logits, rows, cols, ld)) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>(rows);
  switch (p_dtype) {
    case 0:
      ce_rows_kernel<float, true><<<grid, kRowThreads, 0, stream>>>(logits, cols, ld, labels, whole_lse, lse,
                                                                    label_logit, loss, argmax, row_max, row_e);
      break;
    case 1:
      ce_rows_kernel<__nv_bfloat16, true><<<grid, kRowThreads, 0, stream>>>(logits, cols, ld, labels, whole_lse, lse,
                                                                            label_logit, loss, argmax, row_max, row_e);
      break;
    case 2:
      ce_rows_kernel<__half, true><<<grid, kRowThreads, 0, stream>>>(logits, cols, ld, labels, whole_lse, lse,
                                                                     label_logit, loss, argmax, row_max, row_e);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_ce_scale_rows(const void* src, int dtype, int64_t count, int64_t c, const float* row_e,
                                 const float* coef, float coef_div, void* dst, cudaStream_t stream) {
  if (count <= 0 || c <= 0) return cudaSuccess;
  dim3 grid(grid_for(c, 256, 64), static_cast<unsigned>(count < 65535 ? count : 65535));
  switch (dtype) {
    case 0:
      ce_scale_rows_kernel<<<grid, 256, 0, stream>>>(static_cast<const float*>(src), count, c, row_e, coef, coef_div,
                                                     static_cast<float*>(dst));
      break;
    case 1:
      ce_scale_rows_kernel<<<grid, 256, 0, stream>>>(static_cast<const __nv_bfloat16*>(src), count, c, row_e, coef,
                                                     coef_div, static_cast<__nv_bfloat16*>(dst));
      break;
    case 2:
      ce_scale_rows_kernel<<<grid, 256, 0, stream>>>(static_cast<const __half*>(src), count, c, row_e, coef, coef_div,
                                                     static_cast<__half*>(dst));
      break;
    default: return cudaErrorInvalidValue;
  }
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
