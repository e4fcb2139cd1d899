// ops/cuda/matmul.cu — the small kernels around the matrix products: bias add, bias gradient, LoRA dropout
// conversion and dx term, and the per-chunk passes of the chunked LM-head cross-entropy.
//
// Invariants:
//  - Loads convert to fp32, all math in fp32 (expf/logf, no fast-math intrinsics), stores round once
//    (__float2bfloat16_rn / __float2half_rn).
//  - Every kernel is deterministic: each output element has one writer and a fixed summation order.
//  - The dropout multiplier of flat element e is philox_word(seed, e) >= threshold ? keep_scale : 0 (ops/philox.h),
//    applied as x * multiplier (NaN stays NaN), as the CPU kernels do.
//  - argmax is the first maximal index (ties resolved to the smaller vocabulary id), as torch.argmax.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cmath>

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

// One block of 32 x 16 threads per 32 columns: thread (tx, ty) sums rows ty, ty + 16, ...; then a fixed tree.
__global__ void column_sums_add_kernel(const void* x, int x_dtype, int64_t n, int64_t m, float* out) {
  __shared__ float part[16][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = blockIdx.x * 32 + tx;
  float s = 0.0f;
  if (j < m) {
    for (int64_t i = ty; i < n; i += 16) s += load_f(x, x_dtype, i * m + j);
  }
  part[ty][tx] = s;
  __syncthreads();
  for (int stride = 8; stride > 0; stride >>= 1) {
    if (ty < stride) part[ty][tx] += part[ty + stride][tx];
    __syncthreads();
  }
  if (ty == 0 && j < m) out[j] += part[0][tx];
}

// ---- LoRA dropout ----
// Each thread handles one philox block (4 consecutive flat indices) intersected with [begin, end).
__global__ void dropout_rows_to_f32_kernel(const void* x, int x_dtype, int64_t begin, int64_t end, uint64_t seed,
                                           uint32_t threshold, float keep_scale, float* out) {
  const int64_t q0 = begin >> 2, q1 = (end + 3) >> 2;
  for (int64_t q = q0 + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < q1;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    PhiloxBlock blk{{0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}};
    if (threshold != 0) blk = philox_block(seed, static_cast<uint64_t>(q));
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int64_t e = q * 4 + w;
      if (e < begin || e >= end) continue;
      const float mult = blk.w[w] >= threshold ? keep_scale : 0.0f;
      out[e - begin] = load_f(x, x_dtype, e) * mult;
    }
  }
}

// Loads 4 consecutive elements (16-byte aligned F32 or 8-byte aligned BF16) as floats.
template <bool kBf16>
__device__ __forceinline__ void load4(const void* x, int64_t e, float v[4]) {
  if constexpr (kBf16) {
    const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const __nv_bfloat16*>(x) + e);
    const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&raw.x);
    const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&raw.y);
    v[0] = __low2float(lo); v[1] = __high2float(lo); v[2] = __low2float(hi); v[3] = __high2float(hi);
  } else {
    const float4 f = *reinterpret_cast<const float4*>(static_cast<const float*>(x) + e);
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
  }
}

// Multiplies v (flat elements e..e+3, e % 4 == 0) by their dropout multipliers.
__device__ __forceinline__ void apply_dropout4(float v[4], uint64_t seed, int64_t e, uint32_t threshold, float keep_scale) {
  if (threshold == 0) return;
  const PhiloxBlock blk = philox_block(seed, static_cast<uint64_t>(e >> 2));
#pragma unroll
  for (int w = 0; w < 4; ++w) v[w] = v[w] * (blk.w[w] >= threshold ? keep_scale : 0.0f);
}

