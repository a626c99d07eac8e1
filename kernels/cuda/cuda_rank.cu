#include "kernels/cuda/cuda_rank.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <iomanip>
#include <sstream>
#include <thread>

#include "core/common/error.hpp"
#include "core/runtime/cpu_backend.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "core/runtime/cpu_ops.hpp"
#include "core/runtime/cpu_streaming.hpp"

namespace joinlab::cuda {

namespace {

std::string gib(uint64_t bytes) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << double(bytes) / double(1ull << 30) << " GiB";
  return o.str();
}

// (OnDevice: cuda_fabric.hpp)

// A device or pinned block back to its cache, once the GPU's queued kernels and copies, which may
// still use it, are done.
void give_back_block(MemSpace space, int device, void* ptr, uint64_t reserved, std::atomic<uint64_t>& used) {
  OnDevice on(device);
  cudaDeviceSynchronize();
  if (space == MemSpace::Device) {
    device_block_put(device, ptr, reserved);
    used.fetch_sub(reserved);
  } else {
    pinned_block_put(ptr, reserved);
  }
}

}  // namespace

// Blocks of buffers dropped while their thread unwound an exception. The rank is failing, and the
// other ranks learn it (the job's failure opens the gates their streams are parked on) only after
// the unwinding; waiting for the GPU there would wait for such a parked stream of another rank on
// the same GPU (share_gpus), i.e. for ever. The blocks go back at the rank's end (~CudaRank, its
// streams drained), or with the last buffer that holds this list.
struct LateFrees {
  struct Block {
    MemSpace space;
    int device;
    void* ptr;
    uint64_t reserved;
    std::shared_ptr<std::atomic<uint64_t>> used;
  };
  std::mutex mu;
  std::vector<Block> blocks;
  void add(Block b) {
    std::lock_guard<std::mutex> g(mu);
    blocks.push_back(std::move(b));
  }
  void release() {
    std::vector<Block> now;
    {
      std::lock_guard<std::mutex> g(mu);
      now.swap(blocks);
    }
    for (auto& b : now) give_back_block(b.space, b.device, b.ptr, b.reserved, *b.used);
  }
  ~LateFrees() { release(); }
};

namespace {

struct CudaBuffer : BufferImpl {
  int device = 0;
  uint64_t reserved = 0;  // bytes taken from the cache (rounded)
  std::shared_ptr<std::atomic<uint64_t>> used;
  std::shared_ptr<LateFrees> late;  // the rank's, for a release during unwinding
  ~CudaBuffer() override {
    if (!ptr) return;
    if (space == MemSpace::Host) {
      std::free(ptr);
      return;
    }
    if (late && std::uncaught_exceptions() > 0) {
      late->add({space, device, ptr, reserved, used});
      return;
    }
    give_back_block(space, device, ptr, reserved, *used);
  }
};

cudaEvent_t new_event(bool timing) {
  cudaEvent_t e;
  JL_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

// Small pinned (mapped) arrays for operator results, written by put_words after the operator.
uint64_t* result_words_get(size_t n) {
  return static_cast<uint64_t*>(pinned_block_get(std::max<size_t>(16, n) * sizeof(uint64_t)));
}
void result_words_put(uint64_t* p, size_t n) { pinned_block_put(p, std::max<size_t>(16, n) * sizeof(uint64_t)); }

class CudaEventImpl : public EventImpl {
 public:
  explicit CudaEventImpl(cudaEvent_t e) : e_(e) {}
  ~CudaEventImpl() override { cudaEventDestroy(e_); }
  void wait() override { JL_CUDA_CHECK(cudaEventSynchronize(e_)); }
  bool done() override {
    const cudaError_t q = cudaEventQuery(e_);
    if (q == cudaErrorNotReady) return false;
    JL_CUDA_CHECK(q);
    return true;
  }
  cudaEvent_t event() const { return e_; }
 private:
  cudaEvent_t e_;
};

}  // namespace

// An operator or copy in flight: its timing events, its result words, and the op itself (which
// keeps its buffers alive until it is complete).
struct PendingOp {
  OpParams params;
  int stream = 0;
  cudaEvent_t start = nullptr, end = nullptr, done = nullptr;
  Op op;
  bool has_op = false;
  OpResultPtr result;
  Buffer keep;  // a buffer of another rank the operation reads (recv)
  std::shared_ptr<void> hold;  // what a transfer of the fabric uses until it is complete
  uint64_t* words = nullptr;
  size_t nwords = 0;
  std::vector<KernelContext::Mark> marks;  // kernels inside the operator, in order
  // A streaming operator's result from its words (it throws the operator's error) and what it uses.
  std::function<void(const uint64_t*, OpResult&)> finish;
  std::shared_ptr<void> streaming;
  std::exception_ptr error;  // what finish threw: every later wait rethrows it
  std::mutex mu;
  bool completed = false;

