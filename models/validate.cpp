// `joinlab validate FILE`: every point of an experiment runs on a real backend and in simulation
// with a profile of that hardware; the table gives measured vs predicted time per phase and in
// total, with the relative error.
//
//   joinlab validate FILE [--backend cpu|cuda] [--profile P] [--max-error X] [--max-phase-error Y]
//                         [--section.key=value ...]
//   joinlab validate FILE --measured CSV [--out OUT.csv] [--profile P] [--max-error X]
//                         [--max-phase-error Y] [overrides]
//
// --profile defaults to the experiment's cluster.profile. --max-error (a fraction, e.g. 0.1)
// makes the command fail (exit 3) when a total is predicted worse than that; --max-phase-error
// the same for every phase (docs/validation.md uses totals within 10%, phases within 20%).
//
// With --measured, nothing runs on the hardware: the measurements are the rows of a CSV that
// `joinlab run FILE` wrote on it (the device machine has no SimGrid). Each row is matched to the
// experiment's point with the same experiment name, strategy and sweep values (the CSV's
// experiment, strategy and swept columns; its point column must agree), that point is simulated,
// and the comparison table is printed and written to --out (default: <output_dir>/<name>-validate.csv)
// with one row per phase and one per total.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "core/common/error.hpp"
#include "core/experiment/cli.hpp"
#include "core/experiment/config.hpp"
#include "core/strategies/strategy.hpp"
#include "models/calibrate.hpp"

namespace joinlab {

namespace {

struct ValidateArgs {
  RunArgs run;
  std::string profile;
  std::string measured;  // CSV of `joinlab run` on the hardware
  std::string out;       // comparison CSV (--measured)
  double max_error = -1;
  double max_phase_error = -1;
};

double fraction_arg(const std::string& flag, const std::string& value) {
  try {
    size_t used = 0;
    const double x = std::stod(value, &used);
    if (used != value.size() || !(x > 0)) throw std::invalid_argument("");
    return x;
  } catch (...) {
    throw InputError("validate: " + flag + " " + value + ": expected a positive fraction (0.1 = 10%)");
  }
}

// The worst relative errors of one validation: totals and phases (phases measured as 0 or not
// simulated do not count).
struct Worst {
  double total = 0, phase = 0;
  std::string phase_where;
  void add_phase(const std::string& where, double predicted, double measured) {
    if (measured <= 0 || predicted <= 0) return;
    const double e = std::fabs(predicted - measured) / measured;
    if (e > phase) {
      phase = e;
      phase_where = where;
    }
  }
};

// Prints the worst errors and fails (VerificationError, exit 3) past the limits asked for.
void check_bar(const ValidateArgs& v, const Worst& w) {
  if (!w.phase_where.empty())
    std::cout << "worst phase error: " << std::fixed << std::setprecision(1) << 100 * w.phase << "% (" << w.phase_where
              << ")\n";
  std::ostringstream m;
  m << std::fixed << std::setprecision(1);
  if (v.max_error > 0 && w.total > v.max_error)
    m << "validate: worst total error " << 100 * w.total << "% exceeds --max-error " << 100 * v.max_error << "%";
  if (v.max_phase_error > 0 && w.phase > v.max_phase_error)
    m << (m.str().empty() ? "validate: " : "; ") << "worst phase error " << 100 * w.phase << "% (" << w.phase_where
      << ") exceeds --max-phase-error " << 100 * v.max_phase_error << "%";
  if (!m.str().empty()) throw VerificationError(m.str());
}

ValidateArgs parse(const std::vector<std::string>& args) {
  ValidateArgs v;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], value;
    auto take = [&](const std::string& flag) {
      if (a == flag) {
        if (i + 1 >= args.size()) throw InputError("validate: " + flag + " needs a value");
        value = args[++i];
        return true;
      }
      if (a.rfind(flag + "=", 0) == 0) {
        value = a.substr(flag.size() + 1);
        return true;
      }
      return false;
    };
    if (take("--profile")) {
      v.profile = value;
    } else if (take("--measured")) {
      v.measured = value;
    } else if (take("--out")) {
      v.out = value;
    } else if (take("--max-error")) {
      v.max_error = fraction_arg("--max-error", value);
    } else if (take("--max-phase-error")) {
      v.max_phase_error = fraction_arg("--max-phase-error", value);
    } else {
      rest.push_back(a);
    }
  }
  v.run = parse_run_args(rest);
  if (!v.out.empty() && v.measured.empty()) throw InputError("validate: --out goes with --measured CSV");
  return v;
}

