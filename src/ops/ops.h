// ops/ops.h — the operation interface every layer above uses. One function per op; each dispatches on the
// device of its tensors (CPU now; CUDA adds kernels without changing callers). The plain CPU reference of
// every op lives in namespace swift::ops::ref (ops/reference.h) and is the oracle in tests.
//
// Shape letters (used in the comments on every tensor argument):
//   T  tokens of a packed batch (all sequences concatenated)     B  sequences in the batch
//   C  hidden size      F  intermediate (MLP) size     V  vocabulary size
//   Hq query heads      Hkv key/value heads            D  head dim
//   N  rows, K inner dimension, M output columns (generic matmul)
//   r  LoRA rank
//
// Invariants:
//  - Activations are F32 on the CPU. Weights may be F32, BF16 or F16 (converted on the fly, accumulation in
//    fp32). Outputs are written with `=`, never accumulated, unless the argument says `accumulate`.
//  - All tensors are contiguous row-major. Ops check shapes and dtypes and throw swift::Error naming the op.
//  - Variable-length batches are described by `cu_seqlens` (I32, B+1, starting at 0, non-decreasing, ending
//    at T): no token attends across a sequence boundary.
//  - Backward ops (training section below): gradients of parameters accumulate (`+=`) into F32 tensors;
//    gradients of activations are written (`=`) unless the argument says `accumulate`. An undefined gradient
//    output is not computed (frozen parameter, or an input that needs no gradient). Trainable parameters and
//    optimizer states are F32; frozen weights keep their dtype (F32/BF16/F16).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "ops/philox.h"

namespace swift::ops {

// ---- element-wise and casts ---------------------------------------------------------------------
// dst = src converted to dst's dtype (F32/BF16/F16; same numel).
void cast(const Tensor& src, Tensor& dst);
// out = a + b (same shape F32); out may alias a or b.
void add(const Tensor& a, const Tensor& b, Tensor& out);
// out = silu(gate) * up                       gate, up, out: (N, F) F32; out may alias gate or up.
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out);

// ---- layout ---------------------------------------------------------------------------------------
// y[b][a][:] = x[a][b][:]                     x: (A, B, E); y: (B, A, E); any dtype (bytes are copied), the same for
//                                            both; separate buffers. Sequence parallelism packs (T, P, H/P * D)
//                                            heads into (P, T, H/P * D) chunks for all_to_all and back; tensor
//                                            parallelism joins gathered column shards (P, M, K/P) into (M, P, K/P).
void swap_outer_axes(const Tensor& x, Tensor& y);
// y[:, y_col + j] = x[:, x_col + j] for j < cols   x: (N, X); y: (N, Y); any dtype (bytes are copied), the same for
//                                            both; x_col + cols <= X, y_col + cols <= Y; separate buffers. Splits a
//                                            packed (N, Nq + 2 Nkv) q/k/v product into q, k and v, and packs their
//                                            gradients back.
void copy_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t cols);

// ---- embedding ----------------------------------------------------------------------------------
// out[t] = table[ids[t]]                      table: (V, C) F32/BF16/F16; ids: (T) I32; out: (T, C) F32.
// Throws naming the offending id when ids[t] is outside [0, V). With ids and out on a CUDA device the table may also
// be host memory mapped for that device (host_mapped_copy): the kernel reads the rows over the host link.
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
// A copy of CUDA tensor t in page-locked host memory mapped for t's device (a CPU tensor whose storage's mapped_for()
// is that device), for tables that only a gather reads (embedding): the device memory can then be freed. The copy is
// made after the work enqueued on t's device so far.
Tensor host_mapped_copy(const Tensor& t);
// Vocabulary-parallel lookup (Megatron's VocabParallelEmbedding, one rank's part): table holds rows
// [vocab_offset, vocab_offset + V) of the whole table; out[t] = table[ids[t] - vocab_offset] for ids in that range
// and 0 for the others (another rank's rows: the group's sum of every rank's out is the whole lookup).
//   table: (V, C) F32/BF16/F16; ids: (T) I32, each >= 0; vocab_offset >= 0; out: (T, C) F32.
void embedding_shard(const Tensor& table, const Tensor& ids, int64_t vocab_offset, Tensor& out);

// ---- matmul ---------------------------------------------------------------------------------------
// y = x @ w^T (+ bias)                       x: (N, K) F32; w: (M, K) F32/BF16/F16; bias: (M) or undefined;
//                                            y: (N, M) F32. With accumulate, y += x @ w^T (+ bias) instead of =.
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate = false);
// y = residual + x @ w^T (+ bias)            as linear; residual: y's shape and dtype, y itself (then the same as
//                                            linear with accumulate) or apart from it. On CUDA the residual is the
//                                            product's C input: no copy of it into y first (the residual stream's
//                                            o / down products, which keep their input for the backward).
void linear_residual(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual, Tensor& y);
// C = alpha * op(A) @ op(B) + beta * C        A: (N, K) or (K, N) when trans_a; B: (K, M) or (M, K) when
//                                            trans_b; C: (N, M). All F32. For backward passes.
void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c);

