// data/streaming.h — --streaming: rows are read, converted and tokenized while training, with bounded memory,
// as ms-swift's streaming datasets (Hugging Face IterableDataset) do.
//
// One pass over --dataset (files in order) is one epoch. Per pass:
//  - rows are read chunk_rows at a time (data/readers.h RowStream), converted (the layout is decided from the
//    first chunk's columns, as an IterableDataset resolves its features from its first rows) and encoded in
//    parallel over dataset_num_proc threads, in order;
//  - `#N` takes the first N usable samples of a file (streaming samples sequentially, as ms-swift);
//  - with dataset_shuffle, sequences go through a shuffle buffer of shuffle_buffer_size (HF's algorithm: a full
//    buffer yields a random slot and refills it; the rest is shuffled at the end), seeded by (data_seed, epoch);
//  - with packing_length > 0, every packing_interval sequences are packed best-fit decreasing (data/packing.h)
//    and all rows but the last are emitted, the last carried into the next round (ms-swift's streaming packing);
//  - units (sequences or packed rows) are dealt to ranks round-robin and batched batch_size at a time; a last
//    partial batch is kept.
//
// Invariants:
//  - The batches of (options, epoch) are the same for any dataset_num_proc and prefetch; start(epoch, step)
//    resumes by rebuilding (and discarding) the first `step` batches of the pass.
//  - split_dataset_ratio needs random access and is refused: pass --val_dataset (load it with prepare_data).
//  - Memory holds one chunk, the shuffle buffer, the packing buffer and the prefetched batches (plus the whole
//    text of a gzip file being read, and the rows of a .json/.csv/.txt file, which are not incremental).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "data/dataset.h"
#include "data/encode.h"
#include "data/loader.h"

namespace swift::data {

struct StreamingOptions {
  int64_t batch_size = 1;             // --per_device_train_batch_size (units per batch)
  int64_t shuffle_buffer_size = 1000; // --shuffle_buffer_size (used when dataset_shuffle)
  int64_t packing_length = 0;         // > 0: --packing with this --packing_length
  int64_t packing_interval = 128;     // sequences per packing round
  int64_t chunk_rows = 1000;          // rows read and encoded together
  int prefetch = 0;                   // batches built ahead on a background thread (0: none)
  int world_size = 1, rank = 0;
};

class StreamingLoader : public BatchSource {
 public:
  // The encoder objects referenced by `encode` must outlive the loader.
  StreamingLoader(DatasetOptions data, EncodeOptions encode, StreamingOptions options);
  ~StreamingLoader() override;
  StreamingLoader(const StreamingLoader&) = delete;
  StreamingLoader& operator=(const StreamingLoader&) = delete;

  // Unknown until a pass ends: -1.
  int64_t steps_per_epoch() const override { return -1; }
  // Starts pass `epoch` (fast-forwarding `step` batches).
  void start(int64_t epoch, int64_t step = 0) override;
  // The next batch of the pass, or nullopt at its end.
  std::optional<Batch> next() override;
  int64_t epoch() const override { return epoch_; }
  int64_t step() const override { return step_; }
  // Encoding statistics of the current pass so far (of the batches built, prefetched ones included).
  EncodeStats stats() const;

  class Pipeline;

 private:
  void stop_producer();

  DatasetOptions data_;
  EncodeOptions encode_;
  StreamingOptions options_;
  int64_t epoch_ = 0, step_ = 0;
  bool started_ = false;
  std::unique_ptr<Pipeline> pipeline_;
  // Prefetching producer.
  std::thread producer_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::optional<Batch>> queue_;  // nullopt: end of pass
  std::exception_ptr error_;
  bool stop_ = false;
};

}  // namespace swift::data
