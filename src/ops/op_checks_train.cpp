// ops/op_checks_train.cpp — argument validation of the training ops (backward ops, dropout, LoRA linear,
// chunked cross-entropy / log-probabilities, AdamW, gradient norm); see op_checks.h.
//
// Invariants:
//  - Same rules as op_checks.cpp: messages start with the op name and show the offending tensors; data-
//    dependent rules (token ids, labels, positions) are checked when the data is on the CPU.
//  - Outputs never partially overlap inputs or each other. Where an op allows in-place use (swiglu_backward,
//    rmsnorm_backward, dropout) the output must then be exactly the same view as the input.
#include <cmath>
#include <string>

#include "ops/op_checks.h"

#include <fmt/format.h>

namespace swift::ops::detail {

namespace {

// Throws when `out` overlaps any of `others` (undefined tensors are ignored).
void require_disjoint(const char* op, const char* name, const Tensor& out,
                      std::initializer_list<std::pair<const char*, const Tensor*>> others) {
  if (!out.defined()) return;
  for (const auto& [other_name, other] : others) {
    if (overlaps(out, *other)) fail("{}: {} {} overlaps {} {}", op, name, desc(out), other_name, desc(*other));
  }
}

void require_shape(const char* op, const char* name, const Tensor& t, const Shape& shape, const char* letters) {
  if (t.shape() != shape) fail("{}: {} {} must be {} = {}", op, name, desc(t), letters, shape_str(shape));
}

// Re-throws a forward op's check failure under the name of the op being checked.
template <typename Fn>
Device checked_as(const char* op, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    fail("{}: {}", op, e.what());
  }
}

// p in [0, 1); the map places a block `cols` wide inside the full tensor (offsets >= 0, the block within full_cols).
void check_dropout_config(const char* op, const Dropout& dropout, int64_t cols) {
  if (!(dropout.p >= 0.0f && dropout.p < 1.0f)) fail("{}: dropout p = {} must be in [0, 1)", op, dropout.p);
  const DropoutMap& m = dropout.map;
  if (m.row_offset < 0 || m.col_offset < 0 || m.full_cols < 0 || (m.full_cols == 0 && m.col_offset != 0) ||
      (m.full_cols > 0 && m.col_offset + cols > m.full_cols)) {
    fail("{}: dropout map (row_offset {}, full_cols {}, col_offset {}) does not place a block {} columns wide inside "
         "the full tensor", op, m.row_offset, m.full_cols, m.col_offset, cols);
  }
}

}  // namespace

Device check_embedding_backward(const Tensor& dout, const Tensor& ids, const Tensor& dtable, int64_t padding_id,
                                int64_t vocab_offset) {
  const char* op = vocab_offset >= 0 ? "embedding_shard_backward" : "embedding_backward";
  require_defined(op, "dout", dout);
  require_defined(op, "ids", ids);
  require_defined(op, "dtable", dtable);
  require_rank(op, "dout", dout, 2, "(T, C)");
  require_activation(op, "dout", dout);
  require_rank(op, "ids", ids, 1, "(T)");
  require_dtype(op, "ids", ids, DType::I32);
  require_rank(op, "dtable", dtable, 2, "(V, C)");
  require_dtype(op, "dtable", dtable, DType::F32);
  if (dout.size(0) != ids.size(0) || dout.size(1) != dtable.size(1)) {
    fail("{}: dout {} must be (T, C) = ({}, {}) for ids {} and dtable {}", op, desc(dout), ids.size(0),
         dtable.size(1), desc(ids), desc(dtable));
  }
  require_disjoint(op, "dtable", dtable, {{"dout", &dout}, {"ids", &ids}});
  Device device = common_device(op, {&dout, &ids, &dtable});
  if (device.is_cpu()) {
    const int32_t* id = ids.data<int32_t>();
    const int64_t vocab = dtable.size(0);
    for (int64_t t = 0; t < ids.size(0); ++t) {
      if (id[t] == padding_id) continue;
      if (id[t] < 0 || (vocab_offset < 0 && id[t] >= vocab)) {
        fail("{}: token id {} at position {} is outside the vocabulary [0, {}) of dtable {} (padding id {})", op,
             id[t], t, vocab, desc(dtable), padding_id);
      }
    }
  }
  return device;
}

