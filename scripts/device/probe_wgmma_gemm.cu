// scripts/device/probe_wgmma_gemm.cu — can our own Hopper GEMM (TMA + wgmma, warp-specialised, persistent) run the
// 7B step's frozen products as fast as cuBLASLt? The question behind fusing LoRA's rank-r passes into the frozen
// products (issue 5: "fuse A into the frozen GEMM's output columns and B into its epilogue"), which cuBLASLt's fixed
// epilogues cannot do.
//
// A probe, not product code (built by scripts/device/wgmma-gemm-probe.sh with nvcc alone). C (M x N, row-major, BF16)
// = A (M x K, row-major) * B (N x K, row-major)^T with fp32 accumulation: the forward's y = x W^T ("TN"). For each of
// the 7B's forward shapes at 8,192 tokens it checks the result against cuBLASLt's (max |difference| over max |C|) and
// times both (cuBLASLt: the fastest of its top 8 heuristic algorithms, as ops/cuda/blas.cpp's autotune keeps), random
// BF16 inputs in [-1, 1), printing ms per product and TFLOP/s.
//
// The kernel: a 128 x 256 output tile per CTA, K in blocks of 64 (one 128-byte swizzle row of BF16), STAGES-deep ring
// of shared-memory stages filled by TMA (one producer thread) and released through mbarriers; two consumer
// warpgroups each own 64 rows of the tile (wgmma m64n256k16, 128 fp32 accumulators a thread); persistent CTAs walk the
// tiles in groups of GROUP_M tile rows (the B tiles of a group stay in L2). Shapes must be multiples of the tile.
// Variants (-D): TILE_M / TILE_N 192 x 192 with three consumer warpgroups by rows (m64n192k16), or with -DSPLITN=1
// two by columns (96 columns of all 192 rows each: three m64n96k16 per k-step, 32-column output boxes with the
// 64-byte swizzle), the tile cuBLASLt picks for gate / up (its tile id 209); -DTILE_M=256 -DTILE_N=192 -DWG_ROWS=128
// -DSTAGES=3: two warpgroups of 128 rows (two m64n192k16 a k-step, 192 accumulators a thread), 29% more products per
// byte of shared memory than 128 x 256; -DPINGPONG=1 -DTILE_N=176 -DSTAGES=5 (or TILE_N 192 with 4 stages, 128 with 6;
// EPI 3): ping-pong, as cuBLASLt's nvjet_sm90_tst_176x128 kernels (no "coop"), two consumer warpgroups each owning
// whole 128 x TILE_N tiles (two m64nTILE_Nk16 a k-step, TILE_N accumulators a thread), the CTA's tiles dealt to them
// alternately and their mainloops taking turns (an order barrier), so that one's epilogue runs under the other's
// products instead of idling the tensor cores; 176 columns are stored as 64-column boxes at 0, 64 and 112.
// Exit status 0 unless a CUDA / cuBLASLt call fails or a result differs (relative max error > 2e-2).
#include <cublasLt.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <time.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ops/cuda/sm90_primitives.cuh"  // mbarriers, TMA, descriptors, stmatrix_box, wgmma m64n256k16 (nvcc -Isrc)

using namespace swift::ops::cuda::sm90;

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e_)); std::exit(1); } } while (0)
#define LK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { std::printf("cuBLASLt %s at %d: %d\n", #x, __LINE__, (int)s_); std::exit(1); } } while (0)

