// tests/ops/test_env_switch.cpp — ops/env_switch.h (the on/off knobs SWIFT_LORA_B_FIRST, SWIFT_GEMM_AUTOTUNE):
// unset is the default, "1" / "0" turn it on / off, read once, set() overrides, anything else is refused by name.
// Pure C++: runs without CUDA.
#include <gtest/gtest.h>

#include <cstdlib>

#include "op_test_util.h"
#include "ops/env_switch.h"

namespace swift::test {
namespace {

TEST(EnvSwitch, DefaultOnOffReadOnceOverrideAndRefusal) {
  const char* name = "SWIFT_TEST_ENV_SWITCH";
  unsetenv(name);
  ops::EnvSwitch by_default(name, true);
  EXPECT_TRUE(by_default.on());
  setenv(name, "0", 1);
  EXPECT_TRUE(by_default.on()) << "read once";
  ops::EnvSwitch off(name, true);
  EXPECT_FALSE(off.on());
  setenv(name, "1", 1);
  ops::EnvSwitch on(name, false);
  EXPECT_TRUE(on.on());
  on.set(false);
  EXPECT_FALSE(on.on());
  setenv(name, "yes", 1);
  ops::EnvSwitch bad(name, false);
  EXPECT_TRUE(throws_error([&] { (void)bad.on(); }, {name, "yes", "1 (on) or 0 (off)"}));
  unsetenv(name);
}

}  // namespace
}  // namespace swift::test
