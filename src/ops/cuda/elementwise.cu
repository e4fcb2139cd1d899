// ops/cuda/elementwise.cu — add, swiglu, swiglu_backward, dropout and row-block copies on CUDA (F32, BF16 or F16
// activations).
//
// Invariants:
//  - One thread handles a group of consecutive elements (grid-stride over groups): 4 for F32, 8 for BF16 / F16 where
//    every pointer is 16-byte aligned (one 16-byte load/store per tensor), else 4 for 16-bit with 8-byte alignment
//    (8-byte accesses; dropout always takes groups of 4); otherwise (and for the tail) element by element. All inputs
//    of a group are loaded before any output is stored, by the same thread: outputs may be their inputs (ops.h's
//    in-place rules). The arithmetic per element does not depend on the grouping.
//  - Arithmetic is fp32 with explicit __f*_rn intrinsics where the CPU kernels (and torch) round each operation,
//    so nvcc's multiply-add contraction cannot change results. exp is expf (not the fast-math __expf).
//  - Dropout: group g's 4 elements take the 4 draws of half g % 2 of philox block g / 2 (ops/philox.h: draw i is
//    half i % 2 of word i / 2), so the mask equals the CPU's bit for bit; kept values are x * keep_scale, dropped
//    x * 0 (NaN stays NaN, as the CPU kernel). With a non-identity DropoutMap (x seen as (n / cols, cols)) each
//    element's draw is taken at dropout_index(map, ...) through a PhiloxCursor instead.
//  - swiglu_keep_bits (ops::swiglu_drawing_mask): the swiglu's groups of 8 with the keep bits of out's dropout mask,
//    group g's 8 draws being Philox block g (16-bit, 16-byte aligned, cols % 8 == 0, the identity map), one byte per
//    group; otherwise the swiglu's map kernel, then one thread per keep-bits byte drawing through a PhiloxCursor.
//  - copy_rows: 16-byte words by a kernel where every pointer, pitch and the run are multiples of 16 bytes, else
//    cudaMemcpy2DAsync (whose own kernel took 14 us for a 0.5B step's 16,384 x 256-byte v block); bytes unchanged.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "ops/cuda/kernels_elementwise.cuh"
#include "ops/cuda/swiglu_math.cuh"
#include "ops/philox.h"

namespace swift::ops::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

// 4 consecutive elements starting at i (16-byte / 8-byte aligned) as fp32.
template <typename T>
__device__ __forceinline__ void load4(const T* p, int64_t i, float (&v)[4]) {
  if constexpr (std::is_same_v<T, float>) {
    const float4 q = *reinterpret_cast<const float4*>(p + i);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else if constexpr (std::is_same_v<T, __half>) {  // fp16 widens exactly to fp32
    const uint2 q = *reinterpret_cast<const uint2*>(p + i);
    const float2 lo = __half22float2(*reinterpret_cast<const __half2*>(&q.x));
    const float2 hi = __half22float2(*reinterpret_cast<const __half2*>(&q.y));
    v[0] = lo.x;
    v[1] = lo.y;
    v[2] = hi.x;
    v[3] = hi.y;
  } else {  // bf16 is the high half of an fp32: widening is a shift (exact)
    const uint2 q = *reinterpret_cast<const uint2*>(p + i);
    v[0] = __uint_as_float(q.x << 16);
    v[1] = __uint_as_float(q.x & 0xffff0000u);
    v[2] = __uint_as_float(q.y << 16);
    v[3] = __uint_as_float(q.y & 0xffff0000u);
  }
}

template <typename T>
__device__ __forceinline__ void store4(T* p, int64_t i, const float (&v)[4]) {
  if constexpr (std::is_same_v<T, float>) {
    *reinterpret_cast<float4*>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
  } else if constexpr (std::is_same_v<T, __half>) {  // each element rounded once, to nearest even (as __float2half_rn)
    auto bits = [](float f) { return static_cast<uint32_t>(__half_as_ushort(__float2half_rn(f))); };
    uint2 q;
    q.x = bits(v[0]) | (bits(v[1]) << 16);
    q.y = bits(v[2]) | (bits(v[3]) << 16);
    *reinterpret_cast<uint2*>(p + i) = q;
  } else {
    auto bits = [](float f) { return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(f))); };
    uint2 q;
    q.x = bits(v[0]) | (bits(v[1]) << 16);
    q.y = bits(v[2]) | (bits(v[3]) << 16);
    *reinterpret_cast<uint2*>(p + i) = q;
  }
}

