// How CudaRanks reach each other: every byte a CudaRank sends, receives or puts, its windows'
// flags, its host collectives and its failure go through one CudaFabric (one per rank). The
// rank turns what a fabric queued on a stream into a tracked operator (span, event); strategies
// see only the Rank interface, so they run unchanged over every fabric.
//
// Fabrics ([cluster] transport):
//  * peer  (ranks as threads; the default there): CudaWorld, an in-process mailbox. send/recv are
//    CUDA copies (P2P between GPUs) queued by whichever side comes second: a receive posted
//    before its send parks its stream on a gate (below) that the sender opens after its copy.
//    Puts copy straight into the peer's buffer and set the flag from a host function.
//  * nccl  send/recv are ncclSend/ncclRecv of the device buffers on the rank's streams. NCCL runs
//    the kernels of one communicator one after another whatever their streams, so a rank that
//    posts a receive before its send (as shuffle does, on both sides) would wait on itself; every
//    rank therefore has a communicator of its own for what it sends ("sender communicators": a
//    message i -> j travels on communicator i, where only rank i sends), and its sends and
//    receives never queue behind each other. All connections are made at start() (a grouped
//    exchange on every communicator), since connecting lazily blocks the host until the peer
//    connects too. Puts, flags and collectives: the CudaWorld (threads) or the host data plane
//    (processes, below). A watchdog thread aborts the communicators (ncclCommAbort) once the
//    job failed, NCCL reports an asynchronous error, or an operation stays incomplete for
//    timeout_s, so a wait on NCCL work always ends.
//  * ucx, mpi  (host staging, for transports without GPU memory support): send = copy to a pinned
//    staging buffer on the stream, then a sender thread sends it with the host data plane once
//    the copy is done; recv = a receiver thread receives into pinned staging and opens the gate
//    that holds back the stream's copy to the destination. The data plane is the UCX (or MPI)
//    transport of core/runtime/process (threads: one UCX worker per rank; processes: the job's).
//
// Buffers: a rank keeps the buffers of its transfers until their events completed, as it does for
// its kernels and copies. A fabric's operation holds what the fabric made (staging, gates) and
// never another rank's buffer: dropping the last reference to a buffer synchronizes its GPU
// (CudaBuffer), and on another rank's thread that means waiting for the owner's later work (on 8
// H200s, peer copies that held their source made three ranks' shuffle phase wait 22-57 ms for
// other ranks' local joins). Buffers dropped while a rank's thread unwinds an exception do not
// wait there (its failure, announced after the unwinding, is what opens the other ranks' gates):
// they go back when the rank ends (cuda_rank.cu, LateFrees).
//
// Puts over the host data plane (nccl in processes, ucx, mpi), by where the window lives:
//  * host memory (Host, Pinned): the data plane's put (RDMA over InfiniBand/RoCE, emulated over
//    TCP), from a pinned staging copy of the source made on the stream; its flag as the put says.
//  * device memory of a rank on this host: a CUDA copy into the window mapped here (threads: its
//    address; processes: CUDA IPC, cudaIpcGetMemHandle exchanged at expose, NVLink between
//    GPUs), then, once the copy is complete, a flag-only put through the data plane. The flags
//    are therefore host words of the data plane's window on every path.
//  * device memory on another host: not supported (RuntimeError); it needs UCX built with CUDA
//    (GPUDirect RDMA: ucp_mem_map of the device buffer) - NCCL has no one-sided put.
//  A put thread issues the data plane's puts in the order the rank queued them, so a flag's
//  value still counts every earlier put of the rank.
//
// Gates: a word in mapped pinned memory that a stream waits on (cuStreamWaitValue32; a one-thread
// kernel where the driver lacks stream memory operations) until it is 1. Whoever delivers the
// data opens it: a host thread (ucx receive) or a stream write queued after the sender's copy
// (peer). A job's gates form a GateSet: its failure opens all of them, so no stream waits for a
// sender that will not come.
//
// A parked receive is device work that waits for another rank's host. Work that the driver
// orders after every earlier operation of a GPU (allocations: cudaMalloc, cudaHostAlloc; lazy
// module loading, hence CUDA_MODULE_LOADING=EAGER) must not be issued while a peer may still
// need to queue the opening copy behind it: ranks allocate, then meet at a barrier, then
// exchange (shuffle, the fabric tests).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/exec/backend.hpp"
#include "core/exec/rank.hpp"
#include "core/runtime/transport.hpp"

