// The distributed runtime on ranks as threads (in-process transport): gpj, gpj-b, gpj-h and crj
// against the reference across rank counts, workloads and chunk geometries; the one-sided
// exchange with both placements at once; and gpj's streaming operators (chunk packing, the
// persistent consumer: checksums, stale slots, corruption, stalls, cancellation) on their own.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/exec/chunk.hpp"
#include "core/exec/trace.hpp"
#include "core/experiment/runner.hpp"
#include "core/runtime/cpu_streaming.hpp"
#include "core/strategies/rank_joins.hpp"
#include "core/strategies/rdma_exchange.hpp"
#include "core/verify/checksum.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "tests/test_workloads.hpp"

using namespace joinlab;

namespace {

using Options = std::map<std::string, std::string>;

const std::vector<std::string> kDistributed = {"gpj", "gpj-b", "gpj-h", "crj"};

using test::pk_fk;

// Many-to-many: both sides uniform over a small range (the output outgrows |S|: gpj reruns).
Workload many_to_many(uint64_t r_rows, uint64_t s_rows, uint64_t range) {
  Workload w = pk_fk(r_rows, s_rows);
  w.r.dist = w.s.dist = KeyDist::Uniform;
  w.r.range_lo = w.s.range_lo = 1;
  w.r.range_hi = w.s.range_hi = range;
  return w;
}

RunPoint point(const std::string& strategy, const Workload& w, Options options, ClusterShape shape,
               std::map<std::string, std::string> cluster = {}) {
  RunPoint p;
  p.name = "test";
  p.strategy = strategy;
  p.backend = "cpu";
  p.cluster.shape = shape;
  p.cluster.threads_per_rank = 1;
  p.cluster.options = std::move(cluster);
  p.workload = w;
  p.strategy_options = std::move(options);
  return p;
}

void expect_correct(const RunPoint& p) {
  std::string what = p.strategy + " on " + std::to_string(p.cluster.shape.nodes) + "x" +
                     std::to_string(p.cluster.shape.per_node);
  for (auto& [k, v] : p.strategy_options) what += " " + k + "=" + v;
  SCOPED_TRACE(what);
  RunOutcome o;
  ASSERT_NO_THROW(o = run_point(p));
  const ExpectedResult want = expected_result(p.workload);
  EXPECT_EQ(o.digest.count, want.digest.count);
  if (o.has_checksum) {
    EXPECT_EQ(o.digest.checksum, want.digest.checksum);
  }
}

// Small chunks, rings and batches, so that slots are reused, batches overlap and partial chunks
// occur.
const Options kSmallGeometry = {{"chunk_bytes", "2048"}, {"slots", "2"}, {"batch_rows", "3000"}};

class Distributed : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { register_builtin(); }
};

}  // namespace

TEST_F(Distributed, GpjBLandedInHostMemoryJoinsLikeLandedOnTheGpu) {
  // landing = host: the shuffle lands in pinned host memory and is copied to the "GPU" (the
  // rank's device budget) before the join, which must give the same verified result.
  for (ClusterShape shape : {ClusterShape{1, 2}, ClusterShape{1, 3}}) {
    Options o = kSmallGeometry;
    o["landing"] = "host";
    RunPoint p = point("gpj-b", pk_fk(20000, 50000), o, shape);
    expect_correct(p);
    const RunOutcome out = run_point(p);
    EXPECT_TRUE(std::any_of(out.phases.begin(), out.phases.end(), [](auto& ph) { return ph.name == "copy_in"; }))
        << "the landed relations are copied in a phase of their own";
  }
}

TEST_F(Distributed, GpjWithoutGpudirectJoinsLikeWithIt) {
  // gpudirect = off: the chunks land in rings in pinned host memory and each is copied to the
  // "GPU" rings the consumer reads; small rings, so that slots are reused while copies are queued.
  for (const std::string s : {"gpj", "gpj-h"})
    for (ClusterShape shape : {ClusterShape{1, 1}, ClusterShape{1, 2}, ClusterShape{2, 2}}) {
      Options o = kSmallGeometry;
      o["gpudirect"] = "off";
      expect_correct(point(s, pk_fk(20000, 50000), o, shape));
    }
  Options o = kSmallGeometry;
  o["gpudirect"] = "off";
  expect_correct(point("gpj", pk_fk(20000, 40000, 8, 0.5, 1.2), o, {1, 2}));
  // What arrived crossed from pinned host memory to the device: every chunk, R's and S's.
  const RunOutcome out = run_point(point("gpj", pk_fk(20000, 50000), o, {1, 2}));
  uint64_t copied = 0;
  for (const TraceSpan& t : out.trace)
    if (t.params.kind == OpKind::Copy && t.params.mem_src == int(MemSpace::Pinned) &&
        t.params.mem_dst == int(MemSpace::Device))
      copied += t.params.bytes;
  EXPECT_GE(copied, uint64_t(70000) * 8) << "the landed tuples (4-byte keys and payloads) are copied in";
}

TEST_F(Distributed, GpjBTakesGpudirectAsItsLanding) {
  // gpj-b's gpudirect = off is landing = host (the copy_in phase); the two must not contradict.
  Options o = kSmallGeometry;
  o["gpudirect"] = "off";
  const RunOutcome out = run_point(point("gpj-b", pk_fk(20000, 50000), o, {1, 2}));
  EXPECT_EQ(out.checked, "yes");
  EXPECT_TRUE(std::any_of(out.phases.begin(), out.phases.end(), [](auto& ph) { return ph.name == "copy_in"; }));
  o["landing"] = "device";
  EXPECT_THROW(run_point(point("gpj-b", pk_fk(20000, 50000), o, {1, 2})), InputError);
}

TEST_F(Distributed, GpjGpudirectRejectsOtherValues) {
  Options o = kSmallGeometry;
  o["gpudirect"] = "maybe";
  try {
    run_point(point("gpj", pk_fk(2000, 5000), o, {1, 2}));
    FAIL() << "gpudirect = maybe ran";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("gpudirect"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("maybe"), std::string::npos) << e.what();
  }
}

