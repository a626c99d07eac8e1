// The simulation backend: simulated times against closed forms on small platforms, data-free
// operator results against the workload's distribution, determinism, a 64-GPU experiment end to
// end, and profile files (bad ones rejected with file, line, key and value).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/exec/backend.hpp"
#include "core/exec/chunk.hpp"
#include "core/experiment/config.hpp"
#include "core/experiment/report.hpp"
#include "core/experiment/runner.hpp"
#include "core/strategies/strategy_util.hpp"
#include "core/workload/generate.hpp"
#include "models/calibrate.hpp"
#include "models/profile.hpp"
#include "tests/test_workloads.hpp"
#include "sim/key_content.hpp"
#include "sim/sim_buffer.hpp"
#include "tests/codec_test_util.hpp"
#include "tests/test_profile_text.hpp"

namespace joinlab {
namespace {

namespace fs = std::filesystem;

// Round numbers, so closed forms are easy to write down.
const std::string kTestProfile = "# synthetic profile for tests\n" + test::synthetic_machine("test") + test::synthetic_ops();

class SimTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { register_builtin(); }
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("joinlab_test_sim_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ofstream(dir_ / "test.ini") << kTestProfile;
  }
  void TearDown() override { fs::remove_all(dir_); }

  BackendConfig cluster(int nodes, int per_node) const {
    BackendConfig c;
    c.shape = {nodes, per_node};
    c.profile = (dir_ / "test.ini").string();
    c.profile_dir = dir_.string();
    return c;
  }
  // Runs body on every simulated rank; returns each rank's phases.
  std::vector<std::vector<PhaseRecord>> simulate(const BackendConfig& c, const std::function<void(Rank&)>& body) {
    std::vector<std::vector<PhaseRecord>> phases(size_t(c.shape.size()));
    make_backend("sim")->run(c, body, [&](Rank& r) { phases[size_t(r.id())] = r.phases(); });
    return phases;
  }
  static double seconds(const std::vector<PhaseRecord>& ph, const std::string& name) {
    for (auto& p : ph)
      if (p.name == name) return p.end - p.begin;
    ADD_FAILURE() << "no phase " << name;
    return -1;
  }
  fs::path dir_;
};

// --- closed forms ------------------------------------------------------------------------------

TEST_F(SimTest, OneTransferTakesLatencyPlusBytesOverBandwidth) {
  const uint64_t bytes = 1000000000;
  for (bool same_node : {false, true}) {
    auto ph = simulate(same_node ? cluster(1, 2) : cluster(2, 1), [&](Rank& r) {
      Buffer b = r.alloc(MemSpace::Device, bytes, "b");
      r.phase("transfer");
      if (r.id() == 0) r.send(Stream{0}, 1, b, 0, bytes, 7).wait();
      else r.recv(Stream{0}, 0, b, 0, bytes, 7).wait();
      r.end_phases();
    });
    // NIC: 4 us + 1e9 / 1e10; NVSwitch: 2 us + 1e9 / 1e11.
    const double want = same_node ? 2e-6 + 1e-2 : 4e-6 + 1e-1;
    EXPECT_NEAR(seconds(ph[1], "transfer"), want, want * 1e-9) << (same_node ? "NVLink" : "network");
  }
}

TEST_F(SimTest, VectoredMessageIsOneTransferOfItsRanges) {
  // Rank 0 sends a chunk's keys and values (two columns) and a second range as one vectored
  // message: one latency, the bytes of all three, and the keys' content where the receiver put them.
  const uint64_t rows = 100000000;  // 8-byte keys and values: 0.8 GB each
  struct Record {
    int id;
    RankResult result;
    std::vector<PhaseRecord> phases;
  };
  auto run = [&](bool sizes_match) {
    std::vector<Record> out;
    make_backend("sim")->run(
        cluster(2, 1),
        [&](Rank& r) {
          Tuples t = r.alloc_tuples(MemSpace::Device, rows, TupleFormat{8, 8}, "t");
          Buffer extra = r.alloc(MemSpace::Device, 4000, "extra");
          if (r.id() == 0) {
            GenerateOp gen;
            gen.spec.name = "R";
            gen.spec.rows = rows;
            gen.spec.dist = KeyDist::UniqueDense;
            gen.spec.key_bytes = 8;
            gen.spec.payload_bytes = {8};
            gen.out = t;
            r.launch(Stream{0}, gen).get();
          }
          r.barrier();
          r.phase("transfer");
          const std::vector<BufferRange> ranges = {
              {t.keys, 0, rows * 8}, {t.vals, 0, rows * 8}, {extra, 0, sizes_match ? 4000u : 3000u}};
          if (r.id() == 0) r.send_v(Stream{1}, 1, {ranges[0], ranges[1], {extra, 0, 4000}}, 5).wait();
          else r.recv_v(Stream{1}, 0, ranges, 5).wait();
          r.end_phases();
          if (r.id() == 1) {  // the received keys join the generated relation's keys one to one
            HashTable table = r.alloc_table(MemSpace::Device, TableKind::LinearProbing, t.fmt, rows, 0.5, 1, "h");
            r.launch(Stream{0}, BuildOp{t, &table}).get();
            JoinOutput o;
            r.report({r.launch(Stream{0}, ProbeOp{&table, t, o, 0, OutputMode::CountOnly}).get().count, 0, false});
          }
        },
        [&](Rank& r) { out.push_back({r.id(), r.result(), r.phases()}); });
    return out;
  };
  auto ranks = run(true);
  ASSERT_EQ(ranks.size(), 2u);
  const Record& rx = ranks[0].id == 1 ? ranks[0] : ranks[1];
  EXPECT_NEAR(seconds(rx.phases, "transfer"), 4e-6 + (2.0 * rows * 8 + 4000) / 1e10, 1e-9);
  EXPECT_EQ(rx.result.count, rows) << "the keys' content arrived with the message";
  try {
    run(false);
    FAIL() << "a receive whose ranges differ from the message's must be an error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("800000000 + 800000000 + 4000 bytes"), std::string::npos) << e.what();
  }
}

TEST_F(SimTest, AlltoallDeliversTheWordsSentToEachRank) {
  std::map<int, uint64_t> got;
  make_backend("sim")->run(
      cluster(2, 2),
      [](Rank& r) {
        std::vector<uint64_t> mine;
        for (int to = 0; to < r.size(); ++to) mine.insert(mine.end(), {uint64_t(100 * r.id() + to), uint64_t(to)});
        const std::vector<uint64_t> in = r.alltoall(mine, 2);
        uint64_t code = 0;  // in[2 from] = 100 from + me, in[2 from + 1] = me
        bool ok = in.size() == 2 * size_t(r.size());
        for (int from = 0; ok && from < r.size(); ++from)
          ok = in[2 * size_t(from)] == uint64_t(100 * from + r.id()) && in[2 * size_t(from) + 1] == uint64_t(r.id());
        if (ok) code = 1000 + uint64_t(r.id());
        r.report({code, 0, false});
      },
      [&](Rank& r) { got[r.id()] = r.result().count; });
  EXPECT_EQ(got, (std::map<int, uint64_t>{{0, 1000}, {1, 1001}, {2, 1002}, {3, 1003}}));
}

TEST_F(SimTest, EmulatedNodesShareOneHostsLinks) {
  // Declared 2 nodes x 1 GPU, run on one host (cluster.emulate_nodes): the rank on the other
  // declared node is reached over NVSwitch, while the strategy still sees two nodes.
  const uint64_t bytes = 1000000000;
  BackendConfig c = cluster(2, 1);
  c.options["emulate_nodes"] = "true";
  auto ph = simulate(c, [&](Rank& r) {
    EXPECT_EQ(r.node(), r.id());  // the declared shape
    Buffer b = r.alloc(MemSpace::Device, bytes, "b");
    r.phase("transfer");
    if (r.id() == 0) r.send(Stream{0}, 1, b, 0, bytes, 7).wait();
    else r.recv(Stream{0}, 0, b, 0, bytes, 7).wait();
    r.end_phases();
  });
  EXPECT_NEAR(seconds(ph[1], "transfer"), 2e-6 + 1e-2, 1e-11);  // NVSwitch, not the NIC's 4 us + 0.1 s
  c.options["emulate_nodes"] = "maybe";
  EXPECT_THROW(simulate(c, [](Rank&) {}), InputError);
}

TEST_F(SimTest, HostToDeviceCopyUsesPcie) {
  auto ph = simulate(cluster(1, 1), [](Rank& r) {
    Buffer h = r.alloc(MemSpace::Pinned, 500000000, "h"), d = r.alloc(MemSpace::Device, 500000000, "d");
    r.phase("copy");
    r.copy(Stream{0}, d, 0, h, 0, 500000000).wait();
    r.end_phases();
  });
  EXPECT_NEAR(seconds(ph[0], "copy"), 1e-5 + 0.05, 1e-9);
}

// A vectored copy is one launch and one transfer over PCIe: 10 ranges of 1 MB host -> device
// with a launch of 100 us take 100 us + 10 us + 10 MB / 1e10, where 10 copies pay the launch and
// the link's latency each.
TEST_F(SimTest, AVectoredCopyPaysOneLaunchForItsRanges) {
  BackendConfig c = cluster(1, 1);
  c.profile_overrides = {{"msg.copy_seconds", "1e-4"}};
  const uint64_t mb = 1000000;
  auto run = [&](bool batched) {
    return simulate(c, [&](Rank& r) {
      Buffer h = r.alloc(MemSpace::Pinned, 10 * mb, "h"), d = r.alloc(MemSpace::Device, 10 * mb, "d");
      std::vector<CopyRange> copies;
      for (uint64_t i = 0; i < 10; ++i) copies.push_back({d, (9 - i) * mb, h, i * mb, mb});
      r.phase("copy");
      if (batched) r.copy_v(Stream{0}, copies).wait();
      else
        for (const CopyRange& x : copies) r.copy(Stream{0}, x.dst, x.dst_off, x.src, x.src_off, x.bytes).wait();
      r.end_phases();
    })[0];
  };
  EXPECT_NEAR(seconds(run(true), "copy"), 1e-4 + 1e-5 + 10 * mb / 1e10, 1e-9);
  EXPECT_NEAR(seconds(run(false), "copy"), 10 * (1e-4 + 1e-5 + mb / 1e10), 1e-9);
  // Inside device memory a batch is one kernel (a gather): the time of one copy of its bytes.
  auto on_device = [&](int ranges) {
    return seconds(simulate(c, [&](Rank& r) {
                     Buffer a = r.alloc(MemSpace::Device, 10 * mb, "a"), b = r.alloc(MemSpace::Device, 10 * mb, "b");
                     std::vector<CopyRange> copies;
                     const uint64_t each = 10 * mb / uint64_t(ranges);
                     for (int i = 0; i < ranges; ++i) copies.push_back({b, uint64_t(ranges - 1 - i) * each, a, uint64_t(i) * each, each});
                     r.phase("copy");
                     r.copy_v(Stream{0}, copies).wait();
                     r.end_phases();
                   })[0],
                   "copy");
  };
  EXPECT_GT(on_device(1), 0.0);
  EXPECT_NEAR(on_device(10), on_device(1), 1e-12);
}

TEST_F(SimTest, ConcurrentCopiesThroughOneHostMemoryEachTakeTheirPcieTime) {
  // Two GPUs of a node copy from host memory at once: their paths share the host-memory link
  // (1e11, not a bottleneck) and each has its own PCIe link. Each takes 10 us + B / 1e10. (With
  // network/TCP-gamma = 0, SimGrid 3.32 ended one of them after 10.4 us instead of 13.3 us.)
  const uint64_t b = 32800;
  auto ph = simulate(cluster(1, 2), [&](Rank& r) {
    Buffer h = r.alloc(MemSpace::Pinned, b, "h"), d = r.alloc(MemSpace::Device, b, "d");
    r.barrier();
    r.phase("copy");
    r.copy(Stream{0}, d, 0, h, 0, b).wait();
    r.end_phases();
  });
  for (auto& p : ph) EXPECT_NEAR(seconds(p, "copy"), 1e-5 + b / 1e10, 1e-12);
}

TEST_F(SimTest, CollectivesOfThreadRanksCostOneWakeUpAtAnyRankCount) {
  // Over messages (mpirun's ranks, a cluster) an allgather takes log2(ranks) rounds; ranks that are
  // threads of one process meet in shared memory (one round at any count), as the cpu and cuda
  // backends' in-process worlds do. Ten barriers per run, all ranks on one node.
  auto barriers = [&](int ranks, const char* launch) {
    BackendConfig c = cluster(1, ranks);
    c.options["sim_launch"] = launch;
    auto ph = simulate(c, [&](Rank& r) {
      r.barrier();
      r.phase("barriers");
      for (int i = 0; i < 10; ++i) r.allgather({uint64_t(r.id())});
      r.end_phases();
    });
    return seconds(ph[0], "barriers");
  };
  const double p2 = barriers(2, "processes"), p8 = barriers(8, "processes");
  const double t2 = barriers(2, "threads"), t8 = barriers(8, "threads");
  EXPECT_GT(p2, 0);
  EXPECT_GE(p8, 3 * p2 * 0.99) << "three dissemination rounds at 8 ranks, one at 2";
  EXPECT_NEAR(t2, p2, 0.01 * p2) << "two ranks: one round either way";
  EXPECT_NEAR(t8, t2, 0.01 * t2) << "threads: one wake-up whatever the ranks";
  BackendConfig bad = cluster(1, 2);
  bad.options["sim_launch"] = "fork";
  EXPECT_THROW(simulate(bad, [](Rank&) {}), InputError);
}

TEST_F(SimTest, AllToAllIsBoundedByTheNic) {
  // 4 nodes x 2 GPUs; every rank sends B to each other rank at once (a stream per peer).
  const int nodes = 4, per = 2, n = nodes * per;
  const uint64_t b = 100000000;
  auto ph = simulate(cluster(nodes, per), [&](Rank& r) {
    Buffer out = r.alloc(MemSpace::Device, b, "out"), in = r.alloc(MemSpace::Device, b * n, "in");
    r.phase("all-to-all");
    std::vector<Event> ev;
    for (int k = 1; k < n; ++k) {
      ev.push_back(r.recv(Stream{k}, (r.id() - k + n) % n, in, uint64_t(k) * b, b, 0));
      ev.push_back(r.send(Stream{7 + k}, (r.id() + k) % n, out, 0, b, 0));
    }
    for (auto& e : ev) e.wait();
    r.end_phases();
  });
  // Each NIC carries (n - per) * B each way; NVLink traffic is 10x faster and runs beside it.
  const double bound = double(n - per) * b / 1e10;
  for (auto& p : ph) {
    const double t = seconds(p, "all-to-all");
    EXPECT_GE(t, bound);
    EXPECT_LE(t, bound * 1.001 + 1e-5);
  }
}

TEST_F(SimTest, NodeFlowsMergeTheTransfersOfAnInstantHoweverTheirRanksWake) {
  // 2 nodes x 2 GPUs. Rank 3 sends a small message to ranks 0 and 1; once it is in, both send B
  // to rank 2, whose NIC they share: 4 us + 2B / 1e10 each. Rank 0 has a kernel running while it
  // waits, so it wakes a round after rank 1 (its wait is a bell, not a suspended actor): merged
  // node flows must still take both transfers of that instant together (two separate flows would
  // each have the node's pooled NICs and end in half the time), as per-GPU flows do.
  const uint64_t b = 100000000, small = 1000;
  for (const char* flows : {"pair", "node"}) {
    BackendConfig c = cluster(2, 2);
    c.options = {{"sim_flows", flows}};
    auto ph = simulate(c, [&](Rank& r) {
      Buffer buf = r.alloc(MemSpace::Device, 2 * b, "b"), scratch = r.alloc(MemSpace::Device, 8 << 27, "s");
      if (r.id() == 3) {
        Event a = r.send(Stream{1}, 0, buf, 0, small, 1), c = r.send(Stream{2}, 1, buf, 0, small, 1);
        a.wait();
        c.wait();
      } else if (r.id() == 2) {
        Event a = r.recv(Stream{1}, 0, buf, 0, b, 2), c = r.recv(Stream{2}, 1, buf, b, b, 2);
        a.wait();
        c.wait();
      } else {
        Launched kernel;
        if (r.id() == 0) kernel = r.launch(Stream{0}, ScanOp{scratch, scratch, 1 << 27});  // ~1 ms
        r.recv(Stream{1}, 3, buf, 0, small, 1).wait();
        r.phase("send");
        r.send(Stream{2}, 2, buf, 0, b, 2).wait();
        r.end_phases();
        if (r.id() == 0) kernel.done.wait();
      }
    });
    for (int sender : {0, 1})
      EXPECT_NEAR(seconds(ph[size_t(sender)], "send"), 4e-6 + 2.0 * b / 1e10, 1e-9) << flows << " flows, rank " << sender;
  }
}

TEST_F(SimTest, OversubscribedFatTreeSlowsCrossLeafTraffic) {
  // 4 nodes x 1 GPU, 2 nodes per leaf, leaf uplinks at half the leaf's NIC capacity: the
  // simulator's [cluster] keys, or the same figures of the profile replaced by overrides.
  BackendConfig by_cluster_keys = cluster(4, 1), by_profile_keys = cluster(4, 1);
  by_cluster_keys.options = {{"fabric", "fat_tree"}, {"levels", "2"}, {"leaf_nodes", "2"}, {"oversubscription", "2"}};
  by_profile_keys.profile_overrides = {{"topology.fabric", "fat_tree"}, {"topology.levels", "2"},
                                       {"topology.leaf_nodes", "2"}, {"topology.oversubscription", "2"}};
  const uint64_t b = 1000000000;
  for (const BackendConfig& c : {by_cluster_keys, by_profile_keys})
  for (bool cross : {false, true}) {
    auto ph = simulate(c, [&](Rank& r) {
      Buffer buf = r.alloc(MemSpace::Device, b, "b");
      // Within a leaf: 0 -> 1 and 2 -> 3. Across: 0 -> 2 and 1 -> 3 (both through leaf 0's uplink).
      const int to = cross ? (r.id() + 2) % 4 : (r.id() ^ 1);
      const bool sender = cross ? r.id() < 2 : r.id() % 2 == 0;
      r.phase("transfer");
      if (sender) r.send(Stream{0}, to, buf, 0, b, 0).wait();
      else r.recv(Stream{0}, cross ? (r.id() + 2) % 4 : (r.id() ^ 1), buf, 0, b, 0).wait();
      r.end_phases();
    });
    const double t = seconds(ph[cross ? 2 : 1], "transfer");
    EXPECT_NEAR(t, (cross ? 2.0 : 1.0) * b / 1e10, 1e-4)
        << (cross ? "across leaves" : "within a leaf") << (c.options.empty() ? ", profile keys" : ", cluster keys");
  }
}

TEST_F(SimTest, AProfileOverrideChangesTheLinkItNames) {
  // One transfer between nodes takes the NIC's latency + bytes / bandwidth (the profile's
  // figures): with the bandwidth doubled by an override, the bytes take half the time.
  const Profile file = load_profile((dir_ / "test.ini").string());
  const uint64_t bytes = 1000000000;
  auto transfer_seconds = [&](const BackendConfig& c) {
    auto ph = simulate(c, [&](Rank& r) {
      Buffer b = r.alloc(MemSpace::Device, bytes, "b");
      r.phase("transfer");
      if (r.id() == 0) r.send(Stream{0}, 1, b, 0, bytes, 7).wait();
      else r.recv(Stream{0}, 0, b, 0, bytes, 7).wait();
      r.end_phases();
    });
    return seconds(ph[1], "transfer");
  };
  BackendConfig doubled = cluster(2, 1);
  doubled.profile_overrides = {{"link.nic.bw", std::to_string(2 * file.nic.bw)}};
  const double before = transfer_seconds(cluster(2, 1)), after = transfer_seconds(doubled);
  const double want_before = file.nic.latency + bytes / file.nic.bw, want_after = file.nic.latency + bytes / (2 * file.nic.bw);
  EXPECT_NEAR(before, want_before, 1e-9 * want_before);
  EXPECT_NEAR(after, want_after, 1e-9 * want_after);
  EXPECT_NEAR(after / before, want_after / want_before, 1e-6);  // close to 1/2: the latency is small
}

TEST_F(SimTest, TwoKernelsOnOneGpuShareIt) {
  const uint64_t n = 1 << 27;  // scan: 1e-5 + 8n * 1e-12 s alone
  auto ph = simulate(cluster(1, 1), [&](Rank& r) {
    Buffer a = r.alloc(MemSpace::Device, n * 8, "a"), c = r.alloc(MemSpace::Device, n * 8, "c");
    r.phase("alone");
    r.launch(Stream{0}, ScanOp{a, c, n}).get();
    r.phase("together");
    Launched x = r.launch(Stream{0}, ScanOp{a, c, n}), y = r.launch(Stream{1}, ScanOp{c, a, n});
    x.get();
    y.get();
    r.end_phases();
  });
  const double alone = 1e-5 + 8.0 * n * 1e-12;
  EXPECT_NEAR(seconds(ph[0], "alone"), alone, alone * 1e-9);
  EXPECT_NEAR(seconds(ph[0], "together"), 2 * alone, alone * 1e-9);
}

TEST_F(SimTest, StreamsRunInOrderAndEventsOrderStreams) {
  const uint64_t n = 1 << 24;
  auto ph = simulate(cluster(1, 1), [&](Rank& r) {
    Buffer a = r.alloc(MemSpace::Device, n * 8, "a"), c = r.alloc(MemSpace::Device, n * 8, "c");
    r.phase("chain");
    r.launch(Stream{0}, ScanOp{a, c, n});
    Event first = r.record(Stream{0});
    r.stream_wait(Stream{1}, first);  // stream 1 starts after stream 0's scan
    r.launch(Stream{1}, ScanOp{c, a, n});
    r.sync(Stream{1});
    r.end_phases();
  });
  const double one = 1e-5 + 8.0 * n * 1e-12;
  EXPECT_NEAR(seconds(ph[0], "chain"), 2 * one, one * 1e-9);
}

// --- data-free results ------------------------------------------------------------------------------

RelationSpec relation(const char* name, uint64_t rows, KeyDist d) {
  RelationSpec s;
  s.name = name;
  s.rows = rows;
  s.dist = d;
  return s;
}

TEST(SimContent, HistogramsAreExactIntegersThatSumToTheRows) {
  RelationSpec r = relation("R", 1000003, KeyDist::UniqueDense);
  auto c = sim::generated_content(r, nullptr, 0, r.rows);
  for (auto fn : {PartitionFn{PartitionFn::Radix, 7, 0, 0}, PartitionFn{PartitionFn::Hash, 10, 0, 99}}) {
    auto counts = sim::split_counts(*c, fn);
    ASSERT_EQ(counts.size(), fn.fanout());
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), uint64_t(0)), r.rows);
    auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
    EXPECT_LE(*hi - *lo, 1u) << "uniform keys split evenly";
    auto parts = sim::split_content(*c, fn);
    for (size_t p = 0; p < parts.size(); ++p) EXPECT_EQ(parts[p]->rows(), counts[p]);
  }
}