  std::string what() const {
    return std::string(to_string(params.kind)) + " on stream " + std::to_string(stream);
  }
  void wait() {
    JL_CUDA_CHECK_CTX(cudaEventSynchronize(done), "completing " + what());
    complete();
  }
  bool query() {
    const cudaError_t q = cudaEventQuery(done);
    if (q == cudaErrorNotReady) return false;
    JL_CUDA_CHECK_CTX(q, "completing " + what());
    complete();
    return true;
  }
  // Fills the result from the words (once); the done event has been reached.
  void complete() {
    std::lock_guard<std::mutex> g(mu);
    if (completed) {
      if (error) std::rethrow_exception(error);
      return;
    }
    completed = true;
    if (finish && words) {
      try {
        finish(words, *result);
      } catch (...) {
        error = std::current_exception();
        throw;
      }
    }
    if (has_op && words) {
      try {
        finish_op(op, words, *result);
      } catch (...) {
        error = std::current_exception();
        throw;
      }
      if (params.kind == OpKind::Probe || params.kind == OpKind::PartitionedJoin || params.kind == OpKind::MergeJoin)
        params.rows_out = result->count;
    }
    // The words are read: back to the cache now, not at the stream's next sync (a pipeline that
    // never syncs, as triton's join phase, took a fresh pinned block for every histogram's 2 MiB).
    if (words) result_words_put(words, nwords);
    words = nullptr;
  }
  // Once complete: lets go of what the work used (buffers, the operator, its result words); the
  // events stay for the trace.
  void release() {
    op = Op{};
    keep.reset();
    hold.reset();
    streaming.reset();
    finish = nullptr;
    if (words) result_words_put(words, nwords);
    words = nullptr;
  }
  ~PendingOp() {
    for (auto& m : marks) cudaEventDestroy(m.event);
    if (words) result_words_put(words, nwords);
    if (start) cudaEventDestroy(start);
    if (end) cudaEventDestroy(end);
    if (done && done != end) cudaEventDestroy(done);
  }
};

namespace {
class OpEvent : public EventImpl {
 public:
  explicit OpEvent(std::shared_ptr<PendingOp> p) : p_(std::move(p)) {}
  void wait() override { p_->wait(); }
  bool done() override { return p_->query(); }
  cudaEvent_t event() const { return p_->done; }
 private:
  std::shared_ptr<PendingOp> p_;
};

cudaEvent_t cuda_event_of(const Event& e) {
  if (auto* o = dynamic_cast<OpEvent*>(e.impl().get())) return o->event();
  if (auto* c = dynamic_cast<CudaEventImpl*>(e.impl().get())) return c->event();
  if (auto* h = dynamic_cast<HostJobEvent*>(e.impl().get())) return h->event();
  return nullptr;
}
}  // namespace

// (DeferredEvent: cuda_fabric.cu)

// --- CudaRank ------------------------------------------------------------------------------------

CudaRank::CudaRank(int id, ClusterShape shape, int device, uint64_t device_limit, int streams,
                   std::shared_ptr<CudaFabric> fabric, std::chrono::steady_clock::time_point epoch, KernelOptions kernel_options)
    : Rank(id, shape),
      device_(device),
      kernel_options_(kernel_options),
      info_(device_info(device)),
      device_limit_(device_limit),
      device_used_(std::make_shared<std::atomic<uint64_t>>(0)),
      late_frees_(std::make_shared<LateFrees>()),
      fabric_(std::move(fabric)),
      epoch_(epoch) {
  JL_CUDA_CHECK(cudaSetDevice(device_));
  streams_.resize(size_t(std::max(1, streams)));
  for (auto& s : streams_) JL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  pending_.resize(streams_.size());
  // Scratch memory (cudaMallocAsync) stays with the pool across synchronizations: with the default
  // release threshold (0) every stream sync gave it back to the driver, and the next operator's
  // allocations mapped it again while the GPU waited (up to 0.1 ms before the first kernel of a
  // sort on the H100). Out of memory, the allocators trim the pool (device_block_get).
  cudaMemPool_t pool;
  JL_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device_));
  uint64_t keep_all = ~uint64_t(0);
  JL_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  // The reference event anchors GPU timestamps on the host clock.
  ref_event_ = new_event(true);
  JL_CUDA_CHECK(cudaEventRecord(ref_event_, streams_[0]));
  JL_CUDA_CHECK(cudaEventSynchronize(ref_event_));
  ref_time_ = now();
  if (host_times()) std::fprintf(stderr, "host %.3f ms: rank %d clock at 0\n", host_time_ms() - now() * 1e3, id);
}

