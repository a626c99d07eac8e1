// Pieces shared by the join kernels (global-table probe, partitioned join, merge join): table
// walks and the count / count-then-write / direct driver that runs a join kernel in passes.
#pragma once
#include "kernels/cuda/device_common.cuh"

namespace joinlab::cuda {

// --- walks over the global tables (layouts in core/exec/ops.hpp) ------------------------------
template <class K, class V>
__device__ __forceinline__ uint64_t home_of(const LinearTableRef<K, V>& t, K k) {
  return table_slot(uint64_t(k), t.seed, t.slots);
}
template <class K, class V>
__device__ __forceinline__ uint64_t home_of(const ChainedTableRef<K, V>& t, K k) {
  return table_slot(uint64_t(k), t.seed, t.buckets);
}
// First entry to look at: the key in the home slot, or the head row of the home bucket. Loaded
// for all of a thread's keys before any walk starts, so their cache misses overlap.
template <class K, class V>
__device__ __forceinline__ uint64_t peek(const LinearTableRef<K, V>& t, uint64_t home) {
  return uint64_t(__ldg(&t.keys[home]));
}
template <class K, class V>
__device__ __forceinline__ uint64_t peek(const ChainedTableRef<K, V>& t, uint64_t home) {
  return __ldg(&t.heads[home]);
}
template <class K, class V, class F>
__device__ __forceinline__ void walk(const LinearTableRef<K, V>& t, K k, uint64_t slot, uint64_t first, F&& f) {
  const uint64_t mask = t.slots - 1;
  K tk = K(first);
  // At most `slots` steps: a completely full table has no empty slot to stop at.
  for (uint64_t step = 0; tk != empty_key<K>() && step < t.slots; ++step) {
    if (tk == k) f(__ldg(&t.vals[slot]));
    slot = (slot + 1) & mask;
    tk = __ldg(&t.keys[slot]);
  }
}
template <class K, class V, class F>
__device__ __forceinline__ void walk(const ChainedTableRef<K, V>& t, K k, uint64_t, uint64_t first, F&& f) {
  for (uint32_t row = uint32_t(first); row != ~0u; row = __ldg(&t.next[row]))
    if (__ldg(&t.keys[row]) == k) f(__ldg(&t.vals[row]));
}

template <class K, class V>
__device__ __forceinline__ uint64_t home_of(const RowIdTableRef<K, V>& t, K k) {
  return slot_of_hash(table_hash(uint64_t(k), t.seed), t.slots);
}
template <class K, class V>
__device__ __forceinline__ uint64_t peek(const RowIdTableRef<K, V>& t, uint64_t home) {
  return __ldg(reinterpret_cast<const ull*>(&t.words[home]));
}
// Tag first; the build key (a dependent load by row id) only for slots whose tag matches.
template <class K, class V, class F>
__device__ __forceinline__ void walk(const RowIdTableRef<K, V>& t, K k, uint64_t slot, uint64_t first, F&& f) {
  const uint64_t mask = t.slots - 1;
  const uint32_t tag = tag_of_hash(table_hash(uint64_t(k), t.seed));
  uint64_t w = first;
  for (uint64_t step = 0; w != ~uint64_t(0) && step < t.slots; ++step) {
    if (uint32_t(w >> 32) == tag && __ldg(&t.keys[uint32_t(w)]) == k) f(__ldg(&t.vals[uint32_t(w)]));
    slot = (slot + 1) & mask;
    w = __ldg(reinterpret_cast<const ull*>(&t.words[slot]));
  }
}

// d_words[kCountWord] = offsets[n - 1] + counts[n - 1] (the total of a count pass).
__global__ void total_of_counts_kernel(const uint64_t* counts, const uint64_t* offsets, uint64_t n, uint64_t* d_words);

// Runs a join kernel in the passes its output mode needs. launch(write, unit_counts,
// unit_offsets) queues the kernel over `units` blocks:
//   write = false, unit_counts = null  -> add the block's matches to d_words[kCountWord] (CountOnly)
//   write = false, unit_counts != null -> store the block's matches in unit_counts[block]
//   write = true,  unit_offsets = null -> Direct: rows at positions from the cursor d_words[kCountWord]
//   write = true,  unit_offsets != null -> exact: block b writes rows from unit_offsets[b]
template <class Launch>
void run_join_passes(KernelContext& ctx, OutputMode mode, uint64_t units, uint64_t* d_words, Launch&& launch) {
  if (!units) return;
  if (mode == OutputMode::CountOnly) {
    launch(false, nullptr, nullptr);
  } else if (mode == OutputMode::Direct) {
    launch(true, nullptr, nullptr);
  } else {
    uint64_t* counts = ctx.scratch_array<uint64_t>(units);
    uint64_t* offsets = ctx.scratch_array<uint64_t>(units);
    launch(false, counts, nullptr);
    exclusive_scan(ctx, counts, offsets, units);
    total_of_counts_kernel<<<1, 1, 0, ctx.stream()>>>(counts, offsets, units, d_words);
    JL_CUDA_LAUNCHED("total_of_counts_kernel");
    launch(true, nullptr, offsets);
  }
}

// Sets up a block's emitter for the write pass (see run_join_passes); call from every thread.
template <class K, class VR, class VS>
__device__ void emitter_begin(BlockEmitter<K, VR, VS>& em, const JoinSinkRef<K, VR, VS>& sink,
                              unsigned char* staging, uint32_t cap, uint32_t* fill, ull* batch_at,
                              ull* local_cursor, const uint64_t* unit_offsets, uint64_t* d_words) {
  em.sink = sink;
  emitter_setup(em, staging, cap, fill, batch_at);
  if (unit_offsets) {
    em.cursor = local_cursor;
    em.base = unit_offsets[blockIdx.x];
    em.allowed = sink.first + d_words[kCountWord] <= sink.capacity;  // else write nothing at all
  } else {
    em.cursor = reinterpret_cast<ull*>(&d_words[kCountWord]);
    em.base = 0;
    em.allowed = true;
  }
  if (threadIdx.x == 0) {
    *fill = 0;
    *local_cursor = 0;
  }
  __syncthreads();
}

// Ends a count pass: the block's matches go to unit_counts[block] or into the total.
__device__ __forceinline__ void count_end(uint64_t mine, uint64_t* warp_sums, uint64_t* unit_counts,
                                          uint64_t* d_words) {
  const uint64_t total = block_sum(mine, warp_sums);
  if (threadIdx.x == 0) {
    if (unit_counts)
      unit_counts[blockIdx.x] = total;
    else if (total)
      atomic_add(&d_words[kCountWord], total);
  }
}

}  // namespace joinlab::cuda
