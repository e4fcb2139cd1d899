// ops/dispatch.cpp — the public ops:: entry points: check arguments, then run the kernel of the tensors' device.
//
// Invariants:
//  - Every op validates its arguments with detail::check_<op> before touching data, so kernels may assume
//    consistent shapes, dtypes and one device.
//  - CPU tensors run the fast kernels of ops/cpu; CUDA tensors run ops/cuda (cuda_ops.h), never a silent
//    fallback to the CPU. An op with no CUDA implementation throws "op <name>: no CUDA kernel yet".
//  - CUDA kernels run on cuda::stream(device), a blocking stream: ordered with the backend's copies.
//  - Under SWIFT_PROFILE every CUDA op is a cuda::DeviceRegion named after the op (core/profile.h prints the table
//    at exit): SWIFT_PROFILE=1 brackets it by two stream synchronisations (costs throughput and inflates small ops);
//    SWIFT_PROFILE=events records two CUDA events around it on its stream, no synchronisation (device time, idle
//    gaps visible: the category breakdown of core/profile.h).
#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/profile_events.h"
#include "ops/op_checks.h"
#include "ops/ops.h"

#include <cmath>
#include <initializer_list>
#include <span>
#include <utility>
#include <vector>

#ifdef SWIFT_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace swift::ops {

namespace {
// Every output must be writable memory (not a view of a mapped weight file).
void require_writable(const char* op, std::span<const Tensor* const> outputs) {
  for (const Tensor* t : outputs) {
    if (t->defined()) t->check_writable(op);
  }
}
void require_writable(const char* op, std::initializer_list<const Tensor*> outputs) {
  require_writable(op, std::span<const Tensor* const>(outputs.begin(), outputs.size()));
}

// Runs `cpu_kernel` for CPU tensors and `cuda_kernel` for CUDA tensors (with the device made current).
template <typename CpuFn, typename CudaFn>
void dispatch(const char* op, Device device, CpuFn&& cpu_kernel, CudaFn&& cuda_kernel) {
  switch (device.type) {
    case DeviceType::CPU: cpu_kernel(); return;
    case DeviceType::CUDA:
#ifdef SWIFT_WITH_CUDA
      if (cudaSetDevice(device.index) != cudaSuccess) fail("op {}: cannot select device {}", op, device.str());
      if (profile::enabled()) {  // each op's device time (synchronised or by events, profile_events.h)
        cuda::DeviceRegion region(op, device.index);
        cuda_kernel();
        return;
      }
      cuda_kernel();
      return;
#else
      (void)cuda_kernel;
      detail::no_cuda_kernel(op);
#endif
  }
  fail("op {}: unknown device {}", op, device.str());
}

// An op with a CPU kernel only: CUDA tensors are refused by name.
template <typename CpuFn>
void dispatch(const char* op, Device device, CpuFn&& cpu_kernel) {
  dispatch(op, device, std::forward<CpuFn>(cpu_kernel), [op] { detail::no_cuda_kernel(op); });
}

}  // namespace

void cast(const Tensor& src, Tensor& dst) {
  require_writable("cast", {&dst});
  dispatch("cast", detail::check_cast(src, dst), [&] { cpu::cast(src, dst); }, [&] { cuda::cast(src, dst); });
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  require_writable("add", {&out});
  dispatch("add", detail::check_add(a, b, out), [&] { cpu::add(a, b, out); },
           [&] { cuda::add(a, b, out); });
}

void copy_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t cols) {
  require_writable("copy_columns", {&y});
  dispatch("copy_columns", detail::check_copy_columns(x, x_col, y, y_col, cols),
           [&] { cpu::copy_columns(x, x_col, y, y_col, cols); }, [&] { cuda::copy_columns(x, x_col, y, y_col, cols); });
}

void swap_outer_axes(const Tensor& x, Tensor& y) {
  require_writable("swap_outer_axes", {&y});
  dispatch("swap_outer_axes", detail::check_swap_outer_axes(x, y), [&] { cpu::swap_outer_axes(x, y); },
           [&] { cuda::swap_outer_axes(x, y); });
}

void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  require_writable("swiglu", {&out});
  dispatch("swiglu", detail::check_swiglu(gate, up, out), [&] { cpu::swiglu(gate, up, out); },
           [&] { cuda::swiglu(gate, up, out); });
}

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  require_writable("embedding", {&out});
  dispatch("embedding", detail::check_embedding(table, ids, out), [&] { cpu::embedding(table, ids, out); },
           [&] { cuda::embedding(table, ids, out); });
}

