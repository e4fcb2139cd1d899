// core/memory.h — memory accounting by category, per device type.
//
// Invariants:
//  - Every Storage::allocate adds to its category's current bytes and removes them when freed; peaks are
//    high-water marks since the last reset. Borrowed (mmapped) storage is not counted here.
//  - Counters are atomic: any thread may allocate.
//  - peak_rss_gib() is the operating system's view (the process's peak resident set, all memory included), what
//    the training log reports as memory(GiB); the counters above are ours, by category.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace swift {

enum class MemoryCategory : uint8_t { Weights, Gradients, Optimizer, Activations, Workspace, Other, Count };

const char* memory_category_name(MemoryCategory category);

struct MemoryStats {
  int64_t current[static_cast<int>(MemoryCategory::Count)] = {};
  int64_t peak[static_cast<int>(MemoryCategory::Count)] = {};
  int64_t total_current = 0;
  int64_t total_peak = 0;
  int64_t at_total_peak[static_cast<int>(MemoryCategory::Count)] = {};  // each category when total_peak was reached
};

// device_type: 0 = CPU, 1 = CUDA (matches DeviceType).
void memory_record_alloc(int device_type, MemoryCategory category, size_t bytes);
void memory_record_free(int device_type, MemoryCategory category, size_t bytes);
MemoryStats memory_stats(int device_type);
void memory_reset_peaks(int device_type);
// One line per category with current, peak and the bytes it held at the total's peak, in MiB.
std::string memory_report(int device_type);
// Peak resident set size of the process (getrusage ru_maxrss), GiB.
double peak_rss_gib();

}  // namespace swift
