// ops/offload.cpp — ActivationOffloader (see offload.h): a copy stream and page-locked buffers on CUDA, synchronous
// host copies on the CPU.
//
// Invariants: every CUDA call is checked and names itself; events are created without timing; the copy stream is
// non-blocking (it never waits for the legacy stream), so every ordering with the op stream is an explicit event.
#include "ops/offload.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"

#ifdef SWIFT_WITH_CUDA
#include <cuda_runtime.h>

#include "ops/cuda/cuda_ops.h"
#endif

namespace swift::ops {

namespace {
#ifdef SWIFT_WITH_CUDA
void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("activation offload: {} failed: {}", what, cudaGetErrorString(status));
}
#endif
}  // namespace

struct ActivationOffloader::HostBuffer {
  void* data = nullptr;
  size_t bytes = 0;
  bool pinned = false;
  HostBuffer(size_t n, bool cuda) : bytes(n), pinned(cuda) {
#ifdef SWIFT_WITH_CUDA
    if (cuda) {
      const cudaError_t status = cudaHostAlloc(&data, n, cudaHostAllocDefault);
      if (status != cudaSuccess) {
        cudaGetLastError();
        fail("offload: cannot page-lock {} MiB of host memory for an offloaded tensor ({}); lower "
             "--cpu_offloading_num_layers / --offload_frozen_layers, or recompute instead (--recompute_modules mlp)",
             n >> 20, cudaGetErrorString(status));
      }
      memory_record_alloc(0, MemoryCategory::Other, n);
      return;
    }
#endif
    (void)cuda;
    data = std::malloc(n);
    SWIFT_CHECK(data != nullptr || n == 0, "activation offload: cannot allocate {} bytes of host memory", n);
    memory_record_alloc(0, MemoryCategory::Other, n);
  }
  ~HostBuffer() {
    memory_record_free(0, MemoryCategory::Other, bytes);
#ifdef SWIFT_WITH_CUDA
    if (pinned) {
      cudaFreeHost(data);
      return;
    }
#endif
    std::free(data);
  }
};

struct ActivationOffloader::Copy {
  int64_t slot = 0;
  Tensor device;         // the source of a store, the destination of a prefetch
  void* event = nullptr;  // cudaEvent_t: the copy's completion on the copy stream (CUDA only)
  ~Copy() {
#ifdef SWIFT_WITH_CUDA
    if (event != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event));
#endif
  }
};

ActivationOffloader::ActivationOffloader(Device device) : device_(device) {
#ifdef SWIFT_WITH_CUDA
  if (device_.is_cuda()) {
    check(cudaSetDevice(device_.index), "cudaSetDevice");
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags (copy stream)");
    copy_stream_ = s;
  }
#else
  SWIFT_CHECK(!device_.is_cuda(), "activation offload on {}: this build has no CUDA backend", device_.str());
#endif
}

ActivationOffloader::~ActivationOffloader() {
#ifdef SWIFT_WITH_CUDA
  if (copy_stream_ != nullptr) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(copy_stream_));  // errors at teardown are ignored
    in_flight_.clear();
    fetched_.clear();
    host_.clear();
    cudaStreamDestroy(static_cast<cudaStream_t>(copy_stream_));
  }
#endif
}

ActivationOffloader::HostBuffer& ActivationOffloader::buffer(int64_t slot, size_t bytes) {
  std::unique_ptr<HostBuffer>& b = host_[slot];
  if (b == nullptr || b->bytes < bytes) {
#ifdef SWIFT_WITH_CUDA
    // A smaller buffer of this slot may still be read by a copy back in flight on the copy stream.
    if (b != nullptr && copy_stream_ != nullptr) {
      check(cudaStreamSynchronize(static_cast<cudaStream_t>(copy_stream_)), "cudaStreamSynchronize (copy stream)");
    }
#endif
    b.reset();
    b = std::make_unique<HostBuffer>(bytes, device_.is_cuda());
  }
  return *b;
}

