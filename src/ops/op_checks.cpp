// ops/op_checks.cpp — argument validation of every op (see op_checks.h), and ops::check_cu_seqlens.
//
// Invariants:
//  - Messages start with the op name, then show the offending tensors as "DTYPE[shape] device" and the rule
//    broken, so a user can tell which argument is wrong without a debugger.
//  - Data-dependent checks (token ids, positions, cu_seqlens) read the data only where it can be read
//    cheaply: on the CPU; cu_seqlens, being tiny, is copied to the host when it lives on a device.
#include "ops/op_checks.h"

#include <cmath>
#include <string>

namespace swift::ops::detail {

std::string desc(const Tensor& t) { return t.defined() ? t.str() : "<undefined>"; }

void require_defined(const char* op, const char* name, const Tensor& t) {
  if (!t.defined()) fail("{}: {} is undefined", op, name);
}

void require_dtype(const char* op, const char* name, const Tensor& t, DType dtype) {
  if (t.dtype() != dtype) fail("{}: {} {} must be {}", op, name, desc(t), dtype_name(dtype));
}

void require_float(const char* op, const char* name, const Tensor& t) {
  if (!is_float_dtype(t.dtype())) fail("{}: {} {} must be F32, BF16 or F16", op, name, desc(t));
}

void require_activation(const char* op, const char* name, const Tensor& t, const char* like_name, const Tensor* like) {
  const bool allowed =
      t.dtype() == DType::F32 || ((t.dtype() == DType::BF16 || t.dtype() == DType::F16) && t.device().is_cuda());
  if (!allowed) {
    fail("{}: {} {} must be F32 (BF16 and F16 activations are accepted on CUDA devices only)", op, name, desc(t));
  }
  if (like != nullptr && like->defined() && like->dtype() != t.dtype()) {
    fail("{}: {} {} and {} {} must have the same activation dtype", op, name, desc(t), like_name, desc(*like));
  }
}

void require_rank(const char* op, const char* name, const Tensor& t, int64_t rank, const char* letters) {
  if (t.dim() != rank) fail("{}: {} {} must have {} dimensions {}", op, name, desc(t), rank, letters);
}

void require_same_shape(const char* op, const char* name_a, const Tensor& a, const char* name_b, const Tensor& b) {
  if (a.shape() != b.shape()) fail("{}: {} {} and {} {} must have the same shape", op, name_a, desc(a), name_b, desc(b));
}

// True when the byte ranges of two tensors in the same storage intersect.
bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.storage() != b.storage()) return false;
  size_t a0 = a.byte_offset(), a1 = a0 + a.nbytes();
  size_t b0 = b.byte_offset(), b1 = b0 + b.nbytes();
  return a0 < b1 && b0 < a1 && a1 > a0 && b1 > b0;
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage() == b.storage() && a.byte_offset() == b.byte_offset() &&
         a.dtype() == b.dtype() && a.shape() == b.shape();
}

bool is_float_dtype(DType dtype) { return dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16; }

Device common_device(const char* op, std::initializer_list<const Tensor*> tensors) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (first == nullptr) {
      first = t;
    } else if (!(t->device() == first->device())) {
      fail("{}: tensors live on different devices ({} and {}); move them to one device first", op, desc(*first),
           desc(*t));
    }
  }
  return first ? first->device() : Device::cpu();
}

void no_cuda_kernel(const char* op) { fail("op {}: no CUDA kernel yet (CUDA backend issue)", op); }

void require_cpu(const char* op, Device device) {
  if (!device.is_cpu()) fail("ref::{}: the reference runs on the CPU only, got tensors on {}", op, device.str());
}

Device check_cast(const Tensor& src, const Tensor& dst) {
  require_defined("cast", "src", src);
  require_defined("cast", "dst", dst);
  require_float("cast", "src", src);
  require_float("cast", "dst", dst);
  if (src.numel() != dst.numel()) fail("cast: src {} and dst {} differ in element count", desc(src), desc(dst));
  const bool same = src.storage() == dst.storage() && src.byte_offset() == dst.byte_offset() && src.dtype() == dst.dtype();
  if (overlaps(src, dst) && !same) fail("cast: dst {} overlaps src {}; cast into a separate tensor", desc(dst), desc(src));
  return common_device("cast", {&src, &dst});
}

