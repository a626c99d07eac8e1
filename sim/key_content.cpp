#include "sim/key_content.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <tuple>

#include "core/workload/generate.hpp"

namespace joinlab::sim {

namespace {

// Explicit keys kept per generated slice: the top of the distribution, where skew lives.
constexpr uint64_t kMaxHeavyKeys = 4096;

uint64_t max_key(uint8_t key_bytes) { return key_bytes == 4 ? 0xfffffffeULL : ~0ULL - 1; }

// A component's light-row sequence (Component::at): its rows, its first row's place, its cover.
uint64_t sequence_rows(const Component& c) { return c.of ? c.of : c.light; }
uint64_t sequence_at(const Component& c) { return c.of ? c.at : 0; }
uint64_t sequence_cover(const Component& c) { return c.of ? c.of_cover : c.cover; }
// The cover of the first x of n rows whose cover is c: consecutive ranges' covers add up to c.
uint64_t cover_before(uint64_t c, uint64_t n, uint64_t x) { return n ? uint64_t((unsigned __int128)c * x / n) : 0; }

auto fn_tuple(const PartitionFn& f) { return std::make_tuple(uint8_t(f.kind), f.shift, f.bits, f.seed); }
bool same_fn(const PartitionFn& a, const PartitionFn& b) { return fn_tuple(a) == fn_tuple(b); }
bool constraint_less(const Constraint& a, const Constraint& b) {
  return std::make_tuple(fn_tuple(a.fn), a.part) < std::make_tuple(fn_tuple(b.fn), b.part);
}

// Adds c to a canonical list; false when it contradicts a constraint already there.
bool add_constraint(std::vector<Constraint>& cs, const Constraint& c) {
  for (auto& x : cs)
    if (same_fn(x.fn, c.fn)) return x.part == c.part;
  cs.insert(std::upper_bound(cs.begin(), cs.end(), c, constraint_less), c);
  return true;
}

bool satisfies(uint64_t key, const std::vector<Constraint>& cs) {
  for (auto& c : cs)
    if (c.fn(key) != c.part) return false;
  return true;
}

// #x in [0, n) with (x & mask) == value; n up to 2^64.
unsigned __int128 count_below(unsigned __int128 n, uint64_t mask, uint64_t value) {
  unsigned __int128 total = 0;
  for (int b = 64; b-- > 0;) {
    if (!((n >> b) & 1)) continue;
    // x agrees with n above bit b, has 0 at bit b, anything below.
    const uint64_t above = b == 63 ? 0 : ~((uint64_t(2) << b) - 1);
    const uint64_t prefix = uint64_t(n >> 0) & above;  // n's bits above b (n < 2^64 here)
    if ((prefix & mask & above) != (value & mask & above)) continue;
    const uint64_t bit = uint64_t(1) << b;
    if ((mask & bit) && (value & bit)) continue;
    const uint64_t below = bit - 1;
    total += (unsigned __int128)1 << (b - __builtin_popcountll(mask & below));
  }
  if (n >> 64) {  // n = 2^64: every x in [0, 2^64) counts once
    total = (unsigned __int128)1 << (64 - __builtin_popcountll(mask));
  }
  return total;
}

// |universe ∩ constraints| (expected, for hash constraints and scattered sets).
double universe_count(const KeyUniverse& u, const std::vector<Constraint>& cs) {
  uint64_t mask = 0, value = 0;
  double factor = 1;
  for (size_t i = 0; i < cs.size(); ++i) {
    const Constraint& c = cs[i];
    for (size_t j = 0; j < i; ++j)
      if (same_fn(cs[j].fn, c.fn) && cs[j].part != c.part) return 0;
    if (c.fn.kind == PartitionFn::Radix) {
      if (c.fn.bits == 0) continue;
      const uint64_t m = (c.fn.bits >= 64 ? ~0ULL : ((1ULL << c.fn.bits) - 1)) << c.fn.shift;
      const uint64_t v = (uint64_t(c.part) << c.fn.shift) & m;
      if ((mask & m & value) != (mask & m & v)) return 0;
      mask |= m;
      value |= v;
    } else {
      factor /= double(c.fn.fanout());
    }
  }
  if (u.kind == KeyUniverse::Interval) {
    if (u.hi < u.lo) return 0;
    unsigned __int128 hi = (unsigned __int128)u.hi + 1;
    double n = double(count_below(hi, mask, value) - count_below(u.lo, mask, value));
    return n * factor;
  }
  return u.size * std::ldexp(1.0, -__builtin_popcountll(mask)) * factor;
}

bool same_universe(const KeyUniverse& a, const KeyUniverse& b) {
  if (&a == &b) return true;
  if (a.id != 0 || b.id != 0) return a.id == b.id;
  return a.kind == b.kind && a.lo == b.lo && a.hi == b.hi && a.size == b.size;
}

// Probability that `key` belongs to the universe (exact where the set is known).
double member_weight(const KeyUniverse& u, uint64_t key) {
  if (u.disjoint_from) return 0.0;  // heavy keys are hits of the referenced relation
  if (u.kind == KeyUniverse::Interval) return key >= u.lo && key <= u.hi ? 1.0 : 0.0;
  if (u.exact_members) return u.members.row_of_key(key) != ~0ULL ? 1.0 : 0.0;
  return u.hi > 0 ? u.size / (double(u.hi) + 1.0) : 0.0;
}

// |a ∩ b ∩ cs|.
double intersection_count(const KeyUniverse& a, const KeyUniverse& b, const std::vector<Constraint>& cs) {
  if (same_universe(a, b)) return universe_count(a, cs);
  if ((a.disjoint_from && a.disjoint_from == b.id) || (b.disjoint_from && b.disjoint_from == a.id)) return 0;
  if (a.kind == KeyUniverse::Interval && b.kind == KeyUniverse::Interval) {
    KeyUniverse i;
    i.kind = KeyUniverse::Interval;
    i.lo = std::max(a.lo, b.lo);
    i.hi = std::min(a.hi, b.hi);
    return i.hi < i.lo ? 0.0 : universe_count(i, cs);
  }
  // A scattered set meets the other independently within the key domain.
  KeyUniverse domain;
  domain.kind = KeyUniverse::Interval;
  domain.lo = 0;
  domain.hi = std::max(a.kind == KeyUniverse::Scattered ? a.hi : 0, b.kind == KeyUniverse::Scattered ? b.hi : 0);
  const double d = universe_count(domain, cs);
  return d > 0 ? universe_count(a, cs) * universe_count(b, cs) / d : 0.0;
}

std::shared_ptr<KeyContent> single(Component c) {
  auto k = std::make_shared<KeyContent>();
  if (c.rows() > 0) k->parts.push_back(std::move(c));
  return k;
}

// Harmonic number H(n, z) = sum_{k<=n} k^-z: exact head, midpoint-integral tail.
double harmonic(double z, uint64_t n) {
  static std::mutex mu;
  static std::map<std::pair<double, uint64_t>, double> cache;
  std::lock_guard<std::mutex> g(mu);
  auto it = cache.find({z, n});
  if (it != cache.end()) return it->second;
  const uint64_t head = std::min<uint64_t>(n, 1 << 20);
  double h = 0;
  for (uint64_t k = head; k >= 1; --k) h += std::pow(double(k), -z);
  if (n > head) {
    const double a = double(head) + 0.5, b = double(n) + 0.5;
    h += std::fabs(z - 1.0) < 1e-12 ? std::log(b / a) : (std::pow(b, 1 - z) - std::pow(a, 1 - z)) / (1 - z);
  }
  cache[{z, n}] = h;
  return h;
}

UniversePtr unique_universe(const RelationSpec& spec) {
  auto u = std::make_shared<KeyUniverse>();
  const KeyGen g = make_keygen(spec, nullptr);
  u->id = mix64(relation_seed(spec) ^ 0x756e697175654b73ULL);
  u->size = double(spec.rows);
  u->what = spec.name + " keys";
  if (spec.dist == KeyDist::UniqueDense) {
    u->kind = KeyUniverse::Interval;
    u->lo = 1;
    u->hi = spec.rows;
  } else {
    // Sparse keys over the whole key width, or TPC-H's 8 of every 32 up to the largest order's.
    u->kind = KeyUniverse::Scattered;
    u->hi = spec.dist == KeyDist::TpchOrders ? tpch::order_key(spec.rows) : max_key(spec.key_bytes);
    u->exact_members = true;
    u->members = g;
  }
  return u;
}

UniversePtr interval_universe(uint64_t lo, uint64_t hi, uint64_t id, std::string what) {
  auto u = std::make_shared<KeyUniverse>();
  u->kind = KeyUniverse::Interval;
  u->lo = lo;
  u->hi = hi;
  u->size = double(hi - lo) + 1.0;
  u->id = id;
  u->what = std::move(what);
  return u;
}

// Heavy keys (rank k -> key(k), probability pmf(k)) plus light rows over `light_universe`, for
// `rows` rows of a distribution over `n` ranks.
Component skewed_component(double z, uint64_t n, uint64_t rows, const std::function<uint64_t(uint64_t)>& key_of_rank,
                           UniversePtr light_universe) {
  Component c;
  c.universe = std::move(light_universe);
  std::vector<double> w;
  std::vector<uint64_t> keys;
  const uint64_t limit = std::min(n, kMaxHeavyKeys);
  double heavy_mass = 0;
  for (uint64_t k = 1; k <= limit; ++k) {
    const double p = zipf_pmf(z, n, k);
    if (n > kMaxHeavyKeys && p * double(rows) < 1.0) break;  // not heavy: leave it to the light rows
    keys.push_back(key_of_rank(k));
    w.push_back(p);
    heavy_mass += p;
  }
  w.push_back(std::max(0.0, 1.0 - heavy_mass));  // the light rows
  auto counts = apportion(w, rows);
  for (size_t i = 0; i < keys.size(); ++i)
    if (counts[i]) c.heavy.push_back({keys[i], counts[i]});
  c.light = counts.back();
  c.light_zipf = z;
  std::sort(c.heavy.begin(), c.heavy.end());
  // Two ranks can map to one key only through a bug; merge to keep the list canonical.
  for (size_t i = 1; i < c.heavy.size();)
    if (c.heavy[i].first == c.heavy[i - 1].first) {
      c.heavy[i - 1].second += c.heavy[i].second;
      c.heavy.erase(c.heavy.begin() + long(i));
    } else {
      ++i;
    }
  return c;
}

}  // namespace

uint64_t Component::rows() const {
  uint64_t r = light;
  for (auto& h : heavy) r += h.second;
  return r;
}

uint64_t KeyContent::rows() const {
  uint64_t r = 0;
  for (auto& c : parts) r += c.rows();
  return r;
}

std::vector<uint64_t> apportion(const std::vector<double>& weights, uint64_t total, size_t first) {
  std::vector<uint64_t> out(weights.size(), 0);
  if (weights.empty()) return out;
  long double sum = 0;
  for (double w : weights) sum += std::max(0.0, w);
  const size_t n = weights.size();
  if (std::all_of(weights.begin(), weights.end(), [&](double w) { return w == weights[0]; })) {
    // Equal weights (a uniform key range split by a hash, per rank and operator): equal shares
    // and remainders, so the rest goes to the indices from `first` on. The same numbers, without
    // a share each.
    const long double share = sum > 0 ? (long double)std::max(0.0, weights[0]) / sum * total : (long double)total / n;
    const uint64_t each = uint64_t(std::floor(share));
    if (each <= total / n) {
      const uint64_t left = total - each * n;
      std::fill(out.begin(), out.end(), each + left / n);
      for (size_t i = 0; i < size_t(left % n); ++i) out[(first + i) % n]++;
      return out;
    }
  }
  std::vector<long double> share(weights.size());
  for (size_t i = 0; i < weights.size(); ++i)
    share[i] = sum > 0 ? (long double)std::max(0.0, weights[i]) / sum * total : (long double)total / weights.size();
  uint64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    out[i] = uint64_t(std::floor(share[i]));
    given += out[i];
  }
  if (given > total) {  // rounding of huge totals: take back from the last
    for (size_t i = weights.size(); i-- > 0 && given > total;) {
      uint64_t t = std::min(out[i], given - total);
      out[i] -= t;
      given -= t;
    }
  }
  uint64_t left = total - given;
  if (left == 0) return out;
  // The rest goes one each to the largest remainders, ties in index order from `first` (round
  // robin in that order if there is more left than weights): only the first `left` of that
  // order are needed, not a sort of all of them (a fanout of 1024 per partition operator and rank).
  for (auto& x : out) x += left / n;
  const size_t k = size_t(left % n);
  if (k == 0) return out;
  std::vector<long double>& frac = share;
  for (auto& x : frac) x -= std::floor(x);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto before = [&](size_t a, size_t b) {
    return frac[a] > frac[b] || (frac[a] == frac[b] && (a + n - first % n) % n < (b + n - first % n) % n);
  };
  if (k < n) std::nth_element(order.begin(), order.begin() + long(k), order.end(), before);
  for (size_t i = 0; i < k; ++i) out[order[i]]++;
  return out;
}

