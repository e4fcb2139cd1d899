// tests/model/test_golden_kv_cache.cpp — incremental decoding with a KV cache gives the logits of the full
// forward pass (which the golden tests tie to transformers): prefill a prefix, then one token at a time.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/golden_util.h"

namespace swift {
namespace {

// Decode attention accumulates in a different order than the blocked prefill kernel: rounding only.
constexpr double kMaxAbsTol = 5e-5;
constexpr double kRelL2Tol = 5e-6;

class GoldenKvCache : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenKvCache, DecodingStepByStepEqualsFullForward) {
  const std::string dir = std::string(SWIFT_FIXTURES_DIR) + "/golden/" + GetParam();
  auto model = model::CausalLM::load(dir);
  io::SafetensorsFile f = io::SafetensorsFile::open(dir + "/expected.safetensors");
  const Tensor ids = f.tensor("input_ids"), cu = f.tensor("cu_seqlens");
  // The longest sequence of the fixture.
  int64_t best = 0;
  for (int64_t b = 0; b + 1 < cu.numel(); ++b)
    if (cu.item(b + 1) - cu.item(b) > cu.item(best + 1) - cu.item(best)) best = b;
  std::vector<int32_t> seq;
  for (int64_t t = static_cast<int64_t>(cu.item(best)); t < cu.item(best + 1); ++t)
    seq.push_back(static_cast<int32_t>(ids.item(t)));
  const Tensor full = model->forward(seq);
  const int64_t n = static_cast<int64_t>(seq.size()), prefix = n / 2, V = model->config().vocab_size;

  auto cache = model->new_kv_cache(n + 4);
  const Tensor first = model->forward_cached(std::vector<int32_t>(seq.begin(), seq.begin() + prefix), cache, true);
  EXPECT_TRUE(golden::close(GetParam() + " prefill", first, full.slice_rows(0, prefix), kMaxAbsTol, kRelL2Tol));
  for (int64_t t = prefix; t < n; ++t) {
    const Tensor step = model->forward_cached({seq[static_cast<size_t>(t)]}, cache);
    ASSERT_EQ(step.shape(), (Shape{1, V}));
    ASSERT_TRUE(golden::close(GetParam() + " step " + std::to_string(t), step, full.slice_rows(t, t + 1),
                              kMaxAbsTol, kRelL2Tol));
  }
  EXPECT_EQ(cache.length, n);
  EXPECT_THROW(model->forward_cached(std::vector<int32_t>(5, 1), cache), Error);  // capacity n + 4
}

// Sliding window, dynamic rope, q/k norm, biases and GQA all pass through the cached path.
INSTANTIATE_TEST_SUITE_P(Cases, GoldenKvCache,
                         ::testing::Values("llama_gqa_llama3", "mistral_sliding_window", "qwen3_qknorm",
                                           "qwen2_tied_1kv", "llama_mha_tied_linear_bias", "llama_yarn"));

}  // namespace
}  // namespace swift