TEST(SimContent, TheRowsLeftOverByEqualSharesGoToDifferentPartitionsPerSplit) {
  // Slices of a foreign key at match rate 0.3 (a component of hits, one of misses), each split
  // by a hash into 32 equal shares: the rows left over must not all go to the lowest partitions,
  // which would give the first receivers more rows and a one-row chunk more per batch.
  RelationSpec r = relation("R", 1 << 20, KeyDist::UniqueDense);
  RelationSpec s = relation("S", 1 << 20, KeyDist::ForeignKey);
  s.match_rate = 0.3;
  const PartitionFn fn{PartitionFn::Hash, 5, 0, 7};
  std::vector<uint64_t> sum(fn.fanout(), 0);
  const uint64_t slice = 65536;
  for (uint64_t first = 0; first < s.rows; first += slice) {
    auto c = sim::generated_content(s, &r, first, slice);
    auto counts = sim::split_counts(*c, fn);
    auto parts = sim::split_content(*c, fn);
    for (size_t p = 0; p < counts.size(); ++p) {
      EXPECT_EQ(parts[p]->rows(), counts[p]) << "the split and the counts round alike";
      sum[p] += counts[p];
    }
  }
  EXPECT_EQ(std::accumulate(sum.begin(), sum.end(), uint64_t(0)), s.rows);
  const uint64_t low = std::accumulate(sum.begin(), sum.begin() + 16, uint64_t(0));
  const uint64_t high = std::accumulate(sum.begin() + 16, sum.end(), uint64_t(0));
  // 16 slices x 2 components leave at most 31 rows each: all to the low half would be ~ +500.
  EXPECT_LT(low > high ? low - high : high - low, 200u) << low << " rows in partitions 0-15, " << high << " in 16-31";
}

TEST(SimContent, RadixPartitionOfDenseKeysFollowsTheKeyRange) {
  // Keys 1..100 partitioned on bits 4..6: 8 partitions, counts from the interval exactly.
  RelationSpec r = relation("R", 100, KeyDist::UniqueDense);
  auto counts = sim::split_counts(*sim::generated_content(r, nullptr, 0, 100), PartitionFn{PartitionFn::Radix, 3, 4, 0});
  std::vector<uint64_t> want(8, 0);
  for (uint64_t k = 1; k <= 100; ++k) want[(k >> 4) & 7]++;
  EXPECT_EQ(counts, want);
}

TEST(SimContent, APartitionsKeysKeepTheirRangeForTheSort) {
  // One hash partition of R's dense keys 1..2^22 holds 2^18 keys spread over the whole range:
  // the MSD sort plans its bits from that range (one bit per doubling of it), not from the count.
  RelationSpec r = relation("R", 1 << 22, KeyDist::UniqueDense);
  auto c = sim::generated_content(r, nullptr, 0, r.rows);
  EXPECT_EQ(sim::key_access(*c).max_key, double(1 << 22));
  auto part = sim::split_content(*c, PartitionFn{PartitionFn::Hash, 4, 0, 7})[3];
  const KeyAccess a = sim::key_access(*part);
  EXPECT_EQ(a.max_key, double(1 << 22));
  Tuples t;
  t.fmt = {4, 4};
  t.rows = part->rows();
  const OpSample spread = op_sample(SortOp{t, t, SortAlgo::Radix}, OpResult{}, &a);
  const OpSample dense = op_sample(SortOp{t, t, SortAlgo::Radix}, OpResult{});  // keys 1..rows
  EXPECT_EQ(spread.x[8], 512.0) << "2^18 rows over 2^22 keys: 22 bits, 13 low ones: 2^9 blocks of 512 rows";
  EXPECT_EQ(dense.x[8], 64.0) << "2^18 dense keys: 18 bits, 12 low ones: 2^6 blocks of 4096 rows";
}