Device check_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& dx, const Tensor& dw,
                             const Tensor& dbias, bool accumulate_dx) {
  (void)accumulate_dx;
  const char* op = "linear_backward";
  require_defined(op, "dy", dy);
  require_defined(op, "w", w);
  require_rank(op, "dy", dy, 2, "(N, M)");
  require_activation(op, "dy", dy);
  require_rank(op, "w", w, 2, "(M, K)");
  require_float(op, "w", w);
  const int64_t n = dy.size(0), m = dy.size(1), k = w.size(1);
  if (w.size(0) != m) fail("{}: dy {} and w {} disagree on M ({} vs {})", op, desc(dy), desc(w), m, w.size(0));
  if (dw.defined() && !x.defined()) fail("{}: dw {} needs x (the forward's input)", op, desc(dw));
  if (x.defined()) {
    require_activation(op, "x", x, "dy", &dy);
    require_shape(op, "x", x, {n, k}, "(N, K)");
  }
  if (dx.defined()) {
    require_activation(op, "dx", dx, "dy", &dy);
    require_shape(op, "dx", dx, {n, k}, "(N, K)");
  }
  if (dw.defined()) {
    require_dtype(op, "dw", dw, DType::F32);
    require_shape(op, "dw", dw, {m, k}, "(M, K)");
  }
  if (dbias.defined()) {
    require_dtype(op, "dbias", dbias, DType::F32);
    require_shape(op, "dbias", dbias, {m}, "(M)");
  }
  require_disjoint(op, "dx", dx, {{"dy", &dy}, {"x", &x}, {"w", &w}, {"dw", &dw}, {"dbias", &dbias}});
  require_disjoint(op, "dw", dw, {{"dy", &dy}, {"x", &x}, {"w", &w}, {"dbias", &dbias}});
  require_disjoint(op, "dbias", dbias, {{"dy", &dy}, {"x", &x}, {"w", &w}});
  return common_device(op, {&dy, &x, &w, &dx, &dw, &dbias});
}

Device check_rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                              const Tensor& dx, const Tensor& dweight, bool accumulate_dx) {
  const char* op = "rmsnorm_backward";
  for (auto [name, t] : {std::pair{"dy", &dy}, {"x", &x}, {"weight", &weight}, {"rstd", &rstd}}) {
    require_defined(op, name, *t);
  }
  require_rank(op, "x", x, 2, "(N, C)");
  require_activation(op, "x", x);
  require_activation(op, "dy", dy, "x", &x);
  require_same_shape(op, "dy", dy, "x", x);
  require_float(op, "weight", weight);
  require_shape(op, "weight", weight, {x.size(1)}, "(C)");
  require_dtype(op, "rstd", rstd, DType::F32);
  require_shape(op, "rstd", rstd, {x.size(0)}, "(N)");
  if (dx.defined()) {
    require_activation(op, "dx", dx, "x", &x);
    require_same_shape(op, "dx", dx, "x", x);
    if (!(same_view(dx, dy) && !accumulate_dx)) {
      require_disjoint(op, "dx", dx, {{"dy", &dy}});
    }
    require_disjoint(op, "dx", dx, {{"x", &x}, {"weight", &weight}, {"rstd", &rstd}, {"dweight", &dweight}});
  }
  if (dweight.defined()) {
    require_dtype(op, "dweight", dweight, DType::F32);
    require_shape(op, "dweight", dweight, {x.size(1)}, "(C)");
    require_disjoint(op, "dweight", dweight, {{"dy", &dy}, {"x", &x}, {"weight", &weight}, {"rstd", &rstd}});
  }
  return common_device(op, {&dy, &x, &weight, &rstd, &dx, &dweight});
}

Device check_rope_backward(const Tensor& dx, const Tensor& positions, const RopeFrequencies& freqs) {
  return checked_as("rope_backward", [&] { return check_rope(dx, positions, freqs); });
}

Device check_swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                             const Tensor& dup) {
  const char* op = "swiglu_backward";
  for (auto [name, t] : {std::pair{"dout", &dout}, {"gate", &gate}, {"up", &up}, {"dgate", &dgate}, {"dup", &dup}}) {
    require_defined(op, name, *t);
    require_activation(op, name, *t, "gate", &gate);
    require_same_shape(op, "gate", gate, name, *t);
  }
  if (overlaps(dgate, dup)) fail("{}: dgate {} and dup {} overlap; they must be different tensors", op, desc(dgate), desc(dup));
  for (auto [name, out] : {std::pair{"dgate", &dgate}, {"dup", &dup}}) {
    for (auto [in_name, in] : {std::pair{"dout", &dout}, {"gate", &gate}, {"up", &up}}) {
      if (overlaps(*out, *in) && !same_view(*out, *in)) {
        fail("{}: {} {} partially overlaps {} {} (in place must be the same tensor)", op, name, desc(*out), in_name,
             desc(*in));
      }
    }
  }
  return common_device(op, {&dout, &gate, &up, &dgate, &dup});
}

