// Every strategy on the CPU backend, verified against the closed-form (or reference) result of
// the generated workload across sizes, key distributions, key and payload widths, late
// materialization, options and rank counts; plus option errors, the radix plan, the analytic
// bounds, and a corrupted result that must be caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/runner.hpp"
#include "core/strategies/rank_joins.hpp"
#include "tests/test_workloads.hpp"

using namespace joinlab;

namespace {

using Options = std::map<std::string, std::string>;

RelationSpec relation(const std::string& name, uint64_t rows, KeyDist dist, uint8_t key_bytes = 4,
                      std::vector<uint8_t> payload = {4}) {
  RelationSpec s;
  s.name = name;
  s.rows = rows;
  s.dist = dist;
  s.key_bytes = key_bytes;
  s.payload_bytes = std::move(payload);
  return s;
}

// Primary key R (unique dense), foreign key S with a match rate and optional Zipf skew.
Workload pk_fk(uint64_t r_rows, uint64_t s_rows, uint8_t key_bytes = 4, double match = 1.0, double zipf = 0.0,
               std::vector<uint8_t> r_payload = {4}, std::vector<uint8_t> s_payload = {4}) {
  Workload w;
  w.r = relation("R", r_rows, KeyDist::UniqueDense, key_bytes, std::move(r_payload));
  w.s = relation("S", s_rows, KeyDist::ForeignKey, key_bytes, std::move(s_payload));
  w.s.match_rate = match;
  w.s.zipf_z = zipf;
  return w;
}

// Many-to-many: both sides uniform over a small range (checked by the reference join).
Workload uniform_both(uint64_t r_rows, uint64_t s_rows, uint64_t range, uint8_t key_bytes = 4) {
  Workload w;
  w.r = relation("R", r_rows, KeyDist::Uniform, key_bytes);
  w.s = relation("S", s_rows, KeyDist::Uniform, key_bytes);
  w.r.range_lo = w.s.range_lo = 1;
  w.r.range_hi = w.s.range_hi = range;
  return w;
}

RunPoint point(const std::string& strategy, const Workload& w, Options options = {}, ClusterShape shape = {1, 1}) {
  RunPoint p;
  p.name = "test";
  p.strategy = strategy;
  p.backend = "cpu";
  p.cluster.shape = shape;
  p.cluster.threads_per_rank = shape.size() > 1 ? 1 : 2;
  p.workload = w;
  p.strategy_options = std::move(options);
  return p;
}

std::string describe(const RunPoint& p) {
  std::string s =
      p.strategy + " " + std::to_string(p.cluster.shape.nodes) + "x" + std::to_string(p.cluster.shape.per_node) +
      " R=" + std::to_string(p.workload.r.rows) + " " + to_string(p.workload.r.dist) +
      " S=" + std::to_string(p.workload.s.rows) + " " + to_string(p.workload.s.dist) +
      " z=" + std::to_string(p.workload.s.zipf_z) + " match=" + std::to_string(p.workload.s.match_rate) +
      " key=" + std::to_string(p.workload.r.key_bytes) + " Rcols=" + std::to_string(p.workload.r.payload_bytes.size()) +
      " Scols=" + std::to_string(p.workload.s.payload_bytes.size());
  for (auto& [k, v] : p.strategy_options) s += " " + k + "=" + v;
  return s;
}

// Runs the point (run_point verifies it and throws on a mismatch) and checks the digest against
// the expectation directly as well.
void expect_correct(const RunPoint& p) {
  SCOPED_TRACE(describe(p));
  RunOutcome o;
  ASSERT_NO_THROW(o = run_point(p));
  const ExpectedResult want = expected_result(p.workload);
  EXPECT_EQ(o.digest.count, want.digest.count);
  EXPECT_EQ(o.digest.checksum, want.digest.checksum);
  EXPECT_TRUE(o.has_checksum);
}

const std::vector<std::string> kSingleRank = {"npj", "phj", "smj", "chunked", "triton", "shuffle"};

class Strategies : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { register_builtin(); }
};

}  // namespace

TEST_F(Strategies, AllAreRegistered) {
  for (auto& name : kSingleRank) EXPECT_NO_THROW(find_strategy(name)) << name;
  EXPECT_EQ(find_strategy("shuffle").max_ranks, 0);  // any rank count
  EXPECT_EQ(find_strategy("phj").max_ranks, 1);
}

TEST_F(Strategies, SizesIncludingTinyAndNonPowersOfTwo) {
  const std::vector<std::pair<uint64_t, uint64_t>> sizes = {{1, 1},       {1, 5},       {7, 13},
                                                            {1000, 3001}, {4096, 4096}, {30011, 65537}};
  for (auto& name : kSingleRank)
    for (auto [r, s] : sizes) expect_correct(point(name, pk_fk(r, s)));
}

TEST_F(Strategies, DistributionsAndMatchRates) {
  std::vector<Workload> workloads;
  workloads.push_back(pk_fk(5000, 20000, 4, 0.1));
  Workload sparse = pk_fk(5000, 20000, 4, 1.0);
  sparse.r.dist = KeyDist::UniqueSparse;
  workloads.push_back(sparse);
  sparse.s.match_rate = 0.1;
  workloads.push_back(sparse);
  for (double z : {0.5, 1.0, 1.5}) workloads.push_back(pk_fk(5000, 20000, 4, 1.0, z));  // Zipf FK probe side
  Workload zipf_s = pk_fk(5000, 20000);  // S Zipf-distributed itself over R's dense key domain
  zipf_s.s.dist = KeyDist::Zipf;
  zipf_s.s.zipf_z = 1.0;
  zipf_s.s.zipf_domain = 6000;
  workloads.push_back(zipf_s);
  workloads.push_back(uniform_both(3000, 4000, 500));  // many-to-many, reference join
  for (auto& name : kSingleRank)
    for (auto& w : workloads) expect_correct(point(name, w));
}

