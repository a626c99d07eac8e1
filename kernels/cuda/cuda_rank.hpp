// CudaRank: a Rank over one GPU. Streams are CUDA streams, events CUDA events; device buffers
// come from a per-device cache of cudaMalloc blocks (so repeated runs do not pay cudaMalloc),
// pinned ones from a cache of page-locked, mapped host blocks (kernels can also reach them in
// place; large ones on huge pages, cuda_memory.cu). Every operator is bracketed by two timing
// events and becomes a TraceSpan ("stream N") once it is complete; the rank's clock is seconds
// since the backend started, the same clock as the spans (a reference event recorded at a known
// host time anchors the GPU timestamps).
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
#include "kernels/cuda/cuda_fabric.hpp"
#include "kernels/cuda/host_lane.hpp"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/sm_partition.hpp"

namespace joinlab::cuda {

class CudaRank;

struct PendingOp;
struct LateFrees;  // buffers released while a rank's thread unwinds (cuda_rank.cu)

class CudaRank : public Rank {
 public:
  // Every byte to other ranks, flags and collectives go through `fabric` (cuda_fabric.hpp).
  CudaRank(int id, ClusterShape shape, int device, uint64_t device_limit, int streams,
           std::shared_ptr<CudaFabric> fabric, std::chrono::steady_clock::time_point epoch,
           KernelOptions kernel_options = {});
  ~CudaRank() override;

  std::string backend() const override { return "cuda"; }
  int streams() const override { return int(streams_.size()); }
  std::optional<Stream> sm_share_stream(int part, int parts) override;
  int device() const { return device_; }

  Buffer alloc(MemSpace space, uint64_t bytes, const std::string& tag) override;
  uint64_t capacity(MemSpace space) const override;

  // Operators whose data is in pageable host memory (cuda_ops.hpp runs_on_host), and gpj's
  // senders, run with the CPU kernels on a host lane of the stream (host_lane.hpp): in the stream's
  // order, traced like the others. The rest are kernels on the stream.
  Launched launch(Stream s, Op op) override;
  // PackChunksOp on a host lane; StreamConsumeOp as one persistent kernel (stream_consume.cu).
  Launched launch_streaming(Stream s, StreamingOp op) override;
  Event copy(Stream s, const Buffer& dst, uint64_t dst_off, const Buffer& src, uint64_t src_off,
             uint64_t bytes) override;
  Event copy_v(Stream s, const std::vector<CopyRange>& copies) override;
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
  void poll_pause() override;  // a short sleep; throws once the fabric saw the job fail
  CudaFabric& fabric() { return *fabric_; }

  double now() const override;
  Bandwidths bandwidths() const override;

  // Waits for all streams and turns every completed operator into a trace span.
  void finish();

 private:
  cudaStream_t stream_of(Stream s) const;
  Event track(Stream s, OpParams params, cudaEvent_t start, std::shared_ptr<PendingOp> p);
  Event track_transfer(Stream s, OpKind kind, uint64_t bytes, const std::string& detail, cudaEvent_t start,
                       FabricOp f);
  void resolve(int stream);  // completes the pending operators of a synchronized stream
  void reap(int stream);     // completes the pending operators at the stream's front that are done
  void retire(const std::vector<std::shared_ptr<PendingOp>>& done);  // releases completed operators
  void trace_completed();    // writes the spans of the operators resolve completed
  void check_copy(const Buffer& b, uint64_t off, uint64_t bytes, const char* what) const;
  Event traced_copy(Stream s, MemSpace from, MemSpace to, uint64_t bytes, const std::string& detail,
                    const std::function<void(cudaStream_t)>& issue);
  double event_time(cudaEvent_t e) const;
  // Runs `work` (which returns the span's parameters) on the host lane of s.
  Launched on_host(Stream s, std::function<OpParams(OpResult&, int threads)> work);
  HostLane& lane(Stream s);
  void check_lane(Stream s);  // rethrows the failure of earlier host work on s
  int host_threads() const;  // CPU threads an operator on a host lane uses

  int device_;
  KernelOptions kernel_options_;
  const DeviceInfo& info_;
  uint64_t device_limit_;
  std::shared_ptr<std::atomic<uint64_t>> device_used_;
  std::shared_ptr<LateFrees> late_frees_;
  std::vector<cudaStream_t> streams_;
  std::shared_ptr<CudaFabric> fabric_;
  std::chrono::steady_clock::time_point epoch_;
  cudaEvent_t ref_event_ = nullptr;
  double ref_time_ = 0;
  std::mutex pending_mu_;
  std::vector<std::deque<std::shared_ptr<PendingOp>>> pending_;  // per stream, in launch order
  std::vector<std::shared_ptr<PendingOp>> untraced_;  // completed, spans not yet written
  std::mutex lanes_mu_;
  std::vector<std::unique_ptr<HostLane>> lanes_;  // per stream, started on first use
  // Per share count: its streams' first id (-1: the device cannot be split so) and the shares.
  std::map<int, std::pair<int, std::unique_ptr<SmPartition>>> sm_shares_;
};

// Device memory blocks kept for reuse, per device; cudaMalloc'd on a miss. Freed blocks are
// returned to the cache (the GPU is synchronized first: kernels may still use them).
void* device_block_get(int device, uint64_t bytes);
void device_block_put(int device, void* p, uint64_t bytes);
uint64_t device_block_cached(int device);
// Gives the device's cached blocks back to the driver (a stream-ordered allocation that found
// no memory retries after it: the pool cannot grow into memory the cache holds).
void device_block_release(int device);
uint64_t device_block_round(uint64_t bytes);
// Pinned (page-locked, mapped, portable) host blocks, cached the same way.
void* pinned_block_get(uint64_t bytes);
void pinned_block_put(void* p, uint64_t bytes);
uint64_t pinned_block_cached();  // bytes of pinned blocks kept for reuse

}  // namespace joinlab::cuda
