// nvcomp's cascaded codec (low-level batched C API, nvcomp 6) as a bench-codec peer
// (models/codec_peer.hpp). Each of bench-codec's buffers is cut into chunks of
// CodecPeerColumn::chunk_bytes (nvcomp's advice: 64 KiB) that never cross a buffer's end, so a
// buffer decompresses alone as in our format. Configurations, each on the whole column:
//   default          nvcomp's default options (asymmetric, every encoding, level 3), our width
//   matched          asymmetric with the encodings of the selector's layers (RLE if it picked
//                    RLE, delta if delta; frame of reference always, as our bit-packing does)
//   matched symm.    the same encodings in nvcomp's symmetric mode
// Buffers whose layers differ are compressed in one batch per distinct configuration.
// Timings as ours (launch to result on the host, best of repeat): compression includes reading
// the chunks' compressed sizes back; the output stays in per-chunk slots (nvcomp does not pack
// it), and the ratio counts the chunks' bytes, not the 8-byte size a reader needs per chunk.
#include <cuda_runtime.h>
#include <nvcomp.h>
#include <nvcomp/cascaded.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <sstream>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "models/codec_peer.hpp"

namespace joinlab {

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string("nvcomp peer: ") + what + ": " + cudaGetErrorString(e));
}

template <class T>
struct DeviceArray {  // device memory, freed on scope exit
  T* p = nullptr;
  explicit DeviceArray(size_t n) { check_cuda(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(p); }
};

struct StreamGuard {
  cudaStream_t s = nullptr;
  StreamGuard() { check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~StreamGuard() { cudaStreamDestroy(s); }
};

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// One nvcomp configuration per buffer (compression options; decompression gets their common part).
struct Variant {
  std::string name;
  std::function<nvcompBatchedCascadedCompressOpts_t(codec::Config)> opts;
};

std::string encodings(uint64_t flags) {
  std::string s;
  if (flags & NVCOMP_CASCADED_FINE_GRAINED_ENCODING_RLE) s += "rle+";
  if (flags & NVCOMP_CASCADED_FINE_GRAINED_ENCODING_DELTA) s += "delta+";
  if (flags & NVCOMP_CASCADED_FINE_GRAINED_ENCODING_FOR) s += "FOR+";
  return s.empty() ? "none" : s.substr(0, s.size() - 1);
}

// The encodings of our layers. nvcomp's options name encodings, not their order: delta first and
// delta last get the same flags.
nvcompBatchedCascadedCompressOpts_t matched(codec::Config c, nvcompType_t type, nvcompCascadedMode_t mode) {
  nvcompBatchedCascadedCompressOpts_t o = nvcompBatchedCascadedCompressDefaultOpts;
  o.common_opts.data_type = type;
  o.common_opts.mode = mode;
  o.fine_grained_encoding_flags = NVCOMP_CASCADED_FINE_GRAINED_ENCODING_FOR;
  if (c.rle) o.fine_grained_encoding_flags |= NVCOMP_CASCADED_FINE_GRAINED_ENCODING_RLE;
  if (c.delta) o.fine_grained_encoding_flags |= NVCOMP_CASCADED_FINE_GRAINED_ENCODING_DELTA;
  return o;
}

bool same(const nvcompBatchedCascadedCompressOpts_t& a, const nvcompBatchedCascadedCompressOpts_t& b) {
  return std::memcmp(&a, &b, sizeof(a)) == 0;
}

// A host call's status: "" when it succeeded, otherwise what nvcomp says.
std::string refusal(nvcompStatus_t s, const char* call) {
  return s == nvcompSuccess ? "" : std::string(call) + ": " + nvcompGetStatusString(s);
}

// The column's chunks: where each one's input starts and how long it is; the group of buffers
// with the same options holds a contiguous range of chunks.
struct Chunks {
  std::vector<uint64_t> offset, bytes;  // into the (staged) input, bytes
  std::vector<size_t> buffer;           // the buffer each chunk belongs to
};

Chunks cut(const CodecPeerColumn& col, uint64_t align, uint64_t* staged_bytes, bool* staged) {
  Chunks ch;
  const uint64_t kb = col.key_bytes;
  *staged = false;
  for (size_t b = 0; b + 1 < col.bounds.size(); ++b)
    if ((reinterpret_cast<uintptr_t>(col.device_keys) + col.bounds[b] * kb) % align != 0) *staged = true;
  uint64_t at = 0;  // staged: each buffer copied to an aligned offset
  for (size_t b = 0; b + 1 < col.bounds.size(); ++b) {
    const uint64_t begin = col.bounds[b] * kb, len = (col.bounds[b + 1] - col.bounds[b]) * kb;
    const uint64_t base = *staged ? at : begin;
    for (uint64_t o = 0; o < len; o += col.chunk_bytes) {
      ch.offset.push_back(base + o);
      ch.bytes.push_back(std::min(col.chunk_bytes, len - o));
      ch.buffer.push_back(b);
    }
    at = round_up(at + len, align);
  }
  *staged_bytes = at;
  return ch;
}

// One variant on one column: compress and decompress `repeat` times, then the round trip checked.
CodecPeerRun run_variant(const CodecPeerColumn& col, const Variant& v, cudaStream_t stream) {
  CodecPeerRun run;
  run.options = v.name;
  const size_t buffers = col.bounds.size() - 1;
  // Buffers grouped by their options, each group one batch (in buffer order within it).
  std::vector<nvcompBatchedCascadedCompressOpts_t> group_opts;
  std::vector<size_t> group_of(buffers);
  for (size_t b = 0; b < buffers; ++b) {
    const nvcompBatchedCascadedCompressOpts_t o = v.opts(col.configs[b]);
    size_t g = 0;
    while (g < group_opts.size() && !same(group_opts[g], o)) ++g;
    if (g == group_opts.size()) group_opts.push_back(o);
    group_of[b] = g;
  }
  uint64_t in_align = 8, out_align = 8, max_out = 0;
  for (const auto& o : group_opts) {
    nvcompAlignmentRequirements_t a{};
    if (!(run.refused = refusal(nvcompBatchedCascadedCompressGetRequiredAlignments(o, &a), "alignments")).empty())
      return run;
    in_align = std::max<uint64_t>(in_align, a.input);
    out_align = std::max<uint64_t>(out_align, a.output);
    size_t m = 0;
    if (!(run.refused = refusal(nvcompBatchedCascadedCompressGetMaxOutputChunkSize(col.chunk_bytes, o, &m),
                                "max output chunk size"))
             .empty())
      return run;
    max_out = std::max<uint64_t>(max_out, m);
  }
  if (col.chunk_bytes % in_align != 0)
    throw InputError("nvcomp peer: --peer-chunk must be a multiple of " + std::to_string(in_align) +
                     " (nvcomp's input alignment)");
  uint64_t staged_bytes = 0;
  bool staged = false;
  const Chunks ch = cut(col, in_align, &staged_bytes, &staged);
  const size_t n = ch.offset.size();
  // Chunks in group order: group g's chunks are [first[g], first[g + 1]).
  std::vector<size_t> order, first(group_opts.size() + 1, 0);
  for (size_t g = 0; g < group_opts.size(); ++g) {
    first[g] = order.size();
    for (size_t i = 0; i < n; ++i)
      if (group_of[ch.buffer[i]] == g) order.push_back(i);
  }
  first[group_opts.size()] = n;

  const uint64_t slot = round_up(max_out, std::max<uint64_t>(out_align, 256));
  const uint64_t raw = col.rows * col.key_bytes;
  std::unique_ptr<DeviceArray<uint8_t>> stage;
  const uint8_t* input = static_cast<const uint8_t*>(col.device_keys);
  if (staged) {  // not every buffer starts at nvcomp's input alignment: an aligned copy, untimed
    stage = std::make_unique<DeviceArray<uint8_t>>(staged_bytes);
    uint64_t at = 0;
    for (size_t b = 0; b < buffers; ++b) {
      const uint64_t len = (col.bounds[b + 1] - col.bounds[b]) * col.key_bytes;
      check_cuda(cudaMemcpy(stage->p + at, input + col.bounds[b] * col.key_bytes, len, cudaMemcpyDeviceToDevice),
                 "staging copy");
      at = round_up(at + len, in_align);
    }
    input = stage->p;
  }
  const uint64_t back_bytes = std::max<uint64_t>(staged_bytes, raw);
  DeviceArray<uint8_t> packed(n * slot), back(back_bytes);
  std::vector<const void*> h_in(n);
  std::vector<void*> h_out(n), h_back(n);
  std::vector<size_t> h_bytes(n);
  for (size_t k = 0; k < n; ++k) {
    const size_t i = order[k];
    h_in[k] = input + ch.offset[i];
    h_out[k] = packed.p + k * slot;
    h_back[k] = back.p + ch.offset[i];
    h_bytes[k] = ch.bytes[i];
  }
  DeviceArray<const void*> d_in(n);
  DeviceArray<void*> d_out(n), d_back(n);
  DeviceArray<size_t> d_bytes(n), d_packed_bytes(n), d_back_bytes(n);
  DeviceArray<nvcompStatus_t> d_status(n);
  check_cuda(cudaMemcpy(d_in.p, h_in.data(), n * sizeof(void*), cudaMemcpyHostToDevice), "copy");
  check_cuda(cudaMemcpy(d_out.p, h_out.data(), n * sizeof(void*), cudaMemcpyHostToDevice), "copy");
  check_cuda(cudaMemcpy(d_back.p, h_back.data(), n * sizeof(void*), cudaMemcpyHostToDevice), "copy");
  check_cuda(cudaMemcpy(d_bytes.p, h_bytes.data(), n * sizeof(size_t), cudaMemcpyHostToDevice), "copy");
  std::vector<size_t> h_packed(n), h_back_bytes(n);
  std::vector<nvcompStatus_t> h_status(n);
  auto statuses_ok = [&](const char* what) {
    check_cuda(cudaMemcpy(h_status.data(), d_status.p, n * sizeof(nvcompStatus_t), cudaMemcpyDeviceToHost), "copy");
    for (size_t k = 0; k < n; ++k)
      if (h_status[k] != nvcompSuccess)
        throw RuntimeError("nvcomp peer: " + col.name + ", " + v.name + ": " + what + " of chunk " +
                           std::to_string(order[k]) + " (buffer " + std::to_string(ch.buffer[order[k]]) +
                           ") failed: " + nvcompGetStatusString(h_status[k]));
  };
  auto seconds_since = [](std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  run.compress_s = run.decompress_s = 1e30;
  for (int r = 0; r < std::max(col.repeat, 1); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t g = 0; g < group_opts.size(); ++g) {
      const size_t f = first[g], m = first[g + 1] - f;
      if (m == 0) continue;  // a group of empty buffers
      run.refused = refusal(nvcompBatchedCascadedCompressAsync(d_in.p + f, d_bytes.p + f, col.chunk_bytes, m, nullptr,
                                                               0, d_out.p + f, d_packed_bytes.p + f, group_opts[g],
                                                               d_status.p + f, stream),
                            "compress");
      if (!run.refused.empty()) return run;
    }
    check_cuda(cudaMemcpyAsync(h_packed.data(), d_packed_bytes.p, n * sizeof(size_t), cudaMemcpyDeviceToHost, stream),
               "copy");
    check_cuda(cudaStreamSynchronize(stream), "compress");
    run.compress_s = std::min(run.compress_s, seconds_since(t0));
  }
  statuses_ok("compression");
  run.compressed_bytes = 0;
  for (size_t k = 0; k < n; ++k) run.compressed_bytes += h_packed[k];

  for (int r = 0; r < std::max(col.repeat, 1); ++r) {
    check_cuda(cudaMemsetAsync(back.p, 0, back_bytes, stream), "memset");  // a stale result cannot pass the check
    check_cuda(cudaStreamSynchronize(stream), "memset");
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t g = 0; g < group_opts.size(); ++g) {
      const size_t f = first[g], m = first[g + 1] - f;
      if (m == 0) continue;
      nvcompBatchedCascadedDecompressOpts_t d = nvcompBatchedCascadedDecompressDefaultOpts;
      d.common_opts = group_opts[g].common_opts;  // what was compressed: nvcomp launches only what it needs
      run.refused = refusal(nvcompBatchedCascadedDecompressAsync(d_out.p + f, d_packed_bytes.p + f, d_bytes.p + f,
                                                                 d_back_bytes.p + f, m, nullptr, 0, d_back.p + f, d,
                                                                 d_status.p + f, stream),
                            "decompress");
      if (!run.refused.empty()) return run;
    }
    check_cuda(cudaStreamSynchronize(stream), "decompress");
    run.decompress_s = std::min(run.decompress_s, seconds_since(t0));
  }
  statuses_ok("decompression");
  check_cuda(cudaMemcpy(h_back_bytes.data(), d_back_bytes.p, n * sizeof(size_t), cudaMemcpyDeviceToHost), "copy");
  for (size_t k = 0; k < n; ++k)
    if (h_back_bytes[k] != h_bytes[k])
      throw RuntimeError("nvcomp peer: " + col.name + ", " + v.name + ": chunk " + std::to_string(order[k]) +
                         " decompressed to " + std::to_string(h_back_bytes[k]) + " bytes, not " +
                         std::to_string(h_bytes[k]));
  // The round trip, buffer by buffer against the host's copy of the column.
  std::vector<uint8_t> host(back_bytes);
  check_cuda(cudaMemcpy(host.data(), back.p, host.size(), cudaMemcpyDeviceToHost), "copy");
  const auto* want = static_cast<const uint8_t*>(col.host_keys);
  uint64_t at = 0;
  for (size_t b = 0; b < buffers; ++b) {
    const uint64_t begin = col.bounds[b] * col.key_bytes, len = (col.bounds[b + 1] - col.bounds[b]) * col.key_bytes;
    const uint64_t from = staged ? at : begin;
    if (std::memcmp(host.data() + from, want + begin, len) != 0)
      throw RuntimeError("nvcomp peer: " + col.name + ", " + v.name + ": buffer " + std::to_string(b) +
                         " decompressed differs from the original");
    at = round_up(at + len, in_align);
  }
  return run;
}

std::vector<CodecPeerRun> run_nvcomp(const CodecPeerColumn& col) {
  if (col.key_bytes != 4 && col.key_bytes != 8) throw InputError("nvcomp peer: keys of 4 or 8 bytes");
  if (col.chunk_bytes > nvcompCascadedCompressionMaxAllowedChunkSize)
    throw InputError("nvcomp peer: --peer-chunk must be at most " +
                     std::to_string(nvcompCascadedCompressionMaxAllowedChunkSize) + " bytes");
  if (col.chunk_bytes % col.key_bytes != 0) throw InputError("nvcomp peer: --peer-chunk must be a multiple of the key");
  const nvcompType_t type = col.key_bytes == 8 ? NVCOMP_TYPE_ULONGLONG : NVCOMP_TYPE_UINT;
  // The encodings the matched variants use on this column (buffers may differ; named when alike).
  std::map<std::string, int> names;
  for (codec::Config c : col.configs)
    ++names[encodings(matched(c, type, NVCOMP_CASCADED_MODE_ASYMMETRIC).fine_grained_encoding_flags)];
  const std::string picked = names.size() == 1 ? names.begin()->first : "selector's, per buffer";
  const std::vector<Variant> variants = {
      {"default",
       [type](codec::Config) {
         nvcompBatchedCascadedCompressOpts_t o = nvcompBatchedCascadedCompressDefaultOpts;
         o.common_opts.data_type = type;  // the default is 4-byte values
         return o;
       }},
      {"matched " + picked, [type](codec::Config c) { return matched(c, type, NVCOMP_CASCADED_MODE_ASYMMETRIC); }},
      {"matched symmetric " + picked,
       [type](codec::Config c) { return matched(c, type, NVCOMP_CASCADED_MODE_SYMMETRIC); }},
  };
  StreamGuard stream;
  std::vector<CodecPeerRun> runs;
  for (const Variant& v : variants) runs.push_back(run_variant(col, v, stream.s));
  return runs;
}

std::string nvcomp_description() {
  nvcompProperties_t p{};
  std::ostringstream o;
  o << "nvcomp ";
  if (nvcompGetProperties(&p) == nvcompSuccess)
    o << p.version / 1000 << "." << p.version % 1000 / 100 << "." << p.version % 100;
  else
    o << NVCOMP_VER_MAJOR << "." << NVCOMP_VER_MINOR << "." << NVCOMP_VER_PATCH << " (headers)";
  o << " cascaded, batched C API, chunks of --peer-chunk bytes within each buffer";
  return o.str();
}

}  // namespace

void register_nvcomp_peer() { register_codec_peer({"nvcomp", nvcomp_description, run_nvcomp}); }

}  // namespace joinlab
