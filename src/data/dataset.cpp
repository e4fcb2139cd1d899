// data/dataset.cpp — files to Samples, #N sampling, validation split and shuffle (ms-swift post_process order).
#include "data/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "core/error.h"
#include "data/parallel.h"

namespace swift::data {
namespace {

constexpr size_t kMaxProblems = 5;

void emit_warning(const DatasetOptions& options, const std::string& message) {
  if (options.warn) {
    options.warn(message);
  } else {
    std::fprintf(stderr, "[swift data] warning: %s\n", message.c_str());
  }
}

std::string row_location(const std::string& path, const RawRow& row) {
  if (row.line > 0) return fmt::format("{}:{}", path, row.line);
  return fmt::format("{}:row {}", path, row.index + 1);
}

std::string problem_text(const RowProblem& p) {
  return p.line > 0 ? fmt::format("line {}: {}", p.line, p.message) : p.message;
}

template <typename T>
std::vector<T> select(const std::vector<T>& items, const std::vector<int64_t>& indices) {
  std::vector<T> out;
  out.reserve(indices.size());
  for (int64_t i : indices) out.push_back(items[static_cast<size_t>(i)]);
  return out;
}

}  // namespace

DatasetSpec parse_dataset_spec(const std::string& text) {
  DatasetSpec spec;
  spec.path = text;
  auto hash = text.rfind('#');
  if (hash != std::string::npos && hash + 1 < text.size()) {
    std::string count = text.substr(hash + 1);
    bool digits = std::all_of(count.begin(), count.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) {
      int64_t n = 0;
      try {
        n = std::stoll(count);
      } catch (const std::exception&) {
        fail("--dataset '{}': the sample count '{}' is too large", text, count);
      }
      if (n <= 0) fail("--dataset '{}': the sample count after '#' must be positive", text);
      spec.path = text.substr(0, hash);
      spec.sample_count = n;
    }
  }
  if (spec.path.empty()) fail("--dataset '{}': no path before '#'", text);
  return spec;
}

std::vector<int64_t> sample_indices(int64_t n, int64_t count, bool shuffle, Rng& rng) {
  std::vector<int64_t> idx;
  if (n <= 0 || count <= 0) return idx;
  idx.reserve(static_cast<size_t>(count));
  int64_t repeats = count / n, remain = count % n;
  for (int64_t r = 0; r < repeats; ++r) {
    for (int64_t i = 0; i < n; ++i) idx.push_back(i);
  }
  if (remain > 0) {
    if (shuffle) {
      auto perm = rng.permutation(n);
      idx.insert(idx.end(), perm.begin(), perm.begin() + remain);
    } else {
      for (int64_t i = 0; i < remain; ++i) idx.push_back(i);
    }
  }
  return idx;
}

std::vector<Sample> convert_rows(const std::vector<RawRow>& rows, const FormatPlan& plan, const std::string& path,
                                 const DatasetOptions& options, int file_ordinal, FileReport* report) {
  const int64_t n = static_cast<int64_t>(rows.size());
  std::vector<std::optional<Sample>> converted(static_cast<size_t>(n));
  std::vector<std::string> errors(static_cast<size_t>(n));
  parallel_for(n, options.dataset_num_proc, 512, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const RawRow& row = rows[static_cast<size_t>(i)];
      uint64_t seed = derive_seed(options.data_seed, static_cast<uint64_t>(file_ordinal),
                                  static_cast<uint64_t>(row.index));
      auto& slot = converted[static_cast<size_t>(i)];
      slot = convert_row(row.value, plan, seed, &errors[static_cast<size_t>(i)]);
      if (slot) slot->source = row_location(path, row);
    }
  });
  std::vector<Sample> samples;
  samples.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    auto& slot = converted[static_cast<size_t>(i)];
    if (slot) {
      samples.push_back(std::move(*slot));
      continue;
    }
    const RawRow& row = rows[static_cast<size_t>(i)];
    if (options.strict) {
      fail("dataset '{}': {}; fix the row, or drop such rows with --strict false", row_location(path, row),
           errors[static_cast<size_t>(i)]);
    }
    if (!report) continue;
    ++report->unusable;
    if (report->problems.size() < kMaxProblems) {
      report->problems.push_back({row.line, row.line > 0 ? errors[static_cast<size_t>(i)]
                                                         : fmt::format("row {}: {}", row.index + 1,
                                                                       errors[static_cast<size_t>(i)])});
    }
  }
  return samples;
}

std::vector<Sample> load_file_samples(const std::string& path, const DatasetOptions& options, int file_ordinal,
                                      FileReport* report) {
  ReadOptions ro;
  ro.skip_malformed = options.skip_malformed_rows;
  ro.num_threads = options.dataset_num_proc;
  RawTable table = read_table(path, ro);
  FileReport rep;
  rep.path = path;
  rep.rows = static_cast<int64_t>(table.rows.size()) + table.malformed;
  rep.malformed = table.malformed;
  rep.problems = table.problems;
  FormatPlan plan = plan_format(table.columns, options.columns);
  rep.layout = fmt::format("{}, {}", file_format_name(table.format), plan.describe());

  std::vector<Sample> samples = convert_rows(table.rows, plan, path, options, file_ordinal, &rep);
  rep.samples = static_cast<int64_t>(samples.size());
  table.rows.clear();
  if (samples.empty()) {
    std::string first = rep.problems.empty() ? "the file has no rows" : problem_text(rep.problems.front());
    fail("dataset '{}': no usable samples after filtering ({} rows read, layout {}); first problem: {}", path,
         rep.rows, rep.layout, first);
  }
  if (rep.unusable + rep.malformed > 0) {
    emit_warning(options, fmt::format("dataset '{}': dropped {} malformed and {} unusable of {} rows (first: {}){}",
                                      path, rep.malformed, rep.unusable, rep.rows, problem_text(rep.problems.front()),
                                      rep.unusable > 0 ? "; pass --strict true to stop at the first bad row" : ""));
  }
  if (report) *report = std::move(rep);
  return samples;
}

