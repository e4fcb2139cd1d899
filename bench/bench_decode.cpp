// bench/bench_decode.cpp — generation timed end to end: random weights of the architecture in a config.json (made on
// the target device, no checkpoint needed), batch 1, a random prompt, greedy decoding through the KV cache exactly as
// `swift infer` runs it (CausalLM::forward_cached: prefill on the device, one step per token, the last position's
// logits copied to the host, argmax there). The peer is scripts/bench/peer_decode.py (transformers generate on the
// same shapes); scripts/device/bench-decode.sh runs both in one call.
//
//   bench_decode --config bench/configs/qwen2.5-7b.json [--prompt 512] [--new_tokens 128] [--runs 3] [--warmup 1]
//       [--device cuda|cpu] [--dtype bfloat16|float32] [--cuda_graphs both|on|off]
//   SWIFT_PROFILE=1 bench_decode ...   adds a per-op time table (ops bracketed by synchronisations; graphs are off then)
//
// --cuda_graphs (CUDA only; default both): decoding steps replayed from CUDA graphs (on), the same kernels launched one
// by one (off, as SWIFT_CUDA_GRAPHS=0), or both in this one process, graphs first, each with its own warm-up.
//
// Invariants: prints one JSON line (fields as the peer's, plus cuda_graphs, graph_replays and graphs_captured of the
// last timed run) per mode on success; the CPU has one mode (cuda_graphs false). Prefill = from the prompt's ids to its
// last logits on the host (the first new token can be picked); decode = the remaining new_tokens - 1 steps, each
// ending with its logits on the host (a synchronisation). Figures are medians over the timed runs, each on a fresh
// cache; the first `warmup` runs are not timed.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/random_weights.h"
#include "core/error.h"
#include "core/memory.h"
#include "io/model_config.h"
#include "model/causal_lm.h"
#include "model/decode_plan.h"
#include "ops/backends.h"
#include "ops/device_graph.h"
#include "ops/ops.h"

using namespace swift;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int32_t argmax(const Tensor& logits) {
  const float* p = logits.data<float>();
  return static_cast<int32_t>(std::max_element(p, p + logits.numel()) - p);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  ops::tune_cpu_environment(argc, argv);
  ops::init_backends();
  CLI::App app{"bench_decode: time prefill and greedy decoding on random weights of a config.json"};
  std::string config_path, device_name = "cuda", dtype_name_arg = "bfloat16", graphs_arg = "both";
  int64_t prompt = 512, new_tokens = 128, runs = 3, warmup = 1;
  app.add_option("--config", config_path, "config.json of the architecture")->required();
  app.add_option("--prompt", prompt, "prompt tokens");
  app.add_option("--new_tokens", new_tokens, "tokens generated per run");
  app.add_option("--runs", runs, "timed runs");
  app.add_option("--warmup", warmup, "untimed runs first");
  app.add_option("--device", device_name, "cuda | cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--dtype", dtype_name_arg, "bfloat16 | float32 (matrices and activations; the CPU computes in F32)")
      ->check(CLI::IsMember({"bfloat16", "float32"}));
  app.add_option("--cuda_graphs", graphs_arg, "both | on | off: decoding steps replayed from CUDA graphs or launched op by op")
      ->check(CLI::IsMember({"both", "on", "off"}));
  CLI11_PARSE(app, argc, argv);
  try {
    SWIFT_CHECK(prompt > 0 && new_tokens > 1 && runs > 0 && warmup >= 0,
                "--prompt and --runs must be positive, --new_tokens above 1, --warmup non-negative");
    const Device device = device_name == "cpu" ? Device::cpu() : Device::cuda(0);
    SWIFT_CHECK(device.is_cpu() || ops::cuda_device_count() > 0,
                "--device cuda: no CUDA device visible (or this build has no CUDA backend); use --device cpu");
    const DType matrix_dtype = dtype_name_arg == "float32" ? DType::F32 : DType::BF16;
    const io::ModelConfig config = io::load_model_config(config_path);
    auto lm = model::CausalLM::from_weights(config, bench::random_weights(config, device, matrix_dtype));
    std::mt19937 gen(7);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config.vocab_size - 1));
    std::vector<int32_t> ids(static_cast<size_t>(prompt));
    for (int32_t& id : ids) id = token(gen);

    std::vector<bool> modes;
    if (device.is_cpu() || graphs_arg == "off") modes = {false};
    else if (graphs_arg == "on") modes = {true};
    else modes = {true, false};
    for (const bool graphs : modes) {
      ops::set_cuda_graphs_enabled(graphs);
      std::vector<double> prefill_times, decode_times;
      std::vector<int32_t> generated;
      model::DecodeStats stats;
      for (int64_t run = 0; run < warmup + runs; ++run) {
        if (run == warmup) memory_reset_peaks(device.is_cuda() ? 1 : 0);
        auto cache = lm->new_kv_cache(prompt + new_tokens);
        generated.clear();
        const auto t0 = std::chrono::steady_clock::now();
        Tensor logits = lm->forward_cached(ids, cache);
        generated.push_back(argmax(logits));
        const double prefill = seconds_since(t0);
        const auto t1 = std::chrono::steady_clock::now();
        for (int64_t i = 1; i < new_tokens; ++i) {
          logits = lm->forward_cached({generated.back()}, cache);
          generated.push_back(argmax(logits));
        }
        const double decode = seconds_since(t1);
        stats = model::decode_stats(cache);
        std::fprintf(stderr, "%s run %lld: prefill %.4f s, decode %.4f s (%.1f tokens/s; %lld graph replays)%s\n",
                     graphs ? "graphs" : "eager", static_cast<long long>(run), prefill, decode,
                     static_cast<double>(new_tokens - 1) / decode, static_cast<long long>(stats.graph_replays),
                     run < warmup ? " (warm-up)" : "");
        if (run >= warmup) {
          prefill_times.push_back(prefill);
          decode_times.push_back(decode);
        }
      }
      const double prefill_s = median(prefill_times), decode_s = median(decode_times);
      const MemoryStats mem = memory_stats(device.is_cuda() ? 1 : 0);
      std::string first;
      for (size_t i = 0; i < std::min<size_t>(8, generated.size()); ++i) first += (i ? ", " : "") + std::to_string(generated[i]);
      std::printf("%s\n",
                  fmt::format("{{\"impl\": \"swift.cpp\", \"config\": \"{}\", \"device\": \"{}\", \"dtype\": \"{}\", "
                              "\"cuda_graphs\": {}, \"prompt\": {}, \"new_tokens\": {}, \"prefill_s\": {:.4f}, "
                              "\"prefill_tokens_per_s\": {:.1f}, \"decode_tokens_per_s\": {:.1f}, \"ms_per_token\": {:.3f}, "
                              "\"total_s\": {:.4f}, \"e2e_tokens_per_s\": {:.1f}, \"peak_allocated_gib\": {:.2f}, "
                              "\"graph_replays\": {}, \"graphs_captured\": {}, \"first_ids\": [{}]}}",
                              config_path, device.str(), dtype_name_arg, graphs ? "true" : "false", prompt, new_tokens,
                              prefill_s, static_cast<double>(prompt) / prefill_s,
                              static_cast<double>(new_tokens - 1) / decode_s,
                              1e3 * decode_s / static_cast<double>(new_tokens - 1), prefill_s + decode_s,
                              static_cast<double>(new_tokens) / (prefill_s + decode_s), mem.total_peak / 1073741824.0,
                              stats.graph_replays, stats.graphs_captured, first)
                      .c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode: %s\n", e.what());
    return 1;
  }
  return 0;
}
