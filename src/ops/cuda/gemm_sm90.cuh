// ops/cuda/gemm_sm90.cuh — our own Hopper GEMM (TMA + wgmma, warp-specialised, persistent; gemm_sm90.cu), callable
// from C++ (g++) translation units: the base that LoRA's rank-r passes are folded into (issue 5), which cuBLASLt's
// fixed epilogues cannot take. By default it runs a LoRA linear's forward with its B product as a tail k-block
// (ops_matmul.cpp b_product_in_gemm; docs/PERFORMANCE.md run 26: the 7B step +2.4%), o's and down's with the residual
// too (run 27: +0.3%), and their input gradients with the LoRA dx term as a masked first k-block (fused_dx_sm90; run
// 27: +0.8%). blas.cpp runs it in place of
// cuBLASLt for every product it fits under SWIFT_GEMM_SM90=1 (off by default); runs 23-25 measured its kernel
// against cuBLASLt (scripts/device/probe_wgmma_gemm.cu: the same bits on the 7B's shapes; at the power cap ~0.99x
// over the 7B layer's forward products; the 7B step 0.85% slower with it, the input gradients' products 2.3%
// behind).
//
// Invariants:
//  - D (n, m) BF16 = A (n, k) BF16 @ op(B) (+ the optional tail and residual below), fp32 accumulation: B stored (m, k)
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
  // Optional: one more k-block, D = A op(B) + tail_a tail_b' (+ the residual), tail_a (n, 64) BF16 with row stride
  // 64 and tail_b' = tail_b^T with tail_b (m, 64) (row stride 64) when B is stored (m, k), its block after A's
  // (LoRA's B product as exact bf16 pieces, lora_tail.cu), or tail_b' = tail_b (64, m) (row stride m, m % 256 == 0)
  // when B is stored (k, m), its block before A's (LoRA's dx term: g and scale * a as pieces). There tail_bits (the
  // forward's keep-bits cache, (n, m / 8) bytes, 16-byte aligned) may mask the block: its product at (row, col)
  // times tail_keep_scale or 0 by bit (col % 8) of byte col / 8 of row `row`, before A's products are added.
  const void* tail_a = nullptr;
  const void* tail_b = nullptr;
  const uint8_t* tail_bits = nullptr;
  float tail_keep_scale = 1.0f;
  // Optional: D = A op(B) + tail_a tail_b^T + residual, residual (n, m) BF16 with row stride ldr (a multiple of 8;
  // 16-byte aligned; m even) added to each fp32 sum before its one rounding (the residual stream's o / down
  // products). It may be D itself. gemm_sm90_fits checks its conditions (B stored (m, k)); the launch takes it with a
  // tail only.
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
