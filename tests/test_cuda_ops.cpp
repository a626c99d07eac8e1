// Every CUDA operator against the CPU backend's, on fresh generated inputs of several sizes,
// distributions and widths: the same body runs on both backends and must observe the same
// counts, checksums, offsets and values (order inside outputs and partitions is free, so rows
// are compared through order-independent checksums, per partition where partitions matter).
#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>

#include "core/common/error.hpp"
#include "core/exec/rank.hpp"
#include "core/workload/generate.hpp"
#include "kernels/cpu/codec.hpp"
#include "tests/codec_test_util.hpp"
#include "tests/cuda_test_util.hpp"
#include "tests/device_layout_util.hpp"
#include "tests/test_workloads.hpp"

namespace joinlab {
namespace {

using test::on_backend;
using Obs = std::vector<uint64_t>;

RelationSpec spec(const std::string& name, uint64_t rows, KeyDist dist, uint8_t kb, uint8_t vb, uint64_t seed) {
  RelationSpec s;
  s.name = name;
  s.rows = rows;
  s.key_bytes = kb;
  s.payload_bytes = {vb};
  s.dist = dist;
  s.seed = seed;
  if (dist == KeyDist::Uniform) {
    s.range_lo = 1;
    s.range_hi = std::max<uint64_t>(2, rows / 3);  // duplicates
  }
  if (dist == KeyDist::Zipf) s.zipf_z = 1.0;
  return s;
}

Tuples generate(Rank& rank, const RelationSpec& sp, const RelationSpec* ref, const std::string& tag,
               MemSpace space = MemSpace::Device) {
  Tuples t = rank.alloc_tuples(space, sp.rows, {sp.key_bytes, sp.payload_bytes[0]}, tag);
  GenerateOp g;
  g.spec = sp;
  g.referenced = ref;
  g.out = t;
  rank.launch(Stream{0}, g).get();
  return t;
}

// Count and checksum of rows [first, first + rows) of (keys, values...).
std::pair<uint64_t, uint64_t> digest(Rank& rank, const Buffer& keys, uint8_t kb, std::vector<Buffer> cols,
                                     std::vector<uint8_t> widths, uint64_t first, uint64_t rows) {
  ChecksumOp c;
  c.keys = keys;
  c.key_bytes = kb;
  c.columns = std::move(cols);
  c.column_bytes = std::move(widths);
  c.first = first;
  c.rows = rows;
  const OpResult r = rank.launch(Stream{0}, c).get();
  return {r.count, r.checksum};
}
std::pair<uint64_t, uint64_t> digest(Rank& rank, const Tuples& t, uint64_t first, uint64_t rows) {
  return digest(rank, t.keys, t.fmt.key_bytes, {t.vals}, {t.fmt.val_bytes}, t.offset + first, rows);
}
void add(Obs& o, std::pair<uint64_t, uint64_t> d) {
  o.push_back(d.first);
  o.push_back(d.second);
}

// Runs `body` on both backends and compares what they observed.
template <class Body>
void same_on_both(Body body, const std::string& what) {
  const Obs cpu = on_backend("cpu", body);
  const Obs gpu = on_backend("cuda", body);
  ASSERT_FALSE(cpu.empty()) << what;
  ASSERT_EQ(cpu.size(), gpu.size()) << what;
  for (size_t i = 0; i < cpu.size(); ++i) ASSERT_EQ(cpu[i], gpu[i]) << what << ": observation " << i << " differs";
}

const uint64_t kSizes[] = {1, 777, 100003, 1500000};

TEST(CudaOps, GenerateMatchesCpuForEveryDistribution) {
  JL_REQUIRE_GPU();
  for (uint64_t n : kSizes)
    for (KeyDist d : {KeyDist::UniqueDense, KeyDist::UniqueSparse, KeyDist::Uniform, KeyDist::Zipf, KeyDist::ForeignKey})
      for (uint8_t kb : {4, 8}) {
        const RelationSpec r = spec("R", n, KeyDist::UniqueDense, kb, 4, 7);
        RelationSpec s = spec("S", n, d, kb, 8, 11);
        s.match_rate = 0.5;
        s.zipf_z = d == KeyDist::ForeignKey ? 1.0 : s.zipf_z;
        same_on_both(
            [&](Rank& rank) {
              Obs o;
              add(o, digest(rank, generate(rank, s, &r, "S"), 0, n));
              return o;
            },
            "generate " + std::string(to_string(d)) + " rows " + std::to_string(n) + " key bytes " + std::to_string(kb));
      }
}

// Lineitem blocks that start inside an order and at the last rows, in device and pinned memory
// (both written by the kernels, by runs of orders).
TEST(CudaOps, GenerateTpchLineitemBlocksMatchesCpu) {
  JL_REQUIRE_GPU();
  for (uint8_t kb : {4, 8}) {
    const Workload w = test::tpch(0.1, kb);
    for (RowRange block : {RowRange{0, w.s.rows}, RowRange{123457, 123457 + 50000}, RowRange{4000, 4001},
                           RowRange{w.s.rows - 9, w.s.rows}})
      for (MemSpace space : {MemSpace::Device, MemSpace::Pinned})
        for (bool rowid : {false, true})
          same_on_both(
              [&](Rank& rank) {
                GenerateOp g;
                g.spec = w.s;
                g.referenced = &w.r;
                g.first_row = block.begin;
                g.value_is_rowid = rowid;
                g.out = rank.alloc_tuples(space, block.size(), {kb, uint8_t(rowid ? 8 : 4)}, "lineitem");
                rank.launch(Stream{0}, g).get();
                Obs o;
                add(o, digest(rank, g.out, 0, block.size()));
                return o;
              },
              "tpch_lineitem rows " + std::to_string(block.begin) + ".." + std::to_string(block.end) + " in " +
                  to_string(space) + (rowid ? ", row ids" : ""));
  }
}

TEST(CudaOps, HistogramMatchesCpu) {
  JL_REQUIRE_GPU();
  for (uint64_t n : kSizes)
    for (PartitionFn fn : {PartitionFn{PartitionFn::Radix, 6, 0, 0}, PartitionFn{PartitionFn::Radix, 10, 3, 0},
                           PartitionFn{PartitionFn::Hash, 9, 0, 99}, PartitionFn{PartitionFn::Radix, 16, 0, 0}})
      same_on_both(
          [&](Rank& rank) {
            Tuples t = generate(rank, spec("R", n, KeyDist::UniqueSparse, 4, 4, 3), nullptr, "R");
            return rank.launch(Stream{0}, HistogramOp{t, fn}).get().values;
          },
          "histogram bits " + std::to_string(fn.bits));
}

// With in_ranges (apart, out of order, one empty), in device and in pinned memory: the counts of a
// HistogramOp of each range's slice, as on the CPU backend.
TEST(CudaOps, HistogramInRangesMatchesCpuAndPerRangeHistograms) {
  JL_REQUIRE_GPU();
  for (uint64_t n : kSizes)
    for (MemSpace space : {MemSpace::Device, MemSpace::Pinned}) {
      const PartitionFn fn{PartitionFn::Radix, 11, 1, 0};
      const std::vector<RowRange> ranges = {{n / 2, n - n / 4}, {0, n / 3}, {n / 5, n / 5}, {n - n / 9, n}};
      same_on_both(
          [&](Rank& rank) {
            const Tuples t = generate(rank, spec("R", n, KeyDist::Zipf, 8, 8, 3), nullptr, "R", space);
            HistogramOp h{t, fn};
            h.in_ranges = ranges;
            const Obs counts = rank.launch(Stream{0}, h).get().values;
            Obs per_range;
            for (const RowRange& r : ranges) {
              const Obs c = rank.launch(Stream{0}, HistogramOp{t.slice(r.begin, r.size()), fn}).get().values;
              per_range.insert(per_range.end(), c.begin(), c.end());
            }
            EXPECT_EQ(counts, per_range) << rank.backend() << " in " << to_string(space);
            return counts;
          },
          "histogram in ranges, n " + std::to_string(n) + " in " + to_string(space));
    }
}

// With in_segments, in device memory (one launch for all segments) and in host memory (the CPU kernel on
// the rank's host lane, as gpj's senders count their batches): k * fanout counts, segment-major,
// those of a HistogramOp of each segment's slice.
TEST(CudaOps, HistogramInSegmentsMatchesCpuAndPerSegmentHistograms) {
  JL_REQUIRE_GPU();
  for (uint64_t n : kSizes)
    for (MemSpace space : {MemSpace::Device, MemSpace::Pinned})
      for (PartitionFn fn : {PartitionFn{PartitionFn::Radix, 6, 0, 0}, PartitionFn{PartitionFn::Hash, 9, 0, 99}}) {
        const std::vector<uint64_t> segs = {n / 7, n / 3, n / 3, n / 2, n - n / 5};
        same_on_both(
            [&](Rank& rank) {
              const Tuples t = generate(rank, spec("R", n, KeyDist::Zipf, 4, 4, 3), nullptr, "R", space);
              const Obs counts = rank.launch(Stream{0}, HistogramOp{t, fn, segs}).get().values;
              Obs per_segment;
              for (size_t s = 0; s + 1 < segs.size(); ++s) {
                const Obs c = rank.launch(Stream{0}, HistogramOp{t.slice(segs[s], segs[s + 1] - segs[s]), fn}).get().values;
                per_segment.insert(per_segment.end(), c.begin(), c.end());
              }
              EXPECT_EQ(counts, per_segment) << rank.backend() << " in " << to_string(space);
              return counts;
            },
            "histogram in segments, n " + std::to_string(n) + " in " + to_string(space) + " bits " + std::to_string(fn.bits));
      }
  // Bad segments are errors naming them, on the device as on the host (a fresh rank each: a
  // failed host job fails the later work of its stream).
  for (MemSpace space : {MemSpace::Device, MemSpace::Pinned})
    for (auto [segs, what] : {std::pair<std::vector<uint64_t>, std::string>{{0, 50, 40, 100}, "not ascending at index 2"},
                              {{0, 101}, "end at row 101, past the input's 100 rows"},
                              {{7}, "single offset 7"}})
      on_backend("cuda", [&](Rank& rank) {
        Tuples t = rank.alloc_tuples(space, 100, {4, 4}, "R");
        try {
          rank.launch(Stream{0}, HistogramOp{t, PartitionFn{}, segs}).get();
          ADD_FAILURE() << "segments accepted in " << to_string(space) << ": " << what;
        } catch (const RuntimeError& e) {
          EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
        return Obs{};
      });
}

// Many segments in one launch (triton's second pass: 128 chunks of a partition, fanout 2048):
// empty ones, ones shorter than a block's threads, a view that starts past its buffer's first row,
// and fanouts whose counts fit shared memory and one whose counts do not (global atomics).
TEST(CudaOps, HistogramOfManySegmentsInOneLaunchMatchesCpu) {
  JL_REQUIRE_GPU();
  const uint64_t n = 1500000;
  std::vector<uint64_t> segs = {0, 0, 5, 5, 1029};
  for (uint64_t at = 1029; at < n - 3000; at += 1 + (at * 7919) % 40000) segs.push_back(at);
  segs.push_back(n - 1000);
  for (uint8_t kb : {uint8_t(4), uint8_t(8)})
    for (PartitionFn fn : {PartitionFn{PartitionFn::Radix, 11, 0, 0}, PartitionFn{PartitionFn::Radix, 16, 2, 0},
                           PartitionFn{PartitionFn::Hash, 9, 0, 99}})
      same_on_both(
          [&](Rank& rank) {
            const Tuples t = generate(rank, spec("R", n, KeyDist::UniqueSparse, kb, 4, 3), nullptr, "R").slice(1000, n - 1000);
            return rank.launch(Stream{0}, HistogramOp{t, fn, segs}).get().values;
          },
          "histogram of " + std::to_string(segs.size() - 1) + " segments, key bytes " + std::to_string(kb) + " bits " +
              std::to_string(fn.bits));
}

// Offsets, then the checksum of every partition (at most 512 of them, evenly spread).
Obs partition_observations(Rank& rank, const Tuples& out, const std::vector<uint64_t>& offsets) {
  Obs o = offsets;
  const size_t parts = offsets.size() - 1, step = std::max<size_t>(1, parts / 512);
  for (size_t p = 0; p < parts; p += step) add(o, digest(rank, out, offsets[p], offsets[p + 1] - offsets[p]));
  return o;
}

TEST(CudaOps, PartitionOneAndTwoPassesMatchCpuPerPartition) {
  JL_REQUIRE_GPU();
  for (uint64_t n : kSizes)
    for (auto [kb, vb] : {std::pair<uint8_t, uint8_t>{4, 4}, {8, 8}, {4, 8}})
      for (uint32_t bits : {4u, 9u, 13u})
        for (auto kind : {PartitionFn::Radix, PartitionFn::Hash})
          same_on_both(
              [&](Rank& rank) {
                Tuples in = generate(rank, spec("R", n, KeyDist::Uniform, kb, vb, 5), nullptr, "R");
                Tuples out = rank.alloc_tuples(MemSpace::Device, n, in.fmt, "out");
                PartitionOp op{in, {}, PartitionFn{kind, bits, 1, 17}, out};
                return partition_observations(rank, out, rank.launch(Stream{0}, op).get().values);
              },
              "partition n " + std::to_string(n) + " bits " + std::to_string(bits) + " widths " + std::to_string(kb) +
                  "/" + std::to_string(vb));
}

// Streams on halves of the SMs (green contexts; the cuda rank makes them on Hopper GPUs, the CPU
// backend has none and uses streams 0 and 1): a partition on one and a histogram of its output on
// the other, ordered by an event, equal the CPU kernels'.
TEST(CudaOps, OperatorsOnStreamsOfHalfTheSmsMatchCpu) {
  JL_REQUIRE_GPU();
  same_on_both(
      [&](Rank& rank) {
        const std::optional<Stream> a = rank.sm_share_stream(0, 2), b = rank.sm_share_stream(1, 2);
        if (rank.backend() == std::string("cuda")) {
          EXPECT_TRUE(a && b) << "no green contexts of half the SMs on this GPU";
          if (a && b) {
            EXPECT_NE(a->id, b->id);
            EXPECT_EQ(rank.streams(), b->id + 1);
            EXPECT_EQ(rank.sm_share_stream(1, 2)->id, b->id) << "made once";
          }
        }
        const Stream sa = a ? *a : Stream{0}, sb = b ? *b : Stream{1};
        const uint64_t n = 1500000;
        Tuples in = generate(rank, spec("R", n, KeyDist::Zipf, 8, 8, 5), nullptr, "R");
        Tuples out = rank.alloc_tuples(MemSpace::Device, n, in.fmt, "out");
        rank.stream_wait(sa, rank.record(Stream{0}));
        const PartitionFn fn{PartitionFn::Radix, 8, 0, 0};
        Obs o = partition_observations(rank, out, rank.launch(sa, PartitionOp{in, {}, fn, out}).get().values);
        rank.stream_wait(sb, rank.record(sa));
        const PartitionFn fine{PartitionFn::Radix, 11, 0, 0};
        const Launched histogram = rank.launch(sb, HistogramOp{out, fine});  // get() refers into it
        for (uint64_t c : histogram.get().values) o.push_back(c);
        return o;
      },
      "partition and histogram on streams of half the SMs");
}

// Two passes in one operator (the 15 and 16 radix bits of phj at 2^27 rows): joint histogram (its counts fit shared
// memory) or not (16 bits of 16-byte tuples, 4-byte tuples at 16 bits), dense and skewed keys
// (Zipf 1.5: the hot key's high partition holds ~40% of the rows, hundreds of second-pass blocks
// that the layout kernel's threads write together).
TEST(CudaOps, TwoPassPartitionWithDeviceLayoutMatchesCpu) {
  JL_REQUIRE_GPU();
  for (uint64_t n : {uint64_t(1), uint64_t(777), uint64_t(1500000), uint64_t(4000000)})
    for (auto [kb, vb] : {std::pair<uint8_t, uint8_t>{4, 4}, {8, 8}})
      for (uint32_t bits : {15u, 16u})
        for (double z : {-1.0, 1.0, 1.5})  // -1: dense unique keys
          same_on_both(
              [&](Rank& rank) {
                RelationSpec sp = spec("R", n, z < 0 ? KeyDist::UniqueDense : KeyDist::Zipf, kb, vb, 5);
                if (z >= 0) sp.zipf_z = z;
                Tuples in = generate(rank, sp, nullptr, "R");
                Tuples out = rank.alloc_tuples(MemSpace::Device, n, in.fmt, "out");
                PartitionOp op{in, {}, PartitionFn{PartitionFn::Radix, bits, 0, 0}, out};
                return partition_observations(rank, out, rank.launch(Stream{0}, op).get().values);
              },
              "two-pass partition n " + std::to_string(n) + " bits " + std::to_string(bits) + " widths " +
                  std::to_string(kb) + "/" + std::to_string(vb) + (z < 0 ? " dense" : " zipf " + std::to_string(z)));
}

// triton's first pass: chunks from pinned memory into a device cache and a pinned spill buffer,
// both partitioners, skewed keys; per-partition digests of both outputs equal the CPU kernel's.
// The hierarchical one also with buffers smaller than a 128-byte line (flushes not aligned).
TEST(CudaOps, ChunkPartitionIntoCacheAndSpillMatchesCpu) {
  JL_REQUIRE_GPU();
  for (uint64_t n : {uint64_t(777), uint64_t(1500000)})
    for (auto [kb, vb] : {std::pair<uint8_t, uint8_t>{4, 4}, {8, 8}})
      for (uint32_t bits : {3u, 8u, 11u})
        for (auto [kind, flush] : {std::pair{Partitioner::Shared, 512u}, {Partitioner::Hierarchical, 512u},
                                   {Partitioner::Hierarchical, 128u}})
          same_on_both(
              [&](Rank& rank) {
                Tuples dev = generate(rank, spec("R", n, KeyDist::Zipf, kb, vb, 5), nullptr, "R");
                Tuples in = rank.alloc_tuples(MemSpace::Pinned, n, dev.fmt, "in");
                rank.copy(Stream{0}, in.keys, 0, dev.keys, 0, n * kb);
                rank.copy(Stream{0}, in.vals, 0, dev.vals, 0, n * vb);
                const PartitionFn fn{PartitionFn::Radix, bits, 0, 0};
                const std::vector<uint64_t> bounds = chunk_bounds(n, 9);
                HistogramOp h{in, fn, bounds};
                h.placement = HistogramOp::Placement::Device;
                const ChunkLayout l = chunked_layout(rank.launch(Stream{0}, h).get().values, fn.fanout(), 4);
                ChunkPartitionOp op;
                for (size_t c = 0; c + 1 < bounds.size(); ++c) op.chunks.push_back(in.slice(bounds[c], bounds[c + 1] - bounds[c]));
                op.fn = fn;
                op.offsets = l.offsets;
                op.cached_chunks = 4;
                op.cache = rank.alloc_tuples(MemSpace::Device, std::max<uint64_t>(bounds[4], 1), in.fmt, "cache");
                op.spill = rank.alloc_tuples(MemSpace::Pinned, std::max<uint64_t>(n - bounds[4], 1), in.fmt, "spill");
                op.partitioner = kind;
                op.flush_bytes = flush;
                Obs o{rank.launch(Stream{0}, op).get().count};
                for (uint32_t p = 0; p < fn.fanout(); ++p) {
                  add(o, digest(rank, op.cache, l.cache_starts[p], l.cache_starts[p + 1] - l.cache_starts[p]));
                  add(o, digest(rank, op.spill, l.spill_starts[p], l.spill_starts[p + 1] - l.spill_starts[p]));
                }
                return o;
              },
              "chunk partition n " + std::to_string(n) + " bits " + std::to_string(bits) + " " + to_string(kind) +
                  " flush " + std::to_string(flush));
}

// triton's second pass laid out on the device: two segmented histograms (a cached and a spilled
// part) leave their counts in one device buffer, partition-major, a scan turns them into offsets in
// place, and the partitioner reads them there. Observed on both backends: the histograms' totals,
// every scanned offset, the partitions' starts the partitioner returns (which must also equal the
// host layout's), and each partition's digest; the fanouts cover the spread kernel's partial tiles
// and more than one segment tile (129 chunks).
TEST(CudaOps, ChunkPartitionWithOffsetsOnDeviceMatchesCpu) {
  JL_REQUIRE_GPU();
  for (auto [n, chunk_rows] : {std::pair<uint64_t, uint64_t>{777, 100}, {1500000, 1 << 15}, {1500000, 11000}})
    for (auto [kb, vb] : {std::pair<uint8_t, uint8_t>{4, 4}, {8, 8}})
      for (uint32_t bits : {0u, 5u, 11u})
        same_on_both(
            [&](Rank& rank) {
              Tuples in = generate(rank, spec("R", n, KeyDist::Zipf, kb, vb, 7), nullptr, "R");
              const PartitionFn fn{PartitionFn::Radix, bits, 1, 0};
              const uint32_t F = fn.fanout();
              const uint64_t split = n * 2 / 3;
              std::vector<std::vector<uint64_t>> parts;
              for (auto [b, e] : {std::pair<uint64_t, uint64_t>{0, split}, {split, n}}) {
                std::vector<uint64_t> bounds = chunk_bounds(e - b, uint32_t((e - b + chunk_rows - 1) / chunk_rows));
                for (uint64_t& x : bounds) x += b;
                parts.push_back(bounds);
              }
              const test::DeviceLayout d = test::lay_out_on_device(rank, in, fn, parts);
              const uint64_t C = d.chunks.size();
              Obs o{C};
              o.insert(o.end(), d.totals.begin(), d.totals.end());
              const std::vector<uint64_t> scanned = test::read_back(rank, d.layout, C * F, 8);
              o.insert(o.end(), scanned.begin(), scanned.end());
              ChunkPartitionOp op;
              op.chunks = d.chunks;
              op.fn = fn;
              op.offsets_on_device = d.layout;
              op.cached_chunks = uint32_t(C);
              op.cache = rank.alloc_tuples(MemSpace::Device, n, in.fmt, "cache");
              const OpResult r = rank.launch(Stream{0}, op).get();
              const ChunkLayout l = chunked_layout(d.hist, F, uint32_t(C));
              o.push_back(r.count);
              o.push_back(uint64_t(r.values == l.cache_starts));
              o.insert(o.end(), r.values.begin(), r.values.end());
              for (uint32_t p = 0; p < F && r.values.size() == F + 1; ++p)
                add(o, digest(rank, op.cache, r.values[p], r.values[p + 1] - r.values[p]));
              return o;
            },
            "chunk partition, offsets on the device, n " + std::to_string(n) + " chunk rows " +
                std::to_string(chunk_rows) + " bits " + std::to_string(bits) + " widths " + std::to_string(kb) + "/" +
                std::to_string(vb));
}

// A buffer too small for the offsets is an error naming the operator, the buffer and the sizes.
TEST(CudaOps, ChunkPartitionRejectsOffsetsOnDeviceTooSmall) {
  JL_REQUIRE_GPU();
  try {
    on_backend("cuda", [&](Rank& rank) {
      Tuples in = generate(rank, spec("R", 1000, KeyDist::UniqueDense, 4, 4, 3), nullptr, "R");
      ChunkPartitionOp op;
      op.chunks = {in.slice(0, 500), in.slice(500, 500)};
      op.fn = PartitionFn{PartitionFn::Radix, 4, 0, 0};
      op.offsets_on_device = rank.alloc(MemSpace::Device, 2 * 16 * 8 - 8, "layout");
      op.cached_chunks = 2;
      op.cache = rank.alloc_tuples(MemSpace::Device, 1000, in.fmt, "cache");
      rank.launch(Stream{0}, op).get();
      return Obs{1};
    });
    ADD_FAILURE() << "a buffer one word short was accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("chunk partition: offsets_on_device (buffer 'layout') holds 248 bytes, 2 "
                                         "chunks x 16 partitions need 256"),
              std::string::npos)
        << e.what();
  }
}

// The link microbenchmark's kernel: the same granules at the same positions as the CPU kernel,
// read, written and both at once, random and in order (collisions write equal granules: the
// device's source repeats per granule, so which write lands last does not matter).
TEST(CudaOps, LinkAccessMatchesCpu) {
  JL_REQUIRE_GPU();
  auto body = [](Rank& rank) {
    const uint64_t region = 1 << 20, bytes = 1 << 16;
    std::vector<uint64_t> out;
    for (LinkAccess access : {LinkAccess::Read, LinkAccess::Write, LinkAccess::Both})
      for (bool random : {true, false})
        for (uint32_t g : {16u, 128u, 4096u}) {
          Buffer host = rank.alloc(MemSpace::Pinned, region, "host");
          Buffer src = rank.alloc(MemSpace::Pinned, 2 * bytes, "src");
          auto* h = static_cast<uint8_t*>(host->ptr);
          auto* s = static_cast<uint8_t*>(src->ptr);
          for (uint64_t i = 0; i < region; ++i) h[i] = uint8_t(i * 7 + i / 256);
          for (uint64_t i = 0; i < 2 * bytes; ++i) s[i] = uint8_t((i % g) * 3 + 1);
          Buffer dev = rank.alloc(MemSpace::Device, 2 * bytes, "device");
          rank.copy(Stream{0}, dev, 0, src, 0, 2 * bytes);
          out.push_back(rank.launch(Stream{0}, LinkAccessOp{host, dev, bytes, g, random, access}).get().count);
          for (uint64_t w : test::read_back(rank, dev, 2 * bytes / 8, 8)) out.push_back(w);
          for (uint64_t i = 0; i < region / 8; ++i) out.push_back(reinterpret_cast<const uint64_t*>(h)[i]);
        }
    return out;
  };
  const std::vector<uint64_t> gpu = test::on_backend("cuda", body), cpu = test::on_backend("cpu", body);
  ASSERT_EQ(gpu.size(), cpu.size());
  EXPECT_TRUE(gpu == cpu);
}

// A large pinned buffer lies on huge pages where the kernel grants them (the copy engine reads
// them faster), and kernels and copies reach it in place as they do a small one.
TEST(CudaOps, LargePinnedBuffersAreOnHugePagesAndReachableFromKernels) {
  JL_REQUIRE_GPU();
  const uint64_t region = 64ull << 20, bytes = 1 << 20;
  auto body = [&](Rank& rank) {
    Buffer host = rank.alloc(MemSpace::Pinned, region, "host");
    auto* h = static_cast<uint64_t*>(host->ptr);
    for (uint64_t i = 0; i < region / 8; ++i) h[i] = i * 0x9E3779B97F4A7C15ull;
    Buffer dev = rank.alloc(MemSpace::Device, region, "device");
    rank.copy(Stream{0}, dev, 0, host, 0, region);
    std::vector<uint64_t> out;
    for (LinkAccess access : {LinkAccess::Read, LinkAccess::Write})
      out.push_back(rank.launch(Stream{0}, LinkAccessOp{host, dev, bytes, 4096, true, access}).get().count);
    rank.copy(Stream{0}, host, region / 2, dev, 0, region / 2).wait();
    for (uint64_t i = 0; i < region / 8; i += 997) out.push_back(h[i]);
    return out;
  };
  const std::vector<uint64_t> gpu = test::on_backend("cuda", body), cpu = test::on_backend("cpu", body);
  EXPECT_TRUE(gpu == cpu);
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(thp, modes);
  if (modes.empty() || modes.find("[never]") != std::string::npos) GTEST_SKIP() << "no transparent huge pages here";
  test::on_backend("cuda", [&](Rank& rank) {
    Buffer host = rank.alloc(MemSpace::Pinned, region, "host");
    EXPECT_GT(test::huge_page_bytes(host->ptr), 0u) << "a " << region << "-byte pinned buffer has no huge page";
    return std::vector<uint64_t>{};
  });
}

// A vectored copy (one cudaMemcpyBatchAsync) moves every range, of mixed sizes, host to device
// and back, as the CPU backend's copies do; ranges of different spaces go one by one.
TEST(CudaOps, VectoredCopyMatchesCpu) {
  JL_REQUIRE_GPU();
  auto body = [](Rank& rank) {
    const uint64_t n = 1 << 20;
    Buffer src = rank.alloc(MemSpace::Pinned, n, "src"), back = rank.alloc(MemSpace::Pinned, 2 * n, "back");
    Buffer dev = rank.alloc(MemSpace::Device, n, "device");
    auto* h = static_cast<uint8_t*>(src->ptr);
    for (uint64_t i = 0; i < n; ++i) h[i] = uint8_t(i * 13 + i / 4096);
    std::memset(back->ptr, 0, 2 * n);
    std::vector<CopyRange> in, out;
    for (uint64_t at = 0, size = 100; at + size <= n; at += size, size = size * 3 / 2 + 17)
      in.push_back({dev, n - at - size, src, at, size});  // reversed order of blocks
    in.push_back({dev, 0, src, 0, 0});                     // an empty range
    for (const CopyRange& c : in) out.push_back({back, c.src_off, dev, c.dst_off, c.bytes});
    // Inside device memory (a gather kernel on the GPU): spans of odd and of 16-byte-aligned
    // lengths and places, some longer than a block's piece (64 KiB), in reversed order again.
    Buffer gathered = rank.alloc(MemSpace::Device, n, "gathered");
    std::vector<CopyRange> gather;
    for (uint64_t at = 0, size = 48; at + size <= n; at += size, size = size % 16 ? size * 2 : size * 3 + 5)
      gather.push_back({gathered, n - at - size, dev, at, size});
    for (const CopyRange& c : gather) out.push_back({back, n + c.src_off, gathered, c.dst_off, c.bytes});
    out.push_back({back, 0, src, 0, 1});  // host to host beside device to host: one by one
    rank.copy(Stream{0}, dev, 0, src, 0, n);  // every byte the gather reads defined
    rank.copy_v(Stream{0}, in);
    rank.copy_v(Stream{0}, gather);
    rank.copy_v(Stream{0}, out).wait();
    std::vector<uint64_t> words(2 * n / 8);
    std::memcpy(words.data(), back->ptr, 2 * n);
    return words;
  };
  const std::vector<uint64_t> gpu = test::on_backend("cuda", body), cpu = test::on_backend("cpu", body);
  EXPECT_TRUE(gpu == cpu);
  const auto half = gpu.begin() + long(gpu.size() / 2);
  EXPECT_NE(std::count(gpu.begin(), half, uint64_t(0)), long(gpu.size() / 2));
  EXPECT_NE(std::count(half, gpu.end(), uint64_t(0)), long(gpu.size() / 2));  // the gather's
}

TEST(CudaOps, DirectScatterVariantMatchesCpu) {  // cluster option scatter=direct
  JL_REQUIRE_GPU();
  for (uint64_t n : kSizes)
    for (uint32_t bits : {3u, 8u, 12u}) {
      auto body = [&](Rank& rank) {
        Tuples in = generate(rank, spec("R", n, KeyDist::Zipf, 8, 4, 5), nullptr, "R");
        Tuples out = rank.alloc_tuples(MemSpace::Device, n, in.fmt, "out");
        PartitionOp op{in, {}, PartitionFn{PartitionFn::Radix, bits, 0, 0}, out};
        return partition_observations(rank, out, rank.launch(Stream{0}, op).get().values);
      };
      EXPECT_EQ(on_backend("cpu", body), on_backend("cuda", body, 1, {{"scatter", "direct"}}))
          << "direct scatter n " << n << " bits " << bits;
    }
}

TEST(CudaOps, SegmentedSecondPassMatchesCpu) {
  JL_REQUIRE_GPU();
  for (uint64_t n : {uint64_t(5000), uint64_t(1200000)})
    same_on_both(
        [&](Rank& rank) {
          Tuples in = generate(rank, spec("R", n, KeyDist::UniqueDense, 4, 4, 5), nullptr, "R");
          Tuples mid = rank.alloc_tuples(MemSpace::Device, n, in.fmt, "mid");
          Tuples out = rank.alloc_tuples(MemSpace::Device, n, in.fmt, "out");
          auto first = rank.launch(Stream{0}, PartitionOp{in, {}, PartitionFn{PartitionFn::Radix, 5, 6, 0}, mid}).get().values;
          auto second = rank.launch(Stream{0}, PartitionOp{mid, first, PartitionFn{PartitionFn::Radix, 6, 0, 0}, out}).get().values;
          return partition_observations(rank, out, second);
        },
        "segmented partition n " + std::to_string(n));
}

struct JoinCase {
  uint8_t kb, vr, vs;
  KeyDist r_dist;
  TableKind table;
  OutputMode mode;
};

std::vector<JoinCase> join_cases() {
  std::vector<JoinCase> v;
  for (auto w : {std::array<uint8_t, 3>{4, 4, 4}, {8, 8, 8}, {4, 8, 4}, {8, 4, 8}})
    for (KeyDist rd : {KeyDist::UniqueDense, KeyDist::Uniform})
      for (TableKind t : {TableKind::LinearProbing, TableKind::Chained})
        for (OutputMode m : {OutputMode::CountThenWrite, OutputMode::Direct, OutputMode::CountOnly})
          v.push_back({w[0], w[1], w[2], rd, t, m});
  return v;
}
std::string name_of(const JoinCase& c) {
  return "widths " + std::to_string(c.kb) + "/" + std::to_string(c.vr) + "/" + std::to_string(c.vs) + " R " +
         to_string(c.r_dist) + " " + to_string(c.table) + " mode " +
         std::to_string(int(c.mode));
}

// R and S of a join case: S draws from R's keys (Uniform R has duplicates: m:n), skewed.
std::pair<Tuples, Tuples> join_inputs(Rank& rank, const JoinCase& c, uint64_t nr, uint64_t ns) {
  RelationSpec r = spec("R", nr, c.r_dist, c.kb, c.vr, 21);
  RelationSpec s = spec("S", ns, c.r_dist == KeyDist::UniqueDense ? KeyDist::ForeignKey : KeyDist::Uniform, c.kb, c.vs, 22);
  s.match_rate = 0.7;
  s.zipf_z = 1.2;
  if (c.r_dist != KeyDist::UniqueDense) s.range_hi = r.range_hi;
  return {generate(rank, r, nullptr, "R"), generate(rank, s, &r, "S")};
}

Obs join_observations(Rank& rank, const JoinOutput& out, const OpResult& res, OutputMode mode) {
  Obs o{res.count, uint64_t(res.overflow)};
  if (mode != OutputMode::CountOnly)
    add(o, digest(rank, out.keys, out.r_fmt.key_bytes, {out.rvals, out.svals}, {out.r_fmt.val_bytes, out.s_fmt.val_bytes}, 0,
                  std::min(res.count, out.capacity)));
  return o;
}

Obs build_and_probe(Rank& rank, const JoinCase& c, uint64_t nr, uint64_t ns, double load_factor = 0.5) {
  auto [r, s] = join_inputs(rank, c, nr, ns);
  HashTable t = rank.alloc_table(MemSpace::Device, c.table, r.fmt, r.rows, load_factor, 77, "table");
  // Two builds into one table: the second appends (a hash + row-id table: the relation's next rows).
  rank.launch(Stream{0}, BuildOp{r.slice(0, nr / 2), &t}).get();
  rank.launch(Stream{0}, BuildOp{r.slice(nr / 2, nr - nr / 2), &t}).get();
  const uint64_t cap = c.mode == OutputMode::CountOnly ? 0 : 8 * ns;
  JoinOutput out = rank.alloc_output(MemSpace::Device, cap, r.fmt, s.fmt, "out");
  const OpResult res = rank.launch(Stream{0}, ProbeOp{&t, s, out, 0, c.mode}).get();
  Obs o = join_observations(rank, out, res, c.mode);
  o.push_back(t.rows);
  return o;
}

TEST(CudaOps, BuildAndProbeMatchCpu) {
  JL_REQUIRE_GPU();
  for (const JoinCase& c : join_cases())
    for (auto [nr, ns] : {std::pair<uint64_t, uint64_t>{1, 1000}, {1000, 50000}, {300000, 900000}})
      same_on_both([&](Rank& rank) { return build_and_probe(rank, c, nr, ns); },
                   "build/probe " + name_of(c) + " |R| " + std::to_string(nr));
}

TEST(CudaOps, HashRowIdBuildAndProbeMatchCpu) {  // 4-byte hash + 4-byte row id slots
  JL_REQUIRE_GPU();
  for (JoinCase c : join_cases()) {
    if (c.table != TableKind::LinearProbing) continue;
    c.table = TableKind::HashRowId;
    for (auto [nr, ns] : {std::pair<uint64_t, uint64_t>{1, 1000}, {1000, 50000}, {300000, 900000}})
      for (double lf : {0.5, 0.9})
        same_on_both([&](Rank& rank) { return build_and_probe(rank, c, nr, ns, lf); },
                     "build/probe " + name_of(c) + " |R| " + std::to_string(nr) + " load factor " + std::to_string(lf));
  }
  // A build that does not continue the table's relation is refused before any kernel runs.
  const Obs refused = test::on_backend("cuda", [&](Rank& rank) {
    const JoinCase c{4, 4, 4, KeyDist::UniqueDense, TableKind::HashRowId, OutputMode::Direct};
    auto [r, s] = join_inputs(rank, c, 1000, 10);
    HashTable t = rank.alloc_table(MemSpace::Device, c.table, r.fmt, r.rows, 0.5, 1, "table");
    rank.launch(Stream{0}, BuildOp{r.slice(0, 100), &t}).get();
    try {
      rank.launch(Stream{0}, BuildOp{r.slice(200, 100), &t}).get();
    } catch (const RuntimeError& e) {
      return Obs{std::string(e.what()).find("hash_rowid") != std::string::npos ? 1u : 2u, t.rows};
    }
    return Obs{0, t.rows};
  });
  EXPECT_EQ(refused, (Obs{1, 100}));
}

TEST(CudaOps, DirectOutputOverflowReportsTrueCount) {
  JL_REQUIRE_GPU();
  JoinCase c{4, 4, 4, KeyDist::UniqueDense, TableKind::LinearProbing, OutputMode::Direct};
  for (OutputMode m : {OutputMode::Direct, OutputMode::CountThenWrite}) {
    const Obs cpu = on_backend("cpu", [&](Rank& rank) {
      auto [r, s] = join_inputs(rank, c, 10000, 100000);
      HashTable t = rank.alloc_table(MemSpace::Device, c.table, r.fmt, r.rows, 0.5, 1, "table");
      rank.launch(Stream{0}, BuildOp{r, &t}).get();
      JoinOutput out = rank.alloc_output(MemSpace::Device, 1000, r.fmt, s.fmt, "out");
      const OpResult res = rank.launch(Stream{0}, ProbeOp{&t, s, out, 10, m}).get();
      return Obs{res.count, uint64_t(res.overflow)};
    });
    const Obs gpu = on_backend("cuda", [&](Rank& rank) {
      auto [r, s] = join_inputs(rank, c, 10000, 100000);
      HashTable t = rank.alloc_table(MemSpace::Device, c.table, r.fmt, r.rows, 0.5, 1, "table");
      rank.launch(Stream{0}, BuildOp{r, &t}).get();
      JoinOutput out = rank.alloc_output(MemSpace::Device, 1000, r.fmt, s.fmt, "out");
      const OpResult res = rank.launch(Stream{0}, ProbeOp{&t, s, out, 10, m}).get();
      return Obs{res.count, uint64_t(res.overflow)};
    });
    EXPECT_EQ(cpu, gpu);
    EXPECT_EQ(gpu.at(1), 1u) << "the output holds 990 rows, the join has far more";
    EXPECT_GT(gpu.at(0), 990u);
  }
}

// With the offsets also in device memory (offsets_out), pairs that need no splitting are listed
// on the device (the first two sizes); the last one's S partitions are split on the host.
TEST(CudaOps, PartitionedJoinMatchesCpuWithSkew) {
  JL_REQUIRE_GPU();
  for (bool device_offsets : {false, true})
    for (const JoinCase& c : join_cases())
      for (auto [nr, ns, bits] : {std::tuple<uint64_t, uint64_t, uint32_t>{5000, 20000, 3}, {200000, 800000, 6},
                                  {20000, 1000000, 2}})
        same_on_both(
            [&](Rank& rank) {
              auto [r, s] = join_inputs(rank, c, nr, ns);
              Tuples pr = rank.alloc_tuples(MemSpace::Device, nr, r.fmt, "pr");
              Tuples ps = rank.alloc_tuples(MemSpace::Device, ns, s.fmt, "ps");
              const PartitionFn fn{PartitionFn::Radix, bits, 0, 0};
              Buffer rb, sb;
              if (device_offsets) {
                rb = rank.alloc(MemSpace::Device, (fn.fanout() + 1) * sizeof(uint64_t), "r offsets");
                sb = rank.alloc(MemSpace::Device, (fn.fanout() + 1) * sizeof(uint64_t), "s offsets");
              }
              auto ro = rank.launch(Stream{0}, PartitionOp{r, {}, fn, pr, rb}).get().values;
              auto so = rank.launch(Stream{0}, PartitionOp{s, {}, fn, ps, sb}).get().values;
              const uint64_t cap = c.mode == OutputMode::CountOnly ? 0 : 16 * ns;
              JoinOutput out = rank.alloc_output(MemSpace::Device, cap, r.fmt, s.fmt, "out");
              PartitionedJoinOp op{Partitioned{pr, ro, rb}, Partitioned{ps, so, sb}, out, 0, c.mode, c.table};
              return join_observations(rank, out, rank.launch(Stream{0}, op).get(), c.mode);
            },
            "partitioned join " + name_of(c) + " |S| " + std::to_string(ns) +
                (device_offsets ? " offsets on the device" : ""));
}

// Sorts `in` and observes the output: its digest, whether its keys ascend, and every
// (n / 64)-th key plus the last `tail` keys (sorted key sequences are unique: compared directly).
Obs sorted_observations(Rank& rank, const Tuples& in, SortAlgo algo, uint64_t tail = 0) {
  const uint64_t n = in.rows;
  Tuples out = rank.alloc_tuples(MemSpace::Device, n, in.fmt, "sorted");
  rank.launch(Stream{0}, SortOp{in, out, algo}).get();
  Obs o;
  add(o, digest(rank, out, 0, n));
  const auto keys = test::read_back(rank, out.keys, n, in.fmt.key_bytes);
  o.push_back(std::is_sorted(keys.begin(), keys.end()));
  for (uint64_t i = 0; i < n; i += std::max<uint64_t>(1, n / 64)) o.push_back(keys[i]);
  for (uint64_t i = n - std::min(n, tail); i < n; ++i) o.push_back(keys[i]);
  return o;
}

// n device tuples of kb-byte keys key(0), key(1), ... (called in row order) and 4-byte values
// equal to their row.
template <class KeyOf>
Tuples keyed_tuples(Rank& rank, uint64_t n, uint8_t kb, KeyOf key) {
  Buffer hk = rank.alloc(MemSpace::Pinned, n * kb, "test.keys");
  Buffer hv = rank.alloc(MemSpace::Pinned, n * 4, "test.vals");
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t k = key(i);
    if (kb == 4) static_cast<uint32_t*>(hk->ptr)[i] = uint32_t(k);
    else static_cast<uint64_t*>(hk->ptr)[i] = k;
    static_cast<uint32_t*>(hv->ptr)[i] = uint32_t(i);
  }
  Tuples in = rank.alloc_tuples(MemSpace::Device, n, {kb, 4}, "in");
  rank.copy(Stream{0}, in.keys, 0, hk, 0, n * kb);
  rank.copy(Stream{0}, in.vals, 0, hv, 0, n * 4);
  return in;
}

