// gpj's persistent consumer on the GPU (StreamConsumeOp, core/exec/ops.hpp; thostrup2023 section
// 4.2): one kernel per receiver that polls the ring slots, checks each chunk's checksum before
// using it, builds a chained hash table per partition and probes it, and streams the result to
// host memory while the senders keep putting chunks into the rings.
//
// Work division. Each partition q gets a share of the grid's blocks from op.workers (sized from the
// global histogram); a block serves the rings (s, q) of its partitions. Thread 0 of a block polls
// the slot headers (volatile loads: the rings are written by puts from outside the kernel - another
// stream's copies, a peer GPU, a NIC, or the host through mapped pinned memory) and claims the next
// chunk of a ring with an atomic CAS on the ring's claim counter once its header shows the expected
// sequence number and epoch. The whole block then verifies the chunk's checksum (chunk_checksum, a
// block reduction over rows read with ld.cv, i.e. past the non-coherent L1) and re-reads it until it
// matches - a one-sided write becomes visible in no particular order - or chunk_timeout_s passed
// (an error naming the chunk). R chunks are appended to the partition's chain array (one atomicAdd
// per chunk on its cursor) and pushed onto their buckets with atomicExch; S chunks of q are claimed
// only after every R chunk of q was inserted (r_done[q] == R chunks of q) and probe the table.
//
// Credits. Several blocks may use chunks of one ring at once, but they release them in order: a
// block that is done with chunk k waits until chunk k - 1 was released, then writes k + 1 into the
// ring's word of StreamProgress::consumed_words() (host memory, registered and mapped for the
// kernel's run) and fences before passing the turn on, so the host sees a growing count and returns
// the slot to its sender while the kernel runs.
//
// Output path (mode Direct). Each block stages its result rows in shared memory (BlockEmitter,
// kernels/cuda/device_common.cuh) and writes a full stage at positions from one global cursor
// straight into `out` - pinned host memory, written through its mapped address in coalesced runs
// (the GPU's posted writes over PCIe/C2C), or device memory. This replaces the operator's device
// double buffer `staging` (unused here): the rows cross to the host as they are produced, with no
// host copy to schedule while the kernel runs. Rows past out.capacity are counted, not written.
//
// Ending. The kernel ends when every ring delivered its chunks; or on an error (checksum timeout,
// plan mismatch, a full table), when nothing was used for idle_timeout_s, or when the host sets
// the cancel word: the first error goes to the status words (with the chunk it concerns), a stop
// word ends every block's loops, and every wait is bounded by the stop word and the clock
// (%globaltimer), so the kernel never outlives its timeouts. The host turns the status words into
// the CPU consumer's messages.
#include <algorithm>
#include <sstream>

#include "core/exec/chunk.hpp"
#include "core/runtime/cpu_ops.hpp"
#include "core/runtime/polling.hpp"
#include "kernels/cuda/cuda_ops.hpp"
#include "kernels/cuda/device_common.cuh"

