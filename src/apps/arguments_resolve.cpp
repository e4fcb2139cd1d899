// apps/arguments_resolve.cpp — what ms-swift computes after parsing (its __post_init__ methods): defaults
// that depend on other options, consistency checks between options, the required options of each
// subcommand, and loading a checkpoint's args.json (--load_args).
//
// Invariants:
//  - Resolution only fills options that are still None (source becomes `resolved`), except where ms-swift
//    overrides unconditionally (padding_free with packing, padding_side for PPO/GKD, remove_unused_columns
//    for GRPO, split_dataset_ratio with a --val_dataset, eval_strategy no without validation data,
//    max_new_tokens = max_completion_length for RLHF); resolving resolved arguments changes nothing, so
//    args.json parsed as a config resolves to itself.
//  - Nothing here reads files or the model; defaults that need config.json (torch_dtype, max_length, ...)
//    stay None for the loader.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "apps/arguments_internal.h"
#include "core/error.h"

namespace swift::apps {

namespace {

using nlohmann::json;

bool in(CommandSet set, Command c) { return (set & command_bit(c)) != 0; }

// A value counts as given when it is not None and not an empty list or string.
bool present(const Arguments& a, std::string_view name) {
  const json& v = a.get_json(name);
  if (v.is_null()) return false;
  if (v.is_array() || v.is_string() || v.is_object()) return !v.empty();
  return true;
}

void fill(Arguments& a, std::string_view name, const json& value) {
  if (a.is_none(name)) a.set(name, value, ValueSource::resolved);
}

void check_at_least(const Arguments& a, std::string_view name, double minimum) {
  const json& v = a.get_json(name);
  if (v.is_number() && v.get<double>() < minimum) {
    fail("--{}: {} is out of range (expected >= {})", name, v.dump(), minimum);
  }
}

void check_fraction(const Arguments& a, std::string_view name, bool include_one) {
  const json& v = a.get_json(name);
  if (!v.is_number()) return;
  double x = v.get<double>();
  if (x < 0 || x > 1 || (!include_one && x == 1)) {
    fail("--{}: {} is out of range (expected 0 <= x {} 1)", name, v.dump(), include_one ? "<=" : "<");
  }
}

std::string model_basename(std::string model) {
  while (model.size() > 1 && model.back() == '/') model.pop_back();
  size_t slash = model.rfind('/');
  std::string name = slash == std::string::npos ? model : model.substr(slash + 1);
  if (name.size() > 5 && name.substr(name.size() - 5) == ".gguf") name.resize(name.size() - 5);
  return name;
}

bool list_contains(const Arguments& a, std::string_view name, std::string_view item) {
  std::vector<std::string> items = a.get_list(name);
  return std::find(items.begin(), items.end(), item) != items.end();
}

void resolve_quantization(Arguments& a) {
  const bool exporting = a.command() == Command::export_;
  if (present(a, "quant_bits") && !present(a, "quant_method")) {
    if (exporting) {
      fail("--quant_bits {} needs --quant_method (awq, gptq, bnb, fp8 or nf4) for swift export",
           a.get_int("quant_bits"));
    }
    a.set("quant_method", "bnb");  // QLoRA: 4-bit NF4 (or 8-bit) base weights, as ms-swift 2's --quantization_bit
  }
  if (!present(a, "quant_method")) return;
  const std::string method = a.get_string("quant_method");
  if (method == "nf4") {
    fill(a, "quant_bits", 4);
    if (a.get_int("quant_bits") != 4) fail("--quant_method nf4 is 4-bit; --quant_bits is {}", a.get_int("quant_bits"));
  }
  // awq/gptq weights of a pre-quantized model carry their bits; fp8 has none to choose.
  const bool needs_bits = exporting ? (method == "awq" || method == "gptq" || method == "gptq_v2" || method == "bnb")
                                    : (method == "bnb" || method == "hqq" || method == "eetq" || method == "quanto");
  if (needs_bits && !present(a, "quant_bits")) {
    fail("--quant_method {} needs --quant_bits (e.g. --quant_bits 4)", method);
  }
  if (method == "bnb" && present(a, "quant_bits") && a.get_int("quant_bits") != 4 && a.get_int("quant_bits") != 8) {
    fail("--quant_method bnb takes --quant_bits 4 or 8, not {}", a.get_int("quant_bits"));
  }
  if (exporting && (method == "awq" || method == "gptq" || method == "gptq_v2")) {
    if (!present(a, "dataset")) fail("--quant_method {} needs calibration data (--dataset)", method);
    fill(a, "torch_dtype", "float16");
  }
}

// --fp16 / --bf16 (transformers' mixed-precision flags) and --torch_dtype. swift.cpp computes in the dtype the weights
// are stored in, so the flags choose that dtype when --torch_dtype is not given (--fp16 true: float16 with dynamic
// loss scaling; --bf16 true: bfloat16); a flag contradicting a given 16-bit --torch_dtype is refused (float32 keeps
// its exact fp32 compute: ms-swift itself resolves fp16 true for float32 weights). Then, as ms-swift's
// _init_mixed_precision: bf16 = (torch_dtype == bfloat16), fp16 = not bf16, where still None.
void resolve_mixed_precision(Arguments& a) {
  const bool fp16 = present(a, "fp16") && a.get_bool("fp16");
  const bool bf16 = present(a, "bf16") && a.get_bool("bf16");
  if (fp16 && bf16) {
    fail("--fp16 true and --bf16 true ask for two compute dtypes; pass one of them (or --torch_dtype float16 / "
         "bfloat16 alone)");
  }
  if (!present(a, "torch_dtype")) {
    if (fp16) a.set("torch_dtype", "float16", ValueSource::resolved);
    if (bf16) a.set("torch_dtype", "bfloat16", ValueSource::resolved);
  } else {
    const std::string dtype = a.get_string("torch_dtype");
    if (fp16 && dtype == "bfloat16") {
      fail("--fp16 true with --torch_dtype bfloat16: swift.cpp computes in the weights' dtype, so fp16 mixed "
           "precision over bfloat16 weights is not available; use --torch_dtype float16 (fp16 compute with dynamic "
           "loss scaling) or drop --fp16");
    }
    if (bf16 && dtype == "float16") {
      fail("--bf16 true with --torch_dtype float16: swift.cpp computes in the weights' dtype; use --torch_dtype "
           "bfloat16 or drop --bf16");
    }
  }
  if (present(a, "torch_dtype")) {
    const bool is_bf16 = a.get_string("torch_dtype") == "bfloat16";
    fill(a, "bf16", is_bf16);
    fill(a, "fp16", !is_bf16);
  }
}

void resolve_training(Arguments& a, int world_size) {
  const Command cmd = a.command();
  const bool grpo = cmd == Command::rlhf && a.get_string("rlhf_type") == "grpo";
  check_at_least(a, "per_device_train_batch_size", 1);
  check_at_least(a, "per_device_eval_batch_size", 1);
  check_at_least(a, "lora_rank", 1);
  check_fraction(a, "lora_dropout", false);
  check_fraction(a, "split_dataset_ratio", false);
  check_fraction(a, "warmup_ratio", true);
  check_at_least(a, "learning_rate", 0);

  fill(a, "learning_rate", a.get_string("tuner_type") == "full" ? 1e-5 : 1e-4);
  if (a.is_none("gradient_accumulation_steps")) {
    int64_t steps = 1;
    if (!grpo) {
      double per_step = static_cast<double>(a.get_int("per_device_train_batch_size")) * std::max(world_size, 1);
      steps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(16.0 / per_step)));
    }
    a.set("gradient_accumulation_steps", steps, ValueSource::resolved);
  }
  check_at_least(a, "gradient_accumulation_steps", 1);

