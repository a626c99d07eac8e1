// Cascaded compression on the CPU (core/exec/codec.hpp, kernels/cpu/codec.cpp, CompressOp and
// DecompressOp on a CpuRank): the format byte for byte on a worked example, round trips of every
// key distribution, width, configuration and edge size, many small buffers in one batch, corrupted
// input rejected by name, the selector's choices, and the simulator's compressed sizes.
#include <gtest/gtest.h>

#include <random>

#include "core/common/error.hpp"
#include "core/runtime/cpu_rank.hpp"
#include "core/runtime/in_process_transport.hpp"
#include "kernels/cpu/codec.hpp"
#include "tests/codec_test_util.hpp"

namespace joinlab {
namespace {

using test::narrow;

struct Batch {
  std::vector<std::vector<uint64_t>> columns;
  std::vector<codec::Config> configs;
};

// Compresses a batch with the CPU kernels: the bytes and the buffers' offsets.
std::pair<std::vector<uint8_t>, std::vector<uint64_t>> compress(const Batch& b, uint8_t vb, uint32_t log2 = 12,
                                                                int threads = 2) {
  std::vector<std::vector<uint8_t>> raw;
  std::vector<cpu::CodecIn> in;
  for (size_t i = 0; i < b.columns.size(); ++i) raw.push_back(narrow(b.columns[i], vb));
  for (size_t i = 0; i < b.columns.size(); ++i) in.push_back({raw[i].data(), b.columns[i].size(), b.configs[i]});
  const std::vector<uint64_t> off = cpu::codec_compress(in, vb, log2, nullptr, 0, threads);
  std::vector<uint8_t> out(off.back());
  EXPECT_EQ(cpu::codec_compress(in, vb, log2, out.data(), out.size(), threads), off);
  return {out, off};
}

// Decompresses (throws what the decoder throws) and returns the values, widened.
std::vector<std::vector<uint64_t>> decompress(const std::vector<uint8_t>& bytes, const std::vector<uint64_t>& off,
                                              uint8_t vb, const std::vector<uint64_t>& capacity) {
  std::vector<std::vector<uint8_t>> store(capacity.size());
  std::vector<cpu::CodecOut> out;
  for (size_t b = 0; b < capacity.size(); ++b) store[b].resize(capacity[b] * vb + 8), out.push_back({store[b].data(), capacity[b]});
  const std::vector<uint64_t> rows = cpu::codec_decompress(bytes.data(), off, vb, out, 2);
  std::vector<std::vector<uint64_t>> v(rows.size());
  for (size_t b = 0; b < rows.size(); ++b)
    for (uint64_t i = 0; i < rows[b]; ++i) {
      uint64_t x = 0;
      std::memcpy(&x, store[b].data() + i * vb, vb);
      v[b].push_back(x);
    }
  return v;
}

std::vector<uint64_t> capacities(const Batch& b) {
  std::vector<uint64_t> c;
  for (auto& col : b.columns) c.push_back(col.size());
  return c;
}

std::vector<uint64_t> masked(std::vector<uint64_t> v, uint8_t vb) {
  if (vb == 4)
    for (uint64_t& x : v) x &= 0xFFFFFFFFull;
  return v;
}

// A one-buffer batch of 4-byte values compresses to exactly `expected` and back.
void expect_words(const Batch& b, const std::vector<uint64_t>& expected) {
  const auto [bytes, off] = compress(b, 4);
  ASSERT_EQ(off, (std::vector<uint64_t>{0, 8 * expected.size()}));
  std::vector<uint64_t> words(bytes.size() / 8);
  std::memcpy(words.data(), bytes.data(), bytes.size());
  EXPECT_EQ(words, expected);
  EXPECT_EQ(decompress(bytes, off, 4, {b.columns[0].size()})[0], b.columns[0]);
}

// The format on a worked example: 6 values, 1 RLE + delta. Runs (3, 2, 1) and values (5, 7, 9);
// delta: first 5, steps (2, 2); runs FOR base 1, 2 bits: 2 | 1 << 2 | 0 << 4 = 6; steps base 2,
// 0 bits, no payload.
TEST(Codec, FormatOfAWorkedExample) {
  Batch b{{{5, 5, 5, 7, 7, 9}}, {{1, 1}}};
  const std::vector<uint64_t> expected = {
      // BufferHeader: magic "JLCC", version 2, 4-byte values, rle 1, delta 1 (last); chunk_log2
      // 12, 1 chunk; 6 rows; 104 bytes
      0x0101040243434C4Aull, 0x000000010000000Cull, 6, 104,
      // chunk offsets: 48, 104
      48, 104,
      // ChunkHeader: 6 rows, 2 streams; first 5
      0x0000000200000006ull, 5,
      // StreamHeader runs: 3 entries, 2 bits; base 1. values: 2 entries, 0 bits; base 2
      0x0000000200000003ull, 1, 0x0000000000000002ull, 2,
      // runs payload
      6};
  expect_words(b, expected);
}

// Delta first on 6 values, 1 RLE: first 9, steps (-1, -1, -1, 4, 4), their runs (3, 2) of values
// (-1, 4). Runs FOR base 2, 1 bit: 1 | 0 << 1 = 1; values signed: base -1, range 5 in 3 bits:
// 0 | 5 << 3 = 40.
TEST(Codec, FormatOfAWorkedExampleWithDeltaFirst) {
  Batch b{{{9, 8, 7, 6, 10, 14}}, {{1, 1, 1}}};
  const std::vector<uint64_t> expected = {
      // BufferHeader: version 2, 4-byte values, rle 1, delta 2 (first); chunk_log2 12, 1 chunk;
      // 6 rows; 112 bytes
      0x0201040243434C4Aull, 0x000000010000000Cull, 6, 112,
      // chunk offsets: 48, 112
      48, 112,
      // ChunkHeader: 6 rows, 2 streams; first 9
      0x0000000200000006ull, 9,
      // StreamHeader runs: 2 entries, 1 bit; base 2. values: 2 entries, 3 bits; base -1 (32 bits)
      0x0000000100000002ull, 2, 0x0000000300000002ull, 0xFFFFFFFFull,
      // runs payload, values payload
      1, 40};
  expect_words(b, expected);
}

// Version 1 streams (delta last only) decode as before; a version 1 header cannot say delta first.
TEST(Codec, ReadsVersion1Streams) {
  Batch b;
  for (const codec::Config cfg : test::all_codec_configs()) {
    b.columns.push_back(test::codec_column_kinds()[6].make(5000, 8));
    b.configs.push_back(cfg);
  }
  auto [bytes, off] = compress(b, 8);
  for (size_t i = 0; i < b.columns.size(); ++i)
    if (!b.configs[i].delta_first) bytes[off[i] + 4] = 1;
  EXPECT_EQ(decompress(bytes, off, 8, capacities(b)), b.columns);
  for (size_t i = 0; i < b.columns.size(); ++i) {
    if (!b.configs[i].delta_first) continue;
    std::vector<uint8_t> old = bytes;
    old[off[i] + 4] = 1;
    try {
      decompress(old, off, 8, capacities(b));
      ADD_FAILURE() << "a version 1 header with delta first was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("buffer " + std::to_string(i) + ": bad header: " +
                                           std::to_string(b.configs[i].rle) + " rle layers and delta 2"),
                std::string::npos)
          << e.what();
    }
  }
}

