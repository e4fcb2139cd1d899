// io/model_config.h — the architecture description of a decoder-only model, read from a Hugging Face
// config.json (or built from GGUF metadata by io/gguf_model.h).
//
// Invariants:
//  - Supported model_type: llama, qwen2, qwen3, mistral. Any other model_type throws an error naming it and
//    listing the supported ones.
//  - Absent fields take the defaults of the transformers config class of that model_type (see
//    model_config.cpp): head_dim = hidden_size / num_attention_heads (qwen3: 128), num_key_value_heads =
//    num_attention_heads when null (qwen2/qwen3 default 32, mistral 8 when absent); rope fields come from
//    "rope_scaling" + "rope_theta" (transformers 4.x) or "rope_parameters" (transformers 5.x).
//  - Missing required fields or inconsistent sizes throw naming the file and the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ops/ops.h"

namespace swift::io {

struct ModelConfig {
  std::string model_type;  // llama | qwen2 | qwen3 | mistral
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  int64_t max_position_embeddings = 2048;
  ops::RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;   // bias on q, k, v projections (qwen2: always; llama: attention_bias)
  bool attention_output_bias = false;  // bias on o_proj (llama's attention_bias covers o_proj too)
  bool mlp_bias = false;         // llama mlp_bias
  bool qk_norm = false;          // qwen3: RMSNorm over head_dim on q and k before RoPE
  int64_t sliding_window = 0;    // 0 = none; mistral's sliding_window, qwen2/3 when use_sliding_window
  int64_t max_window_layers = 0; // qwen2/3: layers >= this index use the sliding window
  // Per-layer attention kind from config.json "layer_types" ("full_attention" | "sliding_attention"), qwen2/3
  // only; when present it decides which layers slide instead of max_window_layers. Empty = not given.
  std::vector<std::string> layer_types;
  std::string hidden_act = "silu";
  std::string torch_dtype = "float32";
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = -1;     // config.json pad_token_id (-1: null or absent); nn.Embedding's padding_idx

  // Window for layer `layer` (0 = full attention).
  int64_t layer_window(int64_t layer) const;
  std::string summary() const;  // one line: type, layers, hidden, heads, params
  int64_t parameter_count() const;
};

// Parses config.json text; `source` names the file in errors.
ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source);
ModelConfig load_model_config(const std::string& path);  // path of config.json

}  // namespace swift::io
