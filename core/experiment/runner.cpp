#include "core/experiment/runner.hpp"

#include <algorithm>
#include <mutex>
#include <optional>
#include <sstream>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/preflight.hpp"
#include "core/strategies/star_query.hpp"

namespace joinlab {

double RunOutcome::throughput() const {
  return total_seconds > 0
             ? double(point.cluster.jobs) * double(point.workload.r.rows + point.workload.s.rows) / total_seconds
             : 0;
}

JoinJob make_job(const RunPoint& p) {
  const StrategyInfo& info = find_strategy(p.strategy);
  JoinJob job;
  job.workload = p.workload;
  job.ranks = p.cluster.shape.size();
  po::options_description desc("strategy " + p.strategy);
  if (info.add_options) info.add_options(desc);
  po::parsed_options parsed(&desc);
  for (auto& [k, v] : p.strategy_options) {
    if (!desc.find_nothrow(k, false))
      throw InputError("strategy " + p.strategy + " has no option '" + k + "' (value '" + v + "')");
    po::option o(k, {v});
    o.original_tokens = {k, v};
    parsed.options.push_back(o);
  }
  try {
    po::store(parsed, job.options);
    po::notify(job.options);
  } catch (const po::error& e) {
    throw InputError("strategy " + p.strategy + ": " + e.what());
  }
  return job;
}

void validate_point(const RunPoint& p) {
  register_builtin();
  const StrategyInfo& info = find_strategy(p.strategy);
  make_backend(p.backend);
  int n = p.cluster.shape.size();
  if (p.cluster.shape.nodes <= 0 || p.cluster.shape.per_node <= 0)
    throw InputError("cluster shape " + std::to_string(p.cluster.shape.nodes) + " nodes x " +
                     std::to_string(p.cluster.shape.per_node) + " ranks per node: both must be positive");
  if (n < info.min_ranks || (info.max_ranks > 0 && n > info.max_ranks)) {
    std::ostringstream m;
    m << "strategy " << p.strategy << " runs on " << info.min_ranks;
    if (info.max_ranks != info.min_ranks) m << ".." << (info.max_ranks > 0 ? std::to_string(info.max_ranks) : "any");
    m << " ranks, but the cluster has " << n;
    throw InputError(m.str());
  }
  if (p.repeat <= 0) throw InputError("experiment.repeat = " + std::to_string(p.repeat) + ": must be positive");
  if (p.cluster.jobs < 1)
    throw InputError("experiment.concurrent_joins = " + std::to_string(p.cluster.jobs) + ": must be at least 1");
  p.workload.validate();
  check_sizes(p);
  const JoinJob job = make_job(p);
  check_star_support(p.workload, p.strategy, info.star_queries);
  if (p.workload.is_ssb()) {
    star_plan(p.workload);  // a scale factor whose keys do not fit says so here
    if (info.check) info.check(job);
    return;
  }
  if (info.check) info.check(job);
  // throws the explanation (a simulation says "count not checked" instead: it has no data to lose)
  if (p.verify && p.backend != "sim" && !can_verify(p.workload)) expected_result(p.workload);
}

namespace {

// "join 2 of 3: " where joins run at once, else nothing.
std::string join_label(const RunPoint& p, size_t j) {
  return p.cluster.jobs > 1 ? "join " + std::to_string(j + 1) + " of " + std::to_string(p.cluster.jobs) + ": " : "";
}

struct SingleRun {
  std::vector<JoinDigest> digests;  // per concurrent join
  bool has_checksum = true;
  uint64_t sent_bytes = 0;
  double total = 0;                 // the makespan of all joins
  std::vector<double> join_seconds;
  std::vector<PhaseTime> phases;
  std::vector<TraceSpan> trace;
  std::vector<std::vector<PhaseRecord>> rank_phases;
  Bandwidths bw;
};

SingleRun run_once(const RunPoint& p, const JoinJob& job, Backend& backend) {
  const StrategyInfo& info = find_strategy(p.strategy);
  SingleRun out;
  std::mutex mu;
  const size_t joins = size_t(p.cluster.jobs);
  std::vector<double> first(joins, 1e300), last(joins, -1e300);
  out.digests.resize(joins);
  std::vector<std::string> order;
  std::map<std::string, double> phase_max;
  bool first_rank = true;
  BackendConfig cluster = p.cluster;
  cluster.trace_bytes = p.trace_max_bytes;
  backend.run(
      cluster,
      [&](Rank& rank) {
        auto strategy = info.make();
        strategy->run(rank, job);
        rank.sync_all();
        rank.end_phases();
      },
      [&](Rank& rank) {
        std::lock_guard<std::mutex> g(mu);
        const RankResult& r = rank.result();
        const size_t job = size_t(rank.job());
        if (job >= joins)
          throw RuntimeError("backend " + p.backend + " ran a rank of join " + std::to_string(job) + " of " +
                             std::to_string(joins));
        out.digests[job].count += r.count;
        out.digests[job].checksum += r.checksum;
        out.has_checksum = out.has_checksum && r.has_checksum;
        out.sent_bytes += r.sent_bytes;
        for (auto& ph : rank.phases()) {
          if (timed_phase(ph.name)) {
            first[job] = std::min(first[job], ph.begin);
            last[job] = std::max(last[job], ph.end);
          }
          if (!phase_max.count(ph.name)) order.push_back(ph.name);
          phase_max[ph.name] = std::max(phase_max[ph.name], ph.end - ph.begin);
        }
        // Rank r's phases of every join, in their order (phase_limits reads them per rank).
        if (out.rank_phases.size() <= size_t(rank.id())) out.rank_phases.resize(size_t(rank.id()) + 1);
        auto& mine = out.rank_phases[size_t(rank.id())];
        mine.insert(mine.end(), rank.phases().begin(), rank.phases().end());
        auto spans = rank.trace().spans();
        // Concurrent joins' streams are their own; the links they share keep one track.
        if (joins > 1)
          for (TraceSpan& s : spans)
            if (s.track.rfind("stream", 0) == 0) s.track += " (join " + std::to_string(job + 1) + ")";
        out.trace.insert(out.trace.end(), spans.begin(), spans.end());
        if (first_rank) out.bw = rank.bandwidths();
        first_rank = false;
      });
  const double begin = *std::min_element(first.begin(), first.end());
  const double end = *std::max_element(last.begin(), last.end());
  out.total = end > begin ? end - begin : 0;
  for (size_t j = 0; j < joins; ++j) out.join_seconds.push_back(last[j] > first[j] ? last[j] - first[j] : 0);
  for (auto& n : order) out.phases.push_back({n, phase_max[n]});
  return out;
}

}  // namespace

RunOutcome run_point(const RunPoint& p) { return run_point(p, {}); }

RunOutcome run_point(const RunPoint& p, const RepeatCallback& on_repeat) {
  validate_point(p);
  JoinJob job = make_job(p);
  RunOutcome o;
  o.point = p;
  // What verification checks: count and checksum where the run computed a checksum; the count
  // alone where it could not (count-only output; simulation, which has no data). The expected
  // result is computed once, on the first run that needs it.
  std::optional<ExpectedResult> full, count;
  std::string checked = "no";
  o.verified = "not verified (experiment.verify = false)";
  auto backend = make_backend(p.backend);
  check_device_memory(p, job, *backend);  // before the expected result and any kernel
  job.device_memory = rank_device_memory(p, *backend);  // for the bounds
  std::vector<SingleRun> runs;
  const std::string what = p.strategy + " on " + p.backend;
  for (int i = 0; i < p.repeat; ++i) {
    if (on_repeat) on_repeat(i, p.repeat);
    runs.push_back(run_once(p, job, *backend));
    SingleRun& r = runs.back();
    if (!p.verify) continue;
    // Every concurrent join computed the whole join: each is checked.
    const std::string each = p.cluster.jobs > 1 ? std::to_string(p.cluster.jobs) + " joins, each: " : "";
    if (r.has_checksum) {
      if (!full) full = p.workload.is_ssb() ? expected_star_result(p.workload) : expected_result(p.workload);
      for (size_t j = 0; j < r.digests.size(); ++j) check_result(r.digests[j], *full, join_label(p, j) + what);
      checked = "yes";
      o.verified = each + (p.workload.is_ssb() ? "count and checksum of the groups: " : "count and checksum: ") + full->method;
      continue;
    }
    if (p.workload.is_ssb()) {
      for (size_t j = 0; j < r.digests.size(); ++j)
        check_star_expected_count(r.digests[j].count, p.workload, p.cluster.shape.size(), join_label(p, j) + what);
      checked = "expected";
      o.verified = each + "count against its expectation (no data in simulation: lineorder rows x the dimensions' "
                   "pass fractions, within half a row per rank)";
      continue;
    }
    if (p.backend == "sim" && !p.workload.s.references_r()) {
      // Exact only where S's keys reference R's unique ones (sim/README.md, "Operator results
      // without data"); other joins are estimates, which a closed form would fail.
      checked = "estimated";
      o.verified = std::string("count not checked: the simulator estimates joins other than PK-FK (S keys ") +
                   to_string(p.workload.s.dist) + ")";
      continue;
    }
    if (!count) count = expected_count(p.workload);
    for (size_t j = 0; j < r.digests.size(); ++j) check_result({r.digests[j].count, 0}, *count, join_label(p, j) + what);
    checked = "count";
    o.verified = each +
                 (p.backend == "sim" ? "count (no data to checksum): " : "count only (no output rows to checksum): ") +
                 count->method;
  }
  o.checked = checked;
  std::vector<size_t> idx(runs.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return runs[a].total < runs[b].total; });
  SingleRun& med = runs[idx[idx.size() / 2]];
  o.digest = med.digests.front();  // every join's is the same join's result
  o.has_checksum = med.has_checksum;
  o.sent_bytes = med.sent_bytes;
  o.threads_per_rank = backend->threads_per_rank(p.cluster);
  o.launch = backend->launch();
  o.total_seconds = med.total;
  o.join_seconds = med.join_seconds;
  for (auto& r : runs) o.repeat_seconds.push_back(r.total);
  o.phases = med.phases;
  o.trace = std::move(med.trace);
  o.rank_phases = std::move(med.rank_phases);
  o.limits = phase_limits(o.trace, o.rank_phases);
  o.bandwidths = med.bw;
  const StrategyInfo& info = find_strategy(p.strategy);
  if (info.bound) o.bound = info.bound(job, p.cluster.shape, o.bandwidths);
  // Concurrent joins share every resource of the ranks: the one that bounds one join carries
  // each join's bytes.
  if (p.cluster.jobs > 1 && o.bound.seconds > 0) {
    o.bound.seconds *= p.cluster.jobs;
    o.bound.resource = std::to_string(p.cluster.jobs) + " joins at once, each: " + o.bound.resource;
  }
  return o;
}

}  // namespace joinlab
