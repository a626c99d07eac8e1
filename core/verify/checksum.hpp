// The order-independent digest of a join result: the wrapping sum over output rows of a
// per-row hash of (key, R payload columns..., S payload columns...). Written once for the CPU
// and CUDA checksum kernels and the closed-form expectation.
#pragma once
#include <cstdint>

#include "core/common/hd.hpp"

namespace joinlab {

JL_HD uint64_t digest_begin(uint64_t key) { return mix64(key ^ 0x6a09e667f3bcc908ULL); }
JL_HD uint64_t digest_add(uint64_t h, uint64_t value, int column) {
  return mix64(h + mix64(value + 0x9e3779b97f4a7c15ULL * uint64_t(column + 1)));
}

// Digest of one output row with one R and one S payload column (the common case).
JL_HD uint64_t row_digest(uint64_t key, uint64_t r_value, uint64_t s_value) {
  return digest_add(digest_add(digest_begin(key), r_value, 0), s_value, 1);
}

}  // namespace joinlab