TEST(SimContent, ZipfKeysGiveSkewedPartitions) {
  RelationSpec s = relation("S", 10000000, KeyDist::Zipf);
  s.zipf_z = 1.0;
  s.zipf_domain = 1 << 20;
  auto counts = sim::split_counts(*sim::generated_content(s, nullptr, 0, s.rows), PartitionFn{PartitionFn::Hash, 4, 0, 5});
  EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), uint64_t(0)), s.rows);
  const double mean = double(s.rows) / 16;
  EXPECT_GT(double(*std::max_element(counts.begin(), counts.end())), 1.3 * mean);
  s.zipf_z = 0;
  auto flat = sim::split_counts(*sim::generated_content(s, nullptr, 0, s.rows), PartitionFn{PartitionFn::Hash, 4, 0, 5});
  EXPECT_LT(double(*std::max_element(flat.begin(), flat.end())), 1.001 * mean);
}

TEST(SimContent, ForeignKeyMatchesFollowTheMatchRateAndCoPartitioning) {
  RelationSpec r = relation("R", 1 << 20, KeyDist::UniqueSparse);
  RelationSpec s = relation("S", 1 << 22, KeyDist::ForeignKey);
  s.match_rate = 0.25;
  auto rc = sim::generated_content(r, nullptr, 0, r.rows);
  auto sc = sim::generated_content(s, &r, 0, s.rows);
  const double hits = double(make_keygen(s, &r).hits(0, s.rows));  // the generator's, about 0.25 |S|
  EXPECT_NEAR(hits, 0.25 * s.rows, 0.01 * s.rows);
  EXPECT_EQ(sim::expected_matches(*rc, *sc), hits);
  // Partition both sides by one function: the partition pairs hold every match, the cross pairs none.
  const PartitionFn fn{PartitionFn::Hash, 3, 0, 11};
  auto rp = sim::split_content(*rc, fn), sp = sim::split_content(*sc, fn);
  double same = 0, cross = 0;
  for (size_t i = 0; i < rp.size(); ++i)
    for (size_t j = 0; j < sp.size(); ++j) (i == j ? same : cross) += sim::expected_matches(*rp[i], *sp[j]);
  EXPECT_EQ(same, hits);
  EXPECT_LT(cross, 1e-6);
  // Half of R's rows (one rank's slice of two) match half of S's hits.
  auto half = sim::generated_content(r, nullptr, 0, r.rows / 2);
  EXPECT_NEAR(sim::expected_matches(*half, *sc), 0.5 * hits, 1.0);
}

TEST(SimContent, SkewedForeignKeysKeepTheirHeavyKeys) {
  RelationSpec r = relation("R", 1 << 20, KeyDist::UniqueDense);
  RelationSpec s = relation("S", 1 << 22, KeyDist::ForeignKey);
  s.zipf_z = 1.5;
  auto sc = sim::generated_content(s, &r, 0, s.rows);
  ASSERT_FALSE(sc->parts.empty());
  uint64_t top = 0;
  for (auto& [k, n] : sc->parts.front().heavy) top = std::max(top, n);
  EXPECT_GT(double(top), 0.3 * s.rows) << "z = 1.5: the top key holds ~1/zeta(1.5) = 38% of the rows";
  EXPECT_NEAR(sim::expected_matches(*sim::generated_content(r, nullptr, 0, r.rows), *sc), double(s.rows), 1.0);
}

TEST(SimContent, ReceivedPartitionsOfUniformRowsMergeIntoOneRegion) {
  // A shuffle's receive buffer: partition 3 of each of 8 senders' slices, written in descending
  // order (as rounds arrive). Uniform rows (one key set, no heavy keys) merge into one region that
  // reads exactly as the pieces would; skewed pieces (heavy keys) keep their own regions.
  for (double z : {0.0, 1.2}) {
    RelationSpec r = relation("R", 1 << 20, KeyDist::UniqueDense);
    RelationSpec s = relation("S", 1 << 22, KeyDist::ForeignKey);
    s.zipf_z = z;
    const PartitionFn fn{PartitionFn::Hash, 3, 0, 17};
    const uint64_t slice = s.rows / 8;
    std::vector<sim::ContentPtr> pieces;
    std::vector<uint64_t> at = {0};
    for (uint64_t sender = 0; sender < 8; ++sender) {
      pieces.push_back(sim::split_content(*sim::generated_content(s, &r, sender * slice, slice), fn)[3]);
      at.push_back(at.back() + pieces.back()->rows());
    }
    sim::RegionMap merged;
    for (size_t i = pieces.size(); i-- > 0;) merged.write_merging(at[i] * 8, 8, pieces[i]);
    auto rc = sim::generated_content(r, nullptr, 0, r.rows);
    for (size_t i = 0; i < pieces.size(); ++i) {
      auto c = merged.read(at[i] * 8, at[i + 1] * 8);
      ASSERT_TRUE(c);
      EXPECT_EQ(c->rows(), pieces[i]->rows());
      EXPECT_NEAR(sim::expected_matches(*rc, *c), sim::expected_matches(*rc, *pieces[i]), 1e-9 * double(s.rows)) << i;
    }
    auto all = merged.read(0, at.back() * 8);
    EXPECT_EQ(all->rows(), at.back());
    EXPECT_NEAR(sim::expected_matches(*rc, *all), double(at.back()), 1.0) << "every row of S matches";
    EXPECT_EQ(merged.at(at[1] * 8) == nullptr, z == 0) << "uniform pieces leave one region, starting at 0";
  }
}

TEST(SimContent, ApportionIsExactAndDeterministic) {
  auto a = sim::apportion({1, 1, 1}, 10);
  EXPECT_EQ(a, (std::vector<uint64_t>{4, 3, 3}));
  auto b = sim::apportion({0.5, 0.25, 0.25}, 7);
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), uint64_t(0)), 7u);
  EXPECT_EQ(b, sim::apportion({0.5, 0.25, 0.25}, 7));
}

TEST(SimContent, ApportionGivesTheRestToTheLargestRemaindersInIndexOrder) {
  // The reference: sort by remainder (stable, so ties keep index order), hand out the rest round
  // robin in that order.
  auto reference = [](const std::vector<double>& w, uint64_t total) {
    long double sum = 0;
    for (double x : w) sum += x;
    std::vector<long double> share(w.size());
    std::vector<uint64_t> out(w.size());
    uint64_t given = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      share[i] = (long double)w[i] / sum * total;
      out[i] = uint64_t(std::floor(share[i]));
      given += out[i];
    }
    std::vector<size_t> order(w.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return share[a] - std::floor(share[a]) > share[b] - std::floor(share[b]);
    });
    for (size_t i = 0; given < total; i = (i + 1) % order.size(), ++given) out[order[i]]++;
    return out;
  };
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ULL + 1442695040888963407ULL; };
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + next() % 300;
    std::vector<double> w(n);
    for (auto& x : w) x = trial % 3 == 0 ? 1.0 : double(next() % 1000 + 1) / 7.0;  // equal weights tie everywhere
    const uint64_t total = next() % (trial % 2 ? 5 * n : 1000000007ULL);
    EXPECT_EQ(sim::apportion(w, total), reference(w, total)) << "trial " << trial << ", " << n << " weights, total " << total;
  }
}

// --- strategies, end to end -------------------------------------------------------------------

RunPoint shuffle_point(int nodes, int per_node, uint64_t rows, const std::string& profile, const std::string& dir) {
  RunPoint p;
  p.name = "sim test";
  p.strategy = "shuffle";
  p.backend = "sim";
  p.verify = false;
  p.cluster.shape = {nodes, per_node};
  p.cluster.profile = profile;
  p.cluster.profile_dir = dir;
  p.workload.r = relation("R", rows, KeyDist::UniqueDense);
  p.workload.s = relation("S", rows, KeyDist::ForeignKey);
  return p;
}

std::string repo_profiles() { return std::string(JOINLAB_SOURCE_DIR) + "/models/profiles"; }

TEST_F(SimTest, SixtyFourGpuShuffleEndToEnd) {
  RunPoint p = shuffle_point(8, 8, uint64_t(64) << 22, "h100", repo_profiles());
  RunOutcome o = run_point(p);
  EXPECT_EQ(o.digest.count, p.workload.s.rows) << "every S row matches one R row";
  EXPECT_FALSE(o.has_checksum);
  std::map<std::string, double> phases;
  for (auto& ph : o.phases) phases[ph.name] = ph.seconds;
  EXPECT_GT(phases["shuffle"], 0);
  EXPECT_GT(phases["partition"], 0);
  EXPECT_GE(o.total_seconds, o.bound.seconds) << "no simulated run beats its analytic bound";
  EXPECT_FALSE(o.trace.empty());
  EXPECT_EQ(o.rank_phases.size(), 64u);
}

// compression = cascaded on TPC-H keys (orders sorted and sparse, lineitem runs of an order's
// lines: 10x and more) on 2, 4 and 16 simulated A100s: the received compressed batches decompress
// to the senders' keys, so the count is exact, and the shuffle moves fewer bytes, so its phase is
// shorter than uncompressed. auto keeps the count too.
TEST_F(SimTest, CompressedShuffleCountsExactlyAndShufflesFaster) {
  auto phase = [](const RunOutcome& o, const std::string& name) {
    double t = 0;
    for (auto& ph : o.phases)
      if (ph.name == name) t += ph.seconds;
    return t;
  };
  for (ClusterShape shape : {ClusterShape{2, 1}, ClusterShape{2, 2}, ClusterShape{2, 8}})
    for (std::string levels : {"1", "2"}) {
      RunPoint p = shuffle_point(shape.nodes, shape.per_node, 0, "dgx-a100-hdr", repo_profiles());
      p.workload = test::tpch(1, 8);
      p.strategy_options = {{"levels", levels}, {"chunk_rows", "1048576"}};
      const RunOutcome off = run_point(p);
      p.strategy_options["compression"] = "cascaded";
      const RunOutcome on = run_point(p);
      p.strategy_options["compression"] = "auto";
      const RunOutcome automatic = run_point(p);
      SCOPED_TRACE(std::to_string(shape.size()) + " ranks, levels " + levels);
      EXPECT_EQ(off.digest.count, p.workload.s.rows) << "every lineitem has its order";
      EXPECT_EQ(on.digest.count, off.digest.count);
      EXPECT_EQ(automatic.digest.count, off.digest.count);
      EXPECT_GT(off.sent_bytes, 0u);
      EXPECT_LT(on.sent_bytes, off.sent_bytes / 2) << "the results count the compressed bytes";
      for (const std::string suffix : {"", "_node"}) {
        if (phase(off, "shuffle" + suffix) == 0) continue;  // a level of one rank
        EXPECT_GT(phase(on, "compress" + suffix), 0);
        EXPECT_GT(phase(on, "decompress" + suffix), 0);
        EXPECT_LT(phase(on, "shuffle" + suffix), phase(off, "shuffle" + suffix)) << suffix;
        std::printf("%d ranks levels %s shuffle%s: off %.3g s, cascaded %.3g + %.3g + %.3g s, auto %.3g s\n",
                    shape.size(), levels.c_str(), suffix.c_str(), phase(off, "shuffle" + suffix),
                    phase(on, "compress" + suffix), phase(on, "shuffle" + suffix), phase(on, "decompress" + suffix),
                    phase(automatic, "compress" + suffix) + phase(automatic, "shuffle" + suffix) +
                        phase(automatic, "decompress" + suffix));
      }
    }
}

TEST_F(SimTest, ASweepOverAProfileKeyGivesARowPerValueWithTheKeyRecorded) {
  // A shuffle between 2 nodes of 1 GPU, every tuple's half for the other node crossing the NICs;
  // the NIC bandwidth swept over x1 and x2 of the profile's.
  const Profile file = load_profile((dir_ / "test.ini").string());
  const std::vector<std::string> bandwidths{std::to_string(file.nic.bw), std::to_string(2 * file.nic.bw)};
  const fs::path ini = dir_ / "what-if.ini";
  std::ofstream(ini) << "[experiment]\nstrategy = shuffle\nbackend = sim\n[cluster]\nnodes = 2\nprofile = "
                     << (dir_ / "test.ini").string() << "\n[workload]\nrows_per_rank = 2^22\n[sweep]\nprofile.link.nic.bw = "
                     << bandwidths[0] << ", " << bandwidths[1] << "\n";
  const ExperimentPlan plan = plan_experiment(ini.string());
  ASSERT_EQ(plan.points.size(), 2u);
  std::vector<ResultRow> rows;
  for (auto& pp : plan.points) {
    ResultRow row;
    row.point = int(rows.size()) + 1;
    row.swept = pp.swept;
    row.outcome = run_point(pp.run);
    rows.push_back(row);
  }
  // The CSV: a column named by the swept key, and the overrides of each row.
  std::istringstream csv(csv_text(rows));
  std::vector<std::vector<std::string>> cells;
  for (std::string line; std::getline(csv, line);) {
    cells.emplace_back();
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cells.back().push_back(c);
  }
  ASSERT_EQ(cells.size(), 3u);
  auto column = [&](const std::string& name) {
    const auto at = std::find(cells[0].begin(), cells[0].end(), name);
    EXPECT_NE(at, cells[0].end()) << name;
    return size_t(at - cells[0].begin());
  };
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(cells[i + 1][column("profile.link.nic.bw")], bandwidths[i]);
    EXPECT_EQ(cells[i + 1][column("profile_overrides")], "link.nic.bw=" + bandwidths[i]);
  }
  // The bound is the NICs' bytes over their bandwidth: half of it at twice the bandwidth. The
  // shuffle phase saves at most its NIC time, and at least part of it.
  const RunOutcome &base = rows[0].outcome, &fast = rows[1].outcome;
  EXPECT_NE(base.bound.resource.find("network"), std::string::npos) << base.bound.resource;
  EXPECT_NEAR(fast.bound.seconds, base.bound.seconds / 2, 1e-9 * base.bound.seconds);
  auto shuffle_seconds = [](const RunOutcome& o) {
    for (auto& ph : o.phases)
      if (ph.name == "shuffle") return ph.seconds;
    ADD_FAILURE() << "no shuffle phase";
    return 0.0;
  };
  const double saved = shuffle_seconds(base) - shuffle_seconds(fast);
  EXPECT_GT(saved, base.bound.seconds / 4) << "the shuffle is bound by the NICs";
  EXPECT_LE(saved, base.bound.seconds / 2 * 1.01);
}

