// model/parallel.h — what the trainable model needs for Ulysses sequence parallelism (--sequence_parallel_size) and
// Megatron tensor parallelism (--tensor_model_parallel_size): the groups it talks to, the padded micro-batch and the
// head exchange around attention.
//
// Sequence parallelism (SP, P ranks, all holding every parameter):
//  - The P ranks of a group take the same micro-batch. It is padded to Tg = ceil(T / P) * P tokens by a sequence
//    of its own (ids pad, labels -100, positions 0..): it attends to nothing else and carries no loss, so every
//    gradient it contributes is exactly zero. Rank r keeps tokens [r * Tg/P, (r+1) * Tg/P) for everything per token
//    (embedding, norms, linears, MLP, loss); rope and attention see all Tg tokens with H/P heads after scatter_heads.
//  - Labels are shifted on the whole batch before slicing (MicroBatch::labels already are); the loss gradient is
//    scaled by 1 / (global target tokens) by the caller; parameter gradients are partial sums over the rank's
//    tokens, summed over the group (and the data-parallel ranks) afterwards.
// Tensor parallelism (TP, N ranks, Megatron's column / row split; all ranks of a group take the same micro-batch):
//  - Column-parallel q, k, v, gate, up: rank t keeps output rows [t*M/N, (t+1)*M/N) of W and bias (its Hq/N, Hkv/N
//    heads, F/N intermediate units); LoRA: A replicated, B sharded by rows. The input gradient of their shared input
//    is a partial sum, all-reduced over the group before the norm's backward.
//  - Row-parallel o, down: rank t keeps input columns [t*K/N, (t+1)*K/N) of W; LoRA: A sharded by columns, B
//    replicated; each rank's (T, C) output (its columns' product plus its LoRA term scale * (x_t A_t^T) B^T, whose
//    sum over ranks is the LoRA term of the whole (T, r) product) is all-reduced; the bias is added by rank 0 only.
//  - Vocabulary-parallel embedding and LM head (Megatron's VocabParallelEmbedding and parallel cross-entropy): rank t
//    keeps vocabulary rows [t*V/N, (t+1)*V/N) (integer division: uneven shards, sizes differing by one, when N does not
//    divide V; no padding rows) of the embedding table and of the head (a tied head is the same shard). The lookup
//    gives zero rows for other ranks' ids and is all-reduced; the loss combines every rank's per-token lse, label
//    logit and argmax (vocab_parallel_cross_entropy); dhidden is the group's sum of the shards' terms.
//  - Norms replicated. So parameters come in five layouts (TensorParallelLayout): whole with the whole gradient on
//    every rank; whole with partial gradients to sum over the group (LoRA A of column-parallel and B of row-parallel
//    layers, q/k norms, row-parallel biases); row shards; column shards; vocabulary row shards.
//
// Invariants: every rank of a group calls the same collectives in the same order (the layers are walked in the same
// order everywhere, and the padded length is the same on every rank of an SP group because they hold one batch);
// the exchange only moves bytes, so SP results differ from one process by summation order only.
#pragma once

#include <cstdint>
#include <string>

#include "core/communicator.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace swift::model {

struct MicroBatch;  // model/training.h

// How a trainable parameter lies over the tensor-parallel group.
enum class TensorParallelLayout : uint8_t {
  Replicated,  // the whole tensor, the whole gradient, on every rank
  Partial,     // the whole tensor on every rank; each holds a partial gradient: sum them over the group
  Rows,        // rows [t*M/N, (t+1)*M/N) of the whole (M, ...) tensor
  Columns,     // columns [t*K/N, (t+1)*K/N) of the whole (M, K) tensor
  VocabRows,   // rows [t*V/N, (t+1)*V/N) of the whole (V, C) embedding / head (uneven when N does not divide V)
};
bool is_sharded(TensorParallelLayout layout);

