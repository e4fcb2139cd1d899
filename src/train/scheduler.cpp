// train/scheduler.cpp — transformers' schedule formulas (optimization.py), in double precision.
#include "train/scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace swift::train {

ScheduleType schedule_type_from_string(const std::string& name) {
  if (name == "cosine") return ScheduleType::Cosine;
  if (name == "linear") return ScheduleType::Linear;
  if (name == "constant") return ScheduleType::Constant;
  if (name == "constant_with_warmup") return ScheduleType::ConstantWithWarmup;
  if (name == "cosine_with_min_lr") return ScheduleType::CosineWithMinLr;
  fail("--lr_scheduler_type '{}' is not supported (cosine, linear, constant, constant_with_warmup, "
       "cosine_with_min_lr)", name);
}

const char* schedule_type_name(ScheduleType type) {
  switch (type) {
    case ScheduleType::Cosine: return "cosine";
    case ScheduleType::Linear: return "linear";
    case ScheduleType::Constant: return "constant";
    case ScheduleType::ConstantWithWarmup: return "constant_with_warmup";
    case ScheduleType::CosineWithMinLr: return "cosine_with_min_lr";
  }
  return "?";
}

int64_t warmup_steps_for(int64_t total_steps, int64_t warmup_steps, double warmup_ratio) {
  SWIFT_CHECK(warmup_steps >= 0, "--warmup_steps must be >= 0, got {}", warmup_steps);
  SWIFT_CHECK(warmup_ratio >= 0 && warmup_ratio <= 1, "--warmup_ratio must be in [0, 1], got {}", warmup_ratio);
  if (warmup_steps > 0) return warmup_steps;
  return static_cast<int64_t>(std::ceil(static_cast<double>(total_steps) * warmup_ratio));
}

LrSchedule::LrSchedule(ScheduleType type, double base_lr, int64_t total_steps, int64_t warmup_steps,
                       double min_lr_rate)
    : type_(type), base_lr_(base_lr), total_steps_(total_steps), warmup_steps_(warmup_steps), min_lr_rate_(min_lr_rate) {
  SWIFT_CHECK(base_lr > 0 && std::isfinite(base_lr), "--learning_rate must be a positive number, got {}", base_lr);
  SWIFT_CHECK(total_steps > 0, "the run has {} optimizer steps; it needs at least one (more data, or --max_steps)",
              total_steps);
}

double LrSchedule::factor(int64_t step) const {
  const double s = static_cast<double>(step), w = static_cast<double>(warmup_steps_);
  const double total = static_cast<double>(total_steps_);
  if (type_ == ScheduleType::Constant) return 1.0;
  if (step < warmup_steps_) return s / std::max(1.0, w);
  switch (type_) {
    case ScheduleType::ConstantWithWarmup: return 1.0;
    case ScheduleType::Linear: return std::max(0.0, (total - s) / std::max(1.0, total - w));
    case ScheduleType::Cosine: {
      const double progress = (s - w) / std::max(1.0, total - w);
      return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress)));
    }
    case ScheduleType::CosineWithMinLr: {
      const double progress = (s - w) / std::max(1.0, total - w);
      const double f = 0.5 * (1.0 + std::cos(M_PI * 0.5 * 2.0 * progress));
      return f * (1.0 - min_lr_rate_) + min_lr_rate_;
    }
    default: return 1.0;
  }
}

}  // namespace swift::train
