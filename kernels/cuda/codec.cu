// Cascaded compression on the GPU (format: core/exec/codec.hpp; the CPU reference:
// kernels/cpu/codec.cpp, which these kernels match byte for byte). gao2021 section 4: every layer
// of every buffer in one kernel, a thread block per chunk, the layers' intermediates in shared
// memory (never in global memory).
//  * Compression: a first launch runs the layers of every chunk to learn its compressed size (the
//    output size is data-dependent), a device scan places the chunks, a second launch runs the
//    layers again and writes. One work item per buffer (its header and chunk offsets) and per
//    chunk, every buffer of the batch in the same launches.
//  * Decompression: a one-block launch checks every buffer's header and numbers the chunks (a
//    scan over the buffers), a thread per chunk reads and checks its offsets and headers into a
//    job, then one persistent launch decodes every chunk of the batch, each block fetching its
//    next job while it decodes (the header chain is latency, not work).
// Errors found in the data (a bad header, offsets, counts or runs) are reported through the
// result words as (class, buffer, chunk, code) and a detail; the host turns them into the CPU's
// message. Where several chunks fail at once the lowest (buffer, chunk) is named; its detail may
// come from another failing chunk.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "core/common/error.hpp"
#include "core/exec/codec.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernels.hpp"

namespace joinlab::cuda {

namespace {

constexpr int kThreads = 256, kItems = 8, kTile = kThreads * kItems;
using ull = unsigned long long;
using BlockScanU64 = cub::BlockScan<uint64_t, kThreads>;
using BlockReduceU64 = cub::BlockReduce<uint64_t, kThreads>;

struct MinOp {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a < b ? a : b; }
};
struct MaxOp {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return a < b ? b : a; }
};

struct CodecShared {
  union {
    BlockScanU64::TempStorage scan;
    BlockReduceU64::TempStorage reduce;
  } temp;
  uint64_t lo, hi, first;
};

// Dynamic shared memory of a chunk of 2^log2 values: two value arrays and a row-index array.
size_t chunk_smem(uint32_t log2) { return (size_t(1) << log2) * (8 + 8 + 4); }

// Scans get(i) over i < n in tiles of kTile (blocked: thread t owns kItems consecutive items),
// calling put(i, exclusive prefix, own value) for each; returns the total. get() of a tile is
// read before any put() of it, so put may overwrite what get read.
template <class Get, class Put>
__device__ uint64_t tile_scan(uint32_t n, CodecShared& sh, Get get, Put put) {
  uint64_t carry = 0;
  for (uint32_t base = 0; base < n; base += kTile) {
    uint64_t v[kItems], x[kItems], total;
    for (int j = 0; j < kItems; ++j) {
      const uint32_t i = base + threadIdx.x * kItems + j;
      v[j] = i < n ? get(i) : 0;
    }
    BlockScanU64(sh.temp.scan).ExclusiveSum(v, x, total);
    for (int j = 0; j < kItems; ++j) {
      const uint32_t i = base + threadIdx.x * kItems + j;
      if (i < n) put(i, carry + x[j], v[j]);
    }
    carry += total;
    __syncthreads();  // the temp storage is reused by the next tile
  }
  return carry;
}

// FOR + bit-packing of one stream y[0..count): its header (base, bits) and, with dst, its
// payload words at dst. Returns the words.
template <bool kWrite>
__device__ uint64_t pack_stream(const uint64_t* y, uint32_t count, bool is_signed, uint32_t vb, CodecShared& sh,
                                codec::StreamHeader* header, uint64_t* dst) {
  const uint64_t mask = codec::width_mask(vb);
  uint64_t lo = ~0ull, hi = 0;
  for (uint32_t j = threadIdx.x; j < count; j += kThreads) {
    const uint64_t k = codec::order_key(y[j], vb, is_signed);
    lo = min(lo, k);
    hi = max(hi, k);
  }
  const uint64_t blo = BlockReduceU64(sh.temp.reduce).Reduce(lo, MinOp{});
  __syncthreads();
  const uint64_t bhi = BlockReduceU64(sh.temp.reduce).Reduce(hi, MaxOp{});
  if (threadIdx.x == 0) sh.lo = blo, sh.hi = bhi;
  __syncthreads();
  codec::StreamHeader s{count, 0, 0};
  if (count) {
    s.base = codec::order_key(sh.lo, vb, is_signed);  // order_key is its own inverse
    s.bits = codec::bit_width((sh.hi - sh.lo) & mask);
  }
  const uint64_t words = codec::payload_words(count, s.bits);
  if (kWrite) {
    if (threadIdx.x == 0) *header = s;
    for (uint64_t w = threadIdx.x; w < words; w += kThreads)
      dst[w] = codec::pack_word(w, count, s.bits, [&](uint64_t j) { return (y[j] - s.base) & mask; });
  }
  __syncthreads();  // lo/hi and the reduce storage are reused by the next stream
  return words;
}