TEST_F(SimTest, RepeatedSimulationsAreIdentical) {
  RunPoint p = shuffle_point(4, 4, uint64_t(16) << 20, "h100", repo_profiles());
  p.workload.s.zipf_z = 1.0;  // skew makes flows of unequal sizes end at their own times
  RunOutcome a = run_point(p), b = run_point(p);
  EXPECT_EQ(a.total_seconds, b.total_seconds);
  ASSERT_EQ(a.phases.size(), b.phases.size());
  for (size_t i = 0; i < a.phases.size(); ++i) EXPECT_EQ(a.phases[i].seconds, b.phases[i].seconds);
  ASSERT_EQ(a.trace.size(), b.trace.size());
  for (size_t i = 0; i < a.trace.size(); ++i) {
    EXPECT_EQ(a.trace[i].begin, b.trace[i].begin);
    EXPECT_EQ(a.trace[i].end, b.trace[i].end);
  }
  EXPECT_EQ(a.digest.count, b.digest.count);
}

TEST_F(SimTest, NodeMergedFlowsMatchPerGpuFlowsOnLockStepShuffles) {
  // The two-level shuffle's rounds are lock-step (every GPU of a node sends to the same node at
  // once, on its own rail), the case node-merged flows reproduce exactly.
  RunPoint p = shuffle_point(4, 8, uint64_t(32) << 22, "h100", repo_profiles());
  p.strategy_options["levels"] = "2";
  p.cluster.options["sim_flows"] = "pair";
  RunOutcome pair = run_point(p);
  p.cluster.options["sim_flows"] = "node";
  RunOutcome node = run_point(p);
  EXPECT_NEAR(node.total_seconds, pair.total_seconds, 0.005 * pair.total_seconds);
  for (size_t i = 0; i < pair.phases.size(); ++i)
    EXPECT_NEAR(node.phases[i].seconds, pair.phases[i].seconds, 0.01 * pair.phases[i].seconds + 5e-6) << pair.phases[i].name;
}

TEST_F(SimTest, SkewedWorkloadsGiveSkewedRanks) {
  RunPoint p = shuffle_point(2, 4, uint64_t(8) << 20, "h100", repo_profiles());
  RunOutcome uniform = run_point(p);
  p.workload.s.zipf_z = 1.5;
  RunOutcome skewed = run_point(p);
  // The rank that receives the heavy keys of S holds up the exchange. (Not necessarily the local
  // probe: the calibrated probe model makes a few hot keys cheap to look up, as on the H100,
  // where a Zipf 1.5 probe side probes 5x faster than a uniform one.)
  auto phase = [](const RunOutcome& o, const std::string& name) {
    for (auto& ph : o.phases)
      if (ph.name == name) return ph.seconds;
    return 0.0;
  };
  EXPECT_GT(phase(skewed, "shuffle"), 1.5 * phase(uniform, "shuffle"));
  EXPECT_EQ(skewed.digest.count, p.workload.s.rows);
}

TEST_F(SimTest, DeadlockIsReportedNotHung) {
  try {
    simulate(cluster(1, 2), [](Rank& r) {
      Buffer b = r.alloc(MemSpace::Device, 8, "b");
      r.recv(Stream{0}, 1 - r.id(), b, 0, 8, 3).wait();  // both receive, nobody sends
    });
    FAIL() << "a deadlock must be an error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tag 3"), std::string::npos) << e.what();
  }
}

TEST_F(SimTest, OutOfMemoryNamesTheBuffer) {
  try {
    simulate(cluster(1, 1), [](Rank& r) { r.alloc(MemSpace::Device, uint64_t(2e12), "too big"); });
    FAIL();
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("too big"), std::string::npos) << e.what();
  }
}

// --- the one-sided joins (gpj, gpj-b, gpj-h, crj) ---------------------------------------------------

Workload pk_fk_16(uint64_t r_rows, uint64_t s_rows) {
  Workload w;
  w.r = relation("R", r_rows, KeyDist::UniqueDense);
  w.s = relation("S", s_rows, KeyDist::ForeignKey);
  for (RelationSpec* x : {&w.r, &w.s}) {
    x->key_bytes = 8;
    x->payload_bytes = {8};
  }
  return w;
}

RunPoint one_sided_point(const std::string& strategy, ClusterShape shape, const Workload& w, const std::string& profile,
                         const std::string& dir) {
  RunPoint p;
  p.name = "sim test";
  p.strategy = strategy;
  p.backend = "sim";
  p.verify = false;
  p.cluster.shape = shape;
  p.cluster.profile = profile;
  p.cluster.profile_dir = dir;
  p.workload = w;
  return p;
}

// p's run as given and with one strategy option set, both with every S row's match (PK-FK).
std::pair<RunOutcome, RunOutcome> as_given_and_with(RunPoint p, const std::string& key, const std::string& value) {
  const RunOutcome given = run_point(p);
  p.strategy_options[key] = value;
  const RunOutcome with = run_point(p);
  EXPECT_EQ(given.digest.count, p.workload.s.rows) << "as given";
  EXPECT_EQ(with.digest.count, p.workload.s.rows) << key << " = " << value;
  return {given, with};
}

double phase_of(const RunOutcome& o, const std::string& name) {
  for (auto& ph : o.phases)
    if (ph.name == name) return ph.seconds;
  return 0;
}

TEST_F(SimTest, OneSidedJoinsSimulateWithExactCounts) {
  for (const std::string strategy : {"gpj", "gpj-b", "gpj-h", "crj"}) {
    for (ClusterShape shape : {ClusterShape{1, 1}, ClusterShape{2, 2}}) {
      SCOPED_TRACE(strategy + " on " + std::to_string(shape.size()) + " ranks");
      RunPoint p = one_sided_point(strategy, shape, pk_fk_16(1 << 16, 1 << 18), (dir_ / "test.ini").string(), dir_.string());
      RunOutcome o = run_point(p);
      EXPECT_EQ(o.digest.count, p.workload.s.rows) << "every S row matches one R row";
      const bool streams = strategy == "gpj" || strategy == "gpj-h";
      EXPECT_GT(phase_of(o, streams ? "stream" : "exchange"), 0);
      EXPECT_GT(phase_of(o, "histogram"), 0);
      EXPECT_GE(o.total_seconds, o.bound.seconds) << "no simulated run beats its analytic bound";
    }
  }
}

TEST_F(SimTest, HybridJoinSplitsPartitionsBetweenGpuAndCpu) {
  // Device memory for about half of the partitions' tables and rings: gpj-h streams what fits and
  // joins the rest on the CPU; the count stays exact either way.
  RunPoint p = one_sided_point("gpj-h", {1, 2}, pk_fk_16(1 << 18, 1 << 18), (dir_ / "test.ini").string(), dir_.string());
  p.strategy_options = {{"chunk_bytes", "16384"}, {"slots", "2"}, {"staging_rows", "1024"}};
  p.cluster.device_memory = 4 << 20;
  RunOutcome o = run_point(p);
  EXPECT_EQ(o.digest.count, p.workload.s.rows);
  EXPECT_GT(phase_of(o, "stream"), 0) << "some partitions streamed";
  EXPECT_GT(phase_of(o, "cpu_partition") + phase_of(o, "cpu_join"), 0) << "the rest joined on the CPU";
}

// One GPU of the h100 profile joining |R| = |S| = `rows` rows of 16 bytes, PK-FK, unverified.
RunPoint h100_point(const std::string& strategy, uint64_t rows) {
  RunPoint p;
  p.name = "sim test";
  p.strategy = strategy;
  p.backend = "sim";
  p.verify = false;
  p.cluster.profile = "h100";
  p.cluster.profile_dir = repo_profiles();
  p.workload.r = relation("R", rows, KeyDist::UniqueDense);
  p.workload.s = relation("S", rows, KeyDist::ForeignKey);
  for (RelationSpec* r : {&p.workload.r, &p.workload.s}) r->key_bytes = 8, r->payload_bytes = {8};
  return p;
}

TEST_F(SimTest, TritonSpillsAndCostsFlushesByTheirGranularity) {
  // 2 x 2^26 rows of 16 bytes (2 GiB) with 512 MiB of H100 memory: the first pass spills, its
  // partitioner writing over the link (spill_write = kernel). The count is exact; 128-byte flushes
  // reach a fraction of PCIe's rate (link.d2h.write_128_bw), 4 KiB ones nearly all of it, so the
  // shared partitioner's first pass takes longer than the hierarchical's.
  auto run = [](const std::string& partitioner) {
    RunPoint p = h100_point("triton", uint64_t(1) << 26);
    p.cluster.device_memory = uint64_t(512) << 20;
    p.strategy_options = {{"partitioner", partitioner}, {"spill_write", "kernel"}};
    RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest.count, p.workload.s.rows);
    return o;
  };
  const RunOutcome shared = run("shared"), hierarchical = run("hierarchical");
  EXPECT_GT(phase_of(shared, "partition"), 2 * phase_of(hierarchical, "partition"));
  EXPECT_GT(phase_of(hierarchical, "join"), 0);
}

// With the partitioner's measured rates into pinned memory in the profile, its writes over the
// link run at the rate of its fanout (here 2 GB/s at every fanout: the first pass's spill, about
// 1.5 GiB, takes most of a second), not at its flushes' granule.
TEST_F(SimTest, TritonCostsThePartitionersWritesAtTheirMeasuredRate) {
  auto run = [](bool table) {
    RunPoint p = h100_point("triton", uint64_t(1) << 26);
    p.cluster.device_memory = uint64_t(512) << 20;
    p.strategy_options = {{"partitioner", "hierarchical"}, {"spill_write", "kernel"}};
    if (table)
      for (uint32_t f = 2; f <= 4096; f *= 2) p.cluster.profile_overrides["link.d2h.hierarchical_" + std::to_string(f) + "_bw"] = "2e9";
    RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest.count, p.workload.s.rows);
    return o;
  };
  const double by_granule = phase_of(run(false), "partition"), by_rate = phase_of(run(true), "partition");
  EXPECT_LT(by_granule, 0.4);
  EXPECT_GT(by_rate, 0.6);
  EXPECT_LT(by_rate, 1.2);
}

// mgsmj's multiway merge costs its runs' factor per byte (cpu.merge_runs): the same relations
// merged from 2 and from 4 chunksets take the same time where the profile has no factors, and
// 3x as long at 4 runs where 4 runs cost 3x per byte (host memory far from its roof).
TEST_F(SimTest, AMultiwayMergeOfMoreRunsCostsItsFactorPerByte) {
  auto merge_phase = [](const char* chunk_rows, bool factors) {
    RunPoint p = h100_point("mgsmj", uint64_t(1) << 22);
    p.strategy_options = {{"chunk_rows", chunk_rows}, {"output", "count_only"}};
    p.cluster.profile_overrides["host.mem_bw"] = "1e14";
    if (factors) p.cluster.profile_overrides["cpu.merge_runs.2"] = "1", p.cluster.profile_overrides["cpu.merge_runs.4"] = "3";
    return phase_of(run_point(p), "merge");
  };
  const double two = merge_phase("2097152", false), four = merge_phase("1048576", false);
  ASSERT_GT(two, 0);
  EXPECT_NEAR(four / two, 1.0, 0.1);
  const double two_f = merge_phase("2097152", true), four_f = merge_phase("1048576", true);
  EXPECT_NEAR(two_f / two, 1.0, 0.05);
  EXPECT_NEAR(four_f / two_f, 3.0, 0.3);
}

// An operator that takes a share of the GPU (gpu.share_*, calibrate's overlap step) leaves the rest
// to the other stream's: triton's join phase by copies, whose two lanes partition slices at once,
// (R and S cached whole) is shorter where partitions take half the GPU than where operators share
// it by time, and no
// shorter than half; the count stays exact.
TEST_F(SimTest, OperatorsThatTakeAShareOfTheGpuOverlapOnTwoStreams) {
  auto join_phase = [](const char* share) {
    RunPoint p = h100_point("triton", uint64_t(1) << 24);  // cached whole: the join phase is the GPU's
    p.cluster.device_memory = uint64_t(4) << 30;
    p.strategy_options["spill_read"] = "copy";
    p.strategy_options["in_gpu"] = "off";
    p.strategy_options["output"] = "count_only";  // no rows over the link
    if (share)
      for (int e : {16, 36}) p.cluster.profile_overrides[share_key("partition", uint64_t(1) << e)] = share;
    const RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest.count, p.workload.s.rows);
    return phase_of(o, "join");
  };
  const double by_time = join_phase(nullptr), half = join_phase("0.5"), whole = join_phase("1");
  ASSERT_GT(by_time, 0);
  EXPECT_NEAR(whole / by_time, 1.0, 1e-6);
  EXPECT_LT(half, 0.9 * by_time);
  EXPECT_GT(half, 0.5 * by_time);
}

