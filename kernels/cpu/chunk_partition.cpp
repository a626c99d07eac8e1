// ChunkPartitionOp on CPU threads: one thread per chunk at a time (chunks are the unit the
// layout gives offsets for, so threads need no counting pass and no atomics), each scattering its
// chunk's rows to the per-partition cursors of its output (the cache or the spill buffer). The
// partitioner choice concerns how a GPU writes over its link; here both scatter the same way.
#include <stdexcept>
#include <string>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"

namespace joinlab::cpu {

template <class K, class V>
void chunk_partition(const std::vector<ChunkIn<K, V>>& chunks, PartitionFn fn, ChunkOffsets offsets,
                     uint32_t cached_chunks, ChunkOut<K, V> cache, ChunkOut<K, V> spill, int threads) {
  const uint32_t F = fn.fanout();
  const int64_t n = int64_t(chunks.size());
  RegionErrors errors;
#pragma omp parallel for num_threads(std::max(1, std::min<int>(threads, int(n)))) schedule(dynamic, 1)
  for (int64_t c = 0; c < n; ++c) {
    errors.run([&] {
      const ChunkIn<K, V>& in = chunks[size_t(c)];
      const ChunkOut<K, V>& out = uint64_t(c) < cached_chunks ? cache : spill;
      std::vector<uint64_t> at(F);
      for (uint32_t p = 0; p < F; ++p) at[p] = offsets.at(uint64_t(c), p);
      for (uint64_t i = 0; i < in.rows; ++i) {
        const uint32_t p = fn(uint64_t(in.keys[i]));
        const uint64_t o = at[p]++;
        if (o >= out.capacity)
          throw std::length_error("chunk partition: chunk " + std::to_string(c) + " writes row " + std::to_string(o) +
                                  " of an output of " + std::to_string(out.capacity) + " rows");
        out.keys[o] = in.keys[i];
        out.vals[o] = in.vals[i];
      }
    });
  }
  errors.rethrow();
}

#define JL_CHUNK_PARTITION(K, V)                                                                              \
  template void chunk_partition<K, V>(const std::vector<ChunkIn<K, V>>&, PartitionFn, ChunkOffsets, uint32_t, \
                                      ChunkOut<K, V>, ChunkOut<K, V>, int);
JL_FOR_EACH_KV(JL_CHUNK_PARTITION)
#undef JL_CHUNK_PARTITION

}  // namespace joinlab::cpu
