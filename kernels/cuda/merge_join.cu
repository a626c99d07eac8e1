// m:n merge join of two key-sorted inputs (rui2017 3.3.2, smj). Merge path splits the merged
// sequence R + S into equal tiles (Green, McColl, Bader 2012); inside a tile each thread merges
// VT elements sequentially and so finds, for every S row, lo = the number of R keys below it.
// The number of equal R keys follows by galloping forward from lo (1 step for primary keys,
// O(log run) for long runs of duplicates). A scan of the counts gives every S row its output
// rows; the write kernel maps each output row back to its S row by binary search, so long
// duplicate runs are spread over all threads instead of one.
#include "kernels/cuda/join_common.cuh"

namespace joinlab::cuda {

namespace {

constexpr int kMjThreads = 256;
constexpr int kMjVT = 8;
constexpr uint32_t kMjTile = kMjThreads * kMjVT;
constexpr int kOutThreads = 256;

// Number of A elements among the first `diag` of the merge where A[i] goes first iff A[i] < B[j].
template <class K>
__device__ __forceinline__ uint64_t merge_path(const K* a, uint64_t na, const K* b, uint64_t nb, uint64_t diag) {
  uint64_t lo = diag > nb ? diag - nb : 0, hi = min(diag, na);
  while (lo < hi) {
    const uint64_t mid = (lo + hi) / 2;
    if (a[mid] < b[diag - 1 - mid]) lo = mid + 1; else hi = mid;
  }
  return lo;
}

template <class K>
__global__ void merge_partition_kernel(const K* a, uint64_t na, const K* b, uint64_t nb, uint64_t tiles, uint64_t* split) {
  for (uint64_t t = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; t <= tiles; t += uint64_t(gridDim.x) * blockDim.x)
    split[t] = merge_path(a, na, b, nb, min(t * kMjTile, na + nb));
}

// lo[j] = lower bound of S[j] in R; count[j] = number of R keys equal to S[j].
template <class K>
__global__ void __launch_bounds__(kMjThreads) sorted_search_kernel(const K* r, uint64_t nr, const K* s, uint64_t ns,
                                                                  const uint64_t* split, uint64_t* lo_out,
                                                                  uint64_t* count_out) {
  __shared__ K tile[kMjTile];
  const uint64_t d0 = uint64_t(blockIdx.x) * kMjTile, d1 = min(d0 + kMjTile, nr + ns);
  const uint64_t a0 = split[blockIdx.x], a1 = split[blockIdx.x + 1];
  const uint64_t b0 = d0 - a0, b1 = d1 - a1;
  const uint32_t na = uint32_t(a1 - a0), nb = uint32_t(b1 - b0);
  for (uint32_t i = threadIdx.x; i < na + nb; i += kMjThreads) tile[i] = i < na ? r[a0 + i] : s[b0 + i - na];
  __syncthreads();
  const K* ta = tile;
  const K* tb = tile + na;
  const uint32_t diag = min(threadIdx.x * uint32_t(kMjVT), na + nb);
  uint32_t ai = uint32_t(merge_path(ta, na, tb, nb, diag)), bi = diag - ai;
  for (int step = 0; step < kMjVT && ai + bi < na + nb; ++step) {
    if (ai < na && (bi >= nb || ta[ai] < tb[bi])) {
      ++ai;
    } else {
      const uint64_t j = b0 + bi, lo = a0 + ai;
      const K key = tb[bi];
      // The run of R keys equal to key: in the tile's R rows (shared memory) first; past the
      // tile's end, gallop through R in global memory (lo + 1, + 3, + 7, ...) then bisect.
      uint64_t good = lo, step_len = 1, bad;
      uint32_t t = ai;
      while (t < na && ta[t] == key) ++t;
      if (t < na || a1 >= nr || r[a1] != key) {
        bad = a0 + t;  // the run ended inside the tile, or exactly at its end
      } else {
        good = a1;
        for (;;) {
          const uint64_t probe = good + step_len;
          if (probe >= nr || r[probe] != key) { bad = min(probe, nr); break; }
          good = probe;
          step_len *= 2;
        }
        // r[good] == key, r[bad] != key (or bad == nr): first non-equal in (good, bad].
        while (bad - good > 1) {
          const uint64_t mid = good + (bad - good) / 2;
          if (r[mid] == key) good = mid; else bad = mid;
        }
      }
      lo_out[j] = lo;
      count_out[j] = bad - lo;
      ++bi;
    }
  }
}

// Writes the output rows of S rows with at most kLightRun matches (one thread each: the common
// primary-key case writes coalesced) and lists the others for merge_heavy_kernel.
constexpr uint64_t kLightRun = 16;

template <class K, class VR, class VS>
__device__ __forceinline__ void write_row(const JoinSinkRef<K, VR, VS>& sink, uint64_t o, K k, VR r, VS s) {
  const uint64_t at = sink.first + o;
  if (at < sink.capacity) {
    sink.keys[at] = k;
    sink.rvals[at] = r;
    sink.svals[at] = s;
  }
}

__device__ __forceinline__ bool output_allowed(OutputMode mode, uint64_t first, uint64_t capacity, const uint64_t* d_words) {
  // CountThenWrite writes nothing when the output overflows; Direct writes what fits.
  return mode == OutputMode::Direct || first + d_words[kCountWord] <= capacity;
}

template <class K, class VR, class VS>
__global__ void merge_output_kernel(const K* sk, const VR* rv, const VS* sv, uint64_t ns, const uint64_t* lo,
                                    const uint64_t* count, const uint64_t* offsets, JoinSinkRef<K, VR, VS> sink,
                                    const uint64_t* d_words, uint64_t* heavy, ull* heavy_n) {
  if (!output_allowed(sink.mode, sink.first, sink.capacity, d_words)) return;
  for (uint64_t j = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; j < ns; j += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t c = count[j];
    if (!c) continue;
    if (c > kLightRun) {
      heavy[atomicAdd(heavy_n, 1ull)] = j;
      continue;
    }
    const uint64_t base = offsets[j], r0 = lo[j];
    const K k = sk[j];
    const VS v = sv[j];
    for (uint64_t x = 0; x < c; ++x) write_row(sink, base + x, k, rv[r0 + x], v);
  }
}

// One block per listed S row: its long run of matches, written by all threads.
template <class K, class VR, class VS>
__global__ void merge_heavy_kernel(const K* sk, const VR* rv, const VS* sv, const uint64_t* lo, const uint64_t* count,
                                   const uint64_t* offsets, JoinSinkRef<K, VR, VS> sink, const uint64_t* d_words,
                                   const uint64_t* heavy, const ull* heavy_n) {
  if (!output_allowed(sink.mode, sink.first, sink.capacity, d_words)) return;
  for (uint64_t h = blockIdx.x; h < *heavy_n; h += gridDim.x) {
    const uint64_t j = heavy[h], c = count[j], base = offsets[j], r0 = lo[j];
    const K k = sk[j];
    const VS v = sv[j];
    for (uint64_t x = threadIdx.x; x < c; x += blockDim.x) write_row(sink, base + x, k, rv[r0 + x], v);
  }
}

}  // namespace

template <class K, class VR, class VS>
void merge_join(KernelContext& ctx, const K* r_keys, const VR* r_vals, uint64_t r_rows, const K* s_keys,
                const VS* s_vals, uint64_t s_rows, const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words) {
  if (!r_rows || !s_rows) return;
  const uint64_t tiles = (r_rows + s_rows + kMjTile - 1) / kMjTile;
  uint64_t* split = ctx.scratch_array<uint64_t>(tiles + 1);
  uint64_t* lo = ctx.scratch_array<uint64_t>(s_rows);
  uint64_t* count = ctx.scratch_array<uint64_t>(s_rows);
  merge_partition_kernel<K><<<grid_for(tiles + 1, 256, 4096), 256, 0, ctx.stream()>>>(r_keys, r_rows, s_keys, s_rows,
                                                                                      tiles, split);
  JL_CUDA_LAUNCHED("merge_partition_kernel");
  ctx.mark("merge_partition_kernel");
  if (tiles > uint64_t(INT32_MAX)) throw RuntimeError("merge join: inputs too large for one launch");
  sorted_search_kernel<K><<<unsigned(tiles), kMjThreads, 0, ctx.stream()>>>(r_keys, r_rows, s_keys, s_rows, split, lo,
                                                                           count);
  JL_CUDA_LAUNCHED("sorted_search_kernel");
  ctx.mark("sorted_search_kernel");
  uint64_t* offsets = ctx.scratch_array<uint64_t>(s_rows);
  exclusive_scan(ctx, count, offsets, s_rows);
  total_of_counts_kernel<<<1, 1, 0, ctx.stream()>>>(count, offsets, s_rows, d_words);
  JL_CUDA_LAUNCHED("total_of_counts_kernel");
  if (sink.mode == OutputMode::CountOnly) return;
  uint64_t* heavy = ctx.scratch_array<uint64_t>(s_rows);
  ull* heavy_n = ctx.scratch_array<ull>(1);
  JL_CUDA_CHECK(cudaMemsetAsync(heavy_n, 0, sizeof(ull), ctx.stream()));
  merge_output_kernel<K, VR, VS><<<grid_for(s_rows, kOutThreads, ctx.info().sm_count * 32), kOutThreads, 0,
                                   ctx.stream()>>>(s_keys, r_vals, s_vals, s_rows, lo, count, offsets, sink, d_words,
                                                   heavy, heavy_n);
  JL_CUDA_LAUNCHED("merge_output_kernel");
  ctx.mark("merge_output_kernel");
  merge_heavy_kernel<K, VR, VS><<<unsigned(ctx.info().sm_count * 4), kOutThreads, 0, ctx.stream()>>>(
      s_keys, r_vals, s_vals, lo, count, offsets, sink, d_words, heavy, heavy_n);
  JL_CUDA_LAUNCHED("merge_heavy_kernel");
  ctx.mark("merge_heavy_kernel");
}

#define JL_MJOIN(K, VR, VS)                                                                                    \
  template void merge_join<K, VR, VS>(KernelContext&, const K*, const VR*, uint64_t, const K*, const VS*, uint64_t, \
                                      const JoinSinkRef<K, VR, VS>&, uint64_t*);
JL_MJOIN(uint32_t, uint32_t, uint32_t)
JL_MJOIN(uint32_t, uint32_t, uint64_t)
JL_MJOIN(uint32_t, uint64_t, uint32_t)
JL_MJOIN(uint32_t, uint64_t, uint64_t)
JL_MJOIN(uint64_t, uint32_t, uint32_t)
JL_MJOIN(uint64_t, uint32_t, uint64_t)
JL_MJOIN(uint64_t, uint64_t, uint32_t)
JL_MJOIN(uint64_t, uint64_t, uint64_t)

}  // namespace joinlab::cuda
