// The Star Schema Benchmark workload (core/workload/ssb.hpp): the generator's cardinalities,
// domains and position-addressability, the reference against the closed-form expectation, and
// Q2.1 and Q3.1 through gpj and gpj-b on the cpu backend at 1, 2 and 4 ranks, verified against
// the reference (count and the checksum of the groups).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/config.hpp"
#include "core/experiment/runner.hpp"
#include "core/verify/expected.hpp"
#include "core/workload/ssb.hpp"
#include "core/workload/tpch.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "tests/test_workloads.hpp"

namespace joinlab {
namespace {

using ssb::Table;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// Lineorder rows [first, first + n) as the CPU operator makes them, from a block starting there.
std::pair<std::vector<uint64_t>, std::vector<uint64_t>> lineorder(const ssb::Scale& s, const ssb::StarQuery& q,
                                                                  uint64_t first, uint64_t n, int threads) {
  std::vector<uint64_t> keys(n), vals(n);
  cpu::star_generate(s, q, Table::Lineorder, tpch::lineitem_index(s.orders), first, n, keys.data(), vals.data(), threads);
  return {keys, vals};
}

TEST(SsbData, CardinalitiesFollowTheSpec) {
  const ssb::Scale one = ssb::scale_at(1, 42);
  EXPECT_EQ(one.customers, 30000u);
  EXPECT_EQ(one.suppliers, 2000u);
  EXPECT_EQ(one.parts, 200000u);
  EXPECT_EQ(one.orders, 1500000u);
  EXPECT_EQ(one.lineorders, 6001215u);  // TPC-H's lineitem at SF 1: the same orders and lines
  EXPECT_EQ(one.rows(Table::Date), 2556u);
  EXPECT_EQ(ssb::scale_at(4, 42).parts, 600000u);    // 200,000 x (1 + log2 4)
  EXPECT_EQ(ssb::scale_at(10, 42).parts, 800000u);   // 1 + floor(log2 10) = 4
  EXPECT_EQ(ssb::scale_at(100, 42).customers, 3000000u);
  const ssb::Scale small = ssb::scale_at(0.01, 42);
  EXPECT_EQ(small.customers, 300u);
  EXPECT_EQ(small.suppliers, 20u);
  EXPECT_EQ(small.parts, 2000u);
  EXPECT_EQ(small.orders, 15000u);
  EXPECT_NEAR(double(small.lineorders), 60000.0, 1500.0);
}

TEST(SsbData, BadScaleFactorsAndQueriesAreNamed) {
  for (double sf : {0.0, -1.0, 0.00001}) {
    const std::string e = error_of([&] { ssb::scale_at(sf, 1); });
    EXPECT_NE(e.find("workload.scale_factor"), std::string::npos) << e;
  }
  const std::string q = error_of([] { ssb::query_from_string("q4.2"); });
  EXPECT_NE(q.find("unknown query 'q4.2'"), std::string::npos) << q;
  // Q3.1's foreign keys outgrow the 8-byte key at SF 10,000 (300 M customers).
  const std::string big = error_of([] { ssb::plan(SsbQuery::Q31, ssb::scale_at(10000, 1)); });
  EXPECT_NE(big.find("workload.query = q3.1"), std::string::npos) << big;
}

TEST(SsbData, AttributesStayInTheirDomains) {
  const ssb::Scale s = ssb::scale_at(1, 7);
  std::set<uint32_t> mfgr, categories, regions_of_nations;
  std::vector<uint64_t> nation_rows(ssb::kNations, 0);
  for (uint64_t r = 0; r < s.parts; ++r) {
    const uint32_t c = ssb::part_category(s, r), b = ssb::part_brand1(s, r);
    ASSERT_LT(c, ssb::kCategories);
    ASSERT_EQ(b / ssb::kBrandsPerCategory, c);
    mfgr.insert(c / 5);
    categories.insert(c);
  }
  EXPECT_EQ(mfgr.size(), 5u);
  EXPECT_EQ(categories.size(), 25u);
  for (uint64_t r = 0; r < s.suppliers; ++r) nation_rows[ssb::supplier_nation(s, r)]++;
  for (uint64_t r = 0; r < s.customers; ++r) nation_rows[ssb::customer_nation(s, r)]++;
  for (uint64_t n : nation_rows) EXPECT_NEAR(double(n), double(s.suppliers + s.customers) / 25, 400.0);
  std::vector<int> per_region(ssb::kRegions, 0);
  for (uint32_t n = 0; n < ssb::kNations; ++n) per_region[ssb::region_of_nation(n)]++;
  for (int k : per_region) EXPECT_EQ(k, 5);
  EXPECT_EQ(ssb::year_of_day(0), 1992u);
  EXPECT_EQ(ssb::year_of_day(365), 1992u);  // 1992 is a leap year
  EXPECT_EQ(ssb::year_of_day(366), 1993u);
  EXPECT_EQ(ssb::year_of_day(ssb::kDays - 1), 1998u);
  EXPECT_EQ(ssb::year_of_day(ssb::kOrderDays - 1), 1998u);  // 1998-08-02
  const tpch::LineitemIndex& index = tpch::lineitem_index(s.orders);
  tpch::LineitemCursor c = index.cursor(0);
  for (uint64_t row = 0; row < 200000; ++row, c.next()) {
    const ssb::LineorderRow lo = ssb::lineorder_row(s, c.order, row);
    ASSERT_GE(lo.orderdate, 1u);
    ASSERT_LE(lo.orderdate, ssb::kOrderDays);
    ASSERT_GE(lo.custkey, 1u);
    ASSERT_LE(lo.custkey, s.customers);
    ASSERT_GE(lo.partkey, 1u);
    ASSERT_LE(lo.partkey, s.parts);
    ASSERT_GE(lo.suppkey, 1u);
    ASSERT_LE(lo.suppkey, s.suppliers);
    ASSERT_GE(lo.quantity, 1u);
    ASSERT_LE(lo.quantity, 50u);
    ASSERT_LE(lo.discount, 10u);
    ASSERT_EQ(lo.revenue, lo.quantity * ssb::part_price(lo.partkey) * (100 - lo.discount) / 100);
    // An order's lines share its customer and date.
    if (c.line > 0) {
      const ssb::LineorderRow first = ssb::lineorder_row(s, c.order, row - c.line);
      ASSERT_EQ(first.custkey, lo.custkey);
      ASSERT_EQ(first.orderdate, lo.orderdate);
    }
  }
}

TEST(SsbData, AnyBlockOfRowsIsTheSameWhereverItStarts) {
  const ssb::Scale s = ssb::scale_at(0.1, 3);
  for (SsbQuery query : {SsbQuery::Q21, SsbQuery::Q31}) {
    const ssb::StarQuery q = ssb::plan(query, s);
    const auto whole = lineorder(s, q, 0, 100000, 2);
    for (uint64_t first : {uint64_t(1), uint64_t(4097), uint64_t(77777)}) {
      const auto block = lineorder(s, q, first, 100000 - first, 1);
      for (uint64_t i = 0; i < block.first.size(); ++i) {
        ASSERT_EQ(block.first[i], whole.first[first + i]) << "row " << first + i;
        ASSERT_EQ(block.second[i], whole.second[first + i]) << "row " << first + i;
      }
    }
    // The packed key holds the row's foreign keys, step by step.
    const tpch::LineitemIndex& index = tpch::lineitem_index(s.orders);
    tpch::LineitemCursor c = index.cursor(12345);
    const ssb::LineorderRow lo = ssb::lineorder_row(s, c.order, 12345);
    const uint64_t key = whole.first[12345];
    for (int i = 0; i < q.steps; ++i) {
      const Table t = Table(q.table[i]);
      const uint64_t want = t == Table::Date ? lo.orderdate : t == Table::Part ? lo.partkey
                            : t == Table::Supplier ? lo.suppkey : lo.custkey;
      EXPECT_EQ(q.foreign_key(key, i), want) << ssb::to_string(t);
    }
  }
}

// The reference count is near the closed form's expectation: lineorder rows draw their keys
// uniformly (an order's 1-7 lines share a customer and date, so within 5 sigma of 4 rows each).
TEST(SsbData, ReferenceCountMatchesItsExpectation) {
  const ssb::Scale s = ssb::scale_at(1, 42);
  for (SsbQuery query : {SsbQuery::Q21, SsbQuery::Q31}) {
    const ssb::StarQuery q = ssb::plan(query, s);
    const double want = ssb::expected_qualifying(q, s);
    const ssb::QueryResult got = ssb::reference(q, s, 0, s.lineorders, 2);
    EXPECT_NEAR(double(got.count), want, 5 * std::sqrt(4 * want)) << ssb::to_string(query);
    // Q2.1: 1/25 of parts, 1/5 of suppliers; Q3.1: 1/5, 1/5, and 6 of the order dates' 6.6 years.
    const double nominal = query == SsbQuery::Q21 ? 1.0 / 125 : 1.0 / 25 * 2192 / ssb::kOrderDays;
    EXPECT_NEAR(want / double(s.lineorders), nominal, nominal * 0.1);
    // Groups only where the filters let rows through, and their sums add up.
    uint64_t groups = 0;
    for (size_t g = 0; g < got.sums.size(); ++g) {
      if (!got.sums[g]) continue;
      ++groups;
      if (query == SsbQuery::Q21) {
        EXPECT_EQ(g % 1000 / ssb::kBrandsPerCategory, 1u) << "brand of MFGR#12 only";
      } else {
        EXPECT_LT(g % ssb::kYears, 6u) << "1992..1997 only";
        EXPECT_EQ(ssb::region_of_nation(uint32_t(g / (ssb::kNations * ssb::kYears))), ssb::kAsia);
        EXPECT_EQ(ssb::region_of_nation(uint32_t(g / ssb::kYears % ssb::kNations)), ssb::kAsia);
      }
    }
    EXPECT_EQ(groups, query == SsbQuery::Q21 ? 7u * 40 : 5u * 5 * 6);
    // Two halves evaluated apart give the whole.
    const ssb::QueryResult a = ssb::reference(q, s, 0, s.lineorders / 3, 1);
    const ssb::QueryResult b = ssb::reference(q, s, s.lineorders / 3, s.lineorders, 2);
    EXPECT_EQ(a.count + b.count, got.count);
    for (size_t g = 0; g < got.sums.size(); ++g) ASSERT_EQ(a.sums[g] + b.sums[g], got.sums[g]);
  }
}

// The operators (the dimensions built as chained tables, the chained probes) against the
// reference that reads the generator directly.
TEST(SsbOperators, ChainedProbesGiveTheReferenceGroups) {
  const ssb::Scale s = ssb::scale_at(0.1, 11);
  for (SsbQuery query : {SsbQuery::Q21, SsbQuery::Q31}) {
    const ssb::StarQuery q = ssb::plan(query, s);
    std::vector<std::vector<uint32_t>> heads(3), next(3), keys(3), vals(3);
    std::vector<ssb::DimTableRef> dims(3);
    for (int i = 0; i < q.steps; ++i) {
      const Table t = Table(q.table[i]);
      const uint64_t rows = s.rows(t), buckets = hash_table_slots(rows, 0.5);
      keys[i].resize(rows);
      vals[i].resize(rows);
      cpu::star_generate(s, q, t, tpch::LineitemIndex{}, 0, rows, keys[i].data(), vals[i].data(), 2);
      heads[i].assign(buckets, ~0u);
      next[i].resize(rows);
      for (uint32_t r = 0; r < rows; ++r) {  // the Chained layout
        uint32_t& head = heads[i][table_slot(keys[i][r], 99, buckets)];
        next[i][r] = head;
        head = r;
      }
      dims[i] = {heads[i].data(), next[i].data(), keys[i].data(), vals[i].data(), buckets, 99};
    }
    const auto lo = lineorder(s, q, 0, s.lineorders, 2);
    std::vector<uint64_t> groups(q.groups, 0);
    const uint64_t passed = cpu::star_probe(q, dims.data(), lo.first.data(), lo.second.data(), s.lineorders,
                                            groups.data(), 2);
    const ssb::QueryResult want = ssb::reference(q, s, 0, s.lineorders, 2);
    EXPECT_EQ(passed, want.count);
    EXPECT_EQ(groups, want.sums);
    EXPECT_GT(want.count, 0u);
  }
}

// --- the strategies on the cpu backend -------------------------------------------------------------

class SsbStrategies : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { register_builtin(); }
};

RunPoint point(const std::string& strategy, SsbQuery query, int ranks, std::map<std::string, std::string> options = {}) {
  RunPoint p = test::ssb_point(strategy, "cpu", query, 0.05, {1, ranks});
  p.cluster.threads_per_rank = 1;
  p.strategy_options = std::move(options);
  return p;
}

TEST_F(SsbStrategies, Q21AndQ31MatchTheReferenceOnGpjAndGpjB) {
  const std::map<std::string, std::string> small = {{"chunk_bytes", "4096"}, {"slots", "4"}, {"batch_rows", "50000"}};
  for (const std::string strategy : {"gpj", "gpj-b"})
    for (SsbQuery query : {SsbQuery::Q21, SsbQuery::Q31})
      for (int ranks : {1, 2, 4}) {
        const RunPoint p = point(strategy, query, ranks, small);
        SCOPED_TRACE(strategy + " " + ssb::to_string(query) + " on " + std::to_string(ranks) + " rank(s)");
        RunOutcome o;
        ASSERT_NO_THROW(o = run_point(p));  // run_point checks against the reference and throws
        const ExpectedResult want = expected_star_result(p.workload);
        EXPECT_EQ(o.digest.count, want.digest.count);
        EXPECT_EQ(o.digest.checksum, want.digest.checksum);
        EXPECT_GT(o.digest.count, 0u);
        EXPECT_EQ(o.checked, "yes");
        // Shuffled once: the senders' bytes are lineorder's 16-byte tuples and their chunk headers.
        std::vector<std::string> phases;
        for (const auto& ph : o.phases) phases.push_back(ph.name);
        EXPECT_NE(std::find(phases.begin(), phases.end(), "dimensions"), phases.end());
        EXPECT_NE(std::find(phases.begin(), phases.end(), strategy == "gpj" ? "stream" : "chained_probes"), phases.end());
      }
}

TEST_F(SsbStrategies, AWrongResultFailsVerification) {
  const Workload w = ssb::workload(SsbQuery::Q21, 0.05, 42);
  const ExpectedResult want = expected_star_result(w);
  EXPECT_THROW(check_result({want.digest.count, want.digest.checksum + 1}, want, "test"), VerificationError);
  EXPECT_THROW(check_result({want.digest.count + 1, want.digest.checksum}, want, "test"), VerificationError);
  // Another seed's data gives another answer.
  EXPECT_NE(expected_star_result(ssb::workload(SsbQuery::Q21, 0.05, 43)).digest.checksum, want.digest.checksum);
}

TEST_F(SsbStrategies, OtherStrategiesRefuseAQueryBeforeAnyWork) {
  for (const std::string strategy : {"phj", "gpj-h", "crj", "shuffle"}) {
    const std::string e = error_of([&] { run_point(point(strategy, SsbQuery::Q31, 1)); });
    EXPECT_NE(e.find("workload.query = q3.1"), std::string::npos) << e;
    EXPECT_NE(e.find("strategy " + strategy), std::string::npos) << e;
  }
}

TEST_F(SsbStrategies, ExperimentFilesNameTheirBadKeys) {
  const std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / ("ssb_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto plan = [&](const std::string& workload) {
    const std::string file = (dir / "exp.ini").string();
    std::ofstream(file) << "[experiment]\nstrategy = gpj\nbackend = cpu\n[workload]\n" << workload;
    return error_of([&] { plan_experiment(file); });
  };
  EXPECT_EQ(plan("query = q2.1\nscale_factor = 0.01\n"), "(no error)");
  const std::string unknown = plan("query = q9.9\nscale_factor = 1\n");
  EXPECT_NE(unknown.find("workload.query = q9.9"), std::string::npos) << unknown;
  const std::string zero = plan("query = q2.1\nscale_factor = 0\n");
  EXPECT_NE(zero.find("workload.scale_factor"), std::string::npos) << zero;
  const std::string missing = plan("query = q3.1\n");
  EXPECT_NE(missing.find("workload.scale_factor is not set"), std::string::npos) << missing;
  const std::string rows = plan("query = q3.1\nscale_factor = 1\nrows = 1000\n");
  EXPECT_NE(rows.find("workload.rows"), std::string::npos) << rows;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace joinlab
