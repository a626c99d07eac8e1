// Radix/hash histogram and partitioning (rui2017 3.2.1, gao2021 3.1, lutz2022 4.2).
//
// A partition pass is histogram -> scan -> scatter over the same fixed assignment of input rows
// to blocks: each block owns a contiguous row range and, for every partition, the contiguous
// output region the scan gives it. The scatter reads a tile of VT tuples per thread (coalesced),
// ranks them per partition with shared-memory atomics, stages the tile in shared memory grouped
// by partition, and writes each partition's rows in windows of 128 bytes of the wider column (32
// rows of a 4-byte column, 16 of an 8-byte one), aligned to that size. The rows of a partition
// that do not yet fill an aligned window stay in a per-partition carry buffer in shared memory
// until later tiles complete it (software write-combining, lutz2022's Shared partitioner, with
// the fill done block-synchronously per tile instead of per warp). So every global write is a
// whole aligned window, except the first and last window of each (block, partition) region.
// Measured on the H100 (experiments/h100/NOTES.md), this beats writing each tile's runs directly
// (CUB onesweep's scatter, kept as cluster option scatter=direct) by 1.5x on W1.
// The fanout one pass can do is bounded by the carry buffers in shared memory (227 KB per block
// on Hopper, two blocks per SM): 2^9 for 8-byte tuples, 2^8 for wider ones; larger fanouts run as
// two passes, high bits then low bits.
#include <cub/block/block_scan.cuh>
#include <cub/device/device_scan.cuh>

#include "kernels/cuda/device_common.cuh"

