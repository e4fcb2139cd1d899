// ops/cuda/cast.cu — element-wise conversion between F32, BF16 and F16 (round to nearest even), grid-stride.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/cuda/kernels.cuh"

namespace swift::ops::cuda {

namespace {

__device__ __forceinline__ float load_as_f32(const void* src, int dtype, int64_t i) {
  switch (dtype) {
    case 0: return static_cast<const float*>(src)[i];
    case 1: return __bfloat162float(static_cast<const __nv_bfloat16*>(src)[i]);
    default: return __half2float(static_cast<const __half*>(src)[i]);
  }
}

__device__ __forceinline__ void store_from_f32(void* dst, int dtype, int64_t i, float v) {
  switch (dtype) {
    case 0: static_cast<float*>(dst)[i] = v; break;
    case 1: static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v); break;
    default: static_cast<__half*>(dst)[i] = __float2half_rn(v); break;
  }
}

__global__ void cast_kernel(const void* src, int src_dtype, void* dst, int dst_dtype, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    store_from_f32(dst, dst_dtype, i, load_as_f32(src, src_dtype, i));
  }
}

}  // namespace

cudaError_t launch_cast(const void* src, int src_dtype, void* dst, int dst_dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  cast_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), threads, 0, stream>>>(src, src_dtype, dst,
                                                                                             dst_dtype, n);
  return cudaGetLastError();
}

}  // namespace swift::ops::cuda
