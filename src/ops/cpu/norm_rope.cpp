// ops/cpu/norm_rope.cpp — fast CPU RMSNorm and rotary position embedding.
//
// Invariants:
//  - RMSNorm follows Hugging Face LlamaRMSNorm in fp32: rstd = 1 / sqrt(mean(x^2) + eps) with the sum of
//    squares accumulated in double, then y = weight * (x * rstd) rounded at each product as torch does.
//    Rows are independent (one OpenMP work item each), so y may alias x.
//  - RoPE follows Hugging Face's rotate_half layout: angle = float(position) * inv_freq[i] in fp32,
//    c = cos(angle) * attention_scaling, s = sin(angle) * attention_scaling (fp32), then
//    out[i] = x[i] c - x[i + D/2] s and out[i + D/2] = x[i + D/2] c + x[i] s. cos/sin are computed once per
//    token and shared by all its heads. rope_backward applies the transposed rotation (sin negated, which is
//    exact), so forward then backward round the same products.
//  - rmsnorm_backward: dweight is reduced per column in fp64 over rows in order (columns split across
//    threads), dx per row (rows split across threads); the row's sum(g * x) is accumulated in fp64.
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"

namespace swift::ops::cpu {

namespace {
constexpr int64_t kParallelMin = 32768;  // elements below which the op runs on one thread
}

void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd) {
  SWIFT_PROFILE("rmsnorm");
  const int64_t n = x.size(0), c = x.size(1);
  if (n == 0) return;
  const float* px = x.data<float>();
  float* py = y.data<float>();
  float* pr = rstd.defined() ? rstd.data<float>() : nullptr;
  const float* pw;
  if (weight.dtype() == DType::F32) {
    pw = weight.data<float>();
  } else {
    float* converted = thread_scratch(ScratchSlot::Bias, static_cast<size_t>(c));
    to_f32(weight.raw(), weight.dtype(), converted, c);
    pw = converted;
  }
#pragma omp parallel for schedule(static) if (n * c >= kParallelMin)
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = px + r * c;
    float* yr = py + r * c;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < c; ++j) sum += static_cast<double>(xr[j]) * xr[j];
    const float variance = c > 0 ? static_cast<float>(sum / static_cast<double>(c)) : 0.0f;
    const float inv = 1.0f / std::sqrt(variance + eps);
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) yr[j] = pw[j] * (xr[j] * inv);
    if (pr) pr[r] = inv;
  }
}

namespace {

// Rotates (T, H, D) blocks by angle * direction (direction = +1 forward, -1 backward): token t's heads from
// src + t * src_stride into dst + t * dst_stride (the same rows: in place).
void rotate_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t tokens, int64_t heads,
                 int64_t d, const Tensor& positions, const RopeFrequencies& freqs, float direction) {
  const int64_t half = d / 2;
  if (tokens == 0 || half == 0) return;
  const int32_t* pos = positions.data<int32_t>();
  const float* inv_freq = freqs.inv_freq.data();
  const float scaling = freqs.attention_scaling;
#pragma omp parallel if (tokens * heads * d >= kParallelMin)
  {
    float* table = thread_scratch(ScratchSlot::Row, static_cast<size_t>(2 * half));
    float* cs = table;
    float* sn = table + half;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tokens; ++t) {
      const float p = static_cast<float>(pos[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = p * inv_freq[i];
        cs[i] = std::cos(angle) * scaling;
        sn[i] = direction * (std::sin(angle) * scaling);
      }
      for (int64_t h = 0; h < heads; ++h) {
        const float* s1 = src + t * src_stride + h * d;
        const float* s2 = s1 + half;
        float* x1 = dst + t * dst_stride + h * d;
        float* x2 = x1 + half;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float a = s1[i], b = s2[i];
          x1[i] = a * cs[i] - b * sn[i];
          x2[i] = b * cs[i] + a * sn[i];
        }
      }
    }
  }
}

