// tests/train/test_tensor_parallel.cpp — Megatron tensor parallelism on the CPU (issue 6): N thread-ranks over the
// in-process communicator, each with its own copy of a tiny model sharded by TrainableModel::set_parallel (or at load,
// CausalLM::shard_for_tensor_parallel, as the trainer runs and the CLI do), against one process.
//
// What must hold: sharding then gathering gives every tensor back (rows and columns, odd sizes); one forward +
// backward gives the one-process loss on every rank and, after the group's sum of the partial gradients and the
// gather of the sharded ones, the one-process gradients, for LoRA and full fine-tuning, GQA, q/k norms (qwen3),
// q/k/v biases (qwen2), o_proj / down_proj biases (llama attention_bias + mlp_bias: added once), TP 2 and 4, TP
// combined with SP, and LoRA dropout (o_proj / down_proj ranks draw the one-process masks of their input columns);
// trainer runs of DP x TP and SP x TP ranks follow the one-process run step by step (with dropout when the ranks are
// one replica: several replicas draw per-replica seeds, unlike one process's joint batch); their
// checkpoints hold whole tensors (equal to one process's), a one-process run resumes from a TP checkpoint and a TP run
// from a one-process one (ZeRO-1 over the replicas of each TP rank too); the embedding and the LM head are split by
// vocabulary rows (V = 97: uneven shards; V = 96; tied: one shard; LoRA modules_to_save copies: trained shards) in
// single steps and trainer runs; a rank sharded at load holds the replicated tensors plus 1/N of the linears and its
// vocabulary rows of the embedding and head; heads / intermediate sizes that do not divide are refused with messages
// naming them (ZeRO-2 and DoRA with TP: test_tensor_parallel_zero2.cpp, test_tensor_parallel_dora.cpp); the CLI
// (`NPROC_PER_NODE=2 swift sft --tensor_model_parallel_size 2`) logs the one-process losses and saves the adapter with
// its whole shapes.
//
// Tolerances (F32, CPU), with the reasons of test_sequence_parallel.cpp: the row-parallel outputs are sums of N
// partial products (o_proj, down_proj) and the partial gradients are summed afterwards, so rounding differs from one
// process. Loss within 1e-6 relative; gradients within 3e-5 of each tensor's largest element (the same measured
// noise floor as sequence parallelism: splitting the same tokens' sums moves LoRA gradients by up to ~1e-5); trainer
// losses within 1e-6 relative and whole parameters after 4 steps within 5e-5 relative in L2 per tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "dist/communicator.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/parallel.h"
#include "train/data_parallel.h"
#include "train/parallel.h"
#include "train/parallel_test_util.h"

