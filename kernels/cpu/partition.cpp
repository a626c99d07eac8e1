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

#include "core/exec/chunk.hpp"
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
// Cloned for AVX-512 (x86-64-v4, picked at load time where the CPU has it), where the 64-bit
// multiplies of the hash (and of the chunk checksum terms) vectorize.
#if defined(__x86_64__) && defined(__GNUC__)
#define JL_AVX512_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define JL_AVX512_CLONES
#endif

// Keys whose partitions are computed at a time: the hash of a block is a vectorized loop; the
// loop that counts or scatters the block's rows then reads the ids (a scalar hash per row made
// the count and the scatter compute-bound: ~5 cycles per row for the count on a 2-core EPYC).
constexpr uint32_t kIdBlock = 256;
#define JL_PART_IDS(K)                                                                                  \
  JL_AVX512_CLONES void part_ids(const K* __restrict keys, uint32_t n, PartitionFn fn, uint32_t* __restrict ids) { \
    if (fn.kind == PartitionFn::Hash) {                                                                 \
      const FixedKindPart<PartitionFn::Hash> part{fn};                                                  \
      for (uint32_t i = 0; i < n; ++i) ids[i] = part(uint64_t(keys[i]));                                \
    } else {                                                                                            \
      const FixedKindPart<PartitionFn::Radix> part{fn};                                                 \
      for (uint32_t i = 0; i < n; ++i) ids[i] = part(uint64_t(keys[i]));                                \
    }                                                                                                   \
  }
JL_PART_IDS(uint32_t)
JL_PART_IDS(uint64_t)
#undef JL_PART_IDS

// Calls row(i, p) for rows i in [b, e) in order, p the partition of key i (computed a block at a
// time by part_ids); stops at the first row for which it returns false and returns that row (e
// when none did).
template <class K, class F>
__attribute__((always_inline)) inline uint64_t for_each_row(const K* keys, uint64_t b, uint64_t e, PartitionFn fn,
                                                            F&& row) {
  alignas(64) uint32_t ids[kIdBlock];
  for (uint64_t i0 = b; i0 < e; i0 += kIdBlock) {
    const uint32_t n = uint32_t(std::min<uint64_t>(kIdBlock, e - i0));
    part_ids(keys + i0, n, fn, ids);
    for (uint32_t j = 0; j < n; ++j)
      if (!row(i0 + j, ids[j])) return i0 + j;
  }
  return e;
}

