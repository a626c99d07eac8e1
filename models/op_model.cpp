#include "models/op_model.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <functional>
#include <type_traits>

#include "core/common/error.hpp"
#include "core/exec/msd_sort_plan.hpp"

namespace joinlab {

const std::vector<ModelSpec>& model_specs() {
  // legacy: the coefficients (after the constant) of the profiles calibrated before the later
  // features (partitions and skew of a partitioning, hash-table collisions and cache misses,
  // a partitioned join's work items and reloads) existed.
  static const std::vector<ModelSpec> specs = {
      {"generate", {"bytes_out"}, "", {}, 0},
      {"histogram", {"bytes_in", "partitions", "skew_rows"}, "fanout", {}, 1},
      {"partition", {"bytes_in", "partitions", "skew_rows"}, "fanout", {}, 1},
      {"build.linear", {"bytes_in", "collision_bytes"}, "table_bytes", {"far"}, 1},
      {"build.chained", {"bytes_in", "collision_bytes"}, "table_bytes", {"far"}, 1},
      {"probe.linear", {"bytes_in", "bytes_out"}, "table_bytes", {"near", "far"}, 2},
      {"probe.chained", {"bytes_in", "bytes_out"}, "table_bytes", {"near", "far"}, 2},
      {"partitioned_join.linear",
       {"bytes_in", "bytes_out", "items", "rounds", "r_reload_bytes", "s_reload_bytes", "host_items", "host_lists"},
       "partition_bytes", {}, 2},
      {"partitioned_join.chained",
       {"bytes_in", "bytes_out", "items", "rounds", "r_reload_bytes", "s_reload_bytes", "host_items", "host_lists"},
       "partition_bytes", {}, 2},
      // The MSD sort (msd_plan): its local sort's bytes, CUB's share (skew), then its partition
      // passes' bytes and histogram reads, its passes, its local sort's blocks and their counters.
      // segment_max_bytes (the largest segment of a CUB segmented sort, which the kernel had until
      // 2026-11-22) is always 0 now; it keeps its place so that older profiles read as before.
      {"sort.radix",
       {"bytes_in", "cub_bytes", "cub_calls", "segment_max_bytes", "pass_bytes", "hist_bytes", "passes", "blocks",
        "counters"},
       "key_bytes", {}, 1},
      {"sort.merge", {"bytes_in_log2_rows"}, "", {}, 0},
      {"merge_join", {"bytes_in", "bytes_out"}, "", {"near"}, 2},
      {"multiway_merge", {"bytes_in", "bytes_out"}, "", {}, 0, true},
      // Two sorted runs into one (mgsmj's merge stages): the merge join's walk, every row written.
      {"merge", {"bytes_in", "bytes_out"}, "", {}, 0, false, "merge_join"},
      {"gather", {"bytes_in"}, "source_bytes", {}, 0},
      {"checksum", {"bytes_in"}, "", {}, 0},
      {"scan", {"bytes_in"}, "", {}, 0},
      // Cascaded compression (core/exec/codec.hpp): a pass over the raw bytes, the compressed
      // bytes, and the chunks (a thread block each, their headers); the raw bytes first in both,
      // so that a profile calibrated before they existed costs them as a scan of the raw bytes.
      {"compress", {"bytes_in", "bytes_out", "chunks"}, "", {}, 0, false, "scan"},
      {"decompress", {"bytes_out", "bytes_in", "chunks"}, "", {}, 0, false, "scan"},
      {"copy.device", {"bytes_in"}, "", {}, 0},
      // Allocations (the rank waits for them; the backend may touch the memory).
      {"alloc.device", {"bytes"}, "", {}, 0},
      {"alloc.host", {"bytes"}, "", {}, 0},  // pinned and pageable host memory
      // Frees: the rank waits for them too (the CUDA backend synchronizes the device before a
      // block goes back to its cache: kernels/cuda/cuda_rank.cu give_back_block).
      {"free.device", {"bytes"}, "", {}, 0},
      {"free.host", {"bytes"}, "", {}, 0},
  };
  return specs;
}

std::vector<std::string> ModelSpec::all_features() const {
  std::vector<std::string> f = features;
  for (auto& c : caches) f.push_back(c + "_misses");
  return f;
}

bool ModelSpec::byte_feature(size_t i) const {
  if (i >= features.size()) return false;
  const std::string& f = features[i];
  return f.rfind("bytes", 0) == 0 || (f.size() > 13 && f.compare(f.size() - 13, 13, "_reload_bytes") == 0);
}

const ModelSpec* find_model_spec(const std::string& name) {
  for (auto& s : model_specs())
    if (s.name == name) return &s;
  return nullptr;
}

// --- key access and cache hits ---------------------------------------------------------------

double KeyAccess::lookups() const {
  double n = 0;
  for (double h : heavy) n += h;
  for (auto& t : tails) n += t.lookups;
  return n;
}

KeyAccess KeyAccess::uniform(double lookups, double keys) { return zipf(lookups, keys, 0); }

KeyAccess KeyAccess::zipf(double lookups, double keys, double z) {
  KeyAccess a;
  if (lookups > 0 && keys > 0) a.tails.push_back({lookups, keys, z, 1});
  return a;
}

namespace {

// Keys grouped by popularity: `count` keys, each looked up `each` times.
struct KeyGroup {
  double count, each;
};

// Ranks are grouped geometrically (5% apart): a Zipf tail of 2^28 keys is ~400 groups.
constexpr double kGroupRatio = 1.05;

// Integral of k^-z over [a, b).
double power_integral(double z, double a, double b) {
  if (z == 0) return b - a;
  if (std::fabs(z - 1) < 1e-12) return std::log(b / a);
  return (std::pow(b, 1 - z) - std::pow(a, 1 - z)) / (1 - z);
}

std::vector<KeyGroup> key_groups(const KeyAccess& access) {
  std::vector<KeyGroup> g;
  std::vector<double> heavy = access.heavy;
  std::sort(heavy.begin(), heavy.end(), std::greater<double>());
  for (size_t i = 0; i < heavy.size();) {
    size_t j = i;
    double sum = 0;
    while (j < heavy.size() && heavy[j] * kGroupRatio >= heavy[i]) sum += heavy[j++];
    if (sum > 0) g.push_back({double(j - i), sum / double(j - i)});
    i = j;
  }
  for (auto& t : access.tails) {
    if (t.lookups <= 0 || t.keys <= 0) continue;
    if (t.zipf == 0) {
      g.push_back({t.keys, t.lookups / t.keys});
      continue;
    }
    // Rank r's share is the integral of k^-z over [r - 1/2, r + 1/2).
    const double first = std::max(1.0, t.first_rank), last = first + t.keys;  // ranks [first, last)
    const double total = power_integral(t.zipf, first - 0.5, last - 0.5);
    for (double a = first; a < last;) {
      const double b = std::min(last, std::max(a + 1, std::ceil(a * kGroupRatio)));
      const double w = power_integral(t.zipf, a - 0.5, b - 0.5) / total * t.lookups;
      if (w > 0) g.push_back({b - a, w / (b - a)});
      a = b;
    }
  }
  return g;
}

// A cache of `capacity` keys that evicts at random (the GPU's L2 is not an LRU): a key of share p
// is cached with probability p T / (1 + p T), where the characteristic time T fills the cache,
// sum_k p_k T / (1 + p_k T) = capacity; the hit fraction is sum_k p_k^2 T / (1 + p_k T) (Fricker,
// Robert, Roberts, "A versatile and accurate approximation for LRU cache performance", ITC 2012,
// its RANDOM policy). Uniform lookups hit capacity / keys; a few hot keys stay cached. On the
// H100's npj probes it predicted Zipf 0.75 from Zipf 0 and 1.5 within 11%, Che's LRU within 17%
// (experiments/validate/check_model_forms.py).
double random_cache_hit(const std::vector<KeyGroup>& groups, double capacity) {
  double keys = 0, total = 0;
  for (auto& g : groups) {
    keys += g.count;
    total += g.count * g.each;
  }
  if (total <= 0) return 1.0;
  if (capacity >= keys) return 1.0;
  if (capacity <= 0) return 0.0;
  auto filled = [&](double t, double* slope) {  // sum c p t / (1 + p t) and its derivative
    double f = 0, d = 0;
    for (auto& g : groups) {
      const double p = g.each / total, q = 1 + p * t;
      f += g.count * p * t / q;
      d += g.count * p / (q * q);
    }
    *slope = d;
    return f;
  };
  // The filling is concave and increasing with filled(t) <= t: Newton from t = capacity climbs
  // monotonically to the root.
  double t = capacity;
  for (int i = 0; i < 200; ++i) {
    double d = 0;
    const double f = filled(t, &d) - capacity;
    if (f >= -1e-9 * capacity || d <= 0) break;
    t -= f / d;
  }
  double hit = 0;
  for (auto& g : groups) {
    const double p = g.each / total;
    hit += g.count * p * p * t / (1 + p * t);
  }
  return std::min(1.0, std::max(0.0, hit));
}

}  // namespace

double cache_hit_fraction(const Locality& l, double cache_bytes) {
  if (l.lookups <= 0) return 1.0;
  if (l.bytes <= 0 || cache_bytes >= l.bytes) return 1.0;
  const double keys = std::max(l.keys, 1.0);
  const double capacity = keys * cache_bytes / l.bytes;  // keys' worth of the structure cached
  const KeyAccess access = l.access.empty() ? KeyAccess::uniform(l.lookups, keys) : l.access;
  // Uniform lookups (the common case, and every simulated operator without skew): closed form.
  if (access.heavy.empty() && access.tails.size() == 1 && access.tails[0].zipf == 0)
    return std::min(1.0, capacity / access.tails[0].keys);
  return random_cache_hit(key_groups(access), capacity);
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

// Passes a join operator makes over its inputs: CountThenWrite counts, then writes at exact
// positions (run_join_passes in kernels/cuda/join_common.cuh; the CPU kernels alike); CountOnly
// and Direct make one.
double join_passes(OutputMode mode) { return mode == OutputMode::CountThenWrite ? 2.0 : 1.0; }

// Extra slots an insert into a linear-probing table visits beyond its home slot, on average
// over the build (Knuth: a successful search at load a takes (1 + 1/(1 - a)) / 2 probes). Each
// is another compare-and-swap, mostly in the home slot's cache line.
double collision_probes(double load) {
  load = std::min(std::max(load, 0.0), 0.95);
  return 0.5 * load / (1 - load);
}

// Rows in partitions, over rows: rows * sum of squared shares (1/fanout uniformly, up to 1 when
// one key holds everything). Skewed partitions contend on the same counters and write cursors.
double skew_rows(const std::vector<uint64_t>& counts) {
  double rows = 0, sq = 0;
  for (uint64_t c : counts) {
    rows += double(c);
    sq += double(c) * double(c);
  }
  return rows > 0 ? sq / rows : 0;
}

std::vector<uint64_t> counts_of_offsets(const std::vector<uint64_t>& offsets) {
  std::vector<uint64_t> c;
  for (size_t i = 1; i < offsets.size(); ++i) c.push_back(offsets[i] >= offsets[i - 1] ? offsets[i] - offsets[i - 1] : 0);
  return c;
}

// The work items of the per-partition join (kernels/cuda/partitioned_join.cu): an R partition
// is cut into chunks of what one shared-memory table of 64 KB holds, an S partition into slices
// when it is much larger than a block's fair share (on the H100's 132 SMs, 32 items each), and
// every chunk is built and probed once per slice. Skewed S partitions are sliced, so their R
// chunk is built again per slice; oversized R partitions are chunked, so their S rows are read
// again per chunk. A block loads its rows in rounds of 2048 (512 threads x 4 rows, their loads
// in flight together) to build, then to probe: a round waits for memory once, so an item's time
// follows its rounds more than its bytes (on the H100, 2^15 items of 3072 rows took as long as
// 2^15 of 4096).
// The items are listed on the device when every pair is one item and both offsets are in device
// memory (Partitioned::offsets_copy, which phj sets); otherwise the host lists them and uploads the
// list before the kernel runs (0.3-1.5 ms for 2^15 items on the H100): `host_items`, and once
// per run `host_lists` (1 when the host lists them: the list's allocation and upload). In phj's
// runs on the H100 the host's list took 0.13-0.17 ms for 2^11 items and 3.7-4.4 ms for 2^16,
// where the device lists them in 0.02 and 0.25 ms; calibrate's joins on split pairs cost less than that over the same
// joins listed on the device (2^16 items: +1.0..1.9 ms), which this fit cannot see.
struct JoinWork {
  double items = 0, rounds = 0, r_reload_rows = 0, s_reload_rows = 0, host_items = 0;
};

bool offsets_in_device_memory(const Partitioned& p) {
  const Buffer& b = p.offsets_copy;
  return b && b->space == MemSpace::Device && b->bytes >= p.offsets.size() * sizeof(uint64_t);
}

uint64_t smem_table_rows(const TupleFormat& r, bool chained) {
  auto align16 = [](uint64_t b) { return (b + 15) / 16 * 16; };
  auto bytes = [&](uint64_t rows) {
    uint64_t slots = 1;
    while (slots < std::max<uint64_t>(chained ? rows : 2 * rows, 32)) slots <<= 1;
    if (!chained) return align16(slots * r.key_bytes) + align16(slots * r.val_bytes);
    return align16(slots * 4) + align16(rows * 4) + align16(rows * r.key_bytes) + align16(rows * r.val_bytes);
  };
  constexpr uint64_t kTableBudget = 64 * 1024;
  uint64_t rows = 1;
  while (bytes(rows * 2) <= kTableBudget) rows *= 2;
  return rows;
}

JoinWork join_work(const PartitionedJoinOp& o) {
  JoinWork w;
  if (o.r.offsets.size() < 2 || o.r.offsets.size() != o.s.offsets.size()) return w;
  constexpr double kRound = 512 * 4, kBlocks = 132 * 32;
  const double chunk = double(smem_table_rows(o.r.all.fmt, o.table == TableKind::Chained));
  const double s_total = double(o.s.offsets.back() - o.s.offsets.front());
  const double slice = std::max(8 * kRound, std::ceil(s_total / kBlocks / kRound) * kRound);
  bool split = false;
  for (size_t p = 0; p + 1 < o.r.offsets.size(); ++p) {
    const double nr = double(o.r.offsets[p + 1] - o.r.offsets[p]), ns = double(o.s.offsets[p + 1] - o.s.offsets[p]);
    if (nr <= 0 || ns <= 0) continue;
    const double chunks = std::ceil(nr / chunk), slices = std::ceil(ns / slice);
    split = split || chunks > 1 || slices > 1;
    w.items += chunks * slices;
    // Every item builds its chunk (full chunks but the last) and probes its slice.
    const double last_chunk = nr - (chunks - 1) * chunk, last_slice = ns - (slices - 1) * slice;
    const double build = (chunks - 1) * std::ceil(chunk / kRound) + std::ceil(last_chunk / kRound);
    const double probe = (slices - 1) * std::ceil(slice / kRound) + std::ceil(last_slice / kRound);
    w.rounds += build * slices + probe * chunks;
    w.r_reload_rows += nr * (slices - 1);
    w.s_reload_rows += ns * (chunks - 1);
  }
  if (split || !offsets_in_device_memory(o.r) || !offsets_in_device_memory(o.s)) w.host_items = w.items;
  return w;
}

// The CUDA radix sort is an MSD sort (kernels/cuda/sort.cu): the high key bits partition the rows
// so that a partition holds about 4096 rows when the keys spread over [0, max key], a block sorts
// each partition of up to 5120 rows on chip, and the larger partitions (hot keys') are gathered
// and sorted by one CUB device sort. Skew therefore costs the rows CUB sorts (`cub_rows`) and its
// device calls (`cub_calls`: one partition is copied and sorted, one CUB call; several are gathered,
// sorted and copied back, three: two batched copies and the sort), estimated from the keys'
// spread (hot keys are scattered over the key range: keygen.hpp).
struct MsdWork {
  double cub_rows = 0, cub_calls = 0;
};

}  // namespace

// The MSD sort's plan (kernels/cuda/sort.cu msd_partition_bits, partition.cu partition): the
// low bits left to the blocks are the most (up to 13) that keep a partition at <= 4096 rows of
// keys spread over [0, max_key]; the bits above are partitioned in one scatter pass up to the
// scatter's limit (9 bits for tuples of up to 8 bytes, 8 for wider ones: one partition per thread
// of its 512- or 256-thread block), else in two, with one joint histogram read while the joint
// counts fit the 227 KB of shared memory (H100), else a histogram read per pass. Its cost steps
// where the bits change, not smoothly with the rows: dense keys 1..n of 1.5 x 2^k rows make
// 2^(k-11) partitions of 3072 rows, of 2^k rows 2^(k-12) of 4096 (msd_sampled_max: the planned
// range). A block clears and scans 2^low_bits counters besides sorting its rows.
MsdPlan msd_plan(double rows, double max_key, uint32_t key_bytes, uint32_t val_bytes) {
  constexpr double kSmemOptin = 232448, kStaticSmemReserve = 2048, kJointThreads = 1024;
  MsdPlan p;
  if (rows <= 0) return p;
  int end_bit = 1;
  while (end_bit < 8 * int(key_bytes) && std::ldexp(1.0, end_bit) <= max_key) ++end_bit;
  const int low = msd_sort::local_bits(rows, max_key, end_bit);
  p.bits = end_bit - low;
  p.low_bits = low;
  const int one_pass = key_bytes + val_bytes <= 8 ? 9 : 8;
  if (p.bits > 2 * one_pass) {  // onesweep: CUB's LSD sort over every bit
    p.msd = false;
    return p;
  }
  p.blocks = std::ldexp(1.0, p.bits);
  if (p.bits == 0) return p;  // one partition: a device copy, then one block
  if (p.bits <= one_pass) {
    p.passes = p.hist_reads = 1;
    return p;
  }
  p.passes = 2;
  const int low2 = std::min(one_pass, (p.bits + 1) / 2), high = p.bits - low2;
  const double joint_smem = (std::ldexp(1.0, p.bits) + std::ldexp(1.0, high)) * 4;
  p.hist_reads = std::ldexp(1.0, high) <= kJointThreads && joint_smem + kStaticSmemReserve <= kSmemOptin ? 1 : 2;
  return p;
}

double msd_sampled_max(double max_key, double rows) {
  // The largest of 2^16 keys spread over [0, max_key] is about one sampling step below it (dense
  // keys 1..n: n - n / 2^16); the sort plans for that plus 1/16, within the sample's bit width
  // (sort.cu sort_pairs).
  constexpr double kSamples = double(msd_sort::kMaxSamples);
  if (rows <= kSamples) return max_key;
  return double(msd_sort::planned_max_key(uint64_t(std::floor(max_key - max_key / kSamples))));
}

namespace {

// `plan`: the sort's (msd_plan), for keys up to `max_key`.
MsdWork msd_work(double rows, const KeyAccess* access, const MsdPlan& plan, double max_key) {
  constexpr double kLocalCapacity = msd_sort::kLocalCapacity;
  MsdWork w;
  if (rows <= kLocalCapacity || !access || access->empty()) return w;  // uniform keys: no oversized partition
  const std::vector<KeyGroup> groups = key_groups(*access);
  double keys = 0, total = 0;
  for (auto& g : groups) keys += g.count, total += g.count * g.each;
  if (total <= 0) return w;
  const double scale = rows / total;  // the access's lookups are the rows to sort
  const double range = std::max(keys, 1.0);
  // A partition spans 2^low_bits key values of [0, max_key]: so many of the keys (dense keys: 2^low_bits).
  const double keys_per_part =
      std::max(1.0, std::min(range, range * std::ldexp(1.0, plan.low_bits) / (std::max(max_key, range) + 1.0)));
  // Rows of a partition besides its hottest key: the mean over the partition's other keys.
  const double base = rows * (keys_per_part - 1) / range;
  double runs = 0;  // oversized partitions
  for (auto& g : groups) {
    const double part = g.each * scale + base;
    if (part <= kLocalCapacity) continue;
    const double n = std::min(g.count, range / keys_per_part);  // at most one hot key per partition counted
    w.cub_rows += n * part;
    runs += n;
  }
  w.cub_calls = runs <= 0 ? 0 : runs < 1.5 ? 1 : 3;
  w.cub_rows = std::min(w.cub_rows, rows);  // the base of many hot partitions is not more than the rows
  return w;
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

OpSample radix_sort_sample(double rows, double max_key, uint32_t key_bytes, uint32_t val_bytes, double cub_bytes,
                           double cub_calls, double segment_max_bytes) {
  const MsdPlan p = msd_plan(rows, max_key, key_bytes, val_bytes);
  const double tb = double(key_bytes + val_bytes), bytes = rows * tb;
  if (!p.msd) return make("sort.radix", {0, bytes, 1, 0, 0, 0, 0, 0, 0}, key_bytes);
  return make("sort.radix",
              {bytes, cub_bytes, cub_calls, segment_max_bytes, p.passes * bytes, p.hist_reads * rows * key_bytes,
               double(p.passes), p.blocks, p.blocks * std::ldexp(1.0, p.low_bits)},
              key_bytes);
}

OpSample op_sample(const Op& op, const OpResult& result, const KeyAccess* access) {
  return std::visit(
      [&](const auto& o) -> OpSample {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GenerateOp>) {
          return make("generate", {double(o.out.rows) * o.out.fmt.tuple_bytes()});
        } else if constexpr (std::is_same_v<T, GeneratePayloadOp>) {
          return make("generate", {double(o.rows) * o.spec.payload_bytes[size_t(o.column)]});
        } else if constexpr (std::is_same_v<T, HistogramOp>) {
          // Counted in segments or not, the same pass over the keys: the whole input's counts.
          std::vector<uint64_t> counts(o.fn.fanout(), 0);
          for (size_t i = 0; i < result.values.size(); ++i) counts[i % counts.size()] += result.values[i];
          return make("histogram", {double(histogram_rows(o)) * o.in.fmt.key_bytes, double(o.fn.fanout()), skew_rows(counts)},
                      o.fn.fanout());
        } else if constexpr (std::is_same_v<T, PartitionOp>) {
          const double segments = o.in_segments.size() > 1 ? double(o.in_segments.size() - 1) : 1.0;
          return make("partition",
                      {double(o.in.rows) * o.in.fmt.tuple_bytes(), segments * o.fn.fanout(),
                       skew_rows(counts_of_offsets(result.values))},
                      o.fn.fanout());
        } else if constexpr (std::is_same_v<T, BuildOp>) {
          const HashTable& t = *o.table;
          const double rows = double(t.rows ? t.rows : o.in.rows), bytes = double(o.in.rows) * o.in.fmt.tuple_bytes();
          const double collisions =
              t.kind == TableKind::Chained || t.slots == 0 ? 0.0 : collision_probes(rows / double(t.slots));
          OpSample s = make(std::string("build.") + table_suffix(t.kind), {bytes, bytes * collisions}, table_bytes(t));
          // Each insert goes to a random slot (chained: a random bucket head).
          s.locality.lookups = double(o.in.rows);
          s.locality.bytes = t.kind == TableKind::Chained ? double(t.slots) * 4 : table_bytes(t);
          s.locality.keys = rows;
          return s;
        } else if constexpr (std::is_same_v<T, ProbeOp>) {
          const double passes = join_passes(o.mode);
          OpSample s = make(std::string("probe.") + table_suffix(o.table->kind),
                            {passes * double(o.probe.rows) * o.probe.fmt.tuple_bytes(),
                             output_bytes(o.out, o.mode, result.count)},
                            table_bytes(*o.table));
          s.locality.lookups = passes * double(o.probe.rows);
          s.locality.bytes = table_bytes(*o.table);
          s.locality.keys = double(std::max<uint64_t>(o.table->rows, 1));
          if (access) {
            s.locality.access = *access;
            for (double& h : s.locality.access.heavy) h *= passes;
            for (auto& t : s.locality.access.tails) t.lookups *= passes;
          }
          return s;
        } else if constexpr (std::is_same_v<T, PartitionedJoinOp>) {
          const double passes = join_passes(o.mode);
          const double rt = o.r.all.fmt.tuple_bytes(), st = o.s.all.fmt.tuple_bytes();
          const double rb = double(o.r.all.rows) * rt;
          const double in = rb + double(o.s.all.rows) * st;
          const double parts = std::max<double>(1, o.r.fanout());
          const JoinWork w = join_work(o);
          return make(std::string("partitioned_join.") + table_suffix(o.table),
                      {passes * in, output_bytes(o.out, o.mode, result.count), passes * w.items, passes * w.rounds,
                       passes * w.r_reload_rows * rt, passes * w.s_reload_rows * st, w.host_items,
                       w.host_items > 0 ? 1.0 : 0.0},
                      rb / parts);
        } else if constexpr (std::is_same_v<T, SortOp>) {
          const double bytes = double(o.in.rows) * o.in.fmt.tuple_bytes();
          if (o.algo == SortAlgo::Radix) {
            const double rows = double(o.in.rows), tb = o.in.fmt.tuple_bytes();
            // The keys' range: the access's largest key, else its distinct keys (dense from 1), else
            // the rows (R's dense keys).
            double max_key = rows;
            if (access && access->max_key > 0) {
              max_key = access->max_key;
            } else if (access && !access->empty()) {
              max_key = 0;
              for (auto& g : key_groups(*access)) max_key += g.count;
            }
            const double planned = msd_sampled_max(std::max(max_key, 1.0), rows);
            const MsdWork w =
                msd_work(rows, access, msd_plan(rows, planned, o.in.fmt.key_bytes, o.in.fmt.val_bytes), max_key);
            return radix_sort_sample(rows, planned, o.in.fmt.key_bytes, o.in.fmt.val_bytes, w.cub_rows * tb, w.cub_calls);
          }
          return make("sort.merge", {bytes * std::log2(std::max<double>(2, double(o.in.rows)))});
        } else if constexpr (std::is_same_v<T, MergeJoinOp>) {
          const double passes = join_passes(o.mode);
          OpSample s = make("merge_join",
                            {passes * (double(o.r.rows) * o.r.fmt.tuple_bytes() + double(o.s.rows) * o.s.fmt.tuple_bytes()),
                             output_bytes(o.out, o.mode, result.count)});
          // Every S row looks up its run of R keys: runs of equal S keys find theirs in cache.
          s.locality.lookups = passes * double(o.s.rows);
          s.locality.bytes = double(o.r.rows) * o.r.fmt.tuple_bytes();
          s.locality.keys = double(std::max<uint64_t>(o.r.rows, 1));
          if (access) {
            s.locality.access = *access;
            for (double& h : s.locality.access.heavy) h *= passes;
            for (auto& t : s.locality.access.tails) t.lookups *= passes;
          }
          return s;
        } else if constexpr (std::is_same_v<T, GatherOp>) {
          return make("gather", {double(o.rows) * (o.id_bytes + o.col_bytes)},
                      o.column ? double(o.column->bytes) : 0.0);
        } else if constexpr (std::is_same_v<T, ChecksumOp>) {
          double row = o.key_bytes;
          for (auto b : o.column_bytes) row += b;
          return make("checksum", {double(o.rows) * row});
        } else if constexpr (std::is_same_v<T, ScanOp>) {
          return make("scan", {double(o.n) * 8.0});
        } else if constexpr (std::is_same_v<T, LinkAccessOp>) {
          // No device work of its own: what it costs is the link's (the simulator's link_bytes).
          return make("link_access", {double(o.bytes) * (o.access == LinkAccess::Both ? 2 : 1)}, o.granule);
        } else if constexpr (std::is_same_v<T, ChunkPartitionOp>) {
          // The device's work is a partition pass's (its per-chunk layout is given, so its chunks
          // count as segments); what crosses the link is the simulator's (sim/link_model.hpp).
          const uint32_t F = o.fn.fanout();
          double bytes = 0;
          for (const Tuples& c : o.chunks) bytes += double(c.rows) * c.fmt.tuple_bytes();
          // Partition sizes: the first cached and the first spilled chunk start each partition's run
          // in their output, so consecutive starts (the output's end after the last) span it.
          // Offsets on the device: the result's partition starts in the cache give the same sizes.
          std::vector<uint64_t> counts = o.offsets_on_device ? counts_of_offsets(result.values) : std::vector<uint64_t>(F, 0);
          for (size_t first : {size_t(0), size_t(o.cached_chunks)}) {
            if (o.offsets_on_device) break;
            if (first >= o.chunks.size() || (first == 0 && o.cached_chunks == 0)) continue;
            uint64_t end = 0;
            for (size_t c = first; c < (first == 0 ? o.cached_chunks : o.chunks.size()); ++c) end += o.chunks[c].rows;
            end += o.offsets[first * F];
            for (uint32_t p = 0; p < F; ++p) {
              const uint64_t next = p + 1 < F ? o.offsets[first * F + p + 1] : end;
              counts[p] += next - std::min(next, o.offsets[first * F + p]);
            }
          }
          return make("partition", {bytes, double(o.chunks.size()) * F, skew_rows(counts)}, F);
        } else if constexpr (std::is_same_v<T, MultiwayMergeOp>) {
          // Every run read once, the merged relation written once.
          const double bytes = double(o.out.fmt.tuple_bytes()) * double(params_of(Op{o}).rows_in);
          return make("multiway_merge", {bytes, bytes});
        } else if constexpr (std::is_same_v<T, MergeOp>) {
          // Both runs read once, every row written once (a profile calibrated before the model
          // costs it as a merge join whose output is its input: the same merge path walk).
          const double bytes = double(o.out.fmt.tuple_bytes()) * double(o.a.rows + o.b.rows);
          return make("merge", {bytes, bytes});
        } else if constexpr (std::is_same_v<T, PivotSearchOp>) {
          // A launch and log2(n) probes of x and y: scan's constant (a launch) and its bytes.
          return make("scan", {double(o.n) * 2.0 * o.key_bytes});
        } else if constexpr (std::is_same_v<T, StarGenerateOp>) {
          return make("generate", {double(o.out.rows) * o.out.fmt.tuple_bytes()});
        } else if constexpr (std::is_same_v<T, StarProbeOp>) {
          // Probes one after another: every row probes the first dimension, the rows that pass
          // step i probe step i + 1 (the generated dimensions' pass fractions): the chained
          // probe model's lookups into tables of all the dimensions' bytes. No output rows (the
          // groups are a few KiB of atomics).
          const std::vector<double> pass = ssb::step_pass_fractions(o.query, o.scale);
          double lookups = 0, reach = double(o.in.rows), bytes = 0, keys = 0;
          for (double f : pass) lookups += reach, reach *= f;
          for (const HashTable* t : o.dims) bytes += table_bytes(*t), keys += double(t->rows);
          OpSample s = make("probe.chained", {lookups * o.in.fmt.tuple_bytes(), 0.0}, bytes);
          s.locality.lookups = lookups;
          s.locality.bytes = bytes;
          s.locality.keys = std::max(keys, 1.0);
          return s;
        } else if constexpr (std::is_same_v<T, CompressOp>) {
          // Raw bytes in, compressed bytes out (result.count, data-dependent), chunks.
          double raw = 0, chunks = 0;
          for (const CodecColumn& c : o.in) {
            raw += double(c.rows) * o.value_bytes;
            chunks += double(codec::chunk_count(c.rows, o.chunk_log2));
          }
          return make("compress", {raw, double(result.count), chunks});
        } else if constexpr (std::is_same_v<T, DecompressOp>) {
          // Compressed bytes in, raw bytes out (result.count rows); the chunks at the default
          // size (the headers hold the actual one).
          const double packed = o.offsets.empty() ? 0.0 : double(o.offsets.back() - o.offsets.front());
          double chunks = 0;
          for (uint64_t rows : result.values) chunks += double(codec::chunk_count(rows, codec::kDefaultChunkLog2));
          return make("decompress", {double(result.count) * o.value_bytes, packed, chunks});
        }
      },
      op);
}

OpSample device_copy_sample(uint64_t bytes) { return make("copy.device", {double(bytes)}); }

OpSample alloc_sample(MemSpace space, uint64_t bytes) {
  return make(space == MemSpace::Device ? "alloc.device" : "alloc.host", {double(bytes)});
}

OpSample free_sample(MemSpace space, uint64_t bytes) {
  return make(space == MemSpace::Device ? "free.device" : "free.host", {double(bytes)});
}

double sample_bytes(const OpSample& s) {
  const ModelSpec* spec = find_model_spec(s.model);
  double b = 0;
  for (size_t i = 1; i < s.x.size(); ++i)
    if (!spec || spec->byte_feature(i - 1)) b += s.x[i];
  return b;
}

PiecewiseModel::PiecewiseModel(std::vector<ModelPiece> pieces, std::vector<double> caches)
    : pieces_(std::move(pieces)), caches_(std::move(caches)) {
  std::sort(pieces_.begin(), pieces_.end(), [](const ModelPiece& a, const ModelPiece& b) { return a.lower < b.lower; });
}

std::vector<double> PiecewiseModel::features(const OpSample& s) const {
  std::vector<double> x = s.x;
  for (double c : caches_) x.push_back(s.locality.lookups * (1.0 - cache_hit_fraction(s.locality, c)));
  return x;
}

double PiecewiseModel::seconds(const OpSample& s) const {
  if (pieces_.empty()) return 0;
  const ModelPiece* piece = &pieces_.front();
  for (auto& p : pieces_)
    if (s.segment >= p.lower) piece = &p;
  // The cache terms follow the sample's own features, which may be fewer than the coefficients
  // (a sample made for an older model): missing features count 0.
  const size_t base = std::min(s.x.size(), piece->coef.size() - std::min(piece->coef.size(), caches_.size()));
  double t = 0;
  for (size_t i = 0; i < base; ++i) t += piece->coef[i] * s.x[i];
  for (size_t c = 0; c < caches_.size(); ++c) {
    const double k = piece->coef[piece->coef.size() - caches_.size() + c];
    if (k != 0) t += k * s.locality.lookups * (1.0 - cache_hit_fraction(s.locality, caches_[c]));
  }
  return std::max(t, 0.0);
}

const PiecewiseModel& OpModels::get(const std::string& model) const {
  auto it = models_.find(model);
  if (it == models_.end())
    if (const ModelSpec* spec = find_model_spec(model); spec && !spec->stand_in.empty()) it = models_.find(spec->stand_in);
  if (it == models_.end()) throw RuntimeError("the profile has no cost model for operator '" + model + "'");
  return it->second;
}

namespace {

// The samples of one fit as rows of features (cache misses included).
struct Design {
  std::vector<std::vector<double>> x;
  std::vector<double> seconds, segment;
  size_t features() const { return x.empty() ? 0 : x.front().size(); }
};

Design design_of(const std::vector<OpSample>& samples, const std::vector<double>& caches) {
  Design d;
  const PiecewiseModel shape({}, caches);
  for (auto& s : samples) {
    d.x.push_back(shape.features(s));
    d.seconds.push_back(s.seconds);
    d.segment.push_back(s.segment);
  }
  return d;
}

// The rows of a piece as the solver sees them: each scaled by 1 / seconds (relative error), each
// column of `cols` scaled to norm 1 (`scale` gets the norms).
Eigen::MatrixXd weighted_columns(const Design& d, const std::vector<size_t>& rows, const std::vector<size_t>& cols,
                                 Eigen::VectorXd& scale) {
  Eigen::MatrixXd a(rows.size(), cols.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const double w = 1.0 / std::max(d.seconds[rows[r]], 1e-12);
    for (size_t c = 0; c < cols.size(); ++c) a(Eigen::Index(r), Eigen::Index(c)) = d.x[rows[r]][cols[c]] * w;
  }
  // Column scaling keeps the solve well conditioned when features differ by 1e9.
  scale.resize(Eigen::Index(cols.size()));
  for (size_t c = 0; c < cols.size(); ++c) {
    double n = a.col(Eigen::Index(c)).norm();
    scale(Eigen::Index(c)) = n > 0 ? n : 1.0;
    a.col(Eigen::Index(c)) /= scale(Eigen::Index(c));
  }
  return a;
}

// Deactivates every active feature that lies in the span of the active features before it:
// a QR without pivoting, in feature order, leaves on R's diagonal the part of each (unit) column
// that the earlier columns do not explain.
void drop_dependent_features(const Design& d, const std::vector<size_t>& rows, std::vector<bool>& active) {
  std::vector<size_t> cols;
  for (size_t j = 0; j < active.size(); ++j)
    if (active[j]) cols.push_back(j);
  if (cols.size() < 2) return;
  Eigen::VectorXd scale;
  const Eigen::MatrixXd a = weighted_columns(d, rows, cols, scale);
  const Eigen::HouseholderQR<Eigen::MatrixXd> qr(a);
  const Eigen::MatrixXd& r = qr.matrixQR();
  for (size_t c = 0; c < cols.size() && Eigen::Index(c) < r.rows(); ++c)
    if (std::fabs(r(Eigen::Index(c), Eigen::Index(c))) < 1e-9) active[cols[c]] = false;
  for (size_t c = size_t(r.rows()); c < cols.size(); ++c) active[cols[c]] = false;  // fewer rows than features
}

// Non-negative least squares by active set elimination: solve, drop the most negative
// coefficient, repeat. Rows are pre-scaled by 1 / seconds (relative error). A feature that is
// 0 in every row gets 0, and so does one that is a linear combination of earlier features in
// every row of the piece (a piece of one fanout has one partition count: that feature is the
// constant's twin; a sort's passes and blocks may follow its bytes). Left to the pivoting solver,
// such features split their weight by the rounding of the samples' last digits (which moves with
// as little as the simulated clock's offset), and the model's extrapolation with it.
std::vector<double> fit_piece(const Design& d, const std::vector<size_t>& rows, size_t nfeat) {
  std::vector<bool> active(nfeat, true);
  for (size_t j = 0; j < nfeat; ++j) {
    bool any = false;
    for (size_t i : rows) any = any || d.x[i][j] != 0;
    active[j] = any;
  }
  drop_dependent_features(d, rows, active);
  std::vector<double> coef(nfeat, 0.0);
  for (size_t round = 0; round < nfeat; ++round) {
    std::vector<size_t> cols;
    for (size_t j = 0; j < nfeat; ++j)
      if (active[j]) cols.push_back(j);
    if (cols.empty()) break;
    Eigen::VectorXd scale;
    const Eigen::MatrixXd a = weighted_columns(d, rows, cols, scale);
    const Eigen::VectorXd b = Eigen::VectorXd::Ones(Eigen::Index(rows.size()));
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

FitReport evaluate_design(const PiecewiseModel& m, const Design& d) {
  FitReport r;
  double sq = 0;
  for (size_t i = 0; i < d.x.size(); ++i) {
    if (d.seconds[i] <= 0) continue;
    const ModelPiece* piece = &m.pieces().front();
    for (auto& p : m.pieces())
      if (d.segment[i] >= p.lower) piece = &p;
    double t = 0;
    for (size_t j = 0; j < piece->coef.size() && j < d.x[i].size(); ++j) t += piece->coef[j] * d.x[i][j];
    const double e = std::fabs(std::max(t, 0.0) - d.seconds[i]) / d.seconds[i];
    sq += e * e;
    r.max_rel_error = std::max(r.max_rel_error, e);
    r.samples++;
  }
  r.rms_rel_error = r.samples ? std::sqrt(sq / r.samples) : 0;
  return r;
}

PiecewiseModel fit_design(const Design& d, std::vector<double> breaks, const std::vector<double>& caches,
                          FitReport* report) {
  if (d.x.empty()) throw RuntimeError("cannot fit a cost model without samples");
  const size_t nfeat = d.features();
  std::sort(breaks.begin(), breaks.end());
  std::vector<double> lowers{0.0};
  for (double b : breaks)
    if (b > 0) lowers.push_back(b);
  // Assign samples to segments; merge segments too thin to fit into the one below.
  auto members = [&](size_t i) {
    std::vector<size_t> m;
    double lo = lowers[i], hi = i + 1 < lowers.size() ? lowers[i + 1] : INFINITY;
    for (size_t k = 0; k < d.x.size(); ++k)
      if ((i == 0 || d.segment[k] >= lo) && d.segment[k] < hi) m.push_back(k);
    return m;
  };
  for (size_t i = lowers.size(); i-- > 1;)
    if (members(i).size() < nfeat + 1) lowers.erase(lowers.begin() + long(i));
  if (members(0).size() < nfeat + 1 && lowers.size() > 1) lowers.erase(lowers.begin() + 1);
  std::vector<ModelPiece> pieces;
  for (size_t i = 0; i < lowers.size(); ++i) {
    auto m = members(i);
    if (m.empty()) continue;
    pieces.push_back({lowers[i], fit_piece(d, m, nfeat)});
  }
  pieces.front().lower = 0;
  PiecewiseModel model(std::move(pieces), caches);
  if (report) *report = evaluate_design(model, d);
  return model;
}

PiecewiseModel fit_design_auto(const Design& d, const std::vector<double>& caches, FitReport* report) {
  FitReport best_rep;
  PiecewiseModel best = fit_design(d, {}, caches, &best_rep);
  std::vector<double> values = d.segment;
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  const size_t need = d.features() + 1;
  for (size_t i = 1; i < values.size(); ++i) {
    // Halfway (geometrically) between two sampled values: a profile's rounding of the bound
    // cannot move a sampled value (or an unsampled one equal to it) across.
    const double cut = values[i - 1] > 0 ? std::sqrt(values[i - 1] * values[i]) : values[i] / 2;
    size_t below = 0;
    for (double v : d.segment) below += v < cut;
    if (below < need || d.x.size() - below < need) continue;
    FitReport rep;
    PiecewiseModel m = fit_design(d, {cut}, caches, &rep);
    if (m.pieces().size() == 2 && rep.rms_rel_error < 0.8 * best_rep.rms_rel_error) {
      best = m;
      best_rep = rep;
    }
  }
  if (report) *report = best_rep;
  return best;
}

}  // namespace

PiecewiseModel fit_piecewise(const std::vector<OpSample>& samples, std::vector<double> breaks, FitReport* report,
                             const std::vector<double>& caches) {
  if (samples.empty()) throw RuntimeError("cannot fit a cost model without samples");
  return fit_design(design_of(samples, caches), std::move(breaks), caches, report);
}

PiecewiseModel fit_piecewise_auto(const std::vector<OpSample>& samples, FitReport* report,
                                  const std::vector<double>& caches) {
  if (samples.empty()) throw RuntimeError("cannot fit a cost model without samples");
  return fit_design_auto(design_of(samples, caches), caches, report);
}

std::vector<double> cache_candidates(const std::string& level) {
  const bool near = level == "near";
  std::vector<double> v;
  // near: 8 B (one 4+4 row) .. 16 MiB; far: 1 MiB .. 1 GiB; sqrt(2) apart.
  for (int i = 0; i <= (near ? 42 : 20); ++i) v.push_back(std::round((near ? 8.0 : double(1 << 20)) * std::pow(2.0, i / 2.0)));
  return v;
}

PiecewiseModel fit_model(const ModelSpec& spec, const std::vector<OpSample>& samples, bool auto_break,
                         const std::vector<double>& breaks, FitReport* report, double max_cache) {
  if (samples.empty()) throw RuntimeError("cannot fit a cost model of " + spec.name + " without samples");
  if (spec.caches.empty()) {
    Design d = design_of(samples, {});
    return auto_break ? fit_design_auto(d, {}, report) : fit_design(d, breaks, {}, report);
  }
  // Misses of every sample at every candidate size of every level, once; then every
  // combination of sizes is a linear fit.
  std::vector<std::vector<double>> candidates;
  std::vector<std::vector<std::vector<double>>> misses;  // [level][candidate][sample]
  for (auto& level : spec.caches) {
    candidates.push_back(cache_candidates(level));
    if (max_cache > 0) {
      auto& c = candidates.back();
      c.erase(std::remove_if(c.begin(), c.end(), [&](double b) { return b > max_cache; }), c.end());
      if (c.empty()) c.push_back(max_cache);
    }
    misses.emplace_back();
    for (double c : candidates.back()) {
      std::vector<double> m;
      for (auto& s : samples) m.push_back(s.locality.lookups * (1.0 - cache_hit_fraction(s.locality, c)));
      misses.back().push_back(std::move(m));
    }
  }
  Design d = design_of(samples, {});
  const size_t base = d.features();
  for (auto& row : d.x) row.resize(base + spec.caches.size(), 0.0);
  // Where the samples span three skews or more, the cache sizes are chosen by how well a fit
  // without one skew predicts that skew, over every skew: the in-sample error is nearly flat in the
  // near cache's size, and the sizes it picked set the model's skew response (H100, 2026-11-22:
  // 32 or 2048 bytes from calibrations of the same kernels, rms within 1% of each other; the
  // first put npj's Zipf 1.5 probes 30% high). The fit itself stays on every sample.
  std::vector<double> skew(samples.size(), 0.0);
  for (size_t i = 0; i < samples.size(); ++i)
    if (!samples[i].locality.access.tails.empty()) skew[i] = samples[i].locality.access.tails.front().zipf;
  std::vector<double> skews = skew;
  std::sort(skews.begin(), skews.end());
  skews.erase(std::unique(skews.begin(), skews.end()), skews.end());
  auto fit = [&](const Design& on, const std::vector<double>& caches, FitReport* rep) {
    return auto_break ? fit_design_auto(on, caches, rep) : fit_design(on, breaks, caches, rep);
  };
  auto held_out_error = [&](const std::vector<double>& caches) {  // rms over the left-out skews
    double sq = 0;
    size_t n = 0;
    for (double z : skews) {
      Design train, test;
      for (size_t i = 0; i < d.x.size(); ++i) {
        Design& to = skew[i] == z ? test : train;
        to.x.push_back(d.x[i]);
        to.seconds.push_back(d.seconds[i]);
        to.segment.push_back(d.segment[i]);
      }
      const FitReport r = evaluate_design(fit(train, caches, nullptr), test);
      sq += r.rms_rel_error * r.rms_rel_error * double(r.samples);
      n += r.samples;
    }
    return n ? std::sqrt(sq / double(n)) : 0.0;
  };
  const bool by_skew = skews.size() >= 3;
  std::vector<size_t> pick(spec.caches.size(), 0);
  PiecewiseModel best;
  FitReport best_rep;
  double best_score = 0;
  bool have = false;
  for (;;) {
    std::vector<double> caches;
    for (size_t l = 0; l < pick.size(); ++l) {
      caches.push_back(candidates[l][pick[l]]);
      for (size_t i = 0; i < d.x.size(); ++i) d.x[i][base + l] = misses[l][pick[l]][i];
    }
    // A nearer level larger than a farther one is no hierarchy.
    bool ordered = true;
    for (size_t l = 1; l < caches.size(); ++l) ordered = ordered && caches[l - 1] < caches[l];
    if (ordered) {
      FitReport rep;
      PiecewiseModel m = fit(d, caches, &rep);
      const double score = by_skew ? held_out_error(caches) : rep.rms_rel_error;
      if (!have || score < best_score * (1 - 1e-9)) {
        best = m;
        best_rep = rep;
        best_score = score;
        have = true;
      }
    }
    size_t l = 0;
    while (l < pick.size() && ++pick[l] == candidates[l].size()) pick[l++] = 0;
    if (l == pick.size()) break;
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
