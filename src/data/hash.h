// data/hash.h — content hashing for cache keys and checksums: XXH64 (the xxHash 64-bit algorithm, written from
// its published specification), one-shot and streaming, plus file and string helpers.
//
// Invariants:
//  - xxh64(bytes, seed) equals the reference XXH64 for every input (tests check published vectors);
//    Xxh64 fed the same bytes in any chunking gives the same digest as the one-shot call.
//  - hash_file hashes the file's bytes only (not its name, size or time); a missing file throws naming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace swift::data {

uint64_t xxh64(const void* data, size_t size, uint64_t seed);  // no default seed: xxh64("a", 0) must be text
inline uint64_t xxh64(std::string_view text, uint64_t seed = 0) { return xxh64(text.data(), text.size(), seed); }

// Streaming XXH64: update() any number of times, then digest() (which does not change the state).
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  uint64_t digest() const;

 private:
  uint64_t seed_;
  uint64_t v_[4];
  uint8_t buffer_[32];
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

// XXH64 of a whole file's contents (memory-mapped).
uint64_t hash_file(const std::string& path);
// 16 lowercase hex digits.
std::string hex64(uint64_t value);

}  // namespace swift::data