namespace {

#ifndef TILE_M
#define TILE_M 128  // rows of a CTA's tile: 64 per consumer warpgroup (128: two, 192: three)
#endif
#ifndef TILE_N
#define TILE_N 256  // columns (256 or 192)
#endif
#ifndef SPLITN
#define SPLITN 0  // 1 (192 x 192, EPI 3): two consumer warpgroups split the tile by columns, 96 each over all 192 rows
                  // (three m64n96k16 per k-step, 144 accumulators a thread), instead of three warpgroups by rows
#endif
#ifndef PINGPONG
#define PINGPONG 0  // 1 (TILE_M 128, TILE_N 128, 176 or 192, EPI 3): two consumer warpgroups take the CTA's tiles
                    // in turn, each a whole 128 x BN tile (two m64nBNk16 per k-step, BN accumulators a thread), their
                    // mainloops one after the other so that each one's epilogue overlaps the other's mainloop
#endif
constexpr int BM = TILE_M, BN = TILE_N, BK = 64;
#ifndef WG_ROWS
#define WG_ROWS 64  // rows of the tile per consumer warpgroup: 64 (one wgmma a k-step) or 128 (two; -DTILE_M=256
                    // -DTILE_N=192: 192 accumulators a thread, 3 stages of 56 KB)
#endif
constexpr int kConsumers = SPLITN || PINGPONG ? 2 : BM / WG_ROWS;
constexpr int kRowBlocks = (PINGPONG ? BM : WG_ROWS) / 64;  // m64 blocks per consumer warpgroup
constexpr int kAcc = SPLITN ? 3 * 48 : kRowBlocks * BN / 2;  // fp32 accumulators a consumer thread
constexpr int kBoxCols = SPLITN ? 32 : 64;         // EPI 3: columns of a staging box (32: 64-byte rows, 64-byte swizzle)
static_assert(BM == 128 || BM == 192 || (BM == 256 && WG_ROWS == 128), "TILE_M 128 or 192 (256 with WG_ROWS 128)");
static_assert(BN == 256 || BN == 192 || (PINGPONG && (BN == 176 || BN == 128)),
              "TILE_N 256 or 192 (PINGPONG: 128, 176 or 192)");
#ifndef STAGES
#define STAGES 4
#endif
#ifndef GROUP_M
#define GROUP_M 16
#endif
#ifndef BT
#define BT 0  // 1: B is K x N row-major (MN-major operand, wgmma's transposed B): the backward's dx = dy W
#endif
#ifndef RASTER
#define RASTER 0  // 0: groups of GROUP_M tile rows, down the rows first; 1: groups of GROUP_M tile columns, along them
#endif
#ifndef CLUSTER
#define CLUSTER 1  // CTAs per cluster along M: 2 share each B tile through TMA multicast (each loads half)
#endif
#ifndef EPI
#define EPI 0  // 0: accumulators stored to global by each thread; 1: through shared memory and TMA stores;
               // 2: as 1 with stmatrix, two 64-column boxes of staging per warpgroup (room for 4 stages);
               // 3: as 2 per warp (16-row boxes, each warp's lane 0 stores its own: no warpgroup barriers)
#endif
constexpr int kStageA = BM * BK * 2, kStageB = BN * BK * 2, kStage = kStageA + kStageB;  // bytes
constexpr int kThreads = 128 * (1 + kConsumers);  // warpgroup 0: producer; 1 .. kConsumers: consumers
#ifndef HOIST
#define HOIST 0  // 1: a stage's wgmma descriptors come from one made for the shared memory's start, advanced by
                 // constants (one add each), instead of each made from its address (mask, shift, or: ~60 instructions
                 // a k-block a warp, which Nsight counted as 50% more than cuBLASLt's kernel issues)
#endif
#ifndef EPI_BUFS
#define EPI_BUFS 2  // EPI 3: staging boxes per warp (1: each store must have read its box before the next is written)
#endif
static_assert((BM == 128 && BN == 256) || EPI == 3, "other tiles: EPI 3 only");
static_assert(CLUSTER == 1 || (BN == 256 && !BT), "clusters: the 128 x 256 tile with K-major B only");
static_assert(WG_ROWS == 64 || (WG_ROWS == 128 && BN == 192 && EPI == 3 && CLUSTER == 1 && !SPLITN),
              "WG_ROWS 128: the 192-column tile with EPI 3, no cluster");
static_assert(!SPLITN || (BM == 192 && BN == 192 && EPI == 3 && CLUSTER == 1 && !BT),
              "SPLITN: the 192 x 192 tile with EPI 3, K-major B, no cluster");
static_assert(!PINGPONG || (BM == 128 && BN <= 192 && WG_ROWS == 64 && EPI == 3 && CLUSTER == 1 && !SPLITN && !BT),
              "PINGPONG: TILE_M 128 (no WG_ROWS), TILE_N 128-192 (BN accumulators a thread), EPI 3, K-major B, no "
              "cluster, no SPLITN");
// The BF16 staging of the tile's output: EPI 1 four 64-column boxes per warpgroup, EPI 2 two.
constexpr int kEpiBytes = EPI == 1   ? BM * BN * 2
                          : EPI == 2 ? 2 * 2 * 64 * 128
                          : EPI == 3 ? kConsumers * 4 * EPI_BUFS * 16 * (kBoxCols * 2)
                                     : 0;
constexpr size_t kSmem = size_t(STAGES) * kStage + kEpiBytes + 1024 /* alignment */ + 2 * STAGES * 8 +
                         (PINGPONG ? 2 * 8 : 0) /* the order barriers */;
// PINGPONG: 2 (rows 0-63, 64-127) x ceil(BN / 64) boxes a warp per tile; a multiple of EPI_BUFS keeps the staging
// buffers' round robin unbroken from one tile to the next.
static_assert(!PINGPONG || (kSmem <= 227 * 1024 && (2 * ((BN + 63) / 64)) % EPI_BUFS == 0),
              "PINGPONG: stages + staging within 227 KB (TILE_N 192: 4 stages, or 5 with EPI_BUFS 1), whole rounds of "
              "the staging buffers per tile");

// The K-major descriptor of p = base + bytes (HOIST: base_desc, base's descriptor, advanced by the 16-byte units; the
// address field cannot carry: shared memory ends below 256 KB).
__device__ __forceinline__ uint64_t desc_k_at(uint64_t base_desc, const uint8_t* base, int bytes) {
  if constexpr (HOIST) {
    return desc_advance(base_desc, bytes);
  } else {
    return desc_k_major(base + bytes);
  }
}
__device__ __forceinline__ uint64_t desc_mn_at(uint64_t base_desc, const uint8_t* base, int bytes, uint32_t chunk) {
  if constexpr (HOIST) {
    return desc_advance(base_desc, bytes);
  } else {
    return desc_mn_major(base + bytes, chunk);
  }
}

// A consumer warpgroup's release of a stage: lane r of its first warp arrives on CTA r's barrier (r < CLUSTER).
__device__ __forceinline__ void release_stage(uint64_t* bar, int tid) {
  if (CLUSTER == 1) {
    if (tid == 0) mbar_arrive(bar);
  } else if (tid < CLUSTER) {
    mbar_arrive_cluster(bar, uint32_t(tid));
  }
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

#include "probe_wgmma_m64n192k16.inc"
#include "probe_wgmma_m64n96k16.inc"
#include "probe_wgmma_m64n176k16.inc"
#include "probe_wgmma_m64n128k16.inc"

template <int Regs>
__device__ __forceinline__ void reg_alloc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(Regs));
}
template <int Regs>
__device__ __forceinline__ void reg_dealloc() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(Regs));
}

