// m:n merge join of two key-sorted inputs. The larger side is cut into ranges at key changes
// (so no run of equal keys is split); each range finds its counterpart on the other side by
// binary search and is merged on its own.
#include <algorithm>

#include "kernels/cpu/join_emit.hpp"

namespace joinlab::cpu {

namespace {

// Merges R rows [rb, re) with S rows [sb, se), emitting the cross product of every equal run.
template <class K, class VR, class VS, class Emit>
void merge_ranges(const K* rk, const VR* rv, uint64_t rb, uint64_t re, const K* sk, const VS* sv,
                  uint64_t sb, uint64_t se, Emit& emit) {
  uint64_t i = rb, j = sb;
  while (i < re && j < se) {
    const K a = rk[i], b = sk[j];
    if (a < b) {
      ++i;
    } else if (b < a) {
      ++j;
    } else {
      uint64_t ie = i + 1, je = j + 1;
      while (ie < re && rk[ie] == a) ++ie;
      while (je < se && sk[je] == a) ++je;
      for (uint64_t x = i; x < ie; ++x)
        for (uint64_t y = j; y < je; ++y) emit(a, rv[x], sv[y]);
      i = ie;
      j = je;
    }
  }
}

// Cut points of `keys` into about `parts` ranges, moved forward to the next key change.
template <class K>
std::vector<uint64_t> cut_at_key_changes(const K* keys, uint64_t rows, uint64_t parts) {
  std::vector<uint64_t> cuts{0};
  for (uint64_t p = 1; p < parts; ++p) {
    uint64_t c = std::max(split(rows, parts, p).begin, cuts.back());
    while (c > 0 && c < rows && keys[c] == keys[c - 1]) ++c;
    if (c > cuts.back() && c < rows) cuts.push_back(c);
  }
  cuts.push_back(rows);
  return cuts;
}

}  // namespace

template <class K, class VR, class VS>
JoinCount merge_join(const K* r_keys, const VR* r_vals, uint64_t r_rows, const K* s_keys,
                     const VS* s_vals, uint64_t s_rows, const JoinSink<K, VR, VS>& out, int threads) {
  const bool cut_s = s_rows >= r_rows;
  const K* big = cut_s ? s_keys : r_keys;
  const K* other = cut_s ? r_keys : s_keys;
  const uint64_t big_rows = cut_s ? s_rows : r_rows, other_rows = cut_s ? r_rows : s_rows;
  const uint64_t parts = std::max<uint64_t>(1, std::min<uint64_t>(uint64_t(std::max(threads, 1)) * 8,
                                                                  big_rows / 4096));
  const std::vector<uint64_t> cuts = cut_at_key_changes(big, big_rows, parts);
  // Matching range of the other side: from the first key >= the range's first key to the first
  // key >= the next range's first key.
  auto other_at = [&](uint64_t cut) -> uint64_t {
    if (cut >= big_rows) return other_rows;
    return uint64_t(std::lower_bound(other, other + other_rows, big[cut]) - other);
  };
  return run_join_tasks(cuts.size() - 1, out, threads, [&](uint64_t t, auto& emit) {
    const uint64_t bb = cuts[t], be = cuts[t + 1];
    const uint64_t ob = other_at(bb), oe = other_at(be);
    if (cut_s)
      merge_ranges(r_keys, r_vals, ob, oe, s_keys, s_vals, bb, be, emit);
    else
      merge_ranges(r_keys, r_vals, bb, be, s_keys, s_vals, ob, oe, emit);
  });
}

#define JL_INSTANTIATE_MJOIN(K, VR, VS)                                                      \
  template JoinCount merge_join<K, VR, VS>(const K*, const VR*, uint64_t, const K*, const VS*, \
                                           uint64_t, const JoinSink<K, VR, VS>&, int);
JL_FOR_EACH_JOIN(JL_INSTANTIATE_MJOIN)

}  // namespace joinlab::cpu