DatasetSplits load_datasets(const DatasetOptions& options) {
  if (options.dataset.empty() && options.val_dataset.empty()) {
    fail("no dataset: pass --dataset <file.jsonl|.json|.csv|.txt>[#N] (several may follow one --dataset)");
  }
  if (!(options.split_dataset_ratio >= 0.0 && options.split_dataset_ratio <= 1.0)) {
    fail("--split_dataset_ratio {}: expected a value in [0, 1]", options.split_dataset_ratio);
  }
  double ratio = options.split_dataset_ratio;
  if (!options.val_dataset.empty() && ratio > 0.0) {
    emit_warning(options, "--split_dataset_ratio is ignored because --val_dataset is given");
    ratio = 0.0;
  }
  DatasetSplits out;
  Rng rng(options.data_seed);
  int ordinal = 0;
  for (const auto& text : options.dataset) {
    DatasetSpec spec = parse_dataset_spec(text);
    FileReport rep;
    std::vector<Sample> rows = load_file_samples(spec.path, options, ordinal++, &rep);
    const int64_t n = static_cast<int64_t>(rows.size());
    const int64_t count = spec.sample_count.value_or(n);
    if (ratio == 0.0) {
      auto idx = sample_indices(n, count, options.dataset_shuffle, rng);
      auto picked = select(rows, idx);
      out.train.insert(out.train.end(), std::make_move_iterator(picked.begin()), std::make_move_iterator(picked.end()));
    } else if (ratio == 1.0) {
      if (count > n) fail("--dataset '{}': #{} asks for more validation rows than the {} it has", text, count, n);
      auto idx = sample_indices(n, count, options.dataset_shuffle, rng);
      auto picked = select(rows, idx);
      out.val.insert(out.val.end(), std::make_move_iterator(picked.begin()), std::make_move_iterator(picked.end()));
    } else {
      int64_t base = std::min(n, count);
      int64_t val_count = std::max<int64_t>(static_cast<int64_t>(static_cast<double>(base) * ratio), 1);
      int64_t train_count = count - val_count;
      if (train_count <= 0 || val_count >= n) {
        fail("--dataset '{}': {} rows are too few to split with --split_dataset_ratio {} ({} for validation); use a "
             "smaller ratio or pass --val_dataset",
             text, n, ratio, val_count);
      }
      std::vector<int64_t> perm;
      if (options.dataset_shuffle) {
        perm = rng.permutation(n);
      } else {
        perm.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
      }
      std::vector<int64_t> val_idx(perm.begin(), perm.begin() + val_count);
      std::vector<int64_t> rest(perm.begin() + val_count, perm.end());
      auto val = select(rows, val_idx);
      auto rest_rows = select(rows, rest);
      auto train_idx = sample_indices(static_cast<int64_t>(rest_rows.size()), train_count, options.dataset_shuffle, rng);
      auto train = select(rest_rows, train_idx);
      out.val.insert(out.val.end(), std::make_move_iterator(val.begin()), std::make_move_iterator(val.end()));
      out.train.insert(out.train.end(), std::make_move_iterator(train.begin()), std::make_move_iterator(train.end()));
    }
    out.report.files.push_back(std::move(rep));
  }
  for (const auto& text : options.val_dataset) {
    DatasetSpec spec = parse_dataset_spec(text);
    FileReport rep;
    std::vector<Sample> rows = load_file_samples(spec.path, options, ordinal++, &rep);
    const int64_t n = static_cast<int64_t>(rows.size());
    const int64_t count = spec.sample_count.value_or(n);
    auto idx = sample_indices(n, count, options.dataset_shuffle, rng);
    auto picked = select(rows, idx);
    out.val.insert(out.val.end(), std::make_move_iterator(picked.begin()), std::make_move_iterator(picked.end()));
    out.report.files.push_back(std::move(rep));
  }
  if (options.dataset_shuffle && out.train.size() > 1) {
    Rng shuffle_rng(derive_seed(options.data_seed, 0x7261696eull));  // "rain": the train shuffle stream
    shuffle_rng.shuffle(out.train);
  }
  if (options.val_dataset_shuffle && out.val.size() > 1) {
    Rng shuffle_rng(derive_seed(options.data_seed, 0x76616cull));  // "val"
    shuffle_rng.shuffle(out.val);
  }
  if (!options.dataset.empty() && out.train.empty()) {
    fail("--dataset: no training samples left after sampling and splitting; lower --split_dataset_ratio");
  }
  out.report.train = static_cast<int64_t>(out.train.size());
  out.report.val = static_cast<int64_t>(out.val.size());
  return out;
}

std::string LoadReport::summary() const {
  std::string s;
  for (const auto& f : files) {
    s += fmt::format("{}: {} rows, {} samples [{}]", f.path, f.rows, f.samples, f.layout);
    if (f.malformed + f.unusable > 0) s += fmt::format(", dropped {} malformed + {} unusable", f.malformed, f.unusable);
    s += "\n";
  }
  s += fmt::format("train {} samples, val {} samples", train, val);
  return s;
}

}  // namespace swift::data