// xa (n, R) F32 = dropout(x) a^T for small ranks, in one read of x: a block is 8 warps x 4 rows; each lane owns 4
// consecutive columns (exactly one philox block, since k % 4 == 0) of every 128-column step, a's step is staged in
// shared memory and read as float4 (conflict-free); each (row, rank) sum is a lane-order sum of products, then a
// fixed butterfly over the warp: deterministic, independent of the launch.
template <int R, bool kBf16>
__global__ void __launch_bounds__(256) lora_xa_kernel(const void* x, const float* a, int64_t n, int64_t k,
                                                      uint64_t seed, uint32_t threshold, float keep_scale, float* xa) {
  constexpr int kRows = 4, kWarps = 8, kCols = 128;
  __shared__ __align__(16) float sa[R][kCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRows;
  float acc[kRows][R];
#pragma unroll
  for (int j = 0; j < kRows; ++j)
#pragma unroll
    for (int rr = 0; rr < R; ++rr) acc[j][rr] = 0.0f;
  for (int64_t k0 = 0; k0 < k; k0 += kCols) {
    __syncthreads();
    for (int i = threadIdx.x; i < R * kCols; i += blockDim.x) {
      const int rr = i / kCols, cc = i % kCols;
      sa[rr][cc] = k0 + cc < k ? a[rr * k + k0 + cc] : 0.0f;
    }
    __syncthreads();
    const int64_t c = k0 + 4 * lane;
    if (c >= k) continue;  // k % 4 == 0: the lane's 4 columns are all inside
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const int64_t row = row0 + j;
      if (row >= n) continue;
      const int64_t e = row * k + c;
      float v[4];
      load4<kBf16>(x, e, v);
      apply_dropout4(v, seed, e, threshold, keep_scale);
#pragma unroll
      for (int rr = 0; rr < R; ++rr) {
        const float4 av = *reinterpret_cast<const float4*>(&sa[rr][4 * lane]);
        acc[j][rr] += v[0] * av.x + v[1] * av.y + v[2] * av.z + v[3] * av.w;
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
#pragma unroll
    for (int rr = 0; rr < R; ++rr) {
      float t = acc[j][rr];
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xFFFFFFFFu, t, off);
      acc[j][rr] = t;
    }
    const int64_t row = row0 + j;
    if (lane == 0 && row < n) {
#pragma unroll
      for (int rr = 0; rr < R; ++rr) xa[row * R + rr] = acc[j][rr];
    }
  }
}

// dx (n, k) += scale * multiplier * (g a) for small ranks, in one read and one write of dx: a block is 8 warps x 4
// rows, lanes own 4 consecutive columns of each 128-column step (a staged in shared memory), g's row in registers.
template <int R, bool kBf16>
__global__ void __launch_bounds__(256) lora_dx_fused_kernel(void* dx, const float* g, const float* a, int64_t n,
                                                            int64_t k, float scale, uint64_t seed, uint32_t threshold,
                                                            float keep_scale) {
  constexpr int kRows = 4, kWarps = 8, kCols = 128;
  __shared__ __align__(16) float sa[R][kCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * kRows;
  for (int64_t k0 = 0; k0 < k; k0 += kCols) {
    __syncthreads();
    for (int i = threadIdx.x; i < R * kCols; i += blockDim.x) {
      const int rr = i / kCols, cc = i % kCols;
      sa[rr][cc] = k0 + cc < k ? a[rr * k + k0 + cc] : 0.0f;
    }
    __syncthreads();
    const int64_t c = k0 + 4 * lane;
    if (c >= k) continue;
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const int64_t row = row0 + j;
      if (row >= n) continue;
      float ga[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int rr = 0; rr < R; ++rr) {
        const float gv = g[row * R + rr];
        const float4 av = *reinterpret_cast<const float4*>(&sa[rr][4 * lane]);
        ga[0] += gv * av.x; ga[1] += gv * av.y; ga[2] += gv * av.z; ga[3] += gv * av.w;
      }
      const int64_t e = row * k + c;
      apply_dropout4(ga, seed, e, threshold, keep_scale);
      float v[4];
      load4<kBf16>(dx, e, v);
#pragma unroll
      for (int w = 0; w < 4; ++w) v[w] = v[w] + scale * ga[w];
      if constexpr (kBf16) {
        __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
        uint2 raw;
        raw.x = *reinterpret_cast<uint32_t*>(&lo);
        raw.y = *reinterpret_cast<uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(dx) + e) = raw;
      } else {
        *reinterpret_cast<float4*>(static_cast<float*>(dx) + e) = make_float4(v[0], v[1], v[2], v[3]);
      }
    }
  }
}

