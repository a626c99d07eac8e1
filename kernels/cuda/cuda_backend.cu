// The "cuda" backend: one CudaRank per visible GPU, run as threads of this process (multi-GPU
// peers copy with CUDA P2P; a multi-process launcher is a later step). Cluster options:
//   streams=N       streams per rank (default 4)
//   share_gpus=1    allow more ranks than GPUs, ranks placed round-robin (tests of the transport
//                   on a one-GPU machine)
//   timeout_s=S     how long a blocking collective waits for the other ranks (default 600)
//   scatter=aligned|direct   partition writes: 128-byte-aligned windows (default) or direct runs
#include <chrono>
#include <cstdlib>
#include <exception>
#include <thread>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/config.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_rank.hpp"

namespace joinlab::cuda {

// --- CudaWorld ------------------------------------------------------------------------------------

template <class Pred>
void CudaWorld::wait_until(std::unique_lock<std::mutex>& lk, int me, const char* what, Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  while (!pred()) {
    if (failed_) throw RuntimeError("rank " + std::to_string(me) + " stopped in " + what + ": " + failure_);
    if (cv_.wait_until(lk, deadline) == std::cv_status::timeout && !pred() && !failed_)
      throw RuntimeError("rank " + std::to_string(me) + ": " + what + " waited " + std::to_string(int(timeout_s_)) +
                         " s for the other ranks (cluster option timeout_s)");
  }
}

void CudaWorld::fail(int rank, const std::string& what) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!failed_) failure_ = "rank " + std::to_string(rank) + " failed: " + what;
    failed_ = true;
  }
  cv_.notify_all();
}

void CudaWorld::barrier(int rank) {
  std::unique_lock<std::mutex> lk(mu_);
  const uint64_t gen = barrier_gen_;
  if (++barrier_waiting_ == ranks_) {
    barrier_waiting_ = 0;
    ++barrier_gen_;
    cv_.notify_all();
    return;
  }
  wait_until(lk, rank, "barrier", [&] { return barrier_gen_ != gen; });
}

std::vector<uint64_t> CudaWorld::allgather(int rank, uint64_t call, const std::vector<uint64_t>& mine) {
  // Calls alternate between two slot sets: a rank writes set (call % 2) only after every rank
  // passed the barrier of call - 1, so nobody still reads it.
  auto& slots = gather_[call % 2];
  {
    std::lock_guard<std::mutex> g(mu_);
    if (slots.size() != size_t(ranks_)) slots.resize(size_t(ranks_));
    slots[size_t(rank)] = mine;
  }
  barrier(rank);
  std::lock_guard<std::mutex> g(mu_);
  std::vector<uint64_t> all;
  for (auto& s : slots) all.insert(all.end(), s.begin(), s.end());
  return all;
}

void CudaWorld::post(int from, int to, int tag, Message m) {
  {
    std::lock_guard<std::mutex> g(mu_);
    mail_[{from, to, tag}].push_back(std::move(m));
  }
  cv_.notify_all();
}

CudaWorld::Message CudaWorld::take(int from, int to, int tag, int me) {
  std::unique_lock<std::mutex> lk(mu_);
  auto& q = mail_[{from, to, tag}];
  wait_until(lk, me, "recv", [&] { return !q.empty(); });
  Message m = std::move(q.front());
  q.pop_front();
  return m;
}

void CudaWorld::expose(int window, int rank, Window w) {
  std::lock_guard<std::mutex> g(mu_);
  windows_[{window, rank}] = std::move(w);
}

