// model/training.cpp — forward with saved activations, explicit backward per block, gradient checkpointing.
//
// Block (decoder layer) forward, shapes with T tokens:
//   h1 = rmsnorm(x_in)                       q, k, v = linear(h1)   [LoRA: + scale * dropout(h1) A^T B^T]
//   q3, k3 = rope(qk_norm(q), qk_norm(k))    attn = attention(q3, k3, v)
//   x_mid = x_in + o_proj(attn)              h2 = rmsnorm(x_mid)
//   gate, up = linear(h2)                    act = silu(gate) * up        x_out = x_mid + down_proj(act)
// The backward walks the same steps in reverse; the residual stream's gradient `d` is carried in place.
#include "model/training.h"

#include <cmath>

#include "core/error.h"
#include "core/seed.h"

namespace swift::model {

namespace {

constexpr int32_t kIgnore = -100;

Tensor f32_master(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.clone(MemoryCategory::Weights);
  Tensor master = Tensor::empty(t.shape(), DType::F32, t.device(), MemoryCategory::Weights);
  ops::cast(t, master);
  return master;
}

Tensor zeros_like(const Tensor& t, MemoryCategory category) {
  return Tensor::zeros(t.shape(), DType::F32, t.device(), category);
}

}  // namespace

TunerType tuner_type_from_string(const std::string& name) {
  if (name == "lora") return TunerType::Lora;
  if (name == "full") return TunerType::Full;
  fail("--tuner_type '{}' is not supported yet (lora, full)", name);
}

Tensor shift_labels(const Tensor& ids, const Tensor& loss_mask, const Tensor& cu_seqlens) {
  const int64_t T = ids.numel();
  SWIFT_CHECK(loss_mask.numel() == T && loss_mask.dtype() == DType::U8,
              "shift_labels: loss_mask {} must be U8 with one entry per token ({})", loss_mask.str(), T);
  ops::check_cu_seqlens(cu_seqlens, T, "shift_labels");
  Tensor labels = Tensor::empty({T}, DType::I32);
  const int32_t* id = ids.data<int32_t>();
  const uint8_t* mask = loss_mask.data<uint8_t>();
  const int32_t* cu = cu_seqlens.data<int32_t>();
  int32_t* out = labels.data<int32_t>();
  for (int64_t b = 0; b + 1 < cu_seqlens.numel(); ++b) {
    for (int32_t t = cu[b]; t < cu[b + 1]; ++t) {
      out[t] = (t + 1 < cu[b + 1] && mask[t + 1]) ? id[t + 1] : kIgnore;
    }
  }
  return labels;
}

struct TrainableModel::Activations {
  Tensor x_in, h1, rstd1, q, k, v, q_rstd, k_rstd, q3, k3, attn, lse, x_mid, h2, rstd2, gate, up, act;
  std::array<Tensor, kLinearKinds> xa;
  std::array<Tensor, kLinearKinds> h;  // DoRA: the direction's output before the magnitude (dora_linear)
};

TrainableModel::TrainableModel(CausalLM& model, TunerType type, LoraAdapters lora)
    : model_(model), type_(type), lora_(std::move(lora)) {
  const io::ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  device_ = model.device();
  act_dtype_ = device_.is_cuda() ? DType::BF16 : DType::F32;
  for (auto& layer : lora_.layers) {  // adapters train where the model lives
    for (LoraLinear& ad : layer) {
      if (ad.a.defined() && !(ad.a.device() == device_)) ad.a = ad.a.to(device_, MemoryCategory::Weights);
      if (ad.b.defined() && !(ad.b.device() == device_)) ad.b = ad.b.to(device_, MemoryCategory::Weights);
      if (ad.magnitude.defined() && !(ad.magnitude.device() == device_)) {
        ad.magnitude = ad.magnitude.to(device_, MemoryCategory::Weights);
      }
    }
  }
  for (Tensor* t : {&lora_.embed_tokens, &lora_.lm_head}) {
    if (t->defined() && !(t->device() == device_)) *t = t->to(device_, MemoryCategory::Weights);
  }
  tied_ = c.tie_word_embeddings;
  SWIFT_CHECK(type == TunerType::Lora || lora_.layers.empty(), "full fine-tuning takes no LoRA adapters");
  SWIFT_CHECK(type == TunerType::Full || static_cast<int64_t>(lora_.layers.size()) == c.num_hidden_layers,
              "LoRA training needs adapters for all {} layers (create_lora)", c.num_hidden_layers);
  const bool full = type == TunerType::Full;
  auto add_param = [&](const std::string& name, Tensor& value, Tensor& grad) {
    grad = zeros_like(value, MemoryCategory::Gradients);
    params_.push_back({name, value, grad});
  };
  // Full: every weight gets an F32 master copy; LoRA: the frozen base weights are used as stored.
  auto weight = [&](const Tensor& base, const std::string& name, Tensor& grad) {
    if (!full || !base.defined()) return base;
    Tensor master = f32_master(base);
    add_param(name, master, grad);
    return master;
  };
  // nn.Embedding(padding_idx=config.pad_token_id) in transformers' llama/qwen2/qwen3/mistral: the pad row gets
  // no gradient from the lookups (PEFT's modules_to_save copy keeps that padding_idx).
  padding_id_ = c.pad_token_id >= 0 && c.pad_token_id < c.vocab_size ? c.pad_token_id : -1;
  embed_ = weight(w.embed_tokens, "model.embed_tokens.weight", grad_embed_);
  if (!full && lora_.embed_tokens.defined()) {  // modules_to_save: a trained copy replaces the embedding
    embed_ = lora_.embed_tokens;
    add_param(io::peft_module_weight_name(kEmbedModule), lora_.embed_tokens, grad_embed_);
  }
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(i)];
    Layer& l = layers_[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    l.input_norm = weight(lw.input_norm, p + "input_layernorm.weight", l.grad_input_norm);
    const std::array<std::pair<const Tensor*, const Tensor*>, kLinearKinds> base = {{
        {&lw.q_proj, &lw.q_bias}, {&lw.k_proj, &lw.k_bias}, {&lw.v_proj, &lw.v_bias}, {&lw.o_proj, &lw.o_bias},
        {&lw.gate_proj, &lw.gate_bias}, {&lw.up_proj, &lw.up_bias}, {&lw.down_proj, &lw.down_bias}}};
    for (int k = 0; k < kLinearKinds; ++k) {
      Linear& lin = l.linears[static_cast<size_t>(k)];
      const std::string module = linear_module_path(i, static_cast<LinearKind>(k));
      lin.w = weight(*base[static_cast<size_t>(k)].first, module + ".weight", lin.grad_w);
      lin.bias = weight(*base[static_cast<size_t>(k)].second, module + ".bias", lin.grad_bias);
      if (!full) {
        LoraLinear& ad = lora_.layers[static_cast<size_t>(i)][static_cast<size_t>(k)];
        if (ad.defined()) {
          lin.lora = &ad;
          add_param(io::peft_lora_name(module, "lora_A"), ad.a, lin.grad_a);
          add_param(io::peft_lora_name(module, "lora_B"), ad.b, lin.grad_b);
          if (ad.dora()) add_param(io::peft_magnitude_name(module), ad.magnitude, lin.grad_m);
        }
      }
    }
    l.q_norm = weight(lw.q_norm, p + "self_attn.q_norm.weight", l.grad_q_norm);
    l.k_norm = weight(lw.k_norm, p + "self_attn.k_norm.weight", l.grad_k_norm);
    l.post_norm = weight(lw.post_attention_norm, p + "post_attention_layernorm.weight", l.grad_post_norm);
  }
  final_norm_ = weight(w.final_norm, "model.norm.weight", grad_final_norm_);
  if (!full) {  // the base head (the base embedding when tied), or its modules_to_save copy
    lm_head_ = w.lm_head;
    if (lora_.lm_head.defined()) {
      lm_head_ = lora_.lm_head;
      add_param(io::peft_module_weight_name(kLmHeadModule), lora_.lm_head, grad_lm_head_);
    }
  } else if (tied_) {
    lm_head_ = embed_;
    grad_lm_head_ = grad_embed_;
  } else {
    lm_head_ = weight(w.lm_head, "lm_head.weight", grad_lm_head_);
  }
  SWIFT_CHECK(!params_.empty(), "nothing to train: no LoRA adapter and not full fine-tuning");
}