CudaRank::~CudaRank() {
  OnDevice on(device_);
  for (auto& s : streams_) cudaStreamSynchronize(s);
  for (auto& q : pending_) q.clear();
  late_frees_->release();
  for (auto& s : streams_) cudaStreamDestroy(s);
  cudaEventDestroy(ref_event_);
}

cudaStream_t CudaRank::stream_of(Stream s) const {
  if (s.id < 0 || s.id >= int(streams_.size()))
    throw RuntimeError("rank " + std::to_string(id()) + ": stream " + std::to_string(s.id) + " does not exist (the cuda backend has " +
                       std::to_string(streams_.size()) + " streams per rank)");
  return streams_[size_t(s.id)];
}

std::optional<Stream> CudaRank::sm_share_stream(int part, int parts) {
  if (part < 0 || part >= parts) return std::nullopt;
  auto it = sm_shares_.find(parts);
  if (it == sm_shares_.end()) {
    OnDevice on(device_);
    std::unique_ptr<SmPartition> shares = SmPartition::create(device_, parts);
    int first = -1;
    if (shares) {
      std::lock_guard<std::mutex> g(pending_mu_);
      first = int(streams_.size());
      for (cudaStream_t s : shares->streams()) streams_.push_back(s);
      pending_.resize(streams_.size());
    }
    it = sm_shares_.emplace(parts, std::make_pair(first, std::move(shares))).first;
  }
  if (it->second.first < 0) return std::nullopt;
  return Stream{it->second.first + part};
}

double CudaRank::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

double CudaRank::event_time(cudaEvent_t e) const {
  float ms = 0;
  JL_CUDA_CHECK(cudaEventElapsedTime(&ms, ref_event_, e));
  return ref_time_ + double(ms) * 1e-3;
}

Buffer CudaRank::alloc(MemSpace space, uint64_t bytes, const std::string& tag) {
  OnDevice on(device_);
  auto b = std::make_shared<CudaBuffer>();
  b->space = space;
  b->owner = id();
  b->tag = tag;
  b->bytes = bytes;
  b->device = device_;
  b->used = device_used_;
  b->late = late_frees_;
  if (space == MemSpace::Device) {
    const uint64_t need = device_block_round(bytes);
    const uint64_t used = device_used_->load();
    if (used + need > device_limit_) {
      std::ostringstream m;
      m << "out of GPU memory on rank " << id() << " (GPU " << device_ << ", " << info_.name << "): buffer '" << tag
        << "' needs " << bytes << " bytes (" << gib(bytes) << "), but only " << (device_limit_ - std::min(used, device_limit_))
        << " bytes (" << gib(device_limit_ - std::min(used, device_limit_)) << ") of the rank's " << gib(device_limit_)
        << " remain. Inputs larger than GPU memory fit the strategy 'chunked' (R resident on the GPU, S streamed "
           "from pinned host memory).";
      throw RuntimeError(m.str());
    }
    b->ptr = device_block_get(device_, need);
    b->reserved = need;
    device_used_->fetch_add(need);
  } else if (space == MemSpace::Pinned) {
    b->reserved = std::max<uint64_t>(4096, (bytes + 4095) / 4096 * 4096);
    b->ptr = pinned_block_get(b->reserved);
  } else {
    b->reserved = std::max<uint64_t>(4096, (bytes + 4095) / 4096 * 4096);
    b->ptr = std::aligned_alloc(4096, b->reserved);
    if (!b->ptr) throw RuntimeError("out of host memory: buffer '" + tag + "' needs " + std::to_string(bytes) + " bytes");
  }
  return b;
}

