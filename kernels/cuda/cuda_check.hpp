// Every CUDA runtime call and kernel launch goes through these macros: a failure throws
// RuntimeError naming the call (as written in the source), the file and line, and CUDA's text.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "core/common/error.hpp"

namespace joinlab::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line,
                                   const std::string& context = "");

}  // namespace joinlab::cuda

#define JL_CUDA_CHECK(call)                                                                   \
  do {                                                                                        \
    cudaError_t jl_cuda_err_ = (call);                                                        \
    if (jl_cuda_err_ != cudaSuccess)                                                          \
      ::joinlab::cuda::throw_cuda_error(jl_cuda_err_, #call, __FILE__, __LINE__);             \
  } while (0)

// The same with a description of what was being done (e.g. "completing probe on stream 0").
#define JL_CUDA_CHECK_CTX(call, context)                                                      \
  do {                                                                                        \
    cudaError_t jl_cuda_err_ = (call);                                                        \
    if (jl_cuda_err_ != cudaSuccess)                                                          \
      ::joinlab::cuda::throw_cuda_error(jl_cuda_err_, #call, __FILE__, __LINE__, (context));  \
  } while (0)

// After `kernel<<<...>>>(...)`: configuration errors are reported by cudaGetLastError; errors
// while the kernel runs surface at the next synchronizing call, which is checked too.
#define JL_CUDA_LAUNCHED(kernel_name)                                                         \
  do {                                                                                        \
    cudaError_t jl_cuda_err_ = cudaGetLastError();                                           \
    if (jl_cuda_err_ != cudaSuccess)                                                          \
      ::joinlab::cuda::throw_cuda_error(jl_cuda_err_, "launch of kernel " kernel_name,        \
                                        __FILE__, __LINE__);                                  \
  } while (0)
