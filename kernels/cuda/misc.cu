// Kernel context, generation, gather, checksum and scan.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cub/device/device_scan.cuh>

#include <map>
#include <mutex>

#include "core/verify/checksum.hpp"
#include "kernels/cuda/cuda_rank.hpp"
#include "kernels/cuda/join_common.cuh"

namespace joinlab::cuda {

const DeviceInfo& device_info(int device) {
  static std::mutex mu;
  static std::map<int, DeviceInfo> cache;
  std::lock_guard<std::mutex> g(mu);
  auto it = cache.find(device);
  if (it != cache.end()) return it->second;
  cudaDeviceProp prop{};
  JL_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceInfo d;
  d.device = device;
  d.name = prop.name;
  d.sm_count = prop.multiProcessorCount;
  d.smem_per_block_optin = prop.sharedMemPerBlockOptin;
  d.l2_bytes = size_t(prop.l2CacheSize);
  d.total_memory = prop.totalGlobalMem;
  return cache.emplace(device, d).first->second;
}

KernelContext::~KernelContext() {
  // Stream-ordered frees run after every kernel queued so far; errors here cannot be thrown
  // from a destructor and would resurface at the next checked call.
  for (void* p : scratch_) cudaFreeAsync(p, stream_);
  for (auto& m : marks_) cudaEventDestroy(m.event);  // marks nobody took (an error path)
}

void* KernelContext::scratch(size_t bytes) {
  void* p = nullptr;
  if (cudaMallocAsync(&p, std::max<size_t>(bytes, 16), stream_) != cudaSuccess) {
    cudaGetLastError();  // out of memory is not sticky: give the block cache back and retry once
    device_block_release(info_.device);
    JL_CUDA_CHECK(cudaMallocAsync(&p, std::max<size_t>(bytes, 16), stream_));
  }
  scratch_.push_back(p);
  scratch_bytes_ += bytes;
  return p;
}

namespace {
// Pinned blocks that uploads are staged in, per device: a block is taken again once the copy that
// read it is done (its event reached). A copy straight from pageable memory may wait for the
// stream's queued work before it returns (the driver stages it itself), so a strategy that
// queues ahead (triton's 2 MiB of offsets per partition) would wait for the GPU at every upload.
struct StagingBlock {
  int device;
  void* ptr;
  size_t bytes;
  cudaEvent_t copied;
};
// Whether the copy out of a block is done. A copy still running is no error: it must not stay
// the runtime's last error, which a later launch check would report.
bool staging_free(const StagingBlock& b) {
  const cudaError_t q = cudaEventQuery(b.copied);
  if (q == cudaErrorNotReady) {
    if (cudaPeekAtLastError() == cudaErrorNotReady) cudaGetLastError();
    return false;
  }
  JL_CUDA_CHECK(q);
  return true;
}
std::mutex staging_mu;
std::vector<StagingBlock>& staging_blocks() {
  static auto* v = new std::vector<StagingBlock>;  // never destroyed: the driver may be gone at exit
  return *v;
}
}  // namespace

// Small uploads (a launch's descriptors, segment bounds) are read by a kernel straight from the
// mapped pinned block: a cudaMemcpyAsync would queue behind the bulk copies other streams keep
// on the host-to-device copy engine (triton's staged first pass: a 16 KB upload waited 1.5 ms
// behind three 16 MB chunk copies, and its kernel with it).
constexpr size_t kKernelUploadBytes = 256 * 1024;
__global__ void upload_kernel(const uint32_t* __restrict__ src, uint32_t* __restrict__ dst, size_t words) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

void KernelContext::upload_bytes(void* d, const void* h, size_t bytes) {
  if (!bytes) return;
  int device = 0;
  JL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> g(staging_mu);
  std::vector<StagingBlock>& blocks = staging_blocks();
  StagingBlock* b = nullptr;  // the smallest free block that holds the bytes
  for (StagingBlock& s : blocks)
    if (s.device == device && s.bytes >= bytes && (!b || s.bytes < b->bytes) && staging_free(s))
      b = &s;
  if (!b) {
    size_t size = 64 * 1024;  // powers of two, so that freed blocks fit later uploads
    while (size < bytes) size *= 2;
    StagingBlock s{device, pinned_block_get(size), size, nullptr};
    JL_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
    blocks.push_back(s);
    b = &blocks.back();
  }
  std::memcpy(b->ptr, h, bytes);
  if (bytes <= kKernelUploadBytes && bytes % 4 == 0 && reinterpret_cast<uintptr_t>(d) % 4 == 0) {
    const size_t words = bytes / 4;
    upload_kernel<<<unsigned(std::min<size_t>(64, (words + 255) / 256)), 256, 0, stream_>>>(
        static_cast<const uint32_t*>(b->ptr), static_cast<uint32_t*>(d), words);
    JL_CUDA_LAUNCHED("upload_kernel");
  } else {
    JL_CUDA_CHECK(cudaMemcpyAsync(d, b->ptr, bytes, cudaMemcpyHostToDevice, stream_));
  }
  JL_CUDA_CHECK(cudaEventRecord(b->copied, stream_));
}

bool host_times() {
  static const bool on = [] {
    const char* v = std::getenv("JOINLAB_HOST_TIMES");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

double host_time_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void KernelContext::mark(const char* kernel) {
  if (host_times()) std::fprintf(stderr, "host %.3f ms: queued %s\n", host_time_ms(), kernel);
  cudaEvent_t e;
  JL_CUDA_CHECK(cudaEventCreate(&e));
  JL_CUDA_CHECK(cudaEventRecord(e, stream_));
  marks_.push_back({kernel, e});
}

void KernelContext::sync() { JL_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

__global__ void total_of_counts_kernel(const uint64_t* counts, const uint64_t* offsets, uint64_t n, uint64_t* d_words) {
  d_words[kCountWord] = offsets[n - 1] + counts[n - 1];
}

namespace {
// A block's share of a gather: spans are cut into pieces of at most this (a 64 MB gather of ~200
// runs then keeps every SM busy).
constexpr uint64_t kSpanPieceBytes = 64 * 1024;
// Copies n words W; each thread loads kUnroll words before it stores them, so that their loads
// are in flight together.
template <class W>
__device__ void copy_words(W* __restrict__ dst, const W* __restrict__ src, uint64_t n) {
  constexpr int kUnroll = 4;
  uint64_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * uint64_t(blockDim.x) < n; i += kUnroll * uint64_t(blockDim.x)) {
    W w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) w[u] = src[i + u * blockDim.x];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * blockDim.x] = w[u];
  }
  for (; i < n; i += blockDim.x) dst[i] = src[i];
}
// Block b copies piece b in the widest words both ends and the length allow (tuple columns are
// 4- or 8-byte aligned).
__global__ void copy_spans_kernel(const CopySpan* pieces) {
  const CopySpan p = pieces[blockIdx.x];
  const uint64_t align = reinterpret_cast<uintptr_t>(p.dst) | reinterpret_cast<uintptr_t>(p.src) | p.bytes;
  if (align % 16 == 0) copy_words(reinterpret_cast<uint4*>(p.dst), reinterpret_cast<const uint4*>(p.src), p.bytes / 16);
  else if (align % 8 == 0) copy_words(reinterpret_cast<uint64_t*>(p.dst), reinterpret_cast<const uint64_t*>(p.src), p.bytes / 8);
  else if (align % 4 == 0) copy_words(reinterpret_cast<uint32_t*>(p.dst), reinterpret_cast<const uint32_t*>(p.src), p.bytes / 4);
  else copy_words(p.dst, p.src, p.bytes);
}
}  // namespace

void copy_spans(KernelContext& ctx, const std::vector<CopySpan>& spans) {
  std::vector<CopySpan> pieces;
  for (const CopySpan& s : spans)
    for (uint64_t at = 0; at < s.bytes; at += kSpanPieceBytes)
      pieces.push_back({s.dst + at, s.src + at, std::min(kSpanPieceBytes, s.bytes - at)});
  if (pieces.empty()) return;
  if (pieces.size() > uint64_t(INT32_MAX))
    throw RuntimeError("copy spans: " + std::to_string(pieces.size()) + " pieces exceed one launch");
  copy_spans_kernel<<<unsigned(pieces.size()), 256, 0, ctx.stream()>>>(ctx.upload(pieces));
  JL_CUDA_LAUNCHED("copy_spans_kernel");
}

void zero_words(KernelContext& ctx, uint64_t* d_words, size_t n) {
  JL_CUDA_CHECK(cudaMemsetAsync(d_words, 0, n * sizeof(uint64_t), ctx.stream()));
}

__global__ void put_words_kernel(const uint64_t* d_words, uint64_t* h_words, uint32_t n) {
  for (uint32_t i = threadIdx.x; i < n; i += blockDim.x) h_words[i] = d_words[i];
}

void put_words(KernelContext& ctx, const uint64_t* d_words, uint64_t* h_words, size_t n) {
  if (n == 0) return;
  put_words_kernel<<<1, 64, 0, ctx.stream()>>>(d_words, h_words, uint32_t(n));
  JL_CUDA_LAUNCHED("put_words_kernel");
}

// --- generation -------------------------------------------------------------------------------

template <class K, class V>
__global__ void generate_kernel(KeyGen gen, uint64_t rel_seed, bool rowid, uint64_t first, uint64_t rows,
                                K* keys, V* vals) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t row = first + i;
    keys[i] = K(gen.key(row));
    vals[i] = V(rowid ? row : payload_value(rel_seed, 0, row, uint8_t(sizeof(V))));
  }
}

