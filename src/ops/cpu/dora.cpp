// ops/cpu/dora.cpp — fast CPU DoRA linear (PEFT's DoraLinearLayer): weight norm, forward and backward, built from
// the library's own fast kernels (linear, linear_backward, gemm, dropout) plus element-wise loops.
//
// Invariants:
//  - The weight norm of a row is formed as PEFT does: (b a)[j, :] in fp32, then w[j, :] + scale * that in fp32,
//    squared and summed in double, square root rounded to fp32. It is a constant of the backward.
//  - g = magnitude / weight_norm is one fp32 division per output (PEFT's mag_norm_scale).
//  - With dropout p > 0 the dropped input xd = dropout(x) is materialised once per call (workspace, (N, K) F32,
//    the same multipliers as ops::dropout: a recompute regenerates it exactly); p = 0 uses x itself.
//  - Every output element has one writer and a fixed summation order for a given thread count: element-wise
//    loops are split by rows, the magnitude gradient by columns (each column summed over rows in order, in
//    double).
#include "ops/cpu/dora.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace swift::ops::cpu {

namespace {

Tensor workspace(const Shape& shape) { return Tensor::empty(shape, DType::F32, Device::cpu(), MemoryCategory::Workspace); }

// g[j] = magnitude[j] / weight_norm[j].
std::vector<float> dora_scale(const Tensor& magnitude, const Tensor& weight_norm) {
  const int64_t m = magnitude.numel();
  std::vector<float> g(static_cast<size_t>(m));
  const float* pm = magnitude.data<float>();
  const float* pn = weight_norm.data<float>();
  for (int64_t j = 0; j < m; ++j) g[static_cast<size_t>(j)] = pm[j] / pn[j];
  return g;
}

int threads_for_elements(int64_t n) { return n >= (1 << 16) ? omp_get_max_threads() : 1; }

}  // namespace

void dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, float scale, Tensor& norm, bool squares) {
  const int64_t m = w.size(0), k = w.size(1), r = a.size(0);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* out = norm.data<float>();
  const size_t elem = dtype_bytes(w.dtype(), 1);
  const auto* pw = static_cast<const uint8_t*>(w.raw());
#pragma omp parallel num_threads(threads_for(static_cast<double>(m) * k * (r + 2)))
  {
    float* row = thread_scratch(ScratchSlot::Row, static_cast<size_t>(2 * std::max<int64_t>(k, 1)));
    float* ba = row + k;
#pragma omp for schedule(static)
    for (int64_t j = 0; j < m; ++j) {
      to_f32(pw + static_cast<size_t>(j * k) * elem, w.dtype(), row, k);
      std::fill(ba, ba + k, 0.0f);
      for (int64_t q = 0; q < r; ++q) {
        const float bq = pb[j * r + q];
        const float* aq = pa + q * k;
#pragma omp simd
        for (int64_t i = 0; i < k; ++i) ba[i] += bq * aq[i];
      }
      double ss = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        const float v = row[i] + scale * ba[i];
        ss += static_cast<double>(v) * v;
      }
      out[j] = static_cast<float>(squares ? ss : std::sqrt(ss));
    }
  }
}

void dora_norm_from_squares(Tensor& norm) {
  float* v = norm.data<float>();
  for (int64_t j = 0; j < norm.numel(); ++j) v[j] = std::sqrt(v[j]);  // IEEE: correctly rounded, as the reference
}

void dora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                 const Tensor& magnitude, const Tensor& weight_norm, float scale, const Dropout& dropout, Tensor& y,
                 Tensor& xa, Tensor& h, bool accumulate) {
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0), r = a.size(0);
  if (n == 0) return;
  const std::vector<float> g = dora_scale(magnitude, weight_norm);
  const bool dropped = dropout.p != 0.0f;
  Tensor xd = x;
  if (dropped) {
    xd = workspace({n, k});
    cpu::dropout(x, dropout, xd);
  }
  Tensor none;
  cpu::linear(xd, w, none, h, false);  // h = xd w^T
  if (r > 0) {
    cpu::gemm(false, true, 1.0f, xd, a, 0.0f, xa);     // xa = xd a^T
    cpu::gemm(false, true, scale, xa, b, 1.0f, h);     // h += scale xa b^T
  }
  float* py = y.data<float>();
  const float* ph = h.data<float>();
  const float* gp = g.data();
  if (!dropped) {  // y (=|+=) g h + bias
    const float* pbias = nullptr;
    Tensor bias32;
    if (bias.defined()) {
      bias32 = bias.dtype() == DType::F32 ? bias : bias.to_dtype(DType::F32, MemoryCategory::Workspace);
      pbias = bias32.data<float>();
    }
#pragma omp parallel for schedule(static) num_threads(threads_for_elements(n * m))
    for (int64_t row = 0; row < n; ++row) {
      float* yr = py + row * m;
      const float* hr = ph + row * m;
      for (int64_t j = 0; j < m; ++j) {
        const float v = gp[j] * hr[j] + (pbias ? pbias[j] : 0.0f);
        yr[j] = accumulate ? yr[j] + v : v;
      }
    }
    return;
  }
  // y (=|+=) x w^T + bias - xd w^T + g h, with xd w^T recomputed into a workspace (h already holds the sum).
  Tensor base_d = workspace({n, m});
  cpu::linear(xd, w, none, base_d, false);
  cpu::linear(x, w, bias, y, accumulate);
  const float* pd = base_d.data<float>();
