// The operator vocabulary: the contract between strategies, kernels, cost models and
// calibration. Each operator is a plain struct (inputs, outputs, parameters). Every backend
// implements every operator: kernels/cpu and kernels/cuda execute it, sim/ charges its modeled
// cost, models/ fits that cost from calibration runs. Adding an operator means adding all four.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/common/hashing.hpp"
#include "core/exec/tuples.hpp"
#include "core/workload/relation.hpp"

namespace joinlab {

enum class OpKind : uint8_t {
  Generate, Histogram, Partition, Build, Probe, PartitionedJoin, Sort, MergeJoin,
  Gather, Checksum, Scan,
  // Data movement, recorded in traces and modeled like operators.
  Copy, Send, Recv, Put,
  kCount
};
const char* to_string(OpKind k);


enum class TableKind : uint8_t { LinearProbing, Chained };
// A hash table in some memory space. Layout (both backends):
//  LinearProbing: keys[slots] (empty = all-ones), vals[slots]
//  Chained: heads[buckets] (uint32 row index, all-ones = none), next[rows], keys[rows], vals[rows]
struct HashTable {
  TableKind kind = TableKind::LinearProbing;
  TupleFormat fmt;
  uint64_t slots = 0;   // LinearProbing slots, or Chained buckets (power of two)
  uint64_t rows = 0;    // tuples inserted
  Buffer keys, vals, heads, next;
  uint64_t hash_seed = 0;
};
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
};
// Scatter `in` by fn. With in_segments (k+1 offsets), each segment is partitioned on its own
// and the output keeps segment order: result.values = k * fanout + 1 offsets into `out`.
struct PartitionOp {
  Tuples in;
  std::vector<uint64_t> in_segments;
  PartitionFn fn;
  Tuples out;  // capacity >= in.rows
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
  TableKind table = TableKind::LinearProbing;
};
struct SortOp {  // out = in sorted by key (stable for Merge)
  Tuples in, out;
  SortAlgo algo = SortAlgo::Radix;
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

using Op = std::variant<GenerateOp, GeneratePayloadOp, HistogramOp, PartitionOp, BuildOp, ProbeOp,
                        PartitionedJoinOp, SortOp, MergeJoinOp, GatherOp, ChecksumOp, ScanOp>;

// The parameters a cost model needs, extracted from an operator (and recorded in traces).
struct OpParams {
  OpKind kind = OpKind::Generate;
  uint64_t rows_in = 0;     // tuples read (both sides for joins)
  uint64_t rows_build = 0;  // build side rows (Build, joins)
  uint64_t rows_out = 0;    // tuples written (filled in after completion where data-dependent)
  uint32_t key_bytes = 0, val_bytes = 0;
  uint32_t fanout = 0;      // Partition/Histogram/PartitionedJoin
  uint64_t table_slots = 0; // Build/Probe
  uint64_t bytes = 0;       // Copy/Send/Recv/Put
  int mem_src = -1, mem_dst = -1;  // Copy: MemSpace of each end
  std::string detail;       // free-form (algorithm, table kind, peer)
};
OpParams params_of(const Op& op);

}  // namespace joinlab
