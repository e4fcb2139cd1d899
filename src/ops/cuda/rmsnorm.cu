// ops/cuda/rmsnorm.cu — RMSNorm forward and backward on CUDA (F32, BF16 or F16 activations; F32/BF16/F16 weight).
//
// Invariants:
//  - One row per group of kRowThreads threads: a warp per row when C <= 1024 (8 rows per 256-thread block: the
//    per-head q/k norm, C = D), else a 256-thread block per row (hidden states); rows of C % 8 == 0 up to 8192 with
//    16-byte aligned activations keep their elements in registers between the sum and the output (one read, 16-byte
//    accesses: rmsnorm_vec_kernel / rmsnorm_dx_vec_kernel). A row's sums are fp64 (as the CPU
//    kernel) reduced in a fixed tree (warp shuffles, then warp partials in order): the result does not depend on
//    timing. Every element is read for the row sum before any element of the row is written, and later read and
//    written by the same thread: y may be x, and dx may be dy (without accumulate_dx).
//  - Forward: rstd = 1 / sqrt(float(sum(x^2) / C) + eps); y = weight * (x * rstd), each product rounded as torch.
//  - Backward: coef = float(-rstd^3 * sum(double(dy * w) * x) / C) in double; dx = (dy * w) * rstd + x * coef.
//    dweight (F32, +=) is deterministic without atomics: pass 1 writes fp64 partial column sums of dy * (x * rstd)
//    per chunk of rows_per_chunk(N) rows (in order), pass 2 adds the chunks in a fixed order and rounds once into
//    dweight. Pass 1 runs before dx is written (dx may be dy).
//  - Narrow rows (256 <= C <= 1024, C % 8 == 0, 16-byte aligned; SWIFT_RMSNORM_NARROW, default on): a warp per row
//    with each lane's groups of 8 elements in registers (16-byte accesses). The forward reads x once; the backward's
//    dx and pass 1 are one kernel over chunks of narrow_rows_per_chunk(N) rows (each warp adds its rows in order
//    into fp64 column sums in shared memory, the block adds its warps in order): dy and x are read once.
//  - Hidden-state rows (1024 < C <= 4096, C % 8 == 0, 16-byte aligned activations and weight) under the same switch:
//    two warps per row (rmsnorm_wide_kernel / rmsnorm_dx_wide_kernel), x (and dy) held as loaded; dweight as the
//    strided kernels'. SWIFT_RMSNORM_NARROW=0: a block per row (the vec kernels), for A/B.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>

#include "ops/cuda/func_attribute.cuh"
#include "ops/cuda/kernels_elementwise.cuh"

namespace swift::ops::cuda {

namespace {

constexpr int kBlock = 256;
constexpr int64_t kMinRowsPerChunk = 64;
constexpr int64_t kMaxChunks = 32768;  // grid.y (<= 65535)

// Rows per dweight chunk: a function of n only (never of the device), so the summation order is fixed.
__host__ __device__ int64_t rows_per_chunk(int64_t n) {
  const int64_t spread = (n + kMaxChunks - 1) / kMaxChunks;
  return spread > kMinRowsPerChunk ? spread : kMinRowsPerChunk;
}
constexpr int kColumnsPerBlock = 128;

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of v over the kRowThreads threads of a row; every thread of the row gets the same value.
template <int kRowThreads>
__device__ __forceinline__ double row_sum(double v) {
  v = warp_sum(v);
  if constexpr (kRowThreads > 32) {
    __shared__ double partial[kRowThreads / 32];
    const int warp = threadIdx.x / 32;
    if (threadIdx.x % 32 == 0) partial[warp] = v;
    __syncthreads();
    v = 0.0;
#pragma unroll
    for (int w = 0; w < kRowThreads / 32; ++w) v += partial[w];
  }
  return v;
}

template <typename T, typename W, int kRowThreads>
__global__ void rmsnorm_kernel(const T* x, const W* weight, T* y, float* rstd, int64_t n, int64_t c, float eps) {
  constexpr int kRowsPerBlock = kBlock / kRowThreads;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kRowThreads;
  const int lane = threadIdx.x % kRowThreads;
  if (kRowsPerBlock > 1 && row >= n) return;  // a whole warp: no block barrier in this variant
  const T* xr = x + row * c;
  double sum = 0.0;
  for (int64_t j = lane; j < c; j += kRowThreads) {
    const double v = load_f32(xr, j);
    sum += v * v;
  }
  sum = row_sum<kRowThreads>(sum);
  const float variance = c > 0 ? static_cast<float>(sum / static_cast<double>(c)) : 0.0f;
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(variance, eps)));
  T* yr = y + row * c;
  for (int64_t j = lane; j < c; j += kRowThreads) {
    store_f32(yr, j, __fmul_rn(load_f32(weight, j), __fmul_rn(load_f32(xr, j), inv)));
  }
  if (rstd != nullptr && lane == 0) rstd[row] = inv;
}

