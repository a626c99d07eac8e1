#include "models/profile.hpp"

#include <algorithm>
#include <cmath>
#include <dirent.h>
#include <fstream>
#include <functional>
#include <iomanip>
#include <set>
#include <sstream>

#include "core/common/error.hpp"

namespace joinlab {

const char* to_string(IntraNode v) {
  switch (v) {
    case IntraNode::NVSwitch: return "nvswitch";
    case IntraNode::NVLinkMesh: return "nvlink_mesh";
    case IntraNode::PCIe: return "pcie";
  }
  return "?";
}
const char* to_string(NicPlacement v) { return v == NicPlacement::PerGpu ? "per_gpu" : "per_node"; }
const char* to_string(Fabric v) { return v == Fabric::Star ? "star" : "fat_tree"; }

const std::vector<std::string>& cpu_op_kinds() {
  static const std::vector<std::string> k{"generate", "histogram", "partition", "pack", "build", "probe", "join",
                                          "sort",     "merge",     "gather",    "checksum", "scan", "copy",
                                          "multiway_merge"};
  return k;
}

std::string cpu_kind_stand_in(const std::string& kind) { return kind == "multiway_merge" ? "merge" : ""; }

namespace {
// y at log2(x) on the polyline through pts (log2 x, y), ascending; flat beyond its ends.
double interpolate_log2(const std::vector<std::pair<double, double>>& pts, double x) {
  const double lx = std::log2(std::max(x, 1.0));
  if (lx <= pts.front().first) return pts.front().second;
  for (size_t i = 1; i < pts.size(); ++i)
    if (lx <= pts[i].first) {
      const double f = (lx - pts[i - 1].first) / (pts[i].first - pts[i - 1].first);
      return pts[i - 1].second + (pts[i].second - pts[i - 1].second) * f;
    }
  return pts.back().second;
}
// A table's points (log2 of its key, its value), ascending keys.
template <class Key>
std::vector<std::pair<double, double>> log2_points(const std::map<Key, double>& table) {
  std::vector<std::pair<double, double>> pts;
  for (auto [n, y] : table) pts.emplace_back(std::log2(double(n)), y);
  return pts;
}
}  // namespace

double CpuSpec::merge_runs_factor(int runs) const {
  return merge_runs.empty() ? 1.0 : interpolate_log2(log2_points(merge_runs), double(std::max(runs, 1)));
}

// Linear in the busy cores between one core alone (rate) and every core busy (loaded, at the
// operator's team size where teams were measured).
double CpuSpec::per_thread_rate(const std::string& kind, int busy, int cores, int team) const {
  if (!rate.count(kind) && !cpu_kind_stand_in(kind).empty())
    return per_thread_rate(cpu_kind_stand_in(kind), busy, cores, team);
  const double one = rate.at(kind);
  auto it = loaded.find(kind);
  if (it == loaded.end() || cores < 2) return one;
  double full = it->second;
  if (auto t = team_loaded.find(kind); t != team_loaded.end() && team > 0 && team < cores) {
    std::vector<std::pair<double, double>> pts;
    for (auto [n, r] : t->second)
      if (n < cores) pts.emplace_back(std::log2(double(n)), r);
    pts.emplace_back(std::log2(double(cores)), it->second);
    full = interpolate_log2(pts, team);
  }
  const double f = std::clamp(double(busy - 1) / double(cores - 1), 0.0, 1.0);
  return one + (full - one) * f;
}

double CpuSpec::operator_overhead(int threads) const {
  if (threads <= 1) return 0;
  if (team_op_overhead.empty()) return op_overhead;
  return interpolate_log2(log2_points(team_op_overhead), threads);
}

double CpuSpec::copy_thread_rate(int copying, int cores) const {
  if (copy_rate.empty()) return per_thread_rate("copy", copying, cores);
  std::vector<std::pair<double, double>> pts = log2_points(copy_rate);  // (log2 threads, rate)
  if (auto it = loaded.find("copy"); it != loaded.end() && cores > copy_rate.rbegin()->first)
    pts.emplace_back(std::log2(double(cores)), it->second);
  return interpolate_log2(pts, copying);
}

const std::vector<std::string>& msg_transports() {
  static const std::vector<std::string> t{"inproc", "ucx", "mpi", "nccl", "peer"};
  return t;
}

std::string backend_transport(const std::string& backend, const std::string& kind, const MsgSpec& msg,
                              const std::string& preferred) {
  const std::vector<std::string> choices = backend == "cpu" ? std::vector<std::string>{preferred.empty() ? "inproc" : preferred}
                                           : kind == "send" ? std::vector<std::string>{"nccl", "peer"}
                                                            : std::vector<std::string>{"ucx", "peer"};
  for (auto& t : choices)
    if (msg.cost.count(t + "." + kind)) return t;
  return "";
}

const std::vector<std::string>& msg_cost_keys() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> v;
    for (auto& t : msg_transports()) {
      v.push_back(t + ".send");
      if (t != "nccl") v.push_back(t + ".put");  // NCCL has no one-sided put
    }
    return v;
  }();
  return k;
}

double granule_rate(const ZeroCopyRates& t, double bw, double granule) {
  if (bw <= 0 || t.empty()) return bw;
  std::vector<std::pair<double, double>> pts;  // (log granule, log rate), ascending granules
  for (auto [g, r] : t.random)
    if (r > 0 && g < kLinkSequentialGranule) pts.emplace_back(std::log(double(g)), std::log(std::min(r, bw)));
  const double seq = t.sequential > 0 ? std::min(t.sequential, bw) : bw;
  pts.emplace_back(std::log(kLinkSequentialGranule), std::log(seq));
  const double x = std::log(std::max(granule, 1.0));
  if (x <= pts.front().first) return std::exp(pts.front().second) * std::max(granule, 1.0) / std::exp(pts.front().first);
  for (size_t i = 1; i < pts.size(); ++i)
    if (x <= pts[i].first) {
      const double t = (x - pts[i - 1].first) / (pts[i].first - pts[i - 1].first);
      return std::exp(pts[i - 1].second + t * (pts[i].second - pts[i - 1].second));
    }
  return seq;
}

