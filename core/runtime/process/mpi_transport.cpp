// MPI data plane (see data_plane.hpp). Four communicators keep the kinds of traffic apart:
// messages (the user's tags), put headers and data, put acknowledgements, abort messages.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/common/error.hpp"
#include "core/runtime/polling.hpp"
#include "core/runtime/process/data_plane.hpp"
#include "core/runtime/process/launch_guard.hpp"
#include "core/runtime/process/mpi_launch.hpp"

namespace joinlab {

namespace {

constexpr uint64_t kPiece = 1ULL << 30;  // bytes of one MPI message (counts are ints)
constexpr size_t kAbortMessageBytes = 2048;
constexpr int kHeaderTag = 0;

std::string mpi_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, size_t(len));
}
void check_mpi(int rc, const std::string& call) {
  if (rc != MPI_SUCCESS) throw RuntimeError("MPI " + call + " failed: " + mpi_text(rc));
}

struct PutHeader {
  uint64_t window, offset, bytes, value;
  uint32_t flag, id;
};

struct Window {
  char* base = nullptr;
  uint64_t bytes = 0;
  uint64_t* flags = nullptr;  // owned
  uint32_t nflags = 0;
  std::vector<uint64_t> remote_bytes, remote_flags;  // every rank's, for bounds checks
};