// The group's rank `rank` share of `whole` (a new tensor on whole's device; Replicated / Partial: whole itself).
// Throws naming `what` when the split dimension is not divisible by `size`.
Tensor tensor_parallel_shard(const Tensor& whole, TensorParallelLayout layout, int rank, int size, const std::string& what);
// The whole tensor from every rank's `shard` (collective over tp: every rank calls it and gets the result).
Tensor tensor_parallel_gather(dist::Communicator& tp, const Tensor& shard, TensorParallelLayout layout);
// Rank `rank`'s vocabulary rows [first, first + count) of a vocabulary of `vocab` over `size` ranks (VocabRows).
struct VocabRange {
  int64_t first = 0, count = 0;
};
VocabRange vocab_shard_range(int64_t vocab, int rank, int size);

// The LM head + cross-entropy over a vocabulary split by rows (collective over tp; every rank of the group passes the
// same hidden and labels and its own head shard of rows starting at vocab_offset). Returns the whole vocabulary's
// statistics (identical on every rank: each combines the same gathered per-token terms in the same order). With
// dhidden defined it is written with grad_scale * d loss_sum / d hidden (the group's sum, whole on every rank); dhead
// (the shard's shape) += the shard's gradient. hidden: (T, C); head: (Vr, C); labels: (T) I32 whole-vocabulary ids.
ops::CrossEntropyStats vocab_parallel_cross_entropy(dist::Communicator& tp, const Tensor& hidden, const Tensor& head,
                                                    const Tensor& labels, int64_t vocab_offset, float grad_scale,
                                                    Tensor& dhidden, Tensor& dhead);

// The groups of this rank (not owned; null or a group of one: that parallelism is off).
struct ParallelGroups {
  dist::Communicator* sequence = nullptr;  // Ulysses SP group: same micro-batch, tokens split
  dist::Communicator* tensor = nullptr;    // Megatron TP group: same micro-batch, heads / intermediate split
  int sp_size() const { return sequence ? sequence->world_size() : 1; }
  int sp_rank() const { return sequence ? sequence->rank() : 0; }
  int tp_size() const { return tensor ? tensor->world_size() : 1; }
  int tp_rank() const { return tensor ? tensor->rank() : 0; }
};

// `batch` (host tensors) padded to a multiple of `sp_size` tokens: the extra tokens (id `pad_id`, label -100,
// positions 0, 1, ...) form one more sequence in cu_seqlens. Returns `batch` itself when nothing is missing.
MicroBatch pad_for_sequence_parallel(const MicroBatch& batch, int64_t sp_size, int32_t pad_id);

// Ulysses' exchange over the SP group (P ranks), both directions; tensors on the group's device, any float dtype.
//   scatter_heads: x (Ts, H*D), this rank's Ts tokens with every head -> y (P*Ts, H/P*D), every token of the
//                  group with this rank's heads [r*H/P, (r+1)*H/P) (rank s's tokens at rows [s*Ts, (s+1)*Ts)).
//   gather_heads:  the inverse: x (P*Ts, H/P*D) -> y (Ts, H*D).
// One all_to_all each, plus one swap_outer_axes on the side whose layout is (Ts, P, H/P*D).
void scatter_heads(dist::Communicator& sp, const Tensor& x, int64_t heads, Tensor& y);
void gather_heads(dist::Communicator& sp, const Tensor& x, int64_t heads, Tensor& y);

// Key/value heads the SP exchange splits: `heads` when P divides it; else P (each rank gets one copy of the key/value
// head its query heads use, as ms-swift repeats them) when `heads` divides P; otherwise an error naming both.
int64_t sequence_parallel_kv_heads(int64_t heads, int64_t P);
// repeat_heads: x (T, H*D) -> y (T, H*R*D), head h*R + j of y = head h of x (j < R).
// sum_repeated_heads: the adjoint: y (T, H*R*D) -> x (T, H*D), head h of x = the sum over j in order of y's h*R + j.
void repeat_heads(const Tensor& x, int64_t heads, int64_t repeats, Tensor& y);
void sum_repeated_heads(const Tensor& y, int64_t heads, int64_t repeats, Tensor& x);

}  // namespace swift::model