namespace joinlab::cuda {

namespace {

constexpr int kPartThreads = 512;  // histogram blocks; scatter blocks of 8-byte tuples
constexpr int kPartVT = 8;
constexpr size_t kStaticSmemReserve = 2048;  // BlockScan storage and scalars

// Scatter geometry for tuples of kb + vb bytes: 512 threads for 8-byte tuples, 256 for wider
// ones (so that two blocks with their staged tile and carry buffers share an SM); a window is
// 128 bytes of the wider column (32 rows of a 4-byte column, 16 of an 8-byte one); carry rows
// are padded by one so that the per-partition copies avoid bank conflicts.
constexpr int scatter_threads(size_t kb, size_t vb) { return kb + vb <= 8 ? 512 : 256; }
constexpr uint32_t window_rows(size_t kb, size_t vb) { return uint32_t(128 / (kb > vb ? kb : vb)); }
constexpr uint32_t carry_stride(size_t kb, size_t vb) { return window_rows(kb, vb) + 1; }
constexpr uint32_t scatter_tile(size_t kb, size_t vb) { return uint32_t(scatter_threads(kb, vb)) * kPartVT; }

struct PartBlock {
  uint64_t begin, end;       // rows of the input view
  uint32_t first_block;      // first block of this block's segment
  uint32_t nblocks;          // blocks of the segment
};

constexpr size_t align16(size_t b) { return (b + 15) / 16 * 16; }

// Shared memory of a scatter block: carry buffers (aligned variant only), the staged tile, and
// per-partition counters.
size_t scatter_smem(uint32_t fanout, size_t kb, size_t vb, bool aligned) {
  const size_t carry = aligned ? size_t(fanout) * carry_stride(kb, vb) : 0;
  const size_t tile = scatter_tile(kb, vb);
  return align16(carry * kb) + align16(carry * vb) + align16(tile * kb) + align16(tile * vb) +
         size_t(fanout) * (2 * 8 + 4 * 4) + align16(2 * (size_t(fanout) * 3 + tile / 16 + 16));
}

template <class K>
__global__ void __launch_bounds__(kPartThreads) partition_histogram_kernel(const K* keys, const PartBlock* blocks,
                                                                          PartitionFn fn, uint64_t* hist) {
  extern __shared__ uint32_t counts[];
  const uint32_t fanout = fn.fanout();
  for (uint32_t p = threadIdx.x; p < fanout; p += blockDim.x) counts[p] = 0;
  __syncthreads();
  const PartBlock b = blocks[blockIdx.x];
  constexpr int kUnroll = 4;
  uint64_t i = b.begin + threadIdx.x;
  for (; i + (kUnroll - 1) * kPartThreads < b.end; i += kUnroll * kPartThreads) {
    K k[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) k[u] = keys[i + u * kPartThreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) atomicAdd(&counts[fn(uint64_t(k[u]))], 1u);
  }
  for (; i < b.end; i += kPartThreads) atomicAdd(&counts[fn(uint64_t(keys[i]))], 1u);
  __syncthreads();
  const uint64_t base = uint64_t(fanout) * b.first_block + (blockIdx.x - b.first_block);
  for (uint32_t p = threadIdx.x; p < fanout; p += blockDim.x) hist[base + uint64_t(p) * b.nblocks] = counts[p];
}

// kAligned: windows + carry buffers as described at the top. Otherwise (cluster option
// scatter=direct) each staged row is written straight to its partition's region: runs of a
// partition are contiguous but not aligned (CUB onesweep's scatter), with less work per tile.
template <class K, class V, bool kAligned, int kThreads = scatter_threads(sizeof(K), sizeof(V))>
__global__ void __launch_bounds__(kThreads, 2) partition_scatter_kernel(const K* in_k, const V* in_v,
                                                                        const PartBlock* blocks, PartitionFn fn,
                                                                        const uint64_t* hist_offsets, K* out_k,
                                                                        V* out_v) {
  using PartScan = cub::BlockScan<uint32_t, kThreads>;
  constexpr uint32_t kTile = uint32_t(kThreads) * kPartVT;
  constexpr uint32_t kWindow = window_rows(sizeof(K), sizeof(V));
  constexpr uint32_t kCarryStride = carry_stride(sizeof(K), sizeof(V));
  __shared__ typename PartScan::TempStorage scan_storage;
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t fanout = fn.fanout();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  constexpr int kWarps = kThreads / 32;

  unsigned char* p = smem;
  const size_t carry_rows = kAligned ? size_t(fanout) * kCarryStride : 0;
  K* carry_k = reinterpret_cast<K*>(p);
  p += align16(carry_rows * sizeof(K));
  V* carry_v = reinterpret_cast<V*>(p);
  p += align16(carry_rows * sizeof(V));
  K* stage_k = reinterpret_cast<K*>(p);
  p += align16(size_t(kTile) * sizeof(K));
  V* stage_v = reinterpret_cast<V*>(p);
  p += align16(size_t(kTile) * sizeof(V));
  uint64_t* cursor = reinterpret_cast<uint64_t*>(p);     // next output row of the partition
  uint64_t* flush_end = cursor + fanout;                 // rows below this are written this tile
  uint32_t* carry_n = reinterpret_cast<uint32_t*>(flush_end + fanout);
  uint32_t* tile_n = carry_n + fanout;
  uint32_t* tile_start = tile_n + fanout;
  uint32_t* window_start = tile_start + fanout;                         // aligned variant
  uint16_t* window_owner = reinterpret_cast<uint16_t*>(window_start + fanout);  // window -> partition
  __shared__ uint32_t window_total;

  const PartBlock b = blocks[blockIdx.x];
  const uint64_t hist_base = uint64_t(fanout) * b.first_block + (blockIdx.x - b.first_block);
  if (tid < int(fanout)) {
    cursor[tid] = hist_offsets[hist_base + uint64_t(tid) * b.nblocks];
    carry_n[tid] = 0;
  }

  uint32_t tn = 0;  // rows of the thread's partition in the current tile
  for (uint64_t tile = b.begin; tile < b.end; tile += kTile) {
    const bool last = tile + kTile >= b.end;
    const uint32_t n = uint32_t(min(uint64_t(kTile), b.end - tile));
    if (tid < int(fanout)) {
      if (!kAligned) cursor[tid] += tn;  // the previous tile's rows were written
      tile_n[tid] = 0;
    }
    __syncthreads();

    K k[kPartVT];
    V v[kPartVT];
    uint32_t where[kPartVT];  // partition << 16 | rank in the partition's tile rows
#pragma unroll
    for (int i = 0; i < kPartVT; ++i) {
      const uint32_t idx = i * kThreads + tid;
      if (idx < n) {
        k[i] = in_k[tile + idx];
        v[i] = in_v[tile + idx];
      }
    }
#pragma unroll
    for (int i = 0; i < kPartVT; ++i) {
      const uint32_t idx = i * kThreads + tid;
      if (idx < n) {
        const uint32_t q = fn(uint64_t(k[i]));
        where[i] = (q << 16) | atomicAdd(&tile_n[q], 1u);
      }
    }
    __syncthreads();

    // Plan per partition (thread t owns partition t): which rows become whole windows now, and
    // the windows' places in a flat list (one scan gives both offsets, packed in 16-bit halves:
    // a tile has at most 4096 rows and 4096 / window + 3 * fanout windows).
    uint64_t start = 0, fe = 0;
    uint32_t cn = 0, windows = 0;
    tn = 0;
    if (tid < int(fanout)) {
      tn = tile_n[tid];
      cn = carry_n[tid];
      start = cursor[tid];
      const uint64_t end = start + cn + tn;
      fe = last ? end : (end & ~uint64_t(kWindow - 1));
      if (fe < start) fe = start;
      flush_end[tid] = fe;
      if (kAligned && fe > start) windows = uint32_t((fe - 1) / kWindow - start / kWindow + 1);
    }
    uint32_t excl = 0, packed_total = 0;
    PartScan(scan_storage).ExclusiveSum((tn << 16) | windows, excl, packed_total);
    const uint32_t ts = excl >> 16;
    if (tid < int(fanout)) {
      tile_start[tid] = ts;
      if (kAligned) {
        window_start[tid] = excl & 0xffffu;
        for (uint32_t w = 0; w < windows; ++w) window_owner[(excl & 0xffffu) + w] = uint16_t(tid);
      }
    }
    if (tid == 0) window_total = packed_total & 0xffffu;
    __syncthreads();

#pragma unroll
    for (int i = 0; i < kPartVT; ++i) {
      const uint32_t idx = i * kThreads + tid;
      if (idx < n) {
        const uint32_t at = tile_start[where[i] >> 16] + (where[i] & 0xffffu);
        stage_k[at] = k[i];
        stage_v[at] = v[i];
      }
    }
    __syncthreads();

    if constexpr (!kAligned) {
#pragma unroll
      for (int i = 0; i < kPartVT; ++i) {
        const uint32_t s = i * kThreads + tid;
        if (s < n) {
          const K kk = stage_k[s];
          const V vv = stage_v[s];
          const uint32_t q = fn(uint64_t(kk));
          const uint64_t pos = cursor[q] + (s - tile_start[q]);
          out_k[pos] = kk;
          out_v[pos] = vv;
        }
      }
      __syncthreads();  // cursor advances at the next tile's start
    } else {
    // Write the windows: one warp per window of the flat list, a lane per row.
    const uint32_t windows_here = window_total;
    for (uint32_t c = warp; c < windows_here; c += kWarps) {
      const uint32_t q = window_owner[c];
      const uint64_t st = cursor[q];
      const uint64_t pos = (st & ~uint64_t(kWindow - 1)) + uint64_t(kWindow) * (c - window_start[q]) + lane;
      if (lane < int(kWindow) && pos >= st && pos < flush_end[q]) {
        const uint32_t idx = uint32_t(pos - st), qc = carry_n[q], qs = tile_start[q];
        out_k[pos] = idx < qc ? carry_k[q * kCarryStride + idx] : stage_k[qs + idx - qc];
        out_v[pos] = idx < qc ? carry_v[q * kCarryStride + idx] : stage_v[qs + idx - qc];
      }
    }
    __syncthreads();
    // Keep each partition's rows past its last whole window (< one window) in its carry buffer.
    if (tid < int(fanout)) {
      const uint32_t keep = uint32_t(start + cn + tn - fe), from = uint32_t(fe - start);
      K* ck = carry_k + tid * kCarryStride;
      V* cv = carry_v + tid * kCarryStride;
      if (from == 0) {  // nothing written: the tile's rows join the carry
        for (uint32_t x = 0; x < tn; ++x) {
          ck[cn + x] = stage_k[ts + x];
          cv[cn + x] = stage_v[ts + x];
        }
      } else {  // ascending copy: a kept carry row only moves down
        for (uint32_t x = 0; x < keep; ++x) {
          const uint32_t idx = from + x;
          ck[x] = idx < cn ? ck[idx] : stage_k[ts + idx - cn];
          cv[x] = idx < cn ? cv[idx] : stage_v[ts + idx - cn];
        }
      }
      cursor[tid] = fe;
      carry_n[tid] = keep;
    }
    }
  }
}

// d_offsets[s * fanout + p] = offset of (segment s, partition p); d_offsets[k * fanout] = total.
__global__ void partition_offsets_kernel(const uint64_t* scanned, const uint32_t* seg_first_block,
                                         const uint32_t* seg_blocks, uint32_t segments, uint32_t fanout,
                                         uint64_t total, uint64_t* d_offsets) {
  const uint64_t n = uint64_t(segments) * fanout;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i <= n; i += uint64_t(gridDim.x) * blockDim.x) {
    if (i == n) {
      d_offsets[n] = total;
      continue;
    }
    const uint32_t s = uint32_t(i / fanout), p = uint32_t(i % fanout);
    d_offsets[i] = scanned[uint64_t(fanout) * seg_first_block[s] + uint64_t(p) * seg_blocks[s]];
  }
}

template <class K>
__global__ void histogram_shared_kernel(const K* keys, uint64_t rows, PartitionFn fn, uint64_t* d_counts) {
  extern __shared__ uint32_t counts[];
  const uint32_t fanout = fn.fanout();
  for (uint32_t p = threadIdx.x; p < fanout; p += blockDim.x) counts[p] = 0;
  __syncthreads();
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows; i += uint64_t(gridDim.x) * blockDim.x)
    atomicAdd(&counts[fn(uint64_t(keys[i]))], 1u);
  __syncthreads();
  for (uint32_t p = threadIdx.x; p < fanout; p += blockDim.x)
    if (counts[p]) atomic_add(&d_counts[p], counts[p]);
}