double equivalent_granule(const LinkSpec& l, double rate) {
  if (rate >= l.access_rate(kLinkSequentialGranule)) return kLinkSequentialGranule;
  double lo = 0, hi = std::log(kLinkSequentialGranule);  // access_rate rises with the granule
  for (int i = 0; i < 60; ++i) {
    const double mid = (lo + hi) / 2;
    (l.access_rate(std::exp(mid)) < rate ? lo : hi) = mid;
  }
  return std::exp(hi);
}

double fanout_rate(const std::map<uint32_t, double>& table, uint32_t fanout) {
  if (table.empty()) return 0;
  auto hi = table.lower_bound(fanout);
  if (hi == table.end()) return std::prev(hi)->second;
  if (hi->first == fanout || hi == table.begin()) return hi->second;
  auto lo = std::prev(hi);
  const double t = std::log(double(fanout) / lo->first) / std::log(double(hi->first) / lo->first);
  return std::exp(std::log(lo->second) + t * (std::log(hi->second) - std::log(lo->second)));
}

std::string share_key(const std::string& kind, uint64_t bytes) {
  std::string k = kind;
  std::replace(k.begin(), k.end(), '.', '_');  // a key's dots name sections
  return "gpu.share_" + k + "_" + std::to_string(bytes);
}

double op_share(const GpuSpec& gpu, const std::string& kind, double bytes) {
  auto it = gpu.share.find(kind);
  if (it == gpu.share.end() || it->second.empty()) return 1.0;
  return std::clamp(interpolate_log2(log2_points(it->second), bytes), 0.5, 1.0);
}

double write_reverse_cost(const LinkSpec& h2d, const LinkSpec& d2h, double granule) {
  if (h2d.beside_copy.empty() || d2h.beside_copy.empty() || h2d.bw <= 0) return 0;
  const double copies = granule_rate(h2d.beside_copy, h2d.bw, granule);
  const double writes = granule_rate(d2h.beside_copy, d2h.bw, granule);
  const double alone = d2h.access_rate(granule);  // writes alone keep their own rate
  if (writes <= 0 || alone <= 0) return 0;
  return std::min(std::max(0.0, h2d.bw - copies) / writes, h2d.bw / alone);
}

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

enum class Kind { Number, Positive, Count, Text, Choice };

struct Field {
  std::string key;  // "section.key"
  Kind kind;
  bool required;
  std::vector<std::string> choices;                       // Choice
  std::function<void(Profile&, const std::string&, double)> set;
  std::function<std::string(const Profile&)> get;         // for writing
  std::function<bool(const Profile&)> has = nullptr;      // written only where it holds (unset: always)
  std::string unread = "";  // why the simulator ignores it (kept for information): an override of it is refused
};

std::string num(double v) {
  std::ostringstream o;
  o << std::setprecision(6) << v;
  return o.str();
}

