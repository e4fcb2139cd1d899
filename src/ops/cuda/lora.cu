// ops/cuda/lora.cu — the rank-r side of a LoRA linear, memory-bound passes that read or write each activation once:
//   xa = dropout(x) a^T            (forward: one read of x)
//   y += scale * mult * (g F)      (forward's B product with F = b^T, no dropout; backward's dx term with F = a)
//   da += scale * g^T dropout(x)   (backward: one read of x)
// (The backward's g = dy b, db += scale dy^T xa pass is lora_dy.cu's; the staging the tensor-core passes share is
// lora_stream.cuh's.)
// The tensor-core x passes (xa, da) also take up to 3 jobs over one x in one launch (a layer's q, k, v; gate, up):
// job j's blocks sit next to the other jobs' on the same rows and columns (blockIdx.x = column tile * jobs + j), so
// the later reads of x come from L2; each job's work is the single launch's (the same bits).
// The r 8 rank updates and the swiglu-folded B products run by default in lora_ring.cu (the factor in registers, the
// rows through a cp.async ring); their shared-memory forms here serve r 16, the non-default work shapes,
// SWIFT_LORA_FACTOR_REGS=0 and cached keep bits with k % 32 != 0.
// With r 8 and BF16 x, xa and da run on tensor cores too (lora_x_mma_kernel: the fp32 factor as three bf16 terms, every
// product exact); other ranks / dtypes, LoraKernelConfig's non-default work shapes and tensor_cores = false run the
// CUDA-core kernels below.
//
// Invariants:
//  - Fast-path conditions (the caller checks them, else uses the GEMM path): r in {8, 16}, k % 8 == 0, x / y
//    16-byte aligned, F32, BF16 or F16 activations (dtype codes 0 / 1 / 2; the kernels are templates on the element
//    type). A lane handles 8 consecutive columns (one 16-byte BF16 / F16 load, two F32 loads), i.e. exactly one
//    philox block: the dropout multiplier of element (row, col) is dropout_draw(seed, g) >= threshold ? keep_scale : 0
//    with g = dropout_index(map, row, col, k) (ops/philox.h: 16-bit draws, 8 per block; identity map:
//    g = row * k + col), the same masks as the CPU. When g is a multiple of 8 (always with the identity map, since
//    k % 8 == 0) the 8 draws are one whole block (4 columns at a multiple of 4: half a block); a mapped block starting
//    elsewhere in the stream draws its elements one by one (PhiloxCursor) on CUDA cores: the tensor-core passes
//    draw whole blocks only (dropout_whole_blocks), and with such a map xa and da both take the CUDA-core kernels.
//  - Math in fp32 with fp32 factors (PEFT runs the adapter in fp32); 16-bit outputs are rounded once.
//  - Deterministic: every output has one writer and a summation order fixed by (n, k, r) alone (never by the GPU
//    model or timing): xa sums its column splits in order, da its row slices in order.
//  - Keep-bits cache (ops.h Dropout::keep_bits): with a dropout, xa can store the mask it draws as bits ((n, k / 8)
//    bytes, bit j of byte (row, c) = element (row, 8c + j) kept); the dx term and da then read the bits instead of
//    drawing the mask again (Philox4x32-10 costs ~8 instructions per element with 16-bit draws: each draw of the 7B
//    step's masks took ~10 ms with 32-bit draws). The multipliers, and so every result, are the same either way.
//    xa reads the bits too where a pass over x drew them first (launch_lora_xa_from_bits: down's mask from the
//    swiglu's pass, ops::swiglu_drawing_mask).
//  - Shapes of the work: blocks of 8 warps over 512 columns and a range of at most kMaxBlockRows rows (a multiple of
//    32, sized for about kTargetBlocks blocks) for xa and y, with the factor's columns staged once per block in
//    shared memory and reused by J rows at a time (LoraKernelConfig), each group's loads issued before its math; the
//    rank update stages the block's rows of g in shared memory too. da is column-stationary (each lane accumulates
//    its columns over a slice of rows, in chunks whose rows of g are staged in shared memory). Loads of g straight
//    from global memory in the inner loops made da wait on one L2 round trip per row (7B step, dropout 0.05:
//    38.0 -> 22.8 ms with the staging and 4 rows per warp and chunk, bench/bench_lora.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/func_attribute.cuh"
#include "ops/cuda/kernels_lora.cuh"
#include "ops/cuda/lora_common.cuh"
#include "ops/cuda/lora_stream.cuh"
#include "ops/cuda/swiglu_math.cuh"
#include "ops/philox.h"