double zipf_pmf(double z, uint64_t n, uint64_t k) {
  if (z == 0.0) return 1.0 / double(n);
  return std::pow(double(k), -z) / harmonic(z, n);
}

ContentPtr unknown_content(uint64_t rows) {
  auto u = std::make_shared<KeyUniverse>();
  u->kind = KeyUniverse::Scattered;
  u->hi = ~0ULL - 1;
  u->size = 0;  // matches nothing
  u->id = 0x756e6b6e6f776eULL;
  u->what = "unknown keys (buffer never written)";
  Component c;
  c.universe = u;
  c.light = rows;
  return single(std::move(c));
}

namespace {
ContentPtr generated_content_of(const RelationSpec& spec, const RelationSpec* referenced, uint64_t first_row,
                                uint64_t rows);
}  // namespace

ContentPtr generated_content(const RelationSpec& spec, const RelationSpec* referenced, uint64_t first_row,
                             uint64_t rows) {
  ContentPtr c = generated_content_of(spec, referenced, first_row, rows);
  if (c->parts.empty()) return c;
  auto src = std::make_shared<GeneratedRows>();
  src->gen = make_keygen(spec, referenced);
  src->first_row = first_row;
  src->rows = rows;
  auto out = std::make_shared<KeyContent>(*c);
  for (Component& comp : out->parts) comp.source = src;
  return out;
}

