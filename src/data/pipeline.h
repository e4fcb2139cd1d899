// data/pipeline.h — the trainer's one call: datasets -> samples -> tokenized train/val sets, through the
// on-disk cache when --load_from_cache_file is on.
//
//   DataPipelineOptions o;  o.dataset = {...};  o.encode = {...};  o.load_from_cache_file = true;
//   PreparedData d = prepare_data(o);
//   auto plan = packing ? make_pack_plan(*d.train, packing_length) : nullptr;
//   DataLoader loader(d.train, loader_options, plan);
//
// Invariants:
//  - The tokenized sets are identical whether built or loaded from the cache, and for any dataset_num_proc.
//  - A cache hit reads no dataset rows (only hashes the files for the key); an unusable cache file (corrupt,
//    truncated, other version) is reported through the warning callback and rebuilt.
//  - Failure to write the cache is a warning, never a failed run.
//  - Prompt mode (GRPO rollouts, inference) never uses the cache: its callers need the samples (extra columns
//    such as `solution` for the reward functions), which a cache hit does not load.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/encode.h"
#include "data/packing.h"

namespace swift::data {

struct DataPipelineOptions {
  DatasetOptions dataset;            // files, sampling, split, shuffle, threads (dataset_num_proc), warnings
  EncodeOptions encode;              // mode, encoder, max_length, truncation (threads/strict come from dataset)
  bool load_from_cache_file = false; // --load_from_cache_file: read and write the tokenized cache
  std::string cache_dir;             // --cache_dir; empty: default_cache_dir()
};

struct PreparedData {
  std::shared_ptr<const TokenizedDataset> train;
  std::shared_ptr<const TokenizedDataset> val;  // null when there is no validation data
  LoadReport load_report;
  bool cache_hit = false;
  std::string train_cache_path, val_cache_path;  // when caching
  // The normalized samples (not on a cache hit): GRPO's extra columns, inference prompts, reports.
  std::vector<Sample> train_samples, val_samples;
  std::string summary() const;
};

PreparedData prepare_data(const DataPipelineOptions& options);

// The cache key text of one split ("train" or "val"); hashes the dataset files.
std::string dataset_cache_key(const DataPipelineOptions& options, const std::string& split);

// Packs a tokenized set into rows of packing_length (best-fit decreasing, data/packing.h).
std::shared_ptr<const PackPlan> make_pack_plan(const TokenizedDataset& data, int64_t packing_length,
                                               int64_t window = 0);

}  // namespace swift::data