#ifdef SWIFT_WITH_CUDA
namespace {
// The copy stream waits for the work enqueued on the op stream so far.
void copy_after_ops(cudaStream_t ops_stream, cudaStream_t copy_stream) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  check(cudaEventRecord(e, ops_stream), "cudaEventRecord (op stream)");
  check(cudaStreamWaitEvent(copy_stream, e, 0), "cudaStreamWaitEvent (copy after ops)");
  check(cudaEventDestroy(e), "cudaEventDestroy");  // released once the wait is satisfied
}
// SWIFT_OFFLOAD_TRACE=1: every copy between two timing events; clear() prints the copies' busy time and rate.
bool tracing() {
  static const bool on = [] {
    const char* v = std::getenv("SWIFT_OFFLOAD_TRACE");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}
struct TraceEntry {
  cudaEvent_t start = nullptr, end = nullptr;
  size_t bytes = 0;
  bool to_host = false;
};
std::vector<TraceEntry>& trace() {
  static std::vector<TraceEntry> entries;
  return entries;
}
cudaEvent_t trace_start(cudaStream_t stream) {
  if (!tracing()) return nullptr;
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "cudaEventCreate (trace)");
  check(cudaEventRecord(e, stream), "cudaEventRecord (trace)");
  return e;
}
void trace_end(cudaEvent_t start, cudaStream_t stream, size_t bytes, bool to_host) {
  if (start == nullptr) return;
  cudaEvent_t e = nullptr;
  check(cudaEventCreate(&e), "cudaEventCreate (trace)");
  check(cudaEventRecord(e, stream), "cudaEventRecord (trace)");
  trace().push_back({start, e, bytes, to_host});
}
void trace_report() {
  if (trace().empty()) return;
  double ms[2] = {0, 0}, gb[2] = {0, 0};
  float span = 0;
  for (const TraceEntry& t : trace()) {
    float e = 0;
    check(cudaEventSynchronize(t.end), "cudaEventSynchronize (trace)");
    check(cudaEventElapsedTime(&e, t.start, t.end), "cudaEventElapsedTime (trace)");
    ms[t.to_host] += e;
    gb[t.to_host] += static_cast<double>(t.bytes) / 1e9;
  }
  check(cudaEventElapsedTime(&span, trace().front().start, trace().back().end), "cudaEventElapsedTime (trace)");
  std::fprintf(stderr, "offload trace: %zu copies over %.1f ms; to host %.2f GB in %.1f ms busy (%.1f GB/s), to device "
               "%.2f GB in %.1f ms busy (%.1f GB/s)\n", trace().size(), span, gb[1], ms[1], gb[1] / ms[1] * 1e3, gb[0],
               ms[0], gb[0] / std::max(ms[0], 1e-9) * 1e3);
  for (const TraceEntry& t : trace()) {
    cudaEventDestroy(t.start);
    cudaEventDestroy(t.end);
  }
  trace().clear();
}
void* record_on(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  check(cudaEventRecord(e, stream), "cudaEventRecord (copy stream)");
  return e;
}
}  // namespace
#endif

void ActivationOffloader::store(int64_t slot, const Tensor& t) {
  SWIFT_CHECK(t.defined() && t.device() == device_, "activation offload: slot {} must hold a tensor on {}", slot,
              device_.str());
  SWIFT_CHECK(stored_.count(slot) == 0 && fetched_.count(slot) == 0,
              "activation offload: slot {} already holds a tensor (take it back before storing again)", slot);
  const size_t n = t.nbytes();
  HostBuffer& host = buffer(slot, n);
  auto copy = std::make_unique<Copy>();
  copy->slot = slot;
  copy->device = t;
#ifdef SWIFT_WITH_CUDA
  if (device_.is_cuda()) {
    auto cs = static_cast<cudaStream_t>(copy_stream_);
    copy_after_ops(cuda::stream(device_.index), cs);
    cudaEvent_t traced = trace_start(cs);
    check(cudaMemcpyAsync(host.data, t.raw(), n, cudaMemcpyDeviceToHost, cs), "cudaMemcpyAsync (device to host)");
    trace_end(traced, cs, n, true);
    copy->event = record_on(cs);
  }
#endif
  if (device_.is_cpu()) std::memcpy(host.data, t.raw(), n);
  stored_[slot] = Stored{t.shape(), t.dtype()};
  in_flight_.push_back(std::move(copy));
}