namespace swift {
namespace {

namespace fs = std::filesystem;
using test::Gradients;
using test::TinyModelSpec;

TinyModelSpec spec_of(const std::string& type, int64_t heads, int64_t kv, int64_t intermediate = 40) {
  TinyModelSpec s;
  s.model_type = type;
  s.heads = heads;
  s.kv_heads = kv;
  s.intermediate = intermediate;
  return s;
}

struct Case {
  std::string name;
  TinyModelSpec spec;
  nlohmann::json overrides;  // config.json fields on top of the spec's (biases)
  int tp, sp;
  model::TunerType tuner;
  float dropout = 0.0f;      // LoRA dropout
  bool load_shards = false;  // the model keeps only its shards from load on (CausalLM::shard_for_tensor_parallel)
  bool save_modules = false;  // LoRA: modules_to_save embed_tokens and lm_head (trained vocabulary shards)
  bool recompute_mlp = false;  // the parallel ranks: block 0 recomputed whole, the others layernorm, act and mlp
};

TinyModelSpec with_vocab(TinyModelSpec s, int64_t vocab, bool tied) {
  s.vocab = vocab;
  s.tied = tied;
  return s;
}

io::ModelConfig case_config(const Case& k) {
  nlohmann::json j = test::tiny_config_json(k.spec);
  for (const auto& [key, value] : k.overrides.items()) j[key] = value;
  return io::parse_model_config(j, k.name);
}

// One forward + backward on one process, or on a rank of a world of SP x TP ranks: then the group sums (partial
// gradients over TP, every gradient over SP, the statistics over SP) and the whole gradients (gathered over TP).
Gradients forward_backward(const Case& k, const model::MicroBatch& batch, dist::Communicator* world) {
  const io::ModelConfig c = case_config(k);
  auto lm = model::CausalLM::from_weights(c, test::tiny_weights(c, 11));
  std::unique_ptr<train::ParallelWorld> parallel;
  if (world != nullptr) parallel = std::make_unique<train::ParallelWorld>(*world, k.sp, k.tp);
  if (parallel && k.load_shards) lm->shard_for_tensor_parallel(parallel->layout().tp_rank, k.tp);
  model::LoraAdapters lora;
  if (k.tuner == model::TunerType::Lora && k.save_modules) {
    model::LoraSettings s;
    s.rank = 4;
    s.init_weights = "false";
    s.seed = 3;
    s.modules_to_save = {"embed_tokens", "lm_head"};
    lora = model::create_lora(c, s, &lm->weights());
  } else if (k.tuner == model::TunerType::Lora) {
    lora = test::random_lora(c);
  }
  lora.dropout = k.dropout;
  model::TrainableModel tm(*lm, k.tuner, std::move(lora));
  if (parallel) tm.set_parallel(parallel->groups());
  if (parallel && k.recompute_mlp) {  // the one process recomputes every block whole: the same gradients
    tm.set_recompute_layers(1);
    tm.set_recompute_modules({.layernorm = true, .act = true, .mlp = true});
  }
  const model::StepStats s =
      tm.forward_backward(batch, 1.0f / static_cast<float>(test::target_tokens(batch)), 5, true);
  if (world == nullptr) return test::collect_gradients(tm, s);
  return test::group_sum_and_gather(tm, parallel->groups(), s);
}

class TensorParallelStep : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelStep, EqualsOneProcessAfterTheGroupSumAndGather) {
  const Case k = GetParam();
  const model::MicroBatch batch = test::random_micro_batch({9, 23, 3, 5, 1}, k.spec.vocab, 17);
  const Gradients one = forward_backward(k, batch, nullptr);
  const int world = k.tp * k.sp;
  std::vector<Gradients> ranks(static_cast<size_t>(world));
  dist::run_ranks(world, [&](dist::Communicator& comm) {
    ranks[static_cast<size_t>(comm.rank())] = forward_backward(k, batch, &comm);
  });
  test::expect_ranks_equal_one(k.name, ranks, one);
}

const nlohmann::json kAllBiases = {{"attention_bias", true}, {"mlp_bias", true}};

INSTANTIATE_TEST_SUITE_P(
    Cpu, TensorParallelStep,
    ::testing::Values(Case{"qwen3_tp2_lora", spec_of("qwen3", 8, 4), {}, 2, 1, model::TunerType::Lora},
                      Case{"qwen3_tp2_full", spec_of("qwen3", 8, 4), {}, 2, 1, model::TunerType::Full},
                      Case{"qwen3_tp4_lora", spec_of("qwen3", 8, 4), {}, 4, 1, model::TunerType::Lora},
                      Case{"qwen2_gqa_tp2_full", spec_of("qwen2", 4, 2, 36), {}, 2, 1, model::TunerType::Full},
                      Case{"llama_biases_tp2_full", spec_of("llama", 4, 4, 36), kAllBiases, 2, 1,
                           model::TunerType::Full},
                      Case{"llama_biases_tp4_lora", spec_of("llama", 4, 4, 36), kAllBiases, 4, 1,
                           model::TunerType::Lora},
                      Case{"qwen3_tp2_sp2_lora", spec_of("qwen3", 8, 4), {}, 2, 2, model::TunerType::Lora},
                      Case{"qwen3_tp2_sp2_full", spec_of("qwen3", 8, 4), {}, 2, 2, model::TunerType::Full},
                      Case{"qwen3_tp2_lora_dropout", spec_of("qwen3", 8, 4), {}, 2, 1, model::TunerType::Lora, 0.1f},
                      Case{"llama_biases_tp4_lora_dropout", spec_of("llama", 4, 4, 36), kAllBiases, 4, 1,
                           model::TunerType::Lora, 0.3f},
                      Case{"qwen3_tp2_sp2_lora_dropout", spec_of("qwen3", 8, 4), {}, 2, 2, model::TunerType::Lora,
                           0.1f},
                      // Sharded at load: the frozen (LoRA) or master (full) weights are this rank's shards already.
                      Case{"llama_biases_tp2_full_load_shards", spec_of("llama", 4, 4, 36), kAllBiases, 2, 1,
                           model::TunerType::Full, 0.0f, true},
                      Case{"llama_biases_tp4_lora_load_shards", spec_of("llama", 4, 4, 36), kAllBiases, 4, 1,
                           model::TunerType::Lora, 0.1f, true},
                      Case{"qwen3_tp2_sp2_lora_load_shards", spec_of("qwen3", 8, 4), {}, 2, 2, model::TunerType::Lora,
                           0.1f, true},
                      // Vocabulary parallelism (the embedding and head split by rows, always under TP): the cases above
                      // have V = 97 (uneven shards: 48 + 49, 24 x 3 + 25); these add V divisible by N, tied
                      // embeddings (one shard for the lookup and the head) and trained modules_to_save shards.
                      Case{"qwen3_v96_tp2_full", with_vocab(spec_of("qwen3", 8, 4), 96, false), {}, 2, 1,
                           model::TunerType::Full},
                      Case{"qwen3_v96_tied_tp4_full", with_vocab(spec_of("qwen3", 8, 4), 96, true), {}, 4, 1,
                           model::TunerType::Full},
                      Case{"qwen3_tied_tp2_full", with_vocab(spec_of("qwen3", 8, 4), 97, true), {}, 2, 1,
                           model::TunerType::Full},
                      Case{"qwen3_tied_tp4_full_load_shards", with_vocab(spec_of("qwen3", 8, 4), 97, true), {}, 4, 1,
                           model::TunerType::Full, 0.0f, true},
                      Case{"qwen3_tied_tp2_sp2_full", with_vocab(spec_of("qwen3", 8, 4), 97, true), {}, 2, 2,
                           model::TunerType::Full},
                      Case{"qwen3_tied_tp2_lora_dropout", with_vocab(spec_of("qwen3", 8, 4), 97, true), {}, 2, 1,
                           model::TunerType::Lora, 0.1f},
                      Case{"qwen3_tp2_lora_modules_to_save", spec_of("qwen3", 8, 4), {}, 2, 1, model::TunerType::Lora,
                           0.1f, false, true},
                      Case{"qwen3_tied_v96_tp4_lora_modules_to_save_load_shards",
                           with_vocab(spec_of("qwen3", 8, 4), 96, true), {}, 4, 1, model::TunerType::Lora, 0.1f, true,
                           true},
                      Case{"qwen3_tied_tp2_sp2_lora_modules_to_save", with_vocab(spec_of("qwen3", 8, 4), 97, true), {},
                           2, 2, model::TunerType::Lora, 0.1f, true, true},
                      // The selective MLP recompute on the ranks (column-parallel gate / up: no collective to redo).
                      Case{"qwen3_tp2_sp2_lora_dropout_recompute_mlp", spec_of("qwen3", 8, 4), {}, 2, 2,
                           model::TunerType::Lora, 0.1f, false, false, true},
                      Case{"llama_biases_tp4_full_recompute_mlp", spec_of("llama", 4, 4, 36), kAllBiases, 4, 1,
                           model::TunerType::Full, 0.0f, false, false, true}),
    [](const auto& info) { return info.param.name; });

TEST(TensorParallel, ShardThenGatherGivesTheTensorBack) {
  for (int N : {2, 3}) {
    for (model::TensorParallelLayout layout : {model::TensorParallelLayout::Rows, model::TensorParallelLayout::Columns}) {
      const int64_t M = 5 * N, K = 7 * N;
      Tensor whole = Tensor::empty({M, K}, DType::F32);
      for (int64_t i = 0; i < whole.numel(); ++i) whole.data<float>()[i] = static_cast<float>(i);
      dist::run_ranks(N, [&](dist::Communicator& comm) {
        const Tensor shard = model::tensor_parallel_shard(whole, layout, comm.rank(), N, "w");
        const bool rows = layout == model::TensorParallelLayout::Rows;
        EXPECT_EQ(shard.size(0), rows ? M / N : M);
        EXPECT_EQ(shard.size(1), rows ? K : K / N);
        // Element (m, k) of the shard is element (m, k + r*K/N) (columns) or (m + r*M/N, k) (rows) of the whole.
        const int r = comm.rank();
        EXPECT_EQ(shard.data<float>()[shard.size(1) + 1],
                  rows ? whole.data<float>()[(r * M / N + 1) * K + 1] : whole.data<float>()[K + r * K / N + 1]);
        const Tensor back = model::tensor_parallel_gather(comm, shard, layout);
        ASSERT_EQ(back.shape(), whole.shape());
        EXPECT_EQ(std::memcmp(back.raw(), whole.raw(), whole.nbytes()), 0);
      });
    }
  }
  const Tensor odd = Tensor::zeros({5, 6}, DType::F32);
  EXPECT_THROW(model::tensor_parallel_shard(odd, model::TensorParallelLayout::Rows, 0, 2, "odd"), Error);
}

// Bytes held by a model's weights (each storage once: a tied head shares the embedding's).
int64_t weight_bytes(const model::CausalLM& lm) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  auto add = [&](const Tensor& t) {
    if (t.defined() && seen.insert(t.storage().get()).second) bytes += static_cast<int64_t>(t.storage()->bytes());
  };
  const model::ModelWeights& w = lm.weights();
  for (const Tensor* t : {&w.embed_tokens, &w.final_norm, &w.lm_head}) add(*t);
  for (const model::LayerWeights& l : w.layers) {
    for (const Tensor* t : {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.q_bias, &l.k_bias, &l.v_bias,
                            &l.o_bias, &l.q_norm, &l.k_norm, &l.post_attention_norm, &l.gate_proj, &l.up_proj,
                            &l.down_proj, &l.gate_bias, &l.up_bias, &l.down_bias}) {
      add(*t);
    }
  }
  return bytes;
}