// Every column kind, both widths, every configuration, sizes around the chunk boundaries, and a
// buffer per (kind, size) in one batch.
TEST(Codec, RoundTripOfEveryKindWidthConfigurationAndSize) {
  const uint64_t sizes[] = {0, 1, 2, 1023, 1024, 1025, 4096, 4097, 20000};
  for (uint8_t vb : {uint8_t(4), uint8_t(8)})
    for (uint32_t log2 : {10u, 12u})
      for (const codec::Config cfg : test::all_codec_configs()) {
        Batch b;
        std::vector<std::string> what;
        for (const auto& kind : test::codec_column_kinds())
          for (uint64_t n : sizes) {
            b.columns.push_back(masked(kind.make(n, vb), vb));
            b.configs.push_back(cfg);
            what.push_back(kind.name + " rows " + std::to_string(b.columns.back().size()));
          }
        const auto [bytes, off] = compress(b, vb, log2);
        const auto back = decompress(bytes, off, vb, capacities(b));
        for (size_t i = 0; i < b.columns.size(); ++i)
          ASSERT_EQ(back[i], b.columns[i]) << what[i] << " width " << int(vb) << " chunk_log2 " << log2 << " rle "
                                           << int(cfg.rle) << " delta " << int(cfg.delta) << " first "
                                           << int(cfg.delta_first);
      }
}

