// Experiment files: an .ini file (sections [experiment] [cluster] [workload] [strategy]
// [profile] [sweep] [figure], read with Boost.Program_options) plus --section.key=value overrides, expanded into
// run points (the cartesian product of the [sweep] lists, in file order) and validated before
// anything runs. Every error names where the bad value came from: "phj.ini:12: key = value: why".
// experiments/README.md documents every key; experiment_keys() is the same list in code.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/experiment/report.hpp"
#include "core/experiment/runner.hpp"

namespace joinlab {

// A --section.key=value from the command line. Keys under sweep. replace (or add) a sweep list;
// any other key fixes the value and drops a sweep over the same key.
struct Override {
  std::string key, value;
};

struct PlannedPoint {
  RunPoint run;
  SweepValues swept;  // this point's sweep values, file order
  std::string label() const { return sweep_label(swept); }
};

struct ExperimentPlan {
  std::string file;         // as given
  std::string name;         // [experiment] name
  std::string output_dir;   // where the CSV and traces go
  std::vector<std::string> swept_keys;  // file order; the first varies slowest
  std::vector<PlannedPoint> points;
  std::map<std::string, std::string> figure;  // [figure] keys without "figure.": how reproduce draws it
};

// What a plan is for: running it, or simulating the points another backend measured (`joinlab
// validate --measured`), whose [cluster] keys of that backend configured the measured run and are
// left out of the simulated one instead of being errors.
enum class PlanFor { Running, SimulatingMeasured };

// Reads, overrides, expands and validates (validate_point on every point). Throws InputError
// naming file:line (or "command line"), key and value.
ExperimentPlan plan_experiment(const std::string& file, const std::vector<Override>& overrides = {},
                               PlanFor purpose = PlanFor::Running);

// Documented keys: name, type, default, meaning (`joinlab list keys`, experiments/README.md).
struct KeyDoc {
  std::string key, type, default_value, help;
};
std::vector<KeyDoc> experiment_keys();

// Backend-specific [cluster] keys (e.g. the simulator's topology), passed through to
// BackendConfig::options. Backends register theirs in their register_*_backend function; any
// other [cluster] key is rejected as unknown, and a key on a point whose backend did not register
// it is rejected as belonging to another backend.
void register_cluster_key(const std::string& key, const std::string& help, const std::string& backend);

// How a cluster.profile file, with the point's profile.* overrides ("link.nic.bw" -> "5e10"), is
// checked at plan time on every backend (the models register load_profile); without one only its
// existence is checked. An error about one override begins "<key> = <value>: ".
using ProfileCheck =
    std::function<void(const std::string& path, const std::map<std::string, std::string>& overrides)>;
void register_profile_check(ProfileCheck check);

// The [figure] section of an experiment file (keys without "figure."), checked as plan_experiment
// checks it, without planning the points. Throws InputError.
std::map<std::string, std::string> read_figure(const std::string& file);

// A short description of an experiment file for `joinlab list`: "strategy npj, backend cpu:
// <description>". Throws InputError if the file cannot be read.
std::string describe_experiment(const std::string& file);

}  // namespace joinlab
