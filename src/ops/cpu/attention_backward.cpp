// ops/cpu/attention_backward.cpp — fast CPU backward of causal attention over a packed variable-length batch
// (flash-attention-2 style: probabilities recomputed per block from q, k and the forward's lse).
//
// Math, per query row i (a query token and one head) and visible key j:
//   P_ij = exp(scale q_i.k_j - lse_i),  Delta_i = dout_i . out_i,  dP_ij = dout_i . v_j,
//   dS_ij = P_ij (dP_ij - Delta_i),  dq_i = scale sum_j dS_ij k_j,  dk_j = scale sum_i dS_ij q_i,
//   dv_j = sum_i P_ij dout_i.
//
// Invariants:
//  - Two passes, each a set of independent work items, so every output element is written by exactly one item
//    and the result does not depend on thread count or scheduling:
//      pass 1: items (sequence, kv head, block of kBlockK keys) own dk and dv of their keys; they visit the
//              query blocks that see their keys (all heads of the kv group, whose rows share the key block);
//      pass 2: items (sequence, kv head, block of kBlockQ queries) own dq of their rows (the forward's items).
//    This recomputes the scores twice (7 block products instead of 5) in exchange for no atomics and no
//    per-thread copies of dq.
//  - Rows are (query, head of the group) pairs, query-major, as in the forward; q is pre-scaled into a gathered
//    block (qs = scale q), so dk = dS^T qs carries the scale and dq is scaled once at the end.
//  - All blocking is relative to each sequence's start and key ranges are clipped to the query's sequence and
//    window: a sequence gives bit-identical gradients packed or alone.
//  - Memory: O(rows x (D + kBlockK)) scratch per thread plus Delta (Hq x T); nothing of size T x T.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"

