// CpuRank, its streams, events, memory budget and traces; the in-process transport (send/recv
// ordering, put + flag, allgather, barrier, timeouts); the "cpu" backend running ranks as
// threads, and failing fast, naming the rank, when one of them throws.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/exec/backend.hpp"
#include "core/runtime/cpu_rank.hpp"
#include "core/runtime/in_process_transport.hpp"

namespace joinlab {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::unique_ptr<CpuRank> solo_rank(CpuRankConfig cfg = {}) {
  return std::make_unique<CpuRank>(0, ClusterShape{}, make_in_process_transports(1, 5.0)[0], cfg);
}

// Runs body on `n` ranks of the cpu backend.
void run_ranks(int n, const std::function<void(Rank&)>& body, std::map<std::string, std::string> options = {},
               const std::function<void(Rank&)>& collect = [](Rank&) {}) {
  register_builtin();
  BackendConfig cfg;
  cfg.shape = {1, n};
  cfg.threads_per_rank = 1;
  cfg.options = std::move(options);
  make_backend("cpu")->run(cfg, body, collect);
}

Buffer filled(Rank& rank, uint64_t bytes, uint8_t value, const std::string& tag = "buf") {
  Buffer b = rank.alloc(MemSpace::Host, bytes, tag);
  std::memset(b->ptr, value, bytes);
  return b;
}

// --- memory -------------------------------------------------------------------------------------

TEST(CpuRankMemory, DeviceBudgetIsEnforcedNamingTagAndSizes) {
  CpuRankConfig cfg;
  cfg.device = std::make_shared<MemoryPool>("device", 1 << 20);
  auto rank = solo_rank(cfg);
  EXPECT_EQ(rank->capacity(MemSpace::Device), 1u << 20);
  Buffer a = rank->alloc(MemSpace::Device, 600 << 10, "first");
  EXPECT_EQ(rank->capacity(MemSpace::Device), (1u << 20) - (600u << 10));
  try {
    rank->alloc(MemSpace::Device, 500 << 10, "R.keys");
    FAIL() << "allocation beyond capacity accepted";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'R.keys'"), std::string::npos) << m;
    EXPECT_NE(m.find("512000 bytes"), std::string::npos) << m;  // asked
    EXPECT_NE(m.find("434176 bytes"), std::string::npos) << m;  // left
    EXPECT_NE(m.find("device"), std::string::npos) << m;
  }
  a.reset();  // freeing gives the budget back
  EXPECT_EQ(rank->capacity(MemSpace::Device), 1u << 20);
  Buffer b = rank->alloc(MemSpace::Device, 1 << 20, "all");
  EXPECT_EQ(b->space, MemSpace::Device);
  EXPECT_EQ(b->tag, "all");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b->ptr) % 64, 0u);
  Buffer h = rank->alloc(MemSpace::Pinned, 1 << 20, "pinned");  // other spaces: their own pool
  EXPECT_NE(h->ptr, nullptr);
}

TEST(CpuBackendMemory, DeviceMemoryOptionSetsTheBudget) {
  register_builtin();
  BackendConfig cfg;
  cfg.device_memory = 3 << 20;
  uint64_t seen = 0, host = 0;
  make_backend("cpu")->run(cfg, [&](Rank& r) {
    seen = r.capacity(MemSpace::Device);
    host = r.capacity(MemSpace::Host);
  }, [](Rank&) {});
  EXPECT_EQ(seen, 3u << 20);
  EXPECT_GT(host, 100u << 20);  // a share of physical memory
}

// --- streams and events ------------------------------------------------------------------------------

// A vectored copy moves every range to its place (here reversing 8 blocks); an empty list's
// event is the stream's.
TEST(CpuRankStreams, AVectoredCopyMovesEveryRange) {
  auto rank = solo_rank();
  const uint64_t block = 1 << 16;
  Buffer a = rank->alloc(MemSpace::Pinned, 8 * block, "a"), b = rank->alloc(MemSpace::Pinned, 8 * block, "b");
  for (uint64_t i = 0; i < 8; ++i) std::memset(static_cast<char*>(a->ptr) + i * block, int(i + 1), block);
  std::vector<CopyRange> copies;
  for (uint64_t i = 0; i < 8; ++i) copies.push_back({b, (7 - i) * block, a, i * block, block});
  rank->copy_v(Stream{0}, copies).wait();
  for (uint64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(data_of<uint8_t>(b)[i * block], 8 - i) << i;
    EXPECT_EQ(data_of<uint8_t>(b)[(i + 1) * block - 1], 8 - i) << i;
  }
  Event none = rank->copy_v(Stream{1}, {});
  none.wait();
  EXPECT_TRUE(none.done());
}

