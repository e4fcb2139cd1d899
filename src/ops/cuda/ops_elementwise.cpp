// ops/cuda/ops_elementwise.cpp — the C++ side of the CUDA element-wise ops: cast, add, swiglu (+ backward),
// embedding (+ backward), rmsnorm (+ backward), rope (+ backward), dropout, AdamW, gradient norm and clipping.
//
// Invariants:
//  - Arguments were validated by ops/op_checks (shapes, dtypes, one device, aliasing); this file unpacks tensors
//    into raw pointers and dtype codes, calls the launchers of kernels_elementwise.cuh on cuda::stream(device),
//    and turns every CUDA error into swift::Error naming the op.
//  - Nothing here synchronises except grad_norm and clip_grad_norm, which must return a host value: they also
//    read the device error record (token ids outside the vocabulary seen by embedding / embedding_backward,
//    negative rope positions) and throw naming the op that found it. check_device_errors() does the same on
//    demand (the model / trainer may call it at any synchronising point).
//  - Temporary device memory comes from one scratch buffer per device (MemoryCategory::Workspace), grown on
//    demand and never shrunk; a lease holds the device's mutex while its op enqueues, and users are ordered by
//    the single stream, so a later op cannot overwrite scratch that an earlier kernel still reads. Growing
//    synchronises the stream before freeing the old buffer.
#include "ops/cuda/cuda_ops.h"
#include "ops/env_switch.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <mutex>
#include <vector>

#include "ops/cuda/kernels.cuh"
#include "ops/cuda/kernels_elementwise.cuh"
#include "ops/op_checks.h"
#include "ops/philox.h"

namespace swift::ops::cuda {

namespace {

void check_launch(const char* op, cudaError_t status) {
  if (status != cudaSuccess) fail("op {}: CUDA kernel launch failed: {}", op, cudaGetErrorString(status));
}

int code(DType dtype) { return static_cast<int>(dtype); }  // kernels_elementwise.cuh's dtype codes
cudaStream_t stream_of(const Tensor& t) { return stream(t.device().index); }

// ---- per-device scratch ------------------------------------------------------------------------------------------
struct DeviceScratch {
  std::mutex mutex;
  std::shared_ptr<Storage> storage;
};

DeviceScratch& scratch_of(const char* op, int device) {
  // Never destroyed: freeing device memory during static destruction may run after the CUDA runtime is gone.
  static auto* scratches = new std::array<DeviceScratch, 64>();
  if (device < 0 || device >= static_cast<int>(scratches->size())) {
    fail("op {}: device index {} out of range", op, device);
  }
  return (*scratches)[static_cast<size_t>(device)];
}

class ScratchLease {
 public:
  ScratchLease(const char* op, int device, size_t bytes) : scratch_(scratch_of(op, device)), lock_(scratch_.mutex) {
    bytes = std::max<size_t>(bytes, 256);
    if (!scratch_.storage || scratch_.storage->bytes() < bytes) {
      if (scratch_.storage) {  // earlier kernels may still read the old buffer
        check_launch(op, cudaStreamSynchronize(stream(device)));
        scratch_.storage.reset();
      }
      const size_t grown = std::max(bytes, size_t{1} << 20);
      scratch_.storage = Storage::allocate(grown, Device::cuda(device), MemoryCategory::Workspace);
    }
  }
  void* data() const { return scratch_.storage->data(); }
  size_t bytes() const { return scratch_.storage->bytes(); }

