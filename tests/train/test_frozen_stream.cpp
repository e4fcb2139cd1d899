// tests/train/test_frozen_stream.cpp — frozen-weight streaming (TrainableModel::set_offload_frozen_layers, swift sft
// --offload_frozen_layers) on the CPU, where the protocol runs with synchronous copies: the same loss and gradients bit
// for bit as keeping every matrix, under block and selective recompute and after an evaluation (which lets the layers
// go), with LoRA and with DoRA (whose streamed layers' norms are computed in the forward); the streamed layers'
// matrices are off the books from their forward until the backward fetches them two layers ahead (the Weights
// category at every layer's backward hook: the exact count), host copies as Other; the CausalLM refuses its forward
// while they are lent and gets them back, the same bytes, when the TrainableModel goes; full fine-tuning and counts
// past the layers are refused naming the option.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/memory.h"
#include "model/causal_lm.h"
#include "model/lora.h"
#include "model/training.h"
#include "ops/backends.h"
#include "train/parallel_test_util.h"

namespace swift::test {
namespace {

constexpr int kWeights = static_cast<int>(MemoryCategory::Weights);

struct StepResult {
  double loss_sum = 0;
  std::vector<Tensor> grads;
};

StepResult train_step(model::TrainableModel& tm, const model::MicroBatch& b, bool checkpointing) {
  tm.zero_grad();
  StepResult r;
  r.loss_sum = tm.forward_backward(b, 1.0f / 50.0f, 777, checkpointing).loss_sum;
  for (const model::Parameter& p : tm.parameters()) r.grads.push_back(p.grad.clone());
  return r;
}

void expect_same(const StepResult& want, const StepResult& got, model::TrainableModel& tm) {
  EXPECT_EQ(want.loss_sum, got.loss_sum);
  ASSERT_EQ(want.grads.size(), got.grads.size());
  for (size_t i = 0; i < want.grads.size(); ++i) {
    EXPECT_EQ(std::memcmp(want.grads[i].raw(), got.grads[i].raw(), want.grads[i].nbytes()), 0)
        << tm.parameters()[i].name;
  }
}

// Bytes of one layer's seven matrices in the streamed buffer (each at a 256-byte boundary), F32 on the CPU.
int64_t layer_bytes(const io::ModelConfig& c) {
  const int64_t C = c.hidden_size, F = c.intermediate_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim;
  int64_t total = 0;
  for (int64_t n : {q * C, kv * C, kv * C, C * q, F * C, F * C, C * F}) total = (total + n * 4 + 255) / 256 * 256;
  return total;
}

TinyModelSpec six_layers() {
  TinyModelSpec spec;
  spec.layers = 6;
  spec.intermediate = 72;
  return spec;
}

// LoRA or DoRA adapters with random A and B (DoRA's magnitudes from the base weights), dropout 0.25.
model::LoraAdapters random_adapters(const model::CausalLM& lm, bool dora) {
  model::LoraSettings s;
  s.rank = 4;
  s.dropout = 0.25;
  s.init_weights = "false";
  s.seed = 3;
  s.use_dora = dora;
  return model::create_lora(lm.config(), s, &lm.weights());
}

class FrozenStreamAdapters : public ::testing::TestWithParam<bool> {};  // DoRA?

TEST_P(FrozenStreamAdapters, SameBitsUnderEveryPolicyAndAfterAnEvaluation) {
  ops::init_backends();
  auto lm = tiny_model(six_layers());
  const io::ModelConfig& c = lm->config();
  model::TrainableModel tm(*lm, model::TunerType::Lora, random_adapters(*lm, GetParam()));
  const model::MicroBatch b = random_micro_batch({29, 21, 14}, c.vocab_size, 8);
  using Modules = model::TrainableModel::RecomputeModules;
  struct Policy {
    std::string name;
    bool checkpointing;
    int64_t recompute_layers;
    Modules modules;
  };
  const std::vector<Policy> policies = {{"keep everything", false, -1, {}},
                                        {"layernorm act mlp", false, -1, {.layernorm = true, .act = true, .mlp = true}},
                                        {"mlp in 2 layers", false, -1, {.mlp = true, .mlp_layers = 2}},
                                        {"2 blocks recomputed", true, 2, {}},
                                        {"every block recomputed", true, -1, {}}};
  for (const Policy& p : policies) {
    SCOPED_TRACE(p.name);
    tm.set_recompute_layers(p.recompute_layers);
    tm.set_recompute_modules(p.modules);
    for (int64_t n : {1, 3, 6}) {
      SCOPED_TRACE("streamed layers " + std::to_string(n));
      // The adapters change first, as after an optimizer step: the streamed steps run before the reference, so a
      // DoRA norm left from an earlier step would show.
      for (model::Parameter& q : tm.parameters()) {
        if (q.name.find("lora_B") == std::string::npos) continue;
        for (int64_t e = 0; e < q.value.numel(); ++e) q.value.data<float>()[e] *= 1.0625f;
      }
      tm.set_offload_frozen_layers(n);
      EXPECT_EQ(tm.offload_frozen_layers(), n);
      EXPECT_EQ(lm->lent_layers(), n);
      std::vector<StepResult> streamed;
      for (int repeat = 0; repeat < 2; ++repeat) streamed.push_back(train_step(tm, b, p.checkpointing));
      const double eval_streamed = tm.evaluate(b).loss_sum;  // lets every streamed layer go
      streamed.push_back(train_step(tm, b, p.checkpointing));  // fetched again in the forward
      const double eval_away = tm.evaluate(b).loss_sum;
      tm.set_offload_frozen_layers(0);  // from layers that are away
      const StepResult keep = train_step(tm, b, p.checkpointing);
      for (const StepResult& r : streamed) expect_same(keep, r, tm);
      const double eval_keep = tm.evaluate(b).loss_sum;
      EXPECT_EQ(eval_streamed, eval_keep);
      EXPECT_EQ(eval_away, eval_keep);
    }
  }
  tm.set_offload_frozen_layers(0);
  EXPECT_EQ(lm->lent_layers(), 0);
}

INSTANTIATE_TEST_SUITE_P(LoraAndDora, FrozenStreamAdapters, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "DoRA" : "LoRA"; });

TEST(FrozenStream, MatricesLeaveFromTheForwardUntilTheBackwardFetchesThemTwoAhead) {
  ops::init_backends();
  auto lm = tiny_model(six_layers());
  const io::ModelConfig& c = lm->config();
  model::TrainableModel tm(*lm, model::TunerType::Lora, random_lora(c));
  const model::MicroBatch b = random_micro_batch({29, 21, 14}, c.vocab_size, 8);
  const int64_t lb = layer_bytes(c);
  constexpr int64_t n = 4, ahead = 2;  // SWIFT_FROZEN_AHEAD's default
  const int64_t other_before = memory_stats(0).current[static_cast<int>(MemoryCategory::Other)];
  tm.set_offload_frozen_layers(n);
  EXPECT_EQ(tm.frozen_host_bytes(), n * lb);
  EXPECT_EQ(memory_stats(0).current[static_cast<int>(MemoryCategory::Other)] - other_before, n * lb);
  std::vector<int64_t> at_hook(static_cast<size_t>(c.num_hidden_layers), -1);
  tm.set_backward_hook([&](int64_t layer) {
    if (layer >= 0) at_hook[static_cast<size_t>(layer)] = memory_stats(0).current[kWeights];
  });
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const int64_t start = memory_stats(0).current[kWeights];  // every streamed layer on the books again
    train_step(tm, b, false);
    EXPECT_EQ(memory_stats(0).current[kWeights], start);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      // After layer i's backward, layers max(0, i - ahead) .. n-1 are back: the ones below still wait.
      const int64_t away = std::max<int64_t>(0, std::min(n, i - ahead));
      EXPECT_EQ(at_hook[static_cast<size_t>(i)], start - away * lb) << "layer " << i;
    }
  }
  tm.set_backward_hook(nullptr);
}

