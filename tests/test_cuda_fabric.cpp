// The cuda backend's transports between two ranks as threads (label gpu): peer, ucx (host
// staging) and nccl (two GPUs). Each one: send/recv with both ranks receiving before they send
// (shuffle's order), many messages posted in both orders, puts into device and pinned windows
// with their flags, shuffle (one and two levels) verified against the cpu backend, and a failing
// rank that stops a waiting one promptly. Each transport's run prints a line (stdout flushed), so
// a run cut short by a time limit shows where it was.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/common/error.hpp"
#include "core/experiment/runner.hpp"
#include "kernels/cuda/cuda_fabric.hpp"
#include "tests/cuda_test_util.hpp"

namespace joinlab {
namespace {

using Options = std::map<std::string, std::string>;

// Kernels load when the CUDA context is made, as in joinlab (register_cuda_backend): this binary
// calls CUDA (cudaGetDeviceCount) before the backend registers, and a lazily loaded module may
// wait for a GPU whose stream waits on a peer. Set before main(), i.e. before any CUDA call.
const bool kEagerModules = [] {
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  return true;
}();

// A deadlock shows up as the watchdog's failure naming the receive, well within a test's time limit.
constexpr const char* kTimeoutS = "20";

int gpus() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) cudaGetLastError();
  return n;
}

// Cluster options for 2 ranks over `transport`; false (and a printed reason) when this machine
// cannot run it.
bool options_for(const std::string& transport, Options& o) {
  o = {{"transport", transport}, {"timeout_s", kTimeoutS}};
  if (gpus() >= 2) return true;
  if (transport == "nccl") {
    std::printf("skipped: nccl needs 2 GPUs (NCCL refuses two ranks on one GPU), this machine has %d\n", gpus());
    return false;
  }
  o["share_gpus"] = "1";
  return true;
}

const char* const kTransports[] = {"peer", "ucx", "nccl"};

void progress(const std::string& what) {
  std::printf("[fabric] %s\n", what.c_str());
  std::fflush(stdout);
}

std::vector<uint64_t> exchange_and_put(Rank& r) {
  const uint64_t n = 1 << 20;  // 4 MiB per message
  const int peer = 1 - r.id();
  std::vector<uint64_t> bad;
  Buffer out = r.alloc(MemSpace::Device, n * 4, "out");
  Buffer in = r.alloc(MemSpace::Device, n * 4, "in");
  Buffer host = r.alloc(MemSpace::Pinned, n * 4, "host");
  auto* h = static_cast<uint32_t*>(host->ptr);
  for (uint64_t i = 0; i < n; ++i) h[i] = uint32_t(i * 7 + 1 + r.id() * 1000);
  r.copy(Stream{0}, out, 0, host, 0, n * 4);
  r.stream_wait(Stream{1}, r.record(Stream{0}));
  // Allocate, meet, then exchange (as shuffle does): an allocation waits for the GPU's earlier
  // work, which would include a receive the peer parked already (cuda_fabric.hpp, Gates).
  r.barrier();
  // Both ranks post the receive first, on its own stream, then the send (as shuffle does).
  Event got = r.recv(Stream{2}, peer, in, 0, n * 4, 7);
  Event sent = r.send(Stream{1}, peer, out, 0, n * 4, 7);
  got.wait();
  sent.wait();
  r.copy(Stream{2}, host, 0, in, 0, n * 4);
  r.sync(Stream{2});
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < n; ++i) wrong += h[i] != uint32_t(i * 7 + 1 + peer * 1000);
  bad.push_back(wrong);

  // Puts: 64 KiB at offset 4 KiB of the peer's device window and of its pinned window, then a
  // flag-only put; each with a flag value of its own.
  Buffer dwin = r.alloc(MemSpace::Device, 1 << 17, "device window");
  Buffer pwin = r.alloc(MemSpace::Pinned, 1 << 17, "pinned window");
  std::memset(pwin->ptr, 0, 1 << 17);
  const int dw = r.expose(dwin, 2), pw = r.expose(pwin, 2);
  r.put(Stream{1}, peer, dw, 4096, out, 0, 1 << 16, 0, 11);
  r.put(Stream{1}, peer, pw, 4096, out, 0, 1 << 16, 1, 22);
  r.put(Stream{1}, peer, pw, 0, Buffer{}, 0, 0, 0, 33);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((r.read_flag(dw, 0) != 11 || r.read_flag(pw, 1) != 22 || r.read_flag(pw, 0) != 33) &&
         std::chrono::steady_clock::now() < deadline)
    r.poll_pause();
  bad.push_back(r.read_flag(dw, 0) != 11);
  bad.push_back(r.read_flag(pw, 1) != 22);
  bad.push_back(r.read_flag(pw, 0) != 33);
  r.sync(Stream{1});
  r.copy(Stream{0}, host, 0, dwin, 4096, 1 << 16);
  r.sync(Stream{0});
  const auto* p = static_cast<const uint32_t*>(pwin->ptr) + 1024;
  uint64_t wrong_dev = 0, wrong_pinned = 0;
  for (uint64_t i = 0; i < (1 << 14); ++i) {
    wrong_dev += h[i] != uint32_t(i * 7 + 1 + peer * 1000);
    wrong_pinned += p[i] != uint32_t(i * 7 + 1 + peer * 1000);
  }
  bad.push_back(wrong_dev);
  bad.push_back(wrong_pinned);
  r.barrier();  // nobody puts any more: the windows may go
  return bad;
}

