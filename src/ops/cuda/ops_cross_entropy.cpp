// ops/cuda/ops_cross_entropy.cpp — the LM head + cross-entropy on CUDA (ops.h: cross_entropy, token_logprobs,
// token_logprobs_backward). Each logits block is computed once over the full vocabulary and reused for the
// gradients; the kernels are in cross_entropy.cu (kernels_cross_entropy.cuh), the products go through cuda::matmul.
//
// Invariants:
//  - The (T, V) logits never exist. Valid tokens (label != ignore_index) are compacted first: labels are read and
//    validated on the host, the hidden rows gathered when some token is ignored. Then per row chunk of R valid
//    tokens (H_c: (R, C) in the activation dtype):
//      1. logits (R, V) F32 = H_c W^T: one cuBLASLt product (fp32 accumulation), row stride ld = V rounded up to a
//         multiple of 4 (16-byte rows for the kernels' float4 loads);
//      2. loss only: one kernel, one block per row: lse, label logit, loss = lse - label logit (fp32), first argmax;
//      3. gradients: one kernel, one read of each row (launch_ce_one_pass): the same statistics (the same bits), and
//         the row overwritten in place with unnormalised probabilities P = exp(z - shift) in the activation dtype (a
//         16-bit P fills the first half of each fp32 row: row stride 2 ld), the label's entry holding the onehot, and
//         a factor E per row such that dz = coef E P = coef (softmax - onehot);
//      4. dhidden_c = dz W = coef E (P W): one product into an F32 accumulator, then coef E applied per row as it is
//         scattered to the token rows (one rounding);
//      5. dhead (F32) += dz^T H_c = P^T (coef E H_c): the rows of H_c scaled and rounded to the activation dtype
//         (by coef / grad_scale, 1 for cross_entropy; grad_scale is the product's alpha), then one product.
//    SWIFT_CE_ONE_PASS=0 (A/B) keeps the two-read form: step 2's kernel, then dz = coef (softmax - onehot) rounded
//    in place (launch_ce_dlogits_in_place), then dhidden_c = dz W (straight into dhidden's rows when no token is
//    ignored and the head is one piece) and dhead += dz^T H_c. The two differ in rounding only: dz is rounded once
//    there; here P and the scaled H_c are (each relative 2^-9 in bf16), and the label's entry carries the onehot.
//    Head-sized products per call: 1 for the loss, 2 with dhidden (LoRA: the head is frozen), 3 with dhead (full).
//  - Logits are stored in fp32, not bf16: loss, lse and argmax are those of the fp32-accumulated product, as before
//    and as the CPU reference up to fp32 rounding (bf16 logits would move each by up to 2^-9 relative, ~0.03 at
//    |z| = 16, and create argmax ties). dz is rounded once to the activation dtype, as before.
//  - Workspace bound: the logits block R x ld x 4 bytes <= B, and a converted head copy (or piece) <= B, where
//    B = options.device_workspace_bytes, else 1 GiB, or 4 GiB when dhead is computed (each row chunk then reads and
//    writes all of dhead; SWIFT_CE_WORKSPACE_MB overrides both, for measurements), lowered to a quarter of the
//    device memory available (free + the caching allocator's free blocks) when that is less. R >= 1 and balanced
//    over the chunks: never O(T x V).
//  - A head whose dtype differs from the activations is converted to it: once per call when the whole copy fits B,
//    else per vocabulary piece of at most B bytes each time a product needs it (two conversions per row chunk).
//  - The chunking depends on (valid tokens, V, C, dtypes, B) only; kernels are deterministic and products use fixed
//    cuBLASLt plans. loss_sum adds the fp32 per-token terms in fp64 in token order, as the CPU.
//  - Vocabulary shards (cross_entropy_shard_stats / _backward) run the same passes on a shard of the head's rows with
//    labels relative to its first row (another shard's label matches no column: label logit 0, no onehot); the
//    backward's dz uses the whole vocabulary's lse (gathered to the valid tokens) instead of the block's. The shard's
//    per-token statistics go back to the token rows through the host (T floats each).
//  - Everything runs on cuda::stream(device); host reads (labels in, stats out) go through Tensor::to, whose
//    synchronous copies are ordered after the stream's work.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

#include "core/error.h"
#include "ops/cuda/blas.h"
#include "ops/cuda/cuda_backend.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/kernels.cuh"
#include "ops/cuda/kernels_cross_entropy.cuh"
#include "ops/cuda/op_support.h"
#include "ops/cuda/profile_events.h"
#include "ops/env_switch.h"

