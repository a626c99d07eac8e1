// Streams whose kernels run on disjoint, equal shares of a device's SMs: CUDA green contexts,
// one per share, each with a stream (through the driver's entry points, CUDA 12.4 and later).
// triton's two join lanes run on them (lane_sms = split), as lutz2022 splits the SMs between
// its two streams.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <vector>

namespace joinlab::cuda {

class SmPartition {
 public:
  // `parts` shares of the device's SMs, each the same number (a multiple of the device's
  // co-scheduling alignment); null where the driver or the device cannot split it so.
  static std::unique_ptr<SmPartition> create(int device, int parts);
  ~SmPartition();  // the green contexts (their streams are the owner's to destroy first)
  SmPartition(const SmPartition&) = delete;
  SmPartition& operator=(const SmPartition&) = delete;

  const std::vector<cudaStream_t>& streams() const { return streams_; }

 private:
  SmPartition() = default;
  std::vector<void*> contexts_;  // CUgreenCtx
  std::vector<cudaStream_t> streams_;
};

}  // namespace joinlab::cuda
