// serve/sampling.h — next-token selection with Hugging Face generate()'s logits processors: repetition penalty,
// then temperature, top-k, top-p (in that order, as transformers applies them), greedy when temperature is 0;
// plus log-probabilities for --logprobs / --top_logprobs.
//
// Invariants:
//  - Processors work on a copy of one logits row (V) in fp32; the model's logits are never modified.
//  - Semantics follow transformers: repetition penalty divides positive / multiplies negative scores of every
//    token already in the sequence (prompt included); top-k keeps every token scoring >= the k-th largest
//    (ties kept); top-p removes the tokens whose cumulative probability (ascending order) is <= 1 - top_p,
//    always keeping the most likely token.
//  - A Sampler with a given seed draws the same tokens on every machine (own uniform from mt19937_64).
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace swift::serve {

struct SamplingParams {
  double temperature = 0.0;         // 0: greedy
  int64_t top_k = 0;                // 0: off
  double top_p = 1.0;               // 1: off
  double repetition_penalty = 1.0;  // 1: off
  uint64_t seed = 42;
};

struct TokenLogprob {
  int32_t id = -1;
  float logprob = 0;  // log-softmax of the raw logits (before any processor), as OpenAI-compatible servers report
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params);
  // Picks the next token from `logits` (V) given the tokens of the sequence so far.
  int32_t next(const float* logits, int64_t vocab, const std::vector<int32_t>& context);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

// The processed scores (after penalty, temperature, top-k, top-p; removed tokens are -inf) — exposed for tests.
std::vector<float> process_logits(const float* logits, int64_t vocab, const std::vector<int32_t>& context,
                                  const SamplingParams& params);
// log-softmax of `logits` at `id`, and the `k` most likely tokens with their log-probabilities.
float token_logprob(const float* logits, int64_t vocab, int32_t id);
std::vector<TokenLogprob> top_logprobs(const float* logits, int64_t vocab, int64_t k);

}  // namespace swift::serve
