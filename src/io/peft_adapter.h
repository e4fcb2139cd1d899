// io/peft_adapter.h — PEFT LoRA adapter directories: adapter_config.json + adapter_model.safetensors.
//
// Invariants:
//  - Tensor names are PEFT's saved names: "base_model.model.<HF module path>.lora_A.weight" / ".lora_B.weight"
//    (the adapter name "default" is not part of saved names), and
//    "base_model.model.<module>.lora_magnitude_vector" for DoRA, "base_model.model.<module>.weight" for
//    modules_to_save (PEFT saves them without the "modules_to_save.default" infix).
//  - Writing is atomic per file (temporary name, then rename) and the config is written last, so a directory
//    with an adapter_config.json always has its complete weights.
//  - Reading validates the config (peft_type LORA, r > 0, target_modules present) and that every lora_A has
//    its lora_B with consistent rank; errors name the directory and the field or tensor.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace swift::io {

struct PeftLoraConfig {
  int64_t r = 8;
  double lora_alpha = 32;
  double lora_dropout = 0.05;
  std::vector<std::string> target_modules;  // module names (q_proj, ...) as PEFT resolved them
  std::string target_regex;                 // when given as a regex string in adapter_config.json
  std::vector<std::string> modules_to_save;
  bool use_rslora = false;
  bool use_dora = false;
  std::string init_lora_weights = "true";   // true | gaussian | false (as written by PEFT: bool or string)
  std::string base_model_name_or_path;
  std::string bias = "none";
  nlohmann::json extra;                     // other fields read from a file, written back unchanged

  // LoRA's output scale: alpha / r, or alpha / sqrt(r) with rsLoRA.
  double scaling() const;
  nlohmann::json to_json() const;
  static PeftLoraConfig from_json(const nlohmann::json& json, const std::string& source);
};

struct PeftAdapter {
  PeftLoraConfig config;
  std::map<std::string, Tensor> tensors;  // PEFT saved names -> CPU tensors
};

// PEFT's saved name of a module's LoRA tensor: ("model.layers.0.self_attn.q_proj", "lora_A") ->
// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight".
std::string peft_lora_name(const std::string& module_path, const std::string& which);
// DoRA: "base_model.model.<module>.lora_magnitude_vector" (PEFT saves it without ".default.weight").
std::string peft_magnitude_name(const std::string& module_path);
// modules_to_save: "base_model.model.<module>.weight" (PEFT saves the trained copy under the module's own name).
std::string peft_module_weight_name(const std::string& module_path);

PeftAdapter load_peft_adapter(const std::string& dir);
void save_peft_adapter(const std::string& dir, const PeftAdapter& adapter);

}  // namespace swift::io
