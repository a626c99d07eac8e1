// gpj's streaming operators on the cuda backend: the persistent consumer kernel against the CPU
// consumer on the same chunks (several sources, partitions and slots, 4- and 8-byte keys, rings in
// device and in mapped pinned memory, chunks that land in two pieces), a corrupted chunk, an idle
// timeout and a cancellation ending the kernel with an error (not a hang), and gpj, gpj-b, gpj-h
// and crj end to end on CudaRanks (one rank, and two ranks sharing one GPU).
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "core/common/error.hpp"
#include "core/exec/chunk.hpp"
#include "core/experiment/runner.hpp"
#include "core/runtime/cpu_streaming.hpp"
#include "core/verify/checksum.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_rank.hpp"
#include "tests/cuda_test_util.hpp"
#include "tests/test_workloads.hpp"

namespace joinlab {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Chunks of `sources` senders for `parts` partitions: random keys (with duplicates on both sides,
// and S keys that miss), packed by PackChunksOp; ring (s, q) carries R chunks then S chunks.
struct Chunks {
  uint32_t sources, parts, slots;
  uint64_t slot_rows;
  TupleFormat rf, sf;
  uint32_t epoch = 0x5eed5;
  uint64_t slot_bytes = 0;
  std::vector<std::vector<uint64_t>> r_keys, r_vals, s_keys, s_vals;  // per ring
  std::vector<std::vector<std::vector<char>>> images;                 // per ring, in order
  std::vector<uint64_t> r_chunks, s_chunks;                           // per ring
  std::vector<uint64_t> r_rows;                                       // per partition

  Chunks(uint32_t sources_, uint32_t parts_, uint32_t slots_, uint64_t slot_rows_, TupleFormat rf_, TupleFormat sf_,
         uint64_t seed)
      : sources(sources_), parts(parts_), slots(slots_), slot_rows(slot_rows_), rf(rf_), sf(sf_) {
    slot_bytes = std::max(chunk_slot_bytes(rf, slot_rows), chunk_slot_bytes(sf, slot_rows));
    const size_t rings = size_t(sources) * parts;
    r_keys.resize(rings), r_vals.resize(rings), s_keys.resize(rings), s_vals.resize(rings), images.resize(rings);
    r_rows.assign(parts, 0);
    std::mt19937_64 rng(seed);
    const uint64_t high = rf.key_bytes == 8 ? (1ULL << 40) : 0;  // 8-byte keys use their high bits
    for (size_t ring = 0; ring < rings; ++ring) {
      const uint64_t nr = rng() % (4 * slot_rows) + (ring % 3 == 2 ? 0 : 1);  // some rings carry no R
      const uint64_t ns = rng() % (6 * slot_rows) + 1;
      for (uint64_t i = 0; i < nr; ++i) {
        r_keys[ring].push_back(high + (rng() % 500) * parts + ring % parts);
        r_vals[ring].push_back(rng() & (rf.val_bytes == 8 ? ~0ULL : 0xffffffffULL));
      }
      for (uint64_t i = 0; i < ns; ++i) {
        s_keys[ring].push_back(high + (rng() % 700) * parts + ring % parts);
        s_vals[ring].push_back(rng() & (sf.val_bytes == 8 ? ~0ULL : 0xffffffffULL));
      }
      r_rows[ring % parts] += nr;
      r_chunks.push_back((nr + slot_rows - 1) / slot_rows);
      s_chunks.push_back((ns + slot_rows - 1) / slot_rows);
      pack(ring, r_keys[ring], r_vals[ring], rf, 0, 1);
      pack(ring, s_keys[ring], s_vals[ring], sf, 1, r_chunks.back() + 1);
    }
  }

  // Packs one ring's rows of one relation with the CPU's PackChunksOp.
  void pack(size_t ring, const std::vector<uint64_t>& keys, const std::vector<uint64_t>& vals, TupleFormat f,
            uint32_t relation, uint64_t first_seq) {
    if (keys.empty()) return;
    const uint64_t n = keys.size(), chunks = (n + slot_rows - 1) / slot_rows;
    std::vector<char> k(n * f.key_bytes), v(n * f.val_bytes);
    for (uint64_t i = 0; i < n; ++i) {
      std::memcpy(k.data() + i * f.key_bytes, &keys[i], f.key_bytes);  // little endian: the low bytes
      std::memcpy(v.data() + i * f.val_bytes, &vals[i], f.val_bytes);
    }
    auto wrap = [](std::vector<char>& bytes) {
      auto b = std::make_shared<BufferImpl>();
      b->ptr = bytes.data();
      b->bytes = bytes.size();
      b->space = MemSpace::Host;
      b->tag = "test.pack";
      return Buffer(b);
    };
    std::vector<char> out(chunks * chunk_slot_bytes(f, slot_rows));
    PackChunksOp op;
    op.in.keys = wrap(k);
    op.in.vals = wrap(v);
    op.in.fmt = f;
    op.in.rows = op.in.capacity = n;
    op.begin = {0};
    op.rows = {n};
    op.first_seq = {first_seq};
    op.partition_base = uint32_t(ring % parts);
    op.relation = relation;
    op.epoch = epoch;
    op.slot_rows = slot_rows;
    op.out = wrap(out);
    OpResult res;
    execute_cpu_streaming_op(op, 2, res);
    EXPECT_EQ(res.count, chunks);
    for (uint64_t c = 0; c < chunks; ++c) {
      const uint64_t rows = std::min(slot_rows, n - c * slot_rows);
      const char* image = out.data() + c * chunk_slot_bytes(f, slot_rows);
      images[ring].emplace_back(image, image + chunk_bytes(f.key_bytes, f.val_bytes, slot_rows, rows));
    }
  }

  // The join of every ring's R with the S of its partition, by brute force.
  JoinDigest expected() const {
    JoinDigest d;
    for (uint32_t q = 0; q < parts; ++q)
      for (uint32_t a = 0; a < sources; ++a)
        for (uint32_t b = 0; b < sources; ++b) {
          const size_t rr = size_t(a) * parts + q, sr = size_t(b) * parts + q;
          for (size_t j = 0; j < s_keys[sr].size(); ++j)
            for (size_t i = 0; i < r_keys[rr].size(); ++i)
              if (r_keys[rr][i] == s_keys[sr][j]) {
                ++d.count;
                d.checksum += row_digest(r_keys[rr][i], r_vals[rr][i], s_vals[sr][j]);
              }
        }
    return d;
  }

  StreamConsumeOp consumer(Rank& rank, MemSpace ring_space, MemSpace out_space, uint64_t out_rows,
                           uint64_t staging_rows) const {
    // Tables and staging in device memory next to rings in pinned memory (their atomics stay on
    // the GPU); all in host memory for the CPU consumer.
    const MemSpace table_space = ring_space == MemSpace::Host ? MemSpace::Host : MemSpace::Device;
    StreamConsumeOp op;
    op.rings = rank.alloc(ring_space, uint64_t(sources) * parts * slots * slot_bytes, "test.rings");
    op.sources = sources;
    op.parts = parts;
    op.slots = slots;
    op.slot_rows = slot_rows;
    op.slot_bytes = slot_bytes;
    op.epoch = epoch;
    op.r_fmt = rf;
    op.s_fmt = sf;
    op.r_chunks = r_chunks;
    op.s_chunks = s_chunks;
    for (uint32_t q = 0; q < parts; ++q) {
      op.partition_ids.push_back(q);
      op.tables.push_back(rank.alloc_table(table_space, TableKind::Chained, rf, r_rows[q], 0.5, 1234 + q, "test.table"));
      op.workers.push_back(1 + q % 3);
    }
    op.mode = OutputMode::Direct;
    op.out = rank.alloc_output(out_space, out_rows, rf, sf, "test.out");
    op.staging_rows = staging_rows;
    op.staging = rank.alloc_output(table_space, 2 * staging_rows, rf, sf, "test.staging");
    op.progress = std::make_shared<StreamProgress>(size_t(sources) * parts);
    op.chunk_timeout_s = 1;
    op.idle_timeout_s = 10;
    return op;
  }
};

// A chunk's bytes into its slot (slot: the slot's address; the rings' memory space decides how).
using Deliver = std::function<void(char* slot, const std::vector<char>& image, size_t ring, uint64_t k)>;

// Plays the senders: every ring's R chunks, then every ring's S chunks (as rdma_exchange does: R
// is always consumable, S once its partition's R is in), each once the consumer released its slot.
void send_all(const Chunks& c, char* rings, const std::shared_ptr<StreamProgress>& progress, const Deliver& deliver) {
  const size_t n = c.images.size();
  for (int relation = 0; relation < 2; ++relation) {
    bool more = true;
    for (uint64_t round = 0; more; ++round) {
      more = false;
      for (size_t ring = 0; ring < n; ++ring) {
        const uint64_t k = relation == 0 ? round : c.r_chunks[ring] + round;
        if ((relation == 0 && k >= c.r_chunks[ring]) || k >= c.images[ring].size()) continue;
        more = true;
        const auto until = Clock::now() + std::chrono::seconds(20);
        while (k >= progress->consumed(ring) + c.slots) {
          if (progress->cancelled() || Clock::now() > until) return;
          std::this_thread::sleep_for(std::chrono::microseconds(20));
        }
        deliver(rings + (ring * c.slots + k % c.slots) * c.slot_bytes, c.images[ring][k], ring, k);
      }
    }
  }
}

// Delivery into device memory: the header and first half of the chunk, a pause, then the rest,
// so the kernel may see the sequence number before the bytes are all there.
Deliver device_delivery(int device, cudaStream_t& st) {
  return [device, &st](char* slot, const std::vector<char>& image, size_t, uint64_t k) {
    if (!st) {
      JL_CUDA_CHECK(cudaSetDevice(device));
      JL_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    }
    const size_t half = image.size() / 2;
    JL_CUDA_CHECK(cudaMemcpyAsync(slot, image.data(), half, cudaMemcpyHostToDevice, st));
    JL_CUDA_CHECK(cudaStreamSynchronize(st));
    if (k % 2) std::this_thread::sleep_for(std::chrono::microseconds(30));
    JL_CUDA_CHECK(cudaMemcpyAsync(slot + half, image.data() + half, image.size() - half, cudaMemcpyHostToDevice, st));
    JL_CUDA_CHECK(cudaStreamSynchronize(st));
  };
}
// Delivery into host memory (mapped pinned rings, the CPU consumer's rings): back to front.
void host_delivery(char* slot, const std::vector<char>& image, size_t, uint64_t k) {
  for (size_t at = image.size(); at > 0;) {
    const size_t piece = std::min<size_t>(at, 96);
    at -= piece;
    std::memcpy(slot + at, image.data() + at, piece);
    if (k % 3 == 0 && at % 960 == 0) std::this_thread::sleep_for(std::chrono::microseconds(5));
  }
}

JoinDigest digest_of(const JoinOutput& o, uint64_t rows) {
  JoinDigest d;
  d.count = rows;
  auto at = [](const Buffer& b, uint32_t width, uint64_t i) {
    return width == 4 ? uint64_t(static_cast<const uint32_t*>(b->ptr)[i]) : static_cast<const uint64_t*>(b->ptr)[i];
  };
  for (uint64_t i = 0; i < rows; ++i)
    d.checksum += row_digest(at(o.keys, o.r_fmt.key_bytes, i), at(o.rvals, o.r_fmt.val_bytes, i),
                             at(o.svals, o.s_fmt.val_bytes, i));
  return d;
}

struct Consumed {
  JoinDigest digest;
  bool overflow = false;
  uint64_t count = 0;
  std::vector<uint64_t> released;
};

// The consumer on `rank` (a kernel on the cuda backend when the rings are device or pinned memory;
// the CPU consumer on a host lane when they are pageable host memory).
Consumed consume(Rank& rank, const Chunks& c, MemSpace ring_space, uint64_t out_rows, uint64_t staging_rows) {
  StreamConsumeOp op = c.consumer(rank, ring_space, MemSpace::Pinned, out_rows, staging_rows);
  auto* cuda = dynamic_cast<cuda::CudaRank*>(&rank);
  cudaStream_t st = nullptr;
  const Deliver deliver = ring_space == MemSpace::Device ? device_delivery(cuda ? cuda->device() : 0, st) : Deliver(host_delivery);
  char* rings = static_cast<char*>(op.rings->ptr);
  if (ring_space == MemSpace::Device) {
    JL_CUDA_CHECK(cudaMemset(rings, 0, op.rings->bytes));
    JL_CUDA_CHECK(cudaDeviceSynchronize());  // the null stream does not order the rank's streams
  } else {
    std::memset(rings, 0, op.rings->bytes);
  }
  rank.sync_all();  // the tables and rings exist before the senders start
  std::thread sender([&] { send_all(c, rings, op.progress, deliver); });
  Launched l = rank.launch_streaming(Stream{3}, op);
  Consumed out;
  try {
    const OpResult& r = l.get();
    out.count = r.count;
    out.overflow = r.overflow;
  } catch (...) {
    op.progress->cancel();
    sender.join();
    if (st) cudaStreamDestroy(st);
    throw;
  }
  sender.join();
  if (st) cudaStreamDestroy(st);
  rank.sync(Stream{3});
  out.digest = digest_of(op.out, std::min(out.count, op.out.capacity));
  for (size_t ring = 0; ring < op.progress->rings(); ++ring) out.released.push_back(op.progress->consumed(ring));
  return out;
}

// The CPU consumer (core/runtime/cpu_streaming.cpp) on host rings: the reference implementation.
Consumed consume_on_cpu(const Chunks& c, uint64_t out_rows, uint64_t staging_rows) {
  Consumed out;
  test::on_backend("cpu", [&](Rank& rank) {
    out = consume(rank, c, MemSpace::Host, out_rows, staging_rows);
    return std::vector<uint64_t>{};
  });
  return out;
}

struct Geometry {
  uint32_t sources, parts, slots;
  uint64_t slot_rows;
  TupleFormat rf, sf;
};
const std::vector<Geometry> kGeometries = {
    {1, 2, 2, 50, {4, 4}, {4, 4}},
    {3, 4, 3, 37, {4, 4}, {4, 4}},
    {2, 5, 2, 64, {8, 8}, {8, 4}},
    {4, 3, 4, 100, {8, 4}, {8, 8}},
    {2, 40, 2, 17, {4, 8}, {4, 4}},  // many partitions, few rows each
};

// The fixture itself (no GPU needed): the CPU consumer joins its chunks as the brute-force join does.
TEST(CudaStreamConsume, TheFixturesChunksJoinOnTheCpuConsumer) {
  for (size_t g = 0; g < kGeometries.size(); ++g) {
    const Geometry& geo = kGeometries[g];
    const Chunks c(geo.sources, geo.parts, geo.slots, geo.slot_rows, geo.rf, geo.sf, 17 + g);
    const JoinDigest want = c.expected();
    EXPECT_GT(want.count, 0u);
    const Consumed cpu = consume_on_cpu(c, want.count + 5, 64);
    EXPECT_EQ(cpu.digest, want) << "geometry " << g;
    for (size_t ring = 0; ring < cpu.released.size(); ++ring)
      EXPECT_EQ(cpu.released[ring], c.images[ring].size()) << "geometry " << g << " ring " << ring;
  }
}

TEST(CudaStreamConsume, SameJoinAsTheCpuConsumerOnTheSameChunks) {
  JL_REQUIRE_GPU();
  for (size_t g = 0; g < kGeometries.size(); ++g) {
    const Geometry& geo = kGeometries[g];
    const Chunks c(geo.sources, geo.parts, geo.slots, geo.slot_rows, geo.rf, geo.sf, 17 + g);
    const JoinDigest want = c.expected();
    ASSERT_GT(want.count, 0u);
    const Consumed cpu = consume_on_cpu(c, want.count + 5, 64);
    ASSERT_EQ(cpu.digest, want) << "CPU consumer, geometry " << g;
    for (MemSpace space : {MemSpace::Device, MemSpace::Pinned}) {
      SCOPED_TRACE("geometry " + std::to_string(g) + ", rings in " + to_string(space) + " memory");
      Consumed gpu;
      test::on_backend("cuda", [&](Rank& rank) {
        gpu = consume(rank, c, space, want.count + 5, 64);
        return std::vector<uint64_t>{};
      });
      EXPECT_FALSE(gpu.overflow);
      EXPECT_EQ(gpu.count, cpu.count);
      EXPECT_EQ(gpu.digest, cpu.digest);
      for (size_t ring = 0; ring < gpu.released.size(); ++ring)
        EXPECT_EQ(gpu.released[ring], c.images[ring].size()) << "ring " << ring;
    }
  }
}

TEST(CudaStreamConsume, CountsPastAFullOutputAndSaysSo) {
  JL_REQUIRE_GPU();
  const Chunks c(2, 3, 2, 40, {4, 4}, {4, 4}, 5);
  const JoinDigest want = c.expected();
  Consumed gpu;
  test::on_backend("cuda", [&](Rank& rank) {
    gpu = consume(rank, c, MemSpace::Device, want.count / 2, 16);
    return std::vector<uint64_t>{};
  });
  EXPECT_TRUE(gpu.overflow);
  EXPECT_EQ(gpu.count, want.count);
}

TEST(CudaStreamConsume, ACorruptedChunkIsNamedAfterTheChunkTimeout) {
  JL_REQUIRE_GPU();
  const Chunks c(1, 2, 2, 50, {4, 4}, {4, 4}, 9);
  // The last R chunk of partition 1: its slot held an earlier chunk when it has 3 or more.
  ASSERT_GE(c.r_chunks[1], 1u);
  const uint64_t bad = c.r_chunks[1] - 1;
  test::on_backend("cuda", [&](Rank& rank) {
    StreamConsumeOp op = c.consumer(rank, MemSpace::Pinned, MemSpace::Pinned, c.expected().count + 1, 64);
    op.chunk_timeout_s = 0.5;
    char* rings = static_cast<char*>(op.rings->ptr);
    std::memset(rings, 0, op.rings->bytes);
    std::thread sender([&] {
      send_all(c, rings, op.progress, [bad](char* slot, const std::vector<char>& image, size_t ring, uint64_t k) {
        std::memcpy(slot, image.data(), image.size());
        if (ring == 1 && k == bad) slot[kChunkHeaderBytes + 5] ^= 0x10;  // a key byte
      });
    });
    const auto t0 = Clock::now();
    try {
      rank.launch_streaming(Stream{3}, op).get();
      ADD_FAILURE() << "a corrupted chunk was used";
    } catch (const RuntimeError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("chunk " + std::to_string(bad) + " of R partition 1 from rank 0"), std::string::npos) << m;
      EXPECT_NE(m.find("failed its checksum"), std::string::npos) << m;
    }
    EXPECT_GE(since(t0), op.chunk_timeout_s);
    EXPECT_LT(since(t0), 10.0);
    op.progress->cancel();  // the sender waits for slots no more
    sender.join();
    EXPECT_THROW(rank.sync(Stream{3}), RuntimeError);  // the stream's operator failed
    return std::vector<uint64_t>{};
  });
}

TEST(CudaStreamConsume, AnIdleTimeoutEndsTheKernelWithAnError) {
  JL_REQUIRE_GPU();
  const Chunks c(2, 3, 2, 30, {8, 8}, {8, 8}, 3);
  test::on_backend("cuda", [&](Rank& rank) {
    StreamConsumeOp op = c.consumer(rank, MemSpace::Device, MemSpace::Pinned, 100, 16);
    JL_CUDA_CHECK(cudaMemset(op.rings->ptr, 0, op.rings->bytes));
    JL_CUDA_CHECK(cudaDeviceSynchronize());
    op.idle_timeout_s = 0.3;
    const auto t0 = Clock::now();
    try {
      rank.launch_streaming(Stream{3}, op).get();
      ADD_FAILURE() << "the consumer ended without its chunks";
    } catch (const RuntimeError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("nothing arrived"), std::string::npos) << m;
      EXPECT_NE(m.find("chunk 0 of R partition 0 from rank 0"), std::string::npos) << m;
    }
    EXPECT_LT(since(t0), 10.0);
    EXPECT_EQ(op.progress->consumed(0), 0u);
    EXPECT_THROW(rank.sync(Stream{3}), RuntimeError);  // the stream's operator failed
    return std::vector<uint64_t>{};
  });
}

