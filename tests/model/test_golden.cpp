// tests/model/test_golden.cpp — golden exactness of CausalLM against Hugging Face transformers.
//
// Each directory tests/fixtures/golden/<case>/ holds a tiny random model saved by transformers'
// save_pretrained (config.json + model.safetensors) and expected.safetensors: a packed batch (input_ids,
// positions, cu_seqlens) and the logits transformers computed for each sequence run ALONE (fp32, CPU, eager
// attention). Made by scripts/golden/make_tiny_models.py; the cases and why each exists are listed there.
//
// For every case found:
//  - the packed forward of CausalLM::load(dir) matches transformers' logits (max abs and relative L2);
//  - each sequence run alone through the C++ model equals its rows of the packed run (tight tolerance:
//    the same code on the same rows, only the batch composition differs);
//  - a model whose weights are perturbed slightly is caught by the same comparison (the test can fail).
// A missing case directory fails (AllCasesPresent), so deleting fixtures cannot make the suite pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/golden_util.h"

namespace swift {
namespace {

namespace fs = std::filesystem;

// fp32 C++ on the CPU vs fp32 torch on the CPU. Both round at every op, in different summation orders
// (BLAS blocking, OpenMP splits, expf implementations); the generator measured transformers' own fp32 against
// fp64 of the same weights at <= 5e-6 max abs and <= 1e-6 relative L2 on these cases (metadata
// fp32_vs_fp64_*), with |logits| <= 5. The tolerances leave ~10-25x headroom over that noise and stay two
// orders of magnitude below the smallest real discrepancy the generator checks for (switching one feature
// off moves logits by > 0.2; the perturbation test below moves them by > 5e-2).
constexpr double kMaxAbsTol = 1e-4;
constexpr double kRelL2Tol = 1e-5;

// A sequence alone vs the same sequence inside the packed batch, both through the C++ model. Not bit-identical:
// the CPU linear (OpenBLAS sgemm) picks its kernel and blocking by row count, so the same row gives results
// differing by ~1e-6 relative between N = 1 and N = 43 (measured). That is fp32 reordering noise, the size of
// transformers' own fp32-vs-fp64 gap (<= 5e-6 here); observed packed-vs-alone <= 4e-6 max abs, <= 3e-7 rel L2.
// A packing bug (attention leaking across sequences, positions not restarting, dynamic rope computed from the
// batch instead of the sequence) moves logits by > 1e-2.
constexpr double kAloneMaxAbsTol = 2e-5;
constexpr double kAloneRelL2Tol = 2e-6;

// The perturbation: input_layernorm weight of layer 0, element 0, +0.05 (norm weights are ~U(0.5, 1.5)).
// It reaches every later position through attention; the comparison must then fail by a wide margin.
constexpr const char* kPerturbedWeight = "model.layers.0.input_layernorm.weight";
constexpr float kPerturbation = 0.05f;
constexpr double kPerturbedMinMaxAbs = 10 * kMaxAbsTol;

// Cases the generator writes; a missing one is a failure, not a skip.
const std::vector<std::string> kExpectedCases = {
    "llama_dynamic", "llama_gqa_llama3", "llama_mha_tied_linear_bias", "llama_yarn",
    "mistral_sliding_window", "qwen2_bf16", "qwen2_tied_1kv", "qwen3_qknorm",
};

std::string golden_root() { return std::string(SWIFT_FIXTURES_DIR) + "/golden"; }

std::vector<std::string> list_cases() {
  std::vector<std::string> cases;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(golden_root(), ec)) {
    if (entry.is_directory() && fs::exists(entry.path() / "expected.safetensors")) {
      cases.push_back(entry.path().filename().string());
    }
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

struct Expected {
  Tensor ids, positions, cu_seqlens, logits;  // (T) I32, (T) I32, (B+1) I32, (T, V) F32
  std::map<std::string, std::string> metadata;
};

Expected load_expected(const std::string& dir) {
  io::SafetensorsFile file = io::SafetensorsFile::open(dir + "/expected.safetensors");
  Expected e;
  e.ids = file.tensor("input_ids");
  e.positions = file.tensor("positions");
  e.cu_seqlens = file.tensor("cu_seqlens");
  e.logits = file.tensor("logits");
  e.metadata = file.metadata();
  SWIFT_CHECK(e.ids.dtype() == DType::I32 && e.positions.dtype() == DType::I32 && e.cu_seqlens.dtype() == DType::I32 &&
                  e.logits.dtype() == DType::F32 && e.logits.dim() == 2 && e.logits.size(0) == e.ids.numel(),
              "{}: expected.safetensors does not hold input_ids/positions/cu_seqlens I32 and logits F32 (T, V)", dir);
  return e;
}

std::vector<int32_t> sequence(const Expected& e, int64_t b) {
  const int32_t* cu = e.cu_seqlens.data<int32_t>();
  const int32_t* ids = e.ids.data<int32_t>();
  return std::vector<int32_t>(ids + cu[b], ids + cu[b + 1]);
}

std::string meta(const Expected& e, const std::string& key) {
  auto it = e.metadata.find(key);
  return it == e.metadata.end() ? "?" : it->second;
}

class GoldenCase : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return golden_root() + "/" + GetParam(); }
};

TEST_P(GoldenCase, PackedLogitsMatchTransformers) {
  const Expected e = load_expected(dir());
  auto model = model::CausalLM::load(dir());
  const Tensor logits = model->forward(e.ids, e.positions, e.cu_seqlens);
  ASSERT_EQ(logits.shape(), e.logits.shape()) << GetParam() << ": logits shape";
  ASSERT_EQ(logits.dtype(), DType::F32);
  const auto result = golden::close(GetParam() + " packed logits vs transformers", logits, e.logits, kMaxAbsTol,
                                    kRelL2Tol, e.cu_seqlens, "vocab id");
  std::cout << "[golden] " << result.message() << " (transformers fp32 vs fp64: max_abs "
            << meta(e, "fp32_vs_fp64_max_abs") << ", rel_l2 " << meta(e, "fp32_vs_fp64_rel_l2") << ")\n";
  EXPECT_TRUE(result) << "case: " << meta(e, "description");
}

TEST_P(GoldenCase, PackedEqualsSequencesAlone) {
  const Expected e = load_expected(dir());
  auto model = model::CausalLM::load(dir());
  const Tensor packed = model->forward(e.ids, e.positions, e.cu_seqlens);
  const int32_t* cu = e.cu_seqlens.data<int32_t>();
  const int64_t batch = e.cu_seqlens.numel() - 1;
  ASSERT_GE(batch, 2) << "a golden case packs at least two sequences";
  for (int64_t b = 0; b < batch; ++b) {
    const Tensor alone = model->forward(sequence(e, b));
    const Tensor rows = packed.slice_rows(cu[b], cu[b + 1]);
    const auto result = golden::close(GetParam() + " sequence " + std::to_string(b) + " alone vs packed", alone, rows,
                                      kAloneMaxAbsTol, kAloneRelL2Tol, Tensor(), "vocab id");
    std::cout << "[golden] " << result.message() << "\n";
    EXPECT_TRUE(result);
    // And alone against transformers directly (same tolerances as the packed comparison).
    EXPECT_TRUE(golden::close(GetParam() + " sequence " + std::to_string(b) + " alone vs transformers", alone,
                              e.logits.slice_rows(cu[b], cu[b + 1]), kMaxAbsTol, kRelL2Tol, Tensor(), "vocab id"));
  }
}

TEST_P(GoldenCase, PerturbedWeightIsDetected) {
  const Expected e = load_expected(dir());
  const io::ModelConfig config = io::load_model_config(dir() + "/config.json");
  io::SafetensorsFile file = io::SafetensorsFile::open(dir() + "/model.safetensors");
  std::map<std::string, Tensor> weights;
  for (const std::string& name : file.names()) weights[name] = file.tensor(name);
  ASSERT_TRUE(weights.count(kPerturbedWeight)) << GetParam() << ": no " << kPerturbedWeight;

  // Unperturbed through from_weights: must pass, so the perturbation below is the only difference.
  {
    auto model = model::CausalLM::from_weights(config, weights);
    EXPECT_TRUE(golden::close(GetParam() + " from_weights, unperturbed", model->forward(e.ids, e.positions, e.cu_seqlens),
                              e.logits, kMaxAbsTol, kRelL2Tol, e.cu_seqlens, "vocab id"));
  }
  Tensor changed = weights.at(kPerturbedWeight).to_dtype(DType::F32, MemoryCategory::Weights);
  changed.data<float>()[0] += kPerturbation;
  weights[kPerturbedWeight] = changed;
  auto model = model::CausalLM::from_weights(config, weights);
  const Tensor logits = model->forward(e.ids, e.positions, e.cu_seqlens);
  const golden::TensorDiff d = golden::compare(logits, e.logits);
  std::cout << "[golden] " << GetParam() << " perturbed " << kPerturbedWeight << "[0] += " << kPerturbation << ": "
            << golden::describe(d, e.cu_seqlens, "vocab id") << "\n";
  EXPECT_FALSE(d.within(kMaxAbsTol, kRelL2Tol)) << "a perturbed weight passed the golden comparison";
  EXPECT_GT(d.max_abs, kPerturbedMinMaxAbs) << "the perturbation barely moved the logits";
  EXPECT_TRUE(std::isfinite(d.max_abs));
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenCase, ::testing::ValuesIn(list_cases()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(GoldenCase);

TEST(GoldenFixtures, AllCasesPresent) {
  const std::vector<std::string> found = list_cases();
  for (const std::string& name : kExpectedCases) {
    EXPECT_TRUE(std::find(found.begin(), found.end(), name) != found.end())
        << "golden case '" << name << "' missing under " << golden_root()
        << "; regenerate with: python3 scripts/golden/make_tiny_models.py";
  }
  for (const std::string& name : found) {
    EXPECT_TRUE(fs::exists(golden_root() + "/" + name + "/config.json")) << name;
    EXPECT_TRUE(fs::exists(golden_root() + "/" + name + "/model.safetensors")) << name;
  }
}

TEST(GoldenFixtures, ComparisonHelperReportsTheWorstElement) {
  const Tensor expected = Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor actual = Tensor::from_f32({2, 3}, {1, 2, 3, 4, 5.5f, 6});
  const golden::TensorDiff d = golden::compare(actual, expected);
  EXPECT_DOUBLE_EQ(d.max_abs, 0.5);
  EXPECT_EQ(d.worst, 4);
  EXPECT_FALSE(d.within(1e-3, 1.0));
  EXPECT_NE(golden::describe(d, Tensor::from_i32({3}, {0, 1, 2})).find("row 1 (sequence 1, position 0), column 1"),
            std::string::npos)
      << golden::describe(d, Tensor::from_i32({3}, {0, 1, 2}));
  const Tensor with_nan = Tensor::from_f32({2, 3}, {1, 2, 3, 4, std::nanf(""), 6});
  EXPECT_FALSE(golden::compare(with_nan, expected).within(1e9, 1e9)) << "NaN must fail whatever the tolerance";
}

}  // namespace
}  // namespace swift
