// ops/cuda/attention_fwd.cu — causal (optionally sliding-window) attention forward over packed variable-length
// sequences with grouped-query heads: a flash-attention-2 tensor-core kernel for BF16 / F16 with D in {64, 128}
// (one template on the element type T), and a generic fp32-math kernel (one warp per query and head) for F32 and
// any other D.
//
// Invariants:
//  - Key j is visible to query i (both local to their sequence) iff j <= i and, with a window, i - j < window;
//    rows past the sequence end are masked and never stored. No T x T matrix exists anywhere.
//  - Online softmax in fp32 with base-2 exponentials of scores pre-scaled by scale * log2(e); lse is stored as
//    the natural log-sum-exp. A row whose keys are all masked so far contributes exp2(-inf) = 0, never NaN.
//  - Tensor-core kernel: block = 4 warps x 16 query rows (64 queries), key tiles of 64 double-buffered with
//    cp.async; S = Q K^T and O += P V on mma.sync m16n8k16 (T operands, fp32 accumulate); P is rounded
//    to T for the product only, the row sums use fp32 P. Query blocks are scheduled longest-first.
//  - Every kernel runs on the caller's stream; launchers return the launch status.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/kernels_attention.cuh"

namespace swift::ops::cuda {

using namespace attn;

namespace {

struct FwdParams {
  const void* q;
  const void* k;
  const void* v;
  const int32_t* cu;
  void* out;
  float* lse;
  int64_t tokens;
  int batch, hq, hkv, d;
  int window;  // 0 = unlimited
  float scale;
};

// ---- BF16 / F16 tensor-core kernel ---------------------------------------------------------------------------
constexpr int kBr = 64, kBc = 64, kFwdThreads = 128;

template <int D>
constexpr int fwd_smem_bytes() {
  return (kBr + 4 * kBc) * (D + 8) * 2;  // Q + 2 stages of K and V
}

template <typename T, int D>
__global__ void __launch_bounds__(kFwdThreads) attention_fwd_tc(FwdParams p) {
  constexpr int kLd = D + 8;
  const int b = blockIdx.z, h = blockIdx.y;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBr;  // longest causal rows first
  const int64_t begin = p.cu[b];
  const int len = p.cu[b + 1] - static_cast<int>(begin);
  if (q0 >= len) return;
  const int kvh = h / (p.hq / p.hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sK = sQ + kBr * kLd;  // 2 stages
  T* sV = sK + 2 * kBc * kLd;

  const auto* q = static_cast<const T*>(p.q);
  const auto* k = static_cast<const T*>(p.k);
  const auto* v = static_cast<const T*>(p.v);

  const int q_last = min(q0 + kBr, len) - 1;
  int k_first = p.window > 0 ? max(0, q0 - p.window + 1) : 0;
  k_first = (k_first / kBc) * kBc;
  const int n_tiles = (q_last - k_first) / kBc + 1;

  load_tile<kBr, D, kFwdThreads>(sQ, q, begin, len, q0, p.hq, h);
  load_tile<kBc, D, kFwdThreads>(sK, k, begin, len, k_first, p.hkv, kvh);
  load_tile<kBc, D, kFwdThreads>(sV, v, begin, len, k_first, p.hkv, kvh);
  cp_async_commit();

  const float sl2 = p.scale * kLog2e;
  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int row_base = q0 + warp * 16 + g;  // local query index of rows g (and +8)

  for (int it = 0; it < n_tiles; ++it) {
    const int kb = k_first + it * kBc;
    cp_async_wait_all();
    __syncthreads();
    if (it + 1 < n_tiles) {
      const int st = (it + 1) & 1;
      load_tile<kBc, D, kFwdThreads>(sK + st * kBc * kLd, k, begin, len, kb + kBc, p.hkv, kvh);
      load_tile<kBc, D, kFwdThreads>(sV + st * kBc * kLd, v, begin, len, kb + kBc, p.hkv, kvh);
      cp_async_commit();
    }
    const T* cK = sK + (it & 1) * kBc * kLd;
    const T* cV = sV + (it & 1) * kBc * kLd;

    // S (16 x 64 per warp) = Q_w K^T
    float s[kBc / 8][4];
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 32; ++kk) {
      uint32_t a0[4], a1[4];
      ldmatrix_x4(a0, sQ + (warp * 16 + (lane & 15)) * kLd + kk * 32 + (lane >> 4) * 8);
      ldmatrix_x4(a1, sQ + (warp * 16 + (lane & 15)) * kLd + kk * 32 + 16 + (lane >> 4) * 8);
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n) {
        uint32_t bk[4];
        ldmatrix_x4(bk, cK + (n * 8 + (lane & 7)) * kLd + kk * 32 + (lane >> 3) * 8);
        mma_m16n8k16<T>(s[n], a0, bk[0], bk[1]);
        mma_m16n8k16<T>(s[n], a1, bk[2], bk[3]);
      }
    }

    // mask + scale into the base-2 domain
    const bool need_mask = (kb + kBc - 1 > q0) || (q0 + kBr > len) ||
                           (p.window > 0 && (q0 + kBr - 1) - kb >= p.window);
#pragma unroll
    for (int n = 0; n < kBc / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * sl2;
        if (need_mask) {
          const int i = row_base + (e >= 2 ? 8 : 0), j = kb + n * 8 + 2 * t + (e & 1);
          const bool ok = j <= i && i < len && (p.window <= 0 || i - j < p.window);
          if (!ok) x = -INFINITY;
        }
        s[n][e] = x;
      }
    }

