// data/hash.h — content hashing for cache keys and checksums: XXH64 through libxxhash (Debian's libxxhash),
// one-shot and streaming, plus file and string helpers.
//
// Invariants:
//  - xxh64(bytes, seed) is the reference XXH64 (the library is the reference implementation; tests check the
//    specification's vectors); Xxh64 fed the same bytes in any chunking gives the same digest as the one-shot call.
//  - hash_file hashes the file's bytes only (not its name, size or time); a missing file throws naming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace swift::data {

uint64_t xxh64(const void* data, size_t size, uint64_t seed);  // no default seed: xxh64("a", 0) must be text
inline uint64_t xxh64(std::string_view text, uint64_t seed = 0) { return xxh64(text.data(), text.size(), seed); }

// Streaming XXH64: update() any number of times, then digest() (which does not change the state). Copies carry
// the state (hash a common prefix once, then branch).
class Xxh64 {
 public:
  explicit Xxh64(uint64_t seed = 0);
  ~Xxh64();
  Xxh64(const Xxh64& other);
  Xxh64& operator=(const Xxh64& other);
  Xxh64(Xxh64&&) noexcept;
  Xxh64& operator=(Xxh64&&) noexcept;
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  uint64_t digest() const;

 private:
  struct State;  // libxxhash's XXH64_state_t, kept out of this header
  std::unique_ptr<State> state_;
};

// XXH64 of a whole file's contents (memory-mapped).
uint64_t hash_file(const std::string& path);
// 16 lowercase hex digits.
std::string hex64(uint64_t value);

}  // namespace swift::data
