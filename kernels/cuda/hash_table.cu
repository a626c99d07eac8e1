// Global hash tables (npj and any strategy with one table per rank): build with atomic CAS
// (linear probing) or atomic exchange on bucket heads (chaining, gpj/thostrup2023), and a probe
// that walks several keys per thread with their first loads in flight together.
#include "kernels/cuda/join_common.cuh"

namespace joinlab::cuda {

namespace {

constexpr int kProbeThreads = 256;
constexpr int kProbeVT = 4;
constexpr uint32_t kProbeRound = kProbeThreads * kProbeVT;
constexpr uint32_t kProbeStage = 2 * kProbeRound;

template <class K, class V>
__global__ void build_linear_kernel(LinearTableRef<K, V> t, const K* keys, const V* vals, uint64_t rows) {
  const uint64_t mask = t.slots - 1;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows; i += uint64_t(gridDim.x) * blockDim.x) {
    const K k = keys[i];
    uint64_t s = table_slot(uint64_t(k), t.seed, t.slots);
    for (uint64_t step = 0; step < t.slots; ++step) {
      if (atomic_cas(&t.keys[s], empty_key<K>(), k) == empty_key<K>()) {
        t.vals[s] = vals[i];
        break;
      }
      s = (s + 1) & mask;
    }
  }
}

template <class K, class V>
__global__ void build_chained_kernel(ChainedTableRef<K, V> t, uint64_t present, const K* keys, uint64_t rows) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint32_t row = uint32_t(present + i);
    t.next[row] = atomicExch(&t.heads[table_slot(uint64_t(keys[i]), t.seed, t.buckets)], row);
  }
}

template <class K, class V>
__global__ void build_rowid_kernel(RowIdTableRef<K, V> t, uint64_t present, uint64_t rows) {
  const uint64_t mask = t.slots - 1;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows; i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t row = present + i;
    const uint64_t h = table_hash(uint64_t(t.keys[row]), t.seed);
    const uint64_t w = uint64_t(tag_of_hash(h)) << 32 | row;
    uint64_t s = slot_of_hash(h, t.slots);
    for (uint64_t step = 0; step < t.slots; ++step) {
      if (atomic_cas(&t.words[s], ~uint64_t(0), w) == ~uint64_t(0)) break;
      s = (s + 1) & mask;
    }
  }
}