TEST_F(Distributed, ConcurrentJoinsEachGiveTheVerifiedResult) {
  // N joins at once on the same 2 ranks: each its own transports and windows, the ranks' memory
  // shared. run_point checks every join's count and checksum.
  for (const std::string s : {"gpj", "gpj-b", "shuffle"})
    for (int joins : {2, 3}) {
      Options o = s == "shuffle" ? Options{} : kSmallGeometry;
      if (s == "gpj") o["gpudirect"] = joins == 3 ? "off" : "on";
      RunPoint p = point(s, pk_fk(20000, 50000), o, {1, 2});
      p.cluster.jobs = joins;
      SCOPED_TRACE(s + ", " + std::to_string(joins) + " joins");
      RunOutcome out;
      ASSERT_NO_THROW(out = run_point(p));
      EXPECT_EQ(out.checked, "yes");
      EXPECT_NE(out.verified.find(std::to_string(joins) + " joins, each"), std::string::npos) << out.verified;
      ASSERT_EQ(out.join_seconds.size(), size_t(joins));
      for (double t : out.join_seconds) {
        EXPECT_GT(t, 0);
        EXPECT_LE(t, out.total_seconds * (1 + 1e-9)) << "a join's span lies within the makespan";
      }
    }
}

TEST_F(Distributed, ConcurrentJoinsMustBeAtLeastOne) {
  RunPoint p = point("gpj", pk_fk(2000, 5000), kSmallGeometry, {1, 2});
  p.cluster.jobs = 0;
  try {
    run_point(p);
    FAIL() << "0 concurrent joins ran";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("experiment.concurrent_joins = 0"), std::string::npos) << e.what();
  }
}

TEST_F(Distributed, AllAreRegisteredForAnyRankCount) {
  for (auto& name : kDistributed) {
    EXPECT_NO_THROW(find_strategy(name)) << name;
    EXPECT_EQ(find_strategy(name).max_ranks, 0) << name;
  }
}

TEST_F(Distributed, EveryStrategyOnOneToFourRanks) {
  for (auto& s : kDistributed)
    for (ClusterShape shape : {ClusterShape{1, 1}, ClusterShape{1, 2}, ClusterShape{1, 3}, ClusterShape{2, 2}})
      expect_correct(point(s, pk_fk(20000, 50000), kSmallGeometry, shape));
}

TEST_F(Distributed, SkewMatchRatesKeyWidthsAndManyToMany) {
  for (auto& s : kDistributed) {
    expect_correct(point(s, pk_fk(20000, 40000, 4, 0.5, 1.2), kSmallGeometry, {1, 4}));
    expect_correct(point(s, pk_fk(20000, 40000, 8), kSmallGeometry, {1, 3}));
    expect_correct(point(s, many_to_many(3000, 5000, 400), kSmallGeometry, {1, 4}));
  }
}

TEST_F(Distributed, DefaultGeometryAndCountOnly) {
  const Workload w = pk_fk(30000, 60000, 4, 0.7);
  for (auto& s : kDistributed) {
    expect_correct(point(s, w, {}, {1, 4}));
    // Nothing materialized: no checksum to verify, but the count is right.
    RunPoint p = point(s, w, {{"output", "count_only"}}, {1, 2});
    p.verify = false;
    const RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest.count, expected_result(w).digest.count) << s;
    EXPECT_FALSE(o.has_checksum) << s;
  }
}

TEST_F(Distributed, GpjHybridPlacesWhatFitsAndJoinsTheRestOnTheCpu) {
  // Rows the persistent consumers and the CPU radix join handled, from the run's trace.
  auto split = [](const RunOutcome& o) {
    std::pair<uint64_t, uint64_t> gpu_cpu{0, 0};
    for (const TraceSpan& s : o.trace) {
      if (s.params.kind == OpKind::StreamConsume) gpu_cpu.first += s.params.bytes;
      if (s.params.kind == OpKind::PartitionedJoin) gpu_cpu.second += s.params.rows_in;
    }
    return gpu_cpu;
  };
  // 200 KB of device memory per rank: some partitions' tables and rings fit, most do not; 1 byte:
  // none; 1 GB: all.
  for (uint64_t memory : {uint64_t(200000), uint64_t(1), uint64_t(1) << 30}) {
    SCOPED_TRACE(memory);
    RunPoint p = point("gpj-h", pk_fk(40000, 80000), {{"chunk_bytes", "1024"}, {"slots", "2"}, {"staging_rows", "1024"}},
                       {1, 4});
    p.cluster.device_memory = memory;
    expect_correct(p);
    const auto [gpu, cpu] = split(run_point(p));
    EXPECT_EQ(gpu > 0, memory > 1);
    EXPECT_EQ(cpu > 0, memory < (uint64_t(1) << 30));
  }
}

TEST_F(Distributed, GpjSaysWhenItsPartitionsDoNotFitTheGpu) {
  RunPoint p = point("gpj", pk_fk(40000, 80000), {}, {1, 2});
  p.cluster.device_memory = 100000;
  try {
    run_point(p);
    FAIL() << "gpj ran in 100 KB of device memory";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("device memory"), std::string::npos) << m;
    EXPECT_NE(m.find("gpj-h"), std::string::npos) << m;
  }
}

TEST_F(Distributed, SeveralPayloadColumnsAreAnInputError) {
  for (auto& s : kDistributed) {
    Workload w = pk_fk(1000, 2000);
    w.s.payload_bytes = {4, 8};
    try {
      run_point(point(s, w, {}, {1, 2}));
      FAIL() << s << " accepted two payload columns";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("payload"), std::string::npos) << e.what();
    }
  }
}

TEST_F(Distributed, BadOptionsAreInputErrors) {
  for (const auto& [s, key, value] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"gpj", "slots", "-1"},
           {"gpj", "chunk_bytes", "8"},
           {"gpj", "batch_rows", "-5"},
           {"gpj", "parts_per_receiver", "0"},
           {"gpj-h", "gpu_fill", "1.5"},
           {"crj", "chunk_timeout_s", "-1"},
           {"gpj-b", "radix_bits", "99"}}) {
    EXPECT_THROW(validate_point(point(s, pk_fk(100, 200), {{key, value}}, {1, 2})), InputError) << s << " " << key;
  }
}

