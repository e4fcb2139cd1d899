// ops/cpu/attention_decode.cpp — the fast CPU kernel of attention_decode (checked and dispatched by
// ops/attention_decode.cpp): one (query, head) row per work item, two passes over the visible keys (scores with the
// running max, then the weighted sum).
//
// Invariants: no allocation (per-thread scratch); the query is scaled before the products and exp is
// cpu::exp_approx, as in ops::attention, so decoding matches prefill closely; one thread (no parallel region)
// when the work is below kParallelWork multiply-adds, which is every single-token decoding step of small models.
#include "ops/attention_decode.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"

namespace swift::ops {

namespace {
constexpr double kParallelWork = 1 << 20;  // multiply-adds of q K^T below which one thread runs the op
}  // namespace

namespace cpu {

void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start, float scale,
                      int64_t window, Tensor& out) {
  SWIFT_PROFILE("attention_decode");
  const int64_t tq = q.size(0), hq = q.size(1), d = q.size(2), hkv = k_cache.size(1), group = hq / hkv;
  const float* qp = q.data<float>();
  const float* kp = k_cache.data<float>();
  const float* vp = v_cache.data<float>();
  float* op = out.data<float>();
  const int64_t rows = tq * hq, max_keys = start + tq;
  // One decoded token attends to a few hundred keys: far less work than waking a second thread costs.
  const double work = static_cast<double>(rows) * static_cast<double>(max_keys) * static_cast<double>(d);
#pragma omp parallel if (rows > 1 && work > kParallelWork)
  {
    float* buf = cpu::thread_scratch(cpu::ScratchSlot::Attention, static_cast<size_t>(max_keys + 2 * d));
    float* scores = buf;               // (visible keys) scores, then probabilities
    float* acc = buf + max_keys;       // (D) unnormalised output
    float* qs = acc + d;               // (D) scaled query
#pragma omp for schedule(dynamic, 1)
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t i = row / hq, h = row % hq, kvh = h / group, pos = start + i;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0, nk = pos - lo + 1;
      const float* qr = qp + (i * hq + h) * d;
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) qs[c] = qr[c] * scale;  // scaled before the product, as ops::attention
      float max = -INFINITY;
      for (int64_t j = 0; j < nk; ++j) {
        const float* kr = kp + ((lo + j) * hkv + kvh) * d;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int64_t c = 0; c < d; ++c) s += qs[c] * kr[c];
        scores[j] = s;
        max = std::max(max, s);
      }
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < nk; ++j) {
        const float p = cpu::exp_approx(scores[j] - max);
        scores[j] = p;
        sum += p;
      }
      std::fill(acc, acc + d, 0.0f);
      for (int64_t j = 0; j < nk; ++j) {
        const float p = scores[j];
        const float* vr = vp + ((lo + j) * hkv + kvh) * d;
#pragma omp simd
        for (int64_t c = 0; c < d; ++c) acc[c] += p * vr[c];
      }
      const float inv = 1.0f / sum;
      float* orow = op + (i * hq + h) * d;
#pragma omp simd
      for (int64_t c = 0; c < d; ++c) orow[c] = acc[c] * inv;
    }
  }
}

}  // namespace cpu

}  // namespace swift::ops
