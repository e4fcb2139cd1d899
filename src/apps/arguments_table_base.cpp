// apps/arguments_table_base.cpp — option rows of the groups every subcommand shares: base, model,
// quantization, data, template; and generation (trainers and servers).
//
// Invariants: names and defaults are ms-swift's (v4, swift/arguments/base_args/*.py); where ms-swift leaves
// a default to run time (None), the row keeps None and default_note says how it is resolved. Help texts are
// ours. Rows only; all behaviour lives in the parser and the resolver.
#include "apps/arguments_internal.h"

namespace swift::apps {

namespace {
using enum OptionType;
using G = OptionGroup;

constexpr const char* kDtypes = "bfloat16 float16 float32";
constexpr const char* kDtypeAliases = "bf16=bfloat16 fp16=float16 fp32=float32 AUTO= auto=";
}  // namespace

void add_base_options(std::vector<OptionSpec>& t) {
  // ---- base ----------------------------------------------------------------------------------------------
  t.push_back({.name = "seed", .type = integer, .group = G::base, .default_value = "42",
               .help = "Global random seed (dropout, sampling); independent of data_seed."});
  t.push_back({.name = "load_args", .type = boolean, .group = G::base, .default_value = "true",
               .command_defaults = {{kTrain, "false"}},
               .help = "Read args.json of the --adapters/--model/--resume_from_checkpoint directory for the "
                       "model, template and quantization arguments that are not given."});
  t.push_back({.name = "load_data_args", .type = boolean, .group = G::base, .default_value = "false",
               .help = "With load_args, also take the data arguments from args.json (e.g. to infer on the "
                       "validation split of a training run)."});
  t.push_back({.name = "use_hf", .type = boolean, .group = G::base, .default_value = "false",
               .help = "Resolve model and dataset ids on the Hugging Face hub instead of ModelScope."});
  t.push_back({.name = "hub_token", .group = G::base, .help = "Hub access token."});
  t.push_back({.name = "external_plugins", .type = list, .group = G::base, .default_value = "",
               .help = "Plugin files to register (accepted for compatibility; swift.cpp has no Python plugins)."});
  t.push_back({.name = "ddp_timeout", .type = integer, .group = G::base, .default_value = "18000000",
               .help = "Timeout of collective operations, in seconds."});
  t.push_back({.name = "ddp_backend", .group = G::base, .choices = "nccl gloo mpi ccl hccl cncl mccl",
               .default_note = "NCCL on GPUs", .help = "Communication backend of distributed runs."});
  t.push_back({.name = "ignore_args_error", .type = boolean, .group = G::base, .default_value = "false",
               .help = "Accepted for compatibility (notebook use in ms-swift); arguments are always checked."});

  // ---- model ---------------------------------------------------------------------------------------------
  t.push_back({.name = "model", .group = G::model,
               .help = "Hugging Face model directory, hub model id, or .gguf file."});
  t.push_back({.name = "model_type", .group = G::model, .default_note = "from config.json",
               .help = "Model family (ms-swift's model_type); normally detected from config.json."});
  t.push_back({.name = "model_revision", .group = G::model, .help = "Hub revision of --model."});
  t.push_back({.name = "task_type", .group = G::model, .default_value = "causal_lm",
               .choices = "causal_lm seq_cls embedding reranker generative_reranker",
               .help = "Task head: causal_lm, or a classification/embedding/reranking head."});
  t.push_back({.name = "torch_dtype", .group = G::model, .choices = kDtypes, .value_aliases = kDtypeAliases,
               .default_note = "torch_dtype of config.json", .help = "Dtype of the weights and the compute."});
  t.push_back({.name = "attn_impl", .group = G::model,
               .choices = "sdpa eager flash_attn flash_attention_2 flash_attention_3 flex_attention",
               .default_note = "the fastest available kernel",
               .help = "Attention implementation; swift.cpp maps every flash/sdpa choice to its fused "
                       "(cuDNN on Hopper) kernel, eager to the reference path."});
  t.push_back({.name = "new_special_tokens", .type = list, .group = G::model, .default_value = "",
               .help = "Special tokens to add to the tokenizer (or a .txt file, one per line)."});
  t.push_back({.name = "num_labels", .type = integer, .group = G::model,
               .help = "Number of labels of a seq_cls head."});
  t.push_back({.name = "problem_type", .group = G::model,
               .choices = "regression single_label_classification multi_label_classification",
               .help = "Loss of a seq_cls head."});
  t.push_back({.name = "rope_scaling", .type = json_or_string, .group = G::model,
               .help = "linear, dynamic or yarn (with --max_model_len), or a JSON dict replacing the "
                       "rope_scaling of config.json."});
  t.push_back({.name = "max_model_len", .type = integer, .group = G::model,
               .help = "Context length; overrides max_position_embeddings and sets the rope factor."});
  t.push_back({.name = "device_map", .type = json_or_string, .group = G::model,
               .help = "Placement of the layers on devices ('auto', 'cpu' or a JSON dict)."});
  t.push_back({.name = "max_memory", .type = json_or_string, .group = G::model,
               .help = "Memory per device for device_map auto, as a JSON dict."});
  t.push_back({.name = "local_repo_path", .group = G::model, .help = "Local clone of a model's code repository."});
  t.push_back({.name = "init_strategy", .group = G::model,
               .choices = "zero uniform normal xavier_uniform xavier_normal kaiming_uniform kaiming_normal "
                          "orthogonal",
               .help = "How to initialise weights missing from the checkpoint."});
  t.push_back({.name = "model_kwargs", .type = json, .group = G::model,
               .help = "Model-specific settings as a JSON dict."});
  t.push_back({.name = "adapters", .type = list, .group = G::model, .default_value = "",
               .help = "LoRA adapter directories to load (PEFT format); swift deploy also takes name=path."});

  // ---- quantization --------------------------------------------------------------------------------------
  t.push_back({.name = "quant_method", .group = G::quantization,
               .choices = "bnb hqq eetq quanto fp8 awq gptq gptq_v2 nf4",
               .default_note = "bnb when --quant_bits is given",
               .help = "Quantization: on load for training and inference (bnb: 4-bit NF4 or 8-bit, i.e. "
                       "QLoRA), or the export format of swift export (awq, gptq, bnb, fp8, nf4)."});
  t.push_back({.name = "quant_bits", .type = integer, .group = G::quantization, .choices = "1 2 3 4 8",
               .help = "Bits per weight of --quant_method."});
  t.push_back({.name = "hqq_axis", .type = integer, .group = G::quantization, .help = "Quantization axis of hqq."});
  t.push_back({.name = "bnb_4bit_compute_dtype", .group = G::quantization, .choices = kDtypes,
               .value_aliases = kDtypeAliases, .default_note = "torch_dtype",
               .help = "Compute dtype of 4-bit weights."});
  t.push_back({.name = "bnb_4bit_quant_type", .group = G::quantization, .default_value = "nf4",
               .choices = "fp4 nf4", .help = "4-bit code book."});
  t.push_back({.name = "bnb_4bit_use_double_quant", .type = boolean, .group = G::quantization,
               .default_value = "true", .help = "Quantize the 4-bit block scales too."});
  t.push_back({.name = "bnb_4bit_quant_storage", .group = G::quantization,
               .help = "Storage dtype of packed 4-bit weights."});

  // ---- data ----------------------------------------------------------------------------------------------
  t.push_back({.name = "dataset", .type = list, .group = G::data, .default_value = "",
               .help = "Training datasets: files (jsonl, json, csv), folders or hub ids, each optionally "
                       "'path#N' to sample N rows, e.g. --dataset a.jsonl b.jsonl#100."});
  t.push_back({.name = "val_dataset", .type = list, .group = G::data, .default_value = "",
               .help = "Validation datasets (same forms as --dataset)."});
  t.push_back({.name = "cached_dataset", .type = list, .group = G::data, .default_value = "",
               .help = "Pre-tokenized datasets written by swift export --to_cached_dataset true."});
  t.push_back({.name = "cached_val_dataset", .type = list, .group = G::data, .default_value = "",
               .help = "Pre-tokenized validation datasets."});
  t.push_back({.name = "split_dataset_ratio", .type = number, .group = G::data, .default_value = "0.0",
               .help = "Fraction of --dataset held out for validation when --val_dataset is not given "
                       "(ms-swift < 3.6 used 0.01)."});
  t.push_back({.name = "data_seed", .type = integer, .group = G::data, .default_value = "42",
               .help = "Seed of dataset sampling, shuffling and splitting."});
  t.push_back({.name = "dataset_num_proc", .type = integer, .group = G::data, .default_value = "1",
               .help = "Worker threads for dataset preprocessing."});
  t.push_back({.name = "load_from_cache_file", .type = boolean, .group = G::data, .default_value = "false",
               .help = "Reuse the tokenized cache of a dataset."});
  t.push_back({.name = "cache_dir", .group = G::data,
               .default_note = "$SWIFT_CACHE_DIR, else ~/.cache/swift-cpp/datasets",
               .help = "Directory of the tokenized dataset cache (--load_from_cache_file)."});
  t.push_back({.name = "dataset_shuffle", .type = boolean, .group = G::data, .default_value = "true",
               .help = "Shuffle the training dataset."});
  t.push_back({.name = "val_dataset_shuffle", .type = boolean, .group = G::data, .default_value = "false",
               .help = "Shuffle the validation dataset."});
  t.push_back({.name = "streaming", .type = boolean, .group = G::data, .default_value = "false",
               .help = "Read and tokenize the dataset while training (needs --max_steps)."});
  t.push_back({.name = "interleave_prob", .type = list, .group = G::data, .item = ItemType::number,
               .help = "Interleave the datasets with these probabilities instead of concatenating them."});
  t.push_back({.name = "stopping_strategy", .group = G::data, .default_value = "first_exhausted",
               .choices = "first_exhausted all_exhausted", .help = "When interleaving stops."});
  t.push_back({.name = "shuffle_buffer_size", .type = integer, .group = G::data, .default_value = "1000",
               .help = "Shuffle buffer of streamed datasets."});
  t.push_back({.name = "download_mode", .group = G::data, .default_value = "reuse_dataset_if_exists",
               .choices = "reuse_dataset_if_exists force_redownload", .help = "Hub dataset download mode."});
  t.push_back({.name = "columns", .type = json, .group = G::data,
               .help = "Column renames as a JSON dict, e.g. '{\"text1\": \"query\", \"text2\": \"response\"}'."});
  t.push_back({.name = "strict", .type = boolean, .group = G::data, .default_value = "false",
               .help = "Fail on a malformed row instead of dropping it."});
  t.push_back({.name = "remove_unused_columns", .type = boolean, .group = G::data, .default_value = "true",
               .default_note = "false for GRPO", .help = "Drop dataset columns the template does not use."});
  t.push_back({.name = "model_name", .type = list, .group = G::data,
               .help = "Self-cognition data: the model's Chinese and English names."});
  t.push_back({.name = "model_author", .type = list, .group = G::data,
               .help = "Self-cognition data: the author's Chinese and English names."});
  t.push_back({.name = "custom_dataset_info", .type = list, .group = G::data, .default_value = "",
               .help = "JSON files registering custom datasets."});
  t.push_back({.name = "packing", .type = boolean, .group = G::data, .default_value = "false",
               .help = "Pack samples into sequences of packing_length (variable-length attention keeps "
                       "them independent)."});
  t.push_back({.name = "packing_length", .type = integer, .group = G::data, .default_note = "max_length",
               .help = "Length of packed sequences."});
  t.push_back({.name = "packing_num_proc", .type = integer, .group = G::data, .default_value = "1",
               .help = "Workers for packing."});
  t.push_back({.name = "lazy_tokenize", .type = boolean, .group = G::data, .default_note = "false for text models",
               .help = "Tokenize samples when they are read instead of before training."});

  // ---- template ------------------------------------------------------------------------------------------
  t.push_back({.name = "template", .group = G::template_, .default_note = "the model's chat template",
               .help = "Chat template name."});
  t.push_back({.name = "system", .group = G::template_,
               .help = "System prompt (text or a .txt file); a dataset's own system message wins."});
  t.push_back({.name = "max_length", .type = integer, .group = G::template_,
               .default_note = "the model's context length",
               .help = "Maximum tokens of one sample (the prompt, for GRPO and inference)."});
  t.push_back({.name = "truncation_strategy", .group = G::template_, .default_value = "delete",
               .command_defaults = {{kRlhf, nullptr}}, .choices = "delete left right split",
               .default_note = "left for GRPO, else delete",
               .help = "Samples longer than max_length: delete, truncate on the left or right, or split "
                       "(pre-training)."});
  t.push_back({.name = "max_pixels", .type = integer, .group = G::template_,
               .help = "Maximum pixels per image (multimodal models)."});
  t.push_back({.name = "agent_template", .group = G::template_, .help = "Tool-call format (hermes, react_en, ...)."});
  t.push_back({.name = "norm_bbox", .group = G::template_, .choices = "norm1000 none",
               .help = "Bounding-box normalisation (multimodal grounding)."});
  t.push_back({.name = "use_chat_template", .type = boolean, .group = G::template_, .default_value = "true",
               .command_defaults = {{kPt, "false"}},
               .help = "Use the chat template (false: the plain generation template)."});
  t.push_back({.name = "padding_side", .group = G::template_, .default_value = "right", .choices = "left right",
               .default_note = "left for PPO and GKD", .help = "Padding side of training batches."});
  t.push_back({.name = "padding_free", .type = boolean, .group = G::template_, .default_value = "false",
               .help = "Concatenate the samples of a batch without padding."});
  t.push_back({.name = "loss_scale", .group = G::template_, .default_value = "default",
               .command_defaults = {{kPt, "all"}, {kRlhf, nullptr}},
               .default_note = "last_round for RLHF (default for ORPO)",
               .help = "Which tokens carry loss: default (assistant turns), last_round, all, "
                       "ignore_empty_think, or an agent scale (react, hermes, qwen, ...); combine with +."});
  t.push_back({.name = "sequence_parallel_size", .type = integer, .group = G::template_, .default_value = "1",
               .help = "Sequence-parallel degree."});
  t.push_back({.name = "template_backend", .group = G::template_, .default_value = "swift",
               .choices = "swift jinja", .help = "Template engine (jinja: the tokenizer's chat_template)."});
  t.push_back({.name = "response_prefix", .group = G::template_,
               .help = "Text that starts every response at inference (e.g. '<think>\\n')."});
  t.push_back({.name = "enable_thinking", .type = boolean, .group = G::template_,
               .default_note = "from the template", .help = "Thinking mode of hybrid reasoning models."});
  t.push_back({.name = "add_non_thinking_prefix", .type = boolean, .group = G::template_, .default_value = "true",
               .help = "Training: add the empty-think prefix to answers without one (hybrid models)."});
}

void add_generation_options(std::vector<OptionSpec>& t) {
  constexpr CommandSet kGen = kTrain | kServe;
  t.push_back({.name = "max_new_tokens", .type = integer, .group = G::generation, .commands = kGen,
               .command_defaults = {{kSft | kPt, "64"}},
               .default_note = "unlimited (the context length); max_completion_length for RLHF",
               .help = "Maximum generated tokens (training: for predict_with_generate)."});
  t.push_back({.name = "temperature", .type = number, .group = G::generation, .commands = kGen,
               .command_defaults = {{kSft | kPt | kEval, "0.0"}, {kRlhf, "0.9"}},
               .default_note = "generation_config.json", .help = "Sampling temperature; 0 is greedy."});
  t.push_back({.name = "top_k", .type = integer, .group = G::generation, .commands = kGen,
               .command_defaults = {{kRlhf, "50"}}, .default_note = "generation_config.json",
               .help = "Sample among the k most likely tokens."});
  t.push_back({.name = "top_p", .type = number, .group = G::generation, .commands = kGen,
               .command_defaults = {{kRlhf, "0.9"}}, .default_note = "generation_config.json",
               .help = "Nucleus sampling threshold."});
  t.push_back({.name = "repetition_penalty", .type = number, .group = G::generation, .commands = kGen,
               .command_defaults = {{kRlhf, "1.0"}}, .default_note = "generation_config.json",
               .help = "Penalty on repeated tokens (1.0: none)."});
  t.push_back({.name = "num_beams", .type = integer, .group = G::generation, .commands = kGen,
               .default_value = "1", .help = "Beam search width."});
  t.push_back({.name = "stream", .type = boolean, .group = G::generation, .commands = kGen,
               .default_note = "true for the interactive chat, false for datasets and servers",
               .help = "Stream tokens as they are generated."});
  t.push_back({.name = "stop_words", .type = list, .group = G::generation, .commands = kGen,
               .default_value = "", .help = "Extra stop strings besides the EOS token (kept in the output)."});
  t.push_back({.name = "logprobs", .type = boolean, .group = G::generation, .commands = kGen,
               .default_value = "false", .help = "Return log-probabilities of the generated tokens."});
  t.push_back({.name = "top_logprobs", .type = integer, .group = G::generation, .commands = kGen,
               .help = "Number of alternatives per position with --logprobs."});
  t.push_back({.name = "structured_outputs_regex", .group = G::generation, .commands = kGen,
               .help = "Constrain generation to a regular expression."});
}

}  // namespace swift::apps
