// Non-temporal (streaming) stores: writes of whole cache lines that bypass the caches, for
// outputs larger than the caches. They save the read-for-ownership a normal store costs (a
// third of a scatter's memory traffic) and leave the caches to the data still being read.
#pragma once
#include <emmintrin.h>

#include <cstdint>
#include <cstring>

namespace joinlab::cpu {

// Outputs at least this large are written with streaming stores: they would not stay cached.
constexpr uint64_t kStreamingBytes = 8ULL << 20;

// Copies `bytes` (a multiple of 16) from 16-byte aligned src to 16-byte aligned dst.
template <bool kStream>
inline void store_bytes(void* dst, const void* src, uint32_t bytes) {
  if constexpr (kStream) {
    auto* d = static_cast<__m128i*>(dst);
    auto* s = static_cast<const __m128i*>(src);
    for (uint32_t i = 0; i < bytes / 16; ++i) _mm_stream_si128(d + i, _mm_load_si128(s + i));
  } else {
    std::memcpy(dst, src, bytes);
  }
}

// memcpy whose 64-byte aligned middle part of dst is written with streaming stores (call
// _mm_sfence() before others read dst).
inline void stream_copy(void* dst, const void* src, uint64_t bytes) {
  auto* d = static_cast<char*>(dst);
  auto* s = static_cast<const char*>(src);
  const uint64_t head = std::min<uint64_t>(bytes, (64 - reinterpret_cast<uintptr_t>(d) % 64) % 64);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const uint64_t lines = bytes / 64;
  for (uint64_t i = 0; i < lines * 4; ++i)
    _mm_stream_si128(reinterpret_cast<__m128i*>(d) + i, _mm_loadu_si128(reinterpret_cast<const __m128i*>(s) + i));
  std::memcpy(d + lines * 64, s + lines * 64, bytes - lines * 64);
}

}  // namespace joinlab::cpu
