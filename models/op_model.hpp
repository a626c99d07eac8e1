// Per-operator cost models: the time of one operator run as a linear function of a few size
// features (bytes read, bytes written, ...), with separate coefficients per segment of a
// "segment variable" where a cache or a shared-memory limit changes the slope (the hash table
// leaving L2, partitions no longer fitting shared memory, the fanout passing the write-combine
// buffers). Calibration (calibrate.cpp) measures samples and fits the coefficients with Eigen
// least squares; the simulator (sim/) and the validator evaluate them.
//
// The features of each operator are fixed here (model_specs()), so a profile only holds numbers.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/exec/ops.hpp"

namespace joinlab {

// What a cost model sees of one operator run.
struct OpSample {
  std::string model;      // "partition", "probe.linear", ... (model_specs())
  std::vector<double> x;  // features, x[0] = 1 (the constant: launch and synchronization)
  double segment = 0;     // value of the model's segment variable
  double seconds = 0;     // measured time (calibration samples only)
};

struct ModelSpec {
  std::string name;
  std::vector<std::string> features;  // after the constant
  std::string segment;                // segment variable, "" = one piece
};
const std::vector<ModelSpec>& model_specs();
const ModelSpec* find_model_spec(const std::string& name);

// Features of an operator run. `result` supplies what only the run knows (match counts).
OpSample op_sample(const Op& op, const OpResult& result);
// A copy within device memory (the "copy.device" model).
OpSample device_copy_sample(uint64_t bytes);
// An allocation (the "alloc.device" / "alloc.host" models).
OpSample alloc_sample(MemSpace space, uint64_t bytes);
// Bytes an operator reads plus writes (what a host-memory-bound run moves).
double sample_bytes(const OpSample& s);

struct ModelPiece {
  double lower = 0;          // applies from this value of the segment variable up
  std::vector<double> coef;  // one per feature, constant first
};

struct FitReport {
  int samples = 0;
  double rms_rel_error = 0, max_rel_error = 0;
};

class PiecewiseModel {
 public:
  PiecewiseModel() = default;
  explicit PiecewiseModel(std::vector<ModelPiece> pieces);
  double seconds(const OpSample& s) const;
  const std::vector<ModelPiece>& pieces() const { return pieces_; }
  bool empty() const { return pieces_.empty(); }

 private:
  std::vector<ModelPiece> pieces_;  // sorted by lower, first lower = 0
};

class OpModels {
 public:
  void set(const std::string& model, PiecewiseModel m) { models_[model] = std::move(m); }
  bool has(const std::string& model) const { return models_.count(model) != 0; }
  const PiecewiseModel& get(const std::string& model) const;  // RuntimeError if missing
  double seconds(const OpSample& s) const { return get(s.model).seconds(s); }
  const std::map<std::string, PiecewiseModel>& all() const { return models_; }

 private:
  std::map<std::string, PiecewiseModel> models_;
};

// Least-squares fit of one model to samples, minimizing relative error (each sample weighted
// by 1 / its time), with non-negative coefficients. `breaks` are the lower bounds of the
// segments after the first (empty: one piece); a segment with fewer samples than features is
// merged into the one below it. RuntimeError if there are no samples.
PiecewiseModel fit_piecewise(const std::vector<OpSample>& samples, std::vector<double> breaks,
                             FitReport* report = nullptr);
// The same with the break found from the samples: every split between two sampled values of the
// segment variable is tried, and the best one is kept if it cuts the rms error by a fifth (a
// cache edge shows as a change of slope; where there is none, one piece is kept).
PiecewiseModel fit_piecewise_auto(const std::vector<OpSample>& samples, FitReport* report = nullptr);
// Relative errors of a model over samples.
FitReport evaluate_fit(const PiecewiseModel& m, const std::vector<OpSample>& samples);

}  // namespace joinlab
