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
// --full_determinism (transformers' enable_full_determinism): run-to-run identical GPU results. cuBLASLt products take
// the heuristic's first algorithm instead of timing candidates (a few % slower; no autotune record needed), and the
// attention backward is the deterministic one even where SWIFT_CUDNN_ATTENTION_BWD asks for the atomic variant. For
// the rest of the process; call before the first product. Without it: the defaults (products autotuned by the first
// process on a machine and recorded for the others; the deterministic attention backward unless opted out). The CPU
// kernels are deterministic either way. A no-op without CUDA.
void enable_full_determinism();

}  // namespace swift::ops