template <class K, class VR, class VS, class Table, bool kWrite>
__global__ void __launch_bounds__(kProbeThreads) probe_kernel(Table t, const K* keys, const VS* vals, uint64_t rows,
                                                              JoinSinkRef<K, VR, VS> sink, uint64_t* unit_counts,
                                                              const uint64_t* unit_offsets, uint64_t* d_words) {
  extern __shared__ __align__(16) unsigned char staging[];
  __shared__ uint32_t fill;
  __shared__ ull batch_at, local_cursor;
  __shared__ uint64_t warp_sums[32];
  BlockEmitter<K, VR, VS> em;
  if (kWrite) emitter_begin(em, sink, staging, kProbeStage, &fill, &batch_at, &local_cursor, unit_offsets, d_words);
  uint64_t matches = 0;
  for (uint64_t tile = blockIdx.x * uint64_t(kProbeRound); tile < rows; tile += uint64_t(gridDim.x) * kProbeRound) {
    K k[kProbeVT];
    uint64_t home[kProbeVT], first[kProbeVT];
#pragma unroll
    for (int i = 0; i < kProbeVT; ++i) {
      const uint64_t idx = tile + i * kProbeThreads + threadIdx.x;
      if (idx < rows) {
        k[i] = keys[idx];
        home[i] = home_of(t, k[i]);
        first[i] = peek(t, home[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kProbeVT; ++i) {
      const uint64_t idx = tile + i * kProbeThreads + threadIdx.x;
      if (idx < rows) {
        if (kWrite) {
          const VS sv = vals[idx];
          walk(t, k[i], home[i], first[i], [&](VR rv) { em.emit(k[i], rv, sv); });
        } else {
          walk(t, k[i], home[i], first[i], [&](VR) { ++matches; });
        }
      }
    }
    if (kWrite) em.end_round(kProbeRound);
  }
  if (kWrite) {
    __syncthreads();
    em.flush();
  } else {
    count_end(matches, warp_sums, unit_counts, d_words);
  }
}

template <class K, class VR, class VS, class Table>
void probe_impl(KernelContext& ctx, const Table& t, const K* keys, const VS* vals, uint64_t rows,
                const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words) {
  const unsigned grid = grid_for(rows, kProbeRound, unsigned(ctx.info().sm_count) * 8);
  const size_t smem = emitter_smem<K, VR, VS>(kProbeStage);
  allow_shared_memory(probe_kernel<K, VR, VS, Table, true>, smem);
  run_join_passes(ctx, sink.mode, rows ? grid : 0, d_words, [&](bool write, uint64_t* counts, const uint64_t* offsets) {
    if (write)
      probe_kernel<K, VR, VS, Table, true><<<grid, kProbeThreads, smem, ctx.stream()>>>(t, keys, vals, rows, sink,
                                                                                      counts, offsets, d_words);
    else
      probe_kernel<K, VR, VS, Table, false><<<grid, kProbeThreads, 0, ctx.stream()>>>(t, keys, vals, rows, sink,
                                                                                    counts, offsets, d_words);
    JL_CUDA_LAUNCHED("probe_kernel");
    ctx.mark(write ? "probe_kernel (write)" : "probe_kernel (count)");
  });
}

}  // namespace

template <class K, class V>
void clear_table(KernelContext& ctx, const LinearTableRef<K, V>& t) {
  JL_CUDA_CHECK(cudaMemsetAsync(t.keys, 0xff, t.slots * sizeof(K), ctx.stream()));
}
template <class K, class V>
void clear_table(KernelContext& ctx, const ChainedTableRef<K, V>& t) {
  JL_CUDA_CHECK(cudaMemsetAsync(t.heads, 0xff, t.buckets * sizeof(uint32_t), ctx.stream()));
}

template <class K, class V>
void clear_table(KernelContext& ctx, const RowIdTableRef<K, V>& t) {
  JL_CUDA_CHECK(cudaMemsetAsync(t.words, 0xff, t.slots * sizeof(uint64_t), ctx.stream()));
}

template <class K, class V>
void build(KernelContext& ctx, const RowIdTableRef<K, V>& t, uint64_t present, uint64_t rows) {
  if (!rows) return;
  build_rowid_kernel<K, V><<<grid_for(rows, 256, ctx.info().sm_count * 16), 256, 0, ctx.stream()>>>(t, present, rows);
  JL_CUDA_LAUNCHED("build_rowid_kernel");
  ctx.mark("build_rowid_kernel");
}

template <class K, class V>
void build(KernelContext& ctx, const LinearTableRef<K, V>& t, const K* keys, const V* vals, uint64_t rows) {
  if (!rows) return;
  build_linear_kernel<K, V><<<grid_for(rows, 256, ctx.info().sm_count * 16), 256, 0, ctx.stream()>>>(t, keys, vals, rows);
  JL_CUDA_LAUNCHED("build_linear_kernel");
  ctx.mark("build_linear_kernel");
}

template <class K, class V>
void build(KernelContext& ctx, const ChainedTableRef<K, V>& t, uint64_t present, const K* keys, const V* vals,
           uint64_t rows) {
  if (!rows) return;
  JL_CUDA_CHECK(cudaMemcpyAsync(t.keys + present, keys, rows * sizeof(K), cudaMemcpyDefault, ctx.stream()));
  JL_CUDA_CHECK(cudaMemcpyAsync(t.vals + present, vals, rows * sizeof(V), cudaMemcpyDefault, ctx.stream()));
  build_chained_kernel<K, V><<<grid_for(rows, 256, ctx.info().sm_count * 16), 256, 0, ctx.stream()>>>(t, present, keys,
                                                                                                      rows);
  JL_CUDA_LAUNCHED("build_chained_kernel");
  ctx.mark("build_chained_kernel");
}

template <class K, class VR, class VS>
void probe(KernelContext& ctx, const LinearTableRef<K, VR>& t, const K* keys, const VS* vals, uint64_t rows,
           const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words) {
  probe_impl(ctx, t, keys, vals, rows, sink, d_words);
}
template <class K, class VR, class VS>
void probe(KernelContext& ctx, const ChainedTableRef<K, VR>& t, const K* keys, const VS* vals, uint64_t rows,
           const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words) {
  probe_impl(ctx, t, keys, vals, rows, sink, d_words);
}

template <class K, class VR, class VS>
void probe(KernelContext& ctx, const RowIdTableRef<K, VR>& t, const K* keys, const VS* vals, uint64_t rows,
           const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words) {
  probe_impl(ctx, t, keys, vals, rows, sink, d_words);
}

#define JL_TABLE(K, V)                                                                                        \
  template void clear_table<K, V>(KernelContext&, const LinearTableRef<K, V>&);                               \
  template void clear_table<K, V>(KernelContext&, const ChainedTableRef<K, V>&);                              \
  template void build<K, V>(KernelContext&, const LinearTableRef<K, V>&, const K*, const V*, uint64_t);       \
  template void build<K, V>(KernelContext&, const ChainedTableRef<K, V>&, uint64_t, const K*, const V*, uint64_t); \
  template void clear_table<K, V>(KernelContext&, const RowIdTableRef<K, V>&);                                \
  template void build<K, V>(KernelContext&, const RowIdTableRef<K, V>&, uint64_t, uint64_t);
#define JL_PROBE(K, VR, VS)                                                                                   \
  template void probe<K, VR, VS>(KernelContext&, const LinearTableRef<K, VR>&, const K*, const VS*, uint64_t, \
                                 const JoinSinkRef<K, VR, VS>&, uint64_t*);                                   \
  template void probe<K, VR, VS>(KernelContext&, const ChainedTableRef<K, VR>&, const K*, const VS*, uint64_t,\
                                 const JoinSinkRef<K, VR, VS>&, uint64_t*);                                   \
  template void probe<K, VR, VS>(KernelContext&, const RowIdTableRef<K, VR>&, const K*, const VS*, uint64_t,  \
                                 const JoinSinkRef<K, VR, VS>&, uint64_t*);
JL_TABLE(uint32_t, uint32_t)
JL_TABLE(uint32_t, uint64_t)
JL_TABLE(uint64_t, uint32_t)
JL_TABLE(uint64_t, uint64_t)
JL_PROBE(uint32_t, uint32_t, uint32_t)
JL_PROBE(uint32_t, uint32_t, uint64_t)
JL_PROBE(uint32_t, uint64_t, uint32_t)
JL_PROBE(uint32_t, uint64_t, uint64_t)
JL_PROBE(uint64_t, uint32_t, uint32_t)
JL_PROBE(uint64_t, uint32_t, uint64_t)
JL_PROBE(uint64_t, uint64_t, uint32_t)
JL_PROBE(uint64_t, uint64_t, uint64_t)

}  // namespace joinlab::cuda
