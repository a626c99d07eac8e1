// Outputs of `joinlab run`: the results table on stdout (one row per run point, printed as it
// finishes) and the CSV (one row per run point, every parameter and measurement). The Chrome
// trace is in trace_writer.hpp.
#pragma once
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/experiment/runner.hpp"

namespace joinlab {

// A run point's sweep values, (key, value) in file order.
using SweepValues = std::vector<std::pair<std::string, std::string>>;
// "workload.r.rows=2^24 strategy.fanout=256"; "" without a sweep.
std::string sweep_label(const SweepValues& swept);

// A finished run point with the labels its CSV row carries. outcome.trace is not kept here
// (the trace writer consumes it).
struct ResultRow {
  std::string experiment;
  int point = 1;              // 1-based index in the sweep
  SweepValues swept;          // this point's sweep values, none without a sweep
  RunOutcome outcome;
  std::string hardware;       // what it ran on: CPU model, GPU name, or "simulated (profile x)"
  std::string trace_file;
  std::string date;           // UTC, ISO 8601
  std::string git_commit;
};

// What the run is on, for the hardware column: the host CPU for cpu, GPU 0 for cuda, the
// profile in simulation.
std::string describe_hardware(const RunPoint& p);

class ResultsTable {
 public:
  // with_point: add a last column with the sweep values of each row.
  ResultsTable(std::ostream& out, bool with_point) : out_(out), with_point_(with_point) {}
  void print_header();
  void print_row(const ResultRow& row);

 private:
  std::ostream& out_;
  bool with_point_;
};

// The CSV text: a header, then one line per row. Each swept key gets a column of its own, named
// by the key (cluster.nodes, profile.link.nic.bw), and phase times one column each
// (phase_<name>_s), for every key or phase name seen in any row, in order of first appearance.
std::string csv_text(const std::vector<ResultRow>& rows);
// Writes csv_text to path (replacing it). Throws RuntimeError naming the path if it cannot.
void write_csv(const std::string& path, const std::vector<ResultRow>& rows);

}  // namespace joinlab
