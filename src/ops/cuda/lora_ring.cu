// ops/cuda/lora_ring.cu — the r 8 rank-term passes of a LoRA linear with each lane's factor columns in registers
// and the rows streamed through a per-warp cp.async ring:
//   y = (y | 0 | y + residual) + scale * mult * (g F)   (the B product, add_lora_residual's form, the dx term)
//   gate += scale xg bg^T, up += scale xu bu^T, out = swiglu(gate, up)   (the MLP's folded B products)
//   y += scale * mult_j * (g_j F_j), j = 0 .. J - 1, each rounded   (the dx terms of 2 or 3 linears over one x)
//   d = dact + scale * mult * (g a), rounded; dgate, dup = swiglu backward at d   (the MLP's down, into the swiglu's)
// lora.cu's shared-memory forms (lora_rank_update_kernel, lora_swiglu_kernel) read each element's 8 factor values
// from shared memory: L1 ran at 90% while DRAM ran at 43-50% (docs/PERFORMANCE.md run 18, call 12). With the factor
// in registers but each warp's rows loaded into registers a group at a time, the kernels waited on every group's
// latency instead (run 19 call 1: dx term 20.8 vs 16.5 ms); the ring keeps 3 items in flight per warp.
//
// Invariants:
//  - Per element the arithmetic is the shared-memory forms' (t = sum over rr in order from 0 of g[rr] F[rr][c], the
//    multiplier applied to t, then (y [+ residual]) + scale * t, rounded once; swiglu on the rounded gate and up):
//    the same bits (GPU test LoraFactorInRegistersIsTheSharedMemoryForm).
//  - r 8, k % 8 == 0 (a lane's 4 columns are all inside or all outside), 16-byte aligned operands; with cached keep
//    bits k % 32 == 0 (a row's 16 cache bytes of a block copy as 4-byte pieces). The launchers in lora.cu check.
//  - Each lane reads back only what it copied, except g's rows and the keep bits, which a __syncwarp after the wait
//    publishes; a buffer is refilled only after every lane passed the next item's __syncwarp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/func_attribute.cuh"
#include "ops/cuda/kernels_lora.cuh"
#include "ops/cuda/lora_common.cuh"
#include "ops/cuda/swiglu_math.cuh"
#include "ops/philox.h"

