// ops/cpu/attention.cpp — fast CPU causal attention over a packed variable-length batch (flash-style).
//
// Invariants:
//  - Work items are (sequence, kv head, block of kBlockQ queries); an item owns the output rows and lse
//    entries of its queries for every query head of its kv-head group, so items never write the same memory.
//    Items are scheduled dynamically, costliest (latest in the causal triangle) first.
//  - Within an item, keys are visited in blocks of kBlockK with an online softmax per query row
//    (running max m, running sum l, unnormalised output O): memory is O(rows x (D + kBlockK)) per thread,
//    never T x T. Rows are (query, head of the group) pairs, query-major, so the rows that see a key block
//    form one contiguous range and the group's heads share every key/value block (GQA).
//  - Scores S = (scale q) K^T and the update O += P V are single-threaded sgemm calls on those row ranges;
//    K and V are read in place (row stride Hkv * D), never copied.
//  - Keys visible to query i of a sequence starting at b: b <= j <= i, and i - j < window when window > 0.
//    Nothing crosses a cu_seqlens boundary because key ranges are clipped to the query's own sequence, and
//    all blocking is relative to the sequence start: a sequence gives bit-identical results packed or alone.
//  - lse = m + log(l) in natural log of the scaled scores, as flash-attention returns it.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"

