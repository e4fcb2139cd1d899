// data/loader.cpp — epoch orders, batch assembly and the prefetching workers.
#include "data/loader.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "data/random.h"

namespace swift::data {
namespace {

constexpr int32_t kIgnore = -100;

}  // namespace

Batch make_batch(const TokenizedDataset& data, const std::vector<int64_t>& sequences) {
  SWIFT_CHECK(!sequences.empty(), "make_batch: no sequences");
  const bool preference = data.has_rejected();
  int64_t total = 0;
  for (int64_t s : sequences) {
    SWIFT_CHECK(s >= 0 && s < data.size(), "make_batch: sequence {} out of range [0, {})", s, data.size());
    total += data.length(s) + (preference ? data.rejected_length(s) : 0);
  }
  const int64_t nseq = static_cast<int64_t>(sequences.size()) * (preference ? 2 : 1);
  Batch b;
  b.preference = preference;
  b.ids = Tensor::empty({total}, DType::I32, Device::cpu(), MemoryCategory::Other);
  b.positions = Tensor::empty({total}, DType::I32, Device::cpu(), MemoryCategory::Other);
  b.labels = Tensor::empty({total}, DType::I32, Device::cpu(), MemoryCategory::Other);
  b.targets = Tensor::empty({total}, DType::I32, Device::cpu(), MemoryCategory::Other);
  b.cu_seqlens = Tensor::empty({nseq + 1}, DType::I32, Device::cpu(), MemoryCategory::Other);
  int32_t* ids = b.ids.data<int32_t>();
  int32_t* pos = b.positions.data<int32_t>();
  int32_t* lab = b.labels.data<int32_t>();
  int32_t* tgt = b.targets.data<int32_t>();
  int32_t* cu = b.cu_seqlens.data<int32_t>();
  int64_t t = 0, k = 0;
  auto put = [&](std::span<const int32_t> sid, std::span<const uint8_t> mask, int64_t seq) {
    const int64_t len = static_cast<int64_t>(sid.size());
    cu[k++] = static_cast<int32_t>(t);
    for (int64_t j = 0; j < len; ++j) {
      ids[t + j] = sid[static_cast<size_t>(j)];
      pos[t + j] = static_cast<int32_t>(j);
      lab[t + j] = mask[static_cast<size_t>(j)] ? sid[static_cast<size_t>(j)] : kIgnore;
      tgt[t + j] = (j + 1 < len && mask[static_cast<size_t>(j + 1)]) ? sid[static_cast<size_t>(j + 1)] : kIgnore;
      b.num_target_tokens += mask[static_cast<size_t>(j)] ? 1 : 0;
    }
    t += len;
    b.max_seqlen = std::max(b.max_seqlen, static_cast<int32_t>(len));
    b.sequences.push_back(seq);
    b.samples.push_back(data.sample_index(seq));
    b.kto_labels.push_back(data.label(seq));
  };
  for (int64_t s : sequences) put(data.ids(s), data.loss_mask(s), s);
  if (preference) {
    for (int64_t s : sequences) put(data.rejected_ids(s), data.rejected_loss_mask(s), s);
  }
  cu[k] = static_cast<int32_t>(t);
  b.num_tokens = total;
  return b;
}

DataLoader::DataLoader(std::shared_ptr<const TokenizedDataset> data, LoaderOptions options,
                       std::shared_ptr<const PackPlan> plan)
    : data_(std::move(data)), plan_(std::move(plan)), options_(options) {
  SWIFT_CHECK(data_ != nullptr, "DataLoader: no dataset");
  if (options_.batch_size <= 0) fail("--per_device_train_batch_size {}: expected a positive number", options_.batch_size);
  if (options_.num_workers < 0) fail("--dataloader_num_workers {}: expected 0 or more", options_.num_workers);
  if (options_.world_size <= 0 || options_.rank < 0 || options_.rank >= options_.world_size) {
    fail("data loader: rank {} of world size {} is invalid", options_.rank, options_.world_size);
  }
  options_.prefetch_factor = std::max(options_.prefetch_factor, 1);
  if (num_units() == 0) fail("data loader: the dataset has no sequences; nothing to train on");
  if (steps_per_epoch() == 0) {
    fail("data loader: {} units per rank make no full batch of {} with --dataloader_drop_last true; lower the batch "
         "size or keep the last batch",
         units_per_rank(), options_.batch_size);
  }
}

DataLoader::~DataLoader() { stop_workers(); }

int64_t DataLoader::num_units() const { return plan_ ? plan_->rows() : data_->size(); }

int64_t DataLoader::units_per_rank() const {
  int64_t n = num_units(), w = options_.world_size;
  return options_.drop_last ? n / w : (n + w - 1) / w;
}

int64_t DataLoader::steps_per_epoch() const {
  int64_t u = units_per_rank(), b = options_.batch_size;
  return options_.drop_last ? u / b : (u + b - 1) / b;
}

std::vector<int64_t> DataLoader::epoch_units(int64_t epoch) const {
  const int64_t n = num_units();
  std::vector<int64_t> order;
  if (options_.shuffle) {
    Rng rng(derive_seed(options_.seed, static_cast<uint64_t>(epoch), 0x6c6f61646572ull));  // "loader"
    order = rng.permutation(n);
  } else {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t w = options_.world_size, per_rank = units_per_rank();
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank));
  for (int64_t k = 0; k < per_rank; ++k) {
    int64_t g = k * w + options_.rank;
    mine.push_back(order[static_cast<size_t>(g % n)]);  // past the end: padding from the start
  }
  return mine;
}

