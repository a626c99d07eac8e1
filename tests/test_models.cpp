// Cost models (models/op_model.*) and their profile lines (models/profile.*): the cache terms
// (skewed lookups hit cached hot keys, tables that fit the cache miss nothing), the features
// that follow how the kernels work (count-then-write makes two passes, oversized and skewed
// partitions become more work items), the fit (cache sizes and breaks recovered from samples),
// and profile lines written and read back exactly (bounds, cache sizes, legacy lines).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <sstream>

#include "core/common/error.hpp"
#include "models/calibrate.hpp"
#include "models/op_model.hpp"
#include "models/profile.hpp"
#include "tests/test_profile_text.hpp"

#ifdef JOINLAB_TEST_SIM
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/builtin.hpp"
#include "core/experiment/config.hpp"
#include "core/experiment/report.hpp"
#include "core/experiment/runner.hpp"
#include "sim/key_content.hpp"
#endif

namespace joinlab {
namespace {

// A profile holding only operator model `op`, written as text and parsed back.
Profile round_trip(const std::string& op, const PiecewiseModel& m) {
  Profile p;
  p.name = "t";
  p.status = "synthetic (tests)";
  p.gpu.memory = p.host.memory = 1;
  p.gpu.mem_bw = p.host.mem_bw = 1e9;
  p.h2d = p.d2h = p.p2p = p.nic = {1e9, 0};
  p.ops.set(op, m);
  std::ostringstream text;
  write_profile(p, text);
  std::istringstream in(text.str());
  return parse_profile(in, "t.ini");
}

Locality uniform_lookups(double lookups, double bytes, double keys) {
  Locality l;
  l.lookups = lookups;
  l.bytes = bytes;
  l.keys = keys;
  return l;
}

TEST(CacheHits, UniformLookupsHitTheCachedShareOfTheTable) {
  const Locality l = uniform_lookups(1e6, 1e9, 1e7);
  EXPECT_NEAR(cache_hit_fraction(l, 1e8), 0.1, 1e-12);
  EXPECT_NEAR(cache_hit_fraction(l, 5e8), 0.5, 1e-12);
  EXPECT_EQ(cache_hit_fraction(l, 2e9), 1.0) << "a table that fits misses nothing";
  // The general solver gives the same closed form for uniform lookups.
  Locality z0 = l;
  z0.access = KeyAccess::zipf(1e6, 1e7, 0);
  z0.access.heavy = {};  // still uniform, through the general path below
  z0.access.tails.push_back({0.0, 1.0, 0.0, 1.0});  // an empty tail forces the general solver
  EXPECT_NEAR(cache_hit_fraction(z0, 1e8), 0.1, 1e-3);
}

TEST(CacheHits, SkewedLookupsHitMoreAndMoreWithTheExponent) {
  double last = 0;
  for (double z : {0.0, 0.5, 0.75, 1.0, 1.25, 1.5}) {
    Locality l = uniform_lookups(1e8, 2e9, 1e8);
    l.access = KeyAccess::zipf(1e8, 1e8, z);
    const double hit = cache_hit_fraction(l, 3e7);
    EXPECT_GT(hit, last) << "z = " << z;
    last = hit;
  }
  EXPECT_GT(last, 0.95) << "Zipf 1.5: nearly every lookup goes to a few hot keys";
  // Hot keys known one by one count as the top of the law: 90% of the lookups on 10 keys hit
  // (the uniform rest about the cache's share of the table, 0.1% of its 10%).
  Locality h = uniform_lookups(1e6, 1e9, 1e7);
  h.access.heavy = std::vector<double>(10, 9e4);
  h.access.tails.push_back({1e5, 1e7, 0, 11});
  EXPECT_NEAR(cache_hit_fraction(h, 1e6), 0.9, 2e-4);
  h.access.heavy.clear();
  EXPECT_NEAR(cache_hit_fraction(h, 1e6), 1e-3, 1e-9) << "without them, the cache's share";
}

// A probe model whose misses cost: 1 ns per far miss, 0.2 ns per near miss.
PiecewiseModel probe_model() {
  return PiecewiseModel({{0, {1e-5, 1e-12, 2e-12, 0.2e-9, 1e-9}}}, {64e3, 32e6});
}

HashTable table(uint64_t rows, double load) {
  HashTable t;
  t.kind = TableKind::LinearProbing;
  t.fmt = {4, 4};
  t.rows = rows;
  t.slots = hash_table_slots(rows, load);
  return t;
}

Tuples tuples(uint64_t rows) {
  Tuples t;
  t.rows = t.capacity = rows;
  t.fmt = {4, 4};
  return t;
}

TEST(OpModels, SkewLowersThePredictedProbeTime) {
  const HashTable t = table(1 << 26, 0.5);  // 1 GiB: far beyond the cache
  ProbeOp probe{&t, tuples(1 << 26), JoinOutput{}, 0, OutputMode::CountOnly};
  OpResult r;
  r.count = 1 << 26;
  const PiecewiseModel m = probe_model();
  const double uniform = m.seconds(op_sample(probe, r));
  double last = uniform;
  for (double z : {0.5, 1.0, 1.5}) {
    const KeyAccess a = KeyAccess::zipf(double(1 << 26), double(1 << 26), z);
    const double skewed = m.seconds(op_sample(probe, r, &a));
    EXPECT_LT(skewed, last) << "z = " << z;
    last = skewed;
  }
  EXPECT_LT(last, 0.3 * uniform) << "Zipf 1.5 probes hit a few cached keys";
  // The same probe into a table that fits the far cache pays no far misses.
  const HashTable small = table(1 << 20, 0.5);  // 16 MiB
  ProbeOp in_cache{&small, tuples(1 << 26), JoinOutput{}, 0, OutputMode::CountOnly};
  const OpSample s = op_sample(in_cache, r);
  const std::vector<double> x = m.features(s);
  ASSERT_EQ(x.size(), 5u);
  EXPECT_EQ(x[4], 0.0) << "no far misses";
  EXPECT_GT(x[3], 0.9 * double(1 << 26)) << "a 64 KB near cache still misses";
}

TEST(OpModels, CountThenWriteMakesTwoPassesDirectOne) {
  const HashTable t = table(1 << 20, 0.5);
  JoinOutput out;
  out.capacity = 1 << 20;
  OpResult r;
  r.count = 1 << 20;
  const OpSample direct = op_sample(ProbeOp{&t, tuples(1 << 20), out, 0, OutputMode::Direct}, r);
  const OpSample exact = op_sample(ProbeOp{&t, tuples(1 << 20), out, 0, OutputMode::CountThenWrite}, r);
  const OpSample count = op_sample(ProbeOp{&t, tuples(1 << 20), out, 0, OutputMode::CountOnly}, r);
  EXPECT_EQ(exact.x[1], 2 * direct.x[1]) << "the probe side is read twice";
  EXPECT_EQ(exact.locality.lookups, 2 * direct.locality.lookups);
  EXPECT_EQ(exact.x[2], direct.x[2]) << "the output is written once";
  EXPECT_EQ(count.x[1], direct.x[1]);
  EXPECT_EQ(count.x[2], 0.0);
  const PiecewiseModel m = probe_model();
  EXPECT_GT(m.seconds(exact), m.seconds(direct));
  EXPECT_GT(m.seconds(direct), m.seconds(count));
}

TEST(OpModels, BuildCollisionsGrowWithTheLoadFactor) {
  HashTable low = table(1 << 20, 0.25), half = table(1 << 20, 0.5);
  const OpSample a = op_sample(BuildOp{tuples(1 << 20), &low}, OpResult{});
  const OpSample b = op_sample(BuildOp{tuples(1 << 20), &half}, OpResult{});
  EXPECT_EQ(a.x[1], b.x[1]);
  EXPECT_NEAR(a.x[2] / a.x[1], 0.5 * 0.25 / 0.75, 1e-12);
  EXPECT_NEAR(b.x[2] / b.x[1], 0.5, 1e-12);
  EXPECT_EQ(b.segment, 2.0 * double(1 << 20) * 8) << "table bytes";
}

Partitioned partitions(const std::vector<uint64_t>& counts) {
  std::vector<uint64_t> offsets{0};
  for (uint64_t c : counts) offsets.push_back(offsets.back() + c);
  Partitioned p;
  p.all = tuples(offsets.back());
  p.offsets = offsets;
  return p;
}

TEST(OpModels, OversizedAndSkewedPartitionsBecomeMoreWorkItems) {
  // 4-byte keys and values: a 64 KB shared-memory table holds 4096 R rows (partitioned_join.cu).
  const Partitioned r = partitions({4096, 4096, 4096, 4096});
  const Partitioned s = partitions({4096, 4096, 4096, 4096});
  const OpSample even = op_sample(PartitionedJoinOp{r, s, JoinOutput{}, 0, OutputMode::CountOnly}, OpResult{});
  EXPECT_EQ(even.x[3], 4.0) << "one item per partition pair";
  EXPECT_EQ(even.x[4], 4 * (2.0 + 2.0)) << "rounds of 2048 rows: two to build, two to probe";
  EXPECT_EQ(even.x[5], 0.0);
  EXPECT_EQ(even.x[6], 0.0);
  // R partition 0 twice the table: two chunks, each probed by all of S's partition 0.
  const OpSample big_r = op_sample(
      PartitionedJoinOp{partitions({8192, 4096, 4096, 4096}), s, JoinOutput{}, 0, OutputMode::CountOnly}, OpResult{});
  EXPECT_EQ(big_r.x[3], 5.0);
  EXPECT_EQ(big_r.x[6], 4096.0 * 8) << "S partition 0 read once more";
  // S partition 0 holding 40000 rows: sliced (at 16384 rows) into 3, R's chunk rebuilt per slice.
  const OpSample hot_s = op_sample(
      PartitionedJoinOp{r, partitions({40000, 4096, 4096, 4096}), JoinOutput{}, 0, OutputMode::CountOnly}, OpResult{});
  EXPECT_EQ(hot_s.x[3], 6.0);
  EXPECT_EQ(hot_s.x[5], 2 * 4096.0 * 8) << "R partition 0 built twice more";
  // Its three slices probe 16384, 16384 and 7232 rows: 8 + 8 + 4 rounds, each after a 2-round build.
  EXPECT_EQ(hot_s.x[4], 3 * 2.0 + 20.0 + 3 * 4.0);
}

Partitioned with_device_offsets(Partitioned p) {
  p.offsets_copy = std::make_shared<BufferImpl>();
  p.offsets_copy->space = MemSpace::Device;
  p.offsets_copy->bytes = p.offsets.size() * sizeof(uint64_t);
  return p;
}

TEST(OpModels, JoinItemsListedOnTheHostOnlyWithoutDeviceOffsetsOrWhenSplit) {
  const Partitioned r = partitions({4096, 4096, 4096, 4096}), s = partitions({4096, 4096, 4096, 4096});
  auto host_items = [](const Partitioned& a, const Partitioned& b) {
    return op_sample(PartitionedJoinOp{a, b, JoinOutput{}, 0, OutputMode::CountOnly}, OpResult{}).x[7];
  };
  EXPECT_EQ(host_items(r, s), 4.0) << "offsets only on the host: the host lists the items";
  EXPECT_EQ(host_items(with_device_offsets(r), with_device_offsets(s)), 0.0) << "listed on the device";
  EXPECT_EQ(host_items(with_device_offsets(r), s), 4.0) << "both sides' offsets are needed on the device";
  EXPECT_EQ(host_items(with_device_offsets(r), with_device_offsets(partitions({40000, 4096, 4096, 4096}))), 6.0)
      << "a sliced pair: the host splits the items";
  auto host_lists = [](const Partitioned& a, const Partitioned& b) {
    return op_sample(PartitionedJoinOp{a, b, JoinOutput{}, 0, OutputMode::CountThenWrite}, OpResult{}).x[8];
  };
  EXPECT_EQ(host_lists(r, s), 1.0) << "one list per run (not per pass)";
  EXPECT_EQ(host_lists(with_device_offsets(r), with_device_offsets(s)), 0.0);
}

TEST(OpModels, SkewedKeysSendTheMsdSortsHotPartitionsToCub) {
  const double n = double(1 << 24);
  Tuples in = tuples(1 << 24);
  SortOp op{in, in, SortAlgo::Radix};
  const KeyAccess uniform = KeyAccess::zipf(n, n, 0), z15 = KeyAccess::zipf(n, n, 1.5), z1 = KeyAccess::zipf(n, n, 1.0);
  const OpSample none = op_sample(op, OpResult{}), flat = op_sample(op, OpResult{}, &uniform);
  const OpSample hot = op_sample(op, OpResult{}, &z15), warm = op_sample(op, OpResult{}, &z1);
  EXPECT_EQ(flat.x, none.x) << "uniform keys: every partition fits a block";
  EXPECT_EQ(flat.x[2], 0.0);
  const double tb = in.fmt.tuple_bytes();
  // Zipf 1.5: the top key holds 1/zeta(1.5) = 38% of the rows; every partition too large for a
  // block (hot keys down to ~150th) goes to one gathered CUB device sort: most of the rows.
  EXPECT_GT(hot.x[2], 0.85 * n * tb);
  EXPECT_LE(hot.x[2], 1.0 * n * tb);
  EXPECT_EQ(hot.x[3], 3.0) << "the oversized partitions gathered, sorted, copied back: three CUB calls";
  EXPECT_EQ(hot.x[4], 0.0) << "no segmented sort";
  // Zipf 1: the top key holds about 6% (1 M rows), the next ones 3%, 2%, ...: fewer rows to CUB.
  EXPECT_EQ(warm.x[3], 3.0);
  EXPECT_GT(warm.x[2], 0.0);
  EXPECT_LT(warm.x[2], hot.x[2]);
  // One hot key of 20000 rows over uniform keys: its partition alone outgrows a block, copied and
  // sorted (one CUB call, no gather).
  KeyAccess one = KeyAccess::uniform(n - 20000, n - 1);
  one.heavy = {20000};
  const OpSample single = op_sample(op, OpResult{}, &one);
  EXPECT_EQ(single.x[3], 1.0);
  EXPECT_GT(single.x[2], 20000 * tb);
  EXPECT_LT(single.x[2], 30000 * tb);
}

// The MSD sort's cost steps with its plan (kernels/cuda/sort.cu, partition.cu), not smoothly with
// the rows: the plan follows the kernel's choice of bits from the rows and the sampled key range.
TEST(OpModels, MsdSortPlanFollowsTheKernelsBits) {
  const double k22 = double(1 << 22);
  const MsdPlan six = msd_plan(1.5 * k22, 1.5 * k22, 4, 4);  // 6Mi dense keys: 23 bits, 12 low
  EXPECT_EQ(six.bits, 11);
  EXPECT_EQ(six.passes, 2) << "11 bits > the scatter's 9: two passes";
  EXPECT_EQ(six.hist_reads, 1) << "2^11 joint counts fit shared memory: one histogram read";
  EXPECT_EQ(six.blocks, 2048.0) << "partitions of 3072 rows";
  // The sampled largest of the dense keys 1..n is a little below n; the plan adds 1/16 of it
  // (sort.cu's test is rows * 2^(low+1) / range <= 4096), so 6Mi keeps 12 low bits.
  EXPECT_EQ(msd_plan(1.5 * k22, msd_sampled_max(1.5 * k22, 1.5 * k22), 4, 4).bits, 11) << "partitions of 3072 rows";
  const MsdPlan four = msd_plan(k22, msd_sampled_max(k22, k22), 4, 4);
  EXPECT_EQ(four.bits, 10) << "the sampled range of 1..2^22 is below 2^22: 22 bits, 12 low ones (2^22 itself clamped)";
  EXPECT_EQ(msd_plan(k22, k22, 4, 4).bits, 11) << "an exact max of 2^22 needs 23 bits, 12 low ones";
  const MsdPlan one = msd_plan(k22 / 4, msd_sampled_max(k22 / 4, k22 / 4), 4, 4);
  EXPECT_EQ(one.passes, 1) << "8 bits: one scatter pass";
  EXPECT_EQ(msd_plan(k22 / 2, msd_sampled_max(k22 / 2, k22 / 2), 8, 8).passes, 2) << "16-byte tuples: 8 bits per pass";
  const MsdPlan big = msd_plan(48 * k22, 48 * k22, 4, 4);  // 192Mi: 28 bits, 16 partitioned
  EXPECT_EQ(big.bits, 16);
  EXPECT_EQ(big.passes, 2);
  EXPECT_EQ(big.hist_reads, 2) << "2^16 joint counts exceed shared memory: a histogram read per pass";
  EXPECT_FALSE(msd_plan(128 * k22, 128 * k22, 8, 8).msd) << "17 bits > 2 x 8: CUB's onesweep sort";
  const MsdPlan tiny = msd_plan(4000, 4000, 4, 4);
  EXPECT_EQ(tiny.passes, 0);
  EXPECT_EQ(tiny.blocks, 1.0);
  // The sample's features (keys 1..6Mi, sampled range): the local sort's bytes, each pass's bytes,
  // the histogram reads, the passes and the blocks.
  Tuples in = tuples(3 << 21);
  const OpSample s = op_sample(SortOp{in, in, SortAlgo::Radix}, OpResult{});
  const double bytes = double(3 << 21) * in.fmt.tuple_bytes();
  ASSERT_EQ(s.x.size(), 10u);
  EXPECT_EQ(s.x[1], bytes);
  EXPECT_EQ(s.x[5], 2 * bytes);
  EXPECT_EQ(s.x[6], double(3 << 21) * in.fmt.key_bytes);
  EXPECT_EQ(s.x[7], 2.0);
  EXPECT_EQ(s.x[8], 2048.0);
  EXPECT_EQ(s.x[9], 2048.0 * 4096) << "2^12 counters per block";
  // Keys spread over 4 and 8 times the rows (calibrate's wide sorts): 13 low bits per block.
  auto plan_of = [&](double spread) {
    const KeyAccess keys = KeyAccess::uniform(double(1 << 22), spread * double(1 << 22));
    const OpSample w = op_sample(SortOp{tuples(1 << 22), in, SortAlgo::Radix}, OpResult{}, &keys);
    return std::make_pair(w.x[8], w.x[9] / w.x[8]);
  };
  EXPECT_EQ(plan_of(1), std::make_pair(1024.0, 4096.0));
  EXPECT_EQ(plan_of(4), std::make_pair(2048.0, 8192.0));
  EXPECT_EQ(plan_of(8), std::make_pair(4096.0, 8192.0));
}

// A chunk partition costs the same whether its offsets come from the host or from a scan on the
// device (whose partition sizes come back as the partitions' starts in its result).
TEST(OpModels, ChunkPartitionCostsTheSameWithOffsetsOnTheDevice) {
  const PartitionFn fn{PartitionFn::Radix, 2, 0, 0};
  const std::vector<uint64_t> hist = {10, 0, 30, 60, 5, 5, 90, 0, 0, 100, 0, 0};  // 3 chunks x 4, skewed
  const ChunkLayout l = chunked_layout(hist, fn.fanout(), 3);
  ChunkPartitionOp host;
  host.chunks = {tuples(100), tuples(100), tuples(100)};
  host.fn = fn;
  host.offsets = l.offsets;
  host.cached_chunks = 3;
  host.cache = tuples(300);
  ChunkPartitionOp device = host;
  device.offsets.clear();
  device.offsets_on_device = std::make_shared<BufferImpl>();
  OpResult starts;
  starts.values = l.cache_starts;
  const OpSample a = op_sample(host, OpResult{}), b = op_sample(device, starts);
  EXPECT_EQ(a.model, b.model);
  EXPECT_EQ(a.x, b.x);
  EXPECT_EQ(a.segment, b.segment);
  EXPECT_GT(a.x[3], 75.0) << "skewed partitions: more than rows / fanout";
}

TEST(OpModels, SkewedPartitionsCountTheirContention) {
  PartitionOp p{tuples(1000), {}, PartitionFn{PartitionFn::Radix, 2, 0, 0}, tuples(1000)};
  OpResult even, skewed;
  even.values = {0, 250, 500, 750, 1000};
  skewed.values = {0, 1000, 1000, 1000, 1000};
  EXPECT_NEAR(op_sample(p, even).x[3], 250.0, 1e-9);
  EXPECT_NEAR(op_sample(p, skewed).x[3], 1000.0, 1e-9);
  EXPECT_EQ(op_sample(p, even).x[2], 4.0) << "partitions written";
  PartitionOp second{tuples(1000), {0, 500, 1000}, PartitionFn{PartitionFn::Radix, 2, 1, 0}, tuples(1000)};
  OpResult r2;
  r2.values = {0, 125, 250, 375, 500, 625, 750, 875, 1000};
  EXPECT_EQ(op_sample(second, r2).x[2], 8.0) << "2 segments x fanout 4";
}

// Synthetic probe samples from a known model: sizes 2^16..2^26 rows, Zipf 0..1.25, both modes.
std::vector<OpSample> probe_samples(const PiecewiseModel& truth) {
  std::vector<OpSample> v;
  static std::vector<std::unique_ptr<HashTable>> keep;
  for (int k = 16; k <= 26; ++k)
    for (double z : {0.0, 0.5, 1.0, 1.25})
      for (OutputMode mode : {OutputMode::CountOnly, OutputMode::Direct}) {
        keep.push_back(std::make_unique<HashTable>(table(uint64_t(1) << k, 0.5)));
        JoinOutput out;
        out.capacity = uint64_t(1) << k;
        out.r_fmt = out.s_fmt = {4, 4};
        OpResult r;
        r.count = uint64_t(1) << k;
        const KeyAccess a = KeyAccess::zipf(double(r.count), double(r.count), z);
        OpSample s = op_sample(ProbeOp{keep.back().get(), tuples(uint64_t(1) << k), out, 0, mode}, r, &a);
        s.seconds = truth.seconds(s);
        v.push_back(s);
      }
  return v;
}

TEST(OpModelFit, CacheSizesAndCoefficientsAreRecovered) {
  const PiecewiseModel truth({{0, {2e-5, 1.5e-12, 3e-12, 0.3e-9, 1.2e-9}}}, {std::round(4096 * std::pow(2.0, 4)),
                                                                            std::round(double(1 << 20) * std::pow(2.0, 5))});
  const std::vector<OpSample> samples = probe_samples(truth);
  FitReport rep;
  const PiecewiseModel fit = fit_model(*find_model_spec("probe.linear"), samples, false, {}, &rep);
  EXPECT_LT(rep.rms_rel_error, 1e-6);
  ASSERT_EQ(fit.caches().size(), 2u);
  EXPECT_EQ(fit.caches()[0], truth.caches()[0]);
  EXPECT_EQ(fit.caches()[1], truth.caches()[1]);
  // Unseen: a size between the sampled ones, a skew between.
  HashTable t = table(3 << 22, 0.5);
  OpResult r;
  r.count = 3 << 22;
  const KeyAccess a = KeyAccess::zipf(double(r.count), double(r.count), 0.75);
  const OpSample unseen = op_sample(ProbeOp{&t, tuples(3 << 22), JoinOutput{}, 0, OutputMode::CountOnly}, r, &a);
  EXPECT_NEAR(fit.seconds(unseen), truth.seconds(unseen), 1e-6 * truth.seconds(unseen));
}

// A fitted cache level never exceeds the last-level cache given as the bound (calibrate passes
// the GPU's L2): a 32 MiB level is recovered under a 48 MB bound, and under a 16 MiB bound the far
// level stays at or below it (on warm calibration runs the h100 fit chose a 95 MB "L2" on a 50 MB
// chip, 2026-11-22).
TEST(OpModelFit, CacheLevelsStayWithinTheLastLevelCache) {
  const double far = double(1 << 20) * 32;
  const PiecewiseModel truth({{0, {2e-5, 1.5e-12, 3e-12, 0.3e-9, 1.2e-9}}}, {65536, far});
  const std::vector<OpSample> samples = probe_samples(truth);
  const ModelSpec& spec = *find_model_spec("probe.linear");
  FitReport rep;
  const PiecewiseModel within = fit_model(spec, samples, false, {}, &rep, 48e6);
  ASSERT_EQ(within.caches().size(), 2u);
  EXPECT_EQ(within.caches()[1], far);
  EXPECT_LT(rep.rms_rel_error, 1e-6);
  const PiecewiseModel capped = fit_model(spec, samples, false, {}, &rep, 16.0 * (1 << 20));
  ASSERT_EQ(capped.caches().size(), 2u);
  EXPECT_LE(capped.caches()[0], 16.0 * (1 << 20));
  EXPECT_LE(capped.caches()[1], 16.0 * (1 << 20));
  EXPECT_GT(rep.rms_rel_error, 1e-6) << "the true level is not among the allowed sizes";
}

// A slope that changes at a table size (a cache edge without a cache term): the automatic break
// lands between the sampled sizes, and a profile written and read back keeps a table of exactly
// a sampled size on its side (the 2026-11-22 h100 profile wrote 2^27 as 1.34218e+08, above it).
TEST(OpModelFit, BreaksLieBetweenSampledSizesAndSurviveTheProfile) {
  std::vector<OpSample> samples;
  for (int k = 20; k <= 30; ++k) {
    OpSample s;
    s.model = "gather";
    const double bytes = std::ldexp(1.0, k);
    s.x = {1.0, bytes / 4};
    s.segment = bytes;
    s.seconds = 1e-5 + (bytes < std::ldexp(1.0, 27) ? 1e-12 : 4e-12) * bytes / 4;
    samples.push_back(s);
  }
  FitReport rep;
  const PiecewiseModel m = fit_model(*find_model_spec("gather"), samples, true, {}, &rep);
  ASSERT_EQ(m.pieces().size(), 2u);
  EXPECT_GT(m.pieces()[1].lower, std::ldexp(1.0, 26));
  EXPECT_LT(m.pieces()[1].lower, std::ldexp(1.0, 27));
  const Profile back = round_trip("gather", m);
  for (auto& s : samples) EXPECT_NEAR(back.ops.seconds(s), s.seconds, 1e-4 * s.seconds) << s.segment;
}

// A partitioning piece of one fanout has one partition count: that feature is a multiple of the
// constant, and the fixed cost must stay the constant's whatever the samples' last digits are (the
// pivoting solver gave it to the partitions on some offsets of the simulated clock, and the model
// then charged a pass of 10^8 partitions 400 times its cost). Likewise a feature that is the sum
// of two earlier ones is left out, not given a share.
TEST(OpModelFit, FeaturesTheEarlierOnesExplainGetNoWeightWhateverTheRounding) {
  const ModelSpec& spec = *find_model_spec("partition");
  for (double wobble : {0.0, 1e-16, -1e-16, 3e-16, -2e-16, 5e-16}) {
    std::vector<OpSample> samples;
    for (int k = 16; k <= 20; ++k)
      for (double fanout : {32.0, 64.0}) {
        OpSample s;
        s.model = "partition";
        const double bytes = 8 * std::ldexp(1.0, k);
        s.x = {1.0, bytes, fanout, bytes + 3 * fanout};  // skew_rows: bytes_in + 3 x partitions here
        s.segment = fanout;
        s.seconds = (1e-5 + 2e-12 * bytes) * (1 + wobble * (k - 18));
        samples.push_back(s);
      }
    const PiecewiseModel m = fit_model(spec, samples, false, {64}, nullptr);
    ASSERT_EQ(m.pieces().size(), 2u);
    for (auto& piece : m.pieces()) {
      EXPECT_NEAR(piece.coef[0], 1e-5, 1e-9) << "wobble " << wobble << ", fanout from " << piece.lower;
      EXPECT_EQ(piece.coef[2], 0.0) << "wobble " << wobble;
      EXPECT_EQ(piece.coef[3], 0.0) << "wobble " << wobble;
    }
    OpSample many;  // a pass over 10^8 partitions costs what its bytes do
    many.model = "partition";
    many.x = {1.0, 3e8, 1e8, 0};
    many.segment = 1e6;
    EXPECT_NEAR(m.seconds(many), 1e-5 + 2e-12 * 3e8, 1e-6) << "wobble " << wobble;
  }
}

// A fixed cost per operator run (launches, uploads, host syncs) is the models' constant
// (x[0] = 1): fitted with relative errors over sizes from 2^14 rows (where it is the whole time)
// up, with the large sizes scattering by +-3% as measured runs do, it is recovered, the model
// predicts it at tiny sizes, and the profile keeps it.
TEST(OpModelFit, FixedCostIsRecoveredFromTinySizesAndSurvivesTheProfile) {
  const double fixed = 8e-5, per_byte = 7e-13;
  std::vector<OpSample> samples;
  for (int k = 14; k <= 28; ++k) {
    OpSample s;
    s.model = "scan";
    const double bytes = 8 * std::ldexp(1.0, k);
    s.x = {1.0, bytes};
    // The large sizes scatter by +-3% (as measured runs do); the tiny ones are the fixed cost.
    s.seconds = (fixed + per_byte * bytes) * (k >= 20 ? (k % 2 ? 1.03 : 0.97) : 1.0);
    samples.push_back(s);
  }
  const PiecewiseModel m = fit_model(*find_model_spec("scan"), samples, false, {});
  ASSERT_EQ(m.pieces().size(), 1u);
  EXPECT_NEAR(m.pieces()[0].coef[0], fixed, 0.05 * fixed);
  EXPECT_NEAR(m.pieces()[0].coef[1], per_byte, 0.05 * per_byte);
  OpSample tiny;
  tiny.model = "scan";
  tiny.x = {1.0, 8.0 * 1024};
  EXPECT_NEAR(m.seconds(tiny), fixed, 0.05 * fixed);
  const Profile back = round_trip("scan", m);
  EXPECT_NEAR(back.ops.get("scan").pieces()[0].coef[0], m.pieces()[0].coef[0], 1e-4 * fixed);
  EXPECT_NEAR(back.ops.seconds(tiny), m.seconds(tiny), 1e-4 * fixed);
}

// calibrate's samples file (--samples, --fit): what was measured comes back exactly, an operator
// sample's time is the median run's plus the stream synchronization that closes it (a strategy's
// phase pays it per operator; a copy's does not), probes keep their lookups, and a bad line is
// named by file and line.
TEST(CalibrationSamples, RoundTripWithTheClosingSynchronization) {
  Calibration c;
  c.machine = "test host, backend cuda";
  c.protocol = "cold: test";
  c.host_mem_bw = 1.25e11;
  c.skipped["p2p"] = "one GPU visible";
  const std::string scan = "cal scan 0 1 8388608";
  const std::string probe = "cal probe.linear 16777216 1 8388608 12582912 | 1048576 16777216 1048576 1048576 1048576 0.75 1";
  add_runs(c, {{scan, 3e-4, 1e-5, 2.5e-4}, {scan, 1e-4, 1e-5, 0.9e-4}, {scan, 2e-4, 2e-5, 1.8e-4},
               {probe, 5e-4, 1e-5, 4e-4}, {"cal link.h2d 0 1 1048576", 4e-5, 1e-5, 0}});
  ASSERT_EQ(c.ops.at("scan").size(), 1u);
  EXPECT_DOUBLE_EQ(c.ops.at("scan")[0].seconds, 2e-4 + 2e-5) << "median of run + sync (1.1e-4, 2.2e-4, 3.1e-4)";
  ASSERT_EQ(c.links.at("h2d").size(), 1u);
  EXPECT_EQ(c.links.at("h2d")[0].seconds, 4e-5) << "a copy is waited for on its own: no closing sync";
  std::stringstream file;
  write_samples(c, file);
  const Calibration back = read_samples(file, "s.txt");
  EXPECT_EQ(back.machine, c.machine);
  EXPECT_EQ(back.protocol, c.protocol);
  EXPECT_EQ(back.host_mem_bw, c.host_mem_bw);
  EXPECT_EQ(back.skipped.at("p2p"), "one GPU visible");
  ASSERT_EQ(back.runs.size(), 5u);
  EXPECT_EQ(back.runs[2].sync_seconds, 2e-5);
  EXPECT_EQ(back.runs[2].device_seconds, 1.8e-4);
  EXPECT_EQ(back.ops.at("scan")[0].seconds, c.ops.at("scan")[0].seconds);
  const OpSample& p = back.ops.at("probe.linear").at(0);
  EXPECT_EQ(p.seconds, 5e-4 + 1e-5);
  EXPECT_EQ(p.segment, 16777216);
  EXPECT_EQ(p.locality.lookups, 1048576);
  ASSERT_EQ(p.locality.access.tails.size(), 1u);
  EXPECT_EQ(p.locality.access.tails[0].zipf, 0.75);
  std::istringstream bad("# machine: x\n1e-4 0 0 cal scan 0 1 8\n1e-4 zero 0 cal scan 0 1 8\n");
  try {
    read_samples(bad, "bad.txt");
    ADD_FAILURE() << "accepted a line without its sync time";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.txt:3:"), std::string::npos) << e.what();
  }
  std::istringstream not_cal("1e-4 0 0 setup\n");
  EXPECT_THROW(read_samples(not_cal, "x.txt"), InputError);
}

// A model a profile calibrated before it existed is costed by its stand-in: mgsmj's two-run merge
// as a merge join whose output is its input, until the profile has a merge model of its own.
TEST(OpModelsTest, AModelMissingFromAProfileIsCostedByItsStandIn) {
  OpModels m;
  OpSample s;
  s.model = "merge";
  s.x = {1.0, 1e9, 1e9};
  EXPECT_THROW(m.seconds(s), RuntimeError) << "no merge and no merge_join model";
  m.set("merge_join", PiecewiseModel({ModelPiece{0, {1e-5, 1e-12, 2e-12}}}));
  EXPECT_NEAR(m.seconds(s), 1e-5 + 3e-3, 1e-9);
  m.set("merge", PiecewiseModel({ModelPiece{0, {2e-5, 1e-12, 1e-12}}}));
  EXPECT_NEAR(m.seconds(s), 2e-5 + 2e-3, 1e-9);
  s.model = "sort.merge";  // no stand-in: required
  EXPECT_THROW(m.seconds(s), RuntimeError);
}

TEST(CalibrationSamples, CpuRatesPerCoreAloneAndUnderFullLoad) {
  // The same scan of 1 MiB (its feature: bytes) on one core in 1 ms and on all 4 cores at once in
  // 0.5 ms: 1.05 GB/s for the core alone, 0.52 GB/s per core of the loaded 4.
  Calibration c;
  c.cpu_threads_all = 4;
  add_runs(c, {{std::string("cal ") + kSingleCore + "scan 0 1 1048576", 1e-3, 0, 0},
               {std::string("cal ") + kAllCores + "scan 0 1 1048576", 0.5e-3, 0, 0}});
  const auto one = cpu_rates(c), loaded = loaded_cpu_rates(c);
  ASSERT_TRUE(one.count("scan") && loaded.count("scan"));
  EXPECT_NEAR(one.at("scan").first, 1048576 / 1e-3, 1e3);
  EXPECT_NEAR(loaded.at("scan").first, 1048576 / 0.5e-3 / 4, 1e3);
  EXPECT_NE(loaded.at("scan").second.find("4 threads"), std::string::npos) << loaded.at("scan").second;
  std::stringstream file;
  write_samples(c, file);
  const Calibration back = read_samples(file, "s.txt");
  EXPECT_EQ(back.cpu_threads_all, 4);
  EXPECT_EQ(loaded_cpu_rates(back).at("scan").first, loaded.at("scan").first);
  c.cpu_threads_all = 0;  // a samples file from before the all-core pass: no loaded rates
  EXPECT_TRUE(loaded_cpu_rates(c).empty());
}

// The profile a calibration on `backend` fits from `c` over an empty profile named "base".
static Profile fit_over_empty(const Calibration& c, const std::string& backend) {
  CalibrationOptions opt;
  opt.backend = backend;
  Profile base;
  base.name = "base";
  return fit_profile(c, base, opt);
}

// The profile a GPU calibration fits from `c` over the synthetic test machine.
static Profile fit_on_synthetic_machine(const Calibration& c) {
  CalibrationOptions opt;
  opt.backend = "cuda";
  opt.name = "fitted";
  std::istringstream in(test::synthetic_machine("base"));
  return fit_profile(c, parse_profile(in, "base.ini"), opt);
}

// Every core busy in teams: the samples "cputeam<threads>.<model>" become [cpu] loaded.<kind>.<threads>
// (per thread of a team), the profile writes them and reads them back, and an operator's loaded
// rate follows its team size in log2(threads) between them and the one team of every core.
TEST(CalibrationSamples, LoadedRatesFollowTheOperatorsTeamSize) {
  Calibration c;
  c.host_mem_bw = 50e9;
  c.cpu_sockets = 1;
  c.cpu_cores = 64;
  c.cpu_threads_all = 64;
  // 1 GiB partitioned in 1 s on one core; on all 64 at once: one team 1.6 s per GiB per thread,
  // teams of 32 and 16 threads 1.2 s (64 / 32 / 16 GiB over the host, as many bytes per thread).
  const double gib = double(uint64_t(1) << 30);
  const auto run = [&](const std::string& prefix, double bytes, double seconds) {
    return CalibrationRun{"cal " + prefix + "partition 16 1 " + std::to_string(uint64_t(bytes)) + " 16 0", seconds, 0, 0};
  };
  add_runs(c, {run(kSingleCore, gib, 1.0), run(kAllCores, 64 * gib, 1.6), run(kTeamCores + std::string("32."), 32 * gib, 1.2),
               run(kTeamCores + std::string("16."), 16 * gib, 1.2)});
  const auto teams = team_loaded_cpu_rates(c);
  ASSERT_EQ(teams.size(), 2u);
  EXPECT_NEAR(teams.at(32).at("partition").first, gib / 1.2, 1e3);
  EXPECT_NE(teams.at(16).at("partition").second.find("all-core (4 teams of 16 threads at once)"), std::string::npos)
      << teams.at(16).at("partition").second;
  const Profile p = fit_on_synthetic_machine(c);
  ASSERT_EQ(p.cpu.team_loaded.at("partition").size(), 2u);
  const double one = gib, full = gib / 1.6, team = gib / 1.2;
  EXPECT_NEAR(p.cpu.per_thread_rate("partition", 1, 64, 16), one, 1e3);  // alone: the core's own rate
  EXPECT_NEAR(p.cpu.per_thread_rate("partition", 64, 64, 16), team, 1e3);
  EXPECT_NEAR(p.cpu.per_thread_rate("partition", 64, 64, 8), team, 1e3);  // below the smallest team: its rate
  EXPECT_NEAR(p.cpu.per_thread_rate("partition", 64, 64, 64), full, 1e3);
  EXPECT_NEAR(p.cpu.per_thread_rate("partition", 64, 64, 0), full, 1e3);           // no team given: every core
  EXPECT_NEAR(p.cpu.per_thread_rate("partition", 64, 64, 45), (team + full) / 2, 2e6);  // 2^5.5 threads: halfway
  EXPECT_NEAR(p.cpu.per_thread_rate("histogram", 64, 64, 16), p.cpu.per_thread_rate("histogram", 64, 64), 1e-6);
  std::stringstream text;
  write_profile(p, text);
  EXPECT_NE(text.str().find("loaded.partition.16"), std::string::npos);
  std::istringstream in(text.str());
  const Profile back = parse_profile(in, "t.ini");
  EXPECT_NEAR(back.cpu.team_loaded.at("partition").at(32), team, team * 1e-5);
}

// The own cost is the slope of the time against the operator count, robust to one noisy count: 1 GiB
// counted in k = 1, 2, 4, 8, 16 histograms in k x 2 ms + B / R, except that the 2-operator runs
// were slowed by 30 ms (a neighbour's burst), gives 2 ms, where the two-point difference of 1 and
// 2 operators would give 32 ms.
TEST(CalibrationSamples, AParallelOperatorsOwnCostIsTheSlopeOverTheOperatorCounts) {
  Calibration c;
  c.cpu_sockets = 1;
  c.cpu_cores = c.cpu_threads_all = 32;
  const double gib = double(uint64_t(1) << 30), rate = 16 * 2e9, o = 2e-3;
  std::vector<CalibrationRun> runs;
  for (int k : {1, 2, 4, 8, 16})
    for (int r = 0; r < 3; ++r)
      runs.push_back({"cal " + std::string(kTeamCores) + "16.op_overhead." + (k == 1 ? "whole " : "batched ") +
                          std::to_string(k) + " 1 " + std::to_string(uint64_t(gib)),
                      k * o + gib / rate + (k == 2 ? 30e-3 : 0.0), 0, 0});
  add_runs(c, runs);
  const CpuOpOverhead overhead = cpu_op_overhead(c);
  EXPECT_NEAR(overhead.by_team.at(16), o, 1e-9);
  EXPECT_EQ(overhead.operators, "1/2/4/8/16");
  EXPECT_NE(overhead.how.find("1/2/4/8/16 histograms"), std::string::npos) << overhead.how;
}

// A parallel operator's own cost from the team passes: 1 GiB of keys counted whole in o + B / R
// and in 8 histograms in 8 o + B / R gives o (median over the team sizes), the loaded rates are
// taken net of it, and the profile writes it and reads it back.
TEST(CalibrationSamples, AParallelOperatorsOwnCostIsWhatExtraBatchesCost) {
  Calibration c;
  c.host_mem_bw = 50e9;
  c.cpu_sockets = 1;
  c.cpu_cores = 32;
  c.cpu_threads_all = 32;
  const double gib = double(uint64_t(1) << 30), rate = 16 * 2e9;  // 16 threads of 2 GB/s
  const auto run = [&](const std::string& team, const std::string& model, int ops, double bytes, double seconds) {
    return CalibrationRun{"cal " + std::string(kTeamCores) + team + "." + model + " " + std::to_string(ops) + " 1 " +
                              std::to_string(uint64_t(bytes)),
                          seconds, 0, 0};
  };
  std::vector<CalibrationRun> runs;
  for (const auto& [team, o] : std::vector<std::pair<std::string, double>>{{"16", 1e-3}, {"8", 3e-3}}) {
    runs.push_back(run(team, "op_overhead.whole", 1, gib, o + gib / rate));
    runs.push_back(run(team, "op_overhead.batched", 8, gib, 8 * o + gib / rate));
    runs.push_back(run(team, "op_overhead.batched", 8, gib, 8 * o + gib / rate));
  }
  // The partition on one core, and in the 16-thread team: 1 GiB per thread in o + 1 GiB / 1 GB/s.
  runs.push_back({"cal " + std::string(kSingleCore) + "partition 16 1 " + std::to_string(uint64_t(gib)) + " 16 0", 1.0, 0, 0});
  runs.push_back({"cal " + std::string(kTeamCores) + "16.partition 16 1 " + std::to_string(uint64_t(16 * gib)) + " 16 0",
                  1e-3 + gib / 1e9, 0, 0});
  add_runs(c, runs);
  const CpuOpOverhead overhead = cpu_op_overhead(c);
  EXPECT_NEAR(overhead.seconds, 3e-3, 1e-9);  // the median of {1 ms, 3 ms}: the upper one of two
  EXPECT_NEAR(overhead.by_team.at(16), 1e-3, 1e-9);
  EXPECT_NEAR(overhead.by_team.at(8), 3e-3, 1e-9);
  EXPECT_NE(overhead.how.find("16 threads 1.000 ms"), std::string::npos) << overhead.how;
  const double net = 16 * gib / 16 / (gib / 1e9);  // the 16-thread team's partition net of its own 1 ms
  EXPECT_NEAR(team_loaded_cpu_rates(c).at(16).at("partition").first, net, net * 1e-9);
  const Profile p = fit_on_synthetic_machine(c);
  EXPECT_NEAR(p.cpu.op_overhead, 3e-3, 1e-9);
  EXPECT_NEAR(p.cpu.operator_overhead(16), 1e-3, 1e-9);
  EXPECT_NEAR(p.cpu.operator_overhead(8), 3e-3, 1e-9);
  EXPECT_NEAR(p.cpu.operator_overhead(4), 3e-3, 1e-9);                        // below the smallest team: its own
  EXPECT_NEAR(p.cpu.operator_overhead(std::lround(std::pow(2, 3.5))), 2e-3, 2e-4);  // between: in log2(threads)
  EXPECT_EQ(p.cpu.operator_overhead(1), 0.0);
  std::stringstream text;
  write_profile(p, text);
  std::istringstream in(text.str());
  const Profile back = parse_profile(in, "t.ini");
  EXPECT_NEAR(back.cpu.op_overhead, 3e-3, 1e-12);
  EXPECT_NEAR(back.cpu.team_op_overhead.at(16), 1e-3, 1e-12);
  Calibration none;  // no team samples: none
  EXPECT_EQ(cpu_op_overhead(none).seconds, 0.0);
}

// Peer copies of every size that took alike (in-process copies on a busy machine) leave the fit
// no slope: the link's bandwidth is then the largest copies' median rate, never 0.
TEST(CalibrationSamples, ALinkWithoutASlopeTakesItsLargestCopiesRate) {
  Calibration c;
  std::vector<CalibrationRun> runs;
  for (double bytes : {1 << 20, 1 << 24, 1 << 26})
    runs.push_back({"cal link.p2p 0 1 " + std::to_string(uint64_t(bytes)), 2e-3, 0, 0});
  add_runs(c, runs);
  const Profile p = fit_over_empty(c, "cpu");
  EXPECT_NEAR(p.p2p.bw, double(1 << 26) / 2e-3, 1.0);
  EXPECT_NE(p.notes.at("link.p2p.bw").find("no positive slope"), std::string::npos) << p.notes.at("link.p2p.bw");
}

TEST(CalibrationSamples, TheCpuRoofIsWhatCoresAndDmaDrewTogether) {
  // Cores alone 50 GB/s, the two DMA directions alone 40 GB/s, both at once 80 GB/s: the roof
  // that CPU work and DMA share in the simulator is the 80.
  Calibration c;
  c.host_mem_bw = 50e9;
  c.cpu_sockets = 1;
  c.cpu_cores = 8;
  std::vector<CalibrationRun> runs{{std::string("cal ") + kSingleCore + "scan 0 1 1048576", 1e-3, 0, 0}};
  for (double bytes : {1 << 20, 1 << 24, 1 << 26}) {
    const auto at = [&](const char* link, double bw) {
      return CalibrationRun{"cal link." + std::string(link) + " 0 1 " + std::to_string(uint64_t(bytes)),
                            1e-5 + bytes / bw, 0, 0};
    };
    runs.push_back(at("duplex", 40e9));
    runs.push_back(at("mixed", 80e9));
  }
  add_runs(c, runs);
  const Profile p = fit_over_empty(c, "cuda");
  EXPECT_NEAR(p.cpu.mem_bw, 80e9, 0.01 * 80e9);
  EXPECT_NEAR(p.host.mem_bw, 80e9, 0.01 * 80e9);
  EXPECT_NE(p.notes.at("cpu.mem_bw").find("both at once (80"), std::string::npos) << p.notes.at("cpu.mem_bw");
}

// The copy-concurrency samples become [cpu] copy_rate: bytes copied per second per thread, by the
// threads copying at once; the profile writes them and reads them back, the report prints them,
// and a copy's per-thread rate interpolates them in log2(threads), the loaded copy rate at every core.
TEST(CalibrationSamples, CopyRatesByThreadsCopyingAtOnceFitIntoTheCpuSection) {
  Calibration c;
  c.host_mem_bw = 50e9;
  c.cpu_sockets = 1;
  c.cpu_cores = 32;
  const double bytes = 1 << 30;
  std::vector<CalibrationRun> runs{{std::string("cal ") + kSingleCore + "link.host_copy 0 1 1048576", 1e-3, 0, 0},
                                   {std::string("cal ") + kAllCores + "link.host_copy 0 1 1048576", 1e-3, 0, 0}};
  c.cpu_threads_all = 32;
  // 1 thread 6 GB/s, 4 threads 16 GB/s in all, 8 threads 20 GB/s: per thread 6, 4, 2.5.
  for (auto [n, total] : {std::pair{1, 6e9}, {4, 16e9}, {8, 20e9}})
    runs.push_back({"cal link.copy_threads " + std::to_string(n) + " 1 " + std::to_string(uint64_t(bytes)), bytes / total, 0, 0});
  add_runs(c, runs);
  const Profile p = fit_on_synthetic_machine(c);
  ASSERT_EQ(p.cpu.copy_rate.size(), 3u);
  EXPECT_NEAR(p.cpu.copy_rate.at(1), 6e9, 1e3);
  EXPECT_NEAR(p.cpu.copy_rate.at(4), 4e9, 1e3);
  EXPECT_NEAR(p.cpu.copy_rate.at(8), 2.5e9, 1e3);
  EXPECT_NE(p.notes.at("cpu.copy_rate.8").find("8 threads copying at once"), std::string::npos);
  // Between the points in log2(threads): 2 threads halfway from 6 to 4; every core (32 threads,
  // the all-core pass: 1 MiB in 1 ms on 32 threads) at the loaded copy rate.
  EXPECT_NEAR(p.cpu.copy_thread_rate(2, 32), 5e9, 1e3);
  EXPECT_NEAR(p.cpu.copy_thread_rate(32, 32), p.cpu.loaded.at("copy"), 1e3);
  EXPECT_NEAR(p.cpu.copy_thread_rate(16, 32), (2.5e9 + p.cpu.loaded.at("copy")) / 2, 1e3);
  std::stringstream text;
  write_profile(p, text);
  std::istringstream in(text.str());
  const Profile back = parse_profile(in, "t.ini");
  ASSERT_EQ(back.cpu.copy_rate.size(), p.cpu.copy_rate.size());
  for (auto [n, rate] : p.cpu.copy_rate) EXPECT_NEAR(back.cpu.copy_rate.at(n), rate, rate * 1e-5) << n << " threads";
  const std::vector<std::string> report = link_report(c);
  ASSERT_EQ(report.size(), 1u);
  EXPECT_NE(report[0].find("threads copying at once: 1=6.0 4=16.0 8=20.0"), std::string::npos) << report[0];
}

// The multiway merge's samples by runs become [cpu] merge_runs: each run count's time per byte
// against 2 runs'; the profile writes them and reads them back, the report prints the rates, and
// the factor interpolates in log2(runs), flat beyond the ends (1 without samples).
TEST(CalibrationSamples, MergeCostsByRunsFitIntoTheCpuSection) {
  Calibration c;
  c.host_mem_bw = 50e9;
  c.cpu_sockets = 1;
  c.cpu_cores = 16;
  c.cpu_threads_all = 16;
  std::vector<CalibrationRun> runs{{std::string("cal ") + kSingleCore + "link.host_copy 0 1 1048576", 1e-3, 0, 0},
                                   {std::string("cal ") + kAllCores + "link.host_copy 0 1 1048576", 1e-3, 0, 0}};
  const double bytes = 1 << 30;
  // 2 runs 60 GB/s read and written, 4 runs 40, 8 runs 15.
  for (auto [k, rate] : {std::pair{2, 60e9}, {4, 40e9}, {8, 15e9}})
    runs.push_back({"cal link.merge_runs " + std::to_string(k) + " 1 " + std::to_string(uint64_t(bytes)), bytes / rate, 0, 0});
  add_runs(c, runs);
  const Profile p = fit_on_synthetic_machine(c);
  ASSERT_EQ(p.cpu.merge_runs.size(), 3u);
  EXPECT_NEAR(p.cpu.merge_runs.at(2), 1.0, 1e-9);
  EXPECT_NEAR(p.cpu.merge_runs.at(4), 1.5, 1e-9);
  EXPECT_NEAR(p.cpu.merge_runs.at(8), 4.0, 1e-9);
  EXPECT_NE(p.notes.at("cpu.merge_runs.8").find("8 sorted runs"), std::string::npos);
  EXPECT_NEAR(p.cpu.merge_runs_factor(2), 1.0, 1e-9);
  EXPECT_NEAR(p.cpu.merge_runs_factor(3), 1.0 + 0.5 * std::log2(1.5), 1e-9);  // log2(3) between 1 and 2
  EXPECT_NEAR(p.cpu.merge_runs_factor(64), 4.0, 1e-9);
  EXPECT_NEAR(p.cpu.merge_runs_factor(1), 1.0, 1e-9);
  EXPECT_EQ(CpuSpec{}.merge_runs_factor(8), 1.0);
  std::stringstream text;
  write_profile(p, text);
  std::istringstream in(text.str());
  const Profile back = parse_profile(in, "t.ini");
  ASSERT_EQ(back.cpu.merge_runs.size(), 3u);
  for (auto [k, f] : p.cpu.merge_runs) EXPECT_NEAR(back.cpu.merge_runs.at(k), f, f * 1e-5) << k << " runs";
  const std::vector<std::string> report = link_report(c);
  ASSERT_EQ(report.size(), 1u);
  EXPECT_NE(report[0].find("by the runs merged: 2=60.0 4=40.0 8=15.0"), std::string::npos) << report[0];
}

// Operators alone and two at once (calibrate's "overlap" step) give each kind its share of the
// GPU by input bytes: the ratio of the rates, which the profile writes and reads back; between
// measured sizes the share is linear in log2(bytes), outside them the nearest one's, and it stays
// within [0.5, 1] (two at once no faster than one alone, no slower than one after the other).
TEST(CalibrationSamples, OverlapRunsGiveEachOperatorItsShareOfTheGpu) {
  auto parse_profile_text = [](const std::string& text) {
    std::istringstream in(text);
    return parse_profile(in, "t.ini");
  };
  Calibration c;
  std::vector<CalibrationRun> runs;
  auto run = [&](const std::string& kind, uint64_t bytes, double alone_s, double pair_s) {
    const std::string b = std::to_string(bytes);
    runs.push_back({"cal link.overlap." + kind + ".alone " + b + " 1 " + b, alone_s, 0, 0});
    runs.push_back({"cal link.overlap." + kind + ".pair " + b + " 1 " + std::to_string(2 * bytes), pair_s, 0, 0});
  };
  run("partition", uint64_t(1) << 25, 1e-4, 1.2e-4);  // two at once in 1.2x one's time: share 0.6
  run("partition", uint64_t(1) << 29, 1e-3, 1.9e-3);
  run("copy.device", uint64_t(1) << 27, 1e-4, 2e-4);
  add_runs(c, runs);
  Profile p = parse_profile_text(test::synthetic_machine("base"));
  fit_overlap(c, p);
  EXPECT_NEAR(p.gpu.share.at("partition").at(uint64_t(1) << 25), 0.6, 1e-9);
  EXPECT_NEAR(p.gpu.share.at("partition").at(uint64_t(1) << 29), 0.95, 1e-9);
  EXPECT_NEAR(p.gpu.share.at("copy.device").at(uint64_t(1) << 27), 1.0, 1e-9);
  EXPECT_NE(p.notes.at("gpu.share_partition_33554432").find("two partition operators"), std::string::npos);
  std::stringstream text;
  write_profile(p, text);
  const Profile back = parse_profile_text(text.str());
  for (const auto& [kind, table] : p.gpu.share)
    for (auto [bytes, share] : table) EXPECT_NEAR(back.gpu.share.at(kind).at(bytes), share, 1e-5) << kind << " " << bytes;
  EXPECT_NEAR(op_share(back.gpu, "partition", double(uint64_t(1) << 27)), 0.775, 1e-9) << "halfway in log2(bytes)";
  EXPECT_NEAR(op_share(back.gpu, "partition", 1e3), 0.6, 1e-9) << "below the table: its smallest size's";
  EXPECT_NEAR(op_share(back.gpu, "partition", 1e12), 0.95, 1e-9);
  EXPECT_EQ(op_share(back.gpu, "partitioned_join", 1e8), 1.0) << "not measured: operators share the GPU by time";
  p.gpu.share["partition"][uint64_t(1) << 20] = 0.3;
  EXPECT_EQ(op_share(p.gpu, "partition", 1e3), 0.5) << "no share below half";
}

// The zero-copy link microbenchmark's samples become the link tables: writes into link.d2h, reads
// into link.h2d, both at once into their *_both_ keys; the profile writes them and reads them back,
// and the report prints one line per direction with the rates by granule.
TEST(CalibrationSamples, ZeroCopyRatesFitIntoTheLinkTablesAndTheReport) {
  auto parse_profile_text = [](const std::string& text) {
    std::istringstream in(text);
    return parse_profile(in, "t.ini");
  };
  Calibration c;
  const double bytes = 1 << 30;
  std::vector<CalibrationRun> runs;
  auto run = [&](const std::string& access, uint32_t granule, double rate) {
    runs.push_back({"cal link.zero_copy." + access + " " + std::to_string(granule) + " 1 " +
                        std::to_string(uint64_t(bytes)),
                    bytes / rate, 0, 0});
  };
  for (uint32_t g : kLinkGranules) run("write", g, 1e7 * g);
  run("write", 0, 52e9);
  run("read", 16, 1e9);
  run("read", 4096, 40e9);
  run("read", 0, 50e9);
  run("both", 512, 20e9);
  run("write_beside_copy", 1024, 18e9);
  run("copy_beside_write", 1024, 32e9);
  // The partitioners and prefix sums by fanout: reported, not fitted.
  runs.push_back({"cal link.chunk_partition.shared.host 256 1 " + std::to_string(uint64_t(bytes)), bytes / 8e9, 0, 0});
  runs.push_back({"cal link.chunk_partition.hierarchical.host 64 1 " + std::to_string(uint64_t(bytes)), bytes / 40e9, 0, 0});
  runs.push_back({"cal link.chunk_partition.shared.device 64 1 " + std::to_string(uint64_t(bytes)), bytes / 300e9, 0, 0});
  runs.push_back({"cal link.prefix_sum.cpu 256 1 " + std::to_string(uint64_t(bytes)), bytes / 30e9, 0, 0});
  add_runs(c, runs);
  CalibrationOptions opt;
  opt.backend = "cuda";
  opt.name = "fitted";
  Profile base = parse_profile_text(test::synthetic_machine("base"));
  base.d2h.zero_copy.random[128] = 5e9;  // an earlier figure: replaced by the measured table
  base.d2h.zero_copy.random[8192] = 5e9;
  const Profile p = fit_profile(c, base, opt);
  ASSERT_EQ(p.d2h.zero_copy.random.size(), std::size(kLinkGranules));
  EXPECT_NEAR(p.d2h.zero_copy.random.at(128), 1.28e9, 1e3);
  EXPECT_NEAR(p.d2h.zero_copy.sequential, 52e9, 1e3);
  EXPECT_NEAR(p.h2d.zero_copy.random.at(16), 1e9, 1e3);
  EXPECT_NEAR(p.h2d.zero_copy.sequential, 50e9, 1e3);
  EXPECT_NEAR(p.h2d.zero_copy_both.random.at(512), 20e9, 1e3);
  EXPECT_NEAR(p.d2h.zero_copy_both.random.at(512), 20e9, 1e3);
  EXPECT_NEAR(p.d2h.partitioner_rate[0].at(256), 8e9, 1e3);
  EXPECT_NEAR(p.d2h.partitioner_rate[1].at(64), 40e9, 1e3);
  EXPECT_NE(p.notes.at("link.d2h.hierarchical_64_bw").find("at fanout 64"), std::string::npos);
  EXPECT_NEAR(p.gpu.chunk_partition_rate.at(64), 300e9, 1e3);
  EXPECT_EQ(p.gpu.chunk_partition_rate.size(), 1u);
  EXPECT_NE(p.notes.at("gpu.chunk_partition_64_bw").find("into device memory at fanout 64"), std::string::npos);
  EXPECT_NEAR(p.d2h.beside_copy.random.at(1024), 18e9, 1e3);
  EXPECT_NEAR(p.h2d.beside_copy.random.at(1024), 32e9, 1e3);
  EXPECT_NE(p.notes.at("link.h2d.copy_beside_write_1024_bw").find("host-to-device copies while"), std::string::npos);
  EXPECT_NE(p.notes.at("link.h2d.read_16_bw").find("16-byte granules at random positions"), std::string::npos);
  EXPECT_NE(p.notes.at("link.d2h.write_seq_bw").find("in order"), std::string::npos);
  std::stringstream text;
  write_profile(p, text);
  const Profile back = parse_profile_text(text.str());
  EXPECT_EQ(back.d2h.zero_copy.random, p.d2h.zero_copy.random);
  EXPECT_EQ(back.h2d.zero_copy.sequential, p.h2d.zero_copy.sequential);
  EXPECT_EQ(back.h2d.zero_copy_both.random, p.h2d.zero_copy_both.random);
  EXPECT_NEAR(back.h2d.beside_copy.random.at(1024), p.h2d.beside_copy.random.at(1024), 1e3);
  EXPECT_NEAR(back.d2h.beside_copy.random.at(1024), p.d2h.beside_copy.random.at(1024), 1e3);
  EXPECT_NEAR(back.d2h.partitioner_rate[1].at(64), 40e9, 1e3);
  EXPECT_NEAR(back.gpu.chunk_partition_rate.at(64), 300e9, 1e3);
  const std::vector<std::string> report = link_report(c);
  ASSERT_EQ(report.size(), 9u);
  EXPECT_NE(report[0].find("zero_copy.both, GB/s each way by granule: 512=20.0"), std::string::npos) << report[0];
  EXPECT_NE(report[1].find("zero_copy.copy_beside_write, GB/s by the writes' granule: 1024=32.0"), std::string::npos)
      << report[1];
  EXPECT_NE(report[3].find("zero_copy.write,"), std::string::npos) << report[3];
  EXPECT_NE(report[3].find("seq=52.0"), std::string::npos) << report[3];
  EXPECT_NE(report[4].find("zero_copy.write_beside_copy, GB/s by the writes' granule: 1024=18.0"), std::string::npos)
      << report[4];
  EXPECT_NE(report[5].find("chunk_partition.hierarchical.host, GB/s of input by fanout: 64=40.0"), std::string::npos)
      << report[5];
  EXPECT_NE(report[6].find("chunk_partition.shared.device, GB/s of input by fanout: 64=300.0"), std::string::npos)
      << report[6];
  EXPECT_NE(report[7].find("chunk_partition.shared.host, GB/s of input by fanout: 256=8.0"), std::string::npos)
      << report[7];
  EXPECT_NE(report[8].find("prefix_sum.cpu"), std::string::npos) << report[8];
}

// Writes beside copies: each written byte takes (h2d.bw - the copies' rate) / the writes' rate
// bytes of the other direction, at most what lets the writes alone keep their rate.
TEST(LinkSpec, WritesBesideCopiesTakeTheOtherDirectionInProportion) {
  LinkSpec h2d, d2h;
  h2d.bw = d2h.bw = 50e9;
  EXPECT_EQ(write_reverse_cost(h2d, d2h, 1024), 0.0) << "nothing measured: nothing taken";
  h2d.beside_copy.random[1024] = 30e9;
  d2h.beside_copy.random[1024] = 10e9;
  d2h.zero_copy.random[1024] = 20e9;  // alone the writes run at 20e9: at most 50 / 20 per byte
  EXPECT_NEAR(write_reverse_cost(h2d, d2h, 1024), 2.0, 1e-9);
  d2h.zero_copy.random[1024] = 40e9;  // at most 50 / 40
  EXPECT_NEAR(write_reverse_cost(h2d, d2h, 1024), 1.25, 1e-9);
  h2d.beside_copy.random[1024] = 50e9;
  EXPECT_NEAR(write_reverse_cost(h2d, d2h, 1024), 0.0, 1e-9) << "copies unslowed: nothing taken";
}

// A partitioner's rate at a fanout interpolates its table log-log; the granule of that rate is
// the one access_rate gives it (the sequential granule above the sequential rate).
TEST(LinkSpec, APartitionersRateMapsToTheGranuleOfThatRate) {
  const std::map<uint32_t, double> table{{64, 40e9}, {256, 10e9}};
  EXPECT_EQ(fanout_rate({}, 64), 0.0);
  EXPECT_NEAR(fanout_rate(table, 128), 20e9, 1e3);
  EXPECT_NEAR(fanout_rate(table, 2), 40e9, 1e3) << "below the table: its first rate";
  EXPECT_NEAR(fanout_rate(table, 4096), 10e9, 1e3);
  LinkSpec l;
  l.bw = 50e9;
  l.zero_copy.random[128] = 5e9;
  l.zero_copy.random[512] = 20e9;
  l.zero_copy.sequential = 45e9;
  EXPECT_NEAR(equivalent_granule(l, 10e9), 256, 1e-6);
  EXPECT_NEAR(l.access_rate(equivalent_granule(l, 30e9)), 30e9, 1e3);
  EXPECT_EQ(equivalent_granule(l, 48e9), kLinkSequentialGranule);
}

TEST(LinkSpec, AccessRateInterpolatesTheMeasuredGranules) {
  LinkSpec l;
  l.bw = 50e9;
  EXPECT_EQ(l.access_rate(128), 50e9) << "nothing measured: the link's rate";
  l.zero_copy.random = {{128, 5e9}, {512, 20e9}, {4096, 80e9}};
  EXPECT_NEAR(l.access_rate(128), 5e9, 1e3);
  EXPECT_NEAR(l.access_rate(64), 2.5e9, 1e3) << "below the smallest granule: in proportion";
  EXPECT_NEAR(l.access_rate(256), 10e9, 1e3) << "log-log between 128 and 512 (rate doubles per doubling)";
  EXPECT_NEAR(l.access_rate(4096), 50e9, 1e3) << "a measured rate above the link's is the link's";
  EXPECT_NEAR(l.access_rate(1 << 20), 50e9, 1e3);
  l.zero_copy.sequential = 40e9;
  EXPECT_NEAR(l.access_rate(kLinkSequentialGranule), 40e9, 1e3) << "the sequential rate from 64 KiB on";
  EXPECT_NEAR(l.access_rate(1 << 20), 40e9, 1e3);
}

TEST(Calibrate, OnlyNamesTheStepAndItsValue) {
  CalibrationOptions opt;
  EXPECT_TRUE(opt.runs("operators") && opt.runs("links"));
  opt.only = {"links"};
  EXPECT_TRUE(opt.runs("links"));
  EXPECT_FALSE(opt.runs("operators"));
  try {
    calibrate_main({"--backend", "cpu", "--only", "links,lnks", "--out", "/nonexistent/x.ini"});
    ADD_FAILURE() << "accepted step lnks";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--only links,lnks: no step 'lnks'"), std::string::npos) << e.what();
  }
}

// The device's time of a sample is its operator's span, found by order after the eviction copy:
// a probe sample, which runs after its table's build (a "prepare 1" phase), gets the probe's span,
// not the build's, and the samples after it still get their own.
TEST(CalibrationSamples, DeviceTimesSkipTheOperatorsThatPrepareASample) {
  const uint64_t evict = 100 << 20;
  auto span = [](OpKind kind, double begin, double end, uint64_t bytes = 0) {
    TraceSpan t;
    t.track = "stream 0";
    t.params.kind = kind;
    t.params.bytes = bytes;
    t.begin = begin;
    t.end = end;
    return t;
  };
  const std::string probe = "cal probe.linear 16777216 1 8388608 0 | 1048576 16777216 1048576";
  const std::vector<PhaseRecord> phases = {{"setup", 0, 1},          {prepare_phase(1), 1, 2}, {probe, 2, 3},
                                           {"sync", 3, 3.5},         {"setup", 3.5, 4},        {"cal scan 0 1 8", 4, 5},
                                           {"sync", 5, 5.25}};
  TraceSpan build_kernel = span(OpKind::Build, 1.2, 1.8);
  build_kernel.track = "stream 0 kernels";  // a per-kernel track: not an operator
  const std::vector<TraceSpan> spans = {span(OpKind::Copy, 0.5, 0.9, evict), span(OpKind::Build, 1.1, 1.9), build_kernel,
                                        span(OpKind::Probe, 2.1, 2.6),       span(OpKind::Copy, 3.6, 3.9, evict),
                                        span(OpKind::Scan, 4.1, 4.3)};
  const std::vector<CalibrationRun> runs = runs_of(phases, spans, evict);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].phase, probe);
  EXPECT_DOUBLE_EQ(runs[0].seconds, 1.0);
  EXPECT_DOUBLE_EQ(runs[0].sync_seconds, 0.5);
  EXPECT_NEAR(runs[0].device_seconds, 0.5, 1e-12) << "the probe's span, not its build's (0.8)";
  EXPECT_NEAR(runs[1].device_seconds, 0.2, 1e-12) << "the scan's span";
  EXPECT_EQ(runs_of(phases, spans, 0)[0].device_seconds, 0.0) << "without an eviction nothing is matched";
}

