// tests/test_main.cpp — GoogleTest main of every test binary: the same CPU environment as `swift` (tuned
// OpenBLAS kernels, no competing BLAS threads), then all tests.
#include <gtest/gtest.h>

#include "ops/backends.h"

int main(int argc, char** argv) {
  swift::ops::tune_cpu_environment(argc, argv);
  swift::ops::init_backends();
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
