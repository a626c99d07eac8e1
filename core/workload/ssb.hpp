// The Star Schema Benchmark (O'Neil, O'Neil, Chen, Revilak: "Star Schema Benchmark", rev. 3,
// 2009) as far as queries Q2.1 and Q3.1 read it, position-addressable: row i of any table is
// computed alone (counter-based words, random_word), on the host and on the device.
// Encoding (docs/workloads.md, "Star Schema Benchmark"): every key is its row number + 1 (a
// date's key is its day number, 1 = 1992-01-01); strings are small integers: regions 0..4 and
// nations 0..24 as TPC-H numbers them, p_category (m - 1) * 5 + (c - 1) for MFGR#mc, p_brand1
// category * 40 + (b - 1) for MFGR#mcb. Lineorder has TPC-H lineitem's shape (its orders and
// 1-7 lines each, tpch.hpp); each order draws lo_custkey and lo_orderdate, each line its part,
// supplier, quantity and discount.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/hashing.hpp"
#include "core/common/hd.hpp"
#include "core/workload/relation.hpp"

namespace joinlab::ssb {

constexpr uint32_t kRegions = 5, kNations = 25;
constexpr uint32_t kAmerica = 1, kAsia = 2;  // TPC-H's region numbers
constexpr uint32_t kDays = 2556;             // the spec's date rows: 1992-01-01 .. 1998-12-30
constexpr uint32_t kOrderDays = kDays - 150; // o_orderdate: 1992-01-01 .. 1998-08-02 (dbgen: end - 151 days)
constexpr uint32_t kFirstYear = 1992, kYears = 7;
constexpr uint32_t kCategories = 25, kBrandsPerCategory = 40;
constexpr uint32_t kFiltered = ~0u;          // a dimension row that fails the query's filter

enum class Table : uint8_t { Date, Part, Supplier, Customer, Lineorder };
const char* to_string(Table t);

// Rows of every table at a scale factor, and the seed of the words they draw.
struct Scale {
  uint64_t customers = 0, suppliers = 0, parts = 0, orders = 0, lineorders = 0;
  uint64_t seed = 0;
  JL_HD uint64_t rows(Table t) const {
    switch (t) {
      case Table::Date: return kDays;
      case Table::Part: return parts;
      case Table::Supplier: return suppliers;
      case Table::Customer: return customers;
      default: return lineorders;
    }
  }
};

// Word streams, one per generated column.
enum Stream : uint64_t { kPartMfgr = 1, kPartCategory, kPartBrand, kSuppNation, kCustNation, kOrderCust, kOrderDate,
                         kLinePart, kLineSupp, kLineQuantity, kLineDiscount };

JL_HD uint32_t region_of_nation(uint32_t nation) {
  const uint8_t region[kNations] = {0, 1, 1, 1, 4, 0, 3, 3, 2, 2, 4, 4, 2, 4, 0, 0, 0, 1, 2, 3, 4, 2, 3, 3, 1};
  return region[nation];
}
JL_HD uint32_t draw(const Scale& s, uint64_t stream, uint64_t index, uint64_t n) {
  return uint32_t(random_word(s.seed, stream, index) % n);
}

// --- dimension rows (0-based row numbers; key = row + 1) ---
JL_HD uint32_t year_of_day(uint32_t day) {  // day 0 = 1992-01-01
  uint32_t year = kFirstYear, left = day;
  for (;;) {
    const uint32_t days = year % 4 == 0 ? 366 : 365;
    if (left < days) return year;
    left -= days;
    ++year;
  }
}
JL_HD uint32_t part_category(const Scale& s, uint64_t row) {
  return draw(s, kPartMfgr, row, 5) * 5 + draw(s, kPartCategory, row, 5);
}
JL_HD uint32_t part_brand1(const Scale& s, uint64_t row) {
  return part_category(s, row) * kBrandsPerCategory + draw(s, kPartBrand, row, kBrandsPerCategory);
}
JL_HD uint32_t supplier_nation(const Scale& s, uint64_t row) { return draw(s, kSuppNation, row, kNations); }
JL_HD uint32_t customer_nation(const Scale& s, uint64_t row) { return draw(s, kCustNation, row, kNations); }
// TPC-H's p_retailprice in cents, which SSB keeps: 90000 + (key / 10) mod 20001 + 100 (key mod 1000).
JL_HD uint64_t part_price(uint64_t partkey) { return 90000 + (partkey / 10) % 20001 + 100 * (partkey % 1000); }

// --- lineorder ---
struct LineorderRow {
  uint32_t orderdate = 0;  // date key (day number, 1-based)
  uint64_t custkey = 0, partkey = 0, suppkey = 0;
  uint32_t quantity = 0, discount = 0;
  uint64_t revenue = 0;  // lo_extendedprice * (100 - lo_discount) / 100, in cents
};
// Global lineorder row `row`, a line of order `order` (1-based, tpch::LineitemCursor's).
JL_HD LineorderRow lineorder_row(const Scale& s, uint64_t order, uint64_t row) {
  LineorderRow r;
  r.orderdate = 1 + draw(s, kOrderDate, order, kOrderDays);
  r.custkey = 1 + random_word(s.seed, kOrderCust, order) % s.customers;
  r.partkey = 1 + random_word(s.seed, kLinePart, row) % s.parts;
  r.suppkey = 1 + random_word(s.seed, kLineSupp, row) % s.suppliers;
  r.quantity = 1 + draw(s, kLineQuantity, row, 50);
  r.discount = draw(s, kLineDiscount, row, 11);
  r.revenue = uint64_t(r.quantity) * part_price(r.partkey) * (100 - r.discount) / 100;
  return r;
}

// --- queries -------------------------------------------------------------------------------------
// A query's plan: the dimensions a lineorder row probes, most selective first, each through its
// foreign key (a bit field of the shipped 8-byte key), and how their values make the group.
constexpr int kMaxSteps = 3;
struct StarQuery {
  uint8_t query = 0;  // SsbQuery
  uint8_t steps = 0;
  uint8_t table[kMaxSteps] = {0, 0, 0};  // Table
  uint8_t shift[kMaxSteps] = {0, 0, 0}, bits[kMaxSteps] = {0, 0, 0};
  uint32_t stride[kMaxSteps] = {0, 0, 0};  // group = sum of value x stride over the steps
  uint32_t groups = 0;
  JL_HD uint32_t foreign_key(uint64_t key, int step) const {
    return uint32_t((key >> shift[step]) & ((uint64_t(1) << bits[step]) - 1));
  }
};

// The lineorder key a query ships: its foreign keys packed as the plan says.
JL_HD uint64_t lineorder_key(const StarQuery& q, const LineorderRow& r) {
  uint64_t key = 0;
  for (int i = 0; i < q.steps; ++i) {
    const Table t = Table(q.table[i]);
    const uint64_t fk = t == Table::Date ? r.orderdate : t == Table::Part ? r.partkey
                        : t == Table::Supplier ? r.suppkey : r.custkey;
    key |= fk << q.shift[i];
  }
  return key;
}

// The value a dimension row carries in the query's table: its part of the group, or kFiltered.
//  Q2.1: part p_brand1 where p_category = MFGR#12; supplier s_nation where s_region = AMERICA
//        (a filter only: stride 0); date d_year - 1992.
//  Q3.1: customer c_nation where c_region = ASIA; supplier s_nation where s_region = ASIA;
//        date d_year - 1992 where d_year <= 1997.
JL_HD uint32_t dimension_value(const StarQuery& q, const Scale& s, Table t, uint64_t row) {
  const bool q21 = q.query == uint8_t(SsbQuery::Q21);
  switch (t) {
    case Table::Date: {
      const uint32_t year = year_of_day(uint32_t(row));
      return !q21 && year > 1997 ? kFiltered : year - kFirstYear;
    }
    case Table::Part: return part_category(s, row) == 1 ? part_brand1(s, row) : kFiltered;
    case Table::Supplier: {
      const uint32_t nation = supplier_nation(s, row);
      return region_of_nation(nation) == (q21 ? kAmerica : kAsia) ? nation : kFiltered;
    }
    case Table::Customer: {
      const uint32_t nation = customer_nation(s, row);
      return region_of_nation(nation) == kAsia ? nation : kFiltered;
    }
    default: return kFiltered;
  }
}

// A dimension's chained hash table (ops.hpp's Chained layout, 4-byte keys and values).
struct DimTableRef {
  const uint32_t *heads = nullptr, *next = nullptr, *keys = nullptr, *vals = nullptr;
  uint64_t buckets = 0, seed = 0;
  JL_HD uint32_t find(uint32_t key) const {
    for (uint32_t e = heads[table_slot(key, seed, buckets)]; e != ~0u; e = next[e])
      if (keys[e] == key) return vals[e];
    return kFiltered;
  }
};

// The chained probes of one lineorder key: false at the first dimension that has no row for it
// or whose row fails the filter; else true with its group.
JL_HD bool star_probe(const StarQuery& q, const DimTableRef* dims, uint64_t key, uint32_t& group) {
  uint32_t g = 0;
  for (int i = 0; i < q.steps; ++i) {
    const uint32_t v = dims[i].find(q.foreign_key(key, i));
    if (v == kFiltered) return false;
    g += v * q.stride[i];
  }
  group = g;
  return true;
}

// Order-independent digest of a query's result: the wrapping sum over groups with rows of a hash
// of (group, revenue sum).
JL_HD uint64_t group_digest(uint64_t group, uint64_t sum) { return mix64(mix64(group ^ 0x5ca1ab1e) + sum); }

// --- host -----------------------------------------------------------------------------------------

// The tables at scale factor `sf` (the spec's rules, section 3.5: customer 30,000 x SF, supplier
// 2,000 x SF, part 200,000 x (1 + floor(log2 SF)), lineorder the lines of 1,500,000 x SF orders;
// below SF 1, where the spec has no rule, part 200,000 x SF). Throws InputError naming
// workload.scale_factor unless every count is a positive whole number.
Scale scale_at(double sf, uint64_t seed);
// The plan of `query` at `scale`; throws InputError naming workload.query when its foreign keys do
// not fit the 8-byte key (Q3.1 beyond about SF 4,400).
StarQuery plan(SsbQuery query, const Scale& scale);
// The workload of `query` (relation.hpp's Workload: S lineorder, R empty); InputError as
// scale_at and plan throw.
Workload workload(SsbQuery query, double sf, uint64_t seed);
SsbQuery query_from_string(const std::string& s);  // "q2.1", "q3.1"; InputError naming the value
const char* to_string(SsbQuery q);

// The share of lineorder rows that pass each step (its dimension's passing rows over the rows
// its foreign key ranges over: for the date, the order dates), from the generated dimensions.
std::vector<double> step_pass_fractions(const StarQuery& q, const Scale& scale);
// Lineorder rows x the product of those: the expected count of qualifying rows (the lineorder
// rows draw their foreign keys independently and uniformly).
double expected_qualifying(const StarQuery& q, const Scale& scale);

struct QueryResult {
  uint64_t count = 0;            // qualifying lineorder rows
  std::vector<uint64_t> sums;    // revenue per group (q.groups)
  uint64_t checksum() const;     // sum of group_digest over groups with rows
};
// The reference: every lineorder row of [first, end) evaluated straight from the generator
// (no hash tables), on `threads` host threads (0: all).
QueryResult reference(const StarQuery& q, const Scale& scale, uint64_t first, uint64_t end, int threads = 0);

}  // namespace joinlab::ssb
