// ops/cuda/cuda_backend.h — the CUDA DeviceBackend: device memory (a caching allocator), copies, CUDA error checks.
//
// Invariants: every CUDA runtime call is checked; failures throw swift::Error naming the call, the CUDA
// error string, and for out-of-memory the size requested, free/total device memory, the accounted usage by
// category and what to change. Accounting by category is done by Storage (core/memory.h) on the bytes asked
// for; the allocator's own numbers (reserved / cached) are reported by allocator_stats.
// While an allocation guard is set on a thread (ops/device_graph.cpp sets one around a CUDA graph capture), every
// device allocation from that thread throws naming the guard: a block taken during capture would go back to the cache
// while the graph still points at it.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace swift::ops::cuda {

DeviceBackend* backend();
int device_count();  // 0 when no device is visible or the driver is missing

// The caching allocator's view of one device.
struct AllocatorStats {
  int64_t reserved_bytes = 0;  // held from cudaMalloc: in use + cached
  int64_t cached_bytes = 0;    // free blocks kept for reuse
  int64_t cache_hits = 0;      // allocations served from the cache
  int64_t device_allocs = 0;   // cudaMalloc calls
  bool caching = true;         // false under SWIFT_CUDA_ALLOC=plain
};
AllocatorStats allocator_stats(int device_index);
// Returns every cached (free) block of the device to the driver (cudaFree synchronises the device).
void empty_cache(int device_index);
// Sets (non-null) or clears (null) this thread's allocation guard; `reason` must outlive the guard.
void set_allocation_guard(const char* reason);

}  // namespace swift::ops::cuda
