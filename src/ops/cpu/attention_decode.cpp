// ops/cpu/attention_decode.cpp — argument checks and the fast CPU kernel: one (query, head) row per work item,
// two passes over the visible keys (scores with the running max, then the weighted sum).
#include "ops/attention_decode.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace swift::ops {

namespace detail {

void check_attention_decode(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, int64_t start, int64_t window,
           const Tensor& out) {
  for (const Tensor* t : {&q, &k, &v, &out}) {
    SWIFT_CHECK(t->defined() && t->dtype() == DType::F32 && t->dim() == 3 && t->device().is_cpu(),
                "{}: q, k_cache, v_cache and out must be CPU F32 (T, H, D) tensors; got {}", op, t->str());
  }
  SWIFT_CHECK(k.shape() == v.shape(), "{}: k_cache {} and v_cache {} differ", op, k.str(), v.str());
  SWIFT_CHECK(q.shape() == out.shape(), "{}: q {} and out {} differ", op, q.str(), out.str());
  SWIFT_CHECK(q.size(2) == k.size(2), "{}: q {} and k_cache {} disagree on D", op, q.str(), k.str());
  SWIFT_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "{}: Hq = {} is not a multiple of Hkv = {}", op,
              q.size(1), k.size(1));
  SWIFT_CHECK(start >= 0 && start + q.size(0) <= k.size(0), "{}: queries at [{}, {}) but the cache holds {} rows",
              op, start, start + q.size(0), k.size(0));
  SWIFT_CHECK(window >= 0, "{}: window = {} must be >= 0", op, window);
  out.check_writable(op);
}

}  // namespace detail

void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start, float scale,
                      int64_t window, Tensor& out) {
  detail::check_attention_decode("attention_decode", q, k_cache, v_cache, start, window, out);
  const int64_t tq = q.size(0), hq = q.size(1), d = q.size(2), hkv = k_cache.size(1), group = hq / hkv;
  const float* qp = q.data<float>();
  const float* kp = k_cache.data<float>();
  const float* vp = v_cache.data<float>();
  float* op = out.data<float>();
#pragma omp parallel
  {
    std::vector<float> scores;
    std::vector<float> acc(static_cast<size_t>(d));
#pragma omp for schedule(dynamic, 1)
    for (int64_t row = 0; row < tq * hq; ++row) {
      const int64_t i = row / hq, h = row % hq, kvh = h / group, pos = start + i;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      const float* qr = qp + (i * hq + h) * d;
      scores.resize(static_cast<size_t>(pos - lo + 1));
      float max = -INFINITY;
      for (int64_t j = lo; j <= pos; ++j) {
        const float* kr = kp + (j * hkv + kvh) * d;
        float s = 0;
        for (int64_t c = 0; c < d; ++c) s += qr[c] * kr[c];
        s *= scale;
        scores[static_cast<size_t>(j - lo)] = s;
        max = std::max(max, s);
      }
      float sum = 0;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = lo; j <= pos; ++j) {
        const float p = std::exp(scores[static_cast<size_t>(j - lo)] - max);
        sum += p;
        const float* vr = vp + (j * hkv + kvh) * d;
        for (int64_t c = 0; c < d; ++c) acc[static_cast<size_t>(c)] += p * vr[c];
      }
      float* orow = op + (i * hq + h) * d;
      for (int64_t c = 0; c < d; ++c) orow[c] = acc[static_cast<size_t>(c)] / sum;
    }
  }
}



}  // namespace swift::ops
