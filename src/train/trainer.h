// train/trainer.h — the training loop of `swift sft` / `swift pt`: gradient accumulation with the loss normalised
// over all target tokens of the optimizer step, clipping, AdamW, the LR schedule, logging (logging.jsonl, curves,
// a progress bar or plain lines), evaluation, checkpoints with save_total_limit, resume, Ctrl-C, NaN handling.
//
// Epochs (as transformers' Trainer): an epoch of L micro-batches gives ceil(L / G) optimizer steps (G =
// gradient_accumulation_steps); its last step takes the L mod G micro-batches left (when not 0) and never reaches
// into the next epoch, and its loss is normalised over the target tokens of the micro-batches it actually has.
// num_train_epochs gives ceil(num_train_epochs * ceil(L / G)) steps; max_steps > 0 overrides it and the epochs
// repeat (the same short last step each time) until max_steps. A streamed source (unknown L) needs max_steps;
// its passes end the same way, when the source runs dry.
//
// Invariants:
//  - Every random choice is a pure function of (seed, global step, micro-batch index): the data order comes
//    from the loader's (epoch, step) and dropout masks from the step, so resuming from checkpoint-N continues
//    with bit-identical losses on the CPU.
//  - A non-finite loss or gradient norm stops the run after saving checkpoint-<step> with the parameters of
//    the last good step (unless skip_nonfinite: the step's update is skipped and the run continues), and the
//    error names the step.
//  - fp16 (TrainerConfig::loss_scaling, train/loss_scaler.h; transformers' GradScaler path): the loss gradient is
//    multiplied by the scale; after the backward (and the data-parallel reduction) the gradients are multiplied by
//    1 / scale (ops::scale_gradients), then clipped; a step whose unscaled gradient norm is not finite (the norm is
//    computed anyway for clipping, so the inf / NaN check costs no extra pass) skips the optimizer update and the LR
//    schedule's advance (the schedule is indexed by the optimizer steps taken), halves the scale, and is logged
//    (grad_norm inf or NaN) and counted in global_step as transformers does. The scaler state and the count of
//    skipped steps are saved in trainer_state.json and restored on resume.
//  - Ctrl-C (SIGINT) finishes the current optimizer step, saves a checkpoint and returns (interrupted = true);
//    a second Ctrl-C ends the process at once.
//
// Data parallel (TrainerConfig::comm with world size W > 1; ms-swift / transformers DDP semantics):
//  - The train loader is this rank's share: a DataLoader with LoaderOptions{world_size = W, rank = r} (torch's
//    DistributedSampler: rank r takes every W-th unit of the epoch's seeded order, the same on every rank) or a
//    StridedSource over a stream. The global batch of a step is per_device_train_batch_size x G x W. Dropout
//    masks: micro-batch k of rank r draws those of micro-batch k * W + r of the step.
//  - The loss normaliser is the global target-token count of the step (summed over ranks before the backward,
//    which scales by 1 / global tokens). The F32 gradients are summed over ranks in flat ~25 MB buckets
//    (train/data_parallel.h) during the backward of the step's last micro-batch (earlier ones accumulate locally),
//    each bucket as soon as its parameters' gradients are final (overlap_reduction; false: all after the backward,
//    the same bits). So every rank clips the same gradients and takes the same AdamW step: parameters stay
//    identical. The logged loss / accuracy / tokens are sums over ranks.
//  - Only rank 0 writes logging.jsonl, curves, the progress line and checkpoints; the others take part in the
//    same collectives and wait at a barrier after each save. Evaluation splits the validation batches over the
//    ranks and sums. Ctrl-C on any rank stops all of them at the same step. Resume: every rank loads the same
//    checkpoint. zero_stage 1 shards the AdamW state, 2 also the reduced gradients (reduce-scatter instead of
//    all-reduce; the gradient norm from the shards), both with the parameters all-gathered after the update
//    (train/zero.h); checkpoints keep the one-process format, so plain / ZeRO-1 / ZeRO-2 runs of any world size
//    resume from each other. An exception on one rank aborts the communicator with its message, so the others
//    fail at once.
//
// Sequence parallel (TrainerConfig::parallel with SP > 1, train/parallel.h): the world is DP replicas x SP ranks; the
// loader of every rank is its replica's share (LoaderOptions{world_size = DP, rank = dp_rank}), so the SP ranks of a
// replica hold the same micro-batches and each runs its slice of the tokens (model/parallel.h). Token counts of the
// batches are counted once per replica; losses and gradients are summed over the whole world (the SP ranks' partial
// sums); dropout masks: micro-batch k of replica d is micro-batch k * DP + d of the step (each SP rank draws the
// one-process masks of its tokens' rows, so one replica of SP ranks equals one process with dropout). The trainer hands the groups to the model (TrainableModel::set_parallel).
// Tensor parallel (TP > 1): the world is DP x SP x TP; the TP ranks of a replica hold shards of the linears
// (model/parallel.h) and run the same tokens. After the backward, gradients are summed over the ranks holding the
// same shards (train/parallel.h replicas()), then the Partial ones over the TP group; the norm counts each shard
// once; statistics come from TP rank 0 of each group. Checkpoints hold the whole tensors (gathered for rank 0 to
// write), and resuming shards them again, so a TP run resumes from a one-process checkpoint and back. ZeRO-1 with TP
// shards each TP rank's AdamW state over the ranks holding the same shards (the reducer's group); checkpoints gather
// the moments over that group, then the whole tensors over the TP group. ZeRO-2 with TP likewise, its gradients
// reduce-scattered over that group: the model sums each micro-batch's Partial gradients over the TP group layer by
// layer during the backward, before their buckets are reduce-scattered (the bucket plans differ between TP ranks with
// uneven vocabulary shards, so the TP sum cannot follow the reduce-scatter); the norm sums the shard pieces' squares
// over both groups and the whole tensors' once (train/zero.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/communicator.h"
#include "data/loader.h"
#include "model/training.h"
#include "ops/ops.h"
#include "train/loss_scaler.h"
#include "train/parallel.h"
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
  // fp16 training: dynamic loss scaling with these settings (GradScaler's defaults); false: no scaling.
  bool loss_scaling = false;
  LossScalerConfig loss_scaler;
  std::string resume_from_checkpoint;
  // Data parallel: the communicator of the ranks (not owned); null or world size 1: a single process.
  dist::Communicator* comm = nullptr;
  // Sequence / tensor parallel layout over `comm` (not owned; built on the same world); null: data parallel only.
  const ParallelWorld* parallel = nullptr;
  // 1: ZeRO-1 (--deepspeed zero1) with comm: AdamW state sharded over the ranks; 2: ZeRO-2, the reduced gradients
  // too (train/zero.h); checkpoints keep the one-process format. 0: every rank keeps the whole state. Ignored for
  // one process. 3 (sharded parameters) is refused.
  int zero_stage = 0;
  // Data parallel: reduce gradient buckets while the last micro-batch's backward runs (false: after it; same bits),
  // buckets of at most this many bytes of F32 gradients (DDP's bucket_cap_mb default, 25 MiB).
  bool overlap_reduction = true;
  int64_t reduce_bucket_bytes = int64_t{25} << 20;
  // Written into checkpoints.
  nlohmann::json args_json;
  nlohmann::json model_config_json;
  std::vector<std::string> extra_files;
  std::string base_model_name_or_path;
  // Called after every optimizer step with the micro-batches it used, their target tokens (the loss
  // normaliser) and the step's loss (tests; tools that audit the data order). Data parallel: this rank's
  // micro-batches, the global token count and loss.
  std::function<void(int64_t step, const std::vector<data::Batch>& micro, int64_t target_tokens, double loss)> on_step;
  // Called with the 1-based step after its backward (and gradient reduction), before unscaling and clipping: the
  // gradients are still multiplied by the loss scale (tests inject an overflow here). With --deepspeed zero2 the
  // model holds no gradients: `params` is a copy whose grads hold this rank's reduced pieces (zeros elsewhere), and
  // writing to them changes nothing.
  std::function<void(int64_t step, std::vector<model::Parameter>& params)> on_gradients;
};

