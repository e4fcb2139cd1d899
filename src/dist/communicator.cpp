// dist/communicator.cpp — what every communicator shares: the timeout setting, argument checks, the solo
// (single-rank) communicator (its started collectives are finished at once) and run_ranks.
//
// Invariants: argument checks name the collective, the argument and the expected size; they run before any
// data moves (so a bad call on one rank is caught there, and the group is aborted by the caller).
#include "dist/communicator.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "dist/communicator_internal.h"

namespace swift::dist {

double resolve_timeout(const CommOptions& options) {
  if (options.timeout_s > 0) return options.timeout_s;
  const char* env = std::getenv("SWIFT_DIST_TIMEOUT");
  if (env == nullptr || *env == '\0') return 600.0;
  char* end = nullptr;
  const double value = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(value > 0) || value > 1e9) {
    fail("SWIFT_DIST_TIMEOUT='{}' is not a positive number of seconds; set it like SWIFT_DIST_TIMEOUT=600", env);
  }
  return value;
}

namespace detail {

const char* kind_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::AllReduce: return "all_reduce";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::AllGather: return "all_gather";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::AllToAll: return "all_to_all";
    case CollectiveKind::Barrier: return "barrier";
  }
  return "?";
}

namespace {

void check_tensor(const char* op, const char* name, const Tensor& t, Device device) {
  if (!t.defined()) fail("{}: {} is an undefined tensor", op, name);
  if (!(t.device() == device)) {
    fail("{}: {} is on {} but this communicator works on {}; move it there first", op, name, t.device().str(),
         device.str());
  }
}

void check_reducible(const char* op, const char* name, const Tensor& t) {
  // F16 (tensor-parallel partial sums of fp16 activations) only on CUDA tensors: NCCL reduces it; the CPU
  // communicators, whose activations are F32, do not.
  if (t.dtype() != DType::F32 && t.dtype() != DType::BF16 && !(t.dtype() == DType::F16 && t.device().is_cuda())) {
    fail("{}: {} has dtype {} on {}; reductions take F32 or BF16 tensors (F16 on CUDA devices)", op, name,
         dtype_name(t.dtype()), t.device().str());
  }
}

bool overlap(const Tensor& a, const Tensor& b) {
  const char* pa = static_cast<const char*>(a.raw());
  const char* pb = static_cast<const char*>(b.raw());
  return pa < pb + b.nbytes() && pb < pa + a.nbytes();
}

}  // namespace

void check_all_reduce(const Tensor& t, Device device) {
  check_tensor("all_reduce", "the tensor", t, device);
  check_reducible("all_reduce", "the tensor", t);
  t.check_writable("all_reduce");
}

void check_reduce_scatter(const Tensor& input, const Tensor& output, int world, int rank, Device device) {
  const char* op = "reduce_scatter";
  check_tensor(op, "input", input, device);
  check_tensor(op, "output", output, device);
  check_reducible(op, "input", input);
  if (output.dtype() != input.dtype()) {
    fail("{}: output dtype {} differs from input dtype {}", op, dtype_name(output.dtype()), dtype_name(input.dtype()));
  }
  if (input.numel() % world != 0) {
    fail("{}: input has {} elements, not divisible by the world size {}; pad it to a multiple of {} (shards "
         "must be equal)",
         op, input.numel(), world, world);
  }
  if (output.numel() != input.numel() / world) {
    fail("{}: output has {} elements; expected input elements / world size = {} / {} = {}", op, output.numel(),
         input.numel(), world, input.numel() / world);
  }
  output.check_writable(op);
  if (overlap(input, output)) {
    const char* own = static_cast<const char*>(input.raw()) + static_cast<size_t>(rank) * output.nbytes();
    if (output.raw() != own) {
      fail("{}: output overlaps input other than as input's own shard {} (the in-place layout); use separate "
           "buffers",
           op, rank);
    }
  }
}

void check_all_gather(const Tensor& input, const Tensor& output, int world, int rank, Device device) {
  const char* op = "all_gather";
  check_tensor(op, "input", input, device);
  check_tensor(op, "output", output, device);
  if (output.dtype() != input.dtype()) {
    fail("{}: output dtype {} differs from input dtype {}", op, dtype_name(output.dtype()), dtype_name(input.dtype()));
  }
  if (output.numel() != input.numel() * world) {
    fail("{}: output has {} elements; expected world size x input elements = {} x {} = {}", op, output.numel(),
         world, input.numel(), input.numel() * world);
  }
  output.check_writable(op);
  if (overlap(input, output)) {
    const char* own = static_cast<const char*>(output.raw()) + static_cast<size_t>(rank) * input.nbytes();
    if (input.raw() != own) {
      fail("{}: input overlaps output other than as output's own shard {} (the in-place layout); use separate "
           "buffers",
           op, rank);
    }
  }
}

