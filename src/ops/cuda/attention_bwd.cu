// ops/cuda/attention_bwd.cu — backward of causal (optionally sliding-window) attention over packed
// variable-length sequences with grouped-query heads, flash-attention-2 style and deterministic (no atomics).
//
// Invariants:
//  - delta (Hq, T) F32 = rowsum(dout * out) is computed first (scratch owned by the caller).
//  - P is recomputed from q, k and the forward's lse: P = exp(scale q.k - lse); dS = P (dP - delta) with
//    dP = dout . v; dq = scale dS k, dk = scale dS^T q, dv = P^T dout. dk and dv of a kv head sum the Hq/Hkv
//    query heads of its group inside one block (a fixed loop order), so results are identical run to run.
//  - BF16 / F16 tensor-core path (D in {64, 128}; kernels are templates on the 16-bit element type T): kernel
//    dkdv is parallel over (64-key block, kv head, sequence) and loops over the group's heads and the visible
//    query tiles (double-buffered with cp.async); kernel dq is parallel over (64-query block, head, sequence) and
//    loops over visible key tiles. Products on mma.sync m16n8k16 (T operands, fp32 accumulate); P and dS are
//    rounded to T only as operands.
//  - Generic path (F32, other D): one warp per query and head for dq, one warp per key and kv head for dk/dv;
//    fp32 math throughout.
//  - Masked pairs (j > i, i - j >= window, rows past the sequence end) get P = 0 exactly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/kernels_attention.cuh"

namespace swift::ops::cuda {

using namespace attn;

namespace {

struct BwdParams {
  const void* dout;
  const void* q;
  const void* k;
  const void* v;
  const void* out;
  const float* lse;
  const int32_t* cu;
  float* delta;
  void* dq;
  void* dk;
  void* dv;
  int64_t tokens;
  int batch, hq, hkv, d;
  int window;
  float scale;
};

// ---- delta = rowsum(dout * out): one warp per (token, head) ---------------------------------------------
template <typename T>
__global__ void __launch_bounds__(256) attention_delta(BwdParams p) {
  const int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= p.tokens * p.hq) return;
  const T* a = static_cast<const T*>(p.dout) + w * p.d;
  const T* b = static_cast<const T*>(p.out) + w * p.d;
  float acc = 0.0f;
  for (int c = lane; c < p.d; c += 32) acc = fmaf(to_f32(a[c]), to_f32(b[c]), acc);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  const int64_t tok = w / p.hq, h = w % p.hq;
  if (lane == 0) p.delta[h * p.tokens + tok] = acc;
}

// ---- BF16 / F16 tensor-core kernels --------------------------------------------------------------------------
constexpr int kThreads = 128;
constexpr int kBlk = 64;  // keys per dkdv block, queries per dq block, keys per dq tile

template <int D>
__host__ __device__ constexpr int dkdv_bq() { return D <= 64 ? 64 : 32; }  // query tile of the dkdv kernel (register budget)

template <int D>
constexpr int dkdv_smem_bytes() {
  return (2 * kBlk + 4 * dkdv_bq<D>()) * (D + 8) * 2 + 4 * dkdv_bq<D>() * 4;  // K, V, 2 x (Q, dO), 2 x (lse, delta)
}
template <int D>
constexpr int dq_smem_bytes() {
  return (2 * kBlk + 4 * kBlk) * (D + 8) * 2;  // Q, dO, 2 x (K, V)
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) attention_dkdv_tc(BwdParams p) {
  constexpr int kLd = D + 8, kBq = dkdv_bq<D>();
  const int b = blockIdx.z, kvh = blockIdx.y;
  const int k0 = (gridDim.x - 1 - blockIdx.x) * kBlk;
  const int64_t begin = p.cu[b];
  const int len = p.cu[b + 1] - static_cast<int>(begin);
  if (k0 >= len) return;
  const int group = p.hq / p.hkv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  extern __shared__ __align__(16) unsigned char smem[];
  T* sK = reinterpret_cast<T*>(smem);
  T* sV = sK + kBlk * kLd;
  T* sQ = sV + kBlk * kLd;    // 2 stages
  T* sdO = sQ + 2 * kBq * kLd;  // 2 stages
  float* sLse = reinterpret_cast<float*>(sdO + 2 * kBq * kLd);  // 2 stages
  float* sDelta = sLse + 2 * kBq;                                // 2 stages

  const auto* q = static_cast<const T*>(p.q);
  const auto* dout = static_cast<const T*>(p.dout);

  // visible queries: i in [k0, min(len - 1, k0 + 63 + window - 1)]
  const int q_first = (k0 / kBq) * kBq;
  const int q_last = p.window > 0 ? min(len - 1, k0 + kBlk - 1 + p.window - 1) : len - 1;
  const int tiles_per_head = (q_last - q_first) / kBq + 1;
  const int n_iter = tiles_per_head * group;

  auto issue = [&](int iter, int stage) {
    const int hh = kvh * group + iter / tiles_per_head;
    const int qt = q_first + (iter % tiles_per_head) * kBq;
    load_tile<kBq, D, kThreads>(sQ + stage * kBq * kLd, q, begin, len, qt, p.hq, hh);
    load_tile<kBq, D, kThreads>(sdO + stage * kBq * kLd, dout, begin, len, qt, p.hq, hh);
    for (int c = threadIdx.x; c < kBq; c += kThreads) {
      const bool valid = qt + c < len;
      const int64_t idx = valid ? hh * p.tokens + begin + qt + c : 0;
      cp_async_4(sLse + stage * kBq + c, p.lse + idx, valid);
      cp_async_4(sDelta + stage * kBq + c, p.delta + idx, valid);
    }
  };

  load_tile<kBlk, D, kThreads>(sK, static_cast<const T*>(p.k), begin, len, k0, p.hkv, kvh);
  load_tile<kBlk, D, kThreads>(sV, static_cast<const T*>(p.v), begin, len, k0, p.hkv, kvh);
  issue(0, 0);
  cp_async_commit();

  const float sl2 = p.scale * kLog2e;
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) {
    dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.0f;
    dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
  }
  const int key_base = k0 + warp * 16 + g;  // local key index of rows g (and +8)

