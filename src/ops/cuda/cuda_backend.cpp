// ops/cuda/cuda_backend.cpp — device memory through a caching allocator, synchronous copies and memset, and the
// per-device stream every op runs on.
//
// Caching allocator:
//  - Requests are rounded up to a size class (512 B steps up to 1 MiB, then steps of 1/8 of the request's power of
//    two: at most 12.5% slack); a freed block goes to its device's free list of that class and the next request of
//    the same class reuses it without calling the driver. Blocks are whole cudaMalloc allocations (never split).
//  - Reuse is stream-safe because every kernel of a device runs on its one stream, cuda::stream(device), in order:
//    work queued before the free finishes before anything queued by the next owner. The backend's copies and
//    memsets use the legacy default stream, which that blocking stream synchronises with.
//  - cudaErrorMemoryAllocation: every cached block of the device is released and the cudaMalloc retried once;
//    then the error names the size requested, free/total device memory, the usage by category (memory_report,
//    accounted by Storage on the bytes asked for), what the allocator holds, and what to change.
//  - SWIFT_CUDA_ALLOC=plain (read once) bypasses the cache: cudaMalloc / cudaFree per tensor, for debugging.
//  - The allocator lives for the process and never frees at exit (the CUDA runtime may already be torn down).
//  - Allocation guard (per thread, set around CUDA graph captures): allocate() throws naming it, before touching the
//    pool or the driver.
#include "ops/cuda/cuda_backend.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ops/cuda/cuda_ops.h"

#include <cuda_runtime.h>

#include "core/error.h"
#include "core/memory.h"

namespace swift::ops::cuda {

namespace {

constexpr int kMaxDevices = 64;
thread_local const char* t_allocation_guard = nullptr;

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) fail("CUDA: {} failed: {}", call, cudaGetErrorString(status));
}

size_t size_class(size_t bytes) {
  constexpr size_t kSmall = size_t{1} << 20;
  if (bytes <= kSmall) return (bytes + 511) / 512 * 512;
  size_t pow2 = size_t{1} << (63 - __builtin_clzll(static_cast<unsigned long long>(bytes)));
  const size_t step = pow2 / 8;
  return (bytes + step - 1) / step * step;
}

struct DevicePool {
  std::map<size_t, std::vector<void*>> free_blocks;  // size class -> cached blocks
  std::unordered_map<void*, size_t> live;            // block -> size class
  int64_t reserved = 0, cached = 0, hits = 0, mallocs = 0;
};

class CudaBackend final : public DeviceBackend {
 public:
  CudaBackend() {
    const char* mode = std::getenv("SWIFT_CUDA_ALLOC");
    caching_ = !(mode != nullptr && std::strcmp(mode, "plain") == 0);
  }

