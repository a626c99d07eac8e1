// Histogram and radix/hash partitioning (Balkesen et al., ICDE 2013 / VLDB 2015 style): each
// thread histograms its contiguous chunk, a prefix over (partition, thread) gives every thread
// its own exclusive output ranges (so the scatter is stable and needs no atomics), and the
// scatter goes through software write-combine buffers: one cache line of tuples per partition,
// written out as a whole line (non-temporal when the output is larger than the caches), so the
// scatter costs sequential line writes instead of one random write per tuple. Fanouts whose
// buffers would not fit the L2 cache are done in two passes (max_one_pass_bits).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/host_memory.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/streaming_store.hpp"

namespace joinlab::cpu {

namespace {

// Write-combine buffer of one partition: L tuples, where L makes the narrower column exactly one
// cache line (the wider one is then two).
template <class K, class V>
struct alignas(64) WcLine {
  static constexpr uint32_t L = 64 / (sizeof(K) < sizeof(V) ? sizeof(K) : sizeof(V));
  K keys[L];
  V vals[L];
};

// The partition function with its kind fixed at compile time, so the per-row loops carry no
// branch on the kind (and keep shift and mask in registers).
template <PartitionFn::Kind kKind>
struct FixedKindPart {
  PartitionFn fn;
  uint32_t operator()(uint64_t k) const {
    PartitionFn f = fn;
    f.kind = kKind;
    return f(k);
  }
};
// Calls f(part) with the fixed-kind form of fn.
template <class F>
void with_part(PartitionFn fn, F&& f) {
  if (fn.kind == PartitionFn::Radix)
    f(FixedKindPart<PartitionFn::Radix>{fn});
  else
    f(FixedKindPart<PartitionFn::Hash>{fn});
}

template <class K, class Part>
void count_rows(const K* __restrict keys, uint64_t b, uint64_t e, Part part, uint64_t* __restrict hist) {
  for (uint64_t i = b; i < e; ++i) ++hist[part(uint64_t(keys[i]))];
}
template <class K>
void count_rows(const K* keys, uint64_t b, uint64_t e, PartitionFn fn, uint64_t* hist) {
  with_part(fn, [&](auto part) { count_rows(keys, b, e, part, hist); });
}
// A team member's counts of rows [b, e) into `out`, its slice of an array the team shares:
// counted in the thread's own scratch first, since counters of neighbouring threads in one array
// share the cache lines at the slices' ends, and incrementing them from two cores bounces those
// lines between the cores (false sharing: several times the count's own cost per row on a
// 32-core VM).
template <class K>
void count_own(const K* keys, uint64_t b, uint64_t e, PartitionFn fn, uint64_t* out) {
  const uint32_t F = fn.fanout();
  uint64_t* c = thread_scratch_array<uint64_t>(1, F);
  std::fill(c, c + F, 0);
  count_rows(keys, b, e, fn, c);
  std::memcpy(out, c, F * sizeof(uint64_t));
}

// Scatters rows [b, e) of the input; pos[p] is the next output row of partition p for this
// thread (advanced), start[p] the first one it owns. Only rows this thread owns are written.
template <class K, class V, bool kStream, class Part>
void scatter_rows(const K* __restrict ik, const V* __restrict iv, uint64_t b, uint64_t e, Part part,
                  uint64_t* __restrict pos, const uint64_t* __restrict start, WcLine<K, V>* __restrict buf,
                  K* ok, V* ov) {
  constexpr uint32_t L = WcLine<K, V>::L;
  for (uint64_t i = b; i < e; ++i) {
    const K k = ik[i];
    const uint32_t p = part(uint64_t(k));
    const uint64_t at = pos[p]++;
    const uint32_t slot = uint32_t(at & (L - 1));
    WcLine<K, V>& line = buf[p];
    line.keys[slot] = k;
    line.vals[slot] = iv[i];
    if (slot == L - 1) {
      const uint64_t first = at + 1 - L;
      if (first >= start[p]) {
        store_bytes<kStream>(ok + first, line.keys, L * sizeof(K));
        store_bytes<kStream>(ov + first, line.vals, L * sizeof(V));
      } else {  // the thread's first line of p starts inside a line another thread owns
        const uint32_t from = uint32_t(start[p] - first);
        std::memcpy(ok + start[p], line.keys + from, (L - from) * sizeof(K));
        std::memcpy(ov + start[p], line.vals + from, (L - from) * sizeof(V));
      }
    }
  }
}

// Writes what is left in the buffers after scatter_rows.
template <class K, class V>
void flush_tails(uint32_t fanout, const uint64_t* pos, const uint64_t* start,
                 const WcLine<K, V>* buf, K* ok, V* ov) {
  constexpr uint32_t L = WcLine<K, V>::L;
  for (uint32_t p = 0; p < fanout; ++p) {
    const uint64_t end = pos[p];
    const uint64_t from = std::max(end & ~uint64_t(L - 1), start[p]);
    if (end <= from) continue;
    const uint32_t slot = uint32_t(from & (L - 1));
    std::memcpy(ok + from, buf[p].keys + slot, (end - from) * sizeof(K));
    std::memcpy(ov + from, buf[p].vals + slot, (end - from) * sizeof(V));
  }
}

template <class K, class V>
struct PassArgs {
  const K* ik;
  const V* iv;
  K* ok;
  V* ov;
  PartitionFn fn;
  bool stream;  // non-temporal line writes (out 64-byte aligned and too big for the caches)
};

template <class K, class V>
void scatter(const PassArgs<K, V>& a, uint64_t b, uint64_t e, uint64_t* pos, const uint64_t* start,
             WcLine<K, V>* buf) {
  with_part(a.fn, [&](auto part) {
    if (a.stream) {
      scatter_rows<K, V, true>(a.ik, a.iv, b, e, part, pos, start, buf, a.ok, a.ov);
      _mm_sfence();
    } else {
      scatter_rows<K, V, false>(a.ik, a.iv, b, e, part, pos, start, buf, a.ok, a.ov);
    }
  });
  flush_tails(a.fn.fanout(), pos, start, buf, a.ok, a.ov);
}

// One segment [sb, se) of the input, output from row ob, partitioned by the whole team.
// Writes the segment's fanout offsets to seg_off.
template <class K, class V>
void partition_segment_team(const PassArgs<K, V>& a, uint64_t sb, uint64_t se, uint64_t ob,
                            uint64_t* seg_off, int threads) {
  const uint32_t F = a.fn.fanout();
  std::vector<uint64_t> hist(size_t(threads) * F);  // [thread][partition]
  RegionErrors errors;
  std::atomic<bool> counted{true};  // false once a count failed: its positions would be wrong
#pragma omp parallel num_threads(threads)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const Span mine = split(se - sb, uint64_t(nt), uint64_t(t));
    uint64_t* h = hist.data() + size_t(t) * F;
    std::fill(h, h + F, 0);
    errors.run([&] {
      try {
        count_own(a.ik, sb + mine.begin, sb + mine.end, a.fn, h);
      } catch (...) {
        counted = false;
        throw;
      }
    });
#pragma omp barrier
#pragma omp single
    {
      uint64_t at = ob;
      for (uint32_t p = 0; p < F; ++p) {
        seg_off[p] = at;
        for (int u = 0; u < nt; ++u) {
          uint64_t c = hist[size_t(u) * F + p];
          hist[size_t(u) * F + p] = at;
          at += c;
        }
      }
    }
    errors.run([&] {
      if (!counted) return;  // nothing scattered: the count's error is rethrown below
      uint64_t* pos = thread_scratch_array<uint64_t>(1, 2 * uint64_t(F));
      uint64_t* start = pos + F;
      std::memcpy(pos, h, F * sizeof(uint64_t));
      std::memcpy(start, h, F * sizeof(uint64_t));
      auto* buf = thread_scratch_array<WcLine<K, V>>(2, F);
      scatter(a, sb + mine.begin, sb + mine.end, pos, start, buf);
    });
  }
  errors.rethrow();
}

// One segment partitioned by the calling thread alone.
template <class K, class V>
void partition_segment_alone(const PassArgs<K, V>& a, uint64_t sb, uint64_t se, uint64_t ob,
                             uint64_t* seg_off) {
  const uint32_t F = a.fn.fanout();
  uint64_t* pos = thread_scratch_array<uint64_t>(1, 2 * uint64_t(F));
  uint64_t* start = pos + F;
  std::fill(pos, pos + F, 0);
  count_rows(a.ik, sb, se, a.fn, pos);
  uint64_t at = ob;
  for (uint32_t p = 0; p < F; ++p) {
    uint64_t c = pos[p];
    seg_off[p] = start[p] = pos[p] = at;
    at += c;
  }
  auto* buf = thread_scratch_array<WcLine<K, V>>(2, F);
  scatter(a, sb, se, pos, start, buf);
}

template <class K, class V>
std::vector<uint64_t> partition_one_pass(const PassArgs<K, V>& a, const std::vector<uint64_t>& segs,
                                         int threads) {
  const uint32_t F = a.fn.fanout();
  const uint64_t k = segs.size() - 1, base = segs.front(), total = segs.back() - base;
  std::vector<uint64_t> off(k * F + 1);
  off[k * F] = total;
  // Segments worth a whole team run one after another; the rest run one per thread at once.
  const uint64_t team_min = std::max<uint64_t>(total / (2 * uint64_t(threads)), 1u << 16);
  std::vector<uint64_t> small;
  for (uint64_t s = 0; s < k; ++s) {
    const uint64_t n = segs[s + 1] - segs[s];
    if (threads > 1 && n >= team_min)
      partition_segment_team(a, segs[s], segs[s + 1], segs[s] - base, off.data() + s * F,
                             team_for(n, threads));
    else
      small.push_back(s);
  }
  const int64_t nsmall = int64_t(small.size());
  RegionErrors errors;
#pragma omp parallel for num_threads(team_for(total, threads)) schedule(dynamic, 1) if (nsmall > 1)
  for (int64_t i = 0; i < nsmall; ++i) {
    const uint64_t s = small[size_t(i)];
    errors.run([&] { partition_segment_alone(a, segs[s], segs[s + 1], segs[s] - base, off.data() + s * F); });
  }
  errors.rethrow();
  return off;
}

// `depth` keeps the scratch of nested passes (three or more) apart.
template <class K, class V>
std::vector<uint64_t> partition_passes(const K* ik, const V* iv, const std::vector<uint64_t>& segs,
                                       PartitionFn fn, K* ok, V* ov, int threads, int depth) {
  const uint32_t max_bits = max_one_pass_bits(sizeof(K), sizeof(V));
  if (fn.bits > max_bits) {
    // High bits first into scratch, then each of those partitions by the low bits: partition
    // p = (high << low_bits) | low, so the result is grouped exactly as one pass would be.
    const uint32_t passes = (fn.bits + max_bits - 1) / max_bits;
    const uint32_t low_bits = fn.bits / passes;
    PartitionFn high = fn, low = fn;
    high.bits = fn.bits - low_bits;
    high.shift = fn.shift + low_bits;
    low.bits = low_bits;
    const uint64_t n = segs.back() - segs.front();
    K* tk = thread_scratch_array<K>(3 + 2 * depth, n);
    V* tv = thread_scratch_array<V>(4 + 2 * depth, n);
    std::vector<uint64_t> mid = partition_passes(ik, iv, segs, high, tk, tv, threads, depth + 1);
    return partition_passes<K, V>(tk, tv, mid, low, ok, ov, threads, depth + 1);
  }
  const uint64_t out_bytes = (segs.back() - segs.front()) * (sizeof(K) + sizeof(V));
  const bool aligned = (uintptr_t(ok) % 64 == 0) && (uintptr_t(ov) % 64 == 0);
  PassArgs<K, V> a{ik, iv, ok, ov, fn, aligned && out_bytes >= kStreamingBytes};
  return partition_one_pass(a, segs, threads);
}

uint64_t l2_cache_bytes() {
  static const uint64_t bytes = [] {
    const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > (64 << 10) ? uint64_t(l2) : uint64_t(1) << 20;  // unknown: 1 MiB
  }();
  return bytes;
}

void check_partition_fn(PartitionFn fn) {
  if (fn.bits > 24) throw std::invalid_argument("partition: fanout 2^" + std::to_string(fn.bits) + " is too large (at most 2^24)");
  if (fn.shift >= 64) throw std::invalid_argument("partition: shift " + std::to_string(fn.shift) + " is not below 64");
}

}  // namespace

