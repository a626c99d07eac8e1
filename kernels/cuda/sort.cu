// Sorting (rui2017 3.3.1, smj): CUB's onesweep radix sort over only the key bits that vary
// (the largest key is reduced first, so dense keys of 2^27 rows sort 28 bits, and 8-byte keys
// with small values sort like 4-byte ones), and CUB's stable merge sort for the merge variant
// (any comparator; what rui2017 uses).
#include <cub/device/device_merge_sort.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>

#include "kernels/cuda/device_common.cuh"

namespace joinlab::cuda {

namespace {
struct KeyLess {
  template <class K>
  __device__ bool operator()(const K& a, const K& b) const { return a < b; }
};
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
  if (out_k == in_k || out_v == in_v) {  // CUB's radix sort reads and writes distinct arrays
    K* copy_k = ctx.scratch_array<K>(rows);
    V* copy_v = ctx.scratch_array<V>(rows);
    JL_CUDA_CHECK(cudaMemcpyAsync(copy_k, in_k, rows * sizeof(K), cudaMemcpyDefault, ctx.stream()));
    JL_CUDA_CHECK(cudaMemcpyAsync(copy_v, in_v, rows * sizeof(V), cudaMemcpyDefault, ctx.stream()));
    in_k = copy_k;
    in_v = copy_v;
  }
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
  temp = 0;
  JL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, in_k, out_k, in_v, out_v, n, 0, end_bit, ctx.stream()));
  d_temp = ctx.scratch(temp);
  JL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(d_temp, temp, in_k, out_k, in_v, out_v, n, 0, end_bit, ctx.stream()));
  ctx.mark("cub::DeviceRadixSort::SortPairs");
}

template void sort_pairs<uint32_t, uint32_t>(KernelContext&, const uint32_t*, const uint32_t*, uint64_t, uint32_t*, uint32_t*, SortAlgo);
template void sort_pairs<uint32_t, uint64_t>(KernelContext&, const uint32_t*, const uint64_t*, uint64_t, uint32_t*, uint64_t*, SortAlgo);
template void sort_pairs<uint64_t, uint32_t>(KernelContext&, const uint64_t*, const uint32_t*, uint64_t, uint64_t*, uint32_t*, SortAlgo);
template void sort_pairs<uint64_t, uint64_t>(KernelContext&, const uint64_t*, const uint64_t*, uint64_t, uint64_t*, uint64_t*, SortAlgo);

}  // namespace joinlab::cuda
