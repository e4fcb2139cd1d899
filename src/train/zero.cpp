// train/zero.cpp — the sharded AdamW of ZeRO-1 and ZeRO-2 on the reducer's bucket pieces.
//
// Invariants: pieces_ lists this rank's elements bucket by bucket, span by span (the layout's order), each with its
// place in the moments; elements of a piece past the bucket's end (padding) have moments that stay zero.
#include "train/zero.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>

#include "core/error.h"

namespace swift::train {

namespace {

Tensor flat(const Tensor& t) { return t.view({t.numel()}); }

}  // namespace

ShardedAdamW::ShardedAdamW(GradientReducer& reducer, const ops::AdamWConfig& config)
    : reducer_(reducer), comm_(reducer.comm()), params_(reducer.params()), config_(config) {
  SWIFT_CHECK(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1,
              "--adam_beta1 / --adam_beta2 must be in [0, 1), got {} / {}", config.beta1, config.beta2);
  SWIFT_CHECK(config.eps > 0, "--adam_epsilon must be positive, got {}", config.eps);
  SWIFT_CHECK(config.weight_decay >= 0, "--weight_decay must be >= 0, got {}", config.weight_decay);
  for (const model::Parameter& p : params_) {
    SWIFT_CHECK(p.value.dtype() == DType::F32 && (!p.grad.defined() || p.grad.dtype() == DType::F32),
                "ZeRO: parameter {} must be F32 with an F32 gradient", p.name);
    decay_.push_back(weight_decay_applies(p.name) ? 1 : 0);
  }
  const int64_t r = comm_.rank();
  for (const GradientBuckets::Bucket& b : reducer_.layout().buckets) {
    state_offset_.push_back(state_numel_);
    const int64_t lo = std::min(b.numel, r * b.piece), hi = std::min(b.numel, lo + b.piece);
    for (const GradientBuckets::Span& s : b.spans) {
      const int64_t a = std::max(lo, s.offset_in_bucket), e = std::min(hi, s.offset_in_bucket + s.numel);
      if (a >= e) continue;
      pieces_.push_back({s.param, s.offset_in_param + (a - s.offset_in_bucket), state_numel_ + (a - lo), e - a});
    }
    state_numel_ += b.piece;
  }
  const Device device = comm_.device();
  const int64_t n = std::max<int64_t>(1, state_numel_);
  exp_avg_ = Tensor::zeros({n}, DType::F32, device, MemoryCategory::Optimizer);
  exp_avg_sq_ = Tensor::zeros({n}, DType::F32, device, MemoryCategory::Optimizer);
}

Tensor ShardedAdamW::piece_of(const Tensor& param_tensor, const Piece& p) const {
  return flat(param_tensor).slice_rows(p.offset_in_param, p.offset_in_param + p.numel);
}

Tensor ShardedAdamW::gradient_of(const Piece& p) const {
  const Tensor& shard = reducer_.shard_gradients();
  if (shard.defined()) return shard.slice_rows(p.offset_in_state, p.offset_in_state + p.numel);  // same layout
  return piece_of(params_[p.param].grad, p);
}

void ShardedAdamW::step(double lr) {
  SWIFT_CHECK(reducer_.idle(), "ZeRO: step() while gradient reductions are still in flight (call finish() first)");
  ++steps_;
  std::vector<ops::AdamWTensor> with_decay, without_decay;
  for (const Piece& p : pieces_) {
    const model::Parameter& param = params_[p.param];
    ops::AdamWTensor t{piece_of(param.value, p), gradient_of(p),
                       exp_avg_.slice_rows(p.offset_in_state, p.offset_in_state + p.numel),
                       exp_avg_sq_.slice_rows(p.offset_in_state, p.offset_in_state + p.numel)};
    (decay_[p.param] ? with_decay : without_decay).push_back(t);
  }
  ops::AdamWConfig c = config_;
  c.lr = lr;
  if (!with_decay.empty()) ops::adamw_step(with_decay, c, steps_);
  c.weight_decay = 0.0;
  if (!without_decay.empty()) ops::adamw_step(without_decay, c, steps_);
  all_gather_parameters();
}

// Bucket by bucket through the two staging slots: this rank's updated piece into its place in the slot, all_gather
// in place, every span back into its parameter. Two buckets in flight: one gathering while the next is packed.
void ShardedAdamW::all_gather_parameters() {
  const std::vector<GradientBuckets::Bucket>& buckets = reducer_.layout().buckets;
  const int64_t r = comm_.rank(), w = comm_.world_size();
  std::array<std::unique_ptr<dist::CollectiveHandle>, 2> handles;
  std::array<size_t, 2> in_slot{};
  auto unpack = [&](int slot) {
    if (!handles[static_cast<size_t>(slot)]) return;
    handles[static_cast<size_t>(slot)]->wait();
    handles[static_cast<size_t>(slot)].reset();
    const GradientBuckets::Bucket& b = buckets[in_slot[static_cast<size_t>(slot)]];
    const Tensor buffer = reducer_.staging(slot);
    for (const GradientBuckets::Span& s : b.spans) {
      Tensor dst = flat(params_[s.param].value).slice_rows(s.offset_in_param, s.offset_in_param + s.numel);
      dst.copy_from(buffer.slice_rows(s.offset_in_bucket, s.offset_in_bucket + s.numel));
    }
  };
  size_t next_piece = 0;
  for (size_t bi = 0; bi < buckets.size(); ++bi) {
    const GradientBuckets::Bucket& b = buckets[bi];
    const int slot = static_cast<int>(bi % 2);
    unpack(slot);
    Tensor buffer = reducer_.staging(slot);
    Tensor own = buffer.slice_rows(r * b.piece, (r + 1) * b.piece);
    const int64_t pad_from = std::max(b.numel, r * b.piece), pad_to = (r + 1) * b.piece;
    if (pad_from < pad_to) buffer.slice_rows(pad_from, pad_to).zero_();  // past the bucket's end: gathered, unused
    const int64_t bucket_end = state_offset_[bi] + b.piece;  // this bucket's pieces come next in pieces_
    for (; next_piece < pieces_.size() && pieces_[next_piece].offset_in_state < bucket_end; ++next_piece) {
      const Piece& p = pieces_[next_piece];
      const int64_t at = p.offset_in_state - state_offset_[bi];
      own.slice_rows(at, at + p.numel).copy_from(piece_of(params_[p.param].value, p));
    }
    Tensor whole = buffer.slice_rows(0, b.piece * w);
    handles[static_cast<size_t>(slot)] = comm_.start_all_gather(own, whole);
    in_slot[static_cast<size_t>(slot)] = bi;
  }
  const int first = handles[0] && handles[1] && in_slot[1] < in_slot[0] ? 1 : 0;
  unpack(first);
  unpack(1 - first);
}

float ShardedAdamW::clip_shard_gradients(double max_norm, dist::Communicator* tensor_parallel) {
  std::vector<Tensor> grads, sharded, whole;
  grads.reserve(pieces_.size());
  for (const Piece& p : pieces_) {
    grads.push_back(gradient_of(p));
    (tensor_parallel && model::is_sharded(params_[p.param].tp) ? sharded : whole).push_back(grads.back());
  }
  auto squared_norm = [](const std::vector<Tensor>& g) {
    const double n = g.empty() ? 0.0 : static_cast<double>(ops::grad_norm(g));
    return n * n;
  };
  double squares = 0;
  if (tensor_parallel == nullptr) {
    const double local = squared_norm(whole);
    squares = comm_.world_size() > 1 ? sum_across_ranks(comm_, {local})[0] : local;
  } else {
    // Over the ranks of this TP rank's shards (comm_), then over the TP group: shard pieces from every TP rank, the
    // pieces of whole tensors (the same gradients on every TP rank) from TP rank 0 only, so every rank gets one sum.
    const std::vector<double> local = {squared_norm(sharded), squared_norm(whole)};
    const std::vector<double> dp = comm_.world_size() > 1 ? sum_across_ranks(comm_, local) : local;
    const std::vector<double> tp =
        sum_across_ranks(*tensor_parallel, {dp[0], tensor_parallel->rank() == 0 ? dp[1] : 0.0});
    squares = tp[0] + tp[1];
  }
  const float total = static_cast<float>(std::sqrt(squares));
  if (!(max_norm > 0)) return total;
  // torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total + 1e-6) (float / tensor: reciprocal, then
  // multiply), clamped to 1; multiplying by 1 changes nothing, and a NaN norm fails the step in the trainer.
  const float coef = (1.0f / (total + 1e-6f)) * static_cast<float>(max_norm);
  if (!(coef < 1.0f)) return total;
  // grad *= coef, as ops::clip_grad_norm does, through linear with a 1 x 1 weight: y = x w^T has K = 1, one fp32
  // product per element on every backend, so y = fl(x * coef) exactly. The scratch is a staging slot.
  Tensor weight = Tensor::from_f32({1, 1}, {coef});
  if (!(comm_.device() == Device::cpu())) weight = weight.to(comm_.device(), MemoryCategory::Other);
  const Tensor scratch = reducer_.staging(0);
  for (Tensor& g : grads) {
    const int64_t n = g.numel();
    Tensor y = scratch.slice_rows(0, n).view({n, 1});
    ops::linear(g.view({n, 1}), weight, Tensor(), y);
    g.copy_from(y.view({n}));
  }
  return total;
}

void ShardedAdamW::gather_full(AdamW* full) {
  if (full) {
    SWIFT_CHECK(full->size() == params_.size(), "ZeRO: the full optimizer has {} tensors, expected {}", full->size(),
                params_.size());
  }
  SWIFT_CHECK(reducer_.idle(), "ZeRO: gather_full() while gradient reductions are still in flight");
  const std::vector<GradientBuckets::Bucket>& buckets = reducer_.layout().buckets;
  const int64_t w = comm_.world_size();
  for (int which = 0; which < 2; ++which) {
    const Tensor& state = which == 0 ? exp_avg_ : exp_avg_sq_;
    for (size_t bi = 0; bi < buckets.size(); ++bi) {
      const GradientBuckets::Bucket& b = buckets[bi];
      Tensor whole = reducer_.staging(0).slice_rows(0, b.piece * w);
      comm_.all_gather(state.slice_rows(state_offset_[bi], state_offset_[bi] + b.piece), whole);
      if (!full) continue;
      for (const GradientBuckets::Span& s : b.spans) {
        Tensor dst = flat(which == 0 ? full->exp_avg(s.param) : full->exp_avg_sq(s.param))
                         .slice_rows(s.offset_in_param, s.offset_in_param + s.numel);
        dst.copy_from(whole.slice_rows(s.offset_in_bucket, s.offset_in_bucket + s.numel));
      }
    }
  }
  if (full) full->set_steps(steps_);
}

void ShardedAdamW::load_full(AdamW& full) {
  SWIFT_CHECK(full.size() == params_.size(), "ZeRO: the full optimizer has {} tensors, expected {}", full.size(),
              params_.size());
  for (const Piece& p : pieces_) {
    exp_avg_.slice_rows(p.offset_in_state, p.offset_in_state + p.numel).copy_from(piece_of(full.exp_avg(p.param), p));
    exp_avg_sq_.slice_rows(p.offset_in_state, p.offset_in_state + p.numel)
        .copy_from(piece_of(full.exp_avg_sq(p.param), p));
  }
  steps_ = full.steps();
}

}  // namespace swift::train