namespace {
ContentPtr generated_content_of(const RelationSpec& spec, const RelationSpec* referenced, uint64_t first_row,
                                uint64_t rows) {
  // Every slice of a generated relation has the same distribution; only a foreign key's hits
  // are counted row by row (first_row).
  const KeyGen g = make_keygen(spec, referenced);
  Component c;
  switch (spec.dist) {
    case KeyDist::UniqueDense:
    case KeyDist::UniqueSparse:
    case KeyDist::TpchOrders:
      c.universe = unique_universe(spec);
      c.light = rows;
      c.cover = rows;
      c.at = first_row;  // rows of the relation's sequence, so slices of every rank split alike
      c.of = c.of_cover = spec.rows;
      return single(std::move(c));
    case KeyDist::Uniform: {
      const uint64_t span = spec.range_hi - spec.range_lo + 1;
      if (span != 0 && span <= kMaxHeavyKeys) {  // few keys: every one explicit
        c.universe = interval_universe(spec.range_lo, spec.range_hi, 0, "uniform range");
        auto per_key = apportion(std::vector<double>(span, 1.0), rows);
        for (uint64_t k = 0; k < span; ++k)
          if (per_key[k]) c.heavy.push_back({spec.range_lo + k, per_key[k]});
        return single(std::move(c));
      }
      c.universe = interval_universe(spec.range_lo, spec.range_hi, 0, "uniform range");
      c.light = rows;
      return single(std::move(c));
    }
    case KeyDist::Zipf: {
      const uint64_t domain = spec.zipf_domain ? spec.zipf_domain : spec.rows;
      auto u = interval_universe(1, domain, mix64(relation_seed(spec) ^ 0x7a697066ULL), "zipf domain of " + spec.name);
      return single(skewed_component(spec.zipf_z, domain, rows, [&](uint64_t k) { return 1 + g.perm(k - 1); }, u));
    }
    case KeyDist::ForeignKey: {
      const RelationSpec& ref = *referenced;
      const uint64_t hits = g.hits(first_row, rows);  // exact: the count of a PK-FK join is the hits
      auto out = std::make_shared<KeyContent>();
      UniversePtr ru = unique_universe(ref);
      Component h;
      if (spec.zipf_z > 0) {
        h = skewed_component(spec.zipf_z, ref.rows, hits,
                             [&](uint64_t k) {
                               return KeyGen::unique_key(g.ref_dist, k - 1, g.ref_perm, g.ref_seed, g.key_bytes);
                             },
                             ru);
      } else {
        h.universe = ru;
        h.light = hits;
      }
      if (h.rows()) out->parts.push_back(std::move(h));
      if (rows > hits) {
        Component m;
        const uint64_t miss_id = mix64(relation_seed(spec) ^ 0x6d697373ULL);
        if (ref.dist == KeyDist::UniqueDense) {
          m.universe = interval_universe(ref.rows + 1, ref.rows + g.span, miss_id, spec.name + " keys absent from " + ref.name);
        } else {
          auto u = std::make_shared<KeyUniverse>();
          u->kind = KeyUniverse::Scattered;
          u->hi = max_key(spec.key_bytes);
          u->size = double(g.span);
          u->id = miss_id;
          u->disjoint_from = ru->id;
          u->what = spec.name + " keys absent from " + ref.name;
          m.universe = u;
        }
        m.light = rows - hits;
        out->parts.push_back(std::move(m));
      }
      return out;
    }
    case KeyDist::TpchLineitem:  // each row holds its order's key (1 to 7 rows a key): all hits
      c.universe = unique_universe(*referenced);
      c.light = rows;
      return single(std::move(c));
  }
  return unknown_content(rows);
}
}  // namespace

namespace {

// Light-row shares of one component over the partitions of fn.
std::vector<double> light_fractions(const Component& c, const PartitionFn& fn) {
  const uint32_t fanout = fn.fanout();
  std::vector<double> w(fanout, 1.0);
  for (auto& x : c.constraints)
    if (same_fn(x.fn, fn)) {  // already partitioned by fn: everything stays in its partition
      std::fill(w.begin(), w.end(), 0.0);
      w[x.part] = 1.0;
      return w;
    }
  const bool interval_radix = c.universe->kind == KeyUniverse::Interval && fn.kind == PartitionFn::Radix;
  bool radix_overlap = false;
  if (fn.kind == PartitionFn::Radix)
    for (auto& x : c.constraints)
      if (x.fn.kind == PartitionFn::Radix && x.fn.shift < fn.shift + fn.bits && fn.shift < x.fn.shift + x.fn.bits)
        radix_overlap = true;
  if (!interval_radix && !radix_overlap) return w;  // uniform
  double base = 0;
  for (uint32_t p = 0; p < fanout; ++p) {
    std::vector<Constraint> cs = c.constraints;
    if (!add_constraint(cs, {fn, p})) {
      w[p] = 0;
      continue;
    }
    w[p] = universe_count(*c.universe, cs);
    base += w[p];
  }
  if (base <= 0) std::fill(w.begin(), w.end(), 1.0);
  return w;
}

}  // namespace

