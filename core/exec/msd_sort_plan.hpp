#pragma once
// The CUDA MSD radix sort's geometry (kernels/cuda/sort.cu), shared with the sort's cost model
// (models/op_model.cpp msd_plan, msd_work), which must follow the same plan.
#include <cstdint>

namespace joinlab::msd_sort {

// A block sorts a partition of up to kLocalCapacity rows on chip: 256 threads x 20 rows.
constexpr uint32_t kLocalThreads = 256;
constexpr uint32_t kLocalItems = 20;
constexpr uint32_t kLocalCapacity = kLocalThreads * kLocalItems;
// The partition bits aim at kLocalTarget rows per partition for keys spread over their range.
constexpr uint32_t kLocalTarget = 4096;
// At most 2^13 counters (32 KB) per block.
constexpr uint32_t kLocalBits = 13;
// Partitions larger than a block (hot keys) are gathered and sorted by one CUB device sort.
// Keys the sort samples to plan its range.
constexpr uint64_t kMaxSamples = uint64_t(1) << 16;

}  // namespace joinlab::msd_sort
