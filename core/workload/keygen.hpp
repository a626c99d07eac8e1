// Position-addressable key and payload generation, written once for CPU and CUDA (JL_HD).
// key(i) depends only on (spec, i): any rank generates any slice, and the same seed gives the
// same relation whatever the rank count. Unique generators are invertible (row_of_key), which
// is what makes closed-form verification of primary-key/foreign-key joins cheap.
#pragma once
#include <cmath>
#include <cstdint>

#include "core/common/hd.hpp"
#include "core/workload/tpch.hpp"

namespace joinlab {

constexpr uint64_t kEmptyKey64 = ~0ULL;  // reserved: never generated, marks empty hash slots
constexpr uint32_t kEmptyKey32 = ~0U;

// Random permutation of [0, n): a 4-round balanced Feistel network on the next even power of
// two, restricted to [0, n) by cycle walking (expected < 4 steps).
struct FeistelPerm {
  uint64_t n = 1;
  uint32_t half_bits = 1;
  uint64_t keys[4] = {0, 0, 0, 0};

  JL_HD uint64_t round_fn(uint64_t x, int r) const {
    return mix64(x ^ keys[r]) & ((1ULL << half_bits) - 1);
  }
  JL_HD uint64_t encrypt(uint64_t x) const {
    uint64_t mask = (1ULL << half_bits) - 1;
    uint64_t l = x >> half_bits, r = x & mask;
    for (int k = 0; k < 4; ++k) { uint64_t t = r; r = l ^ round_fn(r, k); l = t; }
    return (l << half_bits) | r;
  }
  JL_HD uint64_t decrypt(uint64_t x) const {
    uint64_t mask = (1ULL << half_bits) - 1;
    uint64_t l = x >> half_bits, r = x & mask;
    for (int k = 3; k >= 0; --k) { uint64_t t = l; l = r ^ round_fn(l, k); r = t; }
    return (l << half_bits) | r;
  }
  JL_HD uint64_t operator()(uint64_t i) const {
    uint64_t x = encrypt(i);
    while (x >= n) x = encrypt(x);
    return x;
  }
  JL_HD uint64_t inverse(uint64_t y) const {
    uint64_t x = decrypt(y);
    while (x >= n) x = decrypt(x);
    return x;
  }
  static FeistelPerm make(uint64_t n, uint64_t seed) {
    FeistelPerm p;
    p.n = n < 1 ? 1 : n;
    uint32_t bits = 2;
    while (bits < 64 && (1ULL << bits) < p.n) ++bits;
    p.half_bits = (bits + 1) / 2;
    for (int k = 0; k < 4; ++k) p.keys[k] = mix64(seed + 0x1000 * (k + 1));
    return p;
  }
};

// Zipf(z) over ranks 1..n by rejection-inversion (Hoermann & Derflinger 1996), O(1) expected
// per sample for every z > 0 (z = 1 included); z = 0 is plain uniform.
struct ZipfSampler {
  double z = 0, n = 1, h_x1 = 0, h_n = 0, s = 0;

  JL_HD static double helper1(double x) {
    return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
  }
  JL_HD static double helper2(double x) {
    return fabs(x) > 1e-8 ? expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
  }
  JL_HD double h(double x) const { return exp(-z * log(x)); }
  JL_HD double h_integral(double x) const {
    double lx = log(x);
    return helper2((1.0 - z) * lx) * lx;
  }
  JL_HD double h_integral_inverse(double x) const {
    double t = x * (1.0 - z);
    if (t < -1.0) t = -1.0;
    return exp(helper1(t) * x);
  }
  // Rank in [1, n] from the counter-based stream (seed, stream, index).
  JL_HD uint64_t sample(uint64_t seed, uint64_t stream, uint64_t index) const {
    if (z == 0.0) return 1 + uint64_t(unit_double(random_word(seed, stream, index)) * n);
    for (uint64_t attempt = 0;; ++attempt) {
      double u01 = unit_double(random_word(seed, stream + (attempt << 40), index));
      double u = h_n + u01 * (h_x1 - h_n);
      double x = h_integral_inverse(u);
      double kf = floor(x + 0.5);
      if (kf < 1) kf = 1; else if (kf > n) kf = n;
      if (kf - x <= s || u >= h_integral(kf + 0.5) - h(kf)) return uint64_t(kf);
    }
  }
  static ZipfSampler make(double z, uint64_t n) {
    ZipfSampler zs;
    zs.z = z;
    zs.n = double(n);
    if (z > 0) {
      zs.h_x1 = zs.h_integral(1.5) - 1.0;
      zs.h_n = zs.h_integral(double(n) + 0.5);
      zs.s = 2.0 - zs.h_integral_inverse(zs.h_integral(2.5) - zs.h(2.0));
    }
    return zs;
  }
};

// Everything one relation's generator needs, flattened into a POD that kernels take by value.
struct KeyGen {
  uint8_t dist = 0;        // KeyDist
  uint8_t key_bytes = 4;
  uint64_t rows = 0;
  uint64_t seed = 0;       // already salted with the relation's name
  FeistelPerm perm;        // UniqueDense (over rows), Zipf (over domain)
  uint64_t lo = 0, span = 1;  // Uniform
  ZipfSampler zipf;        // Zipf ranks, or ForeignKey skew over referenced rows
  bool fk_skewed = false;
  uint64_t match_threshold = 0;  // ForeignKey: row matches iff word < threshold (or always)
  bool match_all = true;
  // ForeignKey: the referenced (unique) relation's generator parameters.
  uint8_t ref_dist = 0;
  uint64_t ref_rows = 0, ref_seed = 0;
  FeistelPerm ref_perm;
  tpch::LineitemIndex lineitems;  // TpchLineitem: where each block of rows starts (host memory)

