// Running a planned experiment, point after point: what `joinlab run` does for one file and
// `joinlab reproduce` for each figure, so that both run, label, trace and write CSVs alike.
#pragma once
#include <string>
#include <vector>

#include "core/experiment/config.hpp"
#include "core/experiment/progress.hpp"
#include "core/experiment/report.hpp"

namespace joinlab {

struct PlanRun {
  std::string csv;         // rewritten after each point: a failing sweep keeps its finished rows
  std::string trace_base;  // a trace per point, <trace_base>[-<i>].trace.json; "": none
  bool reporting = true;   // this process writes the files (rank 0 under mpirun)
  ResultsTable* table = nullptr;    // prints each row as it finishes
  ProgressTicker* ticker = nullptr;
  int first = 0, total = 0;  // the ticker counts the plan's points as first+1.. of total (0: the plan's own)
};

// Runs every point of the plan in order. An error of a point is rethrown with the point named,
// keeping its kind (exit code).
std::vector<ResultRow> run_plan(const ExperimentPlan& plan, const PlanRun& how);

// Creates the folder (and its parents); InputError naming `what` (the key or option) if it cannot.
void make_output_dir(const std::string& dir, const std::string& what);

// A name with anything but letters, digits and -_.+ turned into '_', for file names.
std::string file_safe(const std::string& name);

}  // namespace joinlab
