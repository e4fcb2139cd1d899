// bench/random_weights.h — random weights of the architecture in a config.json, made directly on the target device,
// for benchmarks that need the shapes of a model and not its checkpoint (bench_decode, bench_train_step).
//
// Invariants: matrices (V, C), (Hq*D, C), ... in `matrix_dtype` are filled by device-to-device copies from one pool of
// 4M values drawn once on the host (uniform in [-0.03, 0.03): non-degenerate activations, cheap to make even for 7B
// models), at rotating offsets; norm weights are 1, biases 0.01 (F32, as CausalLM keeps vectors). Deterministic.
#pragma once

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/model_config.h"
#include "ops/ops.h"

namespace swift::bench {

inline std::map<std::string, Tensor> random_weights(const io::ModelConfig& c, Device device, DType matrix_dtype) {
  const int64_t pool_n = int64_t{1} << 22;
  std::mt19937 gen(1234);
  std::uniform_real_distribution<float> uniform(-0.03f, 0.03f);
  std::vector<float> values(static_cast<size_t>(pool_n));
  for (float& v : values) v = uniform(gen);
  Tensor pool_host = Tensor::empty({pool_n}, matrix_dtype);
  ops::cast(Tensor::from_f32({pool_n}, values), pool_host);
  const Tensor pool = pool_host.to(device, MemoryCategory::Workspace);
  int64_t offset = 0;
  auto matrix = [&](const Shape& shape) {
    Tensor t = Tensor::empty(shape, matrix_dtype, device, MemoryCategory::Weights);
    Tensor flat = t.view({t.numel()});
    for (int64_t done = 0; done < t.numel();) {
      offset = (offset + 104729) % (pool_n / 2);
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
      for (const char* b : {"q_proj", "k_proj", "v_proj"}) {
        w[p + "self_attn." + b + ".bias"] = vector(std::string(b) == "q_proj" ? Hq * D : Hkv * D, 0.01f);
      }
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

}  // namespace swift::bench
