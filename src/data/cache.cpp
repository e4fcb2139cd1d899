// data/cache.cpp — cache file writing (tmp + fsync + rename) and verified, memory-mapped loading.
#include "data/cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "core/mapped_file.h"
#include "data/hash.h"

namespace swift::data {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'S', 'W', 'D', 'C', 'A', 'C', 'H', 'E'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kByteOrder = 0x01020304u;
constexpr uint64_t kAlign = 64;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t byte_order;
  uint64_t key_hash;
  uint64_t file_bytes;
  uint64_t payload_hash;  // XXH64 of bytes [sizeof(Header), file_bytes)
  int64_t n_seq;
  int64_t n_tokens;
  int64_t n_rejected_tokens;  // -1: no rejected side
  uint64_t key_offset, key_bytes;
  uint64_t meta_offset, meta_bytes;
  uint64_t arrays_offset;
  uint64_t reserved[2];
  uint64_t header_hash;  // XXH64 of the bytes before this field
};
static_assert(sizeof(Header) == 128, "cache header must be 128 bytes");

uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Offsets of the arrays, from the counts; `end` is the file size.
struct Layout {
  uint64_t offsets, ids, mask, sample_index, label, r_offsets, r_ids, r_mask, end;
};
Layout layout(uint64_t start, int64_t n, int64_t t, int64_t r) {
  Layout l{};
  uint64_t p = align_up(start);
  auto take = [&](uint64_t bytes) {
    uint64_t at = p;
    p = align_up(p + bytes);
    return at;
  };
  l.offsets = take(uint64_t(n + 1) * 8);
  l.ids = take(uint64_t(t) * 4);
  l.mask = take(uint64_t(t));
  l.sample_index = take(uint64_t(n) * 8);
  l.label = take(uint64_t(n));
  if (r >= 0) {
    l.r_offsets = take(uint64_t(n + 1) * 8);
    l.r_ids = take(uint64_t(r) * 4);
    l.r_mask = take(uint64_t(r));
  }
  l.end = p;
  return l;
}

class Writer {
 public:
  Writer(std::FILE* f, const std::string& path) : f_(f), path_(path) {}
  void at(uint64_t offset) {
    static const char zeros[kAlign] = {};
    SWIFT_CHECK(offset >= pos_, "cache writer: offset {} before position {}", offset, pos_);
    put(zeros, offset - pos_);
  }
  void put(const void* data, uint64_t bytes) {
    if (bytes == 0) return;
    if (std::fwrite(data, 1, bytes, f_) != bytes) {
      fail("dataset cache '{}': write failed ({}); check free space and permissions of the cache directory "
           "(--cache_dir or SWIFT_CACHE_DIR)",
           path_, std::strerror(errno));
    }
    hash_.update(data, bytes);
    pos_ += bytes;
  }
  uint64_t pos() const { return pos_; }
  uint64_t digest() const { return hash_.digest(); }

 private:
  std::FILE* f_;
  const std::string& path_;
  uint64_t pos_ = sizeof(Header);
  Xxh64 hash_;
};

std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  uint64_t tid = std::hash<std::thread::id>{}(std::this_thread::get_id());
  return fmt::format("{}.tmp.{}.{}.{}", path, ::getpid(), tid % 100000, counter.fetch_add(1));
}

}  // namespace

std::string default_cache_dir() {
  if (const char* d = std::getenv("SWIFT_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "swift-cpp" / "datasets").string();
  if (const char* h = std::getenv("HOME"); h && *h) return (fs::path(h) / ".cache" / "swift-cpp" / "datasets").string();
  return (fs::temp_directory_path() / "swift-cpp" / "datasets").string();
}

std::string cache_file_path(const std::string& dir, const std::string& key) {
  return (fs::path(dir) / (hex64(xxh64(key)) + ".swdc")).string();
}

void write_cache(const std::string& path, const std::string& key, const nlohmann::json& meta,
                 const TokenizedDataset& data) {
  std::error_code ec;
  fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent, ec);
  if (ec) {
    fail("dataset cache: cannot create directory '{}' ({}); set --cache_dir or SWIFT_CACHE_DIR to a writable place",
         parent.string(), ec.message());
  }
  const std::string tmp = temp_name(path);
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    fail("dataset cache: cannot create '{}' ({}); set --cache_dir or SWIFT_CACHE_DIR to a writable place", tmp,
         std::strerror(errno));
  }
  try {
    const auto& v = data.view();
    const int64_t n = v.size, t = data.num_tokens();
    const int64_t r = data.has_rejected() ? data.num_rejected_tokens() : -1;
    const std::string meta_text = meta.dump();
    Header h{};
    std::memcpy(h.magic, kMagic, sizeof(kMagic));
    h.version = kVersion;
    h.byte_order = kByteOrder;
    h.key_hash = xxh64(key);
    h.n_seq = n;
    h.n_tokens = t;
    h.n_rejected_tokens = r;
    h.key_offset = sizeof(Header);
    h.key_bytes = key.size();
    h.meta_offset = h.key_offset + h.key_bytes;
    h.meta_bytes = meta_text.size();
    h.arrays_offset = align_up(h.meta_offset + h.meta_bytes);
    Layout l = layout(h.arrays_offset, n, t, r);
    h.file_bytes = l.end;
    Header placeholder{};
    if (std::fwrite(&placeholder, sizeof(placeholder), 1, f) != 1) fail("dataset cache '{}': write failed", tmp);
    Writer w(f, tmp);
    w.put(key.data(), key.size());
    w.put(meta_text.data(), meta_text.size());
    w.at(l.offsets);
    w.put(v.offsets, uint64_t(n + 1) * 8);
    w.at(l.ids);
    w.put(v.ids, uint64_t(t) * 4);
    w.at(l.mask);
    w.put(v.loss_mask, uint64_t(t));
    w.at(l.sample_index);
    w.put(v.sample_index, uint64_t(n) * 8);
    w.at(l.label);
    w.put(v.label, uint64_t(n));
    if (r >= 0) {
      w.at(l.r_offsets);
      w.put(v.rejected_offsets, uint64_t(n + 1) * 8);
      w.at(l.r_ids);
      w.put(v.rejected_ids, uint64_t(r) * 4);
      w.at(l.r_mask);
      w.put(v.rejected_loss_mask, uint64_t(r));
    }
    w.at(l.end);
    h.payload_hash = w.digest();
    h.header_hash = xxh64(&h, offsetof(Header, header_hash), 0);
    if (std::fseek(f, 0, SEEK_SET) != 0 || std::fwrite(&h, sizeof(h), 1, f) != 1 || std::fflush(f) != 0 ||
        ::fsync(::fileno(f)) != 0) {
      fail("dataset cache '{}': write failed ({}); check free space of the cache directory", tmp, std::strerror(errno));
    }
    std::fclose(f);
    f = nullptr;
    fs::rename(tmp, path, ec);
    if (ec) fail("dataset cache: cannot rename '{}' to '{}' ({})", tmp, path, ec.message());
  } catch (...) {
    if (f) std::fclose(f);
    fs::remove(tmp, ec);
    throw;
  }
}

