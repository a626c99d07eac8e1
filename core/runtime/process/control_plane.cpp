#include "core/runtime/process/control_plane.hpp"

#include <cstring>

#include "core/common/error.hpp"
#include "core/runtime/transport.hpp"

namespace joinlab {

std::string words_to_bytes(const std::vector<uint64_t>& words) {
  std::string b(words.size() * sizeof(uint64_t), '\0');
  if (!words.empty()) std::memcpy(b.data(), words.data(), b.size());
  return b;
}

std::vector<uint64_t> bytes_to_words(const std::string& bytes) {
  if (bytes.size() % sizeof(uint64_t))
    throw RuntimeError("control plane: " + std::to_string(bytes.size()) + " bytes are not a whole number of words");
  std::vector<uint64_t> w(bytes.size() / sizeof(uint64_t));
  if (!w.empty()) std::memcpy(w.data(), bytes.data(), bytes.size());
  return w;
}

std::vector<uint64_t> allgather_words(ControlPlane& plane, const std::vector<uint64_t>& mine,
                                      const std::string& what, const ControlPlane::Liveness& alive) {
  std::vector<uint64_t> out;
  for (auto& part : plane.allgather(words_to_bytes(mine), what, alive)) {
    auto w = bytes_to_words(part);
    out.insert(out.end(), w.begin(), w.end());
  }
  return out;
}

namespace {

// Bytes travel as words: each rank contributes [length in bytes, the bytes padded to words].
class InProcessControlPlane final : public ControlPlane {
 public:
  explicit InProcessControlPlane(std::shared_ptr<Transport> ep) : ep_(std::move(ep)) {}
  int rank() const override { return ep_->rank(); }
  int size() const override { return ep_->size(); }
  double timeout_s() const override { return ep_->timeout_s(); }

  std::vector<std::string> allgather(const std::string& mine, const std::string&, const Liveness& alive) override {
    alive();
    std::string padded = mine;
    padded.resize((mine.size() + 7) / 8 * 8, '\0');
    std::vector<uint64_t> words = bytes_to_words(padded);
    words.insert(words.begin(), uint64_t(mine.size()));
    const std::vector<uint64_t> all = ep_->allgather(words);
    std::vector<std::string> out;
    for (size_t i = 0; i < all.size();) {
      const uint64_t len = all[i++];
      const size_t n = size_t((len + 7) / 8);
      std::string b(reinterpret_cast<const char*>(all.data() + i), size_t(len));
      out.push_back(std::move(b));
      i += n;
    }
    if (int(out.size()) != size())
      throw RuntimeError("control plane: allgather returned " + std::to_string(out.size()) + " parts for " +
                         std::to_string(size()) + " ranks");
    return out;
  }
  std::vector<std::string> gather_to_root(const std::string& mine, const std::string& what,
                                          const Liveness& alive) override {
    auto all = allgather(mine, what, alive);  // threads share memory: gathering everywhere is free
    if (rank() != 0) all.clear();
    return all;
  }
  void barrier(const std::string&, const Liveness& alive) override {
    alive();
    ep_->barrier();
  }
  void abort(const std::string& why) override { ep_->abort(why); }

 private:
  std::shared_ptr<Transport> ep_;
};

}  // namespace

std::shared_ptr<ControlPlane> make_in_process_control_plane(std::shared_ptr<Transport> endpoint) {
  return std::make_shared<InProcessControlPlane>(std::move(endpoint));
}

}  // namespace joinlab
