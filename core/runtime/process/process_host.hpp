// Ranks as processes for any backend: what the process runtime (process_backend.cpp, built with
// JOINLAB_MPI) offers a backend whose ranks it should host under mpirun. The backend makes its
// rank (a CpuRank, a CudaRank) from the slot; the host does the rest, the same for every backend:
// the launch check against [cluster], the control and data planes, a common clock, failure
// propagation, and gathering every rank's result, phases and trace (rank 0 reports them).
//
// Header only, so that a backend library without MPI compiles against it: process_host() is null
// unless the process runtime registered itself.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/common/error.hpp"
#include "core/exec/backend.hpp"
#include "core/exec/rank.hpp"
#include "core/runtime/transport.hpp"

namespace joinlab {

class ControlPlane;

// What one process of the job gets to make its rank.
struct ProcessSlot {
  int rank = 0, size = 1;
  int host = 0;             // physical host (node of the launch, not of the declared shape)
  int local = 0;            // index among the ranks of that host
  int ranks_on_host = 1;
  std::vector<uint64_t> host_of_rank;  // physical host of every rank
  double timeout_s = 60;
  std::chrono::steady_clock::time_point epoch;  // the job's common clock
  std::shared_ptr<Transport> data;              // the host data plane (ucx or mpi)
  std::shared_ptr<ControlPlane> control;
};

struct ProcessRun {
  std::string backend;         // "cpu", "cuda": named in records and errors
  std::string host_transport;  // "ucx" or "mpi": the data plane
  double timeout_s = 60;
  // Makes this process's rank (collective: every process calls it at once).
  std::function<std::unique_ptr<Rank>(const ProcessSlot&)> make_rank;
  // After the body: complete the rank's work in flight (errors count), wind down its links.
  std::function<void(Rank&)> finish_rank;
  // This rank failed (after the data plane was told): abort what the rank's links wait on.
  std::function<void(Rank&, const std::string&)> fail_rank;
};

class ProcessHost {
 public:
  virtual ~ProcessHost() = default;
  virtual bool launched() const = 0;  // this process was started by mpirun
  // One rank of the job: check_launch, planes, make_rank, body, finish_rank, gather, collect
  // (collect sees every rank, rebuilt from its record).
  virtual void run(const BackendConfig& cfg, const ProcessRun& how, const std::function<void(Rank&)>& body,
                   const std::function<void(Rank&)>& collect) = 0;
};

// Process ranks run one join each: each process is one rank of one job (BackendConfig::jobs).
inline void check_single_job(const BackendConfig& cfg) {
  if (cfg.jobs != 1)
    throw InputError("experiment.concurrent_joins = " + std::to_string(cfg.jobs) +
                     ": ranks launched by mpirun run one join each; run concurrent joins with the ranks as threads "
                     "(without mpirun) or in the simulator");
}

inline ProcessHost*& process_host_slot() {
  static ProcessHost* host = nullptr;
  return host;
}
inline ProcessHost* process_host() { return process_host_slot(); }

}  // namespace joinlab