template <class K>
__global__ void histogram_global_kernel(const K* keys, uint64_t rows, PartitionFn fn, uint64_t* d_counts) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows; i += uint64_t(gridDim.x) * blockDim.x)
    atomic_add(&d_counts[fn(uint64_t(keys[i]))], 1);
}

// One histogram + scan + scatter pass with fanout <= max_one_pass_bits.
template <class K, class V>
void partition_one_pass(KernelContext& ctx, const K* in_k, const V* in_v, const std::vector<uint64_t>& segments,
                        PartitionFn fn, K* out_k, V* out_v, uint64_t* d_offsets) {
  const uint32_t fanout = fn.fanout();
  const uint32_t nseg = uint32_t(segments.size() - 1);
  const uint64_t total = segments.back() - segments.front();
  const size_t smem = scatter_smem(fanout, sizeof(K), sizeof(V), ctx.aligned_scatter);
  auto scatter = ctx.aligned_scatter ? partition_scatter_kernel<K, V, true> : partition_scatter_kernel<K, V, false>;
  allow_shared_memory(scatter, smem);
  prefer_shared_memory(scatter);
  int per_sm = 1;
  constexpr int threads = scatter_threads(sizeof(K), sizeof(V));
  constexpr uint32_t kTile = scatter_tile(sizeof(K), sizeof(V));
  JL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, scatter, threads, smem));
  const uint64_t target_blocks = uint64_t(ctx.info().sm_count) * uint64_t(std::max(per_sm, 1)) * 3;
  const uint64_t rows_per_block =
      std::max<uint64_t>(2 * kTile, (total / target_blocks + kTile - 1) / kTile * kTile);

  std::vector<PartBlock> blocks;
  std::vector<uint32_t> seg_first(nseg), seg_blocks(nseg);
  for (uint32_t s = 0; s < nseg; ++s) {
    const uint64_t b = segments[s], e = segments[s + 1];
    const uint32_t nb = uint32_t(std::max<uint64_t>(1, (e - b + rows_per_block - 1) / rows_per_block));
    seg_first[s] = uint32_t(blocks.size());
    seg_blocks[s] = nb;
    for (uint32_t j = 0; j < nb; ++j)
      blocks.push_back({std::min(e, b + j * rows_per_block), std::min(e, b + (j + 1) * rows_per_block), seg_first[s], nb});
  }
  const uint64_t hist_n = uint64_t(fanout) * blocks.size();
  PartBlock* d_blocks = ctx.upload(blocks);
  uint32_t* d_seg_first = ctx.upload(seg_first);
  uint32_t* d_seg_blocks = ctx.upload(seg_blocks);
  uint64_t* hist = ctx.scratch_array<uint64_t>(hist_n);
  uint64_t* scanned = ctx.scratch_array<uint64_t>(hist_n);

  partition_histogram_kernel<K><<<unsigned(blocks.size()), kPartThreads, fanout * sizeof(uint32_t), ctx.stream()>>>(
      in_k, d_blocks, fn, hist);
  JL_CUDA_LAUNCHED("partition_histogram_kernel");
  ctx.mark("partition_histogram_kernel");
  exclusive_scan(ctx, hist, scanned, hist_n);
  // The scan is over this call's rows, so offsets start at 0 = out row of segments.front().
  scatter<<<unsigned(blocks.size()), threads, smem, ctx.stream()>>>(in_k, in_v, d_blocks, fn, scanned, out_k,
                                                                        out_v);
  JL_CUDA_LAUNCHED("partition_scatter_kernel");
  ctx.mark("partition_scatter_kernel");
  partition_offsets_kernel<<<grid_for(uint64_t(nseg) * fanout + 1, 256, 1024), 256, 0, ctx.stream()>>>(
      scanned, d_seg_first, d_seg_blocks, nseg, fanout, total, d_offsets);
  JL_CUDA_LAUNCHED("partition_offsets_kernel");
  ctx.mark("partition_offsets_kernel");
}

}  // namespace