TEST(CudaOps, SortsMatchCpuAndAreSorted) {
  JL_REQUIRE_GPU();
  for (uint64_t n : kSizes)
    for (auto [kb, vb] : {std::pair<uint8_t, uint8_t>{4, 4}, {8, 8}, {8, 4}})
      for (SortAlgo algo : {SortAlgo::Radix, SortAlgo::Merge})
        same_on_both(
            [&](Rank& rank) {
              return sorted_observations(rank, generate(rank, spec("R", n, KeyDist::Uniform, kb, vb, 9), nullptr, "R"),
                                         algo);
            },
            "sort n " + std::to_string(n) + (algo == SortAlgo::Radix ? " radix" : " merge"));
}

// MergeOp of two sorted runs (CUB's DeviceMerge) against the CPU's: the output's digest and
// whether its keys ascend, for uniform keys with duplicates and Zipf keys (long runs of one key).
TEST(CudaOps, MergeOfTwoRunsMatchesCpu) {
  JL_REQUIRE_GPU();
  for (uint64_t n : kSizes)
    for (auto [kb, vb] : {std::pair<uint8_t, uint8_t>{4, 4}, {8, 8}, {8, 4}})
      for (KeyDist dist : {KeyDist::Uniform, KeyDist::Zipf})
        same_on_both(
            [&](Rank& rank) {
              Tuples a = generate(rank, spec("A", n, dist, kb, vb, 3), nullptr, "A");
              Tuples b = generate(rank, spec("B", n / 2 + 1, dist, kb, vb, 4), nullptr, "B");
              Tuples sa = rank.alloc_tuples(MemSpace::Device, a.rows, a.fmt, "A sorted");
              Tuples sb = rank.alloc_tuples(MemSpace::Device, b.rows, b.fmt, "B sorted");
              rank.launch(Stream{0}, SortOp{a, sa, SortAlgo::Radix});
              rank.launch(Stream{0}, SortOp{b, sb, SortAlgo::Radix});
              Tuples out = rank.alloc_tuples(MemSpace::Device, a.rows + b.rows, a.fmt, "merged");
              Obs o;
              o.push_back(rank.launch(Stream{0}, MergeOp{sa, sb, out}).get().count);
              add(o, digest(rank, out, 0, out.rows));
              const auto keys = test::read_back(rank, out.keys, out.rows, kb);
              o.push_back(std::is_sorted(keys.begin(), keys.end()));
              return o;
            },
            "merge n " + std::to_string(n) + " key bytes " + std::to_string(kb));
}

