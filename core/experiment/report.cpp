#include "core/experiment/report.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>

#include "core/common/error.hpp"
#include "core/experiment/environment.hpp"
#include "core/experiment/values.hpp"

namespace joinlab {

namespace {

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// Enough significant digits for measurements, without float noise.
std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string hex64(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

std::string widths(const std::vector<uint8_t>& w) {
  std::string s;
  for (auto b : w) s += (s.empty() ? "" : ";") + std::to_string(b);
  return s;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// "phase_<name>_s" with anything but letters, digits and '_' turned into '_'.
std::string phase_column(const std::string& name) {
  std::string c = "phase_";
  for (char ch : name) c += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return c + "_s";
}

const std::string& verified_word(const RunOutcome& o) { return o.checked; }

// "a=1;b=2": options and overrides in one cell.
std::string key_values(const std::map<std::string, std::string>& settings) {
  std::string s;
  for (auto& [k, v] : settings) s += (s.empty() ? "" : ";") + k + "=" + v;
  return s;
}

void add_if_new(std::vector<std::string>& names, const std::string& name) {
  if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
}

struct Column {
  const char* title;
  int width;
  bool left = false;
};
const Column kTableColumns[] = {
    {"strategy", 9, true}, {"backend", 7, true}, {"ranks", 5}, {"|R|", 9}, {"|S|", 9},
    {"total ms", 10}, {"M tuples/s", 11}, {"bound ms", 9}, {"of bound", 8}, {"matches", 12},
    {"verified", 9}};

}  // namespace

std::string sweep_label(const SweepValues& swept) {
  std::string s;
  for (auto& [k, v] : swept) s += (s.empty() ? "" : " ") + k + "=" + v;
  return s;
}

std::string describe_hardware(const RunPoint& p) {
  if (p.backend == "sim") return "simulated (profile " + (p.cluster.profile.empty() ? "default" : p.cluster.profile) + ")";
  if (p.backend == "cuda") {
    std::string gpu = gpu_model();
    return gpu.empty() ? "unknown GPU" : gpu;
  }
  return host_cpu_model();
}

void ResultsTable::print_header() {
  std::ostringstream line;
  for (const Column& c : kTableColumns)
    line << (c.left ? std::left : std::right) << std::setw(c.width) << c.title << "  ";
  if (with_point_) line << "point";
  std::string text = line.str();
  out_ << text.substr(0, text.find_last_not_of(' ') + 1) << "\n";
  out_ << std::string(text.find_last_not_of(' ') + 1, '-') << "\n" << std::flush;
}

void ResultsTable::print_row(const ResultRow& row) {
  const RunOutcome& o = row.outcome;
  const Workload& w = o.point.workload;
  bool has_bound = o.bound.seconds > 0;
  const std::string cells[] = {
      o.point.strategy,
      o.point.backend,
      std::to_string(o.point.cluster.shape.size()),
      format_count(w.r.rows),
      format_count(w.s.rows),
      fixed(o.total_seconds * 1e3, 3),
      fixed(o.throughput() / 1e6, 1),
      has_bound ? fixed(o.bound.seconds * 1e3, 3) : "-",
      has_bound ? fixed(100.0 * o.bound_fraction(), 1) + "%" : "-",
      std::to_string(o.digest.count),
      verified_word(o)};
  std::ostringstream line;
  size_t i = 0;
  for (const Column& c : kTableColumns)
    line << (c.left ? std::left : std::right) << std::setw(c.width) << cells[i++] << "  ";
  if (with_point_) line << sweep_label(row.swept);
  // Concurrent joins: total ms is their makespan; each join's own time follows.
  if (o.join_seconds.size() > 1) {
    line << "  joins ms";
    for (double s : o.join_seconds) line << " " << fixed(s * 1e3, 3);
  }
  std::string text = line.str();
  out_ << text.substr(0, text.find_last_not_of(' ') + 1) << "\n" << std::flush;
}

std::string csv_text(const std::vector<ResultRow>& rows) {
  std::vector<std::string> swept_keys, phase_names;
  for (auto& r : rows) {
    for (auto& [key, value] : r.swept) add_if_new(swept_keys, key);
    for (auto& ph : r.outcome.phases) add_if_new(phase_names, ph.name);
  }

  std::vector<std::string> header = {"experiment", "point", "swept"};
  header.insert(header.end(), swept_keys.begin(), swept_keys.end());
  for (const char* h : {"strategy", "backend", "hardware", "profile", "profile_overrides", "bandwidth_source", "nodes",
                        "ranks_per_node", "ranks", "launch", "threads_per_rank", "r_rows", "s_rows", "key_bytes",
                        "r_payload_bytes", "s_payload_bytes"})
    header.push_back(h);
  for (const char* side : {"r", "s"})
    for (const char* f : {"dist", "range_lo", "range_hi", "zipf_z", "zipf_domain", "match_rate"})
      header.push_back(std::string(side) + "_" + f);
  for (const char* h : {"seed", "strategy_options", "repeat", "concurrent_joins"}) header.push_back(h);
  for (auto& n : phase_names) header.push_back(phase_column(n));
  for (const char* h : {"total_s", "join_s", "repeat_total_s", "throughput_tuples_per_s", "bound_s", "bound_resource",
                        "fraction_of_bound", "sent_bytes", "busiest_per_phase", "count", "checksum", "verified", "trace_file", "date", "git_commit"})
    header.push_back(h);

  std::ostringstream out;
  for (size_t i = 0; i < header.size(); ++i) out << (i ? "," : "") << header[i];
  out << "\n";
  for (auto& row : rows) {
    const RunOutcome& o = row.outcome;
    const RunPoint& p = o.point;
    const Workload& w = p.workload;
    std::vector<std::string> f = {row.experiment, std::to_string(row.point), sweep_label(row.swept)};
    for (auto& key : swept_keys) {
      auto it = std::find_if(row.swept.begin(), row.swept.end(), [&](const auto& kv) { return kv.first == key; });
      f.push_back(it == row.swept.end() ? "" : it->second);
    }
    for (const std::string& cell :
         {p.strategy, p.backend, row.hardware, p.cluster.profile, key_values(p.cluster.profile_overrides),
          o.bandwidths.source, std::to_string(p.cluster.shape.nodes), std::to_string(p.cluster.shape.per_node),
          std::to_string(p.cluster.shape.size()), o.launch, o.threads_per_rank ? std::to_string(o.threads_per_rank) : std::string(),
          std::to_string(w.r.rows), std::to_string(w.s.rows), std::to_string(w.r.key_bytes), widths(w.r.payload_bytes),
          widths(w.s.payload_bytes)})
      f.push_back(cell);
    for (const RelationSpec* r : {&w.r, &w.s}) {  // blank where the distribution has no such parameter
      bool uniform = r->dist == KeyDist::Uniform, zipf = r->dist == KeyDist::Zipf, fk = r->dist == KeyDist::ForeignKey;
      f.push_back(to_string(r->dist));
      f.push_back(uniform ? std::to_string(r->range_lo) : "");
      f.push_back(uniform ? std::to_string(r->range_hi) : "");
      f.push_back(zipf || fk ? number(r->zipf_z) : "");
      f.push_back(zipf ? std::to_string(r->zipf_domain ? r->zipf_domain : r->rows) : "");
      f.push_back(fk ? number(r->match_rate) : "");
    }
    f.push_back(std::to_string(w.r.seed));
    f.push_back(key_values(p.strategy_options));
    f.push_back(std::to_string(p.repeat));
    f.push_back(std::to_string(p.cluster.jobs));
    for (auto& n : phase_names) {
      std::string cell;
      for (auto& ph : o.phases)
        if (ph.name == n) cell = number(ph.seconds);
      f.push_back(cell);
    }
    std::string repeats, joins;
    for (double s : o.repeat_seconds) repeats += (repeats.empty() ? "" : ";") + number(s);
    for (double s : o.join_seconds) joins += (joins.empty() ? "" : ";") + number(s);
    bool has_bound = o.bound.seconds > 0;
    for (const std::string& cell :
         {number(o.total_seconds), joins, repeats, number(o.throughput()), has_bound ? number(o.bound.seconds) : "",
          o.bound.resource, has_bound ? number(o.bound_fraction()) : "",
          o.sent_bytes ? std::to_string(o.sent_bytes) : "", format_phase_limits(o.limits),
          std::to_string(o.digest.count),
          o.has_checksum ? hex64(o.digest.checksum) : "", o.verified, row.trace_file, row.date, row.git_commit})
      f.push_back(cell);
    for (size_t i = 0; i < f.size(); ++i) out << (i ? "," : "") << csv_field(f[i]);
    out << "\n";
  }
  return out.str();
}

void write_csv(const std::string& path, const std::vector<ResultRow>& rows) {
  write_file_whole(path, "the results CSV", [&](std::ostream& out) { out << csv_text(rows); });
}

}  // namespace joinlab