namespace swift::ops::cuda::lora_detail {

namespace {

constexpr int kRowCols = 4;                   // columns per lane
constexpr int kRowBlockCols = 32 * kRowCols;  // 128 columns per block

template <typename T>
using Raw4 = std::conditional_t<kHalfWidth<T>, uint2, uint4>;

template <typename T>
__device__ __forceinline__ void raw4_to_float(const Raw4<T>& w, float (&v)[4]) {
  if constexpr (kHalfWidth<T>) {
    pair_to_float2<T>(w.x, v[0], v[1]);
    pair_to_float2<T>(w.y, v[2], v[3]);
  } else {
    v[0] = __uint_as_float(w.x); v[1] = __uint_as_float(w.y); v[2] = __uint_as_float(w.z); v[3] = __uint_as_float(w.w);
  }
}

template <typename T>
__device__ __forceinline__ void store4(void* p, int64_t e, const float (&v)[4]) {
  if constexpr (kHalfWidth<T>) {
    // One 8-byte store (through a uint2 lvalue nvcc issued two 4-byte ones).
    asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(static_cast<T*>(p) + e), "r"(float2_to_pair<T>(v[0], v[1])),
                 "r"(float2_to_pair<T>(v[2], v[3])));
  } else {
    *reinterpret_cast<float4*>(static_cast<float*>(p) + e) = make_float4(v[0], v[1], v[2], v[3]);
  }
}

// The factor's 8 x 4 values of columns col .. col + 3 (zeros past k): F = f (8, k), or f stored (k, 8) when
// kTransposed (LoRA's b).
template <bool kTransposed>
__device__ __forceinline__ void factor_columns(const float* f, int64_t k, int64_t col, float (&fv)[8][kRowCols]) {
#pragma unroll
  for (int i = 0; i < kRowCols; ++i)
#pragma unroll
    for (int rr = 0; rr < 8; ++rr) fv[rr][i] = 0.0f;
  if (col >= k) return;  // k % 8 == 0: the 4 columns are all in or all out
  if constexpr (kTransposed) {
#pragma unroll
    for (int i = 0; i < kRowCols; ++i) {
      const float4 lo = *reinterpret_cast<const float4*>(f + (col + i) * 8);
      const float4 hi = *reinterpret_cast<const float4*>(f + (col + i) * 8 + 4);
      fv[0][i] = lo.x; fv[1][i] = lo.y; fv[2][i] = lo.z; fv[3][i] = lo.w;
      fv[4][i] = hi.x; fv[5][i] = hi.y; fv[6][i] = hi.z; fv[7][i] = hi.w;
    }
  } else {
#pragma unroll
    for (int rr = 0; rr < 8; ++rr) {
      const float4 v = *reinterpret_cast<const float4*>(f + rr * k + col);
      fv[rr][0] = v.x; fv[rr][1] = v.y; fv[rr][2] = v.z; fv[rr][3] = v.w;
    }
  }
}

// t[i] = sum over rr (in order, from 0) of gv[rr] * fv[rr][i]: rank_terms' arithmetic for 4 columns.
__device__ __forceinline__ void rank_terms4(const float (&fv)[8][kRowCols], const float (&gv)[8],
                                            float (&t)[kRowCols]) {
#pragma unroll
  for (int i = 0; i < kRowCols; ++i) t[i] = 0.0f;
#pragma unroll
  for (int rr = 0; rr < 8; ++rr) {
#pragma unroll
    for (int i = 0; i < kRowCols; ++i) t[i] += gv[rr] * fv[rr][i];
  }
}

// The rows of a rank-term pass stream through a per-warp ring of shared-memory buffers filled by cp.async
// (kRingStages buffers, kRingStages - 1 items in flight while one is computed): the 7B's shapes need ~40 KB in
// flight per SM, and loads issued from registers a group at a time (8 rows of 8 bytes per lane) left the kernels
// waiting on each group's latency (docs/PERFORMANCE.md run 19). An item is kRows rows of the warp's 128 columns: of
// each streamed operand (y, the residual; gate and up) the lane's own 4 columns (it copies and reads only its own),
// the rows of g (16-byte pieces, from lane 0 up) and the rows' 16 bytes of the keep-bits cache (4-byte pieces, from
// lane 31 down; the launcher requires k % 32 == 0). Items past the end commit empty groups.
template <int Rows, int Stages, int MinBlocks = 2>
struct RingShape {
  static constexpr int kRows = Rows;                 // rows per item
  static constexpr int kStages = Stages;             // buffers per warp
  static constexpr int kMinBlocks = MinBlocks;       // blocks per SM the registers are limited for
  static constexpr int kItemRows = kWarps * Rows;    // a block's rows are a multiple
};
// Measured at the 7B's shapes (bench_lora, docs/PERFORMANCE.md run 19): the rank update at 4 rows x 4 buffers and 3
// blocks per SM (80 registers), the swiglu (two operands: 74 KB of ring per block) at 2 blocks per SM (3 blocks, 3
// buffers and 80 registers spill 220 bytes: the 7B step 1.7% slower).
using RankRing = RingShape<4, 4, 3>;
using SwigluRing = RingShape<4, 4, 2>;
// The grouped dx terms (2 or 3 factors' columns in registers: up to 96 floats) at 2 blocks per SM.
using RankGroupRing = RingShape<4, 4, 2>;
// The dx term taken into the swiglu's backward (three streamed operands: 102 KB of ring per 16-bit block) at 2.
using SwigluBackwardRing = RingShape<4, 4, 2>;
constexpr int kRingBlockRows = 256;                  // rows per block: 8 items per warp

template <typename T, int kY, int kG, int kRows, int kB = 1>
struct RingStage {
  static constexpr int kBytes = kRowCols * static_cast<int>(sizeof(T));  // a lane's 4 columns of a row
  uint8_t y[kY][kRows][32][kBytes];  // streamed operand s, row j, lane
  float g[kG][kRows][8];             // rows of g (of xg, xu; of each grouped job's g)
  uint8_t bits[kB][kRows][16];       // the rows' keep-bits bytes of the block's 128 columns (per grouped job)
};

template <int N>
__device__ __forceinline__ void cp_async_n(uint32_t smem, const void* gmem, bool valid) {
  if constexpr (N == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(valid ? 16 : 0));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem), "l"(gmem), "n"(N),
                 "r"(valid ? N : 0));
  }
}

