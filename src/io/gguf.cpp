// io/gguf.cpp — GGUF reader: header, metadata, tensor table, views and dequantized tensors.
//
// File layout (little-endian; versions 2 and 3 share it, version 1 had 32-bit counts and is refused):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x (string key, u32 value_type, value),
//   tensor_count x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset),
//   padding to general.alignment (default 32), then the data section; tensor offsets are relative to it.
//   string = u64 length + bytes (no terminator); array = u32 element type, u64 count, elements.
//
// Invariants:
//  - Every read goes through Reader, which checks it against the file size first: a truncated file throws
//    naming the file, the byte offset and what was being read; nothing is read past the mapping.
//  - Counts and lengths are checked against the bytes that remain before anything is allocated (each
//    element takes at least its minimal encoded size), and nesting of arrays is limited.
//  - After open() the whole tensor table is valid: unique names, 1-4 dims, non-negative sizes whose product
//    fits int64, ne[0] a whole number of blocks, offsets aligned, data inside the file.
//  - Metadata float32 values are stored in JSON as the shortest decimal that reads back as the same float
//    (1e-5f is stored as 1e-05, as Hugging Face configs write it); float64 and integers are exact.
#include "io/gguf.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace swift::io {
namespace {

enum GgufValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
  kU64 = 10, kI64 = 11, kF64 = 12, kValueTypeCount = 13,
};

// Smallest number of bytes one value of `type` takes in the file (arrays: their header).
size_t min_value_bytes(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32: return 4;
    case kU64: case kI64: case kF64: case kString: return 8;
    case kArray: return 12;
    default: return 1;
  }
}

constexpr int kMaxArrayDepth = 8;
constexpr uint64_t kMaxArrayElems = uint64_t{1} << 26;  // 67M: far above any vocabulary or merge list
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
constexpr uint32_t kMaxDims = 4;

double float32_shortest(float v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  double out = v;
  std::from_chars(buf, res.ptr, out);
  return out;
}

