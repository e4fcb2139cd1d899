// apps/cmd_sft.cpp — `swift sft` and `swift pt`: ms-swift's arguments -> model, tokenizer, template, data,
// LoRA or full tuner -> Trainer -> run directory with checkpoints.
//
// Invariants: every argument is read through the shared option table (apps/arguments.h); the run directory gets
// args.json before training starts; the last lines printed name the last and best checkpoints, as ms-swift does.
// --streaming reads the training rows while training (data/streaming.h) and needs --max_steps; --cache_dir is
// where --load_from_cache_file keeps tokenized datasets (data/cache.h).
// Data parallel: under `NPROC_PER_NODE=N swift sft` (or torchrun / mpirun / srun) every rank runs this with its
// launch environment; the communicator is the CPU shared-memory group for a CPU model, NCCL for a CUDA one. The
// loader gives each rank its share (global batch = per_device_train_batch_size x accumulation x world size); only
// rank 0 creates the run directory (its path is sent to the others) and writes args.json, logs and checkpoints.
// --sequence_parallel_size P / --tensor_model_parallel_size N: the world is DP = world / (P N) replicas whose ranks share
// one batch stream; SP ranks split each batch's tokens, TP ranks the linears' weights (train/parallel.h: each TP rank
// keeps only its shards from load on); the global batch counts replicas, not ranks.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "apps/arguments.h"
#include "apps/arguments_structs.h"
#include "apps/commands.h"
#include "apps/model_setup.h"
#include "core/error.h"
#include "core/memory.h"
#include "data/loader.h"
#include "data/pipeline.h"
#include "data/streaming.h"
#include "dist/init.h"
#include "model/training.h"
#include "ops/backends.h"
#include "train/data_parallel.h"
#include "train/parallel.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace swift::apps {

