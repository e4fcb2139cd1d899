// ops/device_graph.cpp — CUDA graph capture and replay on the op stream of a device (see device_graph.h).
//
// Invariants: capture mode cudaStreamCaptureModeThreadLocal (other threads' unrelated CUDA calls are not refused; this
// thread's unsafe calls are); the allocation guard of ops/cuda/cuda_backend.h is set for exactly the duration of
// `enqueue`; the capture is always ended, whatever happened, so the stream stays usable; the graph itself is destroyed
// once instantiated (the executable graph keeps what it needs). Errors name the device and the CUDA call.
#include "ops/device_graph.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

#ifdef SWIFT_WITH_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_ops.h"
#endif

namespace swift::ops {

namespace {
std::atomic<int>& graphs_setting() {  // -1: not read yet, 0: off, 1: on
  static std::atomic<int> setting{-1};
  return setting;
}
}  // namespace

bool cuda_graphs_enabled() {
  int s = graphs_setting().load();
  if (s < 0) {
    const char* env = std::getenv("SWIFT_CUDA_GRAPHS");
    s = (env != nullptr && std::strcmp(env, "0") == 0) ? 0 : 1;
    int expected = -1;
    graphs_setting().compare_exchange_strong(expected, s);
    s = graphs_setting().load();
  }
  return s == 1;
}

void set_cuda_graphs_enabled(bool enabled) { graphs_setting().store(enabled ? 1 : 0); }

#ifdef SWIFT_WITH_CUDA

std::unique_ptr<DeviceGraph> DeviceGraph::capture(Device device, const std::function<void()>& enqueue) {
  SWIFT_CHECK(device.is_cuda(), "CUDA graph capture: {} is not a CUDA device", device.str());
  if (cudaSetDevice(device.index) != cudaSuccess) fail("CUDA graph capture: cannot select {}", device.str());
  cudaStream_t s = cuda::stream(device.index);
  cudaError_t status = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  if (status != cudaSuccess) {
    cudaGetLastError();
    fail("CUDA graph capture on {}: cudaStreamBeginCapture failed: {}", device.str(), cudaGetErrorString(status));
  }
  std::string error;
  cuda::set_allocation_guard("a CUDA graph capture");
  try {
    enqueue();
  } catch (const std::exception& e) {
    error = e.what();
  }
  cuda::set_allocation_guard(nullptr);
  cudaGraph_t graph = nullptr;
  status = cudaStreamEndCapture(s, &graph);
  if (!error.empty() || status != cudaSuccess || graph == nullptr) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // capture errors are not sticky: clear the last error so later calls start clean
    fail("CUDA graph capture on {} failed: {}", device.str(),
         !error.empty() ? error : std::string("cudaStreamEndCapture: ") + cudaGetErrorString(status));
  }
  cudaGraphExec_t exec = nullptr;
  status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (status != cudaSuccess) {
    cudaGetLastError();
    fail("CUDA graph capture on {}: cudaGraphInstantiate failed: {}", device.str(), cudaGetErrorString(status));
  }
  std::unique_ptr<DeviceGraph> out(new DeviceGraph());
  out->device_ = device;
  out->exec_ = exec;
  return out;
}

DeviceGraph::~DeviceGraph() {
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));  // errors at exit are ignored
}

void DeviceGraph::replay() const {
  if (cudaSetDevice(device_.index) != cudaSuccess) fail("CUDA graph replay: cannot select {}", device_.str());
  const cudaError_t status = cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), cuda::stream(device_.index));
  if (status != cudaSuccess) fail("CUDA graph replay on {}: cudaGraphLaunch failed: {}", device_.str(), cudaGetErrorString(status));
}

#else

std::unique_ptr<DeviceGraph> DeviceGraph::capture(Device device, const std::function<void()>&) {
  fail("CUDA graph capture on {}: this build has no CUDA backend", device.str());
}
DeviceGraph::~DeviceGraph() = default;
void DeviceGraph::replay() const { fail("CUDA graph replay: this build has no CUDA backend"); }

#endif

}  // namespace swift::ops
