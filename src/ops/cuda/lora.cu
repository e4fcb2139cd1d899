// ops/cuda/lora.cu — the rank-r side of a LoRA linear, memory-bound passes that read or write each activation once:
//   xa = dropout(x) a^T            (forward: one read of x)
//   y += scale * mult * (g F)      (forward's B product with F = b^T, no dropout; backward's dx term with F = a)
//   da += scale * g^T dropout(x)   (backward: one read of x)
//
// Invariants:
//  - Fast-path conditions (the caller checks them, else uses the GEMM path): r in {8, 16}, k % 8 == 0, x / y
//    16-byte aligned, F32, BF16 or F16 activations (dtype codes 0 / 1 / 2; the kernels are templates on the element
//    type). A lane handles 8 consecutive columns (one 16-byte BF16 / F16 load, two F32 loads), i.e. exactly two
//    philox blocks: the dropout multiplier of element (row, col) is philox_word(seed, g) >= threshold ? keep_scale : 0
//    with g = dropout_index(map, row, col, k) (ops/philox.h; identity map: g = row * k + col), the same masks as the
//    CPU. When g is a multiple of 4 (always with the identity map, since k % 8 == 0) the 8 words are two whole
//    blocks; a mapped block starting elsewhere in the stream draws its words one by one (PhiloxCursor).
//  - Math in fp32 with fp32 factors (PEFT runs the adapter in fp32); 16-bit outputs are rounded once.
//  - Deterministic: every output has one writer and a summation order fixed by (n, k, r) alone (never by the GPU
//    model or timing): xa sums its column splits in order, da its row slices in order.
//  - Shapes of the work: blocks of 8 warps over 512 columns and a range of rows (a multiple of 32, sized for about
//    kTargetBlocks blocks) for xa and y, with the factor's columns staged once per block in shared memory and reused
//    by 4 (r = 8) or 2 (r = 16) rows at a time, each group's loads issued before its math; da is column-stationary
//    (each lane accumulates its columns over a slice of rows).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "ops/cuda/kernels_lora.cuh"
#include "ops/philox.h"

namespace swift::ops::cuda {

namespace {

constexpr int kWarps = 8, kThreads = 256;
constexpr int kVec = 8;                  // columns per lane
constexpr int kWarpCols = 32 * kVec;     // 256
constexpr int kSteps = 2;                // warp-column steps per block tile
constexpr int kTileCols = kWarpCols * kSteps;  // 512
constexpr int kTileRows = 32;            // row granularity of a block: 8 warps x 4 rows
constexpr int kTargetBlocks = 4 * 132;   // da: aim for ~4 blocks per SM of an H100/H200 (a constant: see invariants)

template <int R>
constexpr int kRowsAtOnce = R == 8 ? 4 : 2;

// Element types T of the kernels: float (dtype code 0), __nv_bfloat16 (1), __half (2). 16-bit types move as pairs
// packed in 32-bit words, widened exactly and rounded to nearest even on store.
template <typename T>
constexpr bool kHalfWidth = sizeof(T) == 2;

template <typename T>
__device__ __forceinline__ void pair_to_float2(uint32_t w, float& lo, float& hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&w);
    lo = __low2float(h);
    hi = __high2float(h);
  } else {
    static_assert(std::is_same_v<T, __half>);
    const __half2 h = *reinterpret_cast<const __half2*>(&w);
    lo = __low2float(h);
    hi = __high2float(h);
  }
}

template <typename T>
__device__ __forceinline__ uint32_t float2_to_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    static_assert(std::is_same_v<T, __half>);
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// 8 elements as raw 16-byte words (16-bit types: one, F32: two), so a warp can issue all its loads before using any.
template <typename T>
constexpr int kRawWords = kHalfWidth<T> ? 1 : 2;

