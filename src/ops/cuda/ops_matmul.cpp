// ops/cuda/ops_matmul.cpp — matrix products, LoRA linear and the chunked LM head + cross-entropy on CUDA.
//
// Invariants:
//  - Every product goes through cuda::matmul (blas.h: cuBLASLt, fp32 accumulation; F32 x F32 is pure fp32, no
//    TF32). A and B of one product share a dtype: where the op's tensors mix dtypes, the smaller or frozen side is
//    converted into workspace first:
//      * linear / linear_backward with w's dtype != the activation dtype: w converted in row chunks of at most
//        kConvertBytes (F32 activations: exact; BF16 activations with F32/F16 weights: w rounded to bf16, as torch
//        autocast does). Costs one extra read of w and a write + read of each chunk; the model's fast path (BF16
//        activations, BF16 weights) converts nothing.
//      * LoRA: the factors a, b and xa are F32. dropout(x) is formed in F32 (row chunks) and multiplied in fp32
//        with a (exact: PEFT runs the adapter in fp32); with BF16 activations the products against dy or y use b
//        and xa rounded to bf16 (r columns: tiny) with fp32 accumulation.
//      * cross-entropy: head chunks converted to the activation dtype when their dtypes differ.
//  - Outputs of 16-bit dtype are rounded once per product (accumulate: the old value is read in fp32, added, the
//    sum rounded). Parameter gradients (dw, dbias, da, db, dhead) are F32 and accumulate (+=).
//  - Cross-entropy never forms the (T, V) logits: valid tokens are compacted first (labels are read on the host,
//    validated there), then per chunk of at most kTokenChunk tokens: pass 1 sweeps the vocabulary in chunks (fp32
//    logits chunk in workspace, online log-sum-exp, label logit, first argmax); pass 2 (gradients only) recomputes
//    each chunk, forms dz = coef * (softmax - onehot) in the activation dtype, dhidden_chunk (F32) += dz Wc,
//    dhead[chunk] += dz^T H. CrossEntropyOptions' token_block / vocab_block tune the CPU kernel; the GPU picks
//    its own chunks (kLogitsBudget). loss_sum adds fp32 per-token terms in fp64 in token order, as the CPU.
//  - Everything runs on cuda::stream(device); host reads (labels in, stats out) go through Tensor::to, whose
//    synchronous copies are ordered after the stream's work.
#include "ops/cuda/cuda_ops.h"

#include <algorithm>
#include <vector>

#include "ops/cuda/blas.h"
#include "ops/cuda/kernels.cuh"
#include "ops/cuda/kernels_matmul.cuh"
#include "ops/op_checks.h"
#include "ops/philox.h"

