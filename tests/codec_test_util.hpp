// Columns for the cascaded compression tests (CPU and CUDA): every key distribution of the
// workload generator, and the shapes the selector must tell apart (runs, sorted keys).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/workload/generate.hpp"
#include "kernels/cpu/codec.hpp"
#include "tests/test_workloads.hpp"

namespace joinlab::test {

struct CodecColumnKind {
  std::string name;
  std::vector<uint64_t> (*make)(uint64_t rows, uint8_t key_bytes);
};

// Keys of rows [0, rows) of a generated relation (its referenced relation for foreign keys).
inline std::vector<uint64_t> generated_keys(const RelationSpec& spec, const RelationSpec* ref, uint64_t rows) {
  const KeyGen g = make_keygen(spec, ref);
  std::vector<uint64_t> k;
  k.reserve(rows);
  g.for_each_key(0, std::min(rows, spec.rows), [&](uint64_t, uint64_t key) { k.push_back(key); });
  return k;
}
inline RelationSpec key_spec(KeyDist d, uint64_t rows, uint8_t kb) {
  RelationSpec s = one_column_relation("S", rows, d, kb, 4);
  s.seed = 11;
  return s;
}


// A TPC-H scale factor giving at least `rows` rows at `rows_per_sf` rows per unit, in steps of
// 0.01: dbgen's 1,500,000 x scale factor orders must be a whole number.
inline double tpch_scale_for(uint64_t rows, double rows_per_sf) {
  return std::max(1.0, std::ceil(double(rows) / rows_per_sf * 100)) / 100;
}

inline std::vector<CodecColumnKind> codec_column_kinds() {
  return {
      {"uniform",
       [](uint64_t n, uint8_t kb) {
         RelationSpec s = key_spec(KeyDist::Uniform, n, kb);
         s.range_lo = 1;
         s.range_hi = uint64_t(1) << 20;
         return generated_keys(s, nullptr, n);
       }},
      {"dense_unique", [](uint64_t n, uint8_t kb) { return generated_keys(key_spec(KeyDist::UniqueDense, n, kb), nullptr, n); }},
      {"sparse_unique", [](uint64_t n, uint8_t kb) { return generated_keys(key_spec(KeyDist::UniqueSparse, n, kb), nullptr, n); }},
      {"zipf",
       [](uint64_t n, uint8_t kb) {
         RelationSpec s = key_spec(KeyDist::Zipf, n, kb);
         s.zipf_z = 1.0;
         return generated_keys(s, nullptr, n);
       }},
      {"fk",
       [](uint64_t n, uint8_t kb) {
         const Workload w = pk_fk(std::max<uint64_t>(n / 4, 1), n, kb, 0.8);
         return generated_keys(w.s, &w.r, n);
       }},
      {"tpch_orders",
       [](uint64_t n, uint8_t kb) {
         const Workload w = tpch(tpch_scale_for(n, 1.5e6), kb);
         return generated_keys(w.r, nullptr, n);
       }},
      {"tpch_lineitem",
       [](uint64_t n, uint8_t kb) {
         const Workload w = tpch(tpch_scale_for(n, 6e6), kb);
         return generated_keys(w.s, &w.r, n);
       }},
      {"sorted",
       [](uint64_t n, uint8_t kb) {
         std::vector<uint64_t> k = generated_keys(key_spec(KeyDist::UniqueDense, n, kb), nullptr, n);
         std::sort(k.begin(), k.end());
         return k;
       }},
      {"runs",  // random values, each repeated 20 to 59 times
       [](uint64_t n, uint8_t kb) {
         std::vector<uint64_t> k;
         for (uint64_t i = 0; k.size() < n; ++i)
           k.insert(k.end(), std::min<uint64_t>(20 + mix64(i) % 40, n - k.size()), mix64(i + 7) >> (kb == 4 ? 33 : 1));
         return k;
       }},
  };
}

// Values in the batch's width (what CompressOp reads).
inline std::vector<uint8_t> narrow(const std::vector<uint64_t>& v, uint8_t width) {
  std::vector<uint8_t> b(v.size() * width);
  for (size_t i = 0; i < v.size(); ++i) {
    if (width == 4) {
      const uint32_t x = uint32_t(v[i]);
      std::memcpy(b.data() + 4 * i, &x, 4);
    } else {
      std::memcpy(b.data() + 8 * i, &v[i], 8);
    }
  }
  return b;
}

// Both orders, delta first also without RLE (the format allows it; the selector never picks it).
inline std::vector<codec::Config> all_codec_configs() {
  std::vector<codec::Config> c;
  for (uint8_t r = 0; r <= codec::kMaxRle; ++r)
    for (uint8_t d = 0; d <= codec::kMaxDelta; ++d)
      for (uint8_t f = 0; f <= d; ++f) c.push_back({r, d, f});
  return c;
}

struct CodecBatch {
  std::vector<uint8_t> raw;  // the columns back to back, in the batch's width
  std::vector<uint64_t> rows;
  std::vector<codec::Config> configs;
};
// Every column kind at sizes around the chunk edges (and many small buffers), every configuration
// (delta first and last).
inline CodecBatch codec_batch(uint8_t vb) {
  CodecBatch b;
  const auto cfgs = all_codec_configs();
  size_t i = 0;
  for (const auto& kind : codec_column_kinds())
    for (uint64_t n : {uint64_t(0), uint64_t(1), uint64_t(3), uint64_t(4095), uint64_t(4096), uint64_t(4097),
                       uint64_t(50000)})
      for (size_t c = 0; c < cfgs.size(); ++c, ++i) {
        const std::vector<uint64_t> v = kind.make(n + i % 5, vb);
        const std::vector<uint8_t> bytes = narrow(v, vb);
        b.raw.insert(b.raw.end(), bytes.begin(), bytes.end());
        b.rows.push_back(v.size());
        b.configs.push_back(cfgs[c]);
      }
  return b;
}

}  // namespace joinlab::test
