// ops/cuda/ops_matmul.cpp — matrix products and LoRA linear on CUDA.
//
// Invariants:
//  - Every product goes through cuda::matmul (blas.h: cuBLASLt, fp32 accumulation; F32 x F32 is pure fp32, no
//    TF32). A and B of one product share a dtype: where the op's tensors mix dtypes, the smaller or frozen side is
//    converted into workspace first:
//      * linear / linear_backward with w's dtype != the activation dtype: w converted in row chunks of at most
//        kConvertBytes (F32 activations: exact; BF16 activations with F32/F16 weights: w rounded to bf16, as torch
//        autocast does). Costs one extra read of w and a write + read of each chunk; the model's fast path (BF16
//        activations, BF16 weights) converts nothing.
//      * LoRA: the factors a, b and xa are F32. With r 8 / 16 and widths % 8 == 0 (every model shape) the rank-r
//        side runs as one-pass kernels (lora.cu: xa = dropout(x) a^T, y += scale xa b^T, dx += scale mult (g a),
//        da += scale g^T dropout(x)), all in fp32 from fp32 factors, each reading x / y / dx once (with r 8 and
//        BF16 x, xa and da on tensor cores with the factor split into three bf16 terms: exact products, fp32 sums;
//        SWIFT_LORA_X_MMA=0 for the CUDA-core kernels). Otherwise dropout(x) is formed in F32 (row chunks) and
//        multiplied in fp32 with a (exact: PEFT runs the adapter in fp32), and the B product uses b and xa rounded
//        to the activation dtype with fp32 accumulation. g = dy b and db = scale dy^T xa, with b / xa rounded
//        likewise: for r 8 and BF16 dy one tensor-core pass over dy (lora_dy.cu launch_lora_dy; SWIFT_LORA_DY_FUSED=0
//        for the two cuBLASLt products), else two cuBLASLt products against dy.
//  - linear_residual (y = residual + x w^T): the residual is the product's C input (blas.h MatmulArgs::c), read in
//    the epilogue as accumulate's old value would be, without a copy of it into y.
//  - lora_linear with b_product false stops after xa; swiglu_lora adds gate's and up's B products in the swiglu's pass
//    (r 8 and one-pass shapes: lora.cu's fused kernel, the rank update's arithmetic and rounding; else the rank
//    updates then swiglu), so its bits are those of lora_linear + swiglu.
//  - lora_xa_shared / lora_linear_backward_shared (2 or 3 linears over one x, one r, dropout p and map, one-pass
//    shapes; SWIFT_LORA_SHARED_X=0 off): the xa passes, and the backward's da passes after every job's dy pass,
//    frozen product and dx term, run as one launch each (lora.cu launch_lora_xa_group / launch_lora_da_group); each
//    job's kernel work and summation order are the single launch's, so the bits are the single ops'.
//  - lora_linear_swiglu_backward (the MLP's down through the swiglu): lora_linear_backward into dgate, then
//    swiglu_backward; with SWIFT_LORA_SWIGLU_BWD=1 (off: measured slower) the dx term is left by the backward and
//    added in the swiglu backward's pass (lora_ring.cu), the same bits.
//  - swiglu_backward_lora_dy: swiglu_backward, then each step's dy_step (lora_linear_backward's first step); with
//    SWIFT_LORA_SWIGLU_DY=1 one pass (lora_dy.cu launch_lora_swiglu_dy), the same bits. lora_linear_backward_shared
//    takes a job's g made there (LoraSharedBackward::g) and skips that job's dy_step.
//  - Unless SWIFT_LORA_B_IN_GEMM=0: lora_linear with its B product and lora_linear_from_xa run x w^T + scale
//    xa b^T (+ bias) as one product of our Hopper GEMM (BF16, r 8, sm_90a), the B product and the bias as a last k-block
//    of exact bf16 pieces (lora_tail.cu): y rounded once where the two-step form rounds the frozen product and then
//    the sum.
//  - SWIFT_PROFILE also times the parts of a LoRA linear (frozen GEMM, xa, B product, db, g, dx term, da) as nested
//    DeviceRegions (profile_events.h) named "lora_linear.<part>" / "lora_linear_backward.<part>".
//  - Outputs of 16-bit dtype are rounded once per product (accumulate: the old value is read in fp32, added, the
//    sum rounded). Parameter gradients (dw, dbias, da, db) are F32 and accumulate (+=).
//  - Everything runs on cuda::stream(device). (The LM head + cross-entropy is in ops_cross_entropy.cpp.)
#include "ops/cuda/cuda_ops.h"

#include <algorithm>
#include <atomic>
#include <array>
#include <vector>

#include "ops/cuda/blas.h"
#include "ops/cuda/gemm_sm90.cuh"
#include "ops/env_switch.h"
#include "ops/cuda/kernels.cuh"
#include "ops/cuda/kernels_lora.cuh"
#include "ops/cuda/op_support.h"
#include "ops/cuda/profile_events.h"
#include "ops/cuda/kernels_matmul.cuh"
#include "ops/op_checks.h"
#include "ops/philox.h"

