// ChunkPartitionOp on the GPU: triton's first pass (lutz2022 4.2-4.3), whose output is partly
// pinned host memory reached over the link, and its second pass (all device memory).
//
// A block takes chunks in turn; it holds each partition's next output row (from the chunked
// prefix sum's offsets) in shared memory and goes through its chunk in tiles: each thread loads
// kVT rows (coalesced; zero-copy reads where the chunk is in pinned memory), the block counts
// them per partition with shared-memory atomics, scans the counts and stages the tile grouped by
// partition, so that each partition's rows of the tile are one run written by consecutive
// threads. What the writes look like is the partitioner's:
//  * Shared: into pinned memory (a spilled chunk), each partition has a line buffer in shared
//    memory that the block's warps share (lutz2022 4.2): the rows of a tile's run go to it until
//    they reach a 128-byte line boundary of the output, and then the buffered and the new rows up
//    to the last boundary they reach are written by one warp, lane by row, so the link sees whole
//    aligned lines (and one partial line at each run's ends). Where F line buffers do not fit
//    shared memory (fanouts above 512 for 8-byte columns), and into device memory, a tile's run
//    goes straight to the output.
//  * Hierarchical: each partition has a buffer of flush_bytes in device memory (a block's pool
//    holds one per partition and a spare per warp: lutz2022 4.3's second-level buffers). A tile's
//    rows go into their partition's buffer while it has room; a partition that a tile's run
//    overflows is written out up to the last 128-byte line boundary its rows reach (the tile's
//    rows by the whole block, the buffer's by one warp), and its remaining rows go into that
//    warp's spare, which becomes the partition's buffer while the full one becomes the warp's
//    spare. So the link sees writes of about flush_bytes, line-aligned, and full buffers are
//    written by the block's warps at once, none waiting for another's. Buffers are flushed at
//    each chunk's end, a warp per partition.
// A row past its output's capacity is not written; the kernel counts it (d_words[kChecksumWord]),
// and the host reports it as an error.
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/device_common.cuh"

