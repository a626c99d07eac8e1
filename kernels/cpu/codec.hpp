// Cascaded compression on the CPU (format: core/exec/codec.hpp): compression and decompression of
// a batch of buffers, OpenMP over chunks, and the selector that picks each buffer's layers from a
// sample. These are the reference the CUDA kernels must match byte for byte.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/exec/codec.hpp"

namespace joinlab::cpu {

struct CodecIn {  // one buffer to compress: rows values of the batch's width
  const void* data = nullptr;
  uint64_t rows = 0;
  codec::Config config;
};
struct CodecOut {  // room for one buffer's decompressed values
  void* data = nullptr;
  uint64_t capacity = 0;  // values
};

// Compresses each buffer into its stream, back to back from out[0]: returns the n + 1 byte offsets
// of the streams (the last = bytes written). out may be null: only the offsets. Throws
// std::invalid_argument (a bad width, configuration or chunk size, out_bytes too small).
std::vector<uint64_t> codec_compress(const std::vector<CodecIn>& in, uint32_t value_bytes, uint32_t chunk_log2,
                                     uint8_t* out, uint64_t out_bytes, int threads);
// Decompresses buffer b from bytes [offsets[b], offsets[b + 1]) of `in` into out[b]: returns the
// rows of each. Every header, offset, count and run is checked before it is used; the first
// error found throws std::invalid_argument naming the buffer (and chunk) and what is wrong.
std::vector<uint64_t> codec_decompress(const uint8_t* in, const std::vector<uint64_t>& offsets, uint32_t value_bytes,
                                       const std::vector<CodecOut>& out, int threads);
// The text of a decoder's error (codec::Error), the same for CPU and CUDA.
std::string codec_error_message(uint32_t code, uint64_t buffer, uint64_t chunk, uint64_t detail);

// The configuration (R in 0..2, D in 0..1, delta before or after the RLE layers) with the fewest
// compressed bytes on a sample of the column: 4 windows of 1024 consecutive values spread evenly
// over it (the whole column when it is no longer), each compressed as a chunk of its own (runs and
// steps are local: windows joined into one chunk would add a jump at every seam). Ties go to fewer
// layers, then to delta last. *ratio, if given, receives the sample's uncompressed / compressed
// bytes under the chosen configuration.
// The windows codec_select samples from a column of `rows` values: (first row, rows) each.
std::vector<std::pair<uint64_t, uint64_t>> codec_sample_windows(uint64_t rows);
codec::Config codec_select(const void* data, uint64_t rows, uint32_t value_bytes, double* ratio = nullptr);
// The same on windows of values already sampled (e.g. the simulator's sample of a content).
codec::Config codec_select_windows(const std::vector<std::vector<uint64_t>>& windows, uint32_t value_bytes,
                                   double* ratio = nullptr);

}  // namespace joinlab::cpu
