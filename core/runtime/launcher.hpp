// What an MPI launcher (mpirun of OpenMPI, MPICH's Hydra, PMIx/PMI launches) tells a process
// through its environment: read with getenv only, so every build can ask, MPI or not.
#pragma once
#include <string>

namespace joinlab {

// Whether this process was started by an MPI launcher.
bool launched_by_mpi();
// This process's world rank, or -1 without a launcher.
int launched_rank();
// The number of processes the launcher started (at least rank + 1 when only a rank is given), or
// 1 without a launcher.
int launched_size();
// "OMPI_COMM_WORLD_SIZE=4": the variable that says how many processes were launched (for errors).
std::string launch_evidence();

// A build without process ranks (JOINLAB_MPI=OFF) started as one of several processes: every one
// would run the whole job on its own and write the same files. Throws InputError naming the
// problem and the cure; nothing when launched alone or without a launcher.
void refuse_launch_without_mpi();

}  // namespace joinlab