TEST(ExchangeGeometry, FollowsTheClusterAndTheDataUnlessGiven) {
  // The measured geometry where it fits: 1 MiB chunks, 16 slots, 16Mi-row batches.
  ExchangeConfig c;
  exchange_geometry(c, 2, uint64_t(3) << 30);
  EXPECT_EQ(c.chunk_bytes, 1u << 20);
  EXPECT_EQ(c.slots, 16u);
  EXPECT_EQ(c.batch_rows, 16u << 20);
  // 1024 ranks x 16 partitions: a receiver's rings within the budget, at 4 slots of 64 KiB.
  ExchangeConfig big;
  exchange_geometry(big, 1024, uint64_t(8) << 30);
  EXPECT_EQ(big.slots, 4u);
  EXPECT_LE(uint64_t(1024) * 16 * big.slots * big.chunk_bytes, kRingBudget);
  EXPECT_EQ(big.chunk_bytes, 64u << 10);
  EXPECT_GE(big.batch_rows, uint64_t(1024) * 16 * (big.chunk_bytes / 16)) << "a chunk per partition and batch";
  // A small join: chunks no larger than half of what a sender has per partition.
  ExchangeConfig small;
  exchange_geometry(small, 2, 32u << 20);  // 1 MiB per partition of 32
  EXPECT_LE(2 * small.chunk_bytes, 1u << 20);
  EXPECT_LE(small.slots * small.chunk_bytes, 1u << 20);
  // What the options give is kept.
  ExchangeConfig given;
  given.chunk_bytes = 4096;
  given.slots = 2;
  given.batch_rows = 1000;
  exchange_geometry(given, 1024, uint64_t(8) << 30);
  EXPECT_EQ(given.chunk_bytes, 4096u);
  EXPECT_EQ(given.slots, 2u);
  EXPECT_EQ(given.batch_rows, 1000u);
}

