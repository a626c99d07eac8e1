// Sorting (rui2017 3.3.1, smj). Radix sort sorts only the key bits that vary (dense keys of 2^27
// rows have 28 bits, and 8-byte keys with small values sort like 4-byte ones), in one of two ways:
//  - MSD (default): the high bits partition the rows with the partition kernels (partition.cu:
//    one or two scatter passes, partitions in digit order), then one block per partition sorts it
//    on its remaining low bits in shared memory, in place, by counting sort (one on-chip pass:
//    a counter per low-bit value). Three passes over memory for 28-bit keys where an LSD sort with
//    8-bit digits makes four. Partitions too large for a block (skew) are gathered and sorted
//    together by one CUB device sort.
//    The key range is estimated from a sample (a full max reduction cost 0.25 ms per 2^27 keys on
//    the H100, 4% of smj): the partitioning counts keys above the sampled range as its top key
//    (PartitionFn::key_limit), so they all land, in order, in the last partition, which the block
//    or the host then sorts on all its bits.
//  - onesweep (cluster option radix_sort=onesweep): CUB's LSD onesweep sort over all the bits.
// The merge variant is CUB's stable merge sort (any comparator; what rui2017 uses).
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_memcpy.cuh>
#include <cub/device/device_merge_sort.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>

#include <tuple>
#include <utility>

#include "core/exec/msd_sort_plan.hpp"
#include "kernels/cuda/device_common.cuh"

namespace joinlab::cuda {

namespace {

struct KeyLess {
  template <class K>
  __device__ bool operator()(const K& a, const K& b) const { return a < b; }
};
template <class T>
__device__ __forceinline__ T smaller(T a, T b) { return b < a ? b : a; }
template <class T>
__device__ __forceinline__ T larger(T a, T b) { return a < b ? b : a; }
struct KeyMax {
  template <class K>
  __device__ K operator()(const K& a, const K& b) const { return larger(a, b); }
};
struct KeyMin {
  template <class K>
  __device__ K operator()(const K& a, const K& b) const { return smaller(a, b); }
};

// --- MSD: on-chip counting sort of one partition ---------------------------------------------
// A block of 256 threads sorts up to 5120 rows (20 per thread) on up to 13 low bits; the MSD
// partitioning aims at ~4 Ki rows per partition, so that a uniform partition (4096 +- 64 rows)
// never overflows, and 3 blocks of 8-byte tuples (40 KB of rows + 16 KB of counters) share an SM
// (one block's load, sort and store phases overlap the others'). Measured on the H100 (smj at 2^27 rows,
// 2026-11-22): 512 threads x 10 rows +0.55 ms, 2 Ki-row partitions (256 x 12 or 512 x 6) +1.0
// and +1.3 ms (a second partition pass grows, the local sorts do not shrink as much).
using msd_sort::kLocalCapacity;
constexpr int kLocalThreads = int(msd_sort::kLocalThreads);
constexpr int kLocalItems = int(msd_sort::kLocalItems);

// Counter c lives at c + c / 32: a thread scans a run of consecutive counters, and the padding
// puts the runs of a warp's threads in distinct banks.
__host__ __device__ constexpr uint32_t padded(uint32_t c) { return c + c / 32; }

template <class K, class V>
size_t local_smem(uint32_t low_bits) {
  return size_t(padded(1u << low_bits)) * sizeof(uint32_t) + size_t(kLocalCapacity) * (sizeof(K) + sizeof(V));
}

// What the local sort leaves to the host: partitions too large for a block, and whether the last
// partition holds keys above the planned range that its block could not order.
struct LocalSortFlags {
  uint32_t oversized;
  uint32_t unsorted_last;
};

// Block p sorts partition p (rows offsets[p] .. offsets[p + 1] of keys/vals, in place) on its key
// bits below `low_bits` (the bits above are the partition's digit, the same for all its rows):
// count each low value, scan the counts into positions, place each row at its position in
// shared memory, write the partition back. Partitions larger than the block's capacity are left
// to the caller, counted in flags->oversized (so that the host, in the common case, reads one
// word instead of every offset). Rows of equal keys may change order (the sort is not stable).
// Keys above key_limit (only in the last partition: the partitioning counted them as key_limit)
// fall in the top counter with key_limit itself; the block orders that run by rank when it is at
// most a row per thread, else it leaves the partition to the host (flags->unsorted_last).
template <class K, class V, int kThreads = kLocalThreads>
__global__ void __launch_bounds__(kThreads) local_counting_sort_kernel(K* keys, V* vals, const uint64_t* offsets,
                                                                       uint32_t low_bits, uint64_t key_limit,
                                                                       LocalSortFlags* flags) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ uint32_t top_begin;
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr uint32_t kCapacity = uint32_t(kThreads) * kLocalItems;
  const uint64_t begin = offsets[blockIdx.x], end = offsets[blockIdx.x + 1];
  if (end - begin > kCapacity) {
    if (threadIdx.x == 0) atomicAdd(&flags->oversized, 1u);
    return;
  }
  if (end == begin) return;
  const uint32_t n = uint32_t(end - begin);
  const uint32_t values = 1u << low_bits, per_thread = (values + kThreads - 1) / kThreads;
  const uint64_t mask = values - 1;
  K* stage_k = reinterpret_cast<K*>(smem);
  V* stage_v = reinterpret_cast<V*>(stage_k + kCapacity);
  uint32_t* count = reinterpret_cast<uint32_t*>(stage_v + kCapacity);
  const int tid = threadIdx.x;
  for (uint32_t i = tid; i < padded(values); i += kThreads) count[i] = 0;
  __syncthreads();

