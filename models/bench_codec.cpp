// joinlab bench-codec: the cascaded compression operators (CompressOp, DecompressOp) on one rank
// of a backend, per kind of key column: compression ratio and GB/s of the raw bytes, compress and
// decompress. A column is cut into buffers (the partitions a rank sends), each buffer's layers
// chosen by the selector (codec_select, on the host, from a copy of the column); the round trip
// is checked byte for byte. Timings: the best of --repeat runs of the operator (launch to result).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>

#include "core/builtin.hpp"
#include "core/common/error.hpp"
#include "core/exec/backend.hpp"
#include "core/experiment/cli.hpp"
#include "core/experiment/environment.hpp"
#include "core/workload/generate.hpp"
#include "kernels/cpu/codec.hpp"
#include "models/calibrate.hpp"

namespace joinlab {

namespace {

struct BenchCodecOptions {
  std::vector<std::string> backends;
  double sf = 10;
  uint64_t rows = 0;  // uniform and sorted columns: 0 = as many as TPC-H orders at sf
  uint8_t key_bytes = 8;
  uint64_t buffers = 64;
  int repeat = 3;
};

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

// One column on one rank: generated (and sorted), compressed, decompressed, checked.
void bench_column(Rank& rank, const std::string& kind, const RelationSpec& spec, const RelationSpec* ref, bool sort,
                  const BenchCodecOptions& opt) {
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
    ++picked[std::to_string(c.configs.back().rle) + "rle+" + std::to_string(c.configs.back().delta) + "delta"];
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
}

int bench_codec_main(const std::vector<std::string>& args) {
  BenchCodecOptions opt;
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
    else throw InputError("bench-codec: unknown option " + args[i]);
  }
  if (opt.key_bytes != 4 && opt.key_bytes != 8) throw InputError("bench-codec: --key-bytes must be 4 or 8");
  if (opt.buffers == 0 || opt.buffers > (uint64_t(1) << 20)) throw InputError("bench-codec: --buffers must be 1..2^20");
  if (opt.sf <= 0) throw InputError("bench-codec: --sf must be positive");
  if (opt.backends.empty()) opt.backends = {"cpu", "cuda"};
  register_builtin();
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
  for (const std::string& name : opt.backends) {
    auto backend = make_backend(name);
    if (const std::string why = backend->unavailable(); !why.empty()) {
      std::cout << name << ": skipped (" << why << ")\n";
      continue;
    }
    BackendConfig cfg;
    cfg.shape = {1, 1};
    backend->run(
        cfg,
        [&](Rank& rank) {
          bench_column(rank, "tpch_orders", orders, nullptr, false, opt);
          bench_column(rank, "tpch_lineitem", lineitem, &orders, false, opt);
          bench_column(rank, "uniform", uniform, nullptr, false, opt);
          bench_column(rank, "sorted", sorted, nullptr, true, opt);
        },
        [](Rank&) {});
  }
  return kExitOk;
}

}  // namespace

void register_codec_bench() {
  register_command("bench-codec",
                   "joinlab bench-codec [--backend cpu|cuda]... [--sf F] [--rows N] [--key-bytes 4|8] [--buffers B]\n"
                   "                                     [--repeat R]   cascaded compression per key column: ratio, "
                   "compress and decompress GB/s",
                   bench_codec_main);
}

}  // namespace joinlab
