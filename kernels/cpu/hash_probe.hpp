// Insert and probe loops shared by the global hash tables (Build/Probe) and the per-partition
// tables of the partitioned join. Probes go in groups of kGroup keys: all home slots are
// computed and prefetched first, then walked, so cache misses of one group overlap (group
// prefetching, Chen et al. 2004) when the table is larger than the caches.
//
// The slot function is a parameter: global tables use table_slot (the layout every backend
// shares, core/common/hashing.hpp); per-partition tables are private to the CPU join and use
// Fibonacci hashing (top bits of one multiply): cheaper, and on the arithmetic progressions that
// radix partitions of dense keys are, it clusters no more than a random hash (measured: 2.0-4.9
// slots per probe at 50% load over strides 2^4..2^16, table_slot 4.5).
#pragma once
#include <cstdint>
#if defined(__SSE4_1__)
#include <smmintrin.h>
#endif

#include "core/common/hashing.hpp"
#include "kernels/cpu/cpu_kernels.hpp"

namespace joinlab::cpu {

template <class K>
constexpr K kEmpty = K(~K(0));

constexpr int kGroup = 16;

struct SeededSlot {  // the shared layout
  uint64_t seed, slots;
  uint64_t operator()(uint64_t k) const { return table_slot(k, seed, slots); }
};
struct FibonacciSlot {  // slots = 2^(64 - shift)
  uint32_t shift;
  uint64_t operator()(uint64_t k) const { return (k * 0x9e3779b97f4a7c15ULL) >> shift; }
};
inline FibonacciSlot fibonacci_slot(uint64_t slots) {  // slots: a power of two >= 2
  return {uint32_t(64 - __builtin_ctzll(slots))};
}

// --- windowed linear probing (per-partition tables) ------------------------------------------
// A walk over a cluster looks at kWindow slots at once: one SIMD compare gives the slots equal
// to the key and the empty ones, and the matches are those before the first empty slot. The
// walk then costs no data-dependent branch per slot (the mispredicted loop exit of scalar
// probing is most of an in-cache probe's time). Needs kWindow readable slots past any slot a
// cluster reaches, so these tables do not wrap around: they have a tail instead.
constexpr uint32_t kWindow = 8;

struct WindowMasks {
  uint32_t equal, empty;  // bit i: slot i of the window
};
inline WindowMasks window_masks(const uint32_t* slots, uint32_t k) {
#if defined(__SSE4_1__)
  const __m128i key = _mm_set1_epi32(int(k)), none = _mm_set1_epi32(-1);
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(slots));
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(slots + 4));
  auto bits = [](__m128i x) { return uint32_t(_mm_movemask_ps(_mm_castsi128_ps(x))); };
  return {bits(_mm_cmpeq_epi32(a, key)) | bits(_mm_cmpeq_epi32(b, key)) << 4,
          bits(_mm_cmpeq_epi32(a, none)) | bits(_mm_cmpeq_epi32(b, none)) << 4};
#else
  WindowMasks m{0, 0};
  for (uint32_t i = 0; i < kWindow; ++i) {
    m.equal |= uint32_t(slots[i] == k) << i;
    m.empty |= uint32_t(slots[i] == kEmpty<uint32_t>) << i;
  }
  return m;
#endif
}
inline WindowMasks window_masks(const uint64_t* slots, uint64_t k) {
#if defined(__SSE4_1__)
  const __m128i key = _mm_set1_epi64x(int64_t(k)), none = _mm_set1_epi64x(-1);
  WindowMasks m{0, 0};
  for (uint32_t i = 0; i < kWindow; i += 2) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(slots + i));
    m.equal |= uint32_t(_mm_movemask_pd(_mm_castsi128_pd(_mm_cmpeq_epi64(x, key)))) << i;
    m.empty |= uint32_t(_mm_movemask_pd(_mm_castsi128_pd(_mm_cmpeq_epi64(x, none)))) << i;
  }
  return m;
#else
  WindowMasks m{0, 0};
  for (uint32_t i = 0; i < kWindow; ++i) {
    m.equal |= uint32_t(slots[i] == k) << i;
    m.empty |= uint32_t(slots[i] == kEmpty<uint64_t>) << i;
  }
  return m;
#endif
}

// Slot index of the first empty slot at or after `s`.
template <class K>
inline uint64_t first_empty_from(const K* keys, uint64_t s) {
  for (;; s += kWindow) {
    const uint32_t empty = window_masks(keys + s, kEmpty<K>).equal;
    if (empty) return s + uint64_t(__builtin_ctz(empty));
  }
}

// Emits every slot equal to k in the cluster that starts at s.
template <class K, class VR, class VS, class Emit>
inline void probe_window(const K* keys, const VR* vals, uint64_t s, K k, VS sv, Emit& emit) {
  for (;; s += kWindow) {
    const WindowMasks m = window_masks(keys + s, k);
    uint32_t hits = m.equal & (m.empty ? (m.empty & (0u - m.empty)) - 1 : ~0u);
    for (; hits; hits &= hits - 1) emit(k, vals[s + uint64_t(__builtin_ctz(hits))], sv);
    if (m.empty) return;
  }
}

