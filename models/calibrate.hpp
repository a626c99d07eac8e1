// `joinlab calibrate`: measures every operator of the vocabulary over a range of sizes and
// parameters, and the copies and links, through the Rank interface on a real backend (cpu here,
// cuda on the device machine), fits the cost models (op_model.hpp) and writes a profile.
//
//   joinlab calibrate [--backend cpu|cuda] [--profile NAME] [--out FILE] [--base PROFILE]
//                     [--quick] [--min-rows N] [--max-rows N] [--repeat R] [--threads T]
//                     [--samples FILE] [--warm]
//   joinlab calibrate --fit SAMPLES [--profile NAME] [--out FILE] [--base PROFILE]
//
// What one machine cannot measure (the NIC, the cluster topology) is kept from --base, and the
// profile says so next to each such number.
//
// How a sample is timed (Bench::timed): as a strategy's phase runs the operator. Its inputs are
// cold: before each timed run a device copy of twice the last-level cache (the profile's
// gpu.l2_bytes; on the cpu backend the host's LLC) evicts what the previous run left there,
// since in a strategy every phase's inputs were last touched a phase or more earlier, by more
// bytes than the cache holds. The one exception is the hash-table probe, which every strategy
// runs right after its table's build: a probe sample runs after the eviction and a fresh build
// of its table (untimed), so the table starts as cached as a strategy's does. A sample is the host's time from the launch to the operator's
// result (Launched::get), plus the synchronization of every stream that ends a phase
// (begin_phase: Rank::sync_all, which also collects the finished operators' events): the
// simulator charges a phase nothing but its operators, so the operators' models carry it.
// Transfers, allocations and releases are timed without that synchronization. --warm (and
// --quick, for CI) leaves the caches as the previous run left them (an earlier calibration
// protocol; for comparison only).
//
// --samples FILE keeps every timed run (its time, the closing synchronization's, the device's
// own time of its operators from the backend's trace, and the phase name that encodes its
// features); --fit FILE fits a profile from such a file without measuring anything, so a change
// of the fit or of a model's form is checked against the same measurements.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "core/exec/trace.hpp"
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
  uint64_t cpu_rows = 0;     // rows of the host CPUs' single-core pass (0: --quick's middle size, else
                             // the largest up to 2^22); the all-core pass takes as many per thread
  int threads = 0;           // cpu backend: threads per rank (0: all cores)
  bool warm = false;         // leave the caches warm between runs (old protocol, comparison only)
  double cache_bytes = 0;    // last-level cache evicted before each sample (0: from --base / the host)
  std::string samples_out;   // every timed run, written here (--samples)
  std::string samples_in;    // fit from this file instead of measuring (--fit)
  // The steps measured (--only; empty: every step). Steps: "operators" (the operator sweep),
  // "links" (copies, allocations, the zero-copy link microbenchmark, triton's partitioners by
  // fanout into device and host memory, the chunked prefix sum on GPU and CPU), "overlap" (triton's
  // join-phase operators alone and two at once on two streams: GpuSpec::share), "cpu" (the host
  // CPUs' operators), "peer" (the peer link), "messages". A profile fitted from fewer steps keeps
  // the rest from --base.
  std::vector<std::string> only;
  bool widest_tuples_only = false;  // the operator sweep on 8+8-byte tuples only (not 4+4 as well)
  bool runs(const std::string& step) const;
};
// The steps of calibrate, in the order it runs them.
extern const char* const kCalibrationSteps[6];

// One timed run of a calibration sample: the phase name (sample_phase's encoding of the model,
// segment, features and lookups), the host's time of it, of the stream synchronization that
// closes it, and the device's time of the operators it ran (0 where the backend traces none).
struct CalibrationRun {
  std::string phase;
  double seconds = 0, sync_seconds = 0, device_seconds = 0;
};

// Measurements of one calibration run: operator samples by model, and link samples
// (x = {1, bytes}) by link ("h2d", "d2h", "p2p", "host_copy").
struct Calibration {
  std::map<std::string, std::vector<OpSample>> ops;
  std::map<std::string, std::vector<OpSample>> links;
  std::string machine;  // what it ran on
  double host_mem_bw = 0;  // parallel host copy, bytes read + written per second (0: not measured)
  std::map<std::string, std::string> skipped;  // link -> why it was not measured
  std::vector<CalibrationRun> runs;  // every timed run (ops and links are their medians)
  std::string protocol;              // how the samples were timed (cold / warm caches)
  // The host's CPUs ([cpu]): operators on one core (ops "cpu1.<model>", cpu_rates()) and the
  // sockets and cores it has (0: not measured); host_mem_bw above is the all-core roof.
  int cpu_sockets = 0, cpu_cores = 0;
  int cpu_threads_all = 0;  // threads of the all-core pass (ops "cpuall.<model>", loaded_cpu_rates())
  double cpu_clock_ghz = 0;  // /proc/cpuinfo (0: unknown)
};

