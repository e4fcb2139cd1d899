// tests/model/test_real_gguf.cpp — the real SmolLM2-135M-Instruct Q4_1 GGUF (label slow).
//
// Invariants:
//  - The model comes from scripts/fetch-model.sh into SWIFT_MODELS_DIR; when it is missing every test FAILS
//    saying so (a silent skip would hide a broken setup).
//  - Expected values come from tests/fixtures/gguf/smollm2_weights.json, written by
//    scripts/golden/make_gguf_fixtures.py from Hugging Face transformers' own GGUF loader (dequantized with
//    gguf-py, Q/K un-permuted, float32). Sampled values and full vectors must match bit for bit; float64 sums
//    to 1e-9 relative (summation order differs).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "io/gguf.h"

namespace swift {
namespace {

const std::string kModelPath = std::string(SWIFT_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";

struct Loaded {
  io::GgufFile file;
  io::ModelConfig config;
  std::map<std::string, Tensor> weights;
  nlohmann::json fixture;
};

std::unique_ptr<Loaded> load() {
  auto s = std::make_unique<Loaded>();
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  s->file = io::GgufFile::open(kModelPath);
  const auto t1 = Clock::now();
  s->config = io::gguf_model_config(s->file);
  s->weights = io::gguf_load_weights(s->file, s->config);
  const auto t2 = Clock::now();
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::cout << "[ timing ] open + parse metadata: " << ms(t1 - t0) << " ms; config + load/dequantize "
            << s->weights.size() << " weights: " << ms(t2 - t1) << " ms\n";
  std::ifstream in(std::string(SWIFT_FIXTURES_DIR) + "/gguf/smollm2_weights.json");
  if (in.good()) s->fixture = nlohmann::json::parse(in);
  return s;
}

std::string& load_error() {
  static std::string error;
  return error;
}

// Loads the model once for all tests; null when it is missing or failed to load (see load_error()).
const Loaded* loaded() {
  static std::unique_ptr<Loaded> state;
  static bool tried = false;
  if (tried) return state.get();
  tried = true;
  if (!std::filesystem::exists(kModelPath)) {
    load_error() = "the real model " + kModelPath + " is missing: run scripts/fetch-model.sh (it downloads "
                   "SmolLM2-135M-Instruct Q4_1, 98 MB) and run the slow tests again";
    return nullptr;
  }
  try {
    state = load();
  } catch (const std::exception& e) {
    load_error() = std::string("loading ") + kModelPath + " failed: " + e.what();
  }
  return state.get();
}

#define REQUIRE_MODEL(var)            \
  const Loaded* var = loaded();       \
  ASSERT_NE(var, nullptr) << load_error()

TEST(GgufRealSmolLM2, Metadata) {
  REQUIRE_MODEL(m);
  const io::GgufFile& f = m->file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.all_metadata().size(), 33u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.metadata("tokenizer.ggml.tokens").size(), 49152u);
  EXPECT_EQ(f.metadata("tokenizer.ggml.merges").size(), 48900u);
  EXPECT_EQ(f.metadata("tokenizer.ggml.token_type").size(), 49152u);
  EXPECT_NE(f.get_string("tokenizer.chat_template").find("<|im_start|>"), std::string::npos);
  EXPECT_EQ(f.tensor_info("token_embd.weight").type, io::GgmlType::Q8_0);
  EXPECT_EQ(f.tensor_info("blk.0.attn_q.weight").type, io::GgmlType::Q4_1);
  EXPECT_EQ(f.tensor_info("blk.0.attn_norm.weight").type, io::GgmlType::F32);
}

TEST(GgufRealSmolLM2, Config) {
  REQUIRE_MODEL(m);
  const io::ModelConfig& c = m->config;
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope.type, ops::RopeType::Default);
  EXPECT_EQ(c.rope.theta, 100000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));
  // Against transformers' reading of the same file.
  ASSERT_FALSE(m->fixture.is_null()) << "missing tests/fixtures/gguf/smollm2_weights.json";
  const auto& hf = m->fixture.at("config");
  EXPECT_EQ(hf.at("model_type"), c.model_type);
  EXPECT_EQ(hf.at("num_hidden_layers"), c.num_hidden_layers);
  EXPECT_EQ(hf.at("hidden_size"), c.hidden_size);
  EXPECT_EQ(hf.at("intermediate_size"), c.intermediate_size);
  EXPECT_EQ(hf.at("num_attention_heads"), c.num_attention_heads);
  EXPECT_EQ(hf.at("num_key_value_heads"), c.num_key_value_heads);
  EXPECT_EQ(hf.at("vocab_size"), c.vocab_size);
  EXPECT_EQ(hf.at("max_position_embeddings"), c.max_position_embeddings);
  EXPECT_EQ(hf.at("tie_word_embeddings"), c.tie_word_embeddings);
  EXPECT_EQ(hf.at("rope_theta").get<double>(), c.rope.theta);
  EXPECT_EQ(static_cast<float>(hf.at("rms_norm_eps").get<double>()), static_cast<float>(c.rms_norm_eps));
  EXPECT_EQ(hf.at("bos_token_id"), c.bos_token_id);
  EXPECT_EQ(hf.at("eos_token_id"), c.eos_token_ids.at(0));
}

