// io/gguf_model.cpp — a llama-family GGUF as a Hugging Face model: ModelConfig from the metadata, weights
// under Hugging Face names.
//
// Invariants:
//  - Supported general.architecture: llama (Llama 1-3, Mistral, SmolLM, ... all come as llama), qwen2,
//    qwen3. Anything else throws naming the architecture.
//  - Every weight the config implies must be present with the Hugging Face shape (row-major, GGUF ne
//    reversed); a missing, extra or misshapen tensor throws naming it and the file.
//  - llama.cpp's convert_hf_to_gguf.py permutes the rows of q_proj (with n_head = num_attention_heads) and
//    k_proj (with n_head = num_key_value_heads) of the llama architecture, weights and biases alike:
//        W.reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2).reshape(rows, cols)
//    With D = rows / n_head and half = D / 2, Hugging Face row  h*D + s*half + i  (s in {0, 1}, i < half)
//    lands at GGUF row  h*D + 2*i + s : the two rotate_half halves of each head are interleaved into the
//    pairs llama.cpp's RoPE rotates. The inverse is therefore
//        hf[h*D + s*half + i] = gguf[h*D + 2*i + s]
//    which gguf_unpermute_qk_order() lists as a gather order (one source row per destination row).
//    qwen2/qwen3 are converted without permutation.
//  - F32/F16/BF16 tensors that need no permutation are zero-copy views of the mapping; permuted ones are
//    copied in their own dtype; quantized ones are dequantized to F32 (permuted while dequantizing).
//  - All names and shapes are checked before any work; then every destination is allocated and the rows
//    are converted in one OpenMP region over ~64K-element jobs (one barrier for the whole model: a region
//    per tensor stalls for whole time slices when the machine is busy). Nothing in that region throws.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/error.h"
#include "io/gguf.h"

namespace swift::io {
namespace {

struct LayerName {
  const char* gguf;  // after "blk.N."
  const char* hf;    // after "model.layers.N."
};
constexpr LayerName kLayerNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_gate.bias", "mlp.gate_proj.bias"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_up.bias", "mlp.up_proj.bias"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_down.bias", "mlp.down_proj.bias"},
};

// Tensors of llama.cpp that have no Hugging Face weight: rope_freqs (Llama-3 rope factors, read into the
// config) and the legacy per-layer rotary tables.
bool ignored_tensor(const std::string& name) {
  return name == "rope_freqs.weight" ||
         (name.rfind("blk.", 0) == 0 && name.size() > 20 && name.ends_with(".attn_rot_embd"));
}

// Maps a GGUF tensor name to its Hugging Face name; empty when unknown. `layer` gets N of blk.N (or -1).
std::string hf_name(const std::string& name, int64_t& layer) {
  layer = -1;
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  if (name.rfind("blk.", 0) != 0) return {};
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot - 4 > 9) return {};
  int64_t n = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return {};
    n = n * 10 + (name[i] - '0');
  }
  const std::string rest = name.substr(dot + 1);
  for (const auto& entry : kLayerNames) {
    if (rest == entry.gguf) {
      layer = n;
      return fmt::format("model.layers.{}.{}", n, entry.hf);
    }
  }
  return {};
}

bool any_layer_has(const GgufFile& f, const char* suffix) {
  for (const auto& t : f.tensors()) {
    if (t.name.rfind("blk.", 0) == 0 && t.name.ends_with(suffix)) return true;
  }
  return false;
}

