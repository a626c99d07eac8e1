// Another library's compressor, run by `joinlab bench-codec --peer NAME` on the same columns and
// GPU as CompressOp/DecompressOp. Peers stay outside the core: a build option links one in
// (experiments/codec: nvcomp, -DJOINLAB_NVCOMP) and core/builtin.cpp registers it here.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/exec/codec.hpp"

namespace joinlab {

// One column, as bench-codec hands it to a peer (after its own round trip passed).
struct CodecPeerColumn {
  std::string name;                    // for messages: "tpch_orders", ...
  const void* device_keys = nullptr;   // on the GPU current on the calling thread, idle
  const void* host_keys = nullptr;     // the same bytes on the host: the round trip's reference
  uint64_t rows = 0;
  uint8_t key_bytes = 8;               // 4 or 8, unsigned
  std::vector<uint64_t> bounds;        // buffer b is rows [bounds[b], bounds[b + 1])
  std::vector<codec::Config> configs;  // the selector's layers for each buffer
  uint64_t chunk_bytes = 65536;        // a peer that cuts each buffer into chunks: their size
  int repeat = 1;                      // timings: the best of this many runs
};

// One configuration of the peer on one column. The peer checks every round trip itself
// (decompressed == host_keys) and throws RuntimeError on a difference, before any number.
struct CodecPeerRun {
  std::string options;  // the configuration, in words
  std::string refused;  // non-empty: the library rejected this configuration (no numbers)
  uint64_t compressed_bytes = 0;
  double compress_s = 0, decompress_s = 0;  // launch to result on the host, best of repeat
};

struct CodecPeer {
  std::string name;
  std::function<std::string()> description;  // version and settings, above its table (asked when it runs)
  std::function<std::vector<CodecPeerRun>(const CodecPeerColumn&)> run;
};

// Peers bench-codec knows by name, built into this binary or not.
const std::vector<std::string>& known_codec_peers();
void register_codec_peer(CodecPeer peer);
const CodecPeer* find_codec_peer(const std::string& name);  // null where this build has none

}  // namespace joinlab
