#include "kernels/cpu/codec.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "kernels/cpu/parallel.hpp"

namespace joinlab::cpu {

namespace {

using codec::BufferHeader;
using codec::ChunkHeader;
using codec::Config;
using codec::StreamHeader;

void check_args(uint32_t value_bytes, uint32_t chunk_log2, const char* op) {
  if (value_bytes != 4 && value_bytes != 8)
    throw std::invalid_argument(std::string(op) + ": value width " + std::to_string(value_bytes) + " bytes: must be 4 or 8");
  if (chunk_log2 < codec::kMinChunkLog2 || chunk_log2 > codec::kMaxChunkLog2)
    throw std::invalid_argument(std::string(op) + ": chunk_log2 = " + std::to_string(chunk_log2) + " outside [" +
                                std::to_string(codec::kMinChunkLog2) + ", " + std::to_string(codec::kMaxChunkLog2) + "]");
}

uint64_t load(const void* p, uint32_t vb, uint64_t i) {
  return vb == 8 ? static_cast<const uint64_t*>(p)[i] : static_cast<const uint32_t*>(p)[i];
}

// One chunk's layers, sequentially (the CPU parallelizes over chunks).
struct ChunkCoder {
  std::vector<uint64_t> a, b, runs[codec::kMaxRle];

  // Encodes n values of x (from element `first`); writes the chunk to dst when not null.
  // Returns its bytes.
  uint64_t encode(const void* x, uint64_t first, uint32_t n, uint32_t vb, Config c, uint8_t* dst) {
    const uint64_t mask = codec::width_mask(vb);
    a.resize(n);
    for (uint32_t i = 0; i < n; ++i) a[i] = load(x, vb, first + i);
    ChunkHeader ch{n, c.rle + 1u, 0};
    auto delta = [&] {  // a's first value to the header, the rest by their differences
      ch.first = a[0];
      for (size_t i = a.size() - 1; i >= 1; --i) a[i] = (a[i] - a[i - 1]) & mask;
      a.erase(a.begin());
    };
    if (c.delta_first) delta();
    for (uint32_t k = 0; k < c.rle; ++k) {  // runs of equal values: values in b, lengths in runs[k]
      b.clear();
      runs[k].clear();
      for (size_t i = 0; i < a.size();) {
        size_t j = i + 1;
        while (j < a.size() && a[j] == a[i]) ++j;
        b.push_back(a[i]);
        runs[k].push_back(j - i);
        i = j;
      }
      std::swap(a, b);
    }
    if (c.delta && !c.delta_first) delta();
    uint64_t bytes = codec::chunk_header_bytes(c);
    uint64_t* words = dst ? reinterpret_cast<uint64_t*>(dst + bytes) : nullptr;
    if (dst) std::memcpy(dst, &ch, sizeof ch);
    for (uint32_t k = 0; k <= c.rle; ++k) {
      const bool values = k == c.rle;
      const uint64_t* y = values ? a.data() : runs[k].data();
      const uint64_t count = values ? a.size() : runs[k].size();
      StreamHeader sh{uint32_t(count), 0, 0};
      if (count) {
        const bool sgn = values && c.delta;  // differences, or (delta first) their runs' values
        uint64_t lo = y[0], hi = y[0];
        for (uint64_t j = 1; j < count; ++j) {
          const uint64_t key = codec::order_key(y[j], vb, sgn);
          if (key < codec::order_key(lo, vb, sgn)) lo = y[j];
          if (key > codec::order_key(hi, vb, sgn)) hi = y[j];
        }
        sh.base = lo;
        sh.bits = codec::bit_width((hi - lo) & mask);
      }
      const uint64_t nw = codec::payload_words(count, sh.bits);
      if (dst) {
        std::memcpy(dst + sizeof(ChunkHeader) + k * sizeof(StreamHeader), &sh, sizeof sh);
        for (uint64_t w = 0; w < nw; ++w)
          words[w] = codec::pack_word(w, count, sh.bits, [&](uint64_t j) { return (y[j] - sh.base) & mask; });
        words += nw;
      }
      bytes += 8 * nw;
    }
    return bytes;
  }

