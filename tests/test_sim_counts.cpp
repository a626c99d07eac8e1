// Simulated match counts are exact and verified: every strategy on the sim backend at 1, 2, 4 and
// 10 ranks, over PK-FK joins with a match rate, Zipf-skewed references and both, and TPC-H
// orders x lineitem, counts exactly
// the workload's closed form (core/verify/expected.*), which run_point checks (verify is on by
// default in simulation: the count, there being no data to checksum).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/runner.hpp"
#include "core/experiment/trace_writer.hpp"
#include "core/verify/expected.hpp"
#include "tests/test_workloads.hpp"

namespace joinlab {
namespace {

using test::pk_fk;
using Options = std::map<std::string, std::string>;

class SimCounts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { register_builtin(); }

  static RunPoint point(const std::string& strategy, const Workload& w, ClusterShape shape, Options options = {}) {
    RunPoint p;
    p.name = "sim-counts";
    p.strategy = strategy;
    p.backend = "sim";
    p.cluster.shape = shape;
    p.cluster.profile = "h100";
    p.cluster.profile_dir = std::string(JOINLAB_SOURCE_DIR) + "/models/profiles";
    p.workload = w;
    p.strategy_options = std::move(options);
    return p;
  }

  // Runs p (run_point throws VerificationError on a count that is not the closed form's) and
  // checks the count and what the outcome says was checked.
  static void expect_exact(const RunPoint& p) {
    const uint64_t want = expected_count(p.workload).digest.count;
    RunOutcome o;
    ASSERT_NO_THROW(o = run_point(p));
    EXPECT_EQ(o.digest.count, want);
    EXPECT_EQ(o.checked, "count");
    EXPECT_NE(o.verified.find("closed form"), std::string::npos) << o.verified;
  }

