// triton: lutz2022's out-of-core partitioned hash join (the Triton join, section 5). R and S wait
// in pinned host memory, reachable by the GPU over its link. The first pass partitions both by
// the low key bits into partitions that two pairs of fit the device's working buffers: a
// chunked prefix sum (one histogram per input chunk, on the GPU or the CPU) lays the output out
// partition-major, and the partitioner (ChunkPartitionOp) writes the first chunks of every
// partition into a cache in device memory and the rest into pinned host memory (the spill).
// Then every first-pass partition in turn is partitioned again on the device (its cached part
// read in place, its spilled part over the link by the kernel or by copies into device memory)
// and joined per sub-partition (PartitionedJoinOp, as phj). Partitions alternate between two
// streams, so one partition's link reads overlap the previous one's second pass and join; the
// second pass's histograms are queued two partitions ahead and the next partition's second pass
// is queued while this one joins. The second pass is laid out on the device (histograms into a
// device buffer, a scan, the partitioner reading its offsets there): the host handles no
// per-chunk offsets, only each partition's totals, so it does not keep the GPU waiting.
// When R and S fit in device memory with phj's buffers, the plan is phj on device copies.
#include <algorithm>

#include "core/common/error.hpp"
#include "core/strategies/rank_joins.hpp"

namespace joinlab {

namespace {

struct TritonConfig {
  PhjConfig phj;               // the in-GPU plan, the second pass's bits (partition_budget), the join
  uint32_t pass1_bits = 0;     // 0 = from device memory
  uint32_t chunks = 128;       // first-pass chunks per relation
  bool prefix_on_host = false;
  Partitioner partitioner = Partitioner::Hierarchical;
  bool spill_by_copy = false;  // spill_read = copy
  int64_t cache_bytes = -1;    // -1 = what is free after the working buffers
  uint32_t flush_bytes = 4096;
  MemSpace output_space = MemSpace::Pinned;
  bool in_gpu = true;          // fall back to phj when R and S fit
};

void add_triton_options(po::options_description& d) {
  add_phj_options(d);
  d.add_options()("pass1_bits", int_option("pass1_bits", 0, 0, kMaxBitsPerPass),
                  "radix bits of the first pass; 0 = enough for two partition pairs to fit a quarter of device memory, "
                  "and for the second pass to need at most 2^11 partitions")(
      "chunks", int_option("chunks", 128, 1, 1 << 16),
      "chunks each relation is cut into for the first pass (one histogram per chunk, the cache's unit)")(
      "prefix_sum", choice_option("prefix_sum", {"gpu", "cpu"}, "gpu"),
      "where the first pass's chunked histograms are counted: on the GPU (reading the inputs over the link) or on "
      "the host's CPU threads")(
      "partitioner", choice_option("partitioner", {"shared", "hierarchical"}, "hierarchical"),
      "first-pass writes: shared (aligned 128-byte flushes from shared memory) or hierarchical (a device-memory "
      "buffer per partition flushed in flush_bytes writes)")(
      "flush_bytes", int_option("flush_bytes", 4096, 128, 1 << 20),
      "bytes of the hierarchical partitioner's device-memory buffer per (block, partition)")(
      "spill_read", choice_option("spill_read", {"kernel", "copy"}, "kernel"),
      "how the second pass reads spilled chunks: the partition kernel reads host memory (kernel), or copies "
      "(cudaMemcpyAsync) bring them to device memory first (copy)")(
      "cache_bytes", int_option("cache_bytes", -1, -1, int64_t(1) << 50),
      "device memory caching the first chunks of every partition, split between R and S by size; -1 = what is "
      "free after the working buffers")(
      "output_space", choice_option("output_space", {"device", "pinned"}, "pinned"),
      "where the output rows go (pinned: results larger than the GPU, as lutz2022)")(
      "in_gpu", choice_option("in_gpu", {"auto", "off"}, "auto"),
      "auto: run phj in device memory when R and S fit with its buffers; off: always the out-of-core plan");
}

TritonConfig triton_config(const po::variables_map& vm) {
  TritonConfig c;
  c.phj = phj_config(vm);
  c.pass1_bits = uint32_t(vm["pass1_bits"].as<int64_t>());
  c.chunks = uint32_t(vm["chunks"].as<int64_t>());
  c.prefix_on_host = vm["prefix_sum"].as<std::string>() == "cpu";
  c.partitioner = vm["partitioner"].as<std::string>() == "shared" ? Partitioner::Shared : Partitioner::Hierarchical;
  c.flush_bytes = uint32_t(vm["flush_bytes"].as<int64_t>());
  c.spill_by_copy = vm["spill_read"].as<std::string>() == "copy";
  c.cache_bytes = vm["cache_bytes"].as<int64_t>();
  c.output_space = mem_space(vm["output_space"].as<std::string>());
  c.in_gpu = vm["in_gpu"].as<std::string>() == "auto";
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
// of it, the other half for the second pass's output) and the second at most kMaxBitsPerPass.
RadixPlan triton_plan(uint64_t r_rows, uint64_t s_rows, TupleFormat rf, TupleFormat sf, uint64_t device,
                      const TritonConfig& cfg) {
  uint32_t bits = plan_radix(r_rows, rf.tuple_bytes(), rf.key_bytes, cfg.phj.budget, cfg.phj.radix_bits, 1).bits();
  uint32_t p1 = cfg.pass1_bits;
  if (p1 == 0) {
    const double pair = double(r_rows) * rf.tuple_bytes() + double(s_rows) * sf.tuple_bytes();
    while (p1 < kMaxBitsPerPass && 2.0 * pair / double(1ULL << p1) > double(device) / 4) ++p1;
    p1 = std::max<uint32_t>({p1, 1, bits > kMaxBitsPerPass ? bits - kMaxBitsPerPass : 0});
  }
  bits = std::max(bits, p1);
  RadixPlan p;
  p.pass1_bits = p1;
  p.pass2_bits = std::min<uint32_t>(bits - p1, kMaxBitsPerPass);
  return p;
}

// The second pass of a partition cuts its cached and its spilled part each into chunks of
// kSecondPassChunkRows (a ChunkPartitionOp runs a thread block per chunk: the two parts whole kept
// two blocks busy, 11 ms for a 2Mi-row partition on an H100).
constexpr uint64_t kSecondPassChunkRows = 1 << 15;
// Chunks of a partition of `rows` rows at most, however they split between cache and spill.
uint64_t second_pass_chunks(uint64_t rows) {
  return (rows + kSecondPassChunkRows - 1) / kSecondPassChunkRows + 1;
}
// Words of a relation's second-pass layout buffer (its chunks' counts, scanned in place into
// their offsets) for partitions of up to max_rows rows.
uint64_t layout_words(uint64_t max_rows, uint32_t fanout2) { return second_pass_chunks(max_rows) * fanout2; }

// Device memory the first pass's cache takes: cache_bytes, or by default what is left of
// `device` after the join phase's working buffers (per stream the second pass's outputs of the
// largest partitions, max_r and max_s rows, their staged spilled parts and their layout buffers;
// the output segments when they are in device memory) and some headroom for the partitioners'
// buffers and the join's scratch.
uint64_t cache_bytes_of(const TritonConfig& cfg, uint64_t device, uint64_t max_r, uint64_t max_s, TupleFormat rf,
                        TupleFormat sf, uint32_t fanout2) {
  if (cfg.cache_bytes >= 0) return uint64_t(cfg.cache_bytes);
  const uint64_t lane_bytes = (max_r * rf.tuple_bytes() + max_s * sf.tuple_bytes()) * (cfg.spill_by_copy ? 2 : 1) +
                              (layout_words(max_r, fanout2) + layout_words(max_s, fanout2)) * sizeof(uint64_t);
  const uint64_t row_bytes = uint64_t(rf.key_bytes) + rf.val_bytes + sf.val_bytes;
  const uint64_t working =
      2 * lane_bytes + (cfg.output_space == MemSpace::Device ? 2 * std::max<uint64_t>(max_s, 1) * row_bytes : 0);
  const uint64_t reserve = working + working / 8 + (uint64_t(64) << 20);
  return device > reserve ? device - reserve : 0;
}

// R's share of the cache (the rest is S's): split by their sizes.
uint64_t cache_share_r(uint64_t cache, double r_bytes, double s_bytes) {
  return r_bytes + s_bytes > 0 ? uint64_t(double(cache) * r_bytes / (r_bytes + s_bytes)) : 0;
}

// Rows of a relation of `rows` rows cut into `chunks` chunks that a cache of `cache_bytes` holds:
// its first whole chunks (partition_first's rule).
uint64_t cached_rows(uint64_t rows, uint32_t chunks, uint32_t tuple_bytes, uint64_t cache_bytes) {
  const std::vector<uint64_t> bounds = chunk_bounds(rows, chunks);
  uint32_t k = 0;
  while (k + 1 < bounds.size() && bounds[k + 1] * tuple_bytes <= cache_bytes) ++k;
  return bounds[k];
}

// One relation's first pass: chunk bounds, the layout from the chunk histograms, and its outputs.
struct FirstPass {
  std::vector<uint64_t> bounds;  // chunk row offsets of the input
  ChunkLayout layout;
  uint32_t cached_chunks = 0;
  Tuples cache, spill;
  uint64_t max_rows = 0;  // rows of its largest partition
  Tuples part_cache(uint32_t p) const {
    return cache.slice(layout.cache_starts[p], layout.cache_starts[p + 1] - layout.cache_starts[p]);
  }
  Tuples part_spill(uint32_t p) const {
    return spill.slice(layout.spill_starts[p], layout.spill_starts[p + 1] - layout.spill_starts[p]);
  }
};

Launched count_chunks(Rank& rank, Stream st, const Tuples& in, const std::vector<uint64_t>& bounds, PartitionFn fn,
                      bool on_host) {
  HistogramOp h{in, fn, bounds};
  h.placement = on_host ? HistogramOp::Placement::Host : HistogramOp::Placement::Device;
  return rank.launch(st, h);
}

// The first pass of one relation, once its histograms are in: the cache takes as many whole
// chunks as `cache_bytes` holds.
Launched partition_first(Rank& rank, Stream st, const Tuples& in, FirstPass& fp, const std::vector<uint64_t>& hist,
                         PartitionFn fn, uint64_t cache_bytes, const TritonConfig& cfg, const std::string& tag) {
  const uint32_t k = uint32_t(fp.bounds.size() - 1);
  const uint64_t cached_to = cached_rows(in.rows, k, in.fmt.tuple_bytes(), cache_bytes);
  while (fp.bounds[fp.cached_chunks] < cached_to) ++fp.cached_chunks;
  fp.layout = chunked_layout(hist, fn.fanout(), fp.cached_chunks);
  for (uint32_t p = 0; p < fn.fanout(); ++p) fp.max_rows = std::max(fp.max_rows, fp.layout.rows(p));
  const uint64_t cached = fp.bounds[fp.cached_chunks], spilled = in.rows - cached;
  if (cached) fp.cache = rank.alloc_tuples(MemSpace::Device, cached, in.fmt, tag + ".cache");
  // The spill pinned before the join began (reserve_spill) takes it, unless skew left the cache
  // smaller than uniform partitions would: then the rest is pinned now, on the clock.
  if (spilled > fp.spill.capacity) fp.spill = rank.alloc_tuples(MemSpace::Pinned, spilled, in.fmt, tag + ".spill");
  fp.spill = spilled ? fp.spill.slice(0, spilled) : Tuples{};
  ChunkPartitionOp op;
  for (uint32_t c = 0; c < k; ++c) op.chunks.push_back(in.slice(fp.bounds[c], fp.bounds[c + 1] - fp.bounds[c]));
  op.fn = fn;
  op.offsets = fp.layout.offsets;
  op.cached_chunks = fp.cached_chunks;
  op.cache = fp.cache;
  op.spill = fp.spill;
  op.partitioner = cfg.partitioner;
  op.flush_bytes = cfg.flush_bytes;
  return rank.launch(st, op);
}

// Pins each relation's spill before the join is timed: pinning host memory runs at a few GB/s
// (cudaHostAlloc of 17 GiB took 8 s on an H200 host), a setup cost as the inputs' own, which a
// database pays once for its buffer pool, not per join. Sized for uniform partitions (the largest
// cache, the fewest spilled rows); partition_first pins more if skew spills more.
void reserve_spill(Rank& rank, const Tuples& r, const Tuples& s, uint64_t device, const RadixPlan& plan,
                   const TritonConfig& cfg, FirstPass& fr, FirstPass& fs) {
  const uint32_t F = 1u << plan.pass1_bits;
  const uint64_t cache = cache_bytes_of(cfg, device, (r.rows + F - 1) / F, (s.rows + F - 1) / F, r.fmt, s.fmt,
                                        1u << plan.pass2_bits);
  const uint64_t cache_r = cache_share_r(cache, double(r.bytes()), double(s.bytes()));
  for (auto [in, fp, share, tag] : {std::tuple{&r, &fr, cache_r, "triton.R"}, std::tuple{&s, &fs, cache - cache_r, "triton.S"}}) {
    const uint64_t spilled = in->rows - cached_rows(in->rows, cfg.chunks, in->fmt.tuple_bytes(), share);
    if (spilled) fp->spill = rank.alloc_tuples(MemSpace::Pinned, spilled, in->fmt, std::string(tag) + ".spill");
  }
}

// Device buffers one stream's partitions go through: the second pass's output, (spill_read =
// copy) the spilled part brought over, and the second pass's layout (its chunks' counts, scanned
// into their offsets in place).
struct Lane {
  Tuples r_out, s_out, r_staged, s_staged;
  Buffer r_layout, s_layout;
};

// The second pass of partition p of one relation into `out`: its cached and its spilled part, cut
// into chunks, are the chunks of a ChunkPartitionOp whose output is all device memory. It is laid
// out on the device: each part's segmented histogram leaves its chunks' counts in `layout`,
// partition-major (chunk c of partition q at word q * chunks + c), a scan turns them into the
// chunks' offsets in place, and the partitioner reads them there. The host only adds up each
// partition's totals (the histograms' results, fanout words) into the partitions' starts for the
// join: laying out 128 chunks x 2048 partitions on the host and uploading them took ~3.5 ms per
// relation and partition while the GPU waited.
struct SecondPass {
  std::vector<Tuples> pieces;    // the chunks
  std::vector<Launched> counts;  // per part: its chunks' histogram, whose result is the totals
  Buffer layout;
};
SecondPass start_second(Rank& rank, Stream st, const FirstPass& fp, uint32_t p, const Tuples& staged,
                        const Buffer& layout, PartitionFn fn, bool by_copy) {
  SecondPass sp;
  sp.layout = layout;
  const Tuples cached = fp.part_cache(p);
  Tuples spilled = fp.spill.keys ? fp.part_spill(p) : Tuples{};
  if (spilled.rows && by_copy) {
    const TupleFormat f = spilled.fmt;
    rank.copy(st, staged.keys, 0, spilled.keys, spilled.offset * f.key_bytes, spilled.rows * f.key_bytes);
    rank.copy(st, staged.vals, 0, spilled.vals, spilled.offset * f.val_bytes, spilled.rows * f.val_bytes);
    spilled = staged.slice(0, spilled.rows);
  }
  std::vector<std::pair<Tuples, std::vector<uint64_t>>> parts;
  uint64_t chunks = 0;
  for (const Tuples& part : {cached, spilled}) {
    if (!part.rows) continue;
    parts.push_back({part, chunk_bounds(part.rows, uint32_t((part.rows + kSecondPassChunkRows - 1) / kSecondPassChunkRows))});
    chunks += parts.back().second.size() - 1;
  }
  for (const auto& [part, bounds] : parts) {
    HistogramOp h{part, fn, {}};
    if (bounds.size() > 2) h.in_segments = bounds;
    h.counts_out = layout;
    h.counts_first = sp.pieces.size();
    h.counts_stride = chunks;
    for (size_t c = 0; c + 1 < bounds.size(); ++c) sp.pieces.push_back(part.slice(bounds[c], bounds[c + 1] - bounds[c]));
    sp.counts.push_back(rank.launch(st, h));
  }
  return sp;
}
Partitioned finish_second(Rank& rank, Stream st, SecondPass& sp, const Tuples& out, PartitionFn fn) {
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

  const RadixPlan plan = triton_plan(r.rows, s.rows, r.fmt, s.fmt, device, cfg);
  const PartitionFn fn1{PartitionFn::Radix, plan.pass1_bits, 0, 0};
  const PartitionFn fn2{PartitionFn::Radix, plan.pass2_bits, plan.pass1_bits, 0};
  const uint32_t F = fn1.fanout();

  FirstPass fr, fs;
  reserve_spill(rank, r, s, device, plan, cfg, fr, fs);

  // R's histograms first: R's first pass starts as soon as they are in, while S's are counted
  // (on the host's CPUs with prefix_sum = cpu, beside R's partitioning on the GPU).
  begin_phase(rank, "prefix_sum");
  fr.bounds = chunk_bounds(r.rows, cfg.chunks);
  fs.bounds = chunk_bounds(s.rows, cfg.chunks);
  Launched hr = count_chunks(rank, Stream{0}, r, fr.bounds, fn1, cfg.prefix_on_host);
  Launched hs = count_chunks(rank, Stream{1}, s, fs.bounds, fn1, cfg.prefix_on_host);
  const std::vector<uint64_t> hist_r = hr.get().values;

  begin_phase(rank, "partition");
  // Working buffers: per stream the second pass's outputs of the largest partitions (and their
  // staged spilled parts), plus the output segment when it is in device memory. R's cache is
  // sized before S's histograms are in, with S's partitions taken as uniform; S's cache is what
  // is left once its largest partition is known (less when S is skewed).
  auto largest = [&](const std::vector<uint64_t>& h) {
    uint64_t m = 0;
    for (uint32_t p = 0; p < F; ++p) {
      uint64_t n = 0;
      for (size_t c = 0; c * F < h.size(); ++c) n += h[c * F + p];
      m = std::max(m, n);
    }
    return m;
  };
  const uint64_t max_r = largest(hist_r);
  const uint64_t cache_r = cache_share_r(cache_bytes_of(cfg, device, max_r, (s.rows + F - 1) / F, r.fmt, s.fmt, fn2.fanout()),
                                         double(r.bytes()), double(s.bytes()));
  Launched pr = partition_first(rank, Stream{0}, r, fr, hist_r, fn1, cache_r, cfg, "triton.R");
  const std::vector<uint64_t> hist_s = hs.get().values;
  const uint64_t max_s = largest(hist_s);
  const uint64_t out_rows = std::max<uint64_t>(max_s, 1);  // a partition's output in a primary-key join
  const uint64_t cache = cache_bytes_of(cfg, device, max_r, max_s, r.fmt, s.fmt, fn2.fanout());
  Launched ps = partition_first(rank, Stream{1}, s, fs, hist_s, fn1, cache > cache_r ? cache - cache_r : 0, cfg, "triton.S");
  pr.get();
  ps.get();

  begin_phase(rank, "join");
  Lane lanes[2];
  for (int i = 0; i < 2; ++i) {
    const std::string t = "triton.lane" + std::to_string(i);
    lanes[i].r_out = rank.alloc_tuples(MemSpace::Device, std::max<uint64_t>(max_r, 1), r.fmt, t + ".R");
    lanes[i].s_out = rank.alloc_tuples(MemSpace::Device, std::max<uint64_t>(max_s, 1), s.fmt, t + ".S");
    if (cfg.spill_by_copy) {
      lanes[i].r_staged = rank.alloc_tuples(MemSpace::Device, std::max<uint64_t>(max_r, 1), r.fmt, t + ".R.staged");
      lanes[i].s_staged = rank.alloc_tuples(MemSpace::Device, std::max<uint64_t>(max_s, 1), s.fmt, t + ".S.staged");
    }
    lanes[i].r_layout = rank.alloc(MemSpace::Device, layout_words(max_r, fn2.fanout()) * sizeof(uint64_t), t + ".R.layout");
    lanes[i].s_layout = rank.alloc(MemSpace::Device, layout_words(max_s, fn2.fanout()) * sizeof(uint64_t), t + ".S.layout");
  }
  const TableKind table = cfg.phj.table == TableKind::HashRowId ? TableKind::LinearProbing : cfg.phj.table;
  OutputSink sink(rank, cfg.output_space, r.fmt, s.fmt, "triton.out");
  // Output segments: in pinned memory, one for the whole join's rows (one per S row, a
  // primary-key join's output), not one per partition: a fresh pinned segment per partition cost
  // a cudaHostAlloc of its ~100 MB (40 ms on an H100 host) while the GPU waited, and Direct
  // output overflowed the previous partition's leftover and ran twice. In device memory,
  // segments of the largest partition's rows, as the cache's sizing left room for.
  const uint64_t segment_rows = cfg.output_space == MemSpace::Device
                                    ? out_rows
                                    : output_segment_rows(rank, cfg.output_space, r.fmt, s.fmt, s.rows, out_rows);
  const OutputSizing sizing{segment_rows, segment_rows};
  // Everything of partition p runs on stream p % 2, so a lane's buffers are reused in stream
  // order. The host never waits for the GPU mid-pipeline: partition p's second-pass histograms
  // are queued two partitions ahead (behind partition p - 2's second pass, whose lane buffers
  // their staged copies reuse), and partition p + 1's second pass is laid out and queued while
  // partition p joins.
  std::vector<SecondPass> counted_r(F), counted_s(F);
  auto count = [&](uint32_t p) {
    if (p >= F) return;
    const int l = int(p % 2);
    counted_r[p] = start_second(rank, Stream{l}, fr, p, lanes[l].r_staged, lanes[l].r_layout, fn2, cfg.spill_by_copy);
    counted_s[p] = start_second(rank, Stream{l}, fs, p, lanes[l].s_staged, lanes[l].s_layout, fn2, cfg.spill_by_copy);
  };
  struct Ready {
    Partitioned r, s;
  };
  std::vector<Ready> ready(F);
  auto prepare = [&](uint32_t p) {
    if (p >= F) return;
    const int l = int(p % 2);
    ready[p].r = finish_second(rank, Stream{l}, counted_r[p], lanes[l].r_out, fn2);
    ready[p].s = finish_second(rank, Stream{l}, counted_s[p], lanes[l].s_out, fn2);
    counted_r[p] = counted_s[p] = SecondPass{};
    count(p + 2);  // same lane, behind this second pass
  };
  count(0);
  count(1);
  prepare(0);
  for (uint32_t p = 0; p < F; ++p) {
    const int l = int(p % 2);
    const Partitioned r2 = std::move(ready[p].r), s2 = std::move(ready[p].s);
    ready[p] = Ready{};
    if (r2.all.rows == 0 || s2.all.rows == 0) {
      prepare(p + 1);
      continue;
    }
    // Direct output: room for a primary-key join's rows of this partition before it runs, so that
    // it does not overflow a segment's leftover and run again.
    if (cfg.phj.output == OutputMode::Direct) sink.reserve(direct_output_estimate(0, s2.all.rows), segment_rows);
    run_join(
        rank, Stream{l}, cfg.phj.output, sink, sizing,
        [&](const JoinOutput& out, uint64_t first, OutputMode mode) -> Op {
          return PartitionedJoinOp{r2, s2, out, first, mode, table};
        },
        [&] { prepare(p + 1); });  // the next partition's second pass overlaps this join
  }
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
    const RadixPlan plan = triton_plan(w.r.rows, w.s.rows, rf, sf, dev, cfg);
    const uint32_t F = 1u << plan.pass1_bits;
    const uint64_t cache =
        cache_bytes_of(cfg, dev, (w.r.rows + F - 1) / F, (w.s.rows + F - 1) / F, rf, sf, 1u << plan.pass2_bits);
    const uint64_t cache_r = cache_share_r(cache, rb, sb);
    const double cached = double(cached_rows(w.r.rows, cfg.chunks, rf.tuple_bytes(), cache_r)) * rf.tuple_bytes() +
                          double(cached_rows(w.s.rows, cfg.chunks, sf.tuple_bytes(), cache - cache_r)) * sf.tuple_bytes();
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
