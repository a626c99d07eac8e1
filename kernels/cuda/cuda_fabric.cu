// The fabrics of cuda_fabric.hpp: peer (CudaWorld), host-staged over a host data plane (ucx,
// mpi; also the puts, flags and collectives of nccl in processes), and nccl.
#include "kernels/cuda/cuda_fabric.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/common/error.hpp"
#include "core/runtime/polling.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_rank.hpp"
#include "kernels/cuda/host_lane.hpp"

#ifdef JOINLAB_HAVE_NCCL
#include <nccl.h>
#endif

namespace joinlab::cuda {

namespace {


char* at(const Buffer& b, uint64_t off) { return static_cast<char*>(b->ptr) + off; }

// --- gates ------------------------------------------------------------------------------------------

// Slabs of pinned, mapped words handed out one at a time (a gate per parked receive).
class WordPool {
 public:
  uint32_t* get() {
    std::lock_guard<std::mutex> g(mu_);
    if (free_.empty()) {
      const uint64_t words = 4096;
      auto* slab = static_cast<uint32_t*>(pinned_block_get(words * sizeof(uint32_t)));
      for (uint64_t i = 0; i < words; ++i) free_.push_back(slab + i);
    }
    uint32_t* w = free_.back();
    free_.pop_back();
    __atomic_store_n(w, 0u, __ATOMIC_RELEASE);
    return w;
  }
  void put(uint32_t* w) {
    std::lock_guard<std::mutex> g(mu_);
    free_.push_back(w);
  }

 private:
  std::mutex mu_;
  std::vector<uint32_t*> free_;
};
WordPool& words() {
  static WordPool* p = new WordPool;  // never destroyed: the driver may be gone at exit
  return *p;
}

// Pinned staging memory for the host-staged paths, returned to the pinned cache by its last holder.
std::shared_ptr<void> staging(uint64_t bytes) {
  uint64_t size = 64 << 10;
  while (size < bytes) size <<= 1;  // powers of two: the cache finds blocks of the same size again
  void* p = pinned_block_get(size);
  return std::shared_ptr<void>(p, [size](void* q) { pinned_block_put(q, size); });
}

cudaEvent_t recorded(cudaStream_t st) {
  cudaEvent_t e;
  JL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  JL_CUDA_CHECK(cudaEventRecord(e, st));
  return e;
}

// Later work on st waits for e (recorded on another rank's stream), unless e is complete already:
// then the stream needs no cross-device wait (the usual case in an all-to-all's steady state).
void wait_unless_done(cudaStream_t st, cudaEvent_t e) {
  const cudaError_t q = cudaEventQuery(e);
  if (q == cudaSuccess) return;
  if (q != cudaErrorNotReady) JL_CUDA_CHECK_CTX(q, "the peer's stream event of a transfer");
  JL_CUDA_CHECK(cudaStreamWaitEvent(st, e, 0));
}

}  // namespace

struct Gate {
  uint32_t* word = nullptr;  // 0 shut, 1 open
  ~Gate() {
    if (word) words().put(word);
  }
};

GatePtr new_gate() {
  auto g = std::make_shared<Gate>();
  g->word = words().get();
  return g;
}
void gate_wait(cudaStream_t st, const GatePtr& g) { stream_wait_word(st, g->word, 1); }
void gate_open_on_stream(cudaStream_t st, const GatePtr& g) { stream_write_word(st, g->word, 1); }
void gate_open_now(const GatePtr& g) { __atomic_store_n(g->word, 1u, __ATOMIC_RELEASE); }
bool gate_is_open(const GatePtr& g) { return __atomic_load_n(g->word, __ATOMIC_ACQUIRE) != 0; }

void GateSet::add(const GatePtr& g, int rank, std::string what) {
  std::lock_guard<std::mutex> lk(mu_);
  if (opened_) {
    gate_open_now(g);
    return;
  }
  if (entries_.size() >= 2 * pruned_at_ + 64) prune();  // amortized: the list stays about as long as the parked gates
  entries_.push_back({g, std::chrono::steady_clock::now(), rank, std::move(what)});
}

void GateSet::open_all() {
  std::lock_guard<std::mutex> lk(mu_);
  opened_ = true;
  for (auto& e : entries_)
    if (GatePtr g = e.gate.lock()) gate_open_now(g);
  entries_.clear();
}

bool GateSet::overdue(double timeout_s, int& rank, std::string& what) {
  std::lock_guard<std::mutex> lk(mu_);
  prune();
  const auto now = std::chrono::steady_clock::now();
  for (const auto& e : entries_)
    if (std::chrono::duration<double>(now - e.since).count() > timeout_s) {
      rank = e.rank;
      what = e.what;
      return true;
    }
  return false;
}

void GateSet::prune() {
  // remove_if, not a hand-written compaction: moving an entry onto itself empties its weak_ptr
  // (libstdc++), and a shut gate would drop out of the set - its stream then waited for ever,
  // since neither the job's failure nor the watchdog saw it any more.
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [](const Entry& e) {
                                  GatePtr g = e.gate.lock();
                                  return !g || gate_is_open(g);
                                }),
                 entries_.end());
  pruned_at_ = entries_.size();
}

// --- DeferredEvent -------------------------------------------------------------------------------

