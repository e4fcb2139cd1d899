// ops/cuda/attention_cudnn.cpp — attention and attention_backward through cuDNN's fused flash attention, written
// against the C backend API (cudnnBackendCreateDescriptor / SetAttribute / Finalize; no cudnn-frontend). cuDNN
// 9.19's native SDPA operation cannot express a causal mask, so the graphs are the primitive-operation patterns
// that cuDNN's runtime-fusion SDPA engines recognise (the shape cudnn-frontend builds for its composite SDPA node):
//   forward : S = Q K^T (m/n override = per-sequence lengths) * scale; padding mask (row < len_q && col < len_kv);
//             causal mask (row >= col); window (col + window > row); softmax -> Stats = max + log(sum), P (io dtype);
//             O = P V (m/k override).
//   backward: softmax_sum = rowsum(dO * O) (fp32, non-virtual); S recomputed, minus Stats, masked, exp -> P;
//             dV = P^T dO; dP = dO V^T; dS = (dP - softmax_sum) * P * scale; dK = dS^T Q; dQ = dS K. With grouped
//             heads the dK / dV products run per query head and a reduction sums each kv group.
// Shapes as cuDNN sees them: Q/O/dQ/dO (B, Hq, S, D) and K/V/dK/dV (B, Hkv, S, D) with the strides of our packed
// (T, H, D) rows and ragged element offsets per sequence; Stats (B, Hq, S, 1) F32 padded. Where every sequence has
// the same length S (one of the length buckets), the graphs are dense instead: the exact B, no ragged offsets, length
// overrides or padding mask (SWIFT_CUDNN_ATTENTION_DENSE=0: ragged always). Measured (docs/PERFORMANCE.md run 12): the
// 0.5B full step 2.6% faster, the 7B LoRA step 1.3%. The deterministic backward runs over groups of whole kv heads
// when its dP workspace would raise the process's memory peak (or exceed SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB when
// set; backward_groups): each group is the same graph over a block of every row's heads (strides of all heads), so
// long sequences stay on cuDNN instead of falling back to our kernels.
//
// Invariants:
//  - Plans are built once per key (direction, dtype, B padded to a power of two with empty sequences, S rounded
//    up to 64 / 256, Hq, Hkv, D, window, backward variant, device; dense graphs: the exact B) and cached for the
//    process; a key cuDNN has no engine for is remembered as unsupported, so the fallback to our kernels is silent
//    and asked once per key.
//    The scale is a by-value scalar (not in the key).
//  - Build-time statuses of the NOT_SUPPORTED family mean "fall back"; every other failing cuDNN call throws
//    swift::Error naming the op, the call, cudnnGetErrorString and cudnnGetLastErrorString.
//  - Workspaces (cuDNN's, padded stats, softmax_sum, the optional fp32 dQ accumulator, lengths/offsets) come from
//    the caching allocator (Workspace category) and are released after the enqueue: every op of a device runs on
//    cuda::stream(device), so later owners are ordered after these kernels.
#include "ops/cuda/attention_cudnn.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/env_switch.h"

#ifdef SWIFT_WITH_CUDNN
#include <cudnn.h>
#endif

namespace swift::ops::cuda {

namespace {

std::array<std::atomic<int64_t>, 6> g_counts{};  // cudnn fwd, cudnn bwd, flash2 fwd, flash2 bwd, cudnn bwd launches,
                                                 // cudnn dense calls
std::mutex g_text_mutex;
std::string g_last_fallback;  // why cuDNN last declined a call
std::string g_plan_info;      // the last plans built (engine, workspace, notes)

void note_fallback(const std::string& why) {
  std::lock_guard<std::mutex> lock(g_text_mutex);
  g_last_fallback = why;
}

// SWIFT_ATTENTION: unset / "" / "auto" / "cudnn" = cuDNN where it can take the call; "flash2" = our kernels.
bool flash2_forced(const char* op) {
  const char* e = std::getenv("SWIFT_ATTENTION");
  if (e == nullptr || *e == 0 || std::strcmp(e, "auto") == 0 || std::strcmp(e, "cudnn") == 0) return false;
  if (std::strcmp(e, "flash2") == 0) return true;
  fail("op {}: SWIFT_ATTENTION='{}' is not a known attention path (use cudnn, flash2 or auto)", op, e);
}

}  // namespace

AttentionPathCounts attention_path_counts() {
  return {g_counts[0].load(), g_counts[1].load(), g_counts[2].load(), g_counts[3].load(), g_counts[4].load(),
          g_counts[5].load()};
}
void count_flash2_attention(bool backward) { ++g_counts[backward ? 3 : 2]; }
std::string cudnn_attention_last_fallback() {
  std::lock_guard<std::mutex> lock(g_text_mutex);
  return g_last_fallback;
}
std::string cudnn_attention_plan_info() {
  std::lock_guard<std::mutex> lock(g_text_mutex);
  return g_plan_info;
}

#ifndef SWIFT_WITH_CUDNN

bool try_cudnn_attention_forward(const AttentionShape&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 Tensor&, Tensor&) {
  note_fallback("built without cuDNN");
  return false;
}
bool try_cudnn_attention_backward(const AttentionShape&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                  const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&) {
  note_fallback("built without cuDNN");
  return false;
}

#else

namespace {

// Thrown while building a plan when cuDNN says the graph is not supported: the key falls back to our kernels.
struct Unsupported {
  std::string why;
};

std::string last_cudnn_message() {
  char msg[2048] = {0};
  cudnnGetLastErrorString(msg, sizeof msg);
  return msg;
}

[[noreturn]] void fail_cudnn(const char* op, const char* call, cudnnStatus_t status) {
  fail("op {}: cuDNN {} failed: {} ({})", op, call, cudnnGetErrorString(status), last_cudnn_message());
}
void check(const char* op, cudnnStatus_t status, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) fail_cudnn(op, call, status);
}
bool not_supported(cudnnStatus_t status) { return status / 1000 == CUDNN_STATUS_NOT_SUPPORTED / 1000; }

// Owns one backend descriptor.
class Desc {
 public:
  Desc(const char* op, cudnnBackendDescriptorType_t type) {
    check(op, cudnnBackendCreateDescriptor(type, &d_), "cudnnBackendCreateDescriptor");
  }
  ~Desc() {
    if (d_ != nullptr) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

using D = cudnnBackendDescriptor_t;
using Dims = std::array<int64_t, 4>;

// Non-virtual tensor ids of the graphs (the variant pack's keys); virtual tensors count up from kFirstVirtual.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kScale, kSeqQ, kSeqKv, kOffQ, kOffK, kOffV, kOffO, kNegInf, kWindow, kDO, kDQ, kDK,
  kDV, kOffDO, kOffDQ, kOffDK, kOffDV, kSoftmaxSum, kOne, kDQAccum,
  kFirstVirtual = 1000
};

// The descriptors of one graph (kept alive with its plan) and the helpers that add tensors and operations.
struct Graph {
  explicit Graph(const char* op) : op(op) {}
  const char* op;
  std::vector<std::unique_ptr<Desc>> keep;
  std::vector<D> ops;
  int64_t next_virtual = kFirstVirtual;

