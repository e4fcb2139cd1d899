// tests/model/test_golden_lora.cpp — inference with a PEFT LoRA adapter: swift.cpp loads the adapter that PEFT
// saved (tests/fixtures/golden_lora/<case>/adapter, random A and B so it changes the logits by ~5) and must give
// the logits PEFT computed (scripts/golden/make_lora_forward_fixtures.py). Also: the adapter round-trips
// through our PEFT writer unchanged, and removing it gives the base model's golden logits back. Creation of LoRA,
// DoRA (magnitude = weight norm) and modules_to_save copies, and the errors for adapters that do not fit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "model/golden_util.h"

namespace swift {
namespace {

// Same reasoning as the base golden tests: fp32 CPU vs fp32 torch differ by rounding only (~5e-6 here); the
// LoRA path adds two small products per layer.
constexpr double kMaxAbsTol = 1e-4;
constexpr double kRelL2Tol = 1e-5;

std::string lora_root() { return std::string(SWIFT_FIXTURES_DIR) + "/golden_lora"; }
std::string base_dir(const std::string& name) { return std::string(SWIFT_FIXTURES_DIR) + "/golden/" + name; }

struct Expected {
  Tensor ids, positions, cu_seqlens, logits;
};
Expected load_expected(const std::string& path) {
  io::SafetensorsFile f = io::SafetensorsFile::open(path);
  return {f.tensor("input_ids"), f.tensor("positions"), f.tensor("cu_seqlens"), f.tensor("logits")};
}

class GoldenLora : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenLora, PeftAdapterLogitsMatch) {
  const std::string name = GetParam();
  auto model = model::CausalLM::load(base_dir(name));
  const io::PeftAdapter adapter = io::load_peft_adapter(lora_root() + "/" + name + "/adapter");
  model->set_lora(model::lora_from_peft(adapter, model->config()));
  EXPECT_GT(model->lora().adapted_linears(), 0);
  const Expected e = load_expected(lora_root() + "/" + name + "/expected.safetensors");
  const Tensor logits = model->forward(e.ids, e.positions, e.cu_seqlens);
  EXPECT_TRUE(golden::close(name + " logits with PEFT adapter", logits, e.logits, kMaxAbsTol, kRelL2Tol,
                            e.cu_seqlens, "vocab id"));

  // Without the adapter the model is the base model again, and no longer matches the adapter's logits.
  model->set_lora({});
  const Tensor base = model->forward(e.ids, e.positions, e.cu_seqlens);
  EXPECT_FALSE(golden::compare(base, e.logits).within(kMaxAbsTol, kRelL2Tol));
}

TEST_P(GoldenLora, AdapterRoundTripsThroughOurWriter) {
  const std::string name = GetParam();
  auto model = model::CausalLM::load(base_dir(name));
  const io::PeftAdapter adapter = io::load_peft_adapter(lora_root() + "/" + name + "/adapter");
  const model::LoraAdapters lora = model::lora_from_peft(adapter, model->config());
  const std::string out = testing::TempDir() + "/swift_lora_roundtrip_" + name;
  io::save_peft_adapter(out, model::lora_to_peft(lora, "base"));
  const io::PeftAdapter again = io::load_peft_adapter(out);
  ASSERT_EQ(again.tensors.size(), adapter.tensors.size());
  for (const auto& [key, t] : adapter.tensors) {
    ASSERT_TRUE(again.tensors.count(key)) << key;
    const Tensor& u = again.tensors.at(key);
    ASSERT_EQ(u.shape(), t.shape()) << key;
    ASSERT_EQ(std::memcmp(u.raw(), t.raw(), t.nbytes()), 0) << key << " differs after the round trip";
  }
  EXPECT_EQ(again.config.r, adapter.config.r);
  EXPECT_EQ(again.config.use_rslora, adapter.config.use_rslora);
  EXPECT_DOUBLE_EQ(again.config.scaling(), adapter.config.scaling());
  std::filesystem::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Peft, GoldenLora, ::testing::Values("llama_gqa_llama3", "qwen2_tied_1kv"));

TEST(GoldenLoraErrors, AdapterForAnotherModelIsRefusedByName) {
  auto model = model::CausalLM::load(base_dir("qwen3_qknorm"));
  const io::PeftAdapter adapter = io::load_peft_adapter(lora_root() + "/llama_gqa_llama3/adapter");
  try {
    model::lora_from_peft(adapter, model->config());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("do not fit the base weight"), std::string::npos) << e.what();
  }
  EXPECT_THROW(io::load_peft_adapter(base_dir("qwen3_qknorm")), Error);  // not an adapter directory
}

TEST(Lora, CreateSelectsTargetsAndInitialisesLikePeft) {
  auto model = model::CausalLM::load(base_dir("llama_gqa_llama3"));
  model::LoraSettings s;
  s.rank = 4;
  model::LoraAdapters all = model::create_lora(model->config(), s);
  EXPECT_EQ(all.adapted_linears(), 7 * model->config().num_hidden_layers);
  EXPECT_FLOAT_EQ(all.scale, 32.0f / 4);
  const model::LoraLinear& q = all.layers[0][0];
  const double bound = 1.0 / std::sqrt(static_cast<double>(model->config().hidden_size));
  for (int64_t i = 0; i < q.a.numel(); ++i) ASSERT_LE(std::abs(q.a.item(i)), bound);
  for (int64_t i = 0; i < q.b.numel(); ++i) ASSERT_EQ(q.b.item(i), 0.0);  // B = 0: the model is unchanged
  s.target_modules = {"q_proj", "v_proj"};
  s.use_rslora = true;
  model::LoraAdapters some = model::create_lora(model->config(), s);
  EXPECT_EQ(some.adapted_linears(), 2 * model->config().num_hidden_layers);
  EXPECT_FLOAT_EQ(some.scale, 32.0f / 2);
  s.target_modules = {"qq_proj"};
  EXPECT_THROW(model::create_lora(model->config(), s), Error);
  s.target_modules = {};
  s.target_regex = R"(model\.layers\.0\.mlp\..*)";
  EXPECT_EQ(model::create_lora(model->config(), s).adapted_linears(), 3);
}