void check_broadcast(const Tensor& t, int root, int world, Device device) {
  check_tensor("broadcast", "the tensor", t, device);
  if (root < 0 || root >= world) fail("broadcast: root {} is not a rank of this group (0..{})", root, world - 1);
  t.check_writable("broadcast");
}

void check_all_to_all(const Tensor& input, const Tensor& output, int world, Device device) {
  const char* op = "all_to_all";
  check_tensor(op, "input", input, device);
  check_tensor(op, "output", output, device);
  if (output.dtype() != input.dtype()) {
    fail("{}: output dtype {} differs from input dtype {}", op, dtype_name(output.dtype()), dtype_name(input.dtype()));
  }
  if (input.numel() % world != 0 || input.nbytes() % static_cast<size_t>(world) != 0) {
    fail("{}: input has {} elements, not divisible by the world size {} (chunks must be equal)", op, input.numel(),
         world);
  }
  if (output.numel() != input.numel()) {
    fail("{}: output has {} elements but input has {}; they must be equal", op, output.numel(), input.numel());
  }
  output.check_writable(op);
  if (overlap(input, output)) fail("{}: input and output overlap; all_to_all needs separate buffers", op);
}

}  // namespace detail

// ---- solo --------------------------------------------------------------------------------------------------
namespace {

// A single rank's collectives are done when they return.
class FinishedHandle final : public CollectiveHandle {
 public:
  void wait() override {}
};

class SoloCommunicator final : public Communicator {
 public:
  explicit SoloCommunicator(Device device) : device_(device) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  Device device() const override { return device_; }
  std::string backend() const override { return "solo"; }
  double timeout_s() const override { return 0.0; }
  void all_reduce(Tensor& t, ReduceOp) override { detail::check_all_reduce(t, device_); }
  void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp) override {
    detail::check_reduce_scatter(input, output, 1, 0, device_);
    if (output.raw() != input.raw()) output.copy_from(input);
  }
  void all_gather(const Tensor& input, Tensor& output) override {
    detail::check_all_gather(input, output, 1, 0, device_);
    if (output.raw() != input.raw()) output.copy_from(input);
  }
  std::unique_ptr<CollectiveHandle> start_all_reduce(Tensor& t, ReduceOp op) override {
    all_reduce(t, op);
    return std::make_unique<FinishedHandle>();
  }
  std::unique_ptr<CollectiveHandle> start_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    reduce_scatter(input, output, op);
    return std::make_unique<FinishedHandle>();
  }
  std::unique_ptr<CollectiveHandle> start_all_gather(const Tensor& input, Tensor& output) override {
    all_gather(input, output);
    return std::make_unique<FinishedHandle>();
  }
  void broadcast(Tensor& t, int root) override { detail::check_broadcast(t, root, 1, device_); }
  void all_to_all(const Tensor& input, Tensor& output) override {
    detail::check_all_to_all(input, output, 1, device_);
    output.copy_from(input);
  }
  void barrier() override {}
  void synchronize() override {}
  void abort(const std::string&) override {}
  std::unique_ptr<Communicator> split(int color) override {
    if (color < 0) fail("split: color {} must be >= 0", color);
    return std::make_unique<SoloCommunicator>(device_);
  }

 private:
  Device device_;
};

}  // namespace

std::unique_ptr<Communicator> make_solo_communicator(Device device) {
  return std::make_unique<SoloCommunicator>(device);
}

void run_ranks(int world_size, const std::function<void(Communicator&)>& fn, const CommOptions& options) {
  std::vector<std::unique_ptr<Communicator>> comms = make_thread_group(world_size, options);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*comms[static_cast<size_t>(r)]);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        comms[static_cast<size_t>(r)]->abort(e.what());
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        comms[static_cast<size_t>(r)]->abort("unknown exception");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < world_size; ++r) {
    if (!errors[static_cast<size_t>(r)]) continue;
    try {
      std::rethrow_exception(errors[static_cast<size_t>(r)]);
    } catch (const std::exception& e) {
      fail("rank {}: {}", r, e.what());
    } catch (...) {
      fail("rank {}: unknown exception", r);
    }
  }
}

}  // namespace swift::dist