// A first pass's chunk partitions into device memory run at the profile's measured rate for
// their pieces by fanout (gpu.chunk_partition_<fanout>_bw), not by the partition model: a tenth
// of the rate takes about ten times as long, and the join phase's operators do not change.
TEST_F(SimTest, FirstPassChunkPartitionsIntoDeviceMemoryRunAtTheirMeasuredRate) {
  auto spans = [](const char* rate) {
    RunPoint p = h100_point("triton", uint64_t(1) << 24);
    p.cluster.device_memory = uint64_t(4) << 30;  // cached whole
    p.strategy_options["in_gpu"] = "off";
    if (rate)
      for (int f : {2, 4096}) p.cluster.profile_overrides["gpu.chunk_partition_" + std::to_string(f) + "_bw"] = rate;
    const RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest.count, p.workload.s.rows);
    double first = 0, join = 0;
    for (const TraceSpan& t : o.trace)
      if (t.params.kind == OpKind::ChunkPartition) first += t.end - t.begin;
      else if (t.params.kind == OpKind::PartitionedJoin) join += t.end - t.begin;
    return std::pair{first, join};
  };
  const auto [fast, fast_join] = spans("4e11");
  const auto [slow, slow_join] = spans("4e10");
  ASSERT_GT(fast, 0);
  EXPECT_NEAR(slow / fast, 10.0, 1.5);
  EXPECT_NEAR(slow_join / fast_join, 1.0, 0.05);
}

// Both passes are laid out on the device: every chunk partition reads offsets a scan left on the
// device (the first pass: one scan per staged chunk; the join phase: one per relation and
// partition, on a GPU stream), the simulator writes the same partitions as from host offsets
// (the count is exact), and the join phase's scans cost what the scan model gives a few hundred
// thousand words (its launch constant, ~50 us on the h100 profile): here, with partitions of
// 2^20 rows whose spilled runs the partitioner reads over the link, under a quarter of the
// partitioners' time; with the runs copied in first (the partitioners then read device
// memory), under a fifth of the join phase (its two streams: 11% on the h100 profile).
TEST_F(SimTest, TritonLaysOutTheSecondPassOnTheDevice) {
  // In place (kernel reads) the second pass is a chunk partition laid out by a scan on the
  // device; by copies it gathers a slice's runs into device memory (from the cache and over the
  // link) and partitions it as one input. Either way the host hands no chunk its offsets.
  for (const char* read : {"kernel", "copy"}) {
    SCOPED_TRACE(std::string("spill_read = ") + read);
    RunPoint p = h100_point("triton", uint64_t(1) << 25);
    p.cluster.device_memory = uint64_t(256) << 20;
    p.strategy_options["spill_read"] = read;
    const RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest.count, p.workload.s.rows);
    double join_begin = -1, join_end = -1;
    for (const PhaseRecord& ph : o.rank_phases.at(0))
      if (ph.name == "join") join_begin = ph.begin, join_end = ph.end;
    ASSERT_GE(join_begin, 0);
    int scans = 0, on_device = 0, from_host = 0, join_chunk_partitions = 0, join_partitions = 0, gathers = 0;
    double scan_s = 0, partition_s = 0;
    for (const TraceSpan& t : o.trace) {
      const bool in_join = t.begin >= join_begin;
      if (t.params.kind == OpKind::Scan) {
        ++scans;
        if (in_join) scan_s += t.end - t.begin;
        EXPECT_EQ(t.track.rfind("stream", 0), 0u) << t.track;
      }
      if (in_join && t.params.kind == OpKind::Partition) ++join_partitions;
      if (in_join && t.params.kind == OpKind::Copy && t.params.mem_dst == int(MemSpace::Device)) ++gathers;
      if (t.params.kind != OpKind::ChunkPartition) continue;
      const bool device = t.params.detail.find("offsets on the device") != std::string::npos;
      device ? ++on_device : ++from_host;
      if (in_join) partition_s += t.end - t.begin, ++join_chunk_partitions;
    }
    EXPECT_GT(on_device, 0);
    EXPECT_EQ(from_host, 0);
    EXPECT_EQ(scans, on_device);
    if (std::string(read) == "kernel") {
      EXPECT_GT(join_chunk_partitions, 0);
      EXPECT_EQ(join_partitions, 0);
      EXPECT_LT(scan_s, 0.25 * partition_s) << scans << " scans";
    } else {
      EXPECT_EQ(join_chunk_partitions, 0);
      EXPECT_GT(join_partitions, 0);
      EXPECT_GT(gathers, 0);
      EXPECT_EQ(scan_s, 0.0);
      EXPECT_GT(join_end, join_begin);
    }
  }
}

// The test profile with lines added to its [link.d2h] and [link.h2d] sections, as `dir`/test.ini.
void write_link_profile(const std::filesystem::path& dir, const std::string& d2h, const std::string& h2d) {
  std::string text = kTestProfile;
  text.replace(text.find("[link.d2h]\n"), 11, "[link.d2h]\n" + d2h);
  text.replace(text.find("[link.h2d]\n"), 11, "[link.h2d]\n" + h2d);
  std::ofstream(dir / "test.ini") << text;
}

TEST_F(SimTest, ZeroCopyAccessesTakeTheLinkAtTheRateOfTheirGranule) {
  // The test link (1e10 B/s each way) with kernel writes of 128-byte granules at 1e9 B/s and
  // reads of 16-byte ones at 5e8: 1e8 bytes take ten and twenty times as long as at the link's
  // rate; in order (no sequential rate given) they take the link's rate.
  write_link_profile(dir_, "write_128_bw = 1e9   # test value\n", "read_16_bw = 5e8   # test value\n");
  const uint64_t bytes = 100000000;
  auto ph = simulate(cluster(1, 1), [&](Rank& r) {
    Buffer h = r.alloc(MemSpace::Pinned, 4 * bytes, "h"), d = r.alloc(MemSpace::Device, 2 * bytes, "d");
    r.phase("write128");
    r.launch(Stream{0}, LinkAccessOp{h, d, bytes, 128, true, LinkAccess::Write}).get();
    r.phase("read16");
    r.launch(Stream{0}, LinkAccessOp{h, d, bytes, 16, true, LinkAccess::Read}).get();
    r.phase("write_in_order");
    r.launch(Stream{0}, LinkAccessOp{h, d, bytes, 128, false, LinkAccess::Write}).get();
    r.phase("both128");
    r.launch(Stream{0}, LinkAccessOp{h, d, bytes, 128, true, LinkAccess::Both}).get();
    r.end_phases();
  });
  EXPECT_NEAR(seconds(ph[0], "write128"), 0.1, 0.002);
  EXPECT_NEAR(seconds(ph[0], "read16"), 0.2, 0.004);
  EXPECT_NEAR(seconds(ph[0], "write_in_order"), 0.01, 0.0002);
  // Both ways at once: reads at 128 bytes interpolate between 16 (5e8) and the link's rate at
  // 64 KiB: 5e8 x (1e10 / 5e8)^(3 / 12) = 1.06e9 B/s, 0.095 s; the writes beside them take 0.1 s.
  EXPECT_NEAR(seconds(ph[0], "both128"), 0.1, 0.002);
}

TEST_F(SimTest, ZeroCopyWritesSlowHostToDeviceCopiesBesideThem) {
  // The test link (1e10 B/s each way); 128-byte writes at 2e9 alone and beside copies, which fall
  // to 5e9 meanwhile: each written byte takes (1e10 - 5e9) / 2e9 = 2.5 bytes of the other way.
  // 1e8 bytes written take 0.05 s alone (their 2.5e8 bytes the other way fit beside them); with
  // a copy of 1e9 bytes they share that way for 0.05 s (2.5e8 bytes each), and the copy's last
  // 7.5e8 bytes take 0.075 s alone: 0.125 s, where it takes 0.1 alone.
  write_link_profile(dir_, "write_128_bw = 2e9   # test value\nwrite_beside_copy_128_bw = 2e9   # test value\n",
                     "copy_beside_write_128_bw = 5e9   # test value\n");
  const uint64_t bytes = 100000000;
  auto ph = simulate(cluster(1, 1), [&](Rank& r) {
    Buffer h = r.alloc(MemSpace::Pinned, 10 * bytes, "h"), d = r.alloc(MemSpace::Device, 10 * bytes, "d");
    r.phase("writes");
    r.launch(Stream{0}, LinkAccessOp{h, d, bytes, 128, true, LinkAccess::Write}).get();
    r.phase("copy");
    r.copy(Stream{1}, d, 0, h, 0, 10 * bytes).wait();
    r.phase("both");
    Launched w = r.launch(Stream{0}, LinkAccessOp{h, d, bytes, 128, true, LinkAccess::Write});
    r.copy(Stream{1}, d, 0, h, 0, 10 * bytes).wait();
    w.get();
    r.end_phases();
  });
  EXPECT_NEAR(seconds(ph[0], "writes"), 0.05, 0.001);
  EXPECT_NEAR(seconds(ph[0], "copy"), 0.1, 0.002);
  EXPECT_NEAR(seconds(ph[0], "both"), 0.125, 0.003);
}

TEST_F(SimTest, NpjWithItsTableInPinnedMemoryPaysTheLinkPerLookup) {
  auto run = [&](const std::string& table) {
    RunPoint p = h100_point("npj", uint64_t(1) << 24);
    p.strategy_options = {{"table_space", table}, {"input_space", "pinned"}};
    RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest.count, p.workload.s.rows);
    return o;
  };
  const RunOutcome device = run("device"), pinned = run("pinned");
  // 2^24 lookups of 16-byte slots over PCIe at its 16-byte random rate, against device memory.
  EXPECT_GT(phase_of(pinned, "probe"), 3 * phase_of(device, "probe"));
  EXPECT_GT(phase_of(pinned, "build"), 3 * phase_of(device, "build"));
}

TEST_F(SimTest, HistogramInSegmentsCountsEachSegmentsSliceForTheCostOfOnePass) {
  // An input whose halves differ: dense keys 1..n/2 (all in radix partition 0: below 2^19), then
  // sparse ones (spread over the 16 partitions). Each segment's counts come from the content of
  // its slice, those of a HistogramOp of that slice; the operator costs what one histogram of the
  // input does (the same keys read). The body runs in the simulation's process: what it finds
  // wrong fails the run.
  const uint64_t n = 1000000;
  const std::vector<uint64_t> segs = {0, 1000, 1000, 400000, n};
  const PartitionFn fn{PartitionFn::Radix, 4, 19, 0};
  auto ph = simulate(cluster(1, 1), [&](Rank& r) {
    Tuples t = r.alloc_tuples(MemSpace::Host, n, TupleFormat{8, 8}, "t");
    for (int half = 0; half < 2; ++half) {
      GenerateOp gen;
      gen.spec.name = half ? "S" : "R";
      gen.spec.rows = n / 2;
      gen.spec.dist = half ? KeyDist::UniqueSparse : KeyDist::UniqueDense;
      gen.spec.key_bytes = 8;
      gen.spec.payload_bytes = {8};
      gen.out = t.slice(half * n / 2, n / 2);
      r.launch(Stream{0}, gen).get();
    }
    r.phase("whole");
    r.launch(Stream{0}, HistogramOp{t, fn}).get();
    r.phase("segments");
    const std::vector<uint64_t> counts = r.launch(Stream{0}, HistogramOp{t, fn, segs}).get().values;
    r.end_phases();
    const uint64_t F = fn.fanout();
    if (counts.size() != (segs.size() - 1) * F)
      throw RuntimeError("histogram in segments returned " + std::to_string(counts.size()) + " counts");
    for (size_t s = 0; s + 1 < segs.size(); ++s) {
      const std::vector<uint64_t> c = r.launch(Stream{0}, HistogramOp{t.slice(segs[s], segs[s + 1] - segs[s]), fn}).get().values;
      if (!std::equal(c.begin(), c.end(), counts.begin() + long(s * F)) || c.size() != F)
        throw RuntimeError("segment " + std::to_string(s) + "'s counts differ from its slice's histogram");
      if (std::accumulate(c.begin(), c.end(), uint64_t(0)) != segs[s + 1] - segs[s])
        throw RuntimeError("segment " + std::to_string(s) + "'s counts do not sum to its rows");
    }
    if (counts[0] != 1000 || counts[2 * F] != 399000 || counts[3 * F] < 100000 || counts[3 * F + 1] > 50000)
      throw RuntimeError("partition 0 of the segments holds " + std::to_string(counts[0]) + ", " +
                         std::to_string(counts[2 * F]) + ", " + std::to_string(counts[3 * F]) +
                         " rows; partition 1 of the last " + std::to_string(counts[3 * F + 1]));
    for (auto [bad, what] : {std::pair<std::vector<uint64_t>, std::string>{{0, 50, 40}, "not ascending at index 2"},
                             {{0, n + 1}, "end at row 1000001, past the input's 1000000 rows"},
                             {{7}, "single offset 7"}}) {
      try {
        r.launch(Stream{0}, HistogramOp{t, fn, bad}).get();
      } catch (const RuntimeError& e) {
        if (std::string(e.what()).find(what) != std::string::npos) continue;
        throw RuntimeError("bad segments gave \"" + std::string(e.what()) + "\", not \"" + what + "\"");
      }
      throw RuntimeError("bad segments accepted: " + what);
    }
  });
  EXPECT_GT(seconds(ph[0], "whole"), 0);
  EXPECT_NEAR(seconds(ph[0], "segments"), seconds(ph[0], "whole"), seconds(ph[0], "whole") * 1e-9);
}

