// tests/io/test_model_config.cpp — config.json parsing for llama, qwen2, qwen3 and mistral against real configs
// (tests/fixtures/configs, see the README there) and transformers' semantics: defaults, biases, sliding windows,
// rope in both the 4.x and 5.x forms, and the errors for unknown model types and missing fields.
//
// Invariants: the expected parameter counts were computed by transformers 5.24 on the meta device
// (sum of model.parameters(), tied head counted once); they are not derived from our own formula.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/model_config.h"

namespace swift::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "'" << (needle) << "' not in: " << (haystack)

std::string fixture(const std::string& name) { return std::string(SWIFT_FIXTURES_DIR) + "/configs/" + name; }

json fixture_json(const std::string& name) {
  std::ifstream in(fixture(name));
  return json::parse(in);
}

std::string parse_error(const json& j, const std::string& source = "test/config.json") {
  try {
    parse_model_config(j, source);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "parsing " << j.dump() << " did not throw";
  return "";
}

// A tiny config of the given type; tests patch fields into it.
json tiny(const std::string& type) {
  return json{{"model_type", type},     {"vocab_size", 100},          {"hidden_size", 64},
              {"intermediate_size", 96}, {"num_hidden_layers", 4},     {"num_attention_heads", 4},
              {"num_key_value_heads", 2}};
}

void expect_same_rope(const ops::RopeConfig& a, const ops::RopeConfig& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.theta, b.theta);
  EXPECT_EQ(a.factor, b.factor);
  EXPECT_EQ(a.original_max_position_embeddings, b.original_max_position_embeddings);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.low_freq_factor, b.low_freq_factor);
  EXPECT_EQ(a.high_freq_factor, b.high_freq_factor);
  EXPECT_EQ(a.beta_fast, b.beta_fast);
  EXPECT_EQ(a.beta_slow, b.beta_slow);
  EXPECT_EQ(a.attention_factor, b.attention_factor);
  EXPECT_EQ(a.mscale, b.mscale);
  EXPECT_EQ(a.mscale_all_dim, b.mscale_all_dim);
  EXPECT_EQ(a.truncate, b.truncate);
}

// Every field but layer_types, which 5.x writes out explicitly (compare layer_window instead).
void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  expect_same_rope(a.rope, b.rope);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.attention_output_bias, b.attention_output_bias);
  EXPECT_EQ(a.mlp_bias, b.mlp_bias);
  EXPECT_EQ(a.qk_norm, b.qk_norm);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.max_window_layers, b.max_window_layers);
  EXPECT_EQ(a.hidden_act, b.hidden_act);
  EXPECT_EQ(a.torch_dtype, b.torch_dtype);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  ASSERT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  for (int64_t l = 0; l < a.num_hidden_layers; ++l) EXPECT_EQ(a.layer_window(l), b.layer_window(l)) << l;
  EXPECT_EQ(a.parameter_count(), b.parameter_count());
}

std::vector<int64_t> windows(const ModelConfig& c) {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) out.push_back(c.layer_window(l));
  return out;
}

// ---- real configs -----------------------------------------------------------------------------------------
TEST(ModelConfig, SmolLM2_135M_Instruct) {
  ModelConfig c = load_model_config(fixture("smollm2-135m-instruct.json"));
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.num_hidden_layers, 30);
  EXPECT_EQ(c.num_attention_heads, 9);
  EXPECT_EQ(c.num_key_value_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.rope.type, ops::RopeType::Default);
  EXPECT_EQ(c.rope.theta, 100000.0);
  EXPECT_EQ(c.rope.max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.attention_output_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(c.layer_types.empty());
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c.parameter_count(), 134'515'008);
  for (int64_t l = 0; l < 30; ++l) EXPECT_EQ(c.layer_window(l), 0);
  EXPECT_CONTAINS(c.summary(), "llama");
  EXPECT_CONTAINS(c.summary(), "30 layers");
  EXPECT_CONTAINS(c.summary(), "134.5M");
  EXPECT_CONTAINS(c.summary(), "tied");
}

TEST(ModelConfig, Llama31_8B_Llama3RopeAndEosList) {
  ModelConfig c = load_model_config(fixture("llama3.1-8b-instruct.json"));
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rope.type, ops::RopeType::Llama3);
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rope.max_position_embeddings, 131072);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.attention_output_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.parameter_count(), 8'030'261'248);
  EXPECT_CONTAINS(c.summary(), "llama3");
  EXPECT_CONTAINS(c.summary(), "8.03B");
}

