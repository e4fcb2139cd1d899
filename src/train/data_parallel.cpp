// train/data_parallel.cpp — gradient buckets and small exact reductions over a communicator.
#include "train/data_parallel.h"

#include <cstring>

#include "core/error.h"

namespace swift::train {

GradientReducer::GradientReducer(dist::Communicator& comm, std::vector<model::Parameter>& params, int64_t bucket_bytes)
    : comm_(comm), params_(params) {
  const int64_t bucket_numel = std::max<int64_t>(1, bucket_bytes / 4);
  int64_t largest = 0;
  Bucket current;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& g = params_[i].grad;
    SWIFT_CHECK(g.dtype() == DType::F32, "data parallel: the gradient of {} is {}, expected F32", params_[i].name,
                dtype_name(g.dtype()));
    const int64_t n = g.numel();
    if (n >= bucket_numel) {  // reduced in place, alone
      buckets_.push_back({{i}, n});
      continue;
    }
    if (current.numel + n > bucket_numel) {
      largest = std::max(largest, current.numel);
      buckets_.push_back(std::move(current));
      current = Bucket{};
    }
    current.params.push_back(i);
    current.numel += n;
  }
  if (!current.params.empty()) {
    largest = std::max(largest, current.numel);
    buckets_.push_back(std::move(current));
  }
  if (largest > 0 && comm_.world_size() > 1) {
    staging_ = Tensor::empty({largest}, DType::F32, comm_.device(), MemoryCategory::Other);
  }
}

void GradientReducer::reduce() {
  if (comm_.world_size() <= 1) return;
  for (const Bucket& b : buckets_) {
    if (b.params.size() == 1 && b.numel > staging_.numel()) {  // larger than a bucket: in place
      Tensor flat = params_[b.params[0]].grad.view({b.numel});
      comm_.all_reduce(flat, dist::ReduceOp::Sum);
      continue;
    }
    Tensor buffer = staging_.slice_rows(0, b.numel);
    int64_t offset = 0;
    for (size_t i : b.params) {
      const Tensor& g = params_[i].grad;
      buffer.slice_rows(offset, offset + g.numel()).copy_from(g.view({g.numel()}));
      offset += g.numel();
    }
    comm_.all_reduce(buffer, dist::ReduceOp::Sum);
    offset = 0;
    for (size_t i : b.params) {
      Tensor& g = params_[i].grad;
      Tensor flat = g.view({g.numel()});
      flat.copy_from(buffer.slice_rows(offset, offset + g.numel()));
      offset += g.numel();
    }
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