namespace {

namespace fs = std::filesystem;

// The ZeRO stage of --deepspeed: a preset of ms-swift (zero0 .. zero3, zero2_offload, zero3_offload), a DeepSpeed
// config file, or its JSON inline (zero_optimization.stage and its offload settings).
int zero_stage_from_deepspeed(const nlohmann::json& deepspeed) {
  const char* use = "use --deepspeed zero2 (gradients and optimizer states sharded over the ranks), zero1 or zero0";
  nlohmann::json config = deepspeed;
  std::string what = "--deepspeed (inline JSON)";
  if (deepspeed.is_string()) {
    const std::string name = deepspeed.get<std::string>();
    if (name.empty() || name == "zero0") return 0;
    if (name == "zero1") return 1;
    if (name == "zero2") return 2;
    if (name == "zero3") {
      fail("--deepspeed zero3: ZeRO-3 (parameters sharded over the ranks) is not supported; {}", use);
    }
    if (name == "zero2_offload" || name == "zero3_offload") {
      fail("--deepspeed {}: offloading optimizer states or parameters to the CPU is not supported; {}", name, use);
    }
    std::ifstream in(name);
    if (!in) {
      fail("--deepspeed '{}' is neither a preset (zero0, zero1, zero2, zero3, zero2_offload, zero3_offload) nor a "
           "readable DeepSpeed config file", name);
    }
    try {
      in >> config;
    } catch (const nlohmann::json::exception& e) {
      fail("--deepspeed '{}': not a JSON DeepSpeed config: {}", name, e.what());
    }
    what = "--deepspeed '" + name + "'";
  }
  if (!config.is_object()) fail("{}: expected a JSON object with zero_optimization, got {}", what, config.dump());
  const nlohmann::json zero = config.value("zero_optimization", nlohmann::json::object());
  if (!zero.is_object()) fail("{}: zero_optimization must be a JSON object, got {}", what, zero.dump());
  const nlohmann::json stage = zero.value("stage", nlohmann::json(0));
  if (!stage.is_number_integer()) fail("{}: zero_optimization.stage must be 0, 1 or 2, got {}", what, stage.dump());
  for (const char* offload : {"offload_optimizer", "offload_param"}) {
    const nlohmann::json o = zero.value(offload, nlohmann::json::object());
    const std::string device = o.is_object() ? o.value("device", std::string("none")) : std::string("none");
    if (device != "none") {
      fail("{}: zero_optimization.{}.device = {} (offloading to the CPU or NVMe) is not supported; {}", what, offload,
           device, use);
    }
  }
  const int64_t s = stage.get<int64_t>();
  if (s == 3) fail("{}: ZeRO-3 (parameters sharded over the ranks) is not supported; {}", what, use);
  if (s < 0 || s > 3) fail("{}: zero_optimization.stage {} is not a ZeRO stage (0-3)", what, s);
  return static_cast<int>(s);
}

// The activation memory policy of --gradient_checkpointing, --recompute_num_layers, --recompute_modules and
// --cpu_offloading_num_layers, set on `trainable`; returns a one-line summary for the log. --recompute_num_layers N
// counts whole blocks under --gradient_checkpointing (Megatron's block method) and otherwise the layers whose MLP
// --recompute_modules mlp recomputes.
std::string set_activation_policy(model::TrainableModel& trainable, const TrainingArguments& tr, int64_t layers,
                                  bool on_cpu) {
  model::TrainableModel::RecomputeModules recompute;
  std::vector<std::string> modules;
  for (const std::string& module : tr.recompute_modules) {
    if (module == "mlp") {
      recompute.mlp = true;
    } else if (module == "act") {
      recompute.act = true;
    } else if (module == "layernorm") {
      recompute.layernorm = true;
    } else if (module != "core_attn") {  // flash attention never stores its scores: nothing to recompute
      fail("--recompute_modules {}: unknown module; swift.cpp recomputes layernorm, act and mlp (core_attn is "
           "accepted and needs nothing: attention keeps no scores)", module);
    }
  }
  int64_t whole = tr.gradient_checkpointing ? layers : 0;
  if (tr.recompute_num_layers) {
    SWIFT_CHECK(*tr.recompute_num_layers >= 0, "--recompute_num_layers {}: must be >= 0 (layers to recompute)",
                *tr.recompute_num_layers);
    if (tr.gradient_checkpointing) {
      trainable.set_recompute_layers(*tr.recompute_num_layers);
      whole = std::min(layers, *tr.recompute_num_layers);
    } else if (recompute.mlp) {
      recompute.mlp_layers = *tr.recompute_num_layers;
    } else {
      fail("--recompute_num_layers {}: counts the layers that --gradient_checkpointing true recomputes whole, or "
           "without checkpointing those whose MLP --recompute_modules mlp recomputes; neither is on",
           *tr.recompute_num_layers);
    }
  }
  trainable.set_recompute_modules(recompute);
  SWIFT_CHECK(tr.cpu_offloading_num_layers >= 0, "--cpu_offloading_num_layers {}: must be >= 0 (layers to offload)",
              tr.cpu_offloading_num_layers);
  trainable.set_offload_layers(tr.cpu_offloading_num_layers);
  trainable.set_offload_frozen_layers(tr.offload_frozen_layers);
  const int64_t kept = layers - whole;
  const int64_t mlp_n = !recompute.mlp ? 0 : recompute.mlp_layers < 0 ? kept : std::min(kept, recompute.mlp_layers);
  std::string out = fmt::format("{} of {} layers recomputed whole", whole, layers);
  if (kept > 0) {
    if (recompute.layernorm) modules.push_back("the norms' outputs");
    if (recompute.act) modules.push_back("silu(gate) * up");
    if (mlp_n > 0) modules.push_back(fmt::format("the MLP of {}", mlp_n));
    if (!modules.empty()) out += fmt::format("; in the {} kept: {} recomputed", kept, fmt::join(modules, ", "));
    // Offloading takes kept layers whose MLP stays, never the last two (TrainableModel::set_offload_layers).
    const int64_t offloaded = std::min(tr.cpu_offloading_num_layers, std::max<int64_t>(0, layers - 2 - whole - mlp_n));
    if (offloaded > 0) {
      out += fmt::format("; the MLP intermediates of {} offloaded to host memory{}", offloaded,
                         on_cpu ? " (on the CPU: copies within host memory, no saving)" : "");
    }
  }
  if (tr.offload_frozen_layers > 0) {
    const int64_t n = tr.offload_frozen_layers;
    out += fmt::format("; the frozen matrices of {} wait in host memory between forward and backward ({:.1f} GiB{})",
                       n == 1 ? std::string("layer 0") : fmt::format("layers 0-{}", n - 1),
                       static_cast<double>(trainable.frozen_host_bytes()) / (1 << 30),
                       on_cpu ? "; on the CPU: copies within host memory, no saving" : ", page-locked");
  }
  if (tr.cpu_offloading_num_layers > 0 && whole + mlp_n + 2 >= layers) {
    out += fmt::format(" (--cpu_offloading_num_layers {}: no layer to offload, the last two and the recomputed stay)",
                       tr.cpu_offloading_num_layers);
  }
  return out;
}

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
  if (tr.full_determinism) ops::enable_full_determinism();  // before the model's first product
  // --streaming: the length of the data is unknown before it is read, so the run needs --max_steps (ms-swift too).
  SWIFT_CHECK(!d.streaming || tr.max_steps > 0,
              "--streaming true needs --max_steps: a streamed dataset is read while training and its number of "
              "batches is unknown in advance (pass e.g. --max_steps 1000)");