TEST(ModelConfig, Llama31_Transformers5FormIsIdentical) {
  // Written by transformers 5.24 save_pretrained: "rope_parameters" and "dtype" instead of
  // "rope_scaling" + "rope_theta" and "torch_dtype".
  json v5 = fixture_json("llama3.1-8b-instruct.v5.json");
  ASSERT_TRUE(v5.contains("rope_parameters"));
  ASSERT_FALSE(v5.contains("rope_scaling"));
  ASSERT_FALSE(v5.contains("torch_dtype"));
  expect_same(load_model_config(fixture("llama3.1-8b-instruct.json")),
              load_model_config(fixture("llama3.1-8b-instruct.v5.json")));
}

TEST(ModelConfig, Qwen25_7B) {
  ModelConfig c = load_model_config(fixture("qwen2.5-7b.json"));
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.vocab_size, 152064);
  EXPECT_EQ(c.hidden_size, 3584);
  EXPECT_EQ(c.intermediate_size, 18944);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 28);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rope.type, ops::RopeType::Default);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);  // qwen2: q, k, v always carry a bias ...
  EXPECT_FALSE(c.attention_output_bias);  // ... o_proj never
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);  // "sliding_window": 131072 but use_sliding_window false
  EXPECT_EQ(c.max_window_layers, 28);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151643});
  EXPECT_EQ(c.parameter_count(), 7'615'616'512);
  EXPECT_CONTAINS(c.summary(), "7.62B");
  EXPECT_CONTAINS(c.summary(), "theta 1000000");
}

TEST(ModelConfig, Qwen3_0_6B_ExplicitHeadDim) {
  ModelConfig c = load_model_config(fixture("qwen3-0.6b.json"));
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 1024);
  EXPECT_EQ(c.intermediate_size, 3072);
  EXPECT_EQ(c.num_hidden_layers, 28);
  EXPECT_EQ(c.num_attention_heads, 16);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);  // not hidden / heads = 64
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.rope.type, ops::RopeType::Default);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.attention_output_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{151645});
  EXPECT_EQ(c.parameter_count(), 596'049'920);
}

TEST(ModelConfig, Qwen3_Transformers5FormIsIdentical) {
  ModelConfig v4 = load_model_config(fixture("qwen3-0.6b.json"));
  ModelConfig v5 = load_model_config(fixture("qwen3-0.6b.v5.json"));
  expect_same(v4, v5);
  EXPECT_TRUE(v4.layer_types.empty());
  EXPECT_EQ(v5.layer_types, std::vector<std::string>(28, "full_attention"));
}

TEST(ModelConfig, Mistral7B_v01_SlidingWindowEverywhere) {
  ModelConfig c = load_model_config(fixture("mistral-7b-v0.1.json"));
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.rope.type, ops::RopeType::Default);
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.attention_output_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(windows(c), std::vector<int64_t>(32, 4096));
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c.parameter_count(), 7'241'732'096);
  EXPECT_CONTAINS(c.summary(), "sliding window 4096 on 32/32 layers");
}

TEST(ModelConfig, Mistral7B_v03_SlidingWindowNull) {
  ModelConfig c = load_model_config(fixture("mistral-7b-instruct-v0.3.json"));
  EXPECT_EQ(c.vocab_size, 32768);
  EXPECT_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(windows(c), std::vector<int64_t>(32, 0));
  EXPECT_EQ(c.parameter_count(), 7'248'023'552);
}

// ---- defaults and architecture flags (expected counts from transformers on the meta device) ----------------
TEST(ModelConfig, LlamaBiasesCoverOutputAndMlp) {
  json j = tiny("llama");
  j["num_hidden_layers"] = 2;
  j["attention_bias"] = true;
  j["mlp_bias"] = true;
  ModelConfig c = parse_model_config(j, "tiny");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.attention_output_bias);
  EXPECT_TRUE(c.mlp_bias);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.parameter_count(), 75456);
  // transformers' LlamaConfig defaults
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c.torch_dtype, "float32");
}