class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  // What is being read, for error messages ("the value of key 'general.name'").
  std::string what;

  void need(size_t bytes) const {
    if (bytes > size_ - pos_) {
      fail("'{}': unexpected end of file at byte {} while reading {} ({} more bytes needed, the file has {}): "
           "the file is truncated; download it again", path_, pos_, what, bytes, size_);
    }
  }
  template <typename T>
  T read() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string read_string() {
    const size_t at = pos_;
    const auto len = read<uint64_t>();
    if (len > remaining() || len > kMaxStringBytes) {
      fail("'{}': string length {} at byte {} (reading {}) extends past the end of the file (size {}): the file "
           "is truncated or corrupt", path_, len, at, what, size_);
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += static_cast<size_t>(len);
    return s;
  }
  // A count of elements each taking at least `min_bytes`: refused when they cannot fit in the file.
  uint64_t read_count(size_t min_bytes, uint64_t limit, const char* noun) {
    const size_t at = pos_;
    const auto count = read<uint64_t>();
    if (count > limit || (min_bytes > 0 && count > remaining() / min_bytes)) {
      fail("'{}': {} count {} at byte {} (reading {}) is impossible: {} bytes remain in the file; the file is "
           "corrupt", path_, noun, count, at, what, remaining());
    }
    return count;
  }

  nlohmann::json read_value(uint32_t type, int depth) {
    switch (type) {
      case kU8: return read<uint8_t>();
      case kI8: return read<int8_t>();
      case kU16: return read<uint16_t>();
      case kI16: return read<int16_t>();
      case kU32: return read<uint32_t>();
      case kI32: return read<int32_t>();
      case kU64: return read<uint64_t>();
      case kI64: return read<int64_t>();
      case kF32: return float32_shortest(read<float>());
      case kF64: return read<double>();
      case kBool: {
        const size_t at = pos_;
        const auto b = read<uint8_t>();
        if (b > 1) fail("'{}': bool value {} at byte {} (reading {}) is neither 0 nor 1", path_, b, at, what);
        return b == 1;
      }
      case kString: return read_string();
      case kArray: {
        if (depth >= kMaxArrayDepth) {
          fail("'{}': arrays nested deeper than {} at byte {} (reading {}); the file is corrupt", path_,
               kMaxArrayDepth, pos_, what);
        }
        const size_t at = pos_;
        const auto elem_type = read<uint32_t>();
        if (elem_type >= kValueTypeCount) {
          fail("'{}': unknown array element type {} at byte {} (reading {}); the file is corrupt", path_,
               elem_type, at, what);
        }
        const uint64_t count = read_count(min_value_bytes(elem_type), kMaxArrayElems, "array element");
        nlohmann::json arr = nlohmann::json::array();
        arr.get_ref<nlohmann::json::array_t&>().reserve(static_cast<size_t>(count));
        for (uint64_t i = 0; i < count; ++i) arr.push_back(read_value(elem_type, depth + 1));
        return arr;
      }
      default:
        fail("'{}': unknown metadata value type {} at byte {} (reading {}); the file is corrupt or from a newer "
             "GGUF version", path_, type, pos_ - 4, what);
    }
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

bool is_integer(const nlohmann::json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

}  // namespace

Shape GgufTensorInfo::shape() const { return Shape(ne.rbegin(), ne.rend()); }

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile g;
  g.file_ = MappedFile::open(path);
  const size_t size = g.file_->size();
  Reader r(g.file_->data(), size, path);

  if (size < 4 || std::memcmp(g.file_->data(), "GGUF", 4) != 0) {
    std::string head;
    for (size_t i = 0; i < std::min<size_t>(size, 4); ++i) {
      const char c = static_cast<char>(g.file_->data()[i]);
      head += (c >= 32 && c < 127) ? c : '?';
    }
    fail("'{}': not a GGUF file (the first bytes are '{}', expected 'GGUF'{})", path, head,
         size < 4 ? fmt::format("; the file has only {} bytes", size) : "");
  }
  r.what = "the header";
  r.read<uint32_t>();
  g.version_ = r.read<uint32_t>();
  if (g.version_ == 1) {
    fail("'{}': GGUF version 1 is not supported (only versions 2 and 3); convert the model again with a recent "
         "llama.cpp", path);
  }
  if (g.version_ != 2 && g.version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(g.version_);
    if (swapped >= 1 && swapped <= 3) {
      fail("'{}': this is a big-endian GGUF file (version {} byte-swapped); only little-endian GGUF is "
           "supported", path, swapped);
    }
    fail("'{}': unsupported GGUF version {} (supported: 2 and 3)", path, g.version_);
  }
  r.what = "the tensor count";
  // A tensor info takes at least 8 (name) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset) bytes.
  const uint64_t tensor_count = r.read_count(32, std::numeric_limits<uint64_t>::max(), "tensor");
  r.what = "the metadata count";
  // A key/value takes at least 8 (key) + 4 (type) + 1 bytes.
  const uint64_t kv_count = r.read_count(13, std::numeric_limits<uint64_t>::max(), "metadata key/value");

  for (uint64_t i = 0; i < kv_count; ++i) {
    r.what = fmt::format("the key of metadata entry #{}", i);
    std::string key = r.read_string();
    r.what = fmt::format("the value type of key '{}'", key);
    const size_t type_at = r.pos();
    const auto type = r.read<uint32_t>();
    if (type >= kValueTypeCount) {
      fail("'{}': key '{}' has unknown value type {} at byte {}; the file is corrupt", path, key, type, type_at);
    }
    r.what = fmt::format("the value of key '{}'", key);
    nlohmann::json value = r.read_value(type, 0);
    if (g.metadata_.contains(key)) fail("'{}': metadata key '{}' appears twice; the file is corrupt", path, key);
    g.metadata_[key] = std::move(value);
  }

  if (g.metadata_.contains("general.alignment")) {
    const auto& a = g.metadata_["general.alignment"];
    if (!is_integer(a) || a.get<int64_t>() <= 0 || (a.get<int64_t>() & (a.get<int64_t>() - 1)) != 0 ||
        a.get<int64_t>() > (int64_t{1} << 30)) {
      fail("'{}': general.alignment = {} is not a power of two; the file is corrupt", path, a.dump());
    }
    g.alignment_ = static_cast<size_t>(a.get<int64_t>());
  }

  if (tensor_count > r.remaining() / 32) {  // re-check: metadata consumed bytes since the count was read
    fail("'{}': tensor count {} is impossible: {} bytes remain after the metadata; the file is corrupt", path,
         tensor_count, r.remaining());
  }
  g.tensors_.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo info;
    r.what = fmt::format("the name of tensor #{}", i);
    info.name = r.read_string();
    r.what = fmt::format("the dimensions of tensor '{}'", info.name);
    const auto n_dims = r.read<uint32_t>();
    if (n_dims == 0 || n_dims > kMaxDims) {
      fail("'{}': tensor '{}' has {} dimensions (expected 1 to {}); the file is corrupt", path, info.name, n_dims,
           kMaxDims);
    }
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto ne = r.read<int64_t>();
      if (ne < 0) fail("'{}': tensor '{}' has a negative size {} in dimension {}", path, info.name, ne, d);
      if (ne != 0 && numel > std::numeric_limits<int64_t>::max() / ne) {
        fail("'{}': tensor '{}' has an impossible number of elements (dims overflow int64); the file is corrupt",
             path, info.name);
      }
      numel *= ne;
      info.ne.push_back(ne);
    }
    r.what = fmt::format("the type of tensor '{}'", info.name);
    const auto type_id = r.read<uint32_t>();
    if (!ggml_type_known(type_id)) {
      fail("'{}': tensor '{}' has unknown ggml type {}; the file is corrupt or needs a newer reader", path,
           info.name, type_id);
    }
    info.type = static_cast<GgmlType>(type_id);
    r.what = fmt::format("the offset of tensor '{}'", info.name);
    const auto offset = r.read<uint64_t>();
    const int64_t block = ggml_block_elems(info.type);
    if (info.ne[0] % block != 0) {
      fail("'{}': tensor '{}' of type {} has rows of {} elements, not a whole number of {}-element blocks; the "
           "file is corrupt", path, info.name, ggml_type_name(info.type), info.ne[0], block);
    }
    const uint64_t blocks = static_cast<uint64_t>(numel / block);
    const uint64_t block_bytes = ggml_block_bytes(info.type);
    if (blocks > std::numeric_limits<uint64_t>::max() / block_bytes) {
      fail("'{}': tensor '{}' is impossibly large; the file is corrupt", path, info.name);
    }
    info.bytes = static_cast<size_t>(blocks * block_bytes);
    info.offset = static_cast<size_t>(offset);  // relative for now; made absolute below
    if (offset % g.alignment_ != 0) {
      fail("'{}': tensor '{}' data offset {} is not a multiple of the alignment {}; the file is corrupt", path,
           info.name, offset, g.alignment_);
    }
    if (g.index_.count(info.name) != 0) {
      fail("'{}': tensor name '{}' appears twice; the file is corrupt", path, info.name);
    }
    g.index_[info.name] = g.tensors_.size();
    g.tensors_.push_back(std::move(info));
  }

  const size_t header_end = r.pos();
  const size_t data_start = (header_end + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  for (auto& info : g.tensors_) {
    const uint64_t rel = info.offset;
    const bool overflow = rel > std::numeric_limits<uint64_t>::max() - data_start ||
                          rel + data_start > std::numeric_limits<uint64_t>::max() - info.bytes;
    const uint64_t begin = overflow ? 0 : data_start + rel;
    const uint64_t end = overflow ? 0 : begin + info.bytes;
    if (overflow || end > size) {
      fail("'{}': tensor '{}' data [{}, {}) extends past the end of the file (size {}): the file is truncated; "
           "download it again", path, info.name, overflow ? rel : begin,
           overflow ? std::string("overflow") : std::to_string(end), size);
    }
    info.offset = static_cast<size_t>(begin);
  }
  return g;
}

