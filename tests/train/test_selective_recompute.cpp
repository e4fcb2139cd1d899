// tests/train/test_selective_recompute.cpp — the selective recompute (TrainableModel::set_recompute_modules, swift
// sft --recompute_modules layernorm / act / mlp) with LoRA dropout on: the same loss and gradients bit for bit as
// keeping everything (the recompute draws the same masks), with and without block checkpointing (whose recompute skips
// the block's down projection output, LoRA; DoRA makes it), and a lower
// activation peak: at least the dropped tensors of every kept layer but one (mlp: 3 x T x intermediate_size F32 on
// the CPU; layernorm + act: 2 x T x hidden + T x intermediate_size); block recompute (first block of two) peaks below
// keeping everything. Activation offloading (set_offload_layers, --cpu_offloading_num_layers) on a 6-layer model: the
// same bits under every combination with block and selective recompute, and the offloaded blocks' gate and up off the
// activation peak. The golden fixtures' own check of every policy (dropout 0, LoRA / DoRA / full) is
// in tests/model/test_golden_training.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "model/causal_lm.h"
#include "model/lora.h"
#include "model/training.h"
#include "ops/backends.h"
#include "train/parallel_test_util.h"

namespace swift::test {
namespace {

// Three packed sequences of 29, 21 and 14 tokens with the labels of the next token (the first two of each ignored).
model::MicroBatch micro_batch(int64_t vocab) {
  const std::vector<int32_t> lengths = {29, 21, 14};
  std::vector<int32_t> ids, positions, cu = {0}, labels;
  uint32_t x = 12345;
  for (int32_t len : lengths) {
    for (int32_t t = 0; t < len; ++t) {
      x = x * 1664525u + 1013904223u;
      ids.push_back(static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab)));
      positions.push_back(t);
    }
    cu.push_back(cu.back() + len);
  }
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) {
      labels.push_back(t + 1 < cu[s + 1] && t - cu[s] >= 2 ? ids[static_cast<size_t>(t) + 1] : -100);
    }
  }
  const auto n = static_cast<int64_t>(ids.size());
  return {Tensor::from_i32({n}, ids), Tensor::from_i32({n}, positions),
          Tensor::from_i32({static_cast<int64_t>(cu.size())}, cu), Tensor::from_i32({n}, labels)};
}

struct Result {
  double loss_sum = 0;
  std::vector<Tensor> grads;
  int64_t activation_peak = 0;  // above the activations held before the step
};

Result step(model::TrainableModel& tm, const model::MicroBatch& b, bool checkpointing) {
  tm.zero_grad();
  memory_reset_peaks(0);
  constexpr int kActivations = static_cast<int>(MemoryCategory::Activations);
  const int64_t before = memory_stats(0).current[kActivations];
  Result r;
  r.loss_sum = tm.forward_backward(b, 1.0f / 50.0f, 777, checkpointing).loss_sum;
  r.activation_peak = memory_stats(0).peak[kActivations] - before;  // this step's high-water mark
  for (const model::Parameter& p : tm.parameters()) r.grads.push_back(p.grad.clone());
  return r;
}

TEST(SelectiveRecompute, SameGradientsWithDropoutAndLessActivationMemory) {
  ops::init_backends();
  auto lm = model::CausalLM::load(std::string(SWIFT_FIXTURES_DIR) + "/golden/llama_gqa_llama3");
  const io::ModelConfig& c = lm->config();
  for (bool dora : {false, true}) {
    SCOPED_TRACE(dora ? "DoRA" : "LoRA");
    model::LoraSettings ls;
    ls.rank = 4;
    ls.dropout = 0.25;
    ls.seed = 5;
    ls.use_dora = dora;
    model::LoraAdapters adapters = model::create_lora(c, ls, &lm->weights());
    uint32_t x = 99;  // B = 0 at init would zero A's gradient and the dx term: random B reaches every path
    for (auto& layer : adapters.layers) {
      for (model::LoraLinear& ad : layer) {
        if (!ad.b.defined()) continue;
        float* v = ad.b.data<float>();
        for (int64_t i = 0; i < ad.b.numel(); ++i) {
          x = x * 1664525u + 1013904223u;
          v[i] = 0.02f * (static_cast<float>(x >> 8) / 16777216.0f - 0.5f);
        }
      }
    }
    model::TrainableModel tm(*lm, model::TunerType::Lora, std::move(adapters));
    const model::MicroBatch b = micro_batch(c.vocab_size);
    const int64_t tokens = b.ids.numel();
    int64_t keep_everything_peak = 0;
    Result no_checkpointing;
    for (const auto& [layers, checkpointing] :
         std::vector<std::pair<int64_t, bool>>{{-1, false}, {1, true}}) {
      SCOPED_TRACE("recompute_num_layers " + std::to_string(layers) + ", checkpointing " +
                   std::to_string(checkpointing));
      tm.set_recompute_layers(layers);
      tm.set_recompute_modules({});
      const Result keep = step(tm, b, checkpointing);
      if (!checkpointing) {
        no_checkpointing = keep;
      } else {  // the recomputed block (made again without its down projection's output): the same bits
        EXPECT_EQ(keep.loss_sum, no_checkpointing.loss_sum);
        ASSERT_EQ(keep.grads.size(), no_checkpointing.grads.size());
        for (size_t i = 0; i < keep.grads.size(); ++i) {
          EXPECT_EQ(std::memcmp(keep.grads[i].raw(), no_checkpointing.grads[i].raw(), keep.grads[i].nbytes()), 0)
              << "checkpointing: " << tm.parameters()[i].name;
        }
      }
      // The kept blocks (all without checkpointing, the last one with recompute_num_layers 1 of 2) hold none of the
      // dropped tensors after the forward; the backward makes one block's again at a time.
      const int64_t kept = checkpointing ? c.num_hidden_layers - layers : c.num_hidden_layers;
      const int64_t one_mlp = 3 * tokens * c.intermediate_size * 4;
      const int64_t one_norms_act = (2 * tokens * c.hidden_size + tokens * c.intermediate_size) * 4;
      using Modules = model::TrainableModel::RecomputeModules;
      for (const auto& [name, modules, dropped] :
           std::vector<std::tuple<std::string, Modules, int64_t>>{{"mlp", {.mlp = true}, one_mlp},
                                                                  {"layernorm act", {.layernorm = true, .act = true},
                                                                   one_norms_act},
                                                                  {"layernorm act mlp",
                                                                   {.layernorm = true, .act = true, .mlp = true},
                                                                   one_mlp + 2 * tokens * c.hidden_size * 4}}) {
        SCOPED_TRACE(name);
        tm.set_recompute_modules(modules);
        const Result selective = step(tm, b, checkpointing);
        EXPECT_EQ(keep.loss_sum, selective.loss_sum);
        ASSERT_EQ(keep.grads.size(), selective.grads.size());
        for (size_t i = 0; i < keep.grads.size(); ++i) {
          EXPECT_EQ(std::memcmp(keep.grads[i].raw(), selective.grads[i].raw(), keep.grads[i].nbytes()), 0)
              << tm.parameters()[i].name;
        }
        EXPECT_LE(selective.activation_peak, keep.activation_peak - (kept - 1) * dropped)
            << "peak " << selective.activation_peak << " vs " << keep.activation_peak << " (one layer's: " << dropped
            << ")";
        if (kept > 1) {
          EXPECT_LT(selective.activation_peak, keep.activation_peak);
        }
      }
      // Block recompute frees a recomputed block's forward state right after its forward: the first block's
      // activations are gone while the second runs, so the peak is below keeping everything.
      if (!checkpointing) keep_everything_peak = keep.activation_peak;
      if (checkpointing) {
        EXPECT_LT(keep.activation_peak, keep_everything_peak);
      }
    }
    tm.set_recompute_modules({});
    tm.set_recompute_layers(-1);
  }
}