// Partial da over a slice of rows: part[slice][rr][k] = sum over the slice's rows of g[row][rr] * dropout(x)[row][k].
// Block (column tile of 128, row slice); warps take rows warp, warp + 8, ...; the 8 warps' sums are added in warp
// order through shared memory. Deterministic for a fixed slice count.
template <int R, bool kBf16>
__global__ void __launch_bounds__(256) lora_da_partial_kernel(const void* x, const float* g, int64_t n, int64_t k,
                                                              int64_t rows_per_slice, uint64_t seed, uint32_t threshold,
                                                              float keep_scale, float* part) {
  constexpr int kWarps = 8, kCols = 128;
  __shared__ __align__(16) float tile[R][kCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kCols + 4 * lane;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_slice;
  const int64_t r1 = r0 + rows_per_slice < n ? r0 + rows_per_slice : n;
  float acc[R][4];
#pragma unroll
  for (int rr = 0; rr < R; ++rr) acc[rr][0] = acc[rr][1] = acc[rr][2] = acc[rr][3] = 0.0f;
  if (c < k) {
    for (int64_t row = r0 + warp; row < r1; row += kWarps) {
      const int64_t e = row * k + c;
      float v[4];
      load4<kBf16>(x, e, v);
      apply_dropout4(v, seed, e, threshold, keep_scale);
#pragma unroll
      for (int rr = 0; rr < R; ++rr) {
        const float gv = g[row * R + rr];
        acc[rr][0] += gv * v[0]; acc[rr][1] += gv * v[1]; acc[rr][2] += gv * v[2]; acc[rr][3] += gv * v[3];
      }
    }
  }
  for (int i = threadIdx.x; i < R * kCols; i += blockDim.x) (&tile[0][0])[i] = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    __syncthreads();
    if (warp == w) {
#pragma unroll
      for (int rr = 0; rr < R; ++rr) {
        float4& t = *reinterpret_cast<float4*>(&tile[rr][4 * lane]);
        t.x += acc[rr][0]; t.y += acc[rr][1]; t.z += acc[rr][2]; t.w += acc[rr][3];
      }
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < R * kCols; i += blockDim.x) {
    const int rr = i / kCols, cc = i % kCols;
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kCols + cc;
    if (col < k) part[(static_cast<int64_t>(blockIdx.y) * R + rr) * k + col] = tile[rr][cc];
  }
}

// da[rr][k] += scale * sum over slices (in order) of part[slice][rr][k].
__global__ void lora_da_reduce_kernel(const float* part, int64_t slices, int64_t rk, float scale, float* da) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rk;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t sl = 0; sl < slices; ++sl) s += part[sl * rk + i];
    da[i] += scale * s;
  }
}

__global__ void lora_dx_add_kernel(void* dx, int dx_dtype, const float* ga, int64_t begin, int64_t end, float scale,
                                   uint64_t seed, uint32_t threshold, float keep_scale) {
  const int64_t q0 = begin >> 2, q1 = (end + 3) >> 2;
  for (int64_t q = q0 + blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < q1;
       q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    PhiloxBlock blk{{0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}};
    if (threshold != 0) blk = philox_block(seed, static_cast<uint64_t>(q));
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int64_t e = q * 4 + w;
      if (e < begin || e >= end) continue;
      const float mult = blk.w[w] >= threshold ? keep_scale : 0.0f;
      store_f(dx, dx_dtype, e, load_f(dx, dx_dtype, e) + scale * (mult * ga[e - begin]));
    }
  }
}

// ---- cross-entropy ----
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

constexpr int kStatsThreads = 256;

// One block per row: chunk max and first argmax, sum of exp(z - chunk max), merged into the running statistics.
__global__ void ce_chunk_stats_kernel(const float* logits, int64_t cols, int64_t ld, int64_t v0, const int32_t* labels,
                                      bool first, float* m, float* l, int32_t* argmax, float* label_logit) {
  __shared__ float smax[kStatsThreads];
  __shared__ int64_t sidx[kStatsThreads];
  __shared__ float ssum[kStatsThreads];
  const int64_t row = blockIdx.x;
  const float* z = logits + row * ld;
  const int tid = threadIdx.x;
  float best = -INFINITY;
  int64_t best_j = cols;  // "none" sorts after every real index
  for (int64_t j = tid; j < cols; j += kStatsThreads) {
    const float v = z[j];
    if (v > best) {  // strict: the first maximal j of this thread
      best = v;
      best_j = j;
    }
  }
  smax[tid] = best;
  sidx[tid] = best_j;
  __syncthreads();
  for (int stride = kStatsThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) {
      const float ov = smax[tid + stride];
      const int64_t oj = sidx[tid + stride];
      if (ov > smax[tid] || (ov == smax[tid] && oj < sidx[tid])) {
        smax[tid] = ov;
        sidx[tid] = oj;
      }
    }
    __syncthreads();
  }
  const float chunk_max = smax[0];
  const int64_t chunk_arg = sidx[0];
  float s = 0.0f;
  if (chunk_max > -INFINITY) {
    for (int64_t j = tid; j < cols; j += kStatsThreads) s += expf(z[j] - chunk_max);
  }
  ssum[tid] = s;
  __syncthreads();
  for (int stride = kStatsThreads / 2; stride > 0; stride >>= 1) {
    if (tid < stride) ssum[tid] += ssum[tid + stride];
    __syncthreads();
  }
  if (tid == 0) {
    const float chunk_sum = ssum[0];
    const int32_t lab = labels[row];
    if (lab >= v0 && lab < v0 + cols) label_logit[row] = z[lab - v0];
    if (first) {
      m[row] = chunk_max;
      l[row] = chunk_sum;
      argmax[row] = static_cast<int32_t>(v0 + (chunk_arg < cols ? chunk_arg : 0));
    } else {
      const float old_m = m[row];
      if (chunk_max > old_m) argmax[row] = static_cast<int32_t>(v0 + chunk_arg);  // strict: earlier chunks win ties
      const float new_m = fmaxf(old_m, chunk_max);
      const float a = old_m == -INFINITY ? 0.0f : expf(old_m - new_m);
      const float b = chunk_max == -INFINITY ? 0.0f : expf(chunk_max - new_m);
      l[row] = l[row] * a + chunk_sum * b;
      m[row] = new_m;
    }
  }
}

