// tests/gpu/test_cuda_decode.cpp — inference on CUDA: the attention_decode kernel against the CPU reference
// (ops::ref, double), and CausalLM's forward / KV-cache decoding placed on the GPU against the same model on the CPU.
//
// Invariants:
//  - Op cases cover Tq 1 and > 1, GQA ratios 1/2/3/6/7, D 7/64/80/128/160/300 (both pass-2 layouts), windows, caches
//    with spare rows holding NaN (rows past start + Tq must be ignored) and caches long enough for split-K (up to
//    9,000 keys, so the combine kernel runs). Outputs sit inside guard bytes that start as NaN.
//  - Tolerances (written once, with why):
//      op F32: relative norm 2e-5 — fp32 dot products, expf and split sums against a double reference;
//      op BF16: relative norm 8e-3 — same math; the inputs are the same bf16 values on both sides, so the error is
//        the output's bf16 rounding (2^-9 relative per element) plus fp32 summation; op F16: 1e-3, the same with
//        fp16's rounding (2^-12 relative: 10 mantissa bits), 8x finer, rounded up; inputs in [-1, 1], in range;
//      model F32 (F32 weights and activations on the GPU vs the CPU): logits max_abs 1e-4, rel_l2 2e-5 — both sides
//        fp32; cuBLAS, the flash/split-K attention and OpenBLAS sum in different orders (rounding only), and greedy
//        token ids must be identical;
//      model BF16 (BF16 matrices and activations on the GPU vs the CPU with the same BF16 matrices and F32
//        activations): logits rel_l2 4e-2 and max_abs 8e-2 * max|logit| — every stored activation (residual stream,
//        projections, attention output, KV cache, logits) is rounded to bf16 (2^-9 relative), compounding over the
//        layers, as in the BF16 training test;
//      model F16 (F16 matrices and activations on the GPU vs the CPU with the same F16 matrices and F32 activations):
//        logits rel_l2 1e-2 and max_abs 2e-2 * max|logit| — the BF16 bounds over 4: fp16 rounds every stored
//        activation to 2^-11 relative, 8x finer than bf16 (the other 2x is margin: not yet measured on the H200).
#include <gtest/gtest.h>

#ifdef SWIFT_WITH_CUDA
#include <algorithm>
#include <cmath>
#include <functional>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/golden_util.h"
#include "model/lora.h"
#include "ops/attention_decode.h"

namespace swift::test {
namespace {

// ---- the op ------------------------------------------------------------------------------------------------------

struct DecodeCase {
  int64_t tq, start, hq, hkv, d, window;
};

// A cache of start + tq rows of random values followed by `spare` rows of NaN (capacity beyond the valid rows).
Tensor cache_with_spare_rows(int64_t rows, int64_t spare, int64_t hkv, int64_t d, uint32_t seed) {
  Tensor values = random_tensor({rows, hkv, d}, DType::F32, seed);
  Tensor cache = Tensor::empty({rows + spare, hkv, d}, DType::F32);
  cache.slice_rows(0, rows).copy_from(values);
  float* p = static_cast<float*>(cache.slice_rows(rows, rows + spare).raw());
  for (int64_t i = 0; i < spare * hkv * d; ++i) p[i] = std::nanf("");
  return cache;
}

void run_decode_case(const DecodeCase& c, DType dtype, uint32_t seed) {
  SCOPED_TRACE("Tq " + std::to_string(c.tq) + " start " + std::to_string(c.start) + " Hq " + std::to_string(c.hq) +
               " Hkv " + std::to_string(c.hkv) + " D " + std::to_string(c.d) + " window " + std::to_string(c.window) +
               " " + dtype_name(dtype));
  const int64_t rows = c.start + c.tq, spare = 3;
  const Input q = make_input({c.tq, c.hq, c.d}, dtype, seed, -2.0f, 2.0f);
  const Tensor k_host = cache_with_spare_rows(rows, spare, c.hkv, c.d, seed + 1);
  const Tensor v_host = cache_with_spare_rows(rows, spare, c.hkv, c.d, seed + 2);
  const Tensor k_ref = rounded(k_host, dtype), v_ref = rounded(v_host, dtype);
  const Tensor k_dev = (dtype == DType::F32 ? k_host : k_host.to_dtype(dtype)).to(Device::cuda());
  const Tensor v_dev = (dtype == DType::F32 ? v_host : v_host.to_dtype(dtype)).to(Device::cuda());
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.d));

