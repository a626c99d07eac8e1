// Every CPU operator (kernels/cpu through core/runtime/cpu_ops) against a simple reference, on
// random inputs of several sizes (0, 1, non-powers of two, large enough for the multi-threaded
// and streaming paths), all key/value widths, both table kinds and every output mode.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "core/common/error.hpp"
#include "core/exec/merge_path.hpp"
#include "core/runtime/cpu_rank.hpp"
#include "core/runtime/in_process_transport.hpp"
#include "core/verify/checksum.hpp"
#include "core/workload/generate.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/host_memory.hpp"
#include "tests/device_layout_util.hpp"

namespace joinlab {
namespace {

using Row = std::tuple<uint64_t, uint64_t, uint64_t>;  // key, R value, S value

uint64_t load(const Buffer& b, uint32_t width, uint64_t i) {
  return width == 4 ? data_of<uint32_t>(b)[i] : data_of<uint64_t>(b)[i];
}
void store(const Buffer& b, uint32_t width, uint64_t i, uint64_t v) {
  if (width == 4)
    data_of<uint32_t>(b)[i] = uint32_t(v);
  else
    data_of<uint64_t>(b)[i] = v;
}
uint64_t width_mask(uint32_t width) { return width == 4 ? 0xffffffffULL : ~0ULL; }

// One CpuRank with `threads` threads per operator; ops go through launch() and its workers.
class CpuOps {
 public:
  explicit CpuOps(int threads = 2) : threads_(threads), rank_(make_rank(threads)) {}
  static std::unique_ptr<CpuRank> make_rank(int threads) {
    CpuRankConfig cfg;
    cfg.threads = threads;
    return std::make_unique<CpuRank>(0, ClusterShape{}, make_in_process_transports(1, 30.0)[0], cfg);
  }
  CpuRank& rank() { return *rank_; }
  // A failed operator poisons its stream (sticky, as in CUDA); a fresh rank then takes over so
  // the next checks run. Buffers stay valid: they belong to their pool, not the rank.
  OpResult run(Op op) {
    try {
      return rank_->launch(Stream{0}, std::move(op)).get();
    } catch (...) {
      rank_ = make_rank(threads_);
      throw;
    }
  }

  Tuples tuples(const std::vector<uint64_t>& keys, const std::vector<uint64_t>& vals, TupleFormat fmt,
                uint64_t pad = 0) {  // pad: rows in front of the view (unaligned views)
    Tuples t = rank_->alloc_tuples(MemSpace::Device, keys.size() + pad, fmt, "t");
    for (uint64_t i = 0; i < keys.size(); ++i) {
      store(t.keys, fmt.key_bytes, pad + i, keys[i]);
      store(t.vals, fmt.val_bytes, pad + i, vals[i]);
    }
    Tuples v = t.slice(pad, keys.size());
    return v;
  }
  Tuples empty_tuples(uint64_t rows, TupleFormat fmt) {
    Tuples t = rank_->alloc_tuples(MemSpace::Device, rows, fmt, "out");
    std::memset(t.keys->ptr, 0xee, t.keys->bytes);
    std::memset(t.vals->ptr, 0xee, t.vals->bytes);
    return t;
  }
  static std::vector<uint64_t> keys_of(const Tuples& t) {
    std::vector<uint64_t> v(t.rows);
    for (uint64_t i = 0; i < t.rows; ++i) v[i] = load(t.keys, t.fmt.key_bytes, t.offset + i);
    return v;
  }
  static std::vector<uint64_t> vals_of(const Tuples& t) {
    std::vector<uint64_t> v(t.rows);
    for (uint64_t i = 0; i < t.rows; ++i) v[i] = load(t.vals, t.fmt.val_bytes, t.offset + i);
    return v;
  }
  JoinOutput output(uint64_t rows, TupleFormat r, TupleFormat s) {
    JoinOutput o = rank_->alloc_output(MemSpace::Device, rows, r, s, "join");
    for (const Buffer& b : {o.keys, o.rvals, o.svals}) std::memset(b->ptr, 0xee, b->bytes);
    return o;
  }
  static std::vector<Row> rows_of(const JoinOutput& o, uint64_t first, uint64_t n) {
    std::vector<Row> v;
    for (uint64_t i = first; i < first + n; ++i)
      v.emplace_back(load(o.keys, o.r_fmt.key_bytes, i), load(o.rvals, o.r_fmt.val_bytes, i),
                     load(o.svals, o.s_fmt.val_bytes, i));
    std::sort(v.begin(), v.end());
    return v;
  }