// The simulated twin of a hardware point: the sim backend with `profile` (or the experiment's),
// paying the message costs of the transports of `measured_on`, the backend that ran it, and
// meeting in collectives as its ranks did (`launch`: threads of one process, or mpirun).
RunPoint simulated(const RunPoint& real, const std::string& profile, const std::string& measured_on,
                   const std::string& launch) {
  RunPoint sim = real;
  sim.backend = "sim";
  // The messages cost what the measured backend's transports cost (a crj run on the cpu backend
  // puts in process, whatever backend the profile was calibrated on).
  if (measured_on == "cpu" || measured_on == "cuda") sim.cluster.options.emplace("sim_msg", measured_on);
  if (launch == "threads" || launch == "mpirun")
    sim.cluster.options.emplace("sim_launch", launch == "threads" ? "threads" : "processes");
  sim.verify = false;
  sim.repeat = 1;
  if (!profile.empty()) sim.cluster.profile = profile;
  if (sim.cluster.profile.empty())
    throw InputError("validate: no profile to simulate with: give --profile (e.g. the output of joinlab calibrate) "
                     "or cluster.profile in the experiment");
  validate_point(sim);
  return sim;
}

std::string ms(double s) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(3) << s * 1e3;
  return o.str();
}

std::string err(double predicted, double measured) {
  if (measured <= 0) return "-";
  std::ostringstream o;
  o << std::showpos << std::fixed << std::setprecision(1) << 100 * (predicted - measured) / measured << "%";
  return o.str();
}

// --- measured CSV ---------------------------------------------------------------------------

// One CSV file as rows of named cells (RFC 4180 quoting, as report.cpp writes it).
struct CsvTable {
  std::string file;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<int> lines;  // file line of each row
  int column(const std::string& name) const {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return int(i);
    return -1;
  }
  std::string cell(size_t row, const std::string& name) const {
    const int c = column(name);
    return c >= 0 && size_t(c) < rows[row].size() ? rows[row][size_t(c)] : "";
  }
};

CsvTable read_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("validate: cannot read the measured CSV " + path);
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string text = buf.str();
  CsvTable t;
  t.file = path;
  std::vector<std::string> record;
  std::string field;
  bool quoted = false, any = false;
  int line = 1, record_line = 1;
  auto end_record = [&] {
    record.push_back(field);
    field.clear();
    if (t.header.empty()) {
      t.header = record;
    } else if (!(record.size() == 1 && record[0].empty())) {
      if (record.size() != t.header.size())
        throw InputError("validate: " + path + ":" + std::to_string(record_line) + ": " + std::to_string(record.size()) +
                         " fields, the header has " + std::to_string(t.header.size()));
      t.rows.push_back(record);
      t.lines.push_back(record_line);
    }
    record.clear();
    any = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!any) record_line = line;
    any = true;
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      record.push_back(field);
      field.clear();
    } else if (c == '\n') {
      ++line;
      end_record();
    } else if (c != '\r') {
      field += c;
    }
  }
  if (quoted) throw InputError("validate: " + path + ": a quoted field is never closed");
  if (any) end_record();
  if (t.header.empty()) throw InputError("validate: " + path + " is empty");
  for (const char* need : {"experiment", "point", "swept", "strategy", "total_s", "r_rows", "s_rows", "ranks"})
    if (t.column(need) < 0)
      throw InputError("validate: " + path + " has no column '" + need + "': not a CSV written by joinlab run");
  return t;
}

