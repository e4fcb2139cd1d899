// train/checkpoint.h — checkpoint-N directories: the trained weights in Hugging Face / PEFT format, plus what
// resuming needs (optimizer moments, step counters, data position, log history), written atomically.
//
// Layout of checkpoint-N/:
//   LoRA: adapter_config.json + adapter_model.safetensors (PEFT loads them as they are)
//   full: model.safetensors (or shards + index) + config.json (+ tokenizer files copied by the caller)
//   optimizer.safetensors   exp_avg.<param name>, exp_avg_sq.<param name> (F32)
//   trainer_state.json      global_step, optimizer_steps, epoch, data position, best metric, log history; fp16
//                           runs: skipped_steps and loss_scaler {scale, growth_tracker} (train/loss_scaler.h)
//   args.json               the run's resolved arguments
// Invariants:
//  - Everything is written into checkpoint-N.tmp/, fsynced, then renamed to checkpoint-N: a crash never leaves
//    a half-written checkpoint-N (a stale .tmp is removed on the next save).
//  - Loading checks that every trainable parameter has its weights and moments with the right shapes and
//    names the first one that does not match.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/training.h"
#include "train/loss_scaler.h"
#include "train/optimizer.h"

namespace swift::train {

struct TrainerState {
  int64_t global_step = 0;      // optimizer steps done
  int64_t epoch = 0;            // epoch of the next micro-batch
  int64_t batch_in_epoch = 0;   // micro-batches of that epoch already consumed
  int64_t consumed_tokens = 0;
  double best_metric = 0;       // lowest eval_loss seen (valid when best_checkpoint is set)
  std::string best_checkpoint;
  // fp16 loss scaling: steps whose update was skipped (the LR schedule advanced global_step - skipped_steps times)
  // and the scaler's state; absent (nullopt, 0) otherwise.
  int64_t skipped_steps = 0;
  std::optional<LossScalerState> loss_scaler;
  nlohmann::json log_history = nlohmann::json::array();
  nlohmann::json to_json() const;
  static TrainerState from_json(const nlohmann::json& json, const std::string& source);
};

struct CheckpointContents {
  const model::TrainableModel* model = nullptr;
  AdamW* optimizer = nullptr;
  TrainerState state;
  nlohmann::json args;                     // written as args.json
  nlohmann::json model_config;             // full fine-tuning: written as config.json
  std::vector<std::string> extra_files;    // copied into the checkpoint (tokenizer files, ...)
  std::string base_model_name_or_path;     // recorded in adapter_config.json
  // Tensor parallel: whole tensors written instead of the model's and the optimizer's shards, by saved name
  // ("<name>", "exp_avg.<name>", "exp_avg_sq.<name>"; train/parallel.h gather_tensor_parallel_state).
  std::map<std::string, Tensor> tensor_parallel_whole;
};

// Writes run_dir/checkpoint-<global_step> atomically and returns its path.
std::string save_checkpoint(const std::string& run_dir, const CheckpointContents& contents);

// Restores parameters (in place), optimizer moments and step count; returns the trainer state. `shard` (tensor
// parallel) turns each saved whole tensor of a parameter (its weights and moments) into this rank's part.
using ShardFunction = std::function<Tensor(const model::Parameter& param, const Tensor& whole)>;
TrainerState load_checkpoint(const std::string& dir, model::TrainableModel& model, AdamW& optimizer,
                             const ShardFunction& shard = {});

// Deletes the oldest checkpoint-N directories of run_dir beyond `limit`, never `keep` (the best one) and never
// the newest. limit <= 0 keeps everything.
void prune_checkpoints(const std::string& run_dir, int64_t limit, const std::string& keep);

}  // namespace swift::train
