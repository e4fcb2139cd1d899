// tests/io/test_gguf_model.cpp — a llama-family GGUF as a Hugging Face model: config from metadata, weights
// under Hugging Face names, and the undoing of llama.cpp's Q/K permutation.
//
// Invariants: the synthetic models are written the way convert_hf_to_gguf.py writes them: Hugging Face
// weights (values exact in fp16 and Q8_0: multiples of 1/64 below 2) with q_proj/k_proj of the llama
// architecture permuted by the converter's formula, re-implemented here as a literal reshape/swapaxes, and
// tensors stored as F32, F16 or Q8_0. Loading must give back the Hugging Face weights exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "io/gguf.h"
#include "test_gguf_writer.h"

namespace swift::test {
namespace {

using io::GgmlType;
using io::GgufFile;

// convert_hf_to_gguf.py (LlamaModel.permute):
//   w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)
// The source is indexed [h][s][i][c] with shape (n_head, 2, half, cols); the result [h][i][s][c] with shape
// (n_head, half, 2, cols), both row-major.
std::vector<float> convert_permute(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t n_head) {
  const int64_t half = rows / n_head / 2;
  std::vector<float> out(w.size());
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        for (int64_t c = 0; c < cols; ++c) {
          out[((h * half + i) * 2 + s) * cols + c] = w[((h * 2 + s) * half + i) * cols + c];
        }
      }
    }
  }
  return out;
}

TEST(GgufPermutation, RoundTripWithConvertFormula) {
  for (auto [rows, n_head] : std::vector<std::pair<int64_t, int64_t>>{{576, 9}, {192, 3}, {8, 1}, {64, 8}, {4096, 32},
                                                                       {1024, 8}, {2, 1}}) {
    const int64_t cols = 3;
    std::vector<float> w(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i);
    const auto permuted = convert_permute(w, rows, cols, n_head);
    const auto order = io::gguf_unpermute_qk_order(rows, n_head);
    ASSERT_EQ(order.size(), static_cast<size_t>(rows));
    std::vector<float> back(w.size());
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_GE(order[r], 0);
      ASSERT_LT(order[r], rows);
      for (int64_t c = 0; c < cols; ++c) back[r * cols + c] = permuted[order[r] * cols + c];
    }
    EXPECT_EQ(back, w) << rows << " rows, " << n_head << " heads";
    if (rows / n_head > 2) {
      EXPECT_NE(permuted, w);  // the permutation is not the identity
    }
  }
  expect_error([] { io::gguf_unpermute_qk_order(10, 3); }, {"10 rows", "3 heads"});
  expect_error([] { io::gguf_unpermute_qk_order(9, 3); }, {"even"});
}

// ---- synthetic models ------------------------------------------------------------------------------------

struct Spec {
  std::string arch = "llama";
  int64_t layers = 2, hidden = 32, heads = 4, kv_heads = 2, head_dim = 8, ffn = 64, vocab = 40;
  bool key_length = false;  // write <arch>.attention.key_length
  bool untied = false;      // write output.weight
  bool biases = false;      // q/k/v biases (qwen2)
  bool qk_norm = false;     // qwen3
  bool quant_biases = false;  // biases of layers >= 1 in Q8_0 (sizes must be multiples of 32)
  std::function<void(GgufWriter&)> extra_meta;
  std::vector<std::string> skip;  // GGUF tensors left out
};

struct Built {
  std::map<std::string, std::vector<float>> hf;    // Hugging Face name -> values (row-major)
  std::map<std::string, Shape> shapes;
  std::map<std::string, GgmlType> stored_as;       // Hugging Face name -> GGUF type
};

// Values k/64 with |k| <= 100: exact in fp16 and in Q8_0 with d = 1/64.
std::vector<float> random_values(std::mt19937& rng, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(static_cast<int>(rng() % 201) - 100) / 64.0f;
  return v;
}

Bytes encode_q8_0(const std::vector<float>& v) {
  Bytes out;
  for (size_t blk = 0; blk < v.size() / 32; ++blk) {
    put<uint16_t>(out, f32_to_f16(1.0f / 64.0f));
    for (size_t j = 0; j < 32; ++j) out.push_back(static_cast<uint8_t>(static_cast<int8_t>(std::lround(v[blk * 32 + j] * 64))));
  }
  return out;
}

