#include "models/calibrate.hpp"

#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <type_traits>
#include <unistd.h>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/exec/backend.hpp"
#include "core/experiment/cli.hpp"
#include "core/experiment/environment.hpp"
#include "core/runtime/cpu_backend.hpp"
#include "core/strategies/rank_joins.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/host_memory.hpp"

namespace joinlab {

const char* const kCalibrationSteps[6] = {"operators", "links", "overlap", "cpu", "peer", "messages"};

bool CalibrationOptions::runs(const std::string& step) const {
  return only.empty() || std::find(only.begin(), only.end(), step) != only.end();
}

namespace {

// The hash seed of calibrate's tables.
constexpr uint64_t kTableSeed = 0x2545f4914f6cdd1dULL;
// The seed of the hash partitions measured at the shuffle's fanouts (any seed: murmur3 spreads keys alike).
constexpr uint64_t kShuffleSeed = 0x5eed;
constexpr uint64_t kExchangeSlices = 64;  // the slices the exchange's senders count a batch in (gpj.cpp)
// The operator counts one input is counted in to time an operator's own cost (a slope over them),
// and the runs of each: the cost is a few percent of a run's time, so noise needs many points.
constexpr uint64_t kOverheadBatches[] = {1, 2, 4, 8, 16};
constexpr int kOverheadRepeat = 7;

// The phase that times a sample's closing synchronization (Bench::end_sample).
const char* const kSyncPhase = "sync";

// Every measurement is a phase of the calibration run named "cal <model> <segment> <x...>"
// (then, for an operator with random lookups, "| <lookups> <bytes> <keys>" and one
// "<lookups> <keys> <zipf> <first rank>" per tail of their key access), so it comes back through
// Rank::phases() whatever the backend (the sim backend runs its ranks in another process). The
// phase's duration is the measured time.
std::string sample_phase(const OpSample& s) {
  std::ostringstream n;
  n << std::setprecision(17) << "cal " << s.model << " " << s.segment;
  for (double x : s.x) n << " " << x;
  const Locality& l = s.locality;
  if (l.lookups > 0) {
    n << " | " << l.lookups << " " << l.bytes << " " << l.keys;
    for (auto& t : l.access.tails) n << " " << t.lookups << " " << t.keys << " " << t.zipf << " " << t.first_rank;
  }
  return n.str();
}

// A radix sort sample of a samples file written before the MSD plan's features (2026-11-23):
// features {bytes, cub_bytes, cub_sorts (now cub_calls), segment_max_bytes}. Its plan follows from its rows,
// since calibrate sorted tuples of key_bytes + key_bytes (4+4, 8+8) whose keys are R's dense keys
// 1..rows or foreign keys into them, and the sort of then found its range with an exact max
// reduction (the largest key: rows).
void upgrade_sort_sample(OpSample& s) {
  if (s.model != "sort.radix" || s.x.size() != 5 || s.segment <= 0) return;
  const uint32_t kb = uint32_t(s.segment);
  const double rows = s.x[1] / (2.0 * kb);
  const double seconds = s.seconds;
  s = radix_sort_sample(rows, rows, kb, kb, s.x[2], s.x[3], s.x[4]);
  s.seconds = seconds;
}

// A partitioned join sample of a samples file written before `host_lists` (2026-11-23): 1 where
// the host listed its items (host_items > 0).
void upgrade_join_sample(OpSample& s) {
  if (s.model.rfind("partitioned_join.", 0) != 0 || s.x.size() != 8) return;
  s.x.push_back(s.x[7] > 0 ? 1.0 : 0.0);
}

bool parse_sample_phase(const PhaseRecord& p, OpSample& s) {
  std::istringstream in(p.name);
  std::string tag;
  if (!(in >> tag) || tag != "cal") return false;
  in >> s.model >> s.segment;
  s.x.clear();
  s.locality = Locality{};
  std::string tok;
  bool lookups = false;
  std::vector<double> rest;
  while (in >> tok) {
    if (tok == "|") {
      lookups = true;
      continue;
    }
    (lookups ? rest : s.x).push_back(std::stod(tok));
  }
  if (lookups && rest.size() >= 3 && (rest.size() - 3) % 4 == 0) {
    s.locality.lookups = rest[0];
    s.locality.bytes = rest[1];
    s.locality.keys = rest[2];
    for (size_t i = 3; i + 3 < rest.size(); i += 4)
      s.locality.access.tails.push_back({rest[i], rest[i + 1], rest[i + 2], rest[i + 3]});
  }
  s.seconds = p.end - p.begin;
  upgrade_sort_sample(s);
  upgrade_join_sample(s);
  return !s.x.empty();
}


// Skews of the probe side calibrate measures: uniform and Zipf exponents between and around
// the validation's (experiments/validate/single-gpu.ini validates at 0.75 and 1.5, which are
// not among these, at sizes of 1.5 x a power of two, which calibrate does not measure either).
std::vector<double> skews(const CalibrationOptions& opt) {
  if (opt.quick) return {0.0, 1.0};
  // 2 brackets the skews the strategies meet (validation goes to 1.5): fitted up to 1.25 only, the
  // probe's output coefficient came from large uniform probes (whose writes compete with their misses
  // for DRAM) and npj's Zipf 1.5 probes were predicted 50% too slow; at 2 the lookups stay cached, the
  // MSD sort sends most rows to CUB and phj's hot partition is split (its items listed on the host).
  return {0.0, 0.5, 1.0, 1.25, 2.0};
}

// What every run of an operator that the strategies run right after another starts from
// (Bench::timed): `renew` (untimed, before the eviction) gives the run fresh state, `run` (its
// `ops` launches) is the predecessor, run between the eviction and the sample.
struct Predecessor {
  std::function<void()> renew, run;
  int ops = 0;
};

// The micro-benchmarks of one rank, over sizes `sizes` (rows). Each operator runs as the
// strategies run it: joins with the direct output (their default) and counting only, hash
// tables at the strategies' load factor 0.5 (and at 0.25, which tells an insert's collisions
// apart from the insert), the probe side uniform and Zipf-skewed, the per-partition join on
// phj's own radix plan (one or two passes) at its partition budget and around it.
class Bench {
 public:
  Bench(Rank& rank, const CalibrationOptions& opt, std::vector<uint64_t> sizes, double cache_bytes = 0)
      : rank_(rank), opt_(opt), sizes_(std::move(sizes)), cache_bytes_(cache_bytes) {}

  // The steps "operators" and "links" (whichever opt.only names) on one rank.
  void run_operators() {
    const auto t0 = std::chrono::steady_clock::now();
    if (!opt_.warm && cache_bytes_ > 0) {  // what evicts the cache before each sample
      const uint64_t bytes = uint64_t(2 * cache_bytes_);
      flush_src_ = rank_.alloc(MemSpace::Device, bytes, "calibrate.evict.src");
      flush_dst_ = rank_.alloc(MemSpace::Device, bytes, "calibrate.evict.dst");
    }
    auto progress = [&](const std::string& what) {  // wall time so far: calibrate runs under a time limit
      if (rank_.id() != 0) return;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::cerr << "calibrate: " << what << " done at " << std::fixed << std::setprecision(1) << s << " s\n";
    };
    if (opt_.runs("operators")) operator_sweep(progress);
    if (opt_.runs("links")) {
      links();
      progress("links and allocations");
      zero_copy();
      progress("zero-copy accesses");
      chunked_passes();
      progress("partitioners and prefix sums by fanout");
    }
    if (opt_.runs("overlap") && rank_.streams() >= 2) {
      overlap();
      progress("operators alone and two at once");
    }
    rank_.end_phases();
  }

  template <class Progress>
  void operator_sweep(const Progress& progress) {
    const std::vector<TupleFormat> formats =
        opt_.widest_tuples_only ? std::vector<TupleFormat>{{8, 8}} : std::vector<TupleFormat>{{4, 4}, {8, 8}};
    for (TupleFormat fmt : formats)
      for (uint64_t n : sizes_) {
        data(n, fmt);
        generate_and_scan(n);
        partitioning(r_, n, true);
        hash_tables(n);
        for (double z : skews(opt_)) {
          probe_side(n, z);
          probes(n, z);
          if (z == 0 || !opt_.quick) partitioning(s_, n, false);
          partitioned_joins(n, z);
          sorting(n, z);
          release_s();
        }
        gather_and_checksum(n);
        compression(n);
        release();
        progress(std::to_string(n) + " rows of " + std::to_string(fmt.tuple_bytes()) + "-byte tuples");
      }
  }

  // Rank 0 sends `bytes` to rank 1 (run on 2 ranks): the peer link.
  void run_peer() {
    for (uint64_t bytes : link_sizes()) {
      Buffer b = rank_.alloc(MemSpace::Device, bytes, "calibrate.p2p");
      for (int r = 0; r < opt_.repeat; ++r) {
        rank_.barrier();
        if (rank_.id() == 1) {
          untimed();
          OpSample s;
          s.model = "link.p2p";
          s.x = {1.0, double(bytes)};
          rank_.phase(sample_phase(s));
          rank_.recv(Stream{0}, 0, b, 0, bytes, 1).wait();
          end_sample();
        } else {
          rank_.send(Stream{0}, 1, b, 0, bytes, 1).wait();
        }
      }
    }
    rank_.end_phases();
  }

  // Messages of every size from rank 0 to rank 1 (run on 2 ranks) over the backend's transport
  // `transport`: a two-sided send (timed by the receiver, from the barrier to the receive's end)
  // and a one-sided put with its flag (from the barrier to the flag seen), each one way.
  void run_messages(const std::string& transport) {
    for (uint64_t bytes : message_sizes()) {
      untimed();
      Buffer b = rank_.alloc(MemSpace::Device, bytes, "calibrate.msg");
      const int window = rank_.expose(b, 1);
      for (const char* kind : {"send", "put"})
        for (int r = 0; r < opt_.repeat; ++r) {
          rank_.barrier();
          if (rank_.id() == 1) {
            OpSample s;
            s.model = "link.msg." + transport + "." + kind;
            s.x = {1.0, double(bytes)};
            begin_sample(sample_phase(s), false);
            if (kind == std::string("send")) {
              rank_.recv(Stream{0}, 0, b, 0, bytes, 2).wait();
            } else {
              while (rank_.read_flag(window, 0) != uint64_t(r + 1)) rank_.poll_pause();
            }
            end_sample();
          } else if (kind == std::string("send")) {
            rank_.send(Stream{0}, 1, b, 0, bytes, 2).wait();
          } else {
            rank_.put(Stream{0}, 1, window, 0, b, 0, bytes, 0, uint64_t(r + 1)).wait();
          }
        }
      rank_.barrier();  // the window's last put has landed before its buffer goes
    }
    rank_.end_phases();
  }

 private:
  // 8 B to 64 MiB by factors of 8 (--quick: to 256 KiB).
  std::vector<uint64_t> message_sizes() const {
    std::vector<uint64_t> v;
    for (uint64_t b = 8; b <= (opt_.quick ? (uint64_t(1) << 18) : (uint64_t(64) << 20)); b *= 8) v.push_back(b);
    if (!opt_.quick) v.push_back(uint64_t(64) << 20);
    return v;
  }
  void untimed() { rank_.phase("setup"); }

  // A sample starts with cold caches (unless --warm) and idle streams, as a strategy's phase
  // does: the eviction copy and the synchronization are not timed. An operator that the
  // strategies always run right after another (a probe after its table's build) starts after
  // that one instead: `before` (its `before_ops` launches) runs untimed between the eviction and
  // the sample, in a phase named prepare_phase(before_ops), which runs_of skips.
  void begin_sample(const std::string& name, bool evict = true, int before_ops = 0,
                    const std::function<void()>& before = {}) {
    if (evict && flush_src_) rank_.copy(Stream{0}, flush_dst_, 0, flush_src_, 0, flush_src_->bytes).wait();
    if (before) {
      rank_.phase(prepare_phase(before_ops));
      before();
    }
    rank_.sync_all();
    rank_.phase(name);
  }
  // ... and ends as a phase ends: every stream synchronized (begin_phase), timed apart
  // (kSyncPhase) so that the samples file keeps both.
  void end_sample() {
    rank_.phase(kSyncPhase);
    rank_.sync_all();
    untimed();
  }

  // The same operator writing into newly allocated outputs: a strategy's operators write into
  // fresh memory (first touch included), never into a buffer still warm from the last run.
  Op with_fresh_outputs(const Op& op) {
    Op fresh = op;
    std::visit(
        [&](auto& o) {
          using T = std::decay_t<decltype(o)>;
          auto tuples = [&](Tuples& t) {
            Tuples n = rank_.alloc_tuples(t.keys->space, t.capacity, t.fmt, "calibrate.fresh");
            n.rows = t.rows;
            t = n;
          };
          auto output = [&](JoinOutput& out, OutputMode mode) {
            if (mode != OutputMode::CountOnly && out.capacity > 0)
              out = rank_.alloc_output(out.keys->space, out.capacity, out.r_fmt, out.s_fmt, "calibrate.fresh");
          };
          if constexpr (std::is_same_v<T, GenerateOp> || std::is_same_v<T, PartitionOp> || std::is_same_v<T, SortOp> ||
                        std::is_same_v<T, MergeOp>)
            tuples(o.out);
          else if constexpr (std::is_same_v<T, ProbeOp> || std::is_same_v<T, PartitionedJoinOp> ||
                             std::is_same_v<T, MergeJoinOp>)
            output(o.out, o.mode);
          else if constexpr (std::is_same_v<T, GatherOp> || std::is_same_v<T, ScanOp> || std::is_same_v<T, CompressOp>)
            o.out = rank_.alloc(o.out->space, o.out->bytes, "calibrate.fresh");
          else if constexpr (std::is_same_v<T, DecompressOp>) {  // the buffers' outputs share one buffer
            Buffer fresh_out;
            for (CodecColumn& c : o.out)
              if (c.buf) c.buf = fresh_out ? fresh_out : (fresh_out = rank_.alloc(c.buf->space, c.buf->bytes, "calibrate.fresh"));
          }
        },
        fresh);
    return fresh;
  }

