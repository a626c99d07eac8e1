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
  if (vm.count("table_space")) c.table_space = mem_space(vm["table_space"].as<std::string>());
  return c;
}

OutputSink npj_join(Rank& rank, Stream st, const Tuples& r, const Tuples& s, const HashJoinConfig& cfg, MemSpace space,
                    const std::string& phase_prefix) {
  begin_phase(rank, phase_prefix + "build");
  HashTable table = rank.alloc_table(cfg.table_space.value_or(space), cfg.table, r.fmt, r.rows, cfg.load_factor, cfg.seed,
                                     "npj.table");
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

// Where npj's inputs and output are: input_space, else the job's data space.
MemSpace npj_data_space(const JoinJob& job) {
  return job.options["input_space"].as<std::string>() == "pinned" ? MemSpace::Pinned : job.data_space;
}

void run_npj(Rank& rank, const JoinJob& job) {
  const HashJoinConfig cfg = hash_join_config(job.options);
  const MemSpace space = npj_data_space(job);
  Inputs in = generate_inputs(rank, job, space, space);
  OutputSink out = npj_join(rank, Stream{0}, in.r.tuples, in.s.tuples, cfg, space);
  report_output(rank, Stream{0}, out, in.r, in.s, space);
}

// npj_memory_bytes over bw.mem (read + write bandwidth); with the table or the data in pinned
// host memory, the link too (each direction on its own, at its full rate: a lower bound, as the
// table's accesses are small and scattered): R and S read once and the output written where they
// are pinned, R's inserts written and S's lookups read where the table is.
Bound npj_bound(const JoinJob& job, const ClusterShape&, const Bandwidths& bw) {
  const Workload& w = job.workload;
  const HashJoinConfig cfg = hash_join_config(job.options);
  const double out = bound_output_bytes(w, cfg.output);
  const TupleFormat rf = tuple_format(w.r);
  const double bytes = npj_memory_bytes(w.r.rows, w.s.rows, rf, tuple_format(w.s), cfg.load_factor, out);
  const Bound device = memory_bound(bytes, bw, "R twice, table, S, one entry per S tuple, output");
  const bool data_pinned = npj_data_space(job) == MemSpace::Pinned;
  const bool table_pinned = cfg.table_space == MemSpace::Pinned;
  if (bw.h2d <= 0 || (!data_pinned && !table_pinned)) return device;
  const double data_in = data_pinned ? tuple_bytes_total(w.r) + tuple_bytes_total(w.s) : 0.0;
  const double table_in = table_pinned ? double(w.s.rows) * rf.tuple_bytes() : 0.0;
  const double table_out = table_pinned ? double(w.r.rows) * rf.tuple_bytes() : 0.0;
  const Bound link{std::max(data_in + table_in, table_out + (data_pinned ? out : 0.0)) / bw.h2d,
                   "link " + rate_text(bw.h2d) + " each way: " +
                       std::string(data_pinned ? "R and S once, output" : "") + (data_pinned && table_pinned ? ", " : "") +
                       (table_pinned ? "the table's inserts and lookups" : "")};
  return link.seconds >= device.seconds ? link : device;
}

}  // namespace

StrategyInfo npj_strategy() {
  return strategy_info(
      "npj", "no-partitioning hash join: one global hash table over R, probed by S", 1, 1,
      // Direct output (gao2021's local join probes twice, count then write: output=count_then_write);
      // direct is the benchmarks' faster setting, so it is the default.
      [](po::options_description& d) {
        add_hash_join_options(d, "direct");
        d.add_options()("table_space", choice_option("table_space", {"device", "pinned"}, "device"),
                        "where the hash table is: device memory, or pinned host memory that the GPU's build and probe "
                        "reach over its link (lutz2022's no-partitioning baseline)")(
            "input_space", choice_option("input_space", {"device", "pinned"}, "device"),
            "where R, S and the output are: device memory, or pinned host memory read and written over the link");
      },
      run_npj, npj_bound);
}

}  // namespace joinlab