  fill(a, "stream", false);  // generation during training (predict_with_generate) does not stream
  fill(a, "output_dir", present(a, "model") ? "output/" + model_basename(a.get_string("model")) : "output");
  fill(a, "dataloader_num_workers", 1);
  if (a.get_int("dataloader_num_workers") > 0) fill(a, "dataloader_prefetch_factor", 10);
  fill(a, "vit_gradient_checkpointing", a.get_bool("gradient_checkpointing"));
  if (present(a, "lorap_lr_ratio")) fill(a, "optimizer", "lorap");
  if (a.get_bool("use_galore")) fill(a, "optimizer", "galore");
  resolve_mixed_precision(a);

  // Validation data and evaluation schedule.
  if (present(a, "val_dataset") && a.get_float("split_dataset_ratio") > 0) {
    a.set("split_dataset_ratio", 0.0, ValueSource::resolved);
  }
  const bool has_val = present(a, "val_dataset") || present(a, "cached_val_dataset") ||
                       (present(a, "dataset") && a.get_float("split_dataset_ratio") > 0);
  const bool evalscope = a.get_bool("eval_use_evalscope") && present(a, "eval_dataset");
  if (!has_val && !evalscope) {
    // Nothing to evaluate on: no evaluation, even when asked for (as ms-swift).
    if (a.is_none("eval_strategy") || a.get_string("eval_strategy") != "no") {
      a.set("eval_strategy", "no", ValueSource::resolved);
    }
  } else if (a.is_none("eval_strategy")) {
    std::string save = a.get_string("save_strategy");
    a.set("eval_strategy", save == "best" || save == "no" ? "steps" : save, ValueSource::resolved);
  }
  if (a.get_string("eval_strategy") != "no") fill(a, "eval_steps", a.get_int("save_steps"));
  if (a.is_none("metric_for_best_model")) {
    if (grpo) {
      a.set("metric_for_best_model", "reward", ValueSource::resolved);
    } else if (!(cmd == Command::rlhf && a.get_string("rlhf_type") == "ppo")) {
      a.set("metric_for_best_model", a.get_bool("predict_with_generate") ? "rouge-l" : "loss", ValueSource::resolved);
    }
  }
  if (present(a, "metric_for_best_model")) {
    fill(a, "greater_is_better", a.get_string("metric_for_best_model").find("loss") == std::string::npos);
  }

