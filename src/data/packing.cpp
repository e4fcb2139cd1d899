// data/packing.cpp — best-fit decreasing over an ordered set of (free space, row) pairs.
#include "data/packing.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "core/error.h"

namespace swift::data {
namespace {

// Packs `items` (indices into lengths, already sorted longest first) into rows appended to `rows`.
void best_fit(std::span<const int64_t> lengths, const std::vector<int64_t>& items, int64_t capacity,
              std::vector<std::vector<int64_t>>& rows, std::vector<int64_t>& used) {
  std::set<std::pair<int64_t, int64_t>> open;  // (free space, row index)
  for (size_t r = 0; r < rows.size(); ++r) open.insert({capacity - used[r], static_cast<int64_t>(r)});
  for (int64_t item : items) {
    int64_t len = lengths[static_cast<size_t>(item)];
    auto it = open.lower_bound({len, -1});
    int64_t r;
    if (it == open.end()) {
      r = static_cast<int64_t>(rows.size());
      rows.emplace_back();
      used.push_back(0);
    } else {
      r = it->second;
      open.erase(it);
    }
    rows[static_cast<size_t>(r)].push_back(item);
    used[static_cast<size_t>(r)] += len;
    open.insert({capacity - used[static_cast<size_t>(r)], r});
  }
}

std::vector<int64_t> sorted_longest_first(std::span<const int64_t> lengths, std::vector<int64_t> items) {
  std::stable_sort(items.begin(), items.end(), [&](int64_t a, int64_t b) {
    return lengths[static_cast<size_t>(a)] > lengths[static_cast<size_t>(b)];
  });
  return items;
}

}  // namespace

PackPlan pack_best_fit_decreasing(std::span<const int64_t> lengths, int64_t capacity, int64_t window) {
  if (capacity <= 0) fail("--packing_length {}: expected a positive number of tokens", capacity);
  const int64_t n = static_cast<int64_t>(lengths.size());
  for (int64_t i = 0; i < n; ++i) {
    if (lengths[static_cast<size_t>(i)] > capacity || lengths[static_cast<size_t>(i)] <= 0) {
      fail("packing: sequence {} has {} tokens but rows hold {}; set --packing_length >= --max_length", i,
           lengths[static_cast<size_t>(i)], capacity);
    }
  }
  std::vector<std::vector<int64_t>> rows;
  if (window <= 0 || window >= n) {
    std::vector<int64_t> all(static_cast<size_t>(n));
    std::iota(all.begin(), all.end(), int64_t{0});
    std::vector<int64_t> used;
    best_fit(lengths, sorted_longest_first(lengths, std::move(all)), capacity, rows, used);
  } else {
    // ms-swift: pack each window of `window` sequences plus the items of the previous window's last row; all
    // rows but the last are final.
    std::vector<int64_t> carry;
    for (int64_t begin = 0; begin < n; begin += window) {
      std::vector<int64_t> items = carry;
      for (int64_t i = begin; i < std::min(n, begin + window); ++i) items.push_back(i);
      std::vector<std::vector<int64_t>> part;
      std::vector<int64_t> used;
      best_fit(lengths, sorted_longest_first(lengths, std::move(items)), capacity, part, used);
      bool last = begin + window >= n;
      if (!last && !part.empty()) {
        carry = std::move(part.back());
        part.pop_back();
      } else {
        carry.clear();
      }
      for (auto& r : part) rows.push_back(std::move(r));
    }
  }
  PackPlan plan;
  plan.capacity = capacity;
  plan.sequences.reserve(static_cast<size_t>(n));
  for (const auto& r : rows) {
    plan.sequences.insert(plan.sequences.end(), r.begin(), r.end());
    plan.row_offsets.push_back(static_cast<int64_t>(plan.sequences.size()));
  }
  return plan;
}

PackingReport packing_report(std::span<const int64_t> lengths, const PackPlan& plan, int64_t batch_size) {
  PackingReport r;
  r.rows = plan.rows();
  r.sequences = static_cast<int64_t>(plan.sequences.size());
  r.capacity = plan.capacity;
  r.batch_size = std::max<int64_t>(batch_size, 1);
  r.tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t{0});
  if (r.rows > 0 && r.capacity > 0) {
    r.fill = static_cast<double>(r.tokens) / (static_cast<double>(r.rows) * static_cast<double>(r.capacity));
    r.padding_packed = 1.0 - r.fill;
  }
  int64_t padded = 0;
  for (size_t b = 0; b < lengths.size(); b += static_cast<size_t>(r.batch_size)) {
    size_t e = std::min(lengths.size(), b + static_cast<size_t>(r.batch_size));
    int64_t longest = *std::max_element(lengths.begin() + static_cast<std::ptrdiff_t>(b),
                                        lengths.begin() + static_cast<std::ptrdiff_t>(e));
    padded += longest * static_cast<int64_t>(e - b);
  }
  if (padded > 0) r.padding_unpacked = 1.0 - static_cast<double>(r.tokens) / static_cast<double>(padded);
  return r;
}

std::string PackingReport::summary() const {
  return fmt::format("packed {} sequences ({} tokens) into {} rows of {}: {:.1f}% full ({:.1f}% padding if padded "
                     "to packing_length); unpacked batches of {} padded to their longest would be {:.1f}% padding",
                     sequences, tokens, rows, capacity, 100.0 * fill, 100.0 * padding_packed, batch_size,
                     100.0 * padding_unpacked);
}

}  // namespace swift::data