TEST(CudaStreamConsume, ACancelledConsumerStopsWithAnError) {
  JL_REQUIRE_GPU();
  const Chunks c(1, 2, 2, 30, {4, 4}, {4, 4}, 4);
  test::on_backend("cuda", [&](Rank& rank) {
    StreamConsumeOp op = c.consumer(rank, MemSpace::Device, MemSpace::Pinned, 100, 16);
    JL_CUDA_CHECK(cudaMemset(op.rings->ptr, 0, op.rings->bytes));
    JL_CUDA_CHECK(cudaDeviceSynchronize());
    op.idle_timeout_s = 60;
    std::thread canceller([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      op.progress->cancel();
    });
    const auto t0 = Clock::now();
    try {
      rank.launch_streaming(Stream{3}, op).get();
      ADD_FAILURE() << "a cancelled consumer succeeded";
    } catch (const RuntimeError& e) {
      EXPECT_NE(std::string(e.what()).find("cancelled"), std::string::npos) << e.what();
    }
    canceller.join();
    EXPECT_LT(since(t0), 10.0);
    EXPECT_THROW(rank.sync(Stream{3}), RuntimeError);  // the stream's operator failed
    return std::vector<uint64_t>{};
  });
}

// Host work on a stream keeps the stream's order: a host operator after a kernel sees its output,
// and a kernel after the host operator sees what it wrote.
TEST(CudaHostLanes, HostOperatorsKeepTheStreamOrder) {
  JL_REQUIRE_GPU();
  test::on_backend("cuda", [&](Rank& rank) {
    const uint64_t n = 1 << 20;
    RelationSpec spec;
    spec.name = "R";
    spec.rows = n;
    spec.key_bytes = 4;
    spec.payload_bytes = {4};
    spec.dist = KeyDist::UniqueDense;
    Tuples dev = rank.alloc_tuples(MemSpace::Device, n, {4, 4}, "dev");
    Tuples pinned = rank.alloc_tuples(MemSpace::Pinned, n, {4, 4}, "pinned");
    Tuples host = rank.alloc_tuples(MemSpace::Host, n, {4, 4}, "host");
    GenerateOp gen;
    gen.spec = spec;
    gen.out = dev;
    rank.launch(Stream{1}, gen);                                   // kernel
    rank.copy(Stream{1}, pinned.keys, 0, dev.keys, 0, n * 4);     // then a copy
    rank.copy(Stream{1}, pinned.vals, 0, dev.vals, 0, n * 4);
    SortOp sort;  // on the host (its output is pageable), after the copies
    sort.in = pinned;
    sort.out = host;
    sort.out.rows = n;
    Launched sorted = rank.launch(Stream{1}, sort);
    Buffer back = rank.alloc(MemSpace::Pinned, n * 4, "back");
    rank.copy(Stream{1}, back, 0, host.keys, 0, n * 4);  // after the host operator
    ChecksumOp sum;  // a kernel after the copy
    sum.keys = back;
    sum.key_bytes = 4;
    sum.rows = n;
    const OpResult s = rank.launch(Stream{1}, sum).get();
    EXPECT_NO_THROW(sorted.get());
    EXPECT_EQ(s.count, n);
    const uint32_t* keys = static_cast<const uint32_t*>(back->ptr);
    bool ordered = true;
    for (uint64_t i = 1; i < n; ++i) ordered = ordered && keys[i - 1] < keys[i];
    EXPECT_TRUE(ordered) << "the copy after the host sort ran before it";
    // The same key set as generated: the sort read what the copies before it wrote.
    ChecksumOp gen_sum = sum;
    gen_sum.keys = pinned.keys;
    EXPECT_EQ(rank.launch(Stream{2}, gen_sum).get().checksum, s.checksum);
    // The trace names the host operator on its stream.
    bool traced = false;
    for (const TraceSpan& sp : rank.trace().spans())
      traced = traced || (sp.params.kind == OpKind::Sort && sp.track == "stream 1");
    EXPECT_TRUE(traced);
    return std::vector<uint64_t>{};
  });
}