TEST(CudaFabric, SendRecvBothWaysAndPutsWithFlags) {
  JL_REQUIRE_GPU();
  for (const char* t : kTransports) {
    Options o;
    if (!options_for(t, o)) continue;
    std::vector<uint64_t> bad;
    progress(std::string(t) + ": send/recv and puts");
    try {
      bad = test::on_backend("cuda", exchange_and_put, 2, o);
    } catch (const std::exception& e) {
      FAIL() << t << ": " << e.what();
    }
    EXPECT_EQ(bad, std::vector<uint64_t>(6, 0)) << t << ": [recv words, device flag, pinned flag, flag-only put, "
                                                       "device window words, pinned window words] wrong";
  }
}

// Twelve messages of 64 KiB to 768 KiB each way, on three tags (matched in order per tag): rank 0
// posts all its receives and then its sends, rank 1 its sends and then its receives, so both
// kinds of peer copy occur (into a parked receive, and of a queued message); every word checked.
std::vector<uint64_t> many_messages(Rank& r) {
  const int peer = 1 - r.id(), count = 12;
  auto words = [](int i) { return uint64_t(i + 1) << 14; };
  uint64_t total = 0;
  for (int i = 0; i < count; ++i) total += words(i);
  auto value = [](uint64_t i, int rank) { return uint32_t(i * 2654435761u) ^ uint32_t(rank + 1); };
  Buffer host = r.alloc(MemSpace::Pinned, total * 4, "host");
  Buffer src = r.alloc(MemSpace::Device, total * 4, "src");
  Buffer dst = r.alloc(MemSpace::Device, total * 4, "dst");
  auto* h = static_cast<uint32_t*>(host->ptr);
  for (uint64_t i = 0; i < total; ++i) h[i] = value(i, r.id());
  r.copy(Stream{0}, src, 0, host, 0, total * 4);
  r.stream_wait(Stream{1}, r.record(Stream{0}));
  r.barrier();  // allocated everywhere before anyone parks a receive
  std::vector<Event> events;
  auto post = [&](bool receive) {
    uint64_t at = 0;
    for (int i = 0; i < count; ++i) {
      events.push_back(receive ? r.recv(Stream{2}, peer, dst, at * 4, words(i) * 4, 5 + i % 3)
                               : r.send(Stream{1}, peer, src, at * 4, words(i) * 4, 5 + i % 3));
      at += words(i);
    }
  };
  post(r.id() == 0);
  post(r.id() != 0);
  for (auto& e : events) e.wait();
  r.copy(Stream{2}, host, 0, dst, 0, total * 4);
  r.sync(Stream{2});
  r.sync(Stream{1});
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < total; ++i) wrong += h[i] != value(i, peer);
  r.barrier();  // the peer's copies out of src are complete
  return {wrong};
}

TEST(CudaFabric, ManyMessagesPostedInBothOrders) {
  JL_REQUIRE_GPU();
  for (const char* t : kTransports) {
    Options o;
    if (!options_for(t, o)) continue;
    progress(std::string(t) + ": many messages, both orders");
    std::vector<uint64_t> bad;
    try {
      bad = test::on_backend("cuda", many_messages, 2, o);
    } catch (const std::exception& e) {
      ADD_FAILURE() << t << ": " << e.what();
      continue;
    }
    EXPECT_EQ(bad, std::vector<uint64_t>{0}) << t << ": received words wrong";
  }
}

Workload small_join() {
  Workload w;
  w.r.name = "R";
  w.r.rows = 1 << 18;
  w.r.dist = KeyDist::UniqueDense;
  w.s.name = "S";
  w.s.rows = 1 << 20;
  w.s.dist = KeyDist::ForeignKey;
  w.s.zipf_z = 0.5;
  for (auto* rel : {&w.r, &w.s}) {
    rel->key_bytes = 8;
    rel->payload_bytes = {8};
  }
  return w;
}

