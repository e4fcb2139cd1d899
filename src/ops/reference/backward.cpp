// ops/reference/backward.cpp — plain CPU oracle of the backward ops (namespace swift::ops::ref): embedding,
// linear, rmsnorm, rope, swiglu and attention backward.
//
// Invariants:
//  - Naive loops, one thread. Inputs are read as stored (fp32), every gradient is accumulated in double and
//    rounded once when stored; `+=` outputs add their old value in double before that single rounding.
//  - They are the exact derivatives of the reference forwards: attention_backward recomputes the softmax in
//    double from q and k (the forward's out and lse are only argument-checked), rmsnorm_backward uses the
//    saved rstd (the op's contract) but nothing else from the forward.
//  - Same argument checks as ops:: first; CPU tensors only.
#include <cmath>
#include <vector>

#include "ops/op_checks.h"
#include "ops/reference.h"
#include "ops/reference/ref_util.h"

namespace swift::ops::ref {

using util::load;
using util::store;

// dtable (V, C) += scatter of dout (T, C) by ids, skipping padding_id.
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable, int64_t padding_id) {
  detail::require_cpu("embedding_backward", detail::check_embedding_backward(dout, ids, dtable, padding_id));
  const int64_t tokens = ids.size(0), c = dout.size(1), vocab = dtable.size(0);
  const int32_t* id = ids.data<int32_t>();
  std::vector<double> grad(static_cast<size_t>(vocab * c), 0.0);
  std::vector<bool> touched(static_cast<size_t>(vocab), false);
  for (int64_t t = 0; t < tokens; ++t) {
    if (id[t] == padding_id) continue;
    touched[static_cast<size_t>(id[t])] = true;
    for (int64_t j = 0; j < c; ++j) grad[static_cast<size_t>(id[t] * c + j)] += load(dout, t * c + j);
  }
  for (int64_t v = 0; v < vocab; ++v) {
    if (!touched[static_cast<size_t>(v)]) continue;
    for (int64_t j = 0; j < c; ++j) {
      store(dtable, v * c + j, static_cast<double>(load(dtable, v * c + j)) + grad[static_cast<size_t>(v * c + j)]);
    }
  }
}

// dtable (V, C) += scatter of dout (T, C) by ids - vocab_offset, skipping padding_id and ids outside the shard.
void embedding_shard_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_offset, Tensor& dtable,
                              int64_t padding_id) {
  detail::require_cpu("embedding_shard_backward",
                      detail::check_embedding_backward(dout, ids, dtable, padding_id, vocab_offset));
  const int64_t tokens = ids.size(0), c = dout.size(1), vocab = dtable.size(0);
  const int32_t* id = ids.data<int32_t>();
  std::vector<double> grad(static_cast<size_t>(vocab * c), 0.0);
  std::vector<bool> touched(static_cast<size_t>(vocab), false);
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = id[t] - vocab_offset;
    if (id[t] == padding_id || row < 0 || row >= vocab) continue;
    touched[static_cast<size_t>(row)] = true;
    for (int64_t j = 0; j < c; ++j) grad[static_cast<size_t>(row * c + j)] += load(dout, t * c + j);
  }
  for (int64_t v = 0; v < vocab; ++v) {
    if (!touched[static_cast<size_t>(v)]) continue;
    for (int64_t j = 0; j < c; ++j) {
      store(dtable, v * c + j, static_cast<double>(load(dtable, v * c + j)) + grad[static_cast<size_t>(v * c + j)]);
    }
  }
}

// dx (N, K) (+)= dy (N, M) w (M, K); dw (M, K) (+)= dy^T x (N, K); dbias (M) += sum_n dy.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                     bool accumulate_dx, bool accumulate_dw) {
  detail::require_cpu("linear_backward", detail::check_linear_backward(dy, x, w, dx, dw, dbias, accumulate_dx));
  const int64_t n = dy.size(0), m = dy.size(1), k = w.size(1);
  if (dx.defined()) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < k; ++i) {
        double acc = accumulate_dx ? load(dx, r * k + i) : 0.0;
        for (int64_t o = 0; o < m; ++o) acc += static_cast<double>(load(dy, r * m + o)) * load(w, o * k + i);
        store(dx, r * k + i, acc);
      }
    }
  }
  if (dw.defined()) {
    for (int64_t o = 0; o < m; ++o) {
      for (int64_t i = 0; i < k; ++i) {
        double acc = accumulate_dw ? load(dw, o * k + i) : 0.0;
        for (int64_t r = 0; r < n; ++r) acc += static_cast<double>(load(dy, r * m + o)) * load(x, r * k + i);
        store(dw, o * k + i, acc);
      }
    }
  }
  if (dbias.defined()) {
    for (int64_t o = 0; o < m; ++o) {
      double acc = load(dbias, o);
      for (int64_t r = 0; r < n; ++r) acc += load(dy, r * m + o);
      store(dbias, o, acc);
    }
  }
}

