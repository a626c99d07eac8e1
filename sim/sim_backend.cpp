// The "sim" backend. SimGrid 3.32 keeps global state that cannot be reset, so every run
// simulates in a child process (fork); the child sends back what the runner collects (results,
// phases, trace spans, bandwidths) and the parent replays it into ranks for `collect`.
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <sstream>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/exec/backend.hpp"
#include "core/experiment/config.hpp"
#include "core/runtime/cpu_backend.hpp"
#include "sim/sim_rank.hpp"

namespace joinlab {

namespace {

using sim::RankRecord;
using sim::SimOutcome;

// --- a byte stream for the child's answer ---
class Writer {
 public:
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod(uint64_t(s.size()));
    out_ += s;
  }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  template <class T>
  T pod() {
    T v;
    need(sizeof v);
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string str() {
    uint64_t n = pod<uint64_t>();
    need(n);
    std::string s = in_.substr(at_, n);
    at_ += n;
    return s;
  }

 private:
  void need(size_t n) {
    if (at_ + n > in_.size()) throw RuntimeError("sim backend: the simulation's answer is truncated");
  }
  const std::string& in_;
  size_t at_ = 0;
};

void write_params(Writer& w, const OpParams& p) {
  w.pod(p.kind);
  w.pod(p.rows_in);
  w.pod(p.rows_build);
  w.pod(p.rows_out);
  w.pod(p.key_bytes);
  w.pod(p.val_bytes);
  w.pod(p.fanout);
  w.pod(p.table_slots);
  w.pod(p.bytes);
  w.pod(p.mem_src);
  w.pod(p.mem_dst);
  w.str(p.detail);
}

OpParams read_params(Reader& r) {
  OpParams p;
  p.kind = r.pod<OpKind>();
  p.rows_in = r.pod<uint64_t>();
  p.rows_build = r.pod<uint64_t>();
  p.rows_out = r.pod<uint64_t>();
  p.key_bytes = r.pod<uint32_t>();
  p.val_bytes = r.pod<uint32_t>();
  p.fanout = r.pod<uint32_t>();
  p.table_slots = r.pod<uint64_t>();
  p.bytes = r.pod<uint64_t>();
  p.mem_src = r.pod<int>();
  p.mem_dst = r.pod<int>();
  p.detail = r.str();
  return p;
}

std::string serialize(const SimOutcome& o) {
  Writer w;
  w.pod(o.error_kind);
  w.str(o.error);
  const sim::SimStats& s = o.stats;
  w.pod(s.simulated_seconds);
  w.pod(s.wall_seconds);
  w.pod(s.operators);
  w.pod(s.transfers);
  w.pod(s.flows);
  w.pod(s.waits);
  w.pod(s.spans_dropped);
  w.str(s.platform);
  w.str(s.flows_mode);
  w.pod(uint64_t(o.ranks.size()));
  for (auto& r : o.ranks) {
    w.pod(r.id);
    w.pod(r.job);
    w.pod(r.result);
    w.pod(uint64_t(r.phases.size()));
    for (auto& p : r.phases) {
      w.str(p.name);
      w.pod(p.begin);
      w.pod(p.end);
    }
    w.pod(uint64_t(r.spans.size()));
    for (auto& sp : r.spans) {
      w.pod(sp.rank);
      w.str(sp.track);
      write_params(w, sp.params);
      w.pod(sp.begin);
      w.pod(sp.end);
    }
    const Bandwidths& b = r.bandwidths;
    w.pod(b.mem);
    w.pod(b.host_mem);
    w.pod(b.h2d);
    w.pod(b.p2p);
    w.pod(b.net);
    w.str(b.source);
  }
  return std::move(w.bytes());
}

SimOutcome deserialize(const std::string& bytes) {
  Reader r(bytes);
  SimOutcome o;
  o.error_kind = r.pod<int>();
  o.error = r.str();
  sim::SimStats& s = o.stats;
  s.simulated_seconds = r.pod<double>();
  s.wall_seconds = r.pod<double>();
  s.operators = r.pod<uint64_t>();
  s.transfers = r.pod<uint64_t>();
  s.flows = r.pod<uint64_t>();
  s.waits = r.pod<uint64_t>();
  s.spans_dropped = r.pod<uint64_t>();
  s.platform = r.str();
  s.flows_mode = r.str();
  const uint64_t n = r.pod<uint64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    RankRecord rr;
    rr.id = r.pod<int>();
    rr.job = r.pod<int>();
    rr.result = r.pod<RankResult>();
    const uint64_t phases = r.pod<uint64_t>();
    for (uint64_t k = 0; k < phases; ++k) {
      PhaseRecord p;
      p.name = r.str();
      p.begin = r.pod<double>();
      p.end = r.pod<double>();
      rr.phases.push_back(std::move(p));
    }
    const uint64_t spans = r.pod<uint64_t>();
    rr.spans.reserve(spans);
    for (uint64_t k = 0; k < spans; ++k) {
      TraceSpan sp;
      sp.rank = r.pod<int>();
      sp.track = r.str();
      sp.params = read_params(r);
      sp.begin = r.pod<double>();
      sp.end = r.pod<double>();
      rr.spans.push_back(std::move(sp));
    }
    Bandwidths& b = rr.bandwidths;
    b.mem = r.pod<double>();
    b.host_mem = r.pod<double>();
    b.h2d = r.pod<double>();
    b.p2p = r.pod<double>();
    b.net = r.pod<double>();
    b.source = r.str();
    o.ranks.push_back(std::move(rr));
  }
  return o;
}

// A finished simulated rank, rebuilt in the parent for the runner's `collect`: its phases are
// replayed on a clock set to the recorded times, so Rank's own bookkeeping holds them.
class RecordedRank final : public Rank {
 public:
  RecordedRank(const RankRecord& r, ClusterShape shape) : Rank(r.id, shape), bw_(r.bandwidths) {
    set_job(r.job);
    double prev_end = -1;
    for (auto& p : r.phases) {
      if (prev_end >= 0 && prev_end < p.begin) {  // a gap: the previous phase ended on its own
        clock_ = prev_end;
        end_phases();
      }
      clock_ = p.begin;
      phase(p.name);
      prev_end = p.end;
    }
    clock_ = prev_end;
    end_phases();
    report(r.result);
    for (auto& s : r.spans) trace_.add(s);
  }
  std::string backend() const override { return "sim"; }
  bool has_data() const override { return false; }
  int streams() const override { return 0; }
  Buffer alloc(MemSpace, uint64_t, const std::string&) override { ended(); }
  uint64_t capacity(MemSpace) const override { return 0; }
  Launched launch(Stream, Op) override { ended(); }
  Event copy(Stream, const Buffer&, uint64_t, const Buffer&, uint64_t, uint64_t) override { ended(); }
  Event record(Stream) override { return Event(); }
  void stream_wait(Stream, const Event&) override {}
  void sync(Stream) override {}
  Event send(Stream, int, const Buffer&, uint64_t, uint64_t, int) override { ended(); }
  Event recv(Stream, int, const Buffer&, uint64_t, uint64_t, int) override { ended(); }
  int expose(const Buffer&, uint32_t) override { ended(); }
  Event put(Stream, int, int, uint64_t, const Buffer&, uint64_t, uint64_t, uint32_t, uint64_t) override { ended(); }
  uint64_t read_flag(int, uint32_t) override { ended(); }
  std::vector<uint64_t> allgather(const std::vector<uint64_t>&) override { ended(); }
  void barrier() override { ended(); }
  double now() const override { return clock_; }
  Bandwidths bandwidths() const override { return bw_; }

