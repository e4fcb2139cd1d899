// dist/shm_communicator.cpp — the CPU communicator: ranks (threads of one process, or processes of one machine)
// exchange data through one shared memory arena.
//
// Invariants:
//  - Arena layout: Header | RankState[world] | slot[world] (slot_bytes each, 64-byte aligned). Only lock-free
//    std::atomic words are shared (address-free, so they work across processes on a MAP_SHARED mapping).
//  - A collective runs in phases (chunks of the slot). In each phase rank r: (1) waits until every rank's
//    `done` counter reached the previous phase (its slot is free: everyone finished reading it); (2) writes
//    its data (and, in a collective's first phase, a descriptor of the call) into its own slot; (3) publishes
//    `arrive` = phase (release) and waits for every rank's `arrive` (acquire); (4) reads the slots it needs and
//    writes its own output; (5) publishes `done` = phase. Slots are written only by their owner, between (1)
//    and (3); read by everyone between (3) and the next (1).
//  - Reductions read the slots in rank order 0..n-1 and accumulate in fp32: every rank computes the same bits,
//    equal to the serial loop (acc = x0; acc += x1 ...; average: acc / n); BF16 rounds once at the end.
//  - Every wait polls: the group's abort word (any rank that fails sets it with its message, so the others
//    fail at once), the peer's `left` word (its communicator was destroyed), the peer's pid (processes), and the
//    deadline (the timeout, from the start of the wait). Errors name the collective, its number, the rank.
//  - The descriptor check of the first phase turns mismatched calls (other collective, dtype, size, root) into
//    an error on every rank instead of corrupted data.
//  - Started collectives (start_*) run on one background thread per communicator, started on first use, in issue
//    order; a blocking call first waits until that thread is idle with nothing queued, then runs on the caller's
//    thread. So exactly one thread runs this rank's protocol at a time (phase and sequence counters stay private),
//    and the order of collectives is the issue order. Arguments are checked at the call (a bad call aborts the
//    group there); a failure on the background thread aborts the group and is rethrown by the handle's wait().
//    Destroying the communicator fails the collectives still queued and makes a running one stop waiting.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "dist/communicator_internal.h"
#include "dist/init.h"

