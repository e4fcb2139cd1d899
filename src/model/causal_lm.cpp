// model/causal_lm.cpp — loading (HF directory or GGUF), weight binding by Hugging Face name, placement on a
// device, and the explicit forward pass of the llama-family decoder (packed batches and KV-cache decoding).
//
// Invariants:
//  - Large matrices keep their stored dtype; small vectors (norm weights, biases) are converted to F32 once
//    at load so every op sees F32 there.
//  - The forward only calls ops:: (they dispatch on the device); host data is read only from host copies of the
//    inputs (positions for rope, cu_seqlens for dynamic NTK), never from device tensors.
//  - With a cache, the new keys and values are written straight into the cache rows (projections and q/k norm
//    output there, rope rotates them in place): no copy per layer.
//  - One-token CUDA steps of forward_cached go to decode_step (model/decode_plan.cpp) when the model is covered;
//    place() and set_lora() bump revision_ so that decode plans holding the old addresses are remade.
//  - Every expected tensor is checked for presence and shape; tensors nobody uses are an error too (they
//    indicate a model this code does not understand), except known harmless ones (rotary inv_freq buffers).
//  - shard_for_tensor_parallel replaces the linears', the embedding's and the head's tensors (in weights_ and
//    tensors_) by new shard tensors, so no reference to a whole one (or to its file mapping's pages outside the
//    shard) remains.
#include "model/causal_lm.h"

#include <algorithm>
#include <optional>
#include <array>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>

#include "io/gguf.h"
#include "io/hf_checkpoint.h"
#include "model/parallel.h"
#include "ops/attention_decode.h"
#include "ops/ops.h"

namespace swift::model {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class WeightBinder {
 public:
  WeightBinder(std::map<std::string, Tensor>& tensors, const std::string& source) : tensors_(tensors), source_(source) {}

  // The tensor `name` with exactly `shape`; F32 copy when `as_f32`.
  Tensor take(const std::string& name, const Shape& shape, bool as_f32 = false) {
    auto it = tensors_.find(name);
    SWIFT_CHECK(it != tensors_.end(), "model '{}': missing weight '{}' (expected shape {})", source_, name,
                shape_str(shape));
    used_.insert(name);
    const Tensor& t = it->second;
    SWIFT_CHECK(t.shape() == shape, "model '{}': weight '{}' has shape {}, expected {} from config.json", source_,
                name, shape_str(t.shape()), shape_str(shape));
    SWIFT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16,
                "model '{}': weight '{}' has dtype {}; expected F32, BF16 or F16", source_, name, dtype_name(t.dtype()));
    if (as_f32 && t.dtype() != DType::F32) return t.to_dtype(DType::F32, MemoryCategory::Weights);
    return t;
  }
  Tensor take_optional(const std::string& name, const Shape& shape, bool present, bool as_f32 = false) {
    if (!present) return Tensor();
    return take(name, shape, as_f32);
  }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  void mark_used(const std::string& name) { used_.insert(name); }

  void check_all_used() const {
    std::vector<std::string> unused;
    for (const auto& [name, tensor] : tensors_) {
      if (used_.count(name) || ends_with(name, "rotary_emb.inv_freq")) continue;
      unused.push_back(name);
    }
    if (unused.empty()) return;
    std::string list;
    for (size_t i = 0; i < unused.size() && i < 5; ++i) list += (i ? ", " : "") + unused[i];
    fail("model '{}': {} weight(s) not used by this architecture (e.g. {}); the checkpoint does not match config.json",
         source_, unused.size(), list);
  }

 private:
  std::map<std::string, Tensor>& tensors_;
  std::string source_;
  std::set<std::string> used_;
};