// --- the strategies end to end -------------------------------------------------------------------------

using test::pk_fk;

RunPoint point(const std::string& strategy, const Workload& w, std::map<std::string, std::string> options, int ranks) {
  RunPoint p;
  p.name = "test";
  p.strategy = strategy;
  p.backend = "cuda";
  p.cluster.shape = {1, ranks};
  p.cluster.threads_per_rank = 2;
  if (ranks > 1) p.cluster.options = {{"share_gpus", "1"}};
  p.workload = w;
  p.strategy_options = std::move(options);
  return p;
}

void expect_correct(const RunPoint& p) {
  std::string what = p.strategy + " on " + std::to_string(p.cluster.shape.size()) + " rank(s)";
  for (auto& [k, v] : p.strategy_options) what += " " + k + "=" + v;
  SCOPED_TRACE(what);
  RunOutcome o;
  try {
    o = run_point(p);
  } catch (const std::exception& e) {
    FAIL() << e.what();
  }
  const ExpectedResult want = expected_result(p.workload);
  EXPECT_EQ(o.digest.count, want.digest.count);
  EXPECT_TRUE(o.has_checksum);
  EXPECT_EQ(o.digest.checksum, want.digest.checksum);
}

const std::map<std::string, std::string> kSmallGeometry = {{"chunk_bytes", "2048"}, {"slots", "2"}, {"batch_rows", "3000"}};