template <typename T>
__device__ __forceinline__ void load8_raw(const void* p, int64_t e, uint4 (&w)[kRawWords<T>]) {
  w[0] = *reinterpret_cast<const uint4*>(static_cast<const T*>(p) + e);
  if constexpr (!kHalfWidth<T>) w[1] = *reinterpret_cast<const uint4*>(static_cast<const T*>(p) + e + 4);
}

template <typename T>
__device__ __forceinline__ void raw_to_float8(const uint4 (&w)[kRawWords<T>], float v[8]) {
  if constexpr (kHalfWidth<T>) {
    const uint32_t u[4] = {w[0].x, w[0].y, w[0].z, w[0].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) pair_to_float2<T>(u[i], v[2 * i], v[2 * i + 1]);
  } else {
    v[0] = __uint_as_float(w[0].x); v[1] = __uint_as_float(w[0].y);
    v[2] = __uint_as_float(w[0].z); v[3] = __uint_as_float(w[0].w);
    v[4] = __uint_as_float(w[1].x); v[5] = __uint_as_float(w[1].y);
    v[6] = __uint_as_float(w[1].z); v[7] = __uint_as_float(w[1].w);
  }
}

template <typename T>
__device__ __forceinline__ void load8(const void* p, int64_t e, float v[8]) {
  if constexpr (kHalfWidth<T>) {
    uint4 w[1];
    load8_raw<T>(p, e, w);
    raw_to_float8<T>(w, v);
  } else {
    const float4 lo = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + e);
    const float4 hi = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + e + 4);
    v[0] = lo.x; v[1] = lo.y; v[2] = lo.z; v[3] = lo.w; v[4] = hi.x; v[5] = hi.y; v[6] = hi.z; v[7] = hi.w;
  }
}

template <typename T>
__device__ __forceinline__ void store8(void* p, int64_t e, const float v[8]) {
  if constexpr (kHalfWidth<T>) {
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = float2_to_pair<T>(v[2 * i], v[2 * i + 1]);
    *reinterpret_cast<uint4*>(static_cast<T*>(p) + e) = make_uint4(w[0], w[1], w[2], w[3]);
  } else {
    *reinterpret_cast<float4*>(static_cast<float*>(p) + e) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(static_cast<float*>(p) + e + 4) = make_float4(v[4], v[5], v[6], v[7]);
  }
}

template <typename T>
__device__ __forceinline__ void load4(const void* p, int64_t e, float v[4]) {
  if constexpr (kHalfWidth<T>) {
    const uint2 raw = *reinterpret_cast<const uint2*>(static_cast<const T*>(p) + e);
    pair_to_float2<T>(raw.x, v[0], v[1]);
    pair_to_float2<T>(raw.y, v[2], v[3]);
  } else {
    const float4 f = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + e);
    v[0] = f.x; v[1] = f.y; v[2] = f.z; v[3] = f.w;
  }
}

// Stages the factor's columns [c0, c0 + kTileCols) into s (zeros past k): F = f (R, k), or f stored (k, R) when
// kTransposed (then consecutive threads read consecutive floats). Followed by a barrier.
template <int R, bool kTransposed>
__device__ __forceinline__ void stage_factor_tile(float (&s)[R][kTileCols], const float* f, int64_t k, int64_t c0) {
  if constexpr (kTransposed) {
    for (int i = threadIdx.x; i < R * kTileCols; i += kThreads) {
      const int cc = i / R, rr = i % R;
      s[rr][cc] = c0 + cc < k ? f[(c0 + cc) * R + rr] : 0.0f;
    }
  } else {
    for (int i = threadIdx.x; i < R * kTileCols; i += kThreads) {
      const int rr = i / kTileCols, cc = i % kTileCols;
      s[rr][cc] = c0 + cc < k ? f[rr * k + c0 + cc] : 0.0f;
    }
  }
  __syncthreads();
}