// kGroup consecutive elements at i (4: load4 / store4; 8: load8_f32 / store8_f32 of kernels_elementwise.cuh).
template <int kGroup, typename T>
__device__ __forceinline__ void load_group(const T* p, int64_t i, float (&v)[kGroup]) {
  if constexpr (kGroup == 8) {
    load8_f32(p, i, v);
  } else {
    load4(p, i, v);
  }
}
template <int kGroup, typename T>
__device__ __forceinline__ void store_group(T* p, int64_t i, const float (&v)[kGroup]) {
  if constexpr (kGroup == 8) {
    store8_f32(p, i, v);
  } else {
    store4(p, i, v);
  }
}

template <int kIn, int kOut>
struct MapArgs {
  const void* in[kIn];
  void* out[kOut];
};

// out[k][i] = fn(in[0][i], ..., in[kIn-1][i]) for every i; Fn: void(const float (&)[kIn], float (&)[kOut]). Each
// thread takes groups of kGroup consecutive elements (vectorized: one 16-byte access per operand for F32 groups of 4
// and 16-bit groups of 8, 8-byte for 16-bit groups of 4); the same arithmetic per element either way.
template <typename T, int kGroup, int kIn, int kOut, typename Fn>
__global__ void map_kernel(MapArgs<kIn, kOut> args, int64_t n, bool vectorized, Fn fn) {
  const int64_t groups = (n + kGroup - 1) / kGroup;
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < groups; g += int64_t{gridDim.x} * blockDim.x) {
    const int64_t base = g * kGroup;
    if (vectorized && base + kGroup <= n) {
      float x[kIn][kGroup], y[kOut][kGroup];
#pragma unroll
      for (int k = 0; k < kIn; ++k) load_group<kGroup>(static_cast<const T*>(args.in[k]), base, x[k]);
#pragma unroll
      for (int e = 0; e < kGroup; ++e) {
        float xe[kIn], ye[kOut];
#pragma unroll
        for (int k = 0; k < kIn; ++k) xe[k] = x[k][e];
        fn(xe, ye);
#pragma unroll
        for (int k = 0; k < kOut; ++k) y[k][e] = ye[k];
      }
#pragma unroll
      for (int k = 0; k < kOut; ++k) store_group<kGroup>(static_cast<T*>(args.out[k]), base, y[k]);
    } else {
      for (int64_t i = base; i < n && i < base + kGroup; ++i) {
        float xe[kIn], ye[kOut];
#pragma unroll
        for (int k = 0; k < kIn; ++k) xe[k] = load_f32(static_cast<const T*>(args.in[k]), i);
        fn(xe, ye);
#pragma unroll
        for (int k = 0; k < kOut; ++k) store_f32(static_cast<T*>(args.out[k]), i, ye[k]);
      }
    }
  }
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

unsigned blocks_for(int64_t n, int group = 4) {
  const int64_t groups = (n + group - 1) / group;
  const int64_t blocks = (groups + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

template <int kIn, int kOut, typename Fn>
cudaError_t launch_map(const MapArgs<kIn, kOut>& args, int dtype, int64_t n, Fn fn, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (dtype < 0 || dtype > 2) return cudaErrorInvalidValue;
  auto all_aligned = [&](size_t bytes) {
    bool ok = true;
    for (int k = 0; k < kIn; ++k) ok = ok && aligned(args.in[k], bytes);
    for (int k = 0; k < kOut; ++k) ok = ok && aligned(args.out[k], bytes);
    return ok;
  };
  if (dtype == 0) {
    map_kernel<float, 4><<<blocks_for(n), kThreads, 0, stream>>>(args, n, all_aligned(16), fn);
    return cudaGetLastError();
  }
  // 16-bit: groups of 8 (16-byte accesses) where every operand is 16-byte aligned, else of 4 (8-byte accesses).
  const bool wide = all_aligned(16), vectorized = wide || all_aligned(8);
  if (dtype == 2) {
    if (wide) {
      map_kernel<__half, 8><<<blocks_for(n, 8), kThreads, 0, stream>>>(args, n, true, fn);
    } else {
      map_kernel<__half, 4><<<blocks_for(n), kThreads, 0, stream>>>(args, n, vectorized, fn);
    }
  } else if (wide) {
    map_kernel<__nv_bfloat16, 8><<<blocks_for(n, 8), kThreads, 0, stream>>>(args, n, true, fn);
  } else {
    map_kernel<__nv_bfloat16, 4><<<blocks_for(n), kThreads, 0, stream>>>(args, n, vectorized, fn);
  }
  return cudaGetLastError();
}

struct AddFn {
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const { y[0] = __fadd_rn(x[0], x[1]); }
};

// silu(g) * u (swiglu_math.cuh).
struct SwigluFn {
  __device__ void operator()(const float (&x)[2], float (&y)[1]) const { y[0] = swiglu_value(x[0], x[1]); }
};

// in: dout, gate, up; out: dgate, dup (swiglu_math.cuh).
struct SwigluBackwardFn {
  __device__ void operator()(const float (&x)[3], float (&y)[2]) const { swiglu_grads(x[0], x[1], x[2], y[0], y[1]); }
};

// Group g (elements 4g .. 4g + 3) = half g % 2 of philox block g / 2: element 4g + e uses draw 4g + e, the low / high
// half of word 2 (g % 2) + e / 2 (identity map; `mapped`: the draw at the element's dropout_index of (row, col) in the
// (n / cols, cols) view).
template <typename T>
__global__ void dropout_kernel(const T* x, T* out, int64_t n, uint64_t seed, uint32_t threshold, float keep_scale,
                               bool vectorized, int64_t cols, DropoutMap map, bool mapped) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < groups; g += int64_t{gridDim.x} * blockDim.x) {
    uint32_t draws[4];
    if (!mapped) {
      const PhiloxBlock block = philox_block(seed, static_cast<uint64_t>(g >> 1));
      const uint32_t w0 = (g & 1) != 0 ? block.w[2] : block.w[0], w1 = (g & 1) != 0 ? block.w[3] : block.w[1];
      draws[0] = w0 & 0xFFFFu;
      draws[1] = w0 >> 16;
      draws[2] = w1 & 0xFFFFu;
      draws[3] = w1 >> 16;
    } else {
      PhiloxCursor cursor(seed);
      for (int e = 0; e < 4; ++e) {
        const int64_t i = g * 4 + e < n ? g * 4 + e : n - 1;
        draws[e] = cursor.draw(dropout_index(map, i / cols, i % cols, cols));
      }
    }
    const int64_t base = g * 4;
    if (vectorized && base + 4 <= n) {
      float v[4];
      load4(x, base, v);
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = __fmul_rn(v[e], draws[e] >= threshold ? keep_scale : 0.0f);
      store4(out, base, v);
    } else {
      for (int e = 0; e < 4 && base + e < n; ++e) {
        store_f32(out, base + e, __fmul_rn(load_f32(x, base + e), draws[e] >= threshold ? keep_scale : 0.0f));
      }
    }
  }
}

