#include "kernels/cuda/sm_partition.hpp"

#include <cuda.h>  // the types of the green-context functions (called through the runtime's entry points)

#include "kernels/cuda/driver_entry.hpp"

namespace joinlab::cuda {

namespace {

// The CUDA version whose declarations (cuda.h) the calls use: CUdevResource's layout is versioned.
constexpr int kGreenVersion = CUDA_VERSION;

struct GreenApi {
  CUresult (*device_get)(CUdevice*, int) = driver_entry<decltype(device_get)>("cuDeviceGet");
  CUresult (*resource)(CUdevice, CUdevResource*, CUdevResourceType) =
      driver_entry<decltype(resource)>("cuDeviceGetDevResource", kGreenVersion);
  CUresult (*split)(CUdevResource*, unsigned*, const CUdevResource*, CUdevResource*, unsigned, unsigned) =
      driver_entry<decltype(split)>("cuDevSmResourceSplitByCount", kGreenVersion);
  CUresult (*describe)(CUdevResourceDesc*, CUdevResource*, unsigned) =
      driver_entry<decltype(describe)>("cuDevResourceGenerateDesc", kGreenVersion);
  CUresult (*create)(CUgreenCtx*, CUdevResourceDesc, CUdevice, unsigned) =
      driver_entry<decltype(create)>("cuGreenCtxCreate", kGreenVersion);
  CUresult (*stream)(CUstream*, CUgreenCtx, unsigned, int) =
      driver_entry<decltype(stream)>("cuGreenCtxStreamCreate", kGreenVersion);
  CUresult (*destroy)(CUgreenCtx) = driver_entry<decltype(destroy)>("cuGreenCtxDestroy", kGreenVersion);
  bool usable() const { return device_get && resource && split && describe && create && stream && destroy; }
};
const GreenApi& green() {
  static const GreenApi api;
  return api;
}

}  // namespace

std::unique_ptr<SmPartition> SmPartition::create(int device, int parts) {
  const GreenApi& g = green();
  CUdevice dev{};
  CUdevResource all{};
  if (parts < 1 || !g.usable() || g.device_get(&dev, device) != CUDA_SUCCESS ||
      g.resource(dev, &all, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS)
    return nullptr;
  const unsigned align = all.sm.smCoscheduledAlignment ? all.sm.smCoscheduledAlignment : 1;
  const unsigned each = all.sm.smCount / unsigned(parts) / align * align;
  if (each == 0 || each < all.sm.minSmPartitionSize) return nullptr;
  std::vector<CUdevResource> groups(static_cast<size_t>(parts));
  unsigned made = unsigned(parts);
  if (g.split(groups.data(), &made, &all, nullptr, 0, each) != CUDA_SUCCESS || made < unsigned(parts)) return nullptr;
  std::unique_ptr<SmPartition> p(new SmPartition);
  for (CUdevResource& r : groups) {
    CUdevResourceDesc desc{};
    CUgreenCtx ctx{};
    CUstream s{};
    if (g.describe(&desc, &r, 1) == CUDA_SUCCESS && g.create(&ctx, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM) == CUDA_SUCCESS)
      p->contexts_.push_back(ctx);
    if (!ctx || g.stream(&s, ctx, CU_STREAM_NON_BLOCKING, 0) != CUDA_SUCCESS) {
      for (cudaStream_t made_s : p->streams_) cudaStreamDestroy(made_s);
      p->streams_.clear();
      return nullptr;  // p's contexts go with it
    }
    p->streams_.push_back(s);
  }
  return p;
}

SmPartition::~SmPartition() {
  for (void* c : contexts_) green().destroy(static_cast<CUgreenCtx>(c));
}

}  // namespace joinlab::cuda
