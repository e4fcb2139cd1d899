// core/profile.cpp — the region table behind SWIFT_PROFILE and its report at exit (see profile.h).
#include "core/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace swift::profile {

namespace {

struct Entry {
  long long calls = 0;
  double seconds = 0;
  double longest = 0;
};

struct Table {
  std::mutex mutex;
  std::map<std::string, Entry> entries;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  ~Table() { print(); }

  void print() {
    std::lock_guard<std::mutex> lock(mutex);
    if (entries.empty()) return;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::vector<std::pair<std::string, Entry>> rows(entries.begin(), entries.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
    std::fprintf(stderr, "\nSWIFT_PROFILE: wall time per region (inclusive), %.3f s since the first region\n", wall);
    std::fprintf(stderr, "%-28s %10s %12s %12s %12s %7s\n", "region", "calls", "total ms", "ms/call", "max ms",
                 "share");
    for (const auto& [name, e] : rows) {
      std::fprintf(stderr, "%-28s %10lld %12.1f %12.4f %12.4f %6.1f%%\n", name.c_str(), e.calls, e.seconds * 1e3,
                   e.seconds * 1e3 / static_cast<double>(std::max(1LL, e.calls)), e.longest * 1e3,
                   100.0 * e.seconds / std::max(wall, 1e-9));
    }
  }
};

Table& table() {
  static Table t;  // destroyed at exit: prints the report
  return t;
}

bool read_flag() {
  const char* v = std::getenv("SWIFT_PROFILE");
  const bool on = v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0;
  if (on) table();  // construct now so that it outlives (is destroyed after) later statics that use it
  return on;
}

}  // namespace

bool enabled() {
  static const bool on = read_flag();
  return on;
}

void record(const char* name, double seconds) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  Entry& e = t.entries[name];
  ++e.calls;
  e.seconds += seconds;
  e.longest = std::max(e.longest, seconds);
}

void reset() {
  if (!enabled()) return;
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.entries.clear();
  t.start = std::chrono::steady_clock::now();
}

}  // namespace swift::profile