// The warp's stream of items in its block (rows_per_block rows from block_row0, columns c0 .. c0 + 127): item i
// covers rows first_row + i kRingItemRows + j (j < kRingRows). ys[s] == nullptr: operand s is not read (its buffer
// is left as it is; the caller uses zeros). bits_src[0] == nullptr: no keep bits; else kB caches, one per g.
template <typename T, int kY, int kG, typename S, int kB = 1>
struct RowRing {
  static constexpr int kRingRows = S::kRows, kRingStages = S::kStages, kRingItemRows = S::kItemRows;
  static_assert(kG <= 3 && kB <= 3, "at most 3 streamed g operands and keep-bits caches");
  using Stage = RingStage<T, kY, kG, kRingRows, kB>;
  Stage* stages;
  const T* ys[kY];
  const float* gs[kG];
  const uint8_t* bits[kB];
  int64_t n, k, first_row, col;
  int items, lane;

  __device__ __forceinline__ RowRing(uint4* smem, const void* const* y_src, const float* const* g_src,
                                     const uint8_t* const* bits_src, int64_t n_, int64_t k_, int64_t rows_per_block)
      : n(n_), k(k_) {
    const int warp = threadIdx.x / 32;
    lane = threadIdx.x % 32;
    stages = reinterpret_cast<Stage*>(smem) + warp * kRingStages;
#pragma unroll
    for (int s = 0; s < kY; ++s) ys[s] = static_cast<const T*>(y_src[s]);
#pragma unroll
    for (int s = 0; s < kG; ++s) gs[s] = g_src[s];
#pragma unroll
    for (int b = 0; b < kB; ++b) bits[b] = bits_src[b];
    col = static_cast<int64_t>(blockIdx.x) * kRowBlockCols + lane * kRowCols;
    const int64_t block_row0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
    const int64_t block_row1 = block_row0 + rows_per_block < n ? block_row0 + rows_per_block : n;
    first_row = block_row0 + warp * kRingRows;
    items = first_row < block_row1 ? static_cast<int>((block_row1 - first_row + kRingItemRows - 1) / kRingItemRows)
                                   : 0;
  }
  __device__ __forceinline__ int64_t row0(int item) const {
    return first_row + static_cast<int64_t>(item) * kRingItemRows;
  }
  __device__ __forceinline__ void issue(int item) const {
    if (item < items) {
      const int64_t r0 = row0(item);
      Stage& st = stages[item % kRingStages];
#pragma unroll
      for (int s = 0; s < kY; ++s) {
        if (ys[s] == nullptr) continue;
#pragma unroll
        for (int j = 0; j < kRingRows; ++j) {
          const bool inside = col < k && r0 + j < n;
          cp_async_n<Stage::kBytes>(attn::smem_addr(&st.y[s][j][lane][0]), ys[s] + (inside ? (r0 + j) * k + col : 0),
                                    inside);
        }
      }
#pragma unroll
      for (int p0 = 0; p0 < 2 * kG * kRingRows; p0 += 32) {  // g's rows: piece p = half p % 2 of row (p / 2) % rows
        const int p = p0 + lane, s = p / (2 * kRingRows), j = (p / 2) % kRingRows, half = p % 2;
        if (p >= 2 * kG * kRingRows) break;
        // No dynamic index: the ring stays in registers.
        const float* src = s == 0 ? gs[0] : (s == 1 ? gs[kG > 1 ? 1 : 0] : gs[kG - 1]);
        const bool inside = r0 + j < n;
        cp_async_n<16>(attn::smem_addr(&st.g[s][j][4 * half]), src + (inside ? (r0 + j) * 8 + 4 * half : 0), inside);
      }
      // 4 bytes (32 columns) of a row's 16 per piece q = 4 (rows b + j) + piece, from the last lane down.
#pragma unroll
      for (int q0 = 0; q0 < 4 * kRingRows * kB; q0 += 32) {
        const int q = q0 + 31 - lane;
        if (bits[0] == nullptr || q >= 4 * kRingRows * kB) break;
        const int b = q / (4 * kRingRows), j = (q / 4) % kRingRows, piece = q % 4;
        const uint8_t* src = b == 0 ? bits[0] : (b == 1 ? bits[kB > 1 ? 1 : 0] : bits[kB - 1]);
        const int64_t c0 = col - lane * kRowCols;
        const bool inside = r0 + j < n && c0 + 32 * piece < k;
        cp_async_n<4>(attn::smem_addr(&st.bits[b][j][4 * piece]),
                      src + (inside ? (r0 + j) * (k / 8) + c0 / 8 + 4 * piece : 0), inside);
      }
    }
    attn::cp_async_commit();
  }
  __device__ __forceinline__ void start() const {
#pragma unroll
    for (int i = 0; i < kRingStages - 1; ++i) issue(i);
  }
  // Item `item` landed and visible to the warp; its buffer's predecessor reused for item + kRingStages - 1.
  __device__ __forceinline__ const Stage& next(int item) const {
    attn::cp_async_wait<kRingStages - 2>();
    __syncwarp();
    issue(item + kRingStages - 1);
    return stages[item % kRingStages];
  }
  __device__ __forceinline__ Raw4<T> y_raw(const Stage& st, int s, int j) const {
    return *reinterpret_cast<const Raw4<T>*>(&st.y[s][j][lane][0]);
  }
  __device__ __forceinline__ void g_row(const Stage& st, int s, int j, float (&gv)[8]) const {
    const float4 lo = *reinterpret_cast<const float4*>(&st.g[s][j][0]);
    const float4 hi = *reinterpret_cast<const float4*>(&st.g[s][j][4]);
    gv[0] = lo.x; gv[1] = lo.y; gv[2] = lo.z; gv[3] = lo.w; gv[4] = hi.x; gv[5] = hi.y; gv[6] = hi.z; gv[7] = hi.w;
  }
  __device__ __forceinline__ uint32_t keep_bits4(const Stage& st, int j, int b = 0) const {
    return (static_cast<uint32_t>(st.bits[b][j][lane / 2]) >> (4 * (lane % 2))) & 0xFu;
  }
};