// tpch_lineitem: a row's key is its order's, so threads take runs of orders, not rows. Each run's
// rows are counted (a jump to its first order's line-count word, then one draw per order),
// scanned, and written from the run's first row on, keeping the block's rows.
constexpr uint64_t kOrdersPerRun = 32;

__global__ void lineitem_run_rows_kernel(uint64_t first_order, uint64_t orders, uint64_t* run_rows) {
  const uint64_t runs = (orders + kOrdersPerRun - 1) / kOrdersPerRun;
  for (uint64_t r = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; r < runs; r += uint64_t(gridDim.x) * blockDim.x) {
    tpch::LineitemCursor c = tpch::LineitemCursor::first_line_of(first_order + r * kOrdersPerRun);
    const uint64_t n = min(kOrdersPerRun, orders - r * kOrdersPerRun);
    uint64_t lines = 0;
    for (uint64_t k = 0; k < n; ++k, c.next_order()) lines += c.lines;
    run_rows[r] = lines;
  }
}

// `start`: the block's first row; run_first[r]: rows of the block's orders before run r.
template <class K, class V>
__global__ void lineitem_write_kernel(tpch::LineitemCursor start, uint64_t orders, const uint64_t* run_first,
                                      uint64_t rel_seed, bool rowid, uint64_t first, uint64_t rows, K* keys, V* vals) {
  const uint64_t runs = (orders + kOrdersPerRun - 1) / kOrdersPerRun;
  for (uint64_t r = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; r < runs; r += uint64_t(gridDim.x) * blockDim.x) {
    tpch::LineitemCursor c = tpch::LineitemCursor::first_line_of(start.order + r * kOrdersPerRun);
    const uint64_t n = min(kOrdersPerRun, orders - r * kOrdersPerRun);
    int64_t i = int64_t(run_first[r]) - int64_t(start.line);  // the run's first row in the block
    for (uint64_t k = 0; k < n; ++k, c.next_order()) {
      const uint64_t key = c.key();
      for (uint32_t line = 0; line < c.lines; ++line, ++i) {
        if (i < 0 || uint64_t(i) >= rows) continue;
        const uint64_t row = first + uint64_t(i);
        keys[i] = K(key);
        vals[i] = V(rowid ? row : payload_value(rel_seed, 0, row, uint8_t(sizeof(V))));
      }
    }
  }
}

