// dist/nccl_communicator.cpp — the Communicator over NCCL (compiled only with SWIFT_WITH_NCCL).
//
// Invariants:
//  - One NCCL communicator per rank on CUDA device `device_index`, created non-blocking
//    (ncclConfig.blocking = 0): every NCCL call that answers ncclInProgress is polled with
//    ncclCommGetAsyncError against the timeout; on timeout or error the communicator is aborted
//    (ncclCommAbort) and the error names the collective, its number and this rank.
//  - Collectives are enqueued on swift::ops::cuda::stream(device) and return at once. Each one records a CUDA
//    event; a watchdog thread polls the events and ncclCommGetAsyncError every 50 ms. A collective that has not
//    completed `timeout` seconds after it was enqueued (a peer died or never called it) makes the watchdog abort
//    the communicator (which frees the stuck kernels), print the error to stderr, and fail every later call of
//    this rank; if the rank does not come back to the communicator within 30 s it exits with status 1, so the
//    launcher stops the others. A dead peer never means a silent hang.
//  - Started collectives (start_*) run on a communication stream of this communicator (created on first use,
//    highest priority, cudaStreamNonBlocking so the backend's synchronous copies on the legacy stream never wait
//    for a collective): it first waits (event) for the work enqueued on the compute stream so far; the handle's
//    wait() makes the compute stream wait for the collective's own event. A blocking collective issued after
//    started ones first makes the compute stream wait for the communication stream, and a started one waits for
//    the compute stream: NCCL kernels of this communicator run in issue order on both streams (no cross-stream
//    deadlock). synchronize() covers both streams. The watchdog tracks started collectives as the others.
//  - NVLink multicast (NVLS) stays off: NCCL_NVLS_ENABLE=0 unless the user set it.
//  - Reductions: ncclFloat / ncclBfloat16 / ncclFloat16 with ncclSum or ncclAvg (NCCL's order and, for 16-bit
//    dtypes, NCCL's rounding at each hop); copies (all_gather, broadcast, all_to_all) move bytes (ncclUint8), any dtype.
#include "dist/init.h"

#ifdef SWIFT_WITH_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "dist/communicator_internal.h"
#include "ops/cuda/cuda_ops.h"