template <typename T, int kY, int kG, typename S, int kB = 1>
constexpr int kRingBytes = kWarps * S::kStages * static_cast<int>(sizeof(RingStage<T, kY, kG, S::kRows, kB>));

// The multiplier of the rank term: none (no dropout), from the keep-bits cache, or drawn (Philox; mapped blocks too).
enum RingMask : int { kNoMask = 0, kCachedMask = 1, kDrawnMask = 2 };

// y (n, k) += scale * mult * (g F) (overwrite: y = 0 + ..., y not read; kResidual: y = (y + residual) + ...), r 8.
// Blocks of kRowBlockCols columns x rows_per_block rows (a multiple of kItemRows); the lane's factor columns in
// registers, its rows through the ring. kMask is a template parameter so that the drawn form's Philox code stays out
// of the other two (registers, and 80 of them at 3 blocks per SM).
template <typename T, bool kTransposed, bool kResidual, int kMask, typename S>
__global__ void __launch_bounds__(kThreads, S::kMinBlocks)
    lora_rank_ring_kernel(void* y, const float* g, const float* f, int64_t n, int64_t k, int64_t rows_per_block,
                          float scale, uint64_t seed, uint32_t threshold, float keep_scale, DropoutMap map,
                          const uint8_t* keep_bits, bool overwrite, const void* residual) {
  extern __shared__ __align__(16) uint4 ring_smem[];
  constexpr int kY = kResidual ? 2 : 1;
  const void* srcs[kY];
  srcs[0] = overwrite ? nullptr : y;
  if constexpr (kResidual) srcs[1] = residual;
  const float* const g_src[1] = {g};
  const uint8_t* const bits_src[1] = {kMask == kCachedMask ? keep_bits : nullptr};
  const RowRing<T, kY, 1, S> ring(ring_smem, srcs, g_src, bits_src, n, k, rows_per_block);
  ring.start();  // in flight while the factor's columns are loaded
  const int64_t col = ring.col;
  const bool col_inside = col < k;
  float fv[8][kRowCols];
  factor_columns<kTransposed>(f, k, col, fv);
  for (int item = 0; item < ring.items; ++item) {
    const auto& st = ring.next(item);
    const int64_t r0 = ring.row0(item);
    if (!col_inside) continue;
    const int rows = n - r0 < S::kRows ? static_cast<int>(n - r0) : S::kRows;  // >= 1
    T* out = static_cast<T*>(y) + r0 * k + col;
#pragma unroll
    for (int j = 0; j < S::kRows; ++j, out += k) {
      if (j >= rows) break;
      float gv[8], t[kRowCols];
      ring.g_row(st, 0, j, gv);
      rank_terms4(fv, gv, t);
      if constexpr (kMask == kCachedMask) apply_keep_bits<kRowCols>(t, ring.keep_bits4(st, j), keep_scale);
      if constexpr (kMask == kDrawnMask) {
        apply_keep_bits<kRowCols>(t, dropout_keep_bits<kRowCols>(seed, map, r0 + j, col, k, threshold), keep_scale);
      }
      float v[kRowCols] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (!overwrite) raw4_to_float<T>(ring.y_raw(st, 0, j), v);
      if constexpr (kResidual) {  // y + residual first (add_lora_residual), then the rank term
        float rv[kRowCols];
        raw4_to_float<T>(ring.y_raw(st, 1, j), rv);
#pragma unroll
        for (int i = 0; i < kRowCols; ++i) v[i] = v[i] + rv[i];
      }
#pragma unroll
      for (int i = 0; i < kRowCols; ++i) v[i] = v[i] + scale * t[i];
      store4<T>(out, 0, v);
    }
  }
}

