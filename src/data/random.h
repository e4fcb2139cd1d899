// data/random.h — the data layer's only source of randomness: std::mt19937_64 (whose output sequence the C++
// standard fixes) with our own bounded draws and permutations, so sampling, splitting and shuffling give the same
// result on every platform and standard library (std::uniform_int_distribution and std::shuffle do not promise
// that).
//
// Invariants:
//  - Rng(seed) draws the same sequence everywhere; permutation(n) is a uniform Fisher-Yates permutation.
//  - derive_seed(seed, a, b) gives independent streams for (epoch, rank, ...) without sharing state between
//    threads.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace swift::data {

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  uint64_t next() { return engine_(); }
  // Uniform in [0, bound) without modulo bias (bound > 0).
  uint64_t below(uint64_t bound);
  // A uniform random permutation of 0..n-1.
  std::vector<int64_t> permutation(int64_t n);
  template <typename T>
  void shuffle(std::vector<T>& values) {
    for (int64_t i = static_cast<int64_t>(values.size()) - 1; i > 0; --i) {
      std::swap(values[i], values[below(static_cast<uint64_t>(i) + 1)]);
    }
  }

 private:
  std::mt19937_64 engine_;
};

// Mixes a base seed with stream identifiers (splitmix64 finaliser).
uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b = 0);

}  // namespace swift::data
