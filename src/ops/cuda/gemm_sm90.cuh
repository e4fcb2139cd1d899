// ops/cuda/gemm_sm90.cuh — our own Hopper GEMM (TMA + wgmma, warp-specialised, persistent; gemm_sm90.cu), callable
// from C++ (g++) translation units: the base that LoRA's rank-r passes are to be folded into (issue 5), which
// cuBLASLt's fixed epilogues cannot take. blas.cpp runs it in place of cuBLASLt under SWIFT_GEMM_SM90=1 (off by
// default) for the products it fits; docs/PERFORMANCE.md runs 23-25 measured its kernel against cuBLASLt
// (scripts/device/probe_wgmma_gemm.cu: the same bits on the 7B's shapes; at the power cap ~0.99x over the 7B layer's
// forward products; the 7B step 0.85% slower with it, the input gradients' products 2.3% behind).
//
// Invariants:
//  - D (n, m) BF16 = A (n, k) BF16 @ op(B), fp32 accumulation, alpha 1, beta 0, no bias: B stored (m, k)
//    (b_transposed: the forward's x W^T) or (k, m) (the input gradient's dy W). Row-major, row strides in elements.
//  - Any n, m, k >= 1: TMA zero-fills the loads past the edges and clips the stores. TMA's own limits decide what
//    fits: 16-byte aligned bases and row strides (lda, ldb, ldd multiples of 8), strides below 2^40 bytes.
//  - K is summed in blocks of 64 in order, each block by wgmma's fixed k16 order: the result depends on the shape
//    alone (deterministic, one writer per output element).
//  - Only on an sm_90 device and a build whose device code is sm_90a (gemm_sm90_available); elsewhere blas.cpp
//    keeps cuBLASLt.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace swift::ops::cuda {

struct Sm90Gemm {
  int64_t n = 0, m = 0, k = 0;  // D is (n, m); A is (n, k)
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  bool b_transposed = true;  // B stored (m, k); false: (k, m)
  void* d = nullptr;
  int64_t ldd = 0;
};

// Whether `device` is an sm_90 GPU and this build carries the kernel's sm_90a code. The first question per device
// runs a one-thread kernel (with an allocation and a copy); may_probe false answers false instead of asking, for
// callers whose stream is being captured into a CUDA graph.
bool gemm_sm90_available(int device, bool may_probe = true);
// Whether TMA can address these operands (see the invariants); shapes only, not the device.
bool gemm_sm90_fits(const Sm90Gemm& g);
// D = A op(B) on `stream` (g fits, gemm_sm90_available(device) said yes). Returns the launch status
// (cudaErrorInvalidValue when g does not fit, the device was not found available, or a tensor map cannot be made).
cudaError_t launch_gemm_sm90(const Sm90Gemm& g, int device, cudaStream_t stream);
// Products run by launch_gemm_sm90 in this process (tests).
int64_t gemm_sm90_launches();

}  // namespace swift::ops::cuda