CudaWorld::Window CudaWorld::window(int window, int rank) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = windows_.find({window, rank});
  if (it == windows_.end())
    throw RuntimeError("put: rank " + std::to_string(rank) + " exposed no window " + std::to_string(window));
  return it->second;
}

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
    throw InputError("cluster option " + key + " = '" + it->second + "': expected a positive number");
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

  uint64_t device_memory_per_rank(const BackendConfig& cfg) override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      cudaGetLastError();
      return 0;  // no GPU: run() reports that
    }
    const int n = cfg.shape.size();
    uint64_t least = ~0ull;
    for (int d = 0; d < std::min(n, devices); ++d) {
      JL_CUDA_CHECK(cudaSetDevice(d));
      least = std::min(least, device_limit(cfg, d, n / devices + (d < n % devices ? 1 : 0)));
    }
    return least;
  }

  void run(const BackendConfig& cfg, const std::function<void(Rank&)>& body,
           const std::function<void(Rank&)>& collect) override {
    int devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    if (err != cudaSuccess || devices == 0)
      throw RuntimeError(std::string("the cuda backend found no GPU: cudaGetDeviceCount: ") +
                         (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices"));
    const int n = cfg.shape.size();
    const bool share = option_on(cfg, "share_gpus");
    if (n > devices && !share)
      throw InputError("the cuda backend runs one rank per GPU: the cluster has " + std::to_string(n) +
                       " ranks but this machine has " + std::to_string(devices) +
                       " visible GPU(s) (cluster option share_gpus=1 places several ranks on one GPU)");
    const int streams = int(option_number(cfg, "streams", 4));
    bool aligned = true;
    if (auto it = cfg.options.find("scatter"); it != cfg.options.end()) {
      if (it->second != "aligned" && it->second != "direct")
        throw InputError("cluster option scatter = '" + it->second + "': expected aligned or direct");
      aligned = it->second == "aligned";
    }
    CudaWorld world(n, option_number(cfg, "timeout_s", 600));
    const auto epoch = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<CudaRank>> ranks;
    for (int r = 0; r < n; ++r) {
      const int device = r % devices;
      const int on_device = n / devices + (device < n % devices ? 1 : 0);
      JL_CUDA_CHECK(cudaSetDevice(device));
      // Operator scratch comes from the stream-ordered pool; keep what it grew to between
      // operators and runs (the default gives it back at every synchronization, and mapping
      // gigabytes again costs milliseconds). A cudaMalloc that fails trims it (cuda_memory.cu).
      cudaMemPool_t pool;
      JL_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
      uint64_t keep = ~0ull;
      JL_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
      for (int peer = 0; peer < std::min(n, devices); ++peer) {  // P2P between the GPUs in use
        int can = 0;
        if (peer != device && cudaDeviceCanAccessPeer(&can, device, peer) == cudaSuccess && can) {
          const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
          if (e == cudaErrorPeerAccessAlreadyEnabled) cudaGetLastError();
          else JL_CUDA_CHECK(e);
        }
      }
      ranks.push_back(std::make_unique<CudaRank>(r, cfg.shape, device, device_limit(cfg, device, on_device), streams,
                                                 world, epoch, aligned));
    }
    std::mutex mu;
    std::exception_ptr first_error;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        CudaRank& rank = *ranks[size_t(r)];
        try {
          JL_CUDA_CHECK(cudaSetDevice(rank.device()));
          body(rank);
          rank.finish();
        } catch (const std::exception& e) {
          {
            std::lock_guard<std::mutex> g(mu);
            if (!first_error) first_error = std::current_exception();
          }
          world.fail(r, e.what());
        } catch (...) {
          {
            std::lock_guard<std::mutex> g(mu);
            if (!first_error) first_error = std::current_exception();
          }
          world.fail(r, "unknown exception");
        }
      });
    }
    for (auto& t : threads) t.join();
    if (first_error) std::rethrow_exception(first_error);
    for (auto& r : ranks) {
      JL_CUDA_CHECK(cudaSetDevice(r->device()));
      collect(*r);
    }
  }
};

}  // namespace

}  // namespace joinlab::cuda

namespace joinlab {
void register_cuda_backend() {
  register_backend("cuda", [] { return std::make_unique<cuda::CudaBackend>(); });
  register_cluster_key("streams", "cuda: streams per rank (default 4)");
  register_cluster_key("share_gpus", "cuda: 1 = allow more ranks than GPUs, placed round-robin (transport tests)");
  register_cluster_key("timeout_s", "cuda: seconds a blocking collective waits for the other ranks (default 600)");
  register_cluster_key("scatter", "cuda: partition writes, aligned (128-byte windows, default) or direct (unaligned runs)");
}
}  // namespace joinlab