TEST_F(SimTest, PackChunksCostsOnePassEachWayOverHostMemory) {
  // 1e6 rows of 8 + 8 bytes packed into chunks of 1000 rows: read 16 MB and write 16 MB at the
  // test profile's 1e11 B/s of host memory.
  const uint64_t n = 1000000, slot_rows = 1000;
  const TupleFormat fmt{8, 8};
  auto ph = simulate(cluster(1, 1), [&](Rank& r) {
    Tuples in = r.alloc_tuples(MemSpace::Host, n, fmt, "in");
    in.rows = n;
    PackChunksOp pack;
    pack.in = in;
    pack.begin = {0, n / 2};
    pack.rows = {n / 2, n / 2};
    pack.first_seq = {1, 1};
    pack.slot_rows = slot_rows;
    pack.out = r.alloc(MemSpace::Host, (n / slot_rows) * chunk_slot_bytes(fmt, slot_rows), "images");
    r.phase("pack");
    const uint64_t images = r.launch_streaming(Stream{0}, pack).get().count;
    // Partitioned while packed (gpj's senders): the same one pass each way, from the unpartitioned
    // input, with the counts of its histogram; it returns the partition's offsets.
    PackChunksOp fused = pack;
    fused.partition_by = PartitionFn{PartitionFn::Hash, 3, 0, 7};
    fused.begin.clear();
    r.phase("histogram");
    fused.rows = r.launch(Stream{0}, HistogramOp{in, *fused.partition_by}).get().values;
    fused.first_seq.assign(fused.rows.size(), 1);
    uint64_t fused_images = 0;
    for (uint64_t rows : fused.rows) fused_images += (rows + slot_rows - 1) / slot_rows;
    fused.out = r.alloc(MemSpace::Host, fused_images * chunk_slot_bytes(fmt, slot_rows), "fused images");
    r.phase("partition_and_pack");
    const OpResult f = r.launch_streaming(Stream{0}, fused).get();
    // The body runs in the simulation's process: a wrong count fails the run.
    if (images != n / slot_rows) throw RuntimeError("pack_chunks wrote " + std::to_string(images) + " images");
    if (f.count != fused_images || f.values.size() != 9 || f.values.back() != n)
      throw RuntimeError("pack_chunks with partition_by wrote " + std::to_string(f.count) + " images, " +
                         std::to_string(f.values.size()) + " offsets");
    // Given the counts of two slices (each slice's histogram): the same images and cost.
    r.phase("histogram_slices");
    PackChunksOp sliced = fused;
    sliced.in_slices = {0, n / 3, n};
    // The slices' counts are the plan, from a histogram in those slices (as the exchange's
    // senders count): n / 3 rows do not divide evenly among the 8 partitions, and the slices
    // still add up to the whole input's split.
    sliced.slice_rows = r.launch(Stream{0}, HistogramOp{in, *fused.partition_by, sliced.in_slices}).get().values;
    for (size_t p = 0; p < sliced.rows.size(); ++p)
      if (sliced.slice_rows[p] + sliced.slice_rows[8 + p] != fused.rows[p])
        throw RuntimeError("partition " + std::to_string(p) + "'s slices hold " +
                           std::to_string(sliced.slice_rows[p] + sliced.slice_rows[8 + p]) + " rows, the whole input " +
                           std::to_string(fused.rows[p]));
    uint64_t sliced_images = 0;
    for (size_t p = 0; p < sliced.rows.size(); ++p) {
      sliced.rows[p] = sliced.slice_rows[p] + sliced.slice_rows[8 + p];
      sliced_images += (sliced.rows[p] + slot_rows - 1) / slot_rows;
    }
    sliced.out = r.alloc(MemSpace::Host, sliced_images * chunk_slot_bytes(fmt, slot_rows), "sliced images");
    r.phase("partition_and_pack_sliced");
    const OpResult fs = r.launch_streaming(Stream{0}, sliced).get();
    r.end_phases();
    if (fs.values.size() != 9 || fs.values.back() != n)
      throw RuntimeError("pack_chunks with counted slices returned " + std::to_string(fs.values.size()) + " offsets");
    auto fails_with = [&](const PackChunksOp& op, const std::string& what) {
      try {
        r.launch_streaming(Stream{0}, op).get();
      } catch (const RuntimeError& e) {
        if (std::string(e.what()).find(what) != std::string::npos) return;
        throw;
      }
      throw RuntimeError("pack_chunks packed a batch that does not match its histogram (" + what + ")");
    };
    fused.rows[0] += 1;  // not the input's partitions: an error naming the partition
    fails_with(fused, "partition 0 has");
    sliced.slice_rows[8] += 1;  // slice 1's counts wrong
    fails_with(sliced, "slice 1 has");
  });
  const double want = 2.0 * n * fmt.tuple_bytes() / 1e11;
  EXPECT_NEAR(seconds(ph[0], "pack"), want, want * 1e-9);
  EXPECT_NEAR(seconds(ph[0], "partition_and_pack"), want, want * 1e-9);
  EXPECT_NEAR(seconds(ph[0], "partition_and_pack_sliced"), want, want * 1e-9);
}

TEST_F(SimTest, PipelinedJoinOverlapsItsShuffleAndJoin) {
  // gpj streams the join into the shuffle: its stream phase takes about as long as gpj-b's
  // shuffle alone (the longer of shuffle and join: thostrup2023 section 6), while gpj-b adds its
  // local join after the shuffle. Batches of 16 partitions x one full chunk (8192 rows) each: no chunk is
  // padded and no ring waits for a credit (a sender puts a partition's chunks in order, so more
  // chunks per partition and batch than slots stall it on the consumer, in simulation as on the
  // hardware). Output counted, not streamed to host memory (gpj-b leaves its result in device memory).
  const Workload w = pk_fk_16(1 << 20, 1 << 20);
  RunPoint p = one_sided_point("gpj", {1, 1}, w, (dir_ / "test.ini").string(), dir_.string());
  const std::map<std::string, std::string> geometry{{"batch_rows", "131072"}, {"chunk_bytes", "131072"}, {"slots", "4"}};
  p.strategy_options = geometry;
  p.strategy_options["output"] = "count_only";
  RunOutcome pipelined = run_point(p);
  p.strategy = "gpj-b";
  p.strategy_options = geometry;
  RunOutcome blocking = run_point(p);
  const double shuffle = phase_of(blocking, "exchange");
  double join = 0;  // the busiest consumer's GPU time (its batches), on the traced ranks
  std::map<int, double> busy;
  for (auto& sp : pipelined.trace)
    if (sp.params.kind == OpKind::StreamConsume && sp.track.find("batches") != std::string::npos)
      busy[sp.rank] += sp.end - sp.begin;
  for (auto& [rank, t] : busy) join = std::max(join, t);
  ASSERT_GT(join, 0) << "the consumers' batches are traced";
  ASSERT_GT(shuffle, 0);
  EXPECT_LE(phase_of(pipelined, "stream"), 1.15 * std::max(shuffle, join));
  EXPECT_LT(pipelined.total_seconds, blocking.total_seconds);
  EXPECT_EQ(pipelined.digest.count, blocking.digest.count);
}

TEST_F(SimTest, SlicedHistogramsAddUpToTheBatchesPartition) {
  // gpj-h counts each batch in 64 slices and partitions a batch into a copy for its materialized
  // partitions: the slices' counts must add up to that partition's. Batches of 30237952 rows
  // (slices of 472468, not a multiple of the 64 partitions) stopped the run when each slice was
  // rounded on its own.
  RunPoint p = one_sided_point("gpj-h", {1, 2}, pk_fk_16(67121321, 67121321), (dir_ / "test.ini").string(), dir_.string());
  p.strategy_options = {{"batch_rows", "30237952"}, {"output", "count_only"}};
  p.cluster.device_memory = uint64_t(1e9);  // some partitions stream, the rest are materialized
  RunOutcome o;
  ASSERT_NO_THROW(o = run_point(p));
  EXPECT_EQ(o.digest.count, p.workload.s.rows);
}

TEST_F(SimTest, GpjBLandedInHostMemoryCopiesWhatArrivedOverPcie) {
  // landing = host: the shuffle lands in pinned host memory, and each rank copies what arrived
  // (its half of R and S, 16-byte tuples) to its GPU before the join: four column copies on one
  // stream over its host-to-device link (10 GB/s and 10 us in the test profile).
  const Workload w = pk_fk_16(1 << 18, 1 << 18);
  const auto [device, host] =
      as_given_and_with(one_sided_point("gpj-b", {1, 2}, w, (dir_ / "test.ini").string(), dir_.string()), "landing", "host");
  EXPECT_EQ(phase_of(device, "copy_in"), 0) << "landed in GPU memory: nothing to copy";
  const double copy = double(w.r.rows + w.s.rows) / 2 * 16 / 1e10 + 4 * 1e-5;
  EXPECT_NEAR(phase_of(host, "copy_in"), copy, 0.1 * copy);
}

TEST_F(SimTest, GpjWithoutGpudirectSimulatesWithExactCounts) {
  for (ClusterShape shape : {ClusterShape{2, 1}, ClusterShape{2, 2}}) {
    SCOPED_TRACE(std::to_string(shape.size()) + " ranks");
    RunPoint p = one_sided_point("gpj", shape, pk_fk_16(1 << 16, 1 << 18), (dir_ / "test.ini").string(), dir_.string());
    p.strategy_options["gpudirect"] = "off";
    const RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest.count, p.workload.s.rows);
    EXPECT_GE(o.total_seconds, o.bound.seconds) << "no simulated run beats its analytic bound";
  }
}

TEST_F(SimTest, GpjWithoutGpudirectPaysTheCopyOverPcie) {
  // Two nodes of one GPU, PCIe 2.5 GB/s beside 10 GB/s NICs: without GPUDirect every tuple that
  // arrives (half of them over the network, half from the rank itself) crosses PCIe once more, so
  // the pipelined join can take no less than those copies, far longer than the exchange alone.
  std::string profile = kTestProfile;
  const std::string h2d = "[link.h2d]\nbw = 1e10";
  ASSERT_NE(profile.find(h2d), std::string::npos);
  profile.replace(profile.find(h2d), h2d.size(), "[link.h2d]\nbw = 2.5e9");
  std::ofstream(dir_ / "narrow-pcie.ini") << profile;
  const Workload w = pk_fk_16(1 << 20, 1 << 20);
  const auto [on, off] =
      as_given_and_with(one_sided_point("gpj", {2, 1}, w, (dir_ / "narrow-pcie.ini").string(), dir_.string()), "gpudirect", "off");
  const double copy = double(w.r.rows + w.s.rows) / 2 * 16 / 2.5e9;
  EXPECT_NEAR(off.bound.seconds, copy, 1e-9 * copy) << off.bound.resource;
  EXPECT_NE(off.bound.resource.find("host-to-device"), std::string::npos) << off.bound.resource;
  EXPECT_LT(on.bound.seconds, copy / 4);
  // Slower by at least the copies' share that the exchange does not hide: what they take beyond
  // the pipelined join's stream with GPUDirect.
  const double stream_on = phase_of(on, "stream"), stream_off = phase_of(off, "stream");
  EXPECT_GE(stream_off - stream_on, copy - stream_on) << "stream on " << stream_on << " s, off " << stream_off << " s";
  EXPECT_GE(off.total_seconds - on.total_seconds, copy - stream_on)
      << "on " << on.total_seconds << " s, off " << off.total_seconds << " s, copies " << copy << " s";
  EXPECT_LE(stream_off, 1.3 * copy) << "the copies are pipelined with the exchange and the consumer";
}

TEST_F(SimTest, ConcurrentJoinsSimulateWithExactCounts) {
  for (ClusterShape shape : {ClusterShape{2, 1}, ClusterShape{2, 2}})
    for (const std::string s : {"gpj", "gpj-b", "shuffle"}) {
      SCOPED_TRACE(s + " on " + std::to_string(shape.size()) + " ranks");
      RunPoint p = one_sided_point(s, shape, pk_fk_16(1 << 16, 1 << 18), (dir_ / "test.ini").string(), dir_.string());
      p.verify = true;
      p.cluster.jobs = shape.size() == 2 ? 3 : 2;
      RunOutcome o;
      ASSERT_NO_THROW(o = run_point(p));
      EXPECT_EQ(o.digest.count, p.workload.s.rows);
      EXPECT_EQ(o.checked, "count");
      ASSERT_EQ(o.join_seconds.size(), size_t(p.cluster.jobs));
      EXPECT_GE(o.total_seconds, o.bound.seconds) << "no simulated run beats its analytic bound: " << o.bound.resource;
    }
}

TEST_F(SimTest, ConcurrentNetworkBoundJoinsShareTheNics) {
  // gpj over two nodes of one GPU, bound by the 10 GB/s NICs: two at once move twice the bytes
  // through each NIC, so their makespan is longer than one join's, and at most twice it (plus
  // what does not scale with the bytes: phase starts, latencies).
  RunPoint p = one_sided_point("gpj", {2, 1}, pk_fk_16(1 << 21, 1 << 21), (dir_ / "test.ini").string(), dir_.string());
  p.strategy_options["output"] = "count_only";
  const RunOutcome one = run_point(p);
  ASSERT_NE(one.bound.resource.find("network"), std::string::npos) << one.bound.resource;
  p.cluster.jobs = 2;
  const RunOutcome two = run_point(p);
  EXPECT_EQ(two.digest.count, one.digest.count);
  EXPECT_GT(two.total_seconds, 1.3 * one.total_seconds) << "one " << one.total_seconds << " s, two " << two.total_seconds << " s";
  EXPECT_LE(two.total_seconds, 2.1 * one.total_seconds) << "one " << one.total_seconds << " s, two " << two.total_seconds << " s";
  for (double t : two.join_seconds) EXPECT_GT(t, one.total_seconds) << "each join shares the NICs";
  EXPECT_NEAR(two.bound.seconds, 2 * one.bound.seconds, 1e-9 * one.bound.seconds);
}