TEST(ModelConfig, Qwen2TiedAndIgnoresAttentionBiasKey) {
  json j = tiny("qwen2");
  j["num_hidden_layers"] = 2;
  j["tie_word_embeddings"] = true;
  j["attention_bias"] = false;  // Qwen2Attention hard-codes bias=True on q, k, v
  ModelConfig c = parse_model_config(j, "tiny");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.attention_output_bias);
  EXPECT_EQ(c.parameter_count(), 68416);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(ModelConfig, Qwen3BiasAndHeadDim) {
  json j = tiny("qwen3");
  j["num_hidden_layers"] = 2;
  j["attention_bias"] = true;
  j["head_dim"] = 32;
  ModelConfig c = parse_model_config(j, "tiny");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.attention_output_bias);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.parameter_count(), 99904);
  j.erase("head_dim");
  EXPECT_EQ(parse_model_config(j, "tiny").head_dim, 128);  // Qwen3Config's default, not hidden / heads
}

TEST(ModelConfig, MistralNullHeadDimAndDefaults) {
  json j = tiny("mistral");
  j["num_hidden_layers"] = 2;
  j["head_dim"] = nullptr;
  ModelConfig c = parse_model_config(j, "tiny");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.parameter_count(), 74560);
  EXPECT_EQ(c.sliding_window, 4096);  // MistralConfig's default when the key is absent
  EXPECT_EQ(c.max_position_embeddings, 131072);
  j["head_dim"] = 0;
  EXPECT_EQ(parse_model_config(j, "tiny").head_dim, 16);
}

TEST(ModelConfig, KeyValueHeadDefaultsFollowTransformers) {
  json j = tiny("llama");
  j.erase("num_key_value_heads");
  EXPECT_EQ(parse_model_config(j, "tiny").num_key_value_heads, 4);
  j["num_key_value_heads"] = nullptr;
  EXPECT_EQ(parse_model_config(j, "tiny").num_key_value_heads, 4);
  json q = tiny("qwen2");
  q["num_attention_heads"] = 64;
  q["hidden_size"] = 1024;
  q.erase("num_key_value_heads");
  EXPECT_EQ(parse_model_config(q, "tiny").num_key_value_heads, 32);  // Qwen2Config default
  q["num_key_value_heads"] = nullptr;
  EXPECT_EQ(parse_model_config(q, "tiny").num_key_value_heads, 64);
  json m = tiny("mistral");
  m.erase("num_key_value_heads");
  m["num_attention_heads"] = 16;
  EXPECT_EQ(parse_model_config(m, "tiny").num_key_value_heads, 8);  // MistralConfig default
}

TEST(ModelConfig, TokenIdsAndDtypeForms) {
  json j = tiny("llama");
  j["eos_token_id"] = nullptr;
  j["bos_token_id"] = nullptr;
  j["torch_dtype"] = "float16";
  ModelConfig c = parse_model_config(j, "tiny");
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.torch_dtype, "float16");
  j["dtype"] = "bfloat16";  // 5.x key wins
  j["eos_token_id"] = json::array({7, 9});
  c = parse_model_config(j, "tiny");
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{7, 9}));
  j["hidden_act"] = "swish";
  EXPECT_EQ(parse_model_config(j, "tiny").hidden_act, "silu");
}

// ---- sliding windows --------------------------------------------------------------------------------------
TEST(ModelConfig, QwenSlidingWindowFromMaxWindowLayers) {
  json j = tiny("qwen2");
  j["use_sliding_window"] = true;
  j["sliding_window"] = 64;
  j["max_window_layers"] = 2;
  ModelConfig c = parse_model_config(j, "tiny");
  EXPECT_EQ(c.sliding_window, 64);
  EXPECT_EQ(windows(c), (std::vector<int64_t>{0, 0, 64, 64}));
  EXPECT_CONTAINS(c.summary(), "sliding window 64 on 2/4 layers");

  j.erase("sliding_window");  // Qwen2Config default 4096
  EXPECT_EQ(windows(parse_model_config(j, "tiny")), (std::vector<int64_t>{0, 0, 4096, 4096}));
  j.erase("max_window_layers");  // default 28 > 4 layers: no layer slides
  EXPECT_EQ(windows(parse_model_config(j, "tiny")), (std::vector<int64_t>(4, 0)));
  j["sliding_window"] = nullptr;
  j["max_window_layers"] = 0;
  EXPECT_EQ(windows(parse_model_config(j, "tiny")), (std::vector<int64_t>(4, 0)));
  j["sliding_window"] = 64;
  j["use_sliding_window"] = false;
  EXPECT_EQ(windows(parse_model_config(j, "tiny")), (std::vector<int64_t>(4, 0)));
}

