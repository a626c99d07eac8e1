// MultiwayMergeOp on CPU threads: libstdc++ parallel mode's multisequence partitioning
// (__gnu_parallel::multiseq_partition, the splitter search of __gnu_parallel::multiway_merge)
// cuts the output into one slice per thread and finds where each run enters each slice; every
// thread then merges its slice (branch-free up to 8 runs, by a heap beyond). Keys and values stay
// in their own arrays (no temporary (key, value) pairs, which __gnu_parallel::multiway_merge itself
// would need).
#include <parallel/algorithm>  // parallel mode's base headers, which multiseq_selection.h assumes
#include <parallel/multiseq_selection.h>

#include <algorithm>
#include <functional>
#include <queue>
#include <utility>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"

namespace joinlab::cpu {

namespace {

// Rows of runs [0, k) before output row `rank`: each run's offset, summing to rank.
template <class K, class V>
std::vector<uint64_t> cut(const std::vector<ChunkIn<K, V>>& runs, uint64_t rank, uint64_t total) {
  std::vector<uint64_t> at(runs.size(), 0);
  if (rank == 0) return at;
  if (rank >= total) {
    for (size_t i = 0; i < runs.size(); ++i) at[i] = runs[i].rows;
    return at;
  }
  // The search wants non-empty sequences (empty runs are left out: their offset stays 0) and
  // mutable iterators (it only reads through them).
  std::vector<std::pair<K*, K*>> seqs;
  std::vector<size_t> which;
  for (size_t i = 0; i < runs.size(); ++i)
    if (runs[i].rows) {
      K* k = const_cast<K*>(runs[i].keys);
      seqs.push_back({k, k + runs[i].rows});
      which.push_back(i);
    }
  std::vector<K*> pos(seqs.size());
  __gnu_parallel::multiseq_partition(seqs.begin(), seqs.end(), int64_t(rank), pos.begin(), std::less<K>());
  for (size_t j = 0; j < seqs.size(); ++j) at[which[j]] = uint64_t(pos[j] - seqs[j].first);
  return at;
}

// Up to this many runs, a thread takes rows without branches (merge_branch_free); beyond, it
// finds the smallest head by a heap. Random keys of 2 runs alternate about every row, where a
// heap's pop and push per row made the merge 14 GB/s on 32 threads, and a scan of the heads with
// a branch per row, mispredicted about every other row, 115 M rows/s on one core of this
// project's EPYC (195 branch-free; 3 runs 77 -> 123, 4 runs 59 -> 105).
constexpr size_t kBranchFreeRuns = 8;

// The rows of `run` from row j into out from row o, up to the next head `limit` of the other runs
// (and past equal keys where this run goes first among them), or up to `end` where no other run has
// rows left (limit null): a step of the heap's merge, long runs of one input in one go. Returns
// where the run stops.
template <class K, class V>
uint64_t take_rows(const ChunkIn<K, V>& run, uint64_t j, uint64_t end, const K* limit, bool ties_first, K* out_keys,
                   V* out_vals, uint64_t& o) {
  if (!limit) {
    std::copy(run.keys + j, run.keys + end, out_keys + o);
    std::copy(run.vals + j, run.vals + end, out_vals + o);
    o += end - j;
    return end;
  }
  do {
    out_keys[o] = run.keys[j];
    out_vals[o] = run.vals[j];
    ++o, ++j;
  } while (j < end && (run.keys[j] < *limit || (ties_first && run.keys[j] == *limit)));
  return j;
}

// The smallest head of runs [A, B) at rows i[]: its key, value and run, the lower run among equal
// keys. A tournament of conditional moves (5 to 8 runs; merge_branch_free spells out 2 to 4, which
// runs faster than the tournament's run index: 2 runs 496 against 408 M rows/s).
template <int A, int B, class K, class V>
struct Head {
  K key;
  V val;
  int run;
  static Head of(const K* const* k, const V* const* v, const uint64_t* i) {
    if constexpr (B - A == 1) {
      return {k[A][i[A]], v[A][i[A]], A};
    } else {
      const auto lo = Head<A, (A + B) / 2, K, V>::of(k, v, i);
      const auto hi = Head<(A + B) / 2, B, K, V>::of(k, v, i);
      const bool b = hi.key < lo.key;
      return {b ? hi.key : lo.key, b ? hi.val : lo.val, b ? hi.run : lo.run};
    }
  }
};

// N runs, every one with rows left: rows into out from row o until one run ends. A step reads
// every run's head and value and takes the smallest by conditional moves (the lower run among
// equal keys: a later run wins only when strictly smaller), so no branch depends on the keys.
// Returns the next output row; next[] is where each run stopped.
template <int N, class K, class V>
uint64_t merge_branch_free(const ChunkIn<K, V>* const* runs, uint64_t* next, const uint64_t* end, K* out_keys,
                           V* out_vals, uint64_t o) {
  static_assert(N >= 2 && N <= 8, "2 to 8 runs");
  const K* k[N];
  const V* v[N];
  uint64_t i[N];
  for (int r = 0; r < N; ++r) k[r] = runs[r]->keys, v[r] = runs[r]->vals, i[r] = next[r];
  for (;;) {
    uint64_t steps = end[0] - i[0];  // no run can end within this many rows
    for (int r = 1; r < N; ++r) steps = std::min(steps, end[r] - i[r]);
    if (steps == 0) break;
    for (const uint64_t stop = o + steps; o < stop; ++o) {
      if constexpr (N > 4) {
        const auto h = Head<0, N, K, V>::of(k, v, i);
        out_keys[o] = h.key, out_vals[o] = h.val;
        for (int r = 0; r < N; ++r) i[r] += h.run == r;
      } else {
        const K k0 = k[0][i[0]], k1 = k[1][i[1]];
        const V v0 = v[0][i[0]], v1 = v[1][i[1]];
        const bool b1 = k1 < k0;  // the smaller of runs 0 and 1
        const K ka = b1 ? k1 : k0;
        const V va = b1 ? v1 : v0;
        if constexpr (N == 2) {
          out_keys[o] = ka, out_vals[o] = va;
          i[0] += !b1, i[1] += b1;
        } else if constexpr (N == 3) {
          const K k2 = k[2][i[2]];
          const V v2 = v[2][i[2]];
          const bool b2 = k2 < ka;
          out_keys[o] = b2 ? k2 : ka, out_vals[o] = b2 ? v2 : va;
          i[0] += !b2 & !b1, i[1] += !b2 & b1, i[2] += b2;
        } else {
          const K k2 = k[2][i[2]], k3 = k[3][i[3]];
          const V v2 = v[2][i[2]], v3 = v[3][i[3]];
          const bool b3 = k3 < k2;  // the smaller of runs 2 and 3, then of the two pairs
          const K kb = b3 ? k3 : k2;
          const V vb = b3 ? v3 : v2;
          const bool b = kb < ka;
          out_keys[o] = b ? kb : ka, out_vals[o] = b ? vb : va;
          i[0] += !b & !b1, i[1] += !b & b1, i[2] += b & !b3, i[3] += b & b3;
        }
      }
    }
  }
  for (int r = 0; r < N; ++r) next[r] = i[r];
  return o;
}

// Rows [lo[i], hi[i]) of at most kBranchFreeRuns runs into out from row o: branch-free steps
// over the runs with rows left (in run order, so ties keep it), fewer each time one ends.
template <class K, class V>
void merge_few(const std::vector<ChunkIn<K, V>>& runs, const std::vector<uint64_t>& lo,
               const std::vector<uint64_t>& hi, K* out_keys, V* out_vals, uint64_t o) {
  std::vector<uint64_t> next = lo;
  for (;;) {
    const ChunkIn<K, V>* live[kBranchFreeRuns];
    uint64_t at[kBranchFreeRuns], end[kBranchFreeRuns];
    size_t which[kBranchFreeRuns], n = 0;
    for (size_t r = 0; r < runs.size(); ++r)
      if (next[r] < hi[r]) live[n] = &runs[r], at[n] = next[r], end[n] = hi[r], which[n++] = r;
    if (n == 0) return;
    if (n == 1) {
      take_rows(*live[0], at[0], end[0], static_cast<const K*>(nullptr), true, out_keys, out_vals, o);
      return;
    }
    switch (n) {
      case 2: o = merge_branch_free<2>(live, at, end, out_keys, out_vals, o); break;
      case 3: o = merge_branch_free<3>(live, at, end, out_keys, out_vals, o); break;
      case 4: o = merge_branch_free<4>(live, at, end, out_keys, out_vals, o); break;
      case 5: o = merge_branch_free<5>(live, at, end, out_keys, out_vals, o); break;
      case 6: o = merge_branch_free<6>(live, at, end, out_keys, out_vals, o); break;
      case 7: o = merge_branch_free<7>(live, at, end, out_keys, out_vals, o); break;
      default: o = merge_branch_free<8>(live, at, end, out_keys, out_vals, o);
    }
    for (size_t j = 0; j < n; ++j) next[which[j]] = at[j];
  }
}

template <class K, class V>
void merge_by_heap(const std::vector<ChunkIn<K, V>>& runs, const std::vector<uint64_t>& lo,
                   const std::vector<uint64_t>& hi, K* out_keys, V* out_vals, uint64_t o) {
  // (key, run): the smallest key first, the lower run first among equal keys.
  using Head = std::pair<K, size_t>;
  std::priority_queue<Head, std::vector<Head>, std::greater<Head>> heap;
  std::vector<uint64_t> next = lo;
  for (size_t i = 0; i < runs.size(); ++i)
    if (next[i] < hi[i]) heap.push({runs[i].keys[next[i]], i});
  while (!heap.empty()) {
    const size_t i = heap.top().second;
    heap.pop();
    const K* limit = heap.empty() ? nullptr : &heap.top().first;
    const bool ties_first = heap.empty() || i < heap.top().second;
    next[i] = take_rows(runs[i], next[i], hi[i], limit, ties_first, out_keys, out_vals, o);
    if (next[i] < hi[i]) heap.push({runs[i].keys[next[i]], i});
  }
}

}  // namespace

template <class K, class V>
void multiway_merge(const std::vector<ChunkIn<K, V>>& runs, K* out_keys, V* out_vals, int threads) {
  uint64_t total = 0;
  for (const auto& r : runs) total += r.rows;
  const int team = team_for(total, threads);
  std::vector<std::vector<uint64_t>> bounds(size_t(team) + 1);
  for (int t = 0; t <= team; ++t) bounds[size_t(t)] = cut(runs, split(total, uint64_t(team), uint64_t(t)).begin, total);
  RegionErrors errors;
#pragma omp parallel for num_threads(team) schedule(static, 1)
  for (int t = 0; t < team; ++t)
    errors.run([&] {
      const std::vector<uint64_t>&lo = bounds[size_t(t)], &hi = bounds[size_t(t) + 1];
      uint64_t o = split(total, uint64_t(team), uint64_t(t)).begin;
      if (runs.size() <= kBranchFreeRuns) merge_few(runs, lo, hi, out_keys, out_vals, o);
      else merge_by_heap(runs, lo, hi, out_keys, out_vals, o);
    });
  errors.rethrow();
}

std::vector<ChunkIn<uint64_t, uint64_t>> random_sorted_runs(uint64_t* keys, uint64_t* vals, uint64_t rows, int k,
                                                            int threads) {
  auto first_of = [&](int r) { return rows * uint64_t(r) / uint64_t(k); };
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int r = 0; r < k; ++r) {
    for (uint64_t i = first_of(r); i < first_of(r + 1); ++i) keys[i] = mix64(i + 1), vals[i] = i;
    std::sort(keys + first_of(r), keys + first_of(r + 1));
  }
  std::vector<ChunkIn<uint64_t, uint64_t>> runs;
  for (int r = 0; r < k; ++r) runs.push_back({keys + first_of(r), vals + first_of(r), first_of(r + 1) - first_of(r)});
  return runs;
}

#define JL_INSTANTIATE_MULTIWAY_MERGE(K, V) \
  template void multiway_merge<K, V>(const std::vector<ChunkIn<K, V>>&, K*, V*, int);
JL_FOR_EACH_KV(JL_INSTANTIATE_MULTIWAY_MERGE)

template <class K>
uint64_t pivot_search(const K* x, const K* y, uint64_t n) {
  uint64_t lo = 0, hi = n;  // the predicate x[t] <= y[t] is false below the answer, true from it on
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (x[mid] <= y[mid]) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}
template uint64_t pivot_search<uint32_t>(const uint32_t*, const uint32_t*, uint64_t);
template uint64_t pivot_search<uint64_t>(const uint64_t*, const uint64_t*, uint64_t);

}  // namespace joinlab::cpu
