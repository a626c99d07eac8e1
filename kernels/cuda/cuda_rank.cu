#include "kernels/cuda/cuda_rank.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <sstream>

#include "core/common/error.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_ops.hpp"

namespace joinlab::cuda {

namespace {

std::string gib(uint64_t bytes) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2) << double(bytes) / double(1ull << 30) << " GiB";
  return o.str();
}

// Keeps the calling thread's current device around a call that must run on another.
struct OnDevice {
  int previous = 0;
  explicit OnDevice(int device) {
    cudaGetDevice(&previous);
    if (previous != device) cudaSetDevice(device);
  }
  ~OnDevice() { cudaSetDevice(previous); }
};

struct CudaBuffer : BufferImpl {
  int device = 0;
  uint64_t reserved = 0;  // bytes taken from the cache (rounded)
  std::shared_ptr<std::atomic<uint64_t>> used;
  ~CudaBuffer() override {
    if (!ptr) return;
    if (space == MemSpace::Host) {
      std::free(ptr);
      return;
    }
    OnDevice on(device);
    cudaDeviceSynchronize();  // queued kernels or copies may still use the memory
    if (space == MemSpace::Device) {
      device_block_put(device, ptr, reserved);
      used->fetch_sub(reserved);
    } else {
      pinned_block_put(ptr, reserved);
    }
  }
};

cudaEvent_t new_event(bool timing) {
  cudaEvent_t e;
  JL_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

// Small pinned arrays for operator results (words copied back from the device).
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
  uint64_t* words = nullptr;
  size_t nwords = 0;
  std::vector<KernelContext::Mark> marks;  // kernels inside the operator, in order
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
    if (completed) return;
    completed = true;
    if (has_op && words) {
      finish_op(op, words, *result);
      if (params.kind == OpKind::Probe || params.kind == OpKind::PartitionedJoin || params.kind == OpKind::MergeJoin)
        params.rows_out = result->count;
    }
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
  return nullptr;
}
}  // namespace

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
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return event_ != nullptr; });
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

// --- CudaRank ------------------------------------------------------------------------------------

CudaRank::CudaRank(int id, ClusterShape shape, int device, uint64_t device_limit, int streams, CudaWorld& world,
                   std::chrono::steady_clock::time_point epoch, bool aligned_scatter)
    : Rank(id, shape),
      device_(device),
      aligned_scatter_(aligned_scatter),
      info_(device_info(device)),
      device_limit_(device_limit),
      device_used_(std::make_shared<std::atomic<uint64_t>>(0)),
      world_(world),
      epoch_(epoch) {
  JL_CUDA_CHECK(cudaSetDevice(device_));
  streams_.resize(size_t(std::max(1, streams)));
  for (auto& s : streams_) JL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  pending_.resize(streams_.size());
  // The reference event anchors GPU timestamps on the host clock.
  ref_event_ = new_event(true);
  JL_CUDA_CHECK(cudaEventRecord(ref_event_, streams_[0]));
  JL_CUDA_CHECK(cudaEventSynchronize(ref_event_));
  ref_time_ = now();
}

CudaRank::~CudaRank() {
  OnDevice on(device_);
  for (auto& s : streams_) cudaStreamSynchronize(s);
  for (auto& q : pending_) q.clear();
  for (auto& s : streams_) cudaStreamDestroy(s);
  cudaEventDestroy(ref_event_);
}

cudaStream_t CudaRank::stream_of(Stream s) const {
  if (s.id < 0 || s.id >= int(streams_.size()))
    throw RuntimeError("rank " + std::to_string(id()) + ": stream " + std::to_string(s.id) + " does not exist (the cuda backend has " +
                       std::to_string(streams_.size()) + " streams per rank)");
  return streams_[size_t(s.id)];
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
  return Event(std::make_shared<OpEvent>(std::move(p)));
}

Launched CudaRank::launch(Stream s, Op op) {
  OnDevice on(device_);
  cudaStream_t st = stream_of(s);
  auto result = std::make_shared<OpResult>();
  OpParams params = params_of(op);
  if (runs_on_host(op)) {  // generation into pageable memory: after the stream's earlier work
    JL_CUDA_CHECK(cudaStreamSynchronize(st));
    resolve(s.id);
    const double t0 = now();
    run_on_host(op);
    trace_.add({id(), "host", params, t0, now()});
    return {Event(), result};
  }
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
    ctx.aligned_scatter = aligned_scatter_;
    uint64_t* d_words = ctx.scratch_array<uint64_t>(p->nwords);
    zero_words(ctx, d_words, p->nwords);
    queue_op(ctx, op, d_words);
    p->marks = ctx.take_marks();
    JL_CUDA_CHECK(cudaEventRecord(p->end, st));
    p->words = result_words_get(p->nwords);
    JL_CUDA_CHECK(cudaMemcpyAsync(p->words, d_words, p->nwords * sizeof(uint64_t), cudaMemcpyDeviceToHost, st));
    JL_CUDA_CHECK(cudaEventRecord(p->done, st));
  }  // scratch is freed on the stream here, after the kernels that use it
  p->op = std::move(op);
  p->has_op = true;
  if (params.kind == OpKind::Build) params = params_of(p->op);  // table rows updated
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

