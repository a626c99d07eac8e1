#include "core/experiment/preflight.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>

#include "core/common/error.hpp"
#include "core/strategies/strategy_util.hpp"

namespace joinlab {

namespace {

std::string gib(uint64_t bytes) {
  std::ostringstream o;
  o << bytes << " bytes (" << std::fixed << std::setprecision(2) << double(bytes) / double(1ull << 30) << " GiB)";
  return o.str();
}

std::string option_text(const JoinJob& job, const char* key) {
  auto it = job.options.find(key);
  return it == job.options.end() ? "" : it->second.as<std::string>();
}

// Bytes of a rank's share of a relation as the strategies hold it (tuples + late payload).
uint64_t relation_bytes(const RelationSpec& spec, int ranks) {
  const uint64_t rows = (spec.rows + uint64_t(ranks) - 1) / uint64_t(ranks);
  uint64_t b = rows * tuple_format(spec).tuple_bytes();
  if (late_materialized(spec)) b += rows * payload_bytes_per_row(spec);
  return b;
}

// Output rows a join emits when that is known from the specs (foreign key, or unique R).
uint64_t output_bytes(const JoinJob& job, int ranks) {
  const Workload& w = job.workload;
  if (option_text(job, "output") == "count_only") return 0;
  double rows = 0;
  if (w.s.dist == KeyDist::ForeignKey) rows = double(w.s.rows) * w.s.match_rate;
  else if (w.r.unique_keys()) rows = double(w.s.rows);
  const double row_bytes = double(w.r.key_bytes) + tuple_format(w.r).val_bytes + tuple_format(w.s).val_bytes +
                           double(payload_bytes_per_row(w.r) + payload_bytes_per_row(w.s)) *
                               (late_materialized(w.r) || late_materialized(w.s) ? 1 : 0);
  return uint64_t(rows / ranks * row_bytes);
}

uint64_t estimate(const std::string& name, const JoinJob& job, const ClusterShape& shape) {
  const Workload& w = job.workload;
  const int n = shape.size();
  const uint64_t r = relation_bytes(w.r, n), s = relation_bytes(w.s, n);
  const uint64_t r_rows = (w.r.rows + uint64_t(n) - 1) / uint64_t(n), s_rows = (w.s.rows + uint64_t(n) - 1) / uint64_t(n);
  const TupleFormat rf = tuple_format(w.r), sf = tuple_format(w.s);
  double lf = 0.5;
  if (job.options.count("load_factor")) lf = job.options["load_factor"].as<double>();
  const TableKind kind = option_text(job, "table") == "chained" ? TableKind::Chained : TableKind::LinearProbing;
  const uint64_t out = output_bytes(job, n);
  if (name == "npj") {  // only what its spaces put on the device (lutz2022's baseline pins both)
    const uint64_t data = option_text(job, "input_space") == "pinned" ? 0 : r + s + out;
    return data + (option_text(job, "table_space") == "pinned" ? 0 : hash_table_bytes(kind, rf, r_rows, lf));
  }
  // phj: inputs and their partitioned copies; a pass above one kernel pass uses one more copy.
  if (name == "phj") return 2 * (r + s) + std::max(r_rows * rf.tuple_bytes(), s_rows * sf.tuple_bytes()) + out;
  // smj: inputs, sorted copies, the sort's alternate buffers, merge-join scratch (32 B per S row).
  if (name == "smj") return 2 * (r + s) + std::max(r_rows * rf.tuple_bytes(), s_rows * sf.tuple_bytes()) + 32 * s_rows + out;
  if (name == "chunked") {  // R and its table stay; S streams through two staging buffers
    uint64_t chunk = uint64_t(1) << 22;
    if (job.options.count("chunk_rows")) chunk = uint64_t(job.options["chunk_rows"].as<int64_t>());
    const uint64_t device_out = option_text(job, "output_space") == "pinned" ? 0 : out;
    return r + hash_table_bytes(kind, rf, r_rows, lf) + 2 * std::min(chunk, s_rows) * sf.tuple_bytes() + device_out;
  }
  return 0;
}

}  // namespace

uint64_t input_bytes_per_rank(const Workload& w, const ClusterShape& shape) {
  const int n = std::max(1, shape.size());
  const unsigned __int128 sum = (unsigned __int128)relation_bytes(w.r, n) + relation_bytes(w.s, n);
  return sum > ~uint64_t(0) ? ~uint64_t(0) : uint64_t(sum);
}

uint64_t working_set_bytes(const std::string& strategy, const JoinJob& job, const ClusterShape& shape) {
  // Beyond any machine the estimators' sums could wrap; the inputs alone say it does not fit.
  const uint64_t inputs = input_bytes_per_rank(job.workload, shape);
  if (inputs > kMaxPlanBytes) return inputs;
  const StrategyInfo& info = find_strategy(strategy);
  if (info.working_set_bytes) return info.working_set_bytes(job, shape);
  return estimate(strategy, job, shape);
}

double join_output_rows(const Workload& w) {
  if (w.s.dist == KeyDist::ForeignKey) return double(w.s.rows) * w.s.match_rate;
  if (w.r.unique_keys()) return double(w.s.rows);
  if (w.s.unique_keys()) return double(w.r.rows);
  if (w.r.dist == KeyDist::Uniform && w.s.dist == KeyDist::Uniform) {  // expected: over the ranges' overlap
    const double lo = double(std::max(w.r.range_lo, w.s.range_lo)), hi = double(std::min(w.r.range_hi, w.s.range_hi));
    if (hi < lo) return 0;
    return double(w.r.rows) * double(w.s.rows) * (hi - lo + 1) /
           ((double(w.r.range_hi - w.r.range_lo) + 1) * (double(w.s.range_hi - w.s.range_lo) + 1));
  }
  // Otherwise about |R| |S| / (distinct keys of the wider side), more under skew.
  auto domain = [](const RelationSpec& r) {
    if (r.dist == KeyDist::Uniform) return double(r.range_hi - r.range_lo) + 1;
    if (r.dist == KeyDist::Zipf) return double(r.zipf_domain ? r.zipf_domain : r.rows);
    return double(r.rows);
  };
  return double(w.r.rows) * double(w.s.rows) / std::max(domain(w.r), domain(w.s));
}

void check_sizes(const RunPoint& p) {
  const double rows = join_output_rows(p.workload);
  if (rows >= 18446744073709551616.0) {
    std::ostringstream m;
    m << "the join of |R| = " << p.workload.r.rows << " and |S| = " << p.workload.s.rows << " (" << to_string(p.workload.r.dist)
      << " x " << to_string(p.workload.s.dist) << " keys) emits about " << rows
      << " rows, more than a 64-bit count holds; use fewer rows or a wider key range";
    throw InputError(m.str());
  }
}

namespace {
// " (3 joins at once)" where several joins share the ranks.
std::string joins_text(const RunPoint& p) {
  return p.cluster.jobs > 1 ? " (" + std::to_string(p.cluster.jobs) + " joins at once)" : "";
}
}  // namespace

uint64_t rank_device_memory(const RunPoint& p, Backend& backend) {
  const uint64_t given = backend.device_memory_per_rank(p.cluster);
  return given ? given : p.cluster.device_memory;
}

// The host memory a GPU backend's rank holds for strategies that keep data there.
void check_host_memory(const RunPoint& p, const JoinJob& job, Backend& backend) {
  const StrategyInfo& info = find_strategy(p.strategy);
  if (!info.host_bytes) return;
  const uint64_t avail = backend.host_memory_per_rank(p.cluster);
  if (!avail) return;
  JoinJob sized = job;  // a plan may depend on the device memory a rank has (mgsmj's chunksets)
  if (!sized.device_memory) sized.device_memory = rank_device_memory(p, backend);
  const uint64_t need = info.host_bytes(sized, p.cluster.shape) * uint64_t(p.cluster.jobs);
  if (need <= avail) return;
  std::ostringstream m;
  m << "strategy " << p.strategy << " keeps about " << gib(need) << " in host memory per rank" << joins_text(p)
    << " for this workload (|R| = "
    << p.workload.r.rows << ", |S| = " << p.workload.s.rows << " over " << p.cluster.shape.size()
    << " rank(s)), but this machine has " << gib(avail) << " available per rank (MemAvailable over its ranks)";
  throw InputError(m.str());
}

void check_device_memory(const RunPoint& p, const JoinJob& job, Backend& backend) {
  check_host_memory(p, job, backend);
  const uint64_t avail = backend.device_memory_per_rank(p.cluster);
  if (!avail) return;
  const bool host = p.backend == "cpu" && !p.cluster.device_memory;  // the cpu backend's "device" is this host's RAM
  const uint64_t joins = uint64_t(p.cluster.jobs);
  uint64_t need = working_set_bytes(p.strategy, job, p.cluster.shape);
  if (host) need = std::max(need, input_bytes_per_rank(p.workload, p.cluster.shape));
  need *= joins;
  if (!need || need <= avail) return;
  std::ostringstream m;
  m << "strategy " << p.strategy << " needs about " << gib(need) << " of " << (host ? "memory" : "device memory")
    << " per rank" << joins_text(p) << " for this workload (|R| = " << p.workload.r.rows << ", |S| = " << p.workload.s.rows << " over "
    << p.cluster.shape.size() << " rank(s)), but the " << p.backend << " backend has " << gib(avail) << " per rank"
    << (host ? " (memory available on this machine now, shared by the ranks)" : "") << ".";
  std::string fits;
  for (const std::string& other : strategy_names()) {
    if (other == p.strategy) continue;
    const StrategyInfo& info = find_strategy(other);
    const int ranks = p.cluster.shape.size();
    if (ranks < info.min_ranks || (info.max_ranks > 0 && ranks > info.max_ranks)) continue;
    // Its defaults, or with the output in pinned host memory where it has that option.
    for (const std::map<std::string, std::string>& options :
         {std::map<std::string, std::string>{}, std::map<std::string, std::string>{{"output_space", "pinned"}}}) {
      RunPoint q = p;
      q.strategy = other;
      q.strategy_options = options;
      uint64_t other_need = 0;
      try {
        other_need = working_set_bytes(other, make_job(q), p.cluster.shape);
      } catch (const InputError&) {
        continue;  // no such option
      }
      if (host) other_need = std::max(other_need, input_bytes_per_rank(p.workload, p.cluster.shape));
      other_need *= joins;
      if (other_need && other_need <= avail) {
        fits += (fits.empty() ? "" : ", ") + other + (options.empty() ? "" : " with output_space=pinned") + " (about " +
                gib(other_need) + ")";
        break;
      }
    }
  }
  if (!fits.empty()) m << " Strategies that fit: " << fits << ".";
  else m << " No built-in strategy fits; use more ranks or smaller relations.";
  throw InputError(m.str());
}

}  // namespace joinlab
