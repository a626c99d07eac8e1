// UCX data plane (see data_plane.hpp for the protocol).
#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "core/common/error.hpp"
#include "core/runtime/process/data_plane.hpp"
#include "core/runtime/polling.hpp"

namespace joinlab {

namespace {

[[noreturn]] void ucx_failed(const std::string& call, ucs_status_t s) {
  throw RuntimeError(std::string("UCX ") + call + " failed: " + ucs_status_string(s));
}

// UCP tag: bits 63-62 kind, 61-32 source rank, 31-0 the user's tag.
constexpr ucp_tag_t kKindMask = 3ULL << 62;
constexpr ucp_tag_t kAbortKind = 1ULL << 62;
constexpr ucp_tag_t kFullMask = ~0ULL;
constexpr int kMaxRanks = 1 << 30;
ucp_tag_t data_tag(int source, int tag) { return (uint64_t(source) << 32) | uint32_t(tag); }
ucp_tag_t abort_tag(int source) { return kAbortKind | (uint64_t(source) << 32); }
int tag_source(ucp_tag_t t) { return int((t >> 32) & uint64_t(kMaxRanks - 1)); }

// Emulated puts (see UcxTransport::put): a header, the data, and an acknowledgement, each a
// tagged message whose tag carries (kind, source, part, put id).
constexpr ucp_tag_t kPutKind = 2ULL << 62;
enum PutPart : uint64_t { kPutHeader = 0, kPutData = 1, kPutAck = 2 };
constexpr uint32_t kPutIdMask = (1u << 30) - 1;
constexpr ucp_tag_t kPutPartMask = kKindMask | (3ULL << 30);
ucp_tag_t put_tag(int source, PutPart part, uint32_t id) {
  return kPutKind | (uint64_t(source) << 32) | (uint64_t(part) << 30) | (id & kPutIdMask);
}
struct PutHeader {
  uint64_t window, offset, bytes, value;
  uint32_t flag, id, no_ack, reserved;
};
constexpr uint64_t kHeartbeatWindow = ~0ULL;  // a header-only put into the heartbeat word

constexpr size_t kAbortMessageBytes = 2048;

// Little writer/reader for the bytes exchanged at expose.
void put_word(std::string& s, uint64_t w) { s.append(reinterpret_cast<const char*>(&w), sizeof w); }
uint64_t get_word(const std::string& s, size_t& at) {
  if (at + 8 > s.size()) throw RuntimeError("UCX expose: truncated window description");
  uint64_t w;
  std::memcpy(&w, s.data() + at, 8);
  at += 8;
  return w;
}

struct RemoteWindow {
  uint64_t base = 0, bytes = 0, flags_addr = 0;
  uint32_t nflags = 0;
  ucp_rkey_h data_rkey = nullptr, flags_rkey = nullptr;
};
struct LocalWindow {
  void* base = nullptr;
  uint64_t bytes = 0;
  ucp_mem_h data_memh = nullptr, flags_memh = nullptr;
  uint64_t* flags = nullptr;  // owned, 64-byte aligned
  uint32_t nflags = 0;
  std::vector<RemoteWindow> remote;  // indexed by rank
};

class UcxTransport;
struct PeerContext {
  UcxTransport* transport = nullptr;
  int peer = 0;
};

class UcxTransport final : public DataPlane {
 public:
  explicit UcxTransport(std::shared_ptr<ControlPlane> control)
      : control_(std::move(control)), me_(control_->rank()), n_(control_->size()) {
    if (n_ > kMaxRanks) throw RuntimeError("UCX transport: " + std::to_string(n_) + " ranks exceed the tag layout");
    start_ucx();
    // A rank that stops (hangs, is stopped, loses its network) is named by its successor, which
    // hears its heartbeat: every rank sends one to the next rank on the ring.
    silence_limit_s_ = std::max(1.0, 0.5 * timeout_s());
    heartbeat_period_s_ = std::min(1.0, silence_limit_s_ / 4);
    progress_ = std::thread([this] { progress_loop(); });
  }

  ~UcxTransport() override {
    stop_.store(true);
    if (progress_.joinable()) progress_.join();
    shut_down_ucx();
  }

  int rank() const override { return me_; }
  int size() const override { return n_; }
  double timeout_s() const override { return control_->timeout_s(); }

  void send(int dst, int tag, const void* data, uint64_t bytes) override {
    check_peer(dst, "send to");
    check_alive();
    ucp_request_param_t p{};
    static const char dummy = 0;
    ucs_status_ptr_t req = ucp_tag_send_nbx(eps_[size_t(dst)], bytes ? data : &dummy, bytes, data_tag(me_, tag), &p);
    const ucs_status_t st = wait(req, false, nullptr, [&] {
      return "rank " + std::to_string(me_) + ": send to rank " + std::to_string(dst) + " tag " + std::to_string(tag) +
             " (" + std::to_string(bytes) + " bytes)";
    });
    if (st != UCS_OK)
      throw RuntimeError("rank " + std::to_string(me_) + ": send to rank " + std::to_string(dst) + " tag " +
                         std::to_string(tag) + " failed: " + ucs_status_string(st) + peer_note(dst));
  }

