// apps/model_setup.h — what every model-using subcommand loads from --model: the model, its tokenizer, the chat
// template (--template or detected) and the chat encoder (--system, --loss_scale), plus the files a full
// checkpoint copies (config.json, tokenizer files).
//
// Invariants: a missing --model, an unknown --template or a model without a tokenizer fails with a message
// naming the argument and what to do; nothing is loaded twice.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/arguments_structs.h"
#include "data/encode.h"
#include "model/causal_lm.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace swift::apps {

struct LoadedModel {
  std::unique_ptr<model::CausalLM> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::unique_ptr<text::ChatTemplate> chat_template;
  text::TemplateOptions template_options;
  std::unique_ptr<data::TemplateChatEncoder> encoder;
  nlohmann::json config_json;                // config.json of the model (built from GGUF metadata for .gguf)
  std::vector<std::string> tokenizer_files;  // files to copy into full checkpoints
};

LoadedModel load_model_for(const ModelArguments& model_args, const DataArguments& data_args);

// Where training runs, as ms-swift picks it: CUDA device `local_rank` when this build has CUDA and a device is
// visible (CUDA_VISIBLE_DEVICES="" keeps the CPU), else the CPU. On CUDA the matrices are stored as --torch_dtype
// (bfloat16 by default; float16, which the caller trains with dynamic loss scaling: cmd_sft sets
// TrainerConfig::loss_scaling when `activations` is F16; float32 for exactness checks) and the activations take the
// same dtype; on the CPU everything computes in F32 (stored weights keep their dtype, --torch_dtype is ignored).
struct Placement {
  Device device;
  DType activations = DType::F32;  // == the matrices' dtype on CUDA (BF16, F16 or F32); F32 on the CPU
};
Placement place_model_for_training(model::CausalLM& model, const ModelArguments& model_args, int local_rank);

// Where inference (swift infer) runs: the same choice as training (CUDA device 0 of CUDA_VISIBLE_DEVICES when this
// build has CUDA and a device is visible, else the CPU), overridden by --device_map (ms-swift's model argument):
// "cpu" forces the CPU, "cuda" / "cuda:N" / N picks a device, "auto" (or none) is the default choice. On CUDA the
// matrices are stored as --torch_dtype (bfloat16 by default, float16, float32 for exactness) and activations, the
// KV cache and the LM head's logits take that dtype (fp32 accumulation and softmax). Call before set_lora (or after:
// the adapters move with the model).
Placement place_model_for_inference(model::CausalLM& model, const ModelArguments& model_args,
                                    const nlohmann::json& device_map);

// A Hugging Face config.json for `config` (used when the model came from a GGUF file).
nlohmann::json hf_config_json(const io::ModelConfig& config);

}  // namespace swift::apps
