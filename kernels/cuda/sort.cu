// Sorting (rui2017 3.3.1, smj). Radix sort sorts only the key bits that vary (the largest key is
// reduced first: dense keys of 2^27 rows have 28 bits, and 8-byte keys with small values sort like
// 4-byte ones), in one of two ways:
//  - MSD (default): the high bits partition the rows with the partition kernels (partition.cu:
//    one or two scatter passes, partitions in digit order), then one block per partition sorts it
//    on its remaining low bits in shared memory, in place, by counting sort (one on-chip pass:
//    a counter per low-bit value). Three passes over memory for 28-bit keys where an LSD sort with
//    8-bit digits makes four. Partitions too large for a block (skew) are sorted by CUB.
//  - onesweep (cluster option radix_sort=onesweep): CUB's LSD onesweep sort over all the bits.
// The merge variant is CUB's stable merge sort (any comparator; what rui2017 uses).
#include <cub/block/block_scan.cuh>
#include <cub/device/device_merge_sort.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <tuple>
#include <utility>

#include "kernels/cuda/device_common.cuh"

namespace joinlab::cuda {

namespace {

struct KeyLess {
  template <class K>
  __device__ bool operator()(const K& a, const K& b) const { return a < b; }
};

// --- MSD: on-chip counting sort of one partition ---------------------------------------------
// A block of 256 threads sorts up to 5120 rows (20 per thread) on up to 13 low bits; the MSD
// partitioning aims at ~4 Ki rows per partition, so that a uniform partition (4096 +- 64 rows)
// never overflows, and 3 blocks of 8-byte tuples (40 KB of rows + 16 KB of counters) share an SM
// (one block's load, sort and store phases overlap the others').
constexpr int kLocalThreads = 256;
constexpr int kLocalItems = 20;
constexpr uint32_t kLocalCapacity = uint32_t(kLocalThreads) * kLocalItems;
constexpr uint32_t kLocalTarget = 4096;  // rows per partition the partition bits aim at
constexpr uint32_t kLocalBits = 13;     // at most 2^13 counters (32 KB)

// Counter c lives at c + c / 32: a thread scans a run of consecutive counters, and the padding
// puts the runs of a warp's threads in distinct banks.
__host__ __device__ constexpr uint32_t padded(uint32_t c) { return c + c / 32; }

template <class K, class V>
size_t local_smem(uint32_t low_bits) {
  return size_t(padded(1u << low_bits)) * sizeof(uint32_t) + size_t(kLocalCapacity) * (sizeof(K) + sizeof(V));
}

// Block p sorts partition p (rows offsets[p] .. offsets[p + 1] of keys/vals, in place) on its key
// bits below `low_bits` (the bits above are the partition's digit, the same for all its rows):
// count each low value, scan the counts into positions, place each row at its position in
// shared memory, write the partition back. Partitions larger than the block's capacity are left
// to the caller, counted in *oversized (so that the host, in the common case, reads one word
// instead of every offset). Rows of equal keys may change order (the sort is not stable).
template <class K, class V, int kThreads = kLocalThreads>
__global__ void __launch_bounds__(kThreads) local_counting_sort_kernel(K* keys, V* vals, const uint64_t* offsets,
                                                                       uint32_t low_bits, uint32_t* oversized) {
  using Scan = cub::BlockScan<uint32_t, kThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr uint32_t kCapacity = uint32_t(kThreads) * kLocalItems;
  const uint64_t begin = offsets[blockIdx.x], end = offsets[blockIdx.x + 1];
  if (end - begin > kCapacity) {
    if (threadIdx.x == 0) atomicAdd(oversized, 1u);
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
#pragma unroll
  for (int i = 0; i < kLocalItems; ++i) {
    const uint32_t at = uint32_t(i) * kThreads + tid;
    if (at < n) {
      k[i] = keys[begin + at];
      v[i] = vals[begin + at];
      atomicAdd(&count[padded(uint32_t(uint64_t(k[i]) & mask))], 1u);
    }
  }
  __syncthreads();
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
#pragma unroll
  for (int i = 0; i < kLocalItems; ++i) {
    if (uint32_t(i) * kThreads + tid < n) {
      const uint32_t pos = atomicAdd(&count[padded(uint32_t(uint64_t(k[i]) & mask))], 1u);
      stage_k[pos] = k[i];
      stage_v[pos] = v[i];
    }
  }
  __syncthreads();
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

// Sorts the partitions the blocks could not (more rows than a block holds) on bits [0, low_bits):
// the large ones (more than a device-wide sort's worth) one CUB device sort each, the others in
// one CUB segmented sort (a block per segment).
template <class K, class V>
void sort_oversized(KernelContext& ctx, K* keys, V* vals, const uint64_t* d_offsets, uint32_t fanout,
                    uint32_t low_bits, const uint32_t* d_oversized) {
  uint32_t oversized = 0;
  JL_CUDA_CHECK(cudaMemcpyAsync(&oversized, d_oversized, sizeof(oversized), cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.sync();
  if (oversized == 0 || low_bits == 0) return;  // none, or all keys of a partition equal
  std::vector<uint64_t> offsets(fanout + 1);
  JL_CUDA_CHECK(cudaMemcpyAsync(offsets.data(), d_offsets, offsets.size() * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                                ctx.stream()));
  ctx.sync();
  constexpr uint64_t kDeviceWide = uint64_t(1) << 20;
  std::vector<uint64_t> seg_begin, seg_end;
  bool device_wide = false;
  for (uint32_t p = 0; p < fanout; ++p) {
    const uint64_t b = offsets[p], e = offsets[p + 1];
    if (e - b <= kLocalCapacity) continue;  // sorted by its block
    if (e - b >= kDeviceWide) {
      const auto [tmp_k, tmp_v] = scratch_copy(ctx, keys + b, vals + b, e - b);
      cub_radix_sort(ctx, tmp_k, keys + b, tmp_v, vals + b, e - b, int(low_bits));
      device_wide = true;
    } else {
      seg_begin.push_back(b);
      seg_end.push_back(e);
    }
  }
  if (device_wide) ctx.mark("cub::DeviceRadixSort::SortPairs");
  if (seg_begin.empty()) return;
  // The segmented sort reads rows [first segment's begin, last segment's end) from a copy.
  const uint64_t base = seg_begin.front(), span = seg_end.back() - base;
  for (size_t i = 0; i < seg_begin.size(); ++i) seg_begin[i] -= base, seg_end[i] -= base;
  const auto [tmp_k, tmp_v] = scratch_copy(ctx, keys + base, vals + base, span);
  const uint64_t* d_begin = ctx.upload(seg_begin);
  const uint64_t* d_end = ctx.upload(seg_end);
  const int64_t n = int64_t(span);
  const int64_t segs = int64_t(seg_begin.size());
  size_t temp = 0;
  JL_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(nullptr, temp, tmp_k, keys + base, tmp_v, vals + base, n,
                                                         segs, d_begin, d_end, 0, int(low_bits), ctx.stream()));
  void* d_temp = ctx.scratch(temp);
  JL_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairs(d_temp, temp, tmp_k, keys + base, tmp_v, vals + base, n,
                                                         segs, d_begin, d_end, 0, int(low_bits), ctx.stream()));
  ctx.mark("cub::DeviceSegmentedRadixSort::SortPairs");
}

// Partition bits for an MSD sort of `rows` keys in [0, max_key] (end_bit bits): the low bits
// left to the blocks are the most (up to kLocalBits) that keep a partition's expected rows, for
// keys spread over the range, at kLocalTarget. Returns -1 where the partitioning would need more
// than two passes (wide sparse keys: onesweep sorts those).
int msd_partition_bits(const DeviceInfo& info, uint32_t key_bytes, uint32_t val_bytes, uint64_t rows,
                       uint64_t max_key, int end_bit) {
  const double range = double(max_key) + 1.0;
  int low = 0;
  while (low < int(kLocalBits) && low < end_bit && double(rows) * double(uint64_t(2) << low) / range <= kLocalTarget)
    ++low;
  const int bits = end_bit - low;
  return bits > int(2 * max_one_pass_bits(info, key_bytes, val_bytes)) ? -1 : bits;
}

template <class K, class V>
void msd_sort(KernelContext& ctx, const K* in_k, const V* in_v, uint64_t rows, K* out_k, V* out_v, int end_bit,
              uint32_t bits) {
  const uint32_t low_bits = uint32_t(end_bit) - bits;
  const uint32_t fanout = 1u << bits;
  uint64_t* d_offsets;
  if (bits > 0) {
    d_offsets = ctx.scratch_array<uint64_t>(fanout + 1);
    partition(ctx, in_k, in_v, {0, rows}, PartitionFn{PartitionFn::Radix, bits, low_bits, 0}, out_k, out_v, d_offsets);
  } else {  // one partition: all the rows
    JL_CUDA_CHECK(cudaMemcpyAsync(out_k, in_k, rows * sizeof(K), cudaMemcpyDeviceToDevice, ctx.stream()));
    JL_CUDA_CHECK(cudaMemcpyAsync(out_v, in_v, rows * sizeof(V), cudaMemcpyDeviceToDevice, ctx.stream()));
    d_offsets = ctx.upload(std::vector<uint64_t>{0, rows});
  }
  auto kernel = local_counting_sort_kernel<K, V>;
  const size_t smem = local_smem<K, V>(low_bits);
  allow_shared_memory(kernel, smem);
  prefer_shared_memory(kernel);
  uint32_t* d_oversized = ctx.scratch_array<uint32_t>(1);
  JL_CUDA_CHECK(cudaMemsetAsync(d_oversized, 0, sizeof(uint32_t), ctx.stream()));
  kernel<<<fanout, kLocalThreads, smem, ctx.stream()>>>(out_k, out_v, d_offsets, low_bits, d_oversized);
  JL_CUDA_LAUNCHED("local_counting_sort_kernel");
  ctx.mark("local_counting_sort_kernel");
  sort_oversized(ctx, out_k, out_v, d_offsets, fanout, low_bits, d_oversized);
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
  // Radix: sort bits [0, bit width of the largest key).
  K* d_max = ctx.scratch_array<K>(1);
  size_t temp = 0;
  JL_CUDA_CHECK(cub::DeviceReduce::Max(nullptr, temp, in_k, d_max, n, ctx.stream()));
  void* d_temp = ctx.scratch(temp);
  JL_CUDA_CHECK(cub::DeviceReduce::Max(d_temp, temp, in_k, d_max, n, ctx.stream()));
  ctx.mark("cub::DeviceReduce::Max");
  K max_key = 0;
  JL_CUDA_CHECK(cudaMemcpyAsync(&max_key, d_max, sizeof(K), cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.sync();
  int end_bit = 1;
  while (end_bit < int(8 * sizeof(K)) && (uint64_t(max_key) >> end_bit) != 0) ++end_bit;
  if (!ctx.options.onesweep_sort) {
    const int bits = msd_partition_bits(ctx.info(), sizeof(K), sizeof(V), rows, uint64_t(max_key), end_bit);
    if (bits >= 0) {
      msd_sort(ctx, in_k, in_v, rows, out_k, out_v, end_bit, uint32_t(bits));
      return;
    }
  }
  cub_radix_sort(ctx, in_k, out_k, in_v, out_v, rows, end_bit);
  ctx.mark("cub::DeviceRadixSort::SortPairs");
}

template void sort_pairs<uint32_t, uint32_t>(KernelContext&, const uint32_t*, const uint32_t*, uint64_t, uint32_t*, uint32_t*, SortAlgo);
template void sort_pairs<uint32_t, uint64_t>(KernelContext&, const uint32_t*, const uint64_t*, uint64_t, uint32_t*, uint64_t*, SortAlgo);
template void sort_pairs<uint64_t, uint32_t>(KernelContext&, const uint64_t*, const uint32_t*, uint64_t, uint64_t*, uint32_t*, SortAlgo);
template void sort_pairs<uint64_t, uint64_t>(KernelContext&, const uint64_t*, const uint64_t*, uint64_t, uint64_t*, uint64_t*, SortAlgo);

}  // namespace joinlab::cuda
