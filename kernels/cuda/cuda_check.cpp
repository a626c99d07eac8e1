#include "kernels/cuda/cuda_check.hpp"

#include <cstring>

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

}  // namespace joinlab::cuda