namespace swift::dist {
namespace {

using detail::CollectiveKind;
using detail::kind_name;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x73776966742d6431ull;  // "swift-d1"
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free);

struct Descriptor {
  int32_t kind = 0;
  int32_t dtype = 0;
  int32_t root = 0;
  int32_t pad = 0;
  int64_t numel = 0;
  uint64_t sequence = 0;
};

struct alignas(64) RankState {
  std::atomic<uint64_t> arrive{0};
  std::atomic<uint64_t> done{0};
  std::atomic<int32_t> left{0};
  std::atomic<int32_t> pid{0};
  Descriptor desc;
};

struct alignas(64) Header {
  uint64_t magic = 0;
  int32_t world_size = 0;
  int32_t pad = 0;
  int64_t slot_bytes = 0;
  std::atomic<int32_t> aborted{0};  // 0: fine; 1: a rank is writing its message; 2: message readable
  int32_t abort_rank = -1;
  char abort_message[1024] = {};
};

size_t states_offset() { return sizeof(Header); }
size_t slots_offset(int world) { return sizeof(Header) + sizeof(RankState) * static_cast<size_t>(world); }
size_t arena_bytes(int world, int64_t slot_bytes) {
  return slots_offset(world) + static_cast<size_t>(world) * static_cast<size_t>(slot_bytes);
}

// The shared memory (heap for threads, a MAP_SHARED mapping for processes) and how to release it.
struct Arena {
  void* base = nullptr;
  size_t bytes = 0;
  bool mapped = false;
  ~Arena() {
    if (base == nullptr) return;
    if (mapped) {
      munmap(base, bytes);
    } else {
      std::free(base);
    }
  }
  Header* header() const { return static_cast<Header*>(base); }
  RankState* state(int r) const {
    return reinterpret_cast<RankState*>(static_cast<char*>(base) + states_offset()) + r;
  }
  char* slot(int r) const {
    return static_cast<char*>(base) + slots_offset(header()->world_size) +
           static_cast<size_t>(r) * static_cast<size_t>(header()->slot_bytes);
  }
};

void init_arena(void* base, int world, int64_t slot_bytes) {
  Header* h = new (base) Header();
  h->magic = 0;
  h->world_size = world;
  h->slot_bytes = slot_bytes;
  auto* states = reinterpret_cast<RankState*>(static_cast<char*>(base) + states_offset());
  for (int r = 0; r < world; ++r) new (states + r) RankState();
  h->magic = kMagic;
}

int64_t checked_slot_bytes(int64_t slot_bytes, int world) {
  const int64_t min_bytes = 64 * static_cast<int64_t>(world);
  if (slot_bytes < min_bytes) {
    fail("CommOptions::slot_bytes = {} is too small for {} ranks; use at least {} (the default is 4 MiB)", slot_bytes,
         world, min_bytes);
  }
  return slot_bytes / 64 * 64;
}

// True when process `pid` is gone (or a zombie waiting to be reaped).
bool process_dead(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buf[512];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');
  return paren != nullptr && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

class Backoff {
 public:
  void pause() {
    ++count_;
    if (count_ < 64) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else if (count_ < 512) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
      sleep_us_ = std::min(sleep_us_ * 2, 500);
    }
  }

 private:
  int count_ = 0;
  int sleep_us_ = 20;
};

std::string describe(const Descriptor& d) {
  const auto kind = static_cast<CollectiveKind>(d.kind);
  if (kind == CollectiveKind::Barrier) return "barrier";
  std::string s = fmt::format("{}({}, {} elements", kind_name(kind), dtype_name(static_cast<DType>(d.dtype)), d.numel);
  if (kind == CollectiveKind::Broadcast) s += fmt::format(", root {}", d.root);
  return s + ")";
}

// A sub-group's staging memory (ShmCommunicator::split): a heap arena for threads, a POSIX shared-memory arena for
// processes. create_* run on the group's first rank; the others attach through what it published.
std::shared_ptr<Arena> create_heap_arena(int world, int64_t slot) {
  auto arena = std::make_shared<Arena>();
  arena->bytes = arena_bytes(world, slot);
  arena->base = std::aligned_alloc(64, (arena->bytes + 63) / 64 * 64);
  if (arena->base == nullptr) fail("split: cannot allocate {} bytes of staging memory", arena->bytes);
  init_arena(arena->base, world, slot);
  return arena;
}

// Maps shared memory `name` of `bytes` (creating and initialising it when `create`); the caller unlinks it.
std::shared_ptr<Arena> map_shared_arena(const std::string& name, int world, int64_t slot, bool create) {
  const size_t bytes = arena_bytes(world, slot);
  const int fd = create ? shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600) : shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) fail("split: shm_open('{}') failed: {}", name, std::strerror(errno));
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    fail("split: cannot size shared memory '{}' to {} bytes: {} (is /dev/shm full or too small?)", name, bytes,
         std::strerror(err));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) fail("split: mmap of {} bytes of '{}' failed: {}", bytes, name, std::strerror(err));
  auto arena = std::make_shared<Arena>();
  arena->base = p;
  arena->bytes = bytes;
  arena->mapped = true;
  if (create) {
    init_arena(p, world, slot);
  } else if (arena->header()->magic != kMagic || arena->header()->world_size != world ||
             arena->header()->slot_bytes != slot) {
    fail("split: shared memory '{}' does not hold a group of {} ranks with {}-byte slots", name, world, slot);
  }
  return arena;
}

// One started collective: its work (run by the communicator's background thread) and its outcome.
struct AsyncJob {
  std::function<void()> work;
  std::mutex mutex;
  std::condition_variable finished_cv;
  bool finished = false;
  std::exception_ptr error;

  void finish(std::exception_ptr e) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      error = std::move(e);
      finished = true;
    }
    finished_cv.notify_all();
  }
  void wait_finished() {
    std::unique_lock<std::mutex> lock(mutex);
    finished_cv.wait(lock, [&] { return finished; });
  }
};

class CpuHandle final : public CollectiveHandle {
 public:
  explicit CpuHandle(std::shared_ptr<AsyncJob> job) : job_(std::move(job)) {}
  ~CpuHandle() override { job_->wait_finished(); }
  void wait() override {
    job_->wait_finished();
    if (job_->error) std::rethrow_exception(job_->error);
  }