// The link microbenchmark's results, one line each (what calibrate prints and the docs report):
// zero-copy rates by direction and granule, triton's partitioners by fanout and output, the
// chunked prefix sum on GPU and CPU. Empty where none was measured.
std::vector<std::string> link_report(const Calibration& c);
// Zero-copy rates from the link samples ("zero_copy.<read|write|both>", segment = granule, 0 =
// sequential; x = {1, bytes each way}; "zero_copy.write_beside_copy" and "copy_beside_write"):
// the median rate of each (direction, granule), bytes each way per second, into the profile's
// link.h2d (reads, copies beside writes) and link.d2h (writes) with a note per key.
void fit_zero_copy(const Calibration& c, Profile& p);
// triton's partitioners into pinned memory ("chunk_partition.<shared|hierarchical>.host",
// segment = fanout): the median input rate per fanout into link.d2h's partitioner_rate; the
// shared one into device memory ("chunk_partition.shared.device") into gpu.chunk_partition_rate.
void fit_partitioner_rates(const Calibration& c, Profile& p);
// The GPU share of the operators of kSharedOps ("overlap.<kind>.alone" / ".pair", segment = one
// operator's input bytes): the ratio of the median rates alone and two at once, into gpu.share.
void fit_overlap(const Calibration& c, Profile& p);

// Prefix of the models of the single-core operator samples ("cpu1.histogram", "cpu1.link.host_copy").
extern const char* const kSingleCore;
// Prefix of the models of the same operators on every core at once ("cpuall.histogram").
extern const char* const kAllCores;
// Prefix of the same with every core busy in teams of N threads ("cputeam16.histogram").
extern const char* const kTeamCores;
// Per-core rate of each [cpu] operator kind (bytes of sample_bytes per second on one core, the
// median over its single-core samples), with how it was found; kinds without samples are absent.
std::map<std::string, std::pair<double, std::string>> cpu_rates(const Calibration& c);
// The same per core with every core busy (the all-core samples' bytes per second / threads).
std::map<std::string, std::pair<double, std::string>> loaded_cpu_rates(const Calibration& c);
// The same with every core busy in teams of fewer threads: team threads -> kind -> rate (the
// samples "cputeam<threads>.<model>", bytes per second per thread of a team).
std::map<int, std::map<std::string, std::pair<double, std::string>>> team_loaded_cpu_rates(const Calibration& c);
// Seconds a parallel CPU operator costs beyond its bytes (CpuSpec::op_overhead and
// team_op_overhead), with how it was found: per team size, the slope of the median time of an input
// counted in k histograms against k ("cputeam<threads>.op_overhead.batched" / ".whole", k = 1 ..
// 16; the median of the slopes between every two k), at least 0; `seconds` the median over the
// team sizes. Empty without those samples.
// The loaded rates above are taken net of it (a team's rates of its own).
struct CpuOpOverhead {
  double seconds = 0;
  std::map<int, double> by_team;  // threads per team -> seconds
  std::string operators;          // the operator counts timed, "1/2/4/8/16"
  std::string how;
};
CpuOpOverhead cpu_op_overhead(const Calibration& c);
// The messages' samples: links "msg.<transport>.<kind>" (x = {1, bytes}), one-way, 2 ranks on one host.
// Fits each to latency + bytes x slope and returns the software cost beyond the path the simulator
// already charges (`path`: the peer link between the 2 ranks), clamped at 0.
std::map<std::string, std::pair<MsgCost, std::string>> msg_costs(const Calibration& c, const LinkSpec& path);

// Runs the micro-benchmarks (InputError on bad options, RuntimeError if the backend fails).
Calibration measure(const CalibrationOptions& opt);
// The phase in which a sample's untimed predecessor runs (Bench::begin_sample): "prepare K" for
// K operator launches between the eviction copy and the sample.
std::string prepare_phase(int ops);
// The timed runs of one rank's phases, with the device's time of each sample's operator from the
// trace's spans (matched by order after each eviction copy of `evict_bytes`, past a prepare
// phase's operators; 0 without eviction).
std::vector<CalibrationRun> runs_of(const std::vector<PhaseRecord>& phases, const std::vector<TraceSpan>& spans,
                                    uint64_t evict_bytes);
// The medians of the runs of each distinct sample, as a sample's time: the run's time plus, for
// an operator, the synchronization that closes it (what a strategy's phase pays per operator).
void add_runs(Calibration& c, const std::vector<CalibrationRun>& runs);
// The samples file of --samples / --fit: header lines "# key: value" (machine, host_mem_bw,
// protocol, skipped.<link>), then one run a line: seconds, sync seconds, device seconds, phase.
void write_samples(const Calibration& c, std::ostream& out);
Calibration read_samples(std::istream& in, const std::string& file);  // InputError naming file:line
// Fits a profile from measurements; figures not measured come from `base`.
Profile fit_profile(const Calibration& c, const Profile& base, const CalibrationOptions& opt);

// The command. Returns the process exit code.
int calibrate_main(const std::vector<std::string>& args);
// `joinlab validate FILE ...` (validate.cpp).
int validate_main(const std::vector<std::string>& args);
// Registers both with the experiment CLI.
void register_model_commands();
// joinlab bench-codec (models/bench_codec.cpp): the compression operators' ratio and GB/s.
void register_codec_bench();

}  // namespace joinlab
