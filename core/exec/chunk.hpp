// The chunk format of gpj's streaming shuffle (thostrup2023 sections 4.2 and 4.4): what one
// one-sided put writes into a ring slot of a receiver, written once for the CPU and CUDA
// kernels (JL_HD) and the senders.
//
//   [ChunkHeader, 32 bytes, padded to 64][keys: slot_rows x key_bytes, padded to 64][values: rows x val_bytes]
//
// Slots are 64-byte aligned, so keys and values start on cache lines of their own: a sender
// that partitions straight into the images (PackChunksOp with partition_by) writes them as whole
// lines with streaming stores, never a line shared with the header or the other column.
//
// A receiver polls the header: the chunk it waits for has the expected epoch and sequence number
// and a checksum that matches; anything else is not (yet) there.
//
// The checksum covers the header fields and every (key, value) row with its position, as a
// wrapping sum of per-row terms: a GPU block reduces it in any order, and a chunk that is only
// partly visible (a one-sided write lands in no particular order) or was corrupted does not
// match. It replaces the paper's sum-complement checksum with a mixing one that also catches
// bytes moved within the chunk; both cost one pass over the chunk.
#pragma once
#include <cstdint>

#include "core/common/hd.hpp"
#include "core/exec/tuples.hpp"

namespace joinlab {

struct ChunkHeader {
  uint64_t seq;        // 1-based position of the chunk on its ring; 0 = slot never written
  uint32_t partition;  // global partition id
  uint32_t rows;       // rows in this chunk (<= slot_rows)
  uint32_t relation;   // 0 = R, 1 = S
  uint32_t epoch;      // the exchange it belongs to (a slot may still hold an older exchange's chunk)
  uint64_t checksum;   // chunk_checksum of everything else
};
static_assert(sizeof(ChunkHeader) == 32, "the chunk header is 32 bytes on every backend");

// Bytes before the keys: the header and its padding to a cache line (never read; zero).
constexpr uint64_t kChunkHeaderBytes = 64;
static_assert(sizeof(ChunkHeader) <= kChunkHeaderBytes, "the header fits its line");

JL_HD uint64_t chunk_round64(uint64_t b) { return (b + 63) & ~uint64_t(63); }
// Offset of the values in a slot, and the bytes a chunk of `rows` rows occupies (what its put sends).
JL_HD uint64_t chunk_vals_offset(uint32_t key_bytes, uint64_t slot_rows) {
  return kChunkHeaderBytes + chunk_round64(slot_rows * key_bytes);
}
JL_HD uint64_t chunk_bytes(uint32_t key_bytes, uint32_t val_bytes, uint64_t slot_rows, uint64_t rows) {
  return chunk_vals_offset(key_bytes, slot_rows) + rows * val_bytes;
}
// Distance between slots (64-byte aligned, so that every slot starts on a cache line).
JL_HD uint64_t chunk_slot_bytes(uint32_t key_bytes, uint32_t val_bytes, uint64_t slot_rows) {
  return (chunk_bytes(key_bytes, val_bytes, slot_rows, slot_rows) + 63) & ~uint64_t(63);
}
inline uint64_t chunk_slot_bytes(TupleFormat f, uint64_t slot_rows) {
  return chunk_slot_bytes(f.key_bytes, f.val_bytes, slot_rows);
}

JL_HD uint64_t chunk_header_term(uint64_t seq, uint32_t partition, uint32_t rows, uint32_t relation, uint32_t epoch) {
  return mix64(seq ^ mix64((uint64_t(partition) << 32 | rows) ^ mix64((uint64_t(epoch) << 32 | relation) + 0x51ed27)));
}
JL_HD uint64_t chunk_row_term(uint64_t key, uint64_t value, uint64_t row) {
  return mix64(key ^ mix64(value + 0x9e3779b97f4a7c15ULL * (row + 1)));
}
// The checksum of a chunk whose keys and values are given as arrays of K and V.
template <class K, class V>
JL_HD uint64_t chunk_checksum(const ChunkHeader& h, const K* keys, const V* vals) {
  uint64_t sum = chunk_header_term(h.seq, h.partition, h.rows, h.relation, h.epoch);
  for (uint32_t i = 0; i < h.rows; ++i) sum += chunk_row_term(uint64_t(keys[i]), uint64_t(vals[i]), i);
  return sum;
}

}  // namespace joinlab