// Llama-3 rope scaling is not in the metadata: convert_hf_to_gguf.py stores its per-frequency factors as
// the tensor rope_freqs.weight (head_dim / 2 values). Recover (factor, low, high, original context) by
// recomputing the factors for candidate parameters the way the converter does and comparing.
void infer_llama3_rope(const GgufFile& f, ModelConfig& c) {
  const GgufTensorInfo& info = f.tensor_info("rope_freqs.weight");
  const int64_t half = c.head_dim / 2;
  if (info.numel() != half) {
    fail("'{}': rope_freqs.weight has {} values, expected head_dim / 2 = {}", f.path(), info.numel(), half);
  }
  Tensor stored = f.dequantize("rope_freqs.weight");
  const float* s = stored.data<float>();
  double factor = 0;
  for (int64_t i = 0; i < half; ++i) factor = std::max(factor, static_cast<double>(s[i]));
  if (factor <= 1.0) return;  // all ones: no scaling
  const double low_freq = 1.0, high_freq = 4.0;
  for (double original : {8192.0, 4096.0, 16384.0, 32768.0, 2048.0, 65536.0, 131072.0}) {
    bool match = true;
    for (int64_t i = 0; i < half && match; ++i) {
      const double freq = 1.0 / std::pow(c.rope.theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim));
      const double wavelen = 2.0 * M_PI / freq;
      double expect;
      if (wavelen < original / high_freq) {
        expect = 1.0;
      } else if (wavelen > original / low_freq) {
        expect = factor;
      } else {
        const double smooth = (original / wavelen - low_freq) / (high_freq - low_freq);
        expect = 1.0 / ((1.0 - smooth) / factor + smooth);
      }
      match = std::abs(expect - s[i]) <= 1e-3 * expect;
    }
    if (match) {
      c.rope.type = ops::RopeType::Llama3;
      c.rope.factor = factor;
      c.rope.low_freq_factor = low_freq;
      c.rope.high_freq_factor = high_freq;
      c.rope.original_max_position_embeddings = static_cast<int64_t>(original);
      return;
    }
  }
  fail("'{}': rope_freqs.weight holds rope frequency factors that match no Llama-3 rope scaling (factor {}, "
       "low_freq_factor 1, high_freq_factor 4); this rope scaling is not supported", f.path(), factor);
}

// Gather order that undoes llama.cpp's Q/K permutation over `rows` rows of `n_head` heads (see the head
// comment): destination row h*D + s*half + i takes source row h*D + 2*i + s.
std::vector<int64_t> unpermute_order(int64_t rows, int64_t n_head, const std::string& what) {
  SWIFT_CHECK(n_head > 0 && rows % n_head == 0 && (rows / n_head) % 2 == 0,
              "gguf: cannot undo the Q/K permutation of {}: {} rows are not {} heads of an even size", what, rows,
              n_head);
  const int64_t dim = rows / n_head, half = dim / 2;
  std::vector<int64_t> order(static_cast<size_t>(rows));
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t i = 0; i < half; ++i) order[h * dim + s * half + i] = h * dim + 2 * i + s;
    }
  }
  return order;
}

// One unit of loading work: rows [begin, end) of a destination tensor, either dequantized from ggml blocks
// or copied byte for byte (F32/F16/BF16 rows that must be permuted). Destination row r takes source row
// order[r] (r itself without an order).
struct RowJob {
  GgmlType type;
  const uint8_t* src;
  size_t src_row_bytes;
  uint8_t* dst;
  size_t dst_row_bytes;
  int64_t row_len;  // elements per row
  const int64_t* order;
  int64_t begin, end;
  bool copy;  // true: memcpy rows; false: dequantize them to F32
};

void run_job(const RowJob& j) {
  for (int64_t r = j.begin; r < j.end; ++r) {
    const int64_t from = j.order != nullptr ? j.order[r] : r;
    const uint8_t* src = j.src + static_cast<size_t>(from) * j.src_row_bytes;
    uint8_t* dst = j.dst + static_cast<size_t>(r) * j.dst_row_bytes;
    if (j.copy) {
      std::memcpy(dst, src, j.dst_row_bytes);
    } else {
      ggml_dequantize_row(j.type, src, reinterpret_cast<float*>(dst), j.row_len);
    }
  }
}