class MpiTransport final : public DataPlane {
 public:
  explicit MpiTransport(std::shared_ptr<ControlPlane> control)
      : control_(std::move(control)), me_(control_->rank()), n_(control_->size()) {
    if (!mpi_thread_multiple())
      throw RuntimeError("cluster.transport = mpi needs an MPI with MPI_THREAD_MULTIPLE (every stream thread sends); "
                         "this one gives less: use ucx");
    for (MPI_Comm* c : {&msg_, &put_, &ack_, &abort_}) {
      check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, c), "MPI_Comm_dup");
      MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN);
    }
    int* ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
    tag_ub_ = found && ub ? *ub : 32767;
    post(&header_req_, &header_, sizeof header_, MPI_ANY_SOURCE, kHeaderTag, put_);
    post(&abort_req_, abort_buf_, sizeof abort_buf_, MPI_ANY_SOURCE, 0, abort_);
    progress_ = std::thread([this] { progress_loop(); });
  }

  ~MpiTransport() override {
    stop_.store(true);
    if (progress_.joinable()) progress_.join();
    for (MPI_Request* r : {&header_req_, &abort_req_}) cancel(*r);
    for (auto& l : landing_) cancel(l.req);
    for (auto& r : sends_) MPI_Request_free(&r);
    if (!failed_.load())
      for (MPI_Comm* c : {&msg_, &put_, &ack_, &abort_}) MPI_Comm_free(c);
    for (auto& w : windows_) std::free(w.flags);
  }

  int rank() const override { return me_; }
  int size() const override { return n_; }
  double timeout_s() const override { return control_->timeout_s(); }

  void send(int dst, int tag, const void* data, uint64_t bytes) override {
    check_peer(dst, "send to");
    check_tag(tag);
    check_alive();
    auto what = [&] {
      return "rank " + std::to_string(me_) + ": send to rank " + std::to_string(dst) + " tag " + std::to_string(tag) +
             " (" + std::to_string(bytes) + " bytes)";
    };
    for_pieces(bytes, [&](uint64_t at, uint64_t n) {
      MPI_Request req;
      check_mpi(MPI_Isend(static_cast<const char*>(data) + at, int(n), MPI_BYTE, dst, tag, msg_, &req), what());
      wait(req, nullptr, what);
    });
  }

  void recv(int src, int tag, void* data, uint64_t bytes) override {
    check_peer(src, "recv from");
    check_tag(tag);
    check_alive();
    auto what = [&] {
      return "rank " + std::to_string(me_) + ": recv from rank " + std::to_string(src) + " tag " + std::to_string(tag) +
             " (" + std::to_string(bytes) + " bytes)";
    };
    for_pieces(bytes, [&](uint64_t at, uint64_t n) {
      MPI_Request req;
      check_mpi(MPI_Irecv(static_cast<char*>(data) + at, int(n), MPI_BYTE, src, tag, msg_, &req), what());
      MPI_Status status;
      const int rc = wait(req, &status, what);
      if (rc == MPI_ERR_TRUNCATE) throw RuntimeError(what() + ": the message is larger than " + std::to_string(bytes) + " bytes");
      check_mpi(rc, what());
      int got = 0;
      MPI_Get_count(&status, MPI_BYTE, &got);
      if (uint64_t(got) != n)
        throw RuntimeError(what() + " expected " + std::to_string(bytes) + " bytes, the message has " +
                           std::to_string(at + uint64_t(got)));
    });
  }

  int expose(void* base, uint64_t bytes, uint32_t nflags) override {
    check_alive();
    Window w;
    w.base = static_cast<char*>(base);
    w.bytes = base ? bytes : 0;
    w.nflags = nflags;
    w.flags = static_cast<uint64_t*>(std::aligned_alloc(64, (size_t(std::max(nflags, 1u)) * 8 + 63) / 64 * 64));
    if (!w.flags) throw RuntimeError("MPI expose: out of memory for " + std::to_string(nflags) + " flags");
    std::memset(w.flags, 0, size_t(std::max(nflags, 1u)) * 8);
    const auto all = control_->allgather(words_to_bytes({w.bytes, nflags}), "expose", liveness());
    for (auto& part : all) {
      const auto words = bytes_to_words(part);
      w.remote_bytes.push_back(words.at(0));
      w.remote_flags.push_back(words.at(1));
    }
    std::lock_guard<std::mutex> g(windows_mu_);
    windows_.push_back(std::move(w));
    return int(windows_.size() - 1);
  }

  // The header, the data in pieces (tag 1 + put id), then a wait for the acknowledgement: put
  // returns once the target set the flag, so a later put's flag orders after this one's data.
  void put(int dst, int window, uint64_t off, const void* data, uint64_t bytes, uint32_t flag,
           uint64_t value) override {
    check_peer(dst, "put to");
    check_alive();
    uint64_t remote_bytes, remote_flags;
    {
      std::lock_guard<std::mutex> g(windows_mu_);
      if (window < 0 || size_t(window) >= windows_.size())
        throw RuntimeError("rank " + std::to_string(me_) + ": rank " + std::to_string(dst) + " has no window " +
                           std::to_string(window) + " (" + std::to_string(windows_.size()) + " exposed)");
      remote_bytes = windows_[size_t(window)].remote_bytes[size_t(dst)];
      remote_flags = windows_[size_t(window)].remote_flags[size_t(dst)];
    }
    if (off + bytes > remote_bytes || off + bytes < off)
      throw RuntimeError("rank " + std::to_string(me_) + ": put of " + std::to_string(bytes) + " bytes at offset " +
                         std::to_string(off) + " overruns rank " + std::to_string(dst) + "'s window " +
                         std::to_string(window) + " of " + std::to_string(remote_bytes) + " bytes");
    if (flag >= remote_flags)
      throw RuntimeError("rank " + std::to_string(me_) + ": put sets flag " + std::to_string(flag) + " of rank " +
                         std::to_string(dst) + "'s window " + std::to_string(window) + ", which has " +
                         std::to_string(remote_flags) + " flags");
    auto what = [&] {
      return "rank " + std::to_string(me_) + ": put of " + std::to_string(bytes) + " bytes to rank " +
             std::to_string(dst) + " window " + std::to_string(window);
    };
    const uint32_t id = uint32_t(next_put_id_.fetch_add(1) % uint64_t(tag_ub_ - 1));
    const PutHeader h{uint64_t(window), off, bytes, value, flag, id};
    uint64_t ack = 0;
    MPI_Request ack_req, header_req;
    check_mpi(MPI_Irecv(&ack, 1, MPI_UINT64_T, dst, int(id), ack_, &ack_req), what());
    check_mpi(MPI_Isend(&h, sizeof h, MPI_BYTE, dst, kHeaderTag, put_, &header_req), what());
    try {
      wait(header_req, nullptr, what);
      for_pieces(bytes, [&](uint64_t at, uint64_t n) {
        MPI_Request req;
        check_mpi(MPI_Isend(static_cast<const char*>(data) + at, int(n), MPI_BYTE, dst, 1 + int(id), put_, &req), what());
        wait(req, nullptr, what);
      });
    } catch (...) {
      cancel(ack_req);
      throw;
    }
    check_mpi(wait(ack_req, nullptr, what), what() + " (acknowledgement)");
  }

  uint64_t read_flag(int window, uint32_t flag) override {
    check_alive();
    std::lock_guard<std::mutex> g(windows_mu_);
    if (window < 0 || size_t(window) >= windows_.size() || flag >= windows_[size_t(window)].nflags)
      throw RuntimeError("rank " + std::to_string(me_) + ": read_flag " + std::to_string(flag) + " of window " +
                         std::to_string(window) + ", which this rank did not expose with that many flags");
    return __atomic_load_n(windows_[size_t(window)].flags + flag, __ATOMIC_ACQUIRE);
  }

  std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) override {
    check_alive();
    return allgather_words(*control_, mine, "allgather", liveness());
  }
  void barrier() override {
    check_alive();
    control_->barrier("barrier", liveness());
  }

  void abort(const std::string& why) override {
    bool broadcast = false;
    {
      std::lock_guard<std::mutex> g(fail_mu_);
      if (!failed_.load()) {
        failure_ = "rank " + std::to_string(me_) + " failed: " + why;
        failed_.store(true);
        broadcast = true;  // only the rank the failure started at tells the others
        abort_message_ = why.substr(0, kAbortMessageBytes);
      }
    }
    if (!broadcast) return;
    std::vector<MPI_Request> reqs;
    for (int r = 0; r < n_; ++r) {
      if (r == me_) continue;
      MPI_Request req;
      if (MPI_Isend(abort_message_.data(), int(abort_message_.size()), MPI_CHAR, r, 0, abort_, &req) == MPI_SUCCESS)
        reqs.push_back(req);
    }
    const Deadline d(1.0);
    int done = 0;
    while (!reqs.empty() && !d.passed() &&
           MPI_Testall(int(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE) == MPI_SUCCESS && !done)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (!done)
      for (auto& r : reqs) MPI_Request_free(&r);
    control_->abort(why);
  }

  void check_alive() const override {
    if (!failed_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> g(fail_mu_);
    throw RuntimeError(failure_);
  }

  void quiesce() override {
    control_->barrier("quiesce", liveness());
    quiesced_.store(true);  // peers may exit from now on
  }

 private:
  ControlPlane::Liveness liveness() {
    return [this] { check_alive(); };
  }
  void fail(const std::string& why) {
    std::lock_guard<std::mutex> g(fail_mu_);
    if (failed_.load()) return;
    failure_ = why;
    failed_.store(true, std::memory_order_release);
  }
  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= n_)
      throw RuntimeError("rank " + std::to_string(me_) + ": " + what + " rank " + std::to_string(peer) +
                         ", but ranks are 0.." + std::to_string(n_ - 1));
  }
  void check_tag(int tag) const {
    if (tag < 0 || tag > tag_ub_)
      throw RuntimeError("rank " + std::to_string(me_) + ": message tag " + std::to_string(tag) + " outside MPI's 0.." +
                         std::to_string(tag_ub_));
  }

  template <class F>
  static void for_pieces(uint64_t bytes, F&& f) {
    uint64_t at = 0;
    do {
      const uint64_t n = std::min(kPiece, bytes - at);
      f(at, n);
      at += n;
    } while (at < bytes);
  }

  void post(MPI_Request* req, void* buf, int bytes, int source, int tag, MPI_Comm comm) {
    check_mpi(MPI_Irecv(buf, bytes, MPI_BYTE, source, tag, comm, req), "MPI_Irecv (transport progress)");
  }
  static void cancel(MPI_Request& req) {
    if (req == MPI_REQUEST_NULL) return;
    MPI_Cancel(&req);
    MPI_Request_free(&req);
  }

  // Polls `req` until done; bounded by timeout_s and the job's failure. Returns MPI's code.
  template <class Describe>
  int wait(MPI_Request& req, MPI_Status* status, Describe describe) {
    const Deadline deadline(timeout_s());
    Backoff backoff;
    for (;;) {
      int done = 0;
      MPI_Status st;
      const int rc = MPI_Test(&req, &done, &st);
      if (rc != MPI_SUCCESS) return rc;
      if (done) {
        if (status) *status = st;
        return MPI_SUCCESS;
      }
      if (failed_.load() || deadline.passed()) {
        cancel(req);
        check_alive();
        throw RuntimeError(describe() + " timed out after " + seconds_text(timeout_s()));
      }
      backoff.pause();
    }
  }

  // --- the progress thread: lands puts, hears aborts ---------------------------------------------------

  struct Landing {
    MPI_Request req = MPI_REQUEST_NULL;
    uint64_t* flag = nullptr;
    uint64_t value = 0, left = 0;  // pieces still to come after this one
    char* next = nullptr;
    int source = 0;
    uint32_t id = 0;
  };

  void progress_loop() {
    Backoff backoff;
    auto next_look = std::chrono::steady_clock::now();
    while (!stop_.load()) {
      if (failed_.load()) {  // the rank's memory may go any moment: nothing lands any more
        for (auto& l : landing_) cancel(l.req);
        landing_.clear();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      // MPI tells nothing of a dead or stopped peer under mpirun --enable-recovery, and this plane
      // has no heartbeat: the job's processes on this host are looked at once a second.
      if (!quiesced_.load() && std::chrono::steady_clock::now() >= next_look) {
        next_look = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        const std::string faults = local_peer_faults(false);
        if (!faults.empty()) fail(faults);
      }
      bool moved = poll_abort() | poll_headers() | poll_landing();
      for (size_t i = 0; i < sends_.size();) {
        int done = 0;
        MPI_Test(&sends_[i], &done, MPI_STATUS_IGNORE);
        if (done) {
          sends_[i] = sends_.back();
          sends_.pop_back();
        } else {
          ++i;
        }
      }
      if (moved)
        backoff.reset();
      else
        backoff.pause();
    }
  }

  bool poll_abort() {
    int done = 0;
    MPI_Status st;
    if (abort_req_ == MPI_REQUEST_NULL || MPI_Test(&abort_req_, &done, &st) != MPI_SUCCESS || !done) return false;
    int len = 0;
    MPI_Get_count(&st, MPI_CHAR, &len);
    fail("rank " + std::to_string(st.MPI_SOURCE) + " failed: " + std::string(abort_buf_, size_t(std::max(len, 0))));
    return true;
  }

  bool poll_headers() {
    bool moved = false;
    for (;;) {
      int done = 0;
      MPI_Status st;
      if (MPI_Test(&header_req_, &done, &st) != MPI_SUCCESS || !done) return moved;
      moved = true;
      on_header(header_, st.MPI_SOURCE);
      post(&header_req_, &header_, sizeof header_, MPI_ANY_SOURCE, kHeaderTag, put_);
    }
  }

  void on_header(const PutHeader& h, int source) {
    Landing l;
    {
      std::lock_guard<std::mutex> g(windows_mu_);
      if (h.window >= windows_.size() || h.offset + h.bytes > windows_[size_t(h.window)].bytes ||
          h.flag >= windows_[size_t(h.window)].nflags) {
        fail("rank " + std::to_string(source) + " put " + std::to_string(h.bytes) + " bytes outside window " +
             std::to_string(h.window) + " of rank " + std::to_string(me_));
        return;
      }
      l.flag = windows_[size_t(h.window)].flags + h.flag;
      l.next = windows_[size_t(h.window)].base + h.offset;
    }
    l.value = h.value;
    l.source = source;
    l.id = h.id;
    l.left = h.bytes;
    if (!h.bytes) return land(l);
    landing_.push_back(l);
    next_piece(landing_.back());
  }

  void next_piece(Landing& l) {
    const uint64_t n = std::min(kPiece, l.left);
    post(&l.req, l.next, int(n), l.source, 1 + int(l.id), put_);
    l.next += n;
    l.left -= n;
  }

  bool poll_landing() {
    bool moved = false;
    for (size_t i = 0; i < landing_.size();) {
      int done = 0;
      if (MPI_Test(&landing_[i].req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || !done) {
        ++i;
        continue;
      }
      moved = true;
      if (landing_[i].left) {
        next_piece(landing_[i]);
        continue;
      }
      land(landing_[i]);
      landing_[i] = landing_.back();
      landing_.pop_back();
    }
    return moved;
  }

  void land(const Landing& l) {
    __atomic_store_n(l.flag, l.value, __ATOMIC_RELEASE);
    static const uint64_t kAck = 1;
    MPI_Request req;
    if (MPI_Isend(&kAck, 1, MPI_UINT64_T, l.source, int(l.id), ack_, &req) == MPI_SUCCESS) sends_.push_back(req);
  }

  std::shared_ptr<ControlPlane> control_;
  const int me_, n_;
  MPI_Comm msg_ = MPI_COMM_NULL, put_ = MPI_COMM_NULL, ack_ = MPI_COMM_NULL, abort_ = MPI_COMM_NULL;
  int tag_ub_ = 32767;
  std::atomic<uint64_t> next_put_id_{0};

  std::mutex windows_mu_;
  std::deque<Window> windows_;

  mutable std::mutex fail_mu_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> quiesced_{false};
  std::string failure_, abort_message_;

  // Progress thread only.
  PutHeader header_{};
  MPI_Request header_req_ = MPI_REQUEST_NULL, abort_req_ = MPI_REQUEST_NULL;
  char abort_buf_[kAbortMessageBytes];
  std::vector<Landing> landing_;
  std::vector<MPI_Request> sends_;

  std::atomic<bool> stop_{false};
  std::thread progress_;
};

}  // namespace

std::shared_ptr<DataPlane> make_mpi_transport(std::shared_ptr<ControlPlane> control) {
  return std::make_shared<MpiTransport>(std::move(control));
}

}  // namespace joinlab
