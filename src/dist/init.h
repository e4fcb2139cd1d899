// dist/init.h — from a launch environment to a communicator: the CPU process group over shared memory, the NCCL
// communicator, and init_communicator() that picks one for the apps and the trainer.
//
// Invariants:
//  - A world of one process gets the solo communicator (no sockets, no shared memory, no NCCL).
//  - The rendezvous is only used during setup and closed afterwards; collectives never go through TCP. Setup
//    waits max(timeout, 30 s) for late ranks.
//  - The CPU process group needs every rank on one machine (world size == local world size); several nodes
//    need NCCL.
#pragma once

#include <memory>
#include <string>

#include "dist/bootstrap.h"
#include "dist/communicator.h"

namespace swift::dist {

// CPU ranks that are separate processes of one machine: POSIX shared memory (created by rank 0, name sent
// through the rendezvous, unlinked once every rank mapped it) with the same protocol as make_thread_group;
// a peer process that exits is noticed within ~0.1 s (its pid is checked while waiting).
std::unique_ptr<Communicator> make_shm_communicator(const LaunchEnv& env, Rendezvous& rendezvous,
                                                    const CommOptions& options = {});

// NCCL on CUDA device `device_index` (usually env.local_rank): rank 0 makes the unique id and sends it through
// the rendezvous; the communicator is created non-blocking and polled against the timeout. Sets
// NCCL_NVLS_ENABLE=0 when unset (NVLink multicast stays off). Throws when NCCL is not built in.
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, Rendezvous& rendezvous, int device_index,
                                                     const CommOptions& options = {});
bool nccl_built();

// backend: "auto" (NCCL when `device` is CUDA, else the CPU process group), "cpu" or "nccl". World size 1:
// the solo communicator on `device`.
std::unique_ptr<Communicator> init_communicator(const LaunchEnv& env, Device device, const std::string& backend = "auto",
                                                const CommOptions& options = {});

}  // namespace swift::dist