RunPoint shuffle_point(const std::string& backend, int nodes, int per_node, int levels, Options cluster) {
  RunPoint p;
  p.name = "test";
  p.strategy = "shuffle";
  p.backend = backend;
  p.workload = small_join();
  p.cluster.shape = {nodes, per_node};
  p.cluster.threads_per_rank = 2;
  p.cluster.options = std::move(cluster);
  p.strategy_options = {{"levels", std::to_string(levels)}, {"chunk_rows", "65536"}, {"inflight", "4"}};
  return p;
}

// Runs p on the GPUs and expects the CPU backend's count and checksum.
void expect_matches(const RunOutcome& cpu, const RunPoint& p, const std::string& what) {
  progress(what);
  RunOutcome gpu;
  try {
    gpu = run_point(p);
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": " << e.what();
    return;
  }
  EXPECT_EQ(gpu.digest.count, cpu.digest.count) << what;
  EXPECT_EQ(gpu.digest.checksum, cpu.digest.checksum) << what;
}

TEST(CudaFabric, ShuffleOneAndTwoLevelsMatchTheCpuBackend) {
  JL_REQUIRE_GPU();
  register_builtin();
  const RunOutcome cpu = run_point(shuffle_point("cpu", 1, 2, 1, {}));
  ASSERT_GT(cpu.digest.count, 0u);
  for (const char* t : kTransports) {
    Options o;
    if (!options_for(t, o)) continue;
    // compression: CompressOp / DecompressOp on the device, the compressed bytes over the transport.
    for (const char* compression : {"off", "cascaded", "auto"})
      for (auto [nodes, per_node, levels] : {std::tuple{1, 2, 1}, {2, 1, 2}, {1, 2, 2}}) {
        const std::string what = std::string(t) + " shuffle compression=" + compression + " levels=" +
                                 std::to_string(levels) + " as " + std::to_string(nodes) + "x" + std::to_string(per_node);
        RunPoint p = shuffle_point("cuda", nodes, per_node, levels, o);
        p.strategy_options["compression"] = compression;
        expect_matches(cpu, p, what);
      }
  }
}

// The job's failure opens the gate of every parked receive, also after the watchdog pruned the
// set (it does every 100 ms): a gate still shut stays in it, and stays visible to the watchdog.
TEST(CudaFabric, GateSetOpensEveryShutGateAfterPrunes) {
  JL_REQUIRE_GPU();  // gates are words of pinned memory
  cuda::GateSet set;
  std::vector<cuda::GatePtr> gates;
  for (int i = 0; i < 4; ++i) {
    gates.push_back(cuda::new_gate());
    set.add(gates.back(), 0, "receive " + std::to_string(i));
  }
  cuda::gate_open_now(gates[1]);  // a receive whose sender came
  for (int prune = 0; prune < 2; ++prune) {
    int rank = -1;
    std::string what;
    EXPECT_TRUE(set.overdue(0.0, rank, what)) << "prune " << prune;  // prunes, then looks
    EXPECT_EQ(what, "receive 0") << "prune " << prune;
  }
  set.open_all();
  for (size_t i = 0; i < gates.size(); ++i) EXPECT_TRUE(cuda::gate_is_open(gates[i])) << "gate " << i;
}

TEST(CudaFabric, AFailingRankEndsThePeersWaitOnItsMessage) {
  JL_REQUIRE_GPU();
  for (const char* t : kTransports) {
    Options o;
    if (!options_for(t, o)) continue;
    o["timeout_s"] = "120";  // the error must come from the failure, not from a timeout
    progress(std::string(t) + ": a failing rank");
    const auto t0 = std::chrono::steady_clock::now();
    try {
      test::on_backend(
          "cuda",
          [](Rank& r) {
            Buffer b = r.alloc(MemSpace::Device, 1 << 20, "b");
            // Allocate, meet, then receive (as the exchanges above): an allocation waits for the
            // GPU's earlier work, which on a shared GPU would include the receive rank 0 parked
            // already (cuda_fabric.hpp, Gates).
            r.barrier();
            if (r.id() == 1) {
              std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0 waits by now
              throw RuntimeError("rank 1 gives up before sending");
            }
            r.recv(Stream{2}, 1, b, 0, 1 << 20, 3).wait();
            r.sync(Stream{2});
            r.barrier();
            return std::vector<uint64_t>{};
          },
          2, o);
      ADD_FAILURE() << t << ": the run should fail";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("gives up"), std::string::npos) << t << ": " << e.what();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 30.0) << t;
  }
}

}  // namespace
}  // namespace joinlab