ModelWeights bind_weights(const io::ModelConfig& c, std::map<std::string, Tensor>& tensors, const std::string& source) {
  WeightBinder bind(tensors, source);
  const int64_t C = c.hidden_size, F = c.intermediate_size, V = c.vocab_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  ModelWeights w;
  w.embed_tokens = bind.take("model.embed_tokens.weight", {V, C});
  w.final_norm = bind.take("model.norm.weight", {C}, true);
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed_tokens;
    if (bind.has("lm_head.weight")) bind.mark_used("lm_head.weight");  // saved tied copies are ignored, as HF does
  } else {
    w.lm_head = bind.take("lm_head.weight", {V, C});
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.input_norm = bind.take(p + "input_layernorm.weight", {C}, true);
    l.post_attention_norm = bind.take(p + "post_attention_layernorm.weight", {C}, true);
    l.q_proj = bind.take(p + "self_attn.q_proj.weight", {Hq * D, C});
    l.k_proj = bind.take(p + "self_attn.k_proj.weight", {Hkv * D, C});
    l.v_proj = bind.take(p + "self_attn.v_proj.weight", {Hkv * D, C});
    l.o_proj = bind.take(p + "self_attn.o_proj.weight", {C, Hq * D});
    l.q_bias = bind.take_optional(p + "self_attn.q_proj.bias", {Hq * D}, c.attention_bias, true);
    l.k_bias = bind.take_optional(p + "self_attn.k_proj.bias", {Hkv * D}, c.attention_bias, true);
    l.v_bias = bind.take_optional(p + "self_attn.v_proj.bias", {Hkv * D}, c.attention_bias, true);
    l.o_bias = bind.take_optional(p + "self_attn.o_proj.bias", {C}, c.attention_output_bias, true);
    l.q_norm = bind.take_optional(p + "self_attn.q_norm.weight", {D}, c.qk_norm, true);
    l.k_norm = bind.take_optional(p + "self_attn.k_norm.weight", {D}, c.qk_norm, true);
    l.gate_proj = bind.take(p + "mlp.gate_proj.weight", {F, C});
    l.up_proj = bind.take(p + "mlp.up_proj.weight", {F, C});
    l.down_proj = bind.take(p + "mlp.down_proj.weight", {C, F});
    l.gate_bias = bind.take_optional(p + "mlp.gate_proj.bias", {F}, c.mlp_bias, true);
    l.up_bias = bind.take_optional(p + "mlp.up_proj.bias", {F}, c.mlp_bias, true);
    l.down_bias = bind.take_optional(p + "mlp.down_proj.bias", {C}, c.mlp_bias, true);
    w.layers.push_back(std::move(l));
  }
  bind.check_all_used();
  return w;
}

// Applies RoPE to x (T, H, D). Dynamic NTK scaling depends on each sequence's length, so it is applied per
// sequence (a packed batch then equals its sequences run alone); other types use one table for the batch.
// positions: (T) on x's device; host_positions, host_cu: the same data on the host.
void apply_rope(Tensor& x, const Tensor& positions, const Tensor& host_positions, const Tensor& host_cu,
                const io::ModelConfig& c, const ops::RopeFrequencies& shared) {
  if (c.rope.type != ops::RopeType::Dynamic) {
    ops::rope(x, positions, shared);
    return;
  }
  const int32_t* cu = host_cu.data<int32_t>();
  const int32_t* pos = host_positions.data<int32_t>();
  for (int64_t b = 0; b + 1 < host_cu.numel(); ++b) {
    if (cu[b + 1] == cu[b]) continue;
    int32_t max_pos = 0;
    for (int32_t t = cu[b]; t < cu[b + 1]; ++t) max_pos = std::max(max_pos, pos[t]);
    ops::RopeFrequencies freqs = ops::rope_frequencies(c.rope, c.head_dim, int64_t{max_pos} + 1);
    Tensor xs = x.slice_rows(cu[b], cu[b + 1]);
    Tensor ps = positions.slice_rows(cu[b], cu[b + 1]);
    ops::rope(xs, ps, freqs);
  }
}

// y (=|+=) x W^T + b, plus the LoRA path scale * (x A^T) B^T when `lora` is defined (ops::lora_linear without
// dropout); a DoRA adapter (magnitude defined, `dora_norm` its weight norm) goes through ops::dora_linear.
//   x: (N, K) activations; y: (N, M); scratch: (>= N * r) F32 on x's device.
void linear_lora(const Tensor& x, const Tensor& w, const Tensor& bias, const LoraLinear& lora, const Tensor& dora_norm,
                 float scale, Tensor& y, bool accumulate, const Tensor& scratch) {
  if (!lora.defined()) {
    ops::linear(x, w, bias, y, accumulate);
    return;
  }
  const int64_t N = x.size(0), r = lora.a.size(0);
  Tensor xa = scratch.slice_rows(0, N * r).view({N, r});
  if (lora.dora()) {
    Tensor h = Tensor::empty({N, w.size(0)}, DType::F32, x.device(), MemoryCategory::Workspace);
    ops::dora_linear(x, w, bias, lora.a, lora.b, lora.magnitude, dora_norm, scale, {}, y, xa, h, accumulate);
    return;
  }
  ops::lora_linear(x, w, bias, lora.a, lora.b, scale, {}, y, xa, accumulate);
}