// swiglu_drawing_mask's one pass (16-bit, 16-byte aligned, cols % 8 == 0, the identity map): group g = elements
// 8g .. 8g + 7, one row's 8-aligned columns, whose draws are the 8 of Philox block g and whose keep bits are byte g of
// the (rows, cols / 8) cache. The loads are issued before the rounds, which run while they are in flight.
template <typename T>
__global__ void swiglu_keep_bits_kernel(const T* gate, const T* up, T* out, int64_t groups, uint64_t seed,
                                        uint32_t threshold, uint8_t* bits) {
  for (int64_t g = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; g < groups; g += int64_t{gridDim.x} * blockDim.x) {
    float x[8], u[8], y[8];
    load_group<8>(gate, 8 * g, x);
    load_group<8>(up, 8 * g, u);
    bits[g] = static_cast<uint8_t>(dropout_keep_bits8(philox_block(seed, static_cast<uint64_t>(g)), threshold));
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = swiglu_value(x[e], u[e]);
    store_group<8>(out, 8 * g, y);
  }
}

// The keep bits of a (rows, cols) operand under any map: byte (row, c) = dropout_keep_byte of columns 8c .. 8c + 7.
__global__ void keep_bits_kernel(int64_t rows, int64_t cols, uint64_t seed, uint32_t threshold, DropoutMap map,
                                 uint8_t* bits) {
  const int64_t bytes = (cols + 7) / 8, total = rows * bytes;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total; i += int64_t{gridDim.x} * blockDim.x) {
    bits[i] = static_cast<uint8_t>(dropout_keep_byte(seed, map, i / bytes, 8 * (i % bytes), cols, threshold));
  }
}

// rows x (run / 16) 16-byte words, each from src + r * src_pitch to dst + r * dst_pitch (bytes): a grid-stride
// loop over the words, consecutive threads on consecutive words of a row.
__global__ void copy_rows_kernel(const char* src, int64_t src_pitch, char* dst, int64_t dst_pitch, int64_t words,
                                 int64_t total) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < total; k += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = k / words, w = k - r * words;
    *reinterpret_cast<uint4*>(dst + r * dst_pitch + w * 16) =
        *reinterpret_cast<const uint4*>(src + r * src_pitch + w * 16);
  }
}

}  // namespace

cudaError_t launch_add(const void* a, const void* b, void* out, int dtype, int64_t n, cudaStream_t stream) {
  return launch_map(MapArgs<2, 1>{{a, b}, {out}}, dtype, n, AddFn{}, stream);
}

cudaError_t launch_swiglu(const void* gate, const void* up, void* out, int dtype, int64_t n, cudaStream_t stream) {
  return launch_map(MapArgs<2, 1>{{gate, up}, {out}}, dtype, n, SwigluFn{}, stream);
}

