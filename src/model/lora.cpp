// model/lora.cpp — LoRA target selection, PEFT initialisation (LoRA, DoRA magnitudes, modules_to_save copies) and
// PEFT name mapping.
#include "model/lora.h"

#include <cmath>
#include <random>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/seed.h"
#include "model/causal_lm.h"
#include "ops/ops.h"

namespace swift::model {

namespace {

constexpr const char* kSuffixes[kLinearKinds] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                 "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                 "mlp.down_proj"};
constexpr const char* kShortNames[kLinearKinds] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                   "gate_proj", "up_proj", "down_proj"};

// Deterministic uniform [0, 1) from a 64-bit generator, independent of the standard library's distributions.
class Uniform {
 public:
  explicit Uniform(uint64_t seed) : rng_(seed) {}
  double next() { return static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0); }
  double normal() {  // Box-Muller
    double u1 = next(), u2 = next();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }

 private:
  std::mt19937_64 rng_;
};

// An F32 copy in host memory (create_lora's adapters live on the CPU wherever the base weights are).
Tensor f32_copy(const Tensor& t) {
  const Tensor f = t.dtype() == DType::F32 ? t.clone(MemoryCategory::Weights) : t.to_dtype(DType::F32, MemoryCategory::Weights);
  return f.device().is_cpu() ? f : f.to(Device::cpu(), MemoryCategory::Weights);
}

// "embed_tokens" / "model.embed_tokens" -> kEmbedModule, "lm_head" -> kLmHeadModule; throws for anything else.
std::string module_to_save_path(const std::string& name, const std::string& what) {
  if (name == "embed_tokens" || name == kEmbedModule) return kEmbedModule;
  if (name == kLmHeadModule) return kLmHeadModule;
  fail("{} '{}' is not supported: modules_to_save may name embed_tokens and lm_head (full copies trained with "
       "the adapter); linear layers are adapted through --target_modules", what, name);
}

// The weight norm of W + scale * B A per row: DoRA's initial magnitude (PEFT's DoraLinearLayer.update_layer),
// computed where W lives (a model placed on a GPU before its adapters are made) and returned in host memory.
Tensor initial_magnitude(const Tensor& w, const LoraLinear& l, float scale) {
  const Device d = w.device();
  Tensor m = Tensor::empty({w.size(0)}, DType::F32, d, MemoryCategory::Weights);
  if (d.is_cpu()) {
    ops::dora_weight_norm(w, l.a, l.b, scale, m);
    return m;
  }
  ops::dora_weight_norm(w, l.a.to(d, MemoryCategory::Workspace), l.b.to(d, MemoryCategory::Workspace), scale, m);
  return m.to(Device::cpu(), MemoryCategory::Weights);
}

const Tensor& base_linear_weight(const LayerWeights& w, LinearKind kind) {
  switch (kind) {
    case LinearKind::Q: return w.q_proj;
    case LinearKind::K: return w.k_proj;
    case LinearKind::V: return w.v_proj;
    case LinearKind::O: return w.o_proj;
    case LinearKind::Gate: return w.gate_proj;
    case LinearKind::Up: return w.up_proj;
    case LinearKind::Down: return w.down_proj;
  }
  fail("base_linear_weight: unknown linear kind {}", static_cast<int>(kind));
}

bool is_targeted(const LoraSettings& s, int64_t layer, LinearKind kind, std::set<std::string>& matched) {
  const std::string path = linear_module_path(layer, kind);
  if (!s.target_regex.empty()) {
    if (std::regex_match(path, std::regex(s.target_regex))) {
      matched.insert(s.target_regex);
      return true;
    }
    return false;
  }
  for (const std::string& t : s.target_modules) {
    const std::string short_name = kShortNames[static_cast<int>(kind)];
    if (t == "all-linear" || t == "all_linear" || t == "ALL" || t == short_name || t == path ||
        (path.size() > t.size() && path.compare(path.size() - t.size(), t.size(), t) == 0 &&
         path[path.size() - t.size() - 1] == '.')) {
      matched.insert(t);
      return true;
    }
  }
  return false;
}

}  // namespace