static Device check_elementwise3(const char* op, const char* na, const Tensor& a, const char* nb, const Tensor& b,
                                 const Tensor& out) {
  require_defined(op, na, a);
  require_defined(op, nb, b);
  require_defined(op, "out", out);
  require_activation(op, na, a);
  require_activation(op, nb, b, na, &a);
  require_activation(op, "out", out, na, &a);
  require_same_shape(op, na, a, nb, b);
  require_same_shape(op, na, a, "out", out);
  return common_device(op, {&a, &b, &out});
}

Device check_add(const Tensor& a, const Tensor& b, const Tensor& out) { return check_elementwise3("add", "a", a, "b", b, out); }

Device check_swiglu(const Tensor& gate, const Tensor& up, const Tensor& out) {
  return check_elementwise3("swiglu", "gate", gate, "up", up, out);
}

Device check_swiglu_lora(const char* op, const Tensor& gate, const Tensor& up, const Tensor& xa_gate,
                         const Tensor& b_gate, const Tensor& xa_up, const Tensor& b_up, const Tensor& out) {
  const Device device = check_elementwise3(op, "gate", gate, "up", up, out);
  require_rank(op, "gate", gate, 2, "(N, F)");
  const int64_t n = gate.size(0), f = gate.size(1);
  const std::pair<const char*, const Tensor*> factors[] = {
      {"xa_gate", &xa_gate}, {"b_gate", &b_gate}, {"xa_up", &xa_up}, {"b_up", &b_up}};
  for (const auto& [name, t] : factors) {
    require_defined(op, name, *t);
    require_rank(op, name, *t, 2, "(N, r) / (F, r)");
    if (t->dtype() != DType::F32) fail("{}: {} {} must be F32", op, name, desc(*t));
  }
  const int64_t r = xa_gate.size(1);
  if (xa_gate.size(0) != n || xa_up.size(0) != n || xa_up.size(1) != r || b_gate.size(0) != f || b_up.size(0) != f ||
      b_gate.size(1) != r || b_up.size(1) != r) {
    fail("{}: xa_gate {} / xa_up {} must be (N, r) and b_gate {} / b_up {} (F, r) for gate {}", op, desc(xa_gate),
         desc(xa_up), desc(b_gate), desc(b_up), desc(gate));
  }
  common_device(op, {&gate, &xa_gate, &b_gate, &xa_up, &b_up});
  return device;
}

Device check_add_lora_residual(const char* op, const Tensor& y, const Tensor& residual, const Tensor& xa,
                               const Tensor& b) {
  const Device device = check_elementwise3(op, "y", y, "residual", residual, y);
  require_rank(op, "y", y, 2, "(N, M)");
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"xa", &xa}, {"b", &b}}) {
    require_defined(op, name, *t);
    require_rank(op, name, *t, 2, "(N, r) / (M, r)");
    if (t->dtype() != DType::F32) fail("{}: {} {} must be F32", op, name, desc(*t));
  }
  if (xa.size(0) != y.size(0) || b.size(0) != y.size(1) || b.size(1) != xa.size(1)) {
    fail("{}: xa {} must be (N, r) and b {} (M, r) for y {}", op, desc(xa), desc(b), desc(y));
  }
  common_device(op, {&y, &residual, &xa, &b});
  return device;
}

Device check_copy_columns(const Tensor& x, int64_t x_col, const Tensor& y, int64_t y_col, int64_t cols,
                          const char* op) {
  require_defined(op, "x", x);
  require_defined(op, "y", y);
  require_rank(op, "x", x, 2, "(N, X)");
  require_rank(op, "y", y, 2, "(N, Y)");
  if (x.size(0) != y.size(0)) fail("{}: x {} and y {} must have the same rows", op, desc(x), desc(y));
  if (x.dtype() != y.dtype()) fail("{}: x {} and y {} must have the same dtype", op, desc(x), desc(y));
  if (cols < 0 || x_col < 0 || y_col < 0 || x_col + cols > x.size(1) || y_col + cols > y.size(1)) {
    fail("{}: columns [{}, {}) of x {} into [{}, {}) of y {} do not fit", op, x_col, x_col + cols, desc(x), y_col,
         y_col + cols, desc(y));
  }
  if (overlaps(x, y)) fail("{}: y {} overlaps x {}; use a separate buffer", op, desc(y), desc(x));
  return common_device(op, {&x, &y});
}