 private:
  [[noreturn]] static void ended() {
    throw RuntimeError("sim backend: the simulation has ended; a collected rank only holds its results");
  }
  double clock_ = 0;
  Bandwidths bw_;
};

std::string read_all(int fd) {
  std::string s;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      s.append(buf, size_t(n));
    } else if (n == 0) {
      return s;
    } else if (errno != EINTR) {
      throw RuntimeError(std::string("sim backend: reading the simulation's answer failed: ") + std::strerror(errno));
    }
  }
}

void write_all(int fd, const std::string& s) {
  size_t at = 0;
  while (at < s.size()) {
    ssize_t n = ::write(fd, s.data() + at, s.size() - at);
    if (n > 0) at += size_t(n);
    else if (errno != EINTR) return;
  }
}

// The simulator's stated limits. Every strategy may message every other rank, so the
// simulation's memory grows with the pairs of ranks: about 32 MiB + 32 KiB per rank + 160 bytes
// per pair (shuffle on 1024 simulated GPUs peaks at about 230 MiB).
constexpr int kMaxSimRanks = 16384;
uint64_t simulation_bytes(int ranks) {
  const uint64_t n = uint64_t(ranks);
  return (32ull << 20) + n * (32ull << 10) + n * n * 160;
}

std::string mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

class SimBackend final : public Backend {
 public:
  std::string name() const override { return "sim"; }
  std::string default_profile() const override { return sim::kDefaultProfile; }