namespace swift::ops::cpu {

namespace {

constexpr int64_t kBlockQ = 64;   // queries per block
constexpr int64_t kBlockK = 128;  // keys per block (columns of the score tile)

struct Problem {
  const float* q;
  const float* k;
  const float* v;
  const float* dout;
  const float* lse;    // (Hq, T)
  const float* delta;  // (Hq, T)
  float* dq;
  float* dk;
  float* dv;
  int64_t tokens, hq, hkv, d, group, window;
  float scale;
};

struct Item {
  int64_t seq_begin, seq_end;
  int64_t begin, end;  // keys (pass 1) or queries (pass 2)
  int64_t kv_head;
  int64_t cost;
};

inline int64_t first_key(const Problem& p, int64_t seq_begin, int64_t i) {
  return p.window > 0 ? std::max(seq_begin, i - p.window + 1) : seq_begin;
}

// Rows of queries [i0, i1) for the heads of kv_head's group: qs = scale q, dos = dout, lse and Delta per row.
void gather_rows(const Problem& p, int64_t kv_head, int64_t i0, int64_t i1, float* qs, float* dos, float* lse_rows,
                 float* delta_rows) {
  const int64_t g = p.group, d = p.d;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t off = (i * p.hq + kv_head * g) * d, row0 = (i - i0) * g;
    const float* src_q = p.q + off;
    const float* src_do = p.dout + off;
    float* dst_q = qs + row0 * d;
    float* dst_do = dos + row0 * d;
#pragma omp simd
    for (int64_t x = 0; x < g * d; ++x) dst_q[x] = src_q[x] * p.scale;
    std::copy(src_do, src_do + g * d, dst_do);
    for (int64_t h = 0; h < g; ++h) {
      lse_rows[row0 + h] = p.lse[(kv_head * g + h) * p.tokens + i];
      delta_rows[row0 + h] = p.delta[(kv_head * g + h) * p.tokens + i];
    }
  }
}

// Scores s (nr x nk, row stride kBlockK) of rows starting at query i_first -> probabilities exp(s - lse),
// zero for keys [j0, j0 + nk) the row's query does not see.
void make_probs(const Problem& p, int64_t seq_begin, int64_t i_first, int64_t nr, int64_t j0, int64_t nk, float* s,
                const float* lse_rows) {
  for (int64_t rr = 0; rr < nr; ++rr) {
    const int64_t i = i_first + rr / p.group;
    const int64_t lo = std::max<int64_t>(first_key(p, seq_begin, i) - j0, 0);
    const int64_t hi = std::clamp<int64_t>(i + 1 - j0, 0, nk);
    float* row = s + rr * kBlockK;
    const float l = lse_rows[rr];
#pragma omp simd
    for (int64_t j = 0; j < nk; ++j) row[j] = exp_approx((j >= lo && j < hi) ? row[j] - l : -INFINITY);
  }
}

// dp (nr x nk) <- P * (dP - Delta), in place.
void make_dscores(int64_t nr, int64_t nk, const float* probs, float* dp, const float* delta_rows) {
  for (int64_t rr = 0; rr < nr; ++rr) {
    const float* pr = probs + rr * kBlockK;
    float* row = dp + rr * kBlockK;
    const float delta = delta_rows[rr];
#pragma omp simd
    for (int64_t j = 0; j < nk; ++j) row[j] = pr[j] * (row[j] - delta);
  }
}

// Pass 1: dk, dv of keys [item.begin, item.end) of one kv head.
void dkdv_item(const Problem& p, const Item& item) {
  const int64_t g = p.group, d = p.d, nk = item.end - item.begin, j0 = item.begin;
  const int64_t max_rows = kBlockQ * g, kv_stride = p.hkv * d;
  float* qs = thread_scratch(ScratchSlot::Attention,
                             static_cast<size_t>(max_rows * (2 * d + 2 * kBlockK + 2) + 2 * kBlockK * d));
  float* dos = qs + max_rows * d;
  float* s = dos + max_rows * d;
  float* dp = s + max_rows * kBlockK;
  float* lse_rows = dp + max_rows * kBlockK;
  float* delta_rows = lse_rows + max_rows;
  float* dk_acc = delta_rows + max_rows;
  float* dv_acc = dk_acc + kBlockK * d;
  std::fill(dk_acc, dk_acc + nk * d, 0.0f);
  std::fill(dv_acc, dv_acc + nk * d, 0.0f);
  const float* kblock = p.k + (j0 * p.hkv + item.kv_head) * d;
  const float* vblock = p.v + (j0 * p.hkv + item.kv_head) * d;
  // Queries that see a key of the block: j0 <= i, and i < j_last + window.
  const int64_t i_end = p.window > 0 ? std::min(item.seq_end, item.end - 1 + p.window) : item.seq_end;
  for (int64_t i0 = j0; i0 < i_end; i0 += kBlockQ) {
    const int64_t i1 = std::min(i0 + kBlockQ, i_end), rows = (i1 - i0) * g;
    gather_rows(p, item.kv_head, i0, i1, qs, dos, lse_rows, delta_rows);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(nk),
                static_cast<int>(d), 1.0f, qs, static_cast<int>(d), kblock, static_cast<int>(kv_stride), 0.0f, s,
                static_cast<int>(kBlockK));
    make_probs(p, item.seq_begin, i0, rows, j0, nk, s, lse_rows);
    // dv += P^T dout
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(nk), static_cast<int>(d),
                static_cast<int>(rows), 1.0f, s, static_cast<int>(kBlockK), dos, static_cast<int>(d), 1.0f, dv_acc,
                static_cast<int>(d));
    // dP = dout V^T, then dS
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(nk),
                static_cast<int>(d), 1.0f, dos, static_cast<int>(d), vblock, static_cast<int>(kv_stride), 0.0f, dp,
                static_cast<int>(kBlockK));
    make_dscores(rows, nk, s, dp, delta_rows);
    // dk += dS^T (scale q)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(nk), static_cast<int>(d),
                static_cast<int>(rows), 1.0f, dp, static_cast<int>(kBlockK), qs, static_cast<int>(d), 1.0f, dk_acc,
                static_cast<int>(d));
  }
  for (int64_t j = 0; j < nk; ++j) {
    const int64_t off = ((j0 + j) * p.hkv + item.kv_head) * d;
    std::copy(dk_acc + j * d, dk_acc + (j + 1) * d, p.dk + off);
    std::copy(dv_acc + j * d, dv_acc + (j + 1) * d, p.dv + off);
  }
}

// Pass 2: dq of queries [item.begin, item.end) for the heads of one kv group.
void dq_item(const Problem& p, const Item& item) {
  const int64_t g = p.group, d = p.d, i0 = item.begin, i1 = item.end, rows = (i1 - i0) * g;
  const int64_t max_rows = kBlockQ * g, kv_stride = p.hkv * d;
  float* qs = thread_scratch(ScratchSlot::Attention, static_cast<size_t>(max_rows * (3 * d + 2 * kBlockK + 2)));
  float* dos = qs + max_rows * d;
  float* dq_acc = dos + max_rows * d;
  float* s = dq_acc + max_rows * d;
  float* dp = s + max_rows * kBlockK;
  float* lse_rows = dp + max_rows * kBlockK;
  float* delta_rows = lse_rows + max_rows;
  gather_rows(p, item.kv_head, i0, i1, qs, dos, lse_rows, delta_rows);
  std::fill(dq_acc, dq_acc + rows * d, 0.0f);
  const int64_t key_begin = first_key(p, item.seq_begin, i0);
  for (int64_t j0 = key_begin; j0 < i1; j0 += kBlockK) {
    const int64_t nk = std::min<int64_t>(kBlockK, i1 - j0);
    const int64_t i_lo = std::max(i0, j0);
    const int64_t i_hi = p.window > 0 ? std::min(i1, j0 + nk + p.window - 1) : i1;
    if (i_lo >= i_hi) continue;
    const int64_t r0 = (i_lo - i0) * g, nr = (i_hi - i_lo) * g;
    const float* kblock = p.k + (j0 * p.hkv + item.kv_head) * d;
    const float* vblock = p.v + (j0 * p.hkv + item.kv_head) * d;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nr), static_cast<int>(nk),
                static_cast<int>(d), 1.0f, qs + r0 * d, static_cast<int>(d), kblock, static_cast<int>(kv_stride), 0.0f,
                s, static_cast<int>(kBlockK));
    make_probs(p, item.seq_begin, i_lo, nr, j0, nk, s, lse_rows + r0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nr), static_cast<int>(nk),
                static_cast<int>(d), 1.0f, dos + r0 * d, static_cast<int>(d), vblock, static_cast<int>(kv_stride), 0.0f,
                dp, static_cast<int>(kBlockK));
    make_dscores(nr, nk, s, dp, delta_rows + r0);
    // dq += dS K
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nr), static_cast<int>(d),
                static_cast<int>(nk), 1.0f, dp, static_cast<int>(kBlockK), kblock, static_cast<int>(kv_stride), 1.0f,
                dq_acc + r0 * d, static_cast<int>(d));
  }
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t i = i0 + row / g, h = item.kv_head * g + row % g;
    const float* src = dq_acc + row * d;
    float* dst = p.dq + (i * p.hq + h) * d;