namespace swift::ops::cuda {

using namespace support;

namespace {

constexpr int64_t kConvertBytes = int64_t{64} << 20;    // weight conversion chunk
constexpr int64_t kLoraChunkBytes = int64_t{64} << 20;  // F32 dropout(x) / (g a) row chunks

// The bias as the product can take it: F32 or y's dtype as is, anything else converted to F32 (M elements).
struct BiasArg {
  Tensor holder;
  const void* ptr = nullptr;
  DType dtype = DType::F32;
};
BiasArg bias_for(const char* op, const Tensor& bias, DType y_dtype, int device) {
  BiasArg out;
  if (!bias.defined()) return out;
  if (bias.dtype() == DType::F32 || bias.dtype() == y_dtype) {
    out.ptr = bias.raw();
    out.dtype = bias.dtype();
    return out;
  }
  out.holder = workspace(bias.numel(), DType::F32, device);
  convert(op, bias.raw(), bias.dtype(), out.holder.raw(), DType::F32, bias.numel(), device);
  out.ptr = out.holder.raw();
  return out;
}

// y (n, m) [+]= x (n, k) w^T (+ bias), w of any float dtype (y contiguous, x.dtype()). With a residual (n, m) (y's
// dtype, contiguous): y = residual + x w^T (+ bias), the residual read as the product's C (accumulate ignored).
void linear_impl(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias, void* y, bool accumulate,
                 const void* residual = nullptr) {
  const int device = dev(x);
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
  const DType act = x.dtype();
  const BiasArg b = bias_for(op, bias, act, device);
  MatmulArgs args;
  args.trans_b = true;
  args.n = n;
  args.k = k;
  args.a = x.raw();
  args.lda = k;
  args.ldb = k;
  args.ab_dtype = code(act);
  args.d_dtype = code(act);
  args.ldd = m;
  args.beta = accumulate || residual != nullptr ? 1.0f : 0.0f;
  args.bias_dtype = code(b.dtype);
  if (w.dtype() == act) {
    args.m = m;
    args.b = w.raw();
    args.c = residual;
    args.d = y;
    args.bias = b.ptr;
    matmul(op, device, args);
    return;
  }
  const int64_t rows = std::clamp<int64_t>(kConvertBytes / std::max<int64_t>(k * esize(act), 1), 1, m);
  Tensor ws = workspace(rows * k, act, device);
  for (int64_t m0 = 0; m0 < m; m0 += rows) {
    const int64_t mc = std::min(rows, m - m0);
    convert(op, offset(w.raw(), m0 * k, w.dtype()), w.dtype(), ws.raw(), act, mc * k, device);
    args.m = mc;
    args.b = ws.raw();
    args.c = residual != nullptr ? offset(residual, m0, act) : nullptr;
    args.d = offset(y, m0, act);
    args.bias = b.ptr ? offset(b.ptr, m0, b.dtype) : nullptr;
    matmul(op, device, args);
  }
}

// dx (n, k) [+]= dy (n, m) w (m, k), w of any float dtype.
void input_grad(const char* op, const Tensor& dy, const Tensor& w, Tensor& dx, bool accumulate) {
  const int device = dev(dy);
  const int64_t n = dy.size(0), m = dy.size(1), k = w.size(1);
  const DType act = dy.dtype();
  MatmulArgs args;
  args.n = n;
  args.m = k;
  args.lda = m;
  args.ldb = k;
  args.ab_dtype = code(act);
  args.d = dx.raw();
  args.d_dtype = code(act);
  args.ldd = k;
  args.beta = accumulate ? 1.0f : 0.0f;
  if (w.dtype() == act || m == 0) {
    args.k = m;
    args.a = dy.raw();
    args.b = w.raw();
    matmul(op, device, args);
    return;
  }
  // Chunks over the inner dimension m: dx = sum over chunks of dy[:, m0:m0+mc] w[m0:m0+mc, :].
  const int64_t rows = std::clamp<int64_t>(kConvertBytes / std::max<int64_t>(k * esize(act), 1), 1, m);
  Tensor ws = workspace(rows * k, act, device);
  for (int64_t m0 = 0; m0 < m; m0 += rows) {
    const int64_t mc = std::min(rows, m - m0);
    convert(op, offset(w.raw(), m0 * k, w.dtype()), w.dtype(), ws.raw(), act, mc * k, device);
    args.k = mc;
    args.a = offset(dy.raw(), m0, act);
    args.b = ws.raw();
    args.beta = (m0 == 0 && !accumulate) ? 0.0f : 1.0f;
    matmul(op, device, args);
  }
}


// Whether the one-pass LoRA kernels (lora.cu) take a (rows, cols) activation t with rank r: r 8 / 16, cols % 8 == 0,
// F32, BF16 or F16, 16-byte aligned.
bool one_pass(const Tensor& t, int64_t r) {
  return lora_fast_shape(t.size(1), static_cast<int>(r)) &&
         (t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16) &&
         reinterpret_cast<uintptr_t>(t.raw()) % 16 == 0;
}

// Rows per F32 (rows, k) chunk of the LoRA paths.
int64_t lora_rows(int64_t n, int64_t k) {
  return std::clamp<int64_t>(kLoraChunkBytes / std::max<int64_t>(k * 4, 1), 1, std::max<int64_t>(n, 1));
}


}  // namespace

void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate) {
  linear_impl("linear", x, w, bias, y.raw(), accumulate);
}

void linear_residual(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual, Tensor& y) {
  linear_impl("linear_residual", x, w, bias, y.raw(), true, residual.raw());
}

void gemm(bool trans_a, bool trans_b, float alpha, const Tensor& a, const Tensor& b, float beta, Tensor& c) {
  MatmulArgs args;
  args.trans_a = trans_a;
  args.trans_b = trans_b;
  args.n = c.size(0);
  args.m = c.size(1);
  args.k = trans_a ? a.size(0) : a.size(1);
  args.a = a.raw();
  args.lda = a.size(1);
  args.b = b.raw();
  args.ldb = b.size(1);
  args.ab_dtype = code(a);
  args.d = c.raw();
  args.ldd = c.size(1);
  args.d_dtype = code(c);
  args.alpha = alpha;
  args.beta = beta;
  matmul("gemm", dev(c), args);
}

void linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor& dx, Tensor& dw, Tensor& dbias,
                     bool accumulate_dx, bool accumulate_dw) {
  const char* op = "linear_backward";
  const int device = dev(dy);
  const int64_t n = dy.size(0), m = dy.size(1), k = w.size(1);
  if (dx.defined()) input_grad(op, dy, w, dx, accumulate_dx);
  if (dw.defined() && n == 0 && !accumulate_dw) {
    dw.zero_();
  } else if (dw.defined()) {  // dw (m, k) (+)= dy^T x
    MatmulArgs args;
    args.trans_a = true;
    args.n = m;
    args.m = k;
    args.k = n;
    args.a = dy.raw();
    args.lda = m;
    args.b = x.raw();
    args.ldb = k;
    args.ab_dtype = code(dy);
    args.d = dw.raw();
    args.ldd = k;
    args.d_dtype = code(DType::F32);
    args.beta = accumulate_dw ? 1.0f : 0.0f;
    matmul(op, device, args);
  }
  if (dbias.defined()) {
    const int64_t partial_floats = column_sums_partial_floats(n, m);
    Tensor partial = partial_floats > 0 ? workspace(partial_floats, DType::F32, device) : Tensor();
    check_launch(op, launch_column_sums_add(dy.raw(), code(dy), n, m, dbias.data<float>(),
                                            partial.defined() ? partial.data<float>() : nullptr, stream(device)));
  }
}

namespace {

// The forward's mask cache (ops.h Dropout::keep_bits): written by the one-pass xa kernel when drawn, read by the
// backward's one-pass kernels. Both take the one-pass path under the same condition (one_pass(x, r)), so a backward
// that reads the cache follows a forward that wrote it.
uint8_t* keep_bits_of(const Dropout& d) {
  return d.p > 0.0f && d.keep_bits.defined() ? static_cast<uint8_t*>(d.keep_bits.raw()) : nullptr;
}

}  // namespace

namespace {
EnvSwitch& b_first_switch() {
  static EnvSwitch sw("SWIFT_LORA_B_FIRST", false);
  return sw;
}
}  // namespace

bool lora_b_first() { return b_first_switch().on(); }