  void recv(int src, int tag, void* data, uint64_t bytes) override {
    check_peer(src, "recv from");
    check_alive();
    auto what = [&] {
      return "rank " + std::to_string(me_) + ": recv from rank " + std::to_string(src) + " tag " + std::to_string(tag) +
             " (" + std::to_string(bytes) + " bytes)";
    };
    ucp_tag_recv_info_t info{};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;  // UCX 1.13 leaves recv_info unset on immediate completion
    p.recv_info.tag_info = &info;
    char dummy = 0;
    ucs_status_ptr_t req = ucp_tag_recv_nbx(worker_, bytes ? data : &dummy, bytes, data_tag(src, tag), kFullMask, &p);
    const ucs_status_t st = wait(req, true, &info, what);
    if (st == UCS_ERR_MESSAGE_TRUNCATED)
      throw RuntimeError(what() + ": the message is larger than " + std::to_string(bytes) + " bytes");
    if (st != UCS_OK) throw RuntimeError(what() + " failed: " + ucs_status_string(st) + peer_note(src));
    if (info.length != bytes)
      throw RuntimeError(what() + " expected " + std::to_string(bytes) + " bytes, the message has " +
                         std::to_string(info.length));
  }

  int expose(void* base, uint64_t bytes, uint32_t nflags) override {
    check_alive();
    LocalWindow w;
    w.base = base;
    w.bytes = base ? bytes : 0;
    w.nflags = nflags;
    w.flags = static_cast<uint64_t*>(std::aligned_alloc(64, (size_t(std::max(nflags, 1u)) * 8 + 63) / 64 * 64));
    if (!w.flags) throw RuntimeError("UCX expose: out of memory for " + std::to_string(nflags) + " flags");
    std::memset(w.flags, 0, size_t(std::max(nflags, 1u)) * 8);
    std::string mine;
    try {
      const std::string data_key = w.bytes ? map_and_pack(w.base, w.bytes, &w.data_memh) : std::string();
      const std::string flag_key = map_and_pack(w.flags, uint64_t(std::max(nflags, 1u)) * 8, &w.flags_memh);
      put_word(mine, reinterpret_cast<uint64_t>(w.base));
      put_word(mine, w.bytes);
      put_word(mine, reinterpret_cast<uint64_t>(w.flags));
      put_word(mine, nflags);
      put_word(mine, data_key.size());
      mine += data_key;
      put_word(mine, flag_key.size());
      mine += flag_key;
    } catch (...) {
      release(w);
      throw;
    }
    int id;
    {
      std::lock_guard<std::mutex> g(windows_mu_);
      id = int(windows_.size());
      windows_.push_back(std::move(w));  // registered before anyone can know of it
    }
    const auto all = control_->allgather(mine, "expose of window " + std::to_string(id), liveness());
    std::vector<RemoteWindow> remote(static_cast<size_t>(n_));
    for (int r = 0; r < n_; ++r) {
      const std::string& s = all[size_t(r)];
      size_t at = 0;
      RemoteWindow& rw = remote[size_t(r)];
      rw.base = get_word(s, at);
      rw.bytes = get_word(s, at);
      rw.flags_addr = get_word(s, at);
      rw.nflags = uint32_t(get_word(s, at));
      const uint64_t dk = get_word(s, at);
      if (dk) rw.data_rkey = unpack(r, s, at, dk);
      at += dk;
      const uint64_t fk = get_word(s, at);
      rw.flags_rkey = unpack(r, s, at, fk);
    }
    std::lock_guard<std::mutex> g(windows_mu_);
    windows_[size_t(id)].remote = std::move(remote);
    return id;
  }

