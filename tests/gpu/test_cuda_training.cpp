// tests/gpu/test_cuda_training.cpp — the training engine on CUDA against the transformers + PEFT fixtures of
// tests/fixtures/training (the same cases as tests/model/test_golden_training.cpp): the loss and every trainable
// gradient at the initial parameters, with the model placed on the GPU
//   - in F32 (F32 weights and activations): as exact as the CPU up to summation order;
//   - in BF16 (BF16 matrices, BF16 activations, F32 adapters/masters/statistics): bf16 rounding of every
//     activation, so loose relative tolerances;
//   - in F16 (--torch_dtype float16: F16 matrices and activations, the activations' dtype chosen by default from the
//     matrices) with loss scaling as the trainer applies it: the loss gradient times a power-of-two scale (2^16,
//     GradScaler's initial scale, halved while some gradient is not finite, as its backoff would), the gradients
//     divided by it afterwards (exact);
//   - in BF16 again with LoRA's B products inside the frozen products (our Hopper GEMM's tail, ops_matmul.cpp) at
//     the fixtures' few rows, which by default keep the two-step form (from 512 rows up only), at BF16's bounds.
// Label gpu; compiled only in CUDA builds.
//
// Tolerances: F32 loss rel 1e-5 and gradients max_abs 5e-5 / rel_l2 1e-4 (the CPU passes at 1e-5 / 2e-5;
// cuBLAS and the attention kernels sum in other orders). BF16: loss rel 1e-2, gradients rel_l2 1e-1 (bf16 has
// 8 bits of mantissa: each stored activation is off by up to 2^-9 relative; errors compound over layers, and
// the q/k-norm weight gradients, sums over T*H products that largely cancel, measured 6.0-6.7e-2 on the H200
// (2026-11-29) while every other gradient stayed under 6e-2). F16: loss rel 2.5e-3, gradients rel_l2 2.5e-2, the
// BF16 bounds over 4 (fp16's 10-bit mantissa rounds each activation 8x finer; the other 2x is margin, not yet
// measured on the H200).
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "io/hf_checkpoint.h"
#include "io/model_config.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/golden_util.h"
#include "core/memory.h"
#include "model/training.h"
#include "ops/backends.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops.h"

namespace swift {
namespace {

namespace fs = std::filesystem;

std::string training_root() { return std::string(SWIFT_FIXTURES_DIR) + "/training"; }

std::vector<std::string> list_cases() {
  std::vector<std::string> cases;
  if (!fs::exists(training_root())) return cases;
  for (const auto& e : fs::directory_iterator(training_root()))
    if (e.is_directory()) cases.push_back(e.path().filename().string());
  std::sort(cases.begin(), cases.end());
  return cases;
}

struct Precision {
  const char* name;
  DType matrices, activations;
  double loss_rel, grad_max_abs, grad_rel_l2;
  float loss_scale = 1.0f;  // F16: the trainer's dynamic loss scale (its initial value)
  bool b_in_product = false;  // LoRA's B products inside the frozen products (ops_matmul.cpp) at these few rows too
};

bool all_gradients_finite(const std::vector<model::Parameter>& params) {
  for (const model::Parameter& param : params) {
    const Tensor g = param.grad.to(Device::cpu());
    for (int64_t i = 0; i < g.numel(); ++i) {
      if (!std::isfinite(g.data<float>()[i])) return false;
    }
  }
  return true;
}

// `grad` on the host divided by `scale` (a power of two: exact unless subnormal).
Tensor unscaled(const Tensor& grad, float scale) {
  Tensor g = grad.to(Device::cpu()).clone();
  float* p = g.data<float>();
  for (int64_t i = 0; i < g.numel(); ++i) p[i] /= scale;
  return g;
}

class CudaTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaTraining, LossAndEveryGradientMatchTransformers) {
  ops::init_backends();
  ASSERT_GT(ops::cuda_device_count(), 0) << "no CUDA device visible (gpu tests need one)";
  const std::string dir = training_root() + "/" + GetParam();
  io::SafetensorsFile file = io::SafetensorsFile::open(dir + "/expected.safetensors");
  const auto meta = file.metadata();
  const model::TunerType tuner = model::tuner_type_from_string(meta.at("tuner"));
  const model::MicroBatch batch{file.tensor("batch.00.input_ids"), file.tensor("batch.00.positions"),
                                file.tensor("batch.00.cu_seqlens"), file.tensor("batch.00.targets")};
  int64_t n = 0;
  for (int64_t t = 0; t < batch.labels.numel(); ++t) n += batch.labels.item(t) != -100 ? 1 : 0;
  const double expected_loss = file.tensor("grad_batch.loss").item(0);

