// train/data_parallel.h — what the trainer needs from a communicator for data-parallel training: the gradient
// reduction in flat buckets, overlapped with the backward, exact sums of small statistics across ranks, and a
// string from rank 0.
//
// Invariants:
//  - Bucket layout (plan_gradient_buckets): the trainable parameters in reverse backward order (the order the
//    backward finishes their gradients: LM head and final norm, layer L-1, ..., layer 0, embedding), laid end to
//    end and cut into buckets of at most `bucket_bytes` of F32 (a parameter may span buckets). Every rank computes
//    the same layout from the same parameters, so all ranks issue the same collectives in the same order.
//  - GradientReducer, AllReduce: every rank's gradients become the sum over ranks (in the communicator's order:
//    rank 0 + rank 1 + ... on the CPU, the same bits on every rank, whatever the bucket layout or the overlap: the
//    sum is element-wise). ReduceScatter (ZeRO-2): each bucket is padded to a multiple of W and split into W equal
//    pieces; only the elements of this rank's piece of each bucket receive the sum (the same bits as AllReduce
//    gives there); the others keep this rank's local gradient and must not be read.
//  - Overlap (DDP's scheme): expect_last_backward() before the last micro-batch of an accumulation step arms the
//    reducer; the model's backward hook then reports each finished stage (on_backward_stage), and a bucket's
//    collective starts as soon as every parameter in it is final, while the backward goes on. Earlier micro-batches
//    only accumulate locally (no collective: DDP's no_sync). finish() starts what is left (all buckets when nothing
//    was armed), waits, and writes the sums back. A bucket is packed into a staging slot when it starts; two slots
//    alternate (one reducing while the next is packed; more would only queue behind it on the one communication
//    stream or thread), and a slot is written back before it is reused.
//  - Staging memory: two slots of at most bucket_bytes + 4 (W - 1) bytes, on the communicator's device.
//  - Sharded gradient storage (shard_gradient_storage, ZeRO-2 as DeepSpeed does it): the model keeps no gradients;
//    it asks the reducer for each parameter's (zeroed) gradient right before its backward writes it. Every
//    micro-batch's backward then reduce-scatters each bucket once it is final (whether or not armed), packing it into
//    a staging slot, which releases the parameters whose last span it holds; the reduced piece of this rank is added
//    (copied, for the first micro-batch of the step) into the shard accumulator shard_gradients(): this rank's pieces
//    end to end, bucket after bucket, the layout of ShardedAdamW's moments (train/zero.h). Persistent gradient memory
//    per rank: the shard S <= N / W + buckets elements, plus the two slots; during a backward, the gradients of the
//    parameters not yet packed (about one layer and the buckets that wait for it; a tied embedding's from the head to
//    the end). The sums are per micro-batch and then across micro-batches, not across micro-batches and then ranks:
//    with accumulation, fp32 rounding differs from the other modes.
//  - sum_across_ranks() gathers the values of every rank (all_gather of their 8-byte patterns) and adds them in
//    double in rank order on every rank: exact for counts, identical on every rank, no fp32 rounding.
//  - A solo communicator (world size 1) makes every call the identity.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "model/training.h"

