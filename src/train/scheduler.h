// train/scheduler.h — learning-rate schedules as transformers defines them (get_scheduler): a multiplier of the
// base learning rate as a function of the optimizer step, with linear warmup.
//
// Invariants:
//  - lr(step) = base_lr * factor(step), step = 0 for the first optimizer update (transformers' LambdaLR
//    convention: the lr used by update k+1 is factor(k)).
//  - warmup steps = --warmup_steps when > 0, else ceil(total_steps * --warmup_ratio) (transformers'
//    TrainingArguments.get_warmup_steps).
//  - The formulas are transformers' in double precision: cosine (num_cycles 0.5), linear, constant,
//    constant_with_warmup, cosine_with_min_lr (min_lr_rate); unknown names throw listing the supported ones.
#pragma once

#include <cstdint>
#include <string>

namespace swift::train {

enum class ScheduleType { Cosine, Linear, Constant, ConstantWithWarmup, CosineWithMinLr };
ScheduleType schedule_type_from_string(const std::string& name);
const char* schedule_type_name(ScheduleType type);

int64_t warmup_steps_for(int64_t total_steps, int64_t warmup_steps, double warmup_ratio);

class LrSchedule {
 public:
  LrSchedule(ScheduleType type, double base_lr, int64_t total_steps, int64_t warmup_steps, double min_lr_rate = 0.0);
  double factor(int64_t step) const;
  double lr(int64_t step) const { return base_lr_ * factor(step); }
  double base_lr() const { return base_lr_; }
  int64_t total_steps() const { return total_steps_; }
  int64_t warmup_steps() const { return warmup_steps_; }

 private:
  ScheduleType type_;
  double base_lr_;
  int64_t total_steps_;
  int64_t warmup_steps_;
  double min_lr_rate_;
};

}  // namespace swift::train