int64_t TrainableModel::trainable_count() const {
  int64_t n = 0;
  for (const Parameter& p : params_) n += p.value.numel();
  return n;
}

void TrainableModel::zero_grad() {
  for (Parameter& p : params_) p.grad.zero_();
}

std::map<std::string, Tensor> TrainableModel::full_weights() const {
  SWIFT_CHECK(type_ == TunerType::Full, "full_weights: only for full fine-tuning");
  std::map<std::string, Tensor> out;
  for (const Parameter& p : params_) out[p.name] = p.value;
  return out;
}

ops::Dropout TrainableModel::dropout_for(uint64_t seed, int64_t layer, int kind, bool training) const {
  if (!training || lora_.dropout == 0.0f) return {};
  return {lora_.dropout, mix_seed(seed, static_cast<uint64_t>(layer), static_cast<uint64_t>(kind))};
}

// Rope over (T, H, D); dynamic NTK scaling depends on each sequence's length, so it goes sequence by sequence
// exactly as CausalLM's forward does.
void TrainableModel::apply_rope(Tensor& x, const MicroBatch& b, bool backward) const {
  const io::ModelConfig& c = model_.config();
  auto run = [&](Tensor& xs, const Tensor& ps, int64_t seq_len) {
    const ops::RopeFrequencies f = ops::rope_frequencies(c.rope, c.head_dim, seq_len);
    backward ? ops::rope_backward(xs, ps, f) : ops::rope(xs, ps, f);
  };
  const MicroBatch& host = host_batch_ != nullptr ? *host_batch_ : b;  // b may live on the device
  const int32_t* pos = host.positions.data<int32_t>();
  const int32_t* cu = host.cu_seqlens.data<int32_t>();
  if (c.rope.type != ops::RopeType::Dynamic) {
    int32_t max_pos = 0;
    for (int64_t t = 0; t < b.positions.numel(); ++t) max_pos = std::max(max_pos, pos[t]);
    run(x, b.positions, int64_t{max_pos} + 1);
    return;
  }
  for (int64_t s = 0; s + 1 < b.cu_seqlens.numel(); ++s) {
    if (cu[s + 1] == cu[s]) continue;
    int32_t max_pos = 0;
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) max_pos = std::max(max_pos, pos[t]);
    Tensor xs = x.slice_rows(cu[s], cu[s + 1]);
    run(xs, b.positions.slice_rows(cu[s], cu[s + 1]), int64_t{max_pos} + 1);
  }
}

