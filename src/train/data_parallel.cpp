// train/data_parallel.cpp — gradient buckets reduced while the backward runs, and small exact reductions over a
// communicator.
//
// Invariants: buckets start in index order on every rank (the backward reports stages in decreasing order and the
// layout sorts parameters by decreasing stage, so bucket b is final no later than bucket b + 1); the element-wise
// sums do not depend on the layout or on when a bucket starts.
#include "train/data_parallel.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "ops/ops.h"

namespace swift::train {

namespace {

Tensor flat(const Tensor& t) { return t.view({t.numel()}); }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

int64_t backward_stage(const std::string& name) {
  // The decoder layer: the number after the last ".layers." (or a leading "layers."), when a '.' follows it.
  static const std::string kLayers = "layers.";
  int64_t layer = -1;
  for (size_t at = name.find(kLayers); at != std::string::npos; at = name.find(kLayers, at + 1)) {
    if (at > 0 && name[at - 1] != '.') continue;
    size_t i = at + kLayers.size();
    int64_t value = 0;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9' && i < at + kLayers.size() + 9) {
      value = value * 10 + (name[i] - '0');
      ++i;
    }
    if (i > at + kLayers.size() && i < name.size() && name[i] == '.') layer = value;
  }
  if (layer >= 0) return layer;
  if (name.find("embed_tokens") != std::string::npos) return -1;
  if (ends_with(name, "lm_head.weight") || name == "model.norm.weight") return kHeadStage;
  return -1;
}

int64_t GradientBuckets::padded_numel() const {
  int64_t most = 0;
  for (const Bucket& b : buckets) most = std::max(most, b.piece * world_size);
  return most;
}

GradientBuckets plan_gradient_buckets(const std::vector<model::Parameter>& params, int world_size,
                                      int64_t bucket_bytes) {
  SWIFT_CHECK(world_size >= 1, "gradient buckets: world size {} must be >= 1", world_size);
  SWIFT_CHECK(bucket_bytes >= 4, "gradient buckets: bucket_bytes = {} holds no F32 element", bucket_bytes);
  const int64_t capacity = bucket_bytes / 4;
  // Reverse parameter order, stably sorted by decreasing stage: the order the backward finishes them.
  std::vector<size_t> order(params.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::reverse(order.begin(), order.end());
  std::vector<int64_t> stage(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const model::Parameter& p = params[i];
    SWIFT_CHECK(p.grad.defined() && p.grad.dtype() == DType::F32 && p.grad.numel() == p.value.numel(),
                "data parallel: the gradient of {} must be F32 with the parameter's {} elements", p.name,
                p.value.numel());
    stage[i] = backward_stage(p.name);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return stage[a] > stage[b]; });
  GradientBuckets layout;
  layout.world_size = world_size;
  GradientBuckets::Bucket current;
  current.ready_stage = kHeadStage;
  auto close = [&] {
    current.piece = (current.numel + world_size - 1) / world_size;
    layout.buckets.push_back(std::move(current));
    current = GradientBuckets::Bucket{};
    current.ready_stage = kHeadStage;
  };
  for (size_t i : order) {
    const int64_t n = params[i].grad.numel();
    for (int64_t done = 0; done < n;) {
      if (current.numel == capacity) close();
      const int64_t take = std::min(n - done, capacity - current.numel);
      current.spans.push_back({i, done, current.numel, take});
      current.numel += take;
      current.ready_stage = std::min(current.ready_stage, stage[i]);
      done += take;
    }
  }
  if (current.numel > 0) close();
  return layout;
}

GradientReducer::GradientReducer(dist::Communicator& comm, std::vector<model::Parameter>& params,
                                 int64_t bucket_bytes, GradientReduction how)
    : comm_(comm), params_(params), how_(how), layout_(plan_gradient_buckets(params, comm.world_size(), bucket_bytes)) {
  for (const model::Parameter& p : params_) {
    SWIFT_CHECK(p.grad.device() == comm_.device(), "data parallel: the gradient of {} is on {} but the communicator "
                "works on {}", p.name, p.grad.device().str(), comm_.device().str());
  }
  const int64_t slot = layout_.padded_numel();
  if (slot > 0) {
    for (Tensor& s : staging_) s = Tensor::zeros({slot}, DType::F32, comm_.device(), MemoryCategory::Gradients);
  }
}

GradientReducer::~GradientReducer() {
  for (InFlight& s : in_flight_) {
    if (!s.handle) continue;
    try {
      s.handle->wait();
    } catch (const std::exception&) {  // the group is aborted; whoever destroys us is already unwinding an error
    }
  }
  if (model_ != nullptr) {  // the model keeps its own gradients again
    model_->set_backward_hook(nullptr);
    try {
      model_->set_gradient_provider(nullptr);
    } catch (const std::exception&) {  // out of memory while unwinding: the model is left without gradients
    }
  }
}

void GradientReducer::shard_gradient_storage(model::TrainableModel& model) {
  SWIFT_CHECK(how_ == GradientReduction::ReduceScatter, "sharded gradient storage needs the reduce-scatter (ZeRO-2)");
  SWIFT_CHECK(&model.parameters() == &params_, "sharded gradient storage: the reducer was built on other parameters");
  SWIFT_CHECK(model_ == nullptr, "sharded gradient storage: already set");
  int64_t total = 0;
  last_bucket_.assign(params_.size(), 0);
  for (size_t b = 0; b < layout_.buckets.size(); ++b) {
    shard_offset_.push_back(total);
    total += layout_.buckets[b].piece;
    for (const GradientBuckets::Span& s : layout_.buckets[b].spans) last_bucket_[s.param] = b;
  }
  shard_ = Tensor::zeros({std::max<int64_t>(1, total)}, DType::F32, comm_.device(), MemoryCategory::Gradients);
  shard_written_.assign(layout_.buckets.size(), 0);
  model_ = &model;
  const Device device = comm_.device();
  model.set_gradient_provider([this, device](size_t param) {
    return Tensor::zeros(params_[param].value.shape(), DType::F32, device, MemoryCategory::Gradients);
  });
  model.set_backward_hook([this](int64_t stage) { on_backward_stage(stage); });
}

std::vector<Tensor> GradientReducer::shard_gradients_as_full() const {
  SWIFT_CHECK(model_ != nullptr, "shard_gradients_as_full: the gradients are not sharded");
  std::vector<Tensor> full;
  for (const model::Parameter& p : params_) full.push_back(Tensor::zeros(p.value.shape(), DType::F32, comm_.device()));
  for (size_t b = 0; b < layout_.buckets.size(); ++b) {
    const GradientBuckets::Bucket& bucket = layout_.buckets[b];
    const int64_t lo = std::min(bucket.numel, comm_.rank() * bucket.piece), hi = std::min(bucket.numel, lo + bucket.piece);
    for (const GradientBuckets::Span& s : bucket.spans) {
      const int64_t a = std::max(lo, s.offset_in_bucket), e = std::min(hi, s.offset_in_bucket + s.numel);
      if (a >= e) continue;
      const int64_t in_param = s.offset_in_param + (a - s.offset_in_bucket), in_shard = shard_offset_[b] + (a - lo);
      flat(full[s.param]).slice_rows(in_param, in_param + (e - a)).copy_from(shard_.slice_rows(in_shard, in_shard + (e - a)));
    }
  }
  return full;
}

void GradientReducer::expect_last_backward() {
  armed_ = true;
  next_bucket_ = 0;
  started_during_backward_ = 0;
}

void GradientReducer::on_backward_stage(int64_t stage) {
  if (model_ != nullptr) return on_sharded_backward_stage(stage);
  if (!armed_) return;
  while (next_bucket_ < layout_.buckets.size() && stage <= layout_.buckets[next_bucket_].ready_stage) {
    start_bucket(next_bucket_++);
    ++started_during_backward_;
  }
}

// Sharded storage: every backward reduces every bucket; its last report (-1, the embedding) starts what is left.
void GradientReducer::on_sharded_backward_stage(int64_t stage) {
  while (next_bucket_ < layout_.buckets.size() && stage <= layout_.buckets[next_bucket_].ready_stage) {
    start_bucket(next_bucket_++);
    ++started_during_backward_;
  }
  if (stage != -1) return;
  SWIFT_CHECK(next_bucket_ == layout_.buckets.size(), "sharded gradients: {} of {} buckets started by the backward's end",
              next_bucket_, layout_.buckets.size());
  next_bucket_ = 0;
}

void GradientReducer::finish() {
  if (model_ != nullptr) {  // every backward reduced its buckets: wait for the last ones; an unreached piece is zero
    SWIFT_CHECK(next_bucket_ == 0, "sharded gradients: finish() inside a backward");
    const size_t first = in_flight_[0].handle && in_flight_[1].handle && in_flight_[1].bucket < in_flight_[0].bucket;
    complete(in_flight_[first]);
    complete(in_flight_[1 - first]);
    for (size_t b = 0; b < layout_.buckets.size(); ++b) {
      if (!shard_written_[b]) shard_.slice_rows(shard_offset_[b], shard_offset_[b] + layout_.buckets[b].piece).zero_();
      shard_written_[b] = 0;
    }
    armed_ = false;
    return;
  }
  if (!armed_) {
    next_bucket_ = 0;
    started_during_backward_ = 0;
  }
  while (next_bucket_ < layout_.buckets.size()) start_bucket(next_bucket_++);
  // The older of the two slots first (the order does not change the results; it is the order they finish).
  const size_t first = in_flight_[0].handle && in_flight_[1].handle && in_flight_[1].bucket < in_flight_[0].bucket;
  complete(in_flight_[first]);
  complete(in_flight_[1 - first]);
  armed_ = false;
  next_bucket_ = 0;
}

void GradientReducer::start_bucket(size_t b) {
  InFlight& slot = in_flight_[b % 2];
  complete(slot);  // bucket b - 2 used this slot
  const GradientBuckets::Bucket& bucket = layout_.buckets[b];
  Tensor buffer = staging_[b % 2];
  for (const GradientBuckets::Span& s : bucket.spans) {
    buffer.slice_rows(s.offset_in_bucket, s.offset_in_bucket + s.numel)
        .copy_from(flat(params_[s.param].grad).slice_rows(s.offset_in_param, s.offset_in_param + s.numel));
  }
  if (model_ != nullptr) {  // packed: the gradients whose last span this is go back to the provider
    for (const GradientBuckets::Span& s : bucket.spans) {
      if (last_bucket_[s.param] == b) model_->release_gradient(s.param);
    }
  }
  slot.bucket = b;
  if (how_ == GradientReduction::AllReduce) {
    Tensor data = buffer.slice_rows(0, bucket.numel);
    slot.handle = comm_.start_all_reduce(data, dist::ReduceOp::Sum);
    return;
  }
  const int64_t padded = bucket.piece * comm_.world_size(), r = comm_.rank();
  if (padded > bucket.numel) buffer.slice_rows(bucket.numel, padded).zero_();
  Tensor own = buffer.slice_rows(r * bucket.piece, (r + 1) * bucket.piece);  // NCCL's in-place layout
  slot.handle = comm_.start_reduce_scatter(buffer.slice_rows(0, padded), own, dist::ReduceOp::Sum);
}

void GradientReducer::complete(InFlight& slot) {
  if (!slot.handle) return;
  std::unique_ptr<dist::CollectiveHandle> handle = std::move(slot.handle);
  handle->wait();
  const GradientBuckets::Bucket& bucket = layout_.buckets[slot.bucket];
  const Tensor buffer = staging_[slot.bucket % 2];
  if (model_ != nullptr) {  // this rank's piece (padding included: zero) into the shard accumulator
    const int64_t off = shard_offset_[slot.bucket], r = comm_.rank();
    Tensor dst = shard_.slice_rows(off, off + bucket.piece);
    const Tensor own = buffer.slice_rows(r * bucket.piece, (r + 1) * bucket.piece);
    if (shard_written_[slot.bucket]) {
      ops::add(dst, own, dst);
    } else {
      dst.copy_from(own);
    }
    shard_written_[slot.bucket] = 1;
    return;
  }
  // AllReduce: every element; ReduceScatter: the elements of this rank's piece.
  int64_t lo = 0, hi = bucket.numel;
  if (how_ == GradientReduction::ReduceScatter) {
    lo = std::min(bucket.numel, comm_.rank() * bucket.piece);
    hi = std::min(bucket.numel, lo + bucket.piece);
  }
  for (const GradientBuckets::Span& s : bucket.spans) {
    const int64_t a = std::max(lo, s.offset_in_bucket), e = std::min(hi, s.offset_in_bucket + s.numel);
    if (a >= e) continue;
    const int64_t in_param = s.offset_in_param + (a - s.offset_in_bucket);
    Tensor dst = flat(params_[s.param].grad).slice_rows(in_param, in_param + (e - a));
    dst.copy_from(buffer.slice_rows(a, e));
  }
}

std::vector<double> sum_across_ranks(dist::Communicator& comm, const std::vector<double>& values) {
  if (comm.world_size() <= 1 || values.empty()) return values;
  const int64_t m = static_cast<int64_t>(values.size());
  Tensor local = Tensor::empty({m}, DType::I64, Device::cpu(), MemoryCategory::Other);
  std::memcpy(local.raw(), values.data(), values.size() * sizeof(double));
  Tensor input = comm.device().is_cpu() ? local : local.to(comm.device(), MemoryCategory::Other);
  Tensor output = Tensor::empty({m * comm.world_size()}, DType::I64, comm.device(), MemoryCategory::Other);
  comm.all_gather(input, output);
  const Tensor host = comm.device().is_cpu() ? output : output.to(Device::cpu(), MemoryCategory::Other);
  std::vector<double> all(static_cast<size_t>(m * comm.world_size()));
  std::memcpy(all.data(), host.raw(), all.size() * sizeof(double));
  std::vector<double> sum(values.size(), 0.0);
  for (int r = 0; r < comm.world_size(); ++r) {
    for (int64_t k = 0; k < m; ++k) sum[static_cast<size_t>(k)] += all[static_cast<size_t>(r * m + k)];
  }
  return sum;
}

std::string broadcast_string(dist::Communicator& comm, const std::string& value, int root) {
  if (comm.world_size() <= 1) return value;
  const std::vector<double> n = {comm.rank() == root ? static_cast<double>(value.size()) : 0.0};
  const int64_t length = static_cast<int64_t>(sum_across_ranks(comm, n)[0]);
  if (length == 0) return {};
  Tensor host = Tensor::zeros({length}, DType::U8, Device::cpu(), MemoryCategory::Other);
  if (comm.rank() == root) std::memcpy(host.raw(), value.data(), value.size());
  Tensor t = comm.device().is_cpu() ? host : host.to(comm.device(), MemoryCategory::Other);
  comm.broadcast(t, root);
  const Tensor back = comm.device().is_cpu() ? t : t.to(Device::cpu(), MemoryCategory::Other);
  return std::string(static_cast<const char*>(back.raw()), static_cast<size_t>(length));
}

}  // namespace swift::train