// A group's raw loads, all issued before any math: rows row0 .. row0 + J - 1, the lane's 8 columns of each of the
// kSteps warp-column steps of the tile at c0 (k % 8 == 0: 8 columns all inside or all outside). Elements outside
// (n, k) are zeros with kZeroFill, else left unset (the caller never reads them).
template <int J, typename T, bool kZeroFill>
__device__ __forceinline__ void load_group_raw(const void* p, int64_t n, int64_t k, int64_t row0, int64_t c0, int lane,
                                               uint4 (&raw)[J][kSteps][kRawWords<T>]) {
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int64_t col = c0 + s * kWarpCols + lane * kVec;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int64_t row = row0 + j;
      if (row < n && col < k) {
        load8_raw<T>(p, row * k + col, raw[j][s]);
      } else if constexpr (kZeroFill) {
#pragma unroll
        for (int w = 0; w < kRawWords<T>; ++w) raw[j][s][w] = make_uint4(0, 0, 0, 0);
      }
    }
  }
}

// Multiplies v (elements (row, col .. col + N - 1) of an (n, k) operand, col % 4 == 0) by their dropout multipliers,
// at stream indices g .. g + N - 1 with g = dropout_index(map, row, col, k).
template <int N>
__device__ __forceinline__ void apply_dropout(float v[N], uint64_t seed, const DropoutMap& map, int64_t row,
                                              int64_t col, int64_t k, uint32_t threshold, float keep_scale) {
  if (threshold == 0) return;
  const uint64_t g = dropout_index(map, row, col, k);
  if ((g & 3) == 0) {  // whole blocks (every identity-mapped call)
#pragma unroll
    for (int q = 0; q < N / 4; ++q) {
      const PhiloxBlock blk = philox_block(seed, (g >> 2) + q);
#pragma unroll
      for (int w = 0; w < 4; ++w) v[4 * q + w] = v[4 * q + w] * (blk.w[w] >= threshold ? keep_scale : 0.0f);
    }
    return;
  }
  PhiloxCursor cursor(seed);
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = v[i] * (cursor.word(g + i) >= threshold ? keep_scale : 0.0f);
}

// Sums R values over the 32 lanes of a warp by halving exchanges (a reduce-scatter: log2(R) steps move half of the
// remaining values each), then plain butterflies. Returns the full sum of rank *rank; lanes with
// lane % (32 / R) == 0 hold distinct ranks. Fixed order: deterministic.
template <int R>
__device__ __forceinline__ float warp_reduce_scatter(float (&v)[R], int lane, int* rank) {
  int idx = 0;
  int count = R;
#pragma unroll
  for (int offset = 16; offset >= 1; offset >>= 1) {
    if (count > 1) {
      const bool upper = (lane & offset) != 0;
#pragma unroll
      for (int i = 0; i < R / 2; ++i) {
        if (i < count / 2) {
          const float send = upper ? v[i] : v[i + count / 2];
          const float keep = upper ? v[i + count / 2] : v[i];
          v[i] = keep + __shfl_xor_sync(0xFFFFFFFFu, send, offset);
        }
      }
      if (upper) idx += count / 2;
      count /= 2;
    } else {
      v[0] += __shfl_xor_sync(0xFFFFFFFFu, v[0], offset);
    }
  }
  *rank = idx;
  return v[0];
}