TEST_F(Distributed, PhasesNameThePipelineAndTheBlockingJoin) {
  auto names = [](const RunOutcome& o) {
    std::vector<std::string> v;
    for (auto& p : o.phases) v.push_back(p.name);
    return v;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(names(run_point(point("gpj", pk_fk(1000, 2000), {}, {1, 2}))),
            (V{"generate", "histogram", "setup", "stream", "verify"}));
  EXPECT_EQ(names(run_point(point("crj", pk_fk(1000, 2000), {}, {1, 2}))),
            (V{"generate", "histogram", "setup", "exchange", "local_partition", "local_join", "verify"}));
}

TEST_F(Distributed, BoundsCountTheExchangeAndTheJoin) {
  Bandwidths bw;
  bw.mem = 1e12;
  bw.host_mem = 1e11;
  bw.net = 1e10;
  bw.p2p = 1e11;
  JoinJob job;
  job.workload = pk_fk(1 << 20, 1 << 20);
  for (auto& s : kDistributed) {
    const StrategyInfo& info = find_strategy(s);
    RunPoint p = point(s, job.workload, {}, {2, 1});
    const JoinJob j = make_job(p);
    const Bound b = info.bound(j, {2, 1}, bw);
    // Half of each rank's 8 MiB of R and S leaves its node at 10 GB/s.
    const double net = double(8 << 20) / 2 / 1e10;
    EXPECT_GE(b.seconds, net) << s << ": " << b.resource;
    EXPECT_FALSE(b.resource.empty()) << s;
  }
}

// --- the one-sided exchange with both placements ------------------------------------------------------

TEST_F(Distributed, ExchangeStreamsAndMaterializesInOneRun) {
  StrategyInfo info = find_strategy("gpj");
  info.name = "exchange_mixed_for_test";
  info.make = strategy_factory([](Rank& rank, const JoinJob& job) {
    ExchangeConfig cfg = exchange_config(job.options, rank.size(), job.workload);
    Inputs in = generate_inputs(rank, job, MemSpace::Host, MemSpace::Host);
    const auto parts = OverPartitioning::make(cfg.parts_per_receiver, rank.size(), cfg.seed);
    // Every other partition of a receiver streams, the rest is materialized.
    const PlacementFn alternate = [](const std::vector<uint64_t>& r, const std::vector<uint64_t>&) {
      std::vector<Placement> p;
      for (size_t i = 0; i < r.size(); ++i) p.push_back(i % 2 ? Placement::Materialize : Placement::Stream);
      return p;
    };
    ExchangeResult res = run_exchange(rank, in, parts, cfg, alternate);
    if (res.streamed_partitions == 0 || res.materialized_partitions == 0)
      throw RuntimeError("expected both placements on rank " + std::to_string(rank.id()));
    OutputSink out = res.streamed;
    out.append(phj_join(rank, Stream{0}, res.r, res.s, PhjConfig{}, MemSpace::Host, "mat_"));
    report_output(rank, Stream{0}, out, in.r, in.s, MemSpace::Host);
  });
  register_strategy(info);
  for (ClusterShape shape : {ClusterShape{1, 1}, ClusterShape{1, 3}, ClusterShape{2, 2}})
    expect_correct(point("exchange_mixed_for_test", pk_fk(20000, 30000), kSmallGeometry, shape));
}

// The senders put consecutive chunks of a partition that land in consecutive ring slots in one put
// (chunks_per_put, at most half the slots); where R's and S's chunk images differ in size from the
// ring's slots (8-byte keys: R tuples of 16 bytes, S of 12) those go one per put. Both send
// buffer kinds (pinned: queued without waiting; pageable: each batch waited for) join correctly.
TEST_F(Distributed, GpjPutsConsecutiveChunksOfAPartitionTogether) {
  for (uint8_t key_bytes : {uint8_t(4), uint8_t(8)}) {
    // Chunks of 256 rows; per rank and partition (2 ranks x 16 partitions each) about 640 R rows
    // (3 chunks) and 1152 S rows (5 chunks), all in one batch of each.
    const Workload w = pk_fk(40960, 73728, key_bytes);
    const TupleFormat rf{key_bytes, key_bytes}, sf{key_bytes, 4};
    const uint64_t slot_rows = 256;
    const uint64_t chunk = slot_rows * std::max(rf.tuple_bytes(), sf.tuple_bytes());
    const uint64_t slot = std::max(chunk_slot_bytes(rf, slot_rows), chunk_slot_bytes(sf, slot_rows));
    // Chunks and data puts (flag-only credit puts carry no bytes) of one run, from its trace.
    auto run = [&](const std::string& per_put, const std::string& buffers) {
      RunPoint p = point("gpj", w,
                         {{"chunk_bytes", std::to_string(chunk)}, {"slots", "8"}, {"batch_rows", "40000"},
                          {"chunks_per_put", per_put}, {"send_buffers", buffers}},
                         {1, 2});
      expect_correct(p);
      const RunOutcome o = run_point(p);
      std::pair<uint64_t, uint64_t> chunks_puts{0, 0};
      for (const TraceSpan& s : o.trace) {
        if (s.params.kind == OpKind::StreamConsume) chunks_puts.first += s.params.bytes / slot;
        if (s.params.kind == OpKind::Put && s.params.bytes > 0) ++chunks_puts.second;
      }
      return chunks_puts;
    };
    SCOPED_TRACE(int(key_bytes));
    const auto [chunks, single] = run("1", "pinned");
    ASSERT_GT(chunks, 0u);
    EXPECT_EQ(single, chunks) << "one put per chunk";
    const auto [chunks4, grouped] = run("4", "pinned");
    EXPECT_EQ(chunks4, chunks);
    if (key_bytes == 4) {
      // Per partition and rank: 3 R chunks in one put; 5 S chunks in two (the ring wraps after 8).
      EXPECT_EQ(grouped * 8, chunks * 3);
    } else {
      // R's 16-byte tuples fill the ring's slots (3 chunks, one put); S's are one per put.
      EXPECT_EQ(grouped * 8, chunks * (1 + 5));
    }
    EXPECT_EQ(run("4", "pageable").second, grouped);
  }
}

// gpj's senders partition each batch straight into chunk images (PackChunksOp with partition_by,
// given the counts of the batch's slices from the histogram pass): no Partition operator and no
// partitioned copy, one pack per batch over all its rows; the join is right on several ranks and
// node shapes, with both send buffer kinds, and with batches counted whole. gpj-h, which
// materializes some partitions, still partitions into a copy first.
TEST_F(Distributed, GpjPartitionsStraightIntoChunkImages) {
  const Workload w = pk_fk(30000, 70000, 8);
  for (ClusterShape shape : {ClusterShape{1, 3}, ClusterShape{2, 2}})
    for (const std::string buffers : {"pinned", "pageable"}) {
      RunPoint p = point("gpj", w,
                         {{"chunk_bytes", "4096"}, {"slots", "4"}, {"batch_rows", "5000"}, {"min_slice_rows", "1250"},
                          {"send_buffers", buffers}},
                         shape);
      SCOPED_TRACE(buffers + " on " + std::to_string(shape.size()) + " ranks");
      expect_correct(p);
      const RunOutcome o = run_point(p);
      uint64_t partitioned = 0, packed_rows = 0, packs = 0, counted = 0, counts = 0, in_slices = 0;
      for (const TraceSpan& sp : o.trace) {
        if (sp.params.kind == OpKind::Partition) ++partitioned;
        if (sp.params.kind == OpKind::Histogram) {
          ++counts, counted += sp.params.rows_in;
          in_slices += sp.params.detail.find("segments 4") != std::string::npos;
        }
        if (sp.params.kind == OpKind::PackChunks) {
          ++packs;
          packed_rows += sp.params.rows_in;
          EXPECT_LE(sp.params.rows_in, 5000u) << "one batch";
          EXPECT_NE(sp.params.detail.find("partitioned while packed"), std::string::npos) << sp.params.detail;
        }
      }
      EXPECT_EQ(partitioned, 0u);
      EXPECT_EQ(packed_rows, w.r.rows + w.s.rows) << "every row packed once";
      EXPECT_GE(packs, (w.r.rows + w.s.rows) / 5000);
      // The histogram pass counted every row once, one operator per batch, in slices (4 of 1250
      // rows per full batch, of which every rank has at least one per relation).
      EXPECT_EQ(counted, w.r.rows + w.s.rows);
      EXPECT_EQ(counts, packs);
      EXPECT_GE(in_slices, 2u * uint64_t(shape.size()));
    }
  // Batches counted whole (count_slices = 1): the operator counts each batch itself.
  RunPoint whole = point("gpj", w, {{"chunk_bytes", "4096"}, {"batch_rows", "5000"}, {"count_slices", "1"}}, {1, 3});
  expect_correct(whole);
  uint64_t counts = 0, packs = 0;
  for (const TraceSpan& sp : run_point(whole).trace) {
    counts += sp.params.kind == OpKind::Histogram;
    packs += sp.params.kind == OpKind::PackChunks;
  }
  EXPECT_EQ(counts, packs);
  whole.strategy_options["count_slices"] = "0";
  EXPECT_THROW(run_point(whole), InputError);
  RunPoint h = point("gpj-h", w, {{"chunk_bytes", "1024"}, {"slots", "2"}, {"staging_rows", "1024"}}, {1, 2});
  h.cluster.device_memory = 300000;
  const RunOutcome o = run_point(h);
  EXPECT_EQ(o.digest, expected_result(w).digest);
  uint64_t partitioned = 0, fused = 0;
  for (const TraceSpan& sp : o.trace) {
    partitioned += sp.params.kind == OpKind::Partition && sp.params.rows_in > 0;
    fused += sp.params.kind == OpKind::PackChunks && sp.params.detail.find("partitioned while packed") != std::string::npos;
  }
  EXPECT_GT(partitioned, 0u);
  EXPECT_EQ(fused, 0u);
}

TEST_F(Distributed, SendBufferOptionIsChecked) {
  RunPoint p = point("gpj", pk_fk(1000, 2000), {{"send_buffers", "device"}}, {1, 2});
  EXPECT_THROW(run_point(p), InputError);
  p.strategy_options = {{"chunks_per_put", "0"}};
  EXPECT_THROW(run_point(p), InputError);
}

TEST(OverPartitioning, ContiguousRunsCoverEveryPartitionOnce) {
  for (int n : {1, 2, 3, 5, 8}) {
    const auto p = OverPartitioning::make(16, n, 7);
    EXPECT_GE(p.fanout(), 16u * uint64_t(n));
    EXPECT_EQ(p.first_of(0), 0u);
    EXPECT_EQ(p.first_of(n), p.fanout());
    for (int j = 0; j < n; ++j) {
      EXPECT_GE(p.first_of(j + 1) - p.first_of(j), 16u) << n << " " << j;
      for (uint64_t q = p.first_of(j); q < p.first_of(j + 1); ++q) EXPECT_EQ(p.receiver_of(q), j);
    }
  }
}

// --- streaming operators on their own -------------------------------------------------------------------

namespace {

struct HostBuffer final : BufferImpl {
  explicit HostBuffer(uint64_t n) {
    bytes = n;
    ptr = std::aligned_alloc(64, (std::max<uint64_t>(n, 1) + 63) / 64 * 64);
    std::memset(ptr, 0, bytes);
  }
  ~HostBuffer() override { std::free(ptr); }
};
Buffer host_buffer(uint64_t bytes) { return std::make_shared<HostBuffer>(bytes); }

Tuples host_tuples(const std::vector<uint32_t>& keys, const std::vector<uint32_t>& vals) {
  Tuples t;
  t.fmt = {4, 4};
  t.rows = t.capacity = keys.size();
  t.keys = host_buffer(keys.size() * 4);
  t.vals = host_buffer(vals.size() * 4);
  std::memcpy(t.keys->ptr, keys.data(), keys.size() * 4);
  std::memcpy(t.vals->ptr, vals.data(), vals.size() * 4);
  return t;
}

HashTable host_table(uint64_t rows) {
  HashTable t;
  t.kind = TableKind::Chained;
  t.fmt = {4, 4};
  t.slots = hash_table_slots(rows, 0.5);
  t.hash_seed = 99;
  t.heads = host_buffer(t.slots * 4);
  t.next = host_buffer(std::max<uint64_t>(rows, 1) * 4);
  t.keys = host_buffer(std::max<uint64_t>(rows, 1) * 4);
  t.vals = host_buffer(std::max<uint64_t>(rows, 1) * 4);
  return t;
}

// One sender, two partitions: R keys 1..r_rows (partition = key % 2), S keys 1..s_rows twice
// each where they exist in R; images packed by PackChunksOp, from the partitioned tuples or (with
// partition_while_packing) from the tuples in key order, partitioned by the operator (the same
// images: rows keep their order inside a partition).
struct StreamFixture {
  static constexpr uint64_t kSlotRows = 50;
  static constexpr uint32_t kSlots = 2, kEpoch = 77;
  uint64_t r_rows = 400, s_rows = 300;
  Tuples r, s;
  std::vector<uint64_t> r_begin, r_count, s_begin, s_count;  // per partition
  Buffer r_images, s_images;
  uint64_t slot_bytes = chunk_slot_bytes(TupleFormat{4, 4}, kSlotRows);

  explicit StreamFixture(bool partition_while_packing = false) {
    std::vector<uint32_t> rk, rv, sk, sv;
    for (int p = 0; p < 2; ++p) {
      r_begin.push_back(rk.size());
      for (uint32_t k = 1; k <= r_rows; ++k)
        if (k % 2 == uint32_t(p)) rk.push_back(k), rv.push_back(k * 3);
      r_count.push_back(rk.size() - r_begin.back());
      s_begin.push_back(sk.size());
      for (uint32_t k = 1; k <= s_rows; ++k)
        if (k % 2 == uint32_t(p)) sk.push_back(k), sv.push_back(k * 5), sk.push_back(k), sv.push_back(k * 7);
      s_count.push_back(sk.size() - s_begin.back());
    }
    r = host_tuples(rk, rv);
    s = host_tuples(sk, sv);
    if (partition_while_packing) {
      std::vector<uint32_t> rk0, rv0, sk0, sv0;  // key order
      for (uint32_t k = 1; k <= r_rows; ++k) rk0.push_back(k), rv0.push_back(k * 3);
      for (uint32_t k = 1; k <= s_rows; ++k) sk0.push_back(k), sv0.push_back(k * 5), sk0.push_back(k), sv0.push_back(k * 7);
      const PartitionFn odd{PartitionFn::Radix, 1, 0, 0};  // key % 2
      r_images = pack(host_tuples(rk0, rv0), {}, r_count, 0, {1, 1}, odd);
      s_images = pack(host_tuples(sk0, sv0), {}, s_count, 1, {chunks(r_count[0]) + 1, chunks(r_count[1]) + 1}, odd);
      return;
    }
    r_images = pack(r, r_begin, r_count, 0, {1, 1});
    s_images = pack(s, s_begin, s_count, 1, {chunks(r_count[0]) + 1, chunks(r_count[1]) + 1});
  }
  static uint64_t chunks(uint64_t rows) { return (rows + kSlotRows - 1) / kSlotRows; }

  Buffer pack(const Tuples& t, const std::vector<uint64_t>& begin, const std::vector<uint64_t>& rows, uint32_t rel,
              std::vector<uint64_t> first_seq, std::optional<PartitionFn> partition_by = {}) {
    PackChunksOp op;
    op.in = t;
    op.partition_by = partition_by;
    op.begin = begin;
    op.rows = rows;
    op.first_seq = std::move(first_seq);
    op.relation = rel;
    op.epoch = kEpoch;
    op.slot_rows = kSlotRows;
    op.out = host_buffer((chunks(rows[0]) + chunks(rows[1])) * slot_bytes);
    OpResult res;
    execute_cpu_streaming_op(op, 2, res);
    EXPECT_EQ(res.count, chunks(rows[0]) + chunks(rows[1]));
    return op.out;
  }

  // The images of ring (partition) p in order: R chunks, then S chunks.
  std::vector<const char*> ring_images(int p) const {
    std::vector<const char*> v;
    const uint64_t r_first = p == 0 ? 0 : chunks(r_count[0]), s_first = p == 0 ? 0 : chunks(s_count[0]);
    for (uint64_t c = 0; c < chunks(r_count[size_t(p)]); ++c)
      v.push_back(static_cast<const char*>(r_images->ptr) + (r_first + c) * slot_bytes);
    for (uint64_t c = 0; c < chunks(s_count[size_t(p)]); ++c)
      v.push_back(static_cast<const char*>(s_images->ptr) + (s_first + c) * slot_bytes);
    return v;
  }

  StreamConsumeOp consumer(const Buffer& rings, JoinOutput out, JoinOutput staging, uint64_t staging_rows) const {
    StreamConsumeOp op;
    op.rings = rings;
    op.sources = 1;
    op.parts = 2;
    op.slots = kSlots;
    op.slot_rows = kSlotRows;
    op.slot_bytes = slot_bytes;
    op.epoch = kEpoch;
    op.r_fmt = op.s_fmt = {4, 4};
    for (int p = 0; p < 2; ++p) {
      op.r_chunks.push_back(chunks(r_count[size_t(p)]));
      op.s_chunks.push_back(chunks(s_count[size_t(p)]));
      op.partition_ids.push_back(uint32_t(p));
      op.tables.push_back(host_table(r_count[size_t(p)]));
      op.workers.push_back(1);
    }
    op.out = out;
    op.staging = staging;
    op.staging_rows = staging_rows;
    op.progress = std::make_shared<StreamProgress>(2);
    op.chunk_timeout_s = 0.5;
    op.idle_timeout_s = 2;
    return op;
  }

  // Matches: every S key k <= r_rows appears twice; checksum over (k, 3k, 5k) and (k, 3k, 7k).
  JoinDigest expected() const {
    JoinDigest d;
    for (uint32_t k = 1; k <= std::min(r_rows, s_rows); ++k) {
      d.count += 2;
      d.checksum += row_digest(k, uint64_t(k) * 3, uint64_t(k) * 5) + row_digest(k, uint64_t(k) * 3, uint64_t(k) * 7);
    }
    return d;
  }
};

JoinOutput host_output(uint64_t rows) {
  JoinOutput o;
  o.capacity = rows;
  o.r_fmt = o.s_fmt = {4, 4};
  o.keys = host_buffer(rows * 4);
  o.rvals = host_buffer(rows * 4);
  o.svals = host_buffer(rows * 4);
  return o;
}

JoinDigest digest_of(const JoinOutput& o, uint64_t rows) {
  JoinDigest d;
  d.count = rows;
  for (uint64_t i = 0; i < rows; ++i)
    d.checksum += row_digest(data_of<uint32_t>(o.keys)[i], data_of<uint32_t>(o.rvals)[i], data_of<uint32_t>(o.svals)[i]);
  return d;
}

// Plays the senders: writes every ring's chunks into its slots once the consumer released them,
// through `deliver` (which may tamper with them).
void send_all(const StreamFixture& f, const Buffer& rings, const std::shared_ptr<StreamProgress>& progress,
              const std::function<void(char*, const char*, uint64_t, int, uint64_t)>& deliver) {
  for (int p = 0; p < 2; ++p) {
    const auto images = f.ring_images(p);
    for (uint64_t k = 0; k < images.size(); ++k) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (k >= progress->consumed(size_t(p)) + StreamFixture::kSlots && std::chrono::steady_clock::now() < until) {
        if (progress->cancelled()) return;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      char* slot = static_cast<char*>(rings->ptr) + (uint64_t(p) * StreamFixture::kSlots + k % StreamFixture::kSlots) * f.slot_bytes;
      deliver(slot, images[k], f.slot_bytes, p, k);
    }
  }
}

}  // namespace

// The senders skip their scan of every ring while releases() is unchanged: it must count each
// release, and a log's take() must hand over its spans and leave it empty.
TEST(StreamingOps, ProgressCountsReleasesAndTraceLogTakesItsSpans) {
  StreamProgress p(3);
  EXPECT_EQ(p.releases(), 0u);
  p.release(1, 2);
  EXPECT_EQ(p.releases(), 1u);
  EXPECT_EQ(p.consumed(1), 2u);
  p.release(1, 2);  // the same count again is still a release
  p.release(2, 5);
  EXPECT_EQ(p.releases(), 3u);
  EXPECT_EQ(p.consumed(2), 5u);
  EXPECT_EQ(p.consumed(0), 0u);

  TraceLog log;
  log.add({0, "stream 0", OpParams{}, 0.0, 1.0});
  log.add({1, "stream 1", OpParams{}, 1.0, 2.0});
  const std::vector<TraceSpan> taken = log.take();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[1].track, "stream 1");
  EXPECT_TRUE(log.spans().empty());
}