Device check_swap_outer_axes(const Tensor& x, const Tensor& y) {
  const char* op = "swap_outer_axes";
  require_defined(op, "x", x);
  require_defined(op, "y", y);
  require_rank(op, "x", x, 3, "(A, B, E)");
  require_rank(op, "y", y, 3, "(B, A, E)");
  if (y.size(0) != x.size(1) || y.size(1) != x.size(0) || y.size(2) != x.size(2)) {
    fail("{}: y {} must be (B, A, E) for x {} = (A, B, E)", op, desc(y), desc(x));
  }
  if (x.dtype() != y.dtype()) fail("{}: x {} and y {} must have the same dtype", op, desc(x), desc(y));
  if (overlaps(x, y)) fail("{}: y {} overlaps x {}; use a separate buffer", op, desc(y), desc(x));
  return common_device(op, {&x, &y});
}

Device check_embedding(const Tensor& table, const Tensor& ids, const Tensor& out, int64_t vocab_offset) {
  const char* op = vocab_offset >= 0 ? "embedding_shard" : "embedding";
  require_defined(op, "table", table);
  require_defined(op, "ids", ids);
  require_defined(op, "out", out);
  require_rank(op, "table", table, 2, "(V, C)");
  require_float(op, "table", table);
  require_rank(op, "ids", ids, 1, "(T)");
  require_dtype(op, "ids", ids, DType::I32);
  require_rank(op, "out", out, 2, "(T, C)");
  require_activation(op, "out", out);
  if (out.size(0) != ids.size(0) || out.size(1) != table.size(1)) {
    fail("embedding: out {} must be (T, C) = ({}, {}) for ids {} and table {}", desc(out), ids.size(0), table.size(1),
         desc(ids), desc(table));
  }
  // The table may be host memory that out's CUDA device reads directly (ops::host_mapped_copy: an offloaded table).
  const bool mapped = table.defined() && table.storage() != nullptr && table.device().is_cpu() && out.device().is_cuda() &&
                      table.storage()->mapped_for() == out.device();
  Device device = mapped ? common_device(op, {&ids, &out}) : common_device(op, {&table, &ids, &out});
  if (device.is_cpu()) {
    const int32_t* id = ids.data<int32_t>();
    const int64_t vocab = table.size(0);
    for (int64_t t = 0; t < ids.size(0); ++t) {
      if (vocab_offset >= 0 && id[t] < 0) fail("{}: token id {} at position {} is negative", op, id[t], t);
      if (vocab_offset < 0 && (id[t] < 0 || id[t] >= vocab)) {
        fail("embedding: token id {} at position {} is outside the vocabulary [0, {}) of table {}", id[t], t, vocab,
             desc(table));
      }
    }
  }
  return device;
}

Device check_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y) {
  const char* op = "linear";
  require_defined(op, "x", x);
  require_defined(op, "w", w);
  require_defined(op, "y", y);
  require_rank(op, "x", x, 2, "(N, K)");
  require_activation(op, "x", x);
  require_rank(op, "w", w, 2, "(M, K)");
  require_float(op, "w", w);
  require_rank(op, "y", y, 2, "(N, M)");
  require_activation(op, "y", y, "x", &x);
  if (x.size(1) != w.size(1)) {
    fail("linear: x {} and w {} disagree on K ({} vs {})", desc(x), desc(w), x.size(1), w.size(1));
  }
  if (y.size(0) != x.size(0) || y.size(1) != w.size(0)) {
    fail("linear: y {} must be (N, M) = ({}, {}) for x {} and w {}", desc(y), x.size(0), w.size(0), desc(x), desc(w));
  }
  if (bias.defined()) {
    require_rank(op, "bias", bias, 1, "(M)");
    require_float(op, "bias", bias);
    if (bias.size(0) != w.size(0)) fail("linear: bias {} must have M = {} elements (w {})", desc(bias), w.size(0), desc(w));
  }
  if (overlaps(y, x) || overlaps(y, w) || overlaps(y, bias)) fail("linear: y {} overlaps an input", desc(y));
  return common_device(op, {&x, &w, &bias, &y});
}

