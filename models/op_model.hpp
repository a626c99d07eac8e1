// Per-operator cost models: the time of one operator run as a linear function of a few size
// features (bytes read, bytes written, work items, ...), with separate coefficients per segment
// of a "segment variable" where a limit changes the slope (partitions no longer fitting shared
// memory, the fanout passing the write-combine buffers). Random lookups (hash-table probes, the
// merge join's reads of R) add one feature per cache level of the model: the lookups that miss
// a cache of a fitted size, estimated from the table's size and from how the looked-up keys are
// spread (a skewed probe side hits a few hot keys that stay cached). Calibration (calibrate.cpp)
// measures samples and fits the coefficients and cache sizes with Eigen least squares; the
// simulator (sim/) and the validator evaluate them.
//
// The features of each operator are fixed here (model_specs()), so a profile only holds numbers.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/exec/ops.hpp"

namespace joinlab {

// How an operator's random lookups spread over the keys they look up: hot keys one by one, then
// tails of keys whose lookups follow Zipf(z) by rank (z = 0: uniformly). The simulator derives
// it from a relation's content, calibration from the distribution it generated.
struct KeyAccess {
  struct Tail {
    double lookups = 0;     // lookups into this tail
    double keys = 0;        // distinct keys of the tail
    double zipf = 0;        // exponent of the tail's popularity by rank (0: uniform)
    double first_rank = 1;  // rank of the tail's first key in its Zipf law (after the hot keys)
  };
  std::vector<double> heavy;  // lookups of each hot key
  std::vector<Tail> tails;
  double max_key = 0;  // the largest key, where known (0: the keys are 1..their count)
  double lookups() const;
  bool empty() const { return heavy.empty() && tails.empty(); }
  static KeyAccess uniform(double lookups, double keys);
  static KeyAccess zipf(double lookups, double keys, double z);
};

// The random lookups of one operator run: `lookups` into a structure of `bytes` that holds
// `keys` keys (a hash table, a sorted relation), spread over them as `access` says (empty:
// uniformly over `keys`).
struct Locality {
  double lookups = 0;
  double bytes = 0;
  double keys = 0;
  KeyAccess access;
};

// Fraction of the lookups that hit a cache of `cache_bytes`: the cache holds
// keys * cache_bytes / bytes keys' worth of the structure and evicts at random, so a key stays
// in it the more likely the more often it is looked up (op_model.cpp). Uniform lookups hit
// cache_bytes / bytes; 1 when the structure fits.
double cache_hit_fraction(const Locality& l, double cache_bytes);

// What a cost model sees of one operator run.
struct OpSample {
  std::string model;      // "partition", "probe.linear", ... (model_specs())
  std::vector<double> x;  // features, x[0] = 1 (the constant: launch and synchronization)
  double segment = 0;     // value of the model's segment variable
  double seconds = 0;     // measured time (calibration samples only)
  Locality locality;      // the random lookups (models with cache levels)
};

struct ModelSpec {
  std::string name;
  std::vector<std::string> features;  // after the constant (op_sample's x)
  std::string segment;                // segment variable, "" = one piece
  // Cache levels ("near", "far"): one more feature each, "<level>_misses" = lookups that miss a
  // cache of the size fitted for that level (the profile's "cache.<level> = BYTES" line).
  std::vector<std::string> caches;
  // Coefficients (after the constant) a profile written before the later features existed
  // holds; its missing coefficients are 0 (0: every coefficient is required).
  size_t legacy = 0;
  // Runs on the host's CPUs on every backend (costed by the profile's [cpu] rate, not by a fitted
  // model): a profile need not hold a model for it.
  bool host_only = false;
  // The model that costs it in a profile calibrated before it existed ("" : required).
  std::string stand_in = "";
  size_t coefficients() const { return 1 + features.size() + caches.size(); }
  std::vector<std::string> all_features() const;  // features, then "<level>_misses"
  bool byte_feature(size_t i) const;              // feature i (after the constant) counts bytes
};
const std::vector<ModelSpec>& model_specs();
const ModelSpec* find_model_spec(const std::string& name);

// Features of an operator run. `result` supplies what only the run knows (match counts,
// partition offsets); `access` how the lookups of a probe (the probe side's keys over the table's)
// or of a merge join (S's keys over R's) spread (null: uniformly).
OpSample op_sample(const Op& op, const OpResult& result, const KeyAccess* access = nullptr);
// The CUDA MSD radix sort's plan for `rows` keys up to `max_key` (op_model.cpp says how it is
// chosen): partition bits, the low bits its blocks sort (2^low_bits counters each), scatter
// passes (0..2), histogram reads, the local sort's blocks (2^bits); msd = false where it sorts with CUB's onesweep instead (too many bits).
struct MsdPlan {
  int bits = 0, low_bits = 0, passes = 0, hist_reads = 0;
  double blocks = 1;
  bool msd = true;
};
MsdPlan msd_plan(double rows, double max_key, uint32_t key_bytes, uint32_t val_bytes);
// The largest key the sort plans with, for `rows` keys whose largest is `max_key`, spread below
// it: sort.cu estimates it from 2^16 keys sampled evenly over the rows (every key of up to 2^16).
double msd_sampled_max(double max_key, double rows);
// The "sort.radix" sample of a radix sort with that plan; cub_*: what CUB sorts (skew).
OpSample radix_sort_sample(double rows, double max_key, uint32_t key_bytes, uint32_t val_bytes, double cub_bytes = 0,
                           double cub_calls = 0, double segment_max_bytes = 0);
// A copy within device memory (the "copy.device" model).
OpSample device_copy_sample(uint64_t bytes);
// An allocation (the "alloc.device" / "alloc.host" models).
OpSample alloc_sample(MemSpace space, uint64_t bytes);
// A buffer's release (the "free.device" / "free.host" models).
OpSample free_sample(MemSpace space, uint64_t bytes);
// Bytes an operator reads plus writes (what a host-memory-bound run moves): its byte features.
double sample_bytes(const OpSample& s);

struct ModelPiece {
  double lower = 0;          // applies from this value of the segment variable up
  std::vector<double> coef;  // one per feature, constant first, cache misses last
};

struct FitReport {
  int samples = 0;
  double rms_rel_error = 0, max_rel_error = 0;
};

class PiecewiseModel {
 public:
  PiecewiseModel() = default;
  // `caches`: bytes of each cache level of the model's spec, in its order.
  explicit PiecewiseModel(std::vector<ModelPiece> pieces, std::vector<double> caches = {});
  double seconds(const OpSample& s) const;
  const std::vector<ModelPiece>& pieces() const { return pieces_; }
  const std::vector<double>& caches() const { return caches_; }
  bool empty() const { return pieces_.empty(); }
  // The sample's features with its cache misses appended (one per cache level).
  std::vector<double> features(const OpSample& s) const;

