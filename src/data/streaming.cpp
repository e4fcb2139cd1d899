// data/streaming.cpp — the streaming pipeline: files -> chunks of rows -> samples -> sequences -> shuffle buffer
// -> packing rounds -> rank deal -> batches; and the optional prefetching producer thread.
#include "data/streaming.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "core/error.h"
#include "data/packing.h"
#include "data/random.h"

namespace swift::data {
namespace {

struct Seq {
  std::vector<int32_t> ids, rejected_ids;
  std::vector<uint8_t> mask, rejected_mask;
  int64_t serial = 0;  // position in the pass's sequence stream
  int64_t sample = 0;  // position in the pass's sample stream
  int8_t label = -1;
  int64_t length() const { return static_cast<int64_t>(ids.size() + rejected_ids.size()); }
};
using Unit = std::vector<Seq>;

void add_stats(EncodeStats& into, const EncodeStats& s) {
  into.samples += s.samples;
  into.sequences += s.sequences;
  into.deleted += s.deleted;
  into.truncated += s.truncated;
  into.split_chunks += s.split_chunks;
  into.untrained += s.untrained;
  into.failed += s.failed;
  into.tokens += s.tokens;
  into.target_tokens += s.target_tokens;
  into.longest_input = std::max(into.longest_input, s.longest_input);
  for (const auto& p : s.problems) {
    if (into.problems.size() < 5) into.problems.push_back(p);
  }
}

}  // namespace

class StreamingLoader::Pipeline {
 public:
  Pipeline(const DatasetOptions& d, const EncodeOptions& e, const StreamingOptions& o, int64_t epoch)
      : d_(d), e_(e), o_(o), epoch_(epoch), rng_(derive_seed(d.data_seed, static_cast<uint64_t>(epoch), 0x737472ull)) {
    for (const auto& text : d.dataset) specs_.push_back(parse_dataset_spec(text));
    e_.num_threads = d.dataset_num_proc;
    e_.strict = d.strict;
  }

  std::optional<Batch> next_batch() {
    std::vector<Seq> seqs;
    int64_t units = 0;
    while (units < o_.batch_size) {
      auto u = next_unit();
      if (!u) break;
      if (unit_index_++ % o_.world_size != o_.rank) continue;
      for (auto& s : *u) seqs.push_back(std::move(s));
      ++units;
    }
    if (seqs.empty()) return std::nullopt;
    const bool preference = e_.mode == EncodeMode::Preference;
    TokenizedDataset::Parts parts;
    if (preference) parts.rejected_offsets.push_back(0);
    std::vector<int64_t> order;
    for (auto& s : seqs) {
      order.push_back(static_cast<int64_t>(order.size()));
      parts.ids.insert(parts.ids.end(), s.ids.begin(), s.ids.end());
      parts.loss_mask.insert(parts.loss_mask.end(), s.mask.begin(), s.mask.end());
      parts.offsets.push_back(static_cast<int64_t>(parts.ids.size()));
      parts.sample_index.push_back(s.sample);
      parts.label.push_back(s.label);
      if (preference) {
        parts.rejected_ids.insert(parts.rejected_ids.end(), s.rejected_ids.begin(), s.rejected_ids.end());
        parts.rejected_loss_mask.insert(parts.rejected_loss_mask.end(), s.rejected_mask.begin(), s.rejected_mask.end());
        parts.rejected_offsets.push_back(static_cast<int64_t>(parts.rejected_ids.size()));
      }
    }
    TokenizedDataset batch_data = TokenizedDataset::from_parts(std::move(parts));
    Batch b = make_batch(batch_data, order);
    for (auto& k : b.sequences) k = seqs[static_cast<size_t>(k)].serial;
    b.epoch = epoch_;
    b.step = step_++;
    return b;
  }

  EncodeStats stats() const {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return stats_;
  }

