// mgsmj: maltenberger2025's multi-GPU sort-merge join on the g GPUs (ranks) of one node. R and S
// wait in pinned host memory, each rank holding its slice. Three phases:
//  * sort: every relation is cut into chunksets of g chunks (chunk c of every rank's slice, of
//    chunk_rows or what device memory holds). A chunkset is copied in, sorted across the g GPUs
//    with the radix-based multi-GPU sort (section 3.2: a scatter by the most significant key bits,
//    one all-to-all peer exchange, a local sort of the rest) and copied back, while the next
//    chunkset's copy runs (two device buffers per stage, copies on a stream of their own).
//  * merge: each rank's k sorted runs (one per chunkset) merged on the host's CPUs
//    (MultiwayMergeOp; skipped when k = 1).
//  * join: the merged R and S are cut into at least parts_per_gpu parts that fit device memory;
//    each part is copied in and merge-joined (MergeJoinOp) on one of two streams, its output rows
//    written to pinned host memory.
// Deviation from the paper, for the SPMD model (every rank holds its own slice of host memory):
// the sort's splitters are global, not per chunkset. The most-significant-bit histograms of every
// chunk of R and S are counted first (on the host's CPUs) and exchanged (allgather); the buckets
// are then split into g contiguous ranges of near-equal R + S rows, and GPU j receives range j of
// every chunkset of both relations. Its runs and its merged relations therefore hold key range j
// only, so the merge and the join need no data of another rank, and the parts of the join (whole
// buckets) never split a key: a hot key is joined in one part and counted once. The cost is
// balance: a range is whole buckets, so one hot bucket weighs on one GPU (the paper refines the
// buckets that span GPUs, which this version does not).
#include <algorithm>
#include <cmath>

#include "core/common/error.hpp"
#include "core/strategies/rank_joins.hpp"

