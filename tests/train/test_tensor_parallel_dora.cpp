// tests/train/test_tensor_parallel_dora.cpp — DoRA (--use_dora) with Megatron tensor parallelism on the CPU: N
// thread-ranks over the in-process communicator against one process.
//
// What must hold: q/k/v/gate/up (rows of W split) keep their rows' magnitudes and compute their weight norms locally;
// o/down (columns of W split) keep the whole magnitude and all-reduce their norms' squares over the group once per
// micro-batch (ops::dora_weight_norm with squares, then dora_norm_from_squares); the row-parallel output all-reduce
// gives the one-process forward. So one forward + backward gives the one-process loss and, after the group's sum of
// the Partial gradients (LoRA A of q/k/v/gate/up, LoRA B and the magnitude of o/down) and the gather of the sharded
// ones (the magnitude of q/k/v/gate/up by rows, LoRA A of o/down by columns), the one-process gradients: TP 2 and 4,
// with and without dropout, q/k norms (qwen3) and o/down biases (llama), SP x TP, adapters created from the whole
// weights before the model is sharded at load (as swift sft does). Trainer runs (DP x TP, SP x TP, ZeRO-1 and ZeRO-2)
// follow one process step by step; a TP checkpoint holds the one-process tensors and each kind of run resumes from the
// other's; the CLI (`NPROC_PER_NODE=2 swift sft --use_dora true --tensor_model_parallel_size 2 --deepspeed zero2`)
// logs the one-process losses and saves the whole adapter. Creating DoRA adapters from a model already sharded is
// refused with a message naming what to do.
//
// Tolerances: those of test_tensor_parallel.cpp (loss 1e-6 relative; gradients 3e-5 of each tensor's largest
// element; trainer losses 1e-6 relative and whole parameters 5e-5 relative L2 per tensor). The o/down norms are
// roots of fp32 sums of the ranks' fp32-rounded squares (one process: the root of one fp64 sum), a few ulp apart.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

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

struct Case {
  std::string name;
  std::string model_type;
  int tp, sp;
  float dropout = 0.0f;
  bool load_shards = false;  // the adapters from the whole weights, then CausalLM::shard_for_tensor_parallel
};

TinyModelSpec spec_for(const std::string& type) {
  TinyModelSpec s;
  s.model_type = type;
  if (type == "llama") {  // o/down biases (added by rank 0 only), 4 heads
    s.heads = 4;
    s.kv_heads = 4;
    s.intermediate = 36;
    s.biases = true;
  }
  return s;
}

model::LoraAdapters dora_adapters(const model::CausalLM& lm, float dropout) {
  model::LoraSettings s;
  s.rank = 4;
  s.init_weights = "false";  // random B: W + s B A differs from W, so every gradient is non-trivial
  s.seed = 3;
  s.use_dora = true;
  s.dropout = dropout;
  return model::create_lora(lm.config(), s, &lm.weights());
}

Gradients forward_backward(const Case& k, const model::MicroBatch& batch, dist::Communicator* world) {
  auto lm = test::tiny_model(spec_for(k.model_type), 11);
  model::LoraAdapters lora = dora_adapters(*lm, k.dropout);
  std::unique_ptr<train::ParallelWorld> parallel;
  if (world != nullptr) parallel = std::make_unique<train::ParallelWorld>(*world, k.sp, k.tp);
  if (parallel && k.load_shards) lm->shard_for_tensor_parallel(parallel->layout().tp_rank, k.tp);
  model::TrainableModel tm(*lm, model::TunerType::Lora, std::move(lora));
  if (parallel) tm.set_parallel(parallel->groups());
  const model::StepStats s = tm.forward_backward(batch, 1.0f / static_cast<float>(test::target_tokens(batch)), 5, true);
  if (world == nullptr) return test::collect_gradients(tm, s);
  return test::group_sum_and_gather(tm, parallel->groups(), s);
}

