// core/tensor.h — Device, Storage and Tensor.
//
// Invariants:
//  - A Tensor is a typed, shaped, row-major contiguous view into a Storage at a byte offset. Views share
//    storage (copying a Tensor never copies data); `clone()` copies.
//  - A Storage lives on one Device. CPU storage is either owned heap memory (64-byte aligned) or memory owned
//    by something else (an mmap of a file) kept alive through `keepalive`. Wrapped memory is read-only unless
//    wrapped as writable: copy_from, zero_ and every op output check `writable()` and throw instead of
//    faulting on a read-only mapping (clone() a loaded weight before updating it in place).
//  - Allocation on a non-CPU device goes through a DeviceBackend registered by that backend (the CUDA
//    backend registers itself when it is built in); core knows no backend.
//  - Every allocation is accounted to a MemoryCategory (see core/memory.h).
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/memory.h"

namespace swift {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& other) const = default;
  std::string str() const;
};

// What a device backend provides to core. Registered once per DeviceType.
struct DeviceBackend {
  virtual ~DeviceBackend() = default;
  virtual void* allocate(size_t bytes, int device_index) = 0;
  virtual void release(void* ptr, size_t bytes, int device_index) = 0;
  // Copies between this device and the CPU, or within this device. Synchronous.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) = 0;
  virtual void memset_zero(void* ptr, size_t bytes, int device_index) = 0;
};
void register_device_backend(DeviceType type, DeviceBackend* backend);
DeviceBackend* device_backend(DeviceType type);  // throws if no backend of that type is built in
bool device_backend_available(DeviceType type);

class Storage {
 public:
  // Owned memory on `device`, accounted to `category`. Contents are uninitialised.
  static std::shared_ptr<Storage> allocate(size_t bytes, Device device, MemoryCategory category);
  // Borrowed memory; `keepalive` (e.g. a mapped file) is held as long as the storage lives.
  static std::shared_ptr<Storage> wrap(void* data, size_t bytes, Device device, std::shared_ptr<void> keepalive,
                                       bool writable = false);
  // Borrowed host memory that the kernels of `reader` (a CUDA device) read directly: page-locked and mapped
  // (ops::host_mapped_copy). A CPU storage; ops that document it accept it beside tensors on `reader`.
  static std::shared_ptr<Storage> wrap_host_mapped(void* data, size_t bytes, Device reader,
                                                   std::shared_ptr<void> keepalive);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool owned() const { return owned_; }
  bool writable() const { return writable_; }
  // The device whose kernels read this host memory directly (wrap_host_mapped); the CPU for every other storage.
  Device mapped_for() const { return mapped_for_; }

 private:
  Storage() = default;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  bool owned_ = false;
  bool writable_ = true;
  Device mapped_for_;
  MemoryCategory category_ = MemoryCategory::Other;
  std::shared_ptr<void> keepalive_;
};

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  Tensor(std::shared_ptr<Storage> storage, size_t byte_offset, Shape shape, DType dtype);

  // Uninitialised / zero-filled new tensors.
  static Tensor empty(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      MemoryCategory category = MemoryCategory::Activations);
  static Tensor zeros(const Shape& shape, DType dtype, Device device = Device::cpu(),
                      MemoryCategory category = MemoryCategory::Activations);
  // CPU fp32 / i32 tensors from values (tests, small tables).
  static Tensor from_f32(const Shape& shape, const std::vector<float>& values);
  static Tensor from_i32(const Shape& shape, const std::vector<int32_t>& values);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t axis) const;  // negative axis counts from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return dtype_bytes(dtype_, numel()); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t byte_offset() const { return offset_; }

  bool writable() const { return storage_ && storage_->writable(); }
  // Throws naming `op` when this tensor views read-only memory (a mapped weight file).
  void check_writable(const char* op) const;
  void* raw() const { return static_cast<char*>(storage_->data()) + offset_; }
  // Typed pointer; checks that T matches the dtype and that the tensor is on the CPU when `cpu_only`.
  template <typename T>
  T* data() const;

  // Same storage, new shape with the same number of elements (-1 infers one axis).
  Tensor view(const Shape& shape) const;
  // Rows [begin, end) along the first axis (a view).
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // Deep copies.
  Tensor clone(MemoryCategory category = MemoryCategory::Activations) const;
  Tensor to(Device device, MemoryCategory category = MemoryCategory::Activations) const;
  // Converts between float dtypes (F32/BF16/F16) on the CPU; a copy even when the dtype is unchanged.
  Tensor to_dtype(DType dtype, MemoryCategory category = MemoryCategory::Activations) const;
  void zero_();
  // Copies `src` (same numel, same dtype) into this tensor, across devices if needed.
  void copy_from(const Tensor& src);

  // Reads element i (flat index) of a CPU float or integer tensor as double; for tests and printing.
  double item(int64_t index) const;
  std::string str() const;  // "F32[3, 4] cpu"

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::F32;
};

template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::I64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::U8;
};
// bf16 and f16 share uint16_t: data<uint16_t>() accepts either.
template <>
struct DTypeOf<uint16_t> {
  static constexpr DType value = DType::BF16;
};

template <typename T>
T* Tensor::data() const {
  SWIFT_CHECK(defined(), "tensor: data() of an undefined tensor");
  if constexpr (std::is_same_v<T, uint16_t>) {
    SWIFT_CHECK(dtype_ == DType::BF16 || dtype_ == DType::F16, "tensor {}: expected a 16-bit float tensor", str());
  } else {
    SWIFT_CHECK(dtype_ == DTypeOf<T>::value, "tensor {}: expected dtype {}", str(), dtype_name(DTypeOf<T>::value));
  }
  return static_cast<T*>(raw());
}

}  // namespace swift
