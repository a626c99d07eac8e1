// Multi-threaded CPU kernels of every operator in core/exec/ops.hpp, as free functions over raw
// columnar arrays, templated on key and value widths (uint32_t / uint64_t). They know nothing of
// ranks, streams or strategies: core/runtime/cpu_ops.cpp maps each Op onto them.
//
// Every kernel takes `threads`, the OpenMP team size it may use (>= 1). Kernels never throw from
// inside a parallel region: arguments are checked first (std::invalid_argument / length_error).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "core/common/hashing.hpp"
#include "core/exec/ops.hpp"  // TableKind, OutputMode (vocabulary only)
#include "core/workload/keygen.hpp"

namespace joinlab::cpu {

// --- generation ------------------------------------------------------------------------------
// keys[i] = gen.key(first_row + i); vals[i] = payload column 0 of that row, or the global row id.
template <class K, class V>
void generate(const KeyGen& gen, uint64_t rel_seed, bool value_is_rowid, uint64_t first_row,
              uint64_t rows, K* keys, V* vals, int threads);
// out[i] = payload_value(rel_seed, column, first_row + i, sizeof(V)).
template <class V>
void generate_payload(uint64_t rel_seed, int column, uint64_t first_row, uint64_t rows, V* out,
                      int threads);

// --- Star Schema Benchmark (core/workload/ssb.hpp) ----------------------------------------------
// StarGenerateOp: rows [first_row, first_row + rows) of `table` (lineorder: uint64 keys and values,
// its rows found from `lineitems`, the index of its orders; a dimension: uint32 keys and values).
void star_generate(const ssb::Scale& scale, const ssb::StarQuery& q, ssb::Table table,
                   const tpch::LineitemIndex& lineitems, uint64_t first_row, uint64_t rows, void* keys, void* vals,
                   int threads);
// StarProbeOp: the rows that pass every step of q add their value to groups[group]; returns them.
uint64_t star_probe(const ssb::StarQuery& q, const ssb::DimTableRef* dims, const uint64_t* keys,
                    const uint64_t* vals, uint64_t rows, uint64_t* groups, int threads);

// --- partitioning ------------------------------------------------------------------------------
// Rows per partition of fn.
template <class K>
std::vector<uint64_t> histogram(const K* keys, uint64_t rows, PartitionFn fn, int threads);
// Rows per partition of each segment [segments[s], segments[s + 1]) of keys (at least 2 ascending
// offsets): k * fanout counts, segment-major.
template <class K>
std::vector<uint64_t> histogram(const K* keys, const std::vector<uint64_t>& segments, PartitionFn fn, int threads);
// The same for segments that need not be adjacent: rows [first, second) of each pair.
template <class K>
std::vector<uint64_t> histogram(const K* keys, const std::vector<std::pair<uint64_t, uint64_t>>& ranges, PartitionFn fn,
                                int threads);

// Scatters rows [segments[0], segments.back()) of (in_keys, in_vals) by fn, each segment on its
// own, into out (starting at out row 0). Returns the exclusive offset of every (segment,
// partition), segment-major, then the total. Empty `segments` means one segment of `rows` rows.
// Stable (rows keep their input order inside a partition). Large fanouts run as two passes
// through a scratch copy (high bits, then low bits), which gives the same output.
template <class K, class V>
std::vector<uint64_t> partition(const K* in_keys, const V* in_vals, uint64_t rows,
                                const std::vector<uint64_t>& segments, PartitionFn fn, K* out_keys,
                                V* out_vals, int threads);
// ChunkPartitionOp: chunk c's rows of partition p go to rows offsets.at(c, p), ... of `cache`
// (c < cached_chunks) or `spill`. A row past an output's capacity is std::length_error.
template <class K, class V>
struct ChunkIn {
  const K* keys;
  const V* vals;
  uint64_t rows;
};
template <class K, class V>
struct ChunkOut {
  K* keys;
  V* vals;
  uint64_t capacity;
};
template <class K, class V>
void chunk_partition(const std::vector<ChunkIn<K, V>>& chunks, PartitionFn fn, ChunkOffsets offsets,
                     uint32_t cached_chunks, ChunkOut<K, V> cache, ChunkOut<K, V> spill, int threads);
// LinkAccessOp: access i copies granule i of `device` (Both: reads into the first `bytes`, writes
// from the next) from or to host granule link_access_granule(i, ...) (core/exec/ops.hpp).
void link_access(uint8_t* host, uint64_t host_bytes, uint8_t* device, uint64_t bytes, uint32_t granule,
                 bool random, LinkAccess access, int threads);
// Fanout bits the partition kernel does in one pass for tuples of these widths: as many as keep
// its write-combine buffers (one line of tuples per partition) within half this core's L2 cache.
// Above this it does two passes (three beyond twice this).
uint32_t max_one_pass_bits(uint32_t key_bytes, uint32_t val_bytes);

// --- chunk images (gpj's senders; layout and checksum in core/exec/chunk.hpp) -------------------------
// Sum of chunk_row_term(keys[i], vals[i], first + i) for i < rows (vectorized where the CPU can).
template <class K, class V>
uint64_t chunk_row_terms(const K* keys, const V* vals, uint64_t first, uint64_t rows);
// Where partition_into_chunks writes: chunk images of chunk_slot_bytes(K, V, slot_rows) in
// (partition, chunk) order from `out`, with these header fields (PackChunksOp's).
struct ChunkTarget {
  char* out = nullptr;
  uint64_t out_bytes = 0;
  uint64_t slot_rows = 0;
  const std::vector<uint64_t>* first_seq = nullptr;  // per partition
  uint32_t partition_base = 0, relation = 0, epoch = 0;
};
// Consecutive slices of the input already counted (a histogram per slice): bounds (k + 1 rows,
// from 0 to the input's rows) and counts (k * fanout, slice-major).
struct CountedSlices {
  std::vector<uint64_t> bounds, counts;
};
// PackChunksOp with partition_by: partitions rows [0, rows) by fn in one pass straight into chunk
// images: the images of partition() then packing its output (past max_one_pass_bits its
// write-combine lines leave the L2 cache: slower, the same images). counts[p] must be the rows of
// partition p. Without `slices` each thread counts its range first (a count that differs is
// std::invalid_argument naming the partition, and nothing is written); with them the threads
// take whole slices and count nothing (a slice that does not hold the rows its counts say is
// std::invalid_argument naming it; it wrote no row past its counts). Returns partition()'s
// offsets (fanout + 1).
template <class K, class V>
std::vector<uint64_t> partition_into_chunks(const K* keys, const V* vals, uint64_t rows, PartitionFn fn,
                                            const std::vector<uint64_t>& counts, const CountedSlices* slices,
                                            const ChunkTarget& target, int threads);

// --- multiway merge (MultiwayMergeOp) -----------------------------------------------------------
// Merges key-sorted runs (ChunkIn, above) into out (rows: their sum). Equal keys keep run order.
template <class K, class V>
void multiway_merge(const std::vector<ChunkIn<K, V>>& runs, K* out_keys, V* out_vals, int threads);
// What a measurement of the multiway merge merges: rows [0, rows) of keys and vals cut into k
// near-equal runs, row i holding key mix64(i + 1) and value i, each run sorted by key (so the
// runs interleave about every row, as sorted chunksets do). Returns the runs.
std::vector<ChunkIn<uint64_t, uint64_t>> random_sorted_runs(uint64_t* keys, uint64_t* vals, uint64_t rows, int k,
                                                            int threads);
// PivotSearchOp: the first t < n with x[t] <= y[t] (x non-increasing, y non-decreasing), else n.
template <class K>
uint64_t pivot_search(const K* x, const K* y, uint64_t n);

// --- join outputs ---------------------------------------------------------------------------------
// Where a join writes (key, R value, S value) rows: rows [first, first + count) of the arrays,
// never at or past `capacity` (semantics in core/exec/ops.hpp).
template <class K, class VR, class VS>
struct JoinSink {
  K* keys = nullptr;
  VR* rvals = nullptr;
  VS* svals = nullptr;
  uint64_t first = 0, capacity = 0;
  OutputMode mode = OutputMode::CountThenWrite;
};
struct JoinCount {
  uint64_t count = 0;     // true number of matches
  bool overflow = false;  // first + count > capacity
};

// --- hash tables (layouts of HashTable in core/exec/ops.hpp) ----------------------------------------
template <class K, class V>
struct LinearTable {
  K* keys = nullptr;  // slots entries, all-ones = empty
  V* vals = nullptr;
  uint64_t slots = 0;  // power of two
  uint64_t seed = 0;
};
template <class K, class V>
struct ChainedTable {
  uint32_t* heads = nullptr;  // buckets entries, all-ones = none
  uint32_t* next = nullptr;   // capacity entries
  K* keys = nullptr;
  V* vals = nullptr;
  uint64_t buckets = 0;  // power of two
  uint64_t capacity = 0;  // rows the next/keys/vals arrays hold
  uint64_t seed = 0;
};

template <class K, class V>
struct RowIdTable {
  uint64_t* words = nullptr;  // slots entries: tag << 32 | row id, all-ones = empty
  const K* keys = nullptr;    // the build relation: row id i is keys[i], vals[i]
  const V* vals = nullptr;
  uint64_t slots = 0;  // power of two
  uint64_t seed = 0;
};

template <class K, class V> void clear_table(const LinearTable<K, V>& t, int threads);
template <class K, class V> void clear_table(const ChainedTable<K, V>& t, int threads);
template <class K, class V> void clear_table(const RowIdTable<K, V>& t, int threads);
// Inserts rows into a table that already holds `present` rows (0 after clear_table). Throws
// std::length_error when they do not fit.
template <class K, class V>
void build(const LinearTable<K, V>& t, uint64_t present, const K* keys, const V* vals,
           uint64_t rows, int threads);
template <class K, class V>
void build(const ChainedTable<K, V>& t, uint64_t present, const K* keys, const V* vals,
           uint64_t rows, int threads);
// Inserts rows [present, present + rows) of the table's relation (t.keys + present, ...).
template <class K, class V>
void build(const RowIdTable<K, V>& t, uint64_t present, uint64_t rows, int threads);
template <class K, class VR, class VS>
JoinCount probe(const LinearTable<K, VR>& t, const K* keys, const VS* vals, uint64_t rows,
                const JoinSink<K, VR, VS>& out, int threads);
template <class K, class VR, class VS>
JoinCount probe(const RowIdTable<K, VR>& t, const K* keys, const VS* vals, uint64_t rows,
                const JoinSink<K, VR, VS>& out, int threads);
template <class K, class VR, class VS>
JoinCount probe(const ChainedTable<K, VR>& t, const K* keys, const VS* vals, uint64_t rows,
                const JoinSink<K, VR, VS>& out, int threads);

// Partition p of R (rows [r_offsets[p], r_offsets[p+1])) joins partition p of S, with a small
// per-partition table of `kind` built in cache. Oversized partitions are shared by all threads.
template <class K, class VR, class VS>
JoinCount partitioned_join(const K* r_keys, const VR* r_vals, const std::vector<uint64_t>& r_offsets,
                           const K* s_keys, const VS* s_vals, const std::vector<uint64_t>& s_offsets,
                           TableKind kind, const JoinSink<K, VR, VS>& out, int threads);

// --- sorting and merge join ---------------------------------------------------------------------------
// out = in sorted by key. Radix: parallel LSD radix sort over the key bits that vary (stable).
// Merge: parallel stable multiway merge sort. in and out may be the same arrays.
template <class K, class V>
void radix_sort(const K* in_keys, const V* in_vals, uint64_t rows, K* out_keys, V* out_vals,
                int threads);
template <class K, class V>
void merge_sort(const K* in_keys, const V* in_vals, uint64_t rows, K* out_keys, V* out_vals,
                int threads);
// m:n join of two key-sorted inputs.
template <class K, class VR, class VS>
JoinCount merge_join(const K* r_keys, const VR* r_vals, uint64_t r_rows, const K* s_keys,
                     const VS* s_vals, uint64_t s_rows, const JoinSink<K, VR, VS>& out, int threads);

// --- gather, checksum, scan, copy ---------------------------------------------------------------------------
// out[i] = column[ids[i] - base_row]. Throws std::out_of_range naming the first bad id.
template <class I, class C>
void gather(const I* ids, const C* column, uint64_t column_rows, uint64_t base_row, uint64_t rows,
            C* out, int threads);

struct ColumnRef {
  const void* data = nullptr;  // element 0 of the column
  uint8_t bytes = 4;           // 4 or 8
};
// Wrapping sum over rows [first, first + rows) of digest_add(...digest_add(digest_begin(key),
// col0, 0)..., colN, N) (core/verify/checksum.hpp).
uint64_t checksum(ColumnRef keys, const std::vector<ColumnRef>& columns, uint64_t first,
                  uint64_t rows, int threads);

// out[i] = in[0] + ... + in[i-1]; in and out may be the same array.
void exclusive_scan(const uint64_t* in, uint64_t* out, uint64_t n, int threads);

// memcpy / memset split over threads for large sizes: copy_team(bytes, threads) of them, one per
// MiB up to `threads` (so a put of a few chunks is one thread's memcpy; the simulator uses the
// same count).
int copy_team(uint64_t bytes, int threads);
void parallel_copy(void* dst, const void* src, uint64_t bytes, int threads);
void parallel_fill(void* dst, uint8_t byte, uint64_t bytes, int threads);

}  // namespace joinlab::cpu
