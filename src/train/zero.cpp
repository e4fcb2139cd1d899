// train/zero.cpp — the sharded AdamW of ZeRO-1.
#include "train/zero.h"

#include <algorithm>

#include "core/error.h"

namespace swift::train {

namespace {
Tensor flat(const Tensor& t) { return t.view({t.numel()}); }
}  // namespace

ShardedAdamW::ShardedAdamW(dist::Communicator& comm, std::vector<model::Parameter>& params,
                           const ops::AdamWConfig& config)
    : comm_(comm), params_(params), config_(config) {
  SWIFT_CHECK(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1,
              "--adam_beta1 / --adam_beta2 must be in [0, 1), got {} / {}", config.beta1, config.beta2);
  SWIFT_CHECK(config.eps > 0, "--adam_epsilon must be positive, got {}", config.eps);
  SWIFT_CHECK(config.weight_decay >= 0, "--weight_decay must be >= 0, got {}", config.weight_decay);
  for (const model::Parameter& p : params_) {
    SWIFT_CHECK(p.value.dtype() == DType::F32 && p.grad.dtype() == DType::F32,
                "ZeRO-1: parameter {} must be F32 with an F32 gradient", p.name);
    offsets_.push_back(total_);
    total_ += p.value.numel();
    decay_.push_back(weight_decay_applies(p.name) ? 1 : 0);
  }
  const int64_t w = comm_.world_size();
  shard_ = std::max<int64_t>(1, (total_ + w - 1) / w);
  begin_ = std::min(total_, comm_.rank() * shard_);
  end_ = std::min(total_, begin_ + shard_);
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t a = std::max(begin_, offsets_[i]), b = std::min(end_, offsets_[i] + params_[i].value.numel());
    if (a < b) pieces_.push_back({i, a - offsets_[i], a - begin_, b - a});
  }
  const Device device = comm_.device();
  exp_avg_ = Tensor::zeros({shard_}, DType::F32, device, MemoryCategory::Optimizer);
  exp_avg_sq_ = Tensor::zeros({shard_}, DType::F32, device, MemoryCategory::Optimizer);
  gathered_ = Tensor::zeros({shard_ * w}, DType::F32, device, MemoryCategory::Optimizer);
}

void ShardedAdamW::step(double lr) {
  ++steps_;
  std::vector<ops::AdamWTensor> with_decay, without_decay;
  for (const Piece& p : pieces_) {
    const model::Parameter& param = params_[p.param];
    ops::AdamWTensor t{flat(param.value).slice_rows(p.offset_in_param, p.offset_in_param + p.numel),
                       flat(param.grad).slice_rows(p.offset_in_param, p.offset_in_param + p.numel),
                       exp_avg_.slice_rows(p.offset_in_shard, p.offset_in_shard + p.numel),
                       exp_avg_sq_.slice_rows(p.offset_in_shard, p.offset_in_shard + p.numel)};
    (decay_[p.param] ? with_decay : without_decay).push_back(t);
  }
  ops::AdamWConfig c = config_;
  c.lr = lr;
  if (!with_decay.empty()) ops::adamw_step(with_decay, c, steps_);
  c.weight_decay = 0.0;
  if (!without_decay.empty()) ops::adamw_step(without_decay, c, steps_);
  // Every rank's updated shard to every rank: own shard into its slot of the staging buffer (in place), gather.
  const int64_t r = comm_.rank();
  Tensor own = gathered_.slice_rows(r * shard_, (r + 1) * shard_);
  for (const Piece& p : pieces_) {
    own.slice_rows(p.offset_in_shard, p.offset_in_shard + p.numel)
        .copy_from(flat(params_[p.param].value).slice_rows(p.offset_in_param, p.offset_in_param + p.numel));
  }
  comm_.all_gather(own, gathered_);
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t n = params_[i].value.numel();
    const int64_t a = offsets_[i], b = a + n;
    if (a >= begin_ && b <= end_) continue;  // wholly this rank's: already updated in place
    Tensor dst = flat(params_[i].value);
    dst.copy_from(gathered_.slice_rows(a, b));
  }
}

void ShardedAdamW::gather_full(AdamW* full) {
  if (full) SWIFT_CHECK(full->size() == params_.size(), "ZeRO-1: the full optimizer has {} tensors, expected {}",
                        full->size(), params_.size());
  const int64_t r = comm_.rank();
  Tensor own = gathered_.slice_rows(r * shard_, (r + 1) * shard_);
  for (int which = 0; which < 2; ++which) {
    own.copy_from(which == 0 ? exp_avg_ : exp_avg_sq_);
    comm_.all_gather(own, gathered_);
    if (!full) continue;
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor dst = flat(which == 0 ? full->exp_avg(i) : full->exp_avg_sq(i));
      dst.copy_from(gathered_.slice_rows(offsets_[i], offsets_[i] + dst.numel()));
    }
  }
  if (full) full->set_steps(steps_);
}

void ShardedAdamW::load_full(AdamW& full) {
  SWIFT_CHECK(full.size() == params_.size(), "ZeRO-1: the full optimizer has {} tensors, expected {}", full.size(),
              params_.size());
  for (const Piece& p : pieces_) {
    exp_avg_.slice_rows(p.offset_in_shard, p.offset_in_shard + p.numel)
        .copy_from(flat(full.exp_avg(p.param)).slice_rows(p.offset_in_param, p.offset_in_param + p.numel));
    exp_avg_sq_.slice_rows(p.offset_in_shard, p.offset_in_shard + p.numel)
        .copy_from(flat(full.exp_avg_sq(p.param)).slice_rows(p.offset_in_param, p.offset_in_param + p.numel));
  }
  steps_ = full.steps();
}

}  // namespace swift::train
