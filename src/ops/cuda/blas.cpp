// ops/cuda/blas.cpp — cuBLASLt matrix products in row-major terms (see blas.h).
//
// Row-major D (n, m) = op(A) op(B) is, read column-major, D^T (m, n) = op(B)^T op(A)^T: cuBLASLt's "A" is our B
// and its "B" is our A, with the same transposition flags, and D^T's rows are our columns (so the bias, one value
// per column of our D, is cuBLASLt's per-row bias vector).
//
// Invariants:
//  - One handle + 32 MiB workspace per device (accounted as workspace), never freed (process lifetime: freeing at
//    exit would race the CUDA runtime's own teardown).
//  - A plan (descriptors, layouts, algorithm) is cached per key: shape, strides, dtypes, transposes, epilogue and
//    the alignment in bytes that the pointers and strides guarantee (cuBLASLt kernels may assume up to 256-byte
//    alignment; we declare what really holds, so views and odd strides are safe).
//  - The bias goes into the epilogue when the pointer is 16-byte aligned, its dtype is D's (or F32) and the
//    heuristic finds an algorithm; else the product runs plain and launch_scale_add_bias adds it.
//  - Where the heuristic has no algorithm (it may refuse odd alignments), cublasGemmEx runs the same product
//    (fp32 compute, default math: no TF32).
//  - Calls are serialised per device by a mutex (descriptors carry the bias pointer, set per call).
//  - SWIFT_GEMM_AUTOTUNE (read once; on by default, =0 takes the heuristic's first algorithm): a plan's first call
//    takes the algorithm recorded for its product on this device in the autotune record (ops/gemm_choice_cache.h:
//    gemm_choice_cache_path(), by its rank in the heuristic's list), else times up to kTuneAlgos of the heuristic's
//    algorithms on its real operands (D written to a scratch buffer, C = the real D read, so the call's result is
//    untouched), keeps the fastest and records it. The first process on a machine chooses by timing; every later one
//    reads its choices: the same algorithms, the same bits (without a record file each process times again and two
//    may differ). Timing is skipped while the stream is being captured into a CUDA graph (no allocation or
//    synchronisation allowed there).
//  - SWIFT_GEMM_SM90 (read once; off by default, =1): the products our own Hopper kernel fits (gemm_sm90.cuh: BF16
//    in and out, alpha 1, beta 0, A not transposed, no bias, TMA-addressable strides, an sm_90 device of an sm_90a
//    build) run there instead, without a plan; every other product keeps the paths above.
#include "ops/cuda/blas.h"

#include <cublas_v2.h>
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/memory.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/env_switch.h"
#include "ops/cuda/gemm_sm90.cuh"
#include "ops/cuda/kernels_matmul.cuh"
#include "ops/gemm_choice_cache.h"