TEST(ModelConfig, QwenLayerTypesDecideWhichLayersSlide) {
  json j = tiny("qwen3");
  j["use_sliding_window"] = true;
  j["sliding_window"] = 32;
  j["max_window_layers"] = 0;  // would make every layer slide; layer_types wins
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "sliding_attention"};
  ModelConfig c = parse_model_config(j, "tiny");
  EXPECT_EQ(windows(c), (std::vector<int64_t>{0, 32, 0, 32}));
  j["use_sliding_window"] = false;  // the window itself is off: nothing slides
  EXPECT_EQ(windows(parse_model_config(j, "tiny")), (std::vector<int64_t>(4, 0)));

  j["layer_types"] = {"full_attention", "full_attention", "full_attention"};
  std::string msg = parse_error(j);
  EXPECT_CONTAINS(msg, "layer_types");
  EXPECT_CONTAINS(msg, "4 entries");
  j["layer_types"] = {"full_attention", "chunked_attention", "full_attention", "full_attention"};
  EXPECT_CONTAINS(parse_error(j), "chunked_attention");
}

TEST(ModelConfig, LayerWindowChecksItsArgument) {
  ModelConfig c = parse_model_config(tiny("llama"), "tiny");
  EXPECT_THROW(c.layer_window(4), Error);
  EXPECT_THROW(c.layer_window(-1), Error);
}

// ---- rope forms -------------------------------------------------------------------------------------------
TEST(ModelConfig, RopeV4TypeKeyAndV5RopeParameters) {
  json j = tiny("llama");
  j["rope_theta"] = 5000.0;
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  ModelConfig c = parse_model_config(j, "tiny");
  EXPECT_EQ(c.rope.type, ops::RopeType::Linear);
  EXPECT_EQ(c.rope.factor, 2.0);
  EXPECT_EQ(c.rope.theta, 5000.0);

  json v5 = tiny("llama");
  v5["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 4.0}, {"rope_theta", 20000.0}};
  v5["max_position_embeddings"] = 4096;
  c = parse_model_config(v5, "tiny");
  EXPECT_EQ(c.rope.type, ops::RopeType::Dynamic);
  EXPECT_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.theta, 20000.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);  // dynamic NTK scales against max positions
  EXPECT_EQ(c.rope.max_position_embeddings, 4096);

  // The dict's rope_theta wins over the top-level one; rope_scaling wins over rope_parameters.
  v5["rope_theta"] = 1.0;
  EXPECT_EQ(parse_model_config(v5, "tiny").rope.theta, 20000.0);
  v5["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 3.0}};
  c = parse_model_config(v5, "tiny");
  EXPECT_EQ(c.rope.type, ops::RopeType::Linear);
  EXPECT_EQ(c.rope.theta, 1.0);
  v5["rope_scaling"] = nullptr;  // null: fall back to rope_parameters
  EXPECT_EQ(parse_model_config(v5, "tiny").rope.type, ops::RopeType::Dynamic);
}

TEST(ModelConfig, RopeYarnDefaults) {
  json j = tiny("qwen2");
  j["max_position_embeddings"] = 131072;
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  ModelConfig c = parse_model_config(j, "tiny");
  EXPECT_EQ(c.rope.type, ops::RopeType::Yarn);
  EXPECT_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 32768);
  EXPECT_EQ(c.rope.beta_fast, 32.0);
  EXPECT_EQ(c.rope.beta_slow, 1.0);
  EXPECT_EQ(c.rope.attention_factor, 0.0);
  EXPECT_TRUE(c.rope.truncate);
  j["rope_scaling"] = {{"rope_type", "yarn"},  {"factor", nullptr},      {"original_max_position_embeddings", 4096},
                       {"beta_fast", 16},      {"mscale", 0.707},        {"mscale_all_dim", 0.707},
                       {"truncate", false},    {"attention_factor", 1.5}};
  c = parse_model_config(j, "tiny");
  EXPECT_EQ(c.rope.factor, 32.0);  // max_position_embeddings / original
  EXPECT_EQ(c.rope.beta_fast, 16.0);
  EXPECT_EQ(c.rope.mscale, 0.707);
  EXPECT_EQ(c.rope.mscale_all_dim, 0.707);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_EQ(c.rope.attention_factor, 1.5);
  // Without original_max_position_embeddings anywhere, transformers uses max_position_embeddings.
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 2.0}};
  EXPECT_EQ(parse_model_config(j, "tiny").rope.original_max_position_embeddings, 131072);
  j["original_max_position_embeddings"] = 8192;  // a top-level value wins
  EXPECT_EQ(parse_model_config(j, "tiny").rope.original_max_position_embeddings, 8192);
}

