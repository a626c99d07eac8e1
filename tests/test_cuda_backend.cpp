// The cuda backend end to end: every single-GPU strategy gives the CPU backend's count and
// checksum (and the closed-form/reference one) across distributions, skew, match rates and key
// widths; operator spans in the trace; bad input (a working set larger than the GPU, a failing
// CUDA call); and the rank's transport and collectives (two ranks sharing one GPU).
#include <cstring>

#include "core/common/error.hpp"
#include "core/experiment/preflight.hpp"
#include "core/experiment/runner.hpp"
#include "kernels/cuda/cuda_check.hpp"
#include "tests/cuda_test_util.hpp"

namespace joinlab {
namespace {

using Options = std::map<std::string, std::string>;

RelationSpec relation(const std::string& name, uint64_t rows, KeyDist dist, uint8_t kb, uint8_t vb = 4) {
  return one_column_relation(name, rows, dist, kb, vb);
}

struct Case {
  std::string name;
  Workload w;
};

std::vector<Case> workloads() {
  std::vector<Case> v;
  auto fk = [](uint64_t nr, uint64_t ns, uint8_t kb, double match, double z, KeyDist rd = KeyDist::UniqueDense) {
    Workload w;
    w.r = relation("R", nr, rd, kb);
    w.s = relation("S", ns, KeyDist::ForeignKey, kb);
    w.s.match_rate = match;
    w.s.zipf_z = z;
    return w;
  };
  v.push_back({"pk-fk uniform", fk(1 << 16, 1 << 18, 4, 1.0, 0)});
  v.push_back({"zipf 0.5", fk(1 << 16, 1 << 18, 4, 1.0, 0.5)});
  v.push_back({"zipf 1", fk(1 << 16, 1 << 18, 4, 1.0, 1.0)});
  v.push_back({"zipf 1.5", fk(1 << 16, 1 << 18, 4, 1.0, 1.5)});
  v.push_back({"match 0.1", fk(1 << 16, 1 << 18, 4, 0.1, 0)});
  v.push_back({"8-byte keys sparse", fk(1 << 16, 1 << 18, 8, 1.0, 0, KeyDist::UniqueSparse)});
  v.push_back({"8-byte keys zipf 1 match 0.1", fk(100000, 300000, 8, 0.1, 1.0)});
  Workload u;  // many-to-many, reference join
  u.r = relation("R", 50000, KeyDist::Uniform, 4);
  u.s = relation("S", 80000, KeyDist::Uniform, 4);
  u.r.range_lo = u.s.range_lo = 1;
  u.r.range_hi = u.s.range_hi = 20000;
  v.push_back({"uniform m:n", u});
  Workload z;  // Zipf keys on both sides, 8-byte payloads
  z.r = relation("R", 1 << 15, KeyDist::UniqueDense, 4, 8);
  z.s = relation("S", 1 << 17, KeyDist::Zipf, 4, 8);
  z.s.zipf_z = 1.0;
  z.s.zipf_domain = 1 << 15;
  v.push_back({"zipf keys, 8-byte payloads", z});
  return v;
}

RunPoint point(const std::string& strategy, const std::string& backend, const Workload& w, Options options = {}) {
  RunPoint p;
  p.name = "test";
  p.strategy = strategy;
  p.backend = backend;
  p.workload = w;
  p.strategy_options = std::move(options);
  p.cluster.threads_per_rank = 4;
  return p;
}

struct StrategyCase {
  std::string strategy;
  Options options;
};

TEST(CudaStrategies, SameCountAndChecksumAsCpuBackend) {
  JL_REQUIRE_GPU();
  register_builtin();
  const std::vector<StrategyCase> strategies = {
      {"npj", {}},
      {"npj", {{"table", "chained"}, {"output", "direct"}}},
      {"phj", {}},
      {"phj", {{"passes", "2"}, {"output", "direct"}}},
      {"phj", {{"table", "chained"}, {"radix_bits", "12"}}},
      {"smj", {}},
      {"chunked", {{"chunk_rows", "50000"}}},
  };
  for (const Case& c : workloads())
    for (const StrategyCase& s : strategies) {
      const std::string what = s.strategy + " on " + c.name;
      RunOutcome cpu, gpu;
      ASSERT_NO_THROW(cpu = run_point(point(s.strategy, "cpu", c.w, s.options))) << what;
      try {
        gpu = run_point(point(s.strategy, "cuda", c.w, s.options));
      } catch (const std::exception& e) {
        FAIL() << what << ": " << e.what();
      }
      EXPECT_EQ(gpu.digest.count, cpu.digest.count) << what;
      EXPECT_EQ(gpu.digest.checksum, cpu.digest.checksum) << what;
      EXPECT_GT(gpu.digest.count, 0u) << what;
    }
}

// The same point on the cpu and the cuda backend: the same count and checksum, and a non-empty join.
void expect_same_as_cpu(const RunPoint& cpu_point, const RunPoint& gpu_point, const std::string& what) {
  RunOutcome cpu, gpu;
  ASSERT_NO_THROW(cpu = run_point(cpu_point)) << what;
  try {
    gpu = run_point(gpu_point);
  } catch (const std::exception& e) {
    FAIL() << what << ": " << e.what();
  }
  EXPECT_EQ(gpu.digest.count, cpu.digest.count) << what;
  EXPECT_EQ(gpu.digest.checksum, cpu.digest.checksum) << what;
  EXPECT_GT(gpu.digest.count, 0u) << what;
}

// triton's out-of-core plan on the GPU (in_gpu off, a cache smaller than R and S, so the first
// pass spills): every materializing output policy and space and both spill reads give the CPU
// backend's result (the second pass's histograms queued ahead, the next partition's layout
// queued during the join, one pinned output segment).
TEST(CudaStrategies, TritonOutOfCoreSameAsCpuBackend) {
  JL_REQUIRE_GPU();
  register_builtin();
  const std::vector<Case> all = workloads();
  for (const Case& c : {all[0], all[2], all[7]})
    for (const char* output : {"direct", "count_then_write"})
      for (const char* space : {"pinned", "device"})
        for (const char* read : {"kernel", "copy"})
          for (const char* cache : {"500000", "-1"}) {  // -1: R and S cached whole, R's second passes ahead (copy)
            const Options o = {{"in_gpu", "off"},     {"output", output},     {"output_space", space},
                               {"spill_read", read},  {"cache_bytes", cache}};
            const std::string what = "triton on " + c.name + " output " + output + " in " + space + " spill read " +
                                     read + " cache_bytes " + cache;
            RunPoint cpu_point = point("triton", "cpu", c.w, o), gpu_point = point("triton", "cuda", c.w, o);
            cpu_point.cluster.device_memory = gpu_point.cluster.device_memory = uint64_t(16) << 20;
            expect_same_as_cpu(cpu_point, gpu_point, what);
          }
}

// The join phase's lanes each on half the SMs (lane_sms = split: green contexts), the spill read
// by kernels and by copies, with a skewed workload: the CPU backend's count and checksum.
TEST(CudaStrategies, TritonLanesOnHalvesOfTheSmsSameAsCpuBackend) {
  JL_REQUIRE_GPU();
  register_builtin();
  const std::vector<Case> all = workloads();
  for (const Case& c : {all[0], all[7]})
    for (const char* read : {"kernel", "copy"}) {
      const Options o = {{"in_gpu", "off"}, {"output", "direct"}, {"spill_read", read}, {"cache_bytes", "500000"},
                         {"lane_sms", "split"}};
      RunPoint cpu_point = point("triton", "cpu", c.w, o), gpu_point = point("triton", "cuda", c.w, o);
      cpu_point.cluster.device_memory = gpu_point.cluster.device_memory = uint64_t(16) << 20;
      expect_same_as_cpu(cpu_point, gpu_point, "triton, lanes on split SMs, on " + c.name + " spill read " + read);
    }
}

// mgsmj on the GPUs there are (2 when there are two): the resident plan (runs kept on the GPUs,
// R's histograms counted there) and the paper's (resident = off), both sorts, and device memory
// capped so that every relation has several chunksets (the CPU multiway merge, the join's parts
// copied in): the CPU backend's count and checksum on the same ranks.
TEST(CudaStrategies, MgsmjSameAsCpuBackend) {
  JL_REQUIRE_GPU();
  register_builtin();
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  const int g = devices >= 2 ? 2 : 1;
  const std::vector<Case> all = workloads();
  for (const Case& c : {all[0], all[2], all[5], all[6]})
    for (const char* sort : {"radix", "merge"})
      for (const char* plan : {"auto", "off", "capped"}) {
        const Options o = {{"sort", sort}, {"resident", plan == std::string("off") ? "off" : "auto"}, {"output", "direct"}};
        const std::string what = "mgsmj on " + c.name + ", " + std::to_string(g) + " GPUs, sort " + sort + ", " + plan;
        RunPoint cpu_point = point("mgsmj", "cpu", c.w, o), gpu_point = point("mgsmj", "cuda", c.w, o);
        for (RunPoint* p : {&cpu_point, &gpu_point}) {
          p->cluster.shape = {1, g};
          if (plan == std::string("capped")) p->cluster.device_memory = uint64_t(8) << 20;
        }
        expect_same_as_cpu(cpu_point, gpu_point, what);
      }
}

TEST(CudaStrategies, TraceHasEveryKernelWithParametersInsideItsPhases) {
  JL_REQUIRE_GPU();
  Workload w;
  w.r = relation("R", 1 << 18, KeyDist::UniqueDense, 4);
  w.s = relation("S", 1 << 18, KeyDist::ForeignKey, 4);
  const RunOutcome o = run_point(point("phj", "cuda", w, {{"passes", "2"}}));
  bool saw_partition = false, saw_join = false;
  double first = 1e300, last = -1e300;
  for (auto& ph : o.rank_phases.at(0)) {
    first = std::min(first, ph.begin);
    last = std::max(last, ph.end);
  }
  bool saw_kernel = false;
  for (const TraceSpan& s : o.trace) {
    EXPECT_LE(s.begin, s.end);
    if (s.track == "stream 0 kernels") {  // the kernels inside the operators, named in detail
      saw_kernel = saw_kernel || s.params.detail == "partition_scatter_kernel";
      continue;
    }
    EXPECT_GE(s.begin, first - 1e-3) << to_string(s.params.kind);
    EXPECT_LE(s.end, last + 1e-3) << to_string(s.params.kind);
    if (s.params.kind == OpKind::Partition) {
      saw_partition = true;
      EXPECT_EQ(s.track, "stream 0");
      EXPECT_GT(s.params.fanout, 1u);
      EXPECT_EQ(s.params.rows_in, s.params.rows_out);
    }
    if (s.params.kind == OpKind::PartitionedJoin) {
      saw_join = true;
      EXPECT_EQ(s.params.rows_out, uint64_t(1) << 18);  // every S row matches once
      EXPECT_EQ(s.params.rows_build, uint64_t(1) << 18);
    }
  }
  EXPECT_TRUE(saw_partition);
  EXPECT_TRUE(saw_join);
  EXPECT_TRUE(saw_kernel);
}

TEST(CudaBadInput, WorkingSetLargerThanTheGpuIsRejectedBeforeAnyKernel) {
  JL_REQUIRE_GPU();
  register_builtin();
  Workload w;
  w.r = relation("R", 1 << 16, KeyDist::UniqueDense, 4);
  w.s = relation("S", 1 << 21, KeyDist::ForeignKey, 4);
  RunPoint p = point("npj", "cuda", w);
  const uint64_t npj = working_set_bytes("npj", make_job(p), p.cluster.shape);
  RunPoint q = point("chunked", "cuda", w, {{"output_space", "pinned"}});
  const uint64_t chunked = working_set_bytes("chunked", make_job(q), q.cluster.shape);
  ASSERT_LT(chunked, npj);
  p.cluster.device_memory = (chunked + npj) / 2;
  try {
    run_point(p);
    FAIL() << "npj should not fit " << p.cluster.device_memory << " bytes";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(std::to_string(npj) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(p.cluster.device_memory) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("chunked"), std::string::npos) << m;
  }
  q.cluster.device_memory = p.cluster.device_memory;  // and the suggested strategy runs there
  EXPECT_NO_THROW(run_point(q));
}

TEST(CudaBadInput, AllocationBeyondTheRankCapacityNamesBufferAndSizes) {
  JL_REQUIRE_GPU();
  try {
    test::on_backend("cuda", [](Rank& r) {
      Buffer fits = r.alloc(MemSpace::Device, 64 << 20, "fits");
      Buffer more = r.alloc(MemSpace::Device, 96 << 20, "S.keys");
      return std::vector<uint64_t>{};
    }, 1, {}, 128 << 20);
    FAIL() << "the second allocation exceeds 128 MiB";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("out of GPU memory"), std::string::npos) << m;
    EXPECT_NE(m.find("S.keys"), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(96 << 20) + " bytes"), std::string::npos) << m;
    EXPECT_NE(m.find("chunked"), std::string::npos) << m;
  }
}