namespace {
// Where the ties of a component's light rows start when split by fn: equal shares leave equal
// remainders, and ties always to the lowest partitions would hand them the extra row of every
// split (gpj at match rate 0.3 gave the first receiver 1524 rows more than the second, and its
// partitions a chunk of one row more per batch, where hashed keys spread the excess evenly). A
// function of the component, so every split of the same rows rounds alike.
size_t tie_start(const Component& comp, const PartitionFn& fn) {
  uint64_t h = mix64(comp.universe->id ^ mix64(sequence_rows(comp)) ^ (uint64_t(comp.constraints.size()) << 56));
  for (auto& c : comp.constraints) h = mix64(h ^ (uint64_t(c.part) << 8) ^ c.fn.seed ^ c.fn.bits);
  return size_t(h % std::max<uint32_t>(1, fn.fanout()));
}

// A component's light rows split by fn: split_counts and ContentSplit must agree. The whole
// sequence is apportioned; a positioned range takes its rows of each partition by position.
struct LightSplit {
  std::vector<uint64_t> counts;
  std::vector<uint64_t> before, whole;  // positioned: the sequence's rows of each partition before the range, in all
};
LightSplit light_split(const Component& comp, const PartitionFn& fn) {
  LightSplit s;
  s.whole = apportion(light_fractions(comp, fn), sequence_rows(comp), tie_start(comp, fn));
  if (!comp.of) {
    s.counts = std::move(s.whole);
    s.whole.clear();
    return s;
  }
  s.before = dhondt(s.whole, comp.at);
  s.counts = dhondt(s.whole, comp.at + comp.light);
  for (size_t p = 0; p < s.counts.size(); ++p) s.counts[p] -= s.before[p];
  return s;
}
std::vector<uint64_t> light_counts(const Component& comp, const PartitionFn& fn) { return light_split(comp, fn).counts; }

// Light rows [first, first + rows) of comp's sequence as a component's position and cover.
void place_light(Component& out, const Component& comp, uint64_t first, uint64_t rows) {
  out.light = rows;
  out.at = first;
  out.of = sequence_rows(comp);
  out.of_cover = sequence_cover(comp);
  out.cover = cover_before(out.of_cover, out.of, first + rows) - cover_before(out.of_cover, out.of, first);
}

// Whether y's rows may join x's (same keys and constraints): unpartitioned ranges of a sequence
// only where they are consecutive, so that a later split (a sort of rows received from several
// ranks) splits each range as a partition operator splits it; a partition's pieces of different
// places are each a partition operator's already, and join as rows of their own.
bool joins_light(const Component& x, const Component& y) {
  return !x.constraints.empty() || !(x.of || y.of) || (x.of == y.of && x.of_cover == y.of_cover && x.at + x.light == y.at);
}

// y's light rows added to x's. Consecutive ranges of one sequence stay a range of it; other rows
// become a sequence of their own.
void add_light(Component& x, const Component& y) {
  const bool follows = x.of && x.of == y.of && x.of_cover == y.of_cover && x.at + x.light == y.at;
  if (!follows) x.at = x.of = x.of_cover = 0;
  x.light += y.light;
  x.cover += y.cover;
}
}  // namespace

std::vector<uint64_t> split_counts(const KeyContent& c, const PartitionFn& fn) {
  std::vector<uint64_t> counts(fn.fanout(), 0);
  for (auto& comp : c.parts) {
    for (auto& [key, n] : comp.heavy) counts[fn(key)] += n;
    if (comp.light == 0) continue;
    auto light = light_counts(comp, fn);
    for (size_t p = 0; p < light.size(); ++p) counts[p] += light[p];
  }
  return counts;
}

namespace {

// Adds y's light rows (y's constraints: cs) to `into` when into is one component of light rows
// over the same keys and constraints.
bool absorb_rows(ContentPtr& into, const Component& y, const std::vector<Constraint>& cs) {
  if (into->order || into->parts.size() != 1) return false;  // sorted rows stay as they are
  const Component& x = into->parts.front();
  if (!x.heavy.empty() || !y.heavy.empty() || x.light_zipf != y.light_zipf || !same_universe(*x.universe, *y.universe) ||
      !joins_light(x, y) ||
      x.constraints.size() != cs.size() ||
      !std::equal(x.constraints.begin(), x.constraints.end(), cs.begin(),
                  [](const Constraint& p, const Constraint& q) { return same_fn(p.fn, q.fn) && p.part == q.part; }))
    return false;
  if (into.use_count() == 1) {  // ours alone (made non-const by single()): no copy per message
    add_light(const_cast<KeyContent&>(*into).parts.front(), y);
    return true;
  }
  Component c = x;
  add_light(c, y);
  into = single(std::move(c));
  return true;
}

}  // namespace

ContentSplit::ContentSplit(const KeyContent& c, const PartitionFn& fn) : fn_(fn) {
  for (auto& comp : c.parts) {
    Share s;
    s.base = comp;
    s.base.heavy.clear();
    s.base.light = 0;
    s.constraints = std::move(s.base.constraints);
    s.base.constraints.clear();
    if (comp.light) {
      LightSplit ls = light_split(comp, fn);
      s.light = std::move(ls.counts);
      s.before = std::move(ls.before);
      s.whole = std::move(ls.whole);
    }
    for (auto& h : comp.heavy) s.heavy.push_back({fn(h.first), h});
    std::stable_sort(s.heavy.begin(), s.heavy.end(), [](auto& a, auto& b) { return a.first < b.first; });  // keys stay sorted
    shares_.push_back(std::move(s));
  }
}

void ContentSplit::Share::light_piece(Component& piece, uint32_t p) const {
  const uint64_t rows = light.empty() ? 0 : light[p];
  if (whole.empty()) {  // the whole of partition p's rows: the component's cover (Component::cover)
    piece.light = rows;
    return;
  }
  Component seq = base;  // partition p's rows of the sequence, whose cover is the sequence's
  seq.light = whole[p];
  seq.of = 0;
  seq.cover = base.of_cover;
  place_light(piece, seq, before[p], rows);
}