void TrainableModel::layer_forward(int64_t i, const MicroBatch& b, const Tensor& x_in, Activations& a, Tensor& x_out,
                                   uint64_t seed, bool training) const {
  const io::ModelConfig& c = model_.config();
  const Layer& l = layers_[static_cast<size_t>(i)];
  const int64_t T = x_in.size(0), C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto lin = [&](LinearKind kind, const Tensor& x, Tensor& y, bool accumulate) {
    const Linear& L = l.linears[static_cast<size_t>(kind)];
    if (L.lora == nullptr) return ops::linear(x, L.w, L.bias, y, accumulate);
    Tensor& xa = a.xa[static_cast<size_t>(kind)];
    if (!xa.defined()) xa = stat({T, L.lora->a.size(0)});
    if (L.lora->dora()) {
      Tensor& h = a.h[static_cast<size_t>(kind)];
      if (!h.defined()) h = stat({T, L.lora->b.size(0)});
      return ops::dora_linear(x, L.w, L.bias, L.lora->a, L.lora->b, L.lora->magnitude,
                              dora_norms_[static_cast<size_t>(i)][static_cast<size_t>(kind)], lora_.scale,
                              dropout_for(seed, i, static_cast<int>(kind), training), y, xa, h, accumulate);
    }
    ops::lora_linear(x, L.w, L.bias, L.lora->a, L.lora->b, lora_.scale,
                     dropout_for(seed, i, static_cast<int>(kind), training), y, xa, accumulate);
  };
  a.x_in = x_in;
  a.h1 = act({T, C});
  a.rstd1 = stat({T});
  ops::rmsnorm(x_in, l.input_norm, eps, a.h1, a.rstd1);
  a.q = act({T, Hq * D});
  a.k = act({T, Hkv * D});
  a.v = act({T, Hkv * D});
  lin(LinearKind::Q, a.h1, a.q, false);
  lin(LinearKind::K, a.h1, a.k, false);
  lin(LinearKind::V, a.h1, a.v, false);
  if (c.qk_norm) {
    a.q3 = act({T, Hq, D});
    a.k3 = act({T, Hkv, D});
    a.q_rstd = stat({T * Hq});
    a.k_rstd = stat({T * Hkv});
    Tensor q3 = a.q3.view({T * Hq, D}), k3 = a.k3.view({T * Hkv, D});
    ops::rmsnorm(a.q.view({T * Hq, D}), l.q_norm, eps, q3, a.q_rstd);
    ops::rmsnorm(a.k.view({T * Hkv, D}), l.k_norm, eps, k3, a.k_rstd);
  } else {  // rope in place: the pre-rope q and k are not needed by the backward
    a.q3 = a.q.view({T, Hq, D});
    a.k3 = a.k.view({T, Hkv, D});
  }
  apply_rope(a.q3, b, false);
  apply_rope(a.k3, b, false);
  a.attn = act({T, Hq, D});
  a.lse = stat({Hq, T});
  ops::attention(a.q3, a.k3, a.v.view({T, Hkv, D}), b.cu_seqlens, 1.0f / std::sqrt(static_cast<float>(D)),
                 c.layer_window(i), a.attn, a.lse);
  a.x_mid = x_in.clone(MemoryCategory::Activations);
  lin(LinearKind::O, a.attn.view({T, Hq * D}), a.x_mid, true);
  a.h2 = act({T, C});
  a.rstd2 = stat({T});
  ops::rmsnorm(a.x_mid, l.post_norm, eps, a.h2, a.rstd2);
  a.gate = act({T, F});
  a.up = act({T, F});
  a.act = act({T, F});
  lin(LinearKind::Gate, a.h2, a.gate, false);
  lin(LinearKind::Up, a.h2, a.up, false);
  ops::swiglu(a.gate, a.up, a.act);
  x_out.copy_from(a.x_mid);
  lin(LinearKind::Down, a.act, x_out, true);
}

