// ops/host_mirror.cpp — ops.h HostMirror / host_values: host copies of small device operands, registered per thread
// by the caller that uploaded them, so that ops needing the values on the host skip a synchronising read-back.
//
// Invariants:
//  - The registry is thread-local and ordered: lookups scan from the newest entry, so an inner mirror of the same
//    pointer shadows an outer one; a HostMirror removes exactly its own entry (by identity), in any order.
//  - A match needs the same data pointer, dtype and element count, and a CPU host tensor of that dtype and count
//    (checked when registering); anything else reads the device tensor back (Tensor::to, synchronising), as does
//    every lookup under SWIFT_HOST_MIRRORS=0.
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "ops/env_switch.h"
#include "ops/ops.h"

namespace swift::ops {

namespace {

struct Entry {
  const HostMirror* owner;
  const void* data;
  DType dtype;
  int64_t numel;
  Tensor host;
};

std::vector<Entry>& registry() {
  thread_local std::vector<Entry> entries;
  return entries;
}

// SWIFT_HOST_MIRRORS=0 ignores the mirrors (A/B runs: every read-back synchronises as before).
bool mirrors_enabled() {
  static EnvSwitch sw("SWIFT_HOST_MIRRORS", true);
  return sw.on();
}

}  // namespace

HostMirror::HostMirror(const Tensor& device, const Tensor& host) {
  if (!device.defined() || !host.defined()) fail("HostMirror: both tensors must be defined");
  if (!host.device().is_cpu()) fail("HostMirror: the mirror {} must be on the CPU", host.str());
  if (host.dtype() != device.dtype() || host.numel() != device.numel()) {
    fail("HostMirror: the mirror {} does not match the device tensor {} (dtype and element count)", host.str(),
         device.str());
  }
  registry().push_back({this, device.raw(), device.dtype(), device.numel(), host});
}

HostMirror::~HostMirror() {
  std::vector<Entry>& entries = registry();
  const auto it = std::find_if(entries.rbegin(), entries.rend(), [&](const Entry& e) { return e.owner == this; });
  if (it != entries.rend()) entries.erase(std::next(it).base());
}

Tensor host_values(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  if (!mirrors_enabled()) return t.to(Device::cpu(), MemoryCategory::Workspace);
  const std::vector<Entry>& entries = registry();
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (it->data == t.raw() && it->dtype == t.dtype() && it->numel == t.numel()) return it->host;
  }
  return t.to(Device::cpu(), MemoryCategory::Workspace);
}

}  // namespace swift::ops
