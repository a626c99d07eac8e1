#include "core/experiment/phase_limits.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>
#include <vector>

#include "core/exec/ops.hpp"
#include "core/strategies/strategy.hpp"

namespace joinlab {

namespace {

bool is_transfer(OpKind k) { return k == OpKind::Copy || k == OpKind::Send || k == OpKind::Recv || k == OpKind::Put; }

// The resource a span occupies, or "" for a stream's transfer (its link track holds it, where the
// backend traces links).
std::string resource_of(const TraceSpan& s) {
  if (s.track.rfind("link ", 0) == 0) return s.track.substr(5);
  if (s.track.rfind("stream", 0) == 0 && !is_transfer(s.params.kind)) return "compute";
  return "";
}

// Length of the union of the intervals (sorted by begin) within [lo, hi].
double covered(const std::vector<std::pair<double, double>>& spans, double lo, double hi) {
  double total = 0, end = lo;
  for (auto& [b, e] : spans) {
    const double from = std::max(b, end), to = std::min(e, hi);
    if (to > from) total += to - from;
    end = std::max(end, std::min(e, hi));
  }
  return total;
}

}  // namespace

std::vector<PhaseLimit> phase_limits(const std::vector<TraceSpan>& trace,
                                     const std::vector<std::vector<PhaseRecord>>& rank_phases) {
  // rank -> resource -> its spans, so that each phase takes the union over one rank's resource.
  std::vector<std::map<std::string, std::vector<std::pair<double, double>>>> by_resource(rank_phases.size());
  for (auto& s : trace) {
    std::string r = resource_of(s);
    if (!r.empty() && s.rank >= 0 && size_t(s.rank) < by_resource.size()) by_resource[size_t(s.rank)][r].push_back({s.begin, s.end});
  }
  for (auto& resources : by_resource)
    for (auto& [r, spans] : resources) std::sort(spans.begin(), spans.end());
  std::vector<PhaseLimit> out;
  auto entry = [&](const std::string& name) -> PhaseLimit& {
    for (auto& l : out)
      if (l.phase == name) return l;
    out.push_back({name, "", 0});
    return out.back();
  };
  for (size_t rank = 0; rank < rank_phases.size(); ++rank) {
    for (auto& ph : rank_phases[rank]) {
      if (!timed_phase(ph.name)) continue;
      PhaseLimit& limit = entry(ph.name);
      const double length = ph.end - ph.begin;
      if (length <= 0) continue;
      for (auto& [resource, spans] : by_resource[rank]) {
        const double busy = covered(spans, ph.begin, ph.end) / length;
        if (busy > limit.busy) limit = {ph.name, resource, busy};
      }
    }
  }
  return out;
}

std::string format_phase_limits(const std::vector<PhaseLimit>& limits) {
  std::string s;
  for (auto& l : limits) {
    if (l.resource.empty()) continue;
    char share[16];
    std::snprintf(share, sizeof share, " %.0f%%", 100 * std::min(l.busy, 1.0));
    s += (s.empty() ? "" : ";") + l.phase + "=" + l.resource + share;
  }
  return s;
}

}  // namespace joinlab
