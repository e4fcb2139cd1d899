// data/hash.cpp — XXH64 from its specification (stripes of 32 bytes into four lanes, then the tail, then the
// avalanche). Little-endian loads through memcpy, so unaligned input is fine.
#include "data/hash.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/mapped_file.h"

namespace swift::data {
namespace {

constexpr uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kP5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t lane_round(uint64_t acc, uint64_t input) {
  acc += input * kP2;
  acc = rotl(acc, 31);
  return acc * kP1;
}
inline uint64_t merge_lane(uint64_t h, uint64_t lane) {
  h ^= lane_round(0, lane);
  return h * kP1 + kP4;
}

// Consumes the tail (< 32 bytes) and finishes.
uint64_t finish(uint64_t h, const uint8_t* p, size_t len) {
  while (len >= 8) {
    h ^= lane_round(0, load64(p));
    h = rotl(h, 27) * kP1 + kP4;
    p += 8;
    len -= 8;
  }
  if (len >= 4) {
    h ^= static_cast<uint64_t>(load32(p)) * kP1;
    h = rotl(h, 23) * kP2 + kP3;
    p += 4;
    len -= 4;
  }
  while (len > 0) {
    h ^= static_cast<uint64_t>(*p) * kP5;
    h = rotl(h, 11) * kP1;
    ++p;
    --len;
  }
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}

inline void stripe(uint64_t v[4], const uint8_t* p) {
  v[0] = lane_round(v[0], load64(p));
  v[1] = lane_round(v[1], load64(p + 8));
  v[2] = lane_round(v[2], load64(p + 16));
  v[3] = lane_round(v[3], load64(p + 24));
}

inline uint64_t converge(const uint64_t v[4]) {
  uint64_t h = rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18);
  for (int i = 0; i < 4; ++i) h = merge_lane(h, v[i]);
  return h;
}

}  // namespace

uint64_t xxh64(const void* data, size_t size, uint64_t seed) {
  Xxh64 h(seed);
  h.update(data, size);
  return h.digest();
}

Xxh64::Xxh64(uint64_t seed) : seed_(seed) {
  v_[0] = seed + kP1 + kP2;
  v_[1] = seed + kP2;
  v_[2] = seed;
  v_[3] = seed - kP1;
}

void Xxh64::update(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_ += size;
  if (buffered_ > 0) {
    size_t take = std::min(size, 32 - buffered_);
    std::memcpy(buffer_ + buffered_, p, take);
    buffered_ += take;
    p += take;
    size -= take;
    if (buffered_ < 32) return;
    stripe(v_, buffer_);
    buffered_ = 0;
  }
  while (size >= 32) {
    stripe(v_, p);
    p += 32;
    size -= 32;
  }
  if (size > 0) {
    std::memcpy(buffer_, p, size);
    buffered_ = size;
  }
}

uint64_t Xxh64::digest() const {
  uint64_t h = total_ >= 32 ? converge(v_) : seed_ + kP5;
  h += total_;
  return finish(h, buffer_, buffered_);
}

uint64_t hash_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == 0 && !ec) return xxh64(std::string_view(), 0);
  auto file = MappedFile::open(path);
  return xxh64(file->data(), file->size(), 0);
}

std::string hex64(uint64_t value) { return fmt::format("{:016x}", value); }

}  // namespace swift::data
