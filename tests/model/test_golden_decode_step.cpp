// tests/model/test_golden_decode_step.cpp — CausalLM::decode_step (the fixed-buffer decoding step that CUDA graphs
// replay) on the CPU: its host logic (key buckets, plan reuse and remaking) and its math, which must equal the packed
// path of forward_cached bit for bit (same ops in the same order; the CPU attention does not split keys).
//
// Invariants: every golden model is decoded twice from the same prefill, once per path, teacher-forced with the same
// ids; logits and the whole KV cache are compared with memcmp. GPU equality of replayed and eager steps is in
// tests/gpu/test_cuda_decode_graph.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/decode_plan.h"
#include "model/lora.h"

namespace swift {
namespace {

TEST(DecodeKeyBucket, PowersOfTwoFromTheMinimumCappedAtTheCapacity) {
  EXPECT_EQ(model::decode_key_bucket(1, 1000, 256), 256);
  EXPECT_EQ(model::decode_key_bucket(256, 1000, 256), 256);
  EXPECT_EQ(model::decode_key_bucket(257, 1000, 256), 512);
  EXPECT_EQ(model::decode_key_bucket(512, 1000, 256), 512);
  EXPECT_EQ(model::decode_key_bucket(513, 1000, 256), 1000);
  EXPECT_EQ(model::decode_key_bucket(1000, 1000, 256), 1000);
  EXPECT_EQ(model::decode_key_bucket(1, 100, 256), 100);  // a cache below the minimum: one bucket
  EXPECT_EQ(model::decode_key_bucket(3, 1024, 1), 4);
  EXPECT_EQ(model::decode_key_bucket(1024, 1024, 1), 1024);
  EXPECT_EQ(model::decode_key_bucket(7, 40, 5), 10);  // a minimum that is not a power of two: 5, 10, 20, 40
  EXPECT_EQ(model::decode_key_buckets(1000, 256), (std::vector<int64_t>{256, 512, 1000}));
  EXPECT_EQ(model::decode_key_buckets(1024, 256), (std::vector<int64_t>{256, 512, 1024}));
  EXPECT_EQ(model::decode_key_buckets(100, 256), (std::vector<int64_t>{100}));
  EXPECT_EQ(model::decode_key_buckets(9, 2), (std::vector<int64_t>{2, 4, 8, 9}));
  EXPECT_THROW(model::decode_key_bucket(0, 10, 4), Error);
  EXPECT_THROW(model::decode_key_bucket(11, 10, 4), Error);
  EXPECT_THROW(model::decode_key_bucket(5, 10, 0), Error);
}

TEST(DecodeKeyBucket, EveryKeyCountFallsInAListedBucketThatHoldsIt) {
  for (const int64_t capacity : {1, 2, 3, 63, 64, 65, 300, 4097}) {
    for (const int64_t min : {1, 3, 64, 256}) {
      const std::vector<int64_t> buckets = model::decode_key_buckets(capacity, min);
      int64_t previous = 0;
      for (int64_t keys = 1; keys <= capacity; ++keys) {
        const int64_t b = model::decode_key_bucket(keys, capacity, min);
        ASSERT_GE(b, keys);
        ASSERT_LE(b, capacity);
        ASSERT_GE(b, previous) << "buckets must not shrink as the cache fills";
        ASSERT_NE(std::find(buckets.begin(), buckets.end(), b), buckets.end()) << capacity << " " << min << " " << keys;
        previous = b;
      }
      ASSERT_EQ(buckets.back(), capacity);
    }
  }
}

std::string golden_dir(const std::string& name) { return std::string(SWIFT_FIXTURES_DIR) + "/golden/" + name; }

std::vector<int32_t> first_sequence(const std::string& name) {
  io::SafetensorsFile f = io::SafetensorsFile::open(golden_dir(name) + "/expected.safetensors");
  const Tensor ids = f.tensor("input_ids"), cu = f.tensor("cu_seqlens");
  std::vector<int32_t> out;
  for (int64_t t = 0; t < cu.item(1); ++t) out.push_back(static_cast<int32_t>(ids.item(t)));
  return out;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), dtype_bytes(a.dtype(), a.numel())) == 0;
}

class GoldenDecodeStep : public ::testing::TestWithParam<std::string> {};

