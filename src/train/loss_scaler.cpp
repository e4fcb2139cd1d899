// train/loss_scaler.cpp — torch.amp.GradScaler's scale update (_amp_update_scale_) and its checkpoint state.
#include "train/loss_scaler.h"

#include <cmath>

#include "core/error.h"

namespace swift::train {

nlohmann::json LossScalerState::to_json() const { return {{"scale", scale}, {"growth_tracker", growth_tracker}}; }

LossScalerState LossScalerState::from_json(const nlohmann::json& j, const std::string& source) {
  LossScalerState s;
  try {
    s.scale = j.at("scale").get<float>();
    s.growth_tracker = j.at("growth_tracker").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail("'{}': malformed loss_scaler state (expected {{\"scale\": <float>, \"growth_tracker\": <int>}}): {}", source,
         e.what());
  }
  SWIFT_CHECK(std::isfinite(s.scale) && s.scale > 0 && s.growth_tracker >= 0,
              "'{}': loss_scaler state has scale {} and growth_tracker {}; the scale must be finite and positive and "
              "the tracker >= 0 (delete the \"loss_scaler\" entry to restart from the initial scale)",
              source, s.scale, s.growth_tracker);
  return s;
}

LossScaler::LossScaler(LossScalerConfig config) : config_(config) {
  SWIFT_CHECK(std::isfinite(config.init_scale) && config.init_scale > 0,
              "loss scaler: init_scale must be finite and positive, got {}", config.init_scale);
  SWIFT_CHECK(config.growth_factor > 1.0f && std::isfinite(config.growth_factor),
              "loss scaler: growth_factor must be > 1, got {}", config.growth_factor);
  SWIFT_CHECK(config.backoff_factor > 0.0f && config.backoff_factor < 1.0f,
              "loss scaler: backoff_factor must be in (0, 1), got {}", config.backoff_factor);
  SWIFT_CHECK(config.growth_interval >= 1, "loss scaler: growth_interval must be >= 1, got {}", config.growth_interval);
  state_.scale = config.init_scale;
}

float LossScaler::inverse_scale() const { return static_cast<float>(1.0 / static_cast<double>(state_.scale)); }

void LossScaler::update(bool found_nonfinite) {
  if (found_nonfinite) {
    state_.scale *= config_.backoff_factor;
    state_.growth_tracker = 0;
    return;
  }
  const int64_t successful = state_.growth_tracker + 1;
  if (successful == config_.growth_interval) {
    const float grown = state_.scale * config_.growth_factor;
    if (std::isfinite(grown)) state_.scale = grown;  // torch keeps the old scale when growing overflows
    state_.growth_tracker = 0;
  } else {
    state_.growth_tracker = successful;
  }
}

void LossScaler::restore(const LossScalerState& state) {
  SWIFT_CHECK(std::isfinite(state.scale) && state.scale > 0, "loss scaler: cannot restore scale {}", state.scale);
  state_ = state;
}

}  // namespace swift::train
