#include "core/experiment/config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <boost/program_options.hpp>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/environment.hpp"
#include "core/experiment/preflight.hpp"
#include "core/experiment/values.hpp"
#include "core/workload/ssb.hpp"
#include "core/workload/tpch.hpp"

namespace joinlab {

namespace po = boost::program_options;

namespace {

constexpr size_t kMaxSweepPoints = 100000;
// Rank ids are ints; far beyond what any backend runs (the simulator states its own limit).
constexpr int64_t kMaxRanks = int64_t(1) << 24;
const char* const kSections = "[experiment], [cluster], [workload], [strategy], [profile], [sweep] and [figure]";

// A key's value and where it was written, for error messages.
struct Setting {
  std::string value;
  std::string origin;  // "phj.ini:12", "command line", "phj.ini:30 ([sweep])"
};
using Settings = std::map<std::string, Setting>;

// --- the key table -----------------------------------------------------------------------------

struct PointBuilder {
  RunPoint run;
  int verify = -1;  // -1: not given (verify)
  // rows_per_rank of R and S (0: not given): weak scaling, resolved once the cluster is known.
  uint64_t r_rows_per_rank = 0, s_rows_per_rank = 0;
  // scale_factor_per_rank (0: not given): TPC-H weak scaling, the same.
  double scale_factor_per_rank = 0;
};

struct KeyDef {
  std::string key, type, default_value, help;
  std::function<void(PointBuilder&, const std::string&)> apply;
};

uint8_t parse_width(const std::string& v, const char* what) {
  int64_t w = parse_integer(v);
  if (w != 4 && w != 8) throw InputError(std::string(what) + " must be 4 or 8 bytes");
  return uint8_t(w);
}

std::vector<uint8_t> parse_widths(const std::string& v) {
  std::vector<uint8_t> widths;
  for (const auto& item : split_list(v)) widths.push_back(parse_width(item, "each payload column"));
  if (widths.empty()) throw InputError("needs at least one payload column");
  return widths;
}

int parse_positive_int(const std::string& v) {
  int64_t n = parse_integer(v);
  if (n <= 0 || n > (1 << 30)) throw InputError("must be a positive integer");
  return int(n);
}

using Sides = std::vector<RelationSpec*> (*)(PointBuilder&);
using PerRankSides = std::vector<uint64_t*> (*)(PointBuilder&);

// Applies a relation setter to every side a key covers.
std::function<void(PointBuilder&, const std::string&)> each(Sides sides, void (*set)(RelationSpec&, const std::string&)) {
  return [sides, set](PointBuilder& b, const std::string& v) {
    for (RelationSpec* r : sides(b)) set(*r, v);
  };
}

// Sizes and widths of a side; also the workload.* shorthands that set both sides.
std::vector<KeyDef> relation_keys(const std::string& prefix, const std::string& which, Sides sides,
                                  PerRankSides per_rank) {
  std::vector<KeyDef> d;
  d.push_back({prefix + "rows", "size", "(required)", "rows of " + which + " (total over all ranks)",
               each(sides, [](RelationSpec& r, const std::string& v) { r.rows = parse_size(v); })});
  d.push_back({prefix + "rows_per_rank", "size", "", "rows of " + which + " per rank (weak scaling: rows = this x ranks; "
               "replaces rows)",
               [per_rank](PointBuilder& b, const std::string& v) {
                 for (uint64_t* n : per_rank(b)) *n = parse_size(v);
               }});
  d.push_back({prefix + "key_bytes", "4|8", "4", "key width of " + which,
               each(sides, [](RelationSpec& r, const std::string& v) { r.key_bytes = parse_width(v, "key width"); })});
  d.push_back({prefix + "payload_bytes", "list of 4|8", "4",
               "payload columns of " + which + ", one width per column (\"4\" or \"4,8\")",
               each(sides, [](RelationSpec& r, const std::string& v) { r.payload_bytes = parse_widths(v); })});
  return d;
}

std::vector<KeyDef> distribution_keys(const std::string& prefix, const std::string& which, Sides sides,
                                      const std::string& default_dist) {
  std::vector<KeyDef> d;
  d.push_back({prefix + "dist", "unique_dense|unique_sparse|uniform|zipf|fk|tpch_orders|tpch_lineitem", default_dist,
               "key distribution of " + which + " (fk: foreign key into R; S only. tpch_orders: R only, "
               "tpch_lineitem: S only, rows from workload.scale_factor)",
               each(sides, [](RelationSpec& r, const std::string& v) { r.dist = key_dist_from_string(trim(v)); })});
  d.push_back({prefix + "range_lo", "size", "1", "uniform: smallest key",
               each(sides, [](RelationSpec& r, const std::string& v) { r.range_lo = parse_size(v, true); })});
  d.push_back({prefix + "range_hi", "size", "(required for uniform)", "uniform: largest key",
               each(sides, [](RelationSpec& r, const std::string& v) { r.range_hi = parse_size(v, true); })});
  d.push_back({prefix + "zipf_z", "number in [0,2]", "0", "zipf: exponent; fk: skew of the references",
               each(sides, [](RelationSpec& r, const std::string& v) { r.zipf_z = parse_number(v); })});
  d.push_back({prefix + "zipf_domain", "size", "rows", "zipf: number of distinct keys",
               each(sides, [](RelationSpec& r, const std::string& v) { r.zipf_domain = parse_size(v); })});
  d.push_back({prefix + "match_rate", "number in [0,1]", "1", "fk: fraction of rows whose key is in R",
               each(sides, [](RelationSpec& r, const std::string& v) { r.match_rate = parse_number(v); })});
  return d;
}

std::vector<RelationSpec*> both_sides(PointBuilder& b) { return {&b.run.workload.r, &b.run.workload.s}; }
std::vector<RelationSpec*> r_side(PointBuilder& b) { return {&b.run.workload.r}; }
std::vector<RelationSpec*> s_side(PointBuilder& b) { return {&b.run.workload.s}; }
std::vector<uint64_t*> both_per_rank(PointBuilder& b) { return {&b.r_rows_per_rank, &b.s_rows_per_rank}; }
std::vector<uint64_t*> r_per_rank(PointBuilder& b) { return {&b.r_rows_per_rank}; }
std::vector<uint64_t*> s_per_rank(PointBuilder& b) { return {&b.s_rows_per_rank}; }

// Applied in this order, so the side-specific workload keys override the both-sides shorthands.
const std::vector<KeyDef>& key_defs() {
  static const std::vector<KeyDef> defs = [] {
    std::vector<KeyDef> d;
    d.push_back({"experiment.name", "string", "file name without .ini", "names the CSV and trace files",
                 [](PointBuilder& b, const std::string& v) { b.run.name = trim(v); }});
    d.push_back({"experiment.description", "string", "", "one line shown by `joinlab list`",
                 [](PointBuilder&, const std::string&) {}});
    d.push_back({"experiment.strategy", "strategy name", "(required)", "join strategy (`joinlab list`)",
                 [](PointBuilder& b, const std::string& v) { b.run.strategy = trim(v); }});
    d.push_back({"experiment.backend", "cpu|cuda|sim", "cpu", "where it runs (`joinlab list`)",
                 [](PointBuilder& b, const std::string& v) { b.run.backend = trim(v); }});
    d.push_back({"experiment.repeat", "positive integer", "1", "runs per point; times are the median",
                 [](PointBuilder& b, const std::string& v) { b.run.repeat = parse_positive_int(v); }});
    d.push_back({"experiment.concurrent_joins", "positive integer", "1",
                 "copies of the join run at once on the same ranks, sharing their GPUs, memory, links and cores "
                 "(each with its own messages, windows and streams); the table reports the makespan, the CSV each "
                 "join's time (join_s)",
                 [](PointBuilder& b, const std::string& v) { b.run.cluster.jobs = parse_positive_int(v); }});
    d.push_back({"experiment.output_dir", "path", "results", "folder for the CSV and the traces",
                 [](PointBuilder&, const std::string&) {}});
    d.push_back({"experiment.verify", "bool", "true", "check every run's count and checksum against the expected result (the count alone without a checksum: sim, output = count_only)",
                 [](PointBuilder& b, const std::string& v) { b.verify = parse_bool(v) ? 1 : 0; }});
    d.push_back({"experiment.trace_max_bytes", "size (0 allowed)", "64Mi",
                 "bytes a point's trace file may hold: past it the latest spans are left out, which the trace "
                 "(a trace_truncated event) and a line on stderr say; 0: no limit",
                 [](PointBuilder& b, const std::string& v) { b.run.trace_max_bytes = parse_size(v, true); }});
    d.push_back({"cluster.nodes", "positive integer", "1", "nodes",
                 [](PointBuilder& b, const std::string& v) { b.run.cluster.shape.nodes = parse_positive_int(v); }});
    d.push_back({"cluster.gpus_per_node", "positive integer", "1", "ranks per node (GPUs, or CPU workers)",
                 [](PointBuilder& b, const std::string& v) { b.run.cluster.shape.per_node = parse_positive_int(v); }});
    d.push_back({"cluster.threads", "integer >= 0", "0", "CPU worker threads per rank (0: cores / ranks)",
                 [](PointBuilder& b, const std::string& v) {
                   int64_t t = parse_integer(v);
                   if (t < 0 || t > 4096) throw InputError("must be between 0 and 4096");
                   b.run.cluster.threads_per_rank = int(t);
                 }});
    d.push_back({"cluster.profile", "profile name or .ini path", "", "hardware profile (models/profiles)",
                 [](PointBuilder& b, const std::string& v) { b.run.cluster.profile = trim(v); }});
    d.push_back({"cluster.device_memory", "size", "backend default", "bytes of device memory per rank",
                 [](PointBuilder& b, const std::string& v) { b.run.cluster.device_memory = parse_size(v); }});
    d.push_back({"workload.seed", "integer >= 0", "42", "seed of both relations",
                 [](PointBuilder& b, const std::string& v) {
                   b.run.workload.r.seed = b.run.workload.s.seed = parse_size(v, true);
                 }});
    d.push_back({"workload.scale_factor", "number in (0, 100000]", "(required for tpch_* and workload.query)",
                 "TPC-H scale factor: tpch_orders has 1.5 M x this rows, tpch_lineitem their lineitems; the SSB "
                 "scale factor of workload.query",
                 [](PointBuilder& b, const std::string& v) {
                   const double sf = parse_number(v);
                   tpch::orders_at(sf);  // rejects 0, negatives and fractions of an order here
                   b.run.workload.r.scale_factor = b.run.workload.s.scale_factor = sf;
                 }});
    d.push_back({"workload.scale_factor_per_rank", "number > 0", "",
                 "TPC-H scale factor per rank (weak scaling: the scale factor is this x ranks, at most 100000)",
                 [](PointBuilder& b, const std::string& v) {
                   b.scale_factor_per_rank = parse_number(v);
                   if (!(b.scale_factor_per_rank > 0)) throw InputError("must be positive");
                 }});
    d.push_back({"workload.query", "none|q2.1|q3.1", "none",
                 "a Star Schema Benchmark query instead of a join of R and S: lineorder and the dimensions it "
                 "reads, from workload.scale_factor (docs/workloads.md)",
                 [](PointBuilder& b, const std::string& v) { b.run.workload.query = ssb::query_from_string(trim(v)); }});
    for (auto& k : relation_keys("workload.", "R and S", both_sides, both_per_rank)) d.push_back(k);
    for (auto& k : relation_keys("workload.r.", "R", r_side, r_per_rank)) d.push_back(k);
    for (auto& k : distribution_keys("workload.r.", "R", r_side, "unique_dense")) d.push_back(k);
    for (auto& k : relation_keys("workload.s.", "S", s_side, s_per_rank)) d.push_back(k);
    for (auto& k : distribution_keys("workload.s.", "S", s_side, "fk")) d.push_back(k);
    return d;
  }();
  return defs;
}

struct ClusterExtra {
  KeyDoc doc;
  std::vector<std::string> backends;  // the backends that read it
};
std::vector<ClusterExtra>& cluster_extras() {
  static std::vector<ClusterExtra> extras;
  return extras;
}
const ClusterExtra* find_cluster_extra(const std::string& key) {
  for (auto& k : cluster_extras())
    if (k.doc.key == key) return &k;
  return nullptr;
}

ProfileCheck& profile_check() {
  static ProfileCheck check;
  return check;
}

const KeyDef* find_def(const std::string& key) {
  for (auto& d : key_defs())
    if (d.key == key) return &d;
  return nullptr;
}

bool is_cluster_extra(const std::string& key) { return find_cluster_extra(key) != nullptr; }

bool is_strategy_key(const std::string& key) { return key.rfind("strategy.", 0) == 0 && key.size() > 9; }

// profile.<section>.<key>: a figure of the profile replaced, checked against the profile format
// when the point is (the models know its keys).
const std::string kProfilePrefix = "profile.";
bool is_profile_key(const std::string& key) {
  return key.rfind(kProfilePrefix, 0) == 0 && key.size() > kProfilePrefix.size();
}

// [figure]: how `joinlab reproduce` draws the experiment; a run reads none of it.
const std::string kFigurePrefix = "figure.";
const std::vector<KeyDoc>& figure_keys() {
  static const std::vector<KeyDoc> keys = {
      {"figure.title", "string", "experiment.description", "the figure's title: paper and figure"},
      {"figure.measures", "string", "experiment.description", "what the figure measures, one sentence"},
      {"figure.x", "column", "the first swept key", "x axis: a swept key or a CSV column (ranks, r_rows, s_rows)"},
      {"figure.x_label", "string", "figure.x", "x axis label, with its unit"},
      {"figure.y", "column", "total_s", "y axis: total_s, throughput_tuples_per_s, fraction_of_bound or phase_<name>_s"},
      {"figure.y_label", "string", "figure.y", "y axis label, with its unit"},
      {"figure.y_factor", "positive number", "1", "y is drawn as the column times this (16e-9: tuples/s of 16 bytes as GB/s)"},
      {"figure.series", "swept keys", "the swept keys but x", "one curve per value of these keys; those the run does not sweep are left out"},
      {"figure.logx", "bool", "false", "log-scale x axis"},
      {"figure.logy", "bool", "false", "log-scale y axis"},
  };
  return keys;
}

bool is_figure_key(const std::string& key) { return key.rfind(kFigurePrefix, 0) == 0; }

// Checks a [figure] key and its value; "" if fine, else why not.
std::string figure_key_error(const std::string& key, const std::string& value) {
  auto& keys = figure_keys();
  if (std::none_of(keys.begin(), keys.end(), [&](const KeyDoc& k) { return k.key == key; })) {
    std::string names;
    for (auto& k : keys) names += (names.empty() ? "" : ", ") + k.key.substr(kFigurePrefix.size());
    return "unknown key '" + key + "' (value '" + value + "'): [figure] keys are " + names;
  }
  try {
    if (key == "figure.logx" || key == "figure.logy") parse_bool(value);
    if (key == "figure.y_factor" && !(parse_number(value) > 0)) throw InputError("must be positive");
    if ((key == "figure.x" || key == "figure.y") && trim(value).empty()) throw InputError("is empty");
  } catch (const InputError& e) {
    return key + " = " + value + ": " + e.what();
  }
  return "";
}

bool is_known_key(const std::string& key) {
  return find_def(key) || is_cluster_extra(key) || is_strategy_key(key) || is_profile_key(key);
}

std::string unknown_key_message(const std::string& key, const std::string& value) {
  std::string msg = "unknown key '" + key + "' (value '" + value + "')";
  std::string best;
  size_t best_d = 4;
  for (auto& d : key_defs()) {
    size_t dist = edit_distance(key, d.key);
    if (dist < best_d) best_d = dist, best = d.key;
  }
  if (!best.empty()) return msg + "; did you mean '" + best + "'?";
  if (key.find('.') == std::string::npos) return msg + ": keys belong in one of the sections " + kSections;
  return msg + " (sections are " + kSections + "; `joinlab list keys` shows every key)";
}

// --- reading the file --------------------------------------------------------------------------

std::string read_text(const std::string& file) {
  auto fail = [&](const std::string& why) { throw InputError("cannot read experiment file '" + file + "': " + why); };
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) fail(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("not a regular file");
  // read(2) itself, so that a failing read (EIO) is an error rather than an empty file.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(std::strerror(errno));
  std::string text;
  char buf[1 << 14];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      text.append(buf, size_t(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int err = errno;
      ::close(fd);
      fail(std::strerror(err));
    }
  }
  ::close(fd);
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // a UTF-8 byte order mark: not part of the text
  const size_t nul = text.find('\0');
  if (nul != std::string::npos)
    throw InputError(file + ":" + std::to_string(1 + std::count(text.begin(), text.begin() + long(nul), '\n')) +
                     ": a NUL byte: not a text file");
  return text;
}

// The line numbers at which each key is written, in order; the same grammar as Boost's config
// file parser ('#' comments, [section] prefixes, key = value). Lines that are none of these are
// rejected here with their number (Boost's own error would not say where).
std::map<std::string, std::vector<int>> scan_key_lines(const std::string& text, const std::string& file) {
  std::map<std::string, std::vector<int>> lines;
  std::istringstream in(text);
  std::string line, prefix;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string s = trim(line.substr(0, line.find('#')));
    if (s.empty()) continue;
    if (s.front() == '[' && s.back() == ']') {
      prefix = trim(s.substr(1, s.size() - 2));
      if (!prefix.empty() && prefix.back() != '.') prefix += '.';
      continue;
    }
    auto eq = s.find('=');
    if (eq == std::string::npos || trim(s.substr(0, eq)).empty())
      throw InputError(file + ":" + std::to_string(n) + ": '" + s + "' is neither [section] nor key = value");
    lines[prefix + trim(s.substr(0, eq))].push_back(n);
  }
  return lines;
}

po::options_description known_options() {
  po::options_description desc("experiment keys");
  for (auto& d : key_defs()) desc.add_options()(d.key.c_str(), po::value<std::string>(), d.help.c_str());
  for (auto& k : cluster_extras()) desc.add_options()(k.doc.key.c_str(), po::value<std::string>(), k.doc.help.c_str());
  return desc;
}

struct SweepAxis {
  std::string key;
  std::string list;
  std::string origin;
  std::vector<std::string> values;
};

struct RawExperiment {
  Settings settings;
  std::vector<SweepAxis> axes;  // file order
  std::map<std::string, std::string> figure;  // [figure], keys without "figure."
};

RawExperiment read_experiment(const std::string& file) {
  const std::string text = read_text(file);
  auto lines = scan_key_lines(text, file);
  po::parsed_options parsed(nullptr);
  po::options_description desc = known_options();
  try {
    std::istringstream in(text);
    parsed = po::parse_config_file(in, desc, /*allow_unregistered=*/true);
  } catch (const po::error& e) {
    throw InputError(file + ": " + e.what());
  }
  RawExperiment raw;
  std::map<std::string, size_t> seen;
  for (const po::option& o : parsed.options) {
    const std::string& key = o.string_key;
    const std::string value = o.value.empty() ? "" : o.value.front();
    const auto& at = lines[key];
    size_t nth = seen[key]++;
    int line = nth < at.size() ? at[nth] : 0;
    std::string origin = file + (line ? ":" + std::to_string(line) : "");
    if (nth > 0)
      throw InputError(origin + ": " + key + " is set again (first at line " + std::to_string(at.front()) + ")");
    if (is_figure_key(key)) {
      const std::string why = figure_key_error(key, value);
      if (!why.empty()) throw InputError(origin + ": " + why);
      raw.figure[key.substr(kFigurePrefix.size())] = trim(value);
    } else if (key.rfind("sweep.", 0) == 0) {
      std::string swept = key.substr(6);
      if (!is_known_key(swept)) throw InputError(origin + ": [sweep] " + unknown_key_message(swept, value));
      raw.axes.push_back({swept, value, origin + " ([sweep])", {}});
    } else if (is_known_key(key)) {
      raw.settings[key] = {value, origin};
    } else {
      throw InputError(origin + ": " + unknown_key_message(key, value));
    }
  }
  return raw;
}

void apply_overrides(RawExperiment& raw, const std::vector<Override>& overrides) {
  for (const auto& o : overrides) {
    std::string origin = "command line (--" + o.key + "=" + o.value + ")";
    if (is_figure_key(o.key)) {
      const std::string why = figure_key_error(o.key, o.value);
      if (!why.empty()) throw InputError("command line: " + why);
      raw.figure[o.key.substr(kFigurePrefix.size())] = trim(o.value);
      continue;
    }
    bool is_sweep = o.key.rfind("sweep.", 0) == 0;
    std::string key = is_sweep ? o.key.substr(6) : o.key;
    if (!is_known_key(key)) throw InputError("command line: " + unknown_key_message(o.key, o.value));
    auto axis = std::find_if(raw.axes.begin(), raw.axes.end(), [&](const SweepAxis& a) { return a.key == key; });
    if (is_sweep) {
      if (axis != raw.axes.end()) *axis = {key, o.value, origin, {}};
      else raw.axes.push_back({key, o.value, origin, {}});
    } else {
      if (axis != raw.axes.end()) raw.axes.erase(axis);  // a fixed value replaces the sweep
      raw.settings[key] = {o.value, origin};
      // A shorthand given here beats the file's side keys (which beat shorthands within a file).
      static const std::regex shorthand("workload\\.(rows|rows_per_rank|key_bytes|payload_bytes)");
      static const std::regex side_size("workload\\.([rs]\\.)?(rows|rows_per_rank)");
      auto drop = [&](const std::string& k) {
        if (k == key) return;
        raw.settings.erase(k);
        raw.axes.erase(std::remove_if(raw.axes.begin(), raw.axes.end(), [&](const SweepAxis& a) { return a.key == k; }),
                       raw.axes.end());
      };
      std::smatch m;
      if (std::regex_match(key, m, shorthand))
        for (const char* side : {"workload.r.", "workload.s."}) drop(side + m[1].str());
      // A size given here, total or per rank, replaces the file's size of the other kind.
      if (std::regex_match(key, m, side_size)) {
        const std::string other = m[2].str() == "rows" ? "rows_per_rank" : "rows";
        const std::vector<std::string> sides = m[1].matched ? std::vector<std::string>{m[1].str()}
                                                            : std::vector<std::string>{"", "r.", "s."};
        for (const auto& side : sides) drop("workload." + side + other);
      }
    }
  }
}

void parse_axes(RawExperiment& raw) {
  size_t total = 1;
  for (auto& a : raw.axes) {
    if (a.key == "experiment.name" || a.key == "experiment.output_dir" || a.key == "experiment.description")
      throw InputError(a.origin + ": " + a.key + " cannot be swept (it names the output of the whole experiment)");
    try {
      a.values = split_list(a.list);
    } catch (const InputError& e) {
      throw InputError(a.origin + ": " + a.key + " = " + a.list + ": " + e.what());
    }
    if (a.values.empty()) throw InputError(a.origin + ": sweep over " + a.key + " has an empty list of values");
    for (size_t i = 0; i < a.values.size(); ++i)
      for (size_t j = 0; j < i; ++j)
        if (a.values[i] == a.values[j])
          throw InputError(a.origin + ": sweep over " + a.key + " = " + a.list + " lists '" + a.values[i] +
                           "' twice (each point would run twice)");
    total *= a.values.size();
    if (total > kMaxSweepPoints)
      throw InputError(a.origin + ": the sweep has more than " + std::to_string(kMaxSweepPoints) + " points");
  }
}

std::string file_stem(const std::string& file) {
  std::string base = file.substr(file.find_last_of('/') + 1);
  if (base.size() > 4 && base.compare(base.size() - 4, 4, ".ini") == 0) base = base.substr(0, base.size() - 4);
  return base;
}

// --- building and checking one point ------------------------------------------------------------

// Turns an error about some key of one point into "origin: key = value: why (sweep point)".
class PointContext {
 public:
  PointContext(const Settings& s, const std::string& file, std::string point)
      : settings_(s), file_(file), point_(std::move(point)) {}