    // online softmax (rows g: r = 0, g + 8: r = 1)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n) mx = fmaxf(mx, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float corr = exp2f(m[r] - m_use);
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kBc / 8; ++n) {
        s[n][2 * r] = exp2f(s[n][2 * r] - m_use);
        s[n][2 * r + 1] = exp2f(s[n][2 * r + 1] - m_use);
        sum += s[n][2 * r] + s[n][2 * r + 1];
      }
      l[r] = l[r] * corr + sum;
      m[r] = m_new;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][2 * r] *= corr;
        o[n][2 * r + 1] *= corr;
      }
    }

    // O += P V
#pragma unroll
    for (int ks = 0; ks < kBc / 16; ++ks) {
      uint32_t a[4];
      acc_to_a<T>(a, s[2 * ks], s[2 * ks + 1]);
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, cV + (ks * 16 + (lane & 15)) * kLd + dt * 16 + (lane >> 4) * 8);
        mma_m16n8k16<T>(o[2 * dt], a, bv[0], bv[1]);
        mma_m16n8k16<T>(o[2 * dt + 1], a, bv[2], bv[3]);
      }
    }
  }

  // epilogue: normalise, store out and lse
  auto* out = static_cast<T*>(p.out);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = l[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const int i = row_base + 8 * r;
    if (i >= len) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    T* dst = out + ((begin + i) * p.hq + h) * D + 2 * t;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) = pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
    if (p.lse != nullptr && t == 0) p.lse[h * p.tokens + begin + i] = (m[r] + log2f(sum)) * kLn2;
  }
}