const std::vector<Field>& fields() {
  using P = Profile;
  auto number = [](std::string key, Kind kind, bool req, std::function<double&(P&)> ref) {
    return Field{key, kind, req, {}, [ref](P& p, const std::string&, double v) { ref(p) = v; },
                 [ref](const P& p) { return num(ref(const_cast<P&>(p))); }};
  };
  auto text = [](std::string key, bool req, std::function<std::string&(P&)> ref) {
    return Field{key, Kind::Text, req, {}, [ref](P& p, const std::string& s, double) { ref(p) = s; },
                 [ref](const P& p) { return ref(const_cast<P&>(p)); }};
  };
  static const std::vector<Field> f = [&] {
    std::vector<Field> v;
    v.push_back(text("profile.name", true, [](P& p) -> std::string& { return p.name; }));
    v.push_back(text("profile.description", false, [](P& p) -> std::string& { return p.description; }));
    v.push_back(text("profile.status", true, [](P& p) -> std::string& { return p.status; }));
    v.push_back(text("profile.source", false, [](P& p) -> std::string& { return p.source; }));
    v.push_back(number("gpu.memory", Kind::Positive, true, [](P& p) -> double& { return p.gpu.memory; }));
    v.push_back(number("gpu.mem_bw", Kind::Positive, true, [](P& p) -> double& { return p.gpu.mem_bw; }));
    // What an override of a figure the simulator does not read would change: nothing.
    auto unread = [&v](const std::string& why) { v.back().unread = why; };
    const std::string in_the_models = "information only: the operator models hold what it implies";
    v.push_back(number("gpu.l2_bytes", Kind::Number, false, [](P& p) -> double& { return p.gpu.l2_bytes; }));
    unread(in_the_models + " (their cache.* sizes)");
    v.push_back(number("gpu.sms", Kind::Number, false, [](P& p) -> double& { return p.gpu.sms; }));
    unread(in_the_models);
    v.push_back(number("gpu.clock_ghz", Kind::Number, false, [](P& p) -> double& { return p.gpu.clock_ghz; }));
    unread(in_the_models);
    v.push_back(Field{"gpu.streams", Kind::Count, false, {},
                      [](P& p, const std::string&, double x) { p.gpu.streams = int(x); },
                      [](const P& p) { return std::to_string(p.gpu.streams); }});
    for (const char* kind : kSharedOps)
      for (int e = 16; e <= 36; ++e) {
        const std::string k = kind;
        const uint64_t bytes = uint64_t(1) << e;
        v.push_back(Field{share_key(k, bytes), Kind::Positive, false, {},
                          [k, bytes](P& p, const std::string&, double x) { p.gpu.share[k][bytes] = x; },
                          [k, bytes](const P& p) { return num(p.gpu.share.at(k).at(bytes)); },
                          [k, bytes](const P& p) {
                            auto it = p.gpu.share.find(k);
                            return it != p.gpu.share.end() && it->second.count(bytes) != 0;
                          }});
      }
    for (uint32_t f = 2; f <= 4096; f *= 2)
      v.push_back(Field{"gpu.chunk_partition_" + std::to_string(f) + "_bw", Kind::Positive, false, {},
                        [f](P& p, const std::string&, double x) { p.gpu.chunk_partition_rate[f] = x; },
                        [f](const P& p) { return num(p.gpu.chunk_partition_rate.at(f)); },
                        [f](const P& p) { return p.gpu.chunk_partition_rate.count(f) != 0; }});
    v.push_back(number("host.memory", Kind::Positive, true, [](P& p) -> double& { return p.host.memory; }));
    v.push_back(number("host.mem_bw", Kind::Positive, true, [](P& p) -> double& { return p.host.mem_bw; }));
    v.push_back(number("host.cores", Kind::Number, false, [](P& p) -> double& { return p.host.cores; }));
    unread("information only: the simulated cores are [cpu] sockets x cores");
    v.push_back(number("host.poll_seconds", Kind::Positive, false,
                       [](P& p) -> double& { return p.host.poll_seconds; }));
    v.push_back(number("host.phase_seconds", Kind::Number, false,
                       [](P& p) -> double& { return p.host.phase_seconds; }));
    // Zero-copy accesses of a kernel by granule (link microbenchmark): written where measured,
    // beside their link's bandwidth. link.d2h.write_*: writes into host memory (the first pass's
    // flushes); link.h2d.read_*: reads of it (the second pass's spilled chunks); *_both_*: while
    // the other direction runs too; link.d2h.write_beside_copy_*, link.h2d.copy_beside_write_*:
    // writes while host-to-device copies run, and the copies' rate meanwhile.
    struct Table {
      ZeroCopyRates LinkSpec::*rates;
      const char* infix;
      bool simulated;
    };
    auto add_zero_copy = [&](LinkSpec P::*link, const std::string& name, std::initializer_list<Table> tables) {
      for (const Table& t : tables) {
        const std::string prefix = "link." + name + "." + t.infix;
        auto of = [link, rates = t.rates](const P& p) -> const ZeroCopyRates& { return (p.*link).*rates; };
        auto set = [link, rates = t.rates](P& p) -> ZeroCopyRates& { return (p.*link).*rates; };
        for (uint32_t g : kLinkGranules) {
          v.push_back(Field{prefix + std::to_string(g) + "_bw", Kind::Positive, false, {},
                            [set, g](P& p, const std::string&, double x) { set(p).random[g] = x; },
                            [of, g](const P& p) { return num(of(p).random.at(g)); },
                            [of, g](const P& p) { return of(p).random.count(g) != 0; }});
          if (!t.simulated) unread("information only: the simulator costs each direction by its one-way rates");
        }
        v.push_back(Field{prefix + "seq_bw", Kind::Positive, false, {},
                          [set](P& p, const std::string&, double x) { set(p).sequential = x; },
                          [of](const P& p) { return num(of(p).sequential); },
                          [of](const P& p) { return of(p).sequential > 0; }});
        if (!t.simulated) unread("information only: the simulator costs each direction by its one-way rates");
      }
    };
    const std::pair<const char*, LinkSpec P::*> links[] = {
        {"h2d", &P::h2d}, {"d2h", &P::d2h}, {"p2p", &P::p2p}, {"nic", &P::nic}};
    for (auto& [name, member] : links) {
      auto m = member;
      v.push_back(number(std::string("link.") + name + ".bw", Kind::Positive, true,
                         [m](P& p) -> double& { return (p.*m).bw; }));
      v.push_back(number(std::string("link.") + name + ".latency", Kind::Number, true,
                         [m](P& p) -> double& { return (p.*m).latency; }));
      if (member == &P::h2d)
        add_zero_copy(member, name, {{&LinkSpec::zero_copy, "read_", true}, {&LinkSpec::zero_copy_both, "read_both_", false},
                                     {&LinkSpec::beside_copy, "copy_beside_write_", true}});
      if (member == &P::d2h) {
        add_zero_copy(member, name, {{&LinkSpec::zero_copy, "write_", true}, {&LinkSpec::zero_copy_both, "write_both_", false},
                                     {&LinkSpec::beside_copy, "write_beside_copy_", true}});
        // The first-pass partitioners into pinned memory by fanout.
        for (int kind = 0; kind < 2; ++kind)
          for (uint32_t f = 2; f <= 4096; f *= 2)
            v.push_back(Field{"link.d2h." + std::string(kind ? "hierarchical_" : "shared_") + std::to_string(f) + "_bw",
                              Kind::Positive, false, {},
                              [kind, f](P& p, const std::string&, double x) { p.d2h.partitioner_rate[kind][f] = x; },
                              [kind, f](const P& p) { return num(p.d2h.partitioner_rate[kind].at(f)); },
                              [kind, f](const P& p) { return p.d2h.partitioner_rate[kind].count(f) != 0; }});
      }
    }
    v.push_back(Field{"topology.gpus_per_node", Kind::Count, true, {},
                      [](P& p, const std::string&, double x) { p.topology.gpus_per_node = int(x); },
                      [](const P& p) { return std::to_string(p.topology.gpus_per_node); }});
    unread("information only: cluster.gpus_per_node sets the simulated GPUs per node");
    v.push_back(Field{"topology.intra", Kind::Choice, true, {"nvswitch", "nvlink_mesh", "pcie"},
                      [](P& p, const std::string& s, double) {
                        p.topology.intra = s == "nvswitch" ? IntraNode::NVSwitch
                                           : s == "pcie"   ? IntraNode::PCIe
                                                           : IntraNode::NVLinkMesh;
                      },
                      [](const P& p) { return std::string(to_string(p.topology.intra)); }});
    v.push_back(Field{"topology.nics", Kind::Choice, true, {"per_gpu", "per_node"},
                      [](P& p, const std::string& s, double) {
                        p.topology.nics = s == "per_gpu" ? NicPlacement::PerGpu : NicPlacement::PerNode;
                      },
                      [](const P& p) { return std::string(to_string(p.topology.nics)); }});
    v.push_back(Field{"topology.nics_per_node", Kind::Count, false, {},
                      [](P& p, const std::string&, double x) { p.topology.nics_per_node = int(x); },
                      [](const P& p) { return std::to_string(p.topology.nics_per_node); }});
    v.push_back(Field{"topology.fabric", Kind::Choice, true, {"star", "fat_tree"},
                      [](P& p, const std::string& s, double) {
                        p.topology.fabric = s == "star" ? Fabric::Star : Fabric::FatTree;
                      },
                      [](const P& p) { return std::string(to_string(p.topology.fabric)); }});
    v.push_back(Field{"topology.levels", Kind::Count, false, {},
                      [](P& p, const std::string&, double x) { p.topology.levels = int(x); },
                      [](const P& p) { return std::to_string(p.topology.levels); }});
    v.push_back(Field{"topology.leaf_nodes", Kind::Count, false, {},
                      [](P& p, const std::string&, double x) { p.topology.leaf_nodes = int(x); },
                      [](const P& p) { return std::to_string(p.topology.leaf_nodes); }});
    v.push_back(number("topology.oversubscription", Kind::Positive, false,
                       [](P& p) -> double& { return p.topology.oversubscription; }));
    v.push_back(number("topology.spine_oversubscription", Kind::Positive, false,
                       [](P& p) -> double& { return p.topology.spine_oversubscription; }));
    v.push_back(Field{"topology.rail_optimized", Kind::Choice, false, {"true", "false"},
                      [](P& p, const std::string& s, double) { p.topology.rail_optimized = s == "true"; },
                      [](const P& p) { return std::string(p.topology.rail_optimized ? "true" : "false"); }});
    v.push_back(number("topology.hop_latency", Kind::Number, false,
                       [](P& p) -> double& { return p.topology.hop_latency; }));
    // [cpu]: written only when the profile has one.
    auto cpu_present = [](const P& p) { return p.cpu.present(); };
    v.push_back(Field{"cpu.sockets", Kind::Count, false, {},
                      [](P& p, const std::string&, double x) { p.cpu.sockets = int(x); },
                      [](const P& p) { return std::to_string(p.cpu.sockets); }, cpu_present});
    v.push_back(Field{"cpu.cores", Kind::Count, false, {},
                      [](P& p, const std::string&, double x) { p.cpu.cores = int(x); },
                      [](const P& p) { return std::to_string(p.cpu.cores); }, cpu_present});
    v.push_back(Field{"cpu.mem_bw", Kind::Positive, false, {},
                      [](P& p, const std::string&, double x) { p.cpu.mem_bw = x; },
                      [](const P& p) { return num(p.cpu.mem_bw); }, cpu_present});
    v.push_back(Field{"cpu.clock_ghz", Kind::Positive, false, {},
                      [](P& p, const std::string&, double x) { p.cpu.clock_ghz = x; },
                      [](const P& p) { return num(p.cpu.clock_ghz); },
                      [](const P& p) { return p.cpu.present() && p.cpu.clock_ghz > 0; }});
    unread("information only: the per-core rates (cpu.rate.*, cpu.loaded.*) hold what it implies");
    v.push_back(Field{"cpu.op_overhead", Kind::Number, false, {},
                      [](P& p, const std::string&, double x) { p.cpu.op_overhead = x; },
                      [](const P& p) { return num(p.cpu.op_overhead); },
                      [](const P& p) { return p.cpu.present() && p.cpu.op_overhead > 0; }});
    for (const int n : kThreadCounts)
      v.push_back(Field{"cpu.op_overhead." + std::to_string(n), Kind::Number, false, {},
                        [n](P& p, const std::string&, double x) { p.cpu.team_op_overhead[n] = x; },
                        [n](const P& p) { return num(p.cpu.team_op_overhead.count(n) ? p.cpu.team_op_overhead.at(n) : 0.0); },
                        [n](const P& p) { return p.cpu.present() && p.cpu.team_op_overhead.count(n); }});
    v.push_back(Field{"cpu.numa", Kind::Choice, false, {"pooled", "per_socket"},
                      [](P& p, const std::string& s, double) { p.cpu.per_socket = s == "per_socket"; },
                      [](const P& p) { return std::string(p.cpu.per_socket ? "per_socket" : "pooled"); }, cpu_present});
    for (const std::string& op : cpu_op_kinds())
      v.push_back(Field{"cpu.rate." + op, Kind::Positive, false, {},
                        [op](P& p, const std::string&, double x) { p.cpu.rate[op] = x; },
                        [op](const P& p) { return num(p.cpu.rate.count(op) ? p.cpu.rate.at(op) : 0.0); },
                        [op](const P& p) { return p.cpu.present() && p.cpu.rate.count(op); }});
    for (const std::string& op : cpu_op_kinds())
      v.push_back(Field{"cpu.loaded." + op, Kind::Positive, false, {},
                        [op](P& p, const std::string&, double x) { p.cpu.loaded[op] = x; },
                        [op](const P& p) { return num(p.cpu.loaded.count(op) ? p.cpu.loaded.at(op) : 0.0); },
                        [op](const P& p) { return p.cpu.present() && p.cpu.loaded.count(op); }});
    for (const std::string& op : cpu_op_kinds())
      for (const int n : kThreadCounts) {
        auto has = [op, n](const P& p) {
          auto t = p.cpu.team_loaded.find(op);
          return p.cpu.present() && t != p.cpu.team_loaded.end() && t->second.count(n);
        };
        v.push_back(Field{"cpu.loaded." + op + "." + std::to_string(n), Kind::Positive, false, {},
                          [op, n](P& p, const std::string&, double x) { p.cpu.team_loaded[op][n] = x; },
                          [op, n, has](const P& p) { return num(has(p) ? p.cpu.team_loaded.at(op).at(n) : 0.0); }, has});
      }
    for (const int k : kMergeRunCounts)
      v.push_back(Field{"cpu.merge_runs." + std::to_string(k), Kind::Positive, false, {},
                        [k](P& p, const std::string&, double x) { p.cpu.merge_runs[k] = x; },
                        [k](const P& p) { return num(p.cpu.merge_runs.count(k) ? p.cpu.merge_runs.at(k) : 0.0); },
                        [k](const P& p) { return p.cpu.present() && p.cpu.merge_runs.count(k); }});
    for (const int n : kThreadCounts) {
      const std::string key = "cpu.copy_rate." + std::to_string(n);
      v.push_back(Field{key, Kind::Positive, false, {},
                        [n](P& p, const std::string&, double x) { p.cpu.copy_rate[n] = x; },
                        [n](const P& p) { return num(p.cpu.copy_rate.count(n) ? p.cpu.copy_rate.at(n) : 0.0); },
                        [n](const P& p) { return p.cpu.present() && p.cpu.copy_rate.count(n); }});
    }
    // [msg]: each key written where it was given (or measured).
    std::vector<std::string> transports{"none"};
    for (auto& t : msg_transports()) transports.push_back(t);
    v.push_back(Field{"msg.send", Kind::Choice, false, transports,
                      [](P& p, const std::string& s, double) { p.msg.send = s; }, [](const P& p) { return p.msg.send; },
                      [](const P& p) { return p.msg.send != "none"; }});
    v.push_back(Field{"msg.put", Kind::Choice, false, transports,
                      [](P& p, const std::string& s, double) { p.msg.put = s; }, [](const P& p) { return p.msg.put; },
                      [](const P& p) { return p.msg.put != "none"; }});
    v.push_back(Field{"msg.copy_seconds", Kind::Number, false, {},
                      [](P& p, const std::string&, double x) { p.msg.copy_seconds = x; },
                      [](const P& p) { return num(p.msg.copy_seconds); },
                      [](const P& p) { return p.msg.copy_seconds > 0 || p.notes.count("msg.copy_seconds"); }});
    for (const std::string& k : msg_cost_keys()) {
      auto given = [k](const P& p) { return p.msg.cost.count(k) > 0; };
      v.push_back(Field{"msg." + k + ".seconds", Kind::Number, false, {},
                        [k](P& p, const std::string&, double x) { p.msg.cost[k].seconds = x; },
                        [k](const P& p) { return num(p.msg.of(k.substr(0, k.find('.')), k.substr(k.find('.') + 1)).seconds); },
                        given});
      v.push_back(Field{"msg." + k + ".per_byte", Kind::Number, false, {},
                        [k](P& p, const std::string&, double x) { p.msg.cost[k].per_byte = x; },
                        [k](const P& p) { return num(p.msg.of(k.substr(0, k.find('.')), k.substr(k.find('.') + 1)).per_byte); },
                        given});
    }
    return v;
  }();
  return f;
}