// y = w * x * rstd: dx = rstd g - x rstd^3 mean(g x) with g = dy w; dweight += sum_rows dy x rstd.
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                      Tensor& dweight, bool accumulate_dx) {
  detail::require_cpu("rmsnorm_backward",
                      detail::check_rmsnorm_backward(dy, x, weight, rstd, dx, dweight, accumulate_dx));
  const int64_t n = x.size(0), c = x.size(1);
  if (dweight.defined()) {
    for (int64_t j = 0; j < c; ++j) {
      double acc = load(dweight, j);
      for (int64_t r = 0; r < n; ++r) {
        acc += static_cast<double>(load(dy, r * c + j)) * load(x, r * c + j) * load(rstd, r);
      }
      store(dweight, j, acc);
    }
  }
  if (!dx.defined()) return;
  std::vector<double> row(static_cast<size_t>(c));
  for (int64_t r = 0; r < n; ++r) {
    const double inv = load(rstd, r);
    double sum = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      row[static_cast<size_t>(j)] = static_cast<double>(load(dy, r * c + j)) * load(weight, j);
      sum += row[static_cast<size_t>(j)] * load(x, r * c + j);
    }
    const double coef = -inv * inv * inv * sum / static_cast<double>(c);
    for (int64_t j = 0; j < c; ++j) {
      double v = row[static_cast<size_t>(j)] * inv + static_cast<double>(load(x, r * c + j)) * coef;
      if (accumulate_dx) v += load(dx, r * c + j);
      store(dx, r * c + j, v);  // dx may be dy: element j of dy was read above, before this store
    }
  }
}

// The transposed rotation: x1' = x1 c + x2 s, x2' = x2 c - x1 s (angle in fp32 as the forward).
void rope_backward(Tensor& dx, const Tensor& positions, const RopeFrequencies& freqs) {
  detail::require_cpu("rope_backward", detail::check_rope_backward(dx, positions, freqs));
  const int64_t tokens = dx.size(0), heads = dx.size(1), d = dx.size(2), half = d / 2;
  const int32_t* pos = positions.data<int32_t>();
  const double scaling = freqs.attention_scaling;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(pos[t]) * freqs.inv_freq[static_cast<size_t>(i)];
      const double cs = std::cos(static_cast<double>(angle)) * scaling;
      const double sn = std::sin(static_cast<double>(angle)) * scaling;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t base = (t * heads + h) * d;
        const double x1 = load(dx, base + i), x2 = load(dx, base + i + half);
        store(dx, base + i, x1 * cs + x2 * sn);
        store(dx, base + i + half, x2 * cs - x1 * sn);
      }
    }
  }
}

// out = silu(g) u: dup = dout silu(g), dgate = dout u sig(g) (1 + g (1 - sig(g))).
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) {
  detail::require_cpu("swiglu_backward", detail::check_swiglu_backward(dout, gate, up, dgate, dup));
  for (int64_t i = 0; i < gate.numel(); ++i) {
    const double g = load(gate, i), u = load(up, i), d = load(dout, i);
    const double sig = 1.0 / (1.0 + std::exp(-g));
    store(dup, i, d * g * sig);
    store(dgate, i, d * u * sig * (1.0 + g * (1.0 - sig)));
  }
}

// Exact softmax gradient per (sequence, head, query) in double; dk, dv summed over the heads of each kv group.
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, float scale, int64_t window, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  detail::require_cpu("attention_backward", detail::check_attention_backward(dout, q, k, v, out, lse, cu_seqlens,
                                                                              scale, window, dq, dk, dv));
  const int64_t tokens = q.size(0), hq = q.size(1), hkv = k.size(1), d = q.size(2), group = hq / hkv;
  const int32_t* cu = cu_seqlens.data<int32_t>();
  std::vector<double> gq(static_cast<size_t>(tokens * hq * d), 0.0), gk(static_cast<size_t>(tokens * hkv * d), 0.0);
  std::vector<double> gv(gk.size(), 0.0), p, dp;
  for (int64_t s = 0; s + 1 < cu_seqlens.size(0); ++s) {
    const int64_t begin = cu[s], end = cu[s + 1];
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = begin; i < end; ++i) {
        const int64_t first = window > 0 ? std::max(begin, i - window + 1) : begin;
        const size_t nk = static_cast<size_t>(i - first + 1);
        p.assign(nk, 0.0);
        dp.assign(nk, 0.0);
        double max_score = -INFINITY;
        for (int64_t j = first; j <= i; ++j) {
          double dot = 0.0, ddot = 0.0;
          for (int64_t e = 0; e < d; ++e) {
            dot += static_cast<double>(load(q, (i * hq + h) * d + e)) * load(k, (j * hkv + kh) * d + e);
            ddot += static_cast<double>(load(dout, (i * hq + h) * d + e)) * load(v, (j * hkv + kh) * d + e);
          }
          p[static_cast<size_t>(j - first)] = dot * scale;
          dp[static_cast<size_t>(j - first)] = ddot;
          max_score = std::max(max_score, dot * scale);
        }
        double denom = 0.0;
        for (double& x : p) denom += (x = std::exp(x - max_score));
        double delta = 0.0;  // sum_j P_ij dP_ij = dout_i . out_i
        for (size_t j = 0; j < nk; ++j) delta += (p[j] /= denom) * dp[j];
        for (int64_t j = first; j <= i; ++j) {
          const size_t jj = static_cast<size_t>(j - first);
          const double ds = p[jj] * (dp[jj] - delta) * scale;
          for (int64_t e = 0; e < d; ++e) {
            const size_t qi = static_cast<size_t>((i * hq + h) * d + e), kj = static_cast<size_t>((j * hkv + kh) * d + e);
            gq[qi] += ds * load(k, static_cast<int64_t>(kj));
            gk[kj] += ds * load(q, static_cast<int64_t>(qi));
            gv[kj] += p[jj] * load(dout, static_cast<int64_t>(qi));
          }
        }
      }
    }
  }
  for (size_t i = 0; i < gq.size(); ++i) store(dq, static_cast<int64_t>(i), gq[i]);
  for (size_t i = 0; i < gk.size(); ++i) {
    store(dk, static_cast<int64_t>(i), gk[i]);
    store(dv, static_cast<int64_t>(i), gv[i]);
  }
}

}  // namespace swift::ops::ref
