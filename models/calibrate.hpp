// `joinlab calibrate`: measures every operator of the vocabulary over a range of sizes and
// parameters, and the copies and links, through the Rank interface on a real backend (cpu here,
// cuda on the device machine), fits the cost models (op_model.hpp) and writes a profile.
//
//   joinlab calibrate [--backend cpu|cuda] [--profile NAME] [--out FILE] [--base PROFILE]
//                     [--quick] [--min-rows N] [--max-rows N] [--repeat R] [--threads T]
//
// What one machine cannot measure (the NIC, the cluster topology) is kept from --base, and the
// profile says so next to each such number.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "models/op_model.hpp"
#include "models/profile.hpp"

namespace joinlab {

struct CalibrationOptions {
  std::string backend = "cpu";
  std::string name;          // profile name (default: backend-specific)
  std::string out;           // profile file written (default: <profile dir>/<name>.ini)
  std::string base;          // profile whose unmeasured figures (network, topology) are kept
  std::string profile_dir;
  bool quick = false;        // few sizes: seconds instead of minutes (CI)
  uint64_t min_rows = 0, max_rows = 0;  // 0: the backend's default range
  int repeat = 3;            // runs per sample; the median is kept
  int threads = 0;           // cpu backend: threads per rank (0: all cores)
};

// Measurements of one calibration run: operator samples by model, and link samples
// (x = {1, bytes}) by link ("h2d", "d2h", "p2p", "host_copy").
struct Calibration {
  std::map<std::string, std::vector<OpSample>> ops;
  std::map<std::string, std::vector<OpSample>> links;
  std::string machine;  // what it ran on
  double host_mem_bw = 0;  // parallel host copy, bytes read + written per second (0: not measured)
  std::map<std::string, std::string> skipped;  // link -> why it was not measured
};

// Runs the micro-benchmarks (InputError on bad options, RuntimeError if the backend fails).
Calibration measure(const CalibrationOptions& opt);
// Fits a profile from measurements; figures not measured come from `base`.
Profile fit_profile(const Calibration& c, const Profile& base, const CalibrationOptions& opt);

// The command. Returns the process exit code.
int calibrate_main(const std::vector<std::string>& args);
// `joinlab validate FILE ...` (validate.cpp).
int validate_main(const std::vector<std::string>& args);
// Registers both with the experiment CLI.
void register_model_commands();

}  // namespace joinlab
