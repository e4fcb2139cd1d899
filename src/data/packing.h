// data/packing.h — --packing: bin-pack encoded sequences into rows of at most packing_length tokens.
//
// Algorithm: ms-swift packs with `binpacking.to_constant_volume` (swift/llm/dataset/utils.py,
// calculate_matched_group), i.e. best-fit decreasing: sequences sorted by length, longest first (ties keep
// dataset order), each put into the fullest open row it still fits in (ties: the row opened first), or a new
// row. We do the same with an ordered set, O(n log n). ms-swift feeds it windows of 1000 sequences and carries
// the last row of each window into the next; `window` reproduces that (0, our default, packs the whole dataset
// at once, which fills rows at least as well).
//
// A packed row is a list of whole sequences: no sequence is ever cut, and the batch built from it restarts
// positions at 0 per sequence and carries cu_seqlens, so attention never crosses sequences by construction;
// loss_mask[0] = 0 of every sequence keeps targets from crossing them too (data/encode.h).
//
// Invariants:
//  - Every sequence index appears in exactly one row, once; every row's total length <= capacity.
//  - The plan depends only on the lengths, capacity and window.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace swift::data {

struct PackPlan {
  int64_t capacity = 0;                   // packing_length
  std::vector<int64_t> row_offsets{0};    // (R+1) into `sequences`
  std::vector<int64_t> sequences;         // sequence indices, row after row
  int64_t rows() const { return static_cast<int64_t>(row_offsets.size()) - 1; }
  std::span<const int64_t> row(int64_t r) const {
    return {sequences.data() + row_offsets[r], size_t(row_offsets[r + 1] - row_offsets[r])};
  }
};

// Throws when a sequence is longer than capacity (set packing_length >= max_length).
PackPlan pack_best_fit_decreasing(std::span<const int64_t> lengths, int64_t capacity, int64_t window = 0);

struct PackingReport {
  int64_t rows = 0, sequences = 0, tokens = 0, capacity = 0, batch_size = 0;
  double fill = 0;              // tokens / (rows * capacity)
  double padding_packed = 0;    // 1 - fill: the padding if every row were padded to capacity
  double padding_unpacked = 0;  // padding fraction of unpacked batches of batch_size sequences, each padded to
                                // its longest sequence (dataset order)
  std::string summary() const;
};
PackingReport packing_report(std::span<const int64_t> lengths, const PackPlan& plan, int64_t batch_size);

}  // namespace swift::data