// PivotSearchOp against the CPU's: x descending and y ascending keys in device memory, every
// answer position (0, inside, n) over sizes up to a stage's probes.
TEST(CudaOps, PivotSearchMatchesCpu) {
  JL_REQUIRE_GPU();
  for (uint8_t kb : {uint8_t(4), uint8_t(8)})
    for (uint64_t n : {uint64_t(1), uint64_t(2), uint64_t(1000), uint64_t(1024)})
      for (uint64_t shift : {uint64_t(0), n / 3, n, 2 * n})
        same_on_both(
            [&](Rank& rank) {
              // x[t] = 2n - 2t, y[t] = 2t + shift: x <= y from t = (2n - shift) / 4 on.
              Tuples x = keyed_tuples(rank, n, kb, [&](uint64_t t) { return 2 * n - 2 * t; });
              Tuples y = keyed_tuples(rank, n, kb, [&](uint64_t t) { return 2 * t + shift; });
              return Obs{rank.launch(Stream{0}, PivotSearchOp{x.keys, y.keys, kb, n}).get().count};
            },
            "pivot search n " + std::to_string(n) + " shift " + std::to_string(shift));
}

// The MSD radix sort hands partitions larger than a block (skew) to CUB, gathered into one device
// sort: Zipf keys make many such partitions (1.5 M and 24 M rows), one hot key exactly one (sorted
// without a gather).
TEST(CudaOps, RadixSortOfSkewedKeysMatchesCpu) {
  JL_REQUIRE_GPU();
  for (uint64_t n : {uint64_t(1500000), uint64_t(24000000)})
    for (auto [kb, vb] : {std::pair<uint8_t, uint8_t>{4, 4}, {8, 8}})
      same_on_both(
          [&](Rank& rank) {
            return sorted_observations(rank, generate(rank, spec("S", n, KeyDist::Zipf, kb, vb, 5), nullptr, "S"),
                                       SortAlgo::Radix);
          },
          "zipf sort n " + std::to_string(n) + " key bytes " + std::to_string(kb));
  constexpr uint64_t n = uint64_t(1) << 20;
  for (uint8_t kb : {uint8_t(4), uint8_t(8)})
    same_on_both(
        [&](Rank& rank) {
          std::mt19937_64 rng(kb);
          // Uniform keys below 2^20, and 20000 rows (not sampled: 16 j + 5) of one key mid-range.
          const Tuples in = keyed_tuples(rank, n, kb, [&](uint64_t i) -> uint64_t {
            return i % 16 == 5 && i / 16 < 20000 ? 12345 : 1 + rng() % (n - 1);
          });
          return sorted_observations(rank, in, SortAlgo::Radix, 64);
        },
        "sort with one hot key, key bytes " + std::to_string(kb));
}