// `t` on `device` stored as `dtype`: converted where the data is (the CPU after load), then copied once; the same
// tensor when it already is.
Tensor placed(const Tensor& t, Device device, DType dtype) {
  if (!t.defined() || (t.device() == device && t.dtype() == dtype)) return t;
  Tensor converted = t;
  if (t.dtype() != dtype) {
    converted = Tensor::empty(t.shape(), dtype, t.device(), MemoryCategory::Weights);
    ops::cast(t, converted);
  }
  return converted.device() == device ? converted : converted.to(device, MemoryCategory::Weights);
}

// Activations follow the matrices: F32 on the CPU and for F32 matrices; on CUDA F16 for F16 matrices (torch_dtype
// float16: fp16 storage, fp32 accumulation, as torch autocast), BF16 for BF16 (and packed 4-bit) matrices.
DType activation_dtype_for(Device device, DType matrix_dtype) {
  if (!device.is_cuda() || matrix_dtype == DType::F32) return DType::F32;
  return matrix_dtype == DType::F16 ? DType::F16 : DType::BF16;
}

// A process-wide unique revision: a decode plan matches only the model object and placement it was made for, even when
// another model later lives at the same address.
uint64_t next_revision() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1);
}

// A host copy of a (small) I32 input.
Tensor on_host(const Tensor& t) { return t.device().is_cpu() ? t : t.to(Device::cpu(), MemoryCategory::Workspace); }

// `t` (any float dtype, any device) as F32 on the host.
Tensor host_f32(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.device().is_cpu() ? t : t.to(Device::cpu());
  Tensor f32 = Tensor::empty(t.shape(), DType::F32, t.device(), MemoryCategory::Activations);
  ops::cast(t, f32);
  return f32.device().is_cpu() ? f32 : f32.to(Device::cpu());
}

}  // namespace

void CausalLM::set_lora(LoraAdapters adapters) {
  check_whole("set_lora");
  const Device dev = device();
  SWIFT_CHECK(adapters.layers.empty() || static_cast<int64_t>(adapters.layers.size()) == config_.num_hidden_layers,
              "set_lora: adapters for {} layers on a model of {} layers", adapters.layers.size(),
              config_.num_hidden_layers);
  for (size_t i = 0; i < adapters.layers.size(); ++i) {
    for (int k = 0; k < kLinearKinds; ++k) {
      const LoraLinear& l = adapters.layers[i][static_cast<size_t>(k)];
      if (!l.defined()) continue;
      const auto [M, K] = linear_shape(config_, static_cast<LinearKind>(k));
      SWIFT_CHECK(l.a.size(1) == K && l.b.size(0) == M && l.b.size(1) == l.a.size(0),
                  "set_lora: adapter of '{}' has A {} and B {}, the layer is ({}, {})",
                  linear_module_path(static_cast<int64_t>(i), static_cast<LinearKind>(k)), shape_str(l.a.shape()),
                  shape_str(l.b.shape()), M, K);
      SWIFT_CHECK(!l.dora() || l.magnitude.shape() == (Shape{M}), "set_lora: DoRA magnitude of '{}' is {}, expected ({})",
                  linear_module_path(static_cast<int64_t>(i), static_cast<LinearKind>(k)), shape_str(l.magnitude.shape()),
                  M);
    }
  }
  for (const Tensor* t : {&adapters.embed_tokens, &adapters.lm_head}) {
    SWIFT_CHECK(!t->defined() || t->shape() == (Shape{config_.vocab_size, config_.hidden_size}),
                "set_lora: modules_to_save copy {} does not match the model's ({}, {})", t->str(), config_.vocab_size,
                config_.hidden_size);
  }
  // Adapters run where the model runs: A, B and magnitudes as F32; on a device, the modules_to_save copies take the
  // matrices' dtype (an F32 head would be converted at every step).
  for (auto& layer : adapters.layers) {
    for (LoraLinear& l : layer) {
      for (Tensor* t : {&l.a, &l.b, &l.magnitude}) *t = placed(*t, dev, DType::F32);
    }
  }
  for (Tensor* t : {&adapters.embed_tokens, &adapters.lm_head}) {
    *t = placed(*t, dev, dev.is_cpu() ? t->dtype() : weights_.embed_tokens.dtype());
  }
  std::vector<std::array<Tensor, kLinearKinds>> norms(adapters.layers.size());
  for (size_t i = 0; i < adapters.layers.size(); ++i) {
    const LayerWeights& lw = weights_.layers[i];
    const std::array<const Tensor*, kLinearKinds> base = {&lw.q_proj, &lw.k_proj, &lw.v_proj, &lw.o_proj,
                                                          &lw.gate_proj, &lw.up_proj, &lw.down_proj};
    for (int k = 0; k < kLinearKinds; ++k) {
      const LoraLinear& l = adapters.layers[i][static_cast<size_t>(k)];
      if (!l.defined() || !l.dora()) continue;
      Tensor& n = norms[i][static_cast<size_t>(k)];
      n = Tensor::empty({l.magnitude.numel()}, DType::F32, dev, MemoryCategory::Weights);
      ops::dora_weight_norm(*base[static_cast<size_t>(k)], l.a, l.b, adapters.scale, n);
    }
  }
  lora_ = std::move(adapters);
  dora_norms_ = std::move(norms);
  revision_ = next_revision();  // decode plans captured the old adapters' tables
}