TEST(StreamingOps, PackedChunksCarryTheirChecksum) {
  StreamFixture f;
  const char* image = f.ring_images(1)[0];
  ChunkHeader h;
  std::memcpy(&h, image, sizeof h);
  EXPECT_EQ(h.seq, 1u);
  EXPECT_EQ(h.partition, 1u);
  EXPECT_EQ(h.rows, StreamFixture::kSlotRows);
  EXPECT_EQ(h.relation, 0u);
  EXPECT_EQ(h.epoch, StreamFixture::kEpoch);
  const auto* keys = reinterpret_cast<const uint32_t*>(image + kChunkHeaderBytes);
  const auto* vals = reinterpret_cast<const uint32_t*>(image + chunk_vals_offset(4, StreamFixture::kSlotRows));
  EXPECT_EQ(keys[0], 1u);  // partition 1 holds the odd keys
  EXPECT_EQ(vals[0], 3u);
  EXPECT_EQ(chunk_checksum(h, keys, vals), h.checksum);
  ChunkHeader other = h;
  other.epoch += 1;
  EXPECT_NE(chunk_checksum(other, keys, vals), h.checksum);
}

namespace {

template <class T>
Buffer host_array(const std::vector<T>& v) {
  Buffer b = host_buffer(v.size() * sizeof(T));
  std::memcpy(b->ptr, v.data(), v.size() * sizeof(T));
  return b;
}

// How images_of makes the images.
enum class Packing { PartitionThenPack, WhilePartitioning, WhilePartitioningCountedSlices };

// Chunk images of `in`'s partitions by fn: partitioned by the CPU partition kernel and then
// packed, or partitioned while packed (one operator) counting the input itself or given the
// counts of three uneven slices of it. Returns the images and the partition offsets.
template <class K, class V>
std::pair<Buffer, std::vector<uint64_t>> images_of(const Tuples& in, PartitionFn fn, uint64_t slot_rows, int threads,
                                                   Packing how) {
  const std::vector<uint64_t> counts = cpu::histogram(in.key_ptr<K>(), in.rows, fn, 1);
  PackChunksOp op;
  op.rows = counts;
  op.first_seq.assign(counts.size(), 0);
  for (size_t p = 0; p < counts.size(); ++p) op.first_seq[p] = 3 * p + 1;  // any sequence numbers
  op.partition_base = 40;
  op.relation = 1;
  op.epoch = 9;
  op.slot_rows = slot_rows;
  uint64_t images = 0;
  for (uint64_t c : counts) images += (c + slot_rows - 1) / slot_rows;
  op.out = host_buffer(std::max<uint64_t>(images, 1) * chunk_slot_bytes(in.fmt, slot_rows));
  std::memset(op.out->ptr, 0xab, op.out->bytes);  // stale bytes: the operator must write what the consumer reads
  OpResult res;
  std::vector<uint64_t> offsets;
  if (how != Packing::PartitionThenPack) {
    op.in = in;
    op.partition_by = fn;
    if (how == Packing::WhilePartitioningCountedSlices) {
      op.in_slices = {0, in.rows / 7, in.rows / 7, in.rows * 3 / 4, in.rows};  // one of them empty
      for (size_t sl = 0; sl + 1 < op.in_slices.size(); ++sl) {
        const uint64_t n = op.in_slices[sl + 1] - op.in_slices[sl];
        const std::vector<uint64_t> c = cpu::histogram(in.key_ptr<K>() + op.in_slices[sl], n, fn, 1);
        op.slice_rows.insert(op.slice_rows.end(), c.begin(), c.end());
      }
    }
    execute_cpu_streaming_op(op, threads, res);
    offsets = res.values;
  } else {
    Tuples part = in;
    part.keys = host_buffer(in.rows * sizeof(K));
    part.vals = host_buffer(in.rows * sizeof(V));
    offsets = cpu::partition(in.key_ptr<K>(), in.val_ptr<V>(), in.rows, {}, fn, data_of<K>(part.keys),
                             data_of<V>(part.vals), threads);
    op.in = part;
    for (size_t p = 0; p < counts.size(); ++p) op.begin.push_back(offsets[p]);
    execute_cpu_streaming_op(op, threads, res);
  }
  EXPECT_EQ(res.count, images);
  return {op.out, offsets};
}

template <class K, class V>
void expect_same_images(uint64_t rows, PartitionFn fn, uint64_t slot_rows, int threads, uint64_t key_mask) {
  SCOPED_TRACE(std::to_string(sizeof(K)) + "+" + std::to_string(sizeof(V)) + " bytes, " + std::to_string(rows) +
               " rows, fanout " + std::to_string(fn.fanout()) + ", chunks of " + std::to_string(slot_rows) + " rows, " +
               std::to_string(threads) + " threads");
  std::vector<K> keys(rows);
  std::vector<V> vals(rows);
  for (uint64_t i = 0; i < rows; ++i) {
    keys[i] = K(mix64(i * 7 + 1) & key_mask);
    vals[i] = V(mix64(i ^ 0x77));
  }
  Tuples in;
  in.fmt = {uint8_t(sizeof(K)), uint8_t(sizeof(V))};
  in.rows = in.capacity = rows;
  in.keys = host_array(keys);
  in.vals = host_array(vals);
  const auto [want, want_offsets] = images_of<K, V>(in, fn, slot_rows, threads, Packing::PartitionThenPack);
  for (Packing how : {Packing::WhilePartitioning, Packing::WhilePartitioningCountedSlices}) {
    SCOPED_TRACE(how == Packing::WhilePartitioning ? "counting" : "counted slices");
    const auto [got, got_offsets] = images_of<K, V>(in, fn, slot_rows, threads, how);
    ASSERT_EQ(got_offsets, want_offsets);
    const uint64_t slot = chunk_slot_bytes(in.fmt, slot_rows), vals_at = chunk_vals_offset(sizeof(K), slot_rows);
    uint64_t images = 0;
    for (size_t p = 0; p + 1 < want_offsets.size(); ++p) images += (want_offsets[p + 1] - want_offsets[p] + slot_rows - 1) / slot_rows;
    ASSERT_GT(images, 0u);
    for (uint64_t i = 0; i < images; ++i) {
      const char* a = static_cast<const char*>(want->ptr) + i * slot;
      const char* b = static_cast<const char*>(got->ptr) + i * slot;
      ChunkHeader h;
      std::memcpy(&h, b, sizeof h);
      ASSERT_EQ(std::memcmp(a, b, kChunkHeaderBytes), 0) << "header of image " << i;
      for (uint64_t at = sizeof h; at < kChunkHeaderBytes; ++at) ASSERT_EQ(b[at], 0) << "header padding of image " << i;
      ASSERT_GE(h.rows, 1u);
      ASSERT_EQ(std::memcmp(a + kChunkHeaderBytes, b + kChunkHeaderBytes, h.rows * sizeof(K)), 0) << "keys of image " << i;
      ASSERT_EQ(std::memcmp(a + vals_at, b + vals_at, h.rows * sizeof(V)), 0) << "values of image " << i;
      ASSERT_EQ(chunk_checksum(h, reinterpret_cast<const K*>(b + kChunkHeaderBytes), reinterpret_cast<const V*>(b + vals_at)),
                h.checksum);
    }
  }
}

}  // namespace

