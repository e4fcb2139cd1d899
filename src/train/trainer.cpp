// train/trainer.cpp — the training loop.
#include "train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>

#include <fmt/format.h>

#include "core/error.h"
#include "core/memory.h"
#include "core/seed.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/optimizer.h"
#include "train/run_dir.h"
#include "train/zero.h"

namespace swift::train {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_interrupts{0};

void on_sigint(int) {
  if (g_interrupts.fetch_add(1) >= 1) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

// Restores the previous SIGINT handler when the loop ends.
struct SigintGuard {
  void (*previous)(int);
  SigintGuard() : previous(std::signal(SIGINT, on_sigint)) { g_interrupts = 0; }
  ~SigintGuard() { std::signal(SIGINT, previous); }
};

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m {}s", s / 60, s % 60);
  return fmt::format("{}h {}m {}s", s / 3600, (s / 60) % 60, s % 60);
}

uint64_t step_seed(uint64_t seed, int64_t step, int64_t micro) {
  return mix_seed(seed, static_cast<uint64_t>(step), static_cast<uint64_t>(micro));
}

}  // namespace

model::MicroBatch to_micro_batch(const data::Batch& b) { return {b.ids, b.positions, b.cu_seqlens, b.targets}; }

Trainer::Trainer(TrainerConfig config, model::TrainableModel& model, data::BatchSource& train_loader,
                 std::shared_ptr<const data::TokenizedDataset> val_data)
    : config_(std::move(config)), model_(model), loader_(train_loader), val_(std::move(val_data)) {
  const TrainerConfig& c = config_;
  SWIFT_CHECK(c.gradient_accumulation_steps >= 1, "--gradient_accumulation_steps must be >= 1, got {}",
              c.gradient_accumulation_steps);
  SWIFT_CHECK(c.learning_rate > 0, "--learning_rate must be positive, got {}", c.learning_rate);
  SWIFT_CHECK(c.logging_steps >= 1, "--logging_steps must be >= 1, got {}", c.logging_steps);
  SWIFT_CHECK(c.zero_stage >= 0 && c.zero_stage <= 2,
              "ZeRO stage {} is not supported: stage 3 (parameters sharded across ranks) is not implemented; use "
              "--deepspeed zero2 (gradients and optimizer states sharded) or zero1", c.zero_stage);
  const int64_t micro_per_epoch = loader_.steps_per_epoch();
  if (micro_per_epoch < 0) {  // streamed: the length of a pass is unknown
    attach_parallel();
    SWIFT_CHECK(c.max_steps > 0, "--streaming: the number of batches of a streamed dataset is unknown before it is "
                "read, so --max_steps is required (as in ms-swift); pass e.g. --max_steps 1000");
    max_steps_ = c.max_steps;
    return;
  }
  SWIFT_CHECK(micro_per_epoch > 0, "the training set gives no batch (too few samples for "
              "--per_device_train_batch_size with --dataloader_drop_last?)");
  // transformers: num_update_steps_per_epoch = ceil(len(dataloader) / gradient_accumulation_steps).
  updates_per_epoch_ = (micro_per_epoch + c.gradient_accumulation_steps - 1) / c.gradient_accumulation_steps;
  attach_parallel();
  if (c.max_steps > 0) {
    max_steps_ = c.max_steps;
  } else {
    SWIFT_CHECK(c.num_train_epochs > 0, "--num_train_epochs must be positive, got {}", c.num_train_epochs);
    max_steps_ = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(c.num_train_epochs *
                                                                      static_cast<double>(updates_per_epoch_))));
  }
  num_epochs_ = (max_steps_ + updates_per_epoch_ - 1) / updates_per_epoch_;
}

void Trainer::attach_parallel() {
  if (config_.parallel == nullptr) return;
  SWIFT_CHECK(config_.comm != nullptr && &config_.parallel->world() == config_.comm,
              "trainer: the sequence / tensor parallel layout must be built on the trainer's communicator");
  model_.set_parallel(config_.parallel->groups());
}

double Trainer::epoch_progress() const {
  const int64_t per_epoch = loader_.steps_per_epoch();
  if (per_epoch <= 0) return static_cast<double>(loader_.epoch());
  return static_cast<double>(loader_.epoch()) + static_cast<double>(loader_.step()) / static_cast<double>(per_epoch);
}