void set_lora_b_first(bool on) { b_first_switch().set(on); }

namespace {
EnvSwitch& dx_first_switch() {
  static EnvSwitch sw("SWIFT_LORA_DX_FIRST", false);
  return sw;
}
}  // namespace

bool lora_dx_first() { return dx_first_switch().on(); }

void set_lora_dx_first(bool on) { dx_first_switch().set(on); }

namespace {
EnvSwitch& dy_fused_switch() {
  static EnvSwitch sw("SWIFT_LORA_DY_FUSED", true);
  return sw;
}
}  // namespace

bool lora_dy_fused() { return dy_fused_switch().on(); }

void set_lora_dy_fused(bool on) { dy_fused_switch().set(on); }

namespace {
EnvSwitch& x_mma_switch() {
  static EnvSwitch sw("SWIFT_LORA_X_MMA", true);
  return sw;
}
LoraKernelConfig x_pass_config() {
  LoraKernelConfig config;
  config.tensor_cores = x_mma_switch().on();
  return config;
}
// SWIFT_LORA_FACTOR_REGS=0: the rank updates and the folded swiglu read the factor from shared memory per element
// (A/B; the same bits).
EnvSwitch& factor_regs_switch() {
  static EnvSwitch sw("SWIFT_LORA_FACTOR_REGS", true);
  return sw;
}
bool factor_in_registers() { return factor_regs_switch().on(); }
LoraKernelConfig rank_config() {
  LoraKernelConfig config;
  config.factor_in_registers = factor_in_registers();
  return config;
}
}  // namespace

bool lora_x_mma() { return x_mma_switch().on(); }

namespace {
EnvSwitch& shared_x_switch() {
  static EnvSwitch sw("SWIFT_LORA_SHARED_X", true);
  return sw;
}
}  // namespace

bool lora_shared_x_passes() { return shared_x_switch().on(); }

void set_lora_shared_x_passes(bool on) { shared_x_switch().set(on); }

void set_lora_x_mma(bool on) { x_mma_switch().set(on); }

namespace {
EnvSwitch& group_dx_switch() {
  static EnvSwitch sw("SWIFT_LORA_GROUP_DX", true);
  return sw;
}
}  // namespace

bool lora_group_dx_terms() { return group_dx_switch().on(); }

namespace {
EnvSwitch& dx_sm90_switch() {
  static EnvSwitch sw("SWIFT_LORA_DX_SM90", true);
  return sw;
}

// lora_linear_backward's input gradient with its LoRA term in one product: our Hopper GEMM (gemm_sm90.cuh) takes the
// term as its first k-block (g and scale * a as bf16 pieces, lora_tail.cu), masked by the keep bits, and adds the
// frozen product onto it before rounding (one rounding where the two passes round twice). The caller checked the
// switch, r 8 and that dx is written, not accumulated. True when it ran: BF16 dy / w / dx, the mask absent or cached,
// a shape the kernel's first block takes (gemm_sm90_fits: k % 256 == 0), an sm_90a device.
bool fused_dx_sm90(const Tensor& dy, const Tensor& w, const Tensor& g, const Tensor& a, float scale,
                   const Dropout& dropout, Tensor& dx) {
  const int device = dev(dy);
  const int64_t n = dy.size(0), m = dy.size(1), k = w.size(1);
  const DropoutParams d = params_of(dropout);
  const uint8_t* bits = keep_bits_of(dropout);
  if (dy.dtype() != DType::BF16 || w.dtype() != DType::BF16 || dx.dtype() != DType::BF16 || m <= 0 ||
      (d.threshold != 0 && bits == nullptr)) {
    return false;
  }
  Sm90Gemm gemm;
  gemm.n = n;
  gemm.m = k;
  gemm.k = m;
  gemm.a = dy.raw();
  gemm.lda = m;
  gemm.b = w.raw();
  gemm.ldb = k;
  gemm.b_transposed = false;
  gemm.d = dx.raw();
  gemm.ldd = k;
  Tensor tail_g = workspace(n * 64, DType::BF16, device), tail_a = workspace(64 * k, DType::BF16, device);
  gemm.tail_a = tail_g.raw();
  gemm.tail_b = tail_a.raw();
  gemm.tail_bits = d.threshold != 0 ? bits : nullptr;
  gemm.tail_keep_scale = d.keep_scale;
  if (!gemm_sm90_fits(gemm) || !gemm_sm90_ready(device, stream(device))) return false;
  DeviceRegion region("lora_linear_backward.frozen_gemm", device);
  const char* op = "lora_linear_backward";
  check_launch(op, launch_lora_tail_xa(g.data<float>(), n, tail_g.raw(), stream(device)));
  check_launch(op, launch_lora_tail_a_rows(a.data<float>(), k, scale, tail_a.raw(), stream(device)));
  check_launch(op, launch_gemm_sm90(gemm, device, stream(device)));
  return true;
}
}  // namespace

bool lora_dx_sm90() { return dx_sm90_switch().on(); }

void set_lora_dx_sm90(bool on) { dx_sm90_switch().set(on); }

void set_lora_group_dx_terms(bool on) { group_dx_switch().set(on); }

void set_lora_factor_in_registers(bool on) { factor_regs_switch().set(on); }

namespace {

// y (n, m) += scale * xa b^T (overwrite: y = that, y not read): the one-pass rank update with fp32 factors, else a
// cuBLASLt product with xa and b rounded to y's dtype (fp32 accumulation).
void add_b_product(const char* op, const Tensor& xa, const Tensor& b, float scale, Tensor& y, bool overwrite) {
  const int device = dev(y);
  const int64_t n = y.size(0), m = y.size(1), r = xa.size(1);
  const DType act = y.dtype();
  if (n == 0 || m == 0) return;
  if (one_pass(y, r)) {  // one read and write of y (overwrite: one write), fp32 factors
    check_launch(op, launch_lora_rank_update(y.raw(), code(act), xa.data<float>(), b.data<float>(), true, n, m,
                                             static_cast<int>(r), scale, 0, 0u, 1.0f, DropoutMap{}, nullptr,
                                             stream(device), rank_config(), overwrite));
    return;
  }
  // The general path: xa and b rounded to y's dtype, one cuBLASLt product (fp32 accumulation).
  gemm(false, true, scale, as_dtype(op, xa, act), as_dtype(op, b, act), overwrite ? 0.0f : 1.0f, y);
}

}  // namespace