void TrainableModel::layer_backward(int64_t i, const MicroBatch& b, Activations& a, Tensor& d, uint64_t seed) {
  const io::ModelConfig& c = model_.config();
  Layer& l = layers_[static_cast<size_t>(i)];
  const int64_t T = d.size(0), C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  Tensor none;
  // dy -> dx (= or +=) through one linear, adding its parameters' gradients.
  auto lin_back = [&](LinearKind kind, const Tensor& dy, const Tensor& x, Tensor& dx, bool accumulate_dx) {
    Linear& L = l.linears[static_cast<size_t>(kind)];
    if (L.lora == nullptr) return ops::linear_backward(dy, x, L.w, dx, L.grad_w, L.grad_bias, accumulate_dx);
    if (L.lora->dora()) {
      return ops::dora_linear_backward(dy, x, L.w, L.lora->a, L.lora->b, L.lora->magnitude,
                                       dora_norms_[static_cast<size_t>(i)][static_cast<size_t>(kind)],
                                       a.xa[static_cast<size_t>(kind)], a.h[static_cast<size_t>(kind)], lora_.scale,
                                       dropout_for(seed, i, static_cast<int>(kind), true), dx, L.grad_a, L.grad_b,
                                       L.grad_m, accumulate_dx);
    }
    ops::lora_linear_backward(dy, x, L.w, L.lora->a, L.lora->b, a.xa[static_cast<size_t>(kind)], lora_.scale,
                              dropout_for(seed, i, static_cast<int>(kind), true), dx, L.grad_a, L.grad_b,
                              accumulate_dx);
  };
  // MLP block: d is the gradient of x_out; it is also the residual gradient of x_mid.
  Tensor d_act = act({T, F}), d_up = act({T, F}), d_h = act({T, C});
  lin_back(LinearKind::Down, d, a.act, d_act, false);
  ops::swiglu_backward(d_act, a.gate, a.up, d_act, d_up);  // d_act now holds d_gate
  lin_back(LinearKind::Gate, d_act, a.h2, d_h, false);
  lin_back(LinearKind::Up, d_up, a.h2, d_h, true);
  ops::rmsnorm_backward(d_h, a.x_mid, l.post_norm, a.rstd2, d, l.grad_post_norm, /*accumulate_dx=*/true);
  // Attention block: d is now the gradient of x_mid, and the residual gradient of x_in.
  Tensor d_attn = act({T, Hq * D});
  lin_back(LinearKind::O, d, a.attn.view({T, Hq * D}), d_attn, false);
  Tensor dq3 = act({T, Hq, D}), dk3 = act({T, Hkv, D}), dv = act({T, Hkv, D});
  ops::attention_backward(d_attn.view({T, Hq, D}), a.q3, a.k3, a.v.view({T, Hkv, D}), a.attn, a.lse, b.cu_seqlens,
                          1.0f / std::sqrt(static_cast<float>(D)), c.layer_window(i), dq3, dk3, dv);
  apply_rope(dq3, b, true);
  apply_rope(dk3, b, true);
  Tensor dq = dq3.view({T, Hq * D}), dk = dk3.view({T, Hkv * D});
  if (c.qk_norm) {
    dq = act({T, Hq * D});
    dk = act({T, Hkv * D});
    Tensor dq_flat = dq.view({T * Hq, D}), dk_flat = dk.view({T * Hkv, D});
    ops::rmsnorm_backward(dq3.view({T * Hq, D}), a.q.view({T * Hq, D}), l.q_norm, a.q_rstd, dq_flat, l.grad_q_norm);
    ops::rmsnorm_backward(dk3.view({T * Hkv, D}), a.k.view({T * Hkv, D}), l.k_norm, a.k_rstd, dk_flat,
                          l.grad_k_norm);
  }
  lin_back(LinearKind::Q, dq, a.h1, d_h, false);
  lin_back(LinearKind::K, dk, a.h1, d_h, true);
  lin_back(LinearKind::V, dv.view({T, Hkv * D}), a.h1, d_h, true);
  ops::rmsnorm_backward(d_h, a.x_in, l.input_norm, a.rstd1, d, l.grad_input_norm, /*accumulate_dx=*/true);
  (void)none;
}