 private:
  std::vector<ModelPiece> pieces_;  // sorted by lower, first lower = 0
  std::vector<double> caches_;
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
// merged into the one below it. `caches`: the cache sizes of the model's levels (the samples'
// miss features follow from them). RuntimeError if there are no samples.
PiecewiseModel fit_piecewise(const std::vector<OpSample>& samples, std::vector<double> breaks,
                             FitReport* report = nullptr, const std::vector<double>& caches = {});
// The same with the break found from the samples: every split between two sampled values of the
// segment variable is tried (cut halfway, geometrically, between them, so that a value sampled
// on either side stays on its side whatever a profile's rounding), and the best one is kept if
// it cuts the rms error by a fifth (a cache edge shows as a change of slope; where there is
// none, one piece is kept).
PiecewiseModel fit_piecewise_auto(const std::vector<OpSample>& samples, FitReport* report = nullptr,
                                  const std::vector<double>& caches = {});
// A model of `spec` fitted to samples: breaks as given (auto: found from the samples), and for
// a model with cache levels every combination of candidate cache sizes (powers of sqrt(2)) tried,
// the best kept: where the samples' lookups span three skews or more, the one whose fits without
// a skew predict it best, else the one that fits best. `max_cache` (> 0): no level is larger than this (the device's last-level cache:
// a fitted "cache" beyond it would be the calibration's own warm data, not hardware).
PiecewiseModel fit_model(const ModelSpec& spec, const std::vector<OpSample>& samples, bool auto_break,
                         const std::vector<double>& breaks, FitReport* report = nullptr, double max_cache = 0);
// Candidate sizes of a cache level ("near": 8 B .. 16 MiB, "far": 1 MiB .. 1 GiB). Near starts at
// one row: the merge join's and the chained probe's gain from skew comes from their few hottest
// keys (on H100 samples, candidates from 4 KiB up left both at the smallest, 4 KiB;
// from 8 B the fits take 16 and 32 B, and the merge join's rms error falls from 13.8% to 11.9%).
std::vector<double> cache_candidates(const std::string& level);
// Relative errors of a model over samples.
FitReport evaluate_fit(const PiecewiseModel& m, const std::vector<OpSample>& samples);

}  // namespace joinlab
