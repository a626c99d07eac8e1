// The transport of ranks that are threads of one process (the "cpu" backend, and single-node
// multi-GPU runs): messages are buffered copies in per-rank mailboxes, puts are copies into the
// peer's registered window followed by a release-store of its flag.
#pragma once
#include <memory>
#include <vector>

#include "core/runtime/transport.hpp"

namespace joinlab {

// Endpoints of `ranks` ranks sharing one fabric; endpoint i is rank i's. `copy_threads` threads
// copy large messages.
std::vector<std::shared_ptr<Transport>> make_in_process_transports(int ranks, double timeout_s,
                                                                   int copy_threads = 1);

}  // namespace joinlab