Device check_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens, float scale,
                                int64_t window, const Tensor& dq, const Tensor& dk, const Tensor& dv) {
  const char* op = "attention_backward";
  require_defined(op, "out", out);
  require_defined(op, "lse (saved by attention)", lse);
  Device device = checked_as(op, [&] { return check_attention(q, k, v, cu_seqlens, scale, window, out, lse); });
  for (auto [name, t, like] : {std::tuple{"dout", &dout, &q}, {"dq", &dq, &q}, {"dk", &dk, &k}, {"dv", &dv, &k}}) {
    require_defined(op, name, *t);
    require_activation(op, name, *t, "q", &q);
    require_same_shape(op, name, *t, like == &q ? "q" : "k", *like);
  }
  for (auto [name, t] : {std::pair{"dq", &dq}, {"dk", &dk}, {"dv", &dv}}) {
    require_disjoint(op, name, *t,
                     {{"dout", &dout}, {"q", &q}, {"k", &k}, {"v", &v}, {"out", &out}, {"lse", &lse}, {"cu_seqlens", &cu_seqlens}});
  }
  require_disjoint(op, "dq", dq, {{"dk", &dk}, {"dv", &dv}});
  require_disjoint(op, "dk", dk, {{"dv", &dv}});
  common_device(op, {&dout, &dq, &dk, &dv, &q});
  return device;
}

Device check_dropout(const Tensor& x, const Dropout& dropout, const Tensor& out) {
  const char* op = "dropout";
  require_defined(op, "x", x);
  require_defined(op, "out", out);
  require_activation(op, "x", x);
  require_activation(op, "out", out, "x", &x);
  require_same_shape(op, "x", x, "out", out);
  check_dropout_config(op, dropout, x.dim() > 0 ? x.size(x.dim() - 1) : 1);
  if (overlaps(out, x) && !same_view(out, x)) fail("{}: out {} partially overlaps x {}", op, desc(out), desc(x));
  return common_device(op, {&x, &out});
}

Device check_swiglu_drawing_mask(const Tensor& gate, const Tensor& up, const Tensor& out, const Dropout& mask) {
  const char* op = "swiglu_drawing_mask";
  const Device device = checked_as(op, [&] { return check_swiglu(gate, up, out); });
  require_rank(op, "gate", gate, 2, "(N, F)");
  const int64_t n = gate.size(0), f = gate.size(1);
  check_dropout_config(op, mask, f);
  if (!(mask.p > 0.0f)) fail("{}: dropout p = {} must be > 0 (p = 0 draws no mask: call swiglu)", op, mask.p);
  require_defined(op, "mask.keep_bits", mask.keep_bits);
  require_dtype(op, "mask.keep_bits", mask.keep_bits, DType::U8);
  require_shape(op, "mask.keep_bits", mask.keep_bits, {n, (f + 7) / 8}, "(N, ceil(F / 8))");
  require_disjoint(op, "mask.keep_bits", mask.keep_bits, {{"gate", &gate}, {"up", &up}, {"out", &out}});
  common_device(op, {&gate, &mask.keep_bits});
  return device;
}

namespace {
// x (N, K) an activation, a (r, K) and xa (N, r) F32, and the dropout on x: its config, and a defined keep-bits cache
// (N, ceil(K / 8)) U8 apart from x and xa. Shared by lora_linear's, its backward's and lora_xa's checks.
void check_lora_xa_operands(const char* op, const Tensor& x, const Tensor& a, const Tensor& xa,
                            const Dropout& dropout) {
  for (auto [name, t] : {std::pair{"x", &x}, {"a", &a}, {"xa", &xa}}) require_defined(op, name, *t);
  require_rank(op, "x", x, 2, "(N, K)");
  require_activation(op, "x", x);
  require_rank(op, "a", a, 2, "(r, K)");
  require_dtype(op, "a", a, DType::F32);
  const int64_t n = x.size(0), k = x.size(1), r = a.size(0);
  require_shape(op, "a", a, {r, k}, "(r, K)");
  require_dtype(op, "xa", xa, DType::F32);
  require_shape(op, "xa", xa, {n, r}, "(N, r)");
  check_dropout_config(op, dropout, k);
  if (dropout.keep_bits_drawn && !dropout.keep_bits.defined()) {
    fail("{}: dropout.keep_bits_drawn says the mask is in dropout.keep_bits, which is undefined", op);
  }
  if (dropout.keep_bits.defined()) {
    require_dtype(op, "dropout.keep_bits", dropout.keep_bits, DType::U8);
    require_shape(op, "dropout.keep_bits", dropout.keep_bits, {n, (k + 7) / 8}, "(N, ceil(K / 8))");
    require_disjoint(op, "dropout.keep_bits", dropout.keep_bits, {{"x", &x}, {"xa", &xa}});
  }
}

// check_lora_xa_operands, and w (M, K) and b (M, r) F32 against x and a.
void check_lora_factors(const char* op, const Tensor& x, const Tensor& w, const Tensor& a, const Tensor& b,
                        const Tensor& xa, float scale, const Dropout& dropout) {
  for (auto [name, t] : {std::pair{"x", &x}, {"w", &w}, {"a", &a}, {"b", &b}, {"xa", &xa}}) require_defined(op, name, *t);
  require_rank(op, "x", x, 2, "(N, K)");
  require_rank(op, "w", w, 2, "(M, K)");
  require_float(op, "w", w);
  const int64_t k = x.size(1), m = w.size(0);
  if (w.size(1) != k) fail("{}: x {} and w {} disagree on K ({} vs {})", op, desc(x), desc(w), k, w.size(1));
  check_lora_xa_operands(op, x, a, xa, dropout);
  require_dtype(op, "b", b, DType::F32);
  require_shape(op, "b", b, {m, a.size(0)}, "(M, r)");
  if (!std::isfinite(scale)) fail("{}: scale = {} must be finite", op, scale);
}
}  // namespace

