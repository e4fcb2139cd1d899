// scripts/device/probe_lm_head.cu — how fast does cuBLASLt run the 7B LM head's two products, and does their F32
// output cost them? The cross-entropy (ops/cuda/ops_cross_entropy.cpp) runs, per row chunk of R tokens,
//   logits  (R, V) F32 = H (R, C) W^T, W (V, C) BF16              ("TN": B stored (m, k))
//   dhidden (R, C) F32 = P (R, V; row stride 2 ld) W              ("NN": B stored (k, m))
// and the events profile puts them at ~650 TFLOP/s where the layers' frozen products run at ~760 (run 23-28).
// A probe, not product code (nvcc alone): for each product, D in F32 and in BF16, the fastest of cuBLASLt's top 16
// heuristic algorithms (as blas.cpp's autotune, which takes 8), then that algorithm held back to back for HOLD_MS
// (default 1500) to read its rate at the power cap; a layer product (gate: 8192 x 18944 x 3584) held the same way
// as the reference. Prints ms, TFLOP/s and the algorithm's tile. Exit status 0 unless a CUDA / cuBLASLt call fails.
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o /tmp/probe_lm_head scripts/device/probe_lm_head.cu -lcublasLt
//   /tmp/probe_lm_head [rows per chunk, default 1638]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e_)); std::exit(1); } } while (0)
#define LK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { std::printf("cuBLASLt %s at %d: %d\n", #x, __LINE__, (int)s_); std::exit(1); } } while (0)

namespace {

__global__ void fill_random(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16(float(h & 0xffff) / 32768.0f - 1.0f);
  }
}

double wall_ms() {
  timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return double(t.tv_sec) * 1e3 + double(t.tv_nsec) * 1e-6;
}

struct Product {
  const char* name;
  int64_t n, m, k;   // row-major D (n, m) = A (n, k) op(B)
  bool b_mk;         // B stored (m, k) (x W^T); else (k, m)
  int64_t lda, ldd;  // row strides in elements
};