bool swiglu_keep_bits_in_one_pass(const void* gate, const void* up, const void* out, int dtype, int64_t cols,
                                   const DropoutMap& map) {
  return (dtype == 1 || dtype == 2) && cols % 8 == 0 && dropout_map_identity(map, cols) && aligned(gate, 16) &&
         aligned(up, 16) && aligned(out, 16);
}

cudaError_t launch_swiglu_keep_bits(const void* gate, const void* up, void* out, int dtype, int64_t rows, int64_t cols,
                                    uint64_t seed, uint32_t threshold, const DropoutMap& map, uint8_t* bits,
                                    cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  if (swiglu_keep_bits_in_one_pass(gate, up, out, dtype, cols, map)) {
    const int64_t groups = n / 8;
    const unsigned blocks = blocks_for(n, 8);
    if (dtype == 1) {
      swiglu_keep_bits_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(gate), static_cast<const __nv_bfloat16*>(up),
          static_cast<__nv_bfloat16*>(out), groups, seed, threshold, bits);
    } else {
      swiglu_keep_bits_kernel<__half><<<blocks, kThreads, 0, stream>>>(static_cast<const __half*>(gate),
                                                                       static_cast<const __half*>(up),
                                                                       static_cast<__half*>(out), groups, seed,
                                                                       threshold, bits);
    }
    return cudaGetLastError();
  }
  const cudaError_t status = launch_swiglu(gate, up, out, dtype, n, stream);
  if (status != cudaSuccess) return status;
  keep_bits_kernel<<<blocks_for(rows * ((cols + 7) / 8), 1), kThreads, 0, stream>>>(rows, cols, seed, threshold, map,
                                                                                   bits);
  return cudaGetLastError();
}

cudaError_t launch_swiglu_backward(const void* dout, const void* gate, const void* up, void* dgate, void* dup,
                                   int dtype, int64_t n, cudaStream_t stream) {
  return launch_map(MapArgs<3, 2>{{dout, gate, up}, {dgate, dup}}, dtype, n, SwigluBackwardFn{}, stream);
}

cudaError_t launch_dropout(const void* x, void* out, int dtype, int64_t n, uint64_t seed, uint32_t threshold,
                           float keep_scale, cudaStream_t stream) {
  return launch_dropout(x, out, dtype, n, n, seed, threshold, keep_scale, DropoutMap{}, stream);
}

cudaError_t launch_dropout(const void* x, void* out, int dtype, int64_t n, int64_t cols, uint64_t seed,
                           uint32_t threshold, float keep_scale, const DropoutMap& map, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  if (cols <= 0 || n % cols != 0) return cudaErrorInvalidValue;
  const bool mapped = !dropout_map_identity(map, cols);
  if (dtype < 0 || dtype > 2) return cudaErrorInvalidValue;
  const size_t elem = dtype == 0 ? 4 : 2;
  if (threshold == 0 && keep_scale == 1.0f) {  // p = 0: identity, no RNG (as the CPU kernel)
    if (x == out) return cudaSuccess;
    return cudaMemcpyAsync(out, x, static_cast<size_t>(n) * elem, cudaMemcpyDeviceToDevice, stream);
  }
  const bool vectorized = aligned(x, 4 * elem) && aligned(out, 4 * elem);
  if (dtype == 0) {
    dropout_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const float*>(x), static_cast<float*>(out), n,
                                                           seed, threshold, keep_scale, vectorized, cols, map, mapped);
  } else if (dtype == 2) {
    dropout_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const __half*>(x), static_cast<__half*>(out), n,
                                                           seed, threshold, keep_scale, vectorized, cols, map, mapped);
  } else {
    dropout_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(x),
                                                           static_cast<__nv_bfloat16*>(out), n, seed, threshold,
                                                           keep_scale, vectorized, cols, map, mapped);
  }
  return cudaGetLastError();
}

cudaError_t launch_copy_rows(const void* src, int64_t src_pitch, void* dst, int64_t dst_pitch, int64_t run,
                             int64_t rows, cudaStream_t stream) {
  if (run == 0 || rows == 0) return cudaSuccess;
  const bool vectorized = aligned(src, 16) && aligned(dst, 16) && src_pitch % 16 == 0 && dst_pitch % 16 == 0 &&
                          run % 16 == 0;
  if (!vectorized) {
    return cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_pitch), src, static_cast<size_t>(src_pitch),
                             static_cast<size_t>(run), static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream);
  }
  const int64_t words = run / 16, total = words * rows;
  copy_rows_kernel<<<blocks_for(total), kThreads, 0, stream>>>(static_cast<const char*>(src), src_pitch,
                                                               static_cast<char*>(dst), dst_pitch, words, total);
  return cudaGetLastError();
}

}  // namespace swift::ops::cuda