struct CompressJob {  // one buffer of the batch
  const void* data;
  uint64_t rows;
  uint64_t first_item;  // its header's work item; its chunks' follow
  uint32_t chunks;
  codec::Config config;
};

// Work item i: the header of buffer item_buffer[i] (item_chunk[i] < 0) or one of its chunks.
// kWrite = false: sizes[i] = the item's bytes. kWrite = true: writes it at out + pos[i] (pos = the
// exclusive scan of sizes, items + 1 entries), and the batch's offsets to the result words.
template <bool kWrite>
__global__ void __launch_bounds__(kThreads) compress_kernel(const CompressJob* jobs, const uint32_t* item_buffer,
                                                            const int64_t* item_chunk, uint64_t items, uint32_t buffers,
                                                            uint32_t vb, uint32_t log2, uint64_t* sizes,
                                                            const uint64_t* pos, uint8_t* out, uint64_t* words) {
  extern __shared__ uint64_t dyn[];
  __shared__ CodecShared sh;
  const uint64_t item = blockIdx.x;
  const uint32_t b = item_buffer[item];
  const CompressJob job = jobs[b];
  const int64_t chunk = item_chunk[item];
  if (chunk < 0) {  // the buffer's header and chunk offsets
    const uint64_t pre = codec::preamble_bytes(job.chunks);
    if (!kWrite) {
      if (threadIdx.x == 0) sizes[item] = pre;
      return;
    }
    uint8_t* dst = out + pos[item];
    const uint64_t bytes = pos[item + 1 + job.chunks] - pos[item];
    if (threadIdx.x == 0) {
      codec::BufferHeader h{codec::kMagic, codec::kVersion, uint8_t(vb), job.config.rle, codec::delta_code(job.config),
                            log2, job.chunks, job.rows, bytes};
      *reinterpret_cast<codec::BufferHeader*>(dst) = h;
      words[kFirstValueWord + b] = pos[item];
      if (b + 1 == buffers) words[kCountWord] = words[kFirstValueWord + buffers] = pos[items];
    }
    uint64_t* off = reinterpret_cast<uint64_t*>(dst + sizeof(codec::BufferHeader));
    for (uint32_t k = threadIdx.x; k <= job.chunks; k += kThreads)
      off[k] = k < job.chunks ? pos[item + 1 + k] - pos[item] : bytes;
    return;
  }
  const uint32_t n0 = codec::chunk_rows(job.rows, log2, uint64_t(chunk));
  const uint32_t cap = 1u << log2;
  uint64_t* in = dyn;
  uint64_t* tmp = dyn + cap;
  uint32_t* starts = reinterpret_cast<uint32_t*>(dyn + 2 * cap);
  const uint64_t first_row = uint64_t(chunk) << log2;
  for (uint32_t i = threadIdx.x; i < n0; i += kThreads)
    in[i] = vb == 8 ? static_cast<const uint64_t*>(job.data)[first_row + i]
                    : static_cast<const uint32_t*>(job.data)[first_row + i];
  __syncthreads();
  const codec::Config c = job.config;
  uint8_t* dst = kWrite ? out + pos[item] : nullptr;
  auto* streams = reinterpret_cast<codec::StreamHeader*>(dst + sizeof(codec::ChunkHeader));
  uint64_t* payload = reinterpret_cast<uint64_t*>(dst + codec::chunk_header_bytes(c));
  uint64_t used = 0;  // payload words so far
  uint32_t m = n0;
  const uint64_t mask = codec::width_mask(vb);
  auto delta = [&] {  // tmp[0..m - 1) = the differences of in[0..m), sh.first = in[0]
    if (threadIdx.x == 0) sh.first = in[0];
    for (uint32_t i = threadIdx.x + 1; i < m; i += kThreads) tmp[i - 1] = (in[i] - in[i - 1]) & mask;
    __syncthreads();
  };
  if (c.delta_first) {
    delta();
    uint64_t* t = in;
    in = tmp, tmp = t;
    m -= 1;
  }
  for (uint32_t k = 0; k < c.rle; ++k) {
    // Run heads (a value unlike its predecessor) numbered by a scan: values to tmp, starts kept.
    const uint32_t runs = uint32_t(tile_scan(
        m, sh, [&](uint32_t i) -> uint64_t { return i == 0 || in[i] != in[i - 1]; },
        [&](uint32_t i, uint64_t at, uint64_t head) {
          if (head) tmp[at] = in[i], starts[at] = i;
        }));
    for (uint32_t j = threadIdx.x; j < runs; j += kThreads)  // lengths into `in`, free now
      in[j] = (j + 1 < runs ? starts[j + 1] : m) - starts[j];
    __syncthreads();
    used += pack_stream<kWrite>(in, runs, false, vb, sh, streams + k, payload + used);
    uint64_t* t = in;
    in = tmp, tmp = t;
    m = runs;
  }
  const uint64_t* values = in;
  uint32_t count = m;
  if (c.delta && !c.delta_first) {
    delta();
    values = tmp, count = m - 1;
  }
  // Signed with delta in either order: differences, or (delta first) their runs' values.
  used += pack_stream<kWrite>(values, count, c.delta != 0, vb, sh, streams + c.rle, payload + used);
  if (!kWrite) {
    if (threadIdx.x == 0) sizes[item] = codec::chunk_header_bytes(c) + 8 * used;
  } else if (threadIdx.x == 0) {
    *reinterpret_cast<codec::ChunkHeader*>(dst) = codec::ChunkHeader{n0, c.rle + 1u, c.delta ? sh.first : 0};
  }
}

