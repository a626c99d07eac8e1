// Test-only fault injection into the data plane of one rank, from the environment:
//
//   JOINLAB_FAULT=<action>:rank=<r>:op=<n>
//
// counts rank r's data-plane operations that move bytes (sends and puts with data, 1-based) and
// at the n-th one:
//   kill     the process kills itself (SIGKILL): a rank that dies mid-run;
//   stall    the process stops itself (SIGSTOP): a rank that hangs;
//   corrupt  the put (or send) carries a copy of its bytes with one byte flipped: a chunk
//            corrupted in flight, which a checksum must catch.
// Nothing is injected without the variable; a malformed value is an error naming it.
#include <csignal>
#include <cstdlib>
#include <mutex>
#include <regex>
#include <vector>

#include "core/common/error.hpp"
#include "core/runtime/process/data_plane.hpp"

namespace joinlab {

namespace {

enum class FaultAction { Kill, Stall, Corrupt };

struct FaultPlan {
  FaultAction action = FaultAction::Kill;
  int rank = -1;
  uint64_t op = 1;
};

bool parse_fault(const char* text, FaultPlan& plan) {
  if (!text || !*text) return false;
  static const std::regex form("(kill|stall|corrupt):rank=([0-9]+):op=([0-9]+)");
  std::cmatch m;
  if (!std::regex_match(text, m, form) || std::stoull(m[3].str()) == 0)
    throw InputError(std::string("JOINLAB_FAULT = '") + text +
                     "': expected kill|stall|corrupt:rank=<rank>:op=<n >= 1> (test-only fault injection)");
  plan.action = m[1].str() == "kill" ? FaultAction::Kill : m[1].str() == "stall" ? FaultAction::Stall : FaultAction::Corrupt;
  plan.rank = std::stoi(m[2].str());
  plan.op = std::stoull(m[3].str());
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
  if (!parse_fault(std::getenv("JOINLAB_FAULT"), plan) || plan.rank != rank) return inner;
  return std::make_shared<FaultyDataPlane>(std::move(inner), plan);
}

}  // namespace joinlab