// A rank sharded at load keeps exactly the replicated tensors (norms, o/down biases) plus 1/N of the linears (weights
// and column-parallel biases) and its vocabulary rows [t*V/N, (t+1)*V/N) of the embedding and the head (V = 97: uneven
// shards; one shared shard when tied), each shard in storage of its own size (no view of a whole tensor),
// from random weights in memory and from a safetensors directory (mapped: the shard is copied out of the mapping).
// The shards equal the slices of the whole tensors, and the sharded model refuses its own forward.
TEST(TensorParallel, ARankShardedAtLoadHoldsItsShareOfTheWeights) {
  const Case k{"llama_biases", spec_of("llama", 4, 4, 36), kAllBiases, 1, 1, model::TunerType::Lora};
  const io::ModelConfig c = case_config(k);
  const fs::path dir = test::fresh_dir("tp_load_shards");
  std::ofstream(dir / "config.json") << [&] {
    nlohmann::json j = test::tiny_config_json(k.spec);
    for (const auto& [key, value] : k.overrides.items()) j[key] = value;
    return j.dump(2);
  }();
  io::save_safetensors((dir / "model.safetensors").string(), test::tiny_weights(c, 11));
  int64_t linear_bytes = 0;  // the whole linears' weights and column-parallel biases
  {
    auto whole = model::CausalLM::from_weights(c, test::tiny_weights(c, 11));
    for (const model::LayerWeights& l : whole->weights().layers) {
      for (const Tensor* t : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
                              &l.q_bias, &l.k_bias, &l.v_bias, &l.gate_bias, &l.up_bias}) {
        linear_bytes += t->defined() ? static_cast<int64_t>(t->nbytes()) : 0;
      }
    }
  }
  auto reference = model::CausalLM::from_weights(c, test::tiny_weights(c, 11));
  const int64_t whole_bytes = weight_bytes(*reference);
  for (bool from_file : {false, true}) {
    for (int N : {2, 4}) {
      for (int t = 0; t < N; ++t) {
        SCOPED_TRACE(std::string(from_file ? "file" : "memory") + " N=" + std::to_string(N) + " t=" + std::to_string(t));
        auto lm = from_file ? model::CausalLM::load(dir.string())
                            : model::CausalLM::from_weights(c, test::tiny_weights(c, 11));
        lm->shard_for_tensor_parallel(t, N);
        EXPECT_EQ(lm->tensor_parallel_size(), N);
        const int64_t bytes = weight_bytes(*lm);
        const model::VocabRange vocab = model::vocab_shard_range(c.vocab_size, t, N);
        const int64_t table_bytes = c.vocab_size * c.hidden_size * 4, shard_bytes = vocab.count * c.hidden_size * 4;
        EXPECT_EQ(bytes, whole_bytes - linear_bytes + linear_bytes / N - 2 * table_bytes + 2 * shard_bytes);
        EXPECT_EQ(lm->weights().embed_tokens.size(0), vocab.count);
        EXPECT_EQ(lm->weights().lm_head.size(0), vocab.count);
        EXPECT_EQ(lm->weights().embed_tokens.storage()->bytes(), lm->weights().embed_tokens.nbytes());
        const Tensor e = model::tensor_parallel_shard(reference->weights().embed_tokens,
                                                      model::TensorParallelLayout::VocabRows, t, N, "embed");
        EXPECT_EQ(std::memcmp(lm->weights().embed_tokens.raw(), e.raw(), e.nbytes()), 0);
        const model::LayerWeights& l = lm->weights().layers[1];
        const model::LayerWeights& r = reference->weights().layers[1];
        for (const Tensor* s : {&l.q_proj, &l.o_proj, &l.down_proj, &l.up_bias}) {
          EXPECT_EQ(s->storage()->bytes(), s->nbytes()) << s->str() << ": a view of a larger storage";
        }
        const Tensor q = model::tensor_parallel_shard(r.q_proj, model::TensorParallelLayout::Rows, t, N, "q");
        const Tensor o = model::tensor_parallel_shard(r.o_proj, model::TensorParallelLayout::Columns, t, N, "o");
        EXPECT_EQ(std::memcmp(l.q_proj.raw(), q.raw(), q.nbytes()), 0);
        EXPECT_EQ(std::memcmp(l.o_proj.raw(), o.raw(), o.nbytes()), 0);
        EXPECT_EQ(l.o_bias.numel(), c.hidden_size);  // row-parallel bias: whole
        if (from_file && t == 0) {
          std::printf("[ tp%d ] a rank sharded at load holds %lld of %lld weight bytes (linears %lld -> %lld, "
                      "embedding + head %lld -> %lld)\n", N, static_cast<long long>(bytes),
                      static_cast<long long>(whole_bytes), static_cast<long long>(linear_bytes),
                      static_cast<long long>(linear_bytes / N), static_cast<long long>(2 * table_bytes),
                      static_cast<long long>(2 * shard_bytes));
        }
        try {
          lm->forward(std::vector<int32_t>{1, 2, 3});
          ADD_FAILURE() << "the forward of a sharded model must be refused";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("tensor-parallel shard"), std::string::npos) << e.what();
        }
        if (!from_file && N == 2 && t == 1) {  // training it without its group is refused too
          model::TrainableModel tm(*lm, model::TunerType::Lora, test::random_lora(c));
          const model::MicroBatch batch = test::random_micro_batch({5, 3}, c.vocab_size, 3);
          try {
            tm.forward_backward(batch, 0.1f, 1, false);
            ADD_FAILURE() << "training a sharded model without its group must be refused";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("set_parallel"), std::string::npos) << e.what();
          }
        }
      }
    }
  }
}