// The MSD radix sort plans its bits from a sample of the keys (every 16th row of 2^20): keys
// above the sampled range, all on unsampled rows, land in the last partition. A few are ordered
// by the last partition's block, a thousand (more than a block's threads) by a CUB sort of that
// partition, twenty thousand (more than a block holds) by the oversized path, on all key bits.
TEST(CudaOps, RadixSortOfKeysAboveTheSampledRangeMatchesCpu) {
  JL_REQUIRE_GPU();
  constexpr uint64_t n = uint64_t(1) << 20;
  for (uint8_t kb : {uint8_t(4), uint8_t(8)})
    for (uint64_t outliers : {uint64_t(3), uint64_t(1000), uint64_t(20000)})
      same_on_both(
          [&](Rank& rank) {
            std::mt19937_64 rng(outliers * 31 + kb);
            const uint64_t hi = kb == 4 ? (uint64_t(1) << 31) : (uint64_t(1) << 62);
            // Sampled rows (multiples of 16) stay below 2^20; outliers sit on rows 16 j + 1,
            // some equal to each other, some to the sampled range's top key 2^20 - 1.
            const Tuples in = keyed_tuples(rank, n, kb, [&](uint64_t i) {
              uint64_t k = 1 + rng() % ((uint64_t(1) << 20) - 1);
              if (i % 16 == 1 && i / 16 < outliers) k = i % 3 == 0 ? hi - 7 : (uint64_t(1) << 20) + rng() % (hi >> 1);
              if (i % 16 == 3 && i / 16 < outliers) k = (uint64_t(1) << 20) - 1;
              return k;
            });
            return sorted_observations(rank, in, SortAlgo::Radix, 64);  // and the last partition's keys
          },
          "sort with " + std::to_string(outliers) + " keys above the sampled range, key bytes " + std::to_string(kb));
}

