// The UCX data plane (core/runtime/process) with ranks as threads, each with its own UCP worker
// (shared memory / TCP on this machine): tagged messages, one-sided puts with ordered flags,
// collectives over the control plane, failure propagation; every distributed strategy over it;
// and a chunk corrupted in flight (JOINLAB_FAULT), which gpj's checksums must catch.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/experiment/runner.hpp"
#include "core/runtime/cpu_backend.hpp"

using namespace joinlab;

namespace {

std::vector<std::shared_ptr<Transport>> ucx(int ranks, double timeout_s = 20) {
  register_builtin();
  BackendConfig cfg;
  cfg.options["transport"] = "ucx";
  return make_thread_transports(cfg, ranks, timeout_s, 1);
}

// Runs body(rank) on one thread per rank; returns each rank's error text ("" = none).
std::vector<std::string> on_ranks(int n, const std::function<void(int)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void expect_no_errors(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

TEST(UcxTransport, MessagesOfOneTagArriveInOrderAndTagsAreIndependent) {
  auto t = ucx(2);
  const std::vector<uint64_t> big(1 << 17, 7);  // 1 MiB: the rendezvous protocol
  expect_no_errors(on_ranks(2, [&](int r) {
    if (r == 0) {
      for (uint64_t i = 0; i < 3; ++i) t[0]->send(1, 5, &i, sizeof i);
      const uint32_t other = 42;
      t[0]->send(1, 6, &other, sizeof other);
      t[0]->send(1, 7, big.data(), big.size() * 8);
      t[0]->send(0, 8, &other, sizeof other);  // to itself
      uint32_t back = 0;
      t[0]->recv(0, 8, &back, sizeof back);
      EXPECT_EQ(back, 42u);
    } else {
      uint32_t other = 0;
      t[1]->recv(0, 6, &other, sizeof other);  // tag 6 first: tag 5's messages wait
      EXPECT_EQ(other, 42u);
      for (uint64_t i = 0; i < 3; ++i) {
        uint64_t got = 99;
        t[1]->recv(0, 5, &got, sizeof got);
        EXPECT_EQ(got, i);
      }
      std::vector<uint64_t> got(big.size());
      t[1]->recv(0, 7, got.data(), got.size() * 8);
      EXPECT_EQ(got, big);
    }
  }));
}

TEST(UcxTransport, AMessageOfAnotherSizeIsAnErrorThatSaysBoth) {
  auto t = ucx(2);
  const auto errors = on_ranks(2, [&](int r) {
    uint64_t v[2] = {1, 2};
    if (r == 0) {
      t[0]->send(1, 1, v, 16);
      t[0]->send(1, 2, v, 8);
    } else {
      uint64_t small = 0;
      try {
        t[1]->recv(0, 1, &small, 8);
        ADD_FAILURE() << "a 16-byte message fit 8 bytes";
      } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find("larger than 8 bytes"), std::string::npos) << e.what();
      }
      try {
        t[1]->recv(0, 2, v, 16);
        ADD_FAILURE() << "an 8-byte message filled 16 bytes";
      } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find("expected 16 bytes, the message has 8"), std::string::npos) << e.what();
      }
    }
  });
  expect_no_errors(errors);
}

TEST(UcxTransport, AFlagIsSetOnlyAfterItsPutsLanded) {
  constexpr int n = 3;
  auto t = ucx(n);
  constexpr uint64_t kWords = 1 << 16, kPieces = 8;
  std::vector<std::vector<uint64_t>> windows(n, std::vector<uint64_t>(kWords * n, 0));
  expect_no_errors(on_ranks(n, [&](int r) {
    const int w = t[size_t(r)]->expose(windows[size_t(r)].data(), windows[size_t(r)].size() * 8, n);
    // Every rank writes its region of every rank's window in pieces; flag[r] = bytes so far.
    std::vector<uint64_t> mine(kWords);
    for (uint64_t i = 0; i < kWords; ++i) mine[i] = uint64_t(r) << 32 | i;
    const uint64_t piece = kWords / kPieces;
    for (int dst = 0; dst < n; ++dst)
      for (uint64_t p = 0; p < kPieces; ++p)
        t[size_t(r)]->put(dst, w, (uint64_t(r) * kWords + p * piece) * 8, mine.data() + p * piece, piece * 8,
                          uint32_t(r), (p + 1) * piece * 8);
    for (int src = 0; src < n; ++src) {
      const auto t0 = std::chrono::steady_clock::now();
      while (t[size_t(r)]->read_flag(w, uint32_t(src)) != kWords * 8) {
        ASSERT_LT(seconds_since(t0), 10.0) << "rank " << r << " waits for rank " << src;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      for (uint64_t i = 0; i < kWords; ++i)
        ASSERT_EQ(windows[size_t(r)][uint64_t(src) * kWords + i], uint64_t(src) << 32 | i) << r << " " << src;
    }
    t[size_t(r)]->barrier();  // nobody writes into a window whose owner has gone
  }));
}

TEST(UcxTransport, PutsOutsideAWindowAreErrorsThatNameIt) {
  auto t = ucx(2);
  std::vector<char> a(64), b(64);
  expect_no_errors(on_ranks(2, [&](int r) {
    const int w = t[size_t(r)]->expose(r ? b.data() : a.data(), 64, 2);
    if (r == 0) {
      char data[16] = {};
      try {
        t[0]->put(1, w, 56, data, 16, 0, 1);
        ADD_FAILURE() << "a put overran the window";
      } catch (const RuntimeError& e) {
        EXPECT_NE(std::string(e.what()).find("overruns rank 1's window"), std::string::npos) << e.what();
      }
      EXPECT_THROW(t[0]->put(1, w, 0, data, 8, 2, 1), RuntimeError);     // flag 2 of 2
      EXPECT_THROW(t[0]->put(1, w + 1, 0, data, 8, 0, 1), RuntimeError); // no such window
    }
    t[size_t(r)]->barrier();
  }));
}

TEST(UcxTransport, CollectivesGoThroughTheControlPlane) {
  constexpr int n = 4;
  auto t = ucx(n);
  expect_no_errors(on_ranks(n, [&](int r) {
    const std::vector<uint64_t> mine(static_cast<size_t>(r), static_cast<uint64_t>(r));  // rank r gives r words
    const auto all = t[size_t(r)]->allgather(mine);
    EXPECT_EQ(all, (std::vector<uint64_t>{1, 2, 2, 3, 3, 3}));
    t[size_t(r)]->barrier();
  }));
}

TEST(UcxTransport, AnAbortReachesEveryRankPromptly) {
  constexpr int n = 3;
  auto t = ucx(n, 30);
  const auto t0 = std::chrono::steady_clock::now();
  const auto errors = on_ranks(n, [&](int r) {
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      t[1]->abort("boom");
      return;
    }
    uint64_t v;
    t[size_t(r)]->recv(2 - r, 3, &v, 8);  // 0 and 2 wait for each other: nobody sends
  });
  EXPECT_LT(seconds_since(t0), 5.0);
  for (int r : {0, 2}) EXPECT_NE(errors[size_t(r)].find("rank 1 failed: boom"), std::string::npos) << errors[size_t(r)];
  EXPECT_THROW(t[0]->check_alive(), RuntimeError);
}

