// train/loss_scaler.h — dynamic loss scaling for fp16 training, with torch.amp.GradScaler's semantics as Hugging Face
// transformers drives it (through accelerate) for `--torch_dtype float16` / `--fp16`:
//   - the backward runs on scale * loss (the trainer multiplies the loss gradient coefficient by scale());
//   - before clipping, the gradients are multiplied by inverse_scale() (GradScaler.unscale_: inv_scale = 1 / scale
//     in double, rounded to fp32), and a step whose unscaled gradients hold an inf or NaN is skipped: no optimizer
//     update and no LR scheduler advance (transformers steps the scheduler only when
//     accelerator.optimizer_step_was_skipped is false), while global_step still advances;
//   - update(found_nonfinite) is torch's _amp_update_scale_: a non-finite step multiplies the scale by
//     backoff_factor and zeroes the count of clean steps; growth_interval clean steps in a row multiply it by
//     growth_factor (kept only when the result is finite) and restart the count.
// Invariants:
//  - Defaults are GradScaler's: init_scale 2^16, growth_factor 2, backoff_factor 0.5, growth_interval 2000. The
//    scale stays a power of two with these factors, so scaling and unscaling are exact in fp32 (barring overflow and
//    subnormals): without an overflow, a run with the scaler gives the bits of the run without it.
//  - The state (scale, count of clean steps) is saved in checkpoints (trainer_state.json "loss_scaler") and
//    restored on resume, so the continuation uses the same scale.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace swift::train {

struct LossScalerConfig {
  float init_scale = 65536.0f;
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
};

// What a checkpoint keeps (GradScaler.state_dict: scale and _growth_tracker).
struct LossScalerState {
  float scale = 65536.0f;
  int64_t growth_tracker = 0;  // clean steps since the last change of the scale
  nlohmann::json to_json() const;
  static LossScalerState from_json(const nlohmann::json& json, const std::string& source);
};

class LossScaler {
 public:
  explicit LossScaler(LossScalerConfig config = {});
  float scale() const { return state_.scale; }
  // GradScaler.unscale_'s factor: (1 / scale) computed in double, rounded to fp32.
  float inverse_scale() const;
  // After the step's gradients were checked: backs off on a non-finite step, grows after growth_interval clean ones.
  void update(bool found_nonfinite);
  const LossScalerState& state() const { return state_; }
  void restore(const LossScalerState& state);
  const LossScalerConfig& config() const { return config_; }

 private:
  LossScalerConfig config_;
  LossScalerState state_;
};

}  // namespace swift::train
