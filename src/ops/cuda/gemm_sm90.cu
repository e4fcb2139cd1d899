// ops/cuda/gemm_sm90.cu — our own Hopper GEMM (gemm_sm90.cuh): D (n, m) BF16 = A (n, k) @ op(B), fp32 accumulation.
// The kernel of scripts/device/probe_wgmma_gemm.cu's `-DEPI=3 -DHOIST=1 -DCLUSTER=2 -DGROUP_M=8` form
// (docs/PERFORMANCE.md run 25): cuBLASLt's bits on every 7B shape; at the 700 W cap ~0.99x of it over the 7B
// layer's forward products (gate / up 0.976, down 1.03).
//
// Invariants:
//  - A CTA computes a 128 x 256 tile of D, K in blocks of 64 BF16 (one 128-byte swizzle row). CTAs run in clusters
//    of 2 on tile rows 2c and 2c + 1 of one tile column, which share the B tile: each CTA's producer (warpgroup 0's
//    first thread) loads its own A box (128 x 64) and half of B (128 of the 256 rows, or two of the four 64 x 64
//    boxes when B is stored (k, m)) multicast into both CTAs, so a stage completes on its `full` mbarrier with bytes
//    from both. Warpgroups 1 and 2 take rows 0-63 and 64-127 of the tile (wgmma m64n256k16, 128 fp32 accumulators a
//    thread) and release a stage on the `empty` mbarrier of both CTAs (4 arrivals) once the wgmma reading it has
//    completed: a stage is refilled only when neither CTA still reads it.
//  - Persistent clusters walk the cluster tiles (2 tile rows x 1 tile column) in groups of kGroupM cluster rows,
//    down the rows first (the B tiles of a group stay in L2); stage s of a CTA's it-th k-block is it % kStages with
//    phase (it / kStages) % 2, the same in both CTAs (they walk the same tiles). A CTA whose tile row is past n (an odd
//    number of tile rows) still loads its half of B for its peer; TMA zero-fills its A and clips its stores.
//  - Descriptors: each made once from the shared memory's start and advanced by constants (desc_advance), from a
//    warp-uniform warpgroup index: ~13 instructions per k-block's 4 wgmma instead of ~35 (run 25).
//  - No CTA exits before its peer is done with its barriers and shared memory (a cluster barrier at the end).
//  - With a tail (Sm90Gemm's tail_*) one more k-block: the tail matrices' 64 columns (B stored (m, k): tail_b (m, 64)),
//    or 64 rows (B stored (k, m): tail_b (64, m)), loaded and multicast as A's and B's blocks are. B stored (m, k):
//    after A's blocks (LoRA's B product); its products add in the same fp32 sums before the one rounding. B stored
//    (k, m): before A's (LoRA's dx term: g and scale * a as pieces); with keep bits the consumers wait for that
//    block's products alone in their accumulators and multiply each by keep_scale or 0 (its bit), loaded at the
//    tile's start, then A's products add onto them (run 25 call 8's form added the term in the epilogue with CUDA
//    cores, ~30 us a tile; the tensor cores take it in one k-block).
//  - With a residual (Sm90Gemm's residual, with a tail only) each fp32 sum gets the residual's BF16 value added before
//    the one rounding: each consumer thread loads its 128 values (its accumulators' layout, 64 4-byte pairs, straight
//    into registers) kResidualLead k-blocks before the tile's end, so that the loads fly under the last products.
//  - Epilogue: each consumer warp rounds its 16 rows to BF16 (round to nearest even) into its own two 16 x 64 staging
//    boxes (stmatrix, 128-byte swizzle) and its lane 0 stores them with TMA; a box is rewritten only after the store
//    that read it (bulk async-group wait), and no CTA exits with a store in flight.
//  - Device code only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); other targets compile an empty kernel and
//    gemm_sm90_available says no.
#include "ops/cuda/gemm_sm90.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SWIFT_SM90A_DEVICE 1
#include "ops/cuda/sm90_primitives.cuh"
#endif

