#include "core/exec/merge_path.hpp"

#include "core/common/error.hpp"
#include "core/common/key_width.hpp"

namespace joinlab {

namespace {

// A key's rows [from, to) too many for one part: its R rows in pieces against its S rows in
// pieces, each pair at most max_rows (the R pieces take half and the S pieces the rest; a short
// side is taken whole and the other side's pieces fill the rest).
void split_key(CoRank from, CoRank to, uint64_t max_rows, std::vector<JoinPiece>& out) {
  const uint64_t nr = to.r - from.r, ns = to.s - from.s;
  if (!nr || !ns) return;
  uint64_t pr = std::min(nr, max_rows / 2);
  const uint64_t ps = std::min(ns, max_rows - pr);
  if (ps == ns) pr = std::min(nr, max_rows - ps);
  for (uint64_t a = 0; a < nr; a += pr)
    for (uint64_t b = 0; b < ns; b += ps)
      out.push_back({from.r + a, std::min(pr, nr - a), from.s + b, std::min(ps, ns - b)});
}

void check_max_rows(uint64_t max_rows) {
  if (max_rows < 2)
    throw RuntimeError("merge-path parts: a part of " + std::to_string(max_rows) +
                       " rows cannot hold an R row and an S row (at least 2 needed)");
}

// The parts of R and S (na and nb rows) over their key boundaries: key_cut(d) is the last boundary
// at or before diagonal d, key_end(c) the first after boundary c.
template <class KeyCut, class KeyEnd>
std::vector<JoinPiece> parts_of(uint64_t na, uint64_t nb, uint64_t min_parts, uint64_t max_rows, KeyCut key_cut,
                                KeyEnd key_end) {
  const uint64_t total = na + nb;
  // At least min_parts, and enough that none is over max_rows before the cuts move to key boundaries.
  const uint64_t want = std::max<uint64_t>({min_parts, (total + max_rows - 1) / max_rows, 1});
  std::vector<JoinPiece> out;
  CoRank at;
  for (uint64_t made = 0; at.rows() < total; ++made) {
    // An equal share of what is left, at most max_rows: the cuts moved back keep later parts small.
    const uint64_t left = want > made ? want - made : 1;
    const uint64_t share = std::min((total - at.rows() + left - 1) / left, max_rows);
    CoRank next = key_cut(at.rows() + share);
    // The key after `at` reaches past the share: the most that fits, else that key on its own.
    if (next.rows() <= at.rows()) next = key_cut(std::min(at.rows() + max_rows, total));
    if (next.rows() <= at.rows()) {
      next = key_end(at);
      split_key(at, next, max_rows, out);
    } else if (next.r > at.r && next.s > at.s) {
      out.push_back({at.r, next.r - at.r, at.s, next.s - at.s});
    }
    at = next;
  }
  return out;
}

}  // namespace

std::vector<JoinPiece> merge_path_parts(const Tuples& r, const Tuples& s, uint64_t min_parts, uint64_t max_rows) {
  check_max_rows(max_rows);
  if (r.fmt.key_bytes != s.fmt.key_bytes)
    throw RuntimeError("merge-path parts: R keys are " + std::to_string(r.fmt.key_bytes) + " bytes, S keys " +
                       std::to_string(s.fmt.key_bytes));
  std::vector<JoinPiece> out;
  with_width(r.fmt.key_bytes, "merge-path parts: key", [&](auto k) {
    using K = decltype(k);
    if ((r.rows && !r.key_ptr<K>()) || (s.rows && !s.key_ptr<K>()))
      throw RuntimeError("merge-path parts: the keys are not readable by the host (no data)");
    const K *a = r.key_ptr<K>(), *b = s.key_ptr<K>();
    const uint64_t na = r.rows, nb = s.rows;
    out = parts_of(
        na, nb, min_parts, max_rows, [&](uint64_t d) { return key_cut(a, na, b, nb, d); },
        [&](CoRank c) { return key_end(a, na, b, nb, c); });
  });
  return out;
}

std::vector<JoinPiece> merge_path_parts(const std::vector<CoRank>& cuts, uint64_t min_parts, uint64_t max_rows) {
  check_max_rows(max_rows);
  if (cuts.empty()) return {};
  auto after = [&](uint64_t d) {  // the first cut past diagonal d
    return std::upper_bound(cuts.begin(), cuts.end(), d, [](uint64_t x, const CoRank& c) { return x < c.rows(); });
  };
  return parts_of(
      cuts.back().r, cuts.back().s, min_parts, max_rows, [&](uint64_t d) { return *std::prev(after(d)); },
      [&](CoRank c) { return *after(c.rows()); });
}

}  // namespace joinlab