CausalLM::CausalLM(io::ModelConfig config, std::map<std::string, Tensor> weights)
    : config_(std::move(config)), tensors_(std::move(weights)) {
  weights_ = bind_weights(config_, tensors_, config_.model_type);
  act_dtype_ = activation_dtype_for(device(), weights_.embed_tokens.dtype());
  revision_ = next_revision();
}

std::unique_ptr<CausalLM> CausalLM::from_weights(io::ModelConfig config, std::map<std::string, Tensor> weights) {
  return std::unique_ptr<CausalLM>(new CausalLM(std::move(config), std::move(weights)));
}

std::unique_ptr<CausalLM> CausalLM::load(const std::string& path) {
  namespace fs = std::filesystem;
  SWIFT_CHECK(fs::exists(path), "--model '{}': no such file or directory", path);
  if (fs::is_directory(path)) {
    io::ModelConfig config = io::load_model_config((fs::path(path) / "config.json").string());
    return from_weights(std::move(config), io::load_hf_weights(path));
  }
  SWIFT_CHECK(ends_with(path, ".gguf"), "--model '{}': expected a Hugging Face model directory or a .gguf file", path);
  io::GgufFile file = io::GgufFile::open(path);
  io::ModelConfig config = io::gguf_model_config(file);
  return from_weights(config, io::gguf_load_weights(file, config));
}

Tensor CausalLM::forward_hidden(const Tensor& ids, const Tensor& positions, const Tensor& cu_seqlens) const {
  return host_f32(run_layers(ids, positions, cu_seqlens, nullptr));
}

CausalLM::KvCache CausalLM::new_kv_cache(int64_t capacity) const {
  SWIFT_CHECK(capacity > 0, "KV cache: capacity must be positive, got {}", capacity);
  KvCache cache;
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    for (auto* side : {&cache.k, &cache.v}) {
      side->push_back(Tensor::empty({capacity, config_.num_key_value_heads, config_.head_dim}, act_dtype_, device(),
                                    MemoryCategory::Activations));
    }
  }
  return cache;
}

Tensor CausalLM::forward_cached(const std::vector<int32_t>& ids, KvCache& cache, bool all_logits) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  SWIFT_CHECK(n > 0, "forward_cached: no tokens");
  check_kv_cache("forward_cached", cache, n);
  if (n == 1 && cache.length > 0 && device().is_cuda() && decode_step_supported()) {
    return decode_step(ids[0], cache);  // the fixed-buffer step (CUDA graphs): model/decode_plan.cpp
  }
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = static_cast<int32_t>(cache.length + i);
  const Tensor cu = Tensor::from_i32({2}, {0, static_cast<int32_t>(n)});
  Tensor hidden = run_layers(Tensor::from_i32({n}, ids), Tensor::from_i32({n}, positions), cu, &cache);
  cache.length += n;
  return head_logits(all_logits ? hidden : hidden.slice_rows(n - 1, n));
}

void CausalLM::check_kv_cache(const char* op, const KvCache& cache, int64_t n) const {
  SWIFT_CHECK(static_cast<int64_t>(cache.k.size()) == config_.num_hidden_layers &&
                  cache.k.size() == cache.v.size(),
              "{}: the KV cache has {} layers, the model {} (make it with new_kv_cache)", op, cache.k.size(),
              config_.num_hidden_layers);
  SWIFT_CHECK(cache.k[0].device() == device() && cache.k[0].dtype() == act_dtype_,
              "{}: the KV cache {} does not match the model ({}, {} activations); make it with "
              "new_kv_cache after place()", op, cache.k[0].str(), device().str(), dtype_name(act_dtype_));
  SWIFT_CHECK(cache.length + n <= cache.capacity(),
              "KV cache full: {} cached + {} new tokens exceed its capacity of {} (raise --max_length or "
              "lower --max_new_tokens)", cache.length, n, cache.capacity());
}

