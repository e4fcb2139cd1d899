// ops/cuda/optimizer.cu — fused multi-tensor AdamW, the global gradient norm (fp64) and gradient scaling on CUDA.
//
// Invariants:
//  - One launch covers every tensor: the host passes a device array of MultiTensorChunk (pointers, [begin, end)
//    of kMultiTensorChunk elements at most); block b handles chunk b. Tensors are F32; AdamW's optional product copy
//    (F32/BF16/F16) takes the updated param rounded once, as ops::cast would.
//  - AdamW is element-wise and written with explicit __fmaf_rn / __fmul_rn / __fdiv_rn / __fsqrt_rn in the order of
//    ops/cpu/optimizer.cpp (decay multiply first, lerp as one fma, addcmul as one fma, IEEE sqrt and division), so
//    param, exp_avg and exp_avg_sq equal the CPU kernel's bit for bit.
//  - Sum of squares: each chunk is summed in fp64 by a fixed pattern (thread i takes elements i, i + 256, ... in
//    order; warp shuffles; warp partials in order), then the chunk partials by one block in a fixed tree. The
//    order depends only on the chunking (a function of the tensors' sizes), never on timing or the device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/cuda/kernels_elementwise.cuh"

namespace swift::ops::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kTotalThreads = 1024;

__global__ void adamw_kernel(const MultiTensorChunk* chunks, AdamWKernelScalars k) {
  const MultiTensorChunk ch = chunks[blockIdx.x];
  float* p = ch.p[0];
  const float* g = ch.p[1];
  float* m = ch.p[2];
  float* v = ch.p[3];
  const float w = k.small_weight ? k.w1 : k.w1_m1;
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
    float pi = p[i];
    if (k.apply_decay) pi = __fmul_rn(pi, k.decay);  // param.mul_(1 - lr * wd), rounded before the update
    const float gi = __fmul_rn(g[i], k.grad_scale), m0 = m[i];  // clip_grad_norm_'s multiply, folded
    const float diff = __fsub_rn(gi, m0);
    const float mi = __fmaf_rn(w, diff, k.small_weight ? m0 : gi);
    const float vi = __fmaf_rn(__fmul_rn(k.w2, gi), gi, __fmul_rn(v[i], k.beta2));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.bc2_sqrt), k.eps);
    const float updated = __fadd_rn(pi, __fdiv_rn(__fmul_rn(k.step_size_neg, mi), denom));
    p[i] = updated;
    m[i] = mi;
    v[i] = vi;
    if (ch.product != nullptr) {
      switch (ch.product_dtype) {
        case 1: static_cast<__nv_bfloat16*>(ch.product)[i] = __float2bfloat16_rn(updated); break;
        case 2: static_cast<__half*>(ch.product)[i] = __float2half_rn(updated); break;
        default: static_cast<float*>(ch.product)[i] = updated; break;
      }
    }
  }
}

__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block (blockDim.x == kBlock, a multiple of 32) in a fixed order; valid in thread 0.
template <int kBlock>
__device__ __forceinline__ double block_sum(double v) {
  __shared__ double partial[kBlock / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kBlock / 32; ++w) total += partial[w];
  }
  return total;
}

__global__ void sum_squares_kernel(const MultiTensorChunk* chunks, double* partials) {
  const MultiTensorChunk ch = chunks[blockIdx.x];
  const float* g = ch.p[0];
  double acc = 0.0;
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kThreads) {
    const double v = g[i];
    acc += v * v;
  }
  const double total = block_sum<kThreads>(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void sum_partials_kernel(const double* partials, int64_t count, double* total) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kTotalThreads) acc += partials[i];
  const double sum = block_sum<kTotalThreads>(acc);
  if (threadIdx.x == 0) *total = sum;
}

__global__ void scale_kernel(const MultiTensorChunk* chunks, float coef) {
  const MultiTensorChunk ch = chunks[blockIdx.x];
  float* g = ch.p[0];
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) g[i] = __fmul_rn(g[i], coef);
}

bool grid_ok(int64_t count) { return count <= 0x7fffffff; }

}  // namespace

cudaError_t launch_adamw(const MultiTensorChunk* chunks, int64_t count, const AdamWKernelScalars& scalars,
                         cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (!grid_ok(count)) return cudaErrorInvalidValue;
  adamw_kernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(chunks, scalars);
  return cudaGetLastError();
}

cudaError_t launch_sum_squares(const MultiTensorChunk* chunks, int64_t count, double* partials, double* total,
                               cudaStream_t stream) {
  if (!grid_ok(count)) return cudaErrorInvalidValue;
  if (count > 0) {
    sum_squares_kernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(chunks, partials);
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  sum_partials_kernel<<<1, kTotalThreads, 0, stream>>>(partials, count, total);  // count 0: total = 0
  return cudaGetLastError();
}

cudaError_t launch_scale(const MultiTensorChunk* chunks, int64_t count, float coef, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (!grid_ok(count)) return cudaErrorInvalidValue;
  scale_kernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(chunks, coef);
  return cudaGetLastError();
}

}  // namespace swift::ops::cuda