namespace swift::ops::cuda {

namespace {

using namespace lora_detail;

constexpr int kVec = 8;                  // columns per lane
constexpr int kWarpCols = 32 * kVec;     // 256
constexpr int kSteps = 2;                // warp-column steps per block tile
constexpr int kTileCols = kWarpCols * kSteps;  // 512
constexpr int kTileRows = 32;            // row granularity of a block: 8 warps x 4 rows
constexpr int kMaxBlockRows = 256;       // xa / rank update: rows per block at most (g's rows staged in shared memory)

template <int R>
constexpr int kRowsAtOnce = R == 8 ? 4 : 2;

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

// One group of the xa pass: rows row0 .. row0 + J - 1 from their raw loads; writes out[split][row][rr].
template <int R, typename T, int J>
__device__ __forceinline__ void xa_group(const uint4 (&raw)[J][kSteps][kRawWords<T>], const float (&sa)[R][kTileCols],
                                         int64_t n, int64_t k, int64_t row0, int64_t c0, int lane, uint64_t seed,
                                         uint32_t threshold, float keep_scale, const DropoutMap& map, float* out,
                                         uint8_t* keep_bits) {
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
      if (threshold != 0) {
        const uint32_t bits = dropout_keep_bits<kVec>(seed, map, row0 + j, c0 + cc, k, threshold);
        apply_keep_bits<kVec>(v[j], bits, keep_scale);
        if (keep_bits != nullptr && row0 + j < n && c0 + cc < k) {
          keep_bits[(row0 + j) * (k / 8) + (c0 + cc) / 8] = static_cast<uint8_t>(bits);
        }
      }
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
    const int64_t row = row0 + j;
    if (lane % (32 / R) == 0 && row < n) out[(static_cast<int64_t>(blockIdx.x) * n + row) * R + rank] = sum;
  }
}

// out[split][row][rr] (split = blockIdx.x; F32) = sum over the split's columns of dropout(x)[row][c] * a[rr][c].
// Groups of J rows (all of a group's loads before its math); every row's sums are formed in the same order for
// every J.
template <int R, typename T, int J>
__global__ void __launch_bounds__(kThreads, kHalfWidth<T> ? 2 : 1)
    lora_xa_kernel(const void* x, const float* a, int64_t n, int64_t k, int64_t rows_per_block, uint64_t seed,
                   uint32_t threshold, float keep_scale, DropoutMap map, float* out, uint8_t* keep_bits) {
  __shared__ __align__(16) float sa[R][kTileCols];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  stage_factor_tile<R, false>(sa, a, k, c0);
  const int64_t rows_per_warp = rows_per_block / kWarps;  // a multiple of 4, so of J
  const int64_t warp_row0 = static_cast<int64_t>(blockIdx.y) * rows_per_block + warp * rows_per_warp;
  for (int64_t g0 = 0; g0 < rows_per_warp; g0 += J) {
    uint4 raw[J][kSteps][kRawWords<T>];
    load_group_raw<J, T, true>(x, n, k, warp_row0 + g0, c0, lane, raw);
    xa_group<R, T, J>(raw, sa, n, k, warp_row0 + g0, c0, lane, seed, threshold, keep_scale, map, out, keep_bits);
  }
}

// t[j][i] = sum over rr of gv[j][rr] * sf[rr][cc + i] (rr in order, from 0): the rank term of J rows at the lane's
// 8 columns. The rank update and the swiglu-folded B products share it (and add_scaled8), hence the same bits.
template <int R, int J>
__device__ __forceinline__ void rank_terms(const float (&sf)[R][kTileCols], const float (&gv)[J][R], int cc,
                                           float (&t)[J][kVec]) {
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
}

// v[i] = v[i] + scale * t[i]: the update of one element by its rank term.
__device__ __forceinline__ void add_scaled8(float (&v)[kVec], float scale, const float (&t)[kVec]) {
#pragma unroll
  for (int i = 0; i < kVec; ++i) v[i] = v[i] + scale * t[i];
}

// gv[j] = the group's J rows of g staged in shared memory (rows local0 .. local0 + J - 1 of sg).
template <int R, int J>
__device__ __forceinline__ void staged_rows(const float (*sg)[R], int local0, float (&gv)[J][R]) {
#pragma unroll
  for (int j = 0; j < J; ++j) {
#pragma unroll
    for (int q = 0; q < R / 4; ++q) {
      const float4 t = *reinterpret_cast<const float4*>(&sg[local0 + j][4 * q]);
      gv[j][4 * q] = t.x; gv[j][4 * q + 1] = t.y; gv[j][4 * q + 2] = t.z; gv[j][4 * q + 3] = t.w;
    }
  }
}

// One group of the rank update: rows row0 .. row0 + J - 1 of y from their raw loads, stored back.
// g's rows of the group are sg[local0 .. local0 + J - 1] (staged by the block; zeros past n).
template <int R, typename T, int J, bool kResidual>
__device__ __forceinline__ void rank_update_group(const uint4 (&raw)[J][kSteps][kRawWords<T>],
                                                  const uint4 (&res)[kResidual ? J : 1][kSteps][kRawWords<T>],
                                                  const float (&sf)[R][kTileCols], const float (*sg)[R], int local0,
                                                  void* y, int64_t n, int64_t k, int64_t row0, int64_t c0, int lane,
                                                  float scale, uint64_t seed, uint32_t threshold, float keep_scale,
                                                  const DropoutMap& map, const uint8_t* keep_bits) {
  uint32_t kb[J][kSteps] = {};  // cached keep bits, loaded before the math
  if (threshold != 0 && keep_bits != nullptr) {
#pragma unroll
    for (int j = 0; j < J; ++j)
#pragma unroll
      for (int s = 0; s < kSteps; ++s) {
        const int64_t col = c0 + s * kWarpCols + lane * kVec;
        if (row0 + j < n && col < k) kb[j][s] = cached_keep_bits<kVec>(keep_bits, row0 + j, col, k);
      }
  }
  float gv[J][R];
  staged_rows<R, J>(sg, local0, gv);
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int cc = s * kWarpCols + lane * kVec;
    float t[J][kVec];
    rank_terms<R, J>(sf, gv, cc, t);
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int64_t row = row0 + j;
      if (row >= n || c0 + cc >= k) continue;
      const int64_t e = row * k + c0 + cc;
      if (threshold != 0) {
        const uint32_t bits =
            keep_bits != nullptr ? kb[j][s] : dropout_keep_bits<kVec>(seed, map, row, c0 + cc, k, threshold);
        apply_keep_bits<kVec>(t[j], bits, keep_scale);
      }
      float v[kVec];
      raw_to_float8<T>(raw[j][s], v);
      if constexpr (kResidual) {  // y + residual first (add_lora_residual), then the rank term
        float rv[kVec];
        raw_to_float8<T>(res[j][s], rv);
#pragma unroll
        for (int i = 0; i < kVec; ++i) v[i] = v[i] + rv[i];
      }
      add_scaled8(v, scale, t[j]);
      store8<T>(y, e, v);
    }
  }
}

// y[row][c] += scale * mult(row, c) * sum_rr g[row][rr] * F[rr][c]; F = f (R, k), or f (k, R) transposed (with
// overwrite: y = 0 + ..., y not read; with kResidual: y = (y + residual) + ..., residual (n, k) like y).
// (rows_per_block is a multiple of kTileRows, so of kWarps * J.) Groups of J rows, all of a group's loads of y before
// its math and stores. (Loads of y through a per-warp cp.async ring, 3 groups ahead, were slower at the 7B's shapes:
// docs/PERFORMANCE.md run 18.)
template <int R, typename T, bool kTransposed, int J, bool kResidual = false>
__global__ void __launch_bounds__(kThreads, kHalfWidth<T> ? 2 : 1)
    lora_rank_update_kernel(void* y, const float* g, const float* f, int64_t n, int64_t k, int64_t rows_per_block,
                            float scale, uint64_t seed, uint32_t threshold, float keep_scale, DropoutMap map,
                            const uint8_t* keep_bits, bool overwrite, const void* residual) {
  __shared__ __align__(16) float sf[R][kTileCols];
  __shared__ __align__(16) float sg[kMaxBlockRows][R];  // the block's rows of g (rows_per_block <= kMaxBlockRows)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const int64_t block_row0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  for (int i = threadIdx.x; i < rows_per_block * R; i += kThreads) {
    const int64_t row = block_row0 + i / R;
    (&sg[0][0])[i] = row < n ? g[row * R + i % R] : 0.0f;
  }
  stage_factor_tile<R, kTransposed>(sf, f, k, c0);  // ends with the barrier
  const int64_t rows_per_warp = rows_per_block / kWarps;
  const int local_warp0 = static_cast<int>(warp * rows_per_warp);
  const int64_t warp_row0 = block_row0 + local_warp0;
  for (int64_t g0 = 0; g0 < rows_per_warp; g0 += J) {
    uint4 raw[J][kSteps][kRawWords<T>];
    if (overwrite) {  // y = 0 + scale * ...: the same arithmetic without reading y
#pragma unroll
      for (int j = 0; j < J; ++j)
#pragma unroll
        for (int st = 0; st < kSteps; ++st)
#pragma unroll
          for (int w = 0; w < kRawWords<T>; ++w) raw[j][st][w] = make_uint4(0u, 0u, 0u, 0u);
    } else {
      load_group_raw<J, T, false>(y, n, k, warp_row0 + g0, c0, lane, raw);
    }
    uint4 res[kResidual ? J : 1][kSteps][kRawWords<T>];
    if constexpr (kResidual) load_group_raw<J, T, false>(residual, n, k, warp_row0 + g0, c0, lane, res);
    rank_update_group<R, T, J, kResidual>(raw, res, sf, sg, local_warp0 + static_cast<int>(g0), y, n, k,
                                          warp_row0 + g0, c0, lane, scale, seed, threshold, keep_scale, map,
                                          keep_bits);
  }
}

