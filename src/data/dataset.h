// data/dataset.h — --dataset / --val_dataset loading: files to normalized Samples, `path#N` sampling,
// --split_dataset_ratio, shuffling, with ms-swift's semantics (swift/llm/dataset/loader.py, utils.py).
//
// Per dataset spec, in command-line order, with one Rng(data_seed) consumed in that order:
//  - rows are read (data/readers.h) and converted (data/formats.h) in parallel over dataset_num_proc threads;
//    unusable rows are dropped and counted (or, with strict, the first one is an error);
//  - `#N` sampling: N < rows draws N rows without replacement (in random order); N > rows repeats the whole
//    file N / rows times and draws the remaining N % rows without replacement; without dataset_shuffle the draw
//    takes the first rows in file order instead;
//  - split_dataset_ratio r in (0, 1) with no --val_dataset: val = max(floor(min(rows, N) * r), 1) rows drawn
//    from a permutation of the file, the train sample (N - val) from the remaining rows;
//  - --val_dataset files are taken whole (or sampled by their #N) as validation data;
//  - the concatenated train set is shuffled with data_seed when dataset_shuffle (val only with
//    val_dataset_shuffle).
//
// Invariants:
//  - The result (samples, order, report) depends only on the files' contents and the options, never on
//    dataset_num_proc.
//  - An empty dataset after filtering is an error naming the file and its first problem.
//  - Errors name the file and line, the field and what was expected, and the option that changes the behaviour.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "data/formats.h"
#include "data/random.h"
#include "data/readers.h"
#include "data/sample.h"

namespace swift::data {

struct DatasetSpec {
  std::string path;
  std::optional<int64_t> sample_count;  // `#N`
};
// "path" or "path#N" (N a positive integer). ms-swift's ":subset" applies to hub datasets only and is not parsed.
DatasetSpec parse_dataset_spec(const std::string& text);

struct DatasetOptions {
  std::vector<std::string> dataset;      // --dataset (each "path[#N]")
  std::vector<std::string> val_dataset;  // --val_dataset
  double split_dataset_ratio = 0.0;      // --split_dataset_ratio (ms-swift >= 3.6 default)
  uint64_t data_seed = 42;               // --data_seed
  int dataset_num_proc = 1;              // --dataset_num_proc: threads for parsing, converting, tokenizing
  bool dataset_shuffle = true;           // --dataset_shuffle
  bool val_dataset_shuffle = false;      // --val_dataset_shuffle
  bool strict = false;                   // --strict: an unusable row is an error instead of being dropped
  bool skip_malformed_rows = false;      // drop rows with broken syntax (bad JSON / CSV) instead of failing
  ColumnMap columns;                     // --columns
  // Where warnings go (dropped rows, ignored options); nullptr: standard error.
  std::function<void(const std::string&)> warn;
};

struct FileReport {
  std::string path;
  std::string layout;          // "jsonl, query/response (question->query, answer->response)"
  int64_t rows = 0;            // rows read (malformed ones included)
  int64_t malformed = 0;       // dropped for broken syntax (skip_malformed_rows)
  int64_t unusable = 0;        // dropped by conversion (no usable fields, bad roles, ...)
  int64_t samples = 0;         // usable samples
  std::vector<RowProblem> problems;  // the first few dropped rows and why
};

struct LoadReport {
  std::vector<FileReport> files;
  int64_t train = 0, val = 0;
  std::string summary() const;  // one line per file and the totals
};

struct DatasetSplits {
  std::vector<Sample> train, val;
  LoadReport report;
};

// Rows of one file to samples in parallel (dataset_num_proc threads), in row order; unusable rows are counted in
// `report` (unusable, problems) or, with strict, the first one throws naming path:line.
std::vector<Sample> convert_rows(const std::vector<RawRow>& rows, const FormatPlan& plan, const std::string& path,
                                 const DatasetOptions& options, int file_ordinal, FileReport* report);

// One file to samples, no sampling. Fills `report`.
std::vector<Sample> load_file_samples(const std::string& path, const DatasetOptions& options, int file_ordinal,
                                      FileReport* report);

// All of --dataset and --val_dataset, sampled, split and shuffled.
DatasetSplits load_datasets(const DatasetOptions& options);

// ms-swift's sample_dataset as indices into n rows: `count` rows (repeats, then a draw without replacement).
std::vector<int64_t> sample_indices(int64_t n, int64_t count, bool shuffle, Rng& rng);

}  // namespace swift::data