StepStats TrainableModel::run(const MicroBatch& host_batch, float grad_scale, uint64_t seed, bool checkpoint,
                              bool backward) {
  const io::ModelConfig& c = model_.config();
  const int64_t T = host_batch.ids.numel(), C = c.hidden_size, L = c.num_hidden_layers;
  SWIFT_CHECK(host_batch.positions.numel() == T && host_batch.labels.numel() == T,
              "micro-batch: ids ({}), positions ({}) and labels ({}) must have one entry per token", T,
              host_batch.positions.numel(), host_batch.labels.numel());
  ops::check_cu_seqlens(host_batch.cu_seqlens, T, "micro-batch");
  // The batch is built on the host; a copy goes to the model's device once (a few KB), and apply_rope keeps
  // reading positions on the host.
  MicroBatch placed;
  if (!device_.is_cpu()) {
    placed = {host_batch.ids.to(device_), host_batch.positions.to(device_), host_batch.cu_seqlens.to(device_),
              host_batch.labels.to(device_)};
  }
  const MicroBatch& b = device_.is_cpu() ? host_batch : placed;
  host_batch_ = &host_batch;
  struct ResetHost {
    const MicroBatch*& p;
    ~ResetHost() { p = nullptr; }
  } reset_host{host_batch_};
  const bool training = backward;
  compute_dora_norms();
  std::vector<Activations> acts(static_cast<size_t>(checkpoint || !backward ? 1 : L));
  std::vector<Tensor> inputs(static_cast<size_t>(L));  // block inputs (the checkpoints)
  Tensor x = act({T, C});
  ops::embedding(embed_, b.ids, x);
  for (int64_t i = 0; i < L; ++i) {
    inputs[static_cast<size_t>(i)] = x;
    Activations& a = acts[static_cast<size_t>(checkpoint || !backward ? 0 : i)];
    a = Activations{};
    Tensor next = act({T, C});
    layer_forward(i, b, x, a, next, seed, training);
    x = next;
  }
  Tensor hidden = act({T, C}), rstd = stat({T});
  ops::rmsnorm(x, final_norm_, static_cast<float>(c.rms_norm_eps), hidden, rstd);
  Tensor dhidden = backward ? act({T, C}) : Tensor();
  Tensor dhead = backward ? grad_lm_head_ : Tensor();
  const ops::CrossEntropyStats ce = ops::cross_entropy(hidden, lm_head_, b.labels, grad_scale, dhidden, dhead);
  StepStats stats{ce.loss_sum, ce.tokens, ce.correct};
  if (!backward) return stats;

  Tensor d = act({T, C});
  ops::rmsnorm_backward(dhidden, x, final_norm_, rstd, d, grad_final_norm_);
  for (int64_t i = L - 1; i >= 0; --i) {
    Activations& a = acts[static_cast<size_t>(checkpoint ? 0 : i)];
    if (checkpoint) {  // recompute this block from its saved input (same dropout masks)
      a = Activations{};
      Tensor out = act({T, C});
      layer_forward(i, b, inputs[static_cast<size_t>(i)], a, out, seed, training);
    }
    layer_backward(i, b, a, d, seed);
    a = Activations{};  // free this block's activations before the next
  }
  if (grad_embed_.defined()) ops::embedding_backward(d, b.ids, grad_embed_, padding_id_);
  return stats;
}