Tensor host_mapped_copy(const Tensor& t) {
  if (!t.defined() || !t.device().is_cuda()) {
    fail("host_mapped_copy: {} must be a CUDA tensor (a CPU tensor is in host memory already)",
         t.defined() ? t.str() : std::string("undefined tensor"));
  }
  Tensor out;
  dispatch("host_mapped_copy", t.device(), [] {}, [&] { out = cuda::host_mapped_copy(t); });
  return out;
}

void embedding_shard(const Tensor& table, const Tensor& ids, int64_t vocab_offset, Tensor& out) {
  require_writable("embedding_shard", {&out});
  if (vocab_offset < 0) fail("embedding_shard: vocab_offset = {} must be >= 0", vocab_offset);
  dispatch("embedding_shard", detail::check_embedding(table, ids, out, vocab_offset),
           [&] { cpu::embedding_shard(table, ids, vocab_offset, out); },
           [&] { cuda::embedding_shard(table, ids, vocab_offset, out); });
}

void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate) {
  require_writable("linear", {&y});
  dispatch("linear", detail::check_linear(x, w, bias, y), [&] { cpu::linear(x, w, bias, y, accumulate); },
           [&] { cuda::linear(x, w, bias, y, accumulate); });
}

void linear_residual(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual, Tensor& y) {
  require_writable("linear_residual", {&y});
  const Device device = detail::check_linear_residual(x, w, bias, residual, y);
  if (residual.storage() == y.storage() && residual.byte_offset() == y.byte_offset()) {
    return linear(x, w, bias, y, /*accumulate=*/true);
  }
  dispatch("linear_residual", device,
           [&] {
             y.copy_from(residual);
             cpu::linear(x, w, bias, y, /*accumulate=*/true);
           },
           [&] { cuda::linear_residual(x, w, bias, residual, y); });
}

void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c) {
  require_writable("gemm", {&c});
  dispatch("gemm", detail::check_gemm(trans_a, trans_b, a, b, c),
           [&] { cpu::gemm(trans_a, trans_b, alpha, a, b, beta, c); },
           [&] { cuda::gemm(trans_a, trans_b, alpha, a, b, beta, c); });
}

void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd) {
  require_writable("rmsnorm", {&y, &rstd});
  dispatch("rmsnorm", detail::check_rmsnorm(x, weight, eps, y, rstd), [&] { cpu::rmsnorm(x, weight, eps, y, rstd); },
           [&] { cuda::rmsnorm(x, weight, eps, y, rstd); });
}

void rope(Tensor& x, const Tensor& positions, const RopeFrequencies& freqs) {
  require_writable("rope", {&x});
  dispatch("rope", detail::check_rope(x, positions, freqs), [&] { cpu::rope(x, positions, freqs); },
           [&] { cuda::rope(x, positions, freqs); });
}

void rope_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t heads, const Tensor& positions,
                  const RopeFrequencies& freqs, bool backward) {
  require_writable("rope_columns", {&y});
  dispatch("rope_columns", detail::check_rope_columns(x, x_col, y, y_col, heads, positions, freqs),
           [&] { cpu::rope_columns(x, x_col, y, y_col, heads, positions, freqs, backward); },
           [&] { cuda::rope_columns(x, x_col, y, y_col, heads, positions, freqs, backward); });
}

void rope_qkv(Tensor& packed, Tensor& q, Tensor& k, Tensor& v, const Tensor& positions, const RopeFrequencies& freqs,
              bool backward) {
  if (backward) {
    require_writable("rope_qkv", {&packed});
  } else {
    require_writable("rope_qkv", {&q, &k, &v});
  }
  bool fused = false;  // CUDA: one launch where its kernel fits
  dispatch("rope_qkv", detail::check_rope_qkv(packed, q, k, v, positions, freqs), [] {},
           [&] { fused = cuda::try_rope_qkv(packed, q, k, v, positions, freqs, backward); });
  if (fused) return;
  // What rope_qkv is: two rope_columns and a copy_columns (the CPU, and CUDA where the fused kernel does not fit).
  const int64_t d = 2 * static_cast<int64_t>(freqs.inv_freq.size()), nq = q.size(1), nkv = k.size(1);
  if (backward) {
    rope_columns(q, 0, packed, 0, nq / d, positions, freqs, true);
    rope_columns(k, 0, packed, nq, nkv / d, positions, freqs, true);
    copy_columns(v, 0, packed, nq + nkv, nkv);
  } else {
    rope_columns(packed, 0, q, 0, nq / d, positions, freqs, false);
    rope_columns(packed, nq, k, 0, nkv / d, positions, freqs, false);
    copy_columns(packed, nq + nkv, v, 0, nkv);
  }
}

void attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
               int64_t window, Tensor& out, Tensor& lse) {
  require_writable("attention", {&out, &lse});
  dispatch("attention", detail::check_attention(q, k, v, cu_seqlens, scale, window, out, lse),
           [&] { cpu::attention(q, k, v, cu_seqlens, scale, window, out, lse); },
           [&] { cuda::attention(q, k, v, cu_seqlens, scale, window, out, lse); });
}

// ---- training ops ------------------------------------------------------------------------------------------
void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable, int64_t padding_id) {
  require_writable("embedding_backward", {&dtable});
  dispatch("embedding_backward", detail::check_embedding_backward(dout, ids, dtable, padding_id),
           [&] { cpu::embedding_backward(dout, ids, dtable, padding_id); },
           [&] { cuda::embedding_backward(dout, ids, dtable, padding_id); });
}

void embedding_shard_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_offset, Tensor& dtable,
                              int64_t padding_id) {
  require_writable("embedding_shard_backward", {&dtable});
  if (vocab_offset < 0) fail("embedding_shard_backward: vocab_offset = {} must be >= 0", vocab_offset);
  dispatch("embedding_shard_backward", detail::check_embedding_backward(dout, ids, dtable, padding_id, vocab_offset),
           [&] { cpu::embedding_shard_backward(dout, ids, vocab_offset, dtable, padding_id); },
           [&] { cuda::embedding_shard_backward(dout, ids, vocab_offset, dtable, padding_id); });
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                     bool accumulate_dx, bool accumulate_dw) {
  require_writable("linear_backward", {&dx, &dw, &dbias});
  dispatch("linear_backward", detail::check_linear_backward(dy, x, w, dx, dw, dbias, accumulate_dx),
           [&] { cpu::linear_backward(dy, x, w, dx, dw, dbias, accumulate_dx, accumulate_dw); },
           [&] { cuda::linear_backward(dy, x, w, dx, dw, dbias, accumulate_dx, accumulate_dw); });
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                      Tensor& dweight, bool accumulate_dx) {
  require_writable("rmsnorm_backward", {&dx, &dweight});
  dispatch("rmsnorm_backward", detail::check_rmsnorm_backward(dy, x, weight, rstd, dx, dweight, accumulate_dx),
           [&] { cpu::rmsnorm_backward(dy, x, weight, rstd, dx, dweight, accumulate_dx); },
           [&] { cuda::rmsnorm_backward(dy, x, weight, rstd, dx, dweight, accumulate_dx); });
}

void rope_backward(Tensor& dx, const Tensor& positions, const RopeFrequencies& freqs) {
  require_writable("rope_backward", {&dx});
  dispatch("rope_backward", detail::check_rope_backward(dx, positions, freqs),
           [&] { cpu::rope_backward(dx, positions, freqs); },
           [&] { cuda::rope_backward(dx, positions, freqs); });
}

void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) {
  require_writable("swiglu_backward", {&dgate, &dup});
  dispatch("swiglu_backward", detail::check_swiglu_backward(dout, gate, up, dgate, dup),
           [&] { cpu::swiglu_backward(dout, gate, up, dgate, dup); },
           [&] { cuda::swiglu_backward(dout, gate, up, dgate, dup); });
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& cu_seqlens, float scale, int64_t window, Tensor& dq,
                        Tensor& dk, Tensor& dv) {
  require_writable("attention_backward", {&dq, &dk, &dv});
  dispatch("attention_backward",
           detail::check_attention_backward(dout, q, k, v, out, lse, cu_seqlens, scale, window, dq, dk, dv),
           [&] { cpu::attention_backward(dout, q, k, v, out, lse, cu_seqlens, scale, window, dq, dk, dv); },
           [&] { cuda::attention_backward(dout, q, k, v, out, lse, cu_seqlens, scale, window, dq, dk, dv); });
}

