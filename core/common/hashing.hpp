// Partition and hash-table slot functions shared by every backend (JL_HD), so the CPU and CUDA
// kernels place each key in the same partition and the same table slot.
#pragma once
#include <cstdint>

#include "core/common/hd.hpp"

namespace joinlab {

// How a key maps to a partition: radix bits of the key itself, or bits of a hash of it.
struct PartitionFn {
  enum Kind : uint8_t { Radix, Hash } kind = Radix;
  uint32_t bits = 0;   // fanout = 2^bits
  uint32_t shift = 0;  // bits below this are skipped (second pass of a radix partitioning)
  uint64_t seed = 0;   // Hash: mixed into the key (a different seed per level, gao2021)
  // Radix: keys above it count as it (an MSD sort that planned its bits from a sample of the
  // keys puts the few larger ones in the last partition, in order, and fixes that one up).
  uint64_t key_limit = ~0ULL;
  JL_HD uint32_t fanout() const { return 1u << bits; }
  JL_HD bool clamps() const { return kind == Radix && key_limit != ~0ULL; }
  JL_HD uint32_t operator()(uint64_t key) const { return digit(kind == Radix && key > key_limit ? key_limit : key); }
  // The partition of a key at most key_limit (hot loops that know no key exceeds it).
  JL_HD uint32_t digit(uint64_t key) const {
    uint64_t v = kind == Radix ? key : murmur3_fmix64(key ^ seed);
    return uint32_t((v >> shift) & ((1ULL << bits) - 1));
  }
};

// Home slot of a key in a table of `slots` (a power of two). Uses the high bits of a
// multiplicative hash, so it stays independent of the low radix bits that partitioned the input.
JL_HD uint64_t table_hash(uint64_t key, uint64_t seed) {
  uint64_t h = (key ^ seed) * 0x9e3779b97f4a7c15ULL;
  h ^= h >> 29;
  return h * 0xbf58476d1ce4e5b9ULL;
}
JL_HD uint64_t slot_of_hash(uint64_t h, uint64_t slots) { return (h >> 20) & (slots - 1); }
JL_HD uint64_t table_slot(uint64_t key, uint64_t seed, uint64_t slots) {
  return slot_of_hash(table_hash(key, seed), slots);
}
// The 32-bit tag a hash + row-id table stores for a key: the low bits of the same hash, so the
// tag tells apart most keys that share a cluster (their slots come from bits 20 and up).
JL_HD uint32_t tag_of_hash(uint64_t h) { return uint32_t(h); }

}  // namespace joinlab
