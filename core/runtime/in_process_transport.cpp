#include "core/runtime/in_process_transport.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "core/common/error.hpp"
#include "core/runtime/polling.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/host_memory.hpp"

namespace joinlab {

namespace {

using Clock = std::chrono::steady_clock;

struct Message {
  // Uninitialized on purpose (overwritten at once); huge pages for large messages.
  std::unique_ptr<char, void (*)(void*)> data{nullptr, cpu::host_free};
  uint64_t bytes = 0;
};

struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<Message>> queues;  // (src, tag) -> messages in order
};

struct Window {
  char* base = nullptr;
  uint64_t bytes = 0;
  uint32_t nflags = 0;
  std::unique_ptr<std::atomic<uint64_t>[]> flags;
};
struct RankWindows {
  std::mutex mu;
  std::deque<Window> windows;  // deque: references stay valid while others are added
};

class Fabric {
 public:
  Fabric(int ranks, double timeout_s, int copy_threads)
      : n_(ranks), timeout_s_(timeout_s), copy_threads_(copy_threads),
        mailboxes_(size_t(ranks)), windows_(size_t(ranks)), slots_(size_t(ranks)),
        present_(size_t(ranks), false) {}

  int size() const { return n_; }
  double timeout_s() const { return timeout_s_; }

  void send(int src, int dst, int tag, const void* data, uint64_t bytes) {
    check_peer(src, dst, "send to");
    check_alive();
    Message m;
    m.bytes = bytes;
    m.data.reset(static_cast<char*>(cpu::host_alloc(bytes)));
    cpu::parallel_copy(m.data.get(), data, bytes, copy_threads_);
    Mailbox& box = mailboxes_[size_t(dst)];
    {
      std::lock_guard<std::mutex> g(box.mu);
      box.queues[{src, tag}].push_back(std::move(m));
    }
    box.cv.notify_all();
  }

  void recv(int dst, int src, int tag, void* data, uint64_t bytes) {
    check_peer(dst, src, "recv from");
    Mailbox& box = mailboxes_[size_t(dst)];
    std::unique_lock<std::mutex> lk(box.mu);
    auto& q = box.queues[{src, tag}];
    wait(lk, box.cv, [&] { return !q.empty(); }, [&] {
      return "rank " + std::to_string(dst) + ": recv from rank " + std::to_string(src) + " tag " +
             std::to_string(tag) + " (" + std::to_string(bytes) + " bytes)";
    });
    Message m = std::move(q.front());
    q.pop_front();
    lk.unlock();
    if (m.bytes != bytes)
      throw RuntimeError("rank " + std::to_string(dst) + ": recv from rank " + std::to_string(src) +
                         " tag " + std::to_string(tag) + " expected " + std::to_string(bytes) +
                         " bytes, the message has " + std::to_string(m.bytes));
    cpu::parallel_copy(data, m.data.get(), bytes, copy_threads_);
  }

  int expose(int rank, void* base, uint64_t bytes, uint32_t flags) {
    int id;
    {
      RankWindows& rw = windows_[size_t(rank)];
      std::lock_guard<std::mutex> g(rw.mu);
      id = int(rw.windows.size());
      Window& w = rw.windows.emplace_back();
      w.base = static_cast<char*>(base);
      w.bytes = bytes;
      w.nflags = flags;
      w.flags.reset(new std::atomic<uint64_t>[flags ? flags : 1]);
      for (uint32_t f = 0; f < flags; ++f) w.flags[f].store(0);
    }
    // Nobody may put into a window before every rank registered it. Window ids agree because
    // expose is collective (every rank calls it in the same order).
    collective(rank, {}, "expose");
    return id;
  }

  void put(int src, int dst, int window, uint64_t off, const void* data, uint64_t bytes,
           uint32_t flag, uint64_t value) {
    check_peer(src, dst, "put to");
    check_alive();
    Window& w = window_of(dst, window, src);
    if (off + bytes > w.bytes || off + bytes < off)
      throw RuntimeError("rank " + std::to_string(src) + ": put of " + std::to_string(bytes) +
                         " bytes at offset " + std::to_string(off) + " overruns rank " +
                         std::to_string(dst) + "'s window " + std::to_string(window) + " of " +
                         std::to_string(w.bytes) + " bytes");
    if (flag >= w.nflags)
      throw RuntimeError("rank " + std::to_string(src) + ": put sets flag " + std::to_string(flag) +
                         " of rank " + std::to_string(dst) + "'s window " + std::to_string(window) +
                         ", which has " + std::to_string(w.nflags) + " flags");
    cpu::parallel_copy(w.base + off, data, bytes, copy_threads_);
    w.flags[flag].store(value, std::memory_order_release);
  }

  uint64_t read_flag(int rank, int window, uint32_t flag) {
    Window& w = window_of(rank, window, rank);
    if (flag >= w.nflags)
      throw RuntimeError("rank " + std::to_string(rank) + ": read_flag " + std::to_string(flag) +
                         " of window " + std::to_string(window) + ", which has " +
                         std::to_string(w.nflags) + " flags");
    return w.flags[flag].load(std::memory_order_acquire);
  }

