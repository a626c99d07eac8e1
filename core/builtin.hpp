// Explicit registration of everything built in (no static-initializer tricks, so nothing is
// dropped by the linker). Each function is defined next to what it registers.
#pragma once

namespace joinlab {

void register_builtin();  // all of the below that this build has
bool built_with_process_ranks();  // JOINLAB_HAVE_MPI: this build can run under mpirun

void register_cpu_backend();       // core/runtime/cpu_rank.cpp
void register_cuda_backend();      // kernels/cuda/cuda_backend.cu (JOINLAB_HAVE_CUDA)
void register_process_runtime();   // core/runtime/process: mpirun-launched ranks, UCX (JOINLAB_HAVE_MPI)
void register_sim_backend();       // sim/sim_backend.cpp (JOINLAB_HAVE_SIMGRID)
void register_single_gpu_strategies();   // core/strategies: npj, phj, smj, chunked
void register_distributed_strategies();  // core/strategies: shuffle (+ later gpj, crj)
void register_model_commands();    // models/calibrate.cpp: `joinlab calibrate` and `joinlab validate`
void register_nvcomp_peer();       // experiments/codec/nvcomp_peer.cpp: bench-codec --peer nvcomp (JOINLAB_HAVE_NVCOMP)

}  // namespace joinlab
