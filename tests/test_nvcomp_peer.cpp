// nvcomp's cascaded codec as bench-codec's peer (experiments/codec/nvcomp_peer.cpp), built only
// with nvcomp (-DJOINLAB_NVCOMP); label "gpu": without a GPU every test says so and skips.
#include <gtest/gtest.h>

#include <iostream>
#include <sstream>

#include "core/experiment/cli.hpp"
#include "models/codec_peer.hpp"
#include "tests/codec_test_util.hpp"
#include "tests/cuda_test_util.hpp"

namespace joinlab {
namespace {

// Every column kind at sizes around the chunk edges, every layer configuration (so buffers with
// different options share a column), 4-byte keys at unaligned buffer starts: each nvcomp variant
// round-trips (the peer checks the bytes and throws on a difference).
TEST(NvcompPeer, RoundTripsEveryColumnKind) {
  JL_REQUIRE_GPU();
  register_builtin();
  const CodecPeer* peer = find_codec_peer("nvcomp");
  ASSERT_NE(peer, nullptr);
  for (uint8_t vb : {uint8_t(4), uint8_t(8)}) {
    const test::CodecBatch batch = test::codec_batch(vb);
    std::vector<CodecPeerRun> runs;
    test::on_backend("cuda", [&](Rank& rank) {
      Buffer keys = test::upload_bytes(rank, batch.raw, "keys");
      CodecPeerColumn col;
      col.name = "batch";
      col.device_keys = keys->ptr;
      col.host_keys = batch.raw.data();
      col.rows = batch.raw.size() / vb;
      col.key_bytes = vb;
      col.bounds = {0};
      for (uint64_t r : batch.rows) col.bounds.push_back(col.bounds.back() + r);
      col.configs = batch.configs;
      col.chunk_bytes = 4096;  // several chunks in the larger buffers
      runs = peer->run(col);
      return std::vector<uint64_t>{};
    });
    ASSERT_EQ(runs.size(), 3u);
    for (const CodecPeerRun& r : runs) {
      if (!r.refused.empty()) std::printf("width %d, %s: refused: %s\n", vb, r.options.c_str(), r.refused.c_str());
      if (r.options.rfind("matched symmetric", 0) == 0) continue;  // may refuse what it does not support
      EXPECT_EQ(r.refused, "") << r.options;
      EXPECT_GT(r.compressed_bytes, 0u) << r.options;
      EXPECT_LT(r.compressed_bytes, batch.raw.size()) << r.options;  // runs and sorted keys shrink
    }
  }
}

// The command as the benchmark script runs it, smaller: ours and nvcomp round-trip the same
// columns (either failing is exit 1), and the peer's table has a line per column and variant.
TEST(NvcompPeer, BenchCodecComparesOnTheSameColumns) {
  JL_REQUIRE_GPU();
  std::vector<std::string> args = {"joinlab", "bench-codec", "--backend", "cuda", "--sf", "0.05",
                                   "--repeat", "1", "--buffers", "8", "--peer", "nvcomp"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  std::ostringstream out;
  std::streambuf* old = std::cout.rdbuf(out.rdbuf());
  const int code = cli_main(int(argv.size()), argv.data());
  std::cout.rdbuf(old);
  std::cout << out.str();
  ASSERT_EQ(code, 0);
  const std::string text = out.str();
  ASSERT_NE(text.find("peer nvcomp on the cuda rank's GPU"), std::string::npos);
  const std::string table = text.substr(text.find("peer nvcomp on"));
  for (const std::string column : {"tpch_orders", "tpch_lineitem", "uniform", "sorted"}) {
    std::istringstream lines(table);
    std::string line;
    int asymmetric = 0;  // default and matched, measured
    while (std::getline(lines, line))
      if (line.rfind(column + " ", 0) == 0 && line.find("symmetric") == std::string::npos &&
          line.find("refused") == std::string::npos)
        ++asymmetric;
    EXPECT_EQ(asymmetric, 2) << column;
  }
}

}  // namespace
}  // namespace joinlab