namespace swift::ops::cuda {
namespace {

constexpr int kTileM = 128, kTileN = 256, kTileK = 64;
constexpr int kStages = 4;
constexpr int kStageA = kTileM * kTileK * 2, kStageB = kTileN * kTileK * 2, kStage = kStageA + kStageB;  // bytes
constexpr int kThreads = 384;                      // warpgroup 0: producer; 1 and 2: consumers
constexpr int kCluster = 2;                        // CTAs per cluster, on consecutive tile rows
constexpr int kBoxRows = 16, kBoxBytes = kBoxRows * 128;  // a consumer warp's staging box: 16 rows x 64 columns
constexpr int kEpiBytes = 8 * 2 * kBoxBytes;       // 8 consumer warps x 2 boxes
constexpr size_t kSmemBytes = size_t(kStages) * kStage + kEpiBytes + 1024 /* alignment */ + 2 * kStages * 8;

#ifdef SWIFT_SM90A_DEVICE
constexpr int kGroupM = 8;   // cluster rows (2 tile rows each) per group of the walk (grouped_tile)
constexpr int kResidualLead = 4;  // k-blocks before a tile's end at which its residual's loads are issued

using namespace sm90;
#endif  // SWIFT_SM90A_DEVICE

// The mask of the rank block (Sm90Gemm's tail_bits): its products times keep_scale or 0 by bit.
struct RankMask {
  const uint8_t* bits;
  float keep_scale;
};

// The residual of the epilogue (Sm90Gemm's residual): a BF16 (n, m) matrix with row stride ld, added to the fp32 sums.
struct EpilogueResidual {
  const __nv_bfloat16* c;
  int64_t ld;
};

#ifdef SWIFT_SM90A_DEVICE
// A consumer thread's residual values of its tile (columns col0 .. + 255): for each of the tile's 32 column groups j
// and rows row0, row0 + 8 (h), the bf16 pair at columns col0 + 8 j + 2 (lane % 4) + {0, 1}, c[2 j + h], as the
// accumulators d[4 j + 2 h + {0, 1}] hold them. Outside D: 0 (m is even: a pair is inside or out).
__device__ __forceinline__ void load_residual(uint32_t (&c)[64], const EpilogueResidual& res, int n, int m, int row0,
                                              int col0) {
  const int lane = threadIdx.x % 32;
  const int col = col0 + 2 * (lane % 4);  // the thread's first column; group j's pair is 8 j further (4 words)
  const bool whole = col0 + kTileN <= m;  // every column of the tile inside D (all but the last tile column)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    const unsigned int* p =
        reinterpret_cast<const unsigned int*>(res.c + int64_t(row < n ? row : 0) * res.ld + col);
    if (row < n && whole) {
#pragma unroll
      for (int j = 0; j < 32; ++j) c[2 * j + h] = __ldg(p + 4 * j);
    } else {
#pragma unroll
      for (int j = 0; j < 32; ++j) c[2 * j + h] = row < n && col + 8 * j < m ? __ldg(p + 4 * j) : 0u;
    }
  }
}

// d += the residual values c (load_residual's layout), in fp32.
__device__ __forceinline__ void add_residual(float (&d)[128], const uint32_t (&c)[64]) {
#pragma unroll
  for (int j = 0; j < 32; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t pair = c[2 * j + h];
      const int i = 4 * j + 2 * h;
      d[i] = d[i] + __uint_as_float(pair << 16);
      d[i + 1] = d[i + 1] + __uint_as_float(pair & 0xFFFF0000u);
    }
  }
}

// A consumer thread's keep-bits bytes of tile column col0 for rows row0, row0 + 8 (32 bytes a row as two 16-byte
// words; rows past n read row 0: their stores are clipped). (m / 8) % 32 == 0 and col0 % 256 == 0: 16-byte aligned.
__device__ __forceinline__ void load_mask_rows(uint4 (&w)[2][2], const RankMask& mask, int n, int m, int row0,
                                               int col0) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    const uint4* b = reinterpret_cast<const uint4*>(mask.bits + int64_t(row < n ? row : 0) * (m / 8) + col0 / 8);
    w[h][0] = __ldg(b);
    w[h][1] = __ldg(b + 1);
  }
}