const Field* find_field(const std::string& key) {
  for (auto& f : fields())
    if (f.key == key) return &f;
  return nullptr;
}

// A field's section: the part before its last dot, except [cpu] and [msg], whose keys have dots
// of their own (rate.histogram, ucx.put.seconds).
std::string section_of(const std::string& key) {
  if (key.rfind("cpu.", 0) == 0 || key.rfind("msg.", 0) == 0) return key.substr(0, 3);
  return key.substr(0, key.rfind('.'));
}

std::string list_text(const std::vector<std::string>& items) {
  std::string s;
  for (auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// The sections of the fields, in file order.
std::vector<std::string> known_sections() {
  std::vector<std::string> s;
  for (auto& f : fields())
    if (std::find(s.begin(), s.end(), section_of(f.key)) == s.end()) s.push_back(section_of(f.key));
  return s;
}
bool is_section(const std::string& name) {
  const auto all = known_sections();
  return std::find(all.begin(), all.end(), name) != all.end();
}

std::string sections_text() { return list_text(known_sections()) + ", op.<model>"; }

std::string model_names_text() {
  std::vector<std::string> names;
  for (auto& m : model_specs()) names.push_back(m.name);
  return list_text(names);
}

bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  try {
    size_t used = 0;
    out = std::stod(s, &used);
    return used == s.size() && std::isfinite(out);
  } catch (...) {
    return false;
  }
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Figures no hardware has, which would simulate as nonsense without an error: a bandwidth or a
// per-core rate outside 1 kB/s .. 10 PB/s, a latency above a second (an override of a NIC's
// bandwidth to 1e-300 made every transfer take forever, reported as inf).
std::string physical_range_error(const std::string& key, double number) {
  const bool rate = ends_with(key, "bw") || key.rfind("cpu.rate.", 0) == 0 || key.rfind("cpu.loaded.", 0) == 0 ||
                    key.rfind("cpu.copy_rate.", 0) == 0;
  if (rate && (number < 1e3 || number > 1e16)) return "a bandwidth outside 1e3 .. 1e16 bytes per second";
  if (ends_with(key, "latency") && number > 1) return "a latency above a second";
  return "";
}

// Why `value` is not a value of `f` ("" when it is one); a number goes to `number`.
std::string value_error(const Field& f, const std::string& value, double& number) {
  if (value.empty()) return "empty value";
  switch (f.kind) {
    case Kind::Number:
    case Kind::Positive:
    case Kind::Count:
      if (!parse_double(value, number)) return "not a number";
      if (number < 0) return "must not be negative";
      if ((f.kind == Kind::Positive || f.kind == Kind::Count) && number <= 0) return "must be positive";
      if (f.kind == Kind::Count && (number != std::floor(number) || number > 1e9)) return "must be a whole number";
      return physical_range_error(f.key, number);
    case Kind::Choice:
      if (std::find(f.choices.begin(), f.choices.end(), value) == f.choices.end())
        return "expected one of " + list_text(f.choices);
      return "";
    case Kind::Text:
      return "";
  }
  return "";
}

const char* const kCacheBytesError = "expected a positive number of bytes";
bool parse_cache_bytes(const std::string& value, double& bytes) { return parse_double(value, bytes) && bytes > 0; }

// Why `level` is not a cache level of the model ("" when it is one).
std::string cache_level_error(const ModelSpec& spec, const std::string& level) {
  if (std::find(spec.caches.begin(), spec.caches.end(), level) != spec.caches.end()) return "";
  return "model " + spec.name + " has no cache level '" + level + "'" +
         (spec.caches.empty() ? std::string(" (it has none)") : " (it has " + list_text(spec.caches) + ")");
}

// The keys of [section], without the section ("bw, latency").
std::string keys_of(const std::string& section) {
  std::vector<std::string> keys;
  for (auto& f : fields())
    if (f.key.rfind(section + ".", 0) == 0) keys.push_back(f.key.substr(section.size() + 1));
  return list_text(keys);
}

// What an override sets: a field, or the size of one cache level of an operator model.
struct OverrideTarget {
  const Field* field = nullptr;
  std::string model, level;  // op.<model>.cache.<level>
  double number = 0;
};

[[noreturn]] void fail_override(const std::string& key, const std::string& value, const std::string& file,
                                const std::string& why) {
  throw InputError(key + " = " + value + ": " + why + " (override of " + file + ")");
}

// Checks an override's key and value against the profile format, before the file is read.
OverrideTarget override_target(const std::string& key, const std::string& value, const std::string& file) {
  auto fail = [&](const std::string& why) { fail_override(key, value, file, why); };
  OverrideTarget t;
  if (key.rfind("op.", 0) == 0) {
    const size_t cache = key.find(".cache.");
    t.model = key.substr(3, cache == std::string::npos ? std::string::npos : cache - 3);
    const ModelSpec* spec = find_model_spec(t.model);
    if (cache == std::string::npos || !spec) {
      if (spec || find_model_spec(t.model.substr(0, t.model.rfind('.'))))
        fail_override(key, value, file, "an operator model's seg lines are a piecewise list, which an override cannot change; only its "
             "cache.<level> sizes can be (copy the profile to change a model: cluster.profile takes a path)");
      fail_override(key, value, file, "no operator model '" + t.model + "' (known: " + model_names_text() + ")");
    }
    t.level = key.substr(cache + 7);
    const std::string no_level = cache_level_error(*spec, t.level);
    if (!no_level.empty()) fail(no_level);
    if (!parse_cache_bytes(value, t.number)) fail(kCacheBytesError);
    return t;
  }
  t.field = find_field(key);
  if (!t.field) {
    const std::string section = section_of(key);
    if (is_section(section)) fail("unknown key in [" + section + "] (known: " + keys_of(section) + ")");
    std::string hint;  // "nic" for "link.nic"
    for (auto& s : known_sections())
      if (s.size() > section.size() && s.compare(s.size() - section.size() - 1, std::string::npos, "." + section) == 0)
        hint = "; did you mean [" + s + "]?";
    fail("unknown profile section [" + section + "] (known: " + sections_text() + ")" + hint);
  }
  if (t.field->kind == Kind::Text) fail("a text describing the profile, not a figure of the hardware");
  if (!t.field->unread.empty()) fail(t.field->unread);
  const std::string why = value_error(*t.field, value, t.number);
  if (!why.empty()) fail(why);
  return t;
}

// The note a replaced figure carries when the profile is written back.
const char* const kOverrideNote = "override of the experiment";

struct Parser {
  std::string file;
  int line = 0;
  [[noreturn]] void fail(const std::string& key, const std::string& value, const std::string& why) const {
    std::ostringstream m;
    m << file << ":" << line << ": ";
    if (!key.empty()) m << key << " = " << value << ": ";
    m << why;
    throw InputError(m.str());
  }
};

}  // namespace

Profile parse_profile(std::istream& in, const std::string& file, const ProfileOverrides& overrides) {
  std::map<std::string, OverrideTarget> targets;
  for (auto& [key, value] : overrides) targets[key] = override_target(key, value, file);
  std::set<std::string> replaced;  // the overrides the file gives a line for
  Profile p;
  Parser ps{file};
  std::string section, raw;
  std::set<std::string> seen;
  std::map<std::string, std::vector<ModelPiece>> pieces;
  std::map<std::string, std::map<std::string, double>> caches;  // model -> level -> bytes
  while (std::getline(in, raw)) {
    ps.line++;
    std::string t = trim(raw);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[') {
      if (t.back() != ']') ps.fail("", "", "section header '" + t + "' lacks its closing ']'");
      section = trim(t.substr(1, t.size() - 2));
      const bool op = section.rfind("op.", 0) == 0;
      if (op && !find_model_spec(section.substr(3)))
        ps.fail("", "", "unknown operator model [" + section + "] (known: " + model_names_text() + ")");
      if (!op && !is_section(section)) ps.fail("", "", "unknown section [" + section + "] (known: " + sections_text() + ")");
      continue;
    }
    size_t eq = t.find('=');
    if (eq == std::string::npos) ps.fail("", "", "expected 'key = value', got '" + t + "'");
    if (section.empty()) ps.fail(trim(t.substr(0, eq)), "", "key outside any [section]");
    std::string key = trim(t.substr(0, eq)), rest = t.substr(eq + 1), comment;
    size_t hash = rest.find('#');
    if (hash != std::string::npos) {
      comment = trim(rest.substr(hash + 1));
      rest = rest.substr(0, hash);
    }
    std::string value = trim(rest);
    const std::string full = section + "." + key;
    if (auto o = overrides.find(full); o != overrides.end()) {
      value = o->second;
      comment = kOverrideNote;
      replaced.insert(full);
    }
    if (section.rfind("op.", 0) == 0) {
      const std::string model = section.substr(3);
      const ModelSpec& spec = *find_model_spec(model);
      if (key.rfind("cache.", 0) == 0) {  // cache.<level> = BYTES
        const std::string level = key.substr(6);
        const std::string no_level = cache_level_error(spec, level);
        if (!no_level.empty()) ps.fail(full, value, no_level);
        double d = 0;
        if (!parse_cache_bytes(value, d)) ps.fail(full, value, kCacheBytesError);
        if (comment.empty()) ps.fail(full, value, "a number without a source: add '# where it comes from'");
        if (caches[model].count(level)) ps.fail(full, value, "given twice");
        caches[model][level] = d;
        p.notes[full] = comment;
        continue;
      }
      if (key != "seg")
        ps.fail(full, value, "operator sections hold only 'seg = LOWER C0 C1 ...' and 'cache.LEVEL = BYTES' lines");
      std::istringstream vs(value);
      std::vector<double> nums;
      std::string tok;
      while (vs >> tok) {
        double d;
        if (!parse_double(tok, d)) ps.fail(full, value, "'" + tok + "' is not a number");
        if (d < 0) ps.fail(full, value, "'" + tok + "' is negative (times and bounds are >= 0)");
        nums.push_back(d);
      }
      // The full form, or (a profile calibrated before the later features) the legacy one.
      const size_t want = 1 + spec.coefficients(), older = spec.legacy ? 2 + spec.legacy : want;
      // Models without cache levels also take any count in between (features added one by one;
      // the missing later ones are 0).
      const bool between = spec.caches.empty() && nums.size() > older && nums.size() < want;
      if (nums.size() != want && nums.size() != older && !between) {
        std::string feats = "constant";
        for (auto& f : spec.all_features()) feats += ", " + f;
        ps.fail(full, value, "expected " + std::to_string(want) +
                                 (older != want ? " (or " + std::to_string(older) + ", without the later features)" : std::string()) +
                                 " numbers (segment lower bound of " +
                                 (spec.segment.empty() ? std::string("0") : spec.segment) + ", then seconds per " +
                                 feats + "), got " + std::to_string(nums.size()));
      }
      if (comment.empty()) ps.fail(full, value, "a number without a source: add '# where it comes from'");
      if (spec.segment.empty() && nums[0] != 0) ps.fail(full, value, "this model has one segment: its lower bound must be 0");
      for (auto& piece : pieces[model])
        if (piece.lower == nums[0]) ps.fail(full, value, "a second segment with the same lower bound");
      std::vector<double> coef(nums.begin() + 1, nums.end());
      coef.resize(spec.coefficients(), 0.0);  // later features of a legacy line: 0
      pieces[model].push_back({nums[0], coef});
      p.notes[full + "@" + num(nums[0])] = comment;
      continue;
    }
    const Field* f = find_field(full);
    if (!f) {
      ps.fail(full, value, "unknown key in [" + section + "] (known: " + keys_of(section) + ")");
    }
    if (seen.count(full)) ps.fail(full, value, "given twice");
    seen.insert(full);
    double d = 0;
    const std::string why = value_error(*f, value, d);
    if (!why.empty()) ps.fail(full, value, why);
    const bool number = f->kind != Kind::Text && f->kind != Kind::Choice;
    if (number && comment.empty()) ps.fail(full, value, "a number without a source: add '# where it comes from'");
    f->set(p, value, d);
    if (!comment.empty()) p.notes[full] = comment;
  }
  // Overrides of figures the file leaves out: set as if it gave them, before the checks of the whole.
  for (auto& [key, t] : targets) {
    if (replaced.count(key)) continue;
    const std::string& value = overrides.at(key);
    if (t.field) {
      t.field->set(p, value, t.number);
      seen.insert(key);
    } else {
      if (!pieces.count(t.model)) fail_override(key, value, file, "the profile has no [op." + t.model + "] model");
      caches[t.model][t.level] = t.number;
    }
    p.notes[key] = kOverrideNote;
  }
  for (auto& f : fields())
    if (f.required && !seen.count(f.key)) {
      ps.line = 0;
      throw InputError(file + ": [" + section_of(f.key) + "] " + f.key.substr(section_of(f.key).size() + 1) +
                       " is missing (required)");
    }
  // A [cpu] section is whole: the domains, the roof and a per-core rate for every CPU operator.
  bool any_cpu = false;
  for (auto& k : seen) any_cpu = any_cpu || k.rfind("cpu.", 0) == 0;
  if (any_cpu) {
    std::vector<std::string> need{"cpu.sockets", "cpu.cores", "cpu.mem_bw"};
    for (auto& op : cpu_op_kinds())
      if (cpu_kind_stand_in(op).empty()) need.push_back("cpu.rate." + op);
    for (auto& k : need)
      if (!seen.count(k)) throw InputError(file + ": [cpu] " + k.substr(4) + " is missing (a [cpu] section needs "
                                                  "sockets, cores, mem_bw and a rate for every CPU operator)");
  }
  for (auto& k : msg_cost_keys()) {
    const bool s = seen.count("msg." + k + ".seconds") > 0, b = seen.count("msg." + k + ".per_byte") > 0;
    if (s != b) throw InputError(file + ": [msg] " + k + (s ? ".per_byte" : ".seconds") + " is missing (given with " +
                                 k + (s ? ".seconds" : ".per_byte") + ")");
  }
  for (const std::string* t : {&p.msg.send, &p.msg.put}) {
    const std::string kind = t == &p.msg.send ? "send" : "put";
    if (*t != "none" && !p.msg.cost.count(*t + "." + kind))
      throw InputError(file + ": [msg] " + kind + " = " + *t + ": the profile gives no " + *t + "." + kind +
                       ".seconds / .per_byte to pay");
  }
  if (p.topology.levels < 1 || p.topology.levels > 3)
    throw InputError(file + ": topology.levels = " + std::to_string(p.topology.levels) + ": must be 1, 2 or 3");
  for (auto& [name, ps_] : pieces) {
    const ModelSpec& spec = *find_model_spec(name);
    std::vector<double> sizes;
    for (size_t l = 0; l < spec.caches.size(); ++l) {
      const std::string& level = spec.caches[l];
      auto it = caches[name].find(level);
      // A level whose misses cost nothing (every legacy line) needs no size.
      bool used = false;
      for (auto& piece : ps_) used = used || piece.coef[1 + spec.features.size() + l] != 0;
      if (it == caches[name].end() && used)
        throw InputError(file + ": [op." + name + "] cache." + level + " is missing (its " + level +
                         "_misses coefficient is not 0)");
      sizes.push_back(it == caches[name].end() ? 0.0 : it->second);
    }
    p.ops.set(name, PiecewiseModel(ps_, sizes));
  }
  for (auto& [name, levels] : caches)
    if (!pieces.count(name)) throw InputError(file + ": [op." + name + "] has cache sizes but no 'seg' line");
  p.path = file;
  return p;
}

Profile load_profile(const std::string& path, const ProfileOverrides& overrides) {
  std::ifstream in(path);
  if (!in) throw InputError("profile " + path + ": cannot be read (missing or unreadable file)");
  return parse_profile(in, path, overrides);
}

std::string resolve_profile_path(const std::string& name_or_path, const std::string& dir) {
  if (name_or_path.find('/') != std::string::npos ||
      (name_or_path.size() > 4 && name_or_path.compare(name_or_path.size() - 4, 4, ".ini") == 0)) {
    if (std::ifstream(name_or_path)) return name_or_path;
    throw InputError("profile " + name_or_path + ": no such file");
  }
  std::string path = dir + "/" + name_or_path + ".ini";
  if (std::ifstream(path)) return path;
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string f = e->d_name;
      if (f.size() > 4 && f.compare(f.size() - 4, 4, ".ini") == 0) names.push_back(f.substr(0, f.size() - 4));
    }
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  std::string known;
  for (auto& n : names) known += (known.empty() ? "" : ", ") + n;
  throw InputError("profile '" + name_or_path + "': no such profile in " + dir + " (available: " +
                   (known.empty() ? "none" : known) + ")");
}

