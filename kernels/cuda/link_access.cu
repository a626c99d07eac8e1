// LinkAccessOp on the GPU: the link microbenchmark. A kernel reads or writes pinned, mapped host
// memory itself (zero-copy), as triton's partitioners and second pass do, in accesses of
// `granule` bytes at the positions link_access_granule gives (core/exec/ops.hpp). Each thread
// moves 16 bytes at a time in a grid-stride loop, so a warp covers 512 consecutive bytes: one
// granule's bytes go out as coalesced 16-byte accesses, and granules under 512 bytes are as many
// distinct positions per warp instruction. Both directions at once: each thread reads a word
// and writes another (reads from host into device[0, bytes), writes from device[bytes, 2 bytes)).
#include "kernels/cuda/device_common.cuh"

namespace joinlab::cuda {

namespace {

constexpr int kLaThreads = 256;

__global__ void __launch_bounds__(kLaThreads)
    link_access_kernel(const uint4* read_base, uint4* read_dst, const uint4* write_src, uint4* write_base,
                       uint64_t granules, uint64_t words, uint32_t granule_words, uint32_t granule_shift,
                       bool random) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t w = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; w < words; w += stride) {
    const uint64_t i = w >> granule_shift;  // the access (granule) this word belongs to
    const uint64_t at = link_access_granule(i, granules, random) * granule_words + (w & (granule_words - 1));
    if (read_dst) read_dst[w] = read_base[at];
    if (write_src) write_base[at] = write_src[w];
  }
}

}  // namespace

void link_access(KernelContext& ctx, void* host, uint64_t host_bytes, void* device, uint64_t bytes,
                 uint32_t granule, bool random, LinkAccess access) {
  const uint64_t words = bytes / 16;
  const bool both = access == LinkAccess::Both;
  const uint64_t granules = (both ? host_bytes / 2 : host_bytes) / granule;
  if (words == 0 || granules == 0) return;
  const uint32_t granule_words = granule / 16;
  uint32_t shift = 0;
  while ((1u << shift) < granule_words) ++shift;
  uint4* h = static_cast<uint4*>(host);
  uint4* d = static_cast<uint4*>(device);
  uint4* read_dst = access == LinkAccess::Write ? nullptr : d;
  const uint4* write_src = access == LinkAccess::Read ? nullptr : both ? d + words : d;
  uint4* write_base = both ? h + granules * granule_words : h;
  // Enough warps in flight to cover the link's latency with small accesses: 8 blocks per SM.
  const uint64_t grid = std::min<uint64_t>((words + kLaThreads - 1) / kLaThreads,
                                           uint64_t(8) * uint64_t(std::max(ctx.info().sm_count, 1)));
  ctx.mark("link_access");
  link_access_kernel<<<uint32_t(grid), kLaThreads, 0, ctx.stream()>>>(
      h, read_dst, write_src, write_base, granules, words, granule_words, shift, random);
  JL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace joinlab::cuda