class TensorParallelDoraStep : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelDoraStep, EqualsOneProcessAfterTheGroupSumAndGather) {
  const Case k = GetParam();
  const model::MicroBatch batch = test::random_micro_batch({9, 23, 3, 5, 1}, 97, 17);
  const Gradients one = forward_backward(k, batch, nullptr);
  bool has_magnitudes = false;
  for (const std::string& n : one.names) has_magnitudes |= n.find("lora_magnitude_vector") != std::string::npos;
  ASSERT_TRUE(has_magnitudes) << "the adapters must be DoRA's";
  const int world = k.tp * k.sp;
  std::vector<Gradients> ranks(static_cast<size_t>(world));
  dist::run_ranks(world, [&](dist::Communicator& comm) {
    ranks[static_cast<size_t>(comm.rank())] = forward_backward(k, batch, &comm);
  });
  test::expect_ranks_equal_one(k.name, ranks, one);
}

INSTANTIATE_TEST_SUITE_P(Cpu, TensorParallelDoraStep,
                         ::testing::Values(Case{"qwen3_tp2", "qwen3", 2, 1}, Case{"qwen3_tp4", "qwen3", 4, 1},
                                           Case{"llama_biases_tp2", "llama", 2, 1},
                                           Case{"llama_biases_tp4", "llama", 4, 1},
                                           Case{"qwen3_tp2_dropout", "qwen3", 2, 1, 0.1f},
                                           Case{"llama_biases_tp4_dropout", "llama", 4, 1, 0.3f},
                                           Case{"qwen3_tp2_sp2_dropout", "qwen3", 2, 2, 0.1f},
                                           Case{"qwen3_tp2_load_shards", "qwen3", 2, 1, 0.1f, true},
                                           Case{"llama_biases_tp4_load_shards", "llama", 4, 1, 0.0f, true}),
                         [](const auto& info) { return info.param.name; });

// DoRA's initial magnitude is the whole rows' norm: adapters made from a model already sharded are refused.
TEST(TensorParallelDora, AdaptersFromAShardedModelAreRefused) {
  auto lm = test::tiny_model(spec_for("qwen3"), 11);
  lm->shard_for_tensor_parallel(0, 2);
  try {
    dora_adapters(*lm, 0.0f);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--use_dora"), std::string::npos) << what;
    EXPECT_NE(what.find("before CausalLM::shard_for_tensor_parallel"), std::string::npos) << what;
  }
}

// ---- trainer ---------------------------------------------------------------------------------------------------

TEST(TensorParallelDoraTrainer, RunsEqualOneProcess) {
  struct Layout {
    std::string name;
    int world, sp, tp;
    std::string model_type = "qwen3";
    double dropout = 0;
    int zero = 0;
  };
  for (const Layout& l : {Layout{"tp2", 2, 1, 2}, Layout{"tp4_llama_biases", 4, 1, 4, "llama"},
                          Layout{"tp2_dropout", 2, 1, 2, "qwen3", 0.1}, Layout{"tp4_dropout", 4, 1, 4, "qwen3", 0.1},
                          Layout{"dp2_tp2", 4, 1, 2}, Layout{"sp2_tp2_dropout", 4, 2, 2, "qwen3", 0.1},
                          Layout{"dp2_tp2_zero1", 4, 1, 2, "qwen3", 0, 1},
                          Layout{"dp2_tp2_llama_biases_zero2", 4, 1, 2, "llama", 0, 2}}) {
    const int dp = l.world / (l.sp * l.tp);
    test::RunSpec one;
    one.model = spec_for(l.model_type);
    one.dora = true;
    one.dropout = l.dropout;
    one.batch_size = dp;
    test::expect_parallel_run_equals_one(one, l.world, l.sp, l.tp, l.zero, "dora_" + l.name, "dora_" + l.name);
  }
}

