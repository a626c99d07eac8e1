// Cascaded compression of integer columns (gao2021 section 4): the byte format, written once for
// the CPU kernels (kernels/cpu/codec.cpp) and the CUDA kernels (kernels/cuda/codec.cu), which
// produce the same bytes for the same input and configuration.
//
// A batch is a sequence of buffers (columns of 4- or 8-byte unsigned integers, e.g. the
// partitions a rank sends), each compressed on its own and decompressible alone. CompressOp lays
// the buffers' streams out back to back, in order, each starting at a multiple of 8 bytes; its
// result gives each buffer's byte offset in the batch.
//
// A buffer's stream (all fields little-endian, every part a multiple of 8 bytes):
//   BufferHeader (32 bytes): magic "JLCC", version 2, value_bytes (4 or 8), rle layers R (0..2),
//     delta (0: no delta layer; 1: delta after the RLE layers; 2: delta before them), chunk_log2
//     (chunks hold 2^chunk_log2 values, 10..16), chunks (= ceil(rows / 2^chunk_log2)), rows, bytes
//     (the whole stream, header included). Version 1 is version 2 without delta = 2: decoders read
//     both (a version 1 header with delta = 2 is kBadConfig).
//   chunk offsets: chunks + 1 uint64, chunk c = bytes [off[c], off[c + 1]) of the stream;
//     off[0] = 32 + 8 (chunks + 1), off[chunks] = bytes
//   chunks, each compressed independently (a GPU thread block per chunk):
//     ChunkHeader (16 bytes): rows (n0, the chunk's values), streams (= R + 1), first (with delta
//       in either order the chunk's first value x[0], else 0)
//     StreamHeader (16 bytes) per stream: count, bits (0..8 value_bytes), base (the FOR minimum)
//     payloads, stream after stream: ceil(count * bits / 64) uint64 words each
//
// The layers, on a chunk's n0 values x (arithmetic modulo 2^(8 value_bytes)), in one of two
// orders, frame of reference + bit-packing last in both:
//   delta last (header delta 0 or 1): RLE layers 1..R on x, then delta (D = 1) on the last
//     layer's values (on x without RLE);
//   delta first (header delta 2): delta on x, then RLE layers 1..R on its n0 - 1 differences.
//     Keys with regular steps become few runs of steps (TPC-H o_orderkey: steps 1 x 7, 25, ...).
//  * RLE layer k (k = 1..R) replaces its input (n_{k-1} values; n_0 = n0, or n0 - 1 with delta
//    first) by the values of its runs of equal values (n_k values, the next layer's input) and the
//    run lengths (n_k values, stored as stream k - 1). Figure 5d's "2 RLE + 1 delta" is R = 2,
//    delta 1: the second RLE runs on the first's values.
//  * Delta replaces its input v[0..m) by first = v[0] (in the chunk header) and the m - 1
//    differences v[i] - v[i - 1]. Delta last: v = the last RLE layer's values (x without RLE), the
//    values stream has m - 1 = n_R - 1 entries. Delta first: v = x, m = n0.
//  * Frame of reference + bit-packing, on every stored stream (the R run-length streams and the
//    values stream, always last): base = the minimum, bits = the bit width of max - min, entry j
//    stored as (y_j - base) in bits [j * bits, (j + 1) * bits) of the payload's words (LSB first;
//    an entry may straddle two words). Minimum and maximum compare unsigned, except in the values
//    stream with delta in either order (differences, or with delta first the values of the
//    differences' runs), where they compare as two's-complement signed values of the width (a
//    descending step is a small negative difference, not a huge positive one). Run lengths are
//    always unsigned.
// Streams are stored in the order run lengths of layer 1, ..., of layer R, values. Their counts
// (check_chunk): layer k's run lengths 1..n_{k-1} (0 when its input is empty: delta first on a
// chunk of one value); the values n_R - 1 with delta last, n_R without delta or with delta first.
#pragma once
#include <cstdint>

#include "core/common/hd.hpp"

