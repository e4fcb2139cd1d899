// dist/communicator.h — the CPU communicators (threads / shared memory) and the options of every communicator; the
// abstract interface (Communicator, CollectiveHandle, ReduceOp) and its invariants are in core/communicator.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/communicator.h"

namespace swift::dist {

struct CommOptions {
  double timeout_s = 0.0;             // <= 0: env SWIFT_DIST_TIMEOUT (seconds) or 600
  int64_t slot_bytes = 4 << 20;       // CPU shared-memory staging per rank (collectives run in chunks of it)
};

// The timeout: options.timeout_s when > 0, else SWIFT_DIST_TIMEOUT when set (throws on a bad value), else 600.
double resolve_timeout(const CommOptions& options);

// ---- CPU implementations (dist/shm_communicator.cpp) -------------------------------------------------------
// In-process group: `world_size` communicators sharing one memory arena, one per thread (rank i = element i).
// Each must be used by exactly one thread. For tests of parallel math in CI.
std::vector<std::unique_ptr<Communicator>> make_thread_group(int world_size, const CommOptions& options = {});

// Runs fn(comm) on `world_size` threads, one rank each, and waits. When ranks throw, rethrows the error of the
// lowest failing rank, prefixed "rank R: " (later ranks usually fail because an earlier one aborted).
void run_ranks(int world_size, const std::function<void(Communicator&)>& fn, const CommOptions& options = {});

// Single rank: every collective is the identity (all_gather / all_to_all copy).
std::unique_ptr<Communicator> make_solo_communicator(Device device = Device::cpu());

}  // namespace swift::dist