__global__ void ce_finish_kernel(const float* m, const float* l, const float* label_logit, int64_t rows, float* lse,
                                 float* loss) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = m[i] + logf(l[i]);
    lse[i] = v;
    loss[i] = v - label_logit[i];
  }
}

__global__ void ce_dlogits_kernel(const float* logits, int64_t rows, int64_t cols, int64_t ld, int64_t v0,
                                  const int32_t* labels, const float* lse, const float* coef, void* dz, int dz_dtype,
                                  int64_t ldz) {
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const float row_lse = lse[row], cf = coef[row];
    const int64_t lab = static_cast<int64_t>(labels[row]) - v0;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < cols;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float p = expf(logits[row * ld + j] - row_lse);
      store_f(dz, dz_dtype, row * ldz + j, cf * (p - (j == lab ? 1.0f : 0.0f)));
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

}  // namespace

cudaError_t launch_scale_add_bias(void* d, int d_dtype, int64_t n, int64_t m, int64_t ldd, float beta,
                                  const void* bias, int bias_dtype, cudaStream_t stream) {
  if (n <= 0 || m <= 0) return cudaSuccess;
  scale_add_bias_kernel<<<grid_for(n * m, 256), 256, 0, stream>>>(d, d_dtype, n, m, ldd, beta, bias, bias_dtype);
  return cudaGetLastError();
}

cudaError_t launch_column_sums_add(const void* x, int x_dtype, int64_t n, int64_t m, float* out, cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;
  const int64_t blocks = (m + 31) / 32;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  column_sums_add_kernel<<<static_cast<unsigned>(blocks), dim3(32, 16), 0, stream>>>(x, x_dtype, n, m, out);
  return cudaGetLastError();
}

cudaError_t launch_dropout_rows_to_f32(const void* x, int x_dtype, int64_t row0, int64_t rows, int64_t k,
                                       uint64_t seed, uint32_t threshold, float keep_scale, float* out,
                                       cudaStream_t stream) {
  if (rows <= 0 || k <= 0) return cudaSuccess;
  const int64_t begin = row0 * k, end = begin + rows * k;
  const int64_t quads = ((end + 3) >> 2) - (begin >> 2);
  dropout_rows_to_f32_kernel<<<grid_for(quads, 256), 256, 0, stream>>>(x, x_dtype, begin, end, seed, threshold,
                                                                      keep_scale, out);
  return cudaGetLastError();
}

