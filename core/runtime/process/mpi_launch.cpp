#include "core/runtime/process/mpi_launch.hpp"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/common/error.hpp"
#include "core/runtime/polling.hpp"
#include "core/runtime/process/launch_guard.hpp"

namespace joinlab {

namespace {

void check_mpi(int rc, const std::string& call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw RuntimeError("MPI " + call + " failed: " + std::string(text, size_t(len)));
}

std::atomic<bool> g_job_failed{false};
int g_thread_level = MPI_THREAD_SINGLE;
MPI_Comm g_comm = MPI_COMM_NULL;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_job_failed.load()) {  // a failed job's peers may never reach finalize
    end_failed_job();
    return;
  }
  MPI_Finalize();
}

// A non-blocking collective in flight. Its buffers must outlive it; one that is given up (timeout,
// failure) can never be cancelled, so its buffers are left behind on purpose.
struct Pending {
  MPI_Request req = MPI_REQUEST_NULL;
  std::vector<char> send, recv;
  std::vector<int> counts, displs;
  std::vector<long long> sizes;
};

void wait_for(const std::shared_ptr<Pending>& p, const std::string& what, double timeout_s,
              const ControlPlane::Liveness& alive) {
  static std::mutex graveyard_mu;
  static std::vector<std::shared_ptr<Pending>> graveyard;
  const Deadline deadline(timeout_s);
  Backoff backoff;
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&p->req, &done, MPI_STATUS_IGNORE), "MPI_Test (" + what + ")");
    if (done) return;
    try {
      if (alive) alive();
      if (deadline.passed())
        throw RuntimeError("rank " + std::to_string(mpi_launch().rank) + ": " + what + " timed out after " +
                           seconds_text(timeout_s) + " (a rank did not take part: it died, hangs, or failed)");
    } catch (...) {
      std::lock_guard<std::mutex> g(graveyard_mu);
      graveyard.push_back(p);
      throw;
    }
    backoff.pause();
  }
}

class MpiControlPlane final : public ControlPlane {
 public:
  explicit MpiControlPlane(double timeout_s) : timeout_s_(timeout_s) {}
  int rank() const override { return mpi_launch().rank; }
  int size() const override { return mpi_launch().size; }
  double timeout_s() const override { return timeout_s_; }

  std::vector<std::string> allgather(const std::string& mine, const std::string& what, const Liveness& alive) override {
    return collect(mine, what, alive, true);
  }
  std::vector<std::string> gather_to_root(const std::string& mine, const std::string& what,
                                          const Liveness& alive) override {
    return collect(mine, what, alive, false);
  }
  void barrier(const std::string& what, const Liveness& alive) override {
    auto p = std::make_shared<Pending>();
    check_mpi(MPI_Ibarrier(g_comm, &p->req), "MPI_Ibarrier (" + what + ")");
    wait_for(p, what, timeout_s_, alive);
  }
  void abort(const std::string&) override {}  // waits poll the data plane's failure state

 private:
  // Sizes first (allgather), then the bytes (allgatherv / gatherv to rank 0).
  std::vector<std::string> collect(const std::string& mine, const std::string& what, const Liveness& alive,
                                   bool everywhere) {
    const int n = size(), me = rank();
    auto sizes = std::make_shared<Pending>();
    sizes->send.resize(sizeof(long long));
    const long long my_size = (long long)mine.size();
    std::copy_n(reinterpret_cast<const char*>(&my_size), sizeof my_size, sizes->send.data());
    sizes->sizes.resize(size_t(n));
    check_mpi(MPI_Iallgather(sizes->send.data(), 1, MPI_LONG_LONG, sizes->sizes.data(), 1, MPI_LONG_LONG, g_comm,
                             &sizes->req),
              "MPI_Iallgather (" + what + ")");
    wait_for(sizes, what, timeout_s_, alive);

    auto data = std::make_shared<Pending>();
    data->send.assign(mine.begin(), mine.end());
    data->counts.resize(size_t(n));
    data->displs.resize(size_t(n));
    long long total = 0;
    for (int r = 0; r < n; ++r) {
      data->counts[size_t(r)] = int(sizes->sizes[size_t(r)]);
      data->displs[size_t(r)] = int(total);
      total += sizes->sizes[size_t(r)];
    }
    if (total > (1LL << 31) - 1)
      throw RuntimeError(what + ": " + std::to_string(total) + " bytes exceed what one MPI collective carries");
    const bool receives = everywhere || me == 0;
    data->recv.resize(receives ? size_t(std::max(total, 1LL)) : 1);
    if (everywhere)
      check_mpi(MPI_Iallgatherv(data->send.data(), int(mine.size()), MPI_BYTE, data->recv.data(), data->counts.data(),
                                data->displs.data(), MPI_BYTE, g_comm, &data->req),
                "MPI_Iallgatherv (" + what + ")");
    else
      check_mpi(MPI_Igatherv(data->send.data(), int(mine.size()), MPI_BYTE, data->recv.data(), data->counts.data(),
                             data->displs.data(), MPI_BYTE, 0, g_comm, &data->req),
                "MPI_Igatherv (" + what + ")");
    wait_for(data, what, timeout_s_, alive);
    std::vector<std::string> out;
    if (!receives) return out;
    for (int r = 0; r < n; ++r)
      out.emplace_back(data->recv.data() + data->displs[size_t(r)], size_t(data->counts[size_t(r)]));
    return out;
  }