  for (int it = 0; it < n_iter; ++it) {
    cp_async_wait_all();
    __syncthreads();
    if (it + 1 < n_iter) {
      issue(it + 1, (it + 1) & 1);
      cp_async_commit();
    }
    const int st = it & 1;
    const int qt = q_first + (it % tiles_per_head) * kBq;
    const T* cQ = sQ + st * kBq * kLd;
    const T* cdO = sdO + st * kBq * kLd;
    const float* cLse = sLse + st * kBq;
    const float* cDelta = sDelta + st * kBq;

    // S^T = K_w Q^T and dP^T = V_w dO^T (16 keys x kBq queries per warp)
    float s[kBq / 8][4], dp[kBq / 8][4];
#pragma unroll
    for (int n = 0; n < kBq / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
      dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 32; ++kk) {
      uint32_t ak0[4], ak1[4], av0[4], av1[4];
      const int arow = (warp * 16 + (lane & 15)) * kLd + kk * 32 + (lane >> 4) * 8;
      ldmatrix_x4(ak0, sK + arow);
      ldmatrix_x4(ak1, sK + arow + 16);
      ldmatrix_x4(av0, sV + arow);
      ldmatrix_x4(av1, sV + arow + 16);
#pragma unroll
      for (int n = 0; n < kBq / 8; ++n) {
        const int brow = (n * 8 + (lane & 7)) * kLd + kk * 32 + (lane >> 3) * 8;
        uint32_t bq[4], bo[4];
        ldmatrix_x4(bq, cQ + brow);
        ldmatrix_x4(bo, cdO + brow);
        mma_m16n8k16<T>(s[n], ak0, bq[0], bq[1]);
        mma_m16n8k16<T>(s[n], ak1, bq[2], bq[3]);
        mma_m16n8k16<T>(dp[n], av0, bo[0], bo[1]);
        mma_m16n8k16<T>(dp[n], av1, bo[2], bo[3]);
      }
    }

    // P^T and dS^T (columns are queries)
    const bool need_mask = (k0 + kBlk - 1 > qt) || (qt + kBq > len) ||
                           (p.window > 0 && (qt + kBq - 1) - k0 >= p.window);
#pragma unroll
    for (int n = 0; n < kBq / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = n * 8 + 2 * t + (e & 1);
        float pv = exp2f(s[n][e] * sl2 - cLse[c] * kLog2e);
        if (need_mask) {
          const int i = qt + c, j = key_base + (e >= 2 ? 8 : 0);
          const bool ok = j <= i && i < len && (p.window <= 0 || i - j < p.window);
          if (!ok) pv = 0.0f;
        }
        s[n][e] = pv;
        dp[n][e] = pv * (dp[n][e] - cDelta[c]);
      }
    }

