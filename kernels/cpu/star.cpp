// The Star Schema Benchmark operators on the CPU: the generator and the chained probes written
// once in core/workload/ssb.hpp, evaluated over rows in parallel.
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"

namespace joinlab::cpu {

void star_generate(const ssb::Scale& scale, const ssb::StarQuery& q, ssb::Table table,
                   const tpch::LineitemIndex& lineitems, uint64_t first_row, uint64_t rows, void* keys, void* vals,
                   int threads) {
  // One contiguous block per thread: lineorder rows follow their order from the block's start.
#pragma omp parallel num_threads(team_for(rows, threads, 4096))
  {
    const Span mine = split(rows, uint64_t(omp_get_num_threads()), uint64_t(omp_get_thread_num()));
    if (table == ssb::Table::Lineorder) {
      auto* k = static_cast<uint64_t*>(keys);
      auto* v = static_cast<uint64_t*>(vals);
      if (mine.size()) {
        tpch::LineitemCursor c = lineitems.cursor(first_row + mine.begin);
        for (uint64_t i = mine.begin; i < mine.end; ++i, c.next()) {
          const ssb::LineorderRow lo = ssb::lineorder_row(scale, c.order, first_row + i);
          k[i] = ssb::lineorder_key(q, lo);
          v[i] = lo.revenue;
        }
      }
    } else {
      auto* k = static_cast<uint32_t*>(keys);
      auto* v = static_cast<uint32_t*>(vals);
      for (uint64_t i = mine.begin; i < mine.end; ++i) {
        k[i] = uint32_t(first_row + i + 1);
        v[i] = ssb::dimension_value(q, scale, table, first_row + i);
      }
    }
  }
}

uint64_t star_probe(const ssb::StarQuery& q, const ssb::DimTableRef* dims, const uint64_t* keys,
                    const uint64_t* vals, uint64_t rows, uint64_t* groups, int threads) {
  const int team = team_for(rows, threads, 4096);
  std::vector<std::vector<uint64_t>> local(size_t(team), std::vector<uint64_t>(q.groups, 0));
  uint64_t passed = 0;
#pragma omp parallel num_threads(team) reduction(+ : passed)
  {
    std::vector<uint64_t>& mine = local[size_t(omp_get_thread_num())];
    const Span span = split(rows, uint64_t(omp_get_num_threads()), uint64_t(omp_get_thread_num()));
    for (uint64_t i = span.begin; i < span.end; ++i) {
      uint32_t group = 0;
      if (!ssb::star_probe(q, dims, keys[i], group)) continue;
      mine[group] += vals[i];
      ++passed;
    }
  }
  for (const auto& l : local)
    for (uint32_t g = 0; g < q.groups; ++g) groups[g] += l[g];
  return passed;
}

}  // namespace joinlab::cpu
