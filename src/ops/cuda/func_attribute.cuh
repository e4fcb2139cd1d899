// ops/cuda/func_attribute.cuh — a kernel's function attribute (dynamic shared memory, carveout) set once per device,
// for launchers in .cu files (rmsnorm.cu, lora.cu).
//
// Invariants: cudaFuncSetAttribute is per device, so each device is set on its first launch (a bit per ordinal < 64;
// ordinals from 64 on are set on every launch). Concurrent first launches may both set it: the same value, harmless.
// Each Kernel instantiation has its own record, so one kernel takes one attribute through this helper.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace swift::ops::cuda {

template <auto Kernel>
cudaError_t set_func_attribute_once(cudaFuncAttribute attribute, int value) {
  static std::atomic<uint64_t> devices_set{0};
  int device = 0;
  cudaError_t status = cudaGetDevice(&device);
  if (status != cudaSuccess) return status;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit != 0 && (devices_set.load(std::memory_order_acquire) & bit) != 0) return cudaSuccess;
  status = cudaFuncSetAttribute(Kernel, attribute, value);
  if (status == cudaSuccess) devices_set.fetch_or(bit, std::memory_order_acq_rel);
  return status;
}

}  // namespace swift::ops::cuda