// Both loops batch kUnroll elements per lane: their loads are issued together before any math or store (dx may be dy
// or, with accumulate, is read and written: without the batching every element waited for the previous store, 0.46
// ms instead of 0.04 for 16,384 x 896 with accumulate). The additions keep their order: the same result.
template <typename T, typename W, int kRowThreads>
__global__ void rmsnorm_dx_kernel(const T* dy, const T* x, const W* weight, const float* rstd, T* dx, int64_t n,
                                  int64_t c, bool accumulate) {
  constexpr int kRowsPerBlock = kBlock / kRowThreads;
  constexpr int kUnroll = 4;
  const int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kRowThreads;
  const int lane = threadIdx.x % kRowThreads;
  if (kRowsPerBlock > 1 && row >= n) return;
  const T* xr = x + row * c;
  const T* gr = dy + row * c;
  double sum = 0.0;
  for (int64_t j0 = lane; j0 < c; j0 += int64_t{kUnroll} * kRowThreads) {
    float g[kUnroll], w[kUnroll], v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = j0 + int64_t{u} * kRowThreads;
      const bool in = j < c;
      g[u] = in ? load_f32(gr, j) : 0.0f;
      w[u] = in ? load_f32(weight, j) : 0.0f;
      v[u] = in ? load_f32(xr, j) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (j0 + int64_t{u} * kRowThreads < c) sum += static_cast<double>(__fmul_rn(g[u], w[u])) * v[u];
    }
  }
  sum = row_sum<kRowThreads>(sum);
  const float inv = rstd[row];
  const double inv_d = inv;
  const float coef = static_cast<float>(__dmul_rn(__dmul_rn(__dmul_rn(__dmul_rn(-inv_d, inv_d), inv_d), sum),
                                                  1.0 / static_cast<double>(c)));
  T* out = dx + row * c;
  for (int64_t j0 = lane; j0 < c; j0 += int64_t{kUnroll} * kRowThreads) {
    float g[kUnroll], w[kUnroll], v[kUnroll], o[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = j0 + int64_t{u} * kRowThreads;
      const bool in = j < c;
      g[u] = in ? load_f32(gr, j) : 0.0f;
      w[u] = in ? load_f32(weight, j) : 0.0f;
      v[u] = in ? load_f32(xr, j) : 0.0f;
      o[u] = in && accumulate ? load_f32(out, j) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t j = j0 + int64_t{u} * kRowThreads;
      if (j >= c) continue;
      float r = __fadd_rn(__fmul_rn(__fmul_rn(g[u], w[u]), inv), __fmul_rn(v[u], coef));
      if (accumulate) r = __fadd_rn(o[u], r);
      store_f32(out, j, r);
    }
  }
}

// Rows of C > 1024 with C % 8 == 0, 16-byte aligned activations and C <= 8 * kBlock * V: one block per row, each
// thread holding its (at most V) groups of 8 consecutive elements in registers, so x (and dy) are read once, in
// 16-byte accesses. Same formulas and rounding as the kernels above; the row sums add per thread, then in the fixed
// tree of row_sum (deterministic; the order differs from the strided kernels').
constexpr int kMaxVecs = 4;  // up to C = 8192

bool vec_row_ok(int64_t c, std::initializer_list<const void*> ptrs) {
  if (c <= 1024 || c % 8 != 0 || c > int64_t{8} * kBlock * kMaxVecs) return false;
  for (const void* p : ptrs) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}
int vecs_for(int64_t c) { return c <= int64_t{8} * kBlock ? 1 : c <= int64_t{16} * kBlock ? 2 : 4; }

template <typename T, typename W, int V>
__global__ void __launch_bounds__(kBlock) rmsnorm_vec_kernel(const T* x, const W* weight, T* y, float* rstd, int64_t c,
                                                            float eps) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * c;
  float v[V][8];
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int64_t j = (int64_t{i} * kBlock + threadIdx.x) * 8;
    if (j < c) {
      load8_f32(xr, j, v[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += static_cast<double>(v[i][e]) * v[i][e];
    }
  }
  sum = row_sum<kBlock>(sum);
  const float variance = static_cast<float>(sum / static_cast<double>(c));
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(variance, eps)));
  T* yr = y + row * c;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int64_t j = (int64_t{i} * kBlock + threadIdx.x) * 8;
    if (j < c) {
      float o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = __fmul_rn(load_f32(weight, j + e), __fmul_rn(v[i][e], inv));
      store8_f32(yr, j, o);
    }
  }
  if (rstd != nullptr && threadIdx.x == 0) rstd[row] = inv;
}

template <typename T, typename W, int V>
__global__ void __launch_bounds__(kBlock) rmsnorm_dx_vec_kernel(const T* dy, const T* x, const W* weight,
                                                               const float* rstd, T* dx, int64_t c, bool accumulate) {
  const int64_t row = blockIdx.x;
  const T* xr = x + row * c;
  const T* gr = dy + row * c;
  float g[V][8], v[V][8];
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int64_t j = (int64_t{i} * kBlock + threadIdx.x) * 8;
    if (j < c) {
      load8_f32(gr, j, g[i]);
      load8_f32(xr, j, v[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += static_cast<double>(__fmul_rn(g[i][e], load_f32(weight, j + e))) * v[i][e];
    }
  }
  sum = row_sum<kBlock>(sum);
  const float inv = rstd[row];
  const double inv_d = inv;
  const float coef = static_cast<float>(__dmul_rn(__dmul_rn(__dmul_rn(__dmul_rn(-inv_d, inv_d), inv_d), sum),
                                                  1.0 / static_cast<double>(c)));
  T* out = dx + row * c;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    const int64_t j = (int64_t{i} * kBlock + threadIdx.x) * 8;
    if (j < c) {
      float o[8], old[8];
      if (accumulate) load8_f32(out, j, old);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        float r = __fadd_rn(__fmul_rn(__fmul_rn(g[i][e], load_f32(weight, j + e)), inv), __fmul_rn(v[i][e], coef));
        o[e] = accumulate ? __fadd_rn(old[e], r) : r;
      }
      store8_f32(out, j, o);
    }
  }
}

