// apps/model_setup.cpp — loading --model with its tokenizer, template and encoder; placing the model on the device
// training or inference runs on.
#include "apps/model_setup.h"

#include "ops/backends.h"
#include "ops/ops.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace swift::apps {

namespace fs = std::filesystem;

nlohmann::json hf_config_json(const io::ModelConfig& c) {
  nlohmann::json j = {
      {"architectures", {c.model_type == "qwen2"   ? "Qwen2ForCausalLM"
                         : c.model_type == "qwen3" ? "Qwen3ForCausalLM"
                         : c.model_type == "mistral" ? "MistralForCausalLM"
                                                      : "LlamaForCausalLM"}},
      {"model_type", c.model_type},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"rms_norm_eps", c.rms_norm_eps},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rope_theta", c.rope.theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attention_bias},
      {"mlp_bias", c.mlp_bias},
      {"hidden_act", c.hidden_act},
      {"torch_dtype", "float32"},
  };
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (!c.eos_token_ids.empty()) j["eos_token_id"] = c.eos_token_ids.size() == 1 ? nlohmann::json(c.eos_token_ids[0])
                                                                                 : nlohmann::json(c.eos_token_ids);
  if (c.rope.type != ops::RopeType::Default) {
    SWIFT_CHECK(c.rope.type == ops::RopeType::Linear || c.rope.type == ops::RopeType::Dynamic,
                "writing config.json for rope scaling other than linear/dynamic from a GGUF model is not supported");
    j["rope_scaling"] = {{"rope_type", c.rope.type == ops::RopeType::Linear ? "linear" : "dynamic"},
                         {"factor", c.rope.factor}};
  }
  return j;
}

LoadedModel load_model_for(const ModelArguments& m, const DataArguments& d) {
  SWIFT_CHECK(m.model.has_value() && !m.model->empty(),
              "--model is required: a Hugging Face model directory or a .gguf file");
  const std::string& path = *m.model;
  LoadedModel out;
  out.model = model::CausalLM::load(path);
  out.tokenizer = text::Tokenizer::load(path);
  const std::string name = m.template_name.value_or(text::ChatTemplate::detect(out.model->config().model_type,
                                                                                *out.tokenizer));
  out.chat_template = text::ChatTemplate::create(name);
  out.template_options.system = m.system;
  if (d.enable_thinking.has_value()) out.template_options.enable_thinking = *d.enable_thinking;
  out.encoder = std::make_unique<data::TemplateChatEncoder>(*out.tokenizer, *out.chat_template, out.template_options,
                                                            text::loss_scale_from_string(d.loss_scale));
  if (fs::is_directory(path)) {
    std::ifstream in(fs::path(path) / "config.json");
    out.config_json = nlohmann::json::parse(in);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
                          "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja"}) {
      if (fs::exists(fs::path(path) / f)) out.tokenizer_files.push_back((fs::path(path) / f).string());
    }
  } else {
    out.config_json = hf_config_json(out.model->config());
  }
  return out;
}

Placement place_model_for_training(model::CausalLM& model, const ModelArguments& model_args, int local_rank) {
  const std::string dtype = model_args.torch_dtype.value_or("bfloat16");
  if (ops::cuda_device_count() == 0) {
    std::fprintf(stderr, "device: cpu (%s)\n", ops::cpu_backend_info().c_str());
    return {Device::cpu(), DType::F32};
  }
  SWIFT_CHECK(local_rank < ops::cuda_device_count(), "LOCAL_RANK {} needs {} CUDA devices, {} visible", local_rank,
              local_rank + 1, ops::cuda_device_count());
  DType matrices = DType::BF16;
  if (dtype == "float32") {
    matrices = DType::F32;
  } else if (dtype == "float16") {
    matrices = DType::F16;  // with dynamic loss scaling (cmd_sft sets TrainerConfig::loss_scaling)
  } else if (dtype != "bfloat16") {
    fail("--torch_dtype {}: training on CUDA supports bfloat16 (default), float16 (with dynamic loss scaling) and "
         "float32", dtype);
  }
  const Device device = Device::cuda(local_rank);
  model.place(device, matrices);
  std::fprintf(stderr, "device: %s, weights and activations %s\n", device.str().c_str(), dtype_name(matrices));
  return {device, matrices};
}

Placement place_model_for_inference(model::CausalLM& model, const ModelArguments& model_args,
                                    const nlohmann::json& device_map) {
  // --device_map: none / "auto" (and transformers' other automatic maps) choose as training does; "cpu"; a device.
  int index = 0;
  bool want_cpu = false, explicit_device = false;
  if (device_map.is_number_integer()) {
    index = device_map.get<int>();
    explicit_device = true;
  } else if (device_map.is_string()) {
    const std::string map = device_map.get<std::string>();
    if (map == "cpu") {
      want_cpu = true;
    } else if (map == "cuda" || map.rfind("cuda:", 0) == 0) {
      explicit_device = true;
      if (map.size() > 5) {
        const std::string digits = map.substr(5);
        SWIFT_CHECK(!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos,
                    "--device_map '{}': expected cuda:N with N a device index", map);
        index = std::stoi(digits);
      }
    } else if (!map.empty() && map.find_first_not_of("0123456789") == std::string::npos) {
      index = std::stoi(map);
      explicit_device = true;
    } else {
      SWIFT_CHECK(map == "auto" || map == "balanced" || map == "balanced_low_0" || map == "sequential",
                  "--device_map '{}': expected auto, cpu, cuda, cuda:N or a device index (swift.cpp places the whole "
                  "model on one device)", map);
    }
  } else if (!device_map.is_null()) {
    fail("--device_map {}: per-layer maps are not supported; swift.cpp places the whole model on one device (use "
         "auto, cpu or cuda:N)", device_map.dump());
  }
  const int visible = ops::cuda_device_count();
  if (want_cpu || (visible == 0 && !explicit_device)) {
    std::fprintf(stderr, "device: cpu (%s)\n", ops::cpu_backend_info().c_str());
    return {Device::cpu(), DType::F32};
  }
  SWIFT_CHECK(index >= 0 && index < visible, "--device_map: CUDA device {} requested, {} visible{}", index, visible,
              visible == 0 ? " (this build has no CUDA backend, or CUDA_VISIBLE_DEVICES hides every device)" : "");
  const std::string dtype = model_args.torch_dtype.value_or("");
  DType matrices = DType::BF16;
  if (dtype == "float32") {
    matrices = DType::F32;
  } else if (dtype == "float16") {
    matrices = DType::F16;
  } else if (dtype != "bfloat16" && !dtype.empty()) {
    fail("--torch_dtype {}: inference on CUDA supports bfloat16 (default), float16 and float32", dtype);
  }
  const Device device = Device::cuda(index);
  model.place(device, matrices);
  std::fprintf(stderr, "device: %s, weights, activations and KV cache %s\n", device.str().c_str(),
               dtype_name(matrices));
  return {device, matrices};
}

}  // namespace swift::apps
