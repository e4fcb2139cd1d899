// core/tensor.cpp — Storage allocation through backends, Tensor views and copies, memory accounting.
#include "core/tensor.h"

#include <atomic>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

namespace swift {

// ---- errors -------------------------------------------------------------------------------------
namespace detail {
void check_failed(const char* condition, const char* file, int line, const std::string& message) {
  (void)condition;
  (void)file;
  (void)line;
#ifndef NDEBUG
  throw Error(fmt::format("{} [check '{}' at {}:{}]", message, condition, file, line));
#else
  throw Error(message);
#endif
}
}  // namespace detail

// ---- memory accounting --------------------------------------------------------------------------
namespace {
constexpr int kCategories = static_cast<int>(MemoryCategory::Count);
struct Counters {
  std::atomic<int64_t> current[kCategories] = {};
  std::atomic<int64_t> peak[kCategories] = {};
  std::atomic<int64_t> total_current{0};
  std::atomic<int64_t> total_peak{0};
  std::atomic<int64_t> at_total_peak[kCategories] = {};  // each category when total_peak was last raised
};
Counters g_counters[2];

// Raises `peak` to `value` if larger; returns whether it did.
bool raise_peak(std::atomic<int64_t>& peak, int64_t value) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen) {
    if (peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) return true;
  }
  return false;
}

// The categories' current bytes, copied when the total peak rises (relaxed: allocations from several threads at
// once may mix two moments; the training loop allocates from one).
void snapshot_at_total_peak(Counters& c) {
  for (int i = 0; i < kCategories; ++i) c.at_total_peak[i].store(c.current[i].load(std::memory_order_relaxed));
}
}  // namespace

const char* memory_category_name(MemoryCategory category) {
  static const char* names[] = {"weights", "gradients", "optimizer", "activations", "workspace", "other"};
  return names[static_cast<int>(category)];
}

void memory_record_alloc(int device_type, MemoryCategory category, size_t bytes) {
  Counters& c = g_counters[device_type];
  int i = static_cast<int>(category);
  raise_peak(c.peak[i], c.current[i].fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes));
  if (raise_peak(c.total_peak, c.total_current.fetch_add(static_cast<int64_t>(bytes)) + static_cast<int64_t>(bytes))) {
    snapshot_at_total_peak(c);
  }
}

void memory_record_free(int device_type, MemoryCategory category, size_t bytes) {
  Counters& c = g_counters[device_type];
  c.current[static_cast<int>(category)].fetch_sub(static_cast<int64_t>(bytes));
  c.total_current.fetch_sub(static_cast<int64_t>(bytes));
}

MemoryStats memory_stats(int device_type) {
  MemoryStats stats;
  Counters& c = g_counters[device_type];
  for (int i = 0; i < kCategories; ++i) {
    stats.current[i] = c.current[i].load();
    stats.peak[i] = c.peak[i].load();
    stats.at_total_peak[i] = c.at_total_peak[i].load();
  }
  stats.total_current = c.total_current.load();
  stats.total_peak = c.total_peak.load();
  return stats;
}

void memory_reset_peaks(int device_type) {
  Counters& c = g_counters[device_type];
  for (int i = 0; i < kCategories; ++i) c.peak[i].store(c.current[i].load());
  c.total_peak.store(c.total_current.load());
  snapshot_at_total_peak(c);
}

std::string memory_report(int device_type) {
  MemoryStats s = memory_stats(device_type);
  std::string out;
  for (int i = 0; i < kCategories; ++i) {
    out += fmt::format("{:>12}: {:10.1f} MiB (peak {:10.1f} MiB, {:10.1f} MiB at the total's peak)\n",
                       memory_category_name(static_cast<MemoryCategory>(i)), s.current[i] / 1048576.0,
                       s.peak[i] / 1048576.0, s.at_total_peak[i] / 1048576.0);
  }
  out += fmt::format("{:>12}: {:10.1f} MiB (peak {:10.1f} MiB)\n", "total", s.total_current / 1048576.0,
                     s.total_peak / 1048576.0);
  return out;
}

// ---- devices --------------------------------------------------------------------------------------
std::string Device::str() const { return is_cpu() ? "cpu" : fmt::format("cuda:{}", index); }

namespace {
DeviceBackend* g_backends[2] = {nullptr, nullptr};
}

void register_device_backend(DeviceType type, DeviceBackend* backend) { g_backends[static_cast<int>(type)] = backend; }

bool device_backend_available(DeviceType type) { return g_backends[static_cast<int>(type)] != nullptr; }

