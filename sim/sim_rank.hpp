// One simulation: the SimGrid engine, the platform, one actor per rank running the strategy, an
// actor per (rank, stream) executing that stream's work in order, and the network.
//
// Mapping of the Rank interface to SimGrid activities:
//  * an operator is an execution on the GPU host (or the node's CPU host when its data lives in
//    host memory) of its modeled duration; concurrent executions share the host, so two kernels
//    at once take twice as long;
//  * a copy is a flow over PCIe (host <-> device), NVLink/PCIe (device <-> device across
//    ranks), or an execution on the GPU (inside device memory);
//  * send / put are flows from GPU to GPU, eager (the sender does not wait for the receiver);
//    messages of one (source, destination, tag) are matched in the order their sends started;
//  * allgather / barrier are dissemination rounds of small messages;
//  * streams are in-order queues; events complete when their work is done.
// Operators compute their results from the content of their inputs (key_content.hpp) when they
// start, so counts follow the workload's distribution.
//
// SimGrid keeps global state, so a process runs one simulation: sim_backend.cpp forks.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/exec/backend.hpp"
#include "core/exec/rank.hpp"

namespace joinlab::sim {

// [cluster] keys of the simulator (BackendConfig::options), with their help text.
std::vector<std::pair<std::string, std::string>> sim_cluster_keys();

struct RankRecord {
  int id = 0;
  int job = 0;  // Rank::job
  RankResult result;
  std::vector<PhaseRecord> phases;
  std::vector<TraceSpan> spans;
  Bandwidths bandwidths;
};

struct SimStats {
  double simulated_seconds = 0;
  double wall_seconds = 0;
  uint64_t operators = 0, transfers = 0, flows = 0;  // flows: SimGrid network activities
  uint64_t waits = 0;  // times a rank's actor blocked in SimGrid
  uint64_t spans_dropped = 0;
  std::string platform;  // Platform::describe()
  std::string flows_mode;  // "pair" or "node"
};

struct SimOutcome {
  std::vector<RankRecord> ranks;
  SimStats stats;
  // Set when the run failed: 2 = bad input (InputError), 1 = anything else.
  int error_kind = 0;
  std::string error;
};

// Runs body on every rank of the simulated cluster described by cfg (profile, shape, options).
// Must run in a process that has not run a simulation yet.
SimOutcome simulate(const BackendConfig& cfg, const std::function<void(Rank&)>& body);

// The profile a run without cluster.profile simulates.
inline constexpr const char* kDefaultProfile = "h100";
// Loads the profile and parses the [cluster] options as simulate() does (InputError if bad).
void check_config(const BackendConfig& cfg);

}  // namespace joinlab::sim