// PackChunksOp with partition_by writes exactly the images of partitioning first and then packing
// (headers, keys, values, checksums; zeroed header padding), counting its input itself or given
// counted slices, for every tuple format, chunk sizes that are and are not multiples of a
// write-combine line, one and several threads (threads share the chunks of a partition), a
// partition with no rows, and an input large enough for streaming stores (16 MiB of images).
TEST(StreamingOps, PartitioningWhilePackingGivesThePartitionThenPackImages) {
  const PartitionFn hash{PartitionFn::Hash, 3, 0, 0x5eed};
  const PartitionFn radix{PartitionFn::Radix, 2, 1, 0};  // keys with bit 1 clear: partitions 1 and 3 empty
  for (int threads : {1, 3}) {
    for (uint64_t slot_rows : {50, 64, 1000}) {
      expect_same_images<uint32_t, uint32_t>(20000, hash, slot_rows, threads, ~0u >> 1);
      expect_same_images<uint32_t, uint64_t>(20000, hash, slot_rows, threads, ~0u >> 1);
      expect_same_images<uint64_t, uint32_t>(20000, hash, slot_rows, threads, ~0ull >> 1);
      expect_same_images<uint64_t, uint64_t>(20000, hash, slot_rows, threads, ~0ull >> 1);
    }
    expect_same_images<uint64_t, uint64_t>(20000, radix, 64, threads, (~0ull >> 1) & ~uint64_t(2));
  }
  expect_same_images<uint64_t, uint64_t>(1 << 20, PartitionFn{PartitionFn::Hash, 5, 0, 1}, 8192, 4, ~0ull >> 1);
}