Device check_lora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                         float scale, const Dropout& dropout, const Tensor& y, const Tensor& xa) {
  const char* op = "lora_linear";
  check_lora_factors(op, x, w, a, b, xa, scale, dropout);
  checked_as(op, [&] { return check_linear(x, w, bias, y); });
  require_disjoint(op, "y", y, {{"a", &a}, {"b", &b}, {"xa", &xa}});
  require_disjoint(op, "xa", xa, {{"x", &x}, {"w", &w}, {"bias", &bias}, {"a", &a}, {"b", &b}});
  return common_device(op, {&x, &w, &bias, &a, &b, &y, &xa, &dropout.keep_bits});
}

Device check_lora_xa(const Tensor& x, const Tensor& a, const Dropout& dropout, const Tensor& xa) {
  const char* op = "lora_xa";
  check_lora_xa_operands(op, x, a, xa, dropout);
  require_disjoint(op, "xa", xa, {{"x", &x}, {"a", &a}});
  return common_device(op, {&x, &a, &xa, &dropout.keep_bits});
}

Device check_lora_xa_shared(const Tensor& x, const std::vector<LoraSharedXa>& jobs) {
  const char* op = "lora_xa_shared";
  Device device = x.device();
  for (size_t j = 0; j < jobs.size(); ++j) {
    const std::string job = fmt::format("{} job {}", op, j);
    const Device d = checked_as(job.c_str(), [&] { return check_lora_xa(x, jobs[j].a, jobs[j].dropout, jobs[j].xa); });
    if (d != device) fail("{}: on {}, x on {}", job, d.str(), device.str());
    for (size_t i = 0; i < j; ++i) {  // every job writes its xa and (when defined) its keep bits
      for (const Tensor* t : {&jobs[j].xa, &jobs[j].dropout.keep_bits}) {
        if (overlaps(*t, jobs[i].xa) || overlaps(*t, jobs[i].dropout.keep_bits)) {
          fail("{}: {} overlaps job {}'s xa or keep bits", job, t == &jobs[j].xa ? "xa" : "dropout.keep_bits", i);
        }
      }
    }
  }
  return device;
}

Device check_lora_linear_backward_shared(const Tensor& x, const std::vector<LoraSharedBackward>& jobs, float scale,
                                         const Tensor& dx) {
  const char* op = "lora_linear_backward_shared";
  if (jobs.empty()) fail("{}: no jobs (the first job writes dx)", op);
  require_defined(op, "dx", dx);
  Device device = x.device();
  for (size_t j = 0; j < jobs.size(); ++j) {
    const LoraSharedBackward& b = jobs[j];
    const std::string job = fmt::format("{} job {}", op, j);
    const Device d = checked_as(job.c_str(), [&] {
      return check_lora_linear_backward(b.dy, x, b.w, b.a, b.b, b.xa, scale, b.dropout, dx, b.da, b.db, j > 0);
    });
    if (d != device) fail("{}: on {}, x on {}", job, d.str(), device.str());
    if (b.g.defined()) {  // given by the caller (swiglu_backward_lora_dy)
      require_dtype(job.c_str(), "g", b.g, DType::F32);
      require_shape(job.c_str(), "g", b.g, {x.size(0), b.a.size(0)}, "(N, r)");
      require_disjoint(job.c_str(), "dx", dx, {{"g", &b.g}});
      require_disjoint(job.c_str(), "g", b.g, {{"da", &b.da}, {"db", &b.db}});
      if (b.g.device() != device) fail("{}: g on {}, x on {}", job, b.g.device().str(), device.str());
    }
    for (size_t i = 0; i < j; ++i) {
      for (const Tensor* t : {&b.da, &b.db}) {
        if (overlaps(*t, jobs[i].da) || overlaps(*t, jobs[i].db)) fail("{}: da / db overlap job {}'s", job, i);
      }
    }
  }
  return device;
}

