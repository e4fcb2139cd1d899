// ops/cpu/cross_entropy.cpp — fast CPU LM head + cross-entropy / token log-probabilities, chunked over tokens and
// vocabulary: the (T, V) logits never exist.
//
// Core sweep (pass 1), one work item per block of at most token_block valid tokens (items run in parallel):
//   for each block of vocab_block rows of the head: S = H Wb^T (sgemm), then per token an online log-sum-exp
//   (running max m, running sum l), the label's logit and the running argmax; when dhidden is wanted also the
//   unnormalised expectation acc = sum_v exp(z_v - m) W_v (acc += P Wb, rescaled when m grows), so that
//   dhidden = coef * (acc / l - W_label) needs no second sweep: d(-log p_label)/dh = E_p[W] - W_label.
// Head gradient (pass 2, only with dhead), one work item per block of head rows (items run in parallel, each
//   owns its rows of dhead): S recomputed for all valid tokens, dZ = coef * (exp(S - lse) - onehot(label)),
//   dWb += dZ^T H.
//
// Invariants:
//  - Tokens whose label is ignore_index are dropped first (their hidden rows are never multiplied); their rows
//    of dhidden are written as 0, their logp as 0.
//  - Work items depend on (valid tokens, token_block, vocab_block, OpenMP thread count) only, so results are
//    reproducible run to run. The sweep's token blocks are split evenly into a multiple of the thread count
//    (like linear's tiles, a different thread count may change the last bits: sgemm rounds by row block).
//  - 16-bit heads are converted per vocabulary block into per-thread scratch (converted once per item).
//  - argmax is the first maximal index (strict > within a block and across blocks), as torch.argmax.
//  - coef per token: grad_scale for cross_entropy, -dlogp for token_logprobs_backward.
//  - Vocabulary shards (cross_entropy_shard_*): labels are kept relative to the shard's first row (another shard's
//    label matches no row: label logit 0, no onehot). The backward's sweep scales the shard's expectation by
//    exp(lse_shard - lse_whole), so dhidden is the shard's term of the whole softmax's, and pass 2 uses lse_whole.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/profile.h"
#include "ops/cpu/cpu_ops.h"