// A DoRA TP 2 checkpoint holds the one-process adapter (whole magnitudes, A and B) and moments; one process resumes
// from it and the TP run from the one-process checkpoint.
TEST(TensorParallelDoraTrainer, CheckpointsAreWholeAndResumeAcrossLayouts) {
  test::RunSpec one;
  one.dora = true;
  one.dropout = 0.1;
  one.save_steps = 2;
  one.run_dir = train::create_run_dir(test::fresh_dir("dora_ckpt_one").string());
  const test::RunOutput single = test::run_rank(one, nullptr);
  test::RunSpec par = one;
  par.tp = 2;
  par.run_dir = train::create_run_dir(test::fresh_dir("dora_ckpt_tp").string());
  const test::RunOutput parallel = test::run_world(2, par);
  test::expect_same_run(parallel, single, "dora_ckpt_tp2");
  int magnitudes = 0;  // the saved adapter holds the DoRA magnitudes (and the moments theirs)
  for (const char* file : {"optimizer.safetensors", "adapter_model.safetensors"}) {
    for (const std::string& n : io::SafetensorsFile::open((fs::path(par.run_dir) / "checkpoint-2" / file).string()).names()) {
      magnitudes += n.find("lora_magnitude_vector") != std::string::npos ? 1 : 0;
    }
  }
  EXPECT_GT(magnitudes, 0);
  test::expect_checkpoints_resume_across_layouts(one, single, par, parallel, 2, "adapter_model.safetensors", "dora_ckpt");
}

#ifdef SWIFT_EXE
// The CLI as users run it: `NPROC_PER_NODE=2 swift sft --use_dora true --tensor_model_parallel_size 2 --deepspeed
// zero2` (the adapters created from the whole weights, then the model sharded at load) logs the one-process losses
// and saves the adapter (magnitudes included) with its whole shapes and values.
TEST(TensorParallelDoraCli, TwoRanksWithZeroTwoLogTheLossesOfOneProcessAndSaveWholeAdapters) {
  const fs::path root = test::fresh_dir("tp_dora_cli");
  const fs::path model = test::tiny_chat_with_four_heads(root / "model");
  const std::string common = std::string(SWIFT_EXE) + " sft --model " + model.string() + " --dataset " +
                             SWIFT_FIXTURES_DIR + "/tiny_chat/chat.jsonl --max_steps 3 --logging_steps 1 "
                             "--lora_dropout 0 --split_dataset_ratio 0 --learning_rate 1e-3 --use_dora true "
                             "--gradient_accumulation_steps 2 --per_device_train_batch_size 2";
  const std::string one = common + " --output_dir " + (root / "one").string() + " > " + (root / "one.log").string() +
                          " 2>&1";
  ASSERT_EQ(std::system(one.c_str()), 0) << test::file_text(root / "one.log");
  const std::string two = "NPROC_PER_NODE=2 SWIFT_DIST_LOG_DIR=" + (root / "ranks").string() +
                          " SWIFT_DIST_TIMEOUT=60 " + common + " --tensor_model_parallel_size 2 --deepspeed zero2 " +
                          "--output_dir " + (root / "two").string() + " > " + (root / "two.log").string() + " 2>&1";
  ASSERT_EQ(std::system(two.c_str()), 0) << test::file_text(root / "two.log");
  const fs::path dir_one = test::only_run_dir(root / "one"), dir_two = test::only_run_dir(root / "two");
  const std::vector<double> a = test::logged_losses(dir_one), b = test::logged_losses(dir_two);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-6 * std::abs(a[i])) << "step " << i + 1;
  const io::PeftAdapter pa = io::load_peft_adapter((dir_one / "checkpoint-3").string());
  const io::PeftAdapter pb = io::load_peft_adapter((dir_two / "checkpoint-3").string());
  ASSERT_EQ(pa.tensors.size(), pb.tensors.size());
  int magnitudes = 0;
  double worst = 0;
  for (const auto& [name, t] : pa.tensors) {
    ASSERT_TRUE(pb.tensors.count(name)) << name;
    const Tensor& u = pb.tensors.at(name);
    ASSERT_EQ(u.shape(), t.shape()) << name;
    magnitudes += name.find("lora_magnitude_vector") != std::string::npos ? 1 : 0;
    double d2 = 0, n2 = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      d2 += (u.item(i) - t.item(i)) * (u.item(i) - t.item(i));
      n2 += t.item(i) * t.item(i);
    }
    worst = std::max(worst, std::sqrt(d2 / std::max(n2, 1e-30)));
  }
  EXPECT_GT(magnitudes, 0);
  EXPECT_LE(worst, 5e-5) << "the adapter saved by the TP 2 x ZeRO-2 run against one process's";
  std::printf("[ dora_cli ] adapter after 3 steps vs one process: worst relative L2 difference %.3g\n", worst);
}
#endif

}  // namespace
}  // namespace swift
