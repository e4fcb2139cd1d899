// data/parallel.h — the data layer's parallel loop: items [0, n) in chunks handed out by an atomic counter to
// `threads` std::threads (the caller's thread is one of them).
//
// Invariants:
//  - Each item is processed exactly once; results written to per-item slots are therefore independent of the
//    thread count, which keeps every output deterministic.
//  - An exception thrown by any item stops the hand-out of new chunks; after all threads joined, the exception
//    of the lowest failing chunk is rethrown on the caller's thread. (Code that needs the same error whatever
//    the thread count records per-item errors in slots instead of throwing.)
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace swift::data {

// fn(begin, end) processes items [begin, end).
template <typename Fn>
void parallel_for(int64_t n, int threads, int64_t chunk, Fn&& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  int64_t chunks = (n + chunk - 1) / chunk;
  int workers = static_cast<int>(std::clamp<int64_t>(threads, 1, chunks));
  if (workers == 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::atomic<int64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex error_mutex;
  std::exception_ptr error;
  int64_t error_chunk = chunks;
  auto work = [&] {
    for (;;) {
      if (stop.load(std::memory_order_relaxed)) return;
      int64_t c = next.fetch_add(1);
      if (c >= chunks) return;
      try {
        fn(c * chunk, std::min(n, (c + 1) * chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (c < error_chunk) {
          error_chunk = c;
          error = std::current_exception();
        }
        stop = true;
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(workers - 1));
  for (int i = 1; i < workers; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace swift::data
