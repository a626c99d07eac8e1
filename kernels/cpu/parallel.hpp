// Small helpers shared by the CPU kernels: how rows are split over a thread team.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>

namespace joinlab::cpu {

// Rows [begin, end) of part `i` of `parts` near-equal contiguous parts of n rows.
struct Span {
  uint64_t begin = 0, end = 0;
  uint64_t size() const { return end - begin; }
};
inline Span split(uint64_t n, uint64_t parts, uint64_t i) {
  uint64_t base = n / parts, extra = n % parts;
  uint64_t b = i * base + std::min(i, extra);
  return {b, b + base + (i < extra ? 1 : 0)};
}

// Threads worth using for `work` items (small inputs run on one thread: a team costs ~µs).
inline int team_for(uint64_t work, int threads, uint64_t per_thread_min = 1u << 14) {
  uint64_t useful = work / per_thread_min;
  return int(std::max<uint64_t>(1, std::min<uint64_t>(uint64_t(std::max(threads, 1)), useful)));
}

// An exception must not leave an OpenMP region (it would terminate the process): code inside
// one runs through run(), and the first error is rethrown after the region.
class RegionErrors {
 public:
  template <class F>
  void run(F&& f) noexcept {
    try {
      f();
    } catch (...) {
      std::lock_guard<std::mutex> g(mu_);
      if (!first_) first_ = std::current_exception();
    }
  }
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mu_;
  std::exception_ptr first_;
};

}  // namespace joinlab::cpu

// Explicit instantiation over every width combination the operators support: M(K, V) for tuple
// formats, M(K, VR, VS) for joins (R and S values may differ in width).
#define JL_FOR_EACH_KV(M) M(uint32_t, uint32_t) M(uint32_t, uint64_t) M(uint64_t, uint32_t) M(uint64_t, uint64_t)
#define JL_FOR_EACH_JOIN(M)                                                                    \
  M(uint32_t, uint32_t, uint32_t) M(uint32_t, uint32_t, uint64_t) M(uint32_t, uint64_t, uint32_t) \
  M(uint32_t, uint64_t, uint64_t) M(uint64_t, uint32_t, uint32_t) M(uint64_t, uint32_t, uint64_t) \
  M(uint64_t, uint64_t, uint32_t) M(uint64_t, uint64_t, uint64_t)
