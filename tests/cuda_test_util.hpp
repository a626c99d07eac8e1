// Helpers of the GPU tests: skipping visibly without a GPU, running one body on a backend, moving
// bytes in and results back through the Rank interface only (so the same body runs on cpu and cuda).
#pragma once
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/builtin.hpp"
#include "core/exec/backend.hpp"

namespace joinlab::test {

inline bool have_gpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  if (!ok) cudaGetLastError();
  return ok;
}

// CI has no GPU: say so on stdout (ctest -V and the test log show it) and skip.
#define JL_REQUIRE_GPU()                                                 \
  do {                                                                   \
    if (!::joinlab::test::have_gpu()) {                                  \
      std::printf("skipped: no GPU (cudaGetDeviceCount found none)\n");  \
      GTEST_SKIP() << "skipped: no GPU";                                 \
    }                                                                    \
  } while (0)

// Runs body(rank) on `backend` with `ranks` ranks; returns what rank 0's body returned.
template <class Body>
std::vector<uint64_t> on_backend(const std::string& backend, Body body, int ranks = 1,
                                 std::map<std::string, std::string> options = {}, uint64_t device_memory = 0) {
  register_builtin();
  auto b = make_backend(backend);
  BackendConfig cfg;
  cfg.shape = {1, ranks};
  cfg.options = std::move(options);
  cfg.device_memory = device_memory;
  std::vector<uint64_t> out;
  std::mutex mu;
  b->run(
      cfg,
      [&](Rank& r) {
        std::vector<uint64_t> v = body(r);
        std::lock_guard<std::mutex> g(mu);
        if (r.id() == 0) out = v;
      },
      [](Rank&) {});
  return out;
}

// Copies `bytes` of a buffer into host memory and returns them as 64-bit words (widened).
inline std::vector<uint64_t> read_back(Rank& rank, const Buffer& b, uint64_t elems, uint32_t width, uint64_t offset = 0) {
  Buffer h = rank.alloc(MemSpace::Pinned, std::max<uint64_t>(elems * width, 8), "test.readback");
  if (elems) rank.copy(Stream{0}, h, 0, b, offset * width, elems * width);
  rank.sync(Stream{0});
  std::vector<uint64_t> v(elems);
  for (uint64_t i = 0; i < elems; ++i)
    v[i] = width == 4 ? static_cast<const uint32_t*>(h->ptr)[i] : static_cast<const uint64_t*>(h->ptr)[i];
  return v;
}

// Bytes into a buffer of the rank's device memory (through pinned memory).
inline Buffer upload_bytes(Rank& rank, const std::vector<uint8_t>& bytes, const std::string& tag) {
  const uint64_t n = std::max<uint64_t>(bytes.size(), 8);
  Buffer h = rank.alloc(MemSpace::Pinned, n, tag + ".host");
  std::memcpy(h->ptr, bytes.data(), bytes.size());
  Buffer d = rank.alloc(MemSpace::Device, n, tag);
  if (!bytes.empty()) rank.copy(Stream{0}, d, 0, h, 0, bytes.size());
  rank.sync(Stream{0});
  return d;
}

// Bytes of huge pages (AnonHugePages in /proc/self/smaps) in the mapping that holds `p`.
inline uint64_t huge_page_bytes(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      std::istringstream in(line.substr(14));
      uint64_t kb = 0;
      in >> kb;
      return kb << 10;
    }
  }
  return 0;
}

}  // namespace joinlab::test