  if (a.get_bool("packing")) {
    a.set("padding_free", true, ValueSource::resolved);  // packed batches are padding-free by construction
    if (present(a, "max_length")) fill(a, "packing_length", a.get_int("max_length"));
  }
}

void resolve_rlhf(Arguments& a, int world_size) {
  const std::string type = a.get_string("rlhf_type");
  const bool grpo = type == "grpo";
  fill(a, "beta", type == "simpo" ? 2.0 : grpo ? 0.04 : type == "gkd" ? 0.5 : 0.1);
  if (a.is_none("loss_type")) {
    const char* loss = type == "dpo" || type == "cpo" ? "sigmoid"
                       : type == "simpo"              ? "simpo"
                       : type == "kto"                ? "kto"
                       : grpo                         ? "grpo"
                                                      : nullptr;
    if (loss != nullptr) a.set("loss_type", json::array({loss}), ValueSource::resolved);
  }
  const size_t n_losses = a.get_list("loss_type").size();
  if (n_losses > 1 && type != "dpo") fail("--loss_type takes several values only for DPO (rlhf_type is {})", type);
  if (present(a, "loss_weights")) {
    if (type != "dpo") fail("--loss_weights is for DPO with several --loss_type values (rlhf_type is {})", type);
    if (a.get_float_list("loss_weights").size() != n_losses) {
      fail("--loss_weights has {} values but --loss_type has {}", a.get_float_list("loss_weights").size(), n_losses);
    }
  }
  // max_new_tokens is ms-swift's older name of max_completion_length here.
  if (present(a, "max_new_tokens")) a.set("max_completion_length", a.get_int("max_new_tokens"), ValueSource::resolved);
  a.set("max_new_tokens", a.get_int("max_completion_length"), ValueSource::resolved);

  if (grpo) {
    fill(a, "truncation_strategy", "left");
    std::string t = a.get_string("truncation_strategy");
    if (t != "left" && t != "delete") fail("--truncation_strategy {}: GRPO takes left or delete", t);
    a.set("remove_unused_columns", false, ValueSource::resolved);
    const std::string estimator = a.get_string("advantage_estimator");
    fill(a, "kl_in_reward", estimator != "grpo");
    fill(a, "scale_rewards", estimator == "grpo" ? "group" : estimator == "rloo" ? "none" : "batch");
    if (list_contains(a, "reward_funcs", "soft_overlong")) {
      if (!present(a, "soft_cache_length")) fail("--reward_funcs soft_overlong needs --soft_cache_length");
      fill(a, "soft_max_length", a.get_int("max_completion_length"));
    }
    if (present(a, "generation_batch_size") && present(a, "steps_per_generation")) {
      fail("--generation_batch_size and --steps_per_generation exclude each other");
    }
    const int64_t per_step = a.get_int("per_device_train_batch_size") * std::max(world_size, 1);
    const int64_t batch = present(a, "generation_batch_size")
                              ? a.get_int("generation_batch_size")
                              : per_step * (present(a, "steps_per_generation") ? a.get_int("steps_per_generation")
                                                                               : a.get_int("gradient_accumulation_steps"));
    const int64_t g = a.get_int("num_generations");
    if (g < 2) fail("--num_generations {}: GRPO needs at least 2 completions per prompt", g);
    if (batch % g != 0) {
      fail("GRPO generates {} completions per rollout (per_device_train_batch_size x world size x "
           "steps_per_generation), which --num_generations {} does not divide",
           batch, g);
    }
  } else {
    fill(a, "truncation_strategy", "delete");
  }
  if (grpo || type == "gkd") {
    const bool use_vllm = a.get_bool("use_vllm");
    if (use_vllm && !present(a, "vllm_mode")) fail("--use_vllm true needs --vllm_mode colocate or server");
    if (!use_vllm && present(a, "vllm_mode")) fail("--vllm_mode needs --use_vllm true");
  }
  fill(a, "loss_scale",
       type == "orpo" || (grpo && present(a, "multi_turn_scheduler")) ? "default" : "last_round");
  if (type == "ppo" || type == "gkd") a.set("padding_side", "left", ValueSource::resolved);
  if (type == "gkd" && !present(a, "teacher_model")) fail("--rlhf_type gkd needs --teacher_model");
  if (type == "rm") {
    a.set("task_type", "seq_cls", ValueSource::resolved);
    a.set("num_labels", 1, ValueSource::resolved);
  }
  // The reference model: a copy of --model for full-parameter DPO/KTO/PPO/GRPO; LoRA uses the base weights.
  const bool full = a.get_string("tuner_type") == "full";
  const bool needs_ref = full && (type == "dpo" || type == "kto" || type == "ppo" || grpo) &&
                         !(grpo && a.get_float("beta") == 0.0);
  if (needs_ref) {
    if (present(a, "model")) fill(a, "ref_model", a.get_string("model"));
    if (present(a, "model_type")) fill(a, "ref_model_type", a.get_string("model_type"));
    if (present(a, "model_revision")) fill(a, "ref_model_revision", a.get_string("model_revision"));
  } else if (present(a, "ref_model")) {
    if (grpo && a.get_float("beta") == 0.0) {
      a.set("ref_model", nullptr, ValueSource::resolved);  // beta 0: no KL term, no reference
    } else {
      fail("--ref_model is only used by full-parameter DPO, KTO, PPO and GRPO (here: rlhf_type {}, tuner_type {}); "
           "LoRA uses the base weights as the reference",
           type, a.get_string("tuner_type"));
    }
  }
}