// The backward of narrow rows (256 <= C <= 1024, C % 8 == 0, 16-byte aligned activations; Qwen2.5-0.5B's C = 896):
// a warp per row, each lane holding its (at most kNarrowVecs) groups of 8 consecutive elements in registers, 16-byte
// accesses. Same formulas and rounding as the kernels above (the row sums add per lane, then warp_sum's fixed tree).
// Its dweight chunks are narrow_rows_per_chunk(n) rows (smaller than the strided kernels': more blocks in flight).
constexpr int kNarrowVecs = 4;  // 4 x 32 lanes x 8 = C up to 1024
constexpr int kNarrowWarps = 4;
constexpr int kNarrowThreads = kNarrowWarps * 32;
constexpr int64_t kNarrowMinRowsPerChunk = 32;

__host__ __device__ int64_t narrow_rows_per_chunk(int64_t n) {
  const int64_t spread = (n + kMaxChunks - 1) / kMaxChunks;
  return spread > kNarrowMinRowsPerChunk ? spread : kNarrowMinRowsPerChunk;
}

bool narrow_row_ok(int64_t c, std::initializer_list<const void*> ptrs) {
  if (c < 256 || c > 1024 || c % 8 != 0) return false;  // below 256 a row would leave lanes idle: the strided kernels
  for (const void* p : ptrs) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// The forward of narrow rows (narrow_row_ok; Qwen2.5-0.5B's hidden C = 896): a warp per row, each lane holding its (at
// most kNarrowVecs) groups of 8 consecutive elements in registers between the sum and the output: x read once, 16-byte
// loads and stores (the strided kernel's 2-byte accesses ran the 16,384 x 896 BF16 call at ~1.9 TB/s). Same formulas
// and rounding; the row sum adds per lane (groups in order), then warp_sum's fixed tree. The weight is staged once per
// block in shared memory. y may be x: every lane reads its elements before it writes them, and no lane writes another's.
template <typename T, typename W>
__global__ void __launch_bounds__(kBlock) rmsnorm_narrow_kernel(const T* x, const W* weight, T* y, float* rstd,
                                                               int64_t n, int64_t c, float eps) {
  __shared__ float w_s[1024];
  for (int64_t j = threadIdx.x; j < c; j += kBlock) w_s[j] = load_f32(weight, j);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * int64_t{kBlock / 32} + warp;
  if (row >= n) return;  // after the block's only barrier
  const T* xr = x + row * c;
  float v[kNarrowVecs][8];
#pragma unroll
  for (int i = 0; i < kNarrowVecs; ++i) {
    const int64_t j = (int64_t{i} * 32 + lane) * 8;
    if (j < c) load8_f32(xr, j, v[i]);
  }
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kNarrowVecs; ++i) {
    const int64_t j = (int64_t{i} * 32 + lane) * 8;
    if (j < c) {
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += static_cast<double>(v[i][e]) * v[i][e];
    }
  }
  sum = warp_sum(sum);
  const float variance = static_cast<float>(sum / static_cast<double>(c));
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(variance, eps)));
  T* yr = y + row * c;
#pragma unroll
  for (int i = 0; i < kNarrowVecs; ++i) {
    const int64_t j = (int64_t{i} * 32 + lane) * 8;
    if (j < c) {
      float o[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = __fmul_rn(w_s[j + e], __fmul_rn(v[i][e], inv));
      store8_f32(yr, j, o);
    }
  }
  if (rstd != nullptr && lane == 0) rstd[row] = inv;
}

// 8 consecutive elements of T as loaded (16 bytes of a 16-bit type, 32 of F32), widened to fp32 on use.
template <typename T>
struct Raw8 {
  uint4 a;
};
template <>
struct Raw8<float> {
  float4 a, b;
};
template <typename T>
__device__ __forceinline__ Raw8<T> load_raw8(const T* p, int64_t i) {
  if constexpr (sizeof(T) == 4) {
    return Raw8<T>{*reinterpret_cast<const float4*>(p + i), *reinterpret_cast<const float4*>(p + i + 4)};
  } else {
    return Raw8<T>{*reinterpret_cast<const uint4*>(p + i)};
  }
}
template <typename T>
__device__ __forceinline__ void unpack8(const Raw8<T>& r, float (&v)[8]) {
  if constexpr (sizeof(T) == 4) {
    v[0] = r.a.x; v[1] = r.a.y; v[2] = r.a.z; v[3] = r.a.w; v[4] = r.b.x; v[5] = r.b.y; v[6] = r.b.z; v[7] = r.b.w;
  } else {
    load8_f32(reinterpret_cast<const T*>(&r.a), 0, v);  // the same widening as a load from memory
  }
}