void dropout(const Tensor& x, const Dropout& dropout, Tensor& out) {
  require_writable("dropout", {&out});
  dispatch("dropout", detail::check_dropout(x, dropout, out), [&] { cpu::dropout(x, dropout, out); },
           [&] { cuda::dropout(x, dropout, out); });
}

void swiglu_drawing_mask(const Tensor& gate, const Tensor& up, Tensor& out, const Dropout& mask) {
  require_writable("swiglu_drawing_mask", {&out, &mask.keep_bits});
  dispatch("swiglu_drawing_mask", detail::check_swiglu_drawing_mask(gate, up, out, mask),
           [&] { cpu::swiglu_drawing_mask(gate, up, out, mask); },
           [&] { cuda::swiglu_drawing_mask(gate, up, out, mask); });
}

bool swiglu_drawing_mask_in_one_pass(const Tensor& out, const Dropout& mask) {
#ifdef SWIFT_WITH_CUDA
  return out.defined() && out.device().is_cuda() && cuda::swiglu_drawing_mask_in_one_pass(out, mask);
#else
  (void)out;
  (void)mask;
  return false;
#endif
}

void lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b, float scale,
                 const Dropout& dropout, Tensor& y, Tensor& xa, bool accumulate, bool b_product) {
  require_writable("lora_linear", {&y, &xa});
  dispatch("lora_linear", detail::check_lora_linear(x, w, bias, a, b, scale, dropout, y, xa),
           [&] { cpu::lora_linear(x, w, bias, a, b, scale, dropout, y, xa, accumulate, b_product); },
           [&] { cuda::lora_linear(x, w, bias, a, b, scale, dropout, y, xa, accumulate, b_product); });
}

void lora_xa(const Tensor& x, const Tensor& a, const Dropout& dropout, Tensor& xa) {
  require_writable("lora_xa", {&xa});
  dispatch("lora_xa", detail::check_lora_xa(x, a, dropout, xa), [&] { cpu::lora_xa(x, a, dropout, xa); },
           [&] { cuda::lora_xa(x, a, dropout, xa); });
}

void swiglu_lora(Tensor& gate, Tensor& up, const LoraBProduct& gate_b, const LoraBProduct& up_b, float scale,
                 Tensor& out) {
  require_writable("swiglu_lora", {&gate, &up, &out});
  dispatch("swiglu_lora", detail::check_swiglu_lora("swiglu_lora", gate, up, gate_b.xa, gate_b.b, up_b.xa, up_b.b, out),
           [&] { cpu::swiglu_lora(gate, up, gate_b, up_b, scale, out); },
           [&] { cuda::swiglu_lora(gate, up, gate_b, up_b, scale, out); });
}

void lora_b_product(Tensor& y, const LoraBProduct& bp, float scale) {
  require_writable("lora_b_product", {&y});
  dispatch("lora_b_product", detail::check_add_lora_residual("lora_b_product", y, y, bp.xa, bp.b),
           [&] { cpu::lora_b_product(y, bp, scale); }, [&] { cuda::lora_b_product(y, bp, scale); });
}

void add_lora_residual(Tensor& y, const Tensor& residual, const LoraBProduct& bp, float scale) {
  require_writable("add_lora_residual", {&y});
  dispatch("add_lora_residual", detail::check_add_lora_residual("add_lora_residual", y, residual, bp.xa, bp.b),
           [&] { cpu::add_lora_residual(y, residual, bp, scale); },
           [&] { cuda::add_lora_residual(y, residual, bp, scale); });
}

void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& xa, float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db,
                          bool accumulate_dx) {
  require_writable("lora_linear_backward", {&dx, &da, &db});
  dispatch("lora_linear_backward",
           detail::check_lora_linear_backward(dy, x, w, a, b, xa, scale, dropout, dx, da, db, accumulate_dx),
           [&] { cpu::lora_linear_backward(dy, x, w, a, b, xa, scale, dropout, dx, da, db, accumulate_dx); },
           [&] { cuda::lora_linear_backward(dy, x, w, a, b, xa, scale, dropout, dx, da, db, accumulate_dx); });
}

bool lora_b_product_in_gemm(Device device, int64_t rows) {
#ifdef SWIFT_WITH_CUDA
  return device.type == DeviceType::CUDA && cuda::lora_b_product_in_gemm(device.index, rows);
#else
  (void)device;
  (void)rows;
  return false;
#endif
}