// Byte j (0-31) of a row's 32 keep-bits bytes.
__device__ __forceinline__ uint32_t keep_byte(const uint4 (&w)[2], int j) {
  const uint4& q = w[j / 16];
  const int word = (j % 16) / 4;
  const uint32_t v = word == 0 ? q.x : word == 1 ? q.y : word == 2 ? q.z : q.w;
  return (v >> (8 * (j % 4))) & 0xFFu;
}

// d (the rank block's products alone) times keep_scale or 0 by the thread's keep bits: element (row h, column
// col0 + 8 j + 2 (lane % 4) + c) takes bit 2 (lane % 4) + c of byte j.
__device__ __forceinline__ void mask_rank_block(float (&d)[128], const uint4 (&w)[2][2], float keep_scale) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t byte = keep_byte(w[h], j);
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const float mult = ((byte >> (2 * (lane % 4) + c)) & 1u) != 0 ? keep_scale : 0.0f;
        d[4 * j + 2 * h + c] = d[4 * j + 2 * h + c] * mult;
      }
    }
  }
}
#endif  // SWIFT_SM90A_DEVICE

// kBT: B stored (k, m) (MN-major operand, wgmma's transposed B). n, m, k: D (n, m), A (n, k). kTail: one more
// k-block from map_ta / map_tb (Sm90Gemm's tail_*), after A's (B stored (m, k)) or before them (kBT); kMask (kBT):
// that first block's products masked (RankMask) before A's are added. kResidual: the epilogue adds `res`.
template <bool kBT, bool kTail = false, bool kMask = false, bool kResidual = false>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     const __grid_constant__ CUtensorMap map_d, const __grid_constant__ CUtensorMap map_ta,
                     const __grid_constant__ CUtensorMap map_tb, int n, int m, int k, RankMask mask,
                     EpilogueResidual res) {
  static_assert(!kMask || (kBT && kTail), "the mask is the first block's (B stored (k, m))");
  static_assert(!kResidual || !kBT, "the residual with B stored (m, k)");
#ifdef SWIFT_SM90A_DEVICE
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* epi = smem + size_t(kStages) * kStage;
  uint64_t* full = reinterpret_cast<uint64_t*>(epi + kEpiBytes);
  uint64_t* empty = full + kStages;
  const int wg = warpgroup_index(), tid = threadIdx.x % 128;
  const uint32_t rank = cluster_rank();
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);                  // the producer's arrive (with the stage's bytes, from both CTAs)
      mbar_init(&empty[s], 2 * kCluster);      // one arrive per consumer warpgroup of each CTA
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_sync();  // the peer's barriers are initialised before anything arrives on them or fills its stages
  const int m_tiles = (n + kTileM - 1) / kTileM, n_tiles = (m + kTileN - 1) / kTileN;
  const int cm_tiles = (m_tiles + kCluster - 1) / kCluster, cluster_tiles = cm_tiles * n_tiles;
  const int kblocks_a = (k + kTileK - 1) / kTileK, kblocks = kblocks_a + (kTail ? 1 : 0);
  const int first = static_cast<int>(blockIdx.x) / kCluster, step = static_cast<int>(gridDim.x) / kCluster;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) {
      int it = 0;
      for (int t = first; t < cluster_tiles; t += step) {
        int tcm, tn;
        grouped_tile(t, cm_tiles, n_tiles, kGroupM, tcm, tn);
        const int tm = tcm * kCluster + static_cast<int>(rank);
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          const int s = it % kStages;
          mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
          uint8_t* stage = smem + size_t(s) * kStage;
          mbar_expect_tx(&full[s], kStage);  // boxes past the edges still count whole (zero-filled)
          constexpr uint16_t kBoth = (1u << kCluster) - 1;
          if (kTail && kb == (kBT ? 0 : kblocks_a)) {  // the tail's k-block: the tail matrices' 64 columns / rows
            tma_load_2d(stage, &map_ta, 0, tm * kTileM, &full[s]);
            if constexpr (kBT) {
              for (int nb = int(rank) * 2; nb < int(rank) * 2 + 2; ++nb) {
                tma_load_2d_multicast(stage + kStageA + nb * 8192, &map_tb, tn * kTileN + nb * 64, 0, &full[s], kBoth);
              }
            } else {
              tma_load_2d_multicast(stage + kStageA + rank * (kTileN / kCluster) * 128, &map_tb, 0,
                                    tn * kTileN + int(rank) * (kTileN / kCluster), &full[s], kBoth);
            }
            continue;
          }
          const int ka = kBT && kTail ? kb - 1 : kb;  // A's k-block
          tma_load_2d(stage, &map_a, ka * kTileK, tm * kTileM, &full[s]);
          if constexpr (kBT) {  // this CTA's two of the four 64-column boxes
            for (int nb = int(rank) * 2; nb < int(rank) * 2 + 2; ++nb) {
              tma_load_2d_multicast(stage + kStageA + nb * 8192, &map_b, tn * kTileN + nb * 64, ka * kTileK, &full[s],
                                    kBoth);
            }
          } else {  // this CTA's 128 of the 256 rows
            tma_load_2d_multicast(stage + kStageA + rank * (kTileN / kCluster) * 128, &map_b, ka * kTileK,
                                  tn * kTileN + int(rank) * (kTileN / kCluster), &full[s], kBoth);
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int half = wg - 1, warp = tid / 32, lane = tid % 32;
    float d[128];
    int it = 0;
    uint8_t* boxes = epi + (half * 4 + warp) * (2 * kBoxBytes);
    const uint64_t desc_a0 = desc_k_major(smem + half * 64 * 128);
    const uint64_t desc_b0 = kBT ? desc_mn_major(smem + kStageA, 8192) : desc_k_major(smem + kStageA);
    for (int t = first; t < cluster_tiles; t += step) {
      int tcm, tn;
      grouped_tile(t, cm_tiles, n_tiles, kGroupM, tcm, tn);
      const int tm = tcm * kCluster + static_cast<int>(rank);
      int prev = -1;
      const int row0 = tm * kTileM + half * 64 + warp * 16;  // the warp's first row of D
      uint32_t c[kResidual ? 64 : 1];                        // the thread's residual values (load_residual)
      uint4 keep[2][2];                                      // its keep-bits words (kMask)
      if constexpr (kMask) load_mask_rows(keep, mask, n, m, row0 + lane / 4, tn * kTileN);
      for (int kb = 0; kb < kblocks; ++kb, ++it) {
        const int s = it % kStages;
        if constexpr (kResidual) {  // the residual's loads in flight under the tile's last k-blocks
          if (kb == (kblocks > kResidualLead ? kblocks - kResidualLead : 0)) {
            load_residual(c, res, n, m, row0 + lane / 4, tn * kTileN);
          }
        }
        mbar_wait(&full[s], (it / kStages) & 1);
        const uint64_t desc_a = desc_advance(desc_a0, uint32_t(s * kStage)),
                       desc_b = desc_advance(desc_b0, uint32_t(s * kStage));
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < kTileK / 16; ++kk) {
          const int acc = (kb > 0 || kk > 0) ? 1 : 0;
          if constexpr (kBT) {  // four 64-column boxes 8,192 bytes apart, 16 k-rows a step
            wgmma_m64n256k16_tb(d, desc_advance(desc_a, kk * 32), desc_advance(desc_b, kk * 2048), acc);
          } else {
            wgmma_m64n256k16(d, desc_advance(desc_a, kk * 32), desc_advance(desc_b, kk * 32), acc);
          }
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        if constexpr (kMask) {
          if (kb == 0) {  // the rank block's products alone in d: masked before A's products add onto them
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            mask_rank_block(d, keep, mask.keep_scale);
          }
        }
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");  // the previous k-block's group is done
        if (prev >= 0 && tid < kCluster) mbar_arrive_cluster(&empty[prev], uint32_t(tid));
        prev = s;
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      if (prev >= 0 && tid < kCluster) mbar_arrive_cluster(&empty[prev], uint32_t(tid));
      if constexpr (kResidual) add_residual(d, c);
#pragma unroll
      for (int box = 0; box < kTileN / 64; ++box) {
        uint8_t* buf = boxes + (box % 2) * kBoxBytes;
        if (lane == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        __syncwarp();
        stmatrix_box(d, box, buf, (lane % 8) + 8 * ((lane / 8) % 2), lane / 8);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        if (lane == 0) {
          tma_store_2d(&map_d, buf, tn * kTileN + box * 64, row0);
          asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        }
      }
    }
    if (lane == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
  cluster_sync();  // the peer may still arrive on this CTA's barriers or fill its stages until it is done
#endif  // SWIFT_SM90A_DEVICE
}

// 1 when the device code is sm_90a's (the kernel above has its body), else 0.
__global__ void sm90a_code_kernel(int* out) {
#ifdef SWIFT_SM90A_DEVICE
  *out = 1;
#else
  *out = 0;
#endif
}

std::atomic<int64_t> g_launches{0};

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// The map of a row-major (rows, cols) BF16 matrix with row stride ld, in boxes of box_rows x 64 columns, 128-byte
// swizzle. False when the driver refuses it.
bool make_map(CUtensorMap& map, const void* base, int64_t rows, int64_t cols, int64_t ld, int box_rows) {
  const auto encode = encode_fn();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

struct DeviceFacts {
  bool known = false, available = false;
  int sms = 0;
};
std::mutex g_facts_mutex;
std::vector<DeviceFacts> g_facts;

// The device's facts, found on the first call (may_probe false: an unknown device stays unknown and unavailable).
DeviceFacts facts(int device, bool may_probe = true) {
  std::lock_guard<std::mutex> lock(g_facts_mutex);
  if (device < 0) device = 0;
  if (static_cast<size_t>(device) >= g_facts.size()) g_facts.resize(static_cast<size_t>(device) + 1);
  DeviceFacts& f = g_facts[static_cast<size_t>(device)];
  if (f.known || !may_probe) return f;
  f.known = true;
  int current = 0, major = 0, minor = 0;
  if (cudaGetDevice(&current) != cudaSuccess || cudaSetDevice(device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return f;
  }
  if (major == 9 && minor == 0 && encode_fn() != nullptr) {
    int* flag = nullptr;
    int host = 0;
    if (cudaMalloc(&flag, sizeof(int)) == cudaSuccess) {
      sm90a_code_kernel<<<1, 1>>>(flag);
      if (cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost) != cudaSuccess) host = 0;
      cudaFree(flag);
    }
    cudaGetLastError();
    const auto smem = [](auto kernel) {
      return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBytes)) ==
             cudaSuccess;
    };
    f.available = host == 1 && smem(gemm_sm90_kernel<false>) && smem(gemm_sm90_kernel<true>) &&
                  smem(gemm_sm90_kernel<true, true>) && smem(gemm_sm90_kernel<true, true, true>) &&
                  smem(gemm_sm90_kernel<false, true>) && smem(gemm_sm90_kernel<false, true, false, true>);
    cudaGetLastError();
  }
  cudaSetDevice(current);
  return f;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemm_sm90_available(int device, bool may_probe) { return facts(device, may_probe).available; }

bool gemm_sm90_ready(int device, cudaStream_t stream) {
  if (gemm_sm90_available(device, /*may_probe=*/false)) return true;
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return capturing == cudaStreamCaptureStatusNone && gemm_sm90_available(device);
}

bool gemm_sm90_fits(const Sm90Gemm& g) {
  constexpr int64_t kMaxDim = int64_t(1) << 31;  // the kernel's int coordinates; TMA takes up to 2^32
  if (g.n <= 0 || g.m <= 0 || g.k <= 0 || g.n >= kMaxDim || g.m >= kMaxDim || g.k >= kMaxDim) return false;
  if ((g.n + kTileM - 1) / kTileM * ((g.m + kTileN - 1) / kTileN) >= kMaxDim) return false;  // int tile indices
  if (g.a == nullptr || g.b == nullptr || g.d == nullptr) return false;
  if (!aligned16(g.a) || !aligned16(g.b) || !aligned16(g.d)) return false;
  if (g.lda % 8 != 0 || g.ldb % 8 != 0 || g.ldd % 8 != 0) return false;  // 16-byte row strides
  if (g.lda < g.k || g.ldd < g.m || g.ldb < (g.b_transposed ? g.k : g.m)) return false;
  constexpr int64_t kMaxStride = int64_t(1) << 39;  // TMA: strides below 2^40 bytes
  if (g.lda >= kMaxStride || g.ldb >= kMaxStride || g.ldd >= kMaxStride) return false;
  if (g.residual != nullptr && (!g.b_transposed || !aligned16(g.residual) || g.ldr % 8 != 0 || g.ldr < g.m ||
                                 g.ldr >= kMaxStride || g.m % 2 != 0)) {
    return false;
  }
  const bool tail = g.tail_a != nullptr || g.tail_b != nullptr;
  if (tail && (g.tail_a == nullptr || g.tail_b == nullptr || !aligned16(g.tail_a) || !aligned16(g.tail_b))) return false;
  if (tail && !g.b_transposed && g.m % kTileN != 0) return false;  // the first block's (64, m) rows: whole tiles
  if (g.tail_bits != nullptr && (!tail || g.b_transposed || !aligned16(g.tail_bits))) return false;
  return true;
}

cudaError_t launch_gemm_sm90(const Sm90Gemm& g, int device, cudaStream_t stream) {
  const DeviceFacts f = facts(device, /*may_probe=*/false);  // the caller asked gemm_sm90_available first
  if (!f.available || !gemm_sm90_fits(g)) return cudaErrorInvalidValue;
  if (g.residual != nullptr && g.tail_a == nullptr) return cudaErrorInvalidValue;  // the residual's kernel has a tail
  CUtensorMap map_a, map_b, map_d;
  const bool maps = make_map(map_a, g.a, g.n, g.k, g.lda, kTileM) &&
                    (g.b_transposed ? make_map(map_b, g.b, g.m, g.k, g.ldb, kTileN / kCluster)
                                    : make_map(map_b, g.b, g.k, g.m, g.ldb, 64)) &&
                    make_map(map_d, g.d, g.n, g.m, g.ldd, kBoxRows);
  if (!maps) return cudaErrorInvalidValue;
  CUtensorMap map_ta = map_a, map_tb = map_b;  // unread without a tail
  const bool tail = g.tail_a != nullptr;
  if (tail && !(make_map(map_ta, g.tail_a, g.n, 64, 64, kTileM) &&
                (g.b_transposed ? make_map(map_tb, g.tail_b, g.m, 64, 64, kTileN / kCluster)
                                : make_map(map_tb, g.tail_b, 64, g.m, g.m, 64)))) {
    return cudaErrorInvalidValue;
  }
  const int64_t cluster_tiles = ((g.n + kCluster * kTileM - 1) / (kCluster * kTileM)) * ((g.m + kTileN - 1) / kTileN);
  const int64_t clusters = std::min<int64_t>(cluster_tiles, f.sms / kCluster);
  const int n = static_cast<int>(g.n), m = static_cast<int>(g.m), k = static_cast<int>(g.k);
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(clusters * kCluster));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kCluster;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  const RankMask mask{g.tail_bits, g.tail_keep_scale};
  const EpilogueResidual res{static_cast<const __nv_bfloat16*>(g.residual), g.ldr};
  cudaError_t status;
  const auto go = [&](auto kernel) {
    return cudaLaunchKernelEx(&config, kernel, map_a, map_b, map_d, map_ta, map_tb, n, m, k, mask, res);
  };
  if (g.residual != nullptr) {
    status = go(gemm_sm90_kernel<false, true, false, true>);
  } else if (g.b_transposed) {
    status = tail ? go(gemm_sm90_kernel<false, true>) : go(gemm_sm90_kernel<false>);
  } else if (!tail) {
    status = go(gemm_sm90_kernel<true>);
  } else if (g.tail_bits == nullptr) {
    status = go(gemm_sm90_kernel<true, true>);
  } else {
    status = go(gemm_sm90_kernel<true, true, true>);
  }
  if (status == cudaSuccess) status = cudaGetLastError();
  if (status == cudaSuccess) g_launches.fetch_add(1);
  return status;
}

int64_t gemm_sm90_launches() { return g_launches.load(); }

}  // namespace swift::ops::cuda
