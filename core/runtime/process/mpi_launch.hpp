// Ranks as processes launched by mpirun (OpenMPI; also MPICH/Slurm PMI launches): MPI is used
// only to bootstrap (who is where) and for the small host collectives of the control plane;
// bytes between ranks go through the data plane (UCX).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/launcher.hpp"  // launched_by_mpi(), launched_rank(): no MPI call
#include "core/runtime/process/control_plane.hpp"

namespace joinlab {


// Where every rank of the job runs, as the launch placed it. Nodes are the hosts in the order of
// their lowest rank; a rank's local index is its rank among the ranks of its host.
struct LaunchInfo {
  int rank = 0, size = 1;
  std::vector<std::string> host_of_rank;
  std::vector<int> node_of_rank, local_of_rank;
  int nodes = 1;
  int node() const { return node_of_rank[size_t(rank)]; }
  int local() const { return local_of_rank[size_t(rank)]; }
  int ranks_on_node(int node) const;
  std::string describe() const;  // "4 processes on 1 host (vm: 4)"
};

// Initializes MPI on first use (MPI_Init_thread, errors returned rather than fatal) and learns
// the placement; collective over all processes. MPI_Finalize runs at exit unless the job failed
// (a dead peer would make it hang).
const LaunchInfo& mpi_launch();
void mark_job_failed();
// Whether every thread may call MPI (what the MPI data plane needs).
bool mpi_thread_multiple();

// The control plane over MPI (non-blocking collectives polled against `timeout_s`).
std::shared_ptr<ControlPlane> make_mpi_control_plane(double timeout_s);

}  // namespace joinlab