namespace {
// xa (n, r) = dropout(x) a^T in fp32 (lora_linear's and lora_xa's); the one-pass kernel also stores the mask into a
// defined dropout.keep_bits.
void xa_pass(const char* op, const Tensor& x, const Tensor& a, const Dropout& dropout, Tensor& xa) {
  const int device = dev(x);
  const int64_t n = x.size(0), k = x.size(1), r = a.size(0);
  const DType act = x.dtype();
  MatmulArgs xa_args;
  xa_args.trans_b = true;
  xa_args.m = r;
  xa_args.k = k;
  xa_args.lda = k;
  xa_args.b = a.raw();
  xa_args.ldb = k;
  xa_args.ldd = r;
  if (one_pass(x, r)) {  // one read of x: dropout and the rank-r products together (memory-bound)
    const DropoutParams d = params_of(dropout);
    const int64_t splits = lora_xa_splits(k);
    Tensor part = splits > 1 ? workspace(splits * n * r, DType::F32, device) : Tensor();
    float* part_data = part.defined() ? part.data<float>() : nullptr;
    if (dropout.keep_bits_drawn && d.threshold != 0) {  // the mask is in the cache already (swiglu_drawing_mask)
      check_launch(op, launch_lora_xa_from_bits(x.raw(), code(act), a.data<float>(), n, k, static_cast<int>(r), d.seed,
                                                d.threshold, d.keep_scale, d.map, part_data, xa.data<float>(),
                                                keep_bits_of(dropout), stream(device), x_pass_config()));
    } else {
      check_launch(op, launch_lora_xa(x.raw(), code(act), a.data<float>(), n, k, static_cast<int>(r), d.seed,
                                      d.threshold, d.keep_scale, d.map, part_data, xa.data<float>(),
                                      keep_bits_of(dropout), stream(device), x_pass_config()));
    }
  } else if (act == DType::F32 && dropout.p == 0.0f) {
    xa_args.n = n;
    xa_args.a = x.raw();
    xa_args.d = xa.raw();
    matmul(op, device, xa_args);
  } else {
    const DropoutParams d = params_of(dropout);
    const int64_t rows = lora_rows(n, k);
    Tensor xd = workspace(rows * k, DType::F32, device);
    for (int64_t n0 = 0; n0 < n; n0 += rows) {
      const int64_t nr = std::min(rows, n - n0);
      check_launch(op, launch_dropout_rows_to_f32(x.raw(), code(act), n0, nr, k, d.seed, d.threshold, d.keep_scale,
                                                  d.map, xd.data<float>(), stream(device)));
      xa_args.n = nr;
      xa_args.a = xd.raw();
      xa_args.d = offset(xa.raw(), n0 * r, DType::F32);
      matmul(op, device, xa_args);
    }
  }
}
}  // namespace

namespace {
// The fewest rows (tokens) b_in_gemm_plan takes, 512 (set_lora_b_in_gemm_min_rows: tests): with fewer (decode, short
// prompts) our persistent 128 x 256 tiles would cover a few tile rows of the GPU's SMs where cuBLASLt picks a narrow
// kernel; those keep the two-step form.
std::atomic<int64_t> g_min_tail_rows{512};

EnvSwitch& b_in_gemm_switch() {
  static EnvSwitch sw("SWIFT_LORA_B_IN_GEMM", true);
  return sw;
}

// y = x w^T + scale * xa b^T in one product where it can: our Hopper GEMM with the B product as a last k-block of
// bf16 pieces (lora_tail.cu), one rounding of y. b_in_gemm_plan says whether it can (before any pass runs), and makes
// the product without its tails: unless SWIFT_LORA_B_IN_GEMM=0, for BF16 x / w / y written (not accumulated), at least
// g_min_tail_rows rows, r 8, a bias (if any) BF16 or F32 (it goes into the tail too), on an sm_90a device.
bool b_in_gemm_plan(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b, const Tensor& y,
                    bool accumulate, Sm90Gemm& gemm) {
  if (!b_in_gemm_switch().on() || accumulate || x.size(0) < g_min_tail_rows.load(std::memory_order_relaxed) ||
      x.dtype() != DType::BF16 || w.dtype() != DType::BF16 || y.dtype() != DType::BF16 || b.size(1) != 8 ||
      b.dtype() != DType::F32 || (bias.defined() && bias.dtype() != DType::BF16 && bias.dtype() != DType::F32)) {
    return false;
  }
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
  gemm = Sm90Gemm{};
  gemm.n = n;
  gemm.m = m;
  gemm.k = k;
  gemm.a = x.raw();
  gemm.lda = k;
  gemm.b = w.raw();
  gemm.ldb = k;
  gemm.b_transposed = true;
  gemm.d = y.raw();
  gemm.ldd = m;
  return gemm_sm90_fits(gemm) && gemm_sm90_ready(dev(x), stream(dev(x)));
}

// The planned product with its tails (workspace, 16-byte aligned) from xa (n, 8), scale * b and the bias.
void run_b_in_gemm(const char* op, Sm90Gemm gemm, const Tensor& xa, const Tensor& b, const Tensor& bias,
                   float scale) {
  const int device = dev(xa);
  Tensor tail_a = workspace(gemm.n * 64, DType::BF16, device), tail_b = workspace(gemm.m * 64, DType::BF16, device);
  gemm.tail_a = tail_a.raw();
  gemm.tail_b = tail_b.raw();
  check_launch(op, launch_lora_tail_xa(xa.data<float>(), gemm.n, tail_a.raw(), stream(device)));
  check_launch(op, launch_lora_tail_b(b.data<float>(), gemm.m, scale, bias.defined() ? bias.raw() : nullptr,
                                      bias.defined() && bias.dtype() == DType::BF16, tail_b.raw(), stream(device)));
  check_launch(op, launch_gemm_sm90(gemm, device, stream(device)));
}
}  // namespace

bool lora_b_in_gemm() { return b_in_gemm_switch().on(); }

bool lora_b_product_in_gemm(int device, int64_t rows) {
  return lora_b_in_gemm() && rows >= g_min_tail_rows.load(std::memory_order_relaxed) && gemm_sm90_available(device);
}

int64_t lora_b_in_gemm_min_rows() { return g_min_tail_rows.load(std::memory_order_relaxed); }

void set_lora_b_in_gemm_min_rows(int64_t rows) { g_min_tail_rows.store(rows, std::memory_order_relaxed); }

void set_lora_b_in_gemm(bool on) { b_in_gemm_switch().set(on); }

void lora_linear_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b, const Tensor& xa,
                         float scale, Tensor& y, bool accumulate) {
  const char* op = "lora_linear_from_xa";
  const int device = dev(x);
  DeviceRegion region("lora_linear.frozen_gemm", device);
  Sm90Gemm gemm;
  if (x.size(0) > 0 && xa.size(1) > 0 && b_in_gemm_plan(x, w, bias, b, y, accumulate, gemm)) {
    return run_b_in_gemm(op, gemm, xa, b, bias, scale);
  }
  linear_impl(op, x, w, bias, y.raw(), accumulate);
  if (x.size(0) == 0 || xa.size(1) == 0) return;
  DeviceRegion b_region("lora_linear.b_product", device);
  add_b_product(op, xa, b, scale, y, /*overwrite=*/false);
}

