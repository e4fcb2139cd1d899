// bench/bench_train_step.cpp — one training configuration timed end to end: random weights of the architecture
// in a config.json (built on the target device, no checkpoint needed), LoRA or full fine-tuning, packed batches
// of random tokens, forward + backward + clip + AdamW per step. The peer is scripts/bench/peer_train_step.py
// (transformers + PEFT on the same shapes); scripts/device/bench-train.sh runs both in one call, and
// scripts/device/bench-dp.sh runs both on 1 and N GPUs (data-parallel scaling).
//
//   bench_train_step --config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4
//       [--gradient_checkpointing] [--recompute_num_layers N] [--recompute_modules layernorm,act,mlp]
//       [--cpu_offloading_num_layers N] [--offload_embedding] [--offload_frozen_layers N] [--steps 6] [--warmup 2] [--clip_in_place] [--zero_grad_first]
//       [--no_defer_zero_grad] [--device cuda|cpu]
//   NPROC_PER_NODE=N bench_train_step ... [--zero 0|1|2] [--bucket_mb 25] [--no_overlap]   data parallel
//   SWIFT_PROFILE=1 bench_train_step ...   adds a per-op time table of the timed steps (ops bracketed by synchronisations)
//   SWIFT_PROFILE=events bench_train_step ...   the same table from CUDA events (no synchronisations), and both modes
//       add the step's breakdown (core/profile.h categories + idle, ms per step) to stderr and the JSON line
//       ("profile", "breakdown_ms"); the fields are absent without SWIFT_PROFILE
//
// Invariants: prints exactly one JSON line (fields as the peer's) on success; the FLOP count is the peer's
// formula (forward FLOPs per token x2 for LoRA, x3 for full); times are medians of the timed steps, each step
// ending with a host read of one row of the first parameter (a device synchronisation; PERFORMANCE runs before 15
// read the gradient norm of its gradient instead, a pass the trainer does not make).
// Data parallel (NPROC_PER_NODE=N, the launcher of `swift`, dist/launcher.h): rank r runs on cuda:LOCAL_RANK
// (NCCL) or the CPU (shared-memory process group), every rank times the same per-device shape (weak scaling)
// on its own random batches (seed step * N + r + 1: rank 0 of one process draws what the single-process run
// draws), and the gradients are reduced as train/trainer.cpp reduces them: GradientReducer buckets started by
// the backward hook (unless --no_overlap), ZeRO-1/2 through ShardedAdamW, loss scaled by 1 / global targets. A
// step's time is the slowest rank's; only rank 0 prints, adding world_size, global and per-GPU tokens/s and the
// largest peak over ranks to the single-process fields (tokens_per_s and model_tflops stay per GPU). One process
// prints exactly the fields it printed before data parallelism existed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/random_weights.h"
#include "core/error.h"
#include "core/profile.h"
#include "core/memory.h"
#include "dist/bootstrap.h"
#include "dist/init.h"
#include "dist/launcher.h"
#include "io/model_config.h"
#include "model/causal_lm.h"
#include "model/lora.h"
#include "model/training.h"
#include "ops/backends.h"
#include "ops/ops.h"
#include "train/data_parallel.h"
#include "train/optimizer.h"
#include "train/zero.h"

using namespace swift;

namespace {

double forward_flops_per_token(const io::ModelConfig& c, int64_t seq) {
  const double C = c.hidden_size, F = c.intermediate_size, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const double D = c.head_dim;
  const double per_layer = 2 * (C * Hq * D + 2 * C * Hkv * D + Hq * D * C + 3 * C * F);
  const double attention = 2.0 * seq * Hq * D;
  return c.num_hidden_layers * (per_layer + attention) + 2 * C * c.vocab_size;
}

model::MicroBatch random_batch(int64_t vocab, int64_t seq, int64_t batch, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  const int64_t T = seq * batch;
  std::vector<int32_t> ids(static_cast<size_t>(T)), pos(static_cast<size_t>(T)), labels(static_cast<size_t>(T));
  std::vector<int32_t> cu{0};
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      ids[static_cast<size_t>(b * seq + t)] = tok(gen);
      pos[static_cast<size_t>(b * seq + t)] = static_cast<int32_t>(t);
    }
    cu.push_back(static_cast<int32_t>((b + 1) * seq));
  }
  for (int64_t b = 0; b < batch; ++b) {  // every token is a target except each sequence's last
    for (int64_t t = 0; t < seq; ++t) {
      const size_t i = static_cast<size_t>(b * seq + t);
      labels[i] = t + 1 < seq ? ids[i + 1] : -100;
    }
  }
  return {Tensor::from_i32({T}, ids), Tensor::from_i32({T}, pos),
          Tensor::from_i32({static_cast<int64_t>(cu.size())}, cu), Tensor::from_i32({T}, labels)};
}