Device check_swiglu_backward_lora_dy(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                                     const Tensor& dup, const LoraDyStep& gate_step, const LoraDyStep& up_step) {
  const char* op = "swiglu_backward_lora_dy";
  const Device device = checked_as(op, [&] { return check_swiglu_backward(dout, gate, up, dgate, dup); });
  const int64_t n = gate.size(0), f = gate.size(1);
  const std::initializer_list<std::pair<const char*, const Tensor*>> inputs = {
      {"dout", &dout}, {"gate", &gate}, {"up", &up}, {"dgate", &dgate}, {"dup", &dup}};
  for (auto [step_name, step] : {std::pair{"gate_step", &gate_step}, {"up_step", &up_step}}) {
    const std::string where = fmt::format("{} {}", op, step_name);
    const char* w = where.c_str();
    for (auto [name, t] : {std::pair{"b", &step->b}, {"xa", &step->xa}, {"g", &step->g}}) {
      require_defined(w, name, *t);
      require_dtype(w, name, *t, DType::F32);
    }
    require_rank(w, "b", step->b, 2, "(F, r)");
    const int64_t r = step->b.size(1);
    require_shape(w, "b", step->b, {f, r}, "(F, r)");
    require_shape(w, "xa", step->xa, {n, r}, "(N, r)");
    require_shape(w, "g", step->g, {n, r}, "(N, r)");
    require_disjoint(w, "g", step->g, inputs);
    require_disjoint(w, "g", step->g, {{"b", &step->b}, {"xa", &step->xa}});
    if (step->db.defined()) {
      require_dtype(w, "db", step->db, DType::F32);
      require_shape(w, "db", step->db, {f, r}, "(F, r)");
      require_disjoint(w, "db", step->db, inputs);
      require_disjoint(w, "db", step->db, {{"b", &step->b}, {"xa", &step->xa}, {"g", &step->g}});
    }
    for (const Tensor* t : {&step->b, &step->xa, &step->g, &step->db}) {
      if (t->defined() && t->device() != device) fail("{}: on {}, gate on {}", where, t->device().str(), device.str());
    }
  }
  for (const Tensor* t : {&up_step.g, &up_step.db}) {
    if (overlaps(*t, gate_step.g) || overlaps(*t, gate_step.db)) fail("{}: up_step's g / db overlap gate_step's", op);
  }
  return device;
}

Device check_lora_linear_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b,
                                 const Tensor& xa, const Tensor& y) {
  const char* op = "lora_linear_from_xa";
  const Device device = checked_as(op, [&] { return check_linear(x, w, bias, y); });
  if (const Device d = check_add_lora_residual(op, y, y, xa, b); d != device) {
    fail("{}: xa and b on {}, x on {}", op, d.str(), device.str());
  }
  require_disjoint(op, "y", y, {{"x", &x}, {"w", &w}, {"bias", &bias}});
  if (xa.size(0) != x.size(0)) fail("{}: xa {} must have N = {} rows (x's)", op, desc(xa), x.size(0));
  return device;
}

Device check_lora_linear_residual_from_xa(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& b,
                                          const Tensor& xa, const Tensor& residual, const Tensor& y) {
  const char* op = "lora_linear_residual_from_xa";
  const Device device = checked_as(op, [&] { return check_lora_linear_from_xa(x, w, bias, b, xa, y); });
  require_defined(op, "residual", residual);
  require_same_shape(op, "residual", residual, "y", y);
  require_activation(op, "residual", residual, "y", &y);
  const bool same = residual.storage() == y.storage() && residual.byte_offset() == y.byte_offset();
  if (!same && overlaps(residual, y)) fail("{}: residual {} partly overlaps y {}", op, desc(residual), desc(y));
  if (!(residual.device() == device)) fail("{}: residual on {}, x on {}", op, residual.device().str(), device.str());
  return device;
}

Device check_lora_linear_swiglu_backward(const Tensor& dy, const Tensor& act, const Tensor& w, const Tensor& a,
                                         const Tensor& b, const Tensor& xa, float scale, const Dropout& dropout,
                                         const Tensor& gate, const Tensor& up, const Tensor& dgate, const Tensor& dup,
                                         const Tensor& da, const Tensor& db) {
  const char* op = "lora_linear_swiglu_backward";
  require_defined(op, "dgate", dgate);
  const Device device = checked_as(op, [&] {
    return check_lora_linear_backward(dy, act, w, a, b, xa, scale, dropout, dgate, da, db, false);
  });
  if (const Device d = checked_as(op, [&] { return check_swiglu_backward(dgate, gate, up, dgate, dup); });
      d != device) {
    fail("{}: gate and up on {}, act on {}", op, d.str(), device.str());
  }
  require_disjoint(op, "dgate", dgate, {{"gate", &gate}, {"up", &up}});
  require_disjoint(op, "dup", dup, {{"act", &act}, {"dy", &dy}, {"gate", &gate}, {"da", &da}, {"db", &db}});
  return device;
}

