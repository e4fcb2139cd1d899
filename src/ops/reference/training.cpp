// ops/reference/training.cpp — plain CPU oracle of the training ops (namespace swift::ops::ref): dropout, LoRA
// linear forward/backward, unchunked cross-entropy and token log-probabilities, AdamW, gradient norm and clip.
//
// Invariants:
//  - Naive loops, one thread, double arithmetic, one rounding per stored value (as reference.cpp), except
//    AdamW / clip, whose definition *is* a sequence of fp32 roundings (torch's): they are written scalar, one
//    element at a time, with the same fp32 operations as ops.h documents (this file is built without
//    contraction, so only the explicit std::fma calls fuse).
//  - The dropout mask comes from ops/philox.h, element by element (dropout_keep at dropout_index of the op's map),
//    independent of the fast kernel's block-wise generation.
//  - Cross-entropy keeps all V logits of one token at a time (a reference may; the fast op never does).
#include <cmath>
#include <vector>

#include "ops/op_checks.h"
#include "ops/philox.h"
#include "ops/reference.h"
#include "ops/reference/ref_util.h"

namespace swift::ops::ref {

using util::load;
using util::store;

namespace {

// The dropout multiplier of local flat element i of a (.., cols) operand (stream index through d.map):
// 1 / (1 - p) in float when kept, else 0.
double multiplier(const Dropout& d, int64_t i, int64_t cols) {
  if (d.p == 0.0f) return 1.0;
  const float keep_scale = 1.0f / (1.0f - d.p);
  return dropout_keep(d.seed, dropout_index(d.map, i / cols, i % cols, cols), dropout_threshold(d.p)) ? keep_scale : 0.0;
}

}  // namespace

void dropout(const Tensor& x, const Dropout& d, Tensor& out) {
  detail::require_cpu("dropout", detail::check_dropout(x, d, out));
  const int64_t cols = x.dim() > 0 ? x.size(x.dim() - 1) : 1;
  for (int64_t i = 0; i < x.numel(); ++i) store(out, i, static_cast<double>(load(x, i)) * multiplier(d, i, cols));
}

// y = x w^T + bias + scale (dropout(x) a^T) b^T; xa = dropout(x) a^T.
void lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b, float scale,
                 const Dropout& d, Tensor& y, Tensor& xa, bool accumulate) {
  detail::require_cpu("lora_linear", detail::check_lora_linear(x, w, bias, a, b, scale, d, y, xa));
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0), r = a.size(0);
  std::vector<double> xar(static_cast<size_t>(r));
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t q = 0; q < r; ++q) {
      double acc = 0.0;
      for (int64_t i = 0; i < k; ++i) {
        acc += static_cast<double>(load(x, row * k + i)) * multiplier(d, row * k + i, k) * load(a, q * k + i);
      }
      xar[static_cast<size_t>(q)] = acc;
      store(xa, row * r + q, acc);
    }
    for (int64_t o = 0; o < m; ++o) {
      double acc = bias.defined() ? load(bias, o) : 0.0;
      for (int64_t i = 0; i < k; ++i) acc += static_cast<double>(load(x, row * k + i)) * load(w, o * k + i);
      double lora = 0.0;
      for (int64_t q = 0; q < r; ++q) lora += xar[static_cast<size_t>(q)] * load(b, o * r + q);
      acc += static_cast<double>(scale) * lora;
      if (accumulate) acc += load(y, row * m + o);
      store(y, row * m + o, acc);
    }
  }
}