// A run of a key range far from 0 (a GPU's share of a multi-GPU sort: dense keys from 2^29 up):
// the MSD sort plans its partitions from the sampled range's density, not from [0, largest key].
// Some rows that the sample skips (16 j + 9) lie below the sampled smallest key.
TEST(CudaOps, RadixSortOfAKeyRangeFarFromZeroMatchesCpu) {
  JL_REQUIRE_GPU();
  constexpr uint64_t n = uint64_t(1) << 21;
  for (uint8_t kb : {uint8_t(4), uint8_t(8)})
    same_on_both(
        [&](Rank& rank) {
          const uint64_t base = uint64_t(1) << 29;
          // A permutation of base .. base + n - 1 (an odd multiplier modulo 2^21), and a few keys below.
          const Tuples in = keyed_tuples(rank, n, kb, [&](uint64_t i) {
            if (i % 16 == 9 && i / 16 < 100) return base - 1000 + i / 16;
            return base + (i * uint64_t(0x9e3779b1)) % n;
          });
          return sorted_observations(rank, in, SortAlgo::Radix, 128);
        },
        "sort of keys from 2^29, key bytes " + std::to_string(kb));
}

TEST(CudaOps, MergeJoinMatchesCpuForManyToMany) {
  JL_REQUIRE_GPU();
  for (const JoinCase& c : join_cases()) {
    if (c.table == TableKind::Chained) continue;  // no table in a merge join
    for (auto [nr, ns] : {std::pair<uint64_t, uint64_t>{1, 1}, {3000, 7000}, {400000, 1000000}})
      same_on_both(
          [&](Rank& rank) {
            auto [r, s] = join_inputs(rank, c, nr, ns);
            Tuples sr = rank.alloc_tuples(MemSpace::Device, nr, r.fmt, "sr");
            Tuples ss = rank.alloc_tuples(MemSpace::Device, ns, s.fmt, "ss");
            rank.launch(Stream{0}, SortOp{r, sr, SortAlgo::Radix});
            rank.launch(Stream{0}, SortOp{s, ss, SortAlgo::Radix});
            const uint64_t cap = c.mode == OutputMode::CountOnly ? 0 : 16 * ns + 64;
            JoinOutput out = rank.alloc_output(MemSpace::Device, cap, r.fmt, s.fmt, "out");
            return join_observations(rank, out, rank.launch(Stream{0}, MergeJoinOp{sr, ss, out, 0, c.mode}).get(), c.mode);
          },
          "merge join " + name_of(c) + " |S| " + std::to_string(ns));
  }
}

