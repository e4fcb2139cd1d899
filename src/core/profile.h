// core/profile.h — opt-in profile of named regions (ops), printed as a table at exit, and its breakdown of the
// time into categories (gemm, attention, ..., idle).
//
//   SWIFT_PROFILE=1 swift sft ...       -> each CUDA op bracketed by two stream synchronisations, timed on the host
//   SWIFT_PROFILE=events swift sft ...  -> each CUDA op timed by two CUDA events on its stream: no synchronisation
//   at exit, stderr gets one line per region (calls, total ms, ms/call, max, share) and the category breakdown.
//
// Invariants:
//  - Off (the default) costs one predictable branch on a cached flag per region: no clock reads, no locking.
//  - CPU regions are timed on the calling thread with a steady clock in both modes. CUDA ops are timed by ops/
//    (dispatch.cpp, ops/cuda/profile_events.h): in events mode they record pending event pairs that ops/cuda turns
//    into record() calls through the flush hook (set_flush); core stays free of CUDA. flush() runs that hook; reset(),
//    regions(), breakdown() and the printed table call it first, so they see every op enqueued so far.
//  - Names: an op is a plain name ("linear"); a part timed inside an op is "op.part" (nested: counted in the op too,
//    so never added to totals); a caller's annotation is "(...)" (e.g. the bench's whole step; never an op). The
//    table is inclusive; the breakdown adds each op's time once (a CPU op's calls inside another op's Scope are
//    recorded as nested: lora_linear -> linear, gemm).
//  - Idle = the profiled interval's wall time - the summed time of the top-level ops. In events mode that is the
//    device's idle time (one stream: its ops serialise; the device waits on launches, host reads, host work); with
//    SWIFT_PROFILE=1 it also holds the synchronisations' cost; on the CPU it is the host time outside ops.
//  - Regions opened inside OpenMP parallel regions are allowed (the table is mutex-guarded), but the ops time
//    themselves only at their top level, on the calling thread.
//  - The mode is read once, from the environment, at the first region (set_mode overrides it, for tests).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace swift::profile {

enum class Mode { Off, Sync, Events };  // SWIFT_PROFILE unset / "" / "0", any other value, "events"

Mode mode();
// True in Sync and Events mode.
bool enabled();
// Overrides SWIFT_PROFILE (tests; a tool that profiles on purpose).
void set_mode(Mode m);
// Adds one call of `seconds` to region `name` (a string literal, or any string: the table copies it); `nested`:
// the call ran inside another op's Scope on its thread (a CPU op calling ops: lora_linear -> linear, gemm).
void record(const char* name, double seconds, bool nested = false);
// The hook that resolves pending device timings into record() calls (ops/cuda registers it; nullptr removes it).
void set_flush(void (*flush)());
void flush();
// Forgets every region recorded so far (pending device timings too) and restarts the wall clock (a benchmark's
// warm-up steps).
void reset();
// How many resets so far: a device timing resolved in a later generation than the one it follows (the idle time
// before an op) is not measured across a reset.
uint64_t reset_generation();

struct Region {
  std::string name;
  long long calls = 0;
  double seconds = 0;         // every call (the table's inclusive time)
  double nested_seconds = 0;  // the calls made inside another op (not added to the breakdown again)
};
// Every region recorded since reset(), after flush().
std::vector<Region> regions();

// The category of a region: "gemm", "attention", "loss", "elementwise", "optimizer", "communication" or "other"
// (unknown op names: never dropped); nullptr for names that are not top-level ops ("op.part", "(...)").
const char* category(std::string_view name);

struct Breakdown {
  double wall_s = 0;  // the profiled interval
  double busy_s = 0;  // top-level ops, summed
  double idle_s = 0;  // wall_s - busy_s, at least 0 (meaningful in events mode: the ops of one stream serialise)
  std::vector<std::pair<const char*, double>> seconds;  // every category in the order above, zeros included
};
// Sums the top-level regions (their calls not nested in another op) into categories; idle = wall_s - busy (0 if the
// regions overlap by more).
Breakdown breakdown_of(const std::vector<Region>& regions, double wall_s);
// The breakdown of regions(); wall_s < 0: the wall time since reset() (or the first region).
Breakdown breakdown(double wall_s = -1);

// Times a region on the calling thread; an op's Scope inside another op's Scope of the same thread records as nested
// (annotations "(...)" do not count as enclosing ops).
class Scope {
 public:
  explicit Scope(const char* name) : name_(enabled() ? name : nullptr) {
    if (name_) {
      nested_ = enter(name_);
      start_ = std::chrono::steady_clock::now();
    }
  }
  ~Scope() {
    if (name_) leave(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(), nested_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  static bool enter(const char* name);  // true when nested in another op's Scope on this thread
  static void leave(const char* name, double seconds, bool nested);

  const char* name_;
  bool nested_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace swift::profile

#define SWIFT_PROFILE_CAT2(a, b) a##b
#define SWIFT_PROFILE_CAT(a, b) SWIFT_PROFILE_CAT2(a, b)
// Times the rest of the enclosing block under `name` (a string literal) when SWIFT_PROFILE is set.
#define SWIFT_PROFILE(name) ::swift::profile::Scope SWIFT_PROFILE_CAT(swift_profile_scope_, __LINE__)(name)