TEST(ActivationOffload, SameGradientsAndTheOffloadedMlpOffThePeak) {
  ops::init_backends();
  TinyModelSpec spec;
  spec.layers = 6;
  spec.intermediate = 72;
  auto lm = tiny_model(spec);
  const io::ModelConfig& c = lm->config();
  model::LoraAdapters lora = random_lora(c);
  lora.dropout = 0.25f;
  model::TrainableModel tm(*lm, model::TunerType::Lora, std::move(lora));
  const model::MicroBatch b = random_micro_batch({29, 21, 14}, c.vocab_size, 8);
  const int64_t tokens = b.ids.numel();
  const int64_t one_mlp = 2 * tokens * c.intermediate_size * 4;  // gate and up, F32
  using Modules = model::TrainableModel::RecomputeModules;
  struct Policy {
    std::string name;
    bool checkpointing;
    int64_t recompute_layers;
    Modules modules;
    int64_t offload;
    int64_t offloaded;  // blocks whose gate and up leave: candidates are kept, MLP kept, not the last two
  };
  const std::vector<Policy> policies = {
      {"offload 2", false, -1, {}, 2, 2},
      {"offload all", false, -1, {}, 100, 4},
      {"offload 2 + layernorm act", false, -1, {.layernorm = true, .act = true}, 2, 2},
      {"offload all + mlp in 1 layer", false, -1, {.mlp = true, .mlp_layers = 1}, 100, 3},
      {"offload all + 1 block recomputed", true, 1, {}, 100, 3},
      {"offload all + every block recomputed", true, -1, {}, 100, 0}};
  for (const Policy& p : policies) {
    SCOPED_TRACE(p.name);
    tm.set_recompute_layers(p.recompute_layers);
    tm.set_recompute_modules(p.modules);
    tm.set_offload_layers(0);
    const Result keep = step(tm, b, p.checkpointing);
    tm.set_offload_layers(p.offload);
    for (int repeat = 0; repeat < 2; ++repeat) {  // the second step reuses the host buffers
      const Result off = step(tm, b, p.checkpointing);
      EXPECT_EQ(keep.loss_sum, off.loss_sum);
      ASSERT_EQ(keep.grads.size(), off.grads.size());
      for (size_t i = 0; i < keep.grads.size(); ++i) {
        EXPECT_EQ(std::memcmp(keep.grads[i].raw(), off.grads[i].raw(), keep.grads[i].nbytes()), 0)
            << tm.parameters()[i].name;
      }
      // The backward fetches two blocks ahead: at most one offloaded block is back while the later ones still hold
      // theirs.
      EXPECT_LE(off.activation_peak, keep.activation_peak - std::max<int64_t>(0, p.offloaded - 1) * one_mlp)
          << "peak " << off.activation_peak << " vs " << keep.activation_peak << " (one MLP: " << one_mlp << ")";
    }
    EXPECT_GE(tm.offload_host_bytes(), p.offloaded * one_mlp);  // buffers of earlier policies' slots stay too
  }
  tm.set_offload_layers(0);
  tm.set_recompute_modules({});
  tm.set_recompute_layers(-1);
}

}  // namespace
}  // namespace swift::test
