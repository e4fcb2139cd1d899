// ops/reference/reference.cpp — the plain CPU oracle of every op (namespace swift::ops::ref).
//
// Invariants:
//  - Naive loops, one thread, no blocking: obviously correct before fast. Every input element is converted to
//    fp32 (as stored), then arithmetic runs in double; results are rounded once when stored.
//  - The same argument checks as ops:: (ops/op_checks.h) run first; references accept CPU tensors only.
//  - Outputs are written with `=` unless the op says `accumulate` (linear) or beta != 0 (gemm).
//  - Where Hugging Face fixes an fp32 step that defines the result (the RoPE angle float(position) * inv_freq),
//    the reference performs that step in fp32 too, then continues in double.
#include <cmath>
#include <vector>

#include "ops/op_checks.h"
#include "ops/reference.h"
#include "ops/reference/ref_util.h"

namespace swift::ops::ref {

using util::load;
using util::store;

void cast(const Tensor& src, Tensor& dst) {
  detail::require_cpu("cast", detail::check_cast(src, dst));
  for (int64_t i = 0; i < src.numel(); ++i) store(dst, i, load(src, i));
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  detail::require_cpu("add", detail::check_add(a, b, out));
  for (int64_t i = 0; i < a.numel(); ++i) store(out, i, static_cast<double>(load(a, i)) + load(b, i));
}

void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  detail::require_cpu("swiglu", detail::check_swiglu(gate, up, out));
  for (int64_t i = 0; i < gate.numel(); ++i) {
    double g = load(gate, i);
    store(out, i, g / (1.0 + std::exp(-g)) * load(up, i));
  }
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  detail::require_cpu("embedding", detail::check_embedding(table, ids, out));
  const int64_t tokens = ids.size(0), c = table.size(1);
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < c; ++j) store(out, t * c + j, load(table, id[t] * c + j));
  }
}

void embedding_shard(const Tensor& table, const Tensor& ids, int64_t vocab_offset, Tensor& out) {
  detail::require_cpu("embedding_shard", detail::check_embedding(table, ids, out, vocab_offset));
  const int64_t tokens = ids.size(0), c = table.size(1), vocab = table.size(0);
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t row = id[t] - vocab_offset;
    for (int64_t j = 0; j < c; ++j) store(out, t * c + j, row >= 0 && row < vocab ? load(table, row * c + j) : 0.0);
  }
}

// y (N, M) = x (N, K) @ w (M, K)^T + bias (M)
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate) {
  detail::require_cpu("linear", detail::check_linear(x, w, bias, y));
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < m; ++o) {
      double acc = bias.defined() ? load(bias, o) : 0.0;
      for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(load(x, r * k + i)) * load(w, o * k + i);
      if (accumulate) acc += load(y, r * m + o);
      store(y, r * m + o, acc);
    }
  }
}

// c (N, M) = alpha * op(a) @ op(b) + beta * c; c is not read when beta == 0 (BLAS convention).
void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c) {
  detail::require_cpu("gemm", detail::check_gemm(trans_a, trans_b, a, b, c));
  const int64_t n = c.size(0), m = c.size(1), k = trans_a ? a.size(0) : a.size(1);
  const int64_t lda = a.size(1), ldb = b.size(1);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < m; ++o) {
      double acc = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        double av = load(a, trans_a ? i * lda + r : r * lda + i);
        double bv = load(b, trans_b ? o * ldb + i : i * ldb + o);
        acc += av * bv;
      }
      double prior = beta == 0.0f ? 0.0 : static_cast<double>(beta) * load(c, r * m + o);
      store(c, r * m + o, static_cast<double>(alpha) * acc + prior);
    }
  }
}