std::optional<CacheLoad> load_cache(const std::string& path, const std::string& key, std::string* why) {
  auto reject = [&](std::string reason) -> std::optional<CacheLoad> {
    if (why) *why = std::move(reason);
    return std::nullopt;
  };
  std::error_code ec;
  if (!fs::exists(path, ec)) return reject("absent");
  std::shared_ptr<MappedFile> file;
  try {
    file = MappedFile::open(path);
  } catch (const Error& e) {
    return reject(e.what());
  }
  const uint8_t* base = file->data();
  const uint64_t size = file->size();
  if (size < sizeof(Header)) return reject(fmt::format("truncated ({} bytes)", size));
  Header h;
  std::memcpy(&h, base, sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) return reject("not a swift.cpp dataset cache (bad magic)");
  if (h.header_hash != xxh64(&h, offsetof(Header, header_hash), 0)) return reject("header checksum mismatch");
  if (h.version != kVersion) return reject(fmt::format("format version {} (this build reads {})", h.version, kVersion));
  if (h.byte_order != kByteOrder) return reject("written on a machine of another byte order");
  if (h.file_bytes != size) return reject(fmt::format("size {} but the header says {}", size, h.file_bytes));
  if (h.n_seq < 0 || h.n_tokens < 0 || h.key_offset != sizeof(Header) || h.meta_offset != h.key_offset + h.key_bytes ||
      h.arrays_offset != align_up(h.meta_offset + h.meta_bytes)) {
    return reject("inconsistent header");
  }
  Layout l = layout(h.arrays_offset, h.n_seq, h.n_tokens, h.n_rejected_tokens);
  if (l.end != size) return reject("array sizes do not match the file size");
  if (xxh64(base + sizeof(Header), size - sizeof(Header), 0) != h.payload_hash) return reject("payload checksum mismatch");
  if (h.key_hash != xxh64(key) || h.key_bytes != key.size() ||
      std::memcmp(base + h.key_offset, key.data(), key.size()) != 0) {
    return reject("written for another dataset/options key");
  }
  CacheLoad out;
  try {
    out.meta = nlohmann::json::parse(base + h.meta_offset, base + h.meta_offset + h.meta_bytes);
  } catch (const nlohmann::json::exception& e) {
    return reject(std::string("bad metadata: ") + e.what());
  }
  TokenizedDataset::View v;
  v.size = h.n_seq;
  v.offsets = reinterpret_cast<const int64_t*>(base + l.offsets);
  v.ids = reinterpret_cast<const int32_t*>(base + l.ids);
  v.loss_mask = base + l.mask;
  v.sample_index = reinterpret_cast<const int64_t*>(base + l.sample_index);
  v.label = reinterpret_cast<const int8_t*>(base + l.label);
  auto offsets_ok = [&](const int64_t* o, int64_t total) {
    if (o[0] != 0 || o[h.n_seq] != total) return false;
    for (int64_t i = 0; i < h.n_seq; ++i) {
      if (o[i + 1] <= o[i]) return false;
    }
    return true;
  };
  if (!offsets_ok(v.offsets, h.n_tokens)) return reject("corrupt sequence offsets");
  if (h.n_rejected_tokens >= 0) {
    v.rejected_offsets = reinterpret_cast<const int64_t*>(base + l.r_offsets);
    v.rejected_ids = reinterpret_cast<const int32_t*>(base + l.r_ids);
    v.rejected_loss_mask = base + l.r_mask;
    if (!offsets_ok(v.rejected_offsets, h.n_rejected_tokens)) return reject("corrupt rejected offsets");
  }
  EncodeStats stats = out.meta.contains("encode") ? EncodeStats::from_json(out.meta["encode"]) : EncodeStats{};
  out.data = TokenizedDataset::from_view(v, file, std::move(stats));
  return out;
}

}  // namespace swift::data