TEST_F(Strategies, KeyAndPayloadWidthsAndLateMaterialization) {
  std::vector<Workload> workloads;
  workloads.push_back(pk_fk(3000, 7001, 8));
  workloads.push_back(pk_fk(3000, 7001, 4, 1.0, 0.0, {8}, {8}));
  workloads.push_back(pk_fk(3000, 7001, 8, 0.1, 1.0, {8}, {4}));
  workloads.push_back(pk_fk(3000, 7001, 4, 1.0, 0.0, {4, 8}, {4}));     // R late
  workloads.push_back(pk_fk(3000, 7001, 8, 1.0, 1.5, {4}, {8, 4, 4}));  // S late
  workloads.push_back(pk_fk(3000, 7001, 4, 0.1, 0.5, {8, 8}, {4, 8}));  // both late
  Workload m2n = uniform_both(2000, 2500, 300, 8);
  m2n.r.payload_bytes = {4, 4};
  m2n.s.payload_bytes = {8, 4};
  workloads.push_back(m2n);
  for (auto& name : kSingleRank)
    for (auto& w : workloads) expect_correct(point(name, w));
}

TEST_F(Strategies, OutputModesAndTables) {
  // uniform_both overflows the Direct estimate (many more matches than rows): grow and rerun.
  const std::vector<Workload> workloads = {pk_fk(4000, 9000, 4, 0.5, 1.0), uniform_both(2000, 3000, 200)};
  for (auto& w : workloads) {
    for (std::string output : {"count_then_write", "direct"}) {
      for (std::string table : {"linear", "chained"}) {
        expect_correct(point("npj", w, {{"output", output}, {"table", table}}));
        expect_correct(point("phj", w, {{"output", output}, {"table", table}}));
        expect_correct(point("chunked", w, {{"output", output}, {"table", table}, {"chunk_rows", "777"}}));
        expect_correct(point("shuffle", w, {{"output", output}, {"table", table}}, {1, 2}));
      }
      expect_correct(point("smj", w, {{"output", output}}));
      expect_correct(point("npj", w, {{"output", output}, {"load_factor", "0.25"}}));
    }
  }
}

TEST_F(Strategies, HashRowIdTableAcrossDistributionsWidthsAndOutputs) {
  std::vector<Workload> workloads;
  workloads.push_back(pk_fk(5000, 20000, 4, 0.1));  // match rate 0.1
  Workload sparse = pk_fk(5000, 20000, 8, 1.0);     // 8-byte keys over the whole key width
  sparse.r.dist = KeyDist::UniqueSparse;
  workloads.push_back(sparse);
  for (double z : {0.5, 1.0, 1.5}) workloads.push_back(pk_fk(5000, 20000, 4, 1.0, z));  // Zipf probe side
  workloads.push_back(pk_fk(3000, 7001, 8, 0.1, 1.0, {8}, {4}));
  workloads.push_back(pk_fk(3000, 7001, 4, 0.1, 0.5, {8, 8}, {4, 8}));  // late materialization
  workloads.push_back(uniform_both(2000, 3000, 200, 8));                 // many-to-many
  for (auto& w : workloads)
    for (std::string output : {"count_then_write", "direct"}) {
      expect_correct(point("npj", w, {{"output", output}, {"table", "hash_rowid"}}));
      expect_correct(point("chunked", w, {{"output", output}, {"table", "hash_rowid"}, {"chunk_rows", "777"}}));
    }
  expect_correct(point("npj", workloads[0], {{"table", "hash_rowid"}, {"load_factor", "0.9"}}));
  expect_correct(point("shuffle", workloads[1], {{"table", "hash_rowid"}}, {1, 2}));
  // phj's two passes as one operator (partition_ops=merged) on every width.
  for (auto& w : workloads) expect_correct(point("phj", w, {{"partition_ops", "merged"}, {"radix_bits", "12"}}));
  // phj's per-partition tables stay linear probing for it (see phj_join).
  expect_correct(point("shuffle", workloads[1], {{"table", "hash_rowid"}, {"local_join", "phj"}}, {2, 1}));
}

TEST_F(Strategies, CountOnlyReportsTheCountWithoutChecksum) {
  const Workload w = pk_fk(3000, 8000, 4, 0.5);
  const uint64_t want = expected_result(w).digest.count;
  for (auto& name : kSingleRank) {
    RunPoint p = point(name, w, {{"output", "count_only"}});
    SCOPED_TRACE(name);
    // Nothing is materialized, so there is no checksum: run_point verifies the count alone and
    // says so.
    RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest.count, want);
    EXPECT_FALSE(o.has_checksum);
    EXPECT_EQ(o.checked, "count");
    EXPECT_NE(o.verified.find("count only"), std::string::npos) << o.verified;
  }
}

TEST_F(Strategies, PhjPassesAndRadixBits) {
  const Workload w = pk_fk(20000, 50000, 4, 1.0, 1.0);
  for (std::string passes : {"0", "1", "2"})
    for (std::string bits : {"0", "1", "5", "9"})
      expect_correct(point("phj", w, {{"passes", passes}, {"radix_bits", bits}}));
  // Budget small enough for an automatic two-pass plan.
  expect_correct(point("phj", w, {{"partition_budget", "1024"}}));
  expect_correct(point("phj", pk_fk(20000, 50000, 8, 0.1), {{"passes", "2"}, {"radix_bits", "12"}}));
}

TEST_F(Strategies, SmjSortAlgorithms) {
  for (std::string sort : {"radix", "merge"}) {
    expect_correct(point("smj", pk_fk(10000, 25000, 8, 1.0, 1.5), {{"sort", sort}}));
    expect_correct(point("smj", uniform_both(3000, 3000, 1000), {{"sort", sort}}));
  }
}

TEST_F(Strategies, ChunkedStreamsAndChunkSizes) {
  const Workload w = pk_fk(3000, 20000, 4, 0.5, 0.5, {4}, {4, 8});
  for (std::string streams : {"1", "2", "3"})
    for (std::string rows : {"1", "999", "20000", "1000000"})
      if (!(rows == "1" && streams != "2"))  // one-row chunks: 20000 chunks, once is enough
        expect_correct(point("chunked", w, {{"streams", streams}, {"chunk_rows", rows}}));
  expect_correct(point("chunked", w, {{"output_space", "pinned"}, {"output", "direct"}, {"chunk_rows", "3000"}}));
}

