// data/hash.cpp — XXH64 through libxxhash; the streaming state is the library's XXH64_state_t.
#include "data/hash.h"

#define XXH_STATIC_LINKING_ONLY  // XXH64_state_t's definition, so the state lives inside our object
#include <xxhash.h>

#include <fmt/format.h>

#include <filesystem>

#include "core/error.h"
#include "core/mapped_file.h"

namespace swift::data {

struct Xxh64::State {
  XXH64_state_t s;
};

uint64_t xxh64(const void* data, size_t size, uint64_t seed) { return XXH64(data, size, seed); }

Xxh64::Xxh64(uint64_t seed) : state_(std::make_unique<State>()) { XXH64_reset(&state_->s, seed); }
Xxh64::~Xxh64() = default;
Xxh64::Xxh64(const Xxh64& other) : state_(std::make_unique<State>(*other.state_)) {}
Xxh64& Xxh64::operator=(const Xxh64& other) {
  if (this != &other) state_ = std::make_unique<State>(*other.state_);
  return *this;
}
Xxh64::Xxh64(Xxh64&&) noexcept = default;
Xxh64& Xxh64::operator=(Xxh64&&) noexcept = default;

void Xxh64::update(const void* data, size_t size) {
  if (size > 0) XXH64_update(&state_->s, data, size);
}

uint64_t Xxh64::digest() const { return XXH64_digest(&state_->s); }

uint64_t hash_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::file_size(path, ec) == 0 && !ec) return xxh64(std::string_view(), 0);
  auto file = MappedFile::open(path);
  return xxh64(file->data(), file->size(), 0);
}

std::string hex64(uint64_t value) { return fmt::format("{:016x}", value); }

}  // namespace swift::data