// --- decompression --------------------------------------------------------------------------------

struct DecompressJob {  // one buffer of the batch
  uint64_t begin, bytes;  // its stream in the input
  void* out;
  uint64_t capacity;
};
// Error words after the rows: the first failure's key (complemented, so that an atomic max finds
// the least key in zeroed words) and its detail. Key: header errors before chunk errors, then
// buffer, chunk, code (the CPU's order: every header is checked before any chunk).
constexpr size_t kErrKey = 0, kErrDetail = 1;
__device__ void report(uint64_t* err, bool chunk_error, uint64_t buffer, uint64_t chunk, uint32_t code, uint64_t detail) {
  const ull key = (ull(chunk_error) << 63) | (ull(buffer) << 40) | (ull(chunk & 0xFFFFFFFFull) << 8) | code;
  if (atomicMax(reinterpret_cast<ull*>(err + kErrKey), ~key) < ~key) err[kErrDetail] = detail;
}

// One block: each buffer's header checked, its chunks numbered (chunk_first, buffers + 1 entries),
// its rows to the result words.
__global__ void __launch_bounds__(kThreads) decompress_headers_kernel(const uint8_t* in, const DecompressJob* jobs,
                                                                      uint32_t buffers, uint32_t vb,
                                                                      uint64_t* chunk_first, uint64_t* words,
                                                                      uint64_t* err) {
  __shared__ CodecShared sh;
  const uint64_t rows_total = tile_scan(
      buffers, sh,
      [&](uint32_t b) -> uint64_t {
        const DecompressJob j = jobs[b];
        uint64_t detail = 0;
        if (j.bytes < sizeof(codec::BufferHeader)) return report(err, false, b, 0, codec::kTruncated, j.bytes), 0;
        const codec::BufferHeader h = *reinterpret_cast<const codec::BufferHeader*>(in + j.begin);
        if (uint32_t e = codec::check_buffer_header(h, j.bytes, vb, j.capacity, &detail))
          return report(err, false, b, 0, e, detail), 0;
        if (h.chunk_log2 > kCudaMaxChunkLog2) return report(err, false, b, 0, codec::kUnsupported, h.chunk_log2), 0;
        return h.rows;
      },
      [&](uint32_t b, uint64_t, uint64_t rows) { words[kFirstValueWord + b] = rows; });
  const uint64_t chunks = tile_scan(
      buffers, sh,
      [&](uint32_t b) -> uint64_t {
        const uint64_t rows = words[kFirstValueWord + b];  // 0 where the header failed
        return rows ? reinterpret_cast<const codec::BufferHeader*>(in + jobs[b].begin)->chunks : 0;
      },
      [&](uint32_t b, uint64_t first, uint64_t) { chunk_first[b] = first; });
  if (threadIdx.x == 0) chunk_first[buffers] = chunks, words[kCountWord] = rows_total;
}

