// model/parallel.cpp — the padded SP micro-batch, Ulysses' head exchange, and the tensor-parallel shard / gather of
// one tensor (model/parallel.h).
//
// Invariants: vocabulary shards (VocabRows) may differ by one row between ranks: their gather learns every rank's
// row count first (one small all-reduce) and gathers blocks padded to the largest. The exchange functions check their shapes against the group size and name what is wrong; they
// allocate their staging buffer per call (Activations memory), on the tensors' device. Shards are new tensors (the
// whole one can be freed); shard then gather gives the whole tensor back bit for bit (bytes are only moved). On the
// host a shard reads only its own bytes of the whole tensor (a mapped file: only the shard's pages).
#include "model/parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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
  return layout == TensorParallelLayout::Rows || layout == TensorParallelLayout::Columns ||
         layout == TensorParallelLayout::VocabRows;
}

VocabRange vocab_shard_range(int64_t vocab, int rank, int size) {
  SWIFT_CHECK(size >= 1 && rank >= 0 && rank < size, "vocabulary shard: rank {} of a group of {}", rank, size);
  SWIFT_CHECK(vocab >= size, "--tensor_model_parallel_size {}: the vocabulary of {} rows cannot be split over {} ranks",
              size, vocab, size);
  const int64_t first = rank * vocab / size, end = (rank + 1) * vocab / size;
  return {first, end - first};
}

Tensor tensor_parallel_shard(const Tensor& whole, TensorParallelLayout layout, int rank, int size, const std::string& what) {
  if (!is_sharded(layout) || size == 1) return whole;
  if (layout == TensorParallelLayout::VocabRows) {
    const VocabRange r = vocab_shard_range(whole.size(0), rank, size);
    return whole.slice_rows(r.first, r.first + r.count).clone(MemoryCategory::Weights);
  }
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
  if (layout == TensorParallelLayout::VocabRows) {  // uneven shards: every rank's row count, then padded blocks
    const int64_t rows = shard.size(0), row_elems = shard.numel() / std::max<int64_t>(rows, 1);
    std::vector<float> mine(static_cast<size_t>(N), 0.0f);
    mine[static_cast<size_t>(tp.rank())] = static_cast<float>(rows);
    Tensor counts = Tensor::from_f32({N}, mine).to(shard.device(), MemoryCategory::Workspace);
    tp.all_reduce(counts);
    const Tensor counts_host = counts.to(Device::cpu(), MemoryCategory::Workspace);
    int64_t most = 0, vocab = 0;
    std::vector<int64_t> count(static_cast<size_t>(N));
    for (int64_t r = 0; r < N; ++r) {
      count[static_cast<size_t>(r)] = static_cast<int64_t>(counts_host.data<float>()[r]);
      most = std::max(most, count[static_cast<size_t>(r)]);
      vocab += count[static_cast<size_t>(r)];
    }
    Tensor padded = shard;
    if (rows < most) {
      Shape shape = shard.shape();
      shape[0] = most;
      padded = Tensor::zeros(shape, shard.dtype(), shard.device(), MemoryCategory::Workspace);
      padded.slice_rows(0, rows).copy_from(shard);
    }
    Tensor gathered = Tensor::empty({N * padded.numel()}, shard.dtype(), shard.device(), MemoryCategory::Workspace);
    tp.all_gather(padded, gathered);
    Shape shape = shard.shape();
    shape[0] = vocab;
    Tensor whole = Tensor::empty(shape, shard.dtype(), shard.device(), MemoryCategory::Workspace);
    const Tensor blocks = gathered.view({N * most, row_elems});
    Tensor whole_rows = whole.view({vocab, row_elems});
    int64_t first = 0;
    for (int64_t r = 0; r < N; ++r) {
      const int64_t n = count[static_cast<size_t>(r)];
      whole_rows.slice_rows(first, first + n).copy_from(blocks.slice_rows(r * most, r * most + n));
      first += n;
    }
    return whole;
  }
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

ops::CrossEntropyStats vocab_parallel_cross_entropy(dist::Communicator& tp, const Tensor& hidden, const Tensor& head,
                                                    const Tensor& labels, int64_t vocab_offset, float grad_scale,
                                                    Tensor& dhidden, Tensor& dhead) {
  const int64_t T = hidden.size(0), N = tp.world_size();
  const Device dev = hidden.device();
  // Pass 1 on this rank's rows: per token lse, label logit (0 unless the label is ours), max logit, argmax.
  Tensor stats = Tensor::empty({3, T}, DType::F32, dev, MemoryCategory::Workspace);
  Tensor lse = stats.slice_rows(0, 1).view({T}), label = stats.slice_rows(1, 2).view({T});
  Tensor max_logit = stats.slice_rows(2, 3).view({T});
  Tensor argmax = Tensor::empty({T}, DType::I32, dev, MemoryCategory::Workspace);
  ops::cross_entropy_shard_stats(hidden, head, labels, vocab_offset, lse, label, max_logit, argmax);
  // Every rank's terms (a few floats per token), combined on the host in rank order: identical results everywhere.
  Tensor all_stats = Tensor::empty({N * 3 * T}, DType::F32, dev, MemoryCategory::Workspace);
  Tensor all_argmax = Tensor::empty({N * T}, DType::I32, dev, MemoryCategory::Workspace);
  tp.all_gather(stats, all_stats);
  tp.all_gather(argmax, all_argmax);
  const Tensor s_host = all_stats.to(Device::cpu(), MemoryCategory::Workspace);
  const Tensor a_host = all_argmax.to(Device::cpu(), MemoryCategory::Workspace);
  const Tensor l_host = labels.device().is_cpu() ? labels : labels.to(Device::cpu(), MemoryCategory::Workspace);
  const float* st = s_host.data<float>();
  const int32_t* arg = a_host.data<int32_t>();
  const int32_t* lab = l_host.data<int32_t>();
  auto at = [&](int64_t r, int64_t k, int64_t t) { return st[(r * 3 + k) * T + t]; };
  std::vector<float> whole_lse(static_cast<size_t>(T), 0.0f);
  ops::CrossEntropyStats out;
  for (int64_t t = 0; t < T; ++t) {
    if (lab[t] == ops::CrossEntropyOptions{}.ignore_index) continue;
    double m = -INFINITY;
    for (int64_t r = 0; r < N; ++r) m = std::max(m, static_cast<double>(at(r, 0, t)));
    double sum = 0.0;
    float label_logit = 0.0f;  // the owning rank's; the others contribute exact zeros
    int64_t best = 0;
    for (int64_t r = 0; r < N; ++r) {
      sum += std::exp(static_cast<double>(at(r, 0, t)) - m);
      label_logit += at(r, 1, t);
      if (at(r, 2, t) > at(best, 2, t)) best = r;  // strict: the first maximal id (ranks hold ascending rows)
    }
    const float l = static_cast<float>(m + std::log(sum));
    whole_lse[static_cast<size_t>(t)] = l;
    out.tokens += 1;
    out.loss_sum += static_cast<double>(l - label_logit);
    out.correct += arg[best * T + t] == lab[t] ? 1 : 0;
  }
  if (!dhidden.defined() && !dhead.defined()) return out;
  // Pass 2 with the whole vocabulary's lse: this rank's share of dhidden (summed over the group) and its dhead rows.
  const Tensor lse_whole = Tensor::from_f32({T}, whole_lse).to(dev, MemoryCategory::Workspace);
  ops::cross_entropy_shard_backward(hidden, head, labels, vocab_offset, lse_whole, grad_scale, dhidden, dhead);
  if (dhidden.defined()) tp.all_reduce(dhidden);
  return out;
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