// The CSV column of a phase, as report.cpp names it: phase_<name>_s, other characters as '_'.
std::string phase_column(const std::string& name) {
  std::string c = "phase_";
  for (char ch : name) c += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return c + "_s";
}

double number_cell(const CsvTable& t, size_t row, const std::string& column) {
  const std::string v = t.cell(row, column);
  try {
    size_t used = 0;
    const double x = std::stod(v, &used);
    if (used == v.size() && std::isfinite(x)) return x;
  } catch (...) {
  }
  throw InputError("validate: " + t.file + ":" + std::to_string(t.lines[row]) + ": " + column + " = '" + v +
                   "': not a number");
}

struct Comparison {
  std::string experiment, swept, strategy, phase;
  int point = 0, ranks = 0;
  uint64_t r_rows = 0, s_rows = 0;
  double measured = 0, predicted = 0;
};

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void write_comparison(const std::string& path, const std::vector<Comparison>& rows) {
  std::ofstream out(path);
  if (!out) throw RuntimeError("validate: cannot write " + path);
  out << "experiment,point,swept,strategy,ranks,r_rows,s_rows,phase,measured_s,predicted_s,error\n";
  out << std::setprecision(9);
  for (auto& r : rows) {
    out << csv_field(r.experiment) << "," << r.point << "," << csv_field(r.swept) << "," << r.strategy << "," << r.ranks
        << "," << r.r_rows << "," << r.s_rows << "," << csv_field(r.phase) << "," << r.measured << "," << r.predicted
        << ",";
    if (r.measured > 0) out << (r.predicted - r.measured) / r.measured;
    out << "\n";
  }
  if (!out) throw RuntimeError("validate: writing " + path + " failed");
}

