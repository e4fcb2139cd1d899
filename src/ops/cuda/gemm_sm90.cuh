// ops/cuda/gemm_sm90.cuh — our own Hopper GEMM (TMA + wgmma, warp-specialised, persistent; gemm_sm90.cu), callable
// from C++ (g++) translation units: the base that LoRA's rank-r passes are folded into (issue 5), which cuBLASLt's
// fixed epilogues cannot take. By default it runs a LoRA linear's forward with its B product as a tail k-block
// (ops_matmul.cpp b_product_in_gemm; docs/PERFORMANCE.md run 26: the 7B step +2.4%). blas.cpp runs it in place of
// cuBLASLt for every product it fits under SWIFT_GEMM_SM90=1 (off by default); runs 23-25 measured its kernel
// against cuBLASLt (scripts/device/probe_wgmma_gemm.cu: the same bits on the 7B's shapes; at the power cap ~0.99x
// over the 7B layer's forward products; the 7B step 0.85% slower with it, the input gradients' products 2.3%
// behind).
//
// Invariants:
//  - D (n, m) BF16 = A (n, k) BF16 @ op(B) (+ the optional term, tail and residual below), fp32 accumulation: B stored (m, k)
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
  // Optional: a rank-8 term added to each fp32 sum before it is rounded (LoRA's dx term, lora_linear_backward):
  // D = A op(B) + term_scale * mult * (term_g term_f), term_g (n, 8) F32 rows, term_f (8, m) F32 (LoRA's a), mult per
  // element term_keep_scale or 0 by bit (col % 8) of byte col / 8 of row `row` of term_bits ((n, m / 8) bytes: the
  // forward's keep-bits cache), or 1 without them. With a term: B stored (k, m) only, m % 256 == 0 (whole column
  // tiles), term_g 16-byte aligned, term_f 8-byte aligned.
  const float* term_g = nullptr;
  const float* term_f = nullptr;
  const uint8_t* term_bits = nullptr;
  float term_scale = 0.0f, term_keep_scale = 1.0f;
  // Optional: one more k-block after A's, D = A op(B) + tail_a tail_b^T, tail_a (n, 64) and tail_b (m, 64) BF16 with
  // row stride 64 (LoRA's B product as exact bf16 pieces, lora_tail.cu). B stored (m, k) only, no term.
  const void* tail_a = nullptr;
  const void* tail_b = nullptr;
  // Optional: D = A op(B) + tail_a tail_b^T + residual, residual (n, m) BF16 with row stride ldr (a multiple of 8;
  // 16-byte aligned; m even) added to each fp32 sum before its one rounding (the residual stream's o / down
  // products). It may be D itself. gemm_sm90_fits checks its conditions (B stored (m, k), no term); the launch takes
  // it with a tail only.
  const void* residual = nullptr;
  int64_t ldr = 0;
};

// Whether `device` is an sm_90 GPU and this build carries the kernel's sm_90a code. The first question per device
// runs a one-thread kernel (with an allocation and a copy); may_probe false answers false instead of asking, for
// callers whose stream is being captured into a CUDA graph.
bool gemm_sm90_available(int device, bool may_probe = true);
// gemm_sm90_available for a launch on `stream`: a device not yet asked is asked only when the stream is not being
// captured into a CUDA graph (the probe cannot be captured); until then the answer is no.
bool gemm_sm90_ready(int device, cudaStream_t stream);
// Whether TMA can address these operands (see the invariants); shapes only, not the device.
bool gemm_sm90_fits(const Sm90Gemm& g);
// D = A op(B) on `stream` (g fits, gemm_sm90_available(device) said yes). Returns the launch status
// (cudaErrorInvalidValue when g does not fit, the device was not found available, or a tensor map cannot be made).
cudaError_t launch_gemm_sm90(const Sm90Gemm& g, int device, cudaStream_t stream);
// Products run by launch_gemm_sm90 in this process (tests).
int64_t gemm_sm90_launches();

}  // namespace swift::ops::cuda
