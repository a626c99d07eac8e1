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
// Measured on the H100 (docs/benchmarks.md), this beats writing each tile's runs directly
// (CUB onesweep's scatter, kept as cluster option scatter=direct) by 1.5x on the single-GPU benchmark's 2^27 rows.
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

// Where one partition's windows of the current tile go and where their rows are in shared
// memory, read by every lane that writes one of them (one 16-byte load instead of five).
struct __align__(16) WindowPlan {
  uint64_t pos0;          // output row of the partition's first window (window-aligned)
  uint16_t first_window;  // index of that window in the tile's flat window list
  uint16_t end;           // rows in [pos0 + begin, pos0 + end) are written this tile
  int16_t stage_at;       // stage row of the row at index cn (the tile's first row) minus cn
  uint8_t begin;          // rows before pos0 + begin belong to an earlier block or tile
  uint8_t carry;          // rows at indices below this come from the carry buffer
};

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
         size_t(fanout) * (sizeof(WindowPlan) + 8 + 3 * 4) + align16(2 * (size_t(fanout) * 3 + tile / 16 + 16));
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
// kClamp: fn.clamps() (an MSD sort's partitioning); the others skip its compare in the hot loop
// (the single-GPU benchmark's smj: its four 4+4-byte scatters took 0.19 ms longer with it).
template <class K, class V, bool kAligned, bool kClamp, int kThreads = scatter_threads(sizeof(K), sizeof(V))>
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
  WindowPlan* plan = reinterpret_cast<WindowPlan*>(p);  // aligned variant
  uint64_t* cursor = reinterpret_cast<uint64_t*>(plan + fanout);  // next output row of the partition
  uint32_t* carry_n = reinterpret_cast<uint32_t*>(cursor + fanout);
  uint32_t* tile_n = carry_n + fanout;
  uint32_t* tile_start = tile_n + fanout;
  uint16_t* window_owner = reinterpret_cast<uint16_t*>(tile_start + fanout);  // window -> partition
  // Element offsets of the staged tile from the carry buffers: a row is read with one load
  // from either, addressed off the carry buffer.
  const int32_t stage_k_at = int32_t(stage_k - carry_k), stage_v_at = int32_t(stage_v - carry_v);
  __shared__ uint32_t window_total;

  const PartBlock b = blocks[blockIdx.x];
  const uint64_t hist_base = uint64_t(fanout) * b.first_block + (blockIdx.x - b.first_block);
  if (tid < int(fanout)) {
    cursor[tid] = hist_offsets[hist_base + uint64_t(tid) * b.nblocks];
    carry_n[tid] = 0;
  }

  // The next tile's loads are issued as soon as this tile is staged (its registers are free
  // then), so they are in flight while the block writes windows and carries: the block alone
  // keeps DRAM busy across its barriers (two blocks per SM cannot hide that latency).
  K k[kPartVT];
  V v[kPartVT];
  auto load_tile = [&](uint64_t at) {
    const uint32_t rows = uint32_t(min(uint64_t(kTile), b.end - at));
#pragma unroll
    for (int i = 0; i < kPartVT; ++i) {
      const uint32_t idx = i * kThreads + tid;
      if (idx < rows) {
        k[i] = in_k[at + idx];
        v[i] = in_v[at + idx];
      }
    }
  };
  if (b.begin < b.end) load_tile(b.begin);

  uint32_t tn = 0;  // rows of the thread's partition in the current tile
  for (uint64_t tile = b.begin; tile < b.end; tile += kTile) {
    const bool last = tile + kTile >= b.end;
    const uint32_t n = uint32_t(min(uint64_t(kTile), b.end - tile));
    if (tid < int(fanout)) {
      if (!kAligned) cursor[tid] += tn;  // the previous tile's rows were written
      tile_n[tid] = 0;
    }
    __syncthreads();

    uint32_t where[kPartVT];  // partition << 16 | rank in the partition's tile rows
#pragma unroll
    for (int i = 0; i < kPartVT; ++i) {
      const uint32_t idx = i * kThreads + tid;
      if (idx < n) {
        const uint32_t q = kClamp ? fn(uint64_t(k[i])) : fn.digit(uint64_t(k[i]));
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
      if (kAligned && fe > start) windows = uint32_t((fe - 1) / kWindow - start / kWindow + 1);
    }
    uint32_t excl = 0, packed_total = 0;
    PartScan(scan_storage).ExclusiveSum((tn << 16) | windows, excl, packed_total);
    const uint32_t ts = excl >> 16;
    if (tid < int(fanout)) {
      tile_start[tid] = ts;
      if (kAligned) {
        const uint64_t pos0 = start & ~uint64_t(kWindow - 1);
        plan[tid] = WindowPlan{pos0, uint16_t(excl & 0xffffu), uint16_t(fe - pos0), int16_t(int32_t(ts) - int32_t(cn)),
                               uint8_t(start - pos0), uint8_t(cn)};
        for (uint32_t w = 0; w < windows; ++w) window_owner[(excl & 0xffffu) + w] = uint16_t(tid);
      }
    }
    if (tid == 0) window_total = packed_total & 0xffffu;
    __syncthreads();

    // Every stage position is looked up before the first row is stored: shared-memory loads and
    // stores that the compiler cannot tell apart would otherwise run one after the other.
#pragma unroll
    for (int i = 0; i < kPartVT; ++i)
      if (i * kThreads + tid < n) where[i] = tile_start[where[i] >> 16] + (where[i] & 0xffffu);
#pragma unroll
    for (int i = 0; i < kPartVT; ++i) {
      if (i * kThreads + tid < n) {
        stage_k[where[i]] = k[i];
        stage_v[where[i]] = v[i];
      }
    }
    if (!last) load_tile(tile + kTile);
    __syncthreads();

    if constexpr (!kAligned) {
#pragma unroll
      for (int i = 0; i < kPartVT; ++i) {
        const uint32_t s = i * kThreads + tid;
        if (s < n) {
          const K kk = stage_k[s];
          const V vv = stage_v[s];
          const uint32_t q = kClamp ? fn(uint64_t(kk)) : fn.digit(uint64_t(kk));
          const uint64_t pos = cursor[q] + (s - tile_start[q]);
          out_k[pos] = kk;
          out_v[pos] = vv;
        }
      }
      __syncthreads();  // cursor advances at the next tile's start
    } else {
    // Write the windows: a warp per window of the flat list (two per warp for windows of 16
    // rows: 8-byte columns), a lane per row; two windows per iteration, so that the dependent
    // shared-memory loads of one (owner, plan, row) overlap the other's.
    constexpr uint32_t kPerWarp = 32 / kWindow, kStep = kWarps * kPerWarp;
    const uint32_t windows_here = window_total, wl = uint32_t(lane) % kWindow;
    struct Slot {
      bool ok;
      uint64_t pos;
      int32_t k_at, v_at;  // the row's place in shared memory, off carry_k / carry_v
    };
    auto locate = [&](uint32_t c, bool valid) {
      Slot sl{false, 0, 0, 0};
      if (!valid) return sl;
      const uint32_t q = window_owner[c];
      const WindowPlan w = plan[q];
      const uint32_t r = kWindow * (c - w.first_window) + wl;  // row of the window group from pos0
      if (r >= w.begin && r < w.end) {
        const int32_t idx = int32_t(r - w.begin);  // index in carry rows, then tile rows
        const bool from_carry = idx < int32_t(w.carry);
        const int32_t at = idx + (from_carry ? int32_t(q * kCarryStride) : w.stage_at);
        sl = Slot{true, w.pos0 + r, at + (from_carry ? 0 : stage_k_at), at + (from_carry ? 0 : stage_v_at)};
      }
      return sl;
    };
    // (One per iteration for 512-thread blocks: their 64 registers hold no second one.)
    constexpr uint32_t kWays = kThreads > 256 ? 1 : 2;
    for (uint32_t c = uint32_t(warp) * kPerWarp + uint32_t(lane) / kWindow; c < windows_here; c += kWays * kStep) {
      Slot sl[kWays];
      K wk[kWays];
      V wv[kWays];
#pragma unroll
      for (uint32_t u = 0; u < kWays; ++u) sl[u] = locate(c + u * kStep, c + u * kStep < windows_here);
#pragma unroll
      for (uint32_t u = 0; u < kWays; ++u)
        if (sl[u].ok) wk[u] = carry_k[sl[u].k_at], wv[u] = carry_v[sl[u].v_at];
#pragma unroll
      for (uint32_t u = 0; u < kWays; ++u)
        if (sl[u].ok) out_k[sl[u].pos] = wk[u], out_v[sl[u].pos] = wv[u];
    }
    __syncthreads();
    // Keep each partition's rows past its last whole window (< one window) in its carry buffer.
    if (tid < int(fanout)) {
      const uint32_t keep = uint32_t(start + cn + tn - fe), from = uint32_t(fe - start);
      // Carry row x becomes row from + x of (carry rows, tile rows): when nothing was written
      // (from = 0) the carry rows stay and the tile's rows follow them. Copied ascending in
      // batches, each batch loaded before it is stored: a kept carry row only moves down by
      // from >= 1 rows, so no batch overwrites a row a later one still reads.
      constexpr uint32_t kBatch = kThreads > 256 ? 1 : 4;
      const int32_t carry_at = int32_t(uint32_t(tid) * kCarryStride), stage_at = int32_t(ts) - int32_t(cn);
      for (uint32_t x = from == 0 ? cn : 0; x < keep; x += kBatch) {
        K bk[kBatch];
        V bv[kBatch];
#pragma unroll
        for (uint32_t u = 0; u < kBatch; ++u) {
          const int32_t j = int32_t(from + x + u);
          if (x + u < keep) {
            const bool c = j < int32_t(cn);
            bk[u] = carry_k[c ? carry_at + j : stage_k_at + stage_at + j];
            bv[u] = carry_v[c ? carry_at + j : stage_v_at + stage_at + j];
          }
        }
#pragma unroll
        for (uint32_t u = 0; u < kBatch; ++u)
          if (x + u < keep) carry_k[carry_at + int32_t(x + u)] = bk[u], carry_v[carry_at + int32_t(x + u)] = bv[u];
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

// Segment s of the input is rows [begin[s], end[s]) (adjacent segments: end = begin + 1 over
// their bounds); blocks_per_seg blocks count it together into counts[s * fanout ...]: one launch
// for every segment (a launch per segment left most of the GPU idle for triton's 128 small chunks
// of each partition, and cost the host a launch each).
template <class K>
__global__ void histogram_shared_kernel(const K* keys, const uint64_t* begin, const uint64_t* end_of,
                                        uint32_t blocks_per_seg, PartitionFn fn, uint64_t* d_counts) {
  extern __shared__ uint32_t counts[];
  const uint32_t fanout = fn.fanout();
  const uint64_t s = blockIdx.x / blocks_per_seg, part = blockIdx.x % blocks_per_seg;
  for (uint32_t p = threadIdx.x; p < fanout; p += blockDim.x) counts[p] = 0;
  __syncthreads();
  const uint64_t end = end_of[s], step = uint64_t(blocks_per_seg) * blockDim.x;
  for (uint64_t i = begin[s] + part * blockDim.x + threadIdx.x; i < end; i += step)
    atomicAdd(&counts[fn(uint64_t(keys[i]))], 1u);
  __syncthreads();
  uint64_t* out = d_counts + s * fanout;
  for (uint32_t p = threadIdx.x; p < fanout; p += blockDim.x)
    if (counts[p]) atomic_add(&out[p], counts[p]);
}

template <class K>
__global__ void histogram_global_kernel(const K* keys, const uint64_t* begin, const uint64_t* end_of,
                                        uint32_t blocks_per_seg, PartitionFn fn, uint64_t* d_counts) {
  const uint64_t s = blockIdx.x / blocks_per_seg, part = blockIdx.x % blocks_per_seg;
  const uint64_t end = end_of[s], step = uint64_t(blocks_per_seg) * blockDim.x;
  uint64_t* out = d_counts + s * fn.fanout();
  for (uint64_t i = begin[s] + part * blockDim.x + threadIdx.x; i < end; i += step)
    atomic_add(&out[fn(uint64_t(keys[i]))], 1);
}

// HistogramOp::counts_out: a block transposes a tile of kSpreadParts partitions x kSpreadSegs
// segments in shared memory, so that both the segment-major reads and the partition-major writes
// are coalesced (a thread per partition walking its segments would write a word per partition
// row at a time and wait on each read); warp w keeps the totals of the tile's partitions w, w + 8, ...
constexpr uint32_t kSpreadParts = 32, kSpreadSegs = 128, kSpreadThreads = 256;
constexpr uint32_t kSpreadWarps = kSpreadThreads / 32, kSpreadPerWarp = kSpreadParts / kSpreadWarps;
__global__ void __launch_bounds__(kSpreadThreads) spread_counts_kernel(const uint64_t* counts, uint64_t segments,
                                                                        uint32_t fanout, uint64_t* out, uint64_t first,
                                                                        uint64_t stride, uint64_t* totals) {
  __shared__ uint64_t tile[kSpreadSegs][kSpreadParts + 1];
  const uint32_t lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint64_t p0 = uint64_t(blockIdx.x) * kSpreadParts;
  uint64_t sum[kSpreadPerWarp] = {};
  for (uint64_t s0 = 0; s0 < segments; s0 += kSpreadSegs) {
    for (uint32_t s = warp; s < kSpreadSegs; s += kSpreadWarps) {
      const uint64_t p = p0 + lane;
      tile[s][lane] = s0 + s < segments && p < fanout ? counts[(s0 + s) * fanout + p] : 0;
    }
    __syncthreads();
    for (uint32_t j = 0; j < kSpreadPerWarp; ++j) {
      const uint64_t p = p0 + warp + j * kSpreadWarps;
      if (p >= fanout) continue;
      for (uint32_t s = lane; s < kSpreadSegs && s0 + s < segments; s += 32) {
        const uint64_t n = tile[s][warp + j * kSpreadWarps];
        out[p * stride + first + s0 + s] = n;
        sum[j] += n;
      }
    }
    __syncthreads();
  }
  for (uint32_t j = 0; j < kSpreadPerWarp; ++j) {
    uint64_t n = sum[j];
    for (int d = 16; d > 0; d /= 2) n += __shfl_down_sync(0xffffffffu, n, d);
    const uint64_t p = p0 + warp + j * kSpreadWarps;
    if (lane == 0 && p < fanout) totals[p] = n;
  }
}

// --- two passes with one histogram read (partition_joint) ----------------------------------
// The first pass's histogram kernel also counts every (high digit, low digit) pair, per group of
// first-pass blocks: group h = first-pass blocks [h * B / H, (h + 1) * B / H) (block layout as
// in a one-pass partition). First-pass block j writes its rows of high partition q to one
// contiguous region, so the rows of q that group h wrote are contiguous too, and a second-pass
// block that covers whole groups of a segment has a histogram that is the sum of their joint
// counts: no second histogram pass over the keys. The second pass's block layout (cut at group
// boundaries, about rows_per_block rows each) is computed on the device, so the host never
// waits between the passes.

constexpr int kJointThreads = 1024;

// Block h of H: first-pass blocks [h * nblocks / H, (h + 1) * nblocks / H) of one segment.
// hist1: the first pass's per-block histogram (layout of partition_histogram_kernel);
// joint[(h * F1 + q) * F2 + d]: rows of the group with high digit q and low digit d.
template <class K>
__global__ void __launch_bounds__(kJointThreads) joint_histogram_kernel(const K* keys, const PartBlock* blocks,
                                                                        uint32_t nblocks, PartitionFn high,
                                                                        PartitionFn low, uint64_t* hist1,
                                                                        uint32_t* joint) {
  extern __shared__ uint32_t jc[];  // F1 * F2 joint counts, then F1 block counts
  const uint32_t f1 = high.fanout(), f2 = low.fanout(), cells = f1 * f2;
  uint32_t* c1 = jc + cells;
  for (uint32_t i = threadIdx.x; i < cells; i += blockDim.x) jc[i] = 0;
  const uint32_t h = blockIdx.x, groups = gridDim.x;
  const uint32_t j0 = uint32_t(uint64_t(h) * nblocks / groups), j1 = uint32_t(uint64_t(h + 1) * nblocks / groups);
  for (uint32_t j = j0; j < j1; ++j) {
    for (uint32_t p = threadIdx.x; p < f1; p += blockDim.x) c1[p] = 0;
    __syncthreads();
    const PartBlock b = blocks[j];
    constexpr int kUnroll = 4;
    uint64_t i = b.begin + threadIdx.x;
    for (; i + (kUnroll - 1) * kJointThreads < b.end; i += kUnroll * kJointThreads) {
      K k[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) k[u] = keys[i + u * kJointThreads];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const uint32_t q = high(uint64_t(k[u]));
        atomicAdd(&c1[q], 1u);
        atomicAdd(&jc[q * f2 + low(uint64_t(k[u]))], 1u);
      }
    }
    for (; i < b.end; i += kJointThreads) {
      const uint32_t q = high(uint64_t(keys[i]));
      atomicAdd(&c1[q], 1u);
      atomicAdd(&jc[q * f2 + low(uint64_t(keys[i]))], 1u);
    }
    __syncthreads();
    const uint64_t base = uint64_t(f1) * b.first_block + (j - b.first_block);
    for (uint32_t p = threadIdx.x; p < f1; p += blockDim.x) hist1[base + uint64_t(p) * b.nblocks] = c1[p];
  }
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < cells; i += blockDim.x) joint[uint64_t(h) * cells + i] = jc[i];
}

struct GroupRange {
  uint32_t segment, h0, h1;  // second-pass block: groups [h0, h1) of segment (high partition)
};

// Cuts each high partition q's rows of the first pass's output (f1 <= blockDim.x partitions)
// into ceil(rows of q / rows_per_block) blocks (at least one, at most one per group) at evenly
// spaced group boundaries: two loads per block (a greedy walk over every group boundary cost
// 0.14 ms per call on the H100), so at most rows / rows_per_block + f1 blocks in all. A thread
// per partition counts its blocks; the blocks are then written by all the threads (a skewed
// partition's blocks are most of them: written by its one thread, a Zipf 1.5 hot key's ~600 blocks
// took 88 us at 6Mi rows on the H100, the uniform layout 25 us). Fills max_blocks entries: the
// unused ones are empty blocks of their own (zero histogram, no rows).
__global__ void __launch_bounds__(kJointThreads) joint_layout_kernel(const uint64_t* scanned1, uint32_t nblocks1,
                                                                     uint32_t groups, uint32_t f1, uint64_t total,
                                                                     uint64_t rows_per_block, uint32_t max_blocks,
                                                                     PartBlock* blocks, GroupRange* ranges,
                                                                     uint32_t* seg_first, uint32_t* seg_blocks) {
  using Scan = cub::BlockScan<uint32_t, kJointThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ uint32_t start[kJointThreads + 1];  // first block of partition q; start[f1] = all blocks
  // Start of group h's rows of partition q in the first pass's output (h = groups: the end of q).
  auto bound = [&](uint32_t q, uint32_t h) -> uint64_t {
    const uint64_t at = uint64_t(q) * nblocks1 + uint64_t(h) * nblocks1 / groups;
    return at < uint64_t(f1) * nblocks1 ? scanned1[at] : total;
  };
  const uint32_t q = threadIdx.x;
  uint32_t nb = 0;
  if (q < f1) {
    const uint64_t rows = bound(q, groups) - bound(q, 0);
    const uint64_t want = (rows + rows_per_block - 1) / rows_per_block;
    nb = want < 1 ? 1u : want > groups ? groups : uint32_t(want);
  }
  uint32_t first = 0, all = 0;
  Scan(scan_storage).ExclusiveSum(nb, first, all);
  start[q] = first;  // every partition has a block: start ascends strictly up to f1
  if (q == 0) start[kJointThreads] = all;
  if (q < f1) {
    seg_first[q] = first;
    seg_blocks[q] = nb;
  }
  __syncthreads();
  for (uint32_t b = threadIdx.x; b < max_blocks; b += blockDim.x) {
    if (b >= all) {
      blocks[b] = PartBlock{0, 0, b, 1};
      ranges[b] = GroupRange{0, 0, 0};
      continue;
    }
    uint32_t lo = 0, hi = f1;  // block b's partition: start[lo] <= b < start[hi]
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      (start[mid] <= b ? lo : hi) = mid;
    }
    const uint32_t p_first = start[lo], p_blocks = start[lo + 1] - p_first;
    const uint32_t i = b - p_first;
    const uint32_t h0 = uint32_t(uint64_t(i) * groups / p_blocks), h1 = uint32_t(uint64_t(i + 1) * groups / p_blocks);
    blocks[b] = PartBlock{bound(lo, h0), bound(lo, h1), p_first, p_blocks};
    ranges[b] = GroupRange{lo, h0, h1};
  }
}

// Second-pass histogram of block blockIdx.x: the sum of its groups' joint counts.
__global__ void joint_sum_kernel(const PartBlock* blocks, const GroupRange* ranges, const uint32_t* joint,
                                 uint32_t f1, uint32_t f2, uint64_t* hist2) {
  const PartBlock b = blocks[blockIdx.x];
  const GroupRange r = ranges[blockIdx.x];
  const uint64_t base = uint64_t(f2) * b.first_block + (blockIdx.x - b.first_block);
  for (uint32_t d = threadIdx.x; d < f2; d += blockDim.x) {
    uint64_t sum = 0;
    for (uint32_t h = r.h0; h < r.h1; ++h) sum += joint[(uint64_t(h) * f1 + r.segment) * f2 + d];
    hist2[base + uint64_t(d) * b.nblocks] = sum;
  }
}

// The scatter kernel for the cluster's options and fn.
template <class K, class V>
auto scatter_kernel(const KernelContext& ctx, PartitionFn fn) {
  if (ctx.options.aligned_scatter)
    return fn.clamps() ? partition_scatter_kernel<K, V, true, true> : partition_scatter_kernel<K, V, true, false>;
  return fn.clamps() ? partition_scatter_kernel<K, V, false, true> : partition_scatter_kernel<K, V, false, false>;
}

// Rows per scatter block: about three blocks per resident block slot, whole tiles, at least two.
template <class K, class V>
uint64_t scatter_rows_per_block(KernelContext& ctx, PartitionFn fn, uint64_t total) {
  const size_t smem = scatter_smem(fn.fanout(), sizeof(K), sizeof(V), ctx.options.aligned_scatter);
  auto scatter = scatter_kernel<K, V>(ctx, fn);
  allow_shared_memory(scatter, smem);
  prefer_shared_memory(scatter);
  constexpr int threads = scatter_threads(sizeof(K), sizeof(V));
  constexpr uint32_t kTile = scatter_tile(sizeof(K), sizeof(V));
  const int per_sm = blocks_per_sm(reinterpret_cast<const void*>(scatter), threads, smem);
  const uint64_t target_blocks = uint64_t(ctx.info().sm_count) * uint64_t(std::max(per_sm, 1)) * 3;
  return std::max<uint64_t>(2 * kTile, (total / target_blocks + kTile - 1) / kTile * kTile);
}

// Scan of the per-block histogram `hist` (n entries), scatter over `nblocks` blocks, and the
// (segment, partition) offsets.
template <class K, class V>
void scan_and_scatter(KernelContext& ctx, const K* in_k, const V* in_v, const PartBlock* d_blocks, uint32_t nblocks,
                      PartitionFn fn, uint64_t* hist, uint64_t hist_n, const uint32_t* d_seg_first,
                      const uint32_t* d_seg_blocks, uint32_t nseg, uint64_t total, K* out_k, V* out_v,
                      uint64_t* d_offsets, uint64_t* scanned) {
  const uint32_t fanout = fn.fanout();
  const size_t smem = scatter_smem(fanout, sizeof(K), sizeof(V), ctx.options.aligned_scatter);
  auto scatter = scatter_kernel<K, V>(ctx, fn);
  constexpr int threads = scatter_threads(sizeof(K), sizeof(V));
  exclusive_scan(ctx, hist, scanned, hist_n);
  // The scan is over this call's rows, so offsets start at 0 = out row of the first segment.
  scatter<<<nblocks, threads, smem, ctx.stream()>>>(in_k, in_v, d_blocks, fn, scanned, out_k, out_v);
  JL_CUDA_LAUNCHED("partition_scatter_kernel");
  ctx.mark("partition_scatter_kernel");
  partition_offsets_kernel<<<grid_for(uint64_t(nseg) * fanout + 1, 256, 1024), 256, 0, ctx.stream()>>>(
      scanned, d_seg_first, d_seg_blocks, nseg, fanout, total, d_offsets);
  JL_CUDA_LAUNCHED("partition_offsets_kernel");
  ctx.mark("partition_offsets_kernel");
}

// How a segment of `rows` rows is cut into blocks of about rows_per_block rows: equal blocks of
// `per` rows (whole tiles, the last one less), at least one. Cut at rows_per_block instead, the
// 2^19-row segments of phj's second pass on 2^27 rows of 8+8 B made three full blocks and one of 2 K rows,
// which paid a block's partial windows for a sliver of rows.
struct SegmentCut {
  uint64_t per;
  uint32_t blocks;
};
SegmentCut cut_segment(uint64_t rows, uint64_t rows_per_block, uint64_t tile) {
  const uint64_t want = std::max<uint64_t>(1, (rows + rows_per_block / 2) / rows_per_block);
  const uint64_t per = std::max<uint64_t>(tile, ((rows + want - 1) / want + tile - 1) / tile * tile);
  return {per, uint32_t(std::max<uint64_t>(1, (rows + per - 1) / per))};
}

// Blocks over each segment as cut_segment cuts it.
void layout_blocks(const std::vector<uint64_t>& segments, uint64_t rows_per_block, uint64_t tile,
                   std::vector<PartBlock>& blocks, std::vector<uint32_t>& seg_first, std::vector<uint32_t>& seg_blocks) {
  const uint32_t nseg = uint32_t(segments.size() - 1);
  seg_first.resize(nseg);
  seg_blocks.resize(nseg);
  for (uint32_t s = 0; s < nseg; ++s) {
    const uint64_t b = segments[s], e = segments[s + 1];
    const SegmentCut cut = cut_segment(e - b, rows_per_block, tile);
    seg_first[s] = uint32_t(blocks.size());
    seg_blocks[s] = cut.blocks;
    for (uint32_t j = 0; j < cut.blocks; ++j)
      blocks.push_back({std::min(e, b + j * cut.per), std::min(e, b + (j + 1) * cut.per), seg_first[s], cut.blocks});
  }
}

// One segment's blocks as layout_blocks lays them out, written by the device: the host layout and
// its three uploads kept the H100 waiting ~50 us before the first kernel of phj and of each sort.
__global__ void one_segment_layout_kernel(uint64_t begin, uint64_t end, uint64_t per, uint32_t nblocks,
                                          PartBlock* blocks, uint32_t* seg_first, uint32_t* seg_blocks) {
  for (uint32_t j = blockIdx.x * blockDim.x + threadIdx.x; j < nblocks; j += gridDim.x * blockDim.x)
    blocks[j] = {min(end, begin + j * per), min(end, begin + (j + 1) * per), 0, nblocks};
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *seg_first = 0;
    *seg_blocks = nblocks;
  }
}

// The blocks of `segments` in device memory: laid out on the device for one segment, else here
// (layout_blocks) and uploaded.
struct DeviceBlocks {
  const PartBlock* blocks;
  uint32_t nblocks;
  const uint32_t* seg_first;
  const uint32_t* seg_blocks;
};
DeviceBlocks device_blocks(KernelContext& ctx, const std::vector<uint64_t>& segments, uint64_t rows_per_block,
                           uint64_t tile) {
  if (segments.size() == 2) {
    const uint64_t b = segments[0], e = segments[1];
    const SegmentCut cut = cut_segment(e - b, rows_per_block, tile);
    PartBlock* blocks = ctx.scratch_array<PartBlock>(cut.blocks);
    uint32_t* seg = ctx.scratch_array<uint32_t>(2);
    one_segment_layout_kernel<<<grid_for(cut.blocks, 256, 64), 256, 0, ctx.stream()>>>(b, e, cut.per, cut.blocks,
                                                                                      blocks, seg, seg + 1);
    JL_CUDA_LAUNCHED("one_segment_layout_kernel");
    return {blocks, cut.blocks, seg, seg + 1};
  }
  std::vector<PartBlock> blocks;
  std::vector<uint32_t> seg_first, seg_blocks;
  layout_blocks(segments, rows_per_block, tile, blocks, seg_first, seg_blocks);
  return {ctx.upload(blocks), uint32_t(blocks.size()), ctx.upload(seg_first), ctx.upload(seg_blocks)};
}

// Shared memory of joint_histogram_kernel, or 0 where its counts do not fit a block.
size_t joint_smem(const DeviceInfo& info, PartitionFn high, PartitionFn low) {
  const size_t smem = (size_t(high.fanout()) * low.fanout() + high.fanout()) * sizeof(uint32_t);
  return smem + kStaticSmemReserve <= info.smem_per_block_optin ? smem : 0;
}

// Two passes (high digits, then low digits) over one segment with no host wait between them.
// smem > 0: joint counts (one histogram read); smem = 0 (the joint counts would not fit shared
// memory): the second pass has its own histogram kernel, over blocks cut at first-pass block
// boundaries.
template <class K, class V>
void partition_two_pass(KernelContext& ctx, const K* in_k, const V* in_v, uint64_t first_row, uint64_t rows,
                        PartitionFn high, PartitionFn low, size_t smem, K* out_k, V* out_v, uint64_t* d_offsets) {
  const uint32_t f1 = high.fanout(), f2 = low.fanout();
  K* tmp_k = ctx.scratch_array<K>(rows);
  V* tmp_v = ctx.scratch_array<V>(rows);
  // Pass 1 over [first_row, first_row + rows) into tmp (rows from 0).
  const DeviceBlocks layout1 =
      device_blocks(ctx, {first_row, first_row + rows}, scatter_rows_per_block<K, V>(ctx, high, rows),
                    scatter_tile(sizeof(K), sizeof(V)));
  const uint32_t nb1 = layout1.nblocks;
  const uint32_t groups = smem ? std::min<uint32_t>(nb1, uint32_t(ctx.info().sm_count)) : nb1;
  const PartBlock* d_blocks1 = layout1.blocks;
  uint64_t* hist1 = ctx.scratch_array<uint64_t>(uint64_t(f1) * nb1);
  uint64_t* scanned1 = ctx.scratch_array<uint64_t>(uint64_t(f1) * nb1);
  uint32_t* joint = nullptr;
  if (smem) {
    joint = ctx.scratch_array<uint32_t>(uint64_t(groups) * f1 * f2);
    allow_shared_memory(joint_histogram_kernel<K>, smem);
    joint_histogram_kernel<K><<<groups, kJointThreads, smem, ctx.stream()>>>(in_k, d_blocks1, nb1, high, low, hist1,
                                                                            joint);
    JL_CUDA_LAUNCHED("joint_histogram_kernel");
    ctx.mark("joint_histogram_kernel");
  } else {
    partition_histogram_kernel<K><<<nb1, kPartThreads, f1 * sizeof(uint32_t), ctx.stream()>>>(in_k, d_blocks1, high,
                                                                                             hist1);
    JL_CUDA_LAUNCHED("partition_histogram_kernel");
    ctx.mark("partition_histogram_kernel");
  }
  uint64_t* mid = ctx.scratch_array<uint64_t>(f1 + 1);
  scan_and_scatter(ctx, in_k, in_v, d_blocks1, nb1, high, hist1, uint64_t(f1) * nb1, layout1.seg_first,
                   layout1.seg_blocks, 1, rows, tmp_k, tmp_v, mid, scanned1);
  // Pass 2: each high partition of tmp on the low digits, blocks laid out on the device.
  const uint64_t rpb2 = scatter_rows_per_block<K, V>(ctx, low, rows);
  const uint32_t max_blocks = uint32_t(rows / rpb2 + f1 + 1);
  PartBlock* blocks2 = ctx.scratch_array<PartBlock>(max_blocks);
  GroupRange* ranges = ctx.scratch_array<GroupRange>(max_blocks);
  uint32_t* seg_first2 = ctx.scratch_array<uint32_t>(f1);
  uint32_t* seg_blocks2 = ctx.scratch_array<uint32_t>(f1);
  joint_layout_kernel<<<1, kJointThreads, 0, ctx.stream()>>>(scanned1, nb1, groups, f1, rows, rpb2, max_blocks,
                                                              blocks2, ranges, seg_first2, seg_blocks2);
  JL_CUDA_LAUNCHED("joint_layout_kernel");
  ctx.mark("joint_layout_kernel");
  uint64_t* hist2 = ctx.scratch_array<uint64_t>(uint64_t(f2) * max_blocks);
  if (smem) {
    joint_sum_kernel<<<max_blocks, 256, 0, ctx.stream()>>>(blocks2, ranges, joint, f1, f2, hist2);
    JL_CUDA_LAUNCHED("joint_sum_kernel");
    ctx.mark("joint_sum_kernel");
  } else {
    partition_histogram_kernel<K><<<max_blocks, kPartThreads, f2 * sizeof(uint32_t), ctx.stream()>>>(tmp_k, blocks2,
                                                                                                   low, hist2);
    JL_CUDA_LAUNCHED("partition_histogram_kernel");
    ctx.mark("partition_histogram_kernel");
  }
  scan_and_scatter(ctx, tmp_k, tmp_v, blocks2, max_blocks, low, hist2, uint64_t(f2) * max_blocks, seg_first2,
                   seg_blocks2, f1, rows, out_k, out_v, d_offsets, ctx.scratch_array<uint64_t>(uint64_t(f2) * max_blocks));
}

// One histogram + scan + scatter pass with fanout <= max_one_pass_bits.
template <class K, class V>
void partition_one_pass(KernelContext& ctx, const K* in_k, const V* in_v, const std::vector<uint64_t>& segments,
                        PartitionFn fn, K* out_k, V* out_v, uint64_t* d_offsets) {
  const uint32_t fanout = fn.fanout();
  const uint32_t nseg = uint32_t(segments.size() - 1);
  const uint64_t total = segments.back() - segments.front();
  const uint64_t rows_per_block = scatter_rows_per_block<K, V>(ctx, fn, total);

  const DeviceBlocks layout = device_blocks(ctx, segments, rows_per_block, scatter_tile(sizeof(K), sizeof(V)));
  const uint64_t hist_n = uint64_t(fanout) * layout.nblocks;
  uint64_t* hist = ctx.scratch_array<uint64_t>(hist_n);

  partition_histogram_kernel<K><<<layout.nblocks, kPartThreads, fanout * sizeof(uint32_t), ctx.stream()>>>(
      in_k, layout.blocks, fn, hist);
  JL_CUDA_LAUNCHED("partition_histogram_kernel");
  ctx.mark("partition_histogram_kernel");
  scan_and_scatter(ctx, in_k, in_v, layout.blocks, layout.nblocks, fn, hist, hist_n, layout.seg_first,
                   layout.seg_blocks, nseg, total, out_k, out_v, d_offsets, ctx.scratch_array<uint64_t>(hist_n));
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
void histogram(KernelContext& ctx, const K* keys, const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
               PartitionFn fn, uint64_t* d_counts) {
  const uint64_t nseg = ranges.size();
  uint64_t longest = 0;
  bool adjacent = true;
  for (uint64_t s = 0; s < nseg; ++s) {
    longest = std::max(longest, ranges[s].second - ranges[s].first);
    if (s > 0 && ranges[s].first != ranges[s - 1].second) adjacent = false;
  }
  if (longest == 0) return;
  const uint32_t fanout = fn.fanout();
  const size_t smem = size_t(fanout) * sizeof(uint32_t);
  const bool shared = smem <= 64 * 1024;
  const unsigned threads = shared ? 1024 : 256;
  // Blocks per segment: as many as one wave of resident blocks holds (what a launch over one
  // segment had; more would leave a partial second wave), none with less than four rows a thread
  // in the longest segment.
  const uint64_t target = uint64_t(ctx.info().sm_count) * (shared ? 2 : 16);
  const uint64_t per_seg = std::min<uint64_t>(target / nseg, (longest + 4 * threads - 1) / (4 * threads));
  const uint32_t blocks_per_seg = uint32_t(std::max<uint64_t>(1, per_seg));
  if (nseg * blocks_per_seg > uint64_t(INT32_MAX))
    throw RuntimeError("histogram: " + std::to_string(nseg) + " segments exceed one launch");
  const unsigned grid = unsigned(nseg * blocks_per_seg);
  // Adjacent segments go up as their k + 1 bounds (ends are the next begins), others as k begins
  // then k ends.
  std::vector<uint64_t> words;
  for (const auto& r : ranges) words.push_back(r.first);
  if (adjacent) words.push_back(ranges.back().second);
  else
    for (const auto& r : ranges) words.push_back(r.second);
  const uint64_t* d_begin = ctx.upload(words);
  const uint64_t* d_end = d_begin + (adjacent ? 1 : nseg);
  if (shared) {
    allow_shared_memory(histogram_shared_kernel<K>, smem);
    histogram_shared_kernel<K><<<grid, threads, smem, ctx.stream()>>>(keys, d_begin, d_end, blocks_per_seg, fn, d_counts);
    JL_CUDA_LAUNCHED("histogram_shared_kernel");
  } else {
    histogram_global_kernel<K><<<grid, threads, 0, ctx.stream()>>>(keys, d_begin, d_end, blocks_per_seg, fn, d_counts);
    JL_CUDA_LAUNCHED("histogram_global_kernel");
  }
}

void spread_counts(KernelContext& ctx, const uint64_t* counts, uint64_t segments, uint32_t fanout, uint64_t* out,
                   uint64_t first, uint64_t stride, uint64_t* totals) {
  if (!fanout) return;
  spread_counts_kernel<<<(fanout + kSpreadParts - 1) / kSpreadParts, kSpreadThreads, 0, ctx.stream()>>>(
      counts, segments, fanout, out, first, stride, totals);
  JL_CUDA_LAUNCHED("spread_counts_kernel");
  ctx.mark("spread_counts_kernel");
}

template <class K, class V>
void partition(KernelContext& ctx, const K* in_k, const V* in_v, const std::vector<uint64_t>& segments,
               PartitionFn fn, K* out_k, V* out_v, uint64_t* d_offsets) {
  if (segments.size() < 2) throw RuntimeError("partition: segments need at least two offsets");
  check_ascending(segments, "partition: segment");
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
  // One segment split in exactly two passes: no host wait (partition_two_pass), and one
  // histogram read where the joint counts fit shared memory. Otherwise (several segments, or
  // more than two passes) pass 1 on its own, then pass 2 laid out on the host from its offsets.
  if (segments.size() == 2 && high.bits <= one_pass && high.fanout() <= uint32_t(kJointThreads) && rows > 0) {
    partition_two_pass(ctx, in_k, in_v, segments.front(), rows, high, low,
                       joint_smem(ctx.info(), high, low), out_k, out_v, d_offsets);
    return;
  }
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
template void histogram<uint32_t>(KernelContext&, const uint32_t*, const std::vector<std::pair<uint64_t, uint64_t>>&,
                                  PartitionFn, uint64_t*);
template void histogram<uint64_t>(KernelContext&, const uint64_t*, const std::vector<std::pair<uint64_t, uint64_t>>&,
                                  PartitionFn, uint64_t*);

}  // namespace joinlab::cuda
