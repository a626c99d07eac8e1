// The Star Schema Benchmark operators on the GPU: the generator and the chained probes written
// once in core/workload/ssb.hpp, one thread per row.
#include "kernels/cuda/device_common.cuh"

namespace joinlab::cuda {

namespace {

constexpr unsigned kThreads = 256;

// Lineorder from tpch_lineitem's rows: the key there is the row's o_orderkey, the value its row.
__global__ void lineorder_kernel(ssb::Scale scale, ssb::StarQuery q, uint64_t rows, uint64_t* keys, uint64_t* vals) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows; i += uint64_t(gridDim.x) * blockDim.x) {
    const ssb::LineorderRow lo = ssb::lineorder_row(scale, tpch::order_of_key(keys[i]), vals[i]);
    keys[i] = ssb::lineorder_key(q, lo);
    vals[i] = lo.revenue;
  }
}

__global__ void dimension_kernel(ssb::Scale scale, ssb::StarQuery q, ssb::Table table, uint64_t first, uint64_t rows,
                                 uint32_t* keys, uint32_t* vals) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows; i += uint64_t(gridDim.x) * blockDim.x) {
    keys[i] = uint32_t(first + i + 1);
    vals[i] = ssb::dimension_value(q, scale, table, first + i);
  }
}

struct StarDims {
  ssb::DimTableRef t[ssb::kMaxSteps];
};

__global__ void star_probe_kernel(ssb::StarQuery q, StarDims dims, const uint64_t* keys, const uint64_t* vals,
                                  uint64_t rows, uint64_t* groups, uint64_t* d_words) {
  uint64_t passed = 0;
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < rows; i += uint64_t(gridDim.x) * blockDim.x) {
    uint32_t group = 0;
    if (!ssb::star_probe(q, dims.t, keys[i], group)) continue;
    atomic_add(&groups[group], vals[i]);
    ++passed;
  }
  if (passed) atomic_add(&d_words[kCountWord], passed);
}

}  // namespace

void star_generate(KernelContext& ctx, const ssb::Scale& scale, const ssb::StarQuery& q, ssb::Table table,
                   const KeyGen& lineitems, uint64_t first_row, uint64_t rows, void* keys, void* vals) {
  if (!rows) return;
  const unsigned grid = grid_for(rows, kThreads, unsigned(ctx.info().sm_count) * 16);
  if (table == ssb::Table::Lineorder) {
    auto* k = static_cast<uint64_t*>(keys);
    auto* v = static_cast<uint64_t*>(vals);
    generate<uint64_t, uint64_t>(ctx, lineitems, 0, true, first_row, rows, k, v);
    lineorder_kernel<<<grid, kThreads, 0, ctx.stream()>>>(scale, q, rows, k, v);
    JL_CUDA_LAUNCHED("lineorder_kernel");
  } else {
    dimension_kernel<<<grid, kThreads, 0, ctx.stream()>>>(scale, q, table, first_row, rows, static_cast<uint32_t*>(keys),
                                                          static_cast<uint32_t*>(vals));
    JL_CUDA_LAUNCHED("dimension_kernel");
  }
}

void star_probe(KernelContext& ctx, const ssb::StarQuery& q, const std::vector<ssb::DimTableRef>& dims,
                const uint64_t* keys, const uint64_t* vals, uint64_t rows, uint64_t* groups, uint64_t* d_words) {
  if (!rows) return;
  StarDims d;
  for (size_t i = 0; i < dims.size() && i < size_t(ssb::kMaxSteps); ++i) d.t[i] = dims[i];
  star_probe_kernel<<<grid_for(rows, kThreads, unsigned(ctx.info().sm_count) * 16), kThreads, 0, ctx.stream()>>>(
      q, d, keys, vals, rows, groups, d_words);
  JL_CUDA_LAUNCHED("star_probe_kernel");
}

}  // namespace joinlab::cuda