const std::string& GgufFile::path() const {
  static const std::string empty;
  return file_ ? file_->path() : empty;
}

const nlohmann::json& GgufFile::metadata(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) fail("'{}': metadata key '{}' is missing", path(), key);
  return *it;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const auto& v = metadata(key);
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail("'{}': metadata key '{}' = {} does not fit int64", path(), key, v.dump());
    }
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  fail("'{}': metadata key '{}' should be an integer, found {}", path(), key,
       v.dump().substr(0, 80));
}

int64_t GgufFile::get_int_or(const std::string& key, int64_t fallback) const {
  return has(key) ? get_int(key) : fallback;
}

double GgufFile::get_float(const std::string& key) const {
  const auto& v = metadata(key);
  if (!v.is_number()) {
    fail("'{}': metadata key '{}' should be a number, found {}", path(), key, v.dump().substr(0, 80));
  }
  return v.get<double>();
}

double GgufFile::get_float_or(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

std::string GgufFile::get_string(const std::string& key) const {
  const auto& v = metadata(key);
  if (!v.is_string()) {
    fail("'{}': metadata key '{}' should be a string, found {}", path(), key, v.dump().substr(0, 80));
  }
  return v.get<std::string>();
}

std::string GgufFile::get_string_or(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

bool GgufFile::contains(const std::string& name) const { return index_.count(name) != 0; }

const GgufTensorInfo& GgufFile::tensor_info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    fail("'{}': no tensor named '{}' (the file has {} tensors)", path(), name, tensors_.size());
  }
  return tensors_[it->second];
}

