// tests/train/test_trainer_resume.cpp — the Trainer end to end on a tiny golden model: the loss falls, the run
// directory holds logging.jsonl, curves and checkpoints (a LoRA checkpoint is a PEFT adapter), save_total_limit
// prunes, and resuming from checkpoint-N gives bit-identical losses to the run that never stopped (CPU),
// for LoRA with dropout and for full fine-tuning, with gradient accumulation and packing.
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "data/loader.h"
#include "data/pipeline.h"
#include "io/peft_adapter.h"
#include "model/causal_lm.h"
#include "model/training.h"
#include "train/run_dir.h"
#include "train/train_test_data.h"
#include "train/trainer.h"

namespace swift {
namespace {

namespace fs = std::filesystem;

using test::random_dataset;

struct RunOutput {
  std::vector<double> losses;  // per step, from logging.jsonl (logging_steps 1)
  train::TrainResult result;
  std::string run_dir;
};

RunOutput run(model::TunerType tuner, const std::string& out_dir, int64_t max_steps, const std::string& resume,
              bool packing) {
  auto lm = model::CausalLM::load(std::string(SWIFT_FIXTURES_DIR) + "/golden/llama_gqa_llama3");
  auto train_set = random_dataset(lm->config().vocab_size, 40, 5);
  auto val_set = random_dataset(lm->config().vocab_size, 6, 9);
  model::LoraAdapters lora;
  if (tuner == model::TunerType::Lora) {
    model::LoraSettings s;
    s.rank = 4;
    s.dropout = 0.1;  // dropout on: masks must be reproduced after the resume
    s.seed = 3;
    lora = model::create_lora(lm->config(), s);
  }
  model::TrainableModel tm(*lm, tuner, std::move(lora));
  data::LoaderOptions lo;
  lo.batch_size = 3;
  lo.seed = 11;
  lo.num_workers = 1;
  std::shared_ptr<const data::PackPlan> plan = packing ? data::make_pack_plan(*train_set, 40) : nullptr;
  data::DataLoader loader(train_set, lo, plan);
  train::TrainerConfig c;
  c.run_dir = resume.empty() ? train::create_run_dir(out_dir) : fs::path(resume).parent_path().string();
  c.max_steps = max_steps;
  c.gradient_accumulation_steps = 2;
  c.learning_rate = tuner == model::TunerType::Lora ? 5e-3 : 1e-3;
  c.adam.beta1 = 0.9;
  c.adam.beta2 = 0.95;
  c.adam.eps = 1e-8;
  c.adam.weight_decay = 0.1;
  c.warmup_ratio = 0.1;
  c.logging_steps = 1;
  c.save_steps = 3;
  c.eval_steps = 3;
  c.save_total_limit = 2;
  c.seed = 7;
  c.resume_from_checkpoint = resume;
  c.args_json = {{"note", "test"}};
  c.model_config_json = {{"model_type", "llama"}};
  c.base_model_name_or_path = "tiny";
  train::Trainer trainer(c, tm, loader, val_set);
  RunOutput out;
  out.result = trainer.train();
  out.run_dir = c.run_dir;
  std::ifstream in(fs::path(c.run_dir) / "logging.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.losses.push_back(j["loss"].get<double>());
  }
  return out;
}

class TrainerResume : public ::testing::TestWithParam<std::tuple<model::TunerType, bool>> {};

TEST_P(TrainerResume, LossFallsAndResumeIsBitIdentical) {
  const auto [tuner, packing] = GetParam();
  const fs::path root = fs::path(testing::TempDir()) /
                        ("swift_trainer_" + std::to_string(static_cast<int>(tuner)) + (packing ? "_packed_" : "_") +
                         std::to_string(::getpid()));  // per process: concurrent runs of this test never share it
  fs::remove_all(root);
  const RunOutput full = run(tuner, (root / "a").string(), 9, "", packing);
  ASSERT_EQ(full.losses.size(), 9u);
  EXPECT_LT(full.losses.back(), full.losses.front()) << "the loss should fall on a learnable pattern";
  // save_steps 3, limit 2: checkpoints 6 and 9 remain (3 pruned), plus the best when it differs.
  EXPECT_TRUE(fs::exists(fs::path(full.run_dir) / "checkpoint-9"));
  EXPECT_TRUE(fs::exists(fs::path(full.run_dir) / "checkpoint-6"));
  EXPECT_TRUE(fs::exists(fs::path(full.run_dir) / "images" / "train_loss.svg"));
  EXPECT_TRUE(fs::exists(fs::path(full.run_dir) / "images" / "eval_loss.svg"));
  if (tuner == model::TunerType::Lora) {
    const io::PeftAdapter a = io::load_peft_adapter((fs::path(full.run_dir) / "checkpoint-9").string());
    EXPECT_EQ(a.config.r, 4);
  } else {
    EXPECT_TRUE(fs::exists(fs::path(full.run_dir) / "checkpoint-9" / "model.safetensors"));
  }

  // A second run stopped at step 6, then resumed from its checkpoint-6 to step 9.
  const RunOutput first = run(tuner, (root / "b").string(), 9, "", packing);
  const std::string ckpt6 = (fs::path(first.run_dir) / "checkpoint-6").string();
  // Re-run from checkpoint-6 into a copy of that run directory so the original stays untouched.
  const fs::path resumed_dir = root / "c" / "run";
  fs::create_directories(resumed_dir);
  fs::copy(ckpt6, resumed_dir / "checkpoint-6", fs::copy_options::recursive);
  const RunOutput resumed = run(tuner, "", 9, (resumed_dir / "checkpoint-6").string(), packing);
  ASSERT_EQ(resumed.losses.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(resumed.losses[i], full.losses[6 + i]) << "step " << 7 + i << " differs after the resume";
  }
  fs::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Tuners, TrainerResume,
                         ::testing::Values(std::make_tuple(model::TunerType::Lora, false),
                                           std::make_tuple(model::TunerType::Lora, true),
                                           std::make_tuple(model::TunerType::Full, false)));

}  // namespace
}  // namespace swift
