// tests/model/test_golden_training.cpp — the training engine against transformers + PEFT
// (tests/fixtures/training/<case>, made by scripts/golden/make_training_fixtures.py; README there describes
// every tensor): the loss and every trainable gradient at the initial parameters, and 5-step AdamW runs with a
// cosine-with-warmup schedule and clipping, with gradient accumulation 1 and 3, on packed micro-batches.
//
// Cases cover LoRA, rsLoRA, DoRA (lora_magnitude_vector), modules_to_save (embed_tokens / lm_head copies, also on a
// tied model), and full fine-tuning with a config pad_token_id (nn.Embedding's padding_idx). Cases with DoRA or
// modules_to_save also hold PEFT's inference logits with the trained adapter (infer.logits).
//
// Tolerances (the fixture's own fp32-vs-fp64 noise is <= 2e-7 relative on losses, <= 1.1e-6 absolute on
// gradients; Adam amplifies noise where a gradient is near zero, so final parameters are compared by the
// relative L2 of their change, as the fixture README suggests). Inference logits as the forward golden tests.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "io/hf_checkpoint.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/golden_util.h"
#include "model/training.h"
#include "train/optimizer.h"
#include "train/scheduler.h"

namespace swift {
namespace {

constexpr double kLossRelTol = 1e-5;
constexpr double kGradNormRelTol = 1e-5;
constexpr double kGradMaxAbsTol = 1e-5;
constexpr double kGradRelL2Tol = 2e-5;
constexpr double kFinalDeltaRelL2TolLora = 2e-4;
constexpr double kFinalDeltaRelL2TolFull = 1e-3;
constexpr double kFinalMaxAbsTol = 2e-5;
constexpr double kInferMaxAbsTol = 1e-4;
constexpr double kInferRelL2Tol = 1e-5;

namespace fs = std::filesystem;

std::string training_root() { return std::string(SWIFT_FIXTURES_DIR) + "/training"; }

std::vector<std::string> list_cases() {
  std::vector<std::string> cases;
  if (!fs::exists(training_root())) return cases;
  for (const auto& e : fs::directory_iterator(training_root()))
    if (e.is_directory()) cases.push_back(e.path().filename().string());
  std::sort(cases.begin(), cases.end());
  return cases;
}

struct Case {
  io::SafetensorsFile file;
  std::map<std::string, std::string> meta;
  std::unique_ptr<model::CausalLM> model;
  model::TunerType tuner;
  std::string dir;