void lora_linear_residual_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b,
                                  const Tensor& xa, float scale, const Tensor& residual, Tensor& y) {
  const char* op = "lora_linear_residual_from_xa";
  const int device = dev(x);
  if (y.numel() == 0) return;
  Sm90Gemm gemm;
  if (x.size(0) > 0 && xa.size(1) > 0 && b_in_gemm_plan(x, w, bias, b, y, false, gemm)) {
    gemm.residual = residual.raw();
    gemm.ldr = residual.size(1);
    if (gemm_sm90_fits(gemm)) {  // the residual's own conditions (gemm_sm90.cuh)
      DeviceRegion region("lora_linear.frozen_gemm", device);
      return run_b_in_gemm(op, gemm, xa, b, bias, scale);
    }
  }
  // lora_linear_from_xa, then the add (into a copy first when the residual is y itself).
  const bool in_place = residual.storage() == y.storage() && residual.byte_offset() == y.byte_offset();
  Tensor out = in_place ? workspace(y.numel(), y.dtype(), device).view(y.shape()) : y;
  lora_linear_from_xa(x, w, bias, b, xa, scale, out, false);
  add(residual, out, y);
}

void lora_xa(const Tensor& x, const Tensor& a, const Dropout& dropout, Tensor& xa) {
  if (x.size(0) == 0 || a.size(0) == 0) return;
  DeviceRegion region("lora_xa", dev(x));
  xa_pass("lora_xa", x, a, dropout, xa);
}

void lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b, float scale,
                 const Dropout& dropout, Tensor& y, Tensor& xa, bool accumulate, bool b_product) {
  const char* op = "lora_linear";
  const int device = dev(x);
  const int64_t n = x.size(0), r = a.size(0);
  Sm90Gemm gemm;
  if (b_product && n > 0 && r > 0 && b_in_gemm_plan(x, w, bias, b, y, accumulate, gemm)) {
    {  // xa first, then one product with the B product in it
      DeviceRegion region("lora_linear.xa", device);
      xa_pass(op, x, a, dropout, xa);
    }
    DeviceRegion region("lora_linear.frozen_gemm", device);
    return run_b_in_gemm(op, gemm, xa, b, bias, scale);
  }
  // lora_b_first(): without accumulate the B product is written first (y = scale xa b^T, y not read) and the frozen
  // product adds onto it in cuBLASLt's epilogue (beta = 1): one write of y instead of a read-modify-write after the
  // product, one rounding less. Off by default: interleaved A/Bs on one machine could not separate it from the
  // spread (docs/PERFORMANCE.md run 10, call 1).
  const bool b_first =
      lora_b_first() && b_product && !accumulate && n > 0 && r > 0 && one_pass(y, r) && one_pass(x, r);
  if (!b_first) {
    DeviceRegion region("lora_linear.frozen_gemm", device);
    linear_impl(op, x, w, bias, y.raw(), accumulate);
  }
  if (n == 0 || r == 0) return;
  {
    DeviceRegion region("lora_linear.xa", device);
    xa_pass(op, x, a, dropout, xa);
  }
  if (!b_product) return;
  {
    DeviceRegion region("lora_linear.b_product", device);
    add_b_product(op, xa, b, scale, y, /*overwrite=*/b_first);
  }
  if (b_first) {
    DeviceRegion region("lora_linear.frozen_gemm", device);
    linear_impl(op, x, w, bias, y.raw(), /*accumulate=*/true);
  }
}

// The fused kernel for r 8 and one-pass shapes (lora.cu: the rank update's arithmetic and rounding), else the rank
// updates then swiglu (the same bits either way).
void swiglu_lora(Tensor& gate, Tensor& up, const LoraBProduct& gate_b, const LoraBProduct& up_b, float scale,
                 Tensor& out) {
  const char* op = "swiglu_lora";
  const int64_t r = gate_b.xa.size(1);
  if (r != 8 || !one_pass(gate, r) || !one_pass(up, r) || !one_pass(out, r)) {
    add_b_product(op, gate_b.xa, gate_b.b, scale, gate, false);
    add_b_product(op, up_b.xa, up_b.b, scale, up, false);
    return swiglu(gate, up, out);
  }
  check_launch(op, launch_lora_swiglu(gate.raw(), up.raw(), code(gate.dtype()), gate_b.xa.data<float>(),
                                      gate_b.b.data<float>(), up_b.xa.data<float>(), up_b.b.data<float>(), gate.size(0),
                                      gate.size(1), 8, scale, out.raw(), stream(dev(gate)),
                                      factor_in_registers()));
}

// lora_linear's B product step, alone.
void lora_b_product(Tensor& y, const LoraBProduct& bp, float scale) {
  if (bp.xa.size(1) == 0) return;
  DeviceRegion region("lora_linear.b_product", dev(y));
  add_b_product("lora_b_product", bp.xa, bp.b, scale, y, /*overwrite=*/false);
}

// One pass for r 8 and one-pass shapes (the rank update reading the residual too), else add then the B product.
void add_lora_residual(Tensor& y, const Tensor& residual, const LoraBProduct& bp, float scale) {
  const char* op = "add_lora_residual";
  const int64_t n = y.size(0), m = y.size(1), r = bp.xa.size(1);
  if (n == 0 || m == 0) return;
  if (r == 8 && one_pass(y, r) && one_pass(residual, r)) {
    check_launch(op, launch_lora_rank_update(y.raw(), code(y.dtype()), bp.xa.data<float>(), bp.b.data<float>(), true, n,
                                             m, 8, scale, 0, 0u, 1.0f, DropoutMap{}, nullptr, stream(dev(y)),
                                             rank_config(), false, residual.raw()));
    return;
  }
  add(y, residual, y);
  add_b_product(op, bp.xa, bp.b, scale, y, false);
}

