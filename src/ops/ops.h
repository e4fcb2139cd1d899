// ops/ops.h — the operation interface every layer above uses. One function per op; each dispatches on the
// device of its tensors (CPU now; CUDA adds kernels without changing callers). The plain CPU reference of
// every op lives in namespace swift::ops::ref (ops/reference.h) and is the oracle in tests.
//
// Shape letters (used in the comments on every tensor argument):
//   T  tokens of a packed batch (all sequences concatenated)     B  sequences in the batch
//   C  hidden size      F  intermediate (MLP) size     V  vocabulary size
//   Hq query heads      Hkv key/value heads            D  head dim
//   N  rows, K inner dimension, M output columns (generic matmul)
//
// Invariants:
//  - Activations are F32 on the CPU. Weights may be F32, BF16 or F16 (converted on the fly, accumulation in
//    fp32). Outputs are written with `=`, never accumulated, unless the argument says `accumulate`.
//  - All tensors are contiguous row-major. Ops check shapes and dtypes and throw swift::Error naming the op.
//  - Variable-length batches are described by `cu_seqlens` (I32, B+1, starting at 0, non-decreasing, ending
//    at T): no token attends across a sequence boundary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace swift::ops {

// ---- element-wise and casts ---------------------------------------------------------------------
// dst = src converted to dst's dtype (F32/BF16/F16; same numel).
void cast(const Tensor& src, Tensor& dst);
// out = a + b (same shape F32); out may alias a or b.
void add(const Tensor& a, const Tensor& b, Tensor& out);
// out = silu(gate) * up                       gate, up, out: (N, F) F32; out may alias gate or up.
void swiglu(const Tensor& gate, const Tensor& up, Tensor& out);

// ---- embedding ----------------------------------------------------------------------------------
// out[t] = table[ids[t]]                      table: (V, C) F32/BF16/F16; ids: (T) I32; out: (T, C) F32.
// Throws naming the offending id when ids[t] is outside [0, V).
void embedding(const Tensor& table, const Tensor& ids, Tensor& out);

// ---- matmul ---------------------------------------------------------------------------------------
// y = x @ w^T (+ bias)                       x: (N, K) F32; w: (M, K) F32/BF16/F16; bias: (M) or undefined;
//                                            y: (N, M) F32. With accumulate, y += x @ w^T (+ bias) instead of =.
void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, bool accumulate = false);
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

// ---- backend information ------------------------------------------------------------------------------
// One line describing the CPU backend (OpenBLAS version, the kernel family it picked, OpenMP threads). When
// OpenBLAS picked kernels older than the CPU supports (it misdetects some virtualised CPUs as "Prescott":
// sgemm 4-5x slower), the line ends with a hint: set OPENBLAS_CORETYPE before the process starts.
std::string cpu_backend_info();

}  // namespace swift::ops