// The backward of narrow rows in one pass over dy and x: a block of kNarrowWarps warps takes one dweight chunk of
// `rows` rows (narrow_rows_per_chunk(n)), warp w its rows w, w + kNarrowWarps, ... in order. Per row as rmsnorm_dx_*; with
// partials, each warp also adds dy * (x * rstd) of its rows into fp64 column sums in shared memory (laid out
// [warp][group][element][lane]: consecutive lanes, consecutive doubles), and the block then writes the chunk's
// partial column sums (warps added in order: fixed, deterministic). dx may be null (dweight only), partials null
// (dx only). Every element is read before the same thread writes it: dx may be dy without accumulate.
// Software-pipelined: while a warp works on a row it already has the next row's dy, x and rstd in flight, and it
// loads the row's old dx (accumulate) before its sums; the values are kept as loaded (16 bytes per group of 8) and
// widened on each use. (Each warp walks its rows one after the other, and with 32-row chunks every warp of the grid is
// resident at once: without the prefetch each row waited for its loads twice; 0.056 -> 0.051 ms for 16,384 x 896 BF16
// with dx accumulated, the same bits.)
template <typename T, typename W, bool kPartials>
__global__ void __launch_bounds__(kNarrowThreads) rmsnorm_backward_narrow_kernel(
    const T* dy, const T* x, const W* weight, const float* rstd, T* dx, double* partials, int64_t n, int64_t c,
    int64_t rows, bool accumulate) {
  __shared__ double column_sums[kPartials ? kNarrowWarps * kNarrowVecs * 8 * 32 : 1];  // 32 KiB with partials
  __shared__ float w_s[1024];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t j = threadIdx.x; j < c; j += kNarrowThreads) w_s[j] = load_f32(weight, j);
  double* sums = column_sums + warp * (kNarrowVecs * 8 * 32);
  if constexpr (kPartials) {
    for (int k = lane; k < kNarrowVecs * 8 * 32; k += 32) sums[k] = 0.0;
  }
  __syncthreads();
  const int64_t r0 = blockIdx.x * rows;
  const int64_t r1 = r0 + rows < n ? r0 + rows : n;
  Raw8<T> g_next[kNarrowVecs], v_next[kNarrowVecs];
  float inv_next = 0.0f;
  auto fetch = [&](int64_t row) {
#pragma unroll
    for (int i = 0; i < kNarrowVecs; ++i) {
      const int64_t j = (int64_t{i} * 32 + lane) * 8;
      if (j < c) {
        g_next[i] = load_raw8(dy + row * c, j);
        v_next[i] = load_raw8(x + row * c, j);
      }
    }
    inv_next = rstd[row];
  };
  if (r0 + warp < r1) fetch(r0 + warp);
  for (int64_t row = r0 + warp; row < r1; row += kNarrowWarps) {
    Raw8<T> g_raw[kNarrowVecs], v_raw[kNarrowVecs], old_raw[kNarrowVecs];
#pragma unroll
    for (int i = 0; i < kNarrowVecs; ++i) {
      g_raw[i] = g_next[i];
      v_raw[i] = v_next[i];
    }
    const float inv = inv_next;
    T* out = dx != nullptr ? dx + row * c : nullptr;
    if (dx != nullptr && accumulate) {
#pragma unroll
      for (int i = 0; i < kNarrowVecs; ++i) {
        const int64_t j = (int64_t{i} * 32 + lane) * 8;
        if (j < c) old_raw[i] = load_raw8(out, j);
      }
    }
    if (row + kNarrowWarps < r1) fetch(row + kNarrowWarps);
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < kNarrowVecs; ++i) {
      const int64_t j = (int64_t{i} * 32 + lane) * 8;
      if (j < c) {
        float g[8], v[8];
        unpack8(g_raw[i], g);
        unpack8(v_raw[i], v);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum += static_cast<double>(__fmul_rn(g[e], w_s[j + e])) * v[e];
      }
    }
    sum = warp_sum(sum);
    if constexpr (kPartials) {
#pragma unroll
      for (int i = 0; i < kNarrowVecs; ++i) {
        if ((int64_t{i} * 32 + lane) * 8 < c) {
          float g[8], v[8];
          unpack8(g_raw[i], g);
          unpack8(v_raw[i], v);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            sums[(i * 8 + e) * 32 + lane] += static_cast<double>(__fmul_rn(g[e], __fmul_rn(v[e], inv)));
          }
        }
      }
    }
    if (dx == nullptr) continue;
    const double inv_d = inv;
    const float coef = static_cast<float>(__dmul_rn(__dmul_rn(__dmul_rn(__dmul_rn(-inv_d, inv_d), inv_d), sum),
                                                    1.0 / static_cast<double>(c)));
#pragma unroll
    for (int i = 0; i < kNarrowVecs; ++i) {
      const int64_t j = (int64_t{i} * 32 + lane) * 8;
      if (j < c) {
        float g[8], v[8], o[8], old[8];
        unpack8(g_raw[i], g);
        unpack8(v_raw[i], v);
        if (accumulate) unpack8(old_raw[i], old);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const float r = __fadd_rn(__fmul_rn(__fmul_rn(g[e], w_s[j + e]), inv), __fmul_rn(v[e], coef));
          o[e] = accumulate ? __fadd_rn(old[e], r) : r;
        }
        store8_f32(out, j, o);
      }
    }
  }
  if constexpr (kPartials) {
    __syncthreads();
    for (int64_t j = threadIdx.x; j < c; j += kNarrowThreads) {
      const int64_t group = j / 8;
      const int k = static_cast<int>(((group / 32) * 8 + j % 8) * 32 + group % 32);
      double total = 0.0;
#pragma unroll
      for (int w = 0; w < kNarrowWarps; ++w) total += column_sums[w * (kNarrowVecs * 8 * 32) + k];
      partials[blockIdx.x * c + j] = total;
    }
  }
}