// Rows per block of the swiglu-folded B products (two factors' tiles and two sets of staged rows in 48 KB).
constexpr int kSwigluMaxBlockRows = 128;

// v[i] rounded to T and widened back: the value a 16-bit store then load gives (F32: unchanged).
template <typename T>
__device__ __forceinline__ void round_to8(float (&v)[kVec]) {
  if constexpr (kHalfWidth<T>) {
    uint4 w[1];
    store8<T>(&w[0], 0, v);
    raw_to_float8<T>(w, v);
  }
}

// The MLP's gate and up get their LoRA B products and feed the swiglu in one pass (r = R, b stored (k, R) as LoRA's
// b): gate = T(gate + scale * (xg bg^T)) and up likewise (the rank update's arithmetic and rounding), written back,
// and out = swiglu(gate, up) on the rounded values (the swiglu kernel's arithmetic). The rank update's shapes (8 warps
// x 512 columns, J rows per group with all of a group's loads first).
template <int R, typename T, int J>
__global__ void __launch_bounds__(kThreads, kHalfWidth<T> ? 2 : 1)
    lora_swiglu_kernel(void* gate, void* up, const float* xg, const float* bg, const float* xu, const float* bu,
                       int64_t n, int64_t k, int64_t rows_per_block, float scale, void* out) {
  __shared__ __align__(16) float sfg[R][kTileCols];
  __shared__ __align__(16) float sfu[R][kTileCols];
  __shared__ __align__(16) float sgg[kSwigluMaxBlockRows][R];
  __shared__ __align__(16) float sgu[kSwigluMaxBlockRows][R];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTileCols;
  const int64_t block_row0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
  for (int i = threadIdx.x; i < rows_per_block * R; i += kThreads) {
    const int64_t row = block_row0 + i / R;
    (&sgg[0][0])[i] = row < n ? xg[row * R + i % R] : 0.0f;
    (&sgu[0][0])[i] = row < n ? xu[row * R + i % R] : 0.0f;
  }
  stage_factor_tile<R, true>(sfg, bg, k, c0);
  stage_factor_tile<R, true>(sfu, bu, k, c0);  // both end with a barrier
  const int64_t rows_per_warp = rows_per_block / kWarps;
  const int local_warp0 = static_cast<int>(warp * rows_per_warp);
  const int64_t warp_row0 = block_row0 + local_warp0;
  for (int64_t g0 = 0; g0 < rows_per_warp; g0 += J) {
    const int64_t row0 = warp_row0 + g0;
    uint4 rg[J][kSteps][kRawWords<T>], ru[J][kSteps][kRawWords<T>];
    load_group_raw<J, T, false>(gate, n, k, row0, c0, lane, rg);
    load_group_raw<J, T, false>(up, n, k, row0, c0, lane, ru);
    float gvg[J][R], gvu[J][R];
    staged_rows<R, J>(sgg, local_warp0 + static_cast<int>(g0), gvg);
    staged_rows<R, J>(sgu, local_warp0 + static_cast<int>(g0), gvu);
#pragma unroll
    for (int s = 0; s < kSteps; ++s) {
      const int cc = s * kWarpCols + lane * kVec;
      float tg[J][kVec], tu[J][kVec];
      rank_terms<R, J>(sfg, gvg, cc, tg);
      rank_terms<R, J>(sfu, gvu, cc, tu);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int64_t row = row0 + j;
        if (row >= n || c0 + cc >= k) continue;
        const int64_t e = row * k + c0 + cc;
        float g[kVec], u[kVec], o[kVec];
        raw_to_float8<T>(rg[j][s], g);
        raw_to_float8<T>(ru[j][s], u);
        add_scaled8(g, scale, tg[j]);
        add_scaled8(u, scale, tu[j]);
        store8<T>(gate, e, g);
        store8<T>(up, e, u);
        round_to8<T>(g);  // the values just stored, as the swiglu kernel would load them
        round_to8<T>(u);
#pragma unroll
        for (int i = 0; i < kVec; ++i) o[i] = swiglu_value(g[i], u[i]);
        store8<T>(out, e, o);
      }
    }
  }
}

// ---- the x passes on tensor cores (r 8, BF16): xa = dropout(x) a^T and da += scale g^T dropout(x) ----
// The dy pass's tiling (256-column tiles, 16-row warp steps, 64-column chunks staged per warp, ldmatrix), with the
// fp32 factor split into three bf16 terms (hi + mid + lo == the fp32 value exactly), so that every product with a
// bf16 element of x is exact and only the fp32 accumulation rounds: the precision of the CUDA-core kernels (fp32
// factors, PEFT's), at the tensor cores' speed. The dropout mask is applied to the staged 16-byte pieces (8 elements:
// one Philox block, or one byte of the keep-bits cache) as halfword masks (exact), and keep_scale multiplies the sums.
__device__ __forceinline__ void split_bf16x3(float v, float (&part)[3]) {
  part[0] = __bfloat162float(__float2bfloat16_rn(v));
  const float r1 = v - part[0];
  part[1] = __bfloat162float(__float2bfloat16_rn(r1));
  part[2] = r1 - part[1];  // rounded to bf16 below: exact (at most 8 significant bits remain)
}

// Halfword keep masks of a Philox block's 8 draws: halfword j of word w is 0xFFFF when draw 2 w + j >= threshold
// (kept), else 0; threshold <= 0xFFFF (65536, nothing kept, is the caller's: no branch here, so that several blocks'
// rounds can interleave). The decisions of dropout_keep_bits8, as masks for 16-bit elements.
__device__ __forceinline__ uint4 keep_masks_of_words(const PhiloxBlock& b, uint32_t threshold) {
  const uint32_t t2 = (threshold & 0xFFFFu) * 0x10001u;
  return make_uint4(__vcmpgeu2(b.w[0], t2), __vcmpgeu2(b.w[1], t2), __vcmpgeu2(b.w[2], t2), __vcmpgeu2(b.w[3], t2));
}

// The keep-bits byte of halfword masks (bit 2 w + j: halfword j of word w), as dropout_keep_bits8 packs them.
__device__ __forceinline__ uint32_t keep_bits_of_masks(uint4 m) {
  const uint32_t x = (m.x & 0x10001u) | ((m.y & 0x10001u) << 2) | ((m.z & 0x10001u) << 4) | ((m.w & 0x10001u) << 6);
  return (x | (x >> 15)) & 0xFFu;
}

// Halfword masks of a keep-bits byte (the inverse of keep_bits_of_masks): word w's bits 2 w and 2 w + 1 moved to bits
// 7 and 15, whose bytes' signs prmt replicates (selector nibbles 8 and 9: PTX's sign mode, which __byte_perm lacks).
__device__ __forceinline__ uint4 keep_masks_of_bits(uint32_t bits) {
  const auto word = [&](int w) {
    const uint32_t moved = (bits << (7 - 2 * w)) | (bits << (14 - 2 * w));
    uint32_t mask;
    asm("prmt.b32 %0, %1, 0, 0x9988;" : "=r"(mask) : "r"(moved));
    return mask;
  };
  return make_uint4(word(0), word(1), word(2), word(3));
}

