// ops/cuda/blas.h — matrix products on CUDA through cuBLASLt, in row-major terms.
//
// Invariants:
//  - One cuBLASLt handle and one 32 MiB workspace per device, created on first use and kept for the process.
//  - D (n, m) = alpha * op(A) @ op(B) + beta * D (+ bias per column of D), all row-major with explicit row
//    strides (lda, ldb, ldd, in elements), so column slices of a wider matrix are allowed. C is D (in place).
//  - A and B have one dtype: F32 (fp32 compute, no TF32: exact but slow, a debugging path), or BF16 / F16
//    (fp32 compute on the tensor cores). D is F32, or A's dtype when A is BF16 / F16.
//  - The bias (length m) is applied in the cuBLASLt epilogue when the library has an algorithm for it; else the
//    product runs without it and a small kernel adds it. Bias dtype: F32, or D's dtype.
//  - Descriptors, layouts and the heuristic's algorithm are cached per shape (and dtypes, strides, pointer
//    alignment, epilogue): the heuristic is asked once per shape.
//  - Everything runs on cuda::stream(device). Failures throw swift::Error naming `op`.
#pragma once

#include <cstdint>
#include <string>

namespace swift::ops::cuda {

struct MatmulArgs {
  bool trans_a = false, trans_b = false;
  int64_t n = 0, m = 0, k = 0;  // D is (n, m); op(A) is (n, k); op(B) is (k, m)
  const void* a = nullptr;
  int64_t lda = 0;  // row stride of A as stored: (n, k) or (k, n) when trans_a
  const void* b = nullptr;
  int64_t ldb = 0;  // row stride of B as stored: (k, m) or (m, k) when trans_b
  int ab_dtype = 0;  // dtype code (0 F32, 1 BF16, 2 F16) of A and B
  void* d = nullptr;
  int64_t ldd = 0;
  int d_dtype = 0;
  float alpha = 1.0f, beta = 0.0f;
  // C of D = alpha op(A) op(B) + beta C (+ bias): null for D itself, else (n, m) in D's dtype with D's row stride
  // ldd, read and not written (a residual kept apart from the sum: no copy of it into D first).
  const void* c = nullptr;
  const void* bias = nullptr;  // (m) or null
  int bias_dtype = 0;
};

// Runs the product on device `device` (its current stream). Throws naming `op` on failure.
void matmul(const char* op, int device, const MatmulArgs& args);
// SWIFT_GEMM_AUTOTUNE (read once, on by default; =0: the heuristic's first algorithm): each new plan's first call
// takes the algorithm recorded for its product on this device (ops/gemm_choice_cache.h), else times the heuristic's
// top algorithms on its operands, keeps the fastest and records it (blas.cpp). set_gemm_autotune overrides the switch
// for the process (tests); plans made before keep their algorithm. set_gemm_autotune_record points the record at
// another file ("" : none) for the process (tests).
bool gemm_autotune_enabled();
void set_gemm_autotune(bool on);
void set_gemm_autotune_record(const std::string& path);
// SWIFT_GEMM_SM90 (read once, off by default; =1): products with BF16 A, B and D, alpha 1, beta 0, A not
// transposed and no bias run on our own Hopper kernel (gemm_sm90.cuh: TMA + wgmma) instead of cuBLASLt, on an sm_90
// device of an sm_90a build; everything else, and every other device, keeps cuBLASLt. set_gemm_sm90 overrides the
// switch for the process (tests).
bool gemm_sm90_enabled();
void set_gemm_sm90(bool on);

}  // namespace swift::ops::cuda
