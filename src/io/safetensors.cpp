// io/safetensors.cpp — safetensors reader (mmap, validated up front, zero-copy views) and atomic writer.
//
// Invariants:
//  - open() checks the whole header before returning: 8-byte length N with 2 <= N <= file size - 8, a JSON
//    object, every entry's dtype (supported: F32 BF16 F16 I32 I64 U8), shape (non-negative integers, no
//    overflow), data_offsets (0 <= begin <= end <= data block size, end - begin == numel * element size) and
//    that no two non-empty tensors share a byte. Holes and trailing bytes in the data block are tolerated.
//  - Every error names the file and, where there is one, the tensor, and says what to do.
//  - tensor() returns a read-only view of the mapping (PROT_READ: clone() before writing to it) that keeps the
//    MappedFile alive. The only copy is for a tensor whose bytes are not aligned to its element size (a writer
//    that did not pad its header); that copy is accounted as Weights.
//  - save_safetensors writes "<path>.tmp", fsyncs it, renames it over <path> and fsyncs the directory; on
//    failure the .tmp is removed and <path> is untouched. The header is padded with spaces to a multiple of
//    8 bytes and the data block has no holes (the Python safetensors reader refuses holes). Tensors are laid
//    out by element size, largest first, then by name — the order of the safetensors library's own writer —
//    so every tensor starts aligned to its element size and loads zero-copy.
#include "io/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace swift::io {

namespace {

using nlohmann::json;

constexpr const char* kCorruptHint = "the file is truncated or corrupt; re-download or re-export it";

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  fail("safetensors '{}': {}; {}", path, what, kCorruptHint);
}

// Safetensors dtype names we map to swift dtypes.
bool parse_supported_dtype(const std::string& name, DType& out) {
  if (name == "F32") out = DType::F32;
  else if (name == "BF16") out = DType::BF16;
  else if (name == "F16") out = DType::F16;
  else if (name == "I32") out = DType::I32;
  else if (name == "I64") out = DType::I64;
  else if (name == "U8") out = DType::U8;
  else return false;
  return true;
}

// Dtypes the safetensors format defines but swift.cpp does not load.
bool is_known_unsupported_dtype(const std::string& name) {
  static const char* kKnown[] = {"F64",     "I8",      "I16",  "U16",      "U32",      "U64", "BOOL",
                                 "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64"};
  return std::any_of(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return name == k; });
}

