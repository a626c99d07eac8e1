// A backend runs the SPMD body of a strategy on every rank of a cluster shape: threads over
// CPU memory (cpu), threads or processes each owning a GPU (cuda), or SimGrid actors (sim).
// Backends register themselves by name, so core links none of them explicitly.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/exec/rank.hpp"

namespace joinlab {

struct BackendConfig {
  ClusterShape shape;
  int threads_per_rank = 0;      // CPU worker threads per rank; 0 = cores / ranks
  std::string profile;           // hardware profile name (sim; bounds on real backends if set)
  std::string profile_dir;       // where profiles live (models/profiles)
  // Figures of the profile replaced for this run ([profile] keys of the experiment), keyed as the
  // profile file writes them: "link.nic.bw" -> "5e10" (models/profile.hpp, ProfileOverrides).
  std::map<std::string, std::string> profile_overrides;
  uint64_t device_memory = 0;    // bytes per rank for MemSpace::Device; 0 = backend default
  std::map<std::string, std::string> options;  // backend-specific ([cluster] extras)
  // Bytes the run's trace file may hold (experiment.trace_max_bytes; 0: no limit): a backend that
  // records more spans than that can hold may stop recording well past it.
  uint64_t trace_bytes = 0;
  // Independent joins run at once (experiment.concurrent_joins): every rank of the shape hosts
  // one rank per join (Rank::job), each with transports, windows and streams of its own, all on
  // the rank's GPU, host, links and cores.
  int jobs = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Runs body(rank) on every rank of every job (cfg.jobs) concurrently; then, with all ranks
  // finished and still alive, collect(rank) for each rank in order, job by job. A rank that throws
  // makes every rank's blocking call fail promptly; the first error is rethrown.
  virtual void run(const BackendConfig& cfg, const std::function<void(Rank&)>& body,
                   const std::function<void(Rank&)>& collect) = 0;
  // Device-memory bytes each rank may allocate under `cfg`, for the pre-flight check of a
  // strategy's working set; 0 = no limit to check (simulation; cpu with cluster.device_memory,
  // whose pool enforces it at run time). The cpu backend's "device" is this machine's available
  // memory.
  virtual uint64_t device_memory_per_rank(const BackendConfig& cfg) { return 0; }
  // Host-memory bytes each rank of a GPU backend may hold (this machine's available memory over
  // its ranks), for the strategies that keep data in host memory; 0 = not checked.
  virtual uint64_t host_memory_per_rank(const BackendConfig& cfg) { return 0; }
  // Checks `cfg` before any work: its [cluster] options (InputError naming the option as
  // "cluster.<key>") and whether the backend can run the shape at all (the simulator's limits).
  virtual void check(const BackendConfig& cfg) {}
  // GPUs this machine gives the backend's ranks (0: not a GPU backend, or none found).
  virtual int gpus() { return 0; }
  // Why this backend cannot run on this machine ("no GPU found"), "" when it can.
  virtual std::string unavailable() { return ""; }
  // The profile a run without cluster.profile uses ("" where none is used).
  virtual std::string default_profile() const { return ""; }
  // Worker threads each rank runs with under `cfg` (cluster.threads resolved); 0 where ranks are
  // not CPU workers (GPUs, simulated).
  virtual int threads_per_rank(const BackendConfig& cfg) { return 0; }
  // How the ranks ran: "threads" (of this process) or "mpirun" (a process each); "" where they
  // are simulated. The simulated twin of a run meets its collectives the same way.
  virtual std::string launch() const { return ""; }
};

using BackendFactory = std::function<std::unique_ptr<Backend>()>;
void register_backend(const std::string& name, BackendFactory f);
std::unique_ptr<Backend> make_backend(const std::string& name);  // InputError if unknown
std::vector<std::string> backend_names();

// Whether this process reports results (prints tables, writes CSV and traces). True unless the
// ranks are processes launched by mpirun: then every process runs the experiment, and only rank
// 0's reports it (the process runtime sets this at registration).
bool reporting_process();
void set_reporting_process(bool reporting);
// `run --quiet`: backends print no notes of their own (progress, statistics); errors still go out.
bool quiet();
void set_quiet(bool quiet);

}  // namespace joinlab