  // Times `op`: one warm-up run (which also gives the result the features need), then one
  // sample per repeat, each into fresh outputs (and after `after`, where given). `access`: how
  // its lookups spread over the keys.
  OpResult timed(const Op& op, const KeyAccess* access = nullptr, const Predecessor& after = {}) {
    untimed();
    if (after.renew) after.renew();
    if (after.run) after.run();
    OpResult result = rank_.launch(Stream{0}, op).get();
    const std::string name = sample_phase(op_sample(op, result, access));
    for (int r = 0; r < opt_.repeat; ++r) {
      Op fresh = with_fresh_outputs(op);
      if (after.renew) after.renew();
      begin_sample(name, true, after.ops, after.run);
      rank_.launch(Stream{0}, fresh).get();
      end_sample();
    }
    return result;
  }

  // Builds fill their table, so each run gets a fresh one (allocated untimed).
  HashTable timed_build(TableKind kind, uint64_t n, double load_factor) {
    HashTable t;
    for (int r = 0; r <= opt_.repeat; ++r) {
      untimed();
      t = rank_.alloc_table(MemSpace::Device, kind, fmt_, n, load_factor, kTableSeed, "calibrate.table");
      BuildOp b{r_, &t};
      HashTable built = t;  // the features as the operator sees them once it ran
      built.rows = n;
      if (r > 0) begin_sample(sample_phase(op_sample(BuildOp{r_, &built}, OpResult{})));
      rank_.launch(Stream{0}, b).get();
      if (r > 0) end_sample();
    }
    untimed();
    return t;
  }

  JoinOutput no_output() const {
    JoinOutput none;
    none.r_fmt = none.s_fmt = fmt_;
    return none;
  }

  void data(uint64_t n, TupleFormat fmt) {
    untimed();
    fmt_ = fmt;
    r_spec_ = one_column_relation("R", n, KeyDist::UniqueDense, fmt.key_bytes, fmt.val_bytes);
    r_ = rank_.alloc_tuples(MemSpace::Device, n, fmt, "calibrate.R");
    scratch_ = rank_.alloc_tuples(MemSpace::Device, n, fmt, "calibrate.scratch");
    GenerateOp g;
    g.spec = r_spec_;
    g.out = r_;
    g.value_is_rowid = true;
    gen_r_ = g;
    rank_.launch(Stream{0}, g).get();
  }

  // S: foreign keys into R, uniform or Zipf(z) over R's keys by rank.
  void probe_side(uint64_t n, double z) {
    untimed();
    s_spec_ = one_column_relation("S", n, KeyDist::ForeignKey, fmt_.key_bytes, fmt_.val_bytes);
    s_spec_.zipf_z = z;
    s_ = rank_.alloc_tuples(MemSpace::Device, n, fmt_, "calibrate.S");
    GenerateOp g;
    g.spec = s_spec_;
    g.referenced = &r_spec_;
    g.out = s_;
    rank_.launch(Stream{0}, g).get();
    access_ = KeyAccess::zipf(double(n), double(n), z);
  }

  void release_s() { s_ = Tuples{}; }
  void release() {
    r_ = s_ = rs_ = scratch_ = Tuples{};
  }

  void generate_and_scan(uint64_t n) {
    timed(gen_r_);
    Buffer in = rank_.alloc(MemSpace::Device, n * 8, "calibrate.scan.in"), out = rank_.alloc(MemSpace::Device, n * 8, "calibrate.scan.out");
    timed(ScanOp{in, out, n});
    // A device copy into fresh memory: the copy.device model.
    for (int r = 0; r < opt_.repeat; ++r) {
      Buffer dst = rank_.alloc(MemSpace::Device, n * 8, "calibrate.fresh");
      begin_sample(sample_phase(device_copy_sample(n * 8)));
      rank_.copy(Stream{0}, dst, 0, in, 0, n * 8).wait();
      end_sample();
    }
  }

  // A parallel CPU operator's own cost (CpuSpec::op_overhead): the same keys counted by one
  // histogram, then by k histograms of a slice each (k = 2 .. 16), as the exchange's senders count
  // their batches ("op_overhead.whole" / "op_overhead.batched", x = {1, key bytes}, segment =
  // operators). The time's slope in k is what an operator costs beyond its bytes.
  void operator_overhead(const Tuples& in, uint64_t n) {
    if (n < kOverheadBatches[std::size(kOverheadBatches) - 1]) return;
    const PartitionFn fn{PartitionFn::Hash, 5, 0, kShuffleSeed};
    const double bytes = double(n) * in.fmt.key_bytes;
    for (uint64_t k : kOverheadBatches) {
      OpSample sample;
      sample.model = k == 1 ? "op_overhead.whole" : "op_overhead.batched";
      sample.x = {1.0, bytes};
      sample.segment = double(k);
      const std::string name = sample_phase(sample);
      for (int r = 0; r < std::max(opt_.repeat, kOverheadRepeat); ++r) {
        begin_sample(name);
        std::vector<Launched> ops;
        for (uint64_t b = 0; b < k; ++b)
          ops.push_back(rank_.launch(Stream{0}, HistogramOp{in.slice(n * b / k, n * (b + 1) / k - n * b / k), fn}));
        for (auto& l : ops) l.get();
        end_sample();
      }
    }
    untimed();
  }

  // One pass at every fanout a strategy's pass uses (R), or at two (a skewed S), then a second
  // pass over the first one's partitions (in_segments), as phj's two-pass plans run it. Fanouts
  // 2, 4 and 8 are the shuffle's hash partitions among 2, 4 and 8 ranks (shuffle.cpp,
  // Destinations), measured with its hash: a model's piece per fanout is fitted only where that
  // fanout was measured, and fanout 16's piece extrapolated down to 2 put the 2-GPU shuffle's
  // partition phase 60% high on 2 and 4 x H200 (its skew_rows feature, rows / fanout for uniform
  // keys, grows 8x from fanout 16 to 2 while the bytes stay; at one fanout it differs from the
  // bytes only by the tuple width, so the fit barely determines its share of the cost).
  void partitioning(const Tuples& in, uint64_t n, bool every_fanout) {
    std::vector<uint32_t> all_bits;
    if (every_fanout) {
      for (uint32_t b = 1; b <= 12; ++b) all_bits.push_back(b);
    } else {
      all_bits = {8, 11};
    }
    if (opt_.quick) all_bits = {4, 8, 11};
    // On the CPU a histogram is the one-sided exchange's senders' (gpj, gpj-b, gpj-h, crj): a hash
    // of the keys at 16 partitions per receiver (2 to 4 receivers), each batch counted in 64
    // slices (gpj.cpp count_slices); timed so. Radix histograms of the whole input, timed before,
    // put gpj's sender histogram 23% high on one 2x H100 host and their fitted models 24% low on
    // another.
    const bool cpu = opt_.backend == "cpu";
    if (cpu) {
      for (uint32_t bits : {4u, 5u, 6u}) {
        HistogramOp h{in, PartitionFn{PartitionFn::Hash, bits, 0, kShuffleSeed}};
        for (uint64_t sl = 0; sl <= kExchangeSlices; ++sl) h.in_segments.push_back(n * sl / kExchangeSlices);
        timed(h);
      }
      operator_overhead(in, n);
    }
    for (uint32_t bits : all_bits) {
      const PartitionFn fn{bits < 4 ? PartitionFn::Hash : PartitionFn::Radix, bits, 0, bits < 4 ? kShuffleSeed : 0};
      if (!cpu) timed(HistogramOp{in, fn});
      PartitionOp p;
      p.in = in;
      p.fn = fn;
      p.out = scratch_;
      timed(p);
    }
    // Second passes: 8 bits, then 4 or 8 more over the 256 segments.
    untimed();
    PartitionOp first{in, {}, PartitionFn{PartitionFn::Radix, 8, 0, 0}, scratch_};
    const std::vector<uint64_t> segments = rank_.launch(Stream{0}, first).get().values;
    Tuples out = rank_.alloc_tuples(MemSpace::Device, n, fmt_, "calibrate.pass2");
    for (uint32_t bits : {4u, 8u}) {
      if (opt_.quick && bits == 8) continue;
      timed(PartitionOp{scratch_, segments, PartitionFn{PartitionFn::Radix, bits, 8, 0}, out});
    }
    // triton's chunk partitioner into device memory, both partitioners: its device work is a
    // partition pass (the partition model); its writes over the link are the simulator's.
    const PartitionFn fn8{PartitionFn::Radix, 8, 0, 0};
    const std::vector<uint64_t> bounds = chunk_bounds(n, 64);
    const ChunkLayout layout = chunked_layout(rank_.launch(Stream{0}, HistogramOp{in, fn8, bounds}).get().values,
                                              fn8.fanout(), 64);
    for (Partitioner kind : {Partitioner::Shared, Partitioner::Hierarchical}) {
      ChunkPartitionOp cp;
      for (size_t c = 0; c + 1 < bounds.size(); ++c) cp.chunks.push_back(in.slice(bounds[c], bounds[c + 1] - bounds[c]));
      cp.fn = fn8;
      cp.offsets = layout.offsets;
      cp.cached_chunks = 64;
      cp.cache = out;
      cp.partitioner = kind;
      timed(cp);
    }
  }

  // Builds at the strategies' load factor (0.5) and at 0.25.
  void hash_tables(uint64_t n) {
    for (TableKind kind : {TableKind::LinearProbing, TableKind::Chained}) {
      timed_build(kind, n, 0.25);
      timed_build(kind, n, 0.5);
    }
  }

  // Probes of a table at load 0.5, each right after the table's build, as every strategy probes
  // (npj, chunked's chunks, the shuffles' local joins): the build leaves up to a cache's worth of
  // the table behind, which a probe after an eviction would have to fetch first (2026-11-22, H100:
  // fitted to cold probes, the model's Zipf 1.5 predictions moved by up to 30% between two
  // calibrations; fitted to probes after their build, by 3%). Each run builds a fresh table
  // (untimed); the warm-up's probe gives the features.
  void probes(uint64_t n, double z) {
    JoinOutput out = rank_.alloc_output(MemSpace::Device, n, fmt_, fmt_, "calibrate.out");
    for (TableKind kind : {TableKind::LinearProbing, TableKind::Chained}) {
      if (opt_.quick && kind == TableKind::Chained && z != 0) continue;
      HashTable t;
      const Predecessor build{[&] {
                                t = HashTable{};  // the last run's table first: one at a time
                                t = rank_.alloc_table(MemSpace::Device, kind, fmt_, n, 0.5, kTableSeed, "calibrate.table");
                              },
                              [&] { rank_.launch(Stream{0}, BuildOp{r_, &t}).get(); }, 1};
      timed(ProbeOp{&t, s_, no_output(), 0, OutputMode::CountOnly}, &access_, build);
      timed(ProbeOp{&t, s_, out, 0, OutputMode::Direct}, &access_, build);
    }
  }

  // phj's partitioning and per-partition join: its radix plan at the default partition budget
  // and at half and twice it (so that the work items and the rows per item vary apart).
  void partitioned_joins(uint64_t n, double z) {
    std::vector<uint64_t> budgets = {kDefaultPartitionBudget / 2, kDefaultPartitionBudget, kDefaultPartitionBudget * 2};
    if (opt_.quick) budgets = {kDefaultPartitionBudget};
    JoinOutput out = rank_.alloc_output(MemSpace::Device, n, fmt_, fmt_, "calibrate.out");
    for (uint64_t budget : budgets) {
      untimed();
      const RadixPlan plan = plan_radix(n, fmt_.tuple_bytes(), fmt_.key_bytes, budget, 0, 0);
      auto partitioned = [&](const Tuples& in, bool time_it) {
        Tuples mid = rank_.alloc_tuples(MemSpace::Device, n, fmt_, "calibrate.pj.pass1");
        Tuples fin = rank_.alloc_tuples(MemSpace::Device, n, fmt_, "calibrate.pj.pass2");
        if (plan.passes() == 0) return Partitioned{in, {0, n}};
        // As phj runs it: the last pass also writes its offsets into device memory
        // (PartitionOp::offsets_out), so that the join lists its work items on the device.
        Buffer offsets = rank_.alloc(MemSpace::Device,
                                     ((uint64_t(1) << (plan.pass1_bits + plan.pass2_bits)) + 1) * sizeof(uint64_t),
                                     "calibrate.pj.offsets");
        PartitionOp p1{in, {}, PartitionFn{PartitionFn::Radix, plan.pass1_bits, 0, 0}, mid};
        if (plan.pass2_bits == 0) p1.offsets_out = offsets;
        auto off = (time_it ? timed(p1) : rank_.launch(Stream{0}, p1).get()).values;
        if (plan.pass2_bits == 0) return Partitioned{mid, off, offsets};
        PartitionOp p2{mid, off, PartitionFn{PartitionFn::Radix, plan.pass2_bits, plan.pass1_bits, 0}, fin};
        p2.offsets_out = offsets;
        return Partitioned{fin, (time_it ? timed(p2) : rank_.launch(Stream{0}, p2).get()).values, offsets};
      };
      // The partitionings are measured (at the default budget; R's once, on uniform S's turn).
      const bool time_parts = budget == kDefaultPartitionBudget;
      const Partitioned rp = partitioned(r_, time_parts && z == 0);
      const Partitioned sp = partitioned(s_, time_parts);
      for (TableKind kind : {TableKind::LinearProbing, TableKind::Chained}) {
        if (opt_.quick && kind == TableKind::Chained && z != 0) continue;
        timed(PartitionedJoinOp{rp, sp, no_output(), 0, OutputMode::CountOnly, kind});
        timed(PartitionedJoinOp{rp, sp, out, 0, OutputMode::Direct, kind});
      }
    }
  }