  void put(int dst, int window, uint64_t off, const void* data, uint64_t bytes, uint32_t flag,
           uint64_t value) override {
    check_peer(dst, "put to");
    check_alive();
    const RemoteWindow rw = remote_window(dst, window);
    if (off + bytes > rw.bytes || off + bytes < off)
      throw RuntimeError("rank " + std::to_string(me_) + ": put of " + std::to_string(bytes) + " bytes at offset " +
                         std::to_string(off) + " overruns rank " + std::to_string(dst) + "'s window " +
                         std::to_string(window) + " of " + std::to_string(rw.bytes) + " bytes");
    if (flag >= rw.nflags)
      throw RuntimeError("rank " + std::to_string(me_) + ": put sets flag " + std::to_string(flag) + " of rank " +
                         std::to_string(dst) + "'s window " + std::to_string(window) + ", which has " +
                         std::to_string(rw.nflags) + " flags");
    auto what = [&] {
      return "rank " + std::to_string(me_) + ": put of " + std::to_string(bytes) + " bytes to rank " +
             std::to_string(dst) + " window " + std::to_string(window);
    };
    if (emulated_[size_t(dst)]) return put_emulated(dst, uint64_t(window), off, data, bytes, flag, value, what);
    ucp_ep_h ep = eps_[size_t(dst)];
    ucp_request_param_t p{};
    ucs_status_ptr_t data_req = nullptr;
    if (bytes) data_req = ucp_put_nbx(ep, data, bytes, rw.base + off, rw.data_rkey, &p);
    // Everything this worker issued so far lands before the flag does.
    const ucs_status_t fenced = ucp_worker_fence(worker_);
    const uint64_t flag_value = value;  // must outlive the flag put's local completion
    ucs_status_ptr_t flag_req = ucp_put_nbx(ep, &flag_value, sizeof flag_value, rw.flags_addr + uint64_t(flag) * 8,
                                            rw.flags_rkey, &p);
    const ucs_status_t a = wait(data_req, false, nullptr, what);
    const ucs_status_t b = wait(flag_req, false, nullptr, what);
    for (ucs_status_t st : {fenced, a, b})
      if (st != UCS_OK) throw RuntimeError(what() + " failed: " + ucs_status_string(st) + peer_note(dst));
  }

  // Where UCX has no RDMA lane to a peer (TCP, or shared memory under peer failure handling) it
  // would emulate RMA with active messages whose acknowledgements UCX 1.13 treats as fatal when
  // the initiator died meanwhile: a dead peer would abort its survivors. Those peers get the
  // same emulation done here, with failures handled like any other message: the header and the
  // data go as tagged messages, the target's progress thread receives the data in place, sets
  // the flag, and acknowledges; put returns on the acknowledgement, so a later put's flag still
  // orders after every earlier put.
  template <class Describe>
  void put_emulated(int dst, uint64_t window, uint64_t off, const void* data, uint64_t bytes, uint32_t flag,
                    uint64_t value, Describe what) {
    const uint32_t id = next_put_id_.fetch_add(1) & kPutIdMask;
    const PutHeader h{window, off, bytes, value, flag, id, 0, 0};
    uint64_t ack = 0;
    ucp_tag_recv_info_t info{};
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    rp.recv_info.tag_info = &info;
    ucs_status_ptr_t ack_req = ucp_tag_recv_nbx(worker_, &ack, sizeof ack, put_tag(dst, kPutAck, id), kFullMask, &rp);
    ucp_request_param_t p{};
    ucp_ep_h ep = eps_[size_t(dst)];
    ucs_status_t st = UCS_OK;
    try {
      st = wait(ucp_tag_send_nbx(ep, &h, sizeof h, put_tag(me_, kPutHeader, id), &p), false, nullptr, what);
      if (st == UCS_OK && bytes)
        st = wait(ucp_tag_send_nbx(ep, data, bytes, put_tag(me_, kPutData, id), &p), false, nullptr, what);
    } catch (...) {
      abandon(ack_req);
      throw;
    }
    if (st != UCS_OK) {
      abandon(ack_req);
      throw RuntimeError(what() + " failed: " + ucs_status_string(st) + peer_note(dst));
    }
    st = wait(ack_req, true, &info, what);
    if (st != UCS_OK) throw RuntimeError(what() + " was not acknowledged: " + ucs_status_string(st) + peer_note(dst));
  }

  void abandon(ucs_status_ptr_t req) {
    if (!UCS_PTR_IS_PTR(req)) return;
    ucp_request_cancel(worker_, req);
    ucp_request_free(req);
  }

  // Progress thread only: the target side of emulated puts.
  void poll_emulated_puts() {
    for (;;) {
      if (!put_header_req_) {
        ucp_request_param_t p{};
        p.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
        p.recv_info.tag_info = &put_header_info_;
        put_header_req_ = ucp_tag_recv_nbx(worker_, &put_header_, sizeof put_header_, kPutKind | (uint64_t(kPutHeader) << 30),
                                           kPutPartMask, &p);
        if (!UCS_PTR_IS_PTR(put_header_req_)) {
          put_header_req_ = nullptr;
          break;
        }
      }
      const ucs_status_t st = ucp_tag_recv_request_test(put_header_req_, &put_header_info_);
      if (st == UCS_INPROGRESS) break;
      ucp_request_free(put_header_req_);
      put_header_req_ = nullptr;
      if (st == UCS_OK) on_put_header(put_header_, tag_source(put_header_info_.sender_tag));
    }
    for (size_t i = 0; i < landing_.size();) {
      Landing& l = landing_[i];
      ucp_tag_recv_info_t info;
      const ucs_status_t st = ucp_tag_recv_request_test(l.req, &info);
      if (st == UCS_INPROGRESS) {
        ++i;
        continue;
      }
      ucp_request_free(l.req);
      if (st == UCS_OK) land(l.flag, l.value, l.source, l.id, l.ack);
      landing_[i] = landing_.back();
      landing_.pop_back();
    }
    for (size_t i = 0; i < acks_.size();) {
      if (ucp_request_check_status(acks_[i]) == UCS_INPROGRESS) {
        ++i;
        continue;
      }
      ucp_request_free(acks_[i]);
      acks_[i] = acks_.back();
      acks_.pop_back();
    }
  }

