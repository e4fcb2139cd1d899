// ops/cuda/dora.cu — the small DoRA kernels (kernels_dora.cuh): per-row weight norm, magnitude scaling of the
// output and of dy, and the magnitude-gradient column reduction. The matrix products are ops_dora.cpp's.
//
// Invariants:
//  - Loads convert to fp32; arithmetic in fp32 with explicit __f*_rn intrinsics where ops/cpu/dora.cpp rounds each
//    operation (no multiply-add contraction); sums of squares and the magnitude gradient accumulate in fp64;
//    16-bit stores round once (__float2bfloat16_rn / __float2half_rn).
//  - Deterministic: each output element has one writer; reductions use fixed per-thread strides and fixed shared-
//    memory trees (no atomics), so results depend only on the inputs and the shapes.
//  - Element-wise kernels read every input of an element before writing it, by the same thread: out may alias src.
//  - Indices are int64_t throughout (n * m may exceed 2^31).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/cuda/kernels_dora.cuh"

namespace swift::ops::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kNormThreads = 256;              // threads per row of the weight norm (power of two)
constexpr int kMagCols = 32, kMagLanes = 8;     // magnitude gradient: columns per block, row lanes (power of two)

__device__ __forceinline__ float load_f(const void* p, int dtype, int64_t i) {
  switch (dtype) {
    case 1: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case 2: return __half2float(static_cast<const __half*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void store_f(void* p, int dtype, int64_t i, float v) {
  switch (dtype) {
    case 1: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); break;
    case 2: static_cast<__half*>(p)[i] = __float2half_rn(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

unsigned grid_for(int64_t work, int threads, int64_t cap = 65535) {
  int64_t blocks = (work + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks < cap ? blocks : cap);
}

// One block per row j: v = w + scale * ba (fp32, as the CPU: product then sum), v^2 summed in fp64.
__global__ void row_norm_kernel(const void* w, int w_dtype, const float* ba, int64_t k, float scale, bool squares,
                                float* norm) {
  __shared__ double part[kNormThreads];
  const int64_t row = blockIdx.x;
  const int64_t base = row * k;
  double ss = 0.0;
  for (int64_t i = threadIdx.x; i < k; i += kNormThreads) {
    float v = load_f(w, w_dtype, base + i);
    if (ba != nullptr) v = __fadd_rn(v, __fmul_rn(scale, ba[base + i]));
    ss += static_cast<double>(v) * static_cast<double>(v);
  }
  part[threadIdx.x] = ss;
  __syncthreads();
  for (int stride = kNormThreads / 2; stride > 0; stride >>= 1) {
    if (static_cast<int>(threadIdx.x) < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) norm[row] = static_cast<float>(squares ? part[0] : sqrt(part[0]));
}

__global__ void sqrt_kernel(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = __fsqrt_rn(x[i]);
  }
}

// out = (g + offset) * src, element-wise over (n, m).
__global__ void scale_rows_kernel(const void* src, int dtype, const float* magnitude, const float* weight_norm,
                                  float offset, int64_t n, int64_t m, void* out) {
  const int64_t total = n * m;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e % m;
    const float g = __fdiv_rn(magnitude[j], weight_norm[j]);
    const float coef = offset == 0.0f ? g : __fadd_rn(g, offset);
    store_f(out, dtype, e, __fmul_rn(coef, load_f(src, dtype, e)));
  }
}

// y (=|+=) (t + bias) + g h.
__global__ void output_kernel(void* y, int y_dtype, const float* h, const float* t, const void* bias, int bias_dtype,
                              const float* magnitude, const float* weight_norm, int64_t n, int64_t m,
                              bool accumulate) {
  const int64_t total = n * m;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = e % m;
    const float g = __fdiv_rn(magnitude[j], weight_norm[j]);
    float base = t != nullptr ? t[e] : 0.0f;
    if (bias != nullptr) base = __fadd_rn(base, load_f(bias, bias_dtype, j));
    float v = __fadd_rn(base, __fmul_rn(g, h[e]));
    if (accumulate) v = __fadd_rn(load_f(y, y_dtype, e), v);
    store_f(y, y_dtype, e, v);
  }
}

// Pass 1: block (column tile bx, row chunk by), threads (tx column, ty lane): lane ty sums rows c0 + ty,
// c0 + ty + kMagLanes, ... of its column in fp64; a fixed tree over the lanes; partial[by * m + j].
__global__ void magnitude_partials_kernel(const void* dy, int dy_dtype, const float* h, int64_t n, int64_t m,
                                          int64_t rows_per_chunk, double* partials) {
  __shared__ double part[kMagLanes][kMagCols + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kMagCols + tx;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t c1 = c0 + rows_per_chunk < n ? c0 + rows_per_chunk : n;
  double acc = 0.0;
  if (j < m) {
    for (int64_t i = c0 + ty; i < c1; i += kMagLanes) {
      const int64_t e = i * m + j;
      acc += static_cast<double>(load_f(dy, dy_dtype, e)) * static_cast<double>(h[e]);
    }
  }
  part[ty][tx] = acc;
  __syncthreads();
  for (int stride = kMagLanes / 2; stride > 0; stride >>= 1) {
    if (ty < stride) part[ty][tx] += part[ty + stride][tx];
    __syncthreads();
  }
  if (ty == 0 && j < m) partials[static_cast<int64_t>(blockIdx.y) * m + j] = part[0][tx];
}

// Pass 2: one thread per column sums the chunks' partials in chunk order.
__global__ void magnitude_finish_kernel(const double* partials, int64_t chunks, int64_t m, const float* weight_norm,
                                        float* dmagnitude) {
  for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < m;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s += partials[c * m + j];
    dmagnitude[j] = static_cast<float>(static_cast<double>(dmagnitude[j]) + s / static_cast<double>(weight_norm[j]));
  }
}

}  // namespace

cudaError_t launch_dora_row_norm(const void* w, int w_dtype, const float* ba, int64_t rows, int64_t k, float scale,
                                 bool squares, float* norm, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  if (rows > 0x7fffffff) return cudaErrorInvalidValue;
  row_norm_kernel<<<static_cast<unsigned>(rows), kNormThreads, 0, stream>>>(w, w_dtype, ba, k, scale, squares, norm);
  return cudaGetLastError();
}

cudaError_t launch_dora_sqrt(float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  sqrt_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(x, n);
  return cudaGetLastError();
}

cudaError_t launch_dora_scale_rows(const void* src, int dtype, const float* magnitude, const float* weight_norm,
                                   float offset, int64_t n, int64_t m, void* out, cudaStream_t stream) {
  if (n <= 0 || m <= 0) return cudaSuccess;
  scale_rows_kernel<<<grid_for(n * m, kThreads), kThreads, 0, stream>>>(src, dtype, magnitude, weight_norm, offset, n,
                                                                         m, out);
  return cudaGetLastError();
}

cudaError_t launch_dora_output(void* y, int y_dtype, const float* h, const float* t, const void* bias, int bias_dtype,
                               const float* magnitude, const float* weight_norm, int64_t n, int64_t m, bool accumulate,
                               cudaStream_t stream) {
  if (n <= 0 || m <= 0) return cudaSuccess;
  output_kernel<<<grid_for(n * m, kThreads), kThreads, 0, stream>>>(y, y_dtype, h, t, bias, bias_dtype, magnitude,
                                                                     weight_norm, n, m, accumulate);
  return cudaGetLastError();
}

cudaError_t launch_dora_magnitude_grad(const void* dy, int dy_dtype, const float* h, const float* weight_norm,
                                       int64_t n, int64_t m, float* dmagnitude, void* scratch, size_t scratch_bytes,
                                       cudaStream_t stream) {
  if (m <= 0 || n <= 0) return cudaSuccess;  // nothing to add (an empty sum)
  const int64_t chunks = dora_magnitude_chunks(n);
  const int64_t tiles = (m + kMagCols - 1) / kMagCols;
  if (scratch == nullptr || scratch_bytes < dora_magnitude_scratch_bytes(n, m)) return cudaErrorInvalidValue;
  if (tiles > 0x7fffffff || chunks > 65535) return cudaErrorInvalidValue;
  auto* partials = static_cast<double*>(scratch);
  magnitude_partials_kernel<<<dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(chunks)),
                              dim3(kMagCols, kMagLanes), 0, stream>>>(dy, dy_dtype, h, n, m,
                                                                      dora_magnitude_rows_per_chunk(n), partials);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  magnitude_finish_kernel<<<grid_for(m, kThreads), kThreads, 0, stream>>>(partials, chunks, m, weight_norm,
                                                                          dmagnitude);
  return cudaGetLastError();
}

}  // namespace swift::ops::cuda
