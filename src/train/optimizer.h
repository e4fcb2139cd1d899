// train/optimizer.h — AdamW over a model's trainable parameters, with transformers' Trainer parameter groups
// (no weight decay for biases and normalisation weights), gradient clipping, and state for checkpoints.
//
// Invariants:
//  - One AdamW state (exp_avg, exp_avg_sq: F32, zero at start) per parameter; `steps()` counts every step taken,
//    including steps at lr 0 (torch's state["step"]).
//  - weight_decay_applies(name) is Trainer.get_decay_parameter_names: false for names containing "bias" or a
//    normalisation weight (layernorm, rmsnorm, "(^|.)norm($|.)", "_norm($|.)"), true otherwise.
//  - The update itself is ops::adamw_step (torch.optim.AdamW, foreach=False, operation for operation).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/training.h"
#include "ops/ops.h"

namespace swift::train {

bool weight_decay_applies(const std::string& parameter_name);

class AdamW {
 public:
  // betas, eps and weight_decay from `config` (its lr is ignored: step() takes the scheduled lr).
  AdamW(std::vector<model::Parameter>& params, const ops::AdamWConfig& config);
  // grad_scale: each gradient read as grad * grad_scale (clip_coefficient of measure_gradients: the clip folded in).
  // A parameter with a product copy (model::Parameter::product) gets it written with the update, and product_current
  // set (SWIFT_ADAMW_PRODUCTS=0: not written; the next forward casts it).
  void step(double lr, float grad_scale = 1.0f);
  int64_t steps() const { return steps_; }
  void set_steps(int64_t steps) { steps_ = steps; }  // when restoring a checkpoint
  // exp_avg and exp_avg_sq of parameter i (checkpoint save and restore).
  Tensor& exp_avg(size_t i) { return states_[i].exp_avg; }
  Tensor& exp_avg_sq(size_t i) { return states_[i].exp_avg_sq; }
  size_t size() const { return states_.size(); }

 private:
  // with_decay_ / without_decay_ from states_ and the parameters' product copies, rebuilt only when a tensor behind
  // them changed (copying ~400 x 5 tensor handles every step cost the 7B LoRA step 0.4 ms of host time while the GPU
  // waited for its update, docs/PERFORMANCE.md run 22).
  void refresh_groups(bool products);

  ops::AdamWConfig config_;
  std::vector<model::Parameter>* params_;  // the caller's, outliving this optimizer (their product copies)
  std::vector<ops::AdamWTensor> states_;
  std::vector<uint8_t> decay_;
  int64_t steps_ = 0;
  std::vector<ops::AdamWTensor> with_decay_, without_decay_;  // the two groups' tensors, as of groups_key_
  std::vector<uintptr_t> groups_key_;
};

// Global L2 norm of the parameters' gradients before clipping, then clips them to max_norm (torch's
// clip_grad_norm_); max_norm <= 0 only measures. Returns the pre-clip norm.
float clip_gradients(std::vector<model::Parameter>& params, double max_norm);
// The same norm without touching the gradients: *clip_scale gets the multiplier clip_gradients would apply (1 when
// max_norm <= 0), for AdamW::step to fold in (the same bits as clip_gradients then step, one pass less).
float measure_gradients(const std::vector<model::Parameter>& params, double max_norm, float* clip_scale);

}  // namespace swift::train
