// npj: the no-partitioning hash join (the baseline of lutz2022 and gao2021's local join). One
// global hash table over R (open addressing with linear probing, or bucket chaining), probed by
// every S tuple; the output is materialized as (key, R value, S value) rows.

#include "core/strategies/rank_joins.hpp"

namespace joinlab {

void add_hash_join_options(po::options_description& d, const std::string& default_output) {
  add_table_options(d);
  add_output_option(d, default_output);
}

HashJoinConfig hash_join_config(const po::variables_map& vm) {
  HashJoinConfig c;
  c.table = table_kind(vm);
  c.load_factor = load_factor(vm);
  c.output = output_mode(vm);
  return c;
}

OutputSink npj_join(Rank& rank, Stream st, const Tuples& r, const Tuples& s, const HashJoinConfig& cfg, MemSpace space,
                    const std::string& phase_prefix) {
  begin_phase(rank, phase_prefix + "build");
  HashTable table = rank.alloc_table(space, cfg.table, r.fmt, r.rows, cfg.load_factor, cfg.seed, "npj.table");
  rank.launch(st, BuildOp{r, &table}).get();

  begin_phase(rank, phase_prefix + "probe");
  return join_into_new_output(rank, st, cfg.output, space, r, s, "npj.out",
                              [&](const JoinOutput& out, uint64_t first, OutputMode mode) -> Op {
                                return ProbeOp{&table, s, out, first, mode};
                              });
}

double npj_memory_bytes(uint64_t r_rows, uint64_t s_rows, TupleFormat r_fmt, TupleFormat s_fmt, double load_factor,
                        double out_bytes) {
  const double tr = r_fmt.tuple_bytes(), r = double(r_rows) * tr, s = double(s_rows) * s_fmt.tuple_bytes();
  const double table = double(hash_table_slots(r_rows, load_factor)) * tr;
  return 2 * r + table + s + double(s_rows) * tr + out_bytes;
}

namespace {

void run_npj(Rank& rank, const JoinJob& job) {
  const HashJoinConfig cfg = hash_join_config(job.options);
  Inputs in = generate_inputs(rank, job, job.data_space, job.data_space);
  OutputSink out = npj_join(rank, Stream{0}, in.r.tuples, in.s.tuples, cfg, job.data_space);
  report_output(rank, Stream{0}, out, in.r, in.s, job.data_space);
}

// npj_memory_bytes over bw.mem (read + write bandwidth).
Bound npj_bound(const JoinJob& job, const ClusterShape&, const Bandwidths& bw) {
  const Workload& w = job.workload;
  const HashJoinConfig cfg = hash_join_config(job.options);
  const double bytes = npj_memory_bytes(w.r.rows, w.s.rows, tuple_format(w.r), tuple_format(w.s), cfg.load_factor,
                                        bound_output_bytes(w, cfg.output));
  return memory_bound(bytes, bw, "R twice, table, S, one entry per S tuple, output");
}

}  // namespace

StrategyInfo npj_strategy() {
  return strategy_info(
      "npj", "no-partitioning hash join: one global hash table over R, probed by S", 1, 1,
      // Direct output (gao2021's local join probes twice, count then write: output=count_then_write);
      // direct is the benchmarks' faster setting, so it is the default.
      [](po::options_description& d) { add_hash_join_options(d, "direct"); }, run_npj, npj_bound);
}

}  // namespace joinlab
