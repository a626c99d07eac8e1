#include "core/workload/relation.hpp"

#include <algorithm>
#include <iterator>
#include <sstream>

#include "core/common/error.hpp"
#include "core/workload/generate.hpp"

namespace joinlab {

namespace {
const char* kDistNames[] = {"unique_dense", "unique_sparse", "uniform", "zipf", "fk", "tpch_orders", "tpch_lineitem"};
uint64_t max_key(uint8_t key_bytes) { return key_bytes == 4 ? 0xfffffffeULL : ~0ULL - 1; }
}  // namespace

const char* to_string(KeyDist d) { return kDistNames[int(d)]; }

KeyDist key_dist_from_string(const std::string& s) {
  for (int i = 0; i < int(std::size(kDistNames)); ++i)
    if (s == kDistNames[i]) return KeyDist(i);
  throw InputError("unknown key distribution '" + s +
                   "' (expected unique_dense, unique_sparse, uniform, zipf, fk, tpch_orders or tpch_lineitem)");
}

uint64_t tpch_rows(const RelationSpec& spec) {
  uint64_t orders = 0;
  try {
    orders = tpch::orders_at(spec.scale_factor);
  } catch (const InputError& e) {
    std::ostringstream m;
    m << "relation " << spec.name << ": scale_factor = " << spec.scale_factor << ": " << e.what();
    throw InputError(m.str());
  }
  return spec.dist == KeyDist::TpchOrders ? orders : tpch::lineitem_rows(orders);
}

RelationSpec one_column_relation(const std::string& name, uint64_t rows, KeyDist dist, uint8_t key_bytes,
                                 uint8_t val_bytes) {
  RelationSpec r;
  r.name = name;
  r.rows = rows;
  r.dist = dist;
  r.key_bytes = key_bytes;
  r.payload_bytes = {val_bytes};
  return r;
}

uint64_t RelationSpec::tuple_bytes() const {
  uint64_t b = key_bytes;
  for (auto p : payload_bytes) b += p;
  return b;
}

void RelationSpec::validate() const {
  auto bad = [&](const std::string& field, const std::string& value, const std::string& why) {
    throw InputError("relation " + name + ": " + field + " = " + value + ": " + why);
  };
  if (rows == 0) bad("rows", "0", "must be positive");
  if (key_bytes != 4 && key_bytes != 8) bad("key_bytes", std::to_string(key_bytes), "must be 4 or 8");
  if (payload_bytes.empty()) bad("payload_bytes", "(empty)", "needs at least one payload column");
  for (auto p : payload_bytes)
    if (p != 4 && p != 8) bad("payload_bytes", std::to_string(p), "each column must be 4 or 8 bytes");
  // Every buffer size is rows x bytes per row: it must not wrap (2^62 rows of 12 bytes would).
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(rows, tuple_bytes(), &bytes))
    bad("rows", std::to_string(rows), "x " + std::to_string(tuple_bytes()) + " bytes per row overflows 64 bits");
  const uint64_t kmax = max_key(key_bytes);
  switch (dist) {
    case KeyDist::UniqueDense:
    case KeyDist::UniqueSparse:
      if (rows > kmax) bad("rows", std::to_string(rows), "more unique keys than the key width holds");
      break;
    case KeyDist::Uniform:
      if (range_hi < range_lo) bad("range", std::to_string(range_lo) + ".." + std::to_string(range_hi), "empty range");
      if (range_hi > kmax) bad("range_hi", std::to_string(range_hi), "beyond the key width (all-ones is reserved)");
      break;
    case KeyDist::Zipf:
      if (!(zipf_z >= 0.0 && zipf_z <= 2.0)) {
        std::ostringstream v; v << zipf_z;
        bad("zipf_z", v.str(), "must be in [0, 2]");
      }
      if ((zipf_domain ? zipf_domain : rows) > kmax) bad("zipf_domain", std::to_string(zipf_domain), "beyond the key width");
      break;
    case KeyDist::TpchOrders:
    case KeyDist::TpchLineitem: {
      const uint64_t want = tpch_rows(*this);
      if (rows != want)
        bad("rows", std::to_string(rows), std::string(to_string(dist)) + " has " + std::to_string(want) + " rows at its scale_factor");
      const uint64_t largest = tpch::order_key(tpch::orders_at(scale_factor));
      if (largest > kmax) {
        std::ostringstream v;
        v << scale_factor;
        bad("scale_factor", v.str(), "its largest o_orderkey " + std::to_string(largest) + " needs 8-byte keys");
      }
      break;
    }
    case KeyDist::ForeignKey:
      if (!(match_rate >= 0.0 && match_rate <= 1.0)) {
        std::ostringstream v; v << match_rate;
        bad("match_rate", v.str(), "must be in [0, 1]");
      }
      if (!(zipf_z >= 0.0 && zipf_z <= 2.0)) {
        std::ostringstream v; v << zipf_z;
        bad("zipf_z", v.str(), "must be in [0, 2]");
      }
      break;
  }
}

void Workload::validate() const {
  if (is_ssb()) {
    s.validate();
    if (r.rows != 0) throw InputError("workload.query: an SSB query's R is empty, not " + std::to_string(r.rows) + " rows");
    return;
  }
  check_pairing();
  r.validate();
  s.validate();
  if (r.key_bytes != s.key_bytes)
    throw InputError("R and S key widths differ (" + std::to_string(r.key_bytes) + " vs " +
                     std::to_string(s.key_bytes) + " bytes)");
}