// ---- normalisation ------------------------------------------------------------------------------
// y = x / sqrt(mean(x^2) + eps) * weight      x, y: (N, C) F32; weight: (C) F32/BF16/F16;
//                                            rstd: (N) F32 output (saved for backward) or undefined.
// Used for hidden states (C = hidden) and for Qwen3's per-head q/k norm (N = T*H, C = D).
void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd);

// ---- rotary position embedding -----------------------------------------------------------------------
// Hugging Face `rope_type`s (config.json "rope_scaling" or "rope_parameters").
enum class RopeType { Default, Linear, Dynamic, Yarn, Llama3 };

struct RopeConfig {
  RopeType type = RopeType::Default;
  double theta = 10000.0;
  double factor = 1.0;                             // linear, dynamic, yarn, llama3
  int64_t original_max_position_embeddings = 0;    // yarn, llama3 (0: max_position_embeddings); dynamic ignores
                                                   // it and scales from max_position_embeddings, as transformers
  int64_t max_position_embeddings = 2048;          // from config.json
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  double beta_fast = 32.0, beta_slow = 1.0;        // yarn
  double attention_factor = 0.0;                   // yarn: 0 = derive from factor (and mscale, mscale_all_dim)
  double mscale = 0.0, mscale_all_dim = 0.0;       // yarn (DeepSeek-style); 0 = unset
  bool truncate = true;                            // yarn: round the correction range (HF default true)
};
RopeType rope_type_from_string(const std::string& name);  // "default", "linear", "dynamic", "yarn", "llama3"

// Inverse frequencies (D/2) and the attention scaling applied to cos/sin, as Hugging Face computes them.
// `seq_len` matters only for Dynamic (NTK scaling grows once seq_len exceeds original max positions).
struct RopeFrequencies {
  std::vector<float> inv_freq;   // (D/2)
  float attention_scaling = 1.0f;
};
RopeFrequencies rope_frequencies(const RopeConfig& config, int64_t head_dim, int64_t seq_len);

// Rotates x in place (Hugging Face's rotate_half layout: pairs (i, i + D/2)).
//   x: (T, H, D) F32; positions: (T) I32 (restart at 0 per packed sequence).
void rope(Tensor& x, const Tensor& positions, const RopeFrequencies& freqs);
// y[:, y_col : y_col + H*D] = rope(x[:, x_col : x_col + H*D]), each block seen as (T, H, D); with backward,
// rope_backward's rotation instead. x: (T, X), y: (T, Y), one activation dtype, separate buffers; D = 2 *
// freqs.inv_freq.size(). The same bits as copying the block (copy_columns) and rotating it in place. Packed q/k/v:
// q and k roped out of the packed product, their gradients rotated back into the packed gradient.
void rope_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t heads, const Tensor& positions,
                  const RopeFrequencies& freqs, bool backward);
// Packed q/k/v in one op (full fine-tuning's one q/k/v product): forward (backward false) q = rope(packed[:, 0 : nq]),
// k = rope(packed[:, nq : nq + nkv]), v = packed[:, nq + nkv :]; backward: the packed gradient's three blocks =
// rope_backward(q), rope_backward(k) and v (q, k, v holding dq, dk, dv). The same bits as rope_columns twice and
// copy_columns (one launch on CUDA where rows are 16-byte aligned and D % 16 == 0).
//   packed: (T, nq + 2 nkv); q: (T, nq); k, v: (T, nkv); nq, nkv multiples of D = 2 * freqs.inv_freq.size(); one
//   activation dtype; positions: (T) I32.
void rope_qkv(Tensor& packed, Tensor& q, Tensor& k, Tensor& v, const Tensor& positions, const RopeFrequencies& freqs,
              bool backward);

// ---- attention ------------------------------------------------------------------------------------------
// Causal scaled-dot-product attention over a packed variable-length batch with grouped-query heads.
//   q: (T, Hq, D); k, v: (T, Hkv, D); out: (T, Hq, D); all F32. Hq % Hkv == 0; query head h uses kv head
//   h / (Hq / Hkv). cu_seqlens: (B+1) I32. scale: usually 1/sqrt(D). window > 0 limits each query to the
//   `window` most recent keys (itself included), as Mistral's sliding window; 0 means unlimited.
//   lse: (Hq, T) F32 log-sum-exp of the scaled scores per query (saved for backward) or undefined.
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
               int64_t window, Tensor& out, Tensor& lse);

// Validates cu_seqlens against a token count; throws naming what is wrong.
void check_cu_seqlens(const Tensor& cu_seqlens, int64_t tokens, const char* op);