// g = dy b; dx = dy w + scale mult (g a); da += scale g^T dropout(x); db += scale dy^T xa.
void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& xa, float scale, const Dropout& d, Tensor& dx, Tensor& da, Tensor& db,
                          bool accumulate_dx) {
  detail::require_cpu("lora_linear_backward",
                      detail::check_lora_linear_backward(dy, x, w, a, b, xa, scale, d, dx, da, db, accumulate_dx));
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0), r = a.size(0);
  std::vector<double> g(static_cast<size_t>(n * r), 0.0);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t q = 0; q < r; ++q) {
      double acc = 0.0;
      for (int64_t o = 0; o < m; ++o) acc += static_cast<double>(load(dy, row * m + o)) * load(b, o * r + q);
      g[static_cast<size_t>(row * r + q)] = acc;
    }
  }
  if (dx.defined()) {
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t i = 0; i < k; ++i) {
        double base = 0.0, lora = 0.0;
        for (int64_t o = 0; o < m; ++o) base += static_cast<double>(load(dy, row * m + o)) * load(w, o * k + i);
        for (int64_t q = 0; q < r; ++q) lora += g[static_cast<size_t>(row * r + q)] * load(a, q * k + i);
        double v = base + static_cast<double>(scale) * multiplier(d, row * k + i, k) * lora;
        if (accumulate_dx) v += load(dx, row * k + i);
        store(dx, row * k + i, v);
      }
    }
  }
  if (da.defined()) {
    for (int64_t q = 0; q < r; ++q) {
      for (int64_t i = 0; i < k; ++i) {
        double acc = 0.0;
        for (int64_t row = 0; row < n; ++row) {
          acc += g[static_cast<size_t>(row * r + q)] * load(x, row * k + i) * multiplier(d, row * k + i, k);
        }
        store(da, q * k + i, load(da, q * k + i) + static_cast<double>(scale) * acc);
      }
    }
  }
  if (db.defined()) {
    for (int64_t o = 0; o < m; ++o) {
      for (int64_t q = 0; q < r; ++q) {
        double acc = 0.0;
        for (int64_t row = 0; row < n; ++row) acc += static_cast<double>(load(dy, row * m + o)) * load(xa, row * r + q);
        store(db, o * r + q, load(db, o * r + q) + static_cast<double>(scale) * acc);
      }
    }
  }
}

namespace {

// Logits of token i over the head's rows in double (z[v] = hidden_i . head_v); returns the first argmax, max in *max_z.
int64_t token_logits(const Tensor& hidden, const Tensor& head, int64_t i, std::vector<double>& z, double* max_z) {
  const int64_t c = hidden.size(1), vocab = head.size(0);
  *max_z = -INFINITY;
  int64_t argmax = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    double acc = 0.0;
    for (int64_t e = 0; e < c; ++e) acc += static_cast<double>(load(hidden, i * c + e)) * load(head, v * c + e);
    z[static_cast<size_t>(v)] = acc;
    if (acc > *max_z) {
      *max_z = acc;
      argmax = v;
    }
  }
  return argmax;
}

// Shared core: for each valid token, all logits in double; loss, argmax, and the gradients of
// sum_t coef_t * (-log p_t[label]) (coef per token from `coef_of`).
template <typename Coef>
CrossEntropyStats lm_head_reference(const Tensor& hidden, const Tensor& head, const Tensor& labels, int32_t ignore,
                                    Coef&& coef_of, Tensor* dhidden, Tensor* dhead, Tensor* logp) {
  const int64_t t = hidden.size(0), c = hidden.size(1), vocab = head.size(0);
  const int32_t* lab = labels.data<int32_t>();
  CrossEntropyStats stats;
  std::vector<double> z(static_cast<size_t>(vocab)), dh(static_cast<size_t>(c));
  std::vector<double> gw(dhead ? static_cast<size_t>(vocab * c) : 0, 0.0);
  for (int64_t i = 0; i < t; ++i) {
    if (lab[i] == ignore) {
      if (dhidden) for (int64_t e = 0; e < c; ++e) store(*dhidden, i * c + e, 0.0);
      if (logp) store(*logp, i, 0.0);
      continue;
    }
    double max_z = 0.0;
    const int64_t argmax = token_logits(hidden, head, i, z, &max_z);
    double sum = 0.0;
    for (double zv : z) sum += std::exp(zv - max_z);
    const double lse = max_z + std::log(sum);
    const double lp = z[static_cast<size_t>(lab[i])] - lse;
    stats.tokens += 1;
    stats.loss_sum += -lp;
    stats.correct += argmax == lab[i] ? 1 : 0;
    if (logp) store(*logp, i, lp);
    if (!dhidden && !dhead) continue;
    const double cf = coef_of(i);
    std::fill(dh.begin(), dh.end(), 0.0);
    for (int64_t v = 0; v < vocab; ++v) {
      const double dz = cf * (std::exp(z[static_cast<size_t>(v)] - lse) - (v == lab[i] ? 1.0 : 0.0));
      for (int64_t e = 0; e < c; ++e) {
        dh[static_cast<size_t>(e)] += dz * load(head, v * c + e);
        if (dhead) gw[static_cast<size_t>(v * c + e)] += dz * load(hidden, i * c + e);
      }
    }
    if (dhidden) for (int64_t e = 0; e < c; ++e) store(*dhidden, i * c + e, dh[static_cast<size_t>(e)]);
  }
  if (dhead) {
    for (int64_t e = 0; e < vocab * c; ++e) store(*dhead, e, load(*dhead, e) + gw[static_cast<size_t>(e)]);
  }
  return stats;
}

