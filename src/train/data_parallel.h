// train/data_parallel.h — what the trainer needs from a communicator for data-parallel training: the gradient
// all-reduce in flat buckets, exact sums of small statistics across ranks, and a string from rank 0.
//
// Invariants:
//  - GradientReducer::reduce() leaves every rank's gradients equal to the sum over ranks (in the communicator's
//    order: rank 0 + rank 1 + ... on the CPU, so every rank holds the same bits). Gradients are packed into flat
//    F32 staging buckets of about `bucket_bytes` (a parameter larger than a bucket is reduced in place on its own),
//    one all_reduce per bucket, then copied back: few large collectives instead of one per parameter.
//  - sum_across_ranks() gathers the values of every rank (all_gather of their 8-byte patterns) and adds them in
//    double in rank order on every rank: exact for counts, identical on every rank, no fp32 rounding.
//  - A solo communicator (world size 1) makes every call the identity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "model/training.h"

namespace swift::train {

class GradientReducer {
 public:
  GradientReducer(dist::Communicator& comm, std::vector<model::Parameter>& params, int64_t bucket_bytes = 25 << 20);
  void reduce();
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    int64_t numel = 0;
  };
  dist::Communicator& comm_;
  std::vector<model::Parameter>& params_;
  std::vector<Bucket> buckets_;
  Tensor staging_;  // F32, the largest bucket, on the communicator's device
};

// Element-wise sum of `values` over all ranks, in double (every rank passes the same number of values).
std::vector<double> sum_across_ranks(dist::Communicator& comm, const std::vector<double>& values);

// Rank `root`'s string on every rank.
std::string broadcast_string(dist::Communicator& comm, const std::string& value, int root = 0);

}  // namespace swift::train
