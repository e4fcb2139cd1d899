// ops/device_graph.h — record the work a function enqueues on a device's op stream once, replay it many times (CUDA
// graphs): one launch instead of hundreds for a decoding step whose kernels, shapes and buffers never change.
//
// Invariants:
//  - capture() runs `enqueue` with the device's stream in capture mode (this thread only): nothing executes, the
//    launches are recorded. `enqueue` must not allocate device memory (a per-thread guard in the CUDA allocator throws
//    naming the capture), synchronise, copy through the backend (cudaMemcpy on the legacy stream) or read device data
//    on the host; any of these, or an exception, abandons the capture, leaves the stream usable and throws
//    swift::Error naming the device and the cause.
//  - A replay does what the recorded launches did, with the pointers and scalars they had at capture: every buffer
//    they touch must outlive the graph and stay at its address; inputs that change between replays live in device
//    memory the caller rewrites before replay() (ordered on the same stream).
//  - replay() enqueues on cuda::stream(device) and returns at once; results are read after the caller's next
//    synchronising copy, as with eager launches.
//  - cuda_graphs_enabled(): SWIFT_CUDA_GRAPHS=0 turns graphs off (read once); set_cuda_graphs_enabled overrides it
//    for the process (benchmarks comparing both paths in one run). Builds without CUDA: capture() throws.
#pragma once

#include <functional>
#include <memory>

#include "core/tensor.h"

namespace swift::ops {

class DeviceGraph {
 public:
  static std::unique_ptr<DeviceGraph> capture(Device device, const std::function<void()>& enqueue);
  ~DeviceGraph();
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;
  void replay() const;
  Device device() const { return device_; }

 private:
  DeviceGraph() = default;
  Device device_;
  void* exec_ = nullptr;  // cudaGraphExec_t
};

bool cuda_graphs_enabled();
void set_cuda_graphs_enabled(bool enabled);

}  // namespace swift::ops