// Extreme values: the full width, descending steps (negative deltas), all-equal chunks.
TEST(Codec, RoundTripOfExtremeValues) {
  for (uint8_t vb : {uint8_t(4), uint8_t(8)}) {
    const uint64_t top = vb == 4 ? 0xFFFFFFFFull : ~0ull;
    Batch b;
    b.columns = {{0, top, 0, top, 1, top - 1}, std::vector<uint64_t>(5000, top), {top, top - 5, top - 9, 3, 2, 1, 0}};
    std::vector<uint64_t> desc;
    for (uint64_t i = 0; i < 9000; ++i) desc.push_back(top - i * 37);
    b.columns.push_back(masked(desc, vb));
    for (const codec::Config cfg : test::all_codec_configs()) {
      b.configs.assign(b.columns.size(), cfg);
      const auto [bytes, off] = compress(b, vb);
      EXPECT_EQ(decompress(bytes, off, vb, capacities(b)), b.columns)
          << "width " << int(vb) << " rle " << int(cfg.rle) << " delta " << int(cfg.delta) << " first "
          << int(cfg.delta_first);
    }
  }
}

// Many small buffers (the partitions a rank sends at a large fanout) with mixed configurations,
// and the bytes independent of the thread count.
TEST(Codec, ManySmallBuffersInOneBatch) {
  std::mt19937_64 rng(3);
  for (uint8_t vb : {uint8_t(4), uint8_t(8)}) {
    Batch b;
    const auto kinds = test::codec_column_kinds();
    const auto cfgs = test::all_codec_configs();
    for (int i = 0; i < 700; ++i) {
      b.columns.push_back(masked(kinds[rng() % kinds.size()].make(rng() % 60, vb), vb));
      b.configs.push_back(cfgs[rng() % cfgs.size()]);
    }
    const auto [bytes, off] = compress(b, vb, 10, 2);
    EXPECT_EQ(compress(b, vb, 10, 1).first, bytes) << "the bytes depend on the thread count";
    for (size_t i = 0; i + 1 < off.size(); ++i) EXPECT_EQ(off[i] % 8, 0u);
    EXPECT_EQ(decompress(bytes, off, vb, capacities(b)), b.columns);
    // Each buffer decompresses alone.
    for (size_t i : {size_t(0), size_t(350), size_t(699)}) {
      const std::vector<uint8_t> one(bytes.begin() + off[i], bytes.begin() + off[i + 1]);
      EXPECT_EQ(decompress(one, {0, off[i + 1] - off[i]}, vb, {b.columns[i].size()})[0], b.columns[i]);
    }
  }
}