uint64_t CudaRank::capacity(MemSpace space) const {
  if (space == MemSpace::Device) return device_limit_ - std::min(device_limit_, device_used_->load());
  return uint64_t(sysconf(_SC_AVPHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
}

Event CudaRank::track(Stream s, OpParams params, cudaEvent_t start, std::shared_ptr<PendingOp> p) {
  p->params = std::move(params);
  p->stream = s.id;
  p->start = start;
  {
    std::lock_guard<std::mutex> g(pending_mu_);
    pending_[size_t(s.id)].push_back(p);
  }
  reap(s.id);
  return Event(std::make_shared<OpEvent>(std::move(p)));
}

Launched CudaRank::launch(Stream s, Op op) {
  const double host_begin = host_time_ms();
  OnDevice on(device_);
  cudaStream_t st = stream_of(s);
  auto result = std::make_shared<OpResult>();
  OpParams params = params_of(op);
  check_lane(s);  // host work of this stream failed: what follows would build on it
  if (runs_on_host(op))
    return on_host(s, [op = std::move(op)](OpResult& r, int threads) {
      execute_cpu_op(op, threads, r);
      OpParams p = params_of(op);  // after execution: Build's table rows are final
      if (p.kind == OpKind::Probe || p.kind == OpKind::PartitionedJoin || p.kind == OpKind::MergeJoin) p.rows_out = r.count;
      return p;
    });
  auto p = std::make_shared<PendingOp>();
  p->result = result;
  cudaEvent_t start = new_event(true);
  p->start = start;  // owned by p from here on (destroyed with it on any error)
  p->end = new_event(true);
  p->done = new_event(false);
  p->nwords = kFirstValueWord + result_value_count(op);
  JL_CUDA_CHECK(cudaEventRecord(start, st));
  {
    KernelContext ctx(st, info_);
    ctx.options = kernel_options_;
    uint64_t* d_words = ctx.scratch_array<uint64_t>(p->nwords);
    zero_words(ctx, d_words, p->nwords);
    queue_op(ctx, op, d_words);
    p->marks = ctx.take_marks();
    JL_CUDA_CHECK(cudaEventRecord(p->end, st));
    p->words = result_words_get(p->nwords);
    put_words(ctx, d_words, p->words, p->nwords);
    JL_CUDA_CHECK(cudaEventRecord(p->done, st));
  }  // scratch is freed on the stream here, after the kernels that use it
  p->op = std::move(op);
  p->has_op = true;
  if (params.kind == OpKind::Build) params = params_of(p->op);  // table rows updated
  if (host_times())
    std::fprintf(stderr, "host %.3f .. %.3f ms: rank %d launched %s %s\n", host_begin, host_time_ms(), id(),
                 to_string(params.kind), params.detail.c_str());
  return {track(s, std::move(params), start, p), result};
}

void CudaRank::check_copy(const Buffer& b, uint64_t off, uint64_t bytes, const char* what) const {
  if (!b || !b->ptr) throw RuntimeError(std::string("copy: ") + what + " buffer has no memory");
  if (off + bytes > b->bytes) {
    std::ostringstream m;
    m << "copy: " << what << " bytes [" << off << ", " << off + bytes << ") exceed buffer '" << b->tag << "' of "
      << b->bytes << " bytes";
    throw RuntimeError(m.str());
  }
}

// A copy's (or a batch's) events and trace: `issue` queues it on the stream between its start and
// end events; one span of `bytes` from one memory space to another.
Event CudaRank::traced_copy(Stream s, MemSpace from, MemSpace to, uint64_t bytes, const std::string& detail,
                            const std::function<void(cudaStream_t)>& issue) {
  OnDevice on(device_);
  cudaStream_t st = stream_of(s);
  auto p = std::make_shared<PendingOp>();
  cudaEvent_t start = new_event(true);
  p->start = start;
  p->end = p->done = new_event(true);
  JL_CUDA_CHECK(cudaEventRecord(start, st));
  issue(st);
  JL_CUDA_CHECK(cudaEventRecord(p->end, st));
  OpParams params;
  params.kind = OpKind::Copy;
  params.bytes = bytes;
  params.mem_src = int(from);
  params.mem_dst = int(to);
  params.detail = std::string(to_string(from)) + "->" + to_string(to) + detail;
  return track(s, std::move(params), start, p);
}

Event CudaRank::copy(Stream s, const Buffer& dst, uint64_t dst_off, const Buffer& src, uint64_t src_off, uint64_t bytes) {
  check_copy(dst, dst_off, bytes, "destination");
  check_copy(src, src_off, bytes, "source");
  return traced_copy(s, src->space, dst->space, bytes, "", [&](cudaStream_t st) {
    JL_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst->ptr) + dst_off, static_cast<const char*>(src->ptr) + src_off,
                                  bytes, cudaMemcpyDefault, st));
  });
}

