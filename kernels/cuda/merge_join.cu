// m:n merge join of two key-sorted inputs (rui2017 3.3.2, smj). Merge path splits the merged
// sequence R + S into equal tiles (Green, McColl, Bader 2012); inside a tile each thread merges
// VT elements sequentially and so finds, for every S row, lo = the number of R keys below it.
// The number of equal R keys follows by galloping forward from lo (1 step for primary keys,
// O(log run) for long runs of duplicates). One kernel does the search and writes the rows: an S
// row with at most kLightRun matches emits them through the block's shared-memory emitter
// (coalesced batches; the direct output buffer's atomic cursor, or the block's exact base in
// count-then-write); a longer run reserves its rows at once and is listed, with its position,
// for merge_heavy_kernel, where a whole block writes it. So the primary-key case reads R and S
// once and writes the output once, with no per-row intermediate arrays.
#include "kernels/cuda/join_common.cuh"

namespace joinlab::cuda {

namespace {

constexpr int kMjThreads = 256;
constexpr int kMjVT = 8;
constexpr uint32_t kMjTile = kMjThreads * kMjVT;
constexpr int kOutThreads = 256;

// Number of A elements among the first `diag` of the merge where A[i] goes first iff A[i] < B[j],
// known to lie in [lo, hi].
template <class K>
__device__ __forceinline__ uint64_t merge_path(const K* a, const K* b, uint64_t diag, uint64_t lo, uint64_t hi) {
  while (lo < hi) {
    const uint64_t mid = (lo + hi) / 2;
    if (a[mid] < b[diag - 1 - mid]) lo = mid + 1; else hi = mid;
  }
  return lo;
}
template <class K>
__device__ __forceinline__ uint64_t merge_path(const K* a, uint64_t na, const K* b, uint64_t nb, uint64_t diag) {
  return merge_path(a, b, diag, diag > nb ? diag - nb : 0, min(diag, na));
}

// Tile boundaries are searched in two rounds: every kCoarse-th boundary over the whole inputs,
// then each boundary between its two coarse neighbours. A search over all of R and S touches a
// new page at each of its ~28 steps; between neighbours it takes 17 steps in a window of 128 K
// rows that the warp's neighbouring searches share (the one-round kernel took 0.23 ms for 2^28
// rows on the H100).
constexpr uint64_t kCoarse = 64;

// coarse[c] = A elements before diagonal min(c * kCoarse * kMjTile, na + nb), c <= n_coarse.
template <class K>
__global__ void merge_coarse_kernel(const K* a, uint64_t na, const K* b, uint64_t nb, uint64_t n_coarse,
                                    uint64_t* coarse) {
  for (uint64_t c = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; c <= n_coarse; c += uint64_t(gridDim.x) * blockDim.x)
    coarse[c] = merge_path(a, na, b, nb, min(c * kCoarse * kMjTile, na + nb));
}

// split[t] = A elements before tile t's first diagonal, t <= tiles, between the coarse splits
// around it: split(d) is nondecreasing in d and grows by at most d's growth.
template <class K>
__global__ void merge_partition_kernel(const K* a, uint64_t na, const K* b, uint64_t nb, uint64_t tiles,
                                       const uint64_t* coarse, uint64_t* split) {
  for (uint64_t t = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; t <= tiles; t += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t diag = min(t * kMjTile, na + nb), c = t / kCoarse;
    if (t % kCoarse == 0) {
      split[t] = coarse[c];
      continue;
    }
    const uint64_t d0 = c * kCoarse * kMjTile, d1 = min((c + 1) * kCoarse * kMjTile, na + nb);
    const uint64_t lo = max(max(coarse[c], diag > nb ? diag - nb : 0), coarse[c + 1] - min(coarse[c + 1], d1 - diag));
    const uint64_t hi = min(min(coarse[c + 1], coarse[c] + (diag - d0)), min(diag, na));
    split[t] = merge_path(a, b, diag, lo, hi);
  }
}

// S rows with more matches than this are written by merge_heavy_kernel.
constexpr uint32_t kLightRun = 16;

struct HeavyRun {  // one S row's run of matches and where its rows go
  uint64_t s_row, r_first, rows, out_pos;
};

// Counts or writes the rows of one merge-path tile per block (modes as in run_join_passes).

template <class K, class VR, class VS, bool kWrite>
__global__ void __launch_bounds__(kMjThreads) merge_join_kernel(const K* r, const VR* rv, uint64_t nr, const K* s,
                                                               const VS* sv, uint64_t ns, const uint64_t* split,
                                                               JoinSinkRef<K, VR, VS> sink, uint64_t* unit_counts,
                                                               const uint64_t* unit_offsets, uint64_t* d_words,
                                                               HeavyRun* heavy, ull* heavy_n, uint64_t heavy_cap) {
  __shared__ K tile[kMjTile];
  __shared__ uint32_t fill;
  __shared__ ull batch_at, local_cursor;
  __shared__ uint64_t warp_sums[kMjThreads / 32];
  extern __shared__ __align__(16) unsigned char stage[];
  BlockEmitter<K, VR, VS> em;
  if (kWrite) emitter_begin(em, sink, stage, kMjTile, &fill, &batch_at, &local_cursor, unit_offsets, d_words);

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
  uint64_t matches = 0;
  for (int step = 0; step < kMjVT && ai + bi < na + nb; ++step) {
    if (ai < na && (bi >= nb || ta[ai] < tb[bi])) {
      ++ai;
      continue;
    }
    const uint64_t j = b0 + bi, lo = a0 + ai;
    const K key = tb[bi];
    ++bi;
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
    const uint64_t c = bad - lo;
    if (!kWrite) {
      matches += c;
    } else if (c <= kLightRun) {
      const VS v = sv[j];
      for (uint64_t x = 0; x < c; ++x) em.emit(key, rv[lo + x], v);
    } else if (c) {
      // A long run: its rows are reserved now (so positions stay exact and hole-free) and
      // written by merge_heavy_kernel. Runs starting past the capacity have nothing to write.
      const uint64_t pos = em.base + atomicAdd(em.cursor, ull(c));
      if (em.allowed && sink.first + pos < sink.capacity) {
        const ull h = atomicAdd(heavy_n, 1ull);
        if (h < heavy_cap) heavy[h] = {j, lo, c, pos};
      }
    }
  }
  if (kWrite) {
    __syncthreads();
    em.flush();
  } else {
    count_end(matches, warp_sums, unit_counts, d_words);
  }
}

// One block per listed run: its rows written by all threads.
template <class K, class VR, class VS>
__global__ void merge_heavy_kernel(const K* sk, const VR* rv, const VS* sv, JoinSinkRef<K, VR, VS> sink,
                                   const HeavyRun* heavy, const ull* heavy_n) {
  for (uint64_t h = blockIdx.x; h < *heavy_n; h += gridDim.x) {
    const HeavyRun run = heavy[h];
    const K k = sk[run.s_row];
    const VS v = sv[run.s_row];
    for (uint64_t x = threadIdx.x; x < run.rows; x += blockDim.x) {
      const uint64_t at = sink.first + run.out_pos + x;
      if (at >= sink.capacity) break;
      sink.keys[at] = k;
      sink.rvals[at] = rv[run.r_first + x];
      sink.svals[at] = v;
    }
  }
}

}  // namespace

template <class K, class VR, class VS>
void merge_join(KernelContext& ctx, const K* r_keys, const VR* r_vals, uint64_t r_rows, const K* s_keys,
                const VS* s_vals, uint64_t s_rows, const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words) {
  if (!r_rows || !s_rows) return;
  const uint64_t tiles = (r_rows + s_rows + kMjTile - 1) / kMjTile;
  if (tiles > uint64_t(INT32_MAX)) throw RuntimeError("merge join: inputs too large for one launch");
  const uint64_t n_coarse = (tiles + kCoarse - 1) / kCoarse;
  uint64_t* coarse = ctx.scratch_array<uint64_t>(n_coarse + 1);
  uint64_t* split = ctx.scratch_array<uint64_t>(tiles + 1);
  merge_coarse_kernel<K><<<grid_for(n_coarse + 1, 64, 4096), 64, 0, ctx.stream()>>>(r_keys, r_rows, s_keys, s_rows,
                                                                                   n_coarse, coarse);
  JL_CUDA_LAUNCHED("merge_coarse_kernel");
  merge_partition_kernel<K><<<grid_for(tiles + 1, 256, 4096), 256, 0, ctx.stream()>>>(r_keys, r_rows, s_keys, s_rows,
                                                                                      tiles, coarse, split);
  JL_CUDA_LAUNCHED("merge_partition_kernel");
  ctx.mark("merge_partition_kernel");
  // Listed runs are disjoint ranges of > kLightRun rows that start inside the output, so at most
  // this many fit (Direct rows past the capacity are only counted).
  const uint64_t room = sink.capacity > sink.first ? sink.capacity - sink.first : 0;
  const uint64_t heavy_cap = std::min<uint64_t>(s_rows, room / (kLightRun + 1) + 1);
  HeavyRun* heavy = nullptr;
  ull* heavy_n = nullptr;
  if (sink.mode != OutputMode::CountOnly) {
    heavy = ctx.scratch_array<HeavyRun>(heavy_cap);
    heavy_n = ctx.scratch_array<ull>(1);
    JL_CUDA_CHECK(cudaMemsetAsync(heavy_n, 0, sizeof(ull), ctx.stream()));
  }
  // Set always: with the static tile the block may need more than 48 KB even when the staging
  // area alone is below allow_shared_memory's threshold.
  constexpr size_t stage_smem = emitter_smem<K, VR, VS>(kMjTile);
  JL_CUDA_CHECK(cudaFuncSetAttribute(merge_join_kernel<K, VR, VS, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     int(stage_smem)));
  run_join_passes(ctx, sink.mode, tiles, d_words, [&](bool write, uint64_t* counts, const uint64_t* offsets) {
    if (write)
      merge_join_kernel<K, VR, VS, true><<<unsigned(tiles), kMjThreads, stage_smem, ctx.stream()>>>(
          r_keys, r_vals, r_rows, s_keys, s_vals, s_rows, split, sink, counts, offsets, d_words, heavy, heavy_n,
          heavy_cap);
    else
      merge_join_kernel<K, VR, VS, false><<<unsigned(tiles), kMjThreads, 0, ctx.stream()>>>(
          r_keys, r_vals, r_rows, s_keys, s_vals, s_rows, split, sink, counts, offsets, d_words, heavy, heavy_n,
          heavy_cap);
    JL_CUDA_LAUNCHED("merge_join_kernel");
    ctx.mark(write ? "merge_join_kernel (write)" : "merge_join_kernel (count)");
  });
  if (sink.mode == OutputMode::CountOnly) return;
  merge_heavy_kernel<K, VR, VS><<<unsigned(ctx.info().sm_count * 4), kOutThreads, 0, ctx.stream()>>>(
      s_keys, r_vals, s_vals, sink, heavy, heavy_n);
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