namespace swift::ops::cpu {

namespace {

// The valid tokens of a call, compacted: their positions, labels and hidden rows.
struct ValidTokens {
  std::vector<int64_t> position;
  std::vector<int32_t> label;
  Tensor hidden;  // (Tv, C) F32 workspace
  int64_t count() const { return static_cast<int64_t>(position.size()); }
};

// Labels are stored relative to `vocab_offset` (a vocabulary shard's first row; 0 for a whole head): a shard's
// tokens whose label lies in another shard keep a label outside [0, V) and never match a row.
ValidTokens gather_valid(const Tensor& hidden, const Tensor& labels, int32_t ignore_index, int64_t vocab_offset = 0) {
  ValidTokens v;
  const int64_t t = hidden.size(0), c = hidden.size(1);
  const int32_t* lab = labels.data<int32_t>();
  for (int64_t i = 0; i < t; ++i) {
    if (lab[i] == ignore_index) continue;
    v.position.push_back(i);
    v.label.push_back(static_cast<int32_t>(lab[i] - vocab_offset));
  }
  const int64_t n = v.count();
  v.hidden = Tensor::empty({n, c}, DType::F32, Device::cpu(), MemoryCategory::Workspace);
  const float* src = hidden.data<float>();
  float* dst = v.hidden.data<float>();
#pragma omp parallel for schedule(static) if (n * c >= 65536)
  for (int64_t i = 0; i < n; ++i) std::copy(src + v.position[i] * c, src + (v.position[i] + 1) * c, dst + i * c);
  return v;
}

// Rows [v0, v0 + rows) of the head as fp32: a pointer into the tensor, or converted into `scratch`.
const float* head_rows(const Tensor& head, int64_t v0, int64_t rows, float* scratch) {
  const int64_t c = head.size(1);
  if (head.dtype() == DType::F32) return head.data<float>() + v0 * c;
  to_f32(static_cast<const char*>(head.raw()) + dtype_bytes(head.dtype(), v0 * c), head.dtype(), scratch, rows * c);
  return scratch;
}

// Per valid token results of the sweep.
struct SweepResult {
  std::vector<float> lse, label_logit, max_logit;
  std::vector<int64_t> argmax;
};

struct Sweep {
  const ValidTokens& tokens;
  const Tensor& head;
  const CrossEntropyOptions& options;
  const float* coef;  // per valid token, or null: no dhidden
  float* dhidden;     // (T, C) rows of valid tokens written (=), or null
  SweepResult& result;
  // Vocabulary shard (cross_entropy_shard_backward): the whole vocabulary's lse per valid token, or null. The
  // shard's term of dhidden is then coef * (exp(lse_shard - lse_whole) * acc / l - [label in shard] W_label).
  const float* whole_lse = nullptr;
};

// Pass 1 over valid tokens [a, b).
void sweep_item(const Sweep& sw, int64_t a, int64_t b) {
  const int64_t nt = b - a, c = sw.head.size(1), vocab = sw.head.size(0), vb = sw.options.vocab_block;
  const bool grad = sw.dhidden != nullptr;
  const size_t floats = static_cast<size_t>(nt * vb + (grad ? nt * c : 0) + 2 * nt +
                                            (sw.head.dtype() == DType::F32 ? 0 : vb * c) + c);
  float* s = thread_scratch(ScratchSlot::Attention, floats);
  float* acc = s + nt * vb;
  float* m = acc + (grad ? nt * c : 0);
  float* l = m + nt;
  float* wrow = l + nt;   // (C): one converted head row
  float* wconv = wrow + c;  // (vb, C) converted block (16-bit heads)
  const float* h = sw.tokens.hidden.data<float>() + a * c;
  const int32_t* label = sw.tokens.label.data() + a;
  float* label_logit = sw.result.label_logit.data() + a;
  int64_t* argmax = sw.result.argmax.data() + a;
  std::fill(m, m + nt, -INFINITY);
  std::fill(l, l + nt, 0.0f);
  if (grad) std::fill(acc, acc + nt * c, 0.0f);
  for (int64_t i = 0; i < nt; ++i) argmax[i] = 0;
  for (int64_t v0 = 0; v0 < vocab; v0 += vb) {
    const int64_t nv = std::min(vb, vocab - v0);
    const float* wb = head_rows(sw.head, v0, nv, wconv);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nt), static_cast<int>(nv),
                static_cast<int>(c), 1.0f, h, static_cast<int>(c), wb, static_cast<int>(c), 0.0f, s,
                static_cast<int>(vb));
    for (int64_t i = 0; i < nt; ++i) {
      float* row = s + i * vb;
      if (label[i] >= v0 && label[i] < v0 + nv) label_logit[i] = row[label[i] - v0];
      float block_max = -INFINITY;
#pragma omp simd reduction(max : block_max)
      for (int64_t j = 0; j < nv; ++j) block_max = std::max(block_max, row[j]);
      if (block_max > m[i]) {  // a new running maximum: its first index in this block
        int64_t j = 0;
        while (j < nv && row[j] != block_max) ++j;
        argmax[i] = v0 + j;
      }
      const float m_new = std::max(m[i], block_max);
      const float alpha = exp_approx(m[i] - m_new);
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < nv; ++j) {
        const float e = exp_approx(row[j] - m_new);
        row[j] = e;
        sum += e;
      }
      l[i] = l[i] * alpha + sum;
      m[i] = m_new;
      if (grad && alpha != 1.0f) {
        float* ar = acc + i * c;
#pragma omp simd
        for (int64_t e = 0; e < c; ++e) ar[e] *= alpha;
      }
    }
    if (grad) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nt), static_cast<int>(c),
                  static_cast<int>(nv), 1.0f, s, static_cast<int>(vb), wb, static_cast<int>(c), 1.0f, acc,
                  static_cast<int>(c));
    }
  }
  for (int64_t i = 0; i < nt; ++i) {
    const float lse_i = m[i] + std::log(l[i]);
    sw.result.lse[static_cast<size_t>(a + i)] = lse_i;
    sw.result.max_logit[static_cast<size_t>(a + i)] = m[i];
    if (!grad) continue;
    float inv_l = 1.0f / l[i];
    const float cf = sw.coef[a + i];
    if (sw.whole_lse != nullptr) inv_l *= std::exp(lse_i - sw.whole_lse[a + i]);  // this shard's share of softmax
    const float* ar = acc + i * c;
    float* out = sw.dhidden + sw.tokens.position[static_cast<size_t>(a + i)] * c;
    if (label[i] < 0 || label[i] >= vocab) {  // the label lies in another shard
#pragma omp simd
      for (int64_t e = 0; e < c; ++e) out[e] = cf * (ar[e] * inv_l);
      continue;
    }
    const float* wl = head_rows(sw.head, label[i], 1, wrow);
#pragma omp simd
    for (int64_t e = 0; e < c; ++e) out[e] = cf * (ar[e] * inv_l - wl[e]);
  }
}