  void sorting(uint64_t n, double z) {
    Tuples ss = rank_.alloc_tuples(MemSpace::Device, n, fmt_, "calibrate.Ss");
    if (z == 0) {
      rs_ = rank_.alloc_tuples(MemSpace::Device, n, fmt_, "calibrate.Rs");
      timed(SortOp{r_, rs_, SortAlgo::Radix});
      timed(SortOp{s_, scratch_, SortAlgo::Merge});
      if (!opt_.quick)  // into buffers free at this point: no more device memory at 2^28 rows
        for (uint64_t spread : {4, 8}) wide_sort(n, spread, scratch_, ss);
    }
    timed(SortOp{s_, ss, SortAlgo::Radix}, &access_);  // skew makes the MSD sort's oversized partitions
    JoinOutput out = rank_.alloc_output(MemSpace::Device, n, fmt_, fmt_, "calibrate.out");
    timed(MergeJoinOp{rs_, ss, no_output(), 0, OutputMode::CountOnly}, &access_);
    timed(MergeJoinOp{rs_, ss, out, 0, OutputMode::Direct}, &access_);
    // mgsmj's merge stages: the local merge of two sorted runs (half of R's and of S's rows into
    // the scratch rows, free here), and the pivot search over a stage's probes (a launch: the
    // scan model's constant).
    timed(MergeOp{rs_.slice(0, n / 2), ss.slice(0, n - n / 2), scratch_.slice(0, n)});
    timed(PivotSearchOp{rs_.keys, ss.keys, fmt_.key_bytes, std::min<uint64_t>(n, 1024)});
    // The multiway merge runs on the host's CPUs on every backend: the CPU passes sample it (two
    // runs whose keys interleave, as sorted chunksets do).
    if (rank_.backend() == "cpu") {
      Tuples merged = rank_.alloc_tuples(MemSpace::Device, 2 * n, fmt_, "calibrate.merged");
      timed(MultiwayMergeOp{{rs_, ss}, merged});
    }
  }

  // The MSD sort of keys spread over `spread` times the rows (uniform over 1..spread x n): its
  // blocks sort 13 low bits (8192 counters) where R's dense keys leave 11, in 2^(k-11) (spread 4)
  // or 2^(k-10) (spread 8) partitions of 2^k rows. R's sorts alone have blocks and counters in
  // the same proportion to the rows at every size (msd_plan), and the fit could not tell a block's
  // cost, a counter's and a row's apart; the validation's 1.5 x 2^k rows have another proportion.
  // `w` receives the keys, `out` the sorted rows (n rows each, free for reuse).
  void wide_sort(uint64_t n, uint64_t spread, Tuples w, Tuples out) {
    untimed();
    RelationSpec spec = one_column_relation("W", n, KeyDist::Uniform, fmt_.key_bytes, fmt_.val_bytes);
    spec.range_lo = 1;
    spec.range_hi = spread * n;
    w.rows = out.rows = n;
    GenerateOp g;
    g.spec = spec;
    g.out = w;
    rank_.launch(Stream{0}, g).get();
    const KeyAccess keys = KeyAccess::uniform(double(n), double(spread * n));
    timed(SortOp{w, out, SortAlgo::Radix}, &keys);
  }

  void gather_and_checksum(uint64_t n) {
    // Row ids in scattered order: R's values are its row ids; a hash partition scatters them.
    untimed();
    PartitionOp p{r_, {}, PartitionFn{PartitionFn::Hash, 10, 0, 7}, scratch_};
    rank_.launch(Stream{0}, p).get();
    Buffer column = rank_.alloc(MemSpace::Device, n * 4, "calibrate.column");
    Buffer gathered = rank_.alloc(MemSpace::Device, n * 4, "calibrate.gathered");
    GatherOp g;
    g.row_ids = scratch_.vals;
    g.id_bytes = fmt_.val_bytes;
    g.column = column;
    g.col_bytes = 4;
    g.rows = n;
    g.out = gathered;
    if (fmt_.val_bytes == 4 || fmt_.val_bytes == 8) timed(g);
    ChecksumOp c;
    c.keys = r_.keys;
    c.key_bytes = fmt_.key_bytes;
    c.columns = {r_.vals, r_.vals};
    c.column_bytes = {fmt_.val_bytes, fmt_.val_bytes};
    c.rows = n;
    timed(c);
  }

  // Cascaded compression (the compress and decompress models): n keys cut into 64 buffers (the
  // partitions a rank sends), compressed and decompressed, for each kind of key column with the
  // layers the selector picks for it (codec_select; the device's columns are not on the host):
  // R's keys (a permutation: bit-packing), uniform keys, and TPC-H's orders keys (sorted, steps
  // 1 x 7 and 25: delta, then RLE of the steps) and lineitem keys (runs of an order's lines: RLE +
  // delta), the last also with the deepest cascade.
  void compression(uint64_t n) {
    const uint8_t kb = fmt_.key_bytes;
    RelationSpec orders = one_column_relation("R", n, KeyDist::TpchOrders, kb, fmt_.val_bytes);
    orders.scale_factor = std::max(1.0, std::ceil(double(n) / 1.5e6));
    orders.rows = tpch_rows(orders);
    RelationSpec lineitem = one_column_relation("S", n, KeyDist::TpchLineitem, kb, fmt_.val_bytes);
    lineitem.scale_factor = orders.scale_factor;
    lineitem.rows = tpch_rows(lineitem);
    RelationSpec uniform = one_column_relation("S", n, KeyDist::Uniform, kb, fmt_.val_bytes);
    uniform.range_lo = 1;
    uniform.range_hi = kb == 4 ? 0xFFFFFFF0ull : (uint64_t(1) << 62);
    struct Column {
      const RelationSpec* spec;
      std::vector<codec::Config> configs;
    };
    const std::vector<Column> columns = {{&r_spec_, {{0, 0}}},
                                         {&uniform, {{0, 0}}},
                                         {&orders, {{1, 1, 1}}},
                                         {&lineitem, {{1, 1}, {2, 1}}}};
    constexpr uint64_t kBuffers = 64;
    const std::vector<uint64_t> bounds = chunk_bounds(n, kBuffers);
    for (const Column& col : columns) {
      untimed();
      Tuples keys = scratch_;
      keys.rows = n;
      if (col.spec != &r_spec_) {
        GenerateOp g;
        g.spec = *col.spec;
        g.referenced = col.spec == &lineitem ? &orders : nullptr;
        g.out = keys;
        rank_.launch(Stream{0}, g).get();
      } else {
        keys = r_;
      }
      for (const codec::Config cfg : col.configs) {
        CompressOp c;
        c.value_bytes = kb;
        for (uint64_t b = 0; b < kBuffers; ++b)
          c.in.push_back({keys.keys, keys.offset + bounds[b], bounds[b + 1] - bounds[b]});
        c.configs.assign(kBuffers, cfg);
        c.out = rank_.alloc(MemSpace::Device, compress_bound(c), "calibrate.compressed");
        const OpResult packed = timed(c);
        DecompressOp d;
        d.in = c.out;
        d.offsets = packed.values;
        d.value_bytes = kb;
        Buffer raw = rank_.alloc(MemSpace::Device, n * kb, "calibrate.decompressed");
        for (uint64_t b = 0; b < kBuffers; ++b) d.out.push_back({raw, bounds[b], bounds[b + 1] - bounds[b]});
        timed(d);
      }
    }
  }

  std::vector<uint64_t> link_sizes() const {
    std::vector<uint64_t> v;
    const uint64_t top = std::max<uint64_t>(sizes_.back() * 8, 1 << 20);
    for (uint64_t b = 4096; b <= top; b *= 8) v.push_back(b);
    return v;
  }

  void links() {
    for (uint64_t bytes : link_sizes())
      for (MemSpace space : {MemSpace::Device, MemSpace::Pinned})
        for (int r = 0; r < opt_.repeat; ++r) {
          begin_sample(sample_phase(alloc_sample(space, bytes)), false);
          Buffer b = rank_.alloc(space, bytes, "calibrate.alloc");
          end_sample();
          // Its release, as a strategy drops a buffer: until the rank may go on (the CUDA
          // backend waits for the device first), with the streams idle.
          begin_sample(sample_phase(free_sample(space, bytes)), false);
          b = Buffer{};
          rank_.sync(Stream{0});  // where a backend that defers the release pays it (sim); idle here
          end_sample();
        }
    for (uint64_t bytes : link_sizes()) {
      untimed();
      Buffer host = rank_.alloc(MemSpace::Pinned, bytes, "calibrate.pinned");
      Buffer host2 = rank_.alloc(MemSpace::Host, bytes, "calibrate.host");
      Buffer dev = rank_.alloc(MemSpace::Device, bytes, "calibrate.device");
      const std::pair<const char*, std::pair<Buffer, Buffer>> cases[] = {
          {"link.h2d", {dev, host}}, {"link.d2h", {host, dev}}, {"link.host_copy", {host2, host}}};
      for (auto& [name, bufs] : cases)
        for (int r = 0; r < opt_.repeat; ++r) {
          OpSample s;
          s.model = name;
          s.x = {1.0, double(bytes)};
          begin_sample(sample_phase(s), false);
          rank_.copy(Stream{0}, bufs.first, 0, bufs.second, 0, bytes).wait();
          end_sample();
        }
      // Both directions at once (two streams): the bytes host memory moved for DMA, read and
      // written, which the parallel CPU copy may not reach (a VM's few cores bound that one).
      if (rank_.streams() < 2) continue;
      Buffer host3 = rank_.alloc(MemSpace::Pinned, bytes, "calibrate.pinned2");
      Buffer dev2 = rank_.alloc(MemSpace::Device, bytes, "calibrate.device2");
      for (int r = 0; r < opt_.repeat; ++r) {
        OpSample s;
        s.model = "link.duplex";
        s.x = {1.0, 2.0 * double(bytes)};
        begin_sample(sample_phase(s), false);
        Event in = rank_.copy(Stream{0}, dev, 0, host, 0, bytes);
        Event out = rank_.copy(Stream{1}, host3, 0, dev2, 0, bytes);
        in.wait();
        out.wait();
        end_sample();
      }
      // And with every core copying in host memory meanwhile: what the memory system serves CPU
      // work and DMA together, which neither alone reaches (the cores' copy is bound by the
      // cores, the DMA by PCIe). Real buffers only (not on the simulator).
      if (!host2->ptr || !host->ptr) continue;
      const int threads = hardware_threads();  // as host_copy_bandwidth's all-core copy
      for (int r = 0; r < opt_.repeat; ++r) {
        OpSample s;
        s.model = "link.mixed";
        s.x = {1.0, 4.0 * double(bytes)};  // the DMA's and the cores' copies, read + written each
        begin_sample(sample_phase(s), false);
        Event in = rank_.copy(Stream{0}, dev, 0, host, 0, bytes);
        Event out = rank_.copy(Stream{1}, host3, 0, dev2, 0, bytes);
        cpu::parallel_copy(host2->ptr, mixed_src(bytes), bytes, threads);
        in.wait();
        out.wait();
        end_sample();
      }
    }
  }

  // A link sample of `model` timed as an operator's (cold caches, the streams synchronized after
  // it): one warm-up run, then one per repeat. x = {1, bytes}, segment = the sample's parameter.
  void timed_link(const std::string& model, double segment, double bytes, const Op& op) {
    untimed();
    rank_.launch(Stream{0}, op).get();
    OpSample s;
    s.model = model;
    s.segment = segment;
    s.x = {1.0, bytes};
    for (int r = 0; r < opt_.repeat; ++r) {
      begin_sample(sample_phase(s));
      rank_.launch(Stream{0}, op).get();
      end_sample();
    }
  }