ContentPtr ContentSplit::piece(uint32_t p) const {
  auto out = std::make_shared<KeyContent>();
  out->parts.reserve(shares_.size());
  for (const Share& s : shares_) {
    auto heavy = std::equal_range(s.heavy.begin(), s.heavy.end(), std::make_pair(p, std::make_pair(uint64_t(0), uint64_t(0))),
                                  [](auto& a, auto& b) { return a.first < b.first; });
    const uint64_t light = s.light.empty() ? 0 : s.light[p];
    if (light == 0 && heavy.first == heavy.second) continue;
    Component piece = s.base;
    piece.constraints.reserve(s.constraints.size() + 1);
    piece.constraints = s.constraints;
    add_constraint(piece.constraints, {fn_, p});
    for (auto h = heavy.first; h != heavy.second; ++h) piece.heavy.push_back(h->second);
    s.light_piece(piece, p);
    if (piece.rows()) out->parts.push_back(std::move(piece));
  }
  return out;
}

uint64_t ContentSplit::rows(uint32_t p) const {
  uint64_t n = 0;
  for (const Share& s : shares_) {
    if (!s.light.empty()) n += s.light[p];
    auto heavy = std::equal_range(s.heavy.begin(), s.heavy.end(), std::make_pair(p, std::make_pair(uint64_t(0), uint64_t(0))),
                                  [](auto& a, auto& b) { return a.first < b.first; });
    for (auto h = heavy.first; h != heavy.second; ++h) n += h->second.second;
  }
  return n;
}

bool ContentSplit::absorb_piece(ContentPtr& into, uint32_t p) const {
  // Piece p is one component of light rows only (one share with rows there, none heavy)...
  const Share* only = nullptr;
  for (const Share& s : shares_) {
    const bool heavy = std::any_of(s.heavy.begin(), s.heavy.end(), [&](auto& h) { return h.first == p; });
    if (heavy) return false;
    if (s.light.empty() || s.light[p] == 0) continue;
    if (only) return false;
    only = &s;
  }
  if (!only) return false;
  // ... whose keys and constraints are those of `into`'s one component (absorb_uniform's test).
  scratch_ = only->constraints;
  add_constraint(scratch_, {fn_, p});
  Component y = only->base;  // no constraints, no heavy keys: nothing allocated
  only->light_piece(y, p);
  return absorb_rows(into, y, scratch_);
}

std::vector<ContentPtr> split_content(const KeyContent& c, const PartitionFn& fn) {
  const ContentSplit split(c, fn);
  std::vector<ContentPtr> out;
  out.reserve(fn.fanout());
  for (uint32_t p = 0; p < fn.fanout(); ++p) out.push_back(split.piece(p));
  return out;
}

std::vector<uint64_t> dhondt(const std::vector<uint64_t>& w, uint64_t x) {
  unsigned __int128 sum = 0;
  for (uint64_t v : w) sum += v;
  std::vector<uint64_t> a(w.size(), 0);
  if (sum == 0 || x == 0) return a;
  uint64_t given = 0;
  for (size_t k = 0; k < w.size(); ++k) {  // lower quota: D'Hondt gives at least this
    a[k] = uint64_t((unsigned __int128)x * w[k] / sum);
    given += a[k];
  }
  if (given == x) return a;
  // Fewer than w.size() seats left: each to the largest w / (a + 1), compared exactly, ties to the
  // lower index (a heap: splits of positioned rows call this twice per component).
  auto after = [&](size_t i, size_t j) {  // i's next seat comes after j's
    const unsigned __int128 wi = (unsigned __int128)w[i] * (a[j] + 1), wj = (unsigned __int128)w[j] * (a[i] + 1);
    return wi < wj || (wi == wj && i > j);
  };
  std::vector<size_t> heap;
  for (size_t k = 0; k < w.size(); ++k)
    if (a[k] < w[k]) heap.push_back(k);
  std::make_heap(heap.begin(), heap.end(), after);
  for (; given < x; ++given) {
    std::pop_heap(heap.begin(), heap.end(), after);
    const size_t best = heap.back();
    a[best]++;
    if (a[best] < w[best]) std::push_heap(heap.begin(), heap.end(), after);
    else heap.pop_back();
  }
  return a;
}

namespace {

// Sorted rows [first, end): the pieces they cover, the ones at the ends sliced.
ContentPtr slice_sorted(const KeyOrder& o, uint64_t first, uint64_t end) {
  auto order = std::make_shared<KeyOrder>();
  order->fn = o.fn;
  order->first.push_back(0);
  auto out = std::make_shared<KeyContent>();
  for (size_t i = size_t(std::upper_bound(o.first.begin(), o.first.end(), first) - o.first.begin()) - 1;
       i < o.pieces.size() && o.first[i] < end; ++i) {
    const uint64_t lo = std::max(first, o.first[i]), hi = std::min(end, o.first[i + 1]);
    if (hi <= lo) continue;
    ContentPtr piece = slice_content(o.pieces[i], lo - o.first[i], hi - o.first[i]);
    out->parts.insert(out->parts.end(), piece->parts.begin(), piece->parts.end());  // distinct partitions: no merging
    order->part.push_back(o.part[i]);
    order->pieces.push_back(std::move(piece));
    order->first.push_back(order->first.back() + (hi - lo));
  }
  out->order = std::move(order);
  return out;
}

// The largest key c's rows may hold.
uint64_t largest_key(const KeyContent& c) {
  uint64_t k = 0;
  for (const Component& comp : c.parts) {
    if (comp.light) k = std::max(k, comp.universe->hi);
    if (!comp.heavy.empty()) k = std::max(k, comp.heavy.back().first);
  }
  return k;
}

}  // namespace

namespace {

// The radix function over the top bits of keys up to `top`: 2^12 partitions of at least 64 keys.
PartitionFn order_fn_below(uint64_t top_key) {
  constexpr uint32_t kBits = 12, kMinShift = 6;
  uint32_t top = 0;
  while (top < 64 && (top_key >> top) != 0) ++top;
  return PartitionFn{PartitionFn::Radix, kBits, std::max(top, kBits + kMinShift) - kBits, 0};
}

// Whether fn's partitions are key ranges in key order for keys up to top: a radix function whose
// bits reach above them (or that clamps the larger ones into its last partition).
bool orders_keys(const PartitionFn& fn, uint64_t top) {
  return fn.kind == PartitionFn::Radix && fn.bits &&
         (fn.shift + fn.bits >= 64 || (std::min(top, fn.key_limit) >> (fn.shift + fn.bits)) == 0);
}

const Constraint* constraint_by(const Component& comp, const PartitionFn& fn) {
  for (const Constraint& x : comp.constraints)
    if (same_fn(x.fn, fn)) return &x;
  return nullptr;
}

}  // namespace