// Tile t of the (m_tiles x n_tiles) grid in grouped order: GROUP_M tile rows at a time, down the rows first.
__device__ __forceinline__ void tile_coords(int t, int m_tiles, int n_tiles, int& tm, int& tn) {
#if RASTER == 1
  grouped_tile(t, n_tiles, m_tiles, GROUP_M, tn, tm);  // the same walk with rows and columns swapped
  return;
#endif
  grouped_tile(t, m_tiles, n_tiles, GROUP_M, tm, tn);
}

__global__ void __launch_bounds__(kThreads, 1)
    gemm_tn_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                   const __grid_constant__ CUtensorMap map_c, __nv_bfloat16* __restrict__ c, int M, int N, int K) {
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* epi = smem + size_t(STAGES) * kStage;  // EPI 1: 1,024-aligned (the stages are multiples of 1,024 bytes)
  uint64_t* full = reinterpret_cast<uint64_t*>(epi + kEpiBytes);
  uint64_t* empty = full + STAGES;
  // HOIST: the warpgroup index through a shuffle, which the compiler then knows to be the same in the warp (so the
  // descriptors built from it stay in uniform registers, as CUTLASS's canonical_warp_group_idx does).
  const int wg = HOIST ? warpgroup_index() : int(threadIdx.x / 128);
  const int tid = threadIdx.x % 128;
  const uint32_t rank = CLUSTER > 1 ? cluster_rank() : 0;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(&full[s], 1);
      // One arrival per consumer warpgroup of every CTA reading it (PINGPONG: one warpgroup reads a stage).
      mbar_init(&empty[s], (PINGPONG ? 1 : kConsumers) * CLUSTER);
    }
#if PINGPONG
    for (int w = 0; w < 2; ++w) mbar_init(&empty[STAGES + w], 4);  // order[w]: lane 0 of each warp of the other one