TEST(CudaDistributed, GpjGpjBGpjHAndCrjMatchTheExpectation) {
  JL_REQUIRE_GPU();
  register_builtin();
  for (const std::string s : {"gpj", "gpj-b", "gpj-h", "crj"})
    for (int ranks : {1, 2}) {
      expect_correct(point(s, pk_fk(20000, 50000), kSmallGeometry, ranks));
      expect_correct(point(s, pk_fk(20000, 40000, 8, 0.5, 1.2), kSmallGeometry, ranks));
    }
  // gpj-b landed in pinned host memory, copied to the GPU before its join.
  std::map<std::string, std::string> landed = kSmallGeometry;
  landed["landing"] = "host";
  for (int ranks : {1, 2}) expect_correct(point("gpj-b", pk_fk(20000, 50000), landed, ranks));
  // Defaults (128 KB chunks, 2^20-row batches) and a many-to-many join, whose output outgrows |S|
  // (gpj exchanges again with its exact size).
  Workload m = pk_fk(3000, 5000);
  m.r.dist = m.s.dist = KeyDist::Uniform;
  m.r.range_lo = m.s.range_lo = 1;
  m.r.range_hi = m.s.range_hi = 400;
  for (const std::string s : {"gpj", "gpj-h"}) {
    expect_correct(point(s, pk_fk(200000, 400000), {}, 2));
    expect_correct(point(s, m, kSmallGeometry, 2));
  }
}

