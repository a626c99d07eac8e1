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

// Bytes of a rank's share of R and S as generated (tuples + late payload), saturating.
uint64_t input_bytes_per_rank(const Workload& w, const ClusterShape& shape);
// Above this many bytes per rank (64 PiB) no machine fits the plan; working_set_bytes returns the
// inputs' bytes rather than sums that could wrap.
constexpr uint64_t kMaxPlanBytes = uint64_t(1) << 56;

// Rows the join emits as far as the specs tell: exact for foreign keys and unique keys, the
// expectation for uniform keys on both sides, about |R| |S| / distinct keys otherwise.
double join_output_rows(const Workload& w);
// Throws InputError when the join's result cannot be counted in 64 bits.
void check_sizes(const RunPoint& p);

// The device memory a rank has, as plans and bounds see it: what the backend gives a rank, else
// cluster.device_memory (the simulator's cap); 0 = not known.
uint64_t rank_device_memory(const RunPoint& p, Backend& backend);

// Throws InputError when working_set_bytes exceeds backend.device_memory_per_rank (if both known).
// On the cpu backend without cluster.device_memory the need is at least the generated inputs and
// the available amount is this machine's free memory (MemAvailable) shared by the ranks.
void check_device_memory(const RunPoint& p, const JoinJob& job, Backend& backend);

}  // namespace joinlab