// Plans the work for one tensor: a zero-copy view when possible, else an allocated destination whose rows
// are split into jobs of about 64K elements.
Tensor plan_tensor(const GgufFile& f, const GgufTensorInfo& info, const std::vector<int64_t>* order,
                   std::vector<RowJob>& jobs) {
  const bool plain = info.type == GgmlType::F32 || info.type == GgmlType::F16 || info.type == GgmlType::BF16;
  if (plain && order == nullptr) return f.view(info.name);
  if (!plain && !ggml_type_dequantizable(info.type)) f.dequantize(info.name);  // throws naming tensor and type
  const Shape shape = info.shape();
  // A permutation acts on the first row-major axis: rows of ne[0] elements for 2-D tensors, single elements
  // for 1-D biases.
  const int64_t rows = order != nullptr ? shape[0] : (info.ne[0] == 0 ? 0 : info.numel() / info.ne[0]);
  const int64_t row_len = rows == 0 ? 0 : info.numel() / rows;
  if (row_len % ggml_block_elems(info.type) != 0) {
    // A quantized 1-D tensor (a bias) whose elements are permuted: dequantize whole, then gather.
    Tensor whole = f.dequantize(info.name);
    Tensor out = Tensor::empty(shape, DType::F32, Device::cpu(), MemoryCategory::Weights);
    for (int64_t r = 0; r < rows; ++r) out.data<float>()[r] = whole.data<float>()[(*order)[r]];
    return out;
  }
  const DType dtype = !plain ? DType::F32 : info.type == GgmlType::F32 ? DType::F32
                                         : info.type == GgmlType::F16 ? DType::F16 : DType::BF16;
  Tensor out = Tensor::empty(shape, dtype, Device::cpu(), MemoryCategory::Weights);
  RowJob job;
  job.type = info.type;
  job.src = f.data(info);
  job.src_row_bytes = rows == 0 ? 0 : info.bytes / static_cast<size_t>(rows);
  job.dst = static_cast<uint8_t*>(out.raw());
  job.dst_row_bytes = rows == 0 ? 0 : out.nbytes() / static_cast<size_t>(rows);
  job.row_len = row_len;
  job.order = order != nullptr ? order->data() : nullptr;
  job.copy = plain;
  const int64_t rows_per_job = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(row_len, 1));
  for (int64_t begin = 0; begin < rows; begin += rows_per_job) {
    job.begin = begin;
    job.end = std::min(rows, begin + rows_per_job);
    jobs.push_back(job);
  }
  return out;
}

}  // namespace