PartitionFn order_fn(const KeyContent& c) { return order_fn_below(largest_key(c)); }

ContentPtr sorted_content(const ContentPtr& c, const PartitionFn& buckets) {
  return c->order && (!buckets.bits || same_fn(c->order->fn, buckets)) ? c : merge_sorted({c}, buckets);
}

ContentPtr merge_sorted(const std::vector<ContentPtr>& runs, const PartitionFn& buckets) {
  std::vector<ContentPtr> in;
  uint64_t top = 0;
  for (const ContentPtr& r : runs)
    if (r && r->rows()) in.push_back(r), top = std::max(top, largest_key(*r));
  if (in.empty()) return std::make_shared<KeyContent>();
  const bool given = buckets.bits && orders_keys(buckets, top);
  if (in.size() == 1 && in.front()->order && (!given || same_fn(in.front()->order->fn, buckets))) return in.front();
  PartitionFn fn = given ? buckets : PartitionFn{PartitionFn::Radix, 0, 0, 0};
  if (!given)  // the coarsest ordering function some component went through
    for (const ContentPtr& r : in)
      for (const Component& comp : r->parts)
        for (const Constraint& x : comp.constraints)
          if (orders_keys(x.fn, top) && (!fn.bits || x.fn.shift > fn.shift)) fn = x.fn;
  if (!fn.bits) fn = order_fn_below(top);
  std::map<uint32_t, std::vector<ContentPtr>> by_part;  // every run's rows of each partition
  const bool in_pieces =
      std::all_of(in.begin(), in.end(), [&](const ContentPtr& r) { return r->order && same_fn(r->order->fn, fn); });
  for (const ContentPtr& r : in) {
    if (in_pieces) {
      for (size_t i = 0; i < r->order->pieces.size(); ++i) by_part[r->order->part[i]].push_back(r->order->pieces[i]);
      continue;
    }
    KeyContent rest;  // the run's rows not partitioned by fn yet, split from where they were
    for (const Component& comp : r->parts) {
      if (const Constraint* x = constraint_by(comp, fn)) {
        auto piece = std::make_shared<KeyContent>();
        piece->parts.push_back(comp);
        by_part[x->part].push_back(std::move(piece));
      } else {
        rest.parts.push_back(comp);
      }
    }
    if (rest.parts.empty()) continue;
    const ContentSplit split(rest, fn);
    for (uint32_t p = 0; p < split.fanout(); ++p)
      if (split.rows(p)) by_part[p].push_back(split.piece(p));
  }
  auto order = std::make_shared<KeyOrder>();
  order->fn = fn;
  order->first.push_back(0);
  auto out = std::make_shared<KeyContent>();
  for (auto& [p, pieces] : by_part) {
    order->part.push_back(p);
    order->pieces.push_back(merge_contents(pieces));
    order->first.push_back(order->first.back() + order->pieces.back()->rows());
    const auto& merged = order->pieces.back()->parts;  // pieces of other partitions share no component
    if (in.size() > 1) out->parts.insert(out->parts.end(), merged.begin(), merged.end());
  }
  if (in.size() == 1) out->parts = in.front()->parts;  // a sort: the rows as they were (whole reads alike)
  out->order = std::move(order);
  return out;
}

ContentPtr concat_contents(const std::vector<ContentPtr>& parts) {
  std::vector<const KeyOrder*> orders;
  for (const ContentPtr& c : parts) {
    if (!c || !c->rows()) continue;
    if (!c->order || (!orders.empty() && (!same_fn(c->order->fn, orders.back()->fn) ||
                                          c->order->part.front() < orders.back()->part.back())))
      return merge_contents(parts);
    orders.push_back(c->order.get());
  }
  if (orders.size() < 2) return merge_contents(parts);
  auto order = std::make_shared<KeyOrder>();
  order->fn = orders.front()->fn;
  order->first.push_back(0);
  for (const KeyOrder* o : orders)
    for (size_t i = 0; i < o->pieces.size(); ++i) {
      if (!order->part.empty() && order->part.back() == o->part[i]) {  // a partition the last part ended in
        order->pieces.back() = merge_contents({order->pieces.back(), o->pieces[i]});
        order->first.back() += o->first[i + 1] - o->first[i];
        continue;
      }
      order->part.push_back(o->part[i]);
      order->pieces.push_back(o->pieces[i]);
      order->first.push_back(order->first.back() + (o->first[i + 1] - o->first[i]));
    }
  auto out = std::make_shared<KeyContent>(*merge_contents(parts));
  out->order = std::move(order);
  return out;
}

uint64_t rows_below_key(const KeyOrder& o, uint64_t x) {
  const auto below = std::partition_point(o.part.begin(), o.part.end(),
                                          [&](uint32_t p) { return (uint64_t(p) << o.fn.shift) < x; });
  return o.first[size_t(below - o.part.begin())];
}

ContentPtr slice_content(const ContentPtr& c, uint64_t first, uint64_t end) {
  const uint64_t total = c->rows();
  end = std::min(end, total);
  if (first == 0 && end >= total) return c;
  auto out = std::make_shared<KeyContent>();
  if (end <= first) return out;
  if (c->order) return slice_sorted(*c->order, first, end);
  // Heavy and light rows of each component: 2 weights per component.
  std::vector<uint64_t> w;
  w.reserve(2 * c->parts.size());
  for (auto& comp : c->parts) {
    w.push_back(comp.rows() - comp.light);
    w.push_back(comp.light);
  }
  const std::vector<uint64_t> lo = dhondt(w, first), hi = dhondt(w, end);
  for (size_t i = 0; i < c->parts.size(); ++i) {
    const uint64_t heavy = hi[2 * i] - lo[2 * i], light = hi[2 * i + 1] - lo[2 * i + 1];
    if (heavy + light == 0) continue;
    const Component& comp = c->parts[i];
    Component s;
    s.universe = comp.universe;
    s.constraints = comp.constraints;
    s.light_zipf = comp.light_zipf;
    if (light) place_light(s, comp, sequence_at(comp) + lo[2 * i + 1], light);
    if (heavy) {  // the heavy rows [a, b) of the component's, key by key
      std::vector<uint64_t> hw;
      for (auto& h : comp.heavy) hw.push_back(h.second);
      const std::vector<uint64_t> a = dhondt(hw, lo[2 * i]), b = dhondt(hw, hi[2 * i]);
      for (size_t k = 0; k < comp.heavy.size(); ++k)
        if (b[k] > a[k]) s.heavy.push_back({comp.heavy[k].first, b[k] - a[k]});
    }
    out->parts.push_back(std::move(s));
  }
  return out;
}

