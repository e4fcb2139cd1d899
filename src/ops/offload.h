// ops/offload.h — activation offloading: a device tensor's bytes copied to host memory while the step does not need
// them (its device memory goes back to the allocator), and copied back before it does.
//
// Invariants:
//  - CUDA: the copies run on a copy stream of the offloader, into page-locked host buffers (one per slot, grown as
//    needed, reused by later steps), so they overlap the op stream's work. store() copies after the work enqueued on
//    the device's op stream so far; prefetch() copies into a new device tensor after the work enqueued so far (its
//    memory may have been another tensor's). Both directions share the copy stream, so a slot's next store never
//    overwrites the host buffer before its previous copy back read it.
//  - Memory is given back in stream order: retire() makes the op stream wait for a store's copy before it lets go of
//    the device tensor, so whatever later reuses that memory on the op stream runs after the copy read it; take()
//    makes the op stream wait for the copy back before the tensor is used. The op stream stalls only when a copy is
//    not finished by then (time, never correctness): the bits that come back are the bits that left.
//  - Measured on the H200 machines (docs/PERFORMANCE.md run 9): the copies run at the link's 55 GB/s each way, but
//    the step slows by about 0.75x the device-to-host copy time (the copies to the device overlap): with the 7B's
//    norms and act recomputed, offloading 18 layers' MLPs took 0.678 s per step where recomputing them took 0.602
//    (same call). A thread issuing the copies changed nothing (measured). Kept for machines whose link overlaps both
//    ways, and as the exact alternative to recompute.
//  - CPU: the same protocol with plain host buffers and synchronous copies (what the tests exercise); the copies live
//    outside the Activations category (MemoryCategory::Other), as pinned memory does on CUDA.
//  - One slot holds one tensor at a time: store() a slot, then prefetch() and take() it before storing it again.
//  - keep_on_host() makes a resident slot (frozen weights streamed in every step): its host copy is made at once and
//    stays; every prefetch() / take() copies it back again into a new device tensor, and clear() keeps it.
//  - SWIFT_OFFLOAD_TRACE=1 (CUDA): every copy between two timing events; clear() (the trainer calls it at each step's
//    start) prints the previous step's copies: count, span, bytes, busy time and rate per direction.
//  - The destructor waits for the copies in flight. Not thread-safe (one trainer thread).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>

#include "core/tensor.h"

namespace swift::ops {

class ActivationOffloader {
 public:
  explicit ActivationOffloader(Device device);
  ~ActivationOffloader();
  ActivationOffloader(const ActivationOffloader&) = delete;
  ActivationOffloader& operator=(const ActivationOffloader&) = delete;

  // Starts copying t (contiguous, on the offloader's device) to the host buffer of `slot`; the offloader holds t
  // until retire() lets it go.
  void store(int64_t slot, const Tensor& t);
  // A resident host copy of t in `slot` (contiguous, on the offloader's device): copied now (the copy stream is
  // synchronised, so t may be freed on return); every later prefetch() / take() of the slot copies it back again.
  void keep_on_host(int64_t slot, const Tensor& t);
  // Lets go of the oldest stored device tensors until at most `keep` are held (the op stream waits for their copies).
  void retire(size_t keep);
  // Starts copying `slot` back into a new device tensor (the stored shape and dtype, accounted to `category`).
  void prefetch(int64_t slot, MemoryCategory category = MemoryCategory::Activations);
  bool holds(int64_t slot) const { return stored_.count(slot) != 0 || fetched_.count(slot) != 0; }
  bool prefetched(int64_t slot) const { return fetched_.count(slot) != 0; }
  // The tensor of `slot` back on the device, usable by ops enqueued from now on (prefetches first if needed). The slot
  // is empty afterwards.
  Tensor take(int64_t slot, MemoryCategory category = MemoryCategory::Activations);
  // Empties every slot (a step that failed half-way): lets go of the held device tensors as retire(0) does; the host
  // buffers stay for reuse.
  void clear();
  // Host bytes held by the slots' buffers (pinned on CUDA).
  int64_t host_bytes() const;
  Device device() const { return device_; }

 private:
  struct HostBuffer;  // offload.cpp: page-locked (CUDA) or heap (CPU) bytes
  struct Copy;        // offload.cpp: a copy's device tensor and its completion event
  struct Stored {
    Shape shape;
    DType dtype = DType::F32;
  };
  HostBuffer& buffer(int64_t slot, size_t bytes);

  Device device_;
  void* copy_stream_ = nullptr;                           // cudaStream_t
  std::map<int64_t, std::unique_ptr<HostBuffer>> host_;  // slot -> buffer
  std::map<int64_t, Stored> stored_;                      // slots holding a tensor on the host
  std::deque<std::unique_ptr<Copy>> in_flight_;           // stores whose device tensor is still held, oldest first
  std::map<int64_t, std::unique_ptr<Copy>> fetched_;      // prefetched slots, not taken yet
  std::set<int64_t> resident_;                            // keep_on_host slots (their stored_ entries stay)
};

}  // namespace swift::ops
