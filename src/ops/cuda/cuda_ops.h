// ops/cuda/cuda_ops.h — the CUDA implementation of every op of ops/ops.h, called by ops/dispatch.cpp after the
// argument checks passed and only for tensors on a CUDA device. Same signatures and semantics as ops.h.
//
// Invariants:
//  - Arguments are already validated (ops/op_checks): shapes, one device, dtypes. Activations (inputs, outputs
//    and their gradients) are F32 or BF16 (one dtype per call); weights F32/BF16/F16; trainable parameters,
//    their gradients, optimizer state, rstd / lse / per-token statistics and LoRA factors are F32.
//  - Math in fp32 (accumulation, softmax, norms); BF16 only as storage. Results are rounded once when stored.
//  - Kernels run on cuda::stream() of the tensors' device (ordered with the backend's copies); functions that
//    return host values (cross-entropy stats, norms) synchronise that stream.
//  - Data-dependent errors that the host cannot see (a token id outside the vocabulary on the device) are
//    reported by a device flag read back at the next synchronising op, naming the op.
//  - Files: ops_elementwise.cpp (cast, add, swiglu, embedding, rmsnorm, rope, dropout, optimizer, norms),
//    ops_matmul.cpp (linear, gemm, LoRA; cuBLASLt), ops_cross_entropy.cpp (LM head + cross-entropy, token
//    log-probabilities), ops_dora.cpp (DoRA weight norm, linear and backward), ops_attention.cpp (flash attention
//    forward and backward over packed variable-length batches); the kernels in *.cu files behind kernels*.cuh;
//    op_support.h holds the wrappers' shared helpers (dtype codes, workspaces, LoRA's rank-r products with dy).
#pragma once

#include <span>

#include "ops/ops.h"

#ifdef SWIFT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace swift::ops::cuda {

#ifdef SWIFT_WITH_CUDA
// The stream every op of a device runs on (created once per device; the backend's copies use it too).
cudaStream_t stream(int device_index);
#endif

// ---- element-wise, norms, embedding, rope, dropout (ops_elementwise.cpp) ----
void cast(const Tensor& src, Tensor& dst);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out);
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup);
void swiglu_drawing_mask(const Tensor& gate, const Tensor& up, Tensor& out, const Dropout& mask);
// Whether swiglu_drawing_mask takes its one-pass kernel for out (BF16 / F16, cols % 8 == 0, the identity map; gate
// and up are checked per call, and like out are whole allocations or 16-byte aligned views in the model).
bool swiglu_drawing_mask_in_one_pass(const Tensor& out, const Dropout& mask);
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);  // table on out's device, or mapped for it
Tensor host_mapped_copy(const Tensor& t);
void embedding_shard(const Tensor& table, const Tensor& ids, int64_t vocab_offset, Tensor& out);
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable, int64_t padding_id);
void embedding_shard_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_offset, Tensor& dtable,
                              int64_t padding_id);
void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                      Tensor& dweight, bool accumulate_dx);
void rope(Tensor& x, const Tensor& positions, const RopeFrequencies& freqs);
void rope_backward(Tensor& dx, const Tensor& positions, const RopeFrequencies& freqs);
void dropout(const Tensor& x, const Dropout& dropout, Tensor& out);
// Byte copies through cudaMemcpy2DAsync (ops_layout.cpp).
void swap_outer_axes(const Tensor& x, Tensor& y);
void copy_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t cols);
void rope_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t heads, const Tensor& positions,
                  const RopeFrequencies& freqs, bool backward);
// rope_qkv in one launch where its kernel fits (half % 8 == 0, 16-byte aligned rows) and SWIFT_ROPE_QKV is on; false:
// nothing launched (ops::rope_qkv then runs rope_columns twice and copy_columns).
bool try_rope_qkv(Tensor& packed, Tensor& q, Tensor& k, Tensor& v, const Tensor& positions,
                  const RopeFrequencies& freqs, bool backward);
