// train/zero.h — ZeRO-1 and ZeRO-2 (`--deepspeed zero1|zero2`): AdamW whose state is sharded over the
// data-parallel ranks, laid out on the gradient reducer's buckets (train/data_parallel.h).
//
// Sharding: bucket b of the reducer (numel n_b, in reverse backward order) is split into W pieces of
// p_b = ceil(n_b / W) elements; rank r owns piece r of every bucket, [r p_b, min((r + 1) p_b, n_b)). Its AdamW
// state (exp_avg, exp_avg_sq) holds its pieces end to end: S = sum_b p_b <= N / W + (buckets) elements each. A
// piece is the unit of every sharded collective: ZeRO-2 reduce-scatters a bucket straight into the owners' pieces,
// and after the update the parameters are all-gathered bucket by bucket through the reducer's two staging slots.
//
// Memory per rank (N trainable F32 elements, W ranks, B = bucket elements):
//   plain data parallel: gradients N (reduced in place) + AdamW 2N + staging 2B.
//   ZeRO-1: gradients N (all-reduced, every element) + AdamW 2S + staging 2B.
//   ZeRO-2 (the trainer's, with the reducer's sharded gradient storage): gradients S (the shard accumulator) + the
//     gradients of the parameters whose buckets are not yet packed during a backward (about a layer) + AdamW 2S +
//     staging 2B, as DeepSpeed's ZeRO-2: the model keeps no full gradient; each micro-batch's backward
//     reduce-scatters every bucket and adds this rank's piece into the accumulator. Traffic: W-1/W of N per
//     micro-batch for the reduce-scatter, plus the parameters' all_gather per step.
//   ZeRO-2 on a reducer without sharded storage (tests): gradients N, the reduced sums written over this rank's own
//     pieces of them; the other elements keep local sums and are never read.
//
// Invariants:
//  - AdamW is element-wise, so the updated parameters are bit-identical to the unsharded AdamW on the same
//    gradients; every rank ends the step with every parameter (the all_gather copies bits).
//  - ZeRO-2's gradient norm (clip_shard_gradients) is the root of the sum over ranks of each rank's squared norm of
//    its pieces (each computed by ops::grad_norm, fp64 inside, rounded to fp32, squared in double, summed in rank
//    order in double): identical on every rank; equal to the one-process norm within fp32 rounding (the summation
//    is split differently). Clipping multiplies only this rank's pieces by torch's coefficient. With tensor
//    parallelism (one ShardedAdamW per TP rank, over the ranks holding the same shards) the sum goes on over the TP
//    group, counting the whole tensors' squares of TP rank 0 only (they are the same on every TP rank, but the TP
//    ranks' bucket plans differ with uneven vocabulary shards, so their pieces are summed in different splits).
//  - gather_full() / load_full() convert to and from an unsharded AdamW: checkpoints are written (by rank 0) and
//    read in the one-process format, so a run resumes on any number of ranks, with or without ZeRO. Both are
//    collectives (every rank calls them).
//  - Uses the reducer's staging slots: call step() / gather_full() only while the reducer is idle (after finish()).
#pragma once

#include <cstdint>
#include <vector>

#include "core/communicator.h"
#include "model/training.h"
#include "ops/ops.h"
#include "train/data_parallel.h"
#include "train/optimizer.h"

namespace swift::train {

class ShardedAdamW {
 public:
  ShardedAdamW(GradientReducer& reducer, const ops::AdamWConfig& config);
  // AdamW on this rank's pieces (their gradients must be the reduced ones), then every rank's updated pieces to
  // every rank.
  void step(double lr);
  int64_t steps() const { return steps_; }
  // ZeRO-2: the global L2 norm of the reduced gradients from every rank's pieces, then clips this rank's pieces to
  // max_norm (torch's clip_grad_norm_ coefficient); max_norm <= 0 only measures. Collective. Returns the norm.
  // Tensor parallel (the reducer's group holds one TP rank's shards; `tensor_parallel` is the TP group): the squares
  // of the sharded parameters' pieces are summed over the reducer's group then the TP group, those of the whole
  // (replicated, or Partial already summed) ones over the reducer's group of TP rank 0 only: each element once.
  float clip_shard_gradients(double max_norm, dist::Communicator* tensor_parallel = nullptr);
  // Fills `full` (an AdamW over the same parameters) with every rank's moments and the step count. Every rank
  // calls it; only ranks that pass non-null get the result.
  void gather_full(AdamW* full);
  // Takes this rank's pieces of `full`'s moments and its step count.
  void load_full(AdamW& full);
  int64_t state_numel() const { return state_numel_; }  // S: elements of each moment on this rank

 private:
  struct Piece {  // the part of parameter `param` inside this rank's pieces
    size_t param;
    int64_t offset_in_param, offset_in_state, numel;
  };
  Tensor piece_of(const Tensor& param_tensor, const Piece& p) const;
  // The reduced gradient of a piece: in the reducer's shard accumulator (sharded storage) or in the parameter's.
  Tensor gradient_of(const Piece& p) const;
  void all_gather_parameters();

  GradientReducer& reducer_;
  dist::Communicator& comm_;
  std::vector<model::Parameter>& params_;
  ops::AdamWConfig config_;
  std::vector<uint8_t> decay_;
  std::vector<int64_t> state_offset_;  // per bucket: where this rank's piece starts in the state
  std::vector<Piece> pieces_;
  int64_t state_numel_ = 0;
  Tensor exp_avg_, exp_avg_sq_;  // (state_numel_) F32
  int64_t steps_ = 0;
};

}  // namespace swift::train