  void check(const BackendConfig& cfg) override {
    sim::check_config(cfg);
    if (cfg.jobs < 1) throw InputError("experiment.concurrent_joins = " + std::to_string(cfg.jobs) + ": must be at least 1");
    const int n = cfg.shape.size() * cfg.jobs;  // every concurrent join's ranks are actors
    const uint64_t need = simulation_bytes(n), avail = available_memory();
    if (n > kMaxSimRanks)
      throw InputError("the simulator runs at most " + std::to_string(kMaxSimRanks) + " ranks; " +
                       std::to_string(n) + " would need about " + mib(need) + " of memory for the simulation (" +
                       mib(avail) + " available here) and hours of wall time");
    if (need > avail)
      throw InputError("simulating " + std::to_string(n) + " ranks needs about " + mib(need) +
                       " of memory (32 MiB + 32 KiB per rank + 160 bytes per pair of ranks), but " + mib(avail) +
                       " is available here; simulate fewer ranks");
  }

  void run(const BackendConfig& cfg, const std::function<void(Rank&)>& body,
           const std::function<void(Rank&)>& collect) override {
    check(cfg);
    int fds[2];
    if (::pipe(fds) != 0) throw RuntimeError(std::string("sim backend: pipe failed: ") + std::strerror(errno));
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) throw RuntimeError(std::string("sim backend: fork failed: ") + std::strerror(errno));
    if (pid == 0) {  // the child simulates and answers
      // Ends with joinlab however joinlab ends (killed, interrupted); if it ended before this
      // line, the parent is no longer the one that forked.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      ::close(fds[0]);
      SimOutcome o;
      try {
        o = sim::simulate(cfg, body);
      } catch (const InputError& e) {
        o.error_kind = 2;
        o.error = e.what();
      } catch (const std::exception& e) {
        o.error_kind = 1;
        o.error = e.what();
      }
      write_all(fds[1], serialize(o));
      ::close(fds[1]);
      std::fflush(nullptr);
      ::_exit(0);
    }
    ::close(fds[1]);
    std::string answer;
    try {
      answer = read_all(fds[0]);
    } catch (...) {
      ::close(fds[0]);
      ::waitpid(pid, nullptr, 0);
      throw;
    }
    ::close(fds[0]);
    int status = 0;
    rusage usage{};
    ::wait4(pid, &status, 0, &usage);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || answer.empty()) {
      std::ostringstream m;
      m << "sim backend: the simulation process died";
      if (WIFSIGNALED(status)) m << " on signal " << WTERMSIG(status) << " (" << strsignal(WTERMSIG(status)) << ")";
      m << " after using " << usage.ru_maxrss / 1024 << " MiB";
      throw RuntimeError(m.str());
    }
    SimOutcome o = deserialize(answer);
    const sim::SimStats& s = o.stats;
    if (std::getenv("JOINLAB_SIM_VERBOSE") || (s.wall_seconds > 5 && !quiet())) {
      std::fprintf(stderr,
                   "sim: %s; flows %s: %.6g s simulated in %.2f s wall, %.0f MiB peak; %llu operators, %llu transfers, "
                   "%llu network flows, %llu waits%s\n",
                   s.platform.c_str(), s.flows_mode.c_str(), s.simulated_seconds, s.wall_seconds,
                   double(usage.ru_maxrss) / 1024.0, (unsigned long long)s.operators, (unsigned long long)s.transfers,
                   (unsigned long long)s.flows, (unsigned long long)s.waits,
                   s.spans_dropped ? (", " + std::to_string(s.spans_dropped) + " trace spans dropped").c_str() : "");
    }
    if (o.error_kind == 2) throw InputError(o.error);
    if (o.error_kind != 0) throw RuntimeError("simulation: " + o.error);
    for (auto& r : o.ranks) {
      RecordedRank rank(r, cfg.shape);
      collect(rank);
    }
  }
};

}  // namespace

void register_sim_backend() {
  register_backend("sim", [] { return std::make_unique<SimBackend>(); });
  for (auto& [key, help] : sim::sim_cluster_keys()) register_cluster_key(key, help, "sim");
  register_cluster_key("emulate_nodes", "true | false: the declared nodes share one host (one node of every GPU)", "sim");
}

}  // namespace joinlab