namespace swift::ops::cuda {

using namespace support;

namespace {

// Default bound B on the logits block (and on a converted head copy). At Qwen2's V = 152064 1 GiB holds 1765 rows of
// fp32 logits: products of >= 1024 rows run the tensor cores at full rate (the Timing test in
// tests/gpu/test_cuda_cross_entropy.cpp sweeps B). With dhead (full fine-tuning) every row chunk also reads and
// writes the whole F32 head gradient (0.54 GB at the 0.5B's V x 896): 4 GiB makes 4 chunks of a 16,384-token step
// instead of 10, 2-3% of the 0.5B step for 2.2 GiB more peak (PERFORMANCE run 14); without dhead the chunks cost
// nothing extra and B stays 1 GiB (the 7B LoRA's within-30-GiB configurations keep their peak).
constexpr int64_t kDefaultWorkspaceBytes = int64_t{1} << 30;
constexpr int64_t kDefaultWorkspaceBytesWithHeadGradient = int64_t{4} << 30;
constexpr int64_t kLogitsRowAlign = 4;  // ld % 4 == 0: every fp32 row (and 16-bit dz row) is 16-byte aligned

// B when the caller leaves it to the backend: SWIFT_CE_WORKSPACE_MB (MiB, for measurements; 0 when unset), else
// the default for calls with or without dhead.
int64_t default_workspace_bytes(const char* op, bool with_head_gradient) {
  static const int64_t from_env = [op] {
    const char* e = std::getenv("SWIFT_CE_WORKSPACE_MB");
    if (e == nullptr || *e == 0) return int64_t{0};
    char* end = nullptr;
    const long long mb = std::strtoll(e, &end, 10);
    if (end == e || *end != 0 || mb < 1 || mb > (1LL << 20)) {
      fail("op {}: SWIFT_CE_WORKSPACE_MB='{}' is not a number of MiB in [1, 2^20]", op, e);
    }
    return static_cast<int64_t>(mb) << 20;
  }();
  if (from_env > 0) return from_env;
  return with_head_gradient ? kDefaultWorkspaceBytesWithHeadGradient : kDefaultWorkspaceBytes;
}

EnvSwitch& one_pass_switch() {
  static EnvSwitch sw("SWIFT_CE_ONE_PASS", true);
  return sw;
}

// Splits `total` into the fewest chunks of at most `most` and returns the balanced chunk size.
int64_t balanced_chunk(int64_t total, int64_t most) {
  const int64_t chunks = (total + most - 1) / most;
  return (total + chunks - 1) / chunks;
}

// Bytes a workspace may take on `device`: free device memory plus the caching allocator's free blocks.
int64_t available_bytes(const char* op, int device) {
  int previous = 0;
  size_t free_bytes = 0, total_bytes = 0;
  cudaError_t status = cudaGetDevice(&previous);
  if (status == cudaSuccess && previous != device) status = cudaSetDevice(device);
  if (status == cudaSuccess) status = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (previous != device) cudaSetDevice(previous);
  if (status != cudaSuccess) fail("op {}: cudaMemGetInfo on cuda:{} failed: {}", op, device, cudaGetErrorString(status));
  return static_cast<int64_t>(free_bytes) + allocator_stats(device).cached_bytes;
}

struct LmHeadJob {
  const char* op;
  const Tensor& hidden;
  const Tensor& head;
  const Tensor& labels;
  const CrossEntropyOptions& options;
  float grad_scale = 0.0f;        // cross_entropy's coefficient
  const Tensor* dlogp = nullptr;  // token_logprobs_backward: coefficient -dlogp[t]
  Tensor* dhidden = nullptr;      // defined outputs only
  Tensor* dhead = nullptr;
  Tensor* logp = nullptr;
  // Vocabulary shard (cross_entropy_shard_stats / _backward): the head is rows [vocab_offset, ...) of the whole one
  // (-1: the whole head); labels are whole-vocabulary ids, kept relative to vocab_offset (another shard's label
  // matches no column). whole_lse: (T) the whole vocabulary's lse, used for dz instead of the shard's own.
  int64_t vocab_offset = -1;
  const Tensor* whole_lse = nullptr;
  Tensor *out_lse = nullptr, *out_label = nullptr, *out_max = nullptr, *out_argmax = nullptr;  // (T) stats outputs
};

// The head in the activation dtype, as the products read it: the head itself, one converted copy, or converted
// pieces of at most `budget` bytes (each conversion runs when a product asks for the piece).
class HeadOperand {
 public:
  HeadOperand(const char* op, const Tensor& head, DType act, int64_t budget)
      : op_(op), head_(head), act_(act), device_(dev(head)), vocab_(head.size(0)), c_(head.size(1)) {
    if (head.dtype() == act) {
      whole_ = head.raw();
      piece_rows_ = vocab_;
      return;
    }
    const int64_t row_bytes = c_ * esize(act);
    piece_rows_ = balanced_chunk(vocab_, std::clamp<int64_t>(budget / row_bytes, 1, vocab_));
    buffer_ = workspace(piece_rows_ * c_, act, device_);
    if (piece_rows_ == vocab_) {  // fits: convert once
      convert(0, vocab_);
      whole_ = buffer_.raw();
    }
  }
  bool single_piece() const { return piece_rows_ == vocab_; }
  // Calls fn(v0, vc, rows) for the pieces in order; rows: (vc, C) in the activation dtype.
  template <typename Fn>
  void for_each_piece(Fn&& fn) {
    if (whole_ != nullptr) {
      fn(int64_t{0}, vocab_, whole_);
      return;
    }
    for (int64_t v0 = 0; v0 < vocab_; v0 += piece_rows_) {
      const int64_t vc = std::min(piece_rows_, vocab_ - v0);
      convert(v0, vc);
      fn(v0, vc, static_cast<const void*>(buffer_.raw()));
    }
  }