    // dV += P^T dO, dK += dS^T Q (k = queries)
#pragma unroll
    for (int ks = 0; ks < kBq / 16; ++ks) {
      uint32_t ap[4], ads[4];
      acc_to_a<T>(ap, s[2 * ks], s[2 * ks + 1]);
      acc_to_a<T>(ads, dp[2 * ks], dp[2 * ks + 1]);
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {
        const int brow = (ks * 16 + (lane & 15)) * kLd + dt * 16 + (lane >> 4) * 8;
        uint32_t bo[4], bq[4];
        ldmatrix_x4_trans(bo, cdO + brow);
        ldmatrix_x4_trans(bq, cQ + brow);
        mma_m16n8k16<T>(dv[2 * dt], ap, bo[0], bo[1]);
        mma_m16n8k16<T>(dv[2 * dt + 1], ap, bo[2], bo[3]);
        mma_m16n8k16<T>(dk[2 * dt], ads, bq[0], bq[1]);
        mma_m16n8k16<T>(dk[2 * dt + 1], ads, bq[2], bq[3]);
      }
    }
  }

  auto* gdk = static_cast<T*>(p.dk);
  auto* gdv = static_cast<T*>(p.dv);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int j = key_base + 8 * r;
    if (j >= len) continue;
    const int64_t off = ((begin + j) * p.hkv + kvh) * D + 2 * t;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(gdk + off + n * 8) = pack2<T>(dk[n][2 * r] * p.scale, dk[n][2 * r + 1] * p.scale);
      *reinterpret_cast<uint32_t*>(gdv + off + n * 8) = pack2<T>(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) attention_dq_tc(BwdParams p) {
  constexpr int kLd = D + 8;
  const int b = blockIdx.z, h = blockIdx.y;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBlk;
  const int64_t begin = p.cu[b];
  const int len = p.cu[b + 1] - static_cast<int>(begin);
  if (q0 >= len) return;
  const int kvh = h / (p.hq / p.hkv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;

  extern __shared__ __align__(16) unsigned char smem[];
  T* sQ = reinterpret_cast<T*>(smem);
  T* sdO = sQ + kBlk * kLd;
  T* sK = sdO + kBlk * kLd;  // 2 stages
  T* sV = sK + 2 * kBlk * kLd;

  const auto* k = static_cast<const T*>(p.k);
  const auto* v = static_cast<const T*>(p.v);

  const int q_last = min(q0 + kBlk, len) - 1;
  int k_first = p.window > 0 ? max(0, q0 - p.window + 1) : 0;
  k_first = (k_first / kBlk) * kBlk;
  const int n_tiles = (q_last - k_first) / kBlk + 1;

  load_tile<kBlk, D, kThreads>(sQ, static_cast<const T*>(p.q), begin, len, q0, p.hq, h);
  load_tile<kBlk, D, kThreads>(sdO, static_cast<const T*>(p.dout), begin, len, q0, p.hq, h);
  load_tile<kBlk, D, kThreads>(sK, k, begin, len, k_first, p.hkv, kvh);
  load_tile<kBlk, D, kThreads>(sV, v, begin, len, k_first, p.hkv, kvh);
  cp_async_commit();

  const int row_base = q0 + warp * 16 + g;
  float lse2[2], dlt[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = row_base + 8 * r;
    lse2[r] = i < len ? p.lse[h * p.tokens + begin + i] * kLog2e : 0.0f;
    dlt[r] = i < len ? p.delta[h * p.tokens + begin + i] : 0.0f;
  }
  const float sl2 = p.scale * kLog2e;
  float dq[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;

  for (int it = 0; it < n_tiles; ++it) {
    const int kb = k_first + it * kBlk;
    cp_async_wait_all();
    __syncthreads();
    if (it + 1 < n_tiles) {
      const int st = (it + 1) & 1;
      load_tile<kBlk, D, kThreads>(sK + st * kBlk * kLd, k, begin, len, kb + kBlk, p.hkv, kvh);
      load_tile<kBlk, D, kThreads>(sV + st * kBlk * kLd, v, begin, len, kb + kBlk, p.hkv, kvh);
      cp_async_commit();
    }
    const T* cK = sK + (it & 1) * kBlk * kLd;
    const T* cV = sV + (it & 1) * kBlk * kLd;

    // S = Q_w K^T, dP = dO_w V^T (16 queries x 64 keys per warp)
    float s[kBlk / 8][4], dp[kBlk / 8][4];
#pragma unroll
    for (int n = 0; n < kBlk / 8; ++n) {
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
      dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 32; ++kk) {
      uint32_t aq0[4], aq1[4], ao0[4], ao1[4];
      const int arow = (warp * 16 + (lane & 15)) * kLd + kk * 32 + (lane >> 4) * 8;
      ldmatrix_x4(aq0, sQ + arow);
      ldmatrix_x4(aq1, sQ + arow + 16);
      ldmatrix_x4(ao0, sdO + arow);
      ldmatrix_x4(ao1, sdO + arow + 16);
#pragma unroll
      for (int n = 0; n < kBlk / 8; ++n) {
        const int brow = (n * 8 + (lane & 7)) * kLd + kk * 32 + (lane >> 3) * 8;
        uint32_t bk[4], bv[4];
        ldmatrix_x4(bk, cK + brow);
        ldmatrix_x4(bv, cV + brow);
        mma_m16n8k16<T>(s[n], aq0, bk[0], bk[1]);
        mma_m16n8k16<T>(s[n], aq1, bk[2], bk[3]);
        mma_m16n8k16<T>(dp[n], ao0, bv[0], bv[1]);
        mma_m16n8k16<T>(dp[n], ao1, bv[2], bv[3]);
      }
    }

    const bool need_mask = (kb + kBlk - 1 > q0) || (q0 + kBlk > len) ||
                           (p.window > 0 && (q0 + kBlk - 1) - kb >= p.window);
#pragma unroll
    for (int n = 0; n < kBlk / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1;
        float pv = exp2f(s[n][e] * sl2 - lse2[r]);
        if (need_mask) {
          const int i = row_base + 8 * r, j = kb + n * 8 + 2 * t + (e & 1);
          const bool ok = j <= i && i < len && (p.window <= 0 || i - j < p.window);
          if (!ok) pv = 0.0f;
        }
        dp[n][e] = pv * (dp[n][e] - dlt[r]);
      }
    }

    // dQ += dS K (k = keys)
#pragma unroll
    for (int ks = 0; ks < kBlk / 16; ++ks) {
      uint32_t a[4];
      acc_to_a<T>(a, dp[2 * ks], dp[2 * ks + 1]);
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {
        uint32_t bk[4];
        ldmatrix_x4_trans(bk, cK + (ks * 16 + (lane & 15)) * kLd + dt * 16 + (lane >> 4) * 8);
        mma_m16n8k16<T>(dq[2 * dt], a, bk[0], bk[1]);
        mma_m16n8k16<T>(dq[2 * dt + 1], a, bk[2], bk[3]);
      }
    }
  }

  auto* gdq = static_cast<T*>(p.dq);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = row_base + 8 * r;
    if (i >= len) continue;
    T* dst = gdq + ((begin + i) * p.hq + h) * D + 2 * t;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) = pack2<T>(dq[n][2 * r] * p.scale, dq[n][2 * r + 1] * p.scale);
    }
  }
}