DeviceBackend* device_backend(DeviceType type) {
  DeviceBackend* backend = g_backends[static_cast<int>(type)];
  SWIFT_CHECK(backend != nullptr, "device {}: this build of swift.cpp has no {} backend (rebuild with CUDA found)",
              Device{type, 0}.str(), type == DeviceType::CUDA ? "CUDA" : "CPU");
  return backend;
}

// ---- storage --------------------------------------------------------------------------------------
std::shared_ptr<Storage> Storage::allocate(size_t bytes, Device device, MemoryCategory category) {
  std::shared_ptr<Storage> storage(new Storage());
  storage->bytes_ = bytes;
  storage->device_ = device;
  storage->owned_ = true;
  storage->category_ = category;
  size_t request = bytes == 0 ? 64 : bytes;
  if (device.is_cpu()) {
    size_t rounded = (request + 63) / 64 * 64;
    storage->data_ = std::aligned_alloc(64, rounded);
    SWIFT_CHECK(storage->data_ != nullptr, "out of CPU memory allocating {:.1f} MiB of {}", bytes / 1048576.0,
                memory_category_name(category));
  } else {
    storage->data_ = device_backend(device.type)->allocate(request, device.index);
  }
  memory_record_alloc(static_cast<int>(device.type), category, bytes);
  return storage;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t bytes, Device device, std::shared_ptr<void> keepalive,
                                       bool writable) {
  std::shared_ptr<Storage> storage(new Storage());
  storage->writable_ = writable;
  storage->data_ = data;
  storage->bytes_ = bytes;
  storage->device_ = device;
  storage->owned_ = false;
  storage->keepalive_ = std::move(keepalive);
  return storage;
}

std::shared_ptr<Storage> Storage::wrap_host_mapped(void* data, size_t bytes, Device reader,
                                                   std::shared_ptr<void> keepalive) {
  SWIFT_CHECK(reader.is_cuda(), "wrap_host_mapped: the reading device must be a CUDA device, got {}", reader.str());
  std::shared_ptr<Storage> storage = wrap(data, bytes, Device::cpu(), std::move(keepalive), /*writable=*/true);
  storage->mapped_for_ = reader;
  return storage;
}

Storage::~Storage() {
  if (!owned_ || data_ == nullptr) return;
  memory_record_free(static_cast<int>(device_.type), category_, bytes_);
  if (device_.is_cpu()) {
    std::free(data_);
  } else if (DeviceBackend* backend = g_backends[static_cast<int>(device_.type)]) {
    backend->release(data_, bytes_ == 0 ? 64 : bytes_, device_.index);
  }
}

// ---- shapes ---------------------------------------------------------------------------------------
std::string shape_str(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- tensor ---------------------------------------------------------------------------------------
Tensor::Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype)
    : storage_(std::move(storage)), offset_(byte_offset), shape_(std::move(shape)), dtype_(dtype) {
  for (int64_t d : shape_) SWIFT_CHECK(d >= 0, "tensor: negative dimension in shape {}", shape_str(shape_));
  SWIFT_CHECK(offset_ + nbytes() <= storage_->bytes(), "tensor {}: view of {} bytes at offset {} exceeds storage of {}",
              str(), nbytes(), offset_, storage_->bytes());
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device, MemoryCategory category) {
  size_t bytes = dtype_bytes(dtype, shape_numel(shape));
  return Tensor(Storage::allocate(bytes, device, category), 0, shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device, MemoryCategory category) {
  Tensor t = empty(shape, dtype, device, category);
  t.zero_();
  return t;
}

Tensor Tensor::from_f32(const Shape& shape, const std::vector<float>& values) {
  SWIFT_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()), "from_f32: {} values for shape {}",
              values.size(), shape_str(shape));
  Tensor t = empty(shape, DType::F32);
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(float));
  return t;
}

