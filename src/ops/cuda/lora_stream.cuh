// ops/cuda/lora_stream.cuh — what lora.cu's tensor-core x passes and lora_dy.cu's dy passes share: the 256-column
// tile of 16-row warp steps, the per-warp cp.async stream of 64-column chunks (ChunkStream), the mma.sync helpers, the
// in-order sum of the 8 warps' fragments, and the in-order reductions of partial sums.
//
// Invariants: every summation order here is fixed by the shapes alone (never by timing or the GPU model), so passes
// that use these pieces on the same tiling give the same bits. Only .cu files include this header; its two kernels
// sit in an unnamed namespace (each translation unit has its own copy).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/func_attribute.cuh"
#include "ops/cuda/lora_common.cuh"

namespace swift::ops::cuda::lora_detail {

constexpr int kTargetBlocks = 4 * 132;  // aim for ~4 blocks per SM of an H100/H200 (a constant: see invariants)

// The tensor-core passes' tiling: a block takes a 256-column tile and a range of rows, warp w its 16-row steps w,
// w + 8, ... (rows_per_block a multiple of kDyBlockStep).
constexpr int kDyTileCols = 256;                    // columns per block (16 k-tiles of 16)
constexpr int kDyKTiles = kDyTileCols / 16;
constexpr int kDyChunkCols = 64;                    // columns per staged chunk: 16 rows x 128 bytes
constexpr int kDyChunks = kDyTileCols / kDyChunkCols;
constexpr int kDyPieces = kDyChunkCols / 8;         // 16-byte pieces per chunk row
constexpr int kDyStepRows = 16;                     // rows per warp step
constexpr int kDyBlockStep = kWarps * kDyStepRows;  // 128: rows_per_block is a multiple

// Fragments, ldmatrix and mma.sync m16n8k16 come from attention_common.cuh (the attention kernels' helpers).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) { return attn::pack2<__nv_bfloat16>(lo, hi); }
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  attn::mma_m16n8k16<__nv_bfloat16>(c, a, b0, b1);
}

// Sums the 8 warps' C fragments of a 256-column tile (frag[t]: columns 16 t + gid (+ 8), ranks 2 tid, 2 tid + 1) into
// tile (256 x 8 floats of shared memory, over the staging), warp by warp in order (deterministic). Every thread of
// the block calls it; it synchronises on entry (the staging is free) and on exit (the tile is complete).
// A warp's 16 C fragments of a 256-column tile, zeroed.
__device__ __forceinline__ void zero_fragments(float (&frag)[kDyKTiles][4]) {
#pragma unroll
  for (int t = 0; t < kDyKTiles; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) frag[t][i] = 0.0f;
}

// tile (256 x 8 floats) += one warp's fragments (frag[t]: columns 16 t + gid (+ 8), ranks 2 tid, 2 tid + 1).
__device__ __forceinline__ void add_fragments(float (*tile)[8], const float (&frag)[kDyKTiles][4], int gid, int tid) {
#pragma unroll
  for (int t = 0; t < kDyKTiles; ++t) {
    tile[16 * t + gid][2 * tid] += frag[t][0];
    tile[16 * t + gid][2 * tid + 1] += frag[t][1];
    tile[16 * t + gid + 8][2 * tid] += frag[t][2];
    tile[16 * t + gid + 8][2 * tid + 1] += frag[t][3];
  }
}

__device__ __forceinline__ void sum_warp_fragments(float (*tile)[8], const float (&frag)[kDyKTiles][4], int warp,
                                                   int gid, int tid) {
  __syncthreads();
  for (int i = threadIdx.x; i < kDyTileCols * 8; i += kThreads) (&tile[0][0])[i] = 0.0f;
  for (int w = 0; w < kWarps; ++w) {
    __syncthreads();
    if (warp == w) add_fragments(tile, frag, gid, tid);
  }
  __syncthreads();
}

// ---- the staging of the tensor-core passes (xa, da, the dy pass): cp.async, several chunks in flight per warp ----
// Each warp copies its chunks into 4 staging buffers of its own with cp.async, 3 chunks in flight while it computes
// one; 2 blocks per SM (3 blocks of the same grids run one and a half waves: slower). The earlier form kept one chunk
// ahead in registers and ran at ~1 TB/s, waiting on each load's latency (docs/PERFORMANCE.md, run 13 call 5 and
// run 18).
using StreamStage = uint4[kDyStepRows][kDyPieces];  // one chunk: 2 KB
constexpr int kStages = 4;                          // buffers per warp
constexpr int kStagingBytes = kWarps * kStages * static_cast<int>(sizeof(StreamStage));  // 64 KB per block