// DoRA: the magnitude starts at the row norms of W + scale * B A (B = 0: of W), so the model is unchanged; with
// init_weights false (random B) the norm includes B A. modules_to_save: F32 copies of the base tables.
::testing::AssertionResult throws_containing(const std::function<void()>& fn, const std::string& part) {
  try {
    fn();
  } catch (const Error& e) {
    if (std::string(e.what()).find(part) != std::string::npos) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "message '" << e.what() << "' lacks '" << part << "'";
  }
  return ::testing::AssertionFailure() << "no error (expected one containing '" << part << "')";
}

TEST(Lora, CreateDoraAndModulesToSaveLikePeft) {
  auto model = model::CausalLM::load(base_dir("llama_gqa_llama3"));
  const io::ModelConfig& c = model->config();
  model::LoraSettings s;
  s.rank = 4;
  s.use_dora = true;
  EXPECT_TRUE(throws_containing([&] { model::create_lora(c, s); }, "need the base model's weights"));
  for (const char* init : {"true", "false"}) {
    s.init_weights = init;
    const model::LoraAdapters dora = model::create_lora(c, s, &model->weights());
    EXPECT_TRUE(dora.config.use_dora);
    const model::LoraLinear& down = dora.layers[1][static_cast<int>(model::LinearKind::Down)];
    ASSERT_TRUE(down.dora());
    const Tensor& w = model->weights().layers[1].down_proj;
    for (int64_t j = 0; j < w.size(0); ++j) {
      double ss = 0;
      for (int64_t k = 0; k < w.size(1); ++k) {
        double ba = 0;
        for (int64_t q = 0; q < s.rank; ++q) ba += down.b.item(j * s.rank + q) * down.a.item(q * w.size(1) + k);
        const double v = w.item(j * w.size(1) + k) + dora.scale * ba;
        ss += v * v;
      }
      ASSERT_NEAR(down.magnitude.item(j), std::sqrt(ss), 1e-5 * std::sqrt(ss)) << init << " row " << j;
    }
    model::LoraSettings plain = s;
    plain.use_dora = false;
    int64_t magnitudes = 0;  // one per output row of every adapted linear
    for (int k = 0; k < model::kLinearKinds; ++k) {
      magnitudes += model::linear_shape(c, static_cast<model::LinearKind>(k))[0] * c.num_hidden_layers;
    }
    EXPECT_EQ(dora.parameter_count(), model::create_lora(c, plain).parameter_count() + magnitudes);
    // Saved under PEFT's names; loading it back needs use_dora in the config.
    io::PeftAdapter saved = model::lora_to_peft(dora, "base");
    EXPECT_TRUE(saved.tensors.count("base_model.model.model.layers.1.mlp.down_proj.lora_magnitude_vector"));
    model::LoraAdapters back = model::lora_from_peft(saved, c);
    EXPECT_TRUE(back.layers[1][static_cast<int>(model::LinearKind::Down)].dora());
    saved.config.use_dora = false;
    EXPECT_TRUE(throws_containing([&] { model::lora_from_peft(saved, c); }, "use_dora is false"));
    saved.config.use_dora = true;
    saved.tensors.erase("base_model.model.model.layers.1.mlp.down_proj.lora_magnitude_vector");
    EXPECT_TRUE(throws_containing([&] { model::lora_from_peft(saved, c); }, "no lora_magnitude_vector"));
  }
  s.use_dora = false;
  s.init_weights = "true";
  s.modules_to_save = {"embed_tokens", "lm_head"};
  const model::LoraAdapters mts = model::create_lora(c, s, &model->weights());
  ASSERT_TRUE(mts.embed_tokens.defined() && mts.lm_head.defined());
  EXPECT_EQ(mts.embed_tokens.dtype(), DType::F32);
  for (int64_t i = 0; i < mts.lm_head.numel(); i += 7) ASSERT_EQ(mts.lm_head.item(i), model->weights().lm_head.item(i));
  const io::PeftAdapter saved = model::lora_to_peft(mts, "base");
  EXPECT_TRUE(saved.tensors.count("base_model.model.model.embed_tokens.weight"));
  EXPECT_TRUE(saved.tensors.count("base_model.model.lm_head.weight"));
  EXPECT_EQ(saved.config.modules_to_save, (std::vector<std::string>{"embed_tokens", "lm_head"}));
  s.modules_to_save = {"norm"};
  EXPECT_TRUE(throws_containing([&] { model::create_lora(c, s, &model->weights()); },
                                        "--modules_to_save 'norm' is not supported"));
  io::PeftAdapter listed = saved;
  listed.tensors.erase("base_model.model.lm_head.weight");
  EXPECT_TRUE(throws_containing([&] { model::lora_from_peft(listed, c); },
                                        "modules_to_save lists 'lm_head' but the weights hold no"));
}

}  // namespace
}  // namespace swift