 private:
  std::shared_ptr<AsyncJob> job_;
};

class ShmCommunicator final : public Communicator {
 public:
  ShmCommunicator(std::shared_ptr<Arena> arena, int rank, int local_rank, bool processes, double timeout_s)
      : arena_(std::move(arena)),
        rank_(rank),
        local_rank_(local_rank),
        world_(arena_->header()->world_size),
        processes_(processes),
        timeout_s_(timeout_s) {}

  ~ShmCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      closing_.store(true);
    }
    queue_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
    arena_->state(rank_)->left.store(1, std::memory_order_release);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  Device device() const override { return Device::cpu(); }
  std::string backend() const override { return processes_ ? "cpu-shm" : "cpu-threads"; }
  double timeout_s() const override { return timeout_s_; }

  void all_reduce(Tensor& t, ReduceOp op) override {
    drain();
    run_all_reduce(t, op);
  }

  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    drain();
    run_reduce_scatter(input, output, op);
  }

  void all_gather(const Tensor& input, Tensor& output) override {
    drain();
    run_all_gather(input, output);
  }

  std::unique_ptr<CollectiveHandle> start_all_reduce(Tensor& t, ReduceOp op) override {
    checked_at_issue([&] { detail::check_all_reduce(t, Device::cpu()); });
    return start([this, t, op]() mutable { run_all_reduce(t, op); });
  }

  std::unique_ptr<CollectiveHandle> start_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    checked_at_issue([&] { detail::check_reduce_scatter(input, output, world_, rank_, Device::cpu()); });
    return start([this, input, output, op]() mutable { run_reduce_scatter(input, output, op); });
  }

  std::unique_ptr<CollectiveHandle> start_all_gather(const Tensor& input, Tensor& output) override {
    checked_at_issue([&] { detail::check_all_gather(input, output, world_, rank_, Device::cpu()); });
    return start([this, input, output]() mutable { run_all_gather(input, output); });
  }

  void broadcast(Tensor& t, int root) override {
    drain();
    run_broadcast(t, root);
  }

  void all_to_all(const Tensor& input, Tensor& output) override {
    drain();
    run_all_to_all(input, output);
  }

  void barrier() override {
    drain();
    guarded(CollectiveKind::Barrier, DType::F32, 0, 0, [&] {
      begin_phase(true);
      publish_and_wait();
      finish_phase();
    });
  }

  void synchronize() override { drain(); }

  void abort(const std::string& reason) override { set_abort(reason); }

 private:
  // The collectives' protocol (every blocking call and the background thread end here).
  void run_all_reduce(Tensor& t, ReduceOp op) {
    guarded(CollectiveKind::AllReduce, t.defined() ? t.dtype() : DType::F32, t.defined() ? t.numel() : 0, 0, [&] {
      detail::check_all_reduce(t, Device::cpu());
      const size_t elem = dtype_bytes(t.dtype(), 1);
      const int64_t chunk = slot_bytes() / static_cast<int64_t>(elem);
      const int64_t n = t.numel();
      for (int64_t o = 0; o == 0 || o < n; o += chunk) {
        const int64_t len = std::min(chunk, n - o);
        begin_phase(o == 0);
        std::memcpy(arena_->slot(rank_), static_cast<char*>(t.raw()) + o * elem, static_cast<size_t>(len) * elem);
        publish_and_wait();
        reduce_slots(t.dtype(), 0, len, static_cast<char*>(t.raw()) + o * elem, op);
        finish_phase();
      }
    });
  }

  void run_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) {
    guarded(CollectiveKind::ReduceScatter, input.defined() ? input.dtype() : DType::F32,
            input.defined() ? input.numel() : 0, 0, [&] {
              detail::check_reduce_scatter(input, output, world_, rank_, Device::cpu());
              const size_t elem = dtype_bytes(input.dtype(), 1);
              const int64_t shard = input.numel() / world_;
              const int64_t chunk = slot_bytes() / static_cast<int64_t>(elem) / world_;
              const char* in = static_cast<const char*>(input.raw());
              char* out = static_cast<char*>(output.raw());
              for (int64_t o = 0; o == 0 || o < shard; o += chunk) {
                const int64_t len = std::min(chunk, shard - o);
                begin_phase(o == 0);
                for (int d = 0; d < world_; ++d) {
                  std::memcpy(arena_->slot(rank_) + static_cast<size_t>(d * chunk) * elem,
                              in + static_cast<size_t>(d * shard + o) * elem, static_cast<size_t>(len) * elem);
                }
                publish_and_wait();
                reduce_slots(input.dtype(), rank_ * chunk, len, out + static_cast<size_t>(o) * elem, op);
                finish_phase();
              }
            });
  }

  void run_all_gather(const Tensor& input, Tensor& output) {
    guarded(CollectiveKind::AllGather, input.defined() ? input.dtype() : DType::F32,
            input.defined() ? input.numel() : 0, 0, [&] {
              detail::check_all_gather(input, output, world_, rank_, Device::cpu());
              const int64_t bytes = static_cast<int64_t>(input.nbytes());
              const int64_t chunk = slot_bytes();
              const char* in = static_cast<const char*>(input.raw());
              char* out = static_cast<char*>(output.raw());
              for (int64_t o = 0; o == 0 || o < bytes; o += chunk) {
                const int64_t len = std::min(chunk, bytes - o);
                begin_phase(o == 0);
                std::memcpy(arena_->slot(rank_), in + o, static_cast<size_t>(len));
                publish_and_wait();
                for (int s = 0; s < world_; ++s) {
                  char* dst = out + static_cast<size_t>(s) * static_cast<size_t>(bytes) + o;
                  if (s == rank_ && dst == in + o) continue;  // in place
                  std::memcpy(dst, arena_->slot(s), static_cast<size_t>(len));
                }
                finish_phase();
              }
            });
  }

  void run_broadcast(Tensor& t, int root) {
    guarded(CollectiveKind::Broadcast, t.defined() ? t.dtype() : DType::F32, t.defined() ? t.numel() : 0, root, [&] {
      detail::check_broadcast(t, root, world_, Device::cpu());
      const int64_t bytes = static_cast<int64_t>(t.nbytes());
      const int64_t chunk = slot_bytes();
      char* data = static_cast<char*>(t.raw());
      for (int64_t o = 0; o == 0 || o < bytes; o += chunk) {
        const int64_t len = std::min(chunk, bytes - o);
        begin_phase(o == 0);
        if (rank_ == root) std::memcpy(arena_->slot(rank_), data + o, static_cast<size_t>(len));
        publish_and_wait();
        if (rank_ != root) std::memcpy(data + o, arena_->slot(root), static_cast<size_t>(len));
        finish_phase();
      }
    });
  }

  void run_all_to_all(const Tensor& input, Tensor& output) {
    guarded(CollectiveKind::AllToAll, input.defined() ? input.dtype() : DType::F32,
            input.defined() ? input.numel() : 0, 0, [&] {
              detail::check_all_to_all(input, output, world_, Device::cpu());
              const int64_t piece = static_cast<int64_t>(input.nbytes()) / world_;  // bytes per destination
              const int64_t chunk = slot_bytes() / world_ / 64 * 64;
              const char* in = static_cast<const char*>(input.raw());
              char* out = static_cast<char*>(output.raw());
              for (int64_t o = 0; o == 0 || o < piece; o += chunk) {
                const int64_t len = std::min(chunk, piece - o);
                begin_phase(o == 0);
                for (int d = 0; d < world_; ++d) {
                  std::memcpy(arena_->slot(rank_) + d * chunk, in + d * piece + o, static_cast<size_t>(len));
                }
                publish_and_wait();
                for (int s = 0; s < world_; ++s) {
                  std::memcpy(out + s * piece + o, arena_->slot(s) + rank_ * chunk, static_cast<size_t>(len));
                }
                finish_phase();
              }
            });
  }


 public:
  // Two all_gathers over this group: every rank's color, then the new arena's address (threads) or shared-memory
  // name (processes) from each group's first rank; a third exchange reports whether every rank attached, so a
  // failure anywhere fails every rank at once instead of a later timeout.
  std::unique_ptr<Communicator> split(int color) override {
    Tensor mine = Tensor::empty({1}, DType::I64, Device::cpu(), MemoryCategory::Other);
    *mine.data<int64_t>() = color;
    Tensor colors = Tensor::empty({world_}, DType::I64, Device::cpu(), MemoryCategory::Other);
    all_gather(mine, colors);
    std::vector<int> members;
    for (int r = 0; r < world_; ++r) {  // checked after the exchange, so every rank fails alike
      if (colors.data<int64_t>()[r] < 0) fail("split: rank {} passed color {}; colors must be >= 0", r, colors.data<int64_t>()[r]);
      if (colors.data<int64_t>()[r] == color) members.push_back(r);
    }
    const int leader = members[0];
    const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
    const int new_world = static_cast<int>(members.size());
    const int64_t slot = slot_bytes();
    // Blob: byte 0 = 1 when the leader made the arena (then the address or name follows), 0 with its error.
    constexpr int64_t kBlob = 512;
    Tensor blob = Tensor::zeros({kBlob}, DType::U8, Device::cpu(), MemoryCategory::Other);
    char* text = static_cast<char*>(blob.raw()) + 1;
    std::shared_ptr<Arena> arena;
    std::string name, error;
    std::shared_ptr<Arena>* holder = nullptr;  // threads: keeps the arena alive until every member copied it
    if (rank_ == leader) {
      try {
        if (processes_) {
          std::random_device rd;
          name = fmt::format("/swift-dist-{}-{:08x}-c{}", getpid(), rd(), color);
          arena = map_shared_arena(name, new_world, slot, true);
          std::snprintf(text, kBlob - 1, "%s", name.c_str());
        } else {
          arena = create_heap_arena(new_world, slot);
          holder = new std::shared_ptr<Arena>(arena);
          std::memcpy(text, &holder, sizeof(holder));
        }
        static_cast<char*>(blob.raw())[0] = 1;
      } catch (const Error& e) {
        error = e.what();
        std::snprintf(text, kBlob - 1, "%s", error.c_str());
      }
    }
    Tensor blobs = Tensor::empty({kBlob * world_}, DType::U8, Device::cpu(), MemoryCategory::Other);
    all_gather(blob, blobs);
    const char* from_leader = static_cast<const char*>(blobs.raw()) + kBlob * leader;
    if (rank_ != leader) {
      if (from_leader[0] != 1) {
        error = fmt::format("rank {} could not make the group's staging memory: {}", leader,
                            std::string(from_leader + 1, strnlen(from_leader + 1, kBlob - 1)));
      } else {
        try {
          if (processes_) {
            name.assign(from_leader + 1, strnlen(from_leader + 1, kBlob - 1));
            arena = map_shared_arena(name, new_world, slot, false);
          } else {
            std::shared_ptr<Arena>* shared = nullptr;
            std::memcpy(&shared, from_leader + 1, sizeof(shared));
            arena = *shared;
          }
        } catch (const Error& e) {
          error = e.what();
        }
      }
    }
    if (arena && processes_) arena->state(new_rank)->pid.store(static_cast<int32_t>(getpid()), std::memory_order_release);
    Tensor ok = Tensor::empty({1}, DType::I64, Device::cpu(), MemoryCategory::Other);
    *ok.data<int64_t>() = error.empty() ? 1 : 0;
    Tensor oks = Tensor::empty({world_}, DType::I64, Device::cpu(), MemoryCategory::Other);
    all_gather(ok, oks);  // every member attached (or failed) before the leader lets go of the name / holder
    if (rank_ == leader) {
      if (processes_ && arena) shm_unlink(name.c_str());
      delete holder;
    }
    if (!error.empty()) fail("split(color {}) on rank {}: {}", color, rank_, error);
    for (int r = 0; r < world_; ++r) {
      if (oks.data<int64_t>()[r] == 0) fail("split(color {}): rank {} could not join its new group (see its error)", color, r);
    }
    return std::make_unique<ShmCommunicator>(std::move(arena), new_rank, new_rank, processes_, timeout_s_);
  }

 private:
  // A bad argument aborts the group at the call, as in the blocking collectives.
  template <typename Check>
  void checked_at_issue(Check&& check) {
    try {
      check();
    } catch (const Error& e) {
      set_abort(e.what());
      throw;
    }
  }

  // Queues `work` for the background thread (started on first use).
  std::unique_ptr<CollectiveHandle> start(std::function<void()> work) {
    auto job = std::make_shared<AsyncJob>();
    job->work = std::move(work);
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      if (!worker_.joinable()) worker_ = std::thread([this] { work_loop(); });
      queue_.push_back(job);
    }
    queue_cv_.notify_all();
    return std::make_unique<CpuHandle>(job);
  }

  // The background thread: runs the queued collectives in order; on close, fails those never started.
  void work_loop() {
    std::unique_lock<std::mutex> lock(queue_mutex_);
    while (true) {
      queue_cv_.wait(lock, [&] { return closing_.load() || !queue_.empty(); });
      if (queue_.empty()) return;
      std::shared_ptr<AsyncJob> job = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        if (closing_.load()) {
          fail("rank {}: the communicator was destroyed before this started collective ran (wait on every handle "
               "before destroying its communicator)", rank_);
        }
        job->work();
      } catch (const std::exception& e) {
        set_abort(e.what());
        error = std::current_exception();
      } catch (...) {
        set_abort("unknown exception in a started collective");
        error = std::current_exception();
      }
      job->finish(error);
      lock.lock();
      busy_ = false;
      idle_cv_.notify_all();
    }
  }

  // Waits until every started collective has run (the blocking calls keep the issue order this way).
  void drain() {
    std::unique_lock<std::mutex> lock(queue_mutex_);
    idle_cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  }

  int64_t slot_bytes() const { return arena_->header()->slot_bytes; }

  // Runs one collective: numbers it, records its descriptor, turns any failure into an aborted group.
  template <typename Fn>
  void guarded(CollectiveKind kind, DType dtype, int64_t numel, int root, Fn&& body) {
    ++sequence_;
    current_ = Descriptor{static_cast<int32_t>(kind), static_cast<int32_t>(dtype), root, 0, numel, sequence_};
    try {
      check_aborted();
      body();
    } catch (const Error& e) {
      set_abort(e.what());
      throw;
    }
  }

  std::string what() const { return fmt::format("{} #{}", describe(current_), current_.sequence); }

  // (1): every rank finished reading the previous phase; then, on a collective's first phase, the descriptor.
  void begin_phase(bool first) {
    wait_all(&RankState::done, phase_, "finish reading the previous collective's data");
    ++phase_;
    first_phase_ = first;
    if (first) arena_->state(rank_)->desc = current_;
  }

  // (3): publish this rank's slot, wait for everyone's, check the descriptors on the first phase.
  void publish_and_wait() {
    arena_->state(rank_)->arrive.store(phase_, std::memory_order_release);
    wait_all(&RankState::arrive, phase_, "arrive");
    if (!first_phase_) return;
    for (int r = 0; r < world_; ++r) {
      const Descriptor& d = arena_->state(r)->desc;
      if (d.kind != current_.kind || d.dtype != current_.dtype || d.numel != current_.numel ||
          d.root != current_.root || d.sequence != current_.sequence) {
        fail("collective mismatch: rank {} called {} as collective #{}, but rank {} called {} as collective #{}; every "
             "rank must call the same collectives in the same order with the same sizes",
             rank_, describe(current_), current_.sequence, r, describe(d), d.sequence);
      }
    }
  }

  void finish_phase() { arena_->state(rank_)->done.store(phase_, std::memory_order_release); }

  // out[i] = sum over ranks r (in order) of slot_r[offset + i], in fp32; `offset` and `len` in elements.
  void reduce_slots(DType dtype, int64_t offset, int64_t len, char* out, ReduceOp op) {
    if (dtype == DType::F32) {
      float* o = reinterpret_cast<float*>(out);
      const float* s0 = reinterpret_cast<const float*>(arena_->slot(0)) + offset;
      for (int64_t i = 0; i < len; ++i) o[i] = s0[i];
      for (int r = 1; r < world_; ++r) {
        const float* s = reinterpret_cast<const float*>(arena_->slot(r)) + offset;
        for (int64_t i = 0; i < len; ++i) o[i] += s[i];
      }
      if (op == ReduceOp::Average) {
        const float n = static_cast<float>(world_);
        for (int64_t i = 0; i < len; ++i) o[i] /= n;
      }
      return;
    }
    acc_.resize(static_cast<size_t>(len));
    const uint16_t* s0 = reinterpret_cast<const uint16_t*>(arena_->slot(0)) + offset;
    for (int64_t i = 0; i < len; ++i) acc_[static_cast<size_t>(i)] = bf16_to_f32(s0[i]);
    for (int r = 1; r < world_; ++r) {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(arena_->slot(r)) + offset;
      for (int64_t i = 0; i < len; ++i) acc_[static_cast<size_t>(i)] += bf16_to_f32(s[i]);
    }
    const float n = static_cast<float>(world_);
    uint16_t* o = reinterpret_cast<uint16_t*>(out);
    for (int64_t i = 0; i < len; ++i) {
      const float v = op == ReduceOp::Average ? acc_[static_cast<size_t>(i)] / n : acc_[static_cast<size_t>(i)];
      o[i] = f32_to_bf16(v);
    }
  }

  void check_aborted() {
    Header* h = arena_->header();
    if (h->aborted.load(std::memory_order_acquire) == 0) return;
    while (h->aborted.load(std::memory_order_acquire) == 1) sched_yield();
    if (h->abort_rank == rank_) fail("{}: this communicator was aborted earlier: {}", what(), h->abort_message);
    fail("{}: the group was aborted by rank {}: {}", what(), h->abort_rank, h->abort_message);
  }

  void set_abort(const std::string& reason) {
    Header* h = arena_->header();
    int32_t expected = 0;
    if (!h->aborted.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) return;  // first one wins
    h->abort_rank = rank_;
    std::snprintf(h->abort_message, sizeof(h->abort_message), "%s", reason.c_str());
    h->aborted.store(2, std::memory_order_release);
  }

  void wait_all(std::atomic<uint64_t> RankState::*counter, uint64_t target, const char* waiting_for) {
    if (target == 0) return;
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    auto next_pid_check = start + std::chrono::milliseconds(100);
    for (int r = 0; r < world_; ++r) {
      if (r == rank_) continue;
      RankState* s = arena_->state(r);
      Backoff backoff;
      while ((s->*counter).load(std::memory_order_acquire) < target) {
        check_aborted();
        if (closing_.load(std::memory_order_relaxed)) {
          fail("{}: rank {}'s communicator was destroyed while this collective waited for rank {} to {}", what(),
               rank_, r, waiting_for);
        }
        if (s->left.load(std::memory_order_acquire) != 0 && (s->*counter).load(std::memory_order_acquire) < target) {
          fail("{}: rank {} left the group (its communicator was destroyed) before it could {}", what(), r,
               waiting_for);
        }
        const auto now = Clock::now();
        if (processes_ && now >= next_pid_check) {
          next_pid_check = now + std::chrono::milliseconds(100);
          const int pid = s->pid.load(std::memory_order_relaxed);
          if (process_dead(pid)) fail("{}: rank {} (pid {}) died before it could {}; see its log", what(), r, pid, waiting_for);
        }
        if (now >= deadline) {
          std::string missing;
          for (int q = 0; q < world_; ++q) {
            if (q != rank_ && (arena_->state(q)->*counter).load(std::memory_order_acquire) < target) {
              missing += fmt::format("{}{}", missing.empty() ? "" : ", ", q);
            }
          }
          fail("{}: timed out after {} s waiting for rank(s) {} to {} (stuck, dead, or not calling the same "
               "collectives; raise SWIFT_DIST_TIMEOUT if the work between collectives is that slow)",
               what(), timeout_s_, missing, waiting_for);
        }
        backoff.pause();
      }
    }
  }

  std::shared_ptr<Arena> arena_;
  int rank_;
  int local_rank_;
  int world_;
  bool processes_;
  double timeout_s_;
  uint64_t phase_ = 0;
  uint64_t sequence_ = 0;
  bool first_phase_ = false;
  Descriptor current_;
  std::vector<float> acc_;
  // The background thread of the started collectives.
  std::mutex queue_mutex_;  // guards queue_, busy_ and the start of worker_
  std::condition_variable queue_cv_, idle_cv_;
  std::deque<std::shared_ptr<AsyncJob>> queue_;
  bool busy_ = false;
  std::atomic<bool> closing_{false};
  std::thread worker_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_thread_group(int world_size, const CommOptions& options) {
  if (world_size < 1) fail("make_thread_group: world_size = {}; it must be at least 1", world_size);
  const int64_t slot = checked_slot_bytes(options.slot_bytes, world_size);
  const double timeout = resolve_timeout(options);
  auto arena = std::make_shared<Arena>();
  arena->bytes = arena_bytes(world_size, slot);
  arena->base = std::aligned_alloc(64, (arena->bytes + 63) / 64 * 64);
  if (arena->base == nullptr) fail("make_thread_group: cannot allocate {} bytes of staging memory", arena->bytes);
  init_arena(arena->base, world_size, slot);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < world_size; ++r) {
    comms.push_back(std::make_unique<ShmCommunicator>(arena, r, r, false, timeout));
  }
  return comms;
}

