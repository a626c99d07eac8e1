// The merge stages of mgsmj's merge-based multi-GPU sort (maltenberger2025 3.1.1): the local merge
// of a GPU's retained rows with the block its partner sent (CUB's DeviceMerge, a merge path
// merge), and the pivot search over the probed keys of the two runs.
#include <cub/device/device_merge.cuh>

#include "kernels/cuda/device_common.cuh"

namespace joinlab::cuda {

namespace {

// One thread: a binary search over at most a few thousand probes (a stage's rounds), so the
// launch is what it costs.
template <class K>
__global__ void pivot_search_kernel(const K* x, const K* y, uint64_t n, uint64_t* d_words) {
  uint64_t lo = 0, hi = n;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (x[mid] <= y[mid]) hi = mid;
    else lo = mid + 1;
  }
  d_words[kCountWord] = lo;
}

}  // namespace

template <class K, class V>
void merge_pairs(KernelContext& ctx, const K* a_k, const V* a_v, uint64_t a_rows, const K* b_k, const V* b_v,
                 uint64_t b_rows, K* out_k, V* out_v) {
  if (a_rows + b_rows == 0) return;
  size_t temp = 0;
  JL_CUDA_CHECK(cub::DeviceMerge::MergePairs(nullptr, temp, a_k, a_v, int64_t(a_rows), b_k, b_v, int64_t(b_rows), out_k,
                                             out_v, ::cuda::std::less<>{}, ctx.stream()));
  void* d_temp = ctx.scratch(temp ? temp : 1);
  JL_CUDA_CHECK(cub::DeviceMerge::MergePairs(d_temp, temp, a_k, a_v, int64_t(a_rows), b_k, b_v, int64_t(b_rows), out_k,
                                             out_v, ::cuda::std::less<>{}, ctx.stream()));
  ctx.mark("cub::DeviceMerge::MergePairs");
}

template <class K>
void pivot_search(KernelContext& ctx, const K* x, const K* y, uint64_t n, uint64_t* d_words) {
  pivot_search_kernel<K><<<1, 1, 0, ctx.stream()>>>(x, y, n, d_words);
  JL_CUDA_LAUNCHED("pivot_search_kernel");
  ctx.mark("pivot_search_kernel");
}

template void merge_pairs<uint32_t, uint32_t>(KernelContext&, const uint32_t*, const uint32_t*, uint64_t, const uint32_t*,
                                              const uint32_t*, uint64_t, uint32_t*, uint32_t*);
template void merge_pairs<uint32_t, uint64_t>(KernelContext&, const uint32_t*, const uint64_t*, uint64_t, const uint32_t*,
                                              const uint64_t*, uint64_t, uint32_t*, uint64_t*);
template void merge_pairs<uint64_t, uint32_t>(KernelContext&, const uint64_t*, const uint32_t*, uint64_t, const uint64_t*,
                                              const uint32_t*, uint64_t, uint64_t*, uint32_t*);
template void merge_pairs<uint64_t, uint64_t>(KernelContext&, const uint64_t*, const uint64_t*, uint64_t, const uint64_t*,
                                              const uint64_t*, uint64_t, uint64_t*, uint64_t*);
template void pivot_search<uint32_t>(KernelContext&, const uint32_t*, const uint32_t*, uint64_t, uint64_t*);
template void pivot_search<uint64_t>(KernelContext&, const uint64_t*, const uint64_t*, uint64_t, uint64_t*);

}  // namespace joinlab::cuda