namespace swift::ops::cpu {

namespace {

constexpr int64_t kBlockQ = 64;   // queries per work item
constexpr int64_t kBlockK = 128;  // keys per block (columns of the score tile)

struct WorkItem {
  int64_t seq_begin;  // first token of the sequence
  int64_t q_begin, q_end;
  int64_t kv_head;
  int64_t cost;
};

struct Problem {
  const float* q;
  const float* k;
  const float* v;
  float* out;
  float* lse;  // may be null
  int64_t tokens, hq, hkv, d, group, window;
  float scale;
};

// First key visible to query i of a sequence starting at seq_begin.
inline int64_t first_key(const Problem& p, int64_t seq_begin, int64_t i) {
  return p.window > 0 ? std::max(seq_begin, i - p.window + 1) : seq_begin;
}

void run_item(const Problem& p, const WorkItem& item) {
  const int64_t d = p.d, g = p.group, nq = item.q_end - item.q_begin, rows = nq * g;
  const int64_t kv_stride = p.hkv * d;
  float* qbuf = thread_scratch(ScratchSlot::Attention, static_cast<size_t>(rows * (2 * d + kBlockK + 2)));
  float* obuf = qbuf + rows * d;          // (rows, D) unnormalised outputs
  float* sbuf = obuf + rows * d;          // (rows, kBlockK) scores, then probabilities
  float* m_state = sbuf + rows * kBlockK;  // (rows) running max
  float* l_state = m_state + rows;        // (rows) running sum
  // Row r = (i - q_begin) * G + h_in_group: the group's heads of one query are adjacent in q already.
  for (int64_t i = item.q_begin; i < item.q_end; ++i) {
    const float* src = p.q + (i * p.hq + item.kv_head * g) * d;
    float* dst = qbuf + (i - item.q_begin) * g * d;
#pragma omp simd
    for (int64_t x = 0; x < g * d; ++x) dst[x] = src[x] * p.scale;
  }
  std::fill(obuf, obuf + rows * d, 0.0f);
  std::fill(m_state, m_state + rows, -INFINITY);
  std::fill(l_state, l_state + rows, 0.0f);

  const int64_t key_begin = first_key(p, item.seq_begin, item.q_begin), key_end = item.q_end;
  for (int64_t j0 = key_begin; j0 < key_end; j0 += kBlockK) {
    const int64_t nk = std::min<int64_t>(kBlockK, key_end - j0);
    // Queries that see at least one key of [j0, j0 + nk): i >= j0 (causal) and first_key(i) < j0 + nk.
    const int64_t i_lo = std::max(item.q_begin, j0);
    const int64_t i_hi = p.window > 0 ? std::min(item.q_end, j0 + nk + p.window - 1) : item.q_end;
    if (i_lo >= i_hi) continue;
    const int64_t r0 = (i_lo - item.q_begin) * g, nr = (i_hi - i_lo) * g;
    const float* kblock = p.k + (j0 * p.hkv + item.kv_head) * d;
    const float* vblock = p.v + (j0 * p.hkv + item.kv_head) * d;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nr), static_cast<int>(nk),
                static_cast<int>(d), 1.0f, qbuf + r0 * d, static_cast<int>(d), kblock, static_cast<int>(kv_stride),
                0.0f, sbuf, static_cast<int>(kBlockK));
    for (int64_t rr = 0; rr < nr; ++rr) {
      const int64_t i = i_lo + rr / g, row = r0 + rr;
      const int64_t lo = std::max<int64_t>(first_key(p, item.seq_begin, i) - j0, 0);
      const int64_t hi = std::min<int64_t>(i + 1 - j0, nk);  // lo < hi by the choice of [i_lo, i_hi)
      float* s = sbuf + rr * kBlockK;
      float block_max = -INFINITY;
      for (int64_t j = lo; j < hi; ++j) block_max = std::max(block_max, s[j]);
      const float m_new = std::max(m_state[row], block_max);
      const float alpha = exp_approx(m_state[row] - m_new);
      float row_sum = 0.0f;
#pragma omp simd reduction(+ : row_sum)
      for (int64_t j = 0; j < nk; ++j) {
        const float e = exp_approx((j >= lo && j < hi) ? s[j] - m_new : -INFINITY);
        s[j] = e;
        row_sum += e;
      }
      l_state[row] = l_state[row] * alpha + row_sum;
      m_state[row] = m_new;
      if (alpha != 1.0f) {
        float* o = obuf + row * d;
#pragma omp simd
        for (int64_t e = 0; e < d; ++e) o[e] *= alpha;
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nr), static_cast<int>(d),
                static_cast<int>(nk), 1.0f, sbuf, static_cast<int>(kBlockK), vblock, static_cast<int>(kv_stride), 1.0f,
                obuf + r0 * d, static_cast<int>(d));
  }
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t i = item.q_begin + row / g, h = item.kv_head * g + row % g;
    const float inv_l = 1.0f / l_state[row];
    const float* o = obuf + row * d;
    float* out = p.out + (i * p.hq + h) * d;
#pragma omp simd
    for (int64_t e = 0; e < d; ++e) out[e] = o[e] * inv_l;
    if (p.lse) p.lse[h * p.tokens + i] = m_state[row] + std::log(l_state[row]);
  }
}

}  // namespace

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
               int64_t window, Tensor& out, Tensor& lse) {
  SWIFT_PROFILE("attention");
  Problem p{q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(),
            lse.defined() ? lse.data<float>() : nullptr, q.size(0), q.size(1), k.size(1), q.size(2),
            q.size(1) / k.size(1), window, scale};
  if (p.tokens == 0) return;
  if (p.d == 0) {  // empty head dim: outputs are empty, every score is 0, lse = log(visible keys)
    if (p.lse) {
      const int32_t* cu = cu_seqlens.data<int32_t>();
      for (int64_t s = 0; s + 1 < cu_seqlens.size(0); ++s) {
        for (int64_t i = cu[s]; i < cu[s + 1]; ++i) {
          const float visible = static_cast<float>(i + 1 - first_key(p, cu[s], i));
          for (int64_t h = 0; h < p.hq; ++h) p.lse[h * p.tokens + i] = std::log(visible);
        }
      }
    }
    return;
  }
  blas_single_threaded();
  const int32_t* cu = cu_seqlens.data<int32_t>();
  const int64_t batch = cu_seqlens.size(0) - 1;
  std::vector<WorkItem> items;
  for (int64_t s = 0; s < batch; ++s) {
    for (int64_t q0 = cu[s]; q0 < cu[s + 1]; q0 += kBlockQ) {
      const int64_t q1 = std::min<int64_t>(q0 + kBlockQ, cu[s + 1]);
      const int64_t keys = q1 - first_key(p, cu[s], q0);
      for (int64_t kh = 0; kh < p.hkv; ++kh) items.push_back({cu[s], q0, q1, kh, keys * (q1 - q0)});
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const WorkItem& a, const WorkItem& b) { return a.cost > b.cost; });
  const double work = static_cast<double>(p.tokens) * p.hq * p.d * 64.0;
  const int64_t count = static_cast<int64_t>(items.size());
#pragma omp parallel for schedule(dynamic, 1) if (count > 1 && work > 1e5)
  for (int64_t it = 0; it < count; ++it) run_item(p, items[static_cast<size_t>(it)]);
}

}  // namespace swift::ops::cpu