TEST(CudaDistributed, GpjWithoutGpudirectCopiesLandedChunksToTheGpu) {
  JL_REQUIRE_GPU();
  register_builtin();
  // gpudirect = off: the puts land in rings in pinned host memory; each arrived chunk is copied
  // to the GPU's rings while the persistent consumer polls them. Small rings reuse their slots.
  for (const std::string s : {"gpj", "gpj-h"})
    for (int ranks : {1, 2}) {
      std::map<std::string, std::string> o = kSmallGeometry;
      o["gpudirect"] = "off";
      expect_correct(point(s, pk_fk(20000, 50000), o, ranks));
      expect_correct(point(s, pk_fk(20000, 40000, 8, 0.5, 1.2), o, ranks));
    }
  // Default geometry: full 1 MiB-class chunks, several per copy.
  expect_correct(point("gpj", pk_fk(200000, 400000), {{"gpudirect", "off"}}, 2));
}

TEST(CudaDistributed, ConcurrentJoinsEachGiveTheVerifiedResult) {
  JL_REQUIRE_GPU();
  register_builtin();
  // Two joins at once on the same ranks (a fabric each, the GPUs shared). gpj's persistent
  // consumers of both joins must be resident together: small grids.
  for (const std::string s : {"gpj", "gpj-b", "shuffle"}) {
    std::map<std::string, std::string> o;
    if (s != "shuffle") o = kSmallGeometry;
    if (s == "gpj") o["grid_blocks"] = "16";
    RunPoint p = point(s, pk_fk(20000, 50000), o, 2);
    p.cluster.jobs = 2;
    expect_correct(p);
  }
  std::map<std::string, std::string> off = kSmallGeometry;
  off["grid_blocks"] = "16";
  off["gpudirect"] = "off";
  RunPoint p = point("gpj", pk_fk(20000, 50000), off, 2);
  p.cluster.jobs = 2;
  expect_correct(p);
}