// ---- host mirrors (ops/host_mirror.cpp) ----------------------------------------------------------------------
// Some ops read a small device operand on the host: attention the lengths in cu_seqlens, cross_entropy the labels.
// Reading it back is a synchronising copy that drains the device's stream (the 0.5B training step made 49 of them).
// The caller that uploaded the operand from a host tensor registers that tensor as its mirror for as long as the
// HostMirror lives (this thread only); ops then read the mirror. The caller guarantees that the device tensor holds
// the host tensor's values and is not written while the mirror lives. Matching is by data pointer, dtype and
// element count; nested mirrors are fine (the latest match wins).
class HostMirror {
 public:
  HostMirror(const Tensor& device, const Tensor& host);
  ~HostMirror();
  HostMirror(const HostMirror&) = delete;
  HostMirror& operator=(const HostMirror&) = delete;
};
// `t`'s values on the host: `t` itself when it is on the CPU, else its registered mirror, else a synchronising copy.
Tensor host_values(const Tensor& t);

// =====================================================================================================
// Training: backward ops, LoRA linear, chunked cross-entropy, optimizer. No autograd graph: each block's
// forward saves what these need (or recomputes it) and its backward calls them explicitly.
// =====================================================================================================

// ---- backward of the forward ops ----------------------------------------------------------------------
// dtable[ids[t]] += dout[t] for every t with ids[t] != padding_id, in token order.
//   dout: (T, C) F32; ids: (T) I32, each in [0, V) or equal to padding_id; dtable: (V, C) F32 (+=).
//   padding_id: the row nn.Embedding(padding_idx=...) never updates (Hugging Face llama passes
//   config.pad_token_id), or -1 for none; tokens with that id are skipped. A tied lm_head still gets its
//   gradient for that row from the loss (cross_entropy's dhead).
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable, int64_t padding_id = -1);
// Backward of embedding_shard: dtable[ids[t] - vocab_offset] += dout[t] for every t whose id lies in
// [vocab_offset, vocab_offset + V) and is not padding_id (a whole-vocabulary id), in token order; other ids are skipped.
//   dout: (T, C) F32; ids: (T) I32, each >= 0 or equal to padding_id; dtable: (V, C) F32 (+=).
void embedding_shard_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_offset, Tensor& dtable,
                              int64_t padding_id = -1);

// Backward of y = x w^T (+ bias).
//   dy: (N, M) F32; x: (N, K) F32 (read only for dw; may be undefined otherwise); w: (M, K) F32/BF16/F16.
//   dx: (N, K) F32 = dy @ w (+= with accumulate_dx: q/k/v share their input), or undefined.
//   dw: (M, K) F32 += dy^T @ x (= with accumulate_dw false: its old values are not read, as a gradient zeroed
//   lazily by TrainableModel::defer_zero_grad), or undefined (frozen weight).
//   dbias: (M) F32 += sum over the N rows of dy, or undefined.
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                     bool accumulate_dx = false, bool accumulate_dw = true);

// Backward of rmsnorm, from its input and the rstd it saved (Hugging Face's fp32 LlamaRMSNorm math:
// xhat = x * rstd, g = dy * weight, dx = rstd * g - x * rstd^3 * mean(g * x), dweight += sum_rows dy * xhat).
//   dy, x: (N, C) F32; weight: (C) F32/BF16/F16; rstd: (N) F32 from rmsnorm.
//   dx: (N, C) F32 = (+= with accumulate_dx: the residual stream's gradient); without accumulate_dx it may be
//   dy itself (in place). dweight: (C) F32 += or undefined (frozen norm, as under LoRA).
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                      Tensor& dweight, bool accumulate_dx = false);

// Backward of rope: rotates dx (T, H, D) F32 in place by the transposed rotation (angle -theta, same
// attention_scaling), turning the gradient of rope's output into the gradient of its input. Same positions
// and frequencies as the forward (per sequence for dynamic NTK, as the model applies them).
void rope_backward(Tensor& dx, const Tensor& positions, const RopeFrequencies& freqs);

// Backward of out = silu(gate) * up, as torch's autograd computes it in fp32:
//   dup = dout * silu(gate);  dgate = (dout * up) * sigmoid(gate) * (1 + gate * (1 - sigmoid(gate))).
//   dout, gate, up, dgate, dup: (N, F) F32. Element-wise: dgate may be gate or dout, dup may be up or dout
//   (in place); dgate and dup must be different tensors.
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup);

// Backward of attention (flash-attention-2 style: the probabilities are recomputed per block from q, k and
// the forward's lse; nothing of size T x T is stored).
//   dout, q, out: (T, Hq, D) F32; k, v: (T, Hkv, D) F32; lse: (Hq, T) F32 — out and lse as the forward wrote
//   them, with the same cu_seqlens (B+1), scale and window.
//   dq: (T, Hq, D) F32 =; dk, dv: (T, Hkv, D) F32 =, each summed over the Hq/Hkv query heads of its group.
//   dq, dk, dv are the gradients of the q, k, v that attention saw (after rope): apply rope_backward next.
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, float scale, int64_t window, Tensor& dq,
                        Tensor& dk, Tensor& dv);