  // The operators of triton's join phase (a slice's gather, its partitioning into 2^12 and a
  // partitioned join), alone and two at once on streams 0 and 1, each over its own buffers, at
  // 2 Mi, 8 Mi and 32 Mi rows of 8+8 bytes: samples "link.overlap.<kind>.alone" and ".pair",
  // segment = one operator's input bytes, x = {1, input bytes of the operators run}. Their rates'
  // ratio is the share of the GPU one such operator takes (fit_overlap).
  void overlap() {
    const std::vector<uint64_t> sizes = opt_.quick ? std::vector<uint64_t>{uint64_t(1) << 16}
                                                   : std::vector<uint64_t>{uint64_t(1) << 21, uint64_t(1) << 23, uint64_t(1) << 25};
    const TupleFormat f{8, 8};
    const PartitionFn fn{PartitionFn::Radix, 12, 5, 0};
    for (uint64_t n : sizes) {
      data(n, f);
      Tuples in[2] = {r_, scratch_}, out[2], staged[2], parted[2];
      Buffer offsets[2];
      rank_.copy(Stream{0}, scratch_.keys, 0, r_.keys, 0, n * f.key_bytes);
      rank_.copy(Stream{0}, scratch_.vals, 0, r_.vals, 0, n * f.val_bytes);
      std::vector<CopyRange> gathers[2];
      Partitioned joined[2];
      for (int i = 0; i < 2; ++i) {
        out[i] = rank_.alloc_tuples(MemSpace::Device, n, f, "calibrate.overlap.out");
        staged[i] = rank_.alloc_tuples(MemSpace::Device, n, f, "calibrate.overlap.staged");
        parted[i] = rank_.alloc_tuples(MemSpace::Device, n, f, "calibrate.overlap.parted");
        offsets[i] = rank_.alloc(MemSpace::Device, (uint64_t(fn.fanout()) + 1) * 8, "calibrate.overlap.offsets");
        // A slice's runs as triton gathers them: 256 of them, in reverse order.
        const std::vector<uint64_t> b = chunk_bounds(n, 256);
        for (size_t c = 0; c + 1 < b.size(); ++c) {
          const uint64_t at = n - b[c + 1], rows = b[c + 1] - b[c];
          gathers[i].push_back({staged[i].keys, at * f.key_bytes, in[i].keys, b[c] * f.key_bytes, rows * f.key_bytes});
          gathers[i].push_back({staged[i].vals, at * f.val_bytes, in[i].vals, b[c] * f.val_bytes, rows * f.val_bytes});
        }
        PartitionOp p{in[i], {}, fn, parted[i]};
        p.offsets_out = offsets[i];
        joined[i] = Partitioned{parted[i], rank_.launch(Stream{0}, p).get().values, offsets[i]};
      }
      const double bytes = double(n) * f.tuple_bytes();
      auto partition = [&](Stream st, int i) { rank_.launch(st, PartitionOp{in[i], {}, fn, out[i]}); };
      auto join = [&](Stream st, int i) {
        rank_.launch(st, PartitionedJoinOp{joined[i], joined[i], no_output(), 0, OutputMode::CountOnly, TableKind::LinearProbing});
      };
      auto gather = [&](Stream st, int i) { rank_.copy_v(st, gathers[i]); };
      overlap_samples("partition", bytes, partition);
      overlap_samples("partitioned_join", 2 * bytes, join);
      overlap_samples("copy.device", bytes, gather);
      release();
    }
  }
  // One operator alone on stream 0, then two at once on streams 0 and 1 (`run` queues operator i
  // on a stream), each as a sample of opt.repeat runs timed until every stream is idle (the queuing
  // included, as a strategy's host thread queues both lanes).
  void overlap_samples(const std::string& kind, double bytes, const std::function<void(Stream, int)>& run) {
    untimed();
    run(Stream{0}, 0);
    run(Stream{1}, 1);
    rank_.sync_all();
    OpSample s;
    s.segment = bytes;
    for (int r = 0; r < opt_.repeat; ++r) {
      s.model = "link.overlap." + kind + ".alone";
      s.x = {1.0, bytes};
      begin_sample(sample_phase(s));
      run(Stream{0}, 0);
      rank_.sync_all();
      end_sample();
      s.model = "link.overlap." + kind + ".pair";
      s.x = {1.0, 2 * bytes};
      begin_sample(sample_phase(s));
      run(Stream{0}, 0);
      run(Stream{1}, 1);
      rank_.sync_all();
      end_sample();
    }
  }

  // The zero-copy link microbenchmark: a kernel reading, writing, or both at once, pinned host
  // memory in granules of kLinkGranules at random positions of a region much larger than the
  // GPU's TLB reach, and sequentially (segment 0). Samples "link.zero_copy.<access>", x = {1,
  // bytes each way}.
  void zero_copy() {
    untimed();
    const uint64_t region = opt_.quick ? uint64_t(64) << 20 : uint64_t(8) << 30;
    const uint64_t moved = opt_.quick ? uint64_t(16) << 20 : uint64_t(1) << 30;
    Buffer host = rank_.alloc(MemSpace::Pinned, region, "calibrate.zero_copy.host");
    Buffer dev = rank_.alloc(MemSpace::Device, 2 * moved, "calibrate.zero_copy.device");
    std::vector<uint32_t> granules(std::begin(kLinkGranules), std::end(kLinkGranules));
    granules.push_back(0);  // sequential
    for (LinkAccess access : {LinkAccess::Read, LinkAccess::Write, LinkAccess::Both})
      for (uint32_t g : granules)
        timed_link(std::string("link.zero_copy.") + to_string(access), g, double(moved),
                   link_access(host, dev, moved, g, access));
    writes_beside_copies(host, dev, moved, granules);
  }

  // `bytes` of accesses between `host` and `dev` in granules of g bytes at random positions, or
  // in order (g = 0).
  static LinkAccessOp link_access(const Buffer& host, const Buffer& dev, uint64_t bytes, uint32_t g, LinkAccess access) {
    LinkAccessOp op;
    op.host = host;
    op.device = dev;
    op.bytes = bytes;
    op.granule = g ? g : 4096;
    op.random = g != 0;
    op.access = access;
    return op;
  }

  // A kernel's writes to pinned memory beside host-to-device copies, by the writes' granule (and
  // in order: 0), two samples each: "link.zero_copy.write_beside_copy", the kernel writing
  // `moved` bytes while 16 MiB copies run back to back (at most 4 queued), timed to its end; and
  // "link.zero_copy.copy_beside_write", `moved` bytes of such copies while write kernels of a
  // sixteenth of that run back to back (2 queued), timed to the last copy's end. x = {1, bytes}.
  void writes_beside_copies(const Buffer& host, const Buffer& dev, uint64_t moved, const std::vector<uint32_t>& granules) {
    const uint64_t piece = std::min<uint64_t>(uint64_t(16) << 20, moved);
    const uint64_t pieces = moved / piece;
    Buffer copied = rank_.alloc(MemSpace::Device, 4 * piece, "calibrate.zero_copy.copied");
    auto copy = [&](uint64_t i) {
      return rank_.copy(Stream{1}, copied, (i % 4) * piece, host, (i * piece) % (host->bytes - piece + 1), piece);
    };
    for (uint32_t g : granules) {
      const LinkAccessOp op = link_access(host, dev, moved, g, LinkAccess::Write);
      const LinkAccessOp part = link_access(host, dev, std::max<uint64_t>(moved / 16, 1), g, LinkAccess::Write);
      untimed();
      rank_.launch(Stream{0}, op).get();
      for (int r = 0; r < opt_.repeat; ++r) {
        OpSample s;
        s.model = "link.zero_copy.write_beside_copy";
        s.segment = g;
        s.x = {1.0, double(moved)};
        begin_sample(sample_phase(s), false);
        std::deque<Event> queued;
        uint64_t next = 0;
        for (; next < 2; ++next) queued.push_back(copy(next));
        const Launched writes = rank_.launch(Stream{0}, op);
        while (!writes.done.done()) {
          while (!queued.empty() && queued.front().done()) queued.pop_front();
          if (queued.size() < 4) queued.push_back(copy(next++));
          else rank_.poll_pause();
        }
        end_sample();
        s.model = "link.zero_copy.copy_beside_write";
        begin_sample(sample_phase(s), false);
        std::deque<Launched> running;
        running.push_back(rank_.launch(Stream{0}, part));
        running.push_back(rank_.launch(Stream{0}, part));
        Event last;
        for (uint64_t i = 0; i < pieces; ++i) last = copy(i);
        while (!last.done()) {
          if (running.front().done.done()) {
            running.pop_front();
            running.push_back(rank_.launch(Stream{0}, part));
          } else {
            rank_.poll_pause();
          }
        }
        end_sample();
      }
    }
  }

  // triton's first pass by fanout (2 .. 4096) into device memory (a staged chunk's pieces, as
  // its first pass cuts them) and into pinned host memory (input in device memory: only the
  // output crosses the link), both partitioners; and its chunked prefix sum over pinned input on
  // the GPU and on the host's CPUs. 16-byte tuples.
  // Samples "link.chunk_partition.<partitioner>.<device|host>" and "link.prefix_sum.<gpu|cpu>",
  // segment = fanout, x = {1, bytes of the input read}.
  void chunked_passes() {
    const TupleFormat fmt{8, 8};
    const uint64_t n = opt_.quick ? uint64_t(1) << 18 : uint64_t(1) << 26;
    const uint32_t chunks = 64;
    data(n, fmt);
    Tuples pinned = rank_.alloc_tuples(MemSpace::Pinned, n, fmt, "calibrate.chunked.pinned");
    rank_.copy(Stream{0}, pinned.keys, 0, r_.keys, 0, n * fmt.key_bytes).wait();
    rank_.copy(Stream{0}, pinned.vals, 0, r_.vals, 0, n * fmt.val_bytes).wait();
    pinned.rows = n;
    Tuples spill = rank_.alloc_tuples(MemSpace::Pinned, n, fmt, "calibrate.chunked.spill");
    const std::vector<uint64_t> bounds = chunk_bounds(n, chunks);
    const uint32_t most_bits = 12;
    const std::vector<uint64_t> pieces = piece_bounds(n, kDevicePieceRows);
    const Buffer layout =
        rank_.alloc(MemSpace::Device, (pieces.size() - 1) * (uint64_t(1) << most_bits) * 8, "calibrate.chunked.layout");
    std::vector<uint32_t> all_bits;
    for (uint32_t b = 1; b <= most_bits; ++b)
      if (!opt_.quick || b % 4 == 0 || b == 1) all_bits.push_back(b);
    for (uint32_t bits : all_bits) {
      const PartitionFn fn{PartitionFn::Radix, bits, 0, 0};
      for (auto [placement, name] : {std::pair{HistogramOp::Placement::Device, "gpu"}, {HistogramOp::Placement::Host, "cpu"}}) {
        HistogramOp h{pinned, fn, bounds};
        h.placement = placement;
        timed_link(std::string("link.prefix_sum.") + name, fn.fanout(), double(n) * fmt.key_bytes, h);
      }
      untimed();
      const std::vector<uint64_t> hist = rank_.launch(Stream{0}, HistogramOp{r_, fn, bounds}).get().values;
      const ChunkLayout host_layout = chunked_layout(hist, fn.fanout(), 0);
      // Into device memory as triton's first pass writes a staged chunk's region: in pieces of
      // kDevicePieceRows, partition-major over them, the offsets scanned on the device.
      HistogramOp counted{r_, fn, pieces};
      counted.counts_out = layout;
      rank_.launch(Stream{0}, counted).get();
      rank_.launch(Stream{0}, ScanOp{layout, layout, (pieces.size() - 1) * fn.fanout()}).get();
      for (Partitioner kind : {Partitioner::Shared, Partitioner::Hierarchical})
        for (const bool to_host : {false, true}) {
          ChunkPartitionOp cp;
          const std::vector<uint64_t>& cut = to_host ? bounds : pieces;
          for (size_t c = 0; c + 1 < cut.size(); ++c) cp.chunks.push_back(r_.slice(cut[c], cut[c + 1] - cut[c]));
          cp.fn = fn;
          if (to_host) {
            cp.offsets = host_layout.offsets;
            cp.spill = spill;
          } else {
            cp.offsets_on_device = layout;
            cp.cached_chunks = uint32_t(cp.chunks.size());
            cp.cache = scratch_;
          }
          cp.partitioner = kind;
          timed_link(std::string("link.chunk_partition.") + to_string(kind) + (to_host ? ".host" : ".device"),
                     fn.fanout(), double(n) * fmt.tuple_bytes(), cp);
        }
    }
    release();
  }

  // A host buffer of at least `bytes` written once (no page faults in the timed copy), the
  // source of the cores' copy in the mixed samples.
  const void* mixed_src(uint64_t bytes) {
    if (!mixed_src_ || mixed_src_->bytes < bytes) {
      mixed_src_ = rank_.alloc(MemSpace::Host, bytes, "calibrate.mixed");
      cpu::parallel_fill(mixed_src_->ptr, 1, bytes, hardware_threads());
    }
    return mixed_src_->ptr;
  }

  Rank& rank_;
  const CalibrationOptions& opt_;
  Buffer mixed_src_;
  std::vector<uint64_t> sizes_;
  double cache_bytes_ = 0;
  Buffer flush_src_, flush_dst_;  // the eviction copy (none: --warm)
  TupleFormat fmt_;
  RelationSpec r_spec_, s_spec_;
  Tuples r_, s_, rs_, scratch_;
  GenerateOp gen_r_;
  KeyAccess access_;
};

std::vector<uint64_t> size_range(const CalibrationOptions& opt) {
  const bool gpu = opt.backend != "cpu";
  uint64_t lo = opt.min_rows ? opt.min_rows : gpu ? (1ULL << 20) : (1ULL << 16);
  uint64_t hi = opt.max_rows ? opt.max_rows : gpu ? (opt.quick ? 1ULL << 24 : 1ULL << 28) : (opt.quick ? 1ULL << 20 : 1ULL << 23);
  if (lo > hi) throw InputError("calibrate: --min-rows " + std::to_string(lo) + " is above --max-rows " + std::to_string(hi));
  std::vector<uint64_t> v;
  const int step = opt.quick ? 2 : 1;
  for (uint64_t n = lo; n <= hi; n <<= step) v.push_back(n);
  if (v.back() != hi) v.push_back(hi);
  if (v.size() < 2)
    throw InputError("calibrate: --min-rows " + std::to_string(lo) + " and --max-rows " + std::to_string(hi) +
                     " give one size; the fits need at least two (a constant and a slope)");
  return v;
}

}  // namespace

std::string prepare_phase(int ops) { return "prepare " + std::to_string(ops); }

// The timed runs of one rank: each "cal" phase and the "sync" phase that follows it. The device's
// time of an operator sample is that of the first operator span after the sample's eviction copy
// (a Copy of `evict_bytes`) and after the operators of a "prepare K" phase right before the
// sample: the GPU's event clock drifts from the host's by tens of microseconds a second, so spans
// are matched by order, not by time. Samples without an eviction (links, allocations, --warm)
// keep 0.
std::vector<CalibrationRun> runs_of(const std::vector<PhaseRecord>& phases, const std::vector<TraceSpan>& all,
                                    uint64_t evict_bytes) {
  std::vector<const TraceSpan*> spans;  // operators and copies, not their per-kernel tracks
  for (auto& t : all)
    if (t.track.size() < 8 || t.track.compare(t.track.size() - 8, 8, " kernels") != 0) spans.push_back(&t);
  std::sort(spans.begin(), spans.end(), [](const TraceSpan* a, const TraceSpan* b) { return a->begin < b->begin; });
  auto is_evict = [&](const TraceSpan* t) { return t->params.kind == OpKind::Copy && t->params.bytes == evict_bytes; };
  size_t next = 0;
  std::vector<CalibrationRun> runs;
  for (size_t i = 0; i < phases.size(); ++i) {
    const PhaseRecord& p = phases[i];
    if (p.name.rfind("cal ", 0) != 0) continue;
    CalibrationRun r;
    r.phase = p.name;
    r.seconds = p.end - p.begin;
    if (i + 1 < phases.size() && phases[i + 1].name == kSyncPhase)
      r.sync_seconds = std::max(0.0, phases[i + 1].end - phases[i + 1].begin);
    const bool evicted = evict_bytes > 0 && p.name.rfind("cal link.", 0) != 0 && p.name.rfind("cal alloc.", 0) != 0 &&
                         p.name.rfind("cal free.", 0) != 0;
    size_t before = 0;  // operators the sample's prepare phase ran after the eviction
    if (i > 0 && phases[i - 1].name.rfind("prepare ", 0) == 0) before = std::stoul(phases[i - 1].name.substr(8));
    if (evicted) {
      while (next < spans.size() && !is_evict(spans[next])) ++next;
      const size_t at = next + 1 + before;
      if (at < spans.size()) {
        r.device_seconds = std::max(0.0, spans[at]->end - spans[at]->begin);
        next = at + 1;
      }
    }
    runs.push_back(std::move(r));
  }
  return runs;
}

namespace {

double cache_bytes(const Profile& base, const std::string& backend) {
  if (backend != "cpu" && base.gpu.l2_bytes > 0) return base.gpu.l2_bytes;
  long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 > 0) return double(l3);
  return base.gpu.l2_bytes > 0 ? base.gpu.l2_bytes : 32e6;
}

// Breaks of the models whose segment variable is a parameter rather than a size: one piece per
// measured fanout (a pass's cost per byte changes with its fanout: write-combine buffers, shared
// memory counters), one per key width. Cache edges in sizes are found from the samples
// (fit_model's automatic break), and the cache levels' sizes are fitted.
std::vector<double> breaks_for(const ModelSpec& spec, const std::vector<OpSample>& samples) {
  if (spec.segment == "fanout") {
    std::vector<double> f;
    for (auto& s : samples) f.push_back(s.segment);
    std::sort(f.begin(), f.end());
    f.erase(std::unique(f.begin(), f.end()), f.end());
    if (!f.empty()) f.erase(f.begin());
    return f;
  }
  if (spec.segment == "key_bytes") return {8};
  return {};
}

std::string pct(double x) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(1) << 100 * x << "%";
  return o.str();
}

