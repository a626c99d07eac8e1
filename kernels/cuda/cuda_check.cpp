#include "kernels/cuda/cuda_check.hpp"

#include <cstring>
#include <map>
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

}  // namespace joinlab::cuda