// The dx terms of J linears over one x in one pass: y += scale * mult_j * (g_j F_j) for j = 0 .. J - 1 in order (F_j
// = f_j as (8, k)), each sum rounded to T as lora_rank_ring_kernel rounds it: the bits of J of its launches in order.
// kMask: kNoMask or kCachedMask (a keep-bits cache per job). The J factors' columns in registers (32 J floats).
template <int J>
struct RankGroupJobs {
  const float* g[J];
  const float* f[J];
  const uint8_t* bits[J];
};
template <typename T, int J, int kMask, typename S>
__global__ void __launch_bounds__(kThreads, S::kMinBlocks)
    lora_rank_group_ring_kernel(void* y, RankGroupJobs<J> jobs, int64_t n, int64_t k, int64_t rows_per_block,
                                float scale, float keep_scale) {
  extern __shared__ __align__(16) uint4 ring_smem[];
  const void* const srcs[1] = {y};
  const uint8_t* bits_src[J];
#pragma unroll
  for (int j = 0; j < J; ++j) bits_src[j] = kMask == kCachedMask ? jobs.bits[j] : nullptr;
  const RowRing<T, 1, J, S, J> ring(ring_smem, srcs, jobs.g, bits_src, n, k, rows_per_block);
  ring.start();
  const int64_t col = ring.col;
  const bool col_inside = col < k;
  float fv[J][8][kRowCols];
#pragma unroll
  for (int j = 0; j < J; ++j) factor_columns<false>(jobs.f[j], k, col, fv[j]);
  for (int item = 0; item < ring.items; ++item) {
    const auto& st = ring.next(item);
    const int64_t r0 = ring.row0(item);
    if (!col_inside) continue;
    const int rows = n - r0 < S::kRows ? static_cast<int>(n - r0) : S::kRows;  // >= 1
    T* out = static_cast<T*>(y) + r0 * k + col;
#pragma unroll
    for (int row = 0; row < S::kRows; ++row, out += k) {
      if (row >= rows) break;
      float v[kRowCols];
      raw4_to_float<T>(ring.y_raw(st, 0, row), v);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        float gv[8], t[kRowCols];
        ring.g_row(st, j, row, gv);
        rank_terms4(fv[j], gv, t);
        if constexpr (kMask == kCachedMask) apply_keep_bits<kRowCols>(t, ring.keep_bits4(st, row, j), keep_scale);
#pragma unroll
        for (int i = 0; i < kRowCols; ++i) v[i] = v[i] + scale * t[i];
        if constexpr (kHalfWidth<T>) {
          if (j + 1 < J) {  // rounded as the single pass stores it, read back as the next one loads it
            Raw4<T> w;
            w.x = float2_to_pair<T>(v[0], v[1]);
            w.y = float2_to_pair<T>(v[2], v[3]);
            raw4_to_float<T>(w, v);
          }
        }
      }
      store4<T>(out, 0, v);
    }
  }
}

