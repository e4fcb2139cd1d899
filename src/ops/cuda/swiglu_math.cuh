// ops/cuda/swiglu_math.cuh — the per-element arithmetic of swiglu and its backward, shared by the elementwise kernels
// (elementwise.cu) and the LoRA-folded ones (lora.cu), so both give the same bits.
//
// Invariants:
//  - fp32 with explicit __f*_rn intrinsics where the CPU kernels (and torch) round each operation: nvcc's multiply-add
//    contraction cannot change results. exp is expf (not the fast-math __expf).
#pragma once

#include <cuda_runtime.h>

namespace swift::ops::cuda {

// silu(g) * u = g / (1 + exp(-g)) * u, as the CPU kernel (torch's silu then mul).
__device__ __forceinline__ float swiglu_value(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

// dgate, dup of out = silu(g) * u at upstream gradient d, in torch's silu_backward order (ops/cpu/backward.cpp).
__device__ __forceinline__ void swiglu_grads(float d, float g, float u, float& dgate, float& dup) {
  const float denom = __fadd_rn(1.0f, expf(-g));
  const float sig = __fdiv_rn(1.0f, denom);
  const float silu = __fdiv_rn(g, denom);
  const float a = __fmul_rn(d, u);
  dup = __fmul_rn(d, silu);
  dgate = __fmul_rn(__fmul_rn(a, sig), __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, sig))));
}

}  // namespace swift::ops::cuda
