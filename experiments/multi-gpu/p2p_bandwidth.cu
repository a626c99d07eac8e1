// GPU a -> GPU b copy bandwidth (what the all-to-all rate of a shuffle is compared with): cudaMemcpyPeerAsync of
// 1 GiB with peer access enabled, best of 5 after a warm-up; one direction alone, then both at
// once (the all-to-all's case: each GPU sends while it receives).
//   p2p_bandwidth [a b]   prints: a,b,unidirectional_GBps,bidirectional_per_direction_GBps
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

int main(int argc, char** argv) {
  const int a = argc > 2 ? std::atoi(argv[1]) : 0, b = argc > 2 ? std::atoi(argv[2]) : 1;
  int n = 0;
  CHECK(cudaGetDeviceCount(&n));
  if (n < 2 || a >= n || b >= n || a == b) {
    std::fprintf(stderr, "p2p_bandwidth: needs two distinct GPUs (this machine has %d)\n", n);
    return 1;
  }
  const size_t bytes = size_t(1) << 30;
  void *src[2], *dst[2];
  cudaStream_t st[2];
  cudaEvent_t e0[2], e1[2];
  const int dev[2] = {a, b};
  for (int i = 0; i < 2; ++i) {
    CHECK(cudaSetDevice(dev[i]));
    int can = 0;
    CHECK(cudaDeviceCanAccessPeer(&can, dev[i], dev[1 - i]));
    if (can) {
      cudaError_t e = cudaDeviceEnablePeerAccess(dev[1 - i], 0);
      if (e != cudaErrorPeerAccessAlreadyEnabled) CHECK(e);
      cudaGetLastError();
    }
    CHECK(cudaMalloc(&src[i], bytes));
    CHECK(cudaMalloc(&dst[i], bytes));
    CHECK(cudaMemset(src[i], i + 1, bytes));
    CHECK(cudaStreamCreateWithFlags(&st[i], cudaStreamNonBlocking));
    CHECK(cudaEventCreate(&e0[i]));
    CHECK(cudaEventCreate(&e1[i]));
  }
  // i sends to 1 - i: src[i] on dev[i] -> dst[1 - i] on dev[1 - i].
  auto run = [&](int directions) {
    float best = 1e30f;
    for (int rep = 0; rep < 6; ++rep) {
      for (int i = 0; i < directions; ++i) {
        CHECK(cudaSetDevice(dev[i]));
        CHECK(cudaEventRecord(e0[i], st[i]));
        CHECK(cudaMemcpyPeerAsync(dst[1 - i], dev[1 - i], src[i], dev[i], bytes, st[i]));
        CHECK(cudaEventRecord(e1[i], st[i]));
      }
      float worst = 0;
      for (int i = 0; i < directions; ++i) {
        CHECK(cudaEventSynchronize(e1[i]));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0[i], e1[i]));
        worst = std::max(worst, ms);
      }
      if (rep > 0) best = std::min(best, worst);  // the first is a warm-up
    }
    return double(bytes) / (double(best) * 1e-3) / 1e9;
  };
  const double uni = run(1), bi = run(2);
  std::printf("%d,%d,%.1f,%.1f\n", a, b, uni, bi);
  return 0;
}