TEST_F(Strategies, ChunkedNeedsTheStreamsItAsksFor) {
  RunPoint p = point("chunked", pk_fk(100, 100), {{"streams", "8"}});
  p.cluster.options["streams"] = "4";
  EXPECT_THROW(run_point(p), RuntimeError);
}

// triton's out-of-core plan with R and S several times the (capped) device memory: the first pass
// spills to pinned memory (and caches what cache_bytes holds), every option combination and
// workload gives the reference result.
TEST_F(Strategies, TritonSpillsPastDeviceMemoryWithEveryOption) {
  auto spilled = [](Workload w, uint64_t device, Options o) {
    RunPoint p = point("triton", w, std::move(o));
    p.cluster.device_memory = device;
    return p;
  };
  // 100k + 400k rows of 8 bytes: 4 MB, four times 1 MiB of device memory.
  for (const char* partitioner : {"shared", "hierarchical"})
    for (const char* read : {"kernel", "copy"})
      for (const char* prefix : {"gpu", "cpu"})
        for (const char* cache : {"0", "150000", "-1"})
          expect_correct(spilled(pk_fk(100000, 400000), 1 << 20,
                                 {{"in_gpu", "off"}, {"partitioner", partitioner}, {"spill_read", read},
                                  {"prefix_sum", prefix}, {"cache_bytes", cache}, {"flush_bytes", "256"}}));
  // Match rates, skew (the hot partitions take more device memory), widths, many-to-many.
  std::vector<Workload> ws = {pk_fk(100000, 400000, 4, 0.1), pk_fk(100000, 400000, 8),
                              pk_fk(100000, 400000, 4, 1.0, 0.0, {8}, {8}), uniform_both(30000, 40000, 5000)};
  for (double z : {0.5, 1.0, 1.5}) ws.push_back(pk_fk(100000, 400000, 4, 1.0, z));
  for (const Workload& w : ws)
    expect_correct(spilled(w, 8 << 20, {{"in_gpu", "off"}, {"cache_bytes", "300000"}, {"chunks", "7"}}));
  // Skew with the default cache: the join's lanes hold partitions of uniform size with a quarter
  // to spare, so a hot key's partition (a third of S at Zipf 1.5) is joined slice by slice.
  for (double z : {1.0, 1.5})
    for (const char* prefix : {"gpu", "cpu"})
      for (const char* read : {"kernel", "copy"})
        expect_correct(spilled(pk_fk(100000, 400000, 4, 1.0, z), 1 << 20,
                               {{"in_gpu", "off"}, {"prefix_sum", prefix}, {"spill_read", read}}));
  // The first pass on one to four streams (ring slots), spilled chunks written by copy or kernel.
  for (const char* streams : {"1", "3", "4"})
    for (const char* write : {"copy", "kernel"})
      expect_correct(spilled(pk_fk(100000, 400000, 4, 1.0, 0.5), 1 << 20,
                             {{"in_gpu", "off"}, {"pass1_streams", streams}, {"spill_write", write}}));
  // lane_sms = split where the backend cannot confine kernels to shares of the SMs: the lanes are
  // streams 0 and 1, as shared.
  for (const char* read : {"kernel", "copy"})
    expect_correct(spilled(pk_fk(100000, 400000, 4, 1.0, 1.0), 1 << 20,
                           {{"in_gpu", "off"}, {"spill_read", read}, {"lane_sms", "split"}}));
  // Every output policy and space: one pinned segment sized for a primary-key join, more once a
  // many-to-many join's rows overflow it; in device memory, a partition's at a time.
  for (const char* output : {"direct", "count_then_write", "count_only"})
    for (const char* space : {"pinned", "device"})
      for (const Workload& w : {pk_fk(100000, 400000, 4, 0.5), uniform_both(30000, 40000, 5000)}) {
        const RunPoint p = spilled(w, 8 << 20, {{"in_gpu", "off"}, {"output", output}, {"output_space", space}});
        if (std::string(output) != "count_only") {
          expect_correct(p);
          continue;
        }
        SCOPED_TRACE(describe(p));
        EXPECT_EQ(run_point(p).digest.count, expected_result(w).digest.count);
      }
}

// The GPU's prefix sum counts each chunk where it is partitioned (no phase of its own); the CPUs'
// counts R's chunks before the first pass starts.
TEST_F(Strategies, TritonPhases) {
  using V = std::vector<std::string>;
  for (const char* prefix : {"gpu", "cpu"}) {
    RunPoint p = point("triton", pk_fk(20000, 80000), {{"in_gpu", "off"}, {"prefix_sum", prefix}});
    p.cluster.device_memory = 1 << 20;
    std::vector<std::string> names;
    for (const auto& r : run_point(p).phases) names.push_back(r.name);
    const V want = std::string(prefix) == "gpu" ? V{"generate", "partition", "join", "verify"}
                                                : V{"generate", "prefix_sum", "partition", "join", "verify"};
    EXPECT_EQ(names, want);
  }
}

TEST_F(Strategies, NpjWithItsTableOrItsDataInPinnedMemory) {
  for (const char* table : {"device", "pinned"})
    for (const char* data : {"device", "pinned"})
      for (const Workload& w : {pk_fk(30000, 70000), pk_fk(30000, 70000, 8, 0.5, 1.0), uniform_both(3000, 5000, 700)})
        expect_correct(point("npj", w, {{"table_space", table}, {"input_space", data}}));
  try {
    run_point(point("npj", pk_fk(100, 100), {{"table_space", "host"}}));
    ADD_FAILURE() << "accepted table_space = host";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("table_space"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("host"), std::string::npos) << e.what();
  }
}