// partials[chunk * c + j] = sum over the chunk's rows (in order) of dy[r, j] * (x[r, j] * rstd[r]), fp64.
template <typename T>
__global__ void rmsnorm_dweight_partial_kernel(const T* dy, const T* x, const float* rstd, double* partials, int64_t n,
                                               int64_t c, int64_t rows) {
  const int64_t j = blockIdx.x * int64_t{kColumnsPerBlock} + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  if (j >= c) return;
  const int64_t r0 = chunk * rows;
  const int64_t r1 = r0 + rows < n ? r0 + rows : n;
  // kUnroll rows' loads are issued before their products are added (in row order): the loop is latency-bound
  // otherwise (one dependent load chain per thread).
  constexpr int kUnroll = 8;
  double acc = 0.0;
  int64_t r = r0;
  for (; r + kUnroll <= r1; r += kUnroll) {
    float d[kUnroll], v[kUnroll], s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      d[u] = load_f32(dy, (r + u) * c + j);
      v[u] = load_f32(x, (r + u) * c + j);
      s[u] = rstd[r + u];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc += static_cast<double>(__fmul_rn(d[u], __fmul_rn(v[u], s[u])));
  }
  for (; r < r1; ++r) {
    acc += static_cast<double>(__fmul_rn(load_f32(dy, r * c + j), __fmul_rn(load_f32(x, r * c + j), rstd[r])));
  }
  partials[chunk * c + j] = acc;
}

// dweight[j] += the sum of the chunks' partials of column j: a block of 32 columns x kReduceWarps warps, warp w adding
// chunks w, w + kReduceWarps, ... in order (kUnroll loads in flight), then the warps' sums added in order (a fixed
// tree: deterministic). Enough loads in flight for the hundreds of chunks of a model-sized call.
constexpr int kReduceWarps = kBlock / 32;
__global__ void __launch_bounds__(kBlock) rmsnorm_dweight_reduce_kernel(const double* partials, float* dweight,
                                                                        int64_t chunks, int64_t c) {
  constexpr int kUnroll = 8;
  __shared__ double warp_totals[kReduceWarps][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t j = blockIdx.x * int64_t{32} + lane;
  double total = 0.0;
  if (j < c) {
    int64_t k = warp;
    for (; k + int64_t{kUnroll - 1} * kReduceWarps < chunks; k += int64_t{kUnroll} * kReduceWarps) {
      double p[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) p[u] = partials[(k + int64_t{u} * kReduceWarps) * c + j];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) total += p[u];
    }
    for (; k < chunks; k += kReduceWarps) total += partials[k * c + j];
  }
  warp_totals[warp][lane] = total;
  __syncthreads();
  if (warp == 0 && j < c) {
    double sum = 0.0;
#pragma unroll
    for (int w = 0; w < kReduceWarps; ++w) sum += warp_totals[w][lane];
    dweight[j] = static_cast<float>(static_cast<double>(dweight[j]) + sum);
  }
}

bool grid_ok(int64_t blocks) { return blocks <= 0x7fffffff; }

// Hidden-state rows (1024 < C <= 4096, C % 8 == 0, activations and weight 16-byte aligned; the 7B's C = 3584) under the
// narrow switch: two warps per row, four rows per 256-thread block, each lane holding its (at most kWideVecs) groups
// of 8 consecutive elements as loaded (16-byte accesses, the weight's too) between the sum and the output. The block-
// per-row vec kernels ran the 7B's 8,192 x 3,584 rows at ~2 TB/s (docs/PERFORMANCE.md run 21). Same formulas and
// rounding; the row sum adds per lane (groups in order), then warp_sum's tree, then warp 0's sum + warp 1's.
constexpr int kWideLanes = 64;                  // threads per row
constexpr int kWideRows = kBlock / kWideLanes;  // rows per block
constexpr int kWideVecs = 8;                    // 8 x 64 lanes x 8 = C up to 4096

bool wide_row_ok(int64_t c, std::initializer_list<const void*> ptrs) {
  if (c <= 1024 || c > int64_t{8} * kWideLanes * kWideVecs || c % 8 != 0) return false;
  for (const void* p : ptrs) {
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

// The row's total of the two warps' sums (every thread of the block reaches the barrier).
__device__ __forceinline__ double wide_row_sum(double v, double (&partial)[kWideRows][2]) {
  v = warp_sum(v);
  const int sub = threadIdx.x / kWideLanes, warp = (threadIdx.x % kWideLanes) / 32;
  if (threadIdx.x % 32 == 0) partial[sub][warp] = v;
  __syncthreads();
  return partial[sub][0] + partial[sub][1];
}

template <typename T, typename W>
__global__ void __launch_bounds__(kBlock) rmsnorm_wide_kernel(const T* x, const W* weight, T* y, float* rstd,
                                                             int64_t n, int64_t c, float eps) {
  __shared__ double partial[kWideRows][2];
  const int t = threadIdx.x % kWideLanes;
  const int64_t row = blockIdx.x * int64_t{kWideRows} + threadIdx.x / kWideLanes;
  const bool live = row < n;
  const T* xr = x + (live ? row : 0) * c;
  Raw8<T> raw[kWideVecs];
#pragma unroll
  for (int i = 0; i < kWideVecs; ++i) {
    const int64_t j = (int64_t{i} * kWideLanes + t) * 8;
    if (live && j < c) raw[i] = load_raw8(xr, j);
  }
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kWideVecs; ++i) {
    const int64_t j = (int64_t{i} * kWideLanes + t) * 8;
    if (live && j < c) {
      float v[8];
      unpack8(raw[i], v);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += static_cast<double>(v[e]) * v[e];
    }
  }
  sum = wide_row_sum(sum, partial);
  if (!live) return;  // after the block's only barrier
  const float variance = static_cast<float>(sum / static_cast<double>(c));
  const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(variance, eps)));
  T* yr = y + row * c;