// Tied embeddings: the lookup and the head share one vocabulary shard of 1/N of the rows.
TEST(TensorParallel, ATiedRankShardedAtLoadHoldsOneVocabularyShard) {
  const TinyModelSpec spec = with_vocab(spec_of("qwen3", 8, 4), 97, true);
  auto whole = test::tiny_model(spec, 11);
  const int64_t whole_bytes = weight_bytes(*whole), C = spec.hidden;
  for (int N : {2, 4}) {
    for (int t = 0; t < N; ++t) {
      auto lm = test::tiny_model(spec, 11);
      const int64_t before = weight_bytes(*lm);
      lm->shard_for_tensor_parallel(t, N);
      const model::VocabRange vocab = model::vocab_shard_range(spec.vocab, t, N);
      EXPECT_EQ(lm->weights().lm_head.storage(), lm->weights().embed_tokens.storage());
      EXPECT_EQ(lm->weights().embed_tokens.size(0), vocab.count);
      EXPECT_EQ(vocab.count, spec.vocab / N + (t == N - 1 ? spec.vocab % N : 0));
      const int64_t linears_removed = before - weight_bytes(*lm) - (spec.vocab - vocab.count) * C * 4;
      EXPECT_GT(linears_removed, 0);
      EXPECT_EQ(before, whole_bytes);
    }
  }
}