Tensor CausalLM::head_logits(const Tensor& hidden) const {
  Tensor logits = Tensor::empty({hidden.size(0), config_.vocab_size}, hidden.dtype(), hidden.device());
  ops::linear(hidden, head_table(), Tensor(), logits);
  return host_f32(logits);
}

Tensor CausalLM::run_layers(const Tensor& ids_in, const Tensor& positions_in, const Tensor& cu_in,
                            KvCache* cache) const {
  check_whole("forward");
  const io::ModelConfig& c = config_;
  SWIFT_CHECK(tp_size_ == 1, "forward: this model holds tensor-parallel shard {} of {} of its linears "
              "(shard_for_tensor_parallel); the forward needs whole weights: load the model again", tp_rank_, tp_size_);
  const Device dev = device();
  const int64_t T = ids_in.numel();
  SWIFT_CHECK(ids_in.dtype() == DType::I32 && positions_in.dtype() == DType::I32 && cu_in.dtype() == DType::I32,
              "forward: ids {}, positions {} and cu_seqlens {} must be I32", ids_in.str(), positions_in.str(),
              cu_in.str());
  SWIFT_CHECK(positions_in.numel() == T, "forward: {} positions for {} tokens", positions_in.numel(), T);
  // Host copies for what the host reads (rope's table size, dynamic NTK ranges); one transfer to the device.
  const Tensor host_ids = on_host(ids_in), host_pos = on_host(positions_in), host_cu = on_host(cu_in);
  ops::check_cu_seqlens(host_cu, T, "forward");
  Tensor ids = host_ids, positions = host_pos, cu_seqlens = host_cu;
  if (!dev.is_cpu()) {
    const int64_t n_cu = host_cu.numel();
    Tensor packed = Tensor::empty({2 * T + n_cu}, DType::I32, Device::cpu(), MemoryCategory::Workspace);
    packed.slice_rows(0, T).copy_from(host_ids);
    packed.slice_rows(T, 2 * T).copy_from(host_pos);
    packed.slice_rows(2 * T, 2 * T + n_cu).copy_from(host_cu);
    const Tensor on_dev = packed.to(dev, MemoryCategory::Workspace);
    ids = on_dev.slice_rows(0, T);
    positions = on_dev.slice_rows(T, 2 * T);
    cu_seqlens = on_dev.slice_rows(2 * T, 2 * T + n_cu);
  }
  // Attention reads the lengths on the host: from host_cu, not by reading the device copy back (ops.h HostMirror).
  std::optional<ops::HostMirror> mirror_cu;
  if (!dev.is_cpu()) mirror_cu.emplace(cu_seqlens, host_cu);
  const int64_t C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  int32_t max_pos = 0;
  for (int64_t t = 0; t < T; ++t) max_pos = std::max(max_pos, host_pos.data<int32_t>()[t]);
  const ops::RopeFrequencies freqs = ops::rope_frequencies(c.rope, D, int64_t{max_pos} + 1);
  auto act = [&](const Shape& shape) { return Tensor::empty(shape, act_dtype_, dev, MemoryCategory::Activations); };

  Tensor x = act({T, C});   // residual stream
  Tensor h = act({T, C});   // normed input of a sub-block
  Tensor q = act({T, Hq * D});
  // Without a cache k and v are buffers; with one, the projections write into the cache rows (k only needs a
  // buffer when q/k norm reads it).
  Tensor k = (cache == nullptr || c.qk_norm) ? act({T, Hkv * D}) : Tensor();
  Tensor v = cache == nullptr ? act({T, Hkv * D}) : Tensor();
  Tensor qn = c.qk_norm ? act({T * Hq, D}) : Tensor();
  Tensor kn = c.qk_norm && cache == nullptr ? act({T * Hkv, D}) : Tensor();
  Tensor attn = act({T, Hq, D});
  Tensor gate = act({T, F});
  Tensor up = act({T, F});
  Tensor none;
  int64_t max_rank = 0;
  for (const auto& layer : lora_.layers)
    for (const LoraLinear& l : layer)
      if (l.defined()) max_rank = std::max(max_rank, l.a.size(0));
  const Tensor lora_scratch =
      max_rank > 0 ? Tensor::empty({T * max_rank}, DType::F32, dev, MemoryCategory::Workspace) : Tensor();
  static const std::array<LoraLinear, kLinearKinds> kNoLora{};
  static const std::array<Tensor, kLinearKinds> kNoNorms{};
  const float lora_scale = lora_.scale;
  const int64_t cached = cache == nullptr ? 0 : cache->length;

  ops::embedding(embed_table(), ids, x);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& l = weights_.layers[static_cast<size_t>(i)];
    const auto& ad = lora_.layers.empty() ? kNoLora : lora_.layers[static_cast<size_t>(i)];
    const auto& norms = dora_norms_.empty() ? kNoNorms : dora_norms_[static_cast<size_t>(i)];
    auto lin = [&](LinearKind kind, const Tensor& in, const Tensor& w, const Tensor& b, Tensor& out, bool acc) {
      linear_lora(in, w, b, ad[static_cast<size_t>(kind)], norms[static_cast<size_t>(kind)], lora_scale, out, acc,
                  lora_scratch);
    };
    // attention block: x += o_proj(attention(rope(norm(q)), rope(norm(k)), v))
    ops::rmsnorm(x, l.input_norm, eps, h, none);
    // k3, v3: (T, Hkv, D) this step's keys and values (rows of the cache when there is one)
    Tensor k3, v3;
    if (cache != nullptr) {
      k3 = cache->k[static_cast<size_t>(i)].slice_rows(cached, cached + T);
      v3 = cache->v[static_cast<size_t>(i)].slice_rows(cached, cached + T);
    } else {
      k3 = c.qk_norm ? kn.view({T, Hkv, D}) : k.view({T, Hkv, D});
      v3 = v.view({T, Hkv, D});
    }
    lin(LinearKind::Q, h, l.q_proj, l.q_bias, q, false);
    Tensor k_out = c.qk_norm ? k : k3.view({T, Hkv * D});
    lin(LinearKind::K, h, l.k_proj, l.k_bias, k_out, false);
    Tensor v_out = v3.view({T, Hkv * D});
    lin(LinearKind::V, h, l.v_proj, l.v_bias, v_out, false);
    Tensor q3 = q.view({T, Hq, D});
    if (c.qk_norm) {
      Tensor k_normed = k3.view({T * Hkv, D});
      ops::rmsnorm(q.view({T * Hq, D}), l.q_norm, eps, qn, none);
      ops::rmsnorm(k.view({T * Hkv, D}), l.k_norm, eps, k_normed, none);
      q3 = qn.view({T, Hq, D});
    }
    apply_rope(q3, positions, host_pos, host_cu, c, freqs);
    apply_rope(k3, positions, host_pos, host_cu, c, freqs);
    if (cached == 0) {  // packed forward, or the prefill of an empty cache: the batch attends to itself
      ops::attention(q3, k3, v3, cu_seqlens, scale, c.layer_window(i), attn, none);
    } else {  // attend to everything cached, this step's keys included
      ops::attention_decode(q3, cache->k[static_cast<size_t>(i)], cache->v[static_cast<size_t>(i)], cached, scale,
                            c.layer_window(i), attn);
    }
    lin(LinearKind::O, attn.view({T, Hq * D}), l.o_proj, l.o_bias, x, /*acc=*/true);
    // MLP block: x += down(silu(gate(norm(x))) * up(norm(x)))
    ops::rmsnorm(x, l.post_attention_norm, eps, h, none);
    lin(LinearKind::Gate, h, l.gate_proj, l.gate_bias, gate, false);
    lin(LinearKind::Up, h, l.up_proj, l.up_bias, up, false);
    ops::swiglu(gate, up, gate);
    lin(LinearKind::Down, gate, l.down_proj, l.down_bias, x, /*acc=*/true);
  }
  ops::rmsnorm(x, weights_.final_norm, eps, h, none);
  return h;
}