TEST(FrozenStream, TheModelRefusesItsForwardWhileLentAndGetsTheSameBytesBack) {
  ops::init_backends();
  auto lm = tiny_model(six_layers());
  const io::ModelConfig& c = lm->config();
  const std::vector<int32_t> ids = {3, 14, 15, 92, 65, 35};
  const Tensor before = lm->forward(ids);
  {
    model::TrainableModel tm(*lm, model::TunerType::Lora, random_lora(c));
    tm.set_offload_frozen_layers(3);
    try {
      lm->forward(ids);
      ADD_FAILURE() << "the forward ran without layer 0's matrices";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("--offload_frozen_layers"), std::string::npos) << e.what();
    }
    train_step(tm, random_micro_batch({17, 9}, c.vocab_size, 4), false);
  }  // the TrainableModel gives them back
  EXPECT_EQ(lm->lent_layers(), 0);
  const Tensor after = lm->forward(ids);
  ASSERT_EQ(before.nbytes(), after.nbytes());
  EXPECT_EQ(std::memcmp(before.raw(), after.raw(), before.nbytes()), 0);  // the base matrices unchanged
}

TEST(FrozenStream, RefusesFullFineTuningAndCountsPastTheLayers) {
  ops::init_backends();
  auto expect_refusal = [](const std::function<void()>& f, const std::string& words) {
    try {
      f();
      ADD_FAILURE() << "not refused: " << words;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  auto lm = tiny_model(six_layers());
  const io::ModelConfig& c = lm->config();
  {
    model::TrainableModel tm(*lm, model::TunerType::Lora, random_lora(c));
    expect_refusal([&] { tm.set_offload_frozen_layers(7); }, "from 0 to 6");
    expect_refusal([&] { tm.set_offload_frozen_layers(-1); }, "from 0 to 6");
  }
  {
    model::TrainableModel tm(*lm, model::TunerType::Full, {});
    expect_refusal([&] { tm.set_offload_frozen_layers(2); }, "full fine-tuning trains the base matrices");
  }
  EXPECT_EQ(lm->lent_layers(), 0);
}

}  // namespace
}  // namespace swift::test