// add: the gradient passes through unchanged (da = db = dout); no op needed.

// ---- dropout (counter-based, reproducible) -------------------------------------------------------------------
// Element i of a tensor is kept when its 16-bit draw, half i % 2 of word (i / 2) % 4 of philox4x32-10(key = seed,
// counter = i / 8), is >= round(p * 2^16) (ops/philox.h: P(drop) = p to within 2^-17): the mask is a pure function of (seed, flat index, p), so a recompute, the backward and a
// CUDA kernel regenerate it exactly, and CPU results are reproducible. Kept elements are scaled by
// 1 / (1 - p) (float), as torch.nn.Dropout. The caller picks one seed per (step, micro-batch, layer, module)
// so that masks never repeat (PEFT gives each adapted module its own dropout).
// `map` (ops/philox.h DropoutMap) places the op's 2-D operand, a block of a larger tensor on a parallel rank, in that
// tensor: local element (i, j) draws index (row_offset + i) * full_cols + col_offset + j, so sequence- and
// tensor-parallel ranks draw the masks of one process. The default map is the identity (index i * cols + j).
// `keep_bits` (optional, lora_linear only): a (N, ceil(K / 8)) U8 cache of the mask, bit j of byte (n, c) = element
// (n, 8c + j) kept. When defined, a lora_linear forward that draws the mask in its one-pass kernel (CUDA) stores it
// there and the backward with the same Dropout reads it instead of drawing it twice more; the bits are the mask
// itself, so results are identical with or without it. The CPU kernels draw the mask and leave it untouched.
// `keep_bits_drawn`: keep_bits already holds this mask (swiglu_drawing_mask wrote it), so a forward (lora_xa,
// lora_linear) reads it instead of drawing and storing it (CUDA); the same mask, so the same results.
struct Dropout {
  float p = 0.0f;      // drop probability in [0, 1); 0 = identity (no RNG at all)
  uint64_t seed = 0;
  DropoutMap map{};
  Tensor keep_bits{};
  bool keep_bits_drawn = false;
};
// out = x * keep / (1 - p). x, out: same shape F32; x is seen as (numel / cols, cols) with cols its last dimension
// (identity map: flat index = element index); out may be x.
void dropout(const Tensor& x, const Dropout& dropout, Tensor& out);
// out = swiglu(gate, up), the same bits, and mask.keep_bits written with the mask of `mask` over out ((N, F), as a
// lora_xa of out with `mask` stores it; bits past F in a row's last byte are 0): the MLP's down projection's dropout
// mask drawn in the swiglu's memory-bound pass, so that down's xa pass reads it (Dropout::keep_bits_drawn) instead of
// drawing it under its own tensor-core loop. gate, up, out: (N, F) as swiglu's (out may be gate or up); mask.p in
// (0, 1), mask.keep_bits (N, ceil(F / 8)) U8 on their device, apart from them.
void swiglu_drawing_mask(const Tensor& gate, const Tensor& up, Tensor& out, const Dropout& mask);
// Whether swiglu_drawing_mask runs as one pass on out's device for these operands (CUDA: BF16 or F16, 16-byte aligned
// rows of F % 8 == 0 elements, the identity map), so that a model takes it only where it saves a pass.
bool swiglu_drawing_mask_in_one_pass(const Tensor& out, const Dropout& mask);

// ---- LoRA linear (PEFT semantics) ------------------------------------------------------------------------------
// y = x w^T (+ bias) + scale * (dropout(x) a^T) b^T
//   x: (N, K) F32; w: (M, K) F32/BF16/F16 (frozen); bias: (M) or undefined (frozen);
//   a: (r, K) F32 (lora_A); b: (M, r) F32 (lora_B); scale = alpha / r, or alpha / sqrt(r) for rsLoRA.
//   y: (N, M) F32 = (+= with accumulate); xa: (N, r) F32 written: dropout(x) a^T, saved for the backward.
//   The dropout mask of element (n, k) of x is keep(seed, dropout_index(map, n, k, K)) (identity: n * K + k):
//   recomputing regenerates it.
// DoRA (magnitude vector, row norms of w + scale * b a) is dora_linear below.
// b_product false: y gets the frozen part only (x w^T + bias) and xa is written; the B product is left to the op that
// reads y next (swiglu_lora below, for the MLP's gate and up).
void lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b, float scale,
                 const Dropout& dropout, Tensor& y, Tensor& xa, bool accumulate = false, bool b_product = true);
