#include "models/op_model.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/common/error.hpp"

namespace joinlab {

const std::vector<ModelSpec>& model_specs() {
  static const std::vector<ModelSpec> specs = {
      {"generate", {"bytes_out"}, ""},
      {"histogram", {"bytes_in"}, "fanout"},
      {"partition", {"bytes_in"}, "fanout"},
      {"build.linear", {"bytes_in"}, "table_bytes"},
      {"build.chained", {"bytes_in"}, "table_bytes"},
      {"probe.linear", {"bytes_in", "bytes_out"}, "table_bytes"},
      {"probe.chained", {"bytes_in", "bytes_out"}, "table_bytes"},
      {"partitioned_join.linear", {"bytes_in", "bytes_out"}, "partition_bytes"},
      {"partitioned_join.chained", {"bytes_in", "bytes_out"}, "partition_bytes"},
      {"sort.radix", {"bytes_in"}, "key_bytes"},
      {"sort.merge", {"bytes_in_log2_rows"}, ""},
      {"merge_join", {"bytes_in", "bytes_out"}, ""},
      {"gather", {"bytes_in"}, "source_bytes"},
      {"checksum", {"bytes_in"}, ""},
      {"scan", {"bytes_in"}, ""},
      {"copy.device", {"bytes_in"}, ""},
      // Allocations (the rank waits for them; the backend may touch the memory).
      {"alloc.device", {"bytes"}, ""},
      {"alloc.host", {"bytes"}, ""},  // pinned and pageable host memory
  };
  return specs;
}

const ModelSpec* find_model_spec(const std::string& name) {
  for (auto& s : model_specs())
    if (s.name == name) return &s;
  return nullptr;
}

namespace {

// Open-addressing tables (key or hash + row id in the slot) share the linear model: one slot
// probe per row, plus for hash + row id one read of the build key (not calibrated apart).
const char* table_suffix(TableKind k) { return k == TableKind::Chained ? "chained" : "linear"; }

double table_bytes(const HashTable& t) {
  const double tb = t.fmt.tuple_bytes();
  if (t.kind == TableKind::LinearProbing) return double(t.slots) * tb;
  if (t.kind == TableKind::HashRowId) return double(t.slots) * 8;  // 4-byte hash + 4-byte row id
  return double(t.slots) * 4 + double(std::max<uint64_t>(t.rows, 1)) * (4 + tb);
}

double output_bytes(const JoinOutput& out, OutputMode mode, uint64_t matches) {
  if (mode == OutputMode::CountOnly) return 0;
  return double(matches) * (out.r_fmt.key_bytes + out.r_fmt.val_bytes + out.s_fmt.val_bytes);
}

OpSample make(std::string model, std::vector<double> features, double segment = 0) {
  OpSample s;
  s.model = std::move(model);
  s.x.reserve(features.size() + 1);
  s.x.push_back(1.0);
  s.x.insert(s.x.end(), features.begin(), features.end());
  s.segment = segment;
  return s;
}

}  // namespace

OpSample op_sample(const Op& op, const OpResult& result) {
  return std::visit(
      [&](const auto& o) -> OpSample {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GenerateOp>) {
          return make("generate", {double(o.out.rows) * o.out.fmt.tuple_bytes()});
        } else if constexpr (std::is_same_v<T, GeneratePayloadOp>) {
          return make("generate", {double(o.rows) * o.spec.payload_bytes[size_t(o.column)]});
        } else if constexpr (std::is_same_v<T, HistogramOp>) {
          return make("histogram", {double(o.in.rows) * o.in.fmt.key_bytes}, o.fn.fanout());
        } else if constexpr (std::is_same_v<T, PartitionOp>) {
          return make("partition", {double(o.in.rows) * o.in.fmt.tuple_bytes()}, o.fn.fanout());
        } else if constexpr (std::is_same_v<T, BuildOp>) {
          return make(std::string("build.") + table_suffix(o.table->kind),
                      {double(o.in.rows) * o.in.fmt.tuple_bytes()}, table_bytes(*o.table));
        } else if constexpr (std::is_same_v<T, ProbeOp>) {
          return make(std::string("probe.") + table_suffix(o.table->kind),
                      {double(o.probe.rows) * o.probe.fmt.tuple_bytes(), output_bytes(o.out, o.mode, result.count)},
                      table_bytes(*o.table));
        } else if constexpr (std::is_same_v<T, PartitionedJoinOp>) {
          const double rb = double(o.r.all.rows) * o.r.all.fmt.tuple_bytes();
          const double in = rb + double(o.s.all.rows) * o.s.all.fmt.tuple_bytes();
          const double parts = std::max<double>(1, o.r.fanout());
          return make(std::string("partitioned_join.") + table_suffix(o.table),
                      {in, output_bytes(o.out, o.mode, result.count)}, rb / parts);
        } else if constexpr (std::is_same_v<T, SortOp>) {
          const double bytes = double(o.in.rows) * o.in.fmt.tuple_bytes();
          if (o.algo == SortAlgo::Radix) return make("sort.radix", {bytes}, o.in.fmt.key_bytes);
          return make("sort.merge", {bytes * std::log2(std::max<double>(2, double(o.in.rows)))});
        } else if constexpr (std::is_same_v<T, MergeJoinOp>) {
          return make("merge_join",
                      {double(o.r.rows) * o.r.fmt.tuple_bytes() + double(o.s.rows) * o.s.fmt.tuple_bytes(),
                       output_bytes(o.out, o.mode, result.count)});
        } else if constexpr (std::is_same_v<T, GatherOp>) {
          return make("gather", {double(o.rows) * (o.id_bytes + o.col_bytes)},
                      o.column ? double(o.column->bytes) : 0.0);
        } else if constexpr (std::is_same_v<T, ChecksumOp>) {
          double row = o.key_bytes;
          for (auto b : o.column_bytes) row += b;
          return make("checksum", {double(o.rows) * row});
        } else if constexpr (std::is_same_v<T, ScanOp>) {
          return make("scan", {double(o.n) * 8.0});
        }
      },
      op);
}