// The jobs of one x pass launch (launch_lora_xa_group / launch_lora_da_group) as the launcher got them: per job its
// factor, seed, keep bits (xa drawing: stored there if non-null; otherwise read from there if non-null), partials
// and result.
struct XJobs {
  LoraXJob job[kLoraMaxXJobs];
  int count;
};

// kXa: xa's column-tile partials to part[tile][row][rr] (xa itself to out with one tile), f = a (8, k).
// !kXa: da's row-block partials to part[row block][rr][c], f = g (n, 8).
// The dropout (threshold != 0): drawn with kDraw (xa: stored into keep_bits_out when given), else read from
// keep_bits_in (the cache; both give the same mask, so the same bits); the training step always has the cache. Sums
// are of the masked x; keep_scale multiplies xa's partials here and da's sum in the launcher's reduce.
// Blocks (column tile of 256, row block of rows_per_block, a multiple of 128): warp w takes the block's 16-row steps
// w, w + 8, ..., each a stream of 4 chunks of 64 columns (ChunkStream). The mask of the lane's pieces is drawn (or read
// from the cache) while their copies are in flight, and applied to them in shared memory once landed; then the
// chunk's 4 k-tiles in order (ldmatrix, mma with the three bf16 terms of the factor).
template <bool kXa, bool kDraw>
__global__ void __launch_bounds__(kThreads, 2)
    lora_x_mma_kernel(const __nv_bfloat16* __restrict__ x, int64_t n, int64_t k, int64_t rows_per_block,
                      uint32_t threshold, float keep_scale, DropoutMap map, const XJobs jobs) {
  __shared__ uint32_t sbf[kXa ? 3 : 1][kXa ? kDyKTiles : 1][32][2];  // xa: a's B fragments, three terms
  extern __shared__ __align__(16) uint4 stream_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane / 4, tid = lane % 4;
  // The group's jobs side by side along x: blocks job, job + 1, .. of one column tile run together (L2 reuse of x).
  const int job = static_cast<int>(blockIdx.x % static_cast<unsigned>(jobs.count));
  const int64_t col_tile = blockIdx.x / static_cast<unsigned>(jobs.count);
  const float* __restrict__ f = jobs.job[job].f;
  const uint64_t seed = jobs.job[job].seed;
  const uint8_t* __restrict__ keep_bits_in = kDraw ? nullptr : jobs.job[job].keep_bits;
  uint8_t* __restrict__ keep_bits_out = kDraw ? jobs.job[job].keep_bits : nullptr;
  float* __restrict__ part = jobs.job[job].part;
  const ChunkStream cs(stream_smem, x, n, k, rows_per_block, col_tile);
  const int64_t c0 = cs.c0, first_row = cs.first_row;
  const int steps = cs.steps;
  cs.start();  // in flight while a's fragments are staged
  if constexpr (kXa) {
    for (int i = threadIdx.x; i < kDyKTiles * 32; i += kThreads) {
      const int t = i / 32, l = i % 32;
      const int64_t col = c0 + 16 * t + 2 * (l % 4);
      const int rank = l / 4;
      float v[4][3];
      const int64_t cols[4] = {col, col + 1, col + 8, col + 9};
#pragma unroll
      for (int e = 0; e < 4; ++e) split_bf16x3(cols[e] < k ? f[rank * k + cols[e]] : 0.0f, v[e]);
#pragma unroll
      for (int p = 0; p < 3; ++p) {
        sbf[p][t][l][0] = pack_bf16x2(v[0][p], v[1][p]);
        sbf[p][t][l][1] = pack_bf16x2(v[2][p], v[3][p]);
      }
    }
    __syncthreads();
  }
  float cda[kXa ? 1 : kDyKTiles][4];
#pragma unroll
  for (int t = 0; t < (kXa ? 1 : kDyKTiles); ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) cda[t][i] = 0.0f;
  const int64_t tiles = (k + kDyTileCols - 1) / kDyTileCols;
  // The halfword keep masks of the lane's 4 pieces of an item (mask i: piece lane + 32 i, its row lane / 8 + 4 i,
  // columns 8 (lane % 8) ..), drawn (xa: the keep bits also stored), or the cache's bytes (in masks[i].x, made masks
  // after the wait: fewer live registers across it). The 4 Philox blocks are drawn unconditionally (pieces outside
  // too) so that their dependent rounds interleave: one whole block per piece, the blocks of the lane's 4 rows
  // 4 full-width rows apart in the stream (the launcher checked dropout_whole_blocks). Outside pieces are zero-filled:
  // any mask keeps them zero.
  const int64_t groups = k / 8;  // bytes per row of the keep-bits cache
  const int64_t stream_groups = (map.full_cols > 0 ? map.full_cols : k) / 8;  // Philox blocks per full-width row
  // The lane's first piece: its cache byte and its Philox block (rows 4 apart: + 4 groups / stream_groups).
  const int64_t lane_byte = (first_row + lane / 8) * groups + (c0 + 8 * (lane % 8)) / 8;
  const uint64_t lane_block = dropout_index(map, first_row + lane / 8, c0 + 8 * (lane % 8), k) >> 3;
  const auto item_masks = [&](int item, uint4 (&masks)[4]) {
    const int step = item / kDyChunks, chunk = item % kDyChunks;
    const int64_t rows = cs.rows_at(item);
    const bool cols = cs.cols_at(item);
    const int64_t byte = lane_byte + static_cast<int64_t>(step) * kDyBlockStep * groups + chunk * (kDyChunkCols / 8);
    if constexpr (kDraw) {
      const uint64_t block =
          lane_block + static_cast<uint64_t>(step) * kDyBlockStep * stream_groups + chunk * (kDyChunkCols / 8);
      const uint32_t none_kept = threshold > 0xFFFFu ? 0u : ~0u;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint4 mk = keep_masks_of_words(philox_block(seed, block + 4 * i * stream_groups), threshold);
        masks[i] = make_uint4(mk.x & none_kept, mk.y & none_kept, mk.z & none_kept, mk.w & none_kept);
      }
      if (keep_bits_out != nullptr) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if (cols && 4 * i < rows) {
            keep_bits_out[byte + 4 * i * groups] = static_cast<uint8_t>(keep_bits_of_masks(masks[i]));
          }
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) masks[i].x = cols && 4 * i < rows ? keep_bits_in[byte + 4 * i * groups] : 0u;
    }
  };
  const int mrow = (lane & 7) + ((lane >> 3) & 1) * 8, mhalf = lane >> 4;
  const float out_scale = kXa && threshold != 0 ? keep_scale : 1.0f;
  for (int step = 0; step < steps; ++step) {
    const int64_t r0 = first_row + static_cast<int64_t>(step) * kDyBlockStep;
    float cxa[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    uint32_t gb[3][2] = {{0, 0}, {0, 0}, {0, 0}};
    if constexpr (!kXa) {  // da's B fragments: g rows r0 + 2 tid (+1) and + 8 (+9), rank gid, three terms
      float v[4][3];
      const int64_t rows[4] = {r0 + 2 * tid, r0 + 2 * tid + 1, r0 + 2 * tid + 8, r0 + 2 * tid + 9};
#pragma unroll
      for (int e = 0; e < 4; ++e) split_bf16x3(rows[e] < n ? f[rows[e] * 8 + gid] : 0.0f, v[e]);
#pragma unroll
      for (int p = 0; p < 3; ++p) {
        gb[p][0] = pack_bf16x2(v[0][p], v[1][p]);
        gb[p][1] = pack_bf16x2(v[2][p], v[3][p]);
      }
    }
    // xa's chunks are not unrolled: each holds four Philox blocks' code, and an unrolled step overflowed the
    // instruction cache (ncu: "no instruction" stalls); da's index their accumulators by chunk.
#pragma unroll(kXa ? 1 : kDyChunks)
    for (int chunk = 0; chunk < kDyChunks; ++chunk) {
      const int item = step * kDyChunks + chunk;
      const int b = item % kStages;
      StreamStage& buf = cs.stage[b];
      uint4 masks[4];
      if (threshold != 0) item_masks(item, masks);  // while the copies are in flight
      ChunkStream::wait();
      if (threshold != 0) {  // the lane's own pieces
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          if constexpr (!kDraw) masks[i] = keep_masks_of_bits(masks[i].x);
          const uint32_t at = cs.piece_smem(b, i);
          uint4 v;
          asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                       : "r"(at));
          asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(at), "r"(v.x & masks[i].x),
                       "r"(v.y & masks[i].y), "r"(v.z & masks[i].z), "r"(v.w & masks[i].w)
                       : "memory");
        }
      }
      __syncwarp();  // the chunk is the warp's; every lane is past the previous item's reads
      cs.issue(item + kStages - 1);  // into the buffer read by the previous item