const uint8_t* GgufFile::data(const GgufTensorInfo& info) const { return file_->data() + info.offset; }

Tensor GgufFile::dequantize(const std::string& name) const {
  const GgufTensorInfo& info = tensor_info(name);
  if (!ggml_type_dequantizable(info.type)) {
    fail("'{}': tensor '{}' has type {}, which cannot be dequantized (supported: F32, F16, BF16, F64, Q4_0, Q4_1, "
         "Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)", path(), name, ggml_type_name(info.type));
  }
  Tensor out = Tensor::empty(info.shape(), DType::F32, Device::cpu(), MemoryCategory::Weights);
  const int64_t row_len = info.ne[0];
  const int64_t rows = row_len == 0 ? 0 : info.numel() / row_len;
  ggml_dequantize_rows(info.type, data(info), out.data<float>(), rows, row_len);
  return out;
}

Tensor GgufFile::view(const std::string& name) const {
  const GgufTensorInfo& info = tensor_info(name);
  DType dtype;
  switch (info.type) {
    case GgmlType::F32: dtype = DType::F32; break;
    case GgmlType::F16: dtype = DType::F16; break;
    case GgmlType::BF16: dtype = DType::BF16; break;
    default:
      fail("'{}': tensor '{}' has type {}; only F32, F16 and BF16 tensors can be viewed without dequantizing",
           path(), name, ggml_type_name(info.type));
  }
  auto* ptr = const_cast<uint8_t*>(data(info));
  const size_t elem = ggml_block_bytes(info.type);
  auto storage = Storage::wrap(ptr, info.bytes, Device::cpu(), file_);
  Tensor t(storage, 0, info.shape(), dtype);
  if (reinterpret_cast<uintptr_t>(ptr) % elem != 0) return t.clone(MemoryCategory::Weights);
  return t;
}

}  // namespace swift::io