// Long runs of equal keys (about 150 R rows per key, so every S row has more than the light
// threshold of matches) go through the merge join's heavy path; with a small output, Direct and
// CountThenWrite still report the true count and the overflow.
TEST(CudaOps, MergeJoinLongRunsAndOverflow) {
  JL_REQUIRE_GPU();
  for (uint8_t w : {uint8_t(4), uint8_t(8)})
    for (OutputMode m : {OutputMode::CountThenWrite, OutputMode::Direct, OutputMode::CountOnly})
      for (uint64_t cap : {uint64_t(2000000), uint64_t(5000)}) {
        const bool overflow = cap < 1000000 && m != OutputMode::CountOnly;
        same_on_both(
            [&](Rank& rank) {
              RelationSpec r = spec("R", 3000, KeyDist::Uniform, w, w, 31);
              RelationSpec s = spec("S", 5000, KeyDist::Uniform, w, w, 32);
              r.range_hi = s.range_hi = 20;
              Tuples rt = generate(rank, r, nullptr, "R"), st = generate(rank, s, nullptr, "S");
              Tuples sr = rank.alloc_tuples(MemSpace::Device, rt.rows, rt.fmt, "sr");
              Tuples ss = rank.alloc_tuples(MemSpace::Device, st.rows, st.fmt, "ss");
              rank.launch(Stream{0}, SortOp{rt, sr, SortAlgo::Radix});
              rank.launch(Stream{0}, SortOp{st, ss, SortAlgo::Radix});
              JoinOutput out = rank.alloc_output(MemSpace::Device, m == OutputMode::CountOnly ? 0 : cap, rt.fmt,
                                                 st.fmt, "out");
              const OpResult res = rank.launch(Stream{0}, MergeJoinOp{sr, ss, out, overflow ? 7u : 0u, m}).get();
              if (overflow) return Obs{res.count, uint64_t(res.overflow)};  // which rows fit is free
              Obs o = join_observations(rank, out, res, m);
              o.push_back(res.count > 500000);
              return o;
            },
            "merge join long runs width " + std::to_string(w) + " mode " + std::to_string(int(m)) + " cap " +
                std::to_string(cap));
      }
}