 private:
  int threads_;
  std::unique_ptr<CpuRank> rank_;
};

std::vector<uint64_t> random_keys(uint64_t n, uint64_t domain, uint32_t width, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> v(n);
  for (auto& k : v) {
    k = domain ? rng() % domain : rng() & width_mask(width);
    if (k == width_mask(width)) k = 0;  // the all-ones key is reserved
  }
  return v;
}
std::vector<uint64_t> random_vals(uint64_t n, uint32_t width, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> v(n);
  for (auto& x : v) x = rng() & width_mask(width);
  return v;
}

std::vector<Row> reference_join(const std::vector<uint64_t>& rk, const std::vector<uint64_t>& rv,
                                const std::vector<uint64_t>& sk, const std::vector<uint64_t>& sv) {
  std::multimap<uint64_t, uint64_t> r;
  for (size_t i = 0; i < rk.size(); ++i) r.emplace(rk[i], rv[i]);
  std::vector<Row> out;
  for (size_t j = 0; j < sk.size(); ++j) {
    auto range = r.equal_range(sk[j]);
    for (auto it = range.first; it != range.second; ++it) out.emplace_back(sk[j], it->second, sv[j]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Runs a join operator in every output mode and checks count, rows and overflow handling.
// make_op(out, out_first, mode) builds the operator.
template <class MakeOp>
void check_join_modes(CpuOps& ops, const std::vector<Row>& want, TupleFormat rf, TupleFormat sf,
                      MakeOp make_op, const std::string& what) {
  const uint64_t n = want.size();
  SCOPED_TRACE(what + " with " + std::to_string(n) + " matches");
  {  // CountOnly
    OpResult r = ops.run(make_op(JoinOutput{}, 0, OutputMode::CountOnly));
    EXPECT_EQ(r.count, n);
    EXPECT_FALSE(r.overflow);
  }
  for (OutputMode mode : {OutputMode::CountThenWrite, OutputMode::Direct}) {
    SCOPED_TRACE(mode == OutputMode::Direct ? "direct" : "count then write");
    const uint64_t first = 3;  // rows before out_first stay untouched
    JoinOutput out = ops.output(first + n + 2, rf, sf);
    OpResult r = ops.run(make_op(out, first, mode));
    EXPECT_EQ(r.count, n);
    EXPECT_FALSE(r.overflow);
    EXPECT_EQ(CpuOps::rows_of(out, first, n), want);
    EXPECT_EQ(data_of<uint8_t>(out.keys)[0], 0xee) << "wrote before out_first";
    EXPECT_EQ(load(out.keys, rf.key_bytes, first + n), width_mask(rf.key_bytes) & 0xeeeeeeeeeeeeeeeeULL)
        << "wrote past the matches";
    if (n == 0) continue;
    // Overflow: capacity one row short. The true count comes back; nothing lands past capacity.
    JoinOutput small = ops.output(first + n - 1 + 1, rf, sf);
    small.capacity = first + n - 1;
    OpResult o = ops.run(make_op(small, first, mode));
    EXPECT_EQ(o.count, n);
    EXPECT_TRUE(o.overflow);
    EXPECT_EQ(load(small.keys, rf.key_bytes, first + n - 1), width_mask(rf.key_bytes) & 0xeeeeeeeeeeeeeeeeULL)
        << "wrote at or past capacity";
    if (mode == OutputMode::Direct) {  // what was written is a subset of the true result
      auto got = CpuOps::rows_of(small, first, n - 1);
      EXPECT_TRUE(std::includes(want.begin(), want.end(), got.begin(), got.end()));
    }
  }
}

struct Widths {
  uint32_t key, rval, sval;
};
std::string name_of(const Widths& w) {
  return "k" + std::to_string(w.key) + "r" + std::to_string(w.rval) + "s" + std::to_string(w.sval);
}
std::vector<Widths> all_join_widths() {
  std::vector<Widths> v;
  for (uint32_t k : {4u, 8u})
    for (uint32_t r : {4u, 8u})
      for (uint32_t s : {4u, 8u}) v.push_back({k, r, s});
  return v;
}
std::vector<TupleFormat> all_formats() { return {{4, 4}, {4, 8}, {8, 4}, {8, 8}}; }
std::string name_of(const TupleFormat& f) {
  return "k" + std::to_string(f.key_bytes) + "v" + std::to_string(f.val_bytes);
}

// --- host memory ---------------------------------------------------------------------------------

// A run's repeats reuse their large blocks even where some are never live together: two small
// send buffers, freed before four larger blocks are made (as crj's before its local join), fit
// the cache from the second repeat on, so the third maps nothing.
TEST(CpuHostMemory, RepeatsOfBuffersThatAreNeverLiveTogetherMapNothingNew) {
  constexpr uint64_t kMiB = 1 << 20;
  auto repeat = [] {
    void* send[2] = {cpu::host_alloc(4 * kMiB), cpu::host_alloc(4 * kMiB)};
    for (void* p : send) cpu::host_free(p);
    void* join[4];
    for (void*& p : join) p = cpu::host_alloc(16 * kMiB);
    for (void* p : join) cpu::host_free(p);
  };
  repeat();
  repeat();
  const uint64_t mapped = cpu::host_blocks_mapped();
  repeat();
  EXPECT_EQ(cpu::host_blocks_mapped(), mapped) << "the third repeat mapped blocks anew (faulting their pages again)";
}

// Pinned and device memory on the cpu backend is backed when allocated, as cudaHostAlloc's is:
// every page resident, also where the block comes back from the cache after a pageable use that
// left its pages untouched.
TEST(CpuHostMemory, ResidentAllocationsAreBackedAlsoWhenTheBlockIsReused) {
  constexpr uint64_t kBytes = 24 << 20;
  const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE)), pages = kBytes / page;
  auto resident_pages = [&](void* p) {
    std::vector<unsigned char> in(pages);
    if (mincore(p, kBytes, in.data()) != 0) ADD_FAILURE() << "mincore failed";
    return uint64_t(std::count_if(in.begin(), in.end(), [](unsigned char c) { return c & 1; }));
  };
  void* fresh = cpu::host_alloc_resident(kBytes, 2);
  EXPECT_EQ(resident_pages(fresh), pages);
  cpu::host_free(fresh);
  void* untouched = cpu::host_alloc(kBytes + (2 << 20));  // a block of another size, never written
  cpu::host_free(untouched);
  void* reused = cpu::host_alloc_resident(kBytes + (2 << 20), 2);
  EXPECT_EQ(reused, untouched) << "the cached block was not reused";
  EXPECT_EQ(resident_pages(reused), pages) << "a reused block that was never backed was handed out unbacked";
  cpu::host_free(reused);
}

// --- generation ----------------------------------------------------------------------------------

TEST(CpuGenerate, MatchesTheSequentialGeneratorsForEveryDistributionAndWidth) {
  CpuOps ops;
  RelationSpec r;
  r.name = "R";
  r.rows = 5000;
  r.seed = 7;
  for (KeyDist dist : {KeyDist::UniqueDense, KeyDist::UniqueSparse, KeyDist::Uniform, KeyDist::Zipf,
                       KeyDist::ForeignKey}) {
    for (TupleFormat fmt : all_formats()) {
      for (bool rowid : {false, true}) {
        RelationSpec spec = r;
        RelationSpec ref = r;
        ref.dist = KeyDist::UniqueDense;
        ref.key_bytes = spec.key_bytes = fmt.key_bytes;
        spec.name = "S";
        spec.dist = dist;
        spec.range_hi = 900;
        spec.zipf_z = dist == KeyDist::Zipf ? 1.1 : 0.0;
        spec.match_rate = 0.6;
        spec.payload_bytes = {fmt.val_bytes};
        SCOPED_TRACE(std::string(to_string(dist)) + " " + name_of(fmt) + (rowid ? " rowid" : " payload"));
        const RowRange range{1234, 1234 + 777};
        Tuples out = ops.empty_tuples(range.size(), fmt);
        GenerateOp g{spec, dist == KeyDist::ForeignKey ? &ref : nullptr, range.begin, rowid, out};
        OpResult res = ops.run(g);
        EXPECT_EQ(res.count, range.size());
        auto want_keys = generate_keys(spec, g.referenced, range);
        auto want_vals = generate_payload(spec, 0, range);
        auto keys = CpuOps::keys_of(out), vals = CpuOps::vals_of(out);
        for (uint64_t i = 0; i < range.size(); ++i) {
          ASSERT_EQ(keys[i], want_keys[i]) << "row " << range.begin + i;
          const uint64_t v = rowid ? range.begin + i : payload_value(relation_seed(spec), 0, range.begin + i, fmt.val_bytes);
          ASSERT_EQ(vals[i], v) << "row " << range.begin + i;
          if (!rowid) {
            ASSERT_EQ(vals[i], want_vals[i]);
          }
        }
      }
    }
  }
}

TEST(CpuGenerate, PayloadColumnsOfBothWidths) {
  CpuOps ops;
  RelationSpec spec;
  spec.rows = 100;
  spec.payload_bytes = {4, 8};
  for (int col : {0, 1}) {
    const uint32_t w = spec.payload_bytes[size_t(col)];
    Buffer out = ops.rank().alloc(MemSpace::Device, 50 * w, "payload");
    ops.run(GeneratePayloadOp{spec, col, 17, 50, out});
    auto want = generate_payload(spec, col, {17, 67});
    for (uint64_t i = 0; i < 50; ++i) ASSERT_EQ(load(out, w, i), want[i]) << "column " << col << " row " << i;
  }
  EXPECT_THROW(ops.run(GeneratePayloadOp{spec, 2, 0, 1, nullptr}), RuntimeError);
}

// --- histogram and partition -------------------------------------------------------------------

std::vector<PartitionFn> partition_fns() {
  std::vector<PartitionFn> fns;
  for (uint32_t bits : {0u, 3u, 8u, cpu::max_one_pass_bits(8, 8) + 1}) {  // the last: two passes
    PartitionFn radix;
    radix.bits = bits;
    radix.shift = bits == 8 ? 5 : 0;
    fns.push_back(radix);
    PartitionFn hash = radix;
    hash.kind = PartitionFn::Hash;
    hash.seed = 99;
    fns.push_back(hash);
  }
  return fns;
}

TEST(CpuHistogram, CountsEveryPartition) {
  CpuOps ops;
  for (TupleFormat fmt : {TupleFormat{4, 4}, TupleFormat{8, 8}})
    for (uint64_t n : {0ull, 1ull, 999ull, 100003ull})
      for (PartitionFn fn : partition_fns()) {
        auto keys = random_keys(n, 0, fmt.key_bytes, n + fn.bits);
        Tuples in = ops.tuples(keys, keys, fmt);
        OpResult r = ops.run(HistogramOp{in, fn});
        std::vector<uint64_t> want(fn.fanout(), 0);
        for (uint64_t k : keys) ++want[fn(k)];
        ASSERT_EQ(r.values, want) << name_of(fmt) << " n=" << n << " bits=" << fn.bits;
      }
}

// With in_segments: k * fanout counts, segment-major, each segment's those of a HistogramOp of its
// slice (and of a reference count): empty segments, segments not starting at row 0 nor ending at
// the last, many small segments (the threads take them dynamically) and one large one next to a
// tiny one (cut into pieces for the threads). Keys sorted, so that segments differ.
TEST(CpuHistogram, SegmentsCountLikeAHistogramOfEachSegmentsSlice) {
  for (int threads : {1, 3}) {
    CpuOps ops(threads);
    for (TupleFormat fmt : {TupleFormat{4, 4}, TupleFormat{8, 8}})
      for (uint64_t n : {0ull, 999ull, 300007ull})
        for (PartitionFn fn : partition_fns()) {
          auto keys = random_keys(n, 0, fmt.key_bytes, n + fn.bits + 1);
          std::sort(keys.begin(), keys.end());
          Tuples in = ops.tuples(keys, keys, fmt, /*pad=*/n % 3);
          std::vector<std::vector<uint64_t>> cases = {{0, n}, {0, n / 3, n / 3, n}, {n / 7, n / 2, n - n / 5}, {0, n / 100, n}};
          std::vector<uint64_t> many;
          for (uint64_t s = 0; s <= 100; ++s) many.push_back(n * s / 100);
          cases.push_back(many);
          for (const std::vector<uint64_t>& segs : cases) {
            SCOPED_TRACE(name_of(fmt) + " n=" + std::to_string(n) + " bits=" + std::to_string(fn.bits) +
                         (fn.kind == PartitionFn::Hash ? " hash" : " radix") + " threads=" + std::to_string(threads) +
                         " segments=" + std::to_string(segs.size() - 1));
            const std::vector<uint64_t> counts = ops.run(HistogramOp{in, fn, segs}).values;
            std::vector<uint64_t> per_slice, want(uint64_t(segs.size() - 1) * fn.fanout(), 0);
            for (size_t sg = 0; sg + 1 < segs.size(); ++sg) {
              const std::vector<uint64_t> c = ops.run(HistogramOp{in.slice(segs[sg], segs[sg + 1] - segs[sg]), fn}).values;
              per_slice.insert(per_slice.end(), c.begin(), c.end());
              for (uint64_t i = segs[sg]; i < segs[sg + 1]; ++i) ++want[sg * fn.fanout() + fn(keys[i])];
            }
            ASSERT_EQ(counts, want);
            ASSERT_EQ(counts, per_slice);
          }
        }
  }
}

// With in_ranges (segments apart, out of order, overlapping, empty): the counts of a HistogramOp
// of each range's slice, segment-major; with counts_out, partition-major in the buffer and each
// partition's total returned.
TEST(CpuHistogram, RangesCountLikeAHistogramOfEachRangesSlice) {
  for (int threads : {1, 3}) {
    CpuOps ops(threads);
    const uint64_t n = 300007;
    const PartitionFn fn{PartitionFn::Radix, 7, 2, 0};
    auto keys = random_keys(n, 0, 8, 11);
    Tuples in = ops.tuples(keys, keys, TupleFormat{8, 8});
    const std::vector<RowRange> ranges = {{n / 2, n / 2 + 5000}, {10, 70000}, {n - 9, n}, {300, 300}, {60000, 90000}};
    HistogramOp h{in, fn};
    h.in_ranges = ranges;
    const std::vector<uint64_t> counts = ops.run(h).values;
    std::vector<uint64_t> want;
    for (const RowRange& r : ranges) {
      const std::vector<uint64_t> c = ops.run(HistogramOp{in.slice(r.begin, r.size()), fn}).values;
      want.insert(want.end(), c.begin(), c.end());
    }
    ASSERT_EQ(counts, want) << "threads " << threads;
    Buffer out = ops.rank().alloc(MemSpace::Device, fn.fanout() * ranges.size() * 8, "counts");
    h.counts_out = out;
    const std::vector<uint64_t> totals = ops.run(h).values;
    const uint64_t* words = data_of<uint64_t>(out);
    for (uint32_t p = 0; p < fn.fanout(); ++p) {
      uint64_t sum = 0;
      for (size_t g = 0; g < ranges.size(); ++g) {
        ASSERT_EQ(words[p * ranges.size() + g], want[g * fn.fanout() + p]) << "partition " << p << " range " << g;
        sum += want[g * fn.fanout() + p];
      }
      ASSERT_EQ(totals[p], sum) << "partition " << p;
    }
  }
  CpuOps ops;
  Tuples t = ops.empty_tuples(100, {4, 4});
  for (auto [segs, ranges, what] :
       {std::tuple<std::vector<uint64_t>, std::vector<RowRange>, std::string>{
            {}, {{0, 10}, {90, 101}}, "in_ranges[1] = [90, 101) is not a range of the input's 100 rows"},
        {{}, {{20, 10}}, "in_ranges[0] = [20, 10)"},
        {{0, 10}, {{0, 10}}, "both in_segments (2 offsets) and in_ranges (1 ranges)"}}) {
    HistogramOp bad{t, PartitionFn{}, segs};
    bad.in_ranges = ranges;
    try {
      ops.run(bad);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

TEST(CpuHistogram, BadSegmentsAreErrorsNamingThem) {
  CpuOps ops;
  Tuples t = ops.empty_tuples(100, {4, 4});
  for (auto [segs, what] : {std::pair<std::vector<uint64_t>, std::string>{{0, 50, 40, 100}, "histogram: in_segments offsets are not ascending at index 2"},
                            {{0, 101}, "histogram: in_segments end at row 101, past the input's 100 rows"},
                            {{7}, "histogram: in_segments holds the single offset 7"}}) {
    try {
      ops.run(HistogramOp{t, PartitionFn{}, segs});
      ADD_FAILURE() << "accepted: " << what;
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  }
}

// Checks a partition result: offsets, every partition holding its rows in input order.
void check_partitioned(const std::vector<uint64_t>& keys, const std::vector<uint64_t>& vals,
                       const std::vector<uint64_t>& segs, PartitionFn fn, const Tuples& out,
                       const std::vector<uint64_t>& offsets) {
  const uint32_t F = fn.fanout();
  const uint64_t k = segs.size() - 1;
  ASSERT_EQ(offsets.size(), k * F + 1);
  ASSERT_EQ(offsets.back(), segs.back() - segs.front());
  auto ok = CpuOps::keys_of(out), ov = CpuOps::vals_of(out);
  uint64_t at = 0;
  for (uint64_t s = 0; s < k; ++s) {
    std::vector<std::vector<std::pair<uint64_t, uint64_t>>> want(F);
    for (uint64_t i = segs[s]; i < segs[s + 1]; ++i) want[fn(keys[i])].push_back({keys[i], vals[i]});
    for (uint32_t p = 0; p < F; ++p) {
      ASSERT_EQ(offsets[s * F + p], at) << "segment " << s << " partition " << p;
      for (auto& [key, val] : want[p]) {  // stable: input order kept
        ASSERT_EQ(ok[at], key) << "segment " << s << " partition " << p << " row " << at;
        ASSERT_EQ(ov[at], val) << "segment " << s << " partition " << p << " row " << at;
        ++at;
      }
    }
  }
}

// chunked_layout against its definition, partition by partition: partition p of each output
// follows every chunk's rows of the partitions before it, and chunk c's run of p follows the runs
// of p of the chunks before c in the same output (none, some and all chunks cached).
TEST(ChunkLayout, PartitionMajorInEachOutputChunksInOrder) {
  std::mt19937_64 rng(7);
  for (auto [chunks, fanout] : {std::pair<uint32_t, uint32_t>{1, 1}, {3, 4}, {128, 2048}, {7, 64}})
    for (uint32_t cached : {0u, 1u, chunks / 2, chunks}) {
      std::vector<uint64_t> hist(size_t(chunks) * fanout);
      for (uint64_t& h : hist) h = rng() % 5 == 0 ? 0 : rng() % 1000;
      const ChunkLayout l = chunked_layout(hist, fanout, cached);
      uint64_t at[2] = {0, 0};  // cache, spill
      for (uint32_t p = 0; p < fanout; ++p) {
        ASSERT_EQ(l.cache_starts[p], at[0]);
        ASSERT_EQ(l.spill_starts[p], at[1]);
        for (uint32_t c = 0; c < chunks; ++c) {
          uint64_t& a = at[c < cached ? 0 : 1];
          ASSERT_EQ(l.offsets[size_t(c) * fanout + p], a) << "chunk " << c << " partition " << p;
          a += hist[size_t(c) * fanout + p];
        }
      }
      EXPECT_EQ(l.cache_starts[fanout], at[0]);
      EXPECT_EQ(l.spill_starts[fanout], at[1]);
    }
  EXPECT_THROW(chunked_layout(std::vector<uint64_t>(5), 2, 0), RuntimeError);
}

// counts_out: two segmented histograms (a partition's cached and spilled part, as triton's second
// pass counts them) fill the columns of one buffer, partition-major; each returns its partitions'
// totals instead of the counts.
TEST(CpuHistogram, CountsOutFillPartitionMajorColumnsAndTotalsReturn) {
  for (int threads : {1, 3}) {
    CpuOps ops(threads);
    for (PartitionFn fn : partition_fns()) {
      const uint32_t F = fn.fanout();
      const uint64_t n = 20011;
      auto keys = random_keys(n, 0, 8, fn.bits + 5);
      Tuples in = ops.tuples(keys, keys, {8, 8});
      const std::vector<std::vector<uint64_t>> parts = {{0, 3000, 6500, 12000}, {12000, 12001, n}};
      const uint64_t stride = 5;  // 3 + 2 segments
      Buffer counts = ops.rank().alloc(MemSpace::Device, F * stride * 8, "counts");
      uint64_t first = 0;
      for (const std::vector<uint64_t>& segs : parts) {
        HistogramOp h{in, fn, segs};
        h.counts_out = counts;
        h.counts_first = first;
        h.counts_stride = stride;
        const std::vector<uint64_t> totals = ops.run(h).values;
        const std::vector<uint64_t> want = ops.run(HistogramOp{in, fn, segs}).values;  // segment-major
        ASSERT_EQ(totals.size(), F);
        for (uint32_t p = 0; p < F; ++p) {
          uint64_t sum = 0;
          for (uint64_t sg = 0; sg + 1 < segs.size(); ++sg) {
            ASSERT_EQ(load(counts, 8, p * stride + first + sg), want[sg * F + p]) << "partition " << p << " segment " << sg;
            sum += want[sg * F + p];
          }
          ASSERT_EQ(totals[p], sum) << "partition " << p;
        }
        first += segs.size() - 1;
      }
    }
  }
}

TEST(CpuHistogram, CountsOutTooSmallOrPastItsStrideIsAnErrorNamingIt) {
  CpuOps ops;
  Tuples t = ops.empty_tuples(100, {4, 4});
  const PartitionFn fn{PartitionFn::Radix, 4, 0, 0};
  HistogramOp h{t, fn, {0, 50, 100}};
  std::string error;
  auto error_of = [&] {
    try {
      ops.run(h);
      return std::string("(accepted)");
    } catch (const RuntimeError& e) {
      return std::string(e.what());
    }
  };
  h.counts_out = ops.rank().alloc(MemSpace::Device, 16 * 2 * 8 - 8, "layout");  // a word short
  error = error_of();
  EXPECT_NE(error.find("histogram: counts_out (buffer 'layout') holds 248 bytes, 16 partitions x 2 columns need 256"),
            std::string::npos)
      << error;
  h.counts_out = ops.rank().alloc(MemSpace::Device, 16 * 3 * 8, "layout");
  h.counts_first = 2;
  h.counts_stride = 3;
  error = error_of();
  EXPECT_NE(error.find("columns [2, 4) of 2 segments lie past counts_stride = 3"), std::string::npos) << error;
}

// Chunks partitioned by offsets a scan left in memory (histograms into counts_out, ScanOp in
// place) equal the same chunks partitioned by chunked_layout's host offsets, row for row (the
// CPU kernel writes each chunk's run of a partition in input order), and the result holds the
// partitions' starts.
TEST(CpuChunkPartition, OffsetsOnDeviceEqualHostOffsets) {
  for (int threads : {1, 3}) {
    CpuOps ops(threads);
    for (TupleFormat fmt : {TupleFormat{4, 4}, TupleFormat{8, 4}})
      for (uint32_t bits : {0u, 3u, 11u}) {
        const PartitionFn fn{PartitionFn::Radix, bits, 2, 0};
        const uint32_t F = fn.fanout();
        const uint64_t n = 50021;
        auto keys = random_keys(n, 1 << 16, fmt.key_bytes, bits + 11);
        auto vals = random_keys(n, 0, fmt.val_bytes, bits + 12);
        Tuples in = ops.tuples(keys, vals, fmt, 3);
        // Two parts, each cut into chunks and counted by one segmented histogram.
        const test::DeviceLayout d =
            test::lay_out_on_device(ops.rank(), in, fn, {chunk_bounds(30000, 4), {30000, 30001, 41000, n}});
        const uint64_t C = d.chunks.size();
        const ChunkLayout l = chunked_layout(d.hist, F, uint32_t(C));
        OpResult by[2];
        Tuples out[2];
        for (int on_device : {0, 1}) {
          ChunkPartitionOp op;
          op.chunks = d.chunks;
          op.fn = fn;
          if (on_device) op.offsets_on_device = d.layout;
          else op.offsets = l.offsets;
          op.cached_chunks = uint32_t(C);
          op.cache = out[on_device] = ops.empty_tuples(n, fmt);
          by[on_device] = ops.run(op);
        }
        SCOPED_TRACE(name_of(fmt) + " bits=" + std::to_string(bits) + " threads=" + std::to_string(threads));
        EXPECT_EQ(by[1].count, n);
        EXPECT_EQ(by[1].values, l.cache_starts);
        EXPECT_TRUE(by[0].values.empty());
        out[0].rows = out[1].rows = n;
        ASSERT_EQ(CpuOps::keys_of(out[1]), CpuOps::keys_of(out[0]));
        ASSERT_EQ(CpuOps::vals_of(out[1]), CpuOps::vals_of(out[0]));
      }
  }
}

TEST(CpuChunkPartition, BadOffsetsOnDeviceAreErrorsNamingTheBuffer) {
  CpuOps ops;
  Tuples in = ops.tuples({1, 2, 3, 4}, {1, 2, 3, 4}, {4, 4});
  const PartitionFn fn{PartitionFn::Radix, 1, 0, 0};
  auto op_with = [&](uint64_t bytes) {
    ChunkPartitionOp op;
    op.chunks = {in.slice(0, 2), in.slice(2, 2)};
    op.fn = fn;
    op.offsets_on_device = ops.rank().alloc(MemSpace::Device, bytes, "layout");
    op.cached_chunks = 2;
    op.cache = ops.empty_tuples(4, {4, 4});
    return op;
  };
  auto expect_error = [&](const ChunkPartitionOp& op, const std::string& what) {
    try {
      ops.run(op);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error(op_with(24), "chunk partition: offsets_on_device (buffer 'layout') holds 24 bytes, 2 chunks x 2 partitions need 32");
  ChunkPartitionOp spilled = op_with(32);
  spilled.cached_chunks = 1;
  spilled.spill = ops.empty_tuples(4, {4, 4});
  expect_error(spilled, "lay out one output, but 1 of 2 chunks go to the spill buffer");
  ChunkPartitionOp both = op_with(32);
  both.offsets = {0, 1, 2, 3};
  expect_error(both, "4 host offsets besides offsets_on_device (buffer 'layout')");
  // Offsets past the cache (counts that are not the chunks'): the kernel's bounds check.
  ChunkPartitionOp past = op_with(32);
  std::vector<uint64_t> words = {0, 1, 3, 4};
  for (size_t i = 0; i < words.size(); ++i) store(past.offsets_on_device, 8, i, words[i]);
  EXPECT_THROW(ops.run(past), RuntimeError);
}

TEST(CpuPartition, OneSegmentEveryWidthFanoutAndSize) {
  for (int threads : {1, 3}) {
    CpuOps ops(threads);
    for (TupleFormat fmt : all_formats())
      for (uint64_t n : {0ull, 1ull, 17ull, 5001ull, 300007ull})
        for (PartitionFn fn : partition_fns()) {
          SCOPED_TRACE(name_of(fmt) + " n=" + std::to_string(n) + " bits=" + std::to_string(fn.bits) +
                       (fn.kind == PartitionFn::Hash ? " hash" : " radix") + " threads=" + std::to_string(threads));
          auto keys = random_keys(n, 0, fmt.key_bytes, n * 31 + fn.bits);
          auto vals = random_vals(n, fmt.val_bytes, n);
          Tuples in = ops.tuples(keys, vals, fmt, /*pad=*/n % 3);
          Tuples out = ops.empty_tuples(n, fmt);
          OpResult r = ops.run(PartitionOp{in, {}, fn, out});
          check_partitioned(keys, vals, {0, n}, fn, out, r.values);
        }
  }
}

TEST(CpuPartition, LargeOutputTakesTheStreamingPathAndUnalignedViewsDoNot) {
  CpuOps ops(2);
  const uint64_t n = 1500000;  // 24 MB of K8V8 output: non-temporal stores
  PartitionFn fn;
  fn.bits = 10;
  auto keys = random_keys(n, 0, 8, 5);
  auto vals = random_vals(n, 8, 6);
  Tuples in = ops.tuples(keys, vals, {8, 8});
  for (uint64_t pad : {0ull, 1ull}) {
    Tuples out = ops.empty_tuples(n + pad, {8, 8}).slice(pad, n);
    out.capacity = n;
    OpResult r = ops.run(PartitionOp{in, {}, fn, out});
    check_partitioned(keys, vals, {0, n}, fn, out, r.values);
  }
}

TEST(CpuPartition, SegmentsArePartitionedOnTheirOwn) {
  CpuOps ops(2);
  for (TupleFormat fmt : {TupleFormat{4, 8}, TupleFormat{8, 4}}) {
    const uint64_t n = 200000;
    auto keys = random_keys(n, 0, fmt.key_bytes, 11);
    auto vals = random_vals(n, fmt.val_bytes, 12);
    Tuples in = ops.tuples(keys, vals, fmt);
    // One big segment (partitioned by the whole team), many small ones, empty ones.
    std::vector<uint64_t> segs{0, 150000, 150000, 150001};
    for (uint64_t s = 151000; s < n; s += 1000) segs.push_back(s);
    segs.push_back(n);
    for (PartitionFn fn : partition_fns()) {
      Tuples out = ops.empty_tuples(n, fmt);
      OpResult r = ops.run(PartitionOp{in, segs, fn, out});
      check_partitioned(keys, vals, segs, fn, out, r.values);
    }
    // Segments that start past row 0: the output still starts at out row 0.
    const std::vector<uint64_t> inner{1000, 4000, 4000, 90001};
    Tuples out = ops.empty_tuples(inner.back() - inner.front(), fmt);
    PartitionFn fn;
    fn.bits = 5;
    OpResult r = ops.run(PartitionOp{in, inner, fn, out});
    check_partitioned(keys, vals, inner, fn, out, r.values);
  }
}

TEST(CpuPartition, FanoutsBeyondTheCacheTakeTwoPasses) {
  CpuOps ops(2);
  const uint64_t n = 70000;
  PartitionFn fn;
  fn.bits = cpu::max_one_pass_bits(4, 4) + 3;
  auto keys = random_keys(n, 0, 4, 3);
  auto vals = random_vals(n, 4, 4);
  Tuples in = ops.tuples(keys, vals, {4, 4});
  Tuples out = ops.empty_tuples(n, {4, 4});
  OpResult r = ops.run(PartitionOp{in, {}, fn, out});
  check_partitioned(keys, vals, {0, n}, fn, out, r.values);
}

TEST(CpuPartition, RejectsBadArguments) {
  CpuOps ops;
  auto keys = random_keys(100, 0, 4, 1);
  Tuples in = ops.tuples(keys, keys, {4, 4});
  PartitionFn fn;
  fn.bits = 4;
  Tuples small = ops.empty_tuples(50, {4, 4});
  EXPECT_THROW(ops.run(PartitionOp{in, {}, fn, small}), RuntimeError);
  Tuples out = ops.empty_tuples(100, {4, 4});
  try {
    ops.run(PartitionOp{in, {0, 60, 40, 100}, fn, out});
    FAIL() << "descending segments accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("not ascending"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops.run(PartitionOp{in, {0, 101}, fn, out}), RuntimeError);
}

// --- hash tables ---------------------------------------------------------------------------------

struct JoinInputs {
  std::vector<uint64_t> rk, rv, sk, sv;
};
// R and S with duplicates on both sides (m:n), keys absent from the other side, and a domain
// that spans the key width.
JoinInputs join_inputs(uint64_t nr, uint64_t ns, const Widths& w, uint64_t seed, uint64_t domain = 0) {
  if (!domain) domain = std::max<uint64_t>(4, (nr + ns) / 2);
  JoinInputs in;
  in.rk = random_keys(nr, domain, w.key, seed);
  in.sk = random_keys(ns, domain, w.key, seed + 1);
  in.rv = random_vals(nr, w.rval, seed + 2);
  in.sv = random_vals(ns, w.sval, seed + 3);
  if (w.key == 8)  // exercise the high bits too
    for (auto* v : {&in.rk, &in.sk})
      for (auto& k : *v) k = k * 0x9e3779b97f4a7c15ULL % 0xfffffffffffffff0ULL;
  return in;
}

TEST(CpuHashJoin, BuildAndProbeEveryWidthKindModeAndSize) {
  CpuOps ops(2);
  for (const Widths& w : all_join_widths())
    for (TableKind kind : {TableKind::LinearProbing, TableKind::Chained, TableKind::HashRowId})
      for (auto [nr, ns] : {std::pair<uint64_t, uint64_t>{0, 5}, {1, 1}, {5, 0}, {333, 1001}, {40000, 70001}}) {
        SCOPED_TRACE(name_of(w) + " " + to_string(kind) + " |R|=" + std::to_string(nr) + " |S|=" +
                     std::to_string(ns));
        JoinInputs in = join_inputs(nr, ns, w, nr * 7 + ns);
        TupleFormat rf{uint8_t(w.key), uint8_t(w.rval)}, sf{uint8_t(w.key), uint8_t(w.sval)};
        HashTable table = ops.rank().alloc_table(MemSpace::Device, kind, rf, nr, 0.5, 1234, "table");
        OpResult b = ops.run(BuildOp{ops.tuples(in.rk, in.rv, rf), &table});
        EXPECT_EQ(b.count, nr);
        EXPECT_EQ(table.rows, nr);
        Tuples probe = ops.tuples(in.sk, in.sv, sf, 1);
        check_join_modes(ops, reference_join(in.rk, in.rv, in.sk, in.sv), rf, sf,
                         [&](JoinOutput out, uint64_t first, OutputMode mode) {
                           return ProbeOp{&table, probe, out, first, mode};
                         }, "probe");
      }
}

TEST(CpuHashJoin, LargeDirectOutputTakesTheStreamingPath) {
  CpuOps ops(2);
  const Widths w{8, 8, 8};  // 24-byte rows: 400k of them are past the streaming threshold
  JoinInputs in = join_inputs(400000, 400000, w, 99, 1ull << 40);
  for (uint64_t i = 0; i < in.sk.size(); ++i) in.sk[i] = in.rk[(i * 7919) % in.rk.size()];
  TupleFormat f{8, 8};
  HashTable table = ops.rank().alloc_table(MemSpace::Device, TableKind::LinearProbing, f, in.rk.size(), 0.5, 3, "t");
  ops.run(BuildOp{ops.tuples(in.rk, in.rv, f), &table});
  const auto want = reference_join(in.rk, in.rv, in.sk, in.sv);
  for (uint64_t first : {0ull, 5ull}) {  // aligned and unaligned output starts
    JoinOutput out = ops.output(first + want.size(), f, f);
    OpResult r = ops.run(ProbeOp{&table, ops.tuples(in.sk, in.sv, f), out, first, OutputMode::Direct});
    EXPECT_EQ(r.count, want.size());
    EXPECT_EQ(CpuOps::rows_of(out, first, want.size()), want);
  }
}

TEST(CpuHashJoin, LinearTableSlotsFollowTheSharedSlotFunction) {
  CpuOps ops(1);
  std::vector<uint64_t> keys{5, 77, 1000, 5};
  HashTable t = ops.rank().alloc_table(MemSpace::Device, TableKind::LinearProbing, {8, 8}, 4, 0.25, 99, "t");
  ops.run(BuildOp{ops.tuples(keys, {1, 2, 3, 4}, {8, 8}), &t});
  std::map<uint64_t, int> seen;
  for (uint64_t k : keys) {  // each key sits in the cluster that starts at its home slot
    uint64_t s = table_slot(k, 99, t.slots);
    while (load(t.keys, 8, s) != k || seen[s]) s = (s + 1) & (t.slots - 1);
    seen[s] = 1;
  }
  uint64_t empty = 0;
  for (uint64_t s = 0; s < t.slots; ++s) empty += load(t.keys, 8, s) == ~0ULL;
  EXPECT_EQ(empty, t.slots - keys.size());
}

TEST(CpuHashJoin, HashRowIdSlotsHoldTagAndRowIdInTheSharedLayout) {
  CpuOps ops(1);
  std::vector<uint64_t> keys{5, 77, 1000, 5, 0xfffffffffffffff0ULL};
  HashTable t = ops.rank().alloc_table(MemSpace::Device, TableKind::HashRowId, {8, 8}, 5, 0.25, 99, "t");
  EXPECT_EQ(t.heads->bytes, t.slots * 8) << "8 bytes per slot whatever the tuple width";
  EXPECT_FALSE(t.keys) << "no copy of the build rows";
  Tuples r = ops.tuples(keys, {1, 2, 3, 4, 5}, {8, 8});
  ops.run(BuildOp{r, &t});
  EXPECT_EQ(t.keys, r.keys);  // row ids index the build relation itself
  std::map<uint64_t, int> seen;
  for (uint64_t row = 0; row < keys.size(); ++row) {  // row's word sits in the cluster of its home slot
    const uint64_t h = table_hash(keys[row], 99);
    const uint64_t want = uint64_t(tag_of_hash(h)) << 32 | row;
    uint64_t s = slot_of_hash(h, t.slots), steps = 0;
    while (data_of<uint64_t>(t.heads)[s] != want && steps++ < t.slots) {
      EXPECT_NE(data_of<uint64_t>(t.heads)[s], ~0ULL) << "an empty slot before row " << row;
      s = (s + 1) & (t.slots - 1);
    }
    EXPECT_LT(steps, t.slots) << "row " << row << " is not in the table";
    seen[s] = 1;
  }
  uint64_t empty = 0;
  for (uint64_t s = 0; s < t.slots; ++s) empty += data_of<uint64_t>(t.heads)[s] == ~0ULL;
  EXPECT_EQ(empty, t.slots - keys.size());
  EXPECT_EQ(seen.size(), keys.size());
}

TEST(CpuHashJoin, HashRowIdBuildsInPiecesOfOneRelationOnly) {
  CpuOps ops(2);
  JoinInputs a = join_inputs(5000, 7000, {4, 8, 4}, 11);
  Tuples r = ops.tuples(a.rk, a.rv, {4, 8});
  HashTable t = ops.rank().alloc_table(MemSpace::Device, TableKind::HashRowId, {4, 8}, 5000, 0.5, 7, "t");
  ops.run(BuildOp{r.slice(0, 1234), &t});
  ops.run(BuildOp{r.slice(1234, 5000 - 1234), &t});
  EXPECT_EQ(t.rows, 5000u);
  const auto want = reference_join(a.rk, a.rv, a.sk, a.sv);
  JoinOutput out = ops.output(want.size(), {4, 8}, {4, 4});
  OpResult got = ops.run(ProbeOp{&t, ops.tuples(a.sk, a.sv, {4, 4}), out, 0, OutputMode::CountThenWrite});
  EXPECT_EQ(got.count, want.size());
  EXPECT_EQ(CpuOps::rows_of(out, 0, got.count), want);
  // A table built from a slice that starts mid-relation: row ids count from that slice.
  HashTable u = ops.rank().alloc_table(MemSpace::Device, TableKind::HashRowId, {4, 8}, 5000, 0.5, 8, "u");
  ops.run(BuildOp{r.slice(1000, 2000), &u});
  std::vector<uint64_t> rk(a.rk.begin() + 1000, a.rk.begin() + 3000), rv(a.rv.begin() + 1000, a.rv.begin() + 3000);
  EXPECT_EQ(ops.run(ProbeOp{&u, ops.tuples(a.sk, a.sv, {4, 4}), JoinOutput{}, 0, OutputMode::CountOnly}).count,
            reference_join(rk, rv, a.sk, a.sv).size());
  // Rows of another relation, or a gap in this one: row ids would be ambiguous.
  for (Tuples bad : {ops.tuples(a.rk, a.rv, {4, 8}).slice(3000, 10), r.slice(3001, 10)}) {
    try {
      ops.run(BuildOp{bad, &u});
      FAIL() << "a build that does not continue the table's relation was accepted";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("hash_rowid"), std::string::npos) << e.what();
    }
  }
  // More rows than slots.
  JoinInputs big = join_inputs(u.slots + 1, 0, {4, 8, 4}, 3);
  u.rows = 0;
  try {
    ops.run(BuildOp{ops.tuples(big.rk, big.rv, {4, 8}), &u});
    FAIL() << "overfull build accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("full"), std::string::npos) << e.what();
  }
}

TEST(CpuHashJoin, SecondBuildAddsToTheTableAndAFullTableIsAnError) {
  CpuOps ops(2);
  for (TableKind kind : {TableKind::LinearProbing, TableKind::Chained}) {
    JoinInputs a = join_inputs(3000, 5000, {8, 4, 8}, 1), b = join_inputs(2000, 0, {8, 4, 8}, 2);
    HashTable t = ops.rank().alloc_table(MemSpace::Device, kind, {8, 4}, 5000, 0.5, 7, "t");
    ops.run(BuildOp{ops.tuples(a.rk, a.rv, {8, 4}), &t});
    ops.run(BuildOp{ops.tuples(b.rk, b.rv, {8, 4}), &t});
    EXPECT_EQ(t.rows, 5000u);
    auto rk = a.rk, rv = a.rv;
    rk.insert(rk.end(), b.rk.begin(), b.rk.end());
    rv.insert(rv.end(), b.rv.begin(), b.rv.end());
    const auto want = reference_join(rk, rv, a.sk, a.sv);
    JoinOutput out = ops.output(want.size(), {8, 4}, {8, 8});
    OpResult r = ops.run(ProbeOp{&t, ops.tuples(a.sk, a.sv, {8, 8}), out, 0, OutputMode::CountThenWrite});
    EXPECT_EQ(CpuOps::rows_of(out, 0, r.count), want);
    // A fresh table (rows = 0) is cleared before it is built again.
    t.rows = 0;
    ops.run(BuildOp{ops.tuples(b.rk, b.rv, {8, 4}), &t});
    OpResult again = ops.run(ProbeOp{&t, ops.tuples(a.sk, a.sv, {8, 8}), JoinOutput{}, 0, OutputMode::CountOnly});
    EXPECT_EQ(again.count, reference_join(b.rk, b.rv, a.sk, a.sv).size());
    // More rows than the table holds.
    auto big = join_inputs(t.slots + 1, 0, {8, 4, 4}, 3);
    t.rows = 0;
    try {
      ops.run(BuildOp{ops.tuples(big.rk, big.rv, {8, 4}), &t});
      FAIL() << "overfull build accepted";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("full"), std::string::npos) << e.what();
    }
  }
}

// --- partitioned join ---------------------------------------------------------------------------------

TEST(CpuPartitionedJoin, EveryWidthKindModeAndSkew) {
  CpuOps ops(2);
  for (const Widths& w : all_join_widths())
    for (TableKind kind : {TableKind::LinearProbing, TableKind::Chained})
      for (auto [nr, ns, bits] : {std::tuple<uint64_t, uint64_t, uint32_t>{0, 10, 2}, {1, 1, 0}, {777, 1234, 3},
                                  {30011, 50021, 6}}) {
        SCOPED_TRACE(name_of(w) + (kind == TableKind::Chained ? " chained" : " linear") + " |R|=" +
                     std::to_string(nr) + " |S|=" + std::to_string(ns));
        JoinInputs in = join_inputs(nr, ns, w, nr + ns * 3);
        TupleFormat rf{uint8_t(w.key), uint8_t(w.rval)}, sf{uint8_t(w.key), uint8_t(w.sval)};
        PartitionFn fn;
        fn.kind = PartitionFn::Hash;
        fn.bits = bits;
        Partitioned r, s;
        r.all = ops.empty_tuples(nr, rf);
        s.all = ops.empty_tuples(ns, sf);
        r.offsets = ops.run(PartitionOp{ops.tuples(in.rk, in.rv, rf), {}, fn, r.all}).values;
        s.offsets = ops.run(PartitionOp{ops.tuples(in.sk, in.sv, sf), {}, fn, s.all}).values;
        check_join_modes(ops, reference_join(in.rk, in.rv, in.sk, in.sv), rf, sf,
                         [&](JoinOutput out, uint64_t first, OutputMode mode) {
                           return PartitionedJoinOp{r, s, out, first, mode, kind};
                         }, "partitioned join");
      }
  // Skew: one S partition far larger than a thread's share is probed by all threads at once.
  for (TableKind kind : {TableKind::LinearProbing, TableKind::Chained}) {
    const uint64_t ns = 400000;
    JoinInputs in = join_inputs(20000, ns, {4, 4, 4}, 77, 20000);
    for (uint64_t i = 0; i < ns; i += 2) in.sk[i] = in.rk[5];  // half of S hits one key
    PartitionFn fn;
    fn.bits = 4;
    Partitioned r, s;
    r.all = ops.empty_tuples(in.rk.size(), {4, 4});
    s.all = ops.empty_tuples(ns, {4, 4});
    r.offsets = ops.run(PartitionOp{ops.tuples(in.rk, in.rv, {4, 4}), {}, fn, r.all}).values;
    s.offsets = ops.run(PartitionOp{ops.tuples(in.sk, in.sv, {4, 4}), {}, fn, s.all}).values;
    const auto want = reference_join(in.rk, in.rv, in.sk, in.sv);
    JoinOutput out = ops.output(want.size(), {4, 4}, {4, 4});
    OpResult res = ops.run(PartitionedJoinOp{r, s, out, 0, OutputMode::Direct, kind});
    EXPECT_EQ(res.count, want.size());
    EXPECT_EQ(CpuOps::rows_of(out, 0, want.size()), want);
  }
}

TEST(CpuPartitionedJoin, ClustersLongerThanAProbeWindowAndExtremeKeys) {
  CpuOps ops(2);
  for (const Widths& w : {Widths{4, 4, 8}, Widths{8, 8, 4}}) {
    JoinInputs in = join_inputs(3000, 3000, w, 5);
    const uint64_t top = width_mask(w.key) - 1;  // the largest key that is not reserved
    for (uint64_t i = 0; i < 200; ++i) in.rk[i * 7] = 42;  // one key 200 times in R
    for (uint64_t i = 0; i < 30; ++i) in.sk[i * 11] = 42;
    in.rk[1] = in.sk[2] = 0;
    in.rk[3] = in.sk[4] = top;
    TupleFormat rf{uint8_t(w.key), uint8_t(w.rval)}, sf{uint8_t(w.key), uint8_t(w.sval)};
    for (TableKind kind : {TableKind::LinearProbing, TableKind::Chained}) {
      PartitionFn fn;
      fn.bits = 2;
      Partitioned r, s;
      r.all = ops.empty_tuples(in.rk.size(), rf);
      s.all = ops.empty_tuples(in.sk.size(), sf);
      r.offsets = ops.run(PartitionOp{ops.tuples(in.rk, in.rv, rf), {}, fn, r.all}).values;
      s.offsets = ops.run(PartitionOp{ops.tuples(in.sk, in.sv, sf), {}, fn, s.all}).values;
      check_join_modes(ops, reference_join(in.rk, in.rv, in.sk, in.sv), rf, sf,
                       [&](JoinOutput out, uint64_t first, OutputMode mode) {
                         return PartitionedJoinOp{r, s, out, first, mode, kind};
                       }, name_of(w) + (kind == TableKind::Chained ? " chained" : " linear"));
    }
  }
}

TEST(CpuPartitionedJoin, MismatchedFanoutsAreRejected) {
  CpuOps ops;
  Partitioned r, s;
  r.all = ops.empty_tuples(4, {4, 4});
  s.all = ops.empty_tuples(4, {4, 4});
  r.offsets = {0, 2, 4};
  s.offsets = {0, 1, 2, 4};
  EXPECT_THROW(ops.run(PartitionedJoinOp{r, s, JoinOutput{}, 0, OutputMode::CountOnly}), RuntimeError);
}

// --- sort and merge join ---------------------------------------------------------------------------------

TEST(CpuSort, RadixAndMergeSortEveryWidthAndSize) {
  CpuOps ops(2);
  for (SortAlgo algo : {SortAlgo::Radix, SortAlgo::Merge})
    for (TupleFormat fmt : all_formats())
      for (uint64_t n : {0ull, 1ull, 2ull, 1001ull, 250007ull})
        for (uint64_t domain : {0ull, 1ull, 1000ull, 1ull << 20}) {  // full width, all equal, few bits
          SCOPED_TRACE(std::string(algo == SortAlgo::Radix ? "radix " : "merge ") + name_of(fmt) +
                       " n=" + std::to_string(n) + " domain=" + std::to_string(domain));
          auto keys = random_keys(n, domain, fmt.key_bytes, n + domain);
          auto vals = random_vals(n, fmt.val_bytes, n);
          for (uint64_t i = 0; i < n; ++i) vals[i] = i;  // input position: checks stability
          Tuples in = ops.tuples(keys, vals, fmt, 1);
          Tuples out = ops.empty_tuples(n, fmt);
          EXPECT_EQ(ops.run(SortOp{in, out, algo}).count, n);
          std::vector<std::pair<uint64_t, uint64_t>> want;
          for (uint64_t i = 0; i < n; ++i) want.push_back({keys[i], vals[i]});
          std::stable_sort(want.begin(), want.end(), [](auto& a, auto& b) { return a.first < b.first; });
          auto ok = CpuOps::keys_of(out), ov = CpuOps::vals_of(out);
          for (uint64_t i = 0; i < n; ++i) {
            ASSERT_EQ(ok[i], want[i].first) << "row " << i;
            ASSERT_EQ(ov[i], want[i].second) << "row " << i;
          }
        }
}

TEST(CpuSort, InPlace) {
  CpuOps ops(2);
  for (SortAlgo algo : {SortAlgo::Radix, SortAlgo::Merge}) {
    auto keys = random_keys(100000, 0, 8, 9);
    Tuples t = ops.tuples(keys, keys, {8, 8});
    ops.run(SortOp{t, t, algo});
    std::sort(keys.begin(), keys.end());
    EXPECT_EQ(CpuOps::keys_of(t), keys);
    EXPECT_EQ(CpuOps::vals_of(t), keys);
  }
}

// The multiway merge equals a stable sort of the runs one after the other: keys in order, equal
// keys in run order and, within a run, in row order (the values say which row each key came
// from), whatever the number of runs (merged branch-free up to 8: spelled out up to 4, a tournament
// beyond; by a heap past 8) and threads, with empty runs, runs that end early and many duplicates.
TEST(CpuMultiwayMerge, EqualsAStableSortOfTheRunsInOrder) {
  std::mt19937_64 rng(7);
  for (size_t k : {size_t(1), size_t(2), size_t(3), size_t(4), size_t(5), size_t(6), size_t(7), size_t(8), size_t(9), size_t(33)})
    for (int threads : {1, 4})
      for (uint64_t domain : {uint64_t(5), uint64_t(1) << 40, uint64_t(0)}) {
        SCOPED_TRACE("runs " + std::to_string(k) + ", threads " + std::to_string(threads) + ", domain " +
                     std::to_string(domain));
        std::vector<std::vector<uint64_t>> keys(k), vals(k);
        std::vector<std::pair<uint64_t, uint64_t>> expected;
        for (size_t r = 0; r < k; ++r) {
          const uint64_t n = (r % 5 == 3) ? 0 : rng() % 5000;  // some runs empty
          // Domain 0: run r's keys in [1000 r, 1000 r + 3000), so runs end while others go on.
          for (uint64_t i = 0; i < n; ++i) keys[r].push_back(domain ? rng() % domain : 1000 * r + rng() % 3000);
          std::sort(keys[r].begin(), keys[r].end());
          for (uint64_t i = 0; i < n; ++i) {
            vals[r].push_back(uint64_t(r) << 32 | i);
            expected.push_back({keys[r][i], vals[r][i]});
          }
        }
        std::stable_sort(expected.begin(), expected.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        std::vector<cpu::ChunkIn<uint64_t, uint64_t>> runs;
        for (size_t r = 0; r < k; ++r) runs.push_back({keys[r].data(), vals[r].data(), keys[r].size()});
        std::vector<uint64_t> out_k(expected.size()), out_v(expected.size());
        cpu::multiway_merge(runs, out_k.data(), out_v.data(), threads);
        for (size_t i = 0; i < expected.size(); ++i) {
          ASSERT_EQ(out_k[i], expected[i].first) << "row " << i;
          ASSERT_EQ(out_v[i], expected[i].second) << "row " << i;
        }
      }
}

// MergeOp: the two runs' rows in key order (a multiset of (key, value) rows equal to a sort of both
// runs), for every width, empty runs and runs that are views into their buffers.
TEST(CpuMerge, TwoRunsEqualASortOfBoth) {
  CpuOps ops(3);
  std::mt19937_64 rng(11);
  for (TupleFormat fmt : {TupleFormat{4, 4}, TupleFormat{8, 8}, TupleFormat{8, 4}, TupleFormat{4, 8}})
    for (auto [na, nb] : {std::pair<uint64_t, uint64_t>{0, 0}, {0, 5}, {7, 0}, {1000, 3}, {4000, 5000}})
      for (uint64_t domain : {uint64_t(9), uint64_t(1) << 31}) {
        SCOPED_TRACE(std::to_string(fmt.key_bytes) + "+" + std::to_string(fmt.val_bytes) + " |a|=" +
                     std::to_string(na) + " |b|=" + std::to_string(nb) + " domain " + std::to_string(domain));
        auto run = [&](uint64_t n, uint64_t tag) {
          std::vector<uint64_t> k(n), v(n);
          for (uint64_t& x : k) x = rng() % domain;
          std::sort(k.begin(), k.end());
          for (uint64_t i = 0; i < n; ++i) v[i] = (tag << 20 | i) & (fmt.val_bytes == 4 ? 0xffffffffu : ~0ull);
          return std::pair{k, v};
        };
        const auto [ak, av] = run(na, 1);
        const auto [bk, bv] = run(nb, 2);
        std::vector<std::pair<uint64_t, uint64_t>> expected;
        for (uint64_t i = 0; i < na; ++i) expected.push_back({ak[i], av[i]});
        for (uint64_t i = 0; i < nb; ++i) expected.push_back({bk[i], bv[i]});
        std::sort(expected.begin(), expected.end());
        Tuples out = ops.empty_tuples(na + nb, fmt);
        EXPECT_EQ(ops.run(MergeOp{ops.tuples(ak, av, fmt, 3), ops.tuples(bk, bv, fmt), out}).count, na + nb);
        const auto ok = CpuOps::keys_of(out), ov = CpuOps::vals_of(out);
        ASSERT_TRUE(std::is_sorted(ok.begin(), ok.end()));
        std::vector<std::pair<uint64_t, uint64_t>> got;
        for (uint64_t i = 0; i < na + nb; ++i) got.push_back({ok[i], ov[i]});
        std::sort(got.begin(), got.end());
        ASSERT_EQ(got, expected);
      }
  Tuples small = ops.empty_tuples(2, {4, 4});
  EXPECT_THROW(ops.run(MergeOp{ops.tuples({1, 2}, {0, 0}, {4, 4}), ops.tuples({3}, {0}, {4, 4}), small}), RuntimeError);
}

// PivotSearchOp: the first t with x[t] <= y[t] (x descending, y ascending), against a scan: every
// answer from 0 to n, ties, and all-equal keys.
TEST(CpuPivotSearch, FirstProbeWhereLeftIsNotAboveRight) {
  CpuOps ops(2);
  std::mt19937_64 rng(5);
  for (uint8_t kb : {uint8_t(4), uint8_t(8)})
    for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(2), uint64_t(17), uint64_t(1024)})
      for (uint64_t domain : {uint64_t(1), uint64_t(3), uint64_t(1000)})
        for (int rep = 0; rep < 4; ++rep) {
          std::vector<uint64_t> x(n), y(n);
          for (uint64_t i = 0; i < n; ++i) x[i] = rng() % domain, y[i] = rng() % domain;
          std::sort(x.rbegin(), x.rend());
          std::sort(y.begin(), y.end());
          uint64_t expected = n;
          for (uint64_t t = 0; t < n && expected == n; ++t)
            if (x[t] <= y[t]) expected = t;
          Buffer bx = ops.rank().alloc(MemSpace::Device, std::max<uint64_t>(n, 1) * kb, "x");
          Buffer by = ops.rank().alloc(MemSpace::Device, std::max<uint64_t>(n, 1) * kb, "y");
          for (uint64_t i = 0; i < n; ++i) store(bx, kb, i, x[i]), store(by, kb, i, y[i]);
          ASSERT_EQ(ops.run(PivotSearchOp{bx, by, kb, n}).count, expected)
              << "n " << n << " domain " << domain << " key bytes " << int(kb);
        }
}

TEST(CpuMergeJoin, EveryWidthModeAndSizeWithDuplicatesOnBothSides) {
  CpuOps ops(3);
  for (const Widths& w : all_join_widths())
    for (auto [nr, ns] : {std::pair<uint64_t, uint64_t>{0, 3}, {1, 1}, {3, 0}, {500, 2000}, {60000, 9000},
                          {9000, 60000}}) {
      SCOPED_TRACE(name_of(w) + " |R|=" + std::to_string(nr) + " |S|=" + std::to_string(ns));
      JoinInputs in = join_inputs(nr, ns, w, nr + 5 * ns);
      TupleFormat rf{uint8_t(w.key), uint8_t(w.rval)}, sf{uint8_t(w.key), uint8_t(w.sval)};
      Tuples r = ops.empty_tuples(nr, rf), s = ops.empty_tuples(ns, sf);
      ops.run(SortOp{ops.tuples(in.rk, in.rv, rf), r, SortAlgo::Radix});
      ops.run(SortOp{ops.tuples(in.sk, in.sv, sf), s, SortAlgo::Merge});
      check_join_modes(ops, reference_join(in.rk, in.rv, in.sk, in.sv), rf, sf,
                       [&](JoinOutput out, uint64_t first, OutputMode mode) {
                         return MergeJoinOp{r, s, out, first, mode};
                       }, "merge join");
    }
}

TEST(CpuMergeJoin, LongRunsOfOneKey) {
  CpuOps ops(2);
  std::vector<uint64_t> rk(300, 5), sk(20000, 5), rv(300), sv(20000);
  rk.push_back(6);
  rv.push_back(1);
  for (uint64_t i = 0; i < sv.size(); ++i) sv[i] = i;
  Tuples r = ops.tuples(rk, rv, {4, 4}), s = ops.tuples(sk, sv, {4, 4});
  OpResult res = ops.run(MergeJoinOp{r, s, JoinOutput{}, 0, OutputMode::CountOnly});
  EXPECT_EQ(res.count, 300u * 20000u);
}

// --- gather, checksum, scan ---------------------------------------------------------------------------

TEST(CpuGather, EveryIdAndColumnWidth) {
  CpuOps ops(2);
  for (uint8_t ib : {4, 8})
    for (uint8_t cb : {4, 8})
      for (uint64_t n : {0ull, 1ull, 100003ull}) {
        const uint64_t base = 1000, column_rows = 5000;
        Buffer column = ops.rank().alloc(MemSpace::Device, column_rows * cb, "column");
        auto colv = random_vals(column_rows, cb, 1);
        for (uint64_t i = 0; i < column_rows; ++i) store(column, cb, i, colv[i]);
        Buffer ids = ops.rank().alloc(MemSpace::Device, n * ib, "ids");
        auto idv = random_keys(n, column_rows, 8, 2);
        for (uint64_t i = 0; i < n; ++i) store(ids, ib, i, idv[i] + base);
        Buffer out = ops.rank().alloc(MemSpace::Device, n * cb, "out");
        ops.run(GatherOp{ids, ib, column, cb, base, n, out});
        for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(load(out, cb, i), colv[idv[i]]) << "row " << i;
        if (n) {  // an id below base_row
          store(ids, ib, n / 2, base - 1);
          try {
            ops.run(GatherOp{ids, ib, column, cb, base, n, out});
            FAIL() << "out-of-range id accepted";
          } catch (const RuntimeError& e) {
            EXPECT_NE(std::string(e.what()).find("999"), std::string::npos) << e.what();
          }
        }
      }
}

TEST(CpuChecksum, MatchesTheDigestOverKeyThenColumns) {
  CpuOps ops(2);
  for (uint8_t kb : {4, 8})
    for (uint64_t n : {0ull, 1ull, 77777ull}) {
      const uint64_t first = 5, total = first + n;
      auto keys = random_keys(total, 0, kb, 3);
      auto c0 = random_vals(total, 4, 4), c1 = random_vals(total, 8, 5), c2 = random_vals(total, 4, 6);
      Buffer kbuf = ops.rank().alloc(MemSpace::Device, total * kb, "k");
      Buffer b0 = ops.rank().alloc(MemSpace::Device, total * 4, "c0");
      Buffer b1 = ops.rank().alloc(MemSpace::Device, total * 8, "c1");
      Buffer b2 = ops.rank().alloc(MemSpace::Device, total * 4, "c2");
      for (uint64_t i = 0; i < total; ++i) {
        store(kbuf, kb, i, keys[i]);
        store(b0, 4, i, c0[i]);
        store(b1, 8, i, c1[i]);
        store(b2, 4, i, c2[i]);
      }
      uint64_t want = 0;
      for (uint64_t i = first; i < total; ++i)
        want += digest_add(digest_add(digest_add(digest_begin(keys[i]), c0[i], 0), c1[i], 1), c2[i], 2);
      OpResult r = ops.run(ChecksumOp{kbuf, kb, {b0, b1, b2}, {4, 8, 4}, first, n});
      EXPECT_EQ(r.count, n);
      EXPECT_EQ(r.checksum, want) << "key width " << int(kb) << " n=" << n;
      // The common two-column case equals row_digest.
      uint64_t rd = 0;
      for (uint64_t i = first; i < total; ++i) rd += row_digest(keys[i], c0[i], c1[i]);
      EXPECT_EQ(ops.run(ChecksumOp{kbuf, kb, {b0, b1}, {4, 8}, first, n}).checksum, rd);
    }
}

TEST(CpuScan, ExclusivePrefixSumInAndOutOfPlace) {
  CpuOps ops(3);
  for (uint64_t n : {0ull, 1ull, 5ull, 1000003ull}) {
    auto v = random_vals(n, 4, n);
    Buffer in = ops.rank().alloc(MemSpace::Device, n * 8, "in");
    Buffer out = ops.rank().alloc(MemSpace::Device, n * 8, "out");
    for (uint64_t i = 0; i < n; ++i) store(in, 8, i, v[i]);
    ops.run(ScanOp{in, out, n});
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_EQ(load(out, 8, i), acc) << "row " << i;
      acc += v[i];
    }
    ops.run(ScanOp{in, in, n});
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(load(in, 8, i), load(out, 8, i)) << "in place, row " << i;
  }
}

TEST(CpuOps, ViewsPastTheirBuffersAreRejectedNamingTheBuffer) {
  CpuOps ops;
  Tuples t = ops.empty_tuples(10, {4, 4});
  t.rows = 11;
  t.capacity = 11;
  try {
    ops.run(HistogramOp{t, PartitionFn{}});
    FAIL() << "view past its buffer accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("'out.keys'"), std::string::npos) << e.what();
  }
}

// Sorted keys in [1, range] with a hot key (hot_rows copies of `hot`) mixed in.
std::vector<uint64_t> sorted_keys(uint64_t n, uint64_t range, uint64_t hot, uint64_t hot_rows, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> v(n);
  for (auto& k : v) k = 1 + rng() % range;
  v.insert(v.end(), hot_rows, hot);
  std::sort(v.begin(), v.end());
  return v;
}

// R rows [0, r) and S rows [0, s) hold every key below the key after the cut and none of it or above.
void expect_key_boundary(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b, CoRank c) {
  if (c.r + c.s == 0) return;
  const uint64_t lo = std::max(c.r ? a[c.r - 1] : 0, c.s ? b[c.s - 1] : 0);
  uint64_t hi = ~0ULL;
  if (c.r < a.size()) hi = std::min(hi, a[c.r]);
  if (c.s < b.size()) hi = std::min(hi, b[c.s]);
  EXPECT_LT(lo, hi) << "cut (" << c.r << ", " << c.s << ") splits key " << hi;
}

TEST(MergePath, CoRanksAreTheStableMergesPrefixes) {
  for (auto [na, nb, range] : {std::tuple{0, 5, 3}, {5, 0, 3}, {1, 1, 1}, {300, 500, 40}, {257, 31, 1000}}) {
    const auto a = sorted_keys(uint64_t(na), uint64_t(range), 1, 0, 1), b = sorted_keys(uint64_t(nb), uint64_t(range), 1, 0, 2);
    // The stable merge, a's rows first among equal keys: how many of a lie among the first d.
    std::vector<std::pair<uint64_t, int>> m;
    for (uint64_t k : a) m.push_back({k, 0});
    for (uint64_t k : b) m.push_back({k, 1});
    std::stable_sort(m.begin(), m.end(), [](auto& x, auto& y) { return x.first < y.first; });
    uint64_t from_a = 0;
    for (uint64_t d = 0; d <= m.size(); ++d) {
      const CoRank c = co_rank(a.data(), a.size(), b.data(), b.size(), d);
      ASSERT_EQ(c.r, from_a) << "diagonal " << d;
      ASSERT_EQ(c.r + c.s, d);
      if (d < m.size()) from_a += m[d].second == 0;
    }
  }
}

// A hot key straddling the cuts on both sides (R rows and S rows of it on either side of the
// diagonal): every cut moves back to the key's first row on both sides.
TEST(MergePath, KeyCutsMoveStraddlingKeysWhole) {
  const std::vector<uint32_t> a = {1, 2, 2, 2, 2, 2, 3, 5}, b = {0, 2, 2, 2, 2, 2, 2, 2, 4};
  const auto wide = [](const std::vector<uint32_t>& v) { return std::vector<uint64_t>(v.begin(), v.end()); };
  for (uint64_t d = 0; d <= a.size() + b.size(); ++d) {
    const CoRank c = key_cut(a.data(), a.size(), b.data(), b.size(), d);
    expect_key_boundary(wide(a), wide(b), c);
    const CoRank exact = co_rank(a.data(), a.size(), b.data(), b.size(), d);
    EXPECT_LE(c.r, exact.r);
    EXPECT_LE(c.s, exact.s);
    // Merge rows 2 to 13 are key 2 (12 rows): a cut inside them moves to its first row on both sides.
    if (d >= 2 && d <= 13) {
      EXPECT_EQ(c, (CoRank{1, 1})) << "diagonal " << d;
    }
  }
  EXPECT_EQ(key_end(a.data(), a.size(), b.data(), b.size(), CoRank{1, 1}), (CoRank{6, 8}));
  for (int seed = 0; seed < 20; ++seed) {
    const auto x = sorted_keys(400, 60, 7, 150, uint32_t(seed)), y = sorted_keys(600, 60, 7, 300, uint32_t(seed + 100));
    for (uint64_t d = 0; d <= x.size() + y.size(); d += 7) expect_key_boundary(x, y, key_cut(x.data(), x.size(), y.data(), y.size(), d));
  }
}

// Parts of a join with hot keys, some too large for one part: every matching (R row, S row) pair
// lies in exactly one piece, and no piece is over the limit.
TEST(MergePath, PartsJoinEveryPairOnceWithinTheirRows) {
  auto tuples = [](std::vector<uint64_t>& v, std::vector<uint32_t>& narrow, uint8_t key_bytes) {
    auto b = std::make_shared<BufferImpl>();
    narrow.assign(v.begin(), v.end());
    b->ptr = key_bytes == 4 ? static_cast<void*>(narrow.data()) : static_cast<void*>(v.data());
    b->bytes = v.size() * key_bytes;
    Tuples t;
    t.keys = b;
    t.rows = t.capacity = v.size();
    t.fmt = {key_bytes, 4};
    return t;
  };
  struct Case {
    uint64_t na, nb, range, hot_r, hot_s, min_parts, max_rows;
  };
  for (uint8_t key_bytes : {uint8_t(4), uint8_t(8)})
    for (Case k : {Case{2000, 3000, 500, 300, 500, 3, 256}, Case{2000, 3000, 500, 1, 900, 3, 256},
                   Case{2000, 3000, 500, 900, 0, 3, 256}, Case{1000, 1000, 4, 0, 0, 1, 100},
                   Case{5000, 5000, 1u << 30, 0, 0, 4, 1u << 20}, Case{3, 0, 10, 0, 0, 2, 2}}) {
      SCOPED_TRACE(std::to_string(k.na) + " x " + std::to_string(k.nb) + " range " + std::to_string(k.range) +
                   ", max_rows " + std::to_string(k.max_rows) + ", key bytes " + std::to_string(key_bytes));
      auto a = sorted_keys(k.na, k.range, 9, k.hot_r, 11), b = sorted_keys(k.nb, k.range, 9, k.hot_s, 12);
      std::vector<uint32_t> a4, b4;
      const std::vector<JoinPiece> parts = merge_path_parts(tuples(a, a4, key_bytes), tuples(b, b4, key_bytes), k.min_parts, k.max_rows);
      std::map<uint64_t, uint64_t> in_a, in_b;
      for (uint64_t x : a) ++in_a[x];
      for (uint64_t x : b) ++in_b[x];
      uint64_t want = 0;
      for (auto [x, n] : in_a) want += n * (in_b.count(x) ? in_b[x] : 0);
      std::set<std::pair<uint64_t, uint64_t>> seen;
      for (const JoinPiece& p : parts) {
        EXPECT_LE(p.rows(), k.max_rows);
        for (uint64_t i = p.r_first; i < p.r_first + p.r_rows; ++i)
          for (uint64_t j = p.s_first; j < p.s_first + p.s_rows; ++j)
            if (a[i] == b[j]) {
              EXPECT_TRUE(seen.insert({i, j}).second) << "pair " << i << ", " << j << " joined twice";
            }
      }
      EXPECT_EQ(seen.size(), want);
      if (k.range == 1u << 30) {  // unique-ish keys and room to spare: min_parts near-equal parts
        ASSERT_EQ(parts.size(), k.min_parts);
        for (const JoinPiece& p : parts) EXPECT_NEAR(double(p.rows()), 2500.0, 2.0);
      }
    }
  EXPECT_THROW(merge_path_parts(Tuples{}, Tuples{}, 1, 1), RuntimeError);
}

}  // namespace
}  // namespace joinlab