std::string today() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

// The middle value (the upper of the two middle ones), 0 for none.
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

void add_runs(Calibration& c, const std::vector<CalibrationRun>& runs) {
  std::map<std::string, std::vector<double>> times;
  std::vector<std::string> order;
  for (auto& r : runs) {
    if (!times.count(r.phase)) order.push_back(r.phase);
    // An operator's phase ends with a synchronization of every stream; a transfer or an
    // allocation is waited for on its own (links keep latency + bytes / bandwidth).
    const bool op = r.phase.rfind("cal link.", 0) != 0 && r.phase.rfind("cal alloc.", 0) != 0 &&
                    r.phase.rfind("cal free.", 0) != 0;
    times[r.phase].push_back(r.seconds + (op ? r.sync_seconds : 0.0));
  }
  for (auto& name : order) {
    OpSample s;
    PhaseRecord p{name, 0, 0};
    if (!parse_sample_phase(p, s)) continue;
    s.seconds = median_of(times[name]);
    if (s.seconds <= 0) continue;
    (s.model.rfind("link.", 0) == 0 ? c.links[s.model.substr(5)] : c.ops[s.model]).push_back(s);
  }
  c.runs.insert(c.runs.end(), runs.begin(), runs.end());
}

void write_samples(const Calibration& c, std::ostream& out) {
  out << "# joinlab calibrate samples: seconds sync_seconds device_seconds phase (models/calibrate.hpp)\n";
  out << "# machine: " << c.machine << "\n# protocol: " << c.protocol << "\n";
  out << std::setprecision(17) << "# host_mem_bw: " << c.host_mem_bw << "\n";
  if (c.cpu_sockets > 0) out << "# cpu_sockets: " << c.cpu_sockets << "\n# cpu_cores: " << c.cpu_cores << "\n";
  if (c.cpu_clock_ghz > 0) out << "# cpu_clock_ghz: " << c.cpu_clock_ghz << "\n";
  if (c.cpu_threads_all > 0) out << "# cpu_threads_all: " << c.cpu_threads_all << "\n";
  for (auto& [link, why] : c.skipped) out << "# skipped." << link << ": " << why << "\n";
  for (auto& r : c.runs) out << r.seconds << " " << r.sync_seconds << " " << r.device_seconds << " " << r.phase << "\n";
}

Calibration read_samples(std::istream& in, const std::string& file) {
  Calibration c;
  std::vector<CalibrationRun> runs;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    const std::string where = file + ":" + std::to_string(n) + ": ";
    if (line[0] == '#') {
      const size_t colon = line.find(": ");
      if (colon == std::string::npos) continue;  // a comment
      const std::string key = line.substr(2, colon - 2), value = line.substr(colon + 2);
      if (key == "machine") c.machine = value;
      else if (key == "protocol") c.protocol = value;
      else if (key == "host_mem_bw") {
        char* end = nullptr;
        c.host_mem_bw = std::strtod(value.c_str(), &end);
        if (end == value.c_str() || *end) throw InputError(where + "host_mem_bw '" + value + "' is not a number");
      }
      else if (key == "cpu_clock_ghz") c.cpu_clock_ghz = std::atof(value.c_str());
      else if (key == "cpu_sockets" || key == "cpu_cores" || key == "cpu_threads_all") {
        char* end = nullptr;
        const long v = std::strtol(value.c_str(), &end, 10);
        if (end == value.c_str() || *end || v < 1) throw InputError(where + key + " '" + value + "' is not a count");
        (key == "cpu_sockets" ? c.cpu_sockets : key == "cpu_cores" ? c.cpu_cores : c.cpu_threads_all) = int(v);
      }
      else if (key.rfind("skipped.", 0) == 0) c.skipped[key.substr(8)] = value;
      continue;
    }
    std::istringstream f(line);
    CalibrationRun r;
    if (!(f >> r.seconds >> r.sync_seconds >> r.device_seconds) || !(r.seconds >= 0) || !(r.sync_seconds >= 0))
      throw InputError(where + "expected 'seconds sync_seconds device_seconds phase', got '" + line + "'");
    std::getline(f >> std::ws, r.phase);
    OpSample probe;
    if (!parse_sample_phase(PhaseRecord{r.phase, 0, 0}, probe))
      throw InputError(where + "'" + r.phase + "' is not a calibration sample (cal MODEL SEGMENT FEATURES...)");
    runs.push_back(std::move(r));
  }
  if (runs.empty()) throw InputError(file + ": no calibration runs in it");
  add_runs(c, runs);
  return c;
}

const char* const kSingleCore = "cpu1.";
const char* const kAllCores = "cpuall.";
const char* const kTeamCores = "cputeam";

namespace {

// The host's sockets (distinct physical packages of its online CPUs; 1 where sysfs says nothing).
int host_sockets() {
  std::set<std::string> packages;
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  for (long i = 0; i < n; ++i) {
    std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(i) + "/topology/physical_package_id");
    std::string id;
    if (f >> id) packages.insert(id);
  }
  return std::max<int>(1, int(packages.size()));
}

// Copies in host memory by how many threads copy at once: n = 1, 2, 4, .. up to the host's
// threads, as teams of up to 4 threads (the cpu backend's parallel_copy of a 4 MiB put, one thread
// per MiB) in n / 4 concurrent streams, each over its own resident buffers in 4 MiB pieces.
// Link samples "copy_threads", segment = n, x = {1, bytes copied by all of them}.
void measure_copy_threads(Calibration& c, const CalibrationOptions& opt, int all) {
  constexpr uint64_t kPiece = uint64_t(4) << 20;
  std::vector<CalibrationRun> runs;
  for (const int n : kThreadCounts) {
    if (n > all) break;
    const int team = std::min(n, 4), streams = n / team;
    // Far above the last-level cache in all (a GiB), at least 16 pieces per stream.
    const uint64_t bytes = opt.quick ? 4 * kPiece
                                     : std::max<uint64_t>(16 * kPiece, ((uint64_t(1) << 30) / uint64_t(streams)) / kPiece * kPiece);
    if (2 * bytes * uint64_t(streams) > available_memory() / 4) break;
    std::vector<std::unique_ptr<char, void (*)(void*)>> bufs;
    for (int i = 0; i < 2 * streams; ++i)
      bufs.emplace_back(static_cast<char*>(cpu::host_alloc_resident(bytes, all)), cpu::host_free);
    OpSample s;
    s.model = "link.copy_threads";
    s.segment = n;
    s.x = {1.0, double(bytes) * streams};
    for (int r = 0; r < opt.repeat + 1; ++r) {  // the first run warms up
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> ts;
      for (int i = 0; i < streams; ++i)
        ts.emplace_back([&, i] {
          for (uint64_t o = 0; o < bytes; o += kPiece)
            cpu::parallel_copy(bufs[size_t(2 * i + 1)].get() + o, bufs[size_t(2 * i)].get() + o, kPiece, team);
        });
      for (auto& t : ts) t.join();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) runs.push_back({sample_phase(s), seconds, 0, 0});
    }
  }
  add_runs(c, runs);
}

// The multiway merge by its runs: k = 2 .. 16 sorted runs of random 8-byte keys (their rows
// interleave about every row, as a relation's sorted chunksets do) and 8-byte values, as many rows
// in all at every k, merged by every core (the cpu kernel mgsmj's merge phase runs). Link samples
// "merge_runs", segment = k, x = {1, bytes read + written}.
void measure_merge_runs(Calibration& c, const CalibrationOptions& opt, int all) {
  const uint64_t rows = opt.quick ? uint64_t(1) << 18
                                  : std::min<uint64_t>(uint64_t(1) << 25, available_memory() / 8 / 32);
  std::vector<uint64_t> keys(rows), vals(rows), out_keys(rows), out_vals(rows);
  std::vector<CalibrationRun> runs;
  for (const int k : kMergeRunCounts) {
    const std::vector<cpu::ChunkIn<uint64_t, uint64_t>> in = cpu::random_sorted_runs(keys.data(), vals.data(), rows, k, all);
    OpSample s;
    s.model = "link.merge_runs";
    s.segment = k;
    s.x = {1.0, 32.0 * double(rows)};
    for (int r = 0; r < opt.repeat + 1; ++r) {  // the first run warms up (and faults the output in)
      const auto t0 = std::chrono::steady_clock::now();
      cpu::multiway_merge(in, out_keys.data(), out_vals.data(), all);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) runs.push_back({sample_phase(s), seconds, 0, 0});
    }
  }
  add_runs(c, runs);
}

// Every operator once more on the cpu backend (the host's CPUs, whatever backend is calibrated)
// at one size, with --quick's parameters and warm caches (inputs far above the caches at that
// size): first on one core, kept as models "cpu1.<model>" (the per-core rates of [cpu],
// cpu_rates), then on every core at once with as many rows per thread, kept as "cpuall.<model>"
// (the per-core rates under full load, loaded_cpu_rates: hyper-threads share a core, cores share
// the caches and the memory system), then on every core in 2 and 4 teams at once, kept as
// "cputeam<threads>.<model>". The roof is host_mem_bw (a parallel copy over every core).
void measure_cpu(Calibration& c, const CalibrationOptions& opt, uint64_t rows) {
  auto cpu = make_backend("cpu");
  BackendConfig cfg;
  cfg.shape = {1, 1};
  CalibrationOptions one = opt;
  one.backend = "cpu";
  one.quick = true;  // the parameters of --quick (skews 0 and 1): a rate per operator kind, not a model
  one.only = {"operators", "links"};  // the operators and the host copy, also under --only cpu
  const int all = hardware_threads();
  // Each operator keeps a few arrays of the input's size: an eighth of the free memory at most.
  const uint64_t rows_all = std::max<uint64_t>(
      rows, std::min<uint64_t>({rows * uint64_t(all), uint64_t(1) << 26, available_memory() / 8 / 128}));
  std::mutex mu;
  auto pass = [&](int teams, int threads, uint64_t pass_rows, const std::string& prefix, bool widest_only) {
    cfg.shape = {1, teams};
    cfg.threads_per_rank = threads;
    one.widest_tuples_only = widest_only;
    std::cerr << "calibrate: CPU operators on " << teams * threads << " core(s)"
              << (teams > 1 ? " in " + std::to_string(teams) + " teams of " + std::to_string(threads) : std::string())
              << ", " << pass_rows << " rows" << (teams > 1 ? " each" : "") << "\n";
    cpu->run(cfg, [&](Rank& r) { Bench(r, one, {pass_rows}, 0).run_operators(); },
             [&](Rank& r) {
               std::vector<CalibrationRun> runs = runs_of(r.phases(), r.trace().spans(), 0);
               for (auto& run : runs) run.phase.insert(4, prefix);  // "cal X" -> "cal cpu1.X"
               std::lock_guard<std::mutex> g(mu);
               add_runs(c, runs);
             });
  };
  pass(1, 1, rows, kSingleCore, false);
  if (all >= 2) pass(1, all, rows_all, kAllCores, false);
  // Every core busy in 2 and 4 teams (the ranks of a multi-GPU host each run their operators on
  // their share of its cores), as many rows per thread, the widest tuples only (the rates are
  // taken from the largest input): "cputeam<threads>.<model>", team_loaded_cpu_rates.
  for (int teams = 2; teams <= 4 && all / teams >= 2; teams *= 2)
    pass(teams, all / teams, rows_all / uint64_t(teams), kTeamCores + std::to_string(all / teams) + ".", true);
  measure_copy_threads(c, opt, all);
  measure_merge_runs(c, opt, all);
  c.cpu_threads_all = all;
  c.cpu_sockets = host_sockets();
  c.cpu_cores = int(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN) / c.cpu_sockets));
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("cpu MHz", 0) == 0 && line.find(':') != std::string::npos) {
      c.cpu_clock_ghz = std::atof(line.c_str() + line.find(':') + 1) / 1000;
      break;
    }
}