// Row-major D (n, m) = A op(B) is column-major D^T (m, n) = op(B)^T A^T: cuBLASLt's A is our B.
void run_product(cublasLtHandle_t lt, void* ws, size_t ws_bytes, const Product& p, const __nv_bfloat16* a,
                 const __nv_bfloat16* b, void* d, bool d_f32, double hold_ms, cudaStream_t s) {
  cublasLtMatmulDesc_t op;
  LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = p.b_mk ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  LK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  cublasLtMatrixLayout_t la, lb, ld;
  if (p.b_mk) {
    LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.k, p.m, p.k));
  } else {
    LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, p.m, p.k, p.m));
  }
  LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, p.k, p.n, p.lda));
  LK(cublasLtMatrixLayoutCreate(&ld, d_f32 ? CUDA_R_32F : CUDA_R_16BF, p.m, p.n, p.ldd));
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t results[16];
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, pref, 16, results, &found));
  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto launch = [&](int i) {
    LK(cublasLtMatmul(lt, op, &alpha, b, la, a, lb, &beta, d, ld, d, ld, &results[i].algo, ws, ws_bytes, s));
  };
  const double flop = 2.0 * double(p.n) * double(p.m) * double(p.k);
  float best = 1e30f;
  int best_i = 0;
  std::vector<float> each(found);
  for (int i = 0; i < found; ++i) {
    launch(i);
    CK(cudaEventRecord(e0, s));
    for (int r = 0; r < 5; ++r) launch(i);
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    each[i] = ms / 5;
    if (each[i] < best) best = each[i], best_i = i;
  }
  auto config = [&](cublasLtMatmulAlgoConfigAttributes_t attr) {
    uint32_t v = 0;
    size_t got = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(&results[best_i].algo, attr, &v, sizeof(v), &got) != CUBLAS_STATUS_SUCCESS)
      return -1;
    return int(v);
  };
  // Held: the best algorithm back to back, after a moment at the cap.
  CK(cudaStreamSynchronize(s));
  double t0 = wall_ms();
  long count = 0;
  CK(cudaEventRecord(e0, s));
  while (wall_ms() - t0 < hold_ms) {
    for (int i = 0; i < 8; ++i) launch(best_i);
    count += 8;
    CK(cudaStreamSynchronize(s));
  }
  CK(cudaEventRecord(e1, s));
  CK(cudaEventSynchronize(e1));
  float held_ms;
  CK(cudaEventElapsedTime(&held_ms, e0, e1));
  const double held = held_ms / count;
  std::printf("%-22s D %-4s n %6ld m %6ld k %6ld | best of %2d: %7.3f ms %6.1f TFLOP/s (first %7.3f) | held %ld: "
              "%7.3f ms %6.1f TFLOP/s | tile %d stages %d cluster %d split-k %d swizzle %d\n",
              p.name, d_f32 ? "F32" : "BF16", long(p.n), long(p.m), long(p.k), found, best, flop / best / 1e9, each[0],
              count, held, flop / held / 1e9, config(CUBLASLT_ALGO_CONFIG_TILE_ID),
              config(CUBLASLT_ALGO_CONFIG_STAGES_ID), config(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID),
              config(CUBLASLT_ALGO_CONFIG_SPLITK_NUM), config(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING));
  std::fflush(stdout);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatmulDescDestroy(op);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? std::atol(argv[1]) : 1638;
  const double hold_ms = std::getenv("HOLD_MS") ? std::atof(std::getenv("HOLD_MS")) : 1500.0;
  const int64_t V = 152064, C = 3584, F = 18944, ldv = (V + 3) / 4 * 4;
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  cublasLtHandle_t lt;
  LK(cublasLtCreate(&lt));
  const size_t ws_bytes = size_t(32) << 20;
  void* ws;
  CK(cudaMalloc(&ws, ws_bytes));
  __nv_bfloat16 *w, *h, *logits16, *x, *wg;
  float* logits32;
  float* dh32;
  CK(cudaMalloc(&w, size_t(V) * C * 2));
  CK(cudaMalloc(&h, size_t(8192) * C * 2));
  CK(cudaMalloc(&logits32, size_t(rows) * ldv * 4));  // also P's BF16 rows (stride 2 ldv) for dhidden
  CK(cudaMalloc(&logits16, size_t(rows) * ldv * 2));
  CK(cudaMalloc(&dh32, size_t(8192) * F * 4));
  CK(cudaMalloc(&x, size_t(8192) * C * 2));
  CK(cudaMalloc(&wg, size_t(F) * C * 2));
  fill_random<<<1024, 256, 0, s>>>(w, size_t(V) * C, 1u);
  fill_random<<<1024, 256, 0, s>>>(h, size_t(8192) * C, 2u);
  fill_random<<<1024, 256, 0, s>>>(reinterpret_cast<__nv_bfloat16*>(logits32), size_t(rows) * ldv * 2, 3u);
  fill_random<<<1024, 256, 0, s>>>(x, size_t(8192) * C, 4u);
  fill_random<<<1024, 256, 0, s>>>(wg, size_t(F) * C, 5u);
  CK(cudaStreamSynchronize(s));
  const auto* p16 = reinterpret_cast<const __nv_bfloat16*>(logits32);
  std::printf("rows per chunk %ld, V %ld, C %ld, hold %.0f ms\n", long(rows), long(V), long(C), hold_ms);
  const Product gate{"layer gate x W^T", 8192, F, C, true, C, F};
  run_product(lt, ws, ws_bytes, gate, x, wg, dh32, false, hold_ms, s);
  const Product logits{"logits H W^T", rows, V, C, true, C, ldv};
  run_product(lt, ws, ws_bytes, logits, h, w, logits32, true, hold_ms, s);
  run_product(lt, ws, ws_bytes, logits, h, w, logits16, false, hold_ms, s);
  const Product dhidden{"dhidden P W", rows, C, V, false, 2 * ldv, C};
  run_product(lt, ws, ws_bytes, dhidden, p16, w, dh32, true, hold_ms, s);
  run_product(lt, ws, ws_bytes, dhidden, p16, w, dh32, false, hold_ms, s);
  const Product dhidden_dense{"dhidden P W (ld V)", rows, C, V, false, ldv, C};
  run_product(lt, ws, ws_bytes, dhidden_dense, logits16, w, dh32, true, hold_ms, s);
  run_product(lt, ws, ws_bytes, gate, x, wg, dh32, false, hold_ms, s);
  return 0;
}
