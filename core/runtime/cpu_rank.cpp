#include "core/runtime/cpu_rank.hpp"

#include <condition_variable>
#include <deque>
#include <functional>
#include <iomanip>
#include <sstream>
#include <thread>

#include "core/common/error.hpp"
#include "core/runtime/cpu_ops.hpp"
#include "core/runtime/cpu_streaming.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/host_memory.hpp"

namespace joinlab {

namespace {

// Exact bytes, and a readable size next to it: "536870912 bytes (512 MiB)".
std::string bytes_str(uint64_t b) {
  std::ostringstream o;
  o << b << " bytes";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = -1;
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  if (u >= 0) o << " (" << std::setprecision(3) << v << " " << units[u] << ")";
  return o.str();
}

// Host memory owned by one rank, returned to its pool when the last reference goes.
struct CpuBuffer final : BufferImpl {
  std::shared_ptr<MemoryPool> pool;
  uint64_t reserved = 0;
  ~CpuBuffer() override {
    cpu::host_free(ptr);
    pool->release(reserved);
  }
};

// Completion of one queued item. Waiting fails promptly once any rank aborted the job.
class CpuEvent final : public EventImpl {
 public:
  explicit CpuEvent(std::shared_ptr<Transport> transport) : transport_(std::move(transport)) {}
  void wait() override {
    std::unique_lock<std::mutex> lk(mu_);
    while (!cv_.wait_for(lk, std::chrono::milliseconds(20), [&] { return done_; })) {
      lk.unlock();
      transport_->check_alive();
      lk.lock();
    }
    if (error_) std::rethrow_exception(error_);
  }
  bool done() override {
    std::lock_guard<std::mutex> g(mu_);
    return done_;
  }
  void complete(std::exception_ptr error = nullptr) {
    {
      std::lock_guard<std::mutex> g(mu_);
      done_ = true;
      error_ = error;
    }
    cv_.notify_all();
  }

 private:
  std::shared_ptr<Transport> transport_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace

// --- memory pools ----------------------------------------------------------------------------

void MemoryPool::reserve(uint64_t bytes, const std::string& tag, int rank) {
  std::lock_guard<std::mutex> g(mu_);
  if (bytes > limit_ - used_)
    throw RuntimeError("rank " + std::to_string(rank) + ": out of " + name_ + " memory allocating '" + tag +
                       "': " + bytes_str(bytes) + " asked, " + bytes_str(limit_ - used_) + " left of " +
                       bytes_str(limit_));
  used_ += bytes;
}
void MemoryPool::release(uint64_t bytes) {
  std::lock_guard<std::mutex> g(mu_);
  used_ -= std::min(bytes, used_);
}
uint64_t MemoryPool::left() const {
  std::lock_guard<std::mutex> g(mu_);
  return limit_ - used_;
}

// --- streams ---------------------------------------------------------------------------------

// One stream: an in-order queue drained by a worker thread. After an item failed, every later
// item of the stream fails with the same error (what CUDA does after a sticky error), so a
// strategy that waits on any later event learns of it.
class StreamWorker {
 public:
  StreamWorker(int id, std::shared_ptr<Transport> transport)
      : id_(id), transport_(std::move(transport)), thread_([this] { loop(); }) {}
  ~StreamWorker() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  int id() const { return id_; }

  Event enqueue(std::function<void()> fn) {
    auto ev = std::make_shared<CpuEvent>(transport_);
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stop_) throw RuntimeError("stream " + std::to_string(id_) + " is shut down");
      queue_.push_back({std::move(fn), ev});
    }
    cv_.notify_one();
    return Event(ev);
  }

 private:
  struct Item {
    std::function<void()> fn;
    std::shared_ptr<CpuEvent> done;
  };

  void loop() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
        if (stop_ && !failed_)
          failed_ = std::make_exception_ptr(RuntimeError("stream " + std::to_string(id_) +
                                                         " shut down before this work ran"));
      }
      if (failed_) {
        item.done->complete(failed_);
        continue;
      }
      try {
        item.fn();
        item.done->complete();
      } catch (...) {
        failed_ = std::current_exception();
        item.done->complete(failed_);
      }
    }
  }

  const int id_;
  std::shared_ptr<Transport> transport_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::exception_ptr failed_;  // only touched by the worker thread
  std::thread thread_;         // last: starts after everything above is constructed
};

