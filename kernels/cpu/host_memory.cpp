#include "kernels/cpu/host_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <list>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace joinlab::cpu {

namespace {
constexpr uint64_t kHugePage = 2ULL << 20;
constexpr uint64_t kLargeAlloc = 4ULL << 20;  // from here on: mapped, huge-page aligned and advised, cached

// Bytes (or an address) rounded up to whole huge pages.
uint64_t huge_pages_of(uint64_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

// A huge-page aligned mapping: map one huge page more and unmap the misaligned ends.
void* map_huge(uint64_t bytes) {
  void* raw = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = huge_pages_of(start);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t end = start + bytes + kHugePage;
  if (end > aligned + bytes) munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
  return reinterpret_cast<void*>(aligned);
}

// Large blocks are mapped by us and kept when freed, for the next allocation of the same
// rounded size: a run's buffers recur with the same sizes in every repeat, and re-faulting
// gigabytes of fresh pages (the kernel zeroes each one) would cost more than the passes that
// write them, and more in some repeats than in others (glibc's mmap threshold moves as blocks
// are freed). Live and cached large memory together stay within a quarter above the largest
// amount ever live at once; a miss evicts the least recently freed blocks first. The quarter is
// for buffers that are never live together but recur in every repeat: crj's send buffers are
// freed before its local join's partitioned copy and output are made, so with the cache held
// to the peak itself each repeat evicted and faulted 1.3 GB anew at 96Mi rows per rank (2x
// H200 host, vmstat thp_fault_alloc; 0 for phj, whose buffers nest).
class LargeBlocks {
 public:
  // `resident`: whether every page of the block was touched before (a cached block that was
  // prefaulted when it was given out earlier).
  void* get(uint64_t rounded, bool* resident) {
    std::lock_guard<std::mutex> g(mu_);
    *resident = false;
    for (auto it = cached_.begin(); it != cached_.end(); ++it)
      if (it->bytes == rounded) {
        void* p = it->ptr;
        *resident = it->resident;
        cached_bytes_ -= rounded;
        cached_.erase(it);
        take(p, rounded, *resident);
        return p;
      }
    // A miss: what the cache may keep shrinks by the new block.
    while (!cached_.empty() && live_bytes_ + rounded + cached_bytes_ > peak_bytes_ + peak_bytes_ / 4) evict_oldest();
    void* p = map_huge(rounded);
    ++mapped_;
    if (!p && !cached_.empty()) {  // out of address space or memory: give back everything kept
      while (!cached_.empty()) evict_oldest();
      p = map_huge(rounded);
    }
    if (!p) return nullptr;
    take(p, rounded, false);
    return p;
  }
  bool put(void* p) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    const Block b = it->second;
    live_.erase(it);
    live_bytes_ -= b.bytes;
    cached_.push_back(b);
    cached_bytes_ += b.bytes;
    return true;
  }
  // Every page of live block p is backed now; false when p is not a large block.
  bool mark_resident(void* p) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    it->second.resident = true;
    return true;
  }
  uint64_t cached_bytes() {
    std::lock_guard<std::mutex> g(mu_);
    return cached_bytes_;
  }
  uint64_t mapped() {
    std::lock_guard<std::mutex> g(mu_);
    return mapped_;
  }

 private:
  struct Block {
    void* ptr;
    uint64_t bytes;
    bool resident;
  };
  void take(void* p, uint64_t bytes, bool resident) {
    live_.emplace(p, Block{p, bytes, resident});
    live_bytes_ += bytes;
    peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  }
  void evict_oldest() {
    munmap(cached_.front().ptr, cached_.front().bytes);
    cached_bytes_ -= cached_.front().bytes;
    cached_.pop_front();
  }

  std::mutex mu_;
  std::unordered_map<void*, Block> live_;
  std::list<Block> cached_;  // oldest first
  uint64_t live_bytes_ = 0, cached_bytes_ = 0, peak_bytes_ = 0, mapped_ = 0;
};

LargeBlocks& large_blocks() {
  static auto* blocks = new LargeBlocks;  // never destroyed: buffers may outlive static destruction
  return *blocks;
}
}  // namespace

namespace {
void* alloc(uint64_t bytes, bool* resident) {
  *resident = false;
  if (bytes >= kLargeAlloc) {
    void* p = large_blocks().get(huge_pages_of(bytes), resident);
    if (!p) throw std::bad_alloc();
    return p;
  }
  if (bytes == 0) bytes = 1;
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* host_alloc(uint64_t bytes) {
  bool resident;
  return alloc(bytes, &resident);
}

void* host_alloc_resident(uint64_t bytes, int threads) {
  bool resident;
  void* p = alloc(bytes, &resident);
  if (!resident) {
    prefault(p, bytes, threads);
    large_blocks().mark_resident(p);
  }
  return p;
}

void host_free(void* p) {
  if (p && !large_blocks().put(p)) std::free(p);
}

void* host_map_once(uint64_t bytes) {
  void* p = map_huge(huge_pages_of(bytes));
  if (!p) throw std::bad_alloc();
  return p;
}

void host_unmap_once(void* p, uint64_t bytes) { munmap(p, huge_pages_of(bytes)); }

uint64_t host_cache_bytes() { return large_blocks().cached_bytes(); }
uint64_t host_blocks_mapped() { return large_blocks().mapped(); }

void prefault(void* p, uint64_t bytes, int threads) {
  const int64_t page = 4096;
  auto* base = static_cast<volatile char*>(p);
  const int64_t pages = int64_t((bytes + page - 1) / page);
#pragma omp parallel for num_threads(threads) schedule(static) if (pages > 1024)
  for (int64_t i = 0; i < pages; ++i) base[i * page] = 0;
}

namespace {
struct ScratchSlot {
  void* ptr = nullptr;
  uint64_t bytes = 0;
};
struct ThreadScratch {
  std::vector<ScratchSlot> slots;
  ~ThreadScratch() {
    for (auto& s : slots) host_free(s.ptr);
  }
};
thread_local ThreadScratch tls_scratch;
}  // namespace

void* thread_scratch(int slot, uint64_t bytes) {
  auto& slots = tls_scratch.slots;
  if (slots.size() <= size_t(slot)) slots.resize(size_t(slot) + 1);
  ScratchSlot& s = slots[size_t(slot)];
  if (s.bytes < bytes || !s.ptr) {
    host_free(s.ptr);
    s.ptr = nullptr;
    uint64_t want = bytes + bytes / 4;  // headroom so slowly growing inputs do not realloc each call
    s.ptr = host_alloc(want);
    s.bytes = want;
  }
  return s.ptr;
}

}  // namespace joinlab::cpu
