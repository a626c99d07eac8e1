// Global hash tables (npj, and any strategy that builds one table per rank): parallel build with
// CAS (linear probing) or atomic exchange on bucket heads (chaining), and a chunked parallel
// probe with group prefetching.
#include <stdexcept>
#include <string>

#include "kernels/cpu/hash_probe.hpp"
#include "kernels/cpu/join_emit.hpp"

namespace joinlab::cpu {

namespace {
constexpr uint64_t kProbeTaskRows = 1u << 14;
// Tables up to this size stay in the caches; larger ones are probed with prefetching.
constexpr uint64_t kCachedTableBytes = 512u << 10;

void require_pow2(uint64_t n, const char* what) {
  if (n == 0 || (n & (n - 1)))
    throw std::invalid_argument(std::string(what) + " = " + std::to_string(n) + " is not a power of two");
}
}  // namespace

template <class K, class V>
void clear_table(const LinearTable<K, V>& t, int threads) {
  parallel_fill(t.keys, 0xff, t.slots * sizeof(K), threads);  // all-ones = empty, any width
}
template <class K, class V>
void clear_table(const ChainedTable<K, V>& t, int threads) {
  parallel_fill(t.heads, 0xff, t.buckets * sizeof(uint32_t), threads);
}

template <class K, class V>
void clear_table(const RowIdTable<K, V>& t, int threads) {
  parallel_fill(t.words, 0xff, t.slots * sizeof(uint64_t), threads);
}

namespace {
// Inserts in groups of kGroup rows: home slots first (prefetched for writing when the table is
// larger than the caches), then the inserts, so the misses of a group overlap.
template <class Home, class Insert>
void insert_grouped(uint64_t rows, int threads, bool prefetch, Home&& home_of, Insert&& insert) {
  const int64_t groups = int64_t((rows + kGroup - 1) / kGroup);
#pragma omp parallel for num_threads(team_for(rows, threads)) schedule(static)
  for (int64_t g = 0; g < groups; ++g) {
    const uint64_t b = uint64_t(g) * kGroup;
    const int n = int(std::min<uint64_t>(kGroup, rows - b));
    uint64_t home[kGroup];
    for (int j = 0; j < n; ++j) home[j] = home_of(b + uint64_t(j), prefetch);
    for (int j = 0; j < n; ++j) insert(b + uint64_t(j), home[j]);
  }
}
}  // namespace

template <class K, class V>
void build(const LinearTable<K, V>& t, uint64_t present, const K* keys, const V* vals,
           uint64_t rows, int threads) {
  require_pow2(t.slots, "linear-probing table slots");
  if (present + rows > t.slots)
    throw std::length_error("hash table full: " + std::to_string(present) + " rows present + " +
                            std::to_string(rows) + " to insert > " + std::to_string(t.slots) + " slots");
  const SeededSlot slot{t.seed, t.slots};
  auto home_of = [&](uint64_t i, bool prefetch) {
    const uint64_t s = slot(uint64_t(keys[i]));
    if (prefetch) {
      __builtin_prefetch(&t.keys[s], 1);
      __builtin_prefetch(&t.vals[s], 1);
    }
    return s;
  };
  const bool prefetch = t.slots * (sizeof(K) + sizeof(V)) > kCachedTableBytes;
  if (team_for(rows, threads) == 1)
    insert_grouped(rows, 1, prefetch, home_of,
                   [&](uint64_t i, uint64_t s) { insert_linear<K, V, false>(t, s, keys[i], vals[i]); });
  else
    insert_grouped(rows, threads, prefetch, home_of,
                   [&](uint64_t i, uint64_t s) { insert_linear<K, V, true>(t, s, keys[i], vals[i]); });
}

template <class K, class V>
void build(const ChainedTable<K, V>& t, uint64_t present, const K* keys, const V* vals,
           uint64_t rows, int threads) {
  require_pow2(t.buckets, "chained table buckets");
  if (present + rows > t.capacity)
    throw std::length_error("chained hash table full: " + std::to_string(present) + " rows present + " +
                            std::to_string(rows) + " to insert > capacity " + std::to_string(t.capacity));
  if (present + rows >= ~0u)
    throw std::length_error("chained hash table: " + std::to_string(present + rows) +
                            " rows do not fit 32-bit chain indices");
  parallel_copy(t.keys + present, keys, rows * sizeof(K), threads);
  parallel_copy(t.vals + present, vals, rows * sizeof(V), threads);
  const SeededSlot slot{t.seed, t.buckets};
  auto home_of = [&](uint64_t i, bool prefetch) {
    const uint64_t b = slot(uint64_t(keys[i]));
    if (prefetch) __builtin_prefetch(&t.heads[b], 1);
    return b;
  };
  const bool prefetch = t.buckets * sizeof(uint32_t) > kCachedTableBytes;
  if (team_for(rows, threads) == 1)
    insert_grouped(rows, 1, prefetch, home_of,
                   [&](uint64_t i, uint64_t b) { link_chained<K, V, false>(t, b, uint32_t(present + i)); });
  else
    insert_grouped(rows, threads, prefetch, home_of,
                   [&](uint64_t i, uint64_t b) { link_chained<K, V, true>(t, b, uint32_t(present + i)); });
}

template <class K, class V>
void build(const RowIdTable<K, V>& t, uint64_t present, uint64_t rows, int threads) {
  require_pow2(t.slots, "hash + row-id table slots");
  if (present + rows > t.slots)
    throw std::length_error("hash table full: " + std::to_string(present) + " rows present + " +
                            std::to_string(rows) + " to insert > " + std::to_string(t.slots) + " slots");
  if (present + rows >= ~0u)  // row id all-ones is never stored, so no word is all-ones
    throw std::length_error("hash + row-id table: " + std::to_string(present + rows) +
                            " rows do not fit 32-bit row ids");
  const uint64_t mask = t.slots - 1;
  auto home_of = [&](uint64_t i, bool prefetch) {
    const uint64_t s = slot_of_hash(table_hash(uint64_t(t.keys[present + i]), t.seed), t.slots);
    if (prefetch) __builtin_prefetch(&t.words[s], 1);
    return s;
  };
  auto word_of = [&](uint64_t i) {
    return uint64_t(tag_of_hash(table_hash(uint64_t(t.keys[present + i]), t.seed))) << 32 | (present + i);
  };
  const bool prefetch = t.slots * sizeof(uint64_t) > kCachedTableBytes;
  if (team_for(rows, threads) == 1)
    insert_grouped(rows, 1, prefetch, home_of, [&](uint64_t i, uint64_t s) {
      while (t.words[s] != ~uint64_t(0)) s = (s + 1) & mask;
      t.words[s] = word_of(i);
    });
  else
    insert_grouped(rows, threads, prefetch, home_of, [&](uint64_t i, uint64_t s) {
      const uint64_t w = word_of(i);
      for (;; s = (s + 1) & mask) {
        uint64_t expected = ~uint64_t(0);
        if (t.words[s] == expected &&
            __atomic_compare_exchange_n(&t.words[s], &expected, w, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
          return;
      }
    });
}

template <class K, class VR, class VS>
JoinCount probe(const RowIdTable<K, VR>& t, const K* keys, const VS* vals, uint64_t rows,
                const JoinSink<K, VR, VS>& out, int threads) {
  require_pow2(t.slots, "hash + row-id table slots");
  const bool prefetch = t.slots * sizeof(uint64_t) > kCachedTableBytes;
  const uint64_t tasks = (rows + kProbeTaskRows - 1) / kProbeTaskRows;
  return run_join_tasks(tasks, out, threads, [&](uint64_t task, auto& emit) {
    const uint64_t b = task * kProbeTaskRows, e = std::min(rows, b + kProbeTaskRows);
    probe_rowid_rows(t, keys, vals, b, e, prefetch, emit);
  });
}

template <class K, class VR, class VS>
JoinCount probe(const LinearTable<K, VR>& t, const K* keys, const VS* vals, uint64_t rows,
                const JoinSink<K, VR, VS>& out, int threads) {
  require_pow2(t.slots, "linear-probing table slots");
  const bool prefetch = t.slots * (sizeof(K) + sizeof(VR)) > kCachedTableBytes;
  const uint64_t tasks = (rows + kProbeTaskRows - 1) / kProbeTaskRows;
  return run_join_tasks(tasks, out, threads, [&](uint64_t task, auto& emit) {
    const uint64_t b = task * kProbeTaskRows, e = std::min(rows, b + kProbeTaskRows);
    probe_linear_rows(t, SeededSlot{t.seed, t.slots}, keys, vals, b, e, prefetch, emit);
  });
}

template <class K, class VR, class VS>
JoinCount probe(const ChainedTable<K, VR>& t, const K* keys, const VS* vals, uint64_t rows,
                const JoinSink<K, VR, VS>& out, int threads) {
  require_pow2(t.buckets, "chained table buckets");
  const bool prefetch = t.buckets * sizeof(uint32_t) > kCachedTableBytes;
  const uint64_t tasks = (rows + kProbeTaskRows - 1) / kProbeTaskRows;
  return run_join_tasks(tasks, out, threads, [&](uint64_t task, auto& emit) {
    const uint64_t b = task * kProbeTaskRows, e = std::min(rows, b + kProbeTaskRows);
    probe_chained_rows(t, SeededSlot{t.seed, t.buckets}, keys, vals, b, e, prefetch, emit);
  });
}

#define JL_INSTANTIATE_TABLE(K, V)                                                               \
  template void clear_table<K, V>(const LinearTable<K, V>&, int);                                \
  template void clear_table<K, V>(const ChainedTable<K, V>&, int);                               \
  template void build<K, V>(const LinearTable<K, V>&, uint64_t, const K*, const V*, uint64_t, int); \
  template void build<K, V>(const ChainedTable<K, V>&, uint64_t, const K*, const V*, uint64_t, int); \
  template void clear_table<K, V>(const RowIdTable<K, V>&, int);                                 \
  template void build<K, V>(const RowIdTable<K, V>&, uint64_t, uint64_t, int);
#define JL_INSTANTIATE_PROBE(K, VR, VS)                                                            \
  template JoinCount probe<K, VR, VS>(const LinearTable<K, VR>&, const K*, const VS*, uint64_t,  \
                                      const JoinSink<K, VR, VS>&, int);                          \
  template JoinCount probe<K, VR, VS>(const ChainedTable<K, VR>&, const K*, const VS*, uint64_t, \
                                      const JoinSink<K, VR, VS>&, int);                          \
  template JoinCount probe<K, VR, VS>(const RowIdTable<K, VR>&, const K*, const VS*, uint64_t,   \
                                      const JoinSink<K, VR, VS>&, int);
JL_FOR_EACH_KV(JL_INSTANTIATE_TABLE)
JL_FOR_EACH_JOIN(JL_INSTANTIATE_PROBE)

}  // namespace joinlab::cpu