TEST_F(SimTest, OneSidedJoinSimulationsAreIdentical) {
  RunPoint p = one_sided_point("gpj", {2, 2}, pk_fk_16(1 << 18, 1 << 19), "h100", repo_profiles());
  p.workload.s.zipf_z = 1.0;
  RunOutcome a = run_point(p), b = run_point(p);
  EXPECT_EQ(a.total_seconds, b.total_seconds);
  ASSERT_EQ(a.phases.size(), b.phases.size());
  for (size_t i = 0; i < a.phases.size(); ++i) EXPECT_EQ(a.phases[i].seconds, b.phases[i].seconds);
  EXPECT_EQ(a.digest.count, b.digest.count);
  EXPECT_EQ(a.digest.count, p.workload.s.rows);
}

// --- calibration and validation -------------------------------------------------------------------

TEST_F(SimTest, CalibratingTheSimulatorRecoversItsProfile) {
  // The sim backend's operator times are exactly its profile's models: calibrating it must fit
  // them back (phase-encoded samples, Eigen fit, piecewise models, profile written and re-read).
  CalibrationOptions opt;
  opt.backend = "sim";
  // Histograms and partitions below fanout 16 cost more per byte than from 16 up (a piece of
  // their own, as the shuffle's fanouts 2 and 4 on a GPU: few counters, contended atomics).
  std::string profile = kTestProfile;
  for (const char* op : {"[op.histogram]\n", "[op.partition]\n"}) {
    const size_t at = profile.find(op);
    ASSERT_NE(at, std::string::npos) << op;
    profile.insert(at + std::string(op).size(), "seg = 0 3e-5 5e-12   # test value\n");
    const size_t second = profile.find("seg = 0", at + std::string(op).size() + 10);
    ASSERT_NE(second, std::string::npos) << op;
    profile.replace(second, 7, "seg = 16");
  }
  std::ofstream(dir_ / "test-free.ini") << profile
                                        << "[op.free.device]\nseg = 0 2e-5 1e-13   # test value\n"
                                           "[op.free.host]\nseg = 0 5e-6 0   # test value\n";
  opt.base = (dir_ / "test-free.ini").string();
  opt.profile_dir = dir_.string();
  opt.name = "refit";
  // Every size and skew (not --quick): the radix sort's model has 10 coefficients per key width,
  // more than --quick's 6 sorts per width can fit (its pieces would merge). About 2 s.
  opt.quick = false;
  opt.min_rows = 1 << 16;
  opt.max_rows = 1 << 20;
  opt.repeat = 1;
  Profile base = load_profile(opt.base);
  Profile fit = fit_profile(measure(opt), base, opt);
  std::ostringstream text;
  write_profile(fit, text);
  std::istringstream back(text.str());
  Profile again = parse_profile(back, "refit.ini");
  for (const char* model : {"histogram", "partition", "build.linear", "probe.linear", "sort.radix", "merge_join", "scan",
                            "free.device", "free.host"}) {
    OpSample big;
    big.model = model;
    big.x = {1.0, 3e8, 1e8};
    big.segment = model == std::string("sort.radix") ? 4 : 1e6;
    big.x.resize(find_model_spec(model)->features.size() + 1);
    // A histogram's or partition's piece is fitted at one measured fanout, where `partitions` is
    // that fanout on every first pass: the fit cannot split it from the constant, so only samples
    // a pass can have (partitions = fanout, skew_rows = rows / fanout) are determined.
    if (model == std::string("histogram") || model == std::string("partition")) {
      big.segment = big.x[2] = 4096;
      big.x[3] = 3e8 / 16 / 4096;
    }
    // The radix sort's features follow from its plan (passes, blocks: all in proportion to the
    // rows at these sizes), so it is checked on a sort's own sample at the largest size.
    if (model == std::string("sort.radix")) big = radix_sort_sample(1 << 20, msd_sampled_max(1 << 20, 1 << 20), 4, 4);
    const double want = base.ops.seconds(big), got = again.ops.seconds(big);
    EXPECT_NEAR(got, want, 0.01 * want) << model;
  }
  // The shuffle's hash partitions among 2 and 4 ranks (fanouts 2 and 4) are measured, not
  // extrapolated from fanout 16's piece.
  for (const char* model : {"histogram", "partition"})
    for (double fanout : {2.0, 4.0}) {
      const double rows = 1e8;
      OpSample s;
      s.model = model;
      s.x = {1.0, rows * (model == std::string("histogram") ? 8 : 16), fanout, rows / fanout};
      s.segment = fanout;
      const double want = base.ops.seconds(s), got = again.ops.seconds(s);
      EXPECT_NEAR(got, want, 0.01 * want) << model << " at fanout " << fanout;
    }
  EXPECT_NEAR(again.h2d.bw, base.h2d.bw, 0.01 * base.h2d.bw);
  EXPECT_NEAR(again.h2d.latency, base.h2d.latency, 0.05 * base.h2d.latency);
}

TEST_F(SimTest, CalibratedCpuProfilePredictsTheCpuBackend) {
  // CI-sized version of `joinlab calibrate --backend cpu` then `joinlab validate`: the simulated
  // npj with the freshly fitted profile lands near the measured one. The bound is loose (an
  // order of magnitude: it catches unit and wiring errors): CI machines are small and shared,
  // and their timings vary from run to run.
  CalibrationOptions opt;
  opt.backend = "cpu";
  opt.profile_dir = dir_.string();
  opt.name = "cpu-test";
  opt.quick = true;
  opt.min_rows = 1 << 16;
  opt.max_rows = 1 << 20;
  opt.repeat = 3;
  const std::string path = (dir_ / "cpu-test.ini").string();
  {
    std::ofstream out(path);
    Profile base;
    base.gpu.memory = 4e9;
    base.host.memory = 8e9;
    base.topology.gpus_per_node = 1;
    base.topology.intra = IntraNode::PCIe;
    base.nic = {1e10, 1e-5};
    write_profile(fit_profile(measure(opt), base, opt), out);
  }
  Profile p = load_profile(path);
  EXPECT_GT(p.gpu.mem_bw, 1e8);
  RunPoint real;
  real.strategy = "npj";
  real.backend = "cpu";
  real.cluster.shape = {1, 1};
  real.workload.r = relation("R", 1 << 19, KeyDist::UniqueDense);
  real.workload.s = relation("S", 1 << 19, KeyDist::ForeignKey);
  RunPoint sim = real;
  sim.backend = "sim";
  sim.verify = false;
  sim.cluster.profile = path;
  sim.cluster.profile_dir = dir_.string();
  RunOutcome measured = run_point(real), predicted = run_point(sim);
  EXPECT_EQ(predicted.digest.count, measured.digest.count);
  EXPECT_GT(predicted.total_seconds, measured.total_seconds / 10) << "measured " << measured.total_seconds;
  EXPECT_LT(predicted.total_seconds, measured.total_seconds * 10) << "measured " << measured.total_seconds;
}

TEST_F(SimTest, ValidateComparesMeasuredCsvRowsWithTheirSimulation) {
  // The device-machine flow: `joinlab run` writes a CSV on the hardware (here the cpu backend),
  // `joinlab validate FILE --measured CSV` simulates each row's point and tabulates both. The
  // mechanics are checked (matching, phases, totals, the CSV), not the accuracy. The file sets a
  // [cluster] key only the measured backend reads: it is left out of the simulated twin.
  const fs::path ini = dir_ / "val.ini";
  std::ofstream(ini) << "[experiment]\nname = val\nstrategy = npj\nbackend = cpu\noutput_dir = " << dir_.string()
                     << "\n[cluster]\ntimeout_s = 120\n[workload]\nrows = 2^12\nr.dist = unique_dense\ns.dist = fk\n"
                     << "[sweep]\nworkload.rows = 2^12, 2^13\n";
  const ExperimentPlan plan = plan_experiment(ini.string());
  ASSERT_EQ(plan.points.size(), 2u);
  std::vector<ResultRow> rows;
  for (size_t i = 0; i < plan.points.size(); ++i) {
    ResultRow row;
    row.experiment = plan.name;
    row.point = int(i) + 1;
    row.swept = plan.points[i].swept;
    row.outcome = run_point(plan.points[i].run);
    rows.push_back(row);
  }
  const fs::path measured = dir_ / "measured.csv", out = dir_ / "compared.csv";
  write_csv(measured.string(), {rows[1]});  // only the second point was "measured"
  EXPECT_EQ(validate_main({ini.string(), "--measured", measured.string(), "--profile", (dir_ / "test.ini").string(),
                           "--out", out.string()}),
            0);
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "experiment,point,swept,strategy,ranks,r_rows,s_rows,phase,measured_s,predicted_s,error");
  std::map<std::string, std::vector<std::string>> by_phase;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
    ASSERT_EQ(cells.size(), 11u) << line;
    EXPECT_EQ(cells[1], "2") << "the row belongs to point 2";
    EXPECT_EQ(cells[5], "8192");
    by_phase[cells[7]] = cells;
  }
  ASSERT_TRUE(by_phase.count("total"));
  ASSERT_TRUE(by_phase.count("build"));
  ASSERT_TRUE(by_phase.count("probe"));
  // The CSV holds 6 significant digits: up to 5e-6 relative (1e-6 failed now and then).
  EXPECT_NEAR(std::stod(by_phase["total"][8]), rows[1].outcome.total_seconds, 1e-5 * rows[1].outcome.total_seconds);
  EXPECT_GT(std::stod(by_phase["total"][9]), 0) << "simulated";
  const double m = std::stod(by_phase["total"][8]), pr = std::stod(by_phase["total"][9]);
  EXPECT_NEAR(std::stod(by_phase["total"][10]), (pr - m) / m, 1e-6);

  // A row of another experiment, or of a point the file does not have, matches nothing.
  std::ofstream(dir_ / "other.ini") << "[experiment]\nname = other\nstrategy = npj\nbackend = cpu\n[workload]\nrows = 2^12\n";
  EXPECT_THROW(validate_main({(dir_ / "other.ini").string(), "--measured", measured.string(), "--profile",
                              (dir_ / "test.ini").string(), "--out", out.string()}),
               InputError);
  EXPECT_THROW(validate_main({ini.string(), "--measured", (dir_ / "missing.csv").string()}), InputError);
}

// --- profiles ---------------------------------------------------------------------------------

TEST(SimProfiles, ShippedProfilesParseAndModelEveryOperator) {
  int n = 0;
  for (auto& entry : fs::directory_iterator(repo_profiles())) {
    if (entry.path().extension() != ".ini") continue;
    ++n;
    Profile p = load_profile(entry.path().string());
    // Allocations and releases may be free (no model), host-only operators take [cpu] rates;
    // every other operator has a cost.
    for (auto& spec : model_specs()) {
      if (spec.name.rfind("alloc.", 0) == 0 || spec.name.rfind("free.", 0) == 0 || spec.host_only) continue;
      EXPECT_TRUE(p.ops.has(spec.name) || p.ops.has(spec.stand_in)) << entry.path() << " lacks " << spec.name;
    }
    EXPECT_GT(p.nic.bw, 0);
  }
  EXPECT_GE(n, 6);
}

// maltenberger2025's IBM AC922 resolves by name, has the machine's shape, and runs mgsmj on
// its four GPUs with the exact count.
TEST_F(SimTest, Ac922ProfileLoadsByNameAndRunsMgsmjOnItsFourGpus) {
  const Profile p = load_profile(resolve_profile_path("ac922-v100x4-nvlink2", repo_profiles()));
  EXPECT_EQ(p.name, "ac922-v100x4-nvlink2");
  EXPECT_EQ(p.topology.gpus_per_node, 4);
  EXPECT_EQ(p.topology.intra, IntraNode::PCIe);
  EXPECT_DOUBLE_EQ(p.gpu.memory, 32e9);
  EXPECT_DOUBLE_EQ(p.gpu.sms, 80);
  EXPECT_EQ(p.cpu.sockets, 2);
  EXPECT_EQ(p.cpu.cores, 16);
  EXPECT_DOUBLE_EQ(p.h2d.bw, p.d2h.bw);
  EXPECT_GT(p.h2d.bw, 60e9);
  EXPECT_LT(p.h2d.bw, 75e9) << "NVLink 2.0's three bricks carry at most 75 GB/s per direction";
  RunPoint pt = shuffle_point(1, 4, uint64_t(1) << 20, "ac922-v100x4-nvlink2", repo_profiles());
  pt.strategy = "mgsmj";
  pt.strategy_options = {{"output", "count_only"}};
  const RunOutcome o = run_point(pt);
  EXPECT_EQ(o.digest.count, pt.workload.s.rows);
  EXPECT_GE(o.total_seconds, o.bound.seconds);
}