uint32_t max_one_pass_bits(uint32_t key_bytes, uint32_t val_bytes) {
  // Buffers of up to half the L2: measured with 8-byte tuples on 2 threads, one pass at 2^13
  // (1 MiB of buffers) beat two passes on an AMD EPYC with 1 MiB L2 but one pass at 2^14
  // (2 MiB) lost to two on an Intel Xeon with 2 MiB L2; half the L2 is on the safe side of both.
  const uint32_t line_bytes = 64 / std::min(key_bytes, val_bytes) * (key_bytes + val_bytes);
  uint32_t bits = 4;
  while ((uint64_t(line_bytes) << (bits + 1)) <= l2_cache_bytes() / 2) ++bits;
  return bits;
}

template <class K>
std::vector<uint64_t> histogram(const K* keys, uint64_t rows, PartitionFn fn, int threads) {
  check_partition_fn(fn);
  const uint32_t F = fn.fanout();
  std::vector<uint64_t> total(F, 0);
  const int team = team_for(rows, threads);
  std::vector<uint64_t> hist(size_t(team) * F, 0);
  RegionErrors errors;
#pragma omp parallel num_threads(team)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const Span mine = split(rows, uint64_t(nt), uint64_t(t));
    errors.run([&] { count_own(keys, mine.begin, mine.end, fn, hist.data() + size_t(t) * F); });
  }
  errors.rethrow();
  for (int t = 0; t < team; ++t)
    for (uint32_t p = 0; p < F; ++p) total[p] += hist[size_t(t) * F + p];
  return total;
}

