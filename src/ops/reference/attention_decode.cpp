// ops/reference/attention_decode.cpp — naive reference of attention against a KV cache, in double (F32 CPU tensors).
#include <cmath>
#include <vector>

#include "ops/attention_decode.h"
#include "ops/op_checks.h"

namespace swift::ops {

namespace ref {

void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start, float scale,
                      int64_t window, Tensor& out) {
  detail::require_cpu("attention_decode", detail::check_attention_decode("attention_decode", q, k_cache, v_cache,
                                                                          start, window, out));
  const int64_t tq = q.size(0), hq = q.size(1), d = q.size(2), hkv = k_cache.size(1), group = hq / hkv;
  for (int64_t i = 0; i < tq; ++i) {
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t pos = start + i, kvh = h / group;
      const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      std::vector<double> s;
      double max = -INFINITY;
      for (int64_t j = lo; j <= pos; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += double{q.data<float>()[(i * hq + h) * d + c]} *
                                               k_cache.data<float>()[(j * hkv + kvh) * d + c];
        s.push_back(dot * scale);
        max = std::max(max, s.back());
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - max));
      for (int64_t c = 0; c < d; ++c) {
        double acc = 0;
        for (int64_t j = lo; j <= pos; ++j) acc += s[static_cast<size_t>(j - lo)] * v_cache.data<float>()[(j * hkv + kvh) * d + c];
        out.data<float>()[(i * hq + h) * d + c] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace ref

}  // namespace swift::ops