namespace {
// dx += scale * multiplier * (g a): the LoRA term of lora_linear_backward's input gradient (g (n, r) F32), in one
// pass over dx where the one-pass kernels take it, else through F32 (rows, k) chunks.
void add_dx_term(const char* op, const Tensor& x, const Tensor& g, const Tensor& a, float scale, const Dropout& dropout,
                 Tensor& dx, bool overwrite) {
  const int device = dev(x);
  const int64_t n = x.size(0), k = x.size(1), r = a.size(0);
  const DType act = x.dtype();
  const DropoutParams d = params_of(dropout);
  if (one_pass(x, r) && one_pass(dx, r)) {
    DeviceRegion region("lora_linear_backward.dx_lora", device);
    check_launch(op, launch_lora_rank_update(dx.raw(), code(act), g.data<float>(), a.data<float>(), false, n, k,
                                             static_cast<int>(r), scale, d.seed, d.threshold, d.keep_scale, d.map,
                                             keep_bits_of(dropout), stream(device), rank_config(), overwrite));
    return;
  }
  const int64_t rows = lora_rows(n, k);
  Tensor buf = workspace(rows * k, DType::F32, device);
  for (int64_t n0 = 0; n0 < n; n0 += rows) {
    const int64_t nr = std::min(rows, n - n0);
    MatmulArgs args;
    args.n = nr;
    args.m = k;
    args.k = r;
    args.a = offset(g.raw(), n0 * r, DType::F32);
    args.lda = r;
    args.b = a.raw();
    args.ldb = k;
    args.d = buf.raw();
    args.ldd = k;
    matmul(op, device, args);
    check_launch(op, launch_lora_dx_add(dx.raw(), code(act), buf.data<float>(), n0, nr, k, scale, d.seed,
                                        d.threshold, d.keep_scale, d.map, stream(device)));
  }
}

// Whether dy_step takes the one-pass kernel (r 8, BF16 dy on 16-byte aligned rows, F32 b, xa and db).
bool dy_step_fused(const Tensor& dy, const Tensor& b, const Tensor& xa, const Tensor& db) {
  return lora_dy_fused() && b.size(1) == 8 && dy.dtype() == DType::BF16 && one_pass(dy, 8) && b.dtype() == DType::F32 &&
         xa.dtype() == DType::F32 && (!db.defined() || db.dtype() == DType::F32);
}

// The first step of lora_linear_backward: g = dy b (F32 (n, r), where g is defined) and db += scale dy^T xa (where db
// is defined).
void dy_step(const char* op, const Tensor& dy, const Tensor& b, const Tensor& xa, float scale, Tensor& g, Tensor& db) {
  const int device = dev(dy);
  const int64_t n = dy.size(0), m = dy.size(1), r = b.size(1);
  const DType act = dy.dtype();
  const bool want_g = g.defined();
  if (dy_step_fused(dy, b, xa, db)) {
    // g = dy b and db += scale dy^T xa in one read of dy (tensor cores, b and xa rounded to bf16 as below).
    DeviceRegion region("lora_linear_backward.dy", device);
    const LoraDyWork work = lora_dy_work(n, m, static_cast<int>(r));
    Tensor part_g = want_g && work.part_g_floats > 0 ? workspace(work.part_g_floats, DType::F32, device) : Tensor();
    Tensor part_db = db.defined() ? workspace(work.part_db_floats, DType::F32, device) : Tensor();
    check_launch(op, launch_lora_dy(dy.raw(), code(act), b.data<float>(), xa.data<float>(), n, m, static_cast<int>(r),
                                    scale, want_g ? g.data<float>() : nullptr,
                                    db.defined() ? db.data<float>() : nullptr,
                                    part_g.defined() ? part_g.data<float>() : nullptr,
                                    part_db.defined() ? part_db.data<float>() : nullptr, stream(device)));
  } else {
    if (db.defined()) {  // db (m, r) += scale dy^T xa
      DeviceRegion region("lora_linear_backward.db", device);
      add_lora_db(op, device, dy.raw(), n, m, xa, act, scale, db);
    }
    if (want_g) {  // g (n, r) = dy b, F32
      DeviceRegion region("lora_linear_backward.g", device);
      lora_dy_b(op, device, dy.raw(), n, m, b, act, g);
    }
  }
}

// Passes of lora_linear_backward left to its caller, and their input g (n, r) F32 (undefined when none was left).
struct DeferredPasses {
  Tensor g;
  bool da = false;    // the one-pass da
  bool term = false;  // dx's LoRA term (dx got only the frozen product's input gradient)
};

// lora_linear_backward. With `deferred` non-null the caller takes over passes that need g: the one-pass da where it
// would run (defer_da), dx's LoRA term (defer_term); *deferred says which were left.
// With g_given the first step (g and db, dy_step) was the caller's.
void linear_backward_lora(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& xa, float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db,
                          bool accumulate_dx, DeferredPasses* deferred = nullptr, bool defer_da = false,
                          bool defer_term = false, const Tensor& g_given = Tensor()) {
  const char* op = "lora_linear_backward";
  const int device = dev(x);
  const int64_t n = x.size(0), k = x.size(1), r = a.size(0);
  const DType act = x.dtype();
  SWIFT_CHECK(deferred != nullptr || (!defer_da && !defer_term), "{}: deferred passes need somewhere to go", op);
  // lora_dx_first(): without accumulate_dx the dx term is written first (dx = scale * mult * (g a), dx not read) and
  // the input gradient through the frozen weight adds onto it in cuBLASLt's epilogue (beta = 1): one write of dx in
  // place of a read and a write after the product. Off by default: in the 7B step the dx terms took 1.7 ms less and
  // the input-gradient products 2.5 ms more (docs/PERFORMANCE.md run 19, calls 8 and 9).
  const bool dx_first = lora_dx_first() && !defer_term && dx.defined() && !accumulate_dx && n > 0 && r > 0 &&
                        k > 0 && one_pass(x, r) && one_pass(dx, r);
  // lora_dx_sm90: the product waits for g and takes the term as its first k-block (fused_dx_sm90 decides below;
  // where it declines, the product runs after g as before). From the B product's fewest rows up (g_min_tail_rows):
  // fewer keep cuBLASLt's product and the pass.
  const bool try_fused = lora_dx_sm90() && !dx_first && !defer_term && dx.defined() && !accumulate_dx &&
                         n >= std::max<int64_t>(1, g_min_tail_rows.load(std::memory_order_relaxed)) && r == 8 && k > 0;
  if (dx.defined() && !dx_first && !try_fused) {  // through the frozen weight
    DeviceRegion region("lora_linear_backward.frozen_gemm", device);
    input_grad(op, dy, w, dx, accumulate_dx);
  }
  if (n == 0 || r == 0) return;
  const bool want_g = dx.defined() || da.defined();
  Tensor g = g_given;
  if (!g.defined()) {
    if (want_g) g = workspace(n * r, DType::F32, device);
    dy_step(op, dy, b, xa, scale, g, db);
  }
  if (!want_g) return;
  if (k == 0) return;
  const DropoutParams d = params_of(dropout);
  bool term_done = false;  // dx's LoRA term already in dx (the fused product)
  if (try_fused) {
    term_done = fused_dx_sm90(dy, w, g, a, scale, dropout, dx);
    if (!term_done) {
      DeviceRegion region("lora_linear_backward.frozen_gemm", device);
      input_grad(op, dy, w, dx, false);
    }
  }
  if (dx.defined() && defer_term) {
    deferred->g = g;
    deferred->term = true;
  }
  if (one_pass(x, r) && (!dx.defined() || one_pass(dx, r))) {  // one pass over dx and one over x
    if (dx.defined() && !defer_term && !term_done) add_dx_term(op, x, g, a, scale, dropout, dx, dx_first);
    if (dx_first) {
      DeviceRegion region("lora_linear_backward.frozen_gemm", device);
      input_grad(op, dy, w, dx, /*accumulate=*/true);
    }
    if (da.defined() && defer_da) {
      deferred->g = g;
      deferred->da = true;
    } else if (da.defined()) {
      DeviceRegion region("lora_linear_backward.da", device);
      Tensor part = workspace(lora_da_slices(n, k, static_cast<int>(r)) * r * k, DType::F32, device);
      check_launch(op, launch_lora_da(x.raw(), code(act), g.data<float>(), n, k, static_cast<int>(r), scale,
                                            d.seed, d.threshold, d.keep_scale, d.map, keep_bits_of(dropout),
                                            part.data<float>(), da.data<float>(), stream(device), x_pass_config()));
    }
    return;
  }
  if (dx.defined() && !defer_term && !term_done) add_dx_term(op, x, g, a, scale, dropout, dx, false);  // F32 chunks
  const int64_t rows = lora_rows(n, k);
  Tensor buf = workspace(rows * k, DType::F32, device);
  if (da.defined()) {  // da (r, k) += scale g^T dropout(x), row chunks in order
    for (int64_t n0 = 0; n0 < n; n0 += rows) {
      const int64_t nr = std::min(rows, n - n0);
      check_launch(op, launch_dropout_rows_to_f32(x.raw(), code(act), n0, nr, k, d.seed, d.threshold, d.keep_scale,
                                                  d.map, buf.data<float>(), stream(device)));
      MatmulArgs args;
      args.trans_a = true;
      args.n = r;
      args.m = k;
      args.k = nr;
      args.a = offset(g.raw(), n0 * r, DType::F32);
      args.lda = r;
      args.b = buf.raw();
      args.ldb = k;
      args.d = da.raw();
      args.ldd = k;
      args.alpha = scale;
      args.beta = 1.0f;
      matmul(op, device, args);
    }
  }
}

}  // namespace