namespace joinlab::cuda {

// Keeps the calling thread's current device around a call that must run on another.
struct OnDevice {
  int previous = 0;
  explicit OnDevice(int device) {
    cudaGetDevice(&previous);
    if (previous != device) cudaSetDevice(device);
  }
  ~OnDevice() { cudaSetDevice(previous); }
};

// An event whose CUDA event is known only later (a send completes when the receiver copies).
// Its waits call `alive` (throws once the job failed) while the receiver has not come.
class DeferredEvent : public EventImpl {
 public:
  explicit DeferredEvent(std::function<void()> alive = {}) : alive_(std::move(alive)) {}
  ~DeferredEvent() override;
  void resolve(cudaEvent_t e);
  void wait() override;
  bool done() override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  cudaEvent_t event_ = nullptr;
  std::function<void()> alive_;
};

// A gate (above). Released when the last holder (the receive's tracked operator, the sender's
// copy, the thread that opens it) lets go.
struct Gate;
using GatePtr = std::shared_ptr<Gate>;
GatePtr new_gate();
void gate_wait(cudaStream_t st, const GatePtr& g);            // later work on st waits for it
void gate_open_on_stream(cudaStream_t st, const GatePtr& g);  // once st's earlier work is done
void gate_open_now(const GatePtr& g);                         // from the host
bool gate_is_open(const GatePtr& g);

// The gates a job's streams wait on. Register a gate before its wait is queued.
class GateSet {
 public:
  // `what` names the receive for the watchdog; opened at once when the set was opened already.
  void add(const GatePtr& g, int rank, std::string what);
  void open_all();  // the job failed: every gate, now and from now on
  // A gate shut for more than timeout_s since it was added: its rank and receive (false: none).
  bool overdue(double timeout_s, int& rank, std::string& what);

 private:
  struct Entry {
    std::weak_ptr<Gate> gate;
    std::chrono::steady_clock::time_point since;
    int rank;
    std::string what;
  };
  void prune();  // drops gates that are open or gone (under mu_)
  std::mutex mu_;
  bool opened_ = false;
  size_t pruned_at_ = 0;
  std::vector<Entry> entries_;
};

// State shared by the ranks of one threads run: host collectives, message matching for the peer
// fabric's send/recv, exposed windows, and failure propagation (a rank that throws makes every
// blocking call on the others fail promptly instead of hanging).
class CudaWorld {
 public:
  CudaWorld(int ranks, double timeout_s);
  ~CudaWorld();
  int ranks() const { return ranks_; }
  double timeout_s() const { return timeout_s_; }
  void fail(int rank, const std::string& what);
  void check_alive(int rank);  // throws once a rank failed
  GateSet& gates() { return gates_; }  // the parked receives; a failure opens them
  void barrier(int rank);
  std::vector<uint64_t> allgather(int rank, uint64_t call, const std::vector<uint64_t>& mine);

  struct Message {
    Buffer src;
    uint64_t off = 0, bytes = 0;
    cudaEvent_t ready = nullptr;  // recorded on the sender's stream after the data was produced
    std::shared_ptr<DeferredEvent> sent;  // completes when the receiver's copy does
  };
  struct Receive {  // a receive posted before its send: the sender copies and opens the gate
    Buffer dst;
    uint64_t off = 0, bytes = 0;
    GatePtr gate;
    cudaEvent_t ready = nullptr;  // the receiver's stream reached the receive (dst is free)
  };
  // Under the world's lock: either a waiting receive to serve (returned), or the message is queued.
  bool post(int from, int to, int tag, Message& m, Receive& matched);
  // Either the queued message (returned), or the receive is parked for the sender.
  bool take(int from, int to, int tag, Receive r, Message& m);

  struct Window {
    Buffer buf;
    // Completion flags, words of mapped pinned memory: a put's stream writes its flag after the
    // copy (stream_write_word64, no host callback), read_flag loads it.
    std::shared_ptr<uint64_t> flags;
    uint32_t nflags = 0;
  };
  void expose(int window, int rank, Window w);
  Window window(int window, int rank);