  Tensor ref = Tensor::empty({c.tq, c.hq, c.d}, DType::F32);
  ops::ref::attention_decode(q.ref, k_ref, v_ref, c.start, scale, c.window, ref);
  DeviceOut out({c.tq, c.hq, c.d}, dtype);
  ops::attention_decode(q.dev, k_dev, v_dev, c.start, scale, c.window, out.tensor);
  g_tag = std::string("attention_decode ") + dtype_name(dtype);
  expect_close(out.fetch(), ref, dtype == DType::F32 ? 2e-5 : (dtype == DType::F16 ? 1e-3 : 8e-3), "out");
}

const std::vector<DecodeCase>& decode_cases() {
  static const std::vector<DecodeCase> cases = {
      {1, 0, 4, 2, 64, 0},       // the first token: one key
      {1, 12, 4, 2, 64, 0},      // a short cache, one split
      {1, 700, 28, 4, 128, 0},   // Qwen2.5-7B's heads: split-K
      {1, 3000, 14, 2, 64, 0},   // Qwen2.5-0.5B's heads, a longer cache
      {1, 9000, 2, 2, 96, 0},    // few heads: many splits
      {5, 33, 6, 1, 128, 0},     // several new tokens (causal among themselves), GQA 6
      {3, 200, 8, 8, 80, 17},    // sliding window, MHA, D 80
      {1, 5000, 7, 1, 128, 1000},  // window over a long cache: splits start at the window
      {7, 100, 9, 3, 7, 0},      // odd D
      {2, 4, 2, 1, 160, 0},      // D above the block size (one key group)
      {1, 50, 2, 1, 300, 5},     // D above the block size, window
      {33, 0, 3, 3, 64, 0},      // a prefill through the decode op
  };
  return cases;
}

TEST(OpsCudaAttentionDecode, MatchesReferenceF32) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  uint32_t seed = 100;
  for (const DecodeCase& c : decode_cases()) run_decode_case(c, DType::F32, seed += 7);
}

TEST(OpsCudaAttentionDecode, MatchesReferenceBF16) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  uint32_t seed = 200;
  for (const DecodeCase& c : decode_cases()) run_decode_case(c, DType::BF16, seed += 7);
}

TEST(OpsCudaAttentionDecode, MatchesReferenceF16) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  uint32_t seed = 300;
  for (const DecodeCase& c : decode_cases()) run_decode_case(c, DType::F16, seed += 7);
}

TEST(OpsCudaAttentionDecode, MixedDevicesAndDtypesThrowNamingTheOp) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const Tensor q = Tensor::zeros({1, 2, 8}, DType::F32, Device::cuda());
  const Tensor k_cpu = Tensor::zeros({4, 1, 8}, DType::F32);
  const Tensor k_bf16 = Tensor::zeros({4, 1, 8}, DType::BF16, Device::cuda());
  Tensor out = Tensor::zeros({1, 2, 8}, DType::F32, Device::cuda());
  for (const Tensor* k : {&k_cpu, &k_bf16}) {
    try {
      ops::attention_decode(q, *k, *k, 3, 1.0f, 0, out);
      ADD_FAILURE() << "expected an error for k_cache " << k->str();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("attention_decode"), std::string::npos) << e.what();
    }
  }
}

TEST(OpsCudaAttentionDecode, Summary) {
  std::printf("%-44s %s\n", "op activation-dtype output", "worst ||out-ref||/||ref||");
  for (const auto& [key, err] : worst_errors()) std::printf("%-44s %.3e\n", key.c_str(), err);
}

// ---- the model ---------------------------------------------------------------------------------------------------

namespace fs = std::filesystem;

std::string golden_dir(const std::string& name) { return std::string(SWIFT_FIXTURES_DIR) + "/golden/" + name; }

struct Fixture {
  Tensor ids, positions, cu_seqlens;
  std::vector<int32_t> first;  // the first sequence's ids
};
Fixture load_fixture(const std::string& name) {
  io::SafetensorsFile f = io::SafetensorsFile::open(golden_dir(name) + "/expected.safetensors");
  Fixture out{f.tensor("input_ids").clone(), f.tensor("positions").clone(), f.tensor("cu_seqlens").clone(), {}};
  for (int64_t t = 0; t < out.cu_seqlens.item(1); ++t) out.first.push_back(static_cast<int32_t>(out.ids.item(t)));
  return out;
}