Built write_model(GgufWriter& w, const Spec& s) {
  std::mt19937 rng(42);
  Built built;
  w.kv_str("general.architecture", s.arch);
  w.kv_str("general.name", "tiny");
  const std::string a = s.arch + ".";
  w.kv_u32(a + "block_count", static_cast<uint32_t>(s.layers));
  w.kv_u32(a + "context_length", 4096);
  w.kv_u32(a + "embedding_length", static_cast<uint32_t>(s.hidden));
  w.kv_u32(a + "feed_forward_length", static_cast<uint32_t>(s.ffn));
  w.kv_u32(a + "attention.head_count", static_cast<uint32_t>(s.heads));
  w.kv_u32(a + "attention.head_count_kv", static_cast<uint32_t>(s.kv_heads));
  if (s.key_length) {
    w.kv_u32(a + "attention.key_length", static_cast<uint32_t>(s.head_dim));
    w.kv_u32(a + "attention.value_length", static_cast<uint32_t>(s.head_dim));
  }
  w.kv_f32(a + "rope.freq_base", 500000.0f);
  w.kv_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  w.kv_u32("general.file_type", 7);
  std::vector<std::string> tokens;
  for (int64_t i = 0; i < s.vocab; ++i) tokens.push_back("t" + std::to_string(i));
  w.kv_str("tokenizer.ggml.model", "gpt2");
  w.kv_str_array("tokenizer.ggml.tokens", tokens);
  w.kv_u32("tokenizer.ggml.bos_token_id", 1);
  w.kv_u32("tokenizer.ggml.eos_token_id", 2);
  w.kv_u32("tokenizer.ggml.eot_token_id", 7);
  w.kv_u32("tokenizer.ggml.padding_token_id", 2);
  if (s.extra_meta) s.extra_meta(w);

  const bool permute = s.arch == "llama";
  auto add = [&](const std::string& gguf, const std::string& hf, Shape shape, GgmlType type, int64_t perm_heads) {
    auto values = random_values(rng, shape_numel(shape));
    built.hf[hf] = values;
    built.shapes[hf] = shape;
    built.stored_as[hf] = type;
    if (std::find(s.skip.begin(), s.skip.end(), gguf) != s.skip.end()) return;
    if (permute && perm_heads > 0) {
      values = convert_permute(values, shape[0], shape.size() == 2 ? shape[1] : 1, perm_heads);
    }
    std::vector<int64_t> ne(shape.rbegin(), shape.rend());
    if (type == GgmlType::F32) {
      w.tensor_f32(gguf, ne, values);
    } else if (type == GgmlType::F16) {
      w.tensor_f16(gguf, ne, values);
    } else {
      w.tensor(gguf, GgmlType::Q8_0, ne, encode_q8_0(values));
    }
  };
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  add("token_embd.weight", "model.embed_tokens.weight", {s.vocab, s.hidden}, GgmlType::Q8_0, 0);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    // Layer 0 in F32, later layers: projections Q8_0, the rest F16.
    const GgmlType proj = l == 0 ? GgmlType::F32 : GgmlType::Q8_0;
    const GgmlType other = l == 0 ? GgmlType::F32 : GgmlType::F16;
    add(g + "attn_norm.weight", h + "input_layernorm.weight", {s.hidden}, GgmlType::F32, 0);
    add(g + "attn_q.weight", h + "self_attn.q_proj.weight", {q, s.hidden}, proj, s.heads);
    add(g + "attn_k.weight", h + "self_attn.k_proj.weight", {kv, s.hidden}, proj, s.kv_heads);
    add(g + "attn_v.weight", h + "self_attn.v_proj.weight", {kv, s.hidden}, other, 0);
    add(g + "attn_output.weight", h + "self_attn.o_proj.weight", {s.hidden, q}, other, 0);
    if (s.biases) {
      const GgmlType bias = s.quant_biases && l > 0 ? GgmlType::Q8_0 : other;
      add(g + "attn_q.bias", h + "self_attn.q_proj.bias", {q}, bias, s.heads);
      add(g + "attn_k.bias", h + "self_attn.k_proj.bias", {kv}, bias, s.kv_heads);
      add(g + "attn_v.bias", h + "self_attn.v_proj.bias", {kv}, bias, 0);
    }
    if (s.qk_norm) {
      add(g + "attn_q_norm.weight", h + "self_attn.q_norm.weight", {s.head_dim}, GgmlType::F32, 0);
      add(g + "attn_k_norm.weight", h + "self_attn.k_norm.weight", {s.head_dim}, GgmlType::F32, 0);
    }
    add(g + "ffn_norm.weight", h + "post_attention_layernorm.weight", {s.hidden}, GgmlType::F32, 0);
    add(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", {s.ffn, s.hidden}, proj, 0);
    add(g + "ffn_up.weight", h + "mlp.up_proj.weight", {s.ffn, s.hidden}, proj, 0);
    add(g + "ffn_down.weight", h + "mlp.down_proj.weight", {s.hidden, s.ffn}, other, 0);
  }
  add("output_norm.weight", "model.norm.weight", {s.hidden}, GgmlType::F32, 0);
  if (s.untied) add("output.weight", "lm_head.weight", {s.vocab, s.hidden}, GgmlType::F16, 0);
  return built;
}