// Work items of the sweep over n valid tokens: at most token_block rows each, as few as that allows, rounded up
// to a multiple of the thread count so threads get equal row counts (fewer, larger items amortise converting and
// packing each head block: 256 rows run ~20% faster than 128), never below kMinItemRows rows each.
int64_t sweep_items(int64_t n, int64_t token_block, int threads) {
  constexpr int64_t kMinItemRows = 16;
  const int64_t needed = (n + token_block - 1) / token_block;  // items of at most token_block rows
  const int64_t balanced = (needed + threads - 1) / threads * threads;
  return std::min(balanced, std::max(needed, n / kMinItemRows));
}

// Pass 1 for all valid tokens; rows of dhidden of ignored tokens are zeroed.
SweepResult sweep(const ValidTokens& tokens, const Tensor& head, const CrossEntropyOptions& options, const float* coef,
                  Tensor& dhidden, const float* whole_lse = nullptr) {
  const int64_t n = tokens.count(), c = head.size(1);
  SweepResult result;
  result.lse.assign(static_cast<size_t>(n), 0.0f);
  result.label_logit.assign(static_cast<size_t>(n), 0.0f);
  result.max_logit.assign(static_cast<size_t>(n), 0.0f);
  result.argmax.assign(static_cast<size_t>(n), 0);
  float* pdh = dhidden.defined() ? dhidden.data<float>() : nullptr;
  if (pdh) {  // zero the rows of ignored tokens
    const int64_t t = dhidden.size(0);
    size_t next = 0;
    for (int64_t i = 0; i < t; ++i) {
      if (next < tokens.position.size() && tokens.position[next] == i) {
        ++next;
        continue;
      }
      std::fill(pdh + i * c, pdh + (i + 1) * c, 0.0f);
    }
  }
  if (n == 0) return result;
  blas_single_threaded();
  const Sweep sw{tokens, head, options, coef, pdh, result, whole_lse};
  const double work = static_cast<double>(n) * head.size(0) * c;
  const int threads = work > 1e6 ? omp_get_max_threads() : 1;
  const int64_t items = sweep_items(n, options.token_block, threads);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (items > 1)
  for (int64_t it = 0; it < items; ++it) sweep_item(sw, it * n / items, (it + 1) * n / items);
  return result;
}

// Pass 2: dhead += dZ^T H, one item per vocabulary block.
void head_gradient(const ValidTokens& tokens, const Tensor& head, const CrossEntropyOptions& options, const float* coef,
                   const std::vector<float>& lse, Tensor& dhead) {
  const int64_t n = tokens.count(), c = head.size(1), vocab = head.size(0);
  if (n == 0) return;
  const int64_t vb = options.vocab_block, tb = options.token_block, items = (vocab + vb - 1) / vb;
  const float* h = tokens.hidden.data<float>();
  float* pdw = dhead.data<float>();
  const double work = static_cast<double>(n) * vocab * c;
#pragma omp parallel if (items > 1 && work > 1e6)
  {
    const size_t floats = static_cast<size_t>(tb * vb + (head.dtype() == DType::F32 ? 0 : vb * c));
    float* s = thread_scratch(ScratchSlot::Attention, floats);
    float* wconv = s + tb * vb;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t v0 = it * vb, nv = std::min(vb, vocab - v0);
      const float* wb = head_rows(head, v0, nv, wconv);
      for (int64_t a = 0; a < n; a += tb) {
        const int64_t nt = std::min(tb, n - a);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nt), static_cast<int>(nv),
                    static_cast<int>(c), 1.0f, h + a * c, static_cast<int>(c), wb, static_cast<int>(c), 0.0f, s,
                    static_cast<int>(vb));
        for (int64_t i = 0; i < nt; ++i) {
          float* row = s + i * vb;
          const float l = lse[static_cast<size_t>(a + i)], cf = coef[a + i];
          const int64_t lab = tokens.label[static_cast<size_t>(a + i)] - v0;  // may lie outside [0, nv)
#pragma omp simd
          for (int64_t j = 0; j < nv; ++j) row[j] = cf * (exp_approx(row[j] - l) - (j == lab ? 1.0f : 0.0f));
        }
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(nv), static_cast<int>(c),
                    static_cast<int>(nt), 1.0f, s, static_cast<int>(vb), h + a * c, static_cast<int>(c), 1.0f,
                    pdw + v0 * c, static_cast<int>(c));
      }
    }
  }
}

}  // namespace