Device check_linear_residual(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& residual,
                             const Tensor& y) {
  const char* op = "linear_residual";
  check_linear(x, w, bias, y);
  require_defined(op, "residual", residual);
  require_same_shape(op, "residual", residual, "y", y);
  require_activation(op, "residual", residual, "y", &y);
  const bool same = residual.storage() == y.storage() && residual.byte_offset() == y.byte_offset();
  if (!same && overlaps(residual, y)) fail("linear_residual: residual {} partly overlaps y {}", desc(residual), desc(y));
  if (overlaps(residual, x) && !same) fail("linear_residual: residual {} overlaps x {}", desc(residual), desc(x));
  return common_device(op, {&x, &w, &bias, &residual, &y});
}

Device check_gemm(bool trans_a, bool trans_b, const Tensor& a, const Tensor& b, const Tensor& c) {
  const char* op = "gemm";
  require_defined(op, "a", a);
  require_defined(op, "b", b);
  require_defined(op, "c", c);
  require_rank(op, "a", a, 2, trans_a ? "(K, N)" : "(N, K)");
  require_rank(op, "b", b, 2, trans_b ? "(M, K)" : "(K, M)");
  require_rank(op, "c", c, 2, "(N, M)");
  require_activation(op, "a", a);
  require_activation(op, "b", b, "a", &a);
  if (c.dtype() != DType::F32) require_activation(op, "c", c, "a", &a);  // c: F32 (e.g. a weight gradient) or a's
  int64_t n = trans_a ? a.size(1) : a.size(0);
  int64_t ka = trans_a ? a.size(0) : a.size(1);
  int64_t kb = trans_b ? b.size(1) : b.size(0);
  int64_t m = trans_b ? b.size(0) : b.size(1);
  if (ka != kb) {
    fail("gemm: a {} (trans_a={}) and b {} (trans_b={}) disagree on K ({} vs {})", desc(a), trans_a, desc(b), trans_b,
         ka, kb);
  }
  if (c.size(0) != n || c.size(1) != m) fail("gemm: c {} must be (N, M) = ({}, {})", desc(c), n, m);
  if (overlaps(c, a) || overlaps(c, b)) fail("gemm: c {} overlaps an input", desc(c));
  return common_device(op, {&a, &b, &c});
}

Device check_rmsnorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& y, const Tensor& rstd) {
  const char* op = "rmsnorm";
  require_defined(op, "x", x);
  require_defined(op, "weight", weight);
  require_defined(op, "y", y);
  require_rank(op, "x", x, 2, "(N, C)");
  require_activation(op, "x", x);
  require_rank(op, "weight", weight, 1, "(C)");
  require_float(op, "weight", weight);
  require_activation(op, "y", y, "x", &x);
  require_same_shape(op, "x", x, "y", y);
  if (weight.size(0) != x.size(1)) fail("rmsnorm: weight {} must have C = {} elements (x {})", desc(weight), x.size(1), desc(x));
  if (!(eps >= 0.0f) || !std::isfinite(eps)) fail("rmsnorm: eps = {} must be finite and >= 0", eps);
  if (rstd.defined()) {
    require_rank(op, "rstd", rstd, 1, "(N)");
    require_dtype(op, "rstd", rstd, DType::F32);
    if (rstd.size(0) != x.size(0)) fail("rmsnorm: rstd {} must have N = {} elements (x {})", desc(rstd), x.size(0), desc(x));
  }
  return common_device(op, {&x, &weight, &y, &rstd});
}

namespace {
// CPU positions are checked here (CUDA kernels record a negative one and it surfaces at the next synchronising op).
void require_nonnegative_positions(const char* op, const Tensor& positions) {
  const int32_t* pos = positions.data<int32_t>();
  for (int64_t t = 0; t < positions.size(0); ++t) {
    if (pos[t] < 0) fail("{}: position {} at token {} is negative", op, pos[t], t);
  }
}
}  // namespace