DeferredEvent::~DeferredEvent() {
  if (event_) cudaEventDestroy(event_);
}
void DeferredEvent::resolve(cudaEvent_t e) {
  {
    std::lock_guard<std::mutex> g(mu_);
    event_ = e;
  }
  cv_.notify_all();
}
void DeferredEvent::wait() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    while (!cv_.wait_for(lk, std::chrono::milliseconds(20), [&] { return event_ != nullptr; }))
      if (alive_) {
        lk.unlock();
        alive_();  // the receiver failed: end the wait with its reason
        lk.lock();
      }
  }
  JL_CUDA_CHECK_CTX(cudaEventSynchronize(event_), "waiting for a send to be received");
}
bool DeferredEvent::done() {
  std::lock_guard<std::mutex> g(mu_);
  if (!event_) return false;
  const cudaError_t q = cudaEventQuery(event_);
  if (q == cudaErrorNotReady) return false;
  JL_CUDA_CHECK_CTX(q, "waiting for a send to be received");
  return true;
}

// --- CudaWorld ------------------------------------------------------------------------------------

CudaWorld::CudaWorld(int ranks, double timeout_s)
    : ranks_(ranks), timeout_s_(timeout_s), gather_(2) {
  watchdog_ = std::thread([this] { watch(); });
}

CudaWorld::~CudaWorld() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  watchdog_.join();
}

void CudaWorld::watch() {
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(100));
    if (stop_ || failed_) continue;
    lk.unlock();
    int rank = 0;
    std::string what;
    if (gates_.overdue(timeout_s_, rank, what))
      fail(rank, what + " waited " + std::to_string(int(timeout_s_)) + " s for its send (cluster option timeout_s)");
    lk.lock();
  }
}

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
  gates_.open_all();  // parked receives let their streams go
  cv_.notify_all();
}

void CudaWorld::check_alive(int rank) {
  std::lock_guard<std::mutex> g(mu_);
  if (failed_) throw RuntimeError("rank " + std::to_string(rank) + " stopped: " + failure_);
}

void CudaWorld::barrier(int rank) {
  std::unique_lock<std::mutex> lk(mu_);
  if (failed_) throw RuntimeError("rank " + std::to_string(rank) + " stopped in barrier: " + failure_);
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

bool CudaWorld::post(int from, int to, int tag, Message& m, Receive& matched) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (failed_) throw RuntimeError("rank " + std::to_string(from) + " stopped in send: " + failure_);
    auto& parked = receives_[{from, to, tag}];
    if (!parked.empty()) {
      matched = std::move(parked.front());
      parked.pop_front();
      return true;
    }
    mail_[{from, to, tag}].push_back(std::move(m));
  }
  cv_.notify_all();
  return false;
}