CrossEntropyStats cross_entropy(const Tensor& hidden, const Tensor& head, const Tensor& labels, float grad_scale,
                                Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options) {
  SWIFT_PROFILE("cross_entropy");
  const ValidTokens tokens = gather_valid(hidden, labels, options.ignore_index);
  const int64_t n = tokens.count();
  const std::vector<float> coef(static_cast<size_t>(n), grad_scale);
  const SweepResult r = sweep(tokens, head, options, coef.data(), dhidden);
  CrossEntropyStats stats;
  stats.tokens = n;
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    stats.loss_sum += static_cast<double>(r.lse[u] - r.label_logit[u]);
    stats.correct += r.argmax[u] == tokens.label[u] ? 1 : 0;
  }
  if (dhead.defined()) head_gradient(tokens, head, options, coef.data(), r.lse, dhead);
  return stats;
}

void token_logprobs(const Tensor& hidden, const Tensor& head, const Tensor& labels, Tensor& logp,
                    const CrossEntropyOptions& options) {
  SWIFT_PROFILE("token_logprobs");
  const ValidTokens tokens = gather_valid(hidden, labels, options.ignore_index);
  Tensor none;
  const SweepResult r = sweep(tokens, head, options, nullptr, none);
  float* out = logp.data<float>();
  std::fill(out, out + logp.numel(), 0.0f);
  for (int64_t i = 0; i < tokens.count(); ++i) {
    const size_t u = static_cast<size_t>(i);
    out[tokens.position[u]] = r.label_logit[u] - r.lse[u];
  }
}

void token_logprobs_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, const Tensor& dlogp,
                             Tensor& dhidden, Tensor& dhead, const CrossEntropyOptions& options) {
  SWIFT_PROFILE("token_logprobs_backward");
  const ValidTokens tokens = gather_valid(hidden, labels, options.ignore_index);
  const int64_t n = tokens.count();
  std::vector<float> coef(static_cast<size_t>(n));
  const float* g = dlogp.data<float>();
  for (int64_t i = 0; i < n; ++i) coef[static_cast<size_t>(i)] = -g[tokens.position[static_cast<size_t>(i)]];
  if (!dhidden.defined() && !dhead.defined()) return;
  const SweepResult r = sweep(tokens, head, options, coef.data(), dhidden);
  if (dhead.defined()) head_gradient(tokens, head, options, coef.data(), r.lse, dhead);
}

void cross_entropy_shard_stats(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                               Tensor& lse, Tensor& label_logit, Tensor& max_logit, Tensor& argmax,
                               const CrossEntropyOptions& options) {
  SWIFT_PROFILE("cross_entropy_shard_stats");
  const ValidTokens tokens = gather_valid(hidden, labels, options.ignore_index, vocab_offset);
  Tensor none;
  const SweepResult r = sweep(tokens, head, options, nullptr, none);
  float* out_lse = lse.data<float>();
  float* out_label = label_logit.data<float>();
  float* out_max = max_logit.data<float>();
  int32_t* out_arg = argmax.data<int32_t>();
  const int64_t t = hidden.size(0);
  std::fill(out_lse, out_lse + t, 0.0f);
  std::fill(out_label, out_label + t, 0.0f);
  std::fill(out_max, out_max + t, 0.0f);
  std::fill(out_arg, out_arg + t, 0);
  for (int64_t i = 0; i < tokens.count(); ++i) {
    const size_t u = static_cast<size_t>(i);
    const int64_t p = tokens.position[u];
    out_lse[p] = r.lse[u];
    out_label[p] = r.label_logit[u];  // 0 when the label lies in another shard (never written by the sweep)
    out_max[p] = r.max_logit[u];
    out_arg[p] = static_cast<int32_t>(vocab_offset + r.argmax[u]);
  }
}

void cross_entropy_shard_backward(const Tensor& hidden, const Tensor& head, const Tensor& labels, int64_t vocab_offset,
                                  const Tensor& lse, float grad_scale, Tensor& dhidden, Tensor& dhead,
                                  const CrossEntropyOptions& options) {
  SWIFT_PROFILE("cross_entropy_shard_backward");
  const ValidTokens tokens = gather_valid(hidden, labels, options.ignore_index, vocab_offset);
  const int64_t n = tokens.count();
  const std::vector<float> coef(static_cast<size_t>(n), grad_scale);
  std::vector<float> whole(static_cast<size_t>(n));
  const float* l = lse.data<float>();
  for (int64_t i = 0; i < n; ++i) whole[static_cast<size_t>(i)] = l[tokens.position[static_cast<size_t>(i)]];
  if (dhidden.defined()) sweep(tokens, head, options, coef.data(), dhidden, whole.data());
  if (dhead.defined()) head_gradient(tokens, head, options, coef.data(), whole, dhead);
}

}  // namespace swift::ops::cpu
