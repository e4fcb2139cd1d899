// model/parallel.cpp — the padded SP micro-batch, Ulysses' head exchange, and the tensor-parallel shard / gather of
// one tensor (model/parallel.h).
//
// Invariants: the exchange functions check their shapes against the group size and name what is wrong; they
// allocate their staging buffer per call (Activations memory), on the tensors' device. Shards are new tensors (the
// whole one can be freed); shard then gather gives the whole tensor back bit for bit (bytes are only moved). On the
// host a shard reads only its own bytes of the whole tensor (a mapped file: only the shard's pages).
#include "model/parallel.h"

#include <cstring>

#include "core/error.h"
#include "model/training.h"
#include "ops/ops.h"

namespace swift::model {

namespace {

constexpr int32_t kIgnore = -100;

Tensor staging_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device(), MemoryCategory::Activations); }

void check_exchange(const char* op, dist::Communicator& sp, const Tensor& local, const Tensor& global, int64_t heads) {
  const int64_t P = sp.world_size();
  SWIFT_CHECK(heads % P == 0, "{}: {} heads cannot be split over {} sequence-parallel ranks", op, heads, P);
  SWIFT_CHECK(local.dim() == 2 && global.dim() == 2 && local.size(1) % heads == 0,
              "{}: expected 2-D (tokens, heads x head_dim) tensors, got {} and {} for {} heads", op, local.str(),
              global.str(), heads);
  const int64_t Ts = local.size(0), D = local.size(1) / heads;
  SWIFT_CHECK(global.size(0) == P * Ts && global.size(1) == heads / P * D,
              "{}: the group's tensor {} must be ({} tokens, {} heads x {}) for this rank's {}", op, global.str(),
              P * Ts, heads / P, D, local.str());
  SWIFT_CHECK(local.dtype() == global.dtype(), "{}: {} and {} differ in dtype", op, local.str(), global.str());
}

}  // namespace

MicroBatch pad_for_sequence_parallel(const MicroBatch& batch, int64_t sp_size, int32_t pad_id) {
  SWIFT_CHECK(sp_size >= 1, "sequence parallel: the group size must be >= 1, got {}", sp_size);
  const int64_t T = batch.ids.numel();
  const int64_t padded = (T + sp_size - 1) / sp_size * sp_size;
  if (padded == T) return batch;
  SWIFT_CHECK(batch.ids.device().is_cpu(), "sequence parallel: the micro-batch must be on the host to be padded");
  const int64_t extra = padded - T, B = batch.cu_seqlens.numel() - 1;
  MicroBatch out{Tensor::empty({padded}, DType::I32), Tensor::empty({padded}, DType::I32),
                 Tensor::empty({B + 2}, DType::I32), Tensor::empty({padded}, DType::I32)};
  out.ids.slice_rows(0, T).copy_from(batch.ids);
  out.positions.slice_rows(0, T).copy_from(batch.positions);
  out.labels.slice_rows(0, T).copy_from(batch.labels);
  out.cu_seqlens.slice_rows(0, B + 1).copy_from(batch.cu_seqlens);
  for (int64_t i = 0; i < extra; ++i) {
    out.ids.data<int32_t>()[T + i] = pad_id;
    out.positions.data<int32_t>()[T + i] = static_cast<int32_t>(i);
    out.labels.data<int32_t>()[T + i] = kIgnore;
  }
  out.cu_seqlens.data<int32_t>()[B + 1] = static_cast<int32_t>(padded);
  return out;
}

bool is_sharded(TensorParallelLayout layout) {
  return layout == TensorParallelLayout::Rows || layout == TensorParallelLayout::Columns;
}

Tensor tensor_parallel_shard(const Tensor& whole, TensorParallelLayout layout, int rank, int size, const std::string& what) {
  if (!is_sharded(layout) || size == 1) return whole;
  if (layout == TensorParallelLayout::Rows) {
    const int64_t M = whole.size(0);
    SWIFT_CHECK(M % size == 0, "--tensor_model_parallel_size {}: {} has {} rows, not divisible", size, what, M);
    return whole.slice_rows(rank * M / size, (rank + 1) * M / size).clone(MemoryCategory::Weights);
  }
  SWIFT_CHECK(whole.dim() == 2 && whole.size(1) % size == 0,
              "--tensor_model_parallel_size {}: {} {} cannot be split by columns", size, what, whole.str());
  const int64_t M = whole.size(0), Kr = whole.size(1) / size;
  if (whole.device().is_cpu()) {  // each row's block copied directly: only the shard's bytes of `whole` are read
    Tensor shard = Tensor::empty({M, Kr}, whole.dtype(), whole.device(), MemoryCategory::Weights);
    const size_t row = dtype_bytes(whole.dtype(), Kr), stride = dtype_bytes(whole.dtype(), whole.size(1));
    const char* src = static_cast<const char*>(whole.raw()) + static_cast<size_t>(rank) * row;
    char* dst = static_cast<char*>(shard.raw());
    for (int64_t m = 0; m < M; ++m) std::memcpy(dst + static_cast<size_t>(m) * row, src + static_cast<size_t>(m) * stride, row);
    return shard;
  }
  // (M, N, K/N) -> (N, M, K/N): shard t is the contiguous block t.
  Tensor blocks = Tensor::empty({size, M, Kr}, whole.dtype(), whole.device(), MemoryCategory::Workspace);
  ops::swap_outer_axes(whole.view({M, size, Kr}), blocks);
  return blocks.slice_rows(rank, rank + 1).view({M, Kr}).clone(MemoryCategory::Weights);
}