TEST_F(Strategies, TritonBoundCountsSpilledPartitionsWrittenAndReadBack) {
  Bandwidths bw;
  bw.mem = 3e12;
  bw.h2d = 50e9;
  Workload w = pk_fk(uint64_t(1) << 28, uint64_t(1) << 28);
  for (RelationSpec* r : {&w.r, &w.s}) r->key_bytes = 8, r->payload_bytes = {8};
  const double in = 2.0 * 16 * double(uint64_t(1) << 28);  // 8 GiB
  auto bound = [&](Options o, uint64_t device) {
    RunPoint p = point("triton", w, std::move(o));
    JoinJob job = make_job(p);
    job.device_memory = device;
    return find_strategy("triton").bound(job, {1, 1}, bw);
  };
  // No device memory known and the default cache: nothing counted as spilled (a lower bound).
  EXPECT_DOUBLE_EQ(bound({{"output", "count_only"}}, 0).seconds, in / bw.h2d);
  // A 2 GiB cache: the other 6 GiB are written and read back (towards the device: 8 + 6 GiB).
  const double cache = double(uint64_t(2) << 30);
  EXPECT_NEAR(bound({{"output", "count_only"}, {"cache_bytes", std::to_string(uint64_t(cache))}}, 0).seconds,
              (2 * in - cache) / bw.h2d, 1e-3 * in / bw.h2d);
  // The default cache with 4 GiB of device memory: what the working buffers leave, so more than
  // the inputs alone and less than all of them spilled.
  const Bound capped = bound({{"output", "count_only"}}, uint64_t(4) << 30);
  EXPECT_GT(capped.seconds, 1.4 * in / bw.h2d);
  EXPECT_LT(capped.seconds, 2 * in / bw.h2d);
  EXPECT_NE(capped.resource.find("spilled partitions written and read back"), std::string::npos) << capped.resource;
  // 64 GiB of device memory: the in-GPU plan copies R and S over once.
  EXPECT_DOUBLE_EQ(bound({{"output", "count_only"}}, uint64_t(64) << 30).seconds, in / bw.h2d);
}

// A point verified on count and checksum, or on its count alone for output = count_only.
void expect_correct_or_counted(const RunPoint& p) {
  if (p.strategy_options.count("output") && p.strategy_options.at("output") == "count_only") {
    SCOPED_TRACE(describe(p));
    RunOutcome o;
    ASSERT_NO_THROW(o = run_point(p));
    EXPECT_EQ(o.digest.count, expected_result(p.workload).digest.count);
    EXPECT_FALSE(o.has_checksum);
    return;
  }
  expect_correct(p);
}

// Rank 0's spans inside its phase `phase`.
std::vector<TraceSpan> spans_in_phase(const RunOutcome& o, const std::string& phase) {
  double begin = 0, end = 0;
  for (const PhaseRecord& ph : o.rank_phases.at(0))
    if (ph.name == phase) begin = ph.begin, end = ph.end;
  std::vector<TraceSpan> in;
  for (const TraceSpan& sp : o.trace)
    if (sp.rank == 0 && sp.begin >= begin && sp.end <= end) in.push_back(sp);
  return in;
}

// Bytes rank 0 copied from `from` to `to` within its phase `phase`.
uint64_t copied_in_phase(const RunOutcome& o, const std::string& phase, MemSpace from, MemSpace to) {
  uint64_t n = 0;
  for (const TraceSpan& sp : spans_in_phase(o, phase))
    if (sp.params.kind == OpKind::Copy && sp.params.mem_src == int(from) && sp.params.mem_dst == int(to))
      n += sp.params.bytes;
  return n;
}

// spill_read = auto reads the spill back by copies where their staging buffers fit the device
// memory beside the join's (the join phase copies the spilled runs in), and by the kernels
// where they do not (nothing copied in the join phase); both verified.
TEST_F(Strategies, TritonReadsItsSpillByCopiesWhereTheirStagingFits) {
  for (uint64_t device : {uint64_t(256) << 20, uint64_t(8) << 20}) {
    RunPoint p = point("triton", pk_fk(100000, 400000), {{"in_gpu", "off"}, {"cache_bytes", "300000"}});
    p.cluster.device_memory = device;
    expect_correct(p);
    const uint64_t copied = copied_in_phase(run_point(p), "join", MemSpace::Pinned, MemSpace::Device);
    if (device > (uint64_t(64) << 20)) EXPECT_GT(copied, 0u) << device;
    else EXPECT_EQ(copied, 0u) << device;
  }
}

// The fanouts triton's partitions of `phase` take (ChunkPartitionOp and PartitionOp spans).
std::set<uint64_t> fanouts_in_phase(const RunOutcome& o, const std::string& phase) {
  std::set<uint64_t> f;
  for (const TraceSpan& sp : spans_in_phase(o, phase))
    if (sp.params.kind == OpKind::ChunkPartition || sp.params.kind == OpKind::Partition) f.insert(sp.params.fanout);
  return f;
}

// Read back by copies, the second pass partitions a staged slice in two passes and may take 12
// bits, the first pass one fewer; in place it is one chunk partition of at most 11 bits. 14 bits
// in all: 2 + 12 by copies, 3 + 11 in place; both verified.
TEST_F(Strategies, TritonTakesOneMoreSecondPassBitWhereItReadsByCopies) {
  for (std::string read : {"copy", "kernel"}) {
    RunPoint p = point("triton", pk_fk(100000, 400000),
                       {{"in_gpu", "off"}, {"cache_bytes", "300000"}, {"radix_bits", "14"}, {"spill_read", read}});
    p.cluster.device_memory = uint64_t(256) << 20;
    expect_correct(p);
    const RunOutcome o = run_point(p);
    const uint64_t first = read == "copy" ? 4 : 8, second = read == "copy" ? 4096 : 2048;
    EXPECT_EQ(fanouts_in_phase(o, "partition"), std::set<uint64_t>{first}) << read;
    EXPECT_EQ(fanouts_in_phase(o, "join"), std::set<uint64_t>{second}) << read;
  }
}

// Operators of `kind` rank 0 ran inside `phase`.
size_t ops_in_phase(const RunOutcome& o, const std::string& phase, OpKind kind) {
  const std::vector<TraceSpan> in = spans_in_phase(o, phase);
  return size_t(std::count_if(in.begin(), in.end(), [&](const TraceSpan& sp) { return sp.params.kind == kind; }));
}