#pragma unroll
      for (int kt = 0; kt < kDyChunkCols / 16; ++kt) {
        const int t = chunk * (kDyChunkCols / 16) + kt;
        const uint4* row_address = &buf[mrow][(2 * kt + mhalf) ^ (mrow % 8)];
        if constexpr (kXa) {
          uint32_t a[4];
          attn::ldmatrix_x4(a, row_address);
#pragma unroll
          for (int p = 0; p < 3; ++p) mma_bf16_16816(cxa, a, sbf[p][t][lane][0], sbf[p][t][lane][1]);
        } else {
          uint32_t tr[4];
          attn::ldmatrix_x4_trans(tr, row_address);
          const uint32_t at[4] = {tr[0], tr[2], tr[1], tr[3]};
#pragma unroll
          for (int p = 0; p < 3; ++p) mma_bf16_16816(cda[t], at, gb[p][0], gb[p][1]);
        }
      }
    }
    if constexpr (kXa) {  // rows r0 + gid (+ 8), ranks 2 tid, 2 tid + 1
      float* dst = tiles > 1 ? part + col_tile * n * 8 : jobs.job[job].out;
      const int64_t ra = r0 + gid, rb = r0 + gid + 8;
      if (ra < n) {
        *reinterpret_cast<float2*>(dst + ra * 8 + 2 * tid) = make_float2(cxa[0] * out_scale, cxa[1] * out_scale);
      }
      if (rb < n) {
        *reinterpret_cast<float2*>(dst + rb * 8 + 2 * tid) = make_float2(cxa[2] * out_scale, cxa[3] * out_scale);
      }
    }
  }
  if constexpr (!kXa) {
    attn::cp_async_wait_all();  // only empty groups remain; the staging becomes the sums' tile
    float (*tile)[8] = reinterpret_cast<float (*)[8]>(stream_smem);  // 256 x 8 floats
    sum_warp_fragments(tile, cda, warp, gid, tid);
    for (int i = threadIdx.x; i < kDyTileCols * 8; i += kThreads) {  // part[row block][rr][c], da's (r, k) layout
      const int c = i % kDyTileCols, rr = i / kDyTileCols;
      if (c0 + c < k) part[(static_cast<int64_t>(blockIdx.y) * 8 + rr) * k + c0 + c] = tile[c][rr];
    }
  }
}

// Columns per lane of the da pass: 8 for r = 8, 4 for r = 16 (64 accumulators per lane either way).
template <int R>
constexpr int kDaColsPerLane = R == 8 ? 8 : 4;
int da_tile_cols(int r) { return 32 * (r == 8 ? 8 : 4); }

// C columns of one row as raw 32-bit words (16-bit types: pairs), so loads can be issued well before their use.
template <typename T, int C>
constexpr int kColWords = C * static_cast<int>(sizeof(T)) / 4;

template <typename T, int C>
__device__ __forceinline__ void load_cols_raw(const void* p, int64_t e, uint32_t (&w)[kColWords<T, C>]) {
  const T* q = static_cast<const T*>(p) + e;
  if constexpr (kColWords<T, C> % 4 == 0) {
#pragma unroll
    for (int i = 0; i < kColWords<T, C> / 4; ++i) {
      const uint4 u = reinterpret_cast<const uint4*>(q)[i];
      w[4 * i] = u.x; w[4 * i + 1] = u.y; w[4 * i + 2] = u.z; w[4 * i + 3] = u.w;
    }
  } else {
    static_assert(kColWords<T, C> == 2);
    const uint2 u = *reinterpret_cast<const uint2*>(q);
    w[0] = u.x; w[1] = u.y;
  }
}

template <typename T, int C>
__device__ __forceinline__ void cols_to_float(const uint32_t (&w)[kColWords<T, C>], float (&v)[C]) {
  if constexpr (kHalfWidth<T>) {
#pragma unroll
    for (int i = 0; i < C / 2; ++i) pair_to_float2<T>(w[i], v[2 * i], v[2 * i + 1]);
  } else {
#pragma unroll
    for (int i = 0; i < C; ++i) v[i] = __uint_as_float(w[i]);
  }
}