// out[split][row][rr] (split = blockIdx.x; F32) = sum over the split's columns of dropout(x)[row][c] * a[rr][c].
template <int R, typename T>
__global__ void __launch_bounds__(kThreads, kHalfWidth<T> ? 2 : 1)
    lora_xa_kernel(const void* x, const float* a, int64_t n, int64_t k, int64_t rows_per_block, uint64_t seed,
                   uint32_t threshold, float keep_scale, DropoutMap map, float* out) {
  constexpr int J = kRowsAtOnce<R>;
  __shared__ __align__(16) float sa[R][kTileCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  stage_factor_tile<R, false>(sa, a, k, c0);
  const int64_t rows_per_warp = rows_per_block / kWarps;
  const int64_t warp_row0 = static_cast<int64_t>(blockIdx.y) * rows_per_block + warp * rows_per_warp;
  for (int64_t g0 = 0; g0 < rows_per_warp; g0 += J) {
    // All of the group's loads first (J rows x kSteps columns steps), then the math.
    uint4 raw[J][kSteps][kRawWords<T>];
    load_group_raw<J, T, true>(x, n, k, warp_row0 + g0, c0, lane, raw);
    float acc[J][R];
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int rr = 0; rr < R; ++rr) acc[j][rr] = 0.0f;
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int cc = s * kWarpCols + lane * kVec;
      float v[J][kVec];
#pragma unroll
      for (int j = 0; j < J; ++j) {
        raw_to_float8<T>(raw[j][s], v[j]);
        apply_dropout<kVec>(v[j], seed, map, warp_row0 + g0 + j, c0 + cc, k, threshold, keep_scale);
      }
#pragma unroll
      for (int rr = 0; rr < R; ++rr) {
        const float4 lo = *reinterpret_cast<const float4*>(&sa[rr][cc]);
        const float4 hi = *reinterpret_cast<const float4*>(&sa[rr][cc + 4]);
#pragma unroll
        for (int j = 0; j < J; ++j) {
          acc[j][rr] += v[j][0] * lo.x + v[j][1] * lo.y + v[j][2] * lo.z + v[j][3] * lo.w + v[j][4] * hi.x +
                        v[j][5] * hi.y + v[j][6] * hi.z + v[j][7] * hi.w;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < J; ++j) {
      int rank = 0;
      const float sum = warp_reduce_scatter<R>(acc[j], lane, &rank);
      const int64_t row = warp_row0 + g0 + j;
      if (lane % (32 / R) == 0 && row < n) out[(static_cast<int64_t>(blockIdx.x) * n + row) * R + rank] = sum;
    }
  }
}

// xa[i] = sum over splits, in order, of part[split][i] (i over n * R).
__global__ void sum_splits_kernel(const float* part, int64_t splits, int64_t count, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t sp = 0; sp < splits; ++sp) s += part[sp * count + i];
    out[i] = s;
  }
}

// y[row][c] += scale * mult(row, c) * sum_rr g[row][rr] * F[rr][c]; F = f (R, k), or f (k, R) transposed.
// (rows_per_block is a multiple of kTileRows, so of kWarps * J.)
template <int R, typename T, bool kTransposed>
__global__ void __launch_bounds__(kThreads, kHalfWidth<T> ? 2 : 1)
    lora_rank_update_kernel(void* y, const float* g, const float* f, int64_t n, int64_t k, int64_t rows_per_block,
                            float scale, uint64_t seed, uint32_t threshold, float keep_scale, DropoutMap map) {
  constexpr int J = 2;  // rows at once: y's loads are held in registers until the store
  __shared__ __align__(16) float sf[R][kTileCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  stage_factor_tile<R, kTransposed>(sf, f, k, c0);
  const int64_t rows_per_warp = rows_per_block / kWarps;
  const int64_t warp_row0 = static_cast<int64_t>(blockIdx.y) * rows_per_block + warp * rows_per_warp;
  for (int64_t g0 = 0; g0 < rows_per_warp; g0 += J) {
    // The group's loads of y first (J rows x kSteps column steps), then the math and the stores.
    uint4 raw[J][kSteps][kRawWords<T>];
    load_group_raw<J, T, false>(y, n, k, warp_row0 + g0, c0, lane, raw);
    float gv[J][R];
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int64_t row = warp_row0 + g0 + j;
#pragma unroll
      for (int q = 0; q < R / 4; ++q) {
        const float4 t = row < n ? *reinterpret_cast<const float4*>(g + row * R + 4 * q) : make_float4(0, 0, 0, 0);
        gv[j][4 * q] = t.x; gv[j][4 * q + 1] = t.y; gv[j][4 * q + 2] = t.z; gv[j][4 * q + 3] = t.w;
      }
    }
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int cc = s * kWarpCols + lane * kVec;
      float t[J][kVec];
#pragma unroll
      for (int j = 0; j < J; ++j)
#pragma unroll
        for (int i = 0; i < kVec; ++i) t[j][i] = 0.0f;
#pragma unroll
      for (int rr = 0; rr < R; ++rr) {
        const float4 lo = *reinterpret_cast<const float4*>(&sf[rr][cc]);
        const float4 hi = *reinterpret_cast<const float4*>(&sf[rr][cc + 4]);
#pragma unroll
        for (int j = 0; j < J; ++j) {
          const float gr = gv[j][rr];
          t[j][0] += gr * lo.x; t[j][1] += gr * lo.y; t[j][2] += gr * lo.z; t[j][3] += gr * lo.w;
          t[j][4] += gr * hi.x; t[j][5] += gr * hi.y; t[j][6] += gr * hi.z; t[j][7] += gr * hi.w;
        }
      }
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int64_t row = warp_row0 + g0 + j;
        if (row >= n || c0 + cc >= k) continue;
        const int64_t e = row * k + c0 + cc;
        apply_dropout<kVec>(t[j], seed, map, row, c0 + cc, k, threshold, keep_scale);
        float v[kVec];
        raw_to_float8<T>(raw[j][s], v);
#pragma unroll
        for (int i = 0; i < kVec; ++i) v[i] = v[i] + scale * t[j][i];
        store8<T>(y, e, v);
      }
    }
  }
}