#endif
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if (CLUSTER > 1) {
    cluster_sync();
  } else {
    __syncthreads();
  }
  // Work is handed out in cluster tiles: CLUSTER tile rows of one tile column; CTA `rank` takes row `rank` of it.
  // Partial tiles at the edges: TMA zero-fills the loads past M / N and clips the stores (EPI >= 1).
  const int m_tiles = (M + BM - 1) / BM, n_tiles = (N + BN - 1) / BN, kblocks = K / BK;
  const int cm_tiles = m_tiles / CLUSTER, cluster_tiles = cm_tiles * n_tiles;
  const int first = blockIdx.x / CLUSTER, step = gridDim.x / CLUSTER;
  if (wg == 0) {  // producer
    reg_dealloc<40>();
    if (tid == 0) {
      int it = 0;
      for (int t = first; t < cluster_tiles; t += step) {
        int tcm, tn;
        tile_coords(t, cm_tiles, n_tiles, tcm, tn);
        const int tm = tcm * CLUSTER + int(rank);
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          const int s = it % STAGES;
          mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
          uint8_t* stage = smem + size_t(s) * kStage;
          mbar_expect_tx(&full[s], kStage);
          tma_load_2d(stage, &map_a, kb * BK, tm * BM, &full[s]);
#if CLUSTER > 1
          constexpr int kPart = BN / CLUSTER;  // B rows each CTA loads for the whole cluster
          tma_load_2d_multicast(stage + kStageA + rank * kPart * 128, &map_b, kb * BK, tn * BN + int(rank) * kPart,
                                &full[s], uint16_t((1u << CLUSTER) - 1));
#elif BT
          for (int nb = 0; nb < BN / 64; ++nb) {
            tma_load_2d(stage + kStageA + nb * 8192, &map_b, tn * BN + nb * 64, kb * BK, &full[s]);
          }
#else
          tma_load_2d(stage + kStageA, &map_b, kb * BK, tn * BN, &full[s]);
#endif
        }
      }
    }
  } else {
    reg_alloc<kConsumers == 2 ? 232 : 152>();
    // HOIST: the descriptors of the shared memory's start, advanced per stage and per wgmma (unused otherwise).
    const uint64_t desc_smem = desc_k_major(smem);
#if BT
    const uint64_t desc_smem_mn = desc_mn_major(smem, 8192);
#endif
#if PINGPONG
    // Consumer warpgroup w takes tiles j = w, w + 2, w + 4 ... of the CTA's sequence (tile first + j step, k-blocks
    // it = j kblocks .. + kblocks - 1 of the producer's order), all 128 rows and BN columns of each. Mainloops run in
    // the sequence's order: before tile j's (j > 0) the warpgroup waits on order[w] for the other's four warps, which
    // arrive once they have issued tile j - 1's last wgmma; after issuing its own it arrives on order[1 - w]. So
    // order[w]'s phase p is the other's arrival after tile 2p + 1 - w, waited on before tile 2p + 2 - w: parity
    // ((j - 1) / 2) & 1. Neither barrier can run two phases ahead of its waiter (the next arrival needs the waiter's
    // own arrival first). The order also keeps the full barriers' parities exact: when tile j's mainloop starts,
    // every fill of tiles < j has been waited on, so a stage is never two fills behind the one waited for.
    const int w = wg - 1;
    uint64_t* order = empty + STAGES;
    float d[kAcc];
    const int warp = tid / 32, lane = tid % 32;
    for (int j = w, t = first + w * step; t < cluster_tiles; j += 2, t += 2 * step) {
      int tm, tn;
      tile_coords(t, m_tiles, n_tiles, tm, tn);
      if (j > 0) mbar_wait(&order[w], ((j - 1) >> 1) & 1);
      int it = j * kblocks, prev = -1;
      for (int kb = 0; kb < kblocks; ++kb, ++it) {
        const int s = it % STAGES;
        mbar_wait(&full[s], (it / STAGES) & 1);
        const uint8_t* a_tile = smem + size_t(s) * kStage;  // the tile's 128 rows
        const uint8_t* b_tile = a_tile + kStageA;
        const uint64_t a_desc = desc_smem + uint64_t((s * kStage) >> 4), b_desc = a_desc + uint64_t(kStageA >> 4);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          const int acc = (kb > 0 || kk > 0) ? 1 : 0;
          const uint64_t db = desc_k_at(b_desc, b_tile, kk * 32);
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            float* dr = d + r * (BN / 2);
            const uint64_t da = desc_k_at(a_desc, a_tile, r * 64 * 128 + kk * 32);
            if constexpr (BN == 192) {
              wgmma_m64n192k16(dr, da, db, acc);
            } else if constexpr (BN == 176) {
              wgmma_m64n176k16(dr, da, db, acc);
            } else {
              wgmma_m64n128k16(dr, da, db, acc);
            }
          }
        }
        wgmma_commit();
        // Tile j's products all issued (K >= 64): the other's mainloop may start, queued behind this k-block's.
        if (kb == kblocks - 1 && lane == 0) mbar_arrive(&order[w ^ 1]);
        wgmma_wait<1>();
        if (prev >= 0) release_stage(&empty[prev], tid);
        prev = s;
      }
      wgmma_wait<0>();
      release_stage(&empty[prev], tid);
      // The warp's 16 rows of each m64 block r (tile rows 64 r + 16 warp ..), in 16 x 64 boxes (the C map's, 128-byte
      // swizzle) at columns c0 = min(64 b, BN - 64): for BN 176 at 0, 64 and 112, the last one rewriting columns
      // 112-127 with the values the second wrote. Each box through buffer n % EPI_BUFS of the warp, stored by its
      // lane 0 (TMA clips the columns past N).
      constexpr int kBoxes = (BN + 63) / 64;
      uint8_t* bufs = epi + (w * 4 + warp) * (EPI_BUFS * 16 * 128);
      const int mi = lane / 8, lrow = (lane % 8) + 8 * (mi % 2);
#pragma unroll
      for (int n = 0; n < 2 * kBoxes; ++n) {
        const int r = n / kBoxes, c0 = 64 * (n % kBoxes) < BN - 64 ? 64 * (n % kBoxes) : BN - 64;
        uint8_t* buf = bufs + (n % EPI_BUFS) * (16 * 128);
        if (lane == 0) asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(EPI_BUFS - 1) : "memory");
        __syncwarp();
        stmatrix_rows<128>(d + r * (BN / 2) + c0 / 2, 0, buf, lrow, mi);  // accumulators of columns c0 .. c0 + 63
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        if (lane == 0) {
          tma_store_2d(&map_c, buf, tn * BN + c0, tm * BM + r * 64 + warp * 16);
          asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
      }
    }