// --- CpuRank ---------------------------------------------------------------------------------

CpuRank::CpuRank(int id, ClusterShape shape, std::shared_ptr<Transport> transport, CpuRankConfig cfg)
    : Rank(id, shape), cfg_(std::move(cfg)), transport_(std::move(transport)) {
  if (cfg_.threads < 1) cfg_.threads = 1;
  if (cfg_.streams < 1) cfg_.streams = 1;
  if (!cfg_.host) cfg_.host = std::make_shared<MemoryPool>("host", ~0ULL);
  if (!cfg_.device) cfg_.device = cfg_.host;
  for (int s = 0; s < cfg_.streams; ++s) workers_.push_back(std::make_unique<StreamWorker>(s, transport_));
}

CpuRank::~CpuRank() { workers_.clear(); }

StreamWorker& CpuRank::worker(Stream s, const char* what) {
  if (s.id < 0 || s.id >= int(workers_.size()))
    throw RuntimeError("rank " + std::to_string(id()) + ": " + what + " on stream " + std::to_string(s.id) +
                       ", but streams are 0.." + std::to_string(workers_.size() - 1));
  return *workers_[size_t(s.id)];
}

MemoryPool& CpuRank::pool(MemSpace space) const {
  return space == MemSpace::Device ? *cfg_.device : *cfg_.host;
}

Buffer CpuRank::alloc(MemSpace space, uint64_t bytes, const std::string& tag) {
  MemoryPool& p = pool(space);
  p.reserve(bytes, tag, id());
  auto b = std::make_shared<CpuBuffer>();
  b->pool = space == MemSpace::Device ? cfg_.device : cfg_.host;
  b->reserved = bytes;
  try {
    b->ptr = space == MemSpace::Host ? cpu::host_alloc(bytes) : cpu::host_alloc_resident(bytes, cfg_.threads);
  } catch (const std::bad_alloc&) {
    b->ptr = nullptr;
    throw RuntimeError("rank " + std::to_string(id()) + ": the system refused " + bytes_str(bytes) + " for '" +
                       tag + "' (" + bytes_str(p.left()) + " left of this rank's " + to_string(space) +
                       " budget)");
  }
  b->bytes = bytes;
  b->space = space;
  b->owner = id();
  b->tag = tag;
  return b;
}

uint64_t CpuRank::capacity(MemSpace space) const { return pool(space).left(); }

Launched CpuRank::launch(Stream s, Op op) {
  check_op_pointers(op);
  StreamWorker& w = worker(s, "launch");
  auto result = std::make_shared<OpResult>();
  Event done = w.enqueue([this, op = std::move(op), result, sid = s.id] {
    const double begin = now();
    execute_cpu_op(op, cfg_.threads, *result);
    TraceSpan span;
    span.rank = id();
    span.track = "stream " + std::to_string(sid);
    span.params = params_of(op);  // after execution: Build's table rows are final
    if (std::holds_alternative<ProbeOp>(op) || std::holds_alternative<PartitionedJoinOp>(op) ||
        std::holds_alternative<MergeJoinOp>(op))
      span.params.rows_out = result->count;
    span.begin = begin;
    span.end = now();
    trace_.add(std::move(span));
  });
  return {done, result};
}

void CpuRank::check_range(const char* what, const Buffer& b, uint64_t off, uint64_t bytes) const {
  if (!bytes) return;
  if (!b || !b->ptr)
    throw RuntimeError("rank " + std::to_string(id()) + ": " + what + " of " + std::to_string(bytes) +
                       " bytes with no buffer");
  if (off + bytes > b->bytes || off + bytes < off)
    throw RuntimeError("rank " + std::to_string(id()) + ": " + what + " bytes [" + std::to_string(off) + ", " +
                       std::to_string(off + bytes) + ") outside buffer '" + b->tag + "' of " +
                       std::to_string(b->bytes) + " bytes");
}

Event CpuRank::transfer(Stream s, OpParams params, std::function<void()> fn) {
  StreamWorker& w = worker(s, to_string(params.kind));
  return w.enqueue([this, params = std::move(params), fn = std::move(fn), sid = s.id] {
    const double begin = now();
    fn();
    trace_.add({id(), "stream " + std::to_string(sid), params, begin, now()});
  });
}