// ---- generic kernel: one warp per (query token, head), lanes own dimensions lane + 32 r -------------------
template <typename T, int R>
__global__ void __launch_bounds__(128) attention_fwd_generic(FwdParams p) {
  const int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= p.tokens * p.hq) return;
  const int64_t tok = w / p.hq;
  const int h = static_cast<int>(w % p.hq), kvh = h / (p.hq / p.hkv), d = p.d;
  const int sq = find_sequence(p.cu, p.batch, tok);
  const int64_t begin = p.cu[sq];
  const int64_t first = p.window > 0 ? max(begin, tok - p.window + 1) : begin;
  const T* q = static_cast<const T*>(p.q) + (tok * p.hq + h) * d;
  float qr[R], acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int c = lane + 32 * r;
    qr[r] = c < d ? to_f32(q[c]) : 0.0f;
    acc[r] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = first; j <= tok; ++j) {
    const T* kr = static_cast<const T*>(p.k) + (j * p.hkv + kvh) * d;
    const T* vr = static_cast<const T*>(p.v) + (j * p.hkv + kvh) * d;
    float dot = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int c = lane + 32 * r;
      if (c < d) dot = fmaf(qr[r], to_f32(kr[c]), dot);
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float s = dot * p.scale;
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new), pj = expf(s - m_new);
    l = l * corr + pj;
    m = m_new;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int c = lane + 32 * r;
      if (c < d) acc[r] = acc[r] * corr + pj * to_f32(vr[c]);
    }
  }
  T* o = static_cast<T*>(p.out) + (tok * p.hq + h) * d;
  const float inv = 1.0f / l;  // l >= 1: the query always sees itself
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int c = lane + 32 * r;
    if (c < d) o[c] = from_f32<T>(acc[r] * inv);
  }
  if (p.lse != nullptr && lane == 0) p.lse[h * p.tokens + tok] = m + logf(l);
}

template <typename T>
cudaError_t launch_generic(const FwdParams& p, cudaStream_t stream) {
  const int64_t warps = p.tokens * p.hq;
  const unsigned blocks = static_cast<unsigned>((warps + 3) / 4);
  if (p.d <= 64) attention_fwd_generic<T, 2><<<blocks, 128, 0, stream>>>(p);
  else if (p.d <= 128) attention_fwd_generic<T, 4><<<blocks, 128, 0, stream>>>(p);
  else if (p.d <= 256) attention_fwd_generic<T, 8><<<blocks, 128, 0, stream>>>(p);
  else if (p.d <= 512) attention_fwd_generic<T, 16><<<blocks, 128, 0, stream>>>(p);
  else return cudaErrorInvalidValue;
  return cudaGetLastError();
}

template <typename T, int D>
cudaError_t launch_tc(const FwdParams& p, int max_seqlen, cudaStream_t stream) {
  constexpr int smem = fwd_smem_bytes<D>();
  cudaError_t st = cudaFuncSetAttribute(attention_fwd_tc<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (st != cudaSuccess) return st;
  const dim3 grid((max_seqlen + kBr - 1) / kBr, p.hq, p.batch);
  attention_fwd_tc<T, D><<<grid, kFwdThreads, smem, stream>>>(p);
  return cudaGetLastError();
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

cudaError_t launch_attention_forward(const AttentionShape& s, const void* q, const void* k, const void* v,
                                     const int32_t* cu_seqlens, void* out, float* lse, int dtype,
                                     cudaStream_t stream) {
  if (s.tokens == 0 || s.max_seqlen == 0) return cudaSuccess;
  FwdParams p{q, k, v, cu_seqlens, out, lse, s.tokens, s.batch, s.hq, s.hkv, s.head_dim,
              s.window > 0 && s.window < s.max_seqlen ? static_cast<int>(s.window) : 0, s.scale};
  if (s.batch > 65535 || s.hq > 65535) return cudaErrorInvalidValue;
  if (dtype < 0 || dtype > 2) return cudaErrorInvalidValue;
  const bool tc = dtype != 0 && aligned16(q) && aligned16(k) && aligned16(v) && aligned16(out);
  if (tc && (s.head_dim == 64 || s.head_dim == 128)) {
    return with_tc_types(dtype, s.head_dim, [&](auto types) {
      return launch_tc<typename decltype(types)::Elem, decltype(types)::kHeadDim>(p, s.max_seqlen, stream);
    });
  }
  if (dtype == 1) return launch_generic<__nv_bfloat16>(p, stream);
  if (dtype == 2) return launch_generic<__half>(p, stream);
  return launch_generic<float>(p, stream);
}

}  // namespace swift::ops::cuda