TEST(CudaOps, GatherAndScanMatchCpu) {
  JL_REQUIRE_GPU();
  for (uint64_t n : kSizes)
    same_on_both(
        [&](Rank& rank) {
          // Row ids: a Uniform key column over [base, base + n), gathered from a payload column.
          RelationSpec ids = spec("I", n, KeyDist::Uniform, 8, 8, 4);
          ids.range_lo = 1000;
          ids.range_hi = 1000 + n - 1;
          Tuples id_t = generate(rank, ids, nullptr, "ids");
          Buffer column = rank.alloc(MemSpace::Device, n * 8, "column");
          GeneratePayloadOp gp;
          gp.spec = spec("C", n, KeyDist::UniqueDense, 8, 8, 5);
          gp.rows = n;
          gp.out = column;
          rank.launch(Stream{0}, gp);
          Buffer gathered = rank.alloc(MemSpace::Device, n * 8, "gathered");
          GatherOp g;
          g.row_ids = id_t.keys;
          g.id_bytes = 8;
          g.column = column;
          g.col_bytes = 8;
          g.base_row = 1000;
          g.rows = n;
          g.out = gathered;
          rank.launch(Stream{0}, g).get();
          Obs o;
          add(o, digest(rank, gathered, 8, {}, {}, 0, n));
          Buffer scanned = rank.alloc(MemSpace::Device, n * 8, "scanned");
          rank.launch(Stream{0}, ScanOp{gathered, scanned, n}).get();
          const auto v = test::read_back(rank, scanned, n, 8);
          o.insert(o.end(), v.begin(), v.begin() + std::min<uint64_t>(n, 100));
          o.push_back(v.back());
          return o;
        },
        "gather/scan n " + std::to_string(n));
}