// Per-core rate of each [cpu] kind from the samples of models `prefix`<model>, run on `threads`
// threads: the median over the samples of the largest input, bytes per second per thread, each
// sample's time net of `overhead` (a parallel operator's own cost, CpuSpec::op_overhead).
std::map<std::string, std::pair<double, std::string>> rates_of(const Calibration& c, const std::string& prefix,
                                                               int threads, const std::string& what,
                                                               double overhead = 0) {
  // The [cpu] kind of each model the CPU passes measure.
  auto kind_of = [](const std::string& model) -> std::string {
    const std::string base = model.substr(0, model.find('.'));
    if (model == "link.host_copy") return "copy";
    if (base == "partitioned_join") return "join";
    if (base == "merge_join") return "merge";
    for (const std::string& k : cpu_op_kinds())
      if (k == base) return k;
    return "";
  };
  // Each kind's rate comes from its samples of the largest input (the pass of the widest tuples
  // at the largest size): the joins' operators run on data far beyond the caches, and a core's
  // cost is mostly per row, so the bytes per second of narrower tuples would understate it.
  // (kind, model): (input bytes, rate)
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<double, double>>> samples_of;
  for (auto& [model, samples] : c.ops) {
    if (model.rfind(prefix, 0) != 0) continue;
    const std::string m = model.substr(prefix.size()), kind = kind_of(m);
    if (kind.empty()) continue;
    for (OpSample s : samples) {
      s.model = m;
      const double bytes = m == "link.host_copy" ? s.x.at(1) : sample_bytes(s);
      const double seconds = std::max(s.seconds - (threads > 1 ? overhead : 0.0), s.seconds / 2);
      if (bytes > 0 && s.seconds > 0) samples_of[{kind, m}].push_back({s.x.at(1), bytes / seconds / threads});
    }
  }
  std::map<std::string, std::vector<double>> rates;
  for (auto& [key, v] : samples_of) {
    double largest = 0;
    for (auto& [in, rate] : v) largest = std::max(largest, in);
    for (auto& [in, rate] : v)
      if (in >= largest) rates[key.first].push_back(rate);
  }
  std::map<std::string, std::pair<double, std::string>> out;
  for (auto& [kind, r] : rates) {
    out[kind] = {median_of(r), "median of " + std::to_string(r.size()) + " " + what +
                                      " samples of the largest input (bytes of the operator's features / seconds" +
                                      (threads > 1 ? " / " + std::to_string(threads) + " threads" : "") +
                                      "), measured " + today()};
  }
  // gpj's pack partitions a batch straight into its chunk images: one partition pass.
  if (!out.count("pack") && out.count("partition"))
    out["pack"] = {out["partition"].first, "the partition's rate (a pack with partition_by is one partition pass into "
                                           "the chunk images; not measured apart), measured " + today()};
  return out;
}

}  // namespace

std::map<std::string, std::pair<double, std::string>> cpu_rates(const Calibration& c) {
  return rates_of(c, kSingleCore, 1, "single-core");
}

std::map<std::string, std::pair<double, std::string>> loaded_cpu_rates(const Calibration& c) {
  if (c.cpu_threads_all < 2) return {};
  return rates_of(c, kAllCores, c.cpu_threads_all, "all-core (" + std::to_string(c.cpu_threads_all) + " threads)",
                  cpu_op_overhead(c).seconds);
}

CpuOpOverhead cpu_op_overhead(const Calibration& c) {
  const std::string batched = "op_overhead.batched", whole = "op_overhead.whole";
  CpuOpOverhead out;
  std::string teams;
  for (auto& [model, samples] : c.ops) {
    const size_t dot = model.find('.');
    if (model.rfind(kTeamCores, 0) != 0 || dot == std::string::npos || model.substr(dot + 1) != batched) continue;
    const auto one = c.ops.find(model.substr(0, dot + 1) + whole);
    if (one == c.ops.end() || samples.empty()) continue;
    // The largest input both were timed at.
    double bytes = 0;
    for (const OpSample& s : samples)
      for (const OpSample& w : one->second)
        if (s.x.size() > 1 && w.x.size() > 1 && s.x[1] == w.x[1]) bytes = std::max(bytes, s.x[1]);
    if (bytes <= 0) continue;
    // Operators -> times, then the median of the slopes between every two operator counts'
    // median times (Theil-Sen: one noisy count moves it little).
    std::map<double, std::vector<double>> times;
    for (const OpSample& w : one->second)
      if (w.x.size() > 1 && w.x[1] == bytes) times[1].push_back(w.seconds);
    for (const OpSample& s : samples)
      if (s.x.size() > 1 && s.x[1] == bytes && s.segment >= 2) times[s.segment].push_back(s.seconds);
    std::vector<std::pair<double, double>> medians;
    for (auto& [k, t] : times) medians.push_back({k, median_of(t)});
    std::vector<double> slopes;
    for (size_t i = 0; i < medians.size(); ++i)
      for (size_t j = i + 1; j < medians.size(); ++j)
        slopes.push_back((medians[j].second - medians[i].second) / (medians[j].first - medians[i].first));
    if (slopes.empty()) continue;
    const double seconds = std::max(0.0, median_of(slopes));
    const std::string threads = model.substr(std::strlen(kTeamCores), dot - std::strlen(kTeamCores));
    out.by_team[std::atoi(threads.c_str())] = seconds;
    std::string counts;
    for (auto& [k, m] : medians) counts += (counts.empty() ? "" : "/") + std::to_string(int(k));
    out.operators = counts;
    teams += (teams.empty() ? "" : ", ") + threads + " threads " + std::to_string(seconds * 1e3).substr(0, 5) + " ms";
  }
  if (out.by_team.empty()) return out;
  std::vector<double> per_team;
  for (auto [team, seconds] : out.by_team) per_team.push_back(seconds);
  out.seconds = median_of(per_team);
  out.how = "median over the team sizes (" + teams + ") of the slope of the median time of an input counted in " +
            out.operators + " histograms (median of the pairwise slopes), every core busy, measured " + today();
  return out;
}

std::map<int, std::map<std::string, std::pair<double, std::string>>> team_loaded_cpu_rates(const Calibration& c) {
  std::set<int> teams;  // the team sizes the samples hold ("cputeam<threads>.<model>")
  for (auto& [model, samples] : c.ops)
    if (model.rfind(kTeamCores, 0) == 0) teams.insert(std::atoi(model.c_str() + std::strlen(kTeamCores)));
  std::map<int, std::map<std::string, std::pair<double, std::string>>> out;
  const CpuOpOverhead overhead = cpu_op_overhead(c);
  for (const int t : teams)
    if (t >= 1 && c.cpu_threads_all > t)
      out[t] = rates_of(c, kTeamCores + std::to_string(t) + ".", t,
                        "all-core (" + std::to_string(c.cpu_threads_all / t) + " teams of " + std::to_string(t) +
                            " threads at once)",
                        overhead.by_team.count(t) ? overhead.by_team.at(t) : overhead.seconds);
  return out;
}

std::map<std::string, std::pair<MsgCost, std::string>> msg_costs(const Calibration& c, const LinkSpec& path) {
  std::map<std::string, std::pair<MsgCost, std::string>> out;
  for (auto& [name, samples] : c.links) {
    if (name.rfind("msg.", 0) != 0 || samples.size() < 2) continue;
    std::vector<OpSample> s = samples;
    for (auto& x : s) x.model = name;
    FitReport rep;
    const PiecewiseModel fit = fit_piecewise(s, {}, &rep);
    const std::vector<double>& coef = fit.pieces().front().coef;
    if (coef.size() < 2) continue;
    MsgCost m;
    m.seconds = std::max(0.0, coef[0] - path.latency);
    m.per_byte = std::max(0.0, coef[1] - (path.bw > 0 ? 1.0 / path.bw : 0.0));
    std::ostringstream how;
    how << std::setprecision(3) << "fitted " << today() << " from " << rep.samples << " one-way messages of "
        << uint64_t(s.front().x[1]) << ".." << uint64_t(s.back().x[1]) << " bytes between 2 ranks on one host ("
        << coef[0] * 1e6 << " us + bytes / " << (coef[1] > 0 ? 1e-9 / coef[1] : 0.0) << " GB/s, rms error "
        << pct(rep.rms_rel_error) << "), less the peer link's " << path.latency * 1e6 << " us and 1 / "
        << path.bw / 1e9 << " GB/s";
    out[name.substr(4)] = {m, how.str()};
  }
  return out;
}

namespace {

// The median rate of each segment of the link samples `name` (bytes of x[1] per second).
std::map<double, double> median_rates(const Calibration& c, const std::string& name) {
  std::map<double, double> rates;
  auto it = c.links.find(name);
  if (it == c.links.end()) return rates;
  std::map<double, std::vector<double>> by;
  for (const OpSample& s : it->second)
    if (s.seconds > 0 && s.x.size() > 1) by[s.segment].push_back(s.x[1] / s.seconds);
  for (auto& [segment, v] : by) rates[segment] = median_of(v);
  return rates;
}

// The link report's samples: the zero-copy accesses, then the chunked passes.
const char* const kReportedLinks[] = {"zero_copy.", "chunk_partition.", "prefix_sum.", "copy_threads", "merge_runs",
                                      "overlap."};

}  // namespace

void fit_zero_copy(const Calibration& c, Profile& p) {
  struct Direction {
    const char* access;
    std::vector<std::pair<ZeroCopyRates*, std::string>> into;  // the rates and their keys' prefix
    const char* what;
  };
  const Direction directions[] = {
      {"read", {{&p.h2d.zero_copy, "link.h2d.read_"}}, "a kernel's zero-copy reads of"},
      {"write", {{&p.d2h.zero_copy, "link.d2h.write_"}}, "a kernel's zero-copy writes to"},
      {"both", {{&p.h2d.zero_copy_both, "link.h2d.read_both_"}, {&p.d2h.zero_copy_both, "link.d2h.write_both_"}},
       "a kernel's zero-copy reads of and writes to (both at once, each way:)"},
      {"write_beside_copy", {{&p.d2h.beside_copy, "link.d2h.write_beside_copy_"}},
       "a kernel's zero-copy writes, while host-to-device copies run, to"},
      {"copy_beside_write", {{&p.h2d.beside_copy, "link.h2d.copy_beside_write_"}},
       "host-to-device copies while a kernel's zero-copy writes go to"}};
  for (const Direction& d : directions) {
    const std::map<double, double> rates = median_rates(c, std::string("zero_copy.") + d.access);
    if (rates.empty()) continue;
    for (auto& [rates_of, prefix] : d.into) {
      *rates_of = ZeroCopyRates{};
      for (auto [segment, rate] : rates) {
        const bool seq = segment == 0;
        const std::string key = prefix + (seq ? std::string("seq") : std::to_string(uint64_t(segment))) + "_bw";
        (seq ? rates_of->sequential : rates_of->random[uint32_t(segment)]) = rate;
        p.notes[key] = "measured " + today() + " by joinlab calibrate: " + d.what +
                       " pinned host memory, " +
                       (seq ? std::string("in order") : std::to_string(uint64_t(segment)) + "-byte granules at random positions") +
                       " (median of its runs)";
      }
    }
  }
}

void fit_overlap(const Calibration& c, Profile& p) {
  for (const char* kind : kSharedOps) {
    const std::map<double, double> alone = median_rates(c, std::string("overlap.") + kind + ".alone");
    const std::map<double, double> pair = median_rates(c, std::string("overlap.") + kind + ".pair");
    for (auto [bytes, rate] : alone) {
      auto it = pair.find(bytes);
      if (it == pair.end() || it->second <= 0) continue;
      const uint64_t b = uint64_t(bytes);
      if (b == 0 || (b & (b - 1)) != 0) continue;  // the profile keys sizes by powers of two
      p.gpu.share[kind][b] = rate / it->second;
      p.notes[share_key(kind, b)] =
          "measured " + today() + " by joinlab calibrate: two " + kind + " operators of " + std::to_string(b) +
          " input bytes at once on two streams took this fraction of twice one's time alone (median rates of its runs)";
    }
  }
}

namespace {
// The median input rate per fanout of triton's `name` partitioner from device memory into host
// ("chunk_partition.<name>.host") or device memory (".device"): into `table` where measured, a
// note per key <key_prefix><fanout>_bw.
void fit_rates_by_fanout(const Calibration& c, Profile& p, const std::string& name, bool to_host,
                         std::map<uint32_t, double>& table, const std::string& key_prefix) {
  const std::map<double, double> rates = median_rates(c, "chunk_partition." + name + (to_host ? ".host" : ".device"));
  if (rates.empty()) return;
  table.clear();
  for (auto [fanout, rate] : rates) {
    table[uint32_t(fanout)] = rate;
    p.notes[key_prefix + std::to_string(uint64_t(fanout)) + "_bw"] =
        "measured " + today() + " by joinlab calibrate: triton's " + name + " partitioner from device memory into " +
        (to_host ? "pinned host" : "device") + " memory at fanout " + std::to_string(uint64_t(fanout)) +
        ", bytes of input per second (median of its runs)";
  }
}
}  // namespace