// ---- generic kernels (fp32 math, any D up to 512) ----------------------------------------------------------
// dq: one warp per (query token, head).
template <typename T, int R>
__global__ void __launch_bounds__(128) attention_dq_generic(BwdParams p) {
  const int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= p.tokens * p.hq) return;
  const int64_t tok = w / p.hq;
  const int h = static_cast<int>(w % p.hq), kvh = h / (p.hq / p.hkv), d = p.d;
  const int64_t begin = p.cu[find_sequence(p.cu, p.batch, tok)];
  const int64_t first = p.window > 0 ? max(begin, tok - p.window + 1) : begin;
  const T* qrow = static_cast<const T*>(p.q) + w * d;
  const T* orow = static_cast<const T*>(p.dout) + w * d;
  float qr[R], dor[R], acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int c = lane + 32 * r;
    qr[r] = c < d ? to_f32(qrow[c]) : 0.0f;
    dor[r] = c < d ? to_f32(orow[c]) : 0.0f;
    acc[r] = 0.0f;
  }
  const float lse = p.lse[h * p.tokens + tok], dl = p.delta[h * p.tokens + tok];
  for (int64_t j = first; j <= tok; ++j) {
    const T* kr = static_cast<const T*>(p.k) + (j * p.hkv + kvh) * d;
    const T* vr = static_cast<const T*>(p.v) + (j * p.hkv + kvh) * d;
    float s = 0.0f, dp = 0.0f;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int c = lane + 32 * r;
      if (c < d) {
        s = fmaf(qr[r], to_f32(kr[c]), s);
        dp = fmaf(dor[r], to_f32(vr[c]), dp);
      }
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) {
      s += __shfl_xor_sync(0xffffffffu, s, off);
      dp += __shfl_xor_sync(0xffffffffu, dp, off);
    }
    const float pj = expf(s * p.scale - lse);
    const float ds = pj * (dp - dl);
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int c = lane + 32 * r;
      if (c < d) acc[r] = fmaf(ds, to_f32(kr[c]), acc[r]);
    }
  }
  T* out = static_cast<T*>(p.dq) + w * d;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int c = lane + 32 * r;
    if (c < d) out[c] = from_f32<T>(acc[r] * p.scale);
  }
}