const char* linear_module_suffix(LinearKind kind) { return kSuffixes[static_cast<int>(kind)]; }

std::string linear_module_path(int64_t layer, LinearKind kind) {
  return "model.layers." + std::to_string(layer) + "." + linear_module_suffix(kind);
}

std::array<int64_t, 2> linear_shape(const io::ModelConfig& c, LinearKind kind) {
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  switch (kind) {
    case LinearKind::Q: return {q, c.hidden_size};
    case LinearKind::K: return {kv, c.hidden_size};
    case LinearKind::V: return {kv, c.hidden_size};
    case LinearKind::O: return {c.hidden_size, q};
    case LinearKind::Gate: return {c.intermediate_size, c.hidden_size};
    case LinearKind::Up: return {c.intermediate_size, c.hidden_size};
    case LinearKind::Down: return {c.hidden_size, c.intermediate_size};
  }
  fail("linear_shape: unknown linear kind {}", static_cast<int>(kind));
}

int64_t LoraAdapters::parameter_count() const {
  int64_t n = 0;
  for (const auto& layer : layers)
    for (const LoraLinear& l : layer)
      if (l.defined()) n += l.a.numel() + l.b.numel() + (l.dora() ? l.magnitude.numel() : 0);
  if (embed_tokens.defined()) n += embed_tokens.numel();
  if (lm_head.defined()) n += lm_head.numel();
  return n;
}

int64_t LoraAdapters::adapted_linears() const {
  int64_t n = 0;
  for (const auto& layer : layers)
    for (const LoraLinear& l : layer) n += l.defined() ? 1 : 0;
  return n;
}