TEST(CpuRankStreams, WorkOnOneStreamRunsInOrderAndStreamsWaitOnEvents) {
  auto rank = solo_rank();
  ASSERT_GE(rank->streams(), 4);
  const uint64_t n = 4 << 20;
  Buffer a = filled(*rank, n, 1), b = filled(*rank, n, 2), c = filled(*rank, n, 3);
  // a -> b -> c on stream 0: c must end up with a's bytes.
  rank->copy(Stream{0}, b, 0, a, 0, n);
  Event done = rank->copy(Stream{0}, c, 0, b, 0, n);
  done.wait();
  EXPECT_TRUE(done.done());
  EXPECT_EQ(data_of<uint8_t>(c)[n - 1], 1);
  // Stream 1 waits for stream 2's copy before its own.
  std::memset(a->ptr, 7, n);
  Event e2 = rank->copy(Stream{2}, b, 0, a, 0, n);
  rank->stream_wait(Stream{1}, e2);
  rank->copy(Stream{1}, c, 0, b, 0, n);
  rank->sync(Stream{1});
  EXPECT_EQ(data_of<uint8_t>(c)[12345], 7);
  rank->sync_all();
  EXPECT_TRUE(Event().done());  // an empty event is complete
}

TEST(CpuRankStreams, LaunchIsAsynchronousAndFillsResultAndTrace) {
  auto rank = solo_rank();
  Tuples t = rank->alloc_tuples(MemSpace::Device, 1000, {4, 4}, "t");
  for (uint32_t i = 0; i < 1000; ++i) data_of<uint32_t>(t.keys)[i] = i % 10;
  HistogramOp h;
  h.in = t;
  h.fn.bits = 4;
  Launched l = rank->launch(Stream{3}, h);
  const OpResult& r = l.get();
  ASSERT_EQ(r.values.size(), 16u);
  EXPECT_EQ(r.values[3], 100u);
  EXPECT_EQ(r.values[12], 0u);
  HashTable table = rank->alloc_table(MemSpace::Device, TableKind::LinearProbing, {4, 4}, 1000, 0.5, 1, "ht");
  rank->launch(Stream{1}, BuildOp{t, &table}).get();
  EXPECT_EQ(table.rows, 1000u);
  const OpResult p = rank->launch(Stream{1}, ProbeOp{&table, t.slice(0, 10), {}, 0, OutputMode::CountOnly}).get();
  EXPECT_EQ(p.count, 10u * 100u);
  auto spans = rank->trace().spans();
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].track, "stream 3");
  EXPECT_EQ(spans[0].params.kind, OpKind::Histogram);
  EXPECT_EQ(spans[0].params.fanout, 16u);
  EXPECT_EQ(spans[2].params.kind, OpKind::Probe);
  EXPECT_EQ(spans[2].params.rows_out, 1000u);  // filled from the result
  EXPECT_EQ(spans[2].params.rows_build, 1000u);
  for (auto& s : spans) {
    EXPECT_EQ(s.rank, 0);
    EXPECT_GE(s.begin, 0.0);
    EXPECT_GE(s.end, s.begin);
  }
  EXPECT_GE(rank->now(), spans.back().end);
}