Device check_rope_columns(const Tensor& x, int64_t x_col, const Tensor& y, int64_t y_col, int64_t heads,
                          const Tensor& positions, const RopeFrequencies& freqs, const char* op) {
  require_defined(op, "x", x);
  require_defined(op, "y", y);
  require_defined(op, "positions", positions);
  require_rank(op, "x", x, 2, "(T, X)");
  require_rank(op, "y", y, 2, "(T, Y)");
  require_activation(op, "x", x);
  require_activation(op, "y", y, "x", &x);
  require_rank(op, "positions", positions, 1, "(T)");
  require_dtype(op, "positions", positions, DType::I32);
  const int64_t cols = heads * 2 * static_cast<int64_t>(freqs.inv_freq.size());
  if (x.size(0) != y.size(0) || positions.size(0) != x.size(0)) {
    fail("{}: x {}, y {} and positions {} must have the same T", op, desc(x), desc(y), desc(positions));
  }
  if (heads < 0 || x_col < 0 || y_col < 0 || x_col + cols > x.size(1) || y_col + cols > y.size(1)) {
    fail("{}: {} heads of D = {} at column {} of x {} and {} of y {} do not fit", op, heads,
         2 * freqs.inv_freq.size(), x_col, desc(x), y_col, desc(y));
  }
  if (overlaps(x, y)) fail("{}: y {} overlaps x {}; use a separate buffer", op, desc(y), desc(x));
  Device device = common_device(op, {&x, &y, &positions});
  if (device.is_cpu()) require_nonnegative_positions(op, positions);
  return device;
}

Device check_rope_qkv(const Tensor& packed, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& positions,
                      const RopeFrequencies& freqs) {
  const char* op = "rope_qkv";
  for (const auto& [name, t] : {std::pair{"packed", &packed}, {"q", &q}, {"k", &k}, {"v", &v}}) {
    require_defined(op, name, *t);
    require_rank(op, name, *t, 2, "(T, columns)");
  }
  const int64_t d = 2 * static_cast<int64_t>(freqs.inv_freq.size());
  const int64_t nq = q.size(1), nkv = k.size(1);
  if (d == 0 || nq % d != 0 || nkv % d != 0 || v.size(1) != nkv || packed.size(1) != nq + 2 * nkv) {
    fail("{}: packed {} must be q {}, k {} and v {} side by side (k and v alike), each a whole number of heads of "
         "D = {}", op, desc(packed), desc(q), desc(k), desc(v), d);
  }
  // Rows, dtypes, positions, overlaps with packed and devices, per block (x: packed, y: q / k / v).
  check_rope_columns(packed, 0, q, 0, nq / d, positions, freqs, op);
  check_rope_columns(packed, nq, k, 0, nkv / d, positions, freqs, op);
  check_copy_columns(packed, nq + nkv, v, 0, nkv, op);
  if (overlaps(q, k) || overlaps(q, v) || overlaps(k, v)) {
    fail("{}: q {}, k {} and v {} must be separate buffers", op, desc(q), desc(k), desc(v));
  }
  return common_device(op, {&packed, &q, &k, &v, &positions});
}

Device check_rope(const Tensor& x, const Tensor& positions, const RopeFrequencies& freqs) {
  const char* op = "rope";
  require_defined(op, "x", x);
  require_defined(op, "positions", positions);
  require_rank(op, "x", x, 3, "(T, H, D)");
  require_activation(op, "x", x);
  require_rank(op, "positions", positions, 1, "(T)");
  require_dtype(op, "positions", positions, DType::I32);
  const int64_t d = x.size(2);
  if (d % 2 != 0) fail("rope: x {} must have an even head dim D", desc(x));
  if (static_cast<int64_t>(freqs.inv_freq.size()) != d / 2) {
    fail("rope: x {} needs D/2 = {} inverse frequencies, got {}", desc(x), d / 2, freqs.inv_freq.size());
  }
  if (positions.size(0) != x.size(0)) fail("rope: positions {} must have T = {} entries (x {})", desc(positions), x.size(0), desc(x));
  Device device = common_device(op, {&x, &positions});
  if (device.is_cpu()) require_nonnegative_positions(op, positions);
  return device;
}