// part[slice][rr][c] = sum over the slice's rows of g[row][rr] * dropout(x)[row][c]; blocks (column tile, slice).
// The slice's rows go in chunks of RI * kWarps: the chunk's rows of g are staged in shared memory (double-buffered,
// one barrier per chunk), warp w takes the chunk's rows w, w + 8, ..., so over the chunks warp w adds rows
// r0 + w, r0 + w + 8, ... in increasing order (the chunk's loads of x issued before its barrier and math). The 8
// warps' sums are added in warp order. The summation order is the same for every RI.
template <int R, typename T, int RI>
__global__ void __launch_bounds__(kThreads) lora_da_kernel(const void* x, const float* g, int64_t n, int64_t k,
                                                           int64_t rows_per_slice, uint64_t seed, uint32_t threshold,
                                                           float keep_scale, DropoutMap map, const uint8_t* keep_bits,
                                                           float* part) {
  constexpr int C = kDaColsPerLane<R>;
  constexpr int kCols = 32 * C;
  constexpr int W = kColWords<T, C>;
  constexpr int CH = RI * kWarps;  // rows per chunk
  __shared__ __align__(16) float tile[R][kCols];
  __shared__ __align__(16) float sg[2][CH][R];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kCols + lane * C;
  const bool col_ok = c < k;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_slice;
  const int64_t r1 = r0 + rows_per_slice < n ? r0 + rows_per_slice : n;
  const int64_t chunks = r1 > r0 ? (r1 - r0 + CH - 1) / CH : 0;
  float acc[R][C];
#pragma unroll
  for (int rr = 0; rr < R; ++rr)
#pragma unroll
    for (int i = 0; i < C; ++i) acc[rr][i] = 0.0f;
  const bool cached = threshold != 0 && keep_bits != nullptr;
  const auto load_x = [&](int64_t ch, uint32_t (&raw)[RI][W], uint32_t (&kb)[RI]) {
#pragma unroll
    for (int i = 0; i < RI; ++i) {
      const int64_t row = r0 + ch * CH + warp + i * kWarps;
      if (col_ok && row < r1) {
        load_cols_raw<T, C>(x, row * k + c, raw[i]);
        if (cached) kb[i] = cached_keep_bits<C>(keep_bits, row, c, k);
      }
    }
  };
  const auto stage_g = [&](int64_t ch) {
    float* s = &sg[ch & 1][0][0];
    const int64_t row0 = r0 + ch * CH;
    for (int i = threadIdx.x; i < CH * R; i += kThreads) {
      const int64_t row = row0 + i / R;
      s[i] = row < r1 ? g[row * R + i % R] : 0.0f;
    }
  };
  const auto accumulate = [&](int64_t ch, const uint32_t (&raw)[RI][W], const uint32_t (&kb)[RI]) {
    if (!col_ok) return;
#pragma unroll
    for (int i = 0; i < RI; ++i) {
      const int local = warp + i * kWarps;
      const int64_t row = r0 + ch * CH + local;
      if (row >= r1) break;
      float v[C];
      cols_to_float<T, C>(raw[i], v);
      if (threshold != 0) {
        apply_keep_bits<C>(v, cached ? kb[i] : dropout_keep_bits<C>(seed, map, row, c, k, threshold), keep_scale);
      }
      float gv[R];
#pragma unroll
      for (int q = 0; q < R / 4; ++q) {
        const float4 t = *reinterpret_cast<const float4*>(&sg[ch & 1][local][4 * q]);
        gv[4 * q] = t.x; gv[4 * q + 1] = t.y; gv[4 * q + 2] = t.z; gv[4 * q + 3] = t.w;
      }
#pragma unroll
      for (int rr = 0; rr < R; ++rr)
#pragma unroll
        for (int ii = 0; ii < C; ++ii) acc[rr][ii] += gv[rr] * v[ii];
    }
  };
  // One barrier per chunk: buffer ch & 1 is rewritten at chunk ch + 2, after every warp passed chunk ch + 1's
  // barrier, i.e. finished chunk ch's reads.
  for (int64_t ch = 0; ch < chunks; ++ch) {
    uint32_t raw[RI][W], kb[RI] = {};
    load_x(ch, raw, kb);
    stage_g(ch);
    __syncthreads();
    accumulate(ch, raw, kb);
  }
  __syncthreads();
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

// The grouped launches' reductions, job blockIdx.y: out = the sum of its part (as sum_splits_kernel), or with
// accumulate out += scale * the sum (as lora_da_reduce_kernel).
__global__ void sum_parts_group_kernel(XJobs jobs, int64_t parts, int64_t count, float scale, bool accumulate) {
  const float* part = jobs.job[blockIdx.y].part;
  float* out = jobs.job[blockIdx.y].out;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (accumulate) {
      out[i] += scale * sum_parts_in_order(part + i, parts, count);
    } else {
      out[i] = sum_parts_in_order(part + i, parts, count);
    }
  }
}

// Rows per block of the xa / rank-update passes: a multiple of kTileRows, large enough that the factor's tile, staged
// once per block, is reused over many rows, small enough for ~kTargetBlocks blocks.
int64_t rows_per_block(int64_t n, int64_t k) {
  const int64_t col_tiles = (k + kTileCols - 1) / kTileCols;
  const int64_t row_blocks = kTargetBlocks / col_tiles > 1 ? kTargetBlocks / col_tiles : 1;
  const int64_t rows = (n + row_blocks - 1) / row_blocks;
  const int64_t rounded = (rows + kTileRows - 1) / kTileRows * kTileRows;
  return rounded < kMaxBlockRows ? rounded : kMaxBlockRows;
}

dim3 tile_grid(int64_t n, int64_t k, int64_t rows) {
  return dim3(static_cast<unsigned>((k + kTileCols - 1) / kTileCols), static_cast<unsigned>((n + rows - 1) / rows));
}

bool grid_fits(int64_t n, int64_t k) { return k / kTileCols < (1LL << 31) && n < (1LL << 40); }

}  // namespace

bool lora_fast_shape(int64_t k, int r) { return (r == 8 || r == 16) && k % 8 == 0 && k > 0; }

// The buffer covers both forms: the tensor-core pass's 256-column tiles, the CUDA-core pass's 512.
int64_t lora_xa_splits(int64_t k) { return (k + kDyTileCols - 1) / kDyTileCols; }

namespace {
// Whether the x passes (xa, da) run on tensor cores: r 8, BF16 x, the default work shapes, and with a dropout whole
// Philox blocks per 8 columns (ops/philox.h dropout_whole_blocks; decided by the mask alone, not by whether a pass draws it or reads the keep-bits cache:
// da gives the same bits either way).
bool x_pass_on_tensor_cores(int x_dtype, int r, const LoraKernelConfig& config, bool draws, const DropoutMap& map,
                            int64_t k) {
  return config.tensor_cores && r == 8 && x_dtype == 1 && (!draws || dropout_whole_blocks(map, k));
}
}  // namespace

namespace {

// Non-default work shapes are instantiated for BF16 only (the benchmark's dtype); other types take the default.
template <typename T>
constexpr bool kTunable = std::is_same_v<T, __nv_bfloat16>;

// Launches launch(integral_constant<J>) for the runtime j: the default DJ for every type, the others among {2, 4}
// (and 8 with kMost = 8) for BF16 only; false when j has no instantiation.
template <typename T, int DJ, int kMost, typename Launch>
bool launch_rows_variant(int j, Launch&& launch) {
  if (j == DJ) return launch(std::integral_constant<int, DJ>{}), true;
  if constexpr (kTunable<T>) {
    if (j == 2) return launch(std::integral_constant<int, 2>{}), true;
    if (j == 4) return launch(std::integral_constant<int, 4>{}), true;
    if constexpr (kMost >= 8) {
      if (j == 8) return launch(std::integral_constant<int, 8>{}), true;
    }
  }
  return false;
}

}  // namespace