  D make(cudnnBackendDescriptorType_t type) {
    keep.push_back(std::make_unique<Desc>(op, type));
    return keep.back()->get();
  }
  void set(D d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t n, const void* value) {
    check(op, cudnnBackendSetAttribute(d, name, type, n, value), "cudnnBackendSetAttribute");
  }
  void set_desc(D d, cudnnBackendAttributeName_t name, D value) {
    set(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
  }
  void finalize(D d, const char* what) {
    const cudnnStatus_t status = cudnnBackendFinalize(d);
    if (status == CUDNN_STATUS_SUCCESS) return;
    if (not_supported(status)) {
      throw Unsupported{std::string(what) + ": " + cudnnGetErrorString(status) + " (" + last_cudnn_message() + ")"};
    }
    fail_cudnn(op, what, status);
  }

  D tensor(int64_t uid, cudnnDataType_t dtype, const Dims& dims, const Dims& strides, bool is_virtual,
           bool by_value = false, D ragged = nullptr) {
    D t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype);
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    const int64_t alignment = 16;
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    if (ragged != nullptr) set_desc(t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, ragged);
    finalize(t, "tensor descriptor");
    return t;
  }
  D virt(cudnnDataType_t dtype, const Dims& dims, const Dims& strides) {
    return tensor(next_virtual++, dtype, dims, strides, true);
  }
  D scalar(int64_t uid) { return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true); }

  // y = mode(x, b[, t]); a new virtual output of `dtype` and `dims` (contiguous) unless `y` is given.
  D pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math, D x, D b, cudnnDataType_t dtype, const Dims& dims,
              D t = nullptr, int64_t axis = -1, D y = nullptr) {
    if (y == nullptr) y = virt(dtype, dims, contiguous(dims));
    D pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(pw, "pointwise descriptor");
    D o = make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b != nullptr) set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t != nullptr) set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    set_desc(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    finalize(o, "pointwise operation");
    ops.push_back(o);
    return y;
  }
  void reduction(cudnnReduceTensorOp_t mode, D x, D y) {
    D r = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    finalize(r, "reduction descriptor");
    D o = make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set_desc(o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r);
    set_desc(o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    set_desc(o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    finalize(o, "reduction operation");
    ops.push_back(o);
  }
  void matmul(D a, D b, D c, D m_override, D n_override, D k_override) {
    D md = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(md, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32);
    finalize(md, "matmul descriptor");
    D o = make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_DESC, md);
    if (m_override != nullptr) set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m_override);
    if (n_override != nullptr) set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n_override);
    if (k_override != nullptr) set_desc(o, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k_override);
    finalize(o, "matmul operation");
    ops.push_back(o);
  }
  void reshape(D x, D y) {
    D o = make(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set_desc(o, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    set_desc(o, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    finalize(o, "reshape operation");
    ops.push_back(o);
  }

  static Dims contiguous(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }
};

// The masks between the scaled scores and the softmax (forward) / the exp (backward), as cudnn-frontend's
// composite padding mask and diagonal band masks lay them out: padding (row < len_q && col < len_kv; ragged graphs
// only, seq_q / seq_kv null in dense ones), causal (row >= col), and with a window (col + window > row).
D masks(Graph& g, D scores, const Dims& sdims, D seq_q, D seq_kv, D neg_inf, D window) {
  const cudnnDataType_t i32 = CUDNN_DATA_INT32, f32 = CUDNN_DATA_FLOAT, boolean = CUDNN_DATA_BOOLEAN;
  D s = scores;
  if (seq_q != nullptr) {  // ragged: rows and columns past the sequence's length are padding
    D row = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, scores, nullptr, i32, sdims, nullptr, 2);
    D col = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, i32, scores, nullptr, i32, sdims, nullptr, 3);
    D row_in = g.pointwise(CUDNN_POINTWISE_CMP_LT, boolean, row, seq_q, boolean, sdims);
    D col_in = g.pointwise(CUDNN_POINTWISE_CMP_LT, boolean, col, seq_kv, boolean, sdims);
    D keep = g.pointwise(CUDNN_POINTWISE_LOGICAL_AND, boolean, row_in, col_in, boolean, sdims);
    s = g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, scores, neg_inf, f32, sdims, keep);
  }

  D crow = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, s, nullptr, i32, sdims, nullptr, 2);
  D ccol = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, s, nullptr, i32, sdims, nullptr, 3);
  D causal = g.pointwise(CUDNN_POINTWISE_CMP_GE, boolean, crow, ccol, boolean, sdims);
  s = g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, s, neg_inf, f32, sdims, causal);

  if (window != nullptr) {
    D wrow = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, s, nullptr, i32, sdims, nullptr, 2);
    D wcol = g.pointwise(CUDNN_POINTWISE_GEN_INDEX, f32, s, nullptr, i32, sdims, nullptr, 3);
    D shifted = g.pointwise(CUDNN_POINTWISE_ADD, f32, wcol, window, f32, sdims, nullptr, 3);
    D inside = g.pointwise(CUDNN_POINTWISE_CMP_GT, boolean, shifted, wrow, boolean, sdims);
    s = g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, f32, s, neg_inf, f32, sdims, inside);
  }
  return s;
}

