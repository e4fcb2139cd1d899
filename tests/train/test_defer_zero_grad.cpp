// tests/train/test_defer_zero_grad.cpp — TrainableModel::defer_zero_grad (what the trainer calls after each update):
// full fine-tuning's linear weight gradients are not cleared, the next backward writes them (=) instead of adding.
// Against zero_grad on a twin model, over three AdamW steps (the second of two micro-batches: the first backward
// writes, the second adds), plain and with packed q/k/v (forced on the CPU: one weight-gradient product for q, k and
// v), on a grouped-query llama fixture and a qwen2 one with q/k/v biases and a tied head: the same loss, every
// gradient and every parameter bit for bit (BLAS with beta 0 writes what beta 1 adds onto zeros). With LoRA it is
// zero_grad: every gradient reads zero afterwards. Label unit.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/causal_lm.h"
#include "model/lora.h"
#include "model/training.h"
#include "ops/backends.h"
#include "train/optimizer.h"
#include "train/parallel_test_util.h"

namespace swift::test {
namespace {

// Element-wise equality (== : +0 and -0 are one value; a backward onto zeros and one written may differ in that only).
void expect_same_values(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int64_t differ = 0;
  for (int64_t i = 0; i < got.numel(); ++i) differ += got.item(i) == want.item(i) ? 0 : 1;
  EXPECT_EQ(differ, 0) << what << ": " << differ << " of " << got.numel() << " elements differ";
}

TEST(DeferZeroGrad, FullFineTuningGivesTheZeroGradBitsOverThreeSteps) {
  ops::init_backends();
  for (const std::string fixture : {"llama_gqa_llama3", "qwen2_tied_1kv"}) {
    for (bool packed : {false, true}) {
      SCOPED_TRACE(fixture + (packed ? " packed q/k/v" : " plain"));
      const std::string dir = std::string(SWIFT_FIXTURES_DIR) + "/golden/" + fixture;
      auto zeroed_lm = model::CausalLM::load(dir);
      auto deferred_lm = model::CausalLM::load(dir);
      model::TrainableModel zeroed(*zeroed_lm, model::TunerType::Full);
      model::TrainableModel deferred(*deferred_lm, model::TunerType::Full);
      zeroed.force_product_weights(packed);
      deferred.force_product_weights(packed);
      ops::AdamWConfig config;
      config.weight_decay = 0.01;
      train::AdamW zeroed_opt(zeroed.parameters(), config), deferred_opt(deferred.parameters(), config);
      const int64_t vocab = zeroed_lm->config().vocab_size;
      zeroed.zero_grad();
      deferred.zero_grad();
      for (int step = 0; step < 3; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        const int micro = step == 1 ? 2 : 1;
        double want = 0, got = 0;
        for (int m = 0; m < micro; ++m) {
          const model::MicroBatch b =
              random_micro_batch({19 + 3 * m, 11 + step}, vocab, static_cast<uint32_t>(4242 + 10 * step + m), 2);
          want += zeroed.forward_backward(b, 1.0f / 50.0f, 7, false).loss_sum;
          got += deferred.forward_backward(b, 1.0f / 50.0f, 7, false).loss_sum;
        }
        EXPECT_EQ(got, want);
        if (packed) {
          EXPECT_TRUE(deferred.packs_qkv(0));
        }
        ASSERT_EQ(zeroed.parameters().size(), deferred.parameters().size());
        for (size_t i = 0; i < zeroed.parameters().size(); ++i) {
          expect_same_values(deferred.parameters()[i].grad, zeroed.parameters()[i].grad,
                             "gradient of " + zeroed.parameters()[i].name);
        }
        zeroed_opt.step(1e-3);
        deferred_opt.step(1e-3);
        zeroed.zero_grad();
        deferred.defer_zero_grad();
      }
      for (size_t i = 0; i < zeroed.parameters().size(); ++i) {
        expect_same_values(deferred.parameters()[i].value, zeroed.parameters()[i].value,
                           "parameter " + zeroed.parameters()[i].name);
      }
    }
  }
}

TEST(DeferZeroGrad, IsZeroGradForLora) {
  ops::init_backends();
  auto lm = model::CausalLM::load(std::string(SWIFT_FIXTURES_DIR) + "/golden/llama_gqa_llama3");
  model::LoraSettings ls;
  ls.rank = 4;
  ls.seed = 3;
  model::LoraAdapters adapters = model::create_lora(lm->config(), ls, &lm->weights());
  model::TrainableModel tm(*lm, model::TunerType::Lora, std::move(adapters));
  const model::MicroBatch b = random_micro_batch({17, 9}, lm->config().vocab_size, 99, 2);
  tm.zero_grad();
  tm.forward_backward(b, 1.0f / 20.0f, 7, false);
  tm.defer_zero_grad();
  for (const model::Parameter& p : tm.parameters()) {
    expect_same_values(p.grad, Tensor::zeros(p.grad.shape(), DType::F32), "gradient of " + p.name);
  }
}

}  // namespace
}  // namespace swift::test
