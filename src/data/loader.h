// data/loader.h — batches for the trainer: a seeded shuffle per epoch, batches of --per_device_train_batch_size
// units (sequences, or packed rows with --packing), built ahead by --dataloader_num_workers threads into
// bounded queues, resumable at any (epoch, step).
//
// A batch is one variable-length packed batch, the layout CausalLM::forward takes: the sequences of its units
// back to back, positions restarting at 0 per sequence, cu_seqlens; no padding anywhere. Preference data puts
// the chosen sequences of the batch first and their rejected sequences after, in the same order (sequence k and
// k + P form pair k, P = number of pairs).
//
// Order: epoch e visits units in a permutation drawn from Rng(derive_seed(seed, e, ...)) (identity without
// shuffle), the same on every rank. With world_size > 1 rank r takes every world_size-th unit from r (as torch's
// DistributedSampler), the list padded with units from its start so every rank has the same number (or cut, with
// drop_last).
//
// Invariants:
//  - batch(epoch, step) is a pure function of (dataset, plan, options, epoch, step): the sequence of batches is
//    identical for any num_workers, and start(epoch, step) resumes exactly there (checkpoint resume).
//  - Workers only read the dataset (immutable); each fills its own queue of at most prefetch_factor batches
//    (worker w builds steps w, w + W, ...), and next() takes them round-robin, so memory stays bounded.
//  - Destroying the loader or calling start() again stops and joins the workers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "data/encode.h"
#include "data/packing.h"

namespace swift::data {

// T = tokens in the batch, B = sequences in the batch. All tensors are CPU I32.
struct Batch {
  Tensor ids;         // (T)
  Tensor positions;   // (T) 0.. within each sequence
  Tensor cu_seqlens;  // (B+1) sequence starts, cu_seqlens[B] = T
  Tensor labels;      // (T) ids[t] where loss_mask[t], else -100 (Hugging Face's unshifted labels)
  Tensor targets;     // (T) the token position t predicts: labels[t+1] within the sequence, -100 at its last token
  std::vector<int64_t> sequences;  // (B) indices into the TokenizedDataset (repeated for a pair's rejected side)
  std::vector<int64_t> samples;    // (B) indices of the source Samples
  std::vector<int8_t> kto_labels;  // (B) 1 / 0 / -1 (none)
  bool preference = false;         // sequences [0, B/2) chosen, [B/2, B) rejected
  int64_t num_tokens = 0;
  int64_t num_target_tokens = 0;
  int32_t max_seqlen = 0;
  int64_t epoch = 0, step = 0;
};

struct LoaderOptions {
  int64_t batch_size = 1;     // --per_device_train_batch_size: units (sequences or packed rows) per batch
  bool shuffle = true;        // --train_dataloader_shuffle
  uint64_t seed = 42;         // --data_seed
  int num_workers = 0;        // --dataloader_num_workers (0: batches are built by next() itself)
  int prefetch_factor = 2;    // --dataloader_prefetch_factor: queued batches per worker
  bool drop_last = false;     // --dataloader_drop_last: drop a last, smaller batch
  int world_size = 1, rank = 0;
};

// Builds the batch of the given sequence indices (in order). Exposed for tests and evaluation.
Batch make_batch(const TokenizedDataset& data, const std::vector<int64_t>& sequences);

// What the trainer draws batches from: the DataLoader (a known number of batches per epoch) or the
// StreamingLoader (data/streaming.h: one pass over the files is an epoch, its length unknown until it ends).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Batches per epoch, or -1 when unknown (streaming).
  virtual int64_t steps_per_epoch() const = 0;
  // Positions the source at (epoch, step): the next batch is batch `step` of epoch `epoch`.
  virtual void start(int64_t epoch, int64_t step = 0) = 0;
  // The next batch of the current epoch, or nullopt at its end (call start(epoch + 1) for the next one).
  virtual std::optional<Batch> next() = 0;
  // Where next() continues: save these in a checkpoint and start() there to resume.
  virtual int64_t epoch() const = 0;
  virtual int64_t step() const = 0;
};

// Data parallel over a source that cannot split itself (a stream): rank r of W takes batches r, r + W, r + 2W, ...
// of `inner` (every rank reads the whole source and keeps its share). An epoch ends for a rank when its next batch
// would be past the inner epoch's end, so ranks may see one batch more or less at the end of a pass. step() counts
// this rank's batches; start(e, s) resumes at inner batch s * W.
class StridedSource : public BatchSource {
 public:
  StridedSource(BatchSource& inner, int world_size, int rank);
  int64_t steps_per_epoch() const override;
  void start(int64_t epoch, int64_t step = 0) override;
  std::optional<Batch> next() override;
  int64_t epoch() const override { return inner_.epoch(); }
  int64_t step() const override { return step_; }

 private:
  BatchSource& inner_;
  int world_, rank_;
  int64_t step_ = 0;
  bool ended_ = false;
};

class DataLoader : public BatchSource {
 public:
  // `plan`: the packed rows (units are rows), or null (units are sequences).
  DataLoader(std::shared_ptr<const TokenizedDataset> data, LoaderOptions options,
             std::shared_ptr<const PackPlan> plan = nullptr);
  ~DataLoader() override;
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  int64_t num_units() const;        // sequences or packed rows in the dataset
  int64_t units_per_rank() const;   // after the rank split
  int64_t steps_per_epoch() const override;
  // Positions the loader at (epoch, step) and starts the workers.
  void start(int64_t epoch, int64_t step = 0) override;
  // The next batch of the current epoch, or nullopt at its end (call start(epoch + 1) for the next one).
  std::optional<Batch> next() override;
  // Where next() continues: save these in a checkpoint and start() there to resume.
  int64_t epoch() const override { return epoch_; }
  int64_t step() const override { return step_; }
  // The batch at (epoch, step) built on the calling thread, whatever the loader's position.
  Batch batch_at(int64_t epoch, int64_t step) const;

 private:
  struct Queue {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Batch> items;
    std::exception_ptr error;  // a failed build, rethrown by next()
  };
  std::vector<int64_t> epoch_units(int64_t epoch) const;  // this rank's units in visiting order
  Batch build(const std::vector<int64_t>& units, int64_t epoch, int64_t step) const;
  void stop_workers();
  void worker_loop(int worker, std::shared_ptr<const std::vector<int64_t>> units, int64_t epoch, int64_t first_step);

  std::shared_ptr<const TokenizedDataset> data_;
  std::shared_ptr<const PackPlan> plan_;
  LoaderOptions options_;
  int64_t epoch_ = 0, step_ = 0, first_step_ = 0;
  bool started_ = false;
  std::shared_ptr<const std::vector<int64_t>> units_;  // current epoch's order
  std::vector<std::unique_ptr<Queue>> queues_;
  std::vector<std::thread> workers_;
  std::atomic<bool> stop_{false};
};

}  // namespace swift::data