// r_ahead: where the cache holds R and S whole, R's second passes (by copies: gathered and
// partitioned) run in the partition phase, beside S's first pass, and the join phase partitions S
// only; off, or where anything spills, they run in the join phase. Verified with skew (R sliced).
TEST_F(Strategies, TritonPartitionsRAheadWhereTheCacheHoldsRAndS) {
  for (double zipf : {0.0, 1.5})
    for (std::string ahead : {"auto", "off"})
      for (std::string cache : {"-1", "300000"}) {
        SCOPED_TRACE("zipf " + std::to_string(zipf) + ", r_ahead " + ahead + ", cache_bytes " + cache);
        RunPoint p = point("triton", pk_fk(100000, 400000, 4, 1.0, zipf),
                           {{"in_gpu", "off"}, {"r_ahead", ahead}, {"cache_bytes", cache}, {"spill_read", "copy"}});
        p.cluster.device_memory = uint64_t(256) << 20;
        expect_correct(p);
        const RunOutcome o = run_point(p);
        const size_t early = ops_in_phase(o, "partition", OpKind::Partition);
        const size_t late = ops_in_phase(o, "join", OpKind::Partition);
        if (ahead == "auto" && cache == "-1") {
          EXPECT_GT(early, 0u);
          if (zipf == 0) {
            EXPECT_EQ(late, early);  // S's second passes only: a slice of each per partition
          }
        } else {
          EXPECT_EQ(early, 0u);
          EXPECT_GT(late, 0u);
        }
      }
}

// mgsmj on one node of 1, 2 and 4 ranks, device memory capped so that every relation has several
// chunksets (the multiway merge runs) and each GPU several join parts. Zipf 1.5 makes key 1 hot:
// far more than a quarter of S, so an equal split of the rows among 4 GPUs (or of a GPU's rows
// into merge-path parts) would cut through its rows; it must be joined once.
TEST_F(Strategies, MgsmjOnOneTwoAndFourRanksWithSeveralChunksets) {
  auto capped = [](const Workload& w, int g, Options o) {
    RunPoint p = point("mgsmj", w, std::move(o), {1, g});
    p.cluster.device_memory = 1 << 20;
    return p;
  };
  const std::vector<Workload> ws = {pk_fk(20000, 80000),          pk_fk(20000, 80000, 4, 0.1),
                                    pk_fk(20000, 80000, 8, 0.5, 1.0), pk_fk(20000, 80000, 4, 1.0, 1.5),
                                    pk_fk(20000, 80000, 4, 0.1, 1.5, {8}, {8}), uniform_both(3000, 4000, 500),
                                    pk_fk(5, 3)};
  for (std::string sort : {"radix", "merge"})
    for (int g : {1, 2, 4})
      for (const Workload& w : ws) {
        SCOPED_TRACE("sort = " + sort + ", " + std::to_string(g) + " ranks");
        expect_correct(capped(w, g, {{"sort", sort}}));
        expect_correct(capped(w, g, {{"sort", sort}, {"chunk_rows", "3000"}, {"bucket_bits", "3"}, {"output", "count_then_write"}}));
        expect_correct_or_counted(capped(w, g, {{"sort", sort}, {"parts_per_gpu", "5"}, {"output", "count_only"}}));
      }
  // One chunkset (k = 1: no merge), its runs kept on the GPUs or, resident = off, one part per GPU.
  for (std::string sort : {"radix", "merge"})
    for (std::string resident : {"auto", "off"})
      expect_correct(point("mgsmj", pk_fk(20000, 80000, 4, 1.0, 1.5),
                           {{"parts_per_gpu", "1"}, {"sort", sort}, {"resident", resident}}, {1, 2}));
}

// Where both relations sort in one chunkset, the resident plan copies each tuple in once: nothing
// is copied back to the host in the sort phase, nothing in again in the join phase. resident =
// off runs the paper's plan: the runs come back and the join's parts go in.
TEST_F(Strategies, MgsmjKeepsTheSortedRunsOfOneChunksetOnTheGpus) {
  for (std::string sort : {"radix", "merge"})
    for (int g : {1, 2, 4})
      for (std::string resident : {"auto", "off"}) {
        SCOPED_TRACE("sort = " + sort + ", " + std::to_string(g) + " ranks, resident = " + resident);
        const RunPoint p = point("mgsmj", pk_fk(20000, 80000, 8, 0.5, 1.0), {{"sort", sort}, {"resident", resident}}, {1, g});
        expect_correct(p);
        const RunOutcome o = run_point(p);
        const uint64_t back = copied_in_phase(o, "sort", MemSpace::Device, MemSpace::Pinned);
        const uint64_t again = copied_in_phase(o, "join", MemSpace::Pinned, MemSpace::Device);
        if (resident == "auto") {
          EXPECT_EQ(back, 0u);
          EXPECT_EQ(again, 0u);
        } else {
          EXPECT_GT(back, 0u);
          EXPECT_GT(again, 0u);
        }
      }
}

// By default a relation is sorted in one chunkset where its lanes fit 3/8 of device memory (no
// multiway merge), and where skew sends a GPU more than its share, in as many as that GPU's rows
// need: the histograms decide, the same on every rank.
TEST_F(Strategies, MgsmjSortsInOneChunksetWhereItFitsAndInMoreWhereSkewWouldOverfillAGpu) {
  auto merges = [](const RunOutcome& o) {
    return std::count_if(o.trace.begin(), o.trace.end(),
                         [](const TraceSpan& t) { return t.params.kind == OpKind::MultiwayMerge; });
  };
  // S's slice per GPU, 40000 rows of 16 bytes (and a little more a GPU may receive of uniform
  // keys), in four device buffers: 3/8 of the memory (R's and S's lanes fit three quarters).
  const uint64_t device = 4 * 42000 * 16 * 8 / 3;
  // Zipf 2: key 1 is 61% of S, a bucket more than half of R and S together, which one GPU takes.
  for (double zipf : {0.0, 2.0}) {
    SCOPED_TRACE("S Zipf " + std::to_string(zipf));
    RunPoint p = point("mgsmj", pk_fk(20000, 80000, 8, 1.0, zipf, {8}, {8}), {}, {1, 2});
    p.cluster.device_memory = device;
    expect_correct(p);
    const RunOutcome o = run_point(p);
    if (zipf == 0.0) EXPECT_EQ(merges(o), 0) << "uniform keys: one chunkset, nothing to merge";
    else EXPECT_GT(merges(o), 0) << "the GPU with the hot key receives more than its share: several chunksets";
  }
}

