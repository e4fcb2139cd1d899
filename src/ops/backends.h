// ops/backends.h — registers the device backends built into this binary (CUDA when compiled in).
//
// Invariants: init_backends() is idempotent and cheap; it must run before any non-CPU tensor is made.
// cuda_device_count() is 0 when CUDA is not built in or no device is visible (never throws).
#pragma once

namespace swift::ops {

void init_backends();
int cuda_device_count();
bool cuda_built();

}  // namespace swift::ops