struct Key {
  bool backward;
  int dtype;
  int32_t b, s, hq, hkv, d;
  int64_t window;
  bool deterministic;
  int device;
  int32_t groups = 1;  // backward: launches over head groups (each hq / groups query and hkv / groups kv heads)
  bool dense = false;  // every sequence is exactly s long: no ragged offsets, length overrides or padding mask
  auto tie() const { return std::tie(backward, dtype, b, s, hq, hkv, d, window, deterministic, device, groups, dense); }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

struct Plan {
  bool ok = false;
  std::string why;  // when !ok: what cuDNN said
  std::unique_ptr<Graph> graph;
  D plan = nullptr;
  int64_t workspace = 0;
  std::string info;
};

// Dimensions and ragged layouts shared by both graphs. hq / hkv are the heads one launch covers; hq_all / hkv_all
// the heads of a token's row (the token stride): a backward over head groups sees a block of each row's heads.
struct Layout {
  int64_t b, s, hq, hkv, d, hq_all, hkv_all;
  Dims qdims() const { return {b, hq, s, d}; }
  Dims qstrides() const { return {s * hq_all * d, d, hq_all * d, 1}; }
  Dims kvdims() const { return {b, hkv, s, d}; }
  Dims kvstrides() const { return {s * hkv_all * d, d, hkv_all * d, 1}; }
  Dims ktdims() const { return {b, hkv, d, s}; }  // K^T / V^T: the same memory, last two axes swapped
  Dims ktstrides() const { return {s * hkv_all * d, d, 1, hkv_all * d}; }
  Dims sdims() const { return {b, hq, s, s}; }
  Dims rowdims() const { return {b, hq, s, 1}; }
  Dims rowstrides() const { return {hq_all * s, s, 1, 1}; }  // a block of heads of the padded (B, Hq, S) statistics
};

cudnnDataType_t io_type(int dtype) { return dtype == 1 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

void build_forward(Graph& g, const Key& key) {
  const Layout l{key.b, key.s, key.hq, key.hkv, key.d, key.hq, key.hkv};
  const cudnnDataType_t io = io_type(key.dtype), f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32;
  const Dims idx_dims{l.b + 1, 1, 1, 1}, seq_dims{l.b, 1, 1, 1}, ones{1, 1, 1, 1};
  const bool ragged = !key.dense;
  auto offsets = [&](int64_t uid) { return ragged ? g.tensor(uid, i32, idx_dims, ones, false) : nullptr; };
  D off_q = offsets(kOffQ), off_k = offsets(kOffK), off_v = offsets(kOffV), off_o = offsets(kOffO);
  D seq_q = ragged ? g.tensor(kSeqQ, i32, seq_dims, ones, false) : nullptr;
  D seq_kv = ragged ? g.tensor(kSeqKv, i32, seq_dims, ones, false) : nullptr;
  D q = g.tensor(kQ, io, l.qdims(), l.qstrides(), false, false, off_q);
  D kt = g.tensor(kK, io, l.ktdims(), l.ktstrides(), false, false, off_k);
  D v = g.tensor(kV, io, l.kvdims(), l.kvstrides(), false, false, off_v);
  D o = g.tensor(kO, io, l.qdims(), l.qstrides(), false, false, off_o);
  D stats = g.tensor(kStats, f32, l.rowdims(), Graph::contiguous(l.rowdims()), false);
  D scale = g.scalar(kScale);
  D neg_inf = g.scalar(kNegInf);
  D window = key.window > 0 ? g.scalar(kWindow) : nullptr;

  const Dims sd = l.sdims(), rd = l.rowdims();
  D s = g.virt(f32, sd, Graph::contiguous(sd));
  g.matmul(q, kt, s, seq_q, seq_kv, nullptr);
  s = g.pointwise(CUDNN_POINTWISE_MUL, f32, s, scale, f32, sd);
  s = masks(g, s, sd, seq_q, seq_kv, neg_inf, window);
  // softmax with statistics
  D max = g.virt(f32, rd, Graph::contiguous(rd));
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s, max);
  D centered = g.pointwise(CUDNN_POINTWISE_SUB, f32, s, max, f32, sd);
  D e = g.pointwise(CUDNN_POINTWISE_EXP, f32, centered, nullptr, f32, sd);
  D sum = g.virt(f32, rd, Graph::contiguous(rd));
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  D log_sum = g.pointwise(CUDNN_POINTWISE_LOG, f32, sum, nullptr, f32, rd);
  g.pointwise(CUDNN_POINTWISE_ADD, f32, max, log_sum, f32, rd, nullptr, -1, stats);
  D p = g.pointwise(CUDNN_POINTWISE_DIV, f32, e, sum, io, sd);  // P in the io dtype: the second product's A
  g.matmul(p, v, o, seq_q, nullptr, seq_kv);
}

void build_backward(Graph& g, const Key& key) {
  const Layout l{key.b, key.s, key.hq / key.groups, key.hkv / key.groups, key.d, key.hq, key.hkv};
  const cudnnDataType_t io = io_type(key.dtype), f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32;
  const Dims idx_dims{l.b + 1, 1, 1, 1}, seq_dims{l.b, 1, 1, 1}, ones{1, 1, 1, 1};
  const bool ragged = !key.dense;
  auto offsets = [&](int64_t uid) { return ragged ? g.tensor(uid, i32, idx_dims, ones, false) : nullptr; };
  D off_q = offsets(kOffQ), off_k = offsets(kOffK), off_v = offsets(kOffV), off_o = offsets(kOffO);
  D off_do = offsets(kOffDO), off_dq = offsets(kOffDQ), off_dk = offsets(kOffDK), off_dv = offsets(kOffDV);
  D seq_q = ragged ? g.tensor(kSeqQ, i32, seq_dims, ones, false) : nullptr;
  D seq_kv = ragged ? g.tensor(kSeqKv, i32, seq_dims, ones, false) : nullptr;
  D q = g.tensor(kQ, io, l.qdims(), l.qstrides(), false, false, off_q);
  D kt = g.tensor(kK, io, l.ktdims(), l.ktstrides(), false, false, off_k);
  D vt = g.tensor(kV, io, l.ktdims(), l.ktstrides(), false, false, off_v);
  D o = g.tensor(kO, io, l.qdims(), l.qstrides(), false, false, off_o);
  D dout = g.tensor(kDO, io, l.qdims(), l.qstrides(), false, false, off_do);
  D dq = g.tensor(kDQ, io, l.qdims(), l.qstrides(), false, false, off_dq);
  D dk = g.tensor(kDK, io, l.kvdims(), l.kvstrides(), false, false, off_dk);
  D dv = g.tensor(kDV, io, l.kvdims(), l.kvstrides(), false, false, off_dv);
  const Dims rd = l.rowdims(), sd = l.sdims(), qd = l.qdims();
  D stats = g.tensor(kStats, f32, rd, l.rowstrides(), false);
  D softmax_sum = g.tensor(kSoftmaxSum, f32, rd, l.rowstrides(), false);
  D scale = g.scalar(kScale);
  D neg_inf = g.scalar(kNegInf);
  D one = g.scalar(kOne);
  D window = key.window > 0 ? g.scalar(kWindow) : nullptr;
  const Dims transposed{l.hq * l.s * l.s, l.s * l.s, 1, l.s};  // (B, Hq, S_kv, S_q) view of an (S_q, S_kv) tile
  const bool grouped = l.hq != l.hkv;

  // softmax_sum = rowsum(dO * O)
  D prod = g.pointwise(CUDNN_POINTWISE_MUL, f32, dout, o, f32, qd);
  D rowsum = g.virt(f32, rd, Graph::contiguous(rd));
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, prod, rowsum);
  g.pointwise(CUDNN_POINTWISE_MUL, f32, rowsum, one, f32, rd, nullptr, -1, softmax_sum);

