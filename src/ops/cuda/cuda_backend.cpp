// ops/cuda/cuda_backend.cpp — cudaMalloc/cudaFree-backed device memory (a caching allocator comes with the
// CUDA backend issue), synchronous copies and memset.
#include "ops/cuda/cuda_backend.h"

#include <array>
#include <mutex>

#include "ops/cuda/cuda_ops.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "core/memory.h"

namespace swift::ops::cuda {

namespace {

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) fail("CUDA: {} failed: {}", call, cudaGetErrorString(status));
}

class CudaBackend final : public DeviceBackend {
 public:
  void* allocate(size_t bytes, int device_index) override {
    check(cudaSetDevice(device_index), "cudaSetDevice");
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      fail("CUDA out of memory allocating {:.1f} MiB on cuda:{} ({:.1f} MiB free of {:.1f} MiB). Accounted:\n{}"
           "Reduce --per_device_train_batch_size or --max_length, or enable --gradient_checkpointing.",
           bytes / 1048576.0, device_index, free_bytes / 1048576.0, total_bytes / 1048576.0, memory_report(1));
    }
    check(status, "cudaMalloc");
    return ptr;
  }
  void release(void* ptr, size_t, int) override { cudaFree(ptr); }
  void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) override {
    cudaMemcpyKind kind = dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                          : src_device.is_cpu() ? cudaMemcpyHostToDevice
                                                : cudaMemcpyDeviceToDevice;
    check(cudaMemcpy(dst, src, bytes, kind), "cudaMemcpy");
  }
  void memset_zero(void* ptr, size_t bytes, int device_index) override {
    check(cudaSetDevice(device_index), "cudaSetDevice");
    check(cudaMemset(ptr, 0, bytes), "cudaMemset");
  }
};

}  // namespace

cudaStream_t stream(int device_index) {
  // One blocking stream per device (created on first use): kernels on it are ordered with the legacy default
  // stream that the backend's synchronous copies use, and several streams can be added later for overlap.
  static std::array<cudaStream_t, 64> streams{};
  static std::mutex mutex;
  if (device_index < 0 || device_index >= static_cast<int>(streams.size())) fail("CUDA: device index {} out of range", device_index);
  std::lock_guard<std::mutex> lock(mutex);
  if (streams[device_index] == nullptr) {
    int previous = 0;
    check(cudaGetDevice(&previous), "cudaGetDevice");
    check(cudaSetDevice(device_index), "cudaSetDevice");
    check(cudaStreamCreate(&streams[device_index]), "cudaStreamCreate");
    check(cudaSetDevice(previous), "cudaSetDevice");
  }
  return streams[device_index];
}

DeviceBackend* backend() {
  static CudaBackend instance;
  return &instance;
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace swift::ops::cuda