  explicit Case(const std::string& name)
      : file(io::SafetensorsFile::open(training_root() + "/" + name + "/expected.safetensors")),
        meta(file.metadata()),
        dir(training_root() + "/" + name) {
    const std::string base = meta.at("base_model");  // "tests/fixtures/golden/<arch>"
    const std::string base_dir = std::string(SWIFT_FIXTURES_DIR) + "/golden/" + fs::path(base).filename().string();
    model = load_base(base_dir);
    tuner = model::tuner_type_from_string(meta.at("tuner"));
  }
  // The base model, with the case's pad_token_id (the script overrides config.json's null as transformers'
  // from_pretrained(pad_token_id=...) does).
  std::unique_ptr<model::CausalLM> load_base(const std::string& base_dir) const {
    io::ModelConfig config = io::load_model_config(base_dir + "/config.json");
    if (meta.count("pad_token_id")) config.pad_token_id = std::stoll(meta.at("pad_token_id"));
    return model::CausalLM::from_weights(std::move(config), io::load_hf_weights(base_dir));
  }
  std::unique_ptr<model::TrainableModel> trainable() {
    model::LoraAdapters lora;
    if (tuner == model::TunerType::Lora) {
      lora = model::lora_from_peft(io::load_peft_adapter(dir + "/adapter_init"), model->config());
    }
    return std::make_unique<model::TrainableModel>(*model, tuner, std::move(lora));
  }
  model::MicroBatch batch(int k) {
    const std::string p = fmt::format("batch.{:02d}.", k);
    return {file.tensor(p + "input_ids"), file.tensor(p + "positions"), file.tensor(p + "cu_seqlens"),
            file.tensor(p + "targets")};
  }
  float scalar(const std::string& name, int64_t i = 0) { return static_cast<float>(file.tensor(name).item(i)); }
};

int64_t valid_targets(const model::MicroBatch& b) {
  int64_t n = 0;
  for (int64_t t = 0; t < b.labels.numel(); ++t) n += b.labels.item(t) != -100 ? 1 : 0;
  return n;
}

double rel(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

class GoldenTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTraining, LossAndEveryGradientAtInit) {
  Case c(GetParam());
  auto tm = c.trainable();
  const model::MicroBatch b = c.batch(0);
  const int64_t n = valid_targets(b);
  ASSERT_EQ(n, static_cast<int64_t>(c.file.tensor("grad_batch.num_tokens").item(0)));
  for (bool checkpointing : {true, false}) {
    tm->zero_grad();
    const model::StepStats s = tm->forward_backward(b, 1.0f / static_cast<float>(n), 0, checkpointing);
    EXPECT_EQ(s.tokens, n);
    EXPECT_LT(rel(s.loss_sum / n, c.scalar("grad_batch.loss")), kLossRelTol) << "checkpointing " << checkpointing;
    int64_t compared = 0;
    double max_abs = 0, worst_rel_l2 = 0;
    for (const model::Parameter& p : tm->parameters()) {
      ASSERT_TRUE(c.file.contains("grad." + p.name)) << "no reference gradient for " << p.name;
      const Tensor want = c.file.tensor("grad." + p.name);
      EXPECT_TRUE(golden::close(GetParam() + " grad " + p.name, p.grad, want, kGradMaxAbsTol, kGradRelL2Tol));
      double d2 = 0, w2 = 0;
      for (int64_t j = 0; j < want.numel() && j < p.grad.numel(); ++j) {
        const double d = p.grad.item(j) - want.item(j);
        max_abs = std::max(max_abs, std::abs(d));
        d2 += d * d;
        w2 += want.item(j) * want.item(j);
      }
      worst_rel_l2 = std::max(worst_rel_l2, std::sqrt(d2 / std::max(w2, 1e-300)));
      ++compared;
    }
    EXPECT_EQ(compared, std::stoll(c.meta.at("trainable_tensors")));
    if (checkpointing) {
      std::cout << "[training] " << GetParam() << " gradients: max abs " << max_abs << ", worst rel L2 "
                << worst_rel_l2 << "\n";
    }
  }
  // Checkpointing recomputes the same blocks: gradients are bit-identical with and without it, and when only the
  // first N blocks recompute (--recompute_num_layers: 0, 1 and more than there are layers).
  std::vector<Tensor> with_ckpt;
  tm->zero_grad();
  tm->forward_backward(b, 1.0f / static_cast<float>(n), 0, true);
  for (const auto& p : tm->parameters()) with_ckpt.push_back(p.grad.clone());
  auto expect_same = [&](const std::string& what) {
    for (size_t i = 0; i < with_ckpt.size(); ++i) {
      ASSERT_EQ(std::memcmp(with_ckpt[i].raw(), tm->parameters()[i].grad.raw(), with_ckpt[i].nbytes()), 0)
          << what << ": " << tm->parameters()[i].name;
    }
  };
  tm->zero_grad();
  tm->forward_backward(b, 1.0f / static_cast<float>(n), 0, false);
  expect_same("no checkpointing");
  for (int64_t layers : {0, 1, 100}) {
    tm->set_recompute_layers(layers);
    tm->zero_grad();
    tm->forward_backward(b, 1.0f / static_cast<float>(n), 0, true);
    expect_same("recompute_num_layers " + std::to_string(layers));
  }
  // The selective recompute (--recompute_modules) on the kept blocks: without checkpointing (every block), with the
  // first block recomputed whole, and with every block recomputed whole (nothing kept: no effect); mlp alone, mlp
  // limited to the first kept block, and layernorm + act (with and without mlp).
  using Modules = model::TrainableModel::RecomputeModules;
  const std::vector<std::pair<std::string, Modules>> policies = {
      {"mlp", {.mlp = true}},
      {"mlp in 1 layer", {.mlp = true, .mlp_layers = 1}},
      {"layernorm act", {.layernorm = true, .act = true}},
      {"layernorm act mlp", {.layernorm = true, .act = true, .mlp = true}}};
  for (const auto& [name, modules] : policies) {
    tm->set_recompute_modules(modules);
    for (const auto& [layers, checkpointing] :
         std::vector<std::pair<int64_t, bool>>{{-1, false}, {1, true}, {-1, true}}) {
      tm->set_recompute_layers(layers);
      tm->zero_grad();
      tm->forward_backward(b, 1.0f / static_cast<float>(n), 0, checkpointing);
      expect_same("recompute_modules " + name + ", recompute_num_layers " + std::to_string(layers) +
                  ", checkpointing " + std::to_string(checkpointing));
    }
  }
  tm->set_recompute_modules({});
  tm->set_recompute_layers(-1);
}

TEST_P(GoldenTraining, FiveStepRunsWithAccumulationOneAndThree) {
  for (const auto& [run, accum] : std::vector<std::pair<std::string, int>>{{"accum1", 1}, {"accum3", 3}}) {
    Case c(GetParam());
    auto tm = c.trainable();
    std::vector<Tensor> init;
    for (const auto& p : tm->parameters()) init.push_back(p.value.clone());
    ops::AdamWConfig config;
    config.beta1 = 0.9;
    config.beta2 = 0.999;
    config.eps = 1e-8;
    config.weight_decay = 0.1;
    train::AdamW adamw(tm->parameters(), config);
    const double peak = std::stod(c.meta.at("lr"));
    const train::LrSchedule schedule(train::ScheduleType::Cosine, peak, 5, 2);
    const double max_norm = c.scalar("run." + run + ".max_grad_norm");
    for (int s = 0; s < 5; ++s) {
      std::vector<model::MicroBatch> mbs;
      int64_t n = 0;
      for (int k = 0; k < accum; ++k) {
        mbs.push_back(c.batch(s * accum + k));
        n += valid_targets(mbs.back());
      }
      ASSERT_EQ(n, static_cast<int64_t>(c.file.tensor("run." + run + ".num_tokens").item(s)));
      tm->zero_grad();
      double loss_sum = 0;
      for (const auto& mb : mbs) loss_sum += tm->forward_backward(mb, 1.0f / static_cast<float>(n), 0, true).loss_sum;
      const float norm = train::clip_gradients(tm->parameters(), max_norm);
      EXPECT_LT(rel(loss_sum / n, c.scalar("run." + run + ".packed.loss", s)), kLossRelTol) << run << " step " << s;
      EXPECT_LT(rel(norm, c.scalar("run." + run + ".packed.grad_norm", s)), kGradNormRelTol) << run << " step " << s;
      EXPECT_NEAR(schedule.lr(s), c.scalar("run." + run + ".lr", s), 1e-12 + 1e-7 * peak);
      adamw.step(schedule.lr(s));
    }
    // Final parameters: the relative L2 of the change over all trainable elements, and a max abs bound.
    std::map<std::string, Tensor> expected;
    if (c.tuner == model::TunerType::Lora && run == "accum1") {
      expected = io::load_peft_adapter(c.dir + "/adapter_final").tensors;
    } else {
      for (const auto& p : tm->parameters()) expected[p.name] = c.file.tensor("final." + run + "." + p.name);
    }
    double diff2 = 0, delta2 = 0, max_abs = 0;
    for (size_t i = 0; i < tm->parameters().size(); ++i) {
      const model::Parameter& p = tm->parameters()[i];
      ASSERT_TRUE(expected.count(p.name)) << p.name;
      const Tensor& e = expected.at(p.name);
      for (int64_t j = 0; j < p.value.numel(); ++j) {
        const double got = p.value.item(j), want = e.item(j), start = init[i].item(j);
        diff2 += (got - want) * (got - want);
        delta2 += (want - start) * (want - start);
        max_abs = std::max(max_abs, std::abs(got - want));
      }
    }
    const double rel_l2 = std::sqrt(diff2 / std::max(delta2, 1e-300));
    const double tol = c.tuner == model::TunerType::Lora ? kFinalDeltaRelL2TolLora : kFinalDeltaRelL2TolFull;
    std::cout << "[training] " << GetParam() << " " << run << ": final delta rel L2 " << rel_l2 << ", max abs "
              << max_abs << "\n";
    EXPECT_LE(rel_l2, tol) << run;
    EXPECT_LE(max_abs, kFinalMaxAbsTol) << run;
    // The loss of batch 00 with the final parameters.
    const model::MicroBatch b0 = c.batch(0);
    const model::StepStats f = tm->evaluate(b0);
    EXPECT_LT(rel(f.loss_sum / f.tokens, c.scalar("run." + run + ".packed.final_loss")), kLossRelTol) << run;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTraining, ::testing::ValuesIn(list_cases()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenTraining);

TEST(GoldenTrainingFixtures, Present) { EXPECT_GE(list_cases().size(), 14u) << "run make_training_fixtures.py"; }

// Inference with the adapter PEFT trained (adapter_final: DoRA magnitudes and/or modules_to_save copies) gives
// PEFT's logits; the round trip through our writer keeps every tensor and the config fields that matter.
TEST_P(GoldenTraining, InferenceWithTheTrainedAdapterMatchesPeft) {
  Case c(GetParam());
  if (!c.file.contains("infer.logits")) GTEST_SKIP() << "no inference logits in this case (plain LoRA / full)";
  const io::PeftAdapter adapter = io::load_peft_adapter(c.dir + "/adapter_final");
  model::LoraAdapters lora = model::lora_from_peft(adapter, c.model->config());
  const model::MicroBatch b = c.batch(0);
  const Tensor expected = c.file.tensor("infer.logits");
  c.model->set_lora(lora);
  const Tensor logits = c.model->forward(b.ids, b.positions, b.cu_seqlens);
  EXPECT_TRUE(golden::close(GetParam() + " logits with the trained adapter", logits, expected, kInferMaxAbsTol,
                            kInferRelL2Tol));
  // The adapter matters: the base model is far from these logits.
  c.model->set_lora({});
  const Tensor base = c.model->forward(b.ids, b.positions, b.cu_seqlens);
  double diff = 0;
  for (int64_t i = 0; i < base.numel(); ++i) diff = std::max(diff, std::abs(base.item(i) - expected.item(i)));
  EXPECT_GT(diff, 100 * kInferMaxAbsTol);
  // Our writer: same tensor names and values, same use_dora / modules_to_save.
  const std::string out = ::testing::TempDir() + "/golden_training_roundtrip_" + GetParam();
  io::save_peft_adapter(out, model::lora_to_peft(lora, "base"));
  const io::PeftAdapter again = io::load_peft_adapter(out);
  ASSERT_EQ(again.tensors.size(), adapter.tensors.size());
  for (const auto& [key, t] : adapter.tensors) {
    ASSERT_TRUE(again.tensors.count(key)) << key;
    EXPECT_EQ(std::memcmp(again.tensors.at(key).raw(), t.raw(), t.nbytes()), 0) << key;
  }
  EXPECT_EQ(again.config.use_dora, adapter.config.use_dora);
  EXPECT_EQ(again.config.modules_to_save, adapter.config.modules_to_save);
  fs::remove_all(out);
}

TEST(Training, ShiftLabelsStaysInsideSequences) {
  const Tensor ids = Tensor::from_i32({6}, {10, 11, 12, 20, 21, 22});
  Tensor mask = Tensor::zeros({6}, DType::U8);
  for (int t : {1, 2, 4, 5}) mask.data<uint8_t>()[t] = 1;
  const Tensor labels = model::shift_labels(ids, mask, Tensor::from_i32({3}, {0, 3, 6}));
  const std::vector<int32_t> expected = {11, 12, -100, 21, 22, -100};
  for (int t = 0; t < 6; ++t) EXPECT_EQ(labels.item(t), expected[static_cast<size_t>(t)]) << t;
}

TEST(Training, WeightDecayGroupsFollowTrainer) {
  EXPECT_TRUE(train::weight_decay_applies("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(train::weight_decay_applies("base_model.model.model.layers.0.mlp.up_proj.lora_A.weight"));
  EXPECT_TRUE(train::weight_decay_applies("model.embed_tokens.weight"));
  EXPECT_FALSE(train::weight_decay_applies("model.layers.0.self_attn.q_proj.bias"));
  EXPECT_FALSE(train::weight_decay_applies("model.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(train::weight_decay_applies("model.layers.0.self_attn.q_norm.weight"));
  EXPECT_FALSE(train::weight_decay_applies("model.norm.weight"));
}

}  // namespace
}  // namespace swift
