// ops/backends.cpp — backend registration for builds with and without CUDA.
#include "ops/backends.h"

#include <mutex>

#include "core/tensor.h"

#ifdef SWIFT_WITH_CUDA
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

}  // namespace swift::ops
