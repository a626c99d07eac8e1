// Pre-flight check of device memory: a run whose working set cannot fit the backend's device
// memory is rejected before any work, with the bytes needed and available and the strategies
// that would fit (typically chunked, which keeps only R on the GPU).
#pragma once
#include <cstdint>

#include "core/experiment/runner.hpp"

namespace joinlab {

// Peak device bytes per rank of `strategy` on the job: the strategy's own working_set_bytes, or
// an estimate for the single-GPU strategies (inputs, partition/sort copies, hash table, library
// scratch, output rows of a foreign-key join); 0 = unknown.
uint64_t working_set_bytes(const std::string& strategy, const JoinJob& job, const ClusterShape& shape);

// Throws InputError when working_set_bytes exceeds backend.device_memory_per_rank (if both known).
void check_device_memory(const RunPoint& p, const JoinJob& job, Backend& backend);

}  // namespace joinlab
