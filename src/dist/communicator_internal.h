// dist/communicator_internal.h — argument checks shared by the communicator implementations (not for callers).
//
// Invariants: every check throws swift::Error naming the collective and the argument; none moves data.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace swift::dist::detail {

enum class CollectiveKind : int32_t { AllReduce = 1, ReduceScatter, AllGather, Broadcast, AllToAll, Barrier };
const char* kind_name(CollectiveKind kind);

void check_all_reduce(const Tensor& t, Device device);
// Accepts output == input's shard `rank` (NCCL's in-place layout); rejects other overlaps.
void check_reduce_scatter(const Tensor& input, const Tensor& output, int world, int rank, Device device);
// Accepts input == output's shard `rank` (NCCL's in-place layout); rejects other overlaps.
void check_all_gather(const Tensor& input, const Tensor& output, int world, int rank, Device device);
void check_broadcast(const Tensor& t, int root, int world, Device device);
void check_all_to_all(const Tensor& input, const Tensor& output, int world, Device device);

}  // namespace swift::dist::detail