#pragma unroll
  for (int i = 0; i < kWideVecs; ++i) {
    const int64_t j = (int64_t{i} * kWideLanes + t) * 8;
    if (j < c) {
      float v[8], w[8], o[8];
      unpack8(raw[i], v);
      load8_f32(weight, j, w);
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = __fmul_rn(w[e], __fmul_rn(v[e], inv));
      store8_f32(yr, j, o);
    }
  }
  if (rstd != nullptr && t == 0) rstd[row] = inv;
}

template <typename T, typename W>
__global__ void __launch_bounds__(kBlock) rmsnorm_dx_wide_kernel(const T* dy, const T* x, const W* weight,
                                                                const float* rstd, T* dx, int64_t n, int64_t c,
                                                                bool accumulate) {
  __shared__ double partial[kWideRows][2];
  const int t = threadIdx.x % kWideLanes;
  const int64_t row = blockIdx.x * int64_t{kWideRows} + threadIdx.x / kWideLanes;
  const bool live = row < n;
  const int64_t base = (live ? row : 0) * c;
  Raw8<T> g_raw[kWideVecs], v_raw[kWideVecs];
#pragma unroll
  for (int i = 0; i < kWideVecs; ++i) {
    const int64_t j = (int64_t{i} * kWideLanes + t) * 8;
    if (live && j < c) {
      g_raw[i] = load_raw8(dy + base, j);
      v_raw[i] = load_raw8(x + base, j);
    }
  }
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kWideVecs; ++i) {
    const int64_t j = (int64_t{i} * kWideLanes + t) * 8;
    if (live && j < c) {
      float g[8], v[8], w[8];
      unpack8(g_raw[i], g);
      unpack8(v_raw[i], v);
      load8_f32(weight, j, w);
#pragma unroll
      for (int e = 0; e < 8; ++e) sum += static_cast<double>(__fmul_rn(g[e], w[e])) * v[e];
    }
  }
  sum = wide_row_sum(sum, partial);
  if (!live) return;
  const float inv = rstd[row];
  const double inv_d = inv;
  const float coef = static_cast<float>(__dmul_rn(__dmul_rn(__dmul_rn(__dmul_rn(-inv_d, inv_d), inv_d), sum),
                                                  1.0 / static_cast<double>(c)));
  T* out = dx + base;
#pragma unroll
  for (int i = 0; i < kWideVecs; ++i) {
    const int64_t j = (int64_t{i} * kWideLanes + t) * 8;
    if (j < c) {
      float g[8], v[8], w[8], o[8], old[8];
      unpack8(g_raw[i], g);
      unpack8(v_raw[i], v);
      load8_f32(weight, j, w);
      if (accumulate) load8_f32(out, j, old);
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float r = __fadd_rn(__fmul_rn(__fmul_rn(g[e], w[e]), inv), __fmul_rn(v[e], coef));
        o[e] = accumulate ? __fadd_rn(old[e], r) : r;
      }
      store8_f32(out, j, o);
    }
  }
}