  // P = exp(S * scale - Stats), masked
  D s = g.virt(f32, sd, Graph::contiguous(sd));
  g.matmul(q, kt, s, seq_q, seq_kv, nullptr);
  s = g.pointwise(CUDNN_POINTWISE_MUL, f32, s, scale, f32, sd);
  s = g.pointwise(CUDNN_POINTWISE_SUB, f32, s, stats, f32, sd);
  s = masks(g, s, sd, seq_q, seq_kv, neg_inf, window);
  D p = g.pointwise(CUDNN_POINTWISE_EXP, f32, s, nullptr, f32, sd);

  // dV = P^T dO (per query head, then summed over each kv group)
  D pt = g.virt(io, sd, transposed);
  g.reshape(p, pt);
  if (!grouped) {
    g.matmul(pt, dout, dv, seq_kv, nullptr, seq_q);
  } else {
    D dv_full = g.virt(io, qd, Graph::contiguous(qd));
    g.matmul(pt, dout, dv_full, seq_kv, nullptr, seq_q);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
  }

  // dS = (dO V^T - softmax_sum) * P * scale
  D dp = g.virt(f32, sd, Graph::contiguous(sd));
  g.matmul(dout, vt, dp, seq_q, seq_kv, nullptr);
  D ds = g.pointwise(CUDNN_POINTWISE_SUB, f32, dp, softmax_sum, f32, sd);
  ds = g.pointwise(CUDNN_POINTWISE_MUL, f32, ds, p, f32, sd);
  ds = g.pointwise(CUDNN_POINTWISE_MUL, f32, ds, scale, f32, sd);

  // dK = dS^T Q
  D dst = g.virt(io, sd, transposed);
  g.reshape(ds, dst);
  if (!grouped) {
    g.matmul(dst, q, dk, seq_kv, nullptr, seq_q);
  } else {
    D dk_full = g.virt(io, qd, Graph::contiguous(qd));
    g.matmul(dst, q, dk_full, seq_kv, nullptr, seq_q);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
  }

  // dQ = dS K: K^T viewed back as (B, Hkv, S, D) (same memory and offsets)
  D k = g.tensor(g.next_virtual++, io, l.kvdims(), l.kvstrides(), true, false, off_k);
  g.reshape(kt, k);
  if (key.deterministic) {
    g.matmul(ds, k, dq, seq_q, nullptr, seq_kv);  // the dP-workspace engine: no atomics
  } else {
    D accum = g.tensor(kDQAccum, f32, qd, Graph::contiguous(qd), false);
    g.matmul(ds, k, accum, seq_q, nullptr, seq_kv);
    g.pointwise(CUDNN_POINTWISE_IDENTITY, f32, accum, nullptr, io, qd, nullptr, -1, dq);
  }
}