Event CudaRank::copy_v(Stream s, const std::vector<CopyRange>& copies) {
  if (copies.empty()) return record(s);
  for (const CopyRange& c : copies) {
    check_copy(c.dst, c.dst_off, c.bytes, "destination");
    check_copy(c.src, c.src_off, c.bytes, "source");
  }
  // One batch between one pair of events; its trace names one direction, so copies between
  // different memory spaces go one by one.
  const MemSpace from = copies.front().src->space, to = copies.front().dst->space;
  for (const CopyRange& c : copies)
    if (c.src->space != from || c.dst->space != to) return Rank::copy_v(s, copies);
  std::vector<void*> dsts;
  std::vector<const void*> srcs;
  std::vector<size_t> sizes;
  uint64_t bytes = 0;
  for (const CopyRange& c : copies) {
    if (!c.bytes) continue;
    dsts.push_back(static_cast<char*>(c.dst->ptr) + c.dst_off);
    srcs.push_back(static_cast<const char*>(c.src->ptr) + c.src_off);
    sizes.push_back(c.bytes);
    bytes += c.bytes;
  }
  bool own_device = from == MemSpace::Device && to == MemSpace::Device;
  for (const CopyRange& c : copies) own_device = own_device && c.src->owner == id() && c.dst->owner == id();
  if (own_device) {  // a gather in this GPU's memory: one kernel
    std::vector<CopySpan> spans;
    for (size_t i = 0; i < sizes.size(); ++i) spans.push_back({static_cast<char*>(dsts[i]), static_cast<const char*>(srcs[i]), sizes[i]});
    return traced_copy(s, from, to, bytes, ", " + std::to_string(spans.size()) + " copies in a kernel", [&](cudaStream_t st) {
      KernelContext ctx(st, info_);
      copy_spans(ctx, spans);
    });
  }
  return traced_copy(s, from, to, bytes, ", " + std::to_string(sizes.size()) + " copies in a batch", [&](cudaStream_t st) {
    if (sizes.empty()) return;
    cudaMemcpyAttributes attr{};
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;  // the sources were written by earlier work on s
    size_t attr_index = 0;
    JL_CUDA_CHECK(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &attr, &attr_index, 1, st));
  });
}

Event CudaRank::record(Stream s) {
  OnDevice on(device_);
  cudaEvent_t e = new_event(false);
  auto impl = std::make_shared<CudaEventImpl>(e);
  JL_CUDA_CHECK(cudaEventRecord(e, stream_of(s)));
  return Event(impl);
}

void CudaRank::stream_wait(Stream s, const Event& e) {
  if (!e.impl()) return;
  OnDevice on(device_);
  cudaStream_t st = stream_of(s);
  if (auto* d = dynamic_cast<DeferredEvent*>(e.impl().get())) {
    d->wait();  // the matching receive has been queued (host-side) and completed
    return;
  }
  if (cudaEvent_t ce = cuda_event_of(e)) {
    JL_CUDA_CHECK(cudaStreamWaitEvent(st, ce, 0));
    return;
  }
  e.wait();
}