namespace joinlab::cuda {

namespace {

constexpr int kCpThreads = 256;
constexpr int kVT = 4;
constexpr uint32_t kTile = kCpThreads * kVT;

struct ChunkDesc {
  const void* keys;
  const void* vals;
  uint64_t rows;
  uint64_t cached;  // 1: writes to the cache, 0: to the spill buffer
};

struct OutCols {
  void* keys;
  void* vals;
  uint64_t capacity;
};

constexpr int kWarps = kCpThreads / 32;

size_t cp_smem(uint32_t fanout, size_t kb, size_t vb) {
  // stage (keys, values, partition ids); per partition counts, run starts, buffer fills, buffer
  // slots, cursors; the warps' spare slots
  return kTile * (kb + vb + 4) + size_t(fanout) * (4 + 4 + 4 + 4 + 8) + kWarps * 4 + 16;
}
// Rows of a 128-byte line of the narrower column (a line or two of the wider one).
uint32_t line_rows_of(size_t kb, size_t vb) { return uint32_t(128 / std::min(kb, vb)); }
size_t line_smem(uint32_t fanout, size_t kb, size_t vb) {
  return size_t(fanout) * line_rows_of(kb, vb) * (kb + vb) + 16;
}

// The largest line boundary at or below row x: boundaries at first + m * line rows (first: the
// rows before the output's first 128-byte aligned key), 0 below the first.
__device__ __forceinline__ uint64_t line_floor(uint64_t x, uint32_t first, uint32_t line) {
  return x < first ? 0 : first + (x - first) / line * line;
}

// Rows (from its cursor) that a hierarchical partition writes when a tile's run overflows its
// buffer of `fill` rows: up to the last line boundary its `total` rows reach, and at least the
// buffered ones; all of them where the rest would not fit a buffer.
__device__ __forceinline__ uint32_t flush_end(uint64_t cursor, uint32_t fill, uint32_t total, uint32_t first,
                                              uint32_t line, uint32_t buf_rows) {
  const uint64_t a = line_floor(cursor + total, first, line);
  const uint32_t e = a > cursor + fill ? uint32_t(a - cursor) : fill;
  return total - e <= buf_rows ? e : total;
}

template <class K, class V>
__device__ void write_row(const OutCols& o, uint64_t at, K k, V v, unsigned long long* lost) {
  if (at < o.capacity) {
    static_cast<K*>(o.keys)[at] = k;
    static_cast<V*>(o.vals)[at] = v;
  } else {
    atomicAdd(lost, 1ull);
  }
}

template <class K, class V>
__global__ void __launch_bounds__(kCpThreads) chunk_partition_kernel(const ChunkDesc* chunks, uint32_t nchunks,
                                                                    PartitionFn fn, ChunkOffsets offsets,
                                                                    OutCols cache, OutCols spill, bool hierarchical,
                                                                    uint32_t buf_rows, K* buf_k, V* buf_v,
                                                                    uint32_t line, uint32_t cache_first,
                                                                    uint32_t spill_first, unsigned long long* lost) {
  using Scan = cub::BlockScan<uint32_t, kCpThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t F = fn.fanout();
  uint64_t* cursor = reinterpret_cast<uint64_t*>(smem);
  K* stage_k = reinterpret_cast<K*>(cursor + F);
  V* stage_v = reinterpret_cast<V*>(stage_k + kTile);
  uint32_t* stage_p = reinterpret_cast<uint32_t*>(stage_v + kTile);
  uint32_t* count = stage_p + kTile;
  uint32_t* start = count + F;
  uint32_t* fill = start + F;  // rows in each partition's buffer (Hierarchical: device; Shared: line)
  uint32_t* slot = fill + F;   // Hierarchical: each partition's buffer in the block's pool
  uint32_t* spare = slot + F;  // Hierarchical: each warp's spare buffer
  // Shared into pinned memory: line buffers of `line` rows per partition, after the arrays above.
  K* line_k = reinterpret_cast<K*>((reinterpret_cast<uintptr_t>(spare + kWarps) + 15) / 16 * 16);
  V* line_v = reinterpret_cast<V*>(line_k + uint64_t(F) * line);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  // Hierarchical: the block's pool of F + kWarps buffers of buf_rows rows.
  K* my_k = buf_k + uint64_t(blockIdx.x) * (F + kWarps) * buf_rows;
  V* my_v = buf_v + uint64_t(blockIdx.x) * (F + kWarps) * buf_rows;
  if (hierarchical) {
    for (uint32_t p = tid; p < F; p += kCpThreads) slot[p] = p;
    if (tid < kWarps) spare[tid] = F + uint32_t(tid);
  }

  for (uint32_t c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const ChunkDesc d = chunks[c];
    const OutCols out = d.cached ? cache : spill;
    const uint32_t first = d.cached ? cache_first : spill_first;
    const K* in_k = static_cast<const K*>(d.keys);
    const V* in_v = static_cast<const V*>(d.vals);
    for (uint32_t p = tid; p < F; p += kCpThreads) {
      cursor[p] = offsets.at(c, p);
      fill[p] = 0;
    }
    __syncthreads();
    for (uint64_t t0 = 0; t0 < d.rows; t0 += kTile) {
      const uint32_t n = uint32_t(d.rows - t0 < kTile ? d.rows - t0 : kTile);
      for (uint32_t p = tid; p < F; p += kCpThreads) count[p] = 0;
      __syncthreads();
      K k[kVT];
      V v[kVT];
      uint32_t part[kVT], rank[kVT];
#pragma unroll
      for (int u = 0; u < kVT; ++u) {
        const uint32_t i = uint32_t(u * kCpThreads + tid);
        if (i < n) {
          k[u] = in_k[t0 + i];
          v[u] = in_v[t0 + i];
          part[u] = fn(uint64_t(k[u]));
          rank[u] = atomicAdd(&count[part[u]], 1u);
        }
      }
      __syncthreads();
      // Exclusive scan of the counts: each thread sums a run of consecutive partitions.
      const uint32_t per = (F + kCpThreads - 1) / kCpThreads;
      uint32_t sum = 0;
      for (uint32_t j = 0; j < per; ++j) {
        const uint32_t p = uint32_t(tid) * per + j;
        if (p < F) sum += count[p];
      }
      uint32_t before;
      Scan(scan_storage).ExclusiveSum(sum, before);
      for (uint32_t j = 0; j < per; ++j) {
        const uint32_t p = uint32_t(tid) * per + j;
        if (p < F) {
          start[p] = before;
          before += count[p];
        }
      }
      __syncthreads();
#pragma unroll
      for (int u = 0; u < kVT; ++u) {
        const uint32_t i = uint32_t(u * kCpThreads + tid);
        if (i < n) {
          const uint32_t at = start[part[u]] + rank[u];
          stage_k[at] = k[u];
          stage_v[at] = v[u];
          stage_p[at] = part[u];
        }
      }
      __syncthreads();
      if (hierarchical) {
        // Rows of a partition whose buffer has room go into it; of an overflowing partition, the
        // tile's rows up to its flush end go straight out (the buffered ones follow, by a warp).
        for (uint32_t i = tid; i < n; i += kCpThreads) {
          const uint32_t p = stage_p[i];
          const uint32_t f = fill[p], total = f + count[p], g = f + (i - start[p]);
          if (total <= buf_rows) {
            my_k[uint64_t(slot[p]) * buf_rows + g] = stage_k[i];
            my_v[uint64_t(slot[p]) * buf_rows + g] = stage_v[i];
          } else if (g < flush_end(cursor[p], f, total, first, line, buf_rows)) {
            write_row(out, cursor[p] + g, stage_k[i], stage_v[i], lost);
          }
        }
        __syncthreads();
        // The warps find the overflowing partitions, a lane per partition. For each, its warp
        // writes the full buffer out, puts the run's rows past the flush end into its spare, and
        // swaps the two.
        for (uint32_t base = uint32_t(warp) * 32; base < F; base += kWarps * 32) {
          const uint32_t p = base + uint32_t(lane);
          const bool over = p < F && fill[p] + count[p] > buf_rows;
          if (p < F && !over) fill[p] += count[p];
          for (uint32_t m = __ballot_sync(~0u, over); m; m &= m - 1) {
            const uint32_t q = base + uint32_t(__ffs(m) - 1);
            const uint32_t f = fill[q], total = f + count[q], full = slot[q], next = spare[warp];
            const uint64_t at = cursor[q];
            const uint32_t e = flush_end(at, f, total, first, line, buf_rows);
            for (uint32_t g = uint32_t(lane); g < f; g += 32)
              write_row(out, at + g, my_k[uint64_t(full) * buf_rows + g], my_v[uint64_t(full) * buf_rows + g], lost);
            for (uint32_t g = e + uint32_t(lane); g < total; g += 32) {
              my_k[uint64_t(next) * buf_rows + (g - e)] = stage_k[start[q] + g - f];
              my_v[uint64_t(next) * buf_rows + (g - e)] = stage_v[start[q] + g - f];
            }
            __syncwarp();
            if (lane == 0) {
              slot[q] = next;
              spare[warp] = full;
              cursor[q] = at + e;
              fill[q] = total - e;
            }
            __syncwarp();
          }
        }
      } else if (line && !d.cached) {
        // cursor[p]: the output row of the partition's first buffered row; fill[p] rows buffered.
        // A partition whose rows (buffered, then this tile's run) reach a line boundary writes them
        // up to the last boundary they reach, a warp per partition; the rest stay buffered.
        for (uint32_t p = uint32_t(warp); p < F; p += kWarps) {
          const uint64_t pos = cursor[p];
          const uint32_t b = fill[p];
          const uint64_t e = line_floor(pos + b + count[p], spill_first, line);
          for (uint64_t r = pos + uint64_t(lane); r < e; r += 32) {
            const uint32_t g = uint32_t(r - pos);
            if (g < b) write_row(out, r, line_k[uint64_t(p) * line + g], line_v[uint64_t(p) * line + g], lost);
            else write_row(out, r, stage_k[start[p] + g - b], stage_v[start[p] + g - b], lost);
          }
        }
        __syncthreads();
        for (uint32_t i = tid; i < n; i += kCpThreads) {
          const uint32_t p = stage_p[i];
          const uint64_t pos = cursor[p], r = pos + fill[p] + (i - start[p]);
          const uint64_t kept = max(line_floor(pos + fill[p] + count[p], spill_first, line), pos);
          if (r >= kept) {
            line_k[uint64_t(p) * line + (r - kept)] = stage_k[i];
            line_v[uint64_t(p) * line + (r - kept)] = stage_v[i];
          }
        }
        __syncthreads();
        for (uint32_t p = tid; p < F; p += kCpThreads) {
          const uint64_t end = cursor[p] + fill[p] + count[p];
          const uint64_t kept = max(line_floor(end, spill_first, line), cursor[p]);
          cursor[p] = kept;
          fill[p] = uint32_t(end - kept);
        }
      } else {
        for (uint32_t i = tid; i < n; i += kCpThreads) {
          const uint32_t p = stage_p[i];
          write_row(out, cursor[p] + (i - start[p]), stage_k[i], stage_v[i], lost);
        }
        __syncthreads();
        for (uint32_t p = tid; p < F; p += kCpThreads) cursor[p] += count[p];
      }
      __syncthreads();
    }
    if (hierarchical) {  // the chunk's last rows, a warp per partition
      for (uint32_t p = uint32_t(warp); p < F; p += kWarps)
        for (uint32_t g = uint32_t(lane); g < fill[p]; g += 32)
          write_row(out, cursor[p] + g, my_k[uint64_t(slot[p]) * buf_rows + g], my_v[uint64_t(slot[p]) * buf_rows + g],
                    lost);
    } else if (line && !d.cached) {  // the partial lines at the runs' ends
      for (uint32_t p = uint32_t(warp); p < F; p += kWarps)
        for (uint32_t g = uint32_t(lane); g < fill[p]; g += 32)
          write_row(out, cursor[p] + g, line_k[uint64_t(p) * line + g], line_v[uint64_t(p) * line + g], lost);
    }
    __syncthreads();
  }
}

__global__ void partition_starts_kernel(ChunkOffsets offsets, uint32_t fanout, uint64_t rows, uint64_t* starts) {
  for (uint32_t p = blockIdx.x * blockDim.x + threadIdx.x; p <= fanout; p += gridDim.x * blockDim.x)
    starts[p] = p < fanout ? offsets.at(0, p) : rows;
}

}  // namespace

void chunk_partition_starts(KernelContext& ctx, ChunkOffsets offsets, uint32_t fanout, uint64_t rows,
                            uint64_t* starts) {
  partition_starts_kernel<<<grid_for(uint64_t(fanout) + 1, 256, 64), 256, 0, ctx.stream()>>>(offsets, fanout, rows,
                                                                                            starts);
  JL_CUDA_LAUNCHED("partition_starts_kernel");
}

template <class K, class V>
void chunk_partition(KernelContext& ctx, const std::vector<ChunkPartitionRun>& chunks, PartitionFn fn,
                     ChunkOffsets offsets, ChunkPartitionOut cache, ChunkPartitionOut spill, bool hierarchical,
                     uint32_t flush_bytes, uint64_t* d_words) {
  if (chunks.empty()) return;
  const uint32_t F = fn.fanout();
  std::vector<ChunkDesc> desc;
  for (const ChunkPartitionRun& c : chunks) desc.push_back({c.keys, c.vals, c.rows, c.cached ? 1u : 0u});
  size_t smem = cp_smem(F, sizeof(K), sizeof(V));
  // Shared into pinned memory: line buffers where they fit beside the stage.
  bool spills = false;
  for (const ChunkPartitionRun& c : chunks) spills |= !c.cached;
  const size_t with_lines = smem + line_smem(F, sizeof(K), sizeof(V));
  const uint32_t line_rows = line_rows_of(sizeof(K), sizeof(V));
  const uint32_t buf_rows = hierarchical ? std::max<uint32_t>(1, flush_bytes / uint32_t(sizeof(K) + sizeof(V))) : 0;
  // Shared: rows of a line buffer (0: none). Hierarchical: the rows its flushes align to (1 where
  // a buffer is smaller than a line).
  const uint32_t line = hierarchical ? (buf_rows >= line_rows ? line_rows : 1)
                        : spills && spill.keys && with_lines + 1024 <= ctx.info().smem_per_block_optin ? line_rows
                                                                                                          : 0;
  if (line && !hierarchical) smem = with_lines;
  // Rows before an output's first 128-byte aligned key: where its line boundaries start.
  auto first_of = [&](const void* keys) {
    return line ? uint32_t((128 - reinterpret_cast<uintptr_t>(keys) % 128) % 128 / sizeof(K)) % line : 0u;
  };
  if (smem > ctx.info().smem_per_block_optin)
    throw RuntimeError("chunk partition: fanout " + std::to_string(F) + " needs " + std::to_string(smem) +
                       " bytes of shared memory per block, the device has " +
                       std::to_string(ctx.info().smem_per_block_optin));
  auto kernel = chunk_partition_kernel<K, V>;
  allow_shared_memory(kernel, smem);  // set once per kernel: each call cost host time per launch
  // Two blocks per SM, fewer where the hierarchical buffers would take more than 256 MiB.
  uint32_t grid = std::min<uint32_t>(uint32_t(chunks.size()), uint32_t(2 * std::max(ctx.info().sm_count, 1)));
  const uint64_t pool = hierarchical ? uint64_t(F + kWarps) * buf_rows : 0;  // rows of a block's buffers
  if (hierarchical)
    grid = uint32_t(std::max<uint64_t>(1, std::min<uint64_t>(grid, (uint64_t(256) << 20) / (pool * (sizeof(K) + sizeof(V))))));
  K* buf_k = hierarchical ? ctx.scratch_array<K>(grid * pool) : nullptr;
  V* buf_v = hierarchical ? ctx.scratch_array<V>(grid * pool) : nullptr;
  const ChunkDesc* d_desc = ctx.upload(desc);
  ctx.mark("chunk_partition");
  kernel<<<grid, kCpThreads, smem, ctx.stream()>>>(
      d_desc, uint32_t(desc.size()), fn, offsets, OutCols{cache.keys, cache.vals, cache.capacity},
      OutCols{spill.keys, spill.vals, spill.capacity}, hierarchical, buf_rows, buf_k, buf_v, line, first_of(cache.keys),
      first_of(spill.keys),
      reinterpret_cast<unsigned long long*>(d_words + kChecksumWord));
  JL_CUDA_CHECK(cudaGetLastError());
}

#define JL_CHUNK_PARTITION(K, V)                                                                                   \
  template void chunk_partition<K, V>(KernelContext&, const std::vector<ChunkPartitionRun>&, PartitionFn,           \
                                      ChunkOffsets, ChunkPartitionOut, ChunkPartitionOut, bool, uint32_t, uint64_t*);
JL_CHUNK_PARTITION(uint32_t, uint32_t)
JL_CHUNK_PARTITION(uint32_t, uint64_t)
JL_CHUNK_PARTITION(uint64_t, uint32_t)
JL_CHUNK_PARTITION(uint64_t, uint64_t)
#undef JL_CHUNK_PARTITION

}  // namespace joinlab::cuda