// Inserts (k, v) at the first empty slot from its home slot `s` on.
template <class K, class V, bool kAtomic>
inline void insert_linear(const LinearTable<K, V>& t, uint64_t s, K k, V v) {
  const uint64_t mask = t.slots - 1;
  for (;;) {
    if (t.keys[s] == kEmpty<K>) {
      if constexpr (kAtomic) {
        K expected = kEmpty<K>;
        if (__atomic_compare_exchange_n(&t.keys[s], &expected, k, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
          t.vals[s] = v;
          return;
        }
      } else {
        t.keys[s] = k;
        t.vals[s] = v;
        return;
      }
    }
    s = (s + 1) & mask;
  }
}

// Pushes row `row` (its key and value already stored at keys[row], vals[row]) onto the chain of
// bucket b.
template <class K, class V, bool kAtomic>
inline void link_chained(const ChainedTable<K, V>& t, uint64_t b, uint32_t row) {
  uint32_t* head = &t.heads[b];
  if constexpr (kAtomic)
    t.next[row] = __atomic_exchange_n(head, row, __ATOMIC_RELAXED);
  else {
    t.next[row] = *head;
    *head = row;
  }
}

// Scalar probing of a table in the shared layout (it wraps around). A table built to capacity
// has no empty slot to stop at, so a walk stops after `slots` steps.
template <class K, class VR, class VS, class Slot, class Emit>
inline void probe_linear_rows(const LinearTable<K, VR>& t, Slot slot, const K* keys, const VS* vals,
                              uint64_t b, uint64_t e, bool prefetch, Emit& emit) {
  const uint64_t mask = t.slots - 1;
  uint64_t home[kGroup];
  for (uint64_t i = b; i < e; i += kGroup) {
    const int n = int(std::min<uint64_t>(kGroup, e - i));
    for (int j = 0; j < n; ++j) {
      home[j] = slot(uint64_t(keys[i + j]));
      if (prefetch) {
        __builtin_prefetch(&t.keys[home[j]]);
        __builtin_prefetch(&t.vals[home[j]]);
      }
    }
    for (int j = 0; j < n; ++j) {
      const K k = keys[i + j];
      uint64_t s = home[j];
      for (uint64_t step = 0; step < t.slots; ++step) {
        const K tk = t.keys[s];
        if (tk == kEmpty<K>) break;
        if (tk == k) emit(k, t.vals[s], vals[i + j]);
        s = (s + 1) & mask;
      }
    }
  }
}

// Probing a hash + row-id table: a slot's tag is compared first, the build key (fetched by
// row id) only on a tag match. Stops at an empty slot or after `slots` steps (a full table).
template <class K, class VR, class VS, class Emit>
inline void probe_rowid_rows(const RowIdTable<K, VR>& t, const K* keys, const VS* vals, uint64_t b, uint64_t e,
                             bool prefetch, Emit& emit) {
  const uint64_t mask = t.slots - 1;
  uint64_t home[kGroup];
  uint32_t tag[kGroup];
  for (uint64_t i = b; i < e; i += kGroup) {
    const int n = int(std::min<uint64_t>(kGroup, e - i));
    for (int j = 0; j < n; ++j) {
      const uint64_t h = table_hash(uint64_t(keys[i + j]), t.seed);
      home[j] = slot_of_hash(h, t.slots);
      tag[j] = tag_of_hash(h);
      if (prefetch) __builtin_prefetch(&t.words[home[j]]);
    }
    for (int j = 0; j < n; ++j) {
      const K k = keys[i + j];
      uint64_t s = home[j];
      for (uint64_t step = 0; step < t.slots; ++step) {
        const uint64_t w = t.words[s];
        if (w == ~uint64_t(0)) break;
        if (uint32_t(w >> 32) == tag[j] && t.keys[uint32_t(w)] == k) emit(k, t.vals[uint32_t(w)], vals[i + j]);
        s = (s + 1) & mask;
      }
    }
  }
}

template <class K, class VR, class VS, class Slot, class Emit>
inline void probe_chained_rows(const ChainedTable<K, VR>& t, Slot slot, const K* keys, const VS* vals,
                               uint64_t b, uint64_t e, bool prefetch, Emit& emit) {
  constexpr uint32_t kNone = ~0u;
  uint64_t home[kGroup];
  uint32_t first[kGroup];
  for (uint64_t i = b; i < e; i += kGroup) {
    const int n = int(std::min<uint64_t>(kGroup, e - i));
    for (int j = 0; j < n; ++j) {
      home[j] = slot(uint64_t(keys[i + j]));
      if (prefetch) __builtin_prefetch(&t.heads[home[j]]);
    }
    // Two stages of prefetching: the bucket heads, then the first entry of every chain.
    for (int j = 0; j < n; ++j) {
      first[j] = t.heads[home[j]];
      if (prefetch && first[j] != kNone) {
        __builtin_prefetch(&t.keys[first[j]]);
        __builtin_prefetch(&t.vals[first[j]]);
      }
    }
    for (int j = 0; j < n; ++j) {
      const K k = keys[i + j];
      for (uint32_t row = first[j]; row != kNone; row = t.next[row])
        if (t.keys[row] == k) emit(k, t.vals[row], vals[i + j]);
    }
  }
}

}  // namespace joinlab::cpu
