// Generator properties (uniqueness, distribution shape, determinism across rank counts) and
// the verification machinery (closed form vs reference join, mismatch detection).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/runner.hpp"
#include "core/verify/checksum.hpp"
#include "core/verify/expected.hpp"
#include "core/workload/generate.hpp"
#include "tests/test_workloads.hpp"

using namespace joinlab;

namespace {

RelationSpec spec(const std::string& name, uint64_t rows, KeyDist d, uint8_t key_bytes = 4) {
  RelationSpec s;
  s.name = name;
  s.rows = rows;
  s.dist = d;
  s.key_bytes = key_bytes;
  return s;
}

// v.validate() must throw an InputError that mentions every needle.
template <class Validated>
void expect_invalid(const Validated& v, const std::vector<std::string>& needles) {
  try {
    v.validate();
    ADD_FAILURE() << "accepted: " << needles.front();
  } catch (const InputError& e) {
    for (const auto& needle : needles) EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Keys of a relation generated as `nranks` slices and concatenated.
std::vector<uint64_t> keys_by_slices(const RelationSpec& s, const RelationSpec* ref, int nranks) {
  std::vector<uint64_t> all;
  for (int r = 0; r < nranks; ++r) {
    auto part = generate_keys(s, ref, rank_slice(s.rows, r, nranks));
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

}  // namespace

TEST(Hashing, MixersAreInvertible) {
  for (uint64_t i = 0; i < 100000; ++i) {
    uint64_t x = random_word(7, 1, i);
    EXPECT_EQ(unmix64(mix64(x)), x);
    EXPECT_EQ(unmix32(mix32(uint32_t(x))), uint32_t(x));
  }
}

TEST(Feistel, IsAPermutationWithInverse) {
  for (uint64_t n : {1ULL, 2ULL, 3ULL, 1000ULL, 4097ULL, 65536ULL}) {
    FeistelPerm p = FeistelPerm::make(n, 99);
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t y = p(i);
      ASSERT_LT(y, n);
      ASSERT_FALSE(seen[y]) << "collision at n=" << n;
      seen[y] = true;
      ASSERT_EQ(p.inverse(y), i);
    }
  }
}

TEST(Generators, UniqueDenseIsAPermutationOfOneToN) {
  for (uint8_t kb : {4, 8}) {
    auto s = spec("R", 100003, KeyDist::UniqueDense, kb);
    auto keys = generate_keys(s, nullptr, {0, s.rows});
    std::vector<uint64_t> sorted = keys;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i + 1);
    EXPECT_FALSE(std::is_sorted(keys.begin(), keys.end()));  // shuffled, not 1..n in order
  }
}

TEST(Generators, UniqueSparseIsUniqueSpreadAndInvertible) {
  for (uint8_t kb : {4, 8}) {
    auto s = spec("R", 200000, KeyDist::UniqueSparse, kb);
    auto keys = generate_keys(s, nullptr, {0, s.rows});
    std::unordered_set<uint64_t> set(keys.begin(), keys.end());
    EXPECT_EQ(set.size(), keys.size());
    KeyGen g = make_keygen(s, nullptr);
    uint64_t top_half = 0;
    for (uint64_t i = 0; i < keys.size(); ++i) {
      ASSERT_EQ(g.row_of_key(keys[i]), i);
      ASSERT_NE(keys[i], kb == 4 ? uint64_t(kEmptyKey32) : kEmptyKey64);
      if (kb == 4) {
        ASSERT_LE(keys[i], 0xffffffffULL);
      }
      top_half += keys[i] >> (kb * 8 - 1);
    }
    // spread over the whole domain: about half the keys have the top bit set
    EXPECT_NEAR(double(top_half) / keys.size(), 0.5, 0.01);
  }
}

TEST(Generators, UniformStaysInRangeAndIsFlat) {
  auto s = spec("S", 400000, KeyDist::Uniform);
  s.range_lo = 10;
  s.range_hi = 109;
  auto keys = generate_keys(s, nullptr, {0, s.rows});
  std::vector<uint64_t> hist(100, 0);
  for (auto k : keys) {
    ASSERT_GE(k, 10u);
    ASSERT_LE(k, 109u);
    hist[k - 10]++;
  }
  for (auto h : hist) EXPECT_NEAR(double(h), 4000.0, 4000.0 * 0.08);
}

TEST(Generators, ZipfFrequenciesFollowThePowerLaw) {
  for (double z : {0.5, 1.0, 1.5}) {
    auto s = spec("S", 1000000, KeyDist::Zipf);
    s.zipf_z = z;
    s.zipf_domain = 10000;
    auto keys = generate_keys(s, nullptr, {0, s.rows});
    std::unordered_map<uint64_t, uint64_t> freq;
    for (auto k : keys) freq[k]++;
    std::vector<uint64_t> counts;
    for (auto& [k, c] : freq) counts.push_back(c);
    std::sort(counts.rbegin(), counts.rend());
    // rank-1 / rank-10 frequency ratio is 10^z for Zipf(z)
    double ratio = double(counts[0]) / double(counts[9]);
    EXPECT_NEAR(std::log10(ratio), z, 0.08) << "z=" << z;
    // expected share of the top key: 1 / H(n, z)
    double h = 0;
    for (int r = 1; r <= 10000; ++r) h += std::pow(r, -z);
    EXPECT_NEAR(double(counts[0]) / double(s.rows), 1.0 / h, 0.1 / h) << "z=" << z;
  }
}

TEST(Generators, ZipfZeroIsUniform) {
  auto s = spec("S", 200000, KeyDist::Zipf);
  s.zipf_z = 0;
  s.zipf_domain = 100;
  auto keys = generate_keys(s, nullptr, {0, s.rows});
  std::map<uint64_t, uint64_t> freq;
  for (auto k : keys) freq[k]++;
  EXPECT_EQ(freq.size(), 100u);
  for (auto& [k, c] : freq) EXPECT_NEAR(double(c), 2000.0, 2000.0 * 0.12);
}

TEST(Generators, ForeignKeyMatchRateAndMembership) {
  for (KeyDist rd : {KeyDist::UniqueDense, KeyDist::UniqueSparse}) {
    for (double m : {0.0, 0.1, 0.5, 1.0}) {
      auto r = spec("R", 50000, rd);
      auto s = spec("S", 200000, KeyDist::ForeignKey);
      s.match_rate = m;
      auto rk = generate_keys(r, nullptr, {0, r.rows});
      std::unordered_set<uint64_t> rset(rk.begin(), rk.end());
      auto sk = generate_keys(s, &r, {0, s.rows});
      uint64_t hits = 0;
      for (auto k : sk) hits += rset.count(k);
      EXPECT_NEAR(double(hits) / double(s.rows), m, 0.01) << "match rate " << m;
    }
  }
}

TEST(Generators, ForeignKeySkewConcentratesOnFewBuildRows) {
  auto r = spec("R", 100000, KeyDist::UniqueDense);
  auto s = spec("S", 500000, KeyDist::ForeignKey);
  s.zipf_z = 1.0;
  auto sk = generate_keys(s, &r, {0, s.rows});
  std::unordered_map<uint64_t, uint64_t> freq;
  for (auto k : sk) freq[k]++;
  uint64_t top = 0;
  for (auto& [k, c] : freq) top = std::max(top, c);
  double h = 0;
  for (int i = 1; i <= 100000; ++i) h += 1.0 / i;
  EXPECT_NEAR(double(top) / double(s.rows), 1.0 / h, 0.15 / h);
}

TEST(Generators, SameDataWhateverTheRankCount) {
  auto r = spec("R", 77777, KeyDist::UniqueSparse, 8);
  auto s = spec("S", 123457, KeyDist::ForeignKey, 8);
  s.zipf_z = 0.7;
  s.match_rate = 0.6;
  auto one = keys_by_slices(s, &r, 1);
  for (int n : {2, 3, 7, 64}) EXPECT_EQ(keys_by_slices(s, &r, n), one) << n << " ranks";
  auto p1 = generate_payload(s, 0, {0, s.rows});
  auto p2 = generate_payload(s, 0, {1000, 2000});
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_EQ(p2[i], p1[1000 + i]);
}

TEST(Generators, SeedChangesDataAndRelationsDiffer) {
  auto a = spec("R", 1000, KeyDist::UniqueSparse);
  auto b = a;
  b.seed = 43;
  auto c = a;
  c.name = "S";
  EXPECT_NE(generate_keys(a, nullptr, {0, 1000}), generate_keys(b, nullptr, {0, 1000}));
  EXPECT_NE(generate_keys(a, nullptr, {0, 1000}), generate_keys(c, nullptr, {0, 1000}));
}

TEST(RankSlice, CoversTheRelationExactlyOnce) {
  for (uint64_t rows : {0ULL, 1ULL, 5ULL, 1000ULL, 1001ULL})
    for (int n : {1, 2, 3, 8}) {
      uint64_t next = 0;
      for (int r = 0; r < n; ++r) {
        RowRange s = rank_slice(rows, r, n);
        EXPECT_EQ(s.begin, next);
        next = s.end;
      }
      EXPECT_EQ(next, rows);
    }
}

namespace {
Workload make_workload(uint64_t nr, uint64_t ns, KeyDist rd, KeyDist sd, uint8_t kb) {
  Workload w;
  w.r = spec("R", nr, rd, kb);
  w.s = spec("S", ns, sd, kb);
  w.s.range_lo = 1;
  w.s.range_hi = nr * 2;
  return w;
}
JoinDigest brute_force(const Workload& w) {
  auto rk = generate_keys(w.r, nullptr, {0, w.r.rows});
  auto sk = generate_keys(w.s, w.referenced_by_s(), {0, w.s.rows});
  auto rv = generate_payload(w.r, 0, {0, w.r.rows});
  auto sv = generate_payload(w.s, 0, {0, w.s.rows});
  return reference_join(rk, rv, sk, sv);
}
}  // namespace

TEST(Expected, ClosedFormEqualsReferenceJoin) {
  struct Case { KeyDist r, s; uint8_t kb; double m, z; };
  for (Case c : {Case{KeyDist::UniqueDense, KeyDist::ForeignKey, 4, 1.0, 0.0},
                 Case{KeyDist::UniqueSparse, KeyDist::ForeignKey, 8, 0.3, 1.2},
                 Case{KeyDist::UniqueDense, KeyDist::Uniform, 4, 1.0, 0.0},
                 Case{KeyDist::Uniform, KeyDist::UniqueDense, 8, 1.0, 0.0}}) {
    Workload w = make_workload(3000, 9000, c.r, c.s, c.kb);
    w.r.range_lo = 1;
    w.r.range_hi = 5000;
    w.s.match_rate = c.m;
    w.s.zipf_z = c.z;
    auto want = expected_result(w, 2);
    EXPECT_EQ(want.digest, brute_force(w)) << to_string(c.r) << " x " << to_string(c.s);
    EXPECT_GT(want.digest.count, 0u);
  }
}

TEST(Expected, NonUniqueSidesUseTheReferenceJoin) {
  Workload w = make_workload(2000, 3000, KeyDist::Uniform, KeyDist::Zipf, 4);
  w.r.range_lo = 1;
  w.r.range_hi = 500;
  w.s.zipf_z = 1.0;
  w.s.zipf_domain = 500;
  auto want = expected_result(w);
  EXPECT_EQ(want.method, "reference hash join");
  EXPECT_EQ(want.digest, brute_force(w));
  EXPECT_GT(want.digest.count, 3000u);  // duplicates on both sides multiply matches
}

TEST(Expected, TooLargeToVerifyIsAnInputError) {
  Workload w = make_workload(kReferenceJoinMaxRows, 10, KeyDist::Uniform, KeyDist::Uniform, 8);
  w.r.range_lo = 1;
  w.r.range_hi = 1000;
  EXPECT_FALSE(can_verify(w));
  EXPECT_THROW(expected_result(w), InputError);
}

TEST(Verification, AnyCorruptionIsDetectedAndExplained) {
  Workload w = make_workload(1000, 4000, KeyDist::UniqueDense, KeyDist::ForeignKey, 4);
  auto want = expected_result(w);
  JoinDigest good = want.digest;
  EXPECT_NO_THROW(check_result(good, want, "test"));
  JoinDigest one_less = good;
  one_less.count--;
  try {
    check_result(one_less, want, "npj on cpu");
    FAIL() << "count mismatch not detected";
  } catch (const VerificationError& e) {
    EXPECT_NE(std::string(e.what()).find("match count"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("npj on cpu"), std::string::npos);
  }
  // One payload value off by one bit changes the checksum.
  auto rk = generate_keys(w.r, nullptr, {0, w.r.rows});
  auto sk = generate_keys(w.s, &w.r, {0, w.s.rows});
  auto rv = generate_payload(w.r, 0, {0, w.r.rows});
  auto sv = generate_payload(w.s, 0, {0, w.s.rows});
  sv[17] ^= 1;
  JoinDigest bad = reference_join(rk, rv, sk, sv);
  EXPECT_EQ(bad.count, good.count);
  EXPECT_THROW(check_result(bad, want, "test"), VerificationError);
  // Swapping payloads between two output rows (a wrong pairing) is detected too.
  std::swap(sv[3], sv[4]);
  sv[17] ^= 1;
  EXPECT_NE(reference_join(rk, rv, sk, sv).checksum, good.checksum);
}

TEST(Validation, BadSpecsNameFieldAndValue) {
  auto expect_msg = [](const RelationSpec& s, const std::string& needle) { expect_invalid(s, {needle}); };
  auto s = spec("S", 10, KeyDist::ForeignKey);
  s.match_rate = 1.5;
  expect_msg(s, "match_rate = 1.5");
  s.match_rate = 0.5;
  s.zipf_z = 2.5;
  expect_msg(s, "zipf_z = 2.5");
  auto r = spec("R", 0, KeyDist::UniqueDense);
  expect_msg(r, "rows = 0");
  r.rows = 10;
  r.key_bytes = 3;
  expect_msg(r, "key_bytes = 3");
}

// --- TPC-H orders and lineitem ------------------------------------------------------------------

TEST(Tpch, ScaleFactorOneHasTheOfficialCountsAndLargestKey) {
  const Workload w = test::tpch(1);
  EXPECT_EQ(w.r.rows, 1500000u);
  EXPECT_EQ(w.s.rows, 6001215u);
  EXPECT_NO_THROW(w.validate());
  const auto orders = generate_keys(w.r, nullptr, {0, w.r.rows});
  const auto lineitems = generate_keys(w.s, &w.r, {0, w.s.rows});
  EXPECT_EQ(*std::max_element(orders.begin(), orders.end()), 6000000u);
  EXPECT_EQ(*std::max_element(lineitems.begin(), lineitems.end()), 6000000u);
  EXPECT_EQ(std::unordered_set<uint64_t>(orders.begin(), orders.end()).size(), orders.size());
}

// A scale factor whose orders are a whole number is one also where the product is not exact in
// doubles (0.14 x 1,500,000 = 210000.00000000003); one whose orders are not whole is an error.
TEST(Tpch, ScaleFactorsOfWholeOrdersAreAcceptedUpToRounding) {
  for (double sf : {0.07, 0.14, 0.29, 0.57, 3.3, 100.0}) EXPECT_NO_THROW(tpch::orders_at(sf)) << sf;
  EXPECT_EQ(tpch::orders_at(0.14), 210000u);
  EXPECT_EQ(tpch::orders_at(0.57), 855000u);
  EXPECT_THROW(tpch::orders_at(0.0333333), InputError);  // 49999.95 orders
  EXPECT_THROW(tpch::orders_at(1e-7), InputError);
}

// lineitem's size from the period's prefix table and a short walk: the index's count (a walk of
// every order) at small scale factors, the table's entries recomputed by walking their strides,
// one period's lines summing to 4 per order, and counts past a period continuing the first's.
TEST(Tpch, LineitemRowsFromThePeriodTableEqualAWalkOfEveryOrder) {
  for (double sf : {0.01, 0.1, 1.0}) {
    const uint64_t orders = tpch::orders_at(sf);
    EXPECT_EQ(tpch::lineitem_rows(orders), tpch::lineitem_index(orders).rows) << "scale factor " << sf;
  }
  auto walk = [](uint64_t first, uint64_t last) {  // lines of orders first .. last
    uint64_t lines = 0;
    for (auto c = tpch::LineitemCursor::first_line_of(first); c.order <= last; c.next_order()) lines += c.lines;
    return lines;
  };
  const uint64_t stride = uint64_t(1) << 24, period = tpch::kRandModulus - 1;
  for (uint64_t j : {1u, 64u, 127u})  // a table entry's difference from the previous: one stride's lines
    EXPECT_EQ(tpch::lines_before(j * stride + 1) - tpch::lines_before((j - 1) * stride + 1),
              walk((j - 1) * stride + 1, j * stride))
        << "stride " << j;
  const uint64_t last_stride = 127 * stride;
  EXPECT_EQ(tpch::lines_before(last_stride + 1) + walk(last_stride + 1, period), 4 * period) << "one period's lines";
  EXPECT_EQ(tpch::lineitem_rows(period + 1000), 4 * period + walk(1, 1000)) << "the stream repeats after a period";
}

TEST(Tpch, OrderKeysAreEightOfEveryThirtyTwoAndInvertible) {
  const Workload w = test::tpch(0.01);
  const KeyGen g = make_keygen(w.r, nullptr);
  const auto keys = generate_keys(w.r, nullptr, {0, w.r.rows});
  ASSERT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  std::map<uint64_t, int> per_block;  // keys in each [32 m, 32 m + 32)
  for (uint64_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(g.row_of_key(keys[i]), i);
    ASSERT_EQ(keys[i] & 0x18, 0u) << "bits 3 and 4 are the update sequence, 0 in the base data";
    per_block[keys[i] / 32]++;
  }
  for (auto [block, n] : per_block)
    if (block > 0 && block + 1 < per_block.size()) {
      EXPECT_EQ(n, 8) << "keys " << 32 * block << "..";
    }
  EXPECT_EQ(g.row_of_key(keys.back() + 1), ~0ULL);  // beyond the last order
  EXPECT_EQ(g.row_of_key(8), ~0ULL);                // a key of the update sequences
  EXPECT_EQ(g.row_of_key(0), ~0ULL);
}

TEST(Tpch, LineCountsAreOneDrawPerOrderFromTheJump) {
  // The O(log n) jump to order n's word equals n steps of the generator from the seed, and each
  // order's key repeats in lineitem as many times as its line count says, in order.
  const Workload w = test::tpch(0.01);
  const auto orders = generate_keys(w.r, nullptr, {0, w.r.rows});
  const auto lineitems = generate_keys(w.s, &w.r, {0, w.s.rows});
  uint64_t word = tpch::kLineCountSeed, row = 0;
  std::set<uint32_t> seen;
  for (uint64_t n = 1; n <= w.r.rows; ++n) {
    word = tpch::next_line_word(word);
    ASSERT_EQ(tpch::line_word(n), word) << "order " << n;
    const uint32_t lines = tpch::lines_of_word(word);
    seen.insert(lines);
    for (uint32_t l = 0; l < lines; ++l, ++row) ASSERT_EQ(lineitems[row], orders[n - 1]) << "lineitem row " << row;
  }
  EXPECT_EQ(row, w.s.rows);
  EXPECT_EQ(seen, (std::set<uint32_t>{1, 2, 3, 4, 5, 6, 7}));
}

TEST(Tpch, BlocksFromTheMiddleEqualTheWholeGeneration) {
  const Workload w = test::tpch(0.1, 8);
  const auto whole = generate_keys(w.s, &w.r, {0, w.s.rows});
  // Blocks that start inside an order, on an index entry's first order and past the last entry.
  const tpch::LineitemIndex& index = tpch::lineitem_index(w.r.rows);
  ASSERT_GT(index.entries, 2u);
  for (uint64_t first : {uint64_t(123457), index.rows_before[1], index.rows_before[1] + 1,
                         index.rows_before[index.entries - 1] + 3, w.s.rows - 5}) {
    const RowRange block{first, std::min(w.s.rows, first + 50000)};
    const auto part = generate_keys(w.s, &w.r, block);
    ASSERT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + long(first))) << "block from row " << first;
  }
  for (int n : {2, 3, 7, 64}) EXPECT_EQ(keys_by_slices(w.s, &w.r, n), whole) << n << " ranks";
}

// Past one period of the line-count stream the index repeats the first period's entries: every
// row's cursor sits on an order whose lines hold it (lines_before counts on its own table), at
// the period's ends, inside later periods and at the last row of scale factor 100,000.
TEST(Tpch, CursorsPastAPeriodFindTheOrderOfTheirRow) {
  const uint64_t orders = tpch::orders_at(tpch::kMaxScaleFactor);
  const tpch::LineitemIndex& index = tpch::lineitem_index(orders);
  ASSERT_EQ(index.rows, tpch::lineitem_rows(orders));
  const uint64_t period = tpch::kLinesPerPeriod;
  for (uint64_t row : {uint64_t(0), period - 1, period, period + 12345, 37 * period + 999999, index.rows - 1}) {
    const tpch::LineitemCursor c = index.cursor(row);
    const uint64_t before = tpch::lines_before(c.order);
    EXPECT_LE(before, row) << "row " << row;
    EXPECT_EQ(before + c.line, row) << "row " << row;
    EXPECT_LT(c.line, c.lines) << "row " << row;
    EXPECT_EQ(c.word, tpch::line_word(c.order)) << "row " << row;
  }
  EXPECT_EQ(index.cursor(index.rows - 1).order, orders);
}

TEST(Tpch, ClosedFormEqualsReferenceJoin) {
  const Workload w = test::tpch(0.01);
  const ExpectedResult want = expected_result(w, 2);
  EXPECT_EQ(want.method, "closed form (R keys unique)");
  EXPECT_EQ(want.digest.count, w.s.rows);  // every lineitem has its order
  EXPECT_EQ(want.digest, brute_force(w));
  EXPECT_EQ(expected_count(w).digest.count, w.s.rows);
}

TEST(Tpch, JoinsOnTheCpuBackendVerify) {
  register_builtin();
  const Workload w = test::tpch(0.01);
  for (const auto& [strategy, ranks] : std::vector<std::pair<std::string, int>>{{"phj", 1}, {"shuffle", 2}}) {
    SCOPED_TRACE(strategy);
    RunPoint p;
    p.name = "tpch";
    p.strategy = strategy;
    p.backend = "cpu";
    p.cluster.shape = {1, ranks};
    p.workload = w;
    RunOutcome o;
    ASSERT_NO_THROW(o = run_point(p));  // run_point throws VerificationError on a wrong result
    EXPECT_EQ(o.checked, "yes");
    EXPECT_EQ(o.digest, expected_result(w).digest);
  }
}

TEST(Tpch, BadScaleFactorsAndPairingsNameFieldAndValue) {
  auto expect_msg = [](const Workload& w, const std::string& needle) { expect_invalid(w, {needle}); };
  Workload w = test::tpch(0.01);
  w.r.scale_factor = w.s.scale_factor = 0;
  expect_msg(w, "relation R: scale_factor = 0: must be positive");
  w.r.scale_factor = w.s.scale_factor = 1e-7;  // 0.15 orders
  expect_msg(w, "scale_factor = 1e-07");
  w.r.scale_factor = w.s.scale_factor = 2 * tpch::kMaxScaleFactor;
  expect_msg(w, "beyond TPC-H's largest scale factor");
  w = test::tpch(0.01);
  w.s.rows += 1;
  expect_msg(w, "relation S: rows = " + std::to_string(w.s.rows) + ": tpch_lineitem has " + std::to_string(w.s.rows - 1));
  w = test::tpch(0.01);
  w.s.dist = KeyDist::ForeignKey;
  expect_msg(w, "relation S: dist = fk: R is tpch_orders");
  w = test::tpch(0.01);
  w.r.dist = KeyDist::UniqueDense;
  expect_msg(w, "relation R: dist = unique_dense: S is tpch_lineitem");
  w = test::tpch(0.01);
  std::swap(w.r.dist, w.s.dist);
  expect_msg(w, "relation R: dist = tpch_lineitem: R (the build side) takes tpch_orders");
  w = test::tpch(0.01);
  w.s.scale_factor = 0.02;
  w.s.rows = tpch_rows(w.s);
  expect_msg(w, "relation S: scale_factor = 0.02: differs from R's 0.01");
  // Orders alone (lineitem's count at SF 1000 takes a while): keys beyond 4 bytes.
  RelationSpec orders = test::tpch(0.01).r;
  orders.scale_factor = 1000;
  orders.rows = tpch_rows(orders);
  expect_invalid(orders, {"relation R: scale_factor = 1000: its largest o_orderkey", "needs 8-byte keys"});
  orders.key_bytes = 8;
  EXPECT_NO_THROW(orders.validate());
}
