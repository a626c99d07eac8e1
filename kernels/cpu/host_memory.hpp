// Host memory for CpuRank buffers and kernel scratch: cache-line aligned, and for large sizes
// 2 MiB aligned and advised as transparent huge pages (radix scatters touch thousands of
// pages at once; 4 KiB pages would make them TLB-bound). Large blocks are kept when freed and
// given to the next allocation of the same size (host_memory.cpp says why and how much).
#pragma once
#include <cstdint>
#include <new>

namespace joinlab::cpu {

void* host_alloc(uint64_t bytes);  // never null; throws std::bad_alloc
void host_free(void* p);
// Huge-page advised memory that bypasses the cache and counts toward no peak: for one-off
// buffers (a bandwidth measurement) that must go back to the system when freed.
void* host_map_once(uint64_t bytes);  // never null; throws std::bad_alloc
void host_unmap_once(void* p, uint64_t bytes);
// The bytes of the large blocks kept for reuse (memory the process can give back at once).
uint64_t host_cache_bytes();
// Large blocks mapped so far (each a cache miss): what a repeat that reuses its memory leaves unchanged.
uint64_t host_blocks_mapped();
// Touches every page so that later kernels do not pay page faults (like device memory, which
// is backed when allocated).
void prefault(void* p, uint64_t bytes, int threads);
// host_alloc, backed when allocated as pinned and device memory are (prefault on `threads`),
// except a large block reused from the cache that was backed already: memory pinned once stays
// pinned, and touching half a gigabyte of resident pages again took 4 ms per repeat.
void* host_alloc_resident(uint64_t bytes, int threads);  // never null; throws std::bad_alloc

// Memory a kernel needs for the duration of one call, kept per thread and reused by later
// calls on the same thread (a stream worker runs many operators; re-faulting fresh pages on
// every call would cost more than the pass itself). `slot` separates independent arrays.
void* thread_scratch(int slot, uint64_t bytes);
template <class T>
T* thread_scratch_array(int slot, uint64_t count) {
  return static_cast<T*>(thread_scratch(slot, count * sizeof(T)));
}

}  // namespace joinlab::cpu
