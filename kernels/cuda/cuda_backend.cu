// The "cuda" backend: one CudaRank per GPU, the ranks either threads of this process or, under
// mpirun, one process each (`mpirun -np 2 joinlab run FILE --experiment.backend=cuda`: the rank
// runs on GPU local_rank of its host; the process runtime, process_host.hpp, checks the launch
// against [cluster] and gathers the results to rank 0). How ranks talk: cuda_fabric.hpp.
// Cluster options:
//   transport=peer|nccl|ucx|mpi  default peer for threads, nccl for processes
//   streams=N       streams per rank (default 5: gpj without GPUDirect uses five)
//   share_gpus=1    allow more ranks than GPUs, ranks placed round-robin (tests of the transport
//                   on a one-GPU machine; not with nccl, which refuses two ranks on one GPU)
//   timeout_s=S     how long a blocking wait waits for the other ranks (default 600)
//   scatter=aligned|direct   partition writes: 128-byte-aligned windows (default) or direct runs
//   radix_sort=msd|onesweep  radix sort: MSD (partition passes + on-chip sort; default) or CUB onesweep
//   emulate_nodes=true       processes: a declared multi-node shape on one host (2 nodes x 1 GPU)
#include <chrono>
#include <cstdlib>
#include <exception>
#include <thread>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/config.hpp"
#include "core/runtime/cpu_backend.hpp"
#include "core/runtime/launcher.hpp"
#include "core/runtime/process/process_host.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_rank.hpp"

namespace joinlab::cuda {

// (CudaWorld and the fabrics: cuda_fabric.cu)

// --- the backend -------------------------------------------------------------------------------------

namespace {

bool option_on(const BackendConfig& cfg, const std::string& key) {
  auto it = cfg.options.find(key);
  return it != cfg.options.end() && (it->second == "1" || it->second == "true" || it->second == "yes");
}
double option_number(const BackendConfig& cfg, const std::string& key, double fallback) {
  auto it = cfg.options.find(key);
  if (it == cfg.options.end()) return fallback;
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  if (end == it->second.c_str() || *end || v <= 0)
    throw InputError("cluster." + key + " = " + it->second + ": expected a positive number");
  return v;
}

// Bytes a rank may allocate on `device`: the configured amount, or what the GPU has free now
// (plus blocks this process keeps cached) less headroom for the CUDA context, library
// workspaces and operator scratch, shared by the ranks placed on that GPU.
uint64_t device_limit(const BackendConfig& cfg, int device, int ranks_on_device) {
  if (cfg.device_memory) return cfg.device_memory;
  size_t free_b = 0, total_b = 0;
  JL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  const uint64_t avail = uint64_t(free_b) + device_block_cached(device);
  const uint64_t headroom = (1ull << 30) + total_b / 32;
  return avail > headroom ? (avail - headroom) / uint64_t(ranks_on_device) : 0;
}

class CudaBackend : public Backend {
 public:
  std::string name() const override { return "cuda"; }
  std::string launch() const override { return launched_by_mpi() ? "mpirun" : "threads"; }

  int gpus() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return devices;
  }

  uint64_t device_memory_per_rank(const BackendConfig& cfg) override {
    const int devices = gpus();
    if (!devices) return 0;  // no GPU: run() reports that
    const int n = cfg.shape.size();
    uint64_t least = ~0ull;
    for (int d = 0; d < std::min(n, devices); ++d) {
      JL_CUDA_CHECK(cudaSetDevice(d));
      least = std::min(least, device_limit(cfg, d, n / devices + (d < n % devices ? 1 : 0)));
    }
    return least;
  }

  // This machine's available memory over the ranks it hosts: every rank as threads of this
  // process, or under mpirun a node's (the launch matches the shape, as the cpu backend's does).
  // The pinned blocks this process keeps for reuse count as available: a miss gives them back
  // (a sweep's earlier, smaller points left 48 GiB of them behind triton at 2^30 rows).
  uint64_t host_memory_per_rank(const BackendConfig& cfg) override {
    const int here = launched_by_mpi() ? cfg.shape.per_node : cfg.shape.size();
    return (available_memory() + pinned_block_cached()) / uint64_t(std::max(1, here));
  }

  void check(const BackendConfig& cfg) override {
    setup_of(cfg);
    if (launched_by_mpi()) check_single_job(cfg);
  }
  std::string unavailable() override {
    int devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    if (err == cudaSuccess && devices > 0) return "";
    cudaGetLastError();
    return std::string("no GPU found (") + (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") + ")";
  }

