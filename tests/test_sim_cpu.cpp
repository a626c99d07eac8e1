// CPU work and message costs in the simulator: host operators on a domain's cores at [cpu]'s
// per-core rates under the memory roof that PCIe DMA shares, crj's time following the cores, the
// software cost of messages ([msg]), and bad [cpu] / [msg] sections rejected with file, line, key.
#include <cmath>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/exec/backend.hpp"
#include "core/experiment/runner.hpp"
#include "core/strategies/strategy_util.hpp"
#include "models/profile.hpp"
#include "tests/test_profile_text.hpp"

namespace joinlab {
namespace {

namespace fs = std::filesystem;

const std::string kOps = test::synthetic_ops();

// A [cpu] section: every operator at `rate` bytes per second of one core, `cores` cores on one
// socket, a roof of `roof` bytes per second.
// copy_rate: rate.copy (default: `rate`, like every other kind).
std::string cpu_section(int cores, double rate, double roof, double copy_rate = 0) {
  std::ostringstream s;
  s << "[cpu]\nsockets = 1   # test value\ncores = " << cores << "   # test value\nmem_bw = " << roof
    << "   # test value\n";
  for (auto& k : cpu_op_kinds())
    s << "rate." << k << " = " << (k == "copy" && copy_rate > 0 ? copy_rate : rate) << "   # test value\n";
  return s.str();
}

// A host copy of `bytes` in phase "copy", alone or beside a histogram of `rows` rows (far longer
// than the copy) on another stream.
std::function<void(Rank&)> copy_beside_histogram(uint64_t bytes, uint64_t rows, bool beside) {
  return [=](Rank& r) {
    Tuples t = r.alloc_tuples(MemSpace::Host, rows, TupleFormat{8, 8}, "t");
    t.rows = rows;
    Buffer a = r.alloc(MemSpace::Host, bytes, "a"), b = r.alloc(MemSpace::Host, bytes, "b");
    r.phase("copy");
    Launched h;
    if (beside) h = r.launch(Stream{0}, HistogramOp{t, PartitionFn{PartitionFn::Radix, 4, 0, 0}});
    r.copy(Stream{1}, b, 0, a, 0, bytes).wait();
    r.end_phases();
    if (beside) h.get();
  };
}

RelationSpec relation(const char* name, uint64_t rows, KeyDist d) {
  RelationSpec s;
  s.name = name;
  s.rows = rows;
  s.dist = d;
  s.key_bytes = 8;
  s.payload_bytes = {8};
  return s;
}

class SimCpuTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { register_builtin(); }
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("joinlab_test_sim_cpu_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string profile(const std::string& name, const std::string& extra) {
    const fs::path p = dir_ / (name + ".ini");
    std::ofstream(p) << test::synthetic_machine(name) << extra << kOps;
    return p.string();
  }
  BackendConfig cluster(const std::string& profile_path, int nodes, int per_node, int threads = 0) const {
    BackendConfig c;
    c.shape = {nodes, per_node};
    c.profile = profile_path;
    c.profile_dir = dir_.string();
    c.threads_per_rank = threads;
    return c;
  }
  // Seconds of phase `name` of rank `rank`.
  double phase_seconds(const BackendConfig& c, const std::function<void(Rank&)>& body, const std::string& name,
                       int rank = 0) {
    double s = -1;
    make_backend("sim")->run(c, body, [&](Rank& r) {
      if (r.id() != rank) return;
      for (auto& p : r.phases())
        if (p.name == name) s = p.end - p.begin;
    });
    EXPECT_GE(s, 0) << "no phase " << name;
    return s;
  }
  fs::path dir_;
};

// A histogram of `rows` 16-byte tuples in host memory (bytes_in: its 8-byte keys);
// with `dma_bytes`, a host-to-device copy of that many bytes on another stream at the same time.
std::function<void(Rank&)> host_histogram(uint64_t rows, uint64_t dma_bytes = 0) {
  return [=](Rank& r) {
    Tuples t = r.alloc_tuples(MemSpace::Host, rows, TupleFormat{8, 8}, "t");
    t.rows = rows;
    Buffer host, dev;
    if (dma_bytes) {
      host = r.alloc(MemSpace::Pinned, dma_bytes, "src");
      dev = r.alloc(MemSpace::Device, dma_bytes, "dst");
    }
    r.phase("histogram");
    Event dma;
    if (dma_bytes) dma = r.copy(Stream{1}, dev, 0, host, 0, dma_bytes);
    r.launch(Stream{0}, HistogramOp{t, PartitionFn{PartitionFn::Radix, 4, 0, 0}}).get();
    r.end_phases();
    if (dma_bytes) dma.wait();
  };
}

TEST_F(SimCpuTest, ComputeBoundOperatorScalesWithCoresAndNotPastTheRoof) {
  const uint64_t rows = 1 << 22;  // 32 MiB of keys
  // Compute-bound: a roof far above what 4 cores draw.
  const std::string fast = profile("fastmem", cpu_section(4, 1e9, 1e13));
  const double one = phase_seconds(cluster(fast, 1, 1, 1), host_histogram(rows), "histogram");
  const double four = phase_seconds(cluster(fast, 1, 1, 4), host_histogram(rows), "histogram");
  EXPECT_NEAR(one / four, 4.0, 0.05) << one << " s on 1 core, " << four << " s on 4";
  EXPECT_NEAR(one, double(rows * 8) / 1e9, 1e-6);  // its keys' bytes at 1 GB/s of one core
  // At the roof: the memory link carries the bytes no faster with more cores.
  const std::string slow = profile("slowmem", cpu_section(4, 1e9, 5e8));
  const double one_roof = phase_seconds(cluster(slow, 1, 1, 1), host_histogram(rows), "histogram");
  const double four_roof = phase_seconds(cluster(slow, 1, 1, 4), host_histogram(rows), "histogram");
  EXPECT_GE(four_roof, one_roof * 0.999);
  EXPECT_NEAR(four_roof, one * 2, one * 0.02) << "bytes over the 0.5 GB/s roof";
  // More operators than cores share them: the default threads (cores / ranks of the domain).
  const double two_ranks = phase_seconds(cluster(fast, 1, 2), host_histogram(rows), "histogram");
  EXPECT_NEAR(two_ranks, one / 2, one * 0.02) << "2 ranks on 4 cores: 2 cores each";
}

TEST_F(SimCpuTest, LoadedRatesApplyAsTheDomainsRanksFillItsCores) {
  // One core alone at 1 GB/s; with all 4 cores busy each at 0.25 GB/s (hyper-threads, shared
  // caches): an operator's thread moves linearly between the two with the busy cores.
  const uint64_t rows = 1 << 22;
  std::string cpu = cpu_section(4, 1e9, 1e13);
  for (auto& k : cpu_op_kinds()) cpu += "loaded." + k + " = 2.5e8   # test value\n";
  const std::string loaded = profile("loaded", cpu), plain = profile("plain", cpu_section(4, 1e9, 1e13));
  const double alone = double(rows * 8) / 1e9;  // its keys at one core's rate
  EXPECT_NEAR(phase_seconds(cluster(loaded, 1, 1, 1), host_histogram(rows), "histogram"), alone, 1e-6);
  // 4 threads fill the domain: each at the loaded rate, 4 x 0.25 GB/s in all.
  EXPECT_NEAR(phase_seconds(cluster(loaded, 1, 1, 4), host_histogram(rows), "histogram"), alone, alone * 0.01);
  EXPECT_NEAR(phase_seconds(cluster(plain, 1, 1, 4), host_histogram(rows), "histogram"), alone / 4, alone * 0.01);
  // 2 threads of 4 cores: a third of the way (1 GB/s -> 0.75 GB/s), 1.5 GB/s in all.
  EXPECT_NEAR(phase_seconds(cluster(loaded, 1, 1, 2), host_histogram(rows), "histogram"), alone / 1.5, alone * 0.01);
  // 2 ranks of 2 threads fill the domain between them, whichever rank is asked.
  EXPECT_NEAR(phase_seconds(cluster(loaded, 1, 2, 2), host_histogram(rows), "histogram", 1), alone * 2, alone * 0.02)
      << "2 ranks x 2 threads at 0.25 GB/s each, each rank its own rows";
}

// An operator's per-core rate follows the load of its whole domain: a one-thread copy (a put
// between CPU ranks) beside a histogram on every core runs at the loaded rate, not at the rate of
// one busy core (crj's puts beside its partitioning senders).
TEST_F(SimCpuTest, AnOperatorBesideOthersRunsAtItsDomainsLoad) {
  std::string cpu = cpu_section(4, 1e9, 1e13);
  for (auto& k : cpu_op_kinds()) cpu += "loaded." + k + " = 2.5e8   # test value\n";
  const std::string p = profile("domainload", cpu);
  const uint64_t bytes = 1 << 20;  // one thread's copy (one per MiB)
  auto body = [&](bool beside) { return copy_beside_histogram(bytes, uint64_t(1) << 24, beside); };
  const double alone = phase_seconds(cluster(p, 1, 1, 4), body(false), "copy");
  const double beside = phase_seconds(cluster(p, 1, 1, 4), body(true), "copy");
  EXPECT_NEAR(alone, double(bytes) / 1e9, 1e-7) << "one thread, one busy core: the rate alone";
  // Beside 4 histogram threads: the domain's 4 cores are busy (the loaded rate, 2.5e8), and its 5
  // threads share the 4 cores (4/5 of one each).
  EXPECT_NEAR(beside, double(bytes) / (2.5e8 * 0.8), double(bytes) / 2.5e8 * 0.05) << alone << " s alone";
}

// A parallel operator pays the profile's op_overhead on top of its bytes (a one-thread one does
// not): the same rows counted in 8 histograms cost 7 overheads more than in one.
TEST_F(SimCpuTest, EveryParallelOperatorPaysTheRegionsOverhead) {
  const uint64_t rows = 1 << 22;  // 32 MiB of keys: 8 ms on 4 cores at 1 GB/s each
  const std::string p = profile("overhead", cpu_section(4, 1e9, 1e13) + "op_overhead = 0.002   # test value\n");
  auto batches = [&](uint64_t k) {
    return [=](Rank& r) {
      Tuples t = r.alloc_tuples(MemSpace::Host, rows, TupleFormat{8, 8}, "t");
      t.rows = rows;
      r.phase("histogram");
      for (uint64_t b = 0; b < k; ++b)
        r.launch(Stream{0}, HistogramOp{t.slice(rows * b / k, rows / k), PartitionFn{PartitionFn::Radix, 4, 0, 0}}).get();
      r.end_phases();
    };
  };
  const double bytes_s = double(rows * 8) / 4e9;
  EXPECT_NEAR(phase_seconds(cluster(p, 1, 1, 4), batches(1), "histogram"), bytes_s + 0.002, 1e-6);
  EXPECT_NEAR(phase_seconds(cluster(p, 1, 1, 4), batches(8), "histogram"), bytes_s + 8 * 0.002, 1e-6);
  EXPECT_NEAR(phase_seconds(cluster(p, 1, 1, 1), batches(8), "histogram"), double(rows * 8) / 1e9, 1e-6);
}

// With a measured copy curve (copy_rate.<threads>, measured with every thread copying), a copy
// runs at the curve's rate for the threads busy in its domain: beside a histogram it slows as if
// those threads copied too, and two ranks' 4-thread copies at once run at the rate for 8 threads.
TEST_F(SimCpuTest, ACopyRunsAtTheCopyRateOfTheThreadsBusyBesideIt) {
  std::string cpu = cpu_section(16, 1e9, 1e13);
  for (auto& k : cpu_op_kinds()) cpu += "loaded." + k + " = 2.5e8   # test value\n";
  cpu += "copy_rate.1 = 1e9   # test value\ncopy_rate.4 = 8e8   # test value\ncopy_rate.8 = 4e8   # test value\n";
  const std::string p = profile("copycurve", cpu);
  const uint64_t bytes = 4 << 20;  // a team of 4 (one thread per MiB)
  auto body = [&](bool beside) { return copy_beside_histogram(bytes, uint64_t(1) << 26, beside); };
  // One rank with 8 threads: its 4-thread copy alone, then beside its 8-thread histogram (12 of
  // the 16 cores busy): between the curve's 8 threads (4e8) and every core (the loaded copy
  // rate, 2.5e8) in log2(threads).
  const double alone = phase_seconds(cluster(p, 1, 1, 8), body(false), "copy");
  const double beside = phase_seconds(cluster(p, 1, 1, 8), body(true), "copy");
  EXPECT_NEAR(alone, double(bytes) / (4 * 8e8), 1e-7);
  const double rate12 = 4e8 + (2.5e8 - 4e8) * (std::log2(12.0) - 3);
  EXPECT_NEAR(beside, double(bytes) / (4 * rate12), alone * 0.01) << alone << " s alone";
  // Two ranks of the domain copy at once: 8 threads copying, 4e8 each.
  const double two = phase_seconds(cluster(p, 1, 2, 8), body(false), "copy");
  EXPECT_NEAR(two, double(bytes) / (4 * 4e8), 1e-7);
}

TEST_F(SimCpuTest, DmaIntoHostMemorySlowsAConcurrentMemoryBoundOperator) {
  const uint64_t rows = 1 << 22;
  // Roof 2e10 B/s; the histogram alone would draw its 32 MiB at 4 cores x 1e10 = 4e10 (memory-bound);
  // the host-to-device copy (1e10 B/s PCIe) takes half the roof while it runs.
  const std::string p = profile("roof", cpu_section(4, 1e10, 2e10));
  const double alone = phase_seconds(cluster(p, 1, 1, 4), host_histogram(rows), "histogram");
  const double with_dma = phase_seconds(cluster(p, 1, 1, 4), host_histogram(rows, uint64_t(1) << 30), "histogram");
  EXPECT_NEAR(alone, double(rows * 8) / 2e10, 1e-6);
  EXPECT_GT(with_dma, alone * 1.3) << alone << " s alone, " << with_dma << " s beside the copy";
}

TEST_F(SimCpuTest, NicDmaIntoHostMemorySlowsAMemoryBoundOperatorThere) {
  // Rank 0 puts 1 GiB from its host memory into rank 1's (another node) at the NIC's 1e10 B/s,
  // while rank 1 runs a memory-bound histogram under a 2e10 B/s roof.
  const std::string p = profile("nicroof", cpu_section(4, 1e10, 2e10));
  const uint64_t rows = 1 << 22, bytes = uint64_t(1) << 30;
  auto body = [&](bool put) {
    return [=](Rank& r) {
      Tuples t = r.alloc_tuples(MemSpace::Host, rows, TupleFormat{8, 8}, "t");
      t.rows = rows;
      Buffer win = r.alloc(MemSpace::Host, bytes, "window");
      const int w = r.expose(win, 1);
      r.barrier();
      r.phase("histogram");
      Event e;
      if (put && r.id() == 0) e = r.put(Stream{1}, 1, w, 0, win, 0, bytes, 0, 1);
      if (r.id() == 1) r.launch(Stream{0}, HistogramOp{t, PartitionFn{PartitionFn::Radix, 4, 0, 0}}).get();
      r.end_phases();
      if (put && r.id() == 0) e.wait();
      r.barrier();
    };
  };
  const double alone = phase_seconds(cluster(p, 2, 1, 4), body(false), "histogram", 1);
  const double beside = phase_seconds(cluster(p, 2, 1, 4), body(true), "histogram", 1);
  EXPECT_NEAR(alone, double(rows * 8) / 2e10, 1e-6);
  EXPECT_GT(beside, alone * 1.3) << alone << " s alone, " << beside << " s while the NIC writes host memory";
}

TEST_F(SimCpuTest, CrjFollowsTheCoreCount) {
  // Per-core rates low enough that the CPU radix join's operators are compute-bound at either
  // core count; its puts (chunks under 1 MiB: one core's memcpy each, as on the cpu backend)
  // copy fast enough not to matter.
  auto crj = [&](int cores) {
    RunPoint p;
    p.name = "crj cores";
    p.strategy = "crj";
    p.backend = "sim";
    p.verify = false;
    p.cluster.shape = {2, 1};
    p.cluster.profile = profile("crj" + std::to_string(cores), cpu_section(cores, 2e8, 1e13, 1e11));
    p.cluster.profile_dir = dir_.string();
    p.workload.r = relation("R", 1 << 22, KeyDist::UniqueDense);
    p.workload.s = relation("S", 1 << 22, KeyDist::ForeignKey);
    RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest.count, p.workload.s.rows);
    return o.total_seconds;
  };
  const double four = crj(4), sixteen = crj(16);
  EXPECT_GT(four, sixteen * 2.5) << four << " s on 4 cores, " << sixteen << " s on 16";
}

