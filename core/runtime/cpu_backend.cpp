// The "cpu" backend: N ranks as threads of this process, each a CpuRank with its own memory
// budget and stream workers, talking through the in-process transport.
//
// [cluster] options it reads (BackendConfig::options):
//   streams    = streams per rank (default 5: gpj without GPUDirect uses five)
//   timeout_s  = bound on every blocking wait: recv, allgather, barrier, expose (default 60)
//   transport  = inproc (default) or another registered thread transport (ucx; cpu_backend.hpp)
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/config.hpp"
#include "core/exec/backend.hpp"
#include "core/runtime/cpu_backend.hpp"
#include "core/runtime/cpu_rank.hpp"
#include "core/runtime/in_process_transport.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/host_memory.hpp"

namespace joinlab {

int hardware_threads() { return int(std::max(1u, std::thread::hardware_concurrency())); }

namespace {

uint64_t physical_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : (8ULL << 30);
}


template <class T>
T option(const BackendConfig& cfg, const std::string& key, T fallback, T min) {
  auto it = cfg.options.find(key);
  if (it == cfg.options.end()) return fallback;
  std::istringstream in(it->second);
  T v{};
  in >> v;
  if (!in || !in.eof() || v < min) {
    std::ostringstream m;
    m << "cluster." << key << " = " << it->second << ": not a number >= " << min << " (cpu backend)";
    throw InputError(m.str());
  }
  return v;
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  std::string launch() const override { return "threads"; }  // its ranks are threads of this process
  // This machine's available memory, shared by the ranks. With cluster.device_memory (a GPU's
  // limit emulated on the CPU) the rank's pool enforces it at run time, where strategies that
  // place what fits (gpj-h) and the tests of running out see it: no plan-time check then.
  uint64_t device_memory_per_rank(const BackendConfig& cfg) override {
    return cfg.device_memory ? 0 : available_memory() / uint64_t(std::max(1, cfg.shape.size()));
  }
  int threads_per_rank(const BackendConfig& cfg) override { return cpu_threads_per_rank(cfg, cfg.shape.size()); }
  void check(const BackendConfig& cfg) override {
    check_cpu_options(cfg);
    thread_transport(cfg);
  }

  void run(const BackendConfig& cfg, const std::function<void(Rank&)>& body,
           const std::function<void(Rank&)>& collect) override {
    const int n = cfg.shape.size();
    if (n < 1 || cfg.shape.nodes < 1 || cfg.shape.per_node < 1)
      throw InputError("backend cpu: cluster shape " + std::to_string(cfg.shape.nodes) + " x " +
                       std::to_string(cfg.shape.per_node) + " has no ranks");
    if (cfg.threads_per_rank < 0)
      throw InputError("backend cpu: threads_per_rank = " + std::to_string(cfg.threads_per_rank) + " is negative");
    if (cfg.jobs < 1) throw InputError("experiment.concurrent_joins = " + std::to_string(cfg.jobs) + ": must be at least 1");
    const CpuRankSetup setup = cpu_rank_setup(cfg, n);
    // Concurrent joins: a transport world each (their messages and windows never mix); the ranks
    // with one id share that rank's memory pools, as joins on one GPU share its memory.
    std::vector<std::shared_ptr<Transport>> transports;
    for (int j = 0; j < cfg.jobs; ++j) {
      auto world = make_thread_transports(cfg, n, setup.timeout_s, setup.rank.threads);
      transports.insert(transports.end(), world.begin(), world.end());
    }
    const auto epoch = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<CpuRank>> ranks;  // job-major
    std::vector<CpuRankConfig> configs;
    for (int r = 0; r < n; ++r) {
      configs.push_back(cpu_rank_setup(cfg, n).rank);  // memory pools of its own
      configs.back().epoch = epoch;
    }
    for (int j = 0; j < cfg.jobs; ++j)
      for (int r = 0; r < n; ++r) {
        ranks.push_back(std::make_unique<CpuRank>(r, cfg.shape, transports[size_t(j * n + r)], configs[size_t(r)]));
        ranks.back()->set_job(j);
      }

    std::mutex mu;
    std::exception_ptr first;
    std::vector<std::thread> pool;
    for (size_t i = 0; i < ranks.size(); ++i) {
      pool.emplace_back([&, i] {
        try {
          body(*ranks[i]);
          ranks[i]->sync_all();  // errors of work the body left in flight count too
        } catch (...) {
          auto e = std::current_exception();
          {
            std::lock_guard<std::mutex> g(mu);
            if (!first) first = e;
          }
          // This rank stops in every join (they share this process): each join's rank of this id
          // aborts its transport. Only the first abort's reason is kept.
          for (size_t k = i % size_t(n); k < transports.size(); k += size_t(n)) transports[k]->abort(what_of(e));
        }
      });
    }
    for (auto& t : pool) t.join();
    if (first) {
      ranks.clear();
      std::rethrow_exception(first);
    }
    for (auto& r : ranks) collect(*r);
  }
};

}  // namespace

uint64_t available_memory() {
  // MemAvailable: what can be allocated without swapping (free + reclaimable cache).
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    // The large blocks this process keeps for reuse are ours to give back: available too.
    if (key == "MemAvailable:") return kib * 1024 + cpu::host_cache_bytes();
  }
  struct sysinfo si {};
  if (::sysinfo(&si) == 0) return (uint64_t(si.freeram) + si.bufferram) * si.mem_unit;
  return physical_memory();
}

