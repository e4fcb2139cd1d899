// tests/model/test_real_smollm2.cpp — the real model SmolLM2-135M-Instruct (Q4_1 GGUF) against Hugging Face
// transformers (label slow).
//
// transformers loaded the same GGUF (dequantized to fp32, Q/K permutation undone) and ran two sequences, each
// alone, in fp32 on the CPU: a ChatML prompt and a plain-text prefix. tests/fixtures/smollm2/reference.safetensors
// (made by scripts/golden/make_smollm2_reference.py) holds their token ids (from transformers' tokenizer built
// from the GGUF), the full logits at each sequence's last position, the top-20 ids and logits at every
// position, and the logits of every 61st vocabulary id at every position.
//
// Here CausalLM::load(gguf) runs the two sequences packed, and:
//  - the last-position logits, the subset logits and the logits at HF's top-20 ids match (fp32 tolerances);
//  - the argmax next token at the last position equals HF's (and at every position where HF's top-2 gap is
//    clearly larger than the tolerance);
//  - each sequence run alone equals its rows of the packed run.
// A missing model FAILS (with the command to fetch it); it is never skipped silently.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/golden_util.h"

namespace swift {
namespace {

namespace fs = std::filesystem;

// fp32 C++ vs fp32 torch through 30 layers (hidden 576, 9/3 heads, vocab 49152). The generator measured
// transformers' fp32 against fp64 of the same dequantized weights: max abs 6.0e-5 (3.1e-5 at the last
// positions), rel L2 1.8e-6, with |logits| up to ~35 (metadata fp32_vs_fp64_*). Two independent fp32 runs
// differ by about twice their own noise; the tolerances leave ~8-10x headroom over that. A real bug (a wrong
// rope theta, a missing un-permutation, a dequantization slip in one block) moves logits by 1e-1 or more.
constexpr double kMaxAbsTol = 1e-3;
constexpr double kRelL2Tol = 2e-5;
// Rows of the packed run vs each sequence alone: same code, same rows; only BLAS blocking may differ, which reorders
// fp32 sums: up to about twice one fp32 run's own error (rel L2 1.8e-6 against fp64, above). Measured 2.14e-6 for a
// 5-token sequence on an AMD EPYC build (2026-11-30; 0 on others), so the bound is 5e-6, far below a real bug's 1e-1.
constexpr double kAloneMaxAbsTol = 1e-4;
constexpr double kAloneRelL2Tol = 5e-6;
// Where HF's best and second-best logits are closer than this, the argmax may legitimately flip.
constexpr double kArgmaxMargin = 4 * kMaxAbsTol;

const char* kModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

std::string model_path() { return std::string(SWIFT_MODELS_DIR) + "/" + kModelFile; }
std::string reference_path() { return std::string(SWIFT_FIXTURES_DIR) + "/smollm2/reference.safetensors"; }

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux: KiB
}

// Loads the model and runs the packed batch once for all tests of the suite.
class RealSmolLM2 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!fs::exists(model_path())) return;  // each test fails with the fetch command
    ref_ = std::make_unique<io::SafetensorsFile>(io::SafetensorsFile::open(reference_path()));
    ids_ = ref_->tensor("input_ids");
    positions_ = ref_->tensor("positions");
    cu_seqlens_ = ref_->tensor("cu_seqlens");
    const auto t0 = std::chrono::steady_clock::now();
    model_ = model::CausalLM::load(model_path());
    const auto t1 = std::chrono::steady_clock::now();
    logits_ = model_->forward(ids_, positions_, cu_seqlens_);
    const auto t2 = std::chrono::steady_clock::now();
    const auto& md = ref_->metadata();
    auto get = [&](const char* key) { return md.count(key) ? md.at(key) : std::string("?"); };
    std::cout << "[smollm2] C++: load " << std::chrono::duration<double>(t1 - t0).count() << " s, forward of "
              << ids_.numel() << " tokens " << std::chrono::duration<double>(t2 - t1).count() << " s, peak RSS "
              << peak_rss_mib() << " MiB (reference only)\n"
              << "[smollm2] HF (" << get("transformers_version") << ", " << get("hf_threads")
              << " threads): load " << get("hf_load_seconds") << " s, forward " << get("hf_forward_seconds")
              << " s, peak RSS " << get("hf_peak_rss_mib") << " MiB\n";
  }
  static void TearDownTestSuite() {
    model_.reset();
    ref_.reset();
    ids_ = positions_ = cu_seqlens_ = logits_ = Tensor();
  }
  void SetUp() override {
    ASSERT_TRUE(fs::exists(model_path())) << model_path() << " is missing: run scripts/fetch-model.sh "
                                          << "(it downloads SmolLM2-135M-Instruct.Q4_1.gguf into models/)";
    ASSERT_TRUE(model_ && logits_.defined()) << "loading or running the model failed in SetUpTestSuite";
  }

  int64_t batch() const { return cu_seqlens_.numel() - 1; }
  int32_t cu(int64_t b) const { return cu_seqlens_.data<int32_t>()[b]; }
  int64_t vocab() const { return logits_.size(1); }

  static std::unique_ptr<io::SafetensorsFile> ref_;
  static std::unique_ptr<model::CausalLM> model_;
  static Tensor ids_, positions_, cu_seqlens_, logits_;
};

