// tests/train/test_trainer_epochs.cpp — epoch accounting as transformers' Trainer does it: ceil(L / G) optimizer
// steps per epoch, the last step of an epoch takes only the micro-batches left (loss normalised over their
// tokens), every epoch sees its data exactly once, max_steps repeats epochs, a streamed source (unknown length)
// needs max_steps, and a resume from the checkpoint after a short step continues bit-identically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "data/loader.h"
#include "model/causal_lm.h"
#include "model/training.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace swift {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const data::TokenizedDataset> sequences(int64_t vocab, int n) {
  std::mt19937 rng(21);
  data::TokenizedDataset::Parts parts;
  for (int i = 0; i < n; ++i) {
    const int len = 5 + i;  // distinct lengths: distinct target-token counts per sequence
    for (int t = 0; t < len; ++t) {
      parts.ids.push_back(static_cast<int32_t>(rng() % vocab));
      parts.loss_mask.push_back(t >= 1 ? 1 : 0);
    }
    parts.offsets.push_back(static_cast<int64_t>(parts.ids.size()));
    parts.sample_index.push_back(i);
    parts.label.push_back(-1);
  }
  return std::make_shared<const data::TokenizedDataset>(data::TokenizedDataset::from_parts(std::move(parts)));
}

// A source that hides its length, as a streamed dataset does.
class UnknownLength : public data::BatchSource {
 public:
  explicit UnknownLength(data::DataLoader& inner) : inner_(inner) {}
  int64_t steps_per_epoch() const override { return -1; }
  void start(int64_t epoch, int64_t step) override { inner_.start(epoch, step); }
  std::optional<data::Batch> next() override { return inner_.next(); }
  int64_t epoch() const override { return inner_.epoch(); }
  int64_t step() const override { return inner_.step(); }

 private:
  data::DataLoader& inner_;
};

struct Step {
  std::vector<int64_t> seqs;   // sequences of the step's micro-batches
  std::vector<int64_t> epochs; // the epoch of each micro-batch
  size_t micro = 0;
  int64_t tokens = 0, expected_tokens = 0;
  double loss = 0;
};

struct EpochRun {
  std::vector<Step> steps;
  int64_t max_steps = 0, updates_per_epoch = 0, num_epochs = 0;
  std::vector<double> logged_epochs;
  std::string run_dir;
};

EpochRun train(const fs::path& out, double epochs, int64_t max_steps, bool hide_length, const std::string& resume = "",
          int64_t save_steps = 0) {
  auto lm = model::CausalLM::load(std::string(SWIFT_FIXTURES_DIR) + "/golden/llama_gqa_llama3");
  auto data = sequences(lm->config().vocab_size, 5);
  model::TrainableModel tm(*lm, model::TunerType::Full, {});
  data::LoaderOptions lo;
  lo.batch_size = 1;  // 5 micro-batches per epoch
  lo.seed = 3;
  data::DataLoader loader(data, lo);
  UnknownLength hidden(loader);
  train::TrainerConfig c;
  c.run_dir = resume.empty() ? train::create_run_dir(out.string()) : fs::path(resume).parent_path().string();
  c.num_train_epochs = epochs;
  c.max_steps = max_steps;
  c.gradient_accumulation_steps = 2;
  c.learning_rate = 1e-3;
  c.logging_steps = 1;
  c.save_steps = save_steps;
  c.seed = 5;
  c.resume_from_checkpoint = resume;
  c.model_config_json = {{"model_type", "llama"}};
  EpochRun run;
  c.on_step = [&](int64_t, const std::vector<data::Batch>& micro, int64_t tokens, double loss) {
    Step s;
    s.micro = micro.size();
    s.tokens = tokens;
    s.loss = loss;
    for (const auto& b : micro) {
      s.expected_tokens += b.num_target_tokens;
      s.seqs.insert(s.seqs.end(), b.sequences.begin(), b.sequences.end());
      s.epochs.push_back(b.epoch);
    }
    run.steps.push_back(s);
  };
  data::BatchSource& source = hide_length ? static_cast<data::BatchSource&>(hidden) : loader;
  train::Trainer trainer(c, tm, source, nullptr);
  run.max_steps = trainer.max_steps();
  run.updates_per_epoch = trainer.updates_per_epoch();
  run.num_epochs = trainer.num_epochs();
  trainer.train();
  run.run_dir = c.run_dir;
  std::ifstream in(fs::path(c.run_dir) / "logging.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) run.logged_epochs.push_back(j["epoch"].get<double>());
  }
  return run;
}

void expect_each_epoch_sees_its_data_once(const EpochRun& run, size_t steps_per_epoch) {
  for (size_t first = 0; first + steps_per_epoch <= run.steps.size(); first += steps_per_epoch) {
    std::vector<int64_t> seen;
    for (size_t s = first; s < first + steps_per_epoch; ++s) {
      seen.insert(seen.end(), run.steps[s].seqs.begin(), run.steps[s].seqs.end());
      for (int64_t e : run.steps[s].epochs) EXPECT_EQ(e, static_cast<int64_t>(first / steps_per_epoch)) << "step " << s + 1;
    }
    std::sort(seen.begin(), seen.end());
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2, 3, 4})) << "epoch starting at step " << first + 1;
  }
}