  for (const Precision& p : {Precision{"f32", DType::F32, DType::F32, 1e-5, 5e-5, 1e-4},
                             Precision{"bf16", DType::BF16, DType::BF16, 1e-2, 1e9, 1e-1},
                             Precision{"f16", DType::F16, DType::F16, 2.5e-3, 1e9, 2.5e-2, 65536.0f},
                             Precision{"bf16, B in the product", DType::BF16, DType::BF16, 1e-2, 1e9, 1e-1, 1.0f, true}}) {
    SCOPED_TRACE(p.name);
    struct MinRows {  // the batch's few rows through our GEMM's tail (where an sm_90a device runs it), then back
      explicit MinRows(bool on) : on(on), was(ops::cuda::lora_b_in_gemm_min_rows()) {
        if (on) ops::cuda::set_lora_b_in_gemm_min_rows(1);
      }
      ~MinRows() { if (on) ops::cuda::set_lora_b_in_gemm_min_rows(was); }
      bool on;
      int64_t was;
    } min_rows(p.b_in_product);
    // The base model with the case's pad_token_id, as tests/model/test_golden_training.cpp loads it.
    const std::string base_dir =
        std::string(SWIFT_FIXTURES_DIR) + "/golden/" + fs::path(meta.at("base_model")).filename().string();
    io::ModelConfig config = io::load_model_config(base_dir + "/config.json");
    if (meta.count("pad_token_id")) config.pad_token_id = std::stoll(meta.at("pad_token_id"));
    auto lm = model::CausalLM::from_weights(std::move(config), io::load_hf_weights(base_dir));
    lm->place(Device::cuda(), p.matrices);
    model::LoraAdapters lora;
    if (tuner == model::TunerType::Lora) lora = model::lora_from_peft(io::load_peft_adapter(dir + "/adapter_init"), lm->config());
    model::TrainableModel tm(*lm, tuner, std::move(lora));
    // Activations follow F16 matrices by default (BF16 for the others, whatever the matrices).
    EXPECT_EQ(tm.activation_dtype(), p.matrices == DType::F16 ? DType::F16 : DType::BF16);
    tm.set_activation_dtype(p.activations);
    for (bool checkpointing : {true, false}) {
      float scale = p.loss_scale;
      model::StepStats s;
      for (;;) {
        tm.zero_grad();
        s = tm.forward_backward(batch, scale / static_cast<float>(n), 0, checkpointing);
        if (scale <= 1.0f || all_gradients_finite(tm.parameters())) break;
        scale *= 0.5f;  // GradScaler's backoff (the trainer would skip this step)
      }
      if (scale != p.loss_scale) std::printf("%s %s: loss scale backed off to %g\n", GetParam().c_str(), p.name, scale);
      EXPECT_EQ(s.tokens, n);
      const double loss = s.loss_sum / static_cast<double>(n);
      EXPECT_LT(std::abs(loss - expected_loss) / std::abs(expected_loss), p.loss_rel)
          << "loss " << loss << " expected " << expected_loss << " checkpointing " << checkpointing;
      for (const model::Parameter& param : tm.parameters()) {
        ASSERT_TRUE(file.contains("grad." + param.name)) << param.name;
        const Tensor expected = file.tensor("grad." + param.name);
        // A gradient that is exactly zero in the reference (LoRA A with B = 0) is compared by max_abs alone.
        double expected_max = 0;
        for (int64_t i = 0; i < expected.numel(); ++i) expected_max = std::max(expected_max, std::abs(expected.item(i)));
        const double max_abs = expected_max == 0 ? 1e-6 : p.grad_max_abs;
        const double rel_l2 = expected_max == 0 ? 1e9 : p.grad_rel_l2;
        EXPECT_TRUE(golden::close(GetParam() + " " + p.name + " grad " + param.name, unscaled(param.grad, scale),
                                  expected, max_abs, rel_l2));
      }
    }
  }
}

// LoRA dropout on the GPU against the CPU, same seed: the CPU draws every mask three times (forward, dx, da), the GPU
// draws it once in the forward and reads the cached keep bits in the backward (ops.h Dropout::keep_bits), also
// after a recompute (checkpointing, the selective recompute). The first *_lora_randb fixture, dropout 0.25, loss and
// every gradient: F32 within the F32 bounds above, BF16 activations within the BF16 ones; every recompute policy gives
// the bits of keeping everything.
// A LoRA training fixture with a random B (the dropout reaches every gradient: B = 0 zeroes A's): its first batch,
// its base model built on `device` (placed with `matrices` on CUDA), and its initial adapter with dropout 0.25.
struct LoraFixture {
  std::string dir, base_dir;
  std::map<std::string, std::string> meta;
  model::MicroBatch batch;