  void on_put_header(const PutHeader& h, int source) {
    if (h.window == kHeartbeatWindow) {
      __atomic_store_n(heartbeat_word_, h.value, __ATOMIC_RELEASE);
      return;
    }
    char* base;
    uint64_t* flag;
    {
      std::lock_guard<std::mutex> g(windows_mu_);
      if (h.window >= windows_.size() || h.offset + h.bytes > windows_[size_t(h.window)].bytes ||
          h.flag >= windows_[size_t(h.window)].nflags) {
        fail("rank " + std::to_string(source) + " put " + std::to_string(h.bytes) + " bytes outside window " +
             std::to_string(h.window) + " of rank " + std::to_string(me_));
        return;
      }
      base = static_cast<char*>(windows_[size_t(h.window)].base);
      flag = windows_[size_t(h.window)].flags + h.flag;
    }
    if (!h.bytes) return land(flag, h.value, source, h.id, !h.no_ack);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    ucs_status_ptr_t req = ucp_tag_recv_nbx(worker_, base + h.offset, h.bytes, put_tag(source, kPutData, h.id), kFullMask, &p);
    if (UCS_PTR_IS_PTR(req)) landing_.push_back({req, flag, h.value, source, h.id, !h.no_ack});
  }

  void land(uint64_t* flag, uint64_t value, int source, uint32_t id, bool ack) {
    __atomic_store_n(flag, value, __ATOMIC_RELEASE);
    if (!ack) return;
    ucp_request_param_t p{};
    static const uint64_t kAck = 1;
    ucs_status_ptr_t req = ucp_tag_send_nbx(eps_[size_t(source)], &kAck, sizeof kAck, put_tag(me_, kPutAck, id), &p);
    if (UCS_PTR_IS_PTR(req)) acks_.push_back(req);
  }

  // Whether UCX would emulate RMA to `ep` (no lane of it carries RMA): ucp_ep_print_info lists
  // the lanes; those that do say "rma_bw". JOINLAB_UCX_PUT=rma|emulated overrides.
  bool emulates_rma(ucp_ep_h ep) {
    if (const char* force = std::getenv("JOINLAB_UCX_PUT")) {
      if (std::string(force) == "rma") return false;
      if (std::string(force) == "emulated") return true;
      throw InputError(std::string("JOINLAB_UCX_PUT = '") + force + "': expected rma or emulated");
    }
    char* text = nullptr;
    size_t size = 0;
    FILE* f = open_memstream(&text, &size);
    if (!f) return true;
    ucp_ep_print_info(ep, f);
    std::fclose(f);
    std::string info(text ? text : "", size);
    std::free(text);
    bool rma = false;
    size_t at = 0;
    while ((at = info.find("lane[", at)) != std::string::npos) {
      const size_t end = std::min(info.find('\n', at), info.size());
      if (info.substr(at, end - at).find("rma_bw") != std::string::npos) rma = true;
      at = end;
    }
    return !rma;
  }

  uint64_t read_flag(int window, uint32_t flag) override {
    check_alive();  // polling loops end promptly once the job failed
    const uint64_t* flags;
    {
      std::lock_guard<std::mutex> g(windows_mu_);
      if (window < 0 || size_t(window) >= windows_.size())
        throw RuntimeError("rank " + std::to_string(me_) + ": read_flag of window " + std::to_string(window) +
                           ", but this rank exposed " + std::to_string(windows_.size()));
      const LocalWindow& w = windows_[size_t(window)];
      if (flag >= w.nflags)
        throw RuntimeError("rank " + std::to_string(me_) + ": read_flag " + std::to_string(flag) + " of window " +
                           std::to_string(window) + ", which has " + std::to_string(w.nflags) + " flags");
      flags = w.flags;
    }
    return __atomic_load_n(flags + flag, __ATOMIC_ACQUIRE);
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
    fail("rank " + std::to_string(me_) + " failed: " + why);
    if (claim_broadcast(why)) broadcast_abort();
    control_->abort(why);
  }

