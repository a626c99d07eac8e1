// Which resource limits each phase of a run: from the run's trace, the resource busiest during
// the phase. A resource is a trace track's family: "compute" (operators on the rank's streams),
// or a link ("network", "nvlink", "pcie h2d", "pcie d2h", "p2p", "host memory", "device").
// Busy means the union of its spans within the phase, on the rank where that share is largest.
#pragma once
#include <string>
#include <vector>

#include "core/exec/trace.hpp"

namespace joinlab {

struct PhaseLimit {
  std::string phase;
  std::string resource;  // "" where the trace has no span in the phase (or was cut before it)
  double busy = 0;       // its busy share of the phase, 0..1
};

// One entry per phase name of rank_phases, in order of first appearance; generate and verify
// phases are left out (not part of the measured total).
std::vector<PhaseLimit> phase_limits(const std::vector<TraceSpan>& trace,
                                     const std::vector<std::vector<PhaseRecord>>& rank_phases);

// "partition=compute 97%;shuffle=network 88%" (phases without a resource are left out).
std::string format_phase_limits(const std::vector<PhaseLimit>& limits);

}  // namespace joinlab