 private:
  template <class Pred>
  void wait_until(std::unique_lock<std::mutex>& lk, int me, const char* what, Pred pred);
  int ranks_;
  double timeout_s_;
  GateSet gates_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool failed_ = false;
  std::string failure_;
  uint64_t barrier_gen_ = 0;
  int barrier_waiting_ = 0;
  std::vector<std::vector<std::vector<uint64_t>>> gather_;  // [call parity][rank]
  std::map<std::tuple<int, int, int>, std::deque<Message>> mail_;
  std::map<std::tuple<int, int, int>, std::deque<Receive>> receives_;
  std::map<std::pair<int, int>, Window> windows_;
  // A parked receive still shut after timeout_s fails the world (its sender never came, or never
  // got to open it), which opens every gate; checked by a watchdog thread.
  bool stop_ = false;
  std::thread watchdog_;
  void watch();
};

// What a fabric queued for one transfer; the rank makes it a tracked operator.
struct FabricOp {
  std::shared_ptr<EventImpl> deferred;  // set: nothing was queued, the op completes with this
  std::shared_ptr<void> hold;           // what the transfer uses until it is complete (buffers, gate)
  int mem_src = -1, mem_dst = -1;       // MemSpace of the two ends, for the trace
};

class CudaFabric {
 public:
  virtual ~CudaFabric() = default;
  virtual std::string name() const = 0;
  // On the rank's thread, every rank at once, before the strategy runs (NCCL connections).
  virtual void start() {}
  // Queue the transfer on `st` after its earlier work; later work on `st` runs after it.
  virtual FabricOp send(cudaStream_t st, int peer, const Buffer& src, uint64_t off, uint64_t bytes, int tag) = 0;
  virtual FabricOp recv(cudaStream_t st, int peer, const Buffer& dst, uint64_t off, uint64_t bytes, int tag) = 0;
  virtual int expose(const Buffer& buf, uint32_t flags) = 0;
  virtual FabricOp put(cudaStream_t st, int peer, int window, uint64_t remote_off, const Buffer& src, uint64_t off,
                       uint64_t bytes, uint32_t flag, uint64_t value) = 0;
  virtual uint64_t read_flag(int window, uint32_t flag) = 0;
  virtual std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) = 0;
  virtual void barrier() = 0;
  // This rank failed: tell the others, abort what waits (idempotent; the first reason stays).
  virtual void fail(const std::string& why) = 0;
  virtual void check_alive() = 0;  // throws RuntimeError once the job failed
  // After a successful run, every rank's streams drained: wind down (threads, communicators).
  virtual void finish() {}
};

// Host-side protocol of the staged and IPC paths, kept free of CUDA so that it is unit tested
// without a GPU: what every rank contributes at expose, and how a put reaches a window.
struct WindowInfo {
  bool device = false;     // the window is device memory
  uint64_t host_id = 0;    // which host's memory it is
  uint64_t address = 0;    // threads: the device address itself
  std::vector<uint64_t> ipc;  // processes: the cudaIpcMemHandle_t, as words
  uint64_t bytes = 0;
};
enum class PutPath { HostWindow, MappedDevice, Unsupported };
std::vector<uint64_t> encode_window(const WindowInfo& w);
std::vector<WindowInfo> decode_windows(const std::vector<uint64_t>& all, int ranks);  // RuntimeError if malformed
PutPath put_path(const WindowInfo& target, uint64_t my_host_id);
// Default "peer" for threads, "nccl" for processes (ucx without NCCL); InputError naming the choices when the
// transport does not exist or does not fit the mode.
std::string fabric_kind(const BackendConfig& cfg, bool processes, bool have_nccl);
bool have_nccl();

// --- factories ------------------------------------------------------------------------------------

// Ranks as threads of this process, one fabric per rank, made on the backend's thread.
// `devices[r]` is rank r's GPU. "ucx" takes the per-rank host transports from `net`.
std::vector<std::shared_ptr<CudaFabric>> make_thread_fabrics(const std::string& kind, CudaWorld& world,
                                                            const std::vector<int>& devices,
                                                            std::vector<std::shared_ptr<Transport>> net);

// One rank of an MPI job: `net` is its host data plane (liveness, flags, host puts, staged
// transfers, the NCCL unique ids), host_ids[r] the physical host of rank r (CUDA IPC only between
// ranks of one host). Collective.
std::shared_ptr<CudaFabric> make_process_fabric(const std::string& kind, int device,
                                                std::shared_ptr<Transport> net,
                                                const std::vector<uint64_t>& host_ids);

}  // namespace joinlab::cuda
