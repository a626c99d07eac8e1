#include "core/workload/ssb.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

#include "core/common/error.hpp"
#include "core/workload/tpch.hpp"

namespace joinlab::ssb {

const char* to_string(Table t) {
  static const char* names[] = {"date", "part", "supplier", "customer", "lineorder"};
  return names[int(t)];
}

const char* to_string(SsbQuery q) { return q == SsbQuery::Q21 ? "q2.1" : q == SsbQuery::Q31 ? "q3.1" : "none"; }

SsbQuery query_from_string(const std::string& s) {
  if (s == "q2.1") return SsbQuery::Q21;
  if (s == "q3.1") return SsbQuery::Q31;
  if (s == "none") return SsbQuery::None;
  throw InputError("unknown query '" + s + "': must be q2.1, q3.1 or none");  // the key's context names it
}

namespace {

uint64_t whole(double sf, double per_sf, const char* table) {
  const double exact = per_sf * sf, n = std::round(exact);
  if (n < 1.0 || std::fabs(exact - n) > 1e-9 * n) {
    std::ostringstream m;
    m << "workload.scale_factor = " << sf << ": " << table << " would have " << exact
      << " rows (needs a positive whole number)";
    throw InputError(m.str());
  }
  return uint64_t(n);
}

uint32_t bits_for(uint64_t largest) {
  uint32_t b = 1;
  while (b < 64 && (uint64_t(1) << b) <= largest) ++b;
  return b;
}

}  // namespace

Scale scale_at(double sf, uint64_t seed) {
  if (!(sf > 0)) {
    std::ostringstream m;
    m << "workload.scale_factor = " << sf << ": must be positive";
    throw InputError(m.str());
  }
  Scale s;
  s.seed = mix64(seed ^ 0x55b);
  s.customers = whole(sf, 30000, "customer");
  s.suppliers = whole(sf, 2000, "supplier");
  s.parts = sf >= 1 ? 200000 * (1 + uint64_t(std::floor(std::log2(sf)))) : whole(sf, 200000, "part");
  try {
    s.orders = tpch::orders_at(sf);
  } catch (const InputError& e) {
    std::ostringstream m;
    m << "workload.scale_factor = " << sf << ": lineorder's 1,500,000 x SF orders: " << e.what();
    throw InputError(m.str());
  }
  s.lineorders = tpch::lineitem_rows(s.orders);
  return s;
}

StarQuery plan(SsbQuery query, const Scale& scale) {
  StarQuery q;
  q.query = uint8_t(query);
  q.steps = 3;
  auto step = [&](int i, Table t, uint32_t stride) {
    q.table[i] = uint8_t(t);
    q.stride[i] = stride;
    q.bits[i] = uint8_t(bits_for(scale.rows(t)));
    q.shift[i] = uint8_t(i == 0 ? 0 : q.shift[i - 1] + q.bits[i - 1]);
  };
  if (query == SsbQuery::Q21) {  // group (d_year, p_brand1)
    step(0, Table::Part, 1);
    step(1, Table::Supplier, 0);
    step(2, Table::Date, kCategories * kBrandsPerCategory);
    q.groups = kYears * kCategories * kBrandsPerCategory;
  } else if (query == SsbQuery::Q31) {  // group (c_nation, s_nation, d_year)
    step(0, Table::Customer, kNations * kYears);
    step(1, Table::Supplier, kYears);
    step(2, Table::Date, 1);
    q.groups = kNations * kNations * kYears;
  } else {
    throw InputError("workload.query = none: no query to plan");
  }
  const uint32_t bits = q.shift[2] + q.bits[2];
  if (bits > 63)
    throw InputError(std::string("workload.query = ") + to_string(query) + ": its foreign keys need " +
                     std::to_string(bits) + " bits at this scale factor (" + std::to_string(scale.customers) +
                     " customers, " + std::to_string(scale.parts) + " parts), more than the 63 of an 8-byte key");
  return q;
}

Workload workload(SsbQuery query, double sf, uint64_t seed) {
  Workload w;
  w.query = query;
  w.r = one_column_relation("R", 0, KeyDist::UniqueDense, 8, 8);
  w.s = one_column_relation("S", 0, KeyDist::TpchLineitem, 8, 8);  // lineitem's rows: those of lineorder
  w.r.seed = w.s.seed = seed;
  w.r.scale_factor = w.s.scale_factor = sf;
  const Scale scale = scale_at(sf, seed);
  plan(query, scale);
  w.s.rows = scale.lineorders;
  return w;
}

std::vector<double> step_pass_fractions(const StarQuery& q, const Scale& scale) {
  // A dimension walk per (query, scale, step), kept: the simulator asks for every operator.
  static std::mutex mu;
  static std::map<std::tuple<int, uint64_t, uint64_t, uint64_t, uint64_t>, std::vector<double>> known;
  std::lock_guard<std::mutex> lock(mu);
  auto& f = known[{q.query, scale.seed, scale.customers, scale.parts, scale.suppliers}];
  if (!f.empty()) return f;
  for (int i = 0; i < q.steps; ++i) {
    const Table t = Table(q.table[i]);
    const uint64_t rows = t == Table::Date ? kOrderDays : scale.rows(t);
    uint64_t pass = 0;
    for (uint64_t r = 0; r < rows; ++r) pass += dimension_value(q, scale, t, r) != kFiltered;
    f.push_back(double(pass) / double(rows));
  }
  return f;
}

double expected_qualifying(const StarQuery& q, const Scale& scale) {
  double e = double(scale.lineorders);
  for (double f : step_pass_fractions(q, scale)) e *= f;
  return e;
}

uint64_t QueryResult::checksum() const {
  uint64_t c = 0;
  for (size_t g = 0; g < sums.size(); ++g)
    if (sums[g]) c += group_digest(g, sums[g]);
  return c;
}

QueryResult reference(const StarQuery& q, const Scale& scale, uint64_t first, uint64_t end, int threads) {
  const unsigned n = threads > 0 ? unsigned(threads) : std::max(1u, std::thread::hardware_concurrency());
  const tpch::LineitemIndex& index = tpch::lineitem_index(scale.orders);
  std::vector<QueryResult> part(n);
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < n; ++t)
    pool.emplace_back([&, t] {
      QueryResult& mine = part[t];
      mine.sums.assign(q.groups, 0);
      const RowRange rows = rank_slice(end - first, int(t), int(n));
      if (!rows.size()) return;
      tpch::LineitemCursor c = index.cursor(first + rows.begin);
      for (uint64_t row = first + rows.begin; row < first + rows.end; ++row, c.next()) {
        const LineorderRow lo = lineorder_row(scale, c.order, row);
        uint32_t group = 0;
        bool pass = true;
        for (int i = 0; i < q.steps && pass; ++i) {
          const Table tb = Table(q.table[i]);
          const uint64_t fk = tb == Table::Date ? lo.orderdate : tb == Table::Part ? lo.partkey
                              : tb == Table::Supplier ? lo.suppkey : lo.custkey;
          const uint32_t v = dimension_value(q, scale, tb, fk - 1);
          pass = v != kFiltered;
          group += pass ? v * q.stride[i] : 0;
        }
        if (!pass) continue;
        mine.count++;
        mine.sums[group] += lo.revenue;
      }
    });
  for (auto& th : pool) th.join();
  QueryResult all;
  all.sums.assign(q.groups, 0);
  for (const QueryResult& p : part) {
    all.count += p.count;
    for (size_t g = 0; g < all.sums.size(); ++g) all.sums[g] += p.sums[g];
  }
  return all;
}

}  // namespace joinlab::ssb
