// Per-partition build and probe in shared memory (rui2017 3.2.2, phj). A work item is one block:
// a chunk of an R partition (at most what the shared-memory table holds) and a slice of the
// matching S partition. Normally an item is a whole partition pair; an oversized S partition
// (skew) is split into slices that several blocks probe against their own copy of the table, and
// an oversized R partition into chunks, each probed by every S slice (rui2017 3.2.3 uses
// dynamic parallelism for this; a host-built item list gives the same balance without it).
#include "kernels/cuda/join_common.cuh"

namespace joinlab::cuda {

namespace {

constexpr int kPjThreads = 512;
// Rows per thread per round (their loads are in flight together) and the output staging rows:
// one round's, so that the table (64 KB) and the staging area of two blocks share an SM. VT 4
// instead of 2 (with two rounds staged) took the join kernel at 2^27 rows from 2.96 to 2.39 ms on the H100
// (docs/benchmarks.md).
constexpr int kPjVT = 4;
constexpr uint32_t kPjRound = kPjThreads * kPjVT;
constexpr uint32_t kPjStage = kPjRound;
constexpr size_t kTableBudget = 64 * 1024;  // shared memory of one item's table
// Slot of a key in a shared-memory table of `slots` (a power of two): the high bits of a 32-bit
// multiplicative hash (Knuth). Keys of one partition share their low radix bits; the product's
// high bits still spread them, and it costs one multiply instead of table_slot's 64-bit ones.
template <class K>
__device__ __forceinline__ uint32_t smem_slot(K key, uint32_t slots) {
  const uint32_t folded = uint32_t(uint64_t(key) ^ (uint64_t(key) >> 32));
  return uint32_t((uint64_t(folded * 0x9e3779b1u) * slots) >> 32);
}

struct JoinItem {
  uint64_t r_begin, s_begin;
  uint32_t r_rows, s_rows;
};

// Item p = partition pair p (from offsets in device memory; empty pairs make empty items), and
// largest[0], largest[1]: the largest R and S partition (offsets that descend somewhere make a
// huge one, so the host then lists the items itself and finds the descent).
__global__ void items_of_partitions_kernel(const uint64_t* r_off, const uint64_t* s_off, uint64_t parts,
                                           JoinItem* items, unsigned long long* largest) {
  unsigned long long r_max = 0, s_max = 0;
  for (uint64_t p = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; p < parts; p += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t nr = r_off[p + 1] - r_off[p], ns = s_off[p + 1] - s_off[p];
    items[p] = JoinItem{r_off[p], s_off[p], uint32_t(nr), uint32_t(ns)};
    r_max = nr > r_max ? nr : r_max;
    s_max = ns > s_max ? ns : s_max;
  }
  for (int d = 16; d > 0; d /= 2) {
    const unsigned long long r = __shfl_down_sync(0xffffffffu, r_max, d), s = __shfl_down_sync(0xffffffffu, s_max, d);
    r_max = r > r_max ? r : r_max;
    s_max = s > s_max ? s : s_max;
  }
  if (threadIdx.x % 32 == 0) {
    atomicMax(&largest[0], r_max);
    atomicMax(&largest[1], s_max);
  }
}

constexpr size_t align16(size_t b) { return (b + 15) / 16 * 16; }

__host__ __device__ uint32_t pow2_at_least(uint64_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Table layout in shared memory for at most `rows` R rows: linear probing keeps slots >= 2 rows
// (load <= 50%); chaining keeps heads (buckets >= rows), next, and the rows themselves.
template <class K, class VR, bool kChained>
struct SmemTable {
  __host__ __device__ static uint32_t slots_for(uint32_t rows) { return pow2_at_least(max(kChained ? rows : 2 * rows, 32u)); }
  static size_t bytes(uint32_t rows) {
    const uint32_t slots = slots_for(rows);
    if (!kChained) return align16(size_t(slots) * sizeof(K)) + align16(size_t(slots) * sizeof(VR));
    return align16(size_t(slots) * 4) + align16(size_t(rows) * 4) + align16(size_t(rows) * sizeof(K)) +
           align16(size_t(rows) * sizeof(VR));
  }
  static uint32_t max_rows() {  // largest power of two whose table fits the budget
    uint32_t rows = 1;
    while (bytes(rows * 2) <= kTableBudget) rows *= 2;
    return rows;
  }
};

template <class K, class VR, class VS, bool kChained, bool kWrite>
__global__ void __launch_bounds__(kPjThreads, 2) partitioned_join_kernel(const K* rk, const VR* rv, const K* sk,
                                                                      const VS* sv, const JoinItem* items,
                                                                      uint32_t table_rows, JoinSinkRef<K, VR, VS> sink,
                                                                      uint64_t* unit_counts, const uint64_t* unit_offsets,
                                                                      uint64_t* d_words) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ uint32_t fill;
  __shared__ ull batch_at, local_cursor;
  __shared__ uint64_t warp_sums[32];
  using Table = SmemTable<K, VR, kChained>;
  const JoinItem it = items[blockIdx.x];
  const uint32_t slots = Table::slots_for(it.r_rows), mask = slots - 1;
  const uint32_t max_slots = Table::slots_for(table_rows);

  // Carve the table (sized for the launch's largest item) and the staging area.
  unsigned char* p = smem;
  K* tk;
  VR* tv;
  uint32_t *heads = nullptr, *next = nullptr;
  if (!kChained) {
    tk = reinterpret_cast<K*>(p);
    p += align16(size_t(max_slots) * sizeof(K));
    tv = reinterpret_cast<VR*>(p);
    p += align16(size_t(max_slots) * sizeof(VR));
  } else {
    heads = reinterpret_cast<uint32_t*>(p);
    p += align16(size_t(max_slots) * 4);
    next = reinterpret_cast<uint32_t*>(p);
    p += align16(size_t(table_rows) * 4);
    tk = reinterpret_cast<K*>(p);
    p += align16(size_t(table_rows) * sizeof(K));
    tv = reinterpret_cast<VR*>(p);
    p += align16(size_t(table_rows) * sizeof(VR));
  }
  BlockEmitter<K, VR, VS> em;
  if (kWrite) emitter_begin(em, sink, p, kPjStage, &fill, &batch_at, &local_cursor, unit_offsets, d_words);

  // Build.
  for (uint32_t i = threadIdx.x; i < slots; i += kPjThreads) {
    if (kChained) heads[i] = ~0u; else tk[i] = empty_key<K>();
  }
  __syncthreads();
  for (uint32_t base = 0; base < it.r_rows; base += kPjThreads * kPjVT) {
    K k[kPjVT];
    VR v[kPjVT];
#pragma unroll
    for (int u = 0; u < kPjVT; ++u) {  // all loads first: their latencies overlap
      const uint32_t i = base + u * kPjThreads + threadIdx.x;
      if (i < it.r_rows) {
        k[u] = rk[it.r_begin + i];
        v[u] = rv[it.r_begin + i];
      }
    }
#pragma unroll
    for (int u = 0; u < kPjVT; ++u) {
      const uint32_t i = base + u * kPjThreads + threadIdx.x;
      if (i >= it.r_rows) continue;
      uint32_t s = smem_slot(k[u], slots);
      if (kChained) {
        tk[i] = k[u];
        tv[i] = v[u];
        next[i] = atomicExch(&heads[s], i);
      } else {
        while (atomic_cas(&tk[s], empty_key<K>(), k[u]) != empty_key<K>()) s = (s + 1) & mask;
        tv[s] = v[u];
      }
    }
  }
  __syncthreads();

  // Probe, VT S rows per thread per round.
  uint64_t matches = 0;
  for (uint32_t round = 0; round < it.s_rows; round += kPjRound) {
    K k[kPjVT];
    VS v[kPjVT];
#pragma unroll
    for (int i = 0; i < kPjVT; ++i) {
      const uint32_t idx = round + i * kPjThreads + threadIdx.x;
      if (idx < it.s_rows) {
        k[i] = sk[it.s_begin + idx];
        if (kWrite) v[i] = sv[it.s_begin + idx];
      }
    }
#pragma unroll
    for (int i = 0; i < kPjVT; ++i) {
      const uint32_t idx = round + i * kPjThreads + threadIdx.x;
      if (idx >= it.s_rows) continue;
      const uint32_t home = smem_slot(k[i], slots);
      if (kChained) {
        for (uint32_t r = heads[home]; r != ~0u; r = next[r])
          if (tk[r] == k[i]) {
            if (kWrite) em.emit(k[i], tv[r], v[i]); else ++matches;
          }
      } else {
        for (uint32_t s = home;; s = (s + 1) & mask) {
          const K t = tk[s];
          if (t == empty_key<K>()) break;
          if (t == k[i]) {
            if (kWrite) em.emit(k[i], tv[s], v[i]); else ++matches;
          }
        }
      }
    }
    if (kWrite) em.end_round(kPjRound);
  }
  if (kWrite) {
    __syncthreads();
    em.flush();
  } else {
    count_end(matches, warp_sums, unit_counts, d_words);
  }
}

// Items of every non-empty pair: R partitions in chunks of at most chunk_rows, each probed by
// every slice of at most slice_rows of the S partition; table_rows = the largest chunk.
std::vector<JoinItem> split_items(const std::vector<uint64_t>& r_off, const std::vector<uint64_t>& s_off,
                                  uint32_t chunk_rows, uint64_t slice_rows, uint32_t& table_rows) {
  std::vector<JoinItem> items;
  items.reserve(r_off.size() - 1);
  for (uint64_t p = 0; p + 1 < r_off.size(); ++p) {
    const uint64_t nr = r_off[p + 1] - r_off[p], ns = s_off[p + 1] - s_off[p];
    if (!nr || !ns) continue;
    for (uint64_t rb = 0; rb < nr; rb += chunk_rows) {
      const uint32_t rn = uint32_t(std::min<uint64_t>(chunk_rows, nr - rb));
      table_rows = std::max(table_rows, rn);
      for (uint64_t sb = 0; sb < ns; sb += slice_rows)
        items.push_back({r_off[p] + rb, s_off[p] + sb, rn, uint32_t(std::min<uint64_t>(slice_rows, ns - sb))});
    }
  }
  return items;
}

template <class K, class VR, class VS, bool kChained>
void partitioned_join_impl(KernelContext& ctx, const K* rk, const VR* rv, const std::vector<uint64_t>& r_off,
                           const K* sk, const VS* sv, const std::vector<uint64_t>& s_off, const uint64_t* r_dev,
                           const uint64_t* s_dev, const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words) {
  using Table = SmemTable<K, VR, kChained>;
  const uint32_t chunk_rows = Table::max_rows();
  const uint64_t parts = r_off.size() - 1;
  const uint64_t s_total = s_off.back() - s_off.front();
  // S slices: a whole partition unless it is much larger than a block's fair share.
  const uint64_t fair = s_total / (uint64_t(ctx.info().sm_count) * 32);
  const uint64_t slice_rows = std::max<uint64_t>(8 * kPjRound, (fair + kPjRound - 1) / kPjRound * kPjRound);
  uint32_t table_rows = 1;
  uint64_t n_items = 0;
  const JoinItem* d_items = nullptr;
  // Every pair one item, if none needs splitting and the offsets are on the device: the items
  // and the largest partitions are found there, so the kernel does not wait for the host to read
  // 2^16 offsets per relation (0.16 ms of idle H100 with 8+8-byte tuples) and to list and upload
  // items (0.5 ms at 2^27 rows). The host reads two words.
  if (r_dev && s_dev && parts <= uint64_t(INT32_MAX)) {
    JoinItem* list = ctx.scratch_array<JoinItem>(parts);
    unsigned long long* d_largest = ctx.scratch_array<unsigned long long>(2);
    JL_CUDA_CHECK(cudaMemsetAsync(d_largest, 0, 2 * sizeof(*d_largest), ctx.stream()));
    items_of_partitions_kernel<<<grid_for(parts, 256, 8192), 256, 0, ctx.stream()>>>(r_dev, s_dev, parts, list,
                                                                                    d_largest);
    JL_CUDA_LAUNCHED("items_of_partitions_kernel");
    unsigned long long largest[2];
    JL_CUDA_CHECK(cudaMemcpyAsync(largest, d_largest, sizeof(largest), cudaMemcpyDeviceToHost, ctx.stream()));
    ctx.sync();
    if (largest[0] <= chunk_rows && largest[1] <= slice_rows) {
      d_items = list;
      n_items = parts;
      table_rows = uint32_t(std::max<uint64_t>(1, largest[0]));
    }
  }
  if (!d_items) {  // the general case, listed here: oversized pairs split into chunks and slices
    check_ascending(r_off, "partitioned join: R partition");
    check_ascending(s_off, "partitioned join: S partition");
    const std::vector<JoinItem> items = split_items(r_off, s_off, chunk_rows, slice_rows, table_rows);
    if (items.empty()) return;
    if (items.size() > uint64_t(INT32_MAX))
      throw RuntimeError("partitioned join: " + std::to_string(items.size()) + " work items exceed one launch");
    d_items = ctx.upload(items);
    n_items = items.size();
  }
  ctx.mark("work items");  // what the join spends before its kernel runs (host list and upload, or the device's)
  const size_t table_smem = Table::bytes(table_rows);
  const size_t write_smem = table_smem + emitter_smem<K, VR, VS>(kPjStage);
  allow_shared_memory(partitioned_join_kernel<K, VR, VS, kChained, false>, table_smem);
  allow_shared_memory(partitioned_join_kernel<K, VR, VS, kChained, true>, write_smem);
  prefer_shared_memory(partitioned_join_kernel<K, VR, VS, kChained, false>);
  prefer_shared_memory(partitioned_join_kernel<K, VR, VS, kChained, true>);
  const unsigned grid = unsigned(n_items);
  run_join_passes(ctx, sink.mode, n_items, d_words, [&](bool write, uint64_t* counts, const uint64_t* offsets) {
    if (write)
      partitioned_join_kernel<K, VR, VS, kChained, true><<<grid, kPjThreads, write_smem, ctx.stream()>>>(
          rk, rv, sk, sv, d_items, table_rows, sink, counts, offsets, d_words);
    else
      partitioned_join_kernel<K, VR, VS, kChained, false><<<grid, kPjThreads, table_smem, ctx.stream()>>>(
          rk, rv, sk, sv, d_items, table_rows, sink, counts, offsets, d_words);
    JL_CUDA_LAUNCHED("partitioned_join_kernel");
    ctx.mark(write ? "partitioned_join_kernel (write)" : "partitioned_join_kernel (count)");
  });
}

}  // namespace

template <class K, class VR, class VS>
void partitioned_join(KernelContext& ctx, const K* r_keys, const VR* r_vals, const std::vector<uint64_t>& r_offsets,
                      const K* s_keys, const VS* s_vals, const std::vector<uint64_t>& s_offsets,
                      const uint64_t* r_dev_offsets, const uint64_t* s_dev_offsets, TableKind kind,
                      const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words) {
  if (r_offsets.size() != s_offsets.size())
    throw RuntimeError("partitioned join: R has " + std::to_string(r_offsets.size()) + " partition offsets, S has " +
                       std::to_string(s_offsets.size()));
  if (r_offsets.size() < 2) return;
  if (kind == TableKind::Chained)
    partitioned_join_impl<K, VR, VS, true>(ctx, r_keys, r_vals, r_offsets, s_keys, s_vals, s_offsets, r_dev_offsets,
                                           s_dev_offsets, sink, d_words);
  else
    partitioned_join_impl<K, VR, VS, false>(ctx, r_keys, r_vals, r_offsets, s_keys, s_vals, s_offsets, r_dev_offsets,
                                            s_dev_offsets, sink, d_words);
}

#define JL_PJOIN(K, VR, VS)                                                                                     \
  template void partitioned_join<K, VR, VS>(KernelContext&, const K*, const VR*, const std::vector<uint64_t>&, \
                                            const K*, const VS*, const std::vector<uint64_t>&, const uint64_t*,  \
                                            const uint64_t*, TableKind,                                          \
                                            const JoinSinkRef<K, VR, VS>&, uint64_t*);
JL_PJOIN(uint32_t, uint32_t, uint32_t)
JL_PJOIN(uint32_t, uint32_t, uint64_t)
JL_PJOIN(uint32_t, uint64_t, uint32_t)
JL_PJOIN(uint32_t, uint64_t, uint64_t)
JL_PJOIN(uint64_t, uint32_t, uint32_t)
JL_PJOIN(uint64_t, uint32_t, uint64_t)
JL_PJOIN(uint64_t, uint64_t, uint32_t)
JL_PJOIN(uint64_t, uint64_t, uint64_t)

}  // namespace joinlab::cuda