TEST(CudaBadInput, AFailingCudaCallStopsTheRunNamingTheCall) {
  JL_REQUIRE_GPU();
  // The rank believes it may take 1 PiB; cudaMalloc of 16 TiB fails inside the run.
  try {
    test::on_backend("cuda", [](Rank& r) {
      r.alloc(MemSpace::Device, uint64_t(1) << 44, "huge");
      return std::vector<uint64_t>{};
    }, 1, {}, uint64_t(1) << 50);
    FAIL() << "cudaMalloc of 16 TiB cannot succeed";
  } catch (const RuntimeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cudaMalloc(&p, bytes)"), std::string::npos) << m;
    EXPECT_NE(m.find("kernels/cuda/cuda_memory.cu:"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaErrorMemoryAllocation"), std::string::npos) << m;
  }
  // And the check macro itself, on a call that fails without side effects.
  try {
    JL_CUDA_CHECK(cudaSetDevice(12345));
    FAIL();
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("cudaSetDevice(12345)"), std::string::npos) << e.what();
  }
}

TEST(CudaBadInput, MoreRanksThanGpusIsAnInputError) {
  JL_REQUIRE_GPU();
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  EXPECT_THROW(test::on_backend("cuda", [](Rank&) { return std::vector<uint64_t>{}; }, gpus + 1), InputError);
}

TEST(CudaTransport, SendRecvPutAllgatherBetweenTwoRanks) {
  JL_REQUIRE_GPU();
  const uint64_t n = 1 << 20;
  const auto got = test::on_backend(
      "cuda",
      [&](Rank& r) {
        std::vector<uint64_t> seen = r.allgather({uint64_t(r.id()) + 10, uint64_t(r.id()) * 2});
        Buffer host = r.alloc(MemSpace::Pinned, n * 4, "host");
        Buffer dev = r.alloc(MemSpace::Device, n * 4, "dev");
        auto* h = static_cast<uint32_t*>(host->ptr);
        if (r.id() == 0) {
          for (uint64_t i = 0; i < n; ++i) h[i] = uint32_t(i * 7 + 1);
          r.copy(Stream{0}, dev, 0, host, 0, n * 4);
          r.send(Stream{0}, 1, dev, 0, n * 4, 5).wait();
        } else {
          r.recv(Stream{1}, 0, dev, 0, n * 4, 5).wait();
          r.copy(Stream{1}, host, 0, dev, 0, n * 4);
          r.sync(Stream{1});
          uint64_t bad = 0;
          for (uint64_t i = 0; i < n; ++i) bad += h[i] != uint32_t(i * 7 + 1);
          seen.push_back(bad);
        }
        // One-sided: rank 1 puts 4 KiB into rank 0's window and raises flag 3 to 42.
        Buffer win = r.alloc(MemSpace::Device, 8192, "window");
        const int w = r.expose(win, 4);
        if (r.id() == 1) r.put(Stream{0}, 0, w, 4096, dev, 0, 4096, 3, 42).wait();
        r.barrier();
        if (r.id() == 0) {
          seen.push_back(r.read_flag(w, 3));
          r.copy(Stream{0}, host, 0, win, 4096, 4096);
          r.sync(Stream{0});
          seen.push_back(h[0]);  // rank 1's dev holds what rank 0 sent: h[0] = 1
        }
        r.barrier();
        return seen;
      },
      2, {{"share_gpus", "1"}});
  // Rank 0's view: allgather, then the flag and the first word of the put.
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0], 10u);
  EXPECT_EQ(got[1], 0u);
  EXPECT_EQ(got[2], 11u);
  EXPECT_EQ(got[3], 2u);
  EXPECT_EQ(got[4], 42u);
  EXPECT_EQ(got[5], 1u);
}

TEST(CudaTransport, AFailingRankStopsTheOthersPromptly) {
  JL_REQUIRE_GPU();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(test::on_backend(
                   "cuda",
                   [](Rank& r) {
                     if (r.id() == 1) throw RuntimeError("rank 1 gives up");
                     r.barrier();
                     return std::vector<uint64_t>{};
                   },
                   2, {{"share_gpus", "1"}}),
               RuntimeError);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
}

}  // namespace
}  // namespace joinlab