// dk, dv: one warp per (key token, kv head); loops over the group's heads, then the visible queries.
template <typename T, int R>
__global__ void __launch_bounds__(128) attention_dkdv_generic(BwdParams p) {
  const int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (w >= p.tokens * p.hkv) return;
  const int64_t tok = w / p.hkv;
  const int kvh = static_cast<int>(w % p.hkv), group = p.hq / p.hkv, d = p.d;
  const int sq = find_sequence(p.cu, p.batch, tok);
  const int64_t end = p.cu[sq + 1];
  const int64_t last = p.window > 0 ? min(end - 1, tok + p.window - 1) : end - 1;
  const T* krow = static_cast<const T*>(p.k) + w * d;
  const T* vrow = static_cast<const T*>(p.v) + w * d;
  float kr[R], vr[R], gk[R], gv[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int c = lane + 32 * r;
    kr[r] = c < d ? to_f32(krow[c]) : 0.0f;
    vr[r] = c < d ? to_f32(vrow[c]) : 0.0f;
    gk[r] = gv[r] = 0.0f;
  }
  for (int hh = kvh * group; hh < (kvh + 1) * group; ++hh) {
    for (int64_t i = tok; i <= last; ++i) {
      const T* qr = static_cast<const T*>(p.q) + (i * p.hq + hh) * d;
      const T* dor = static_cast<const T*>(p.dout) + (i * p.hq + hh) * d;
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int c = lane + 32 * r;
        if (c < d) {
          s = fmaf(to_f32(qr[c]), kr[r], s);
          dp = fmaf(to_f32(dor[c]), vr[r], dp);
        }
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
        s += __shfl_xor_sync(0xffffffffu, s, off);
        dp += __shfl_xor_sync(0xffffffffu, dp, off);
      }
      const float pj = expf(s * p.scale - p.lse[hh * p.tokens + i]);
      const float ds = pj * (dp - p.delta[hh * p.tokens + i]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int c = lane + 32 * r;
        if (c < d) {
          gv[r] = fmaf(pj, to_f32(dor[c]), gv[r]);
          gk[r] = fmaf(ds, to_f32(qr[c]), gk[r]);
        }
      }
    }
  }
  T* odk = static_cast<T*>(p.dk) + w * d;
  T* odv = static_cast<T*>(p.dv) + w * d;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int c = lane + 32 * r;
    if (c < d) {
      odk[c] = from_f32<T>(gk[r] * p.scale);
      odv[c] = from_f32<T>(gv[r]);
    }
  }
}

