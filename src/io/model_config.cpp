// io/model_config.cpp — config.json -> ModelConfig for llama, qwen2, qwen3 and mistral, with the semantics of
// transformers (checked against transformers 5.24 configuration_*.py / modeling_*.py / modeling_rope_utils.py,
// and the 4.x config.json keys).
//
// Invariants and rules:
//  - Required keys (a missing or null one throws naming the file and the key): model_type, vocab_size,
//    hidden_size, intermediate_size, num_hidden_layers, num_attention_heads. Transformers would silently use
//    its 7B-llama class defaults for these; a config.json without them is broken, so we refuse it.
//  - Every other key, when absent, takes the default of the transformers class of that model_type; a null
//    value means "unset" as it does there:
//      key                      llama         qwen2         qwen3         mistral
//      num_key_value_heads      heads         32            32            8             (null -> heads)
//      head_dim                 hidden/heads  hidden/heads  128           hidden/heads  (mistral: 0 too)
//      max_position_embeddings  2048          32768         32768         131072
//      bos / eos token id       1 / 2         none / none   none / none   1 / 2
//      rms_norm_eps 1e-6, tie_word_embeddings false, hidden_act silu (the only one accepted; "swish" is
//      its alias), rope_theta 10000 for all.
//  - Biases (modeling files): llama attention_bias -> q, k, v AND o_proj; llama mlp_bias -> gate, up, down;
//    qwen2 -> q, k, v always (config attention_bias ignored), never o_proj; qwen3 attention_bias -> q, k, v
//    and o_proj, plus q_norm/k_norm (RMSNorm over head_dim) always; mistral -> none.
//  - Sliding window (0 = full attention):
//      mistral: "sliding_window" for every layer; absent -> 4096 (class default), null -> none.
//      qwen2/qwen3: window = sliding_window if use_sliding_window (default false) else none; sliding_window
//        absent -> 4096, null -> none. If "layer_types" is given, exactly the "sliding_attention" layers use
//        the window; otherwise layers with index >= max_window_layers (default 28) do.
//      llama: none.
//  - RoPE: the parameter dict is "rope_scaling" (4.x) when non-null, else "rope_parameters" (5.x). Its
//    "rope_theta" wins over the top-level one (default 10000). rope_type = "rope_type", else "type", else
//    "default". llama3 and yarn take original_max_position_embeddings from the top level if present, else
//    from the dict, else max_position_embeddings. Dynamic NTK scales against max_position_embeddings (as
//    transformers does, ignoring any original_max_position_embeddings). yarn: factor null -> max/original,
//    beta_fast/beta_slow null or 0 -> 32/1, truncate default true. partial_rotary_factor != 1 and per-layer
//    (nested) rope parameters are refused.
//  - eos_token_id may be an integer, a list or null; the dtype comes from "dtype" (5.x) or "torch_dtype".
#include "io/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace swift::io {

namespace {

using nlohmann::json;

enum class Family { Llama, Qwen2, Qwen3, Mistral };

constexpr const char* kSupportedTypes = "llama, qwen2, qwen3, mistral";

Family family_from_string(const std::string& type, const std::string& source) {
  if (type == "llama") return Family::Llama;
  if (type == "qwen2") return Family::Qwen2;
  if (type == "qwen3") return Family::Qwen3;
  if (type == "mistral") return Family::Mistral;
  fail("config '{}': model_type '{}' is not supported (supported: {}); use a model of one of these families",
       source, type, kSupportedTypes);
}

// Typed access to one JSON object of config.json; errors name the file and the (dotted) key.
class Fields {
 public:
  Fields(const json& object, std::string source, std::string prefix = "")
      : j_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool has_key(const char* key) const { return j_.contains(key); }
  // Present and not null.
  bool present(const char* key) const {
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }
  const json& at(const char* key) const { return j_.at(key); }

