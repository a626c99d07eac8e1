#include "kernels/cuda/cuda_check.hpp"

#include <cstring>
#include <map>
#include <set>
#include <tuple>
#include <mutex>
#include <utility>

namespace joinlab::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line,
                                   const std::string& context) {
  // Paths relative to the repository read better than the build machine's absolute ones.
  const char* rel = std::strstr(file, "kernels/cuda/");
  std::string msg = std::string("CUDA error: ") + call + " failed at " + (rel ? rel : file) + ":" +
                    std::to_string(line);
  if (!context.empty()) msg += " (" + context + ")";
  msg += ": " + std::string(cudaGetErrorString(err)) + " [" + cudaGetErrorName(err) + "]";
  throw RuntimeError(msg);
}

void raise_shared_memory_limit(const void* kernel, size_t bytes) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> limit;  // (kernel, device) -> bytes set
  int device = 0;
  JL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> g(mu);
  size_t& now = limit[{kernel, device}];
  if (bytes <= now) return;
  JL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  now = bytes;
}

// Set once per kernel and device: every operator launch asks again, and a cudaFuncSetAttribute
// call costs microseconds of host time the GPU may be waiting for.
void prefer_max_shared_carveout(const void* kernel) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;
  int device = 0;
  JL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> g(mu);
  if (!done.insert({kernel, device}).second) return;
  JL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                     int(cudaSharedmemCarveoutMaxShared)));
}

int blocks_per_sm(const void* kernel, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, size_t>, int> known;
  int device = 0;
  JL_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> g(mu);
  const auto key = std::make_tuple(kernel, device, threads, smem);
  if (auto it = known.find(key); it != known.end()) return it->second;
  int blocks = 0;
  JL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  return known[key] = blocks;
}

}  // namespace joinlab::cuda
