// ops/philox.h — Philox4x32-10, the counter-based random generator of dropout masks (Salmon et al., "Parallel
// random numbers: as easy as 1, 2, 3", SC 2011; the generator of cuRAND and of torch's CUDA dropout).
//
// Invariants:
//  - A draw is a pure function of (seed, index): no state, so any thread, the backward, a recompute and a CUDA
//    kernel regenerate the same mask in any order. Block b of stream `seed` is philox(key = seed, counter = b).
//  - Header-only, no library calls: usable from host code and (with SWIFT_HOST_DEVICE) from CUDA kernels.
//  - Dropout draws 16-bit uniforms, two per word, eight per block: draw i of stream `seed` is the low (i even) or
//    high (i odd) half of word i / 2, i.e. of block i / 8. Element i is kept when its draw >= threshold(p) =
//    round(p * 2^16) (p in [0, 1)): P(drop) = p to within 2^-17 (p = 0.05: 0.0500031), and one Philox block masks 8
//    elements (half the rounds of a 32-bit draw per element: the LoRA forward's mask is Philox-bound on the GPU);
//    p = 0 keeps everything.
//  - A DropoutMap places a rank's local (rows, cols) block in the full tensor whose mask it draws (sequence parallel:
//    a row offset; tensor parallel's row-parallel inputs: a column block), so every rank draws exactly the mask of
//    its place in the one-process tensor. The default map is the identity: local flat index = stream index.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SWIFT_HOST_DEVICE __host__ __device__
#else
#define SWIFT_HOST_DEVICE
#endif

namespace swift::ops {

struct PhiloxBlock {
  uint32_t w[4];
};

// Philox4x32-10 of a 128-bit counter under a 64-bit key (low word k0 = key bits 0..31).
SWIFT_HOST_DEVICE inline PhiloxBlock philox4x32_10(PhiloxBlock counter, uint64_t key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;    // round multipliers
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments
  uint32_t c0 = counter.w[0], c1 = counter.w[1], c2 = counter.w[2], c3 = counter.w[3];
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
#if defined(__CUDA_ARCH__)
    // The same products as below; nvcc turns the 64-bit form into IMAD.WIDE plus a needless add per half (~20% more
    // instructions per block), __umulhi and the low product into one IMAD.WIDE.
    const uint32_t hi0 = __umulhi(kMul0, c0), lo0 = kMul0 * c0;
    const uint32_t hi1 = __umulhi(kMul1, c2), lo1 = kMul1 * c2;
#else
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
#endif
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {{c0, c1, c2, c3}};
}

// The 4 words of block `block` of stream `seed` (counter = (block low, block high, 0, 0)).
SWIFT_HOST_DEVICE inline PhiloxBlock philox_block(uint64_t seed, uint64_t block) {
  return philox4x32_10({{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}}, seed);
}

// Draw `index` of stream `seed`: a 16-bit uniform, half (index & 1) of word index / 2.
SWIFT_HOST_DEVICE inline uint32_t dropout_draw(uint64_t seed, uint64_t index) {
  const uint32_t w = philox_block(seed, index >> 3).w[(index >> 1) & 3];
  return (index & 1) != 0 ? w >> 16 : w & 0xFFFFu;
}

// The keep threshold of drop probability p in [0, 1): round(p * 2^16) (2^16 when p rounds to 1: nothing kept).
SWIFT_HOST_DEVICE inline uint32_t dropout_threshold(float p) {
  if (!(p > 0.0f)) return 0;
  const double t = static_cast<double>(p) * 65536.0 + 0.5;
  return t >= 65536.0 ? 65536u : static_cast<uint32_t>(t);
}

// Whether element `index` of stream `seed` survives dropout with threshold `threshold`.
SWIFT_HOST_DEVICE inline bool dropout_keep(uint64_t seed, uint64_t index, uint32_t threshold) {
  return dropout_draw(seed, index) >= threshold;
}

// The keep bits of the 8 draws of Philox block `block` (bit i: draw 8 block + i kept), from the block's words.
SWIFT_HOST_DEVICE inline uint32_t dropout_keep_bits8(const PhiloxBlock& b, uint32_t threshold) {
  uint32_t bits = 0;
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int w = 0; w < 4; ++w) {
    bits |= ((b.w[w] & 0xFFFFu) >= threshold ? 1u : 0u) << (2 * w);
    bits |= ((b.w[w] >> 16) >= threshold ? 1u : 0u) << (2 * w + 1);
  }
  return bits;
}