  // The first *_lora_randb case whose name contains `name` (any when empty).
  static LoraFixture find(const std::string& name = "") {
    LoraFixture f;
    for (const std::string& c : list_cases()) {
      if (c.find("_lora_randb") != std::string::npos && c.find(name) != std::string::npos) {
        f.dir = training_root() + "/" + c;
        break;
      }
    }
    if (f.dir.empty()) return f;
    io::SafetensorsFile file = io::SafetensorsFile::open(f.dir + "/expected.safetensors");
    f.meta = file.metadata();
    f.batch = {file.tensor("batch.00.input_ids"), file.tensor("batch.00.positions"),
               file.tensor("batch.00.cu_seqlens"), file.tensor("batch.00.targets")};
    f.base_dir =
        std::string(SWIFT_FIXTURES_DIR) + "/golden/" + fs::path(f.meta.at("base_model")).filename().string();
    return f;
  }
  std::unique_ptr<model::CausalLM> make(Device device, DType matrices) const {
    io::ModelConfig config = io::load_model_config(base_dir + "/config.json");
    if (meta.count("pad_token_id")) config.pad_token_id = std::stoll(meta.at("pad_token_id"));
    auto lm = model::CausalLM::from_weights(std::move(config), io::load_hf_weights(base_dir));
    if (device.is_cuda()) lm->place(device, matrices);
    return lm;
  }
  model::LoraAdapters lora(const model::CausalLM& lm) const {
    model::LoraAdapters l = model::lora_from_peft(io::load_peft_adapter(dir + "/adapter_init"), lm.config());
    l.dropout = 0.25f;
    return l;
  }
};

TEST(CudaTrainingDropout, LoraDropoutMasksMatchTheCpu) {
  ops::init_backends();
  ASSERT_GT(ops::cuda_device_count(), 0) << "no CUDA device visible (gpu tests need one)";
  const LoraFixture fx = LoraFixture::find();
  ASSERT_FALSE(fx.dir.empty()) << "no *_lora_randb fixture under " << training_root();
  const model::MicroBatch& batch = fx.batch;
  const auto make = [&](Device device, DType matrices) { return fx.make(device, matrices); };
  const auto lora = [&](const model::CausalLM& lm) { return fx.lora(lm); };
  auto cpu_lm = make(Device::cpu(), DType::F32);
  model::TrainableModel cpu(*cpu_lm, model::TunerType::Lora, lora(*cpu_lm));
  cpu.zero_grad();
  const model::StepStats want = cpu.forward_backward(batch, 1.0f, 4242, false);
  for (const Precision& p : {Precision{"f32", DType::F32, DType::F32, 1e-5, 5e-5, 1e-4},
                             Precision{"bf16", DType::BF16, DType::BF16, 1e-2, 1e9, 1e-1}}) {
    auto gpu_lm = make(Device::cuda(), p.matrices);
    model::TrainableModel gpu(*gpu_lm, model::TunerType::Lora, lora(*gpu_lm));
    gpu.set_activation_dtype(p.activations);
    // Every recompute policy: within the bounds of the CPU, and the same bits as keeping everything on this GPU
    // (block checkpointing; the selective recompute of --recompute_modules layernorm act mlp, mlp in one layer).
    using Modules = model::TrainableModel::RecomputeModules;
    const std::vector<std::tuple<std::string, bool, Modules>> policies = {
        {"keep everything", false, {}},
        {"checkpointing", true, {}},
        {"layernorm act mlp", false, {.layernorm = true, .act = true, .mlp = true}},
        {"layernorm act, mlp in 1 layer", false, {.layernorm = true, .act = true, .mlp = true, .mlp_layers = 1}}};
    std::vector<Tensor> kept;  // the gradients of keeping everything, on the host
    for (const auto& [policy, checkpointing, modules] : policies) {
      SCOPED_TRACE(fmt::format("{} {}", p.name, policy));
      gpu.set_recompute_modules(modules);
      gpu.zero_grad();
      const model::StepStats got = gpu.forward_backward(batch, 1.0f, 4242, checkpointing);
      EXPECT_LT(std::abs(got.loss_sum - want.loss_sum) / std::abs(want.loss_sum), p.loss_rel);
      const std::vector<model::Parameter>& gp = gpu.parameters();
      const std::vector<model::Parameter>& cp = cpu.parameters();
      ASSERT_EQ(gp.size(), cp.size());
      for (size_t i = 0; i < gp.size(); ++i) {
        const Tensor g = gp[i].grad.to(Device::cpu());
        EXPECT_TRUE(golden::close(std::string("dropout ") + p.name + " grad " + gp[i].name, g, cp[i].grad,
                                  p.grad_max_abs, p.grad_rel_l2));
        if (kept.size() < gp.size()) {
          kept.push_back(g);
        } else {
          EXPECT_EQ(std::memcmp(kept[i].raw(), g.raw(), g.nbytes()), 0) << gp[i].name;
        }
      }
    }
  }
}

// --offload_embedding (CausalLM::offload_embedding): the table in mapped host memory gives the same loss and
// gradients bit for bit (the lookup copies rows either way), its device memory is freed, and the lookup of the
// mapped table equals the device table's for every dtype the op takes. Tied tables are refused, and full
// fine-tuning of an offloaded table.
TEST(CudaTrainingDropout, OffloadedEmbeddingGivesTheSameBits) {
  ops::init_backends();
  ASSERT_GT(ops::cuda_device_count(), 0) << "no CUDA device visible (gpu tests need one)";
  const LoraFixture fx = LoraFixture::find("llama_gqa");  // untied
  ASSERT_FALSE(fx.dir.empty()) << "no llama_gqa *_lora_randb fixture under " << training_root();
  const auto step = [&](bool offload, int64_t* freed_bytes) {
    auto lm = fx.make(Device::cuda(), DType::BF16);
    const int64_t before = memory_stats(1).current[static_cast<int>(MemoryCategory::Weights)];
    if (offload) lm->offload_embedding();
    const int64_t after = memory_stats(1).current[static_cast<int>(MemoryCategory::Weights)];
    if (freed_bytes != nullptr) *freed_bytes = before - after;
    EXPECT_EQ(lm->embedding_offloaded(), offload);
    EXPECT_TRUE(lm->device().is_cuda());
    model::TrainableModel t(*lm, model::TunerType::Lora, fx.lora(*lm));
    t.zero_grad();
    const model::StepStats stats = t.forward_backward(fx.batch, 1.0f, 4242, false);
    std::vector<Tensor> grads;
    for (const model::Parameter& p : t.parameters()) grads.push_back(p.grad.to(Device::cpu()));
    return std::make_pair(stats.loss_sum, grads);
  };
  int64_t freed = 0;
  const auto [want_loss, want] = step(false, nullptr);
  const auto [got_loss, got] = step(true, &freed);
  EXPECT_EQ(got_loss, want_loss);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(std::memcmp(got[i].raw(), want[i].raw(), got[i].nbytes()), 0) << i;
  {
    auto lm = fx.make(Device::cuda(), DType::BF16);
    const Tensor& table = lm->weights().embed_tokens;
    EXPECT_EQ(freed, static_cast<int64_t>(table.nbytes())) << "the device table is freed";
  }
  {  // a model built on the device without place() (bench_train_step's random weights): its loaded tensors let go
    std::map<std::string, Tensor> weights;
    for (auto& [name, t] : io::load_hf_weights(fx.base_dir)) weights[name] = t.to(Device::cuda(), MemoryCategory::Weights);
    auto lm = model::CausalLM::from_weights(io::load_model_config(fx.base_dir + "/config.json"), std::move(weights));
    const size_t table_bytes = lm->weights().embed_tokens.nbytes();
    const int64_t before = memory_stats(1).current[static_cast<int>(MemoryCategory::Weights)];
    lm->offload_embedding();
    EXPECT_EQ(before - memory_stats(1).current[static_cast<int>(MemoryCategory::Weights)],
              static_cast<int64_t>(table_bytes));
  }
  // The op: a mapped table of each dtype against the same table on the device; odd widths, repeated ids.
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t V = 37, C = 13;
    std::vector<float> values(V * C);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 101) * 0.25f - 7.0f;
    const Tensor table = Tensor::from_f32({V, C}, values).to_dtype(dtype).to(Device::cuda());
    const Tensor mapped = ops::host_mapped_copy(table);
    EXPECT_TRUE(mapped.device().is_cpu());
    const Tensor ids = Tensor::from_i32({6}, {0, 36, 5, 5, 17, 2}).to(Device::cuda());
    Tensor want_rows = Tensor::empty({6, C}, dtype, Device::cuda()), got_rows = Tensor::empty({6, C}, dtype, Device::cuda());
    ops::embedding(table, ids, want_rows);
    ops::embedding(mapped, ids, got_rows);
    const Tensor w = want_rows.to(Device::cpu()), g = got_rows.to(Device::cpu());
    EXPECT_EQ(std::memcmp(w.raw(), g.raw(), w.nbytes()), 0);
  }
  // Refusals: a tied table (the LM head multiplies it on the device), full fine-tuning of an offloaded one.
  {
    const LoraFixture tied = LoraFixture::find("qwen2_tied");
    ASSERT_FALSE(tied.dir.empty());
    auto lm = tied.make(Device::cuda(), DType::BF16);
    try {
      lm->offload_embedding();
      ADD_FAILURE() << "a tied embedding table was offloaded";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("tie_word_embeddings"), std::string::npos) << e.what();
    }
    auto untied = fx.make(Device::cuda(), DType::BF16);
    untied->offload_embedding();
    try {
      model::TrainableModel full(*untied, model::TunerType::Full, {});
      ADD_FAILURE() << "full fine-tuning accepted an offloaded embedding table";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("--offload_embedding"), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaTraining, ::testing::ValuesIn(list_cases()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace swift
#endif  // SWIFT_WITH_CUDA