  [[noreturn]] void bad(const char* key, const std::string& what) const {
    fail("config '{}': field \"{}{}\" {}; fix the config.json", source_, prefix_, key, what);
  }
  [[noreturn]] void missing(const char* key) const {
    fail("config '{}': required field \"{}{}\" is missing (or null); the config.json is incomplete, "
         "re-download it or add the field",
         source_, prefix_, key);
  }

  int64_t require_int(const char* key) const {
    if (!present(key)) missing(key);
    return to_int(key, j_.at(key));
  }
  int64_t get_int(const char* key, int64_t fallback) const {
    return present(key) ? to_int(key, j_.at(key)) : fallback;
  }
  double require_double(const char* key) const {
    if (!present(key)) missing(key);
    return to_double(key, j_.at(key));
  }
  double get_double(const char* key, double fallback) const {
    return present(key) ? to_double(key, j_.at(key)) : fallback;
  }
  bool get_bool(const char* key, bool fallback) const {
    if (!present(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_boolean()) bad(key, fmt::format("must be true or false, got {}", v.dump()));
    return v.get<bool>();
  }
  std::string require_string(const char* key) const {
    if (!present(key)) missing(key);
    return get_string(key, "");
  }
  std::string get_string(const char* key, const std::string& fallback) const {
    if (!present(key)) return fallback;
    const json& v = j_.at(key);
    if (!v.is_string()) bad(key, fmt::format("must be a string, got {}", v.dump()));
    return v.get<std::string>();
  }

  int64_t to_int(const char* key, const json& v) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {  // 32768.0 is fine, 1.5 is not
      double d = v.get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    }
    bad(key, fmt::format("must be an integer, got {}", v.dump()));
  }
  double to_double(const char* key, const json& v) const {
    if (v.is_number()) return v.get<double>();
    bad(key, fmt::format("must be a number, got {}", v.dump()));
  }

