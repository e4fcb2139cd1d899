// ops/op_checks.h — shape, dtype and device checks shared by the dispatcher (ops::) and the references (ops::ref::).
// Internal to src/ops: layers above include ops.h only.
//
// Invariants:
//  - Each check_<op> validates everything the op's kernels rely on (ranks, sizes, dtypes, one device for all
//    defined tensors, data-dependent rules such as token ids when the data is on the CPU) and throws
//    swift::Error with a message that starts with the op name and shows the offending tensors.
//  - After check_<op> returns, a kernel may index its tensors without further bounds checks.
//  - Checks never modify data.
#pragma once

#include <initializer_list>
#include <span>
#include <string>

#include "ops/ops.h"

namespace swift::ops::detail {

// True for F32, BF16 and F16: the dtypes weights may be stored in.
bool is_float_dtype(DType dtype);
// "DTYPE[shape] device", or "<undefined>".
std::string desc(const Tensor& t);
// Each throws "<op>: <name> <desc> ..." when the rule is broken.
void require_defined(const char* op, const char* name, const Tensor& t);
void require_dtype(const char* op, const char* name, const Tensor& t, DType dtype);
void require_float(const char* op, const char* name, const Tensor& t);
// Activations (inputs, outputs and their gradients) are F32 on every device, or BF16 / F16 on CUDA (16-bit
// storage, fp32 math). With `like`, t must also have like's dtype (one activation dtype per op call).
void require_activation(const char* op, const char* name, const Tensor& t, const char* like_name = nullptr,
                        const Tensor* like = nullptr);
void require_rank(const char* op, const char* name, const Tensor& t, int64_t rank, const char* letters);
void require_same_shape(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b);
// True when the byte ranges of two defined tensors in the same storage intersect.
bool overlaps(const Tensor& a, const Tensor& b);
// True when a and b are the same view (storage, offset, dtype, shape): exact in-place aliasing.
bool same_view(const Tensor& a, const Tensor& b);
// Returns the device shared by every defined tensor; throws naming the op when they disagree.
Device common_device(const char* op, std::initializer_list<const Tensor*> tensors);
// Throws "op <name>: no CUDA kernel yet (CUDA backend issue)".
[[noreturn]] void no_cuda_kernel(const char* op);
// Throws when a reference op is handed a non-CPU tensor.
void require_cpu(const char* op, Device device);

// Each returns the device all tensors live on.
Device check_cast(const Tensor& src, const Tensor& dst);
Device check_add(const Tensor& a, const Tensor& b, const Tensor& out);
Device check_swiglu_lora(const char* op, const Tensor& gate, const Tensor& up, const Tensor& xa_gate,
                         const Tensor& b_gate, const Tensor& xa_up, const Tensor& b_up, const Tensor& out);
Device check_swiglu(const Tensor& gate, const Tensor& up, const Tensor& out);
Device check_add_lora_residual(const char* op, const Tensor& y, const Tensor& residual, const Tensor& xa,
                               const Tensor& b);
// op: the name errors carry (rope_qkv checks its blocks through these two).
Device check_copy_columns(const Tensor& x, int64_t x_col, const Tensor& y, int64_t y_col, int64_t cols,
                          const char* op = "copy_columns");
Device check_swap_outer_axes(const Tensor& x, const Tensor& y);
// vocab_offset >= 0: embedding_shard (ids >= 0, those outside the table's rows are another rank's); -1: embedding.
Device check_embedding(const Tensor& table, const Tensor& ids, const Tensor& out, int64_t vocab_offset = -1);
Device check_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y);
Device check_linear_residual(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                             const Tensor& y);
Device check_gemm(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& c);
Device check_rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& y, const Tensor& rstd);
Device check_rope(const Tensor& x, const Tensor& positions, const RopeFrequencies& freqs);
Device check_rope_columns(const Tensor& x, int64_t x_col, const Tensor& y, int64_t y_col, int64_t heads,
                          const Tensor& positions, const RopeFrequencies& freqs, const char* op = "rope_columns");
Device check_rope_qkv(const Tensor& packed, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                      const RopeFrequencies& freqs);
Device check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
                       int64_t window, const Tensor& out, const Tensor& lse);

// ---- training ops (op_checks_train.cpp) ----
Device check_embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, int64_t padding_id,
                                int64_t vocab_offset = -1);
Device check_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx, const Tensor& dw,
                             const Tensor& dbias, bool accumulate_dx);
