// data/pipeline.cpp — cache key, cache lookup, build (load + encode), cache write.
#include "data/pipeline.h"

#include <fmt/format.h>

#include <cstdio>

#include "core/error.h"
#include "data/cache.h"
#include "data/hash.h"

namespace swift::data {
namespace {

constexpr int kKeyVersion = 1;

void warn(const DatasetOptions& o, const std::string& message) {
  if (o.warn) {
    o.warn(message);
  } else {
    std::fprintf(stderr, "[swift data] warning: %s\n", message.c_str());
  }
}

nlohmann::json specs_json(const std::vector<std::string>& specs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& text : specs) {
    DatasetSpec spec = parse_dataset_spec(text);
    std::string bytes_hash;
    try {
      bytes_hash = hex64(hash_file(spec.path));
    } catch (const Error&) {
      fail("dataset '{}': no such file or not readable; check the path given to --dataset / --val_dataset",
           spec.path);
    }
    out.push_back({{"xxh64", bytes_hash},
                   {"sample", spec.sample_count ? nlohmann::json(*spec.sample_count) : nlohmann::json(nullptr)}});
  }
  return out;
}

nlohmann::json report_json(const LoadReport& r) {
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : r.files) {
    files.push_back({{"path", f.path},
                     {"layout", f.layout},
                     {"rows", f.rows},
                     {"malformed", f.malformed},
                     {"unusable", f.unusable},
                     {"samples", f.samples}});
  }
  return {{"files", files}, {"train", r.train}, {"val", r.val}};
}

LoadReport report_from_json(const nlohmann::json& j) {
  LoadReport r;
  for (const auto& f : j.value("files", nlohmann::json::array())) {
    FileReport fr;
    fr.path = f.value("path", "");
    fr.layout = f.value("layout", "");
    fr.rows = f.value("rows", int64_t{0});
    fr.malformed = f.value("malformed", int64_t{0});
    fr.unusable = f.value("unusable", int64_t{0});
    fr.samples = f.value("samples", int64_t{0});
    r.files.push_back(std::move(fr));
  }
  r.train = j.value("train", int64_t{0});
  r.val = j.value("val", int64_t{0});
  return r;
}

}  // namespace

std::string dataset_cache_key(const DataPipelineOptions& o, const std::string& split) {
  const auto& d = o.dataset;
  nlohmann::json columns = nlohmann::json::array();
  for (const auto& [from, to] : d.columns) columns.push_back({from, to});
  nlohmann::json key = {
      {"format", "swift-cpp tokenized dataset"},
      {"version", kKeyVersion},
      {"split", split},
      {"dataset", specs_json(d.dataset)},
      {"val_dataset", specs_json(d.val_dataset)},
      {"split_dataset_ratio", d.split_dataset_ratio},
      {"data_seed", d.data_seed},
      {"dataset_shuffle", d.dataset_shuffle},
      {"val_dataset_shuffle", d.val_dataset_shuffle},
      {"strict", d.strict},
      {"skip_malformed_rows", d.skip_malformed_rows},
      {"columns", columns},
      {"encode",
       {{"id", o.encode.fingerprint()},
        {"max_length", o.encode.max_length},
        {"truncation", truncation_name(o.encode.truncation)}}},
  };
  return key.dump();
}

PreparedData prepare_data(const DataPipelineOptions& o) {
  PreparedData out;
  const bool want_val = !o.dataset.val_dataset.empty() || o.dataset.split_dataset_ratio > 0.0;
  std::string key_train, key_val;
  // Prompt mode (GRPO, inference) needs the samples themselves (extra columns such as `solution`), and prompts
  // are cheap to encode: it never uses the cache.
  const bool use_cache = o.load_from_cache_file && o.encode.mode != EncodeMode::Prompt;
  if (use_cache) {
    const std::string dir = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
    key_train = dataset_cache_key(o, "train");
    out.train_cache_path = cache_file_path(dir, key_train);
    std::string why_train, why_val;
    auto train = load_cache(out.train_cache_path, key_train, &why_train);
    std::optional<CacheLoad> val;
    if (want_val) {
      key_val = dataset_cache_key(o, "val");
      out.val_cache_path = cache_file_path(dir, key_val);
      val = load_cache(out.val_cache_path, key_val, &why_val);
    }
    if (train && (!want_val || val)) {
      out.cache_hit = true;
      out.load_report = report_from_json(train->meta.value("load", nlohmann::json::object()));
      out.train = std::make_shared<const TokenizedDataset>(std::move(train->data));
      if (val) out.val = std::make_shared<const TokenizedDataset>(std::move(val->data));
      return out;
    }
    if (!train && why_train != "absent") {
      warn(o.dataset, fmt::format("dataset cache '{}' is unusable ({}); rebuilding it", out.train_cache_path, why_train));
    }
    if (want_val && !val && why_val != "absent") {
      warn(o.dataset, fmt::format("dataset cache '{}' is unusable ({}); rebuilding it", out.val_cache_path, why_val));
    }
  }
  DatasetSplits splits = load_datasets(o.dataset);
  EncodeOptions enc = o.encode;
  enc.num_threads = o.dataset.dataset_num_proc;
  enc.strict = o.dataset.strict;
  auto train = std::make_shared<TokenizedDataset>(encode_samples(splits.train, enc));
  if (!o.dataset.dataset.empty() && train->size() == 0) {
    fail("no training sequences after tokenization ({}); raise --max_length, or use --truncation_strategy left or "
         "right",
         train->stats().summary());
  }
  if (train->stats().deleted + train->stats().failed + train->stats().untrained > 0) {
    warn(o.dataset, "train: " + train->stats().summary());
  }
  out.train = train;
  if (want_val) out.val = std::make_shared<const TokenizedDataset>(encode_samples(splits.val, enc));
  out.load_report = splits.report;
  if (use_cache) {
    try {
      nlohmann::json meta = {{"load", report_json(splits.report)}, {"encode", out.train->stats().to_json()}};
      write_cache(out.train_cache_path, key_train, meta, *out.train);
      if (want_val) {
        meta["encode"] = out.val->stats().to_json();
        write_cache(out.val_cache_path, key_val, meta, *out.val);
      }
    } catch (const Error& e) {
      warn(o.dataset, fmt::format("could not write the dataset cache: {}", e.what()));
    }
  }
  out.train_samples = std::move(splits.train);
  out.val_samples = std::move(splits.val);
  return out;
}

std::string PreparedData::summary() const {
  std::string s = load_report.summary();
  if (train) s += "\ntrain: " + train->stats().summary();
  if (val) s += "\nval: " + val->stats().summary();
  if (cache_hit) s += "\n(loaded from the tokenized cache " + train_cache_path + ")";
  return s;
}

std::shared_ptr<const PackPlan> make_pack_plan(const TokenizedDataset& data, int64_t packing_length, int64_t window) {
  auto lengths = data.lengths();
  return std::make_shared<const PackPlan>(pack_best_fit_decreasing(lengths, packing_length, window));
}

}  // namespace swift::data