uint32_t max_one_pass_bits(const DeviceInfo& info, uint32_t key_bytes, uint32_t val_bytes) {
  const uint32_t threads = uint32_t(scatter_threads(key_bytes, val_bytes));
  for (uint32_t bits = 9; bits > 0; --bits)  // at most one partition per thread of the block
    if ((1u << bits) <= threads &&
        scatter_smem(1u << bits, key_bytes, val_bytes, true) + kStaticSmemReserve <= info.smem_per_block_optin)
      return bits;
  return 1;
}

template <class K>
void histogram(KernelContext& ctx, const K* keys, uint64_t rows, PartitionFn fn, uint64_t* d_counts) {
  if (!rows) return;
  const uint32_t fanout = fn.fanout();
  const size_t smem = size_t(fanout) * sizeof(uint32_t);
  if (smem <= 64 * 1024) {
    allow_shared_memory(histogram_shared_kernel<K>, smem);
    histogram_shared_kernel<K><<<grid_for(rows, 1024, ctx.info().sm_count * 2), 1024, smem, ctx.stream()>>>(
        keys, rows, fn, d_counts);
    JL_CUDA_LAUNCHED("histogram_shared_kernel");
  } else {
    histogram_global_kernel<K><<<grid_for(rows, 256, ctx.info().sm_count * 16), 256, 0, ctx.stream()>>>(
        keys, rows, fn, d_counts);
    JL_CUDA_LAUNCHED("histogram_global_kernel");
  }
}