 private:
  const json& j_;
  std::string source_;
  std::string prefix_;
};

const char* rope_type_name(ops::RopeType type) {
  switch (type) {
    case ops::RopeType::Default: return "default";
    case ops::RopeType::Linear: return "linear";
    case ops::RopeType::Dynamic: return "dynamic";
    case ops::RopeType::Yarn: return "yarn";
    case ops::RopeType::Llama3: return "llama3";
  }
  return "?";
}

ops::RopeConfig parse_rope(const Fields& top, const std::string& source, int64_t max_positions) {
  static const json kEmpty = json::object();
  const json* params = &kEmpty;
  const char* where = "rope_parameters";
  for (const char* key : {"rope_scaling", "rope_parameters"}) {  // 4.x key first, as transformers does
    if (!top.present(key)) continue;
    if (!top.at(key).is_object()) top.bad(key, fmt::format("must be an object, got {}", top.at(key).dump()));
    params = &top.at(key);
    where = key;
    break;
  }
  const std::string prefix = std::string(where) + ".";
  Fields p(*params, source, prefix);
  for (const char* nested : {"full_attention", "sliding_attention"}) {
    if (p.has_key(nested)) {
      p.bad(nested, "gives per-layer-type rope parameters, which swift.cpp does not support for this model_type");
    }
  }
  for (const Fields* f : {&top, static_cast<const Fields*>(&p)}) {
    if (f->present("partial_rotary_factor") && f->get_double("partial_rotary_factor", 1.0) != 1.0) {
      f->bad("partial_rotary_factor", "is not 1.0; partial rotary embeddings are not supported");
    }
  }

  ops::RopeConfig rope;
  rope.max_position_embeddings = max_positions;
  rope.theta = p.get_double("rope_theta", top.get_double("rope_theta", 10000.0));
  if (!(rope.theta > 0.0)) p.bad("rope_theta", fmt::format("must be positive, got {}", rope.theta));

  std::string type = p.get_string("rope_type", p.get_string("type", "default"));
  auto original_max = [&]() -> int64_t {
    if (top.present("original_max_position_embeddings")) return top.require_int("original_max_position_embeddings");
    return p.get_int("original_max_position_embeddings", max_positions);
  };
  auto positive_factor = [&](const char* key) {
    double v = p.require_double(key);
    if (!(v > 0.0)) p.bad(key, fmt::format("must be positive, got {}", v));
    return v;
  };

  if (type == "default") {
    rope.type = ops::RopeType::Default;
  } else if (type == "linear") {
    rope.type = ops::RopeType::Linear;
    rope.factor = positive_factor("factor");
  } else if (type == "dynamic") {
    rope.type = ops::RopeType::Dynamic;
    rope.factor = positive_factor("factor");
    rope.original_max_position_embeddings = max_positions;
  } else if (type == "llama3") {
    rope.type = ops::RopeType::Llama3;
    rope.factor = positive_factor("factor");
    rope.low_freq_factor = positive_factor("low_freq_factor");
    rope.high_freq_factor = positive_factor("high_freq_factor");
    if (!(rope.high_freq_factor > rope.low_freq_factor)) {
      p.bad("high_freq_factor", fmt::format("({}) must exceed low_freq_factor ({})", rope.high_freq_factor,
                                            rope.low_freq_factor));
    }
    rope.original_max_position_embeddings = original_max();
  } else if (type == "yarn") {
    rope.type = ops::RopeType::Yarn;
    rope.original_max_position_embeddings = original_max();
    if (rope.original_max_position_embeddings <= 0) {
      p.bad("original_max_position_embeddings", "must be positive");
    }
    rope.factor = p.present("factor") ? positive_factor("factor")
                                      : static_cast<double>(max_positions) /
                                            static_cast<double>(rope.original_max_position_embeddings);
    rope.attention_factor = p.get_double("attention_factor", 0.0);
    double beta_fast = p.get_double("beta_fast", 0.0);
    double beta_slow = p.get_double("beta_slow", 0.0);
    rope.beta_fast = beta_fast != 0.0 ? beta_fast : 32.0;
    rope.beta_slow = beta_slow != 0.0 ? beta_slow : 1.0;
    rope.mscale = p.get_double("mscale", 0.0);
    rope.mscale_all_dim = p.get_double("mscale_all_dim", 0.0);
    rope.truncate = p.get_bool("truncate", true);
  } else {
    p.bad(p.has_key("rope_type") ? "rope_type" : "type",
          fmt::format("is '{}', which is not supported (supported: default, linear, dynamic, yarn, llama3)", type));
  }
  return rope;
}

std::string normalize_dtype(std::string name) {
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  return name;
}

std::string human_count(int64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1000000) return fmt::format("{:.1f}M", n / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}K", n / 1e3);
  return std::to_string(n);
}

// 1000000 rather than 1e+06 for integral values; %g otherwise.
std::string plain_number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
  return fmt::format("{:g}", v);
}

}  // namespace

// ---- ModelConfig ----------------------------------------------------------------------------------
int64_t ModelConfig::layer_window(int64_t layer) const {
  SWIFT_CHECK(layer >= 0 && layer < num_hidden_layers, "layer_window: layer {} out of range [0, {})", layer,
              num_hidden_layers);
  if (sliding_window <= 0) return 0;
  if (!layer_types.empty()) {
    SWIFT_CHECK(static_cast<int64_t>(layer_types.size()) == num_hidden_layers,
                "layer_window: {} layer_types for {} layers", layer_types.size(), num_hidden_layers);
    return layer_types[static_cast<size_t>(layer)] == "sliding_attention" ? sliding_window : 0;
  }
  return layer >= max_window_layers ? sliding_window : 0;
}

int64_t ModelConfig::parameter_count() const {
  const int64_t C = hidden_size, F = intermediate_size, V = vocab_size, D = head_dim;
  const int64_t q = num_attention_heads * D, kv = num_key_value_heads * D;
  int64_t layer = C * q + 2 * C * kv + q * C;  // q, k, v, o projections
  if (attention_bias) layer += q + 2 * kv;
  if (attention_output_bias) layer += C;
  if (qk_norm) layer += 2 * D;
  layer += 3 * C * F;  // gate, up, down
  if (mlp_bias) layer += 2 * F + C;
  layer += 2 * C;  // input and post-attention norms
  int64_t total = V * C + num_hidden_layers * layer + C;  // embeddings, layers, final norm
  if (!tie_word_embeddings) total += V * C;                // separate LM head
  return total;
}