  void run(const BackendConfig& cfg, const std::function<void(Rank&)>& body,
           const std::function<void(Rank&)>& collect) override {
    int devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0)
      throw RuntimeError(std::string("the cuda backend found no GPU: cudaGetDeviceCount: ") +
                         (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices"));
    Setup setup = setup_of(cfg);
    if (ProcessHost* host = process_host(); host && host->launched())
      run_processes(*host, cfg, setup, devices, body, collect);
    else
      run_threads(cfg, setup, devices, body, collect);
  }

 private:
  struct Setup {
    int streams = 5;
    KernelOptions kernels;
    bool share = false;
    double timeout_s = 600;
  };
  static Setup setup_of(const BackendConfig& cfg) {
    Setup s;
    s.streams = int(option_number(cfg, "streams", 5));
    s.share = option_on(cfg, "share_gpus");
    s.timeout_s = option_number(cfg, "timeout_s", 600);
    if (auto it = cfg.options.find("scatter"); it != cfg.options.end()) {
      if (it->second != "aligned" && it->second != "direct")
        throw InputError("cluster.scatter = " + it->second + ": expected aligned or direct");
      s.kernels.aligned_scatter = it->second == "aligned";
    }
    if (auto it = cfg.options.find("radix_sort"); it != cfg.options.end()) {
      if (it->second != "msd" && it->second != "onesweep")
        throw InputError("cluster.radix_sort = " + it->second + ": expected msd or onesweep");
      s.kernels.onesweep_sort = it->second == "onesweep";
    }
    return s;
  }

  // The device's memory pool and P2P access to the GPUs the other ranks use.
  static void prepare_device(int device, int devices_in_use) {
    JL_CUDA_CHECK(cudaSetDevice(device));
    // Operator scratch comes from the stream-ordered pool; keep what it grew to between
    // operators and runs (the default gives it back at every synchronization, and mapping
    // gigabytes again costs milliseconds). A cudaMalloc that fails trims it (cuda_memory.cu).
    cudaMemPool_t pool;
    JL_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t keep = ~0ull;
    JL_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    for (int peer = 0; peer < devices_in_use; ++peer) {
      int can = 0;
      if (peer != device && cudaDeviceCanAccessPeer(&can, device, peer) == cudaSuccess && can) {
        const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
        else JL_CUDA_CHECK(e);
      }
    }
  }

  void run_threads(const BackendConfig& cfg, const Setup& setup, int devices, const std::function<void(Rank&)>& body,
                   const std::function<void(Rank&)>& collect) {
    const int n = cfg.shape.size();
    if (n > devices && !setup.share)
      throw InputError("the cuda backend runs one rank per GPU: the cluster has " + std::to_string(n) +
                       " ranks but this machine has " + std::to_string(devices) +
                       " visible GPU(s) (cluster option share_gpus=1 places several ranks on one GPU)");
    if (cfg.jobs < 1) throw InputError("experiment.concurrent_joins = " + std::to_string(cfg.jobs) + ": must be at least 1");
    const std::string kind = fabric_kind(cfg, false, have_nccl());
    std::vector<int> device_of;
    for (int r = 0; r < n; ++r) device_of.push_back(r % devices);
    for (int d = 0; d < std::min(n, devices); ++d) prepare_device(d, std::min(n, devices));
    // Concurrent joins: a world and fabrics each (their messages and windows never mix), their
    // ranks with one id on the same GPU, each with its share of the GPU's memory.
    std::vector<std::unique_ptr<CudaWorld>> worlds;
    std::vector<std::shared_ptr<CudaFabric>> fabrics;  // job-major, as the ranks
    for (int j = 0; j < cfg.jobs; ++j) {
      worlds.push_back(std::make_unique<CudaWorld>(n, setup.timeout_s));
      std::vector<std::shared_ptr<Transport>> net;
      if (kind == "ucx") {  // one UCX worker per rank (the process runtime's, registered as "ucx")
        BackendConfig ucx = cfg;
        ucx.options["transport"] = "ucx";
        net = make_thread_transports(ucx, n, setup.timeout_s, 1);
      }
      auto f = make_thread_fabrics(kind, *worlds.back(), device_of, net);
      fabrics.insert(fabrics.end(), f.begin(), f.end());
    }
    const auto epoch = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<CudaRank>> ranks;
    for (int j = 0; j < cfg.jobs; ++j)
      for (int r = 0; r < n; ++r) {
        const int device = device_of[size_t(r)];
        const int on_device = (n / devices + (device < n % devices ? 1 : 0)) * cfg.jobs;
        JL_CUDA_CHECK(cudaSetDevice(device));
        ranks.push_back(std::make_unique<CudaRank>(r, cfg.shape, device, device_limit(cfg, device, on_device),
                                                   setup.streams, fabrics[size_t(j * n + r)], epoch, setup.kernels));
        ranks.back()->set_job(j);
      }
    std::mutex mu;
    std::exception_ptr first_error;
    std::vector<std::thread> threads;
    for (size_t i = 0; i < ranks.size(); ++i) {
      threads.emplace_back([&, i] {
        CudaRank& rank = *ranks[i];
        try {
          JL_CUDA_CHECK(cudaSetDevice(rank.device()));
          fabrics[i]->start();
          body(rank);
          rank.finish();
          fabrics[i]->finish();
        } catch (...) {
          const std::exception_ptr e = std::current_exception();
          {
            std::lock_guard<std::mutex> g(mu);
            if (!first_error) first_error = e;
          }
          // Every join stops (their ranks share this process and its GPUs): a failed rank in each
          // world fails that world's ranks at their next wait.
          const std::string why = what_of(e);
          for (auto& w : worlds) w->fail(rank.id(), why);
          fabrics[i]->fail(why);
        }
      });
    }
    for (auto& t : threads) t.join();
    if (first_error) {
      ranks.clear();  // streams drain (failed transfers were aborted) before the fabrics go
      std::rethrow_exception(first_error);
    }
    for (auto& r : ranks) {
      JL_CUDA_CHECK(cudaSetDevice(r->device()));
      collect(*r);
    }
  }

  // This process is one rank of an mpirun job: on GPU local_rank of its host (share_gpus: the
  // host's ranks round-robin over its GPUs).
  void run_processes(ProcessHost& host, const BackendConfig& cfg, const Setup& setup, int devices,
                     const std::function<void(Rank&)>& body, const std::function<void(Rank&)>& collect) {
    const std::string kind = fabric_kind(cfg, true, have_nccl());
    ProcessRun how;
    how.backend = "cuda";
    how.host_transport = kind == "mpi" ? "mpi" : "ucx";  // nccl: UCX for liveness, flags, host puts
    how.timeout_s = setup.timeout_s;
    how.make_rank = [&, kind](const ProcessSlot& slot) -> std::unique_ptr<Rank> {
      if (slot.ranks_on_host > devices && !setup.share)
        throw InputError("the cuda backend runs one rank per GPU: mpirun placed " + std::to_string(slot.ranks_on_host) +
                         " ranks on this host, which has " + std::to_string(devices) +
                         " visible GPU(s) (cluster option share_gpus=1 places several ranks on one GPU)");
      if (kind == "nccl" && slot.ranks_on_host > devices)
        throw InputError("cluster.transport = nccl: mpirun placed " + std::to_string(slot.ranks_on_host) +
                         " ranks on this host, which has " + std::to_string(devices) +
                         " GPU(s), and NCCL refuses two ranks on one GPU; use transport = ucx (or one GPU per rank)");
      const int device = slot.local % devices;
      int on_device = 0;
      for (int l = 0; l < slot.ranks_on_host; ++l) on_device += l % devices == device;
      prepare_device(device, std::min(devices, slot.ranks_on_host));
      auto fabric = make_process_fabric(kind, device, slot.data, slot.host_of_rank);
      auto rank = std::make_unique<CudaRank>(slot.rank, cfg.shape, device, device_limit(cfg, device, on_device),
                                             setup.streams, fabric, slot.epoch, setup.kernels);
      fabric->start();
      return rank;
    };
    how.finish_rank = [](Rank& r) {
      auto& rank = static_cast<CudaRank&>(r);
      rank.finish();
      rank.fabric().finish();
    };
    how.fail_rank = [](Rank& r, const std::string& why) { static_cast<CudaRank&>(r).fabric().fail(why); };
    host.run(cfg, how, body, collect);
  }
};

}  // namespace

}  // namespace joinlab::cuda

