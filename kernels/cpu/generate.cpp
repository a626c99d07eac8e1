// Workload generation on the CPU: the same position-addressable KeyGen and payload functions the
// CUDA kernels and the verification use, evaluated in parallel over rows.
#include <algorithm>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"

namespace joinlab::cpu {

template <class K, class V>
void generate(const KeyGen& gen, uint64_t rel_seed, bool value_is_rowid, uint64_t first_row,
              uint64_t rows, K* keys, V* vals, int threads) {
  // One contiguous block per thread: tpch_lineitem rows are made in order from the block's start.
#pragma omp parallel num_threads(team_for(rows, threads, 4096))
  {
    const Span mine = split(rows, uint64_t(omp_get_num_threads()), uint64_t(omp_get_thread_num()));
    gen.for_each_key(first_row + mine.begin, first_row + mine.end, [&](uint64_t row, uint64_t key) {
      const uint64_t i = row - first_row;
      keys[i] = K(key);
      vals[i] = V(value_is_rowid ? row : payload_value(rel_seed, 0, row, sizeof(V)));
    });
  }
}

template <class V>
void generate_payload(uint64_t rel_seed, int column, uint64_t first_row, uint64_t rows, V* out,
                      int threads) {
  const int64_t n = int64_t(rows);
#pragma omp parallel for num_threads(team_for(rows, threads, 4096)) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = V(payload_value(rel_seed, column, first_row + uint64_t(i), sizeof(V)));
}

#define JL_INSTANTIATE_GENERATE(K, V) \
  template void generate<K, V>(const KeyGen&, uint64_t, bool, uint64_t, uint64_t, K*, V*, int);
JL_FOR_EACH_KV(JL_INSTANTIATE_GENERATE)
template void generate_payload<uint32_t>(uint64_t, int, uint64_t, uint64_t, uint32_t*, int);
template void generate_payload<uint64_t>(uint64_t, int, uint64_t, uint64_t, uint64_t*, int);

}  // namespace joinlab::cpu