namespace swift::ops::cuda {

namespace {

constexpr int64_t kConvertBytes = int64_t{64} << 20;    // weight conversion chunk
constexpr int64_t kLoraChunkBytes = int64_t{64} << 20;  // F32 dropout(x) / (g a) row chunks
constexpr int64_t kLogitsBudget = int64_t{256} << 20;   // logits chunk (+ dz chunk) of the cross-entropy
constexpr int64_t kTokenChunk = 16384;                  // valid tokens per cross-entropy chunk
constexpr int64_t kVocabChunkMin = 1024, kVocabChunkMax = 16384;

int code(DType d) { return static_cast<int>(d); }  // kernels' dtype codes: F32 0, BF16 1, F16 2
int code(const Tensor& t) { return code(t.dtype()); }
int64_t esize(DType d) { return d == DType::F32 ? 4 : 2; }
int dev(const Tensor& t) { return t.device().index; }

void check_launch(const char* op, cudaError_t status) {
  if (status != cudaSuccess) fail("op {}: CUDA kernel launch failed: {}", op, cudaGetErrorString(status));
}

const void* offset(const void* p, int64_t elems, DType d) { return static_cast<const char*>(p) + elems * esize(d); }
void* offset(void* p, int64_t elems, DType d) { return static_cast<char*>(p) + elems * esize(d); }

Tensor workspace(int64_t numel, DType dtype, int device) {
  return Tensor::empty({numel}, dtype, Device::cuda(device), MemoryCategory::Workspace);
}

// Converts `n` elements into `dst` (dtype conversion on the device's stream).
void convert(const char* op, const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, int device) {
  check_launch(op, launch_cast(src, code(src_dtype), dst, code(dst_dtype), n, stream(device)));
}

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

// y (n, m) [+]= x (n, k) w^T (+ bias), w of any float dtype (y contiguous, x.dtype()).
void linear_impl(const char* op, const Tensor& x, const Tensor& w, const Tensor& bias, void* y, bool accumulate) {
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
  args.beta = accumulate ? 1.0f : 0.0f;
  args.bias_dtype = code(b.dtype);
  if (w.dtype() == act) {
    args.m = m;
    args.b = w.raw();
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

struct DropoutParams {
  uint64_t seed = 0;
  uint32_t threshold = 0;
  float keep_scale = 1.0f;
};
DropoutParams params_of(const Dropout& d) {
  return {d.seed, dropout_threshold(d.p), d.p > 0.0f ? 1.0f / (1.0f - d.p) : 1.0f};
}

// Rows per F32 (rows, k) chunk of the LoRA paths.
int64_t lora_rows(int64_t n, int64_t k) {
  return std::clamp<int64_t>(kLoraChunkBytes / std::max<int64_t>(k * 4, 1), 1, std::max<int64_t>(n, 1));
}

// A copy of an F32 tensor in `dtype` (the same tensor when it already is).
Tensor as_dtype(const char* op, const Tensor& t, DType dtype) {
  if (t.dtype() == dtype) return t;
  Tensor out = workspace(t.numel(), dtype, dev(t));
  convert(op, t.raw(), t.dtype(), out.raw(), dtype, t.numel(), dev(t));
  return out;
}

}  // namespace

void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate) {
  linear_impl("linear", x, w, bias, y.raw(), accumulate);
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
                     bool accumulate_dx) {
  const char* op = "linear_backward";
  const int device = dev(dy);
  const int64_t n = dy.size(0), m = dy.size(1), k = w.size(1);
  if (dx.defined()) input_grad(op, dy, w, dx, accumulate_dx);
  if (dw.defined()) {  // dw (m, k) += dy^T x
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
    args.beta = 1.0f;
    matmul(op, device, args);
  }
  if (dbias.defined()) {
    check_launch(op, launch_column_sums_add(dy.raw(), code(dy), n, m, dbias.data<float>(), stream(device)));
  }
}

void lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b, float scale,
                 const Dropout& dropout, Tensor& y, Tensor& xa, bool accumulate) {
  const char* op = "lora_linear";
  const int device = dev(x);
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0), r = a.size(0);
  const DType act = x.dtype();
  linear_impl(op, x, w, bias, y.raw(), accumulate);
  if (n == 0 || r == 0) return;
  // xa (n, r) = dropout(x) a^T, in fp32.
  MatmulArgs xa_args;
  xa_args.trans_b = true;
  xa_args.m = r;
  xa_args.k = k;
  xa_args.lda = k;
  xa_args.b = a.raw();
  xa_args.ldb = k;
  xa_args.ldd = r;
  const bool fused_xa = (r == 8 || r == 16) && k % 4 == 0 && (act == DType::BF16 || act == DType::F32) &&
                        reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0;
  if (fused_xa) {  // one pass over x: dropout and the rank-r products together (memory-bound, ~x's bytes once)
    const DropoutParams d = params_of(dropout);
    check_launch(op, launch_lora_xa(x.raw(), code(act), a.data<float>(), n, k, static_cast<int>(r), d.seed, d.threshold,
                                    d.keep_scale, xa.data<float>(), stream(device)));
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
                                                  xd.data<float>(), stream(device)));
      xa_args.n = nr;
      xa_args.a = xd.raw();
      xa_args.d = offset(xa.raw(), n0 * r, DType::F32);
      matmul(op, device, xa_args);
    }
  }
  // y += scale * xa b^T (F32 factors; rounded to bf16 for bf16 activations).
  const Tensor xa_c = as_dtype(op, xa, act);
  const Tensor b_c = as_dtype(op, b, act);
  MatmulArgs args;
  args.trans_b = true;
  args.n = n;
  args.m = m;
  args.k = r;
  args.a = xa_c.raw();
  args.lda = r;
  args.b = b_c.raw();
  args.ldb = r;
  args.ab_dtype = code(act);
  args.d = y.raw();
  args.ldd = m;
  args.d_dtype = code(act);
  args.alpha = scale;
  args.beta = 1.0f;
  matmul(op, device, args);
}

void lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                          const Tensor& xa, float scale, const Dropout& dropout, Tensor& dx, Tensor& da, Tensor& db,
                          bool accumulate_dx) {
  const char* op = "lora_linear_backward";
  const int device = dev(x);
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0), r = a.size(0);
  const DType act = x.dtype();
  if (dx.defined()) input_grad(op, dy, w, dx, accumulate_dx);  // through the frozen weight
  if (n == 0 || r == 0) return;
  if (db.defined()) {  // db (m, r) += scale dy^T xa
    const Tensor xa_c = as_dtype(op, xa, act);
    MatmulArgs args;
    args.trans_a = true;
    args.n = m;
    args.m = r;
    args.k = n;
    args.a = dy.raw();
    args.lda = m;
    args.b = xa_c.raw();
    args.ldb = r;
    args.ab_dtype = code(act);
    args.d = db.raw();
    args.ldd = r;
    args.d_dtype = code(DType::F32);
    args.alpha = scale;
    args.beta = 1.0f;
    matmul(op, device, args);
  }
  if (!dx.defined() && !da.defined()) return;
  // g (n, r) = dy b, F32.
  Tensor g = workspace(n * r, DType::F32, device);
  {
    const Tensor b_c = as_dtype(op, b, act);
    MatmulArgs args;
    args.n = n;
    args.m = r;
    args.k = m;
    args.a = dy.raw();
    args.lda = m;
    args.b = b_c.raw();
    args.ldb = r;
    args.ab_dtype = code(act);
    args.d = g.raw();
    args.ldd = r;
    args.d_dtype = code(DType::F32);
    matmul(op, device, args);
  }
  if (k == 0) return;
  const DropoutParams d = params_of(dropout);
  const bool fused = (r == 8 || r == 16) && k % 4 == 0 && (act == DType::BF16 || act == DType::F32) &&
                     reinterpret_cast<uintptr_t>(x.raw()) % 16 == 0 &&
                     (!dx.defined() || reinterpret_cast<uintptr_t>(dx.raw()) % 16 == 0);
  if (fused) {  // one pass over dx and one over x, no (rows, k) F32 buffers
    if (dx.defined()) {
      check_launch(op, launch_lora_dx_fused(dx.raw(), code(act), g.data<float>(), a.data<float>(), n, k,
                                            static_cast<int>(r), scale, d.seed, d.threshold, d.keep_scale,
                                            stream(device)));
    }
    if (da.defined()) {
      Tensor part = workspace(lora_da_slices(n) * r * k, DType::F32, device);
      check_launch(op, launch_lora_da_fused(x.raw(), code(act), g.data<float>(), n, k, static_cast<int>(r), scale,
                                            d.seed, d.threshold, d.keep_scale, part.data<float>(), da.data<float>(),
                                            stream(device)));
    }
    return;
  }
  const int64_t rows = lora_rows(n, k);
  Tensor buf = workspace(rows * k, DType::F32, device);
  if (dx.defined()) {  // dx += scale * multiplier * (g a), F32 (rows, k) chunks
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
                                          d.threshold, d.keep_scale, stream(device)));
    }
  }
  if (da.defined()) {  // da (r, k) += scale g^T dropout(x), row chunks in order
    for (int64_t n0 = 0; n0 < n; n0 += rows) {
      const int64_t nr = std::min(rows, n - n0);
      check_launch(op, launch_dropout_rows_to_f32(x.raw(), code(act), n0, nr, k, d.seed, d.threshold, d.keep_scale,
                                                  buf.data<float>(), stream(device)));
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

// ---- LM head + cross-entropy ------------------------------------------------------------------------------------
namespace {

struct LmHeadJob {
  const char* op;
  const Tensor& hidden;
  const Tensor& head;
  const Tensor& labels;
  const CrossEntropyOptions& options;
  float grad_scale = 0.0f;       // cross_entropy's coefficient
  const Tensor* dlogp = nullptr;  // token_logprobs_backward: coefficient -dlogp[t]
  Tensor* dhidden = nullptr;      // defined outputs only
  Tensor* dhead = nullptr;
  Tensor* logp = nullptr;
};

// Runs the chunked passes; returns the stats (loss, tokens, correct) of the valid tokens.
CrossEntropyStats run_lm_head(const LmHeadJob& job) {
  const char* op = job.op;
  const int device = dev(job.hidden);
  cudaStream_t s = stream(device);
  const int64_t t = job.hidden.size(0), c = job.hidden.size(1), vocab = job.head.size(0);
  const DType act = job.hidden.dtype();
  const bool grad = job.dhidden != nullptr || job.dhead != nullptr;

  // Valid tokens, on the host (labels are small): positions and labels, validated.
  const Tensor labels_host = job.labels.to(Device::cpu(), MemoryCategory::Workspace);
  const int32_t* lab = labels_host.data<int32_t>();
  std::vector<int32_t> positions, valid_labels;
  positions.reserve(static_cast<size_t>(t));
  valid_labels.reserve(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) {
    if (lab[i] == job.options.ignore_index) continue;
    if (lab[i] < 0 || lab[i] >= vocab) {
      fail("{}: label {} at position {} is outside the vocabulary [0, {}) of head {} and is not ignore_index {}", op,
           lab[i], i, vocab, job.head.str(), job.options.ignore_index);
    }
    positions.push_back(static_cast<int32_t>(i));
    valid_labels.push_back(lab[i]);
  }
  const int64_t tv = static_cast<int64_t>(positions.size());
  CrossEntropyStats stats;
  stats.tokens = tv;
  if (job.dhidden != nullptr && tv < t) {
    const cudaError_t st = cudaMemsetAsync(job.dhidden->raw(), 0, job.dhidden->nbytes(), s);
    if (st != cudaSuccess) fail("op {}: cudaMemsetAsync failed: {}", op, cudaGetErrorString(st));
  }
  if (job.logp != nullptr) {
    const cudaError_t st = cudaMemsetAsync(job.logp->raw(), 0, job.logp->nbytes(), s);
    if (st != cudaSuccess) fail("op {}: cudaMemsetAsync failed: {}", op, cudaGetErrorString(st));
  }
  if (tv == 0) return stats;

  const Device cuda_dev = Device::cuda(device);
  const Tensor pos_d = Tensor::from_i32({tv}, positions).to(cuda_dev, MemoryCategory::Workspace);
  const Tensor lab_d = Tensor::from_i32({tv}, valid_labels).to(cuda_dev, MemoryCategory::Workspace);
  const int32_t* pos = pos_d.data<int32_t>();
  const int32_t* labels = lab_d.data<int32_t>();

  // Compacted hidden rows (tv, c) in the activation dtype.
  Tensor hc = job.hidden;
  if (tv < t) {
    hc = workspace(tv * c, act, device);
    check_launch(op, launch_gather_rows(job.hidden.raw(), code(act), pos, tv, c, hc.raw(), s));
  }
  // Per-token coefficients of the gradient.
  Tensor coef;
  if (grad) {
    if (job.dlogp != nullptr) {
      coef = workspace(tv, DType::F32, device);
      check_launch(op, launch_ce_coef_from_dlogp(job.dlogp->data<float>(), pos, tv, coef.data<float>(), s));
    } else {
      coef = Tensor::from_f32({tv}, std::vector<float>(static_cast<size_t>(tv), job.grad_scale))
                 .to(cuda_dev, MemoryCategory::Workspace);
    }
  }

  // Chunk sizes: tokens up to kTokenChunk; vocabulary rows so that the logits (+ dz) chunk fits kLogitsBudget.
  const int64_t tc_max = std::min(tv, kTokenChunk);
  const int64_t dz_bytes = (grad && act != DType::F32) ? 2 : 0;
  int64_t vc_max = kLogitsBudget / (tc_max * (4 + dz_bytes));
  vc_max = std::clamp<int64_t>(vc_max / 128 * 128, kVocabChunkMin, kVocabChunkMax);
  vc_max = std::min(vc_max, vocab);
  const bool convert_head = job.head.dtype() != act;

  Tensor logits = workspace(tc_max * vc_max, DType::F32, device);
  Tensor dz = dz_bytes ? workspace(tc_max * vc_max, act, device) : logits;  // F32: in place
  Tensor head_c = convert_head ? workspace(vc_max * c, act, device) : Tensor();
  Tensor dh_acc = job.dhidden ? workspace(tc_max * c, DType::F32, device) : Tensor();
  Tensor st_m = workspace(tv, DType::F32, device), st_l = workspace(tv, DType::F32, device);
  Tensor st_label = workspace(tv, DType::F32, device), st_lse = workspace(tv, DType::F32, device);
  Tensor st_loss = workspace(tv, DType::F32, device), st_arg = workspace(tv, DType::I32, device);

  // Head rows [v0, v0 + vc) in the activation dtype.
  auto head_chunk = [&](int64_t v0, int64_t vc) -> const void* {
    const void* src = offset(job.head.raw(), v0 * c, job.head.dtype());
    if (!convert_head) return src;
    convert(op, src, job.head.dtype(), head_c.raw(), act, vc * c, device);
    return head_c.raw();
  };
  // logits (tc, vc) = H[t0:t0+tc] Wc^T, F32.
  auto logits_chunk = [&](int64_t t0, int64_t tc, const void* wc, int64_t vc) {
    MatmulArgs args;
    args.trans_b = true;
    args.n = tc;
    args.m = vc;
    args.k = c;
    args.a = offset(hc.raw(), t0 * c, act);
    args.lda = c;
    args.b = wc;
    args.ldb = c;
    args.ab_dtype = code(act);
    args.d = logits.raw();
    args.ldd = vc;
    args.d_dtype = code(DType::F32);
    matmul(op, device, args);
  };

  for (int64_t t0 = 0; t0 < tv; t0 += tc_max) {
    const int64_t tc = std::min(tc_max, tv - t0);
    // Pass 1: statistics.
    for (int64_t v0 = 0; v0 < vocab; v0 += vc_max) {
      const int64_t vc = std::min(vc_max, vocab - v0);
      logits_chunk(t0, tc, head_chunk(v0, vc), vc);
      check_launch(op, launch_ce_chunk_stats(logits.data<float>(), tc, vc, vc, v0, labels + t0, v0 == 0,
                                             st_m.data<float>() + t0, st_l.data<float>() + t0,
                                             st_arg.data<int32_t>() + t0, st_label.data<float>() + t0, s));
    }
    check_launch(op, launch_ce_finish(st_m.data<float>() + t0, st_l.data<float>() + t0, st_label.data<float>() + t0,
                                      tc, st_lse.data<float>() + t0, st_loss.data<float>() + t0, s));
    if (!grad) continue;
    // Pass 2: dz = coef (softmax - onehot); dhidden rows += dz Wc; dhead rows += dz^T H.
    for (int64_t v0 = 0; v0 < vocab; v0 += vc_max) {
      const int64_t vc = std::min(vc_max, vocab - v0);
      const void* wc = head_chunk(v0, vc);
      logits_chunk(t0, tc, wc, vc);
      check_launch(op, launch_ce_dlogits(logits.data<float>(), tc, vc, vc, v0, labels + t0, st_lse.data<float>() + t0,
                                         coef.data<float>() + t0, dz.raw(), code(act), vc, s));
      if (job.dhidden != nullptr) {
        MatmulArgs args;
        args.n = tc;
        args.m = c;
        args.k = vc;
        args.a = dz.raw();
        args.lda = vc;
        args.b = wc;
        args.ldb = c;
        args.ab_dtype = code(act);
        args.d = dh_acc.raw();
        args.ldd = c;
        args.d_dtype = code(DType::F32);
        args.beta = v0 == 0 ? 0.0f : 1.0f;
        matmul(op, device, args);
      }
      if (job.dhead != nullptr) {
        MatmulArgs args;
        args.trans_a = true;
        args.n = vc;
        args.m = c;
        args.k = tc;
        args.a = dz.raw();
        args.lda = vc;
        args.b = offset(hc.raw(), t0 * c, act);
        args.ldb = c;
        args.ab_dtype = code(act);
        args.d = offset(job.dhead->raw(), v0 * c, DType::F32);
        args.ldd = c;
        args.d_dtype = code(DType::F32);
        args.beta = 1.0f;
        matmul(op, device, args);
      }
    }
    if (job.dhidden != nullptr) {
      check_launch(op, launch_scatter_rows_f32(dh_acc.data<float>(), pos + t0, tc, c, job.dhidden->raw(),
                                               code(job.dhidden->dtype()), s));
    }
  }
  if (job.logp != nullptr) {
    check_launch(op, launch_ce_logp(st_lse.data<float>(), st_label.data<float>(), pos, tv, job.logp->data<float>(), s));
  }
  // Stats on the host: fp32 terms summed in fp64 in token order, as the CPU kernel.
  const Tensor loss_h = st_loss.to(Device::cpu(), MemoryCategory::Workspace);
  const Tensor arg_h = st_arg.to(Device::cpu(), MemoryCategory::Workspace);
  const float* loss = loss_h.data<float>();
  const int32_t* arg = arg_h.data<int32_t>();
  for (int64_t i = 0; i < tv; ++i) {
    stats.loss_sum += static_cast<double>(loss[i]);
    stats.correct += arg[i] == valid_labels[static_cast<size_t>(i)] ? 1 : 0;
  }
  return stats;
}

}  // namespace

CrossEntropyStats cross_entropy(const Tensor& hidden, const Tensor& head, const Tensor& labels, float grad_scale,
                                Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options) {
  LmHeadJob job{"cross_entropy", hidden, head, labels, options};
  job.grad_scale = grad_scale;
  job.dhidden = dhidden.defined() ? &dhidden : nullptr;
  job.dhead = dhead.defined() ? &dhead : nullptr;
  const CrossEntropyStats stats = run_lm_head(job);
  // The step's synchronising op: a bad token id recorded by an earlier embedding / rope kernel surfaces here.
  check_device_errors(dev(hidden));
  return stats;
}

void token_logprobs(const Tensor& hidden, const Tensor& head, const Tensor& labels, Tensor& logp,
                    const CrossEntropyOptions& options) {
  LmHeadJob job{"token_logprobs", hidden, head, labels, options};
  job.logp = &logp;
  run_lm_head(job);
}

void token_logprobs_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, const Tensor& dlogp,
                             Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options) {
  if (!dhidden.defined() && !dhead.defined()) return;
  LmHeadJob job{"token_logprobs_backward", hidden, head, labels, options};
  job.dlogp = &dlogp;
  job.dhidden = dhidden.defined() ? &dhidden : nullptr;
  job.dhead = dhead.defined() ? &dhead : nullptr;
  run_lm_head(job);
}

}  // namespace swift::ops::cuda