Event CpuRank::copy(Stream s, const Buffer& dst, uint64_t dst_off, const Buffer& src, uint64_t src_off,
                    uint64_t bytes) {
  check_range("copy destination", dst, dst_off, bytes);
  check_range("copy source", src, src_off, bytes);
  OpParams p;
  p.kind = OpKind::Copy;
  p.bytes = bytes;
  p.mem_src = src ? int(src->space) : -1;
  p.mem_dst = dst ? int(dst->space) : -1;
  const int threads = cfg_.threads;
  return transfer(s, p, [dst, dst_off, src, src_off, bytes, threads] {
    if (bytes)
      cpu::parallel_copy(static_cast<char*>(dst->ptr) + dst_off, static_cast<const char*>(src->ptr) + src_off,
                         bytes, threads);
  });
}

Event CpuRank::record(Stream s) { return worker(s, "record").enqueue([] {}); }

void CpuRank::stream_wait(Stream s, const Event& e) {
  worker(s, "stream_wait").enqueue([e] { e.wait(); });
}

void CpuRank::sync(Stream s) { record(s).wait(); }

Event CpuRank::send(Stream s, int peer, const Buffer& src, uint64_t off, uint64_t bytes, int tag) {
  check_range("send", src, off, bytes);
  OpParams p;
  p.kind = OpKind::Send;
  p.bytes = bytes;
  p.detail = "to rank " + std::to_string(peer) + " tag " + std::to_string(tag);
  return transfer(s, p, [this, peer, src, off, bytes, tag] {
    transport_->send(peer, tag, bytes ? static_cast<const char*>(src->ptr) + off : nullptr, bytes);
  });
}

Event CpuRank::recv(Stream s, int peer, const Buffer& dst, uint64_t off, uint64_t bytes, int tag) {
  check_range("recv", dst, off, bytes);
  OpParams p;
  p.kind = OpKind::Recv;
  p.bytes = bytes;
  p.detail = "from rank " + std::to_string(peer) + " tag " + std::to_string(tag);
  return transfer(s, p, [this, peer, dst, off, bytes, tag] {
    transport_->recv(peer, tag, bytes ? static_cast<char*>(dst->ptr) + off : nullptr, bytes);
  });
}

int CpuRank::expose(const Buffer& buf, uint32_t flags) {
  {
    std::lock_guard<std::mutex> g(exposed_mu_);
    exposed_.push_back(buf);
  }
  return transport_->expose(buf ? buf->ptr : nullptr, buf ? buf->bytes : 0, flags);
}

Event CpuRank::put(Stream s, int peer, int window, uint64_t remote_off, const Buffer& src, uint64_t off,
                   uint64_t bytes, uint32_t flag, uint64_t value) {
  check_range("put", src, off, bytes);
  OpParams p;
  p.kind = OpKind::Put;
  p.bytes = bytes;
  p.detail = "to rank " + std::to_string(peer) + " window " + std::to_string(window) + " flag " +
             std::to_string(flag);
  return transfer(s, p, [this, peer, window, remote_off, src, off, bytes, flag, value] {
    transport_->put(peer, window, remote_off, bytes ? static_cast<const char*>(src->ptr) + off : nullptr,
                    bytes, flag, value);
  });
}

uint64_t CpuRank::read_flag(int window, uint32_t flag) { return transport_->read_flag(window, flag); }

Launched CpuRank::launch_streaming(Stream s, StreamingOp op) {
  auto result = std::make_shared<OpResult>();
  OpParams params = params_of(op);
  Event done = transfer(s, std::move(params), [this, op = std::move(op), result] {
    execute_cpu_streaming_op(op, cfg_.threads, *result);
  });
  return {done, result};
}

void CpuRank::poll_pause() {
  transport_->check_alive();
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

std::vector<uint64_t> CpuRank::allgather(const std::vector<uint64_t>& mine) { return transport_->allgather(mine); }

void CpuRank::barrier() { transport_->barrier(); }

double CpuRank::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - cfg_.epoch).count();
}

}  // namespace joinlab