// Columns per lane of the da pass: 8 for r = 8, 4 for r = 16 (64 accumulators per lane either way).
template <int R>
constexpr int kDaColsPerLane = R == 8 ? 8 : 4;
int da_tile_cols(int r) { return 32 * (r == 8 ? 8 : 4); }

// part[slice][rr][c] = sum over the slice's rows of g[row][rr] * dropout(x)[row][c]; blocks (column tile, slice).
// Warps take rows warp, warp + 8, ... (two at a time); the 8 warps' sums are added in warp order.
template <int R, typename T>
__global__ void __launch_bounds__(kThreads) lora_da_kernel(const void* x, const float* g, int64_t n, int64_t k,
                                                           int64_t rows_per_slice, uint64_t seed, uint32_t threshold,
                                                           float keep_scale, DropoutMap map, float* part) {
  constexpr int C = kDaColsPerLane<R>;
  constexpr int kCols = 32 * C;
  __shared__ __align__(16) float tile[R][kCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kCols + lane * C;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_slice;
  const int64_t r1 = r0 + rows_per_slice < n ? r0 + rows_per_slice : n;
  float acc[R][C];
#pragma unroll
  for (int rr = 0; rr < R; ++rr)
#pragma unroll
    for (int i = 0; i < C; ++i) acc[rr][i] = 0.0f;
  if (c < k) {
    for (int64_t row = r0 + warp; row < r1; row += 2 * kWarps) {
      const int64_t row2 = row + kWarps;
      const bool two = row2 < r1;
      float v[2][C];
      const int64_t e = row * k + c, e2 = row2 * k + c;
      if constexpr (C == 8) {
        load8<T>(x, e, v[0]);
        if (two) load8<T>(x, e2, v[1]);
      } else {
        load4<T>(x, e, v[0]);
        if (two) load4<T>(x, e2, v[1]);
      }
      apply_dropout<C>(v[0], seed, map, row, c, k, threshold, keep_scale);
      float gv[R];
#pragma unroll
      for (int q = 0; q < R / 4; ++q) {
        const float4 t = *reinterpret_cast<const float4*>(g + row * R + 4 * q);
        gv[4 * q] = t.x; gv[4 * q + 1] = t.y; gv[4 * q + 2] = t.z; gv[4 * q + 3] = t.w;
      }
#pragma unroll
      for (int rr = 0; rr < R; ++rr)
#pragma unroll
        for (int i = 0; i < C; ++i) acc[rr][i] += gv[rr] * v[0][i];
      if (two) {
        apply_dropout<C>(v[1], seed, map, row2, c, k, threshold, keep_scale);
#pragma unroll
        for (int q = 0; q < R / 4; ++q) {
          const float4 t = *reinterpret_cast<const float4*>(g + row2 * R + 4 * q);
          gv[4 * q] = t.x; gv[4 * q + 1] = t.y; gv[4 * q + 2] = t.z; gv[4 * q + 3] = t.w;
        }
#pragma unroll
        for (int rr = 0; rr < R; ++rr)
#pragma unroll
          for (int i = 0; i < C; ++i) acc[rr][i] += gv[rr] * v[1][i];
      }
    }
  }
  for (int i = threadIdx.x; i < R * kCols; i += kThreads) (&tile[0][0])[i] = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    __syncthreads();
    if (warp == w) {
#pragma unroll
      for (int rr = 0; rr < R; ++rr)
#pragma unroll
        for (int i = 0; i < C; ++i) tile[rr][lane * C + i] += acc[rr][i];
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < R * kCols; i += kThreads) {
    const int rr = i / kCols, cc = i % kCols;
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kCols + cc;
    if (col < k) part[(static_cast<int64_t>(blockIdx.y) * R + rr) * k + col] = tile[rr][cc];
  }
}

// da[i] += scale * sum over slices (in order) of part[slice][i].
__global__ void lora_da_reduce_kernel(const float* part, int64_t slices, int64_t rk, float scale, float* da) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rk;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.0f;
    for (int64_t sl = 0; sl < slices; ++sl) s += part[sl * rk + i];
    da[i] += scale * s;
  }
}

