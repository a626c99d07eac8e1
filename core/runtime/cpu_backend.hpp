// Set-up of the "cpu" backend's ranks, shared by its two ways of running them: as threads of
// this process (cpu_backend.cpp) and as processes launched by mpirun (process/process_backend.cpp).
#pragma once
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/exec/backend.hpp"
#include "core/runtime/cpu_rank.hpp"
#include "core/runtime/transport.hpp"

namespace joinlab {

struct CpuRankSetup {
  double timeout_s = 60;  // [cluster] timeout_s: bound on every blocking wait
  CpuRankConfig rank;     // threads, streams, memory pools, bandwidths (epoch left to the caller)
};
// One of `ranks_on_host` ranks sharing this machine's cores, memory and memory bandwidth, from
// the [cluster] options. Throws InputError naming a bad option.
CpuRankSetup cpu_rank_setup(const BackendConfig& cfg, int ranks_on_host);
// The [cluster] options cpu_rank_setup reads, checked without measuring or allocating anything.
void check_cpu_options(const BackendConfig& cfg);
// Worker threads of each rank: cluster.threads, or the cores shared by the ranks of this host.
int cpu_threads_per_rank(const BackendConfig& cfg, int ranks_on_host);

// The message of a caught exception (the reason a failing rank gives the others).
std::string what_of(const std::exception_ptr& e);

// This machine's hardware threads (at least 1): the cpu backend's threads when none are given.
int hardware_threads();

// Bytes this machine can allocate now without swapping (/proc/meminfo MemAvailable).
uint64_t available_memory();

// Host memory copy bandwidth of this machine with all its cores, bytes read + written per
// second: the best of at least 5 parallel copies (over about 0.5 s) of buffers of 64 MiB per
// hardware thread and at least 8 last-level caches (DRAM, not the caches, whatever the core
// count), each at most an eighth of the free memory. Measured once per process.
double host_copy_bandwidth();

// Transports for ranks that are threads of this process, chosen by [cluster] transport. "inproc"
// (the default) is built in; the process runtime registers "ucx" when the build has it.
using ThreadTransportFactory =
    std::function<std::vector<std::shared_ptr<Transport>>(int ranks, double timeout_s, int copy_threads)>;
void register_thread_transport(const std::string& name, ThreadTransportFactory f);
// InputError naming the transport and the ones this build has when it is unknown.
const ThreadTransportFactory& thread_transport(const BackendConfig& cfg);
std::vector<std::shared_ptr<Transport>> make_thread_transports(const BackendConfig& cfg, int ranks,
                                                               double timeout_s, int copy_threads);

}  // namespace joinlab
