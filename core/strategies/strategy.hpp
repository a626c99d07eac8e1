// Strategies: named join algorithms written once against Rank. Each registers its name, its
// options (Boost.Program_options, so unknown keys and bad values are rejected by name), how
// many ranks it runs on, and its analytic bound.
#pragma once
#include <boost/program_options.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/exec/rank.hpp"
#include "core/workload/relation.hpp"

namespace joinlab {

namespace po = boost::program_options;

// Name of the phase in which every rank generates its input slice. It is not part of the join:
// strategies record it first (before any join work), and the runner leaves it out of the
// measured join time.
inline constexpr const char* kGeneratePhase = "generate";
// Name of the phase in which every rank checksums its output (report_output): result
// verification, not join work, so the runner leaves it out of the measured join time too.
inline constexpr const char* kVerifyPhase = "verify";
// Phases that count towards the measured join time (all but generate and verify).
inline bool timed_phase(const std::string& name) { return name != kGeneratePhase && name != kVerifyPhase; }

struct JoinJob {
  Workload workload;
  po::variables_map options;  // the strategy's own keys, parsed and defaulted
  MemSpace data_space = MemSpace::Device;  // where inputs are generated (chunked: S is Pinned)
  uint64_t device_memory = 0;  // bytes of device memory per rank the backend gives (0: not known), for bounds
  int ranks = 0;               // ranks of the run (0: not known), for checks that depend on them
};

// The analytic bound of a run: the minimum time its bytes take through its tightest resource.
struct Bound {
  double seconds = 0;
  std::string resource;  // e.g. "device memory 3.0 TB/s, 3 passes over R and S"
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual void run(Rank& rank, const JoinJob& job) = 0;
};

struct StrategyInfo {
  std::string name;
  std::string description;
  int min_ranks = 1, max_ranks = 1;  // max 0 = any
  std::function<void(po::options_description&)> add_options;
  std::function<std::unique_ptr<Strategy>()> make;
  std::function<Bound(const JoinJob&, const ClusterShape&, const Bandwidths&)> bound;
  // Peak device-memory bytes one rank needs for the job (inputs, intermediates, output). Unset:
  // the pre-flight check (core/experiment/preflight.hpp) uses its own estimate, if it has one.
  std::function<uint64_t(const JoinJob&, const ClusterShape&)> working_set_bytes;
  // Peak host-memory bytes one rank holds on a GPU backend (inputs kept in host memory: the
  // streamed side, the senders' tuples, a CPU join). Unset: none worth checking.
  std::function<uint64_t(const JoinJob&, const ClusterShape&)> host_bytes;
  // Optional: throws InputError for a job the strategy cannot run (e.g. a workload it does not
  // support), so that it is rejected before any work (validate_point calls it).
  std::function<void(const JoinJob&)> check;
  // Runs Star Schema Benchmark queries (workload.query): others refuse one before any work.
  bool star_queries = false;
};

void register_strategy(StrategyInfo info);
const StrategyInfo& find_strategy(const std::string& name);  // InputError if unknown
std::vector<std::string> strategy_names();

}  // namespace joinlab
