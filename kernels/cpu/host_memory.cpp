#include "kernels/cpu/host_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <vector>

namespace joinlab::cpu {

namespace {
constexpr uint64_t kHugePage = 2ULL << 20;
constexpr uint64_t kLargeAlloc = 4ULL << 20;  // from here on: huge-page aligned and advised
}  // namespace

void* host_alloc(uint64_t bytes) {
  if (bytes == 0) bytes = 1;
  const uint64_t align = bytes >= kLargeAlloc ? kHugePage : 64;
  const uint64_t rounded = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (!p) throw std::bad_alloc();
  if (bytes >= kLargeAlloc) madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

void host_free(void* p) { std::free(p); }

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