  void check_alive() const override {
    if (!failed_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> g(fail_mu_);
    throw RuntimeError(failure_);
  }

  void quiesce() override {
    closing_.store(true);  // peers that finish first close their endpoints: not a failure
    control_->barrier("quiesce", liveness());
  }

  // In a UCX callback. A peer also becomes unreachable when it exits after failing itself: its
  // abort message, with the cause, is likely on its way. So the progress thread fails the job
  // for the unreachable peer only after a short grace, and tells the other ranks.
  void peer_failed(int peer, ucs_status_t status) {
    if (closing_.load()) return;
    std::lock_guard<std::mutex> g(fail_mu_);
    if (unreachable_.empty()) {
      unreachable_ = "rank " + std::to_string(peer) + " is unreachable (UCX endpoint error: " + ucs_status_string(status) +
                     "): it died or its network failed";
      unreachable_since_ = std::chrono::steady_clock::now();
    }
  }

  // Progress thread only.
  void fail_for_unreachable_peer() {
    std::string why;
    {
      std::lock_guard<std::mutex> g(fail_mu_);
      if (unreachable_.empty() || failed_.load() ||
          std::chrono::steady_clock::now() - unreachable_since_ < std::chrono::milliseconds(300))
        return;
      why = unreachable_;
    }
    fail(why);
    tell_others_.store(true);
  }

 private:
  ControlPlane::Liveness liveness() {
    return [this] { check_alive(); };
  }

  void fail(const std::string& why, bool from_peer_message = false) {
    std::lock_guard<std::mutex> g(fail_mu_);
    if (failed_.load()) return;
    failure_ = why;
    failure_from_peer_ = from_peer_message;
    failed_.store(true, std::memory_order_release);
  }

  // Whether this rank should send `why` to the others: once, and not when it only echoes an abort
  // that another rank already sent to everyone.
  bool claim_broadcast(const std::string& why) {
    std::lock_guard<std::mutex> g(fail_mu_);
    if (abort_sent_ || failure_from_peer_) return false;
    abort_sent_ = true;
    abort_message_ = why.substr(0, kAbortMessageBytes);
    return true;
  }

  std::string peer_note(int peer) const {
    if (failed_.load()) return " (" + failure_text() + ")";
    std::lock_guard<std::mutex> g(fail_mu_);
    return unreachable_.empty() ? "" : " (" + unreachable_ + ")";
  }
  std::string failure_text() const {
    std::lock_guard<std::mutex> g(fail_mu_);
    return failure_;
  }

  void check_peer(int peer, const char* what) const {
    if (peer < 0 || peer >= n_)
      throw RuntimeError("rank " + std::to_string(me_) + ": " + what + " rank " + std::to_string(peer) +
                         ", but ranks are 0.." + std::to_string(n_ - 1));
  }

  // Waits for the request a *_nbx call returned; a receive that is given up is cancelled.
  template <class Describe>
  ucs_status_t wait(ucs_status_ptr_t req, bool is_recv, ucp_tag_recv_info_t* info, Describe describe) {
    if (req == nullptr) return UCS_OK;
    if (UCS_PTR_IS_ERR(req)) return UCS_PTR_STATUS(req);
    const Deadline deadline(timeout_s());
    Backoff backoff;
    for (;;) {
      const ucs_status_t st = is_recv ? ucp_tag_recv_request_test(req, info) : ucp_request_check_status(req);
      if (st != UCS_INPROGRESS) {
        ucp_request_free(req);
        return st;
      }
      const bool failed = failed_.load();  // checked first: a failed job progresses no more
      if (!failed && ucp_worker_progress(worker_)) {
        backoff.reset();
        continue;
      }
      const bool late = deadline.passed();
      if (failed || late) {
        if (is_recv) ucp_request_cancel(worker_, req);
        ucp_request_free(req);  // UCX releases it once it completes (cancelled, or failed at close)
        check_alive();
        throw RuntimeError(describe() + " timed out after " + seconds_text(timeout_s()));
      }
      backoff.pause();
    }
  }

  std::string map_and_pack(void* base, uint64_t bytes, ucp_mem_h* memh) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = base;
    mp.length = bytes;
    ucs_status_t st = ucp_mem_map(ctx_, &mp, memh);
    if (st != UCS_OK) ucx_failed("ucp_mem_map of " + std::to_string(bytes) + " bytes", st);
    void* packed = nullptr;
    size_t size = 0;
    st = ucp_rkey_pack(ctx_, *memh, &packed, &size);
    if (st != UCS_OK) ucx_failed("ucp_rkey_pack", st);
    std::string key(static_cast<const char*>(packed), size);
    ucp_rkey_buffer_release(packed);
    return key;
  }

  ucp_rkey_h unpack(int peer, const std::string& s, size_t at, uint64_t len) {
    if (at + len > s.size()) throw RuntimeError("UCX expose: truncated remote key from rank " + std::to_string(peer));
    ucp_rkey_h rkey = nullptr;
    const ucs_status_t st = ucp_ep_rkey_unpack(eps_[size_t(peer)], s.data() + at, &rkey);
    if (st != UCS_OK) ucx_failed("ucp_ep_rkey_unpack of rank " + std::to_string(peer) + "'s key", st);
    return rkey;
  }