  // --- unique generators (also used for the referenced side of a foreign key) ---
  JL_HD static uint64_t sparse_key(uint64_t i, uint64_t seed, uint8_t key_bytes) {
    if (key_bytes == 4) {
      uint32_t s = uint32_t(seed), y = mix32(uint32_t(i) ^ s);
      while (y == kEmptyKey32) y = mix32(y ^ s);
      return y;
    }
    uint64_t y = mix64(i ^ seed);
    while (y == kEmptyKey64) y = mix64(y ^ seed);
    return y;
  }
  JL_HD static uint64_t sparse_row(uint64_t key, uint64_t seed, uint8_t key_bytes) {
    if (key_bytes == 4) {
      uint32_t s = uint32_t(seed), x = unmix32(uint32_t(key)) ^ s;
      while (x == kEmptyKey32) x = unmix32(x) ^ s;
      return x;
    }
    uint64_t x = unmix64(key) ^ seed;
    while (x == kEmptyKey64) x = unmix64(x) ^ seed;
    return x;
  }
  JL_HD static uint64_t unique_key(uint8_t dist, uint64_t i, const FeistelPerm& perm, uint64_t seed,
                                   uint8_t key_bytes) {
    return dist == 0 /*UniqueDense*/ ? 1 + perm(i) : sparse_key(i, seed, key_bytes);
  }

  // Key of global row i.
  JL_HD uint64_t key(uint64_t i) const {
    switch (dist) {
      case 0: return 1 + perm(i);
      case 1: return sparse_key(i, seed, key_bytes);
      case 2: return lo + random_word(seed, 2, i) % span;
      case 3: return 1 + perm(zipf.sample(seed, 3, i) - 1);
      case 5: return tpch::order_key(i + 1);
      case 6: return kEmptyKey64;  // TpchLineitem: rows come in blocks (for_each_key), not one by one
      default: {  // ForeignKey
        bool hit = match_all || random_word(seed, 1, i) < match_threshold;
        if (hit) {
          uint64_t pos = fk_skewed ? zipf.sample(seed, 4, i) - 1
                                   : random_word(seed, 4, i) % ref_rows;
          return unique_key(ref_dist, pos, ref_perm, ref_seed, key_bytes);
        }
        // A key guaranteed absent from the referenced relation.
        uint64_t w = random_word(seed, 5, i);
        if (ref_dist == 0) return ref_rows + 1 + w % span;  // dense keys are 1..ref_rows
        return sparse_key(ref_rows + w % span, ref_seed, key_bytes);
      }
    }
  }
  // ForeignKey: how many of rows [first, first + n) reference a row of the referenced relation
  // (the others hold keys absent from it). One word per row, no key: the exact match count of a
  // join with the unique referenced side, for verification and the simulator alike.
  uint64_t hits(uint64_t first, uint64_t n) const {
    if (match_all) return n;
    uint64_t h = 0;
    for (uint64_t i = first; i < first + n; ++i) h += random_word(seed, 1, i) < match_threshold;
    return h;
  }
  // Calls visit(row, key) for rows [first, end) in order: a tpch_lineitem block from a cursor at
  // its first row (each row follows its order's), other distributions row by row. Host only.
  template <class Visit>
  void for_each_key(uint64_t first, uint64_t end, Visit&& visit) const {
    if (dist == 6 && first < end) {
      tpch::LineitemCursor c = lineitems.cursor(first);
      for (uint64_t row = first; row < end; ++row, c.next()) visit(row, c.key());
      return;
    }
    for (uint64_t row = first; row < end; ++row) visit(row, key(row));
  }
  // For unique relations: the row holding `key`, or ~0 if no row does.
  JL_HD uint64_t row_of_key(uint64_t key) const {
    if (dist == 0) {
      if (key == 0 || key > rows) return ~0ULL;
      return perm.inverse(key - 1);
    }
    if (dist == 5) {
      const uint64_t order = tpch::order_of_key(key);
      return order && order <= rows ? order - 1 : ~0ULL;
    }
    uint64_t r = sparse_row(key, seed, key_bytes);
    return r < rows ? r : ~0ULL;
  }
};

// Payload column c of global row i: a random word cut to the column width.
JL_HD uint64_t payload_value(uint64_t rel_seed, int column, uint64_t row, uint8_t bytes) {
  uint64_t w = random_word(rel_seed, 100 + uint64_t(column), row);
  return bytes == 4 ? (w & 0xffffffffULL) : w;
}

}  // namespace joinlab