Tensor CausalLM::forward(const Tensor& ids, const Tensor& positions, const Tensor& cu_seqlens) const {
  return head_logits(run_layers(ids, positions, cu_seqlens, nullptr));
}

Tensor CausalLM::forward(const std::vector<int32_t>& ids) const {
  PackedBatch batch = pack_sequences({ids});
  return forward(batch.ids, batch.positions, batch.cu_seqlens);
}

void CausalLM::shard_for_tensor_parallel(int rank, int size) {
  check_whole("shard_for_tensor_parallel");
  const io::ModelConfig& c = config_;
  SWIFT_CHECK(size >= 1 && rank >= 0 && rank < size, "shard_for_tensor_parallel: rank {} of a group of {}", rank, size);
  SWIFT_CHECK(tp_size_ == 1, "shard_for_tensor_parallel: the model already holds shard {} of {}", tp_rank_, tp_size_);
  SWIFT_CHECK(lora_.layers.empty(), "shard_for_tensor_parallel: shard the base model before setting adapters");
  if (size == 1) return;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, F = c.intermediate_size;
  SWIFT_CHECK(Hq % size == 0 && Hkv % size == 0 && F % size == 0,
              "--tensor_model_parallel_size {}: the attention heads and the MLP's intermediate units are split over "
              "the group, but this model has {} query heads, {} key/value heads and intermediate_size {}; pick a "
              "size that divides all three (e.g. {})",
              size, Hq, Hkv, F, std::gcd(std::gcd(Hq, Hkv), F));
  using Layout = TensorParallelLayout;
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    LayerWeights& l = weights_.layers[i];
    const std::array<std::pair<Tensor*, Tensor*>, kLinearKinds> linears = {{
        {&l.q_proj, &l.q_bias}, {&l.k_proj, &l.k_bias}, {&l.v_proj, &l.v_bias}, {&l.o_proj, &l.o_bias},
        {&l.gate_proj, &l.gate_bias}, {&l.up_proj, &l.up_bias}, {&l.down_proj, &l.down_bias}}};
    for (int k = 0; k < kLinearKinds; ++k) {
      const auto kind = static_cast<LinearKind>(k);
      const bool column = kind != LinearKind::O && kind != LinearKind::Down;
      const std::string module = linear_module_path(static_cast<int64_t>(i), kind);
      auto [w, bias] = linears[static_cast<size_t>(k)];
      *w = tensor_parallel_shard(*w, column ? Layout::Rows : Layout::Columns, rank, size, module + ".weight");
      if (tensors_.count(module + ".weight")) tensors_[module + ".weight"] = *w;
      if (column && bias->defined()) {  // a row-parallel bias stays whole (rank 0 adds it to the summed output)
        *bias = tensor_parallel_shard(*bias, Layout::Rows, rank, size, module + ".bias");
        if (tensors_.count(module + ".bias")) tensors_[module + ".bias"] = *bias;
      }
    }
  }
  // Vocabulary-parallel embedding and head: this rank's rows; a tied head stays the embedding's (sharded) tensor.
  const bool tied = c.tie_word_embeddings || (weights_.lm_head.defined() &&
                                              weights_.lm_head.storage() == weights_.embed_tokens.storage());
  weights_.embed_tokens =
      tensor_parallel_shard(weights_.embed_tokens, Layout::VocabRows, rank, size, "model.embed_tokens.weight");
  if (tensors_.count("model.embed_tokens.weight")) tensors_["model.embed_tokens.weight"] = weights_.embed_tokens;
  if (tied) {
    weights_.lm_head = weights_.embed_tokens;
    tensors_.erase("lm_head.weight");  // an ignored tied copy: nothing keeps the whole table
  } else {
    weights_.lm_head = tensor_parallel_shard(weights_.lm_head, Layout::VocabRows, rank, size, "lm_head.weight");
    if (tensors_.count("lm_head.weight")) tensors_["lm_head.weight"] = weights_.lm_head;
  }
  tp_rank_ = rank;
  tp_size_ = size;
}

