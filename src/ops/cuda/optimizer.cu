// ops/cuda/optimizer.cu — fused multi-tensor AdamW, the global gradient norm (fp64) and gradient scaling on CUDA.
//
// Invariants:
//  - One launch covers every tensor: the host passes a device array of MultiTensorChunk (pointers, [begin, end)
//    of kMultiTensorChunk elements at most); block b handles chunk b. Tensors are F32; AdamW's optional product copy
//    (F32/BF16/F16) takes the updated param rounded once, as ops::cast would.
//  - AdamW is element-wise and written with explicit __fmaf_rn / __fmul_rn / __fdiv_rn / __fsqrt_rn in the order of
//    ops/cpu/optimizer.cpp (decay multiply first, lerp as one fma, addcmul as one fma, IEEE sqrt and division), so
//    param, exp_avg and exp_avg_sq equal the CPU kernel's bit for bit. A chunk whose tensors are 16-byte aligned is
//    read and written 4 elements at a time (the same per-element arithmetic).
//  - Sum of squares: each chunk is summed in fp64 by a fixed pattern (thread i takes the groups of 4 elements i,
//    i + 256, ... in order, 16-byte loads where the chunk is aligned; warp shuffles; warp partials in order), then the
//    chunk partials by one block in a fixed tree. The order depends only on the chunking (a function of the tensors'
//    sizes), never on alignment, timing or the device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "ops/cuda/kernels_elementwise.cuh"

namespace swift::ops::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kTotalThreads = 1024;

// One element of AdamW: p, m, v updated in place (the CPU kernel's operations and rounding, in its order).
__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, const AdamWKernelScalars& k) {
  const float w = k.small_weight ? k.w1 : k.w1_m1;
  if (k.apply_decay) p = __fmul_rn(p, k.decay);  // param.mul_(1 - lr * wd), rounded before the update
  const float gi = __fmul_rn(g, k.grad_scale), m0 = m;  // clip_grad_norm_'s multiply, folded
  const float diff = __fsub_rn(gi, m0);
  m = __fmaf_rn(w, diff, k.small_weight ? m0 : gi);
  v = __fmaf_rn(__fmul_rn(k.w2, gi), gi, __fmul_rn(v, k.beta2));
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), k.bc2_sqrt), k.eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(k.step_size_neg, m), denom));
}

__device__ __forceinline__ void store_product(void* product, int32_t dtype, int64_t i, float value) {
  switch (dtype) {
    case 1: static_cast<__nv_bfloat16*>(product)[i] = __float2bfloat16_rn(value); break;
    case 2: static_cast<__half*>(product)[i] = __float2half_rn(value); break;
    default: static_cast<float*>(product)[i] = value; break;
  }
}