// lora_linear's xa alone, the same bits (and a defined dropout.keep_bits written as lora_linear writes it): for a
// recompute that needs a LoRA linear's xa but not its output (a checkpointed block's last projection).
//   x: (N, K) F32 / BF16 / F16; a: (r, K) F32; xa: (N, r) F32 = dropout(x) a^T.
void lora_xa(const Tensor& x, const Tensor& a, const Dropout& dropout, Tensor& xa);
// The B products of two LoRA linears whose outputs feed a swiglu (the MLP's gate and up; lora_linear with b_product
// false), added in the swiglu's pass: gate += scale * xa_gate b_gate^T and up += scale * xa_up b_up^T in place, each
// rounded to the activation dtype exactly as lora_linear's B product rounds y, and out = swiglu(gate, up). The same
// bits as lora_linear (with its B product) then swiglu, with gate and up read once instead of three times.
//   gate, up, out: (N, F); xa_*: (N, r) F32; b_*: (F, r) F32.
struct LoraBProduct {
  Tensor xa;
  Tensor b;
};
void swiglu_lora(Tensor& gate, Tensor& up, const LoraBProduct& gate_b, const LoraBProduct& up_b, float scale,
                 Tensor& out);
// The residual stream after a LoRA linear that wrote its frozen product alone (lora_linear without accumulate and
// with b_product false: the attention's o and the MLP's down): y = y + residual + scale * xa b^T, summed in fp32 in
// that order and rounded once to the activation dtype (the one-pass rank update's arithmetic, reading y and the
// residual once; transformers rounds the linear's output before adding the residual).
//   y (in / out), residual: (N, M), one dtype; xa: (N, r) F32; b: (M, r) F32.
void add_lora_residual(Tensor& y, const Tensor& residual, const LoraBProduct& bp, float scale);
// lora_linear's B product alone, onto y holding its frozen product: y += scale * xa b^T with lora_linear's arithmetic
// and rounding (the same bits as lora_linear with that xa): for a recompute whose xa was kept from the forward.
//   y (in / out): (N, M); xa: (N, r) F32; b: (M, r) F32.
void lora_b_product(Tensor& y, const LoraBProduct& bp, float scale);
// Whether lora_linear and lora_linear_from_xa on `device` over `rows` rows add the B product inside the frozen product
// (CUDA: on an sm_90a device, BF16, from 512 rows up, unless SWIFT_LORA_B_IN_GEMM=0): a model then runs gate and up with their B products and a plain
// swiglu, o and down with theirs and the residual (lora_linear_residual_from_xa), instead of swiglu_lora /
// add_lora_residual.
bool lora_b_product_in_gemm(Device device, int64_t rows);
// lora_linear's output with its xa given (the forward's, or lora_xa_shared's): y = x w^T (+ bias) + scale * xa b^T,
// the bits of linear then lora_b_product (where lora_b_product_in_gemm says so, one product rounded once, as
// lora_linear's there).
//   x: (N, K); w: (M, K); bias: (M) or undefined; b: (M, r) F32; xa: (N, r) F32; y: (N, M) = (+= with accumulate).
void lora_linear_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b, const Tensor& xa,
                         float scale, Tensor& y, bool accumulate = false);
// The residual stream after a LoRA linear (the attention's o, the MLP's down) with its xa given:
// y = residual + lora_linear_from_xa(x, w, bias, b, xa, scale). Where lora_b_product_in_gemm says so, one product
// rounded once: the residual is added to its fp32 sums (CUDA: our GEMM reads it as a C input), in place of
// lora_linear_from_xa's rounded output and an add's second rounding; elsewhere those two, the same bits as
// lora_linear_from_xa into y then add(residual, y, y).
//   as lora_linear_from_xa; residual: y's shape and dtype, apart from y or y itself.
void lora_linear_residual_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b,
                                  const Tensor& xa, float scale, const Tensor& residual, Tensor& y);
// Backward of lora_linear (same x, w, a, b, scale and dropout; xa from the forward).
//   dy: (N, M) F32.
//   dx: (N, K) F32 = dy w + scale * keep(dy b a) / (1 - p) (+= with accumulate_dx), or undefined.
//   da: (r, K) F32 += scale * (dy b)^T dropout(x), or undefined.   db: (M, r) F32 += scale * dy^T xa, or undefined.
void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& xa, float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db,
                          bool accumulate_dx = false);
// Backward of a LoRA linear over act = swiglu(gate, up) (the MLP's down, no bias) through the swiglu: the gradient of
// act as lora_linear_backward(dy, act, ..., dx = dgate, da, db) writes it, then swiglu_backward(dgate, gate, up, dgate,
// dup): the same bits. On CUDA with SWIFT_LORA_SWIGLU_BWD=1 act's LoRA term is added in the swiglu backward's pass (one
// pass over (N, F) fewer; off by default, measured slower: cuda_ops.h).
//   dy: (N, M); act, gate, up: (N, F), one activation dtype; w, a, b, xa, scale, dropout as lora_linear_backward's
//   (x = act). dgate, dup: (N, F) written, apart from act and from each other; dgate holds act's gradient while the op
//   runs, so it must not be gate or up; dup may be up (in place). da, db: += as lora_linear_backward's, or undefined.
void lora_linear_swiglu_backward(const Tensor& dy, const Tensor& act, const Tensor& w, const Tensor& a,
                                 const Tensor& b, const Tensor& xa, float scale, const Dropout& dropout,
                                 const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup, Tensor& da,
                                 Tensor& db);