int32_t argmax(const Tensor& row) {
  const float* p = row.data<float>();
  return static_cast<int32_t>(std::max_element(p, p + row.numel()) - p);
}
// Largest minus second-largest logit: how close a greedy choice was to a tie.
double top2_margin(const Tensor& row) {
  std::vector<float> v(row.data<float>(), row.data<float>() + row.numel());
  std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
  return static_cast<double>(v[0]) - v[1];
}

// Greedy decoding through the KV cache: prefill `prompt`, then `steps` tokens. With `forced`, the given tokens are
// fed instead of the model's own choices (teacher forcing), so two models see the same contexts.
struct Decoded {
  std::vector<int32_t> ids;
  std::vector<Tensor> logits;  // (1, V) F32 host, one per step
};
Decoded decode(const model::CausalLM& m, const std::vector<int32_t>& prompt, int64_t steps,
               const std::vector<int32_t>* forced = nullptr) {
  Decoded out;
  auto cache = m.new_kv_cache(static_cast<int64_t>(prompt.size()) + steps);
  Tensor logits = m.forward_cached(prompt, cache);
  for (int64_t s = 0; s < steps; ++s) {
    EXPECT_EQ(logits.shape(), (Shape{1, m.config().vocab_size}));
    EXPECT_TRUE(logits.device().is_cpu() && logits.dtype() == DType::F32);
    out.logits.push_back(logits);
    const int32_t next = forced ? (*forced)[static_cast<size_t>(s)] : argmax(logits);
    out.ids.push_back(next);
    if (s + 1 < steps) logits = m.forward_cached({next}, cache);
  }
  EXPECT_EQ(cache.length, static_cast<int64_t>(prompt.size()) + steps - 1);
  return out;
}

constexpr double kF32MaxAbs = 1e-4, kF32RelL2 = 2e-5;
constexpr double kBf16RelL2 = 4e-2, kBf16MaxAbsOfMax = 8e-2;
constexpr double kF16RelL2 = 1e-2, kF16MaxAbsOfMax = 2e-2;

std::map<std::string, double>& worst_model_errors() {
  static std::map<std::string, double> m;
  return m;
}

// BF16 comparison: rel_l2 and max_abs relative to the largest expected logit.
void expect_bf16_close(const std::string& what, const Tensor& actual, const Tensor& expected) {
  const golden::TensorDiff d = golden::compare(actual, expected);
  double& worst = worst_model_errors()["bf16 rel_l2 " + what.substr(0, what.find(' '))];
  worst = std::max(worst, d.rel_l2);
  EXPECT_TRUE(d.nonfinite == 0 && d.rel_l2 <= kBf16RelL2 && d.max_abs <= kBf16MaxAbsOfMax * d.expected_abs_max)
      << what << ": " << golden::describe(d);
}
// F16 comparison: as BF16's with fp16's bounds.
void expect_f16_close(const std::string& what, const Tensor& actual, const Tensor& expected) {
  const golden::TensorDiff d = golden::compare(actual, expected);
  double& worst = worst_model_errors()["f16 rel_l2 " + what.substr(0, what.find(' '))];
  worst = std::max(worst, d.rel_l2);
  EXPECT_TRUE(d.nonfinite == 0 && d.rel_l2 <= kF16RelL2 && d.max_abs <= kF16MaxAbsOfMax * d.expected_abs_max)
      << what << ": " << golden::describe(d);
}
void expect_f32_close(const std::string& what, const Tensor& actual, const Tensor& expected) {
  const golden::TensorDiff d = golden::compare(actual, expected);
  double& worst = worst_model_errors()["f32 max_abs " + what.substr(0, what.find(' '))];
  worst = std::max(worst, d.max_abs);
  EXPECT_TRUE(golden::close(what, actual, expected, kF32MaxAbs, kF32RelL2));
}

class CudaDecodeModel : public ::testing::TestWithParam<std::string> {};

