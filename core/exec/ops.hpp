// The operator vocabulary: the contract between strategies, kernels, cost models and
// calibration. Each operator is a plain struct (inputs, outputs, parameters). Every backend
// implements every operator: kernels/cpu and kernels/cuda execute it, sim/ charges its modeled
// cost, models/ fits that cost from calibration runs. Adding an operator means adding all four.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/common/hashing.hpp"
#include "core/exec/codec.hpp"
#include "core/common/hd.hpp"
#include "core/exec/tuples.hpp"
#include "core/workload/relation.hpp"
#include "core/workload/ssb.hpp"

namespace joinlab {

enum class OpKind : uint8_t {
  Generate, Histogram, Partition, Build, Probe, PartitionedJoin, Sort, MergeJoin,
  Gather, Checksum, Scan, ChunkPartition, LinkAccess, MultiwayMerge, Merge, PivotSearch,
  Compress, Decompress,  // cascaded compression (core/exec/codec.hpp)
  // Data movement, recorded in traces and modeled like operators.
  Copy, Send, Recv, Put,
  // Streaming operators (gpj): launched with Rank::launch_streaming, see StreamingOp below.
  PackChunks, StreamConsume,
  // Star Schema Benchmark queries (core/workload/ssb.hpp).
  StarGenerate, StarProbe,
  kCount
};
const char* to_string(OpKind k);


enum class TableKind : uint8_t { LinearProbing, Chained, HashRowId };
const char* to_string(TableKind k);  // "linear", "chained", "hash_rowid"
// A hash table in some memory space. Layout (both backends):
//  LinearProbing: keys[slots] (empty = all-ones), vals[slots]
//  Chained: heads[buckets] (uint32 row index, all-ones = none), next[rows], keys[rows], vals[rows]
//  HashRowId (gao2021's local join table): heads[slots] of uint64 words, tag << 32 | row id
//    (tag = tag_of_hash(table_hash(key)), empty = all-ones), linear probing from
//    slot_of_hash(table_hash(key)); 8 bytes per slot whatever the tuple width. Row id i is row
//    base + i of keys/vals: the build relation itself, which Build points the table at (not a
//    copy: the strategy keeps the relation alive while the table is probed).
struct HashTable {
  TableKind kind = TableKind::LinearProbing;
  TupleFormat fmt;
  uint64_t slots = 0;   // LinearProbing / HashRowId slots, or Chained buckets (power of two)
  uint64_t rows = 0;    // tuples inserted
  Buffer keys, vals, heads, next;
  uint64_t hash_seed = 0;
  uint64_t base = 0;    // HashRowId: element offset of row id 0 in keys/vals
};
// A Build into a HashRowId table: points it at `in` (its first Build) or checks that `in`
// continues the relation it points at (later ones); throws RuntimeError naming the mismatch.
void attach_rowid_relation(HashTable& t, const Tuples& in);
// Bytes a table for `rows` tuples needs at `load_factor` (slots = next power of two >= rows / lf).
uint64_t hash_table_slots(uint64_t rows, double load_factor);
uint64_t hash_table_bytes(TableKind kind, TupleFormat fmt, uint64_t rows, double load_factor);

enum class SortAlgo : uint8_t { Radix, Merge };

// Host-visible results of an operator, valid once its Event completed.
struct OpResult {
  uint64_t count = 0;              // matches (probe/join), rows (checksum)
  uint64_t checksum = 0;           // Checksum
  bool overflow = false;           // Direct output ran out of capacity: count is the true total
  std::vector<uint64_t> values;    // Histogram counts, Partition offsets
};
using OpResultPtr = std::shared_ptr<OpResult>;

// --- operators -----------------------------------------------------------------------------
// Semantics every backend implements identically (tests compare CPU and CUDA bit for bit on
// counts and checksums; order of rows inside outputs and partitions is unspecified):
//  * Keys are unsigned, key_bytes wide; the all-ones key is reserved (empty slot) and never
//    generated. Values are val_bytes wide and opaque.
//  * Join outputs (Probe, PartitionedJoin, MergeJoin) emit one row (key, R value, S value) for
//    every pair of equal keys. Rows go to out rows [out_first, out_first + count) with no holes.
//    result.count is the true number of matches. If out_first + count > out.capacity, the
//    operator sets result.overflow, writes nothing past capacity, and the strategy retries with
//    a bigger output. CountOnly writes nothing. CountThenWrite counts first, then writes at
//    exact positions; Direct appends in batches whose positions come from an atomic cursor.
//  * Partition: result.values are the exclusive offsets of each (segment, partition) in `out`,
//    segment-major, plus the total at the end.
//  * Build sets table->rows. LinearProbing inserts at table_slot(key, hash_seed, slots) and
//    probes linearly; Chained pushes row i onto heads[table_slot(...)] through next[].
//    A Build into a table with rows == 0 clears it first; a Build into one with rows > 0 adds
//    to it (rows [table->rows, table->rows + in.rows) of a Chained table's arrays).
//    HashRowId inserts tag << 32 | (table->rows + i) for input row i; a Build with rows == 0
//    sets keys/vals/base to `in`'s, one with rows > 0 must continue that relation (same
//    buffers, in.offset == base + rows). Probing compares the tag, then the key at the row id.
struct GenerateOp {  // keys and values of rows [first_row, first_row + out.rows)
  RelationSpec spec;
  const RelationSpec* referenced = nullptr;  // ForeignKey: the relation it references
  uint64_t first_row = 0;
  bool value_is_rowid = false;  // late materialization: value = global row id
  Tuples out;
};
struct GeneratePayloadOp {  // payload column `column` of rows [first_row, ...) (late materialization)
  RelationSpec spec;
  int column = 0;
  uint64_t first_row = 0, rows = 0;
  Buffer out;
};
struct HistogramOp {  // result.values[p] = rows of `in` in partition p
  Tuples in;
  PartitionFn fn;
  // Optional (k+1 ascending row offsets of `in`, as PartitionOp's): each segment counted on its
  // own, result.values = k * fanout counts, segment-major (segment s's partition p at
  // s * fanout + p). One operator for many slices (gpj's histogram pass), not one per slice.
  std::vector<uint64_t> in_segments{};
  // Or (instead of in_segments): row ranges of `in` that need not be adjacent, each a segment as
  // above (triton's second pass counts a first-pass partition's runs, one in each chunk of a
  // chunk-major output, in one operator).
  std::vector<RowRange> in_ranges{};
  // Where it counts (triton's prefix_sum = cpu | gpu). Auto: where its input is (host memory: the
  // host's CPUs). Host: the host's CPU threads (the CUDA backend's host lane). Device: the device,
  // reading an input in pinned host memory over the link. The cpu backend runs it on its CPUs.
  enum class Placement : uint8_t { Auto, Host, Device };
  Placement placement = Placement::Auto;
  // Optional: the counts stay in the rank's memory (device memory on a GPU, host memory on the
  // cpu backend) for a scan there, instead of coming back to the host. Segment s's count of
  // partition p goes to word p * stride + counts_first + s of counts_out, stride = counts_stride
  // or, when 0, this operator's segments: partition-major, so that several operators can fill
  // the columns of one buffer and an exclusive scan (ScanOp) over its fanout * stride words gives
  // ChunkPartitionOp::offsets_on_device. result.values is then each partition's total over the
  // segments (fanout values), not the segments' counts.
  Buffer counts_out{};
  uint64_t counts_first = 0, counts_stride = 0;
};
// The checks of a HistogramOp's counts_out that need no data, the same on every backend: its
// columns fit counts_stride and the buffer holds fanout * stride words. A RuntimeError names the
// operator, the buffer and the sizes.
void check_histogram_counts(const HistogramOp& o);
// Scatter `in` by fn. With in_segments (k+1 offsets), each segment is partitioned on its own
// and the output keeps segment order: result.values = k * fanout + 1 offsets into `out`.
struct PartitionOp {
  Tuples in;
  std::vector<uint64_t> in_segments;
  PartitionFn fn;
  Tuples out;  // capacity >= in.rows
  Buffer offsets_out{};  // optional: also receives the result's offsets (k * fanout + 1 words)
};
struct BuildOp {
  Tuples in;
  HashTable* table;
};
struct ProbeOp {
  const HashTable* table;
  Tuples probe;
  JoinOutput out;
  uint64_t out_first = 0;  // first output row this operator writes
  OutputMode mode = OutputMode::CountThenWrite;
};
// Per-partition build and probe (phj): partition p of r joins partition p of s.
struct PartitionedJoinOp {
  Partitioned r, s;
  JoinOutput out;
  uint64_t out_first = 0;
  OutputMode mode = OutputMode::CountThenWrite;
  TableKind table = TableKind::LinearProbing;  // per-partition tables; HashRowId runs as LinearProbing
};
struct SortOp {  // out = in sorted by key (stable for Merge)
  Tuples in, out;
  SortAlgo algo = SortAlgo::Radix;
  // The radix buckets the caller counts the sorted rows by (bits 0: none). The simulator, which
  // has no rows, keeps sorted rows as pieces of these buckets, so that its rows of a bucket are
  // the caller's counts (mgsmj's merge stages cut runs where its histograms say).
  PartitionFn buckets{};
};
struct MergeJoinOp {  // m:n merge join of two key-sorted inputs
  Tuples r, s;
  JoinOutput out;
  uint64_t out_first = 0;
  OutputMode mode = OutputMode::CountThenWrite;
};
struct GatherOp {  // out[i] = column[row_ids[i] - base_row]
  Buffer row_ids; uint8_t id_bytes = 4;
  Buffer column; uint8_t col_bytes = 4;
  uint64_t base_row = 0;
  uint64_t rows = 0;
  Buffer out;
};
// Count and order-independent checksum of `rows` output rows (see core/verify/checksum.hpp).
struct ChecksumOp {
  Buffer keys; uint8_t key_bytes = 4;
  std::vector<Buffer> columns;  // R payload columns then S payload columns
  std::vector<uint8_t> column_bytes;
  uint64_t first = 0, rows = 0;
};
struct ScanOp {  // exclusive prefix sum of uint64 values
  Buffer in, out;
  uint64_t n = 0;
};

// The first pass of an out-of-core partitioning (triton, lutz2022 4.2-4.3 and 5.3): chunk c of
// the input (chunks[c], each in any memory space) writes its rows of partition p from output row
// offsets[c * fanout + p] on, into `cache` for chunks [0, cached_chunks) and into `spill` for the
// rest. chunked_layout (below) gives offsets from one histogram per chunk, so that both outputs
// are partition-major: partition p is cache rows [cache_starts[p], cache_starts[p + 1]) followed
// by spill rows [spill_starts[p], spill_starts[p + 1]), its chunks in chunk order. Rows keep no
// order inside a (chunk, partition) run. result.count = rows written.
// The partitioner says how the kernel writes (CUDA; the CPU kernel scatters through cache lines
// either way, the simulator costs the writes to host memory at the partitioner's measured rate
// where the profile has it, else by their granularity):
//  * Shared: block-shared buffers in shared memory, flushed in aligned 128-byte multiples.
//  * Hierarchical: a second level of flush_bytes per (block, partition) in device memory, and a
//    spare per warp, written out whole: large writes, what a link to host memory needs to reach
//    its rate.
enum class Partitioner : uint8_t { Shared, Hierarchical };
const char* to_string(Partitioner p);  // "shared", "hierarchical"
// Offsets on the device (offsets_on_device, instead of `offsets`): the host never handles the
// per-chunk offsets (triton's second pass: 128 chunks x 2048 partitions per relation and
// partition, whose layout on the host kept the GPU waiting). They are 64-bit words in the rank's
// memory, partition-major: chunk c's run of partition p starts at word p * chunks.size() + c, the
// exclusive scan of the chunks' counts stored so (HistogramOp::counts_out). Every chunk then goes
// to `cache` (cached_chunks = chunks.size(), no spill): one scan lays out one output.
// result.values is then the fanout + 1 partition starts in the cache (word p * chunks.size() for
// p < fanout, and the chunks' rows), for the cost model's partition sizes and for checks.
struct ChunkPartitionOp {
  std::vector<Tuples> chunks;
  PartitionFn fn;
  std::vector<uint64_t> offsets;  // chunks.size() * fanout, chunk-major
  Buffer offsets_on_device{};     // or: chunks.size() * fanout words, partition-major (above)
  uint32_t cached_chunks = 0;
  Tuples cache, spill;            // spill may be empty when every chunk is cached
  Partitioner partitioner = Partitioner::Shared;
  uint32_t flush_bytes = 4096;    // Hierarchical: bytes of a partition's device-memory buffer
};
// Where chunk c's run of partition p starts in its output: word c * chunk_stride + p *
// partition_stride of `words` (chunk-major host offsets, or partition-major offsets_on_device),
// the one rule the CPU and CUDA kernels read offsets by.
struct ChunkOffsets {
  const uint64_t* words = nullptr;
  uint64_t chunk_stride = 0, partition_stride = 0;
  JL_HD uint64_t at(uint64_t c, uint64_t p) const { return words[c * chunk_stride + p * partition_stride]; }
};
// The strides of `o`'s offsets over `words` (its offsets' copy where the kernel runs, or the
// memory of its offsets_on_device).
ChunkOffsets chunk_offsets(const ChunkPartitionOp& o, const uint64_t* words);
// Bytes of one write to the spill buffer: what the link sees of the partitioner's flushes. A
// hierarchical buffer of flush_bytes is written out when full and at each chunk's end, one
// column at a time: a chunk of n rows fills a partition's buffer with n / fanout rows on
// average, so its flushes are at most that many rows of a column (at 2^30 rows, 32Ki-row chunks
// over 256 partitions: 1 KiB of keys, then 1 KiB of values, not 4 KiB).
inline uint32_t link_write_granule(const ChunkPartitionOp& o) {
  if (o.partitioner == Partitioner::Shared || o.chunks.empty()) return 128u;
  const TupleFormat f = o.chunks[0].fmt;
  uint64_t rows = 0;
  for (const Tuples& c : o.chunks) rows += c.rows;
  const double per_partition = double(rows) / double(o.chunks.size()) / double(o.fn.fanout());
  const double flush_rows = std::min(double(o.flush_bytes) / f.tuple_bytes(), std::max(1.0, per_partition));
  return uint32_t(std::max(16.0, flush_rows * f.tuple_bytes() / 2));
}
// Output layout of a ChunkPartitionOp from the chunk-major histograms of its chunks (hist[c *
// fanout + p], a segmented HistogramOp's values): each output's partitions in order, and inside
// a partition its chunks in order.
struct ChunkLayout {
  std::vector<uint64_t> offsets;       // chunks * fanout
  std::vector<uint64_t> cache_starts;  // fanout + 1 rows of `cache`
  std::vector<uint64_t> spill_starts;  // fanout + 1 rows of `spill`
  uint64_t rows(uint32_t p) const {
    return cache_starts[p + 1] - cache_starts[p] + spill_starts[p + 1] - spill_starts[p];
  }
};
// The checks of a ChunkPartitionOp that need no data, the same on every backend: chunks.size() *
// fanout offsets, one tuple format for chunks and outputs, no offset past its output's capacity,
// cached_chunks <= chunks; with offsets_on_device, no host offsets, every chunk cached and a
// buffer of chunks.size() * fanout words. A RuntimeError names what does not fit.
void check_chunk_partition(const ChunkPartitionOp& op);
ChunkLayout chunked_layout(const std::vector<uint64_t>& hist, uint32_t fanout, uint32_t cached_chunks);
// Rows of `in` in each of `chunks` slices of equal size (the last one shorter): k + 1 offsets.
std::vector<uint64_t> chunk_bounds(uint64_t rows, uint32_t chunks);
// Pieces of a ChunkPartitionOp: it runs a thread block per piece. triton's second pass and a
// first pass writing over the link cut what they partition into pieces of at most kPieceRows rows
// (whole runs kept two blocks busy, 11 ms for a 2Mi-row partition on an H100; a hierarchical
// partitioner flushes its buffers at a piece's end, so smaller pieces write smaller runs). A
// first pass into device memory cuts pieces of kDevicePieceRows: a staged 2Mi-row chunk in 64
// pieces took 0.33-0.83 ms on an H200, more than its copy over the link.
inline constexpr uint64_t kPieceRows = 1 << 15, kDevicePieceRows = 1 << 12;
// Bounds of the pieces of `rows` rows, pieces of at most `piece` rows: none empty (no bounds but
// {0, 0} for no rows).
std::vector<uint64_t> piece_bounds(uint64_t rows, uint64_t piece);

// A kernel that reads or writes host memory itself (zero-copy), in accesses of `granule` bytes:
// what the link gives a partitioner's flushes to a spill buffer or a join's reads of one. The
// link microbenchmark of calibrate. Access i (of bytes / granule) touches host granule i
// (sequential) or a granule at a position hashed from i over all of `host` (random: collisions
// allowed, as a partitioner's writes do not collide but land as scattered).
//  * Read: host -> device[0, bytes).   * Write: device[0, bytes) -> host.
//  * Both: both at once, reads from the first half of `host` into device[0, bytes) and writes
//    from device[bytes, 2 bytes) to its second half.
// result.count = bytes moved (both directions together).
enum class LinkAccess : uint8_t { Read, Write, Both };
const char* to_string(LinkAccess a);  // "read", "write", "both"
struct LinkAccessOp {
  Buffer host;             // host memory (on a GPU: pinned, mapped)
  Buffer device;           // bytes (Both: 2 x bytes) of device memory
  uint64_t bytes = 0;      // bytes each way: a multiple of granule
  uint32_t granule = 128;  // bytes per access: a power of two, 16 or more
  bool random = true;      // granule positions random over `host`, or in order from its start
  LinkAccess access = LinkAccess::Write;
};
// The checks of a LinkAccessOp that need no data: granule a power of two >= 16, bytes a multiple of
// it, and the buffers large enough (a RuntimeError names the field and its value).
void check_link_access(const LinkAccessOp& op);
// The host granule that access i touches (granules: of `host`'s region, the half of it in Both).
JL_HD uint64_t link_access_granule(uint64_t i, uint64_t granules, bool random) {
  if (!random) return i % granules;
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ULL;  // splitmix64's finalizer: positions spread evenly
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return (x ^ (x >> 31)) % granules;
}

// Merges key-sorted runs into `out` (the runs' rows in total, sorted by key; equal keys keep run
// order). mgsmj merges a relation's sorted chunksets in host memory (maltenberger2025 4.2): it
// runs on the host's CPU threads on every backend, whatever memory its buffers are in.
struct MultiwayMergeOp {
  std::vector<Tuples> runs;
  Tuples out;
};

// Merges two key-sorted runs into `out` (a.rows + b.rows rows, sorted by key; rows of equal keys
// in any order). The local step of a merge stage of mgsmj's merge-based multi-GPU sort
// (maltenberger2025 3.1.1): a GPU's retained rows and the block it received from its partner.
struct MergeOp {
  Tuples a, b, out;
};

// The pivot of a merge stage: the first t in [0, n) with x[t] <= y[t], else n (result.count), for
// x non-increasing and y non-decreasing keys of key_bytes (a binary search). mgsmj's sort probes
// position j of the right run and position |left| - 1 - j of the left run: x[t] = left[|left| - 1
// - j_t], y[t] = right[j_t] for ascending j_t, and the first such j is the fewest rows to swap.
struct PivotSearchOp {
  Buffer x, y;
  uint8_t key_bytes = 8;
  uint64_t n = 0;
};

// Cascaded compression (gao2021 section 4; the format and its layers: core/exec/codec.hpp), an
// operator pair kept apart from the strategies: a batch of columns (e.g. the partitions a rank
// sends) in one operator, each column compressed on its own in chunks of 2^chunk_log2 values.
struct CodecColumn {  // values [first, first + rows) of `buf`, value_bytes wide
  Buffer buf;
  uint64_t first = 0, rows = 0;
};
// Compresses column i with configs[i] (select_codec: a host function, kernels/cpu/codec.hpp
// codec_select) into `out` from byte 0, the columns' streams back to back.
// result.values = the n + 1 byte offsets of the streams, result.count = bytes written. `out`
// must hold compress_bound(op) bytes (the sizes are known only once the layers ran).
struct CompressOp {
  std::vector<CodecColumn> in;
  std::vector<codec::Config> configs;  // one per column
  uint8_t value_bytes = 8;
  uint32_t chunk_log2 = codec::kDefaultChunkLog2;
  Buffer out;
};
// Decompresses buffer b of the batch `in` (bytes [offsets[b], offsets[b + 1]): a CompressOp's
// result.values) into out[b] (out[b].rows = the values it has room for). result.values = the rows
// of each buffer (from its header), result.count = their sum. Every header, offset, count and run
// is checked: a RuntimeError names the buffer, the chunk and what is wrong, the same on every
// backend (kernels/cpu/codec.hpp codec_error_message).
struct DecompressOp {
  Buffer in;
  std::vector<uint64_t> offsets;
  uint8_t value_bytes = 8;
  std::vector<CodecColumn> out;
};
// Bytes a CompressOp's output needs at most (every stream at full width), and the checks of a
// CompressOp / DecompressOp that need no data (counts, widths, chunk size, offsets within `in`;
// a RuntimeError names what does not fit). Every backend runs them.
uint64_t compress_bound(const CompressOp& op);
void check_compress(const CompressOp& op);
void check_decompress(const DecompressOp& op);

// The row ranges a HistogramOp counts, one per segment: its in_ranges, the segments between its
// in_segments, or all of `in` without either. A RuntimeError names offsets that descend, a range
// past `in`'s rows, a single offset (no segment), or both fields given. Every backend checks a
// histogram's segments here; histogram_rows is the rows they hold together.
std::vector<RowRange> histogram_ranges(const HistogramOp& o);
uint64_t histogram_rows(const HistogramOp& o);
// Whether the ranges are adjacent (in_segments or the whole input): then {ranges[0].begin,
// ranges[i].end...} are segment bounds.
bool ranges_adjacent(const std::vector<RowRange>& r);

// --- Star Schema Benchmark queries (core/workload/ssb.hpp; thostrup2023 section 6.3) -------------
// Rows [first_row, first_row + out.rows) of an SSB table as `query` ships them. Lineorder: key =
// the query's foreign keys packed by its plan (lineorder_key), value = lo_revenue (8 + 8 bytes).
// A dimension: key = its key (row + 1), value = dimension_value, the row's part of the group or
// ssb::kFiltered where it fails the query's filter (4 + 4 bytes), so that a probe finding a
// filtered row stops as a miss does. result.count = rows written.
struct StarGenerateOp {
  ssb::Scale scale;
  ssb::StarQuery query;
  ssb::Table table = ssb::Table::Lineorder;
  uint64_t first_row = 0;
  Tuples out;
};
// Chained probes and aggregation: each lineorder row of `in` (StarGenerateOp's) probes dims[i],
// step i of the query's plan (Chained tables of 4-byte keys and values built from a dimension's
// StarGenerateOp rows), one after another, and stops at the first miss or filtered row; a row
// that passes every step adds its revenue to groups[group] (query.groups uint64 words, added to,
// never cleared). result.count = rows that passed.
struct StarProbeOp {
  ssb::Scale scale;  // for the cost model: the steps' pass fractions (ssb::step_pass_fractions)
  ssb::StarQuery query;
  std::vector<const HashTable*> dims;
  Tuples in;
  Buffer groups;
};
// The checks every backend runs before a StarProbeOp: one Chained table of 4-byte keys and values
// per step, a lineorder input of 8 + 8 bytes and a groups buffer of query.groups words. A
// RuntimeError names what does not fit.
void check_star_probe(const StarProbeOp& op);
// Its tables as the kernels read them (pointers into the tables' own memory).
std::vector<ssb::DimTableRef> dim_table_refs(const StarProbeOp& op);

using Op = std::variant<GenerateOp, GeneratePayloadOp, HistogramOp, PartitionOp, BuildOp, ProbeOp,
                        PartitionedJoinOp, SortOp, MergeJoinOp, GatherOp, ChecksumOp, ScanOp, ChunkPartitionOp,
                        LinkAccessOp, MultiwayMergeOp, MergeOp, PivotSearchOp, CompressOp, DecompressOp,
                        StarGenerateOp, StarProbeOp>;

// The parameters a cost model needs, extracted from an operator (and recorded in traces).
struct OpParams {
  OpKind kind = OpKind::Generate;
  uint64_t rows_in = 0;     // tuples read (both sides for joins)
  uint64_t rows_build = 0;  // build side rows (Build, joins)
  uint64_t rows_out = 0;    // tuples written (filled in after completion where data-dependent)
  uint32_t key_bytes = 0, val_bytes = 0;
  uint32_t fanout = 0;      // Partition/Histogram/PartitionedJoin
  uint64_t table_slots = 0; // Build/Probe
  uint64_t bytes = 0;       // Copy/Send/Recv/Put; Compress / Decompress: compressed bytes (after completion)
  int mem_src = -1, mem_dst = -1;  // Copy: MemSpace of each end
  std::string detail;       // free-form (algorithm, table kind, peer)
};
OpParams params_of(const Op& op);

// --- streaming operators (gpj, thostrup2023 section 4) -------------------------------------------
// The pipelined join streams fixed-size chunks of tuples from sender CPUs into ring buffers in the
// receivers' (GPU) memory with one-sided puts; one persistent consumer per receiver polls the
// rings, checks each chunk's checksum before using it, builds a chained hash table per partition
// and probes it, and streams the result to host memory. The chunk layout and checksum are in
// core/exec/chunk.hpp (JL_HD, shared by every backend).
//
// These operators are a variant of their own, launched with Rank::launch_streaming, so that every
// backend's visitor of `Op` keeps compiling; a backend that lacks them says so when launched.

// Packs partitioned tuples into chunk images (the bytes one put sends into a ring slot): for each
// partition p in order, rows [begin[p], begin[p] + rows[p]) of `in` cut into chunks of at most
// slot_rows rows; chunk c of partition p carries sequence number first_seq[p] + c (its 1-based
// position on its ring), partition p + partition_base, `relation`, `epoch` and its checksum.
// Images are chunk_slot_bytes(fmt, slot_rows) apart in `out`, in (partition, chunk) order;
// partitions with no rows have none. Runs on host CPU threads on every backend (its input is in
// host memory: the senders are CPUs). result.count = images written.
// With partition_by set, `in` is not partitioned yet: the operator partitions it by that function
// while packing, in one pass (the rows go from the input straight into the images, no
// partitioned copy). The images are exactly those of PartitionOp{in, fn} followed by this
// operator on its output: rows keep their input order inside a partition, begin is empty and
// rows[p] must be the number of rows of `in` in partition p (every partition of fn, from a
// histogram); a count that differs is an error naming the partition, and nothing is written.
// With in_slices (k + 1 row offsets of `in`, from 0 to in.rows) and slice_rows (the rows of each
// slice in each partition, k * fanout, slice-major: from a histogram of each slice), the operator
// counts nothing itself (the partition's counting pass over the input is gone) and gives the same
// images; a slice whose rows differ from slice_rows is an error naming it (the images are then
// incomplete). result.values = the fanout + 1 offsets PartitionOp would return.
struct PackChunksOp {
  Tuples in;
  std::optional<PartitionFn> partition_by;  // unset: `in` is partitioned (begin/rows say where)
  std::vector<uint64_t> in_slices, slice_rows;  // optional, with partition_by
  std::vector<uint64_t> begin, rows;  // per partition
  std::vector<uint64_t> first_seq;    // per partition, >= 1
  uint32_t partition_base = 0;
  uint32_t relation = 0;              // 0 = R (build side), 1 = S (probe side)
  uint32_t epoch = 0;                 // the exchange's id: slots still holding an older chunk differ
  uint64_t slot_rows = 0;
  Buffer out;
};
// The checks of a PackChunksOp's plan that need no data, the same on every backend: one begin
// (unless partition_by), row count and sequence number per partition, slot_rows in [1, 2^32),
// partitions within `in`, slices only with partition_by, and then from 0 to in.rows with a count
// per slice and partition. A RuntimeError names what does not fit.
void check_pack_plan(const PackChunksOp& op);

// Chunks released by a StreamConsumeOp, readable by the host while it runs (the strategy returns
// them to the senders as ring-slot credits), and its cancellation (the strategy failed).
class StreamProgress {
 public:
  explicit StreamProgress(size_t rings);
  ~StreamProgress();
  StreamProgress(const StreamProgress&) = delete;
  StreamProgress& operator=(const StreamProgress&) = delete;
  size_t rings() const { return n_; }
  // Chunks of `ring` released so far (monotonic). Inline: senders scan every ring for credits
  // hundreds of millions of times in a large simulation.
  uint64_t consumed(size_t ring) const { return __atomic_load_n(&words_[ring], __ATOMIC_ACQUIRE); }
  void release(size_t ring, uint64_t chunks);  // the consumer is done with the first `chunks`
  // Counts the release() calls: unchanged since a scan of every ring, no ring changed since. A
  // consumer that writes consumed_words() itself (a GPU kernel) leaves it at 0: scan every time.
  uint64_t releases() const { return __atomic_load_n(&releases_, __ATOMIC_ACQUIRE); }
  void cancel();                               // makes the consumer stop with an error
  bool cancelled() const;
  // The words behind it, for backends whose consumer is not a host thread (a GPU kernel writes
  // `consumed` and reads `cancel` through mapped host memory: cudaHostRegister them). Accessed
  // atomically: 64-bit consumed counts, a 32-bit cancel word. Both lie in words_bytes() bytes
  // on pages of their own (registering pins whole pages: no other allocation shares them).
  uint64_t* consumed_words() { return words_; }
  int* cancel_word() { return reinterpret_cast<int*>(words_ + n_); }
  size_t words_bytes() const { return bytes_; }