namespace joinlab::cuda {

namespace {

constexpr int kThreads = 256;
constexpr uint32_t kStage = 4 * kThreads;  // rows of a block's shared-memory output stage

// Status words (copied back when the kernel ended). Word 0 is kCountWord: the matches.
enum : size_t {
  kErrorWord = 1, kErrRing, kErrChunk, kErrRows, kErrSum, kErrComputed, kErrPartition, kErrRelation, kErrExtra,
  kOutCursor, kLastUse, kStopWord,
  kHeadWords = 16  // then per ring: released, claimed; per partition: R chunks inserted, chain rows used
};
enum : uint64_t { kNoError = 0, kCorrupt, kPlan, kTableFull, kIdle, kCancelled };
enum : int { kActIdle, kActUse, kActDone, kActStop };
enum : int { kRetry, kVerified, kStop };

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// The host's cancel word lies in host memory: every read of it is a PCIe round trip that competes
// with the puts' DMA reads of the senders' chunk images. With each of 264 blocks reading it every
// 64 polls, the puts into the 2x H200 receivers ran at 15-17 GB/s; reading it once per millisecond,
// at 23-25 GB/s, and gpj at 2^28 rows per GPU took 0.58 s instead of 0.66-0.75 s
// (docs/benchmarks.md, 2x H200). A cancel may take that long to stop the kernel;
// errors found on the device stop every block at once through the stop word.
constexpr uint64_t kCancelPollNs = 1000000;
// True at most once per kCancelPollNs per caller (`next`: when the caller may read it again).
__device__ __forceinline__ bool cancel_poll_due(uint64_t& next) {
  const uint64_t now = now_ns();
  if (now < next) return false;
  next = now + kCancelPollNs;
  return true;
}
template <class T>
__device__ __forceinline__ T vload(const T* p) {
  return *reinterpret_cast<const volatile T*>(p);
}
// Loads that skip L1 (not coherent with writes from outside the SM): ld.cv re-fetches every time
// (slot bytes still landing), ld.cg reads L2 (table rows other blocks wrote, verified slot bytes).
// Volatile asm with a memory clobber, unlike the __ldcv/__ldcg intrinsics: the compiler may
// neither reuse a load of the same address from an earlier pass nor move it across the block's
// barriers (a re-read that the compiler merged with the first read would never see the chunk land).
__device__ __forceinline__ uint32_t ld_cv(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.global.cv.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t ld_cv(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.global.cv.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t ld_cg(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t ld_cg(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.global.cg.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

template <class K, class VR, class VS>
struct Consume {
  const char* rings;
  uint32_t sources, parts, slots, epoch;
  uint64_t slot_rows, slot_bytes, vals_at;
  const uint64_t* r_chunks;    // per ring
  const uint64_t* all_chunks;  // per ring: R then S
  const uint64_t* r_total;     // per partition: its R chunks from every source
  const uint64_t* capacity;    // per partition: rows of its chain array
  const uint32_t* partition_ids;
  const ChainedTableRef<K, VR>* tables;
  const uint32_t* block_first;  // partitions of block b: block_parts[block_first[b] .. block_first[b + 1])
  const uint32_t* block_parts;
  uint64_t* w;                     // status and state words (zeroed)
  uint64_t* consumed;              // StreamProgress's consumed counts (mapped host memory)
  const int* cancel;               // StreamProgress's cancel word (mapped host memory)
  JoinSinkRef<K, VR, VS> sink;
  uint64_t chunk_timeout_ns, idle_timeout_ns;
  // An SSB query (StreamConsumeOp::star): S rows go through these chained probes into the groups.
  uint64_t* star_groups;  // null: a join
  ssb::StarQuery star;
  ssb::DimTableRef star_dims[ssb::kMaxSteps];

  __device__ uint64_t* released() const { return w + kHeadWords; }
  __device__ uint64_t* claimed() const { return w + kHeadWords + uint64_t(sources) * parts; }
  __device__ uint64_t* r_done() const { return w + kHeadWords + 2 * uint64_t(sources) * parts; }
  __device__ uint64_t* cursor() const { return w + kHeadWords + 2 * uint64_t(sources) * parts + parts; }
  __device__ const char* slot(uint32_t ring, uint64_t k) const {
    return rings + (uint64_t(ring) * slots + k % slots) * slot_bytes;
  }
  __device__ bool stopped() const { return vload(&w[kStopWord]) != 0; }
  __device__ void used() const { atomicMax(reinterpret_cast<ull*>(&w[kLastUse]), ull(now_ns())); }
  // The first error wins; every block stops.
  __device__ void fail(uint64_t code, uint32_t ring, uint64_t k, uint64_t rows = 0, uint64_t sum = 0,
                       uint64_t computed = 0, uint64_t partition = 0, uint64_t relation = 0, uint64_t extra = 0) const {
    if (atomicCAS(reinterpret_cast<ull*>(&w[kErrorWord]), ull(kNoError), ull(code)) == ull(kNoError)) {
      w[kErrRing] = ring;
      w[kErrChunk] = k;
      w[kErrRows] = rows;
      w[kErrSum] = sum;
      w[kErrComputed] = computed;
      w[kErrPartition] = partition;
      w[kErrRelation] = relation;
      w[kErrExtra] = extra;
      __threadfence();
    }
    atomicExch(reinterpret_cast<ull*>(&w[kStopWord]), 1ull);
  }
};

// Thread 0: claims the next chunk of one of the block's rings that is there, or says why not.
template <class C>
__device__ int poll(const C& a, uint32_t& scan, uint32_t& idle, uint64_t& cancel_at, uint32_t* ring_out, uint64_t* k_out) {
  if (a.stopped()) return kActStop;
  if (cancel_poll_due(cancel_at) && vload(a.cancel)) {
    a.fail(kCancelled, 0, 0);
    return kActStop;
  }
  const uint32_t first = a.block_first[blockIdx.x];
  const uint32_t n = (a.block_first[blockIdx.x + 1] - first) * a.sources;
  bool open = false;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t idx = (scan + i) % n;
    const uint32_t q = a.block_parts[first + idx / a.sources], s = idx % a.sources;
    const uint32_t ring = s * a.parts + q;
    const uint64_t c = vload(&a.claimed()[ring]);
    if (c >= a.all_chunks[ring]) continue;
    open = true;
    if (c >= a.r_chunks[ring] && vload(&a.r_done()[q]) < a.r_total[q]) continue;  // probes wait for the table
    const char* slot = a.slot(ring, c);
    if (vload(reinterpret_cast<const uint64_t*>(slot)) != c + 1) continue;
    if (vload(reinterpret_cast<const uint32_t*>(slot + offsetof(ChunkHeader, epoch))) != a.epoch) continue;
    if (atomicCAS(reinterpret_cast<ull*>(&a.claimed()[ring]), ull(c), ull(c + 1)) != ull(c)) continue;
    __threadfence();  // acquire: the partition's inserted rows (r_done) before the probe reads them
    scan = idx + 1;
    idle = 0;
    *ring_out = ring;
    *k_out = c;
    a.used();
    return kActUse;
  }
  if (!open) return kActDone;
  if ((++idle & 31) == 0) {
    const uint64_t now = now_ns(), last = vload(&a.w[kLastUse]);
    if (now > last && now - last > a.idle_timeout_ns) {
      a.fail(kIdle, 0, 0);
      return kActStop;
    }
  }
  __nanosleep(idle < 64 ? 200 : 2000);
  return kActIdle;
}

// Sum of the row terms of a chunk's rows, read past L1 (the bytes may still be landing).
template <class K, class V>
__device__ uint64_t row_terms(const K* keys, const V* vals, uint32_t rows) {
  uint64_t sum = 0;
  for (uint32_t i = threadIdx.x; i < rows; i += kThreads) sum += chunk_row_term(uint64_t(ld_cv(keys + i)), uint64_t(ld_cv(vals + i)), i);
  return sum;
}

struct Shared {
  uint64_t warp_sums[kThreads / 32];
  uint64_t header[4];
  uint64_t base;
  uint64_t k;
  uint32_t ring;
  int action;
};

// The whole block: verifies chunk k of `ring`, inserts or probes it, releases it. False: stop.
template <class K, class VR, class VS, bool kWrite>
__device__ bool use_chunk(const Consume<K, VR, VS>& a, Shared& sh, BlockEmitter<K, VR, VS>& em, uint64_t& matches) {
  const uint32_t ring = sh.ring;
  const uint64_t k = sh.k;
  const uint32_t q = ring % a.parts;
  const bool is_r = k < a.r_chunks[ring];
  const char* slot = a.slot(ring, k);
  const K* keys = reinterpret_cast<const K*>(slot + kChunkHeaderBytes);
  ChunkHeader h;
  uint64_t since = 0;      // thread 0: when the checksum first failed
  uint64_t cancel_at = 0;  // thread 0: when it may read the cancel word again
  for (;;) {
    if (threadIdx.x == 0)
      for (int i = 0; i < 4; ++i) sh.header[i] = ld_cv(reinterpret_cast<const uint64_t*>(slot) + i);
    __syncthreads();
    h.seq = sh.header[0];
    h.partition = uint32_t(sh.header[1]);
    h.rows = uint32_t(sh.header[1] >> 32);
    h.relation = uint32_t(sh.header[2]);
    h.epoch = uint32_t(sh.header[2] >> 32);
    h.checksum = sh.header[3];
    const bool shaped = h.seq == k + 1 && h.epoch == a.epoch && h.rows <= a.slot_rows;  // else torn
    uint64_t part = 0;
    if (shaped)
      part = is_r ? row_terms(keys, reinterpret_cast<const VR*>(slot + a.vals_at), h.rows)
                  : row_terms(keys, reinterpret_cast<const VS*>(slot + a.vals_at), h.rows);
    const uint64_t sum = block_sum(part, sh.warp_sums);
    if (threadIdx.x == 0) {
      const uint64_t computed =
          shaped ? sum + chunk_header_term(h.seq, h.partition, h.rows, h.relation, h.epoch) : ~h.checksum;
      int verdict = kVerified;
      if (computed != h.checksum) {
        const uint64_t now = now_ns();
        if (!since) since = now;
        if (now > since && now - since > a.chunk_timeout_ns) {
          a.fail(kCorrupt, ring, k, h.rows, h.checksum, computed);
          verdict = kStop;
        } else if (a.stopped() || (cancel_poll_due(cancel_at) && vload(a.cancel))) {
          verdict = kStop;
        } else {
          __nanosleep(500);
          verdict = kRetry;
        }
      }
      sh.action = verdict;
    }
    __syncthreads();
    const int verdict = sh.action;
    if (verdict == kStop) return false;
    if (verdict == kVerified) break;
  }
  // The plan: the chunk is of the partition and relation this ring carries at this position.
  if (threadIdx.x == 0) {
    int verdict = kVerified;
    if (h.partition != a.partition_ids[q] || h.relation != (is_r ? 0u : 1u)) {
      a.fail(kPlan, ring, k, h.rows, 0, 0, h.partition, h.relation);
      verdict = kStop;
    } else if (is_r) {
      const uint64_t base = atomicAdd(reinterpret_cast<ull*>(&a.cursor()[q]), ull(h.rows));
      if (base + h.rows > a.capacity[q]) {
        a.fail(kTableFull, ring, k, h.rows, 0, 0, 0, 0, base);
        verdict = kStop;
      }
      sh.base = base;
    }
    sh.action = verdict;
  }
  __syncthreads();
  if (sh.action == kStop) return false;
  const ChainedTableRef<K, VR> t = a.tables[q];
  if (is_r) {
    const VR* vals = reinterpret_cast<const VR*>(slot + a.vals_at);
    const uint64_t base = sh.base;
    for (uint32_t i = threadIdx.x; i < h.rows; i += kThreads) {
      const K key = ld_cg(keys + i);
      const uint32_t row = uint32_t(base + i);
      t.keys[row] = key;
      t.vals[row] = ld_cg(vals + i);
      t.next[row] = atomicExch(&t.heads[table_slot(uint64_t(key), t.seed, t.buckets)], row);
    }
    __threadfence();  // release: the rows before r_done counts the chunk
    __syncthreads();
    if (threadIdx.x == 0) atomicAdd(reinterpret_cast<ull*>(&a.r_done()[q]), 1ull);
  } else if (a.star_groups) {  // the dimensions are built and read-only: plain loads
    const VS* vals = reinterpret_cast<const VS*>(slot + a.vals_at);
    for (uint32_t i = threadIdx.x; i < h.rows; i += kThreads) {
      uint32_t group = 0;
      if (!ssb::star_probe(a.star, a.star_dims, uint64_t(ld_cg(keys + i)), group)) continue;
      ++matches;
      atomicAdd(reinterpret_cast<ull*>(&a.star_groups[group]), ull(ld_cg(vals + i)));
    }
  } else {
    const VS* vals = reinterpret_cast<const VS*>(slot + a.vals_at);
    for (uint32_t first = 0; first < h.rows; first += kThreads) {
      const uint32_t i = first + threadIdx.x;
      if (i < h.rows) {
        const K key = ld_cg(keys + i);
        const VS sv = ld_cg(vals + i);
        for (uint32_t row = ld_cg(&t.heads[table_slot(uint64_t(key), t.seed, t.buckets)]); row != ~0u;
             row = ld_cg(&t.next[row]))
          if (ld_cg(&t.keys[row]) == key) {
            ++matches;
            if (kWrite) em.emit(key, ld_cg(&t.vals[row]), sv);
          }
      }
      if (kWrite) em.end_round(kThreads);
    }
  }
  // Release in ring order: after chunk k - 1, so the host's count only grows.
  __syncthreads();
  if (threadIdx.x == 0) {
    int verdict = kVerified;
    uint64_t since_wait = 0;
    while (vload(&a.released()[ring]) != k) {
      const uint64_t now = now_ns();
      if (!since_wait) since_wait = now;
      if (a.stopped()) {
        verdict = kStop;
        break;
      }
      if (now > since_wait && now - since_wait > a.idle_timeout_ns) {
        a.fail(kIdle, ring, k);
        verdict = kStop;
        break;
      }
      __nanosleep(200);
    }
    if (verdict != kStop) {
      __threadfence_system();  // after the previous holder's host write
      *reinterpret_cast<volatile uint64_t*>(a.consumed + ring) = k + 1;
      __threadfence_system();  // the host write before the next holder's
      atomicExch(reinterpret_cast<ull*>(&a.released()[ring]), ull(k + 1));
      a.used();
    }
    sh.action = verdict;
  }
  __syncthreads();
  return sh.action != kStop;
}

template <class K, class VR, class VS, bool kWrite>
__global__ void __launch_bounds__(kThreads) stream_consume_kernel(Consume<K, VR, VS> a) {
  extern __shared__ __align__(16) unsigned char staging[];
  __shared__ uint32_t fill;
  __shared__ ull batch_at;
  __shared__ Shared sh;
  BlockEmitter<K, VR, VS> em;
  if (kWrite) {
    em.sink = a.sink;
    emitter_setup(em, staging, kStage, &fill, &batch_at);
    em.cursor = reinterpret_cast<ull*>(&a.w[kOutCursor]);
    em.base = 0;
    em.allowed = true;
    if (threadIdx.x == 0) fill = 0;
  }
  uint32_t scan = 0, idle = 0;  // thread 0's polling state
  uint64_t cancel_at = 0;
  if (threadIdx.x == 0) a.used();  // the idle clock starts now
  uint64_t matches = 0;
  for (;;) {
    __syncthreads();
    if (threadIdx.x == 0) sh.action = poll(a, scan, idle, cancel_at, &sh.ring, &sh.k);
    __syncthreads();
    const int action = sh.action;
    if (action == kActDone || action == kActStop) break;
    if (action == kActIdle) continue;
    if (!use_chunk<K, VR, VS, kWrite>(a, sh, em, matches)) break;
  }
  if (kWrite) {
    __syncthreads();
    em.flush();
  }
  const uint64_t total = block_sum(matches, sh.warp_sums);
  if (threadIdx.x == 0 && total) atomicAdd(reinterpret_cast<ull*>(&a.w[kCountWord]), ull(total));
}

template <class K, class V>
__global__ void clear_heads_kernel(const ChainedTableRef<K, V>* tables, uint32_t parts) {
  for (uint32_t q = 0; q < parts; ++q) {
    const ChainedTableRef<K, V> t = tables[q];
    for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < t.buckets; i += uint64_t(gridDim.x) * blockDim.x)
      t.heads[i] = ~0u;
  }
}

// --- host side ----------------------------------------------------------------------------------------

const char* kName = "stream_consume";

void need_device(const Buffer& b, uint64_t bytes, const char* what) {
  if (!bytes) return;
  if (!b || !b->ptr)
    throw RuntimeError(std::string(kName) + ": " + what + " has no memory (" + std::to_string(bytes) + " bytes needed)");
  if (b->space == MemSpace::Host)
    throw RuntimeError(std::string(kName) + ": " + what + " (buffer '" + b->tag +
                       "') is in pageable host memory, which the consumer kernel cannot reach: allocate it as device or "
                       "pinned memory (or all of the consumer's buffers in host memory for the CPU consumer)");
  if (b->bytes < bytes)
    throw RuntimeError(std::string(kName) + ": " + what + " needs " + std::to_string(bytes) + " bytes, but buffer '" +
                       b->tag + "' holds " + std::to_string(b->bytes));
}

// StreamProgress's words (on pages of their own) registered as mapped memory for as long as the
// kernel may run: it writes the consumed counts and reads the cancel word there.
class Registered {
 public:
  explicit Registered(StreamProgress& p) : p_(p.consumed_words()) {
    const cudaError_t e = cudaHostRegister(p_, p.words_bytes(), cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
      cudaGetLastError();  // registered by an earlier consumer that is still being torn down: use it
    } else {
      JL_CUDA_CHECK_CTX(e, "registering the consumer's progress words");
      ours_ = true;
    }
    void* d = nullptr;
    const cudaError_t m = cudaHostGetDevicePointer(&d, p_, 0);
    if (m != cudaSuccess) {
      if (ours_) cudaHostUnregister(p_);
      JL_CUDA_CHECK_CTX(m, "mapping the consumer's progress words");
    }
    device_ = static_cast<uint64_t*>(d);
  }
  ~Registered() {
    if (ours_) cudaHostUnregister(p_);
  }
  Registered(const Registered&) = delete;
  Registered& operator=(const Registered&) = delete;
  uint64_t* device() const { return device_; }

 private:
  void* p_;
  uint64_t* device_ = nullptr;
  bool ours_ = false;
};

template <class K, class VR, class VS>
ConsumeLaunch queue_typed(KernelContext& ctx, const StreamConsumeOp& op) {
  const size_t rings = size_t(op.sources) * op.parts;
  if (!op.progress || op.progress->rings() != rings)
    throw RuntimeError(std::string(kName) + ": needs a StreamProgress of " + std::to_string(rings) + " rings");
  if (op.r_chunks.size() != rings || op.s_chunks.size() != rings)
    throw RuntimeError(std::string(kName) + ": chunk counts for " + std::to_string(op.r_chunks.size()) + " / " +
                       std::to_string(op.s_chunks.size()) + " rings, expected " + std::to_string(rings));
  if (op.partition_ids.size() != op.parts || op.tables.size() != op.parts || op.workers.size() != op.parts)
    throw RuntimeError(std::string(kName) + ": partition ids, tables and workers must have one entry per local partition");
  if (op.slots == 0 || op.slot_rows == 0) throw RuntimeError(std::string(kName) + ": no ring slots");
  if (op.slot_rows >= (1ULL << 32)) throw RuntimeError(std::string(kName) + ": slot_rows must be below 2^32");
  const uint64_t need = std::max(chunk_slot_bytes(sizeof(K), sizeof(VR), op.slot_rows),
                                 chunk_slot_bytes(sizeof(K), sizeof(VS), op.slot_rows));
  if (op.slot_bytes < need)
    throw RuntimeError(std::string(kName) + ": slots of " + std::to_string(op.slot_bytes) + " bytes cannot hold " +
                       std::to_string(op.slot_rows) + " rows (" + std::to_string(need) + " bytes)");
  need_device(op.rings, uint64_t(rings) * op.slots * op.slot_bytes, "ring buffers");
  ConsumeLaunch launch;
  launch.nwords = kHeadWords + 2 * rings + 2 * size_t(op.parts);
  launch.d_words = ctx.scratch_array<uint64_t>(launch.nwords);
  JL_CUDA_CHECK(cudaMemsetAsync(launch.d_words, 0, launch.nwords * sizeof(uint64_t), ctx.stream()));
  if (rings == 0) return launch;  // nothing streams here

  std::vector<uint64_t> r_chunks(rings), all_chunks(rings), r_total(op.parts, 0), capacity(op.parts);
  for (size_t ring = 0; ring < rings; ++ring) {
    r_chunks[ring] = op.r_chunks[ring];
    all_chunks[ring] = op.r_chunks[ring] + op.s_chunks[ring];
    r_total[ring % op.parts] += op.r_chunks[ring];
  }
  std::vector<ChainedTableRef<K, VR>> tables;
  for (size_t q = 0; q < op.parts; ++q) {
    const HashTable& t = op.tables[q];
    const std::string which = "partition " + std::to_string(op.partition_ids[q]) + "'s table";
    if (t.kind != TableKind::Chained) throw RuntimeError(std::string(kName) + ": " + which + " is not chained");
    if (!t.slots || (t.slots & (t.slots - 1)))
      throw RuntimeError(std::string(kName) + ": " + which + " has " + std::to_string(t.slots) +
                         " buckets, not a power of two");
    capacity[q] = t.next ? t.next->bytes / sizeof(uint32_t) : 0;
    if (capacity[q] >= ~0u) throw RuntimeError(std::string(kName) + ": " + which + " exceeds 32-bit chain indices");
    need_device(t.heads, t.slots * sizeof(uint32_t), (which + " heads").c_str());
    need_device(t.next, capacity[q] * sizeof(uint32_t), (which + " chain").c_str());
    need_device(t.keys, capacity[q] * sizeof(K), (which + " keys").c_str());
    need_device(t.vals, capacity[q] * sizeof(VR), (which + " values").c_str());
    tables.push_back({data_of<uint32_t>(t.heads), data_of<uint32_t>(t.next), data_of<K>(t.keys), data_of<VR>(t.vals),
                      t.slots, t.hash_seed});
  }
  JoinSinkRef<K, VR, VS> sink;
  sink.mode = op.mode;
  if (op.mode == OutputMode::Direct) {
    need_device(op.out.keys, op.out.capacity * sizeof(K), "output keys");
    need_device(op.out.rvals, op.out.capacity * sizeof(VR), "output R values");
    need_device(op.out.svals, op.out.capacity * sizeof(VS), "output S values");
    sink.keys = data_of<K>(op.out.keys);
    sink.rvals = data_of<VR>(op.out.rvals);
    sink.svals = data_of<VS>(op.out.svals);
    sink.first = op.out_first;
    sink.capacity = op.out.capacity;
  } else if (op.mode != OutputMode::CountOnly) {
    throw RuntimeError(std::string(kName) + ": output mode must be Direct or CountOnly");
  }
  if (op.star) {
    check_star_probe(*op.star);
    if (sizeof(K) != 8 || sizeof(VS) != 8 || op.mode != OutputMode::CountOnly)
      throw RuntimeError(std::string(kName) + ": chained probes take 8-byte lineorder keys and values and output nothing");
    need_device(op.star->groups, uint64_t(op.star->query.groups) * 8, "groups");
  }

  // The grid: every block resident at once (a cooperative launch, which fails rather than waits
  // for blocks that cannot fit), and at most a quarter of what fits, so that another rank's
  // consumer sharing the GPU and the strategy's other kernels still run beside it.
  auto kernel = op.mode == OutputMode::Direct ? stream_consume_kernel<K, VR, VS, true> : stream_consume_kernel<K, VR, VS, false>;
  const size_t smem = op.mode == OutputMode::Direct ? emitter_smem<K, VR, VS>(kStage) : 0;
  int per_sm = 0;
  JL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, smem));
  const uint64_t fits = uint64_t(std::max(per_sm, 1)) * uint64_t(ctx.info().sm_count);
  uint64_t wanted = 0;
  for (uint32_t w : op.workers) wanted += std::max<uint32_t>(w, 1);
  const uint64_t grid = std::max<uint64_t>(1, std::min(wanted, std::max<uint64_t>(fits / 4, 1)));
  // Partition q takes the next max(1, workers[q] * grid / wanted) blocks, wrapping around the
  // grid (with more partitions than blocks a block serves several).
  std::vector<std::vector<uint32_t>> of_block(grid);
  uint64_t next = 0;
  for (uint32_t q = 0; q < op.parts; ++q) {
    const uint64_t share = std::max<uint64_t>(1, uint64_t(std::max<uint32_t>(op.workers[q], 1)) * grid / wanted);
    for (uint64_t i = 0; i < std::min(share, grid); ++i) of_block[(next + i) % grid].push_back(q);
    next += share;
  }
  std::vector<uint32_t> block_first{0}, block_parts;
  for (auto& v : of_block) {
    block_parts.insert(block_parts.end(), v.begin(), v.end());
    block_first.push_back(uint32_t(block_parts.size()));
  }

  auto reg = std::make_shared<Registered>(*op.progress);

  Consume<K, VR, VS> a{};
  a.rings = static_cast<const char*>(op.rings->ptr);
  a.sources = op.sources;
  a.parts = op.parts;
  a.slots = op.slots;
  a.epoch = op.epoch;
  a.slot_rows = op.slot_rows;
  a.slot_bytes = op.slot_bytes;
  a.vals_at = chunk_vals_offset(sizeof(K), op.slot_rows);
  a.r_chunks = ctx.upload(r_chunks);
  a.all_chunks = ctx.upload(all_chunks);
  a.r_total = ctx.upload(r_total);
  a.capacity = ctx.upload(capacity);
  a.partition_ids = ctx.upload(op.partition_ids);
  a.tables = ctx.upload(tables);
  a.block_first = ctx.upload(block_first);
  a.block_parts = ctx.upload(block_parts);
  a.w = launch.d_words;
  a.consumed = reg->device();
  a.cancel = reinterpret_cast<const int*>(reinterpret_cast<char*>(reg->device()) +
                                          (reinterpret_cast<char*>(op.progress->cancel_word()) -
                                           reinterpret_cast<char*>(op.progress->consumed_words())));
  a.sink = sink;
  a.star_groups = nullptr;
  if (op.star) {
    a.star_groups = data_of<uint64_t>(op.star->groups);
    a.star = op.star->query;
    const std::vector<ssb::DimTableRef> dims = dim_table_refs(*op.star);
    for (size_t i = 0; i < dims.size() && i < size_t(ssb::kMaxSteps); ++i) a.star_dims[i] = dims[i];
  }
  auto ns = [](double s) { return uint64_t(std::min(std::max(s, 0.0), 1e9) * 1e9); };
  a.chunk_timeout_ns = ns(op.chunk_timeout_s);
  a.idle_timeout_ns = ns(op.idle_timeout_s);

  clear_heads_kernel<K, VR><<<unsigned(ctx.info().sm_count) * 2, 256, 0, ctx.stream()>>>(a.tables, op.parts);
  JL_CUDA_LAUNCHED("clear_heads_kernel");
  void* args[] = {&a};
  JL_CUDA_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(kernel), dim3(unsigned(grid)), dim3(kThreads),
                                            args, smem, ctx.stream()));
  JL_CUDA_LAUNCHED("stream_consume_kernel");
  ctx.mark("stream_consume_kernel");
  launch.keep = std::move(reg);
  return launch;
}