Tensor* opt(Tensor& t) { return t.defined() ? &t : nullptr; }

}  // namespace

CrossEntropyStats cross_entropy(const Tensor& hidden, const Tensor& head, const Tensor& labels, float grad_scale,
                                Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options) {
  detail::require_cpu("cross_entropy", detail::check_lm_head_loss("cross_entropy", hidden, head, labels, options,
                                                                  Tensor(), dhidden, dhead));
  return lm_head_reference(hidden, head, labels, options.ignore_index, [&](int64_t) { return double{grad_scale}; },
                           opt(dhidden), opt(dhead), nullptr);
}

void token_logprobs(const Tensor& hidden, const Tensor& head, const Tensor& labels, Tensor& logp,
                    const CrossEntropyOptions& options) {
  Tensor none;
  detail::require_cpu("token_logprobs", detail::check_lm_head_loss("token_logprobs", hidden, head, labels, options,
                                                                   logp, none, none));
  lm_head_reference(hidden, head, labels, options.ignore_index, [](int64_t) { return 0.0; }, nullptr, nullptr, &logp);
}

void token_logprobs_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, const Tensor& dlogp,
                             Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options) {
  detail::require_cpu("token_logprobs_backward", detail::check_lm_head_loss("token_logprobs_backward", hidden, head,
                                                                            labels, options, dlogp, dhidden, dhead));
  // logp = -loss, so d/dh of sum dlogp_t logp_t = gradient of the loss with coefficient -dlogp_t.
  lm_head_reference(hidden, head, labels, options.ignore_index,
                    [&](int64_t i) { return -static_cast<double>(load(dlogp, i)); }, opt(dhidden), opt(dhead),
                    nullptr);
}

void cross_entropy_shard_stats(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                               Tensor& lse, Tensor& label_logit, Tensor& max_logit, Tensor& argmax,
                               const CrossEntropyOptions& options) {
  Tensor none;
  detail::require_cpu("cross_entropy_shard_stats",
                      detail::check_lm_head_shard("cross_entropy_shard_stats", hidden, head, labels, vocab_offset,
                                                  options, {&lse, &label_logit, &max_logit}, argmax, none, none));
  const int64_t t = hidden.size(0), vocab = head.size(0);
  const int32_t* lab = labels.data<int32_t>();
  int32_t* arg = argmax.data<int32_t>();
  for (int64_t i = 0; i < t; ++i) {
    double max_z = -INFINITY, sum = 0.0, label_z = 0.0;
    int64_t best = 0;
    std::vector<double> z(static_cast<size_t>(vocab));
    if (lab[i] != options.ignore_index) {
      best = token_logits(hidden, head, i, z, &max_z);
      for (double zv : z) sum += std::exp(zv - max_z);
      const int64_t own = lab[i] - vocab_offset;
      if (own >= 0 && own < vocab) label_z = z[static_cast<size_t>(own)];
    }
    const bool valid = lab[i] != options.ignore_index;
    store(lse, i, valid ? max_z + std::log(sum) : 0.0);
    store(label_logit, i, label_z);
    store(max_logit, i, valid ? max_z : 0.0);
    arg[i] = valid ? static_cast<int32_t>(vocab_offset + best) : 0;
  }
}