void fit_partitioner_rates(const Calibration& c, Profile& p) {
  fit_rates_by_fanout(c, p, "shared", false, p.gpu.chunk_partition_rate, "gpu.chunk_partition_");
  for (int kind = 0; kind < 2; ++kind) {  // the kinds in Partitioner's order
    const std::string name = kind ? "hierarchical" : "shared";
    fit_rates_by_fanout(c, p, name, true, p.d2h.partitioner_rate[kind], "link.d2h." + name + "_");
  }
}

std::vector<std::string> link_report(const Calibration& c) {
  std::vector<std::string> lines;
  for (const char* prefix : kReportedLinks)
    for (auto& [name, samples] : c.links) {
      if (name.rfind(prefix, 0) != 0) continue;
      const bool zero_copy = name.rfind("zero_copy.", 0) == 0;
      std::ostringstream line;
      const bool beside = name.find("_beside_") != std::string::npos;
      line << "calibrate: " << name
           << (beside                 ? ", GB/s by the writes' granule:"
               : zero_copy            ? ", GB/s each way by granule:"
               : name == "copy_threads" ? ", GB/s copied in all by threads copying at once:"
               : name == "merge_runs"   ? ", GB/s read and written by every core, by the runs merged:"
               : name.rfind("overlap.", 0) == 0 ? ", GB/s of input by one operator's input bytes:"
                                        : ", GB/s of input by fanout:")
           << std::fixed << std::setprecision(1);
      for (auto [segment, rate] : median_rates(c, name))
        line << " " << (zero_copy && segment == 0 ? std::string("seq") : std::to_string(uint64_t(segment))) << "="
             << rate / 1e9;
      lines.push_back(line.str());
    }
  return lines;
}

Calibration measure(const CalibrationOptions& opt) {
  register_builtin();
  auto backend = make_backend(opt.backend);
  Calibration c;
  c.host_mem_bw = host_copy_bandwidth();
  c.machine = host_cpu_model() + (gpu_model().empty() ? "" : ", " + gpu_model()) + ", backend " + opt.backend;
  const std::vector<uint64_t> sizes = size_range(opt);
  double evict = opt.cache_bytes;
  if (evict <= 0 && !opt.quick) {  // --quick (CI) leaves the caches warm: no eviction copies
    Profile base;
    if (!opt.base.empty()) base = load_profile(resolve_profile_path(opt.base, opt.profile_dir));
    evict = cache_bytes(base, opt.backend);
  }
  std::ostringstream how;
  if (opt.warm || evict <= 0)
    how << "warm: each run right after the previous one (caches as it left them)";
  else
    how << "cold: a device copy of " << uint64_t(2 * evict) << " bytes (twice the last-level cache) before each run";
  how << "; median of " << opt.repeat << " runs";
  c.protocol = how.str();
  std::mutex mu;
  auto collect = [&](Rank& r) {
    std::lock_guard<std::mutex> g(mu);
    add_runs(c, runs_of(r.phases(), r.trace().spans(), opt.warm ? 0 : uint64_t(2 * evict)));
    const auto& ph = r.phases();
    if (r.id() == 0 && !ph.empty())  // on the sim backend: the simulated time a device would take
      std::cerr << "calibrate: rank 0 ran " << std::fixed << std::setprecision(1) << ph.back().end - ph.front().begin
                << " s by its backend's clock\n";
  };
  BackendConfig cfg;
  cfg.shape = {1, 1};
  cfg.threads_per_rank = opt.threads;
  cfg.profile = opt.base;
  cfg.profile_dir = opt.profile_dir;
  std::cerr << "calibrate: operators on " << opt.backend << ", " << sizes.size() << " sizes from " << sizes.front()
            << " to " << sizes.back() << " rows, " << opt.repeat << " runs each; caches " << c.protocol << "\n";
  if (opt.runs("operators") || opt.runs("links") || opt.runs("overlap"))
    backend->run(cfg, [&](Rank& r) { Bench(r, opt, sizes, evict).run_operators(); }, collect);
  // The host's CPUs (not for the simulator: its CPU work is the profile's [cpu] already).
  // One core at the CPU calibration's sizes (a GPU's 2^28 rows would take an hour); --quick: CI's seconds.
  if (opt.backend != "sim" && opt.runs("cpu"))
    measure_cpu(c, opt, opt.cpu_rows ? opt.cpu_rows
                        : opt.quick  ? sizes[sizes.size() / 2]
                                     : std::min<uint64_t>(sizes.back(), 1 << 22));
  cfg.shape = {1, 2};
  if (opt.runs("peer")) try {
    std::cerr << "calibrate: peer link (2 ranks)\n";
    backend->run(cfg, [&](Rank& r) { Bench(r, opt, sizes).run_peer(); }, collect);
  } catch (const std::runtime_error& e) {
    // One GPU: no peer link to measure (the cuda backend refuses two ranks on one GPU with an
    // InputError, and a failed peer setup is a RuntimeError).
    if (opt.backend != "cuda" || dynamic_cast<const VerificationError*>(&e)) throw;
    c.skipped["p2p"] = std::string("one GPU visible: ") + e.what();
    std::cerr << "calibrate: peer link not measured (" << e.what() << ")\n";
  }
  // Messages over every transport of the backend that this build has (ranks as threads).
  const std::vector<std::string> transports =
      opt.backend == "cpu" ? std::vector<std::string>{"inproc", "ucx"} : std::vector<std::string>{"peer", "nccl", "ucx"};
  for (const std::string& t : opt.runs("messages") ? transports : std::vector<std::string>{}) {
    cfg.options["transport"] = t;
    std::cerr << "calibrate: messages over " << t << " (2 ranks)\n";
    try {
      backend->run(cfg, [&](Rank& r) { Bench(r, opt, sizes).run_messages(t); }, collect);
    } catch (const std::exception& e) {  // not in this build, or not on this machine
      if (dynamic_cast<const VerificationError*>(&e)) throw;
      c.skipped["msg." + t] = e.what();
      std::cerr << "calibrate: messages over " << t << " not measured (" << e.what() << ")\n";
    }
  }
  return c;
}

namespace {

// [cpu] from the single-core samples and the roof: the CPUs as the runs on this machine have them
// (a virtual machine's share of a host is what its runs use, and what validate compares).
// roof: host memory bytes read + written per second (fit_profile's, with what it is the largest
// of: `roof_why`).
void fit_cpu(const Calibration& c, const Profile& base, Profile& p, double roof, const std::string& roof_why) {
  const auto rates = cpu_rates(c);
  if (rates.empty()) return;
  for (auto& [kind, r] : rates) {
    p.cpu.rate[kind] = r.first;
    p.notes["cpu.rate." + kind] = r.second;
  }
  double slowest = rates.begin()->second.first;
  for (auto& [kind, r] : rates) slowest = std::min(slowest, r.first);
  for (auto& k : cpu_op_kinds())
    if (!p.cpu.rate.count(k)) {  // never measured: the slowest measured rate, said so
      p.cpu.rate[k] = slowest;
      p.notes["cpu.rate." + k] = "not measured: the slowest measured operator's rate";
    }
  // Under full load, where measured (kinds without it run at their single-core rate).
  for (auto& [kind, r] : loaded_cpu_rates(c)) {
    p.cpu.loaded[kind] = r.first;
    p.notes["cpu.loaded." + kind] = r.second;
  }
  if (const CpuOpOverhead o = cpu_op_overhead(c); o.seconds > 0) {
    p.cpu.op_overhead = o.seconds;
    p.notes["cpu.op_overhead"] = o.how;
    for (auto [team, seconds] : o.by_team) {
      p.cpu.team_op_overhead[team] = seconds;
      p.notes["cpu.op_overhead." + std::to_string(team)] =
          "its team's own (" + std::to_string(team) + " threads), as for cpu.op_overhead, measured " + today();
    }
  }
  for (auto& [team, rates] : team_loaded_cpu_rates(c))
    for (auto& [kind, r] : rates) {
      p.cpu.team_loaded[kind][team] = r.first;
      p.notes["cpu.loaded." + kind + "." + std::to_string(team)] = r.second;
    }
  for (auto [n, rate] : median_rates(c, "copy_threads")) {
    p.cpu.copy_rate[int(n)] = rate / n;
    p.notes["cpu.copy_rate." + std::to_string(int(n))] =
        "median of its runs: " + (n == 1 ? std::string("1 thread copying") : std::to_string(int(n)) + " threads copying at once") +
        " (teams of up to 4 in 4 MiB pieces), " +
        rate_text(rate) + " in all, bytes copied per second per thread, measured " + today();
  }
  const std::map<double, double> merge = median_rates(c, "merge_runs");
  if (merge.count(2))
    for (auto [k, rate] : merge) {
      p.cpu.merge_runs[int(k)] = merge.at(2) / rate;
      p.notes["cpu.merge_runs." + std::to_string(int(k))] =
          "measured " + today() + " by joinlab calibrate: the multiway merge of " + std::to_string(int(k)) +
          " sorted runs of random keys on every core, its time per byte against 2 runs' (" + rate_text(rate) +
          " read and written; medians of its runs)";
    }
  if (c.cpu_sockets == 0 || c.host_mem_bw <= 0) {  // a samples file without them: the base's, said so
    if (!base.cpu.present()) throw InputError("calibrate: single-core samples but no sockets, cores or roof measured");
    for (const char* k : {"cpu.sockets", "cpu.cores", "cpu.mem_bw", "cpu.clock_ghz"})
      p.notes[k] = "not in the samples: from profile " + base.name + (base.notes.count(k) ? ": " + base.notes.at(k) : "");
    return;
  }
  if (c.cpu_clock_ghz > 0) {
    p.cpu.clock_ghz = c.cpu_clock_ghz;
    p.notes["cpu.clock_ghz"] = "cpu MHz of this host's first CPU (/proc/cpuinfo), " + today();
  }
  p.cpu.sockets = c.cpu_sockets;
  p.cpu.cores = c.cpu_cores;
  // The roof carries the DMA too (the simulator routes PCIe copies through it), so it is at least
  // what those copies drew from host memory, as [host] mem_bw.
  p.cpu.mem_bw = roof / c.cpu_sockets;
  p.notes["cpu.sockets"] = "physical packages of this host's online CPUs (sysfs), " + today();
  p.notes["cpu.cores"] = "online CPUs of this host (sysconf) per socket, " + today();
  p.notes["cpu.mem_bw"] = roof_why + " over the sockets, measured " + today();
}

}  // namespace