  RemoteWindow remote_window(int dst, int window) {
    std::lock_guard<std::mutex> g(windows_mu_);
    if (window < 0 || size_t(window) >= windows_.size() || windows_[size_t(window)].remote.empty())
      throw RuntimeError("rank " + std::to_string(me_) + ": rank " + std::to_string(dst) + " has no window " +
                         std::to_string(window) + " (" + std::to_string(windows_.size()) + " exposed)");
    return windows_[size_t(window)].remote[size_t(dst)];
  }

  void release(LocalWindow& w) {
    for (auto& rw : w.remote) {
      if (rw.data_rkey) ucp_rkey_destroy(rw.data_rkey);
      if (rw.flags_rkey) ucp_rkey_destroy(rw.flags_rkey);
    }
    w.remote.clear();
    if (w.data_memh) ucp_mem_unmap(ctx_, w.data_memh);
    if (w.flags_memh) ucp_mem_unmap(ctx_, w.flags_memh);
    std::free(w.flags);
    w = LocalWindow{};
  }

  void start_ucx() {
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) ucx_failed("ucp_config_read", st);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA;
    params.estimated_num_eps = size_t(n_);
    st = ucp_init(&params, config, &ctx_);
    ucp_config_release(config);
    if (st != UCS_OK) ucx_failed("ucp_init", st);

    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    st = ucp_worker_create(ctx_, &wp, &worker_);
    if (st != UCS_OK) ucx_failed("ucp_worker_create", st);
    ucp_worker_attr_t attr{};
    attr.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
    st = ucp_worker_query(worker_, &attr);
    if (st != UCS_OK) ucx_failed("ucp_worker_query", st);
    if (attr.thread_mode != UCS_THREAD_MODE_MULTI)
      throw RuntimeError("UCX: this UCX build gives no thread-safe worker (UCS_THREAD_MODE_MULTI), which the "
                         "transport needs (stream threads share the worker)");

    ucp_address_t* address = nullptr;
    size_t address_len = 0;
    st = ucp_worker_get_address(worker_, &address, &address_len);
    if (st != UCS_OK) ucx_failed("ucp_worker_get_address", st);
    const std::string mine(reinterpret_cast<const char*>(address), address_len);
    ucp_worker_release_address(worker_, address);

    // The receive for abort messages is posted before anyone can send one.
    post_abort_receive();
    const auto all = control_->allgather(mine, "UCX worker address exchange", liveness());
    peers_.resize(size_t(n_));
    eps_.assign(size_t(n_), nullptr);
    for (int r = 0; r < n_; ++r) {
      peers_[size_t(r)] = {this, r};
      ucp_ep_params_t ep{};
      ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
      ep.address = reinterpret_cast<const ucp_address_t*>(all[size_t(r)].data());
      ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
      ep.err_handler.cb = [](void* arg, ucp_ep_h, ucs_status_t status) {
        auto* pc = static_cast<PeerContext*>(arg);
        pc->transport->peer_failed(pc->peer, status);
      };
      ep.err_handler.arg = &peers_[size_t(r)];
      st = ucp_ep_create(worker_, &ep, &eps_[size_t(r)]);
      if (st != UCS_OK) ucx_failed("ucp_ep_create to rank " + std::to_string(r), st);
    }

    for (auto* ep : eps_) emulated_.push_back(emulates_rma(ep));

    // Heartbeat words: every rank learns where its successor's is.
    heartbeat_word_ = static_cast<uint64_t*>(std::aligned_alloc(64, 64));
    if (!heartbeat_word_) throw RuntimeError("UCX transport: out of memory for the heartbeat word");
    *heartbeat_word_ = 0;
    std::string word;
    put_word(word, reinterpret_cast<uint64_t>(heartbeat_word_));
    word += map_and_pack(heartbeat_word_, 64, &heartbeat_memh_);
    const auto words = control_->allgather(word, "UCX heartbeat words", liveness());
    const int successor = (me_ + 1) % n_;
    size_t at = 0;
    successor_word_ = get_word(words[size_t(successor)], at);
    successor_rkey_ = unpack(successor, words[size_t(successor)], at, words[size_t(successor)].size() - at);
  }

  void post_abort_receive() {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;  // UCX 1.13 leaves recv_info unset on immediate completion
    p.recv_info.tag_info = &abort_info_;
    abort_req_ = ucp_tag_recv_nbx(worker_, abort_buf_, sizeof abort_buf_, kAbortKind, kKindMask, &p);
    if (abort_req_ == nullptr) {  // already here
      on_abort_message();
    } else if (UCS_PTR_IS_ERR(abort_req_)) {
      const ucs_status_t st = UCS_PTR_STATUS(abort_req_);
      abort_req_ = nullptr;
      ucx_failed("ucp_tag_recv_nbx (abort channel)", st);
    }
  }