Device check_lora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a,
                                  const Tensor& b, const Tensor& xa, float scale, const Dropout& dropout,
                                  const Tensor& dx, const Tensor& da, const Tensor& db, bool accumulate_dx) {
  (void)accumulate_dx;
  const char* op = "lora_linear_backward";
  check_lora_factors(op, x, w, a, b, xa, scale, dropout);
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0), r = a.size(0);
  require_defined(op, "dy", dy);
  require_activation(op, "dy", dy, "x", &x);
  require_shape(op, "dy", dy, {n, m}, "(N, M)");
  const std::initializer_list<std::pair<const char*, const Tensor*>> inputs = {
      {"dy", &dy}, {"x", &x}, {"w", &w}, {"a", &a}, {"b", &b}, {"xa", &xa}};
  if (dx.defined()) {
    require_activation(op, "dx", dx, "x", &x);
    require_shape(op, "dx", dx, {n, k}, "(N, K)");
    require_disjoint(op, "dx", dx, inputs);
    require_disjoint(op, "dx", dx, {{"da", &da}, {"db", &db}});
  }
  if (da.defined()) {
    require_dtype(op, "da", da, DType::F32);
    require_shape(op, "da", da, {r, k}, "(r, K)");
    require_disjoint(op, "da", da, inputs);
    require_disjoint(op, "da", da, {{"db", &db}});
  }
  if (db.defined()) {
    require_dtype(op, "db", db, DType::F32);
    require_shape(op, "db", db, {m, r}, "(M, r)");
    require_disjoint(op, "db", db, inputs);
  }
  return common_device(op, {&dy, &x, &w, &a, &b, &xa, &dx, &da, &db, &dropout.keep_bits});
}

Device check_lm_head_loss(const char* op, const Tensor& hidden, const Tensor& head, const Tensor& labels,
                          const CrossEntropyOptions& options, const Tensor& per_token, const Tensor& dhidden,
                          const Tensor& dhead, int64_t vocab_offset) {
  require_defined(op, "hidden", hidden);
  require_defined(op, "head", head);
  require_defined(op, "labels", labels);
  require_rank(op, "hidden", hidden, 2, "(T, C)");
  require_activation(op, "hidden", hidden);
  require_rank(op, "head", head, 2, "(V, C)");
  require_float(op, "head", head);
  require_rank(op, "labels", labels, 1, "(T)");
  require_dtype(op, "labels", labels, DType::I32);
  const int64_t t = hidden.size(0), c = hidden.size(1), vocab = head.size(0);
  if (head.size(1) != c) fail("{}: hidden {} and head {} disagree on C ({} vs {})", op, desc(hidden), desc(head), c, head.size(1));
  if (labels.size(0) != t) fail("{}: labels {} must have T = {} entries (hidden {})", op, desc(labels), t, desc(hidden));
  if (vocab == 0 || c == 0) fail("{}: head {} must have V >= 1 rows and C >= 1 columns", op, desc(head));
  if (options.token_block < 1 || options.vocab_block < 1) {
    fail("{}: token_block = {} and vocab_block = {} must be >= 1", op, options.token_block, options.vocab_block);
  }
  if (options.device_workspace_bytes < 0) {
    fail("{}: device_workspace_bytes = {} must be >= 0 (0: the backend's default)", op, options.device_workspace_bytes);
  }
  if (per_token.defined()) {
    require_dtype(op, "per-token tensor", per_token, DType::F32);
    require_shape(op, "per-token tensor", per_token, {t}, "(T)");
  }
  if (dhidden.defined()) {
    require_activation(op, "dhidden", dhidden, "hidden", &hidden);
    require_same_shape(op, "dhidden", dhidden, "hidden", hidden);
    require_disjoint(op, "dhidden", dhidden, {{"hidden", &hidden}, {"head", &head}, {"labels", &labels}, {"per-token tensor", &per_token}, {"dhead", &dhead}});
  }
  if (dhead.defined()) {
    require_dtype(op, "dhead", dhead, DType::F32);
    require_same_shape(op, "dhead", dhead, "head", head);
    require_disjoint(op, "dhead", dhead, {{"hidden", &hidden}, {"head", &head}, {"labels", &labels}, {"per-token tensor", &per_token}});
  }
  Device device = common_device(op, {&hidden, &head, &labels, &per_token, &dhidden, &dhead});
  if (device.is_cpu()) {
    const int32_t* label = labels.data<int32_t>();
    for (int64_t i = 0; i < t; ++i) {
      if (label[i] != options.ignore_index && vocab_offset >= 0 && label[i] < 0) {
        fail("{}: label {} at position {} is negative and is not ignore_index {}", op, label[i], i, options.ignore_index);
      }
      if (label[i] != options.ignore_index && vocab_offset < 0 && (label[i] < 0 || label[i] >= vocab)) {
        fail("{}: label {} at position {} is outside the vocabulary [0, {}) of head {} and is not ignore_index {}",
             op, label[i], i, vocab, desc(head), options.ignore_index);
      }
    }
  }
  return device;
}

