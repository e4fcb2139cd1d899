// tests/core/test_profile.cpp — core/profile: the category of each op name (nested parts and annotations excluded,
// unknown names kept as "other"), idle = wall - busy, record / reset / the flush hook, nested CPU scopes, and
// SWIFT_PROFILE=events with CPU ops (timed by wall clock, as with SWIFT_PROFILE=1).
//
// Invariants: every test that switches the mode on leaves it Off with an empty table (nothing printed at exit).
#include <gtest/gtest.h>

#include <string>

#include "core/profile.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace swift {
namespace {

using profile::Region;

struct ProfileOn {  // a mode for one test; Off and an empty table afterwards
  explicit ProfileOn(profile::Mode m) {
    profile::set_mode(m);
    profile::reset();
  }
  ~ProfileOn() {
    profile::set_flush(nullptr);
    profile::reset();
    profile::set_mode(profile::Mode::Off);
  }
};

const Region* find(const std::vector<Region>& rows, const std::string& name) {
  for (const Region& r : rows) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

double category_seconds(const profile::Breakdown& b, const std::string& category) {
  for (const auto& [name, s] : b.seconds) {
    if (name == category) return s;
  }
  ADD_FAILURE() << "no category " << category;
  return -1;
}

TEST(Profile, CategoriesOfTheOpNames) {
  const std::pair<const char*, const char*> expected[] = {
      {"linear", "gemm"},           {"linear_backward", "gemm"},        {"gemm", "gemm"},
      {"lora_linear", "gemm"},      {"lora_linear_backward", "gemm"},   {"dora_linear_backward", "gemm"},
      {"attention", "attention"},   {"attention_backward", "attention"}, {"attention_decode_at", "attention"},
      {"kv_cache_write", "attention"}, {"cross_entropy", "loss"},        {"cross_entropy_shard_stats", "loss"},
      {"token_logprobs_backward", "loss"}, {"rmsnorm", "elementwise"},   {"rmsnorm_backward", "elementwise"},
      {"rope", "elementwise"},      {"swiglu_backward", "elementwise"}, {"add", "elementwise"},
      {"cast", "elementwise"},      {"embedding_shard_backward", "elementwise"}, {"dropout", "elementwise"},
      {"swap_outer_axes", "elementwise"}, {"adamw_step", "optimizer"},   {"clip_grad_norm", "optimizer"},
      {"grad_norm", "optimizer"},   {"scale_gradients", "optimizer"},   {"zero_grad", "optimizer"},
      {"all_reduce", "communication"}, {"reduce_scatter", "communication"}, {"all_gather", "communication"},
      {"frobnicate", "other"},      {"linearize", "other"},             {"addmm", "other"},
  };
  for (const auto& [name, category] : expected) {
    const char* got = profile::category(name);
    ASSERT_NE(got, nullptr) << name;
    EXPECT_STREQ(got, category) << name;
  }
  // Parts of an op (counted in the op already) and a caller's annotations are not top-level ops.
  EXPECT_EQ(profile::category("lora_linear.xa"), nullptr);
  EXPECT_EQ(profile::category("lora_linear_backward.frozen_gemm"), nullptr);
  EXPECT_EQ(profile::category("(whole step: forward, backward, clip, adamw)"), nullptr);
  EXPECT_EQ(profile::category(""), nullptr);
}

TEST(Profile, BreakdownSumsTopLevelOpsAndIdleIsWallMinusBusy) {
  const std::vector<Region> rows = {
      {"linear", 10, 0.30, 0},       {"lora_linear", 4, 0.10, 0},  {"lora_linear.xa", 4, 0.05, 0},
      {"attention", 2, 0.20, 0},     {"cross_entropy", 1, 0.05, 0}, {"adamw_step", 1, 0.04, 0},
      {"rmsnorm", 5, 0.10, 0},       {"mystery_op", 1, 0.01, 0},    {"(whole step)", 1, 0.95, 0},
      {"gemm", 3, 0.06, 0.06},  // every call inside lora_linear (a CPU op calling ops): counted there
  };
  const profile::Breakdown b = profile::breakdown_of(rows, 1.0);
  ASSERT_EQ(b.seconds.size(), 7u);
  const char* order[] = {"gemm", "attention", "loss", "elementwise", "optimizer", "communication", "other"};
  for (size_t i = 0; i < 7; ++i) EXPECT_STREQ(b.seconds[i].first, order[i]);
  EXPECT_DOUBLE_EQ(category_seconds(b, "gemm"), 0.40);
  EXPECT_DOUBLE_EQ(category_seconds(b, "attention"), 0.20);
  EXPECT_DOUBLE_EQ(category_seconds(b, "loss"), 0.05);
  EXPECT_DOUBLE_EQ(category_seconds(b, "elementwise"), 0.10);
  EXPECT_DOUBLE_EQ(category_seconds(b, "optimizer"), 0.04);
  EXPECT_DOUBLE_EQ(category_seconds(b, "communication"), 0.0);
  EXPECT_DOUBLE_EQ(category_seconds(b, "other"), 0.01);
  EXPECT_DOUBLE_EQ(b.wall_s, 1.0);
  EXPECT_NEAR(b.busy_s, 0.80, 1e-12);
  EXPECT_NEAR(b.idle_s, 0.20, 1e-12);
  // Regions that overlap by more than the wall time (several streams): idle is 0, never negative.
  EXPECT_DOUBLE_EQ(profile::breakdown_of(rows, 0.5).idle_s, 0.0);
  EXPECT_DOUBLE_EQ(profile::breakdown_of({}, 0.25).idle_s, 0.25);
}

int g_flushes = 0;
void flush_hook() {  // what ops/cuda does: pending device timings become record() calls
  ++g_flushes;
  profile::record("device_op", 0.003);
}

TEST(Profile, RecordResetAndTheFlushHook) {
  ProfileOn on(profile::Mode::Events);
  EXPECT_TRUE(profile::enabled());
  profile::record("rmsnorm", 0.002);
  profile::record("rmsnorm", 0.004);
  std::vector<Region> rows = profile::regions();
  const Region* r = find(rows, "rmsnorm");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->calls, 2);
  EXPECT_DOUBLE_EQ(r->seconds, 0.006);
  EXPECT_NEAR(profile::breakdown(0.01).idle_s, 0.004, 1e-12);

  g_flushes = 0;
  profile::set_flush(flush_hook);
  rows = profile::regions();  // flushes first
  EXPECT_EQ(g_flushes, 1);
  ASSERT_NE(find(rows, "device_op"), nullptr);
  const profile::Breakdown b = profile::breakdown(0.02);  // flushes again: a second device_op
  EXPECT_NEAR(category_seconds(b, "other"), 0.006, 1e-12);
  EXPECT_NEAR(category_seconds(b, "elementwise"), 0.006, 1e-12);
  profile::set_flush(nullptr);

  profile::reset();  // forgets everything, restarts the wall clock
  EXPECT_TRUE(profile::regions().empty());
  EXPECT_GE(profile::breakdown().wall_s, 0.0);
  EXPECT_LT(profile::breakdown().wall_s, 10.0);
}

TEST(Profile, NestedCpuScopesCountOnceInTheBreakdown) {
  ProfileOn on(profile::Mode::Sync);
  {
    SWIFT_PROFILE("(caller annotation)");  // not an op: what it encloses stays top-level
    SWIFT_PROFILE("lora_linear");
    { SWIFT_PROFILE("gemm"); }
  }
  { SWIFT_PROFILE("gemm"); }
  const std::vector<Region> rows = profile::regions();
  const Region* outer = find(rows, "lora_linear");
  const Region* inner = find(rows, "gemm");
  ASSERT_TRUE(outer && inner && find(rows, "(caller annotation)"));
  EXPECT_EQ(outer->nested_seconds, 0.0);
  EXPECT_EQ(inner->calls, 2);
  EXPECT_GT(inner->nested_seconds, 0.0);
  EXPECT_LE(inner->nested_seconds, inner->seconds);
  const profile::Breakdown b = profile::breakdown_of(rows, 1.0);
  EXPECT_NEAR(b.busy_s, outer->seconds + inner->seconds - inner->nested_seconds, 1e-12);
}

TEST(Profile, EventsModeTimesCpuOpsByWallClock) {
  ProfileOn on(profile::Mode::Events);
  Tensor a = Tensor::zeros({64, 32}, DType::F32);
  Tensor b = Tensor::zeros({32, 16}, DType::F32);
  Tensor c = Tensor::zeros({64, 16}, DType::F32);
  ops::gemm(false, false, 1.0f, a, b, 0.0f, c);
  ops::gemm(false, false, 1.0f, a, b, 0.0f, c);
  const std::vector<Region> rows = profile::regions();
  const Region* r = find(rows, "gemm");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->calls, 2);
  EXPECT_GT(r->seconds, 0.0);
  EXPECT_GT(category_seconds(profile::breakdown(), "gemm"), 0.0);
}

}  // namespace
}  // namespace swift