#pragma omp simd
    for (int64_t e = 0; e < d; ++e) dst[e] = src[e] * p.scale;
  }
}

void run_items(std::vector<Item>& items, const Problem& p, double work, void (*fn)(const Problem&, const Item&)) {
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.cost > b.cost; });
  const int64_t count = static_cast<int64_t>(items.size());
#pragma omp parallel for schedule(dynamic, 1) if (count > 1 && work > 1e5)
  for (int64_t it = 0; it < count; ++it) fn(p, items[static_cast<size_t>(it)]);
}

}  // namespace

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, float scale, int64_t window, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  SWIFT_PROFILE("attention_backward");
  const int64_t tokens = q.size(0), hq = q.size(1), hkv = k.size(1), d = q.size(2);
  if (tokens == 0 || d == 0) return;
  blas_single_threaded();
  // Delta = rowsum(dout * out) per (head, token), in fp64.
  Tensor delta = Tensor::empty({hq, tokens}, DType::F32, Device::cpu(), MemoryCategory::Workspace);
  {
    const float* pd = dout.data<float>();
    const float* po = out.data<float>();
    float* pdelta = delta.data<float>();
#pragma omp parallel for schedule(static) if (tokens * hq * d > 32768)
    for (int64_t i = 0; i < tokens; ++i) {
      for (int64_t h = 0; h < hq; ++h) {
        const float* a = pd + (i * hq + h) * d;
        const float* b = po + (i * hq + h) * d;
        double sum = 0.0;
#pragma omp simd reduction(+ : sum)
        for (int64_t e = 0; e < d; ++e) sum += static_cast<double>(a[e]) * b[e];
        pdelta[h * tokens + i] = static_cast<float>(sum);
      }
    }
  }
  Problem p{q.data<float>(), k.data<float>(), v.data<float>(), dout.data<float>(), lse.data<float>(),
            delta.data<float>(), dq.data<float>(), dk.data<float>(), dv.data<float>(), tokens, hq, hkv, d,
            hq / hkv, window, scale};
  const int32_t* cu = cu_seqlens.data<int32_t>();
  const int64_t batch = cu_seqlens.size(0) - 1;
  const double work = static_cast<double>(tokens) * hq * d * 64.0;
  std::vector<Item> items;
  // Pass 1: key blocks; cost = queries that see the block.
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t j0 = cu[s]; j0 < cu[s + 1]; j0 += kBlockK) {
      const int64_t j1 = std::min<int64_t>(j0 + kBlockK, cu[s + 1]);
      const int64_t i_end = window > 0 ? std::min<int64_t>(cu[s + 1], j1 - 1 + window) : cu[s + 1];
      for (int64_t kh = 0; kh < hkv; ++kh) items.push_back({cu[s], cu[s + 1], j0, j1, kh, (i_end - j0) * (j1 - j0)});
    }
  }
  run_items(items, p, work, dkdv_item);
  // Pass 2: query blocks; cost = keys they see.
  items.clear();
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t q0 = cu[s]; q0 < cu[s + 1]; q0 += kBlockQ) {
      const int64_t q1 = std::min<int64_t>(q0 + kBlockQ, cu[s + 1]);
      const int64_t keys = q1 - first_key(p, cu[s], q0);
      for (int64_t kh = 0; kh < hkv; ++kh) items.push_back({cu[s], cu[s + 1], q0, q1, kh, keys * (q1 - q0)});
    }
  }
  run_items(items, p, work, dq_item);
}

}  // namespace swift::ops::cpu