#else
    const int half = wg - 1;  // rows [WG_ROWS half, WG_ROWS (half + 1)) of the tile (SPLITN: 96 columns)
    float d[kAcc];
    int it = 0;
    const int warp = tid / 32, lane = tid % 32;
    for (int t = first; t < cluster_tiles; t += step) {
      int tcm, tn;
      tile_coords(t, cm_tiles, n_tiles, tcm, tn);
      const int tm = tcm * CLUSTER + int(rank);
      int prev = -1;
      for (int kb = 0; kb < kblocks; ++kb, ++it) {
        const int s = it % STAGES;
        mbar_wait(&full[s], (it / STAGES) & 1);
#if SPLITN
        const uint8_t* a_tile = smem + size_t(s) * kStage;                       // all 192 rows
        const uint8_t* b_tile = smem + size_t(s) * kStage + kStageA + half * 96 * 128;  // this warpgroup's 96 columns
        const uint64_t a_desc = desc_smem + uint64_t((s * kStage) >> 4),
                       b_desc = a_desc + uint64_t((kStageA + half * 96 * 128) >> 4);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          const int acc = (kb > 0 || kk > 0) ? 1 : 0;
          const uint64_t db = desc_k_at(b_desc, b_tile, kk * 32);
#pragma unroll
          for (int r = 0; r < 3; ++r) wgmma_m64n96k16(d + 48 * r, desc_k_at(a_desc, a_tile, r * 64 * 128 + kk * 32), db, acc);
        }
#else
        const uint8_t* a_tile = smem + size_t(s) * kStage + half * WG_ROWS * 128;
        const uint8_t* b_tile = smem + size_t(s) * kStage + kStageA;
        const uint64_t a_desc = desc_smem + uint64_t((s * kStage + half * WG_ROWS * 128) >> 4),
                       b_desc = desc_smem + uint64_t((s * kStage + kStageA) >> 4);
#if BT
        const uint64_t b_desc_mn = desc_smem_mn + uint64_t((s * kStage + kStageA) >> 4);
#endif
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
          const int acc = (kb > 0 || kk > 0) ? 1 : 0;
#pragma unroll
          for (int r = 0; r < kRowBlocks; ++r) {
            float* dr = d + r * (BN / 2);
#if BT
            // MN-major B: 64-column boxes 8,192 bytes apart (leading offset), 8 k-rows 1,024 bytes apart (stride).
            const uint64_t da = desc_k_at(a_desc, a_tile, r * 64 * 128 + kk * 32),
                           db = desc_mn_at(b_desc_mn, b_tile, kk * 2048, 8192);
            if constexpr (BN == 256) wgmma_m64n256k16_tb(dr, da, db, acc); else wgmma_m64n192k16_tb(dr, da, db, acc);
#else
            const uint64_t da = desc_k_at(a_desc, a_tile, r * 64 * 128 + kk * 32),
                           db = desc_k_at(b_desc, b_tile, kk * 32);
            if constexpr (BN == 256) wgmma_m64n256k16(dr, da, db, acc); else wgmma_m64n192k16(dr, da, db, acc);
#endif
          }
        }
#endif  // SPLITN
        wgmma_commit();
        wgmma_wait<1>();
        if (prev >= 0) release_stage(&empty[prev], tid);
        prev = s;
      }
      wgmma_wait<0>();
      release_stage(&empty[prev], tid);
      // Accumulator i of this thread is row 16 warp + lane / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (lane % 4) +
      // i % 2 of the warpgroup's 64 x 256 block.
