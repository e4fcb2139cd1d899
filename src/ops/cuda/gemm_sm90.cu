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

using namespace sm90;
#endif  // SWIFT_SM90A_DEVICE

// kBT: B stored (k, m) (MN-major operand, wgmma's transposed B). n, m, k: D (n, m), A (n, k).
template <bool kBT>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_sm90_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                     const __grid_constant__ CUtensorMap map_d, int n, int m, int k) {
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
  const int kblocks = (k + kTileK - 1) / kTileK;
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
          tma_load_2d(stage, &map_a, kb * kTileK, tm * kTileM, &full[s]);
          constexpr uint16_t kBoth = (1u << kCluster) - 1;
          if constexpr (kBT) {  // this CTA's two of the four 64-column boxes
            for (int nb = int(rank) * 2; nb < int(rank) * 2 + 2; ++nb) {
              tma_load_2d_multicast(stage + kStageA + nb * 8192, &map_b, tn * kTileN + nb * 64, kb * kTileK, &full[s],
                                    kBoth);
            }
          } else {  // this CTA's 128 of the 256 rows
            tma_load_2d_multicast(stage + kStageA + rank * (kTileN / kCluster) * 128, &map_b, kb * kTileK,
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
      for (int kb = 0; kb < kblocks; ++kb, ++it) {
        const int s = it % kStages;
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
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");  // the previous k-block's group is done
        if (prev >= 0 && tid < kCluster) mbar_arrive_cluster(&empty[prev], uint32_t(tid));
        prev = s;
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
      if (prev >= 0 && tid < kCluster) mbar_arrive_cluster(&empty[prev], uint32_t(tid));
#pragma unroll
      for (int box = 0; box < kTileN / 64; ++box) {
        uint8_t* buf = boxes + (box % 2) * kBoxBytes;
        if (lane == 0) asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
        __syncwarp();
        stmatrix_box(d, box, buf, (lane % 8) + 8 * ((lane / 8) % 2), lane / 8);
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        if (lane == 0) {
          tma_store_2d(&map_d, buf, tn * kTileN + box * 64, tm * kTileM + half * 64 + warp * 16);
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
    f.available = host == 1 &&
                  cudaFuncSetAttribute(gemm_sm90_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kSmemBytes)) == cudaSuccess &&
                  cudaFuncSetAttribute(gemm_sm90_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kSmemBytes)) == cudaSuccess;
    cudaGetLastError();
  }
  cudaSetDevice(current);
  return f;
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemm_sm90_available(int device, bool may_probe) { return facts(device, may_probe).available; }

bool gemm_sm90_fits(const Sm90Gemm& g) {
  constexpr int64_t kMaxDim = int64_t(1) << 31;  // the kernel's int coordinates; TMA takes up to 2^32
  if (g.n <= 0 || g.m <= 0 || g.k <= 0 || g.n >= kMaxDim || g.m >= kMaxDim || g.k >= kMaxDim) return false;
  if ((g.n + kTileM - 1) / kTileM * ((g.m + kTileN - 1) / kTileN) >= kMaxDim) return false;  // int tile indices
  if (g.a == nullptr || g.b == nullptr || g.d == nullptr) return false;
  if (!aligned16(g.a) || !aligned16(g.b) || !aligned16(g.d)) return false;
  if (g.lda % 8 != 0 || g.ldb % 8 != 0 || g.ldd % 8 != 0) return false;  // 16-byte row strides
  if (g.lda < g.k || g.ldd < g.m || g.ldb < (g.b_transposed ? g.k : g.m)) return false;
  constexpr int64_t kMaxStride = int64_t(1) << 39;  // TMA: strides below 2^40 bytes
  return g.lda < kMaxStride && g.ldb < kMaxStride && g.ldd < kMaxStride;
}

cudaError_t launch_gemm_sm90(const Sm90Gemm& g, int device, cudaStream_t stream) {
  const DeviceFacts f = facts(device, /*may_probe=*/false);  // the caller asked gemm_sm90_available first
  if (!f.available || !gemm_sm90_fits(g)) return cudaErrorInvalidValue;
  CUtensorMap map_a, map_b, map_d;
  const bool maps = make_map(map_a, g.a, g.n, g.k, g.lda, kTileM) &&
                    (g.b_transposed ? make_map(map_b, g.b, g.m, g.k, g.ldb, kTileN / kCluster)
                                    : make_map(map_b, g.b, g.k, g.m, g.ldb, 64)) &&
                    make_map(map_d, g.d, g.n, g.m, g.ldd, kBoxRows);
  if (!maps) return cudaErrorInvalidValue;
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
  cudaError_t status = g.b_transposed
                           ? cudaLaunchKernelEx(&config, gemm_sm90_kernel<false>, map_a, map_b, map_d, n, m, k)
                           : cudaLaunchKernelEx(&config, gemm_sm90_kernel<true>, map_a, map_b, map_d, n, m, k);
  if (status == cudaSuccess) status = cudaGetLastError();
  if (status == cudaSuccess) g_launches.fetch_add(1);
  return status;
}

int64_t gemm_sm90_launches() { return g_launches.load(); }

}  // namespace swift::ops::cuda
