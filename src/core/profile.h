// core/profile.h — opt-in wall-time profile of named regions (ops), printed as a table at exit.
//
//   SWIFT_PROFILE=1 swift sft ...     -> at exit, stderr gets one line per region: calls, total ms, ms/call, share
//
// Invariants:
//  - Off (the default) costs one predictable branch on a cached flag per region: no clock reads, no locking.
//  - Regions are timed on the calling thread with a steady clock; nested regions are counted in both (the table
//    says "inclusive"). Regions opened inside OpenMP parallel regions are allowed (the table is mutex-guarded),
//    but the ops time themselves only at their top level, on the calling thread.
//  - The flag is read once, from the environment, at the first region.
#pragma once

#include <chrono>

namespace swift::profile {

// True when SWIFT_PROFILE is set to something other than "" or "0".
bool enabled();
// Adds one call of `seconds` to region `name` (a string literal: its address is the key).
void record(const char* name, double seconds);
// Forgets every region recorded so far and restarts the wall clock (a benchmark's warm-up steps).
void reset();

class Scope {
 public:
  explicit Scope(const char* name) : name_(enabled() ? name : nullptr) {
    if (name_) start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (name_) record(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace swift::profile

#define SWIFT_PROFILE_CAT2(a, b) a##b
#define SWIFT_PROFILE_CAT(a, b) SWIFT_PROFILE_CAT2(a, b)
// Times the rest of the enclosing block under `name` (a string literal) when SWIFT_PROFILE is set.
#define SWIFT_PROFILE(name) ::swift::profile::Scope SWIFT_PROFILE_CAT(swift_profile_scope_, __LINE__)(name)
