// apps/arguments_table_rlhf.cpp — option rows of swift rlhf: the algorithm, reference/reward/teacher
// models, DPO-family, KTO, PPO, GKD and GRPO settings, and the vLLM rollout settings GRPO shares with the
// servers.
//
// Invariants: names and defaults are ms-swift's (v4 swift/arguments/rlhf_args.py and its GRPO mixin);
// defaults that depend on rlhf_type are None here and filled by the resolver (default_note says how).
// Help texts are ours.
#include "apps/arguments_internal.h"

namespace swift::apps {

namespace {
using enum OptionType;
using G = OptionGroup;
}  // namespace

void add_rlhf_options(std::vector<OptionSpec>& t) {
  constexpr CommandSet c = kRlhf;
  t.push_back({.name = "rlhf_type", .group = G::rlhf, .commands = c, .default_value = "dpo",
               .choices = "dpo orpo simpo kto cpo rm ppo grpo gkd", .help = "Alignment algorithm."});
  t.push_back({.name = "ref_model", .group = G::rlhf, .commands = c,
               .default_note = "--model for full DPO/KTO/PPO/GRPO; none with LoRA (the base model is the reference)",
               .help = "Reference model."});
  t.push_back({.name = "ref_adapters", .type = list, .group = G::rlhf, .commands = c, .default_value = "",
               .help = "Adapters of the reference model (e.g. the SFT checkpoint)."});
  t.push_back({.name = "ref_model_type", .group = G::rlhf, .commands = c, .help = "model_type of the reference."});
  t.push_back({.name = "ref_model_revision", .group = G::rlhf, .commands = c, .help = "Hub revision of the reference."});
  t.push_back({.name = "beta", .type = number, .group = G::rlhf, .commands = c,
               .default_note = "2.0 SimPO, 0.04 GRPO, 0.5 GKD, else 0.1",
               .help = "Strength of the pull towards the reference (GRPO: KL coefficient; 0 drops the reference)."});
  t.push_back({.name = "label_smoothing", .type = number, .group = G::rlhf, .commands = c, .default_value = "0.0",
               .help = "DPO label smoothing."});
  t.push_back({.name = "max_completion_length", .type = integer, .group = G::rlhf, .commands = c,
               .default_value = "512", .help = "GRPO/PPO/GKD: maximum generated tokens."});
  t.push_back({.name = "rpo_alpha", .type = number, .group = G::rlhf, .commands = c,
               .help = "RPO: weight of the SFT (NLL) term added to the DPO loss."});
  t.push_back({.name = "ld_alpha", .type = number, .group = G::rlhf, .commands = c,
               .help = "LD-DPO: weight of the log-probabilities past the common prefix."});
  t.push_back({.name = "discopop_tau", .type = number, .group = G::rlhf, .commands = c, .default_value = "0.05",
               .help = "DiscoPOP temperature (loss_type discopop)."});
  t.push_back({.name = "loss_weights", .type = list, .group = G::rlhf, .commands = c, .item = ItemType::number,
               .help = "DPO with several loss types: one weight per type."});
  t.push_back({.name = "cpo_alpha", .type = number, .group = G::rlhf, .commands = c, .default_value = "1.0",
               .help = "CPO/SimPO: weight of the NLL term."});
  t.push_back({.name = "simpo_gamma", .type = number, .group = G::rlhf, .commands = c, .default_value = "1.0",
               .help = "SimPO reward margin (0.5-1.5)."});
  t.push_back({.name = "desirable_weight", .type = number, .group = G::rlhf, .commands = c, .default_value = "1.0",
               .help = "KTO: weight of desirable samples."});
  t.push_back({.name = "undesirable_weight", .type = number, .group = G::rlhf, .commands = c, .default_value = "1.0",
               .help = "KTO: weight of undesirable samples."});
  t.push_back({.name = "center_rewards_coefficient", .type = number, .group = G::rlhf, .commands = c,
               .help = "Reward modelling: pull rewards towards zero mean (0.01 recommended)."});
  // reward and teacher models
  t.push_back({.name = "reward_model", .type = list, .group = G::rlhf, .commands = c,
               .help = "Reward models (PPO, GRPO)."});
  t.push_back({.name = "reward_adapters", .type = list, .group = G::rlhf, .commands = c, .default_value = "",
               .help = "Adapters of the reward models."});
  t.push_back({.name = "reward_model_type", .type = list, .group = G::rlhf, .commands = c,
               .help = "model_type of the reward models."});
  t.push_back({.name = "reward_model_revision", .type = list, .group = G::rlhf, .commands = c,
               .help = "Hub revisions of the reward models."});
  t.push_back({.name = "reward_model_plugin", .type = list, .group = G::rlhf, .commands = c,
               .help = "Reward model logic plugins."});
  t.push_back({.name = "teacher_model", .group = G::rlhf, .commands = c, .help = "Teacher model (required for GKD)."});
  t.push_back({.name = "teacher_adapters", .type = list, .group = G::rlhf, .commands = c, .default_value = "",
               .help = "Adapters of the teacher."});
  t.push_back({.name = "teacher_model_type", .group = G::rlhf, .commands = c, .help = "model_type of the teacher."});
  t.push_back({.name = "teacher_model_revision", .group = G::rlhf, .commands = c,
               .help = "Hub revision of the teacher."});
  t.push_back({.name = "teacher_deepspeed", .type = json_or_string, .group = G::rlhf, .commands = c,
               .default_note = "--deepspeed", .help = "DeepSpeed setting of the teacher."});
  // GKD
  t.push_back({.name = "lmbda", .type = number, .group = G::rlhf, .commands = c, .default_value = "0.5",
               .help = "GKD: fraction of student-generated (on-policy) data."});
  t.push_back({.name = "sft_alpha", .type = number, .group = G::rlhf, .commands = c, .default_value = "0.0",
               .help = "GKD: weight of the SFT loss added to the distillation loss."});
  t.push_back({.name = "seq_kd", .type = boolean, .group = G::rlhf, .commands = c, .default_value = "false",
               .help = "GKD: sequence-level distillation on teacher generations."});
  t.push_back({.name = "offload_teacher_model", .type = boolean, .group = G::rlhf, .commands = c,
               .default_value = "false", .help = "GKD: keep the teacher off the GPU between uses."});
  // PPO
  t.push_back({.name = "num_ppo_epochs", .type = integer, .group = G::rlhf, .commands = c, .default_value = "4",
               .help = "PPO: epochs per batch of rollouts."});
  t.push_back({.name = "whiten_rewards", .type = boolean, .group = G::rlhf, .commands = c,
               .default_value = "false", .help = "PPO: whiten rewards."});
  t.push_back({.name = "kl_coef", .type = number, .group = G::rlhf, .commands = c, .default_value = "0.05",
               .help = "PPO: KL coefficient."});
  t.push_back({.name = "cliprange", .type = number, .group = G::rlhf, .commands = c, .default_value = "0.2",
               .help = "PPO: policy clip range."});
  t.push_back({.name = "vf_coef", .type = number, .group = G::rlhf, .commands = c, .default_value = "0.1",
               .help = "PPO: value loss coefficient."});
  t.push_back({.name = "cliprange_value", .type = number, .group = G::rlhf, .commands = c, .default_value = "0.2",
               .help = "PPO: value clip range."});
  t.push_back({.name = "gamma", .type = number, .group = G::rlhf, .commands = c, .default_value = "1.0",
               .help = "PPO: discount factor."});
  t.push_back({.name = "lam", .type = number, .group = G::rlhf, .commands = c, .default_value = "0.95",
               .help = "PPO: GAE lambda."});
  t.push_back({.name = "num_mini_batches", .type = integer, .group = G::rlhf, .commands = c, .default_value = "1",
               .help = "PPO: mini-batches per batch."});
  t.push_back({.name = "local_rollout_forward_batch_size", .type = integer, .group = G::rlhf, .commands = c,
               .default_value = "64", .help = "PPO: rollout forward batch size."});
  t.push_back({.name = "num_sample_generations", .type = integer, .group = G::rlhf, .commands = c,
               .default_value = "10", .help = "PPO: debug generations during training."});
  t.push_back({.name = "missing_eos_penalty", .type = number, .group = G::rlhf, .commands = c,
               .help = "PPO: penalty for completions without EOS."});
  // GRPO
  t.push_back({.name = "num_generations", .type = integer, .group = G::rlhf, .commands = c, .default_value = "8",
               .help = "GRPO: completions per prompt (G)."});
  t.push_back({.name = "num_generations_eval", .type = integer, .group = G::rlhf, .commands = c,
               .default_note = "num_generations", .help = "GRPO: completions per prompt during evaluation."});
  t.push_back({.name = "generation_batch_size", .type = integer, .group = G::rlhf, .commands = c,
               .default_note = "the effective training batch size",
               .help = "GRPO: completions generated per rollout."});
  t.push_back({.name = "steps_per_generation", .type = integer, .group = G::rlhf, .commands = c,
               .default_note = "gradient_accumulation_steps",
               .help = "GRPO: optimizer steps per rollout (exclusive with generation_batch_size)."});
  t.push_back({.name = "reward_funcs", .type = list, .group = G::rlhf, .commands = c, .default_value = "",
               .help = "GRPO reward functions: accuracy, format, cosine, repetition, soft_overlong."});
  t.push_back({.name = "reward_weights", .type = list, .group = G::rlhf, .commands = c, .item = ItemType::number,
               .default_note = "1.0 each", .help = "GRPO: one weight per reward function and reward model."});
  t.push_back({.name = "log_completions", .type = boolean, .group = G::rlhf, .commands = c,
               .default_value = "false", .help = "Write generated completions to completions.jsonl."});
  t.push_back({.name = "num_iterations", .type = integer, .group = G::rlhf, .commands = c, .default_value = "1",
               .help = "GRPO: updates per batch of rollouts (mu)."});
  t.push_back({.name = "epsilon", .type = number, .group = G::rlhf, .commands = c, .default_value = "0.2",
               .help = "GRPO: clip epsilon."});
  t.push_back({.name = "epsilon_high", .type = number, .group = G::rlhf, .commands = c,
               .default_note = "epsilon", .help = "GRPO: upper clip epsilon (DAPO clip-higher)."});
  t.push_back({.name = "delta", .type = number, .group = G::rlhf, .commands = c,
               .help = "GRPO: upper bound of two-sided clipping."});
  t.push_back({.name = "importance_sampling_level", .group = G::rlhf, .commands = c, .default_value = "token",
               .choices = "token sequence sequence_token", .help = "GRPO: per-token or per-sequence (GSPO) ratios."});
  t.push_back({.name = "advantage_estimator", .group = G::rlhf, .commands = c, .default_value = "grpo",
               .choices = "grpo rloo reinforce_plus_plus", .help = "GRPO: advantage estimator."});
  t.push_back({.name = "kl_in_reward", .type = boolean, .group = G::rlhf, .commands = c,
               .default_note = "false for grpo, true for rloo and reinforce_plus_plus",
               .help = "GRPO: subtract the KL from the reward instead of adding a loss term."});
  t.push_back({.name = "scale_rewards", .group = G::rlhf, .commands = c, .choices = "group batch none",
               .value_aliases = "true=group True=group false=none False=none",
               .default_note = "group for grpo, none for rloo, batch for reinforce_plus_plus",
               .help = "GRPO: reward normalisation."});
  t.push_back({.name = "dynamic_sample", .type = boolean, .group = G::rlhf, .commands = c, .default_value = "false",
               .help = "GRPO: replace groups whose rewards do not vary."});
  t.push_back({.name = "max_resample_times", .type = integer, .group = G::rlhf, .commands = c, .default_value = "3",
               .help = "GRPO: resampling attempts of dynamic_sample."});
  t.push_back({.name = "overlong_filter", .type = boolean, .group = G::rlhf, .commands = c, .default_value = "false",
               .help = "GRPO: exclude truncated completions from the loss."});
  t.push_back({.name = "top_entropy_quantile", .type = number, .group = G::rlhf, .commands = c,
               .default_value = "1.0", .help = "GRPO: keep only the highest-entropy tokens in the loss."});
  t.push_back({.name = "log_entropy", .type = boolean, .group = G::rlhf, .commands = c, .default_value = "false",
               .help = "GRPO: log token entropy."});
  t.push_back({.name = "sync_ref_model", .type = boolean, .group = G::rlhf, .commands = c, .default_value = "false",
               .help = "Periodically mix the policy into the reference model."});
  t.push_back({.name = "ref_model_mixup_alpha", .type = number, .group = G::rlhf, .commands = c,
               .default_value = "0.6", .help = "Weight of the policy when syncing the reference."});
  t.push_back({.name = "ref_model_sync_steps", .type = integer, .group = G::rlhf, .commands = c,
               .default_value = "512", .help = "Steps between reference syncs."});
  t.push_back({.name = "multi_turn_scheduler", .group = G::rlhf, .commands = c, .help = "GRPO: multi-turn plugin."});
  t.push_back({.name = "max_turns", .type = integer, .group = G::rlhf, .commands = c,
               .default_note = "unlimited", .help = "GRPO: maximum turns of a multi-turn rollout."});
  t.push_back({.name = "cosine_min_len_value_wrong", .type = number, .group = G::rlhf, .commands = c,
               .default_value = "-0.5", .help = "Cosine reward: wrong answer at length 0."});
  t.push_back({.name = "cosine_max_len_value_wrong", .type = number, .group = G::rlhf, .commands = c,
               .default_value = "0.0", .help = "Cosine reward: wrong answer at the maximum length."});
  t.push_back({.name = "cosine_min_len_value_correct", .type = number, .group = G::rlhf, .commands = c,
               .default_value = "1.0", .help = "Cosine reward: correct answer at length 0."});
  t.push_back({.name = "cosine_max_len_value_correct", .type = number, .group = G::rlhf, .commands = c,
               .default_value = "0.5", .help = "Cosine reward: correct answer at the maximum length."});
  t.push_back({.name = "cosine_max_len", .type = integer, .group = G::rlhf, .commands = c,
               .default_note = "max_completion_length", .help = "Cosine reward: maximum length."});
  t.push_back({.name = "repetition_n_grams", .type = integer, .group = G::rlhf, .commands = c,
               .default_value = "3", .help = "Repetition reward: n-gram size."});
  t.push_back({.name = "repetition_max_penalty", .type = number, .group = G::rlhf, .commands = c,
               .default_value = "-1.0", .help = "Repetition reward: largest penalty."});
  t.push_back({.name = "soft_max_length", .type = integer, .group = G::rlhf, .commands = c,
               .default_note = "max_completion_length", .help = "Soft overlong reward: maximum length."});
  t.push_back({.name = "soft_cache_length", .type = integer, .group = G::rlhf, .commands = c,
               .help = "Soft overlong reward: length of the penalty ramp (required with soft_overlong)."});
  // rollout engine (GRPO's vLLM settings; the servers share the vllm_* sizing options)
  t.push_back({.name = "use_vllm", .type = boolean, .group = G::rlhf, .commands = c, .default_value = "false",
               .help = "GRPO: generate with the serving engine (swift.cpp: its own paged engine)."});
  t.push_back({.name = "vllm_mode", .group = G::rlhf, .commands = c, .choices = "server colocate",
               .help = "GRPO: rollouts in this process (colocate) or from a rollout server."});
  t.push_back({.name = "vllm_server_host", .type = list, .group = G::rlhf, .commands = c,
               .help = "GRPO server mode: rollout server hosts."});
  t.push_back({.name = "vllm_server_port", .type = list, .group = G::rlhf, .commands = c,
               .default_value = "8000", .item = ItemType::integer, .help = "GRPO server mode: rollout server ports."});
  t.push_back({.name = "vllm_server_base_url", .type = list, .group = G::rlhf, .commands = c,
               .help = "GRPO server mode: base URLs (instead of host and port)."});
  t.push_back({.name = "vllm_server_timeout", .type = number, .group = G::rlhf, .commands = c,
               .default_value = "240.0", .help = "GRPO server mode: connection timeout in seconds."});
  t.push_back({.name = "async_generate", .type = boolean, .group = G::rlhf, .commands = c,
               .default_value = "false", .help = "GRPO: generate the next batch with the previous weights."});
  t.push_back({.name = "sleep_level", .type = integer, .group = G::rlhf, .commands = c, .default_value = "0",
               .choices = "0 1 2", .help = "GRPO colocate: release engine memory while training."});
  t.push_back({.name = "offload_optimizer", .type = boolean, .group = G::rlhf, .commands = c,
               .default_value = "false", .help = "GRPO colocate: offload optimizer states while generating."});
  t.push_back({.name = "offload_model", .type = boolean, .group = G::rlhf, .commands = c, .default_value = "false",
               .help = "GRPO colocate: offload the model while generating."});
  t.push_back({.name = "move_model_batches", .type = integer, .group = G::rlhf, .commands = c,
               .help = "GRPO: batches in which weights move to the engine."});
}

}  // namespace swift::apps