void lora_linear_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b, const Tensor& xa,
                         float scale, Tensor& y, bool accumulate) {
  require_writable("lora_linear_from_xa", {&y});
  dispatch("lora_linear_from_xa", detail::check_lora_linear_from_xa(x, w, bias, b, xa, y),
           [&] { cpu::lora_linear_from_xa(x, w, bias, b, xa, scale, y, accumulate); },
           [&] { cuda::lora_linear_from_xa(x, w, bias, b, xa, scale, y, accumulate); });
}

void lora_linear_residual_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b,
                                  const Tensor& xa, float scale, const Tensor& residual, Tensor& y) {
  require_writable("lora_linear_residual_from_xa", {&y});
  dispatch("lora_linear_residual_from_xa", detail::check_lora_linear_residual_from_xa(x, w, bias, b, xa, residual, y),
           [&] { cpu::lora_linear_residual_from_xa(x, w, bias, b, xa, scale, residual, y); },
           [&] { cuda::lora_linear_residual_from_xa(x, w, bias, b, xa, scale, residual, y); });
}

void lora_linear_swiglu_backward(const Tensor& dy, const Tensor& act, const Tensor& w, const Tensor& a,
                                 const Tensor& b, const Tensor& xa, float scale, const Dropout& dropout,
                                 const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup, Tensor& da,
                                 Tensor& db) {
  require_writable("lora_linear_swiglu_backward", {&dgate, &dup, &da, &db});
  dispatch("lora_linear_swiglu_backward",
           detail::check_lora_linear_swiglu_backward(dy, act, w, a, b, xa, scale, dropout, gate, up, dgate, dup, da,
                                                     db),
           [&] { cpu::lora_linear_swiglu_backward(dy, act, w, a, b, xa, scale, dropout, gate, up, dgate, dup, da, db); },
           [&] { cuda::lora_linear_swiglu_backward(dy, act, w, a, b, xa, scale, dropout, gate, up, dgate, dup, da, db); });
}

void lora_xa_shared(const Tensor& x, const std::vector<LoraSharedXa>& jobs) {
  if (jobs.empty()) return;
  std::vector<const Tensor*> outs;
  for (const LoraSharedXa& job : jobs) outs.push_back(&job.xa);
  require_writable("lora_xa_shared", std::span<const Tensor* const>(outs));
  dispatch("lora_xa_shared", detail::check_lora_xa_shared(x, jobs), [&] { cpu::lora_xa_shared(x, jobs); },
           [&] { cuda::lora_xa_shared(x, jobs); });
}

void lora_linear_backward_shared(const Tensor& x, const std::vector<LoraSharedBackward>& jobs, float scale, Tensor& dx,
                                 bool accumulate_dx) {
  std::vector<const Tensor*> outs = {&dx};
  for (const LoraSharedBackward& job : jobs) {
    if (job.da.defined()) outs.push_back(&job.da);
    if (job.db.defined()) outs.push_back(&job.db);
  }
  require_writable("lora_linear_backward_shared", std::span<const Tensor* const>(outs));
  dispatch("lora_linear_backward_shared", detail::check_lora_linear_backward_shared(x, jobs, scale, dx),
           [&] { cpu::lora_linear_backward_shared(x, jobs, scale, dx, accumulate_dx); },
           [&] { cuda::lora_linear_backward_shared(x, jobs, scale, dx, accumulate_dx); });
}

bool swiglu_backward_lora_dy_in_one_pass(Device device) {
#ifdef SWIFT_WITH_CUDA
  return device.type == DeviceType::CUDA && cuda::lora_swiglu_dy_fused();
#else
  (void)device;
  return false;
#endif
}

void swiglu_backward_lora_dy(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup,
                             const LoraDyStep& gate_step, const LoraDyStep& up_step, float scale) {
  std::vector<const Tensor*> outs = {&dgate, &dup, &gate_step.g, &up_step.g};
  for (const Tensor* db : {&gate_step.db, &up_step.db}) {
    if (db->defined()) outs.push_back(db);
  }
  require_writable("swiglu_backward_lora_dy", std::span<const Tensor* const>(outs));
  dispatch("swiglu_backward_lora_dy",
           detail::check_swiglu_backward_lora_dy(dout, gate, up, dgate, dup, gate_step, up_step),
           [&] { cpu::swiglu_backward_lora_dy(dout, gate, up, dgate, dup, gate_step, up_step, scale); },
           [&] { cuda::swiglu_backward_lora_dy(dout, gate, up, dgate, dup, gate_step, up_step, scale); });
}

