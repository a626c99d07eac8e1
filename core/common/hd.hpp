// Host/device portability: every function that both the CPU kernels and the CUDA kernels call
// (hashing, key generation, checksums) is written once, in headers, with JL_HD.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define JL_HD __host__ __device__ __forceinline__
#else
#define JL_HD inline
#endif

namespace joinlab {

// splitmix64 finalizer: a bijection on 64-bit words with good avalanche. Used as the
// counter-based RNG (value = mix(seed, stream, index)), so any row can be generated alone.
JL_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
// Inverse of mix64 (used to invert sparse unique keys in closed-form verification).
JL_HD uint64_t unmix64(uint64_t z) {
  z = z ^ (z >> 31) ^ (z >> 62);
  z *= 0x319642b2d24d8ec3ULL;
  z = z ^ (z >> 27) ^ (z >> 54);
  z *= 0x96de1b173f119089ULL;
  z = z ^ (z >> 30) ^ (z >> 60);
  return z;
}
// 32-bit bijective mixer (lowbias32 by C. Wellons) and its inverse.
JL_HD uint32_t mix32(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
  return x;
}
JL_HD uint32_t unmix32(uint32_t x) {
  x ^= x >> 16; x *= 0x43021123U; x ^= x >> 15 ^ x >> 30; x *= 0x1d69e2a5U; x ^= x >> 16;
  return x;
}

// Counter-based random word for (seed, stream, index).
JL_HD uint64_t random_word(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(seed ^ mix64(stream * 0x9e3779b97f4a7c15ULL ^ mix64(index + 0x632be59bd9b4e019ULL)));
}
// Uniform double in [0, 1) from 53 random bits.
JL_HD double unit_double(uint64_t w) { return double(w >> 11) * (1.0 / 9007199254740992.0); }

// MurmurHash3 64-bit finalizer, the partitioning hash of gao2021.
JL_HD uint64_t murmur3_fmix64(uint64_t k) {
  k ^= k >> 33; k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}
JL_HD uint32_t murmur3_fmix32(uint32_t h) {
  h ^= h >> 16; h *= 0x85ebca6bU; h ^= h >> 13; h *= 0xc2b2ae35U; h ^= h >> 16;
  return h;
}

}  // namespace joinlab