ContentPtr merge_contents(const std::vector<ContentPtr>& parts) {
  if (parts.size() == 1) return parts.front();
  auto out = std::make_shared<KeyContent>();
  for (auto& c : parts) {
    if (!c) continue;
    for (auto& comp : c->parts) {
      Component* into = nullptr;
      for (auto& o : out->parts)
        if (same_universe(*o.universe, *comp.universe) && o.constraints.size() == comp.constraints.size() &&
            joins_light(o, comp) &&
            std::equal(o.constraints.begin(), o.constraints.end(), comp.constraints.begin(),
                       [](const Constraint& a, const Constraint& b) { return same_fn(a.fn, b.fn) && a.part == b.part; })) {
          into = &o;
          break;
        }
      if (!into) {
        out->parts.push_back(comp);
        continue;
      }
      add_light(*into, comp);
      if (comp.heavy.empty()) continue;
      std::vector<std::pair<uint64_t, uint64_t>> merged;
      merged.reserve(into->heavy.size() + comp.heavy.size());
      size_t a = 0, b = 0;
      while (a < into->heavy.size() || b < comp.heavy.size()) {
        if (b == comp.heavy.size() || (a < into->heavy.size() && into->heavy[a].first < comp.heavy[b].first)) {
          merged.push_back(into->heavy[a++]);
        } else if (a == into->heavy.size() || comp.heavy[b].first < into->heavy[a].first) {
          merged.push_back(comp.heavy[b++]);
        } else {
          merged.push_back({into->heavy[a].first, into->heavy[a].second + comp.heavy[b].second});
          ++a;
          ++b;
        }
      }
      into->heavy = std::move(merged);
    }
  }
  return out;
}


bool absorb_uniform(ContentPtr& into, const KeyContent& b) {
  return b.parts.size() == 1 && absorb_rows(into, b.parts.front(), b.parts.front().constraints);
}

namespace {
// Sorted rows as the union of their order's pieces. A piece is a whole partition of every run that
// went into the sort, its cover exact; the components from before the sort are each run's own
// (a rank's slice), whose joins are estimated from densities.
KeyContent pieces_of(const KeyContent& c) {
  if (!c.order) return c;
  KeyContent out;
  for (const ContentPtr& p : c.order->pieces) out.parts.insert(out.parts.end(), p->parts.begin(), p->parts.end());
  return out;
}
}  // namespace

double expected_matches(const KeyContent& r, const KeyContent& s) {
  if (r.order || s.order) return expected_matches(pieces_of(r), pieces_of(s));
  // Light-row densities of each component, once.
  // A relation's unique keys: their share of the relation (exactly 1 for a whole partition).
  auto densities = [](const KeyContent& c) {
    std::vector<double> d;
    d.reserve(c.parts.size());
    for (auto& x : c.parts) {
      if (x.cover && x.universe->size > 0) {
        d.push_back(double(x.cover) / x.universe->size);
        continue;
      }
      const double n = universe_count(*x.universe, x.constraints);
      d.push_back(n > 0 ? double(x.light) / n : 0);
    }
    return d;
  };
  const std::vector<double> dr = densities(r), ds = densities(s);
  auto pair = [&](size_t i, size_t j) {
    const Component& a = r.parts[i];
    const Component& b = s.parts[j];
    const double da = dr[i], db = ds[j];
    double total = 0;
    std::vector<Constraint> both = a.constraints;
    bool consistent = true;
    for (auto& c : b.constraints) consistent = add_constraint(both, c) && consistent;
    if (consistent && da > 0 && db > 0) {
      // Same keys, and one side's constraints are all of them: every row of that side lies in
      // the intersection, so it meets the other's density without the estimate of the
      // intersection's size (a PK-FK join counts exactly the rows of its hits).
      if (same_universe(*a.universe, *b.universe) && a.cover && both.size() == b.constraints.size())
        total += da * double(b.light);
      else if (same_universe(*a.universe, *b.universe) && b.cover && both.size() == a.constraints.size())
        total += db * double(a.light);
      else
        total += da * db * intersection_count(*a.universe, *b.universe, both);
    }
    for (auto& [key, n] : a.heavy)
      if (db > 0 && satisfies(key, b.constraints)) total += double(n) * db * member_weight(*b.universe, key);
    for (auto& [key, n] : b.heavy)
      if (da > 0 && satisfies(key, a.constraints)) total += double(n) * da * member_weight(*a.universe, key);
    size_t x = 0, y = 0;  // heavy x heavy: both lists sorted by key
    while (x < a.heavy.size() && y < b.heavy.size()) {
      if (a.heavy[x].first < b.heavy[y].first) {
        ++x;
      } else if (b.heavy[y].first < a.heavy[x].first) {
        ++y;
      } else {
        total += double(a.heavy[x].second) * double(b.heavy[y].second);
        ++x;
        ++y;
      }
    }
    return total;
  };
  double total = 0;
  if (r.parts.size() * s.parts.size() <= 256) {
    for (size_t i = 0; i < r.parts.size(); ++i)
      for (size_t j = 0; j < s.parts.size(); ++j) total += pair(i, j);
    return total;
  }
  // Co-partitioned contents (a partitioned join's sides) have thousands of components, each
  // meeting only those of the same partitions: a pair whose constraints put the same function
  // on different partitions holds no common key (every term above is 0), so only the S
  // components with r's first constraint's partition, or without that function, are visited.
  struct Index {
    std::map<uint32_t, std::vector<size_t>> with;  // by partition
    std::vector<size_t> without;
  };
  std::map<decltype(fn_tuple(PartitionFn{})), Index> indexes;
  auto index_of = [&](const PartitionFn& fn) -> const Index& {
    auto key = fn_tuple(fn);
    auto it = indexes.find(key);
    if (it != indexes.end()) return it->second;
    Index& idx = indexes[key];
    for (size_t j = 0; j < s.parts.size(); ++j) {
      const Constraint* hit = nullptr;
      for (auto& c : s.parts[j].constraints)
        if (same_fn(c.fn, fn)) hit = &c;
      if (hit) idx.with[hit->part].push_back(j);
      else idx.without.push_back(j);
    }
    return idx;
  };
  for (size_t i = 0; i < r.parts.size(); ++i) {
    const Component& a = r.parts[i];
    if (a.constraints.empty()) {
      for (size_t j = 0; j < s.parts.size(); ++j) total += pair(i, j);
      continue;
    }
    const Index& idx = index_of(a.constraints.front().fn);
    auto hit = idx.with.find(a.constraints.front().part);
    if (hit != idx.with.end())
      for (size_t j : hit->second) total += pair(i, j);
    for (size_t j : idx.without) total += pair(i, j);
  }
  return total;
}

