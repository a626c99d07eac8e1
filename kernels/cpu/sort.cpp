// Sorting for the sort-merge join. Radix: LSD radix sort whose passes are stable partition
// passes (the write-combined scatter of partition.cpp) over only the key bits that vary, so
// dense 8-byte keys below 2^24 take 3 passes, not 8. Merge: libstdc++'s parallel multiway
// merge sort (stable) over (key, value) pairs.
#include <parallel/algorithm>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/host_memory.hpp"
#include "kernels/cpu/parallel.hpp"

namespace joinlab::cpu {

namespace {

// Scratch slots (host_memory.hpp) this file uses on the calling thread.
enum SortScratch { kPingKeys = 7, kPingVals, kCopyKeys, kCopyVals, kPairs };

bool overlap(const void* a, uint64_t a_bytes, const void* b, uint64_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes && b_bytes && pa < pb + b_bytes && pb < pa + a_bytes;
}

// Bits in which the keys differ: OR of all keys XOR AND of all keys.
template <class K>
uint64_t varying_bits(const K* keys, uint64_t rows, int threads) {
  uint64_t any = 0, all = ~0ULL;
  const int64_t n = int64_t(rows);
#pragma omp parallel for num_threads(team_for(rows, threads)) reduction(| : any) reduction(& : all)
  for (int64_t i = 0; i < n; ++i) {
    any |= uint64_t(keys[i]);
    all &= uint64_t(keys[i]);
  }
  return rows ? any ^ all : 0;
}

}  // namespace

template <class K, class V>
void radix_sort(const K* in_keys, const V* in_vals, uint64_t rows, K* out_keys, V* out_vals,
                int threads) {
  threads = std::max(threads, 1);
  const uint64_t vary = varying_bits(in_keys, rows, threads);
  if (!vary) {  // zero or one row, or all keys equal: already sorted
    if (in_keys != out_keys) parallel_copy(out_keys, in_keys, rows * sizeof(K), threads);
    if (in_vals != out_vals) parallel_copy(out_vals, in_vals, rows * sizeof(V), threads);
    return;
  }
  const uint32_t lo = uint32_t(__builtin_ctzll(vary)), hi = 63u - uint32_t(__builtin_clzll(vary));
  const uint32_t span = hi - lo + 1;
  const uint32_t max_bits = max_one_pass_bits(sizeof(K), sizeof(V));
  const uint32_t passes = (span + max_bits - 1) / max_bits;
  const uint32_t bits = (span + passes - 1) / passes;

  if (overlap(in_keys, rows * sizeof(K), out_keys, rows * sizeof(K)) ||
      overlap(in_vals, rows * sizeof(V), out_vals, rows * sizeof(V))) {
    K* ck = thread_scratch_array<K>(kCopyKeys, rows);
    V* cv = thread_scratch_array<V>(kCopyVals, rows);
    parallel_copy(ck, in_keys, rows * sizeof(K), threads);
    parallel_copy(cv, in_vals, rows * sizeof(V), threads);
    in_keys = ck;
    in_vals = cv;
  }
  K* tk = thread_scratch_array<K>(kPingKeys, rows);
  V* tv = thread_scratch_array<V>(kPingVals, rows);
  // Ping-pong between out and scratch so that the last pass lands in out.
  const K* sk = in_keys;
  const V* sv = in_vals;
  bool to_out = passes % 2 == 1;
  for (uint32_t p = 0; p < passes; ++p) {
    PartitionFn digit;
    digit.kind = PartitionFn::Radix;
    digit.shift = lo + p * bits;
    digit.bits = std::min(bits, hi + 1 - digit.shift);
    K* dk = to_out ? out_keys : tk;
    V* dv = to_out ? out_vals : tv;
    partition(sk, sv, rows, {}, digit, dk, dv, threads);
    sk = dk;
    sv = dv;
    to_out = !to_out;
  }
}

template <class K, class V>
void merge_sort(const K* in_keys, const V* in_vals, uint64_t rows, K* out_keys, V* out_vals,
                int threads) {
  struct Pair {
    K key;
    V val;
  };
  threads = std::max(threads, 1);
  Pair* pairs = thread_scratch_array<Pair>(kPairs, rows);
  const int64_t n = int64_t(rows);
  const int team = team_for(rows, threads);
#pragma omp parallel for num_threads(team) schedule(static)
  for (int64_t i = 0; i < n; ++i) pairs[i] = {in_keys[i], in_vals[i]};
  __gnu_parallel::stable_sort(pairs, pairs + rows,
                              [](const Pair& a, const Pair& b) { return a.key < b.key; },
                              __gnu_parallel::multiway_mergesort_tag(__gnu_parallel::_ThreadIndex(team)));
#pragma omp parallel for num_threads(team) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    out_keys[i] = pairs[i].key;
    out_vals[i] = pairs[i].val;
  }
}

#define JL_INSTANTIATE_SORT(K, V)                                                               \
  template void radix_sort<K, V>(const K*, const V*, uint64_t, K*, V*, int);                   \
  template void merge_sort<K, V>(const K*, const V*, uint64_t, K*, V*, int);
JL_FOR_EACH_KV(JL_INSTANTIATE_SORT)

}  // namespace joinlab::cpu
