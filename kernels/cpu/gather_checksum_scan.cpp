// Late materialization (gather), the result digest, prefix sums and bulk copies.
#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/verify/checksum.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"

namespace joinlab::cpu {

namespace {
constexpr uint64_t kParallelCopyBytes = 1u << 20;
inline uint64_t load_width(const void* data, uint8_t bytes, uint64_t i) {
  return bytes == 4 ? static_cast<const uint32_t*>(data)[i] : static_cast<const uint64_t*>(data)[i];
}
}  // namespace

template <class I, class C>
void gather(const I* ids, const C* column, uint64_t column_rows, uint64_t base_row, uint64_t rows,
            C* out, int threads) {
  std::atomic<uint64_t> first_bad{~0ULL};
  const int64_t n = int64_t(rows);
#pragma omp parallel for num_threads(team_for(rows, threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t at = uint64_t(ids[i]) - base_row;  // ids below base_row wrap to huge
    if (at < column_rows) {
      out[i] = column[at];
    } else {
      uint64_t seen = first_bad.load(std::memory_order_relaxed);
      while (uint64_t(i) < seen && !first_bad.compare_exchange_weak(seen, uint64_t(i))) {
      }
    }
  }
  const uint64_t bad = first_bad.load();
  if (bad != ~0ULL)
    throw std::out_of_range("gather: row id " + std::to_string(uint64_t(ids[bad])) + " at position " +
                            std::to_string(bad) + " is outside the column's rows [" +
                            std::to_string(base_row) + ", " + std::to_string(base_row + column_rows) + ")");
}

namespace {

// The common case, one R and one S value column: a loop the compiler vectorizes. With AVX-512DQ
// (64-bit vector multiplies) the digest's multiply chains run 8 rows at once, ~4x the scalar
// rate; other CPUs take the scalar build of the same loop.
template <class K, class A, class B>
inline uint64_t digest_two_columns(const K* k, const A* a, const B* b, uint64_t n) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i < n; ++i) sum += digest_add(digest_add(digest_begin(k[i]), a[i], 0), b[i], 1);
  return sum;
}
#if defined(__x86_64__)
template <class K, class A, class B>
__attribute__((target("avx512f,avx512dq,avx512vl,avx2,bmi2"))) uint64_t digest_two_columns_avx512(
    const K* k, const A* a, const B* b, uint64_t n) {
  return digest_two_columns(k, a, b, n);
}
bool has_avx512dq() {
  static const bool yes = __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return yes;
}
#endif

template <class K, class A, class B>
uint64_t checksum_two_columns(const K* k, const A* a, const B* b, uint64_t rows, int threads) {
  uint64_t sum = 0;
  const int team = team_for(rows, threads, 1u << 15);
#pragma omp parallel num_threads(team) reduction(+ : sum)
  {
    const Span mine = split(rows, uint64_t(omp_get_num_threads()), uint64_t(omp_get_thread_num()));
    const K* kk = k + mine.begin;
    const A* aa = a + mine.begin;
    const B* bb = b + mine.begin;
#if defined(__x86_64__)
    if (has_avx512dq())
      sum += digest_two_columns_avx512(kk, aa, bb, mine.size());
    else
#endif
      sum += digest_two_columns(kk, aa, bb, mine.size());
  }
  return sum;
}

template <class F>
uint64_t with_width(const ColumnRef& c, uint64_t first, F&& f) {
  return c.bytes == 4 ? f(static_cast<const uint32_t*>(c.data) + first)
                      : f(static_cast<const uint64_t*>(c.data) + first);
}

}  // namespace

uint64_t checksum(ColumnRef keys, const std::vector<ColumnRef>& columns, uint64_t first,
                  uint64_t rows, int threads) {
  if (columns.size() == 2)
    return with_width(keys, first, [&](auto k) {
      return with_width(columns[0], first, [&](auto a) {
        return with_width(columns[1], first, [&](auto b) { return checksum_two_columns(k, a, b, rows, threads); });
      });
    });
  uint64_t sum = 0;
  const int64_t n = int64_t(rows);
  const size_t ncols = columns.size();
#pragma omp parallel for num_threads(team_for(rows, threads, 4096)) schedule(static) reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t row = first + uint64_t(i);
    uint64_t h = digest_begin(load_width(keys.data, keys.bytes, row));
    for (size_t c = 0; c < ncols; ++c) h = digest_add(h, load_width(columns[c].data, columns[c].bytes, row), int(c));
    sum += h;
  }
  return sum;
}

void exclusive_scan(const uint64_t* in, uint64_t* out, uint64_t n, int threads) {
  const int team = team_for(n, threads, 1u << 16);
  std::vector<uint64_t> part(size_t(team) + 1, 0);
#pragma omp parallel num_threads(team)
  {
    const int nt = omp_get_num_threads(), t = omp_get_thread_num();
    const Span mine = split(n, uint64_t(nt), uint64_t(t));
    uint64_t s = 0;
    for (uint64_t i = mine.begin; i < mine.end; ++i) s += in[i];
    part[size_t(t) + 1] = s;
#pragma omp barrier
#pragma omp single
    for (int u = 0; u < nt; ++u) part[size_t(u) + 1] += part[size_t(u)];
    uint64_t acc = part[size_t(t)];
    for (uint64_t i = mine.begin; i < mine.end; ++i) {
      const uint64_t v = in[i];  // read before write: in and out may be the same array
      out[i] = acc;
      acc += v;
    }
  }
}

int copy_team(uint64_t bytes, int threads) { return team_for(bytes, threads, kParallelCopyBytes); }

void parallel_copy(void* dst, const void* src, uint64_t bytes, int threads) {
  if (!bytes || dst == src) return;
  const int team = copy_team(bytes, threads);
  if (team == 1) {
    std::memmove(dst, src, bytes);
    return;
  }
#pragma omp parallel num_threads(team)
  {
    const Span mine = split(bytes, uint64_t(omp_get_num_threads()), uint64_t(omp_get_thread_num()));
    std::memcpy(static_cast<char*>(dst) + mine.begin, static_cast<const char*>(src) + mine.begin, mine.size());
  }
}

void parallel_fill(void* dst, uint8_t byte, uint64_t bytes, int threads) {
  const int team = copy_team(bytes, threads);
#pragma omp parallel num_threads(team)
  {
    const Span mine = split(bytes, uint64_t(omp_get_num_threads()), uint64_t(omp_get_thread_num()));
    std::memset(static_cast<char*>(dst) + mine.begin, byte, mine.size());
  }
}

#define JL_INSTANTIATE_GATHER(I, C) \
  template void gather<I, C>(const I*, const C*, uint64_t, uint64_t, uint64_t, C*, int);
JL_FOR_EACH_KV(JL_INSTANTIATE_GATHER)

}  // namespace joinlab::cpu
