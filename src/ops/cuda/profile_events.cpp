// ops/cuda/profile_events.cpp — DeviceRegion and the pool of CUDA events behind SWIFT_PROFILE=events (see
// profile_events.h).
#include "ops/cuda/profile_events.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_ops.h"

namespace swift::ops::cuda {

namespace {

struct Pending {
  const char* name;
  int device;
  cudaEvent_t start, end;
  bool top;  // not inside another region of this thread: the device's gaps are measured between these
};

thread_local int t_region_depth = 0;  // open event regions of this thread

// The pending timings and the free events of each device. Constructed at the first event region (after the CUDA
// runtime started), so destroyed at exit before the runtime's teardown: it resolves what is pending then, while the
// profile table (constructed earlier) still waits to print.
class EventLog {
 public:
  EventLog() { profile::set_flush([] { log().resolve(SIZE_MAX); }); }
  ~EventLog() {
    profile::set_flush(nullptr);
    resolve(SIZE_MAX);
  }

  static EventLog& log() {
    static EventLog l;
    return l;
  }

  // An event of `device` (the current device), from the pool or new; nullptr if none can be created.
  cudaEvent_t take(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (free_.size() <= static_cast<size_t>(device)) free_.resize(static_cast<size_t>(device) + 1);
      std::vector<cudaEvent_t>& pool = free_[static_cast<size_t>(device)];
      if (!pool.empty()) {
        cudaEvent_t e = pool.back();
        pool.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    return e;
  }

  void add(const Pending& p) {
    bool full = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_.push_back(p);
      full = pending_.size() > DeviceRegion::kMaxPending;
    }
    if (full) resolve(DeviceRegion::kMaxPending / 2);
  }

  // Records the oldest `count` pending timings (waiting for their end events) and returns their events to the pool.
  // A timing the runtime cannot resolve (at exit, after an error) is dropped.
  void resolve(size_t count) {
    std::lock_guard<std::mutex> lock(mutex_);  // then the table's (record): never the other order
    count = std::min(count, pending_.size());
    for (size_t i = 0; i < count; ++i) {
      const Pending p = pending_.front();
      pending_.pop_front();
      float ms = 0;
      if (cudaEventSynchronize(p.end) == cudaSuccess && cudaEventElapsedTime(&ms, p.start, p.end) == cudaSuccess) {
        profile::record(p.name, static_cast<double>(ms) * 1e-3);
      } else {
        (void)cudaGetLastError();  // not reported by the next op's launch check
      }
      give_back_locked(p.device, p.start);
      if (p.top) {
        note_gap_locked(p);
      } else {
        give_back_locked(p.device, p.end);
      }
    }
  }

  void give_back(int device, cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mutex_);
    give_back_locked(device, e);
  }

 private:
  void give_back_locked(int device, cudaEvent_t e) {
    if (free_.size() <= static_cast<size_t>(device)) free_.resize(static_cast<size_t>(device) + 1);
    free_[static_cast<size_t>(device)].push_back(e);
  }

  // The device's idle time before a top-level region: from the previous top-level region's end event (kept out of
  // the pool until now) to this one's start, recorded as "(idle before) <name>". On one stream the gaps add up to
  // the breakdown's idle time, less what falls outside every region; they say which op the device waited to be
  // given (host work, a synchronisation, launches slower than the kernels). Not measured across a profile::reset()
  // (the first op after one has no line).
  void note_gap_locked(const Pending& p) {
    if (last_end_.size() <= static_cast<size_t>(p.device)) {
      last_end_.resize(static_cast<size_t>(p.device) + 1);
      last_generation_.resize(static_cast<size_t>(p.device) + 1);
    }
    cudaEvent_t& last = last_end_[static_cast<size_t>(p.device)];
    uint64_t& generation = last_generation_[static_cast<size_t>(p.device)];
    const uint64_t now = profile::reset_generation();  // a reset resolves every pending timing first
    float gap = 0;
    if (last != nullptr && generation == now && cudaEventElapsedTime(&gap, last, p.start) == cudaSuccess && gap > 0) {
      profile::record(("(idle before) " + std::string(p.name)).c_str(), static_cast<double>(gap) * 1e-3);
    }
    (void)cudaGetLastError();
    if (last != nullptr) give_back_locked(p.device, last);
    last = p.end;
    generation = now;
  }

  std::mutex mutex_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> last_end_;        // per device
  std::vector<uint64_t> last_generation_;   // per device: profile::reset_generation() when last_end_ was set
  std::vector<std::vector<cudaEvent_t>> free_;
};

}  // namespace

void DeviceRegion::begin(const char* name) {
  switch (profile::mode()) {
    case profile::Mode::Off: return;
    case profile::Mode::Sync:
      cudaStreamSynchronize(stream(device_));
      scope_.emplace(name);
      return;
    case profile::Mode::Events:
      start_ = EventLog::log().take(device_);
      if (start_ == nullptr || cudaEventRecord(start_, stream(device_)) != cudaSuccess) {
        fail("{}: SWIFT_PROFILE=events cannot create or record a CUDA event on cuda:{}", name, device_);
      }
      name_ = name;
      top_ = t_region_depth++ == 0;
      return;
  }
}

void DeviceRegion::end() {
  if (scope_) {
    cudaStreamSynchronize(stream(device_));
    return;  // scope_ records when destroyed, after this
  }
  --t_region_depth;
  EventLog& log = EventLog::log();
  cudaEvent_t end = log.take(device_);
  if (end == nullptr || cudaEventRecord(end, stream(device_)) != cudaSuccess) {  // no throw here: drop the timing
    (void)cudaGetLastError();
    log.give_back(device_, start_);
    if (end != nullptr) log.give_back(device_, end);
    return;
  }
  log.add({name_, device_, start_, end, top_});
}

}  // namespace swift::ops::cuda
