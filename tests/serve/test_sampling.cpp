// tests/serve/test_sampling.cpp — logits processors against transformers (tests/fixtures/sampling_processors.json,
// made by scripts/golden/make_sampling_fixtures.py), greedy and seeded sampling, log-probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serve/sampling.h"

namespace swift::serve {
namespace {

// Scores are divided by the same float temperature / penalty as torch does in fp32: equal to ~1 ulp.
constexpr float kScoreTol = 1e-5f;

TEST(Sampling, ProcessorsMatchTransformers) {
  std::ifstream in(std::string(SWIFT_FIXTURES_DIR) + "/sampling_processors.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json fixture = nlohmann::json::parse(in);
  ASSERT_GE(fixture["cases"].size(), 5u);
  for (const auto& c : fixture["cases"]) {
    SamplingParams p;
    p.temperature = c["params"]["temperature"];
    p.top_k = c["params"]["top_k"];
    p.top_p = c["params"]["top_p"];
    p.repetition_penalty = c["params"]["repetition_penalty"];
    const std::vector<float> logits = c["logits"].get<std::vector<float>>();
    const std::vector<int32_t> context = c["context"].get<std::vector<int32_t>>();
    const std::vector<float> got = process_logits(logits.data(), static_cast<int64_t>(logits.size()), context, p);
    for (size_t i = 0; i < logits.size(); ++i) {
      const auto& e = c["processed"][i];
      if (e.is_null()) {
        EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << "token " << i << " should be removed; " << c["params"];
      } else {
        EXPECT_NEAR(got[i], e.get<float>(), kScoreTol * std::max(1.0f, std::abs(e.get<float>())))
            << "token " << i << "; " << c["params"];
      }
    }
    for (size_t i = 0; i < logits.size(); ++i) {
      EXPECT_NEAR(token_logprob(logits.data(), static_cast<int64_t>(logits.size()), static_cast<int32_t>(i)),
                  c["logprobs"][i].get<float>(), 1e-5);
    }
  }
}

TEST(Sampling, GreedyPicksTheArgmaxAndSeedsRepeat) {
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 1.9f, 0.0f};
  Sampler greedy({});
  EXPECT_EQ(greedy.next(logits.data(), 5, {}), 1);
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 123;
  Sampler a(p), b(p);
  std::map<int32_t, int> counts;
  for (int i = 0; i < 4000; ++i) {
    const int32_t x = a.next(logits.data(), 5, {});
    EXPECT_EQ(x, b.next(logits.data(), 5, {}));
    ++counts[x];
  }
  // Frequencies follow softmax(logits): token 1 has p = 0.43, token 2 p = 0.02.
  EXPECT_NEAR(counts[1] / 4000.0, 0.434, 0.03);
  EXPECT_NEAR(counts[2] / 4000.0, 0.0216, 0.01);
  p.top_k = 1;
  Sampler top1(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(top1.next(logits.data(), 5, {}), 1);
}

TEST(Sampling, TopLogprobsAndBadParameters) {
  std::vector<float> logits = {0.0f, 3.0f, 1.0f};
  const auto top = top_logprobs(logits.data(), 3, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, 1);
  EXPECT_EQ(top[1].id, 2);
  EXPECT_NEAR(std::exp(top[0].logprob) + std::exp(top[1].logprob) + std::exp(token_logprob(logits.data(), 3, 0)),
              1.0, 1e-6);
  SamplingParams bad;
  bad.top_p = 0;
  EXPECT_THROW(Sampler{bad}, Error);
  bad = {};
  bad.temperature = -1;
  EXPECT_THROW(Sampler{bad}, Error);
  EXPECT_THROW(token_logprob(logits.data(), 3, 3), Error);
}

}  // namespace
}  // namespace swift::serve