double host_copy_bandwidth() {
  static double bw = [] {
    const int threads = hardware_threads();
    // DRAM, not the caches: 64 MiB per thread (each thread's memcpy then streams, past any
    // per-core or shared cache) and at least 4 last-level caches per buffer (STREAM's rule for
    // its arrays, www.cs.virginia.edu/stream/ref.html), but no more than 1/32 of the free memory
    // per buffer, so a small VM still measures and four process ranks measuring at once on one
    // host take a quarter of it at most. The buffers go back to the system at once: kept in
    // the block cache (at 8 caches and 1/8), they held 5 GB in every process of a 140 000-row
    // join on a 2-core VM, and four MPI ranks of a test were killed for memory.
    const long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE), free_pages = ::sysconf(_SC_AVPHYS_PAGES);
    const uint64_t free_bytes = free_pages > 0 ? uint64_t(free_pages) * uint64_t(::sysconf(_SC_PAGE_SIZE)) : physical_memory();
    uint64_t bytes = std::max<uint64_t>(uint64_t(threads) * (64ULL << 20), l3 > 0 ? 4 * uint64_t(l3) : 0);
    bytes = std::max<uint64_t>(64ULL << 20, std::min(bytes, free_bytes / 32));
    void* a = cpu::host_map_once(bytes);
    void* b = cpu::host_map_once(bytes);
    cpu::parallel_fill(a, 1, bytes, threads);  // first touch: the copies below fault no pages
    cpu::parallel_fill(b, 2, bytes, threads);
    double best = 0;
    // The best of at least 5 copies and of those within half a second: the roof the machine
    // reaches when nothing else runs.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    for (int i = 0; i < 5 || (std::chrono::steady_clock::now() < until && i < 100); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      cpu::parallel_copy(i % 2 ? a : b, i % 2 ? b : a, bytes, threads);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, 2.0 * double(bytes) / s);
    }
    cpu::host_unmap_once(a, bytes);
    cpu::host_unmap_once(b, bytes);
    return best;
  }();
  return bw;
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

void check_cpu_options(const BackendConfig& cfg) {
  option<double>(cfg, "timeout_s", 60.0, 1e-3);
  option<int>(cfg, "streams", 5, 1);
}

int cpu_threads_per_rank(const BackendConfig& cfg, int ranks_on_host) {
  return cfg.threads_per_rank > 0 ? cfg.threads_per_rank : std::max(1, hardware_threads() / std::max(1, ranks_on_host));
}

CpuRankSetup cpu_rank_setup(const BackendConfig& cfg, int ranks_on_host) {
  const int n = std::max(1, ranks_on_host);
  CpuRankSetup setup;
  setup.timeout_s = option<double>(cfg, "timeout_s", 60.0, 1e-3);
  CpuRankConfig& rc = setup.rank;
  rc.streams = option<int>(cfg, "streams", 5, 1);
  rc.threads = cpu_threads_per_rank(cfg, n);
  // Per-rank shares of this machine: memory bandwidth and RAM are split evenly over the ranks.
  Bandwidths& bw = rc.bandwidths;
  const double share = host_copy_bandwidth() / n;
  bw.mem = bw.host_mem = bw.h2d = bw.p2p = bw.net = share;
  bw.source = "measured on this host (memcpy, all cores, shared by " + std::to_string(n) + " rank(s))";
  const uint64_t ram_share = uint64_t(double(physical_memory()) * 0.85) / uint64_t(n);
  rc.host = std::make_shared<MemoryPool>("host", ram_share);
  rc.device = cfg.device_memory ? std::make_shared<MemoryPool>("device", cfg.device_memory) : rc.host;
  return setup;
}

namespace {
std::map<std::string, ThreadTransportFactory>& thread_transports() {
  static std::map<std::string, ThreadTransportFactory> t = {
      {"inproc", [](int ranks, double timeout_s, int copy_threads) {
         return make_in_process_transports(ranks, timeout_s, copy_threads);
       }}};
  return t;
}
}  // namespace

void register_thread_transport(const std::string& name, ThreadTransportFactory f) {
  thread_transports()[name] = std::move(f);
}

const ThreadTransportFactory& thread_transport(const BackendConfig& cfg) {
  auto it = cfg.options.find("transport");
  const std::string name = it == cfg.options.end() ? "inproc" : it->second;
  auto f = thread_transports().find(name);
  if (f == thread_transports().end()) {
    std::string known;
    for (auto& [k, v] : thread_transports()) known += (known.empty() ? "" : ", ") + k;
    throw InputError("cluster.transport = " + name + ": not a transport for cpu ranks as threads in this " +
                     "build (it has: " + known + ")");
  }
  return f->second;
}

std::vector<std::shared_ptr<Transport>> make_thread_transports(const BackendConfig& cfg, int ranks, double timeout_s,
                                                               int copy_threads) {
  return thread_transport(cfg)(ranks, timeout_s, copy_threads);
}

void register_cpu_backend() {
  register_backend("cpu", [] { return std::make_unique<CpuBackend>(); });
  register_cluster_key("transport", "how ranks talk. cpu: inproc | ucx | mpi (default inproc for ranks as threads, "
                                    "ucx under mpirun; mpi only under mpirun). cuda: peer | nccl | ucx | mpi (default "
                                    "peer for threads, nccl under mpirun; ucx and mpi stage GPU data in pinned memory)",
                       "cpu");
  register_cluster_key("timeout_s", "seconds: bound on every blocking wait (default 60 for cpu, 600 for cuda)", "cpu");
  register_cluster_key("streams", "streams per rank (default 5)", "cpu");
}

}  // namespace joinlab