namespace swift::dist {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) fail("NCCL communicator: {} failed: {}", what, cudaGetErrorString(err));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const LaunchEnv& env, Rendezvous& rendezvous, int device_index, const CommOptions& options)
      : rank_(env.rank), world_(env.world_size), local_rank_(env.local_rank), device_(device_index),
        timeout_s_(resolve_timeout(options)) {
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    ncclUniqueId id{};
    if (rank_ == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) fail("NCCL: ncclGetUniqueId failed on rank 0: {}", ncclGetErrorString(r));
    }
    const std::string blob = rendezvous.broadcast(
        rank_ == 0 ? std::string(reinterpret_cast<const char*>(&id), sizeof(id)) : std::string(), 0, "NCCL unique id");
    if (blob.size() != sizeof(id)) fail("NCCL: received a unique id of {} bytes, expected {}", blob.size(), sizeof(id));
    std::memcpy(&id, blob.data(), sizeof(id));
    stream_ = ops::cuda::stream(device_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommInitRankConfig(&comm_, world_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      fail("NCCL: ncclCommInitRankConfig failed on rank {} (device cuda:{}): {}", rank_, device_, ncclGetErrorString(r));
    }
    poll_until_ready(deadline_after(timeout_s_), "communicator setup (ncclCommInitRankConfig)");
    cuda_check(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc (barrier scratch)");
    watchdog_ = std::thread([this] { watch(); });
  }

  // A sub-group of `parent` (split): ncclCommSplit with key = the parent rank, non-blocking like the parent, polled
  // against the timeout; it shares the parent's device and stream and has its own watchdog.
  NcclCommunicator(NcclCommunicator& parent, int color)
      : rank_(parent.rank_), world_(0), local_rank_(parent.local_rank_), device_(parent.device_),
        timeout_s_(parent.timeout_s_) {
    parent.check_error();
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    stream_ = parent.stream_;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = ncclCommSplit(parent.comm_, color, parent.rank_, &comm_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      fail("NCCL: ncclCommSplit(color {}) failed on rank {}: {} ({})", color, parent.rank_, ncclGetErrorString(r),
           ncclGetLastError(parent.comm_));
    }
    parent.poll_until_ready(deadline_after(timeout_s_), fmt::format("split (color {})", color));
    poll_until_ready(deadline_after(timeout_s_), fmt::format("split (color {}): the new communicator", color));
    int count = 0, rank = 0;
    if (ncclCommCount(comm_, &count) != ncclSuccess || ncclCommUserRank(comm_, &rank) != ncclSuccess) {
      abort_comm();
      fail("NCCL: cannot read the size and rank of the group split off with color {} on rank {}", color, parent.rank_);
    }
    world_ = count;
    rank_ = rank;
    cuda_check(cudaMalloc(&scratch_, sizeof(float)), "cudaMalloc (barrier scratch)");
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    cudaSetDevice(device_);
    if (!aborted_.load()) {
      try {
        synchronize();
        if (ncclCommFinalize(comm_) == ncclInProgress) poll_until_ready(deadline_after(timeout_s_), "ncclCommFinalize");
        ncclCommDestroy(comm_);
      } catch (const Error& e) {
        std::fprintf(stderr, "swift: rank %d: %s\n", rank_, e.what());
      }
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (const Pending& p : pending_) cudaEventDestroy(p.event);
    if (handoff_ != nullptr) cudaEventDestroy(handoff_);
    if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  Device device() const override { return Device::cuda(device_); }
  std::string backend() const override { return "nccl"; }
  double timeout_s() const override { return timeout_s_; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    enqueue("all_reduce", [&] {
      detail::check_all_reduce(t, device());
      return ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), nccl_op(op), comm_,
                           stream_);
    });
  }

  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    enqueue("reduce_scatter", [&] {
      detail::check_reduce_scatter(input, output, world_, rank_, device());
      return ncclReduceScatter(input.raw(), output.raw(), static_cast<size_t>(output.numel()),
                               nccl_type(input.dtype()), nccl_op(op), comm_, stream_);
    });
  }

  void all_gather(const Tensor& input, Tensor& output) override {
    enqueue("all_gather", [&] {
      detail::check_all_gather(input, output, world_, rank_, device());
      return ncclAllGather(input.raw(), output.raw(), input.nbytes(), ncclUint8, comm_, stream_);
    });
  }

  std::unique_ptr<CollectiveHandle> start_all_reduce(Tensor& t, ReduceOp op) override {
    return start("all_reduce", {t}, [&](cudaStream_t s) {
      detail::check_all_reduce(t, device());
      return ncclAllReduce(t.raw(), t.raw(), static_cast<size_t>(t.numel()), nccl_type(t.dtype()), nccl_op(op), comm_,
                           s);
    });
  }

  std::unique_ptr<CollectiveHandle> start_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    return start("reduce_scatter", {input, output}, [&](cudaStream_t s) {
      detail::check_reduce_scatter(input, output, world_, rank_, device());
      return ncclReduceScatter(input.raw(), output.raw(), static_cast<size_t>(output.numel()),
                               nccl_type(input.dtype()), nccl_op(op), comm_, s);
    });
  }

  std::unique_ptr<CollectiveHandle> start_all_gather(const Tensor& input, Tensor& output) override {
    return start("all_gather", {input, output}, [&](cudaStream_t s) {
      detail::check_all_gather(input, output, world_, rank_, device());
      return ncclAllGather(input.raw(), output.raw(), input.nbytes(), ncclUint8, comm_, s);
    });
  }

  void broadcast(Tensor& t, int root) override {
    enqueue("broadcast", [&] {
      detail::check_broadcast(t, root, world_, device());
      return ncclBroadcast(t.raw(), t.raw(), t.nbytes(), ncclUint8, root, comm_, stream_);
    });
  }

  void all_to_all(const Tensor& input, Tensor& output) override {
    enqueue("all_to_all", [&] {
      detail::check_all_to_all(input, output, world_, device());
      const size_t piece = input.nbytes() / static_cast<size_t>(world_);
      const char* in = static_cast<const char*>(input.raw());
      char* out = static_cast<char*>(output.raw());
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      for (int peer = 0; peer < world_ && (r == ncclSuccess || r == ncclInProgress); ++peer) {
        r = ncclSend(in + peer * piece, piece, ncclUint8, peer, comm_, stream_);
        if (r == ncclSuccess || r == ncclInProgress) r = ncclRecv(out + peer * piece, piece, ncclUint8, peer, comm_, stream_);
      }
      const ncclResult_t end = ncclGroupEnd();
      return r == ncclSuccess || r == ncclInProgress ? end : r;
    });
  }

  void barrier() override {
    enqueue("barrier", [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, stream_); });
    synchronize();
  }

  void synchronize() override {
    check_error();
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    join_started();
    cudaEvent_t event = nullptr;
    cuda_check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(event, stream_), "cudaEventRecord");
    const auto deadline = deadline_after(timeout_s_);
    while (true) {
      const cudaError_t q = cudaEventQuery(event);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) {
        cudaEventDestroy(event);
        cuda_check(q, "waiting for the NCCL stream");
      }
      if (error_set_.load()) break;
      if (Clock::now() >= deadline) {
        cudaEventDestroy(event);
        set_error(fmt::format("synchronize: the CUDA stream did not drain within {} s (a collective is stuck: a peer "
                              "died or stopped calling collectives)",
                              timeout_s_));
        check_error();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    cudaEventDestroy(event);
    check_error();
  }

  void abort(const std::string& reason) override {
    set_error(fmt::format("rank {} aborted: {}", rank_, reason));
  }

  std::unique_ptr<Communicator> split(int color) override {
    if (color < 0) fail("split: color {} must be >= 0 (rank {})", color, rank_);
    return std::make_unique<NcclCommunicator>(*this, color);
  }

 private:
  // The compute stream's wait for a started collective (NcclCommunicator::start).
  class NcclHandle final : public CollectiveHandle {
   public:
    NcclHandle(NcclCommunicator& comm, cudaEvent_t done, std::vector<Tensor> tensors)
        : comm_(comm), done_(done), tensors_(std::move(tensors)) {}
    ~NcclHandle() override {
      try {
        wait();
      } catch (const Error&) {  // the communicator is aborted; its next call reports it
      }
      comm_.recycle_event(done_);
    }
    void wait() override {
      if (waited_) return;
      comm_.check_error();
      cuda_check(cudaSetDevice(comm_.device_), "cudaSetDevice");
      cuda_check(cudaStreamWaitEvent(comm_.stream_, done_, 0), "cudaStreamWaitEvent (compute after collective)");
      waited_ = true;
      tensors_.clear();  // later frees are ordered after the collective on the compute stream
    }

   private:
    NcclCommunicator& comm_;
    cudaEvent_t done_;
    std::vector<Tensor> tensors_;  // kept alive while the collective may use them
    bool waited_ = false;
  };

  struct Pending {
    cudaEvent_t event;
    uint64_t sequence;
    const char* name;
    Clock::time_point deadline;
  };

  static ncclDataType_t nccl_type(DType dtype) {
    return dtype == DType::BF16 ? ncclBfloat16 : dtype == DType::F16 ? ncclFloat16 : ncclFloat;
  }
  static ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::Average ? ncclAvg : ncclSum; }

  // Polls the communicator's state until it leaves ncclInProgress; aborts and throws on error or timeout.
  // Yields for the first few milliseconds (a collective on a non-blocking communicator usually answers
  // ncclInProgress and is ready microseconds later: sleeping 1 ms per collective cost 1 ms per gradient bucket, 76
  // ms per step of a 0.5B model on 2 H200s), then sleeps 1 ms between polls.
  void poll_until_ready(Clock::time_point deadline, const std::string& what) {
    const Clock::time_point spin_until = Clock::now() + std::chrono::milliseconds(5);
    while (true) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        const std::string message = fmt::format("NCCL {} failed on rank {}: {} ({})", what, rank_,
                                                ncclGetErrorString(state), ncclGetLastError(comm_));
        abort_comm();
        fail("{}", message);
      }
      if (Clock::now() >= deadline) {
        abort_comm();
        fail("NCCL {} on rank {} timed out after {} s (a peer died, hung, or was not started; raise "
             "SWIFT_DIST_TIMEOUT if it is only slow)",
             what, rank_, timeout_s_);
      }
      if (Clock::now() < spin_until) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }

  // The communication stream and the compute-to-communication handoff event, made on first use.
  cudaStream_t comm_stream() {
    if (comm_stream_ == nullptr) {
      int least = 0, greatest = 0;
      cuda_check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
      cuda_check(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest),
                 "cudaStreamCreateWithPriority (communication stream)");
      cuda_check(cudaEventCreateWithFlags(&handoff_, cudaEventDisableTiming), "cudaEventCreate");
    }
    return comm_stream_;
  }

  // After started collectives: the compute stream waits for the communication stream (issue order for NCCL).
  void join_started() {
    if (!started_pending_) return;
    cuda_check(cudaEventRecord(handoff_, comm_stream_), "cudaEventRecord (communication stream)");
    cuda_check(cudaStreamWaitEvent(stream_, handoff_, 0), "cudaStreamWaitEvent (compute after communication)");
    started_pending_ = false;
  }

  // A started collective: on the communication stream after the compute stream's work so far.
  template <typename Call>
  std::unique_ptr<CollectiveHandle> start(const char* name, std::vector<Tensor> tensors, Call&& call) {
    cudaEvent_t done = nullptr;
    enqueue(name, [&] {
      cudaStream_t s = comm_stream();
      cuda_check(cudaEventRecord(handoff_, stream_), "cudaEventRecord (compute stream)");
      cuda_check(cudaStreamWaitEvent(s, handoff_, 0), "cudaStreamWaitEvent (communication after compute)");
      const ncclResult_t r = call(s);
      started_pending_ = true;
      return r;
    }, &done);
    return std::make_unique<NcclHandle>(*this, done, std::move(tensors));
  }

  // Launches one collective (on the compute stream, or the communication stream for start()) and registers it
  // with the watchdog; `done`: also an event of its completion for a handle.
  template <typename Call>
  void enqueue(const char* name, Call&& call, cudaEvent_t* done = nullptr) {
    const uint64_t sequence = ++sequence_;
    check_error();
    try {
      cuda_check(cudaSetDevice(device_), "cudaSetDevice");
      if (done == nullptr) join_started();
      const ncclResult_t r = call();
      cudaStream_t launched_on = done == nullptr ? stream_ : comm_stream_;
      if (r != ncclSuccess && r != ncclInProgress) {
        fail("NCCL {} #{} failed on rank {}: {} ({})", name, sequence, rank_, ncclGetErrorString(r),
             ncclGetLastError(comm_));
      }
      if (r == ncclInProgress) poll_until_ready(deadline_after(timeout_s_), fmt::format("{} #{}", name, sequence));
      cudaEvent_t event = take_event();
      cuda_check(cudaEventRecord(event, launched_on), "cudaEventRecord");
      {
        std::lock_guard<std::mutex> lock(mutex_);
        pending_.push_back(Pending{event, sequence, name, deadline_after(timeout_s_)});
      }
      if (done != nullptr) {
        *done = take_event();
        cuda_check(cudaEventRecord(*done, launched_on), "cudaEventRecord");
      }
    } catch (const Error& e) {
      set_error(e.what());
      throw;
    }
  }

  cudaEvent_t take_event() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_events_.empty()) {
        cudaEvent_t e = free_events_.back();
        free_events_.pop_back();
        return e;
      }
    }
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    return e;
  }

  void recycle_event(cudaEvent_t e) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_events_.push_back(e);
  }

  void abort_comm() {
    bool expected = false;
    if (aborted_.compare_exchange_strong(expected, true)) ncclCommAbort(comm_);
  }

  // Records the first error, aborts the communicator (frees stuck kernels); later calls throw it.
  void set_error(const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error_.empty()) error_ = message;
    }
    error_set_.store(true);
    abort_comm();
  }

  void check_error() {
    if (!error_set_.load()) return;
    error_seen_.store(true);
    std::lock_guard<std::mutex> lock(mutex_);
    fail("NCCL communicator (rank {}) is aborted: {}", rank_, error_);
  }

  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    Clock::time_point exit_at{};
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(50));
      if (stop_) break;
      if (error_set_.load()) {
        if (error_seen_.load()) continue;
        if (exit_at == Clock::time_point{}) exit_at = Clock::now() + std::chrono::seconds(30);
        if (Clock::now() >= exit_at) {
          std::fprintf(stderr, "swift: rank %d: %s\nswift: rank %d: exiting (the communicator is aborted and the "
                       "process did not come back to it)\n", rank_, error_.c_str(), rank_);
          std::fflush(stderr);
          std::_Exit(1);
        }
        continue;
      }
      while (!pending_.empty()) {
        Pending& p = pending_.front();
        const cudaError_t q = cudaEventQuery(p.event);
        if (q == cudaSuccess) {
          free_events_.push_back(p.event);
          pending_.pop_front();
          continue;
        }
        std::string message;
        if (q != cudaErrorNotReady) {
          message = fmt::format("{} #{}: CUDA error while it ran: {}", p.name, p.sequence, cudaGetErrorString(q));
        } else if (Clock::now() >= p.deadline) {
          message = fmt::format("{} #{} did not complete within {} s (a peer died, hung, or stopped calling the same "
                                "collectives; raise SWIFT_DIST_TIMEOUT if it is only slow)",
                                p.name, p.sequence, timeout_s_);
        }
        if (message.empty()) break;
        lock.unlock();
        std::fprintf(stderr, "swift: rank %d: NCCL %s; aborting the communicator\n", rank_, message.c_str());
        set_error(message);
        lock.lock();
        break;
      }
      if (!error_set_.load() && !aborted_.load()) {
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress) {
          const std::string message =
              fmt::format("asynchronous NCCL error: {} ({})", ncclGetErrorString(state), ncclGetLastError(comm_));
          lock.unlock();
          std::fprintf(stderr, "swift: rank %d: %s; aborting the communicator\n", rank_, message.c_str());
          set_error(message);
          lock.lock();
        }
      }
    }
  }

  int rank_;
  int world_;
  int local_rank_;
  int device_;
  double timeout_s_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;       // the compute stream (ops::cuda::stream)
  cudaStream_t comm_stream_ = nullptr;  // started collectives (comm_stream())
  cudaEvent_t handoff_ = nullptr;       // compute <-> communication ordering
  bool started_pending_ = false;        // the compute stream has not yet waited for every started collective
  void* scratch_ = nullptr;
  uint64_t sequence_ = 0;

  std::mutex mutex_;  // guards pending_, free_events_, error_, stop_
  std::condition_variable wake_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> free_events_;
  std::string error_;
  bool stop_ = false;
  std::atomic<bool> error_set_{false};
  std::atomic<bool> error_seen_{false};
  std::atomic<bool> aborted_{false};
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, Rendezvous& rendezvous, int device_index,
                                                     const CommOptions& options) {
  return std::make_unique<NcclCommunicator>(env, rendezvous, device_index, options);
}

bool nccl_built() { return true; }

}  // namespace swift::dist

#endif  // SWIFT_WITH_NCCL