  K k[kLocalItems];
  V v[kLocalItems];
  bool above = false;  // a key above key_limit: counted as key_limit
#pragma unroll
  for (int i = 0; i < kLocalItems; ++i) {
    const uint32_t at = uint32_t(i) * kThreads + tid;
    if (at < n) {
      k[i] = keys[begin + at];
      v[i] = vals[begin + at];
      above |= uint64_t(k[i]) > key_limit;
      atomicAdd(&count[padded(uint32_t(smaller(uint64_t(k[i]), key_limit) & mask))], 1u);
    }
  }
  above = __syncthreads_or(above);
  // Exclusive scan of the counts: thread t owns counters [t * per_thread, (t + 1) * per_thread).
  uint32_t sum = 0;
  for (uint32_t j = 0; j < per_thread; ++j) {
    const uint32_t c = tid * per_thread + j;
    if (c < values) sum += count[padded(c)];
  }
  uint32_t run = 0;
  Scan(scan_storage).ExclusiveSum(sum, run);
  for (uint32_t j = 0; j < per_thread; ++j) {
    const uint32_t c = tid * per_thread + j;
    if (c < values) {
      const uint32_t x = count[padded(c)];
      count[padded(c)] = run;
      run += x;
    }
  }
  __syncthreads();
  // The counter key_limit's rows fall in (all low bits set: key_limit is 2^b - 1).
  if (above && tid == 0) top_begin = count[padded(uint32_t(key_limit & mask))];
#pragma unroll
  for (int i = 0; i < kLocalItems; ++i) {
    if (uint32_t(i) * kThreads + tid < n) {
      const uint32_t pos = atomicAdd(&count[padded(uint32_t(smaller(uint64_t(k[i]), key_limit) & mask))], 1u);
      stage_k[pos] = k[i];
      stage_v[pos] = v[i];
    }
  }
  __syncthreads();
  if (above) {  // order the top run [top_begin, n) by rank: one row per thread
    const uint32_t first = top_begin, m = n - first;
    if (m > uint32_t(kThreads)) {
      if (tid == 0) flags->unsorted_last = 1;
      return;
    }
    K mk{};
    V mv{};
    uint32_t rank = 0;
    if (uint32_t(tid) < m) {
      mk = stage_k[first + tid];
      mv = stage_v[first + tid];
      for (uint32_t j = 0; j < m; ++j) {
        const K o = stage_k[first + j];
        rank += o < mk || (o == mk && j < uint32_t(tid));
      }
    }
    __syncthreads();
    if (uint32_t(tid) < m) {
      stage_k[first + rank] = mk;
      stage_v[first + rank] = mv;
    }
    __syncthreads();
  }
  for (uint32_t at = tid; at < n; at += kThreads) {
    keys[begin + at] = stage_k[at];
    vals[begin + at] = stage_v[at];
  }
}

// A copy of rows [0, n) of keys/vals in scratch memory: CUB's radix sorts read and write
// distinct arrays, so sorting in place goes through one.
template <class K, class V>
std::pair<K*, V*> scratch_copy(KernelContext& ctx, const K* keys, const V* vals, uint64_t n) {
  K* k = ctx.scratch_array<K>(n);
  V* v = ctx.scratch_array<V>(n);
  JL_CUDA_CHECK(cudaMemcpyAsync(k, keys, n * sizeof(K), cudaMemcpyDefault, ctx.stream()));
  JL_CUDA_CHECK(cudaMemcpyAsync(v, vals, n * sizeof(V), cudaMemcpyDefault, ctx.stream()));
  return {k, v};
}

// CUB's radix sort of n pairs on bits [0, end_bit) (temporary storage from scratch).
template <class K, class V>
void cub_radix_sort(KernelContext& ctx, const K* in_k, K* out_k, const V* in_v, V* out_v, uint64_t n, int end_bit) {
  size_t temp = 0;
  JL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, in_k, out_k, in_v, out_v, int64_t(n), 0, end_bit,
                                                ctx.stream()));
  void* d_temp = ctx.scratch(temp);
  JL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(d_temp, temp, in_k, out_k, in_v, out_v, int64_t(n), 0, end_bit,
                                                ctx.stream()));
}