// Every row of the CSV against the simulation of its point.
int validate_measured(const ValidateArgs& v, const ExperimentPlan& plan) {
  const CsvTable csv = read_csv(v.measured);
  std::vector<Comparison> table;
  Worst worst;
  size_t matched = 0;
  std::cout << "validate " << plan.name << " (" << plan.file << ") against " << v.measured << ": " << csv.rows.size()
            << " measured row(s), " << plan.points.size() << " point(s)\n";
  for (size_t row = 0; row < csv.rows.size(); ++row) {
    const std::string where = v.measured + ":" + std::to_string(csv.lines[row]);
    if (csv.cell(row, "experiment") != plan.name) {
      std::cout << "\n" << where << ": experiment '" << csv.cell(row, "experiment") << "', not " << plan.name
                << ": skipped\n";
      continue;
    }
    // The point with the row's strategy, sweep values and point number, whose options, sizes and
    // shape are the row's too (a row of a run with other overrides matches nothing).
    const PlannedPoint* pp = nullptr;
    size_t index = 0;
    std::string why = "no point of " + plan.file + " has strategy " + csv.cell(row, "strategy") + " and sweep values '" +
                      csv.cell(row, "swept") + "'";
    for (size_t i = 0; i < plan.points.size() && !pp; ++i) {
      const RunPoint& p = plan.points[i].run;
      if (p.strategy != csv.cell(row, "strategy") || plan.points[i].label() != csv.cell(row, "swept")) continue;
      std::string options;
      for (auto& [k, val] : p.strategy_options) options += (options.empty() ? "" : ";") + k + "=" + val;
      std::ostringstream mine, theirs;
      mine << "point " << i + 1 << ", |R| = " << p.workload.r.rows << ", |S| = " << p.workload.s.rows << ", "
           << p.cluster.shape.nodes << " x " << p.cluster.shape.per_node << " ranks, options '" << options << "'";
      theirs << "point " << csv.cell(row, "point") << ", |R| = " << csv.cell(row, "r_rows") << ", |S| = "
             << csv.cell(row, "s_rows") << ", " << csv.cell(row, "nodes") << " x " << csv.cell(row, "ranks_per_node")
             << " ranks, options '" << csv.cell(row, "strategy_options") << "'";
      if (mine.str() == theirs.str()) {
        pp = &plan.points[i];
        index = i;
      } else {
        why = "the row has " + theirs.str() + "; the experiment's " + mine.str();
      }
    }
    if (!pp) {
      std::cout << "\n" << where << ": " << why << ": skipped\n";
      continue;
    }
    const RunPoint& real = pp->run;
    // A CSV written before its launch column: collectives as messages (mpirun's, the default).
    const RunPoint sim = simulated(real, v.profile, csv.cell(row, "backend"), csv.cell(row, "launch"));
    std::cerr << "validate: row " << (row + 1) << "/" << csv.rows.size() << ": simulating point " << index + 1
              << " with profile " << sim.cluster.profile << "\n";
    const RunOutcome predicted = run_point(sim);
    ++matched;

    std::cout << "\npoint " << index + 1 << ": " << real.strategy << ", " << real.cluster.shape.size() << " rank(s), |R| = "
              << real.workload.r.rows << ", |S| = " << real.workload.s.rows
              << (pp->label().empty() ? "" : ", " + pp->label()) << " (" << where << ")\n";
    std::cout << "  " << std::left << std::setw(28) << "phase" << std::right << std::setw(14) << "measured ms"
              << std::setw(15) << "predicted ms" << std::setw(10) << "error" << "\n";
    Comparison base;
    base.experiment = plan.name;
    base.point = int(index) + 1;
    base.swept = pp->label();
    base.strategy = real.strategy;
    base.ranks = real.cluster.shape.size();
    base.r_rows = real.workload.r.rows;
    base.s_rows = real.workload.s.rows;
    auto line = [&](const std::string& phase, double measured, double pred) {
      std::cout << "  " << std::left << std::setw(28) << phase << std::right << std::setw(14) << ms(measured)
                << std::setw(15) << ms(pred) << std::setw(10) << err(pred, measured) << "\n";
      if (phase != "total")
        worst.add_phase("point " + std::to_string(index + 1) + " " + real.strategy + " " + phase, pred, measured);
      Comparison c = base;
      c.phase = phase;
      c.measured = measured;
      c.predicted = pred;
      table.push_back(c);
    };
    // Timed phases in the order the simulation ran them, then any only the hardware had.
    std::vector<std::string> done;
    for (auto& q : predicted.phases) {
      if (!timed_phase(q.name)) continue;
      const std::string col = phase_column(q.name);
      done.push_back(col);
      line(q.name, csv.column(col) >= 0 && !csv.cell(row, col).empty() ? number_cell(csv, row, col) : 0.0, q.seconds);
    }
    for (size_t c = 0; c < csv.header.size(); ++c) {
      const std::string& col = csv.header[c];
      if (col.rfind("phase_", 0) != 0 || csv.rows[row][c].empty()) continue;
      if (col == phase_column(kGeneratePhase) || col == phase_column(kVerifyPhase)) continue;
      if (std::find(done.begin(), done.end(), col) != done.end()) continue;
      line(col.substr(6, col.size() - 8) + " (not simulated)", number_cell(csv, row, col), 0.0);
    }
    const double measured_total = number_cell(csv, row, "total_s");
    line("total", measured_total, predicted.total_seconds);
    if (csv.column("count") >= 0 && !csv.cell(row, "count").empty() &&
        csv.cell(row, "count") != std::to_string(predicted.digest.count))
      std::cout << "  match count: measured " << csv.cell(row, "count") << ", predicted " << predicted.digest.count << "\n";
    if (measured_total > 0)
      worst.total = std::max(worst.total, std::fabs(predicted.total_seconds - measured_total) / measured_total);
  }
  if (matched == 0)
    throw InputError("validate: no row of " + v.measured + " belongs to experiment " + plan.name + " (" + plan.file + ")");
  const std::string out = !v.out.empty() ? v.out : plan.output_dir + "/" + plan.name + "-validate.csv";
  const std::filesystem::path dir = std::filesystem::path(out).parent_path();
  std::error_code ec;
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  write_comparison(out, table);
  std::cout << "\nworst total error: " << std::fixed << std::setprecision(1) << 100 * worst.total << "% over " << matched
            << " row(s); table written to " << out << "\n";
  check_bar(v, worst);
  return kExitOk;
}

}  // namespace