// lora_swiglu_kernel's pass (the same arguments and bits) with both factors in registers and gate, up, xg, xu
// through the ring.
template <typename T, typename S>
__global__ void __launch_bounds__(kThreads, S::kMinBlocks)
    lora_swiglu_ring_kernel(void* gate, void* up, const float* xg, const float* bg, const float* xu, const float* bu,
                            int64_t n, int64_t k, int64_t rows_per_block, float scale, void* out) {
  extern __shared__ __align__(16) uint4 ring_smem[];
  const void* const srcs[2] = {gate, up};
  const float* const g_src[2] = {xg, xu};
  const uint8_t* const no_bits[1] = {nullptr};
  const RowRing<T, 2, 2, S> ring(ring_smem, srcs, g_src, no_bits, n, k, rows_per_block);
  ring.start();
  const int64_t col = ring.col;
  float fg[8][kRowCols], fu[8][kRowCols];
  factor_columns<true>(bg, k, col, fg);
  factor_columns<true>(bu, k, col, fu);
  const bool col_inside = col < k;
  for (int item = 0; item < ring.items; ++item) {
    const auto& st = ring.next(item);
    const int64_t r0 = ring.row0(item);
    if (!col_inside) continue;
    const int rows = n - r0 < S::kRows ? static_cast<int>(n - r0) : S::kRows;  // >= 1
    int64_t e = r0 * k + col;
#pragma unroll
    for (int j = 0; j < S::kRows; ++j, e += k) {
      if (j >= rows) break;
      float gvg[8], gvu[8], tg[kRowCols], tu[kRowCols], gv[kRowCols], uv[kRowCols], o[kRowCols];
      ring.g_row(st, 0, j, gvg);
      ring.g_row(st, 1, j, gvu);
      rank_terms4(fg, gvg, tg);
      rank_terms4(fu, gvu, tu);
      raw4_to_float<T>(ring.y_raw(st, 0, j), gv);
      raw4_to_float<T>(ring.y_raw(st, 1, j), uv);
#pragma unroll
      for (int i = 0; i < kRowCols; ++i) {
        gv[i] = gv[i] + scale * tg[i];
        uv[i] = uv[i] + scale * tu[i];
      }
      store4<T>(gate, e, gv);
      store4<T>(up, e, uv);
      if constexpr (kHalfWidth<T>) {  // the values just stored, as the swiglu kernel would load them
        Raw4<T> w;
        w.x = float2_to_pair<T>(gv[0], gv[1]);
        w.y = float2_to_pair<T>(gv[2], gv[3]);
        raw4_to_float<T>(w, gv);
        w.x = float2_to_pair<T>(uv[0], uv[1]);
        w.y = float2_to_pair<T>(uv[2], uv[3]);
        raw4_to_float<T>(w, uv);
      }
#pragma unroll
      for (int i = 0; i < kRowCols; ++i) o[i] = swiglu_value(gv[i], uv[i]);
      store4<T>(out, e, o);
    }
  }
}

// The MLP's down (a LoRA linear over act = swiglu(gate, up)) taken into the swiglu's backward: d = dact + scale * mult
// * (g F) with F = a (8, k), the sum rounded to T as lora_rank_ring_kernel stores dx, then dgate, dup =
// swiglu_grads(d, gate, up) as the swiglu backward's map kernel computes them from that stored d (elementwise.cu): the
// bits of the dx term's pass and then swiglu_backward, with act's gradient never stored in between. dgate may be dact
// and dup may be up (each element read through the ring before its lane writes it).
template <typename T, int kMask, typename S>
__global__ void __launch_bounds__(kThreads, S::kMinBlocks)
    lora_swiglu_backward_ring_kernel(const void* dact, const void* gate, const void* up, const float* g,
                                     const float* f, int64_t n, int64_t k, int64_t rows_per_block, float scale,
                                     uint64_t seed, uint32_t threshold, float keep_scale, DropoutMap map,
                                     const uint8_t* keep_bits, void* dgate, void* dup) {
  extern __shared__ __align__(16) uint4 ring_smem[];
  const void* const srcs[3] = {dact, gate, up};
  const float* const g_src[1] = {g};
  const uint8_t* const bits_src[1] = {kMask == kCachedMask ? keep_bits : nullptr};
  const RowRing<T, 3, 1, S> ring(ring_smem, srcs, g_src, bits_src, n, k, rows_per_block);
  ring.start();
  const int64_t col = ring.col;
  const bool col_inside = col < k;
  float fv[8][kRowCols];
  factor_columns<false>(f, k, col, fv);
  for (int item = 0; item < ring.items; ++item) {
    const auto& st = ring.next(item);
    const int64_t r0 = ring.row0(item);
    if (!col_inside) continue;
    const int rows = n - r0 < S::kRows ? static_cast<int>(n - r0) : S::kRows;  // >= 1
    int64_t e = r0 * k + col;
#pragma unroll
    for (int j = 0; j < S::kRows; ++j, e += k) {
      if (j >= rows) break;
      float gv[8], t[kRowCols], d[kRowCols], gt[kRowCols], ut[kRowCols], dg[kRowCols], du[kRowCols];
      ring.g_row(st, 0, j, gv);
      rank_terms4(fv, gv, t);
      if constexpr (kMask == kCachedMask) apply_keep_bits<kRowCols>(t, ring.keep_bits4(st, j), keep_scale);
      if constexpr (kMask == kDrawnMask) {
        apply_keep_bits<kRowCols>(t, dropout_keep_bits<kRowCols>(seed, map, r0 + j, col, k, threshold), keep_scale);
      }
      raw4_to_float<T>(ring.y_raw(st, 0, j), d);
#pragma unroll
      for (int i = 0; i < kRowCols; ++i) d[i] = d[i] + scale * t[i];
      if constexpr (kHalfWidth<T>) {  // act's gradient as the dx term's pass stores it and the swiglu backward loads it
        Raw4<T> w;
        w.x = float2_to_pair<T>(d[0], d[1]);
        w.y = float2_to_pair<T>(d[2], d[3]);
        raw4_to_float<T>(w, d);
      }
      raw4_to_float<T>(ring.y_raw(st, 1, j), gt);
      raw4_to_float<T>(ring.y_raw(st, 2, j), ut);
#pragma unroll
      for (int i = 0; i < kRowCols; ++i) swiglu_grads(d[i], gt[i], ut[i], dg[i], du[i]);
      store4<T>(dgate, e, dg);
      store4<T>(dup, e, du);
    }
  }
}