Event CudaRank::copy(Stream s, const Buffer& dst, uint64_t dst_off, const Buffer& src, uint64_t src_off, uint64_t bytes) {
  OnDevice on(device_);
  cudaStream_t st = stream_of(s);
  check_copy(dst, dst_off, bytes, "destination");
  check_copy(src, src_off, bytes, "source");
  auto p = std::make_shared<PendingOp>();
  cudaEvent_t start = new_event(true);
  p->start = start;
  p->end = p->done = new_event(true);
  JL_CUDA_CHECK(cudaEventRecord(start, st));
  JL_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst->ptr) + dst_off, static_cast<const char*>(src->ptr) + src_off,
                                bytes, cudaMemcpyDefault, st));
  JL_CUDA_CHECK(cudaEventRecord(p->end, st));
  OpParams params;
  params.kind = OpKind::Copy;
  params.bytes = bytes;
  params.mem_src = int(src->space);
  params.mem_dst = int(dst->space);
  params.detail = std::string(to_string(src->space)) + "->" + to_string(dst->space);
  return track(s, std::move(params), start, p);
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

void CudaRank::resolve(int stream) {
  std::deque<std::shared_ptr<PendingOp>> done;
  {
    std::lock_guard<std::mutex> g(pending_mu_);
    done.swap(pending_[size_t(stream)]);
  }
  const std::string track = "stream " + std::to_string(stream);
  for (auto& p : done) {
    p->complete();
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
  OnDevice on(device_);
  JL_CUDA_CHECK_CTX(cudaStreamSynchronize(stream_of(s)), "synchronizing stream " + std::to_string(s.id) + " of rank " +
                                                            std::to_string(id()));
  resolve(s.id);
}

void CudaRank::finish() {
  for (int i = 0; i < streams(); ++i) sync(Stream{i});
}

// --- messages, windows, collectives -------------------------------------------------------------

Event CudaRank::send(Stream s, int peer, const Buffer& src, uint64_t off, uint64_t bytes, int tag) {
  OnDevice on(device_);
  check_copy(src, off, bytes, "send source");
  if (peer < 0 || peer >= size()) throw RuntimeError("send: peer " + std::to_string(peer) + " is not a rank");
  CudaWorld::Message m;
  m.src = src;
  m.off = off;
  m.bytes = bytes;
  m.ready = new_event(false);
  JL_CUDA_CHECK(cudaEventRecord(m.ready, stream_of(s)));
  m.sent = std::make_shared<DeferredEvent>();
  Event e(m.sent);
  world_.post(id(), peer, tag, std::move(m));
  return e;
}

Event CudaRank::recv(Stream s, int peer, const Buffer& dst, uint64_t off, uint64_t bytes, int tag) {
  OnDevice on(device_);
  cudaStream_t st = stream_of(s);
  check_copy(dst, off, bytes, "receive destination");
  CudaWorld::Message m = world_.take(peer, id(), tag, id());
  if (m.bytes != bytes) {
    cudaEventDestroy(m.ready);
    throw RuntimeError("recv on rank " + std::to_string(id()) + " from rank " + std::to_string(peer) + " tag " +
                       std::to_string(tag) + ": expected " + std::to_string(bytes) + " bytes, the matching send has " +
                       std::to_string(m.bytes));
  }
  JL_CUDA_CHECK(cudaStreamWaitEvent(st, m.ready, 0));
  cudaEventDestroy(m.ready);
  auto p = std::make_shared<PendingOp>();
  cudaEvent_t start = new_event(true);
  p->start = start;
  p->end = p->done = new_event(true);
  p->keep = m.src;  // the sender's buffer lives until the copy is complete
  JL_CUDA_CHECK(cudaEventRecord(start, st));
  JL_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst->ptr) + off, static_cast<const char*>(m.src->ptr) + m.off, bytes,
                                cudaMemcpyDefault, st));
  JL_CUDA_CHECK(cudaEventRecord(p->end, st));
  // The sender's event completes with this copy; the source must live until then.
  cudaEvent_t sent = new_event(false);
  JL_CUDA_CHECK(cudaEventRecord(sent, st));
  m.sent->resolve(sent);
  OpParams params;
  params.kind = OpKind::Recv;
  params.bytes = bytes;
  params.mem_src = int(m.src->space);
  params.mem_dst = int(dst->space);
  params.detail = "from rank " + std::to_string(peer);
  return track(s, std::move(params), start, p);
}