std::unique_ptr<Communicator> make_shm_communicator(const LaunchEnv& env, Rendezvous& rendezvous,
                                                    const CommOptions& options) {
  if (env.world_size != env.local_world_size || env.nnodes != 1) {
    fail("the CPU communicator needs every rank on one machine, but this launch has {} ranks on {} nodes ({} per "
         "node); use CUDA devices (NCCL) across nodes",
         env.world_size, env.nnodes, env.local_world_size);
  }
  const int world = env.world_size;
  const double timeout = resolve_timeout(options);
  int64_t slot = checked_slot_bytes(options.slot_bytes, world);
  std::string name;
  if (env.rank == 0) {
    std::random_device rd;
    name = fmt::format("/swift-dist-{}-{:08x}", getpid(), rd());
  }
  name = rendezvous.broadcast(name, 0, "shared memory name");
  const size_t bytes = arena_bytes(world, slot);
  int fd = -1;
  if (env.rank == 0) {
    fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) fail("CPU communicator: shm_open('{}') failed: {}", name, std::strerror(errno));
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int err = errno;
      close(fd);
      shm_unlink(name.c_str());
      fail("CPU communicator: cannot size shared memory '{}' to {} bytes: {} (is /dev/shm full or too small?)", name,
           bytes, std::strerror(err));
    }
  }
  auto arena = std::make_shared<Arena>();
  auto map = [&] {
    if (env.rank != 0) {
      fd = shm_open(name.c_str(), O_RDWR, 0600);
      if (fd < 0) fail("CPU communicator: rank {} cannot open shared memory '{}': {}", env.rank, name, std::strerror(errno));
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int err = errno;
    close(fd);
    if (p == MAP_FAILED) fail("CPU communicator: mmap of {} bytes of '{}' failed: {}", bytes, name, std::strerror(err));
    arena->base = p;
    arena->bytes = bytes;
    arena->mapped = true;
  };
  if (env.rank == 0) {
    try {
      map();
    } catch (...) {
      shm_unlink(name.c_str());
      throw;
    }
    init_arena(arena->base, world, slot);
  }
  try {
    rendezvous.barrier("shared memory created");
    if (env.rank != 0) {
      map();
      Header* h = arena->header();
      if (h->magic != kMagic || h->world_size != world || h->slot_bytes != slot) {
        fail("CPU communicator: shared memory '{}' does not match this rank's settings (world {} vs {}, slot bytes {} "
             "vs {}); every rank must use the same CommOptions",
             name, h->world_size, world, h->slot_bytes, slot);
      }
    }
    arena->state(env.rank)->pid.store(static_cast<int32_t>(getpid()), std::memory_order_release);
    rendezvous.barrier("shared memory mapped");
  } catch (...) {
    if (env.rank == 0) shm_unlink(name.c_str());
    throw;
  }
  if (env.rank == 0) shm_unlink(name.c_str());  // every rank holds a mapping; nothing is left behind on a crash
  return std::make_unique<ShmCommunicator>(std::move(arena), env.rank, env.local_rank, true, timeout);
}

}  // namespace swift::dist
