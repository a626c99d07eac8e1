#include "core/experiment/plan_run.hpp"

#include <cctype>
#include <filesystem>
#include <iostream>
#include <mutex>

#include "core/common/error.hpp"
#include "core/experiment/environment.hpp"
#include "core/experiment/trace_writer.hpp"

namespace joinlab {

namespace {

// Re-throws the exception being handled with `prefix` added, keeping its kind (exit code).
[[noreturn]] void rethrow_with(const std::string& prefix) {
  try {
    throw;
  } catch (const InputError& e) {
    throw InputError(prefix + e.what());
  } catch (const VerificationError& e) {
    throw VerificationError(prefix + e.what());
  } catch (const std::exception& e) {
    throw RuntimeError(prefix + e.what());
  }
}

}  // namespace

std::string file_safe(const std::string& name) {
  std::string s;
  for (char c : name)
    s += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '+' ? c : '_';
  return s.empty() ? "experiment" : s;
}

void make_output_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    throw InputError(what + " = " + dir + ": cannot create the folder (" +
                     (ec ? ec.message() : std::string("exists and is not a folder")) + ")");
}

std::vector<ResultRow> run_plan(const ExperimentPlan& plan, const PlanRun& how) {
  const int n = int(plan.points.size());
  const std::string commit = git_commit();
  std::vector<ResultRow> rows;
  for (int i = 0; i < n; ++i) {
    const PlannedPoint& pp = plan.points[size_t(i)];
    if (how.ticker) how.ticker->point(how.first + i, how.total > 0 ? how.total : n, pp.label());
    ResultRow row;
    try {
      row.outcome = run_point(pp.run, [&](int r, int repeats) {
        if (how.ticker) how.ticker->repeat(r, repeats);
      });
    } catch (...) {
      rethrow_with(n == 1 ? "" : "point " + std::to_string(i + 1) + "/" + std::to_string(n) + " (" + pp.label() + "): ");
    }
    row.experiment = plan.name;
    row.point = i + 1;
    row.swept = pp.swept;
    row.hardware = describe_hardware(pp.run);
    row.date = utc_timestamp();
    row.git_commit = commit;
    if (!how.trace_base.empty()) {
      row.trace_file = how.trace_base + (n == 1 ? "" : "-" + std::to_string(i + 1)) + ".trace.json";
      if (how.reporting) {
        const TraceWritten w = write_chrome_trace_file(row.trace_file, row.outcome,
                                                       plan.name + (row.swept.empty() ? "" : " " + pp.label()),
                                                       pp.run.trace_max_bytes);
        if (w.left_out) {
          std::lock_guard<std::mutex> g(console_mutex());
          std::cerr << "joinlab: " << row.trace_file << ": " << w.left_out << " of " << (w.spans + w.left_out)
                    << " spans left out (those from " << w.cut_s * 1e3 << " ms on), to stay within "
                    << "experiment.trace_max_bytes = " << pp.run.trace_max_bytes << " (0: no limit)\n";
        }
      }
    }
    row.outcome.trace.clear();  // written; the CSV does not need it
    row.outcome.trace.shrink_to_fit();
    if (how.table) {
      std::lock_guard<std::mutex> g(console_mutex());
      how.table->print_row(row);
    }
    rows.push_back(std::move(row));
    if (how.reporting && !how.csv.empty()) write_csv(how.csv, rows);
  }
  return rows;
}

}  // namespace joinlab