nlohmann::json Trainer::evaluate() {
  if (!val_ || val_->size() == 0) return nlohmann::json::object();
  double loss = 0;
  int64_t tokens = 0, correct = 0;
  const int64_t batch = std::max<int64_t>(1, config_.per_device_eval_batch_size);
  // Data parallel: batch k is evaluated by replica k mod DP (all its SP ranks); the sums are added over ranks.
  int64_t k = 0;
  for (int64_t start = 0; start < static_cast<int64_t>(val_->size()); start += batch, ++k) {
    if (k % replicas() != replica()) continue;
    std::vector<int64_t> seqs;
    for (int64_t i = start; i < std::min<int64_t>(start + batch, static_cast<int64_t>(val_->size())); ++i) seqs.push_back(i);
    const data::Batch b = data::make_batch(*val_, seqs);
    const model::StepStats s = model_.evaluate(to_micro_batch(b));
    loss += s.loss_sum;
    tokens += s.tokens;
    correct += s.correct;
  }
  if (world_size() > 1) {
    const double counted = counts_stats() ? 1.0 : 0.0;  // tensor parallel: one rank per group counts
    const std::vector<double> sum = sum_across_ranks(
        *config_.comm, {counted * loss, counted * static_cast<double>(tokens), counted * static_cast<double>(correct)});
    loss = sum[0];
    tokens = static_cast<int64_t>(sum[1]);
    correct = static_cast<int64_t>(sum[2]);
  }
  if (tokens == 0) return nlohmann::json::object();
  return {{"eval_loss", loss / static_cast<double>(tokens)},
          {"eval_token_acc", static_cast<double>(correct) / static_cast<double>(tokens)}};
}

TrainResult Trainer::train() {
  if (world_size() <= 1) return train_loop();
  // A failure on this rank (bad data, a full disk, a collective that timed out) stops the other ranks at once
  // with this message instead of leaving them waiting in their next collective.
  try {
    return train_loop();
  } catch (const std::exception& e) {
    config_.comm->abort(fmt::format("rank {} failed: {}", rank(), e.what()));
    throw;
  }
}