TEST(CpuRankStreams, LinkAccessMovesGranulesAtTheirPositions) {
  auto rank = solo_rank();
  const uint64_t region = 1 << 16, bytes = 4096;
  Buffer host = rank->alloc(MemSpace::Pinned, region, "host");
  Buffer dev = rank->alloc(MemSpace::Device, 2 * bytes, "device");
  auto* h = static_cast<uint8_t*>(host->ptr);
  auto* d = static_cast<uint8_t*>(dev->ptr);
  std::vector<uint8_t> h0(region);
  for (uint64_t i = 0; i < region; ++i) h0[i] = uint8_t(i * 7 + i / 256);
  for (bool random : {true, false})
    for (uint32_t g : {16u, 64u, 4096u}) {
      SCOPED_TRACE(std::to_string(g) + (random ? " random" : " sequential"));
      std::copy(h0.begin(), h0.end(), h);
      // The written source repeats per granule: accesses that meet at a granule write the same.
      for (uint64_t i = 0; i < 2 * bytes; ++i) d[i] = uint8_t((i % g) * 3 + 1);
      const OpResult r = rank->launch(Stream{0}, LinkAccessOp{host, dev, bytes, g, random, LinkAccess::Both}).get();
      EXPECT_EQ(r.count, 2 * bytes);
      const uint64_t granules = region / 2 / g;  // Both: reads the first half, writes the second
      std::vector<bool> written(granules, false);
      for (uint64_t i = 0; i < bytes / g; ++i) {
        const uint64_t at = link_access_granule(i, granules, random);
        written[at] = true;
        ASSERT_EQ(std::memcmp(d + i * g, h0.data() + at * g, g), 0) << "read " << i;
      }
      for (uint64_t k = 0; k < granules; ++k)
        ASSERT_EQ(std::memcmp(h + region / 2 + k * g, written[k] ? d + bytes : h0.data() + region / 2 + k * g, g), 0)
            << "granule " << k << (written[k] ? " written" : " untouched");
    }
  // Write alone, in order: device [0, bytes) lands at the region's start.
  rank->launch(Stream{0}, LinkAccessOp{host, dev, bytes, 256, false, LinkAccess::Write}).get();
  EXPECT_EQ(std::memcmp(h, d, bytes), 0);
  try {
    rank->launch(Stream{0}, LinkAccessOp{host, dev, bytes, 24, true, LinkAccess::Read}).get();
    ADD_FAILURE() << "accepted a granule of 24 bytes";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("granule = 24"), std::string::npos) << e.what();
  }
}