std::unique_ptr<io::SafetensorsFile> RealSmolLM2::ref_;
std::unique_ptr<model::CausalLM> RealSmolLM2::model_;
Tensor RealSmolLM2::ids_, RealSmolLM2::positions_, RealSmolLM2::cu_seqlens_, RealSmolLM2::logits_;

TEST_F(RealSmolLM2, ConfigMatchesTheModel) {
  const io::ModelConfig& c = model_->config();
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_DOUBLE_EQ(c.rope.theta, 100000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  ASSERT_EQ(logits_.shape(), (Shape{ids_.numel(), 49152}));
}

TEST_F(RealSmolLM2, LastPositionLogitsMatchTransformers) {
  const Tensor expected = ref_->tensor("last_logits");  // (B, V)
  ASSERT_EQ(expected.size(0), batch());
  for (int64_t b = 0; b < batch(); ++b) {
    const Tensor row = logits_.slice_rows(cu(b + 1) - 1, cu(b + 1));
    const auto result = golden::close("sequence " + std::to_string(b) + " last-position logits", row,
                                      expected.slice_rows(b, b + 1), kMaxAbsTol, kRelL2Tol, Tensor(), "vocab id");
    std::cout << "[smollm2] " << result.message() << "\n";
    EXPECT_TRUE(result);
  }
}

TEST_F(RealSmolLM2, SubsetLogitsMatchAtEveryPosition) {
  const Tensor subset_ids = ref_->tensor("subset_ids");       // (S)
  const Tensor expected = ref_->tensor("subset_logits");      // (T, S)
  const int64_t T = ids_.numel(), S = subset_ids.numel();
  ASSERT_EQ(expected.shape(), (Shape{T, S}));
  Tensor gathered = Tensor::empty({T, S}, DType::F32);
  const float* src = logits_.data<float>();
  const int32_t* sid = subset_ids.data<int32_t>();
  float* dst = gathered.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t s = 0; s < S; ++s) dst[t * S + s] = src[t * vocab() + sid[s]];
  }
  const auto result = golden::close("subset logits (every 61st id) at every position", gathered, expected, kMaxAbsTol,
                                    kRelL2Tol, cu_seqlens_, "subset column");
  std::cout << "[smollm2] " << result.message() << "\n";
  EXPECT_TRUE(result);
}

TEST_F(RealSmolLM2, TopKLogitsAndArgmaxMatchAtEveryPosition) {
  const Tensor top_ids = ref_->tensor("topk_ids");        // (T, K)
  const Tensor top_values = ref_->tensor("topk_values");  // (T, K)
  const int64_t T = ids_.numel(), K = top_ids.size(1);
  ASSERT_EQ(top_ids.shape(), (Shape{T, K}));
  Tensor gathered = Tensor::empty({T, K}, DType::F32);
  const float* src = logits_.data<float>();
  const int32_t* tid = top_ids.data<int32_t>();
  const float* tval = top_values.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) gathered.data<float>()[t * K + k] = src[t * vocab() + tid[t * K + k]];
  }
  const auto result = golden::close("logits at HF's top-20 ids, every position", gathered, top_values, kMaxAbsTol,
                                    kRelL2Tol, cu_seqlens_, "rank");
  std::cout << "[smollm2] " << result.message() << "\n";
  EXPECT_TRUE(result);

  int64_t checked = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* row = src + t * vocab();
    const int64_t argmax = std::max_element(row, row + vocab()) - row;
    if (tval[t * K] - tval[t * K + 1] < kArgmaxMargin) continue;  // a near tie: either answer is right
    ++checked;
    EXPECT_EQ(argmax, tid[t * K]) << "position " << t << ": C++ argmax " << argmax << " (" << row[argmax]
                                  << ") vs HF " << tid[t * K] << " (" << tval[t * K] << ")";
  }
  EXPECT_EQ(checked, T) << "some positions were near ties; the fixture's prompts should avoid them";
}

TEST_F(RealSmolLM2, ArgmaxNextTokenEqualsTransformers) {
  const Tensor top_ids = ref_->tensor("topk_ids");
  const int64_t K = top_ids.size(1);
  for (int64_t b = 0; b < batch(); ++b) {
    const int64_t last = cu(b + 1) - 1;
    const float* row = logits_.data<float>() + last * vocab();
    const int64_t argmax = std::max_element(row, row + vocab()) - row;
    EXPECT_EQ(argmax, top_ids.data<int32_t>()[last * K])
        << "sequence " << b << ": next token differs from transformers' (metadata argmax_last_text "
        << ref_->metadata().at("argmax_last_text") << ")";
  }
}

TEST_F(RealSmolLM2, PackedEqualsSequencesAlone) {
  for (int64_t b = 0; b < batch(); ++b) {
    const int32_t* ids = ids_.data<int32_t>();
    const Tensor alone = model_->forward(std::vector<int32_t>(ids + cu(b), ids + cu(b + 1)));
    const auto result = golden::close("sequence " + std::to_string(b) + " alone vs packed", alone,
                                      logits_.slice_rows(cu(b), cu(b + 1)), kAloneMaxAbsTol, kAloneRelL2Tol, Tensor(),
                                      "vocab id");
    std::cout << "[smollm2] " << result.message() << "\n";
    EXPECT_TRUE(result);
  }
}

}  // namespace
}  // namespace swift
