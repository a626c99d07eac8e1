// The "cpu" backend when the ranks are processes: `mpirun -np N joinlab run FILE` makes every
// process one rank (its world rank), a CpuRank whose transport is the UCX data plane, with MPI
// only for bootstrap and the control plane's small collectives. Every process runs the whole
// experiment (planning, verification), and rank 0 reports it: after each run every rank's
// result and phases are gathered to every process (so each one verifies the same digest) and
// the trace spans to rank 0, which writes them. The same steps host the cuda backend's process
// ranks (process_host.hpp: the backend makes its rank, this file does the rest).
//
// Without an MPI launch the threads-as-ranks backend runs as before; its [cluster] transport may
// then also be "ucx" (ranks as threads, each with its own UCX worker: how the UCX data plane is
// tested without mpirun).
//
// [cluster] keys added here:
//   transport      = inproc | ucx | mpi  (default: inproc for threads, ucx under mpirun; mpi only
//                                         under mpirun)
//   emulate_nodes  = true | false     (default false) run a declared multi-node shape on one host
//   timeout_s      = seconds          bound on every blocking wait (the cpu backend's key)
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/config.hpp"
#include "core/runtime/cpu_backend.hpp"
#include "core/runtime/in_process_transport.hpp"
#include "core/runtime/process/data_plane.hpp"
#include "core/runtime/process/launch_guard.hpp"
#include "core/runtime/process/mpi_launch.hpp"
#include "core/runtime/process/process_host.hpp"

