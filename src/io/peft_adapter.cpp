// io/peft_adapter.cpp — reading and writing PEFT LoRA adapter directories.
#include "io/peft_adapter.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace swift::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kConfigName = "adapter_config.json";
constexpr const char* kWeightsName = "adapter_model.safetensors";
constexpr const char* kPrefix = "base_model.model.";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

double PeftLoraConfig::scaling() const {
  return use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r)) : lora_alpha / static_cast<double>(r);
}

nlohmann::json PeftLoraConfig::to_json() const {
  nlohmann::json j = extra.is_object() ? extra : nlohmann::json::object();
  j["peft_type"] = "LORA";
  j["task_type"] = "CAUSAL_LM";
  j["r"] = r;
  j["lora_alpha"] = lora_alpha;
  j["lora_dropout"] = lora_dropout;
  if (!target_regex.empty()) {
    j["target_modules"] = target_regex;
  } else {
    j["target_modules"] = target_modules;
  }
  j["modules_to_save"] = modules_to_save.empty() ? nlohmann::json(nullptr) : nlohmann::json(modules_to_save);
  j["use_rslora"] = use_rslora;
  j["use_dora"] = use_dora;
  if (init_lora_weights == "true") {
    j["init_lora_weights"] = true;
  } else if (init_lora_weights == "false") {
    j["init_lora_weights"] = false;
  } else {
    j["init_lora_weights"] = init_lora_weights;
  }
  j["base_model_name_or_path"] = base_model_name_or_path;
  j["bias"] = bias;
  j["fan_in_fan_out"] = false;
  j["inference_mode"] = true;
  for (const char* key : {"rank_pattern", "alpha_pattern"}) {
    if (!j.contains(key)) j[key] = nlohmann::json::object();
  }
  return j;
}

PeftLoraConfig PeftLoraConfig::from_json(const nlohmann::json& j, const std::string& source) {
  SWIFT_CHECK(j.is_object(), "'{}': expected a JSON object", source);
  PeftLoraConfig c;
  c.extra = j;
  const std::string peft_type = j.value("peft_type", "");
  SWIFT_CHECK(peft_type == "LORA", "'{}': peft_type is '{}'; only LORA adapters are supported", source, peft_type);
  try {
    c.r = j.at("r").get<int64_t>();
    c.lora_alpha = j.value("lora_alpha", 8.0);
    c.lora_dropout = j.value("lora_dropout", 0.0);
    c.use_rslora = j.value("use_rslora", false);
    c.use_dora = j.value("use_dora", false);
    c.bias = j.value("bias", "none");
    c.base_model_name_or_path = j.contains("base_model_name_or_path") && j["base_model_name_or_path"].is_string()
                                    ? j["base_model_name_or_path"].get<std::string>()
                                    : "";
    const auto& targets = j.at("target_modules");
    if (targets.is_string()) {
      c.target_regex = targets.get<std::string>();
    } else {
      c.target_modules = targets.get<std::vector<std::string>>();
    }
    if (j.contains("modules_to_save") && j["modules_to_save"].is_array()) {
      c.modules_to_save = j["modules_to_save"].get<std::vector<std::string>>();
    }
    if (j.contains("init_lora_weights")) {
      const auto& init = j["init_lora_weights"];
      c.init_lora_weights = init.is_boolean() ? (init.get<bool>() ? "true" : "false") : init.get<std::string>();
    }
  } catch (const nlohmann::json::exception& e) {
    fail("'{}': malformed adapter config: {}", source, e.what());
  }
  SWIFT_CHECK(c.r > 0, "'{}': r must be positive, got {}", source, c.r);
  SWIFT_CHECK(c.bias == "none", "'{}': bias '{}' is not supported (only 'none')", source, c.bias);
  return c;
}

std::string peft_lora_name(const std::string& module_path, const std::string& which) {
  return kPrefix + module_path + "." + which + ".weight";
}

std::string peft_magnitude_name(const std::string& module_path) {
  return kPrefix + module_path + ".lora_magnitude_vector";
}

std::string peft_module_weight_name(const std::string& module_path) { return kPrefix + module_path + ".weight"; }

PeftAdapter load_peft_adapter(const std::string& dir) {
  const fs::path config_path = fs::path(dir) / kConfigName;
  const fs::path weights_path = fs::path(dir) / kWeightsName;
  SWIFT_CHECK(fs::exists(config_path), "--adapters '{}': no {} (is this a PEFT/LoRA checkpoint directory?)", dir,
              kConfigName);
  SWIFT_CHECK(fs::exists(weights_path), "--adapters '{}': no {} (adapters saved as .bin are not supported)", dir,
              kWeightsName);
  nlohmann::json j;
  {
    std::ifstream in(config_path);
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail("'{}': not valid JSON: {}", config_path.string(), e.what());
    }
  }
  PeftAdapter adapter;
  adapter.config = PeftLoraConfig::from_json(j, config_path.string());
  SafetensorsFile file = SafetensorsFile::open(weights_path.string());
  for (const std::string& name : file.names()) adapter.tensors[name] = file.tensor(name);

  // Every lora_A has a matching lora_B of the adapter's rank.
  for (const auto& [name, tensor] : adapter.tensors) {
    if (!ends_with(name, ".lora_A.weight")) continue;
    const std::string module = name.substr(0, name.size() - std::string(".lora_A.weight").size());
    auto b = adapter.tensors.find(module + ".lora_B.weight");
    SWIFT_CHECK(b != adapter.tensors.end(), "'{}': '{}' has no matching lora_B", weights_path.string(), name);
    SWIFT_CHECK(tensor.dim() == 2 && b->second.dim() == 2 && tensor.size(0) == b->second.size(1),
                "'{}': '{}' {} and its lora_B {} disagree on the rank", weights_path.string(), name,
                shape_str(tensor.shape()), shape_str(b->second.shape()));
    SWIFT_CHECK(adapter.config.extra.contains("rank_pattern") && !adapter.config.extra["rank_pattern"].empty()
                    ? true
                    : tensor.size(0) == adapter.config.r,
                "'{}': '{}' has rank {} but adapter_config.json says r = {}", weights_path.string(), name,
                tensor.size(0), adapter.config.r);
  }
  return adapter;
}

void save_peft_adapter(const std::string& dir, const PeftAdapter& adapter) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  SWIFT_CHECK(!ec, "cannot create adapter directory '{}': {}", dir, ec.message());
  save_safetensors((fs::path(dir) / kWeightsName).string(), adapter.tensors, {{"format", "pt"}});
  write_file_atomically((fs::path(dir) / kConfigName).string(), adapter.config.to_json().dump(2) + "\n");
}

}  // namespace swift::io