OpSample device_copy_sample(uint64_t bytes) { return make("copy.device", {double(bytes)}); }

OpSample alloc_sample(MemSpace space, uint64_t bytes) {
  return make(space == MemSpace::Device ? "alloc.device" : "alloc.host", {double(bytes)});
}

double sample_bytes(const OpSample& s) {
  double b = 0;
  for (size_t i = 1; i < s.x.size(); ++i) b += s.x[i];
  return b;
}

PiecewiseModel::PiecewiseModel(std::vector<ModelPiece> pieces) : pieces_(std::move(pieces)) {
  std::sort(pieces_.begin(), pieces_.end(), [](const ModelPiece& a, const ModelPiece& b) { return a.lower < b.lower; });
}

double PiecewiseModel::seconds(const OpSample& s) const {
  if (pieces_.empty()) return 0;
  const ModelPiece* piece = &pieces_.front();
  for (auto& p : pieces_)
    if (s.segment >= p.lower) piece = &p;
  double t = 0;
  for (size_t i = 0; i < piece->coef.size() && i < s.x.size(); ++i) t += piece->coef[i] * s.x[i];
  return std::max(t, 0.0);
}

const PiecewiseModel& OpModels::get(const std::string& model) const {
  auto it = models_.find(model);
  if (it == models_.end()) throw RuntimeError("the profile has no cost model for operator '" + model + "'");
  return it->second;
}