namespace joinlab {
void register_cuda_backend() {
  // Load every kernel when the CUDA context is created, not on first launch: a lazily loaded
  // module may wait for the device to go idle, and the persistent kernels (gpj's consumer, the
  // fabric's receive gates) spin until another kernel of this process has run - a deadlock.
  // Registration runs before any CUDA call; a value the user set is kept.
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  // Hardware work queues per device (default 8, at most 32): streams beyond them share queues, and
  // a stream parked on a receive gate (cuStreamWaitValue32) then also stops the streams behind it
  // in its queue, among them possibly the one whose copy would open the gate. Ranks that share a
  // GPU, or concurrent joins, put 5 streams each on it: 8 ranks on 2 GPUs hung now and then.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
  register_backend("cuda", [] { return std::make_unique<cuda::CudaBackend>(); });
  register_cluster_key("transport", "cuda: peer | nccl | ucx | mpi (default peer for threads, nccl under mpirun)", "cuda");
  register_cluster_key("streams", "cuda: streams per rank (default 5)", "cuda");
  register_cluster_key("share_gpus", "cuda: 1 = allow more ranks than GPUs, placed round-robin (transport tests)", "cuda");
  register_cluster_key("timeout_s", "cuda: seconds a blocking wait waits for the other ranks (default 600)", "cuda");
  register_cluster_key("emulate_nodes", "true | false: under mpirun on one host, run a declared multi-node shape there", "cuda");
  register_cluster_key("scatter", "cuda: partition writes, aligned (128-byte windows, default) or direct (unaligned runs)", "cuda");
  register_cluster_key("radix_sort",
                       "cuda: radix sort, msd (partition on the high bits, sort partitions on chip; default) or onesweep "
                       "(CUB's LSD sort)", "cuda");
}
}  // namespace joinlab