// The warp's work in its block and its stream of chunks. The block takes column tile col_tile (kDyTileCols wide from
// c0) and row block blockIdx.y (rows_per_block rows), warp w its 16-row steps w, w + 8, ... (`steps` of them, from
// first_row). Item = step * kDyChunks + chunk covers the step's rows and columns c0 + chunk * kDyChunkCols (64) of
// src (n, m). Piece p = lane + 32 i (i < 4) of a chunk, its row p / 8 = lane / 8 + 4 i and 16-byte piece
// p % 8 = lane % 8, is copied by this lane into the chunk's buffer (item % kStages), XOR-swizzled by row (ldmatrix's 8
// row addresses fall in distinct banks); pieces outside (n, m) are zero-filled. issue(item) commits a group (an empty
// one past the end, so that the count stays uniform); wait() returns once the oldest in-flight item has landed
// (visible to the lane that copied it; a __syncwarp makes it the warp's). The lane's addresses are set up once (its
// rows are 4 apart; its pieces' offsets in a buffer take two swizzles, rows r and r + 4).
struct ChunkStream {
  int64_t c0, first_row;
  int steps, items;
  StreamStage* stage;  // the warp's kStages buffers
  const __nv_bfloat16* lane_src;  // src at the lane's first row and column
  int64_t lane_offset;            // lane_src - src (elements)
  int64_t m, rows_left, cols_left;  // rows and columns of src from the lane's first ones (may be <= 0)
  uint32_t smem0, smem1;  // shared address of pieces 0 and 1 in buffer 0 (pieces 2, 3: + 1024)

  // smem: the block's dynamic shared memory (kStagingBytes). warp: the warp's place among the block's 8 (its 16-row
  // steps and buffers), by default its index.
  __device__ __forceinline__ ChunkStream(uint4* smem, const __nv_bfloat16* src, int64_t n, int64_t m_,
                                         int64_t rows_per_block, int64_t col_tile, int warp = -1)
      : m(m_) {
    const int lane = threadIdx.x % 32;
    if (warp < 0) warp = threadIdx.x / 32;
    c0 = col_tile * kDyTileCols;
    const int64_t block_row0 = static_cast<int64_t>(blockIdx.y) * rows_per_block;
    const int64_t block_row1 = block_row0 + rows_per_block < n ? block_row0 + rows_per_block : n;
    first_row = block_row0 + warp * kDyStepRows;
    steps = first_row < block_row1 ? static_cast<int>((block_row1 - first_row + kDyBlockStep - 1) / kDyBlockStep) : 0;
    items = steps * kDyChunks;
    stage = reinterpret_cast<StreamStage*>(smem) + warp * kStages;
    const int r = lane / 8, piece = lane % 8;
    lane_offset = (first_row + r) * m + c0 + 8 * piece;
    lane_src = src + lane_offset;
    rows_left = n - first_row - r;
    cols_left = m - c0 - 8 * piece;
    const uint32_t base = attn::smem_addr(stage);
    smem0 = base + static_cast<uint32_t>((r * kDyPieces + (piece ^ r)) * 16);
    smem1 = base + static_cast<uint32_t>(((r + 4) * kDyPieces + (piece ^ (r + 4))) * 16);
  }
  // Rows of the lane's piece 0 left at `item` (piece i is inside when 4 i < this and the columns are).
  __device__ __forceinline__ int64_t rows_at(int item) const {
    return rows_left - static_cast<int64_t>(item / kDyChunks) * kDyBlockStep;
  }
  __device__ __forceinline__ bool cols_at(int item) const { return (item % kDyChunks) * kDyChunkCols < cols_left; }
  // Byte offset of piece i of this lane from buffer 0's piece 0 / 1 (see smem0, smem1).
  __device__ __forceinline__ uint32_t piece_smem(int item_buffer, int i) const {
    return (i % 2 == 0 ? smem0 : smem1) + (i / 2) * 1024 + item_buffer * static_cast<uint32_t>(sizeof(StreamStage));
  }
  // Whether the lane's piece i of `item` lies inside src, and its element offset from src's start.
  __device__ __forceinline__ bool piece_inside(int item, int i) const { return cols_at(item) && 4 * i < rows_at(item); }
  __device__ __forceinline__ int64_t piece_offset(int item, int i) const {
    return lane_offset + static_cast<int64_t>(item / kDyChunks) * kDyBlockStep * m + (item % kDyChunks) * kDyChunkCols +
           4 * i * m;
  }
  // The copies of `item` (none past the end) without a commit: several streams of one warp copy, then commit once.
  __device__ __forceinline__ void copy(int item) const {
    if (item < items) {
      const __nv_bfloat16* from =
          lane_src + static_cast<int64_t>(item / kDyChunks) * kDyBlockStep * m + (item % kDyChunks) * kDyChunkCols;
      const int64_t rows = rows_at(item);
      const bool cols = cols_at(item);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int size = cols && 4 * i < rows ? 16 : 0;  // 0: zero-fill, nothing read
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(piece_smem(item % kStages, i)),
                     "l"(from + 4 * i * m), "r"(size));
      }
    }
  }
  __device__ __forceinline__ void issue(int item) const {
    copy(item);
    attn::cp_async_commit();
  }
  __device__ __forceinline__ void start() const {
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) issue(s);
  }
  __device__ __forceinline__ static void wait() { attn::cp_async_wait<kStages - 2>(); }
};

