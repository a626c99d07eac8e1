// The CUDA kernel library: every operator of core/exec/ops.hpp as typed host functions over raw
// device (or mapped pinned) pointers, queued on a stream. Like kernels/cpu it knows nothing of
// ranks or strategies; cuda_ops.cu maps each Op onto these functions.
//
// Results that the host reads (counts, checksums, offsets) are written to a small device array
// of 64-bit words the caller provides: word 0 = count, word 1 = checksum, words 2.. = values.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/common/hashing.hpp"
#include "core/exec/ops.hpp"
#include "core/workload/keygen.hpp"

namespace joinlab::cuda {

constexpr int kCountWord = 0, kChecksumWord = 1, kFirstValueWord = 2;

struct DeviceInfo {
  int device = 0;
  std::string name;
  int sm_count = 0;
  size_t smem_per_block_optin = 0;  // bytes a block may use after cudaFuncSetAttribute
  size_t l2_bytes = 0;
  size_t total_memory = 0;
};
const DeviceInfo& device_info(int device);  // read once per device

// Kernel variants chosen by cluster options (cuda_backend.cu), for measuring one against another.
struct KernelOptions {
  // Partition scatter: 128-byte-aligned windows with carry buffers (default), or direct
  // unaligned runs (scatter=direct).
  bool aligned_scatter = true;
  // Radix sort: MSD (partition passes on the high key bits, then each partition sorted on chip;
  // default), or CUB's onesweep LSD sort over all key bits (radix_sort=onesweep).
  bool onesweep_sort = false;
};

// What a kernel function needs besides its arguments: the stream, the device's limits and
// stream-ordered temporary memory (cudaMallocAsync; freed on the stream when the context ends,
// after every kernel it served has been queued).
// JOINLAB_HOST_TIMES=1: the host thread prints when it launches each kernel (KernelContext::mark)
// and each operator and stream sync (CudaRank), in milliseconds of the steady clock, to stderr:
// where the host keeps the GPU waiting (the device machine has no Nsight Systems).
bool host_times();
double host_time_ms();

class KernelContext {
 public:
  KernelContext(cudaStream_t stream, const DeviceInfo& info) : stream_(stream), info_(info) {}
  ~KernelContext();
  KernelContext(const KernelContext&) = delete;
  KernelContext& operator=(const KernelContext&) = delete;

  cudaStream_t stream() const { return stream_; }
  const DeviceInfo& info() const { return info_; }
  void* scratch(size_t bytes);
  template <class T>
  T* scratch_array(size_t n) { return static_cast<T*>(scratch(n * sizeof(T))); }
  // Copies a host vector into scratch memory, staged in pinned memory: the call returns at once
  // (it does not wait for the stream's queued work), and `v` may die right after.
  template <class T>
  T* upload(const std::vector<T>& v) {
    T* d = scratch_array<T>(v.size() ? v.size() : 1);
    upload_bytes(d, v.data(), v.size() * sizeof(T));
    return d;
  }
  // Blocks the host until the stream is idle (operators that choose launch parameters from a
  // device-computed size do this once).
  void sync();
  uint64_t scratch_bytes() const { return scratch_bytes_; }
  KernelOptions options;
  // Records an event after the kernels queued so far: the time since the previous mark (or the
  // operator's start) becomes a sub-span named `kernel` in the trace (per-kernel breakdown).
  void mark(const char* kernel);
  struct Mark {
    const char* kernel;
    cudaEvent_t event;
  };
  std::vector<Mark> take_marks() { return std::move(marks_); }