// Where a local (rows, cols) block lies in the full (.., full_cols) tensor whose dropout mask it draws: local element
// (i, j) uses stream index (row_offset + i) * full_cols + col_offset + j. full_cols 0: the local width (no column
// block). All zero: the identity, i * cols + j.
struct DropoutMap {
  int64_t row_offset = 0;  // the full tensor's row of local row 0
  int64_t full_cols = 0;   // the full tensor's column count (0: the local tensor is full width)
  int64_t col_offset = 0;  // the full tensor's column of local column 0
};

// The stream index of local element (row, col) of a block `cols` wide.
SWIFT_HOST_DEVICE inline uint64_t dropout_index(const DropoutMap& m, int64_t row, int64_t col, int64_t cols) {
  return static_cast<uint64_t>((m.row_offset + row) * (m.full_cols > 0 ? m.full_cols : cols) + m.col_offset + col);
}

// Whether `m` maps a block `cols` wide onto itself (local flat index = stream index): the kernels' plain path.
SWIFT_HOST_DEVICE inline bool dropout_map_identity(const DropoutMap& m, int64_t cols) {
  return m.row_offset == 0 && m.col_offset == 0 && (m.full_cols == 0 || m.full_cols == cols);
}

// Whether every 8-aligned group of 8 columns of a block `cols` wide (cols % 8 == 0) draws one whole Philox block
// under `m`: the identity, or a full width and column offset that are multiples of 8.
SWIFT_HOST_DEVICE inline bool dropout_whole_blocks(const DropoutMap& m, int64_t cols) {
  return dropout_map_identity(m, cols) || ((m.full_cols == 0 || m.full_cols % 8 == 0) && m.col_offset % 8 == 0);
}

// Dropout draws of stream `seed` at arbitrary indices, caching the last block: runs of consecutive indices cost one
// Philox block per 8 draws (for mapped blocks, whose rows start anywhere in the stream).
struct PhiloxCursor {
  uint64_t seed;
  uint64_t block = ~uint64_t{0};
  PhiloxBlock words{};
  SWIFT_HOST_DEVICE explicit PhiloxCursor(uint64_t s) : seed(s) {}
  SWIFT_HOST_DEVICE uint32_t draw(uint64_t index) {
    if ((index >> 3) != block) {
      block = index >> 3;
      words = philox_block(seed, block);
    }
    const uint32_t w = words.w[(index >> 1) & 3];
    return (index & 1) != 0 ? w >> 16 : w & 0xFFFFu;
  }
};

// The keep bits of columns c0 .. c0 + 7 (those < cols) of local row `row` of a block `cols` wide placed by `m`:
// bit j = column c0 + j kept (its draw at dropout_index >= threshold), bits past cols 0. One byte of a keep-bits cache
// (ops.h Dropout::keep_bits) under any map.
SWIFT_HOST_DEVICE inline uint32_t dropout_keep_byte(uint64_t seed, const DropoutMap& m, int64_t row, int64_t c0,
                                                    int64_t cols, uint32_t threshold) {
  PhiloxCursor cursor(seed);
  uint32_t byte = 0;
  for (int j = 0; j < 8 && c0 + j < cols; ++j) {
    byte |= (cursor.draw(dropout_index(m, row, c0 + j, cols)) >= threshold ? 1u : 0u) << j;
  }
  return byte;
}

}  // namespace swift::ops