std::vector<int64_t> gguf_unpermute_qk_order(int64_t rows, int64_t n_head) {
  return unpermute_order(rows, n_head, "a tensor");
}

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string& path = f.path();
  if (!f.has("general.architecture")) {
    fail("'{}': metadata key general.architecture is missing: this GGUF holds no model (a vocabulary-only "
         "file?)", path);
  }
  const std::string arch = f.get_string("general.architecture");
  if (arch != "llama" && arch != "qwen2" && arch != "qwen3") {
    fail("'{}': GGUF architecture '{}' is not supported (supported: llama (also Mistral and other Llama-shaped "
         "models), qwen2, qwen3)", path, arch);
  }
  auto key = [&](const char* suffix) { return arch + "." + suffix; };
  ModelConfig c;
  c.model_type = arch;
  c.num_hidden_layers = f.get_int(key("block_count"));
  c.hidden_size = f.get_int(key("embedding_length"));
  c.intermediate_size = f.get_int(key("feed_forward_length"));
  c.num_attention_heads = f.get_int(key("attention.head_count"));
  c.num_key_value_heads = f.get_int_or(key("attention.head_count_kv"), c.num_attention_heads);
  SWIFT_CHECK(c.num_hidden_layers > 0 && c.hidden_size > 0 && c.intermediate_size > 0 &&
                  c.num_attention_heads > 0 && c.num_key_value_heads > 0,
              "'{}': non-positive model sizes: {} layers, hidden {}, ffn {}, {} heads, {} kv heads", path,
              c.num_hidden_layers, c.hidden_size, c.intermediate_size, c.num_attention_heads,
              c.num_key_value_heads);
  SWIFT_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
              "'{}': {} attention heads are not a multiple of {} key/value heads", path, c.num_attention_heads,
              c.num_key_value_heads);
  if (f.has(key("attention.key_length"))) {
    c.head_dim = f.get_int(key("attention.key_length"));
    const int64_t value_length = f.get_int_or(key("attention.value_length"), c.head_dim);
    SWIFT_CHECK(value_length == c.head_dim, "'{}': {} = {} differs from {} = {}; different key and value head "
                "sizes are not supported", path, key("attention.value_length"), value_length,
                key("attention.key_length"), c.head_dim);
  } else if (f.contains("blk.0.attn_q.weight") && f.tensor_info("blk.0.attn_q.weight").ne.size() == 2) {
    // No key_length: the q projection's rows are heads * head_dim (llama.cpp assumes hidden / heads then,
    // which is the same for every file it can run).
    const int64_t q_rows = f.tensor_info("blk.0.attn_q.weight").ne[1];
    SWIFT_CHECK(q_rows % c.num_attention_heads == 0, "'{}': blk.0.attn_q.weight has {} rows, not a multiple of {} "
                "heads", path, q_rows, c.num_attention_heads);
    c.head_dim = q_rows / c.num_attention_heads;
  } else {
    SWIFT_CHECK(c.hidden_size % c.num_attention_heads == 0, "'{}': hidden size {} is not a multiple of {} heads "
                "and {} is missing", path, c.hidden_size, c.num_attention_heads, key("attention.key_length"));
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  SWIFT_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, "'{}': head size {} must be positive and even", path,
              c.head_dim);
  const int64_t rope_dims = f.get_int_or(key("rope.dimension_count"), c.head_dim);
  SWIFT_CHECK(rope_dims == c.head_dim, "'{}': {} = {} but the head size is {}; partial rotary embeddings are not "
              "supported", path, key("rope.dimension_count"), rope_dims, c.head_dim);
  c.rms_norm_eps = f.get_float_or(key("attention.layer_norm_rms_epsilon"), 1e-6);
  c.max_position_embeddings = f.get_int_or(key("context_length"), c.max_position_embeddings);
  c.hidden_act = "silu";

  // ---- rope -------------------------------------------------------------------------------------------
  c.rope.theta = f.get_float_or(key("rope.freq_base"), 10000.0);
  c.rope.max_position_embeddings = c.max_position_embeddings;
  const std::string scaling = f.get_string_or(key("rope.scaling.type"), f.has(key("rope.scale_linear")) ? "linear"
                                                                                                       : "none");
  const double factor = f.get_float_or(key("rope.scaling.factor"), f.get_float_or(key("rope.scale_linear"), 1.0));
  if (scaling == "linear") {
    if (factor != 1.0) {
      c.rope.type = ops::RopeType::Linear;
      c.rope.factor = factor;
    }
  } else if (scaling == "yarn") {
    c.rope.type = ops::RopeType::Yarn;
    c.rope.factor = factor;
    c.rope.original_max_position_embeddings =
        f.get_int_or(key("rope.scaling.original_context_length"), c.max_position_embeddings);
    c.rope.beta_fast = f.get_float_or(key("rope.scaling.yarn_beta_fast"), c.rope.beta_fast);
    c.rope.beta_slow = f.get_float_or(key("rope.scaling.yarn_beta_slow"), c.rope.beta_slow);
  } else if (scaling != "none") {
    fail("'{}': {} = '{}' is not supported (supported: none, linear, yarn)", path, key("rope.scaling.type"),
         scaling);
  }
  if (f.contains("rope_freqs.weight")) {
    SWIFT_CHECK(c.rope.type == ops::RopeType::Default, "'{}': both {} = '{}' and a rope_freqs.weight tensor; "
                "this combination is not supported", path, key("rope.scaling.type"), scaling);
    infer_llama3_rope(f, c);
  }

  // ---- vocabulary and special tokens ------------------------------------------------------------------
  int64_t token_count = -1;
  if (f.has("tokenizer.ggml.tokens") && f.metadata("tokenizer.ggml.tokens").is_array()) {
    token_count = static_cast<int64_t>(f.metadata("tokenizer.ggml.tokens").size());
  }
  if (f.contains("token_embd.weight")) {
    const auto& embd = f.tensor_info("token_embd.weight");
    SWIFT_CHECK(embd.ne.size() == 2, "'{}': token_embd.weight has {} dimensions, expected 2", path, embd.ne.size());
    c.vocab_size = embd.ne[1];
    SWIFT_CHECK(token_count <= c.vocab_size, "'{}': the token list has {} tokens but token_embd.weight has only {} "
                "rows", path, token_count, c.vocab_size);
  } else {
    c.vocab_size = f.get_int_or(key("vocab_size"), token_count);
  }
  SWIFT_CHECK(c.vocab_size > 0, "'{}': the vocabulary size is unknown (no token_embd.weight, {} or "
              "tokenizer.ggml.tokens)", path, key("vocab_size"));
  c.bos_token_id = f.get_int_or("tokenizer.ggml.bos_token_id", -1);
  // Chat models end a turn with eot/eom (Llama-3: <|eot_id|>, <|eom_id|>); Hugging Face lists them all as eos.
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int64_t id = f.get_int_or(k, -1);
    if (id >= 0 && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) {
      c.eos_token_ids.push_back(id);
    }
  }

  // ---- what the tensors say ---------------------------------------------------------------------------
  c.tie_word_embeddings = !f.contains("output.weight");
  c.attention_bias = any_layer_has(f, ".attn_q.bias") || any_layer_has(f, ".attn_k.bias") ||
                     any_layer_has(f, ".attn_v.bias");
  c.attention_output_bias = any_layer_has(f, ".attn_output.bias");
  c.mlp_bias = any_layer_has(f, ".ffn_gate.bias") || any_layer_has(f, ".ffn_up.bias") ||
               any_layer_has(f, ".ffn_down.bias");
  c.qk_norm = any_layer_has(f, ".attn_q_norm.weight");
  if (arch == "qwen3" && !c.qk_norm) fail("'{}': a qwen3 model without attn_q_norm tensors", path);
  const int64_t file_type = f.get_int_or("general.file_type", -1);
  c.torch_dtype = file_type == 1 ? "float16" : file_type == 32 ? "bfloat16" : "float32";
  return c;
}

