// phj: the radix-partitioned hash join of rui2017 (section 3.2) with gao2021's partitioning
// (3.1). R and S are radix-partitioned on the low key bits in one or two passes until an R
// partition fits the per-partition join budget (a block's shared memory, a core's cache), then
// partition p of R is built and probed by partition p of S (PartitionedJoinOp; skewed,
// oversized partitions are the kernel's to split).
#include <algorithm>

#include "core/common/error.hpp"
#include "core/strategies/rank_joins.hpp"

namespace joinlab {

RadixPlan plan_radix(uint64_t r_rows, uint32_t r_tuple_bytes, uint32_t key_bytes, uint64_t budget, uint32_t radix_bits,
                     int passes) {
  uint32_t bits = radix_bits;
  if (bits == 0) {
    const double partitions = double(r_rows) * r_tuple_bytes / double(budget ? budget : 1);
    while (bits < kMaxRadixBits && double(1ULL << bits) < partitions) ++bits;
  }
  bits = std::min<uint32_t>(bits, key_bytes * 8u);
  if (passes == 0) passes = bits == 0 ? 0 : bits <= kMaxBitsPerPass ? 1 : 2;
  bits = std::max<uint32_t>(bits, uint32_t(passes));  // a forced pass splits by at least one bit
  RadixPlan p;
  if (passes == 1) {
    p.pass1_bits = bits;
  } else if (passes == 2) {
    p.pass1_bits = (bits + 1) / 2;
    p.pass2_bits = bits - p.pass1_bits;
  }
  return p;
}

void add_phj_options(po::options_description& d) {
  d.add_options()("radix_bits", int_option("radix_bits", 0, 0, kMaxRadixBits),
                  "total radix bits (fanout 2^bits); 0 = enough for an R partition to fit partition_budget")(
      "passes", int_option("passes", 0, 0, 2),
      "partitioning passes: 1, 2 (second pass with in_segments), or 0 = one up to 2^11 partitions, else two")(
      "partition_budget", int_option("partition_budget", int64_t(kDefaultPartitionBudget), 1024, int64_t(1) << 40),
      "bytes of R one partition may hold when radix_bits = 0 (per-partition join in shared memory / cache)")(
      "partition_ops", choice_option("partition_ops", {"split", "merged"}, "split"),
      "two passes as two operators (split: the second with in_segments) or as one on all the radix bits (merged: "
      "the backend splits it; CUDA counts both passes' digits in one histogram read)");
  add_table_kind_option(d);
  add_output_option(d, "direct");  // rui2017 3.2.2: direct output instead of probing twice
}

PhjConfig phj_config(const po::variables_map& vm) {
  PhjConfig c;
  c.radix_bits = uint32_t(vm["radix_bits"].as<int64_t>());
  c.passes = int(vm["passes"].as<int64_t>());
  c.budget = uint64_t(vm["partition_budget"].as<int64_t>());
  c.table = table_kind(vm);
  c.output = output_mode(vm);
  c.merged_passes = vm["partition_ops"].as<std::string>() == "merged";
  return c;
}

namespace {

// One relation's partitioning by the plan. Pass 1 writes into a new buffer; pass 2 partitions
// every pass-1 partition on its own (in_segments) back into the relation's buffers. With
// `merged`, both passes are one operator on all the radix bits (the backend splits it in two
// passes itself; the CUDA one without the host in between and with one histogram read).
struct RadixPartitioning {
  Tuples in, mid;  // mid: pass 1's output
  Launched pass1, pass2;
  bool merged = false;
  Buffer offsets;  // the final pass's offsets, also in the rank's memory (for the join's kernels)
  MemSpace space = MemSpace::Device;
  std::string tag;
};

// Buffer for the final partitioning's offsets (2^bits partitions + the end).
Buffer offsets_buffer(Rank& rank, MemSpace space, const RadixPlan& plan, const std::string& tag) {
  return rank.alloc(space, ((uint64_t(1) << (plan.pass1_bits + plan.pass2_bits)) + 1) * sizeof(uint64_t),
                    tag + ".offsets");
}

RadixPartitioning start_pass1(Rank& rank, Stream st, Tuples t, const RadixPlan& plan, bool merged, MemSpace space,
                              const std::string& tag) {
  RadixPartitioning rp;
  rp.in = t;
  rp.space = space;
  rp.tag = tag;
  rp.merged = merged && plan.pass2_bits > 0;
  if (plan.passes() == 0) return rp;
  PartitionOp pass1;
  pass1.in = t;
  pass1.fn = PartitionFn{PartitionFn::Radix, plan.pass1_bits + (rp.merged ? plan.pass2_bits : 0), 0, 0};
  pass1.out = rp.mid = rank.alloc_tuples(space, t.rows, t.fmt, tag + ".pass1");
  if (plan.pass2_bits == 0 || rp.merged) pass1.offsets_out = rp.offsets = offsets_buffer(rank, space, plan, tag);
  rp.pass1 = rank.launch(st, pass1);
  return rp;
}

// Waits for pass 1's offsets (pass 2's segments) and queues pass 2.
void start_pass2(Rank& rank, Stream st, RadixPartitioning& rp, const RadixPlan& plan) {
  if (plan.pass2_bits == 0 || rp.merged) return;
  PartitionOp pass2;
  pass2.in = rp.mid;
  pass2.in_segments = rp.pass1.get().values;
  pass2.fn = PartitionFn{PartitionFn::Radix, plan.pass2_bits, plan.pass1_bits, 0};
  pass2.out = rp.in;
  pass2.offsets_out = rp.offsets = offsets_buffer(rank, rp.space, plan, rp.tag);
  rp.pass2 = rank.launch(st, pass2);
}

Partitioned finish(RadixPartitioning& rp, const RadixPlan& plan) {
  if (plan.passes() == 0) return Partitioned{rp.in, {0, rp.in.rows}};
  if (plan.pass2_bits == 0 || rp.merged) return Partitioned{rp.mid, rp.pass1.values(), rp.offsets};
  // Segment-major offsets: final partition = pass-1 partition * 2^pass2_bits + pass-2 partition.
  return Partitioned{rp.in, rp.pass2.values(), rp.offsets};
}

}  // namespace

OutputSink phj_join(Rank& rank, Stream st, Tuples r, Tuples s, const PhjConfig& cfg, MemSpace space,
                    const std::string& phase_prefix) {
  begin_phase(rank, phase_prefix + "partition");
  const RadixPlan plan =
      plan_radix(r.rows, r.fmt.tuple_bytes(), r.fmt.key_bytes, cfg.budget, cfg.radix_bits, cfg.passes);
  // Both relations' passes are queued before the host waits for any offsets, so the device
  // works on S's pass 1 while the host lays out R's pass 2 (no idle gaps between passes).
  // Two operators by default, not one on all the bits (partition_ops=merged, which the CUDA
  // backend runs as two passes with one histogram read, partition.cu): measured on the H100, the
  // merged partitioning saved 0.35 ms of histograms but spent 0.28 ms laying out its second pass,
  // and the join over its partition order took 0.6 ms (8+8 B: 2.8 ms) longer
  // (docs/benchmarks.md). A forced passes = 2 stays split.
  const bool merged = cfg.merged_passes && cfg.passes == 0;
  RadixPartitioning rp = start_pass1(rank, st, r, plan, merged, space, "phj.R");
  RadixPartitioning sp = start_pass1(rank, st, s, plan, merged, space, "phj.S");
  start_pass2(rank, st, rp, plan);
  start_pass2(rank, st, sp, plan);
  const Partitioned pr = finish(rp, plan);
  const Partitioned ps = finish(sp, plan);
  if (pr.fanout() != ps.fanout())
    throw RuntimeError("phj: R has " + std::to_string(pr.fanout()) + " partitions but S " +
                       std::to_string(ps.fanout()));

  begin_phase(rank, phase_prefix + "join");
  // A hash + row-id table (asked for by shuffle's npj options) saves memory for a global table;
  // a per-partition table is private to the join kernel and in cache or shared memory, where the
  // row-id indirection only adds a load: those are linear-probing tables.
  const TableKind table = cfg.table == TableKind::HashRowId ? TableKind::LinearProbing : cfg.table;
  return join_into_new_output(rank, st, cfg.output, space, r, s, "phj.out",
                              [&](const JoinOutput& out, uint64_t first, OutputMode mode) -> Op {
                                return PartitionedJoinOp{pr, ps, out, first, mode, table};
                              });
}

double phj_memory_bytes(uint64_t r_rows, uint64_t s_rows, TupleFormat r_fmt, TupleFormat s_fmt, const PhjConfig& cfg,
                        double out_bytes) {
  const int passes =
      plan_radix(r_rows, r_fmt.tuple_bytes(), r_fmt.key_bytes, cfg.budget, cfg.radix_bits, cfg.passes).passes();
  const double rs = double(r_rows) * r_fmt.tuple_bytes() + double(s_rows) * s_fmt.tuple_bytes();
  return (2.0 * passes + 1.0) * rs + out_bytes;
}

namespace {

void run_phj(Rank& rank, const JoinJob& job) {
  const PhjConfig cfg = phj_config(job.options);
  Inputs in = generate_inputs(rank, job, job.data_space, job.data_space);
  OutputSink out = phj_join(rank, Stream{0}, in.r.tuples, in.s.tuples, cfg, job.data_space);
  report_output(rank, Stream{0}, out, in.r, in.s, job.data_space);
}

// phj_memory_bytes over bw.mem (read + write bandwidth).
Bound phj_bound(const JoinJob& job, const ClusterShape&, const Bandwidths& bw) {
  const Workload& w = job.workload;
  const PhjConfig cfg = phj_config(job.options);
  const TupleFormat rf = tuple_format(w.r);
  const int passes =
      plan_radix(w.r.rows, rf.tuple_bytes(), rf.key_bytes, cfg.budget, cfg.radix_bits, cfg.passes).passes();
  const double bytes =
      phj_memory_bytes(w.r.rows, w.s.rows, rf, tuple_format(w.s), cfg, bound_output_bytes(w, cfg.output));
  return memory_bound(bytes, bw, std::to_string(passes) + " partition pass(es) + join over R and S, output");
}

}  // namespace

StrategyInfo phj_strategy() {
  return strategy_info("phj",
                       "radix-partitioned hash join (rui2017): 1-2 partition passes, per-partition build and probe", 1,
                       1, add_phj_options, run_phj, phj_bound);
}

}  // namespace joinlab