 private:
  size_t n_, bytes_;
  uint64_t* words_;  // n_ consumed counts, then the cancel word; accessed atomically
  uint64_t releases_ = 0;
};

// The persistent consumer of one receiver. Ring (s, q) = s * parts + q carries the chunks of local
// partition q sent by rank s: first r_chunks[ring] chunks of R, then s_chunks[ring] chunks of S,
// chunk k (0-based) in slot k % slots with sequence number k + 1. The rings need no clearing:
// a slot holds a chunk of this exchange only when its header carries `epoch`. Semantics:
//  * A chunk is used only once its header's epoch and sequence number are the expected ones and
//    its checksum (chunk_checksum) matches its bytes. Until then it is re-read: a one-sided write may
//    become visible in any order (GPUDirect RDMA gives no ordering to a polling kernel). A chunk
//    whose sequence number is there but whose checksum has not matched for chunk_timeout_s is an
//    error naming the chunk (source, partition, relation, number): it was corrupted in flight.
//    Nothing arriving at all for idle_timeout_s is an error naming the chunk waited for.
//  * R chunks of partition q are inserted into tables[q] (Chained layout of HashTable, sized by
//    the strategy from the global histogram, cleared by the consumer before use): each row is
//    appended to the chain array and pushed onto its bucket's head through next[], as BuildOp
//    does (on the GPU: an atomic cursor into the chain array, an atomic exchange of the head). S chunks of q are probed against tables[q]
//    only after every R chunk of q (from every source) was inserted; a ring whose next chunk is
//    an S chunk of an unfinished partition waits while the other rings go on.
//  * After a chunk was used, progress->release(ring, k + 1): its slot may be rewritten.
//  * workers[q]: the parallelism given to partition q, proportional to its share of the global
//    histogram (GPU: thread blocks of the partition's grid; CPU: at most this many threads).
//  * Output (mode Direct): rows (key, R value, S value) are written to staging (a double buffer
//    of 2 x staging_rows rows in device memory); a full half is copied to `out` (host memory)
//    at rows [out_first + written, ...) while the other half fills; the rest is flushed at the
//    end. Rows never go past out.capacity: past it the operator only counts and sets
//    result.overflow. mode CountOnly writes nothing. result.count = matches.
//  * It ends when every ring delivered its chunks, or with an error when progress->cancel().
//  * copied_in: the chunks reach `rings` by the receiver's own copies (Rank::copy) from rings in
//    host memory where the senders' puts land (no GPUDirect RDMA), not by puts into `rings` as an
//    exposed window. The hardware backends see no difference (they read checksums); the simulator
//    counts a ring's chunks as its copies land rather than by the window's flags.
//  * Star mode (`star` set: an SSB query, R sends no chunks): every S chunk goes through the
//    chained probes and aggregation of `star` (StarProbeOp, its `in` unused) instead of a
//    partition's table; nothing is output (mode CountOnly) and result.count = rows that passed.
struct StreamConsumeOp {
  Buffer rings;  // sources * parts * slots slots of slot_bytes
  uint32_t sources = 0, parts = 0, slots = 0;
  uint64_t slot_rows = 0, slot_bytes = 0;
  uint32_t epoch = 0;
  TupleFormat r_fmt, s_fmt;  // equal key widths
  std::vector<uint64_t> r_chunks, s_chunks;  // per ring
  std::vector<uint32_t> partition_ids;       // per local partition: the global id in its headers
  std::vector<HashTable> tables;             // per local partition
  std::vector<uint32_t> workers;             // per local partition
  OutputMode mode = OutputMode::Direct;
  JoinOutput out;
  uint64_t out_first = 0;
  JoinOutput staging;  // capacity 2 * staging_rows
  uint64_t staging_rows = 0;
  std::shared_ptr<StreamProgress> progress;
  double chunk_timeout_s = 10, idle_timeout_s = 60;
  bool copied_in = false;
  std::optional<StarProbeOp> star;
};

using StreamingOp = std::variant<PackChunksOp, StreamConsumeOp>;
OpParams params_of(const StreamingOp& op);

}  // namespace joinlab
