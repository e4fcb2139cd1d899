// model/training.cpp — forward with saved activations, explicit backward per block, gradient checkpointing.
//
// Block (decoder layer) forward, shapes with T tokens:
//   h1 = rmsnorm(x_in)                       q, k, v = linear(h1)   [LoRA: + scale * dropout(h1) A^T B^T]
//   q3, k3 = rope(qk_norm(q), qk_norm(k))    attn = attention(q3, k3, v)
//   x_mid = x_in + o_proj(attn)              h2 = rmsnorm(x_mid)
//   gate, up = linear(h2)                    act = silu(gate) * up        x_out = x_mid + down_proj(act)
// Where ops::lora_b_product_in_gemm (BF16 on an H100 / H200) a plain LoRA linear's B product is inside its frozen
// product: gate and up then feed ops::swiglu (which on CUDA also draws down's dropout mask into its keep bits,
// ops::swiglu_drawing_mask, for down's xa pass to read; SWIFT_SWIGLU_DRAWS_MASK=0: drawn by that pass, the same
// bits), and o / down take the residual in that product too
// (ops::lora_linear_residual_from_xa, one rounding; SWIFT_LORA_RESIDUAL_IN_GEMM=0: an ops::add after it). Elsewhere:
// when gate and up are both plain LoRA linears their B products are added in the swiglu's pass (ops::swiglu_lora, the
// same bits as lora_linear's; SWIFT_LORA_FOLD_SWIGLU=0 leaves them in lora_linear, for A/B measurements). A plain
// LoRA o / down writes its frozen product, and its B product comes with the residual add (ops::add_lora_residual:
// one pass instead of a copy of the residual, the product's read-modify-write and the B product's;
// SWIFT_LORA_FOLD_RESIDUAL=0 for A/B measurements). A plain (unadapted) o / down reads the residual as its product's
// C input (ops::linear_residual: no copy of the residual first; SWIFT_LINEAR_RESIDUAL=0 for A/B measurements).
// Full fine-tuning on CUDA with 16-bit activations: the products read the F32 masters cast once per forward
// (refresh_product_weights), not converted in each product; q, k and v run as one product (q and k roped and v
// copied out of it by one ops::rope_qkv), with one input- and one weight-gradient product in the backward.
// The backward walks the same steps in reverse; the residual stream's gradient `d` is carried in place.
// Sequence parallel (P ranks): T is this rank's share of the padded batch; q, k, v are exchanged right after their
// projections (scatter_heads: all Ta = P*T tokens, H/P heads), so qk-norm, rope and attention run on whole sequences
// with global positions; the attention output goes back (gather_heads) before o_proj. The backward exchanges the
// gradients the other way round at the same two places. With fewer key/value heads than ranks each is repeated
// (repeat_heads) so every rank gets the one its query heads use; the repeats' gradients are summed on the way back.
// Tensor parallel (N ranks): the linears hold this rank's shards (model/parallel.h), so q/k/v carry Hq/N and Hkv/N
// heads and gate/up F/N units; o_proj's and down_proj's outputs are partial sums, all-reduced before the residual
// add; in the backward the input gradients of q/k/v and of gate/up are partial sums, all-reduced before the norms'
// backward. The embedding table and the LM head hold this rank's vocabulary rows: the lookup is all-reduced (other
// ranks' ids give zero rows), the loss goes through vocab_parallel_cross_entropy (model/parallel.h), whose dhidden
// is the group's sum. Everything else (norms, residual stream, its gradient) is whole and identical on every rank.
#include "model/training.h"

#include <algorithm>
#include <optional>
#include <set>
#include <unordered_map>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "core/error.h"
#include "core/profile.h"
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

namespace {
// An integer measurement knob from the environment (unset or empty: fallback); anything else is refused by name.
int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  SWIFT_CHECK(end != v && *end == '\0', "{}='{}' is not an integer", name, v);
  return n;
}
}  // namespace

struct TrainableModel::Activations {
  Tensor x_in, h1, rstd1, q, k, v, q_rstd, k_rstd, q3, k3, attn, lse, x_mid, h2, rstd2, gate, up, act;
  Tensor attn_heads;  // attention's output (Ta, H/P, D); `attn` is o_proj's input (T, H*D): the same tensor without SP
  std::array<Tensor, kLinearKinds> xa;
  std::array<Tensor, kLinearKinds> h;  // DoRA: the direction's output before the magnitude (dora_linear)
  // LoRA dropout on CUDA: the forward's mask as bits (ops.h Dropout::keep_bits), read by the backward instead of
  // drawing it twice more. Rewritten by every forward of the layer (a checkpointed block's recompute reuses them).
  std::array<Tensor, kLinearKinds> keep_bits;
  // keep_bits[kind] holds this forward's mask before the linear's xa pass (down's, drawn by the swiglu's pass:
  // mlp_forward), so the pass reads it (ops.h Dropout::keep_bits_drawn). Set by each forward that draws it.
  std::array<bool, kLinearKinds> bits_drawn{};
  // A recompute (a checkpointed block's, set by run(); the selective MLP recompute's, by layer_backward): xa and
  // keep_bits hold the forward's, and the plain LoRA linears use them instead of their xa pass (linear_forward,
  // linear_rank_only): the same values.
  bool rank_kept = false;
};

