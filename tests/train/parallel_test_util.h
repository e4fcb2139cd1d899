// tests/train/parallel_test_util.h — helpers of the sequence- and tensor-parallel tests: tiny random models of a
// chosen head layout (written as Hugging Face directories when a test needs one on disk), random packed
// micro-batches of odd lengths, gradient comparisons, and a trainer run on DP x SP x TP thread-ranks whose whole
// (gathered) parameters are compared with a one-process run.
//
// Invariants: everything is a pure function of its seed (std::mt19937 + core/seed.h-free mappings), so failures
// reproduce; weights are uniform in [-0.2, 0.2) (norm weights around 1), large enough that every gradient is
// non-trivial and small enough that nothing saturates.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/loader.h"
#include "dist/communicator.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/lora.h"
#include "model/parallel.h"
#include "model/training.h"
#include "train/data_parallel.h"
#include "train/parallel.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace swift::test {

struct TinyModelSpec {
  std::string model_type = "qwen3";  // qwen3: q/k norms; qwen2: q/k/v biases; llama; mistral (sliding window)
  int64_t heads = 8, kv_heads = 4, head_dim = 8, hidden = 32, intermediate = 40, layers = 2, vocab = 97;
  int64_t sliding_window = 0;
  bool tied = false;
  bool biases = false;  // attention_bias and mlp_bias: q/k/v/o and gate/up/down biases (o/down: Partial under TP)
};

inline nlohmann::json tiny_config_json(const TinyModelSpec& s) {
  nlohmann::json j = {{"model_type", s.model_type},
                      {"architectures", {s.model_type == "qwen3" ? "Qwen3ForCausalLM"
                                         : s.model_type == "qwen2" ? "Qwen2ForCausalLM"
                                         : s.model_type == "mistral" ? "MistralForCausalLM"
                                                                       : "LlamaForCausalLM"}},
                      {"vocab_size", s.vocab},
                      {"hidden_size", s.hidden},
                      {"intermediate_size", s.intermediate},
                      {"num_hidden_layers", s.layers},
                      {"num_attention_heads", s.heads},
                      {"num_key_value_heads", s.kv_heads},
                      {"head_dim", s.head_dim},
                      {"hidden_act", "silu"},
                      {"max_position_embeddings", 512},
                      {"rms_norm_eps", 1e-6},
                      {"rope_theta", 10000.0},
                      {"tie_word_embeddings", s.tied},
                      {"torch_dtype", "float32"}};
  if (s.sliding_window > 0) j["sliding_window"] = s.sliding_window;
  if (s.biases) {
    j["attention_bias"] = true;
    j["mlp_bias"] = true;
  }
  return j;
}

// Hugging Face weights of `config`, uniform random (norm weights 1 + small noise).
inline std::map<std::string, Tensor> tiny_weights(const io::ModelConfig& c, uint32_t seed) {
  std::mt19937 rng(seed);
  auto fill = [&](const Shape& shape, float center, float radius) {
    Tensor t = Tensor::empty(shape, DType::F32);
    for (int64_t i = 0; i < t.numel(); ++i) {
      t.data<float>()[i] = center + radius * (static_cast<float>(rng() >> 8) * (2.0f / 16777216.0f) - 1.0f);
    }
    return t;
  };
  std::map<std::string, Tensor> w;
  w["model.embed_tokens.weight"] = fill({c.vocab_size, c.hidden_size}, 0.0f, 0.5f);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    w[p + "input_layernorm.weight"] = fill({c.hidden_size}, 1.0f, 0.1f);
    w[p + "post_attention_layernorm.weight"] = fill({c.hidden_size}, 1.0f, 0.1f);
    for (int k = 0; k < model::kLinearKinds; ++k) {
      const auto kind = static_cast<model::LinearKind>(k);
      const auto shape = model::linear_shape(c, kind);
      const std::string module = model::linear_module_path(i, kind);
      w[module + ".weight"] = fill({shape[0], shape[1]}, 0.0f, 0.2f);
      const bool qkv = kind == model::LinearKind::Q || kind == model::LinearKind::K || kind == model::LinearKind::V;
      const bool mlp = kind == model::LinearKind::Gate || kind == model::LinearKind::Up || kind == model::LinearKind::Down;
      if ((qkv && c.attention_bias) || (kind == model::LinearKind::O && c.attention_output_bias) || (mlp && c.mlp_bias)) {
        w[module + ".bias"] = fill({shape[0]}, 0.0f, 0.2f);
      }
    }
    if (c.qk_norm) {
      w[p + "self_attn.q_norm.weight"] = fill({c.head_dim}, 1.0f, 0.1f);
      w[p + "self_attn.k_norm.weight"] = fill({c.head_dim}, 1.0f, 0.1f);
    }
  }
  w["model.norm.weight"] = fill({c.hidden_size}, 1.0f, 0.1f);
  if (!c.tie_word_embeddings) w["lm_head.weight"] = fill({c.vocab_size, c.hidden_size}, 0.0f, 0.2f);
  return w;
}