template <class K, class V>
void generate_lineitem(KernelContext& ctx, const KeyGen& gen, uint64_t rel_seed, bool value_is_rowid,
                       uint64_t first_row, uint64_t rows, K* keys, V* vals) {
  const tpch::LineitemCursor start = gen.lineitems.cursor(first_row);
  const uint64_t orders = gen.lineitems.cursor(first_row + rows - 1).order - start.order + 1;
  const uint64_t runs = (orders + kOrdersPerRun - 1) / kOrdersPerRun;
  uint64_t* run_rows = ctx.scratch_array<uint64_t>(runs);
  uint64_t* run_first = ctx.scratch_array<uint64_t>(runs);
  const unsigned grid = grid_for(runs, 256, ctx.info().sm_count * 16);
  lineitem_run_rows_kernel<<<grid, 256, 0, ctx.stream()>>>(start.order, orders, run_rows);
  JL_CUDA_LAUNCHED("lineitem_run_rows_kernel");
  exclusive_scan(ctx, run_rows, run_first, runs);
  lineitem_write_kernel<K, V><<<grid, 256, 0, ctx.stream()>>>(start, orders, run_first, rel_seed, value_is_rowid,
                                                              first_row, rows, keys, vals);
  JL_CUDA_LAUNCHED("lineitem_write_kernel");
  ctx.mark("lineitem_write_kernel");
}

