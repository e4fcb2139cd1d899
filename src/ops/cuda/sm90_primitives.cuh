// ops/cuda/sm90_primitives.cuh — the Hopper (sm_90a) building blocks of our GEMM (gemm_sm90.cu) and of its probe
// (scripts/device/probe_wgmma_gemm.cu): mbarriers (also a peer CTA's, in a cluster), 2-D TMA loads (also multicast to
// a cluster) and stores, wgmma shared-memory descriptors of 128-byte-swizzled tiles, and the stmatrix store of a
// warp's accumulators into a swizzled staging box.
//
// Invariants: include only from device code compiled for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL). Tiles are 1,024-byte
// aligned with 128-byte rows; 16-byte chunk c of row r of a 128-byte-swizzled tile sits at chunk c ^ (r % 8), as TMA
// writes and reads it. Every helper is one PTX instruction or a fixed sequence of them.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/wgmma_m64n256k16.cuh"

namespace swift::ops::cuda::sm90 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
// The default .release.cta arrive: a .release.cluster one cost about a k-block's products (docs/PERFORMANCE.md
// run 23, call 2).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}

// TMA: the box of the 2-D `map` at (inner coordinate c0, outer c1) into shared memory, completing on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar))
      : "memory");
}
// TMA store of a box from shared memory to (c0, c1) of `map` (clipped at its edges); bulk async-group completion.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(c0), "r"(c1), "r"(smem_u32(src))
               : "memory");
}

// wgmma descriptors of 128-byte-swizzled tiles: K-major (rows of 128 bytes, 8-row atoms 1,024 bytes apart; the
// leading offset unused), or MN-major (64-element MN chunks `chunk_bytes` apart, 8 K-rows 1,024 bytes apart).
__device__ __forceinline__ uint64_t desc_k_major(const void* p) {
  return ((uint64_t(smem_u32(p)) & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
__device__ __forceinline__ uint64_t desc_mn_major(const void* p, uint32_t chunk_bytes) {
  return ((uint64_t(smem_u32(p)) & 0x3FFFF) >> 4) | (uint64_t(chunk_bytes >> 4) << 16) |
         (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// The descriptor of the address `bytes` past the one `desc` describes: the 16-byte units added to the low word only
// (the address field cannot carry into the leading offset: shared memory ends below 256 KB). One add where
// desc_k_major / desc_mn_major take a mask, a shift and an or per wgmma (docs/PERFORMANCE.md run 25).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return (desc & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(desc) + (bytes >> 4));
}

// The warpgroup index of the calling thread, through a shuffle so that the compiler knows it is the same across the
// warp (descriptors made from it stay in uniform registers; CUTLASS's canonical_warp_group_idx).
__device__ __forceinline__ int warpgroup_index() { return __shfl_sync(0xffffffffu, int(threadIdx.x / 128), 0); }

// The same box multicast to the CTAs of `mask` (same shared-memory offsets), completing on each one's `bar`.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar,
                                                      uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3}], [%4], %5;" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(smem_u32(bar)), "h"(mask)
      : "memory");
}

// Arrive on the mbarrier at `bar`'s offset in the shared memory of cluster CTA `rank` (the default .release.cta
// semantics, as for a local arrive: .release.cluster made each arrive wait ~as long as a k-block's products).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_u32(bar)),
      "r"(rank)
      : "memory");
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// Tile t of an (m_tiles x n_tiles) grid walked in groups of `group` tile rows, down the rows first: the B tiles of a
// group stay in L2 while its rows pass (transposed, `group` tile columns along the rows, by swapping the roles).
__device__ __forceinline__ void grouped_tile(int t, int m_tiles, int n_tiles, int group, int& tm, int& tn) {
  const int per_group = group * n_tiles;
  const int g = t / per_group, first = g * group;
  const int rows = min(m_tiles - first, group);
  const int in_group = t - g * per_group;
  tm = first + in_group % rows;
  tn = in_group / rows;
}

// Box `box` of a warp's wgmma accumulators `d` (16 rows of the warp) as BF16 into `buf`, one staging row of RowBytes
// per output row: 128 (64 columns, 128-byte swizzle: 16-byte chunk c of row r at chunk c ^ (r % 8)) or 64 (32 columns,
// 64-byte swizzle: chunk c ^ ((r / 2) % 4)). RowBytes / 32 stmatrix x4, each of chunks j, j + 1. Lane l gives the
// address of row l % 8 of matrix mi = l / 8 (chunk j rows 0-7, 8-15, chunk j + 1 rows 0-7, 8-15); `row` is that row's
// index in `buf` (the lane's (l % 8) + 8 (mi % 2), plus the warp's first row when boxes span warps).
template <int RowBytes>
__device__ __forceinline__ void stmatrix_rows(const float* d, int box, uint8_t* buf, int row, int mi) {
  static_assert(RowBytes == 128 || RowBytes == 64, "128- or 64-byte staging rows");
  constexpr int kChunks = RowBytes / 16;  // 8-column groups per box
#pragma unroll
  for (int jp = 0; jp < kChunks / 2; ++jp) {
    const int j = kChunks * box + 2 * jp;
    uint32_t r[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int jj = j + q / 2, h = q % 2;
      const __nv_bfloat162 v = __floats2bfloat162_rn(d[4 * jj + 2 * h], d[4 * jj + 2 * h + 1]);
      r[q] = *reinterpret_cast<const uint32_t*>(&v);
    }
    const int chunk = 2 * jp + mi / 2;
    const int swizzled = RowBytes == 128 ? chunk ^ (row % 8) : chunk ^ ((row / 2) % 4);
    const uint32_t addr = smem_u32(buf + row * RowBytes + swizzled * 16);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3])
                 : "memory");
  }
}

// Box `box` (accumulator columns 64 box .. + 63) into 128-byte rows: stmatrix_rows<128>.
template <int N>
__device__ __forceinline__ void stmatrix_box(const float (&d)[N], int box, uint8_t* buf, int row, int mi) {
  static_assert(N % 32 == 0, "whole 64-column boxes of accumulators");
  stmatrix_rows<128>(d, box, buf, row, mi);
}

}  // namespace swift::ops::cuda::sm90