unsigned blocks_for(int64_t work, int threads) {
  const int64_t b = (work + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b < 65535 ? b : 65535));
}

// Rows per block of the xa / rank-update passes: a multiple of kTileRows, large enough that the factor's tile, staged
// once per block, is reused over many rows, small enough for ~kTargetBlocks blocks.
int64_t rows_per_block(int64_t n, int64_t k) {
  const int64_t col_tiles = (k + kTileCols - 1) / kTileCols;
  const int64_t row_blocks = kTargetBlocks / col_tiles > 1 ? kTargetBlocks / col_tiles : 1;
  const int64_t rows = (n + row_blocks - 1) / row_blocks;
  return (rows + kTileRows - 1) / kTileRows * kTileRows;
}

dim3 tile_grid(int64_t n, int64_t k, int64_t rows) {
  return dim3(static_cast<unsigned>((k + kTileCols - 1) / kTileCols), static_cast<unsigned>((n + rows - 1) / rows));
}

bool grid_fits(int64_t n, int64_t k) { return k / kTileCols < (1LL << 31) && n < (1LL << 40); }

bool activation_code(int dtype) { return dtype == 0 || dtype == 1 || dtype == 2; }

// Calls launch(tag), tag a null T* of the element type T of dtype code 0 / 1 / 2 (checked by activation_code).
template <typename Launch>
void with_element_type(int dtype, Launch&& launch) {
  if (dtype == 0) launch(static_cast<float*>(nullptr));
  if (dtype == 1) launch(static_cast<__nv_bfloat16*>(nullptr));
  if (dtype == 2) launch(static_cast<__half*>(nullptr));
}

}  // namespace

bool lora_fast_shape(int64_t k, int r) { return (r == 8 || r == 16) && k % 8 == 0 && k > 0; }

int64_t lora_xa_splits(int64_t k) { return (k + kTileCols - 1) / kTileCols; }