#if EPI == 1
      // Four boxes of 64 columns x 64 rows (128-byte rows, 128-byte swizzle: 16-byte chunk j of row r at chunk
      // j ^ (r % 8)), then one thread stores them with TMA. The previous tile's stores must have read the staging.
      uint8_t* stage_c = epi + half * (64 * 256 * 2);
      if (tid == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
      asm volatile("bar.sync %0, 128;" ::"r"(1 + half) : "memory");
      const int r_lo = warp * 16 + lane / 4;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int box = j / 8, chunk = j % 8;
        const __nv_bfloat162 lo = __floats2bfloat162_rn(d[4 * j], d[4 * j + 1]);
        const __nv_bfloat162 hi = __floats2bfloat162_rn(d[4 * j + 2], d[4 * j + 3]);
        uint8_t* b = stage_c + box * (64 * 128);
        const int r_hi = r_lo + 8;
        *reinterpret_cast<__nv_bfloat162*>(b + r_lo * 128 + ((chunk ^ (r_lo % 8)) * 16) + 4 * (lane % 4)) = lo;
        *reinterpret_cast<__nv_bfloat162*>(b + r_hi * 128 + ((chunk ^ (r_hi % 8)) * 16) + 4 * (lane % 4)) = hi;
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
      asm volatile("bar.sync %0, 128;" ::"r"(1 + half) : "memory");
      if (tid == 0) {
        for (int box = 0; box < 4; ++box) {
          tma_store_2d(&map_c, stage_c + box * (64 * 128), tn * BN + box * 64, tm * BM + half * 64);
        }
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
#elif EPI == 2
      // Box b (columns 64 b .. 64 b + 63) goes through buffer b % 2 of this warpgroup: before it is written, at most
      // one store (the other buffer's) may still be reading. stmatrix x4 writes chunks j, j + 1 of rows 16 warp .. +15;
      // lane l gives the address of row l % 8 of matrix l / 8 (matrices: chunk j rows 0-7, 8-15, chunk j + 1 ...).
      uint8_t* bufs = epi + half * (2 * 64 * 128);
      const int mi = lane / 8, mrow = warp * 16 + (lane % 8) + 8 * (mi % 2);
#pragma unroll
      for (int box = 0; box < 4; ++box) {
        uint8_t* buf = bufs + (box % 2) * (64 * 128);
        if (tid == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        asm volatile("bar.sync %0, 128;" ::"r"(1 + half) : "memory");
        stmatrix_box(d, box, buf, mrow, mi);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("bar.sync %0, 128;" ::"r"(1 + half) : "memory");
        if (tid == 0) {
          tma_store_2d(&map_c, buf, tn * BN + box * 64, tm * BM + half * 64);
          asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
      }
#elif EPI == 3 && SPLITN
      // Per 64-row block r, the warp's 16 rows of this warpgroup's 96 columns: three 32-column boxes, each through
      // buffer n % EPI_BUFS (16 rows x 64 bytes), stored by its lane 0.
      uint8_t* bufs = epi + (half * 4 + warp) * (EPI_BUFS * 16 * 64);
      const int mi = lane / 8, lrow = (lane % 8) + 8 * (mi % 2);
#pragma unroll
      for (int n = 0; n < 9; ++n) {
        const int r = n / 3, box = n % 3;
        uint8_t* buf = bufs + (n % EPI_BUFS) * (16 * 64);
        if (lane == 0) asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(EPI_BUFS - 1) : "memory");
        __syncwarp();
        stmatrix_rows<64>(d + 48 * r, box, buf, lrow, mi);  // 32 columns, 64-byte swizzle
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        if (lane == 0) {
          tma_store_2d(&map_c, buf, tn * BN + half * 96 + box * 32, tm * BM + r * 64 + warp * 16);
          asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
      }
#elif EPI == 3
      // The warp's 16 rows of each m64 block: box b through its buffer n % EPI_BUFS (16 rows x 128 bytes), stored by
      // its lane 0.
      uint8_t* bufs = epi + (half * 4 + warp) * (EPI_BUFS * 16 * 128);
      const int mi = lane / 8, lrow = (lane % 8) + 8 * (mi % 2);
#pragma unroll
      for (int n = 0; n < kRowBlocks * (BN / 64); ++n) {
        const int r = n / (BN / 64), box = n % (BN / 64);
        uint8_t* buf = bufs + (n % EPI_BUFS) * (16 * 128);
        if (lane == 0) asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(EPI_BUFS - 1) : "memory");
        __syncwarp();
        stmatrix_rows<128>(d + r * (BN / 2), box, buf, lrow, mi);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        if (lane == 0) {
          tma_store_2d(&map_c, buf, tn * BN + box * 64, tm * BM + half * WG_ROWS + r * 64 + warp * 16);
          asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
      }
#else
      const int row0 = tm * BM + half * 64 + warp * 16 + lane / 4;
      const int col0 = tn * BN + 2 * (lane % 4);
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(d[4 * j], d[4 * j + 1]);
        const __nv_bfloat162 hi = __floats2bfloat162_rn(d[4 * j + 2], d[4 * j + 3]);
        *reinterpret_cast<__nv_bfloat162*>(c + size_t(row0) * N + col0 + 8 * j) = lo;
        *reinterpret_cast<__nv_bfloat162*>(c + size_t(row0 + 8) * N + col0 + 8 * j) = hi;
      }
#endif
    }
#endif  // PINGPONG
#if EPI >= 1
    if ((EPI == 3 ? tid % 32 : tid) == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif
  }
  // No CTA leaves while a peer may still multicast into its stages or arrive on its barriers.
  if (CLUSTER > 1) cluster_sync();
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (fn == nullptr) {
    cudaDriverEntryPointQueryResult q;
    CK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", reinterpret_cast<void**>(&fn), 12000,
                                        cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || fn == nullptr) {
      std::printf("cuTensorMapEncodeTiled not found\n");
      std::exit(1);
    }
  }
  return fn;
}

// The map of a row-major (rows x cols) BF16 matrix in boxes of box_rows x box_cols: 64 columns with the 128-byte
// swizzle, or 32 (SPLITN's output) with the 64-byte one.
CUtensorMap make_map(const void* base, int rows, int cols, int box_rows, int box_cols = BK) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(cols) * 2};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  const cuuint32_t estride[2] = {1, 1};
  const CUresult r = encode_fn()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                                 estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                 box_cols == 32 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
                                 CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::printf("cuTensorMapEncodeTiled (%d x %d boxes): %d\n", box_rows, box_cols, int(r));
    std::exit(1);
  }
  return map;
}

// Uniform in [-1, 1) from a hash of the index, or (constant) 1/64 everywhere: the GPU's power draw with random
// operands holds the products below the clocks that constant ones run at.
__global__ void fill_random(__nv_bfloat16* p, size_t n, uint32_t seed, bool constant) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16(constant ? 0.015625f : float(h & 0xFFFF) / 32768.0f - 1.0f);
  }
}

struct Lt {
  cublasLtHandle_t handle;
  void* workspace;
  size_t workspace_bytes = 64 << 20;
};

double wall_ms() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return double(t.tv_sec) * 1e3 + double(t.tv_nsec) * 1e-6;
}

