// Test-only fault injection into the data plane of one rank, from the environment:
//
//   JOINLAB_FAULT=<action>:rank=<r>:op=<n>      during the run
//   JOINLAB_FAULT=<action>:rank=<r>:at=<point>  during start-up (kill or stall)
//
// The first counts rank r's data-plane operations that move bytes (sends and puts with data,
// 1-based) and at the n-th one:
//   kill     the process kills itself (SIGKILL): a rank that dies mid-run;
//   stall    the process stops itself (SIGSTOP): a rank that hangs;
//   corrupt  the put (or send) carries a copy of its bytes with one byte flipped: a chunk
//            corrupted in flight, which a checksum must catch.
// The second acts at a point of rank r's start-up: startup (before MPI_Init_thread), mpi_init
// (5 ms into it, from another thread), wireup (before the data plane's wireup).
// Nothing is injected without the variable; a malformed value is an error naming it.
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <regex>
#include <thread>
#include <vector>

#include "core/common/error.hpp"
#include "core/runtime/launcher.hpp"
#include "core/runtime/process/data_plane.hpp"
#include "core/runtime/process/launch_guard.hpp"

namespace joinlab {

namespace {

enum class FaultAction { Kill, Stall, Corrupt };

struct FaultPlan {
  FaultAction action = FaultAction::Kill;
  int rank = -1;
  uint64_t op = 0;    // the n-th data-plane operation, or 0 ...
  std::string point;  // ... a start-up point
};

bool parse_fault(const char* text, FaultPlan& plan) {
  if (!text || !*text) return false;
  static const std::regex form("(kill|stall|corrupt):rank=([0-9]+):(op=([0-9]+)|at=(startup|mpi_init|wireup))");
  std::cmatch m;
  if (!std::regex_match(text, m, form) || (m[4].matched && std::stoull(m[4].str()) == 0) ||
      (m[5].matched && m[1].str() == "corrupt"))
    throw InputError(std::string("JOINLAB_FAULT = '") + text +
                     "': expected kill|stall|corrupt:rank=<rank>:op=<n >= 1> or kill|stall:rank=<rank>:at="
                     "startup|mpi_init|wireup (test-only fault injection)");
  plan.action = m[1].str() == "kill" ? FaultAction::Kill : m[1].str() == "stall" ? FaultAction::Stall : FaultAction::Corrupt;
  plan.rank = std::stoi(m[2].str());
  if (m[4].matched) plan.op = std::stoull(m[4].str());
  if (m[5].matched) plan.point = m[5].str();
  return true;
}

class FaultyDataPlane final : public DataPlane {
 public:
  FaultyDataPlane(std::shared_ptr<DataPlane> inner, FaultPlan plan) : inner_(std::move(inner)), plan_(plan) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  double timeout_s() const override { return inner_->timeout_s(); }
  void send(int dst, int tag, const void* data, uint64_t bytes) override {
    std::vector<char> copy;
    inner_->send(dst, tag, intercept(data, bytes, copy), bytes);
  }
  void recv(int src, int tag, void* data, uint64_t bytes) override { inner_->recv(src, tag, data, bytes); }
  int expose(void* base, uint64_t bytes, uint32_t flags) override { return inner_->expose(base, bytes, flags); }
  void put(int dst, int window, uint64_t off, const void* data, uint64_t bytes, uint32_t flag,
           uint64_t value) override {
    std::vector<char> copy;
    inner_->put(dst, window, off, intercept(data, bytes, copy), bytes, flag, value);
  }
  uint64_t read_flag(int window, uint32_t flag) override { return inner_->read_flag(window, flag); }
  std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) override { return inner_->allgather(mine); }
  void barrier() override { inner_->barrier(); }
  void abort(const std::string& why) override { inner_->abort(why); }
  void check_alive() const override { inner_->check_alive(); }
  void quiesce() override { inner_->quiesce(); }

 private:
  // The bytes to hand on: `data`, or (at the chosen operation) the faulty version of them.
  const void* intercept(const void* data, uint64_t bytes, std::vector<char>& copy) {
    if (!bytes) return data;
    {
      std::lock_guard<std::mutex> g(mu_);
      if (++count_ != plan_.op) return data;
    }
    switch (plan_.action) {
      case FaultAction::Kill:
        std::raise(SIGKILL);
        break;
      case FaultAction::Stall:
        std::raise(SIGSTOP);
        break;
      case FaultAction::Corrupt:
        copy.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
        copy[size_t(bytes - 1)] ^= 0x5a;  // the last byte: the payload, past any header
        return copy.data();
    }
    return data;
  }

  std::shared_ptr<DataPlane> inner_;
  const FaultPlan plan_;
  std::mutex mu_;
  uint64_t count_ = 0;
};

}  // namespace

std::shared_ptr<DataPlane> with_injected_faults(std::shared_ptr<DataPlane> inner, int rank) {
  FaultPlan plan;
  if (!parse_fault(std::getenv("JOINLAB_FAULT"), plan) || plan.rank != rank || plan.op == 0) return inner;
  return std::make_shared<FaultyDataPlane>(std::move(inner), plan);
}

void inject_startup_fault(const std::string& point) {
  FaultPlan plan;
  if (!parse_fault(std::getenv("JOINLAB_FAULT"), plan) || plan.rank != launched_rank() || plan.point != point) return;
  const int sig = plan.action == FaultAction::Kill ? SIGKILL : SIGSTOP;
  if (point == "mpi_init") {  // the caller is about to block in MPI_Init_thread
    std::thread([sig] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::raise(sig);
    }).detach();
    return;
  }
  std::raise(sig);
}

}  // namespace joinlab