TEST(ModelConfig, RopeErrors) {
  json j = tiny("llama");
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"factor", 2.0}};
  std::string msg = parse_error(j);
  EXPECT_CONTAINS(msg, "longrope");
  EXPECT_CONTAINS(msg, "rope_scaling.rope_type");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}};
  EXPECT_CONTAINS(parse_error(j), "rope_scaling.high_freq_factor");
  j["rope_scaling"] = {{"rope_type", "linear"}};
  EXPECT_CONTAINS(parse_error(j), "rope_scaling.factor");
  j.erase("rope_scaling");
  j["partial_rotary_factor"] = 0.5;
  EXPECT_CONTAINS(parse_error(j), "partial_rotary_factor");
  j.erase("partial_rotary_factor");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}}};
  EXPECT_CONTAINS(parse_error(j), "rope_parameters.full_attention");
}

// ---- errors -----------------------------------------------------------------------------------------------
TEST(ModelConfig, UnknownModelTypeNamesItAndTheSupportedOnes) {
  json j = tiny("gemma2");
  std::string msg = parse_error(j, "/models/g/config.json");
  EXPECT_CONTAINS(msg, "'gemma2'");
  EXPECT_CONTAINS(msg, "llama, qwen2, qwen3, mistral");
  EXPECT_CONTAINS(msg, "/models/g/config.json");
}

TEST(ModelConfig, MissingFieldNamesFileAndField) {
  for (const char* field :
       {"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
    json j = tiny("qwen2");
    j.erase(field);
    std::string msg = parse_error(j, "/models/q/config.json");
    EXPECT_CONTAINS(msg, "/models/q/config.json");
    EXPECT_CONTAINS(msg, std::string("\"") + field + "\"");
    EXPECT_CONTAINS(msg, "missing");
  }
}

TEST(ModelConfig, InconsistentOrMistypedFieldsThrow) {
  json j = tiny("llama");
  j["num_key_value_heads"] = 3;
  EXPECT_CONTAINS(parse_error(j), "num_key_value_heads");
  j = tiny("llama");
  j["hidden_size"] = "64";
  EXPECT_CONTAINS(parse_error(j), "\"hidden_size\" must be an integer");
  j = tiny("llama");
  j["hidden_size"] = 66;  // 66 / 4 heads, no head_dim
  EXPECT_CONTAINS(parse_error(j), "hidden_size");
  j = tiny("llama");
  j["vocab_size"] = 0;
  EXPECT_CONTAINS(parse_error(j), "vocab_size");
  j = tiny("llama");
  j["tie_word_embeddings"] = "yes";
  EXPECT_CONTAINS(parse_error(j), "tie_word_embeddings");
  j = tiny("llama");
  j["hidden_act"] = "gelu";
  EXPECT_CONTAINS(parse_error(j), "gelu");
  j = tiny("llama");
  j["max_position_embeddings"] = 4096.0;  // an integral float is accepted
  EXPECT_EQ(parse_model_config(j, "tiny").max_position_embeddings, 4096);
  EXPECT_CONTAINS(parse_error(json::array()), "object");
}

TEST(ModelConfig, LoadErrorsNameTheFile) {
  std::string pattern = (fs::temp_directory_path() / "swift_config_XXXXXX").string();
  ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
  const fs::path dir = pattern;
  try {
    load_model_config((dir / "config.json").string());
    ADD_FAILURE() << "missing file must throw";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), (dir / "config.json").string());
  }
  std::ofstream(dir / "config.json") << "{\"model_type\": \"llama\",";
  try {
    load_model_config((dir / "config.json").string());
    ADD_FAILURE() << "bad JSON must throw";
  } catch (const Error& e) {
    EXPECT_CONTAINS(e.what(), (dir / "config.json").string());
    EXPECT_CONTAINS(e.what(), "JSON");
  }
  std::ofstream(dir / "config.json") << tiny("mistral").dump();
  EXPECT_EQ(load_model_config(dir.string()).model_type, "mistral");  // a directory means its config.json
  fs::remove_all(dir);
}

}  // namespace
}  // namespace swift::io