  // The setting that gave `key` its value, including the workload.* shorthand of a side key.
  const Setting* find(const std::string& key) const {
    auto it = settings_.find(key);
    if (it != settings_.end()) return &it->second;
    static const std::regex side_key("workload\\.[rs]\\.(.*)");
    std::smatch m;
    if (std::regex_match(key, m, side_key)) return find("workload." + m[1].str());
    return nullptr;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    const Setting* s = find(key);
    std::string where = s ? s->origin + ": " + key + " = " + s->value : file_ + ": " + key + default_note(key);
    throw InputError(where + ": " + why + point_);
  }
  [[noreturn]] void fail_here(const std::string& why) const { throw InputError(file_ + ": " + why + point_); }

 private:
  static std::string default_note(const std::string& key) {
    const KeyDef* d = find_def(key);
    return d && !d->default_value.empty() ? " (default " + d->default_value + ")" : " (not set)";
  }
  const Settings& settings_;
  const std::string& file_;
  std::string point_;
};

[[noreturn]] void fail_workload(const std::string& message, const PointContext& ctx);

// An SSB query's workload: S is lineorder (tpch_lineitem's rows of the scale factor, the query's
// 8-byte keys, the revenue as an 8-byte payload), R empty; the keys that shape R and S are refused.
Workload star_workload(const Workload& given, const Settings& settings, const PointContext& ctx) {
  const std::string query = std::string("workload.query = ") + ssb::to_string(given.query);
  for (const std::string side : {"", "r.", "s."})
    for (const char* field : {"rows", "rows_per_rank", "key_bytes", "payload_bytes", "dist"})
      if (settings.count("workload." + side + field))
        ctx.fail("workload." + side + field, query + " makes its own tables from workload.scale_factor; leave this unset");
  if (!settings.count("workload.scale_factor")) ctx.fail_here("workload.scale_factor is not set: " + query + " needs it");
  try {
    return ssb::workload(given.query, given.s.scale_factor, given.s.seed);
  } catch (const InputError& e) {
    // The message names its key and value ("key = value: why"); the context says where that was set.
    const std::string m = e.what();
    const size_t why = m.find(": ");
    ctx.fail(m.rfind("workload.query", 0) == 0 ? "workload.query" : "workload.scale_factor",
             why == std::string::npos ? m : m.substr(why + 2));
  }
}

RunPoint build_point(const Settings& settings, const std::string& file, const PointContext& ctx) {
  PointBuilder b;
  b.run.name = file_stem(file);
  b.run.workload.r.name = "R";
  b.run.workload.r.dist = KeyDist::UniqueDense;
  b.run.workload.s.name = "S";
  b.run.workload.s.dist = KeyDist::ForeignKey;
  b.run.workload.r.rows = b.run.workload.s.rows = 0;
  b.run.cluster.profile_dir = profile_dir();
  for (auto& d : key_defs()) {
    auto it = settings.find(d.key);
    if (it == settings.end()) continue;
    try {
      d.apply(b, it->second.value);
    } catch (const InputError& e) {
      ctx.fail(d.key, e.what());
    }
  }
  for (auto& [key, s] : settings) {
    if (is_strategy_key(key)) b.run.strategy_options[key.substr(9)] = trim(s.value);
    if (is_cluster_extra(key)) b.run.cluster.options[key.substr(8)] = trim(s.value);
    if (is_profile_key(key)) b.run.cluster.profile_overrides[key.substr(kProfilePrefix.size())] = trim(s.value);
  }
  if (!settings.count("experiment.strategy")) ctx.fail_here("experiment.strategy is not set ([experiment] strategy = ...)");
  if (int64_t(b.run.cluster.shape.nodes) * b.run.cluster.shape.per_node > kMaxRanks)
    ctx.fail("cluster.gpus_per_node", "x cluster.nodes = " +
                                          std::to_string(int64_t(b.run.cluster.shape.nodes) * b.run.cluster.shape.per_node) +
                                          " ranks, more than the " + std::to_string(kMaxRanks) + " any backend runs");
  if (b.run.workload.is_ssb()) {
    b.run.workload = star_workload(b.run.workload, settings, ctx);
    b.run.verify = b.verify != 0;
    return b.run;
  }
  try {  // before the sizes, which depend on the distributions
    b.run.workload.check_pairing();
  } catch (const InputError& e) {
    fail_workload(e.what(), ctx);
  }
  // TPC-H weak scaling: the scale factor of both relations is scale_factor_per_rank x ranks.
  const bool per_rank_sf = settings.count("workload.scale_factor_per_rank") > 0;
  if (per_rank_sf && (b.run.workload.r.is_tpch() || b.run.workload.s.is_tpch())) {
    if (settings.count("workload.scale_factor"))
      ctx.fail("workload.scale_factor_per_rank", "give workload.scale_factor (total) or workload.scale_factor_per_rank, not both");
    const double sf = b.scale_factor_per_rank * double(b.run.cluster.shape.size());
    try {
      tpch::orders_at(sf);
    } catch (const InputError& e) {
      std::ostringstream m;
      m << "x " << b.run.cluster.shape.size() << " ranks = scale factor " << sf << ": " << e.what();
      ctx.fail("workload.scale_factor_per_rank", m.str());
    }
    b.run.workload.r.scale_factor = b.run.workload.s.scale_factor = sf;
  }
  // Sizes: a side's own key beats the both-sides shorthand; at each level rows (total) and
  // rows_per_rank exclude each other. TPC-H relations take theirs from the scale factor.
  for (const std::string side : {"r", "s"}) {
    const std::string rows = "workload." + side + ".rows", per_rank = rows + "_per_rank";
    RelationSpec& spec = side == "r" ? b.run.workload.r : b.run.workload.s;
    if (spec.is_tpch()) {
      for (const std::string& size_key : {rows, per_rank, std::string("workload.rows"), std::string("workload.rows_per_rank")})
        if (settings.count(size_key))
          ctx.fail(size_key, std::string("workload.") + side + ".dist = " + to_string(spec.dist) +
                                 " takes its rows from workload.scale_factor; leave the rows unset");
      if (!settings.count("workload.scale_factor") && !per_rank_sf)
        ctx.fail_here("workload.scale_factor is not set (nor workload.scale_factor_per_rank): workload." + side +
                      ".dist = " + to_string(spec.dist) + " takes its rows from it");
      try {
        spec.rows = tpch_rows(spec);
      } catch (const InputError& e) {
        fail_workload(e.what(), ctx);
      }
      continue;
    }
    const bool own_rows = settings.count(rows), own_per_rank = settings.count(per_rank);
    const bool all_rows = settings.count("workload.rows"), all_per_rank = settings.count("workload.rows_per_rank");
    if (own_rows && own_per_rank) ctx.fail(per_rank, "give " + rows + " (total) or " + per_rank + ", not both");
    if (!own_rows && !own_per_rank && all_rows && all_per_rank)
      ctx.fail("workload.rows_per_rank", "give workload.rows (total) or workload.rows_per_rank, not both");
    const bool use_per_rank = own_per_rank || (!own_rows && all_per_rank);
    if (!use_per_rank && !own_rows && !all_rows)
      ctx.fail_here(rows + " is not set (nor workload.rows or workload.rows_per_rank)");
    if (use_per_rank) {
      const uint64_t per = side == "r" ? b.r_rows_per_rank : b.s_rows_per_rank;
      const int ranks = b.run.cluster.shape.size();
      uint64_t total = 0;
      if (__builtin_mul_overflow(per, uint64_t(ranks), &total))
        ctx.fail(own_per_rank ? per_rank : std::string("workload.rows_per_rank"),
                 "x " + std::to_string(ranks) + " ranks overflows the 64-bit row count (more than 2^64 rows)");
      (side == "r" ? b.run.workload.r : b.run.workload.s).rows = total;
    }
  }
  for (const std::string side : {"r", "s"}) {
    const RelationSpec& r = side == "r" ? b.run.workload.r : b.run.workload.s;
    const std::string hi = "workload." + side + ".range_hi";
    if (r.dist == KeyDist::Uniform && !settings.count(hi))
      ctx.fail_here(hi + " is not set: workload." + side + ".dist = uniform needs the largest key (range_lo, default 1, "
                    "is the smallest)");
  }
  b.run.verify = b.verify != 0;
  return b.run;
}

bool takes_integer(const po::option_description& opt) {
  const po::value_semantic* s = opt.semantic().get();
  return dynamic_cast<const po::typed_value<int64_t>*>(s) || dynamic_cast<const po::typed_value<uint64_t>*>(s) ||
         dynamic_cast<const po::typed_value<int>*>(s) || dynamic_cast<const po::typed_value<unsigned>*>(s);
}

// Checks the [strategy] keys against the strategy's own options; integer options also take
// sizes (4M, 2^22), rewritten here as plain numbers. The key whose value make_job rejects is
// found by trying the keys one at a time.
// A key that only other strategies of the plan have (a [strategy] section shared by a sweep over
// strategies) does not apply to this point and is dropped from it.
void check_strategy_options(RunPoint& p, const StrategyInfo& info, const std::set<std::string>& plan_strategies,
                            const PointContext& ctx) {
  po::options_description desc("strategy " + p.strategy);
  if (info.add_options) info.add_options(desc);
  for (auto it = p.strategy_options.begin(); it != p.strategy_options.end();) {
    const std::string& k = it->first;
    if (!desc.find_nothrow(k, false) && std::any_of(plan_strategies.begin(), plan_strategies.end(), [&](const std::string& other) {
          if (other == p.strategy) return false;
          po::options_description theirs;
          try {
            const StrategyInfo& o = find_strategy(other);
            if (o.add_options) o.add_options(theirs);
          } catch (const InputError&) {
            return false;  // an unknown strategy: its own point says so
          }
          return theirs.find_nothrow(k, false) != nullptr;
        }))
      it = p.strategy_options.erase(it);
    else
      ++it;
  }
  for (auto& [k, v] : p.strategy_options) {
    if (const po::option_description* opt = desc.find_nothrow(k, false)) {
      if (takes_integer(*opt) && v.find_first_not_of("0123456789") != std::string::npos && v.rfind("-", 0) != 0) {
        try {
          v = std::to_string(parse_size(v, true));
        } catch (const InputError&) {
          // not a size either: make_job reports the value as the strategy sees it
        }
      }
      continue;
    }
    std::string known;
    for (auto& opt : desc.options()) known += (known.empty() ? "" : ", ") + opt->long_name();
    ctx.fail("strategy." + k, "strategy " + p.strategy + " has no option '" + k + "' (its options: " +
                                  (known.empty() ? "none" : known) + ")" +
                                  (plan_strategies.size() > 1 ? "; nor has any other strategy of this experiment" : ""));
  }
  try {
    make_job(p);
  } catch (const InputError& whole) {
    for (auto& [k, v] : p.strategy_options) {
      RunPoint one = p;
      one.strategy_options = {{k, v}};
      try {
        make_job(one);
      } catch (const InputError& e) {
        ctx.fail("strategy." + k, e.what());
      }
    }
    ctx.fail_here(whole.what());
  }
}

// Workload errors say "relation S: match_rate = 1.5: why": point at workload.s.match_rate.
[[noreturn]] void fail_workload(const std::string& message, const PointContext& ctx) {
  static const std::regex field_error("relation ([RS]): ([a-z_]+) = .*?: (.*)");
  std::smatch m;
  if (std::regex_match(message, m, field_error)) {
    std::string field = m[2].str() == "range" ? "range_lo" : m[2].str();
    std::string side = m[1].str() == "R" ? "r" : "s";
    if (field == "scale_factor") ctx.fail("workload.scale_factor", m[3].str() + " (relation " + m[1].str() + ")");
    ctx.fail("workload." + side + "." + field, m[3].str() + " (relation " + m[1].str() + ")");
  }
  static const std::regex any_field("relation ([RS]): ([a-z_]+) = .*");
  if (std::regex_match(message, m, any_field))
    ctx.fail("workload." + std::string(m[1].str() == "R" ? "r" : "s") + "." + m[2].str(), message);
  if (message.find("key widths differ") != std::string::npos) ctx.fail("workload.s.key_bytes", message);
  ctx.fail_here(message);
}

// An error that begins "<echoed><key> = <value>: " about one of `settings` (written
// <section><key> in the experiment) names that setting, without the echo (ctx.fail says that part
// itself); returns when the error is about none of them.
void fail_echoed(const std::string& echoed, const std::string& section, const std::map<std::string, std::string>& settings,
                 const std::string& message, const PointContext& ctx) {
  for (auto& [k, v] : settings) {
    const std::string echo = echoed + k + " = " + v + ": ";
    if (message.rfind(echo, 0) == 0) ctx.fail(section + k, message.substr(echo.size()));
  }
}

// Backend errors name the option as "cluster.<key>" or "option <key>": point at its setting.
[[noreturn]] void fail_cluster(const RunPoint& p, const std::string& message, const PointContext& ctx) {
  fail_echoed("cluster.", "cluster.", p.cluster.options, message, ctx);
  for (auto& [k, v] : p.cluster.options)
    if (message.find("cluster." + k) != std::string::npos || message.find("option " + k) != std::string::npos)
      ctx.fail("cluster." + k, message);
  if (message.find("ranks") != std::string::npos) ctx.fail("cluster.nodes", message);
  ctx.fail_here(message);
}

void check_point(RunPoint& p, const std::set<std::string>& plan_strategies, const PointContext& ctx, PlanFor purpose) {
  const StrategyInfo* info = nullptr;
  try {
    info = &find_strategy(p.strategy);
  } catch (const InputError& e) {
    ctx.fail("experiment.strategy", e.what());
  }
  std::unique_ptr<Backend> backend;
  try {
    backend = make_backend(p.backend);
  } catch (const InputError& e) {
    ctx.fail("experiment.backend", e.what());
  }
  for (auto it = p.cluster.options.begin(); it != p.cluster.options.end();) {
    const std::string& k = it->first;
    const ClusterExtra* extra = find_cluster_extra("cluster." + k);
    const bool foreign =
        extra && std::find(extra->backends.begin(), extra->backends.end(), p.backend) == extra->backends.end();
    if (foreign && purpose == PlanFor::SimulatingMeasured) {  // it configured the measured run
      it = p.cluster.options.erase(it);
      continue;
    }
    ++it;
    if (foreign) {
      std::string which;
      for (auto& b : extra->backends) which += (which.empty() ? "" : " and ") + b;
      ctx.fail("cluster." + k, "only the " + which + " backend" + (extra->backends.size() > 1 ? "s read" : " reads") +
                                   " it; this point runs on the " + p.backend + " backend");
    }
  }
  const bool own_profile = !p.cluster.profile.empty();
  // A backend without a default profile simulates none: an override would change nothing.
  if (!p.cluster.profile_overrides.empty() && backend->default_profile().empty() && purpose == PlanFor::Running)
    ctx.fail(kProfilePrefix + p.cluster.profile_overrides.begin()->first,
             "the " + p.backend + " backend simulates no profile; profile keys apply to points on the sim backend");
  if (!own_profile) p.cluster.profile = backend->default_profile();  // named in the outputs
  if (!p.cluster.profile.empty()) {
    const std::string path = profile_path(p.cluster.profile);
    if (path.empty()) {
      std::string known;
      for (auto& n : profile_names()) known += (known.empty() ? "" : ", ") + n;
      ctx.fail("cluster.profile", "no such profile in " + profile_dir() + " (available: " +
                                      (known.empty() ? "none" : known) + ")");
    }
    if (profile_check()) {
      try {
        profile_check()(path, p.cluster.profile_overrides);
      } catch (const InputError& e) {
        fail_echoed("", kProfilePrefix, p.cluster.profile_overrides, e.what(), ctx);
        if (own_profile) ctx.fail("cluster.profile", e.what());
        ctx.fail_here(e.what());
      }
    }
  }
  try {
    backend->check(p.cluster);
  } catch (const InputError& e) {
    fail_cluster(p, e.what(), ctx);
  }
  int ranks = p.cluster.shape.size();
  if (ranks < info->min_ranks || (info->max_ranks > 0 && ranks > info->max_ranks)) {
    std::string range = std::to_string(info->min_ranks);
    if (info->max_ranks != info->min_ranks)
      range += ".." + (info->max_ranks > 0 ? std::to_string(info->max_ranks) : std::string("any"));
    ctx.fail("cluster.gpus_per_node", "strategy " + p.strategy + " runs on " + range + " ranks, but " +
                                          std::to_string(p.cluster.shape.nodes) + " nodes x " +
                                          std::to_string(p.cluster.shape.per_node) + " = " +
                                          std::to_string(ranks) + " ranks were asked for");
  }
  try {
    p.workload.validate();
  } catch (const InputError& e) {
    fail_workload(e.what(), ctx);
  }
  check_strategy_options(p, *info, plan_strategies, ctx);
  try {
    validate_point(p);  // whatever else the runner checks (verifiability)
    check_device_memory(p, make_job(p), *backend);  // the working set fits
  } catch (const InputError& e) {
    ctx.fail_here(e.what());
  }
}

}  // namespace