inline std::unique_ptr<model::CausalLM> tiny_model(const TinyModelSpec& s, uint32_t seed = 1) {
  io::ModelConfig c = io::parse_model_config(tiny_config_json(s), "tiny model");
  std::map<std::string, Tensor> w = tiny_weights(c, seed);
  return model::CausalLM::from_weights(std::move(c), std::move(w));
}

// A packed micro-batch of sequences with these lengths: random ids, the first `prompt` tokens of each sequence
// without loss, labels shifted within each sequence.
inline model::MicroBatch random_micro_batch(const std::vector<int32_t>& lengths, int64_t vocab, uint32_t seed,
                                            int32_t prompt = 2) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids, positions, cu = {0};
  std::vector<uint8_t> mask;
  for (int32_t len : lengths) {
    for (int32_t t = 0; t < len; ++t) {
      ids.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
      positions.push_back(t);
      mask.push_back(t >= prompt ? 1 : 0);
    }
    cu.push_back(cu.back() + len);
  }
  const int64_t T = static_cast<int64_t>(ids.size());
  Tensor loss_mask = Tensor::empty({T}, DType::U8);
  for (int64_t t = 0; t < T; ++t) loss_mask.data<uint8_t>()[t] = mask[static_cast<size_t>(t)];
  model::MicroBatch b{Tensor::from_i32({T}, ids), Tensor::from_i32({T}, positions),
                      Tensor::from_i32({static_cast<int64_t>(cu.size())}, cu), Tensor()};
  b.labels = model::shift_labels(b.ids, loss_mask, b.cu_seqlens);
  return b;
}

// The micro-batch's target tokens (labels != -100): the loss normaliser of a one-process run.
inline int64_t target_tokens(const model::MicroBatch& b) {
  int64_t n = 0;
  for (int64_t t = 0; t < b.labels.numel(); ++t) n += b.labels.data<int32_t>()[t] != -100 ? 1 : 0;
  return n;
}

// LoRA adapters with random A and B (init_weights false), so every LoRA gradient is non-zero from the first step.
inline model::LoraAdapters random_lora(const io::ModelConfig& c, uint64_t seed = 3) {
  model::LoraSettings s;
  s.rank = 4;
  s.dropout = 0;
  s.init_weights = "false";
  s.seed = seed;
  return model::create_lora(c, s);
}

struct Gradients {
  std::vector<std::string> names;
  std::vector<std::vector<float>> values;
  model::StepStats stats;
};

inline Gradients collect_gradients(model::TrainableModel& tm, const model::StepStats& stats) {
  Gradients g;
  g.stats = stats;
  for (const model::Parameter& p : tm.parameters()) {
    g.names.push_back(p.name);
    const float* v = p.grad.data<float>();
    g.values.emplace_back(v, v + p.grad.numel());
  }
  return g;
}