void CausalLM::place(Device device, DType matrix_dtype) {
  check_whole("place");
  SWIFT_CHECK(matrix_dtype == DType::F32 || matrix_dtype == DType::BF16 || matrix_dtype == DType::F16,
              "place: matrix dtype {} must be F32, BF16 or F16", dtype_name(matrix_dtype));
  auto move = [&](Tensor& t, DType dtype) { t = placed(t, device, dtype); };
  const bool tied = weights_.lm_head.defined() && weights_.lm_head.storage() == weights_.embed_tokens.storage();
  move(weights_.embed_tokens, matrix_dtype);
  if (tied) {
    weights_.lm_head = weights_.embed_tokens;
  } else {
    move(weights_.lm_head, matrix_dtype);
  }
  move(weights_.final_norm, DType::F32);
  for (LayerWeights& l : weights_.layers) {
    for (Tensor* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) {
      move(*m, matrix_dtype);
    }
    for (Tensor* v : {&l.input_norm, &l.post_attention_norm, &l.q_norm, &l.k_norm, &l.q_bias, &l.k_bias, &l.v_bias,
                      &l.o_bias, &l.gate_bias, &l.up_bias, &l.down_bias}) {
      move(*v, DType::F32);
    }
  }
  tensors_.clear();  // the loaded originals (host memory, mapped files) are no longer referenced
  act_dtype_ = activation_dtype_for(device, matrix_dtype);
  revision_ = next_revision();  // decode plans captured the old weights' addresses
  const bool has_adapters = !lora_.layers.empty() || lora_.embed_tokens.defined() || lora_.lm_head.defined();
  if (has_adapters) set_lora(std::move(lora_));  // move them along, DoRA norms against the placed weights
}