// Device memory so small that a join part holds 2048 rows (1024 with 8-byte keys and payloads):
// key 1 of Zipf 1.5 (about 30000 S rows against one R row) and every key of the many-to-many joins
// (about 1000 R x 1500 S rows, or 500 x 667) are too large for a part and are joined in pieces of
// their R rows against pieces of their S rows. Every pair must be joined once, in every output mode.
TEST_F(Strategies, MgsmjJoinsKeysLargerThanAPartInPieces) {
  const std::vector<Workload> ws = {pk_fk(20000, 80000, 4, 1.0, 1.5), pk_fk(20000, 80000, 8, 0.1, 1.5, {8}, {8}),
                                    uniform_both(2000, 3000, 2), uniform_both(1500, 2000, 3, 8)};
  for (std::string sort : {"radix", "merge"})
    for (int g : {1, 2, 4})
      for (size_t i = 0; i < ws.size(); ++i)
        for (std::string output : {"direct", "count_then_write", "count_only"}) {
          if (g == 2 && output != "direct") continue;  // the output modes on 1 and 4 ranks suffice
          RunPoint p = point("mgsmj", ws[i], {{"sort", sort}, {"output", output}}, {1, g});
          p.cluster.device_memory = 1 << 16;
          expect_correct_or_counted(p);
        }
}

// The join copies a part's keys and payloads to the device, its keys alone for count_only: the
// join phase's copies towards the device are the merged relations' tuples, or their keys.
TEST_F(Strategies, MgsmjCountOnlyCopiesKeysAloneToTheJoin) {
  for (const char* output : {"direct", "count_only"}) {
    RunPoint p = point("mgsmj", pk_fk(20000, 80000, 8, 1.0, 0.0, {4}, {8}), {{"output", output}}, {1, 1});
    p.cluster.device_memory = 1 << 20;
    const RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest.count, 80000u);
    const uint64_t bytes = copied_in_phase(o, "join", MemSpace::Pinned, MemSpace::Device);  // one rank
    EXPECT_EQ(bytes, std::string(output) == "count_only" ? 100000u * 8 : 20000u * 12 + 80000u * 16) << output;
  }
}

// The merge-based sort on 8 GPUs (7 merge stages, groups of 2, 4 and 8), chunks of unequal size
// (the slices do not divide evenly), a hot key and many-to-many keys whose runs cross GPUs.
TEST_F(Strategies, MgsmjMergeSortOnEightRanks) {
  for (const Workload& w : {pk_fk(20011, 80021, 4, 1.0, 1.5), uniform_both(3001, 4003, 50, 8), pk_fk(7, 3)}) {
    RunPoint p = point("mgsmj", w, {{"sort", "merge"}, {"chunk_rows", "1000"}}, {1, 8});
    p.cluster.device_memory = 1 << 20;
    expect_correct(p);
  }
}

TEST_F(Strategies, MgsmjPhasesAndRejectedOptions) {
  using V = std::vector<std::string>;
  RunPoint p = point("mgsmj", pk_fk(20000, 80000), {}, {1, 2});
  p.cluster.device_memory = 1 << 20;
  std::vector<std::string> names;
  for (const auto& r : run_point(p).phases) names.push_back(r.name);
  EXPECT_EQ(names, (V{"generate", "histogram", "sort", "merge", "join", "verify"}));
  // The merge stages pair up halves of groups: 3 GPUs are rejected before any work, by name.
  for (int g : {3, 6}) try {
      validate_point(point("mgsmj", pk_fk(100, 100), {{"sort", "merge"}}, {1, g}));
      ADD_FAILURE() << "sort = merge was accepted on " << g << " ranks";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("sort = merge"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("power-of-two"), std::string::npos) << e.what();
    }
  EXPECT_NO_THROW(validate_point(point("mgsmj", pk_fk(100, 100), {{"sort", "radix"}}, {1, 3})));
  EXPECT_THROW(validate_point(point("mgsmj", pk_fk(100, 100), {{"sort", "bitonic"}}, {1, 2})), InputError);
  EXPECT_THROW(run_point(point("mgsmj", pk_fk(100, 100, 4, 1.0, 0.0, {4, 8}), {}, {1, 2})), InputError);
}

TEST_F(Strategies, ShuffleOnOneToFourRanksAndBothLevels) {
  const std::vector<ClusterShape> shapes = {{1, 1}, {1, 2}, {2, 1}, {1, 3}, {3, 1}, {2, 2}, {4, 1}, {1, 4}};
  const std::vector<Workload> workloads = {pk_fk(10007, 30011, 4, 1.0, 1.0), pk_fk(999, 5000, 8, 0.1, 1.5),
                                           pk_fk(5, 3),  // fewer rows than ranks: empty slices
                                           uniform_both(1500, 1700, 150)};
  for (auto shape : shapes)
    for (std::string levels : {"1", "2"})
      for (auto& w : workloads) expect_correct(point("shuffle", w, {{"levels", levels}}, shape));
}

TEST_F(Strategies, ShuffleLocalJoinsChunksAndLateMaterialization) {
  const Workload late = pk_fk(6000, 15000, 8, 0.5, 1.0, {4, 8}, {8, 4});
  for (std::string local : {"npj", "phj"})
    for (std::string levels : {"1", "2"}) {
      expect_correct(point("shuffle", late, {{"local_join", local}, {"levels", levels}}, {2, 2}));
      expect_correct(point("shuffle", late,
                           {{"local_join", local}, {"levels", levels}, {"chunk_rows", "100"}, {"inflight", "1"}},
                           {2, 2}));
    }
  expect_correct(point("shuffle", late, {{"chunk_rows", "333"}, {"inflight", "3"}, {"seed", "7"}}, {1, 3}));
  expect_correct(point("shuffle", late, {{"output", "direct"}, {"table", "chained"}}, {3, 1}));
}