// y (N, C) = weight (C) * (x * rstd), rstd (N) = 1 / sqrt(mean(x^2) + eps)
void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd) {
  detail::require_cpu("rmsnorm", detail::check_rmsnorm(x, weight, eps, y, rstd));
  const int64_t n = x.size(0), c = x.size(1);
  for (int64_t r = 0; r < n; ++r) {
    double sum = 0.0;
    for (int64_t j = 0; j < c; ++j) {
      double v = load(x, r * c + j);
      sum += v * v;
    }
    double inv = 1.0 / std::sqrt(sum / static_cast<double>(c) + static_cast<double>(eps));
    for (int64_t j = 0; j < c; ++j) store(y, r * c + j, static_cast<double>(load(weight, j)) * (load(x, r * c + j) * inv));
    if (rstd.defined()) store(rstd, r, inv);
  }
}

// x (T, H, D) rotated in place; pairs (i, i + D/2).
void rope(Tensor& x, const Tensor& positions, const RopeFrequencies& freqs) {
  detail::require_cpu("rope", detail::check_rope(x, positions, freqs));
  const int64_t tokens = x.size(0), heads = x.size(1), d = x.size(2), half = d / 2;
  const int32_t* pos = positions.data<int32_t>();
  const double scaling = freqs.attention_scaling;
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      // Hugging Face forms the angle in fp32: position.float() * inv_freq.
      const float angle = static_cast<float>(pos[t]) * freqs.inv_freq[static_cast<size_t>(i)];
      const double cs = std::cos(static_cast<double>(angle)) * scaling;
      const double sn = std::sin(static_cast<double>(angle)) * scaling;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t base = (t * heads + h) * d;
        const double x1 = load(x, base + i), x2 = load(x, base + i + half);
        store(x, base + i, x1 * cs - x2 * sn);
        store(x, base + i + half, x2 * cs + x1 * sn);
      }
    }
  }
}

// out (T, Hq, D) = softmax(scale * q k^T, causal, windowed, per sequence) v; lse (Hq, T).
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
               int64_t window, Tensor& out, Tensor& lse) {
  detail::require_cpu("attention", detail::check_attention(q, k, v, cu_seqlens, scale, window, out, lse));
  const int64_t tokens = q.size(0), hq = q.size(1), hkv = k.size(1), d = q.size(2);
  const int64_t group = hq / hkv;
  const int32_t* cu = cu_seqlens.data<int32_t>();
  const int64_t batch = cu_seqlens.size(0) - 1;
  std::vector<double> score, acc(static_cast<size_t>(d));
  for (int64_t s = 0; s < batch; ++s) {
    const int64_t begin = cu[s], end = cu[s + 1];
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kh = h / group;
      for (int64_t i = begin; i < end; ++i) {
        // Keys j of the same sequence with j <= i and, with a window, i - j < window.
        const int64_t first = window > 0 ? std::max(begin, i - window + 1) : begin;
        score.assign(static_cast<size_t>(i - first + 1), 0.0);
        double max_score = -INFINITY;
        for (int64_t j = first; j <= i; ++j) {
          double dot = 0.0;
          for (int64_t e = 0; e < d; ++e) {
            dot += static_cast<double>(load(q, (i * hq + h) * d + e)) * load(k, (j * hkv + kh) * d + e);
          }
          dot *= scale;
          score[static_cast<size_t>(j - first)] = dot;
          max_score = std::max(max_score, dot);
        }
        double denom = 0.0;
        for (double& sc : score) {
          sc = std::exp(sc - max_score);
          denom += sc;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = first; j <= i; ++j) {
          const double p = score[static_cast<size_t>(j - first)] / denom;
          for (int64_t e = 0; e < d; ++e) acc[static_cast<size_t>(e)] += p * load(v, (j * hkv + kh) * d + e);
        }
        for (int64_t e = 0; e < d; ++e) store(out, (i * hq + h) * d + e, acc[static_cast<size_t>(e)]);
        if (lse.defined()) store(lse, h * tokens + i, max_score + std::log(denom));
      }
    }
  }
}

}  // namespace swift::ops::ref
