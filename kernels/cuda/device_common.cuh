// Device helpers shared by the kernels: empty keys, typed atomics, launch sizing, and the
// block-level emitter every join kernel writes its output rows through.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/kernels.hpp"

namespace joinlab::cuda {

using ull = unsigned long long;

template <class K>
__host__ __device__ __forceinline__ constexpr K empty_key() {
  return K(~K(0));
}

__device__ __forceinline__ uint32_t atomic_cas(uint32_t* a, uint32_t expected, uint32_t v) {
  return atomicCAS(a, expected, v);
}
__device__ __forceinline__ uint64_t atomic_cas(uint64_t* a, uint64_t expected, uint64_t v) {
  return atomicCAS(reinterpret_cast<ull*>(a), ull(expected), ull(v));
}
__device__ __forceinline__ uint64_t atomic_add(uint64_t* a, uint64_t v) {
  return atomicAdd(reinterpret_cast<ull*>(a), ull(v));
}

inline unsigned grid_for(uint64_t items, unsigned per_block, unsigned max_blocks) {
  uint64_t g = (items + per_block - 1) / per_block;
  return unsigned(std::max<uint64_t>(1, std::min<uint64_t>(g, max_blocks)));
}

// Raises a kernel's dynamic shared memory limit when it (with its static shared memory) may
// need more than the default 48 KB.
// The limit is an attribute of the kernel on the device, shared by every rank (thread) using
// that GPU, so it only ever grows: one rank lowering it between another's set and launch would
// fail that launch with "invalid argument".
void raise_shared_memory_limit(const void* kernel, size_t bytes);  // cuda_check.cpp
template <class Kernel>
void allow_shared_memory(Kernel kernel, size_t bytes) {
  if (bytes > 32 * 1024) raise_shared_memory_limit(reinterpret_cast<const void*>(kernel), bytes);
}

// Asks for the largest shared-memory carveout, so that several blocks of a kernel with a large
// shared-memory footprint fit on one SM.
void prefer_max_shared_carveout(const void* kernel);  // cuda_check.cpp
// Resident blocks per SM of `kernel` at this block size and dynamic shared memory (cached).
int blocks_per_sm(const void* kernel, int threads, size_t smem);  // cuda_check.cpp
template <class Kernel>
void prefer_shared_memory(Kernel kernel) {
  prefer_max_shared_carveout(reinterpret_cast<const void*>(kernel));
}

// Sum of a 64-bit value over the block; the result is valid in thread 0. `scratch` holds one
// word per warp.
__device__ __forceinline__ uint64_t block_sum(uint64_t v, uint64_t* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  uint64_t total = 0;
  if (threadIdx.x == 0)
    for (int w = 0; w < int(blockDim.x + 31) / 32; ++w) total += scratch[w];
  return total;
}

// Output rows of one block, staged in shared memory and written in coalesced batches. A batch's
// position comes from the global cursor (Direct: one atomic per batch, rui2017's direct output
// buffer with block-sized pages, no holes), or from a block-local cursor above the block's exact
// base (second pass of count-then-write). A round that emits more rows than the staging area
// holds (duplicate keys) writes the excess row by row, still at reserved positions.
template <class K, class VR, class VS>
struct BlockEmitter {
  JoinSinkRef<K, VR, VS> sink;
  K* sk;
  VR* sr;
  VS* ss;
  uint32_t cap;
  uint32_t* fill;   // shared
  ull* batch_at;    // shared
  ull* cursor;      // global (Direct) or shared (exact)
  uint64_t base;    // exact: the block's first row; Direct: 0
  bool allowed;     // exact: false when the whole output overflows (nothing is written)

  __device__ uint64_t reserve(uint32_t n) { return base + atomicAdd(cursor, ull(n)); }
  __device__ void write(uint64_t pos, K k, VR r, VS s) {
    const uint64_t at = sink.first + pos;
    if (allowed && at < sink.capacity) {
      sink.keys[at] = k;
      sink.rvals[at] = r;
      sink.svals[at] = s;
    }
  }
  // May be called by any subset of the warp's lanes: the lanes emitting together take their
  // slots with one shared atomic (warp-aggregated), not one each on the same counter.
  __device__ void emit(K k, VR r, VS s) {
    const unsigned active = __activemask();
    const int lane = threadIdx.x & 31, leader = __ffs(active) - 1;
    uint32_t first = 0;
    if (lane == leader) first = atomicAdd(fill, uint32_t(__popc(active)));
    first = __shfl_sync(active, first, leader);
    const uint32_t slot = first + uint32_t(__popc(active & ((1u << lane) - 1)));
    if (slot < cap) {
      sk[slot] = k;
      sr[slot] = r;
      ss[slot] = s;
    } else {
      write(reserve(1), k, r, s);
    }
  }
  // Called by every thread after a round that emitted at most `round_rows` rows per block
  // (normally): flushes when the next round might not fit.
  __device__ void end_round(uint32_t round_rows) {
    __syncthreads();
    if (*fill + round_rows > cap) flush();
  }
  __device__ void flush() {  // every thread; the block is synchronized on entry
    const uint32_t m = min(*fill, cap);
    if (threadIdx.x == 0) *batch_at = m ? reserve(m) : 0;
    __syncthreads();
    const uint64_t at = *batch_at;
    for (uint32_t i = threadIdx.x; i < m; i += blockDim.x) write(at + i, sk[i], sr[i], ss[i]);
    __syncthreads();
    if (threadIdx.x == 0) *fill = 0;
    __syncthreads();
  }
};

// Carves the staging area out of shared memory at `p` (aligned to 16 bytes).
template <class K, class VR, class VS>
__device__ void emitter_setup(BlockEmitter<K, VR, VS>& e, unsigned char* p, uint32_t cap,
                              uint32_t* fill, ull* batch_at) {
  e.cap = cap;
  e.sk = reinterpret_cast<K*>(p);
  p += ((size_t(cap) * sizeof(K) + 15) / 16) * 16;
  e.sr = reinterpret_cast<VR*>(p);
  p += ((size_t(cap) * sizeof(VR) + 15) / 16) * 16;
  e.ss = reinterpret_cast<VS*>(p);
  e.fill = fill;
  e.batch_at = batch_at;
}
// Shared memory bytes of an emitter's staging area of `cap` rows.
template <class K, class VR, class VS>
constexpr size_t emitter_smem(uint32_t cap) {
  return ((size_t(cap) * sizeof(K) + 15) / 16) * 16 + ((size_t(cap) * sizeof(VR) + 15) / 16) * 16 +
         size_t(cap) * sizeof(VS);
}

}  // namespace joinlab::cuda
