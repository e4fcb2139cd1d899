// tests/ops/grad_check.h — finite-difference gradients for the backward-op tests: conversions between tensors
// and double vectors, a central-difference driver, and double-precision forwards of the ops (the functions
// being differentiated).
//
// Invariants:
//  - The forwards here are written from the ops' definitions (ops.h), in double, independent of the library's
//    kernels and references; they only share ops/philox.h (the dropout mask is part of the definition).
//  - numeric_gradient differentiates a double function with central differences at the exact fp32 input point:
//    with step h = 1e-4 * max(1, |x|), truncation error ~h^2 |f'''| ~1e-9 and rounding error ~1e-16 |f| / h
//    ~1e-12 for the O(1..10) functions of these tests, i.e. the FD gradient is exact to ~1e-8 relative. The
//    tolerances against fp32 backward ops are then set by fp32 rounding, not by the FD.
//  - Scalar losses are L = sum_i dy_i f(x)_i with a fixed random dy, so dL/dx is exactly the backward of dy.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <functional>
#include <numeric>
#include <vector>

#include "core/tensor.h"
#include "op_test_util.h"
#include "ops/ops.h"
#include "ops/philox.h"

namespace swift::test {

using Vec = std::vector<double>;

inline Vec to_vec(const Tensor& t) {
  Vec v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[static_cast<size_t>(i)] = t.item(i);
  return v;
}

// An F32 tensor of `shape` holding v rounded to fp32.
inline Tensor to_tensor(const Shape& shape, const Vec& v) {
  std::vector<float> f(v.begin(), v.end());
  return Tensor::from_f32(shape, f);
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central differences of f at x, every element.
inline Vec numeric_gradient(const std::function<double(const Vec&)>& f, Vec x) {
  Vec g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i], h = 1e-4 * std::max(1.0, std::fabs(x0));
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2.0 * h);
  }
  return g;
}

// |actual - fd| <= atol + rtol |fd| element-wise, with atol relative to the largest |fd| (scale-free).

// Records the worst ratio |actual - expected| / (atol + rtol |expected|) over a test's comparisons and prints
// it once ("[ margin ] name: worst error / tolerance = r"): how much of each tolerance is actually used, so
// tolerances that are far too loose (r << 0.01) or nearly exhausted (r -> 1) show up in every test log.
class Margin {
 public:
  // Named after the running test.
  Margin() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    name_ = info ? std::string(info->test_suite_name()) + "." + info->name() : "?";
  }
  ~Margin() { std::printf("[ margin   ] %s: worst error / tolerance = %.3g\n", name_.c_str(), worst_); }
  void add(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
    for (int64_t i = 0; i < actual.numel() && i < expected.numel(); ++i) {
      const double a = actual.item(i), e = expected.item(i);
      if (std::isfinite(a) && std::isfinite(e)) worst_ = std::max(worst_, std::fabs(a - e) / (atol + rtol * std::fabs(e)));
    }
  }
  void add(double actual, double expected, double tol) { worst_ = std::max(worst_, std::fabs(actual - expected) / tol); }

 private:
  std::string name_;
  double worst_ = 0.0;
};

// all_close, also recorded in `margin`.
inline ::testing::AssertionResult close_in(Margin& margin, const Tensor& actual, const Tensor& expected, double atol,
                                           double rtol) {
  margin.add(actual, expected, atol, rtol);
  return all_close(actual, expected, atol, rtol);
}

// |actual - fd| <= atol + rtol |fd| element-wise, with atol relative to the largest |fd| (scale-free).
inline ::testing::AssertionResult matches_fd(Margin& margin, const Tensor& actual, const Vec& fd, double rel_to_max,
                                             double rtol) {
  double max_fd = 0.0;
  for (double v : fd) max_fd = std::max(max_fd, std::fabs(v));
  const double atol = rel_to_max * std::max(max_fd, 1e-3);
  Tensor expected = to_tensor(actual.shape(), fd);
  return close_in(margin, actual, expected, atol, rtol);
}

// ---- double forwards -------------------------------------------------------------------------------------------
// y (n, m) = x (n, k) w (m, k)^T + b (m or empty)
inline Vec linear_d(const Vec& x, const Vec& w, const Vec& b, int64_t n, int64_t k, int64_t m) {
  Vec y(static_cast<size_t>(n * m));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < m; ++o) {
      double acc = b.empty() ? 0.0 : b[static_cast<size_t>(o)];
      for (int64_t i = 0; i < k; ++i) acc += x[static_cast<size_t>(r * k + i)] * w[static_cast<size_t>(o * k + i)];
      y[static_cast<size_t>(r * m + o)] = acc;
    }
  }
  return y;
}

// y (n, c) = w * x / sqrt(mean(x^2) + eps)
inline Vec rmsnorm_d(const Vec& x, const Vec& w, double eps, int64_t n, int64_t c) {
  Vec y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0.0;
    for (int64_t j = 0; j < c; ++j) ss += x[static_cast<size_t>(r * c + j)] * x[static_cast<size_t>(r * c + j)];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(c) + eps);
    for (int64_t j = 0; j < c; ++j) y[static_cast<size_t>(r * c + j)] = w[static_cast<size_t>(j)] * x[static_cast<size_t>(r * c + j)] * inv;
  }
  return y;
}