template <class K, class V>
void generate(KernelContext& ctx, const KeyGen& gen, uint64_t rel_seed, bool value_is_rowid,
              uint64_t first_row, uint64_t rows, K* keys, V* vals) {
  if (!rows) return;
  if (gen.dist == uint8_t(KeyDist::TpchLineitem)) {
    generate_lineitem(ctx, gen, rel_seed, value_is_rowid, first_row, rows, keys, vals);
    return;
  }
  generate_kernel<K, V><<<grid_for(rows, 256, ctx.info().sm_count * 16), 256, 0, ctx.stream()>>>(
      gen, rel_seed, value_is_rowid, first_row, rows, keys, vals);
  JL_CUDA_LAUNCHED("generate_kernel");
  ctx.mark("generate_kernel");
}

template <class V>
__global__ void generate_payload_kernel(uint64_t rel_seed, int column, uint64_t first, uint64_t rows, V* out) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows;
       i += uint64_t(gridDim.x) * blockDim.x)
    out[i] = V(payload_value(rel_seed, column, first + i, uint8_t(sizeof(V))));
}

template <class V>
void generate_payload(KernelContext& ctx, uint64_t rel_seed, int column, uint64_t first_row, uint64_t rows,
                      V* out) {
  if (!rows) return;
  generate_payload_kernel<V><<<grid_for(rows, 256, ctx.info().sm_count * 16), 256, 0, ctx.stream()>>>(
      rel_seed, column, first_row, rows, out);
  JL_CUDA_LAUNCHED("generate_payload_kernel");
}

template void generate<uint32_t, uint32_t>(KernelContext&, const KeyGen&, uint64_t, bool, uint64_t, uint64_t, uint32_t*, uint32_t*);
template void generate<uint32_t, uint64_t>(KernelContext&, const KeyGen&, uint64_t, bool, uint64_t, uint64_t, uint32_t*, uint64_t*);
template void generate<uint64_t, uint32_t>(KernelContext&, const KeyGen&, uint64_t, bool, uint64_t, uint64_t, uint64_t*, uint32_t*);
template void generate<uint64_t, uint64_t>(KernelContext&, const KeyGen&, uint64_t, bool, uint64_t, uint64_t, uint64_t*, uint64_t*);
template void generate_payload<uint32_t>(KernelContext&, uint64_t, int, uint64_t, uint64_t, uint32_t*);
template void generate_payload<uint64_t>(KernelContext&, uint64_t, int, uint64_t, uint64_t, uint64_t*);

// --- gather -----------------------------------------------------------------------------------

template <class I, class C>
__global__ void gather_kernel(const I* ids, const C* column, uint64_t column_rows, uint64_t base_row,
                              uint64_t rows, C* out, uint64_t* d_words) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t at = uint64_t(ids[i]) - base_row;  // wraps for ids below base_row
    if (at < column_rows)
      out[i] = column[at];
    else
      atomicMax(reinterpret_cast<ull*>(&d_words[kCountWord]), ull(i + 1));
  }
}