// One chunk with its headers read and checked: all a decoding block needs, in one read of
// kChunkWords words (which the block issues while it decodes the chunk before: the chain of
// header, offsets and chunk headers costs no decoder time).
struct ChunkJob {
  const uint64_t* payload;  // the first stream's words
  void* out;                // the chunk's first value in the output
  uint64_t first;           // the chunk header's first value
  uint64_t chunk;           // within its buffer (for a report)
  uint32_t rows, fail;      // fail: the Error already reported, or kOk
  uint32_t buffer;
  uint8_t value_bytes, rle, delta, delta_first;
  codec::StreamHeader streams[codec::kMaxRle + 1];
};
constexpr int kChunkWords = int(sizeof(ChunkJob) / 8);
static_assert(sizeof(ChunkJob) % 8 == 0 && kChunkWords <= kThreads, "a chunk's job is read a word per thread");

// A thread per chunk of the batch (numbered by the headers kernel): finds its buffer, reads and
// checks its offsets and headers, writes its job.
__global__ void __launch_bounds__(kThreads) chunk_jobs_kernel(const uint8_t* in, const DecompressJob* jobs,
                                                              uint32_t buffers, const uint64_t* chunk_first,
                                                              ChunkJob* out, uint64_t* err) {
  const uint64_t item = uint64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= chunk_first[buffers]) return;
  uint32_t lo = 0, hi = buffers;  // the buffer: the last b with chunk_first[b] <= item
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (chunk_first[mid] <= item) lo = mid;
    else hi = mid;
  }
  const uint32_t b = lo;
  const uint64_t k = item - chunk_first[b];
  const DecompressJob job = jobs[b];
  const uint8_t* base = in + job.begin;
  const codec::BufferHeader head = *reinterpret_cast<const codec::BufferHeader*>(base);
  const uint64_t* off = reinterpret_cast<const uint64_t*>(base + sizeof(codec::BufferHeader)) + k;
  ChunkJob c{};
  c.chunk = k, c.buffer = b;
  uint64_t detail = 0;
  uint32_t e = codec::check_chunk_bounds(head, k, off[0], off[1], &detail);
  if (!e) {
    const codec::Config cfg = codec::header_config(head);
    const codec::ChunkHeader ch = *reinterpret_cast<const codec::ChunkHeader*>(base + off[0]);
    const uint64_t bytes = off[1] - off[0];
    if (ch.streams == cfg.rle + 1u && bytes >= codec::chunk_header_bytes(cfg))
      for (uint32_t s = 0; s <= cfg.rle; ++s)
        c.streams[s] = reinterpret_cast<const codec::StreamHeader*>(base + off[0] + sizeof(codec::ChunkHeader))[s];
    e = codec::check_chunk(head, ch, c.streams, codec::chunk_rows(head.rows, head.chunk_log2, k), bytes, &detail);
    c.payload = reinterpret_cast<const uint64_t*>(base + off[0] + codec::chunk_header_bytes(cfg));
    c.out = static_cast<uint8_t*>(job.out) + (k << head.chunk_log2) * head.value_bytes;
    c.first = ch.first, c.rows = ch.rows;
    c.value_bytes = head.value_bytes, c.rle = cfg.rle, c.delta = cfg.delta, c.delta_first = cfg.delta_first;
  }
  if (e) report(err, true, b, k, e, detail);
  c.fail = e;
  out[item] = c;
}

// Where value i of a decoder's array is in shared memory: XOR-swizzled within its 128-byte row of
// 16 values, so that tile_scan's blocked items (thread t's 8 values at 8t) fall on distinct banks
// (unswizzled, 8-byte values 64 bytes apart meet 16 threads to a bank); striped access stays
// conflict-free.
__device__ __forceinline__ uint32_t slot(uint32_t i) { return i ^ ((i >> 4) & 7); }