__device__ __forceinline__ bool aligned_to(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// Block b updates chunk b. Where the chunk's four tensors start 16-byte aligned (and its product copy at 4 elements'
// alignment), each thread takes 4 consecutive elements per iteration with 16-byte accesses (4x the bytes in flight
// of one element per thread), the last (n % 4) elements one by one; else element by element. The arithmetic per
// element is adamw_element either way: the same bits.
__global__ void adamw_kernel(const MultiTensorChunk* chunks, AdamWKernelScalars k) {
  const MultiTensorChunk ch = chunks[blockIdx.x];
  float* p = ch.p[0] + ch.begin;
  const float* g = ch.p[1] + ch.begin;
  float* m = ch.p[2] + ch.begin;
  float* v = ch.p[3] + ch.begin;
  const int64_t n = ch.end - ch.begin;
  const uintptr_t product_bytes = ch.product_dtype == 1 || ch.product_dtype == 2 ? 2 : 4;
  void* product = ch.product == nullptr
                      ? nullptr
                      : static_cast<char*>(ch.product) + static_cast<uintptr_t>(ch.begin) * product_bytes;
  const bool vectorized = aligned_to(p, 16) && aligned_to(g, 16) && aligned_to(m, 16) && aligned_to(v, 16) &&
                          (product == nullptr || aligned_to(product, 4 * product_bytes));
  int64_t done = 0;
  if (vectorized) {
    const int64_t quads = n / 4;
    for (int64_t q = threadIdx.x; q < quads; q += blockDim.x) {
      float4 pq = reinterpret_cast<float4*>(p)[q];
      const float4 gq = reinterpret_cast<const float4*>(g)[q];
      float4 mq = reinterpret_cast<float4*>(m)[q];
      float4 vq = reinterpret_cast<float4*>(v)[q];
      adamw_element(pq.x, gq.x, mq.x, vq.x, k);
      adamw_element(pq.y, gq.y, mq.y, vq.y, k);
      adamw_element(pq.z, gq.z, mq.z, vq.z, k);
      adamw_element(pq.w, gq.w, mq.w, vq.w, k);
      reinterpret_cast<float4*>(p)[q] = pq;
      reinterpret_cast<float4*>(m)[q] = mq;
      reinterpret_cast<float4*>(v)[q] = vq;
      if (product != nullptr) {
        if (ch.product_dtype == 1) {
          const __nv_bfloat162 lo = __floats2bfloat162_rn(pq.x, pq.y), hi = __floats2bfloat162_rn(pq.z, pq.w);
          uint2 word;
          word.x = *reinterpret_cast<const uint32_t*>(&lo);
          word.y = *reinterpret_cast<const uint32_t*>(&hi);
          reinterpret_cast<uint2*>(product)[q] = word;
        } else if (ch.product_dtype == 2) {
          const __half2 lo = __floats2half2_rn(pq.x, pq.y), hi = __floats2half2_rn(pq.z, pq.w);
          uint2 word;
          word.x = *reinterpret_cast<const uint32_t*>(&lo);
          word.y = *reinterpret_cast<const uint32_t*>(&hi);
          reinterpret_cast<uint2*>(product)[q] = word;
        } else {
          reinterpret_cast<float4*>(product)[q] = pq;
        }
      }
    }
    done = 4 * quads;
  }
  for (int64_t i = done + threadIdx.x; i < n; i += blockDim.x) {
    float pi = p[i], mi = m[i], vi = v[i];
    adamw_element(pi, g[i], mi, vi, k);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
    if (product != nullptr) store_product(product, ch.product_dtype, i, pi);
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

// Thread t takes the groups of 4 elements t, t + 256, ... of the chunk, each group's elements in order, loading 4 groups
// at once (one float4 each when the chunk starts 16-byte aligned, else 4 scalars: the same order, the same sum).
__global__ void sum_squares_kernel(const MultiTensorChunk* chunks, double* partials) {
  constexpr int kGroupsAtOnce = 4;
  const MultiTensorChunk ch = chunks[blockIdx.x];
  const float* g = ch.p[0] + ch.begin;
  const int64_t n = ch.end - ch.begin;
  const bool vec = reinterpret_cast<uintptr_t>(g) % 16 == 0;
  double acc = 0.0;
  for (int64_t q0 = threadIdx.x; 4 * q0 < n; q0 += int64_t{kThreads} * kGroupsAtOnce) {
    float v[kGroupsAtOnce][4];
#pragma unroll
    for (int u = 0; u < kGroupsAtOnce; ++u) {
      const int64_t i = 4 * (q0 + int64_t{u} * kThreads);
      if (vec && i + 4 <= n) {
        const float4 f = *reinterpret_cast<const float4*>(g + i);
        v[u][0] = f.x;
        v[u][1] = f.y;
        v[u][2] = f.z;
        v[u][3] = f.w;
      } else {
#pragma unroll
        for (int k = 0; k < 4; ++k) v[u][k] = i + k < n ? g[i + k] : 0.0f;  // past the end: +0 adds nothing
      }
    }
#pragma unroll
    for (int u = 0; u < kGroupsAtOnce; ++u) {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const double x = v[u][k];
        acc += x * x;
      }
    }
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

__global__ void zero_kernel(const MultiTensorChunk* chunks) {
  const MultiTensorChunk ch = chunks[blockIdx.x];
  float* g = ch.p[0];
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) g[i] = 0.0f;
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

cudaError_t launch_zero(const MultiTensorChunk* chunks, int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (!grid_ok(count)) return cudaErrorInvalidValue;
  zero_kernel<<<static_cast<unsigned>(count), kThreads, 0, stream>>>(chunks);
  return cudaGetLastError();
}

}  // namespace swift::ops::cuda
