// tests/train/test_scheduler.cpp — learning-rate schedules against the values transformers' get_scheduler gives
// (base lr 2e-4, 3 warmup steps of 11; printed by torch's LambdaLR before each optimizer step, transformers 5.24).
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "train/scheduler.h"

namespace swift::train {
namespace {

void expect_schedule(const char* name, const std::vector<double>& expected, double min_lr_rate = 0.0) {
  LrSchedule s(schedule_type_from_string(name), 2e-4, 11, 3, min_lr_rate);
  ASSERT_EQ(expected.size(), 11u);
  for (int64_t step = 0; step < 11; ++step) {
    EXPECT_DOUBLE_EQ(s.lr(step), expected[static_cast<size_t>(step)]) << name << " step " << step;
  }
}

TEST(Scheduler, MatchesTransformers) {
  expect_schedule("cosine", {0.0, 6.666666666666667e-05, 0.00013333333333333334, 0.0002, 0.0001923879532511287,
                             0.00017071067811865476, 0.000138268343236509, 0.0001, 6.173165676349103e-05,
                             2.9289321881345254e-05, 7.612046748871327e-06});
  expect_schedule("linear", {0.0, 6.666666666666667e-05, 0.00013333333333333334, 0.0002, 0.000175,
                             0.00015000000000000001, 0.000125, 0.0001, 7.500000000000001e-05, 5e-05, 2.5e-05});
  expect_schedule("constant", std::vector<double>(11, 0.0002));
  expect_schedule("constant_with_warmup", {0.0, 6.666666666666667e-05, 0.00013333333333333334, 0.0002, 0.0002,
                                           0.0002, 0.0002, 0.0002, 0.0002, 0.0002, 0.0002});
  expect_schedule("cosine_with_min_lr",
                  {0.0, 6.666666666666667e-05, 0.00013333333333333334, 0.0002, 0.00019314915792601581,
                   0.00017363961030678927, 0.00014444150891285807, 0.00011000000000000002, 7.555849108714192e-05,
                   4.6360389693210735e-05, 2.6850842073984196e-05},
                  0.1);
}

TEST(Scheduler, WarmupStepsFromRatio) {
  EXPECT_EQ(warmup_steps_for(100, 0, 0.05), 5);
  EXPECT_EQ(warmup_steps_for(101, 0, 0.05), 6);  // ceil, as transformers
  EXPECT_EQ(warmup_steps_for(100, 7, 0.5), 7);   // explicit steps win
  EXPECT_EQ(warmup_steps_for(100, 0, 0.0), 0);
  EXPECT_THROW(warmup_steps_for(100, 0, 1.5), Error);
}

TEST(Scheduler, BadArgumentsNameTheOption) {
  try {
    schedule_type_from_string("cosinus");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--lr_scheduler_type 'cosinus'"), std::string::npos);
  }
  EXPECT_THROW(LrSchedule(ScheduleType::Cosine, 0.0, 10, 0), Error);
  EXPECT_THROW(LrSchedule(ScheduleType::Cosine, 1e-4, 0, 0), Error);
}

}  // namespace
}  // namespace swift::train
