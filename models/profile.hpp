// Hardware profiles (models/profiles/*.ini): what the simulator and the analytic bounds know
// about a machine. A profile holds the GPU, host and link figures, the topology defaults, and
// one cost model per operator (op_model.hpp). Every number in a profile file carries a comment
// saying where it comes from (measured, fitted, datasheet, derived by a ratio); the parser
// rejects a number without one, so an unsourced figure cannot slip in.
//
// Format (strict; any error names file, line, key and value):
//   # comment lines, blank lines
//   [section]
//   key = value        # source of the number (required for numbers)
//   seg = LOWER C0 C1 [C2]   # (op sections only, repeatable) one piece of a piecewise model
//   cache.LEVEL = BYTES      # (op sections of models with cache levels) the fitted cache size
//                            # of that level; required when its misses coefficient is not 0
#pragma once
#include <array>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "models/op_model.hpp"

namespace joinlab {

// The access sizes of the link microbenchmark (calibrate): zero-copy accesses of a kernel to
// pinned host memory in granules of these bytes, at random granule positions.
inline constexpr uint32_t kLinkGranules[] = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
// The thread counts of [cpu] copy_rate.<threads> and loaded.<kind>.<threads> (calibrate measures
// those up to the host's threads).
inline constexpr int kThreadCounts[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
// Runs of a multiway merge that calibrate measures (CpuSpec::merge_runs).
inline constexpr int kMergeRunCounts[] = {2, 3, 4, 5, 8, 16};
// At and beyond this granule a kernel's accesses count as sequential.
inline constexpr double kLinkSequentialGranule = 65536;

// A kernel's zero-copy accesses across a link in one direction, bytes/s (0 / absent: not measured).
struct ZeroCopyRates {
  std::map<uint32_t, double> random;  // granule bytes -> rate, at random granule positions
  double sequential = 0;              // one long run
  bool empty() const { return random.empty() && sequential <= 0; }
};

// Rate of accesses in granules of `granule` bytes by the table `t` on a link of `bw`: log-log
// interpolation between the measured granules (each at most bw), and the sequential rate (else
// bw) at kLinkSequentialGranule and beyond; below the smallest measured granule the rate falls
// in proportion. An empty table: bw.
double granule_rate(const ZeroCopyRates& t, double bw, double granule);

struct LinkSpec {
  double bw = 0;       // bytes/s in each direction
  double latency = 0;  // seconds
  // Zero-copy accesses by a kernel to pinned host memory across this link (link.d2h: writes,
  // link.h2d: reads): alone, and while the other direction runs as well (information only).
  // Small accesses reach a fraction of the link's rate: a partitioner's flushes and a kernel's
  // reads of spilled partitions are costed by their size (access_rate).
  ZeroCopyRates zero_copy{}, zero_copy_both{};
  // A kernel's writes to pinned memory while host-to-device copies run, by the writes' granule:
  // on link.d2h the writes' rate, on link.h2d the copies' (write_reverse_cost).
  ZeroCopyRates beside_copy{};
  // link.d2h: triton's first-pass partitioners writing into pinned memory, input bytes/s by
  // fanout (the link microbenchmark's chunk_partition.<partitioner>.host); index 0: shared,
  // 1: hierarchical. A partitioner's writes are costed as accesses of the granule that runs at
  // its rate (equivalent_granule).
  std::array<std::map<uint32_t, double>, 2> partitioner_rate{};
  double seconds(double bytes) const { return latency + (bw > 0 ? bytes / bw : 0); }
  // Rate of a kernel's accesses in granules of `granule` bytes (granule_rate of zero_copy).
  double access_rate(double granule) const { return granule_rate(zero_copy, bw, granule); }
};

// The access granule whose rate on `l` (access_rate) is `rate`: kLinkSequentialGranule where
// even that is slower, the smallest measured granule's proportional share below it.
double equivalent_granule(const LinkSpec& l, double rate);
// A partitioner's rate into pinned memory at `fanout` from a partitioner_rate table: log-log
// between the measured fanouts, the nearest one's outside them; 0 for an empty table.
double fanout_rate(const std::map<uint32_t, double>& table, uint32_t fanout);

// Bytes of host-to-device link time per byte a kernel writes to pinned memory in granules of
// `granule` bytes: what host-to-device copies lost beside such writes over what the writes moved,
// (h2d.bw - copies' rate) / writes' rate, both from the beside_copy tables (0 without them), at
// most what lets the writes alone keep their rate (h2d.bw over d2h.access_rate).
// Writes to host memory take the other direction too: on an H200 over PCIe 5, host-to-device
// copies ran at 52-53 GB/s beside random writes of up to 512 bytes, at 8 beside writes of 2 KiB
// and more.
double write_reverse_cost(const LinkSpec& h2d, const LinkSpec& d2h, double granule);

enum class IntraNode : uint8_t { NVSwitch, NVLinkMesh, PCIe };
enum class NicPlacement : uint8_t { PerGpu, PerNode };
enum class Fabric : uint8_t { Star, FatTree };
const char* to_string(IntraNode v);
const char* to_string(NicPlacement v);
const char* to_string(Fabric v);

// How nodes and GPUs are wired. Experiments may override each field ([cluster] keys).
struct Topology {
  int gpus_per_node = 8;
  IntraNode intra = IntraNode::NVSwitch;
  NicPlacement nics = NicPlacement::PerGpu;  // PerGpu: one NIC per GPU on its own rail
  int nics_per_node = 1;                     // PerNode: NICs the node's GPUs share
  Fabric fabric = Fabric::Star;              // Star: non-blocking (full bisection)
  int levels = 2;                            // FatTree: switch levels (2 or 3)
  int leaf_nodes = 32;                       // FatTree: nodes under one leaf switch (per rail)
  double oversubscription = 1.0;             // FatTree: leaf down/up bandwidth ratio
  double spine_oversubscription = 1.0;       // FatTree, 3 levels: spine down/up ratio
  bool rail_optimized = true;                // FatTree, PerGpu: leaf switches per rail
  double hop_latency = 0;                    // seconds added per switch level crossed
};

// Operators whose GPU share calibrate measures (GpuSpec::share), by the names of their kinds.
inline constexpr const char* kSharedOps[] = {"partition", "partitioned_join", "copy.device"};

struct GpuSpec {
  double memory = 0;      // bytes per GPU
  double mem_bw = 0;      // device copy, bytes read + written per second
  double l2_bytes = 0;
  double sms = 0;
  double clock_ghz = 0;
  int streams = 16;       // streams a rank exposes
  // The share of the GPU an operator of a kind in kSharedOps takes while it runs, by its input
  // bytes (powers of two): two of them at once on two streams took 2 x share of one's time alone
  // (calibrate's "overlap" step). Small operators leave SMs and memory bandwidth idle (launches,
  // scans, tails) that another stream's kernels use. Unmeasured kinds and sizes beyond the
  // table: the nearest measured size's; none: 1 (operators share the GPU by their times).
  std::map<std::string, std::map<uint64_t, double>> share;
  // triton's first-pass partitioner (shared) from device memory into device memory in its pieces
  // (kDevicePieceRows), input bytes/s by fanout (the link microbenchmark's
  // chunk_partition.shared.device): the simulator's cost of such a chunk partition where measured
  // (else the partition model's, fitted on partition passes of whole segments, which put 8 ns on
  // every piece's partition at fanout 64: 0.27 ms for a chunk the H200 partitioned in 0.08).
  std::map<uint32_t, double> chunk_partition_rate;
};
// GpuSpec::share of an operator of `kind` with `bytes` of input: linear in log2(bytes) between
// the measured sizes, in [0.5, 1].
double op_share(const GpuSpec& gpu, const std::string& kind, double bytes);
// The profile key of GpuSpec::share for `kind` at `bytes`: gpu.share_<kind>_<bytes> ('.' as '_').
std::string share_key(const std::string& kind, uint64_t bytes);

struct HostSpec {
  double memory = 0;        // bytes per node
  double mem_bw = 0;        // bytes read + written per second, per node
  double cores = 0;         // per node
  double poll_seconds = 1e-6;  // one read of a completion flag
  // Host time a strategy's phase spends outside its operators (launching the first, the closing
  // synchronization of every stream, the strategy's own work between them): fitted by
  // experiments/validate/fit_phase_seconds.py from strategy runs at calibrate's sizes; 0 = none.
  double phase_seconds = 0;
};

// The host CPUs ([cpu]): where the operators on host memory run (histogram, partition, pack,
// the CPU radix join, build, probe, merge, sort, gather, checksum, ...). An operator of b bytes
// (sample_bytes of its features) using t cores costs b / (t x its per-core rate) of compute and
// moves its bytes (read + written) through its memory domain, whose bandwidth (the roof) the
// domain's operators and the NIC / PCIe DMA into host memory share: it takes the longer of the two.
// A node is `sockets` domains (numa = per_socket: each socket its own memory and cores, ranks
// spread over them, as a rank owning a NUMA region) or one pooled domain (numa = pooled).
struct CpuSpec {
  int sockets = 0;       // per node; 0: no [cpu] section (host operators at host.mem_bw, as before)
  int cores = 0;         // per socket
  double mem_bw = 0;     // per socket: bytes read + written per second
  double clock_ghz = 0;  // information (derived profiles scale per-core rates by clock ratios)
  bool per_socket = false;  // numa = per_socket
  std::map<std::string, double> rate;  // per CPU operator kind (cpu_op_kinds()): bytes per second of one core
  // The same with every core of the host busy (optional per kind: hyper-threads, shared caches
  // and memory make a loaded core slower); the simulator moves from `rate` to it as the ranks of
  // a domain fill its cores.
  std::map<std::string, double> loaded;
  // The same with every core busy in teams of fewer threads (optional, per kind: threads per team
  // -> bytes per second of one thread). Ranks that share a host each run their operators on their
  // share of its cores; on a 64-core host a partition ran 9-16% faster per thread in teams of 32
  // or 16 than in one team of all 64.
  std::map<std::string, std::map<int, double>> team_loaded;
  // Copies in host memory, measured by how many threads of the domain copy at once (optional):
  // threads -> bytes per second of each. A host's copy throughput saturates long before its
  // cores are all busy (a 2x H200 host: 4 copying threads 4.4 GB/s each, 8 or 16 of them 2.5);
  // the simulator prices a copy at this curve's rate for every thread busy in its domain.
  std::map<int, double> copy_rate;
  // Seconds a parallel operator (more than one thread) costs beyond its bytes, with every core
  // busy in teams (optional): the parallel region's start and join and its slowest thread. On a
  // 32-vCPU 2x H200 host crj's CPU histogram took 68 / 97 / 134 ms in 2 / 12 / 48 operators of
  // the same rows per rank; a strategy that works in batches pays it per batch.
  double op_overhead = 0;
  // The same by the operator's team size (optional: threads -> seconds, as calibrate's teams
  // measured it): on a 64-vCPU 4x H200 host 1.76 ms in teams of 16, 0.45 ms in teams of 32.
  std::map<int, double> team_op_overhead;
  // A multiway merge's cost per byte by its runs, against 2 runs (optional: runs -> factor). The
  // more runs, the more heads a row is chosen among: on a 16-vCPU H200 host, all cores, 2 / 4 / 8
  // runs moved 56 / 37 / 10 GB/s. The rates of "multiway_merge" are 2 runs'.
  std::map<int, double> merge_runs;
  // merge_runs interpolated in log2(runs), flat beyond its ends; 1 without it.
  double merge_runs_factor(int runs) const;
  // Seconds of own cost of a parallel operator run by `threads` threads: team_op_overhead
  // interpolated in log2(threads) (its nearest team beyond its ends), else op_overhead; 0 for one thread.
  double operator_overhead(int threads) const;
  // Bytes per second of one thread of an operator of `kind` run by `team` threads (0: every
  // core), when `busy` threads of the domain's `cores` run at once: linear in busy from `rate` to
  // the loaded rate of that team size (team_loaded and, for a team of every core, loaded,
  // interpolated in log2(threads)); a kind the profile has no rate for takes its stand-in's
  // (cpu_kind_stand_in).
  double per_thread_rate(const std::string& kind, int busy, int cores, int team = 0) const;
  // Bytes per second of one thread of a copy while `copying` threads of the domain's `cores` copy:
  // copy_rate interpolated in log2(threads), with every core copying at loaded["copy"] beyond its
  // last point; per_thread_rate("copy", copying, cores) where the profile has no copy_rate.
  double copy_thread_rate(int copying, int cores) const;
  bool present() const { return sockets > 0; }
};
// The CPU operator kinds a [cpu] section gives a per-core rate for.
const std::vector<std::string>& cpu_op_kinds();
// A kind a profile may leave out, and the kind whose rate stands in for it: the multiway merge
// is costed at the merge join's rate (the nearest streaming merge of sorted inputs through host
// memory) in profiles calibrated before it had a rate of its own. "" for a kind that is required.
std::string cpu_kind_stand_in(const std::string& kind);

// Software cost of a message ([msg]): per message (posting, progress, completion, kernel
// launch) and per byte (staging copies), beyond the links' latency and bandwidth, per transport
// and kind ("ucx.put", "nccl.send", ...; msg_cost_keys()). `send` and `put` name the transports
// whose costs the simulator pays for Rank::send and Rank::put ("none": nothing); copy_seconds is
// the launch of one copy-engine transfer (host <-> device, peer copies).
struct MsgCost {
  double seconds = 0, per_byte = 0;
};
struct MsgSpec {
  std::map<std::string, MsgCost> cost;  // "transport.kind" -> cost (only those given)
  std::string send = "none", put = "none";
  double copy_seconds = 0;
  MsgCost of(const std::string& transport, const std::string& kind) const {
    auto it = cost.find(transport + "." + kind);
    return it == cost.end() ? MsgCost{} : it->second;
  }
};
// "transport.kind" pairs a [msg] section may give (send: every transport; put: those with puts).
const std::vector<std::string>& msg_cost_keys();
// The transport a backend's strategies use by default for `kind` ("send" or "put"), the first of
// its choices that `msg` has measured costs for (cpu: `preferred` if given, else inproc; cuda:
// NCCL sends, else peer; puts over UCX, else peer); "" when none is measured.
std::string backend_transport(const std::string& backend, const std::string& kind, const MsgSpec& msg,
                              const std::string& preferred = "");
const std::vector<std::string>& msg_transports();

struct Profile {
  std::string name, description, status, source;
  std::string path;  // file it was read from
  GpuSpec gpu;
  HostSpec host;
  LinkSpec h2d, d2h, p2p, nic;
  Topology topology;
  CpuSpec cpu;
  MsgSpec msg;
  OpModels ops;
  // Comments of the numbers ("section.key" -> text), kept when a profile is written back.
  std::map<std::string, std::string> notes;

  bool provisional() const { return status.rfind("provisional", 0) == 0; }
};

// Figures of a profile replaced for one experiment, keyed as the profile file writes them
// ("link.nic.bw" -> "5e10", "topology.fabric" -> "fat_tree", "op.probe.linear.cache.far" ->
// "3e7"). Any key the simulator reads may be given, also one the file leaves out; the [profile]
// texts, figures kept for information only and the `seg` lines of operator models (piecewise
// lists) may not.
using ProfileOverrides = std::map<std::string, std::string>;

// Reads and checks a profile; InputError "file:line: key = value: why" on any problem. With
// overrides, each replaces the file's value and is checked as the file's own would be; a bad
// one is an InputError "key = value: why (override of FILE)".
Profile load_profile(const std::string& path, const ProfileOverrides& overrides = {});
Profile parse_profile(std::istream& in, const std::string& file, const ProfileOverrides& overrides = {});
// Name ("h100", looked up in `dir`) or path ("x/y.ini") to a file path; InputError listing the
// profiles in `dir` when there is none.
std::string resolve_profile_path(const std::string& name_or_path, const std::string& dir);
// Writes a profile in the format above, every number followed by its note.
void write_profile(const Profile& p, std::ostream& out);

}  // namespace joinlab
