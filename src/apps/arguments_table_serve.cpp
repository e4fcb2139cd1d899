// apps/arguments_table_serve.cpp — option rows of swift infer, deploy, export and eval, and the table of
// older option names.
//
// Invariants: names and defaults are ms-swift's (v4 swift/arguments/infer_args.py, deploy_args.py,
// export_args.py, eval_args.py, merge_args.py); vllm_* names are kept so ms-swift scripts run, and size our
// own engine. An alias only exists where its target does; every alias names where the old name comes from.
#include "apps/arguments_internal.h"

namespace swift::apps {

namespace {
using enum OptionType;
using G = OptionGroup;
}  // namespace

void add_serve_options(std::vector<OptionSpec>& t) {
  // ---- infer (infer, deploy, eval) ---------------------------------------------------------------------
  t.push_back({.name = "infer_backend", .group = G::infer, .commands = kServe, .default_value = "transformers",
               .choices = "transformers vllm sglang lmdeploy", .value_aliases = "pt=transformers",
               .help = "Accepted for ms-swift compatibility; every backend runs swift.cpp's own engine "
                       "(pt is the ms-swift 3 name of transformers)."});
  t.push_back({.name = "max_batch_size", .type = integer, .group = G::infer, .commands = kServe,
               .default_value = "1", .help = "Sequences generated together in batch inference (-1: no limit)."});
  t.push_back({.name = "result_path", .group = G::infer, .commands = kServe,
               .default_note = "<checkpoint or result/<model>>/infer_result/<time>.jsonl when there is a dataset",
               .help = "jsonl file the results are appended to."});
  t.push_back({.name = "write_batch_size", .type = integer, .group = G::infer, .commands = kServe,
               .default_value = "1000", .help = "Results buffered before writing (-1: all)."});
  t.push_back({.name = "val_dataset_sample", .type = integer, .group = G::infer, .commands = kServe,
               .default_note = "all", .help = "Rows of the inference dataset to use."});
  t.push_back({.name = "merge_lora", .type = boolean, .group = G::infer, .commands = kServe | kExport,
               .default_value = "false", .help = "Merge LoRA adapters into the base weights (export: and save)."});
  t.push_back({.name = "safe_serialization", .type = boolean, .group = G::infer, .commands = kServe | kExport,
               .default_value = "true", .help = "Save merged weights as safetensors."});
  t.push_back({.name = "max_shard_size", .group = G::infer, .commands = kServe | kExport, .default_value = "5GB",
               .help = "Largest weight shard written."});
  constexpr CommandSet kEngine = kServe | kRlhf;
  t.push_back({.name = "vllm_gpu_memory_utilization", .type = number, .group = G::infer, .commands = kEngine,
               .default_value = "0.9", .help = "Fraction of GPU memory the engine uses (weights + KV cache)."});
  t.push_back({.name = "vllm_tensor_parallel_size", .type = integer, .group = G::infer, .commands = kEngine,
               .default_value = "1", .help = "Tensor-parallel degree of the engine."});
  t.push_back({.name = "vllm_pipeline_parallel_size", .type = integer, .group = G::infer, .commands = kEngine,
               .default_value = "1", .help = "Pipeline-parallel degree of the engine."});
  t.push_back({.name = "vllm_data_parallel_size", .type = integer, .group = G::infer, .commands = kEngine,
               .default_value = "1", .help = "Data-parallel engine replicas (deploy)."});
  t.push_back({.name = "vllm_max_num_seqs", .type = integer, .group = G::infer, .commands = kEngine,
               .default_value = "256", .help = "Sequences scheduled together (continuous batching)."});
  t.push_back({.name = "vllm_max_model_len", .type = integer, .group = G::infer, .commands = kEngine,
               .default_note = "the model's context length", .help = "Longest sequence the engine serves."});
  t.push_back({.name = "vllm_enforce_eager", .type = boolean, .group = G::infer, .commands = kEngine,
               .default_value = "false", .help = "No CUDA graphs (less memory, slower)."});
  t.push_back({.name = "vllm_enable_prefix_caching", .type = boolean, .group = G::infer, .commands = kEngine,
               .default_note = "the engine's default", .help = "Reuse the KV cache of shared prompt prefixes."});
  t.push_back({.name = "vllm_max_lora_rank", .type = integer, .group = G::infer, .commands = kEngine,
               .default_value = "16", .help = "Largest LoRA rank the engine accepts."});
  t.push_back({.name = "vllm_enable_lora", .type = boolean, .group = G::infer, .commands = kEngine,
               .default_value = "false", .help = "Apply LoRA adapters in the engine instead of merging them."});

  // ---- deploy (deploy, eval) -----------------------------------------------------------------------------
  constexpr CommandSet kServer = kDeploy | kEval;
  t.push_back({.name = "host", .group = G::deploy, .commands = kServer, .default_value = "0.0.0.0",
               .help = "Address the HTTP server binds."});
  t.push_back({.name = "port", .type = integer, .group = G::deploy, .commands = kServer, .default_value = "8000",
               .help = "Port of the HTTP server."});
  t.push_back({.name = "api_key", .group = G::deploy, .commands = kServer,
               .help = "Require this bearer token on every request."});
  t.push_back({.name = "ssl_keyfile", .group = G::deploy, .commands = kServer, .help = "TLS key file."});
  t.push_back({.name = "ssl_certfile", .group = G::deploy, .commands = kServer, .help = "TLS certificate file."});
  t.push_back({.name = "owned_by", .group = G::deploy, .commands = kServer, .default_value = "swift",
               .help = "owned_by of /v1/models."});
  t.push_back({.name = "served_model_name", .group = G::deploy, .commands = kServer,
               .default_note = "the last component of --model", .help = "Model name the API answers to."});
  t.push_back({.name = "verbose", .type = boolean, .group = G::deploy, .commands = kServer, .default_value = "true",
               .command_defaults = {{kEval, "false"}}, .help = "Log every request."});
  t.push_back({.name = "log_interval", .type = integer, .group = G::deploy, .commands = kServer,
               .default_value = "20", .help = "Seconds between throughput logs (-1: never)."});
  t.push_back({.name = "log_level", .group = G::deploy, .commands = kServer, .default_value = "info",
               .choices = "critical error warning info debug trace", .help = "Server log level."});
  t.push_back({.name = "max_logprobs", .type = integer, .group = G::deploy, .commands = kServer,
               .default_value = "20", .help = "Most logprobs a request may ask for."});

  // ---- export --------------------------------------------------------------------------------------------
  t.push_back({.name = "exist_ok", .type = boolean, .group = G::export_, .commands = kExport,
               .default_value = "false", .help = "Write into an existing output_dir."});
  t.push_back({.name = "quant_n_samples", .type = integer, .group = G::export_, .commands = kExport,
               .default_value = "256", .help = "Calibration samples of awq/gptq."});
  t.push_back({.name = "quant_batch_size", .type = integer, .group = G::export_, .commands = kExport,
               .default_value = "1", .help = "Calibration batch size (-1: all)."});
  t.push_back({.name = "group_size", .type = integer, .group = G::export_, .commands = kExport,
               .default_value = "128", .help = "Quantization group size."});
  t.push_back({.name = "to_gguf", .type = boolean, .group = G::export_, .commands = kExport,
               .default_value = "false", .help = "swift.cpp: write the (merged) model as a GGUF file."});
  t.push_back({.name = "to_ollama", .type = boolean, .group = G::export_, .commands = kExport,
               .default_value = "false", .help = "Write an Ollama Modelfile."});
  t.push_back({.name = "to_cached_dataset", .type = boolean, .group = G::export_, .commands = kExport,
               .default_value = "false", .help = "Tokenize --dataset ahead of training (for --cached_dataset)."});
  t.push_back({.name = "template_mode", .group = G::export_, .commands = kExport, .default_value = "train",
               .choices = "train rlhf kto", .help = "Encoding of --to_cached_dataset (rlhf: preference pairs)."});
  t.push_back({.name = "to_peft_format", .type = boolean, .group = G::export_, .commands = kExport,
               .default_value = "false", .help = "Accepted for compatibility (adapters are always PEFT)."});
  t.push_back({.name = "commit_message", .group = G::export_, .commands = kExport, .default_value = "update files",
               .help = "Commit message of --push_to_hub."});

  // ---- eval ----------------------------------------------------------------------------------------------
  t.push_back({.name = "eval_backend", .group = G::eval, .commands = kEval, .default_value = "Native",
               .choices = "Native OpenCompass VLMEvalKit", .help = "Evaluation backend."});
  t.push_back({.name = "eval_output_dir", .group = G::eval, .commands = kEval, .default_value = "eval_output",
               .help = "Directory of evaluation reports."});
  t.push_back({.name = "eval_num_proc", .type = integer, .group = G::eval, .commands = kEval, .default_value = "16",
               .help = "Concurrent evaluation requests."});
  t.push_back({.name = "eval_url", .group = G::eval, .commands = kEval,
               .help = "Evaluate a running OpenAI-compatible server instead of loading the model."});
  t.push_back({.name = "extra_eval_args", .type = json, .group = G::eval, .commands = kEval, .default_value = "{}",
               .help = "Extra evaluation arguments as a JSON dict."});
  t.push_back({.name = "local_dataset", .type = boolean, .group = G::eval, .commands = kEval,
               .default_value = "false", .help = "Use benchmark data from ./data."});
}

void add_aliases(std::vector<AliasSpec>& a) {
  constexpr const char* v2 = "ms-swift 2";
  constexpr const char* v3 = "ms-swift 3";
  a.push_back({"train_type", "tuner_type", v3});
  a.push_back({"sft_type", "tuner_type", v2});
  a.push_back({"model_id_or_path", "model", v2});
  a.push_back({"use_flash_attn", "attn_impl", v2, AliasKind::flash_attn_flag});
  a.push_back({"quantization_bit", "quant_bits", v2, AliasKind::quantization_bit});
  a.push_back({"dtype", "torch_dtype", v2});
  a.push_back({"template_type", "template", v2});
  a.push_back({"lora_target_modules", "target_modules", v2});
  a.push_back({"lora_dropout_p", "lora_dropout", v2});
  a.push_back({"lora_bias_trainable", "lora_bias", v2});
  a.push_back({"lora_modules_to_save", "modules_to_save", v2});
  a.push_back({"lora_lr_ratio", "lorap_lr_ratio", v2});
  a.push_back({"init_lora_weights", "init_weights", v2});
  a.push_back({"batch_size", "per_device_train_batch_size", v2});
  a.push_back({"eval_batch_size", "per_device_eval_batch_size", v2});
  a.push_back({"bnb_4bit_comp_dtype", "bnb_4bit_compute_dtype", v2});
  a.push_back({"ckpt_dir", "adapters", v2});
  a.push_back({"custom_train_dataset_path", "dataset", v2});
  a.push_back({"custom_val_dataset_path", "val_dataset", v2});
  a.push_back({"deepspeed_config_path", "deepspeed", v2});
  a.push_back({"add_output_dir_suffix", "add_version", v2});
  a.push_back({"custom_register_path", "external_plugins", v3});
  a.push_back({"use_liger", "use_liger_kernel", v3});
  a.push_back({"gpu_memory_utilization", "vllm_gpu_memory_utilization", "ms-swift < 3.7"});
  a.push_back({"tensor_parallel_size", "vllm_tensor_parallel_size", "ms-swift < 3.7"});
  a.push_back({"max_num_seqs", "vllm_max_num_seqs", "ms-swift < 3.7"});
  a.push_back({"enforce_eager", "vllm_enforce_eager", "ms-swift < 3.7"});
  a.push_back({"enable_prefix_caching", "vllm_enable_prefix_caching", "ms-swift < 3.7"});
  a.push_back({"response_length", "max_completion_length", "ms-swift PPO"});
  a.push_back({"eval_datasets", "eval_dataset", v3});
  a.push_back({"evaluation_strategy", "eval_strategy", "transformers < 4.46"});
}

}  // namespace swift::apps