// A rank's side of one step under sequence / tensor parallelism: the Partial gradients summed over the TP group, every
// gradient and the statistics summed over the SP group, then each gradient gathered whole over the TP group: what one
// process computes for the same micro-batch.
inline Gradients group_sum_and_gather(model::TrainableModel& tm, const model::ParallelGroups& g,
                                      const model::StepStats& s) {
  tm.reduce_tensor_parallel_gradients();
  Gradients out;
  out.stats = s;
  if (g.sequence != nullptr) {
    const auto sums = train::sum_across_ranks(*g.sequence, {s.loss_sum, static_cast<double>(s.tokens),
                                                            static_cast<double>(s.correct)});
    out.stats = {sums[0], static_cast<int64_t>(sums[1]), static_cast<int64_t>(sums[2])};
  }
  for (model::Parameter& p : tm.parameters()) {
    if (g.sequence != nullptr) {
      Tensor flat = p.grad.view({p.grad.numel()});
      g.sequence->all_reduce(flat);
    }
    const Tensor whole = model::tensor_parallel_gather(*g.tensor, p.grad, p.tp);
    out.names.push_back(p.name);
    out.values.emplace_back(whole.data<float>(), whole.data<float>() + whole.numel());
  }
  return out;
}

// The largest |a - b| of each gradient tensor relative to that tensor's largest |b|, maximised over tensors.
inline double worst_gradient_error(const Gradients& a, const Gradients& b, std::string* where = nullptr) {
  EXPECT_EQ(a.names, b.names);
  double worst = 0;
  for (size_t p = 0; p < a.values.size() && p < b.values.size(); ++p) {
    EXPECT_EQ(a.values[p].size(), b.values[p].size()) << a.names[p];
    double diff = 0, scale = 0;
    for (size_t i = 0; i < a.values[p].size() && i < b.values[p].size(); ++i) {
      diff = std::max(diff, std::abs(static_cast<double>(a.values[p][i]) - b.values[p][i]));
      scale = std::max(scale, std::abs(static_cast<double>(b.values[p][i])));
    }
    EXPECT_GT(scale, 0.0) << b.names[p] << ": an all-zero reference gradient makes the comparison meaningless";
    const double rel = diff / std::max(scale, 1e-30);
    if (rel > worst) {
      worst = rel;
      if (where != nullptr) *where = a.names[p];
    }
  }
  return worst;
}

// ---- trainer runs: DP x SP x TP thread-ranks against one process with the same global batch -------------------