void Workload::check_pairing() const {
  if (is_ssb()) return;  // lineorder alone (validate)
  if (r.dist == KeyDist::ForeignKey)
    throw InputError("relation R: dist = fk: only S may reference R (R is the build side)");
  if (s.dist == KeyDist::ForeignKey && !r.unique_keys())
    throw InputError(std::string("relation S: dist = fk references R, whose dist = ") + to_string(r.dist) +
                     " is not unique (use unique_dense or unique_sparse)");
  // TPC-H keys come as the pair they are: orders the build side, lineitem the probe side.
  if (r.dist == KeyDist::TpchLineitem || s.dist == KeyDist::TpchOrders) {
    const RelationSpec& wrong = r.dist == KeyDist::TpchLineitem ? r : s;
    throw InputError("relation " + wrong.name + ": dist = " + to_string(wrong.dist) +
                     ": R (the build side) takes tpch_orders and S tpch_lineitem");
  }
  if (r.dist == KeyDist::TpchOrders && s.dist != KeyDist::TpchLineitem)
    throw InputError(std::string("relation S: dist = ") + to_string(s.dist) +
                     ": R is tpch_orders, whose keys only tpch_lineitem references (set S's dist to tpch_lineitem)");
  if (s.dist == KeyDist::TpchLineitem && r.dist != KeyDist::TpchOrders)
    throw InputError(std::string("relation R: dist = ") + to_string(r.dist) +
                     ": S is tpch_lineitem, whose keys are those of tpch_orders (set R's dist to tpch_orders)");
  if (r.is_tpch() && r.scale_factor != s.scale_factor) {
    std::ostringstream m;
    m << "relation S: scale_factor = " << s.scale_factor << ": differs from R's " << r.scale_factor;
    throw InputError(m.str());
  }
}

RowRange rank_slice(uint64_t rows, int rank, int nranks) {
  uint64_t base = rows / uint64_t(nranks), extra = rows % uint64_t(nranks);
  uint64_t r = uint64_t(rank);
  uint64_t begin = r * base + std::min(r, extra);
  return {begin, begin + base + (r < extra ? 1 : 0)};
}

uint64_t relation_seed(const RelationSpec& spec) {
  uint64_t salt = 0;
  for (char c : spec.name) salt = salt * 131 + uint8_t(c);
  return mix64(spec.seed ^ mix64(salt + 0x5bd1e995ULL));
}

KeyGen make_keygen(const RelationSpec& spec, const RelationSpec* referenced) {
  KeyGen g;
  g.dist = uint8_t(spec.dist);
  g.key_bytes = spec.key_bytes;
  g.rows = spec.rows;
  g.seed = relation_seed(spec);
  switch (spec.dist) {
    case KeyDist::UniqueDense:
      g.perm = FeistelPerm::make(spec.rows, g.seed);
      break;
    case KeyDist::UniqueSparse:
      break;
    case KeyDist::Uniform:
      g.lo = spec.range_lo;
      g.span = spec.range_hi - spec.range_lo + 1;
      if (g.span == 0) g.span = ~0ULL;  // full 64-bit range
      break;
    case KeyDist::Zipf: {
      uint64_t domain = spec.zipf_domain ? spec.zipf_domain : spec.rows;
      g.perm = FeistelPerm::make(domain, g.seed);
      g.zipf = ZipfSampler::make(spec.zipf_z, domain);
      break;
    }
    case KeyDist::ForeignKey: {
      if (!referenced) throw InputError("relation " + spec.name + ": dist = fk needs the referenced relation");
      if (!referenced->unique_keys())
        throw InputError("relation " + spec.name + " references " + referenced->name + ", which is not unique");
      g.ref_dist = uint8_t(referenced->dist);
      g.ref_rows = referenced->rows;
      g.ref_seed = relation_seed(*referenced);
      if (referenced->dist == KeyDist::UniqueDense) g.ref_perm = FeistelPerm::make(referenced->rows, g.ref_seed);
      g.fk_skewed = spec.zipf_z > 0;
      g.zipf = ZipfSampler::make(spec.zipf_z, referenced->rows);
      g.match_all = spec.match_rate >= 1.0;
      g.match_threshold = g.match_all ? ~0ULL : uint64_t(spec.match_rate * 18446744073709551616.0);
      // Keys absent from R: above 1..rows for dense R, beyond R's generator rows for sparse R.
      uint64_t room = max_key(spec.key_bytes) - referenced->rows;
      g.span = std::max<uint64_t>(1, std::min(room, std::max<uint64_t>(referenced->rows, 1024)));
      break;
    }
    case KeyDist::TpchOrders:
      break;
    case KeyDist::TpchLineitem:
      if (!referenced || referenced->dist != KeyDist::TpchOrders)
        throw InputError("relation " + spec.name + ": dist = tpch_lineitem needs the tpch_orders relation it references");
      g.lineitems = tpch::lineitem_index(referenced->rows);
      break;
  }
  return g;
}

std::vector<uint64_t> generate_keys(const RelationSpec& spec, const RelationSpec* referenced, RowRange range) {
  KeyGen g = make_keygen(spec, referenced);
  std::vector<uint64_t> out(range.size());
  g.for_each_key(range.begin, range.end, [&](uint64_t row, uint64_t key) { out[row - range.begin] = key; });
  return out;
}

std::vector<uint64_t> generate_payload(const RelationSpec& spec, int column, RowRange range) {
  uint64_t seed = relation_seed(spec);
  std::vector<uint64_t> out(range.size());
  for (uint64_t i = 0; i < out.size(); ++i)
    out[i] = payload_value(seed, column, range.begin + i, spec.payload_bytes[size_t(column)]);
  return out;
}

}  // namespace joinlab
