// tests/gpu/gpu_timing.h — wall time of a device call for the opt-in timing tests (SWIFT_GPU_BENCH=1): one warm-up
// call, then `reps` calls between two synchronisations of the device. A yardstick printed by the test, never an
// assertion (performance claims live in bench/ and scripts/device/).
#pragma once

#include <chrono>

#include "core/tensor.h"

namespace swift::test {

// Waits for the default CUDA device's work (a device-to-host copy of one element is ordered after it).
inline void sync_device() { Tensor::zeros({1}, DType::F32, Device::cuda()).to(Device::cpu()); }

template <typename Fn>
double time_ms(Fn&& fn, int reps) {
  fn();
  sync_device();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn();
  sync_device();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}

}  // namespace swift::test