// F32 on the GPU computes what the CPU computes: packed forward logits, prefill + cached decoding logits, greedy ids,
// and a multi-token append to a non-empty cache (attention_decode with Tq > 1).
TEST_P(CudaDecodeModel, F32GreedyIdsAndLogitsMatchCpu) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const std::string name = GetParam();
  const Fixture f = load_fixture(name);
  auto cpu = model::CausalLM::load(golden_dir(name));
  auto gpu = model::CausalLM::load(golden_dir(name));
  gpu->place(Device::cuda(), DType::F32);
  ASSERT_EQ(gpu->activation_dtype(), DType::F32);

  expect_f32_close(name + " packed forward", gpu->forward(f.ids, f.positions, f.cu_seqlens),
                   cpu->forward(f.ids, f.positions, f.cu_seqlens));

  const int64_t steps = 24;  // past mistral's window of 5 and a few dozen positions
  const Decoded want = decode(*cpu, f.first, steps);
  const Decoded got = decode(*gpu, f.first, steps);
  for (int64_t s = 0; s < steps; ++s) {
    expect_f32_close(name + " step " + std::to_string(s), got.logits[static_cast<size_t>(s)],
                     want.logits[static_cast<size_t>(s)]);
    ASSERT_EQ(got.ids[static_cast<size_t>(s)], want.ids[static_cast<size_t>(s)])
        << name << ": greedy ids differ at step " << s << " (CPU top-2 margin "
        << top2_margin(want.logits[static_cast<size_t>(s)]) << ")";
  }

  // Prefill part of the prompt, then append 3 tokens in one call (all logits).
  const int64_t n = static_cast<int64_t>(f.first.size()), p = n / 2;
  ASSERT_GE(n - p, 3);
  const std::vector<int32_t> head(f.first.begin(), f.first.begin() + p), tail(f.first.begin() + p, f.first.begin() + p + 3);
  auto cpu_cache = cpu->new_kv_cache(n), gpu_cache = gpu->new_kv_cache(n);
  cpu->forward_cached(head, cpu_cache);
  gpu->forward_cached(head, gpu_cache);
  expect_f32_close(name + " append 3", gpu->forward_cached(tail, gpu_cache, true), cpu->forward_cached(tail, cpu_cache, true));
}

// BF16 weights and activations on the GPU against the CPU running the same BF16 matrices with F32 activations, both
// fed the same tokens (the CPU's greedy choices).
TEST_P(CudaDecodeModel, Bf16LogitsCloseToCpu) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const std::string name = GetParam();
  const Fixture f = load_fixture(name);
  auto cpu = model::CausalLM::load(golden_dir(name));
  cpu->place(Device::cpu(), DType::BF16);
  auto gpu = model::CausalLM::load(golden_dir(name));
  gpu->place(Device::cuda(), DType::BF16);
  ASSERT_EQ(gpu->activation_dtype(), DType::BF16);
  expect_bf16_close(name + " packed forward", gpu->forward(f.ids, f.positions, f.cu_seqlens),
                    cpu->forward(f.ids, f.positions, f.cu_seqlens));
  const int64_t steps = 16;
  const Decoded want = decode(*cpu, f.first, steps);
  const Decoded got = decode(*gpu, f.first, steps, &want.ids);
  for (int64_t s = 0; s < steps; ++s) {
    expect_bf16_close(name + " step " + std::to_string(s), got.logits[static_cast<size_t>(s)],
                      want.logits[static_cast<size_t>(s)]);
  }
}

// --torch_dtype float16: F16 weights, activations and KV cache on the GPU against the CPU running the same F16
// matrices with F32 activations, fed the same tokens.
TEST_P(CudaDecodeModel, F16LogitsCloseToCpu) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const std::string name = GetParam();
  const Fixture f = load_fixture(name);
  auto cpu = model::CausalLM::load(golden_dir(name));
  cpu->place(Device::cpu(), DType::F16);
  ASSERT_EQ(cpu->activation_dtype(), DType::F32);
  auto gpu = model::CausalLM::load(golden_dir(name));
  gpu->place(Device::cuda(), DType::F16);
  ASSERT_EQ(gpu->activation_dtype(), DType::F16);
  auto cache = gpu->new_kv_cache(4);
  EXPECT_EQ(cache.k[0].dtype(), DType::F16);
  expect_f16_close(name + " packed forward", gpu->forward(f.ids, f.positions, f.cu_seqlens),
                   cpu->forward(f.ids, f.positions, f.cu_seqlens));
  const int64_t steps = 16;
  const Decoded want = decode(*cpu, f.first, steps);
  const Decoded got = decode(*gpu, f.first, steps, &want.ids);
  for (int64_t s = 0; s < steps; ++s) {
    expect_f16_close(name + " step " + std::to_string(s), got.logits[static_cast<size_t>(s)],
                     want.logits[static_cast<size_t>(s)]);
  }
}

