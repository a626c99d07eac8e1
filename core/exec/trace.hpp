// Per-rank records of what ran when: phases (strategy-level) and operator/transfer spans
// (per stream). Written as Chrome trace-event JSON by core/experiment/trace_writer.
#pragma once
#include <mutex>
#include <string>
#include <vector>

#include "core/exec/ops.hpp"

namespace joinlab {

struct PhaseRecord {
  std::string name;
  double begin = 0, end = 0;  // seconds on the rank's clock
};

struct TraceSpan {
  int rank = 0;
  std::string track;  // "stream 0", "copy", "link gpu0->gpu1", ...
  OpParams params;
  double begin = 0, end = 0;  // seconds on the rank's clock
};

// Thread-safe: CPU stream workers and transport threads append concurrently.
class TraceLog {
 public:
  void add(TraceSpan s) {
    std::lock_guard<std::mutex> g(mu_);
    spans_.push_back(std::move(s));
  }
  std::vector<TraceSpan> spans() const {
    std::lock_guard<std::mutex> g(mu_);
    return spans_;
  }
  // The spans, leaving the log empty (no copy: a simulation's log holds up to a million).
  std::vector<TraceSpan> take() {
    std::lock_guard<std::mutex> g(mu_);
    std::vector<TraceSpan> out;
    out.swap(spans_);
    return out;
  }
  void clear() {
    std::lock_guard<std::mutex> g(mu_);
    spans_.clear();
  }
 private:
  mutable std::mutex mu_;
  std::vector<TraceSpan> spans_;
};

}  // namespace joinlab
