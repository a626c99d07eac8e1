#include "core/verify/expected.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "core/common/error.hpp"
#include "core/verify/checksum.hpp"
#include "core/workload/generate.hpp"
#include "core/workload/ssb.hpp"

namespace joinlab {

namespace {

// Digest of one output row from the generators: R row rr joined with S row sr on `key`.
struct RowDigester {
  uint64_t r_seed, s_seed;
  const RelationSpec& r;
  const RelationSpec& s;
  uint64_t operator()(uint64_t key, uint64_t rr, uint64_t sr) const {
    uint64_t h = digest_begin(key);
    int col = 0;
    for (size_t c = 0; c < r.payload_bytes.size(); ++c)
      h = digest_add(h, payload_value(r_seed, int(c), rr, r.payload_bytes[c]), col++);
    for (size_t c = 0; c < s.payload_bytes.size(); ++c)
      h = digest_add(h, payload_value(s_seed, int(c), sr, s.payload_bytes[c]), col++);
    return h;
  }
};

// f(slice) for `threads` slices of rows [0, rows) at once (0: one per hardware thread), in slice order.
template <class Part, class F>
std::vector<Part> per_slice(uint64_t rows, int threads, F f) {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<Part> parts(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { parts[size_t(t)] = f(rank_slice(rows, t, threads)); });
  for (auto& th : pool) th.join();
  return parts;
}

// Walks every row of `walk` and looks its key up in the unique relation `unique`.
JoinDigest walk_against_unique(const Workload& w, bool r_is_unique, int threads) {
  const RelationSpec& uniq = r_is_unique ? w.r : w.s;
  const RelationSpec& walk = r_is_unique ? w.s : w.r;
  KeyGen ug = make_keygen(uniq, nullptr);
  KeyGen wg = make_keygen(walk, walk.references_r() ? &uniq : nullptr);
  RowDigester digest{relation_seed(w.r), relation_seed(w.s), w.r, w.s};
  const std::vector<JoinDigest> parts = per_slice<JoinDigest>(walk.rows, threads, [&](RowRange rr) {
    JoinDigest d;
    wg.for_each_key(rr.begin, rr.end, [&](uint64_t i, uint64_t k) {
      uint64_t j = ug.row_of_key(k);
      if (j == ~0ULL) return;
      d.count++;
      d.checksum += r_is_unique ? digest(k, j, i) : digest(k, i, j);
    });
    return d;
  });
  JoinDigest total;
  for (auto& d : parts) { total.count += d.count; total.checksum += d.checksum; }
  return total;
}

JoinDigest reference_from_generators(const Workload& w) {
  RowRange all_r{0, w.r.rows}, all_s{0, w.s.rows};
  auto rk = generate_keys(w.r, nullptr, all_r);
  auto sk = generate_keys(w.s, w.referenced_by_s(), all_s);
  std::unordered_multimap<uint64_t, uint64_t> table;
  table.reserve(rk.size());
  for (uint64_t i = 0; i < rk.size(); ++i) table.emplace(rk[i], i);
  RowDigester digest{relation_seed(w.r), relation_seed(w.s), w.r, w.s};
  JoinDigest d;
  for (uint64_t i = 0; i < sk.size(); ++i) {
    auto range = table.equal_range(sk[i]);
    for (auto it = range.first; it != range.second; ++it) {
      d.count++;
      d.checksum += digest(sk[i], it->second, i);
    }
  }
  return d;
}

}  // namespace

bool can_verify(const Workload& w) {
  return w.r.unique_keys() || w.s.unique_keys() || w.r.rows + w.s.rows <= kReferenceJoinMaxRows;
}

ExpectedResult expected_result(const Workload& w, int threads) {
  if (w.r.unique_keys()) return {walk_against_unique(w, true, threads), "closed form (R keys unique)"};
  if (w.s.unique_keys()) return {walk_against_unique(w, false, threads), "closed form (S keys unique)"};
  if (!can_verify(w)) {
    std::ostringstream m;
    m << "cannot verify this workload: neither R (" << to_string(w.r.dist) << ") nor S (" << to_string(w.s.dist)
      << ") has unique keys, and |R| + |S| = " << (w.r.rows + w.s.rows) << " exceeds the reference join's limit of "
      << kReferenceJoinMaxRows << " rows";
    throw InputError(m.str());
  }
  return {reference_from_generators(w), "reference hash join"};
}

ExpectedResult expected_count(const Workload& w, int threads) {
  if (w.s.dist == KeyDist::TpchLineitem) return {{w.s.rows, 0}, "closed form (every lineitem row has its order)"};
  if (w.s.dist != KeyDist::ForeignKey) {
    ExpectedResult e = expected_result(w, threads);
    e.digest.checksum = 0;
    return e;
  }
  const KeyGen g = make_keygen(w.s, &w.r);  // S references R, whose keys are unique
  if (g.match_all) return {{w.s.rows, 0}, "closed form (every S key in R)"};
  const std::vector<uint64_t> parts =
      per_slice<uint64_t>(w.s.rows, threads, [&](RowRange rr) { return g.hits(rr.begin, rr.end - rr.begin); });
  return {{std::accumulate(parts.begin(), parts.end(), uint64_t(0)), 0}, "closed form (S's foreign keys that hit R)"};
}

ExpectedResult expected_star_result(const Workload& w, int threads) {
  const ssb::Scale scale = ssb::scale_at(w.s.scale_factor, w.s.seed);
  const ssb::QueryResult ref = ssb::reference(ssb::plan(w.query, scale), scale, 0, scale.lineorders, threads);
  return {{ref.count, ref.checksum()}, std::string("reference evaluation of ") + ssb::to_string(w.query)};
}

void check_star_expected_count(uint64_t got, const Workload& w, int ranks, const std::string& what) {
  const ssb::Scale scale = ssb::scale_at(w.s.scale_factor, w.s.seed);
  const double want = ssb::expected_qualifying(ssb::plan(w.query, scale), scale);
  const double tolerance = 0.5 * ranks;
  if (std::fabs(double(got) - want) <= tolerance) return;
  std::ostringstream m;
  m << what << ": " << ssb::to_string(w.query) << " counted " << got << " qualifying rows, but " << want
    << " are expected (lineorder rows x the dimensions' pass fractions; tolerance " << tolerance << ")";
  throw VerificationError(m.str());
}

JoinDigest reference_join(const std::vector<uint64_t>& r_keys, const std::vector<uint64_t>& r_vals,
                          const std::vector<uint64_t>& s_keys, const std::vector<uint64_t>& s_vals) {
  std::unordered_multimap<uint64_t, uint64_t> table;
  for (size_t i = 0; i < r_keys.size(); ++i) table.emplace(r_keys[i], r_vals[i]);
  JoinDigest d;
  for (size_t i = 0; i < s_keys.size(); ++i) {
    auto range = table.equal_range(s_keys[i]);
    for (auto it = range.first; it != range.second; ++it) {
      d.count++;
      d.checksum += row_digest(s_keys[i], it->second, s_vals[i]);
    }
  }
  return d;
}

void check_result(const JoinDigest& got, const ExpectedResult& want, const std::string& what) {
  if (got == want.digest) return;
  std::ostringstream m;
  m << what << ": wrong join result:";
  if (got.count != want.digest.count)
    m << " match count " << got.count << " but expected " << want.digest.count;
  if (got.checksum != want.digest.checksum)
    m << (got.count != want.digest.count ? ";" : "") << " checksum 0x" << std::hex << got.checksum
      << " but expected 0x" << want.digest.checksum << std::dec;
  m << " (expected by " << want.method << ")";
  throw VerificationError(m.str());
}

}  // namespace joinlab