std::string ModelConfig::summary() const {
  std::string out = fmt::format(
      "{}: {} layers, hidden {}, intermediate {}, heads {} (kv {}, head_dim {}), vocab {}, {} params, rope {} "
      "theta {}",
      model_type, num_hidden_layers, hidden_size, intermediate_size, num_attention_heads, num_key_value_heads,
      head_dim, vocab_size, human_count(parameter_count()), rope_type_name(rope.type), plain_number(rope.theta));
  if (rope.type != ops::RopeType::Default) out += " x" + plain_number(rope.factor);
  if (sliding_window > 0) {
    int64_t sliding = 0;
    for (int64_t l = 0; l < num_hidden_layers; ++l) sliding += layer_window(l) > 0;
    out += fmt::format(", sliding window {} on {}/{} layers", sliding_window, sliding, num_hidden_layers);
  }
  if (tie_word_embeddings) out += ", tied embeddings";
  out += ", " + torch_dtype;
  return out;
}

// ---- parsing --------------------------------------------------------------------------------------
ModelConfig parse_model_config(const json& j, const std::string& source) {
  if (!j.is_object()) {
    fail("config '{}': expected a JSON object, got {}; is this a Hugging Face config.json?", source, j.type_name());
  }
  Fields f(j, source);
  ModelConfig c;
  c.model_type = f.require_string("model_type");
  const Family family = family_from_string(c.model_type, source);
  const bool is_qwen = family == Family::Qwen2 || family == Family::Qwen3;

  c.vocab_size = f.require_int("vocab_size");
  c.hidden_size = f.require_int("hidden_size");
  c.intermediate_size = f.require_int("intermediate_size");
  c.num_hidden_layers = f.require_int("num_hidden_layers");
  c.num_attention_heads = f.require_int("num_attention_heads");
  for (const char* key :
       {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
    if (f.require_int(key) <= 0) f.bad(key, fmt::format("must be positive, got {}", f.require_int(key)));
  }

  // Key/value heads: absent -> class default; null -> num_attention_heads.
  if (f.present("num_key_value_heads")) {
    c.num_key_value_heads = f.require_int("num_key_value_heads");
  } else if (!f.has_key("num_key_value_heads") && is_qwen) {
    c.num_key_value_heads = 32;
  } else if (!f.has_key("num_key_value_heads") && family == Family::Mistral) {
    c.num_key_value_heads = 8;
  } else {
    c.num_key_value_heads = c.num_attention_heads;
  }
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0) {
    f.bad("num_key_value_heads", fmt::format("is {}, which does not divide num_attention_heads ({})",
                                             c.num_key_value_heads, c.num_attention_heads));
  }

  // Head dim: explicit wins (mistral treats 0 like null); qwen3's class default is 128.
  int64_t head_dim = f.get_int("head_dim", 0);
  if (head_dim == 0 && family == Family::Qwen3) head_dim = 128;
  if (head_dim == 0) {
    if (c.hidden_size % c.num_attention_heads != 0) {
      f.bad("hidden_size", fmt::format("({}) is not a multiple of num_attention_heads ({}) and no head_dim is given",
                                       c.hidden_size, c.num_attention_heads));
    }
    head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (head_dim <= 0 || head_dim % 2 != 0) {
    f.bad("head_dim", fmt::format("is {}; rotary embeddings need a positive even head_dim", head_dim));
  }
  c.head_dim = head_dim;

  c.rms_norm_eps = f.get_double("rms_norm_eps", 1e-6);
  if (!(c.rms_norm_eps > 0.0)) f.bad("rms_norm_eps", fmt::format("must be positive, got {}", c.rms_norm_eps));
  const int64_t default_positions = family == Family::Llama ? 2048 : family == Family::Mistral ? 131072 : 32768;
  c.max_position_embeddings = f.get_int("max_position_embeddings", default_positions);
  if (c.max_position_embeddings <= 0) {
    f.bad("max_position_embeddings", fmt::format("must be positive, got {}", c.max_position_embeddings));
  }
  c.rope = parse_rope(f, source, c.max_position_embeddings);
  c.tie_word_embeddings = f.get_bool("tie_word_embeddings", false);

  switch (family) {
    case Family::Llama:
      c.attention_bias = c.attention_output_bias = f.get_bool("attention_bias", false);
      c.mlp_bias = f.get_bool("mlp_bias", false);
      break;
    case Family::Qwen2:
      c.attention_bias = true;
      break;
    case Family::Qwen3:
      c.attention_bias = c.attention_output_bias = f.get_bool("attention_bias", false);
      c.qk_norm = true;
      break;
    case Family::Mistral:
      break;
  }

  // Sliding window.
  auto window_value = [&]() -> int64_t {
    if (!f.has_key("sliding_window")) return 4096;  // class default
    int64_t w = f.get_int("sliding_window", 0);      // null -> none
    if (w < 0) f.bad("sliding_window", fmt::format("must be non-negative or null, got {}", w));
    return w;
  };
  if (family == Family::Mistral) {
    c.sliding_window = window_value();
    c.max_window_layers = 0;
  } else if (is_qwen) {
    c.sliding_window = f.get_bool("use_sliding_window", false) ? window_value() : 0;
    c.max_window_layers = f.get_int("max_window_layers", 28);
    if (f.present("layer_types")) {
      const json& types = f.at("layer_types");
      if (!types.is_array() || static_cast<int64_t>(types.size()) != c.num_hidden_layers) {
        f.bad("layer_types", fmt::format("must be a list of {} entries (num_hidden_layers), got {}",
                                         c.num_hidden_layers, types.dump()));
      }
      for (const json& t : types) {
        if (!t.is_string() || (t != "full_attention" && t != "sliding_attention")) {
          f.bad("layer_types", fmt::format("has entry {}; expected \"full_attention\" or \"sliding_attention\"",
                                           t.dump()));
        }
        c.layer_types.push_back(t.get<std::string>());
      }
    }
  }

  std::string act = f.get_string("hidden_act", "silu");
  if (act == "swish") act = "silu";
  if (act != "silu") {
    f.bad("hidden_act", fmt::format("is '{}'; the {} family is built with SiLU (swiglu) only", act, c.model_type));
  }
  c.hidden_act = act;

  if (f.present("dtype")) {
    c.torch_dtype = normalize_dtype(f.get_string("dtype", ""));
  } else if (f.present("torch_dtype")) {
    c.torch_dtype = normalize_dtype(f.get_string("torch_dtype", ""));
  }

  const bool llama_ids = family == Family::Llama || family == Family::Mistral;
  c.bos_token_id = f.has_key("bos_token_id") ? f.get_int("bos_token_id", -1) : (llama_ids ? 1 : -1);
  c.pad_token_id = f.get_int("pad_token_id", -1);
  if (!f.has_key("eos_token_id")) {
    if (llama_ids) c.eos_token_ids = {2};
  } else if (f.present("eos_token_id")) {
    const json& eos = f.at("eos_token_id");
    if (eos.is_array()) {
      for (const json& id : eos) c.eos_token_ids.push_back(f.to_int("eos_token_id", id));
    } else {
      c.eos_token_ids.push_back(f.to_int("eos_token_id", eos));
    }
  }
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  std::string file = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) file = (std::filesystem::path(path) / "config.json").string();
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    fail("cannot read model config '{}': {}; a Hugging Face model directory must contain config.json", file,
         std::filesystem::exists(file, ec) ? "permission denied or unreadable" : "no such file");
  }
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    fail("model config '{}' is not valid JSON ({}); fix or re-download it", file, e.what());
  }
  return parse_model_config(j, file);
}

}  // namespace swift::io
