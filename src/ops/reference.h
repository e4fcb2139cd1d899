// ops/reference.h — plain CPU references of every op in ops/ops.h: naive loops, fp32 inputs converted
// element by element, accumulation in double. Same signatures and shape rules as ops.h. They are the oracle
// of the op tests and stay callable after faster kernels exist; never used on a hot path.
#pragma once

#include "ops/ops.h"

namespace swift::ops::ref {

void cast(const Tensor& src, Tensor& dst);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out);
void swap_outer_axes(const Tensor& x, Tensor& y);  // reference/layout.cpp
void copy_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t cols);  // reference/layout.cpp
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);
void embedding_shard(const Tensor& table, const Tensor& ids, int64_t vocab_offset, Tensor& out);
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate = false);
void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c);
void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd);
void rope(Tensor& x, const Tensor& positions, const RopeFrequencies& freqs);
void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
               int64_t window, Tensor& out, Tensor& lse);

// ---- training ops (reference/backward.cpp, reference/training.cpp) ----
// The references compute the exact mathematical gradient in double. attention_backward recomputes the
// softmax from q and k (out and lse are checked, not used); lora_linear_backward uses the given xa for db.
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable, int64_t padding_id = -1);
void embedding_shard_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_offset, Tensor& dtable,
                              int64_t padding_id = -1);
void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                     bool accumulate_dx = false, bool accumulate_dw = true);
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                      Tensor& dweight, bool accumulate_dx = false);
void rope_backward(Tensor& dx, const Tensor& positions, const RopeFrequencies& freqs);
void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup);
void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, float scale, int64_t window, Tensor& dq,
                        Tensor& dk, Tensor& dv);
void dropout(const Tensor& x, const Dropout& dropout, Tensor& out);
void lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b, float scale,
                 const Dropout& dropout, Tensor& y, Tensor& xa, bool accumulate = false);
void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& xa, float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db,
                          bool accumulate_dx = false);
// Unchunked: every logit of a token at once, in double. The options' blocks are ignored (ignore_index is used).
CrossEntropyStats cross_entropy(const Tensor& hidden, const Tensor& head, const Tensor& labels, float grad_scale,
                                Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options = {});
void token_logprobs(const Tensor& hidden, const Tensor& head, const Tensor& labels, Tensor& logp,
                    const CrossEntropyOptions& options = {});
void token_logprobs_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, const Tensor& dlogp,
                             Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options = {});
void cross_entropy_shard_stats(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                               Tensor& lse, Tensor& label_logit, Tensor& max_logit, Tensor& argmax,
                               const CrossEntropyOptions& options = {});
void cross_entropy_shard_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                                  const Tensor& lse, float grad_scale, Tensor& dhidden, Tensor& dhead,
                                  const CrossEntropyOptions& options = {});
// The fp32 formulas of ops.h, element by element (bit-identical to the fast kernel by construction).
void adamw_step(std::span<const AdamWTensor> tensors, const AdamWConfig& config, int64_t step);
// One fp64 sum over all elements in order.
float grad_norm(std::span<const Tensor> grads);
float clip_grad_norm(std::span<const Tensor> grads, double max_norm);
void scale_gradients(std::span<const Tensor> grads, float factor);
// DoRA (reference/dora.cpp): every sum in double; dora_linear_backward uses the given xa and h.
void dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, float scale, Tensor& norm,
                      bool squares = false);
void dora_norm_from_squares(Tensor& norm);
void dora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                 const Tensor& magnitude, const Tensor& weight_norm, float scale, const Dropout& dropout, Tensor& y,
                 Tensor& xa, Tensor& h, bool accumulate = false);
void dora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& magnitude, const Tensor& weight_norm, const Tensor& xa, const Tensor& h,
                          float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db, Tensor& dmagnitude,
                          bool accumulate_dx = false);

}  // namespace swift::ops::ref
