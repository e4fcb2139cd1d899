// tests/train/test_loss_scaler.cpp — fp16 dynamic loss scaling (train/loss_scaler.h): GradScaler's update rule, its
// checkpoint state, and the trainer with the scaler on a tiny golden model on the CPU (F32):
//  - with a power-of-two scale and no overflow, the run gives the bits of the run without the scaler (losses and
//    final parameters), also across a growth of the scale;
//  - an overflow injected into the gradients of step k skips exactly that step (parameters and AdamW steps unchanged,
//    the LR schedule not advanced) and halves the scale; growth resumes after growth_interval clean steps;
//  - resuming from a checkpoint continues with the saved scale and gives the bits of the run that never stopped.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "core/error.h"
#include "data/loader.h"
#include "model/causal_lm.h"
#include "model/training.h"
#include "train/loss_scaler.h"
#include "train/run_dir.h"
#include "train/trainer.h"
#include "train/train_test_data.h"

namespace swift {
namespace {

namespace fs = std::filesystem;
using test::random_dataset;

TEST(LossScaler, FollowsGradScalerUpdateRule) {
  train::LossScaler s;  // torch defaults
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.inverse_scale(), 1.0f / 65536.0f);
  EXPECT_EQ(s.config().growth_interval, 2000);
  for (int i = 0; i < 1999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.state().growth_tracker, 1999);
  s.update(false);  // the 2000th clean step doubles the scale
  EXPECT_EQ(s.scale(), 131072.0f);
  EXPECT_EQ(s.state().growth_tracker, 0);
  s.update(false);
  s.update(true);  // an overflow halves it and restarts the count
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.state().growth_tracker, 0);
  // Growth that would overflow fp32 keeps the scale (torch checks isfinite on the grown value).
  train::LossScaler big({std::ldexp(1.0f, 127), 2.0f, 0.5f, 1});
  big.update(false);
  EXPECT_EQ(big.scale(), std::ldexp(1.0f, 127));
  EXPECT_EQ(big.state().growth_tracker, 0);
  EXPECT_THROW(train::LossScaler({0.0f, 2.0f, 0.5f, 10}), Error);
  EXPECT_THROW(train::LossScaler({1024.0f, 2.0f, 1.5f, 10}), Error);
  EXPECT_THROW(train::LossScaler({1024.0f, 2.0f, 0.5f, 0}), Error);
}

TEST(LossScaler, StateRoundTripsThroughJsonAndRejectsBadValues) {
  const train::LossScalerState st{4096.0f, 17};
  const train::LossScalerState back = train::LossScalerState::from_json(st.to_json(), "x");
  EXPECT_EQ(back.scale, 4096.0f);
  EXPECT_EQ(back.growth_tracker, 17);
  EXPECT_THROW(train::LossScalerState::from_json({{"scale", 2.0}}, "trainer_state.json"), Error);
  EXPECT_THROW(train::LossScalerState::from_json({{"scale", -2.0}, {"growth_tracker", 0}}, "trainer_state.json"), Error);
}

struct ScalerRun {
  bool loss_scaling = false;
  train::LossScalerConfig scaler;
  int64_t overflow_step = -1;  // inject an inf into one gradient of this 1-based step
  int64_t max_steps = 6;
  int64_t save_steps = 0;
  std::string resume;
};

struct RunOutput {
  std::vector<double> losses, lrs;
  std::vector<Tensor> params;  // final trainable parameters
  std::vector<std::vector<Tensor>> params_after;  // after each step (on_step)
  train::TrainResult result;
  std::string run_dir;
};