TEST(UcxTransport, AWaitWithNoPartnerTimesOutNamingIt) {
  auto t = ucx(2, 0.5);
  const auto errors = on_ranks(2, [&](int r) {
    if (r == 1) return;
    uint64_t v;
    t[0]->recv(1, 9, &v, 8);
  });
  EXPECT_NE(errors[0].find("recv from rank 1 tag 9 (8 bytes) timed out"), std::string::npos) << errors[0];
}

// --- strategies over UCX ------------------------------------------------------------------------------

namespace {

RunPoint ucx_point(const std::string& strategy, std::map<std::string, std::string> options, ClusterShape shape) {
  register_builtin();
  RunPoint p;
  p.name = "test";
  p.strategy = strategy;
  p.backend = "cpu";
  p.cluster.shape = shape;
  p.cluster.threads_per_rank = 1;
  p.cluster.options["transport"] = "ucx";
  p.workload.r.name = "R";
  p.workload.r.rows = 30000;
  p.workload.r.dist = KeyDist::UniqueDense;
  p.workload.s.name = "S";
  p.workload.s.rows = 60000;
  p.workload.s.dist = KeyDist::ForeignKey;
  p.workload.s.zipf_z = 0.8;
  p.strategy_options = std::move(options);
  return p;
}

}  // namespace

TEST(UcxStrategies, EveryDistributedStrategyMatchesTheReference) {
  const std::map<std::string, std::string> small = {{"chunk_bytes", "2048"}, {"slots", "2"}, {"batch_rows", "5000"}};
  std::vector<RunPoint> points = {ucx_point("shuffle", {}, {1, 4}), ucx_point("shuffle", {{"levels", "2"}}, {2, 2})};
  for (const char* s : {"gpj", "gpj-b", "gpj-h", "crj"}) points.push_back(ucx_point(s, small, {1, 4}));
  points.push_back(ucx_point("gpj", {}, {1, 3}));
  for (const RunPoint& p : points) {
    SCOPED_TRACE(p.strategy);
    RunOutcome o;
    ASSERT_NO_THROW(o = run_point(p));
    EXPECT_EQ(o.digest, expected_result(p.workload).digest);
  }
}

TEST(UcxStrategies, UcxPutsAndEmulatedPutsGiveTheSameResult) {
  // rma: ucp_put_nbx + ucp_worker_fence + flag put (UCX emulates it over TCP itself);
  // emulated: the transport's own header / data / acknowledgement messages.
  for (const char* mode : {"rma", "emulated"}) {
    ASSERT_EQ(setenv("JOINLAB_UCX_PUT", mode, 1), 0);
    for (const char* s : {"gpj", "crj"}) {
      RunPoint p = ucx_point(s, {{"chunk_bytes", "4096"}, {"slots", "2"}}, {1, 3});
      SCOPED_TRACE(std::string(s) + " " + mode);
      RunOutcome o;
      EXPECT_NO_THROW(o = run_point(p));
      EXPECT_EQ(o.digest, expected_result(p.workload).digest);
    }
  }
  unsetenv("JOINLAB_UCX_PUT");
}

TEST(UcxStrategies, AChunkCorruptedInFlightIsCaughtByItsChecksum) {
  // The third chunk rank 1 puts arrives with its last byte flipped (a value of its last row).
  ASSERT_EQ(setenv("JOINLAB_FAULT", "corrupt:rank=1:op=3", 1), 0);
  RunPoint p = ucx_point("gpj", {{"chunk_bytes", "2048"}, {"chunk_timeout_s", "1"}}, {1, 3});
  const auto t0 = std::chrono::steady_clock::now();
  try {
    run_point(p);
    ADD_FAILURE() << "gpj used a corrupted chunk";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("from rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("failed its checksum"), std::string::npos) << m;
    EXPECT_NE(m.find("corrupted in flight"), std::string::npos) << m;
  }
  unsetenv("JOINLAB_FAULT");
  EXPECT_LT(seconds_since(t0), 20.0);
  // Without the fault the same run is right.
  EXPECT_EQ(run_point(p).digest, expected_result(p.workload).digest);
}