TEST(CpuRankStreams, AFailedOperationIsRethrownAndLaterWorkOnTheStreamFails) {
  auto rank = solo_rank();
  Tuples t = rank->alloc_tuples(MemSpace::Device, 10, {4, 4}, "small");
  t.rows = t.capacity = 20;  // past the buffer
  Launched bad = rank->launch(Stream{0}, HistogramOp{t, PartitionFn{}});
  Event after = rank->record(Stream{0});
  EXPECT_THROW(bad.get(), RuntimeError);
  EXPECT_THROW(after.wait(), RuntimeError);
  EXPECT_NO_THROW(rank->sync(Stream{1}));  // other streams are unaffected
  EXPECT_THROW(rank->record(Stream{9}), RuntimeError);
  Buffer b = rank->alloc(MemSpace::Host, 16, "b");
  try {
    rank->copy(Stream{1}, b, 8, b, 0, 16);
    FAIL() << "copy past the buffer accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
}

TEST(CpuRankBandwidth, MeasuredOnThisHost) {
  Bandwidths bw;
  run_ranks(1, [&](Rank& r) { bw = r.bandwidths(); });
  EXPECT_GT(bw.mem, 1e8);
  EXPECT_EQ(bw.mem, bw.host_mem);
  EXPECT_EQ(bw.mem, bw.h2d);
  EXPECT_EQ(bw.mem, bw.p2p);
  EXPECT_EQ(bw.mem, bw.net);
  EXPECT_NE(bw.source.find("measured"), std::string::npos);
}

// --- transport ----------------------------------------------------------------------------------

TEST(InProcessTransport, MessagesArriveInOrderPerPeerAndTag) {
  auto eps = make_in_process_transports(2, 5.0);
  std::thread sender([&] {
    for (uint64_t i = 0; i < 100; ++i) {
      eps[0]->send(1, 7, &i, 8);
      uint64_t other = 1000 + i;
      eps[0]->send(1, 8, &other, 8);
    }
  });
  // Tag 8 first: tags are matched independently, each in its own order.
  for (uint64_t i = 0; i < 100; ++i) {
    uint64_t v = 0;
    eps[1]->recv(0, 8, &v, 8);
    ASSERT_EQ(v, 1000 + i);
  }
  for (uint64_t i = 0; i < 100; ++i) {
    uint64_t v = 0;
    eps[1]->recv(0, 7, &v, 8);
    ASSERT_EQ(v, i);
  }
  sender.join();
  uint64_t x = 5;
  eps[1]->send(0, 1, &x, 8);
  uint32_t small = 0;
  try {
    eps[0]->recv(1, 1, &small, 4);
    FAIL() << "size mismatch accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("expected 4 bytes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(eps[0]->send(2, 1, &x, 8), RuntimeError);  // no rank 2
}

TEST(InProcessTransport, PutsAreCheckedAgainstTheRemoteWindow) {
  auto eps = make_in_process_transports(2, 5.0);
  std::vector<uint64_t> w0(4, 0), w1(4, 0);
  std::thread other([&] { EXPECT_EQ(eps[1]->expose(w1.data(), 32, 2), 0); });
  EXPECT_EQ(eps[0]->expose(w0.data(), 32, 2), 0);
  other.join();
  uint64_t v = 9;
  eps[0]->put(1, 0, 24, &v, 8, 1, 3);
  EXPECT_EQ(w1[3], 9u);
  EXPECT_EQ(eps[1]->read_flag(0, 1), 3u);
  EXPECT_EQ(eps[1]->read_flag(0, 0), 0u);
  try {
    eps[0]->put(1, 0, 32, &v, 8, 0, 1);
    FAIL() << "put past the window accepted";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("overruns rank 1's window 0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(eps[0]->put(1, 0, 0, &v, 8, 2, 1), RuntimeError);  // no flag 2
  EXPECT_THROW(eps[0]->put(1, 1, 0, &v, 8, 0, 1), RuntimeError);  // no window 1
}

TEST(InProcessTransport, RecvTimesOutNamingWhatItWaitedFor) {
  auto eps = make_in_process_transports(2, 0.2);
  uint64_t v;
  const auto t0 = Clock::now();
  try {
    eps[1]->recv(0, 42, &v, 8);
    FAIL() << "recv without a sender returned";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("recv from rank 0 tag 42"), std::string::npos) << m;
    EXPECT_NE(m.find("timed out"), std::string::npos) << m;
  }
  EXPECT_LT(since(t0), 3.0);
  try {
    eps[0]->barrier();
    FAIL() << "barrier with a missing rank returned";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("waiting for rank(s) 1"), std::string::npos) << e.what();
  }
}

TEST(CpuRankTransport, SendRecvPutFlagAllgatherBarrierAcrossRanks) {
  const int n = 3;
  std::atomic<int> checked{0};
  run_ranks(n, [&](Rank& rank) {
    const int me = rank.id(), next = (me + 1) % n, prev = (me + n - 1) % n;
    // Ring of messages on two streams.
    const uint64_t bytes = 1 << 20;
    Buffer out = filled(rank, bytes, uint8_t(me + 1), "out");
    Buffer in = filled(rank, bytes, 0, "in");
    Event sent = rank.send(Stream{0}, next, out, 0, bytes, 5);
    Event got = rank.recv(Stream{1}, prev, in, 0, bytes, 5);
    got.wait();
    sent.wait();
    EXPECT_EQ(data_of<uint8_t>(in)[bytes - 1], uint8_t(prev + 1));
    // One-sided: everyone puts 8 bytes into slot `me` of every peer's window, flag `me` = me + 10.
    Buffer window = filled(rank, 8 * n, 0, "window");
    const int w = rank.expose(window, uint32_t(n));
    Buffer word = rank.alloc(MemSpace::Host, 8, "word");
    *data_of<uint64_t>(word) = 100 + uint64_t(me);
    for (int peer = 0; peer < n; ++peer)
      rank.put(Stream{2}, peer, w, 8 * uint64_t(me), word, 0, 8, uint32_t(me), 10 + uint64_t(me));
    rank.sync(Stream{2});
    for (int src = 0; src < n; ++src) {
      const auto t0 = Clock::now();
      while (rank.read_flag(w, uint32_t(src)) != 10 + uint64_t(src)) {
        ASSERT_LT(since(t0), 5.0) << "flag " << src << " never set";
        std::this_thread::yield();
      }
      EXPECT_EQ(data_of<uint64_t>(window)[src], 100 + uint64_t(src));  // data before flag
    }
    // allgather: lengths differ per rank, result in rank order.
    std::vector<uint64_t> mine(size_t(me + 1), uint64_t(me));
    auto all = rank.allgather(mine);
    EXPECT_EQ(all, (std::vector<uint64_t>{0, 1, 1, 2, 2, 2}));
    rank.barrier();
    all = rank.allgather({uint64_t(me) * 2});
    EXPECT_EQ(all, (std::vector<uint64_t>{0, 2, 4}));
    rank.barrier();
    checked++;
  });
  EXPECT_EQ(checked.load(), n);
}

TEST(CpuBackend, CollectRunsInRankOrderAfterAllBodies) {
  std::vector<int> order;
  std::atomic<int> finished{0};
  run_ranks(4, [&](Rank& r) {
    EXPECT_EQ(r.size(), 4);
    EXPECT_EQ(r.backend(), "cpu");
    r.report({uint64_t(r.id()), 0, true});
    finished++;
  }, {}, [&](Rank& r) {
    EXPECT_EQ(finished.load(), 4);
    order.push_back(r.id());
    EXPECT_EQ(r.result().count, uint64_t(r.id()));
  });
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST(CpuBackend, BadOptionsAreInputErrors) {
  EXPECT_THROW(run_ranks(1, [](Rank&) {}, {{"streams", "abc"}}), InputError);
  EXPECT_THROW(run_ranks(1, [](Rank&) {}, {{"timeout_s", "-1"}}), InputError);
  int streams = 0;
  run_ranks(1, [&](Rank& r) { streams = r.streams(); }, {{"streams", "6"}});
  EXPECT_EQ(streams, 6);
}

// --- failure -------------------------------------------------------------------------------------

// Rank 2 throws; the others are blocked in (or about to enter) every kind of blocking call.
// Each must fail within well under the 60 s timeout, with a message naming rank 2, and run()
// must rethrow rank 2's own exception with its type.
TEST(CpuBackendFailure, ARankThrowingMakesEveryOtherBlockingCallFailFast) {
  const int n = 5;
  std::mutex mu;
  std::vector<std::string> others;
  const auto t0 = Clock::now();
  try {
    run_ranks(n, [&](Rank& rank) {
      try {
        Buffer b = rank.alloc(MemSpace::Host, 64, "b");
        switch (rank.id()) {
          case 0: rank.recv(Stream{0}, 2, b, 0, 8, 1).wait(); break;  // event wait on a transport op
          case 1: rank.allgather({1}); break;
          case 2:
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            throw InputError("bad key 'zipf_z' = 3");
          case 3: rank.barrier(); break;
          case 4: {  // waits on a stream that waits on a recv on another stream
            Event r = rank.recv(Stream{1}, 2, b, 0, 8, 1);
            rank.stream_wait(Stream{2}, r);
            rank.sync(Stream{2});
            break;
          }
        }
        ADD_FAILURE() << "rank " << rank.id() << " returned from a blocking call";
      } catch (const InputError&) {
        throw;
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> g(mu);
        others.push_back(e.what());
        throw;
      }
    }, {{"timeout_s", "60"}});
    FAIL() << "run() returned although rank 2 threw";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "bad key 'zipf_z' = 3");
  }
  EXPECT_LT(since(t0), 5.0);
  ASSERT_EQ(others.size(), size_t(n - 1));
  for (auto& m : others) EXPECT_EQ(m, "rank 2 failed: bad key 'zipf_z' = 3");
}

TEST(CpuBackendFailure, VerificationErrorsKeepTheirType) {
  EXPECT_THROW(run_ranks(2, [](Rank& r) {
    if (r.id() == 1) throw VerificationError("count differs");
    r.barrier();
  }), VerificationError);
}

TEST(CpuBackendFailure, AStalledPeerTimesOutWithAClearMessage) {
  const auto t0 = Clock::now();
  try {
    run_ranks(2, [](Rank& r) {
      if (r.id() == 0) r.barrier();  // rank 1 never arrives
    }, {{"timeout_s", "0.3"}});
    FAIL() << "barrier with a missing rank returned";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("barrier"), std::string::npos) << m;
    EXPECT_NE(m.find("rank(s) 1"), std::string::npos) << m;
    EXPECT_NE(m.find("timed out"), std::string::npos) << m;
  }
  EXPECT_LT(since(t0), 5.0);
}

TEST(CpuBackendFailure, ErrorsOfWorkLeftInFlightFailTheRun) {
  EXPECT_THROW(run_ranks(1, [](Rank& r) {
    Tuples t = r.alloc_tuples(MemSpace::Device, 4, {4, 4}, "t");
    t.rows = t.capacity = 8;
    r.launch(Stream{0}, HistogramOp{t, PartitionFn{}});  // never waited on by the body
  }), RuntimeError);
}

}  // namespace
}  // namespace joinlab
