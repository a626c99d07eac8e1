// CpuRank: a Rank over host memory. Streams are in-order queues, each drained by its own worker
// thread; an operator runs its kernels/cpu kernel on the worker with an OpenMP team of
// `threads` threads. Every byte that crosses ranks goes through a Transport, so the same rank
// runs over the in-process transport (ranks as threads) or a process transport (MPI/UCX).
//
// Memory spaces are all host memory here. Device and Pinned allocations are touched at
// allocation (like device memory, which is backed when allocated), Host ones are not.
#pragma once
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/exec/rank.hpp"
#include "core/runtime/transport.hpp"

namespace joinlab {

// A budget of bytes that allocations draw from (one per memory space, or shared by several).
class MemoryPool {
 public:
  MemoryPool(std::string name, uint64_t limit) : name_(std::move(name)), limit_(limit) {}
  // Throws RuntimeError naming the tag, the bytes asked and the bytes left.
  void reserve(uint64_t bytes, const std::string& tag, int rank);
  void release(uint64_t bytes);
  uint64_t left() const;
  uint64_t limit() const { return limit_; }

 private:
  std::string name_;
  uint64_t limit_;
  mutable std::mutex mu_;
  uint64_t used_ = 0;
};

struct CpuRankConfig {
  int threads = 1;  // OpenMP threads per operator
  int streams = 5;
  std::shared_ptr<MemoryPool> device, host;  // host serves Pinned and Host
  std::chrono::steady_clock::time_point epoch = std::chrono::steady_clock::now();  // now() = 0
  Bandwidths bandwidths;
};

class StreamWorker;

class CpuRank final : public Rank {
 public:
  CpuRank(int id, ClusterShape shape, std::shared_ptr<Transport> transport, CpuRankConfig cfg);
  ~CpuRank() override;  // stops the stream workers; queued work that has not started fails

  std::string backend() const override { return "cpu"; }
  int streams() const override { return int(workers_.size()); }
  int threads() const { return cfg_.threads; }
  Transport& transport() { return *transport_; }

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
  // gpj's streaming operators (core/runtime/cpu_streaming.hpp): the consumer is the stream's worker
  // thread polling the ring buffers in host memory.
  Launched launch_streaming(Stream s, StreamingOp op) override;
  void poll_pause() override;  // a short sleep; throws once the transport saw the job fail

  std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) override;
  void barrier() override;

  double now() const override;
  Bandwidths bandwidths() const override { return cfg_.bandwidths; }

 private:
  StreamWorker& worker(Stream s, const char* what);
  MemoryPool& pool(MemSpace space) const;
  void check_range(const char* what, const Buffer& b, uint64_t off, uint64_t bytes) const;
  // Queues a transfer on s and records its span (kind, bytes, detail) when it ran.
  Event transfer(Stream s, OpParams params, std::function<void()> fn);

  CpuRankConfig cfg_;
  std::shared_ptr<Transport> transport_;
  std::vector<std::unique_ptr<StreamWorker>> workers_;
  std::mutex exposed_mu_;
  std::vector<Buffer> exposed_;  // windows stay alive as long as the rank
};

}  // namespace joinlab