namespace joinlab {

namespace {

struct MgsmjConfig {
  uint64_t chunk_rows = 0;  // 0 = from device memory
  uint32_t bucket_bits = 12;
  uint32_t parts_per_gpu = 3;
  OutputMode output = OutputMode::Direct;
};

void add_mgsmj_options(po::options_description& d) {
  d.add_options()("sort", choice_option("sort", {"radix", "merge"}, "radix"),
                  "multi-GPU sort of a chunkset: radix (scatter by the most significant bits, one all-to-all, "
                  "local sort); merge is not implemented yet and is rejected")(
      "chunk_rows", int_option("chunk_rows", 0, 0, int64_t(1) << 40),
      "rows of one GPU's chunk of a chunkset; 0 = what half of device memory holds with any skew")(
      "bucket_bits", int_option("bucket_bits", 12, 1, 16),
      "most significant key bits the sort's histograms count: the granularity of the GPUs' key ranges and of "
      "the join's parts")("parts_per_gpu", int_option("parts_per_gpu", 3, 1, 1 << 20),
                          "fewest parts a GPU's share of the join is cut into (more when a part would not fit)");
  add_output_option(d, "direct");
}

MgsmjConfig mgsmj_config(const po::variables_map& vm) {
  MgsmjConfig c;
  c.chunk_rows = uint64_t(vm["chunk_rows"].as<int64_t>());
  c.bucket_bits = uint32_t(vm["bucket_bits"].as<int64_t>());
  c.parts_per_gpu = uint32_t(vm["parts_per_gpu"].as<int64_t>());
  c.output = output_mode(vm);
  return c;
}

void check_mgsmj(const JoinJob& job) {
  const std::string sort = job.options["sort"].as<std::string>();
  if (sort != "radix")
    throw InputError("mgsmj: sort = " + sort + " is not implemented (the radix-based multi-GPU sort is: sort = radix)");
  for (const RelationSpec* s : {&job.workload.r, &job.workload.s})
    if (late_materialized(*s))
      throw InputError("mgsmj: relation " + s->name + " has " + std::to_string(s->payload_bytes.size()) +
                       " payload columns; mgsmj moves one payload column with the keys (payload_bytes needs one entry)");
}

// The buckets: the top bucket_bits of the bits the keys may occupy (a guess from the specs; keys
// above it count in the last bucket, so a wrong guess costs balance, never correctness).
PartitionFn msb_buckets(const Workload& w, uint32_t bucket_bits) {
  uint64_t domain = 1;
  for (const RelationSpec* s : {&w.r, &w.s})  // a foreign key's values are the referenced keys
    domain = std::max({domain, s->dist == KeyDist::ForeignKey ? 0 : s->rows, s->range_hi, s->zipf_domain});
  uint32_t bits = 1;
  while (bits < 64 && (domain >> bits) != 0) ++bits;
  if (w.s.dist == KeyDist::ForeignKey && w.s.match_rate < 1.0) ++bits;  // room for the keys that match nothing
  const uint32_t key_bits = 8u * std::max(w.r.key_bytes, w.s.key_bytes);
  bits = std::min(bits, key_bits);
  PartitionFn fn{PartitionFn::Radix, std::min(bucket_bits, bits), 0, 0};
  fn.shift = bits - fn.bits;
  if (bits < 64) fn.key_limit = (uint64_t(1) << bits) - 1;
  return fn;
}

std::vector<uint64_t> prefix(const std::vector<uint64_t>& v) {  // v.size() + 1 offsets
  std::vector<uint64_t> out(v.size() + 1, 0);
  for (size_t i = 0; i < v.size(); ++i) out[i + 1] = out[i] + v[i];
  return out;
}

// Every rank's histogram of every chunk of one relation (from the allgather), and where rank
// `me`'s rows go.
struct RelationPlan {
  std::string name;
  TupleFormat fmt;
  uint32_t chunks = 1;
  std::vector<uint64_t> bounds;  // this rank's chunk row offsets
  // hist[(i * chunks + c) * F + b]: rank i's chunk c, bucket b
  std::vector<uint64_t> hist;
  uint32_t F = 1;
  uint64_t rows(int i, uint32_t c, uint32_t b0, uint32_t b1) const {
    uint64_t n = 0;
    for (uint32_t b = b0; b < b1; ++b) n += hist[(size_t(i) * chunks + c) * F + b];
    return n;
  }
};

// Bucket ranges of the g GPUs: first[j] .. first[j + 1], near-equal R + S rows each.
std::vector<uint32_t> split_buckets(const std::vector<uint64_t>& totals, int g) {
  const std::vector<uint64_t> pre = prefix(totals);
  const uint32_t F = uint32_t(totals.size());
  std::vector<uint32_t> first(size_t(g) + 1, F);
  first[0] = 0;
  uint32_t b = 0;
  for (int j = 1; j < g; ++j) {
    const double target = double(pre.back()) * j / g;
    while (b < F && double(pre[b + 1]) <= target) ++b;
    // The bucket that crosses the target goes to the side it is nearer to.
    if (b < F && double(pre[b + 1]) - target < target - double(pre[b])) ++b;
    first[size_t(j)] = std::max(b, first[size_t(j) - 1]);
  }
  return first;
}

// Device buffers one chunkset goes through on a GPU.
struct SortLane {
  Tuples in, part, recv, sorted;
};

// The sort phase of one relation: returns this rank's k sorted runs, one after the other in one
// pinned buffer (run c at run_first[c]).
struct Runs {
  Tuples all;
  std::vector<uint64_t> first;  // k + 1 row offsets
};
Runs sort_chunksets(Rank& rank, const Tuples& host, const RelationPlan& p, const std::vector<uint32_t>& owner_first,
                    PartitionFn fn) {
  const int g = rank.size(), me = rank.id();
  const Stream compute{0}, send_stream{1}, recv_stream{2}, copy_stream{3};
  const TupleFormat f = p.fmt;
  auto dest_rows = [&](int from, uint32_t c, int to) {
    return p.rows(from, c, owner_first[size_t(to)], owner_first[size_t(to) + 1]);
  };
  // Rows this rank receives per chunkset, and where each sender's rows land.
  std::vector<uint64_t> received(p.chunks);
  uint64_t max_in = 1, max_recv = 1;
  for (uint32_t c = 0; c < p.chunks; ++c) {
    for (int i = 0; i < g; ++i) received[c] += dest_rows(i, c, me);
    max_in = std::max(max_in, p.bounds[c + 1] - p.bounds[c]);
    max_recv = std::max(max_recv, received[c]);
  }
  Runs runs;
  runs.first = prefix(received);
  runs.all = rank.alloc_tuples(MemSpace::Pinned, runs.first.back(), f, "mgsmj." + p.name + ".runs");

  SortLane lanes[2];
  for (int l = 0; l < 2; ++l) {
    const std::string t = "mgsmj." + p.name + ".lane" + std::to_string(l);
    lanes[l] = {rank.alloc_tuples(MemSpace::Device, max_in, f, t + ".in"),
                rank.alloc_tuples(MemSpace::Device, max_in, f, t + ".partitioned"),
                rank.alloc_tuples(MemSpace::Device, max_recv, f, t + ".recv"),
                rank.alloc_tuples(MemSpace::Device, max_recv, f, t + ".sorted")};
  }
  auto column_ranges = [&](const Tuples& t, uint64_t row, uint64_t n) {
    return std::vector<BufferRange>{{t.keys, row * f.key_bytes, n * f.key_bytes},
                                    {t.vals, row * f.val_bytes, n * f.val_bytes}};
  };
  Event copied[2], free_again[2];  // chunk in the lane's input; the lane's last chunkset copied back
  auto copy_in = [&](uint32_t c) {
    const int l = int(c % 2);
    if (free_again[l].impl()) rank.stream_wait(copy_stream, free_again[l]);
    const uint64_t first = p.bounds[c], n = p.bounds[c + 1] - first;
    rank.copy(copy_stream, lanes[l].in.keys, 0, host.keys, first * f.key_bytes, n * f.key_bytes);
    rank.copy(copy_stream, lanes[l].in.vals, 0, host.vals, first * f.val_bytes, n * f.val_bytes);
    copied[l] = rank.record(copy_stream);
  };
  copy_in(0);
  for (uint32_t c = 0; c < p.chunks; ++c) {
    const int l = int(c % 2);
    SortLane& lane = lanes[l];
    if (c + 1 < p.chunks) copy_in(c + 1);  // overlaps this chunkset's sort
    const uint64_t n = p.bounds[c + 1] - p.bounds[c];
    rank.stream_wait(compute, copied[l]);
    // Scatter by bucket: GPU j's buckets are contiguous, so its rows are too.
    rank.launch(compute, PartitionOp{lane.in.slice(0, n), {}, fn, lane.part});
    const Event partitioned = rank.record(compute);
    rank.stream_wait(send_stream, partitioned);
    if (free_again[l].impl()) rank.stream_wait(recv_stream, free_again[l]);  // lane.recv was sorted from
    // The all-to-all: in round k to rank me + k, from rank me - k (round 0 a local copy).
    std::vector<uint64_t> send_first(size_t(g) + 1, 0), recv_first(size_t(g) + 1, 0);
    for (int j = 0; j < g; ++j) {
      send_first[size_t(j) + 1] = send_first[size_t(j)] + dest_rows(me, c, j);
      recv_first[size_t(j) + 1] = recv_first[size_t(j)] + dest_rows(j, c, me);
    }
    std::vector<Event> moved;
    for (int k = 0; k < g; ++k) {
      const int to = (me + k) % g, from = (me - k + g) % g;
      const uint64_t ns = send_first[size_t(to) + 1] - send_first[size_t(to)];
      const uint64_t nr = recv_first[size_t(from) + 1] - recv_first[size_t(from)];
      if (k == 0) {
        for (int col = 0; col < 2 && ns; ++col) {
          const auto src = column_ranges(lane.part, send_first[size_t(me)], ns)[size_t(col)];
          const auto dst = column_ranges(lane.recv, recv_first[size_t(me)], ns)[size_t(col)];
          moved.push_back(rank.copy(compute, dst.buf, dst.off, src.buf, src.off, src.bytes));
        }
        continue;
      }
      if (nr) moved.push_back(rank.recv_v(recv_stream, from, column_ranges(lane.recv, recv_first[size_t(from)], nr), 0));
      if (ns) moved.push_back(rank.send_v(send_stream, to, column_ranges(lane.part, send_first[size_t(to)], ns), 0));
    }
    for (const Event& e : moved) rank.stream_wait(compute, e);
    rank.launch(compute, SortOp{lane.recv.slice(0, received[c]), lane.sorted, SortAlgo::Radix});
    rank.stream_wait(copy_stream, rank.record(compute));
    const uint64_t at = runs.first[c], m = received[c];
    rank.copy(copy_stream, runs.all.keys, at * f.key_bytes, lane.sorted.keys, 0, m * f.key_bytes);
    rank.copy(copy_stream, runs.all.vals, at * f.val_bytes, lane.sorted.vals, 0, m * f.val_bytes);
    free_again[l] = rank.record(copy_stream);
  }
  rank.sync_all();
  return runs;
}

// This rank's rows of one relation per bucket of its range (its merged relation, bucket by bucket).
std::vector<uint64_t> my_buckets(const RelationPlan& p, int g, uint32_t b0, uint32_t b1) {
  std::vector<uint64_t> n(b1 - b0, 0);
  for (int i = 0; i < g; ++i)
    for (uint32_t c = 0; c < p.chunks; ++c)
      for (uint32_t b = b0; b < b1; ++b) n[b - b0] += p.hist[(size_t(i) * p.chunks + c) * p.F + b];
  return n;
}

void run_mgsmj(Rank& rank, const JoinJob& job) {
  check_mgsmj(job);
  // The simulator keeps a buffer's keys as a distribution, not in order: a sorted relation's rows
  // [a, b) read as a share of all its keys, not as the key range the join's parts are, so the
  // parts' counts would be wrong (about a quarter of the matches).
  if (rank.backend() == "sim")
    throw InputError("mgsmj: not simulated yet (the simulator does not know the key order of a sorted buffer, and the "
                     "join's parts are key ranges of the sorted relations); run it on the cpu or cuda backend");
  const MgsmjConfig cfg = mgsmj_config(job.options);
  if (rank.streams() < 4)
    throw RuntimeError("mgsmj: the " + rank.backend() + " backend gives a rank " + std::to_string(rank.streams()) +
                       " streams, the plan needs 4 (compute, send, receive, copies)");
  Inputs in = generate_inputs(rank, job, MemSpace::Pinned, MemSpace::Pinned);
  const int g = rank.size(), me = rank.id();
  const PartitionFn fn = msb_buckets(job.workload, cfg.bucket_bits);
  const uint32_t F = fn.fanout();
  const uint64_t device = rank.capacity(MemSpace::Device);

  begin_phase(rank, "histogram");
  RelationData* rels[2] = {&in.r, &in.s};
  RelationPlan plans[2];
  std::vector<uint64_t> mine;
  for (int i = 0; i < 2; ++i) {
    RelationPlan& p = plans[i];
    const RelationSpec& spec = *rels[i]->spec;
    p.name = spec.name;
    p.fmt = rels[i]->tuples.fmt;
    p.F = F;
    // Every rank cuts its slice into the same number of chunks (the exchange pairs them up).
    const uint64_t slice = (spec.rows + uint64_t(g) - 1) / uint64_t(g);
    // Default: two lanes of (input, scattered copy, 2 x what this GPU may receive: g chunks when
    // every GPU's chunk falls in its range) fit half of device memory, whatever the skew.
    const uint64_t chunk = cfg.chunk_rows ? cfg.chunk_rows
                                          : std::max<uint64_t>(1, device / (4 * (2 + 2 * uint64_t(g))) / p.fmt.tuple_bytes());
    p.chunks = uint32_t(std::max<uint64_t>(1, (slice + chunk - 1) / chunk));
    p.bounds = chunk_bounds(rels[i]->tuples.rows, p.chunks);
    HistogramOp h{rels[i]->tuples, fn, p.bounds};
    h.placement = HistogramOp::Placement::Host;
    const std::vector<uint64_t> v = rank.launch(Stream{i}, h).get().values;  // a copy: the Launched is a temporary
    mine.insert(mine.end(), v.begin(), v.end());
  }
  const std::vector<uint64_t> all = rank.allgather(mine);
  const size_t per_rank = mine.size();
  std::vector<uint64_t> totals(F, 0);
  for (int i = 0; i < 2; ++i) {
    RelationPlan& p = plans[i];
    const size_t at = i == 0 ? 0 : size_t(plans[0].chunks) * F, n = size_t(p.chunks) * F;
    for (int r = 0; r < g; ++r)
      p.hist.insert(p.hist.end(), all.begin() + long(r * per_rank + at), all.begin() + long(r * per_rank + at + n));
    for (size_t x = 0; x < p.hist.size(); ++x) totals[x % F] += p.hist[x];
  }
  const std::vector<uint32_t> owner_first = split_buckets(totals, g);

  begin_phase(rank, "sort");
  Runs runs[2];
  for (int i = 0; i < 2; ++i) {
    runs[i] = sort_chunksets(rank, rels[i]->tuples, plans[i], owner_first, fn);
    rels[i]->tuples = Tuples{};  // the unsorted slice is no longer needed
  }

  begin_phase(rank, "merge");
  Tuples merged[2];
  for (int i = 0; i < 2; ++i) {
    const Runs& r = runs[i];
    if (plans[i].chunks == 1) {
      merged[i] = r.all;
      continue;
    }
    MultiwayMergeOp m;
    for (uint32_t c = 0; c < plans[i].chunks; ++c) m.runs.push_back(r.all.slice(r.first[c], r.first[c + 1] - r.first[c]));
    m.out = rank.alloc_tuples(MemSpace::Pinned, r.all.rows, r.all.fmt, "mgsmj." + plans[i].name + ".merged");
    rank.launch(Stream{i}, m);
    merged[i] = m.out;
  }
  rank.sync_all();
  runs[0] = runs[1] = Runs{};

  begin_phase(rank, "join");
  const uint32_t b0 = owner_first[size_t(me)], b1 = owner_first[size_t(me) + 1];
  const std::vector<uint64_t> rb = prefix(my_buckets(plans[0], g, b0, b1)), sb = prefix(my_buckets(plans[1], g, b0, b1));
  const Tuples &r = merged[0], &s = merged[1];
  // Parts: runs of whole buckets (a key never spans two) of about a parts_per_gpu-th of the rows,
  // and at most what one of two device lanes holds.
  const uint64_t tb = std::max(r.fmt.tuple_bytes(), s.fmt.tuple_bytes());
  const uint64_t total = r.rows + s.rows;
  const uint64_t target = std::max<uint64_t>(
      1, std::min<uint64_t>((total + cfg.parts_per_gpu - 1) / cfg.parts_per_gpu, device / 4 / tb));
  // A part closes before the bucket that would take it past the target (a bucket larger than
  // the target is a part of its own): parts stay within a lane, and there are at least
  // parts_per_gpu of them where the buckets allow.
  std::vector<uint32_t> cuts{0};
  const uint32_t nb = b1 - b0;
  for (uint32_t b = 0; b < nb; ++b)
    if (b > cuts.back() && rb[b + 1] + sb[b + 1] - rb[cuts.back()] - sb[cuts.back()] > target) cuts.push_back(b);
  if (cuts.back() != nb) cuts.push_back(nb);
  uint64_t max_r = 1, max_s = 1;
  for (size_t q = 0; q + 1 < cuts.size(); ++q) {
    max_r = std::max(max_r, rb[cuts[q + 1]] - rb[cuts[q]]);
    max_s = std::max(max_s, sb[cuts[q + 1]] - sb[cuts[q]]);
  }
  struct JoinLane {
    Tuples r, s;
  };
  JoinLane lanes[2];
  for (int l = 0; l < 2; ++l) {
    const std::string t = "mgsmj.join.lane" + std::to_string(l);
    lanes[l] = {rank.alloc_tuples(MemSpace::Device, max_r, r.fmt, t + ".R"),
                rank.alloc_tuples(MemSpace::Device, max_s, s.fmt, t + ".S")};
  }
  const Stream copy_stream{3};
  Event copied[2], released[2];
  auto part_of = [&](const Tuples& t, const std::vector<uint64_t>& off, size_t q) {
    return t.slice(off[cuts[q]], off[cuts[q + 1]] - off[cuts[q]]);
  };
  auto copy_in = [&](size_t q) {
    const int l = int(q % 2);
    if (released[l].impl()) rank.stream_wait(copy_stream, released[l]);
    for (auto [dst, src] : {std::pair{&lanes[l].r, part_of(r, rb, q)}, std::pair{&lanes[l].s, part_of(s, sb, q)}}) {
      const TupleFormat f = src.fmt;
      rank.copy(copy_stream, dst->keys, 0, src.keys, src.offset * f.key_bytes, src.rows * f.key_bytes);
      rank.copy(copy_stream, dst->vals, 0, src.vals, src.offset * f.val_bytes, src.rows * f.val_bytes);
    }
    copied[l] = rank.record(copy_stream);
  };
  OutputSink sink(rank, MemSpace::Pinned, r.fmt, s.fmt, "mgsmj.out");
  const uint64_t segment_rows = std::max<uint64_t>(direct_output_estimate(0, s.rows), 1);
  const OutputSizing sizing{segment_rows, segment_rows};
  const size_t parts = cuts.size() - 1;
  if (parts > 0) copy_in(0);
  for (size_t q = 0; q < parts; ++q) {
    const int l = int(q % 2);
    const Stream st{l};
    const Tuples pr = lanes[l].r.slice(0, rb[cuts[q + 1]] - rb[cuts[q]]);
    const Tuples ps = lanes[l].s.slice(0, sb[cuts[q + 1]] - sb[cuts[q]]);
    rank.stream_wait(st, copied[l]);
    if (pr.rows && ps.rows)
      run_join(
          rank, st, cfg.output, sink, sizing,
          [&](const JoinOutput& out, uint64_t first, OutputMode mode) -> Op {
            return MergeJoinOp{pr, ps, out, first, mode};
          },
          [&] {
            if (q + 1 < parts) copy_in(q + 1);  // the next part's copy overlaps this join
          });
    else if (q + 1 < parts)
      copy_in(q + 1);
    released[l] = rank.record(st);
  }
  report_output(rank, Stream{0}, sink, in.r, in.s, MemSpace::Device);
}

// Per GPU, the link each way: towards the device every tuple twice (the sort's copy in, the
// join's), towards the host once (the sort's copy back) plus the output; and the host's memory for
// the merge (every tuple read and written once when a relation has several chunksets: known only
// from chunk_rows, else not counted). The phases run one after the other: bound = link + merge.
Bound mgsmj_bound(const JoinJob& job, const ClusterShape& shape, const Bandwidths& bw) {
  const Workload& w = job.workload;
  const MgsmjConfig cfg = mgsmj_config(job.options);
  const double g = shape.size();
  const double in = tuple_bytes_total(w.r) + tuple_bytes_total(w.s);
  const double out = bound_output_bytes(w, cfg.output);
  if (bw.h2d <= 0) return memory_bound(in, bw, "inputs once (no link rate known)");
  const double link = std::max(2 * in, in + out) / g / bw.h2d;
  bool several = false;
  if (cfg.chunk_rows)
    for (const RelationSpec* s : {&w.r, &w.s}) several = several || double(s->rows) / g > double(cfg.chunk_rows);
  const double merge = several && bw.host_mem > 0 ? 2 * in / bw.host_mem : 0.0;
  return {link + merge, "link " + rate_text(bw.h2d) + " per GPU: tuples in twice and back once, output" +
                            (merge > 0 ? "; host memory " + rate_text(bw.host_mem) + ": the multiway merge" : "")};
}

}  // namespace

StrategyInfo mgsmj_strategy() {
  StrategyInfo i = strategy_info("mgsmj",
                                 "multi-GPU sort-merge join (maltenberger2025): chunksets sorted across the GPUs, CPU "
                                 "multiway merge, merge join per part",
                                 1, 0, add_mgsmj_options, run_mgsmj, mgsmj_bound);
  i.check = check_mgsmj;
  // The slices, their sorted runs and the merged relations wait in pinned host memory.
  i.host_bytes = [](const JoinJob& job, const ClusterShape& shape) {
    return uint64_t(3 * tuple_bytes_per_rank(job.workload, shape.size()));
  };
  return i;
}

}  // namespace joinlab
