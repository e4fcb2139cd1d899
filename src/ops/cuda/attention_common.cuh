// ops/cuda/attention_common.cuh — device helpers shared by attention_fwd.cu, attention_bwd.cu and lora.cu:
// tensor-core fragments (mma.sync m16n8k16 bf16 / f16 -> fp32, ldmatrix), cp.async copies, dtype conversion, sequence
// lookup.
//
// Invariants:
//  - Included only by .cu files (nvcc); no fmt, no core headers.
//  - Fragment layouts are PTX's for mma.m16n8k16 (g = lane / 4, t = lane % 4): A regs {(g, 2t..), (g+8, 2t..),
//    (g, 2t+8..), (g+8, 2t+8..)}, B regs {(k 2t.., n g), (k 2t+8.., n g)}, C {(g, 2t), (g, 2t+1), (g+8, 2t),
//    (g+8, 2t+1)}; the lower 16 bits of a packed pair hold the lower column index.
//  - Tensor-core kernels are templates on the 16-bit element type T (__nv_bfloat16 or __half): operands, shared
//    tiles and packed pairs are T; accumulators fp32.
//  - Shared-memory tiles are T, row-major with a padded row stride (D + 8 elements) so ldmatrix's eight
//    16-byte row reads fall in distinct banks.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

namespace swift::ops::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte asynchronous copy global -> shared; when !valid, writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const int src_size = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_size));
}
// 4-byte asynchronous copy; zero-fills when !valid.
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, bool valid) {
  const int src_size = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* smem) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(smem)));
}

// c += a (16x16 T, row) * b (16x8 T, col), fp32 accumulate; T = __nv_bfloat16 or __half.
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<T, __half>);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats -> a packed pair of T (round to nearest even), lo in the lower 16 bits.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    static_assert(std::is_same_v<T, __half>);
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

// A fragment of a 16x16 block from two accumulator n-tiles (columns 0..7 in c0, 8..15 in c1).
template <typename T>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
  a[0] = pack2<T>(c0[0], c0[1]);
  a[1] = pack2<T>(c0[2], c0[3]);
  a[2] = pack2<T>(c1[0], c1[1]);
  a[3] = pack2<T>(c1[2], c1[3]);
}

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// The tensor-core kernels' instantiation for dtype code 1 (BF16) or 2 (F16) and head dim 64 or 128: calls
// launch(TcTypes<T, D>{}) and returns its status (the caller checked dtype and head_dim).
template <typename T, int D>
struct TcTypes {
  using Elem = T;
  static constexpr int kHeadDim = D;
};
template <typename Launch>
cudaError_t with_tc_types(int dtype, int head_dim, Launch&& launch) {
  if (head_dim == 64) return dtype == 1 ? launch(TcTypes<__nv_bfloat16, 64>{}) : launch(TcTypes<__half, 64>{});
  return dtype == 1 ? launch(TcTypes<__nv_bfloat16, 128>{}) : launch(TcTypes<__half, 128>{});
}

// Index of the sequence holding token t: the last b with cu[b] <= t (cu strictly covers [0, T)).
__device__ __forceinline__ int find_sequence(const int32_t* cu, int batch, int64_t t) {
  int lo = 0, hi = batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// Copies rows [row0, row0 + ROWS) of head `head` of a (tokens, H, D) tensor of 16-bit T (sequence starting at token
// `begin`, `len` tokens) into a padded shared tile; rows at or past len are zero-filled. All threads call.
template <int ROWS, int D, int THREADS, typename T>
__device__ __forceinline__ void load_tile(T* tile, const T* src, int64_t begin, int len, int row0, int heads,
                                          int head) {
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kLd = D + 8;
  for (int c = threadIdx.x; c < ROWS * kChunks; c += THREADS) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int row = row0 + r;
    const bool valid = row < len;
    const T* g = valid ? src + ((begin + row) * heads + head) * D + col : src;
    cp_async_16(tile + r * kLd + col, g, valid);
  }
}

}  // namespace swift::ops::cuda::attn