TEST_F(SimCpuTest, AHostCopyUsesTheCpuBackendsCopyTeam) {
  // 16 cores at 1e9 B/s each, an unbounded roof: a copy inside host memory takes one core per MiB
  // (cpu::copy_team), so 512 KiB runs on one core and 64 MiB on all 16.
  const std::string p = profile("copyteam", cpu_section(16, 1e9, 1e15));
  auto copy = [&](uint64_t bytes) {
    return phase_seconds(cluster(p, 1, 1), [=](Rank& r) {
      Buffer a = r.alloc(MemSpace::Host, bytes, "a"), b = r.alloc(MemSpace::Host, bytes, "b");
      r.phase("copy");
      r.copy(Stream{0}, b, 0, a, 0, bytes);
      r.sync(Stream{0});
      r.end_phases();
    }, "copy");
  };
  EXPECT_NEAR(copy(512 << 10), double(512 << 10) / 1e9, 1e-6);
  EXPECT_NEAR(copy(64 << 20), double(64 << 20) / 16e9, 1e-5);
}

TEST_F(SimCpuTest, EachMessagePaysItsSoftwareCost) {
  const std::string p = profile("msg", R"([msg]
send = ucx           # test value
ucx.send.seconds = 1e-5   # test value
ucx.send.per_byte = 1e-10 # test value
)");
  // N small sends back to back on one stream (they leave as one transfer) cost N x 10 us more
  // than the transfer; bytes add 0.1 ns each.
  auto sends = [&](int n, uint64_t bytes) {
    return phase_seconds(cluster(p, 1, 2), [=](Rank& r) {
      Buffer b = r.alloc(MemSpace::Device, bytes * uint64_t(n), "b");
      r.phase("messages");
      for (int i = 0; i < n; ++i) {
        if (r.id() == 0) r.send(Stream{0}, 1, b, uint64_t(i) * bytes, bytes, 3);
        else r.recv(Stream{0}, 0, b, uint64_t(i) * bytes, bytes, 3);
      }
      r.sync(Stream{0});
      r.end_phases();
    }, "messages", 1);
  };
  const double one = sends(1, 8), ten = sends(10, 8);
  EXPECT_NEAR(ten - one, 9 * 1e-5 + 9 * 8 / 1e11, 1e-8) << "10 messages against 1";
  const double big = sends(1, 1000000);
  EXPECT_NEAR(big - one, (1000000 - 8) * (1e-10 + 1 / 1e11), 1e-8) << "per byte: software and NVLink";
}

