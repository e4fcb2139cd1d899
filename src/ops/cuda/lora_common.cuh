// ops/cuda/lora_common.cuh — what the rank-r LoRA passes of lora.cu and lora_ring.cu share: the block shape, the
// 16-bit pair conversions, a dropout's keep bits of 4 or 8 columns (drawn, read from the keep-bits cache, applied),
// the host's element-type dispatch, and the ring passes' launchers (lora_ring.cu), which lora.cu's launchers call.
//
// Invariants: the keep bits are the multipliers of ops.h (element (row, col) kept iff its 16-bit draw at
// dropout_index(map, row, col, k) is >= threshold), whichever way they come: every pass applies the same mask and
// multiplies by the same keep_scale, so the CUDA-core, tensor-core and ring kernels give the same bits. Only .cu
// files include this header (device code).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ops/philox.h"

namespace swift::ops::cuda::lora_detail {

constexpr int kWarps = 8, kThreads = 256;

// Element types T of the kernels: float (dtype code 0), __nv_bfloat16 (1), __half (2). 16-bit types move as pairs
// packed in 32-bit words, widened exactly and rounded to nearest even on store.
template <typename T>
constexpr bool kHalfWidth = sizeof(T) == 2;

template <typename T>
__device__ __forceinline__ void pair_to_float2(uint32_t w, float& lo, float& hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&w);
    lo = __low2float(h);
    hi = __high2float(h);
  } else {
    static_assert(std::is_same_v<T, __half>);
    const __half2 h = *reinterpret_cast<const __half2*>(&w);
    lo = __low2float(h);
    hi = __high2float(h);
  }
}

template <typename T>
__device__ __forceinline__ uint32_t float2_to_pair(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  } else {
    static_assert(std::is_same_v<T, __half>);
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
}

// The keep bits of elements (row, col .. col + N - 1) of an (n, k) operand (bit i: element col + i kept; N in {4, 8},
// col % 4 == 0), drawn at stream indices g .. g + N - 1 with g = dropout_index(map, row, col, k).
template <int N>
__device__ __forceinline__ uint32_t dropout_keep_bits(uint64_t seed, const DropoutMap& map, int64_t row, int64_t col,
                                                      int64_t k, uint32_t threshold) {
  static_assert(N == 4 || N == 8, "4 or 8 columns");
  const uint64_t g = dropout_index(map, row, col, k);
  if ((g & (N - 1)) == 0) {  // a whole block (N = 8) or half of one (N = 4): every identity-mapped call
    const uint32_t bits = dropout_keep_bits8(philox_block(seed, g >> 3), threshold);
    return N == 8 ? bits : (bits >> (g & 4)) & 0xFu;
  }
  PhiloxCursor cursor(seed);
  uint32_t bits = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) bits |= (cursor.draw(g + i) >= threshold ? 1u : 0u) << i;
  return bits;
}

// v[i] *= keep_scale or 0 by bit i of `bits` (the multiplier of ops.h: the same product as the CPU's).
template <int N>
__device__ __forceinline__ void apply_keep_bits(float v[N], uint32_t bits, float keep_scale) {
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = v[i] * (((bits >> i) & 1u) != 0 ? keep_scale : 0.0f);
}

// The keep bits of 8-aligned columns col .. col + 7 of row `row` of a (n, k) operand (k % 8 == 0) in a keep-bits cache
// ((n, k / 8) bytes), as dropout_keep_bits<8> draws them; N = 4 takes the 4 bits of columns col .. col + 3.
template <int N>
__device__ __forceinline__ uint32_t cached_keep_bits(const uint8_t* keep_bits, int64_t row, int64_t col, int64_t k) {
  const uint32_t byte = keep_bits[row * (k / 8) + col / 8];
  return N == 8 ? byte : (byte >> (col % 8)) & 0xFu;
}

inline bool activation_code(int dtype) { return dtype == 0 || dtype == 1 || dtype == 2; }

// Calls launch(tag), tag a null T* of the element type T of dtype code 0 / 1 / 2 (checked by activation_code).
template <typename Launch>
void with_element_type(int dtype, Launch&& launch) {
  if (dtype == 0) launch(static_cast<float*>(nullptr));
  if (dtype == 1) launch(static_cast<__nv_bfloat16*>(nullptr));
  if (dtype == 2) launch(static_cast<__half*>(nullptr));
}

// The r 8 rank update on the ring (lora_ring.cu): launch_lora_rank_update's arguments, with its conditions checked
// (r 8, default config) and, with cached keep bits, k % 32 == 0 (lora_ring_fits).
bool lora_ring_fits(int64_t k, uint32_t threshold, const uint8_t* keep_bits);
cudaError_t launch_lora_rank_update_ring(void* y, int y_dtype, const float* g, const float* f, bool f_transposed,
                                         int64_t n, int64_t k, float scale, uint64_t seed, uint32_t threshold,
                                         float keep_scale, const DropoutMap& map, const uint8_t* keep_bits,
                                         cudaStream_t stream, bool overwrite, const void* residual);
// launch_lora_swiglu on the ring (r 8).
cudaError_t launch_lora_swiglu_ring(void* gate, void* up, int dtype, const float* xg, const float* bg, const float* xu,
                                    const float* bu, int64_t n, int64_t k, float scale, void* out,
                                    cudaStream_t stream);

}  // namespace swift::ops::cuda::lora_detail