TrainResult Trainer::train_loop() {
  const TrainerConfig& c = config_;
  const bool dp = world_size() > 1;
  const bool main = is_main();
  std::vector<model::Parameter>& params = model_.parameters();
  ops::AdamWConfig adam = c.adam;
  // ZeRO-1/2: each rank keeps the AdamW state of its pieces only; otherwise every rank keeps all of it. ZeRO-2
  // reduce-scatters the gradients (each rank gets the sums of its pieces only).
  const bool zero = dp && c.zero_stage >= 1;
  const bool zero2 = dp && c.zero_stage == 2;
  // Tensor parallel: gradients are summed over the ranks that hold the same shards (the world without TP); ZeRO-1
  // shards the AdamW state over those same ranks (the reducer's group), each TP rank its own parameter shards.
  // ZeRO-2 with TP: the model sums its Partial gradients over the TP group layer by layer during every backward
  // (model/training.h), before the reducer reduce-scatters their buckets; the norm sums shard pieces over both.
  std::unique_ptr<GradientReducer> reducer =
      dp ? std::make_unique<GradientReducer>(c.parallel ? c.parallel->replicas() : *c.comm, params, c.reduce_bucket_bytes,
                                             zero2 ? GradientReduction::ReduceScatter : GradientReduction::AllReduce)
         : nullptr;
  std::unique_ptr<AdamW> optimizer = zero ? nullptr : std::make_unique<AdamW>(params, adam);
  std::unique_ptr<ShardedAdamW> sharded = zero ? std::make_unique<ShardedAdamW>(*reducer, adam) : nullptr;
  // The backward reports each finished layer to the reducer (it starts the buckets that became final).
  struct HookGuard {
    model::TrainableModel& model;
    ~HookGuard() { model.set_backward_hook(nullptr); }
  } hook_guard{model_};
  if (zero2) {  // DeepSpeed's ZeRO-2: no full gradients; every micro-batch reduce-scatters into this rank's shard
    reducer->shard_gradient_storage(model_);
  } else if (reducer && c.overlap_reduction) {
    model_.set_backward_hook([r = reducer.get()](int64_t stage) { r->on_backward_stage(stage); });
  }
  const LrSchedule schedule(c.schedule, c.learning_rate, max_steps_,
                            warmup_steps_for(max_steps_, c.warmup_steps, c.warmup_ratio), c.min_lr_rate);
  TrainerState state;
  if (!c.resume_from_checkpoint.empty()) {  // every rank loads the same checkpoint
    // Tensor parallel: whole tensors were saved; this rank keeps its shards.
    ShardFunction shard;
    if (dist::Communicator* tp = tensor_parallel_group()) {
      shard = [tp](const model::Parameter& p, const Tensor& whole) {
        return model::tensor_parallel_shard(whole, p.tp, tp->rank(), tp->world_size(), p.name);
      };
    }
    if (zero) {  // the checkpoint holds the full moments (one-process format): keep this rank's pieces
      AdamW full(params, adam);
      state = load_checkpoint(c.resume_from_checkpoint, model_, full, shard);
      sharded->load_full(full);
    } else {
      state = load_checkpoint(c.resume_from_checkpoint, model_, *optimizer, shard);
    }
    if (main) {
      std::fprintf(stderr, "resumed from %s at step %lld (epoch %lld, batch %lld)\n", c.resume_from_checkpoint.c_str(),
                   static_cast<long long>(state.global_step), static_cast<long long>(state.epoch),
                   static_cast<long long>(state.batch_in_epoch));
    }
  }
  // fp16: dynamic loss scaling, continuing the checkpoint's scale on resume (a checkpoint of a run without scaling
  // starts at the initial scale). skipped_steps stays from the checkpoint either way: it indexes the LR schedule.
  std::unique_ptr<LossScaler> scaler = c.loss_scaling ? std::make_unique<LossScaler>(c.loss_scaler) : nullptr;
  if (scaler && state.loss_scaler) scaler->restore(*state.loss_scaler);
  state.loss_scaler.reset();
  if (scaler) state.loss_scaler = scaler->state();
  // Only rank 0 writes the run directory.
  std::unique_ptr<TrainingLog> log = main ? std::make_unique<TrainingLog>(c.run_dir) : nullptr;
  CheckpointContents contents{&model_, optimizer.get(), {}, c.args_json, c.model_config_json, c.extra_files,
                              c.base_model_name_or_path, {}};
  TrainResult result;
  result.max_steps = max_steps_;
  auto save = [&]() {
    contents.state = state;
    contents.state.epoch = loader_.epoch();
    contents.state.batch_in_epoch = loader_.step();
    std::string dir = c.run_dir + "/checkpoint-" + std::to_string(state.global_step);
    // ZeRO: the moments gathered on rank 0 for the one-process format (with TP on every rank: each TP group
    // gathers its shards' moments next, a collective of every rank).
    std::unique_ptr<AdamW> full;
    if (zero) {
      if (main || tensor_parallel_group()) full = std::make_unique<AdamW>(params, adam);
      sharded->gather_full(full.get());
      contents.optimizer = full.get();
    }
    if (dist::Communicator* tp = tensor_parallel_group()) {  // whole tensors for the one-process format
      contents.tensor_parallel_whole = gather_tensor_parallel_state(*tp, params, zero ? *full : *optimizer);
    }
    if (main) {
      dir = save_checkpoint(c.run_dir, contents);
      prune_checkpoints(c.run_dir, c.save_total_limit, state.best_checkpoint);
    }
    if (dp) c.comm->barrier();  // no rank runs ahead of a checkpoint being written
    result.last_checkpoint = dir;
    return dir;
  };

  SigintGuard sigint;
  const bool tty = main && isatty(2) != 0;
  const auto start = Clock::now();
  const int64_t first_step = state.global_step;
  loader_.start(state.epoch, state.batch_in_epoch);
  double interval_loss = 0, interval_tokens_loss = 0;
  int64_t interval_steps = 0, interval_tokens = 0, interval_correct = 0, run_tokens = 0;
  // The micro-batches of one optimizer step: up to G from the current epoch. A step never spans two epochs: when
  // the epoch ends inside it, the step is shorter; when the epoch has ended before it, the next epoch starts.
  auto step_batches = [&]() -> std::vector<data::Batch> {
    std::vector<data::Batch> micro;
    while (static_cast<int64_t>(micro.size()) < c.gradient_accumulation_steps) {
      std::optional<data::Batch> b = loader_.next();
      if (!b && micro.empty()) {
        loader_.start(loader_.epoch() + 1, 0);  // epoch finished: next epoch, new shuffle
        b = loader_.next();
        if (!b) fail("the data loader produced no batch for a whole epoch (epoch {})", loader_.epoch());
      }
      if (!b) break;  // the epoch ended inside this step
      micro.push_back(std::move(*b));
    }
    return micro;
  };

  // Gradients are zeroed once here, then right after each step's update (below): those memsets queue behind the
  // optimizer's kernels while the host logs and loads the next batch, instead of delaying the next forward. After an
  // update the zeroing is deferred (TrainableModel::defer_zero_grad): full fine-tuning's linear weight gradients are
  // written (=) by the next backward instead of being cleared and added to; nothing reads them before it.
  model_.zero_grad();
  while (state.global_step < max_steps_) {
    const int64_t step = state.global_step;
    std::vector<data::Batch> micro = step_batches();
    int64_t n = 0;  // target tokens of the micro-batches this step has (on every rank): the loss normaliser
    for (const auto& b : micro) n += counts_batches() ? b.num_target_tokens : 0;
    if (dp) n = static_cast<int64_t>(sum_across_ranks(*c.comm, {static_cast<double>(n)})[0]);
    model::StepStats step_stats;
    // The loss gradient's coefficient: 1 / tokens, times the loss scale (a power of two: exact) under fp16.
    const float grad_coefficient = n > 0 ? (1.0f / static_cast<float>(n)) * (scaler ? scaler->scale() : 1.0f) : 0.0f;
    for (size_t k = 0; k < micro.size(); ++k) {
      if (n == 0) break;  // no target token in the whole step: nothing to learn from
      // Dropout masks: micro-batch k of replica r is micro-batch k * DP + r of the step.
      const int64_t micro_index = static_cast<int64_t>(k) * replicas() + replica();
      // The last micro-batch's backward starts the gradient buckets as they become final (DDP's overlap).
      if (reducer && c.overlap_reduction && k + 1 == micro.size()) reducer->expect_last_backward();
      const model::StepStats s = model_.forward_backward(to_micro_batch(micro[k]), grad_coefficient,
                                                         step_seed(c.seed, step, micro_index), c.gradient_checkpointing);
      step_stats.loss_sum += s.loss_sum;
      step_stats.tokens += s.tokens;
      step_stats.correct += s.correct;
      run_tokens += micro[k].num_tokens;
    }
    bool interrupted = g_interrupts.load() > 0;
    if (dp) {
      // Every rank's gradients become the sum over ranks (each already scaled by 1 / global tokens; ZeRO-2: the
      // sums of this rank's pieces); the statistics are summed so every rank logs, stops and saves on the same
      // numbers.
      reducer->finish();
      // Tensor parallel: the partial gradients, over the TP group (ZeRO-2: done during each backward already).
      model_.reduce_tensor_parallel_gradients();
      int64_t local_tokens = 0;
      for (size_t k = 0; k < micro.size() && n > 0; ++k) local_tokens += micro[k].num_tokens;
      const std::vector<double> sum = sum_across_ranks(
          *c.comm, {counts_stats() ? step_stats.loss_sum : 0.0, counts_stats() ? static_cast<double>(step_stats.tokens) : 0.0,
                    counts_stats() ? static_cast<double>(step_stats.correct) : 0.0,
                    counts_batches() ? static_cast<double>(local_tokens) : 0.0, interrupted ? 1.0 : 0.0});
      step_stats.loss_sum = sum[0];
      step_stats.tokens = static_cast<int64_t>(sum[1]);
      step_stats.correct = static_cast<int64_t>(sum[2]);
      run_tokens += static_cast<int64_t>(sum[3]) - local_tokens;
      interrupted = sum[4] > 0;
    }
    const double loss = n > 0 ? step_stats.loss_sum / static_cast<double>(n) : 0.0;
    if (c.on_gradients && zero2) {  // the model holds no gradients: this rank's pieces, in full-size copies
      std::vector<model::Parameter> shown = params;
      const std::vector<Tensor> grads = reducer->shard_gradients_as_full();
      for (size_t i = 0; i < shown.size(); ++i) shown[i].grad = grads[i];
      c.on_gradients(step + 1, shown);
    } else if (c.on_gradients) {
      c.on_gradients(step + 1, params);
    }
    if (scaler) {  // GradScaler.unscale_: every rank holds the same reduced gradients (ZeRO-2: its pieces among them)
      std::vector<Tensor> grads;
      grads.reserve(params.size());
      if (zero2) {
        grads.push_back(reducer->shard_gradients());
      } else {
        for (const model::Parameter& p : params) grads.push_back(p.grad);
      }
      ops::scale_gradients(grads, scaler->inverse_scale());
    }
    // Plain AdamW folds the clip into its step (AdamWConfig::grad_scale: the same bits, one pass less); ZeRO and
    // tensor parallelism clip in place.
    float clip_scale = 1.0f;
    const float grad_norm =
        zero2                  ? sharded->clip_shard_gradients(c.max_grad_norm, tensor_parallel_group())
        : tensor_parallel_group() ? clip_tensor_parallel_gradients(params, c.max_grad_norm, *tensor_parallel_group())
        : zero                 ? clip_gradients(params, c.max_grad_norm)
                               : measure_gradients(params, c.max_grad_norm, &clip_scale);
    // The LR of this step: the schedule advances only on optimizer steps taken (transformers skips
    // lr_scheduler.step() when the scaler skipped the optimizer step).
    const double lr = schedule.lr(step - state.skipped_steps);
    // fp16: a non-finite unscaled gradient (seen through its norm, collective in every mode, so every rank agrees)
    // skips the update and backs the scale off; the step still counts and is logged.
    bool overflow = false;
    if (scaler) {
      const float scale_used = scaler->scale();
      overflow = !std::isfinite(grad_norm);
      scaler->update(overflow);
      state.loss_scaler = scaler->state();
      if (overflow) {
        ++state.skipped_steps;
        if (main) {
          std::fprintf(stderr, "%sstep %lld: fp16 gradients overflowed at loss scale %g; update skipped, loss scale now %g\n",
                       tty ? "\n" : "", static_cast<long long>(step + 1), static_cast<double>(scale_used),
                       static_cast<double>(scaler->scale()));
        }
      }
    }
    if (!overflow && (!std::isfinite(loss) || !std::isfinite(grad_norm))) {
      if (c.skip_nonfinite) {
        if (main) {
          std::fprintf(stderr, "warning: step %lld: non-finite loss (%g) or gradient norm (%g); update skipped\n",
                       static_cast<long long>(step + 1), loss, grad_norm);
        }
        ++state.global_step;
        model_.zero_grad();
        continue;
      }
      const std::string dir = save();
      fail("step {}: the loss ({}) or the gradient norm ({}) is not finite; saved the parameters of the last good "
           "step to '{}'. Lower --learning_rate, check the data, or pass --skip_nonfinite_steps true to skip such "
           "steps", step + 1, loss, grad_norm, dir);
    }
    if (!overflow) {  // an overflowed step leaves the parameters and the AdamW state (and its step count) as they were
      if (zero) {
        sharded->step(lr);
      } else {
        optimizer->step(lr, clip_scale);
      }
    }
    ++state.global_step;
    state.consumed_tokens += n;
    interval_loss += loss;
    interval_tokens_loss += step_stats.loss_sum;
    interval_tokens += step_stats.tokens;
    interval_correct += step_stats.correct;
    ++interval_steps;
    result.last_loss = loss;
    if (c.on_step) c.on_step(state.global_step, micro, n, loss);
    model_.defer_zero_grad();  // for the next step (see above the loop)

    const bool last = state.global_step == max_steps_;
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const double done = static_cast<double>(state.global_step - first_step);
    const double speed = done / std::max(elapsed, 1e-9);
    const double remaining = static_cast<double>(max_steps_ - state.global_step) / std::max(speed, 1e-9);
    if (tty) {
      std::fprintf(stderr, "\r[%lld/%lld] loss %.4f lr %.3g %.0f tokens/s ETA %s   ",
                   static_cast<long long>(state.global_step), static_cast<long long>(max_steps_), loss, lr,
                   static_cast<double>(run_tokens) / std::max(elapsed, 1e-9), format_duration(remaining).c_str());
    }
    if (state.global_step % c.logging_steps == 0 || last || (c.logging_first_step && state.global_step == 1)) {
      nlohmann::json record = {
          {"loss", interval_loss / static_cast<double>(interval_steps)},
          {"token_acc", interval_tokens > 0 ? static_cast<double>(interval_correct) / static_cast<double>(interval_tokens) : 0.0},
          {"grad_norm", grad_norm},
          {"learning_rate", lr},
          // ms-swift logs the accelerator's peak memory; on the CPU it is the process's peak resident set.
          {"memory(GiB)", std::round((model_.device().is_cuda()
                                          ? static_cast<double>(memory_stats(1).total_peak) / 1073741824.0
                                          : peak_rss_gib()) * 100) / 100},
          {"train_speed(iter/s)", std::round(speed * 10000) / 10000},
          {"tokens_per_second", std::round(static_cast<double>(run_tokens) / std::max(elapsed, 1e-9))},
          {"epoch", std::round(epoch_progress() * 10000) / 10000},
          {"global_step/max_steps", fmt::format("{}/{}", state.global_step, max_steps_)},
          {"percentage", fmt::format("{:.2f}%", 100.0 * static_cast<double>(state.global_step) / max_steps_)},
          {"elapsed_time", format_duration(elapsed)},
          {"remaining_time", format_duration(remaining)},
          {"step", state.global_step}};
      state.log_history.push_back(record);
      if (main) {
        log->append(record);
        if (tty) std::fprintf(stderr, "\n");
        std::fprintf(stderr, "%s\n", record.dump().c_str());
      }
      interval_loss = interval_tokens_loss = 0;
      interval_steps = interval_tokens = interval_correct = 0;
    }
    const bool eval_now = val_ && ((c.eval_steps > 0 && state.global_step % c.eval_steps == 0) || last);
    if (eval_now) {
      nlohmann::json metrics = evaluate();
      if (!metrics.empty()) {
        metrics["step"] = state.global_step;
        metrics["epoch"] = std::round(epoch_progress() * 10000) / 10000;
        state.log_history.push_back(metrics);
        if (main) {
          log->append(metrics);
          std::fprintf(stderr, "%s\n", metrics.dump().c_str());
        }
      }
      if (main) log->write_curves();
      const bool save_now_for_best = (c.save_steps > 0 && state.global_step % c.save_steps == 0) || last;
      if (!metrics.empty() && save_now_for_best &&
          (state.best_checkpoint.empty() || metrics["eval_loss"].get<double>() < state.best_metric)) {
        state.best_metric = metrics["eval_loss"].get<double>();
        state.best_checkpoint = c.run_dir + "/checkpoint-" + std::to_string(state.global_step);
      }
    }
    if ((c.save_steps > 0 && state.global_step % c.save_steps == 0) || last) {
      save();
      if (main) log->write_curves();
    }
    if (interrupted) {
      if (!((c.save_steps > 0 && state.global_step % c.save_steps == 0) || last)) save();
      if (main) std::fprintf(stderr, "\ninterrupted: saved %s; resume with --resume_from_checkpoint %s\n",
                   result.last_checkpoint.c_str(), result.last_checkpoint.c_str());
      result.interrupted = true;
      break;
    }
  }
  if (main) log->write_curves();
  result.global_step = state.global_step;
  result.best_checkpoint = state.best_checkpoint;
  result.train_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.tokens_per_second = static_cast<double>(run_tokens) / std::max(result.train_seconds, 1e-9);
  result.skipped_steps = state.skipped_steps;
  result.loss_scale = scaler ? scaler->scale() : 0.0f;
  return result;
}

}  // namespace swift::train
