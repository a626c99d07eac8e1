// chunked: rui2017's join of tables larger than GPU memory (section 3.4). R is resident: built
// once into a hash table in device memory. S stays in pinned host memory and is streamed in
// chunks of chunk_rows on several streams: chunk i is copied on stream i % streams into a device
// staging buffer and probed there on the same stream, so the copy of one chunk overlaps the
// probe of the previous one. Each chunk's output rows are appended after the previous chunk's
// (out_first).
#include <algorithm>

#include "core/common/error.hpp"
#include "core/strategies/rank_joins.hpp"

namespace joinlab {

namespace {

void add_chunked_options(po::options_description& d) {
  add_hash_join_options(d, "direct");  // rui2017's direct output buffer
  d.add_options()("chunk_rows", int_option("chunk_rows", int64_t(1) << 22, 1, int64_t(1) << 40),
                  "S rows copied to the device and probed per chunk")(
      "streams", int_option("streams", 2, 1, 64),
      "streams the chunks rotate over (2 in rui2017: one chunk copies while the other is probed)")(
      "output_space", choice_option("output_space", {"device", "pinned"}, "device"),
      "where the output rows go: device memory, or pinned host memory (outputs larger than the GPU)");
}

struct ChunkedConfig {
  HashJoinConfig join;
  uint64_t chunk_rows = 1 << 22;
  int streams = 2;
  MemSpace output_space = MemSpace::Device;
};

ChunkedConfig chunked_config(const po::variables_map& vm) {
  ChunkedConfig c;
  c.join = hash_join_config(vm);
  c.chunk_rows = uint64_t(vm["chunk_rows"].as<int64_t>());
  c.streams = int(vm["streams"].as<int64_t>());
  c.output_space = mem_space(vm["output_space"].as<std::string>());
  return c;
}

void run_chunked(Rank& rank, const JoinJob& job) {
  const ChunkedConfig cfg = chunked_config(job.options);
  if (cfg.streams > rank.streams())
    throw RuntimeError("chunked: streams = " + std::to_string(cfg.streams) + " but the " + rank.backend() +
                       " backend gives a rank " + std::to_string(rank.streams()) + " streams");
  Inputs in = generate_inputs(rank, job, job.data_space, MemSpace::Pinned);
  const Tuples& s_host = in.s.tuples;

  begin_phase(rank, "build");
  const Tuples& r = in.r.tuples;
  HashTable table = rank.alloc_table(MemSpace::Device, cfg.join.table, r.fmt, r.rows, cfg.join.load_factor,
                                     cfg.join.seed, "chunked.table");
  rank.launch(Stream{0}, BuildOp{r, &table}).get();

  begin_phase(rank, "probe");
  // Staging buffers: at least two, so the next chunk's copy never lands in the buffer the
  // current chunk is still probed from, whatever the stream count.
  const uint64_t chunks = (s_host.rows + cfg.chunk_rows - 1) / cfg.chunk_rows;
  const int buffers = int(std::min<uint64_t>(std::max(2, cfg.streams), std::max<uint64_t>(chunks, 1)));
  std::vector<Tuples> staging;
  std::vector<Event> released(static_cast<size_t>(buffers));  // last probe that read each buffer
  for (int b = 0; b < buffers; ++b)
    staging.push_back(rank.alloc_tuples(MemSpace::Device, std::min(cfg.chunk_rows, s_host.rows), s_host.fmt,
                                        "chunked.staging" + std::to_string(b)));
  auto chunk_rows = [&](uint64_t i) { return std::min(cfg.chunk_rows, s_host.rows - i * cfg.chunk_rows); };
  auto stream_of = [&](uint64_t i) { return Stream{int(i % uint64_t(cfg.streams))}; };
  // Copies go one at a time (each waits for the previous chunk's): one copy alone runs at the
  // measured H2D rate, two from different streams at once were measured to share it worse
  // (docs/benchmarks.md). Probes still overlap the copies.
  Event copied;
  auto copy_chunk = [&](uint64_t i) {
    const Stream st = stream_of(i);
    const size_t b = size_t(i % uint64_t(buffers));
    if (released[b].impl()) rank.stream_wait(st, released[b]);
    if (copied.impl()) rank.stream_wait(st, copied);
    const uint64_t first = i * cfg.chunk_rows, n = chunk_rows(i);
    const TupleFormat f = s_host.fmt;
    rank.copy(st, staging[b].keys, 0, s_host.keys, first * f.key_bytes, n * f.key_bytes);
    rank.copy(st, staging[b].vals, 0, s_host.vals, first * f.val_bytes, n * f.val_bytes);
    copied = rank.record(st);
  };

  OutputSink sink(rank, cfg.output_space, r.fmt, s_host.fmt, "chunked.out");
  // Output segments hold one match per S row (all of a primary-key join's output) unless that
  // would take more than half of the memory left; later segments start when one is full.
  const uint64_t segment_rows = output_segment_rows(rank, cfg.output_space, r.fmt, s_host.fmt, s_host.rows,
                                                    std::min(cfg.chunk_rows, s_host.rows));
  const OutputSizing sizing{segment_rows, segment_rows};
  const Event built = rank.record(Stream{0});
  for (int k = 1; k < cfg.streams; ++k) rank.stream_wait(Stream{k}, built);
  if (chunks > 0) copy_chunk(0);
  for (uint64_t i = 0; i < chunks; ++i) {
    const Stream st = stream_of(i);
    const Tuples probe = staging[size_t(i % uint64_t(buffers))].slice(0, chunk_rows(i));
    run_join(
        rank, st, cfg.join.output, sink, sizing,
        [&](const JoinOutput& out, uint64_t first, OutputMode mode) -> Op {
          return ProbeOp{&table, probe, out, first, mode};
        },
        [&] {
          if (i + 1 < chunks) copy_chunk(i + 1);
        });
    released[size_t(i % uint64_t(buffers))] = rank.record(st);
  }
  report_output(rank, Stream{0}, sink, in.r, in.s, MemSpace::Device);
}

// The tightest resource is the interconnect: every S tuple crosses it once (bytes of S over
// bw.h2d); the device-side work (R read and built, S read from staging, one table entry per S
// tuple, output written) over bw.mem runs beside it. Bound = the larger of the two.
Bound chunked_bound(const JoinJob& job, const ClusterShape& shape, const Bandwidths& bw) {
  const Workload& w = job.workload;
  const double s = tuple_bytes_total(w.s);
  const ChunkedConfig cfg = chunked_config(job.options);
  const double tr = tuple_format(w.r).tuple_bytes();
  const double out = bound_output_bytes(w, cfg.join.output);
  const Bound device = memory_bound(2 * tuple_bytes_total(w.r) + s + double(w.s.rows) * tr + out, bw,
                                    "R built, S chunks probed, output");
  if (bw.h2d <= 0) return device;
  const Bound link{s / bw.h2d, "host-to-device " + rate_text(bw.h2d) + ": every S tuple once"};
  return link.seconds >= device.seconds ? link : device;
}

}  // namespace

StrategyInfo chunked_strategy() {
  StrategyInfo i = strategy_info("chunked",
                                 "out-of-core (rui2017 3.4): R's hash table on the device, S streamed from pinned memory "
                                 "in chunks",
                                 1, 1, add_chunked_options, run_chunked, chunked_bound);
  // S waits in pinned host memory.
  i.host_bytes = [](const JoinJob& job, const ClusterShape& shape) {
    return uint64_t(tuple_bytes_total(job.workload.s) / shape.size());
  };
  return i;
}

}  // namespace joinlab