std::map<std::string, Tensor> gguf_load_weights(const GgufFile& f, const ModelConfig& c) {
  const std::string& path = f.path();
  const std::string arch = f.get_string_or("general.architecture", "");
  const bool permuted = arch == "llama";
  const int64_t q_rows = c.num_attention_heads * c.head_dim, kv_rows = c.num_key_value_heads * c.head_dim;

  // Expected Hugging Face names and shapes.
  std::map<std::string, Shape> expected;
  expected["model.embed_tokens.weight"] = {c.vocab_size, c.hidden_size};
  expected["model.norm.weight"] = {c.hidden_size};
  if (f.contains("output.weight")) expected["lm_head.weight"] = {c.vocab_size, c.hidden_size};
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    expected[p + "input_layernorm.weight"] = {c.hidden_size};
    expected[p + "post_attention_layernorm.weight"] = {c.hidden_size};
    expected[p + "self_attn.q_proj.weight"] = {q_rows, c.hidden_size};
    expected[p + "self_attn.k_proj.weight"] = {kv_rows, c.hidden_size};
    expected[p + "self_attn.v_proj.weight"] = {kv_rows, c.hidden_size};
    expected[p + "self_attn.o_proj.weight"] = {c.hidden_size, q_rows};
    expected[p + "mlp.gate_proj.weight"] = {c.intermediate_size, c.hidden_size};
    expected[p + "mlp.up_proj.weight"] = {c.intermediate_size, c.hidden_size};
    expected[p + "mlp.down_proj.weight"] = {c.hidden_size, c.intermediate_size};
    if (c.attention_bias) {
      expected[p + "self_attn.q_proj.bias"] = {q_rows};
      expected[p + "self_attn.k_proj.bias"] = {kv_rows};
      expected[p + "self_attn.v_proj.bias"] = {kv_rows};
    }
    if (c.attention_output_bias) expected[p + "self_attn.o_proj.bias"] = {c.hidden_size};
    if (c.mlp_bias) {
      expected[p + "mlp.gate_proj.bias"] = {c.intermediate_size};
      expected[p + "mlp.up_proj.bias"] = {c.intermediate_size};
      expected[p + "mlp.down_proj.bias"] = {c.hidden_size};
    }
    if (c.qk_norm) {
      expected[p + "self_attn.q_norm.weight"] = {c.head_dim};
      expected[p + "self_attn.k_norm.weight"] = {c.head_dim};
    }
  }

  // Map and check names first, so that a bad file fails before any dequantization work.
  std::vector<std::pair<std::string, const GgufTensorInfo*>> plan;
  std::set<std::string> seen;
  for (const auto& info : f.tensors()) {
    if (ignored_tensor(info.name)) continue;
    int64_t layer = -1;
    std::string name = hf_name(info.name, layer);
    if (name.empty()) {
      fail("'{}': tensor '{}' has no Hugging Face equivalent in a {} model (supported tensors: token_embd, "
           "output_norm, output, blk.N.attn_norm/attn_q/attn_k/attn_v/attn_output/attn_q_norm/attn_k_norm/"
           "ffn_norm/ffn_gate/ffn_up/ffn_down); this model variant is not supported", path, info.name,
           c.model_type);
    }
    auto it = expected.find(name);
    if (it == expected.end()) {
      if (layer >= c.num_hidden_layers) {
        fail("'{}': tensor '{}' belongs to layer {} but the model has {} layers", path, info.name, layer,
             c.num_hidden_layers);
      }
      fail("'{}': tensor '{}' ({}) is not part of this {} model's configuration (attention_bias {}, o_proj bias "
           "{}, mlp_bias {}, qk_norm {})", path, info.name, name, c.model_type, c.attention_bias,
           c.attention_output_bias, c.mlp_bias, c.qk_norm);
    }
    if (info.shape() != it->second) {
      fail("'{}': tensor '{}' ({}) has shape {}, expected {} from the model configuration", path, info.name, name,
           shape_str(info.shape()), shape_str(it->second));
    }
    seen.insert(name);
    plan.emplace_back(std::move(name), &info);
  }
  for (const auto& [name, shape] : expected) {
    if (seen.count(name) == 0) {
      fail("'{}': the model needs '{}' (shape {}) but the file has no such tensor; the file is incomplete or of "
           "another architecture", path, name, shape_str(shape));
    }
  }

  std::vector<int64_t> q_order, k_order;
  if (permuted) {
    q_order = unpermute_order(q_rows, c.num_attention_heads, "q_proj");
    k_order = unpermute_order(kv_rows, c.num_key_value_heads, "k_proj");
  }
  // Allocate every destination first, then run all row jobs in one parallel region: one barrier for the
  // whole model rather than one per tensor (per-tensor regions stall on a busy machine).
  std::map<std::string, Tensor> weights;
  std::vector<RowJob> jobs;
  for (const auto& [name, info] : plan) {
    const std::vector<int64_t>* order = nullptr;
    if (permuted && (name.ends_with("self_attn.q_proj.weight") || name.ends_with("self_attn.q_proj.bias"))) {
      order = &q_order;
    } else if (permuted && (name.ends_with("self_attn.k_proj.weight") || name.ends_with("self_attn.k_proj.bias"))) {
      order = &k_order;
    }
    weights.emplace(name, plan_tensor(f, *info, order, jobs));
  }
  const auto job_count = static_cast<int64_t>(jobs.size());
#pragma omp parallel for schedule(dynamic, 1) if (job_count > 1)
  for (int64_t i = 0; i < job_count; ++i) run_job(jobs[static_cast<size_t>(i)]);
  return weights;
}

}  // namespace swift::io
