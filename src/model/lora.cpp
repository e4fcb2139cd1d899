// model/lora.cpp — LoRA target selection, PEFT initialisation and PEFT name mapping.
#include "model/lora.h"

#include <cmath>
#include <random>
#include <regex>
#include <set>

#include "core/error.h"

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

uint64_t mix(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t z = seed ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
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
      if (l.defined()) n += l.a.numel() + l.b.numel();
  return n;
}

int64_t LoraAdapters::adapted_linears() const {
  int64_t n = 0;
  for (const auto& layer : layers)
    for (const LoraLinear& l : layer) n += l.defined() ? 1 : 0;
  return n;
}

LoraAdapters create_lora(const io::ModelConfig& config, const LoraSettings& s) {
  SWIFT_CHECK(s.rank > 0, "--lora_rank must be positive, got {}", s.rank);
  SWIFT_CHECK(s.alpha > 0, "--lora_alpha must be positive, got {}", s.alpha);
  SWIFT_CHECK(s.dropout >= 0 && s.dropout < 1, "--lora_dropout must be in [0, 1), got {}", s.dropout);
  SWIFT_CHECK(!s.use_dora, "--use_dora true is not supported yet (LoRA and rsLoRA are)");
  SWIFT_CHECK(s.init_weights == "true" || s.init_weights == "gaussian" || s.init_weights == "false",
              "--init_weights '{}': expected true, gaussian or false", s.init_weights);
  LoraAdapters out;
  out.config.r = s.rank;
  out.config.lora_alpha = s.alpha;
  out.config.lora_dropout = s.dropout;
  out.config.use_rslora = s.use_rslora;
  out.config.init_lora_weights = s.init_weights;
  out.config.target_regex = s.target_regex;
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
      Uniform rng(mix(s.seed, static_cast<uint64_t>(layer), static_cast<uint64_t>(k)));
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
  SWIFT_CHECK(!adapter.config.use_dora, "adapter uses DoRA, which is not supported yet");
  SWIFT_CHECK(adapter.config.modules_to_save.empty(), "adapter has modules_to_save, which is not supported yet");
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
      l.a = a->second.dtype() == DType::F32 ? a->second.clone(MemoryCategory::Weights)
                                            : a->second.to_dtype(DType::F32, MemoryCategory::Weights);
      l.b = b->second.dtype() == DType::F32 ? b->second.clone(MemoryCategory::Weights)
                                            : b->second.to_dtype(DType::F32, MemoryCategory::Weights);
      used.insert(a->first);
      used.insert(b->first);
    }
  }
  for (const auto& [name, tensor] : adapter.tensors) {
    SWIFT_CHECK(used.count(name), "adapter tensor '{}' does not belong to any linear layer of this {} model",
                name, config.model_type);
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
    }
  }
  return out;
}

}  // namespace swift::model
