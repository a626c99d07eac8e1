// The joins one rank runs over tuples it holds: the bodies of the single-GPU strategies, reused
// as the local join of the distributed ones (shuffle). Each records its phases as
// `phase_prefix` + name, so a caller can tell them from its own.
#pragma once
#include <optional>
#include <cstdint>
#include <string>

#include "core/strategies/strategy_util.hpp"

namespace joinlab {

// --- npj: one global hash table ---------------------------------------------------------------
struct HashJoinConfig {
  TableKind table = TableKind::LinearProbing;
  double load_factor = 0.5;
  OutputMode output = OutputMode::CountThenWrite;
  uint64_t seed = 0x2545f4914f6cdd1dULL;  // table_slot seed
  std::optional<MemSpace> table_space;     // npj's table_space (unset: the table goes with the data)
};
void add_hash_join_options(po::options_description& d,
                           const std::string& default_output);  // table, load_factor, output
HashJoinConfig hash_join_config(const po::variables_map& vm);

// Builds one table of r in `space`, probes it with s. Phases: build, probe.
OutputSink npj_join(Rank& rank, Stream st, const Tuples& r, const Tuples& s, const HashJoinConfig& cfg, MemSpace space,
                    const std::string& phase_prefix = "");
// Device-memory bytes npj cannot avoid on these rows: read R, clear the table (rows /
// load_factor slots, a power of two) and write R into it, read S, read at least one table entry
// per S tuple, write `out_bytes` of output.
double npj_memory_bytes(uint64_t r_rows, uint64_t s_rows, TupleFormat r_fmt, TupleFormat s_fmt, double load_factor,
                        double out_bytes);

// --- phj: radix-partitioned hash join ---------------------------------------------------------
// Radix bits of each partitioning pass (low key bits first; the second pass splits every
// first-pass partition by the next bits).
struct RadixPlan {
  uint32_t pass1_bits = 0, pass2_bits = 0;
  uint32_t bits() const { return pass1_bits + pass2_bits; }
  int passes() const { return (pass1_bits > 0) + (pass2_bits > 0); }
};
// Partition bytes of R a per-partition join should hold by default: a partition's hash table
// (at 50% load) then fits a GPU block's 64 KB shared-memory table with two blocks per SM (the
// H100 benchmarks' setting, 2^27 rows -> 2^15 partitions) or a CPU core's L2 share. Backend-neutral
// on purpose, so the plan (and the analytic bound) is the same on every backend.
constexpr uint64_t kDefaultPartitionBudget = 32 << 10;
// Most radix bits one pass scatters to while its write-combine buffers stay in shared memory /
// L1 (rui2017: no more than 1024-2048 partitions per pass).
constexpr uint32_t kMaxBitsPerPass = 11;
constexpr uint32_t kMaxRadixBits = 24;
// radix_bits 0: enough bits for R's partitions to fit `budget`; passes 0: one pass up to
// kMaxBitsPerPass bits, else two (bits split evenly); a forced pass count gets >= 1 bit each.
RadixPlan plan_radix(uint64_t r_rows, uint32_t r_tuple_bytes, uint32_t key_bytes, uint64_t budget, uint32_t radix_bits,
                     int passes);

struct PhjConfig {
  uint32_t radix_bits = 0;  // 0 = from sizes and budget
  int passes = 0;           // 0 = auto
  uint64_t budget = kDefaultPartitionBudget;
  TableKind table = TableKind::LinearProbing;
  OutputMode output = OutputMode::CountThenWrite;
  bool merged_passes = false;  // two passes as one PartitionOp on all the bits (partition_ops=merged)
};
void add_phj_options(po::options_description& d);  // radix_bits, passes, partition_budget, partition_ops, table, output
PhjConfig phj_config(const po::variables_map& vm);

// Device-memory bytes phj cannot avoid on these rows: every partitioning pass of the plan reads
// and writes R and S, the join reads them once more and writes `out_bytes` of output.
double phj_memory_bytes(uint64_t r_rows, uint64_t s_rows, TupleFormat r_fmt, TupleFormat s_fmt, const PhjConfig& cfg,
                        double out_bytes);

// Radix-partitions r and s (1 or 2 passes, the second with in_segments), then joins partition p
// of r with partition p of s. Consumes r and s: a second pass writes over their buffers.
// Phases: partition, join.
OutputSink phj_join(Rank& rank, Stream st, Tuples r, Tuples s, const PhjConfig& cfg, MemSpace space,
                    const std::string& phase_prefix = "");

// --- registration -----------------------------------------------------------------------------
StrategyInfo npj_strategy();
StrategyInfo phj_strategy();
StrategyInfo smj_strategy();
StrategyInfo chunked_strategy();
StrategyInfo triton_strategy();
StrategyInfo shuffle_strategy();

}  // namespace joinlab
