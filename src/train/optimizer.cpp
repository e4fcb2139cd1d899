// train/optimizer.cpp — AdamW with Trainer's decay groups; gradient clipping.
#include "train/optimizer.h"

#include <regex>

#include "core/error.h"
#include "ops/env_switch.h"

namespace swift::train {

bool weight_decay_applies(const std::string& name) {
  static const std::regex norm_pattern(R"((^|\.)norm($|\.)|_norm($|\.))");
  std::string lower;
  for (char c : name) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (lower.find("bias") != std::string::npos) return false;
  if (lower.find("layernorm") != std::string::npos || lower.find("rmsnorm") != std::string::npos) return false;
  return !std::regex_search(lower, norm_pattern);
}

AdamW::AdamW(std::vector<model::Parameter>& params, const ops::AdamWConfig& config)
    : config_(config), params_(&params) {
  SWIFT_CHECK(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1,
              "--adam_beta1 / --adam_beta2 must be in [0, 1), got {} / {}", config.beta1, config.beta2);
  SWIFT_CHECK(config.eps > 0, "--adam_epsilon must be positive, got {}", config.eps);
  SWIFT_CHECK(config.weight_decay >= 0, "--weight_decay must be >= 0, got {}", config.weight_decay);
  for (model::Parameter& p : params) {
    states_.push_back({p.value, p.grad, Tensor::zeros(p.value.shape(), DType::F32, p.value.device(), MemoryCategory::Optimizer),
                       Tensor::zeros(p.value.shape(), DType::F32, p.value.device(), MemoryCategory::Optimizer)});
    decay_.push_back(weight_decay_applies(p.name) ? 1 : 0);
  }
}

void AdamW::step(double lr, float grad_scale) {
  static ops::EnvSwitch products_switch("SWIFT_ADAMW_PRODUCTS", true);  // =0: the next forward casts them
  const bool kProducts = products_switch.on();
  ++steps_;
  for (model::Parameter& p : *params_) p.product_current = false;
  refresh_groups(kProducts);
  ops::AdamWConfig c = config_;
  c.lr = lr;
  c.grad_scale = grad_scale;
  if (!with_decay_.empty()) ops::adamw_step(with_decay_, c, steps_);
  c.weight_decay = 0.0;
  if (!without_decay_.empty()) ops::adamw_step(without_decay_, c, steps_);
  for (size_t i = 0; i < states_.size(); ++i) {
    model::Parameter& p = (*params_)[i];
    p.product_current = kProducts && p.product.defined() && p.product.numel() == states_[i].param.numel();
  }
}

// The key is every tensor's address and size (a restored state, a rebound gradient or a new product copy changes
// it); the lists hold their own handles, so a tensor they still name cannot be freed and its address reused.
void AdamW::refresh_groups(bool products) {
  std::vector<uintptr_t> key;
  key.reserve(states_.size() * 10);
  auto add = [&](const Tensor& t) {
    key.push_back(t.defined() ? reinterpret_cast<uintptr_t>(t.raw()) : 0);
    key.push_back(t.defined() ? static_cast<uintptr_t>(t.numel()) : 0);
  };
  auto product_of = [&](size_t i) -> const Tensor* {  // the copy the update writes, or none
    const model::Parameter& p = (*params_)[i];
    return products && p.product.defined() && p.product.numel() == states_[i].param.numel() ? &p.product : nullptr;
  };
  const Tensor none;
  for (size_t i = 0; i < states_.size(); ++i) {
    const ops::AdamWTensor& s = states_[i];
    for (const Tensor* t : {&s.param, &s.grad, &s.exp_avg, &s.exp_avg_sq}) add(*t);
    const Tensor* product = product_of(i);
    add(product != nullptr ? *product : none);
  }
  if (key == groups_key_) return;
  with_decay_.clear();
  without_decay_.clear();
  for (size_t i = 0; i < states_.size(); ++i) {
    ops::AdamWTensor t = states_[i];
    if (const Tensor* product = product_of(i)) t.product = *product;
    (decay_[i] ? with_decay_ : without_decay_).push_back(t);
  }
  groups_key_ = std::move(key);
}

namespace {
std::vector<Tensor> gradients_of(const std::vector<model::Parameter>& params) {
  std::vector<Tensor> grads;
  grads.reserve(params.size());
  for (const model::Parameter& p : params) grads.push_back(p.grad);
  return grads;
}
}  // namespace

float clip_gradients(std::vector<model::Parameter>& params, double max_norm) {
  const std::vector<Tensor> grads = gradients_of(params);
  if (max_norm <= 0) return ops::grad_norm(grads);
  return ops::clip_grad_norm(grads, max_norm);
}

float measure_gradients(const std::vector<model::Parameter>& params, double max_norm, float* clip_scale) {
  const float norm = ops::grad_norm(gradients_of(params));
  *clip_scale = max_norm > 0 ? ops::clip_coefficient(norm, max_norm) : 1.0f;
  return norm;
}

}  // namespace swift::train