void ActivationOffloader::keep_on_host(int64_t slot, const Tensor& t) {
  SWIFT_CHECK(t.defined() && t.device() == device_, "offload: resident slot {} must hold a tensor on {}", slot,
              device_.str());
  SWIFT_CHECK(stored_.count(slot) == 0 && fetched_.count(slot) == 0, "offload: slot {} already holds a tensor", slot);
  const size_t n = t.nbytes();
  HostBuffer& host = buffer(slot, n);
#ifdef SWIFT_WITH_CUDA
  if (device_.is_cuda()) {
    auto cs = static_cast<cudaStream_t>(copy_stream_);
    copy_after_ops(cuda::stream(device_.index), cs);
    check(cudaMemcpyAsync(host.data, t.raw(), n, cudaMemcpyDeviceToHost, cs), "cudaMemcpyAsync (device to host)");
    check(cudaStreamSynchronize(cs), "cudaStreamSynchronize (resident copy to the host)");
  }
#endif
  if (device_.is_cpu()) std::memcpy(host.data, t.raw(), n);
  stored_[slot] = Stored{t.shape(), t.dtype()};
  resident_.insert(slot);
}

void ActivationOffloader::retire(size_t keep) {
  while (in_flight_.size() > keep) {
#ifdef SWIFT_WITH_CUDA
    if (in_flight_.front()->event != nullptr) {
      check(cudaStreamWaitEvent(cuda::stream(device_.index), static_cast<cudaEvent_t>(in_flight_.front()->event), 0),
            "cudaStreamWaitEvent (ops after the copy to the host)");
    }
#endif
    in_flight_.pop_front();  // the device tensor goes back to the allocator: later ops run after the copy
  }
}

void ActivationOffloader::prefetch(int64_t slot, MemoryCategory category) {
  if (fetched_.count(slot) != 0) return;
  const auto it = stored_.find(slot);
  SWIFT_CHECK(it != stored_.end(), "activation offload: slot {} holds nothing to fetch", slot);
  // A store still in flight for this slot: its device tensor is the data itself, no copy back needed.
  for (auto f = in_flight_.begin(); f != in_flight_.end(); ++f) {
    if ((*f)->slot != slot) continue;
    auto copy = std::move(*f);
    in_flight_.erase(f);
#ifdef SWIFT_WITH_CUDA
    if (copy->event != nullptr) {  // the data never left the device: take() need not wait for the copy
      check(cudaEventDestroy(static_cast<cudaEvent_t>(copy->event)), "cudaEventDestroy");
      copy->event = nullptr;
    }
#endif
    fetched_[slot] = std::move(copy);
    stored_.erase(it);
    return;
  }
  auto copy = std::make_unique<Copy>();
  copy->slot = slot;
  copy->device = Tensor::empty(it->second.shape, it->second.dtype, device_, category);
  const size_t n = copy->device.nbytes();
  HostBuffer& host = *host_.at(slot);
#ifdef SWIFT_WITH_CUDA
  if (device_.is_cuda()) {
    auto cs = static_cast<cudaStream_t>(copy_stream_);
    copy_after_ops(cuda::stream(device_.index), cs);  // the new tensor's memory may be in use by earlier ops
    cudaEvent_t traced = trace_start(cs);
    check(cudaMemcpyAsync(copy->device.raw(), host.data, n, cudaMemcpyHostToDevice, cs),
          "cudaMemcpyAsync (host to device)");
    trace_end(traced, cs, n, false);
    copy->event = record_on(cs);
  }
#endif
  if (device_.is_cpu()) std::memcpy(copy->device.raw(), host.data, n);
  if (resident_.count(slot) == 0) stored_.erase(it);  // a resident slot's host copy stays for the next fetch
  fetched_[slot] = std::move(copy);
}

Tensor ActivationOffloader::take(int64_t slot, MemoryCategory category) {
  prefetch(slot, category);
  auto node = fetched_.extract(slot);
  Copy& copy = *node.mapped();
#ifdef SWIFT_WITH_CUDA
  if (copy.event != nullptr) {
    check(cudaStreamWaitEvent(cuda::stream(device_.index), static_cast<cudaEvent_t>(copy.event), 0),
          "cudaStreamWaitEvent (ops after the copy to the device)");
  }
#endif
  return copy.device;
}

void ActivationOffloader::clear() {
#ifdef SWIFT_WITH_CUDA
  if (copy_stream_ != nullptr) trace_report();
#endif
  retire(0);
  std::vector<int64_t> slots;
  for (const auto& [slot, copy] : fetched_) slots.push_back(slot);
  for (int64_t slot : slots) take(slot);  // the op stream waits for copies back in flight
  std::erase_if(stored_, [&](const auto& entry) { return resident_.count(entry.first) == 0; });  // residents stay
}

int64_t ActivationOffloader::host_bytes() const {
  int64_t total = 0;
  for (const auto& [slot, b] : host_) total += static_cast<int64_t>(b->bytes);
  return total;
}

}  // namespace swift::ops