// What the stream has done lets go of what it held (its pinned result words above all) before the
// stream's next sync: a pipeline that queues for long without one, as triton's join phase, took a
// fresh pinned block (a cudaHostAlloc) for every operator whose words nobody read. An operator
// whose result throws stays at the front, for the sync to report.
void CudaRank::reap(int stream) {
  std::vector<std::shared_ptr<PendingOp>> done;
  {
    std::lock_guard<std::mutex> g(pending_mu_);
    std::deque<std::shared_ptr<PendingOp>>& q = pending_[size_t(stream)];
    while (!q.empty() && cudaEventQuery(q.front()->done) == cudaSuccess) {
      try {
        q.front()->complete();
      } catch (...) {
        break;
      }
      done.push_back(std::move(q.front()));
      q.pop_front();
    }
  }
  retire(done);
}

void CudaRank::resolve(int stream) {
  std::deque<std::shared_ptr<PendingOp>> done;
  {
    std::lock_guard<std::mutex> g(pending_mu_);
    done.swap(pending_[size_t(stream)]);
  }
  for (auto& p : done) p->complete();
  retire({done.begin(), done.end()});
}

// Completed operators let go of what they used; their spans are written later (trace_completed):
// reading two events per operator and one per kernel, and destroying them, took ~25 us at each
// phase boundary of phj, time the next phase's kernels waited for.
void CudaRank::retire(const std::vector<std::shared_ptr<PendingOp>>& done) {
  if (done.empty()) return;
  for (auto& p : done) p->release();
  bool many;
  {
    std::lock_guard<std::mutex> g(pending_mu_);
    untraced_.insert(untraced_.end(), done.begin(), done.end());
    many = untraced_.size() > 4096;  // bounds the events held in a long run
  }
  if (many) trace_completed();
}

void CudaRank::trace_completed() {
  std::vector<std::shared_ptr<PendingOp>> ops;
  {
    std::lock_guard<std::mutex> g(pending_mu_);
    ops.swap(untraced_);
  }
  for (auto& p : ops) {
    const std::string track = "stream " + std::to_string(p->stream);
    trace_.add({id(), track, p->params, event_time(p->start), event_time(p->end)});
    // The operator's kernels on a track of their own: kernel name in `detail`, the operator's
    // parameters otherwise, each from the previous kernel's end (the operator's start).
    double from = event_time(p->start);
    for (auto& m : p->marks) {
      OpParams k = p->params;
      k.detail = m.kernel;
      const double to = event_time(m.event);
      trace_.add({id(), track + " kernels", std::move(k), from, to});
      from = to;
    }
  }
}

void CudaRank::sync(Stream s) {
  const double host_begin = host_time_ms();
  OnDevice on(device_);
  JL_CUDA_CHECK_CTX(cudaStreamSynchronize(stream_of(s)), "synchronizing stream " + std::to_string(s.id) + " of rank " +
                                                            std::to_string(id()));
  const double synced = host_time_ms();
  resolve(s.id);
  check_lane(s);
  if (host_times())
    std::fprintf(stderr, "host %.3f .. %.3f (stream done) .. %.3f ms: rank %d synced stream %d\n", host_begin, synced,
                 host_time_ms(), id(), s.id);
}

// --- host lanes and streaming operators ------------------------------------------------------------

HostLane& CudaRank::lane(Stream s) {
  cudaStream_t st = stream_of(s);
  std::lock_guard<std::mutex> g(lanes_mu_);
  if (lanes_.size() < streams_.size()) lanes_.resize(streams_.size());
  auto& l = lanes_[size_t(s.id)];
  if (!l) l = std::make_unique<HostLane>(st);
  return *l;
}

void CudaRank::check_lane(Stream s) {
  std::lock_guard<std::mutex> g(lanes_mu_);
  if (s.id >= 0 && size_t(s.id) < lanes_.size() && lanes_[size_t(s.id)]) lanes_[size_t(s.id)]->check();
}

int CudaRank::host_threads() const {
  // The node's cores, shared by the ranks placed on it.
  return std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, shape().per_node));
}

Launched CudaRank::on_host(Stream s, std::function<OpParams(OpResult&, int)> work) {
  OnDevice on(device_);
  auto result = std::make_shared<OpResult>();
  const int threads = host_threads();
  Event done = lane(s).submit([this, work = std::move(work), result, threads, sid = s.id] {
    const double t0 = now();
    OpParams params = work(*result, threads);
    params.detail += params.detail.empty() ? "host CPUs" : ", host CPUs";
    trace_.add({id(), "stream " + std::to_string(sid), std::move(params), t0, now()});
  });
  return {done, result};
}