Batch DataLoader::build(const std::vector<int64_t>& units, int64_t epoch, int64_t step) const {
  const int64_t b = options_.batch_size;
  const int64_t begin = step * b, end = std::min<int64_t>(static_cast<int64_t>(units.size()), begin + b);
  SWIFT_CHECK(begin < end, "data loader: step {} is past the end of epoch {} ({} steps)", step, epoch,
              steps_per_epoch());
  std::vector<int64_t> seqs;
  for (int64_t i = begin; i < end; ++i) {
    int64_t u = units[static_cast<size_t>(i)];
    if (plan_) {
      auto row = plan_->row(u);
      seqs.insert(seqs.end(), row.begin(), row.end());
    } else {
      seqs.push_back(u);
    }
  }
  Batch batch = make_batch(*data_, seqs);
  batch.epoch = epoch;
  batch.step = step;
  return batch;
}

Batch DataLoader::batch_at(int64_t epoch, int64_t step) const {
  if (step < 0 || step >= steps_per_epoch()) {
    fail("data loader: step {} is outside epoch {} (0..{})", step, epoch, steps_per_epoch() - 1);
  }
  return build(epoch_units(epoch), epoch, step);
}

void DataLoader::stop_workers() {
  stop_ = true;
  for (auto& q : queues_) {
    std::lock_guard<std::mutex> lock(q->mutex);
    q->cv.notify_all();
  }
  for (auto& t : workers_) t.join();
  workers_.clear();
  queues_.clear();
  stop_ = false;
}

void DataLoader::worker_loop(int worker, std::shared_ptr<const std::vector<int64_t>> units, int64_t epoch,
                             int64_t first_step) {
  const int64_t stride = options_.num_workers, steps = steps_per_epoch();
  Queue& q = *queues_[static_cast<size_t>(worker)];
  for (int64_t s = first_step + worker; s < steps; s += stride) {
    {
      std::unique_lock<std::mutex> lock(q.mutex);
      q.cv.wait(lock, [&] { return stop_.load() || static_cast<int>(q.items.size()) < options_.prefetch_factor; });
      if (stop_) return;
    }
    Batch b;
    try {
      b = build(*units, epoch, s);
    } catch (...) {
      std::lock_guard<std::mutex> lock(q.mutex);
      q.error = std::current_exception();
      q.cv.notify_all();
      return;
    }
    std::lock_guard<std::mutex> lock(q.mutex);
    q.items.push_back(std::move(b));
    q.cv.notify_all();
  }
}

void DataLoader::start(int64_t epoch, int64_t step) {
  stop_workers();
  if (epoch < 0 || step < 0 || step > steps_per_epoch()) {
    fail("data loader: cannot resume at epoch {} step {} (an epoch has {} steps)", epoch, step, steps_per_epoch());
  }
  epoch_ = epoch;
  step_ = step;
  first_step_ = step;
  started_ = true;
  units_ = std::make_shared<const std::vector<int64_t>>(epoch_units(epoch));
  for (int w = 0; w < options_.num_workers; ++w) queues_.push_back(std::make_unique<Queue>());
  for (int w = 0; w < options_.num_workers; ++w) workers_.emplace_back(&DataLoader::worker_loop, this, w, units_, epoch, step);
}

std::optional<Batch> DataLoader::next() {
  if (!started_) start(epoch_, step_);
  if (step_ >= steps_per_epoch()) return std::nullopt;
  if (options_.num_workers == 0) {
    Batch b = build(*units_, epoch_, step_);
    ++step_;
    return b;
  }
  Queue& q = *queues_[static_cast<size_t>((step_ - first_step_) % options_.num_workers)];
  std::unique_lock<std::mutex> lock(q.mutex);
  q.cv.wait(lock, [&] { return !q.items.empty() || q.error; });
  if (q.items.empty()) std::rethrow_exception(q.error);
  Batch b = std::move(q.items.front());
  q.items.pop_front();
  q.cv.notify_all();
  ++step_;
  return b;
}

StridedSource::StridedSource(BatchSource& inner, int world_size, int rank)
    : inner_(inner), world_(world_size), rank_(rank) {
  if (world_size <= 0 || rank < 0 || rank >= world_size) {
    fail("strided source: rank {} of world size {} is invalid", rank, world_size);
  }
}

int64_t StridedSource::steps_per_epoch() const {
  const int64_t n = inner_.steps_per_epoch();
  if (n < 0) return -1;
  return n / world_ + (rank_ < n % world_ ? 1 : 0);
}

void StridedSource::start(int64_t epoch, int64_t step) {
  inner_.start(epoch, step * world_);
  step_ = step;
  ended_ = false;
}

std::optional<Batch> StridedSource::next() {
  if (ended_) return std::nullopt;
  std::optional<Batch> mine;
  for (int i = 0; i < world_; ++i) {  // batches step*W .. step*W + W-1 of the inner epoch; keep number `rank`
    std::optional<Batch> b = inner_.next();
    if (!b) {
      ended_ = true;
      break;
    }
    if (i == rank_) mine = std::move(b);
  }
  if (mine) ++step_;
  return mine;
}

}  // namespace swift::data
