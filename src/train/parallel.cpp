// train/parallel.cpp — the DP x SP x TP layout and its sub-group communicators (train/parallel.h).
//
// Invariants: splits run in one fixed order (sequence, tensor, replicas) on every rank.
#include "train/parallel.h"

#include <cmath>

#include "core/error.h"
#include "ops/ops.h"
#include "train/data_parallel.h"

namespace swift::train {

ParallelLayout ParallelLayout::of(int rank, int world, int sp, int tp) {
  SWIFT_CHECK(sp >= 1, "--sequence_parallel_size must be >= 1, got {}", sp);
  SWIFT_CHECK(tp >= 1, "--tensor_model_parallel_size must be >= 1, got {}", tp);
  SWIFT_CHECK(world % (sp * tp) == 0,
              "--sequence_parallel_size {} x --tensor_model_parallel_size {} = {} must divide the number of ranks {} "
              "(launch e.g. NPROC_PER_NODE={})",
              sp, tp, sp * tp, world, sp * tp);
  SWIFT_CHECK(rank >= 0 && rank < world, "parallel layout: rank {} is outside the world of {}", rank, world);
  ParallelLayout l;
  l.world = world;
  l.sp = sp;
  l.tp = tp;
  l.dp = world / (sp * tp);
  l.tp_rank = rank % tp;
  l.sp_rank = (rank / tp) % sp;
  l.dp_rank = rank / (tp * sp);
  return l;
}

ParallelWorld::ParallelWorld(dist::Communicator& world, int sequence_parallel_size, int tensor_parallel_size)
    : world_(world),
      layout_(ParallelLayout::of(world.rank(), world.world_size(), sequence_parallel_size, tensor_parallel_size)) {
  const ParallelLayout& l = layout_;
  // Same data-parallel replica and tensor rank: one SP group; same replica and SP rank: one TP group; same tensor
  // rank (any replica, any SP rank): the ranks that hold this rank's parameter shards.
  if (l.sp > 1) sequence_ = world.split(l.dp_rank * l.tp + l.tp_rank);
  if (l.tp > 1) tensor_ = world.split(l.dp_rank * l.sp + l.sp_rank);
  if (l.tp > 1) data_ = world.split(l.tp_rank);
}

float clip_tensor_parallel_gradients(std::vector<model::Parameter>& params, double max_norm, dist::Communicator& tp) {
  std::vector<Tensor> sharded, whole;
  for (const model::Parameter& p : params) (model::is_sharded(p.tp) ? sharded : whole).push_back(p.grad);
  const double shards = sharded.empty() ? 0.0 : static_cast<double>(ops::grad_norm(sharded));
  const double rest = whole.empty() ? 0.0 : static_cast<double>(ops::grad_norm(whole));
  const double squares = sum_across_ranks(tp, {shards * shards})[0] + rest * rest;
  const float total = static_cast<float>(std::sqrt(squares));
  if (!(max_norm > 0)) return total;
  // torch: clip_coef = max_norm / (total + 1e-6) (float / tensor: reciprocal, then multiply), clamped to 1; a NaN
  // norm fails the step in the trainer.
  const float coef = (1.0f / (total + 1e-6f)) * static_cast<float>(max_norm);
  if (!(coef < 1.0f)) return total;
  // grad *= coef on any backend: linear with a 1 x 1 weight is one fp32 product per element, so y = fl(g * coef).
  Tensor weight = Tensor::from_f32({1, 1}, {coef});
  for (model::Parameter& p : params) {
    const int64_t n = p.grad.numel();
    if (!(p.grad.device() == weight.device())) weight = weight.to(p.grad.device(), MemoryCategory::Other);
    Tensor scaled = Tensor::empty({n, 1}, DType::F32, p.grad.device(), MemoryCategory::Workspace);
    ops::linear(p.grad.view({n, 1}), weight, Tensor(), scaled);
    Tensor flat = p.grad.view({n});
    flat.copy_from(scaled.view({n}));
  }
  return total;
}

std::map<std::string, Tensor> gather_tensor_parallel_state(dist::Communicator& tp,
                                                           const std::vector<model::Parameter>& params,
                                                           AdamW& optimizer) {
  SWIFT_CHECK(optimizer.size() == params.size(), "tensor parallel: the optimizer has {} tensors, the model {}",
              optimizer.size(), params.size());
  std::map<std::string, Tensor> whole;
  for (size_t i = 0; i < params.size(); ++i) {
    const model::Parameter& p = params[i];
    if (!model::is_sharded(p.tp)) continue;
    whole[p.name] = model::tensor_parallel_gather(tp, p.value, p.tp);
    whole["exp_avg." + p.name] = model::tensor_parallel_gather(tp, optimizer.exp_avg(i), p.tp);
    whole["exp_avg_sq." + p.name] = model::tensor_parallel_gather(tp, optimizer.exp_avg_sq(i), p.tp);
  }
  return whole;
}

}  // namespace swift::train
