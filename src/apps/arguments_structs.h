// apps/arguments_structs.h — typed views of the main option groups, filled from parsed Arguments, for the
// code that runs a subcommand (trainer, engine, server, exporter).
//
// Invariants: every field has the name of its option and is copied from the resolved Arguments by from();
// nothing here has a default of its own (the option table owns defaults), and a struct of a group that does
// not apply to the subcommand cannot be built (from() throws naming the option). std::optional marks options
// whose value may stay None after resolution (to be decided from config.json or at run time).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "apps/arguments.h"

namespace swift::apps {

struct ModelArguments {  // every subcommand
  std::optional<std::string> model, model_type, torch_dtype, attn_impl, template_name, system;
  std::vector<std::string> adapters;
  std::optional<int64_t> max_model_len;
  nlohmann::json rope_scaling;  // null, a string, or a dict
  std::string task_type;
  std::optional<std::string> quant_method;  // bnb (QLoRA), hqq, ..., or an export format
  std::optional<int64_t> quant_bits;
  std::string bnb_4bit_quant_type;
  bool bnb_4bit_use_double_quant = false;
  int64_t seed = 0;
  static ModelArguments from(const Arguments& args);
};

struct DataArguments {  // every subcommand
  std::vector<std::string> dataset, val_dataset, cached_dataset, cached_val_dataset;
  double split_dataset_ratio = 0;
  int64_t data_seed = 0, dataset_num_proc = 0;
  bool dataset_shuffle = false, val_dataset_shuffle = false, streaming = false, strict = false;
  nlohmann::json columns;  // null or a dict
  bool packing = false;
  std::optional<int64_t> packing_length;
  std::vector<std::string> model_name, model_author;
  // template
  std::optional<int64_t> max_length;
  std::string truncation_strategy;  // delete, left, right, split
  std::string loss_scale;
  bool use_chat_template = false, padding_free = false;
  std::string padding_side;
  int64_t sequence_parallel_size = 1;
  std::optional<std::string> response_prefix;
  std::optional<bool> enable_thinking;
  static DataArguments from(const Arguments& args);
};

struct TunerArguments {  // sft, pt, rlhf
  std::string tuner_type;
  std::vector<std::string> target_modules, modules_to_save, freeze_parameters, trainable_parameters;
  std::optional<std::string> target_regex;
  int64_t lora_rank = 0, lora_alpha = 0;
  double lora_dropout = 0;
  std::string lora_bias, init_weights;
  std::optional<std::string> lora_dtype;
  std::optional<double> lorap_lr_ratio;
  bool use_rslora = false, use_dora = false;
  double freeze_parameters_ratio = 0;
  bool use_galore = false;
  int64_t galore_rank = 0, galore_update_proj_gap = 0;
  double galore_scale = 0;
  std::string galore_proj_type;
  bool is_adapter() const { return tuner_type != "full"; }
  // lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora.
  double lora_scaling() const;
  static TunerArguments from(const Arguments& args);
};

struct TrainingArguments {  // sft, pt, rlhf
  std::string output_dir;
  bool add_version = false;
  double num_train_epochs = 0;
  int64_t max_steps = 0;
  std::optional<int64_t> max_epochs;
  int64_t per_device_train_batch_size = 0, per_device_eval_batch_size = 0, gradient_accumulation_steps = 0;
  double learning_rate = 0, weight_decay = 0, adam_beta1 = 0, adam_beta2 = 0, adam_epsilon = 0, max_grad_norm = 0;
  std::string optim, lr_scheduler_type;
  nlohmann::json lr_scheduler_kwargs;  // null or a dict
  double warmup_ratio = 0;
  int64_t warmup_steps = 0;
  bool gradient_checkpointing = false;
  std::optional<bool> bf16, fp16;
  int64_t logging_steps = 0;
  bool logging_first_step = false;
  std::vector<std::string> report_to;
  std::string save_strategy, eval_strategy;
  int64_t save_steps = 0;
  std::optional<int64_t> eval_steps, save_total_limit;
  std::optional<int64_t> recompute_num_layers;  // with gradient_checkpointing: recompute only the first N layers
  std::vector<std::string> recompute_modules;   // selective recompute: layernorm, act, mlp (core_attn: a no-op)
  int64_t cpu_offloading_num_layers = 0;        // layers whose MLP intermediates wait in host memory
  bool offload_embedding = false;               // the frozen embedding table in mapped host memory (CUDA, LoRA)
  int64_t offload_frozen_layers = 0;            // layers whose frozen matrices wait in host memory (LoRA)
  bool save_only_model = false, save_safetensors = false;
  std::optional<std::string> metric_for_best_model;
  std::optional<bool> greater_is_better;
  std::optional<std::string> resume_from_checkpoint, deepspeed_preset;  // deepspeed when it is a preset/path
  bool resume_only_model = false, ignore_data_skip = false;
  int64_t dataloader_num_workers = 0;
  std::optional<double> neftune_noise_alpha;
  bool full_determinism = false;
  std::string acc_strategy;
  std::vector<std::string> loss_type;
  int64_t seed = 0;
  static TrainingArguments from(const Arguments& args);
};

struct RlhfArguments {  // rlhf
  std::string rlhf_type;
  std::optional<std::string> ref_model;
  std::vector<std::string> ref_adapters;
  double beta = 0, label_smoothing = 0;
  std::vector<std::string> loss_type;
  std::vector<double> loss_weights;
  std::optional<double> rpo_alpha;
  double cpo_alpha = 0, simpo_gamma = 0, desirable_weight = 0, undesirable_weight = 0;
  int64_t max_completion_length = 0;
  // GRPO
  int64_t num_generations = 0, num_iterations = 0;
  std::vector<std::string> reward_funcs;
  std::vector<double> reward_weights;
  double epsilon = 0;
  std::optional<double> epsilon_high;
  std::string importance_sampling_level, advantage_estimator;
  std::optional<std::string> scale_rewards;
  std::optional<bool> kl_in_reward;
  double temperature = 0;
  std::optional<int64_t> top_k;
  std::optional<double> top_p, repetition_penalty;
  bool use_vllm = false;
  std::optional<std::string> vllm_mode, teacher_model;
  static RlhfArguments from(const Arguments& args);
};

struct GenerationArguments {  // sft, pt, rlhf, infer, deploy, eval
  std::optional<int64_t> max_new_tokens, top_k, top_logprobs;
  std::optional<double> temperature, top_p, repetition_penalty;  // None: generation_config.json
  int64_t num_beams = 1;
  std::optional<bool> stream;
  std::vector<std::string> stop_words;
  bool logprobs = false;
  static GenerationArguments from(const Arguments& args);
};

struct InferArguments {  // infer, deploy, eval
  std::string infer_backend;
  int64_t max_batch_size = 0, write_batch_size = 0;
  std::optional<std::string> result_path, metric;
  std::optional<int64_t> val_dataset_sample;
  bool merge_lora = false;
  double gpu_memory_utilization = 0;  // vllm_gpu_memory_utilization
  int64_t max_num_seqs = 0;           // vllm_max_num_seqs
  std::optional<int64_t> engine_max_model_len;  // vllm_max_model_len
  static InferArguments from(const Arguments& args);
};

struct DeployArguments {  // deploy, eval
  std::string host;
  int64_t port = 0;
  std::optional<std::string> api_key, served_model_name, ssl_keyfile, ssl_certfile;
  std::string owned_by, log_level;
  bool verbose = false;
  int64_t log_interval = 0, max_logprobs = 0;
  std::vector<NamedAdapter> adapters;  // --adapters, split into name=path
  static DeployArguments from(const Arguments& args);
};

struct ExportArguments {  // export
  std::optional<std::string> output_dir, quant_method;
  std::optional<int64_t> quant_bits;
  bool merge_lora = false, to_gguf = false, to_ollama = false, to_cached_dataset = false, exist_ok = false;
  bool safe_serialization = false, push_to_hub = false;
  int64_t quant_n_samples = 0, quant_batch_size = 0, group_size = 0;
  std::string max_shard_size;
  std::optional<std::string> hub_model_id;
  static ExportArguments from(const Arguments& args);
};

struct EvalArguments {  // eval
  std::vector<std::string> eval_dataset;
  std::optional<int64_t> eval_limit;
  std::string eval_backend, eval_output_dir;
  int64_t eval_num_proc = 0;
  std::optional<std::string> eval_url;
  nlohmann::json eval_generation_config, eval_dataset_args, extra_eval_args;
  static EvalArguments from(const Arguments& args);
};

}  // namespace swift::apps