TEST(CudaOps, GatherRejectsARowIdOutsideTheColumn) {
  JL_REQUIRE_GPU();
  EXPECT_THROW(on_backend("cuda",
                          [&](Rank& rank) {
                            Buffer ids = rank.alloc(MemSpace::Pinned, 8, "ids");
                            static_cast<uint32_t*>(ids->ptr)[0] = 5;
                            static_cast<uint32_t*>(ids->ptr)[1] = 500;  // the column has 10 rows
                            Buffer column = rank.alloc(MemSpace::Device, 40, "column");
                            Buffer out = rank.alloc(MemSpace::Device, 8, "out");
                            GatherOp g{ids, 4, column, 4, 0, 2, out};
                            rank.launch(Stream{0}, g).get();
                            return Obs{};
                          }),
               RuntimeError);
}

// --- cascaded compression (core/exec/codec.hpp) ---------------------------------------------------

// CompressOp on the GPU writes the CPU's bytes: the same offsets and every byte of the batch, with
// every configuration in both delta orders (test::codec_batch).
TEST(CudaOps, CompressIsByteIdenticalToCpu) {
  JL_REQUIRE_GPU();
  for (uint8_t vb : {uint8_t(4), uint8_t(8)}) {
    const test::CodecBatch batch = test::codec_batch(vb);
    same_on_both(
        [&](Rank& rank) {
          Buffer keys = test::upload_bytes(rank, batch.raw, "keys");
          CompressOp c;
          c.value_bytes = vb;
          c.configs = batch.configs;
          uint64_t first = 0;
          for (uint64_t r : batch.rows) c.in.push_back({keys, first, r}), first += r;
          c.out = rank.alloc(MemSpace::Device, compress_bound(c), "packed");
          const OpResult r = rank.launch(Stream{0}, c).get();
          Obs o = r.values;
          o.push_back(r.count);
          const Obs words = test::read_back(rank, c.out, r.count / 8, 8);
          o.insert(o.end(), words.begin(), words.end());
          return o;
        },
        "compress width " + std::to_string(vb));
  }
}

// DecompressOp on the GPU restores what the CPU compressed, and names corrupted buffers as the
// CPU does.
TEST(CudaOps, DecompressesCpuCompressedBatches) {
  JL_REQUIRE_GPU();
  for (uint8_t vb : {uint8_t(4), uint8_t(8)}) {
    const test::CodecBatch batch = test::codec_batch(vb);
    std::vector<cpu::CodecIn> in;
    uint64_t first = 0;
    for (size_t i = 0; i < batch.rows.size(); ++i)
      in.push_back({batch.raw.data() + first * vb, batch.rows[i], batch.configs[i]}), first += batch.rows[i];
    const std::vector<uint64_t> off = cpu::codec_compress(in, vb, 12, nullptr, 0, 2);
    std::vector<uint8_t> packed(off.back());
    cpu::codec_compress(in, vb, 12, packed.data(), packed.size(), 2);
    auto run = [&](Rank& rank, const std::vector<uint8_t>& bytes, const std::vector<uint64_t>& offsets) {
      DecompressOp d;
      d.in = test::upload_bytes(rank, bytes, "packed");
      d.offsets = offsets;
      d.value_bytes = vb;
      Buffer out = rank.alloc(MemSpace::Device, std::max<uint64_t>(batch.raw.size(), 8), "out");
      uint64_t at = 0;
      for (uint64_t r : batch.rows) d.out.push_back({out, at, r}), at += r;
      const OpResult r = rank.launch(Stream{0}, d).get();
      Obs o = r.values;
      o.push_back(r.count);
      const Obs v = test::read_back(rank, out, at, vb);
      o.insert(o.end(), v.begin(), v.end());
      return o;
    };
    const Obs gpu = test::on_backend("cuda", [&](Rank& rank) { return run(rank, packed, off); });
    Obs expected = batch.rows;
    expected.push_back(batch.raw.size() / vb);
    for (size_t i = 0; i < batch.raw.size() / vb; ++i) {
      uint64_t x = 0;
      std::memcpy(&x, batch.raw.data() + i * vb, vb);
      expected.push_back(x);
    }
    ASSERT_EQ(gpu, expected) << "width " << int(vb);
    // Damaged copies: the same error message on both backends.
    std::mt19937_64 rng(4);
    for (int t = 0; t < 24; ++t) {
      std::vector<uint8_t> bad = packed;
      const size_t buffer = rng() % batch.rows.size();
      const uint64_t at = off[buffer] + rng() % std::max<uint64_t>(1, std::min<uint64_t>(off[buffer + 1] - off[buffer], 160));
      bad[at] ^= uint8_t(1u << (rng() % 8));
      auto message = [&](const std::string& backend) {
        try {
          test::on_backend(backend, [&](Rank& rank) { return run(rank, bad, off); });
          return std::string("accepted");
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      };
      // The buffer, chunk and what is wrong as on the CPU. Not the detail: where two chunks fail
      // at once (an offset moved), the GPU's detail may come from the other one (codec.cu).
      auto named = [](const std::string& m) {
        const size_t chunk = m.find(": chunk ");
        return chunk == std::string::npos ? m : m.substr(0, m.find(':', chunk + 2) + 1);
      };
      const std::string cpu = message("cpu"), gpu = message("cuda");
      if (gpu.find("more than the CUDA kernels") != std::string::npos) continue;  // a chunk size only the CPU takes
      EXPECT_EQ(named(gpu), named(cpu)) << "byte " << at << " of buffer " << buffer << ": cpu \"" << cpu << "\", cuda \""
                                        << gpu << "\"";
    }
  }
}

}  // namespace
}  // namespace joinlab
