// ops/cuda/lora_tail.cu — LoRA's B product (scale * xa b^T, r 8) as one more k-block of our Hopper GEMM
// (gemm_sm90.cuh's tail_*): xa and scale * b cut into bf16 pieces whose products the tensor cores take exactly.
//
// Invariants:
//  - A value v (fp32) is hi + mid + lo with hi = bf16(v), mid = bf16(v - hi), lo = bf16(v - hi - mid) (each
//    difference exact in fp32): |v - (hi + mid + lo)| <= 2^-24 |v| or so.
//  - The tails are (rows, 64) BF16, eight groups of 8 columns (one per rank). Row t of xa's tail: groups (hi, hi, mid,
//    hi, mid, lo), then 1, 1 and zeros; row j of b's tail (of scale * b): (hi, mid, hi, lo, mid, hi), then the bias's
//    hi and mid pieces (or zeros) and zeros. Their row products sum the six largest of the nine piece products of each
//    rank, hi hi + hi mid + mid hi + hi lo + mid mid + lo hi (what is left out is below 2^-24 of xa b^T), each exact,
//    and the bias (exact for a BF16 bias), in fp32: the GEMM adds the B product and the bias to the frozen product's
//    fp32 sums before its one rounding.
//  - The dx term's form (B stored (k, m)): g's tail as xa's, and scale * a (8, m) as b's groups transposed into
//    (64, m) rows (row 8 group + rank), rows 48-63 zero (so xa's tail's 1 columns add nothing).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/kernels_lora.cuh"

namespace swift::ops::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void pieces(float v, __nv_bfloat16 (&p)[3]) {
  p[0] = __float2bfloat16_rn(v);
  const float r = v - __bfloat162float(p[0]);
  p[1] = __float2bfloat16_rn(r);
  p[2] = __float2bfloat16_rn(r - __bfloat162float(p[1]));
}

// tail (rows, 64) from f (rows, 8) F32 times scale; G0 .. G5: the piece (0 hi, 1 mid, 2 lo) of groups 0-5. kA: xa's
// tail (columns 48, 49 are 1), else b's (columns 48, 49 the pieces of bias[row], BF16 or F32 by bias_bf16, or 0).
template <bool kA, int G0, int G1, int G2, int G3, int G4, int G5>
__global__ void __launch_bounds__(kThreads) lora_tail_kernel(const float* f, int64_t rows, float scale,
                                                             const void* bias, bool bias_bf16, __nv_bfloat16* tail) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= rows * 8) return;
  const int64_t row = i / 8;
  const int rr = static_cast<int>(i % 8);
  __nv_bfloat16 p[3];
  pieces(scale == 1.0f ? f[i] : scale * f[i], p);
  const __nv_bfloat16 zero = __float2bfloat16_rn(0.0f);
  __nv_bfloat16* out = tail + row * 64 + rr;
  out[0] = p[G0];
  out[8] = p[G1];
  out[16] = p[G2];
  out[24] = p[G3];
  out[32] = p[G4];
  out[40] = p[G5];
  out[48] = zero;  // columns 48 + rr: 48 and 49 (rr 0, 1) carry the bias
  out[56] = zero;
  if (rr < 2) {
    __nv_bfloat16 one_or_bias = kA ? __float2bfloat16_rn(1.0f) : zero;
    if (!kA && bias != nullptr) {
      const float v = bias_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(bias)[row])
                                : static_cast<const float*>(bias)[row];
      __nv_bfloat16 q[3];
      pieces(v, q);
      one_or_bias = q[rr];
    }
    out[48] = one_or_bias;
  }
}

// tail (64, m) from f (8, m) F32 times scale: row 8 g + rr, column j holds piece G_g of scale * f[rr][j] (b's
// groups: hi, mid, hi, lo, mid, hi), rows 48-63 zero. One thread per (rr, j).
__global__ void __launch_bounds__(kThreads) lora_tail_rows_kernel(const float* f, int64_t m, float scale,
                                                                  __nv_bfloat16* tail) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= m * 8) return;
  const int rr = static_cast<int>(i / m);
  const int64_t j = i % m;
  __nv_bfloat16 p[3];
  pieces(scale == 1.0f ? f[i] : scale * f[i], p);
  constexpr int kGroups[6] = {0, 1, 0, 2, 1, 0};
#pragma unroll
  for (int g = 0; g < 6; ++g) tail[(8 * g + rr) * m + j] = p[kGroups[g]];
  const __nv_bfloat16 zero = __float2bfloat16_rn(0.0f);
  tail[(48 + rr) * m + j] = zero;
  tail[(56 + rr) * m + j] = zero;
}

unsigned blocks_for(int64_t rows) { return static_cast<unsigned>((rows * 8 + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t launch_lora_tail_a_rows(const float* a, int64_t m, float scale, void* tail, cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  lora_tail_rows_kernel<<<blocks_for(m), kThreads, 0, stream>>>(a, m, scale, static_cast<__nv_bfloat16*>(tail));
  return cudaGetLastError();
}

cudaError_t launch_lora_tail_xa(const float* xa, int64_t n, void* tail, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  lora_tail_kernel<true, 0, 0, 1, 0, 1, 2><<<blocks_for(n), kThreads, 0, stream>>>(
      xa, n, 1.0f, nullptr, false, static_cast<__nv_bfloat16*>(tail));
  return cudaGetLastError();
}

cudaError_t launch_lora_tail_b(const float* b, int64_t m, float scale, const void* bias, bool bias_bf16, void* tail,
                               cudaStream_t stream) {
  if (m <= 0) return cudaSuccess;
  lora_tail_kernel<false, 0, 1, 0, 2, 1, 0><<<blocks_for(m), kThreads, 0, stream>>>(
      b, m, scale, bias, bias_bf16, static_cast<__nv_bfloat16*>(tail));
  return cudaGetLastError();
}

}  // namespace swift::ops::cuda