TrainableModel::TrainableModel(CausalLM& model, TunerType type, LoraAdapters lora)
    : model_(model), type_(type), lora_(std::move(lora)) {
  const io::ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  device_ = model.device();
  // Activations follow the weights on CUDA: F16 matrices (--torch_dtype float16) compute in F16, everything else in
  // BF16 by default (set_activation_dtype picks F32 for exactness checks); the CPU computes in F32.
  act_dtype_ = !device_.is_cuda() ? DType::F32 : model.activation_dtype() == DType::F16 ? DType::F16 : DType::BF16;
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
  int64_t stage = -1;  // the backward stage that writes the gradients of the parameters added next
  auto add_param = [&](const std::string& name, Tensor& value, Tensor& grad) {
    grad = zeros_like(value, MemoryCategory::Gradients);
    params_.push_back({name, value, grad});
    grad_handles_.push_back({&grad});
    first_grad_stage_.push_back(stage);
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
  SWIFT_CHECK(!full || !model.embedding_offloaded(), "full fine-tuning trains the embedding table, which is "
              "offloaded to host memory (offload_embedding): leave --offload_embedding off");
  embed_ = weight(w.embed_tokens, "model.embed_tokens.weight", grad_embed_);
  if (full) embed16_ = w.embed_tokens;
  if (!full && lora_.embed_tokens.defined()) {  // modules_to_save: a trained copy replaces the embedding
    embed_ = lora_.embed_tokens;
    add_param(io::peft_module_weight_name(kEmbedModule), lora_.embed_tokens, grad_embed_);
  }
  layers_.resize(static_cast<size_t>(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(i)];
    Layer& l = layers_[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    stage = i;
    l.input_norm = weight(lw.input_norm, p + "input_layernorm.weight", l.grad_input_norm);
    const std::array<std::pair<const Tensor*, const Tensor*>, kLinearKinds> base = {{
        {&lw.q_proj, &lw.q_bias}, {&lw.k_proj, &lw.k_bias}, {&lw.v_proj, &lw.v_bias}, {&lw.o_proj, &lw.o_bias},
        {&lw.gate_proj, &lw.gate_bias}, {&lw.up_proj, &lw.up_bias}, {&lw.down_proj, &lw.down_bias}}};
    for (int k = 0; k < kLinearKinds; ++k) {
      Linear& lin = l.linears[static_cast<size_t>(k)];
      const std::string module = linear_module_path(i, static_cast<LinearKind>(k));
      lin.w = weight(*base[static_cast<size_t>(k)].first, module + ".weight", lin.grad_w);
      if (full) lin.w16 = *base[static_cast<size_t>(k)].first;  // storage for refresh_product_weights, if it fits
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
    if (full) pack_qkv_gradients(l);
    l.q_norm = weight(lw.q_norm, p + "self_attn.q_norm.weight", l.grad_q_norm);
    l.k_norm = weight(lw.k_norm, p + "self_attn.k_norm.weight", l.grad_k_norm);
    l.post_norm = weight(lw.post_attention_norm, p + "post_attention_layernorm.weight", l.grad_post_norm);
  }
  stage = c.num_hidden_layers;  // the head: written by the loss's backward, before any layer's
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
    for (size_t i = 0; i < params_.size(); ++i) {  // the embedding's gradient is first written by the head's backward
      if (grad_handles_[i].front() != &grad_embed_) continue;
      grad_handles_[i].push_back(&grad_lm_head_);
      first_grad_stage_[i] = stage;
    }
  } else {
    lm_head_ = weight(w.lm_head, "lm_head.weight", grad_lm_head_);
    head16_ = w.lm_head;
  }
  SWIFT_CHECK(!params_.empty(), "nothing to train: no LoRA adapter and not full fine-tuning");
}

int64_t TrainableModel::trainable_count() const {
  int64_t n = 0;
  for (const Parameter& p : params_) n += p.value.numel();
  return n;
}

void TrainableModel::zero_grad() {
  std::vector<Tensor> grads;
  for (Parameter& p : params_) {
    if (p.grad.defined()) grads.push_back(p.grad);  // with a gradient provider, the bound ones
  }
  ops::zero_gradients(grads);  // one launch on CUDA, not a memset per tensor (the gradients share the model's device)
  for (Layer& l : layers_) {
    for (Linear& L : l.linears) L.grad_w_stale = false;
  }
}

void TrainableModel::defer_zero_grad() {
  if (type_ != TunerType::Full || gradient_provider_ || parallel_.tp_size() > 1) return zero_grad();
  std::set<const void*> deferred;  // the grad_w storage the next backward writes
  for (Layer& l : layers_) {
    for (Linear& L : l.linears) {
      if (L.lora != nullptr || !L.grad_w.defined()) continue;
      L.grad_w_stale = true;
      deferred.insert(L.grad_w.raw());
    }
  }
  std::vector<Tensor> grads;
  for (Parameter& p : params_) {
    if (p.grad.defined() && deferred.count(p.grad.raw()) == 0) grads.push_back(p.grad);
  }
  ops::zero_gradients(grads);
}

bool TrainableModel::take_accumulate_dw(Linear& L) {
  const bool accumulate = !L.grad_w_stale;
  L.grad_w_stale = false;
  return accumulate;
}

void TrainableModel::settle_deferred_zeros(Layer& l) {
  for (Linear& L : l.linears) {
    if (!L.grad_w_stale) continue;
    L.grad_w.zero_();
    L.grad_w_stale = false;
  }
}

void TrainableModel::set_gradient_provider(std::function<Tensor(size_t)> provider) {
  gradient_provider_ = std::move(provider);
  for (size_t i = 0; i < params_.size(); ++i) {
    bind_gradient(i, gradient_provider_ ? Tensor() : zeros_like(params_[i].value, MemoryCategory::Gradients));
  }
  for (Layer& l : layers_) {  // packed q/k/v gradients: none with a provider (it binds each), else packed again
    l.qkv_grad = Tensor();
    l.qkv_grad_bias = Tensor();
    if (!gradient_provider_ && type_ == TunerType::Full) pack_qkv_gradients(l);
  }
}

void TrainableModel::release_gradient(size_t param) {
  SWIFT_CHECK(param < params_.size(), "release_gradient: parameter {} of {}", param, params_.size());
  SWIFT_CHECK(gradient_provider_ != nullptr, "release_gradient({}) without a gradient provider", params_[param].name);
  bind_gradient(param, Tensor());
}

void TrainableModel::bind_gradient(size_t param, const Tensor& grad) {
  params_[param].grad = grad;
  for (Tensor* handle : grad_handles_[param]) *handle = grad;
}

void TrainableModel::provide_gradients(int64_t stage) {
  if (!gradient_provider_) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (first_grad_stage_[i] != stage || params_[i].grad.defined()) continue;
    Tensor grad = gradient_provider_(i);
    SWIFT_CHECK(grad.defined() && grad.dtype() == DType::F32 && grad.shape() == params_[i].value.shape() &&
                    grad.device() == device_,
                "gradient provider: the gradient of {} must be F32 of shape {} on {}", params_[i].name,
                params_[i].value.str(), device_.str());
    bind_gradient(i, grad);
  }
}

std::map<std::string, Tensor> TrainableModel::full_weights() const {
  SWIFT_CHECK(type_ == TunerType::Full, "full_weights: only for full fine-tuning");
  std::map<std::string, Tensor> out;
  for (const Parameter& p : params_) out[p.name] = p.value;
  return out;
}

ops::Dropout TrainableModel::dropout_for(uint64_t seed, int64_t layer, int kind, bool training, int64_t tokens) const {
  if (!training || lora_.dropout == 0.0f) return {};
  ops::Dropout d{lora_.dropout, mix_seed(seed, static_cast<uint64_t>(layer), static_cast<uint64_t>(kind))};
  // Sequence parallel: this rank's `tokens` rows start at row sp_rank * tokens of the padded batch (whose first rows
  // are the one-process batch; the padding's rows lie past it and carry no gradient).
  d.map.row_offset = static_cast<int64_t>(parallel_.sp_rank()) * tokens;
  // Tensor parallel: o / down see this rank's block of input columns (its heads / intermediate units); the column-
  // parallel linears see the whole input (no column block).
  const auto k = static_cast<LinearKind>(kind);
  if (parallel_.tp_size() > 1 && (k == LinearKind::O || k == LinearKind::Down)) {
    const io::ModelConfig& c = model_.config();
    d.map.full_cols = k == LinearKind::O ? c.num_attention_heads * c.head_dim : c.intermediate_size;
    d.map.col_offset = parallel_.tp_rank() * d.map.full_cols / parallel_.tp_size();
  }
  return d;
}

// Rope over (T, H, D); dynamic NTK scaling depends on each sequence's length, so it goes sequence by sequence
// exactly as CausalLM's forward does.
void TrainableModel::rope_segments(const MicroBatch& b, const RopeSegmentFn& fn) const {
  const io::ModelConfig& c = model_.config();
  const MicroBatch& host = host_batch_ != nullptr ? *host_batch_ : b;  // b may live on the device
  const int32_t* pos = host.positions.data<int32_t>();
  const int32_t* cu = host.cu_seqlens.data<int32_t>();
  if (c.rope.type != ops::RopeType::Dynamic) {
    int32_t max_pos = 0;
    for (int64_t t = 0; t < b.positions.numel(); ++t) max_pos = std::max(max_pos, pos[t]);
    fn(0, b.positions.numel(), b.positions, ops::rope_frequencies(c.rope, c.head_dim, int64_t{max_pos} + 1));
    return;
  }
  for (int64_t s = 0; s + 1 < b.cu_seqlens.numel(); ++s) {
    if (cu[s + 1] == cu[s]) continue;
    int32_t max_pos = 0;
    for (int32_t t = cu[s]; t < cu[s + 1]; ++t) max_pos = std::max(max_pos, pos[t]);
    fn(cu[s], cu[s + 1], b.positions.slice_rows(cu[s], cu[s + 1]),
       ops::rope_frequencies(c.rope, c.head_dim, int64_t{max_pos} + 1));
  }
}

void TrainableModel::apply_rope(Tensor& x, const MicroBatch& b, bool backward) const {
  rope_segments(b, [&](int64_t t0, int64_t t1, const Tensor& ps, const ops::RopeFrequencies& f) {
    Tensor xs = t0 == 0 && t1 == x.size(0) ? x : x.slice_rows(t0, t1);
    backward ? ops::rope_backward(xs, ps, f) : ops::rope(xs, ps, f);
  });
}

void TrainableModel::rope_qkv(Tensor& packed, Tensor& q, Tensor& k, Tensor& v, const MicroBatch& b,
                              bool backward) const {
  rope_segments(b, [&](int64_t t0, int64_t t1, const Tensor& ps, const ops::RopeFrequencies& f) {
    if (t0 == 0 && t1 == packed.size(0)) return ops::rope_qkv(packed, q, k, v, ps, f, backward);
    Tensor packed_s = packed.slice_rows(t0, t1), q_s = q.slice_rows(t0, t1), k_s = k.slice_rows(t0, t1),
           v_s = v.slice_rows(t0, t1);
    ops::rope_qkv(packed_s, q_s, k_s, v_s, ps, f, backward);
  });
}

// One linear of layer i in the forward: frozen, LoRA (with the CUDA keep-bits cache of its dropout mask) or DoRA;
// LoRA's xa (and DoRA's h) go to `a`, saved for the backward.
void TrainableModel::linear_forward(int64_t i, LinearKind kind, const Tensor& x, Tensor& y, bool accumulate,
                                    Activations& a, uint64_t seed, bool training, bool b_product) const {
  const Linear& L = layers_[static_cast<size_t>(i)].linears[static_cast<size_t>(kind)];
  const int64_t T = x.size(0);
  if (L.lora == nullptr) return ops::linear(x, product_weight(L), L.bias, y, accumulate);
  Tensor& xa = a.xa[static_cast<size_t>(kind)];
  if (a.rank_kept && rank_reusable(i, kind, a, T, training)) {  // lora_linear's frozen and B products, kept xa
    if (!b_product) return ops::linear(x, L.w, L.bias, y, accumulate);
    return ops::lora_linear_from_xa(x, L.w, L.bias, L.lora->b, xa, lora_.scale, y, accumulate);
  }
  if (!xa.defined()) xa = stat({T, L.lora->a.size(0)});
  if (L.lora->dora()) {
    Tensor& h = a.h[static_cast<size_t>(kind)];
    if (!h.defined()) h = stat({T, L.lora->b.size(0)});
    return ops::dora_linear(x, L.w, L.bias, L.lora->a, L.lora->b, L.lora->magnitude,
                            dora_norms_[static_cast<size_t>(i)][static_cast<size_t>(kind)], lora_.scale,
                            dropout_for(seed, i, static_cast<int>(kind), training, T), y, xa, h, accumulate);
  }
  const ops::Dropout d = lora_dropout(i, kind, x, a, seed, training);
  ops::lora_linear(x, L.w, L.bias, L.lora->a, L.lora->b, lora_.scale, d, y, xa, accumulate, b_product);
}

bool TrainableModel::shared_xa(int64_t i, std::initializer_list<LinearKind> kinds, const Tensor& x, Activations& a,
                               uint64_t seed, bool training) const {
  const Layer& l = layers_[static_cast<size_t>(i)];
  const int64_t T = x.size(0);
  bool kept = a.rank_kept;
  for (LinearKind kind : kinds) {
    const LoraLinear* lora = l.linears[static_cast<size_t>(kind)].lora;
    if (lora == nullptr || lora->dora()) return false;
    kept = kept && rank_reusable(i, kind, a, T, training);
  }
  if (kept) return true;
  std::vector<ops::LoraSharedXa> jobs;
  for (LinearKind kind : kinds) {
    Tensor& xa = a.xa[static_cast<size_t>(kind)];
    const Tensor& factor = l.linears[static_cast<size_t>(kind)].lora->a;
    if (!xa.defined() || xa.size(0) != T) xa = stat({T, factor.size(0)});
    jobs.push_back({factor, lora_dropout(i, kind, x, a, seed, training), xa});
  }
  ops::lora_xa_shared(x, jobs);
  return true;
}

bool TrainableModel::rank_reusable(int64_t i, LinearKind kind, const Activations& a, int64_t T, bool training) const {
  const LoraLinear* lora = layers_[static_cast<size_t>(i)].linears[static_cast<size_t>(kind)].lora;
  if (lora == nullptr || lora->dora()) return false;
  const Tensor& xa = a.xa[static_cast<size_t>(kind)];
  const Tensor& bits = a.keep_bits[static_cast<size_t>(kind)];
  const bool drops = training && lora_.dropout > 0.0f && device_.is_cuda();
  return xa.defined() && xa.size(0) == T && (!drops || (bits.defined() && bits.size(0) == T));
}

ops::Dropout TrainableModel::lora_dropout(int64_t i, LinearKind kind, const Tensor& x, Activations& a, uint64_t seed,
                                          bool training) const {
  const int64_t T = x.size(0);
  ops::Dropout d = dropout_for(seed, i, static_cast<int>(kind), training, T);
  if (d.p > 0.0f && device_.is_cuda()) {
    Tensor& bits = a.keep_bits[static_cast<size_t>(kind)];
    const int64_t cols = (x.size(1) + 7) / 8;
    if (!bits.defined() || bits.size(0) != T || bits.size(1) != cols) {
      bits = Tensor::empty({T, cols}, DType::U8, device_, MemoryCategory::Activations);
      a.bits_drawn[static_cast<size_t>(kind)] = false;
    }
    d.keep_bits = bits;
    d.keep_bits_drawn = a.bits_drawn[static_cast<size_t>(kind)];
  }
  return d;
}

bool TrainableModel::swiglu_draws_down_mask(int64_t i, Activations& a, uint64_t seed, bool training) const {
  // SWIFT_SWIGLU_DRAWS_MASK=0: the swiglu alone, down's xa pass draws its mask (A/B measurements; the same bits).
  static const bool kOn = env_int("SWIFT_SWIGLU_DRAWS_MASK", 1) != 0;
  const LoraLinear* down = layers_[static_cast<size_t>(i)].linears[static_cast<size_t>(LinearKind::Down)].lora;
  // BF16 only: there down's xa pass takes its tensor cores, which read the cache; F16's CUDA-core pass draws anyway.
  if (!kOn || a.rank_kept || down == nullptr || down->dora() || !training || lora_.dropout <= 0.0f ||
      !device_.is_cuda() || act_dtype_ != DType::BF16) {
    return false;
  }
  ops::Dropout mask = lora_dropout(i, LinearKind::Down, a.act, a, seed, training);
  if (!mask.keep_bits.defined() || !ops::swiglu_drawing_mask_in_one_pass(a.act, mask)) return false;
  mask.keep_bits_drawn = false;
  ops::swiglu_drawing_mask(a.gate, a.up, a.act, mask);
  a.bits_drawn[static_cast<size_t>(LinearKind::Down)] = true;
  return true;
}

bool TrainableModel::linear_rank_only(int64_t i, LinearKind kind, const Tensor& x, Activations& a, uint64_t seed,
                                      bool training) const {
  const Linear& L = layers_[static_cast<size_t>(i)].linears[static_cast<size_t>(kind)];
  if (L.lora == nullptr) return true;
  if (L.lora->dora()) return false;
  if (a.rank_kept && rank_reusable(i, kind, a, x.size(0), training)) return true;  // kept from the forward
  Tensor& xa = a.xa[static_cast<size_t>(kind)];
  if (!xa.defined()) xa = stat({x.size(0), L.lora->a.size(0)});
  ops::lora_xa(x, L.lora->a, lora_dropout(i, kind, x, a, seed, training), xa);
  return true;
}

void TrainableModel::linear_forward_residual(int64_t i, LinearKind kind, const Tensor& x, const Tensor& residual,
                                             Tensor& y, Activations& a, uint64_t seed, bool training) const {
  // SWIFT_LINEAR_RESIDUAL=0 copies the residual into y and accumulates onto it (A/B measurements; the sums may round
  // differently: cuBLASLt can add a C apart from D in another order).
  static const bool kResidualAsInput = env_int("SWIFT_LINEAR_RESIDUAL", 1) != 0;
  const Linear& L = layers_[static_cast<size_t>(i)].linears[static_cast<size_t>(kind)];
  if (L.lora == nullptr && kResidualAsInput) return ops::linear_residual(x, product_weight(L), L.bias, residual, y);
  y.copy_from(residual);
  linear_forward(i, kind, x, y, /*accumulate=*/true, a, seed, training);
}

void TrainableModel::linear_residual_from_xa(int64_t i, LinearKind kind, const Tensor& x, const Tensor& residual,
                                             Tensor& y, Activations& a, uint64_t seed, bool training) const {
  // SWIFT_LORA_RESIDUAL_IN_GEMM=0: lora_linear's output, then a plain add (A/B measurements; one rounding more).
  static const bool kInGemm = env_int("SWIFT_LORA_RESIDUAL_IN_GEMM", 1) != 0;
  const Linear& L = layers_[static_cast<size_t>(i)].linears[static_cast<size_t>(kind)];
  if (!kInGemm) {
    linear_forward(i, kind, x, y, false, a, seed, training);
    return ops::add(residual, y, y);
  }
  linear_rank_only(i, kind, x, a, seed, training);  // xa (kept, or drawn now as lora_linear draws it)
  ops::lora_linear_residual_from_xa(x, L.w, L.bias, L.lora->b, a.xa[static_cast<size_t>(kind)], lora_.scale, residual,
                                    y);
}

bool TrainableModel::residual_b_folded(int64_t i, LinearKind kind) const {
  // SWIFT_LORA_FOLD_RESIDUAL=0 keeps o's / down's B products in lora_linear, accumulating onto a copy of the residual
  // (for A/B measurements; the sums are rounded in another order).
  static const bool kFold = env_int("SWIFT_LORA_FOLD_RESIDUAL", 1) != 0;
  const LoraLinear* lora = layers_[static_cast<size_t>(i)].linears[static_cast<size_t>(kind)].lora;
  return kFold && lora != nullptr && !lora->dora();
}

bool TrainableModel::b_in_gemm(int64_t i, LinearKind kind, int64_t tokens) const {
  const Linear& L = layers_[static_cast<size_t>(i)].linears[static_cast<size_t>(kind)];
  return L.lora != nullptr && !L.lora->dora() && act_dtype_ == DType::BF16 && L.w.dtype() == DType::BF16 &&
         ops::lora_b_product_in_gemm(device_, tokens);
}

ops::LoraBProduct TrainableModel::b_product_of(int64_t i, LinearKind kind, const Activations& a) const {
  return ops::LoraBProduct{a.xa[static_cast<size_t>(kind)],
                           layers_[static_cast<size_t>(i)].linears[static_cast<size_t>(kind)].lora->b};
}

bool TrainableModel::mlp_b_folded(int64_t i, int64_t tokens) const {
  // SWIFT_LORA_FOLD_SWIGLU=0 keeps the B products in lora_linear (the same bits; for A/B measurements).
  static const bool kFold = env_int("SWIFT_LORA_FOLD_SWIGLU", 1) != 0;
  if (!kFold || b_in_gemm(i, LinearKind::Gate, tokens) || b_in_gemm(i, LinearKind::Up, tokens)) return false;
  const Layer& l = layers_[static_cast<size_t>(i)];
  for (LinearKind kind : {LinearKind::Gate, LinearKind::Up}) {
    const LoraLinear* lora = l.linears[static_cast<size_t>(kind)].lora;
    if (lora == nullptr || lora->dora()) return false;
  }
  return true;
}

// The MLP's intermediate activations of layer i from its input a.h2: gate, up (this rank's F / N units under tensor
// parallelism: column-parallel, no collective) and act = silu(gate) * up. The forward runs it, and the backward
// again when the selective recompute dropped them (same kernels, same dropout masks: the same bits).
void TrainableModel::mlp_forward(int64_t i, Activations& a, uint64_t seed, bool training) const {
  const int64_t T = a.h2.size(0), F_r = model_.config().intermediate_size / parallel_.tp_size();
  a.gate = act({T, F_r});
  a.up = act({T, F_r});
  a.act = act({T, F_r});
  const bool folded = mlp_b_folded(i, T);  // the B products are added by the swiglu's pass
  a.bits_drawn[static_cast<size_t>(LinearKind::Down)] = false;  // until swiglu_draws_down_mask draws it
  const Layer& l = layers_[static_cast<size_t>(i)];
  // A recompute (a.rank_kept) redoes the frozen products only: linear_forward uses the kept xa. Otherwise gate's and
  // up's xa come from one pass over h2 (shared_xa), then their frozen products.
  const bool was_kept = a.rank_kept;
  if (shared_xa(i, {LinearKind::Gate, LinearKind::Up}, a.h2, a, seed, training)) a.rank_kept = true;
  linear_forward(i, LinearKind::Gate, a.h2, a.gate, false, a, seed, training, !folded);
  linear_forward(i, LinearKind::Up, a.h2, a.up, false, a, seed, training, !folded);
  a.rank_kept = was_kept;
  if (!folded) {
    if (swiglu_draws_down_mask(i, a, seed, training)) return;  // act, and down's dropout mask for its xa pass
    return ops::swiglu(a.gate, a.up, a.act);
  }
  auto b_product = [&](LinearKind kind) {
    return ops::LoraBProduct{a.xa[static_cast<size_t>(kind)], l.linears[static_cast<size_t>(kind)].lora->b};
  };
  ops::swiglu_lora(a.gate, a.up, b_product(LinearKind::Gate), b_product(LinearKind::Up), lora_.scale, a.act);
}

void TrainableModel::layer_forward(int64_t i, const MicroBatch& b, const Tensor& x_in, Activations& a, Tensor& x_out,
                                   uint64_t seed, bool training, bool block_recompute) const {
  const io::ModelConfig& c = model_.config();
  const Layer& l = layers_[static_cast<size_t>(i)];
  const int64_t T = x_in.size(0), C = c.hidden_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto lin = [&](LinearKind kind, const Tensor& x, Tensor& y, bool accumulate) {
    linear_forward(i, kind, x, y, accumulate, a, seed, training);
  };
  // Tensor parallel: this rank's heads and intermediate units. Sequence parallel: attention sees Ta tokens with
  // hq / hkv heads (all T tokens and this rank's heads without it).
  dist::Communicator* tp = parallel_.tp_size() > 1 ? parallel_.tensor : nullptr;
  const int64_t Hq_r = Hq / parallel_.tp_size(), Hkv_r = Hkv / parallel_.tp_size();
  dist::Communicator* sp = parallel_.sp_size() > 1 ? parallel_.sequence : nullptr;
  // SP with fewer key/value heads than ranks: each is repeated kv_repeat times before the exchange (one per rank).
  const int64_t Hkv_x = sp != nullptr ? sequence_parallel_kv_heads(Hkv_r, parallel_.sp_size()) : Hkv_r;
  const int64_t kv_repeat = Hkv_x / Hkv_r;
  const int64_t Ta = T * parallel_.sp_size(), hq = Hq_r / parallel_.sp_size(), hkv = Hkv_x / parallel_.sp_size();
  a.x_in = x_in;
  a.h1 = act({T, C});
  a.rstd1 = stat({T});
  ops::rmsnorm(x_in, l.input_norm, eps, a.h1, a.rstd1);
  Tensor q = act({T, Hq_r * D}), k = act({T, Hkv_r * D}), v = act({T, Hkv_r * D});
  bool roped = false;  // q and k already rotated (packed, without q/k-norm: roped straight out of the packed rows)
  if (qkv_packed(i)) {  // one product, then its column blocks
    const int64_t nq = Hq_r * D, nkv = Hkv_r * D;
    Tensor qkv = act({T, nq + 2 * nkv});
    ops::linear(a.h1, l.qkv16, l.qkv_bias, qkv);
    roped = !c.qk_norm;
    if (roped) {
      rope_qkv(qkv, q, k, v, b, false);
    } else {
      ops::copy_columns(qkv, 0, q, 0, nq);
      ops::copy_columns(qkv, nq, k, 0, nkv);
      ops::copy_columns(qkv, nq + nkv, v, 0, nkv);
    }
  } else {
    // Plain LoRA q, k, v: their xa in one pass over h1, then each linear's frozen and B products (the kept-xa path).
    const bool was_kept = a.rank_kept;
    if (shared_xa(i, {LinearKind::Q, LinearKind::K, LinearKind::V}, a.h1, a, seed, training)) a.rank_kept = true;
    lin(LinearKind::Q, a.h1, q, false);
    lin(LinearKind::K, a.h1, k, false);
    lin(LinearKind::V, a.h1, v, false);
    a.rank_kept = was_kept;
  }
  a.q = q;
  a.k = k;
  a.v = v;
  if (sp != nullptr) {
    a.q = act({Ta, hq * D});
    a.k = act({Ta, hkv * D});
    a.v = act({Ta, hkv * D});
    scatter_heads(*sp, q, Hq_r, a.q);
    if (kv_repeat > 1) {
      Tensor k_rep = act({T, Hkv_x * D}), v_rep = act({T, Hkv_x * D});
      repeat_heads(k, Hkv_r, kv_repeat, k_rep);
      repeat_heads(v, Hkv_r, kv_repeat, v_rep);
      k = k_rep;
      v = v_rep;
    }
    scatter_heads(*sp, k, Hkv_x, a.k);
    scatter_heads(*sp, v, Hkv_x, a.v);
  }
  if (c.qk_norm) {
    a.q3 = act({Ta, hq, D});
    a.k3 = act({Ta, hkv, D});
    a.q_rstd = stat({Ta * hq});
    a.k_rstd = stat({Ta * hkv});
    Tensor q3 = a.q3.view({Ta * hq, D}), k3 = a.k3.view({Ta * hkv, D});
    ops::rmsnorm(a.q.view({Ta * hq, D}), l.q_norm, eps, q3, a.q_rstd);
    ops::rmsnorm(a.k.view({Ta * hkv, D}), l.k_norm, eps, k3, a.k_rstd);
  } else {  // rope in place: the pre-rope q and k are not needed by the backward
    a.q3 = a.q.view({Ta, hq, D});
    a.k3 = a.k.view({Ta, hkv, D});
  }
  if (!roped) {
    apply_rope(a.q3, b, false);
    apply_rope(a.k3, b, false);
  }
  a.attn_heads = act({Ta, hq, D});
  a.lse = stat({hq, Ta});
  ops::attention(a.q3, a.k3, a.v.view({Ta, hkv, D}), b.cu_seqlens, 1.0f / std::sqrt(static_cast<float>(D)),
                 c.layer_window(i), a.attn_heads, a.lse);
  a.attn = a.attn_heads;
  if (sp != nullptr) {
    a.attn = act({T, Hq_r * D});
    gather_heads(*sp, a.attn_heads.view({Ta, hq * D}), Hq_r, a.attn);
  }
  if (tp != nullptr) {  // row-parallel: this rank's share of o_proj's output, summed over the group
    Tensor o = act({T, C});
    lin(LinearKind::O, a.attn.view({T, Hq_r * D}), o, false);
    tp->all_reduce(o);
    a.x_mid = act({T, C});
    ops::add(x_in, o, a.x_mid);
  } else if (b_in_gemm(i, LinearKind::O, T)) {  // x_mid = x_in + o's whole output, one product rounded once
    a.x_mid = act({T, C});
    linear_residual_from_xa(i, LinearKind::O, a.attn.view({T, Hq * D}), x_in, a.x_mid, a, seed, training);
  } else if (residual_b_folded(i, LinearKind::O)) {  // x_mid = o's frozen product, then + x_in + its B product
    a.x_mid = act({T, C});
    linear_forward(i, LinearKind::O, a.attn.view({T, Hq * D}), a.x_mid, false, a, seed, training, false);
    ops::add_lora_residual(a.x_mid, x_in, b_product_of(i, LinearKind::O, a), lora_.scale);
  } else {
    a.x_mid = act({T, C});
    linear_forward_residual(i, LinearKind::O, a.attn.view({T, Hq * D}), x_in, a.x_mid, a, seed, training);
  }
  a.h2 = act({T, C});
  a.rstd2 = stat({T});
  ops::rmsnorm(a.x_mid, l.post_norm, eps, a.h2, a.rstd2);
  mlp_forward(i, a, seed, training);
  // A recomputed block's output is the next block's saved input: its backward reads only down's xa (and keep bits),
  // so the down projection's product (a third of the MLP's), its all-reduce and the residual add are skipped.
  // SWIFT_RECOMPUTE_OUTPUT=1 makes the output anyway (A/B measurements; the same gradients).
  static const bool kSkipOutput = env_int("SWIFT_RECOMPUTE_OUTPUT", 0) == 0;
  if (block_recompute && kSkipOutput && linear_rank_only(i, LinearKind::Down, a.act, a, seed, training)) return;
  if (!x_out.defined()) x_out = act({T, C});  // a recompute's caller leaves it to the block: made when written
  if (tp != nullptr) {  // row-parallel down_proj, as o_proj
    Tensor m = act({T, C});
    lin(LinearKind::Down, a.act, m, false);
    tp->all_reduce(m);
    ops::add(a.x_mid, m, x_out);
  } else if (b_in_gemm(i, LinearKind::Down, T)) {
    linear_residual_from_xa(i, LinearKind::Down, a.act, a.x_mid, x_out, a, seed, training);
  } else if (residual_b_folded(i, LinearKind::Down)) {
    linear_forward(i, LinearKind::Down, a.act, x_out, false, a, seed, training, false);
    ops::add_lora_residual(x_out, a.x_mid, b_product_of(i, LinearKind::Down, a), lora_.scale);
  } else {
    linear_forward_residual(i, LinearKind::Down, a.act, a.x_mid, x_out, a, seed, training);
  }
}

void TrainableModel::layer_backward(int64_t i, const MicroBatch& b, Activations& a, Tensor& d, uint64_t seed) {
  const io::ModelConfig& c = model_.config();
  Layer& l = layers_[static_cast<size_t>(i)];
  const int64_t T = d.size(0), C = c.hidden_size, F = c.intermediate_size, D = c.head_dim;
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads;
  Tensor none;
  // dy -> dx (= or +=) through one linear, adding its parameters' gradients.
  // A plain LoRA linear's backward dropout: the forward's mask from its keep-bits cache (undefined on the CPU: drawn
  // again).
  auto backward_dropout = [&](LinearKind kind) {
    ops::Dropout d = dropout_for(seed, i, static_cast<int>(kind), true, T);
    if (d.p > 0.0f) d.keep_bits = a.keep_bits[static_cast<size_t>(kind)];
    return d;
  };
  auto lin_back = [&](LinearKind kind, const Tensor& dy, const Tensor& x, Tensor& dx, bool accumulate_dx) {
    Linear& L = l.linears[static_cast<size_t>(kind)];
    if (L.lora == nullptr) {
      return ops::linear_backward(dy, x, product_weight(L), dx, L.grad_w, L.grad_bias, accumulate_dx,
                                  take_accumulate_dw(L));
    }
    if (L.lora->dora()) {
      return ops::dora_linear_backward(dy, x, L.w, L.lora->a, L.lora->b, L.lora->magnitude,
                                       dora_norms_[static_cast<size_t>(i)][static_cast<size_t>(kind)],
                                       a.xa[static_cast<size_t>(kind)], a.h[static_cast<size_t>(kind)], lora_.scale,
                                       dropout_for(seed, i, static_cast<int>(kind), true, T), dx, L.grad_a, L.grad_b,
                                       L.grad_m, accumulate_dx);
    }
    ops::lora_linear_backward(dy, x, L.w, L.lora->a, L.lora->b, a.xa[static_cast<size_t>(kind)], lora_.scale,
                              backward_dropout(kind), dx, L.grad_a, L.grad_b, accumulate_dx);
  };
  // Linears reading the same x (q, k, v; gate, up), their input gradients summed into dx (=): as lin_back in order, with
  // the da passes over x shared (ops::lora_linear_backward_shared) when every one is plain LoRA.
  // given_g: each part's g = dy b with its db added already (swiglu_backward_lora_dy), or null.
  auto lin_back_shared = [&](std::initializer_list<std::pair<LinearKind, const Tensor*>> parts, const Tensor& x,
                             Tensor& dx, const Tensor* given_g = nullptr) {
    bool plain = true;
    for (const auto& [kind, dy] : parts) {
      const LoraLinear* lora = l.linears[static_cast<size_t>(kind)].lora;
      plain = plain && lora != nullptr && !lora->dora();
    }
    if (!plain) {
      bool accumulate = false;
      for (const auto& [kind, dy] : parts) {
        lin_back(kind, *dy, x, dx, accumulate);
        accumulate = true;
      }
      return;
    }
    std::vector<ops::LoraSharedBackward> jobs;
    for (const auto& [kind, dy] : parts) {
      Linear& L = l.linears[static_cast<size_t>(kind)];
      const Tensor g = given_g != nullptr ? given_g[jobs.size()] : Tensor();
      jobs.push_back({*dy, L.w, L.lora->a, L.lora->b, a.xa[static_cast<size_t>(kind)], backward_dropout(kind),
                      L.grad_a, L.grad_b, g});
    }
    ops::lora_linear_backward_shared(x, jobs, lora_.scale, dx, false);
  };
  // Tensor parallel: this rank's heads and units; the column-parallel input gradients are summed over the group.
  dist::Communicator* tp = parallel_.tp_size() > 1 ? parallel_.tensor : nullptr;
  const int64_t Hq_r = Hq / parallel_.tp_size(), Hkv_r = Hkv / parallel_.tp_size(), F_r = F / parallel_.tp_size();
  // Selective recompute (set_recompute_modules): what the forward dropped, made again by the same kernels.
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto norm_again = [&](const Tensor& x, const Tensor& weight, Tensor& h) {
    if (h.defined()) return;
    h = act({T, C});
    Tensor rstd = stat({T});  // equals the kept one
    ops::rmsnorm(x, weight, eps, h, rstd);
  };
  // MLP block: d is the gradient of x_out; it is also the residual gradient of x_mid. The order keeps the block's
  // peak (the step's, in the last kept layer) at the kept gate and up plus two (T, F) tensors: act and d_act while
  // down's backward runs; d_up is written over up; h2 (when dropped) and d_h are made once act is gone.
  if (!a.gate.defined()) {
    norm_again(a.x_mid, l.post_norm, a.h2);
    // Gate's and up's xa (and keep bits) were kept from the forward: the xa passes would make the same values again.
    static const bool kReuseXa = env_int("SWIFT_RECOMPUTE_XA", 0) == 0;  // =1: the xa passes again (A/B)
    a.rank_kept = kReuseXa;
    mlp_forward(i, a, seed, true);
  } else if (!a.act.defined()) {
    a.act = act({T, F_r});
    ops::swiglu(a.gate, a.up, a.act);
  }
  Tensor d_h;
  {
    Tensor d_act = act({T, F_r});
    Tensor d_up = a.up;  // in place: up is read for the last time by the swiglu's backward
    Linear& down = l.linears[static_cast<size_t>(LinearKind::Down)];
    Linear& gate = l.linears[static_cast<size_t>(LinearKind::Gate)];
    Linear& up = l.linears[static_cast<size_t>(LinearKind::Up)];
    // Plain LoRA gate and up, where the backend runs it as one pass: their backward's first step (g and db) in the
    // swiglu backward's pass, over the gradients it makes (the same bits as lin_back_shared making them).
    const bool mlp_dy = gate.lora != nullptr && !gate.lora->dora() && up.lora != nullptr && !up.lora->dora() &&
                        ops::swiglu_backward_lora_dy_in_one_pass(device_);
    std::array<Tensor, 2> mlp_g;
    if (mlp_dy) {
      lin_back(LinearKind::Down, d, a.act, d_act, false);
      a.act = Tensor();
      for (Tensor& g : mlp_g) g = stat({T, gate.lora->a.size(0)});
      const ops::LoraDyStep gate_step{gate.lora->b, a.xa[static_cast<size_t>(LinearKind::Gate)], mlp_g[0], gate.grad_b};
      const ops::LoraDyStep up_step{up.lora->b, a.xa[static_cast<size_t>(LinearKind::Up)], mlp_g[1], up.grad_b};
      ops::swiglu_backward_lora_dy(d_act, a.gate, a.up, d_act, d_up, gate_step, up_step, lora_.scale);
    } else if (down.lora != nullptr && !down.lora->dora()) {  // down's input-gradient term added in the swiglu's pass
      ops::lora_linear_swiglu_backward(d, a.act, down.w, down.lora->a, down.lora->b,
                                       a.xa[static_cast<size_t>(LinearKind::Down)], lora_.scale,
                                       backward_dropout(LinearKind::Down), a.gate, a.up, d_act, d_up, down.grad_a,
                                       down.grad_b);
      a.act = Tensor();
    } else {
      lin_back(LinearKind::Down, d, a.act, d_act, false);
      a.act = Tensor();
      ops::swiglu_backward(d_act, a.gate, a.up, d_act, d_up);
    }  // d_act now holds d_gate
    a.gate = a.up = Tensor();
    norm_again(a.x_mid, l.post_norm, a.h2);
    d_h = act({T, C});
    lin_back_shared({{LinearKind::Gate, &d_act}, {LinearKind::Up, &d_up}}, a.h2, d_h, mlp_dy ? mlp_g.data() : nullptr);
    a.h2 = Tensor();
  }  // the MLP's intermediates and their gradients are free before the attention block's
  if (tp != nullptr) tp->all_reduce(d_h);
  ops::rmsnorm_backward(d_h, a.x_mid, l.post_norm, a.rstd2, d, l.grad_post_norm, /*accumulate_dx=*/true);
  // Attention block: d is now the gradient of x_mid, and the residual gradient of x_in.
  dist::Communicator* sp = parallel_.sp_size() > 1 ? parallel_.sequence : nullptr;
  const int64_t Hkv_x = sp != nullptr ? sequence_parallel_kv_heads(Hkv_r, parallel_.sp_size()) : Hkv_r;
  const int64_t kv_repeat = Hkv_x / Hkv_r;  // see layer_forward
  const int64_t Ta = T * parallel_.sp_size(), hq = Hq_r / parallel_.sp_size(), hkv = Hkv_x / parallel_.sp_size();
  Tensor d_attn = act({T, Hq_r * D});
  lin_back(LinearKind::O, d, a.attn.view({T, Hq_r * D}), d_attn, false);
  Tensor d_heads = d_attn;  // the gradient of attention's output, in its layout (Ta, hq * D)
  if (sp != nullptr) {
    d_heads = act({Ta, hq * D});
    scatter_heads(*sp, d_attn, Hq_r, d_heads);
  }
  Tensor dq3 = act({Ta, hq, D}), dk3 = act({Ta, hkv, D}), dv3 = act({Ta, hkv, D});
  ops::attention_backward(d_heads.view({Ta, hq, D}), a.q3, a.k3, a.v.view({Ta, hkv, D}), a.attn_heads, a.lse,
                          b.cu_seqlens, 1.0f / std::sqrt(static_cast<float>(D)), c.layer_window(i), dq3, dk3, dv3);
  const bool packed = qkv_packed(i);
  const bool rope_into_packed = packed && !c.qk_norm;  // dq, dk rotated back straight into the packed rows below
  if (!rope_into_packed) {
    apply_rope(dq3, b, true);
    apply_rope(dk3, b, true);
  }
  Tensor dq = dq3.view({Ta, hq * D}), dk = dk3.view({Ta, hkv * D}), dv = dv3.view({Ta, hkv * D});
  if (c.qk_norm) {
    dq = act({Ta, hq * D});
    dk = act({Ta, hkv * D});
    Tensor dq_flat = dq.view({Ta * hq, D}), dk_flat = dk.view({Ta * hkv, D});
    ops::rmsnorm_backward(dq3.view({Ta * hq, D}), a.q.view({Ta * hq, D}), l.q_norm, a.q_rstd, dq_flat, l.grad_q_norm);
    ops::rmsnorm_backward(dk3.view({Ta * hkv, D}), a.k.view({Ta * hkv, D}), l.k_norm, a.k_rstd, dk_flat,
                          l.grad_k_norm);
  }
  if (sp != nullptr) {  // back to this rank's tokens with every head, for the projections' backward
    Tensor dq_tokens = act({T, Hq_r * D}), dk_tokens = act({T, Hkv_x * D}), dv_tokens = act({T, Hkv_x * D});
    gather_heads(*sp, dq, Hq_r, dq_tokens);
    gather_heads(*sp, dk, Hkv_x, dk_tokens);
    gather_heads(*sp, dv, Hkv_x, dv_tokens);
    if (kv_repeat > 1) {  // the repeated heads' gradients add up into each key/value head
      Tensor dk_sum = act({T, Hkv_r * D}), dv_sum = act({T, Hkv_r * D});
      sum_repeated_heads(dk_tokens, Hkv_r, kv_repeat, dk_sum);
      sum_repeated_heads(dv_tokens, Hkv_r, kv_repeat, dv_sum);
      dk_tokens = dk_sum;
      dv_tokens = dv_sum;
    }
    dq = dq_tokens;
    dk = dk_tokens;
    dv = dv_tokens;
  }
  norm_again(a.x_in, l.input_norm, a.h1);
  if (packed) {  // the three gradients side by side: one input-gradient and one weight-gradient product
    const int64_t nq = dq.size(1), nkv = dk.size(1);
    Tensor dqkv = act({T, nq + 2 * nkv});
    if (rope_into_packed) {
      rope_qkv(dqkv, dq, dk, dv, b, true);
    } else {
      ops::copy_columns(dq, 0, dqkv, 0, nq);
      ops::copy_columns(dk, 0, dqkv, nq, nkv);
      ops::copy_columns(dv, 0, dqkv, nq + nkv, nkv);
    }
    ops::linear_backward(dqkv, a.h1, l.qkv16, d_h, l.qkv_grad, l.qkv_grad_bias, false, take_accumulate_dw_qkv(l));
  } else {
    lin_back_shared({{LinearKind::Q, &dq}, {LinearKind::K, &dk}, {LinearKind::V, &dv}}, a.h1, d_h);
  }
  if (tp != nullptr) tp->all_reduce(d_h);
  ops::rmsnorm_backward(d_h, a.x_in, l.input_norm, a.rstd1, d, l.grad_input_norm, /*accumulate_dx=*/true);
  (void)none;
}

namespace {

constexpr std::array<LinearKind, 3> kQkv = {LinearKind::Q, LinearKind::K, LinearKind::V};

// Whether `view` is rows [row0, row0 + view.size(0)) of `whole` (same storage, contiguous rows).
bool is_row_block(const Tensor& view, const Tensor& whole, int64_t row0) {
  if (!view.defined() || !whole.defined() || view.storage() != whole.storage() || whole.size(0) == 0) return false;
  const size_t row_bytes = whole.nbytes() / static_cast<size_t>(whole.size(0));
  return view.byte_offset() == whole.byte_offset() + static_cast<size_t>(row0) * row_bytes;
}

}  // namespace

void TrainableModel::pack_qkv_gradients(Layer& l) {
  std::array<Linear*, 3> lin{};
  for (size_t k = 0; k < 3; ++k) lin[k] = &l.linears[static_cast<size_t>(kQkv[k])];
  int biases = 0;
  for (const Linear* L : lin) {
    if (!L->grad_w.defined() || L->lora != nullptr || L->grad_w.size(1) != lin[0]->grad_w.size(1)) return;
    biases += L->grad_bias.defined() ? 1 : 0;
  }
  if (biases != 0 && biases != 3) return;
  int64_t rows = 0;
  for (const Linear* L : lin) rows += L->grad_w.size(0);
  l.qkv_grad = Tensor::zeros({rows, lin[0]->grad_w.size(1)}, DType::F32, device_, MemoryCategory::Gradients);
  if (biases == 3) l.qkv_grad_bias = Tensor::zeros({rows}, DType::F32, device_, MemoryCategory::Gradients);
  // The parameter whose gradient `handle` is takes the block instead (its Parameter and the model's handle).
  auto rebind = [&](Tensor& handle, const Tensor& block) {
    for (Parameter& p : params_) {
      if (p.grad.storage() == handle.storage() && p.grad.byte_offset() == handle.byte_offset()) p.grad = block;
    }
    handle = block;
  };
  int64_t r0 = 0;
  for (Linear* L : lin) {
    const int64_t n = L->grad_w.size(0);
    rebind(L->grad_w, l.qkv_grad.slice_rows(r0, r0 + n));
    if (biases == 3) rebind(L->grad_bias, l.qkv_grad_bias.slice_rows(r0, r0 + n));
    r0 += n;
  }
}

bool TrainableModel::take_accumulate_dw_qkv(Layer& l) {
  size_t stale = 0;
  for (LinearKind kind : kQkv) stale += l.linears[static_cast<size_t>(kind)].grad_w_stale ? 1 : 0;
  if (stale > 0 && stale < kQkv.size()) {  // a mix: zero the stale ones, then add onto all three
    for (LinearKind kind : kQkv) {
      Linear& L = l.linears[static_cast<size_t>(kind)];
      if (L.grad_w_stale) L.grad_w.zero_();
      L.grad_w_stale = false;
    }
    return true;
  }
  for (LinearKind kind : kQkv) l.linears[static_cast<size_t>(kind)].grad_w_stale = false;
  return stale == 0;
}

bool TrainableModel::qkv_packed(int64_t i) const {
  static const bool kOn = env_int("SWIFT_PACKED_QKV", 1) != 0;
  if (!kOn || type_ != TunerType::Full || parallel_.tp_size() > 1 || parallel_.sp_size() > 1) return false;
  const Layer& l = layers_[static_cast<size_t>(i)];
  if (!l.qkv16.defined() || !l.qkv_grad.defined()) return false;
  int64_t r0 = 0;
  for (LinearKind kind : kQkv) {
    const Linear& L = l.linears[static_cast<size_t>(kind)];
    if (L.lora != nullptr || !is_row_block(L.w16, l.qkv16, r0) || !is_row_block(L.grad_w, l.qkv_grad, r0)) {
      return false;
    }
    if (L.bias.defined() != l.qkv_bias.defined()) return false;
    if (L.bias.defined() && !is_row_block(L.grad_bias, l.qkv_grad_bias, r0)) return false;
    r0 += L.w.size(0);
  }
  return r0 == l.qkv16.size(0);
}

void TrainableModel::refresh_product_weights() {
  static const bool kOn = env_int("SWIFT_PRODUCT_WEIGHTS", 1) != 0;
  static const bool kPack = env_int("SWIFT_PACKED_QKV", 1) != 0;
  const bool on = kOn && type_ == TunerType::Full &&
                  (force_product_weights_ || (device_.is_cuda() && act_dtype_ != DType::F32));
  last_product_casts_ = 0;
  std::unordered_map<const void*, Parameter*> by_value;  // a master's Parameter (its product and flag)
  for (Parameter& p : params_) {
    if (p.value.defined()) by_value[p.value.raw()] = &p;
  }
  // `copy` becomes `master`'s product: cast from it unless the optimizer wrote this very copy with the last update.
  auto take = [&](const Tensor& master, const Tensor& copy) {
    const auto it = by_value.find(master.raw());
    Parameter* p = it != by_value.end() ? it->second : nullptr;
    const bool current = p != nullptr && p->product_current && p->product.defined() &&
                         p->product.storage() == copy.storage() && p->product.byte_offset() == copy.byte_offset() &&
                         p->product.dtype() == copy.dtype() && p->product.numel() == copy.numel();
    if (p != nullptr) {
      p->product = copy;
      p->product_current = false;
    }
    if (!current) {
      Tensor dst = copy;
      ops::cast(master, dst);
      ++last_product_casts_;
    }
  };
  auto drop = [&](const Tensor& master) {
    const auto it = by_value.find(master.defined() ? master.raw() : nullptr);
    if (it == by_value.end()) return;
    it->second->product = Tensor();
    it->second->product_current = false;
  };
  // A matrix's copy in the activation dtype: `half` keeps its storage when it has the master's shape and dtype and
  // can be written (the base weight it starts as), else gets its own.
  auto refresh = [&](const Tensor& master, Tensor& half) {
    if (!on || !master.defined() || master.dtype() != DType::F32) {
      half = Tensor();
      drop(master);
      return;
    }
    if (!half.defined() || half.shape() != master.shape() || half.dtype() != act_dtype_ ||
        !(half.device() == master.device()) || !half.writable()) {
      half = Tensor::empty(master.shape(), act_dtype_, master.device(), MemoryCategory::Weights);
    }
    take(master, half);
  };
  for (Layer& l : layers_) {
    // q, k and v packed: one (Hq*D + 2 Hkv*D, C) matrix whose row blocks are their copies, and their biases in a row.
    bool pack = on && kPack && parallel_.tp_size() == 1 && parallel_.sp_size() == 1;
    int64_t rows = 0, biases = 0;
    for (LinearKind kind : kQkv) {
      const Linear& L = l.linears[static_cast<size_t>(kind)];
      pack = pack && L.lora == nullptr && L.w.defined() && L.w.dtype() == DType::F32 &&
             L.w.size(1) == l.linears[0].w.size(1);
      if (!pack) break;
      rows += L.w.size(0);
      biases += L.bias.defined() ? 1 : 0;
    }
    pack = pack && (biases == 0 || biases == 3);
    if (pack) {
      const int64_t C = l.linears[0].w.size(1);
      if (!l.qkv16.defined() || l.qkv16.size(0) != rows || l.qkv16.size(1) != C || l.qkv16.dtype() != act_dtype_) {
        l.qkv16 = Tensor::empty({rows, C}, act_dtype_, device_, MemoryCategory::Weights);
      }
      if (biases == 3 && !(l.qkv_bias.defined() && l.qkv_bias.size(0) == rows)) {
        l.qkv_bias = Tensor::empty({rows}, DType::F32, device_, MemoryCategory::Weights);
      }
      if (biases == 0) l.qkv_bias = Tensor();
      int64_t r0 = 0;
      for (LinearKind kind : kQkv) {
        Linear& L = l.linears[static_cast<size_t>(kind)];
        const int64_t n = L.w.size(0);
        L.w16 = l.qkv16.slice_rows(r0, r0 + n);
        take(L.w, L.w16);
        if (biases == 3) take(L.bias, l.qkv_bias.slice_rows(r0, r0 + n));  // F32 copies of the F32 biases
        r0 += n;
      }
    } else {
      l.qkv16 = Tensor();
      l.qkv_bias = Tensor();
      for (LinearKind kind : kQkv) drop(l.linears[static_cast<size_t>(kind)].bias);
    }
    for (Linear& lin : l.linears) {
      if (!pack || (&lin != &l.linears[static_cast<size_t>(LinearKind::Q)] &&
                    &lin != &l.linears[static_cast<size_t>(LinearKind::K)] &&
                    &lin != &l.linears[static_cast<size_t>(LinearKind::V)])) {
        refresh(lin.w, lin.w16);
      }
    }
  }
  refresh(embed_, embed16_);
  if (tied_) {
    head16_ = embed16_;
  } else {
    refresh(lm_head_, head16_);
  }
}

StepStats TrainableModel::run(const MicroBatch& host_batch, float grad_scale, uint64_t seed, bool checkpoint,
                              bool backward) {
  const io::ModelConfig& c = model_.config();
  // SWIFT_PROFILE: the host's time from here to the first kernel (the device idles through it after a synchronised
  // step end).
  std::optional<profile::Scope> set_up(std::in_place, "(host: the step's set-up before the embedding)");
  refresh_product_weights();  // the masters may have changed since the last forward (optimizer, checkpoint load)
  SWIFT_CHECK(model_.tensor_parallel_size() == 1 || model_.tensor_parallel_size() == parallel_.tp_size(),
              "training: the model holds tensor-parallel shard {} of {} of its linears; set_parallel with that "
              "tensor-parallel group first", model_.tensor_parallel_rank(), model_.tensor_parallel_size());
  // Sequence parallel: host_batch is the padded batch of the group; this rank runs T = Tg / P of its tokens.
  const int64_t Tg = host_batch.ids.numel(), T = Tg / parallel_.sp_size(), C = c.hidden_size, L = c.num_hidden_layers;
  SWIFT_CHECK(host_batch.positions.numel() == Tg && host_batch.labels.numel() == Tg,
              "micro-batch: ids ({}), positions ({}) and labels ({}) must have one entry per token", Tg,
              host_batch.positions.numel(), host_batch.labels.numel());
  SWIFT_CHECK(Tg % parallel_.sp_size() == 0, "micro-batch: {} tokens are not padded to a multiple of the sequence-parallel size {}", Tg, parallel_.sp_size());
  ops::check_cu_seqlens(host_batch.cu_seqlens, Tg, "micro-batch");
  // The batch is built on the host; a copy goes to the model's device once (a few KB), and apply_rope keeps
  // reading positions on the host.
  MicroBatch placed;
  if (!device_.is_cpu()) {
    placed = {host_batch.ids.to(device_), host_batch.positions.to(device_), host_batch.cu_seqlens.to(device_),
              host_batch.labels.to(device_)};
  }
  const MicroBatch& b = device_.is_cpu() ? host_batch : placed;
  // The ops that read cu_seqlens' lengths (attention, 2 per layer) and the labels (the loss) on the host take these
  // host copies instead of reading the device ones back (each read-back drains the stream).
  std::optional<ops::HostMirror> mirror_cu, mirror_labels;
  if (!device_.is_cpu()) {
    mirror_cu.emplace(b.cu_seqlens, host_batch.cu_seqlens);
    mirror_labels.emplace(local_tokens(b.labels), local_tokens(host_batch.labels));
  }
  host_batch_ = &host_batch;
  struct ResetHost {
    const MicroBatch*& p;
    ~ResetHost() { p = nullptr; }
  } reset_host{host_batch_};
  const bool training = backward;
  compute_dora_norms();
  // Which blocks recompute: with checkpointing the first min(L, recompute_layers_) blocks (all when negative), as
  // Megatron's "block" recompute method; the others keep every activation. Evaluation keeps nothing.
  const int64_t recomputed = !backward ? L : (!checkpoint ? 0 : (recompute_layers_ < 0 ? L : std::min(L, recompute_layers_)));
  auto keeps = [&](int64_t i) { return i >= recomputed; };
  const RecomputeModules& m = recompute_;
  auto mlp_recomputed = [&](int64_t i) { return m.mlp && (m.mlp_layers < 0 || i - recomputed < m.mlp_layers); };
  // Offloaded blocks (set_offload_layers): spread evenly over the kept blocks whose MLP stays, but the last two.
  std::vector<bool> offloads(static_cast<size_t>(L), false);
  if (offloader_) offloader_->clear();  // nothing left from a step that failed half-way
  if (frozen_stream_) frozen_stream_->clear();  // resident copies stay; SWIFT_OFFLOAD_TRACE prints the last step's
  if (backward && offload_layers_ > 0) {
    std::vector<int64_t> candidates;
    for (int64_t i = recomputed; i < L - 2; ++i) {
      if (!mlp_recomputed(i)) candidates.push_back(i);
    }
    const auto count = static_cast<int64_t>(candidates.size()), n = std::min(offload_layers_, count);
    for (int64_t k = 0; k < n; ++k) offloads[static_cast<size_t>(candidates[static_cast<size_t>(k * count / n)])] = true;
    if (n > 0 && !offloader_) offloader_ = std::make_unique<ops::ActivationOffloader>(device_);
  }
  // Slots of the offloaded tensors: gate, up, act of each block.
  auto slot = [](int64_t layer, int which) { return layer * 3 + which; };
  // Stores held before the op stream waits for the oldest (two blocks' gate and up: their copies finish while later
  // blocks compute) and how many blocks ahead the backward fetches; SWIFT_OFFLOAD_IN_FLIGHT / SWIFT_OFFLOAD_AHEAD
  // override them for measurements.
  static const auto kStoresInFlight = static_cast<size_t>(std::max<int64_t>(0, env_int("SWIFT_OFFLOAD_IN_FLIGHT", 4)));
  static const int64_t kFetchAhead = std::max<int64_t>(0, env_int("SWIFT_OFFLOAD_AHEAD", 2));
  // Streamed frozen layers (set_offload_frozen_layers): fetched this many layers ahead of their use.
  static const int64_t kFrozenAhead = std::max<int64_t>(0, env_int("SWIFT_FROZEN_AHEAD", 2));
  std::vector<Activations> acts(static_cast<size_t>(L));  // kept blocks' activations
  Activations scratch;                                    // a recomputed block's, one at a time
  // A recomputed block keeps its LoRA xa and keep bits (~5% of a 7B layer's activations: r columns of fp32 and a bit
  // per input element of each linear) so that its recompute skips the xa passes. SWIFT_CHECKPOINT_KEEP_XA=0 drops
  // them with the rest (A/B measurements; the same gradients).
  static const bool kKeepRank = env_int("SWIFT_CHECKPOINT_KEEP_XA", 1) != 0;
  std::vector<Activations> ranks(static_cast<size_t>(L));  // recomputed blocks' kept xa and keep bits
  std::vector<Tensor> inputs(static_cast<size_t>(L));     // block inputs (the checkpoints)
  Tensor x = act({T, C});
  dist::Communicator* vocab_tp = parallel_.tp_size() > 1 ? parallel_.tensor : nullptr;  // vocabulary-parallel
  set_up.reset();
  if (vocab_tp != nullptr) {  // this rank's rows of the lookup (zeros for other ranks' ids), summed over the group
    ops::embedding_shard(product_embedding(), local_tokens(b.ids), vocab_offset_, x);
    vocab_tp->all_reduce(x);
  } else {
    ops::embedding(product_embedding(), local_tokens(b.ids), x);
  }
  for (int64_t i = 0; i < L; ++i) {
    inputs[static_cast<size_t>(i)] = x;
    Activations& a = keeps(i) ? acts[static_cast<size_t>(i)] : scratch;
    a = Activations{};
    Tensor next = act({T, C});
    for (int64_t j = i; j <= i + kFrozenAhead; ++j) frozen_prefetch(j);  // after an evaluation: they were let go
    frozen_acquire(i);
    if (i < static_cast<int64_t>(frozen_.size())) compute_layer_dora_norms(i);  // the step-start pass skipped it
    layer_forward(i, b, x, a, next, seed, training);
    frozen_release(i);  // off the device until the backward's fetch: the memory peaks before that
    if (!keeps(i)) {
      if (kKeepRank && backward) {
        ranks[static_cast<size_t>(i)].xa = scratch.xa;
        ranks[static_cast<size_t>(i)].keep_bits = scratch.keep_bits;
      }
      scratch = Activations{};  // a recomputed block keeps only its input (and its rank terms) until its recompute
    } else if (backward) {  // selective recompute: layer_backward makes them again
      if (mlp_recomputed(i)) a.gate = a.up = a.act = Tensor();
      if (m.act) a.act = Tensor();
      if (m.layernorm) a.h1 = a.h2 = Tensor();
      if (offloads[static_cast<size_t>(i)]) {  // to the host until the backward fetches them back
        int which = 0;
        for (Tensor* t : {&a.gate, &a.up, &a.act}) {
          if (t->defined()) offloader_->store(slot(i, which), *t);
          *t = Tensor();
          ++which;
        }
        offloader_->retire(kStoresInFlight);
      }
    }
    x = next;
  }
  if (offloader_) offloader_->retire(0);  // every store's device memory is free before the head's
  Tensor hidden = act({T, C}), rstd = stat({T});
  ops::rmsnorm(x, final_norm_, static_cast<float>(c.rms_norm_eps), hidden, rstd);
  Tensor dhidden = backward ? act({T, C}) : Tensor();
  if (backward) provide_gradients(L);  // the head's gradients are written by the loss below
  Tensor dhead = backward ? grad_lm_head_ : Tensor();
  const ops::CrossEntropyStats ce =
      vocab_tp != nullptr ? vocab_parallel_cross_entropy(*vocab_tp, hidden, product_head(), local_tokens(b.labels),
                                                         vocab_offset_, grad_scale, dhidden, dhead)
                          : ops::cross_entropy(hidden, product_head(), local_tokens(b.labels), grad_scale, dhidden,
                                               dhead);
  StepStats stats{ce.loss_sum, ce.tokens, ce.correct};
  if (!backward) return stats;

  Tensor d = act({T, C});
  ops::rmsnorm_backward(dhidden, x, final_norm_, rstd, d, grad_final_norm_);
  for (int64_t i = L - 1; i >= 0; --i) {
    Activations& a = keeps(i) ? acts[static_cast<size_t>(i)] : scratch;
    for (int64_t j = i; j >= i - kFrozenAhead; --j) frozen_prefetch(j);  // kept until the next forward
    frozen_acquire(i);
    if (!keeps(i)) {  // recompute this block from its saved input (same dropout masks), without its output
      a = Activations{};
      if (kKeepRank) {
        a.xa = ranks[static_cast<size_t>(i)].xa;
        a.keep_bits = ranks[static_cast<size_t>(i)].keep_bits;
        a.rank_kept = true;
        ranks[static_cast<size_t>(i)] = Activations{};
      }
      Tensor out;  // made by layer_forward only where the down projection's output is not skipped
      layer_forward(i, b, inputs[static_cast<size_t>(i)], a, out, seed, training, /*block_recompute=*/true);
    }
    if (offloader_) {  // fetch the offloaded blocks two ahead; this block's tensors before its backward
      for (int64_t j = std::max<int64_t>(0, i - kFetchAhead); j <= i; ++j) {
        for (int which = 0; which < 3; ++which) {
          if (offloader_->holds(slot(j, which))) offloader_->prefetch(slot(j, which));
        }
      }
      int which = 0;
      for (Tensor* t : {&a.gate, &a.up, &a.act}) {
        if (offloader_->holds(slot(i, which))) *t = offloader_->take(slot(i, which));
        ++which;
      }
    }
    provide_gradients(i);
    layer_backward(i, b, a, d, seed);
    settle_deferred_zeros(layers_[static_cast<size_t>(i)]);
    sum_partial_gradients(i);  // gradients on demand: this layer's partial gradients, before the hook reduces them
    if (backward_hook_) backward_hook_(i);
    a = Activations{};  // free this block's activations before the next
  }
  provide_gradients(-1);
  if (grad_embed_.defined() && vocab_tp != nullptr) {
    ops::embedding_shard_backward(d, local_tokens(b.ids), vocab_offset_, grad_embed_, padding_id_);
  } else if (grad_embed_.defined()) {
    ops::embedding_backward(d, local_tokens(b.ids), grad_embed_, padding_id_);
  }
  if (backward_hook_) backward_hook_(-1);
  return stats;
}

// DoRA's weight norms of the current A and B (PEFT recomputes them in every forward and detaches them): computed
// once per micro-batch, shared by the forward, the checkpoint recompute and the backward.
// Tensor parallel: a column-parallel rank holds whole rows (its norms are local); a row-parallel rank (o / down) holds
// a column block of every row, so it computes the squares of its blocks, all-reduced over the group (one collective
// for every such linear, packed in dora_squares_) before the roots.
void TrainableModel::compute_dora_norms() {
  if (dora_norms_.empty()) dora_norms_.resize(lora_.layers.size());
  dist::Communicator* tp = parallel_.tp_size() > 1 ? parallel_.tensor : nullptr;
  auto row_parallel = [&](int k) {
    const auto kind = static_cast<LinearKind>(k);
    return tp != nullptr && (kind == LinearKind::O || kind == LinearKind::Down);
  };
  if (tp != nullptr && !dora_squares_.defined()) {  // the row-parallel norms: views of one buffer
    int64_t n = 0;
    for (size_t i = 0; i < lora_.layers.size(); ++i) {
      for (int k = 0; k < kLinearKinds; ++k) {
        const LoraLinear& ad = lora_.layers[i][static_cast<size_t>(k)];
        n += ad.defined() && ad.dora() && row_parallel(k) ? ad.magnitude.numel() : 0;
      }
    }
    if (n > 0) {
      dora_squares_ = Tensor::empty({n}, DType::F32, device_, MemoryCategory::Weights);
      int64_t offset = 0;
      for (size_t i = 0; i < lora_.layers.size(); ++i) {
        for (int k = 0; k < kLinearKinds; ++k) {
          const LoraLinear& ad = lora_.layers[i][static_cast<size_t>(k)];
          if (!ad.defined() || !ad.dora() || !row_parallel(k)) continue;
          dora_norms_[i][static_cast<size_t>(k)] = dora_squares_.slice_rows(offset, offset + ad.magnitude.numel());
          offset += ad.magnitude.numel();
        }
      }
    }
  }
  // Streamed frozen layers (no tensor parallelism): their norms are computed when the forward has their matrices
  // (compute_layer_dora_norms), from the same inputs.
  for (size_t i = frozen_.size(); i < lora_.layers.size(); ++i) compute_layer_dora_norms(static_cast<int64_t>(i));
  if (dora_squares_.defined()) {
    tp->all_reduce(dora_squares_);
    ops::dora_norm_from_squares(dora_squares_);
  }
}

void TrainableModel::compute_layer_dora_norms(int64_t layer) {
  if (layer < 0 || layer >= static_cast<int64_t>(lora_.layers.size())) return;
  const auto i = static_cast<size_t>(layer);
  const bool tp = parallel_.tp_size() > 1;
  for (int k = 0; k < kLinearKinds; ++k) {
    const LoraLinear& ad = lora_.layers[i][static_cast<size_t>(k)];
    if (!ad.defined() || !ad.dora()) continue;
    const auto kind = static_cast<LinearKind>(k);
    Tensor& n = dora_norms_[i][static_cast<size_t>(k)];
    if (!n.defined()) n = Tensor::empty({ad.magnitude.numel()}, DType::F32, device_, MemoryCategory::Weights);
    const Tensor& w = layers_[i].linears[static_cast<size_t>(k)].w;
    ops::dora_weight_norm(w, ad.a, ad.b, lora_.scale, n,
                          /*squares=*/tp && (kind == LinearKind::O || kind == LinearKind::Down));
  }
}

void TrainableModel::set_activation_dtype(DType dtype) {
  SWIFT_CHECK(dtype == DType::F32 || ((dtype == DType::BF16 || dtype == DType::F16) && device_.is_cuda()),
              "activation dtype {} is not supported on {} (F32 everywhere, BF16 or F16 on CUDA)", dtype_name(dtype),
              device_.str());
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
  const MicroBatch padded = pad_for_sequence_parallel(batch, parallel_.sp_size(), sp_pad_id());
  return run(padded, grad_scale, dropout_seed, gradient_checkpointing, true);
}

StepStats TrainableModel::evaluate(const MicroBatch& batch) {
  return run(pad_for_sequence_parallel(batch, parallel_.sp_size(), sp_pad_id()), 0.0f, 0, true, false);
}

int32_t TrainableModel::sp_pad_id() const { return padding_id_ >= 0 ? static_cast<int32_t>(padding_id_) : 0; }

void TrainableModel::set_parallel(const ParallelGroups& groups) {
  const io::ModelConfig& c = model_.config();
  const int64_t N = groups.tp_size(), P = groups.sp_size();
  const int64_t Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, F = c.intermediate_size;
  if (groups.sequence == parallel_.sequence && groups.tensor == parallel_.tensor) return;  // the same groups again
  SWIFT_CHECK(parallel_.tp_size() == 1 && parallel_.sp_size() == 1,
              "set_parallel: the parallel groups are set once, before training (this model already has others)");
  SWIFT_CHECK(N == 1 || frozen_.empty(), "--tensor_model_parallel_size {}: not with --offload_frozen_layers {} (the "
              "streamed matrices cannot be sharded); leave one of them off", N, frozen_.size());
  SWIFT_CHECK(!gradient_provider_ || groups.tp_size() == 1,
              "set_parallel: set the tensor-parallel group before the gradient provider (sharding rebinds gradients)");
  SWIFT_CHECK(model_.tensor_parallel_size() == 1 ||
                  (model_.tensor_parallel_size() == N && model_.tensor_parallel_rank() == groups.tp_rank()),
              "set_parallel: the model holds tensor-parallel shard {} of {} of its linears, but this rank is {} of a "
              "tensor-parallel group of {}", model_.tensor_parallel_rank(), model_.tensor_parallel_size(),
              groups.tp_rank(), N);
  if (N > 1) {
    SWIFT_CHECK(Hq % N == 0 && Hkv % N == 0 && F % N == 0,
                "--tensor_model_parallel_size {}: the attention heads and the MLP's intermediate units are split over "
                "the group, but this model has {} query heads, {} key/value heads and intermediate_size {}; pick a "
                "size that divides all three (e.g. {})",
                N, Hq, Hkv, F, std::gcd(std::gcd(Hq, Hkv), F));
    SWIFT_CHECK(groups.tensor->device() == device_,
                "--tensor_model_parallel_size: the group communicates on {} but the model lives on {}",
                groups.tensor->device().str(), device_.str());
    for (const Layer& l : layers_) {
      for (const Linear& lin : l.linears) {
        const DType w = lin.w.dtype();
        SWIFT_CHECK(w == DType::F32 || w == DType::BF16 || w == DType::F16,
                    "--tensor_model_parallel_size {}: the base weights are quantized ({}); splitting packed weights is "
                    "not supported, so drop --quant_bits or tensor parallelism", N, dtype_name(w));
      }
    }
  }
  if (P > 1) {
    SWIFT_CHECK((Hq / N) % P == 0 && ((Hkv / N) % P == 0 || P % (Hkv / N) == 0),
                "--sequence_parallel_size {}: Ulysses splits the attention heads over the group (key/value heads are "
                "repeated when there are fewer than ranks), but this model has {} query and {} key/value heads{}; pick "
                "a size that divides the query heads and divides or is a multiple of the key/value heads (e.g. {})",
                P, Hq / N, Hkv / N, N > 1 ? " per tensor-parallel rank" : "", std::gcd(Hq / N, Hkv / N));
    SWIFT_CHECK(groups.sequence->device() == device_,
                "--sequence_parallel_size: the group communicates on {} but the model lives on {}",
                groups.sequence->device().str(), device_.str());
  }
  parallel_ = groups;
  if (N > 1) shard_for_tensor_parallel();
}

void TrainableModel::shard_for_tensor_parallel() {
  using Layout = TensorParallelLayout;
  const int N = parallel_.tp_size(), t = parallel_.tp_rank();
  const bool full = type_ == TunerType::Full;
  // Sharded at load (CausalLM::shard_for_tensor_parallel): the linears' weights and column-parallel biases (and the
  // full fine-tuning masters made from them) already are this rank's shards.
  const bool loaded_shards = model_.tensor_parallel_size() > 1;
  std::map<std::string, Parameter*> by_name;
  for (Parameter& p : params_) by_name[p.name] = &p;
  const VocabRange vocab = vocab_shard_range(model_.config().vocab_size, t, N);
  vocab_offset_ = vocab.first;
  // A trainable tensor takes its layout; a sharded one is replaced by its shard (unless `already`), and the model's
  // own handles (`value`, `grad`) follow the Parameter.
  auto reshard = [&](const std::string& name, Tensor& value, Tensor& grad, Layout layout, bool already = false) {
    auto it = by_name.find(name);
    SWIFT_CHECK(it != by_name.end(), "tensor parallel: '{}' is not a trainable parameter", name);
    Parameter& p = *it->second;
    p.tp = layout;
    // A vocabulary table of whole rows is cut even when the model was sharded at load: modules_to_save copies made
    // from the whole weights before the load's sharding (swift sft creates the adapters first).
    if (layout == Layout::VocabRows && value.size(0) == model_.config().vocab_size) already = false;
    if (!is_sharded(layout) || already) return;
    value = tensor_parallel_shard(value, layout, t, N, name);
    grad = Tensor::zeros(value.shape(), DType::F32, device_, MemoryCategory::Gradients);
    p.value = value;
    p.grad = grad;
  };
  // Vocabulary-parallel embedding and head: this rank's rows (a tied head is the embedding's shard itself).
  if (full) {
    reshard("model.embed_tokens.weight", embed_, grad_embed_, Layout::VocabRows, loaded_shards);
    if (tied_) {
      lm_head_ = embed_;
      grad_lm_head_ = grad_embed_;
    } else {
      reshard("lm_head.weight", lm_head_, grad_lm_head_, Layout::VocabRows, loaded_shards);
    }
  } else {
    auto frozen_rows = [&](Tensor& table) {  // a frozen table sharded at load already is this rank's rows
      if (!loaded_shards) table = table.slice_rows(vocab.first, vocab.first + vocab.count);
    };
    if (lora_.embed_tokens.defined()) {  // modules_to_save copies: trained shards
      reshard(io::peft_module_weight_name(kEmbedModule), lora_.embed_tokens, grad_embed_, Layout::VocabRows,
              loaded_shards);
      embed_ = lora_.embed_tokens;
    } else {
      frozen_rows(embed_);
    }
    if (lora_.lm_head.defined()) {
      reshard(io::peft_module_weight_name(kLmHeadModule), lora_.lm_head, grad_lm_head_, Layout::VocabRows,
              loaded_shards);
      lm_head_ = lora_.lm_head;
    } else {
      frozen_rows(lm_head_);
    }
  }
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    if (full) {  // q/k/v run as three products under tensor parallelism: their own gradients (resharded below)
      l.qkv_grad = Tensor();
      l.qkv_grad_bias = Tensor();
    }
    if (full && l.q_norm.defined()) {  // applied to this rank's heads only: partial gradients
      reshard(prefix + "self_attn.q_norm.weight", l.q_norm, l.grad_q_norm, Layout::Partial);
      reshard(prefix + "self_attn.k_norm.weight", l.k_norm, l.grad_k_norm, Layout::Partial);
    }
    for (int k = 0; k < kLinearKinds; ++k) {
      const auto kind = static_cast<LinearKind>(k);
      const bool column = kind != LinearKind::O && kind != LinearKind::Down;
      Linear& lin = l.linears[static_cast<size_t>(k)];
      const std::string module = linear_module_path(static_cast<int64_t>(i), kind);
      if (full) {
        reshard(module + ".weight", lin.w, lin.grad_w, column ? Layout::Rows : Layout::Columns, loaded_shards);
        if (lin.bias.defined()) {
          reshard(module + ".bias", lin.bias, lin.grad_bias, column ? Layout::Rows : Layout::Partial, loaded_shards);
        }
      } else if (loaded_shards) {  // frozen and sharded at load: nothing to cut
      } else if (column) {  // frozen: a row shard is a view of the base weight
        const int64_t M = lin.w.size(0);
        lin.w = lin.w.slice_rows(t * M / N, (t + 1) * M / N);
        if (lin.bias.defined()) lin.bias = lin.bias.slice_rows(t * M / N, (t + 1) * M / N);
      } else {
        lin.w = tensor_parallel_shard(lin.w, Layout::Columns, t, N, module + ".weight");
      }
      if (!column && t != 0) {  // the row-parallel output is summed over the group: rank 0 alone adds the bias
        lin.bias = Tensor();
        lin.grad_bias = Tensor();
        // Its Parameter keeps a gradient that stays zero (the group's sum is rank 0's): gradients bound on demand
        // must not reach the model's handle, or this rank's backward would add the bias gradient a second time.
        if (auto it = by_name.find(module + ".bias"); it != by_name.end()) {
          std::vector<Tensor*>& handles = grad_handles_[static_cast<size_t>(it->second - params_.data())];
          handles.erase(std::remove(handles.begin(), handles.end(), &lin.grad_bias), handles.end());
        }
      }
      if (lin.lora != nullptr) {
        LoraLinear& ad = lora_.layers[i][static_cast<size_t>(k)];
        reshard(io::peft_lora_name(module, "lora_A"), ad.a, lin.grad_a, column ? Layout::Partial : Layout::Columns);
        reshard(io::peft_lora_name(module, "lora_B"), ad.b, lin.grad_b, column ? Layout::Rows : Layout::Partial);
        // DoRA: one magnitude per output row; a row-parallel rank's outputs are partial sums of every row, so its
        // magnitude (whole, from the whole weights) gets a partial gradient.
        if (ad.dora()) {
          reshard(io::peft_magnitude_name(module), ad.magnitude, lin.grad_m, column ? Layout::Rows : Layout::Partial);
        }
      }
    }
  }
}