int validate_main(const std::vector<std::string>& args) {
  ValidateArgs v = parse(args);
  if (!v.measured.empty()) {
    // Only simulated here: the hardware backend of the file need not exist in this build.
    std::vector<Override> overrides = v.run.overrides;
    overrides.push_back({"experiment.backend", "sim"});
    return validate_measured(v, plan_experiment(v.run.file, overrides, PlanFor::SimulatingMeasured));
  }
  ExperimentPlan plan = plan_experiment(v.run.file, v.run.overrides);
  Worst worst;
  std::cout << "validate " << plan.name << " (" << plan.file << "): " << plan.points.size() << " point(s)\n";
  for (size_t i = 0; i < plan.points.size(); ++i) {
    const PlannedPoint& pp = plan.points[i];
    RunPoint real = pp.run;
    if (real.backend == "sim")
      throw InputError("validate: the experiment runs on backend sim; give the hardware with --backend cpu|cuda");
    simulated(real, v.profile, real.backend, "");  // a bad profile fails before the measurement
    std::cerr << "validate: point " << (i + 1) << "/" << plan.points.size() << (pp.label().empty() ? "" : " " + pp.label())
              << ": measuring on " << real.backend << "\n";
    RunOutcome measured = run_point(real);
    const RunPoint sim = simulated(real, v.profile, real.backend, measured.launch);
    std::cerr << "validate: simulating with profile " << sim.cluster.profile << "\n";
    RunOutcome predicted = run_point(sim);

    std::cout << "\npoint " << (i + 1) << ": " << real.strategy << ", " << real.cluster.shape.size() << " rank(s), |R| = "
              << real.workload.r.rows << ", |S| = " << real.workload.s.rows
              << (pp.label().empty() ? "" : ", " + pp.label()) << "\n";
    std::cout << "  " << std::left << std::setw(20) << "phase" << std::right << std::setw(14) << "measured ms"
              << std::setw(15) << "predicted ms" << std::setw(10) << "error" << "\n";
    for (auto& ph : measured.phases) {
      if (ph.name == kGeneratePhase) continue;  // not part of the join
      double pred = 0;
      for (auto& q : predicted.phases)
        if (q.name == ph.name) pred = q.seconds;
      std::cout << "  " << std::left << std::setw(20) << ph.name << std::right << std::setw(14) << ms(ph.seconds)
                << std::setw(15) << ms(pred) << std::setw(10) << err(pred, ph.seconds) << "\n";
      if (timed_phase(ph.name)) worst.add_phase("point " + std::to_string(i + 1) + " " + real.strategy + " " + ph.name, pred, ph.seconds);
    }
    std::cout << "  " << std::left << std::setw(20) << "total" << std::right << std::setw(14) << ms(measured.total_seconds)
              << std::setw(15) << ms(predicted.total_seconds) << std::setw(10)
              << err(predicted.total_seconds, measured.total_seconds) << "\n";
    if (predicted.digest.count != measured.digest.count)
      std::cout << "  match count: measured " << measured.digest.count << ", predicted " << predicted.digest.count << "\n";
    if (measured.total_seconds > 0)
      worst.total = std::max(worst.total, std::fabs(predicted.total_seconds - measured.total_seconds) / measured.total_seconds);
  }
  std::cout << "\nworst total error: " << std::fixed << std::setprecision(1) << 100 * worst.total << "%\n";
  check_bar(v, worst);
  return kExitOk;
}

}  // namespace joinlab
