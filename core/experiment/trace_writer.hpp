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

void write_chrome_trace(std::ostream& out, const RunOutcome& run, const std::string& title);
// Throws RuntimeError naming the path if it cannot be written.
void write_chrome_trace_file(const std::string& path, const RunOutcome& run, const std::string& title);

}  // namespace joinlab