cudaError_t launch_lora_xa(const void* x, int x_dtype, const float* a, int64_t n, int64_t k, int r, uint64_t seed,
                           uint32_t threshold, float keep_scale, float* xa, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((n + 31) / 32);
  const bool bf16 = x_dtype == 1;
  if (r == 8) {
    bf16 ? lora_xa_kernel<8, true><<<blocks, 256, 0, stream>>>(x, a, n, k, seed, threshold, keep_scale, xa)
         : lora_xa_kernel<8, false><<<blocks, 256, 0, stream>>>(x, a, n, k, seed, threshold, keep_scale, xa);
  } else if (r == 16) {
    bf16 ? lora_xa_kernel<16, true><<<blocks, 256, 0, stream>>>(x, a, n, k, seed, threshold, keep_scale, xa)
         : lora_xa_kernel<16, false><<<blocks, 256, 0, stream>>>(x, a, n, k, seed, threshold, keep_scale, xa);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

cudaError_t launch_lora_dx_fused(void* dx, int dx_dtype, const float* g, const float* a, int64_t n, int64_t k, int r,
                                 float scale, uint64_t seed, uint32_t threshold, float keep_scale, cudaStream_t stream) {
  if (n <= 0 || k <= 0) return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((n + 31) / 32);
  const bool bf16 = dx_dtype == 1;
#define SWIFT_LORA_DX(R, B) \
  lora_dx_fused_kernel<R, B><<<blocks, 256, 0, stream>>>(dx, g, a, n, k, scale, seed, threshold, keep_scale)
  if (r == 8) {
    bf16 ? SWIFT_LORA_DX(8, true) : SWIFT_LORA_DX(8, false);
  } else if (r == 16) {
    bf16 ? SWIFT_LORA_DX(16, true) : SWIFT_LORA_DX(16, false);
  } else {
    return cudaErrorInvalidValue;
  }
#undef SWIFT_LORA_DX
  return cudaGetLastError();
}

int64_t lora_da_slices(int64_t n) { return n < 1024 ? 1 : (n < 8192 ? 4 : 8); }

cudaError_t launch_lora_da_fused(const void* x, int x_dtype, const float* g, int64_t n, int64_t k, int r, float scale,
                                 uint64_t seed, uint32_t threshold, float keep_scale, float* part, float* da,
                                 cudaStream_t stream) {
  if (n <= 0 || k <= 0) return cudaSuccess;
  const int64_t slices = lora_da_slices(n);
  const int64_t rows_per_slice = (n + slices - 1) / slices;
  const dim3 grid(static_cast<unsigned>((k + 127) / 128), static_cast<unsigned>(slices));
  const bool bf16 = x_dtype == 1;
#define SWIFT_LORA_DA(R, B)                                                                                          \
  lora_da_partial_kernel<R, B><<<grid, 256, 0, stream>>>(x, g, n, k, rows_per_slice, seed, threshold, keep_scale, \
                                                         part)
  if (r == 8) {
    bf16 ? SWIFT_LORA_DA(8, true) : SWIFT_LORA_DA(8, false);
  } else if (r == 16) {
    bf16 ? SWIFT_LORA_DA(16, true) : SWIFT_LORA_DA(16, false);
  } else {
    return cudaErrorInvalidValue;
  }
#undef SWIFT_LORA_DA
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  lora_da_reduce_kernel<<<grid_for(r * k, 256), 256, 0, stream>>>(part, slices, r * k, scale, da);
  return cudaGetLastError();
}

cudaError_t launch_lora_dx_add(void* dx, int dx_dtype, const float* ga, int64_t row0, int64_t rows, int64_t k,
                               float scale, uint64_t seed, uint32_t threshold, float keep_scale, cudaStream_t stream) {
  if (rows <= 0 || k <= 0) return cudaSuccess;
  const int64_t begin = row0 * k, end = begin + rows * k;
  const int64_t quads = ((end + 3) >> 2) - (begin >> 2);
  lora_dx_add_kernel<<<grid_for(quads, 256), 256, 0, stream>>>(dx, dx_dtype, ga, begin, end, scale, seed, threshold,
                                                              keep_scale);
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(const void* src, int dtype, const int32_t* rows, int64_t count, int64_t c, void* dst,
                               cudaStream_t stream) {
  if (count <= 0 || c <= 0) return cudaSuccess;
  const int64_t row_bytes = c * (dtype == 0 ? 4 : 2);
  dim3 grid(grid_for(row_bytes / 2, 256, 64), static_cast<unsigned>(count < 65535 ? count : 65535));
  gather_rows_kernel<<<grid, 256, 0, stream>>>(static_cast<const char*>(src), row_bytes, rows, count,
                                               static_cast<char*>(dst));
  return cudaGetLastError();
}

cudaError_t launch_ce_chunk_stats(const float* logits, int64_t rows, int64_t cols, int64_t ld, int64_t v0,
                                  const int32_t* labels, bool first, float* m, float* l, int32_t* argmax,
                                  float* label_logit, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  ce_chunk_stats_kernel<<<static_cast<unsigned>(rows), kStatsThreads, 0, stream>>>(logits, cols, ld, v0, labels, first,
                                                                                  m, l, argmax, label_logit);
  return cudaGetLastError();
}

cudaError_t launch_ce_finish(const float* m, const float* l, const float* label_logit, int64_t rows, float* lse,
                             float* loss, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  ce_finish_kernel<<<grid_for(rows, 256), 256, 0, stream>>>(m, l, label_logit, rows, lse, loss);
  return cudaGetLastError();
}

cudaError_t launch_ce_dlogits(const float* logits, int64_t rows, int64_t cols, int64_t ld, int64_t v0,
                              const int32_t* labels, const float* lse, const float* coef, void* dz, int dz_dtype,
                              int64_t ldz, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  dim3 grid(grid_for(cols, 256, 64), static_cast<unsigned>(rows < 65535 ? rows : 65535));
  ce_dlogits_kernel<<<grid, 256, 0, stream>>>(logits, rows, cols, ld, v0, labels, lse, coef, dz, dz_dtype, ldz);
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