void adamw_step(std::span<const AdamWTensor> tensors, const AdamWConfig& config, int64_t step);
float grad_norm(std::span<const Tensor> grads);
float clip_grad_norm(std::span<const Tensor> grads, double max_norm);
void scale_gradients(std::span<const Tensor> grads, float factor);
void zero_gradients(std::span<const Tensor> grads);
// Synchronises the device's stream, reads and clears its device error record (token ids outside the vocabulary in
// embedding / embedding_backward, negative rope positions) and throws swift::Error naming the op that recorded one.
// Called by the synchronising ops (grad_norm, clip_grad_norm, cross_entropy); callable anywhere. Defined in
// ops_elementwise.cpp.
void check_device_errors(int device_index);

// ---- matrix products, LoRA (ops_matmul.cpp) ----
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate);
void linear_residual(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual, Tensor& y);
void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c);
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                     bool accumulate_dx, bool accumulate_dw = true);
void lora_xa(const Tensor& x, const Tensor& a, const Dropout& dropout, Tensor& xa);
void lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b, float scale,
                 const Dropout& dropout, Tensor& y, Tensor& xa, bool accumulate, bool b_product);
void swiglu_lora(Tensor& gate, Tensor& up, const LoraBProduct& gate_b, const LoraBProduct& up_b, float scale,
                 Tensor& out);
void add_lora_residual(Tensor& y, const Tensor& residual, const LoraBProduct& bp, float scale);
void lora_b_product(Tensor& y, const LoraBProduct& bp, float scale);
void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& xa, float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db,
                          bool accumulate_dx);
void lora_linear_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b, const Tensor& xa,
                         float scale, Tensor& y, bool accumulate);
void lora_linear_residual_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b,
                                  const Tensor& xa, float scale, const Tensor& residual, Tensor& y);
void lora_linear_swiglu_backward(const Tensor& dy, const Tensor& act, const Tensor& w, const Tensor& a,
                                 const Tensor& b, const Tensor& xa, float scale, const Dropout& dropout,
                                 const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup, Tensor& da,
                                 Tensor& db);
void lora_xa_shared(const Tensor& x, const std::vector<LoraSharedXa>& jobs);
void lora_linear_backward_shared(const Tensor& x, const std::vector<LoraSharedBackward>& jobs, float scale, Tensor& dx,
                                 bool accumulate_dx);
void swiglu_backward_lora_dy(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup,
                             const LoraDyStep& gate_step, const LoraDyStep& up_step, float scale);
// SWIFT_LORA_B_FIRST=1 (read once, off by default): lora_linear without accumulate writes the B product first and the
// frozen product adds onto it (ops_matmul.cpp). set_lora_b_first overrides it for the process (tests).
bool lora_b_first();
void set_lora_b_first(bool on);
// SWIFT_LORA_DX_FIRST=1 (read once, off by default): lora_linear_backward without accumulate_dx writes the dx term
// first and the input gradient through the frozen weight adds onto it (ops_matmul.cpp). set_lora_dx_first overrides
// it for the process (tests).
bool lora_dx_first();
void set_lora_dx_first(bool on);
// The LoRA backward's g = dy b and db += scale dy^T xa in one pass over dy (lora_dy.cu launch_lora_dy; r 8, BF16, on
// tensor cores with b and xa rounded to bf16) instead of two cuBLASLt products over dy. On unless
// SWIFT_LORA_DY_FUSED=0 (A/B measurements); set_lora_dy_fused overrides it for the process (tests).
bool lora_dy_fused();
void set_lora_dy_fused(bool on);

// SWIFT_RMSNORM_NARROW (default on): the forward and the backward of rows of 256 <= C <= 1024 take rmsnorm.cu's
// warp-per-row kernels with 16-byte accesses (the backward's in one pass), and rows of 1024 < C <= 4096 its
// two-warps-per-row kernels; 0 keeps the strided / block-per-row kernels (A/B).
// set_rmsnorm_narrow overrides it for the process (tests).
void set_rmsnorm_narrow(bool on);