RunOutput run(const ScalerRun& r, const std::string& out_dir) {
  auto lm = model::CausalLM::load(std::string(SWIFT_FIXTURES_DIR) + "/golden/llama_gqa_llama3");
  auto train_set = random_dataset(lm->config().vocab_size, 30, 5);
  model::LoraSettings ls;
  ls.rank = 4;
  ls.dropout = 0.1;
  ls.seed = 3;
  model::TrainableModel tm(*lm, model::TunerType::Lora, model::create_lora(lm->config(), ls));
  data::LoaderOptions lo;
  lo.batch_size = 3;
  lo.seed = 11;
  lo.num_workers = 1;
  data::DataLoader loader(train_set, lo, nullptr);
  train::TrainerConfig c;
  c.run_dir = r.resume.empty() ? train::create_run_dir(out_dir) : fs::path(r.resume).parent_path().string();
  c.max_steps = r.max_steps;
  c.gradient_accumulation_steps = 2;
  c.learning_rate = 5e-3;
  c.warmup_ratio = 0.2;
  c.logging_steps = 1;
  c.save_steps = r.save_steps;
  c.seed = 7;
  c.resume_from_checkpoint = r.resume;
  c.loss_scaling = r.loss_scaling;
  c.loss_scaler = r.scaler;
  c.args_json = {{"note", "test"}};
  c.base_model_name_or_path = "tiny";
  RunOutput out;
  c.on_gradients = [&](int64_t step, std::vector<model::Parameter>& params) {
    if (step == r.overflow_step) params[1].grad.data<float>()[0] = std::numeric_limits<float>::infinity();
  };
  c.on_step = [&](int64_t, const std::vector<data::Batch>&, int64_t, double) {
    std::vector<Tensor> now;
    for (const model::Parameter& p : tm.parameters()) now.push_back(p.value.clone());
    out.params_after.push_back(std::move(now));
  };
  train::Trainer trainer(c, tm, loader, nullptr);
  out.result = trainer.train();
  out.run_dir = c.run_dir;
  for (const model::Parameter& p : tm.parameters()) out.params.push_back(p.value.clone());
  std::ifstream in(fs::path(c.run_dir) / "logging.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) {
      out.losses.push_back(j["loss"].get<double>());
      out.lrs.push_back(j["learning_rate"].get<double>());
    }
  }
  return out;
}

bool same_bits(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].nbytes() != b[i].nbytes() || std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()) != 0) return false;
  }
  return true;
}

fs::path fresh_root(const std::string& name) {
  const fs::path root = fs::path(testing::TempDir()) / ("swift_loss_scaler_" + name);
  fs::remove_all(root);
  return root;
}

TEST(TrainerLossScaling, WithoutOverflowGivesTheBitsOfTheUnscaledRun) {
  const fs::path root = fresh_root("exact");
  const RunOutput plain = run({}, (root / "plain").string());
  ScalerRun scaled;
  scaled.loss_scaling = true;
  scaled.scaler.growth_interval = 2;  // the scale grows twice in 6 steps: still powers of two
  const RunOutput with = run(scaled, (root / "scaled").string());
  ASSERT_EQ(plain.losses.size(), 6u);
  EXPECT_EQ(with.losses, plain.losses);
  EXPECT_EQ(with.lrs, plain.lrs);
  EXPECT_TRUE(same_bits(with.params, plain.params));
  EXPECT_EQ(with.result.skipped_steps, 0);
  EXPECT_EQ(with.result.loss_scale, 65536.0f * 8);
  EXPECT_EQ(plain.result.loss_scale, 0.0f);
}