template <class K, class V>
void partition(KernelContext& ctx, const K* in_k, const V* in_v, const std::vector<uint64_t>& segments,
               PartitionFn fn, K* out_k, V* out_v, uint64_t* d_offsets) {
  if (segments.size() < 2) throw RuntimeError("partition: segments need at least two offsets");
  for (size_t i = 1; i < segments.size(); ++i)
    if (segments[i] < segments[i - 1])
      throw RuntimeError("partition: segment offsets are not ascending at index " + std::to_string(i));
  const uint32_t one_pass = max_one_pass_bits(ctx.info(), sizeof(K), sizeof(V));
  if (fn.bits <= one_pass) {
    partition_one_pass(ctx, in_k, in_v, segments, fn, out_k, out_v, d_offsets);
    return;
  }
  // Two passes: the high bits first (recursively, should they exceed one pass too), then each
  // of those partitions on the low bits. Pass 2 needs pass 1's offsets on the host to lay out
  // its blocks, so the host waits for pass 1 here.
  PartitionFn high = fn, low = fn;
  low.bits = std::min(one_pass, (fn.bits + 1) / 2);
  high.bits = fn.bits - low.bits;
  high.shift = fn.shift + low.bits;
  const uint64_t rows = segments.back() - segments.front();
  const uint64_t nseg = segments.size() - 1;
  K* tmp_k = ctx.scratch_array<K>(rows);
  V* tmp_v = ctx.scratch_array<V>(rows);
  const uint64_t n_mid = nseg * high.fanout() + 1;
  uint64_t* d_mid = ctx.scratch_array<uint64_t>(n_mid);
  partition(ctx, in_k, in_v, segments, high, tmp_k, tmp_v, d_mid);
  std::vector<uint64_t> mid(n_mid);
  JL_CUDA_CHECK(cudaMemcpyAsync(mid.data(), d_mid, n_mid * sizeof(uint64_t), cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.sync();
  partition(ctx, tmp_k, tmp_v, mid, low, out_k, out_v, d_offsets);
}

#define JL_PARTITION(K, V)                                                                                  \
  template void partition<K, V>(KernelContext&, const K*, const V*, const std::vector<uint64_t>&, PartitionFn, \
                                K*, V*, uint64_t*);
JL_PARTITION(uint32_t, uint32_t)
JL_PARTITION(uint32_t, uint64_t)
JL_PARTITION(uint64_t, uint32_t)
JL_PARTITION(uint64_t, uint64_t)
template void histogram<uint32_t>(KernelContext&, const uint32_t*, uint64_t, PartitionFn, uint64_t*);
template void histogram<uint64_t>(KernelContext&, const uint64_t*, uint64_t, PartitionFn, uint64_t*);

}  // namespace joinlab::cuda
