// apps/arguments_table_train.cpp — option rows of the tuner and training groups (swift sft, pt, rlhf).
//
// Invariants: names and defaults are ms-swift's (v4 swift/arguments/tuner_args.py, sft_args.py,
// swift/trainers/arguments.py over transformers' TrainingArguments); where ms-swift leaves a default to run
// time (None), the row keeps None and default_note says how the resolver fills it. Help texts are ours.
#include "apps/arguments_internal.h"

namespace swift::apps {

namespace {
using enum OptionType;
using G = OptionGroup;
}  // namespace

void add_tuner_options(std::vector<OptionSpec>& t) {
  t.push_back({.name = "tuner_type", .group = G::tuner, .default_value = "lora",
               .choices = "lora full longlora adalora llamapro adapter vera boft fourierft reft bone lora_llm",
               .help = "Fine-tuning method: lora (QLoRA with --quant_bits 4), full, or another ms-swift tuner."});
  t.push_back({.name = "tuner_backend", .group = G::tuner, .default_value = "peft", .choices = "peft unsloth",
               .help = "Accepted for compatibility; adapters are always saved in PEFT format."});
  constexpr CommandSet c = kTrain;
  // full
  t.push_back({.name = "freeze_parameters", .type = list, .group = G::tuner, .commands = c, .default_value = "",
               .help = "Full tuning: prefixes of parameters to freeze."});
  t.push_back({.name = "freeze_parameters_regex", .group = G::tuner, .commands = c,
               .help = "Full tuning: regex of parameters to freeze."});
  t.push_back({.name = "freeze_parameters_ratio", .type = number, .group = G::tuner, .commands = c,
               .default_value = "0.0", .help = "Full tuning: fraction of parameters to freeze, bottom layers first."});
  t.push_back({.name = "trainable_parameters", .type = list, .group = G::tuner, .commands = c, .default_value = "",
               .help = "Prefixes of parameters kept trainable (overrides the freeze options)."});
  t.push_back({.name = "trainable_parameters_regex", .group = G::tuner, .commands = c,
               .help = "Regex of parameters kept trainable."});
  t.push_back({.name = "freeze_llm", .type = boolean, .group = G::tuner, .commands = c, .default_value = "false",
               .help = "Multimodal models: freeze the language model."});
  t.push_back({.name = "freeze_vit", .type = boolean, .group = G::tuner, .commands = c, .default_value = "true",
               .help = "Multimodal models: freeze the vision/audio tower."});
  t.push_back({.name = "freeze_aligner", .type = boolean, .group = G::tuner, .commands = c, .default_value = "true",
               .help = "Multimodal models: freeze the projector."});
  // lora and friends
  t.push_back({.name = "target_modules", .type = list, .group = G::tuner, .commands = c,
               .default_value = "all-linear", .value_aliases = "ALL=all-linear DEFAULT=all-linear",
               .help = "Modules that get adapters: all-linear (every linear layer but the head) or name "
                       "suffixes, e.g. --target_modules q_proj v_proj."});
  t.push_back({.name = "target_regex", .group = G::tuner, .commands = c,
               .help = "Regex of modules that get adapters (replaces --target_modules)."});
  t.push_back({.name = "target_parameters", .type = list, .group = G::tuner, .commands = c,
               .help = "Parameter names (not modules) that get LoRA, e.g. MoE expert weights."});
  t.push_back({.name = "modules_to_save", .type = list, .group = G::tuner, .commands = c, .default_value = "",
               .help = "Modules trained in full and saved with the adapter, e.g. embed_tokens lm_head."});
  t.push_back({.name = "lora_rank", .type = integer, .group = G::tuner, .commands = c, .default_value = "8",
               .help = "LoRA rank r."});
  t.push_back({.name = "lora_alpha", .type = integer, .group = G::tuner, .commands = c, .default_value = "32",
               .help = "LoRA alpha; the update is scaled by alpha / r (alpha / sqrt(r) with --use_rslora)."});
  t.push_back({.name = "lora_dropout", .type = number, .group = G::tuner, .commands = c, .default_value = "0.05",
               .help = "Dropout on the LoRA input."});
  t.push_back({.name = "lora_bias", .group = G::tuner, .commands = c, .default_value = "none", .choices = "none all",
               .help = "Train the biases too (all)."});
  t.push_back({.name = "lora_dtype", .group = G::tuner, .commands = c, .choices = "bfloat16 float16 float32",
               .value_aliases = "bf16=bfloat16 fp16=float16 fp32=float32 AUTO=", .default_note = "float32",
               .help = "Dtype of the LoRA weights."});
  t.push_back({.name = "lorap_lr_ratio", .type = number, .group = G::tuner, .commands = c,
               .help = "LoRA+: learning-rate ratio of B over A (10-16 recommended); enables LoRA+."});
  t.push_back({.name = "use_rslora", .type = boolean, .group = G::tuner, .commands = c, .default_value = "false",
               .help = "Rank-stabilised scaling alpha / sqrt(r)."});
  t.push_back({.name = "use_dora", .type = boolean, .group = G::tuner, .commands = c, .default_value = "false",
               .help = "DoRA (weight-decomposed LoRA)."});
  t.push_back({.name = "init_weights", .group = G::tuner, .commands = c, .default_value = "true",
               .help = "Adapter initialisation: true, false, gaussian, pissa, pissa_niter_N, olora, loftq, "
                       "lora-ga (bone: bat)."});
  t.push_back({.name = "lora_ga_batch_size", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "2", .help = "LoRA-GA: batch size of the gradient estimate."});
  t.push_back({.name = "lora_ga_iters", .type = integer, .group = G::tuner, .commands = c, .default_value = "2",
               .help = "LoRA-GA: iterations of the gradient estimate."});
  t.push_back({.name = "lora_ga_max_length", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "1024", .help = "LoRA-GA: sequence length of the gradient estimate."});
  t.push_back({.name = "lora_ga_direction", .group = G::tuner, .commands = c, .default_value = "ArB2r",
               .choices = "ArBr A2rBr ArB2r random", .help = "LoRA-GA: initial direction."});
  t.push_back({.name = "lora_ga_scale", .group = G::tuner, .commands = c, .default_value = "stable",
               .choices = "gd unit stable weightS", .help = "LoRA-GA: scaling."});
  t.push_back({.name = "lora_ga_stable_gamma", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "16", .help = "LoRA-GA: gamma of stable scaling."});
  // other ms-swift tuners: parsed so their scripts run; the trainer says which tuners it implements
  t.push_back({.name = "fourier_n_frequency", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "2000", .help = "FourierFT: frequencies."});
  t.push_back({.name = "fourier_scaling", .type = number, .group = G::tuner, .commands = c,
               .default_value = "300.0", .help = "FourierFT: scaling."});
  t.push_back({.name = "boft_block_size", .type = integer, .group = G::tuner, .commands = c, .default_value = "4",
               .help = "BOFT: block size."});
  t.push_back({.name = "boft_block_num", .type = integer, .group = G::tuner, .commands = c, .default_value = "0",
               .help = "BOFT: number of blocks (instead of the size)."});
  t.push_back({.name = "boft_n_butterfly_factor", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "1", .help = "BOFT: butterfly factor."});
  t.push_back({.name = "boft_dropout", .type = number, .group = G::tuner, .commands = c, .default_value = "0.0",
               .help = "BOFT: dropout."});
  t.push_back({.name = "vera_rank", .type = integer, .group = G::tuner, .commands = c, .default_value = "256",
               .help = "VeRA: rank."});
  t.push_back({.name = "vera_projection_prng_key", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "0", .help = "VeRA: projection seed."});
  t.push_back({.name = "vera_dropout", .type = number, .group = G::tuner, .commands = c, .default_value = "0.0",
               .help = "VeRA: dropout."});
  t.push_back({.name = "vera_d_initial", .type = number, .group = G::tuner, .commands = c, .default_value = "0.1",
               .help = "VeRA: initial d."});
  t.push_back({.name = "adapter_act", .group = G::tuner, .commands = c, .default_value = "gelu",
               .help = "Adapter tuner: activation."});
  t.push_back({.name = "adapter_length", .type = integer, .group = G::tuner, .commands = c, .default_value = "128",
               .help = "Adapter tuner: hidden size."});
  t.push_back({.name = "use_galore", .type = boolean, .group = G::tuner, .commands = c, .default_value = "false",
               .help = "GaLore: low-rank projected gradients for full tuning."});
  t.push_back({.name = "galore_target_modules", .type = list, .group = G::tuner, .commands = c,
               .default_note = "attention and MLP", .help = "GaLore: modules projected."});
  t.push_back({.name = "galore_rank", .type = integer, .group = G::tuner, .commands = c, .default_value = "128",
               .help = "GaLore: rank."});
  t.push_back({.name = "galore_update_proj_gap", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "50", .help = "GaLore: steps between projection updates."});
  t.push_back({.name = "galore_scale", .type = number, .group = G::tuner, .commands = c, .default_value = "1.0",
               .help = "GaLore: update scale."});
  t.push_back({.name = "galore_proj_type", .group = G::tuner, .commands = c, .default_value = "std",
               .help = "GaLore: projection type."});
  t.push_back({.name = "galore_optim_per_parameter", .type = boolean, .group = G::tuner, .commands = c,
               .default_value = "false", .help = "GaLore: one optimizer per parameter."});
  t.push_back({.name = "galore_with_embedding", .type = boolean, .group = G::tuner, .commands = c,
               .default_value = "false", .help = "GaLore: project the embedding too."});
  t.push_back({.name = "galore_quantization", .type = boolean, .group = G::tuner, .commands = c,
               .default_value = "false", .help = "Q-GaLore."});
  t.push_back({.name = "galore_proj_quant", .type = boolean, .group = G::tuner, .commands = c,
               .default_value = "false", .help = "Q-GaLore: quantize the projection."});
  t.push_back({.name = "galore_proj_bits", .type = integer, .group = G::tuner, .commands = c, .default_value = "4",
               .help = "Q-GaLore: projection bits."});
  t.push_back({.name = "galore_proj_group_size", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "256", .help = "Q-GaLore: projection group size."});
  t.push_back({.name = "galore_cos_threshold", .type = number, .group = G::tuner, .commands = c,
               .default_value = "0.4", .help = "Q-GaLore: cosine threshold of projection updates."});
  t.push_back({.name = "galore_gamma_proj", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "2", .help = "Q-GaLore: growth of the update interval."});
  t.push_back({.name = "galore_queue_size", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "5", .help = "Q-GaLore: similarity queue length."});
  t.push_back({.name = "adalora_target_r", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "8", .help = "AdaLoRA: average rank."});
  t.push_back({.name = "adalora_init_r", .type = integer, .group = G::tuner, .commands = c, .default_value = "12",
               .help = "AdaLoRA: initial rank."});
  t.push_back({.name = "adalora_tinit", .type = integer, .group = G::tuner, .commands = c, .default_value = "0",
               .help = "AdaLoRA: initial warm-up steps."});
  t.push_back({.name = "adalora_tfinal", .type = integer, .group = G::tuner, .commands = c, .default_value = "0",
               .help = "AdaLoRA: final warm-up steps."});
  t.push_back({.name = "adalora_deltaT", .type = integer, .group = G::tuner, .commands = c, .default_value = "1",
               .help = "AdaLoRA: steps between budget updates."});
  t.push_back({.name = "adalora_beta1", .type = number, .group = G::tuner, .commands = c, .default_value = "0.85",
               .help = "AdaLoRA: EMA beta1."});
  t.push_back({.name = "adalora_beta2", .type = number, .group = G::tuner, .commands = c, .default_value = "0.85",
               .help = "AdaLoRA: EMA beta2."});
  t.push_back({.name = "adalora_orth_reg_weight", .type = number, .group = G::tuner, .commands = c,
               .default_value = "0.5", .help = "AdaLoRA: orthogonality regularisation."});
  t.push_back({.name = "llamapro_num_new_blocks", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "4", .help = "LLaMA-Pro: blocks to insert."});
  t.push_back({.name = "llamapro_num_groups", .type = integer, .group = G::tuner, .commands = c,
               .default_note = "llamapro_num_new_blocks", .help = "LLaMA-Pro: insertion groups."});
  t.push_back({.name = "lisa_activated_layers", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "0", .help = "LISA (full tuning): layers trained at a time; 0 disables LISA."});
  t.push_back({.name = "lisa_step_interval", .type = integer, .group = G::tuner, .commands = c,
               .default_value = "20", .help = "LISA: steps between layer switches."});
  t.push_back({.name = "reft_layer_key", .group = G::tuner, .commands = c, .help = "ReFT: layer key."});
  t.push_back({.name = "reft_layers", .type = list, .group = G::tuner, .commands = c, .item = ItemType::integer,
               .default_note = "all layers", .help = "ReFT: layer indices."});
  t.push_back({.name = "reft_rank", .type = integer, .group = G::tuner, .commands = c, .default_value = "4",
               .help = "ReFT: rank."});
  t.push_back({.name = "reft_intervention_type", .group = G::tuner, .commands = c,
               .default_value = "LoreftIntervention",
               .choices = "NoreftIntervention LoreftIntervention ConsreftIntervention LobireftIntervention "
                          "DireftIntervention NodireftIntervention",
               .help = "ReFT: intervention."});
  t.push_back({.name = "reft_args", .type = json_or_string, .group = G::tuner, .commands = c,
               .help = "ReFT: extra arguments as a JSON dict."});
}

void add_training_options(std::vector<OptionSpec>& t) {
  constexpr CommandSet c = kTrain;
  t.push_back({.name = "output_dir", .group = G::training, .commands = c | kExport,
               .default_note = "output/<model name> (export: next to the checkpoint)",
               .help = "Run directory; training writes output_dir/vN-YYYYMMDD-HHMMSS/ with args.json, "
                       "logging.jsonl and checkpoint-N/."});
  t.push_back({.name = "add_version", .type = boolean, .group = G::training, .commands = c, .default_value = "true",
               .help = "Add the vN-YYYYMMDD-HHMMSS subdirectory to output_dir."});
  t.push_back({.name = "num_train_epochs", .type = number, .group = G::training, .commands = c,
               .default_value = "3.0", .help = "Training epochs."});
  t.push_back({.name = "max_steps", .type = integer, .group = G::training, .commands = c, .default_value = "-1",
               .help = "Total optimizer steps; > 0 overrides num_train_epochs (needed with --streaming)."});
  t.push_back({.name = "max_epochs", .type = integer, .group = G::training, .commands = c,
               .help = "Stop after this many epochs even when max_steps is larger (streaming)."});
  t.push_back({.name = "per_device_train_batch_size", .type = integer, .group = G::training, .commands = c,
               .default_value = "1", .help = "Sequences per device per micro-step (GRPO: completions)."});
  t.push_back({.name = "per_device_eval_batch_size", .type = integer, .group = G::training, .commands = c,
               .default_value = "1", .help = "Sequences per device per evaluation step."});
  t.push_back({.name = "gradient_accumulation_steps", .type = integer, .group = G::training, .commands = c,
               .default_note = "ceil(16 / (per_device_train_batch_size * world_size)), at least 1; 1 for GRPO",
               .help = "Micro-steps per optimizer step."});
  t.push_back({.name = "learning_rate", .type = number, .group = G::training, .commands = c,
               .default_note = "1e-4 for LoRA-like tuners, 1e-5 for full", .help = "Peak learning rate."});
  t.push_back({.name = "vit_lr", .type = number, .group = G::training, .commands = c,
               .default_note = "learning_rate", .help = "Learning rate of the vision tower (multimodal)."});
  t.push_back({.name = "aligner_lr", .type = number, .group = G::training, .commands = c,
               .default_note = "learning_rate", .help = "Learning rate of the projector (multimodal)."});
  t.push_back({.name = "lr_scheduler_type", .group = G::training, .commands = c, .default_value = "cosine",
               .choices = "linear cosine cosine_with_restarts polynomial constant constant_with_warmup "
                          "inverse_sqrt reduce_lr_on_plateau cosine_with_min_lr cosine_warmup_with_min_lr "
                          "warmup_stable_decay",
               .help = "Learning-rate schedule after warm-up."});
  t.push_back({.name = "lr_scheduler_kwargs", .type = json, .group = G::training, .commands = c,
               .help = "Schedule arguments as a JSON dict, e.g. '{\"min_lr\": 1e-6}' with cosine_with_min_lr."});
  t.push_back({.name = "warmup_ratio", .type = number, .group = G::training, .commands = c, .default_value = "0.0",
               .help = "Fraction of the steps spent warming up linearly."});
  t.push_back({.name = "warmup_steps", .type = integer, .group = G::training, .commands = c, .default_value = "0",
               .help = "Warm-up steps (overrides warmup_ratio when > 0)."});
  t.push_back({.name = "weight_decay", .type = number, .group = G::training, .commands = c, .default_value = "0.1",
               .help = "AdamW weight decay."});
  t.push_back({.name = "adam_beta1", .type = number, .group = G::training, .commands = c, .default_value = "0.9",
               .help = "AdamW beta1."});
  t.push_back({.name = "adam_beta2", .type = number, .group = G::training, .commands = c, .default_value = "0.95",
               .help = "AdamW beta2 (ms-swift's default; transformers uses 0.999)."});
  t.push_back({.name = "adam_epsilon", .type = number, .group = G::training, .commands = c, .default_value = "1e-8",
               .help = "AdamW epsilon."});
  t.push_back({.name = "max_grad_norm", .type = number, .group = G::training, .commands = c, .default_value = "1.0",
               .help = "Gradient clipping norm (the logged grad_norm is before clipping)."});
  t.push_back({.name = "optim", .group = G::training, .commands = c, .default_value = "adamw_torch",
               .help = "Optimizer (transformers name); swift.cpp runs its fused AdamW for every adamw_* name."});
  t.push_back({.name = "optimizer", .group = G::training, .commands = c,
               .default_note = "lorap with --lorap_lr_ratio, galore with --use_galore",
               .help = "ms-swift optimizer plugin name."});
  t.push_back({.name = "gradient_checkpointing", .type = boolean, .group = G::training, .commands = c,
               .default_value = "true", .help = "Recompute activations in the backward pass to save memory."});
  t.push_back({.name = "recompute_num_layers", .type = integer, .group = G::training, .commands = c,
               .default_note = "all layers",
               .help = "With --gradient_checkpointing: recompute only the first N decoder layers and keep every "
                       "activation of the others (Megatron's --recompute_method block): faster, more memory. "
                       "Without it, with --recompute_modules mlp: only the first N layers recompute their MLP. "
                       "Gradients are identical for every N."});
  t.push_back({.name = "recompute_modules", .type = list, .group = G::training, .commands = c,
               .default_note = "none",
               .help = "Selective recompute (Megatron's --recompute_modules) on the layers that keep their "
                       "activations: layernorm drops the two RMSNorm outputs and act drops silu(gate) * up, each "
                       "made again by one elementwise pass before the layer's backward (about a third of a layer's "
                       "activations: 11 GiB less for 2.6% of the step on the 7B at 8,192 tokens); mlp drops gate, up and silu(gate) * up and recomputes "
                       "them (two products and swiglu: most of the rest, for a fraction of the layer's compute; "
                       "without --gradient_checkpointing --recompute_num_layers N limits it to the first N layers). "
                       "core_attn is accepted and has nothing to do: attention never stores its scores. Gradients "
                       "are identical."});
  t.push_back({.name = "cpu_offloading_num_layers", .type = integer, .group = G::training, .commands = c,
               .default_value = "0",
               .help = "Activation offloading (Megatron's name): N of the layers that keep their MLP intermediates "
                       "send gate and up to page-locked host memory during the forward, on a copy stream that "
                       "overlaps the other layers' work, and fetch them back two layers ahead in the backward: "
                       "device memory for host memory and PCIe bandwidth instead of recompute. The layers are spread "
                       "over the kept ones (never the last two). Gradients are identical. On the H200 machines "
                       "measured so far the copies to the host slowed the step more than recomputing the same "
                       "layers' MLP (--recompute_modules mlp) does."});
  t.push_back({.name = "offload_frozen_layers", .type = integer, .group = G::training, .commands = c,
               .default_value = "0",
               .help = "LoRA: the frozen base matrices (q, k, v, o, gate, up, down) of the first N layers keep a copy "
                       "in page-locked host memory and leave the GPU from their forward until the backward copies "
                       "them back, two layers ahead on a copy stream (and keeps them for the next forward), so they "
                       "are not on the GPU when its memory peaks (the loss, with every layer's activations). "
                       "Qwen2.5-7B: 444 MiB per layer, each worth about one layer's MLP recompute. Only "
                       "host-to-device copies (which did not slow the GPU on the H200 machines measured; the "
                       "copies back to the host of --cpu_offloading_num_layers did). Results are identical (DoRA "
                       "too). Refused for full fine-tuning and tensor parallelism."});
  t.push_back({.name = "offload_embedding", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false",
               .help = "LoRA on a GPU: keep the frozen input embedding table in page-locked host memory that the GPU "
                       "reads directly, freeing its device memory (Qwen2.5-7B: 1 GiB, worth about two layers' MLP "
                       "recompute within a memory limit); each step's lookup reads its rows over the host link "
                       "(8,192 rows of 7 KiB for the 7B at 8k tokens). Results are identical. Refused for full "
                       "fine-tuning (the table trains) and for models whose LM head is the embedding "
                       "(tie_word_embeddings); on the CPU there is nothing to do."});
  t.push_back({.name = "vit_gradient_checkpointing", .type = boolean, .group = G::training, .commands = c,
               .default_note = "gradient_checkpointing", .help = "Gradient checkpointing of the vision tower."});
  t.push_back({.name = "gradient_checkpointing_kwargs", .type = json, .group = G::training, .commands = c,
               .help = "Checkpointing arguments as a JSON dict."});
  t.push_back({.name = "bf16", .type = boolean, .group = G::training, .commands = c, .default_note = "from torch_dtype",
               .help = "bf16 mixed precision. swift.cpp computes in the weights' dtype: true without --torch_dtype "
                       "selects bfloat16; true with --torch_dtype float16 (or with --fp16 true) is refused."});
  t.push_back({.name = "fp16", .type = boolean, .group = G::training, .commands = c, .default_note = "from torch_dtype",
               .help = "fp16 mixed precision (fp16 compute, fp32 accumulation, dynamic loss scaling). swift.cpp "
                       "computes in the weights' dtype: true without --torch_dtype selects float16; true with "
                       "--torch_dtype bfloat16 (or with --bf16 true) is refused."});
  t.push_back({.name = "deepspeed", .type = json_or_string, .group = G::training, .commands = c,
               .help = "zero0, zero1, zero2, zero3, zero2_offload, zero3_offload or a config file; swift.cpp "
                       "maps ZeRO-1/2 to its sharded optimizer states."});
  t.push_back({.name = "zero_hpz_partition_size", .type = integer, .group = G::training, .commands = c,
               .help = "ZeRO++ partition size."});
  t.push_back({.name = "deepspeed_autotp_size", .type = integer, .group = G::training, .commands = c,
               .help = "Tensor-parallel size of DeepSpeed AutoTP."});
  t.push_back({.name = "tensor_model_parallel_size", .type = integer, .group = G::training, .commands = c,
               .default_value = "1",
               .help = "Megatron tensor parallelism: attention heads and MLP units split over this many ranks "
                       "(the world is data-parallel x sequence-parallel x tensor-parallel ranks)."});
  t.push_back({.name = "fsdp", .group = G::training, .commands = c, .help = "FSDP preset or config file."});
  t.push_back({.name = "logging_steps", .type = integer, .group = G::training, .commands = c, .default_value = "5",
               .help = "Steps between logging.jsonl lines."});
  t.push_back({.name = "logging_first_step", .type = boolean, .group = G::training, .commands = c,
               .default_value = "true", .help = "Also log the first step."});
  t.push_back({.name = "logging_dir", .group = G::training, .commands = c, .default_note = "output_dir/runs",
               .help = "Directory of the event logs."});
  t.push_back({.name = "report_to", .type = list, .group = G::training, .commands = c,
               .default_value = "tensorboard",
               .help = "Loggers (tensorboard, wandb, swanlab, none, all); logging.jsonl is always written."});
  t.push_back({.name = "save_strategy", .group = G::training, .commands = c, .default_value = "steps",
               .choices = "no steps epoch best", .help = "When to write checkpoints."});
  t.push_back({.name = "save_steps", .type = integer, .group = G::training, .commands = c, .default_value = "500",
               .help = "Steps between checkpoints."});
  t.push_back({.name = "save_total_limit", .type = integer, .group = G::training, .commands = c,
               .default_note = "keep all", .help = "Checkpoints kept (older ones are deleted; the best is kept)."});
  t.push_back({.name = "save_only_model", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Checkpoints without optimizer and RNG state."});
  t.push_back({.name = "save_on_each_node", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Every node writes checkpoints (no shared file system)."});
  t.push_back({.name = "save_safetensors", .type = boolean, .group = G::training, .commands = c,
               .default_value = "true", .help = "Write weights as safetensors."});
  t.push_back({.name = "create_checkpoint_symlink", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Link output_dir/best and output_dir/last to checkpoints."});
  t.push_back({.name = "eval_strategy", .group = G::training, .commands = c, .choices = "no steps epoch",
               .default_note = "save_strategy, or no without validation data",
               .help = "When to evaluate on the validation set."});
  t.push_back({.name = "eval_steps", .type = integer, .group = G::training, .commands = c,
               .default_note = "save_steps", .help = "Steps between evaluations."});
  t.push_back({.name = "eval_on_start", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Evaluate before the first step."});
  t.push_back({.name = "metric_for_best_model", .group = G::training, .commands = c,
               .default_note = "loss (GRPO: reward)", .help = "Metric that picks the best checkpoint."});
  t.push_back({.name = "greater_is_better", .type = boolean, .group = G::training, .commands = c,
               .default_note = "false for loss metrics", .help = "Direction of metric_for_best_model."});
  t.push_back({.name = "load_best_model_at_end", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Reload the best checkpoint when training ends."});
  t.push_back({.name = "predict_with_generate", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Evaluate by generating (rouge/bleu) instead of by loss."});
  t.push_back({.name = "resume_from_checkpoint", .group = G::training, .commands = c,
               .help = "Checkpoint directory to resume from (weights, optimizer, RNG, data position)."});
  t.push_back({.name = "resume_only_model", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Resume only the weights."});
  t.push_back({.name = "ignore_data_skip", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "With resume_only_model, start from step 0 without skipping data."});
  t.push_back({.name = "dataloader_num_workers", .type = integer, .group = G::training, .commands = c,
               .default_note = "1", .help = "Data prefetching workers."});
  t.push_back({.name = "dataloader_pin_memory", .type = boolean, .group = G::training, .commands = c,
               .default_value = "true", .help = "Pinned host memory for batches."});
  t.push_back({.name = "dataloader_persistent_workers", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Keep data workers alive between epochs."});
  t.push_back({.name = "dataloader_prefetch_factor", .type = integer, .group = G::training, .commands = c,
               .default_note = "10 when dataloader_num_workers > 0", .help = "Batches prefetched per worker."});
  t.push_back({.name = "dataloader_drop_last", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Drop the last incomplete batch."});
  t.push_back({.name = "train_dataloader_shuffle", .type = boolean, .group = G::training, .commands = c,
               .default_value = "true", .help = "Shuffle batches (besides --dataset_shuffle)."});
  t.push_back({.name = "group_by_length", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Batch samples of similar length together."});
  t.push_back({.name = "ddp_bucket_cap_mb", .type = integer, .group = G::training, .commands = c,
               .default_value = "25",
               .help = "Data parallel: MiB of gradients per reduction bucket (each bucket's collective starts as soon "
                       "as its gradients are final in the backward)."});
  t.push_back({.name = "ddp_find_unused_parameters", .type = boolean, .group = G::training, .commands = c,
               .help = "Accepted for compatibility (gradient reduction knows its parameters)."});
  t.push_back({.name = "neftune_noise_alpha", .type = number, .group = G::training, .commands = c,
               .help = "NEFTune embedding noise (5, 10, 15)."});
  t.push_back({.name = "use_liger_kernel", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Accepted for compatibility (swift.cpp's kernels are fused)."});
  t.push_back({.name = "average_tokens_across_devices", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Normalise the loss by the token count of all devices."});
  t.push_back({.name = "full_determinism", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false",
               .help = "Run-to-run identical GPU results: cuBLASLt products take the heuristic's first algorithm "
                       "instead of the fastest timed one (a few % slower) and the attention backward stays "
                       "deterministic whatever SWIFT_CUDNN_ATTENTION_BWD says. CPU kernels are deterministic anyway."});
  t.push_back({.name = "router_aux_loss_coef", .type = number, .group = G::training, .commands = c,
               .default_value = "0.0", .help = "MoE: weight of the router auxiliary loss."});
  t.push_back({.name = "enable_dft_loss", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "SFT: dynamic fine-tuning (DFT) loss."});
  t.push_back({.name = "enable_channel_loss", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Report the loss per dataset 'channel' field."});
  t.push_back({.name = "loss_type", .type = list, .group = G::training, .commands = c,
               .default_note = "the model's loss; RLHF: sigmoid (DPO, CPO), simpo, kto, grpo",
               .help = "Loss: an ms-swift loss name; for DPO several (mixed, with --loss_weights); for GRPO "
                       "grpo bnpo dr_grpo dapo cispo sapo."});
  t.push_back({.name = "metric", .group = G::training, .commands = c | kServe,
               .help = "Evaluation metric (training: plugin name; infer: acc or rouge)."});
  t.push_back({.name = "acc_strategy", .group = G::training, .commands = c, .default_value = "token",
               .choices = "token seq", .help = "Accuracy per token or per sequence."});
  t.push_back({.name = "use_logits_to_keep", .type = boolean, .group = G::training, .commands = c,
               .default_note = "automatic", .help = "Compute logits only where labels need them."});
  t.push_back({.name = "check_model", .type = boolean, .group = G::training, .commands = c,
               .default_value = "true", .help = "Check the model files before training."});
  t.push_back({.name = "use_flash_ckpt", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Asynchronous checkpoint writing."});
  t.push_back({.name = "early_stop_interval", .type = integer, .group = G::training, .commands = c,
               .help = "Stop when the best metric has not improved for this many evaluations."});
  t.push_back({.name = "eval_use_evalscope", .type = boolean, .group = G::training, .commands = c,
               .default_value = "false", .help = "Run --eval_dataset benchmarks during training."});
  t.push_back({.name = "eval_dataset", .type = list, .group = G::eval, .commands = c | kEval, .default_value = "",
               .help = "Benchmarks (gsm8k, ...) or dataset files to evaluate on."});
  t.push_back({.name = "eval_dataset_args", .type = json, .group = G::eval, .commands = c | kEval,
               .help = "Benchmark arguments as a JSON dict."});
  t.push_back({.name = "eval_limit", .type = integer, .group = G::eval, .commands = c | kEval,
               .default_note = "all", .help = "Samples per benchmark."});
  t.push_back({.name = "eval_generation_config", .type = json, .group = G::eval, .commands = c | kEval,
               .command_defaults = {{kEval, "{}"}},
               .help = "Generation settings of evaluation as a JSON dict, e.g. '{\"max_tokens\": 512}'."});
  t.push_back({.name = "push_to_hub", .type = boolean, .group = G::training, .commands = c | kExport,
               .default_value = "false", .help = "Upload the result to the hub."});
  t.push_back({.name = "hub_model_id", .group = G::training, .commands = c | kExport,
               .help = "Hub repository to upload to."});
  t.push_back({.name = "hub_private_repo", .type = boolean, .group = G::training, .commands = c | kExport,
               .default_value = "false", .help = "Create the hub repository as private."});
}

}  // namespace swift::apps
