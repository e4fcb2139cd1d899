// train/trainer.h — the training loop of `swift sft` / `swift pt`: gradient accumulation with the loss normalised
// over all target tokens of the optimizer step, clipping, AdamW, the LR schedule, logging (logging.jsonl, curves,
// a progress bar or plain lines), evaluation, checkpoints with save_total_limit, resume, Ctrl-C, NaN handling.
//
// Invariants:
//  - Every random choice is a pure function of (seed, global step, micro-batch index): the data order comes
//    from the loader's (epoch, step) and dropout masks from the step, so resuming from checkpoint-N continues
//    with bit-identical losses on the CPU.
//  - A non-finite loss or gradient norm stops the run after saving checkpoint-<step> with the parameters of
//    the last good step (unless skip_nonfinite: the step's update is skipped and the run continues), and the
//    error names the step.
//  - Ctrl-C (SIGINT) finishes the current optimizer step, saves a checkpoint and returns (interrupted = true);
//    a second Ctrl-C ends the process at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "model/training.h"
#include "ops/ops.h"
#include "train/scheduler.h"

namespace swift::train {

struct TrainerConfig {
  std::string run_dir;
  double num_train_epochs = 3;
  int64_t max_steps = -1;  // > 0 overrides epochs
  int64_t gradient_accumulation_steps = 1;
  double learning_rate = 1e-4;
  ops::AdamWConfig adam;   // betas, eps, weight_decay
  double max_grad_norm = 1.0;
  ScheduleType schedule = ScheduleType::Cosine;
  int64_t warmup_steps = 0;
  double warmup_ratio = 0;
  double min_lr_rate = 0;
  bool gradient_checkpointing = true;
  int64_t logging_steps = 5;
  bool logging_first_step = true;
  int64_t eval_steps = 0;   // 0: evaluate at the end only (when there is validation data)
  int64_t save_steps = 0;   // 0: save at the end only
  int64_t save_total_limit = -1;
  int64_t per_device_eval_batch_size = 1;
  uint64_t seed = 42;
  bool skip_nonfinite = false;
  std::string resume_from_checkpoint;
  // Written into checkpoints.
  nlohmann::json args_json;
  nlohmann::json model_config_json;
  std::vector<std::string> extra_files;
  std::string base_model_name_or_path;
};

struct TrainResult {
  int64_t global_step = 0;
  int64_t max_steps = 0;
  double last_loss = 0;
  std::string last_checkpoint, best_checkpoint;
  bool interrupted = false;
  double train_seconds = 0;
  double tokens_per_second = 0;
};

class Trainer {
 public:
  Trainer(TrainerConfig config, model::TrainableModel& model, data::DataLoader& train_loader,
          std::shared_ptr<const data::TokenizedDataset> val_data);
  TrainResult train();
  // eval_loss and eval_token_acc over the validation set (empty when there is none).
  nlohmann::json evaluate();
  int64_t max_steps() const { return max_steps_; }

 private:
  TrainerConfig config_;
  model::TrainableModel& model_;
  data::DataLoader& loader_;
  std::shared_ptr<const data::TokenizedDataset> val_;
  int64_t max_steps_ = 0;
  int64_t num_epochs_ = 0;  // epochs the loader runs through (the last may be partial)
};

// Micro-batch view of a loader batch (targets are the shifted labels).
model::MicroBatch to_micro_batch(const data::Batch& batch);

}  // namespace swift::train