// Sliding window, dynamic rope and yarn, q/k norm, biases, tied heads and GQA all pass through the device path.
INSTANTIATE_TEST_SUITE_P(Golden, CudaDecodeModel,
                         ::testing::Values("llama_gqa_llama3", "mistral_sliding_window", "qwen3_qknorm",
                                           "qwen2_tied_1kv", "llama_mha_tied_linear_bias", "llama_yarn",
                                           "llama_dynamic", "qwen2_bf16"));

// Adapters on a placed model: LoRA with modules_to_save copies and DoRA, set after place() or carried by place().
TEST(CudaDecodeAdapters, LoraAndDoraMatchCpu) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  const std::string name = "llama_gqa_llama3";
  const Fixture f = load_fixture(name);
  for (bool dora : {false, true}) {
    SCOPED_TRACE(dora ? "DoRA" : "LoRA + modules_to_save");
    auto cpu = model::CausalLM::load(golden_dir(name));
    model::LoraSettings s;
    s.rank = 4;
    s.alpha = 8;
    s.dropout = 0.1;  // inference applies no dropout
    s.init_weights = "false";  // random A and B: the adapters change the logits
    s.use_dora = dora;
    if (!dora) s.modules_to_save = {"embed_tokens", "lm_head"};
    const model::LoraAdapters adapters = model::create_lora(cpu->config(), s, &cpu->weights());
    cpu->set_lora(adapters);
    const Tensor want = cpu->forward(f.ids, f.positions, f.cu_seqlens);
    const Decoded want_steps = decode(*cpu, f.first, 6);
    for (bool set_before_place : {false, true}) {
      SCOPED_TRACE(set_before_place ? "set_lora, then place" : "place, then set_lora");
      for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
        SCOPED_TRACE(dtype_name(dtype));
        auto gpu = model::CausalLM::load(golden_dir(name));
        if (set_before_place) gpu->set_lora(adapters);
        gpu->place(Device::cuda(), dtype);
        if (!set_before_place) gpu->set_lora(adapters);
        EXPECT_TRUE(gpu->lora().layers[0][0].a.device().is_cuda());
        const Tensor got = gpu->forward(f.ids, f.positions, f.cu_seqlens);
        const Decoded got_steps = decode(*gpu, f.first, 6, &want_steps.ids);
        if (dtype == DType::F32) {
          expect_f32_close(name + " adapters forward", got, want);
          EXPECT_EQ(decode(*gpu, f.first, 6).ids, want_steps.ids);
        } else if (dtype == DType::BF16) {
          // The CPU reference keeps F32 matrices here: bf16 weight rounding adds to the activations' rounding.
          expect_bf16_close(name + " adapters forward", got, want);
        } else {
          expect_f16_close(name + " adapters forward", got, want);
        }
        for (size_t i = 0; i < got_steps.logits.size(); ++i) {
          const std::string what = name + " adapters step";
          if (dtype == DType::F32) expect_f32_close(what, got_steps.logits[i], want_steps.logits[i]);
          else if (dtype == DType::BF16) expect_bf16_close(what, got_steps.logits[i], want_steps.logits[i]);
          else expect_f16_close(what, got_steps.logits[i], want_steps.logits[i]);
        }
      }
    }
  }
}

TEST(CudaDecodeAdapters, CacheFromAnotherPlacementIsRefused) {
  ASSERT_TRUE(have_device()) << "no CUDA device visible (gpu tests need one)";
  auto m = model::CausalLM::load(golden_dir("qwen2_tied_1kv"));
  auto cache = m->new_kv_cache(8);
  m->place(Device::cuda(), DType::BF16);
  try {
    m->forward_cached({1, 2}, cache);
    ADD_FAILURE() << "a CPU cache was accepted by a CUDA model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("new_kv_cache after place()"), std::string::npos) << e.what();
  }
}

// Printed after every test ran (the parameterised suites run after the plain tests): the worst error per case.
class ModelErrorSummary : public ::testing::Environment {
 public:
  void TearDown() override {
    if (worst_model_errors().empty()) return;
    std::printf("%-44s %s\n", "model comparison (CudaDecode*)", "worst");
    for (const auto& [key, err] : worst_model_errors()) std::printf("%-44s %.3e\n", key.c_str(), err);
  }
};
[[maybe_unused]] ::testing::Environment* const kModelErrorSummary =
    ::testing::AddGlobalTestEnvironment(new ModelErrorSummary);

}  // namespace
}  // namespace swift::test
#endif  // SWIFT_WITH_CUDA