std::string chunk_name(const StreamConsumeOp& op, uint64_t ring, uint64_t k) {
  const bool is_r = k < op.r_chunks[ring];
  const uint64_t number = is_r ? k : k - op.r_chunks[ring];
  return "chunk " + std::to_string(number) + " of " + (is_r ? "R" : "S") + " partition " +
         std::to_string(op.partition_ids[ring % op.parts]) + " from rank " + std::to_string(ring / op.parts) + " (ring " +
         std::to_string(ring) + ", slot " + std::to_string(k % op.slots) + ")";
}

}  // namespace

ConsumeLaunch queue_stream_consume(KernelContext& ctx, const StreamConsumeOp& op) {
  if (op.r_fmt.key_bytes != op.s_fmt.key_bytes)
    throw RuntimeError(std::string(kName) + ": R keys are " + std::to_string(op.r_fmt.key_bytes) + " bytes, S keys " +
                       std::to_string(op.s_fmt.key_bytes));
  ConsumeLaunch l;
  with_width(op.r_fmt.key_bytes, "stream_consume key", [&](auto k) {
    with_width(op.r_fmt.val_bytes, "stream_consume R value", [&](auto vr) {
      with_width(op.s_fmt.val_bytes, "stream_consume S value", [&](auto vs) {
        l = queue_typed<decltype(k), decltype(vr), decltype(vs)>(ctx, op);
      });
    });
  });
  return l;
}