struct DeviceCudnn {
  cudnnHandle_t handle = nullptr;
  int sm = 0;
  std::map<Key, std::shared_ptr<Plan>> plans;
  std::mutex mutex;
};

DeviceCudnn& device_cudnn(const char* op, int device) {
  static std::array<DeviceCudnn*, 64> all{};
  static std::mutex mutex;
  if (device < 0 || device >= static_cast<int>(all.size())) {
    fail("op {}: CUDA device index {} out of range", op, device);
  }
  std::lock_guard<std::mutex> lock(mutex);
  if (all[device] == nullptr) {
    auto* c = new DeviceCudnn();  // process lifetime, like the cuBLASLt handle (blas.cpp)
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
      cudaGetLastError();
    }
    c->sm = major * 10 + minor;
    int current = 0;
    cudaGetDevice(&current);
    if (current != device) cudaSetDevice(device);
    const cudnnStatus_t status = cudnnCreate(&c->handle);
    if (current != device) cudaSetDevice(current);
    if (status != CUDNN_STATUS_SUCCESS) {
      delete c;
      fail_cudnn(op, "cudnnCreate", status);
    }
    check(op, cudnnSetStream(c->handle, stream(device)), "cudnnSetStream");
    all[device] = c;
  }
  return *all[device];
}

std::string engine_info(const char* op, D cfg, bool* nondeterministic) {
  Desc engine(op, CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  D e = engine.get();
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &e) !=
      CUDNN_STATUS_SUCCESS) {
    return "engine ?";
  }
  int64_t index = -1;
  cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index);
  std::array<cudnnBackendNumericalNote_t, 16> notes{};
  int64_t count = 0;
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               static_cast<int64_t>(notes.size()), &count, notes.data()) != CUDNN_STATUS_SUCCESS) {
    count = 0;
  }
  std::string text = "engine " + std::to_string(index) + " notes [";
  for (int64_t i = 0; i < count; ++i) {
    if (i > 0) text += ' ';
    text += std::to_string(static_cast<int>(notes[static_cast<size_t>(i)]));
    if (notes[static_cast<size_t>(i)] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) *nondeterministic = true;
  }
  return text + "]";
}

// Builds the plan of `key` (throws Unsupported when cuDNN has no engine for it).
void build_plan(const char* op, DeviceCudnn& dc, const Key& key, Plan& plan) {
  plan.graph = std::make_unique<Graph>(op);
  Graph& g = *plan.graph;
  if (key.backward) build_backward(g, key);
  else build_forward(g, key);

  D graph = g.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(g.ops.size()),
        g.ops.data());
  g.set(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &dc.handle);
  g.finalize(graph, "operation graph");

  D heur = g.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  g.set_desc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  g.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  g.finalize(heur, "engine heuristics");
  int64_t count = 0;
  check(op, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                     nullptr),
        "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS count)");
  if (count <= 0) throw Unsupported{"the heuristics returned no engine configuration"};
  std::vector<D> configs;
  for (int64_t i = 0; i < count; ++i) configs.push_back(g.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
  int64_t got = 0;
  check(op, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                     configs.data()),
        "cudnnBackendGetAttribute(ENGINEHEUR_RESULTS)");
  std::string tried;
  for (int64_t i = 0; i < got; ++i) {
    D p = g.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    g.set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &dc.handle);
    g.set_desc(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[static_cast<size_t>(i)]);
    const cudnnStatus_t status = cudnnBackendFinalize(p);
    if (status != CUDNN_STATUS_SUCCESS) {
      tried += std::string(" [config ") + std::to_string(i) + ": " + cudnnGetErrorString(status) + " " +
               last_cudnn_message() + "]";
      continue;
    }
    int64_t n = 0;
    check(op, cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                       &plan.workspace),
          "cudnnBackendGetAttribute(EXECUTION_PLAN_WORKSPACE_SIZE)");
    bool nondeterministic = false;
    plan.info = std::string(key.backward ? "backward" : "forward") + (key.deterministic ? "" : " (nondeterministic)") +
                (key.dense ? " dense" : "") +
                " B " + std::to_string(key.b) + " S " + std::to_string(key.s) + " Hq " + std::to_string(key.hq) +
                " Hkv " + std::to_string(key.hkv) + " D " + std::to_string(key.d) + " window " +
                std::to_string(key.window) +
                (key.groups > 1 ? " in " + std::to_string(key.groups) + " head groups" : std::string()) + ": config " + std::to_string(i) + " of " + std::to_string(got) + ", " +
                engine_info(op, configs[static_cast<size_t>(i)], &nondeterministic) + ", workspace " +
                std::to_string(plan.workspace) + " B" + (nondeterministic ? ", NONDETERMINISTIC note" : "");
    plan.plan = p;
    plan.ok = true;
    return;
  }
  throw Unsupported{"no engine configuration finalized:" + tried};
}

// Plans whose workspace exceeds this fall back to our kernels: the deterministic backward's grows with
// B * Hq * S^2 (2 bytes each: 1 GiB at 4 x 2048 x 28 heads, 60 GiB at one 32k sequence). Default 8 GiB.
int64_t max_workspace_bytes(const char* op) {
  const char* e = std::getenv("SWIFT_CUDNN_ATTENTION_MAX_WORKSPACE_MB");
  if (e == nullptr || *e == 0) return int64_t{8192} << 20;
  char* end = nullptr;
  const long long mb = std::strtoll(e, &end, 10);
  if (end == e || *end != 0 || mb < 0 || mb > (1LL << 30)) {
    fail("op {}: SWIFT_CUDNN_ATTENTION_MAX_WORKSPACE_MB='{}' is not a number of MiB in [0, 2^30]", op, e);
  }
  return static_cast<int64_t>(mb) << 20;
}