// Sorts n pairs in place on bits [0, end_bit): CUB sorts a scratch copy back into place.
template <class K, class V>
void sort_run_in_place(KernelContext& ctx, K* keys, V* vals, uint64_t n, int end_bit) {
  const auto [tmp_k, tmp_v] = scratch_copy(ctx, keys, vals, n);
  cub_radix_sort(ctx, tmp_k, keys, tmp_v, vals, n, end_bit);
}

// Copies n runs in one launch (CUB's batched copy): run i is bytes[i] bytes from src[i] to dst[i].
// `table` holds the 3 n words src..., dst..., bytes... (pointers as 64-bit words).
void batched_copy(KernelContext& ctx, const std::vector<uint64_t>& table) {
  const int64_t n = int64_t(table.size() / 3);
  if (n == 0) return;
  const uint64_t* d = ctx.upload(table);
  static_assert(sizeof(void*) == sizeof(uint64_t), "pointers are uploaded as 64-bit words");
  const auto* src = reinterpret_cast<void* const*>(d);
  const auto* dst = reinterpret_cast<void* const*>(d + n);
  size_t temp = 0;
  JL_CUDA_CHECK(cub::DeviceMemcpy::Batched(nullptr, temp, src, dst, d + 2 * n, n, ctx.stream()));
  void* d_temp = ctx.scratch(temp);
  JL_CUDA_CHECK(cub::DeviceMemcpy::Batched(d_temp, temp, src, dst, d + 2 * n, n, ctx.stream()));
}

// Sorts the runs [begin[i], begin[i] + rows[i]) of keys/vals in place, on bits [0, end_bit), where
// every key of run i is below every key of run i + 1 (MSD partitions in digit order): gathered
// into one array, sorted by one CUB device sort, copied back. One sort however many runs there
// are: a device sort per run costs a launch sequence each (hot keys make hundreds of runs), and
// CUB's segmented sort gives a run one block (on the H100, 0.1 to 0.3 ms for runs of 16 Ki rows,
// 1.9 ms for a Zipf 1.5 hot key's 0.8 M rows).
template <class K, class V>
void sort_runs_together(KernelContext& ctx, K* keys, V* vals, const std::vector<uint64_t>& begin,
                        const std::vector<uint64_t>& rows, int end_bit) {
  const size_t n = begin.size();
  if (n == 1) return sort_run_in_place(ctx, keys + begin[0], vals + begin[0], rows[0], end_bit);  // nothing to gather
  std::vector<uint64_t> at(n);
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) at[i] = total, total += rows[i];
  K* gathered_k = ctx.scratch_array<K>(total);
  V* gathered_v = ctx.scratch_array<V>(total);
  K* sorted_k = ctx.scratch_array<K>(total);
  V* sorted_v = ctx.scratch_array<V>(total);
  // Keys and values of every run: from (from_k, from_v) at from_at to (to_k, to_v) at to_at.
  auto copies = [&](const K* from_k, const V* from_v, const std::vector<uint64_t>& from_at, K* to_k, V* to_v,
                    const std::vector<uint64_t>& to_at) {
    std::vector<uint64_t> t(6 * n);
    for (size_t i = 0; i < n; ++i) {
      t[i] = uint64_t(uintptr_t(from_k + from_at[i]));
      t[n + i] = uint64_t(uintptr_t(from_v + from_at[i]));
      t[2 * n + i] = uint64_t(uintptr_t(to_k + to_at[i]));
      t[3 * n + i] = uint64_t(uintptr_t(to_v + to_at[i]));
      t[4 * n + i] = rows[i] * sizeof(K);
      t[5 * n + i] = rows[i] * sizeof(V);
    }
    batched_copy(ctx, t);
  };
  copies(keys, vals, begin, gathered_k, gathered_v, at);
  cub_radix_sort(ctx, gathered_k, sorted_k, gathered_v, sorted_v, total, end_bit);
  copies(sorted_k, sorted_v, at, keys, vals, begin);
}

