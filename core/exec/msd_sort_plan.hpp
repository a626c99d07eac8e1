#pragma once
// The CUDA MSD radix sort's geometry (kernels/cuda/sort.cu), shared with the sort's cost model
// (models/op_model.cpp msd_plan, msd_work), which must follow the same plan.
#include <algorithm>
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
// Keys the sort samples to plan its range.
constexpr uint64_t kMaxSamples = uint64_t(1) << 16;

// Bits that hold keys up to v (at least one).
inline int bit_width(uint64_t v) {
  int bits = 1;
  while (bits < 64 && (v >> bits) != 0) ++bits;
  return bits;
}
// The largest key of `bits` bits.
inline uint64_t largest_of_bits(int bits) { return bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1; }

// The largest key the partition bits are planned for, from the largest of the sampled keys: the
// top sample lies some range / samples below the largest key (keys spread evenly; the gap is
// random), so the plan takes a range 1/16 larger, within the sample's bit width.
inline uint64_t planned_max_key(uint64_t sampled) {
  return sampled + std::min(sampled / 16, largest_of_bits(bit_width(sampled)) - sampled);
}

// The low key bits a block sorts: the most (up to kLocalBits, below end_bit) that keep a
// partition's expected rows, for keys spread over [min_key, max_key], at kLocalTarget. (A run of
// a key range far from 0, as a GPU's range of a multi-GPU sort, is as dense as its range says:
// planned over [0, max_key], its partitions overflowed a block.)
inline int local_bits(double rows, double max_key, int end_bit, double min_key = 0) {
  const double range = std::max(max_key - std::min(std::max(min_key, 0.0), max_key), 0.0) + 1.0;
  int low = 0;
  while (low < int(kLocalBits) && low < end_bit && rows * double(uint64_t(2) << low) / range <= kLocalTarget) ++low;
  return low;
}

}  // namespace joinlab::msd_sort