// SWIFT_ROPE_VEC (default on): rope / rope_backward / rope_columns rotate groups of 8 pairs with 16-byte accesses,
// several tokens per block, where half % 8 == 0 and rows are 16-byte aligned (the same bits); 0 keeps the per-pair
// kernel (A/B). set_rope_vectorized overrides it for the process (tests).
void set_rope_vectorized(bool on);
// rope_qkv in one launch where it fits (default), else (SWIFT_ROPE_QKV=0, for A/B) rope_columns twice and
// copy_columns; set_rope_qkv_fused overrides it for the process (tests).
void set_rope_qkv_fused(bool on);
// The forward's xa = dropout(x) a^T and the backward's da += scale g^T dropout(x) on tensor cores (lora.cu
// lora_x_mma_kernel; r 8, BF16 x; the fp32 factor split into three bf16 terms, so every product is exact) instead of
// the CUDA-core kernels. On unless SWIFT_LORA_X_MMA=0 (A/B measurements); set_lora_x_mma overrides it (tests).
bool lora_x_mma();
void set_lora_x_mma(bool on);
// lora_xa_shared / lora_linear_backward_shared run the xa and da passes of 2 or 3 linears over the same x in one
// launch (lora.cu launch_lora_xa_group / launch_lora_da_group; the same bits). On unless SWIFT_LORA_SHARED_X=0 (A/B:
// one launch each); set_lora_shared_x_passes overrides it (tests).
bool lora_shared_x_passes();
void set_lora_shared_x_passes(bool on);
// lora_linear_backward_shared adds the dx terms of its 2 or 3 jobs in one pass over dx where they fit (lora_ring.cu
// launch_lora_rank_update_group: r 8, the keep-bits caches; the same bits as one pass per job). On unless
// SWIFT_LORA_GROUP_DX=0 (A/B: one pass each); set_lora_group_dx_terms overrides it (tests).
bool lora_group_dx_terms();
void set_lora_group_dx_terms(bool on);
// lora_linear's B product (and lora_linear_from_xa's) inside the frozen product, our Hopper GEMM with a tail k-block
// (ops_matmul.cpp; one rounding of y instead of two; docs/PERFORMANCE.md run 26). On unless SWIFT_LORA_B_IN_GEMM=0
// (A/B: cuBLASLt's product and the rank passes); set_lora_b_in_gemm overrides it for the process (tests).
bool lora_b_in_gemm();
void set_lora_b_in_gemm(bool on);
// lora_b_in_gemm(), enough rows and our Hopper GEMM runs on `device` (ops::lora_b_product_in_gemm).
bool lora_b_product_in_gemm(int device, int64_t rows);
// The fewest rows that take it and the dx term in the product (512; tests lower it to run small models through it).
int64_t lora_b_in_gemm_min_rows();
void set_lora_b_in_gemm_min_rows(int64_t rows);
// lora_linear_swiglu_backward adds act's LoRA term in the swiglu backward's pass (lora_ring.cu
// launch_lora_swiglu_backward: r 8, one-pass shapes; the same bits as the term's pass then swiglu_backward) with
// SWIFT_LORA_SWIGLU_BWD=1. Off by default: the fused pass is bound by its instruction issue (the swiglu backward's exp
// and two divisions on top of the rank term, at the ring's occupancy) and made the 7B step ~1% slower
// (docs/PERFORMANCE.md run 26); set_lora_swiglu_backward_fused overrides it (tests).
bool lora_swiglu_backward_fused();
void set_lora_swiglu_backward_fused(bool on);
// swiglu_backward_lora_dy in one pass (lora_dy.cu launch_lora_swiglu_dy: BF16, r 8; the same bits as the swiglu's
// backward then each step's dy pass) with SWIFT_LORA_SWIGLU_DY=1. Off by default: at one block of 16 warps per SM
// (the dy pass's accumulators) the swiglu's arithmetic waits on its latency, and the pass took as long as the two it
// replaces (docs/PERFORMANCE.md run 28); set_lora_swiglu_dy_fused overrides it for the process (tests).
bool lora_swiglu_dy_fused();
void set_lora_swiglu_dy_fused(bool on);
// Unless SWIFT_LORA_DX_SM90=0: lora_linear_backward (one linear, dx written, r 8, BF16, in features a multiple of
// 256, the mask absent or cached, from set_lora_b_in_gemm_min_rows' rows up) runs its input gradient on our Hopper
// GEMM with the LoRA dx term as its first k-block (g and scale * a as bf16 pieces, masked by the keep bits; gemm_sm90.cuh's
// tail with B stored (k, m)), in place of cuBLASLt's product and the term's pass over dx: one rounding instead of two
// (docs/PERFORMANCE.md run 27: the 7B step +0.8%). set_lora_dx_sm90 overrides it for the process (tests).
bool lora_dx_sm90();
void set_lora_dx_sm90(bool on);
// The r 8 rank updates (dx term, B products, add_lora_residual) and swiglu_lora with each lane's columns of the
// factor in registers and the rows through a cp.async ring (lora_ring.cu) instead of the factor read from shared
// memory per element (lora.cu): the same bits. On unless SWIFT_LORA_FACTOR_REGS=0; set_lora_factor_in_registers
// overrides it (tests).
void set_lora_factor_in_registers(bool on);

