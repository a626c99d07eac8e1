// Throughput of the CPU join kernels on this machine, next to its memory bandwidth: partition
// passes at several fanouts, the per-partition join of a radix join, the global hash table of a
// no-partitioning join, generation and checksum, the multiway merge, the sorts.
//   bench_cpu_kernels [log2 rows = 24] [threads = all cores] [section]
// section: all | partition | join | hash | checksum | merge | sort. Environment: JL_BENCH_CPU_TIME=1
// reports CPU time / threads instead of wall time (for a machine busy with other work);
// JL_BENCH_JOIN_BITS=9,11 picks the radix join's fanouts; JL_BENCH_COUNT_ONLY=1 skips output.
// Tuples are 4-byte keys + 4-byte payloads (|R| = |S|, S a foreign key of R, every S row matches).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/workload/keygen.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/host_memory.hpp"

using namespace joinlab;
using Clock = std::chrono::steady_clock;

namespace {

// Wall time, or with JL_BENCH_CPU_TIME=1 the process CPU time divided by the threads: on a
// machine shared with other work that estimates the uncontended time of a parallel kernel.
int g_threads = 1;
bool g_cpu_time = false;
double seconds_now() {
  if (!g_cpu_time) return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9) / g_threads;
}
double best_of(int reps, const std::function<void()>& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const double t0 = seconds_now();
    f();
    best = std::min(best, seconds_now() - t0);
  }
  return best;
}