TEST(TensorParallel, IndivisibleSizesAreRefused) {
  auto expect_refused = [](int world, const TinyModelSpec& spec, bool dora, const std::vector<std::string>& parts) {
    dist::run_ranks(world, [&](dist::Communicator& comm) {
      auto lm = test::tiny_model(spec, 1);
      model::LoraAdapters lora;
      model::LoraSettings s;
      s.use_dora = dora;
      lora = model::create_lora(lm->config(), s, &lm->weights());
      model::TrainableModel tm(*lm, model::TunerType::Lora, std::move(lora));
      train::ParallelWorld parallel(comm, 1, world);
      try {
        tm.set_parallel(parallel.groups());
        ADD_FAILURE() << "expected an error";
      } catch (const Error& e) {
        for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      }
    });
  };
  expect_refused(4, spec_of("qwen3", 8, 2), false, {"--tensor_model_parallel_size 4", "2 key/value heads"});
  expect_refused(2, spec_of("qwen3", 8, 4, 41), false, {"--tensor_model_parallel_size 2", "intermediate_size 41"});
  // DoRA and ZeRO-2 with TP work: test_tensor_parallel_dora.cpp, test_tensor_parallel_zero2.cpp.
}

// ---- trainer ---------------------------------------------------------------------------------------------------

