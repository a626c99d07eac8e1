// A relation is a spec, never a file: rows, key width, payload columns, key distribution, seed.
// Generation is position-addressable (keygen.hpp), so every rank and backend makes its own slice.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace joinlab {

enum class KeyDist : uint8_t {
  UniqueDense,   // a random permutation of 1..rows
  UniqueSparse,  // distinct keys spread over the whole key domain
  Uniform,       // uniform over [range_lo, range_hi], duplicates allowed
  Zipf,          // Zipf(z) over domain ranks 1..zipf_domain, ranks scattered over keys 1..domain
  ForeignKey,    // references the other relation (must be unique): match_rate, optional Zipf skew
  TpchOrders,    // TPC-H o_orderkey as dbgen makes it (core/workload/tpch.hpp); rows from scale_factor
  TpchLineitem,  // TPC-H l_orderkey: each order's key once per lineitem; references TpchOrders
};

const char* to_string(KeyDist d);
KeyDist key_dist_from_string(const std::string& s);  // throws InputError naming the value

struct RelationSpec {
  std::string name = "R";             // "R" (build side) or "S" (probe side)
  uint64_t rows = 0;                  // total over all ranks
  uint8_t key_bytes = 4;              // 4 or 8
  std::vector<uint8_t> payload_bytes{4};  // one entry per payload column, each 4 or 8
  KeyDist dist = KeyDist::UniqueDense;
  uint64_t range_lo = 1, range_hi = 0;    // Uniform
  double zipf_z = 0.0;                    // Zipf, and ForeignKey skew over referenced rows
  uint64_t zipf_domain = 0;               // Zipf: number of distinct ranks (0 = rows)
  double match_rate = 1.0;                // ForeignKey
  double scale_factor = 0;                // TpchOrders, TpchLineitem: the TPC-H scale factor
  uint64_t seed = 42;

  bool unique_keys() const {
    return dist == KeyDist::UniqueDense || dist == KeyDist::UniqueSparse || dist == KeyDist::TpchOrders;
  }
  bool is_tpch() const { return dist == KeyDist::TpchOrders || dist == KeyDist::TpchLineitem; }
  // Its keys are (some of) the other relation's, which are unique: exact counts in closed form.
  bool references_r() const { return dist == KeyDist::ForeignKey || dist == KeyDist::TpchLineitem; }
  uint64_t tuple_bytes() const;  // key + all payload columns
  // Throws InputError naming the field and value when the spec is inconsistent.
  void validate() const;
};

// A relation of one payload column, the other fields at their defaults.
RelationSpec one_column_relation(const std::string& name, uint64_t rows, KeyDist dist, uint8_t key_bytes,
                                 uint8_t val_bytes);

// A Star Schema Benchmark query (core/workload/ssb.hpp) instead of a two-relation join.
enum class SsbQuery : uint8_t { None, Q21, Q31 };

// The two sides of a join; S may reference R. With an SSB query, S is lineorder (its rows, an
// 8-byte key of the query's foreign keys, the revenue as its 8-byte payload, from S's
// scale_factor) and R is empty: the dimensions are built on every rank (ssb.hpp).
struct Workload {
  RelationSpec r, s;
  SsbQuery query = SsbQuery::None;
  bool is_ssb() const { return query != SsbQuery::None; }
  void validate() const;
  // The distributions' pairing alone (fk references a unique R, TPC-H orders with lineitem), which
  // needs no sizes: throws InputError naming the side and its dist.
  void check_pairing() const;
  // R when S's generator draws R's keys (ForeignKey, TpchLineitem), else null.
  const RelationSpec* referenced_by_s() const { return s.references_r() ? &r : nullptr; }
};

// Rows of a TPC-H relation at its scale_factor (orders 1.5 M x SF, lineitem the sum of their
// line counts). Throws InputError naming the scale factor when it is not usable.
uint64_t tpch_rows(const RelationSpec& spec);

// Rows [begin, end) of a relation owned by rank `rank` of `nranks`: contiguous blocks, so
// the union over ranks is the same relation whatever the rank count.
struct RowRange {
  uint64_t begin = 0, end = 0;
  uint64_t size() const { return end - begin; }
};
RowRange rank_slice(uint64_t rows, int rank, int nranks);

}  // namespace joinlab