// The plan of `key`, built on first use; nullptr when cuDNN cannot run it (reason in note_fallback).
std::shared_ptr<Plan> plan_for(const char* op, DeviceCudnn& dc, const Key& key) {
  std::lock_guard<std::mutex> lock(dc.mutex);
  auto it = dc.plans.find(key);
  if (it == dc.plans.end()) {
    auto plan = std::make_shared<Plan>();
    try {
      build_plan(op, dc, key, *plan);
      std::lock_guard<std::mutex> text_lock(g_text_mutex);
      g_plan_info += plan->info + "\n";
      const int64_t cap = max_workspace_bytes(op);
      if (plan->workspace > cap) {
        throw Unsupported{"cuDNN's workspace of " + std::to_string(plan->workspace >> 20) +
                          " MiB is above SWIFT_CUDNN_ATTENTION_MAX_WORKSPACE_MB=" + std::to_string(cap >> 20)};
      }
    } catch (const Unsupported& u) {
      plan->ok = false;
      plan->why = u.why;
      plan->graph.reset();
      if (std::getenv("SWIFT_ATTENTION_DEBUG") != nullptr) {
        std::fprintf(stderr, "swift: op %s: cuDNN cannot run this shape, using flash2: %s\n", op, u.why.c_str());
      }
    }
    it = dc.plans.emplace(key, std::move(plan)).first;
  }
  if (!it->second->ok) {
    note_fallback(std::string(op) + ": " + it->second->why);
    return nullptr;
  }
  return it->second;
}

// The common admission checks; returns the device's cuDNN state or nullptr (reason noted).
DeviceCudnn* admit(const char* op, const AttentionShape& s, const Tensor& q) {
  if (q.dtype() != DType::BF16 && q.dtype() != DType::F16) {
    note_fallback(std::string(op) + ": activations are " + dtype_name(q.dtype()) + " (cuDNN path: BF16, F16)");
    return nullptr;
  }
  if (flash2_forced(op)) {
    note_fallback(std::string(op) + ": SWIFT_ATTENTION=flash2");
    return nullptr;
  }
  if (s.head_dim % 8 != 0 || s.head_dim > 256 || s.batch <= 0 || s.tokens <= 0 || s.max_seqlen <= 0) {
    note_fallback(std::string(op) + ": head dim " + std::to_string(s.head_dim) + " (cuDNN: multiple of 8, <= 256)");
    return nullptr;
  }
  if (s.tokens * std::max(s.hq, s.hkv) * s.head_dim > INT32_MAX) {
    note_fallback(std::string(op) + ": element offsets beyond I32");
    return nullptr;
  }
  DeviceCudnn& dc = device_cudnn(op, q.device().index);
  if (dc.sm < 90) {
    note_fallback(std::string(op) + ": compute capability " + std::to_string(dc.sm) + " (cuDNN path: sm_90+)");
    return nullptr;
  }
  return &dc;
}

// Plan-count buckets (each new plan costs 0.1 - 0.9 s to build): the batch padded with empty sequences to a power
// of two; the longest length rounded up to 64 up to 256, to 256 beyond (padding rows and columns are masked, and
// the engine skips tiles past each sequence's length).
int32_t padded_batch(int32_t b) {
  int32_t p = 1;
  while (p < b) p *= 2;
  return p;
}
int32_t padded_length(int32_t s) { return s <= 256 ? (s + 63) / 64 * 64 : (s + 255) / 256 * 256; }

Key key_of(bool backward, const AttentionShape& s, const Tensor& q, bool deterministic) {
  Key key{};
  key.backward = backward;
  key.dtype = q.dtype() == DType::BF16 ? 1 : 2;
  // Every sequence exactly max_seqlen long (their sum is tokens, none is longer) and max_seqlen one of the buckets:
  // the dense graph (exact B, no padding). Buckets only, so that a batch of one sequence of any length (always
  // "every sequence equal") does not build a plan per length.
  static EnvSwitch dense_graphs("SWIFT_CUDNN_ATTENTION_DENSE", true);  // =0: ragged graphs only (A/B runs)
  key.dense = dense_graphs.on() && s.tokens == int64_t{s.batch} * s.max_seqlen &&
              padded_length(s.max_seqlen) == s.max_seqlen;
  key.b = key.dense ? s.batch : padded_batch(s.batch);
  key.s = padded_length(s.max_seqlen);
  key.hq = s.hq;
  key.hkv = s.hkv;
  key.d = s.head_dim;
  key.window = s.window;
  key.deterministic = deterministic;
  key.device = q.device().index;
  return key;
}

void check_launch(const char* op, cudaError_t status) {
  if (status != cudaSuccess) fail("op {}: CUDA kernel launch failed: {}", op, cudaGetErrorString(status));
}

Tensor workspace(int64_t numel, DType dtype, const Tensor& like) {
  return Tensor::empty({std::max<int64_t>(numel, 1)}, dtype, like.device(), MemoryCategory::Workspace);
}

// Lengths (B) and ragged element offsets of Q-like (B+1) and KV-like (B+1) tensors, in one I32 buffer.
struct SeqInfo {
  Tensor buf;
  int32_t *seqlen = nullptr, *off_q = nullptr, *off_kv = nullptr;
};
SeqInfo seq_info(const char* op, const AttentionShape& s, const Key& key, const Tensor& cu_seqlens, cudaStream_t st) {
  SeqInfo info;
  info.buf = workspace(3 * static_cast<int64_t>(key.b) + 2, DType::I32, cu_seqlens);
  info.seqlen = info.buf.data<int32_t>();
  info.off_q = info.seqlen + key.b;
  info.off_kv = info.off_q + key.b + 1;
  check_launch(op, launch_cudnn_seqinfo(cu_seqlens.data<int32_t>(), s.batch, key.b, s.hq, s.hkv, s.head_dim,
                                        info.seqlen, info.off_q, info.off_kv, st));
  return info;
}