TEST(TensorParallelTrainer, DataSequenceAndTensorRanksEqualOneProcess) {
  struct Layout {
    int world, sp, tp;
    model::TunerType tuner;
    double dropout = 0;  // LoRA dropout (one replica only: see the head comment)
    int zero = 0;        // ZeRO-1: AdamW state sharded over the DP replicas of each TP rank
  };
  for (const Layout& l : {Layout{2, 1, 2, model::TunerType::Lora}, Layout{4, 1, 2, model::TunerType::Full},
                          Layout{4, 2, 2, model::TunerType::Lora}, Layout{4, 1, 4, model::TunerType::Lora},
                          Layout{2, 1, 2, model::TunerType::Lora, 0.1}, Layout{4, 2, 2, model::TunerType::Lora, 0.1},
                          Layout{4, 1, 2, model::TunerType::Lora, 0, 1}, Layout{4, 1, 2, model::TunerType::Full, 0, 1},
                          Layout{8, 2, 2, model::TunerType::Lora, 0, 1}}) {
    const std::string name = "w" + std::to_string(l.world) + "_sp" + std::to_string(l.sp) + "_tp" +
                             std::to_string(l.tp) + (l.tuner == model::TunerType::Lora ? "_lora" : "_full") +
                             (l.dropout > 0 ? "_dropout" : "") + (l.zero ? "_zero1" : "");
    const int dp = l.world / (l.sp * l.tp);
    test::RunSpec one;
    one.tuner = l.tuner;
    one.dropout = l.dropout;
    one.batch_size = dp;
    test::expect_parallel_run_equals_one(one, l.world, l.sp, l.tp, l.zero, name, name);
  }
}