 private:
  // Reads, converts and encodes the next chunk of rows into encoded_. False when every file is exhausted.
  bool read_chunk() {
    for (;;) {
      if (file_ >= specs_.size()) return false;
      const DatasetSpec& spec = specs_[file_];
      if (!stream_) {
        ReadOptions ro;
        ro.skip_malformed = d_.skip_malformed_rows;
        ro.num_threads = d_.dataset_num_proc;
        stream_ = std::make_unique<RowStream>(spec.path, ro);
        plan_.reset();
        taken_ = 0;
        report_ = FileReport{};
      }
      bool full = spec.sample_count && taken_ >= *spec.sample_count;
      std::vector<RawRow> rows = full ? std::vector<RawRow>{} : stream_->next(o_.chunk_rows);
      if (rows.empty()) {
        finish_file();
        continue;
      }
      if (!plan_) {
        std::vector<std::string> columns;
        for (const auto& r : rows) {
          for (auto it = r.value.begin(); it != r.value.end(); ++it) {
            if (std::find(columns.begin(), columns.end(), it.key()) == columns.end()) columns.push_back(it.key());
          }
        }
        plan_ = plan_format(columns, d_.columns);
      }
      std::vector<Sample> samples = convert_rows(rows, *plan_, spec.path, d_, static_cast<int>(file_), &report_);
      if (spec.sample_count) {
        samples.resize(static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(samples.size()),
                                                             *spec.sample_count - taken_)));
      }
      taken_ += static_cast<int64_t>(samples.size());
      const int64_t first_sample = sample_serial_;
      sample_serial_ += static_cast<int64_t>(samples.size());
      TokenizedDataset enc = encode_samples(samples, e_);
      {
        std::lock_guard<std::mutex> lock(stats_mutex_);
        add_stats(stats_, enc.stats());
      }
      for (int64_t i = 0; i < enc.size(); ++i) {
        Seq s;
        s.ids.assign(enc.ids(i).begin(), enc.ids(i).end());
        s.mask.assign(enc.loss_mask(i).begin(), enc.loss_mask(i).end());
        if (enc.has_rejected()) {
          s.rejected_ids.assign(enc.rejected_ids(i).begin(), enc.rejected_ids(i).end());
          s.rejected_mask.assign(enc.rejected_loss_mask(i).begin(), enc.rejected_loss_mask(i).end());
        }
        s.serial = serial_++;
        s.sample = first_sample + enc.sample_index(i);
        s.label = enc.label(i);
        encoded_.push_back(std::move(s));
      }
      return true;
    }
  }

  void finish_file() {
    const std::string& path = specs_[file_].path;
    if (taken_ == 0) {
      std::string first = report_.problems.empty() ? (stream_->problems().empty() ? "the file has no rows"
                                                                                  : stream_->problems()[0].message)
                                                   : report_.problems[0].message;
      fail("dataset '{}': no usable samples in the stream; first problem: {}", path, first);
    }
    int64_t malformed = stream_->malformed();
    if ((report_.unusable > 0 || malformed > 0) && epoch_warned_.insert(file_).second) {
      std::string message = fmt::format("dataset '{}': dropped {} malformed and {} unusable rows while streaming", path,
                                        malformed, report_.unusable);
      if (d_.warn) {
        d_.warn(message);
      } else {
        std::fprintf(stderr, "[swift data] warning: %s\n", message.c_str());
      }
    }
    stream_.reset();
    ++file_;
  }

  // The next sequence after the shuffle buffer (Hugging Face's BufferShuffledExamplesIterable).
  std::optional<Seq> next_sequence() {
    const bool shuffle = d_.dataset_shuffle && o_.shuffle_buffer_size > 1;
    for (;;) {
      if (encoded_.empty() && !source_done_) {
        if (!read_chunk()) source_done_ = true;
        continue;
      }
      if (!encoded_.empty()) {
        Seq x = std::move(encoded_.front());
        encoded_.pop_front();
        if (!shuffle) return x;
        if (static_cast<int64_t>(buffer_.size()) == o_.shuffle_buffer_size) {
          size_t i = static_cast<size_t>(rng_.below(buffer_.size()));
          Seq out = std::move(buffer_[i]);
          buffer_[i] = std::move(x);
          return out;
        }
        buffer_.push_back(std::move(x));
        continue;
      }
      if (!flushing_) {
        rng_.shuffle(buffer_);
        flushing_ = true;
      }
      if (flush_pos_ < buffer_.size()) return std::move(buffer_[flush_pos_++]);
      return std::nullopt;
    }
  }

  std::optional<Unit> next_unit() {
    if (o_.packing_length <= 0) {
      auto s = next_sequence();
      if (!s) return std::nullopt;
      Unit u;
      u.push_back(std::move(*s));
      return u;
    }
    while (ready_.empty()) {
      if (packing_done_) return std::nullopt;
      std::vector<Seq> items = std::move(carry_);
      carry_.clear();
      bool finished = false;
      for (int64_t k = 0; k < o_.packing_interval; ++k) {
        auto s = next_sequence();
        if (!s) {
          finished = true;
          break;
        }
        items.push_back(std::move(*s));
      }
      if (items.empty()) {
        packing_done_ = true;
        return std::nullopt;
      }
      std::vector<int64_t> lengths;
      for (const auto& s : items) lengths.push_back(s.length());
      PackPlan plan = pack_best_fit_decreasing(lengths, o_.packing_length);
      for (int64_t r = 0; r < plan.rows(); ++r) {
        Unit u;
        for (int64_t i : plan.row(r)) u.push_back(std::move(items[static_cast<size_t>(i)]));
        if (!finished && r == plan.rows() - 1) {
          carry_ = std::move(u);
        } else {
          ready_.push_back(std::move(u));
        }
      }
      if (finished) packing_done_ = true;
    }
    Unit u = std::move(ready_.front());
    ready_.pop_front();
    return u;
  }

  const DatasetOptions& d_;
  EncodeOptions e_;
  const StreamingOptions& o_;
  const int64_t epoch_;
  int64_t step_ = 0;
  std::vector<DatasetSpec> specs_;
  size_t file_ = 0;
  std::unique_ptr<RowStream> stream_;
  std::optional<FormatPlan> plan_;
  FileReport report_;
  int64_t taken_ = 0, serial_ = 0, sample_serial_ = 0, unit_index_ = 0;
  std::deque<Seq> encoded_;
  bool source_done_ = false;
  Rng rng_;
  std::vector<Seq> buffer_;
  bool flushing_ = false;
  size_t flush_pos_ = 0;
  std::deque<Unit> ready_;
  std::vector<Seq> carry_;
  bool packing_done_ = false;
  std::set<size_t> epoch_warned_;
  mutable std::mutex stats_mutex_;
  EncodeStats stats_;
};