TEST(TrainerEpochs, LastStepOfAnEpochTakesOnlyWhatIsLeft) {
  const fs::path root = fs::path(testing::TempDir()) / "swift_trainer_epochs";
  fs::remove_all(root);
  // 5 micro-batches, accumulation 2, 2 epochs: 3 steps per epoch (2 + 2 + 1), 6 in all.
  const EpochRun run = train(root / "a", 2, -1, false);
  EXPECT_EQ(run.updates_per_epoch, 3);
  EXPECT_EQ(run.max_steps, 6);
  EXPECT_EQ(run.num_epochs, 2);
  ASSERT_EQ(run.steps.size(), 6u);
  const std::vector<size_t> micro = {2, 2, 1, 2, 2, 1};
  for (size_t s = 0; s < 6; ++s) {
    EXPECT_EQ(run.steps[s].micro, micro[s]) << "step " << s + 1;
    // The loss is normalised over the target tokens of the micro-batches the step actually has.
    EXPECT_EQ(run.steps[s].tokens, run.steps[s].expected_tokens) << "step " << s + 1;
    EXPECT_TRUE(std::isfinite(run.steps[s].loss));
  }
  expect_each_epoch_sees_its_data_once(run, 3);
  // transformers logs epoch = epochs done + the fraction of the current one.
  ASSERT_EQ(run.logged_epochs.size(), 6u);
  EXPECT_DOUBLE_EQ(run.logged_epochs[0], 0.4);
  EXPECT_DOUBLE_EQ(run.logged_epochs[2], 1.0);
  EXPECT_DOUBLE_EQ(run.logged_epochs[5], 2.0);

  // Fractional epochs: ceil(1.5 * 3) = 5 steps.
  EXPECT_EQ(train(root / "b", 1.5, -1, false).steps.size(), 5u);
  fs::remove_all(root);
}

TEST(TrainerEpochs, MaxStepsRepeatsEpochsWithTheSameShortStep) {
  const fs::path root = fs::path(testing::TempDir()) / "swift_trainer_epochs_max";
  fs::remove_all(root);
  const EpochRun run = train(root / "a", 1, 8, false);  // max_steps overrides num_train_epochs
  EXPECT_EQ(run.max_steps, 8);
  EXPECT_EQ(run.num_epochs, 3);
  ASSERT_EQ(run.steps.size(), 8u);
  const std::vector<size_t> micro = {2, 2, 1, 2, 2, 1, 2, 2};
  for (size_t s = 0; s < 8; ++s) EXPECT_EQ(run.steps[s].micro, micro[s]) << "step " << s + 1;
  expect_each_epoch_sees_its_data_once(run, 3);
  fs::remove_all(root);
}

TEST(TrainerEpochs, UnknownLengthNeedsMaxStepsAndEndsPassesTheSameWay) {
  const fs::path root = fs::path(testing::TempDir()) / "swift_trainer_epochs_stream";
  fs::remove_all(root);
  try {
    train(root / "a", 3, -1, true);
    FAIL() << "a source of unknown length trained without --max_steps";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max_steps"), std::string::npos) << e.what();
  }
  const EpochRun run = train(root / "b", 3, 5, true);
  EXPECT_EQ(run.updates_per_epoch, -1);
  ASSERT_EQ(run.steps.size(), 5u);
  const std::vector<size_t> micro = {2, 2, 1, 2, 2};
  for (size_t s = 0; s < 5; ++s) EXPECT_EQ(run.steps[s].micro, micro[s]) << "step " << s + 1;
  expect_each_epoch_sees_its_data_once(run, 3);
  fs::remove_all(root);
}

TEST(TrainerEpochs, ResumeAfterAShortStepIsBitIdentical) {
  const fs::path root = fs::path(testing::TempDir()) / "swift_trainer_epochs_resume";
  fs::remove_all(root);
  const EpochRun full = train(root / "a", 2, -1, false, "", 3);  // checkpoint-3: right after the short step
  ASSERT_TRUE(fs::exists(fs::path(full.run_dir) / "checkpoint-3"));
  const fs::path resumed_dir = root / "b" / "run";
  fs::create_directories(resumed_dir);
  fs::copy(fs::path(full.run_dir) / "checkpoint-3", resumed_dir / "checkpoint-3", fs::copy_options::recursive);
  const EpochRun resumed = train("", 2, -1, false, (resumed_dir / "checkpoint-3").string(), 3);
  ASSERT_EQ(resumed.steps.size(), 3u);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(resumed.steps[s].seqs, full.steps[3 + s].seqs) << "step " << s + 4;
    EXPECT_EQ(resumed.steps[s].loss, full.steps[3 + s].loss) << "step " << s + 4;
  }
  fs::remove_all(root);
}

}  // namespace
}  // namespace swift