Device check_lm_head_shard(const char* op, const Tensor& hidden, const Tensor& head, const Tensor& labels,
                           int64_t vocab_offset, const CrossEntropyOptions& options,
                           std::initializer_list<const Tensor*> per_token, const Tensor& argmax, const Tensor& dhidden,
                           const Tensor& dhead) {
  if (vocab_offset < 0) fail("{}: vocab_offset = {} must be >= 0", op, vocab_offset);
  Device device = check_lm_head_loss(op, hidden, head, labels, options, Tensor(), dhidden, dhead, vocab_offset);
  const int64_t t = hidden.size(0);
  for (const Tensor* p : per_token) {
    require_defined(op, "per-token tensor", *p);
    require_dtype(op, "per-token tensor", *p, DType::F32);
    require_shape(op, "per-token tensor", *p, {t}, "(T)");
    if (!(p->device() == device)) fail("{}: per-token tensor {} is not on {}", op, desc(*p), device.str());
    if (dhidden.defined()) require_disjoint(op, "dhidden", dhidden, {{"per-token tensor", p}});
  }
  if (argmax.defined()) {
    require_dtype(op, "argmax", argmax, DType::I32);
    require_shape(op, "argmax", argmax, {t}, "(T)");
    if (!(argmax.device() == device)) fail("{}: argmax {} is not on {}", op, desc(argmax), device.str());
  }
  return device;
}

Device check_adamw(std::span<const AdamWTensor> tensors, const AdamWConfig& config, int64_t step) {
  const char* op = "adamw_step";
  if (step < 1) fail("{}: step = {} must be >= 1 (the count including this step)", op, step);
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0.0; };
  if (!finite_nonneg(config.lr)) fail("{}: lr = {} must be finite and >= 0", op, config.lr);
  if (!(config.beta1 >= 0.0 && config.beta1 < 1.0)) fail("{}: beta1 = {} must be in [0, 1)", op, config.beta1);
  if (!(config.beta2 >= 0.0 && config.beta2 < 1.0)) fail("{}: beta2 = {} must be in [0, 1)", op, config.beta2);
  if (!finite_nonneg(config.eps)) fail("{}: eps = {} must be finite and >= 0", op, config.eps);
  if (!finite_nonneg(config.weight_decay)) fail("{}: weight_decay = {} must be finite and >= 0", op, config.weight_decay);
  Device device = Device::cpu();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const AdamWTensor& e = tensors[i];
    const std::string where = fmt::format("{} (tensor {})", op, i);
    const char* w = where.c_str();
    for (auto [name, t] : {std::pair{"param", &e.param}, {"grad", &e.grad}, {"exp_avg", &e.exp_avg}, {"exp_avg_sq", &e.exp_avg_sq}}) {
      require_defined(w, name, *t);
      require_dtype(w, name, *t, DType::F32);
      require_same_shape(w, "param", e.param, name, *t);
    }
    require_disjoint(w, "param", e.param, {{"grad", &e.grad}, {"exp_avg", &e.exp_avg}, {"exp_avg_sq", &e.exp_avg_sq}});
    require_disjoint(w, "exp_avg", e.exp_avg, {{"grad", &e.grad}, {"exp_avg_sq", &e.exp_avg_sq}});
    require_disjoint(w, "exp_avg_sq", e.exp_avg_sq, {{"grad", &e.grad}});
    for (const Tensor* t : {&e.param, &e.exp_avg, &e.exp_avg_sq}) t->check_writable(op);
    if (e.product.defined()) {
      require_float(w, "product", e.product);
      if (e.product.numel() != e.param.numel()) {
        fail("{}: product {} must have param {}'s {} elements", w, desc(e.product), desc(e.param), e.param.numel());
      }
      require_disjoint(w, "product", e.product, {{"param", &e.param}, {"grad", &e.grad}, {"exp_avg", &e.exp_avg},
                                                 {"exp_avg_sq", &e.exp_avg_sq}});
      e.product.check_writable(op);
      common_device(w, {&e.param, &e.product});
    }
    Device d = common_device(w, {&e.param, &e.grad, &e.exp_avg, &e.exp_avg_sq});
    if (i == 0) device = d;
    else if (!(d == device)) fail("{}: tensors live on different devices ({} and {})", w, device.str(), d.str());
  }
  return device;
}

Device check_grads(const char* op, std::span<const Tensor> grads, bool writable) {
  Device device = Device::cpu();
  for (size_t i = 0; i < grads.size(); ++i) {
    const std::string name = fmt::format("grads[{}]", i);
    require_defined(op, name.c_str(), grads[i]);
    require_dtype(op, name.c_str(), grads[i], DType::F32);
    if (writable) grads[i].check_writable(op);
    if (i == 0) device = grads[i].device();
    else if (!(grads[i].device() == device)) fail("{}: {} lives on {}, grads[0] on {}", op, name, grads[i].device().str(), device.str());
  }
  return device;
}


// ---- DoRA ---------------------------------------------------------------------------------------------------
namespace {
// magnitude and weight_norm: (M) F32 each.
void check_dora_vectors(const char* op, int64_t m, const Tensor& magnitude, const Tensor& weight_norm) {
  require_defined(op, "magnitude", magnitude);
  require_defined(op, "weight_norm", weight_norm);
  require_dtype(op, "magnitude", magnitude, DType::F32);
  require_shape(op, "magnitude", magnitude, {m}, "(M)");
  require_dtype(op, "weight_norm", weight_norm, DType::F32);
  require_shape(op, "weight_norm", weight_norm, {m}, "(M)");
}
}  // namespace