LoraAdapters create_lora(const io::ModelConfig& config, const LoraSettings& s, const ModelWeights* weights) {
  SWIFT_CHECK(s.rank > 0, "--lora_rank must be positive, got {}", s.rank);
  SWIFT_CHECK(s.alpha > 0, "--lora_alpha must be positive, got {}", s.alpha);
  SWIFT_CHECK(s.dropout >= 0 && s.dropout < 1, "--lora_dropout must be in [0, 1), got {}", s.dropout);
  SWIFT_CHECK(weights != nullptr || (!s.use_dora && s.modules_to_save.empty()),
              "create_lora: DoRA and modules_to_save need the base model's weights");
  if (weights != nullptr) {
    SWIFT_CHECK(static_cast<int64_t>(weights->layers.size()) == config.num_hidden_layers,
                "create_lora: weights of {} layers for a config of {}", weights->layers.size(), config.num_hidden_layers);
  }
  SWIFT_CHECK(s.init_weights == "true" || s.init_weights == "gaussian" || s.init_weights == "false",
              "--init_weights '{}': expected true, gaussian or false", s.init_weights);
  LoraAdapters out;
  out.config.r = s.rank;
  out.config.lora_alpha = s.alpha;
  out.config.lora_dropout = s.dropout;
  out.config.use_rslora = s.use_rslora;
  out.config.init_lora_weights = s.init_weights;
  out.config.target_regex = s.target_regex;
  out.config.use_dora = s.use_dora;
  out.scale = static_cast<float>(out.config.scaling());
  out.dropout = static_cast<float>(s.dropout);
  std::set<std::string> matched, kinds;
  out.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    for (int k = 0; k < kLinearKinds; ++k) {
      const LinearKind kind = static_cast<LinearKind>(k);
      if (!is_targeted(s, layer, kind, matched)) continue;
      kinds.insert(kShortNames[k]);
      const auto [M, K] = linear_shape(config, kind);
      LoraLinear& l = out.layers[static_cast<size_t>(layer)][static_cast<size_t>(k)];
      l.a = Tensor::empty({s.rank, K}, DType::F32, Device::cpu(), MemoryCategory::Weights);
      l.b = Tensor::zeros({M, s.rank}, DType::F32, Device::cpu(), MemoryCategory::Weights);
      Uniform rng(mix_seed(s.seed, static_cast<uint64_t>(layer), static_cast<uint64_t>(k)));
      float* a = l.a.data<float>();
      if (s.init_weights == "gaussian") {
        const double std_dev = 1.0 / static_cast<double>(s.rank);
        for (int64_t i = 0; i < l.a.numel(); ++i) a[i] = static_cast<float>(rng.normal() * std_dev);
      } else {
        const double bound = 1.0 / std::sqrt(static_cast<double>(K));
        for (int64_t i = 0; i < l.a.numel(); ++i) a[i] = static_cast<float>((2 * rng.next() - 1) * bound);
      }
      if (s.init_weights == "false") {
        float* b = l.b.data<float>();
        const double bound = 1.0 / std::sqrt(static_cast<double>(s.rank));
        for (int64_t i = 0; i < l.b.numel(); ++i) b[i] = static_cast<float>((2 * rng.next() - 1) * bound);
      }
      if (s.use_dora) {
        const Tensor& w = base_linear_weight(weights->layers[static_cast<size_t>(layer)], kind);
        SWIFT_CHECK(w.dim() == 2 && w.size(0) == M && w.size(1) == K,
                    "--use_dora: the initial magnitude of {} needs its whole base weight ({} x {}), but it holds {} "
                    "(a tensor-parallel shard?); create the adapters before CausalLM::shard_for_tensor_parallel",
                    linear_module_path(layer, kind), M, K, w.str());
        l.magnitude = initial_magnitude(base_linear_weight(weights->layers[static_cast<size_t>(layer)], kind), l,
                                        out.scale);
      }
    }
  }
  std::set<std::string> saved;
  for (const std::string& name : s.modules_to_save) {
    const std::string path = module_to_save_path(name, "--modules_to_save");
    if (!saved.insert(path).second) continue;
    out.config.modules_to_save.push_back(name);
    if (path == kEmbedModule) {
      out.embed_tokens = f32_copy(weights->embed_tokens);
    } else {
      out.lm_head = f32_copy(weights->lm_head);
    }
  }
  if (s.target_regex.empty()) {
    for (const std::string& t : s.target_modules) {
      SWIFT_CHECK(matched.count(t), "--target_modules '{}' matches no linear layer of this {} model (its linears: "
                  "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)", t, config.model_type);
    }
    out.config.target_modules.assign(kinds.begin(), kinds.end());
  } else {
    SWIFT_CHECK(!matched.empty(), "--target_regex '{}' matches no module path (e.g. '{}')", s.target_regex,
                linear_module_path(0, LinearKind::Q));
  }
  return out;
}