namespace joinlab::codec {

constexpr uint32_t kMagic = 0x43434C4Au;  // bytes "JLCC"
constexpr uint8_t kVersion = 2;  // decoders also read version 1
constexpr uint32_t kMinChunkLog2 = 10, kMaxChunkLog2 = 16, kDefaultChunkLog2 = 12;
constexpr uint32_t kMaxRle = 2, kMaxDelta = 1;

struct Config {  // layers applied to every chunk of one buffer
  uint8_t rle = 0, delta = 0;
  uint8_t delta_first = 0;  // 1: delta before the RLE layers (needs delta = 1)
};
JL_HD bool operator==(Config a, Config b) {
  return a.rle == b.rle && a.delta == b.delta && a.delta_first == b.delta_first;
}
JL_HD bool valid(Config c) { return c.rle <= kMaxRle && c.delta <= kMaxDelta && c.delta_first <= c.delta; }

struct BufferHeader {
  uint32_t magic;
  uint8_t version, value_bytes, rle, delta;
  uint32_t chunk_log2, chunks;
  uint64_t rows, bytes;
};
struct ChunkHeader {
  uint32_t rows, streams;
  uint64_t first;
};
struct StreamHeader {
  uint32_t count, bits;
  uint64_t base;
};
static_assert(sizeof(BufferHeader) == 32 && sizeof(ChunkHeader) == 16 && sizeof(StreamHeader) == 16,
              "the format's headers are fixed-size");

JL_HD uint64_t chunk_count(uint64_t rows, uint32_t chunk_log2) {
  return (rows + (uint64_t(1) << chunk_log2) - 1) >> chunk_log2;
}
JL_HD uint32_t chunk_rows(uint64_t rows, uint32_t chunk_log2, uint64_t c) {  // values of chunk c
  const uint64_t first = c << chunk_log2, per = uint64_t(1) << chunk_log2;
  return uint32_t(rows - first < per ? rows - first : per);
}
// The header's delta byte for a configuration, and the configuration a (checked) header gives.
JL_HD uint8_t delta_code(Config c) { return c.delta ? uint8_t(1 + c.delta_first) : 0; }
JL_HD Config header_config(const BufferHeader& h) { return {h.rle, uint8_t(h.delta != 0), uint8_t(h.delta == 2)}; }
// Bytes before a buffer's first chunk: its header and chunk offsets.
JL_HD uint64_t preamble_bytes(uint64_t chunks) { return sizeof(BufferHeader) + 8 * (chunks + 1); }
JL_HD uint64_t chunk_header_bytes(Config c) { return sizeof(ChunkHeader) + sizeof(StreamHeader) * (c.rle + 1u); }
JL_HD uint64_t payload_words(uint64_t count, uint32_t bits) { return (count * bits + 63) / 64; }
// The most bytes a buffer of `rows` values can take (every stream at full width): what a batch's
// output must hold before its sizes are known.
JL_HD uint64_t buffer_bound(uint64_t rows, uint32_t value_bytes, Config c, uint32_t chunk_log2) {
  const uint64_t chunks = chunk_count(rows, chunk_log2);
  return preamble_bytes(chunks) + chunks * chunk_header_bytes(c) + (c.rle + 1u) * (rows * value_bytes + 8 * chunks);
}

JL_HD uint64_t width_mask(uint32_t value_bytes) { return value_bytes == 8 ? ~uint64_t(0) : 0xFFFFFFFFull; }
// Order key of a stream entry: unsigned, or (delta streams) signed moved onto unsigned order.
JL_HD uint64_t order_key(uint64_t y, uint32_t value_bytes, bool is_signed) {
  const uint64_t top = value_bytes == 8 ? uint64_t(1) << 63 : uint64_t(1) << 31;
  return is_signed ? y ^ top : y;
}
JL_HD uint32_t bit_width(uint64_t range) {
  uint32_t b = 0;
  while (b < 64 && (range >> b) != 0) ++b;
  return b;
}
// Entry j of a packed stream (value - base); bits in 1..64.
JL_HD uint64_t unpack(const uint64_t* words, uint64_t j, uint32_t bits) {
  const uint64_t bit = j * bits, w = bit >> 6;
  const uint32_t sh = uint32_t(bit & 63);
  uint64_t v = words[w] >> sh;
  if (sh + bits > 64) v |= words[w + 1] << (64 - sh);
  return bits == 64 ? v : v & ((uint64_t(1) << bits) - 1);
}
// Payload word w of a stream of `count` entries e(j) (already minus base): what a thread that
// owns word w writes, so words are written whole (no atomics, the same on CPU and GPU).
template <class Entry>
JL_HD uint64_t pack_word(uint64_t w, uint64_t count, uint32_t bits, Entry&& e) {
  const uint64_t lo = w * 64, hi = lo + 64;
  uint64_t j = lo / bits, word = 0;
  for (; j < count && j * bits < hi; ++j) {
    const uint64_t bit = j * bits;
    const uint64_t v = e(j);
    if (bit >= lo) word |= v << (bit - lo);
    else word |= v >> (lo - bit);  // the tail of an entry that began in the previous word
  }
  return word;
}

// --- what a decoder checks, and how it names what is wrong --------------------------------
// Codes are the same on CPU and CUDA; error_message() (host) turns (code, buffer, chunk, detail)
// into the text both backends throw.
enum Error : uint32_t {
  kOk = 0,
  kTruncated,      // the buffer's bytes end before its header, offsets or a chunk's headers
  kBadMagic,       // detail: the magic found
  kBadVersion,     // detail: the version found
  kBadWidth,       // detail: value_bytes found
  kBadConfig,      // detail: rle << 8 | delta (the header's byte)
  kBadChunkSize,   // detail: chunk_log2
  kBadChunkCount,  // detail: chunks in the header
  kBadSize,        // detail: bytes in the header (differs from the buffer's size in the batch)
  kNoRoom,         // detail: rows in the header (more than the output holds)
  kBadOffsets,     // chunk: the offset that is out of order or range; detail: its value
  kBadChunkRows,   // detail: rows in the chunk header
  kBadStreams,     // detail: streams in the chunk header
  kBadBits,        // detail: stream << 8 | bits
  kBadCount,       // detail: stream << 32 | count
  kBadPayload,     // detail: the bytes the headers describe (differ from the chunk's bytes)
  kBadRuns,        // detail: the layer whose run lengths are 0 or do not add up to its input
  kUnsupported,    // detail: chunk_log2 (valid, larger than the CUDA kernels take)
};

// Checks a buffer header against the bytes the batch gives the buffer, the width expected and
// the rows the output holds. Returns an Error, *detail set as the enum says.
JL_HD uint32_t check_buffer_header(const BufferHeader& h, uint64_t bytes, uint32_t value_bytes, uint64_t capacity,
                                   uint64_t* detail) {
  if (h.magic != kMagic) return *detail = h.magic, kBadMagic;
  if (h.version < 1 || h.version > kVersion) return *detail = h.version, kBadVersion;
  if (h.value_bytes != value_bytes) return *detail = h.value_bytes, kBadWidth;
  if (h.rle > kMaxRle || h.delta > (h.version == 1 ? 1 : 2)) return *detail = uint64_t(h.rle) << 8 | h.delta, kBadConfig;
  if (h.chunk_log2 < kMinChunkLog2 || h.chunk_log2 > kMaxChunkLog2) return *detail = h.chunk_log2, kBadChunkSize;
  if (h.rows >> 48 || h.chunks != chunk_count(h.rows, h.chunk_log2)) return *detail = h.chunks, kBadChunkCount;
  if (h.bytes != bytes) return *detail = h.bytes, kBadSize;
  if (h.rows > capacity) return *detail = h.rows, kNoRoom;
  if (preamble_bytes(h.chunks) > bytes) return *detail = bytes, kTruncated;
  return kOk;
}
// Chunk c's bytes [begin, end) = [off[c], off[c + 1]) of a buffer with a checked header: in
// order, aligned, inside the buffer, the first right after the preamble, the last ending it.
JL_HD uint32_t check_chunk_bounds(const BufferHeader& h, uint64_t c, uint64_t begin, uint64_t end, uint64_t* detail) {
  if ((c == 0 && begin != preamble_bytes(h.chunks)) || begin < preamble_bytes(h.chunks) || (begin & 7))
    return *detail = begin, kBadOffsets;
  if (end < begin + sizeof(ChunkHeader) || end > h.bytes || (end & 7) || (c + 1 == h.chunks && end != h.bytes))
    return *detail = end, kBadOffsets;
  return kOk;
}
// Checks a chunk's headers (the chunk is `bytes` long, past its offset check): stream counts and
// widths consistent with the configuration, payloads filling the chunk exactly.
JL_HD uint32_t check_chunk(const BufferHeader& h, const ChunkHeader& ch, const StreamHeader* s, uint64_t n0,
                           uint64_t bytes, uint64_t* detail) {
  const Config cfg = header_config(h);
  if (ch.rows != n0) return *detail = ch.rows, kBadChunkRows;
  if (ch.streams != cfg.rle + 1u) return *detail = ch.streams, kBadStreams;
  if (bytes < chunk_header_bytes(cfg)) return *detail = bytes, kTruncated;
  uint64_t prev = n0 - cfg.delta_first, words = 0;  // n0 >= 1: a chunk holds a value
  for (uint32_t k = 0; k <= cfg.rle; ++k) {
    const bool values = k == cfg.rle;
    if (s[k].bits > 8u * h.value_bytes) return *detail = uint64_t(k) << 8 | s[k].bits, kBadBits;
    // A layer's runs: 1..n_{k-1} of them (none of an empty input); the values: as many as the
    // last layer's runs (less one with delta last), or the first layer's input without RLE.
    const uint64_t m = values ? uint64_t(s[k].count) + (cfg.delta - cfg.delta_first) : s[k].count;
    const bool ok = values ? m == prev : (m <= prev && (m > 0) == (prev > 0));
    if (!ok) return *detail = uint64_t(k) << 32 | s[k].count, kBadCount;
    prev = m;
    words += payload_words(s[k].count, s[k].bits);
  }
  if (chunk_header_bytes(cfg) + 8 * words != bytes) return *detail = chunk_header_bytes(cfg) + 8 * words, kBadPayload;
  return kOk;
}

}  // namespace joinlab::codec