 private:
  void convert(int64_t v0, int64_t vc) {
    check_launch(op_, launch_cast(offset(head_.raw(), v0 * c_, head_.dtype()), code(head_.dtype()), buffer_.raw(),
                                  code(act_), vc * c_, stream(device_)));
  }
  const char* op_;
  const Tensor& head_;
  DType act_;
  int device_;
  int64_t vocab_, c_;
  int64_t piece_rows_ = 0;
  const void* whole_ = nullptr;
  Tensor buffer_;
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
  const Tensor labels_host = host_values(job.labels);  // its HostMirror (ops.h) when the caller registered one
  const int32_t* lab = labels_host.data<int32_t>();
  std::vector<int32_t> positions, valid_labels;
  positions.reserve(static_cast<size_t>(t));
  valid_labels.reserve(static_cast<size_t>(t));
  const bool shard = job.vocab_offset >= 0;
  for (int64_t i = 0; i < t; ++i) {
    if (lab[i] == job.options.ignore_index) continue;
    if (shard && lab[i] < 0) fail("{}: label {} at position {} is negative and not ignore_index", op, lab[i], i);
    if (shard) {
      positions.push_back(static_cast<int32_t>(i));
      valid_labels.push_back(static_cast<int32_t>(lab[i] - job.vocab_offset));
      continue;
    }
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
  for (Tensor* out : {job.out_lse, job.out_label, job.out_max, job.out_argmax}) {
    if (out == nullptr) continue;
    const cudaError_t st = cudaMemsetAsync(out->raw(), 0, out->nbytes(), s);
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

  // Workspace bound and chunks.
  const int64_t requested = job.options.device_workspace_bytes > 0 ? job.options.device_workspace_bytes
                                                                   : default_workspace_bytes(op, job.dhead != nullptr);
  const int64_t budget = std::min(requested, available_bytes(op, device) / 4);
  const int64_t ld = (vocab + kLogitsRowAlign - 1) / kLogitsRowAlign * kLogitsRowAlign;
  const int64_t rows = balanced_chunk(tv, std::clamp<int64_t>(budget / (ld * 4), 1, tv));
  const int64_t ldz = ld * 4 / esize(act);  // dz row stride (elements of the activation dtype), in place
  HeadOperand head(op, job.head, act, budget);
  const bool one_pass = grad && one_pass_switch().on();
  const bool dhidden_direct = job.dhidden != nullptr && tv == t && head.single_piece() && !one_pass;
  // One pass: E per row, and the rows of H_c scaled for dhead's product (coef / coef_div, coef_div its alpha).
  Tensor row_e = one_pass ? workspace(tv, DType::F32, device) : Tensor();
  Tensor h_scaled = one_pass && job.dhead != nullptr ? workspace(rows * c, act, device) : Tensor();
  const float coef_div =
      job.dlogp == nullptr && job.grad_scale != 0.0f && std::isfinite(job.grad_scale) ? job.grad_scale : 1.0f;

  Tensor logits = workspace(rows * ld, DType::F32, device);
  Tensor dh_acc = job.dhidden != nullptr && !dhidden_direct ? workspace(rows * c, DType::F32, device) : Tensor();
  Tensor st_lse = workspace(tv, DType::F32, device), st_label = workspace(tv, DType::F32, device);
  Tensor st_loss = workspace(tv, DType::F32, device), st_arg = workspace(tv, DType::I32, device);
  Tensor st_max = job.out_max != nullptr ? workspace(tv, DType::F32, device) : Tensor();
  // dz's lse: the whole vocabulary's for a shard (gathered to the valid tokens), else the block's own.
  Tensor dz_lse = st_lse;
  if (grad && job.whole_lse != nullptr) {
    dz_lse = workspace(tv, DType::F32, device);
    check_launch(op, launch_gather_rows(job.whole_lse->raw(), code(DType::F32), pos, tv, 1, dz_lse.raw(), s));
  }

  for (int64_t t0 = 0; t0 < tv; t0 += rows) {
    const int64_t tc = std::min(rows, tv - t0);
    const void* h_chunk = offset(hc.raw(), t0 * c, act);
    // 1. logits (tc, V) = H_c W^T, F32, row stride ld.
    std::optional<DeviceRegion> region(std::in_place, "cross_entropy.logits", device);
    head.for_each_piece([&](int64_t v0, int64_t vc, const void* w) {
      MatmulArgs args;
      args.trans_b = true;
      args.n = tc;
      args.m = vc;
      args.k = c;
      args.a = h_chunk;
      args.lda = c;
      args.b = w;
      args.ldb = c;
      args.ab_dtype = code(act);
      args.d = offset(logits.raw(), v0, DType::F32);
      args.ldd = ld;
      args.d_dtype = code(DType::F32);
      matmul(op, device, args);
    });
    float* max_out = st_max.defined() ? st_max.data<float>() + t0 : nullptr;
    if (one_pass) {
      // 2-3. statistics and P (E per row), one read of the block.
      region.emplace("cross_entropy.one_pass", device);
      check_launch(op, launch_ce_one_pass(logits.data<float>(), tc, vocab, ld, labels + t0,
                                          job.whole_lse != nullptr ? dz_lse.data<float>() + t0 : nullptr,
                                          st_lse.data<float>() + t0, st_label.data<float>() + t0,
                                          st_loss.data<float>() + t0, st_arg.data<int32_t>() + t0, max_out,
                                          row_e.data<float>() + t0, code(act), s));
    } else {
      // 2. per-row statistics.
      region.emplace("cross_entropy.row_stats", device);
      check_launch(op, launch_ce_row_stats(logits.data<float>(), tc, vocab, ld, labels + t0, st_lse.data<float>() + t0,
                                           st_label.data<float>() + t0, st_loss.data<float>() + t0,
                                           st_arg.data<int32_t>() + t0, max_out, s));
      if (!grad) continue;
      // 3. dz = coef (softmax - onehot), in place, activation dtype, row stride ldz.
      region.emplace("cross_entropy.dlogits", device);
      check_launch(op, launch_ce_dlogits_in_place(logits.data<float>(), tc, vocab, ld, labels + t0,
                                                  dz_lse.data<float>() + t0, coef.data<float>() + t0, code(act), s));
    }
    // 4. dhidden rows = dz W (one pass: coef E (P W), the factor applied as the rows are scattered).
    if (job.dhidden != nullptr) {
      region.emplace("cross_entropy.dhidden", device);
      void* out = dhidden_direct ? offset(job.dhidden->raw(), t0 * c, act) : dh_acc.raw();
      const DType out_dtype = dhidden_direct ? act : DType::F32;
      head.for_each_piece([&](int64_t v0, int64_t vc, const void* w) {
        MatmulArgs args;
        args.n = tc;
        args.m = c;
        args.k = vc;
        args.a = offset(logits.raw(), v0, act);
        args.lda = ldz;
        args.b = w;
        args.ldb = c;
        args.ab_dtype = code(act);
        args.d = out;
        args.ldd = c;
        args.d_dtype = code(out_dtype);
        args.beta = v0 == 0 ? 0.0f : 1.0f;
        matmul(op, device, args);
      });
      if (!dhidden_direct) {
        check_launch(op, launch_scatter_rows_f32(dh_acc.data<float>(), pos + t0, tc, c, job.dhidden->raw(),
                                                 code(job.dhidden->dtype()), s,
                                                 one_pass ? row_e.data<float>() + t0 : nullptr,
                                                 one_pass ? coef.data<float>() + t0 : nullptr));
      }
    }
    // 5. dhead (V, C) += dz^T H_c (one pass: coef_div P^T H_s, H_s = H_c scaled by E coef / coef_div).
    if (job.dhead != nullptr) {
      region.emplace("cross_entropy.dhead", device);
      if (one_pass) {
        check_launch(op, launch_ce_scale_rows(h_chunk, code(act), tc, c, row_e.data<float>() + t0,
                                              coef.data<float>() + t0, coef_div, h_scaled.raw(), s));
      }
      MatmulArgs args;
      args.trans_a = true;
      args.n = vocab;
      args.m = c;
      args.k = tc;
      args.a = logits.raw();
      args.lda = ldz;
      args.b = one_pass ? h_scaled.raw() : h_chunk;
      args.ldb = c;
      args.ab_dtype = code(act);
      args.d = job.dhead->raw();
      args.ldd = c;
      args.d_dtype = code(DType::F32);
      args.alpha = one_pass ? coef_div : 1.0f;
      args.beta = 1.0f;
      matmul(op, device, args);
    }
  }
  if (job.logp != nullptr) {
    check_launch(op, launch_ce_logp(st_lse.data<float>(), st_label.data<float>(), pos, tv, job.logp->data<float>(), s));
  }
  if (job.out_lse != nullptr) {  // a shard's per-token statistics, scattered to the token rows on the host
    const Tensor lse_h = st_lse.to(Device::cpu(), MemoryCategory::Workspace);
    const Tensor label_h = st_label.to(Device::cpu(), MemoryCategory::Workspace);
    const Tensor max_h = st_max.to(Device::cpu(), MemoryCategory::Workspace);
    const Tensor arg_h = st_arg.to(Device::cpu(), MemoryCategory::Workspace);
    std::vector<float> lse_t(static_cast<size_t>(t), 0.0f), label_t(lse_t), max_t(lse_t);
    std::vector<int32_t> arg_t(static_cast<size_t>(t), 0);
    for (int64_t i = 0; i < tv; ++i) {
      const size_t p = static_cast<size_t>(positions[static_cast<size_t>(i)]);
      lse_t[p] = lse_h.data<float>()[i];
      label_t[p] = label_h.data<float>()[i];
      max_t[p] = max_h.data<float>()[i];
      arg_t[p] = static_cast<int32_t>(job.vocab_offset + arg_h.data<int32_t>()[i]);
    }
    job.out_lse->copy_from(Tensor::from_f32({t}, lse_t));
    job.out_label->copy_from(Tensor::from_f32({t}, label_t));
    job.out_max->copy_from(Tensor::from_f32({t}, max_t));
    job.out_argmax->copy_from(Tensor::from_i32({t}, arg_t));
    return stats;
  }
  if (shard) return stats;
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

void set_ce_one_pass(bool on) { one_pass_switch().set(on); }

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

void cross_entropy_shard_stats(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                               Tensor& lse, Tensor& label_logit, Tensor& max_logit, Tensor& argmax,
                               const CrossEntropyOptions& options) {
  LmHeadJob job{"cross_entropy_shard_stats", hidden, head, labels, options};
  job.vocab_offset = vocab_offset;
  job.out_lse = &lse;
  job.out_label = &label_logit;
  job.out_max = &max_logit;
  job.out_argmax = &argmax;
  run_lm_head(job);
  check_device_errors(dev(hidden));
}

void cross_entropy_shard_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                                  const Tensor& lse, float grad_scale, Tensor& dhidden, Tensor& dhead,
                                  const CrossEntropyOptions& options) {
  if (!dhidden.defined() && !dhead.defined()) return;
  LmHeadJob job{"cross_entropy_shard_backward", hidden, head, labels, options};
  job.vocab_offset = vocab_offset;
  job.whole_lse = &lse;
  job.grad_scale = grad_scale;
  job.dhidden = dhidden.defined() ? &dhidden : nullptr;
  job.dhead = dhead.defined() ? &dhead : nullptr;
  run_lm_head(job);
}

}  // namespace swift::ops::cuda