int CudaRank::expose(const Buffer& buf, uint32_t flags) {
  const int w = next_window_++;
  CudaWorld::Window win;
  win.buf = buf;
  win.flags = std::make_shared<std::vector<std::atomic<uint64_t>>>(flags);
  for (auto& f : *win.flags) f.store(0);
  my_windows_[w] = win;
  world_.expose(w, id(), win);
  barrier();  // every rank's window is registered before anyone puts
  return w;
}

namespace {
struct FlagWrite {
  std::shared_ptr<std::vector<std::atomic<uint64_t>>> flags;
  uint32_t flag;
  uint64_t value;
};
void CUDART_CB set_flag(void* arg) {
  auto* w = static_cast<FlagWrite*>(arg);
  (*w->flags)[w->flag].store(w->value, std::memory_order_release);
  delete w;
}
}  // namespace

Event CudaRank::put(Stream s, int peer, int window, uint64_t remote_off, const Buffer& src, uint64_t off, uint64_t bytes,
                    uint32_t flag, uint64_t value) {
  OnDevice on(device_);
  cudaStream_t st = stream_of(s);
  check_copy(src, off, bytes, "put source");
  CudaWorld::Window win = world_.window(window, peer);
  check_copy(win.buf, remote_off, bytes, "put destination window");
  if (flag >= win.flags->size())
    throw RuntimeError("put: window " + std::to_string(window) + " of rank " + std::to_string(peer) + " has " +
                       std::to_string(win.flags->size()) + " flags, flag " + std::to_string(flag) + " asked");
  auto p = std::make_shared<PendingOp>();
  cudaEvent_t start = new_event(true);
  p->start = start;
  p->end = new_event(true);
  p->done = new_event(false);
  p->keep = win.buf;
  JL_CUDA_CHECK(cudaEventRecord(start, st));
  JL_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(win.buf->ptr) + remote_off, static_cast<const char*>(src->ptr) + off,
                                bytes, cudaMemcpyDefault, st));
  JL_CUDA_CHECK(cudaEventRecord(p->end, st));
  // The flag is set on the host after the data landed (stream order), as a completion word.
  JL_CUDA_CHECK(cudaLaunchHostFunc(st, set_flag, new FlagWrite{win.flags, flag, value}));
  JL_CUDA_CHECK(cudaEventRecord(p->done, st));
  OpParams params;
  params.kind = OpKind::Put;
  params.bytes = bytes;
  params.mem_src = int(src->space);
  params.mem_dst = int(win.buf->space);
  params.detail = "to rank " + std::to_string(peer);
  return track(s, std::move(params), start, p);
}

uint64_t CudaRank::read_flag(int window, uint32_t flag) {
  auto it = my_windows_.find(window);
  if (it == my_windows_.end()) throw RuntimeError("read_flag: window " + std::to_string(window) + " was not exposed");
  if (flag >= it->second.flags->size()) throw RuntimeError("read_flag: flag " + std::to_string(flag) + " out of range");
  return (*it->second.flags)[flag].load(std::memory_order_acquire);
}

std::vector<uint64_t> CudaRank::allgather(const std::vector<uint64_t>& mine) {
  return world_.allgather(id(), gather_calls_++, mine);
}

void CudaRank::barrier() { world_.barrier(id()); }

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
  JL_CUDA_CHECK(cudaHostAlloc(&h, bytes, cudaHostAllocPortable));
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
  const auto t0 = std::chrono::steady_clock::now();
  std::memcpy(static_cast<char*>(h), static_cast<char*>(h) + bytes / 2, bytes / 2);
  bw.host_mem = double(bytes) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  cudaFreeHost(h);
  char date[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::localtime(&t));
  bw.source = "measured " + std::string(date) + " on GPU " + std::to_string(device_) + " (" + info_.name +
              "): device copy, pinned H2D, host memcpy" + (devices > 1 ? ", P2P copy" : "");
  measured[device_] = bw;
  return bw;
}

}  // namespace joinlab::cuda