void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& xa, float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db,
                          bool accumulate_dx) {
  linear_backward_lora(dy, x, w, a, b, xa, scale, dropout, dx, da, db, accumulate_dx);
}

namespace {
// Whether the jobs' x passes can share one launch: 2 or 3 of them, the one-pass kernels (one_pass(x, r)) with one r
// and one dropout probability and map (the launch's), and the keep bits where the single ops would use them.
template <typename Job>
bool x_passes_shared(const Tensor& x, const std::vector<Job>& jobs) {
  if (!lora_shared_x_passes() || jobs.size() < 2 || jobs.size() > static_cast<size_t>(kLoraMaxXJobs)) return false;
  const int64_t r = jobs[0].a.size(0);
  if (!one_pass(x, r)) return false;
  const DropoutMap& m0 = jobs[0].dropout.map;
  for (const Job& job : jobs) {
    const DropoutMap& m = job.dropout.map;
    if (job.a.size(0) != r || job.dropout.p != jobs[0].dropout.p || m.row_offset != m0.row_offset ||
        m.full_cols != m0.full_cols || m.col_offset != m0.col_offset) {
      return false;
    }
  }
  return true;
}

// One job of a grouped x pass: its factor (a, or g), dropout seed and keep bits, partials and result.
LoraXJob x_job(const Tensor& factor, const Dropout& dropout, const Tensor& part, const Tensor& out) {
  LoraXJob job;
  job.f = factor.data<float>();
  job.seed = params_of(dropout).seed;
  job.keep_bits = keep_bits_of(dropout);
  job.part = part.defined() ? part.data<float>() : nullptr;
  job.out = out.data<float>();
  return job;
}
}  // namespace

void lora_xa_shared(const Tensor& x, const std::vector<LoraSharedXa>& jobs) {
  const char* op = "lora_xa_shared";
  const int64_t n = x.size(0), k = x.size(1);
  if (n == 0) return;
  if (!x_passes_shared(x, jobs)) {
    for (const LoraSharedXa& job : jobs) {
      Tensor xa = job.xa;
      cuda::lora_xa(x, job.a, job.dropout, xa);
    }
    return;
  }
  const int device = dev(x);
  const int r = static_cast<int>(jobs[0].a.size(0));
  const DropoutParams d0 = params_of(jobs[0].dropout);
  const int64_t splits = lora_xa_splits(k);
  std::vector<Tensor> parts;
  std::array<LoraXJob, kLoraMaxXJobs> launch{};
  for (size_t j = 0; j < jobs.size(); ++j) {
    parts.push_back(splits > 1 ? workspace(splits * n * r, DType::F32, device) : Tensor());
    launch[j] = x_job(jobs[j].a, jobs[j].dropout, parts[j], jobs[j].xa);
  }
  check_launch(op, launch_lora_xa_group(x.raw(), code(x.dtype()), n, k, r, d0.threshold, d0.keep_scale, d0.map,
                                        launch.data(), static_cast<int>(jobs.size()), stream(device),
                                        x_pass_config()));
}