#pragma omp parallel for schedule(static) num_threads(threads_for_elements(n * m))
  for (int64_t row = 0; row < n; ++row) {
    float* yr = py + row * m;
    const float* hr = ph + row * m;
    const float* dr = pd + row * m;
    for (int64_t j = 0; j < m; ++j) yr[j] = (yr[j] - dr[j]) + gp[j] * hr[j];
  }
}

void dora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& magnitude, const Tensor& weight_norm, const Tensor& xa, const Tensor& h,
                          float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db, Tensor& dmagnitude,
                          bool accumulate_dx) {
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0), r = a.size(0);
  if (n == 0) return;
  const std::vector<float> g = dora_scale(magnitude, weight_norm);
  const float* pdy = dy.data<float>();
  if (dmagnitude.defined()) {  // dmagnitude[j] += sum_n dy h / weight_norm[j], columns split across threads
    const float* ph = h.data<float>();
    const float* pn = weight_norm.data<float>();
    float* pdm = dmagnitude.data<float>();
#pragma omp parallel num_threads(threads_for(static_cast<double>(n) * m))
    {
      int64_t j0, j1;
      split_range(m, omp_get_num_threads(), omp_get_thread_num(), 16, j0, j1);
      if (j1 > j0) {
        std::vector<double> acc(static_cast<size_t>(j1 - j0), 0.0);
        for (int64_t row = 0; row < n; ++row) {
          const float* dr = pdy + row * m;
          const float* hr = ph + row * m;
          for (int64_t j = j0; j < j1; ++j) acc[static_cast<size_t>(j - j0)] += static_cast<double>(dr[j]) * hr[j];
        }
        for (int64_t j = j0; j < j1; ++j) {
          pdm[j] = static_cast<float>(pdm[j] + acc[static_cast<size_t>(j - j0)] / pn[j]);
        }
      }
    }
  }
  if (!dx.defined() && !da.defined() && !db.defined()) return;
  // dh = g * dy
  Tensor dh = workspace({n, m});
  float* pdh = dh.data<float>();
  const float* gp = g.data();
#pragma omp parallel for schedule(static) num_threads(threads_for_elements(n * m))
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t j = 0; j < m; ++j) pdh[row * m + j] = gp[j] * pdy[row * m + j];
  }
  if (db.defined() && r > 0) cpu::gemm(true, false, scale, dh, xa, 1.0f, db);  // db += scale dh^T xa
  if (!dx.defined() && !da.defined()) return;
  Tensor gb = workspace({n, r});  // dh b: the gradient of xa before the scale
  if (r > 0) cpu::gemm(false, false, 1.0f, dh, b, 0.0f, gb);
  Tensor none;
  if (dropout.p == 0.0f) {
    if (dx.defined()) {
      cpu::linear_backward(dh, none, w, dx, none, none, accumulate_dx);  // dx (=|+=) dh w
      if (r > 0) cpu::gemm(false, false, scale, gb, a, 1.0f, dx);      // dx += scale gb a
    }
    if (da.defined() && r > 0) cpu::gemm(true, false, scale, gb, x, 1.0f, da);  // da += scale gb^T x
    return;
  }
  if (da.defined() && r > 0) {
    Tensor xd = workspace({n, k});
    cpu::dropout(x, dropout, xd);
    cpu::gemm(true, false, scale, gb, xd, 1.0f, da);  // da += scale gb^T xd
  }
  if (!dx.defined()) return;
  // u = mult * ((dh - dy) w + scale gb a); dx (=|+=) dy w + u.
#pragma omp parallel for schedule(static) num_threads(threads_for_elements(n * m))
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t j = 0; j < m; ++j) pdh[row * m + j] -= pdy[row * m + j];
  }
  Tensor u = workspace({n, k});
  cpu::linear_backward(dh, none, w, u, none, none, false);
  if (r > 0) cpu::gemm(false, false, scale, gb, a, 1.0f, u);
  cpu::dropout(u, dropout, u);
  cpu::linear_backward(dy, none, w, dx, none, none, accumulate_dx);
  cpu::add(dx, u, dx);
}

}  // namespace swift::ops::cpu