Device check_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                              const Tensor& dx, const Tensor& dweight, bool accumulate_dx);
Device check_rope_backward(const Tensor& dx, const Tensor& positions, const RopeFrequencies& freqs);
Device check_swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                             const Tensor& dup);
Device check_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens, float scale,
                                int64_t window, const Tensor& dq, const Tensor& dk, const Tensor& dv);
Device check_dropout(const Tensor& x, const Dropout& dropout, const Tensor& out);
Device check_swiglu_drawing_mask(const Tensor& gate, const Tensor& up, const Tensor& out, const Dropout& mask);
Device check_lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                         float scale, const Dropout& dropout, const Tensor& y, const Tensor& xa);
Device check_lora_xa(const Tensor& x, const Tensor& a, const Dropout& dropout, const Tensor& xa);
// Each job as check_lora_xa / check_lora_linear_backward (dx defined, at least one job), on one device, the outputs
// of different jobs (xa and keep bits; da and db) apart from each other.
Device check_lora_xa_shared(const Tensor& x, const std::vector<LoraSharedXa>& jobs);
Device check_lora_linear_backward_shared(const Tensor& x, const std::vector<LoraSharedBackward>& jobs, float scale,
                                         const Tensor& dx);
// check_swiglu_backward, then each step's b (F, r), xa (N, r), g (N, r) and db (F, r) (or undefined) F32 on that device,
// g and db apart from every input and from the other step's.
Device check_swiglu_backward_lora_dy(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                                     const Tensor& dup, const LoraDyStep& gate_step, const LoraDyStep& up_step);
Device check_lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a,
                                  const Tensor& b, const Tensor& xa, float scale, const Dropout& dropout,
                                  const Tensor& dx, const Tensor& da, const Tensor& db, bool accumulate_dx);
// check_linear, then xa and b as check_add_lora_residual takes them for y (on the same device).
Device check_lora_linear_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b,
                                 const Tensor& xa, const Tensor& y);
// check_lora_linear_from_xa, and the residual: y's shape and dtype on y's device, y itself or apart from it.
Device check_lora_linear_residual_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b,
                                          const Tensor& xa, const Tensor& residual, const Tensor& y);
// check_lora_linear_backward (x = act, dx = dgate) and check_swiglu_backward (dout = dgate), dgate apart from gate,
// up and dup, dup apart from act.
Device check_lora_linear_swiglu_backward(const Tensor& dy, const Tensor& act, const Tensor& w, const Tensor& a,
                                         const Tensor& b, const Tensor& xa, float scale, const Dropout& dropout,
                                         const Tensor& gate, const Tensor& up, const Tensor& dgate, const Tensor& dup,
                                         const Tensor& da, const Tensor& db);
// Shared by cross_entropy and token_logprobs(_backward); dlogp / logp may be undefined where not used.
Device check_lm_head_loss(const char* op, const Tensor& hidden, const Tensor& head, const Tensor& labels,
                          const CrossEntropyOptions& options, const Tensor& per_token, const Tensor& dhidden,
                          const Tensor& dhead, int64_t vocab_offset = -1);
// cross_entropy_shard_stats / _backward: the head is rows [vocab_offset, ...) of the whole one (labels >= 0 only);
// per_token: the (T) F32 tensors (lse, label_logit, max_logit or the whole lse), argmax (T) I32 or undefined.
Device check_lm_head_shard(const char* op, const Tensor& hidden, const Tensor& head, const Tensor& labels,
                           int64_t vocab_offset, const CrossEntropyOptions& options,
                           std::initializer_list<const Tensor*> per_token, const Tensor& argmax, const Tensor& dhidden,
                           const Tensor& dhead);
Device check_adamw(std::span<const AdamWTensor> tensors, const AdamWConfig& config, int64_t step);
Device check_grads(const char* op, std::span<const Tensor> grads, bool writable);
// DoRA (op_checks_train.cpp).
Device check_dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, float scale, const Tensor& norm);
Device check_dora_norm_from_squares(const Tensor& norm);
Device check_dora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                         const Tensor& magnitude, const Tensor& weight_norm, float scale, const Dropout& dropout,
                         const Tensor& y, const Tensor& xa, const Tensor& h);
Device check_dora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a,
                                  const Tensor& b, const Tensor& magnitude, const Tensor& weight_norm,
                                  const Tensor& xa, const Tensor& h, float scale, const Dropout& dropout,
                                  const Tensor& dx, const Tensor& da, const Tensor& db, const Tensor& dmagnitude,
                                  bool accumulate_dx);

}  // namespace swift::ops::detail