// Launches a rank-term pass with its ring (bytes of dynamic shared memory).
template <auto Kernel, typename... Args>
cudaError_t launch_ring(dim3 grid, int bytes, cudaStream_t stream, Args... args) {
  const cudaError_t status = set_func_attribute_once<Kernel>(cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (status != cudaSuccess) return status;
  Kernel<<<grid, kThreads, bytes, stream>>>(args...);
  return cudaGetLastError();
}


// Rows per block and grid of the ring passes.
dim3 ring_grid(int64_t n, int64_t k) {
  return dim3(static_cast<unsigned>((k + kRowBlockCols - 1) / kRowBlockCols),
              static_cast<unsigned>((n + kRingBlockRows - 1) / kRingBlockRows));
}

}  // namespace

bool lora_ring_fits(int64_t k, uint32_t threshold, const uint8_t* keep_bits) {
  return k % 8 == 0 && k > 0 && k / kRowBlockCols < (1LL << 31) && (threshold == 0 || keep_bits == nullptr || k % 32 == 0);
}

cudaError_t launch_lora_rank_update_ring(void* y, int y_dtype, const float* g, const float* f, bool f_transposed,
                                         int64_t n, int64_t k, float scale, uint64_t seed, uint32_t threshold,
                                         float keep_scale, const DropoutMap& map, const uint8_t* keep_bits,
                                         cudaStream_t stream, bool overwrite, const void* residual) {
  if (n <= 0) return cudaSuccess;
  if (!activation_code(y_dtype) || !lora_ring_fits(k, threshold, keep_bits) || n >= (1LL << 40)) {
    return cudaErrorInvalidValue;
  }
  cudaError_t status = cudaSuccess;
  with_element_type(y_dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const auto go = [&](auto transposed, auto with_residual) {
      constexpr bool kT = decltype(transposed)::value, kR = decltype(with_residual)::value;
      const auto launch = [&](auto mask) {
        status = launch_ring<lora_rank_ring_kernel<T, kT, kR, decltype(mask)::value, RankRing>>(
            ring_grid(n, k), kRingBytes<T, kR ? 2 : 1, 1, RankRing>, stream, y, g, f, n, k,
            static_cast<int64_t>(kRingBlockRows), scale, seed, threshold, keep_scale, map, keep_bits, overwrite,
            residual);
      };
      if (threshold == 0) return launch(std::integral_constant<int, kNoMask>{});
      keep_bits != nullptr ? launch(std::integral_constant<int, kCachedMask>{})
                           : launch(std::integral_constant<int, kDrawnMask>{});
    };
    if (residual != nullptr) return go(std::true_type{}, std::true_type{});
    f_transposed ? go(std::true_type{}, std::false_type{}) : go(std::false_type{}, std::false_type{});
  });
  return status;
}