// Vocabulary parallelism in trainer runs: tied and untied embeddings, V divisible by N or not, full fine-tuning and
// LoRA with trained modules_to_save shards (with dropout), DP x TP (ZeRO-1 too) and SP x TP.
TEST(TensorParallelTrainer, VocabularyParallelRunsEqualOneProcess) {
  struct Layout {
    std::string name;
    int world, sp, tp;
    model::TunerType tuner;
    int64_t vocab;
    bool tied;
    double dropout = 0;
    bool save_modules = false;
    int zero = 0;
  };
  using model::TunerType;
  for (const Layout& l : {Layout{"tied_tp2_full", 2, 1, 2, TunerType::Full, 97, true},
                          Layout{"tied_v96_dp2_tp2_full", 4, 1, 2, TunerType::Full, 96, true},
                          Layout{"v96_tp4_full", 4, 1, 4, TunerType::Full, 96, false},
                          Layout{"tied_sp2_tp2_full", 4, 2, 2, TunerType::Full, 97, true},
                          Layout{"tied_tp2_lora_modules_dropout", 2, 1, 2, TunerType::Lora, 97, true, 0.1, true},
                          Layout{"tp4_lora_modules", 4, 1, 4, TunerType::Lora, 97, false, 0, true},
                          Layout{"sp2_tp2_lora_modules_dropout", 4, 2, 2, TunerType::Lora, 97, false, 0.1, true},
                          Layout{"tied_dp2_tp2_full_zero1", 4, 1, 2, TunerType::Full, 97, true, 0, false, 1}}) {
    const int dp = l.world / (l.sp * l.tp);
    test::RunSpec one;
    one.model.vocab = l.vocab;
    one.model.tied = l.tied;
    one.tuner = l.tuner;
    one.dropout = l.dropout;
    one.batch_size = dp;
    if (l.save_modules) one.modules_to_save = {"embed_tokens", "lm_head"};
    test::expect_parallel_run_equals_one(one, l.world, l.sp, l.tp, l.zero, "vp_" + l.name,
                                         "vocab_parallel_" + l.name);
  }
}

// Checkpoints of a TP run are in the one-process format (whole tensors, the same names and shapes): each kind of run
// resumes from the other's checkpoint-2 and continues like the run that saved it.
TEST(TensorParallelTrainer, CheckpointsAreWholeAndResumeAcrossLayouts) {
  for (model::TunerType tuner : {model::TunerType::Lora, model::TunerType::Full}) {
    const std::string name = tuner == model::TunerType::Lora ? "lora" : "full";
    test::RunSpec one;
    one.tuner = tuner;
    one.save_steps = 2;
    one.run_dir = train::create_run_dir(test::fresh_dir("ckpt_one_" + name).string());
    const test::RunOutput single = test::run_rank(one, nullptr);
    test::RunSpec par = one;
    par.tp = 2;
    par.run_dir = train::create_run_dir(test::fresh_dir("ckpt_tp_" + name).string());
    const test::RunOutput parallel = test::run_world(2, par);
    const std::string weights = tuner == model::TunerType::Lora ? "adapter_model.safetensors" : "model.safetensors";
    test::expect_checkpoints_resume_across_layouts(one, single, par, parallel, 2, weights, "ckpt_tp_" + name);
  }
}