LoraAdapters lora_from_peft(const io::PeftAdapter& adapter, const io::ModelConfig& config) {
  LoraAdapters out;
  out.config = adapter.config;
  out.scale = static_cast<float>(adapter.config.scaling());
  out.dropout = static_cast<float>(adapter.config.lora_dropout);
  const bool dora = adapter.config.use_dora;
  SWIFT_CHECK(!(adapter.config.extra.is_object() && adapter.config.extra.value("ensure_weight_tying", false) &&
                config.tie_word_embeddings && !adapter.config.modules_to_save.empty()),
              "adapter: ensure_weight_tying with modules_to_save on tied embeddings is not supported");
  out.layers.resize(static_cast<size_t>(config.num_hidden_layers));
  std::set<std::string> used;
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    for (int k = 0; k < kLinearKinds; ++k) {
      const LinearKind kind = static_cast<LinearKind>(k);
      const std::string path = linear_module_path(layer, kind);
      auto a = adapter.tensors.find(io::peft_lora_name(path, "lora_A"));
      auto b = adapter.tensors.find(io::peft_lora_name(path, "lora_B"));
      if (a == adapter.tensors.end()) continue;
      SWIFT_CHECK(b != adapter.tensors.end(), "adapter: '{}' has lora_A but no lora_B", path);
      const auto [M, K] = linear_shape(config, kind);
      const int64_t r = a->second.size(0);
      SWIFT_CHECK(a->second.shape() == (Shape{r, K}) && b->second.shape() == (Shape{M, r}),
                  "adapter: '{}' lora_A {} / lora_B {} do not fit the base weight ({}, {})", path,
                  shape_str(a->second.shape()), shape_str(b->second.shape()), M, K);
      LoraLinear& l = out.layers[static_cast<size_t>(layer)][static_cast<size_t>(k)];
      l.a = f32_copy(a->second);
      l.b = f32_copy(b->second);
      used.insert(a->first);
      used.insert(b->first);
      auto mag = adapter.tensors.find(io::peft_magnitude_name(path));
      if (dora) {
        SWIFT_CHECK(mag != adapter.tensors.end(), "adapter: use_dora is set but '{}' has no lora_magnitude_vector",
                    path);
        SWIFT_CHECK(mag->second.shape() == (Shape{M}), "adapter: '{}' lora_magnitude_vector {} must be ({})", path,
                    shape_str(mag->second.shape()), M);
        l.magnitude = f32_copy(mag->second);
        used.insert(mag->first);
      }
    }
  }
  std::set<std::string> saved;
  for (const std::string& name : adapter.config.modules_to_save) {
    const std::string path = module_to_save_path(name, "adapter: modules_to_save entry");
    if (!saved.insert(path).second) continue;
    const std::string key = io::peft_module_weight_name(path);
    auto it = adapter.tensors.find(key);
    SWIFT_CHECK(it != adapter.tensors.end(), "adapter: modules_to_save lists '{}' but the weights hold no '{}'",
                name, key);
    SWIFT_CHECK(it->second.shape() == (Shape{config.vocab_size, config.hidden_size}),
                "adapter: '{}' is {}, the model's {} is ({}, {})", key, shape_str(it->second.shape()), path,
                config.vocab_size, config.hidden_size);
    (path == kEmbedModule ? out.embed_tokens : out.lm_head) = f32_copy(it->second);
    used.insert(key);
  }
  for (const auto& [name, tensor] : adapter.tensors) {
    SWIFT_CHECK(used.count(name), "adapter tensor '{}' does not belong to any linear layer of this {} model{}",
                name, config.model_type,
                name.find("lora_magnitude_vector") != std::string::npos ? " (a DoRA magnitude, but use_dora is false)"
                : name.find(".lora_") == std::string::npos ? " (nor to a module listed in modules_to_save)"
                                                            : "");
  }
  SWIFT_CHECK(!used.empty(), "adapter holds no LoRA tensors");
  return out;
}

io::PeftAdapter lora_to_peft(const LoraAdapters& adapters, const std::string& base_model_name_or_path) {
  io::PeftAdapter out;
  out.config = adapters.config;
  out.config.base_model_name_or_path = base_model_name_or_path;
  for (size_t layer = 0; layer < adapters.layers.size(); ++layer) {
    for (int k = 0; k < kLinearKinds; ++k) {
      const LoraLinear& l = adapters.layers[layer][static_cast<size_t>(k)];
      if (!l.defined()) continue;
      const std::string path = linear_module_path(static_cast<int64_t>(layer), static_cast<LinearKind>(k));
      out.tensors[io::peft_lora_name(path, "lora_A")] = l.a;
      out.tensors[io::peft_lora_name(path, "lora_B")] = l.b;
      if (l.dora()) out.tensors[io::peft_magnitude_name(path)] = l.magnitude;
    }
  }
  if (adapters.embed_tokens.defined()) out.tensors[io::peft_module_weight_name(kEmbedModule)] = adapters.embed_tokens;
  if (adapters.lm_head.defined()) out.tensors[io::peft_module_weight_name(kLmHeadModule)] = adapters.lm_head;
  return out;
}

}  // namespace swift::model