void write_profile(const Profile& p, std::ostream& out) {
  auto note = [&](const std::string& key) {
    auto it = p.notes.find(key);
    return it == p.notes.end() ? std::string() : it->second;
  };
  std::string section;
  for (auto& f : fields()) {
    std::string sec = section_of(f.key);
    if (f.has && !f.has(p)) continue;
    std::string value = f.get(p);
    if (f.kind == Kind::Text && value.empty()) continue;
    if (sec != section) {
      out << (section.empty() ? "" : "\n") << "[" << sec << "]\n";
      section = sec;
    }
    std::string line = f.key.substr(sec.size() + 1) + " = " + value;
    std::string n = note(f.key);
    if (n.empty() && f.kind != Kind::Text && f.kind != Kind::Choice) n = "(no source recorded)";
    out << line;
    if (!n.empty()) out << std::string(line.size() < 40 ? 40 - line.size() : 1, ' ') << "# " << n;
    out << "\n";
  }
  for (auto& spec : model_specs()) {
    if (!p.ops.has(spec.name)) continue;
    const PiecewiseModel& m = p.ops.get(spec.name);
    out << "\n[op." << spec.name << "]\n# seg = lower(" << (spec.segment.empty() ? "-" : spec.segment)
        << ") constant";
    for (auto& f : spec.all_features()) out << " " << f;
    out << "   (seconds, seconds per unit of each feature: bytes, rows, items, misses)\n";
    for (size_t c = 0; c < spec.caches.size() && c < m.caches().size(); ++c) {
      if (m.caches()[c] <= 0) continue;  // a legacy model without cache terms
      const std::string key = "op." + spec.name + ".cache." + spec.caches[c];
      std::string n = note(key);
      out << "cache." << spec.caches[c] << " = " << num(m.caches()[c]) << "   # "
          << (n.empty() ? "(no source recorded)" : n) << "\n";
    }
    for (auto& piece : m.pieces()) {
      std::ostringstream line;
      // Bounds at full precision: a bound rounded up would move a table of exactly the sampled
      // size to the piece below (the 2^27-byte tables of the 2026-11-22 profile did).
      line << "seg = " << std::setprecision(12) << piece.lower;
      for (double c : piece.coef) line << " " << std::setprecision(5) << c;
      std::string n = note("op." + spec.name + ".seg@" + num(piece.lower));
      out << line.str() << "   # " << (n.empty() ? "(no source recorded)" : n) << "\n";
    }
  }
}

}  // namespace joinlab