TEST(SimProfiles, BadProfilesAreRejectedWithFileLineKeyAndValue) {
  const std::string good = kTestProfile;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  std::string m = test::profile_rejection(with("mem_bw = 1e12        # test value", "mem_bw = fast        # test value"));
  EXPECT_NE(m.find("bad.ini:7: gpu.mem_bw = fast: not a number"), std::string::npos) << m;
  m = test::profile_rejection(with("mem_bw = 1e12        # test value", "mem_bw = 1e12"));
  EXPECT_NE(m.find("bad.ini:7: gpu.mem_bw = 1e12"), std::string::npos) << m;
  EXPECT_NE(m.find("source"), std::string::npos) << m;
  m = test::profile_rejection(with("streams = 16", "stream = 16"));
  EXPECT_NE(m.find("bad.ini:8: gpu.stream = 16: unknown key"), std::string::npos) << m;
  m = test::profile_rejection(with("bw = 1e10            # test value\nlatency = 1e-5       # test value\n[link.d2h]",
                           "bw = -1e10           # test value\nlatency = 1e-5       # test value\n[link.d2h]"));
  EXPECT_NE(m.find("link.h2d.bw = -1e10"), std::string::npos) << m;
  m = test::profile_rejection(with("intra = nvswitch", "intra = infiniband"));
  EXPECT_NE(m.find("topology.intra = infiniband: expected one of nvswitch, nvlink_mesh, pcie"), std::string::npos) << m;
  m = test::profile_rejection(with("[op.scan]\nseg = 0 1e-5 1e-12", "[op.scan]\nseg = 0 1e-5"));
  EXPECT_NE(m.find("op.scan.seg = 0 1e-5: expected 3 numbers"), std::string::npos) << m;
  m = test::profile_rejection(with("[op.scan]", "[op.scann]"));
  EXPECT_NE(m.find("unknown operator model [op.scann]"), std::string::npos) << m;
  m = test::profile_rejection(with("[link.nic]\nbw = 1e10            # test value\n", "[link.nic]\n"));
  EXPECT_NE(m.find("[link.nic] bw is missing"), std::string::npos) << m;
  EXPECT_NE(test::profile_rejection("[profile\nname = x\n").find("bad.ini:1:"), std::string::npos);
}

TEST_F(SimTest, DroppedBuffersArePaidAtTheNextSynchronization) {
  // A release waits for the device on the CUDA backend (give_back_block); with free models in
  // the profile, a rank pays each release at its next sync, in the phase that dropped it.
  std::ofstream(dir_ / "free.ini") << kTestProfile
                                   << "[op.free.device]\nseg = 0 2e-5 1e-12   # test value\n"
                                      "[op.free.host]\nseg = 0 5e-6 0   # test value\n";
  BackendConfig c = cluster(1, 1);
  c.profile = (dir_ / "free.ini").string();
  auto phases = simulate(c, [](Rank& r) {
    Buffer a = r.alloc(MemSpace::Device, 1000000, "a"), b = r.alloc(MemSpace::Device, 3000000, "b");
    Buffer h = r.alloc(MemSpace::Pinned, 1000, "h");
    r.phase("drop");
    a = b = h = Buffer{};
    r.sync_all();
    r.phase("kept");
    Buffer d = r.alloc(MemSpace::Device, 1000, "d");
    r.sync_all();
    r.phase("after");
    r.end_phases();
  });
  // Two device releases: 2 x 2e-5 + 4e6 bytes x 1e-12; one host release: 5e-6.
  EXPECT_NEAR(seconds(phases[0], "drop"), 2 * 2e-5 + 4e6 * 1e-12 + 5e-6, 1e-12);
  EXPECT_EQ(seconds(phases[0], "kept"), 0.0) << "nothing released";
  // Without free models (the test profile): releases cost nothing.
  phases = simulate(cluster(1, 1), [](Rank& r) {
    Buffer a = r.alloc(MemSpace::Device, 1000000, "a");
    r.phase("drop");
    a = Buffer{};
    r.sync_all();
    r.end_phases();
  });
  EXPECT_EQ(seconds(phases[0], "drop"), 0.0);
}

// A profile's text with [host] phase_seconds = `seconds` (any value it had replaced).
std::string with_phase_seconds(std::string text, const std::string& seconds) {
  const std::string key = "\nphase_seconds", host = "[host]\n";
  if (auto at = text.find(key); at != std::string::npos) text.erase(at + 1, text.find('\n', at + 1) - at);
  return text.insert(text.find(host) + host.size(), "phase_seconds = " + seconds + "   # test value\n");
}

// [host] phase_seconds: every phase a strategy begins (begin_phase) costs the profile's host time
// before its work, and only those: a rank's own phase() marks (calibrate's samples) do not.
TEST_F(SimTest, EveryStrategyPhasePaysTheProfilesPhaseSeconds) {
  std::ofstream(dir_ / "phase.ini") << with_phase_seconds(kTestProfile, "4e-5");
  BackendConfig c = cluster(1, 1);
  c.profile = (dir_ / "phase.ini").string();
  auto phases = simulate(c, [](Rank& r) {
    begin_phase(r, "strategy");
    r.phase("mark");
    r.end_phases();
  });
  EXPECT_NEAR(seconds(phases[0], "strategy"), 4e-5, 1e-12);
  EXPECT_EQ(seconds(phases[0], "mark"), 0.0);

  // phj end to end on the h100 profile: each of its timed phases takes 1 ms longer.
  std::ostringstream h100;
  h100 << std::ifstream(repo_profiles() + "/h100.ini").rdbuf();
  RunPoint p = shuffle_point(1, 1, uint64_t(1) << 20, "h100", dir_.string());
  p.strategy = "phj";
  std::ofstream(dir_ / "h100.ini") << with_phase_seconds(h100.str(), "0");
  const RunOutcome without = run_point(p);
  std::ofstream(dir_ / "h100.ini") << with_phase_seconds(h100.str(), "0.001");
  const RunOutcome with = run_point(p);
  ASSERT_EQ(with.phases.size(), without.phases.size());
  std::set<std::string> names;
  for (size_t i = 0; i < with.phases.size(); ++i) {
    names.insert(with.phases[i].name);
    EXPECT_NEAR(with.phases[i].seconds - without.phases[i].seconds, 0.001, 1e-9) << with.phases[i].name;
  }
  EXPECT_TRUE(names.count("partition") && names.count("join"));
  EXPECT_NEAR(with.total_seconds - without.total_seconds, 0.002, 1e-9) << "two timed phases: partition and join";
}

TEST(SimProfiles, OverridesAreCheckedAsTheFilesOwnValues) {
  auto parse = [](const ProfileOverrides& overrides) {
    std::istringstream in(kTestProfile);
    return parse_profile(in, "test.ini", overrides);
  };
  // A figure the file gives, a choice, one the file leaves out: all replaced or added.
  const Profile p = parse({{"link.nic.bw", "2.5e10"}, {"topology.fabric", "fat_tree"}, {"topology.hop_latency", "5e-7"}});
  EXPECT_EQ(p.nic.bw, 2.5e10);
  EXPECT_EQ(p.topology.fabric, Fabric::FatTree);
  EXPECT_EQ(p.topology.hop_latency, 5e-7);
  EXPECT_EQ(p.h2d.bw, parse({}).h2d.bw) << "the others as the file has them";
  // A cache size of an operator model.
  const Profile h100 = load_profile(repo_profiles() + "/h100.ini", {{"op.probe.linear.cache.far", "1e6"}});
  const ModelSpec& probe = *find_model_spec("probe.linear");
  const size_t far = size_t(std::find(probe.caches.begin(), probe.caches.end(), "far") - probe.caches.begin());
  EXPECT_EQ(h100.ops.get("probe.linear").caches().at(far), 1e6);

  auto rejection = [&](const std::string& key, const std::string& value) {
    try {
      parse({{key, value}});
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind(key + " = " + value + ": ", 0), 0u) << "the message begins with the override: " << m;
      return m;
    }
    ADD_FAILURE() << key << " = " << value << " was accepted";
    return std::string();
  };
  EXPECT_NE(rejection("link.nic.bandwidth", "1e10").find("unknown key in [link.nic] (known: bw, latency)"), std::string::npos);
  EXPECT_NE(rejection("nic.bw", "1e10").find("did you mean [link.nic]?"), std::string::npos);
  EXPECT_NE(rejection("link.nic.bw", "fast").find("not a number"), std::string::npos);
  EXPECT_NE(rejection("link.nic.bw", "0").find("must be positive"), std::string::npos);
  EXPECT_NE(rejection("topology.intra", "infiniband").find("expected one of nvswitch, nvlink_mesh, pcie"), std::string::npos);
  EXPECT_NE(rejection("profile.name", "x").find("not a figure of the hardware"), std::string::npos);
  EXPECT_NE(rejection("topology.gpus_per_node", "4").find("cluster.gpus_per_node"), std::string::npos);
  EXPECT_NE(rejection("op.scan.seg", "0 1 2").find("piecewise list"), std::string::npos);
  EXPECT_NE(rejection("op.scann.cache.far", "1e6").find("no operator model 'scann'"), std::string::npos);
  EXPECT_NE(rejection("op.probe.linear.cache.l3", "1e6").find("no cache level 'l3'"), std::string::npos);
}

TEST_F(SimTest, UnknownProfileAndBadClusterKeysAreInputErrors) {
  BackendConfig c = cluster(1, 1);
  c.profile = "no-such-profile";
  EXPECT_THROW(simulate(c, [](Rank&) {}), InputError);
  c = cluster(1, 1);
  c.options["sim_flows"] = "sometimes";
  try {
    simulate(c, [](Rank&) {});
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cluster.sim_flows = sometimes"), std::string::npos) << e.what();
  }
}

// CompressOp in simulation: each buffer's size from the real compressor on a sample of its
// regenerated rows, close to what the CPU writes for the same keys, whole and after a hash
// partitioning (a partition keeps its rows' generation order); DecompressOp gives the rows back.
TEST_F(SimTest, CompressedSizesFollowTheGeneratedKeys) {
  const Workload w = test::tpch(0.02, 8);
  RelationSpec uniform = test::key_spec(KeyDist::Uniform, 60000, 8);
  uniform.range_lo = 1;
  uniform.range_hi = uint64_t(1) << 40;
  const PartitionFn fn{PartitionFn::Hash, 4, 0, 3};
  struct Case {
    const RelationSpec* spec;
    const RelationSpec* ref;
    codec::Config cfg;
    bool partitioned;
  };
  for (const Case& k : {Case{&w.r, nullptr, {0, 1}, false}, Case{&w.s, &w.r, {1, 1}, false},
                        Case{&w.s, &w.r, {1, 1}, true}, Case{&uniform, nullptr, {0, 0}, false},
                        Case{&w.r, nullptr, {0, 1}, true}, Case{&w.r, nullptr, {1, 1, 1}, false}}) {
    const uint64_t n = k.spec->rows;
    std::vector<uint64_t> keys = test::generated_keys(*k.spec, k.ref, n);
    std::vector<uint64_t> offsets{0, n};
    if (k.partitioned) {  // the CPU's partition order: stable within a partition
      std::vector<uint64_t> sorted;
      offsets.assign(1, 0);
      for (uint32_t p = 0; p < fn.fanout(); ++p) {
        for (uint64_t x : keys)
          if (fn(x) == p) sorted.push_back(x);
        offsets.push_back(sorted.size());
      }
      keys = sorted;
    }
    const std::vector<uint8_t> raw = test::narrow(keys, 8);
    std::vector<cpu::CodecIn> in;
    for (size_t b = 0; b + 1 < offsets.size(); ++b)
      in.push_back({raw.data() + offsets[b] * 8, offsets[b + 1] - offsets[b], k.cfg});
    const std::vector<uint64_t> real = cpu::codec_compress(in, 8, 12, nullptr, 0, 1);
    // The simulation runs in a child process: it compares there and reports the largest relative
    // error (in millionths) and the buffers whose rows or count differ.
    RankResult got;
    make_backend("sim")->run(
        cluster(1, 1),
        [&](Rank& r) {
          Tuples t = r.alloc_tuples(MemSpace::Device, n, {8, 8}, "keys");
          GenerateOp g;
          g.spec = *k.spec;
          g.referenced = k.ref;
          g.out = t;
          r.launch(Stream{0}, g).get();
          std::vector<uint64_t> at{0, n};
          if (k.partitioned) {
            Tuples parts = r.alloc_tuples(MemSpace::Device, n, {8, 8}, "parts");
            at = r.launch(Stream{0}, PartitionOp{t, {}, fn, parts}).get().values;
            t = parts;
          }
          CompressOp c;
          c.value_bytes = 8;
          for (size_t b = 0; b + 1 < at.size(); ++b) c.in.push_back({t.keys, at[b], at[b + 1] - at[b]});
          c.configs.assign(c.in.size(), k.cfg);
          c.out = r.alloc(MemSpace::Device, compress_bound(c), "packed");
          const std::vector<uint64_t> simulated = r.launch(Stream{0}, c).get().values;
          DecompressOp d{c.out, simulated, 8, {}};
          Buffer back = r.alloc(MemSpace::Device, n * 8, "back");
          for (const CodecColumn& col : c.in) d.out.push_back({back, col.first, col.rows});
          const std::vector<uint64_t> rows = r.launch(Stream{0}, d).get().values;
          double worst = 0;
          uint64_t wrong = simulated.size() == real.size() ? 0 : 1000;
          for (size_t b = 0; !wrong && b + 1 < real.size(); ++b) {
            // Bytes per row: the simulator's partitions hold the expected rows, not the CPU's.
            const double sim = double(simulated[b + 1] - simulated[b]) / double(std::max<uint64_t>(1, at[b + 1] - at[b]));
            const double cpu = double(real[b + 1] - real[b]) / double(std::max<uint64_t>(1, offsets[b + 1] - offsets[b]));
            worst = std::max(worst, std::fabs(sim / cpu - 1.0));
            wrong += rows[b] != at[b + 1] - at[b];  // its own rows back (its partitions' sizes are expectations)
          }
          r.end_phases();
          r.report({uint64_t(worst * 1e6), wrong, false});
        },
        [&](Rank& r) { got = r.result(); });
    EXPECT_EQ(got.checksum, 0u) << to_string(k.spec->dist) << (k.partitioned ? " partitioned" : "")
                                << ": buffers whose rows differ";
    EXPECT_LT(got.count, 150000u) << to_string(k.spec->dist) << (k.partitioned ? " partitioned" : "")
                                  << ": the simulated sizes are off by up to " << got.count / 1e4 << "%";
  }
}

}  // namespace
}  // namespace joinlab