// Layout order of the safetensors library's writer: dtypes by descending enum rank (I64, F32, I32, BF16, F16,
// U8 among ours), then names. Keeps every tensor aligned to its element size with no padding.
int layout_rank(DType dtype) {
  switch (dtype) {
    case DType::I64: return 0;
    case DType::F32: return 1;
    case DType::I32: return 2;
    case DType::BF16: return 3;
    case DType::F16: return 4;
    default: return 5;
  }
}

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    default: return nullptr;
  }
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void write_le64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Reads a non-negative JSON integer; false when `value` is not one.
bool json_to_u64(const json& value, uint64_t& out) {
  if (value.is_number_unsigned()) {
    out = value.get<uint64_t>();
    return true;
  }
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(value.get<int64_t>());
    return true;
  }
  return false;
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json& value,
                             uint64_t data_size) {
  auto bad = [&](const std::string& what) { corrupt(path, fmt::format("tensor '{}': {}", name, what)); };
  if (!value.is_object()) bad(fmt::format("header entry is {} instead of an object", value.type_name()));

  SafetensorsEntry entry;
  entry.name = name;

  auto dtype_it = value.find("dtype");
  if (dtype_it == value.end() || !dtype_it->is_string()) bad("missing or non-string \"dtype\"");
  const std::string dtype_str = dtype_it->get<std::string>();
  if (!parse_supported_dtype(dtype_str, entry.dtype)) {
    if (is_known_unsupported_dtype(dtype_str)) {
      fail("unsupported dtype {} for tensor '{}' in file '{}' (swift.cpp loads F32, BF16, F16, I32, I64 and U8); "
           "convert the checkpoint to bf16/fp16/fp32 with transformers or safetensors first",
           dtype_str, name, path);
    }
    bad(fmt::format("unknown dtype '{}' (safetensors defines F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL, "
                    "F8_*, ...)",
                    dtype_str));
  }

  auto shape_it = value.find("shape");
  if (shape_it == value.end() || !shape_it->is_array()) bad("missing or non-array \"shape\"");
  uint64_t numel = 1;
  for (const json& d : *shape_it) {
    uint64_t dim = 0;
    if (!json_to_u64(d, dim) || dim > static_cast<uint64_t>(INT64_MAX)) {
      bad(fmt::format("shape {} has an entry that is not a non-negative integer", shape_it->dump()));
    }
    entry.shape.push_back(static_cast<int64_t>(dim));
    if (__builtin_mul_overflow(numel, dim, &numel)) bad(fmt::format("shape {} overflows", shape_it->dump()));
  }
  const uint64_t elem = static_cast<uint64_t>(dtype_info(entry.dtype).block_bytes);
  uint64_t expected_bytes = 0;
  if (numel > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(numel, elem, &expected_bytes)) {
    bad(fmt::format("shape {} overflows", shape_it->dump()));
  }

  auto off_it = value.find("data_offsets");
  uint64_t begin = 0, end = 0;
  if (off_it == value.end() || !off_it->is_array() || off_it->size() != 2 || !json_to_u64((*off_it)[0], begin) ||
      !json_to_u64((*off_it)[1], end)) {
    bad("missing \"data_offsets\" or not two non-negative integers");
  }
  if (begin > end) bad(fmt::format("data_offsets [{}, {}] end before they begin", begin, end));
  if (end > data_size) {
    bad(fmt::format("data_offsets [{}, {}] run past the data block of {} bytes", begin, end, data_size));
  }
  if (end - begin != expected_bytes) {
    bad(fmt::format("data_offsets [{}, {}] hold {} bytes but {}{} needs {}", begin, end, end - begin, dtype_str,
                    shape_str(entry.shape), expected_bytes));
  }
  entry.begin = static_cast<size_t>(begin);
  entry.end = static_cast<size_t>(end);
  return entry;
}

// ---- writing helpers ------------------------------------------------------------------------------
class OutFile {
 public:
  explicit OutFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      fail("cannot create '{}': {}; check that the directory exists and is writable", path_, std::strerror(errno));
    }
  }
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;

  void write(const void* data, size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t{1} << 30));
      if (n < 0) {
        if (errno == EINTR) continue;
        fail("cannot write '{}': {}; check free disk space", path_, std::strerror(errno));
      }
      p += n;
      bytes -= static_cast<size_t>(n);
    }
  }
  void sync_and_close() {
    if (::fsync(fd_) != 0) fail("cannot flush '{}' to disk: {}", path_, std::strerror(errno));
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("cannot close '{}': {}", path_, std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// Makes a completed rename durable; best effort (some filesystems refuse fsync on directories).
void fsync_parent_dir(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) parent = ".";
  int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

}  // namespace

// ---- SafetensorsFile ------------------------------------------------------------------------------
SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile out;
  out.file_ = MappedFile::open(path);
  const size_t size = out.file_->size();
  if (size < 8) {
    corrupt(path, fmt::format("the file is {} bytes, too small for the 8-byte header length of a safetensors file",
                              size));
  }
  const uint64_t header_len = read_le64(out.file_->data());
  if (header_len < 2) corrupt(path, fmt::format("header length {} is too small for a JSON object", header_len));
  if (header_len > size - 8) {
    corrupt(path, fmt::format("header length {} runs past the end of the file ({} bytes)", header_len, size));
  }
  const char* header_begin = reinterpret_cast<const char*>(out.file_->data() + 8);
  json header;
  try {
    header = json::parse(header_begin, header_begin + header_len);
  } catch (const json::exception& e) {
    corrupt(path, fmt::format("the {}-byte JSON header does not parse ({})", header_len, e.what()));
  }
  if (!header.is_object()) corrupt(path, fmt::format("the JSON header is {} instead of an object", header.type_name()));

  out.data_start_ = 8 + static_cast<size_t>(header_len);
  const uint64_t data_size = size - out.data_start_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_null()) continue;
      if (!it->is_object()) corrupt(path, "\"__metadata__\" is not an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        // The format says string -> string; tolerate other JSON values by keeping their JSON text.
        out.metadata_[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
      }
      continue;
    }
    out.entries_.emplace(it.key(), parse_entry(path, it.key(), *it, data_size));
  }

  // No two non-empty tensors may share a byte.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& [name, entry] : out.entries_) {
    if (entry.end > entry.begin) by_offset.push_back(&entry);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->name < b->name;
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const SafetensorsEntry& prev = *by_offset[i - 1];
    const SafetensorsEntry& cur = *by_offset[i];
    if (cur.begin < prev.end) {
      corrupt(path, fmt::format("tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (bytes [{}, {}))", cur.name,
                                cur.begin, cur.end, prev.name, prev.begin, prev.end));
    }
  }
  return out;
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    std::string some;
    size_t shown = 0;
    for (const auto& [n, e] : entries_) {
      if (shown == 3) {
        some += ", ...";
        break;
      }
      some += (shown++ ? ", " : "") + n;
    }
    fail("tensor '{}' is not in safetensors file '{}' ({} tensors: {}); check the tensor name and the file",
         name, path(), entries_.size(), some.empty() ? "none" : some);
  }
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const size_t bytes = e.end - e.begin;
  const uint8_t* src = file_->data() + data_start_ + e.begin;
  const size_t align = static_cast<size_t>(dtype_info(e.dtype).block_bytes);
  if (bytes == 0 || reinterpret_cast<uintptr_t>(src) % align == 0) {
    // The mapping is read-only; Storage takes a mutable pointer but nothing may write through it.
    auto storage =
        Storage::wrap(const_cast<uint8_t*>(src), bytes, Device::cpu(), std::static_pointer_cast<void>(file_));
    return Tensor(std::move(storage), 0, e.shape, e.dtype);
  }
  Tensor copy = Tensor::empty(e.shape, e.dtype, Device::cpu(), MemoryCategory::Weights);
  std::memcpy(copy.raw(), src, bytes);
  return copy;
}