namespace swift::ops::cuda {

namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

cudaDataType_t cuda_type(int dtype) {
  switch (dtype) {
    case 1: return CUDA_R_16BF;
    case 2: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

int elem_bytes(int dtype) { return dtype == 0 ? 4 : 2; }

// Largest power of two <= 256 dividing both the address and the row stride in bytes.
int alignment_of(const void* p, int64_t ld_bytes) {
  uint64_t v = reinterpret_cast<uint64_t>(p) | static_cast<uint64_t>(ld_bytes) | 256u;
  return static_cast<int>(v & (~v + 1));
}

struct Key {
  bool ta, tb;
  int64_t n, m, k, lda, ldb, ldd;
  int ab, d, bias_dtype;  // bias_dtype -1: no bias epilogue
  int align_a, align_b, align_d;
  auto tie() const { return std::tie(ta, tb, n, m, k, lda, ldb, ldd, ab, d, bias_dtype, align_a, align_b, align_d); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
  // The product's name in the autotune record.
  std::string str() const {
    return fmt::format("t{}{} n{} m{} k{} ld{},{},{} ab{} d{} bias{} al{},{},{}", ta ? 1 : 0, tb ? 1 : 0, n, m, k, lda,
                       ldb, ldd, ab, d, bias_dtype, align_a, align_b, align_d);
  }
};

constexpr int kTuneAlgos = 8;

EnvSwitch& autotune_switch() {
  static EnvSwitch sw("SWIFT_GEMM_AUTOTUNE", true);
  return sw;
}
bool autotune_enabled() { return gemm_autotune_enabled(); }

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;  // false: the heuristic found nothing (with a bias epilogue: fall back to the plain product)
  std::vector<cublasLtMatmulAlgo_t> candidates;  // SWIFT_GEMM_AUTOTUNE: the heuristic's choices, until timed
};

struct DeviceBlas {
  int device = 0;
  std::string name;  // the device in the autotune record (GPU, compute capability, cuBLASLt version), set on first use
  cublasLtHandle_t handle = nullptr;
  cublasHandle_t fallback = nullptr;  // cublasGemmEx, for what cuBLASLt's heuristic has no algorithm for
  void* workspace = nullptr;
  std::map<Key, Plan> plans;
  std::mutex mutex;
};

void check_lt(const char* op, cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    fail("op {}: cuBLASLt {} failed: {} ({})", op, call, cublasLtGetStatusName(status), cublasLtGetStatusString(status));
  }
}

DeviceBlas& device_blas(const char* op, int device) {
  static std::array<DeviceBlas*, 64> all{};
  static std::mutex mutex;
  if (device < 0 || device >= static_cast<int>(all.size())) fail("op {}: CUDA device index {} out of range", op, device);
  std::lock_guard<std::mutex> lock(mutex);
  if (all[device] == nullptr) {
    auto* b = new DeviceBlas();  // process lifetime (see the head comment)
    check_lt(op, cublasLtCreate(&b->handle), "cublasLtCreate");
    check_lt(op, cublasCreate(&b->fallback), "cublasCreate");
    cudaError_t status = cudaMalloc(&b->workspace, kWorkspaceBytes);
    if (status != cudaSuccess) {
      cudaGetLastError();
      fail("op {}: cannot allocate the {} MiB cuBLASLt workspace on cuda:{}: {}", op, kWorkspaceBytes >> 20, device,
           cudaGetErrorString(status));
    }
    memory_record_alloc(1, MemoryCategory::Workspace, kWorkspaceBytes);
    b->device = device;
    all[device] = b;
  }
  return *all[device];
}

// Builds the plan of `key`; with bias_dtype >= 0 the descriptor carries the bias epilogue.
Plan make_plan(const char* op, DeviceBlas& blas, const Key& key) {
  Plan plan;
  const cudaDataType_t ab = cuda_type(key.ab), dt = cuda_type(key.d);
  const cublasComputeType_t compute = CUBLAS_COMPUTE_32F;  // fp32 accumulation; pure fp32 for F32 (no TF32)
  check_lt(op, cublasLtMatmulDescCreate(&plan.desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t opa = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;  // cuBLASLt's A is our B
  const cublasOperation_t opb = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(op, cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)), "set TRANSA");
  check_lt(op, cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)), "set TRANSB");
  if (key.bias_dtype >= 0) {
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    check_lt(op, cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
             "set EPILOGUE");
    const cudaDataType_t bt = cuda_type(key.bias_dtype);
    check_lt(op, cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)),
             "set BIAS_DATA_TYPE");
  }
  // Stored shapes, column-major: our B is (k, m) row-major = (m x k) column-major, or (k x m) when trans_b.
  const uint64_t a_rows = key.tb ? key.k : key.m, a_cols = key.tb ? key.m : key.k;
  const uint64_t b_rows = key.ta ? key.n : key.k, b_cols = key.ta ? key.k : key.n;
  check_lt(op, cublasLtMatrixLayoutCreate(&plan.la, ab, a_rows, a_cols, key.ldb), "layout A");
  check_lt(op, cublasLtMatrixLayoutCreate(&plan.lb, ab, b_rows, b_cols, key.lda), "layout B");
  check_lt(op, cublasLtMatrixLayoutCreate(&plan.ld, dt, key.m, key.n, key.ldd), "layout D");
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(op, cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = kWorkspaceBytes;
  const uint32_t al_a = static_cast<uint32_t>(key.align_b), al_b = static_cast<uint32_t>(key.align_a),
                 al_d = static_cast<uint32_t>(key.align_d);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d));
  std::array<cublasLtMatmulHeuristicResult_t, kTuneAlgos> results{};
  int returned = 0;
  const int wanted = autotune_enabled() ? kTuneAlgos : 1;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(blas.handle, plan.desc, plan.la, plan.lb, plan.ld,
                                                               plan.ld, pref, wanted, results.data(), &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status == CUBLAS_STATUS_SUCCESS && returned > 0 && results[0].state == CUBLAS_STATUS_SUCCESS) {
    plan.algo = results[0].algo;
    plan.ok = true;
    for (int i = 1; i < returned && wanted > 1; ++i) {
      if (results[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS) {
        if (plan.candidates.empty()) plan.candidates.push_back(results[0].algo);
        plan.candidates.push_back(results[static_cast<size_t>(i)].algo);
      }
    }
  }
  return plan;
}