template <class K>
void count_rows(const K* keys, uint64_t b, uint64_t e, PartitionFn fn, uint64_t* __restrict hist) {
  for_each_row(keys, b, e, fn, [&](uint64_t, uint32_t p) __attribute__((always_inline)) {
    ++hist[p];
    return true;
  });
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
template <class K, class V, bool kStream>
void scatter_rows(const K* __restrict ik, const V* __restrict iv, uint64_t b, uint64_t e, PartitionFn fn,
                  uint64_t* __restrict pos, const uint64_t* __restrict start, WcLine<K, V>* __restrict buf,
                  K* ok, V* ov) {
  constexpr uint32_t L = WcLine<K, V>::L;
  for_each_row(ik, b, e, fn, [&](uint64_t i, uint32_t p) __attribute__((always_inline)) {
    const K k = ik[i];
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
    return true;
  });
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
  if (a.stream) {
    scatter_rows<K, V, true>(a.ik, a.iv, b, e, a.fn, pos, start, buf, a.ok, a.ov);
    _mm_sfence();
  } else {
    scatter_rows<K, V, false>(a.ik, a.iv, b, e, a.fn, pos, start, buf, a.ok, a.ov);
  }
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

// Segment offsets of a kernel's input: at least two, ascending. `what` names them ("partition:
// in_segments").
void check_segments(const std::vector<uint64_t>& segs, const std::string& what) {
  if (segs.size() < 2) throw std::invalid_argument(what + " need at least 2 offsets");
  for (size_t i = 1; i < segs.size(); ++i)
    if (segs[i] < segs[i - 1]) throw std::invalid_argument(what + " are not ascending at index " + std::to_string(i));
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
std::vector<uint64_t> histogram(const K* keys, const std::vector<uint64_t>& segments, PartitionFn fn, int threads) {
  check_segments(segments, "histogram: segments");
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (size_t s = 0; s + 1 < segments.size(); ++s) ranges.push_back({segments[s], segments[s + 1]});
  return histogram(keys, ranges, fn, threads);
}

template <class K>
std::vector<uint64_t> histogram(const K* keys, const std::vector<std::pair<uint64_t, uint64_t>>& ranges, PartitionFn fn,
                                int threads) {
  check_partition_fn(fn);
  const uint32_t F = fn.fanout();
  const uint64_t k = ranges.size();
  uint64_t total = 0;
  for (const auto& [b, e] : ranges) {
    if (e < b) throw std::invalid_argument("histogram: range [" + std::to_string(b) + ", " + std::to_string(e) + ") ends before it begins");
    total += e - b;
  }
  std::vector<uint64_t> counts(k * F, 0);
  // One region; its threads take work items dynamically: whole segments, and the segments larger
  // than a thread's share cut into pieces of that share (their counts summed after the region),
  // so that many small segments balance over the threads and one large one still uses them all.
  const int team = team_for(total, threads);
  const uint64_t share = std::max<uint64_t>(1, (total + uint64_t(team) - 1) / uint64_t(team));
  struct Item {
    uint64_t segment, begin, end;
    bool piece;
  };
  std::vector<Item> items;
  uint64_t pieces = 0;
  for (uint64_t s = 0; s < k; ++s) {
    const auto [b, e] = ranges[s];
    if (e - b <= share) {
      items.push_back({s, b, e, false});
      continue;
    }
    for (uint64_t at = b; at < e; at += share, ++pieces) items.push_back({s, at, std::min(at + share, e), true});
  }
  std::vector<uint64_t> piece_counts(pieces * F);  // [piece][partition], in item order
  std::vector<uint64_t*> out(items.size());
  for (size_t i = 0, next = 0; i < items.size(); ++i)
    out[i] = items[i].piece ? piece_counts.data() + (next++) * F : counts.data() + items[i].segment * F;
  const int64_t n = int64_t(items.size());
  RegionErrors errors;
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) if (n > 1)
  for (int64_t i = 0; i < n; ++i) {
    const Item& it = items[size_t(i)];
    errors.run([&] { count_own(keys, it.begin, it.end, fn, out[size_t(i)]); });
  }
  errors.rethrow();
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].piece)
      for (uint32_t p = 0; p < F; ++p) counts[items[i].segment * F + p] += out[i][p];
  return counts;
}

template <class K>
std::vector<uint64_t> histogram(const K* keys, uint64_t rows, PartitionFn fn, int threads) {
  return histogram(keys, std::vector<uint64_t>{0, rows}, fn, threads);
}