// Sorts the partitions the blocks could not: those with more rows than a block holds, all
// together on the planned bits [0, end_bit) (sort_runs_together), and the last one on all its
// bits where it may hold keys above the planned range (`speculative`: it is oversized, or its
// block left it unsorted).
template <class K, class V>
void sort_oversized(KernelContext& ctx, K* keys, V* vals, const uint64_t* d_offsets, uint32_t fanout,
                    uint32_t low_bits, int end_bit, bool speculative, const LocalSortFlags* d_flags) {
  LocalSortFlags flags{};
  JL_CUDA_CHECK(cudaMemcpyAsync(&flags, d_flags, sizeof(flags), cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.sync();
  if (flags.oversized == 0 && !flags.unsorted_last) return;
  // Every offset where some partition is oversized; the last partition's two otherwise.
  const uint32_t first = flags.oversized ? 0 : fanout - 1;
  std::vector<uint64_t> offsets(fanout + 1 - first);
  JL_CUDA_CHECK(cudaMemcpyAsync(offsets.data(), d_offsets + first, offsets.size() * sizeof(uint64_t),
                                cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.sync();
  std::vector<uint64_t> run_begin, run_rows;
  for (uint32_t p = first; p < fanout; ++p) {
    const uint64_t b = offsets[p - first], e = offsets[p + 1 - first];
    const bool big = e - b > kLocalCapacity;
    if (p == fanout - 1 && speculative && (big || flags.unsorted_last)) {
      sort_run_in_place(ctx, keys + b, vals + b, e - b, int(8 * sizeof(K)));
      ctx.mark("cub::DeviceRadixSort::SortPairs (last partition)");
      continue;
    }
    if (!big || low_bits == 0) continue;  // sorted by its block, or all its keys are equal
    run_begin.push_back(b);
    run_rows.push_back(e - b);
  }
  if (run_begin.empty()) return;
  sort_runs_together(ctx, keys, vals, run_begin, run_rows, end_bit);
  ctx.mark("cub::DeviceRadixSort::SortPairs (oversized partitions)");
}

// Partition bits for an MSD sort of `rows` keys in [0, max_key] (end_bit bits): the bits above
// those left to the blocks (msd_sort::local_bits). Returns -1 where the partitioning would need
// more than two passes (wide sparse keys: onesweep sorts those).
int msd_partition_bits(const DeviceInfo& info, uint32_t key_bytes, uint32_t val_bytes, uint64_t rows,
                       uint64_t min_key, uint64_t max_key, int end_bit) {
  const int bits = end_bit - msd_sort::local_bits(double(rows), double(max_key), end_bit, double(min_key));
  return bits > int(2 * max_one_pass_bits(info, key_bytes, val_bytes)) ? -1 : bits;
}

// MSD sort on bits [0, end_bit) of keys up to key_limit, the rest (if any) counted as key_limit
// by the partitioning and sorted with the last partition (key_limit < the type's largest key:
// `speculative`, end_bit came from a sample).
template <class K, class V>
void msd_sort(KernelContext& ctx, const K* in_k, const V* in_v, uint64_t rows, K* out_k, V* out_v, int end_bit,
              uint32_t bits, uint64_t key_limit) {
  const uint32_t low_bits = uint32_t(end_bit) - bits;
  const uint32_t fanout = 1u << bits;
  uint64_t* d_offsets;
  if (bits > 0) {
    d_offsets = ctx.scratch_array<uint64_t>(fanout + 1);
    PartitionFn fn{PartitionFn::Radix, bits, low_bits, 0};
    fn.key_limit = key_limit;
    partition(ctx, in_k, in_v, {0, rows}, fn, out_k, out_v, d_offsets);
  } else {  // one partition: all the rows
    JL_CUDA_CHECK(cudaMemcpyAsync(out_k, in_k, rows * sizeof(K), cudaMemcpyDeviceToDevice, ctx.stream()));
    JL_CUDA_CHECK(cudaMemcpyAsync(out_v, in_v, rows * sizeof(V), cudaMemcpyDeviceToDevice, ctx.stream()));
    d_offsets = ctx.upload(std::vector<uint64_t>{0, rows});
  }
  auto kernel = local_counting_sort_kernel<K, V>;
  const size_t smem = local_smem<K, V>(low_bits);
  allow_shared_memory(kernel, smem);
  prefer_shared_memory(kernel);
  LocalSortFlags* d_flags = ctx.scratch_array<LocalSortFlags>(1);
  JL_CUDA_CHECK(cudaMemsetAsync(d_flags, 0, sizeof(LocalSortFlags), ctx.stream()));
  kernel<<<fanout, kLocalThreads, smem, ctx.stream()>>>(out_k, out_v, d_offsets, low_bits, key_limit, d_flags);
  JL_CUDA_LAUNCHED("local_counting_sort_kernel");
  ctx.mark("local_counting_sort_kernel");
  sort_oversized(ctx, out_k, out_v, d_offsets, fanout, low_bits, end_bit, key_limit < uint64_t(K(~K(0))), d_flags);
}

using msd_sort::kMaxSamples;  // keys the MSD sort samples for its range

// The largest and the smallest of `samples` keys spread evenly over keys[0, rows) (every key
// where rows <= samples): out[0] = max, out[1] = min (out[1] starts at all ones).
template <class K>
__global__ void sample_range_kernel(const K* keys, uint64_t rows, uint64_t samples, unsigned long long* out) {
  using Reduce = cub::BlockReduce<unsigned long long, 256>;
  __shared__ typename Reduce::TempStorage storage;
  unsigned long long hi = 0, lo = ~0ull;
  for (uint64_t i = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < samples; i += uint64_t(gridDim.x) * blockDim.x) {
    const unsigned long long k = keys[i * rows / samples];
    hi = larger(hi, k), lo = smaller(lo, k);
  }
  hi = Reduce(storage).Reduce(hi, KeyMax{});
  __syncthreads();  // the reductions share their storage
  lo = Reduce(storage).Reduce(lo, KeyMin{});
  if (threadIdx.x == 0) atomicMax(&out[0], hi), atomicMin(&out[1], lo);
}

struct KeyRange {
  uint64_t min = 0, max = 0;
};

// The largest key, exact (a device reduction).
template <class K>
uint64_t max_key_of(KernelContext& ctx, const K* keys, uint64_t rows) {
  unsigned long long* d_max = ctx.scratch_array<unsigned long long>(1);
  JL_CUDA_CHECK(cudaMemsetAsync(d_max, 0, sizeof(*d_max), ctx.stream()));
  K* d_key = reinterpret_cast<K*>(d_max);  // the low bytes: little-endian, the rest zero
  size_t temp = 0;
  JL_CUDA_CHECK(cub::DeviceReduce::Max(nullptr, temp, keys, d_key, int64_t(rows), ctx.stream()));
  void* d_temp = ctx.scratch(temp);
  JL_CUDA_CHECK(cub::DeviceReduce::Max(d_temp, temp, keys, d_key, int64_t(rows), ctx.stream()));
  ctx.mark("cub::DeviceReduce::Max");
  unsigned long long max_key = 0;
  JL_CUDA_CHECK(cudaMemcpyAsync(&max_key, d_max, sizeof(max_key), cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.sync();
  return max_key;
}

// The smallest and largest key of a sample (one small kernel).
template <class K>
KeyRange sampled_key_range(KernelContext& ctx, const K* keys, uint64_t rows) {
  unsigned long long* d_range = ctx.scratch_array<unsigned long long>(2);
  JL_CUDA_CHECK(cudaMemsetAsync(d_range, 0, sizeof(*d_range), ctx.stream()));
  JL_CUDA_CHECK(cudaMemsetAsync(d_range + 1, 0xff, sizeof(*d_range), ctx.stream()));
  const uint64_t samples = std::min(rows, kMaxSamples);
  sample_range_kernel<K><<<unsigned((samples + 1023) / 1024), 256, 0, ctx.stream()>>>(keys, rows, samples, d_range);
  JL_CUDA_LAUNCHED("sample_range_kernel");
  ctx.mark("sample_range_kernel");
  unsigned long long h[2] = {0, 0};
  JL_CUDA_CHECK(cudaMemcpyAsync(h, d_range, sizeof(h), cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.sync();
  return {h[1], h[0]};
}

}  // namespace

template <class K, class V>
void sort_pairs(KernelContext& ctx, const K* in_k, const V* in_v, uint64_t rows, K* out_k, V* out_v, SortAlgo algo) {
  if (!rows) return;
  const int64_t n = int64_t(rows);
  if (algo == SortAlgo::Merge) {
    if (out_k != in_k) JL_CUDA_CHECK(cudaMemcpyAsync(out_k, in_k, rows * sizeof(K), cudaMemcpyDefault, ctx.stream()));
    if (out_v != in_v) JL_CUDA_CHECK(cudaMemcpyAsync(out_v, in_v, rows * sizeof(V), cudaMemcpyDefault, ctx.stream()));
    size_t temp = 0;
    JL_CUDA_CHECK(cub::DeviceMergeSort::StableSortPairs(nullptr, temp, out_k, out_v, n, KeyLess{}, ctx.stream()));
    void* d_temp = ctx.scratch(temp);
    JL_CUDA_CHECK(cub::DeviceMergeSort::StableSortPairs(d_temp, temp, out_k, out_v, n, KeyLess{}, ctx.stream()));
    ctx.mark("cub::DeviceMergeSort::StableSortPairs");
    return;
  }
  if (out_k == in_k || out_v == in_v)  // both radix sorts read and write distinct arrays
    std::tie(in_k, in_v) = scratch_copy(ctx, in_k, in_v, rows);
  // MSD: bits [0, bit width of the sampled largest key), larger keys with the last partition.
  // The partitions' rows are planned from the sampled range's density.
  if (!ctx.options.onesweep_sort) {
    const KeyRange range = sampled_key_range(ctx, in_k, rows);
    const uint64_t sampled = range.max;
    const int end_bit = msd_sort::bit_width(sampled);
    const uint64_t limit = msd_sort::largest_of_bits(end_bit);  // a K: end_bit is at most its bits
    // The partition sizes are planned for a range 1/16 above the sample's (planned_max_key; the benchmark's
    // random S keys left the top sample 2.4 sampling steps below the largest key in one H100 run).
    // keys 1..2^27 then makes 2^15 partitions of 4096 rows, not 2^16 of 2048, and a partition at
    // most 1/16 below the target is still far from a block's capacity (5120).
    const uint64_t samples = std::min(rows, kMaxSamples);
    const uint64_t planned = samples == rows ? sampled : msd_sort::planned_max_key(sampled);
    const int bits = msd_partition_bits(ctx.info(), sizeof(K), sizeof(V), rows, range.min, planned, end_bit);
    if (bits >= 0) {
      msd_sort(ctx, in_k, in_v, rows, out_k, out_v, end_bit, uint32_t(bits), limit);
      return;
    }
  }
  // Onesweep (LSD): bits [0, bit width of the largest key).
  const int end_bit = msd_sort::bit_width(max_key_of(ctx, in_k, rows));
  cub_radix_sort(ctx, in_k, out_k, in_v, out_v, rows, end_bit);
  ctx.mark("cub::DeviceRadixSort::SortPairs");
}

template void sort_pairs<uint32_t, uint32_t>(KernelContext&, const uint32_t*, const uint32_t*, uint64_t, uint32_t*, uint32_t*, SortAlgo);
template void sort_pairs<uint32_t, uint64_t>(KernelContext&, const uint32_t*, const uint64_t*, uint64_t, uint32_t*, uint64_t*, SortAlgo);
template void sort_pairs<uint64_t, uint32_t>(KernelContext&, const uint64_t*, const uint32_t*, uint64_t, uint64_t*, uint32_t*, SortAlgo);
template void sort_pairs<uint64_t, uint64_t>(KernelContext&, const uint64_t*, const uint64_t*, uint64_t, uint64_t*, uint64_t*, SortAlgo);

}  // namespace joinlab::cuda
