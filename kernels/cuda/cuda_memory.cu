// Process-wide caches of device blocks and pinned host blocks. cudaMalloc and cudaHostAlloc
// cost milliseconds per gigabyte (pinning 48 GiB takes seconds), so buffers freed by a run are
// kept for the next one; a cudaMalloc that fails first gives the cache back to the driver.
#include <map>
#include <mutex>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_rank.hpp"

namespace joinlab::cuda {

namespace {
struct BlockCache {
  std::mutex mu;
  std::map<int, std::multimap<uint64_t, void*>> free;  // device (or -1 = pinned) -> size -> blocks
  std::map<int, uint64_t> cached;
};
BlockCache& cache() {
  static BlockCache* c = new BlockCache;  // never destroyed: the driver may be gone at exit
  return *c;
}
void* take(int key, uint64_t bytes) {
  BlockCache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  auto& m = c.free[key];
  auto it = m.find(bytes);
  if (it == m.end()) return nullptr;
  void* p = it->second;
  m.erase(it);
  c.cached[key] -= bytes;
  return p;
}
void give(int key, void* p, uint64_t bytes) {
  BlockCache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  c.free[key].emplace(bytes, p);
  c.cached[key] += bytes;
}
// Frees every cached block of `key` (device blocks with cudaFree, pinned with cudaFreeHost).
void drop_all(int key) {
  BlockCache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  for (auto& [bytes, p] : c.free[key]) {
    if (key >= 0) cudaFree(p); else cudaFreeHost(p);
  }
  c.free[key].clear();
  c.cached[key] = 0;
}
constexpr int kPinnedKey = -1;
}  // namespace

uint64_t device_block_round(uint64_t bytes) {
  const uint64_t unit = bytes >= (64ull << 20) ? (2ull << 20) : 256;
  return std::max<uint64_t>(unit, (bytes + unit - 1) / unit * unit);
}

void* device_block_get(int device, uint64_t bytes) {
  if (void* p = take(device, bytes)) return p;
  void* p = nullptr;
  const std::string what = std::to_string(bytes) + " bytes on GPU " + std::to_string(device);
  if (cudaMalloc(&p, bytes) == cudaSuccess) return p;
  cudaGetLastError();  // out of memory is not sticky: give cached memory back and retry once
  drop_all(device);
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) cudaMemPoolTrimTo(pool, 0);
  JL_CUDA_CHECK_CTX(cudaMalloc(&p, bytes), what);
  return p;
}

void device_block_put(int device, void* p, uint64_t bytes) { give(device, p, bytes); }

void device_block_release(int device) { drop_all(device); }

uint64_t device_block_cached(int device) {
  BlockCache& c = cache();
  std::lock_guard<std::mutex> g(c.mu);
  return c.cached[device];
}

uint64_t pinned_block_cached() { return device_block_cached(kPinnedKey); }

void* pinned_block_get(uint64_t bytes) {
  if (void* p = take(kPinnedKey, bytes)) return p;
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped) == cudaSuccess) return p;
  cudaGetLastError();
  drop_all(kPinnedKey);
  JL_CUDA_CHECK_CTX(cudaHostAlloc(&p, bytes, cudaHostAllocPortable | cudaHostAllocMapped),
                    std::to_string(bytes) + " pinned host bytes");
  return p;
}

void pinned_block_put(void* p, uint64_t bytes) { give(kPinnedKey, p, bytes); }

}  // namespace joinlab::cuda