Device check_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_seqlens, float scale,
                       int64_t window, const Tensor& out, const Tensor& lse) {
  const char* op = "attention";
  require_defined(op, "q", q);
  require_defined(op, "k", k);
  require_defined(op, "v", v);
  require_defined(op, "out", out);
  require_defined(op, "cu_seqlens", cu_seqlens);
  require_rank(op, "q", q, 3, "(T, Hq, D)");
  require_rank(op, "k", k, 3, "(T, Hkv, D)");
  require_activation(op, "q", q);
  require_activation(op, "k", k, "q", &q);
  require_activation(op, "v", v, "q", &q);
  require_activation(op, "out", out, "q", &q);
  require_same_shape(op, "k", k, "v", v);
  require_same_shape(op, "q", q, "out", out);
  const int64_t hq = q.size(1), hkv = k.size(1);
  if (k.size(0) != q.size(0) || k.size(2) != q.size(2)) {
    fail("attention: q {} and k {} must agree on T and D", desc(q), desc(k));
  }
  if (hkv == 0 || hq % hkv != 0) fail("attention: query heads Hq = {} must be a multiple of kv heads Hkv = {}", hq, hkv);
  if (window < 0) fail("attention: window = {} must be >= 0 (0 = unlimited)", window);
  if (!std::isfinite(scale)) fail("attention: scale = {} must be finite", scale);
  if (lse.defined()) {
    require_rank(op, "lse", lse, 2, "(Hq, T)");
    require_dtype(op, "lse", lse, DType::F32);
    if (lse.size(0) != hq || lse.size(1) != q.size(0)) fail("attention: lse {} must be (Hq, T) = ({}, {})", desc(lse), hq, q.size(0));
  }
  for (const Tensor* input : {&q, &k, &v}) {
    if (overlaps(out, *input)) fail("attention: out {} overlaps an input", desc(out));
    if (overlaps(lse, *input)) fail("attention: lse {} overlaps an input", desc(lse));
  }
  if (overlaps(lse, out)) fail("attention: lse {} overlaps out", desc(lse));
  Device device = common_device(op, {&q, &k, &v, &out, &lse, &cu_seqlens});
  check_cu_seqlens(cu_seqlens, q.size(0), op);
  return device;
}

}  // namespace swift::ops::detail

namespace swift::ops {

void check_cu_seqlens(const Tensor& cu_seqlens, int64_t tokens, const char* op) {
  if (!cu_seqlens.defined()) fail("{}: cu_seqlens is undefined", op);
  const std::string what = cu_seqlens.str();
  if (cu_seqlens.dtype() != DType::I32) fail("{}: cu_seqlens {} must be I32", op, what);
  if (cu_seqlens.dim() != 1) fail("{}: cu_seqlens {} must have one dimension (B+1)", op, what);
  if (cu_seqlens.size(0) < 2) fail("{}: cu_seqlens {} needs at least 2 entries (B+1 with B >= 1)", op, what);
  // The caller's HostMirror (ops.h) when it registered one: reading the device copy back would drain the stream at
  // every attention call (the 7B step's GPU idled ~20 us before each, docs/PERFORMANCE.md run 22).
  const Tensor host = host_values(cu_seqlens);
  const int32_t* cu = host.data<int32_t>();
  const int64_t n = host.size(0);
  if (cu[0] != 0) fail("{}: cu_seqlens {} must start at 0, starts at {}", op, what, cu[0]);
  for (int64_t i = 1; i < n; ++i) {
    if (cu[i] < cu[i - 1]) fail("{}: cu_seqlens {} decreases at index {} ({} after {})", op, what, i, cu[i], cu[i - 1]);
  }
  if (cu[n - 1] != tokens) fail("{}: cu_seqlens {} ends at {} but the batch has T = {} tokens", op, what, cu[n - 1], tokens);
}

}  // namespace swift::ops
