// The host-side protocol of the cuda fabrics (kernels/cuda/cuda_fabric.hpp), without a GPU: the
// window descriptions exchanged at expose (device / host memory, host, CUDA IPC handle), which
// path a put takes, and the choice of transport from [cluster].
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "kernels/cuda/cuda_fabric.hpp"

namespace joinlab::cuda {
namespace {

BackendConfig with_transport(const std::string& t) {
  BackendConfig c;
  if (!t.empty()) c.options["transport"] = t;
  return c;
}

TEST(CudaFabricProtocol, WindowDescriptionsSurviveTheExchange) {
  WindowInfo host;
  host.host_id = 3;
  host.bytes = 4096;
  WindowInfo dev;
  dev.device = true;
  dev.host_id = 1;
  dev.bytes = 1 << 20;
  dev.address = 0x7f0000001000ull;
  dev.ipc = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint64_t> all = encode_window(host);
  const std::vector<uint64_t> second = encode_window(dev);
  EXPECT_EQ(all.size(), second.size());  // fixed length: the exchange is a plain allgather
  all.insert(all.end(), second.begin(), second.end());
  const std::vector<WindowInfo> got = decode_windows(all, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_FALSE(got[0].device);
  EXPECT_EQ(got[0].host_id, 3u);
  EXPECT_EQ(got[0].bytes, 4096u);
  EXPECT_TRUE(got[0].ipc.empty());
  EXPECT_TRUE(got[1].device);
  EXPECT_EQ(got[1].host_id, 1u);
  EXPECT_EQ(got[1].bytes, uint64_t(1) << 20);
  EXPECT_EQ(got[1].address, 0x7f0000001000ull);
  EXPECT_EQ(got[1].ipc, dev.ipc);
}

TEST(CudaFabricProtocol, MalformedOrMiscountedDescriptionsAreErrors) {
  WindowInfo w;
  w.bytes = 8;
  std::vector<uint64_t> one = encode_window(w);
  EXPECT_THROW(decode_windows(one, 2), RuntimeError);  // one rank's words for two ranks
  std::vector<uint64_t> bad = one;
  bad[0] ^= 1;  // not a window description
  try {
    decode_windows(bad, 1);
    FAIL();
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
}

TEST(CudaFabricProtocol, PutPathFollowsWhereTheWindowLives) {
  WindowInfo host;
  host.host_id = 0;
  EXPECT_EQ(put_path(host, 0), PutPath::HostWindow);
  EXPECT_EQ(put_path(host, 1), PutPath::HostWindow);  // the data plane reaches host memory anywhere
  WindowInfo dev;
  dev.device = true;
  dev.host_id = 2;
  EXPECT_EQ(put_path(dev, 2), PutPath::MappedDevice);   // CUDA IPC on the same host
  EXPECT_EQ(put_path(dev, 0), PutPath::Unsupported);    // GPU memory of another host: no GPUDirect here
}

TEST(CudaFabricProtocol, TransportDefaultsAndChoices) {
  EXPECT_EQ(fabric_kind(with_transport(""), false, true), "peer");
  EXPECT_EQ(fabric_kind(with_transport(""), true, true), "nccl");
  EXPECT_EQ(fabric_kind(with_transport("inproc"), false, true), "peer");
  EXPECT_EQ(fabric_kind(with_transport("ucx"), false, true), "ucx");
  EXPECT_EQ(fabric_kind(with_transport("ucx"), true, false), "ucx");
  EXPECT_EQ(fabric_kind(with_transport("mpi"), true, true), "mpi");
  EXPECT_EQ(fabric_kind(with_transport("nccl"), false, true), "nccl");
  auto error_of = [](const std::string& t, bool processes, bool nccl) {
    try {
      fabric_kind(with_transport(t), processes, nccl);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of("peer", true, true).find("threads"), std::string::npos);
  EXPECT_NE(error_of("mpi", false, true).find("mpirun"), std::string::npos);
  EXPECT_NE(error_of("tcp", false, true).find("peer, nccl or ucx"), std::string::npos);
  EXPECT_NE(error_of("nccl", true, false).find("no NCCL"), std::string::npos);
  EXPECT_EQ(fabric_kind(with_transport(""), true, false), "ucx");  // processes without NCCL: staged over UCX
}

// Registering the backend (before any CUDA call) asks for 32 hardware work queues per device,
// unless the user set a number: with the default 8, ranks sharing a GPU put more streams on it than
// queues, and a stream parked on a receive gate stopped others behind it in its queue (8 ranks
// of mgsmj on 2 GPUs hung in one run of two).
TEST(CudaBackendSetup, AsksForAWorkQueuePerStreamOfSharedGpus) {
  register_cuda_backend();
  const char* queues = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  ASSERT_NE(queues, nullptr);
  EXPECT_GE(std::stoi(queues), 32);
}

}  // namespace
}  // namespace joinlab::cuda