namespace {

// Non-negative least squares by active set elimination: solve, drop the most negative
// coefficient, repeat. Rows are pre-scaled by 1 / seconds (relative error).
std::vector<double> fit_piece(const std::vector<const OpSample*>& rows, size_t nfeat) {
  std::vector<bool> active(nfeat, true);
  std::vector<double> coef(nfeat, 0.0);
  for (size_t round = 0; round < nfeat; ++round) {
    std::vector<size_t> cols;
    for (size_t j = 0; j < nfeat; ++j)
      if (active[j]) cols.push_back(j);
    if (cols.empty()) break;
    Eigen::MatrixXd a(rows.size(), cols.size());
    Eigen::VectorXd b = Eigen::VectorXd::Ones(Eigen::Index(rows.size()));
    for (size_t i = 0; i < rows.size(); ++i) {
      const double w = 1.0 / std::max(rows[i]->seconds, 1e-12);
      for (size_t c = 0; c < cols.size(); ++c) a(Eigen::Index(i), Eigen::Index(c)) = rows[i]->x[cols[c]] * w;
    }
    // Column scaling keeps the solve well conditioned when features differ by 1e9.
    Eigen::VectorXd scale(cols.size());
    for (size_t c = 0; c < cols.size(); ++c) {
      double n = a.col(Eigen::Index(c)).norm();
      scale(Eigen::Index(c)) = n > 0 ? n : 1.0;
      a.col(Eigen::Index(c)) /= scale(Eigen::Index(c));
    }
    Eigen::VectorXd sol = a.colPivHouseholderQr().solve(b);
    std::fill(coef.begin(), coef.end(), 0.0);
    size_t worst = nfeat;
    double worst_value = 0;
    for (size_t c = 0; c < cols.size(); ++c) {
      double v = sol(Eigen::Index(c)) / scale(Eigen::Index(c));
      coef[cols[c]] = v;
      if (v < worst_value) {
        worst_value = v;
        worst = cols[c];
      }
    }
    if (worst == nfeat) return coef;
    active[worst] = false;
  }
  for (auto& c : coef) c = std::max(c, 0.0);
  return coef;
}

}  // namespace

PiecewiseModel fit_piecewise(const std::vector<OpSample>& samples, std::vector<double> breaks, FitReport* report) {
  if (samples.empty()) throw RuntimeError("cannot fit a cost model without samples");
  const size_t nfeat = samples.front().x.size();
  std::sort(breaks.begin(), breaks.end());
  std::vector<double> lowers{0.0};
  for (double b : breaks)
    if (b > 0) lowers.push_back(b);
  // Assign samples to segments; merge segments too thin to fit into the one below.
  auto members = [&](size_t i) {
    std::vector<const OpSample*> m;
    double lo = lowers[i], hi = i + 1 < lowers.size() ? lowers[i + 1] : INFINITY;
    for (auto& s : samples)
      if ((i == 0 || s.segment >= lo) && s.segment < hi) m.push_back(&s);
    return m;
  };
  for (size_t i = lowers.size(); i-- > 1;)
    if (members(i).size() < nfeat + 1) lowers.erase(lowers.begin() + long(i));
  if (members(0).size() < nfeat + 1 && lowers.size() > 1) lowers.erase(lowers.begin() + 1);
  std::vector<ModelPiece> pieces;
  for (size_t i = 0; i < lowers.size(); ++i) {
    auto m = members(i);
    if (m.empty()) continue;
    pieces.push_back({lowers[i], fit_piece(m, nfeat)});
  }
  pieces.front().lower = 0;
  PiecewiseModel model(std::move(pieces));
  if (report) *report = evaluate_fit(model, samples);
  return model;
}

PiecewiseModel fit_piecewise_auto(const std::vector<OpSample>& samples, FitReport* report) {
  FitReport best_rep;
  PiecewiseModel best = fit_piecewise(samples, {}, &best_rep);
  std::vector<double> values;
  for (auto& s : samples) values.push_back(s.segment);
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  const size_t need = samples.empty() ? 0 : samples.front().x.size() + 1;
  for (size_t i = 1; i < values.size(); ++i) {
    const double cut = values[i];
    size_t below = 0;
    for (auto& s : samples) below += s.segment < cut;
    if (below < need || samples.size() - below < need) continue;
    FitReport rep;
    PiecewiseModel m = fit_piecewise(samples, {cut}, &rep);
    if (m.pieces().size() == 2 && rep.rms_rel_error < 0.8 * best_rep.rms_rel_error) {
      best = m;
      best_rep = rep;
    }
  }
  if (report) *report = best_rep;
  return best;
}

FitReport evaluate_fit(const PiecewiseModel& m, const std::vector<OpSample>& samples) {
  FitReport r;
  double sq = 0;
  for (auto& s : samples) {
    if (s.seconds <= 0) continue;
    double e = std::fabs(m.seconds(s) - s.seconds) / s.seconds;
    sq += e * e;
    r.max_rel_error = std::max(r.max_rel_error, e);
    r.samples++;
  }
  r.rms_rel_error = r.samples ? std::sqrt(sq / r.samples) : 0;
  return r;
}

}  // namespace joinlab
