// bench/bench_step.cpp — one LoRA training step and KV-cache decoding of a real model on the CPU, the shapes of
// the main job (scripts/main-job.sh: SmolLM2-135M-Instruct, LoRA r=16 alpha=32 dropout 0.05 on all linear
// layers, micro-batches of 4 packed sequences, no gradient checkpointing; greedy decoding with a KV cache).
//
//   build/bench/bench_step [model.gguf|hf_dir] [--steps N] [--seq L] [--batch B] [--decode N] [--prompt P]
//   SWIFT_PROFILE=1 build/bench/bench_step ...   (adds the per-op time table at exit)
//
// Invariants: not a test (CTest does not run it) and asserts nothing about speed. Reports wall time and the
// process's CPU time (user + sys, getrusage) of each phase, so runs on a shared machine can be compared; the
// first training step and the first decode token are warm-ups, excluded from the figures. Like `swift`, it
// re-executes itself once with the tuned CPU environment (ops::tune_cpu_environment) unless SWIFT_CPU_ENV is set.
#include <omp.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/causal_lm.h"
#include "model/lora.h"
#include "model/training.h"
#include "ops/backends.h"
#include "ops/ops.h"

namespace {

using namespace swift;

double cpu_seconds() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct Clock {
  std::chrono::steady_clock::time_point wall = std::chrono::steady_clock::now();
  double cpu = cpu_seconds();
  double wall_s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count(); }
  double cpu_s() const { return cpu_seconds() - cpu; }
};

// A packed micro-batch of `batch` sequences of `seq` tokens: deterministic pseudo-random ids, the first 40% of
// each sequence is the prompt (no loss), as a chat template's masking would give.
model::MicroBatch make_batch(int64_t batch, int64_t seq, int64_t vocab) {
  std::vector<int32_t> ids, pos, cu{0};
  std::vector<uint8_t> mask;
  uint64_t state = 12345;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      ids.push_back(static_cast<int32_t>((state >> 33) % static_cast<uint64_t>(vocab)));
      pos.push_back(static_cast<int32_t>(t));
      mask.push_back(t >= seq * 2 / 5 ? 1 : 0);
    }
    cu.push_back(static_cast<int32_t>(ids.size()));
  }
  const int64_t T = static_cast<int64_t>(ids.size());
  Tensor m = Tensor::empty({T}, DType::U8);
  std::memcpy(m.raw(), mask.data(), mask.size());
  Tensor tids = Tensor::from_i32({T}, ids), tcu = Tensor::from_i32({batch + 1}, cu);
  return {tids, Tensor::from_i32({T}, pos), tcu, model::shift_labels(tids, m, tcu)};
}

int64_t arg_int(int argc, char** argv, const char* name, int64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) return std::atoll(argv[i + 1]);
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  ops::tune_cpu_environment(argc, argv);  // as swift does: OpenBLAS kernels and threads, OpenMP wait policy
  std::string path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (argc > 1 && argv[1][0] != '-') path = argv[1];
  const int64_t steps = arg_int(argc, argv, "--steps", 3), seq = arg_int(argc, argv, "--seq", 256);
  const int64_t batch = arg_int(argc, argv, "--batch", 4), decode = arg_int(argc, argv, "--decode", 48);
  const int64_t prompt = arg_int(argc, argv, "--prompt", 100);
  try {
    std::printf("%s\nmodel: %s\n", ops::cpu_backend_info().c_str(), path.c_str());
    Clock load;
    auto lm = model::CausalLM::load(path);
    const io::ModelConfig& c = lm->config();
    std::printf("loaded in %.2f s: %lld layers, C=%lld, F=%lld, V=%lld, Hq=%lld, Hkv=%lld\n", load.wall_s(),
                static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size),
                static_cast<long long>(c.intermediate_size), static_cast<long long>(c.vocab_size),
                static_cast<long long>(c.num_attention_heads), static_cast<long long>(c.num_key_value_heads));

    if (steps > 0) {
      model::LoraSettings s;
      s.rank = 16;
      s.alpha = 32;
      s.dropout = 0.05;
      model::TrainableModel tm(*lm, model::TunerType::Lora, model::create_lora(c, s));
      const model::MicroBatch mb = make_batch(batch, seq, c.vocab_size);
      const int64_t T = batch * seq;
      double wall = 0, cpu = 0;
      for (int64_t i = 0; i <= steps; ++i) {
        tm.zero_grad();
        Clock clk;
        const model::StepStats st = tm.forward_backward(mb, 1.0f / 1000.0f, 1000 + static_cast<uint64_t>(i), false);
        const double w = clk.wall_s(), u = clk.cpu_s();
        std::printf("train step %lld: %lld tokens, loss %.4f, %.3f s wall, %.3f CPU-s%s\n", static_cast<long long>(i),
                    static_cast<long long>(T), st.loss_sum / static_cast<double>(std::max<int64_t>(1, st.tokens)), w,
                    u, i == 0 ? " (warm-up)" : "");
        if (i > 0) {
          wall += w;
          cpu += u;
        }
      }
      std::printf("TRAIN: %.1f tokens/s wall, %.1f tokens per CPU-s (%lld x %lld tokens, forward+backward, LoRA r16)\n",
                  static_cast<double>(steps * T) / wall, static_cast<double>(steps * T) / cpu,
                  static_cast<long long>(batch), static_cast<long long>(seq));
    }

    if (decode > 0) {
      std::vector<int32_t> ids;
      for (int64_t i = 0; i < prompt; ++i) ids.push_back(static_cast<int32_t>((i * 7919 + 11) % c.vocab_size));
      auto cache = lm->new_kv_cache(prompt + decode + 1);
      Clock pre;
      Tensor logits = lm->forward_cached(ids, cache);
      std::printf("prefill: %lld tokens in %.3f s wall, %.3f CPU-s\n", static_cast<long long>(prompt), pre.wall_s(),
                  pre.cpu_s());
      auto argmax = [&](const Tensor& l) {
        const float* p = l.data<float>();
        int32_t best = 0;
        for (int64_t v = 1; v < c.vocab_size; ++v)
          if (p[v] > p[best]) best = static_cast<int32_t>(v);
        return best;
      };
      logits = lm->forward_cached({argmax(logits)}, cache);  // warm-up token
      Clock dec;
      for (int64_t i = 0; i < decode; ++i) logits = lm->forward_cached({argmax(logits)}, cache);
      const double w = dec.wall_s(), u = dec.cpu_s();
      std::printf("DECODE: %.2f tokens/s wall, %.2f tokens per CPU-s (%lld tokens after a %lld-token prompt)\n",
                  static_cast<double>(decode) / w, static_cast<double>(decode) / u, static_cast<long long>(decode),
                  static_cast<long long>(prompt));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_step: %s\n", e.what());
    return 1;
  }
  return 0;
}
