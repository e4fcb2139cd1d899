// bench/bench_train_step.cpp — one training configuration timed end to end: random weights of the architecture
// in a config.json (built on the target device, no checkpoint needed), LoRA or full fine-tuning, packed batches
// of random tokens, forward + backward + clip + AdamW per step. The peer is scripts/bench/peer_train_step.py
// (transformers + PEFT on the same shapes); scripts/device/bench-train.sh runs both in one call.
//
//   bench_train_step --config bench/configs/qwen2.5-7b.json --tuner lora --seq 2048 --batch 4
//       [--gradient_checkpointing [--recompute_num_layers N]] [--steps 6] [--warmup 2] [--device cuda|cpu]
//   SWIFT_PROFILE=1 bench_train_step ...   adds a per-op time table (ops bracketed by synchronisations)
//
// Invariants: prints exactly one JSON line (fields as the peer's) on success; the FLOP count is the peer's
// formula (forward FLOPs per token x2 for LoRA, x3 for full); times are medians of the timed steps, each step
// ending with a host read of the gradient norm (a device synchronisation).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "core/error.h"
#include "core/profile.h"
#include "core/memory.h"
#include "io/model_config.h"
#include "model/causal_lm.h"
#include "model/lora.h"
#include "model/training.h"
#include "ops/backends.h"
#include "ops/ops.h"
#include "train/optimizer.h"

using namespace swift;

namespace {

double forward_flops_per_token(const io::ModelConfig& c, int64_t seq) {
  const double C = c.hidden_size, F = c.intermediate_size, Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const double D = c.head_dim;
  const double per_layer = 2 * (C * Hq * D + 2 * C * Hkv * D + Hq * D * C + 3 * C * F);
  const double attention = 2.0 * seq * Hq * D;
  return c.num_hidden_layers * (per_layer + attention) + 2 * C * c.vocab_size;
}

// Random weights of the architecture, made on `device`: matrices in `matrix_dtype` filled from one random pool
// (copied with rotating offsets: values only need to be non-degenerate for timing), norms 1, biases small.
std::map<std::string, Tensor> random_weights(const io::ModelConfig& c, Device device, DType matrix_dtype) {
  std::mt19937 gen(1234);
  std::uniform_real_distribution<float> uni(-0.03f, 0.03f);
  const int64_t pool_n = int64_t{1} << 22;
  std::vector<float> pool_values(static_cast<size_t>(pool_n));
  for (float& v : pool_values) v = uni(gen);
  Tensor pool_f32 = Tensor::from_f32({pool_n}, pool_values);
  Tensor pool_host = Tensor::empty({pool_n}, matrix_dtype);
  ops::cast(pool_f32, pool_host);
  Tensor pool = pool_host.to(device, MemoryCategory::Workspace);
  int64_t rotate = 0;
  auto matrix = [&](const Shape& shape) {
    Tensor t = Tensor::empty(shape, matrix_dtype, device, MemoryCategory::Weights);
    Tensor flat = t.view({t.numel()});
    for (int64_t done = 0; done < t.numel();) {
      const int64_t offset = (rotate = (rotate + 7919) % (pool_n / 2));
      const int64_t n = std::min(t.numel() - done, pool_n - offset);
      flat.slice_rows(done, done + n).copy_from(pool.slice_rows(offset, offset + n));
      done += n;
    }
    return t;
  };
  auto vector = [&](int64_t n, float value) {
    return Tensor::from_f32({n}, std::vector<float>(static_cast<size_t>(n), value)).to(device, MemoryCategory::Weights);
  };
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  std::map<std::string, Tensor> w;
  w["model.embed_tokens.weight"] = matrix({V, C});
  w["model.norm.weight"] = vector(C, 1.0f);
  if (!c.tie_word_embeddings) w["lm_head.weight"] = matrix({V, C});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w[p + "input_layernorm.weight"] = vector(C, 1.0f);
    w[p + "post_attention_layernorm.weight"] = vector(C, 1.0f);
    w[p + "self_attn.q_proj.weight"] = matrix({Hq * D, C});
    w[p + "self_attn.k_proj.weight"] = matrix({Hkv * D, C});
    w[p + "self_attn.v_proj.weight"] = matrix({Hkv * D, C});
    w[p + "self_attn.o_proj.weight"] = matrix({C, Hq * D});
    if (c.attention_bias) {
      w[p + "self_attn.q_proj.bias"] = vector(Hq * D, 0.01f);
      w[p + "self_attn.k_proj.bias"] = vector(Hkv * D, 0.01f);
      w[p + "self_attn.v_proj.bias"] = vector(Hkv * D, 0.01f);
    }
    if (c.attention_output_bias) w[p + "self_attn.o_proj.bias"] = vector(C, 0.01f);
    if (c.qk_norm) {
      w[p + "self_attn.q_norm.weight"] = vector(D, 1.0f);
      w[p + "self_attn.k_norm.weight"] = vector(D, 1.0f);
    }
    w[p + "mlp.gate_proj.weight"] = matrix({F, C});
    w[p + "mlp.up_proj.weight"] = matrix({F, C});
    w[p + "mlp.down_proj.weight"] = matrix({C, F});
    if (c.mlp_bias) {
      w[p + "mlp.gate_proj.bias"] = vector(F, 0.01f);
      w[p + "mlp.up_proj.bias"] = vector(F, 0.01f);
      w[p + "mlp.down_proj.bias"] = vector(C, 0.01f);
    }
  }
  return w;
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

}  // namespace