void resolve_serving(Arguments& a) {
  const Command cmd = a.command();
  if (cmd == Command::infer) {
    // Interactive chat unless there is a dataset to run on.
    const bool dataset = present(a, "val_dataset") || present(a, "cached_val_dataset") ||
                         (present(a, "dataset") && a.get_float("split_dataset_ratio") > 0);
    fill(a, "stream", !dataset);
  } else {
    fill(a, "stream", false);
  }
  if (a.get_bool("stream") && a.get_int("num_beams") != 1) a.set("stream", false, ValueSource::resolved);
  check_at_least(a, "num_beams", 1);
  if (present(a, "temperature")) check_at_least(a, "temperature", 0);
  if (present(a, "top_p")) check_fraction(a, "top_p", true);
  if (cmd == Command::deploy || cmd == Command::eval) {
    check_at_least(a, "port", 0);
    std::vector<std::string> names;
    for (const std::string& spec : a.get_list("adapters")) {
      NamedAdapter adapter = split_adapter(spec);
      if (adapter.path.empty()) fail("--adapters '{}': the path after '=' is empty", spec);
      if (adapter.path.find('=') != std::string::npos) fail("--adapters '{}': expected name=path or path", spec);
      if (adapter.name.empty()) continue;
      if (std::find(names.begin(), names.end(), adapter.name) != names.end()) {
        fail("--adapters: the name '{}' is given twice", adapter.name);
      }
      names.push_back(adapter.name);
    }
  }
}