template <typename T, int R>
cudaError_t launch_generic_r(const BwdParams& p, cudaStream_t stream) {
  const unsigned bq = static_cast<unsigned>((p.tokens * p.hq + 3) / 4);
  const unsigned bk = static_cast<unsigned>((p.tokens * p.hkv + 3) / 4);
  attention_dq_generic<T, R><<<bq, 128, 0, stream>>>(p);
  cudaError_t st = cudaGetLastError();
  if (st != cudaSuccess) return st;
  attention_dkdv_generic<T, R><<<bk, 128, 0, stream>>>(p);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_generic(const BwdParams& p, cudaStream_t stream) {
  if (p.d <= 64) return launch_generic_r<T, 2>(p, stream);
  if (p.d <= 128) return launch_generic_r<T, 4>(p, stream);
  if (p.d <= 256) return launch_generic_r<T, 8>(p, stream);
  if (p.d <= 512) return launch_generic_r<T, 16>(p, stream);
  return cudaErrorInvalidValue;
}

template <typename T, int D>
cudaError_t launch_tc(const BwdParams& p, int max_seqlen, cudaStream_t stream) {
  constexpr int smem_kv = dkdv_smem_bytes<D>(), smem_q = dq_smem_bytes<D>();
  cudaError_t st = cudaFuncSetAttribute(attention_dkdv_tc<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_kv);
  if (st != cudaSuccess) return st;
  st = cudaFuncSetAttribute(attention_dq_tc<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_q);
  if (st != cudaSuccess) return st;
  const unsigned blocks = static_cast<unsigned>((max_seqlen + kBlk - 1) / kBlk);
  attention_dkdv_tc<T, D><<<dim3(blocks, p.hkv, p.batch), kThreads, smem_kv, stream>>>(p);
  st = cudaGetLastError();
  if (st != cudaSuccess) return st;
  attention_dq_tc<T, D><<<dim3(blocks, p.hq, p.batch), kThreads, smem_q, stream>>>(p);
  return cudaGetLastError();
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

cudaError_t launch_attention_backward(const AttentionShape& s, const void* dout, const void* q, const void* k,
                                      const void* v, const void* out, const float* lse, const int32_t* cu_seqlens,
                                      float* delta, void* dq, void* dk, void* dv, int dtype, cudaStream_t stream) {
  if (s.tokens == 0 || s.max_seqlen == 0) return cudaSuccess;
  if (s.batch > 65535 || s.hq > 65535) return cudaErrorInvalidValue;
  BwdParams p{dout, q, k, v, out, lse, cu_seqlens, delta, dq, dk, dv, s.tokens, s.batch, s.hq, s.hkv, s.head_dim,
              s.window > 0 && s.window < s.max_seqlen ? static_cast<int>(s.window) : 0, s.scale};
  const unsigned delta_blocks = static_cast<unsigned>((s.tokens * s.hq + 7) / 8);
  if (dtype < 0 || dtype > 2) return cudaErrorInvalidValue;
  if (dtype == 1) attention_delta<__nv_bfloat16><<<delta_blocks, 256, 0, stream>>>(p);
  else if (dtype == 2) attention_delta<__half><<<delta_blocks, 256, 0, stream>>>(p);
  else attention_delta<float><<<delta_blocks, 256, 0, stream>>>(p);
  cudaError_t st = cudaGetLastError();
  if (st != cudaSuccess) return st;
  bool tc = dtype != 0;
  const void* ptrs[] = {dout, q, k, v, dq, dk, dv};
  for (const void* ptr : ptrs) tc = tc && aligned16(ptr);
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