int main(int argc, char** argv) {
  ops::tune_cpu_environment(argc, argv);
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
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--lora_rank", rank);
  app.add_option("--lora_alpha", alpha);
  app.add_option("--lora_dropout", dropout);
  app.add_option("--device", device_name, "cuda | cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_flag("--gradient_checkpointing", checkpointing);
  int64_t recompute_layers = -1;
  app.add_option("--recompute_num_layers", recompute_layers,
                 "with --gradient_checkpointing: recompute only the first N layers (default: all)");
  CLI11_PARSE(app, argc, argv);
  try {
    const Device device = device_name == "cpu" ? Device::cpu() : Device::cuda(0);
    SWIFT_CHECK(device.is_cpu() || ops::cuda_device_count() > 0,
                "--device cuda: no CUDA device visible (or this build has no CUDA backend); use --device cpu");
    const DType matrix_dtype = device.is_cuda() ? DType::BF16 : DType::F32;
    io::ModelConfig config = io::load_model_config(config_path);
    auto lm = model::CausalLM::from_weights(config, random_weights(config, device, matrix_dtype));
    const model::TunerType type = model::tuner_type_from_string(tuner);
    model::LoraAdapters adapters;
    if (type == model::TunerType::Lora) {
      model::LoraSettings settings;
      settings.rank = rank;
      settings.alpha = alpha;
      settings.dropout = dropout;
      adapters = model::create_lora(config, settings);
    }
    model::TrainableModel trainable(*lm, type, std::move(adapters));
    trainable.set_recompute_layers(recompute_layers);
    ops::AdamWConfig adamw;
    adamw.weight_decay = 0.1;
    train::AdamW optimizer(trainable.parameters(), adamw);
    const int64_t tokens = seq * batch;
    std::vector<double> times;
    double last_loss = 0;
    for (int64_t step = 0; step < warmup + steps; ++step) {
      if (step == warmup) memory_reset_peaks(device.is_cuda() ? 1 : 0);
      model::MicroBatch mb = random_batch(config.vocab_size, seq, batch, static_cast<uint32_t>(step + 1));
      const auto t0 = std::chrono::steady_clock::now();
      SWIFT_PROFILE("(whole step: forward, backward, clip, adamw)");  // SWIFT_PROFILE=1: the ops' share of it
      trainable.zero_grad();
      model::StepStats stats = trainable.forward_backward(mb, 1.0f / static_cast<float>(tokens - batch),
                                                          static_cast<uint64_t>(step + 1), checkpointing);
      train::clip_gradients(trainable.parameters(), 1.0);  // returns a host float: synchronises
      optimizer.step(1e-4);
      (void)ops::grad_norm(std::span<const Tensor>(&trainable.parameters()[0].grad, 1));  // sync after the update
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (step >= warmup) times.push_back(seconds);
      last_loss = stats.loss_sum / static_cast<double>(std::max<int64_t>(stats.tokens, 1));
      std::fprintf(stderr, "step %lld: %.4f s, loss %.4f\n", static_cast<long long>(step), seconds, last_loss);
    }
    std::sort(times.begin(), times.end());
    const double step_s = times[times.size() / 2];
    const double flops = forward_flops_per_token(config, seq) * (type == model::TunerType::Lora ? 2 : 3) * tokens;
    const MemoryStats mem = memory_stats(device.is_cuda() ? 1 : 0);
    std::printf("%s\n", fmt::format("{{\"impl\": \"swift.cpp\", \"config\": \"{}\", \"tuner\": \"{}\", \"seq\": {}, \"batch\": {}, "
                                    "\"gradient_checkpointing\": {}, \"recompute_num_layers\": {}, \"trainable\": {}, "
                                    "\"step_s_median\": {:.4f}, "
                                    "\"tokens_per_s\": {:.1f}, \"model_tflops\": {:.1f}, \"peak_allocated_gib\": {:.2f}, "
                                    "\"last_loss\": {:.4f}}}",
                                    config_path, tuner, seq, batch, checkpointing, recompute_layers, trainable.trainable_count(), step_s,
                                    tokens / step_s, flops / step_s / 1e12, mem.total_peak / 1073741824.0, last_loss)
                            .c_str());
    std::fprintf(stderr, "%s", memory_report(device.is_cuda() ? 1 : 0).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