  // PK-FK with a match rate of 0.3; references Zipf(1); both; TPC-H at SF 0.01. Small: the suite
  // runs in seconds.
  static std::vector<std::pair<std::string, Workload>> workloads() {
    return {{"match 0.3", pk_fk(3 << 12, 1 << 15, 4, 0.3)},
            {"zipf 1", pk_fk(3 << 12, 1 << 15, 4, 1.0, 1.0)},
            {"zipf 1, match 0.3", pk_fk(3 << 12, 1 << 15, 8, 0.3, 1.0)},
            {"tpch sf 0.01", test::tpch(0.01)}};
  }
};

// Small chunks, batches and rings, so that every partition's stream has several chunks, puts of
// several chunks and ring slots reused.
const Options kSmallChunks = {{"chunk_bytes", "1024"}, {"batch_rows", "4096"}, {"parts_per_receiver", "4"}};

TEST_F(SimCounts, SingleRankStrategiesCountExactly) {
  for (auto& [what, w] : workloads())
    for (const char* s : {"npj", "phj", "smj", "chunked"}) {
      SCOPED_TRACE(std::string(s) + ", " + what);
      expect_exact(point(s, w, {1, 1}, std::string(s) == "chunked" ? Options{{"chunk_rows", "5000"}} : Options{}));
    }
}

TEST_F(SimCounts, DistributedStrategiesCountExactlyAt1To10Ranks) {
  // 10 ranks as 10 nodes x 1 GPU and as 5 x 2.
  const std::vector<ClusterShape> shapes = {{1, 1}, {2, 1}, {2, 2}, {10, 1}, {5, 2}};
  for (auto& [what, w] : workloads())
    for (const ClusterShape& shape : shapes) {
      const std::string where = what + ", " + std::to_string(shape.nodes) + " x " + std::to_string(shape.per_node);
      for (const char* level : {"1", "2"}) {
        SCOPED_TRACE(std::string("shuffle levels ") + level + ", " + where);
        expect_exact(point("shuffle", w, shape, {{"levels", level}}));
      }
      for (const char* s : {"gpj", "gpj-b", "gpj-h", "crj"}) {
        SCOPED_TRACE(std::string(s) + ", " + where);
        Options o = kSmallChunks;
        if (std::string(s) != "gpj-b" && std::string(s) != "crj") o["output"] = "count_only";
        expect_exact(point(s, w, shape, o));
      }
    }
}

// mgsmj's join parts are key ranges of the sorted relations, which the simulator's sorted
// contents hold (a row range of a sorted buffer is the keys of the pieces it covers): PK-FK at
// match rates 0.1 to 1 and Zipf-skewed references up to 1.5, on one GPU. chunk_rows of 1000 makes
// several chunksets, so the CPU multiway merge runs too; 64 buckets keep every chunk's piece of a
// bucket non-empty at these sizes.
const Options kMgsmjSmall = {{"chunk_rows", "1000"}, {"bucket_bits", "6"}};

TEST_F(SimCounts, MgsmjCountsExactlyOnOneGpu) {
  const std::vector<std::pair<std::string, Workload>> cases = {
      {"match 0.1", pk_fk(3 << 12, 1 << 15, 4, 0.1)},
      {"match 1", pk_fk(3 << 12, 1 << 15, 8, 1.0)},
      {"zipf 0.75, match 0.3", pk_fk(3 << 12, 1 << 15, 4, 0.3, 0.75)},
      {"zipf 1.5", pk_fk(3 << 12, 1 << 15, 4, 1.0, 1.5)},
      {"zipf 1.5, match 0.5", pk_fk(3 << 12, 1 << 15, 8, 0.5, 1.5)}};
  for (auto& [what, w] : cases)
    for (const char* output : {"count_only", "direct"}) {
      SCOPED_TRACE(what + ", " + output);
      Options o = kMgsmjSmall;
      o["output"] = output;
      expect_exact(point("mgsmj", w, {1, 1}, o));
    }
}

TEST_F(SimCounts, MgsmjReportsItsSortMergeAndJoinPhases) {
  const RunOutcome o = run_point(point("mgsmj", pk_fk(3 << 12, 1 << 15, 4, 0.5), {1, 1}, kMgsmjSmall));
  for (const char* name : {"sort", "merge", "join"}) {
    SCOPED_TRACE(name);
    double seconds = 0;
    for (const PhaseRecord& ph : o.rank_phases.at(0))
      if (ph.name == name) seconds += ph.end - ph.begin;
    EXPECT_GT(seconds, 0.0);
  }
}

// Across GPUs every chunk is scattered by bucket and the pieces of a bucket meet on its GPU from
// every run: PK-FK at match rate 0.3 and Zipf(1) references on 1, 2, 3, 4 and 8 GPUs, with
// buckets of 8 keys (bucket_bits 12), most of whose pieces of a 1000-row chunk hold no row (their
// cover still adds up), and of 512 (bucket_bits 6).
TEST_F(SimCounts, MgsmjCountsExactlyAcrossGpus) {
  for (auto& [what, w] : workloads()) {
    if (what.find("tpch") != std::string::npos) continue;
    for (int gpus : {1, 2, 3, 4, 8})
      for (const char* bits : {"6", "12"}) {
        SCOPED_TRACE(what + ", " + std::to_string(gpus) + " GPUs, bucket_bits " + bits);
        expect_exact(point("mgsmj", w, {1, gpus}, {{"chunk_rows", "1000"}, {"bucket_bits", bits}, {"output", "count_only"}}));
      }
  }
}

// One chunkset per relation (the default sizing): the histograms are counted on the GPUs from the
// copied-in relations and the join reads the runs where they were sorted (the resident plan), or,
// with resident = off, the runs go back to the host and the join's parts come in again.
TEST_F(SimCounts, MgsmjCountsExactlyWithItsRunsKeptOnTheGpus) {
  for (auto& [what, w] : workloads()) {
    if (what.find("tpch") != std::string::npos) continue;
    for (int gpus : {1, 2, 4})
      for (const char* resident : {"auto", "off"}) {
        SCOPED_TRACE(what + ", " + std::to_string(gpus) + " GPUs, resident = " + resident);
        expect_exact(point("mgsmj", w, {1, gpus}, {{"resident", resident}, {"bucket_bits", "6"}, {"output", "count_only"}}));
      }
  }
}

// sort = merge: the merge stages' pivots from the GPUs' rows by bucket (the simulator holds no keys
// to search), on 2, 4 and 8 GPUs, with several chunksets and with one (the resident plan and the
// paper's). Buckets of 512 keys (bucket_bits 6): the simulator's sorted rows are in pieces of 64
// keys, so a bucket boundary is a piece boundary.
TEST_F(SimCounts, MgsmjMergeSortCountsExactlyAcrossGpus) {
  for (auto& [what, w] : workloads()) {
    if (what.find("tpch") != std::string::npos) continue;
    for (int gpus : {2, 4, 8})
      for (const Options& plan : {Options{{"chunk_rows", "1000"}}, Options{{"resident", "auto"}}, Options{{"resident", "off"}}}) {
        SCOPED_TRACE(what + ", " + std::to_string(gpus) + " GPUs, " + plan.begin()->first + " = " + plan.begin()->second);
        Options o = plan;
        o["sort"] = "merge";
        o["bucket_bits"] = "6";
        o["output"] = "count_only";
        expect_exact(point("mgsmj", w, {1, gpus}, o));
      }
  }
}

TEST_F(SimCounts, GpjCountsEachChunkOnceWhateverSlotItsPutStartsAt) {
  // 2 x 1 GPU, 8 partitions, 128-row chunks (8-byte tuples), 4 slots, puts of up to 2 chunks.
  // Each sender's R: two batches of 2048 rows (2 chunks per partition each) and one of 640 rows
  // (1 chunk): 5 R chunks per ring, so the S chunks start at slot 1 and their first put covers
  // slots 1 and 2, where an R put had started. A put's keys landed as one content at its first
  // slot then, and slot 2 kept that R put's keys: 1.5 x |S| matches.
  const Workload w = pk_fk(2 * (2 * 2048 + 640), 1 << 16, 4, 1.0);
  for (const char* output : {"count_only", "direct"}) {
    SCOPED_TRACE(output);
    expect_exact(point("gpj", w, {2, 1},
                       {{"chunk_bytes", "1024"}, {"batch_rows", "2048"}, {"parts_per_receiver", "4"},
                        {"slots", "4"}, {"chunks_per_put", "2"}, {"output", output}}));
  }
}

TEST_F(SimCounts, AWrongCountFailsVerification) {
  // The check run_point makes on a simulated count (exit code 3 in the CLI): a count one off the
  // closed form's is a VerificationError naming both.
  const Workload w = pk_fk(3 << 12, 1 << 15, 4, 0.3);
  RunPoint p = point("gpj", w, {2, 1}, kSmallChunks);
  const RunOutcome o = run_point(p);
  const ExpectedResult want = expected_count(w);
  ASSERT_EQ(o.digest.count, want.digest.count);
  try {
    check_result({o.digest.count + 1, 0}, want, "gpj on sim");
    ADD_FAILURE() << "a wrong count passed";
  } catch (const VerificationError& e) {
    EXPECT_NE(std::string(e.what()).find("match count " + std::to_string(o.digest.count + 1) + " but expected " +
                                         std::to_string(want.digest.count)),
              std::string::npos)
        << e.what();
  }
}

TEST_F(SimCounts, ClosedFormCountIsTheGeneratorsHits) {
  // expected_count's one-word-per-row form against the full closed form (keys inverted).
  for (auto& [what, w] : workloads()) {
    SCOPED_TRACE(what);
    EXPECT_EQ(expected_count(w).digest.count, expected_result(w).digest.count);
  }
  // Every S row matches: |S|, in O(1) at any size.
  const Workload big = pk_fk(uint64_t(3) << 30, uint64_t(12) << 30, 8, 1.0, 1.0);
  EXPECT_EQ(expected_count(big).digest.count, big.s.rows);
}

TEST_F(SimCounts, EstimatedCountsAreSaidNotChecked) {
  // S's keys Zipf-distributed over their own domain (not references to R): the simulator
  // estimates the light rows' matches, so the count is not checked, and the outcome says why.
  Workload w = pk_fk(1 << 14, 1 << 16);
  w.s.dist = KeyDist::Zipf;
  w.s.zipf_z = 1.0;
  const RunOutcome o = run_point(point("phj", w, {1, 1}));
  EXPECT_EQ(o.checked, "estimated");
  EXPECT_NE(o.verified.find("count not checked: the simulator estimates"), std::string::npos) << o.verified;
}

TEST_F(SimCounts, TracesAreCappedAndSayWhatWasLeftOut) {
  const RunOutcome o = run_point(point("gpj", pk_fk(3 << 12, 1 << 15, 4, 0.3), {2, 2}, kSmallChunks));
  ASSERT_GT(o.trace.size(), 100u);
  std::ostringstream whole;
  const TraceWritten all = write_chrome_trace(whole, o, "whole", 0);
  EXPECT_EQ(all.spans, o.trace.size());
  EXPECT_EQ(all.left_out, 0u);
  EXPECT_EQ(whole.str().find("trace_truncated"), std::string::npos);
  const uint64_t cap = whole.str().size() / 3;
  std::ostringstream capped;
  const TraceWritten some = write_chrome_trace(capped, o, "capped", cap);
  EXPECT_LE(capped.str().size(), cap);
  EXPECT_GT(some.spans, 0u);
  EXPECT_GT(some.left_out, 0u);
  EXPECT_EQ(some.spans + some.left_out, o.trace.size());
  EXPECT_NE(capped.str().find("\"trace_truncated\""), std::string::npos);
  EXPECT_NE(capped.str().find("\"spans_left_out\":" + std::to_string(some.left_out)), std::string::npos);
  EXPECT_NE(capped.str().find("experiment.trace_max_bytes"), std::string::npos);
  // Kept: every span that began before the cut, on every rank; left out: every one after it.
  double t0 = 1e300;
  for (auto& phases : o.rank_phases)
    for (auto& ph : phases) t0 = std::min(t0, ph.begin);
  for (auto& s : o.trace) t0 = std::min(t0, s.begin);
  size_t before = 0;
  std::set<int> ranks;
  for (auto& s : o.trace)
    if (s.begin - t0 < some.cut_s) {
      ++before;
      ranks.insert(s.rank);
    }
  EXPECT_EQ(before, some.spans);
  EXPECT_EQ(ranks.size(), 4u);
  // The default cap is 64 MiB.
  EXPECT_EQ(RunPoint{}.trace_max_bytes, uint64_t(64) << 20);
}

}  // namespace
}  // namespace joinlab