Launched CudaRank::launch_streaming(Stream s, StreamingOp op) {
  OnDevice on(device_);
  cudaStream_t st = stream_of(s);
  check_lane(s);
  if (runs_on_host(op))  // the senders' packing; a consumer of rings in host memory
    return on_host(s, [op = std::move(op)](OpResult& r, int threads) {
      execute_cpu_streaming_op(op, threads, r);
      return params_of(op);
    });
  auto result = std::make_shared<OpResult>();
  auto consume = std::make_shared<StreamConsumeOp>(std::get<StreamConsumeOp>(std::move(op)));
  auto p = std::make_shared<PendingOp>();
  p->result = result;
  cudaEvent_t start = new_event(true);
  p->start = start;
  p->end = new_event(true);
  p->done = new_event(false);
  JL_CUDA_CHECK(cudaEventRecord(start, st));
  {
    KernelContext ctx(st, info_);
    ConsumeLaunch l = queue_stream_consume(ctx, *consume);
    p->marks = ctx.take_marks();
    JL_CUDA_CHECK(cudaEventRecord(p->end, st));
    p->nwords = l.nwords;
    p->words = result_words_get(p->nwords);
    put_words(ctx, l.d_words, p->words, p->nwords);
    JL_CUDA_CHECK(cudaEventRecord(p->done, st));
    // The operator (its buffers, its StreamProgress) and the registration of the progress words
    // live until the kernel is complete.
    p->streaming = std::make_shared<std::pair<std::shared_ptr<StreamConsumeOp>, std::shared_ptr<void>>>(consume, l.keep);
  }
  p->finish = [consume](const uint64_t* words, OpResult& r) { finish_stream_consume(*consume, words, r); };
  return {track(s, params_of(StreamingOp(*consume)), start, p), result};
}

void CudaRank::finish() {
  for (int i = 0; i < streams(); ++i) sync(Stream{i});
  trace_completed();
}

// --- messages, windows, collectives -------------------------------------------------------------

// The fabric queues the transfer on the stream; the rank times it like a copy (or, when the
// fabric queued nothing - a peer send waiting for its receiver - returns the fabric's event).
Event CudaRank::track_transfer(Stream s, OpKind kind, uint64_t bytes, const std::string& detail, cudaEvent_t start,
                               FabricOp f) {
  if (f.deferred) {
    cudaEventDestroy(start);
    return Event(std::move(f.deferred));
  }
  auto p = std::make_shared<PendingOp>();
  p->start = start;
  p->end = p->done = new_event(true);
  p->hold = std::move(f.hold);  // staging, gates, the peer's buffer: alive until complete
  JL_CUDA_CHECK(cudaEventRecord(p->end, stream_of(s)));
  OpParams params;
  params.kind = kind;
  params.bytes = bytes;
  params.mem_src = f.mem_src;
  params.mem_dst = f.mem_dst;
  params.detail = detail;
  return track(s, std::move(params), start, p);
}

Event CudaRank::send(Stream s, int peer, const Buffer& src, uint64_t off, uint64_t bytes, int tag) {
  OnDevice on(device_);
  cudaStream_t st = stream_of(s);
  check_copy(src, off, bytes, "send source");
  if (peer < 0 || peer >= size()) throw RuntimeError("send: peer " + std::to_string(peer) + " is not a rank");
  cudaEvent_t start = new_event(true);
  JL_CUDA_CHECK(cudaEventRecord(start, st));
  return track_transfer(s, OpKind::Send, bytes, "to rank " + std::to_string(peer), start,
                        fabric_->send(st, peer, src, off, bytes, tag));
}

Event CudaRank::recv(Stream s, int peer, const Buffer& dst, uint64_t off, uint64_t bytes, int tag) {
  OnDevice on(device_);
  cudaStream_t st = stream_of(s);
  check_copy(dst, off, bytes, "receive destination");
  if (peer < 0 || peer >= size()) throw RuntimeError("recv: peer " + std::to_string(peer) + " is not a rank");
  cudaEvent_t start = new_event(true);
  JL_CUDA_CHECK(cudaEventRecord(start, st));
  return track_transfer(s, OpKind::Recv, bytes, "from rank " + std::to_string(peer), start,
                        fabric_->recv(st, peer, dst, off, bytes, tag));
}