TEST(CudaDistributed, GpjHybridJoinsWhatDoesNotFitOnTheCpu) {
  JL_REQUIRE_GPU();
  register_builtin();
  // 400 KB of GPU memory per rank: some partitions stream to the GPU, the rest is joined by the
  // CPU radix join on host memory; the trace shows both.
  RunPoint p = point("gpj-h", pk_fk(40000, 80000), {{"chunk_bytes", "1024"}, {"slots", "2"}, {"staging_rows", "1024"}}, 2);
  p.cluster.device_memory = 400000;
  expect_correct(p);
  const RunOutcome o = run_point(p);
  uint64_t gpu = 0, cpu = 0;
  for (const TraceSpan& s : o.trace) {
    if (s.params.kind == OpKind::StreamConsume && s.params.detail.find("host CPUs") == std::string::npos) gpu += s.params.bytes + 1;
    if (s.params.kind == OpKind::PartitionedJoin && s.params.detail.find("host CPUs") != std::string::npos) cpu += s.params.rows_in;
  }
  EXPECT_GT(gpu, 0u);
  EXPECT_GT(cpu, 0u);
}

// gpj's senders (core/strategies/rdma_exchange.cpp) put from pinned send buffers, queued behind
// their CPU work: the puts of a batch are DMA copies that run while the host CPUs partition the
// next one straight into its chunk images. With send_buffers = pageable they put from pageable memory, each batch after
// its CPU work. 2^22 rows per rank and table (16-byte tuples) in batches of 2^19.
TEST(CudaDistributed, GpjPutsFromPinnedBuffersWhileItsCpusPartition) {
  JL_REQUIRE_GPU();
  register_builtin();
  Workload w = pk_fk(1 << 23, 1 << 23, 8);
  w.s.payload_bytes = {8};
  for (const std::string buffers : {"pinned", "pageable"}) {
    SCOPED_TRACE(buffers);
    const RunPoint p = point("gpj", w, {{"batch_rows", "524288"}, {"chunk_bytes", "131072"}, {"slots", "8"},
                                        {"send_buffers", buffers}}, 2);
    const RunOutcome o = run_point(p);
    EXPECT_EQ(o.digest, expected_result(w).digest);
    // Per rank: its host CPU work (one lane, spans in order) and its data puts.
    std::map<int, std::vector<std::pair<double, double>>> cpu, puts;
    uint64_t partitions = 0, packed_rows = 0;
    for (const TraceSpan& s : o.trace) {
      const bool host = s.params.detail.find("host CPUs") != std::string::npos;
      if (host && (s.params.kind == OpKind::Partition || s.params.kind == OpKind::PackChunks))
        cpu[s.rank].push_back({s.begin, s.end});
      // The senders partition straight into chunk images: one pass, no Partition operator.
      partitions += s.params.kind == OpKind::Partition;
      if (s.params.kind == OpKind::PackChunks) {
        EXPECT_NE(s.params.detail.find("partitioned while packed"), std::string::npos) << s.params.detail;
        packed_rows += s.params.rows_in;
      }
      if (s.params.kind == OpKind::Put && s.params.bytes > 0) {
        puts[s.rank].push_back({s.begin, s.end});
        EXPECT_EQ(s.params.mem_src, int(buffers == "pinned" ? MemSpace::Pinned : MemSpace::Host));
      }
    }
    EXPECT_EQ(partitions, 0u);
    EXPECT_EQ(packed_rows, w.r.rows + w.s.rows);
    double put_time = 0, overlapped = 0;
    for (auto& [rank, v] : puts)
      for (auto [b, e] : v) {
        put_time += e - b;
        for (auto [cb, ce] : cpu[rank]) overlapped += std::max(0.0, std::min(e, ce) - std::max(b, cb));
      }
    ASSERT_GT(put_time, 0);
    // Seen on 2 ranks sharing one H200 (2026-11-22): 17% and 23% of the put time overlapped with
    // pinned buffers; 1.4% with pageable ones (a larger run), whose copies the calling thread stages.
    if (buffers == "pinned") {
      EXPECT_GT(overlapped, 0.1 * put_time) << "the puts ran while the host CPUs worked on the next batch";
    }
  }
}

TEST(CudaDistributed, CrjRunsOnTheHostCpus) {
  JL_REQUIRE_GPU();
  register_builtin();
  const RunOutcome o = run_point(point("crj", pk_fk(30000, 60000), {}, 2));
  EXPECT_EQ(o.digest, expected_result(pk_fk(30000, 60000)).digest);
  // Every operator of crj ran on the host: no kernel span.
  for (const TraceSpan& s : o.trace) {
    if (s.params.kind == OpKind::Partition || s.params.kind == OpKind::PartitionedJoin) {
      EXPECT_NE(s.params.detail.find("host CPUs"), std::string::npos) << to_string(s.params.kind) << " " << s.track;
    }
  }
}

}  // namespace
}  // namespace joinlab
