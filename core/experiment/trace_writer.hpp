// Chrome trace-event JSON of one run (open in chrome://tracing or ui.perfetto.dev): one process
// per rank; in it one track for the strategy's phases and one per stream or link the backend
// recorded; one "X" (complete) event per phase and per operator/transfer, whose args are the
// operator's parameters (OpParams), so calibration can read them back. Real and simulated runs
// are written alike; times are microseconds from the start of the run.
#pragma once
#include <ostream>
#include <string>

#include "core/experiment/runner.hpp"

namespace joinlab {

// What a trace holds of the run's spans. Within max_bytes (0: no limit) it holds every phase and
// the spans that began first, over all ranks and tracks (the whole cluster up to a time); the
// others are left out, and a metadata event "trace_truncated" says how many, from when on, and
// the key that sets the limit.
struct TraceWritten {
  size_t spans = 0, left_out = 0;
  double cut_s = 0;  // spans that began at or after this (seconds from the start) are left out
};
TraceWritten write_chrome_trace(std::ostream& out, const RunOutcome& run, const std::string& title,
                                uint64_t max_bytes = 0);
// Throws RuntimeError naming the path if it cannot be written.
TraceWritten write_chrome_trace_file(const std::string& path, const RunOutcome& run, const std::string& title,
                                     uint64_t max_bytes = 0);

}  // namespace joinlab