cudaError_t launch_lora_xa(const void* x, int x_dtype, const float* a, int64_t n, int64_t k, int r, uint64_t seed,
                           uint32_t threshold, float keep_scale, const DropoutMap& map, float* part, float* xa,
                           cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!lora_fast_shape(k, r) || !activation_code(x_dtype) || !grid_fits(n, k)) return cudaErrorInvalidValue;
  const int64_t splits = lora_xa_splits(k);
  float* out = splits == 1 ? xa : part;
  const int64_t rows = rows_per_block(n, k);
  const dim3 grid = tile_grid(n, k, rows);
  with_element_type(x_dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (r == 8) {
      lora_xa_kernel<8, T><<<grid, kThreads, 0, stream>>>(x, a, n, k, rows, seed, threshold, keep_scale, map, out);
    } else {
      lora_xa_kernel<16, T><<<grid, kThreads, 0, stream>>>(x, a, n, k, rows, seed, threshold, keep_scale, map, out);
    }
  });
  if (splits == 1) return cudaGetLastError();
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  sum_splits_kernel<<<blocks_for(n * r, 256), 256, 0, stream>>>(part, splits, n * r, xa);
  return cudaGetLastError();
}

cudaError_t launch_lora_rank_update(void* y, int y_dtype, const float* g, const float* f, bool f_transposed, int64_t n,
                                    int64_t k, int r, float scale, uint64_t seed, uint32_t threshold, float keep_scale,
                                    const DropoutMap& map, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!lora_fast_shape(k, r) || !activation_code(y_dtype) || !grid_fits(n, k)) return cudaErrorInvalidValue;
  const int64_t rows = rows_per_block(n, k);
  const dim3 grid = tile_grid(n, k, rows);
  with_element_type(y_dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
#define SWIFT_LORA_UPDATE(R, TR)                                                                               \
  lora_rank_update_kernel<R, T, TR><<<grid, kThreads, 0, stream>>>(y, g, f, n, k, rows, scale, seed, threshold, \
                                                                   keep_scale, map)
    if (r == 8) {
      f_transposed ? SWIFT_LORA_UPDATE(8, true) : SWIFT_LORA_UPDATE(8, false);
    } else {
      f_transposed ? SWIFT_LORA_UPDATE(16, true) : SWIFT_LORA_UPDATE(16, false);
    }
#undef SWIFT_LORA_UPDATE
  });
  return cudaGetLastError();
}

int64_t lora_da_slices(int64_t n, int64_t k, int r) {
  const int64_t col_blocks = (k + da_tile_cols(r) - 1) / da_tile_cols(r);
  const int64_t want = (kTargetBlocks + col_blocks - 1) / col_blocks;
  const int64_t most = n / 64 > 1 ? n / 64 : 1;  // at least 64 rows per slice
  return want < most ? want : most;
}

cudaError_t launch_lora_da(const void* x, int x_dtype, const float* g, int64_t n, int64_t k, int r, float scale,
                           uint64_t seed, uint32_t threshold, float keep_scale, const DropoutMap& map, float* part,
                           float* da, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!lora_fast_shape(k, r) || !activation_code(x_dtype)) return cudaErrorInvalidValue;
  const int64_t slices = lora_da_slices(n, k, r);
  const int64_t rows_per_slice = (n + slices - 1) / slices;
  const dim3 grid(static_cast<unsigned>((k + da_tile_cols(r) - 1) / da_tile_cols(r)), static_cast<unsigned>(slices));
  with_element_type(x_dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (r == 8) {
      lora_da_kernel<8, T><<<grid, kThreads, 0, stream>>>(x, g, n, k, rows_per_slice, seed, threshold, keep_scale,
                                                          map, part);
    } else {
      lora_da_kernel<16, T><<<grid, kThreads, 0, stream>>>(x, g, n, k, rows_per_slice, seed, threshold, keep_scale,
                                                           map, part);
    }
  });
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  lora_da_reduce_kernel<<<blocks_for(r * k, 256), 256, 0, stream>>>(part, slices, r * k, scale, da);
  return cudaGetLastError();
}

}  // namespace swift::ops::cuda