struct Model {
  TempDir dir;
  std::string path;
  Built built;
  GgufWriter writer;
  GgufFile open(const Spec& spec, const std::string& name = "model.gguf") {
    writer = GgufWriter{};
    built = write_model(writer, spec);
    path = dir.write(name, writer.build());
    return GgufFile::open(path);
  }
};

void expect_weights_equal(const std::map<std::string, Tensor>& got, const Built& built) {
  EXPECT_EQ(got.size(), built.hf.size());
  for (const auto& [name, values] : built.hf) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << "missing " << name;
    const Tensor& t = it->second;
    EXPECT_EQ(t.shape(), built.shapes.at(name)) << name;
    for (int64_t i = 0; i < t.numel(); ++i) {
      ASSERT_EQ(t.item(i), static_cast<double>(values[static_cast<size_t>(i)])) << name << " element " << i;
    }
  }
}

TEST(GgufModel, LlamaConfig) {
  Model m;
  GgufFile f = m.open(Spec{});
  const io::ModelConfig c = io::gguf_model_config(f);
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.intermediate_size, 64);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.vocab_size, 40);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.rope.type, ops::RopeType::Default);
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.max_position_embeddings, 4096);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.attention_output_bias);
  EXPECT_FALSE(c.mlp_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2, 7}));
}