// The histogram is the plan: an input whose partitions differ from the given counts is an error
// naming the partition, and no image is written.
TEST(StreamingOps, PartitioningWhilePackingChecksThePlan) {
  std::vector<uint32_t> keys, vals;
  for (uint32_t k = 1; k <= 1000; ++k) keys.push_back(k), vals.push_back(k);
  PackChunksOp op;
  op.in = host_tuples(keys, vals);
  op.partition_by = PartitionFn{PartitionFn::Radix, 1, 0, 0};
  op.rows = {500, 499};  // partition 1 (the odd keys) has 500
  op.first_seq = {1, 1};
  op.slot_rows = 64;
  op.out = host_buffer(16 * chunk_slot_bytes(op.in.fmt, 64));
  OpResult res;
  try {
    execute_cpu_streaming_op(op, 2, res);
    ADD_FAILURE() << "a batch that does not match its histogram was packed";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("partition 1 has 500 rows of the input, the plan says 499"), std::string::npos)
        << e.what();
  }
  for (uint64_t i = 0; i < op.out->bytes; ++i) ASSERT_EQ(static_cast<const char*>(op.out->ptr)[i], 0) << i;
  // Counted slices: counts that do not add up to the plan, and a slice whose counts are wrong
  // (the input changed after its histogram), each named.
  op.rows = {500, 500};
  op.in_slices = {0, 400, 1000};
  op.slice_rows = {200, 200, 300, 299};
  auto error = [&] {
    try {
      execute_cpu_streaming_op(op, 2, res);
    } catch (const RuntimeError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error().find("the slices' rows of partition 1 sum to 499, the plan says 500"), std::string::npos) << error();
  op.slice_rows = {201, 199, 299, 301};
  EXPECT_NE(error().find("slice 0 (rows 0 to 400) does not hold the rows its counts say"), std::string::npos) << error();
  op.slice_rows = {200, 200, 300, 300};
  EXPECT_EQ(error(), "no error");
  op.begin = {0, 500};
  EXPECT_THROW(execute_cpu_streaming_op(op, 2, res), RuntimeError) << "begins with partition_by";
}