// Corrupted batches: each damage is rejected with a message naming the buffer and what is wrong.
TEST(Codec, CorruptedInputIsRejectedByName) {
  Batch b;
  b.columns = {test::codec_column_kinds()[6].make(9000, 8), test::codec_column_kinds()[8].make(5000, 8),
               test::codec_column_kinds()[0].make(3000, 8), test::codec_column_kinds()[5].make(5000, 8)};
  b.configs = {{1, 1}, {1, 0}, {0, 0}, {1, 1, 1}};
  const auto [good, off] = compress(b, 8);
  const std::vector<uint64_t> cap = capacities(b);
  auto expect_error = [&](const std::vector<uint8_t>& bytes, const std::vector<uint64_t>& offsets,
                          const std::vector<uint64_t>& capacity, const std::vector<std::string>& parts,
                          const std::string& what) {
    try {
      decompress(bytes, offsets, 8, capacity);
      ADD_FAILURE() << what << ": accepted";
    } catch (const std::invalid_argument& e) {
      for (const std::string& p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << what << ": \"" << e.what() << "\" lacks " << p;
    }
  };
  auto word = [&](std::vector<uint8_t>& bytes, uint64_t at) -> uint64_t& {
    return *reinterpret_cast<uint64_t*>(bytes.data() + at);
  };
  {
    auto bad = good;
    bad[off[1]] ^= 0x20;  // magic
    expect_error(bad, off, cap, {"buffer 1", "magic"}, "magic");
  }
  {
    auto bad = good;
    bad[off[2] + 6] = 3;  // rle layers
    expect_error(bad, off, cap, {"buffer 2", "3 rle"}, "configuration");
  }
  {
    auto bad = good;
    bad[off[3] + 4] = 3;  // version
    expect_error(bad, off, cap, {"buffer 3", "format version 3"}, "version");
  }
  {
    auto bad = good;
    bad[off[3] + 7] = 3;  // delta byte: no such order
    expect_error(bad, off, cap, {"buffer 3", "delta 3"}, "delta order");
  }
  {
    auto bad = good;
    bad[off[3] + 7] = 1;  // read as delta last: the values stream holds one entry too many
    expect_error(bad, off, cap, {"buffer 3: chunk 0", "stream 1 has"}, "delta order switched");
  }
  {
    auto bad = good;
    const uint64_t chunk0 = off[3] + word(bad, off[3] + 32);
    word(bad, chunk0 + 16 + 8) += 1;  // runs base + 1: the steps' runs add up to more than n0 - 1
    expect_error(bad, off, cap, {"buffer 3: chunk 0", "run lengths of rle layer 1"}, "runs of steps");
  }
  {
    auto o = off;
    o[3] -= 8;  // buffer 2 truncated
    expect_error(good, o, cap, {"buffer 2", "wrong size"}, "truncated buffer");
  }
  {
    auto bad = good;
    word(bad, off[0] + 16) += 5000;  // rows: more chunks than the header says
    expect_error(bad, off, cap, {"buffer 0", "chunks do not match"}, "rows");
  }
  {
    auto c = cap;
    c[1] -= 1;
    expect_error(good, off, c, {"buffer 1", "do not fit"}, "capacity");
  }
  {
    auto bad = good;
    word(bad, off[0] + 40) = word(bad, off[0] + 32) + 8;  // chunk 0 ends inside its own header
    expect_error(bad, off, cap, {"buffer 0: chunk 0", "offset"}, "chunk offsets");
  }
  {
    auto bad = good;
    const uint64_t chunk0 = off[1] + word(bad, off[1] + 32);
    bad[chunk0 + 16 + 4] += 1;  // runs stream: one bit wider than stored
    expect_error(bad, off, cap, {"buffer 1: chunk 0", "stream headers describe"}, "stream width");
  }
  {
    auto bad = good;
    const uint64_t chunk0 = off[1] + word(bad, off[1] + 32);
    word(bad, chunk0 + 16 + 8) += 1;  // runs base + 1: the runs add up to more than the chunk
    expect_error(bad, off, cap, {"buffer 1: chunk 0", "run lengths of rle layer 1"}, "runs");
  }
  {
    auto bad = good;
    const uint64_t chunk1 = off[0] + word(bad, off[0] + 40);
    bad[chunk1] ^= 1;  // the chunk's rows
    expect_error(bad, off, cap, {"buffer 0: chunk 1", "rows"}, "chunk rows");
  }
  {
    auto o = off;
    o[1] += 4;  // unaligned
    expect_error(good, o, cap, {"buffer 1"}, "offsets");
  }
  // Random damage: rejected or decoded, never a crash or a read outside the batch.
  std::mt19937_64 rng(9);
  int rejected = 0;
  for (int t = 0; t < 400; ++t) {
    auto bad = good;
    for (int f = 0; f < 3; ++f) bad[rng() % bad.size()] ^= uint8_t(1u << (rng() % 8));
    try {
      decompress(bad, off, 8, cap);
    } catch (const std::invalid_argument&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

// CompressOp and DecompressOp on a CpuRank: the kernels' bytes, rows, and checks of the operator.
TEST(Codec, OperatorsOnACpuRank) {
  CpuRankConfig rc;
  rc.threads = 2;
  for (uint8_t vb : {uint8_t(4), uint8_t(8)}) {
    CpuRank rank(0, ClusterShape{}, make_in_process_transports(1, 30.0)[0], rc);  // a failed operator poisons it
    Batch b;
    for (const auto& kind : test::codec_column_kinds()) {
      b.columns.push_back(masked(kind.make(5000, vb), vb));
      double ratio = 0;
      const std::vector<uint8_t> raw = narrow(b.columns.back(), vb);
      b.configs.push_back(cpu::codec_select(raw.data(), b.columns.back().size(), vb, &ratio));
    }
    CompressOp c;
    c.value_bytes = vb;
    c.configs = b.configs;
    uint64_t rows = 0;
    for (auto& col : b.columns) rows += col.size();
    Buffer keys = rank.alloc(MemSpace::Device, rows * vb, "keys");
    for (auto& col : b.columns) {
      const std::vector<uint8_t> raw = narrow(col, vb);
      const uint64_t first = c.in.empty() ? 0 : c.in.back().first + c.in.back().rows;
      std::memcpy(data_of<uint8_t>(keys, first * vb), raw.data(), raw.size());
      c.in.push_back({keys, first, col.size()});
    }
    c.out = rank.alloc(MemSpace::Device, compress_bound(c), "packed");
    const OpResult packed = rank.launch(Stream{0}, c).get();
    const auto [bytes, off] = compress(b, vb);
    ASSERT_EQ(packed.values, off);
    ASSERT_EQ(packed.count, off.back());
    EXPECT_EQ(std::memcmp(data_of<uint8_t>(c.out), bytes.data(), bytes.size()), 0);
    DecompressOp d;
    d.in = c.out;
    d.offsets = packed.values;
    d.value_bytes = vb;
    Buffer back = rank.alloc(MemSpace::Device, rows * vb, "back");
    for (const CodecColumn& col : c.in) d.out.push_back({back, col.first, col.rows});
    const OpResult r = rank.launch(Stream{0}, d).get();
    EXPECT_EQ(r.count, rows);
    EXPECT_EQ(std::memcmp(data_of<uint8_t>(back), data_of<uint8_t>(keys), rows * vb), 0);
    // An output too small for the bound is refused before anything runs.
    CompressOp small = c;
    small.out = rank.alloc(MemSpace::Device, 64, "small");
    EXPECT_THROW(rank.launch(Stream{0}, small).get(), RuntimeError);
  }
  // A corrupted header through the operator: a RuntimeError naming the buffer.
  CpuRank fresh(0, ClusterShape{}, make_in_process_transports(1, 30.0)[0], rc);
  Buffer junk = fresh.alloc(MemSpace::Device, 64, "junk");
  std::memset(junk->ptr, 0, 64);
  Buffer out = fresh.alloc(MemSpace::Device, 64, "out");
  try {
    fresh.launch(Stream{0}, DecompressOp{junk, {0, 64}, 8, {{out, 0, 8}}}).get();
    ADD_FAILURE() << "a buffer of zeros was decompressed";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("buffer 0: bad header: magic"), std::string::npos) << e.what();
  }
}

// The selector: RLE for runs, delta for sorted keys, plain bit-packing for uniform keys, delta
// before RLE for keys with regular steps (TPC-H orders), after it for repeated keys (lineitem).
TEST(Codec, SelectorPicksTheLayersTheDataCallsFor) {
  auto pick = [](const std::string& name, uint8_t vb) {
    for (const auto& kind : test::codec_column_kinds())
      if (kind.name == name) {
        const std::vector<uint64_t> v = kind.make(200000, vb);
        const std::vector<uint8_t> raw = narrow(v, vb);
        double ratio = 0;
        const codec::Config c = cpu::codec_select(raw.data(), v.size(), vb, &ratio);
        EXPECT_GT(ratio, 0.0);
        return c;
      }
    ADD_FAILURE() << "no column kind " << name;
    return codec::Config{};
  };
  for (uint8_t vb : {uint8_t(4), uint8_t(8)}) {
    const std::string w = " width " + std::to_string(vb);
    const codec::Config runs = pick("runs", vb), sorted = pick("sorted", vb), uniform = pick("uniform", vb),
                        orders = pick("tpch_orders", vb), lineitem = pick("tpch_lineitem", vb);
    EXPECT_GE(runs.rle, 1) << "runs" << w;
    EXPECT_EQ(sorted.rle, 0) << "sorted" << w;
    EXPECT_EQ(sorted.delta, 1) << "sorted" << w;
    EXPECT_EQ(uniform.rle, 0) << "uniform" << w;
    EXPECT_EQ(uniform.delta, 0) << "uniform" << w;
    EXPECT_EQ(orders.delta, 1) << "tpch orders" << w;
    EXPECT_EQ(orders.delta_first, 1) << "tpch orders" << w;
    EXPECT_GE(lineitem.rle, 1) << "tpch lineitem" << w;
    EXPECT_EQ(lineitem.delta, 1) << "tpch lineitem" << w;
    EXPECT_EQ(lineitem.delta_first, 0) << "tpch lineitem" << w;
  }
  double ratio = 0;
  EXPECT_EQ(cpu::codec_select(nullptr, 0, 8, &ratio), (codec::Config{0, 0}));
  EXPECT_EQ(ratio, 1.0);
}

// TPC-H o_orderkey (steps 1 x 7, 25, repeating): delta first leaves two runs of steps per 8 keys,
// against one step per key bit-packed with delta last (12.6x at 8 bytes).
TEST(Codec, OrderKeysCompressWithDeltaFirst) {
  for (uint8_t vb : {uint8_t(4), uint8_t(8)}) {
    const std::vector<uint64_t> keys = test::codec_column_kinds()[5].make(200000, vb);
    const std::vector<uint8_t> raw = narrow(keys, vb);
    const codec::Config pick = cpu::codec_select(raw.data(), keys.size(), vb);
    EXPECT_EQ(pick, (codec::Config{1, 1, 1})) << "width " << int(vb);
    const auto [bytes, off] = compress(Batch{{keys}, {pick}}, vb);
    const double ratio = double(raw.size()) / double(bytes.size());
    EXPECT_GE(ratio, vb == 8 ? 20.0 : 10.0) << "width " << int(vb);
    EXPECT_EQ(decompress(bytes, off, vb, {keys.size()})[0], keys);
  }
}

}  // namespace
}  // namespace joinlab