template <class I, class C>
void gather(KernelContext& ctx, const I* ids, const C* column, uint64_t column_rows, uint64_t base_row,
            uint64_t rows, C* out, uint64_t* d_words) {
  if (!rows) return;
  gather_kernel<I, C><<<grid_for(rows, 256, ctx.info().sm_count * 16), 256, 0, ctx.stream()>>>(
      ids, column, column_rows, base_row, rows, out, d_words);
  JL_CUDA_LAUNCHED("gather_kernel");
}
template void gather<uint32_t, uint32_t>(KernelContext&, const uint32_t*, const uint32_t*, uint64_t, uint64_t, uint64_t, uint32_t*, uint64_t*);
template void gather<uint32_t, uint64_t>(KernelContext&, const uint32_t*, const uint64_t*, uint64_t, uint64_t, uint64_t, uint64_t*, uint64_t*);
template void gather<uint64_t, uint32_t>(KernelContext&, const uint64_t*, const uint32_t*, uint64_t, uint64_t, uint64_t, uint32_t*, uint64_t*);
template void gather<uint64_t, uint64_t>(KernelContext&, const uint64_t*, const uint64_t*, uint64_t, uint64_t, uint64_t, uint64_t*, uint64_t*);

// --- checksum -----------------------------------------------------------------------------------

struct ChecksumColumns {
  const void* data[kMaxChecksumColumns + 1];  // [0] = keys
  uint8_t bytes[kMaxChecksumColumns + 1];
  int columns;  // payload columns
};

__device__ __forceinline__ uint64_t load_word(const void* p, uint8_t bytes, uint64_t i) {
  return bytes == 4 ? uint64_t(static_cast<const uint32_t*>(p)[i]) : static_cast<const uint64_t*>(p)[i];
}

__global__ void checksum_kernel(ChecksumColumns cols, uint64_t first, uint64_t rows, uint64_t* d_words) {
  __shared__ uint64_t warp_sums[32];
  uint64_t acc = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows;
       i += uint64_t(gridDim.x) * blockDim.x) {
    const uint64_t row = first + i;
    uint64_t h = digest_begin(load_word(cols.data[0], cols.bytes[0], row));
    for (int c = 0; c < cols.columns; ++c) h = digest_add(h, load_word(cols.data[c + 1], cols.bytes[c + 1], row), c);
    acc += h;
  }
  const uint64_t total = block_sum(acc, warp_sums);
  if (threadIdx.x == 0) atomic_add(&d_words[kChecksumWord], total);
}

void checksum(KernelContext& ctx, ColumnPtr keys, const std::vector<ColumnPtr>& columns, uint64_t first,
              uint64_t rows, uint64_t* d_words) {
  if (columns.size() > size_t(kMaxChecksumColumns))
    throw RuntimeError("checksum: " + std::to_string(columns.size()) + " payload columns, the CUDA kernel takes at most " +
                       std::to_string(kMaxChecksumColumns));
  ChecksumColumns c{};
  c.data[0] = keys.data;
  c.bytes[0] = keys.bytes;
  for (size_t i = 0; i < columns.size(); ++i) {
    c.data[i + 1] = columns[i].data;
    c.bytes[i + 1] = columns[i].bytes;
  }
  c.columns = int(columns.size());
  JL_CUDA_CHECK(cudaMemcpyAsync(&d_words[kCountWord], &rows, sizeof(rows), cudaMemcpyHostToDevice, ctx.stream()));
  if (!rows) return;
  checksum_kernel<<<grid_for(rows, 256, ctx.info().sm_count * 8), 256, 0, ctx.stream()>>>(c, first, rows, d_words);
  JL_CUDA_LAUNCHED("checksum_kernel");
  ctx.mark("checksum_kernel");
}

// --- scan ---------------------------------------------------------------------------------------

void exclusive_scan(KernelContext& ctx, const uint64_t* in, uint64_t* out, uint64_t n) {
  if (!n) return;
  size_t temp = 0;
  JL_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(nullptr, temp, in, out, int64_t(n), ctx.stream()));
  void* d_temp = ctx.scratch(temp);
  JL_CUDA_CHECK(cub::DeviceScan::ExclusiveSum(d_temp, temp, in, out, int64_t(n), ctx.stream()));
  ctx.mark("cub::DeviceScan::ExclusiveSum");
}

}  // namespace joinlab::cuda