Tensor tensor_parallel_gather(dist::Communicator& tp, const Tensor& shard, TensorParallelLayout layout) {
  const int64_t N = tp.world_size();
  if (!is_sharded(layout) || N == 1) return shard;
  Tensor gathered = Tensor::empty({N * shard.numel()}, shard.dtype(), shard.device(), MemoryCategory::Workspace);
  tp.all_gather(shard, gathered);
  if (layout == TensorParallelLayout::Rows) {
    Shape shape = shard.shape();
    shape[0] *= N;
    return gathered.view(shape);
  }
  const int64_t M = shard.size(0), Kr = shard.size(1);
  Tensor whole = Tensor::empty({M, N * Kr}, shard.dtype(), shard.device(), MemoryCategory::Workspace);
  Tensor whole_blocks = whole.view({M, N, Kr});
  ops::swap_outer_axes(gathered.view({N, M, Kr}), whole_blocks);
  return whole;
}

void scatter_heads(dist::Communicator& sp, const Tensor& x, int64_t heads, Tensor& y) {
  check_exchange("scatter_heads", sp, x, y, heads);
  const int64_t P = sp.world_size(), Ts = x.size(0), chunk = x.size(1) / P;
  if (P == 1) return y.copy_from(x);
  // (Ts, P, chunk) -> (P, Ts, chunk): chunk c (rank c's heads of this rank's tokens) contiguous, then exchanged.
  Tensor packed = staging_like(x);
  Tensor packed_view = packed.view({P, Ts, chunk});
  ops::swap_outer_axes(x.view({Ts, P, chunk}), packed_view);
  sp.all_to_all(packed, y);
}

int64_t sequence_parallel_kv_heads(int64_t heads, int64_t P) {
  if (heads % P == 0) return heads;
  SWIFT_CHECK(P % heads == 0,
              "--sequence_parallel_size {}: the model has {} key/value heads; Ulysses splits them over the group or "
              "repeats them, which needs one to divide the other",
              P, heads);
  return P;
}

void repeat_heads(const Tensor& x, int64_t heads, int64_t repeats, Tensor& y) {
  const int64_t T = x.size(0), D = x.size(1) / heads;
  SWIFT_CHECK(y.size(0) == T && y.size(1) == heads * repeats * D, "repeat_heads: {} -> {} for {} heads x {}", x.str(),
              y.str(), heads, repeats);
  // (R, T*H, D) holds R copies of x; swapped to (T*H, R, D) it is y.
  Tensor copies = Tensor::empty({repeats, T * heads, D}, x.dtype(), x.device(), MemoryCategory::Activations);
  const Tensor rows = x.view({T * heads, D});
  for (int64_t j = 0; j < repeats; ++j) copies.slice_rows(j, j + 1).view({T * heads, D}).copy_from(rows);
  Tensor y_view = y.view({T * heads, repeats, D});
  ops::swap_outer_axes(copies, y_view);
}

void sum_repeated_heads(const Tensor& y, int64_t heads, int64_t repeats, Tensor& x) {
  const int64_t T = x.size(0), D = x.size(1) / heads;
  SWIFT_CHECK(y.size(0) == T && y.size(1) == heads * repeats * D, "sum_repeated_heads: {} -> {} for {} heads x {}",
              y.str(), x.str(), heads, repeats);
  Tensor copies = Tensor::empty({repeats, T * heads, D}, y.dtype(), y.device(), MemoryCategory::Activations);
  ops::swap_outer_axes(y.view({T * heads, repeats, D}), copies);
  Tensor sum = x.view({T * heads, D});
  sum.copy_from(copies.slice_rows(0, 1).view({T * heads, D}));
  for (int64_t j = 1; j < repeats; ++j) ops::add(sum, copies.slice_rows(j, j + 1).view({T * heads, D}), sum);
}

void gather_heads(dist::Communicator& sp, const Tensor& x, int64_t heads, Tensor& y) {
  check_exchange("gather_heads", sp, y, x, heads);
  const int64_t P = sp.world_size(), Ts = y.size(0), chunk = y.size(1) / P;
  if (P == 1) return y.copy_from(x);
  // x's rows [s*Ts, (s+1)*Ts) go back to rank s; what arrives is (P, Ts, chunk): rank s's heads of our tokens.
  Tensor received = staging_like(x);
  sp.all_to_all(x, received);
  Tensor y_view = y.view({Ts, P, chunk});
  ops::swap_outer_axes(received.view({P, Ts, chunk}), y_view);
}

}  // namespace swift::model
