// ops/gemm_choice_cache.h — the on-disk record of SWIFT_GEMM_AUTOTUNE's choices (ops/cuda/blas.cpp), so that every
// process on a machine runs a product with the algorithm the first one timed fastest: the same summation order, the
// same bits, run after run. Plain C++ (no CUDA): the CPU tests check it.
//
//   {"format": 1, "devices": {"<device>": {"<product>": <rank>, ...}, ...}}
//
// <device> names the GPU and the library whose heuristic ranked the algorithms (e.g. "NVIDIA H200 sm_90 cublasLt
// 130100"), <product> the product's shape, strides, dtypes, transposes, epilogue and alignments, and <rank> the
// chosen algorithm's place in the heuristic's list for that product (a function of the device and product only).
//
// Invariants:
//  - The file is read once, on the first lookup. A missing file is an empty record; a file that is not this format
//    throws swift::Error naming it and saying to delete it (never silently replaced), a directory at that path
//    throws naming it and SWIFT_GEMM_AUTOTUNE_CACHE.
//  - record() adds an entry and saves the whole record: the file is read again and merged (entries of other
//    processes kept, ours win on the same key), written to a name unique to this process and renamed over the file,
//    so a reader sees the old or the new file whole. A save that fails (read-only directory, full disk) is reported
//    once on stderr and the entry stays in memory: a tuning record never stops a run.
//  - Thread-safe (one mutex per cache).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace swift::ops {

class GemmChoiceCache {
 public:
  explicit GemmChoiceCache(std::string path);

  const std::string& path() const { return path_; }
  // The recorded rank of `product` on `device`, if any.
  std::optional<int> find(const std::string& device, const std::string& product);
  // Records `rank` (>= 0) and saves the file (see the invariants).
  void record(const std::string& device, const std::string& product, int rank);

 private:
  using Record = std::map<std::string, std::map<std::string, int>>;
  void load_locked();
  Record read_file() const;  // {} when the file does not exist

  std::string path_;
  std::mutex mutex_;
  bool loaded_ = false;
  bool warned_ = false;
  Record record_;
};

// The record's file for this process: $SWIFT_GEMM_AUTOTUNE_CACHE when set (empty: none), else
// $XDG_CACHE_HOME/swift.cpp/gemm-autotune.json, else $HOME/.cache/swift.cpp/gemm-autotune.json; "" (no file: choices
// are timed in every process) when none of these is set.
std::string gemm_choice_cache_path();

}  // namespace swift::ops