  // Decodes a chunk of `bytes` (checked offsets) into n0 values at out (element `first`).
  uint32_t decode(const BufferHeader& h, const uint8_t* src, uint64_t bytes, uint32_t n0, void* out, uint64_t first,
                  uint64_t* detail) {
    const Config c = codec::header_config(h);
    const uint32_t vb = h.value_bytes;
    const uint64_t mask = codec::width_mask(vb);
    ChunkHeader ch;
    StreamHeader sh[codec::kMaxRle + 1] = {};
    std::memcpy(&ch, src, sizeof ch);
    if (ch.streams == c.rle + 1u && bytes >= codec::chunk_header_bytes(c))
      std::memcpy(sh, src + sizeof ch, sizeof(StreamHeader) * (c.rle + 1u));
    if (uint32_t e = codec::check_chunk(h, ch, sh, n0, bytes, detail)) return e;
    // Payload word offsets of each stream.
    const uint64_t* words[codec::kMaxRle + 1];
    const uint64_t* w = reinterpret_cast<const uint64_t*>(src + codec::chunk_header_bytes(c));
    for (uint32_t k = 0; k <= c.rle; ++k) words[k] = w, w += codec::payload_words(sh[k].count, sh[k].bits);
    auto entry = [&](uint32_t k, uint64_t j) {
      return sh[k].bits ? (codec::unpack(words[k], j, sh[k].bits) + sh[k].base) & mask : sh[k].base;
    };
    auto undelta = [&] {  // a[1..) holds differences: the header's first value, then running sums
      a[0] = ch.first;
      for (size_t i = 1; i < a.size(); ++i) a[i] = (a[i - 1] + a[i]) & mask;
    };
    const StreamHeader& vs = sh[c.rle];
    const bool delta_last = c.delta && !c.delta_first;
    a.resize(vs.count + delta_last);
    for (uint64_t j = 0; j < vs.count; ++j) a[j + delta_last] = entry(c.rle, j);
    if (delta_last) undelta();
    for (uint32_t k = c.rle; k-- > 0;) {  // expand layer k's runs; its input had n_{k-1} values
      const uint64_t target = k == 0 ? n0 - c.delta_first : sh[k - 1].count;
      b.clear();
      for (uint64_t j = 0; j < sh[k].count; ++j) {
        const uint64_t r = entry(k, j);
        if (r == 0 || r > target - b.size()) return *detail = k + 1, codec::kBadRuns;
        b.insert(b.end(), r, a[j]);
      }
      if (b.size() != target) return *detail = k + 1, codec::kBadRuns;
      std::swap(a, b);
    }
    if (c.delta_first) a.insert(a.begin(), 0), undelta();
    if (vb == 8) std::memcpy(static_cast<uint64_t*>(out) + first, a.data(), n0 * 8);
    else
      for (uint32_t i = 0; i < n0; ++i) static_cast<uint32_t*>(out)[first + i] = uint32_t(a[i]);
    return codec::kOk;
  }
};

struct ChunkRef {
  uint32_t buffer;
  uint64_t chunk;
};

}  // namespace

std::string codec_error_message(uint32_t code, uint64_t buffer, uint64_t chunk, uint64_t detail) {
  const std::string b = "decompress: buffer " + std::to_string(buffer) + ": ";
  const std::string c = b + "chunk " + std::to_string(chunk) + ": ";
  const std::string d = std::to_string(detail);
  switch (code) {
    case codec::kTruncated: return b + "truncated: " + d + " bytes end before its header, chunk offsets or chunk headers";
    case codec::kBadMagic: return b + "bad header: magic " + d + " is not \"JLCC\" (not a compressed buffer)";
    case codec::kBadVersion: return b + "bad header: format version " + d + ", this build reads versions 1 and 2";
    case codec::kBadWidth: return b + "bad header: values of " + d + " bytes, the operator expects another width";
    case codec::kBadConfig:
      return b + "bad header: " + std::to_string(detail >> 8) + " rle layers and delta " + std::to_string(detail & 255) +
             " (at most 2 layers; delta 0, 1 after them or 2 before them, 2 from version 2 on)";
    case codec::kBadChunkSize: return b + "bad header: chunk_log2 = " + d + " outside [10, 16]";
    case codec::kBadChunkCount: return b + "bad header: " + d + " chunks do not match its rows";
    case codec::kBadSize: return b + "wrong size: its header says " + d + " bytes, the batch gives it another size";
    case codec::kNoRoom: return b + "its " + d + " rows do not fit the output's capacity";
    case codec::kBadOffsets: return c + "chunk offset " + d + " out of order, unaligned or past the buffer";
    case codec::kBadChunkRows: return c + "header says " + d + " rows, its position in the buffer gives another count";
    case codec::kBadStreams: return c + "header says " + d + " streams, the configuration needs another number";
    case codec::kBadBits:
      return c + "stream " + std::to_string(detail >> 8) + " is packed to " + std::to_string(detail & 255) +
             " bits, wider than its values";
    case codec::kBadCount:
      return c + "stream " + std::to_string(detail >> 32) + " has " + std::to_string(detail & 0xFFFFFFFFu) +
             " entries, inconsistent with the layer before it";
    case codec::kBadPayload: return c + "truncated or wrong sizes: its stream headers describe " + d + " bytes";
    case codec::kBadRuns: return c + "run lengths of rle layer " + d + " are 0 or do not add up to the layer's input";
    case codec::kUnsupported:
      return b + "chunks of 2^" + d + " values: valid, but more than the CUDA kernels hold in shared memory";
  }
  return b + "error code " + std::to_string(code);
}

std::vector<uint64_t> codec_compress(const std::vector<CodecIn>& in, uint32_t value_bytes, uint32_t chunk_log2,
                                     uint8_t* out, uint64_t out_bytes, int threads) {
  check_args(value_bytes, chunk_log2, "compress");
  std::vector<ChunkRef> chunks;
  std::vector<uint64_t> first_chunk(in.size() + 1, 0);
  for (size_t b = 0; b < in.size(); ++b) {
    const Config c = in[b].config;
    if (!codec::valid(c))
      throw std::invalid_argument("compress: buffer " + std::to_string(b) + ": configuration rle = " +
                                  std::to_string(c.rle) + ", delta = " + std::to_string(c.delta) + ", delta first = " +
                                  std::to_string(c.delta_first) + " (at most 2, 1 and delta)");
    if (in[b].rows && !in[b].data) throw std::invalid_argument("compress: buffer " + std::to_string(b) + " has no data");
    const uint64_t n = codec::chunk_count(in[b].rows, chunk_log2);
    for (uint64_t k = 0; k < n; ++k) chunks.push_back({uint32_t(b), k});
    first_chunk[b + 1] = first_chunk[b] + n;
  }
  // Pass 1: each chunk's size; pass 2 (with out) writes it at its place.
  std::vector<uint64_t> size(chunks.size());
  const int team = team_for(chunks.size(), threads, 4);
#pragma omp parallel num_threads(team)
  {
    ChunkCoder coder;
#pragma omp for schedule(dynamic, 16)
    for (size_t i = 0; i < chunks.size(); ++i) {
      const CodecIn& x = in[chunks[i].buffer];
      const uint64_t k = chunks[i].chunk;
      size[i] = coder.encode(x.data, k << chunk_log2, codec::chunk_rows(x.rows, chunk_log2, k), value_bytes, x.config,
                             nullptr);
    }
  }
  std::vector<uint64_t> offsets(in.size() + 1, 0), chunk_at(chunks.size());
  for (size_t b = 0; b < in.size(); ++b) {
    const uint64_t n = first_chunk[b + 1] - first_chunk[b];
    uint64_t at = codec::preamble_bytes(n);
    for (uint64_t k = 0; k < n; ++k) chunk_at[first_chunk[b] + k] = at, at += size[first_chunk[b] + k];
    offsets[b + 1] = offsets[b] + at;
  }
  if (!out) return offsets;
  if (offsets.back() > out_bytes)
    throw std::invalid_argument("compress: output of " + std::to_string(out_bytes) + " bytes, the batch needs " +
                                std::to_string(offsets.back()));
  for (size_t b = 0; b < in.size(); ++b) {
    const uint64_t n = first_chunk[b + 1] - first_chunk[b];
    BufferHeader h{codec::kMagic, codec::kVersion, uint8_t(value_bytes), in[b].config.rle, codec::delta_code(in[b].config),
                   chunk_log2, uint32_t(n), in[b].rows, offsets[b + 1] - offsets[b]};
    uint8_t* dst = out + offsets[b];
    std::memcpy(dst, &h, sizeof h);
    uint64_t* off = reinterpret_cast<uint64_t*>(dst + sizeof h);
    for (uint64_t k = 0; k < n; ++k) off[k] = chunk_at[first_chunk[b] + k];
    off[n] = h.bytes;
  }
#pragma omp parallel num_threads(team)
  {
    ChunkCoder coder;
#pragma omp for schedule(dynamic, 16)
    for (size_t i = 0; i < chunks.size(); ++i) {
      const CodecIn& x = in[chunks[i].buffer];
      const uint64_t k = chunks[i].chunk;
      coder.encode(x.data, k << chunk_log2, codec::chunk_rows(x.rows, chunk_log2, k), value_bytes, x.config,
                   out + offsets[chunks[i].buffer] + chunk_at[i]);
    }
  }
  return offsets;
}

std::vector<uint64_t> codec_decompress(const uint8_t* in, const std::vector<uint64_t>& offsets, uint32_t value_bytes,
                                       const std::vector<CodecOut>& out, int threads) {
  if (value_bytes != 4 && value_bytes != 8)
    throw std::invalid_argument("decompress: value width " + std::to_string(value_bytes) + " bytes: must be 4 or 8");
  if (offsets.size() != out.size() + 1)
    throw std::invalid_argument("decompress: " + std::to_string(offsets.size()) + " offsets for " +
                                std::to_string(out.size()) + " buffers (one more than buffers needed)");
  auto fail = [](uint32_t code, uint64_t b, uint64_t c, uint64_t d) {
    throw std::invalid_argument(codec_error_message(code, b, c, d));
  };
  std::vector<BufferHeader> head(out.size());
  std::vector<ChunkRef> chunks;
  std::vector<uint64_t> rows(out.size());
  for (size_t b = 0; b < out.size(); ++b)  // every buffer's place first: a bad one is named, not its neighbour
    if (offsets[b + 1] < offsets[b] || (offsets[b] & 7))
      throw std::invalid_argument("decompress: buffer " + std::to_string(b) + ": offsets [" +
                                  std::to_string(offsets[b]) + ", " + std::to_string(offsets[b + 1]) +
                                  ") descend or start unaligned");
  for (size_t b = 0; b < out.size(); ++b) {
    const uint64_t bytes = offsets[b + 1] - offsets[b];
    if (bytes < sizeof(BufferHeader)) fail(codec::kTruncated, b, 0, bytes);
    std::memcpy(&head[b], in + offsets[b], sizeof(BufferHeader));
    uint64_t detail = 0;
    if (uint32_t e = codec::check_buffer_header(head[b], bytes, value_bytes, out[b].capacity, &detail))
      fail(e, b, 0, detail);
    if (head[b].rows && !out[b].data) throw std::invalid_argument("decompress: buffer " + std::to_string(b) + ": no output");
    rows[b] = head[b].rows;
    for (uint64_t k = 0; k < head[b].chunks; ++k) chunks.push_back({uint32_t(b), k});
  }
  struct Failure {
    uint32_t code = 0;
    uint64_t detail = 0;
  };
  std::vector<Failure> failed(chunks.size());
#pragma omp parallel num_threads(team_for(chunks.size(), threads, 4))
  {
    ChunkCoder coder;
#pragma omp for schedule(dynamic, 16)
    for (size_t i = 0; i < chunks.size(); ++i) {
      const uint32_t b = chunks[i].buffer;
      const uint64_t k = chunks[i].chunk;
      const BufferHeader& h = head[b];
      const uint8_t* base = in + offsets[b];
      uint64_t off[2];
      std::memcpy(off, base + sizeof(BufferHeader) + 8 * k, sizeof off);
      uint64_t detail = 0;
      uint32_t e = codec::check_chunk_bounds(h, k, off[0], off[1], &detail);
      if (!e)
        e = coder.decode(h, base + off[0], off[1] - off[0], codec::chunk_rows(h.rows, h.chunk_log2, k), out[b].data,
                         k << h.chunk_log2, &detail);
      failed[i] = {e, detail};
    }
  }
  for (size_t i = 0; i < chunks.size(); ++i)  // the first failing chunk in batch order
    if (failed[i].code) fail(failed[i].code, chunks[i].buffer, chunks[i].chunk, failed[i].detail);
  return rows;
}

codec::Config codec_select_windows(const std::vector<std::vector<uint64_t>>& windows, uint32_t value_bytes,
                                   double* ratio) {
  check_args(value_bytes, codec::kDefaultChunkLog2, "select");
  Config best;
  uint64_t best_bytes = ~uint64_t(0), values = 0;
  ChunkCoder coder;
  std::vector<uint64_t> x;
  for (uint8_t r = 0; r <= codec::kMaxRle; ++r)  // fewer layers first: ties keep the cheaper one
    for (uint8_t d = 0; d <= codec::kMaxDelta; ++d)
      for (uint8_t f = 0; f <= d && f <= r; ++f) {  // delta first without RLE is delta last
        const Config cfg{r, d, f};
        uint64_t bytes = 0;
        values = 0;
        for (const std::vector<uint64_t>& w : windows) {  // each window a chunk of its own
          if (w.empty()) continue;
          x = w;
          if (value_bytes == 4)  // the coder reads the width's elements
            for (size_t i = 0; i < w.size(); ++i) reinterpret_cast<uint32_t*>(x.data())[i] = uint32_t(w[i]);
          bytes += coder.encode(x.data(), 0, uint32_t(w.size()), value_bytes, cfg, nullptr);
          values += w.size();
        }
        if (values && bytes < best_bytes) best_bytes = bytes, best = cfg;
      }
  if (ratio) *ratio = values ? double(values * value_bytes) / double(best_bytes) : 1.0;
  return best;
}

std::vector<std::pair<uint64_t, uint64_t>> codec_sample_windows(uint64_t rows) {
  constexpr uint64_t kWindows = 4, kWindow = 1024;
  std::vector<std::pair<uint64_t, uint64_t>> out;
  const uint64_t k = rows <= kWindows * kWindow ? 1 : kWindows;
  for (uint64_t w = 0; w < k; ++w)
    out.push_back({k == 1 ? 0 : w * (rows - kWindow) / (k - 1), k == 1 ? rows : kWindow});
  return out;
}

codec::Config codec_select(const void* data, uint64_t rows, uint32_t value_bytes, double* ratio) {
  std::vector<std::vector<uint64_t>> windows;
  for (const auto& [first, len] : codec_sample_windows(rows)) {
    windows.emplace_back();
    for (uint64_t i = 0; i < len; ++i) windows.back().push_back(load(data, value_bytes, first + i));
  }
  return codec_select_windows(windows, value_bytes, ratio);
}

}  // namespace joinlab::cpu