const std::string kProfileHead = test::synthetic_machine("t");

Profile parse(const std::string& ops) {
  std::istringstream in(std::string(kProfileHead) + ops);
  return parse_profile(in, "t.ini");
}

std::string rejected(const std::string& ops) {
  try {
    parse(ops);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted:\n" << ops;
  return "";
}

// A samples file written before the MSD plan's features: its radix sorts get their plan from
// their rows (calibrate's tuples are key_bytes + key_bytes; the kernel then reduced the exact max).
TEST(CalibrationSamples, OlderSamplesGetTheLaterFeatures) {
  std::istringstream old("# machine: test, backend cuda\n3e-4 1e-5 0 cal sort.radix 4 1 33554432 0 0 0\n"
                         "1e-4 1e-5 0 cal sort.radix 4 1 8388608 0 0 0\n"
                         "1e-4 1e-5 0 cal partitioned_join.linear 16384 1 16777216 0 512 1281 0 0 0\n"
                         "2e-4 1e-5 0 cal partitioned_join.linear 65536 1 16777216 0 256 1650 0 8388608 256\n");
  const Calibration c = read_samples(old, "old.txt");
  const auto& s = c.ops.at("sort.radix");
  ASSERT_EQ(s.size(), 2u);
  ASSERT_EQ(s[0].x.size(), 10u);
  EXPECT_EQ(s[0].x[1], 33554432.0);
  EXPECT_EQ(s[0].x[7], 2.0) << "4Mi keys up to 2^22: 23 bits, 11 partitioned in two passes";
  EXPECT_EQ(s[0].x[8], 2048.0);
  EXPECT_EQ(s[1].x[7], 1.0) << "1Mi keys up to 2^20: 9 bits, one pass";
  EXPECT_DOUBLE_EQ(s[0].seconds, 3e-4 + 1e-5);
  // ... and its partitioned joins whether the host listed their items.
  const auto& j = c.ops.at("partitioned_join.linear");
  ASSERT_EQ(j.size(), 2u);
  ASSERT_EQ(j[0].x.size(), 9u);
  EXPECT_EQ(j[0].x[8], 0.0);
  EXPECT_EQ(j[1].x[8], 1.0);
}

TEST(OpModelProfiles, CacheLinesAndLegacyLines) {
  // A line of a profile calibrated before the later features: those coefficients are 0.
  Profile legacy = parse("[op.probe.linear]\nseg = 0 1e-5 4e-12 1e-12   # old fit\n");
  const auto& piece = legacy.ops.get("probe.linear").pieces().front();
  ASSERT_EQ(piece.coef.size(), 5u);
  EXPECT_EQ(piece.coef[3], 0.0);
  EXPECT_EQ(piece.coef[4], 0.0);
  // The full form with its cache sizes, read back as written.
  Profile full = parse(
      "[op.probe.linear]\ncache.near = 65536   # fitted\ncache.far = 3.2e7   # fitted\n"
      "seg = 0 1e-5 4e-12 1e-12 2e-10 1e-9   # fitted\n");
  EXPECT_EQ(full.ops.get("probe.linear").caches(), (std::vector<double>{65536, 3.2e7}));
  std::ostringstream text;
  write_profile(full, text);
  EXPECT_NE(text.str().find("cache.far = 3.2e+07   # fitted"), std::string::npos) << text.str();
  std::istringstream back(text.str());
  EXPECT_EQ(parse_profile(back, "back.ini").ops.get("probe.linear").caches(), (std::vector<double>{65536, 3.2e7}));

  std::string m = rejected("[op.probe.linear]\nseg = 0 1e-5 4e-12 1e-12 2e-10 1e-9   # fitted\n");
  EXPECT_NE(m.find("[op.probe.linear] cache.near is missing"), std::string::npos) << m;
  m = rejected("[op.scan]\ncache.far = 1e6   # x\nseg = 0 1e-5 1e-12   # x\n");
  EXPECT_NE(m.find("op.scan.cache.far = 1e6: model scan has no cache level 'far' (it has none)"), std::string::npos) << m;
  m = rejected("[op.probe.linear]\ncache.far = -3   # x\nseg = 0 1e-5 1e-12 1e-12   # x\n");
  EXPECT_NE(m.find("op.probe.linear.cache.far = -3: expected a positive number of bytes"), std::string::npos) << m;
  m = rejected("[op.probe.linear]\ncache.far = 3e7\nseg = 0 1e-5 1e-12 1e-12   # x\n");
  EXPECT_NE(m.find("source"), std::string::npos) << m;
  m = rejected("[op.probe.linear]\nseg = 0 1e-5 1e-12 1e-12 1e-12   # x\n");
  EXPECT_NE(m.find("expected 6 (or 4, without the later features) numbers"), std::string::npos) << m;
}

#ifdef JOINLAB_TEST_SIM

// The simulator feeds the probe side's content to the cache terms: the same npj with S Zipf 1.5
// probes faster than with uniform S, as on the H100 (experiments/results/h100/validation.csv).
TEST(SimulatedCosts, ZipfProbeSidesProbeFasterInSimulation) {
  register_builtin();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("joinlab_test_models_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string ops = R"([op.generate]
seg = 0 0 1e-12      # test value
[op.build.linear]
seg = 0 1e-5 4e-12   # test value
[op.probe.linear]
cache.near = 65536   # test value
cache.far = 3.2e7    # test value
seg = 0 1e-5 1e-12 1e-12 2e-10 1e-9   # test value
[op.checksum]
seg = 0 1e-5 1e-12   # test value
[op.copy.device]
seg = 0 1e-6 2e-12   # test value
)";
  std::ofstream(dir / "t.ini") << kProfileHead << ops;
  auto probe_seconds = [&](double z) {
    RunPoint p;
    p.strategy = "npj";
    p.backend = "sim";
    p.verify = false;
    p.cluster.shape = {1, 1};
    p.cluster.profile = (dir / "t.ini").string();
    p.cluster.profile_dir = dir.string();
    p.workload.r.name = "R";
    p.workload.r.rows = 1 << 24;
    p.workload.r.dist = KeyDist::UniqueDense;
    p.workload.s = p.workload.r;
    p.workload.s.name = "S";
    p.workload.s.dist = KeyDist::ForeignKey;
    p.workload.s.zipf_z = z;
    for (auto& ph : run_point(p).phases)
      if (ph.name == "probe") return ph.seconds;
    ADD_FAILURE() << "no probe phase";
    return 0.0;
  };
  const double uniform = probe_seconds(0), mild = probe_seconds(0.75), strong = probe_seconds(1.5);
  fs::remove_all(dir);
  EXPECT_LT(mild, uniform);
  EXPECT_LT(strong, 0.5 * uniform);
  // The content's key access: Zipf S keeps its tail's exponent, so it matches the law's.
  RelationSpec r;
  r.name = "R";
  r.rows = 1 << 22;
  r.dist = KeyDist::UniqueDense;
  RelationSpec s = r;
  s.name = "S";
  s.dist = KeyDist::ForeignKey;
  s.zipf_z = 0.75;
  Locality from_content = uniform_lookups(double(1 << 22), 64e6, double(1 << 22));
  from_content.access = sim::key_access(*sim::generated_content(s, &r, 0, 1 << 22));
  Locality from_law = from_content;
  from_law.access = KeyAccess::zipf(double(1 << 22), double(1 << 22), 0.75);
  EXPECT_NEAR(cache_hit_fraction(from_content, 8e6), cache_hit_fraction(from_law, 8e6), 0.01);
}

// validate's bar: --max-phase-error fails the command on the worst phase, as --max-error on the
// worst total (exit 3); a bad fraction is an input error.
TEST(SimulatedCosts, ValidateChecksThePhaseBar) {
  register_builtin();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("joinlab_test_models_bar_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "t.ini") << kProfileHead << R"([op.generate]
seg = 0 0 1e-12      # test value
[op.build.linear]
seg = 0 1e-5 4e-12   # test value
[op.probe.linear]
seg = 0 1e-5 1e-12 1e-12   # test value
[op.checksum]
seg = 0 1e-5 1e-12   # test value
[op.copy.device]
seg = 0 1e-6 2e-12   # test value
)";
  const fs::path ini = dir / "val.ini";
  std::ofstream(ini) << "[experiment]\nname = val\nstrategy = npj\nbackend = cpu\noutput_dir = " << dir.string()
                     << "\n[workload]\nrows = 2^12\nr.dist = unique_dense\ns.dist = fk\n";
  const ExperimentPlan plan = plan_experiment(ini.string());
  ResultRow row;
  row.experiment = plan.name;
  row.point = 1;
  row.swept = plan.points[0].swept;
  row.outcome = run_point(plan.points[0].run);
  const std::string measured = (dir / "measured.csv").string(), out = (dir / "out.csv").string();
  write_csv(measured, {row});
  auto validate = [&](const std::string& flag, const std::string& value) {
    return validate_main({ini.string(), "--measured", measured, "--profile", (dir / "t.ini").string(), "--out", out, flag,
                          value});
  };
  EXPECT_EQ(validate("--max-phase-error", "1e9"), 0);
  try {
    validate("--max-phase-error", "1e-9");
    ADD_FAILURE() << "a phase within 1e-9 of the cpu backend's";
  } catch (const VerificationError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds --max-phase-error"), std::string::npos) << e.what();
  }
  EXPECT_THROW(validate("--max-phase-error", "-1"), InputError);
  fs::remove_all(dir);
}

#endif

}  // namespace
}  // namespace joinlab