// Several LoRA linears that read the same input x (a layer's q, k and v, or its gate and up), with the passes over x
// shared where the backend can: on CUDA the xa passes, and the backward's da passes, of up to 3 linears run as one
// launch whose blocks read x together. The same bits as the single ops called in order.
struct LoraSharedXa {
  Tensor a;         // (r, K) F32
  Dropout dropout;  // a defined keep_bits is written as lora_xa writes it
  Tensor xa;        // (N, r) F32, written
};
// lora_xa(x, a, dropout, xa) for each job.
void lora_xa_shared(const Tensor& x, const std::vector<LoraSharedXa>& jobs);
struct LoraSharedBackward {
  Tensor dy, w, a, b, xa;  // as lora_linear_backward's
  Dropout dropout;
  Tensor da, db;           // += as lora_linear_backward's, or undefined
  Tensor g;                // (N, r) F32 given: the job's g = dy b, its db already added (swiglu_backward_lora_dy)
};
// lora_linear_backward for each job (at least one), their input gradients summed into dx (defined) in this order:
// the frozen products' in job order (the first job writes dx, with accumulate_dx adds onto it; the others add), then
// each job's LoRA term in job order, each sum rounded to dx's dtype (so that one pass over dx can add every term).
// da and db as lora_linear_backward's. A job with g given skips its first step (g = dy b, db += scale dy^T xa: made
// by the caller as lora_linear_backward makes them, so the same bits), and uses g for its dx term and da.
void lora_linear_backward_shared(const Tensor& x, const std::vector<LoraSharedBackward>& jobs, float scale, Tensor& dx,
                                 bool accumulate_dx = false);
// The MLP's backward from act's gradient into gate's and up's LoRA linears: swiglu_backward(dout, gate, up, dgate,
// dup), then for each of gate's and up's LoRA linears the first step of its backward over the gradient just made:
// g = dgate b (F32, written) and db += scale dgate^T xa (dup for up's), as lora_linear_backward makes them (the same
// bits). lora_linear_backward_shared over h2 with these g given then runs the rest. On CUDA with SWIFT_LORA_SWIGLU_DY=1
// (BF16, r 8, rows of 16-byte multiples) one pass over the (N, F) tensors, in which dgate and dup are not read back for
// g and db (off by default: measured no faster, cuda_ops.h); otherwise the ops one after the other.
//   dout, gate, up, dgate, dup as swiglu_backward's (dgate may be dout and dup may be up: in place).
//   b: (F, r) F32, xa: (N, r) F32 (the forward's), g: (N, r) F32 written, db: (F, r) F32 += or undefined.
struct LoraDyStep {
  Tensor b, xa;
  Tensor g;
  Tensor db;
};
void swiglu_backward_lora_dy(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup,
                             const LoraDyStep& gate_step, const LoraDyStep& up_step, float scale);
// Whether swiglu_backward_lora_dy on `device` may run as one pass (CUDA with SWIFT_LORA_SWIGLU_DY=1): a model takes it
// then, and otherwise the MLP's backward as before (lora_linear_swiglu_backward, the shared backward making g).
bool swiglu_backward_lora_dy_in_one_pass(Device device);

// ---- LM head + cross-entropy, chunked over tokens and vocabulary -----------------------------------------------
// Logits z = hidden head^T are computed per block of (token_block valid tokens) x (vocab_block rows of head)
// with an online log-sum-exp; the (T, V) logits never exist. Tokens whose label is ignore_index cost nothing.
// Labels are already shifted: labels[t] is the token that should follow position t.
struct CrossEntropyOptions {
  int32_t ignore_index = -100;
  int64_t token_block = 256;  // at most this many valid tokens per work item (rows of a logits block); items
                              // run in parallel, their count a multiple of the thread count
  int64_t vocab_block = 256;  // vocabulary rows per logits block (a converted block of head stays in L2)
  // CUDA: the most bytes of the fp32 logits block (row chunk x full vocabulary) it keeps, and of a converted copy
  // of the head; 0 = the backend's default (ops_cross_entropy.cpp), lowered when the device is short of memory.
  // The CPU ignores it (its blocks are token_block x vocab_block).
  int64_t device_workspace_bytes = 0;
};
struct CrossEntropyStats {
  double loss_sum = 0.0;   // sum over valid tokens of -log softmax(z)[label] (each term fp32, summed in fp64)
  int64_t tokens = 0;      // valid tokens (label != ignore_index)
  int64_t correct = 0;     // valid tokens whose argmax (first maximal index, as torch.argmax) equals the label
};
// Loss, counts, and optionally the gradients of grad_scale * loss_sum:
//   hidden: (T, C) F32; head: (V, C) F32/BF16/F16; labels: (T) I32, each in [0, V) or ignore_index.
//   dhidden: (T, C) F32 = grad_scale * d loss_sum / d hidden (rows of ignored tokens = 0), or undefined
//   (loss only). dhead: (V, C) F32 += grad_scale * d loss_sum / d head, or undefined (frozen head; tied
//   embeddings: pass the embedding's gradient). grad_scale: e.g. 1 / (valid tokens of the whole
//   accumulated batch), so micro-batches add up to the mean.
// Cost: one logits product, plus one for dhidden, plus two for dhead (a second sweep, once lse is known).
CrossEntropyStats cross_entropy(const Tensor& hidden, const Tensor& head, const Tensor& labels, float grad_scale,
                                Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options = {});