void lora_linear_backward_shared(const Tensor& x, const std::vector<LoraSharedBackward>& jobs, float scale, Tensor& dx,
                                 bool accumulate_dx) {
  const char* op = "lora_linear_backward_shared";
  const bool shared = x_passes_shared(x, jobs);
  const int device = dev(x);
  const int64_t n = x.size(0), k = x.size(1);
  // ops.h's order: every frozen product's input gradient, then the LoRA terms in job order (the loop leaves them).
  std::vector<DeferredPasses> left(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LoraSharedBackward& job = jobs[j];
    Tensor da = job.da, db = job.db;
    linear_backward_lora(job.dy, x, job.w, job.a, job.b, job.xa, scale, job.dropout, dx, da, db,
                         j == 0 ? accumulate_dx : true, &left[j], shared, /*defer_term=*/true, job.g);
  }
  // The terms: in one pass over dx where every job's g is there and the grouped launch takes them (r 8, one dropout
  // probability, each job's keep-bits cache), else one pass (or chunks) per job in order; the same bits either way.
  std::array<const float*, kLoraMaxXJobs> g_ptrs{}, f_ptrs{};
  std::array<const uint8_t*, kLoraMaxXJobs> bit_ptrs{};
  bool grouped = lora_group_dx_terms() && shared && one_pass(dx, jobs[0].a.size(0)) && jobs[0].a.size(0) == 8;
  const DropoutParams d0 = params_of(jobs[0].dropout);
  for (size_t j = 0; grouped && j < jobs.size(); ++j) {
    grouped = left[j].term;
    if (!grouped) break;
    g_ptrs[j] = left[j].g.data<float>();
    f_ptrs[j] = jobs[j].a.data<float>();
    bit_ptrs[j] = keep_bits_of(jobs[j].dropout);
  }
  const int count_all = static_cast<int>(jobs.size());
  if (grouped && lora_rank_update_group_fits(k, count_all, d0.threshold, bit_ptrs.data())) {
    DeviceRegion region("lora_linear_backward.dx_lora", device);
    check_launch(op, launch_lora_rank_update_group(dx.raw(), code(x.dtype()), g_ptrs.data(), f_ptrs.data(),
                                                   bit_ptrs.data(), count_all, n, k, scale, d0.threshold,
                                                   d0.keep_scale, stream(device)));
  } else {
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (left[j].term) add_dx_term(op, x, left[j].g, jobs[j].a, scale, jobs[j].dropout, dx, false);
    }
  }
  if (!shared) return;
  // The da passes left by the loop (every job whose da is defined), in one launch over x.
  const int r = static_cast<int>(jobs[0].a.size(0));
  std::vector<Tensor> parts;
  std::array<LoraXJob, kLoraMaxXJobs> launch{};
  int count = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (!left[j].da) continue;
    parts.push_back(workspace(lora_da_slices(n, k, r) * r * k, DType::F32, device));
    launch[count++] = x_job(left[j].g, jobs[j].dropout, parts.back(), jobs[j].da);
  }
  if (count == 0) return;
  DeviceRegion region("lora_linear_backward.da", device);
  check_launch(op, launch_lora_da_group(x.raw(), code(x.dtype()), n, k, r, scale, d0.threshold, d0.keep_scale, d0.map,
                                        launch.data(), count, stream(device), x_pass_config()));
}

namespace {
EnvSwitch& swiglu_backward_switch() {
  static EnvSwitch sw("SWIFT_LORA_SWIGLU_BWD", false);
  return sw;
}
}  // namespace

bool lora_swiglu_backward_fused() { return swiglu_backward_switch().on(); }

void set_lora_swiglu_backward_fused(bool on) { swiglu_backward_switch().set(on); }

void lora_linear_swiglu_backward(const Tensor& dy, const Tensor& act, const Tensor& w, const Tensor& a,
                                 const Tensor& b, const Tensor& xa, float scale, const Dropout& dropout,
                                 const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup, Tensor& da,
                                 Tensor& db) {
  const char* op = "lora_linear_swiglu_backward";
  const int device = dev(act);
  const int64_t n = act.size(0), k = act.size(1), r = a.size(0);
  const DropoutParams d = params_of(dropout);
  const uint8_t* bits = keep_bits_of(dropout);
  // The fused pass where act's term would run as one ring pass (r 8, one-pass shapes) on 16-byte aligned operands;
  // else the two ops as they are.
  const bool fused = lora_swiglu_backward_fused() && r == 8 && factor_in_registers() && one_pass(act, r) &&
                     one_pass(dgate, r) && one_pass(gate, r) && one_pass(up, r) && one_pass(dup, r) &&
                     lora_swiglu_backward_fits(k, d.threshold, bits);
  DeferredPasses left;
  linear_backward_lora(dy, act, w, a, b, xa, scale, dropout, dgate, da, db, false, &left, false,
                       /*defer_term=*/fused);
  if (left.term) {
    DeviceRegion region("lora_linear_backward.dx_lora", device);
    check_launch(op, launch_lora_swiglu_backward(dgate.raw(), gate.raw(), up.raw(), code(act.dtype()),
                                                 left.g.data<float>(), a.data<float>(), n, k, scale, d.seed,
                                                 d.threshold, d.keep_scale, d.map, bits, dgate.raw(), dup.raw(),
                                                 stream(device)));
    return;
  }
  swiglu_backward(dgate, gate, up, dgate, dup);
}

namespace {
EnvSwitch& swiglu_dy_switch() {
  static EnvSwitch sw("SWIFT_LORA_SWIGLU_DY", false);
  return sw;
}
}  // namespace

bool lora_swiglu_dy_fused() { return swiglu_dy_switch().on(); }

void set_lora_swiglu_dy_fused(bool on) { swiglu_dy_switch().set(on); }

void swiglu_backward_lora_dy(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup,
                             const LoraDyStep& gate_step, const LoraDyStep& up_step, float scale) {
  const char* op = "swiglu_backward_lora_dy";
  const int device = dev(gate);
  const int64_t n = gate.size(0), m = gate.size(1);
  // One pass where each step's dy pass would be the one-pass kernel over the gradient it reads (dy_step_fused: BF16,
  // r 8, aligned rows): the swiglu's operands are then BF16 on 16-byte aligned rows too.
  bool fused = lora_swiglu_dy_fused() && n > 0 && m > 0;
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dout, &gate, &up, &dgate, &dup}) {
    fused = fused && one_pass(*t, 8) && t->dtype() == DType::BF16;
  }
  for (const LoraDyStep* step : {&gate_step, &up_step}) {
    fused = fused && dy_step_fused(dgate, step->b, step->xa, step->db);
  }
  if (!fused) {
    swiglu_backward(dout, gate, up, dgate, dup);
    for (auto [dy, step] : {std::pair{&dgate, &gate_step}, {&dup, &up_step}}) {
      Tensor g = step->g, db = step->db;
      dy_step(op, *dy, step->b, step->xa, scale, g, db);
    }
    return;
  }
  DeviceRegion region("swiglu_backward_lora_dy", device);
  const LoraDyWork work = lora_dy_work(n, m, 8);
  std::vector<Tensor> parts;  // held until the launch is queued
  LoraDyOutputs jobs[2];
  const LoraDyStep* steps[2] = {&gate_step, &up_step};
  for (int j = 0; j < 2; ++j) {
    const LoraDyStep& step = *steps[j];
    LoraDyOutputs& o = jobs[j];
    o.b = step.b.data<float>();
    o.xa = step.xa.data<float>();
    o.g = step.g.data<float>();
    if (work.part_g_floats > 0) {
      parts.push_back(workspace(work.part_g_floats, DType::F32, device));
      o.part_g = parts.back().data<float>();
    }
    if (step.db.defined()) {
      o.db = step.db.data<float>();
      parts.push_back(workspace(work.part_db_floats, DType::F32, device));
      o.part_db = parts.back().data<float>();
    }
  }
  check_launch(op, launch_lora_swiglu_dy(dout.raw(), gate.raw(), up.raw(), dgate.raw(), dup.raw(), n, m, jobs, scale,
                                         stream(device)));
}

}  // namespace swift::ops::cuda