namespace joinlab {

namespace {

// --- a finished rank's record, as bytes ------------------------------------------------------------

class Writer {
 public:
  void u64(uint64_t v) { s_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void f64(double v) { s_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void str(const std::string& v) {
    u64(v.size());
    s_ += v;
  }
  std::string take() { return std::move(s_); }

 private:
  std::string s_;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  uint64_t u64() {
    uint64_t v;
    raw(&v, sizeof v);
    return v;
  }
  double f64() {
    double v;
    raw(&v, sizeof v);
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    if (at_ + n > s_.size()) throw RuntimeError("process ranks: a gathered rank record is truncated");
    std::string v = s_.substr(at_, size_t(n));
    at_ += size_t(n);
    return v;
  }

 private:
  void raw(void* p, size_t n) {
    if (at_ + n > s_.size()) throw RuntimeError("process ranks: a gathered rank record is truncated");
    std::memcpy(p, s_.data() + at_, n);
    at_ += n;
  }
  const std::string& s_;
  size_t at_ = 0;
};

struct RankRecord {
  RankResult result;
  std::vector<PhaseRecord> phases;
  Bandwidths bandwidths;
};

std::string encode(const Rank& rank) {
  Writer w;
  const RankResult& r = rank.result();
  w.u64(r.count);
  w.u64(r.checksum);
  w.u64(r.has_checksum);
  w.u64(r.sent_bytes);
  w.u64(rank.phases().size());
  for (const auto& p : rank.phases()) {
    w.str(p.name);
    w.f64(p.begin);
    w.f64(p.end);
  }
  const Bandwidths b = rank.bandwidths();
  for (double v : {b.mem, b.host_mem, b.h2d, b.p2p, b.net}) w.f64(v);
  w.str(b.source);
  return w.take();
}

RankRecord decode_record(const std::string& bytes) {
  Reader r(bytes);
  RankRecord rec;
  rec.result.count = r.u64();
  rec.result.checksum = r.u64();
  rec.result.has_checksum = r.u64() != 0;
  rec.result.sent_bytes = r.u64();
  const uint64_t phases = r.u64();
  for (uint64_t i = 0; i < phases; ++i) {
    PhaseRecord p;
    p.name = r.str();
    p.begin = r.f64();
    p.end = r.f64();
    rec.phases.push_back(std::move(p));
  }
  Bandwidths& b = rec.bandwidths;
  for (double* v : {&b.mem, &b.host_mem, &b.h2d, &b.p2p, &b.net}) *v = r.f64();
  b.source = r.str();
  return rec;
}

std::string encode(const std::vector<TraceSpan>& spans) {
  Writer w;
  w.u64(spans.size());
  for (const auto& s : spans) {
    w.u64(uint64_t(s.rank));
    w.str(s.track);
    const OpParams& p = s.params;
    for (uint64_t v : {uint64_t(p.kind), p.rows_in, p.rows_build, p.rows_out, uint64_t(p.key_bytes),
                       uint64_t(p.val_bytes), uint64_t(p.fanout), p.table_slots, p.bytes, uint64_t(int64_t(p.mem_src)),
                       uint64_t(int64_t(p.mem_dst))})
      w.u64(v);
    w.str(p.detail);
    w.f64(s.begin);
    w.f64(s.end);
  }
  return w.take();
}

std::vector<TraceSpan> decode_spans(const std::string& bytes) {
  Reader r(bytes);
  std::vector<TraceSpan> spans(size_t(r.u64()));
  for (auto& s : spans) {
    s.rank = int(r.u64());
    s.track = r.str();
    OpParams& p = s.params;
    p.kind = OpKind(r.u64());
    p.rows_in = r.u64();
    p.rows_build = r.u64();
    p.rows_out = r.u64();
    p.key_bytes = uint32_t(r.u64());
    p.val_bytes = uint32_t(r.u64());
    p.fanout = uint32_t(r.u64());
    p.table_slots = r.u64();
    p.bytes = r.u64();
    p.mem_src = int(int64_t(r.u64()));
    p.mem_dst = int(int64_t(r.u64()));
    p.detail = r.str();
    s.begin = r.f64();
    s.end = r.f64();
  }
  return spans;
}

// A rank that ran in another process, rebuilt from its record for the runner's collect step.
class RecordedRank final : public Rank {
 public:
  RecordedRank(int id, ClusterShape shape, std::string backend, RankRecord rec, std::vector<TraceSpan> spans)
      : Rank(id, shape), backend_(std::move(backend)), bandwidths_(rec.bandwidths) {
    restore_phases(std::move(rec.phases));
    report(rec.result);
    for (auto& s : spans) trace_.add(std::move(s));
  }
  std::string backend() const override { return backend_; }
  int streams() const override { return 0; }
  Buffer alloc(MemSpace, uint64_t, const std::string&) override { gone(); }
  uint64_t capacity(MemSpace) const override { return 0; }
  Launched launch(Stream, Op) override { gone(); }
  Event copy(Stream, const Buffer&, uint64_t, const Buffer&, uint64_t, uint64_t) override { gone(); }
  Event record(Stream) override { gone(); }
  void stream_wait(Stream, const Event&) override { gone(); }
  void sync(Stream) override { gone(); }
  Event send(Stream, int, const Buffer&, uint64_t, uint64_t, int) override { gone(); }
  Event recv(Stream, int, const Buffer&, uint64_t, uint64_t, int) override { gone(); }
  int expose(const Buffer&, uint32_t) override { gone(); }
  Event put(Stream, int, int, uint64_t, const Buffer&, uint64_t, uint64_t, uint32_t, uint64_t) override { gone(); }
  uint64_t read_flag(int, uint32_t) override { gone(); }
  std::vector<uint64_t> allgather(const std::vector<uint64_t>&) override { gone(); }
  void barrier() override { gone(); }
  double now() const override { return 0; }
  Bandwidths bandwidths() const override { return bandwidths_; }

 private:
  [[noreturn]] void gone() const {
    throw RuntimeError("rank " + std::to_string(id()) + " has finished in its own process: only its record is here");
  }
  std::string backend_;
  Bandwidths bandwidths_;
};

// --- launch checks ---------------------------------------------------------------------------------

bool option_flag(const BackendConfig& cfg, const std::string& key) {
  auto it = cfg.options.find(key);
  if (it == cfg.options.end()) return false;
  if (it->second == "true" || it->second == "1" || it->second == "yes") return true;
  if (it->second == "false" || it->second == "0" || it->second == "no") return false;
  throw InputError("cluster." + key + " = '" + it->second + "': expected true or false");
}

std::string shape_text(const ClusterShape& s) {
  return std::to_string(s.nodes) + " node" + (s.nodes == 1 ? "" : "s") + " x " + std::to_string(s.per_node) +
         " rank" + (s.per_node == 1 ? "" : "s") + " per node = " + std::to_string(s.size()) + " rank" +
         (s.size() == 1 ? "" : "s");
}

// The experiment's shape must be the launch's: the same rank count, and rank r on node r / per_node
// as local rank r % per_node - unless the declared nodes are emulated on one host.
void check_launch(const BackendConfig& cfg, const LaunchInfo& L) {
  const ClusterShape& s = cfg.shape;
  const std::string both = "the experiment declares " + shape_text(s) + " ([cluster] nodes, gpus_per_node), but mpirun launched " + L.describe();
  if (s.size() != L.size)
    throw InputError(both + ": launch mpirun -np " + std::to_string(s.size()) + " or change [cluster]");
  if (L.nodes == 1 && s.nodes > 1) {
    if (!option_flag(cfg, "emulate_nodes"))
      throw InputError(both + ": set cluster.emulate_nodes = true to run the declared nodes on this one host");
    return;
  }
  for (int r = 0; r < L.size; ++r)
    if (L.node_of_rank[size_t(r)] != s.node_of(r) || L.local_of_rank[size_t(r)] != s.local_of(r))
      throw InputError(both + ": rank " + std::to_string(r) + " runs on host " + L.host_of_rank[size_t(r)] +
                       " (node " + std::to_string(L.node_of_rank[size_t(r)]) + ") as local rank " +
                       std::to_string(L.local_of_rank[size_t(r)]) + ", where the shape puts it on node " +
                       std::to_string(s.node_of(r)) + " as local rank " + std::to_string(s.local_of(r)) +
                       " (place " + std::to_string(s.per_node) + " consecutive ranks per host, e.g. mpirun --map-by ppr:" +
                       std::to_string(s.per_node) + ":node)");
}

std::string transport_of(const BackendConfig& cfg, const char* fallback) {
  auto it = cfg.options.find("transport");
  return it == cfg.options.end() ? fallback : it->second;
}

// Clocks: steady_clock is one clock per host, so the ranks of a host share the first one's epoch
// (taken just after a barrier); other hosts' epochs are as close as the barrier makes them.
std::chrono::steady_clock::time_point common_epoch(ControlPlane& control, const LaunchInfo& L,
                                                   const ControlPlane::Liveness& alive) {
  control.barrier("start of the run", alive);
  const auto now = std::chrono::steady_clock::now();
  const int64_t mine = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  const auto all = control.allgather(std::string(reinterpret_cast<const char*>(&mine), sizeof mine), "clock epochs", alive);
  for (int r = 0; r < L.size; ++r) {
    if (L.node_of_rank[size_t(r)] != L.node()) continue;
    int64_t first;
    std::memcpy(&first, all[size_t(r)].data(), sizeof first);
    return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(first));
  }
  return now;
}

// One rank of an mpirun job, for any backend (process_host.hpp): the steps every backend's
// process ranks share.
class Host final : public ProcessHost {
 public:
  bool launched() const override { return launched_by_mpi(); }
  void run(const BackendConfig& cfg, const ProcessRun& how, const std::function<void(Rank&)>& body,
           const std::function<void(Rank&)>& collect) override {
    check_single_job(cfg);
    if (how.host_transport != "ucx" && how.host_transport != "mpi")
      throw InputError("process ranks: host data plane '" + how.host_transport + "': expected ucx or mpi");
    // Start-up blocks in MPI or waits without knowing who is missing: bounded as a stall is.
    const StartupScope startup(how.timeout_s / 2, "in MPI_Init_thread");
    const LaunchInfo& L = mpi_launch();
    check_launch(cfg, L);
    auto control = make_mpi_control_plane(how.timeout_s);
    startup_stage("in the data plane's wireup (" + how.host_transport + ")");
    inject_startup_fault("wireup");

    std::shared_ptr<DataPlane> data;
    try {
      data = with_injected_faults(how.host_transport == "mpi" ? make_mpi_transport(control) : make_ucx_transport(control),
                                  L.rank);
    } catch (...) {
      mark_job_failed();
      throw;
    }
    const ControlPlane::Liveness alive = [data] { data->check_alive(); };
    std::vector<std::string> records, traces;
    std::unique_ptr<Rank> rank;
    try {
      ProcessSlot slot;
      slot.rank = L.rank;
      slot.size = L.size;
      slot.host = L.node();
      slot.local = L.local();
      slot.ranks_on_host = L.ranks_on_node(L.node());
      for (int h : L.node_of_rank) slot.host_of_rank.push_back(uint64_t(h));
      slot.timeout_s = how.timeout_s;
      slot.data = data;
      slot.control = control;
      startup_stage("at the first barrier");
      slot.epoch = common_epoch(*control, L, alive);
      startup_done();
      try {
        rank = how.make_rank(slot);
        body(*rank);
        how.finish_rank(*rank);  // errors of work the body left in flight count too
      } catch (...) {
        const std::string why = what_of(std::current_exception());
        data->abort(why);
        if (rank && how.fail_rank) how.fail_rank(*rank, why);
        throw;
      }
      records = control->allgather(encode(*rank), "gathering results", alive);
      traces = control->gather_to_root(encode(rank->trace().spans()), "gathering traces", alive);
      data->quiesce();
    } catch (...) {
      mark_job_failed();  // peers may be dead: MPI_Finalize would wait for them
      // Peers may still be putting into this rank's exposed buffers, and the process ends with
      // this error anyway: the rank (which holds them) and its transport are left alive.
      (void)rank.release();
      new std::shared_ptr<DataPlane>(std::move(data));
      throw;
    }
    rank.reset();
    data.reset();
    for (int r = 0; r < L.size; ++r) {
      RecordedRank rank(r, cfg.shape, how.backend, decode_record(records[size_t(r)]),
                        traces.empty() ? std::vector<TraceSpan>{} : decode_spans(traces[size_t(r)]));
      collect(rank);
    }
  }
};

Host& host() {
  static Host* h = new Host;  // lives as long as the registered backends may use it
  return *h;
}

void run_process_rank(const BackendConfig& cfg, const std::function<void(Rank&)>& body,
                      const std::function<void(Rank&)>& collect) {
  const std::string transport = transport_of(cfg, "ucx");
  if (transport != "ucx" && transport != "mpi")
    throw InputError("cluster.transport = '" + transport + "': ranks launched by mpirun talk over ucx or mpi" +
                     (transport == "inproc" ? " (inproc is for ranks as threads of one process)" : ""));
  if (cfg.threads_per_rank < 0)
    throw InputError("backend cpu: threads_per_rank = " + std::to_string(cfg.threads_per_rank) + " is negative");
  const StartupScope startup(cpu_rank_setup(cfg, 1).timeout_s / 2, "in MPI_Init_thread");  // as Host::run does
  const LaunchInfo& L = mpi_launch();
  CpuRankSetup setup = cpu_rank_setup(cfg, L.ranks_on_node(L.node()));
  ProcessRun how;
  how.backend = "cpu";
  how.host_transport = transport;
  how.timeout_s = setup.timeout_s;
  how.make_rank = [&cfg, setup](const ProcessSlot& slot) -> std::unique_ptr<Rank> {
    CpuRankConfig rc = setup.rank;
    rc.epoch = slot.epoch;
    return std::make_unique<CpuRank>(slot.rank, cfg.shape, slot.data, rc);
  };
  how.finish_rank = [](Rank& r) { r.sync_all(); };
  host().run(cfg, how, body, collect);
}

// --- the backend -----------------------------------------------------------------------------------

// The cpu backend as registered before (ranks as threads), or ranks as processes under mpirun.
class LaunchAwareCpuBackend final : public Backend {
 public:
  explicit LaunchAwareCpuBackend(std::shared_ptr<Backend> threads) : threads_(std::move(threads)) {}
  std::string name() const override { return "cpu"; }
  void run(const BackendConfig& cfg, const std::function<void(Rank&)>& body,
           const std::function<void(Rank&)>& collect) override {
    if (launched_by_mpi())
      run_process_rank(cfg, body, collect);
    else
      threads_->run(cfg, body, collect);
  }
  std::string launch() const override { return launched_by_mpi() ? "mpirun" : "threads"; }
  int threads_per_rank(const BackendConfig& cfg) override {
    if (!launched_by_mpi()) return threads_->threads_per_rank(cfg);
    const LaunchInfo& L = mpi_launch();
    return cpu_threads_per_rank(cfg, L.ranks_on_node(L.node()));
  }
  void check(const BackendConfig& cfg) override {
    if (!launched_by_mpi()) return threads_->check(cfg);
    check_single_job(cfg);
    check_cpu_options(cfg);
    const std::string transport = transport_of(cfg, "ucx");
    if (transport != "ucx" && transport != "mpi")
      throw InputError("cluster.transport = " + transport + ": ranks launched by mpirun talk over ucx or mpi");
  }
  uint64_t device_memory_per_rank(const BackendConfig& cfg) override {
    if (!launched_by_mpi() || cfg.device_memory) return threads_->device_memory_per_rank(cfg);
    // The ranks of one node share its memory (per_node of them: the launch matches the shape).
    return available_memory() / uint64_t(std::max(1, cfg.shape.per_node));
  }