// DoRA's weight norms of the current A and B (PEFT recomputes them in every forward and detaches them): computed
// once per micro-batch, shared by the forward, the checkpoint recompute and the backward.
void TrainableModel::compute_dora_norms() {
  if (dora_norms_.empty()) dora_norms_.resize(lora_.layers.size());
  for (size_t i = 0; i < lora_.layers.size(); ++i) {
    for (int k = 0; k < kLinearKinds; ++k) {
      const LoraLinear& ad = lora_.layers[i][static_cast<size_t>(k)];
      if (!ad.defined() || !ad.dora()) continue;
      Tensor& n = dora_norms_[i][static_cast<size_t>(k)];
      if (!n.defined()) n = Tensor::empty({ad.magnitude.numel()}, DType::F32, device_, MemoryCategory::Weights);
      ops::dora_weight_norm(layers_[i].linears[static_cast<size_t>(k)].w, ad.a, ad.b, lora_.scale, n);
    }
  }
}

void TrainableModel::set_activation_dtype(DType dtype) {
  SWIFT_CHECK(dtype == DType::F32 || (dtype == DType::BF16 && device_.is_cuda()),
              "activation dtype {} is not supported on {} (F32 everywhere, BF16 on CUDA)", dtype_name(dtype), device_.str());
  act_dtype_ = dtype;
}

Tensor TrainableModel::act(const Shape& shape) const {
  return Tensor::empty(shape, act_dtype_, device_, MemoryCategory::Activations);
}

Tensor TrainableModel::stat(const Shape& shape) const {
  return Tensor::empty(shape, DType::F32, device_, MemoryCategory::Activations);
}

StepStats TrainableModel::forward_backward(const MicroBatch& batch, float grad_scale, uint64_t dropout_seed,
                                           bool gradient_checkpointing) {
  return run(batch, grad_scale, dropout_seed, gradient_checkpointing, true);
}

StepStats TrainableModel::evaluate(const MicroBatch& batch) { return run(batch, 0.0f, 0, true, false); }

}  // namespace swift::model