ExperimentPlan plan_experiment(const std::string& file, const std::vector<Override>& overrides, PlanFor purpose) {
  register_builtin();
  RawExperiment raw = read_experiment(file);
  apply_overrides(raw, overrides);
  parse_axes(raw);

  ExperimentPlan plan;
  plan.file = file;
  plan.figure = raw.figure;
  for (auto& a : raw.axes) plan.swept_keys.push_back(a.key);
  size_t total = 1;
  for (auto& a : raw.axes) total *= a.values.size();
  std::vector<std::pair<Settings, std::string>> point_settings;  // each point's settings and sweep note
  for (size_t i = 0; i < total; ++i) {
    PlannedPoint pp;
    Settings settings = raw.settings;
    size_t rest = i;
    for (size_t k = raw.axes.size(); k-- > 0;) {  // the last axis varies fastest
      const SweepAxis& a = raw.axes[k];
      const std::string& v = a.values[rest % a.values.size()];
      rest /= a.values.size();
      settings[a.key] = {v, a.origin};
      pp.swept.insert(pp.swept.begin(), {a.key, v});
    }
    std::string where = raw.axes.empty() ? "" : " (sweep point " + std::to_string(i + 1) + " of " +
                                                     std::to_string(total) + ": " + pp.label() + ")";
    PointContext ctx(settings, file, where);
    pp.run = build_point(settings, file, ctx);
    plan.points.push_back(std::move(pp));
    point_settings.push_back({std::move(settings), where});
  }
  // Checked once every point is built: a [strategy] key may belong to another point's strategy.
  std::set<std::string> strategies;
  for (auto& pp : plan.points) strategies.insert(pp.run.strategy);
  for (size_t i = 0; i < plan.points.size(); ++i) {
    PointContext ctx(point_settings[i].first, file, point_settings[i].second);
    check_point(plan.points[i].run, strategies, ctx, purpose);
  }
  plan.name = plan.points.front().run.name;
  auto out = raw.settings.find("experiment.output_dir");
  plan.output_dir = out != raw.settings.end() ? trim(out->second.value) : "results";
  if (plan.output_dir.empty()) throw InputError(out->second.origin + ": experiment.output_dir is empty");
  return plan;
}