// ---- LM head + cross-entropy (ops_cross_entropy.cpp) ----
// SWIFT_CE_ONE_PASS (default on): the gradient calls read each fp32 logits row once (statistics and unnormalised
// probabilities, the per-row factor applied by the products' operands); 0 keeps the statistics pass and the in-place
// dz pass (A/B). set_ce_one_pass overrides it for the process (tests).
void set_ce_one_pass(bool on);
CrossEntropyStats cross_entropy(const Tensor& hidden, const Tensor& head, const Tensor& labels, float grad_scale,
                                Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options);
void token_logprobs(const Tensor& hidden, const Tensor& head, const Tensor& labels, Tensor& logp,
                    const CrossEntropyOptions& options);
void token_logprobs_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, const Tensor& dlogp,
                             Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options);
void cross_entropy_shard_stats(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                               Tensor& lse, Tensor& label_logit, Tensor& max_logit, Tensor& argmax,
                               const CrossEntropyOptions& options);
void cross_entropy_shard_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                                  const Tensor& lse, float grad_scale, Tensor& dhidden, Tensor& dhead,
                                  const CrossEntropyOptions& options);

// ---- DoRA linear (ops_dora.cpp) ----
void dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, float scale, Tensor& norm, bool squares);
void dora_norm_from_squares(Tensor& norm);
void dora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                 const Tensor& magnitude, const Tensor& weight_norm, float scale, const Dropout& dropout, Tensor& y,
                 Tensor& xa, Tensor& h, bool accumulate);
void dora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& magnitude, const Tensor& weight_norm, const Tensor& xa, const Tensor& h,
                          float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db, Tensor& dmagnitude,
                          bool accumulate_dx);

// ---- attention (ops_attention.cpp) ----
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
               int64_t window, Tensor& out, Tensor& lse);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, float scale, int64_t window, Tensor& dq,
                        Tensor& dk, Tensor& dv);
// Queries against a KV cache (ops/attention_decode.h; dispatched from ops/attention_decode.cpp): split-K over the keys.
void attention_decode(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t start, float scale,
                      int64_t window, Tensor& out);
// The replayable forms (position read on the device; ops/attention_decode.h).
void attention_decode_at(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& start,
                         int64_t max_keys, float scale, int64_t window, Tensor& out, const Tensor& workspace);
int64_t attention_decode_workspace(const Tensor& q, const Tensor& k_cache, int64_t max_keys, int64_t window);
void kv_cache_write(const Tensor& k_new, const Tensor& v_new, Tensor& k_cache, Tensor& v_cache, const Tensor& row);

}  // namespace swift::ops::cuda