TEST(TrainerLossScaling, OverflowSkipsExactlyThatStepAndBacksOff) {
  const fs::path root = fresh_root("overflow");
  ScalerRun r;
  r.loss_scaling = true;
  r.scaler.growth_interval = 2;
  r.overflow_step = 3;
  r.max_steps = 5;
  r.save_steps = 5;
  const RunOutput out = run(r, (root / "a").string());
  EXPECT_EQ(out.result.global_step, 5);
  EXPECT_EQ(out.result.skipped_steps, 1);
  // Steps 1-2 grow the scale once (x2), step 3 halves it, steps 4-5 grow it again: 2 x the initial scale.
  EXPECT_EQ(out.result.loss_scale, 65536.0f * 2);
  ASSERT_EQ(out.params_after.size(), 5u);
  EXPECT_TRUE(same_bits(out.params_after[2], out.params_after[1])) << "the overflowed step must not update";
  EXPECT_FALSE(same_bits(out.params_after[3], out.params_after[2])) << "the next step updates again";
  EXPECT_FALSE(same_bits(out.params_after[1], out.params_after[0]));
  // The LR schedule did not advance on the skipped step: step 4 runs at step 3's learning rate.
  ASSERT_EQ(out.lrs.size(), 5u);
  EXPECT_EQ(out.lrs[3], out.lrs[2]);
  EXPECT_NE(out.lrs[2], out.lrs[1]);
  // Checkpoint: AdamW took 4 steps; the scaler state and the skipped count are saved.
  const fs::path ckpt = fs::path(out.run_dir) / "checkpoint-5";
  std::ifstream in(ckpt / "trainer_state.json");
  const nlohmann::json state = nlohmann::json::parse(in);
  EXPECT_EQ(state["skipped_steps"].get<int64_t>(), 1);
  EXPECT_EQ(state["loss_scaler"]["scale"].get<float>(), 65536.0f * 2);
  EXPECT_EQ(state["loss_scaler"]["growth_tracker"].get<int64_t>(), 0);
  // Without the scaler, the same injected inf stops the run (the non-finite gradient policy).
  ScalerRun plain = r;
  plain.loss_scaling = false;
  EXPECT_THROW(run(plain, (root / "b").string()), Error);
}

TEST(TrainerLossScaling, ResumeContinuesWithTheSavedScale) {
  const fs::path root = fresh_root("resume");
  ScalerRun r;
  r.loss_scaling = true;
  r.scaler.growth_interval = 3;
  r.overflow_step = 2;
  r.max_steps = 7;
  r.save_steps = 4;
  const RunOutput full = run(r, (root / "a").string());
  // Step 2 overflows (scale / 2); clean steps 3-5 grow it back at step 5.
  EXPECT_EQ(full.result.skipped_steps, 1);
  EXPECT_EQ(full.result.loss_scale, 65536.0f);
  // Resume from checkpoint-4 (scale 2^15, tracker 2): the next clean step grows the scale, as in the full run.
  ScalerRun resumed = r;
  resumed.resume = (fs::path(full.run_dir) / "checkpoint-4").string();
  resumed.overflow_step = -1;  // the overflow was before the checkpoint
  std::ifstream in(fs::path(resumed.resume) / "trainer_state.json");
  const nlohmann::json state = nlohmann::json::parse(in);
  EXPECT_EQ(state["loss_scaler"]["scale"].get<float>(), 32768.0f);
  EXPECT_EQ(state["loss_scaler"]["growth_tracker"].get<int64_t>(), 2);
  // The resumed run appends to the same logging.jsonl: copy the run directory first so the full run's log stays.
  const fs::path copy = root / "copy";
  fs::create_directories(copy);
  fs::copy(full.run_dir, copy / fs::path(full.run_dir).filename(), fs::copy_options::recursive);
  resumed.resume = (copy / fs::path(full.run_dir).filename() / "checkpoint-4").string();
  const RunOutput cont = run(resumed, "");
  EXPECT_EQ(cont.result.global_step, 7);
  EXPECT_EQ(cont.result.skipped_steps, 1);
  EXPECT_EQ(cont.result.loss_scale, full.result.loss_scale);
  EXPECT_TRUE(same_bits(cont.params, full.params));
  ASSERT_GE(cont.losses.size(), 3u);
  EXPECT_EQ(std::vector<double>(cont.losses.end() - 3, cont.losses.end()),
            std::vector<double>(full.losses.end() - 3, full.losses.end()));
}

}  // namespace
}  // namespace swift
