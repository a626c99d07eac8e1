// GPU a -> GPU b copy bandwidth (what the all-to-all rate of a shuffle is compared with): cudaMemcpyPeerAsync of
// 1 GiB with peer access enabled, best of 5 after a warm-up; one direction alone, then both at
// once (the all-to-all's case: each GPU sends while it receives).
//   p2p_bandwidth [a b]   prints: a,b,unidirectional_GBps,bidirectional_per_direction_GBps
// With several peers at once (the 4- and 8-GPU all-to-all's case: does a GPU's throughput over
// NVLink/NVSwitch stay at one pair's when its copies go to several peers together?):
//   p2p_bandwidth --peers N   GPUs 0..N-1; 1 GiB per copy, one stream per (source, destination),
//   every copy issued on its source GPU (a push), best of 5 after a warm-up; prints
//   N,fan_out_GBps,fan_in_GBps,all_to_all_per_gpu_GBps: GPU 0 to the N-1 others at once (its bytes
//   out over the time), the N-1 others to GPU 0 at once (bytes in), every GPU to every other at once
//   (one GPU's bytes out over the time of the slowest copy).
// With the host's memory at the other end (does one host serve every GPU's PCIe link at once, or
// do its DMA engines, root ports or IOMMU cap the sum?):
//   p2p_bandwidth --host N   GPUs 0..N-1, each with its own 1 GiB of pinned host memory; prints
//   host,N,h2d_GBps,d2h_GBps,both_GBps,put_GBps: the sum over the GPUs of host-to-device copies all
//   at once, device-to-host all at once, both directions at once (bytes each way), and GPU i's
//   stream copying its pinned memory into GPU (i + 1) mod N's memory (a put of gpj's senders).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

// Whether GPUs 0..n-1 exist (at least `least` of them asked for), else says so.
bool have_gpus(const char* flag, int n, int least) {
  int have = 0;
  CHECK(cudaGetDeviceCount(&have));
  if (n >= least && n <= have) return true;
  std::fprintf(stderr, "p2p_bandwidth: %s %d needs that many GPUs (this machine has %d)\n", flag, n, have);
  return false;
}

// Peer access among GPUs 0..n-1 wherever the hardware allows it.
void enable_peer_access(int n) {
  for (int i = 0; i < n; ++i) {
    CHECK(cudaSetDevice(i));
    for (int j = 0; j < n; ++j) {
      int can = 0;
      if (j == i) continue;
      CHECK(cudaDeviceCanAccessPeer(&can, i, j));
      if (can) {
        cudaError_t e = cudaDeviceEnablePeerAccess(j, 0);
        if (e != cudaErrorPeerAccessAlreadyEnabled) CHECK(e);
        cudaGetLastError();
      }
    }
  }
}

// Seconds of the best of 5 repeats after a warm-up, by the host's clock (events of different GPUs
// cannot be compared), from the first issue to the last end: every GPU idle, then issue(), then
// wait() for its copies.
template <class Issue, class Wait>
double best_of_five(int n, Issue issue, Wait wait) {
  double best = 1e30;
  for (int rep = 0; rep < 6; ++rep) {
    for (int i = 0; i < n; ++i) {
      CHECK(cudaSetDevice(i));
      CHECK(cudaDeviceSynchronize());
    }
    const auto t0 = std::chrono::steady_clock::now();
    issue();
    wait();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s);
  }
  return best;
}