// Entries [0, count) of a stream (base added, masked to the width) to dst[slot(at + j)]. Striped,
// and each thread issues the loads of its kItems entries before it uses any: the payload is in
// global memory, and one load in flight per thread leaves the decoder waiting on latency.
__device__ void unpack_stream(const uint64_t* w, const codec::StreamHeader st, uint64_t mask, uint64_t* dst,
                              uint32_t at) {
  const uint32_t bits = st.bits;
  if (!bits) {
    for (uint32_t j = threadIdx.x; j < st.count; j += kThreads) dst[slot(at + j)] = st.base;
    return;
  }
  const uint64_t entry_mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  for (uint32_t base = 0; base < st.count; base += kTile) {
    uint64_t lo[kItems], hi[kItems];
#pragma unroll
    for (int u = 0; u < kItems; ++u) {
      const uint64_t j = base + uint32_t(u) * kThreads + threadIdx.x, bit = j * bits;
      lo[u] = hi[u] = 0;
      if (j < st.count) {
        lo[u] = w[bit >> 6];
        if ((bit & 63) + bits > 64) hi[u] = w[(bit >> 6) + 1];
      }
    }
#pragma unroll
    for (int u = 0; u < kItems; ++u) {
      const uint64_t j = base + uint32_t(u) * kThreads + threadIdx.x, bit = j * bits;
      if (j >= st.count) break;
      const uint32_t sh = uint32_t(bit & 63);
      uint64_t v = lo[u] >> sh;
      if (sh + bits > 64) v |= hi[u] << (64 - sh);
      dst[slot(at + uint32_t(j))] = ((v & entry_mask) + st.base) & mask;
    }
  }
}

// Shared memory of a decoding block: two value arrays and a head mark per value of the largest
// chunk the CUDA kernels take (17 bytes a value: three blocks fit on an SM of 228 KB).
constexpr uint32_t kDecodeCap = 1u << kCudaMaxChunkLog2;
constexpr size_t kDecodeSmem = size_t(kDecodeCap) * (8 + 8 + 1);

// Decodes one chunk whose job passed the checks (the block's threads together).
__device__ void decode_chunk(const ChunkJob& job, uint64_t* dyn, CodecShared& sh, uint64_t* err) {
  const uint32_t vb = job.value_bytes, n0 = job.rows, rle = job.rle;
  const uint64_t mask = codec::width_mask(vb);
  uint64_t* cur = dyn;
  uint64_t* tmp = dyn + kDecodeCap;
  uint8_t* heads = reinterpret_cast<uint8_t*>(dyn + 2 * kDecodeCap);
  const uint64_t* pw[codec::kMaxRle + 1];
  const uint64_t* w = job.payload;
  for (uint32_t s = 0; s <= rle; ++s) pw[s] = w, w += codec::payload_words(job.streams[s].count, job.streams[s].bits);
  // Values: unpacked, then (delta last) an inclusive sum from `first`.
  const bool delta_last = job.delta && !job.delta_first;
  const uint32_t m = job.streams[rle].count + delta_last;
  unpack_stream(pw[rle], job.streams[rle], mask, cur, delta_last);
  if (delta_last && threadIdx.x == 0) cur[0] = job.first;
  __syncthreads();
  if (delta_last)
    tile_scan(m, sh, [&](uint32_t i) { return cur[slot(i)]; },
              [&](uint32_t i, uint64_t x, uint64_t v) { cur[slot(i)] = (x + v) & mask; });
  // RLE layers, last first: run starts by a scan of the lengths, then each value's run found by
  // a scan of head marks.
  for (uint32_t s = rle; s-- > 0;) {
    const codec::StreamHeader st = job.streams[s];
    const uint32_t target = s == 0 ? n0 - job.delta_first : job.streams[s - 1].count;
    for (uint32_t i = threadIdx.x; i < (target + 3) / 4; i += kThreads) reinterpret_cast<uint32_t*>(heads)[i] = 0;
    __syncthreads();
    const uint64_t sum = tile_scan(
        st.count, sh,
        [&](uint32_t j) -> uint64_t {
          const uint64_t r = st.bits ? (codec::unpack(pw[s], j, st.bits) + st.base) & mask : st.base;
          return r == 0 || r > target ? target + 1 : r;  // a bad run makes the sum miss the target
        },
        [&](uint32_t, uint64_t start, uint64_t) {
          if (start < target) heads[start] = 1;
        });
    if (sum != target) {
      if (threadIdx.x == 0) report(err, true, job.buffer, job.chunk, codec::kBadRuns, s + 1);
      return;  // sum is the block's: every thread returns
    }
    tile_scan(target, sh, [&](uint32_t i) -> uint64_t { return heads[i]; },
              [&](uint32_t i, uint64_t x, uint64_t v) { tmp[slot(i)] = cur[slot(uint32_t(x + v - 1))]; });
    uint64_t* t = cur;
    cur = tmp, tmp = t;
  }
  if (job.delta_first) {  // `first`, then its sums with the n0 - 1 differences in cur
    tile_scan(n0, sh, [&](uint32_t i) { return i == 0 ? job.first : cur[slot(i - 1)]; },
              [&](uint32_t i, uint64_t x, uint64_t v) { tmp[slot(i)] = (x + v) & mask; });
    cur = tmp;
  }
  if (vb == 8)
    for (uint32_t i = threadIdx.x; i < n0; i += kThreads) static_cast<uint64_t*>(job.out)[i] = cur[slot(i)];
  else
    for (uint32_t i = threadIdx.x; i < n0; i += kThreads) static_cast<uint32_t*>(job.out)[i] = uint32_t(cur[slot(i)]);
}

