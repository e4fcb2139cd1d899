// core/communicator.h — the interface of collectives between the ranks of a data/tensor/sequence-parallel job.
// Declared at the core layer so that model (per-block sequence / tensor parallel collectives) and train (data
// parallel buckets, ZeRO) can run collectives that the dist layer implements (dist/: CPU threads and shared memory,
// NCCL, launch bootstrap; dist/communicator.h adds the CPU factories and options). Namespace swift::dist: the types
// belong to the dist layer's vocabulary; only the abstract interface lives here.
//
// Invariants:
//  - Every rank calls the same collectives in the same order with matching arguments (same dtype, same numel,
//    same root). The CPU implementations check this and fail naming both ranks; NCCL cannot (it hangs, which
//    the timeout then turns into an error).
//  - Every collective has a timeout (CommOptions::timeout_s; default 600 s or env SWIFT_DIST_TIMEOUT). A rank
//    that dies, leaves or never arrives surfaces as a swift::Error naming the collective, its sequence number
//    and the rank at fault — never a silent hang. After an error the communicator is aborted: every later
//    call (on every rank of the group that can still be told) fails at once.
//  - Reductions are deterministic: the CPU implementations sum in rank order 0, 1, ..., n-1 in fp32
//    (acc = x0; acc += x1; ...; average divides the sum by n once), so every rank gets the same bits, run after
//    run, equal to that serial loop. BF16 is read into fp32, summed, rounded to bf16 once. NCCL reduces in its
//    own (ring/tree) order: identical on every rank and from run to run with the same topology and NCCL
//    settings, equal to the serial sum only within rounding (BF16 rounds at each NCCL hop).
//  - Tensors are contiguous (all swift Tensors are); all_reduce / broadcast work in place; reduce_scatter and
//    all_gather also accept the in-place layouts of NCCL (output a view of input's own shard, input a view of
//    output's own shard); all_to_all needs disjoint buffers. Tensors live on the communicator's device
//    (CPU for the CPU implementations, the rank's CUDA device for NCCL).
//  - Operations on CUDA tensors are ordered with swift::ops::cuda::stream(device) (the compute stream) and return
//    before they finish: the blocking calls as if enqueued on that stream; CPU collectives are complete when they
//    return.
//  - Asynchronous collectives (start_all_reduce / start_reduce_scatter / start_all_gather) return a
//    CollectiveHandle at once. Every collective of a communicator, started or blocking, runs in the order it was
//    issued, on every rank (so all ranks still issue the same sequence). Until wait() the caller must not touch
//    the tensors (the handle keeps their storage alive). CPU: one background thread per communicator runs them in
//    issue order (a blocking call first waits for the started ones to finish, then runs on the caller's thread);
//    same sums, same bits as the blocking calls. NCCL: they run on a separate high-priority communication
//    stream that waits (CUDA event) for the work enqueued on the compute stream before the call; wait() makes the
//    compute stream wait for the collective (no host block), so the compute stream goes on in the meantime.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace swift::dist {

enum class ReduceOp : uint8_t { Sum, Average };

// A collective in flight (Communicator::start_*). Must be waited or destroyed before its communicator.
class CollectiveHandle {
 public:
  virtual ~CollectiveHandle() = default;  // waits when wait() was not called (an error is then dropped: the group
                                          // is aborted and the next collective reports it)
  // CPU: blocks until the collective finished on this rank and rethrows its error (naming the collective, its
  // number and the rank at fault). NCCL: orders the compute stream after the collective and returns at once
  // (its errors surface as those of the blocking calls: at synchronize() or the watchdog). Idempotent.
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int local_rank() const = 0;
  virtual Device device() const = 0;       // where the tensors must live
  virtual std::string backend() const = 0;  // "cpu-threads", "cpu-shm", "solo", "nccl"
  virtual double timeout_s() const = 0;

  // In place: t = sum (or average) of t over all ranks. F32 or BF16 (BF16 reduced in fp32); F16 on CUDA (NCCL).
  virtual void all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  // input: N elements on every rank (N divisible by world_size, else an error); output: N / world_size
  // elements = shard `rank` of the reduction, i.e. elements [rank*N/W, (rank+1)*N/W). F32 or BF16 (F16 on CUDA).
  virtual void reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op = ReduceOp::Sum) = 0;
  // input: M elements (any M); output: W*M elements, rank r's input at [r*M, (r+1)*M). Any dtype.
  virtual void all_gather(const Tensor& input, Tensor& output) = 0;
  // In place: t = root's t. Any dtype.
  virtual void broadcast(Tensor& t, int root) = 0;
  // input and output: N elements (N divisible by world_size), chunk c = elements [c*N/W, (c+1)*N/W):
  // output chunk s of rank r = input chunk r of rank s (the exchange of Ulysses sequence parallelism).
  virtual void all_to_all(const Tensor& input, Tensor& output) = 0;
  // Asynchronous forms of the three above (same arguments, same checks at the call, same results).
  virtual std::unique_ptr<CollectiveHandle> start_all_reduce(Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  virtual std::unique_ptr<CollectiveHandle> start_reduce_scatter(const Tensor& input, Tensor& output,
                                                                 ReduceOp op = ReduceOp::Sum) = 0;
  virtual std::unique_ptr<CollectiveHandle> start_all_gather(const Tensor& input, Tensor& output) = 0;
  virtual void barrier() = 0;
  // Waits until every collective issued so far has completed (CPU: the started ones; NCCL: on the device, both
  // streams); the timeout applies, so a hung NCCL collective becomes an error here at the latest.
  virtual void synchronize() = 0;
  // This rank gives up (after an error outside the collectives, e.g. bad data): the other ranks' pending and
  // later collectives fail at once, naming this rank and `reason`, instead of waiting for the timeout.
  // NCCL: ncclCommAbort (other ranks then fail at their timeout, or sooner through NCCL's own error).
  virtual void abort(const std::string& reason) = 0;
  // Collective: the ranks that pass the same `color` (>= 0) form a new group, ranked in their order here
  // (MPI_Comm_split / ncclCommSplit with key = rank): the sequence- and tensor-parallel groups of a world, and its
  // data-parallel groups. The new communicator has its own staging memory and collective order; both stay usable
  // and this one must outlive it. Every rank calls it with the same options. The default implementation throws
  // naming the backend.
  virtual std::unique_ptr<Communicator> split(int color);
};

}  // namespace swift::dist