// Every rank's `mine` (the same length on every rank), rank r's at [r * n, (r + 1) * n): exact (each value is
// added to zeros in double), on every rank. Without a communicator: `mine`.
std::vector<double> values_of_every_rank(dist::Communicator* comm, const std::vector<double>& mine) {
  if (comm == nullptr) return mine;
  const size_t n = mine.size();
  std::vector<double> slots(n * static_cast<size_t>(comm->world_size()), 0.0);
  const auto mine_at = static_cast<std::ptrdiff_t>(n * static_cast<size_t>(comm->rank()));
  std::copy(mine.begin(), mine.end(), slots.begin() + mine_at);
  return train::sum_across_ranks(*comm, slots);
}

}  // namespace

int main(int argc, char** argv) {
  ops::tune_cpu_environment(argc, argv);
  // NPROC_PER_NODE=N: this process launches N ranks of the same command and returns their exit status.
  if (const int code = dist::maybe_launch(argc, argv); code >= 0) return code;
  ops::init_backends();
  CLI::App app{"bench_train_step: time training steps on random weights of a config.json"};
  std::string config_path, tuner = "lora", device_name = "cuda";
  int64_t seq = 2048, batch = 4, steps = 6, warmup = 2, rank = 8;
  double alpha = 32, dropout = 0.05;
  bool checkpointing = false;
  app.add_option("--config", config_path, "config.json of the architecture")->required();
  app.add_option("--tuner", tuner, "lora | full");
  app.add_option("--seq", seq, "tokens per sequence");
  app.add_option("--batch", batch, "sequences per step (packed)");
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--lora_rank", rank);
  app.add_option("--lora_alpha", alpha);
  app.add_option("--lora_dropout", dropout);
  app.add_option("--device", device_name, "cuda | cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_flag("--gradient_checkpointing", checkpointing);
  int64_t recompute_layers = -1;
  app.add_option("--recompute_num_layers", recompute_layers,
                 "with --gradient_checkpointing: recompute only the first N layers whole (default: all); without it, "
                 "with --recompute_modules mlp: the MLP of the first N layers only");
  std::vector<std::string> recompute_names;
  app.add_option("--recompute_modules", recompute_names,
                 "selective recompute in the kept layers, as swift sft --recompute_modules (comma-separated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"layernorm", "act", "mlp"}));
  int64_t offload_layers = 0;
  app.add_option("--cpu_offloading_num_layers", offload_layers,
                 "activation offloading of N kept layers' MLP intermediates (swift sft --cpu_offloading_num_layers)")
      ->check(CLI::NonNegativeNumber);
  bool offload_embedding = false;
  app.add_flag("--offload_embedding", offload_embedding,
               "LoRA on CUDA: the embedding table in mapped host memory (swift sft --offload_embedding true)");
  int64_t frozen_layers = 0;
  app.add_option("--offload_frozen_layers", frozen_layers,
                 "LoRA: the frozen matrices of the first N layers wait in host memory between their forward and "
                 "backward (swift sft --offload_frozen_layers)")
      ->check(CLI::NonNegativeNumber);
  bool clip_in_place = false;
  bool zero_grad_first = false;
  bool no_defer_zero_grad = false;
  app.add_flag("--clip_in_place", clip_in_place,
               "clip the gradients in a pass of their own before AdamW (the trainer folds the clip into AdamW's step; "
               "for A/B measurements, the same bits)");
  app.add_flag("--zero_grad_first", zero_grad_first,
               "zero the gradients at the start of each step (the trainer zeroes them right after each update, queued "
               "behind it; for A/B measurements)");
  app.add_flag("--no_defer_zero_grad", no_defer_zero_grad,
               "clear every gradient after the update (the trainer defers the clear of full fine-tuning's linear "
               "weight gradients to the next backward's products: TrainableModel::defer_zero_grad; for A/B "
               "measurements, the same bits)");
  int zero_stage = 0;
  int64_t bucket_mb = train::GradientReducer::kDefaultBucketBytes >> 20;
  bool no_overlap = false;
  app.add_option("--zero", zero_stage, "data parallel: 0 (plain), 1 (AdamW state sharded), 2 (gradients too)")
      ->check(CLI::Range(0, 2));
  app.add_option("--bucket_mb", bucket_mb, "data parallel: gradient bucket size in MiB (DDP's bucket_cap_mb)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--no_overlap", no_overlap, "data parallel: reduce every bucket after the backward, not during it");
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<dist::Communicator> comm;  // data parallel only
  try {
    const dist::LaunchEnv env = dist::detect_launch_env();
    const int world = env.world_size;
    const bool cuda = device_name == "cuda";
    SWIFT_CHECK(!cuda || ops::cuda_device_count() > 0,
                "--device cuda: no CUDA device visible (or this build has no CUDA backend); use --device cpu");
    SWIFT_CHECK(!cuda || env.local_rank < ops::cuda_device_count(),
                "--device cuda: LOCAL_RANK {} needs {} CUDA devices, {} visible; lower NPROC_PER_NODE", env.local_rank,
                env.local_rank + 1, ops::cuda_device_count());
    const Device device = cuda ? Device::cuda(env.local_rank) : Device::cpu();
    if (env.distributed()) comm = dist::init_communicator(env, device);
    const DType matrix_dtype = device.is_cuda() ? DType::BF16 : DType::F32;
    io::ModelConfig config = io::load_model_config(config_path);
    auto lm = model::CausalLM::from_weights(config, bench::random_weights(config, device, matrix_dtype));
    const model::TunerType type = model::tuner_type_from_string(tuner);
    model::LoraAdapters adapters;
    if (type == model::TunerType::Lora) {
      model::LoraSettings settings;
      settings.rank = rank;
      settings.alpha = alpha;
      settings.dropout = dropout;
      adapters = model::create_lora(config, settings);
    }
    if (offload_embedding) lm->offload_embedding();
    model::TrainableModel trainable(*lm, type, std::move(adapters));
    model::TrainableModel::RecomputeModules recompute;
    for (const std::string& name : recompute_names) {
      recompute.layernorm |= name == "layernorm";
      recompute.act |= name == "act";
      recompute.mlp |= name == "mlp";
    }
    if (checkpointing) {
      trainable.set_recompute_layers(recompute_layers);
    } else {
      recompute.mlp_layers = recompute_layers;
    }
    trainable.set_recompute_modules(recompute);
    trainable.set_offload_layers(offload_layers);
    trainable.set_offload_frozen_layers(frozen_layers);
    ops::AdamWConfig adamw;
    adamw.weight_decay = 0.1;
    std::vector<model::Parameter>& params = trainable.parameters();
    // Data parallel as train/trainer.cpp does it (one process: no reducer, the plain AdamW).
    const bool zero = comm && zero_stage >= 1, zero2 = comm && zero_stage == 2;
    const bool overlap = comm && !no_overlap;
    std::unique_ptr<train::GradientReducer> reducer =
        comm ? std::make_unique<train::GradientReducer>(
                   *comm, params, bucket_mb << 20,
                   zero2 ? train::GradientReduction::ReduceScatter : train::GradientReduction::AllReduce)
             : nullptr;
    std::unique_ptr<train::AdamW> optimizer = zero ? nullptr : std::make_unique<train::AdamW>(params, adamw);
    std::unique_ptr<train::ShardedAdamW> sharded =
        zero ? std::make_unique<train::ShardedAdamW>(*reducer, adamw) : nullptr;
    struct HookGuard {  // the hook points at the reducer: gone before it is
      model::TrainableModel& model;
      ~HookGuard() { model.set_backward_hook(nullptr); }
    } hook_guard{trainable};
    if (overlap) trainable.set_backward_hook([r = reducer.get()](int64_t stage) { r->on_backward_stage(stage); });
    const int64_t tokens = seq * batch;
    // Every position but each sequence's last is a target, on every rank: 1 / global targets scales the loss.
    const float loss_scale = 1.0f / static_cast<float>(static_cast<int64_t>(world) * (tokens - batch));
    std::vector<double> times;
    double last_loss = 0;
    model::StepStats last_stats;
    for (int64_t step = 0; step < warmup + steps; ++step) {
      if (step == warmup) {  // peaks and the SWIFT_PROFILE table count the timed steps only
        memory_reset_peaks(device.is_cuda() ? 1 : 0);
        profile::reset();
      }
      const auto seed = static_cast<uint32_t>(step * world + env.rank + 1);
      model::MicroBatch mb;
      {
        SWIFT_PROFILE("(host: the bench's batch, before the step's timer starts)");
        mb = random_batch(config.vocab_size, seq, batch, seed);
      }
      const auto t0 = std::chrono::steady_clock::now();
      SWIFT_PROFILE("(whole step: forward, backward, clip, adamw)");  // SWIFT_PROFILE=1: the ops' share of it
      if (zero_grad_first || step == 0) trainable.zero_grad();
      if (overlap) reducer->expect_last_backward();
      last_stats = trainable.forward_backward(mb, loss_scale, seed, checkpointing);
      if (reducer) reducer->finish();
      // All return a host float: they synchronise. Plain AdamW folds the clip into its step, as the trainer.
      float clip_scale = 1.0f;
      if (zero2) {
        (void)sharded->clip_shard_gradients(1.0);
      } else if (sharded || clip_in_place) {
        (void)train::clip_gradients(params, 1.0);
      } else {
        (void)train::measure_gradients(params, 1.0, &clip_scale);
      }
      if (sharded) {
        sharded->step(1e-4);
      } else {
        SWIFT_PROFILE("(host: AdamW::step, after the norm's read-back)");
        optimizer->step(1e-4, clip_scale);
      }
      if (!zero_grad_first) {  // as the trainer: queued behind the update, for the next step
        no_defer_zero_grad ? trainable.zero_grad() : trainable.defer_zero_grad();
      }
      (void)params[0].value.slice_rows(0, 1).to(Device::cpu());  // sync after the update (a small read: the trainer
                                                                  // has no such pass over a gradient)
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (step >= warmup) times.push_back(seconds);
      last_loss = last_stats.loss_sum / static_cast<double>(std::max<int64_t>(last_stats.tokens, 1));
      std::fprintf(stderr, "step %lld: %.4f s, loss %.4f\n", static_cast<long long>(step), seconds, last_loss);
    }
    double timed_s = 0;  // this rank's timed steps: the wall time of the profiled interval
    for (double t : times) timed_s += t;
    // A data-parallel step lasts as long as its slowest rank's.
    const std::vector<double> every_rank_times = values_of_every_rank(comm.get(), times);
    for (size_t s = 0; s < times.size(); ++s) {
      for (int r = 0; r < world; ++r) {
        times[s] = std::max(times[s], every_rank_times[static_cast<size_t>(r) * times.size() + s]);
      }
    }
    std::sort(times.begin(), times.end());
    const double step_s = times[times.size() / 2];
    const double flops = forward_flops_per_token(config, seq) * (type == model::TunerType::Lora ? 2 : 3) * tokens;
    const MemoryStats mem = memory_stats(device.is_cuda() ? 1 : 0);
    const double peak_gib = static_cast<double>(mem.total_peak) / 1073741824.0;
    const std::vector<double> every_rank_peak = values_of_every_rank(comm.get(), {peak_gib});
    if (comm) {  // the loss of the last step over every rank's targets
      const std::vector<double> sum =
          train::sum_across_ranks(*comm, {last_stats.loss_sum, static_cast<double>(last_stats.tokens)});
      last_loss = sum[0] / std::max(sum[1], 1.0);
    }
    if (env.rank == 0) {
      std::string json = fmt::format("{{\"impl\": \"swift.cpp\", \"config\": \"{}\", \"tuner\": \"{}\", \"seq\": {}, \"batch\": {}, "
                                     "\"lora_dropout\": {}, \"gradient_checkpointing\": {}, \"recompute_num_layers\": {}, \"recompute_modules\": \"{}\", "
                                     "\"cpu_offloading_num_layers\": {}, \"offload_host_gib\": {:.2f}, \"offload_frozen_layers\": {}, "
                                     "\"frozen_host_gib\": {:.2f}, "
                                     "\"trainable\": {}, "
                                     "\"step_s_median\": {:.4f}, "
                                     "\"tokens_per_s\": {:.1f}, \"model_tflops\": {:.1f}, \"peak_allocated_gib\": {:.2f}, "
                                     "\"last_loss\": {:.4f}}}",
                                     config_path, tuner, seq, batch,
                                     tuner == "lora" ? fmt::format("{}", dropout) : std::string("null"), checkpointing, recompute_layers, fmt::join(recompute_names, ","),
                                     offload_layers, trainable.offload_host_bytes() / 1073741824.0,
                                     frozen_layers, trainable.frozen_host_bytes() / 1073741824.0,
                                     trainable.trainable_count(), step_s,
                                     tokens / step_s, flops / step_s / 1e12, mem.total_peak / 1073741824.0, last_loss);
      if (comm) {
        json.pop_back();  // the closing brace: the data-parallel fields follow
        json += fmt::format(", \"world_size\": {}, \"global_tokens_per_s\": {:.1f}, \"per_gpu_tokens_per_s\": {:.1f}, "
                            "\"peak_allocated_gib_max_rank\": {:.2f}, \"zero\": {}, \"bucket_mb\": {}, \"overlap\": {}, "
                            "\"buckets\": {}, \"buckets_started_during_backward\": {}, \"comm_backend\": \"{}\"}}",
                            world, static_cast<double>(world) * tokens / step_s, tokens / step_s,
                            *std::max_element(every_rank_peak.begin(), every_rank_peak.end()), zero_stage, bucket_mb,
                            overlap, reducer->layout().buckets.size(), reducer->started_during_backward(),
                            comm->backend());
      }
      if (profile::enabled()) {  // the timed steps' categories, per step (this rank's)
        const profile::Breakdown b = profile::breakdown(timed_s);
        const double per_step = 1e3 / static_cast<double>(times.size());
        const char* mode = profile::mode() == profile::Mode::Events ? "events" : "sync";
        std::string fields, line;
        auto add = [&](const char* name, double s) {
          fields += fmt::format("{}\"{}\": {:.3f}", fields.empty() ? "" : ", ", name, s * per_step);
          line += fmt::format(" {} {:.2f} ms ({:.1f}%)", name, s * per_step, 100.0 * s / std::max(timed_s, 1e-12));
        };
        for (const auto& [name, s] : b.seconds) add(name, s);
        add("idle", b.idle_s);
        std::fprintf(stderr, "breakdown per step (SWIFT_PROFILE=%s, mean of %zu timed steps, %.2f ms):%s\n", mode,
                     times.size(), timed_s * per_step, line.c_str());
        json.pop_back();
        json += fmt::format(", \"profile\": \"{}\", \"breakdown_ms\": {{{}}}}}", mode, fields);
      }
      std::printf("%s\n", json.c_str());
      std::fflush(stdout);
    }
    std::fprintf(stderr, "%s", memory_report(device.is_cuda() ? 1 : 0).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    if (comm) {  // the other ranks stop at once instead of waiting for the timeout
      try {
        comm->abort(e.what());
      } catch (const std::exception&) {  // already aborted: the launcher stops the others
      }
    }
    return 1;
  }
  return 0;
}
