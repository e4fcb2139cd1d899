// train/parallel.h — a world of DP x SP x TP ranks (--sequence_parallel_size, --tensor_model_parallel_size): which
// rank does what, and the sub-group communicators split off the world.
//
// Layout (as Megatron / ms-swift order them: tensor-parallel ranks adjacent, then sequence-parallel):
//   world rank = (dp_rank * SP + sp_rank) * TP + tp_rank,   DP = world / (SP * TP).
// The SP x TP ranks of one data-parallel replica take the same micro-batches: the loader runs with
// world_size = DP and rank = dp_rank. Gradients of every parameter are summed over the world (each SP rank holds
// the partial sums of its tokens); statistics are counted once per replica (model_parallel_rank() == 0 for counts
// that every rank of the replica sees whole).
//
// Invariants: every rank builds its ParallelWorld at the same point (the splits are collectives of the world), and
// the groups live as long as it; sizes that do not divide the world are an error naming both options.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "model/parallel.h"
#include "model/training.h"
#include "train/optimizer.h"

namespace swift::train {

struct ParallelLayout {
  int world = 1, dp = 1, sp = 1, tp = 1;
  int dp_rank = 0, sp_rank = 0, tp_rank = 0;
  // Rank inside its replica's SP x TP block.
  int model_parallel_rank() const { return sp_rank * tp + tp_rank; }
  // Throws when sp or tp is < 1 or sp * tp does not divide world.
  static ParallelLayout of(int rank, int world, int sp, int tp);
};

class ParallelWorld {
 public:
  // Splits `world` (collective). Groups of size 1 are not made.
  ParallelWorld(dist::Communicator& world, int sequence_parallel_size, int tensor_parallel_size);
  const ParallelLayout& layout() const { return layout_; }
  dist::Communicator& world() const { return world_; }
  // The SP and TP groups of this rank (null where that size is 1).
  model::ParallelGroups groups() const { return {sequence_.get(), tensor_.get()}; }
  // The ranks holding the same parameter shards as this one (same tp_rank, every replica and SP rank): the world
  // itself without TP.
  dist::Communicator& replicas() const { return data_ ? *data_ : world_; }

 private:
  dist::Communicator& world_;
  ParallelLayout layout_;
  std::unique_ptr<dist::Communicator> sequence_, tensor_, data_;
};

// Tensor parallel: the global L2 norm of the gradients (a sharded gradient's squares summed over the TP group,
// the others counted once), then every gradient scaled by torch's clip_grad_norm_ coefficient min(1, max_norm /
// (norm + 1e-6)); max_norm <= 0 only measures. Collective over `tp`. Returns the norm before clipping.
float clip_tensor_parallel_gradients(std::vector<model::Parameter>& params, double max_norm, dist::Communicator& tp);

// Tensor parallel checkpoints keep the one-process format: the whole tensors of the sharded parameters and of their
// AdamW moments, by saved name ("<name>", "exp_avg.<name>", "exp_avg_sq.<name>"). Collective over `tp`; every rank
// gets them (rank 0 writes them).
std::map<std::string, Tensor> gather_tensor_parallel_state(dist::Communicator& tp,
                                                           const std::vector<model::Parameter>& params,
                                                           AdamW& optimizer);

}  // namespace swift::train
