// ops/backends.cpp — backend registration for builds with and without CUDA.
#include "ops/backends.h"

#include <malloc.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <cblas.h>

#include "core/tensor.h"

#ifdef SWIFT_WITH_CUDA
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/cuda_backend.h"
#endif

namespace swift::ops {

void init_backends() {
  static std::once_flag once;
  std::call_once(once, [] {
#ifdef SWIFT_WITH_CUDA
    register_device_backend(DeviceType::CUDA, cuda::backend());
#endif
  });
}

void tune_cpu_environment(int argc, char** argv) {
  (void)argc;
  // Activations are allocated fresh every step: keep large blocks in the heap instead of mmap/munmap each time
  // (page faults were ~5% of a CPU training step, bench/bench_step.cpp).
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (std::getenv("SWIFT_CPU_ENV") != nullptr) return;  // already re-executed (or the user opted out)
  setenv("SWIFT_CPU_ENV", "1", 1);
  bool changed = false;
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) {
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    changed = true;
  }
  // libgomp's default makes idle workers spin ~300k iterations at every barrier: on a machine shared with other
  // processes the spinners steal the cores the working thread needs (measured 2.9x the CPU-seconds per training
  // step and 3-5x slower decoding at load ~10 on 2 cores: bench/bench_step.cpp). Sleep instead.
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    changed = true;
  }
#if defined(__x86_64__)
  if (std::getenv("OPENBLAS_CORETYPE") == nullptr) {
    std::string core = openblas_get_corename();
    for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool avx512_kernels = core == "skylakex" || core == "cooperlake" || core == "sapphirerapids";
    const bool avx2_kernels = avx512_kernels || core == "haswell" || core == "zen";
    const char* better = nullptr;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") && !avx512_kernels) {
      better = "SkylakeX";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && !avx2_kernels) {
      better = "Haswell";
    }
    if (better != nullptr) {
      setenv("OPENBLAS_CORETYPE", better, 1);
      changed = true;
    }
  }
#endif
  if (changed) execv("/proc/self/exe", argv);  // on failure, carry on with what we have
}

int cuda_device_count() {
#ifdef SWIFT_WITH_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

bool cuda_built() {
#ifdef SWIFT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

void enable_full_determinism() {
#ifdef SWIFT_WITH_CUDA
  cuda::set_gemm_autotune(false);
  cuda::force_deterministic_attention_backward(true);
#endif
}

}  // namespace swift::ops