 private:
  void upload_bytes(void* d, const void* h, size_t bytes);
  cudaStream_t stream_;
  const DeviceInfo& info_;
  std::vector<void*> scratch_;
  std::vector<Mark> marks_;
  uint64_t scratch_bytes_ = 0;
};

// Sets `words` device words to zero (result words before an operator runs).
void zero_words(KernelContext& ctx, uint64_t* d_words, size_t n);
// Writes an operator's `n` result words into mapped pinned memory (`h_words`, its host address:
// with unified addressing a mapped block has the same address on the GPU). A kernel, not a copy:
// a small device-to-host copy after each operator took 4% of the link from a stream's chunk copies
// (16 MiB host-to-device copies beside four kernels per chunk, one H200: 50.1-50.3 GB/s with
// such a copy after each kernel, 51.3-52.8 with this write, 52.0-52.4 with neither).
void put_words(KernelContext& ctx, const uint64_t* d_words, uint64_t* h_words, size_t n);

// Copies spans inside device memory in one launch (a vectored copy's gather: a copy engine's
// batch pays per span, and a slice of triton's second pass gathers ~200 runs of ~100 KB).
struct CopySpan {
  char* dst;
  const char* src;
  uint64_t bytes;
};
void copy_spans(KernelContext& ctx, const std::vector<CopySpan>& spans);

// --- generation (KeyGen and payload_value from core/workload/keygen.hpp) -----------------------
template <class K, class V>
void generate(KernelContext& ctx, const KeyGen& gen, uint64_t rel_seed, bool value_is_rowid,
              uint64_t first_row, uint64_t rows, K* keys, V* vals);
// StarGenerateOp: rows [first_row, first_row + rows) of an SSB table (lineorder: uint64 keys and
// values, its rows laid out by `lineitems`, a tpch_lineitem generator of its orders; a
// dimension: uint32 keys and values).
void star_generate(KernelContext& ctx, const ssb::Scale& scale, const ssb::StarQuery& q, ssb::Table table,
                   const KeyGen& lineitems, uint64_t first_row, uint64_t rows, void* keys, void* vals);
// StarProbeOp: d_words[kCountWord] += rows that pass; their values added to groups[group].
void star_probe(KernelContext& ctx, const ssb::StarQuery& q, const std::vector<ssb::DimTableRef>& dims,
                const uint64_t* keys, const uint64_t* vals, uint64_t rows, uint64_t* groups, uint64_t* d_words);
template <class V>
void generate_payload(KernelContext& ctx, uint64_t rel_seed, int column, uint64_t first_row,
                      uint64_t rows, V* out);

// --- partitioning ---------------------------------------------------------------------------
// counts[s * fanout + p] (device, ranges.size() histograms, zeroed by the caller) += rows of
// partition p among keys [ranges[s].first, ranges[s].second), in one launch.
template <class K>
void histogram(KernelContext& ctx, const K* keys, const std::vector<std::pair<uint64_t, uint64_t>>& ranges,
               PartitionFn fn, uint64_t* d_counts);
// HistogramOp::counts_out: counts[s * fanout + p] (`segments` histograms) copied partition-major
// to out[p * stride + first + s], and each partition's total over the segments to totals[p].
void spread_counts(KernelContext& ctx, const uint64_t* counts, uint64_t segments, uint32_t fanout, uint64_t* out,
                   uint64_t first, uint64_t stride, uint64_t* totals);
// Fanout bits one scatter pass handles with its shared-memory staging on this device.
uint32_t max_one_pass_bits(const DeviceInfo& info, uint32_t key_bytes, uint32_t val_bytes);
// Scatters rows [segments[0], segments.back()) of `in` (each segment on its own) to out row
// segments[s] - segments[0] onwards. d_offsets (k * fanout + 1 words) receives the exclusive
// offset of each (segment, partition), segment-major, then the total. Fanouts above
// max_one_pass_bits run as two passes (high bits, then low bits) through scratch memory.
template <class K, class V>
void partition(KernelContext& ctx, const K* in_k, const V* in_v, const std::vector<uint64_t>& segments,
               PartitionFn fn, K* out_k, V* out_v, uint64_t* d_offsets);
// ChunkPartitionOp (chunk_partition.cu): chunk c's rows of partition p from row offsets.at(c, p)
// (device words) of `cache` (cached chunks) or `spill`; Hierarchical stages them in flush_bytes per
// (block, partition) of device memory. Rows past an output's capacity are counted in
// d_words[kChecksumWord].
struct ChunkPartitionRun {
  const void* keys;
  const void* vals;
  uint64_t rows;
  bool cached;
};
struct ChunkPartitionOut {
  void* keys;
  void* vals;
  uint64_t capacity;
};
template <class K, class V>
void chunk_partition(KernelContext& ctx, const std::vector<ChunkPartitionRun>& chunks, PartitionFn fn,
                     ChunkOffsets offsets, ChunkPartitionOut cache, ChunkPartitionOut spill, bool hierarchical,
                     uint32_t flush_bytes, uint64_t* d_words);
// starts[p] = offsets.at(0, p) for p < fanout, starts[fanout] = rows: the partitions' starts in
// an output that one partition-major layout fills (ChunkPartitionOp::offsets_on_device).
void chunk_partition_starts(KernelContext& ctx, ChunkOffsets offsets, uint32_t fanout, uint64_t rows,
                            uint64_t* starts);

// LinkAccessOp (link_access.cu): the zero-copy link microbenchmark; `host` is pinned and mapped.
void link_access(KernelContext& ctx, void* host, uint64_t host_bytes, void* device, uint64_t bytes,
                 uint32_t granule, bool random, LinkAccess access);

// --- hash tables (layouts of HashTable in core/exec/ops.hpp) ---------------------------------
template <class K, class V>
struct LinearTableRef {
  K* keys;
  V* vals;
  uint64_t slots;  // power of two
  uint64_t seed;
};
template <class K, class V>
struct ChainedTableRef {
  uint32_t* heads;  // buckets entries, all-ones = none
  uint32_t* next;   // one per row
  K* keys;
  V* vals;
  uint64_t buckets;  // power of two
  uint64_t seed;
};
template <class K, class V>
struct RowIdTableRef {
  uint64_t* words;  // slots entries: tag << 32 | row id, all-ones = empty
  const K* keys;    // the build relation: row id i is keys[i], vals[i]
  const V* vals;
  uint64_t slots;  // power of two
  uint64_t seed;
};
template <class K, class V>
void clear_table(KernelContext& ctx, const LinearTableRef<K, V>& t);
template <class K, class V>
void clear_table(KernelContext& ctx, const ChainedTableRef<K, V>& t);
template <class K, class V>
void clear_table(KernelContext& ctx, const RowIdTableRef<K, V>& t);
// Inserts rows present .. present + rows - 1 of the table's relation.
template <class K, class V>
void build(KernelContext& ctx, const RowIdTableRef<K, V>& t, uint64_t present, uint64_t rows);
template <class K, class V>
void build(KernelContext& ctx, const LinearTableRef<K, V>& t, const K* keys, const V* vals, uint64_t rows);
// Rows land at present .. present + rows - 1 of the chained table's arrays.
template <class K, class V>
void build(KernelContext& ctx, const ChainedTableRef<K, V>& t, uint64_t present, const K* keys,
           const V* vals, uint64_t rows);

// Where join kernels write their (key, R value, S value) rows.
template <class K, class VR, class VS>
struct JoinSinkRef {
  K* keys = nullptr;
  VR* rvals = nullptr;
  VS* svals = nullptr;
  uint64_t first = 0, capacity = 0;
  OutputMode mode = OutputMode::CountThenWrite;
};
// Every join writes the true match count to d_words[kCountWord].
template <class K, class VR, class VS>
void probe(KernelContext& ctx, const LinearTableRef<K, VR>& t, const K* keys, const VS* vals,
           uint64_t rows, const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words);
template <class K, class VR, class VS>
void probe(KernelContext& ctx, const ChainedTableRef<K, VR>& t, const K* keys, const VS* vals,
           uint64_t rows, const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words);
template <class K, class VR, class VS>
void probe(KernelContext& ctx, const RowIdTableRef<K, VR>& t, const K* keys, const VS* vals,
           uint64_t rows, const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words);
template <class K, class VR, class VS>
void partitioned_join(KernelContext& ctx, const K* r_keys, const VR* r_vals,
                      const std::vector<uint64_t>& r_offsets, const K* s_keys, const VS* s_vals,
                      const std::vector<uint64_t>& s_offsets, const uint64_t* r_dev_offsets,
                      const uint64_t* s_dev_offsets, TableKind kind, const JoinSinkRef<K, VR, VS>& sink,
                      uint64_t* d_words);

// --- sorting and merge join -----------------------------------------------------------------
template <class K, class V>
void sort_pairs(KernelContext& ctx, const K* in_k, const V* in_v, uint64_t rows, K* out_k, V* out_v,
                SortAlgo algo);
template <class K, class VR, class VS>
void merge_join(KernelContext& ctx, const K* r_keys, const VR* r_vals, uint64_t r_rows, const K* s_keys,
                const VS* s_vals, uint64_t s_rows, const JoinSinkRef<K, VR, VS>& sink, uint64_t* d_words);

// --- merge stages of the merge-based multi-GPU sort (merge.cu) --------------------------------
// out = runs a and b merged by key (CUB's DeviceMerge; equal keys in any order).
template <class K, class V>
void merge_pairs(KernelContext& ctx, const K* a_k, const V* a_v, uint64_t a_rows, const K* b_k, const V* b_v,
                 uint64_t b_rows, K* out_k, V* out_v);
// d_words[kCountWord] = the first t < n with x[t] <= y[t], else n (PivotSearchOp).
template <class K>
void pivot_search(KernelContext& ctx, const K* x, const K* y, uint64_t n, uint64_t* d_words);

// --- gather, checksum, scan -----------------------------------------------------------------
// out[i] = column[ids[i] - base_row]; an id outside the column sets d_words[kCountWord] to 1 + the
// index of a bad row (the caller reports it).
template <class I, class C>
void gather(KernelContext& ctx, const I* ids, const C* column, uint64_t column_rows, uint64_t base_row,
            uint64_t rows, C* out, uint64_t* d_words);
struct ColumnPtr {
  const void* data = nullptr;  // element 0 of the column
  uint8_t bytes = 4;
};
constexpr int kMaxChecksumColumns = 8;
// d_words[kCountWord] = rows, d_words[kChecksumWord] = wrapping sum of row digests.
void checksum(KernelContext& ctx, ColumnPtr keys, const std::vector<ColumnPtr>& columns, uint64_t first,
              uint64_t rows, uint64_t* d_words);
void exclusive_scan(KernelContext& ctx, const uint64_t* in, uint64_t* out, uint64_t n);

// --- cascaded compression (core/exec/codec.hpp; kernels/cuda/codec.cu) --------------------------
// Chunks the CUDA kernels take: their layers run in a block's shared memory (20 bytes a value to
// compress, 17 to decompress).
constexpr uint32_t kCudaMaxChunkLog2 = 12;
struct CodecColumnRef {
  const void* data = nullptr;  // element 0 of the buffer's values
  uint64_t rows = 0;
  codec::Config config;
};
struct CodecOutRef {
  void* data = nullptr;
  uint64_t capacity = 0;  // values
};
// The batch's streams back to back from out[0] (the same bytes as kernels/cpu/codec.cpp):
// d_words[kFirstValueWord + b] = buffer b's byte offset, [kFirstValueWord + n] and
// [kCountWord] = the bytes written.
void codec_compress(KernelContext& ctx, const std::vector<CodecColumnRef>& cols, uint32_t value_bytes,
                    uint32_t chunk_log2, uint8_t* out, uint64_t* d_words);
// Buffer b = bytes [offsets[b], offsets[b + 1]) of `in` into outs[b]: d_words[kFirstValueWord + b]
// = its rows, [kCountWord] = their sum; then two error words (kCodecErrorWords): the first
// failure's complemented key ((chunk error) << 63 | buffer << 40 | chunk << 8 | code; 0 = none) and
// its detail (codec_error_of turns them into the CPU's message).
constexpr size_t kCodecErrorWords = 2;
void codec_decompress(KernelContext& ctx, const uint8_t* in, const std::vector<uint64_t>& offsets,
                      uint32_t value_bytes, const std::vector<CodecOutRef>& outs, uint64_t* d_words);

}  // namespace joinlab::cuda