void execute(const char* op, DeviceCudnn& dc, const Plan& plan, const std::vector<std::pair<int64_t, void*>>& pack,
             const Tensor& like) {
  std::vector<int64_t> uids;
  std::vector<void*> ptrs;
  for (const auto& [uid, ptr] : pack) {
    uids.push_back(uid);
    ptrs.push_back(ptr);
  }
  Tensor ws = workspace((plan.workspace + 3) / 4, DType::F32, like);
  void* ws_ptr = ws.raw();
  Desc vp(op, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const auto n = static_cast<int64_t>(uids.size());
  check(op, cudnnBackendSetAttribute(vp.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data()),
        "cudnnBackendSetAttribute(VARIANT_PACK_UNIQUE_IDS)");
  check(op, cudnnBackendSetAttribute(vp.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n,
                                     ptrs.data()),
        "cudnnBackendSetAttribute(VARIANT_PACK_DATA_POINTERS)");
  check(op, cudnnBackendSetAttribute(vp.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws_ptr),
        "cudnnBackendSetAttribute(VARIANT_PACK_WORKSPACE)");
  check(op, cudnnBackendFinalize(vp.get()), "cudnnBackendFinalize(variant pack)");
  check(op, cudnnBackendExecute(dc.handle, plan.plan, vp.get()), "cudnnBackendExecute");
}

// The deterministic backward's workspace grows with B * Hq * S^2 (its dP tiles): it runs over groups of whole kv
// heads (each with its query heads), the fewest groups whose estimate (2 bytes per score) fits the budget (at most
// Hkv groups, one kv head each). Every group is its own (B, Hq / G, S, D) problem over the same rows: the same results
// as one launch, with 1/G of the workspace. The budget:
//  - SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB when set: that many MiB, whatever the memory state (0: the most groups);
//  - else the room under this process's CUDA high-water mark (core/memory.h: peak - in use, what the step has
//    already reached and nothing more), at least kMinBackwardWorkspace and at most 8 GiB (the cap above which a plan
//    falls back to our kernels). The top layers' backward runs right after the forward's peak and splits; lower
//    layers, once the activations above them are freed, run in one launch. Measured (docs/PERFORMANCE.md run 9, 7B
//    heads, one 8k sequence): 4 groups take 4.19 ms per layer against 3.35 for one launch and save 2.2 GiB at the
//    peak, which a fixed budget would pay in every layer.
// The counters add up every CUDA device of the process: one process drives one device in every launcher here (with
// more, the room is the sum of theirs and splits happen less). Same configuration, same counters: same groups.
constexpr int64_t kMinBackwardWorkspace = int64_t{256} << 20;
constexpr int64_t kMaxBackwardWorkspace = int64_t{8192} << 20;

int64_t backward_workspace_budget(const char* op) {
  if (const char* e = std::getenv("SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB"); e != nullptr && *e != 0) {
    char* end = nullptr;
    const long long mb = std::strtoll(e, &end, 10);
    if (end == e || *end != 0 || mb < 0 || mb > (1LL << 30)) {
      fail("op {}: SWIFT_CUDNN_ATTENTION_BWD_WORKSPACE_MB='{}' is not a number of MiB in [0, 2^30]", op, e);
    }
    return static_cast<int64_t>(mb) << 20;
  }
  const MemoryStats m = memory_stats(static_cast<int>(DeviceType::CUDA));
  return std::clamp(m.total_peak - m.total_current, kMinBackwardWorkspace, kMaxBackwardWorkspace);
}

int32_t backward_groups(const char* op, const Key& key) {
  if (!key.deterministic) return 1;  // the atomic variant keeps an fp32 dQ accumulator, no dP workspace
  const int64_t budget = backward_workspace_budget(op);
  for (int32_t g = 1; g <= key.hkv; ++g) {
    if (key.hkv % g != 0) continue;
    const int64_t estimate = 2 * int64_t{key.b} * (key.hq / g) * int64_t{key.s} * key.s;
    if (estimate <= budget) return g;
  }
  return key.hkv;
}

std::atomic<bool> g_force_deterministic_backward{false};

bool deterministic_backward(const char* op) {
  if (g_force_deterministic_backward.load()) return true;
  const char* e = std::getenv("SWIFT_CUDNN_ATTENTION_BWD");
  if (e == nullptr || *e == 0 || std::strcmp(e, "deterministic") == 0) return true;
  if (std::strcmp(e, "nondeterministic") == 0) return false;
  fail("op {}: SWIFT_CUDNN_ATTENTION_BWD='{}' is not known (use deterministic or nondeterministic)", op, e);
}

}  // namespace

void force_deterministic_attention_backward(bool on) { g_force_deterministic_backward.store(on); }

bool try_cudnn_attention_forward(const AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& cu_seqlens, Tensor& out, Tensor& lse) {
  const char* op = "attention";
  DeviceCudnn* dc = admit(op, s, q);
  if (dc == nullptr) return false;
  const Key key = key_of(false, s, q, true);
  const std::shared_ptr<Plan> plan = plan_for(op, *dc, key);
  if (plan == nullptr) return false;
  const cudaStream_t st = stream(q.device().index);
  Tensor stats = workspace(static_cast<int64_t>(key.b) * key.hq * key.s, DType::F32, q);
  float scale = s.scale, neg_inf = -INFINITY, window = static_cast<float>(s.window);
  std::vector<std::pair<int64_t, void*>> pack = {{kQ, q.raw()},         {kK, k.raw()},    {kV, v.raw()},
                                                 {kO, out.raw()},       {kStats, stats.raw()},
                                                 {kScale, &scale},      {kNegInf, &neg_inf}};
  SeqInfo info;
  if (!key.dense) {
    info = seq_info(op, s, key, cu_seqlens, st);
    pack.insert(pack.end(), {{kSeqQ, info.seqlen}, {kSeqKv, info.seqlen}, {kOffQ, info.off_q}, {kOffK, info.off_kv},
                             {kOffV, info.off_kv}, {kOffO, info.off_q}});
  }
  if (key.window > 0) pack.emplace_back(kWindow, &window);
  execute(op, *dc, *plan, pack, q);
  if (lse.defined()) {
    check_launch(op, launch_cudnn_stats_to_lse(stats.data<float>(), cu_seqlens.data<int32_t>(), s.batch, s.hq, key.s,
                                               s.tokens, lse.data<float>(), st));
  }
  ++g_counts[0];
  if (key.dense) ++g_counts[5];
  return true;
}