  const dist::LaunchEnv env = dist::detect_launch_env();
  // --deepspeed: zero1 shards the AdamW state over the ranks, zero2 the reduced gradients too (train/zero.h); zero0
  // is plain data parallel; zero3 and the offload presets are refused naming what to use. One process: nothing to
  // shard, ignored as before.
  const int zero_stage = env.distributed() && args.has("deepspeed") && !args.is_none("deepspeed")
                             ? zero_stage_from_deepspeed(args.get_json("deepspeed"))
                             : 0;
  // --sequence_parallel_size (Ulysses): the ranks are DP replicas x SP ranks (train/parallel.h); the SP ranks of a
  // replica read the same batches and split their tokens.
  // --tensor_model_parallel_size (Megatron): the ranks of a replica also split the linears' weights.
  const train::ParallelLayout layout =
      train::ParallelLayout::of(env.rank, env.world_size, static_cast<int>(d.sequence_parallel_size),
                                static_cast<int>(args.get_int("tensor_model_parallel_size")));

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
  if (args.has("cache_dir") && !args.is_none("cache_dir")) po.cache_dir = args.get_string("cache_dir");
  data::PreparedData prepared;
  std::unique_ptr<data::BatchSource> stream_inner;  // data parallel + --streaming: the stream every rank reads
  std::unique_ptr<data::BatchSource> loader;  // DataLoader, or StreamingLoader with --streaming
  if (d.streaming) {
    // Training rows are read, converted and tokenized while training (data/streaming.h); only a --val_dataset is
    // prepared up front (through the cache when asked).
    data::StreamingOptions so;
    so.batch_size = tr.per_device_train_batch_size;
    so.shuffle_buffer_size = args.get_int("shuffle_buffer_size");
    if (d.packing) so.packing_length = d.packing_length.value_or(max_length);
    so.prefetch = tr.dataloader_num_workers > 0 ? 2 : 0;
    loader = std::make_unique<data::StreamingLoader>(po.dataset, po.encode, so);
    if (env.distributed()) {  // every rank reads the stream and keeps every world_size-th batch
      stream_inner = std::move(loader);
      loader = std::make_unique<data::StridedSource>(*stream_inner, layout.dp, layout.dp_rank);
    }
    std::fprintf(stderr, "streaming: %zu dataset(s), read while training (shuffle buffer %lld)\n", d.dataset.size(),
                 static_cast<long long>(d.dataset_shuffle ? so.shuffle_buffer_size : 0));
    if (!d.val_dataset.empty()) {
      data::DataPipelineOptions vo = po;
      vo.dataset.dataset.clear();
      prepared = data::prepare_data(vo);
      std::fprintf(stderr, "%s\n", prepared.summary().c_str());
    }
  } else {
    prepared = data::prepare_data(po);
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
    lo.world_size = layout.dp;  // replica r takes every DP-th unit (torch's DistributedSampler)
    lo.rank = layout.dp_rank;
    loader = std::make_unique<data::DataLoader>(prepared.train, lo, plan);
  }

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
      s.modules_to_save = t.modules_to_save;
      s.seed = static_cast<uint64_t>(tr.seed);
      lora = model::create_lora(config, s, &loaded.model->weights());
    }
  }
  // Tensor parallel: each rank keeps only its shard of every attention and MLP weight (read from the mapped files
  // where the shard lies) before the weights move to the device, so a rank holds 1/TP of them.
  if (layout.tp > 1) loaded.model->shard_for_tensor_parallel(layout.tp_rank, layout.tp);
  const Placement placement = place_model_for_training(*loaded.model, m, env.local_rank);
  if (tr.offload_embedding) {
    SWIFT_CHECK(tuner == model::TunerType::Lora, "--offload_embedding true: full fine-tuning trains the embedding "
                "table, which must stay on the device; the option is for LoRA (--tuner_type lora)");
    if (loaded.model->device().is_cpu()) {
      std::fprintf(stderr, "offload_embedding: the model is on the CPU, its embedding table is in host memory already\n");
    } else {
      loaded.model->offload_embedding();
      const Tensor& table = loaded.model->weights().embed_tokens;
      std::fprintf(stderr, "offload_embedding: the embedding table (%.1f MiB) is in page-locked host memory, read by %s\n",
                   table.nbytes() / 1048576.0, loaded.model->device().str().c_str());
    }
  }
  // Data parallel: the communicator of the launch. A model placed on CUDA (device LOCAL_RANK) reduces through
  // NCCL on that device; a CPU model through the shared-memory process group.
  std::unique_ptr<dist::Communicator> comm;
  if (env.distributed()) {
    const Device device = loaded.model->device();
    comm = dist::init_communicator(env, device.is_cuda() ? device : Device::cpu());
    std::fprintf(stderr, "data parallel: %s, backend %s\n", env.str().c_str(), comm->backend().c_str());
  }
  std::unique_ptr<train::ParallelWorld> parallel;  // the sequence-parallel groups split off the world
  if (comm && layout.sp * layout.tp > 1) parallel = std::make_unique<train::ParallelWorld>(*comm, layout.sp, layout.tp);
  model::TrainableModel trainable(*loaded.model, tuner, std::move(lora));
  trainable.set_activation_dtype(placement.activations);
  const std::string activation_policy =
      set_activation_policy(trainable, tr, config.num_hidden_layers, loaded.model->device().is_cpu());
  std::fprintf(stderr, "activations: %s\n", activation_policy.c_str());
  const int64_t total = config.parameter_count();
  std::fprintf(stderr, "trainable parameters: %lld of %lld (%.4f%%)\n", static_cast<long long>(trainable.trainable_count()),
               static_cast<long long>(total), 100.0 * static_cast<double>(trainable.trainable_count()) / total);

  const bool main_rank = env.rank == 0;
  std::string run_dir;
  if (main_rank) {
    run_dir = train::create_run_dir(tr.output_dir, tr.add_version);
    args.save_json((fs::path(run_dir) / "args.json").string());
  }
  if (comm) run_dir = train::broadcast_string(*comm, run_dir, 0);  // the versioned directory rank 0 made
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
  // fp16 weights and activations need dynamic loss scaling (transformers' GradScaler path); bf16 and fp32 do not.
  tc.loss_scaling = placement.activations == DType::F16;
  tc.resume_from_checkpoint = tr.resume_from_checkpoint.value_or("");
  tc.args_json = args.to_json();
  tc.model_config_json = loaded.config_json;
  tc.extra_files = loaded.tokenizer_files;
  tc.base_model_name_or_path = *m.model;
  tc.comm = comm.get();
  tc.parallel = parallel.get();
  tc.zero_stage = zero_stage;
  if (args.has("ddp_bucket_cap_mb") && !args.is_none("ddp_bucket_cap_mb")) {
    const int64_t mb = args.get_int("ddp_bucket_cap_mb");
    SWIFT_CHECK(mb > 0 && mb <= 4096, "--ddp_bucket_cap_mb {}: give the MiB per gradient bucket, 1 to 4096 (default 25)",
                mb);
    tc.reduce_bucket_bytes = mb << 20;
  }
  train::Trainer trainer(tc, trainable, *loader, prepared.val);
  if (comm) {
    std::fprintf(stderr, "data parallel: %d ranks, global batch %lld = %lld per device x %lld accumulation x %d%s\n",
                 env.world_size,
                 static_cast<long long>(tr.per_device_train_batch_size * tc.gradient_accumulation_steps * layout.dp),
                 static_cast<long long>(tr.per_device_train_batch_size),
                 static_cast<long long>(tc.gradient_accumulation_steps), layout.dp,
                 zero_stage == 1   ? ", ZeRO-1 (AdamW state sharded)"
                 : zero_stage == 2 ? ", ZeRO-2 (gradients and AdamW state sharded)"
                                   : "");
  }
  if (layout.sp > 1) {
    std::fprintf(stderr, "sequence parallel: %d data-parallel replica(s) x %d ranks (Ulysses: each rank runs 1/%d of "
                 "the tokens, heads exchanged around attention)\n", layout.dp, layout.sp, layout.sp);
  }
  if (layout.tp > 1) {
    std::fprintf(stderr, "tensor parallel: %d ranks per replica hold 1/%d of every attention and MLP weight "
                 "and of the embedding and LM head (vocabulary-parallel; checkpoints are saved whole)\n", layout.tp,
                 layout.tp);
  }
  if (loader->steps_per_epoch() > 0) {
    std::fprintf(stderr, "training: %lld optimizer steps (%lld micro-batches per epoch, gradient accumulation %lld)\n",
                 static_cast<long long>(trainer.max_steps()), static_cast<long long>(loader->steps_per_epoch()),
                 static_cast<long long>(tc.gradient_accumulation_steps));
  } else {
    std::fprintf(stderr, "training: %lld optimizer steps (streamed, gradient accumulation %lld)\n",
                 static_cast<long long>(trainer.max_steps()), static_cast<long long>(tc.gradient_accumulation_steps));
  }
  if (tc.loss_scaling) {
    std::fprintf(stderr, "fp16: dynamic loss scaling (initial scale %g or a resumed checkpoint's, x%g after %lld clean "
                 "steps, x%g on overflow)\n",
                 static_cast<double>(tc.loss_scaler.init_scale), static_cast<double>(tc.loss_scaler.growth_factor),
                 static_cast<long long>(tc.loss_scaler.growth_interval),
                 static_cast<double>(tc.loss_scaler.backoff_factor));
  }
  const train::TrainResult r = trainer.train();
  std::fprintf(stderr, "train: %lld steps in %.1f s, %.0f tokens/s, peak memory %.2f GiB\n",
               static_cast<long long>(r.global_step), r.train_seconds, r.tokens_per_second,
               peak_rss_gib());
  if (tc.loss_scaling) {
    std::fprintf(stderr, "fp16: loss scale %g at the end, %lld optimizer step(s) skipped for overflow\n",
                 static_cast<double>(r.loss_scale), static_cast<long long>(r.skipped_steps));
  }
  std::printf("last_model_checkpoint: %s\n", r.last_checkpoint.c_str());
  std::printf("best_model_checkpoint: %s\n", r.best_checkpoint.empty() ? "None" : r.best_checkpoint.c_str());
  return r.interrupted ? 130 : 0;
}

}  // namespace

int cmd_sft(const Args& args) { return run_training(Command::sft, args); }
int cmd_pt(const Args& args) { return run_training(Command::pt, args); }

}  // namespace swift::apps
