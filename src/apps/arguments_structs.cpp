// apps/arguments_structs.cpp — fills the typed group views from resolved Arguments.
//
// Invariants: field-by-field copies through the typed getters (which check subcommand and type); no
// defaults and no logic beyond the LoRA scaling formula.
#include "apps/arguments_structs.h"

#include <cmath>

namespace swift::apps {

ModelArguments ModelArguments::from(const Arguments& a) {
  ModelArguments m;
  m.model = a.get_optional_string("model");
  m.model_type = a.get_optional_string("model_type");
  m.torch_dtype = a.get_optional_string("torch_dtype");
  m.attn_impl = a.get_optional_string("attn_impl");
  m.template_name = a.get_optional_string("template");
  m.system = a.get_optional_string("system");
  m.adapters = a.get_list("adapters");
  m.max_model_len = a.get_optional_int("max_model_len");
  m.rope_scaling = a.get_json("rope_scaling");
  m.task_type = a.get_string("task_type");
  m.quant_method = a.get_optional_string("quant_method");
  m.quant_bits = a.get_optional_int("quant_bits");
  m.bnb_4bit_quant_type = a.get_string("bnb_4bit_quant_type");
  m.bnb_4bit_use_double_quant = a.get_bool("bnb_4bit_use_double_quant");
  m.seed = a.get_int("seed");
  return m;
}

DataArguments DataArguments::from(const Arguments& a) {
  DataArguments d;
  d.dataset = a.get_list("dataset");
  d.val_dataset = a.get_list("val_dataset");
  d.cached_dataset = a.get_list("cached_dataset");
  d.cached_val_dataset = a.get_list("cached_val_dataset");
  d.split_dataset_ratio = a.get_float("split_dataset_ratio");
  d.data_seed = a.get_int("data_seed");
  d.dataset_num_proc = a.get_int("dataset_num_proc");
  d.dataset_shuffle = a.get_bool("dataset_shuffle");
  d.val_dataset_shuffle = a.get_bool("val_dataset_shuffle");
  d.streaming = a.get_bool("streaming");
  d.strict = a.get_bool("strict");
  d.columns = a.get_json("columns");
  d.packing = a.get_bool("packing");
  d.packing_length = a.get_optional_int("packing_length");
  d.model_name = a.get_list("model_name");
  d.model_author = a.get_list("model_author");
  d.max_length = a.get_optional_int("max_length");
  d.truncation_strategy = a.get_string("truncation_strategy");
  d.loss_scale = a.get_string("loss_scale");
  d.use_chat_template = a.get_bool("use_chat_template");
  d.padding_free = a.get_bool("padding_free");
  d.padding_side = a.get_string("padding_side");
  d.sequence_parallel_size = a.get_int("sequence_parallel_size");
  d.response_prefix = a.get_optional_string("response_prefix");
  d.enable_thinking = a.get_optional_bool("enable_thinking");
  return d;
}

double TunerArguments::lora_scaling() const {
  double r = static_cast<double>(lora_rank);
  return use_rslora ? lora_alpha / std::sqrt(r) : lora_alpha / r;
}

TunerArguments TunerArguments::from(const Arguments& a) {
  TunerArguments t;
  t.tuner_type = a.get_string("tuner_type");
  t.target_modules = a.get_list("target_modules");
  t.modules_to_save = a.get_list("modules_to_save");
  t.freeze_parameters = a.get_list("freeze_parameters");
  t.trainable_parameters = a.get_list("trainable_parameters");
  t.target_regex = a.get_optional_string("target_regex");
  t.lora_rank = a.get_int("lora_rank");
  t.lora_alpha = a.get_int("lora_alpha");
  t.lora_dropout = a.get_float("lora_dropout");
  t.lora_bias = a.get_string("lora_bias");
  t.init_weights = a.get_string("init_weights");
  t.lora_dtype = a.get_optional_string("lora_dtype");
  t.lorap_lr_ratio = a.get_optional_float("lorap_lr_ratio");
  t.use_rslora = a.get_bool("use_rslora");
  t.use_dora = a.get_bool("use_dora");
  t.freeze_parameters_ratio = a.get_float("freeze_parameters_ratio");
  t.use_galore = a.get_bool("use_galore");
  t.galore_rank = a.get_int("galore_rank");
  t.galore_update_proj_gap = a.get_int("galore_update_proj_gap");
  t.galore_scale = a.get_float("galore_scale");
  t.galore_proj_type = a.get_string("galore_proj_type");
  return t;
}

TrainingArguments TrainingArguments::from(const Arguments& a) {
  TrainingArguments t;
  t.output_dir = a.get_string("output_dir");
  t.add_version = a.get_bool("add_version");
  t.num_train_epochs = a.get_float("num_train_epochs");
  t.max_steps = a.get_int("max_steps");
  t.max_epochs = a.get_optional_int("max_epochs");
  t.per_device_train_batch_size = a.get_int("per_device_train_batch_size");
  t.per_device_eval_batch_size = a.get_int("per_device_eval_batch_size");
  t.gradient_accumulation_steps = a.get_int("gradient_accumulation_steps");
  t.learning_rate = a.get_float("learning_rate");
  t.weight_decay = a.get_float("weight_decay");
  t.adam_beta1 = a.get_float("adam_beta1");
  t.adam_beta2 = a.get_float("adam_beta2");
  t.adam_epsilon = a.get_float("adam_epsilon");
  t.max_grad_norm = a.get_float("max_grad_norm");
  t.optim = a.get_string("optim");
  t.lr_scheduler_type = a.get_string("lr_scheduler_type");
  t.lr_scheduler_kwargs = a.get_json("lr_scheduler_kwargs");
  t.warmup_ratio = a.get_float("warmup_ratio");
  t.warmup_steps = a.get_int("warmup_steps");
  t.gradient_checkpointing = a.get_bool("gradient_checkpointing");
  t.recompute_num_layers = a.get_optional_int("recompute_num_layers");
  t.recompute_modules = a.get_list("recompute_modules");
  t.cpu_offloading_num_layers = a.get_optional_int("cpu_offloading_num_layers").value_or(0);
  t.offload_embedding = a.get_bool("offload_embedding");
  t.offload_frozen_layers = a.get_optional_int("offload_frozen_layers").value_or(0);
  t.bf16 = a.get_optional_bool("bf16");
  t.fp16 = a.get_optional_bool("fp16");
  t.logging_steps = a.get_int("logging_steps");
  t.logging_first_step = a.get_bool("logging_first_step");
  t.report_to = a.get_list("report_to");
  t.save_strategy = a.get_string("save_strategy");
  t.eval_strategy = a.get_string("eval_strategy");
  t.save_steps = a.get_int("save_steps");
  t.eval_steps = a.get_optional_int("eval_steps");
  t.save_total_limit = a.get_optional_int("save_total_limit");
  t.save_only_model = a.get_bool("save_only_model");
  t.save_safetensors = a.get_bool("save_safetensors");
  t.metric_for_best_model = a.get_optional_string("metric_for_best_model");
  t.greater_is_better = a.get_optional_bool("greater_is_better");
  t.resume_from_checkpoint = a.get_optional_string("resume_from_checkpoint");
  const nlohmann::json& ds = a.get_json("deepspeed");
  if (ds.is_string()) t.deepspeed_preset = ds.get<std::string>();
  t.resume_only_model = a.get_bool("resume_only_model");
  t.ignore_data_skip = a.get_bool("ignore_data_skip");
  t.dataloader_num_workers = a.get_int("dataloader_num_workers");
  t.neftune_noise_alpha = a.get_optional_float("neftune_noise_alpha");
  t.full_determinism = a.get_bool("full_determinism");
  t.acc_strategy = a.get_string("acc_strategy");
  t.loss_type = a.get_list("loss_type");
  t.seed = a.get_int("seed");
  return t;
}

RlhfArguments RlhfArguments::from(const Arguments& a) {
  RlhfArguments r;
  r.rlhf_type = a.get_string("rlhf_type");
  r.ref_model = a.get_optional_string("ref_model");
  r.ref_adapters = a.get_list("ref_adapters");
  r.beta = a.get_float("beta");
  r.label_smoothing = a.get_float("label_smoothing");
  r.loss_type = a.get_list("loss_type");
  r.loss_weights = a.get_float_list("loss_weights");
  r.rpo_alpha = a.get_optional_float("rpo_alpha");
  r.cpo_alpha = a.get_float("cpo_alpha");
  r.simpo_gamma = a.get_float("simpo_gamma");
  r.desirable_weight = a.get_float("desirable_weight");
  r.undesirable_weight = a.get_float("undesirable_weight");
  r.max_completion_length = a.get_int("max_completion_length");
  r.num_generations = a.get_int("num_generations");
  r.num_iterations = a.get_int("num_iterations");
  r.reward_funcs = a.get_list("reward_funcs");
  r.reward_weights = a.get_float_list("reward_weights");
  r.epsilon = a.get_float("epsilon");
  r.epsilon_high = a.get_optional_float("epsilon_high");
  r.importance_sampling_level = a.get_string("importance_sampling_level");
  r.advantage_estimator = a.get_string("advantage_estimator");
  r.scale_rewards = a.get_optional_string("scale_rewards");
  r.kl_in_reward = a.get_optional_bool("kl_in_reward");
  r.temperature = a.get_float("temperature");
  r.top_k = a.get_optional_int("top_k");
  r.top_p = a.get_optional_float("top_p");
  r.repetition_penalty = a.get_optional_float("repetition_penalty");
  r.use_vllm = a.get_bool("use_vllm");
  r.vllm_mode = a.get_optional_string("vllm_mode");
  r.teacher_model = a.get_optional_string("teacher_model");
  return r;
}

GenerationArguments GenerationArguments::from(const Arguments& a) {
  GenerationArguments g;
  g.max_new_tokens = a.get_optional_int("max_new_tokens");
  g.top_k = a.get_optional_int("top_k");
  g.top_logprobs = a.get_optional_int("top_logprobs");
  g.temperature = a.get_optional_float("temperature");
  g.top_p = a.get_optional_float("top_p");
  g.repetition_penalty = a.get_optional_float("repetition_penalty");
  g.num_beams = a.get_int("num_beams");
  g.stream = a.get_optional_bool("stream");
  g.stop_words = a.get_list("stop_words");
  g.logprobs = a.get_bool("logprobs");
  return g;
}

InferArguments InferArguments::from(const Arguments& a) {
  InferArguments i;
  i.infer_backend = a.get_string("infer_backend");
  i.max_batch_size = a.get_int("max_batch_size");
  i.write_batch_size = a.get_int("write_batch_size");
  i.result_path = a.get_optional_string("result_path");
  i.metric = a.get_optional_string("metric");
  i.val_dataset_sample = a.get_optional_int("val_dataset_sample");
  i.merge_lora = a.get_bool("merge_lora");
  i.gpu_memory_utilization = a.get_float("vllm_gpu_memory_utilization");
  i.max_num_seqs = a.get_int("vllm_max_num_seqs");
  i.engine_max_model_len = a.get_optional_int("vllm_max_model_len");
  return i;
}

DeployArguments DeployArguments::from(const Arguments& a) {
  DeployArguments d;
  d.host = a.get_string("host");
  d.port = a.get_int("port");
  d.api_key = a.get_optional_string("api_key");
  d.served_model_name = a.get_optional_string("served_model_name");
  d.ssl_keyfile = a.get_optional_string("ssl_keyfile");
  d.ssl_certfile = a.get_optional_string("ssl_certfile");
  d.owned_by = a.get_string("owned_by");
  d.log_level = a.get_string("log_level");
  d.verbose = a.get_bool("verbose");
  d.log_interval = a.get_int("log_interval");
  d.max_logprobs = a.get_int("max_logprobs");
  for (const std::string& spec : a.get_list("adapters")) d.adapters.push_back(split_adapter(spec));
  return d;
}

ExportArguments ExportArguments::from(const Arguments& a) {
  ExportArguments e;
  e.output_dir = a.get_optional_string("output_dir");
  e.quant_method = a.get_optional_string("quant_method");
  e.quant_bits = a.get_optional_int("quant_bits");
  e.merge_lora = a.get_bool("merge_lora");
  e.to_gguf = a.get_bool("to_gguf");
  e.to_ollama = a.get_bool("to_ollama");
  e.to_cached_dataset = a.get_bool("to_cached_dataset");
  e.exist_ok = a.get_bool("exist_ok");
  e.safe_serialization = a.get_bool("safe_serialization");
  e.push_to_hub = a.get_bool("push_to_hub");
  e.quant_n_samples = a.get_int("quant_n_samples");
  e.quant_batch_size = a.get_int("quant_batch_size");
  e.group_size = a.get_int("group_size");
  e.max_shard_size = a.get_string("max_shard_size");
  e.hub_model_id = a.get_optional_string("hub_model_id");
  return e;
}

EvalArguments EvalArguments::from(const Arguments& a) {
  EvalArguments e;
  e.eval_dataset = a.get_list("eval_dataset");
  e.eval_limit = a.get_optional_int("eval_limit");
  e.eval_backend = a.get_string("eval_backend");
  e.eval_output_dir = a.get_string("eval_output_dir");
  e.eval_num_proc = a.get_int("eval_num_proc");
  e.eval_url = a.get_optional_string("eval_url");
  e.eval_generation_config = a.get_json("eval_generation_config");
  e.eval_dataset_args = a.get_json("eval_dataset_args");
  e.extra_eval_args = a.get_json("extra_eval_args");
  return e;
}

}  // namespace swift::apps
