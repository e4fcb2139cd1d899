// ops/cuda/gemm_sm90.cu — our own Hopper GEMM (gemm_sm90.cuh): D (n, m) BF16 = A (n, k) @ op(B), fp32 accumulation.
// The kernel of scripts/device/probe_wgmma_gemm.cu's `-DEPI=3` form (docs/PERFORMANCE.md run 23): cuBLASLt's bits on
// every 7B shape, its speed on its own tile with constant operands, 0.96x of it over the 7B layer with random ones.
//
// Invariants:
//  - A CTA computes a 128 x 256 tile of D, K in blocks of 64 BF16 (one 128-byte swizzle row). Warpgroup 0's first
//    thread fills a ring of kStages shared-memory stages with TMA (A's 128 x 64 box; B's 256 x 64, or four 64 x 64
//    boxes when B is stored (k, m)), each stage completing on its `full` mbarrier; warpgroups 1 and 2 take rows
//    0-63 and 64-127 of the tile (wgmma m64n256k16, 128 fp32 accumulators a thread) and release a stage on its
//    `empty` mbarrier once the wgmma reading it has completed.
//  - Persistent CTAs (one per SM at most) walk the tiles in groups of kGroupM tile rows, down the rows first (the B
//    tiles of a group stay in L2); stage s of a CTA's it-th k-block is it % kStages with phase (it / kStages) % 2.
//  - Epilogue: each consumer warp rounds its 16 rows to BF16 (round to nearest even) into its own two 16 x 64 staging
//    boxes (stmatrix, 128-byte swizzle) and its lane 0 stores them with TMA; a box is rewritten only after the store
//    that read it (bulk async-group wait), and no CTA exits with a store in flight.
//  - Device code only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); other targets compile an empty kernel and
//    gemm_sm90_available says no.
#include "ops/cuda/gemm_sm90.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

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
constexpr int kBoxRows = 16, kBoxBytes = kBoxRows * 128;  // a consumer warp's staging box: 16 rows x 64 columns
constexpr int kEpiBytes = 8 * 2 * kBoxBytes;       // 8 consumer warps x 2 boxes
constexpr size_t kSmemBytes = size_t(kStages) * kStage + kEpiBytes + 1024 /* alignment */ + 2 * kStages * 8;

#ifdef SWIFT_SM90A_DEVICE
constexpr int kGroupM = 16;  // tile rows per group of the walk (grouped_tile)

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
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(&full[s], 1);   // the producer's arrive (with the stage's bytes)
      mbar_init(&empty[s], 2);  // one arrive per consumer warpgroup
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int m_tiles = (n + kTileM - 1) / kTileM, n_tiles = (m + kTileN - 1) / kTileN;
  const int tiles = m_tiles * n_tiles, kblocks = (k + kTileK - 1) / kTileK;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid != 0) return;
    int it = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      int tm, tn;
      grouped_tile(t, m_tiles, n_tiles, kGroupM, tm, tn);
      for (int kb = 0; kb < kblocks; ++kb, ++it) {
        const int s = it % kStages;
        mbar_wait(&empty[s], ((it / kStages) & 1) ^ 1);
        uint8_t* stage = smem + size_t(s) * kStage;
        mbar_expect_tx(&full[s], kStage);  // boxes past the edges still count whole (zero-filled)
        tma_load_2d(stage, &map_a, kb * kTileK, tm * kTileM, &full[s]);
        if constexpr (kBT) {
          for (int nb = 0; nb < kTileN / 64; ++nb) {
            tma_load_2d(stage + kStageA + nb * 8192, &map_b, tn * kTileN + nb * 64, kb * kTileK, &full[s]);
          }
        } else {
          tma_load_2d(stage + kStageA, &map_b, kb * kTileK, tn * kTileN, &full[s]);
        }
      }
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int half = wg - 1, warp = tid / 32, lane = tid % 32;
  float d[128];
  int it = 0;
  uint8_t* boxes = epi + (half * 4 + warp) * (2 * kBoxBytes);
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int tm, tn;
    grouped_tile(t, m_tiles, n_tiles, kGroupM, tm, tn);
    int prev = -1;
    for (int kb = 0; kb < kblocks; ++kb, ++it) {
      const int s = it % kStages;
      mbar_wait(&full[s], (it / kStages) & 1);
      const uint8_t* a_tile = smem + size_t(s) * kStage + half * 64 * 128;
      const uint8_t* b_tile = smem + size_t(s) * kStage + kStageA;
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        const int acc = (kb > 0 || kk > 0) ? 1 : 0;
        if constexpr (kBT) {  // four 64-column boxes 8,192 bytes apart, 16 k-rows a step
          wgmma_m64n256k16_tb(d, desc_k_major(a_tile + kk * 32), desc_mn_major(b_tile + kk * 2048, 8192), acc);
        } else {
          wgmma_m64n256k16(d, desc_k_major(a_tile + kk * 32), desc_k_major(b_tile + kk * 32), acc);
        }
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");  // the previous k-block's group is done
      if (prev >= 0 && tid == 0) mbar_arrive(&empty[prev]);
      prev = s;
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    if (prev >= 0 && tid == 0) mbar_arrive(&empty[prev]);
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
                    (g.b_transposed ? make_map(map_b, g.b, g.m, g.k, g.ldb, kTileN)
                                    : make_map(map_b, g.b, g.k, g.m, g.ldb, 64)) &&
                    make_map(map_d, g.d, g.n, g.m, g.ldd, kBoxRows);
  if (!maps) return cudaErrorInvalidValue;
  const int64_t tiles = ((g.n + kTileM - 1) / kTileM) * ((g.m + kTileN - 1) / kTileN);
  const int grid = static_cast<int>(tiles < f.sms ? tiles : f.sms);
  const int n = static_cast<int>(g.n), m = static_cast<int>(g.m), k = static_cast<int>(g.k);
  if (g.b_transposed) {
    gemm_sm90_kernel<false><<<grid, kThreads, kSmemBytes, stream>>>(map_a, map_b, map_d, n, m, k);
  } else {
    gemm_sm90_kernel<true><<<grid, kThreads, kSmemBytes, stream>>>(map_a, map_b, map_d, n, m, k);
  }
  const cudaError_t status = cudaGetLastError();
  if (status == cudaSuccess) g_launches.fetch_add(1);
  return status;
}

int64_t gemm_sm90_launches() { return g_launches.load(); }

}  // namespace swift::ops::cuda
