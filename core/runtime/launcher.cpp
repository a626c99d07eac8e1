#include "core/runtime/launcher.hpp"

#include <algorithm>
#include <cstdlib>

#include "core/common/error.hpp"

namespace joinlab {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// OpenMPI's own, then PMIx (OpenMPI 4/5, Slurm), then PMI-1/2 (MPICH, Intel MPI, Slurm).
const char* const kRankVars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
const char* const kSizeVars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "OMPI_UNIVERSE_SIZE"};

}  // namespace

bool launched_by_mpi() {
  for (const char* name : kRankVars)
    if (env(name)) return true;
  for (const char* name : kSizeVars)
    if (env(name)) return true;
  return false;
}

int launched_rank() {
  for (const char* name : kRankVars)
    if (const char* v = env(name)) return std::atoi(v);
  return -1;
}

int launched_size() {
  for (const char* name : kSizeVars)
    if (const char* v = env(name)) return std::max(std::atoi(v), 1);
  return std::max(launched_rank() + 1, 1);
}

std::string launch_evidence() {
  for (const char* name : kSizeVars)
    if (const char* v = env(name)) return std::string(name) + "=" + v;
  for (const char* name : kRankVars)
    if (const char* v = env(name)) return std::string(name) + "=" + v;
  return "no launcher variable";
}

void refuse_launch_without_mpi() {
  if (!launched_by_mpi() || launched_size() <= 1) return;
  throw InputError("this process was launched by mpirun as one of " + std::to_string(launched_size()) +
                   " processes (" + launch_evidence() +
                   "), but this joinlab was built without MPI (JOINLAB_MPI=OFF: OpenMPI or UCX was not found when "
                   "it was configured): each process would run the whole job alone and write the same files. "
                   "Install them (scripts/install-deps.sh) and rebuild (scripts/build.sh), or run without mpirun "
                   "(ranks as threads of one process)");
}

}  // namespace joinlab