// GPUs 0..n-1 copying to each other at once, every copy its own stream on its source GPU.
int peers(int n) {
  if (!have_gpus("--peers", n, 2)) return 1;
  const size_t bytes = size_t(1) << 30;
  std::vector<void*> src(size_t(n) * n, nullptr), dst(size_t(n) * n, nullptr);
  std::vector<cudaStream_t> st(size_t(n) * n);
  enable_peer_access(n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      if (i == j) continue;
      const size_t k = size_t(i) * n + j;  // i -> j
      CHECK(cudaSetDevice(j));
      CHECK(cudaMalloc(&dst[k], bytes));
      CHECK(cudaSetDevice(i));
      CHECK(cudaMalloc(&src[k], bytes));
      CHECK(cudaMemset(src[k], i + 1, bytes));
      CHECK(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
    }
  // The copies (i -> j) for which pick(i, j) holds, all at once (issuing 12 copies takes tens of
  // microseconds against milliseconds of copying).
  auto run = [&](auto pick) {
    return best_of_five(
        n,
        [&] {
          for (int i = 0; i < n; ++i)
            for (int j = 0; j < n; ++j)
              if (i != j && pick(i, j)) {
                const size_t k = size_t(i) * n + j;
                CHECK(cudaSetDevice(i));
                CHECK(cudaMemcpyPeerAsync(dst[k], j, src[k], i, bytes, st[k]));
              }
        },
        [&] {
          for (int i = 0; i < n; ++i)
            for (int j = 0; j < n; ++j)
              if (i != j && pick(i, j)) CHECK(cudaStreamSynchronize(st[size_t(i) * n + j]));
        });
  };
  const double fan_out = double(n - 1) * bytes / run([](int i, int) { return i == 0; }) / 1e9;
  const double fan_in = double(n - 1) * bytes / run([](int, int j) { return j == 0; }) / 1e9;
  const double all = double(n - 1) * bytes / run([](int, int) { return true; }) / 1e9;
  std::printf("%d,%.1f,%.1f,%.1f\n", n, fan_out, fan_in, all);
  return 0;
}

// GPUs 0..n-1 copying to and from pinned host memory at once.
int host(int n) {
  if (!have_gpus("--host", n, 1)) return 1;
  const size_t bytes = size_t(1) << 30;
  const size_t gpus = static_cast<size_t>(n);
  std::vector<void*> pin_in(gpus), pin_out(gpus), dev_in(gpus), dev_out(gpus);
  std::vector<cudaStream_t> up(gpus), down(gpus);
  enable_peer_access(n);
  for (int i = 0; i < n; ++i) {
    CHECK(cudaSetDevice(i));
    CHECK(cudaMallocHost(&pin_in[size_t(i)], bytes));
    CHECK(cudaMallocHost(&pin_out[size_t(i)], bytes));
    std::fill_n(static_cast<char*>(pin_in[size_t(i)]), bytes, char(i + 1));
    std::fill_n(static_cast<char*>(pin_out[size_t(i)]), bytes, char(0));
    CHECK(cudaMalloc(&dev_in[size_t(i)], bytes));
    CHECK(cudaMalloc(&dev_out[size_t(i)], bytes));
    CHECK(cudaMemset(dev_out[size_t(i)], i + 1, bytes));
    CHECK(cudaStreamCreateWithFlags(&up[size_t(i)], cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&down[size_t(i)], cudaStreamNonBlocking));
  }
  // GB/s of issue(i) on every GPU at once (1 GiB per GPU each way it copies).
  auto run = [&](auto issue) {
    const double s = best_of_five(
        n,
        [&] {
          for (int i = 0; i < n; ++i) {
            CHECK(cudaSetDevice(i));
            issue(i);
          }
        },
        [&] {
          for (int i = 0; i < n; ++i) {
            CHECK(cudaStreamSynchronize(up[size_t(i)]));
            CHECK(cudaStreamSynchronize(down[size_t(i)]));
          }
        });
    return double(n) * bytes / s / 1e9;
  };
  auto h2d = [&](int i) {
    CHECK(cudaMemcpyAsync(dev_in[size_t(i)], pin_in[size_t(i)], bytes, cudaMemcpyHostToDevice, up[size_t(i)]));
  };
  auto d2h = [&](int i) {
    CHECK(cudaMemcpyAsync(pin_out[size_t(i)], dev_out[size_t(i)], bytes, cudaMemcpyDeviceToHost, down[size_t(i)]));
  };
  const double in = run(h2d), out = run(d2h), both = run([&](int i) { h2d(i), d2h(i); });
  const double put = run([&](int i) {
    CHECK(cudaMemcpyAsync(dev_in[size_t((i + 1) % n)], pin_in[size_t(i)], bytes, cudaMemcpyDefault, up[size_t(i)]));
  });
  std::printf("host,%d,%.1f,%.1f,%.1f,%.1f\n", n, in, out, both, put);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "--peers") return peers(std::atoi(argv[2]));
  if (argc > 2 && std::string(argv[1]) == "--host") return host(std::atoi(argv[2]));
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