namespace swift::train {

// The stage reported by TrainableModel's backward hook after which a parameter's gradient is final, from its name:
// "...layers.<i>...." -> i; the LM head ("lm_head") and the final norm ("model.norm.weight"), whose backward runs
// before any layer's -> kHeadStage; the embedding and any other name -> -1 (the end of the backward: always safe).
constexpr int64_t kHeadStage = std::numeric_limits<int64_t>::max();
int64_t backward_stage(const std::string& parameter_name);

struct GradientBuckets {
  struct Span {  // the elements [offset_in_param, offset_in_param + numel) of a parameter, at offset_in_bucket
    size_t param;
    int64_t offset_in_param, offset_in_bucket, numel;
  };
  struct Bucket {
    std::vector<Span> spans;
    int64_t numel = 0;        // elements of the spans
    int64_t piece = 0;        // ceil(numel / W): rank r's piece (ZeRO) is [r * piece, min((r + 1) * piece, numel))
    int64_t ready_stage = 0;  // the bucket is final once the backward reported this stage (the lowest of its spans)
  };
  std::vector<Bucket> buckets;
  int world_size = 1;
  int64_t padded_numel() const;  // the largest bucket rounded up to a multiple of W: a staging slot's size
};

GradientBuckets plan_gradient_buckets(const std::vector<model::Parameter>& params, int world_size,
                                      int64_t bucket_bytes);

enum class GradientReduction { AllReduce, ReduceScatter };

class GradientReducer {
 public:
  static constexpr int64_t kDefaultBucketBytes = int64_t{25} << 20;  // DDP's bucket_cap_mb default
  GradientReducer(dist::Communicator& comm, std::vector<model::Parameter>& params,
                  int64_t bucket_bytes = kDefaultBucketBytes, GradientReduction how = GradientReduction::AllReduce);
  ~GradientReducer();  // waits for the collectives still in flight
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // The next backward is the last of the step: its hook starts the buckets as they become final.
  void expect_last_backward();
  // TrainableModel's backward hook: `stage` (L-1 .. 0, then -1) has finished. Ignored unless armed.
  void on_backward_stage(int64_t stage);
  // Starts the buckets not started yet, waits for all and writes the results into the gradients; disarms.
  void finish();
  // Everything after the backward, without overlap (finish() with nothing armed).
  void reduce() { finish(); }
  // ZeRO-2's gradient storage (ReduceScatter only; see the head comment): installs the model's gradient provider and
  // backward hook (the reducer must outlive them: its destructor removes both). The model's gradients are those of
  // `params` (model.parameters()). Every rank calls it before its first backward.
  void shard_gradient_storage(model::TrainableModel& model);
  bool shards_gradient_storage() const { return model_ != nullptr; }
  // With sharded storage: after finish(), the step's reduced gradients of this rank's pieces, (S) F32, bucket b's
  // piece at shard_offset(b) (elements past a bucket's end stay zero). Undefined without.
  const Tensor& shard_gradients() const { return shard_; }
  int64_t shard_offset(size_t bucket) const { return shard_offset_[bucket]; }
  // Full-size copies of the parameters' gradients holding this rank's reduced pieces (zeros elsewhere), for
  // inspection (the trainer's on_gradients callback); sharded storage only.
  std::vector<Tensor> shard_gradients_as_full() const;

  const GradientBuckets& layout() const { return layout_; }
  dist::Communicator& comm() { return comm_; }
  std::vector<model::Parameter>& params() { return params_; }
  GradientReduction reduction() const { return how_; }
  // Staging slot 0 or 1 (F32, layout().padded_numel()): free for other collectives between finish() and the next
  // expect_last_backward() (ZeRO's parameter all_gather uses them).
  Tensor staging(int slot) const { return staging_[static_cast<size_t>(slot)]; }
  bool idle() const { return !in_flight_[0].handle && !in_flight_[1].handle; }
  // Buckets started by the backward hook (before finish()) in the last step: how much of the reduction overlapped.
  int64_t started_during_backward() const { return started_during_backward_; }

 private:
  struct InFlight {
    size_t bucket = 0;
    std::unique_ptr<dist::CollectiveHandle> handle;
  };
  void start_bucket(size_t b);
  void complete(InFlight& slot);  // waits for the slot's collective and writes its result back
  void on_sharded_backward_stage(int64_t stage);

  dist::Communicator& comm_;
  std::vector<model::Parameter>& params_;
  GradientReduction how_;
  GradientBuckets layout_;
  std::array<Tensor, 2> staging_;
  std::array<InFlight, 2> in_flight_;
  size_t next_bucket_ = 0;
  bool armed_ = false;
  int64_t started_during_backward_ = 0;
  // Sharded gradient storage (null model_: off).
  model::TrainableModel* model_ = nullptr;
  Tensor shard_;                         // (S) F32: this rank's reduced pieces, accumulated over the step
  std::vector<int64_t> shard_offset_;    // per bucket: where its piece lies in shard_
  std::vector<uint8_t> shard_written_;   // per bucket: its piece received a micro-batch's sum this step
  std::vector<size_t> last_bucket_;      // per parameter: the bucket holding its last span
};

// Element-wise sum of `values` over all ranks, in double (every rank passes the same number of values).
std::vector<double> sum_across_ranks(dist::Communicator& comm, const std::vector<double>& values);

// Rank `root`'s string on every rank.
std::string broadcast_string(dist::Communicator& comm, const std::string& value, int root = 0);

}  // namespace swift::train