KeyAccess key_access(const KeyContent& c) {
  KeyAccess a;
  for (auto& comp : c.parts) {
    for (auto& h : comp.heavy) {
      a.heavy.push_back(double(h.second));
      a.max_key = std::max(a.max_key, double(h.first));
    }
    const double keys = comp.light ? universe_count(*comp.universe, comp.constraints) : 0;
    if (keys > 0) {
      a.tails.push_back({double(comp.light), keys, comp.light_zipf, double(comp.heavy.size()) + 1});
      // Light rows spread over their universe (restricted by partitionings, whose keys still
      // reach its top): the MSD sort plans its bits from that range, not from their count.
      a.max_key = std::max(a.max_key, double(comp.universe->hi));
    }
  }
  return a;
}

std::vector<std::vector<uint64_t>> content_sample(const KeyContent& c, size_t windows, size_t window_rows) {
  std::vector<std::vector<uint64_t>> out;
  const uint64_t total = c.rows();
  if (!total || !windows || !window_rows) return out;
  const size_t want = size_t(std::min<uint64_t>(uint64_t(windows) * window_rows, total));
  // Components of one generated relation are regenerated together (a foreign key's hits and
  // misses are the same rows): one share per source, or per component without one.
  std::vector<const Component*> heads;
  std::vector<double> weight;
  for (const Component& comp : c.parts) {
    size_t i = 0;
    while (i < heads.size() && !(comp.source && heads[i]->source == comp.source)) ++i;
    if (i == heads.size()) heads.push_back(&comp), weight.push_back(0);
    weight[i] += double(comp.rows());
  }
  const std::vector<uint64_t> share = apportion(weight, want);
  constexpr uint64_t kScanRows = uint64_t(1) << 16;  // rows generated per window at most
  for (size_t i = 0; i < heads.size(); ++i) {
    const Component& comp = *heads[i];
    const uint64_t n = share[i];
    if (!n) continue;
    if (comp.source) {  // windows of consecutive rows, spread evenly over the source's rows
      const GeneratedRows& g = *comp.source;
      const uint64_t k = std::max<uint64_t>(1, std::min<uint64_t>(windows, (n + window_rows - 1) / window_rows));
      const uint64_t per = (n + k - 1) / k;
      for (uint64_t w = 0; w < k; ++w) {
        const uint64_t first = g.first_row + (k > 1 && g.rows > kScanRows ? w * (g.rows - kScanRows) / (k - 1) : 0);
        const uint64_t end = std::min(g.first_row + g.rows, first + kScanRows);
        std::vector<uint64_t> win;
        g.gen.for_each_key(first, end, [&](uint64_t, uint64_t key) {
          if (win.size() < per && satisfies(key, comp.constraints)) win.push_back(key);
        });
        if (!win.empty()) out.push_back(std::move(win));
        if (g.rows <= kScanRows) break;  // one window held every row
      }
      continue;
    }
    // Drawn from the distribution in random order: heavy keys by their rows, light rows from the
    // universe.
    const KeyUniverse& u = *comp.universe;
    const double heavy_rows = double(comp.rows() - comp.light);
    const uint64_t seed = mix64(u.id ^ 0x636f646563ULL ^ comp.rows());
    std::vector<uint64_t> drawn;
    for (uint64_t tries = 0; drawn.size() < n && tries < 64 * n; ++tries) {
      const uint64_t r = random_word(seed, 1, tries);
      if (unit_double(random_word(seed, 2, tries)) * double(comp.rows()) < heavy_rows) {
        uint64_t at = r % uint64_t(heavy_rows);  // the heavy key holding that row
        size_t h = 0;
        while (at >= comp.heavy[h].second) at -= comp.heavy[h++].second;
        drawn.push_back(comp.heavy[h].first);
        continue;
      }
      uint64_t key;
      if (u.kind == KeyUniverse::Interval) key = u.hi >= u.lo ? u.lo + r % (u.hi - u.lo + 1) : u.lo;
      else if (u.exact_members && u.members.rows) key = u.members.key(r % u.members.rows);
      else key = u.hi ? r % u.hi : r;
      if (satisfies(key, comp.constraints)) drawn.push_back(key);
    }
    for (size_t at = 0; at < drawn.size(); at += window_rows)
      out.emplace_back(drawn.begin() + at, drawn.begin() + std::min(drawn.size(), at + window_rows));
  }
  return out;
}

uint64_t sample_shape(const KeyContent& c, bool exact) {
  if (c.order) return 0;
  uint64_t h = mix64(c.parts.size() + 0x5a3e);
  auto add = [&h](uint64_t x) { h = mix64(h ^ x); };
  for (const Component& comp : c.parts) {
    if (comp.source) {
      const KeyGen& g = comp.source->gen;
      add(g.dist), add(g.key_bytes), add(g.rows), add(g.seed), add(g.ref_dist);
      if (exact) add(comp.source->first_row), add(comp.source->rows);
    } else {
      add(comp.universe ? comp.universe->id : 0), add(comp.universe ? comp.universe->hi : 0);
    }
    for (const Constraint& k : comp.constraints) {
      add(k.fn.kind), add(k.fn.bits), add(k.fn.shift), add(k.fn.seed);
      if (exact || k.fn.kind == PartitionFn::Radix) add(k.part);  // a radix partition is a key range of its own
    }
    add(comp.heavy.size());
    for (const auto& [key, rows] : comp.heavy) add(key);
    add(uint64_t(comp.light_zipf * 1e6));
    if (exact) add(comp.light), add(comp.at), add(comp.of);
  }
  return h | 1;
}

}  // namespace joinlab::sim
