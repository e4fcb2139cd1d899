// tests/train/test_tensor_parallel_zero2.cpp — ZeRO-2 (`--deepspeed zero2`) with Megatron tensor parallelism on the
// CPU: thread-ranks DP x SP x TP against one process.
//
// What must hold: with the reducer's sharded gradient storage (no full gradients kept; train/zero.h) the model sums
// each micro-batch's Partial gradients (LoRA A of q/k/v/gate/up, LoRA B of o/down, q/k norms, o/down biases) over the
// TP group layer by layer before their buckets are reduce-scattered, and the gradient norm counts every element once
// (shard pieces over the replicas then the TP group; whole tensors once), so trainer runs follow one process step by
// step: LoRA and full fine-tuning, o/down biases (rank 0 alone adds them), q/k norms, tied and untied vocabulary
// shards of 97 rows (uneven: the TP ranks' bucket plans differ), DP 2 x TP 2, TP 2 alone with dropout, SP 2 x TP 2 and
// DP 2 x TP 4; clipping is active (max_grad_norm 1 against norms of a few units at the start). Checkpoints are in the
// one-process format (moments included) and each kind of run resumes from the other's.
//
// Tolerances: those of test_tensor_parallel.cpp (losses within 1e-6 relative, whole parameters after the run within
// 5e-5 relative L2 per tensor); ZeRO-2 sums per micro-batch then across micro-batches, which moves rounding only.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "dist/communicator.h"
#include "io/safetensors.h"
#include "train/parallel_test_util.h"

namespace swift {
namespace {

namespace fs = std::filesystem;

struct Layout {
  std::string name;
  int world, sp, tp;
  model::TunerType tuner;
  std::string model_type = "qwen3";
  bool biases = false, tied = false;
  double dropout = 0;
};

TEST(TensorParallelZeroTwo, RunsEqualOneProcess) {
  using model::TunerType;
  for (const Layout& l : {Layout{"dp2_tp2_lora", 4, 1, 2, TunerType::Lora},
                          Layout{"dp2_tp2_full", 4, 1, 2, TunerType::Full},
                          Layout{"dp2_tp2_llama_biases_full", 4, 1, 2, TunerType::Full, "llama", true},
                          Layout{"dp2_tp2_tied_full", 4, 1, 2, TunerType::Full, "qwen3", false, true},
                          Layout{"tp2_lora_dropout", 2, 1, 2, TunerType::Lora, "qwen3", false, false, 0.1},
                          Layout{"sp2_tp2_lora_dropout", 4, 2, 2, TunerType::Lora, "qwen3", false, false, 0.1},
                          Layout{"dp2_tp4_llama_biases_lora", 8, 1, 4, TunerType::Lora, "llama", true}}) {
    const int dp = l.world / (l.sp * l.tp);
    test::RunSpec one;
    one.model.model_type = l.model_type;
    one.model.biases = l.biases;
    one.model.tied = l.tied;
    if (l.model_type == "llama") {
      one.model.heads = 4;
      one.model.kv_heads = 4;
      one.model.intermediate = 36;
    }
    one.tuner = l.tuner;
    one.dropout = l.dropout;
    one.batch_size = dp;
    test::expect_parallel_run_equals_one(one, l.world, l.sp, l.tp, 2, "z2_" + l.name, "zero2_" + l.name);
  }
}

// DP 2 x TP 2 with ZeRO-2 (LoRA and full fine-tuning): checkpoint-2 holds the one-process tensors and AdamW moments;
// one process resumes from it and continues like the ZeRO-2 x TP run, which resumes from the one-process checkpoint
// and ends like one process.
TEST(TensorParallelZeroTwo, CheckpointsAreWholeAndResumeAcrossLayouts) {
  for (model::TunerType tuner : {model::TunerType::Lora, model::TunerType::Full}) {
    const std::string name = tuner == model::TunerType::Lora ? "lora" : "full";
    test::RunSpec one;
    one.tuner = tuner;
    one.batch_size = 2;
    one.save_steps = 2;
    one.run_dir = train::create_run_dir(test::fresh_dir("z2ckpt_one_" + name).string());
    const test::RunOutput single = test::run_rank(one, nullptr);
    test::RunSpec par = one;
    par.tp = 2;
    par.batch_size = 1;
    par.zero_stage = 2;
    par.run_dir = train::create_run_dir(test::fresh_dir("z2ckpt_tp_" + name).string());
    const test::RunOutput parallel = test::run_world(4, par);
    test::expect_same_run(parallel, single, "zero2_ckpt_" + name);
    const std::string weights = tuner == model::TunerType::Lora ? "adapter_model.safetensors" : "model.safetensors";
    test::expect_checkpoints_resume_across_layouts(one, single, par, parallel, 4, weights, "zero2_ckpt_" + name);
  }
}

}  // namespace
}  // namespace swift