// ---- writer ---------------------------------------------------------------------------------------
void save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<std::pair<const std::string*, const Tensor*>> order;
  for (const auto& [name, t] : tensors) order.emplace_back(&name, &t);
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    const bool a_ok = a.second->defined(), b_ok = b.second->defined();
    const int ra = a_ok ? layout_rank(a.second->dtype()) : 0, rb = b_ok ? layout_rank(b.second->dtype()) : 0;
    return ra < rb;  // stable: names stay sorted within a rank
  });

  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name_ptr, t_ptr] : order) {
    const std::string& name = *name_ptr;
    const Tensor& t = *t_ptr;
    if (name == "__metadata__") fail("save_safetensors '{}': a tensor may not be named \"__metadata__\"", path);
    if (!t.defined()) fail("save_safetensors '{}': tensor '{}' is undefined", path, name);
    const char* dtype = safetensors_dtype_name(t.dtype());
    if (dtype == nullptr) {
      fail("save_safetensors '{}': tensor '{}' has dtype {}, which safetensors cannot store; dequantize it or "
           "store its packed bytes as U8",
           path, name, dtype_name(t.dtype()));
    }
    const uint64_t bytes = t.nbytes();
    json entry = json::object();
    entry["dtype"] = dtype;
    entry["shape"] = t.shape();
    entry["data_offsets"] = json::array({offset, offset + bytes});
    header[name] = std::move(entry);
    offset += bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;

  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // e.g. a tensor name that is not valid UTF-8
    fail("save_safetensors '{}': cannot encode the header ({}); tensor names and metadata must be UTF-8", path,
         e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  const std::string tmp = path + ".tmp";
  try {
    OutFile out(tmp);
    uint8_t len[8];
    write_le64(len, text.size());
    out.write(len, 8);
    out.write(text.data(), text.size());
    for (const auto& [name_ptr, t_ptr] : order) {
      const Tensor& t = *t_ptr;
      if (t.nbytes() == 0) continue;
      if (t.device().is_cpu()) {
        out.write(t.raw(), t.nbytes());
      } else {
        Tensor host = t.to(Device::cpu(), MemoryCategory::Workspace);
        out.write(host.raw(), host.nbytes());
      }
    }
    out.sync_and_close();
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      fail("cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno));
    }
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  fsync_parent_dir(path);
}

}  // namespace swift::io
