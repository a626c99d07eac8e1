#include "core/runtime/process/launch_guard.hpp"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "core/runtime/launcher.hpp"
#include "core/runtime/polling.hpp"

namespace joinlab {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// The job's identity in the environment the launcher gives each of its processes.
std::string job_id() {
  for (const char* name : {"OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_JOBID", "SLURM_STEP_ID"})
    if (const char* v = env(name)) return std::string(name) + "=" + v;
  return "";
}

std::map<std::string, std::string> environment_of(const std::string& pid) {
  std::ifstream in("/proc/" + pid + "/environ", std::ios::binary);
  std::map<std::string, std::string> vars;
  std::string entry;
  while (std::getline(in, entry, '\0')) {
    const auto eq = entry.find('=');
    if (eq != std::string::npos) vars[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return vars;
}

char state_of(const std::string& pid) {  // /proc/PID/stat's third field: R, S, D, T (stopped), Z, ...
  std::ifstream in("/proc/" + pid + "/stat");
  std::string line;
  std::getline(in, line);
  const auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

std::string comm_of(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

struct Watchdog {
  std::mutex mu;
  std::condition_variable cv;
  bool armed = false, done = false;
  std::string stage;
};

Watchdog& watchdog() {
  static Watchdog* w = new Watchdog;  // the thread may outlive main's statics
  return *w;
}

std::atomic<bool> g_ended{false};

}  // namespace

// This job's processes on this host: rank -> (pid, state).
std::map<int, std::pair<std::string, char>> scan_job() {
  std::map<int, std::pair<std::string, char>> found;
  const std::string job = job_id();
  if (job.empty()) return found;
  const auto eq = job.find('=');
  const std::string var = job.substr(0, eq), value = job.substr(eq + 1);
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      const std::string pid = e->d_name;
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      auto vars = environment_of(pid);
      if (vars[var] != value) continue;
      auto r = vars.find("OMPI_COMM_WORLD_RANK");
      if (r == vars.end()) r = vars.find("PMIX_RANK");
      if (r == vars.end()) r = vars.find("PMI_RANK");
      if (r == vars.end()) continue;
      const char state = state_of(pid);
      auto& slot = found[std::atoi(r->second.c_str())];
      // A wrapper (sh -c, timeout) has the same environment: the process that is not running
      // (stopped, a zombie) is the one to report; otherwise any.
      if (slot.first.empty() || state == 'T' || state == 't' || state == 'Z') slot = {pid, state};
    }
    ::closedir(d);
  }
  return found;
}

std::string local_peer_faults(bool kill_stopped) {
  if (job_id().empty()) return "";
  const int me = launched_rank(), size = launched_size();
  const auto found = scan_job();
  std::ostringstream out;
  for (auto& [rank, what] : found) {
    if (rank == me) continue;
    const char s = what.second;
    if (s == 'T' || s == 't') {
      out << (out.tellp() > 0 ? "; " : "") << "rank " << rank << " (pid " << what.first << ") is stopped";
      if (kill_stopped && ::kill(std::atoi(what.first.c_str()), SIGKILL) == 0) out << ": killed it (SIGKILL)";
    } else if (s == 'Z') {
      out << (out.tellp() > 0 ? "; " : "") << "rank " << rank << " (pid " << what.first << ") has died";
    }
  }
  // On one host every rank's process is here: one that is not has died (and was reaped).
  const char* nodes = env("OMPI_MCA_orte_num_nodes");
  if (nodes && std::atoi(nodes) == 1)
    for (int r = 0; r < size; ++r)
      if (!found.count(r)) out << (out.tellp() > 0 ? "; " : "") << "rank " << r << " has no process any more (it died)";
  return out.str();
}

void end_failed_job() {
  if (!launched_by_mpi() || g_ended.exchange(true)) return;
  const char* recovery = env("OMPI_MCA_orte_enable_recovery");
  if (!recovery || std::string(recovery) == "0" || std::string(recovery) == "false") return;
  const long parent = long(::getppid());
  const std::string name = comm_of(parent);
  std::string line = "joinlab: rank " + std::to_string(launched_rank()) + ": ";
  if (name == "mpirun" || name == "mpiexec" || name == "orterun" || name == "orted" || name == "prterun" ||
      name == "prted") {
    line += "the job failed under mpirun --enable-recovery, whose exit status would say it succeeded: "
            "SIGTERM to its " + name + " (pid " + std::to_string(parent) + ") ends every process of the job\n";
    // The other ranks get a moment to report their own view of the failure before mpirun ends them.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::cerr << line << std::flush;
    ::kill(pid_t(parent), SIGTERM);
  } else {
    line += "the job failed under mpirun --enable-recovery, but this process's parent is '" + name +
            "', not mpirun or orted: mpirun's exit status may still say it succeeded\n";
    std::cerr << line << std::flush;
  }
}

void arm_startup_watchdog(double limit_s, const std::string& stage) {
  Watchdog& w = watchdog();
  {
    std::lock_guard<std::mutex> g(w.mu);
    w.stage = stage;
    if (w.armed) return;
    w.armed = true;
  }
  std::thread([limit_s] {
    Watchdog& w = watchdog();
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(limit_s));
    std::map<int, std::string> seen;  // ranks of this host seen running: rank -> pid
    std::string why;
    const int me = launched_rank();
    // Looks 4 times a second (a /proc scan costs milliseconds; start-up is short), the first at once.
    for (bool first = true;; first = false) {
      if (!first) {
        std::unique_lock<std::mutex> g(w.mu);
        const auto next = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(250));
        if (w.cv.wait_until(g, next, [&] { return w.done; })) return;
        if (std::chrono::steady_clock::now() >= deadline) {
          why = "did not finish within " + seconds_text(limit_s) + " (" + w.stage + ")";
          break;
        }
      }
      // A peer of this host that ran and is gone (or a zombie) has died: no need to wait for the
      // bound. One that is stopped may yet go on: the bound judges it, as a heartbeat would.
      const auto found = scan_job();
      std::string dead;
      for (auto& [rank, pid] : seen) {
        if (rank == me) continue;
        auto it = found.find(rank);
        if (it == found.end() || it->second.second == 'Z')
          dead += (dead.empty() ? "" : "; ") + ("rank " + std::to_string(rank) + " (pid " + pid + ") has died");
      }
      if (!dead.empty()) {
        std::lock_guard<std::mutex> g(w.mu);
        if (w.done) return;
        why = "failed (" + w.stage + "): " + dead;
        local_peer_faults(true);  // a stopped peer would keep the job (and mpirun) alive
        std::cerr << "joinlab: error: rank " + std::to_string(me) + ": start-up " + why + "\n" << std::flush;
        end_failed_job();
        std::_Exit(1);
      }
      for (auto& [rank, what] : found)
        if (what.second != 'Z') seen[rank] = what.first;
    }
    const std::string faults = local_peer_faults(true);
    std::cerr << "joinlab: error: rank " + std::to_string(me) + ": start-up " + why + ": " +
                     (faults.empty() ? std::string("every rank on this host runs: a rank on another host died or "
                                                   "hangs, or the network between the hosts fails")
                                     : faults) +
                     " (start-up is bounded by cluster.timeout_s / 2)\n"
              << std::flush;
    end_failed_job();
    std::_Exit(1);  // MPI may hold locks this thread would need: no MPI call, no exit handlers
  }).detach();
}

void startup_stage(const std::string& stage) {
  Watchdog& w = watchdog();
  std::lock_guard<std::mutex> g(w.mu);
  w.stage = stage;
}

void startup_done() {
  Watchdog& w = watchdog();
  std::lock_guard<std::mutex> g(w.mu);
  w.done = true;
  w.cv.notify_all();
}

}  // namespace joinlab