void cross_entropy_shard_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                                  const Tensor& lse, float grad_scale, Tensor& dhidden, Tensor& dhead,
                                  const CrossEntropyOptions& options) {
  detail::require_cpu("cross_entropy_shard_backward",
                      detail::check_lm_head_shard("cross_entropy_shard_backward", hidden, head, labels, vocab_offset,
                                                  options, {&lse}, Tensor(), dhidden, dhead));
  const int64_t t = hidden.size(0), c = hidden.size(1), vocab = head.size(0);
  const int32_t* lab = labels.data<int32_t>();
  std::vector<double> dh(static_cast<size_t>(c));
  std::vector<double> gw(dhead.defined() ? static_cast<size_t>(vocab * c) : 0, 0.0);
  for (int64_t i = 0; i < t; ++i) {
    std::fill(dh.begin(), dh.end(), 0.0);
    if (lab[i] != options.ignore_index) {
      const double l = load(lse, i);
      for (int64_t v = 0; v < vocab; ++v) {
        double z = 0.0;
        for (int64_t e = 0; e < c; ++e) z += static_cast<double>(load(hidden, i * c + e)) * load(head, v * c + e);
        const double dz = grad_scale * (std::exp(z - l) - (v + vocab_offset == lab[i] ? 1.0 : 0.0));
        for (int64_t e = 0; e < c; ++e) {
          dh[static_cast<size_t>(e)] += dz * load(head, v * c + e);
          if (dhead.defined()) gw[static_cast<size_t>(v * c + e)] += dz * load(hidden, i * c + e);
        }
      }
    }
    if (dhidden.defined()) for (int64_t e = 0; e < c; ++e) store(dhidden, i * c + e, dh[static_cast<size_t>(e)]);
  }
  if (dhead.defined()) {
    for (int64_t e = 0; e < vocab * c; ++e) store(dhead, e, load(dhead, e) + gw[static_cast<size_t>(e)]);
  }
}

void adamw_step(std::span<const AdamWTensor> tensors, const AdamWConfig& config, int64_t step) {
  detail::require_cpu("adamw_step", detail::check_adamw(tensors, config, step));
  const double bc1 = 1.0 - std::pow(config.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(config.beta2, static_cast<double>(step));
  const float step_size_neg = static_cast<float>(-(config.lr / bc1));
  const float bc2_sqrt = static_cast<float>(std::pow(bc2, 0.5));
  const float decay = static_cast<float>(1.0 - config.lr * config.weight_decay);
  const float w1 = static_cast<float>(1.0 - config.beta1);
  const float beta2 = static_cast<float>(config.beta2), w2 = static_cast<float>(1.0 - config.beta2);
  const float eps = static_cast<float>(config.eps);
  for (const AdamWTensor& t : tensors) {
    float* p = t.param.data<float>();
    const float* g = t.grad.data<float>();
    float* m = t.exp_avg.data<float>();
    float* v = t.exp_avg_sq.data<float>();
    for (int64_t i = 0; i < t.param.numel(); ++i) {
      const float gi = g[i] * config.grad_scale;                             // clip_grad_norm_'s grad.mul_(coef)
      if (config.weight_decay != 0.0) p[i] = p[i] * decay;                  // param.mul_(1 - lr * wd)
      m[i] = std::fabs(w1) < 0.5f ? std::fma(w1, gi - m[i], m[i])           // exp_avg.lerp_(grad, 1 - beta1)
                                  : std::fma(w1 - 1.0f, gi - m[i], gi);
      v[i] = std::fma(w2 * gi, gi, v[i] * beta2);                            // mul_(beta2).addcmul_(g, g, 1 - beta2)
      const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;                  // (sqrt / bc2_sqrt).add_(eps)
      p[i] = p[i] + (step_size_neg * m[i]) / denom;                          // addcdiv_(m, denom, -step_size)
    }
  }
}

float grad_norm(std::span<const Tensor> grads) {
  detail::require_cpu("grad_norm", detail::check_grads("grad_norm", grads, false));
  double sum = 0.0;
  for (const Tensor& g : grads) {
    for (int64_t i = 0; i < g.numel(); ++i) sum += static_cast<double>(load(g, i)) * load(g, i);
  }
  return static_cast<float>(std::sqrt(sum));
}

float clip_grad_norm(std::span<const Tensor> grads, double max_norm) {
  detail::require_cpu("clip_grad_norm", detail::check_grads("clip_grad_norm", grads, true));
  const float total = grad_norm(grads);
  const float applied = clip_coefficient(total, max_norm);
  for (const Tensor& g : grads) {
    float* p = g.data<float>();
    for (int64_t i = 0; i < g.numel(); ++i) p[i] = p[i] * applied;
  }
  return total;
}

void scale_gradients(std::span<const Tensor> grads, float factor) {
  detail::require_cpu("scale_gradients", detail::check_grads("scale_gradients", grads, true));
  for (const Tensor& g : grads) {
    float* p = g.data<float>();
    for (int64_t i = 0; i < g.numel(); ++i) p[i] = p[i] * factor;
  }
}

}  // namespace swift::ops::ref
