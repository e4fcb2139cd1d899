// core/seed.h — derived seeds: the one way this code base turns a user seed into independent streams (LoRA init
// per module, dropout masks per layer and module, the per-step / per-micro-batch dropout seed of the trainer).
//
// Invariants:
//  - mix_seed is a pure function: the same (seed, a, b) gives the same value on every machine, so runs, recomputes
//    and resumed runs regenerate identical random numbers.
//  - Distinct (a, b) give unrelated values (splitmix64's finaliser over a Weyl-sequence combination), so streams
//    never overlap in practice; a and b are offset by one so that (0, 0) does not return a function of seed alone.
#pragma once

#include <cstdint>

namespace swift {

constexpr uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (a + 1) + 0xC2B2AE3D27D4EB4Full * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace swift
