// scripts/device/probe_sm_carve.cu — does a memory-bound pass run for free beside a frozen GEMM on one H200?
//
// A probe, not product code (built by scripts/device/sm-carve-probe.sh with nvcc alone). It times:
//  - the 7B gate product (x 8192 x 3584 by W^T 3584 x 18944, BF16, fp32 compute) 10 times on stream A, with
//    cuBLASLt's CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = S (0: the whole device);
//  - a LoRA-xa-like pass on stream B: 16-byte BF16 loads, 8 FMAs per element into 8 per-thread sums (what the rank
//    passes do per element), persistent grid of G blocks;
//  - both at once (B launched just after A, A at the higher priority), against the sum of each alone on the whole device.
// Prints one line per setting. Exit status 0 unless a CUDA / cuBLASLt call fails.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("CUDA %s at %d: %s\n", #x, __LINE__, cudaGetErrorString(e_)); std::exit(1); } } while (0)
#define LK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { std::printf("cuBLASLt %s at %d: %d\n", #x, __LINE__, (int)s_); std::exit(1); } } while (0)

__global__ void __launch_bounds__(256) rank8_pass(const uint4* __restrict__ x, long long n16, int passes,
                                                   float* __restrict__ out) {
  float w[8];
#pragma unroll
  for (int r = 0; r < 8; ++r) w[r] = 0.001f * (r + 1);
  float acc[8] = {};
  const long long stride = (long long)gridDim.x * blockDim.x;
  for (int p = 0; p < passes; ++p) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n16; i += 4 * stride) {
      uint4 v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = i + u * stride < n16 ? __ldcs(x + i + u * stride) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v[u]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float2 f = __bfloat1622float2(h[j]);
#pragma unroll
          for (int r = 0; r < 8; ++r) acc[r] = fmaf(f.x, w[r], fmaf(f.y, w[(r + 1) & 7], acc[r]));
        }
      }
    }
  }
  float s = 0;
#pragma unroll
  for (int r = 0; r < 8; ++r) s += acc[r];
  if (s == 12345.678f) out[blockIdx.x] = s;  // keeps the work; never true for these inputs
}

struct Gemm {
  cublasLtHandle_t lt;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
  void* ws;
  size_t ws_bytes = size_t{32} << 20;
  // D (m x n col-major) = W^T-ish product; shapes as the 7B gate: m = 18944 (out), n = 8192 (tokens), k = 3584.
  Gemm(cublasLtHandle_t h, int sm_target, int m, int n, int k) : lt(h) {
    LK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t));
    LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof nt));
    if (sm_target > 0) LK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sm_target, sizeof sm_target));
    LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k));
    LK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, n, k));
    LK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m));
    cublasLtMatmulPreference_t pref;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
    cublasLtMatmulHeuristicResult_t res[1];
    int found = 0;
    LK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, ld, ld, pref, 1, res, &found));
    if (found == 0) { std::printf("no algorithm\n"); std::exit(1); }
    algo = res[0].algo;
    CK(cudaMalloc(&ws, ws_bytes));
  }
  void run(const void* w, const void* x, void* d, cudaStream_t s) {
    float alpha = 1, beta = 0;
    LK(cublasLtMatmul(lt, desc, &alpha, w, la, x, lb, &beta, d, ld, d, ld, &algo, ws, ws_bytes, s));
  }
};

