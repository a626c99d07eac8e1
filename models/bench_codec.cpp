// joinlab bench-codec: the cascaded compression operators (CompressOp, DecompressOp) on one rank
// of a backend, per kind of key column: compression ratio and GB/s of the raw bytes, compress and
// decompress. A column is cut into buffers (the partitions a rank sends), each buffer's layers
// chosen by the selector (codec_select, on the host, from a copy of the column); the round trip
// is checked byte for byte. Timings: the best of --repeat runs of the operator (launch to result).
// --peer NAME runs another library's codec (models/codec_peer.hpp) on the same columns on the GPU
// and prints its ratio and GB/s beside ours.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/exec/backend.hpp"
#include "core/experiment/cli.hpp"
#include "core/experiment/environment.hpp"
#include "core/workload/generate.hpp"
#include "kernels/cpu/codec.hpp"
#include "models/calibrate.hpp"
#include "models/codec_peer.hpp"

namespace joinlab {

const std::vector<std::string>& known_codec_peers() {
  static const std::vector<std::string> names = {"nvcomp"};
  return names;
}

namespace {

std::vector<CodecPeer>& codec_peers() {
  static std::vector<CodecPeer> peers;
  return peers;
}

}  // namespace

void register_codec_peer(CodecPeer peer) {
  for (CodecPeer& p : codec_peers())
    if (p.name == peer.name) {
      p = std::move(peer);
      return;
    }
  codec_peers().push_back(std::move(peer));
}

const CodecPeer* find_codec_peer(const std::string& name) {
  for (const CodecPeer& p : codec_peers())
    if (p.name == name) return &p;
  return nullptr;
}

namespace {

struct BenchCodecOptions {
  std::vector<std::string> backends;
  double sf = 10;
  uint64_t rows = 0;  // uniform and sorted columns: 0 = as many as TPC-H orders at sf
  uint8_t key_bytes = 8;
  uint64_t buffers = 64;
  int repeat = 3;
  std::vector<const CodecPeer*> peers;  // built into this binary and asked for
  uint64_t peer_chunk = 65536;
};

// Ours on one column: what a peer's lines compare with.
struct ColumnResult {
  double ratio = 0, compress_gbs = 0, decompress_gbs = 0;
};

// One line of a peer's table: its configuration on a column next to ours, and ours / its speed.
std::string peer_line(const std::string& column, const CodecPeerRun& run, double raw, const ColumnResult& ours) {
  std::ostringstream o;
  o << std::left << std::setw(15) << column << std::setw(34) << run.options << std::right << std::fixed
    << std::setprecision(2);
  if (!run.refused.empty()) {
    o << "  refused: " << run.refused;
    return o.str();
  }
  const double comp = raw / run.compress_s / 1e9, dec = raw / run.decompress_s / 1e9;
  o << std::setw(8) << raw / double(run.compressed_bytes) << std::setw(11) << comp << std::setw(11) << dec
    << std::setw(8) << ours.ratio << std::setw(11) << ours.compress_gbs << std::setw(11) << ours.decompress_gbs
    << std::setw(8) << ours.compress_gbs / comp << std::setw(8) << ours.decompress_gbs / dec;
  return o.str();
}

// A configuration's layers in the order they run: "1rle+1delta", "1delta+1rle" (delta first).
std::string layers_name(codec::Config c) {
  const std::string rle = std::to_string(c.rle) + "rle", delta = std::to_string(c.delta) + "delta";
  return c.delta_first ? delta + "+" + rle : rle + "+" + delta;
}

template <class Op>
double best_seconds(Rank& rank, const Op& op, int repeat, OpResult* result) {
  double best = 1e30;
  for (int r = 0; r < std::max(repeat, 1); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    *result = rank.launch(Stream{0}, op).get();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// One column on one rank: generated (and sorted), compressed, decompressed, checked; on a GPU
// rank the peers then run on the same column and their lines go to `peer_lines` (by peer).
void bench_column(Rank& rank, const std::string& kind, const RelationSpec& spec, const RelationSpec* ref, bool sort,
                  const BenchCodecOptions& opt, std::vector<std::vector<std::string>>& peer_lines) {
  const uint8_t kb = spec.key_bytes;
  const uint64_t n = spec.rows;
  const TupleFormat fmt{kb, kb};
  Tuples t = rank.alloc_tuples(MemSpace::Device, n, fmt, "bench.column");
  GenerateOp g;
  g.spec = spec;
  g.referenced = ref;
  g.out = t;
  rank.launch(Stream{0}, g).get();
  if (sort) {
    Tuples sorted = rank.alloc_tuples(MemSpace::Device, n, fmt, "bench.sorted");
    rank.launch(Stream{0}, SortOp{t, sorted, SortAlgo::Radix}).get();
    t = sorted;
  }
  Buffer host = rank.alloc(MemSpace::Pinned, n * kb, "bench.host");
  rank.copy(Stream{0}, host, 0, t.keys, 0, n * kb);
  rank.sync(Stream{0});
  const std::vector<uint64_t> bounds = chunk_bounds(n, uint32_t(opt.buffers));
  CompressOp c;
  c.value_bytes = kb;
  std::map<std::string, int> picked;
  for (uint64_t b = 0; b < opt.buffers; ++b) {
    const uint64_t rows = bounds[b + 1] - bounds[b];
    c.in.push_back({t.keys, bounds[b], rows});
    c.configs.push_back(cpu::codec_select(data_of<uint8_t>(host, bounds[b] * kb), rows, kb));
    ++picked[layers_name(c.configs.back())];
  }
  c.out = rank.alloc(MemSpace::Device, compress_bound(c), "bench.compressed");
  OpResult packed;
  const double tc = best_seconds(rank, c, opt.repeat, &packed);
  DecompressOp d;
  d.in = c.out;
  d.offsets = packed.values;
  d.value_bytes = kb;
  Buffer back = rank.alloc(MemSpace::Device, n * kb, "bench.decompressed");
  for (uint64_t b = 0; b < opt.buffers; ++b) d.out.push_back({back, bounds[b], bounds[b + 1] - bounds[b]});
  OpResult rows;
  const double td = best_seconds(rank, d, opt.repeat, &rows);
  Buffer check = rank.alloc(MemSpace::Pinned, n * kb, "bench.check");
  rank.copy(Stream{0}, check, 0, back, 0, n * kb);
  rank.sync(Stream{0});
  if (rows.count != n || std::memcmp(check->ptr, host->ptr, n * kb) != 0)
    throw RuntimeError("bench-codec: " + kind + ": the decompressed column differs from the original");
  const double raw = double(n) * kb;
  std::string layers;
  for (auto& [name, count] : picked) layers += (layers.empty() ? "" : ",") + name + "x" + std::to_string(count);
  std::cout << std::left << std::setw(6) << rank.backend() << std::setw(15) << kind << std::right << std::setw(12) << n
            << std::setw(8) << std::fixed << std::setprecision(2) << raw / double(packed.count) << std::setw(11)
            << raw / tc / 1e9 << std::setw(11) << raw / td / 1e9 << "  " << layers << "\n";
  if (rank.backend() != "cuda" || opt.peers.empty()) return;
  const ColumnResult ours{raw / double(packed.count), raw / tc / 1e9, raw / td / 1e9};
  CodecPeerColumn col;
  col.name = kind;
  col.device_keys = data_of<uint8_t>(t.keys, t.offset * kb);
  col.host_keys = host->ptr;
  col.rows = n;
  col.key_bytes = kb;
  col.bounds = bounds;
  col.configs = c.configs;
  col.chunk_bytes = opt.peer_chunk;
  col.repeat = opt.repeat;
  peer_lines.resize(opt.peers.size());
  for (size_t p = 0; p < opt.peers.size(); ++p)
    for (const CodecPeerRun& run : opt.peers[p]->run(col)) peer_lines[p].push_back(peer_line(kind, run, raw, ours));
}

int bench_codec_main(const std::vector<std::string>& args) {
  BenchCodecOptions opt;
  std::vector<std::string> peer_names;
  for (size_t i = 0; i < args.size(); ++i) {
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw InputError("bench-codec: " + args[i] + " needs a value");
      return args[++i];
    };
    if (args[i] == "--backend") opt.backends.push_back(value());
    else if (args[i] == "--sf") opt.sf = std::stod(value());
    else if (args[i] == "--rows") opt.rows = std::stoull(value());
    else if (args[i] == "--key-bytes") opt.key_bytes = uint8_t(std::stoul(value()));
    else if (args[i] == "--buffers") opt.buffers = std::stoull(value());
    else if (args[i] == "--repeat") opt.repeat = std::stoi(value());
    else if (args[i] == "--peer") peer_names.push_back(value());
    else if (args[i] == "--peer-chunk") opt.peer_chunk = std::stoull(value());
    else throw InputError("bench-codec: unknown option " + args[i]);
  }
  if (opt.peer_chunk == 0 || opt.peer_chunk % 8 != 0) throw InputError("bench-codec: --peer-chunk must be a positive multiple of 8");
  if (opt.key_bytes != 4 && opt.key_bytes != 8) throw InputError("bench-codec: --key-bytes must be 4 or 8");
  if (opt.buffers == 0 || opt.buffers > (uint64_t(1) << 20)) throw InputError("bench-codec: --buffers must be 1..2^20");
  if (opt.sf <= 0) throw InputError("bench-codec: --sf must be positive");
  if (opt.backends.empty()) opt.backends = {"cpu", "cuda"};
  register_builtin();
  std::vector<std::string> not_built;
  for (const std::string& name : peer_names) {
    const auto& known = known_codec_peers();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      throw InputError("bench-codec: unknown peer " + name + " (known: " + list + ")");
    }
    if (const CodecPeer* p = find_codec_peer(name)) opt.peers.push_back(p);
    else not_built.push_back(name);
  }
  RelationSpec orders = one_column_relation("R", 0, KeyDist::TpchOrders, opt.key_bytes, opt.key_bytes);
  orders.scale_factor = opt.sf;
  orders.rows = tpch_rows(orders);
  RelationSpec lineitem = one_column_relation("S", 0, KeyDist::TpchLineitem, opt.key_bytes, opt.key_bytes);
  lineitem.scale_factor = opt.sf;
  lineitem.rows = tpch_rows(lineitem);
  const uint64_t rows = opt.rows ? opt.rows : orders.rows;
  RelationSpec uniform = one_column_relation("S", rows, KeyDist::Uniform, opt.key_bytes, opt.key_bytes);
  uniform.range_lo = 1;
  uniform.range_hi = opt.key_bytes == 4 ? 0xFFFFFFF0ull : (uint64_t(1) << 62);
  const RelationSpec sorted = one_column_relation("R", rows, KeyDist::UniqueDense, opt.key_bytes, opt.key_bytes);
  std::cout << "bench-codec: TPC-H sf " << opt.sf << ", " << int(opt.key_bytes) << "-byte keys, " << opt.buffers
            << " buffers a column, best of " << opt.repeat << "\n"
            << "machine: " << host_cpu_model() << (gpu_model().empty() ? "" : ", " + gpu_model()) << "; commit "
            << git_commit() << "\n"
            << std::left << std::setw(6) << "where" << std::setw(15) << "column" << std::right << std::setw(12)
            << "rows" << std::setw(8) << "ratio" << std::setw(11) << "comp GB/s" << std::setw(11) << "dec GB/s"
            << "  layers (selector's picks x buffers)\n";
  for (const std::string& name : not_built)
    std::cout << "peer " << name << ": not built (configure with -DJOINLAB_NVCOMP=ON after pip install "
              << "nvidia-libnvcomp-cu13; docs/benchmarks.md)\n";
  if (!opt.peers.empty() && std::find(opt.backends.begin(), opt.backends.end(), "cuda") == opt.backends.end())
    std::cout << "peers: they run on the GPU, with --backend cuda only\n";
  for (const std::string& name : opt.backends) {
    auto backend = make_backend(name);
    if (const std::string why = backend->unavailable(); !why.empty()) {
      std::cout << name << ": skipped (" << why << ")\n";
      continue;
    }
    BackendConfig cfg;
    cfg.shape = {1, 1};
    std::vector<std::vector<std::string>> peer_lines;
    backend->run(
        cfg,
        [&](Rank& rank) {
          bench_column(rank, "tpch_orders", orders, nullptr, false, opt, peer_lines);
          bench_column(rank, "tpch_lineitem", lineitem, &orders, false, opt, peer_lines);
          bench_column(rank, "uniform", uniform, nullptr, false, opt, peer_lines);
          bench_column(rank, "sorted", sorted, nullptr, true, opt, peer_lines);
        },
        [](Rank&) {});
    for (size_t p = 0; p < peer_lines.size(); ++p) {
      std::cout << "\npeer " << opt.peers[p]->name << " on the " << name << " rank's GPU: " << opt.peers[p]->description()
                << "; every round trip checked; x = ours / " << opt.peers[p]->name << " (above 1: ours faster)\n"
                << std::left << std::setw(15) << "column" << std::setw(34) << "options" << std::right << std::setw(8)
                << "ratio" << std::setw(11) << "comp GB/s" << std::setw(11) << "dec GB/s" << std::setw(8) << "ours"
                << std::setw(11) << "comp GB/s" << std::setw(11) << "dec GB/s" << std::setw(8) << "comp x"
                << std::setw(8) << "dec x" << "\n";
      for (const std::string& line : peer_lines[p]) std::cout << line << "\n";
    }
  }
  return kExitOk;
}

}  // namespace

void register_codec_bench() {
  register_command("bench-codec",
                   "joinlab bench-codec [--backend cpu|cuda]... [--sf F] [--rows N] [--key-bytes 4|8] [--buffers B]\n"
                   "                                     [--repeat R] [--peer nvcomp [--peer-chunk BYTES]]   cascaded "
                   "compression per key column: ratio, compress and decompress GB/s (--peer: another library's "
                   "codec beside ours on the GPU)",
                   bench_codec_main);
}

}  // namespace joinlab