  // allgather and barrier (an allgather of nothing). `what` names it in errors.
  std::vector<uint64_t> collective(int rank, const std::vector<uint64_t>& mine, const char* what) {
    std::unique_lock<std::mutex> lk(coll_mu_);
    check_alive();
    const uint64_t gen = generation_;
    slots_[size_t(rank)] = mine;
    present_[size_t(rank)] = true;
    if (++arrived_ == n_) {
      auto all = std::make_shared<std::vector<uint64_t>>();
      for (auto& s : slots_) all->insert(all->end(), s.begin(), s.end());
      result_ = all;
      arrived_ = 0;
      present_.assign(size_t(n_), false);
      ++generation_;
      coll_cv_.notify_all();
      return *all;
    }
    // The result of generation `gen` stays until every rank read it: the next generation cannot
    // complete without this rank.
    wait(lk, coll_cv_, [&] { return generation_ != gen; }, [&] {
      std::string missing;
      for (int r = 0; r < n_; ++r)
        if (!present_[size_t(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      return "rank " + std::to_string(rank) + ": " + what + " (waiting for rank(s) " + missing + ")";
    });
    return *result_;
  }

  void abort(int rank, const std::string& why) {
    {
      std::lock_guard<std::mutex> g(fail_mu_);
      if (failed_.load()) return;
      failure_ = "rank " + std::to_string(rank) + " failed: " + why;
      failed_.store(true);
    }
    // Wake every waiter; each re-checks failed_ under its own lock, so no wake-up is lost.
    for (auto& box : mailboxes_) {
      std::lock_guard<std::mutex> g(box.mu);
      box.cv.notify_all();
    }
    std::lock_guard<std::mutex> g(coll_mu_);
    coll_cv_.notify_all();
  }

  void check_alive() const {
    if (!failed_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> g(fail_mu_);
    throw RuntimeError(failure_);
  }

 private:
  void check_peer(int me, int peer, const char* what) const {
    if (peer < 0 || peer >= n_)
      throw RuntimeError("rank " + std::to_string(me) + ": " + what + " rank " + std::to_string(peer) +
                         ", but ranks are 0.." + std::to_string(n_ - 1));
  }

  Window& window_of(int rank, int window, int asker) {
    RankWindows& rw = windows_[size_t(rank)];
    std::lock_guard<std::mutex> g(rw.mu);
    if (window < 0 || size_t(window) >= rw.windows.size())
      throw RuntimeError("rank " + std::to_string(asker) + ": rank " + std::to_string(rank) +
                         " has no window " + std::to_string(window) + " (it exposed " +
                         std::to_string(rw.windows.size()) + ")");
    return rw.windows[size_t(window)];
  }

  // Waits (bounded) until ready(); throws on abort or timeout, naming describe().
  template <class Ready, class Describe>
  void wait(std::unique_lock<std::mutex>& lk, std::condition_variable& cv, Ready ready,
            Describe describe) {
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(timeout_s_));
    const bool ok = cv.wait_until(lk, deadline, [&] { return failed_.load() || ready(); });
    if (failed_.load()) {
      lk.unlock();
      check_alive();
    }
    if (!ok) throw RuntimeError(describe() + " timed out after " + seconds_text(timeout_s_));
  }

  const int n_;
  const double timeout_s_;
  const int copy_threads_;
  std::vector<Mailbox> mailboxes_;
  std::vector<RankWindows> windows_;

  std::mutex coll_mu_;
  std::condition_variable coll_cv_;
  uint64_t generation_ = 0;
  int arrived_ = 0;
  std::vector<std::vector<uint64_t>> slots_;
  std::vector<bool> present_;
  std::shared_ptr<const std::vector<uint64_t>> result_;

  mutable std::mutex fail_mu_;
  std::atomic<bool> failed_{false};
  std::string failure_;
};

class InProcessEndpoint final : public Transport {
 public:
  InProcessEndpoint(std::shared_ptr<Fabric> f, int rank) : f_(std::move(f)), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return f_->size(); }
  double timeout_s() const override { return f_->timeout_s(); }
  void send(int dst, int tag, const void* data, uint64_t bytes) override { f_->send(rank_, dst, tag, data, bytes); }
  void recv(int src, int tag, void* data, uint64_t bytes) override { f_->recv(rank_, src, tag, data, bytes); }
  int expose(void* base, uint64_t bytes, uint32_t flags) override { return f_->expose(rank_, base, bytes, flags); }
  void put(int dst, int window, uint64_t off, const void* data, uint64_t bytes, uint32_t flag,
           uint64_t value) override {
    f_->put(rank_, dst, window, off, data, bytes, flag, value);
  }
  uint64_t read_flag(int window, uint32_t flag) override { return f_->read_flag(rank_, window, flag); }
  std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) override {
    return f_->collective(rank_, mine, "allgather");
  }
  void barrier() override { f_->collective(rank_, {}, "barrier"); }
  void abort(const std::string& why) override { f_->abort(rank_, why); }
  void check_alive() const override { f_->check_alive(); }

 private:
  std::shared_ptr<Fabric> f_;
  int rank_;
};

}  // namespace

std::vector<std::shared_ptr<Transport>> make_in_process_transports(int ranks, double timeout_s,
                                                                   int copy_threads) {
  if (ranks < 1) throw RuntimeError("in-process transport: needs at least one rank, got " + std::to_string(ranks));
  auto fabric = std::make_shared<Fabric>(ranks, timeout_s, std::max(1, copy_threads));
  std::vector<std::shared_ptr<Transport>> eps;
  for (int r = 0; r < ranks; ++r) eps.push_back(std::make_shared<InProcessEndpoint>(fabric, r));
  return eps;
}

}  // namespace joinlab