inline std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path d =
      std::filesystem::path(testing::TempDir()) / ("swift_par_" + std::to_string(getpid()) + "_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// Uniformly random tokens (no learnable pattern): the parallel runs compare numbers, not learning.
inline std::shared_ptr<const data::TokenizedDataset> uniform_random_dataset(int64_t vocab, int n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  data::TokenizedDataset::Parts parts;
  for (int i = 0; i < n; ++i) {
    const int len = 5 + static_cast<int>(rng() % 14), prompt = 1 + static_cast<int>(rng() % 3);
    for (int t = 0; t < len; ++t) {
      parts.ids.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
      parts.loss_mask.push_back(t >= prompt ? 1 : 0);
    }
    parts.offsets.push_back(static_cast<int64_t>(parts.ids.size()));
    parts.sample_index.push_back(i);
    parts.label.push_back(-1);
  }
  return std::make_shared<const data::TokenizedDataset>(data::TokenizedDataset::from_parts(std::move(parts)));
}

struct RunSpec {
  TinyModelSpec model;
  model::TunerType tuner = model::TunerType::Lora;
  int sp = 1, tp = 1;
  int64_t batch_size = 1;  // per replica
  int64_t accumulation = 2;
  int64_t max_steps = 4;
  int64_t save_steps = 0;
  int zero_stage = 0;
  double dropout = 0;
  bool dora = false;          // LoRA: --use_dora
  bool shard_at_load = true;  // TP: the model keeps only its shards from load on (CausalLM::shard_for_tensor_parallel)
  std::vector<std::string> modules_to_save;  // LoRA: trained copies of embed_tokens / lm_head (vocabulary shards)
  std::string run_dir, resume;
};

struct RunOutput {
  std::vector<double> losses;
  std::vector<std::string> names;
  std::vector<std::vector<float>> params;  // whole (gathered over the TP group)
  nlohmann::json eval;
};

inline RunOutput run_rank(const RunSpec& spec, dist::Communicator* comm) {
  std::unique_ptr<train::ParallelWorld> parallel;
  if (comm != nullptr) parallel = std::make_unique<train::ParallelWorld>(*comm, spec.sp, spec.tp);
  auto lm = tiny_model(spec.model, 21);
  auto train_set = uniform_random_dataset(spec.model.vocab, 16, 5);
  auto val_set = uniform_random_dataset(spec.model.vocab, 5, 9);
  // As swift sft: the adapters first (DoRA's magnitudes and modules_to_save copies from the whole weights), then the
  // load's tensor-parallel sharding.
  model::LoraAdapters lora;
  if (spec.tuner == model::TunerType::Lora) {
    model::LoraSettings s;
    s.rank = 4;
    s.dropout = spec.dropout;
    s.seed = 3;
    s.use_dora = spec.dora;
    s.modules_to_save = spec.modules_to_save;
    lora = model::create_lora(lm->config(), s, &lm->weights());
  }
  if (parallel && spec.tp > 1 && spec.shard_at_load) lm->shard_for_tensor_parallel(parallel->layout().tp_rank, spec.tp);
  model::TrainableModel tm(*lm, spec.tuner, std::move(lora));
  data::LoaderOptions lo;
  lo.batch_size = spec.batch_size;
  lo.seed = 11;
  lo.world_size = parallel ? parallel->layout().dp : 1;
  lo.rank = parallel ? parallel->layout().dp_rank : 0;
  data::DataLoader loader(train_set, lo);
  train::TrainerConfig c;
  c.run_dir = spec.run_dir;
  c.max_steps = spec.max_steps;
  c.save_steps = spec.save_steps;
  c.resume_from_checkpoint = spec.resume;
  c.gradient_accumulation_steps = spec.accumulation;
  c.learning_rate = spec.tuner == model::TunerType::Lora ? 5e-3 : 1e-3;
  c.adam.weight_decay = 0.1;
  c.logging_steps = 1;
  c.seed = 7;
  c.comm = comm;
  c.parallel = parallel.get();
  c.zero_stage = spec.zero_stage;
  c.args_json = {{"note", "test"}};
  c.model_config_json = tiny_config_json(spec.model);
  c.base_model_name_or_path = "tiny";
  RunOutput out;
  c.on_step = [&](int64_t, const std::vector<data::Batch>&, int64_t, double loss) { out.losses.push_back(loss); };
  train::Trainer trainer(c, tm, loader, val_set);
  trainer.train();
  out.eval = trainer.evaluate();
  dist::Communicator* tp = parallel ? parallel->groups().tensor : nullptr;
  for (const model::Parameter& p : tm.parameters()) {
    const Tensor whole = tp != nullptr ? model::tensor_parallel_gather(*tp, p.value, p.tp) : p.value;
    const float* v = whole.data<float>();
    out.names.push_back(p.name);
    out.params.emplace_back(v, v + whole.numel());
  }
  return out;
}

// `world` thread-ranks; rank 0's output, after checking every rank ended with the same losses and whole parameters.
inline RunOutput run_world(int world, const RunSpec& spec) {
  std::vector<RunOutput> outs(static_cast<size_t>(world));
  dist::run_ranks(world, [&](dist::Communicator& comm) { outs[static_cast<size_t>(comm.rank())] = run_rank(spec, &comm); });
  for (int r = 1; r < world; ++r) {
    EXPECT_EQ(outs[static_cast<size_t>(r)].losses, outs[0].losses) << "rank " << r;
    EXPECT_TRUE(outs[static_cast<size_t>(r)].params == outs[0].params) << "rank " << r << ": parameters differ";
  }
  return outs[0];
}

// Whole parameters at the end within 5e-5 relative in L2 per tensor, eval loss within 1e-6 relative.
inline void expect_same_end(const RunOutput& a, const RunOutput& b, const std::string& what) {
  ASSERT_EQ(a.names, b.names) << what;
  double worst = 0;
  for (size_t p = 0; p < a.params.size(); ++p) {
    ASSERT_EQ(a.params[p].size(), b.params[p].size()) << what << ": " << a.names[p];
    double d2 = 0, n2 = 0;
    for (size_t i = 0; i < a.params[p].size(); ++i) {
      const double x = a.params[p][i], y = b.params[p][i];
      d2 += (x - y) * (x - y);
      n2 += y * y;
    }
    worst = std::max(worst, std::sqrt(d2 / std::max(n2, 1e-30)));
  }
  EXPECT_LE(worst, 5e-5) << what << ": parameters after the run differ beyond 5e-5 relative (L2 per tensor)";
  EXPECT_NEAR(a.eval["eval_loss"].get<double>(), b.eval["eval_loss"].get<double>(),
              1e-6 * b.eval["eval_loss"].get<double>()) << what;
  std::printf("[ %s ] parameters after the run: worst relative L2 difference %.3g\n", what.c_str(), worst);
}

// Every step's loss within 1e-6 relative, and expect_same_end.
inline void expect_same_run(const RunOutput& a, const RunOutput& b, const std::string& what) {
  ASSERT_EQ(a.losses.size(), b.losses.size()) << what;
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_NEAR(a.losses[i], b.losses[i], 1e-6 * std::abs(b.losses[i])) << what << " step " << i + 1;
  }
  expect_same_end(a, b, what);
}