template <class T>
T* array(uint64_t n, int threads) {
  auto* p = static_cast<T*>(cpu::host_alloc(n * sizeof(T)));
  cpu::prefault(p, n * sizeof(T), threads);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  const int log_rows = argc > 1 ? std::atoi(argv[1]) : 24;
  const int threads = argc > 2 ? std::atoi(argv[2]) : int(std::thread::hardware_concurrency());
  const uint64_t n = 1ULL << log_rows;
  const std::string section = argc > 3 ? argv[3] : "all";
  auto want = [&](const char* s) { return section == "all" || section == s; };
  g_threads = threads;
  g_cpu_time = std::getenv("JL_BENCH_CPU_TIME") != nullptr;
  if (g_cpu_time) std::printf("times: process CPU time / threads\n");
  using K = uint32_t;
  using V = uint32_t;
  std::printf("rows %llu per side, %d threads, 8-byte tuples\n", (unsigned long long)n, threads);

  // Memory bandwidth: parallel memcpy, bytes read + written.
  const uint64_t copy_bytes = n * 8;
  char* a = array<char>(copy_bytes, threads);
  char* b = array<char>(copy_bytes, threads);
  const double t_copy = best_of(5, [&] { cpu::parallel_copy(b, a, copy_bytes, threads); });
  const double bw = 2.0 * double(copy_bytes) / t_copy;
  std::printf("memcpy %.1f MB: %.2f GB/s (read + write)\n", double(copy_bytes) / 1e6, bw / 1e9);

  K* rk = array<K>(n, threads);
  V* rv = array<V>(n, threads);
  K* sk = array<K>(n, threads);
  V* sv = array<V>(n, threads);
  KeyGen r;
  r.dist = 0;
  r.rows = n;
  r.seed = 1;
  r.perm = FeistelPerm::make(n, 1);
  KeyGen s;
  s.dist = 4;
  s.ref_dist = 0;
  s.ref_rows = n;
  s.ref_seed = 1;
  s.ref_perm = r.perm;
  s.seed = 2;
  cpu::generate(r, 1, true, 0, n, rk, rv, threads);
  cpu::generate(s, 2, true, 0, n, sk, sv, threads);

  K* pk = array<K>(n, threads);
  V* pv = array<V>(n, threads);
  K* qk = array<K>(n, threads);
  V* qv = array<V>(n, threads);
  if (want("partition"))
    std::printf("\npartition pass (histogram + scatter), one input of %llu tuples:\n"
                "  bits  passes   time ms   Mtuples/s   GB/s moved   of memcpy\n"
                "  (one pass up to %u bits: write-combine buffers within half the L2)\n",
                (unsigned long long)n, cpu::max_one_pass_bits(4, 4));
  for (uint32_t bits : {4u, 6u, 8u, 10u, 11u, 12u, 13u, 14u, 16u}) {
    if (!want("partition")) break;
    PartitionFn fn;
    fn.bits = bits;
    const double t = best_of(3, [&] { cpu::partition(rk, rv, n, {}, fn, pk, pv, threads); });
    const int passes = bits > cpu::max_one_pass_bits(4, 4) ? 2 : 1;
    // Per pass: histogram reads keys (4 B), scatter reads and writes tuples (8 + 8 B).
    const double moved = double(n) * 20.0 * passes;
    std::printf("  %4u  %6d  %8.1f  %10.1f  %11.2f  %9.0f%%\n", bits, passes, t * 1e3, double(n) / t / 1e6,
                moved / t / 1e9, 100.0 * moved / t / bw);
  }

  // Radix join: partition both sides, then join partition by partition.
  std::vector<uint32_t> join_bits{8, 11, 14};
  if (const char* b = std::getenv("JL_BENCH_JOIN_BITS")) {  // e.g. "9,10,11"
    join_bits.clear();
    for (const char* p = b; *p;) {
      join_bits.push_back(uint32_t(std::strtoul(p, const_cast<char**>(&p), 10)));
      if (*p == ',') ++p;
    }
  }
  const bool count_only = std::getenv("JL_BENCH_COUNT_ONLY") != nullptr;
  for (uint32_t bits : join_bits) {
    if (!want("join")) break;
    PartitionFn fn;
    fn.bits = bits;
    std::vector<uint64_t> ro, so;
    const double t_part = best_of(2, [&] {
      ro = cpu::partition(rk, rv, n, {}, fn, pk, pv, threads);
      so = cpu::partition(sk, sv, n, {}, fn, qk, qv, threads);
    });
    std::printf("\nradix join, %u bits (%llu R tuples = %.1f KB per partition): partition both %.1f ms\n", bits,
                (unsigned long long)(n >> bits), double(n >> bits) * 8 / 1e3, t_part * 1e3);
    for (TableKind kind : {TableKind::LinearProbing, TableKind::Chained}) {
      for (OutputMode mode : {OutputMode::CountOnly, OutputMode::Direct, OutputMode::CountThenWrite}) {
        if (count_only && mode != OutputMode::CountOnly) continue;
        cpu::JoinSink<K, V, V> sink;
        K* ok = nullptr;
        V *orv = nullptr, *osv = nullptr;
        if (mode != OutputMode::CountOnly) {
          ok = array<K>(n, threads);
          orv = array<V>(n, threads);
          osv = array<V>(n, threads);
        }
        sink = {ok, orv, osv, 0, mode == OutputMode::CountOnly ? 0 : n, mode};
        cpu::JoinCount c;
        const double t = best_of(3, [&] { c = cpu::partitioned_join(pk, pv, ro, qk, qv, so, kind, sink, threads); });
        const char* mname = mode == OutputMode::CountOnly ? "count only" : mode == OutputMode::Direct ? "direct" : "count+write";
        std::printf("  join %-7s %-11s %8.1f ms  %7.1f M input tuples/s  matches %llu%s   total %.1f ms = %.1f M tuples/s\n",
                    kind == TableKind::LinearProbing ? "linear" : "chained", mname, t * 1e3, 2.0 * double(n) / t / 1e6,
                    (unsigned long long)c.count, c.count == n ? "" : " WRONG", (t + t_part) * 1e3,
                    2.0 * double(n) / (t + t_part) / 1e6);
        cpu::host_free(ok);
        cpu::host_free(orv);
        cpu::host_free(osv);
      }
    }
  }

  if (want("hash")) {  // no-partitioning join: one global table of R (npj)
    for (TableKind kind : {TableKind::LinearProbing, TableKind::Chained}) {
      uint64_t slots = 1;
      while (slots < 2 * n) slots <<= 1;
      const uint64_t buckets = kind == TableKind::LinearProbing ? slots : slots / 2;
      K* tk = array<K>(kind == TableKind::LinearProbing ? slots : n, threads);
      V* tv = array<V>(kind == TableKind::LinearProbing ? slots : n, threads);
      uint32_t* heads = array<uint32_t>(buckets, threads);
      uint32_t* next = array<uint32_t>(n, threads);
      cpu::LinearTable<K, V> lt{tk, tv, slots, 7};
      cpu::ChainedTable<K, V> ct{heads, next, tk, tv, buckets, n, 7};
      const double t_build = best_of(2, [&] {
        if (kind == TableKind::LinearProbing) {
          cpu::clear_table(lt, threads);
          cpu::build(lt, 0, rk, rv, n, threads);
        } else {
          cpu::clear_table(ct, threads);
          cpu::build(ct, 0, rk, rv, n, threads);
        }
      });
      cpu::JoinSink<K, V, V> sink{nullptr, nullptr, nullptr, 0, 0, OutputMode::CountOnly};
      cpu::JoinCount c;
      const double t_probe = best_of(2, [&] {
        c = kind == TableKind::LinearProbing ? cpu::probe(lt, sk, sv, n, sink, threads)
                                             : cpu::probe(ct, sk, sv, n, sink, threads);
      });
      std::printf("\nglobal %s table: build %.1f ms (%.1f M/s), probe count only %.1f ms (%.1f M/s), matches %llu%s\n",
                  kind == TableKind::LinearProbing ? "linear" : "chained", t_build * 1e3, double(n) / t_build / 1e6,
                  t_probe * 1e3, double(n) / t_probe / 1e6, (unsigned long long)c.count, c.count == n ? "" : " WRONG");
      for (void* p : {static_cast<void*>(tk), static_cast<void*>(tv), static_cast<void*>(heads), static_cast<void*>(next)})
        cpu::host_free(p);
    }
  }

  if (want("checksum")) {
    const double t_gen = best_of(2, [&] { cpu::generate(s, 2, false, 0, n, sk, sv, threads); });
    std::printf("\ngenerate S (foreign keys + payload): %.1f ms, %.1f Mtuples/s\n", t_gen * 1e3, double(n) / t_gen / 1e6);
    uint64_t sum = 0;
    const double t_sum = best_of(2, [&] { sum = cpu::checksum({rk, 4}, {{rv, 4}, {sv, 4}}, 0, n, threads); });
    std::printf("checksum of %llu rows (4-byte key, two 4-byte columns): %.1f ms, %.1f Mrows/s (%llx)\n",
                (unsigned long long)n, t_sum * 1e3, double(n) / t_sum / 1e6, (unsigned long long)sum);
  }

  // Multiway merge of k sorted runs (mgsmj's merge of a relation's chunksets), 8-byte keys and
  // values as mgsmj's 8+8-byte tuples: random keys, so the runs interleave about every row.
  if (want("merge")) {
    using MK = uint64_t;
    using MV = uint64_t;
    MK* mk = array<MK>(n, threads);
    MV* mv = array<MV>(n, threads);
    MK* ok = array<MK>(n, threads);
    MV* ov = array<MV>(n, threads);
    std::printf("\nmultiway merge of k sorted runs, %llu 16-byte tuples in all (memcpy: %.2f GB/s):\n"
                "     k   time ms   Mtuples/s   GB/s moved   of memcpy\n",
                (unsigned long long)n, bw / 1e9);
    for (int k : {2, 3, 4, 5, 8, 16}) {
      const std::vector<cpu::ChunkIn<MK, MV>> runs = cpu::random_sorted_runs(mk, mv, n, k, threads);
      const double t = best_of(3, [&] { cpu::multiway_merge(runs, ok, ov, threads); });
      const double moved = 2.0 * double(n) * 16.0;
      std::printf("  %4d  %8.1f  %10.1f  %11.2f  %9.0f%%\n", k, t * 1e3, double(n) / t / 1e6, moved / t / 1e9,
                  100.0 * moved / t / bw);
    }
  }

  // Sort (smj building block).
  if (!want("sort")) return 0;
  const double t_sort = best_of(2, [&] { cpu::radix_sort(rk, rv, n, pk, pv, threads); });
  std::printf("\nradix sort of R: %.1f ms, %.1f Mtuples/s\n", t_sort * 1e3, double(n) / t_sort / 1e6);
  const double t_msort = best_of(1, [&] { cpu::merge_sort(rk, rv, n, pk, pv, threads); });
  std::printf("merge sort of R: %.1f ms, %.1f Mtuples/s\n", t_msort * 1e3, double(n) / t_msort / 1e6);
  return 0;
}
