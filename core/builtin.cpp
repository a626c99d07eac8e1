#include "core/builtin.hpp"

namespace joinlab {

bool built_with_process_ranks() {
#ifdef JOINLAB_HAVE_MPI
  return true;
#else
  return false;
#endif
}

void register_builtin() {
  static bool done = false;
  if (done) return;
  done = true;
  register_cpu_backend();
#ifdef JOINLAB_HAVE_MPI
  register_process_runtime();  // wraps the cpu backend: after it
#endif
#ifdef JOINLAB_HAVE_CUDA
  register_cuda_backend();
#endif
#ifdef JOINLAB_HAVE_SIMGRID
  register_sim_backend();
#endif
  register_single_gpu_strategies();
  register_distributed_strategies();
  register_model_commands();
#ifdef JOINLAB_HAVE_NVCOMP
  register_nvcomp_peer();
#endif
}

}  // namespace joinlab