cudaError_t launch_lora_swiglu_ring(void* gate, void* up, int dtype, const float* xg, const float* bg, const float* xu,
                                    const float* bu, int64_t n, int64_t k, float scale, void* out,
                                    cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!activation_code(dtype) || !lora_ring_fits(k, 0, nullptr) || n >= (1LL << 40)) return cudaErrorInvalidValue;
  cudaError_t status = cudaSuccess;
  with_element_type(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    status = launch_ring<lora_swiglu_ring_kernel<T, SwigluRing>>(ring_grid(n, k), kRingBytes<T, 2, 2, SwigluRing>,
                                                                 stream, gate, up, xg, bg, xu, bu, n, k,
                                                                 static_cast<int64_t>(kRingBlockRows), scale, out);
  });
  return status;
}

}  // namespace swift::ops::cuda::lora_detail

// kernels_lora.cuh's grouped dx terms and the down's term in the swiglu backward, on the ring's launcher.
namespace swift::ops::cuda {

using namespace lora_detail;

bool lora_rank_update_group_fits(int64_t k, int count, uint32_t threshold, const uint8_t* const* keep_bits) {
  if (count < 2 || count > 3 || !lora_ring_fits(k, 0, nullptr)) return false;
  if (threshold == 0) return true;
  for (int j = 0; j < count; ++j) {
    if (keep_bits[j] == nullptr || !lora_ring_fits(k, threshold, keep_bits[j])) return false;
  }
  return true;
}

cudaError_t launch_lora_rank_update_group(void* y, int y_dtype, const float* const* g, const float* const* f,
                                          const uint8_t* const* keep_bits, int count, int64_t n, int64_t k,
                                          float scale, uint32_t threshold, float keep_scale, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!activation_code(y_dtype) || !lora_rank_update_group_fits(k, count, threshold, keep_bits) || n >= (1LL << 40)) {
    return cudaErrorInvalidValue;
  }
  cudaError_t status = cudaSuccess;
  with_element_type(y_dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const auto go = [&](auto jobs_count, auto mask) {
      constexpr int J = decltype(jobs_count)::value, kMask = decltype(mask)::value;
      RankGroupJobs<J> jobs{};
      for (int j = 0; j < J; ++j) {
        jobs.g[j] = g[j];
        jobs.f[j] = f[j];
        jobs.bits[j] = kMask == kCachedMask ? keep_bits[j] : nullptr;
      }
      status = launch_ring<lora_rank_group_ring_kernel<T, J, kMask, RankGroupRing>>(
          ring_grid(n, k), kRingBytes<T, 1, J, RankGroupRing, J>, stream, y, jobs, n, k,
          static_cast<int64_t>(kRingBlockRows), scale, keep_scale);
    };
    const auto with_mask = [&](auto jobs_count) {
      threshold == 0 ? go(jobs_count, std::integral_constant<int, kNoMask>{})
                     : go(jobs_count, std::integral_constant<int, kCachedMask>{});
    };
    count == 2 ? with_mask(std::integral_constant<int, 2>{}) : with_mask(std::integral_constant<int, 3>{});
  });
  return status;
}

bool lora_swiglu_backward_fits(int64_t k, uint32_t threshold, const uint8_t* keep_bits) {
  return lora_ring_fits(k, threshold, keep_bits);
}

cudaError_t launch_lora_swiglu_backward(const void* dact, const void* gate, const void* up, int dtype, const float* g,
                                        const float* a, int64_t n, int64_t k, float scale, uint64_t seed,
                                        uint32_t threshold, float keep_scale, const DropoutMap& map,
                                        const uint8_t* keep_bits, void* dgate, void* dup, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (!activation_code(dtype) || !lora_swiglu_backward_fits(k, threshold, keep_bits) || n >= (1LL << 40)) {
    return cudaErrorInvalidValue;
  }
  cudaError_t status = cudaSuccess;
  with_element_type(dtype, [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const auto launch = [&](auto mask) {
      status = launch_ring<lora_swiglu_backward_ring_kernel<T, decltype(mask)::value, SwigluBackwardRing>>(
          ring_grid(n, k), kRingBytes<T, 3, 1, SwigluBackwardRing>, stream, dact, gate, up, g, a, n, k,
          static_cast<int64_t>(kRingBlockRows), scale, seed, threshold, keep_scale, map, keep_bits, dgate, dup);
    };
    if (threshold == 0) return launch(std::integral_constant<int, kNoMask>{});
    keep_bits != nullptr ? launch(std::integral_constant<int, kCachedMask>{})
                         : launch(std::integral_constant<int, kDrawnMask>{});
  });
  return status;
}

}  // namespace swift::ops::cuda