 private:
  DeviceScratch& scratch_;
  std::unique_lock<std::mutex> lock_;
};

size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// ---- multi-tensor chunk tables -----------------------------------------------------------------------------------
std::vector<MultiTensorChunk> chunks_of(size_t count, auto&& pointers_of, auto&& numel_of) {
  std::vector<MultiTensorChunk> chunks;
  for (size_t i = 0; i < count; ++i) {
    const int64_t n = numel_of(i);
    for (int64_t b = 0; b < n; b += kMultiTensorChunk) {
      MultiTensorChunk ch{};
      pointers_of(i, ch.p);
      ch.begin = b;
      ch.end = std::min(n, b + kMultiTensorChunk);
      chunks.push_back(ch);
    }
  }
  return chunks;
}

std::vector<MultiTensorChunk> grad_chunks(std::span<const Tensor> grads) {
  return chunks_of(
      grads.size(), [&](size_t i, float** p) { p[0] = grads[i].data<float>(); },
      [&](size_t i) { return grads[i].numel(); });
}

// Copies the chunk table to the start of the leased scratch (ordered on the stream: earlier readers are done).
MultiTensorChunk* upload_chunks(const char* op, const std::vector<MultiTensorChunk>& chunks, const ScratchLease& lease,
                                cudaStream_t s) {
  auto* device_chunks = static_cast<MultiTensorChunk*>(lease.data());
  // Pageable source: the call returns once the bytes are staged, so `chunks` may be freed afterwards.
  check_launch(op, cudaMemcpyAsync(device_chunks, chunks.data(), chunks.size() * sizeof(MultiTensorChunk),
                                   cudaMemcpyHostToDevice, s));
  return device_chunks;
}

}  // namespace

void check_device_errors(int device_index) {
  DeviceErrorRecord record{};
  int previous = 0;
  cudaError_t status = cudaGetDevice(&previous);
  // The record is a per-device symbol: read it with its device current.
  if (status == cudaSuccess && previous != device_index) status = cudaSetDevice(device_index);
  if (status == cudaSuccess) status = device_error_read_and_clear(&record, stream(device_index));
  if (previous != device_index) cudaSetDevice(previous);
  if (status != cudaSuccess) fail("CUDA: reading the device error record failed: {}", cudaGetErrorString(status));
  switch (record.op) {
    case kDeviceErrorNone: return;
    case kDeviceErrorEmbedding:
      fail("embedding: token id {} at position {} is outside the vocabulary [0, {}) (cuda:{}: found by the kernel, "
           "reported at the next synchronising op; that row of the output was zeroed)",
           record.value, record.position, record.limit, device_index);
    case kDeviceErrorEmbeddingBackward:
      fail("embedding_backward: token id {} at position {} is outside the vocabulary [0, {}) and not the padding id "
           "(cuda:{}: found by the kernel, reported at the next synchronising op; the token was skipped)",
           record.value, record.position, record.limit, device_index);
    case kDeviceErrorRope:
    case kDeviceErrorRopeBackward:
      fail("{}: position {} at token {} is negative (cuda:{}: found by the kernel, reported at the next "
           "synchronising op)",
           record.op == kDeviceErrorRope ? "rope" : "rope_backward", record.value, record.position, device_index);
    default: fail("CUDA: unknown device error record {}", record.op);
  }
}

void cast(const Tensor& src, Tensor& dst) {
  // dtype codes of kernels.cuh are DType's values: F32 = 0, BF16 = 1, F16 = 2.
  check_launch("cast", launch_cast(src.raw(), code(src.dtype()), dst.raw(), code(dst.dtype()), src.numel(),
                                   stream_of(src)));
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_launch("add", launch_add(a.raw(), b.raw(), out.raw(), code(a.dtype()), a.numel(), stream_of(a)));
}

void swiglu(const Tensor& gate, const Tensor& up, Tensor& out) {
  check_launch("swiglu",
               launch_swiglu(gate.raw(), up.raw(), out.raw(), code(gate.dtype()), gate.numel(), stream_of(gate)));
}

void swiglu_backward(const Tensor& dout, const Tensor& gate, const Tensor& up, Tensor& dgate, Tensor& dup) {
  check_launch("swiglu_backward", launch_swiglu_backward(dout.raw(), gate.raw(), up.raw(), dgate.raw(), dup.raw(),
                                                         code(gate.dtype()), gate.numel(), stream_of(gate)));
}

namespace {
// The table's rows as the kernel addresses them: a table mapped for out's device (checked) is host memory, read
// through its device address.
const void* table_rows(const char* op, const Tensor& table) {
  if (!table.device().is_cpu()) return table.raw();
  void* mapped = nullptr;
  check_launch(op, cudaHostGetDevicePointer(&mapped, const_cast<void*>(table.raw()), 0));
  return mapped;
}
}  // namespace

void embedding(const Tensor& table, const Tensor& ids, Tensor& out) {
  check_launch("embedding", launch_embedding(table_rows("embedding", table), code(table.dtype()),
                                             ids.data<int32_t>(), out.raw(), code(out.dtype()), ids.size(0),
                                             table.size(0), table.size(1), -1, stream_of(out)));
}

Tensor host_mapped_copy(const Tensor& t) {
  const Device device = t.device();
  const size_t bytes = t.nbytes();
  void* host = nullptr;
  const cudaError_t status = cudaHostAlloc(&host, bytes == 0 ? 64 : bytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (status != cudaSuccess) {
    fail("host_mapped_copy: cannot allocate {:.1f} MiB of page-locked host memory for {}: {}", bytes / 1048576.0,
         t.str(), cudaGetErrorString(status));
  }
  std::shared_ptr<void> keepalive(host, [](void* p) { cudaFreeHost(p); });
  Tensor out(Storage::wrap_host_mapped(host, bytes, device, keepalive), 0, t.shape(), t.dtype());
  check_launch("host_mapped_copy", cudaStreamSynchronize(stream_of(t)));  // after the work enqueued so far
  if (bytes > 0) check_launch("host_mapped_copy", cudaMemcpy(host, t.raw(), bytes, cudaMemcpyDeviceToHost));
  return out;
}

void embedding_shard(const Tensor& table, const Tensor& ids, int64_t vocab_offset, Tensor& out) {
  check_launch("embedding_shard", launch_embedding(table_rows("embedding_shard", table), code(table.dtype()),
                                                   ids.data<int32_t>(), out.raw(), code(out.dtype()), ids.size(0),
                                                   table.size(0), table.size(1), vocab_offset, stream_of(out)));
}

namespace {
void embedding_backward_any(const char* op, const Tensor& dout, const Tensor& ids, Tensor& dtable, int64_t padding_id,
                            int64_t vocab_offset) {
  const int64_t tokens = ids.size(0), c = dout.size(1);
  if (tokens == 0 || c == 0) return;
  if (tokens > 0x7fffffff) fail("{}: {} tokens exceed the CUDA kernel's limit of 2^31 - 1", op, tokens);
  const size_t bytes = embedding_backward_scratch_bytes(tokens);
  if (bytes == 0) fail("{}: cannot size the sort's scratch for {} tokens", op, tokens);
  ScratchLease lease(op, dtable.device().index, bytes);
  check_launch(op, launch_embedding_backward(dout.raw(), code(dout.dtype()), ids.data<int32_t>(), dtable.data<float>(),
                                             tokens, dtable.size(0), c, padding_id, vocab_offset, lease.data(),
                                             lease.bytes(), stream_of(dtable)));
}
}  // namespace

void embedding_backward(const Tensor& dout, const Tensor& ids, Tensor& dtable, int64_t padding_id) {
  embedding_backward_any("embedding_backward", dout, ids, dtable, padding_id, -1);
}

void embedding_shard_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_offset, Tensor& dtable,
                              int64_t padding_id) {
  embedding_backward_any("embedding_shard_backward", dout, ids, dtable, padding_id, vocab_offset);
}

namespace {
EnvSwitch& rmsnorm_narrow_switch() {
  static EnvSwitch sw("SWIFT_RMSNORM_NARROW", true);
  return sw;
}
EnvSwitch& rope_vec_switch() {
  static EnvSwitch sw("SWIFT_ROPE_VEC", true);
  return sw;
}
EnvSwitch& rope_qkv_switch() {
  static EnvSwitch sw("SWIFT_ROPE_QKV", true);
  return sw;
}
}  // namespace

void set_rmsnorm_narrow(bool on) { rmsnorm_narrow_switch().set(on); }
void set_rope_vectorized(bool on) { rope_vec_switch().set(on); }
void set_rope_qkv_fused(bool on) { rope_qkv_switch().set(on); }

void rmsnorm(const Tensor& x, const Tensor& weight, float eps, Tensor& y, Tensor& rstd) {
  check_launch("rmsnorm", launch_rmsnorm(x.raw(), weight.raw(), code(weight.dtype()), y.raw(),
                                         rstd.defined() ? rstd.data<float>() : nullptr, code(x.dtype()), x.size(0),
                                         x.size(1), eps, rmsnorm_narrow_switch().on(), stream_of(x)));
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const Tensor& rstd, Tensor& dx,
                      Tensor& dweight, bool accumulate_dx) {
  const int64_t n = x.size(0), c = x.size(1);
  if (n == 0 || c == 0 || (!dx.defined() && !dweight.defined())) return;
  const size_t bytes = dweight.defined() ? rmsnorm_backward_scratch_bytes(n, c) : 0;
  std::unique_ptr<ScratchLease> lease;
  if (bytes > 0) lease = std::make_unique<ScratchLease>("rmsnorm_backward", x.device().index, bytes);
  check_launch("rmsnorm_backward",
               launch_rmsnorm_backward(dy.raw(), x.raw(), weight.raw(), code(weight.dtype()), rstd.data<float>(),
                                       dx.defined() ? dx.raw() : nullptr,
                                       dweight.defined() ? dweight.data<float>() : nullptr, code(x.dtype()), n, c,
                                       accumulate_dx, rmsnorm_narrow_switch().on(), lease ? lease->data() : nullptr,
                                       lease ? lease->bytes() : 0,
                                       stream_of(x)));
}

namespace {
RopeParams rope_params(const char* op, const Tensor& x, const RopeFrequencies& freqs, bool backward) {
  const auto half = static_cast<int64_t>(freqs.inv_freq.size());
  if (half > kRopeMaxHalf) {
    fail("{}: head dim {} exceeds the CUDA kernel's limit of {} (x {})", op, 2 * half, 2 * kRopeMaxHalf,
         detail::desc(x));
  }
  RopeParams params{};
  std::copy(freqs.inv_freq.begin(), freqs.inv_freq.end(), params.inv_freq);
  params.attention_scaling = freqs.attention_scaling;
  params.direction = backward ? -1.0f : 1.0f;
  params.error_op = backward ? kDeviceErrorRopeBackward : kDeviceErrorRope;
  return params;
}

void rotate(const char* op, Tensor& x, const Tensor& positions, const RopeFrequencies& freqs, bool backward) {
  const RopeParams params = rope_params(op, x, freqs, backward);
  const int64_t row = x.size(1) * x.size(2);
  check_launch(op, launch_rope(x.raw(), row, x.raw(), row, code(x.dtype()), positions.data<int32_t>(), x.size(0),
                               x.size(1), x.size(2) / 2, params, rope_vec_switch().on(), stream_of(x)));
}
}  // namespace

void rope_columns(const Tensor& x, int64_t x_col, Tensor& y, int64_t y_col, int64_t heads, const Tensor& positions,
                  const RopeFrequencies& freqs, bool backward) {
  const RopeParams params = rope_params("rope_columns", x, freqs, backward);
  const size_t elem = dtype_bytes(x.dtype(), 1);
  check_launch("rope_columns",
               launch_rope(static_cast<const char*>(x.raw()) + elem * static_cast<size_t>(x_col), x.size(1),
                           static_cast<char*>(y.raw()) + elem * static_cast<size_t>(y_col), y.size(1),
                           code(x.dtype()), positions.data<int32_t>(), x.size(0), heads,
                           static_cast<int64_t>(freqs.inv_freq.size()), params, rope_vec_switch().on(),
                           stream_of(x)));
}

bool try_rope_qkv(Tensor& packed, Tensor& q, Tensor& k, Tensor& v, const Tensor& positions,
                  const RopeFrequencies& freqs, bool backward) {
  const int64_t half = static_cast<int64_t>(freqs.inv_freq.size()), d = 2 * half;
  const int64_t nq = q.size(1), nkv = k.size(1);
  const int dtype = code(packed.dtype());
  if (!rope_vec_switch().on() || !rope_qkv_switch().on() ||
      !rope_qkv_fits(packed.raw(), packed.size(1), q.raw(), k.raw(), v.raw(), dtype, nq / d, nkv / d, half)) {
    return false;
  }
  const RopeParams params = rope_params("rope_qkv", packed, freqs, backward);
  check_launch("rope_qkv", launch_rope_qkv(packed.raw(), packed.size(1), q.raw(), k.raw(), v.raw(), dtype,
                                           positions.data<int32_t>(), packed.size(0), nq / d, nkv / d, half, backward,
                                           params, stream_of(packed)));
  return true;
}

void rope(Tensor& x, const Tensor& positions, const RopeFrequencies& freqs) {
  rotate("rope", x, positions, freqs, false);
}

void rope_backward(Tensor& dx, const Tensor& positions, const RopeFrequencies& freqs) {
  rotate("rope_backward", dx, positions, freqs, true);
}

void dropout(const Tensor& x, const Dropout& dropout, Tensor& out) {
  // As ops/cpu/lora.cpp: threshold round(p 2^16) on 16-bit draws, kept values scaled by float(1 / (1 - p)).
  const uint32_t threshold = dropout_threshold(dropout.p);
  const float keep_scale = dropout.p > 0.0f ? 1.0f / (1.0f - dropout.p) : 1.0f;
  // x is seen as (numel / cols, cols), cols its last dimension, for the map (ops.h).
  const int64_t cols = x.dim() > 0 && x.size(x.dim() - 1) > 0 ? x.size(x.dim() - 1) : 1;
  check_launch("dropout", launch_dropout(x.raw(), out.raw(), code(x.dtype()), x.numel(), cols, dropout.seed,
                                         dropout.p == 0.0f ? 0u : threshold, dropout.p == 0.0f ? 1.0f : keep_scale,
                                         dropout.map, stream_of(x)));
}

void swiglu_drawing_mask(const Tensor& gate, const Tensor& up, Tensor& out, const Dropout& mask) {
  check_launch("swiglu_drawing_mask",
               launch_swiglu_keep_bits(gate.raw(), up.raw(), out.raw(), code(gate.dtype()), out.size(0), out.size(1),
                                       mask.seed, dropout_threshold(mask.p), mask.map,
                                       mask.keep_bits.data<uint8_t>(), stream_of(gate)));
}

bool swiglu_drawing_mask_in_one_pass(const Tensor& out, const Dropout& mask) {
  return out.dim() == 2 && swiglu_keep_bits_in_one_pass(out.raw(), out.raw(), out.raw(), code(out.dtype()),
                                                         out.size(1), mask.map);
}

void adamw_step(std::span<const AdamWTensor> tensors, const AdamWConfig& config, int64_t step) {
  if (tensors.empty()) return;
  // Scalars in double as Python forms them, rounded to float where they meet fp32 tensors (as ops/cpu/optimizer.cpp).
  const double bias_correction1 = 1.0 - std::pow(config.beta1, static_cast<double>(step));
  const double bias_correction2 = 1.0 - std::pow(config.beta2, static_cast<double>(step));
  AdamWKernelScalars k{};
  k.step_size_neg = static_cast<float>(-(config.lr / bias_correction1));
  k.bc2_sqrt = static_cast<float>(std::pow(bias_correction2, 0.5));
  k.apply_decay = config.weight_decay != 0.0 ? 1 : 0;
  k.decay = config.weight_decay != 0.0 ? static_cast<float>(1.0 - config.lr * config.weight_decay) : 1.0f;
  k.w1 = static_cast<float>(1.0 - config.beta1);
  k.w1_m1 = k.w1 - 1.0f;
  k.beta2 = static_cast<float>(config.beta2);
  k.w2 = static_cast<float>(1.0 - config.beta2);
  k.eps = static_cast<float>(config.eps);
  k.small_weight = std::fabs(k.w1) < 0.5f ? 1 : 0;
  k.grad_scale = config.grad_scale;
  std::vector<MultiTensorChunk> chunks = chunks_of(
      tensors.size(),
      [&](size_t i, float** p) {
        p[0] = tensors[i].param.data<float>();
        p[1] = tensors[i].grad.data<float>();
        p[2] = tensors[i].exp_avg.data<float>();
        p[3] = tensors[i].exp_avg_sq.data<float>();
      },
      [&](size_t i) { return tensors[i].param.numel(); });
  if (chunks.empty()) return;
  {  // each chunk's product copy (the chunks of tensor i are consecutive and cover it in order)
    size_t c = 0;
    for (const AdamWTensor& t : tensors) {
      for (int64_t b = 0; b < t.param.numel(); b += kMultiTensorChunk, ++c) {
        chunks[c].product = t.product.defined() ? t.product.raw() : nullptr;
        chunks[c].product_dtype = t.product.defined() ? code(t.product.dtype()) : 0;
      }
    }
  }
  const int device = tensors[0].param.device().index;
  const cudaStream_t s = stream(device);
  ScratchLease lease("adamw_step", device, chunks.size() * sizeof(MultiTensorChunk));
  const MultiTensorChunk* device_chunks = upload_chunks("adamw_step", chunks, lease, s);
  check_launch("adamw_step", launch_adamw(device_chunks, static_cast<int64_t>(chunks.size()), k, s));
}

float grad_norm(std::span<const Tensor> grads) {
  if (grads.empty()) return 0.0f;
  const int device = grads[0].device().index;
  const cudaStream_t s = stream(device);
  const std::vector<MultiTensorChunk> chunks = grad_chunks(grads);
  double total = 0.0;
  {
    const size_t table = align256(chunks.size() * sizeof(MultiTensorChunk));
    const size_t partials = align256(chunks.size() * sizeof(double));
    ScratchLease lease("grad_norm", device, table + partials + sizeof(double));
    char* base = static_cast<char*>(lease.data());
    const MultiTensorChunk* device_chunks = chunks.empty() ? nullptr : upload_chunks("grad_norm", chunks, lease, s);
    double* device_partials = reinterpret_cast<double*>(base + table);
    double* device_total = reinterpret_cast<double*>(base + table + partials);
    check_launch("grad_norm", launch_sum_squares(device_chunks, static_cast<int64_t>(chunks.size()), device_partials,
                                                 device_total, s));
    check_launch("grad_norm", cudaMemcpyAsync(&total, device_total, sizeof(double), cudaMemcpyDeviceToHost, s));
    check_launch("grad_norm", cudaStreamSynchronize(s));
  }
  check_device_errors(device);
  return static_cast<float>(std::sqrt(total));
}

namespace {
// One launch over every gradient's chunks: launch(device chunk table, chunk count, stream), the table uploaded to the
// device's scratch first (clip_grad_norm, zero_gradients, scale_gradients).
template <typename Launch>
void over_gradients(const char* op, std::span<const Tensor> grads, Launch&& launch) {
  const std::vector<MultiTensorChunk> chunks = grad_chunks(grads);
  if (chunks.empty()) return;
  const int device = grads[0].device().index;
  const cudaStream_t s = stream(device);
  ScratchLease lease(op, device, chunks.size() * sizeof(MultiTensorChunk));
  const MultiTensorChunk* device_chunks = upload_chunks(op, chunks, lease, s);
  check_launch(op, launch(device_chunks, static_cast<int64_t>(chunks.size()), s));
}
}  // namespace

float clip_grad_norm(std::span<const Tensor> grads, double max_norm) {
  const float total = grad_norm(grads);
  const float coef = clip_coefficient(total, max_norm);
  if (coef == 1.0f) return total;  // g * 1.0f == g exactly: skip the pass
  over_gradients("clip_grad_norm", grads, [&](const MultiTensorChunk* chunks, int64_t count, cudaStream_t s) {
    return launch_scale(chunks, count, coef, s);
  });
  return total;
}

void zero_gradients(std::span<const Tensor> grads) {
  over_gradients("zero_gradients", grads, launch_zero);
}

void scale_gradients(std::span<const Tensor> grads, float factor) {
  over_gradients("scale_gradients", grads, [&](const MultiTensorChunk* chunks, int64_t count, cudaStream_t s) {
    return launch_scale(chunks, count, factor, s);
  });
}

}  // namespace swift::ops::cuda
