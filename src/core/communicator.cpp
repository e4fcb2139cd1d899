// core/communicator.cpp — the default Communicator::split (backends without sub-groups refuse it by name).
#include "core/communicator.h"

#include "core/error.h"

namespace swift::dist {

std::unique_ptr<Communicator> Communicator::split(int color) {
  fail("split(color {}): the {} communicator cannot make sub-groups (sequence / tensor parallel groups); use the "
       "CPU or NCCL backend",
       color, backend());
}

}  // namespace swift::dist