bool CudaWorld::take(int from, int to, int tag, Receive r, Message& m) {
  std::lock_guard<std::mutex> g(mu_);
  if (failed_) throw RuntimeError("rank " + std::to_string(to) + " stopped in recv: " + failure_);
  auto& q = mail_[{from, to, tag}];
  if (!q.empty()) {
    m = std::move(q.front());
    q.pop_front();
    return true;
  }
  receives_[{from, to, tag}].push_back(std::move(r));
  return false;
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

// --- host-side protocol ---------------------------------------------------------------------------

namespace {
constexpr size_t kIpcWords = sizeof(cudaIpcMemHandle_t) / sizeof(uint64_t);
constexpr uint64_t kWindowMagic = 0x6a6c77696e646f77ull;  // "jlwindow"
constexpr size_t kWindowWords = 6 + kIpcWords;
static_assert(sizeof(cudaIpcMemHandle_t) % sizeof(uint64_t) == 0, "IPC handles travel as words");
}  // namespace

std::vector<uint64_t> encode_window(const WindowInfo& w) {
  std::vector<uint64_t> v = {kWindowMagic, w.device ? 1u : 0u, w.host_id, w.address, w.bytes, w.ipc.size()};
  std::vector<uint64_t> ipc = w.ipc;
  ipc.resize(kIpcWords, 0);
  v.insert(v.end(), ipc.begin(), ipc.end());
  return v;
}

std::vector<WindowInfo> decode_windows(const std::vector<uint64_t>& all, int ranks) {
  if (ranks < 1 || all.size() != size_t(ranks) * kWindowWords)
    throw RuntimeError("expose: the window exchange returned " + std::to_string(all.size()) + " words for " +
                       std::to_string(ranks) + " ranks, expected " + std::to_string(size_t(std::max(ranks, 0)) * kWindowWords));
  std::vector<WindowInfo> out;
  for (int r = 0; r < ranks; ++r) {
    const uint64_t* p = all.data() + size_t(r) * kWindowWords;
    if (p[0] != kWindowMagic || p[1] > 1 || p[5] > kIpcWords)
      throw RuntimeError("expose: rank " + std::to_string(r) + "'s window description is malformed (a rank of another build?)");
    WindowInfo w;
    w.device = p[1] == 1;
    w.host_id = p[2];
    w.address = p[3];
    w.bytes = p[4];
    w.ipc.assign(p + 6, p + 6 + p[5]);
    out.push_back(std::move(w));
  }
  return out;
}

PutPath put_path(const WindowInfo& target, uint64_t my_host_id) {
  if (!target.device) return PutPath::HostWindow;
  return target.host_id == my_host_id ? PutPath::MappedDevice : PutPath::Unsupported;
}

bool have_nccl() {
#ifdef JOINLAB_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::string fabric_kind(const BackendConfig& cfg, bool processes, bool nccl_built) {
  auto it = cfg.options.find("transport");
  std::string kind = it == cfg.options.end() ? (processes ? (nccl_built ? "nccl" : "ucx") : "peer") : it->second;
  if (kind == "inproc") kind = "peer";  // the cpu backend's name for the in-process transport
  const std::string choices = processes ? "nccl, ucx or mpi" : "peer, nccl or ucx";
  if (kind == "peer" && processes)
    throw InputError("cluster.transport = peer: ranks launched by mpirun are processes; the peer transport (CUDA "
                     "copies between threads of one process) is for ranks as threads. Choose " + choices);
  if (kind == "mpi" && !processes)
    throw InputError("cluster.transport = mpi: the MPI data plane needs ranks launched by mpirun; choose " + choices);
  if (kind != "peer" && kind != "nccl" && kind != "ucx" && kind != "mpi")
    throw InputError("cluster.transport = '" + kind + "': the cuda backend talks over " + choices);
  if (kind == "nccl" && !nccl_built)
    throw InputError(std::string("cluster.transport = nccl: this build has no NCCL (CMake found no nccl.h / "
                                 "libnccl); choose ") + (processes ? "ucx or mpi" : "peer or ucx"));
  return kind;
}

// --- peer: the in-process world ---------------------------------------------------------------------

namespace {

class WorldFabric : public CudaFabric {
 public:
  WorldFabric(CudaWorld& world, int me) : world_(world), me_(me) {}
  std::string name() const override { return "peer"; }

  FabricOp send(cudaStream_t st, int peer, const Buffer& src, uint64_t off, uint64_t bytes, int tag) override {
    CudaWorld::Message m;
    m.src = src;
    m.off = off;
    m.bytes = bytes;
    m.ready = recorded(st);
    m.sent = std::make_shared<DeferredEvent>([this] { world_.check_alive(me_); });
    auto sent = m.sent;
    CudaWorld::Receive r;
    if (!world_.post(me_, peer, tag, m, r)) return FabricOp{sent, nullptr};
    // The receive came first and parked its stream: copy into its buffer, then open its gate.
    cudaEventDestroy(m.ready);
    if (r.bytes != bytes) {
      cudaEventDestroy(r.ready);
      const std::string why = "send from rank " + std::to_string(me_) + " to rank " + std::to_string(peer) + " tag " +
                              std::to_string(tag) + " has " + std::to_string(bytes) + " bytes, the matching receive expects " +
                              std::to_string(r.bytes);
      world_.fail(me_, why);
      throw RuntimeError(why);
    }
    // Not before the receiver's earlier work is done with the buffer.
    wait_unless_done(st, r.ready);
    cudaEventDestroy(r.ready);
    if (bytes) JL_CUDA_CHECK(cudaMemcpyAsync(at(r.dst, r.off), at(src, off), bytes, cudaMemcpyDefault, st));
    gate_open_on_stream(st, r.gate);
    FabricOp op;
    op.hold = r.gate;  // not r.dst: the receiver keeps it until its receive completed, after this copy
    op.mem_src = int(src->space);
    op.mem_dst = int(r.dst->space);
    return op;
  }

  FabricOp recv(cudaStream_t st, int peer, const Buffer& dst, uint64_t off, uint64_t bytes, int tag) override {
    CudaWorld::Receive r{dst, off, bytes, new_gate(), recorded(st)};
    GatePtr gate = r.gate;
    cudaEvent_t ready = r.ready;
    CudaWorld::Message m;
    FabricOp op;
    op.mem_dst = int(dst->space);
    if (!world_.take(peer, me_, tag, std::move(r), m)) {
      // Parked: the sender copies into dst and opens the gate (or the job's failure does).
      world_.gates().add(gate, me_, "rank " + std::to_string(me_) + ": a receive from rank " + std::to_string(peer) +
                                        " (tag " + std::to_string(tag) + ", " + std::to_string(bytes) + " bytes)");
      gate_wait(st, gate);
      op.hold = gate;
      op.mem_src = int(MemSpace::Device);
      return op;
    }
    cudaEventDestroy(ready);  // the message is here: the copy below goes on this stream
    if (m.bytes != bytes) {
      cudaEventDestroy(m.ready);
      throw RuntimeError("recv on rank " + std::to_string(me_) + " from rank " + std::to_string(peer) + " tag " +
                         std::to_string(tag) + ": expected " + std::to_string(bytes) + " bytes, the matching send has " +
                         std::to_string(m.bytes));
    }
    wait_unless_done(st, m.ready);
    cudaEventDestroy(m.ready);
    if (bytes) JL_CUDA_CHECK(cudaMemcpyAsync(at(dst, off), at(m.src, m.off), bytes, cudaMemcpyDefault, st));
    // The sender's event completes with this copy, and it keeps the source until then: no hold
    // of m.src here (see Buffers in cuda_fabric.hpp).
    m.sent->resolve(recorded(st));
    op.mem_src = int(m.src->space);
    return op;
  }

  int expose(const Buffer& buf, uint32_t flags) override {
    const int w = next_window_++;
    CudaWorld::Window win;
    win.buf = buf;
    const uint64_t bytes = std::max<uint64_t>(4096, (uint64_t(flags) * sizeof(uint64_t) + 4095) / 4096 * 4096);
    auto* words = static_cast<uint64_t*>(pinned_block_get(bytes));
    std::memset(words, 0, bytes);
    win.flags = std::shared_ptr<uint64_t>(words, [bytes](uint64_t* p) { pinned_block_put(p, bytes); });
    win.nflags = flags;
    mine_[w] = win;
    world_.expose(w, me_, win);
    barrier();  // every rank's window is registered before anyone puts
    return w;
  }

  FabricOp put(cudaStream_t st, int peer, int window, uint64_t remote_off, const Buffer& src, uint64_t off,
               uint64_t bytes, uint32_t flag, uint64_t value) override {
    CudaWorld::Window win = world_.window(window, peer);
    if (remote_off + bytes > win.buf->bytes)
      throw RuntimeError("put: bytes [" + std::to_string(remote_off) + ", " + std::to_string(remote_off + bytes) +
                         ") exceed window " + std::to_string(window) + " of rank " + std::to_string(peer) + " (" +
                         std::to_string(win.buf->bytes) + " bytes)");
    if (flag >= win.nflags)
      throw RuntimeError("put: window " + std::to_string(window) + " of rank " + std::to_string(peer) + " has " +
                         std::to_string(win.nflags) + " flags, flag " + std::to_string(flag) + " asked");
    if (bytes) JL_CUDA_CHECK(cudaMemcpyAsync(at(win.buf, remote_off), at(src, off), bytes, cudaMemcpyDefault, st));
    // The stream sets the flag after the data landed, as a completion word. Not a host callback:
    // each stalls its stream until a driver thread ran it (about 0.1 ms per put on 2x H200).
    stream_write_word64(st, win.flags.get() + flag, value);
    FabricOp op;
    op.hold = std::make_shared<std::pair<Buffer, std::shared_ptr<uint64_t>>>(win.buf, win.flags);
    op.mem_src = src ? int(src->space) : -1;
    op.mem_dst = int(win.buf->space);
    return op;
  }

  uint64_t read_flag(int window, uint32_t flag) override {
    auto it = mine_.find(window);
    if (it == mine_.end()) throw RuntimeError("read_flag: window " + std::to_string(window) + " was not exposed");
    if (flag >= it->second.nflags) throw RuntimeError("read_flag: flag " + std::to_string(flag) + " out of range");
    return __atomic_load_n(it->second.flags.get() + flag, __ATOMIC_ACQUIRE);
  }

  std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) override {
    return world_.allgather(me_, gather_calls_++, mine);
  }
  void barrier() override { world_.barrier(me_); }
  void fail(const std::string& why) override { world_.fail(me_, why); }
  void check_alive() override { world_.check_alive(me_); }

 private:
  CudaWorld& world_;
  int me_;
  uint64_t gather_calls_ = 0;
  int next_window_ = 0;
  std::map<int, CudaWorld::Window> mine_;
};

// --- host-staged over a data plane -------------------------------------------------------------------

// One thread running jobs in the order queued. A job that throws fails the fabric (`on_error`),
// and the jobs after it are dropped: the job has failed anyway.
class Worker {
 public:
  Worker(int device, std::function<void(const std::string&)> on_error)
      : device_(device), on_error_(std::move(on_error)), thread_([this] { loop(); }) {}
  ~Worker() { stop(); }
  void push(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> g(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_all();
  }
  // Waits until every queued job ran (or was dropped), then ends the thread.
  void stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    cudaSetDevice(device_);
    bool failed = false;
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      if (failed) continue;
      try {
        job();
      } catch (const std::exception& e) {
        failed = true;
        on_error_(e.what());
      }
    }
  }
  int device_;
  std::function<void(const std::string&)> on_error_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

class NetFabric : public CudaFabric {
 public:
  NetFabric(std::string kind, int device, std::shared_ptr<Transport> net, std::vector<uint64_t> host_ids, bool threads)
      : kind_(std::move(kind)), device_(device), net_(std::move(net)), host_ids_(std::move(host_ids)),
        threads_(threads), me_(net_->rank()) {
    if (host_ids_.size() != size_t(net_->size()))
      throw RuntimeError("cuda fabric: " + std::to_string(host_ids_.size()) + " host ids for " +
                         std::to_string(net_->size()) + " ranks");
    auto err = [this](const std::string& why) { fail(why); };
    sender_ = std::make_unique<Worker>(device_, err);
    receiver_ = std::make_unique<Worker>(device_, err);
    putter_ = std::make_unique<Worker>(device_, err);
  }
  ~NetFabric() override {
    if (!finished_) {
      gates_.open_all();  // nothing else opens the gates any more
      stop_workers();
    }
    close_mappings();
  }
  std::string name() const override { return kind_; }

  FabricOp send(cudaStream_t st, int peer, const Buffer& src, uint64_t off, uint64_t bytes, int tag) override {
    check_alive();
    auto stage = staging(bytes);
    if (bytes) JL_CUDA_CHECK(cudaMemcpyAsync(stage.get(), at(src, off), bytes, cudaMemcpyDefault, st));
    cudaEvent_t copied = recorded(st);
    sender_->push([this, stage, copied, peer, tag, bytes] {
      wait_event(copied, "the staging copy of a send to rank " + std::to_string(peer));
      net_->send(peer, tag, stage.get(), bytes);
    });
    FabricOp op;
    op.hold = stage;  // the source is free once the staging copy is done
    op.mem_src = int(src->space);
    op.mem_dst = int(MemSpace::Pinned);
    return op;
  }

  FabricOp recv(cudaStream_t st, int peer, const Buffer& dst, uint64_t off, uint64_t bytes, int tag) override {
    check_alive();
    auto stage = staging(bytes);
    GatePtr gate = new_gate();
    gates_.add(gate, me_, "rank " + std::to_string(me_) + ": a receive from rank " + std::to_string(peer));
    gate_wait(st, gate);
    if (bytes) JL_CUDA_CHECK(cudaMemcpyAsync(at(dst, off), stage.get(), bytes, cudaMemcpyDefault, st));
    receiver_->push([this, stage, gate, peer, tag, bytes] {
      net_->recv(peer, tag, stage.get(), bytes);
      gate_open_now(gate);
    });
    FabricOp op;
    op.hold = std::make_shared<std::pair<std::shared_ptr<void>, GatePtr>>(stage, gate);
    op.mem_src = int(MemSpace::Pinned);
    op.mem_dst = int(dst->space);
    return op;
  }

  int expose(const Buffer& buf, uint32_t flags) override {
    check_alive();
    Window win;
    win.buf = buf;
    WindowInfo mine;
    mine.device = buf->space == MemSpace::Device;
    mine.host_id = host_ids_[size_t(me_)];
    mine.bytes = buf->bytes;
    if (mine.device) {
      // The data plane keeps the flags; its window over device memory is a word of host memory.
      win.flag_base = std::make_shared<uint64_t>(0);
      win.net = net_->expose(win.flag_base.get(), sizeof(uint64_t), flags);
      if (threads_) {
        mine.address = uint64_t(reinterpret_cast<uintptr_t>(buf->ptr));
      } else {
        OnDevice on(device_);
        cudaIpcMemHandle_t h;
        JL_CUDA_CHECK_CTX(cudaIpcGetMemHandle(&h, buf->ptr), "exporting window '" + buf->tag + "' for CUDA IPC");
        mine.ipc.resize(kIpcWords);
        std::memcpy(mine.ipc.data(), &h, sizeof h);
      }
    } else {
      win.net = net_->expose(buf->ptr, buf->bytes, flags);
    }
    win.peers = decode_windows(net_->allgather(encode_window(mine)), net_->size());
    win.mapped.assign(win.peers.size(), nullptr);
    const int id = int(windows_.size());
    windows_.push_back(std::move(win));
    return id;
  }

  FabricOp put(cudaStream_t st, int peer, int window, uint64_t remote_off, const Buffer& src, uint64_t off,
               uint64_t bytes, uint32_t flag, uint64_t value) override {
    check_alive();
    Window& win = window_of(window);
    const WindowInfo& target = win.peers.at(size_t(peer));
    if (remote_off + bytes > target.bytes)
      throw RuntimeError("put: bytes [" + std::to_string(remote_off) + ", " + std::to_string(remote_off + bytes) +
                         ") exceed window " + std::to_string(window) + " of rank " + std::to_string(peer) + " (" +
                         std::to_string(target.bytes) + " bytes)");
    FabricOp op;
    op.mem_src = src ? int(src->space) : -1;
    op.mem_dst = target.device ? int(MemSpace::Device) : int(MemSpace::Host);
    const int net_window = win.net;
    switch (peer == me_ ? (target.device ? PutPath::MappedDevice : PutPath::HostWindow)
                        : put_path(target, host_ids_[size_t(me_)])) {
      case PutPath::MappedDevice: {
        // Straight into the window (NVLink / PCIe), then the flag once the copy is complete.
        if (bytes) {
          char* dst = static_cast<char*>(mapped(win, peer)) + remote_off;
          JL_CUDA_CHECK(cudaMemcpyAsync(dst, at(src, off), bytes, cudaMemcpyDefault, st));
        }
        cudaEvent_t copied = recorded(st);
        putter_->push([this, copied, peer, net_window, flag, value] {
          wait_event(copied, "a put's copy into rank " + std::to_string(peer) + "'s window");
          net_->put(peer, net_window, 0, nullptr, 0, flag, value);
        });
        return op;
      }
      case PutPath::HostWindow: {
        std::shared_ptr<void> stage;
        if (bytes) {
          stage = staging(bytes);
          JL_CUDA_CHECK(cudaMemcpyAsync(stage.get(), at(src, off), bytes, cudaMemcpyDefault, st));
        }
        cudaEvent_t copied = recorded(st);
        putter_->push([this, stage, copied, peer, net_window, remote_off, bytes, flag, value] {
          wait_event(copied, "the staging copy of a put to rank " + std::to_string(peer));
          net_->put(peer, net_window, remote_off, stage.get(), bytes, flag, value);
        });
        op.hold = stage;
        return op;
      }
      case PutPath::Unsupported:
        break;
    }
    throw RuntimeError("put from rank " + std::to_string(me_) + " into window " + std::to_string(window) + " of rank " +
                       std::to_string(peer) + ": the window is device memory on another host, which the " + kind_ +
                       " transport cannot write (it needs UCX with CUDA support, GPUDirect RDMA); expose host memory "
                       "there (e.g. gpj ring_space = pinned)");
  }

  uint64_t read_flag(int window, uint32_t flag) override { return net_->read_flag(window_of(window).net, flag); }
  std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) override { return net_->allgather(mine); }
  void barrier() override { net_->barrier(); }

  void fail(const std::string& why) override {
    gates_.open_all();
    {
      std::lock_guard<std::mutex> g(mu_);
      if (failure_.empty()) failure_ = why;
    }
    net_->abort(why);
  }
  void check_alive() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (!failure_.empty()) throw RuntimeError("rank " + std::to_string(me_) + " failed: " + failure_);
    }
    net_->check_alive();
  }
  void finish() override {
    stop_workers();
    finished_ = true;
    check_alive();  // a worker's failure is the run's
  }

 private:
  struct Window {
    Buffer buf;
    int net = -1;
    std::shared_ptr<uint64_t> flag_base;
    std::vector<WindowInfo> peers;
    std::vector<void*> mapped;  // per peer, opened on first use
  };
  Window& window_of(int w) {
    if (w < 0 || w >= int(windows_.size())) throw RuntimeError("put: window " + std::to_string(w) + " was not exposed");
    return windows_[size_t(w)];
  }
  void* mapped(Window& win, int peer) {
    void*& p = win.mapped[size_t(peer)];
    if (p) return p;
    const WindowInfo& t = win.peers[size_t(peer)];
    if (peer == me_) return p = win.buf->ptr;
    if (threads_) return p = reinterpret_cast<void*>(uintptr_t(t.address));
    // A block of the device cache exposed again has the same handle, which opens only once.
    const std::string key(reinterpret_cast<const char*>(t.ipc.data()), t.ipc.size() * sizeof(uint64_t));
    if (auto it = opened_.find(key); it != opened_.end()) return p = it->second;
    cudaIpcMemHandle_t h;
    std::memcpy(&h, t.ipc.data(), sizeof h);
    OnDevice on(device_);
    JL_CUDA_CHECK_CTX(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess),
                      "mapping rank " + std::to_string(peer) + "'s window with CUDA IPC");
    opened_[key] = p;
    return p;
  }
  void close_mappings() {
    OnDevice on(device_);
    for (auto& [key, p] : opened_) cudaIpcCloseMemHandle(p);
    opened_.clear();
  }
  // A worker waits for the stream work its job depends on, bounded and failing with the job.
  void wait_event(cudaEvent_t e, const std::string& what) {
    const Deadline deadline(net_->timeout_s());
    Backoff backoff;
    for (;;) {
      const cudaError_t q = cudaEventQuery(e);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) JL_CUDA_CHECK_CTX(q, what);
      check_alive();
      if (deadline.passed())
        throw RuntimeError("rank " + std::to_string(me_) + ": " + what + " did not complete within " +
                           seconds_text(net_->timeout_s()));
      backoff.pause();
    }
    cudaEventDestroy(e);
  }
  void stop_workers() {
    for (auto* w : {&sender_, &receiver_, &putter_})
      if (*w) (*w)->stop();
  }

  std::string kind_;
  int device_;
  std::shared_ptr<Transport> net_;
  std::vector<uint64_t> host_ids_;
  bool threads_;
  int me_;
  GateSet gates_;  // receives waiting for their receiver thread; a failure opens them
  std::mutex mu_;
  std::string failure_;
  bool finished_ = false;
  std::vector<Window> windows_;
  std::map<std::string, void*> opened_;  // CUDA IPC mappings by handle
  std::unique_ptr<Worker> sender_, receiver_, putter_;
};