void rotate(Tensor& x, const Tensor& positions, const RopeFrequencies& freqs, float direction) {
  float* px = x.data<float>();
  const int64_t row = x.size(1) * x.size(2);
  rotate_rows(px, row, px, row, x.size(0), x.size(1), x.size(2), positions, freqs, direction);
}

// The weight as fp32: the tensor itself, or a converted copy in this thread's scratch.
const float* weight_f32(const Tensor& weight) {
  if (weight.dtype() == DType::F32) return weight.data<float>();
  float* converted = thread_scratch(ScratchSlot::Bias, static_cast<size_t>(weight.numel()));
  to_f32(weight.raw(), weight.dtype(), converted, weight.numel());
  return converted;
}

}  // namespace

void rope(Tensor& x, const Tensor& positions, const RopeFrequencies& freqs) {
  SWIFT_PROFILE("rope");
  rotate(x, positions, freqs, 1.0f);
}

void rope_backward(Tensor& dx, const Tensor& positions, const RopeFrequencies& freqs) {
  SWIFT_PROFILE("rope_backward");
  rotate(dx, positions, freqs, -1.0f);
}

void rope_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t heads, const Tensor& positions,
                  const RopeFrequencies& freqs, bool backward) {
  SWIFT_PROFILE("rope_columns");
  const int64_t d = 2 * static_cast<int64_t>(freqs.inv_freq.size());
  rotate_rows(x.data<float>() + x_col, x.size(1), y.data<float>() + y_col, y.size(1), x.size(0), heads, d, positions,
              freqs, backward ? -1.0f : 1.0f);
}

// xhat = x * rstd (fp32, as the forward); g = dy * w;
// dx = g * rstd + x * c with c = -rstd^3 * sum(g * x) / C (fp64 sum, c rounded once); dweight += sum_r dy * xhat.
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                      Tensor& dweight, bool accumulate_dx) {
  SWIFT_PROFILE("rmsnorm_backward");
  const int64_t n = x.size(0), c = x.size(1);
  if (n == 0 || c == 0) return;
  const float* px = x.data<float>();
  const float* pdy = dy.data<float>();
  const float* pr = rstd.data<float>();
  // dweight first: dx may be dy itself (in place).
  if (dweight.defined()) {
    float* pdw = dweight.data<float>();
#pragma omp parallel if (n * c >= kParallelMin)
    {
      int64_t c0, c1;
      split_range(c, omp_get_num_threads(), omp_get_thread_num(), 16, c0, c1);
      if (c1 > c0) {
        std::vector<double> acc(static_cast<size_t>(c1 - c0), 0.0);
        for (int64_t r = 0; r < n; ++r) {
          const float* xr = px + r * c + c0;
          const float* gr = pdy + r * c + c0;
          const float inv = pr[r];
#pragma omp simd
          for (int64_t j = 0; j < c1 - c0; ++j) acc[static_cast<size_t>(j)] += gr[j] * (xr[j] * inv);
        }
        for (int64_t j = c0; j < c1; ++j) pdw[j] = static_cast<float>(pdw[j] + acc[static_cast<size_t>(j - c0)]);
      }
    }
  }
  if (!dx.defined()) return;
  const float* pw = weight_f32(weight);
  float* pdx = dx.data<float>();
  const double inv_c = 1.0 / static_cast<double>(c);
#pragma omp parallel for schedule(static) if (n * c >= kParallelMin)
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = px + r * c;
    const float* gr = pdy + r * c;
    float* out = pdx + r * c;
    const float inv = pr[r];
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < c; ++j) sum += static_cast<double>(gr[j] * pw[j]) * xr[j];
    const double inv_d = inv;
    const float coef = static_cast<float>(-inv_d * inv_d * inv_d * sum * inv_c);
    if (accumulate_dx) {
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) out[j] += (gr[j] * pw[j]) * inv + xr[j] * coef;
    } else {
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) out[j] = (gr[j] * pw[j]) * inv + xr[j] * coef;
    }
  }
}

}  // namespace swift::ops::cpu