  void* allocate(size_t bytes, int device_index) override {
    if (device_index < 0 || device_index >= kMaxDevices) fail("CUDA: device index {} out of range", device_index);
    if (t_allocation_guard != nullptr) {
      fail("CUDA: {} bytes allocated on cuda:{} during {} (every buffer the captured work uses must exist before the "
           "capture)", bytes, device_index, t_allocation_guard);
    }
    check(cudaSetDevice(device_index), "cudaSetDevice");
    if (!caching_) return device_malloc(bytes, bytes, device_index, nullptr);
    const size_t cls = size_class(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    DevicePool& pool = pools_[device_index];
    auto it = pool.free_blocks.find(cls);
    if (it != pool.free_blocks.end() && !it->second.empty()) {
      void* ptr = it->second.back();
      it->second.pop_back();
      pool.cached -= static_cast<int64_t>(cls);
      pool.hits += 1;
      pool.live[ptr] = cls;
      return ptr;
    }
    void* ptr = device_malloc(bytes, cls, device_index, &pool);
    pool.live[ptr] = cls;
    pool.reserved += static_cast<int64_t>(cls);
    return ptr;
  }

  void release(void* ptr, size_t, int device_index) override {
    if (ptr == nullptr) return;
    if (caching_ && device_index >= 0 && device_index < kMaxDevices) {
      std::lock_guard<std::mutex> lock(mutex_);
      DevicePool& pool = pools_[device_index];
      auto it = pool.live.find(ptr);
      if (it != pool.live.end()) {
        pool.free_blocks[it->second].push_back(ptr);
        pool.cached += static_cast<int64_t>(it->second);
        pool.live.erase(it);
        return;
      }
    }
    cudaFree(ptr);  // plain mode (or a block this allocator does not know): straight back to the driver
  }

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

  AllocatorStats stats(int device_index) {
    AllocatorStats s;
    s.caching = caching_;
    if (device_index < 0 || device_index >= kMaxDevices) return s;
    std::lock_guard<std::mutex> lock(mutex_);
    const DevicePool& pool = pools_[device_index];
    s.reserved_bytes = pool.reserved;
    s.cached_bytes = pool.cached;
    s.cache_hits = pool.hits;
    s.device_allocs = pool.mallocs;
    return s;
  }

  void empty(int device_index) {
    if (device_index < 0 || device_index >= kMaxDevices) return;
    std::lock_guard<std::mutex> lock(mutex_);
    check(cudaSetDevice(device_index), "cudaSetDevice");
    release_cached(pools_[device_index]);
  }

 private:
  // Frees every cached block of a pool (mutex held).
  static void release_cached(DevicePool& pool) {
    for (auto& [cls, blocks] : pool.free_blocks) {
      for (void* p : blocks) {
        cudaFree(p);
        pool.reserved -= static_cast<int64_t>(cls);
        pool.cached -= static_cast<int64_t>(cls);
      }
      blocks.clear();
    }
    pool.free_blocks.clear();
  }

  // cudaMalloc of `size` bytes (the class of a `bytes` request); on out-of-memory releases the pool's cache and
  // retries once, then throws the explanatory error. pool: null in plain mode (mutex held otherwise).
  static void* device_malloc(size_t bytes, size_t size, int device_index, DevicePool* pool) {
    void* ptr = nullptr;
    cudaError_t status = cudaMalloc(&ptr, size);
    if (status == cudaErrorMemoryAllocation && pool != nullptr && pool->cached > 0) {
      cudaGetLastError();
      release_cached(*pool);
      status = cudaMalloc(&ptr, size);
    }
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0, total_bytes = 0;
      if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
      const double mib = 1048576.0;
      fail("CUDA out of memory allocating {:.1f} MiB on cuda:{} ({:.1f} MiB free of {:.1f} MiB on the device; the "
           "caching allocator holds {:.1f} MiB, {:.1f} MiB of it cached and already released for this retry).\n"
           "Accounted usage by category:\n{}"
           "To fit: reduce --per_device_train_batch_size or --max_length, enable --gradient_checkpointing (or "
           "--recompute_modules layernorm act mlp), train LoRA instead of full parameters, and with LoRA keep "
           "frozen weights in host memory (--offload_frozen_layers N, --offload_embedding true).",
           bytes / mib, device_index, free_bytes / mib, total_bytes / mib, pool ? pool->reserved / mib : 0.0,
           pool ? pool->cached / mib : 0.0, memory_report(1));
    }
    check(status, "cudaMalloc");
    if (pool != nullptr) pool->mallocs += 1;
    return ptr;
  }

  bool caching_ = true;
  std::mutex mutex_;
  std::array<DevicePool, kMaxDevices> pools_;
};

CudaBackend* instance() {
  static CudaBackend* backend = new CudaBackend();  // process lifetime (see the head comment)
  return backend;
}

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

DeviceBackend* backend() { return instance(); }

AllocatorStats allocator_stats(int device_index) { return instance()->stats(device_index); }

void empty_cache(int device_index) { instance()->empty(device_index); }

void set_allocation_guard(const char* reason) { t_allocation_guard = reason; }

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

}  // namespace swift::ops::cuda