// ZeRO-1 with TP (DP 2 x TP 2): the AdamW state of each TP rank's shards is sharded over its two replicas; the run
// follows one process, its checkpoint holds the one-process tensors (moments included), and each kind of run resumes
// from the other's checkpoint-2.
TEST(TensorParallelTrainer, ZeroOneCheckpointsAreWholeAndResumeAcrossLayouts) {
  test::RunSpec one;
  one.batch_size = 2;
  one.save_steps = 2;
  one.run_dir = train::create_run_dir(test::fresh_dir("zero1_one").string());
  const test::RunOutput single = test::run_rank(one, nullptr);
  test::RunSpec par = one;
  par.tp = 2;
  par.batch_size = 1;
  par.zero_stage = 1;
  par.run_dir = train::create_run_dir(test::fresh_dir("zero1_tp").string());
  const test::RunOutput parallel = test::run_world(4, par);
  test::expect_same_run(parallel, single, "zero1_tp2_dp2");
  // The AdamW moments gathered from both sharding axes; each layout resumes from the other's checkpoint.
  test::expect_checkpoints_resume_across_layouts(one, single, par, parallel, 4, "adapter_model.safetensors",
                                                 "zero1_tp");
}

#ifdef SWIFT_EXE
TEST(TensorParallelCli, TwoRanksLogTheLossesOfOneProcessAndSaveWholeAdapters) {
  const fs::path root = test::fresh_dir("tp_cli");
  const fs::path model = test::tiny_chat_with_four_heads(root / "model");
  const std::string common = std::string(SWIFT_EXE) + " sft --model " + model.string() + " --dataset " +
                             SWIFT_FIXTURES_DIR + "/tiny_chat/chat.jsonl --max_steps 3 --logging_steps 1 "
                             "--lora_dropout 0 --split_dataset_ratio 0 --learning_rate 1e-3 "
                             "--gradient_accumulation_steps 2 --per_device_train_batch_size 2";
  const std::string one = common + " --output_dir " + (root / "one").string() + " > " + (root / "one.log").string() +
                          " 2>&1";
  ASSERT_EQ(std::system(one.c_str()), 0) << test::file_text(root / "one.log");
  const std::string two = "NPROC_PER_NODE=2 SWIFT_DIST_LOG_DIR=" + (root / "ranks").string() +
                          " SWIFT_DIST_TIMEOUT=60 " + common + " --tensor_model_parallel_size 2 --output_dir " +
                          (root / "two").string() + " > " + (root / "two.log").string() + " 2>&1";
  ASSERT_EQ(std::system(two.c_str()), 0) << test::file_text(root / "two.log");
  const fs::path dir_one = test::only_run_dir(root / "one"), dir_two = test::only_run_dir(root / "two");
  const std::vector<double> a = test::logged_losses(dir_one), b = test::logged_losses(dir_two);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-6 * std::abs(a[i])) << "step " << i + 1;
  const io::PeftAdapter pa = io::load_peft_adapter((dir_one / "checkpoint-3").string());
  const io::PeftAdapter pb = io::load_peft_adapter((dir_two / "checkpoint-3").string());
  ASSERT_EQ(pa.tensors.size(), pb.tensors.size());
  for (const auto& [name, t] : pa.tensors) {
    ASSERT_TRUE(pb.tensors.count(name)) << name;
    EXPECT_EQ(pb.tensors.at(name).shape(), t.shape()) << name;
  }
  const std::string log = test::file_text(root / "two.log");
  EXPECT_NE(log.find("tensor parallel: 2 ranks per replica hold 1/2 of every attention and MLP weight"),
            std::string::npos) << log;
}
#endif

}  // namespace
}  // namespace swift