// The process's autotune record (null: no file): gemm_choice_cache_path() on first use, or set_gemm_autotune_record's.
std::mutex g_record_mutex;
std::unique_ptr<GemmChoiceCache> g_record;
bool g_record_chosen = false;

GemmChoiceCache* choice_cache() {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  if (!g_record_chosen) {
    const std::string path = gemm_choice_cache_path();
    if (!path.empty()) g_record = std::make_unique<GemmChoiceCache>(path);
    g_record_chosen = true;
  }
  return g_record.get();  // never replaced while a product runs (tests set it between products)
}

// SWIFT_GEMM_AUTOTUNE: the recorded choice for this product on this device, else times plan->candidates on these
// operands (D to a scratch buffer, C = args.c or args.d), keeps the fastest in plan->algo and records its rank; the
// candidates are dropped either way. Not timed while the stream is being captured.
void autotune(const char* op, DeviceBlas& blas, Plan& plan, const Key& key, const MatmulArgs& args, cudaStream_t s) {
  std::vector<cublasLtMatmulAlgo_t> candidates;
  candidates.swap(plan.candidates);
  GemmChoiceCache* cache = choice_cache();
  const std::string product = cache != nullptr ? key.str() : std::string();
  if (cache != nullptr && blas.name.empty()) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, blas.device) != cudaSuccess) {
      cudaGetLastError();
      fail("op {}: cudaGetDeviceProperties of cuda:{} failed", op, blas.device);
    }
    blas.name = fmt::format("{} sm_{}{} cublasLt {}", prop.name, prop.major, prop.minor, cublasLtGetVersion());
  }
  if (cache != nullptr) {
    const std::optional<int> rank = cache->find(blas.name, product);
    if (rank && *rank < static_cast<int>(candidates.size())) {
      plan.algo = candidates[static_cast<size_t>(*rank)];
      return;
    }
  }
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    return;
  }
  const size_t bytes = static_cast<size_t>(args.ldd) * static_cast<size_t>(args.n) * elem_bytes(args.d_dtype);
  void* scratch = nullptr;
  if (cudaMallocAsync(&scratch, bytes, s) != cudaSuccess) {  // no room to time: keep the heuristic's first choice
    cudaGetLastError();
    return;
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  const float alpha = args.alpha, beta = args.beta;
  const void* c = args.c != nullptr ? args.c : args.d;
  float best_ms = 0.0f;
  int best = -1;  // the heuristic's first choice stays when no candidate could be timed (not recorded)
  for (size_t i = 0; i < candidates.size(); ++i) {
    auto run = [&] {
      return cublasLtMatmul(blas.handle, plan.desc, &alpha, args.b, plan.la, args.a, plan.lb, &beta, c, plan.ld,
                            scratch, plan.ld, &candidates[i], blas.workspace, kWorkspaceBytes, s);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;  // an algorithm that refuses these operands is never chosen
    cudaEventRecord(start, s);
    bool ok = true;
    for (int rep = 0; rep < 3 && ok; ++rep) ok = run() == CUBLAS_STATUS_SUCCESS;
    cudaEventRecord(stop, s);
    float ms = 0.0f;
    if (!ok || cudaEventSynchronize(stop) != cudaSuccess || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
      cudaGetLastError();
      continue;
    }
    if (best_ms == 0.0f || ms < best_ms) {
      best_ms = ms;
      best = static_cast<int>(i);
      plan.algo = candidates[i];
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const cudaError_t freed = cudaFreeAsync(scratch, s);
  if (freed != cudaSuccess) fail("op {}: cudaFreeAsync of the GEMM autotune scratch failed: {}", op, cudaGetErrorString(freed));
  if (cache != nullptr && best >= 0) cache->record(blas.name, product, best);
}

}  // namespace

bool gemm_autotune_enabled() { return autotune_switch().on(); }

void set_gemm_autotune(bool on) { autotune_switch().set(on); }

void set_gemm_autotune_record(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_record_mutex);
  g_record = path.empty() ? nullptr : std::make_unique<GemmChoiceCache>(path);
  g_record_chosen = true;
}

// D := C (n rows of m elements, row stride ldd), for the paths that take C = D only.
void copy_c_into_d(const char* op, const MatmulArgs& args, cudaStream_t s) {
  const size_t row = static_cast<size_t>(args.m) * elem_bytes(args.d_dtype);
  const size_t pitch = static_cast<size_t>(args.ldd) * elem_bytes(args.d_dtype);
  const cudaError_t st = cudaMemcpy2DAsync(args.d, pitch, args.c, pitch, row, static_cast<size_t>(args.n),
                                           cudaMemcpyDeviceToDevice, s);
  if (st != cudaSuccess) fail("op {}: cudaMemcpy2DAsync of C into D failed: {}", op, cudaGetErrorString(st));
}

namespace {

EnvSwitch& sm90_switch() {
  static EnvSwitch sw("SWIFT_GEMM_SM90", false);
  return sw;
}

}  // namespace

bool gemm_sm90_enabled() { return sm90_switch().on(); }

void set_gemm_sm90(bool on) { sm90_switch().set(on); }

namespace {

// SWIFT_GEMM_SM90: our own Hopper kernel (gemm_sm90.cuh) takes the products it fits: BF16 A, B and D, alpha 1, beta 0,
// A not transposed, no bias, on an sm_90 device of an sm_90a build. False: cuBLASLt runs it.
bool run_sm90(const char* op, int device, const MatmulArgs& args, cudaStream_t s) {
  if (!gemm_sm90_enabled() || args.ab_dtype != 1 || args.d_dtype != 1 || args.alpha != 1.0f || args.beta != 0.0f ||
      args.trans_a || args.bias != nullptr || args.k <= 0) {
    return false;
  }
  Sm90Gemm g;
  g.n = args.n;
  g.m = args.m;
  g.k = args.k;
  g.a = args.a;
  g.lda = args.lda;
  g.b = args.b;
  g.ldb = args.ldb;
  g.b_transposed = args.trans_b;
  g.d = args.d;
  g.ldd = args.ldd;
  if (!gemm_sm90_fits(g)) return false;
  if (!gemm_sm90_ready(device, s)) return false;
  const cudaError_t st = launch_gemm_sm90(g, device, s);
  if (st != cudaSuccess) {
    fail("op {}: SWIFT_GEMM_SM90's kernel failed on D ({}, {}) = A ({}, {}) x B stored {}, row strides lda {}, ldb {}, "
         "ldd {}: {} (SWIFT_GEMM_SM90=0 leaves the product to cuBLASLt)",
         op, g.n, g.m, g.n, g.k, g.b_transposed ? "(m, k)" : "(k, m)", g.lda, g.ldb, g.ldd, cudaGetErrorString(st));
  }
  return true;
}

}  // namespace

void matmul(const char* op, int device, const MatmulArgs& in) {
  if (in.n <= 0 || in.m <= 0) return;
  cudaStream_t s = stream(device);
  if (run_sm90(op, device, in, s)) return;
  MatmulArgs args = in;
  if (args.c == args.d) args.c = nullptr;
  // A separate C goes to cuBLASLt as is when it is aligned as D (the plans' alignment is D's for both); else, and
  // for the paths without a C of their own (empty inner dimension, cublasGemmEx), it is copied into D first.
  if (args.c != nullptr && (args.k <= 0 || args.beta == 0.0f ||
                            alignment_of(args.c, args.ldd * elem_bytes(args.d_dtype)) <
                                alignment_of(args.d, args.ldd * elem_bytes(args.d_dtype)))) {
    if (args.beta != 0.0f) copy_c_into_d(op, args, s);
    args.c = nullptr;
  }
  if (args.k <= 0) {  // empty inner dimension: D = beta * D (+ bias)
    const cudaError_t st = launch_scale_add_bias(args.d, args.d_dtype, args.n, args.m, args.ldd, args.beta, args.bias,
                                                 args.bias_dtype, s);
    if (st != cudaSuccess) fail("op {}: CUDA kernel launch failed: {}", op, cudaGetErrorString(st));
    return;
  }
  const bool d16 = args.d_dtype != 0;
  if (args.ab_dtype == 0 && d16) fail("op {}: cuBLASLt has no F32 x F32 -> 16-bit product", op);
  if (d16 && args.d_dtype != args.ab_dtype) fail("op {}: a 16-bit D must have A's dtype", op);
  DeviceBlas& blas = device_blas(op, device);
  const int eb = elem_bytes(args.ab_dtype), ed = elem_bytes(args.d_dtype);
  Key key{args.trans_a, args.trans_b, args.n, args.m, args.k, args.lda, args.ldb, args.ldd, args.ab_dtype,
          args.d_dtype, -1, alignment_of(args.a, args.lda * eb), alignment_of(args.b, args.ldb * eb),
          alignment_of(args.d, args.ldd * ed)};
  const bool bias_epilogue = args.bias != nullptr && (reinterpret_cast<uint64_t>(args.bias) % 16 == 0) &&
                             (args.bias_dtype == args.d_dtype || args.bias_dtype == 0);
  std::lock_guard<std::mutex> lock(blas.mutex);
  Plan* plan = nullptr;
  Key plan_key = key;  // the key of the plan that runs (with the bias epilogue's dtype when it does)
  bool bias_done = false;
  if (bias_epilogue) {
    Key bias_key = key;
    bias_key.bias_dtype = args.bias_dtype;
    auto it = blas.plans.find(bias_key);
    if (it == blas.plans.end()) it = blas.plans.emplace(bias_key, make_plan(op, blas, bias_key)).first;
    if (it->second.ok) {
      plan = &it->second;
      check_lt(op, cublasLtMatmulDescSetAttribute(it->second.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &args.bias,
                                                  sizeof(args.bias)),
               "set BIAS_POINTER");
      bias_done = true;
      plan_key = bias_key;
    }
  }
  if (plan == nullptr) {
    auto it = blas.plans.find(key);
    if (it == blas.plans.end()) it = blas.plans.emplace(key, make_plan(op, blas, key)).first;
    plan = &it->second;
  }
  if (!plan->candidates.empty()) autotune(op, blas, *plan, plan_key, args, s);
  const float alpha = args.alpha, beta = args.beta;
  if (!plan->ok) {  // no cuBLASLt algorithm (odd alignment): cublasGemmEx, same column-major mapping, fp32 compute
    if (args.c != nullptr) copy_c_into_d(op, args, s);
    check_lt(op, cublasSetStream(blas.fallback, s), "cublasSetStream");
    check_lt(op,
             cublasGemmEx(blas.fallback, args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                          args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(args.m), static_cast<int>(args.n),
                          static_cast<int>(args.k), &alpha, args.b, cuda_type(args.ab_dtype), static_cast<int>(args.ldb),
                          args.a, cuda_type(args.ab_dtype), static_cast<int>(args.lda), &beta, args.d,
                          cuda_type(args.d_dtype), static_cast<int>(args.ldd), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx");
  } else {
    check_lt(op,
             cublasLtMatmul(blas.handle, plan->desc, &alpha, args.b, plan->la, args.a, plan->lb, &beta,
                            args.c != nullptr ? args.c : args.d, plan->ld, args.d, plan->ld, &plan->algo,
                            blas.workspace, kWorkspaceBytes, s),
             "cublasLtMatmul");
  }
  if (args.bias != nullptr && !bias_done) {
    const cudaError_t st = launch_scale_add_bias(args.d, args.d_dtype, args.n, args.m, args.ldd, 1.0f, args.bias,
                                                 args.bias_dtype, s);
    if (st != cudaSuccess) fail("op {}: CUDA kernel launch failed: {}", op, cudaGetErrorString(st));
  }
}

}  // namespace swift::ops::cuda