bool try_cudnn_attention_backward(const AttentionShape& s, const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& cu_seqlens,
                                  Tensor& dq, Tensor& dk, Tensor& dv) {
  const char* op = "attention_backward";
  DeviceCudnn* dc = admit(op, s, q);
  if (dc == nullptr) return false;
  Key key = key_of(true, s, q, deterministic_backward(op));
  key.groups = backward_groups(op, key);
  const std::shared_ptr<Plan> plan = plan_for(op, *dc, key);
  if (plan == nullptr) return false;
  const cudaStream_t st = stream(q.device().index);
  SeqInfo info;
  if (!key.dense) info = seq_info(op, s, key, cu_seqlens, st);
  // The lengths and ragged offsets of a ragged graph (whole rows: shared by every head group).
  const std::vector<std::pair<int64_t, void*>> ragged_pack =
      key.dense ? std::vector<std::pair<int64_t, void*>>{}
                : std::vector<std::pair<int64_t, void*>>{
                      {kSeqQ, info.seqlen},  {kSeqKv, info.seqlen}, {kOffQ, info.off_q},   {kOffK, info.off_kv},
                      {kOffV, info.off_kv},  {kOffO, info.off_q},   {kOffDO, info.off_q},  {kOffDQ, info.off_q},
                      {kOffDK, info.off_kv}, {kOffDV, info.off_kv}};
  const int64_t rows = static_cast<int64_t>(key.b) * key.hq * key.s;
  Tensor stats = workspace(rows, DType::F32, q);
  Tensor softmax_sum = workspace(rows, DType::F32, q);
  check_launch(op, launch_cudnn_lse_to_stats(lse.data<float>(), cu_seqlens.data<int32_t>(), s.batch, key.b, s.hq,
                                             key.s, s.tokens, stats.data<float>(), st));
  float scale = s.scale, neg_inf = -INFINITY, one = 1.0f, window = static_cast<float>(s.window);
  // Group g's block of heads: its first query head's column in every (T, Hq, D) row, its first kv head's in the
  // (T, Hkv, D) rows, its first head's rows of the padded statistics; the ragged offsets (whole rows) are shared.
  const int64_t hq_g = key.hq / key.groups, hkv_g = key.hkv / key.groups, elem = 2;
  auto at = [](const Tensor& t, int64_t bytes) { return static_cast<void*>(static_cast<char*>(t.raw()) + bytes); };
  if (key.groups > 1) {
    for (int32_t g = 0; g < key.groups; ++g) {
      const int64_t qb = g * hq_g * key.d * elem, kb = g * hkv_g * key.d * elem, sb = g * hq_g * key.s * 4;
      std::vector<std::pair<int64_t, void*>> pack = {
          {kQ, at(q, qb)},         {kK, at(k, kb)},          {kV, at(v, kb)},          {kO, at(out, qb)},
          {kDO, at(dout, qb)},     {kDQ, at(dq, qb)},        {kDK, at(dk, kb)},        {kDV, at(dv, kb)},
          {kStats, at(stats, sb)}, {kSoftmaxSum, at(softmax_sum, sb)},                 {kScale, &scale},
          {kNegInf, &neg_inf},     {kOne, &one}};
      pack.insert(pack.end(), ragged_pack.begin(), ragged_pack.end());
      if (key.window > 0) pack.emplace_back(kWindow, &window);
      execute(op, *dc, *plan, pack, q);
    }
    ++g_counts[1];
    g_counts[4] += key.groups;
    if (key.dense) ++g_counts[5];
    return true;
  }
  std::vector<std::pair<int64_t, void*>> pack = {
      {kQ, q.raw()},          {kK, k.raw()},          {kV, v.raw()},         {kO, out.raw()},
      {kDO, dout.raw()},      {kDQ, dq.raw()},        {kDK, dk.raw()},       {kDV, dv.raw()},
      {kStats, stats.raw()},  {kSoftmaxSum, softmax_sum.raw()},               {kScale, &scale},
      {kNegInf, &neg_inf},    {kOne, &one}};
  pack.insert(pack.end(), ragged_pack.begin(), ragged_pack.end());
  if (key.window > 0) pack.emplace_back(kWindow, &window);
  Tensor accum;
  if (!key.deterministic) {
    accum = workspace(rows * key.d, DType::F32, q);
    const cudaError_t status = cudaMemsetAsync(accum.raw(), 0, static_cast<size_t>(rows * key.d) * 4, st);
    if (status != cudaSuccess) {
      fail("op {}: cudaMemsetAsync of the dQ accumulator failed: {}", op, cudaGetErrorString(status));
    }
    pack.emplace_back(kDQAccum, accum.raw());
  }
  execute(op, *dc, *plan, pack, q);
  ++g_counts[1];
  ++g_counts[4];
  if (key.dense) ++g_counts[5];
  return true;
}

#endif  // SWIFT_WITH_CUDNN

}  // namespace swift::ops::cuda