// `one` (a one-process run of batch_size = the data-parallel width's worth of sequences) against the same run on
// `world` thread-ranks of sp x tp (x the data-parallel rest) with one sequence per rank and ZeRO stage `zero`:
// expect_same_run. Run directories `<tag>_one` / `<tag>_par`.
inline void expect_parallel_run_equals_one(RunSpec one, int world, int sp, int tp, int zero, const std::string& tag,
                                           const std::string& what) {
  one.run_dir = train::create_run_dir(fresh_dir(tag + "_one").string());
  const RunOutput single = run_rank(one, nullptr);
  RunSpec par = one;
  par.sp = sp;
  par.tp = tp;
  par.batch_size = 1;
  par.zero_stage = zero;
  par.run_dir = train::create_run_dir(fresh_dir(tag + "_par").string());
  expect_same_run(run_world(world, par), single, what);
}

// The largest relative L2 difference (||a - b|| / ||a||) between the same-named tensors of two safetensors files,
// whose names and shapes must match.
inline double worst_relative_l2(const std::filesystem::path& a_file, const std::filesystem::path& b_file) {
  const io::SafetensorsFile a = io::SafetensorsFile::open(a_file.string());
  const io::SafetensorsFile b = io::SafetensorsFile::open(b_file.string());
  EXPECT_EQ(a.names(), b.names()) << a_file << " vs " << b_file;
  double worst = 0;
  for (const std::string& n : a.names()) {
    const Tensor x = a.tensor(n), y = b.tensor(n);
    EXPECT_EQ(x.shape(), y.shape()) << a_file.filename() << " " << n;
    if (x.shape() != y.shape()) continue;
    double d2 = 0, n2 = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double u = x.item(i), v = y.item(i);
      d2 += (u - v) * (u - v);
      n2 += u * u;
    }
    worst = std::max(worst, std::sqrt(d2 / std::max(n2, 1e-30)));
  }
  return worst;
}

// A one-process run and a parallel run (of `world` ranks) that both saved checkpoint-2 of 4 steps: the checkpoints hold
// the same tensors (optimizer.safetensors and `weights_file`, relative L2 <= 5e-5), and each kind of run resumes from
// the other's checkpoint-2 and continues like the run it resumes into (losses of steps 3 and 4 to 1e-6 relative; the
// parallel run resumed from one process ends like one process).
inline void expect_checkpoints_resume_across_layouts(const RunSpec& one, const RunOutput& single, const RunSpec& par,
                                                     const RunOutput& parallel, int world,
                                                     const std::string& weights_file, const std::string& tag) {
  double worst = 0;
  for (const std::string& file : {std::string("optimizer.safetensors"), weights_file}) {
    worst = std::max(worst, worst_relative_l2(std::filesystem::path(one.run_dir) / "checkpoint-2" / file,
                                              std::filesystem::path(par.run_dir) / "checkpoint-2" / file));
  }
  EXPECT_LE(worst, 5e-5) << tag << ": checkpoint-2 of the parallel run against one process's";
  std::printf("[ %s ] parallel checkpoint-2 (weights and moments) vs one process: worst relative L2 %.3g\n", tag.c_str(),
              worst);
  RunSpec from_par = one;
  from_par.resume = (std::filesystem::path(par.run_dir) / "checkpoint-2").string();
  from_par.run_dir = train::create_run_dir(fresh_dir(tag + "_from_par").string());
  const RunOutput a = run_rank(from_par, nullptr);
  RunSpec from_one = par;
  from_one.resume = (std::filesystem::path(one.run_dir) / "checkpoint-2").string();
  from_one.run_dir = train::create_run_dir(fresh_dir(tag + "_from_one").string());
  const RunOutput b = run_world(world, from_one);
  ASSERT_EQ(a.losses.size(), 2u);
  ASSERT_EQ(b.losses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(a.losses[i], parallel.losses[i + 2], 1e-6 * parallel.losses[i + 2]) << tag << " step " << i + 3;
    EXPECT_NEAR(b.losses[i], single.losses[i + 2], 1e-6 * single.losses[i + 2]) << tag << " step " << i + 3;
  }
  expect_same_end(b, single, tag + "_resumed");
}