CrossEntropyStats cross_entropy(const Tensor& hidden, const Tensor& head, const Tensor& labels, float grad_scale,
                                Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options) {
  require_writable("cross_entropy", {&dhidden, &dhead});
  if (!std::isfinite(grad_scale)) fail("cross_entropy: grad_scale = {} must be finite", grad_scale);
  CrossEntropyStats stats;
  dispatch("cross_entropy",
           detail::check_lm_head_loss("cross_entropy", hidden, head, labels, options, Tensor(), dhidden, dhead),
           [&] { stats = cpu::cross_entropy(hidden, head, labels, grad_scale, dhidden, dhead, options); },
           [&] { stats = cuda::cross_entropy(hidden, head, labels, grad_scale, dhidden, dhead, options); });
  return stats;
}

void token_logprobs(const Tensor& hidden, const Tensor& head, const Tensor& labels, Tensor& logp,
                    const CrossEntropyOptions& options) {
  require_writable("token_logprobs", {&logp});
  if (!logp.defined()) fail("token_logprobs: logp is undefined");
  Tensor none;
  dispatch("token_logprobs", detail::check_lm_head_loss("token_logprobs", hidden, head, labels, options, logp, none, none),
           [&] { cpu::token_logprobs(hidden, head, labels, logp, options); },
           [&] { cuda::token_logprobs(hidden, head, labels, logp, options); });
}

void token_logprobs_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, const Tensor& dlogp,
                             Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options) {
  require_writable("token_logprobs_backward", {&dhidden, &dhead});
  if (!dlogp.defined()) fail("token_logprobs_backward: dlogp is undefined");
  dispatch("token_logprobs_backward",
           detail::check_lm_head_loss("token_logprobs_backward", hidden, head, labels, options, dlogp, dhidden, dhead),
           [&] { cpu::token_logprobs_backward(hidden, head, labels, dlogp, dhidden, dhead, options); },
           [&] { cuda::token_logprobs_backward(hidden, head, labels, dlogp, dhidden, dhead, options); });
}

void cross_entropy_shard_stats(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                               Tensor& lse, Tensor& label_logit, Tensor& max_logit, Tensor& argmax,
                               const CrossEntropyOptions& options) {
  require_writable("cross_entropy_shard_stats", {&lse, &label_logit, &max_logit, &argmax});
  Tensor none;
  dispatch("cross_entropy_shard_stats",
           detail::check_lm_head_shard("cross_entropy_shard_stats", hidden, head, labels, vocab_offset, options,
                                       {&lse, &label_logit, &max_logit}, argmax, none, none),
           [&] { cpu::cross_entropy_shard_stats(hidden, head, labels, vocab_offset, lse, label_logit, max_logit, argmax, options); },
           [&] { cuda::cross_entropy_shard_stats(hidden, head, labels, vocab_offset, lse, label_logit, max_logit, argmax, options); });
}

void cross_entropy_shard_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                                  const Tensor& lse, float grad_scale, Tensor& dhidden, Tensor& dhead,
                                  const CrossEntropyOptions& options) {
  require_writable("cross_entropy_shard_backward", {&dhidden, &dhead});
  if (!std::isfinite(grad_scale)) fail("cross_entropy_shard_backward: grad_scale = {} must be finite", grad_scale);
  dispatch("cross_entropy_shard_backward",
           detail::check_lm_head_shard("cross_entropy_shard_backward", hidden, head, labels, vocab_offset, options,
                                       {&lse}, Tensor(), dhidden, dhead),
           [&] { cpu::cross_entropy_shard_backward(hidden, head, labels, vocab_offset, lse, grad_scale, dhidden, dhead, options); },
           [&] { cuda::cross_entropy_shard_backward(hidden, head, labels, vocab_offset, lse, grad_scale, dhidden, dhead, options); });
}

void adamw_step(std::span<const AdamWTensor> tensors, const AdamWConfig& config, int64_t step) {
  dispatch("adamw_step", detail::check_adamw(tensors, config, step), [&] { cpu::adamw_step(tensors, config, step); },
           [&] { cuda::adamw_step(tensors, config, step); });
}

