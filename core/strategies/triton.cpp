// triton: lutz2022's out-of-core partitioned hash join (the Triton join, section 5). R and S wait
// in pinned host memory, reachable by the GPU over its link. The first pass partitions both by
// the low key bits into partitions that two pairs of fit the device's working buffers: a
// chunked prefix sum (one histogram per input chunk, on the GPU or the CPU) lays the output out
// partition-major, and the partitioner (ChunkPartitionOp) writes the first chunks of every
// partition into a cache in device memory and the rest into pinned host memory (the spill).
// Then every first-pass partition in turn is partitioned again on the device (its runs gathered
// into device memory, the spilled ones by copies over the link, and partitioned as one input; or
// read in place, the spilled ones over the link by the kernel) and joined per sub-partition
// (PartitionedJoinOp, as phj). Partitions alternate between two streams, so one partition's
// link reads and second pass overlap the other's join; a partition's second pass is queued behind
// its stream's previous join, and the host waits for its result only when its join is next.
// When R and S fit in device memory with phj's buffers, the plan is phj on device copies.
#include <algorithm>
#include <optional>

#include "core/common/error.hpp"
#include "core/strategies/rank_joins.hpp"

namespace joinlab {

namespace {

enum class SpillRead : uint8_t { Auto, Copy, Kernel };

struct TritonConfig {
  PhjConfig phj;               // the in-GPU plan, the second pass's bits (partition_budget), the join
  uint32_t pass1_bits = 0;     // 0 = from device memory
  uint32_t chunks = 128;       // first-pass chunks per relation
  bool prefix_on_host = false;
  Partitioner partitioner = Partitioner::Hierarchical;
  SpillRead spill_read = SpillRead::Auto;  // the plan decides auto (MemoryPlan::read_by_copy)
  bool spill_written_by_copy = true;  // spill_write = copy
  int64_t cache_bytes = -1;    // -1 = what is free after the working buffers
  uint32_t flush_bytes = 4096;
  MemSpace output_space = MemSpace::Pinned;
  bool in_gpu = true;          // fall back to phj when R and S fit
  bool r_ahead = true;         // R's second passes during S's first pass where memory allows
  bool split_sms = false;      // the join's two lanes on disjoint halves of the SMs
  uint32_t pass1_streams = 2;  // streams (and ring slots) the first pass's chunks alternate between
};

void add_triton_options(po::options_description& d) {
  add_phj_options(d);
  d.add_options()("pass1_bits", int_option("pass1_bits", 0, 0, kMaxBitsPerPass),
                  "radix bits of the first pass; 0 = enough for two partition pairs to fit a quarter of device memory, "
                  "and for the second pass to need at most 2^11 partitions (2^12 where it reads by copies)")(
      "chunks", int_option("chunks", 128, 1, 1 << 16),
      "chunks each relation is cut into for the first pass (one histogram per chunk, the cache's unit)")(
      "pass1_streams", int_option("pass1_streams", 2, 1, 4),
      "streams the first pass's chunks alternate between, each with its slot of device memory (a chunk's copies "
      "overlap the other stream's kernels; more streams interleave their copies and the link idles while they all "
      "wait for kernels)")(
      "prefix_sum", choice_option("prefix_sum", {"gpu", "cpu"}, "gpu"),
      "where the first pass's chunked histograms are counted: on the GPU (reading the inputs over the link) or on "
      "the host's CPU threads")(
      "partitioner", choice_option("partitioner", {"shared", "hierarchical"}, "hierarchical"),
      "how the first pass's partitioner writes to pinned memory (spill_write = kernel): shared (aligned 128-byte "
      "flushes from shared memory) or hierarchical (a device-memory buffer per partition flushed in flush_bytes "
      "writes); into device memory it writes from shared memory")(
      "flush_bytes", int_option("flush_bytes", 4096, 128, 1 << 20),
      "bytes of the hierarchical partitioner's device-memory buffer per (block, partition)")(
      "spill_write", choice_option("spill_write", {"copy", "kernel"}, "copy"),
      "how the first pass writes the chunks the cache does not hold: partitioned in device memory, then copied "
      "(cudaMemcpyAsync) to pinned memory in one run each (copy), or by the partitioner over the link (kernel)")(
      "spill_read", choice_option("spill_read", {"auto", "copy", "kernel"}, "auto"),
      "how the second pass reads spilled chunks: copies bring a slice's runs to device memory first, one batch "
      "(cudaMemcpyBatchAsync) per slice (copy), or the partition kernel reads host memory (kernel: its histogram "
      "reads the keys over the link once more); auto: copy where the lanes' staging buffers fit the device "
      "memory beside the join's working buffers, else kernel")(
      "cache_bytes", int_option("cache_bytes", -1, -1, int64_t(1) << 50),
      "device memory caching the first chunks of every partition, split between R and S by size; -1 = what is "
      "free after the working buffers")(
      "output_space", choice_option("output_space", {"device", "pinned"}, "pinned"),
      "where the output rows go (pinned: results larger than the GPU, as lutz2022)")(
      "in_gpu", choice_option("in_gpu", {"auto", "off"}, "auto"),
      "auto: run phj in device memory when R and S fit with its buffers; off: always the out-of-core plan")(
      "r_ahead", choice_option("r_ahead", {"auto", "off"}, "auto"),
      "auto: where the cache holds R and S whole and device memory R's partitioned copy beside them, R's second "
      "passes run during S's first pass, on a stream of their own (the join phase then partitions S only); off: "
      "in the join phase")(
      "lane_sms", choice_option("lane_sms", {"shared", "split"}, "shared"),
      "the join phase's two lanes: on streams that share the GPU's SMs (shared), or each on its own half of them "
      "(split: CUDA green contexts, as lutz2022 splits them; shared where the backend cannot)");
}

TritonConfig triton_config(const po::variables_map& vm) {
  TritonConfig c;
  c.phj = phj_config(vm);
  c.pass1_bits = uint32_t(vm["pass1_bits"].as<int64_t>());
  c.chunks = uint32_t(vm["chunks"].as<int64_t>());
  c.pass1_streams = uint32_t(vm["pass1_streams"].as<int64_t>());
  c.prefix_on_host = vm["prefix_sum"].as<std::string>() == "cpu";
  c.partitioner = vm["partitioner"].as<std::string>() == "shared" ? Partitioner::Shared : Partitioner::Hierarchical;
  c.flush_bytes = uint32_t(vm["flush_bytes"].as<int64_t>());
  const std::string read = vm["spill_read"].as<std::string>();
  c.spill_read = read == "copy" ? SpillRead::Copy : read == "kernel" ? SpillRead::Kernel : SpillRead::Auto;
  c.spill_written_by_copy = vm["spill_write"].as<std::string>() == "copy";
  c.cache_bytes = vm["cache_bytes"].as<int64_t>();
  c.output_space = mem_space(vm["output_space"].as<std::string>());
  c.in_gpu = vm["in_gpu"].as<std::string>() == "auto";
  c.split_sms = vm["lane_sms"].as<std::string>() == "split";
  c.r_ahead = vm["r_ahead"].as<std::string>() == "auto";
  return c;
}

// Device bytes of the in-GPU plan (phj): inputs, their partitioned copies, the larger relation
// once more for a second pass, and a primary-key join's output.
uint64_t in_gpu_bytes(uint64_t r_rows, uint64_t s_rows, TupleFormat rf, TupleFormat sf) {
  const uint64_t r = r_rows * rf.tuple_bytes(), s = s_rows * sf.tuple_bytes();
  return 2 * (r + s) + std::max(r, s) + s_rows * (uint64_t(rf.key_bytes) + rf.val_bytes + sf.val_bytes);
}

// Radix bits of the two passes: all bits as phj plans them for R; the first pass at least enough
// for two pairs of partitions to fit a quarter of device memory (lutz2022 5.1: two pairs in half
// of it, the other half for the second pass's output) and the second at most `second_most`.
RadixPlan triton_plan(uint64_t r_rows, uint64_t s_rows, TupleFormat rf, TupleFormat sf, uint64_t device,
                      const TritonConfig& cfg, uint32_t second_most) {
  uint32_t bits = plan_radix(r_rows, rf.tuple_bytes(), rf.key_bytes, cfg.phj.budget, cfg.phj.radix_bits, 1).bits();
  uint32_t p1 = cfg.pass1_bits;
  if (p1 == 0) {
    const double pair = double(r_rows) * rf.tuple_bytes() + double(s_rows) * sf.tuple_bytes();
    while (p1 < kMaxBitsPerPass && 2.0 * pair / double(1ULL << p1) > double(device) / 4) ++p1;
    p1 = std::max<uint32_t>({p1, 1, bits > second_most ? bits - second_most : 0});
  }
  bits = std::max(bits, p1);
  RadixPlan p;
  p.pass1_bits = p1;
  p.pass2_bits = std::min<uint32_t>(bits - p1, second_most);
  return p;
}

// Pieces of a ChunkPartitionOp (ops.hpp: kPieceRows, kDevicePieceRows, piece_bounds).
uint64_t pieces_of(uint64_t rows, uint64_t piece = kPieceRows) { return (rows + piece - 1) / piece; }

// The first pass works on its chunks in a ring of slots in device memory, one per stream (below,
// Ring). Two streams keep the link busy: with four, the copy engines interleave four streams'
// copies, which then finish together and wait for their kernels with the link idle (one H200,
// 2^28 rows per relation: the pass's copies at 53.3 GB/s with two streams, 49.7 with four; 16 MiB
// copies alone 54.8 either way).
uint32_t ring_slots(const Rank& rank, const TritonConfig& cfg) {
  return std::min(uint32_t(rank.streams()), cfg.pass1_streams);
}
// Bytes of the ring's buffers (also what plan_memory keeps free for them).
uint64_t ring_bytes(uint32_t slots, uint64_t rows, uint32_t tuple_bytes, uint32_t fanout, bool staged, bool spill_copy) {
  return slots * (rows * tuple_bytes * ((staged ? 1 : 0) + (spill_copy ? 1 : 0)) + pieces_of(rows, kDevicePieceRows) * fanout * 8);
}
// The first pass's layout is chunk-major (lutz2022 4.3): chunk c of a relation, rows [bounds[c],
// bounds[c + 1]) of the input, is partitioned into a region of its own size, its partitions in
// order, so that laying it out takes only its own histogram. Regions of the first chunks that
// the cache holds are in device memory (the cache, at bounds[c]); the others in pinned host
// memory (the spill, at bounds[c] - the cached rows). A first-pass partition p is then one run
// per chunk, (c, p).
struct FirstPass {
  std::vector<uint64_t> bounds;
  uint32_t cached_chunks = 0;
  Tuples cache, spill;
  std::vector<uint64_t> hist;  // chunks x fanout, chunk-major: each chunk's histogram
  uint32_t fanout = 0;
  uint32_t chunks() const { return uint32_t(bounds.size() - 1); }
  uint64_t cached_rows() const { return bounds[cached_chunks]; }
  // Chunk c's region starts at this row of the cache (cached chunks) or of the spill.
  uint64_t region_start(uint32_t c) const { return c < cached_chunks ? bounds[c] : bounds[c] - cached_rows(); }
  Tuples region(uint32_t c) const {
    const uint64_t n = bounds[c + 1] - bounds[c];
    return c < cached_chunks ? cache.slice(region_start(c), n) : spill.slice(region_start(c), n);
  }
  uint64_t rows(uint32_t p) const {
    uint64_t n = 0;
    for (uint32_t c = 0; c < chunks(); ++c) n += hist[size_t(c) * fanout + p];
    return n;
  }
};

// Cuts the runs of first-pass partition p into slices of at most `most` rows each (a partition
// larger than a lane's buffers is joined slice by slice), each slice as row ranges of the cache
// and of the spill, in chunk order.
struct Slice {
  std::vector<RowRange> cached, spilled;
  uint64_t rows = 0;
};
std::vector<Slice> slices_of(const FirstPass& fp, uint32_t p, uint64_t most) {
  std::vector<Slice> out(1);
  for (uint32_t c = 0; c < fp.chunks(); ++c) {
    const uint64_t* h = fp.hist.data() + size_t(c) * fp.fanout;
    uint64_t at = fp.region_start(c);
    for (uint32_t q = 0; q < p; ++q) at += h[q];
    for (uint64_t left = h[p]; left > 0;) {
      if (out.back().rows == most) out.emplace_back();
      const uint64_t n = std::min(left, most - out.back().rows);
      (c < fp.cached_chunks ? out.back().cached : out.back().spilled).push_back({at, at + n});
      out.back().rows += n;
      at += n;
      left -= n;
    }
  }
  if (out.back().rows == 0) out.pop_back();
  return out;
}

// Ranges cut into pieces of at most kPieceRows rows.
std::vector<RowRange> cut(const std::vector<RowRange>& ranges) {
  std::vector<RowRange> out;
  for (const RowRange& r : ranges)
    for (uint64_t b = r.begin; b < r.end; b += kPieceRows) out.push_back({b, std::min(r.end, b + kPieceRows)});
  return out;
}

// Rows of the lanes' buffers (the second pass's output of a slice): partitions of uniform size
// with a quarter to spare; a larger partition (skew) is joined in slices of this size.
uint64_t lane_rows(uint64_t rows, uint32_t fanout) { return (rows + fanout - 1) / fanout * 5 / 4 + 1; }
// Words of a lane's second-pass layout buffer: the pieces of a slice of `rows` rows in runs from
// `chunks` chunks (a run per chunk, one more where a slice boundary cuts one; each run's last
// piece short), times the second pass's fanout.
uint64_t layout_words(uint64_t rows, uint32_t chunks, uint32_t fanout2) { return (pieces_of(rows) + chunks + 2) * fanout2; }

// How the device memory is spent: per relation the rows each lane's buffers hold, and the cache.
struct MemoryPlan {
  uint64_t lane_r = 0, lane_s = 0, cache_r = 0, cache_s = 0;
  bool read_by_copy = false;  // the spill read back by copies (spill_read = copy, or auto's choice)
};

// Device bytes the working buffers take, with some headroom for the partitioners' buffers and the
// join's scratch: during the first pass the ring's slots (Ring: a chunk staged, a spilled chunk on
// its way out), during the join two lanes (the second pass's outputs of a slice of R and of S,
// and by copies the staged slices and the partitioning's scratch, in place the layout buffers;
// the output segments when they are in device memory).
uint64_t working_bytes(const TritonConfig& cfg, const MemoryPlan& m, uint64_t r_rows, uint64_t s_rows, TupleFormat rf,
                       TupleFormat sf, const RadixPlan& plan, uint32_t slots) {
  const uint32_t F = 1u << plan.pass1_bits, F2 = 1u << plan.pass2_bits;
  // By copies a lane holds a staged slice, its partitioned output and the partitioning's scratch
  // (one more slice on the GPU: its two passes go through a temporary buffer); in place, the
  // output and the layout.
  const uint64_t slice_bytes = m.lane_r * rf.tuple_bytes() + m.lane_s * sf.tuple_bytes();
  const uint64_t lane_bytes =
      m.read_by_copy ? 3 * slice_bytes
                     : slice_bytes + (layout_words(m.lane_r, cfg.chunks, F2) + layout_words(m.lane_s, cfg.chunks, F2)) * 8;
  const uint64_t row_bytes = uint64_t(rf.key_bytes) + rf.val_bytes + sf.val_bytes;
  const uint64_t join = 2 * lane_bytes + (cfg.output_space == MemSpace::Device ? 2 * m.lane_s * row_bytes : 0);
  const uint64_t chunk = (std::max(r_rows, s_rows) + cfg.chunks - 1) / cfg.chunks;
  const uint64_t staging = ring_bytes(slots, chunk, std::max(rf.tuple_bytes(), sf.tuple_bytes()), F,
                                      !cfg.prefix_on_host, cfg.spill_written_by_copy);
  const uint64_t working = std::max(join, staging);
  return working + working / 8 + (uint64_t(64) << 20);
}

// The cache is cache_bytes, or by default what is left of `device` after the working buffers.
// Split between R and S by their sizes. spill_read = auto reads the spill by copies where their
// staging fits beside the rest.
MemoryPlan plan_memory(const TritonConfig& cfg, uint64_t device, uint64_t r_rows, uint64_t s_rows, TupleFormat rf,
                       TupleFormat sf, const RadixPlan& plan, uint32_t slots) {
  MemoryPlan m;
  const uint32_t F = 1u << plan.pass1_bits;
  m.lane_r = lane_rows(r_rows, F);
  m.lane_s = lane_rows(s_rows, F);
  m.read_by_copy = cfg.spill_read != SpillRead::Kernel;
  if (cfg.spill_read == SpillRead::Auto) m.read_by_copy = device >= working_bytes(cfg, m, r_rows, s_rows, rf, sf, plan, slots);
  const double rb = double(r_rows) * rf.tuple_bytes(), sb = double(s_rows) * sf.tuple_bytes();
  uint64_t cache = 0;
  if (cfg.cache_bytes >= 0) {
    cache = uint64_t(cfg.cache_bytes);
  } else {
    const uint64_t reserve = working_bytes(cfg, m, r_rows, s_rows, rf, sf, plan, slots);
    cache = device > reserve ? device - reserve : 0;
  }
  m.cache_r = rb + sb > 0 ? uint64_t(double(cache) * rb / (rb + sb)) : 0;
  m.cache_s = cache - m.cache_r;
  return m;
}

// The second pass in place is one chunk partition of a slice's runs (at most kMaxBitsPerPass
// bits); by copies it partitions the staged slice in two passes on the GPU, where one more bit
// halves the first pass's fanout and doubles a unit's rows: fewer and larger launches in the join
// phase and a lighter first pass beside the link's copies. By copies where spill_read allows and
// the lanes' staging fits (auto), else in place.
constexpr uint32_t kSecondPassBitsByCopy = kMaxBitsPerPass + 1;
struct TritonPlan {
  RadixPlan radix;
  MemoryPlan mem;
};
TritonPlan plan_triton(const TritonConfig& cfg, uint64_t device, uint64_t r_rows, uint64_t s_rows, TupleFormat rf,
                       TupleFormat sf, uint32_t slots) {
  if (cfg.spill_read != SpillRead::Kernel) {
    const RadixPlan radix = triton_plan(r_rows, s_rows, rf, sf, device, cfg, kSecondPassBitsByCopy);
    const MemoryPlan mem = plan_memory(cfg, device, r_rows, s_rows, rf, sf, radix, slots);
    if (mem.read_by_copy) return {radix, mem};
  }
  const RadixPlan radix = triton_plan(r_rows, s_rows, rf, sf, device, cfg, kMaxBitsPerPass);
  return {radix, plan_memory(cfg, device, r_rows, s_rows, rf, sf, radix, slots)};
}

// Chunks of a relation of `rows` rows cut into `chunks` chunks that a cache of `cache_bytes`
// holds: its first whole chunks.
uint32_t cached_chunks(const std::vector<uint64_t>& bounds, uint32_t tuple_bytes, uint64_t cache_bytes) {
  uint32_t k = 0;
  while (k + 1 < bounds.size() && bounds[k + 1] * tuple_bytes <= cache_bytes) ++k;
  return k;
}

// A relation's first-pass buffers: the cache in device memory; the spill pinned before the join
// is timed, as the inputs are (pinning runs at a few GB/s: 17 GiB took 8 s on an H200 host; a
// database pays it once for its buffer pool, not per join).
FirstPass allocate_first(Rank& rank, const Tuples& in, uint32_t chunks, uint32_t fanout, uint64_t cache_bytes,
                         const std::string& tag) {
  FirstPass fp;
  fp.bounds = chunk_bounds(in.rows, chunks);
  fp.fanout = fanout;
  fp.cached_chunks = cached_chunks(fp.bounds, in.fmt.tuple_bytes(), cache_bytes);
  const uint64_t cached = fp.cached_rows(), spilled = in.rows - cached;
  if (cached) fp.cache = rank.alloc_tuples(MemSpace::Device, cached, in.fmt, tag + ".cache");
  if (spilled) fp.spill = rank.alloc_tuples(MemSpace::Pinned, spilled, in.fmt, tag + ".spill");
  return fp;
}

// Where the first pass's chunks are worked on: a ring of slots, one per stream (pass1_streams),
// so that a chunk's copies overlap the other slots' work. A slot holds a staged input chunk
// (prefix_sum = gpu), its partitioned output on its way to the spill (spill_write = copy) and its
// pieces' offsets; R's and S's chunks take the slots in turn, views of one set of buffers.
struct Ring {
  uint32_t slots = 1;
  uint64_t rows = 0;  // the largest chunk's
  std::vector<Buffer> in_keys, in_vals, out_keys, out_vals, layout;
  Tuples view(const std::vector<Buffer>& k, const std::vector<Buffer>& v, uint32_t slot, uint64_t n, TupleFormat f) const {
    Tuples t;
    t.keys = k[slot];
    t.vals = v[slot];
    t.rows = t.capacity = n;
    t.fmt = f;
    return t;
  }
};
Ring make_ring(Rank& rank, uint32_t slots, uint64_t rows, TupleFormat widest, uint32_t fanout, bool staged,
               bool spill_copy) {
  Ring g;
  g.slots = slots;
  g.rows = std::max<uint64_t>(rows, 1);
  for (uint32_t i = 0; i < g.slots; ++i) {
    const std::string t = "triton.ring" + std::to_string(i);
    if (staged) {
      g.in_keys.push_back(rank.alloc(MemSpace::Device, g.rows * widest.key_bytes, t + ".in.keys"));
      g.in_vals.push_back(rank.alloc(MemSpace::Device, g.rows * widest.val_bytes, t + ".in.vals"));
    }
    if (spill_copy) {
      g.out_keys.push_back(rank.alloc(MemSpace::Device, g.rows * widest.key_bytes, t + ".out.keys"));
      g.out_vals.push_back(rank.alloc(MemSpace::Device, g.rows * widest.val_bytes, t + ".out.vals"));
    }
    g.layout.push_back(rank.alloc(MemSpace::Device, pieces_of(g.rows, kDevicePieceRows) * fanout * 8, t + ".layout"));
  }
  return g;
}

// Whether chunk c's region is written by the partitioner over the link (then in pieces of
// kPieceRows, its flushes as large as they can be).
bool written_over_link(const FirstPass& fp, uint32_t c, const TritonConfig& cfg) {
  return c >= fp.cached_chunks && !cfg.spill_written_by_copy;
}
uint64_t first_piece_rows(const FirstPass& fp, uint32_t c, const TritonConfig& cfg) {
  return written_over_link(fp, c, cfg) ? kPieceRows : kDevicePieceRows;
}

// Bounds of chunk c's pieces (chunk_pieces): its histogram and its partitioner cut it alike.
std::vector<uint64_t> chunk_pieces(const FirstPass& fp, uint32_t c, const TritonConfig& cfg) {
  return piece_bounds(fp.bounds[c + 1] - fp.bounds[c], first_piece_rows(fp, c, cfg));
}

// Partitions chunk c (its rows in `chunk`, in pinned memory or staged, cut at `pieces`) into its
// region, laid out partition-major over its pieces by `offsets` (host, chunk-major) or by
// offsets on the device (`layout`, scanned). A spilled region is written by the partitioner over the link
// (spill_write = kernel: cfg.partitioner), or partitioned into the ring slot's output and copied
// to pinned memory in one run per column (copy); a cached region from shared memory.
void partition_chunk(Rank& rank, Stream st, const FirstPass& fp, uint32_t c, const Tuples& chunk,
                     const std::vector<uint64_t>& pieces, PartitionFn fn, std::vector<uint64_t> offsets,
                     const Buffer& layout, const Ring& ring, uint32_t slot, const TritonConfig& cfg) {
  ChunkPartitionOp op;
  for (size_t i = 0; i + 1 < pieces.size(); ++i) op.chunks.push_back(chunk.slice(pieces[i], pieces[i + 1] - pieces[i]));
  op.fn = fn;
  op.offsets = std::move(offsets);
  if (layout) op.offsets_on_device = layout;
  op.cached_chunks = uint32_t(op.chunks.size());
  const Tuples region = fp.region(c);
  const bool spilled = c >= fp.cached_chunks;
  op.cache = spilled && cfg.spill_written_by_copy ? ring.view(ring.out_keys, ring.out_vals, slot, region.rows, region.fmt) : region;
  op.partitioner = written_over_link(fp, c, cfg) ? cfg.partitioner : Partitioner::Shared;
  op.flush_bytes = cfg.flush_bytes;
  rank.launch(st, op);
  if (spilled && cfg.spill_written_by_copy) {
    const TupleFormat f = region.fmt;
    rank.copy(st, region.keys, region.offset * f.key_bytes, op.cache.keys, 0, region.rows * f.key_bytes);
    rank.copy(st, region.vals, region.offset * f.val_bytes, op.cache.vals, 0, region.rows * f.val_bytes);
  }
}

// The first pass with prefix_sum = gpu: each chunk crosses the link once, copied into its ring
// slot in device memory; its pieces' histogram, their scan and the partitioner then read it
// there, the offsets staying on the device. Returns each chunk's histogram (fanout totals), which
// the host reads once the pass is queued, for the join's layout.
std::vector<std::pair<uint32_t, Launched>> first_pass_staged(Rank& rank, const Tuples& in, const FirstPass& fp,
                                                             PartitionFn fn, const Ring& ring, uint32_t& turn,
                                                             const TritonConfig& cfg) {
  std::vector<std::pair<uint32_t, Launched>> hist;
  const TupleFormat f = in.fmt;
  for (uint32_t c = 0; c < fp.chunks(); ++c) {
    const uint64_t first = fp.bounds[c], rows = fp.bounds[c + 1] - first;
    if (rows == 0) continue;
    const uint32_t slot = turn++ % ring.slots;
    const Stream st{int(slot)};
    const Tuples chunk = ring.view(ring.in_keys, ring.in_vals, slot, rows, f);
    rank.copy(st, chunk.keys, 0, in.keys, (in.offset + first) * f.key_bytes, rows * f.key_bytes);
    rank.copy(st, chunk.vals, 0, in.vals, (in.offset + first) * f.val_bytes, rows * f.val_bytes);
    const std::vector<uint64_t> pieces = chunk_pieces(fp, c, cfg);
    HistogramOp h{chunk, fn};
    if (pieces.size() > 2) h.in_segments = pieces;
    h.counts_out = ring.layout[slot];
    hist.push_back({c, rank.launch(st, h)});
    rank.launch(st, ScanOp{ring.layout[slot], ring.layout[slot], (pieces.size() - 1) * fn.fanout()});
    partition_chunk(rank, st, fp, c, chunk, pieces, fn, {}, ring.layout[slot], ring, slot, cfg);
  }
  return hist;
}

// The first pass with prefix_sum = cpu: the host's CPUs count every chunk's pieces in host memory
// (no link traffic), then each chunk's partitioner reads it over the link with host offsets.
Launched count_on_host(Rank& rank, Stream st, const Tuples& in, const FirstPass& fp, PartitionFn fn,
                       const TritonConfig& cfg) {
  HistogramOp h{in, fn};
  for (uint32_t c = 0; c < fp.chunks(); ++c)
    for (uint64_t b : chunk_pieces(fp, c, cfg))
      if (h.in_segments.empty() || h.in_segments.back() != fp.bounds[c] + b) h.in_segments.push_back(fp.bounds[c] + b);
  if (h.in_segments.size() < 2) h.in_segments.clear();
  h.placement = HistogramOp::Placement::Host;
  return rank.launch(st, h);
}
void first_pass_from_host(Rank& rank, const Tuples& in, FirstPass& fp, const std::vector<uint64_t>& piece_counts,
                          PartitionFn fn, const Ring& ring, uint32_t& turn, const TritonConfig& cfg) {
  const uint32_t F = fn.fanout();
  fp.hist.assign(size_t(fp.chunks()) * F, 0);
  size_t piece = 0;
  for (uint32_t c = 0; c < fp.chunks(); ++c) {
    const uint64_t rows = fp.bounds[c + 1] - fp.bounds[c];
    if (rows == 0) continue;
    const std::vector<uint64_t> pieces = chunk_pieces(fp, c, cfg);
    const size_t n = pieces.size() - 1;
    const std::vector<uint64_t> counts(piece_counts.begin() + long(piece * F), piece_counts.begin() + long((piece + n) * F));
    piece += n;
    for (size_t i = 0; i < counts.size(); ++i) fp.hist[size_t(c) * F + i % F] += counts[i];
    const uint32_t slot = turn++ % ring.slots;
    partition_chunk(rank, Stream{int(slot)}, fp, c, in.slice(fp.bounds[c], rows), pieces, fn,
                    chunked_layout(counts, F, uint32_t(n)).offsets, Buffer{}, ring, slot, cfg);
  }
}

// Device buffers one stream's slices go through: the second pass's outputs, and by copies the
// staged slices, in place the second pass's layout (its pieces' counts, scanned into their
// offsets in place).
struct Lane {
  Tuples r_out, s_out, r_staged, s_staged;
  Buffer r_layout, s_layout;
};

// The second pass of one slice of a first-pass partition into its lane's output, in two forms:
//  * by copies (spill_read = copy): the slice's runs are gathered into the lane's staging buffer,
//    the cached ones inside device memory (one kernel), the spilled ones over the link (one
//    batch), and the staged slice is partitioned as one input (PartitionOp: on the GPU two passes
//    of at most 2^8 partitions without the host in between). A ChunkPartitionOp over the runs in
//    place scattered 4Mi rows into 2^11 partitions at 80-130 GB/s on an H200 (0.5-0.8 ms a
//    relation per unit, most of the join phase at 2^28 rows).
//  * in place (spill_read = kernel): the runs, cut into pieces, are the chunks of a
//    ChunkPartitionOp that reads the cache in device memory and the spill over the link. It is
//    laid out on the device: the runs' histograms (one operator for the cached runs, one for the
//    spilled) leave their pieces' counts in `layout`, partition-major (piece i of partition q at
//    word q * pieces + i), a scan turns them into offsets in place, and the partitioner reads
//    them there. The host only adds up each partition's totals (the histograms' results).
// start_second queues what comes before the host needs a result; finish_second reads it.
struct SecondPass {
  Launched partitioned;          // by copies: the partitioning, its result the offsets
  uint64_t rows = 0;
  std::vector<Tuples> pieces;    // in place: the partitioner's chunks
  std::vector<Launched> counts;  // in place: per histogram, its result the totals
  Buffer layout;
};
SecondPass start_second(Rank& rank, Stream st, const FirstPass& fp, const Slice& slice, const Tuples& staged,
                        const Tuples& out, const Buffer& layout, PartitionFn fn, bool by_copy) {
  SecondPass sp;
  sp.layout = layout;
  sp.rows = slice.rows;
  if (by_copy) {
    uint64_t at = 0;
    for (const auto& [from, runs] : {std::pair{&fp.cache, &slice.cached}, std::pair{&fp.spill, &slice.spilled}}) {
      const TupleFormat f = from->fmt;
      std::vector<CopyRange> copies;
      for (const RowRange& r : *runs) {
        const uint64_t row = from->offset + r.begin;
        copies.push_back({staged.keys, at * f.key_bytes, from->keys, row * f.key_bytes, r.size() * f.key_bytes});
        copies.push_back({staged.vals, at * f.val_bytes, from->vals, row * f.val_bytes, r.size() * f.val_bytes});
        at += r.size();
      }
      if (!copies.empty()) rank.copy_v(st, copies);
    }
    PartitionOp op;
    op.in = staged.slice(0, at);
    op.fn = fn;
    op.out = out;
    sp.partitioned = rank.launch(st, op);
    return sp;
  }
  struct Part {
    Tuples in;
    std::vector<RowRange> ranges;
  };
  std::vector<Part> parts;
  if (!slice.cached.empty()) parts.push_back({fp.cache, cut(slice.cached)});
  if (!slice.spilled.empty()) parts.push_back({fp.spill, cut(slice.spilled)});
  uint64_t pieces = 0;
  for (const Part& p : parts) pieces += p.ranges.size();
  for (const Part& p : parts) {
    HistogramOp h{p.in, fn};
    h.in_ranges = p.ranges;
    h.placement = HistogramOp::Placement::Device;  // spilled runs too: the GPU reads them over the link
    h.counts_out = layout;
    h.counts_first = sp.pieces.size();
    h.counts_stride = pieces;
    for (const RowRange& r : p.ranges) sp.pieces.push_back(p.in.slice(r.begin, r.size()));
    sp.counts.push_back(rank.launch(st, h));
  }
  return sp;
}
Partitioned finish_second(Rank& rank, Stream st, SecondPass& sp, const Tuples& out, PartitionFn fn) {
  if (sp.partitioned.result) return Partitioned{out.slice(0, sp.rows), sp.partitioned.values()};
  const uint32_t F = fn.fanout();
  std::vector<uint64_t> starts(size_t(F) + 1, 0);
  for (const Launched& l : sp.counts) {
    const std::vector<uint64_t>& totals = l.get().values;
    for (uint32_t q = 0; q < F; ++q) starts[q + 1] += totals[q];
  }
  for (uint32_t q = 0; q < F; ++q) starts[q + 1] += starts[q];
  if (sp.pieces.empty()) return Partitioned{out.slice(0, 0), SharedOffsets(std::move(starts))};
  rank.launch(st, ScanOp{sp.layout, sp.layout, uint64_t(sp.pieces.size()) * F});
  ChunkPartitionOp op;
  op.chunks = sp.pieces;
  op.fn = fn;
  op.offsets_on_device = sp.layout;
  op.cached_chunks = uint32_t(sp.pieces.size());
  op.cache = out;
  rank.launch(st, op);  // in device memory: shared-memory buffers flushed in 128-byte windows
  return Partitioned{out.slice(0, starts.back()), SharedOffsets(std::move(starts))};
}

// One join of the join phase: slice `r` of first-pass partition p's R rows with slice `s` of its
// S rows. Every R slice meets every S slice, so a partition cut into slices is joined exactly
// once; the slices of one R slice share a lane, which partitions R once for all of them.
struct Unit {
  Slice r, s;
  bool new_r = true;  // the first unit of its R slice: R's second pass runs
  int lane = 0;
  uint32_t p = 0, r_index = 0;  // the first-pass partition, and which of its R slices
};
std::vector<Unit> join_units(const FirstPass& fr, const FirstPass& fs, uint64_t lane_r, uint64_t lane_s) {
  std::vector<Unit> units;
  int group = 0;
  for (uint32_t p = 0; p < fr.fanout; ++p) {
    if (fr.rows(p) == 0 || fs.rows(p) == 0) continue;
    const std::vector<Slice> ss = slices_of(fs, p, lane_s), rs = slices_of(fr, p, lane_r);
    for (size_t k = 0; k < rs.size(); ++k) {
      for (size_t j = 0; j < ss.size(); ++j) units.push_back(Unit{rs[k], ss[j], j == 0, group % 2, p, uint32_t(k)});
      ++group;
    }
  }
  return units;
}

// R's second passes ahead of the join phase (r_ahead): where the cache holds R and S whole (nothing
// of theirs crosses the link again) and device memory holds R's partitioned copy beside them, a
// stream of its own partitions every R slice into that copy while S's first pass keeps the link
// busy, behind R's first pass on each ring stream; the join phase then partitions S only. One
// H200 at 2^28 rows: 189.5 ms against 200.2 with r_ahead = off (the join phase 15.6 ms against
// 27.6, the first pass 1.3 ms longer beside R's second passes).
struct RAhead {
  bool on = false;
  Tuples out, staged;
  Stream stream{0};
  std::vector<std::vector<SecondPass>> pending;  // per first-pass partition, per R slice: `out` in order
  std::vector<std::vector<Partitioned>> parts;   // filled by finish() once the pass is synchronized
  void finish(Rank& rank, PartitionFn fn) {
    parts.resize(pending.size());
    uint64_t at = 0;
    for (size_t p = 0; p < pending.size(); ++p)
      for (SecondPass& sp : pending[p]) {
        parts[p].push_back(finish_second(rank, stream, sp, out.slice(at, sp.rows), fn));
        at += sp.rows;
      }
    pending.clear();
    staged = Tuples{};  // its room goes to the join's lanes
  }
};
// An event on each stream of the ring past what is queued there now.
std::vector<Event> past_ring(Rank& rank, const Ring& ring) {
  std::vector<Event> e;
  for (uint32_t i = 0; i < ring.slots; ++i) e.push_back(rank.record(Stream{int(i)}));
  return e;
}
RAhead start_r_ahead(Rank& rank, const TritonConfig& cfg, const MemoryPlan& mem, const FirstPass& fr,
                     const FirstPass& fs, const Tuples& r, TupleFormat sf, PartitionFn fn2, uint32_t slots,
                     const std::vector<Event>& r_done) {
  RAhead a;
  if (!cfg.r_ahead || !mem.read_by_copy || fr.cached_chunks < fr.chunks() || fs.cached_chunks < fs.chunks() ||
      rank.streams() <= int(slots))
    return a;
  std::vector<std::vector<Slice>> slices(fr.fanout);
  uint64_t most = 1;
  for (uint32_t p = 0; p < fr.fanout; ++p) {
    slices[p] = slices_of(fr, p, mem.lane_r);
    for (const Slice& sl : slices[p]) most = std::max(most, sl.rows);
  }
  // R's copy, a slice staged and its partitioning's scratch; then the join's two lanes for S (a
  // slice's output, staged and scratch each).
  const uint64_t need = (r.rows + 2 * most) * r.fmt.tuple_bytes() + 2 * 3 * mem.lane_s * sf.tuple_bytes();
  if (rank.capacity(MemSpace::Device) < need) return a;
  a.on = true;
  a.stream = Stream{int(slots)};
  a.out = rank.alloc_tuples(MemSpace::Device, r.rows, r.fmt, "triton.R.partitioned");
  a.staged = rank.alloc_tuples(MemSpace::Device, most, r.fmt, "triton.R.ahead.staged");
  for (const Event& e : r_done) rank.stream_wait(a.stream, e);
  a.pending.resize(fr.fanout);
  uint64_t at = 0;
  for (uint32_t p = 0; p < fr.fanout; ++p)
    for (const Slice& sl : slices[p]) {
      a.pending[p].push_back(
          start_second(rank, a.stream, fr, sl, a.staged, a.out.slice(at, sl.rows), Buffer{}, fn2, true));
      at += sl.rows;
    }
  return a;
}

void run_triton(Rank& rank, const JoinJob& job) {
  const TritonConfig cfg = triton_config(job.options);
  Inputs in = generate_inputs(rank, job, MemSpace::Pinned, MemSpace::Pinned);
  const Tuples& r = in.r.tuples;
  const Tuples& s = in.s.tuples;
  const uint64_t device = rank.capacity(MemSpace::Device);

  if (cfg.in_gpu && in_gpu_bytes(r.rows, s.rows, r.fmt, s.fmt) <= device) {
    // Everything fits: one copy of each relation over the link, then phj in device memory.
    begin_phase(rank, "copy");
    Tuples rd = rank.alloc_tuples(MemSpace::Device, r.rows, r.fmt, "triton.R");
    Tuples sd = rank.alloc_tuples(MemSpace::Device, s.rows, s.fmt, "triton.S");
    for (auto [dst, src] : {std::pair{&rd, &r}, std::pair{&sd, &s}}) {
      rank.copy(Stream{0}, dst->keys, 0, src->keys, 0, src->rows * src->fmt.key_bytes);
      rank.copy(Stream{0}, dst->vals, 0, src->vals, 0, src->rows * src->fmt.val_bytes);
    }
    OutputSink out = phj_join(rank, Stream{0}, rd, sd, cfg.phj, MemSpace::Device);
    report_output(rank, Stream{0}, out, in.r, in.s, MemSpace::Device);
    return;
  }
  if (rank.streams() < 2)
    throw RuntimeError("triton: the " + rank.backend() + " backend gives a rank " + std::to_string(rank.streams()) +
                       " stream(s), the plan needs 2");

  // The join phase's lanes: streams 0 and 1, sharing the SMs, or two with half of them each
  // (lane_sms = split, where the backend can confine kernels so; made before any work is queued,
  // numbered after the streams the ring uses).
  Stream lane_stream[2] = {Stream{0}, Stream{1}};
  if (cfg.split_sms) {
    const std::optional<Stream> a = rank.sm_share_stream(0, 2), b = rank.sm_share_stream(1, 2);
    if (a && b) lane_stream[0] = *a, lane_stream[1] = *b;
  }
  const uint32_t slots = ring_slots(rank, cfg);  // the plan keeps room for them, the first pass uses them
  const TritonPlan planned = plan_triton(cfg, device, r.rows, s.rows, r.fmt, s.fmt, slots);
  const RadixPlan& plan = planned.radix;
  const MemoryPlan& mem = planned.mem;
  const PartitionFn fn1{PartitionFn::Radix, plan.pass1_bits, 0, 0};
  const PartitionFn fn2{PartitionFn::Radix, plan.pass2_bits, plan.pass1_bits, 0};
  FirstPass fr = allocate_first(rank, r, cfg.chunks, fn1.fanout(), mem.cache_r, "triton.R");
  FirstPass fs = allocate_first(rank, s, cfg.chunks, fn1.fanout(), mem.cache_s, "triton.S");
  RAhead ahead;
  {
    const bool spills = fr.cached_chunks < fr.chunks() || fs.cached_chunks < fs.chunks();
    const TupleFormat widest{std::max(r.fmt.key_bytes, s.fmt.key_bytes), std::max(r.fmt.val_bytes, s.fmt.val_bytes)};
    const Ring ring = make_ring(rank, slots, std::max(fr.bounds[1], fs.bounds[1]), widest,
                                fn1.fanout(), !cfg.prefix_on_host, spills && cfg.spill_written_by_copy);
    uint32_t turn = 0;  // R's chunks, then S's, take the ring's slots in turn
    if (cfg.prefix_on_host) {
      // R's histograms first: R's first pass starts once they are in, while S's are counted.
      begin_phase(rank, "prefix_sum");
      Launched hr = count_on_host(rank, Stream{0}, r, fr, fn1, cfg);
      Launched hs = count_on_host(rank, Stream{1}, s, fs, fn1, cfg);
      const std::vector<uint64_t> counts_r = hr.get().values;
      begin_phase(rank, "partition");
      first_pass_from_host(rank, r, fr, counts_r, fn1, ring, turn, cfg);
      ahead = start_r_ahead(rank, cfg, mem, fr, fs, r, s.fmt, fn2, ring.slots, past_ring(rank, ring));
      first_pass_from_host(rank, s, fs, hs.get().values, fn1, ring, turn, cfg);
    } else {
      begin_phase(rank, "partition");
      auto hist_r = first_pass_staged(rank, r, fr, fn1, ring, turn, cfg);
      const std::vector<Event> r_done = past_ring(rank, ring);
      auto hist_s = first_pass_staged(rank, s, fs, fn1, ring, turn, cfg);
      auto fill = [&](const std::vector<std::pair<uint32_t, Launched>>& hist, FirstPass& fp) {
        fp.hist.assign(size_t(fp.chunks()) * fn1.fanout(), 0);
        for (const auto& [c, l] : hist) {
          const std::vector<uint64_t>& h = l.get().values;
          std::copy(h.begin(), h.end(), fp.hist.begin() + long(size_t(c) * fn1.fanout()));
        }
      };
      fill(hist_r, fr);  // R's histograms are in while S's first pass runs
      ahead = start_r_ahead(rank, cfg, mem, fr, fs, r, s.fmt, fn2, ring.slots, r_done);
      fill(hist_s, fs);
    }
    rank.sync_all();
    if (ahead.on) ahead.finish(rank, fn2);
  }  // the ring's buffers go before the join's lanes take their room

  begin_phase(rank, "join");
  const std::vector<Unit> units = join_units(fr, fs, mem.lane_r, mem.lane_s);
  uint64_t most_r = 1, most_s = 1;
  for (const Unit& u : units) most_r = std::max(most_r, u.r.rows), most_s = std::max(most_s, u.s.rows);
  Lane lanes[2];
  for (int i = 0; i < 2; ++i) {
    const std::string t = "triton.lane" + std::to_string(i);
    if (!ahead.on) lanes[i].r_out = rank.alloc_tuples(MemSpace::Device, most_r, r.fmt, t + ".R");
    lanes[i].s_out = rank.alloc_tuples(MemSpace::Device, most_s, s.fmt, t + ".S");
    if (mem.read_by_copy) {
      if (!ahead.on) lanes[i].r_staged = rank.alloc_tuples(MemSpace::Device, most_r, r.fmt, t + ".R.staged");
      lanes[i].s_staged = rank.alloc_tuples(MemSpace::Device, most_s, s.fmt, t + ".S.staged");
    } else {
      lanes[i].r_layout = rank.alloc(MemSpace::Device, layout_words(most_r, cfg.chunks, fn2.fanout()) * 8, t + ".R.layout");
      lanes[i].s_layout = rank.alloc(MemSpace::Device, layout_words(most_s, cfg.chunks, fn2.fanout()) * 8, t + ".S.layout");
    }
  }
  const TableKind table = cfg.phj.table == TableKind::HashRowId ? TableKind::LinearProbing : cfg.phj.table;
  OutputSink sink(rank, cfg.output_space, r.fmt, s.fmt, "triton.out");
  // Output segments: in pinned memory, one for the whole join's rows (one per S row, a
  // primary-key join's output), not one per slice: a fresh pinned segment per partition cost a
  // cudaHostAlloc of its ~100 MB (40 ms on an H100 host) while the GPU waited, and Direct output
  // overflowed the previous partition's leftover and ran twice. In device memory, segments of
  // the largest S slice's rows, as the cache's sizing left room for.
  const uint64_t segment_rows = cfg.output_space == MemSpace::Device
                                    ? most_s
                                    : output_segment_rows(rank, cfg.output_space, r.fmt, s.fmt, s.rows, most_s);
  const OutputSizing sizing{segment_rows, segment_rows};
  // Everything of a unit runs on its lane's stream, so a lane's buffers are reused in stream
  // order. A unit's second pass is queued behind the previous join of its lane (whose buffers it
  // reuses), while the other lane joins; the host waits for a second pass's result (its offsets,
  // or in place its histograms) only when the unit's join is next.
  const size_t N = units.size();
  std::vector<size_t> next_on_lane(N, N);
  size_t first_on_lane[2] = {N, N}, last[2] = {N, N};
  for (size_t u = 0; u < N; ++u) {
    const int l = units[u].lane;
    (last[l] < N ? next_on_lane[last[l]] : first_on_lane[l]) = u;
    last[l] = u;
  }
  std::vector<SecondPass> counted_r(N), counted_s(N);
  auto count = [&](size_t u) {
    if (u >= N) return;
    const Unit& x = units[u];
    const Lane& lane = lanes[x.lane];
    const Stream st = lane_stream[x.lane];
    if (x.new_r && !ahead.on)
      counted_r[u] = start_second(rank, st, fr, x.r, lane.r_staged, lane.r_out, lane.r_layout, fn2, mem.read_by_copy);
    counted_s[u] = start_second(rank, st, fs, x.s, lane.s_staged, lane.s_out, lane.s_layout, fn2, mem.read_by_copy);
  };
  Partitioned lane_r2[2];  // the R slice each lane holds partitioned
  struct Ready {
    Partitioned r, s;
  };
  std::vector<Ready> ready(N);
  std::vector<bool> prepared(N, false);
  auto prepare = [&](size_t u) {
    if (u >= N || prepared[u]) return;
    prepared[u] = true;
    const Unit& x = units[u];
    const Lane& lane = lanes[x.lane];
    if (x.new_r)
      lane_r2[x.lane] = ahead.on ? ahead.parts[x.p][x.r_index]
                                 : finish_second(rank, lane_stream[x.lane], counted_r[u], lane.r_out, fn2);
    ready[u].r = lane_r2[x.lane];
    ready[u].s = finish_second(rank, lane_stream[x.lane], counted_s[u], lane.s_out, fn2);
    counted_r[u] = counted_s[u] = SecondPass{};
  };
  for (size_t u : first_on_lane) count(u);
  prepare(0);
  // A counted join's units are read once all are queued: the host does not wait for each unit's
  // count before it queues the next join.
  std::vector<Launched> counts;
  for (size_t u = 0; u < N; ++u) {
    const Stream st = lane_stream[units[u].lane];
    const Partitioned r2 = std::move(ready[u].r), s2 = std::move(ready[u].s);
    ready[u] = Ready{};
    if (cfg.phj.output == OutputMode::CountOnly) {
      counts.push_back(rank.launch(st, PartitionedJoinOp{r2, s2, sink.empty_output(), 0, OutputMode::CountOnly, table}));
    } else {
      // Direct output: room for a primary-key join's rows of this unit before it runs, so that it
      // does not overflow a segment's leftover and run again.
      if (cfg.phj.output == OutputMode::Direct) sink.reserve(direct_output_estimate(0, s2.all.rows), segment_rows);
      run_join(
          rank, st, cfg.phj.output, sink, sizing,
          [&](const JoinOutput& out, uint64_t first, OutputMode mode) -> Op {
            return PartitionedJoinOp{r2, s2, out, first, mode, table};
          },
          [&] {  // the next unit's second pass overlaps this join, if it is the other lane's
            if (u + 1 < N && units[u + 1].lane != units[u].lane) prepare(u + 1);
          });
    }
    count(next_on_lane[u]);  // behind this join, whose lane's buffers it reuses
    prepare(u + 1);
  }
  for (const Launched& c : counts) sink.count_unwritten(c.get().count);
  report_output(rank, Stream{0}, sink, in.r, in.s, MemSpace::Device);
}

// The link is the tightest resource, each direction on its own: R and S cross it once towards
// the device, and what the cache does not hold is written to the host and read back; the output
// (in pinned memory) goes to the host. The device side (phj's passes) runs beside it. The cache is
// the plan's: cache_bytes, or by default what the device memory the backend gives (the job's)
// leaves after the working buffers of uniform partitions (the fewest bytes they can take); where
// R and S fit, the in-GPU plan copies them over once. Without the device memory, a default cache
// counts nothing as spilled: still a lower bound.
Bound triton_bound(const JoinJob& job, const ClusterShape&, const Bandwidths& bw) {
  const Workload& w = job.workload;
  const TritonConfig cfg = triton_config(job.options);
  const TupleFormat rf = tuple_format(w.r), sf = tuple_format(w.s);
  const double rb = tuple_bytes_total(w.r), sb = tuple_bytes_total(w.s), in = rb + sb;
  const Bound device = memory_bound(phj_memory_bytes(w.r.rows, w.s.rows, rf, sf, cfg.phj, bound_output_bytes(w, cfg.phj.output)),
                                    bw, "partition passes + join over R and S, output");
  if (bw.h2d <= 0) return device;
  const uint64_t dev = job.device_memory;
  const bool in_gpu = cfg.in_gpu && dev > 0 && in_gpu_bytes(w.r.rows, w.s.rows, rf, sf) <= dev;
  double spilled = 0;
  if (!in_gpu && (cfg.cache_bytes >= 0 || dev > 0)) {
    const MemoryPlan mem = plan_triton(cfg, dev, w.r.rows, w.s.rows, rf, sf, 4).mem;  // the default 4 streams
    auto cached_bytes = [&](uint64_t rows, TupleFormat f, uint64_t cache) {
      const std::vector<uint64_t> bounds = chunk_bounds(rows, cfg.chunks);
      return double(bounds[cached_chunks(bounds, f.tuple_bytes(), cache)]) * f.tuple_bytes();
    };
    const double cached = cached_bytes(w.r.rows, rf, mem.cache_r) + cached_bytes(w.s.rows, sf, mem.cache_s);
    spilled = std::max(0.0, in - cached);
  }
  const bool out_known = !in_gpu && (cfg.cache_bytes >= 0 || dev > 0);
  const double out = out_known && cfg.output_space == MemSpace::Pinned ? bound_output_bytes(w, cfg.phj.output) : 0.0;
  const Bound link{std::max(in + spilled, spilled + out) / bw.h2d,
                   "link " + rate_text(bw.h2d) + " each way: inputs once, spilled partitions written and read back" +
                       (out > 0 ? ", output" : "")};
  return link.seconds >= device.seconds ? link : device;
}

}  // namespace

StrategyInfo triton_strategy() {
  StrategyInfo i = strategy_info(
      "triton",
      "out-of-core partitioned join (lutz2022): chunked prefix sum, first pass cached in device memory and spilled to "
      "pinned host memory, second pass + join per partition on two streams",
      1, 1, add_triton_options, run_triton, triton_bound);
  // R, S and their spilled partitions wait in pinned host memory, and the output when it goes there.
  i.host_bytes = [](const JoinJob& job, const ClusterShape& shape) {
    const Workload& w = job.workload;
    return uint64_t(2 * tuple_bytes_per_rank(w, shape.size()));
  };
  return i;
}

}  // namespace joinlab
