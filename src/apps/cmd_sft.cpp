// apps/cmd_sft.cpp — `swift sft` and `swift pt`: ms-swift's arguments -> model, tokenizer, template, data,
// LoRA or full tuner -> Trainer -> run directory with checkpoints.
//
// Invariants: every argument is read through the shared option table (apps/arguments.h); the run directory gets
// args.json before training starts; the last lines printed name the last and best checkpoints, as ms-swift does.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "apps/arguments.h"
#include "apps/arguments_structs.h"
#include "apps/commands.h"
#include "apps/model_setup.h"
#include "core/error.h"
#include "data/loader.h"
#include "data/pipeline.h"
#include "model/training.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace swift::apps {

namespace {

namespace fs = std::filesystem;

int run_training(Command command, const Args& raw) {
  Arguments args = parse_arguments(command, raw);
  if (args.help_requested()) {
    std::printf("%s", help_text(command).c_str());
    return 0;
  }
  const ModelArguments m = ModelArguments::from(args);
  const DataArguments d = DataArguments::from(args);
  const TunerArguments t = TunerArguments::from(args);
  const TrainingArguments tr = TrainingArguments::from(args);
  const bool pretrain = command == Command::pt;

  LoadedModel loaded = load_model_for(m, d);
  const io::ModelConfig& config = loaded.model->config();
  std::fprintf(stderr, "model: %s\ntemplate: %s\n", config.summary().c_str(), loaded.chat_template->name().c_str());

  // Data: read, normalise, tokenize (through the cache), pack.
  data::DataPipelineOptions po;
  po.dataset.dataset = d.dataset;
  po.dataset.val_dataset = d.val_dataset;
  po.dataset.split_dataset_ratio = d.split_dataset_ratio;
  po.dataset.data_seed = static_cast<uint64_t>(d.data_seed);
  po.dataset.dataset_num_proc = static_cast<int>(std::max<int64_t>(1, d.dataset_num_proc));
  po.dataset.dataset_shuffle = d.dataset_shuffle;
  po.dataset.val_dataset_shuffle = d.val_dataset_shuffle;
  po.dataset.strict = d.strict;
  const int64_t max_length = d.max_length.value_or(config.max_position_embeddings);
  po.encode.mode = pretrain ? data::EncodeMode::Pretrain : data::EncodeMode::Chat;
  po.encode.chat = loaded.encoder.get();
  po.encode.tokenizer = loaded.tokenizer.get();
  po.encode.max_length = max_length;
  po.encode.truncation = data::truncation_from_string(d.truncation_strategy);
  po.encode.num_threads = po.dataset.dataset_num_proc;
  po.load_from_cache_file = args.has("load_from_cache_file") && !args.is_none("load_from_cache_file") &&
                            args.get_bool("load_from_cache_file");
  data::PreparedData prepared = data::prepare_data(po);
  std::fprintf(stderr, "%s\n", prepared.summary().c_str());
  SWIFT_CHECK(prepared.train && prepared.train->size() > 0,
              "--dataset: no training sample left after loading and tokenizing (see the report above)");
  std::shared_ptr<const data::PackPlan> plan;
  if (d.packing) {
    plan = data::make_pack_plan(*prepared.train, d.packing_length.value_or(max_length));
    std::fprintf(stderr, "packing: %zu sequences into %lld rows of up to %lld tokens\n", prepared.train->size(),
                 static_cast<long long>(plan->rows()), static_cast<long long>(plan->capacity));
  }
  data::LoaderOptions lo;
  lo.batch_size = tr.per_device_train_batch_size;
  lo.shuffle = d.dataset_shuffle;
  lo.seed = static_cast<uint64_t>(d.data_seed);
  lo.num_workers = static_cast<int>(tr.dataloader_num_workers);
  data::DataLoader loader(prepared.train, lo, plan);

  // Tuner.
  const model::TunerType tuner = model::tuner_type_from_string(t.tuner_type);
  model::LoraAdapters lora;
  if (tuner == model::TunerType::Lora) {
    if (!m.adapters.empty()) {  // continue training an existing adapter (weights only, as ms-swift)
      SWIFT_CHECK(m.adapters.size() == 1, "--adapters: training takes one adapter, got {}", m.adapters.size());
      lora = model::lora_from_peft(io::load_peft_adapter(m.adapters[0]), config);
    } else {
      model::LoraSettings s;
      s.rank = t.lora_rank;
      s.alpha = static_cast<double>(t.lora_alpha);
      s.dropout = t.lora_dropout;
      s.target_modules = t.target_modules;
      s.target_regex = t.target_regex.value_or("");
      s.use_rslora = t.use_rslora;
      s.use_dora = t.use_dora;
      s.init_weights = t.init_weights == "True" || t.init_weights == "true" ? "true" : t.init_weights;
      s.seed = static_cast<uint64_t>(tr.seed);
      lora = model::create_lora(config, s);
    }
  }
  model::TrainableModel trainable(*loaded.model, tuner, std::move(lora));
  const int64_t total = config.parameter_count();
  std::fprintf(stderr, "trainable parameters: %lld of %lld (%.4f%%)\n", static_cast<long long>(trainable.trainable_count()),
               static_cast<long long>(total), 100.0 * static_cast<double>(trainable.trainable_count()) / total);

  const std::string run_dir = train::create_run_dir(tr.output_dir, tr.add_version);
  args.save_json((fs::path(run_dir) / "args.json").string());
  std::fprintf(stderr, "output: %s\n", run_dir.c_str());

  train::TrainerConfig tc;
  tc.run_dir = run_dir;
  tc.num_train_epochs = tr.num_train_epochs;
  tc.max_steps = tr.max_steps;
  tc.gradient_accumulation_steps = tr.gradient_accumulation_steps;
  tc.learning_rate = tr.learning_rate;
  tc.adam.beta1 = tr.adam_beta1;
  tc.adam.beta2 = tr.adam_beta2;
  tc.adam.eps = tr.adam_epsilon;
  tc.adam.weight_decay = tr.weight_decay;
  tc.max_grad_norm = tr.max_grad_norm;
  tc.schedule = train::schedule_type_from_string(tr.lr_scheduler_type);
  if (tr.lr_scheduler_kwargs.is_object() && tr.lr_scheduler_kwargs.contains("min_lr_rate")) {
    tc.min_lr_rate = tr.lr_scheduler_kwargs["min_lr_rate"].get<double>();
  }
  tc.warmup_steps = tr.warmup_steps;
  tc.warmup_ratio = tr.warmup_ratio;
  tc.gradient_checkpointing = tr.gradient_checkpointing;
  tc.logging_steps = tr.logging_steps;
  tc.logging_first_step = tr.logging_first_step;
  tc.eval_steps = tr.eval_steps.value_or(tr.save_steps);
  tc.save_steps = tr.save_steps;
  tc.save_total_limit = tr.save_total_limit.value_or(-1);
  tc.per_device_eval_batch_size = tr.per_device_eval_batch_size;
  tc.seed = static_cast<uint64_t>(tr.seed);
  tc.resume_from_checkpoint = tr.resume_from_checkpoint.value_or("");
  tc.args_json = args.to_json();
  tc.model_config_json = loaded.config_json;
  tc.extra_files = loaded.tokenizer_files;
  tc.base_model_name_or_path = *m.model;
  train::Trainer trainer(tc, trainable, loader, prepared.val);
  std::fprintf(stderr, "training: %lld optimizer steps (%lld micro-batches per epoch, gradient accumulation %lld)\n",
               static_cast<long long>(trainer.max_steps()), static_cast<long long>(loader.steps_per_epoch()),
               static_cast<long long>(tc.gradient_accumulation_steps));
  const train::TrainResult r = trainer.train();
  std::fprintf(stderr, "train: %lld steps in %.1f s, %.0f tokens/s, peak memory %.2f GiB\n",
               static_cast<long long>(r.global_step), r.train_seconds, r.tokens_per_second,
               peak_memory_gib());
  std::printf("last_model_checkpoint: %s\n", r.last_checkpoint.c_str());
  std::printf("best_model_checkpoint: %s\n", r.best_checkpoint.empty() ? "None" : r.best_checkpoint.c_str());
  return r.interrupted ? 130 : 0;
}

}  // namespace

int cmd_sft(const Args& args) { return run_training(Command::sft, args); }
int cmd_pt(const Args& args) { return run_training(Command::pt, args); }

}  // namespace swift::apps
