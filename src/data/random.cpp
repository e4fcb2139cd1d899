// data/random.cpp — bounded draws by rejection (Lemire's multiply-shift with a threshold), Fisher-Yates.
#include "data/random.h"

#include <numeric>

namespace swift::data {

uint64_t Rng::below(uint64_t bound) {
  // Multiply-shift maps a 64-bit draw to [0, bound); draws whose low product falls under `threshold` are
  // rejected so every value is equally likely.
  uint64_t x = next();
  __uint128_t m = static_cast<__uint128_t>(x) * bound;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < bound) {
    uint64_t threshold = (0 - bound) % bound;
    while (low < threshold) {
      x = next();
      m = static_cast<__uint128_t>(x) * bound;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

std::vector<int64_t> Rng::permutation(int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  shuffle(p);
  return p;
}

uint64_t derive_seed(uint64_t seed, uint64_t a, uint64_t b) {
  auto mix = [](uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  return mix(mix(mix(seed) ^ a) ^ (b * 0xD6E8FEB86659FD93ull));
}

}  // namespace swift::data