int main(int argc, char** argv) {
  const int m = 18944, n = 8192, k = 3584, reps = 10;
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cublasLtHandle_t lt;
  LK(cublasLtCreate(&lt));
  void *w, *x, *d, *side;
  float* out;
  const size_t side_bytes = size_t{1} << 30;  // 1 GiB of BF16 read per pass
  CK(cudaMalloc(&w, size_t{2} * m * k));
  CK(cudaMalloc(&x, size_t{2} * n * k));
  CK(cudaMalloc(&d, size_t{2} * m * n));
  CK(cudaMalloc(&side, side_bytes));
  CK(cudaMalloc(&out, 1 << 20));
  CK(cudaMemset(w, 0x3c, size_t{2} * m * k));
  CK(cudaMemset(x, 0x3c, size_t{2} * n * k));
  CK(cudaMemset(side, 0x3c, side_bytes));
  int lo, hi;
  CK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  cudaStream_t sa, sb;
  CK(cudaStreamCreateWithPriority(&sa, cudaStreamNonBlocking, hi));
  CK(cudaStreamCreateWithPriority(&sb, cudaStreamNonBlocking, lo));
  cudaEvent_t e0, ea, eb;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&ea)); CK(cudaEventCreate(&eb));
  int occ = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, rank8_pass, 256, 0));
  const long long n16 = side_bytes / 16;
  auto ms_between = [](cudaEvent_t a, cudaEvent_t b) { float t; CK(cudaEventElapsedTime(&t, a, b)); return t; };
  auto time_gemm = [&](Gemm& g) {
    for (int i = 0; i < 3; ++i) g.run(w, x, d, sa);
    CK(cudaEventRecord(e0, sa));
    for (int i = 0; i < reps; ++i) g.run(w, x, d, sa);
    CK(cudaEventRecord(ea, sa));
    CK(cudaEventSynchronize(ea));
    return ms_between(e0, ea);
  };
  auto time_side = [&](int grid, int passes) {
    rank8_pass<<<grid, 256, 0, sb>>>((const uint4*)side, n16, 1, out);
    CK(cudaEventRecord(e0, sb));
    rank8_pass<<<grid, 256, 0, sb>>>((const uint4*)side, n16, passes, out);
    CK(cudaEventRecord(eb, sb));
    CK(cudaEventSynchronize(eb));
    return ms_between(e0, eb);
  };
  Gemm full(lt, 0, m, n, k);
  const float tg = time_gemm(full);
  const float tm1 = time_side(sms * occ, 1);
  std::printf("device %d SMs, side occupancy %d blocks of 256 per SM\n", sms, occ);
  std::printf("gemm x%d alone (whole device): %.3f ms = %.1f TFLOP/s\n", reps, tg, 2.0 * m * n * k * reps / tg / 1e9);
  std::printf("side pass alone (whole device): %.3f ms per GiB = %.2f TB/s\n", tm1, side_bytes / tm1 / 1e9);
  const int targets[] = {128, 124, 120, 116, 112, 104, 96};
  for (int passes : {4, 8, 16}) {
    const float serial = tg + passes * tm1;
    for (int s : targets) {
      Gemm g(lt, s, m, n, k);
      const float ta = time_gemm(g);
      const int grid = (sms - s) * occ;
      const float tb = time_side(grid, passes);
      // both at once
      for (int i = 0; i < 2; ++i) g.run(w, x, d, sa);
      CK(cudaStreamSynchronize(sa));
      CK(cudaEventRecord(e0, sa));
      CK(cudaStreamWaitEvent(sb, e0));
      for (int i = 0; i < reps; ++i) g.run(w, x, d, sa);
      rank8_pass<<<grid, 256, 0, sb>>>((const uint4*)side, n16, passes, out);
      CK(cudaEventRecord(ea, sa));
      CK(cudaEventRecord(eb, sb));
      CK(cudaEventSynchronize(ea));
      CK(cudaEventSynchronize(eb));
      const float ca = ms_between(e0, ea), cb = ms_between(e0, eb);
      const float both = ca > cb ? ca : cb;
      std::printf("side %d GiB | target %3d SMs: gemm alone %.3f ms (%.1f%% of whole), side alone on %2d SMs %.3f ms | "
                  "together: gemm done %.3f, side done %.3f | serial %.3f -> %.3f (%+.1f%%)\n",
                  passes, s, ta, 100.0 * ta / tg, sms - s, tb, ca, cb, serial, both, 100.0 * (both - serial) / serial);
    }
  }
  CK(cudaGetLastError());
  return 0;
}
