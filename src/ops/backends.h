// ops/backends.h — registers the device backends built into this binary (CUDA when compiled in).
//
// Invariants: init_backends() is idempotent and cheap; it must run before any non-CPU tensor is made.
// cuda_device_count() is 0 when CUDA is not built in or no device is visible (never throws).
#pragma once

namespace swift::ops {

void init_backends();

// Call first thing in main(). OpenBLAS picks its kernels and thread pool when the process loads, from the
// environment only; it misdetects some virtualised CPUs (AVX-512 Xeons reported as "Prescott": sgemm 4-5x
// slower) and its own threads fight ours (we parallelise with OpenMP and call single-threaded sgemm).
// OpenMP workers spinning at barriers steal cores on a shared machine: OMP_WAIT_POLICY=passive unless the user
// set it (or GOMP_SPINCOUNT).
// When OPENBLAS_CORETYPE / OPENBLAS_NUM_THREADS / OMP_WAIT_POLICY are unset and would matter, this sets them
// and re-executes the process once (guarded by SWIFT_CPU_ENV=1). A user's own settings are never overridden.
void tune_cpu_environment(int argc, char** argv);
int cuda_device_count();
bool cuda_built();

}  // namespace swift::ops