// One step's gradients on every rank of a parallel group (after group_sum_and_gather) against one process's: the ranks
// agree exactly, the statistics match, and the worst gradient error (returned) is at most `tolerance`.
inline double expect_ranks_equal_one(const std::string& name, const std::vector<Gradients>& ranks, const Gradients& one,
                                   double tolerance = 3e-5) {
  for (size_t r = 1; r < ranks.size(); ++r) {
    EXPECT_EQ(ranks[r].values, ranks[0].values) << "rank " << r;
    EXPECT_EQ(ranks[r].stats.loss_sum, ranks[0].stats.loss_sum) << "rank " << r;
  }
  const Gradients& par = ranks[0];
  EXPECT_EQ(par.stats.tokens, one.stats.tokens);
  EXPECT_EQ(par.stats.correct, one.stats.correct);
  EXPECT_NEAR(par.stats.loss_sum, one.stats.loss_sum, 1e-6 * std::abs(one.stats.loss_sum));
  std::string where;
  const double err = worst_gradient_error(par, one, &where);
  EXPECT_LE(err, tolerance) << "worst gradient: " << where;
  std::printf("[ %s ] loss %.9g vs %.9g, worst gradient error %.3g (%s)\n", name.c_str(), par.stats.loss_sum,
              one.stats.loss_sum, err, where.c_str());
  return err;
}

// ---- the CLI ------------------------------------------------------------------------------------------------------

// tests/fixtures/tiny_chat with 4 query and 2 key/value heads (random weights): tiny_chat's own 2 / 1 heads cannot be
// split over 2 ranks.
inline std::filesystem::path tiny_chat_with_four_heads(const std::filesystem::path& dir) {
  const std::string tiny = std::string(SWIFT_FIXTURES_DIR) + "/tiny_chat";
  std::filesystem::create_directories(dir);
  nlohmann::json config = nlohmann::json::parse(std::ifstream(tiny + "/config.json"));
  config["num_attention_heads"] = 4;
  config["num_key_value_heads"] = 2;
  config["head_dim"] = 4;
  std::ofstream(dir / "config.json") << config.dump(2);
  std::filesystem::copy_file(tiny + "/tokenizer.json", dir / "tokenizer.json");
  const io::ModelConfig c = io::load_model_config((dir / "config.json").string());
  io::save_safetensors((dir / "model.safetensors").string(), tiny_weights(c, 5));
  return dir;
}

inline std::filesystem::path only_run_dir(const std::filesystem::path& output_dir) {
  std::vector<std::filesystem::path> dirs;
  for (const auto& e : std::filesystem::directory_iterator(output_dir)) {
    if (e.is_directory()) dirs.push_back(e.path());
  }
  EXPECT_EQ(dirs.size(), 1u) << "run directories under " << output_dir;
  return dirs.empty() ? std::filesystem::path() : dirs[0];
}

inline std::vector<double> logged_losses(const std::filesystem::path& run_dir) {
  std::vector<double> losses;
  std::ifstream in(run_dir / "logging.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

inline std::string file_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace swift::test