int CudaRank::expose(const Buffer& buf, uint32_t flags) {
  OnDevice on(device_);
  if (!buf || !buf->ptr) throw RuntimeError("expose: the window buffer has no memory");
  return fabric_->expose(buf, flags);
}

Event CudaRank::put(Stream s, int peer, int window, uint64_t remote_off, const Buffer& src, uint64_t off, uint64_t bytes,
                    uint32_t flag, uint64_t value) {
  OnDevice on(device_);
  cudaStream_t st = stream_of(s);
  if (bytes) check_copy(src, off, bytes, "put source");  // a flag-only put has no source
  if (peer < 0 || peer >= size()) throw RuntimeError("put: peer " + std::to_string(peer) + " is not a rank");
  cudaEvent_t start = new_event(true);
  JL_CUDA_CHECK(cudaEventRecord(start, st));
  return track_transfer(s, OpKind::Put, bytes, "to rank " + std::to_string(peer), start,
                        fabric_->put(st, peer, window, remote_off, src, off, bytes, flag, value));
}

uint64_t CudaRank::read_flag(int window, uint32_t flag) { return fabric_->read_flag(window, flag); }

std::vector<uint64_t> CudaRank::allgather(const std::vector<uint64_t>& mine) { return fabric_->allgather(mine); }

void CudaRank::barrier() { fabric_->barrier(); }

void CudaRank::poll_pause() {
  fabric_->check_alive();
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

// --- bandwidths ------------------------------------------------------------------------------------

Bandwidths CudaRank::bandwidths() const {
  static std::mutex mu;
  static std::map<int, Bandwidths> measured;
  std::lock_guard<std::mutex> g(mu);
  auto it = measured.find(device_);
  if (it != measured.end()) return it->second;
  OnDevice on(device_);
  Bandwidths bw;
  const uint64_t bytes = 512ull << 20;
  void *a = nullptr, *b = nullptr, *h = nullptr;
  JL_CUDA_CHECK(cudaMalloc(&a, bytes));
  JL_CUDA_CHECK(cudaMalloc(&b, bytes));
  h = pinned_block_get(bytes);  // pinned as the runs' buffers are: the link's rate depends on the pages
  std::memset(h, 1, bytes);
  cudaStream_t st = streams_[0];
  cudaEvent_t e0 = new_event(true), e1 = new_event(true);
  auto best = [&](auto&& body) {
    float best_ms = 1e30f;
    for (int i = 0; i < 4; ++i) {  // the first is a warm-up that usually loses
      JL_CUDA_CHECK(cudaEventRecord(e0, st));
      body();
      JL_CUDA_CHECK(cudaEventRecord(e1, st));
      JL_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      JL_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      best_ms = std::min(best_ms, ms);
    }
    return double(best_ms) * 1e-3;
  };
  bw.mem = 2.0 * double(bytes) / best([&] { JL_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st)); });
  bw.h2d = double(bytes) / best([&] { JL_CUDA_CHECK(cudaMemcpyAsync(a, h, bytes, cudaMemcpyHostToDevice, st)); });
  int devices = 0;
  JL_CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (devices > 1) {
    const int peer = (device_ + 1) % devices;
    void* c = nullptr;
    {
      OnDevice on_peer(peer);
      JL_CUDA_CHECK(cudaMalloc(&c, bytes));
    }
    bw.p2p = double(bytes) / best([&] { JL_CUDA_CHECK(cudaMemcpyPeerAsync(c, peer, a, device_, bytes, st)); });
    OnDevice on_peer(peer);
    cudaFree(c);
  }
  bw.host_mem = host_copy_bandwidth();  // every core, as the CPU kernels run
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  pinned_block_put(h, bytes);
  char date[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::localtime(&t));
  bw.source = "measured " + std::string(date) + " on GPU " + std::to_string(device_) + " (" + info_.name +
              "): device copy, pinned H2D, host memcpy" + (devices > 1 ? ", P2P copy" : "");
  measured[device_] = bw;
  return bw;
}

}  // namespace joinlab::cuda
