// The SSB operators and queries on the cuda backend (label gpu): the generator's rows and the
// chained probes' groups equal the cpu backend's (host == device), and Q2.1 and Q3.1 through
// gpj and gpj-b on 2 GPUs (1 where the machine has one) match the reference.
#include <gtest/gtest.h>

#include "core/experiment/runner.hpp"
#include "core/verify/expected.hpp"
#include "core/workload/ssb.hpp"
#include "tests/cuda_test_util.hpp"
#include "tests/test_workloads.hpp"

namespace joinlab {
namespace {

using test::on_backend;
using test::read_back;

// Generates every table of the query on the rank, builds the dimensions, probes lineorder through
// them: the lineorder rows, the dimension rows, then the count and the groups, as words.
std::vector<uint64_t> star_words(Rank& rank, SsbQuery query) {
  const ssb::Scale s = ssb::scale_at(0.1, 5);
  const ssb::StarQuery q = ssb::plan(query, s);
  const Stream st{0};
  std::vector<uint64_t> words;
  Tuples lo = rank.alloc_tuples(MemSpace::Device, s.lineorders - 1000, {8, 8}, "lineorder");
  rank.launch(st, StarGenerateOp{s, q, ssb::Table::Lineorder, 1000, lo});  // from an order's middle
  for (const Buffer* b : {&lo.keys, &lo.vals})
    for (uint64_t w : read_back(rank, *b, lo.rows, 8)) words.push_back(w);
  std::vector<HashTable> dims;
  dims.reserve(q.steps);
  for (int i = 0; i < q.steps; ++i) {
    const ssb::Table t = ssb::Table(q.table[i]);
    Tuples d = rank.alloc_tuples(MemSpace::Device, s.rows(t), {4, 4}, "dimension");
    rank.launch(st, StarGenerateOp{s, q, t, 0, d});
    for (const Buffer* b : {&d.keys, &d.vals})
      for (uint64_t w : read_back(rank, *b, d.rows, 4)) words.push_back(w);
    dims.push_back(rank.alloc_table(MemSpace::Device, TableKind::Chained, {4, 4}, d.rows, 0.5, 17, "table"));
    rank.launch(st, BuildOp{d, &dims.back()});
  }
  const uint64_t bytes = uint64_t(q.groups) * 8;
  Buffer zeros = rank.alloc(MemSpace::Pinned, bytes, "zeros");
  std::memset(zeros->ptr, 0, bytes);
  StarProbeOp probe{s, q, {}, lo, rank.alloc(MemSpace::Device, bytes, "groups")};
  rank.copy(st, probe.groups, 0, zeros, 0, bytes);
  for (const HashTable& t : dims) probe.dims.push_back(&t);
  words.push_back(rank.launch(st, probe).get().count);
  for (uint64_t w : read_back(rank, probe.groups, q.groups, 8)) words.push_back(w);
  return words;
}

TEST(CudaSsb, OperatorsGiveTheCpuBackendsRowsAndGroups) {
  JL_REQUIRE_GPU();
  for (SsbQuery query : {SsbQuery::Q21, SsbQuery::Q31}) {
    const auto cpu = on_backend("cpu", [&](Rank& r) { return star_words(r, query); });
    const auto gpu = on_backend("cuda", [&](Rank& r) { return star_words(r, query); });
    ASSERT_EQ(cpu.size(), gpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) ASSERT_EQ(cpu[i], gpu[i]) << ssb::to_string(query) << " word " << i;
  }
}

TEST(CudaSsb, Q21AndQ31MatchTheReferenceOnGpjAndGpjB) {
  JL_REQUIRE_GPU();
  register_builtin();
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  const int ranks = gpus >= 2 ? 2 : 1;
  for (const std::string strategy : {"gpj", "gpj-b"})
    for (SsbQuery query : {SsbQuery::Q21, SsbQuery::Q31}) {
      RunPoint p = test::ssb_point(strategy, "cuda", query, 1, {1, ranks});
      p.cluster.threads_per_rank = 2;
      SCOPED_TRACE(strategy + " " + ssb::to_string(query) + " on " + std::to_string(ranks) + " GPU(s)");
      RunOutcome o;
      try {
        o = run_point(p);  // checks the count and the groups' checksum against the reference
      } catch (const std::exception& e) {
        FAIL() << e.what();
      }
      const ExpectedResult want = expected_star_result(p.workload);
      EXPECT_EQ(o.digest.count, want.digest.count);
      EXPECT_EQ(o.digest.checksum, want.digest.checksum);
      EXPECT_EQ(o.checked, "yes");
    }
}

}  // namespace
}  // namespace joinlab