TEST(SimCpuProfiles, BadCpuAndMsgSectionsAreRejectedNamingFileLineKey) {
  const std::string machine = test::synthetic_machine("bad") + kOps;
  const std::string cpu = cpu_section(4, 1e9, 1e11);
  const std::string head = test::synthetic_machine("bad");
  const int cpu_line = int(std::count(head.begin(), head.end(), '\n')) + 1;  // the [cpu] header's line
  auto with = [&](std::string section, const std::string& from, const std::string& to) {
    section.replace(section.find(from), from.size(), to);
    return test::synthetic_machine("bad") + section + kOps;
  };
  {  // a good one reads, and writes back the same
    std::istringstream in(machine.substr(0, machine.find("[op.")) + cpu + "[msg]\nput = ucx   # test\nucx.put.seconds = 2e-6  # t\n"
                          "ucx.put.per_byte = 0   # t\n" + kOps);
    Profile p = parse_profile(in, "good.ini");
    EXPECT_EQ(p.cpu.cores, 4);
    EXPECT_EQ(p.cpu.rate.at("partition"), 1e9);
    EXPECT_EQ(p.msg.of("ucx", "put").seconds, 2e-6);
    std::ostringstream out;
    write_profile(p, out);
    std::istringstream back(out.str());
    Profile q = parse_profile(back, "again.ini");
    EXPECT_EQ(q.cpu.rate, p.cpu.rate);
    EXPECT_TRUE(q.cpu.loaded.empty());
    EXPECT_EQ(q.msg.put, "ucx");
  }
  std::string m = test::profile_rejection(with(cpu, "cores = 4   # test value", "cores = 4"));
  EXPECT_NE(m.find("bad.ini:" + std::to_string(cpu_line + 2) + ": cpu.cores = 4: a number without a source"),
            std::string::npos) << m;
  m = test::profile_rejection(with(cpu, "cores = 4", "cores = -2"));
  EXPECT_NE(m.find("bad.ini:" + std::to_string(cpu_line + 2) + ": cpu.cores = -2"), std::string::npos) << m;
  m = test::profile_rejection(with(cpu, "rate.probe = 1e+09", "rate.probe = fast"));
  EXPECT_NE(m.find("cpu.rate.probe = fast: not a number"), std::string::npos) << m;
  // Figures no hardware has are refused, not simulated as inf or 0.
  m = test::profile_rejection(with(cpu, "rate.probe = 1e+09", "rate.probe = 1e-300"));
  EXPECT_NE(m.find("cpu.rate.probe = 1e-300: a bandwidth outside 1e3 .. 1e16 bytes per second"), std::string::npos) << m;
  std::string slow = head;
  slow.replace(slow.find("latency = 1e-5"), 14, "latency = 3");
  m = test::profile_rejection(slow + kOps);
  EXPECT_NE(m.find("link.h2d.latency = 3: a latency above a second"), std::string::npos) << m;
  m = test::profile_rejection(with(cpu, "rate.sort = 1e+09   # test value\n", ""));
  EXPECT_NE(m.find("bad.ini: [cpu] rate.sort is missing"), std::string::npos) << m;
  m = test::profile_rejection(with(cpu, "rate.sort", "rate.sorting"));
  EXPECT_NE(m.find("cpu.rate.sorting = 1e+09: unknown key in [cpu]"), std::string::npos) << m;
  {  // loaded rates are optional per kind, and read and written back
    std::istringstream in(machine.substr(0, machine.find("[op.")) + cpu + "loaded.join = 5e8   # test\n" + kOps);
    Profile p = parse_profile(in, "loaded.ini");
    EXPECT_EQ(p.cpu.loaded.size(), 1u);
    EXPECT_EQ(p.cpu.per_thread_rate("join", 4, 4), 5e8);
    EXPECT_EQ(p.cpu.per_thread_rate("probe", 4, 4), 1e9);  // no loaded rate: the single-core one
    std::ostringstream out;
    write_profile(p, out);
    std::istringstream back(out.str());
    EXPECT_EQ(parse_profile(back, "again.ini").cpu.loaded, p.cpu.loaded);
  }
  m = test::profile_rejection(with(cpu, "rate.probe = 1e+09   # test value\n",
                                   "rate.probe = 1e+09   # test value\nloaded.probe = -1   # test value\n"));
  EXPECT_NE(m.find("cpu.loaded.probe = -1"), std::string::npos) << m;
  m = test::profile_rejection(test::synthetic_machine("bad") + "[msg]\nsend = nccl\n" + kOps);
  EXPECT_NE(m.find("[msg] send = nccl: the profile gives no nccl.send"), std::string::npos) << m;
  m = test::profile_rejection(test::synthetic_machine("bad") + "[msg]\nnccl.send.seconds = 1e-6   # t\n" + kOps);
  EXPECT_NE(m.find("[msg] nccl.send.per_byte is missing"), std::string::npos) << m;
  m = test::profile_rejection(test::synthetic_machine("bad") + "[msg]\nnccl.put.seconds = 1e-6   # t\n" + kOps);
  EXPECT_NE(m.find("msg.nccl.put.seconds = 1e-6: unknown key in [msg]"), std::string::npos) << m;
}

}  // namespace
}  // namespace joinlab