void CausalLM::offload_embedding() {
  const Device dev = device();
  SWIFT_CHECK(dev.is_cuda(), "--offload_embedding: the model is on {}; the embedding table is offloaded from a CUDA "
              "device to host memory (on the CPU it is there already: leave the option off)", dev.str());
  const bool tied = weights_.lm_head.defined() && weights_.lm_head.storage() == weights_.embed_tokens.storage();
  SWIFT_CHECK(!tied, "--offload_embedding: this model ties its embedding table to the LM head (tie_word_embeddings), "
              "which every step multiplies on the device; leave the option off for it");
  if (embedding_offloaded()) return;
  weights_.embed_tokens = ops::host_mapped_copy(weights_.embed_tokens);
  // The loaded tensors of a model built on the device (from_weights, never placed) hold the table too.
  if (auto it = tensors_.find("model.embed_tokens.weight"); it != tensors_.end()) it->second = weights_.embed_tokens;
  revision_ = next_revision();  // decode plans captured the table's address
}

namespace {
// A layer's seven matrices in LinearKind order.
std::array<Tensor*, kLinearKinds> layer_matrices(LayerWeights& l) {
  return {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj};
}
}  // namespace

void CausalLM::check_whole(const char* op) const {
  if (lent_.empty()) return;
  fail("{}: the matrices of layer {} (and {} more) are in a training run's keeping (frozen-weight streaming, "
       "--offload_frozen_layers); finish or destroy that TrainableModel first", op, *lent_.begin(), lent_.size() - 1);
}

std::array<Tensor, kLinearKinds> CausalLM::lend_layer_matrices(int64_t layer) {
  SWIFT_CHECK(layer >= 0 && layer < config_.num_hidden_layers, "lend_layer_matrices: layer {} of {}", layer,
              config_.num_hidden_layers);
  SWIFT_CHECK(lent_.count(layer) == 0, "lend_layer_matrices: layer {} is lent already", layer);
  const std::array<Tensor*, kLinearKinds> w = layer_matrices(weights_.layers[static_cast<size_t>(layer)]);
  std::array<Tensor, kLinearKinds> out;
  for (int k = 0; k < kLinearKinds; ++k) {
    out[static_cast<size_t>(k)] = *w[static_cast<size_t>(k)];
    *w[static_cast<size_t>(k)] = Tensor();
    // A model built on the device (from_weights, never placed) holds the loaded tensors too: they come back with
    // restore_layer_matrices.
    const std::string name = linear_module_path(layer, static_cast<LinearKind>(k)) + ".weight";
    if (tensors_.erase(name) != 0) lent_names_.insert(name);
  }
  lent_.insert(layer);
  revision_ = next_revision();  // decode plans captured the matrices' addresses
  return out;
}

void CausalLM::restore_layer_matrices(int64_t layer, const std::array<Tensor, kLinearKinds>& matrices) {
  SWIFT_CHECK(lent_.count(layer) != 0, "restore_layer_matrices: layer {} is not lent", layer);
  const std::array<Tensor*, kLinearKinds> w = layer_matrices(weights_.layers[static_cast<size_t>(layer)]);
  for (int k = 0; k < kLinearKinds; ++k) {
    const Tensor& m = matrices[static_cast<size_t>(k)];
    SWIFT_CHECK(m.defined() && m.device() == device(), "restore_layer_matrices: layer {} matrix {} must be on {}",
                layer, k, device().str());
    *w[static_cast<size_t>(k)] = m;
    const std::string name = linear_module_path(layer, static_cast<LinearKind>(k)) + ".weight";
    if (lent_names_.erase(name) != 0) tensors_[name] = m;
  }
  lent_.erase(layer);
  revision_ = next_revision();
}

PackedBatch pack_sequences(const std::vector<std::vector<int32_t>>& sequences) {
  std::vector<int32_t> ids, positions, cu{0};
  for (const auto& seq : sequences) {
    for (size_t i = 0; i < seq.size(); ++i) {
      ids.push_back(seq[i]);
      positions.push_back(static_cast<int32_t>(i));
    }
    cu.push_back(static_cast<int32_t>(ids.size()));
  }
  const int64_t T = static_cast<int64_t>(ids.size());
  return {Tensor::from_i32({T}, ids), Tensor::from_i32({T}, positions),
          Tensor::from_i32({static_cast<int64_t>(cu.size())}, cu)};
}

}  // namespace swift::model