// compression = cascaded / auto gives the uncompressed join (count and checksum) on TPC-H keys
// (what the codec shrinks most), foreign and uniform keys, 4- and 8-byte keys and late
// materialization (payload columns of both widths), on 1 to 4 ranks with one and two levels; the
// compressed runs compress (their phases say so) and the uncompressed ones do not.
TEST_F(Strategies, ShuffleWithCompressionJoinsWhatItJoinsWithout) {
  std::vector<Workload> workloads = {test::tpch(0.01, 4), test::tpch(0.01, 8), pk_fk(4000, 9000, 8, 0.5, 1.0),
                                     uniform_both(1500, 1700, 150, 8), pk_fk(3000, 7001, 4, 1.0, 0.0, {4, 8}, {8, 4})};
  const std::vector<ClusterShape> shapes = {{1, 1}, {1, 2}, {1, 4}, {2, 2}};
  for (auto shape : shapes)
    for (std::string levels : {"1", "2"})
      for (std::string compression : {"off", "cascaded", "auto"})
        for (auto& w : workloads) {
          const RunPoint p = point("shuffle", w, {{"levels", levels}, {"compression", compression}}, shape);
          expect_correct(p);
          if (shape.size() == 1 || compression == "auto") continue;
          std::vector<std::string> names;
          for (auto& ph : run_point(p).phases) names.push_back(ph.name);
          auto has = [&](const std::string& prefix) {  // a level's phase: "compress" or "compress_node"
            return std::any_of(names.begin(), names.end(), [&](auto& n) { return n.rfind(prefix, 0) == 0; });
          };
          const bool compressed = has("compress") && has("decompress");
          EXPECT_EQ(compressed, compression == "cascaded") << describe(p);
          if (compression == "cascaded" && levels == "2" && shape.nodes > 1 && shape.per_node > 1) {  // both levels
            EXPECT_NE(std::find(names.begin(), names.end(), "decompress_node"), names.end()) << describe(p);
          }
        }
}

TEST_F(Strategies, PhasesStartWithGenerateAndNameTheSteps) {
  auto names = [](const RunOutcome& o) {
    std::vector<std::string> v;
    for (auto& ph : o.phases) v.push_back(ph.name);
    return v;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names(run_point(point("npj", pk_fk(100, 200)))), (V{"generate", "build", "probe", "verify"}));
  EXPECT_EQ(names(run_point(point("phj", pk_fk(100, 200)))), (V{"generate", "partition", "join", "verify"}));
  EXPECT_EQ(names(run_point(point("smj", pk_fk(100, 200, 4, 1.0, 0.0, {4, 4})))),
            (V{"generate", "sort", "merge_join", "materialize", "verify"}));
  EXPECT_EQ(names(run_point(point("chunked", pk_fk(100, 200)))), (V{"generate", "build", "probe", "verify"}));
  EXPECT_EQ(names(run_point(point("shuffle", pk_fk(100, 200), {{"levels", "2"}}, {2, 2}))),
            (V{"generate", "partition", "shuffle", "partition_node", "shuffle_node", "local_build", "local_probe",
               "verify"}));
  EXPECT_EQ(names(run_point(point("shuffle", pk_fk(100, 200), {{"local_join", "phj"}}, {1, 2}))),
            (V{"generate", "partition", "shuffle", "local_partition", "local_join", "verify"}));
}

// The measured total covers the join's phases only: generation and verification (the output
// checksum) are reported as phases but left out, for every strategy alike.
TEST_F(Strategies, TotalLeavesOutGenerateAndVerify) {
  for (const char* name : {"npj", "phj", "smj"}) {
    const RunOutcome o = run_point(point(name, pk_fk(1000, 3000)));
    double first = 1e300, last = -1e300, verify = -1;
    for (const auto& ranks : o.rank_phases)
      for (const auto& ph : ranks) {
        if (ph.name == kVerifyPhase) verify = ph.end - ph.begin;
        if (ph.name == kGeneratePhase || ph.name == kVerifyPhase) continue;
        first = std::min(first, ph.begin);
        last = std::max(last, ph.end);
      }
    EXPECT_GE(verify, 0) << name << ": no verify phase";
    EXPECT_DOUBLE_EQ(o.total_seconds, last - first) << name;
    EXPECT_FALSE(timed_phase(kVerifyPhase));
    EXPECT_FALSE(timed_phase(kGeneratePhase));
    EXPECT_TRUE(timed_phase("join"));
  }
}

TEST_F(Strategies, BadOptionsAreInputErrors) {
  const Workload w = pk_fk(10, 10);
  const std::vector<std::pair<std::string, Options>> bad = {
      {"npj", {{"table", "cuckoo"}}},          {"npj", {{"load_factor", "0"}}},
      {"npj", {{"load_factor", "1.5"}}},       {"npj", {{"output", "maybe"}}},
      {"npj", {{"radix_bits", "4"}}},          {"phj", {{"passes", "3"}}},
      {"phj", {{"radix_bits", "-1"}}},         {"phj", {{"radix_bits", "x"}}},
      {"phj", {{"partition_budget", "0"}}},    {"smj", {{"sort", "bubble"}}},
      {"chunked", {{"chunk_rows", "0"}}},      {"chunked", {{"streams", "0"}}},
      {"chunked", {{"output_space", "disk"}}}, {"shuffle", {{"levels", "3"}}},
      {"triton", {{"partitioner", "private"}}}, {"triton", {{"spill_read", "dma"}}},
      {"triton", {{"prefix_sum", "fpga"}}},
      {"shuffle", {{"local_join", "smj"}}},    {"shuffle", {{"inflight", "0"}}},
      {"shuffle", {{"chunk_rows", "-5"}}},     {"shuffle", {{"seed", "-1"}}}};
  for (auto& [name, opts] : bad) {
    const RunPoint p = point(name, w, opts);
    SCOPED_TRACE(describe(p));
    EXPECT_THROW(validate_point(p), InputError);
  }
  try {
    validate_point(point("npj", w, {{"table", "cuckoo"}}));
    FAIL() << "no error";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("table"), std::string::npos) << m;
    EXPECT_NE(m.find("cuckoo"), std::string::npos) << m;
    EXPECT_NE(m.find("chained"), std::string::npos) << m;  // says what is allowed
  }
  EXPECT_THROW(validate_point(point("phj", w, {}, {1, 2})), InputError);  // single-rank strategy on 2 ranks
}

