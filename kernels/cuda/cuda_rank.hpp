// CudaRank: a Rank over one GPU. Streams are CUDA streams, events CUDA events; device buffers
// come from a per-device cache of cudaMalloc blocks (so repeated runs do not pay cudaMalloc),
// pinned ones from cudaHostAlloc (mapped, so kernels can also read them in place). Every
// operator is bracketed by two timing events and becomes a TraceSpan ("stream N") once it is
// complete; the rank's clock is seconds since the backend started, the same clock as the spans
// (a reference event recorded at a known host time anchors the GPU timestamps).
#pragma once
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/exec/backend.hpp"
#include "core/exec/rank.hpp"
#include "kernels/cuda/kernels.hpp"

namespace joinlab::cuda {

class CudaRank;

// State shared by the ranks of one backend run: host collectives, message matching for
// send/recv, exposed windows, and failure propagation (a rank that throws makes every blocking
// call on the others fail promptly instead of hanging).
class CudaWorld {
 public:
  CudaWorld(int ranks, double timeout_s) : ranks_(ranks), timeout_s_(timeout_s), gather_(2) {}
  int ranks() const { return ranks_; }
  void fail(int rank, const std::string& what);
  void barrier(int rank);
  std::vector<uint64_t> allgather(int rank, uint64_t call, const std::vector<uint64_t>& mine);

  struct Message {
    Buffer src;
    uint64_t off = 0, bytes = 0;
    cudaEvent_t ready = nullptr;  // recorded on the sender's stream after the data was produced
    std::shared_ptr<class DeferredEvent> sent;  // completes when the receiver's copy does
  };
  void post(int from, int to, int tag, Message m);
  Message take(int from, int to, int tag, int me);

  struct Window {
    Buffer buf;
    std::shared_ptr<std::vector<std::atomic<uint64_t>>> flags;
  };
  void expose(int window, int rank, Window w);
  Window window(int window, int rank);

 private:
  template <class Pred>
  void wait_until(std::unique_lock<std::mutex>& lk, int me, const char* what, Pred pred);
  int ranks_;
  double timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool failed_ = false;
  std::string failure_;
  uint64_t barrier_gen_ = 0;
  int barrier_waiting_ = 0;
  std::vector<std::vector<std::vector<uint64_t>>> gather_;  // [call parity][rank]
  std::map<std::tuple<int, int, int>, std::deque<Message>> mail_;
  std::map<std::pair<int, int>, Window> windows_;
};

// An event whose CUDA event is known only later (a send completes when the receiver copies).
class DeferredEvent : public EventImpl {
 public:
  ~DeferredEvent() override;
  void resolve(cudaEvent_t e);
  void wait() override;
  bool done() override;
 private:
  std::mutex mu_;
  std::condition_variable cv_;
  cudaEvent_t event_ = nullptr;
};

struct PendingOp;

class CudaRank : public Rank {
 public:
  CudaRank(int id, ClusterShape shape, int device, uint64_t device_limit, int streams, CudaWorld& world,
           std::chrono::steady_clock::time_point epoch, bool aligned_scatter = true);
  ~CudaRank() override;

  std::string backend() const override { return "cuda"; }
  int streams() const override { return int(streams_.size()); }
  int device() const { return device_; }

  Buffer alloc(MemSpace space, uint64_t bytes, const std::string& tag) override;
  uint64_t capacity(MemSpace space) const override;

  Launched launch(Stream s, Op op) override;
  Event copy(Stream s, const Buffer& dst, uint64_t dst_off, const Buffer& src, uint64_t src_off,
             uint64_t bytes) override;
  Event record(Stream s) override;
  void stream_wait(Stream s, const Event& e) override;
  void sync(Stream s) override;

  Event send(Stream s, int peer, const Buffer& src, uint64_t off, uint64_t bytes, int tag) override;
  Event recv(Stream s, int peer, const Buffer& dst, uint64_t off, uint64_t bytes, int tag) override;
  int expose(const Buffer& buf, uint32_t flags) override;
  Event put(Stream s, int peer, int window, uint64_t remote_off, const Buffer& src, uint64_t off,
            uint64_t bytes, uint32_t flag, uint64_t value) override;
  uint64_t read_flag(int window, uint32_t flag) override;

  std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) override;
  void barrier() override;

  double now() const override;
  Bandwidths bandwidths() const override;

  // Waits for all streams and turns every completed operator into a trace span.
  void finish();

 private:
  cudaStream_t stream_of(Stream s) const;
  Event track(Stream s, OpParams params, cudaEvent_t start, std::shared_ptr<PendingOp> p);
  void resolve(int stream);  // completes the pending operators of a synchronized stream
  void check_copy(const Buffer& b, uint64_t off, uint64_t bytes, const char* what) const;
  double event_time(cudaEvent_t e) const;

  int device_;
  bool aligned_scatter_;
  const DeviceInfo& info_;
  uint64_t device_limit_;
  std::shared_ptr<std::atomic<uint64_t>> device_used_;
  std::vector<cudaStream_t> streams_;
  CudaWorld& world_;
  std::chrono::steady_clock::time_point epoch_;
  cudaEvent_t ref_event_ = nullptr;
  double ref_time_ = 0;
  std::mutex pending_mu_;
  std::vector<std::deque<std::shared_ptr<PendingOp>>> pending_;  // per stream, in launch order
  uint64_t gather_calls_ = 0;
  int next_window_ = 0;
  std::map<int, CudaWorld::Window> my_windows_;
};

// Device memory blocks kept for reuse, per device; cudaMalloc'd on a miss. Freed blocks are
// returned to the cache (the GPU is synchronized first: kernels may still use them).
void* device_block_get(int device, uint64_t bytes);
void device_block_put(int device, void* p, uint64_t bytes);
uint64_t device_block_cached(int device);
uint64_t device_block_round(uint64_t bytes);
// Pinned (page-locked, mapped, portable) host blocks, cached the same way.
void* pinned_block_get(uint64_t bytes);
void pinned_block_put(void* p, uint64_t bytes);

}  // namespace joinlab::cuda
