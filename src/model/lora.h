// model/lora.h — LoRA adapters of the llama-family model with PEFT semantics: which linear layers get one
// (--target_modules all-linear | names, --target_regex), initialisation (--init_weights), scaling
// (alpha / r, or alpha / sqrt(r) with --use_rslora), and conversion to and from PEFT's saved tensors.
//
// Invariants:
//  - A and B are F32 (trainable parameters are F32 whatever the base weights' dtype): A (r, K), B (M, r) for a
//    linear y = x W^T with W (M, K). The layer computes y = x W^T + scale * dropout(x) A^T B^T.
//  - "all-linear" selects every linear layer of the decoder (q, k, v, o, gate, up, down) and never lm_head, as
//    PEFT does for causal LMs. Names match the last component of the module path (q_proj) or the full path;
//    a regex must match the full module path (PEFT's re.fullmatch).
//  - Default init: A Kaiming-uniform (a = sqrt(5), i.e. U(-1/sqrt(K), 1/sqrt(K))), B zero; "gaussian": A normal
//    with std 1/r, B zero; "false": both random (for tests of non-zero updates). Seeded and reproducible
//    (core/seed.h: one stream per (layer, module)).
//  - DoRA (--use_dora, linear layers only, as PEFT): every adapted linear also holds a magnitude vector (M) F32,
//    initialised after A and B to the row norms of W + scale * B A (PEFT's DoraLinearLayer.update_layer), saved as
//    "<module>.lora_magnitude_vector". The weight norm itself is never stored: it is recomputed from the current
//    A and B wherever the layer runs (training: every forward; inference: once in CausalLM::set_lora).
//  - modules_to_save (embed_tokens, lm_head): full F32 copies of the base tables, trained and saved as
//    "base_model.model.<module>.weight". As PEFT (ensure_weight_tying false), a copy replaces the module it names
//    only: with tied embeddings, saving embed_tokens alone leaves the LM head on the frozen base table.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"

namespace swift::model {

struct ModelWeights;  // model/causal_lm.h

enum class LinearKind : int { Q, K, V, O, Gate, Up, Down };
constexpr int kLinearKinds = 7;
// "self_attn.q_proj", ..., "mlp.down_proj"
const char* linear_module_suffix(LinearKind kind);
// "model.layers.<layer>.self_attn.q_proj"
std::string linear_module_path(int64_t layer, LinearKind kind);
// (M, K) of the linear's weight W.
std::array<int64_t, 2> linear_shape(const io::ModelConfig& config, LinearKind kind);

struct LoraSettings {
  int64_t rank = 8;
  double alpha = 32;
  double dropout = 0.05;
  std::vector<std::string> target_modules = {"all-linear"};
  std::string target_regex;
  bool use_rslora = false;
  bool use_dora = false;
  std::string init_weights = "true";  // true | gaussian | false
  std::vector<std::string> modules_to_save;  // embed_tokens | lm_head (also model.embed_tokens)
  uint64_t seed = 42;
};

struct LoraLinear {
  Tensor a;          // (r, K) F32
  Tensor b;          // (M, r) F32
  Tensor magnitude;  // (M) F32: DoRA's lora_magnitude_vector; undefined for plain LoRA
  bool defined() const { return a.defined(); }
  bool dora() const { return magnitude.defined(); }
};

struct LoraAdapters {
  io::PeftLoraConfig config;
  float scale = 0;        // alpha / r or alpha / sqrt(r)
  float dropout = 0;
  std::vector<std::array<LoraLinear, kLinearKinds>> layers;  // [layer][kind]; undefined where not targeted
  Tensor embed_tokens, lm_head;  // modules_to_save: trained F32 copies (V, C), or undefined
  int64_t parameter_count() const;
  int64_t adapted_linears() const;
};

// New adapters for `config` (PEFT initialisation). Throws naming target modules that match nothing. `weights` (the
// base model's) is required for DoRA (the magnitude starts at the weight norm) and for modules_to_save (copies).
LoraAdapters create_lora(const io::ModelConfig& config, const LoraSettings& settings,
                         const ModelWeights* weights = nullptr);
// Adapters from a PEFT directory's contents; checks every tensor maps to a linear of the model (or to a module of
// modules_to_save) with the right shapes, naming the first that does not; DoRA adapters need a magnitude vector per
// adapted linear.
LoraAdapters lora_from_peft(const io::PeftAdapter& adapter, const io::ModelConfig& config);
// PEFT's saved form (names, config) of the adapters; tensors are views of the adapters' (no copy).
io::PeftAdapter lora_to_peft(const LoraAdapters& adapters, const std::string& base_model_name_or_path);
// Module paths of PEFT's modules_to_save as this model names them: "model.embed_tokens", "lm_head".
constexpr const char* kEmbedModule = "model.embed_tokens";
constexpr const char* kLmHeadModule = "lm_head";

}  // namespace swift::model