TEST(GgufRealSmolLM2, NamesAndShapes) {
  REQUIRE_MODEL(m);
  const auto& w = m->weights;
  std::map<std::string, Shape> expected = {{"model.embed_tokens.weight", {49152, 576}},
                                           {"model.norm.weight", {576}}};
  for (int l = 0; l < 30; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expected[p + "input_layernorm.weight"] = {576};
    expected[p + "post_attention_layernorm.weight"] = {576};
    expected[p + "self_attn.q_proj.weight"] = {576, 576};
    expected[p + "self_attn.k_proj.weight"] = {192, 576};
    expected[p + "self_attn.v_proj.weight"] = {192, 576};
    expected[p + "self_attn.o_proj.weight"] = {576, 576};
    expected[p + "mlp.gate_proj.weight"] = {1536, 576};
    expected[p + "mlp.up_proj.weight"] = {1536, 576};
    expected[p + "mlp.down_proj.weight"] = {576, 1536};
  }
  ASSERT_EQ(expected.size(), 272u);
  EXPECT_EQ(w.size(), 272u);
  for (const auto& [name, shape] : expected) {
    auto it = w.find(name);
    ASSERT_NE(it, w.end()) << "missing " << name;
    EXPECT_EQ(it->second.shape(), shape) << name;
    EXPECT_EQ(it->second.dtype(), DType::F32) << name;
  }
  EXPECT_EQ(w.count("lm_head.weight"), 0u);  // tied
  // F32 norms are zero-copy views of the mapping.
  const auto& norm = w.at("model.layers.0.input_layernorm.weight");
  EXPECT_EQ(norm.raw(), static_cast<const void*>(m->file.data(m->file.tensor_info("blk.0.attn_norm.weight"))));
}

TEST(GgufRealSmolLM2, ValuesMatchTransformers) {
  REQUIRE_MODEL(m);
  ASSERT_FALSE(m->fixture.is_null()) << "missing tests/fixtures/gguf/smollm2_weights.json";
  int checked = 0;
  for (const auto& [name, want] : m->fixture.at("tensors").items()) {
    SCOPED_TRACE(name);
    auto it = m->weights.find(name);
    ASSERT_NE(it, m->weights.end());
    const Tensor& t = it->second;
    Shape shape = want.at("shape").get<Shape>();
    ASSERT_EQ(t.shape(), shape);
    const float* data = t.data<float>();
    const int64_t cols = shape.size() == 2 ? shape[1] : 1;
    double sum = 0, sumsq = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      sum += data[i];
      sumsq += static_cast<double>(data[i]) * data[i];
    }
    const double want_sum = want.at("sum"), want_sumsq = want.at("sumsq");
    EXPECT_NEAR(sum, want_sum, 1e-9 * (std::sqrt(want_sumsq) * std::sqrt(static_cast<double>(t.numel())) + 1));
    EXPECT_NEAR(sumsq, want_sumsq, 1e-9 * want_sumsq);
    if (want.contains("values")) {
      const auto& values = want.at("values");
      ASSERT_EQ(values.size(), static_cast<size_t>(t.numel()));
      for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(data[i], static_cast<float>(values[i].get<double>())) << i;
    }
    if (want.contains("samples")) {
      for (const auto& s : want.at("samples")) {
        const int64_t r = s[0], c = s[1];
        EXPECT_EQ(data[r * cols + c], static_cast<float>(s[2].get<double>())) << "at (" << r << ", " << c << ")";
      }
    }
    if (want.contains("row_sums")) {  // catches any row permutation error in q_proj / k_proj
      const auto& rows = want.at("row_sums");
      ASSERT_EQ(rows.size(), static_cast<size_t>(shape[0]));
      for (int64_t r = 0; r < shape[0]; ++r) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) s += data[r * cols + c];
        const double w = rows[static_cast<size_t>(r)];
        ASSERT_NEAR(s, w, 1e-9 * (std::abs(w) + 1)) << "row " << r;
      }
    }
    ++checked;
  }
  EXPECT_EQ(checked, 20);
}

}  // namespace
}  // namespace swift
