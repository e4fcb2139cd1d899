// tests/train/test_product_weights.cpp — full fine-tuning's product weights (TrainableModel::refresh_product_weights:
// the F32 masters cast once per forward for the products) and packed q/k/v (one product for the three, one input-
// and one weight-gradient product in the backward), forced on the CPU (force_product_weights) where they would not
// pay, against the plain path: the same loss and every gradient, over two AdamW steps (the second forward must take
// the updated masters, which AdamW wrote into the copies itself: no cast in that forward), on a grouped-query llama
// fixture without biases, a qwen2 fixture with q/k/v biases and a tied head, a dynamic-NTK llama (rope per sequence,
// q and k roped straight out of the packed rows: rope_qkv) and qwen3 with q/k-norm (the packed rows split by copies).
// The gradients of q, k and v stay the parameters' own (row blocks of one buffer): the optimizer moves them as
// before. Packed q/k/v under every memory policy (block checkpointing, selective recompute, offloading): the bits of
// keeping everything. Label unit. (On CUDA the golden and training gpu tests run this path by default.)
//
// Tolerance: loss 1e-6 relative, gradients 1e-5 of their largest magnitude at the first step: one product sums q's,
// k's and v's input gradients in another order than three products accumulating into one buffer (F32 on the CPU, so
// ~1e-7); 1e-4 after an AdamW step, whose first update is about lr * sign(gradient) and so turns a 1e-7 difference in
// a near-zero gradient into a difference of the parameter (measured 1.05e-5).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "model/causal_lm.h"
#include "model/training.h"
#include "ops/backends.h"
#include "train/optimizer.h"
#include "train/parallel_test_util.h"

namespace swift::test {
namespace {

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.item(i)));
  return m;
}

TEST(ProductWeights, PackedQkvGivesThePlainLossAndGradientsOverTwoSteps) {
  ops::init_backends();
  for (const std::string fixture : {"llama_gqa_llama3", "qwen2_tied_1kv", "llama_dynamic", "qwen3_qknorm"}) {
    SCOPED_TRACE(fixture);
    const std::string dir = std::string(SWIFT_FIXTURES_DIR) + "/golden/" + fixture;
    auto plain_lm = model::CausalLM::load(dir);
    auto packed_lm = model::CausalLM::load(dir);
    model::TrainableModel plain(*plain_lm, model::TunerType::Full);
    model::TrainableModel packed(*packed_lm, model::TunerType::Full);
    packed.force_product_weights(true);
    ops::AdamWConfig config;
    config.weight_decay = 0.01;
    train::AdamW plain_opt(plain.parameters(), config), packed_opt(packed.parameters(), config);
    const model::MicroBatch b = random_micro_batch({23, 17}, plain_lm->config().vocab_size, 4242, 0);
    for (int step = 0; step < 2; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      plain.zero_grad();
      packed.zero_grad();
      const double want = plain.forward_backward(b, 1.0f / 40.0f, 7, false).loss_sum;
      const double got = packed.forward_backward(b, 1.0f / 40.0f, 7, false).loss_sum;
      EXPECT_NEAR(got, want, 1e-6 * std::fabs(want));
      for (int64_t layer = 0; layer < plain_lm->config().num_hidden_layers; ++layer) {
        EXPECT_TRUE(packed.packs_qkv(layer)) << "layer " << layer;
        EXPECT_FALSE(plain.packs_qkv(layer)) << "layer " << layer;
      }
      ASSERT_EQ(plain.parameters().size(), packed.parameters().size());
      for (size_t i = 0; i < plain.parameters().size(); ++i) {
        const Tensor& g0 = plain.parameters()[i].grad;
        const Tensor& g1 = packed.parameters()[i].grad;
        ASSERT_EQ(g0.shape(), g1.shape()) << plain.parameters()[i].name;
        const double scale = std::max(max_abs(g0), 1e-20);
        double worst = 0;
        for (int64_t e = 0; e < g0.numel(); ++e) worst = std::max(worst, std::fabs(g0.item(e) - g1.item(e)));
        EXPECT_LE(worst, (step == 0 ? 1e-5 : 1e-4) * scale) << plain.parameters()[i].name;
      }
      // The first forward casts every matrix; after an AdamW step the copies it wrote are taken as they are.
      if (step == 0) {
        EXPECT_GT(packed.last_product_casts(), 0);
      } else {
        EXPECT_EQ(packed.last_product_casts(), 0);
      }
      plain_opt.step(1e-3);
      packed_opt.step(1e-3);
    }
  }
}

// Packed q/k/v under every memory policy: block checkpointing, the selective recompute (mlp, act, layernorm + act)
// and activation offloading give the same bits as keeping everything; on a 6-layer llama and a qwen2 with attention
// and MLP biases (packed q/k/v biases).
TEST(ProductWeights, PackedQkvGivesTheSameBitsUnderEveryMemoryPolicy) {
  ops::init_backends();
  for (const bool biases : {false, true}) {
    SCOPED_TRACE(biases ? "qwen2 with biases" : "llama");
    TinyModelSpec spec;
    spec.model_type = biases ? "qwen2" : "llama";
    spec.biases = biases;
    spec.layers = 6;
    auto lm = tiny_model(spec, 17);
    model::TrainableModel tm(*lm, model::TunerType::Full);
    tm.force_product_weights(true);
    const model::MicroBatch b = random_micro_batch({31, 18}, lm->config().vocab_size, 77, 2);
    auto run = [&](bool checkpointing, std::vector<Tensor>& grads) {
      tm.zero_grad();
      const double loss = tm.forward_backward(b, 1.0f / 45.0f, 3, checkpointing).loss_sum;
      grads.clear();
      for (const model::Parameter& p : tm.parameters()) grads.push_back(p.grad.clone());
      return loss;
    };
    std::vector<Tensor> kept, other;
    const double want = run(false, kept);
    for (int64_t layer = 0; layer < spec.layers; ++layer) EXPECT_TRUE(tm.packs_qkv(layer)) << "layer " << layer;
    using Modules = model::TrainableModel::RecomputeModules;
    const std::vector<std::tuple<std::string, bool, Modules, int64_t>> policies = {
        {"checkpointing", true, {}, 0},
        {"mlp", false, {.mlp = true}, 0},
        {"act", false, {.act = true}, 0},
        {"layernorm act", false, {.layernorm = true, .act = true}, 0},
        {"offload", false, {}, 100},
        {"offload act", false, {.act = true}, 100}};
    for (const auto& [name, checkpointing, modules, offload] : policies) {
      SCOPED_TRACE(name);
      tm.set_recompute_modules(modules);
      tm.set_offload_layers(offload);
      EXPECT_EQ(run(checkpointing, other), want);
      for (size_t i = 0; i < kept.size(); ++i) {
        EXPECT_EQ(std::memcmp(kept[i].raw(), other[i].raw(), kept[i].nbytes()), 0) << tm.parameters()[i].name;
      }
    }
    tm.set_recompute_modules({});
    tm.set_offload_layers(0);
  }
}

}  // namespace
}  // namespace swift::test