void finish_stream_consume(const StreamConsumeOp& op, const uint64_t* w, OpResult& result) {
  const size_t rings = size_t(op.sources) * op.parts;
  const uint64_t* released = w + kHeadWords;
  const uint64_t* claimed = released + rings;
  const uint64_t* r_done = claimed + rings;
  const uint64_t ring = w[kErrRing], k = w[kErrChunk];
  auto named = [&] { return "gpj consumer: " + chunk_name(op, ring, k); };
  switch (w[kErrorWord]) {
    case kNoError:
      break;
    case kCorrupt:
      throw RuntimeError(named() + " failed its checksum for " + seconds_text(op.chunk_timeout_s) + " (header: " +
                         std::to_string(w[kErrRows]) + " rows, checksum " + std::to_string(w[kErrSum]) +
                         "; its bytes give " + std::to_string(w[kErrComputed]) + "): it was corrupted in flight");
    case kPlan:
      throw RuntimeError(named() + " carries partition " + std::to_string(w[kErrPartition]) + " of " +
                         (w[kErrRelation] == 0 ? "R" : "S") + ": the sender and the receiver disagree on the plan");
    case kTableFull: {
      const size_t q = ring % op.parts;
      const uint64_t cap = op.tables[q].next ? op.tables[q].next->bytes / sizeof(uint32_t) : 0;
      throw RuntimeError("gpj consumer: partition " + std::to_string(op.partition_ids[q]) + ": chained table full: " +
                         std::to_string(w[kErrExtra]) + " rows present + " + std::to_string(w[kErrRows]) +
                         " to insert > " + std::to_string(cap) + " rows of chain capacity (" + chunk_name(op, ring, k) +
                         "; its table was sized from the global histogram)");
    }
    case kCancelled: {
      uint64_t outstanding = 0;
      for (size_t r = 0; r < rings; ++r) outstanding += op.r_chunks[r] + op.s_chunks[r] - released[r];
      throw RuntimeError("gpj consumer: cancelled (the rank's strategy failed) with " + std::to_string(outstanding) +
                         " chunks outstanding");
    }
    case kIdle: {
      // The chunks it waited for: each ring's next unclaimed one that was usable (as the CPU consumer).
      std::vector<uint64_t> r_total(op.parts, 0);
      for (size_t r = 0; r < rings; ++r) r_total[r % op.parts] += op.r_chunks[r];
      std::string waiting;
      int shown = 0;
      for (size_t r = 0; r < rings && shown < 4; ++r) {
        const uint64_t c = claimed[r];
        if (c == op.r_chunks[r] + op.s_chunks[r]) continue;
        if (c >= op.r_chunks[r] && r_done[r % op.parts] < r_total[r % op.parts]) continue;
        waiting += (shown++ ? "; " : "") + chunk_name(op, r, c);
      }
      throw RuntimeError("gpj consumer: nothing arrived for " + seconds_text(op.idle_timeout_s) + " (waiting for " +
                         (waiting.empty() ? std::string("R chunks") : waiting) + "): a sender stalled or died");
    }
    default:
      throw RuntimeError("gpj consumer: the kernel reported unknown error " + std::to_string(w[kErrorWord]));
  }
  result.count = w[kCountWord];
  result.overflow = op.mode == OutputMode::Direct && op.out_first + result.count > op.out.capacity;
  for (size_t r = 0; r < rings; ++r)
    if (released[r] != op.r_chunks[r] + op.s_chunks[r])
      throw RuntimeError("gpj consumer: the kernel ended with " + std::to_string(released[r]) + " of " +
                         std::to_string(op.r_chunks[r] + op.s_chunks[r]) + " chunks of ring " + std::to_string(r) +
                         " used");
}

}  // namespace joinlab::cuda