TEST(RadixPlan, FitsTheBudgetInOneOrTwoPasses) {
  // 2^20 tuples of 8 bytes over a 64 KiB budget: 128 partitions, one pass.
  RadixPlan p = plan_radix(1 << 20, 8, 4, 64 << 10, 0, 0);
  EXPECT_EQ(p.bits(), 7u);
  EXPECT_EQ(p.passes(), 1);
  // 2^27 tuples: 2^14 partitions, beyond one pass: split 7 + 7.
  p = plan_radix(1ULL << 27, 8, 4, 64 << 10, 0, 0);
  EXPECT_EQ(p.pass1_bits, 7u);
  EXPECT_EQ(p.pass2_bits, 7u);
  // Fits without partitioning.
  EXPECT_EQ(plan_radix(100, 8, 4, 64 << 10, 0, 0).passes(), 0);
  // Forced passes get at least one bit each; explicit bits are kept.
  p = plan_radix(100, 8, 4, 64 << 10, 0, 2);
  EXPECT_EQ(p.pass1_bits, 1u);
  EXPECT_EQ(p.pass2_bits, 1u);
  p = plan_radix(100, 8, 4, 64 << 10, 9, 2);
  EXPECT_EQ(p.pass1_bits, 5u);
  EXPECT_EQ(p.pass2_bits, 4u);
  EXPECT_EQ(plan_radix(1ULL << 30, 16, 8, 1024, 0, 0).bits(), kMaxRadixBits);
}

TEST_F(Strategies, BoundsCountTheBytesOverTheTightestResource) {
  Bandwidths bw;
  bw.mem = 1e12;
  bw.h2d = 50e9;
  bw.p2p = 400e9;
  bw.net = 25e9;
  const Workload w = pk_fk(1 << 20, 1 << 20);  // 8-byte tuples, 8 MiB each; output 12 bytes/row
  const double rs = 2.0 * 8 * (1 << 20), out = 12.0 * (1 << 20);
  auto bound = [&](const std::string& name, Options o, ClusterShape shape = {1, 1}) {
    RunPoint p = point(name, w, std::move(o), shape);
    return find_strategy(name).bound(make_job(p), shape, bw);
  };
  // phj: one pass (2^7 partitions) = read + write of R and S, the join reads them, output.
  EXPECT_DOUBLE_EQ(bound("phj", {}).seconds, (3 * rs + out) / bw.mem);
  EXPECT_DOUBLE_EQ(bound("phj", {{"passes", "2"}}).seconds, (5 * rs + out) / bw.mem);
  EXPECT_DOUBLE_EQ(bound("phj", {{"output", "count_only"}}).seconds, 3 * rs / bw.mem);
  // chunked: S over the interconnect.
  EXPECT_DOUBLE_EQ(bound("chunked", {}).seconds, rs / 2 / bw.h2d);
  EXPECT_NE(bound("chunked", {}).resource.find("host-to-device"), std::string::npos);
  // npj and smj move more than phj's single pass.
  EXPECT_GT(bound("npj", {}).seconds, 0);
  EXPECT_GT(bound("smj", {}).seconds, bound("phj", {}).seconds);
  // shuffle on 2 nodes x 1: half of each rank's 8 MiB leaves over the network.
  EXPECT_DOUBLE_EQ(bound("shuffle", {}, {2, 1}).seconds, rs / 2 / 2 / bw.net);
  // Two levels on 2 x 2: half of each rank's share crosses the network, then half NVLink.
  EXPECT_DOUBLE_EQ(bound("shuffle", {{"levels", "2"}}, {2, 2}).seconds, rs / 4 / 2 / bw.net + rs / 4 / 2 / bw.p2p);
  EXPECT_EQ(bound("phj", {}, {1, 1}).resource.find("device memory"), 0u);
  // mgsmj on 2 GPUs: resident (one chunkset each), every tuple in once; the paper's plan in twice
  // and back once; relations larger than a chunk (device memory known) add the multiway merge's
  // host-memory traffic.
  EXPECT_DOUBLE_EQ(bound("mgsmj", {}, {1, 2}).seconds, rs / 2 / bw.h2d);
  EXPECT_DOUBLE_EQ(bound("mgsmj", {{"resident", "off"}}, {1, 2}).seconds, 2 * rs / 2 / bw.h2d);
  Bandwidths host = bw;
  host.host_mem = 100e9;
  JoinJob small = make_job(point("mgsmj", w, {}, {1, 2}));
  small.device_memory = 1 << 20;  // chunks of 3/8 MiB / 4 / 8 bytes, halved: several per relation
  EXPECT_DOUBLE_EQ(find_strategy("mgsmj").bound(small, {1, 2}, host).seconds, 2 * rs / 2 / bw.h2d + 2 * rs / host.host_mem);
}

// A strategy that joins like npj and then flips one bit of one output value before the
// checksum: run_point must refuse the result.
TEST_F(Strategies, CorruptedResultIsDetected) {
  StrategyInfo info = find_strategy("npj");
  info.name = "npj_corrupted_for_test";
  info.make = strategy_factory([](Rank& rank, const JoinJob& job) {
    Inputs in = generate_inputs(rank, job, job.data_space, job.data_space);
    OutputSink out = npj_join(rank, Stream{0}, in.r.tuples, in.s.tuples, hash_join_config(job.options), job.data_space);
    auto segments = out.segments();
    // Bit 0 of the first S value: a payload, or a row index that stays within S.
    if (!segments.empty() && segments[0].rows > 0) *data_of<uint8_t>(segments[0].out.svals) ^= 1;
    report_output(rank, Stream{0}, out, in.r, in.s, job.data_space);
  });
  register_strategy(info);
  for (const Workload& w : {pk_fk(1000, 2000), pk_fk(1000, 2000, 8, 1.0, 0.0, {4}, {4, 4})}) {
    const RunPoint p = point("npj_corrupted_for_test", w);
    EXPECT_THROW(run_point(p), VerificationError) << describe(p);
    try {
      run_point(p);
    } catch (const VerificationError& e) {
      EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
    }
  }
}