Tensor Tensor::from_i32(const Shape& shape, const std::vector<int32_t>& values) {
  SWIFT_CHECK(shape_numel(shape) == static_cast<int64_t>(values.size()), "from_i32: {} values for shape {}",
              values.size(), shape_str(shape));
  Tensor t = empty(shape, DType::I32);
  std::memcpy(t.raw(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

int64_t Tensor::size(int64_t axis) const {
  int64_t n = dim();
  if (axis < 0) axis += n;
  SWIFT_CHECK(axis >= 0 && axis < n, "tensor {}: axis {} out of range", str(), axis);
  return shape_[static_cast<size_t>(axis)];
}

Tensor Tensor::view(const Shape& shape) const {
  Shape resolved = shape;
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < resolved.size(); ++i) {
    if (resolved[i] == -1) {
      SWIFT_CHECK(infer < 0, "view: more than one -1 in {}", shape_str(shape));
      infer = static_cast<int>(i);
    } else {
      known *= resolved[i];
    }
  }
  if (infer >= 0) {
    SWIFT_CHECK(known > 0 && numel() % known == 0, "view: cannot view {} as {}", str(), shape_str(shape));
    resolved[static_cast<size_t>(infer)] = numel() / known;
  }
  SWIFT_CHECK(shape_numel(resolved) == numel(), "view: cannot view {} as {}", str(), shape_str(shape));
  return Tensor(storage_, offset_, resolved, dtype_);
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  SWIFT_CHECK(dim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "slice_rows: [{}, {}) of {}", begin, end,
              str());
  Shape shape = shape_;
  shape[0] = end - begin;
  int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  return Tensor(storage_, offset_ + dtype_bytes(dtype_, begin * row), shape, dtype_);
}

Tensor Tensor::clone(MemoryCategory category) const { return to(device(), category); }

Tensor Tensor::to(Device device, MemoryCategory category) const {
  Tensor out = empty(shape_, dtype_, device, category);
  out.copy_from(*this);
  return out;
}

void Tensor::check_writable(const char* op) const {
  SWIFT_CHECK(writable(), "{}: tensor {} views read-only memory (a mapped weight file); clone() it before writing",
              op, str());
}

void Tensor::copy_from(const Tensor& src) {
  check_writable("copy_from");
  SWIFT_CHECK(src.numel() == numel() && src.dtype() == dtype_, "copy_from: {} into {}", src.str(), str());
  size_t bytes = nbytes();
  if (bytes == 0) return;
  if (device().is_cpu() && src.device().is_cpu()) {
    std::memmove(raw(), src.raw(), bytes);
  } else {
    DeviceType type = device().is_cpu() ? src.device().type : device().type;
    device_backend(type)->copy(raw(), device(), src.raw(), src.device(), bytes);
  }
}

void Tensor::zero_() {
  if (nbytes() == 0) return;
  check_writable("zero_");
  if (device().is_cpu()) {
    std::memset(raw(), 0, nbytes());
  } else {
    device_backend(device().type)->memset_zero(raw(), nbytes(), device().index);
  }
}

Tensor Tensor::to_dtype(DType dtype, MemoryCategory category) const {
  SWIFT_CHECK(device().is_cpu(), "to_dtype: {} must be on the CPU", str());
  SWIFT_CHECK(dtype_info(dtype_).is_float && dtype_info(dtype).is_float, "to_dtype: {} to {} is not a float conversion",
              str(), dtype_name(dtype));
  Tensor out = empty(shape_, dtype, Device::cpu(), category);
  int64_t n = numel();
  auto load = [&](int64_t i) -> float {
    switch (dtype_) {
      case DType::F32: return static_cast<const float*>(raw())[i];
      case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(raw())[i]);
      default: return f16_to_f32(static_cast<const uint16_t*>(raw())[i]);
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    float v = load(i);
    switch (dtype) {
      case DType::F32: static_cast<float*>(out.raw())[i] = v; break;
      case DType::BF16: static_cast<uint16_t*>(out.raw())[i] = f32_to_bf16(v); break;
      default: static_cast<uint16_t*>(out.raw())[i] = f32_to_f16(v); break;
    }
  }
  return out;
}

double Tensor::item(int64_t index) const {
  SWIFT_CHECK(device().is_cpu(), "item: {} must be on the CPU", str());
  SWIFT_CHECK(index >= 0 && index < numel(), "item: index {} out of range for {}", index, str());
  switch (dtype_) {
    case DType::F32: return static_cast<const float*>(raw())[index];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(raw())[index]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(raw())[index]);
    case DType::I32: return static_cast<const int32_t*>(raw())[index];
    case DType::I64: return static_cast<double>(static_cast<const int64_t*>(raw())[index]);
    case DType::U8: return static_cast<const uint8_t*>(raw())[index];
    default: fail("item: dtype {} has no scalar elements", dtype_name(dtype_));
  }
}

std::string Tensor::str() const {
  if (!defined()) return "<undefined tensor>";
  return fmt::format("{}{} {}", dtype_name(dtype_), shape_str(shape_), device().str());
}

}  // namespace swift