TEST(GgufModel, LlamaWeightsUnpermutedAndZeroCopy) {
  Model m;
  GgufFile f = m.open(Spec{});
  const auto c = io::gguf_model_config(f);
  const auto w = io::gguf_load_weights(f, c);
  EXPECT_EQ(w.count("lm_head.weight"), 0u);
  expect_weights_equal(w, m.built);

  auto points_into_file = [&](const Tensor& t, const char* gguf_name) {
    return t.raw() == static_cast<const void*>(f.data(f.tensor_info(gguf_name)));
  };
  // Unpermuted F32 and F16 tensors are views of the mapping, in their dtype.
  EXPECT_TRUE(points_into_file(w.at("model.layers.0.self_attn.v_proj.weight"), "blk.0.attn_v.weight"));
  EXPECT_TRUE(points_into_file(w.at("model.norm.weight"), "output_norm.weight"));
  const Tensor& v1 = w.at("model.layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(v1.dtype(), DType::F16);
  EXPECT_TRUE(points_into_file(v1, "blk.1.attn_v.weight"));
  // Permuted F32: a copy in F32. Quantized: dequantized to F32.
  const Tensor& q0 = w.at("model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(q0.dtype(), DType::F32);
  EXPECT_FALSE(points_into_file(q0, "blk.0.attn_q.weight"));
  EXPECT_EQ(w.at("model.layers.1.self_attn.k_proj.weight").dtype(), DType::F32);
  EXPECT_EQ(w.at("model.embed_tokens.weight").dtype(), DType::F32);
}

TEST(GgufModel, UntiedHasLmHead) {
  Model m;
  Spec s;
  s.untied = true;
  GgufFile f = m.open(s);
  const auto c = io::gguf_model_config(f);
  EXPECT_FALSE(c.tie_word_embeddings);
  const auto w = io::gguf_load_weights(f, c);
  ASSERT_EQ(w.count("lm_head.weight"), 1u);
  EXPECT_EQ(w.at("lm_head.weight").dtype(), DType::F16);
  expect_weights_equal(w, m.built);
}

TEST(GgufModel, Qwen2BiasesNotPermuted) {
  Model m;
  Spec s;
  s.arch = "qwen2";
  s.biases = true;
  GgufFile f = m.open(s);
  const auto c = io::gguf_model_config(f);
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_FALSE(c.attention_output_bias);
  const auto w = io::gguf_load_weights(f, c);
  expect_weights_equal(w, m.built);  // written unpermuted, read unpermuted
  // Unpermuted F32 projections stay views.
  EXPECT_EQ(w.at("model.layers.0.self_attn.q_proj.weight").raw(),
            static_cast<const void*>(f.data(f.tensor_info("blk.0.attn_q.weight"))));
}

TEST(GgufModel, LlamaBiasesArePermutedToo) {
  Model m;
  Spec s;
  s.biases = true;
  s.kv_heads = 4;          // k/v biases of 32 elements: one Q8_0 block
  s.quant_biases = true;   // layer 0: F32 biases (copied permuted), layer 1: Q8_0 (dequantized, permuted)
  GgufFile f = m.open(s);
  EXPECT_EQ(f.tensor_info("blk.1.attn_k.bias").type, GgmlType::Q8_0);
  const auto c = io::gguf_model_config(f);
  EXPECT_TRUE(c.attention_bias);
  expect_weights_equal(io::gguf_load_weights(f, c), m.built);
}

TEST(GgufModel, Qwen3HeadDimAndQkNorm) {
  Model m;
  Spec s;
  s.arch = "qwen3";
  s.head_dim = 16;  // != hidden / heads = 8
  s.key_length = true;
  s.qk_norm = true;
  GgufFile f = m.open(s);
  const auto c = io::gguf_model_config(f);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.qk_norm);
  expect_weights_equal(io::gguf_load_weights(f, c), m.built);
}

TEST(GgufModel, HeadDimFromTensorsWithoutKeyLength) {
  Model m;
  Spec s;
  s.arch = "qwen3";
  s.head_dim = 16;  // no key_length in the metadata: taken from blk.0.attn_q.weight's rows
  s.qk_norm = true;
  GgufFile f = m.open(s);
  const auto c = io::gguf_model_config(f);
  EXPECT_EQ(c.head_dim, 16);
  expect_weights_equal(io::gguf_load_weights(f, c), m.built);
}

TEST(GgufModel, RopeScaling) {
  {
    Model m;
    Spec s;
    s.extra_meta = [](GgufWriter& w) {
      w.kv_str("llama.rope.scaling.type", "linear");
      w.kv_f32("llama.rope.scaling.factor", 2.0f);
    };
    const auto c = io::gguf_model_config(m.open(s));
    EXPECT_EQ(c.rope.type, ops::RopeType::Linear);
    EXPECT_EQ(c.rope.factor, 2.0);
  }
  {
    Model m;
    Spec s;
    s.arch = "qwen2";
    s.biases = true;
    s.extra_meta = [](GgufWriter& w) {
      w.kv_str("qwen2.rope.scaling.type", "yarn");
      w.kv_f32("qwen2.rope.scaling.factor", 4.0f);
      w.kv_u32("qwen2.rope.scaling.original_context_length", 32768);
    };
    const auto c = io::gguf_model_config(m.open(s));
    EXPECT_EQ(c.rope.type, ops::RopeType::Yarn);
    EXPECT_EQ(c.rope.factor, 4.0);
    EXPECT_EQ(c.rope.original_max_position_embeddings, 32768);
  }
  {
    // Llama 3.x: rope factors as the tensor rope_freqs.weight, computed as convert_hf_to_gguf.py does with
    // factor 8, low_freq_factor 1, high_freq_factor 4, original context 8192.
    Model m;
    Spec s;
    s.extra_meta = [](GgufWriter& w) {
      std::vector<float> factors;
      const double theta = 500000.0, dim = 8, original = 8192, factor = 8, low = 1, high = 4;
      for (int i = 0; i < 4; ++i) {
        const double freq = 1.0 / std::pow(theta, 2 * i / dim);
        const double wavelen = 2 * M_PI / freq;
        if (wavelen < original / high) {
          factors.push_back(1.0f);
        } else if (wavelen > original / low) {
          factors.push_back(static_cast<float>(factor));
        } else {
          const double smooth = (original / wavelen - low) / (high - low);
          factors.push_back(static_cast<float>(1 / ((1 - smooth) / factor + smooth)));
        }
      }
      EXPECT_GT(factors[2], 1.0f);  // the smooth branch is exercised
      EXPECT_LT(factors[2], 8.0f);
      w.tensor_f32("rope_freqs.weight", {4}, factors);
    };
    GgufFile f = m.open(s);
    const auto c = io::gguf_model_config(f);
    EXPECT_EQ(c.rope.type, ops::RopeType::Llama3);
    EXPECT_EQ(c.rope.factor, 8.0);
    EXPECT_EQ(c.rope.low_freq_factor, 1.0);
    EXPECT_EQ(c.rope.high_freq_factor, 4.0);
    EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
    const auto w = io::gguf_load_weights(f, c);
    EXPECT_EQ(w.count("rope_freqs.weight"), 0u);
    expect_weights_equal(w, m.built);
  }
}

TEST(GgufModel, Errors) {
  {
    Model m;
    Spec s;
    s.arch = "gpt2";
    GgufFile f = m.open(s);
    expect_error([&] { io::gguf_model_config(f); }, {m.path, "'gpt2'", "not supported", "qwen3"});
  }
  {
    Model m;
    Spec s;
    s.skip = {"blk.1.ffn_up.weight"};
    GgufFile f = m.open(s);
    const auto c = io::gguf_model_config(f);
    expect_error([&] { io::gguf_load_weights(f, c); }, {m.path, "model.layers.1.mlp.up_proj.weight"});
  }
  {
    Model m;
    Spec s;
    s.extra_meta = [](GgufWriter& w) { w.tensor_f32("blk.0.ffn_gate_exps.weight", {2}, {1, 2}); };
    GgufFile f = m.open(s);
    const auto c = io::gguf_model_config(f);
    expect_error([&] { io::gguf_load_weights(f, c); }, {m.path, "'blk.0.ffn_gate_exps.weight'", "no Hugging Face"});
  }
  {
    Model m;
    Spec s;
    s.extra_meta = [](GgufWriter& w) { w.tensor_f32("blk.5.attn_norm.weight", {32}, std::vector<float>(32, 1)); };
    GgufFile f = m.open(s);
    const auto c = io::gguf_model_config(f);
    expect_error([&] { io::gguf_load_weights(f, c); }, {m.path, "'blk.5.attn_norm.weight'", "layer 5", "2 layers"});
  }
  {
    Model m;  // a config that disagrees with the file's shapes
    GgufFile f = m.open(Spec{});
    auto c = io::gguf_model_config(f);
    c.intermediate_size = 48;
    expect_error([&] { io::gguf_load_weights(f, c); }, {m.path, "blk.0.ffn_gate.weight", "[64, 32]", "[48, 32]"});
  }
  {
    Model m;
    Spec s;
    s.extra_meta = [](GgufWriter& w) { w.kv_u32("llama.rope.dimension_count", 4); };
    GgufFile f = m.open(s);
    expect_error([&] { io::gguf_model_config(f); }, {m.path, "partial rotary"});
  }
  {
    Model m;
    Spec s;
    s.extra_meta = [](GgufWriter& w) { w.kv_str("llama.rope.scaling.type", "longrope"); };
    GgufFile f = m.open(s);
    expect_error([&] { io::gguf_model_config(f); }, {m.path, "'longrope'", "not supported"});
  }
  {
    Model m;
    Spec s;
    s.vocab = 48;
    s.extra_meta = [](GgufWriter& w) { w.kv_u32("llama.attention.head_count", 5); };  // written twice
    expect_error([&] { m.open(s); }, {"appears twice"});
  }
  {
    TempDir dir;  // a vocabulary-only file
    GgufWriter w;
    w.kv_str_array("tokenizer.ggml.tokens", {"a"});
    const std::string path = dir.write("vocab.gguf", w.build());
    GgufFile f = GgufFile::open(path);
    expect_error([&] { io::gguf_model_config(f); }, {path, "general.architecture", "vocabulary-only"});
  }
}

}  // namespace
}  // namespace swift::test