std::vector<KeyDoc> experiment_keys() {
  std::vector<KeyDoc> docs;
  for (auto& d : key_defs()) docs.push_back({d.key, d.type, d.default_value, d.help});
  for (auto& k : cluster_extras()) docs.push_back(k.doc);
  docs.push_back({"strategy.<option>", "per strategy", "", "passed to the strategy, which validates it"});
  docs.push_back({"profile.<section>.<key>", "as in the profile", "the profile's",
                  "sim: replaces a figure of the profile (profile.link.nic.bw = 50e9, profile.topology.fabric = fat_tree)"});
  docs.push_back({"sweep.<section.key>", "comma-separated list", "",
                  "one run point per value; several sweeps form the cartesian product, first key slowest"});
  for (auto& k : figure_keys()) docs.push_back(k);
  return docs;
}

void register_cluster_key(const std::string& key, const std::string& help, const std::string& backend) {
  std::string full = key.rfind("cluster.", 0) == 0 ? key : "cluster." + key;
  if (find_def(full)) return;
  for (auto& k : cluster_extras()) {
    if (k.doc.key != full) continue;
    if (std::find(k.backends.begin(), k.backends.end(), backend) == k.backends.end()) {
      k.backends.push_back(backend);
      k.doc.type += ", " + backend;
    }
    return;
  }
  cluster_extras().push_back({{full, "value read by backend " + backend, "", help}, {backend}});
}

void register_profile_check(ProfileCheck check) { profile_check() = std::move(check); }

std::map<std::string, std::string> read_figure(const std::string& file) { return read_experiment(file).figure; }

std::string describe_experiment(const std::string& file) {
  const std::string text = read_text(file);
  std::istringstream in(text);
  std::string line, section;
  std::map<std::string, std::string> values;
  while (std::getline(in, line)) {
    std::string s = trim(line.substr(0, line.find('#')));
    if (s.size() > 1 && s.front() == '[' && s.back() == ']') section = trim(s.substr(1, s.size() - 2));
    auto eq = s.find('=');
    if (section == "experiment" && eq != std::string::npos) values[trim(s.substr(0, eq))] = trim(s.substr(eq + 1));
  }
  std::string d = "strategy " + (values.count("strategy") ? values["strategy"] : std::string("?")) +
                  ", backend " + (values.count("backend") ? values["backend"] : std::string("cpu"));
  if (values.count("description")) d += ": " + values["description"];
  return d;
}

}  // namespace joinlab