  double timeout_s_;
};

}  // namespace

int LaunchInfo::ranks_on_node(int node) const {
  return int(std::count(node_of_rank.begin(), node_of_rank.end(), node));
}

std::string LaunchInfo::describe() const {
  std::string hosts;
  for (int n = 0; n < nodes; ++n) {
    const auto it = std::find(node_of_rank.begin(), node_of_rank.end(), n);
    hosts += (hosts.empty() ? "" : ", ") + host_of_rank[size_t(it - node_of_rank.begin())] + ": " +
             std::to_string(ranks_on_node(n));
  }
  return std::to_string(size) + " process" + (size == 1 ? "" : "es") + " on " + std::to_string(nodes) + " host" +
         (nodes == 1 ? "" : "s") + " (" + hosts + ")";
}

const LaunchInfo& mpi_launch() {
  static LaunchInfo info = [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      inject_startup_fault("startup");
      startup_stage("in MPI_Init_thread");
      inject_startup_fault("mpi_init");
      // The control plane calls MPI from the rank's thread only; the MPI data plane (transport =
      // mpi) from every stream thread, so it needs MPI_THREAD_MULTIPLE.
      if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &g_thread_level) != MPI_SUCCESS)
        throw RuntimeError("MPI_Init_thread failed: this process cannot join the MPI job");
      std::atexit(finalize_at_exit);
    } else {
      MPI_Query_thread(&g_thread_level);
    }
    startup_stage("learning the placement (MPI_Comm_dup, MPI_Allgather of host names)");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &g_comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(g_comm, MPI_ERRORS_RETURN);
    LaunchInfo li;
    check_mpi(MPI_Comm_rank(g_comm, &li.rank), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(g_comm, &li.size), "MPI_Comm_size");

    // Host names of every rank, then nodes in the order of their lowest rank.
    char name[MPI_MAX_PROCESSOR_NAME] = {};
    int len = 0;
    check_mpi(MPI_Get_processor_name(name, &len), "MPI_Get_processor_name");
    std::vector<char> all(size_t(li.size) * MPI_MAX_PROCESSOR_NAME);
    check_mpi(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, g_comm),
              "MPI_Allgather (host names)");
    std::map<std::string, int> node_index, next_local;
    for (int r = 0; r < li.size; ++r) {
      std::string host(all.data() + size_t(r) * MPI_MAX_PROCESSOR_NAME);
      if (!node_index.count(host)) node_index[host] = int(node_index.size());
      li.host_of_rank.push_back(host);
      li.node_of_rank.push_back(node_index[host]);
      li.local_of_rank.push_back(next_local[host]++);
    }
    li.nodes = int(node_index.size());
    return li;
  }();
  return info;
}

void mark_job_failed() { g_job_failed.store(true); }

bool mpi_thread_multiple() {
  mpi_launch();
  return g_thread_level >= MPI_THREAD_MULTIPLE;
}

std::shared_ptr<ControlPlane> make_mpi_control_plane(double timeout_s) {
  mpi_launch();
  return std::make_shared<MpiControlPlane>(timeout_s);
}

}  // namespace joinlab
