// ops/cuda/profile_events.h — the timing of a CUDA op (or a part of one) under SWIFT_PROFILE (core/profile.h).
//
//   { cuda::DeviceRegion region("lora_linear.xa", device); ...enqueue on stream(device)... }
//
// Invariants:
//  - Off: nothing (one branch). SWIFT_PROFILE=1 (Sync): the stream is synchronised at both ends and the region
//    timed on the host (profile::Scope), as before events existed. SWIFT_PROFILE=events: two CUDA events from a
//    per-device pool are recorded on stream(device) around the region, with no synchronisation; the pending
//    (name, start, end) triples become profile::record() calls (cudaEventSynchronize on the end event, then
//    cudaEventElapsedTime) when more than kMaxPending are pending (the oldest half), and at profile::flush()
//    (reset, regions, breakdown, the table at exit). Events return to the pool once resolved.
//  - The device must be current (dispatch made it so); regions nest (an op and its parts) without interfering.
//  - Events mode also records the device's idle time before each outermost region (since the previous outermost
//    region's end) as "(idle before) <op>": which op the device was waiting for.
//  - Never inside a CUDA graph capture (decode_plan refuses graphs under SWIFT_PROFILE).
#pragma once

#ifdef SWIFT_WITH_CUDA
#include <cuda_runtime.h>

#include <optional>

#include "core/profile.h"

namespace swift::ops::cuda {

class DeviceRegion {
 public:
  static constexpr size_t kMaxPending = 4096;

  DeviceRegion(const char* name, int device) : device_(device) {
    if (profile::enabled()) begin(name);
  }
  ~DeviceRegion() {
    if (name_ != nullptr || scope_) end();
  }
  DeviceRegion(const DeviceRegion&) = delete;
  DeviceRegion& operator=(const DeviceRegion&) = delete;

 private:
  void begin(const char* name);
  void end();

  const char* name_ = nullptr;  // set in events mode only
  bool top_ = false;            // events mode: the thread's outermost open region
  int device_;
  cudaEvent_t start_ = nullptr;
  std::optional<profile::Scope> scope_;  // Sync mode; destroyed after the synchronisation in the destructor
};

}  // namespace swift::ops::cuda
#endif
