// train/zero.h — ZeRO-1 (`--deepspeed zero1`): AdamW whose state is sharded over the data-parallel ranks.
//
// The trainable parameters are laid end to end in their order (flat index space of N elements); rank r owns
// the contiguous shard [r*S, min(N, (r+1)*S)), S = ceil(N / W), and keeps exp_avg / exp_avg_sq only for it
// (memory: 2N/W floats instead of 2N). step() runs ops::adamw_step on the pieces of the parameters inside the
// shard (views, with each parameter's weight-decay group), then all_gathers the updated shards so every rank
// holds every updated parameter.
//
// Invariants:
//  - The gradients must already be the full reduced gradients on every rank (ZeRO-1 keeps the all-reduce).
//  - AdamW is element-wise, so the result is bit-identical to the unsharded AdamW on the same gradients.
//  - gather_full() / load_full() convert to and from an unsharded AdamW: checkpoints are written (by rank 0)
//    and read in the one-process format, so a run can resume on any number of ranks, with or without ZeRO.
//    Both are collectives (every rank calls them).
#pragma once

#include <cstdint>
#include <vector>

#include "dist/communicator.h"
#include "model/training.h"
#include "ops/ops.h"
#include "train/optimizer.h"

namespace swift::train {

class ShardedAdamW {
 public:
  ShardedAdamW(dist::Communicator& comm, std::vector<model::Parameter>& params, const ops::AdamWConfig& config);
  void step(double lr);
  int64_t steps() const { return steps_; }
  // Fills `full` (an AdamW over the same parameters) with every rank's moments and the step count. Every rank
  // calls it; only ranks that pass non-null get the result.
  void gather_full(AdamW* full);
  // Takes this rank's shard of `full`'s moments and its step count.
  void load_full(AdamW& full);
  int64_t shard_begin() const { return begin_; }
  int64_t shard_end() const { return end_; }

 private:
  struct Piece {  // the part of parameter `param` inside this rank's shard
    size_t param;
    int64_t offset_in_param, offset_in_shard, numel;
  };
  dist::Communicator& comm_;
  std::vector<model::Parameter>& params_;
  ops::AdamWConfig config_;
  std::vector<int64_t> offsets_;  // flat start of each parameter
  std::vector<uint8_t> decay_;
  int64_t total_ = 0, shard_ = 0, begin_ = 0, end_ = 0;
  std::vector<Piece> pieces_;
  Tensor exp_avg_, exp_avg_sq_;  // (shard_) F32
  Tensor gathered_;              // (W * shard_) F32, staging of the all_gather
  int64_t steps_ = 0;
};

}  // namespace swift::train