// logp[t] = log softmax(hidden[t] head^T)[labels[t]] (0 where ignored), for DPO / GRPO / KTO.
//   hidden: (T, C) F32; head: (V, C) F32/BF16/F16; labels: (T) I32; logp: (T) F32 =.
void token_logprobs(const Tensor& hidden, const Tensor& head, const Tensor& labels, Tensor& logp,
                    const CrossEntropyOptions& options = {});
// Backward of token_logprobs given dlogp (T) F32 (ignored tokens' entries are not read):
//   dhidden: (T, C) F32 = sum_t dlogp[t] d logp[t] / d hidden, or undefined; dhead: (V, C) F32 +=, or undefined.
void token_logprobs_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, const Tensor& dlogp,
                             Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options = {});

// ---- vocabulary-parallel LM head + cross-entropy (Megatron's parallel cross-entropy), one rank's part ------------
// head: (Vr, C) F32/BF16/F16 holds rows [vocab_offset, vocab_offset + Vr) of the whole (V, C) head; labels: (T) I32
// whole-vocabulary ids (>= 0) or ignore_index; hidden: (T, C) F32. z = hidden head^T is this shard's logits, chunked
// as cross_entropy (the (T, Vr) logits never exist). The caller combines the ranks' statistics over the group
// (model/parallel.h vocab_parallel_cross_entropy): lse = log sum_r exp(lse_r), label logit = the owning rank's.
// Pass 1, per token t (rows of ignored tokens are written as 0):
//   lse[t] = log sum_{v in shard} exp z[t, v];   label_logit[t] = z[t, labels[t] - vocab_offset] when the label lies
//   in the shard, else 0;   max_logit[t] = max_v z[t, v];   argmax[t] = vocab_offset + the first v reaching it.
//   lse, label_logit, max_logit: (T) F32 =; argmax: (T) I32 =.
void cross_entropy_shard_stats(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                               Tensor& lse, Tensor& label_logit, Tensor& max_logit, Tensor& argmax,
                               const CrossEntropyOptions& options = {});
// Pass 2: the shard's part of the gradients of grad_scale * sum_t (lse[t] - z[t, label]), given the whole
// vocabulary's lse (T) F32 (from the group's combination of pass 1): dz = grad_scale * (exp(z - lse) - onehot).
//   dhidden: (T, C) F32 = dz head (this shard's term: the group sums them; rows of ignored tokens 0), or undefined.
//   dhead: (Vr, C) F32 += dz^T hidden, or undefined.
void cross_entropy_shard_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                                  const Tensor& lse, float grad_scale, Tensor& dhidden, Tensor& dhead,
                                  const CrossEntropyOptions& options = {});

