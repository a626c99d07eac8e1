// `joinlab validate FILE`: every point of an experiment runs on a real backend and in simulation
// with a profile of that hardware; the table gives measured vs predicted time per phase and in
// total, with the relative error.
//
//   joinlab validate FILE [--backend cpu|cuda] [--profile P] [--max-error X] [--section.key=value ...]
//
// --profile defaults to the experiment's cluster.profile. --max-error (a fraction, e.g. 0.1)
// makes the command fail (exit 3) when a total is predicted worse than that.
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <iostream>
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
  double max_error = -1;
};

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
    } else if (take("--max-error")) {
      try {
        size_t used = 0;
        v.max_error = std::stod(value, &used);
        if (used != value.size() || !(v.max_error > 0)) throw std::invalid_argument("");
      } catch (...) {
        throw InputError("validate: --max-error " + value + ": expected a positive fraction (0.1 = 10%)");
      }
    } else {
      rest.push_back(a);
    }
  }
  v.run = parse_run_args(rest);
  return v;
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

}  // namespace

int validate_main(const std::vector<std::string>& args) {
  ValidateArgs v = parse(args);
  ExperimentPlan plan = plan_experiment(v.run.file, v.run.overrides);
  double worst = 0;
  std::cout << "validate " << plan.name << " (" << plan.file << "): " << plan.points.size() << " point(s)\n";
  for (size_t i = 0; i < plan.points.size(); ++i) {
    const PlannedPoint& pp = plan.points[i];
    RunPoint real = pp.run;
    if (real.backend == "sim")
      throw InputError("validate: the experiment runs on backend sim; give the hardware with --backend cpu|cuda");
    RunPoint sim = real;
    sim.backend = "sim";
    sim.verify = false;
    sim.repeat = 1;
    if (!v.profile.empty()) sim.cluster.profile = v.profile;
    if (sim.cluster.profile.empty())
      throw InputError("validate: no profile to simulate with: give --profile (e.g. the output of joinlab calibrate) "
                       "or cluster.profile in the experiment");
    validate_point(sim);
    std::cerr << "validate: point " << (i + 1) << "/" << plan.points.size() << (pp.label().empty() ? "" : " " + pp.label())
              << ": measuring on " << real.backend << "\n";
    RunOutcome measured = run_point(real);
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
    }
    std::cout << "  " << std::left << std::setw(20) << "total" << std::right << std::setw(14) << ms(measured.total_seconds)
              << std::setw(15) << ms(predicted.total_seconds) << std::setw(10)
              << err(predicted.total_seconds, measured.total_seconds) << "\n";
    if (predicted.digest.count != measured.digest.count)
      std::cout << "  match count: measured " << measured.digest.count << ", predicted " << predicted.digest.count << "\n";
    if (measured.total_seconds > 0)
      worst = std::max(worst, std::fabs(predicted.total_seconds - measured.total_seconds) / measured.total_seconds);
  }
  std::cout << "\nworst total error: " << std::fixed << std::setprecision(1) << 100 * worst << "%\n";
  if (v.max_error > 0 && worst > v.max_error) {
    std::ostringstream m;
    m << "validate: worst total error " << std::fixed << std::setprecision(1) << 100 * worst << "% exceeds --max-error "
      << 100 * v.max_error << "%";
    throw VerificationError(m.str());
  }
  return kExitOk;
}

}  // namespace joinlab