// The prompt's first half is prefilled; the rest and then the model's own greedy choices are fed one token at a time.
TEST_P(GoldenDecodeStep, EqualsThePackedPathBitForBit) {
  auto m = model::CausalLM::load(golden_dir(GetParam()));
  ASSERT_TRUE(m->decode_step_supported());
  const std::vector<int32_t> seq = first_sequence(GetParam());
  const int64_t prefix = static_cast<int64_t>(seq.size()) / 2, steps = 20;
  const int64_t capacity = prefix + steps;
  auto packed = m->new_kv_cache(capacity), fixed = m->new_kv_cache(capacity);
  fixed.decode_bucket_min = 2;  // several buckets (the CPU ignores them, the plan's bookkeeping does not)
  const std::vector<int32_t> prompt(seq.begin(), seq.begin() + prefix);
  Tensor want = m->forward_cached(prompt, packed);
  ASSERT_TRUE(same_bits(m->forward_cached(prompt, fixed), want));
  for (int64_t s = 0; s < steps; ++s) {
    const int32_t id = s + prefix < static_cast<int64_t>(seq.size())
                           ? seq[static_cast<size_t>(s + prefix)]
                           : static_cast<int32_t>(std::max_element(want.data<float>(), want.data<float>() + want.numel()) -
                                                  want.data<float>());
    want = m->forward_cached({id}, packed);  // the CPU keeps the packed path
    const Tensor got = m->decode_step(id, fixed, model::DecodeMode::Eager);
    ASSERT_TRUE(same_bits(got, want)) << GetParam() << ": step " << s;
  }
  EXPECT_EQ(fixed.length, packed.length);
  for (size_t i = 0; i < packed.k.size(); ++i) {
    EXPECT_TRUE(same_bits(fixed.k[i].slice_rows(0, fixed.length), packed.k[i].slice_rows(0, packed.length))) << i;
    EXPECT_TRUE(same_bits(fixed.v[i].slice_rows(0, fixed.length), packed.v[i].slice_rows(0, packed.length))) << i;
  }
  const model::DecodeStats stats = model::decode_stats(fixed);
  EXPECT_EQ(stats.eager_steps, steps);
  EXPECT_EQ(stats.graph_replays, 0);
  EXPECT_THROW(m->decode_step(1, fixed), Error);  // full
}

INSTANTIATE_TEST_SUITE_P(Cases, GoldenDecodeStep,
                         ::testing::Values("llama_gqa_llama3", "mistral_sliding_window", "qwen3_qknorm", "qwen2_tied_1kv",
                                           "llama_mha_tied_linear_bias", "llama_yarn", "qwen2_bf16"));

TEST(GoldenDecodeStepPlan, KeptAcrossStepsRemadeAfterPlaceOrNewAdapters) {
  auto m = model::CausalLM::load(golden_dir("qwen2_tied_1kv"));
  auto cache = m->new_kv_cache(16);
  m->forward_cached({1, 2, 3}, cache);
  m->decode_step(4, cache, model::DecodeMode::Eager);
  const model::DecodePlan* first = cache.plan.get();
  ASSERT_NE(first, nullptr);
  m->decode_step(5, cache, model::DecodeMode::Eager);
  EXPECT_EQ(cache.plan.get(), first);
  EXPECT_EQ(model::decode_stats(cache).eager_steps, 2);

  // Adapters with modules_to_save copies only are covered; set_lora must invalidate the plan (it holds the old head).
  model::LoraSettings s;
  s.init_weights = "false";
  s.modules_to_save = {"embed_tokens", "lm_head"};
  model::LoraAdapters adapters = model::create_lora(m->config(), s, &m->weights());
  adapters.layers.clear();
  m->set_lora(adapters);
  ASSERT_TRUE(m->decode_step_supported());
  m->decode_step(6, cache, model::DecodeMode::Eager);
  EXPECT_NE(cache.plan.get(), first) << "set_lora must invalidate the plan";
  auto fixed = m->new_kv_cache(16), packed = m->new_kv_cache(16);
  m->forward_cached({1, 2, 3, 4}, fixed);
  m->forward_cached({1, 2, 3, 4}, packed);
  EXPECT_TRUE(same_bits(m->decode_step(5, fixed, model::DecodeMode::Eager), m->forward_cached({5}, packed)));

  // place() (here: the CPU again, BF16 matrices) moves the weights: the plan is remade for the new addresses.
  m->place(Device::cpu(), DType::BF16);
  auto placed = m->new_kv_cache(16), placed_packed = m->new_kv_cache(16);
  m->forward_cached({1, 2, 3}, placed);
  m->forward_cached({1, 2, 3}, placed_packed);
  EXPECT_TRUE(same_bits(m->decode_step(4, placed, model::DecodeMode::Eager), m->forward_cached({4}, placed_packed)));
}

TEST(GoldenDecodeStepPlan, UncoveredModelsAndBadCallsAreRefusedByName) {
  auto dynamic = model::CausalLM::load(golden_dir("llama_dynamic"));
  std::string why;
  EXPECT_FALSE(dynamic->decode_step_supported(&why));
  EXPECT_NE(why.find("dynamic"), std::string::npos) << why;
  auto cache = dynamic->new_kv_cache(8);
  dynamic->forward_cached({1, 2}, cache);
  try {
    dynamic->decode_step(3, cache);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decode_step"), std::string::npos) << e.what();
  }

  auto m = model::CausalLM::load(golden_dir("llama_gqa_llama3"));
  auto empty = m->new_kv_cache(8);
  EXPECT_THROW(m->decode_step(1, empty), Error);  // nothing prefilled
  m->forward_cached({1, 2}, empty);
  EXPECT_THROW(m->decode_step(-1, empty), Error);
  EXPECT_THROW(m->decode_step(static_cast<int32_t>(m->config().vocab_size), empty), Error);
  EXPECT_THROW(m->decode_step(1, empty, model::DecodeMode::Graph), Error);  // the CPU has no graphs

  model::LoraSettings s;
  s.rank = 2;
  s.alpha = 4;
  s.init_weights = "false";
  m->set_lora(model::create_lora(m->config(), s, &m->weights()));
  EXPECT_FALSE(m->decode_step_supported(&why));
  EXPECT_NE(why.find("LoRA"), std::string::npos) << why;
}

}  // namespace
}  // namespace swift
