// ops/reference/dora.cpp — plain CPU oracle of the DoRA linear (namespace swift::ops::ref): weight norm, forward
// and backward, written from the formulas of ops.h.
//
// Invariants:
//  - Naive loops, one thread, double arithmetic, one rounding per stored value (as reference/training.cpp).
//  - The dropout mask comes from ops/philox.h element by element (dropout_keep), independent of the fast kernel.
//  - The weight norm is a constant of the backward (PEFT detaches it): no gradient flows through it to a or b.
#include <cmath>
#include <vector>

#include "ops/op_checks.h"
#include "ops/philox.h"
#include "ops/reference.h"
#include "ops/reference/ref_util.h"

namespace swift::ops::ref {

using util::load;
using util::store;

namespace {

double multiplier(const Dropout& d, int64_t i, int64_t cols) {
  if (d.p == 0.0f) return 1.0;
  const float keep_scale = 1.0f / (1.0f - d.p);
  return dropout_keep(d.seed, dropout_index(d.map, i / cols, i % cols, cols), dropout_threshold(d.p)) ? keep_scale : 0.0;
}

}  // namespace

void dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, float scale, Tensor& norm, bool squares) {
  detail::require_cpu("dora_weight_norm", detail::check_dora_weight_norm(w, a, b, scale, norm));
  const int64_t m = w.size(0), k = w.size(1), r = a.size(0);
  for (int64_t j = 0; j < m; ++j) {
    double ss = 0.0;
    for (int64_t i = 0; i < k; ++i) {
      double ba = 0.0;
      for (int64_t q = 0; q < r; ++q) ba += static_cast<double>(load(b, j * r + q)) * load(a, q * k + i);
      const double v = static_cast<double>(load(w, j * k + i)) + static_cast<double>(scale) * ba;
      ss += v * v;
    }
    store(norm, j, squares ? ss : std::sqrt(ss));
  }
}

void dora_norm_from_squares(Tensor& norm) {
  detail::require_cpu("dora_norm_from_squares", detail::check_dora_norm_from_squares(norm));
  for (int64_t j = 0; j < norm.numel(); ++j) store(norm, j, std::sqrt(static_cast<double>(load(norm, j))));
}

// xd = dropout(x); xa = xd a^T; h = xd w^T + scale xa b^T; y = x w^T + bias + g h - xd w^T.
void dora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                 const Tensor& magnitude, const Tensor& weight_norm, float scale, const Dropout& d, Tensor& y,
                 Tensor& xa, Tensor& h, bool accumulate) {
  detail::require_cpu("dora_linear",
                      detail::check_dora_linear(x, w, bias, a, b, magnitude, weight_norm, scale, d, y, xa, h));
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0), r = a.size(0);
  std::vector<double> xd(static_cast<size_t>(k)), xar(static_cast<size_t>(r));
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t i = 0; i < k; ++i) {
      xd[static_cast<size_t>(i)] = static_cast<double>(load(x, row * k + i)) * multiplier(d, row * k + i, k);
    }
    for (int64_t q = 0; q < r; ++q) {
      double acc = 0.0;
      for (int64_t i = 0; i < k; ++i) acc += xd[static_cast<size_t>(i)] * load(a, q * k + i);
      xar[static_cast<size_t>(q)] = acc;
      store(xa, row * r + q, acc);
    }
    for (int64_t o = 0; o < m; ++o) {
      double base = 0.0, base_d = 0.0, lora = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        base += static_cast<double>(load(x, row * k + i)) * load(w, o * k + i);
        base_d += xd[static_cast<size_t>(i)] * load(w, o * k + i);
      }
      for (int64_t q = 0; q < r; ++q) lora += xar[static_cast<size_t>(q)] * load(b, o * r + q);
      const double hv = base_d + static_cast<double>(scale) * lora;
      const double g = static_cast<double>(load(magnitude, o)) / load(weight_norm, o);
      double v = base + (bias.defined() ? load(bias, o) : 0.0) + g * hv - base_d;
      if (accumulate) v += load(y, row * m + o);
      store(h, row * m + o, hv);
      store(y, row * m + o, v);
    }
  }
}

void dora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& magnitude, const Tensor& weight_norm, const Tensor& xa, const Tensor& h,
                          float scale, const Dropout& d, Tensor& dx, Tensor& da, Tensor& db, Tensor& dmagnitude,
                          bool accumulate_dx) {
  detail::require_cpu("dora_linear_backward",
                      detail::check_dora_linear_backward(dy, x, w, a, b, magnitude, weight_norm, xa, h, scale, d, dx,
                                                         da, db, dmagnitude, accumulate_dx));
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0), r = a.size(0);
  const double s = scale;
  std::vector<double> g(static_cast<size_t>(m)), dh(static_cast<size_t>(n * m)), gb(static_cast<size_t>(n * r), 0.0);
  for (int64_t o = 0; o < m; ++o) g[static_cast<size_t>(o)] = static_cast<double>(load(magnitude, o)) / load(weight_norm, o);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t o = 0; o < m; ++o) dh[static_cast<size_t>(row * m + o)] = load(dy, row * m + o) * g[static_cast<size_t>(o)];
    for (int64_t q = 0; q < r; ++q) {
      double acc = 0.0;
      for (int64_t o = 0; o < m; ++o) acc += dh[static_cast<size_t>(row * m + o)] * load(b, o * r + q);
      gb[static_cast<size_t>(row * r + q)] = acc;
    }
  }
  if (dmagnitude.defined()) {
    for (int64_t o = 0; o < m; ++o) {
      double acc = 0.0;
      for (int64_t row = 0; row < n; ++row) acc += static_cast<double>(load(dy, row * m + o)) * load(h, row * m + o);
      store(dmagnitude, o, load(dmagnitude, o) + acc / load(weight_norm, o));
    }
  }
  if (dx.defined()) {
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t i = 0; i < k; ++i) {
        double base = 0.0, dir = 0.0, lora = 0.0;
        for (int64_t o = 0; o < m; ++o) {
          const double dyv = load(dy, row * m + o);
          base += dyv * load(w, o * k + i);
          dir += (dh[static_cast<size_t>(row * m + o)] - dyv) * load(w, o * k + i);
        }
        for (int64_t q = 0; q < r; ++q) lora += gb[static_cast<size_t>(row * r + q)] * load(a, q * k + i);
        double v = base + multiplier(d, row * k + i, k) * (dir + s * lora);
        if (accumulate_dx) v += load(dx, row * k + i);
        store(dx, row * k + i, v);
      }
    }
  }
  if (da.defined()) {
    for (int64_t q = 0; q < r; ++q) {
      for (int64_t i = 0; i < k; ++i) {
        double acc = 0.0;
        for (int64_t row = 0; row < n; ++row) {
          acc += gb[static_cast<size_t>(row * r + q)] * load(x, row * k + i) * multiplier(d, row * k + i, k);
        }
        store(da, q * k + i, load(da, q * k + i) + s * acc);
      }
    }
  }
  if (db.defined()) {
    for (int64_t o = 0; o < m; ++o) {
      for (int64_t q = 0; q < r; ++q) {
        double acc = 0.0;
        for (int64_t row = 0; row < n; ++row) acc += dh[static_cast<size_t>(row * m + o)] * load(xa, row * r + q);
        store(db, o * r + q, load(db, o * r + q) + s * acc);
      }
    }
  }
}

}  // namespace swift::ops::ref