struct TrainResult {
  int64_t global_step = 0;
  int64_t max_steps = 0;
  double last_loss = 0;
  std::string last_checkpoint, best_checkpoint;
  bool interrupted = false;
  double train_seconds = 0;
  double tokens_per_second = 0;
  int64_t skipped_steps = 0;     // fp16: optimizer steps skipped for non-finite gradients (the whole run)
  float loss_scale = 0;          // fp16: the scale at the end; 0 without loss scaling
};

class Trainer {
 public:
  // `train_loader`: a DataLoader or a StreamingLoader (data/loader.h BatchSource); it must outlive the trainer.
  Trainer(TrainerConfig config, model::TrainableModel& model, data::BatchSource& train_loader,
          std::shared_ptr<const data::TokenizedDataset> val_data);
  TrainResult train();
  // eval_loss and eval_token_acc over the validation set (empty when there is none).
  nlohmann::json evaluate();
  int64_t max_steps() const { return max_steps_; }
  // Optimizer steps per epoch, ceil(L / G); -1 for a streamed source.
  int64_t updates_per_epoch() const { return updates_per_epoch_; }
  // Epochs the run goes through (the last may be partial); -1 for a streamed source.
  int64_t num_epochs() const { return num_epochs_; }

 private:
  TrainerConfig config_;
  model::TrainableModel& model_;
  data::BatchSource& loader_;
  std::shared_ptr<const data::TokenizedDataset> val_;
  int64_t max_steps_ = 0;
  int64_t updates_per_epoch_ = -1;
  int64_t num_epochs_ = -1;
  int rank() const { return config_.comm ? config_.comm->rank() : 0; }
  int world_size() const { return config_.comm ? config_.comm->world_size() : 1; }
  bool is_main() const { return rank() == 0; }
  // Data-parallel replicas (ranks with different batches) and this rank's replica: the world without SP / TP.
  int replicas() const { return config_.parallel ? config_.parallel->layout().dp : world_size(); }
  int replica() const { return config_.parallel ? config_.parallel->layout().dp_rank : rank(); }
  // Whether this rank adds its batches' token counts to the world's sums (one rank per replica does).
  bool counts_batches() const { return !config_.parallel || config_.parallel->layout().model_parallel_rank() == 0; }
  // Whether this rank adds its losses to the world's sums: SP ranks hold different tokens, TP ranks the same ones.
  bool counts_stats() const { return !config_.parallel || config_.parallel->layout().tp_rank == 0; }
  // The tensor-parallel group, or null.
  dist::Communicator* tensor_parallel_group() const {
    return config_.parallel ? config_.parallel->groups().tensor : nullptr;
  }
  // Epochs done, with the fraction of the current one (as transformers logs `epoch`); passes started for streams.
  double epoch_progress() const;
  // Hands the SP / TP groups to the model (constructor).
  void attach_parallel();
  TrainResult train_loop();
};

// Micro-batch view of a loader batch (targets are the shifted labels).
model::MicroBatch to_micro_batch(const data::Batch& batch);

}  // namespace swift::train
