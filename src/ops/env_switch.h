// ops/env_switch.h — a process-wide on/off of a code path (CUDA kernels, host mirrors), read from an environment
// variable on first use.
//
// Invariants:
//  - The variable is read once: unset or empty is the default, "1" on, "0" off; anything else throws swift::Error
//    naming the variable and its value. set() overrides it for the rest of the process (tests).
//  - Lock-free: any thread may ask; the first reads decide together (compare-and-swap from "not read").
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace swift::ops {

class EnvSwitch {
 public:
  constexpr EnvSwitch(const char* name, bool by_default) : name_(name), default_(by_default) {}
  bool on() const {
    int v = state_.load();
    if (v < 0) {
      int expected = -1;
      state_.compare_exchange_strong(expected, read() ? 1 : 0);
      v = state_.load();
    }
    return v == 1;
  }
  void set(bool on) { state_.store(on ? 1 : 0); }

 private:
  bool read() const {
    const char* e = std::getenv(name_);
    if (e == nullptr || *e == 0) return default_;
    if (std::strcmp(e, "1") == 0) return true;
    if (std::strcmp(e, "0") == 0) return false;
    fail("{}='{}': use 1 (on) or 0 (off)", name_, e);
  }

  const char* name_;
  bool default_;
  mutable std::atomic<int> state_{-1};  // -1: not read yet, 0: off, 1: on
};

}  // namespace swift::ops
