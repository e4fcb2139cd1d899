// dist/init.cpp — init_communicator: the launch environment's world size and the device pick the communicator.
//
// Invariants: world size 1 never opens a socket; the rendezvous lives only during setup; without NCCL built in,
// asking for it is an error that says so (never a silent fall back to the CPU for CUDA tensors).
#include "dist/init.h"

#include <algorithm>

#include "core/error.h"

namespace swift::dist {

#ifndef SWIFT_WITH_NCCL
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv&, Rendezvous&, int, const CommOptions&) {
  fail("this swift.cpp was built without NCCL (CUDA and NCCL were not found at configure time); multi-GPU runs "
       "need a build with both");
}
bool nccl_built() { return false; }
#endif

std::unique_ptr<Communicator> init_communicator(const LaunchEnv& env, Device device, const std::string& backend,
                                                const CommOptions& options) {
  if (backend != "auto" && backend != "cpu" && backend != "nccl") {
    fail("distributed backend '{}' is unknown; use auto, cpu or nccl", backend);
  }
  const bool nccl = backend == "nccl" || (backend == "auto" && device.is_cuda());
  if (nccl && !device.is_cuda()) fail("distributed backend nccl needs a CUDA device, got {}", device.str());
  if (!nccl && !device.is_cpu()) {
    fail("distributed backend cpu works on CPU tensors, but the device is {}; use backend nccl", device.str());
  }
  if (!env.distributed()) return make_solo_communicator(device);
  if (!nccl && (env.world_size != env.local_world_size || env.nnodes != 1)) {
    fail("the CPU communicator needs every rank on one machine, but this launch has {} ranks on {} nodes ({} per "
         "node); use CUDA devices (NCCL) across nodes",
         env.world_size, env.nnodes, env.local_world_size);
  }
  // Setup waits at least 30 s for ranks that start late, even with a short collective timeout.
  Rendezvous rendezvous(env, std::max(resolve_timeout(options), 30.0));
  if (nccl) return make_nccl_communicator(env, rendezvous, device.index, options);
  return make_shm_communicator(env, rendezvous, options);
}

}  // namespace swift::dist
