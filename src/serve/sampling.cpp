// serve/sampling.cpp — logits processors and sampling.
#include "serve/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace swift::serve {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

double log_sum_exp(const float* x, int64_t n) {
  float max = kNegInf;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  if (max == kNegInf) return kNegInf;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  return max + std::log(sum);
}
}  // namespace

Sampler::Sampler(SamplingParams params) : params_(params), rng_(params.seed) {
  SWIFT_CHECK(params.temperature >= 0, "--temperature must be >= 0, got {}", params.temperature);
  SWIFT_CHECK(params.top_k >= 0, "--top_k must be >= 0, got {}", params.top_k);
  SWIFT_CHECK(params.top_p > 0 && params.top_p <= 1, "--top_p must be in (0, 1], got {}", params.top_p);
  SWIFT_CHECK(params.repetition_penalty > 0, "--repetition_penalty must be > 0, got {}", params.repetition_penalty);
}

std::vector<float> process_logits(const float* logits, int64_t vocab, const std::vector<int32_t>& context,
                                  const SamplingParams& p) {
  std::vector<float> s(logits, logits + vocab);
  if (p.repetition_penalty != 1.0) {
    const float penalty = static_cast<float>(p.repetition_penalty);
    std::vector<uint8_t> seen(static_cast<size_t>(vocab), 0);
    for (int32_t id : context) {
      if (id < 0 || id >= vocab || seen[static_cast<size_t>(id)]) continue;
      seen[static_cast<size_t>(id)] = 1;
      float& v = s[static_cast<size_t>(id)];
      v = v < 0 ? v * penalty : v / penalty;
    }
  }
  if (p.temperature > 0 && p.temperature != 1.0) {
    const float t = static_cast<float>(p.temperature);
    for (float& v : s) v /= t;
  }
  if (p.top_k > 0 && p.top_k < vocab) {
    std::vector<float> sorted(s);
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(), std::greater<float>());
    const float kth = sorted[static_cast<size_t>(p.top_k - 1)];
    for (float& v : s)
      if (v < kth) v = kNegInf;
  }
  if (p.top_p < 1.0) {
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[a] < s[b]; });  // ascending
    const double lse = log_sum_exp(s.data(), vocab);
    double cumulative = 0;
    for (size_t i = 0; i + 1 < order.size(); ++i) {  // the last (most likely) token is always kept
      cumulative += std::exp(static_cast<double>(s[order[i]]) - lse);
      if (cumulative <= 1.0 - p.top_p) s[order[i]] = kNegInf;
    }
  }
  return s;
}

int32_t Sampler::next(const float* logits, int64_t vocab, const std::vector<int32_t>& context) {
  SWIFT_CHECK(vocab > 0, "sampling: empty vocabulary");
  if (params_.temperature == 0) {  // greedy (repetition penalty still applies, as in HF)
    std::vector<float> s = process_logits(logits, vocab, context, {0.0, 0, 1.0, params_.repetition_penalty, 0});
    return static_cast<int32_t>(std::max_element(s.begin(), s.end()) - s.begin());
  }
  std::vector<float> s = process_logits(logits, vocab, context, params_);
  const double lse = log_sum_exp(s.data(), vocab);
  SWIFT_CHECK(std::isfinite(lse), "sampling: every token was removed or the logits are not finite");
  const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
  double cumulative = 0;
  int32_t last_valid = -1;
  for (int64_t i = 0; i < vocab; ++i) {
    if (s[static_cast<size_t>(i)] == kNegInf) continue;
    last_valid = static_cast<int32_t>(i);
    cumulative += std::exp(static_cast<double>(s[static_cast<size_t>(i)]) - lse);
    if (u < cumulative) return static_cast<int32_t>(i);
  }
  return last_valid;  // rounding left u above the total: the last possible token
}

float token_logprob(const float* logits, int64_t vocab, int32_t id) {
  SWIFT_CHECK(id >= 0 && id < vocab, "logprob: token {} outside the vocabulary of {}", id, vocab);
  return static_cast<float>(logits[id] - log_sum_exp(logits, vocab));
}

std::vector<TokenLogprob> top_logprobs(const float* logits, int64_t vocab, int64_t k) {
  k = std::min(k, vocab);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  const double lse = log_sum_exp(logits, vocab);
  std::vector<TokenLogprob> out;
  for (int64_t i = 0; i < k; ++i) {
    const int32_t id = order[static_cast<size_t>(i)];
    out.push_back({id, static_cast<float>(logits[id] - lse)});
  }
  return out;
}

}  // namespace swift::serve
