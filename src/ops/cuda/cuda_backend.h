// ops/cuda/cuda_backend.h — the CUDA DeviceBackend: device memory, copies, and CUDA error checking.
//
// Invariants: every CUDA runtime call is checked; failures throw swift::Error naming the call, the CUDA
// error string, and for out-of-memory the size requested and the accounted usage by category.
#pragma once

#include "core/tensor.h"

namespace swift::ops::cuda {

DeviceBackend* backend();
int device_count();  // 0 when no device is visible or the driver is missing

}  // namespace swift::ops::cuda