void TrainableModel::reduce_tensor_parallel_gradients() {
  // With gradients on demand the partial gradients were summed stage by stage during each backward.
  if (parallel_.tp_size() == 1 || gradient_provider_) return;
  sum_partial_gradients(std::nullopt);
}

void TrainableModel::sum_partial_gradients(std::optional<int64_t> stage) {
  if (parallel_.tp_size() == 1 || (stage && !gradient_provider_)) return;
  auto selected = [&](size_t i) {
    return params_[i].tp == TensorParallelLayout::Partial && (!stage || first_grad_stage_[i] == *stage);
  };
  int64_t n = 0;
  for (size_t i = 0; i < params_.size(); ++i) n += selected(i) ? params_[i].grad.numel() : 0;
  if (n == 0) return;
  // One all-reduce over the selected partial gradients, packed end to end.
  Tensor flat = Tensor::empty({n}, DType::F32, device_, MemoryCategory::Workspace);
  int64_t offset = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!selected(i)) continue;
    const Tensor& g = params_[i].grad;
    flat.slice_rows(offset, offset + g.numel()).copy_from(g.view({g.numel()}));
    offset += g.numel();
  }
  parallel_.tensor->all_reduce(flat);
  offset = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!selected(i)) continue;
    Tensor g = params_[i].grad.view({params_[i].grad.numel()});
    g.copy_from(flat.slice_rows(offset, offset + g.numel()));
    offset += g.numel();
  }
}

Tensor TrainableModel::local_tokens(const Tensor& per_token) const {
  const int64_t P = parallel_.sp_size();
  if (P == 1) return per_token;
  const int64_t share = per_token.size(0) / P, r = parallel_.sp_rank();
  return per_token.slice_rows(r * share, (r + 1) * share);
}

}  // namespace swift::model