StreamingLoader::StreamingLoader(DatasetOptions data, EncodeOptions encode, StreamingOptions options)
    : data_(std::move(data)), encode_(encode), options_(options) {
  if (data_.dataset.empty()) fail("--streaming: no --dataset given");
  if (data_.split_dataset_ratio > 0.0) {
    fail("--split_dataset_ratio needs random access and cannot split a streamed dataset; pass --val_dataset instead");
  }
  if (options_.batch_size <= 0) fail("--per_device_train_batch_size {}: expected a positive number", options_.batch_size);
  if (options_.world_size <= 0 || options_.rank < 0 || options_.rank >= options_.world_size) {
    fail("streaming loader: rank {} of world size {} is invalid", options_.rank, options_.world_size);
  }
  options_.chunk_rows = std::max<int64_t>(options_.chunk_rows, 1);
  options_.packing_interval = std::max<int64_t>(options_.packing_interval, 1);
  for (const auto& text : data_.dataset) parse_dataset_spec(text);  // early errors for bad specs
}

StreamingLoader::~StreamingLoader() { stop_producer(); }

void StreamingLoader::stop_producer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (producer_.joinable()) producer_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = false;
  queue_.clear();
  error_ = nullptr;
}

void StreamingLoader::start(int64_t epoch, int64_t step) {
  stop_producer();
  pipeline_ = std::make_unique<Pipeline>(data_, encode_, options_, epoch);
  for (int64_t s = 0; s < step; ++s) {
    if (!pipeline_->next_batch()) fail("--streaming: cannot resume at step {} of epoch {}: the pass has {} steps", step, epoch, s);
  }
  epoch_ = epoch;
  step_ = step;
  started_ = true;
  if (options_.prefetch > 0) {
    producer_ = std::thread([this] {
      for (;;) {
        {
          std::unique_lock<std::mutex> lock(mutex_);
          cv_.wait(lock, [&] { return stop_ || static_cast<int>(queue_.size()) < options_.prefetch; });
          if (stop_) return;
        }
        std::optional<Batch> b;
        try {
          b = pipeline_->next_batch();
        } catch (...) {
          std::lock_guard<std::mutex> lock(mutex_);
          error_ = std::current_exception();
          cv_.notify_all();
          return;
        }
        bool end = !b.has_value();
        {
          std::lock_guard<std::mutex> lock(mutex_);
          queue_.push_back(std::move(b));
        }
        cv_.notify_all();
        if (end) return;
      }
    });
  }
}

std::optional<Batch> StreamingLoader::next() {
  if (!started_) start(epoch_, step_);
  std::optional<Batch> b;
  if (options_.prefetch <= 0) {
    b = pipeline_->next_batch();
  } else {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !queue_.empty() || error_; });
    if (queue_.empty()) std::rethrow_exception(error_);
    b = std::move(queue_.front());
    if (b) queue_.pop_front();  // the end marker stays: later calls keep returning nullopt
    cv_.notify_all();
  }
  if (b) ++step_;
  return b;
}

EncodeStats StreamingLoader::stats() const { return pipeline_ ? pipeline_->stats() : EncodeStats{}; }

}  // namespace swift::data