// Launches a tensor-core pass of `threads` threads with `bytes` of dynamic staging (launch_staged: kThreads and one
// stream's kStagingBytes).
template <auto Kernel, typename... Args>
cudaError_t launch_staged_bytes(dim3 grid, int threads, int bytes, cudaStream_t stream, Args... args) {
  const cudaError_t status = set_func_attribute_once<Kernel>(cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (status != cudaSuccess) return status;
  Kernel<<<grid, threads, bytes, stream>>>(args...);
  return cudaGetLastError();
}
template <auto Kernel, typename... Args>
cudaError_t launch_staged(dim3 grid, cudaStream_t stream, Args... args) {
  return launch_staged_bytes<Kernel>(grid, kThreads, kStagingBytes, stream, args...);
}

// Rows per block of the tensor-core passes (dy, xa, da): a multiple of 128 sized for ~kTargetBlocks blocks.
inline int64_t dy_rows_per_block(int64_t n, int64_t m) {
  const int64_t col_tiles = (m + kDyTileCols - 1) / kDyTileCols;
  const int64_t row_blocks = kTargetBlocks / col_tiles > 1 ? kTargetBlocks / col_tiles : 1;
  const int64_t rows = (n + row_blocks - 1) / row_blocks;
  return (rows + kDyBlockStep - 1) / kDyBlockStep * kDyBlockStep;
}

inline unsigned blocks_for(int64_t work, int threads) {
  const int64_t b = (work + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b < 65535 ? b : 65535));
}

// sum over p < parts, in order from 0, of part[p * stride], with the loads of 16 parts issued before their adds (the
// compiler's own unrolling issued 4 at a time: a reduce over 74 column tiles waited on ~19 round trips to L2).
__device__ __forceinline__ float sum_parts_in_order(const float* part, int64_t parts, int64_t stride) {
  constexpr int kAhead = 16;
  float s = 0.0f;
  for (int64_t p = 0; p < parts; p += kAhead) {
    float v[kAhead];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) v[u] = p + u < parts ? part[(p + u) * stride] : 0.0f;
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      if (p + u < parts) s += v[u];
    }
  }
  return s;
}

namespace {

// xa[i] = sum over splits, in order, of part[split][i] (i over n * R).
__global__ void sum_splits_kernel(const float* part, int64_t splits, int64_t count, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = sum_parts_in_order(part + i, splits, count);
  }
}

// da[i] += scale * sum over slices (in order) of part[slice][i].
__global__ void lora_da_reduce_kernel(const float* part, int64_t slices, int64_t rk, float scale, float* da) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rk;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    da[i] += scale * sum_parts_in_order(part + i, slices, rk);
  }
}

}  // namespace

}  // namespace swift::ops::cuda::lora_detail