float grad_norm(std::span<const Tensor> grads) {
  float norm = 0.0f;
  dispatch("grad_norm", detail::check_grads("grad_norm", grads, false), [&] { norm = cpu::grad_norm(grads); },
           [&] { norm = cuda::grad_norm(grads); });
  return norm;
}

float clip_coefficient(float total_norm, double max_norm) {
  const float coef = std::fmin(1.0f / (total_norm + 1e-6f) * static_cast<float>(max_norm), 1.0f);
  return std::isnan(total_norm) ? std::nanf("") : coef;  // fmin would drop the NaN; torch keeps it
}

float clip_grad_norm(std::span<const Tensor> grads, double max_norm) {
  if (!(max_norm > 0.0) || !std::isfinite(max_norm)) fail("clip_grad_norm: max_norm = {} must be finite and > 0", max_norm);
  float norm = 0.0f;
  dispatch("clip_grad_norm", detail::check_grads("clip_grad_norm", grads, true),
           [&] { norm = cpu::clip_grad_norm(grads, max_norm); },
           [&] { norm = cuda::clip_grad_norm(grads, max_norm); });
  return norm;
}

void zero_gradients(std::span<const Tensor> grads) {
  dispatch("zero_gradients", detail::check_grads("zero_gradients", grads, true), [&] { cpu::zero_gradients(grads); },
           [&] { cuda::zero_gradients(grads); });
}

void scale_gradients(std::span<const Tensor> grads, float factor) {
  if (!std::isfinite(factor)) fail("scale_gradients: factor = {} must be finite", factor);
  dispatch("scale_gradients", detail::check_grads("scale_gradients", grads, true),
           [&] { cpu::scale_gradients(grads, factor); }, [&] { cuda::scale_gradients(grads, factor); });
}

}  // namespace swift::ops

// ---- DoRA (CPU kernels in ops/cpu/dora.cpp, CUDA in ops/cuda/ops_dora.cpp) ------------------------------
#include "ops/cpu/dora.h"

namespace swift::ops {

void dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, float scale, Tensor& norm, bool squares) {
  require_writable("dora_weight_norm", {&norm});
  dispatch("dora_weight_norm", detail::check_dora_weight_norm(w, a, b, scale, norm),
           [&] { cpu::dora_weight_norm(w, a, b, scale, norm, squares); },
           [&] { cuda::dora_weight_norm(w, a, b, scale, norm, squares); });
}

void dora_norm_from_squares(Tensor& norm) {
  require_writable("dora_norm_from_squares", {&norm});
  dispatch("dora_norm_from_squares", detail::check_dora_norm_from_squares(norm),
           [&] { cpu::dora_norm_from_squares(norm); }, [&] { cuda::dora_norm_from_squares(norm); });
}

void dora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                 const Tensor& magnitude, const Tensor& weight_norm, float scale, const Dropout& dropout, Tensor& y,
                 Tensor& xa, Tensor& h, bool accumulate) {
  require_writable("dora_linear", {&y, &xa, &h});
  dispatch("dora_linear",
           detail::check_dora_linear(x, w, bias, a, b, magnitude, weight_norm, scale, dropout, y, xa, h),
           [&] { cpu::dora_linear(x, w, bias, a, b, magnitude, weight_norm, scale, dropout, y, xa, h, accumulate); },
           [&] { cuda::dora_linear(x, w, bias, a, b, magnitude, weight_norm, scale, dropout, y, xa, h, accumulate); });
}

void dora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& magnitude, const Tensor& weight_norm, const Tensor& xa, const Tensor& h,
                          float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db, Tensor& dmagnitude,
                          bool accumulate_dx) {
  require_writable("dora_linear_backward", {&dx, &da, &db, &dmagnitude});
  dispatch("dora_linear_backward",
           detail::check_dora_linear_backward(dy, x, w, a, b, magnitude, weight_norm, xa, h, scale, dropout, dx, da,
                                              db, dmagnitude, accumulate_dx),
           [&] {
             cpu::dora_linear_backward(dy, x, w, a, b, magnitude, weight_norm, xa, h, scale, dropout, dx, da, db,
                                       dmagnitude, accumulate_dx);
           },
           [&] {
             cuda::dora_linear_backward(dy, x, w, a, b, magnitude, weight_norm, xa, h, scale, dropout, dx, da, db,
                                        dmagnitude, accumulate_dx);
           });
}

}  // namespace swift::ops