// ---- optimizer ---------------------------------------------------------------------------------------------------
// torch.optim.AdamW (foreach=False, amsgrad=False, maximize=False) in fp32, operation for operation:
//   param *= float(1 - lr * weight_decay)
//   exp_avg = lerp(exp_avg, grad, float(1 - beta1))                  (torch's fused lerp: one fma)
//   exp_avg_sq = fma(float(1 - beta2) * grad, grad, exp_avg_sq * float(beta2))
//   denom = sqrt(exp_avg_sq) / float(sqrt(1 - beta2^step)) + float(eps)
//   param += (float(-lr / (1 - beta1^step)) * exp_avg) / denom
// Scalars are formed in double as Python does. exp_avg and exp_avg_sq match torch bit for bit; param within
// 1 ulp (torch's CPU sqrt, from MKL, is off by 1 ulp for ~0.6% of inputs; tests/fixtures/adamw_steps.json
// matches bit for bit).
// grad_scale: every gradient element is read as float(grad * grad_scale) (one fp32 multiply, the gradients left as
// they are): clip_grad_norm_'s in-place multiply by clip_coefficient folded into the step, the same bits as clipping
// first and one pass over the gradients less. 1: the gradients as they are.
struct AdamWConfig {
  double lr = 1e-4;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  float grad_scale = 1.0f;
};
struct AdamWTensor {
  Tensor param, grad, exp_avg, exp_avg_sq;  // F32, one shape; exp_avg and exp_avg_sq start at zero
  Tensor product{};  // optional: the updated param also written here (F32, BF16 or F16, param's element count), rounded
                     // once: the copy the products of the next forward read (full fine-tuning's product weights)
};
// One step over every tensor; step = the step count including this one (torch's state["step"], 1 first).
void adamw_step(std::span<const AdamWTensor> tensors, const AdamWConfig& config, int64_t step);
// Global L2 norm of all gradients (F32 tensors), accumulated in fp64 and rounded to fp32 (torch's
// clip_grad_norm_ returns an fp32 total_norm). Deterministic: a fixed summation order for any thread count.
float grad_norm(std::span<const Tensor> grads);
// torch.nn.utils.clip_grad_norm_(max_norm, norm_type=2): total = grad_norm(grads); every grad *=
// min(1, (1 / (total + 1e-6f)) * float(max_norm)) (torch's float / tensor is reciprocal-then-multiply; always
// multiplied, as torch). Returns total (before clipping);
// a non-finite total makes the grads non-finite too (error_if_nonfinite=False): the trainer checks it.
float clip_grad_norm(std::span<const Tensor> grads, double max_norm);
// clip_grad_norm's multiplier for a total norm: min(1, (1 / (total + 1e-6f)) * float(max_norm)), NaN when total is
// NaN (torch.clamp keeps it).
float clip_coefficient(float total_norm, double max_norm);
// Every grad (F32, in place) *= factor: torch.amp.GradScaler.unscale_'s multiply by inv_scale (fp16 loss scaling,
// train/loss_scaler.h). A non-finite element stays non-finite (the trainer finds it through grad_norm).
void scale_gradients(std::span<const Tensor> grads, float factor);
// Every grad (F32) set to +0 (optimizer.zero_grad): on CUDA one launch over all of them (a LoRA model has ~400 small
// gradients: one memset each cost the 7B step ~2 ms of launches and gaps, docs/PERFORMANCE.md run 22).
void zero_gradients(std::span<const Tensor> grads);

// ---- DoRA linear (PEFT's weight-decomposed LoRA, lora/dora.py DoraLinearLayer) -------------------------------
// The weight norm, one entry per output row (PEFT: torch.linalg.norm(W + scale * B A, dim=1)), recomputed from the
// current a and b at every forward and treated as a constant by the backward (PEFT detaches it, DoRA paper 4.3).
//   w: (M, K) F32/BF16/F16; a: (r, K) F32; b: (M, r) F32; norm: (M) F32 = (sum of squares in double).
// squares: norm = the sums of squares themselves (rounded once to F32, no root): tensor parallelism's row-parallel
// linears hold a block of columns of every row, so the group all-reduces these and takes dora_norm_from_squares.
void dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, float scale, Tensor& norm,
                      bool squares = false);
// norm (M) F32 = sqrt(norm) element-wise, in place (correctly rounded on every backend: the same bits).
void dora_norm_from_squares(Tensor& norm);
// With g = magnitude / weight_norm (M) and xd = dropout(x):
//   h = xd w^T + scale * (xd a^T) b^T                    (the direction's output, before the magnitude)
//   y = x w^T + bias + g * h - xd w^T                     (= or += with accumulate)
// which is PEFT's result + (g - 1) * base(xd) + g * scale * lora(xd); with p = 0 (PEFT then reuses the base
// result) it is y = g * (x w^T + scale (x a^T) b^T) + bias.
//   x: (N, K) F32; w, bias, a, b as lora_linear; magnitude: (M) F32 (lora_magnitude_vector); weight_norm: (M) F32
//   from dora_weight_norm; y: (N, M) F32; xa: (N, r) F32 = xd a^T and h: (N, M) F32 =, both saved for the backward.
void dora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                 const Tensor& magnitude, const Tensor& weight_norm, float scale, const Dropout& dropout, Tensor& y,
                 Tensor& xa, Tensor& h, bool accumulate = false);
// Backward of dora_linear (same inputs; xa and h from the forward), weight_norm constant:
//   dmagnitude: (M) F32 += sum_n dy[n, j] h[n, j] / weight_norm[j], or undefined.
//   with dh = g * dy:  db: (M, r) F32 += scale dh^T xa;  da: (r, K) F32 += scale (dh b)^T xd  (or undefined);
//   dx: (N, K) F32 = dy w + mult * ((dh - dy) w + scale (dh b) a)  (p = 0: dh w + scale (dh b) a), += with
//   accumulate_dx, or undefined (mult: the dropout multipliers of x).
void dora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& magnitude, const Tensor& weight_norm, const Tensor& xa, const Tensor& h,
                          float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db, Tensor& dmagnitude,
                          bool accumulate_dx = false);

// ---- backend information ------------------------------------------------------------------------------
// One line describing the CPU backend (OpenBLAS version, the kernel family it picked, OpenMP threads). When
// OpenBLAS picked kernels older than the CPU supports (it misdetects some virtualised CPUs as "Prescott":
// sgemm 4-5x slower), the line ends with a hint: set OPENBLAS_CORETYPE before the process starts.
std::string cpu_backend_info();

}  // namespace swift::ops
