// One run point: a strategy on a backend over a workload, executed, verified, and measured.
// The experiment CLI expands files and sweeps into run points; tests call run_point directly.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/exec/backend.hpp"
#include "core/experiment/phase_limits.hpp"
#include "core/strategies/strategy.hpp"
#include "core/verify/expected.hpp"

namespace joinlab {

struct RunPoint {
  std::string name;        // experiment name (for tables and files)
  std::string strategy = "npj";
  std::string backend = "cpu";
  BackendConfig cluster;
  Workload workload;
  std::map<std::string, std::string> strategy_options;  // raw [strategy] keys, parsed by the strategy
  int repeat = 1;          // runs of the point; phase and total times are the median
  uint64_t trace_max_bytes = uint64_t(64) << 20;  // of its trace file; 0: no limit (trace_writer.hpp)
  bool verify = true;      // count and checksum; the count alone where there is no checksum (simulation, count_only)
};

struct PhaseTime {
  std::string name;
  double seconds = 0;  // max over ranks of the phase's duration
};

struct RunOutcome {
  RunPoint point;
  JoinDigest digest;        // summed over ranks
  bool has_checksum = true;
  uint64_t sent_bytes = 0;  // summed over ranks: RankResult::sent_bytes
  std::string verified;     // what was checked and against what ("count (no data to checksum): closed form ..."), or why not
  std::string checked = "no";  // the same in a word for the table: yes (count and checksum), count, estimated (sim, not PK-FK), no
  int threads_per_rank = 0; // worker threads each rank used (Backend::threads_per_rank); 0 = none
  std::string launch;       // Backend::launch: threads | mpirun | "" (simulated)
  double total_seconds = 0; // median over repeats: first phase begin to last phase end, over
                            // ranks, leaving out the generate and verify phases (timed_phase, strategy.hpp);
                            // with concurrent joins, over all of them: the makespan
  std::vector<double> join_seconds;  // of the median run, each concurrent join's own span (one: total_seconds)
  std::vector<double> repeat_seconds;
  std::vector<PhaseTime> phases;  // of the median run
  Bound bound;
  Bandwidths bandwidths;
  std::vector<TraceSpan> trace;   // of the median run
  std::vector<std::vector<PhaseRecord>> rank_phases;  // of the median run, indexed by rank
  std::vector<PhaseLimit> limits;  // per phase of the median run, the resource its trace shows busiest
  double throughput() const;      // joins x (|R| + |S|) / total_seconds, tuples per second
  double bound_fraction() const { return total_seconds > 0 ? bound.seconds / total_seconds : 0; }
};

// Parses the strategy's options (InputError naming key and value if bad), without running.
JoinJob make_job(const RunPoint& p);
// Checks everything about the point that can be checked before work: strategy, backend, rank
// counts, workload, options, verifiability. Throws InputError.
void validate_point(const RunPoint& p);
// Runs, verifies (VerificationError on a wrong result) and measures the point.
RunOutcome run_point(const RunPoint& p);
// The same, calling on_repeat(i, repeats) before repeat i (0-based) starts (progress reports).
using RepeatCallback = std::function<void(int repeat, int repeats)>;
RunOutcome run_point(const RunPoint& p, const RepeatCallback& on_repeat);

}  // namespace joinlab