struct Requirement {
  CommandSet commands;
  const char* option;
  std::vector<const char*> alternatives;
  const char* hint;
};

const std::vector<Requirement>& requirements() {
  static const std::vector<Requirement> r = {
      {kTrain, "model", {}, "a Hugging Face model directory, hub id or .gguf file"},
      {kTrain, "dataset", {"cached_dataset"}, "e.g. --dataset train.jsonl"},
      {kInfer | kDeploy | kExport, "model", {"adapters"}, "adapters name their base model in args.json"},
      {kEval, "model", {"adapters", "eval_url"}, "or --eval_url of a running server"},
      {kEval, "eval_dataset", {}, "e.g. --eval_dataset gsm8k"},
  };
  return r;
}

std::string requirement_line(const Requirement& r) {
  std::string line = fmt::format("--{}", r.option);
  for (const char* alt : r.alternatives) line += fmt::format(" or --{}", alt);
  return line;
}

}  // namespace

void resolve_arguments(Arguments& a, int world_size) {
  const Command cmd = a.command();
  resolve_quantization(a);
  if (in(kTrain, cmd)) resolve_training(a, world_size);
  if (cmd == Command::rlhf) resolve_rlhf(a, world_size);
  if (in(kServe, cmd)) resolve_serving(a);
}

void check_required(const Arguments& a) {
  for (const Requirement& r : requirements()) {
    if (!in(r.commands, a.command())) continue;
    bool ok = present(a, r.option);
    for (const char* alt : r.alternatives) ok = ok || present(a, alt);
    if (!ok) {
      fail("{} is required for swift {} ({})", requirement_line(r), command_name(a.command()), r.hint);
    }
  }
}

std::vector<std::string> requirement_lines(Command command) {
  std::vector<std::string> lines;
  for (const Requirement& r : requirements()) {
    if (in(r.commands, command)) lines.push_back(fmt::format("{} ({})", requirement_line(r), r.hint));
  }
  return lines;
}

void apply_checkpoint_args(Arguments& a, const json& ckpt) {
  if (!ckpt.is_object()) fail("checkpoint args.json: the top level is not a dict");
  // Always taken from the checkpoint (they describe what the checkpoint is).
  static const char* const kForce[] = {"tuner_type", "task_type", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant"};
  // Taken when not given on the command line or in a config file.
  static const char* const kUnlessGiven[] = {
      "external_plugins", "model", "model_type", "model_revision", "torch_dtype", "attn_impl", "new_special_tokens",
      "num_labels", "problem_type", "rope_scaling", "max_model_len", "quant_method", "quant_bits", "hqq_axis",
      "bnb_4bit_compute_dtype", "template", "system", "truncation_strategy", "agent_template", "norm_bbox",
      "use_chat_template", "response_prefix"};
  auto load = [&](const std::string& key, bool force) {
    auto it = ckpt.find(key);
    if (it == ckpt.end() || it->is_null() || !a.has(key)) return;
    if (!force && a.was_set(key)) return;
    a.set(key, *it, ValueSource::resolved);
  };
  for (const char* key : kForce) load(key, true);
  for (const char* key : kUnlessGiven) load(key, false);
  if (a.has("load_data_args") && a.get_bool("load_data_args")) {
    for (const OptionSpec& spec : option_table()) {
      if (spec.group == OptionGroup::data) load(spec.name, false);
    }
  }
}

}  // namespace swift::apps