// Decodes every chunk of the batch, block-strided over the jobs; each block reads its next job
// while it decodes the current one.
constexpr int kDecodeBlocksPerSm = 3;
__global__ void __launch_bounds__(kThreads, kDecodeBlocksPerSm)
    decompress_kernel(const ChunkJob* jobs, uint32_t buffers, const uint64_t* chunk_first, uint64_t* err) {
  extern __shared__ uint64_t dyn[];
  __shared__ CodecShared sh;
  __shared__ ChunkJob job;
  const uint64_t total = chunk_first[buffers];
  const uint64_t* job_words = reinterpret_cast<const uint64_t*>(jobs);
  uint64_t* own = reinterpret_cast<uint64_t*>(&job);
  uint64_t item = blockIdx.x;
  if (threadIdx.x < kChunkWords && item < total) own[threadIdx.x] = job_words[item * kChunkWords + threadIdx.x];
  __syncthreads();
  for (; item < total; item += gridDim.x) {
    const uint64_t next = item + gridDim.x;
    const uint64_t ahead =
        threadIdx.x < kChunkWords && next < total ? job_words[next * kChunkWords + threadIdx.x] : 0;
    if (!job.fail) decode_chunk(job, dyn, sh, err);
    __syncthreads();  // the chunk's job and shared memory are free
    if (threadIdx.x < kChunkWords) own[threadIdx.x] = ahead;
    __syncthreads();
  }
}

}  // namespace

