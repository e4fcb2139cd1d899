// core/profile.cpp — the region table behind SWIFT_PROFILE, its category breakdown and its report at exit (see
// profile.h).
#include "core/profile.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <mutex>

namespace swift::profile {

namespace {

struct Entry {
  long long calls = 0;
  double seconds = 0;
  double nested_seconds = 0;
  double longest = 0;
};

thread_local int t_op_depth = 0;  // open op Scopes on this thread

constexpr const char* kCategories[] = {"gemm", "attention", "loss", "elementwise", "optimizer", "communication", "other"};

struct Table {
  std::mutex mutex;
  std::map<std::string, Entry> entries;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  ~Table() { print(); }

  void print();
};

Table& table() {
  static Table t;  // destroyed at exit: prints the report
  return t;
}

std::atomic<int> g_mode{-1};  // Mode, -1 until read from the environment
std::atomic<void (*)()> g_flush{nullptr};
std::atomic<uint64_t> g_resets{0};

int read_mode() {
  const char* v = std::getenv("SWIFT_PROFILE");
  Mode m = Mode::Off;
  if (v != nullptr && std::strcmp(v, "events") == 0) {
    m = Mode::Events;
  } else if (v != nullptr && v[0] != '\0' && std::strcmp(v, "0") != 0) {
    m = Mode::Sync;
  }
  if (m != Mode::Off) table();  // construct now so that it outlives (is destroyed after) later statics that use it
  return static_cast<int>(m);
}

double seconds_since_start(const Table& t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t.start).count();
}

// name == prefix, or name starts with prefix followed by '_' ("linear" covers "linear_backward", not "linearize").
bool has_prefix(std::string_view name, std::initializer_list<std::string_view> prefixes) {
  for (std::string_view p : prefixes) {
    if (name == p || (name.size() > p.size() && name.starts_with(p) && name[p.size()] == '_')) return true;
  }
  return false;
}

void Table::print() {
  flush();  // the hook is gone at exit (ops/cuda flushed and removed it); a no-op then
  std::vector<Region> rows = regions();
  if (rows.empty()) return;
  std::map<std::string, double> longest;
  double wall = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& [name, e] : entries) longest[name] = e.longest;
    wall = seconds_since_start(*this);
  }
  std::sort(rows.begin(), rows.end(), [](const Region& a, const Region& b) { return a.seconds > b.seconds; });
  const bool events = mode() == Mode::Events;
  std::fprintf(stderr, "\nSWIFT_PROFILE%s: %s per region (inclusive; %s), %.3f s since the first region or reset\n",
               events ? "=events" : "", events ? "time" : "wall time",
               events ? "CUDA ops: device time between two events, no synchronisation; CPU regions: wall time"
                      : "CUDA ops between two stream synchronisations",
               wall);
  std::fprintf(stderr, "%-28s %10s %12s %12s %12s %7s\n", "region (op.part: nested)", "calls", "total ms", "ms/call",
               "max ms", "share");
  for (const Region& r : rows) {
    std::fprintf(stderr, "%-28s %10lld %12.1f %12.4f %12.4f %6.1f%%\n", r.name.c_str(), r.calls, r.seconds * 1e3,
                 r.seconds * 1e3 / static_cast<double>(std::max(1LL, r.calls)), longest[r.name] * 1e3,
                 100.0 * r.seconds / std::max(wall, 1e-9));
  }
  const Breakdown b = breakdown_of(rows, wall);
  std::fprintf(stderr, "categories (top-level ops):");
  for (const auto& [name, s] : b.seconds) {
    if (s > 0) std::fprintf(stderr, " %s %.1f ms (%.1f%%),", name, s * 1e3, 100.0 * s / std::max(wall, 1e-9));
  }
  std::fprintf(stderr, " idle %.1f ms (%.1f%%)\n", b.idle_s * 1e3, 100.0 * b.idle_s / std::max(wall, 1e-9));
}

}  // namespace

Mode mode() {
  int m = g_mode.load(std::memory_order_relaxed);
  if (m < 0) {
    int expected = -1;
    const int read = read_mode();
    m = g_mode.compare_exchange_strong(expected, read) ? read : expected;
  }
  return static_cast<Mode>(m);
}

bool enabled() { return mode() != Mode::Off; }

void set_mode(Mode m) {
  if (m != Mode::Off) table();
  g_mode.store(static_cast<int>(m));
}

void record(const char* name, double seconds, bool nested) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  Entry& e = t.entries[name];
  ++e.calls;
  e.seconds += seconds;
  if (nested) e.nested_seconds += seconds;
  e.longest = std::max(e.longest, seconds);
}

bool Scope::enter(const char* name) {
  if (name[0] == '(') return false;
  return t_op_depth++ > 0;
}

void Scope::leave(const char* name, double seconds, bool nested) {
  if (name[0] != '(') --t_op_depth;
  record(name, seconds, nested);
}

void set_flush(void (*fn)()) { g_flush.store(fn); }

void flush() {
  if (void (*fn)() = g_flush.load()) fn();  // outside the table's lock: the hook calls record()
}

void reset() {
  if (!enabled()) return;
  flush();  // pending timings of the warm-up are resolved (and dropped below), their events reused
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.entries.clear();
  t.start = std::chrono::steady_clock::now();
  g_resets.fetch_add(1);
}

uint64_t reset_generation() { return g_resets.load(); }

std::vector<Region> regions() {
  flush();
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  std::vector<Region> out;
  out.reserve(t.entries.size());
  for (const auto& [name, e] : t.entries) out.push_back({name, e.calls, e.seconds, e.nested_seconds});
  return out;
}

const char* category(std::string_view name) {
  if (name.empty() || name.front() == '(' || name.find('.') != std::string_view::npos) return nullptr;
  // Checked in this order: "scale_gradients" is the optimizer's before "scale" is element-wise.
  if (has_prefix(name, {"adamw", "sgd", "clip_grad_norm", "grad_norm", "scale_gradients", "zero", "sharded"})) {
    return "optimizer";
  }
  if (has_prefix(name, {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all", "nccl"})) {
    return "communication";
  }
  if (has_prefix(name, {"gemm", "matmul", "linear", "lora", "dora"})) return "gemm";
  if (has_prefix(name, {"attention", "flash", "kv_cache"})) return "attention";
  if (has_prefix(name, {"cross_entropy", "token_logprobs"})) return "loss";
  if (has_prefix(name, {"cast", "add", "mul", "scale", "swiglu", "silu", "gelu", "embedding", "rmsnorm", "layernorm",
                        "rope", "dropout", "softmax", "swap_outer_axes", "copy", "fill"})) {
    return "elementwise";
  }
  return "other";
}

Breakdown breakdown_of(const std::vector<Region>& regions, double wall_s) {
  Breakdown b;
  b.wall_s = wall_s;
  for (const char* c : kCategories) b.seconds.emplace_back(c, 0.0);
  for (const Region& r : regions) {
    const char* c = category(r.name);
    if (c == nullptr) continue;
    const double top = r.seconds - r.nested_seconds;
    for (auto& [name, s] : b.seconds) {
      if (std::strcmp(name, c) == 0) s += top;
    }
    b.busy_s += top;
  }
  b.idle_s = std::max(0.0, wall_s - b.busy_s);
  return b;
}

Breakdown breakdown(double wall_s) {
  std::vector<Region> rows = regions();
  if (wall_s < 0) {
    Table& t = table();
    std::lock_guard<std::mutex> lock(t.mutex);
    wall_s = seconds_since_start(t);
  }
  return breakdown_of(rows, wall_s);
}

}  // namespace swift::profile