// rope of x (t, h, d) at positions (angle float(pos) * inv_freq in fp32, as the op).
inline Vec rope_d(const Vec& x, const std::vector<int32_t>& pos, const ops::RopeFrequencies& f, int64_t t, int64_t h,
                  int64_t d) {
  Vec y(x.size());
  const int64_t half = d / 2;
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t p = 0; p < half; ++p) {
      const float angle = static_cast<float>(pos[static_cast<size_t>(i)]) * f.inv_freq[static_cast<size_t>(p)];
      const double c = std::cos(static_cast<double>(angle)) * f.attention_scaling;
      const double s = std::sin(static_cast<double>(angle)) * f.attention_scaling;
      for (int64_t hh = 0; hh < h; ++hh) {
        const size_t b = static_cast<size_t>((i * h + hh) * d + p);
        y[b] = x[b] * c - x[b + static_cast<size_t>(half)] * s;
        y[b + static_cast<size_t>(half)] = x[b + static_cast<size_t>(half)] * c + x[b] * s;
      }
    }
  }
  return y;
}

inline Vec swiglu_d(const Vec& gate, const Vec& up) {
  Vec y(gate.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return y;
}

// Causal windowed GQA attention over cu_seqlens; q (t, hq, d), k/v (t, hkv, d).
inline Vec attention_d(const Vec& q, const Vec& k, const Vec& v, const std::vector<int32_t>& cu, double scale,
                       int64_t window, int64_t t, int64_t hq, int64_t hkv, int64_t d) {
  Vec out(static_cast<size_t>(t * hq * d), 0.0);
  const int64_t group = hq / hkv;
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    for (int64_t h = 0; h < hq; ++h) {
      for (int64_t i = cu[s]; i < cu[s + 1]; ++i) {
        const int64_t first = window > 0 ? std::max<int64_t>(cu[s], i - window + 1) : cu[s];
        Vec sc;
        for (int64_t j = first; j <= i; ++j) {
          double acc = 0.0;
          for (int64_t e = 0; e < d; ++e) {
            acc += q[static_cast<size_t>((i * hq + h) * d + e)] * k[static_cast<size_t>((j * hkv + h / group) * d + e)];
          }
          sc.push_back(acc * scale);
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double den = 0.0;
        for (double& x : sc) den += (x = std::exp(x - mx));
        for (int64_t j = first; j <= i; ++j) {
          const double p = sc[static_cast<size_t>(j - first)] / den;
          for (int64_t e = 0; e < d; ++e) {
            out[static_cast<size_t>((i * hq + h) * d + e)] += p * v[static_cast<size_t>((j * hkv + h / group) * d + e)];
          }
        }
      }
    }
  }
  return out;
}

// Dropout multiplier of flat element i (the op's definition).
inline double dropout_mult_d(const ops::Dropout& d, int64_t i) {
  if (d.p == 0.0f) return 1.0;
  return ops::dropout_keep(d.seed, static_cast<uint64_t>(i), ops::dropout_threshold(d.p)) ? 1.0f / (1.0f - d.p) : 0.0;
}

// y = x w^T + scale (dropout(x) a^T) b^T; x (n, k), w (m, k), a (r, k), b (m, r).
inline Vec lora_d(const Vec& x, const Vec& w, const Vec& a, const Vec& b, double scale, const ops::Dropout& drop,
                  int64_t n, int64_t k, int64_t m, int64_t r) {
  Vec xd(x.size());
  for (size_t i = 0; i < x.size(); ++i) xd[i] = x[i] * dropout_mult_d(drop, static_cast<int64_t>(i));
  Vec y = linear_d(x, w, {}, n, k, m);
  const Vec xa = linear_d(xd, a, {}, n, k, r);
  const Vec l = linear_d(xa, b, {}, n, r, m);
  for (size_t i = 0; i < y.size(); ++i) y[i] += scale * l[i];
  return y;
}

// Per-token log p(label) of hidden (t, c) head (v, c)^T; ignored labels give 0.
inline Vec logprobs_d(const Vec& hidden, const Vec& head, const std::vector<int32_t>& labels, int64_t t, int64_t c,
                      int64_t vocab, int32_t ignore) {
  Vec out(static_cast<size_t>(t), 0.0);
  const Vec z = linear_d(hidden, head, {}, t, c, vocab);
  for (int64_t i = 0; i < t; ++i) {
    if (labels[static_cast<size_t>(i)] == ignore) continue;
    const double* row = z.data() + i * vocab;
    const double mx = *std::max_element(row, row + vocab);
    double s = 0.0;
    for (int64_t j = 0; j < vocab; ++j) s += std::exp(row[j] - mx);
    out[static_cast<size_t>(i)] = row[labels[static_cast<size_t>(i)]] - mx - std::log(s);
  }
  return out;
}

}  // namespace swift::test
