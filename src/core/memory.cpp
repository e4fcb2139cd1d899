// core/memory.cpp — the process-level view of memory (peak resident set); the per-category counters live with
// Storage in core/tensor.cpp.
#include "core/memory.h"

#include <sys/resource.h>

namespace swift {

double peak_rss_gib() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss is in KiB on Linux
}

}  // namespace swift