// --- nccl ---------------------------------------------------------------------------------------------

#ifdef JOINLAB_HAVE_NCCL

void check_nccl(ncclResult_t r, const std::string& call) {
  if (r == ncclSuccess) return;
  throw RuntimeError("NCCL " + call + " failed: " + ncclGetErrorString(r) +
                     (r == ncclInvalidUsage || r == ncclSystemError ? std::string(" (") + ncclGetLastError(nullptr) + ")" : ""));
}

// Two-sided transfers over NCCL; everything else by `base`. comms[i] is this rank's handle of
// sender communicator i (only rank i sends on it).
class NcclFabric : public CudaFabric {
 public:
  NcclFabric(std::shared_ptr<CudaFabric> base, std::vector<ncclComm_t> comms, int me, int device, double timeout_s)
      : base_(std::move(base)), comms_(std::move(comms)), me_(me), device_(device), timeout_s_(timeout_s) {}
  ~NcclFabric() override {
    stop_watchdog();
    if (!destroyed_) abort_comms("the rank ended without finishing");
  }
  std::string name() const override { return "nccl"; }

  void start() override {
    OnDevice on(device_);
    watchdog_ = std::thread([this] { watch(); });
    // Connect every pair now: a first send or receive would connect lazily, blocking this thread
    // until the peer's first operation on the same communicator, which may come after its own
    // receives from here (a cycle).
    const int n = int(comms_.size());
    void* scratch = nullptr;
    cudaStream_t st;
    JL_CUDA_CHECK(cudaMalloc(&scratch, size_t(std::max(n, 1))));
    JL_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    {
      std::lock_guard<std::mutex> g(mu_);
      check_nccl(ncclGroupStart(), "ncclGroupStart");
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          if (i == j) continue;
          if (i == me_) check_nccl(ncclSend(static_cast<char*>(scratch) + j, 1, ncclUint8, j, comms_[size_t(i)], st), "ncclSend (connect)");
          else if (j == me_) check_nccl(ncclRecv(static_cast<char*>(scratch) + i, 1, ncclUint8, i, comms_[size_t(i)], st), "ncclRecv (connect)");
        }
      check_nccl(ncclGroupEnd(), "ncclGroupEnd (connect)");
    }
    track(recorded(st), "connecting to every rank");
    const Deadline deadline(timeout_s_);
    Backoff backoff;
    cudaError_t q;
    while ((q = cudaStreamQuery(st)) == cudaErrorNotReady) {
      check_alive();
      if (deadline.passed()) {
        fail("NCCL connections not made within " + seconds_text(timeout_s_));
        check_alive();
      }
      backoff.pause();
    }
    JL_CUDA_CHECK_CTX(q, "connecting NCCL communicators");
    cudaStreamDestroy(st);
    cudaFree(scratch);
  }

  FabricOp send(cudaStream_t st, int peer, const Buffer& src, uint64_t off, uint64_t bytes, int tag) override {
    if (bytes) {
      std::lock_guard<std::mutex> g(mu_);
      if (aborted_) throw RuntimeError("rank " + std::to_string(me_) + " stopped: " + reason_);
      check_nccl(ncclSend(at(src, off), bytes, ncclUint8, peer, comms_[size_t(me_)], st), "ncclSend to rank " + std::to_string(peer));
      track(recorded(st), "ncclSend of " + std::to_string(bytes) + " bytes to rank " + std::to_string(peer));
    }
    FabricOp op;
    op.hold = src;
    op.mem_src = op.mem_dst = int(src->space);
    return op;
  }
  FabricOp recv(cudaStream_t st, int peer, const Buffer& dst, uint64_t off, uint64_t bytes, int tag) override {
    if (bytes) {
      std::lock_guard<std::mutex> g(mu_);
      if (aborted_) throw RuntimeError("rank " + std::to_string(me_) + " stopped: " + reason_);
      check_nccl(ncclRecv(at(dst, off), bytes, ncclUint8, peer, comms_[size_t(peer)], st), "ncclRecv from rank " + std::to_string(peer));
      track(recorded(st), "ncclRecv of " + std::to_string(bytes) + " bytes from rank " + std::to_string(peer));
    }
    FabricOp op;
    op.hold = dst;
    op.mem_src = op.mem_dst = int(dst->space);
    return op;
  }
  int expose(const Buffer& buf, uint32_t flags) override { return base_->expose(buf, flags); }
  FabricOp put(cudaStream_t st, int peer, int window, uint64_t remote_off, const Buffer& src, uint64_t off,
               uint64_t bytes, uint32_t flag, uint64_t value) override {
    return base_->put(st, peer, window, remote_off, src, off, bytes, flag, value);
  }
  uint64_t read_flag(int window, uint32_t flag) override { return base_->read_flag(window, flag); }
  std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) override { return base_->allgather(mine); }
  void barrier() override { base_->barrier(); }
  void fail(const std::string& why) override {
    abort_comms(why);
    base_->fail(why);
  }
  void check_alive() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (aborted_) throw RuntimeError("rank " + std::to_string(me_) + " stopped: " + reason_);
    }
    base_->check_alive();
  }
  void finish() override {
    stop_watchdog();
    check_alive();
    base_->barrier();  // every rank's transfers are complete before any communicator goes
    {
      std::lock_guard<std::mutex> g(mu_);
      for (auto& c : comms_) check_nccl(ncclCommDestroy(c), "ncclCommDestroy");
      destroyed_ = true;
    }
    base_->finish();
  }

 private:
  void track(cudaEvent_t e, std::string what) {
    std::lock_guard<std::mutex> g(track_mu_);
    outstanding_.push_back({e, std::chrono::steady_clock::now(), std::move(what)});
  }
  // Once the job failed (base), NCCL reported an error, or an operation stays incomplete for
  // timeout_s: abort the communicators, so that every kernel waiting on a peer ends.
  void watch() {
    cudaSetDevice(device_);
    while (!stop_.load()) {
      std::string why;
      try {
        base_->check_alive();
      } catch (const std::exception& e) {
        why = e.what();
      }
      if (why.empty()) {
        std::lock_guard<std::mutex> g(mu_);
        for (auto& c : comms_) {
          if (aborted_ || destroyed_) break;
          ncclResult_t async = ncclSuccess;
          if (ncclCommGetAsyncError(c, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
            why = std::string("NCCL reported an error: ") + ncclGetErrorString(async);
            break;
          }
        }
      }
      if (why.empty()) {
        std::lock_guard<std::mutex> g(track_mu_);
        while (!outstanding_.empty() && cudaEventQuery(outstanding_.front().event) != cudaErrorNotReady) {
          cudaEventDestroy(outstanding_.front().event);
          outstanding_.pop_front();
        }
        if (!outstanding_.empty() &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - outstanding_.front().since).count() > timeout_s_)
          why = "rank " + std::to_string(me_) + ": " + outstanding_.front().what + " did not complete within " +
                seconds_text(timeout_s_) + " (cluster option timeout_s): the peer died, hangs, or never posted it";
      }
      if (!why.empty()) {
        fail(why);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  void abort_comms(const std::string& why) {
    std::lock_guard<std::mutex> g(mu_);
    if (aborted_ || destroyed_) return;
    aborted_ = true;
    reason_ = why;
    // Kernels waiting on a peer see their communicator's abort flag and end. All communicators
    // at once, each from a thread of its own: ncclCommAbort frees pinned host memory, and
    // cuMemFreeHost waits for the whole device, so aborting them one by one deadlocked (2x H200)
    // when the stuck receive belonged to a communicator not aborted yet.
    std::vector<std::thread> aborts;
    for (auto& c : comms_)
      aborts.emplace_back([c, device = device_] {
        cudaSetDevice(device);
        ncclCommAbort(c);
      });
    for (auto& t : aborts) t.join();
  }
  void stop_watchdog() {
    stop_.store(true);
    if (watchdog_.joinable()) watchdog_.join();
  }

  struct Outstanding {
    cudaEvent_t event;
    std::chrono::steady_clock::time_point since;
    std::string what;
  };
  std::shared_ptr<CudaFabric> base_;
  std::vector<ncclComm_t> comms_;
  int me_, device_;
  double timeout_s_;
  std::mutex mu_;  // NCCL calls against ncclCommAbort from the watchdog
  bool aborted_ = false, destroyed_ = false;
  std::string reason_;
  std::mutex track_mu_;
  std::deque<Outstanding> outstanding_;
  std::atomic<bool> stop_{false};
  std::thread watchdog_;
};

#endif  // JOINLAB_HAVE_NCCL

[[noreturn, maybe_unused]] void no_nccl() {
  throw InputError("cluster.transport = nccl: this build has no NCCL (CMake found no nccl.h / libnccl)");
}

}  // namespace

// --- factories ------------------------------------------------------------------------------------

std::vector<std::shared_ptr<CudaFabric>> make_thread_fabrics(const std::string& kind, CudaWorld& world,
                                                            const std::vector<int>& devices,
                                                            std::vector<std::shared_ptr<Transport>> net) {
  const int n = int(devices.size());
  std::vector<std::shared_ptr<CudaFabric>> out;
  if (kind == "ucx") {
    if (net.size() != devices.size()) throw RuntimeError("cuda fabric: host transports for " + std::to_string(net.size()) + " of " + std::to_string(n) + " ranks");
    for (int r = 0; r < n; ++r)
      out.push_back(std::make_shared<NetFabric>(kind, devices[size_t(r)], net[size_t(r)], std::vector<uint64_t>(size_t(n), 0), true));
    return out;
  }
  for (int r = 0; r < n; ++r) out.push_back(std::make_shared<WorldFabric>(world, r));
  if (kind == "peer") return out;
  if (kind != "nccl") throw InputError("cluster.transport = '" + kind + "': not a transport between cuda ranks as threads");
#ifdef JOINLAB_HAVE_NCCL
  for (int a = 0; a < n; ++a)
    for (int b = a + 1; b < n; ++b)
      if (devices[size_t(a)] == devices[size_t(b)])
        throw InputError("cluster.transport = nccl: ranks " + std::to_string(a) + " and " + std::to_string(b) +
                         " share GPU " + std::to_string(devices[size_t(a)]) +
                         ", and NCCL refuses two ranks on one GPU; use one GPU per rank, or transport = peer or ucx");
  // Sender communicator i: every rank, in rank order; rank r's handle is comms[i][r].
  std::vector<std::vector<ncclComm_t>> comms(static_cast<size_t>(n), std::vector<ncclComm_t>(static_cast<size_t>(n)));
  for (int i = 0; i < n; ++i) check_nccl(ncclCommInitAll(comms[size_t(i)].data(), n, devices.data()), "ncclCommInitAll");
  for (int r = 0; r < n; ++r) {
    std::vector<ncclComm_t> mine;
    for (int i = 0; i < n; ++i) mine.push_back(comms[size_t(i)][size_t(r)]);
    out[size_t(r)] = std::make_shared<NcclFabric>(out[size_t(r)], std::move(mine), r, devices[size_t(r)], world.timeout_s());
  }
  return out;
#else
  no_nccl();
#endif
}

std::shared_ptr<CudaFabric> make_process_fabric(const std::string& kind, int device, std::shared_ptr<Transport> net,
                                                const std::vector<uint64_t>& host_ids) {
  auto base = std::make_shared<NetFabric>(kind, device, net, host_ids, false);
  if (kind == "ucx" || kind == "mpi") return base;
  if (kind != "nccl") throw InputError("cluster.transport = '" + kind + "': not a transport between cuda ranks as processes");
#ifdef JOINLAB_HAVE_NCCL
  const int n = net->size(), me = net->rank();
  // Rank 0 makes the unique id of every sender communicator; the data plane carries them.
  constexpr size_t kIdWords = (sizeof(ncclUniqueId) + 7) / 8;
  std::vector<uint64_t> ids(me == 0 ? size_t(n) * kIdWords : 0, 0);
  for (int i = 0; me == 0 && i < n; ++i) {
    ncclUniqueId id;
    check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    std::memcpy(ids.data() + size_t(i) * kIdWords, &id, sizeof id);
  }
  const std::vector<uint64_t> all = net->allgather(ids);
  if (all.size() != size_t(n) * kIdWords)
    throw RuntimeError("nccl: the unique-id exchange returned " + std::to_string(all.size()) + " words, expected " +
                       std::to_string(size_t(n) * kIdWords));
  OnDevice on(device);
  std::vector<ncclComm_t> comms(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    ncclUniqueId id;
    std::memcpy(&id, all.data() + size_t(i) * kIdWords, sizeof id);
    check_nccl(ncclCommInitRank(&comms[size_t(i)], n, id, me),
               "ncclCommInitRank (rank " + std::to_string(me) + " of " + std::to_string(n) + ", GPU " + std::to_string(device) + ")");
  }
  return std::make_shared<NcclFabric>(base, std::move(comms), me, device, net->timeout_s());
#else
  no_nccl();
#endif
}

}  // namespace joinlab::cuda