namespace {
// The tensor-core x pass of a group (x_pass_on_tensor_cores holds): one launch over the jobs' blocks, then one
// launch of their reductions when there are several partials (xa: column tiles; da: row blocks).
template <bool kXa, bool kDraw>
cudaError_t launch_x_mma_group(const void* x, int64_t n, int64_t k, uint32_t threshold, float keep_scale,
                               const DropoutMap& map, const LoraXJob* jobs, int count, float sum_scale,
                               cudaStream_t stream) {
  const int64_t tiles = (k + kDyTileCols - 1) / kDyTileCols, rows = dy_rows_per_block(n, k);
  const int64_t row_blocks = (n + rows - 1) / rows;
  const bool partials = kXa ? tiles > 1 : true;
  XJobs xj{};
  xj.count = count;
  for (int j = 0; j < count; ++j) xj.job[j] = jobs[j];
  const dim3 grid(static_cast<unsigned>(tiles * count), static_cast<unsigned>(row_blocks));
  const cudaError_t status = launch_staged<lora_x_mma_kernel<kXa, kDraw>>(
      grid, stream, static_cast<const __nv_bfloat16*>(x), n, k, rows, threshold, keep_scale, map, xj);
  if (status != cudaSuccess || !partials) return status;
  const int64_t count_each = kXa ? n * 8 : 8 * k;
  const dim3 sum_grid(blocks_for(count_each, 256), static_cast<unsigned>(count));
  sum_parts_group_kernel<<<sum_grid, 256, 0, stream>>>(xj, kXa ? tiles : row_blocks, count_each, sum_scale, !kXa);
  return cudaGetLastError();
}
}  // namespace

