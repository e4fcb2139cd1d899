// tests/io/test_gguf_writer.h — a small GGUF writer for the GGUF tests, written from the format description
// (not from the reader), plus temporary files and error-message checks.
//
// Invariants:
//  - build() lays out header, key/values, tensor infos, padding to `alignment`, then each tensor's data at
//    the next aligned offset, in insertion order; `layout` records where fields landed so tests can corrupt
//    exactly one of them.
//  - Files live in a per-process temporary directory removed by TempDir's destructor.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "io/gguf.h"

namespace swift::test {

using Bytes = std::vector<uint8_t>;

enum : uint32_t {
  kGgufU8 = 0, kGgufI8 = 1, kGgufU16 = 2, kGgufI16 = 3, kGgufU32 = 4, kGgufI32 = 5, kGgufF32 = 6,
  kGgufBool = 7, kGgufString = 8, kGgufArray = 9, kGgufU64 = 10, kGgufI64 = 11, kGgufF64 = 12,
};

template <typename T>
void put(Bytes& out, T value) {
  uint8_t raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));
  out.insert(out.end(), raw, raw + sizeof(T));
}
inline void put_str(Bytes& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}
template <typename T>
void patch(Bytes& out, size_t pos, T value) {
  std::memcpy(out.data() + pos, &value, sizeof(T));
}

class GgufWriter {
 public:
  uint32_t version = 3;
  size_t alignment = 32;  // layout alignment; add "general.alignment" yourself when it is not 32

  struct Layout {
    size_t tensor_count_pos = 0, kv_count_pos = 0, data_start = 0;
    std::map<std::string, size_t> value_pos;        // key -> first byte of its value
    std::map<std::string, size_t> ndims_pos, type_pos, offset_pos;  // tensor name -> field position
    std::map<std::string, size_t> data_pos;         // tensor name -> absolute data position
  } layout;

  // Raw key/value: `payload` is the encoded value without the type.
  void kv(const std::string& key, uint32_t type, const Bytes& payload) { kvs_.push_back({key, type, payload}); }
  template <typename T>
  void kv_scalar(const std::string& key, uint32_t type, T value) {
    Bytes b;
    put<T>(b, value);
    kv(key, type, b);
  }
  void kv_u32(const std::string& key, uint32_t v) { kv_scalar<uint32_t>(key, kGgufU32, v); }
  void kv_i32(const std::string& key, int32_t v) { kv_scalar<int32_t>(key, kGgufI32, v); }
  void kv_u64(const std::string& key, uint64_t v) { kv_scalar<uint64_t>(key, kGgufU64, v); }
  void kv_f32(const std::string& key, float v) { kv_scalar<float>(key, kGgufF32, v); }
  void kv_bool(const std::string& key, bool v) { kv_scalar<uint8_t>(key, kGgufBool, v ? 1 : 0); }
  void kv_str(const std::string& key, const std::string& v) {
    Bytes b;
    put_str(b, v);
    kv(key, kGgufString, b);
  }
  void kv_str_array(const std::string& key, const std::vector<std::string>& values) {
    Bytes b;
    put<uint32_t>(b, kGgufString);
    put<uint64_t>(b, values.size());
    for (const auto& v : values) put_str(b, v);
    kv(key, kGgufArray, b);
  }

  void tensor(const std::string& name, io::GgmlType type, std::vector<int64_t> ne, Bytes data) {
    tensors_.push_back({name, type, std::move(ne), std::move(data)});
  }
  void tensor_f32(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& values) {
    Bytes b;
    for (float v : values) put<float>(b, v);
    tensor(name, io::GgmlType::F32, std::move(ne), std::move(b));
  }
  void tensor_f16(const std::string& name, std::vector<int64_t> ne, const std::vector<float>& values) {
    Bytes b;
    for (float v : values) put<uint16_t>(b, f32_to_f16(v));
    tensor(name, io::GgmlType::F16, std::move(ne), std::move(b));
  }

  Bytes build() {
    Bytes out = {'G', 'G', 'U', 'F'};
    put<uint32_t>(out, version);
    layout = Layout{};
    layout.tensor_count_pos = out.size();
    put<uint64_t>(out, tensors_.size());
    layout.kv_count_pos = out.size();
    put<uint64_t>(out, kvs_.size());
    for (const auto& kv : kvs_) {
      put_str(out, kv.key);
      put<uint32_t>(out, kv.type);
      layout.value_pos[kv.key] = out.size();
      out.insert(out.end(), kv.payload.begin(), kv.payload.end());
    }
    std::vector<uint64_t> offsets;
    uint64_t next = 0;
    for (const auto& t : tensors_) {
      offsets.push_back(next);
      next = (next + t.data.size() + alignment - 1) / alignment * alignment;
    }
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      put_str(out, t.name);
      layout.ndims_pos[t.name] = out.size();
      put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
      for (int64_t d : t.ne) put<int64_t>(out, d);
      layout.type_pos[t.name] = out.size();
      put<uint32_t>(out, static_cast<uint32_t>(t.type));
      layout.offset_pos[t.name] = out.size();
      put<uint64_t>(out, offsets[i]);
    }
    while (out.size() % alignment != 0) out.push_back(0);
    layout.data_start = out.size();
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      out.resize(layout.data_start + offsets[i], 0);
      layout.data_pos[t.name] = out.size();
      out.insert(out.end(), t.data.begin(), t.data.end());
    }
    return out;
  }

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    Bytes payload;
  };
  struct T {
    std::string name;
    io::GgmlType type;
    std::vector<int64_t> ne;
    Bytes data;
  };
  std::vector<Kv> kvs_;
  std::vector<T> tensors_;
};

class TempDir {
 public:
  TempDir() {
    dir_ = std::filesystem::temp_directory_path() /
           ("swift_gguf_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    std::filesystem::create_directories(dir_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const Bytes& bytes) const {
    const std::string path = (dir_ / name).string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

 private:
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::filesystem::path dir_;
};

// Runs `fn`, which must throw swift::Error whose message contains every one of `parts`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected swift::Error containing '" << (parts.empty() ? "" : parts[0]) << "'";
  } catch (const swift::Error& e) {
    const std::string msg = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(msg.find(part), std::string::npos) << "message lacks '" << part << "': " << msg;
    }
  }
}

}  // namespace swift::test