 private:
  std::shared_ptr<Backend> threads_;
};

// UCX between threads: each rank's worker is set up collectively, so every rank's transport is
// made on a thread of its own; the control plane is the in-process fabric.
std::vector<std::shared_ptr<Transport>> ucx_thread_transports(int ranks, double timeout_s, int copy_threads) {
  auto fabric = make_in_process_transports(ranks, timeout_s, copy_threads);
  std::vector<std::shared_ptr<Transport>> out(static_cast<size_t>(ranks));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
  std::vector<std::thread> makers;
  for (int r = 0; r < ranks; ++r)
    makers.emplace_back([&, r] {
      try {
        out[size_t(r)] = with_injected_faults(make_ucx_transport(make_in_process_control_plane(fabric[size_t(r)])), r);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        fabric[size_t(r)]->abort(what_of(errors[size_t(r)]));
      }
    });
  for (auto& t : makers) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace

void register_process_runtime() {
  // Only rank 0 of an mpirun launch prints and writes results (the CLI asks before any MPI call).
  if (launched_by_mpi()) set_reporting_process(launched_rank() <= 0);
  process_host_slot() = &host();  // the cuda backend hosts its process ranks here too
  // The threads backend registered before; it keeps no state between runs, so one instance serves
  // every wrapper.
  std::shared_ptr<Backend> threads = make_backend("cpu");
  register_backend("cpu", [threads] { return std::make_unique<LaunchAwareCpuBackend>(threads); });
  register_thread_transport("ucx", ucx_thread_transports);
  // transport, timeout_s and streams: registered with the cpu backend (cpu_backend.cpp)
  register_cluster_key("emulate_nodes", "true | false: under mpirun on one host, run a declared multi-node shape "
                                        "there (default false: the launch must match the shape)", "cpu");
}

}  // namespace joinlab