  void on_abort_message() {
    const size_t len = std::min<size_t>(abort_info_.length, sizeof abort_buf_);
    fail("rank " + std::to_string(tag_source(abort_info_.sender_tag)) + " failed: " + std::string(abort_buf_, len), true);
  }

  // Progress thread only.
  void poll_abort_receive() {
    if (!abort_req_) return;
    const ucs_status_t st = ucp_tag_recv_request_test(abort_req_, &abort_info_);
    if (st == UCS_INPROGRESS) return;
    ucp_request_free(abort_req_);
    abort_req_ = nullptr;
    if (st == UCS_OK || st == UCS_ERR_MESSAGE_TRUNCATED) on_abort_message();
  }

  // Once the job failed the rank's memory may be freed any moment (its strategy unwinds), while
  // peers may still be putting into it: from then on nothing lands. Puts that would land go
  // unreceived, and the worker is not progressed (UCX's own RMA emulation lands puts in progress).
  void progress_loop() {
    Backoff backoff;
    while (!stop_.load()) {
      if (tell_others_.exchange(false) && claim_broadcast(failure_text())) broadcast_abort();
      if (failed_.load()) {
        stop_landing();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      const unsigned n = ucp_worker_progress(worker_);
      poll_abort_receive();
      fail_for_unreachable_peer();
      poll_emulated_puts();
      heartbeat();
      if (n)
        backoff.reset();
      else
        backoff.pause();
    }
    if (heartbeat_send_) ucp_request_free(heartbeat_send_);  // released by UCX once complete
    stop_landing();
    for (auto* req : acks_) ucp_request_free(req);
    acks_.clear();
  }

  void stop_landing() {
    abandon(put_header_req_);
    put_header_req_ = nullptr;
    for (auto& l : landing_) abandon(l.req);
    landing_.clear();
  }

  // Progress thread only: every heartbeat_period_s_ put a growing count into the successor's
  // heartbeat word (one put in flight at most); a predecessor whose count in this rank's word has
  // not changed for silence_limit_s_ fails the job. Puts, not messages: a rank that stops leaves
  // nothing unreceived behind.
  void heartbeat() {
    if (n_ < 2) return;  // heartbeats go on while closing: a successor may still be working
    const auto now = std::chrono::steady_clock::now();
    const int successor = (me_ + 1) % n_, predecessor = (me_ + n_ - 1) % n_;
    if (!heartbeat_started_) {
      heartbeat_started_ = true;
      last_heard_ = last_sent_ = now;
    }
    if (heartbeat_send_ && ucp_request_check_status(heartbeat_send_) != UCS_INPROGRESS) {
      ucp_request_free(heartbeat_send_);
      heartbeat_send_ = nullptr;
    }
    if (!heartbeat_send_ && std::chrono::duration<double>(now - last_sent_).count() >= heartbeat_period_s_) {
      ucp_request_param_t p{};
      ++heartbeats_;  // not touched again before the put completed
      heartbeat_header_ = PutHeader{kHeartbeatWindow, 0, 0, heartbeats_, 0, 0, 1, 0};
      ucs_status_ptr_t req =
          emulated_[size_t(successor)]
              ? ucp_tag_send_nbx(eps_[size_t(successor)], &heartbeat_header_, sizeof heartbeat_header_,
                                 put_tag(me_, kPutHeader, 0), &p)
              : ucp_put_nbx(eps_[size_t(successor)], &heartbeats_, sizeof heartbeats_, successor_word_, successor_rkey_, &p);
      heartbeat_send_ = UCS_PTR_IS_PTR(req) ? req : nullptr;
      last_sent_ = now;
    }
    const uint64_t heard = __atomic_load_n(heartbeat_word_, __ATOMIC_ACQUIRE);
    if (heard != heard_) {
      heard_ = heard;
      last_heard_ = now;
    }
    const double silent = std::chrono::duration<double>(now - last_heard_).count();
    if (silent > silence_limit_s_ && !closing_.load() && !failed_.load()) {
      fail("rank " + std::to_string(predecessor) + " stopped responding: no heartbeat from it for " +
           seconds_text(silent) + " (it hangs, was stopped, or lost its network)");
      if (claim_broadcast(failure_text())) broadcast_abort();
    }
  }

  // Best effort: peers that died fail their sends at once; a bounded wait for the others.
  void broadcast_abort() {
    std::vector<ucs_status_ptr_t> reqs;
    for (int r = 0; r < n_; ++r) {
      if (r == me_ || !eps_[size_t(r)]) continue;
      ucp_request_param_t p{};
      ucs_status_ptr_t req =
          ucp_tag_send_nbx(eps_[size_t(r)], abort_message_.data(), abort_message_.size(), abort_tag(me_), &p);
      if (req && !UCS_PTR_IS_ERR(req)) reqs.push_back(req);
    }
    const Deadline deadline(2.0);
    while (!reqs.empty() && !deadline.passed()) {
      ucp_worker_progress(worker_);
      for (size_t i = 0; i < reqs.size();) {
        if (ucp_request_check_status(reqs[i]) != UCS_INPROGRESS) {
          ucp_request_free(reqs[i]);
          reqs[i] = reqs.back();
          reqs.pop_back();
        } else {
          ++i;
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    for (auto* r : reqs) ucp_request_free(r);
  }

  void shut_down_ucx() {
    if (!worker_) {
      if (ctx_) ucp_cleanup(ctx_);
      return;
    }
    closing_.store(true);
    // A failed job's memory may be gone: the worker is not progressed any more (see progress_loop).
    const bool progress = !failed_.load();
    if (abort_req_) {
      ucp_request_cancel(worker_, abort_req_);
      const Deadline d(1.0);
      while (progress && ucp_request_check_status(abort_req_) == UCS_INPROGRESS && !d.passed()) ucp_worker_progress(worker_);
      ucp_request_free(abort_req_);
      abort_req_ = nullptr;
    }
    for (auto& w : windows_) release(w);
    windows_.clear();
    if (successor_rkey_) ucp_rkey_destroy(successor_rkey_);
    if (heartbeat_memh_) ucp_mem_unmap(ctx_, heartbeat_memh_);
    // Every rank passed quiesce (or the job failed): nothing is in flight that anyone waits for.
    std::vector<ucs_status_ptr_t> closing;
    for (auto& ep : eps_) {
      if (!ep) continue;
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t req = ucp_ep_close_nbx(ep, &p);
      if (req && !UCS_PTR_IS_ERR(req)) closing.push_back(req);
      ep = nullptr;
    }
    const Deadline d(2.0);
    for (auto* req : closing) {
      while (progress && ucp_request_check_status(req) == UCS_INPROGRESS && !d.passed()) ucp_worker_progress(worker_);
      ucp_request_free(req);
    }
    ucp_worker_destroy(worker_);
    ucp_cleanup(ctx_);
    std::free(heartbeat_word_);
  }

  std::shared_ptr<ControlPlane> control_;
  const int me_, n_;
  ucp_context_h ctx_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::vector<ucp_ep_h> eps_;
  std::vector<PeerContext> peers_;

  std::mutex windows_mu_;
  std::deque<LocalWindow> windows_;  // deque: elements stay put while others are added

  mutable std::mutex fail_mu_;
  std::atomic<bool> failed_{false};
  std::string failure_;
  bool abort_sent_ = false;
  bool failure_from_peer_ = false;
  std::string unreachable_;  // a peer's endpoint failed: the job fails after a grace
  std::chrono::steady_clock::time_point unreachable_since_;
  std::atomic<bool> tell_others_{false};
  std::string abort_message_;  // alive until the transport ends (sends may still read it)
  std::atomic<bool> closing_{false};

  char abort_buf_[kAbortMessageBytes];
  ucp_tag_recv_info_t abort_info_{};
  ucs_status_ptr_t abort_req_ = nullptr;

  // Heartbeats (progress thread only).
  double silence_limit_s_ = 30, heartbeat_period_s_ = 1;
  bool heartbeat_started_ = false;
  std::chrono::steady_clock::time_point last_heard_, last_sent_;
  uint64_t heartbeats_ = 0, heard_ = 0;
  ucs_status_ptr_t heartbeat_send_ = nullptr;
  uint64_t* heartbeat_word_ = nullptr;  // 64-byte aligned, written by the predecessor
  PutHeader heartbeat_header_{};
  ucp_mem_h heartbeat_memh_ = nullptr;
  uint64_t successor_word_ = 0;
  ucp_rkey_h successor_rkey_ = nullptr;

  // Emulated puts: per peer whether they are used; the target side (progress thread only).
  std::vector<bool> emulated_;
  std::atomic<uint32_t> next_put_id_{0};
  PutHeader put_header_{};
  ucp_tag_recv_info_t put_header_info_{};
  ucs_status_ptr_t put_header_req_ = nullptr;
  struct Landing {
    ucs_status_ptr_t req;
    uint64_t* flag;
    uint64_t value;
    int source;
    uint32_t id;
    bool ack;
  };
  std::vector<Landing> landing_;
  std::vector<ucs_status_ptr_t> acks_;

  std::atomic<bool> stop_{false};
  std::thread progress_;
};

}  // namespace

std::shared_ptr<DataPlane> make_ucx_transport(std::shared_ptr<ControlPlane> control) {
  return std::make_shared<UcxTransport>(std::move(control));
}

}  // namespace joinlab