template <class K, class V>
std::vector<uint64_t> partition(const K* in_keys, const V* in_vals, uint64_t rows,
                                const std::vector<uint64_t>& segments, PartitionFn fn, K* out_keys,
                                V* out_vals, int threads) {
  std::vector<uint64_t> segs = segments.empty() ? std::vector<uint64_t>{0, rows} : segments;
  if (segs.size() < 2) throw std::invalid_argument("partition: in_segments needs at least 2 offsets");
  for (size_t i = 1; i < segs.size(); ++i)
    if (segs[i] < segs[i - 1])
      throw std::invalid_argument("partition: in_segments are not ascending at index " + std::to_string(i));
  if (segs.back() > rows)
    throw std::invalid_argument("partition: in_segments end at row " + std::to_string(segs.back()) +
                                " past the input's " + std::to_string(rows) + " rows");
  check_partition_fn(fn);
  const uint64_t n = segs.back() - segs.front();
  const K* in_end = in_keys + segs.back();
  if (n && in_keys + segs.front() < out_keys + n && out_keys < in_end)
    throw std::invalid_argument("partition: input and output keys overlap");
  return partition_passes(in_keys, in_vals, segs, fn, out_keys, out_vals, std::max(threads, 1), 0);
}

#define JL_INSTANTIATE_PARTITION(K, V)                                                            \
  template std::vector<uint64_t> partition<K, V>(const K*, const V*, uint64_t,                    \
                                                 const std::vector<uint64_t>&, PartitionFn, K*, V*, \
                                                 int);
JL_FOR_EACH_KV(JL_INSTANTIATE_PARTITION)
template std::vector<uint64_t> histogram<uint32_t>(const uint32_t*, uint64_t, PartitionFn, int);
template std::vector<uint64_t> histogram<uint64_t>(const uint64_t*, uint64_t, PartitionFn, int);

}  // namespace joinlab::cpu
