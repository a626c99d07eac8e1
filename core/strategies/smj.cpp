// smj: the sort-merge join of rui2017 (section 3.3): sort R and S by key (radix sort, or merge
// sort for keys radix sort cannot handle), then an m:n merge join of the two sorted inputs
// (merge-path partitioned on the GPU).
#include <cmath>

#include "core/strategies/rank_joins.hpp"

namespace joinlab {

namespace {

SortAlgo sort_algo(const po::variables_map& vm) {
  return vm["sort"].as<std::string>() == "merge" ? SortAlgo::Merge : SortAlgo::Radix;
}

void add_smj_options(po::options_description& d) {
  d.add_options()("sort", choice_option("sort", {"radix", "merge"}, "radix"),
                  "sort algorithm: radix (LSD radix sort) or merge (merge-path merge sort, stable)");
  // rui2017 3.3.2 counts the matches, scans and writes; the direct output buffer writes in one
  // pass (measured 2.5x faster on the H100: docs/benchmarks.md), so it is the default.
  add_output_option(d, "direct");
}

Tuples sorted(Rank& rank, Stream st, const Tuples& in, SortAlgo algo, MemSpace space, const std::string& tag) {
  SortOp sort;
  sort.in = in;
  sort.out = rank.alloc_tuples(space, in.rows, in.fmt, tag);
  sort.algo = algo;
  rank.launch(st, sort);
  return sort.out;
}

void run_smj(Rank& rank, const JoinJob& job) {
  const SortAlgo algo = sort_algo(job.options);
  const OutputMode output = output_mode(job.options);
  Inputs in = generate_inputs(rank, job, job.data_space, job.data_space);

  begin_phase(rank, "sort");
  const Stream st{0};
  Tuples r = sorted(rank, st, in.r.tuples, algo, job.data_space, "smj.R.sorted");
  Tuples s = sorted(rank, st, in.s.tuples, algo, job.data_space, "smj.S.sorted");
  in.r.tuples = in.s.tuples = Tuples{};  // the unsorted inputs are no longer needed

  begin_phase(rank, "merge_join");
  const OutputSink out = join_into_new_output(rank, st, output, job.data_space, r, s, "smj.out",
                                              [&](const JoinOutput& o, uint64_t first, OutputMode mode) -> Op {
                                                return MergeJoinOp{r, s, o, first, mode};
                                              });
  report_output(rank, st, out, in.r, in.s, job.data_space);
}

// Read + write passes a sort makes over a relation. Radix: the CUDA backend's MSD sort, which
// partitions on the high bits of the key bits that vary (dense keys 1..n vary in log2(n + 1)
// bits) until partitions of ~4 Ki rows with at most 13 low bits remain (one scatter pass per 9
// bits), then sorts each partition on chip: one more pass. Merge: a block-sort pass plus one
// merge pass per doubling from 2^12-row blocks.
double sort_passes(const RelationSpec& spec, SortAlgo algo) {
  if (algo == SortAlgo::Merge) return 1.0 + std::max(0.0, std::ceil(std::log2(double(spec.rows) / 4096.0)));
  const double bits =
      spec.dist == KeyDist::UniqueDense ? std::ceil(std::log2(double(spec.rows) + 1.0)) : 8.0 * spec.key_bytes;
  const double partition_bits =
      std::min(bits, std::max(bits - 13.0, std::ceil(std::log2(std::max(1.0, double(spec.rows) / 4096.0)))));
  return 1.0 + std::ceil(partition_bits / 9.0);
}

// Device-memory bytes: each sort pass reads and writes its relation, the merge join reads both
// sorted relations and writes the output; over bw.mem.
Bound smj_bound(const JoinJob& job, const ClusterShape&, const Bandwidths& bw) {
  const Workload& w = job.workload;
  const SortAlgo algo = sort_algo(job.options);
  const double r = tuple_bytes_total(w.r), s = tuple_bytes_total(w.s);
  const double out = bound_output_bytes(w, output_mode(job.options));
  const double bytes = 2 * sort_passes(w.r, algo) * r + 2 * sort_passes(w.s, algo) * s + r + s + out;
  return memory_bound(
      bytes, bw,
      std::string(algo == SortAlgo::Radix ? "radix" : "merge") + " sort passes over R and S, merge join, output");
}

}  // namespace

StrategyInfo smj_strategy() {
  return strategy_info("smj", "sort-merge join (rui2017): sort R and S, m:n merge join", 1, 1, add_smj_options, run_smj,
                       smj_bound);
}

}  // namespace joinlab