template <class K, class V>
std::vector<uint64_t> partition(const K* in_keys, const V* in_vals, uint64_t rows,
                                const std::vector<uint64_t>& segments, PartitionFn fn, K* out_keys,
                                V* out_vals, int threads) {
  std::vector<uint64_t> segs = segments.empty() ? std::vector<uint64_t>{0, rows} : segments;
  check_segments(segs, "partition: in_segments");
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

// --- partition straight into chunk images (PackChunksOp with partition_by) ----------------------------
//
// The scatter above with a different destination: positions of partition p (in the order
// partition() would give) map to chunk images instead of one output array. Each thread owns
// the same positions as in partition() (its counts, prefixed over threads), keeps per
// partition a cursor (image, row) and a write-combine line, and flushes a full line with
// streaming stores into the image's key and value columns (line-aligned: chunk.hpp's layout),
// adding the line's checksum terms to its sum for that image while the line is in L1. The
// headers, with the sums of every thread, are written last. So the tuples are read once and
// written once, as by partition() alone; the pack's second pass (read the partitioned copy,
// sum, write the images) is gone.

namespace {

// The checksum terms of `rows` rows whose first is row `first` of its chunk (vectorized where the
// CPU has AVX-512). The sum wraps, so any order and any split give the same checksum.
#define JL_ROW_TERMS(K, V)                                                                                    \
  JL_AVX512_CLONES uint64_t row_terms(const K* __restrict keys, const V* __restrict vals, uint64_t first,      \
                                     uint64_t rows) {                                                         \
    uint64_t sum = 0;                                                                                         \
    for (uint64_t i = 0; i < rows; ++i) sum += chunk_row_term(uint64_t(keys[i]), uint64_t(vals[i]), first + i); \
    return sum;                                                                                               \
  }
JL_FOR_EACH_KV(JL_ROW_TERMS)
#undef JL_ROW_TERMS

struct ChunkGeometry {
  char* out;
  uint64_t slot_bytes, vals_at;
  uint32_t slot_rows;
};
// Where a thread's next row of one partition goes.
struct ChunkCursor {
  uint64_t image;  // image index in the output
  uint32_t row;    // row in that image
  uint32_t from;   // first slot of the current line this thread writes (its first line may be shared)
  uint64_t left;   // rows of the partition this thread may still write (its count)
};

// Writes slots [from, end) of `line`, rows [base + from, base + end) of `image`, and adds their
// checksum terms to sums[image]. A whole line goes with streaming stores; part of one (shared
// with another thread, or the end of a chunk or of the partition) with plain stores.
// (Always inlined: in the AVX-512 clone of the scatter the line's checksum terms vectorize.)
template <class K, class V, bool kStream>
__attribute__((always_inline)) inline void flush_chunk_line(const ChunkGeometry& g, uint64_t image, uint32_t base,
                                                            uint32_t from, uint32_t end, const WcLine<K, V>& line,
                                                            uint64_t* sums) {
  constexpr uint32_t L = WcLine<K, V>::L;
  char* img = g.out + image * g.slot_bytes;
  K* dk = reinterpret_cast<K*>(img + kChunkHeaderBytes) + base;
  V* dv = reinterpret_cast<V*>(img + g.vals_at) + base;
  uint64_t terms = 0;
  for (uint32_t i = from; i < end; ++i) terms += chunk_row_term(uint64_t(line.keys[i]), uint64_t(line.vals[i]), base + i);
  sums[image] += terms;
  if (from == 0 && end == L) {
    store_bytes<kStream>(dk, line.keys, L * sizeof(K));
    store_bytes<kStream>(dv, line.vals, L * sizeof(V));
  } else {
    std::memcpy(dk + from, line.keys + from, (end - from) * sizeof(K));
    std::memcpy(dv + from, line.vals + from, (end - from) * sizeof(V));
  }
}

// Returns e, or the first row that found its partition's count used up (a slice whose counts
// were wrong: nothing is written past the rows the count gave it).
template <class K, class V, bool kStream>
__attribute__((always_inline)) inline uint64_t scatter_chunk_rows(const K* __restrict ik, const V* __restrict iv,
                                                                  uint64_t b, uint64_t e, PartitionFn fn,
                                                                  const ChunkGeometry& g, ChunkCursor* __restrict cur,
                                                                  WcLine<K, V>* __restrict buf, uint64_t* __restrict sums) {
  constexpr uint32_t L = WcLine<K, V>::L;
  const uint32_t last_row = g.slot_rows - 1;
  return for_each_row(ik, b, e, fn, [&](uint64_t i, uint32_t p) __attribute__((always_inline)) {
    const K k = ik[i];
    ChunkCursor& c = cur[p];
    if (c.left-- == 0) return false;
    const uint32_t slot = c.row & (L - 1);  // lines start at rows that are multiples of L in a chunk
    WcLine<K, V>& line = buf[p];
    line.keys[slot] = k;
    line.vals[slot] = iv[i];
    if (slot == L - 1 || c.row == last_row) {
      flush_chunk_line<K, V, kStream>(g, c.image, c.row - slot, c.from, slot + 1, line, sums);
      c.from = 0;
    }
    if (c.row == last_row) {
      c.row = 0;
      ++c.image;
    } else {
      ++c.row;
    }
    return true;
  });
}

// The scatter, cloned for AVX-512 per tuple format (with streaming stores or not).
#define JL_SCATTER_CHUNKS(K, V)                                                                                    \
  JL_AVX512_CLONES uint64_t scatter_chunk_rows_stream(const K* ik, const V* iv, uint64_t b, uint64_t e,           \
                                                      PartitionFn fn, const ChunkGeometry& g, ChunkCursor* cur,     \
                                                      WcLine<K, V>* buf, uint64_t* sums) {                          \
    return scatter_chunk_rows<K, V, true>(ik, iv, b, e, fn, g, cur, buf, sums);                                    \
  }                                                                                                                \
  JL_AVX512_CLONES uint64_t scatter_chunk_rows_cached(const K* ik, const V* iv, uint64_t b, uint64_t e,           \
                                                      PartitionFn fn, const ChunkGeometry& g, ChunkCursor* cur,     \
                                                      WcLine<K, V>* buf, uint64_t* sums) {                          \
    return scatter_chunk_rows<K, V, false>(ik, iv, b, e, fn, g, cur, buf, sums);                                   \
  }
JL_FOR_EACH_KV(JL_SCATTER_CHUNKS)
#undef JL_SCATTER_CHUNKS

// Scatters rows [b, e) from the cursors `cur` (left: this range's rows of each partition);
// returns whether every row found room and every count was used up.
template <class K, class V>
bool scatter_chunks(const K* ik, const V* iv, uint64_t b, uint64_t e, PartitionFn fn, bool stream,
                    const ChunkGeometry& g, ChunkCursor* cur, WcLine<K, V>* buf, uint64_t* sums) {
  constexpr uint32_t L = WcLine<K, V>::L;
  uint64_t done;
  if (stream) {
    done = scatter_chunk_rows_stream(ik, iv, b, e, fn, g, cur, buf, sums);
    _mm_sfence();
  } else {
    done = scatter_chunk_rows_cached(ik, iv, b, e, fn, g, cur, buf, sums);
  }
  bool exact = done == e;
  for (uint32_t p = 0; p < fn.fanout(); ++p) {  // the lines this thread left partly filled
    const ChunkCursor& c = cur[p];
    const uint32_t slot = c.row & (L - 1);
    if (slot > c.from) flush_chunk_line<K, V, false>(g, c.image, c.row - slot, c.from, slot, buf[p], sums);
    exact = exact && c.left == 0;
  }
  return exact;
}

}  // namespace

template <class K, class V>
uint64_t chunk_row_terms(const K* keys, const V* vals, uint64_t first, uint64_t rows) {
  return row_terms(keys, vals, first, rows);
}

template <class K, class V>
std::vector<uint64_t> partition_into_chunks(const K* keys, const V* vals, uint64_t rows, PartitionFn fn,
                                            const std::vector<uint64_t>& counts, const CountedSlices* slices,
                                            const ChunkTarget& target, int threads) {
  check_partition_fn(fn);
  const uint32_t F = fn.fanout();
  if (counts.size() != F || !target.first_seq || target.first_seq->size() != F)
    throw std::invalid_argument("partition_into_chunks: " + std::to_string(counts.size()) + " row counts and " +
                                std::to_string(target.first_seq ? target.first_seq->size() : 0) +
                                " sequence numbers for a fanout of " + std::to_string(F));
  if (target.slot_rows == 0 || target.slot_rows >= (1ULL << 32))
    throw std::invalid_argument("partition_into_chunks: slot_rows must be in [1, 2^32)");
  const ChunkGeometry g{target.out, chunk_slot_bytes(sizeof(K), sizeof(V), target.slot_rows),
                        chunk_vals_offset(sizeof(K), target.slot_rows), uint32_t(target.slot_rows)};
  // Image index of every partition's first chunk, and the offsets partition() would return.
  std::vector<uint64_t> first_image(F + 1, 0), offsets(F + 1, 0);
  for (uint32_t p = 0; p < F; ++p) {
    first_image[p + 1] = first_image[p] + (counts[p] + g.slot_rows - 1) / g.slot_rows;
    offsets[p + 1] = offsets[p] + counts[p];
  }
  const uint64_t images = first_image[F];
  if (images && (!g.out || target.out_bytes < images * g.slot_bytes))
    throw std::invalid_argument("partition_into_chunks: " + std::to_string(images) + " chunk images need " +
                                std::to_string(images * g.slot_bytes) + " bytes, the output holds " +
                                std::to_string(target.out_bytes));
  // Streaming stores need 16-byte aligned lines (the slots are 64-byte aligned from an aligned
  // output) and only pay off past the caches.
  const bool stream = uintptr_t(g.out) % 64 == 0 && images * g.slot_bytes >= kStreamingBytes;
  // [thread][image]: checksum terms; a thread's row padded past the cache line of the next one's.
  const uint64_t stride = (images + 7) / 8 * 8 + 8;
  // Cursors of a range of rows whose rows of partition p start at position start[p] of p and
  // number n[p].
  auto cursors = [&](const uint64_t* start, const uint64_t* n) {
    auto* cur = thread_scratch_array<ChunkCursor>(1, F);
    for (uint32_t p = 0; p < F; ++p) {
      const uint32_t row = uint32_t(start[p] % g.slot_rows);
      cur[p] = {first_image[p] + start[p] / g.slot_rows, row, row & (WcLine<K, V>::L - 1), n[p]};
    }
    return cur;
  };
  RegionErrors errors;
  std::vector<uint64_t> sums;
  int team = 1;
  if (slices) {
    // Counted already (the histogram pass counted each slice): each thread takes whole slices.
    const std::vector<uint64_t>& bounds = slices->bounds;
    const uint64_t k = bounds.size() < 2 ? 0 : bounds.size() - 1;
    if (k == 0 || bounds.front() != 0 || bounds.back() != rows || slices->counts.size() != k * F)
      throw std::invalid_argument("partition_into_chunks: " + std::to_string(bounds.size()) + " slice bounds (from 0 to " +
                                  std::to_string(rows) + ") and " + std::to_string(slices->counts.size()) +
                                  " slice counts for a fanout of " + std::to_string(F));
    std::vector<uint64_t> start(k * F);
    for (uint32_t p = 0; p < F; ++p) {
      uint64_t at = 0;
      for (uint64_t sl = 0; sl < k; ++sl) {
        start[sl * F + p] = at;
        at += slices->counts[sl * F + p];
      }
      if (at != counts[p])
        throw std::invalid_argument("the slices' rows of partition " + std::to_string(p) + " sum to " +
                                    std::to_string(at) + ", the plan says " + std::to_string(counts[p]) +
                                    " (nothing written)");
    }
    for (uint64_t sl = 0; sl < k; ++sl)
      if (bounds[sl + 1] < bounds[sl]) throw std::invalid_argument("partition_into_chunks: slice bounds are not ascending");
    team = int(std::max<uint64_t>(1, std::min<uint64_t>(k, uint64_t(std::max(threads, 1)))));
    sums.assign(size_t(team) * stride, 0);
    std::atomic<int64_t> wrong_slice{int64_t(k)};
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
    for (int64_t sl = 0; sl < int64_t(k); ++sl) {
      const int t = omp_get_thread_num();
      errors.run([&] {
        ChunkCursor* cur = cursors(start.data() + sl * F, slices->counts.data() + sl * F);
        auto* buf = thread_scratch_array<WcLine<K, V>>(2, F);
        if (!scatter_chunks(keys, vals, bounds[size_t(sl)], bounds[size_t(sl) + 1], fn, stream, g, cur, buf,
                            sums.data() + size_t(t) * stride)) {
          int64_t w = wrong_slice.load();
          while (sl < w && !wrong_slice.compare_exchange_weak(w, sl)) {
          }
        }
      });
    }
    errors.rethrow();
    if (wrong_slice.load() < int64_t(k)) {
      const size_t w = size_t(wrong_slice.load());
      throw std::invalid_argument("slice " + std::to_string(w) + " (rows " + std::to_string(bounds[w]) + " to " +
                                  std::to_string(bounds[w + 1]) +
                                  ") does not hold the rows its counts say: the input changed since it was counted "
                                  "(the chunk images are incomplete)");
    }
  } else {
    // Each thread counts its own range first (positions as partition() gives them).
    team = team_for(rows, std::max(threads, 1));
    sums.assign(size_t(team) * stride, 0);
    std::vector<uint64_t> own(size_t(team) * F), start(size_t(team) * F);  // [thread][partition]
    std::vector<uint64_t> found(F, 0);  // rows of each partition in the input
    std::atomic<bool> counted{true};
    int64_t wrong = -1;  // the first partition whose count differs from counts[]
#pragma omp parallel num_threads(team)
    {
      const int nt = omp_get_num_threads(), t = omp_get_thread_num();
      const Span mine = split(rows, uint64_t(nt), uint64_t(t));
      uint64_t* h = own.data() + size_t(t) * F;
      std::fill(h, h + F, 0);
      errors.run([&] {
        try {
          count_own(keys, mine.begin, mine.end, fn, h);
        } catch (...) {
          counted = false;
          throw;
        }
      });
#pragma omp barrier
#pragma omp single
      {
        for (uint32_t p = 0; p < F; ++p) {
          uint64_t at = 0;
          for (int u = 0; u < nt; ++u) {
            start[size_t(u) * F + p] = at;
            at += own[size_t(u) * F + p];
          }
          found[p] = at;
          if (at != counts[p] && wrong < 0) wrong = int64_t(p);
        }
      }
      errors.run([&] {
        if (!counted || wrong >= 0) return;  // nothing written: the error is raised below
        ChunkCursor* cur = cursors(start.data() + size_t(t) * F, h);
        auto* buf = thread_scratch_array<WcLine<K, V>>(2, F);
        scatter_chunks(keys, vals, mine.begin, mine.end, fn, stream, g, cur, buf, sums.data() + size_t(t) * stride);
      });
    }
    errors.rethrow();
    if (wrong >= 0)
      throw std::invalid_argument("partition " + std::to_string(wrong) + " has " +
                                  std::to_string(found[size_t(wrong)]) + " rows of the input, the plan says " +
                                  std::to_string(counts[size_t(wrong)]) + " (nothing written)");
  }
  // Headers: each image's fields and its checksum, the terms of every thread summed.
  for (uint32_t p = 0; p < F; ++p) {
    for (uint64_t i = first_image[p]; i < first_image[p + 1]; ++i) {
      const uint64_t c = i - first_image[p];
      ChunkHeader hd{};
      hd.seq = (*target.first_seq)[p] + c;
      hd.partition = target.partition_base + p;
      hd.rows = uint32_t(std::min<uint64_t>(g.slot_rows, counts[p] - c * g.slot_rows));
      hd.relation = target.relation;
      hd.epoch = target.epoch;
      uint64_t sum = chunk_header_term(hd.seq, hd.partition, hd.rows, hd.relation, hd.epoch);
      for (int u = 0; u < team; ++u) sum += sums[size_t(u) * stride + i];
      hd.checksum = sum;
      alignas(64) unsigned char line[kChunkHeaderBytes] = {};  // the padding is zero, not stale bytes
      std::memcpy(line, &hd, sizeof hd);
      std::memcpy(g.out + i * g.slot_bytes, line, sizeof line);
    }
  }
  return offsets;
}

#define JL_INSTANTIATE_CHUNKS(K, V)                                                                         \
  template uint64_t chunk_row_terms<K, V>(const K*, const V*, uint64_t, uint64_t);                          \
  template std::vector<uint64_t> partition_into_chunks<K, V>(const K*, const V*, uint64_t, PartitionFn,     \
                                                             const std::vector<uint64_t>&, const CountedSlices*, \
                                                             const ChunkTarget&, int);
JL_FOR_EACH_KV(JL_INSTANTIATE_CHUNKS)

#define JL_INSTANTIATE_PARTITION(K, V)                                                            \
  template std::vector<uint64_t> partition<K, V>(const K*, const V*, uint64_t,                    \
                                                 const std::vector<uint64_t>&, PartitionFn, K*, V*, \
                                                 int);
JL_FOR_EACH_KV(JL_INSTANTIATE_PARTITION)
template std::vector<uint64_t> histogram<uint32_t>(const uint32_t*, uint64_t, PartitionFn, int);
template std::vector<uint64_t> histogram<uint64_t>(const uint64_t*, uint64_t, PartitionFn, int);
template std::vector<uint64_t> histogram<uint32_t>(const uint32_t*, const std::vector<uint64_t>&, PartitionFn, int);
template std::vector<uint64_t> histogram<uint64_t>(const uint64_t*, const std::vector<uint64_t>&, PartitionFn, int);
template std::vector<uint64_t> histogram<uint32_t>(const uint32_t*, const std::vector<std::pair<uint64_t, uint64_t>>&,
                                                   PartitionFn, int);
template std::vector<uint64_t> histogram<uint64_t>(const uint64_t*, const std::vector<std::pair<uint64_t, uint64_t>>&,
                                                   PartitionFn, int);

}  // namespace joinlab::cpu
