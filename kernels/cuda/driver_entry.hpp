// Driver API functions from the driver the runtime loaded (no link-time dependency on libcuda,
// which machines without a GPU lack).
#pragma once
#include <cuda_runtime.h>

namespace joinlab::cuda {

// `name` as the driver of CUDA `version` (12000: 12.0) defines it; null where the driver has none.
template <class Fn>
Fn driver_entry(const char* name, int version = 12000) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<Fn>(p);
}

}  // namespace joinlab::cuda