template <typename T, typename W>
cudaError_t rmsnorm_typed(const void* x, const void* weight, void* y, float* rstd, int64_t n, int64_t c, float eps,
                          bool narrow_kernels, cudaStream_t stream) {
  const T* px = static_cast<const T*>(x);
  const W* pw = static_cast<const W*>(weight);
  T* py = static_cast<T*>(y);
  if (narrow_kernels && narrow_row_ok(c, {x, y})) {
    const int64_t blocks = (n + kBlock / 32 - 1) / (kBlock / 32);
    if (!grid_ok(blocks)) return cudaErrorInvalidValue;
    rmsnorm_narrow_kernel<T, W><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(px, pw, py, rstd, n, c, eps);
    return cudaGetLastError();
  }
  if (narrow_kernels && wide_row_ok(c, {x, y, weight})) {
    const int64_t blocks = (n + kWideRows - 1) / kWideRows;
    if (!grid_ok(blocks)) return cudaErrorInvalidValue;
    rmsnorm_wide_kernel<T, W><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(px, pw, py, rstd, n, c, eps);
    return cudaGetLastError();
  }
  if (vec_row_ok(c, {x, y}) && grid_ok(n)) {
    const auto blocks = static_cast<unsigned>(n);
    switch (vecs_for(c)) {
      case 1: rmsnorm_vec_kernel<T, W, 1><<<blocks, kBlock, 0, stream>>>(px, pw, py, rstd, c, eps); break;
      case 2: rmsnorm_vec_kernel<T, W, 2><<<blocks, kBlock, 0, stream>>>(px, pw, py, rstd, c, eps); break;
      default: rmsnorm_vec_kernel<T, W, kMaxVecs><<<blocks, kBlock, 0, stream>>>(px, pw, py, rstd, c, eps); break;
    }
    return cudaGetLastError();
  }
  if (c <= 1024) {
    const int64_t blocks = (n + kBlock / 32 - 1) / (kBlock / 32);
    if (!grid_ok(blocks)) return cudaErrorInvalidValue;
    rmsnorm_kernel<T, W, 32><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(px, pw, py, rstd, n, c, eps);
  } else {
    if (!grid_ok(n)) return cudaErrorInvalidValue;
    rmsnorm_kernel<T, W, kBlock><<<static_cast<unsigned>(n), kBlock, 0, stream>>>(px, pw, py, rstd, n, c, eps);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t rmsnorm_act(int weight_dtype, const void* x, const void* weight, void* y, float* rstd, int64_t n,
                        int64_t c, float eps, bool narrow_kernels, cudaStream_t stream) {
  switch (weight_dtype) {
    case 0: return rmsnorm_typed<T, float>(x, weight, y, rstd, n, c, eps, narrow_kernels, stream);
    case 1: return rmsnorm_typed<T, __nv_bfloat16>(x, weight, y, rstd, n, c, eps, narrow_kernels, stream);
    case 2: return rmsnorm_typed<T, __half>(x, weight, y, rstd, n, c, eps, narrow_kernels, stream);
    default: return cudaErrorInvalidValue;
  }
}

template <typename T, typename W>
cudaError_t rmsnorm_dx_typed(const void* dy, const void* x, const void* weight, const float* rstd, void* dx, int64_t n,
                             int64_t c, bool accumulate, bool narrow_kernels, cudaStream_t stream) {
  const T* pdy = static_cast<const T*>(dy);
  const T* px = static_cast<const T*>(x);
  const W* pw = static_cast<const W*>(weight);
  T* pdx = static_cast<T*>(dx);
  if (narrow_kernels && wide_row_ok(c, {dy, x, dx, weight})) {
    const int64_t blocks = (n + kWideRows - 1) / kWideRows;
    if (!grid_ok(blocks)) return cudaErrorInvalidValue;
    rmsnorm_dx_wide_kernel<T, W><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(pdy, px, pw, rstd, pdx, n, c,
                                                                                      accumulate);
    return cudaGetLastError();
  }
  if (vec_row_ok(c, {dy, x, dx}) && grid_ok(n)) {
    const auto blocks = static_cast<unsigned>(n);
    switch (vecs_for(c)) {
      case 1:
        rmsnorm_dx_vec_kernel<T, W, 1><<<blocks, kBlock, 0, stream>>>(pdy, px, pw, rstd, pdx, c, accumulate);
        break;
      case 2:
        rmsnorm_dx_vec_kernel<T, W, 2><<<blocks, kBlock, 0, stream>>>(pdy, px, pw, rstd, pdx, c, accumulate);
        break;
      default:
        rmsnorm_dx_vec_kernel<T, W, kMaxVecs><<<blocks, kBlock, 0, stream>>>(pdy, px, pw, rstd, pdx, c, accumulate);
        break;
    }
    return cudaGetLastError();
  }
  if (c <= 1024) {
    const int64_t blocks = (n + kBlock / 32 - 1) / (kBlock / 32);
    if (!grid_ok(blocks)) return cudaErrorInvalidValue;
    rmsnorm_dx_kernel<T, W, 32><<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(pdy, px, pw, rstd, pdx, n, c,
                                                                                      accumulate);
  } else {
    if (!grid_ok(n)) return cudaErrorInvalidValue;
    rmsnorm_dx_kernel<T, W, kBlock><<<static_cast<unsigned>(n), kBlock, 0, stream>>>(pdy, px, pw, rstd, pdx, n, c,
                                                                                     accumulate);
  }
  return cudaGetLastError();
}

template <typename T, typename W>
cudaError_t rmsnorm_backward_narrow(const void* dy, const void* x, const void* weight, const float* rstd, void* dx,
                                    double* partials, int64_t n, int64_t c, bool accumulate, cudaStream_t stream) {
  const int64_t rows = narrow_rows_per_chunk(n);
  const auto blocks = static_cast<unsigned>((n + rows - 1) / rows);  // <= kMaxChunks
  const T* pdy = static_cast<const T*>(dy);
  const T* px = static_cast<const T*>(x);
  const W* pw = static_cast<const W*>(weight);
  T* pdx = static_cast<T*>(dx);
  if (partials == nullptr) {
    rmsnorm_backward_narrow_kernel<T, W, false><<<blocks, kNarrowThreads, 0, stream>>>(pdy, px, pw, rstd, pdx, nullptr,
                                                                                       n, c, rows, accumulate);
    return cudaGetLastError();
  }
  // 36 KiB of shared memory per block: ask for the largest shared-memory carveout so that blocks, not the L1 split,
  // bound the SM's occupancy.
  const cudaError_t status = set_func_attribute_once<rmsnorm_backward_narrow_kernel<T, W, true>>(
      cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (status != cudaSuccess) return status;
  rmsnorm_backward_narrow_kernel<T, W, true><<<blocks, kNarrowThreads, 0, stream>>>(pdy, px, pw, rstd, pdx, partials,
                                                                                    n, c, rows, accumulate);
  return cudaGetLastError();
}

template <typename T>
cudaError_t rmsnorm_backward_act(const void* dy, const void* x, const void* weight, int weight_dtype,
                                 const float* rstd, void* dx, float* dweight, int64_t n, int64_t c, bool accumulate,
                                 bool narrow_kernels, void* scratch, size_t scratch_bytes, cudaStream_t stream) {
  const bool narrow = narrow_kernels && narrow_row_ok(c, {dy, x, dx});
  const int64_t rows = narrow ? narrow_rows_per_chunk(n) : rows_per_chunk(n);
  const int64_t chunks = (n + rows - 1) / rows;
  double* partials = nullptr;
  if (dweight != nullptr) {
    if (scratch == nullptr || scratch_bytes < static_cast<size_t>(chunks * c) * sizeof(double)) {
      return cudaErrorInvalidValue;
    }
    partials = static_cast<double*>(scratch);
  }
  cudaError_t status = cudaSuccess;
  if (narrow) {  // dx and the partials in one pass
    switch (weight_dtype) {
      case 0: status = rmsnorm_backward_narrow<T, float>(dy, x, weight, rstd, dx, partials, n, c, accumulate, stream);
        break;
      case 1:
        status = rmsnorm_backward_narrow<T, __nv_bfloat16>(dy, x, weight, rstd, dx, partials, n, c, accumulate, stream);
        break;
      case 2: status = rmsnorm_backward_narrow<T, __half>(dy, x, weight, rstd, dx, partials, n, c, accumulate, stream);
        break;
      default: return cudaErrorInvalidValue;
    }
    if (status != cudaSuccess || dweight == nullptr) return status;
  } else {
    if (dweight != nullptr) {
      const dim3 grid(static_cast<unsigned>((c + kColumnsPerBlock - 1) / kColumnsPerBlock),
                      static_cast<unsigned>(chunks));
      rmsnorm_dweight_partial_kernel<<<grid, kColumnsPerBlock, 0, stream>>>(
          static_cast<const T*>(dy), static_cast<const T*>(x), rstd, partials, n, c, rows);
      status = cudaGetLastError();
      if (status != cudaSuccess) return status;
    }
    if (dx != nullptr) {  // after the partials: dx may be dy
      switch (weight_dtype) {
        case 0:
          status = rmsnorm_dx_typed<T, float>(dy, x, weight, rstd, dx, n, c, accumulate, narrow_kernels, stream);
          break;
        case 1:
          status =
              rmsnorm_dx_typed<T, __nv_bfloat16>(dy, x, weight, rstd, dx, n, c, accumulate, narrow_kernels, stream);
          break;
        case 2:
          status = rmsnorm_dx_typed<T, __half>(dy, x, weight, rstd, dx, n, c, accumulate, narrow_kernels, stream);
          break;
        default: return cudaErrorInvalidValue;
      }
      if (status != cudaSuccess) return status;
    }
    if (dweight == nullptr) return cudaSuccess;
  }
  const int64_t blocks = (c + 31) / 32;
  if (!grid_ok(blocks)) return cudaErrorInvalidValue;
  rmsnorm_dweight_reduce_kernel<<<static_cast<unsigned>(blocks), kBlock, 0, stream>>>(partials, dweight, chunks, c);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_rmsnorm(const void* x, const void* weight, int weight_dtype, void* y, float* rstd, int dtype,
                           int64_t n, int64_t c, float eps, bool narrow_kernels, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  switch (dtype) {
    case 0: return rmsnorm_act<float>(weight_dtype, x, weight, y, rstd, n, c, eps, narrow_kernels, stream);
    case 1: return rmsnorm_act<__nv_bfloat16>(weight_dtype, x, weight, y, rstd, n, c, eps, narrow_kernels, stream);
    case 2: return rmsnorm_act<__half>(weight_dtype, x, weight, y, rstd, n, c, eps, narrow_kernels, stream);
    default: return cudaErrorInvalidValue;
  }
}

size_t rmsnorm_backward_scratch_bytes(int64_t n, int64_t c) {
  const int64_t rows = narrow_rows_per_chunk(n);  // <= rows_per_chunk(n): enough for either kernel set's chunks
  const int64_t chunks = (n + rows - 1) / rows;
  return static_cast<size_t>(chunks * c) * sizeof(double);
}

cudaError_t launch_rmsnorm_backward(const void* dy, const void* x, const void* weight, int weight_dtype,
                                    const float* rstd, void* dx, float* dweight, int dtype, int64_t n, int64_t c,
                                    bool accumulate_dx, bool narrow_kernels, void* scratch, size_t scratch_bytes,
                                    cudaStream_t stream) {
  if (n == 0 || c == 0) return cudaSuccess;
  switch (dtype) {
    case 0:
      return rmsnorm_backward_act<float>(dy, x, weight, weight_dtype, rstd, dx, dweight, n, c, accumulate_dx,
                                         narrow_kernels, scratch, scratch_bytes, stream);
    case 1:
      return rmsnorm_backward_act<__nv_bfloat16>(dy, x, weight, weight_dtype, rstd, dx, dweight, n, c, accumulate_dx,
                                                 narrow_kernels, scratch, scratch_bytes, stream);
    case 2:
      return rmsnorm_backward_act<__half>(dy, x, weight, weight_dtype, rstd, dx, dweight, n, c, accumulate_dx,
                                          narrow_kernels, scratch, scratch_bytes, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace swift::ops::cuda