TEST(StreamingOps, ConsumerJoinsWhatArrivesInAnyOrderThroughTheDoubleBuffer) {
  for (uint64_t staging_rows : {7, 64, 100000}) {
    StreamFixture f(staging_rows == 64);  // one of them from images partitioned while packed
    Buffer rings = host_buffer(2 * StreamFixture::kSlots * f.slot_bytes);
    StreamConsumeOp op = f.consumer(rings, host_output(1000), host_output(2 * staging_rows), staging_rows);
    // Bytes land back to front, with pauses: the consumer must wait for the checksum to match.
    std::thread sender([&] {
      send_all(f, rings, op.progress, [](char* slot, const char* image, uint64_t bytes, int, uint64_t k) {
        for (uint64_t at = bytes; at > 0;) {
          const uint64_t piece = std::min<uint64_t>(at, 96);
          at -= piece;
          std::memcpy(slot + at, image + at, piece);
          if (k % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
      });
    });
    OpResult res;
    EXPECT_NO_THROW(execute_cpu_streaming_op(op, 2, res));
    sender.join();
    EXPECT_FALSE(res.overflow);
    EXPECT_EQ(digest_of(op.out, res.count), f.expected()) << "staging rows " << staging_rows;
    EXPECT_EQ(op.progress->consumed(0), f.ring_images(0).size());
  }
}

TEST(StreamingOps, ConsumerCountsPastAFullOutputAndSaysSo) {
  StreamFixture f;
  Buffer rings = host_buffer(2 * StreamFixture::kSlots * f.slot_bytes);
  StreamConsumeOp op = f.consumer(rings, host_output(10), host_output(2 * 8), 8);
  std::thread sender([&] {
    send_all(f, rings, op.progress, [](char* slot, const char* image, uint64_t bytes, int, uint64_t) {
      std::memcpy(slot, image, bytes);
    });
  });
  OpResult res;
  execute_cpu_streaming_op(op, 1, res);
  sender.join();
  EXPECT_TRUE(res.overflow);
  EXPECT_EQ(res.count, f.expected().count);
}

TEST(StreamingOps, ACorruptedChunkIsNamedAfterTheChunkTimeout) {
  for (bool partition_while_packing : {false, true}) {
    SCOPED_TRACE(partition_while_packing ? "partitioned while packed" : "packed from partitions");
    StreamFixture f(partition_while_packing);
    Buffer rings = host_buffer(2 * StreamFixture::kSlots * f.slot_bytes);
    StreamConsumeOp op = f.consumer(rings, host_output(1000), host_output(128), 64);
    std::thread sender([&] {
      send_all(f, rings, op.progress, [](char* slot, const char* image, uint64_t bytes, int p, uint64_t k) {
        std::memcpy(slot, image, bytes);
        if (p == 1 && k == 2) slot[kChunkHeaderBytes + 5] ^= 0x10;  // a key byte of R chunk 2
      });
    });
    OpResult res;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      execute_cpu_streaming_op(op, 1, res);
      ADD_FAILURE() << "a corrupted chunk was used";
    } catch (const RuntimeError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("chunk 2 of R partition 1 from rank 0"), std::string::npos) << m;
      EXPECT_NE(m.find("failed its checksum"), std::string::npos) << m;
    }
    EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), op.chunk_timeout_s);
    op.progress->cancel();  // the sender waits for slots no more
    sender.join();
  }
}

TEST(StreamingOps, SlotsOfAnotherExchangeAreNotUsed) {
  StreamFixture f;
  Buffer rings = host_buffer(2 * StreamFixture::kSlots * f.slot_bytes);
  // The first chunks are there, but from an exchange with another epoch.
  for (int p = 0; p < 2; ++p) std::memcpy(static_cast<char*>(rings->ptr) + uint64_t(p) * StreamFixture::kSlots * f.slot_bytes, f.ring_images(p)[0], f.slot_bytes);
  StreamConsumeOp op = f.consumer(rings, host_output(1000), host_output(128), 64);
  op.epoch = StreamFixture::kEpoch + 1;
  op.idle_timeout_s = 0.3;
  OpResult res;
  try {
    execute_cpu_streaming_op(op, 1, res);
    ADD_FAILURE() << "another exchange's chunk was used";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("nothing arrived"), std::string::npos) << m;
    EXPECT_NE(m.find("chunk 0 of R partition 0 from rank 0"), std::string::npos) << m;
  }
  EXPECT_EQ(op.progress->consumed(0), 0u);
}

TEST(StreamingOps, ACancelledConsumerStopsWithAnError) {
  StreamFixture f;
  Buffer rings = host_buffer(2 * StreamFixture::kSlots * f.slot_bytes);
  StreamConsumeOp op = f.consumer(rings, host_output(1000), host_output(128), 64);
  op.idle_timeout_s = 60;
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    op.progress->cancel();
  });
  OpResult res;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(execute_cpu_streaming_op(op, 1, res), RuntimeError);
  canceller.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}