Profile fit_profile(const Calibration& c, const Profile& base, const CalibrationOptions& opt) {
  Profile p = base;
  p.ops = OpModels{};
  p.name = opt.name;
  p.status = "calibrated " + today();
  p.description = "measured by joinlab calibrate on " + c.machine;
  p.source = "joinlab calibrate --backend " + opt.backend + (opt.quick ? " --quick" : "") +
             (opt.samples_in.empty() ? "" : " (fitted by --fit from its samples file)") +
             (c.protocol.empty() ? "" : "; caches " + c.protocol) +
             "; an operator's sample includes the synchronization of every stream after it (a transfer's or "
             "allocation's does not)" +
             (base.name.empty() ? "" : "; unmeasured figures from profile " + base.name) +
             "; gpj's streaming operators are not measured (the simulator costs pack_chunks as a host memory "
             "pass and the stream consumer with the checksum, build.chained and probe.chained models)";
  // No fitted cache level is larger than the last-level cache (the GPU's L2, the host's LLC).
  const double llc = cache_bytes(base, opt.backend);
  for (auto& spec : model_specs()) {
    auto it = c.ops.find(spec.name);
    if (it == c.ops.end() || it->second.empty()) {
      if (base.ops.has(spec.name)) {
        p.ops.set(spec.name, base.ops.get(spec.name));
        for (auto& piece : base.ops.get(spec.name).pieces()) {
          std::ostringstream k;
          k << std::setprecision(6) << "op." << spec.name << ".seg@" << piece.lower;
          p.notes[k.str()] = "not measured by this backend: from profile " + base.name;
        }
      }
      continue;
    }
    FitReport rep;
    const bool cache_edge = spec.segment == "table_bytes" || spec.segment == "source_bytes" ||
                            spec.segment == "partition_bytes";
    PiecewiseModel m = fit_model(spec, it->second, cache_edge, breaks_for(spec, it->second), &rep, llc);
    p.ops.set(spec.name, m);
    const std::string how = "fitted " + today() + " from " + std::to_string(rep.samples) + " samples (" +
                            std::to_string(it->second.size()) + " sizes x params), rms error " + pct(rep.rms_rel_error) +
                            ", max " + pct(rep.max_rel_error);
    for (auto& piece : m.pieces()) {
      std::ostringstream k;
      k << std::setprecision(6) << "op." << spec.name << ".seg@" << piece.lower;
      p.notes[k.str()] = how;
    }
    for (size_t c = 0; c < spec.caches.size() && c < m.caches().size(); ++c)
      p.notes["op." + spec.name + ".cache." + spec.caches[c]] =
          "fitted " + today() + " with the coefficients (the best of the sizes " +
          std::to_string(uint64_t(cache_candidates(spec.caches[c]).front())) + " x powers of sqrt(2) up to the " +
          std::to_string(uint64_t(llc)) + "-byte last-level cache)";
  }
  // Links: t = latency + bytes / bw, fitted the same way (one piece, features {1, bytes}).
  auto link_fit = [&](const char* name, LinkSpec& out, const std::string& key) {
    auto it = c.links.find(name);
    if (it == c.links.end() || it->second.size() < 2) {
      auto why = c.skipped.find(name);
      const std::string reason = why != c.skipped.end() ? why->second : "not measured by this calibration";
      const std::string kept = reason + "; kept from profile " + (base.name.empty() ? "(none)" : base.name);
      for (const char* f : {".bw", ".latency"}) {
        // The base's own source, without the same note from its earlier refits (a profile refitted
        // from itself would otherwise repeat it once per refit).
        std::string source = base.notes.count(key + f) ? base.notes.at(key + f) : "";
        while (source.rfind(kept + ": ", 0) == 0) source.erase(0, kept.size() + 2);
        p.notes[key + f] = kept + (source.empty() ? "" : ": " + source);
      }
      return false;
    }
    std::vector<OpSample> s = it->second;
    for (auto& x : s) x.model = name;
    FitReport rep;
    PiecewiseModel m = fit_piecewise(s, {}, &rep);
    const auto& coef = m.pieces().front().coef;
    if (coef.size() < 2 || coef[1] <= 0) {
      // Copies of every size took alike (in-process copies on a busy machine): no slope to fit.
      // The largest copies' median rate, never a bandwidth of 0 (which no profile may hold).
      double largest = 0;
      std::vector<double> rates;
      for (const OpSample& x : s) largest = std::max(largest, x.x.size() > 1 ? x.x[1] : 0.0);
      for (const OpSample& x : s)
        if (x.x.size() > 1 && x.x[1] == largest && x.seconds > 0) rates.push_back(largest / x.seconds);
      if (rates.empty()) return false;
      out.latency = 0;
      out.bw = median_of(rates);
      p.notes[key + ".bw"] = p.notes[key + ".latency"] =
          "the median rate of " + std::to_string(rates.size()) + " copies of " + std::to_string(uint64_t(largest)) +
          " bytes, measured " + today() + " (the fit over the sizes had no positive slope)";
      return true;
    }
    out.latency = coef[0];
    out.bw = 1.0 / coef[1];
    const std::string note = "fitted " + today() + " from " + std::to_string(rep.samples) + " copies of " +
                             std::to_string(uint64_t(s.front().x[1])) + ".." + std::to_string(uint64_t(s.back().x[1])) +
                             " bytes, rms error " + pct(rep.rms_rel_error);
    p.notes[key + ".bw"] = p.notes[key + ".latency"] = note;
    return true;
  };
  link_fit("h2d", p.h2d, "link.h2d");
  link_fit("d2h", p.d2h, "link.d2h");
  fit_zero_copy(c, p);
  fit_partitioner_rates(c, p);
  fit_overlap(c, p);
  link_fit("p2p", p.p2p, "link.p2p");
  LinkSpec host_copy;
  link_fit("host_copy", host_copy, "host.copy");  // one stream's host copy: a note only
  // Host-side passes (partitioning, packing, CPU joins) run on every core, so the host memory
  // bandwidth is that of a parallel copy, not of one stream's copy. Host memory also served the
  // copies to and from the device at once (link.duplex): the simulator routes those through it
  // too, so it must carry at least that.
  LinkSpec duplex, mixed;
  const bool have_duplex = link_fit("duplex", duplex, "host.duplex");
  // The same copies with every core copying in host memory at once: the memory system's capacity
  // for CPU work and DMA together, at least the larger of the two alone.
  const bool have_mixed = link_fit("mixed", mixed, "host.mixed");
  const double roof = std::max({c.host_mem_bw, have_duplex ? duplex.bw : 0.0, have_mixed ? mixed.bw : 0.0});
  std::ostringstream why;
  why << std::setprecision(3) << "the largest of a parallel copy over every core (" << c.host_mem_bw / 1e9
      << " GB/s, bytes read + written)";
  if (have_duplex) why << ", of the host-to-device and device-to-host copies at once (" << duplex.bw / 1e9 << " GB/s)";
  if (have_mixed) why << " and of both at once (" << mixed.bw / 1e9 << " GB/s)";
  if (roof > 0) {
    p.host.mem_bw = roof;
    p.notes["host.mem_bw"] = why.str() + ", measured " + today();
  }
  if (p.ops.has("copy.device")) {
    const auto& coef = p.ops.get("copy.device").pieces().back().coef;
    if (coef.size() > 1 && coef[1] > 0) {
      p.gpu.mem_bw = 2.0 / coef[1];  // bytes read + written per second
      p.notes["gpu.mem_bw"] = "2 / slope of the fitted copy.device model (" + today() + ")";
    }
  }
  fit_cpu(c, base, p, roof, why.str());
  // Messages: the software cost beyond the path the simulator charges between 2 ranks of a node.
  const LinkSpec path = p.topology.intra == IntraNode::PCIe
                            ? LinkSpec{std::min(p.h2d.bw, p.d2h.bw), p.h2d.latency + p.d2h.latency}
                            : p.p2p;
  for (auto& [key, cost] : msg_costs(c, path)) {
    p.msg.cost[key] = cost.first;
    p.notes["msg." + key + ".seconds"] = p.notes["msg." + key + ".per_byte"] = cost.second;
  }
  // What the simulator pays: the transports the backend's strategies use by default (cpu: the
  // in-process one; GPUs: NCCL sends, puts over UCX), where measured.
  for (auto [kind, choice] : {std::pair<const char*, std::string*>{"send", &p.msg.send}, {"put", &p.msg.put}}) {
    const std::string t = backend_transport(opt.backend, kind, p.msg);
    if (!t.empty()) *choice = t;
  }
  if (opt.backend == "cpu") {
    p.gpu.l2_bytes = cache_bytes(base, opt.backend);
    p.notes["gpu.l2_bytes"] = "last-level cache of this host as sysconf reports it (information only)";
  }
  return p;
}

namespace {

namespace po = boost::program_options;

Profile default_base(const CalibrationOptions& opt) {
  if (!opt.base.empty()) return load_profile(resolve_profile_path(opt.base, opt.profile_dir));
  // No base: a single-node machine; every figure calibrate cannot measure is marked so.
  Profile p;
  p.topology.gpus_per_node = 1;
  p.topology.intra = IntraNode::PCIe;
  p.topology.nics = NicPlacement::PerGpu;
  p.topology.fabric = Fabric::Star;
  p.gpu.memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE)) / 2;
  p.host.memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE));
  p.host.cores = double(sysconf(_SC_NPROCESSORS_ONLN));
  p.gpu.streams = 5;
  p.gpu.mem_bw = p.host.mem_bw = host_copy_bandwidth();  // replaced by the copy.device fit when it has a slope
  p.notes["gpu.mem_bw"] = p.notes["host.mem_bw"] = "parallel copy over every core of this host, bytes read + written per second";
  p.nic = {1e10, 1e-5};
  // Links a fit may fail to pin down (copies too small to show a slope) keep these.
  p.h2d = p.d2h = p.p2p = {1e10, 1e-5};
  for (const char* k : {"link.h2d.bw", "link.h2d.latency", "link.d2h.bw", "link.d2h.latency", "link.p2p.bw",
                        "link.p2p.latency"})
    p.notes[k] = "not measured (no slope in this calibration's copies): placeholder 10 GB/s, 10 us";
  p.notes["gpu.memory"] = "half of this host's memory (sysconf): what the cpu backend's ranks may use";
  p.notes["host.memory"] = "this host's memory (sysconf)";
  p.notes["host.cores"] = "this host's online cores (sysconf)";
  p.notes["gpu.streams"] = "the cpu backend's default streams per rank";
  p.notes["link.nic.bw"] = p.notes["link.nic.latency"] = "not measured (one machine): placeholder 10 GB/s, 10 us";
  p.notes["host.poll_seconds"] = "not measured: 1 us";
  for (const char* k : {"topology.gpus_per_node", "topology.nics_per_node", "topology.levels", "topology.leaf_nodes",
                        "topology.oversubscription", "topology.spine_oversubscription", "topology.hop_latency",
                        "gpu.sms", "gpu.clock_ghz"})
    p.notes[k] = "one machine, no cluster: default, not measured";
  return p;
}

}  // namespace

// --only's values: steps separated by commas or spaces, each one of kCalibrationSteps.
static std::vector<std::string> parse_steps(const std::vector<std::string>& values) {
  std::vector<std::string> steps;
  for (const std::string& v : values) {
    std::stringstream in(v);
    for (std::string step; std::getline(in, step, ',');) {
      if (step.empty()) continue;
      if (std::find(std::begin(kCalibrationSteps), std::end(kCalibrationSteps), step) == std::end(kCalibrationSteps)) {
        std::string known;
        for (const char* k : kCalibrationSteps) known += std::string(known.empty() ? "" : ", ") + k;
        throw InputError("calibrate: --only " + v + ": no step '" + step + "' (steps: " + known + ")");
      }
      steps.push_back(step);
    }
  }
  if (steps.empty()) throw InputError("calibrate: --only needs a step");
  return steps;
}

int calibrate_main(const std::vector<std::string>& args) {
  CalibrationOptions opt;
  register_builtin();
  for (auto& b : backend_names())  // a GPU build measures its GPU by default
    if (b == "cuda") opt.backend = "cuda";
  po::options_description d("joinlab calibrate");
  d.add_options()("backend", po::value(&opt.backend), "backend to measure: cpu or cuda")(
      "profile", po::value(&opt.name), "name of the profile written (default: h100 on cuda, cpu-<host> on cpu)")(
      "out", po::value(&opt.out), "profile file to write (default: models/profiles/<profile>.ini)")(
      "base", po::value(&opt.base), "profile whose unmeasured figures (network, topology) are kept (default: h100 on cuda)")(
      "quick", po::bool_switch(&opt.quick), "few sizes (seconds, for CI)")(
      "min-rows", po::value(&opt.min_rows), "smallest input rows")("max-rows", po::value(&opt.max_rows), "largest input rows")(
      "repeat", po::value(&opt.repeat), "runs per sample (median kept)")(
      "cpu-rows", po::value(&opt.cpu_rows), "rows of the host CPUs' single-core pass (the all-core pass: as many per "
                                            "thread, up to 2^26; default: --quick's middle size, else up to 2^22)")(
      "threads", po::value(&opt.threads), "cpu backend: threads per rank (0: all cores)")(
      "samples", po::value(&opt.samples_out), "also write every timed run to this file (for --fit)")(
      "fit", po::value(&opt.samples_in), "fit the profile from a --samples file; measure nothing")(
      "warm", po::bool_switch(&opt.warm), "do not evict the caches before each run (the old protocol, to compare)")(
      "cache-bytes", po::value(&opt.cache_bytes), "last-level cache to evict before each run (default: the base "
                                                  "profile's gpu.l2_bytes; cpu: the host's)")(
      "only", po::value<std::vector<std::string>>()->multitoken(),
      "measure only these steps (comma- or space-separated): operators, links, overlap, cpu, peer, messages; the rest is kept "
      "from --base (links: copies, zero-copy accesses by granule, triton's partitioners and prefix sums by fanout)");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(d).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::ostringstream help;
    help << d;
    throw InputError(std::string("calibrate: ") + e.what() + "\n" + help.str());
  }
  if (opt.repeat < 1) throw InputError("calibrate: --repeat " + std::to_string(opt.repeat) + ": must be at least 1");
  if (vm.count("only")) opt.only = parse_steps(vm["only"].as<std::vector<std::string>>());
  opt.profile_dir = profile_dir();
  Calibration c;
  if (!opt.samples_in.empty()) {
    if (!opt.samples_out.empty()) throw InputError("calibrate: --fit reads samples, --samples writes them: give one");
    std::ifstream in(opt.samples_in);
    if (!in) throw InputError("calibrate: cannot read the samples file " + opt.samples_in);
    c = read_samples(in, opt.samples_in);
    // The backend that measured them ("..., backend cuda"), unless given.
    const size_t at = c.machine.rfind(", backend ");
    if (!vm.count("backend") && at != std::string::npos) opt.backend = c.machine.substr(at + 10);
  }
  // On a GPU, the profile of the same name (h100, h200) supplies what one machine cannot measure.
  if (opt.base.empty() && opt.backend == "cuda")
    opt.base = !opt.name.empty() && !profile_path(opt.name).empty() ? opt.name : "h100";
  if (opt.name.empty()) {
    char host[64] = "host";
    ::gethostname(host, sizeof host - 1);
    opt.name = opt.backend == "cpu" ? std::string("cpu-") + host : "h100";
  }
  if (opt.out.empty()) opt.out = opt.profile_dir + "/" + opt.name + ".ini";
  const Profile base = default_base(opt);
  if (opt.samples_in.empty()) c = measure(opt);
  if (!opt.samples_out.empty()) {
    std::ofstream s(opt.samples_out);
    if (s) write_samples(c, s);
    if (!s) throw InputError("calibrate: cannot write the samples file " + opt.samples_out);
    std::cerr << "calibrate: " << c.runs.size() << " timed runs written to " << opt.samples_out << "\n";
  }
  Profile p = fit_profile(c, base, opt);
  std::ofstream out(opt.out);
  if (!out) throw InputError("calibrate: cannot write " + opt.out);
  out << "# " << p.name << ": " << p.description << "\n# " << p.source << "\n";
  write_profile(p, out);
  out.close();
  load_profile(opt.out);  // what was written must read back
  for (const std::string& line : link_report(c)) std::cout << line << "\n";
  std::cout << "calibrate: wrote " << opt.out << " (" << p.ops.all().size() << " operator models)\n";
  return kExitOk;
}

void register_model_commands() {
  register_profile_check([](const std::string& path, const ProfileOverrides& overrides) { load_profile(path, overrides); });
  register_command("calibrate",
                   "joinlab calibrate [--backend cpu|cuda] [--profile NAME] [--out FILE] [--quick] [--samples F]\n"
                   "                                     measure every operator and link, fit the cost models, write a "
                   "profile (--fit F: fit from a --samples file)",
                   calibrate_main);
  register_command("validate",
                   "joinlab validate FILE [--backend cpu|cuda] [--profile P] [--measured CSV [--out OUT.csv]]\n"
                   "                                     [--max-error X] [--max-phase-error Y] [--section.key=value ...]\n"
                   "                                     run on the hardware and in simulation (or simulate the rows of a "
                   "CSV that joinlab run wrote on the hardware); predicted vs measured per phase",
                   validate_main);
  register_codec_bench();
}

}  // namespace joinlab