// POWER_MS (environment): `launch` back to back for about that many milliseconds, then a line "phase WHO SHAPE
// START_MS END_MS PRODUCTS TFLOP/s" with wall-clock (CLOCK_REALTIME) bounds, for a sampler of the GPU's clock and
// power over the same span (scripts/device/gemm-power-probe.sh reads nvidia-smi's timestamps against them).
void hold(const char* who, const char* shape, double flop, double ms, cudaStream_t stream,
          const std::function<void()>& launch) {
  CK(cudaStreamSynchronize(stream));
  const double t0 = wall_ms();
  long n = 0;
  while (wall_ms() - t0 < ms) {
    for (int i = 0; i < 16; ++i) launch();
    n += 16;
    CK(cudaStreamSynchronize(stream));
  }
  const double t1 = wall_ms();
  std::printf("phase %s %s %.1f %.1f %ld %.1f\n", who, shape, t0, t1, n, flop * double(n) / ((t1 - t0) * 1e9));
}

// cuBLASLt's C = A B^T (row-major), the fastest of its top 8 algorithms; returns ms per product. `with_best`, when
// given, is called with a launcher of that algorithm before its descriptors go.
float cublaslt_tn(Lt& lt, const __nv_bfloat16* a, const __nv_bfloat16* b, __nv_bfloat16* c, int M, int N, int K,
                  int reps, cudaStream_t stream,
                  const std::function<void(const std::function<void()>&)>& with_best = nullptr) {
  cublasLtMatmulDesc_t op;
  LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = BT ? CUBLAS_OP_N : CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtMatrixLayout_t la, lb, lc;  // column-major views: C^T (N x M) = B (K x N)^T A (K x M)
  if (BT) {  // B row-major K x N: column-major N x K
    LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, N, K, N));
  } else {
    LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, K, N, K));
  }
  LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, K, M, K));
  LK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, N, M, N));
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &lt.workspace_bytes,
                                          sizeof(lt.workspace_bytes)));
  cublasLtMatmulHeuristicResult_t results[8];
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(lt.handle, op, la, lb, lc, lc, pref, 8, results, &found));
  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  float best = 1e30f;
  int best_i = 0;
  for (int i = 0; i < found; ++i) {
    auto run = [&] {
      LK(cublasLtMatmul(lt.handle, op, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &results[i].algo, lt.workspace,
                        lt.workspace_bytes, stream));
    };
    run();
    run();
    CK(cudaEventRecord(e0, stream));
    for (int r = 0; r < reps; ++r) run();
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (ms / reps < best) {
      best = ms / reps;
      best_i = i;
    }
  }
  // The fastest algorithm's configuration (cuBLASLt's m x n tile is our N x M: it computes C^T).
  auto config = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint32_t v = 0;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&results[best_i].algo, attr, &v, sizeof(v), &got) !=
        CUBLAS_STATUS_SUCCESS)
      return -1;
    return int(v);
  };
  std::printf("  cuBLASLt best of %d: algo %d tile %d stages %d cluster %d swizzle %d split-k %d\n", found,
              config(CUBLASLT_ALGO_CONFIG_ID), config(CUBLASLT_ALGO_CONFIG_TILE_ID),
              config(CUBLASLT_ALGO_CONFIG_STAGES_ID), config(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
              config(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING), config(CUBLASLT_ALGO_CONFIG_SPLITK_NUM));
  if (with_best) {
    with_best([&] {
      LK(cublasLtMatmul(lt.handle, op, &alpha, b, la, a, lb, &beta, c, lc, c, lc, &results[best_i].algo, lt.workspace,
                        lt.workspace_bytes, stream));
    });
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return best;
}

__global__ void compare(const __nv_bfloat16* x, const __nv_bfloat16* y, size_t n, float* out /* max diff, max |y| */) {
  float md = 0.0f, my = 0.0f;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const float a = __bfloat162float(x[i]), b = __bfloat162float(y[i]);
    md = fmaxf(md, fabsf(a - b));
    my = fmaxf(my, fabsf(b));
    if (a != a) md = INFINITY;
  }
  atomicMax(reinterpret_cast<int*>(&out[0]), __float_as_int(md));
  atomicMax(reinterpret_cast<int*>(&out[1]), __float_as_int(my));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  const bool constant = argc > 2 && std::string(argv[2]) == "const";
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaFuncSetAttribute(gemm_tn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));
  Lt lt;
  LK(cublasLtCreate(&lt.handle));
  CK(cudaMalloc(&lt.workspace, lt.workspace_bytes));
  struct Shape {
    const char* name;
    int M, N, K, per_layer;
  };
  // The forward's y = x W^T, or (BT) the backward's dx = dy W: N the input width, K the output width.
  const std::vector<Shape> shapes = BT ? std::vector<Shape>{{"q / o dx", 8192, 3584, 3584, 2},
                                                 {"k / v dx", 8192, 3584, 512, 2},
                                                 {"gate / up dx", 8192, 3584, 18944, 2},
                                                 {"down dx", 8192, 18944, 3584, 1},
                                                 {"square 8192", 8192, 8192, 8192, 0},
                                                 {"lm head dx", 8192, 3584, 152064, 0}}
                            : std::vector<Shape>{{"q / o", 8192, 3584, 3584, 2},
                                                 {"k / v", 8192, 512, 3584, 2},
                                                 {"gate / up", 8192, 18944, 3584, 2},
                                                 {"down", 8192, 3584, 18944, 1},
                                                 {"square 8192", 8192, 8192, 8192, 0},
                                                 {"lm head", 8192, 152064, 3584, 0}};
  float* cmp;
  CK(cudaMalloc(&cmp, 2 * sizeof(float)));
  double ours_layer = 0, lt_layer = 0;
  bool ok = true;
  std::printf("tile %d x %d%s, STAGES %d GROUP_M %d, %d SMs, reps %d, %s inputs\n", BM, BN,
              SPLITN     ? " (two warpgroups by columns)"
              : PINGPONG ? " (ping-pong: two warpgroups, a tile each)"
                         : "",
              STAGES, GROUP_M, sms, reps, constant ? "constant" : "random");
  std::printf("%-12s %6s %6s %6s | %9s %8s | %9s %8s | %6s | %s\n", "shape", "M", "N", "K", "ours ms", "TFLOP/s",
              "cuBLASLt", "TFLOP/s", "ratio", "max|diff|/max|C|");
  const char* only = std::getenv("SHAPES");  // a substring of the shapes to run (e.g. "gate"), all when unset
  for (const Shape& s : shapes) {
    if (only != nullptr && std::string(s.name).find(only) == std::string::npos) continue;
    __nv_bfloat16 *a, *b, *c_ours, *c_lt;
    CK(cudaMalloc(&a, size_t(s.M) * s.K * 2));
    CK(cudaMalloc(&b, size_t(s.N) * s.K * 2));
    CK(cudaMalloc(&c_ours, size_t(s.M) * s.N * 2));
    CK(cudaMalloc(&c_lt, size_t(s.M) * s.N * 2));
    fill_random<<<1024, 256, 0, stream>>>(a, size_t(s.M) * s.K, 1234u, constant);
    fill_random<<<1024, 256, 0, stream>>>(b, size_t(s.N) * s.K, 987u, constant);
    const CUtensorMap ma = make_map(a, s.M, s.K, BM),
                      mb = BT ? make_map(b, s.K, s.N, 64) : make_map(b, s.N, s.K, BN / CLUSTER),
                      mc = make_map(c_ours, s.M, s.N, EPI == 3 ? 16 : 64, kBoxCols);
    const int tiles = ((s.M + BM - 1) / BM) * ((s.N + BN - 1) / BN);
    const int grid = std::min(tiles, sms / CLUSTER * CLUSTER);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = kSmem;
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CLUSTER;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    __nv_bfloat16* c_arg = c_ours;
    int m_arg = s.M, n_arg = s.N, k_arg = s.K;
    auto ours = [&] { CK(cudaLaunchKernelEx(&config, gemm_tn_kernel, ma, mb, mc, c_arg, m_arg, n_arg, k_arg)); };
    ours();
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(stream));
    const double flop = 2.0 * s.M * s.N * s.K;
    // POWER_MS: each product held that long, cuBLASLt's best and ours alternately, twice (the square is skipped).
    const char* power_env = std::getenv("POWER_MS");
    const double power_ms = power_env != nullptr && s.per_layer > 0 ? std::atof(power_env) : 0.0;
    std::string tag = s.name;
    for (char& ch : tag) ch = ch == ' ' ? '_' : ch;
    std::function<void(const std::function<void()>&)> holds;
    if (power_ms > 0) {
      holds = [&](const std::function<void()>& lt_run) {
        for (int round = 0; round < 2; ++round) {
          hold("cublaslt", tag.c_str(), flop, power_ms, stream, lt_run);
          hold("ours", tag.c_str(), flop, power_ms, stream, [&] { ours(); });
        }
      };
    }
    const float lt_ms = cublaslt_tn(lt, a, b, c_lt, s.M, s.N, s.K, reps, stream, holds);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    ours();
    CK(cudaEventRecord(e0, stream));
    for (int r = 0; r < reps; ++r) ours();
    CK(cudaEventRecord(e1, stream));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ms /= reps;
    CK(cudaMemsetAsync(cmp, 0, 2 * sizeof(float), stream));
    compare<<<512, 256, 0, stream>>>(c_ours, c_lt, size_t(s.M) * s.N, cmp);
    float h[2];
    CK(cudaMemcpyAsync(h, cmp, sizeof(h), cudaMemcpyDeviceToHost, stream));
    CK(cudaStreamSynchronize(stream));
    const double rel = h[0] / std::max(h[1], 1e-30f);
    if (!(rel <= 2e-2)) ok = false;
    std::printf("%-12s %6d %6d %6d | %9.4f %8.1f | %9.4f %8.1f | %6.3f | %.2e\n", s.name, s.M, s.N, s.K, ms,
                flop / ms / 1e9, lt_ms, flop / lt_ms / 1e9, lt_ms / ms, rel);
    ours_layer += s.per_layer * ms;
    lt_layer += s.per_layer * lt_ms;
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(c_ours));
    CK(cudaFree(c_lt));
  }
  std::printf("7B layer's products (q, k, v, o, gate, up, down): ours %.3f ms, cuBLASLt %.3f ms (x 28: %.1f / "
              "%.1f ms)\n",
              ours_layer, lt_layer, 28 * ours_layer, 28 * lt_layer);
  std::printf(ok ? "all results agree\n" : "RESULTS DIFFER\n");
  return ok ? 0 : 1;
}
