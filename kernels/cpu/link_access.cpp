// LinkAccessOp on CPU threads: the host copies granules between the two buffers in the same
// order and at the same positions as the GPU's kernel does across its link (link_access_granule).
// On the cpu backend both ends are host memory; this keeps the operator's contract (and tests it).
#include <cstring>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"

namespace joinlab::cpu {

void link_access(uint8_t* host, uint64_t host_bytes, uint8_t* device, uint64_t bytes, uint32_t granule,
                 bool random, LinkAccess access, int threads) {
  const uint64_t n = bytes / granule;
  const bool both = access == LinkAccess::Both;
  // Both: reads from the first half of `host`, writes to the second (each half whole granules).
  const uint64_t granules = (both ? host_bytes / 2 : host_bytes) / granule;
  if (n == 0 || granules == 0) return;
  uint8_t* write_base = both ? host + granules * granule : host;
  const uint8_t* write_src = both ? device + bytes : device;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < int64_t(n); ++i) {
    const uint64_t at = link_access_granule(uint64_t(i), granules, random) * granule;
    if (access != LinkAccess::Write) std::memcpy(device + uint64_t(i) * granule, host + at, granule);
    if (access != LinkAccess::Read) std::memcpy(write_base + at, write_src + uint64_t(i) * granule, granule);
  }
}

}  // namespace joinlab::cpu