Device check_dora_weight_norm(const Tensor& w, const Tensor& a, const Tensor& b, float scale, const Tensor& norm) {
  const char* op = "dora_weight_norm";
  for (auto [name, t] : {std::pair{"w", &w}, {"a", &a}, {"b", &b}, {"norm", &norm}}) require_defined(op, name, *t);
  require_rank(op, "w", w, 2, "(M, K)");
  require_float(op, "w", w);
  require_rank(op, "a", a, 2, "(r, K)");
  require_dtype(op, "a", a, DType::F32);
  const int64_t m = w.size(0), k = w.size(1), r = a.size(0);
  require_shape(op, "a", a, {r, k}, "(r, K)");
  require_dtype(op, "b", b, DType::F32);
  require_shape(op, "b", b, {m, r}, "(M, r)");
  require_dtype(op, "norm", norm, DType::F32);
  require_shape(op, "norm", norm, {m}, "(M)");
  if (!std::isfinite(scale)) fail("{}: scale = {} must be finite", op, scale);
  require_disjoint(op, "norm", norm, {{"w", &w}, {"a", &a}, {"b", &b}});
  return common_device(op, {&w, &a, &b, &norm});
}

Device check_dora_norm_from_squares(const Tensor& norm) {
  const char* op = "dora_norm_from_squares";
  require_defined(op, "norm", norm);
  require_rank(op, "norm", norm, 1, "(M)");
  require_dtype(op, "norm", norm, DType::F32);
  return common_device(op, {&norm});
}

Device check_dora_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& a, const Tensor& b,
                         const Tensor& magnitude, const Tensor& weight_norm, float scale, const Dropout& dropout,
                         const Tensor& y, const Tensor& xa, const Tensor& h) {
  const char* op = "dora_linear";
  check_lora_factors(op, x, w, a, b, xa, scale, dropout);
  checked_as(op, [&] { return check_linear(x, w, bias, y); });
  const int64_t n = x.size(0), m = w.size(0);
  check_dora_vectors(op, m, magnitude, weight_norm);
  require_defined(op, "h", h);
  require_dtype(op, "h", h, DType::F32);
  require_shape(op, "h", h, {n, m}, "(N, M)");
  const std::initializer_list<std::pair<const char*, const Tensor*>> inputs = {
      {"x", &x}, {"w", &w}, {"bias", &bias}, {"a", &a}, {"b", &b}, {"magnitude", &magnitude},
      {"weight_norm", &weight_norm}};
  require_disjoint(op, "y", y, inputs);
  require_disjoint(op, "xa", xa, inputs);
  require_disjoint(op, "h", h, inputs);
  require_disjoint(op, "y", y, {{"xa", &xa}, {"h", &h}});
  require_disjoint(op, "xa", xa, {{"h", &h}});
  return common_device(op, {&x, &w, &bias, &a, &b, &magnitude, &weight_norm, &y, &xa, &h});
}

Device check_dora_linear_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& a,
                                  const Tensor& b, const Tensor& magnitude, const Tensor& weight_norm,
                                  const Tensor& xa, const Tensor& h, float scale, const Dropout& dropout,
                                  const Tensor& dx, const Tensor& da, const Tensor& db, const Tensor& dmagnitude,
                                  bool accumulate_dx) {
  const char* op = "dora_linear_backward";
  checked_as(op, [&] {
    return check_lora_linear_backward(dy, x, w, a, b, xa, scale, dropout, dx, da, db, accumulate_dx);
  });
  const int64_t n = x.size(0), m = w.size(0);
  check_dora_vectors(op, m, magnitude, weight_norm);
  require_defined(op, "h", h);
  require_dtype(op, "h", h, DType::F32);
  require_shape(op, "h", h, {n, m}, "(N, M)");
  for (auto [name, t] : {std::pair{"dx", &dx}, {"da", &da}, {"db", &db}}) {
    require_disjoint(op, name, *t, {{"magnitude", &magnitude}, {"weight_norm", &weight_norm}, {"h", &h}});
  }
  if (dmagnitude.defined()) {
    require_dtype(op, "dmagnitude", dmagnitude, DType::F32);
    require_shape(op, "dmagnitude", dmagnitude, {m}, "(M)");
    require_disjoint(op, "dmagnitude", dmagnitude,
                     {{"dy", &dy}, {"x", &x}, {"w", &w}, {"a", &a}, {"b", &b}, {"magnitude", &magnitude},
                      {"weight_norm", &weight_norm}, {"xa", &xa}, {"h", &h}, {"dx", &dx}, {"da", &da}, {"db", &db}});
  }
  return common_device(op, {&dy, &x, &w, &a, &b, &magnitude, &weight_norm, &xa, &h, &dx, &da, &db, &dmagnitude});
}

}  // namespace swift::ops::detail