void codec_compress(KernelContext& ctx, const std::vector<CodecColumnRef>& cols, uint32_t vb, uint32_t log2,
                    uint8_t* out, uint64_t* d_words) {
  if (log2 > kCudaMaxChunkLog2)
    throw RuntimeError("compress: chunks of 2^" + std::to_string(log2) + " values; the CUDA kernels hold at most 2^" +
                       std::to_string(kCudaMaxChunkLog2) + " in shared memory");
  std::vector<CompressJob> jobs(cols.size());
  std::vector<uint32_t> item_buffer;
  std::vector<int64_t> item_chunk;
  for (size_t b = 0; b < cols.size(); ++b) {
    const uint64_t chunks = codec::chunk_count(cols[b].rows, log2);
    jobs[b] = {cols[b].data, cols[b].rows, item_buffer.size(), uint32_t(chunks), cols[b].config};
    item_buffer.push_back(uint32_t(b));
    item_chunk.push_back(-1);
    for (uint64_t k = 0; k < chunks; ++k) item_buffer.push_back(uint32_t(b)), item_chunk.push_back(int64_t(k));
  }
  const uint64_t items = item_buffer.size();
  if (!items) return;  // no buffers: the zeroed words are the result
  const CompressJob* d_jobs = ctx.upload(jobs);
  const uint32_t* d_buf = ctx.upload(item_buffer);
  const int64_t* d_chunk = ctx.upload(item_chunk);
  uint64_t* sizes = ctx.scratch_array<uint64_t>(items + 1);
  uint64_t* pos = ctx.scratch_array<uint64_t>(items + 1);
  JL_CUDA_CHECK(cudaMemsetAsync(sizes + items, 0, sizeof(uint64_t), ctx.stream()));
  const size_t smem = chunk_smem(log2);
  JL_CUDA_CHECK(cudaFuncSetAttribute(compress_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  JL_CUDA_CHECK(cudaFuncSetAttribute(compress_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const uint32_t buffers = uint32_t(cols.size());
  compress_kernel<false><<<unsigned(items), kThreads, smem, ctx.stream()>>>(d_jobs, d_buf, d_chunk, items, buffers, vb,
                                                                             log2, sizes, nullptr, nullptr, d_words);
  JL_CUDA_LAUNCHED("compress_kernel (sizes)");
  ctx.mark("compress_kernel (sizes)");
  exclusive_scan(ctx, sizes, pos, items + 1);
  compress_kernel<true><<<unsigned(items), kThreads, smem, ctx.stream()>>>(d_jobs, d_buf, d_chunk, items, buffers, vb,
                                                                            log2, sizes, pos, out, d_words);
  JL_CUDA_LAUNCHED("compress_kernel (write)");
  ctx.mark("compress_kernel (write)");
}

void codec_decompress(KernelContext& ctx, const uint8_t* in, const std::vector<uint64_t>& offsets, uint32_t vb,
                      const std::vector<CodecOutRef>& outs, uint64_t* d_words) {
  const uint32_t buffers = uint32_t(outs.size());
  if (!buffers) return;
  std::vector<DecompressJob> jobs(buffers);
  // Chunks the headers can number: a checked header has at least 2^kMinChunkLog2 rows a chunk,
  // rows within the output's capacity and a chunk offset (8 bytes) each within its bytes.
  uint64_t max_chunks = 0;
  for (uint32_t b = 0; b < buffers; ++b) {
    jobs[b] = {offsets[b], offsets[b + 1] - offsets[b], outs[b].data, outs[b].capacity};
    max_chunks += std::min(codec::chunk_count(outs[b].capacity, codec::kMinChunkLog2), jobs[b].bytes / 8);
  }
  const DecompressJob* d_jobs = ctx.upload(jobs);
  uint64_t* chunk_first = ctx.scratch_array<uint64_t>(buffers + 1);
  uint64_t* err = d_words + kFirstValueWord + buffers;
  decompress_headers_kernel<<<1, kThreads, 0, ctx.stream()>>>(in, d_jobs, buffers, vb, chunk_first, d_words, err);
  JL_CUDA_LAUNCHED("decompress_headers_kernel");
  ctx.mark("decompress_headers_kernel");
  if (!max_chunks) return;
  ChunkJob* chunk_jobs = ctx.scratch_array<ChunkJob>(max_chunks);
  chunk_jobs_kernel<<<unsigned((max_chunks + kThreads - 1) / kThreads), kThreads, 0, ctx.stream()>>>(
      in, d_jobs, buffers, chunk_first, chunk_jobs, err);
  JL_CUDA_LAUNCHED("chunk_jobs_kernel");
  ctx.mark("chunk_jobs_kernel");
  // Shared memory for the largest chunk the CUDA kernels take (the headers kernel rejected larger);
  // a persistent grid of the blocks that fit at once.
  JL_CUDA_CHECK(cudaFuncSetAttribute(decompress_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kDecodeSmem)));
  int per_sm = 0;
  JL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decompress_kernel, kThreads, kDecodeSmem));
  const uint64_t grid = std::max<uint64_t>(1, std::min<uint64_t>(max_chunks, uint64_t(ctx.info().sm_count) * std::max(per_sm, 1)));
  decompress_kernel<<<unsigned(grid), kThreads, kDecodeSmem, ctx.stream()>>>(chunk_jobs, buffers, chunk_first, err);
  JL_CUDA_LAUNCHED("decompress_kernel");
  ctx.mark("decompress_kernel");
}

}  // namespace joinlab::cuda
