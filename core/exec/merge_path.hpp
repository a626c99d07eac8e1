// Merge-path cuts of two key-sorted relations on the host (Green, McColl, Bader 2012; the join of
// maltenberger2025 cuts its merged relations this way). Host functions over arrays the host can
// read (pinned memory), not GPU operators: O(log n) binary searches per cut.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/exec/tuples.hpp"

namespace joinlab {

// A cut of R and S: R rows [0, r) and S rows [0, s) lie before it.
struct CoRank {
  uint64_t r = 0, s = 0;
  uint64_t rows() const { return r + s; }
  bool operator==(const CoRank& o) const { return r == o.r && s == o.s; }
};

// The co-ranks of diagonal d <= na + nb: the cut (i, d - i) such that a[0, i) and b[0, d - i) are
// the first d rows of the stable merge of a and b (a's rows first among equal keys).
template <class K>
CoRank co_rank(const K* a, uint64_t na, const K* b, uint64_t nb, uint64_t d) {
  uint64_t lo = d > nb ? d - nb : 0, hi = std::min(d, na);
  while (lo < hi) {  // a[mid] goes before b[d - 1 - mid]: more than mid rows of a
    const uint64_t mid = lo + (hi - lo) / 2;
    if (a[mid] <= b[d - 1 - mid]) lo = mid + 1;
    else hi = mid;
  }
  return {lo, d - lo};
}

// The first key at or after cut c (the smaller of a[c.r] and b[c.s]); c must not be the end.
template <class K>
K key_after(const K* a, uint64_t na, const K* b, uint64_t nb, CoRank c) {
  if (c.r < na && (c.s >= nb || a[c.r] <= b[c.s])) return a[c.r];
  return b[c.s];
}

// The cut of diagonal d moved to a key boundary: when the key after the cut also has rows before
// it (on either side), the cut moves back to that key's first row on both sides, so that the key's
// R and S rows lie wholly after it. Every key's rows then fall on one side of every cut.
template <class K>
CoRank key_cut(const K* a, uint64_t na, const K* b, uint64_t nb, uint64_t d) {
  CoRank c = co_rank(a, na, b, nb, d);
  if (c.r == na && c.s == nb) return c;
  const K x = key_after(a, na, b, nb, c);
  // Keys below x all lie before the cut (merge order), so x's first rows are found below it.
  return {uint64_t(std::lower_bound(a, a + c.r, x) - a), uint64_t(std::lower_bound(b, b + c.s, x) - b)};
}

// The cut just after the key that starts at cut c (c must be a key boundary, not the end).
template <class K>
CoRank key_end(const K* a, uint64_t na, const K* b, uint64_t nb, CoRank c) {
  const K x = key_after(a, na, b, nb, c);
  return {uint64_t(std::upper_bound(a + c.r, a + na, x) - a), uint64_t(std::upper_bound(b + c.s, b + nb, x) - b)};
}

// One piece of a join: R rows [r_first, r_first + r_rows) with S rows [s_first, s_first + s_rows).
struct JoinPiece {
  uint64_t r_first = 0, r_rows = 0, s_first = 0, s_rows = 0;
  uint64_t rows() const { return r_rows + s_rows; }
};

// The merge-path parts of a join of key-sorted R and S: at least min_parts parts of near-equal
// R + S rows and at most max_rows (>= 2) each, cut at key boundaries (key_cut), so each key's
// R x S is joined in exactly one part. A key whose rows alone exceed max_rows is split into a grid
// of pieces (its R rows in pieces against its S rows in pieces, each piece pair at most max_rows):
// every (R row, S row) pair of it lies in exactly one piece. Pieces with no R or no S rows (they
// join nothing) are left out. Throws RuntimeError when max_rows < 2.
std::vector<JoinPiece> merge_path_parts(const Tuples& r, const Tuples& s, uint64_t min_parts, uint64_t max_rows);
// The same parts over key boundaries known without the keys: cuts ascending on both sides, from
// {0, 0} to {|R|, |S|}, every key's rows between two consecutive cuts (the simulator's sorted
// contents, whose boundaries are their pieces').
std::vector<JoinPiece> merge_path_parts(const std::vector<CoRank>& cuts, uint64_t min_parts, uint64_t max_rows);

}  // namespace joinlab