cudaError_t launch_lora_xa_group(const void* x, int x_dtype, int64_t n, int64_t k, int r, uint32_t threshold,
                                 float keep_scale, const DropoutMap& map, const LoraXJob* jobs, int count,
                                 cudaStream_t stream, const LoraKernelConfig& config) {
  if (count < 1 || count > kLoraMaxXJobs) return cudaErrorInvalidValue;
  if (n <= 0) return cudaSuccess;
  if (!lora_fast_shape(k, r) || !activation_code(x_dtype) || !grid_fits(n, k)) return cudaErrorInvalidValue;
  if (x_pass_on_tensor_cores(x_dtype, r, config, threshold != 0, map, k) && config.xa_rows == 0) {
    return launch_x_mma_group<true, true>(x, n, k, threshold, keep_scale, map, jobs, count, 1.0f, stream);
  }
  for (int j = 0; j < count; ++j) {  // the CUDA-core kernels: one launch each
    const cudaError_t status = launch_lora_xa(x, x_dtype, jobs[j].f, n, k, r, jobs[j].seed, threshold, keep_scale, map,
                                              jobs[j].part, jobs[j].out, jobs[j].keep_bits, stream, config);
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

cudaError_t launch_lora_xa(const void* x, int x_dtype, const float* a, int64_t n, int64_t k, int r, uint64_t seed,
                           uint32_t threshold, float keep_scale, const DropoutMap& map, float* part, float* xa,
                           uint8_t* keep_bits, cudaStream_t stream, const LoraKernelConfig& config) {
  if (n <= 0) return cudaSuccess;
  if (!lora_fast_shape(k, r) || !activation_code(x_dtype) || !grid_fits(n, k)) return cudaErrorInvalidValue;
  if (x_pass_on_tensor_cores(x_dtype, r, config, threshold != 0, map, k) && config.xa_rows == 0) {
    LoraXJob job;
    job.f = a;
    job.seed = seed;
    job.keep_bits = keep_bits;
    job.part = part;
    job.out = xa;
    return launch_lora_xa_group(x, x_dtype, n, k, r, threshold, keep_scale, map, &job, 1, stream, config);
  }
  const int64_t splits = (k + kTileCols - 1) / kTileCols;
  float* out = splits == 1 ? xa : part;
  const int64_t rows = rows_per_block(n, k);
  const dim3 grid = tile_grid(n, k, rows);
  bool launched = false;
  with_element_type(x_dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const auto go = [&](auto rank) {
      constexpr int R = decltype(rank)::value;
      const int j = config.xa_rows > 0 ? config.xa_rows : kRowsAtOnce<R>;
      launched = launch_rows_variant<T, kRowsAtOnce<R>, 4>(j, [&](auto jc) {
        lora_xa_kernel<R, T, decltype(jc)::value>
            <<<grid, kThreads, 0, stream>>>(x, a, n, k, rows, seed, threshold, keep_scale, map, out, keep_bits);
      });
    };
    r == 8 ? go(std::integral_constant<int, 8>{}) : go(std::integral_constant<int, 16>{});
  });
  if (!launched) return cudaErrorInvalidValue;
  if (splits == 1) return cudaGetLastError();
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  sum_splits_kernel<<<blocks_for(n * r, 256), 256, 0, stream>>>(part, splits, n * r, xa);
  return cudaGetLastError();
}

cudaError_t launch_lora_xa_from_bits(const void* x, int x_dtype, const float* a, int64_t n, int64_t k, int r,
                                     uint64_t seed, uint32_t threshold, float keep_scale, const DropoutMap& map,
                                     float* part, float* xa, const uint8_t* keep_bits, cudaStream_t stream,
                                     const LoraKernelConfig& config) {
  if (n <= 0) return cudaSuccess;
  if (!lora_fast_shape(k, r) || !activation_code(x_dtype) || !grid_fits(n, k)) return cudaErrorInvalidValue;
  if (threshold != 0 && keep_bits != nullptr && x_pass_on_tensor_cores(x_dtype, r, config, true, map, k) &&
      config.xa_rows == 0) {
    LoraXJob job;
    job.f = a;
    job.seed = seed;
    job.keep_bits = const_cast<uint8_t*>(keep_bits);  // read only: the kernel's cache form
    job.part = part;
    job.out = xa;
    return launch_x_mma_group<true, false>(x, n, k, threshold, keep_scale, map, &job, 1, 1.0f, stream);
  }
  return launch_lora_xa(x, x_dtype, a, n, k, r, seed, threshold, keep_scale, map, part, xa, nullptr, stream, config);
}

cudaError_t launch_lora_rank_update(void* y, int y_dtype, const float* g, const float* f, bool f_transposed, int64_t n,
                                    int64_t k, int r, float scale, uint64_t seed, uint32_t threshold, float keep_scale,
                                    const DropoutMap& map, const uint8_t* keep_bits, cudaStream_t stream,
                                    const LoraKernelConfig& config, bool overwrite, const void* residual) {
  if (n <= 0) return cudaSuccess;
  if (!lora_fast_shape(k, r) || !activation_code(y_dtype) || !grid_fits(n, k)) return cudaErrorInvalidValue;
  const int64_t rows = rows_per_block(n, k);
  const dim3 grid = tile_grid(n, k, rows);
  if (residual != nullptr && (overwrite || r != 8 || !f_transposed || config.update_rows != 2)) {
    return cudaErrorInvalidValue;  // the residual form: the B product of r 8 (add_lora_residual), default shape
  }
  if (r == 8 && config.factor_in_registers && config.update_rows == 2 && lora_ring_fits(k, threshold, keep_bits)) {
    return launch_lora_rank_update_ring(y, y_dtype, g, f, f_transposed, n, k, scale, seed, threshold, keep_scale, map,
                                        keep_bits, stream, overwrite, residual);
  }
  bool launched = false;
  with_element_type(y_dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if (residual != nullptr) {
      lora_rank_update_kernel<8, T, true, 2, true><<<grid, kThreads, 0, stream>>>(
          y, g, f, n, k, rows, scale, seed, threshold, keep_scale, map, keep_bits, false, residual);
      launched = true;
      return;
    }
    const auto go = [&](auto rank, auto transposed) {
      constexpr int R = decltype(rank)::value;
      constexpr bool TR = decltype(transposed)::value;
      launched = launch_rows_variant<T, 2, 4>(config.update_rows, [&](auto jc) {
        lora_rank_update_kernel<R, T, TR, decltype(jc)::value>
            <<<grid, kThreads, 0, stream>>>(y, g, f, n, k, rows, scale, seed, threshold, keep_scale, map, keep_bits,
                                            overwrite, nullptr);
      });
    };
    if (r == 8) {
      f_transposed ? go(std::integral_constant<int, 8>{}, std::true_type{})
                   : go(std::integral_constant<int, 8>{}, std::false_type{});
    } else {
      f_transposed ? go(std::integral_constant<int, 16>{}, std::true_type{})
                   : go(std::integral_constant<int, 16>{}, std::false_type{});
    }
  });
  if (!launched) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

namespace {
int64_t da_cuda_core_slices(int64_t n, int64_t k, int r) {
  const int64_t col_blocks = (k + da_tile_cols(r) - 1) / da_tile_cols(r);
  const int64_t want = (kTargetBlocks + col_blocks - 1) / col_blocks;
  const int64_t most = n / 64 > 1 ? n / 64 : 1;  // at least 64 rows per slice
  return want < most ? want : most;
}
int64_t da_mma_row_blocks(int64_t n, int64_t k) {
  const int64_t rows = dy_rows_per_block(n, k);
  return (n + rows - 1) / rows;
}
}  // namespace

// The buffer covers both forms (CUDA-core row slices, tensor-core row blocks).
int64_t lora_da_slices(int64_t n, int64_t k, int r) {
  const int64_t cuda_cores = da_cuda_core_slices(n, k, r), mma = r == 8 ? da_mma_row_blocks(n, k) : 0;
  return cuda_cores > mma ? cuda_cores : mma;
}

cudaError_t launch_lora_da_group(const void* x, int x_dtype, int64_t n, int64_t k, int r, float scale,
                                 uint32_t threshold, float keep_scale, const DropoutMap& map, const LoraXJob* jobs,
                                 int count, cudaStream_t stream, const LoraKernelConfig& config) {
  if (count < 1 || count > kLoraMaxXJobs) return cudaErrorInvalidValue;
  if (n <= 0) return cudaSuccess;
  if (!lora_fast_shape(k, r) || !activation_code(x_dtype)) return cudaErrorInvalidValue;
  if (x_pass_on_tensor_cores(x_dtype, r, config, threshold != 0, map, k) && config.da_rows == 4 && grid_fits(n, k)) {
    bool draws = false, reads = false;  // one kernel form for the group: every job draws, or every job reads bits
    for (int j = 0; j < count; ++j) (threshold != 0 && jobs[j].keep_bits == nullptr ? draws : reads) = true;
    if (!(draws && reads)) {
      const float sum_scale = threshold != 0 ? scale * keep_scale : scale;
      return draws ? launch_x_mma_group<false, true>(x, n, k, threshold, keep_scale, map, jobs, count, sum_scale, stream)
                   : launch_x_mma_group<false, false>(x, n, k, threshold, keep_scale, map, jobs, count, sum_scale,
                                                      stream);
    }
  }
  for (int j = 0; j < count; ++j) {
    const cudaError_t status = launch_lora_da(x, x_dtype, jobs[j].f, n, k, r, scale, jobs[j].seed, threshold, keep_scale,
                                              map, jobs[j].keep_bits, jobs[j].part, jobs[j].out, stream, config);
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

cudaError_t launch_lora_da(const void* x, int x_dtype, const float* g, int64_t n, int64_t k, int r, float scale,
                           uint64_t seed, uint32_t threshold, float keep_scale, const DropoutMap& map,
                           const uint8_t* keep_bits, float* part, float* da, cudaStream_t stream,
                           const LoraKernelConfig& config) {
  if (n <= 0) return cudaSuccess;
  if (!lora_fast_shape(k, r) || !activation_code(x_dtype)) return cudaErrorInvalidValue;
  if (x_pass_on_tensor_cores(x_dtype, r, config, threshold != 0, map, k) &&
      config.da_rows == 4 && grid_fits(n, k)) {
    LoraXJob job;
    job.f = g;
    job.seed = seed;
    job.keep_bits = const_cast<uint8_t*>(keep_bits);  // read only: the da pass never writes it
    job.part = part;
    job.out = da;
    return launch_lora_da_group(x, x_dtype, n, k, r, scale, threshold, keep_scale, map, &job, 1, stream, config);
  }
  const int64_t slices = da_cuda_core_slices(n, k, r);
  const int64_t rows_per_slice = (n + slices - 1) / slices;
  const int tile_cols = da_tile_cols(r);
  const dim3 grid(static_cast<unsigned>((k + tile_cols - 1) / tile_cols), static_cast<unsigned>(slices));
  bool launched = false;
  with_element_type(x_dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const auto go = [&](auto rank) {
      constexpr int R = decltype(rank)::value;
      launched = launch_rows_variant<T, 4, 8>(config.da_rows, [&](auto jc) {
        lora_da_kernel<R, T, decltype(jc)::value><<<grid, kThreads, 0, stream>>>(x, g, n, k, rows_per_slice, seed,
                                                                               threshold, keep_scale, map, keep_bits,
                                                                               part);
      });
    };
    r == 8 ? go(std::integral_constant<int, 8>{}) : go(std::integral_constant<int, 16>{});
  });
  if (!launched) return cudaErrorInvalidValue;
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  lora_da_reduce_kernel<<<blocks_for(r * k, 256), 256, 0, stream>>>(part, slices, r * k, scale, da);
  return cudaGetLastError();
}

cudaError_t launch_lora_swiglu(void* gate, void* up, int dtype, const float* xg, const float* bg, const float* xu,
                               const float* bu, int64_t n, int64_t k, int r, float scale, void* out,
                               cudaStream_t stream, bool factor_in_registers) {
  if (n <= 0) return cudaSuccess;
  if (r != 8 || !lora_fast_shape(k, r) || !activation_code(dtype) || !grid_fits(n, k)) return cudaErrorInvalidValue;
  if (factor_in_registers) return launch_lora_swiglu_ring(gate, up, dtype, xg, bg, xu, bu, n, k, scale, out, stream);
  const int64_t rows = rows_per_block(n, k) < kSwigluMaxBlockRows ? rows_per_block(n, k) : kSwigluMaxBlockRows;
  const dim3 grid = tile_grid(n, k, rows);
  with_element_type(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    lora_swiglu_kernel<8, T, 2><<<grid, kThreads, 0, stream>>>(gate, up, xg, bg, xu, bu, n, k, rows, scale, out);
  });
  return cudaGetLastError();
}

}  // namespace swift::ops::cuda
