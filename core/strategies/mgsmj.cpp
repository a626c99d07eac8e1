// mgsmj: maltenberger2025's multi-GPU sort-merge join on the g GPUs (ranks) of one node. R and S
// wait in pinned host memory, each rank holding its slice. Three phases:
//  * sort: every relation is cut into chunksets of g chunks (chunk c of every rank's slice, of
//    chunk_rows or what device memory holds). A chunkset is copied in, sorted across the g GPUs
//    with the radix-based multi-GPU sort (section 3.2: a scatter by the most significant key bits,
//    one all-to-all peer exchange, a local sort of the rest) and copied back, while the next
//    chunkset's copy runs (two device buffers per stage, copies in and copies back each on a
//    stream of their own); S's chunksets are copied in and sorted while R's are copied back.
//    sort = merge sorts a chunkset with the merge-based multi-GPU sort instead (section 3.1.1:
//    local sort, merge stages of pivot search, block swap and local merge; MergeStages below),
//    then re-cuts it at the same global key ranges.
//  * merge: each rank's k sorted runs (one per chunkset) merged on the host's CPUs
//    (MultiwayMergeOp; skipped when k = 1).
//  * join: the merged R and S are cut by merge path into at least parts_per_gpu parts of
//    near-equal R + S rows that fit device memory, the cuts moved to key boundaries
//    (merge_path_parts); each part is copied in (its keys alone for output = count_only) and
//    merge-joined (MergeJoinOp) on one of two streams, its output rows written to pinned host
//    memory.
// The resident plan (resident = auto, where both relations are one chunkset, i.e. they fit the
// GPUs): the paper copies the sorted runs back and the join copies them in again, twice the
// input's bytes over PCIe for nothing. Here R is copied in whole during the histogram phase; the
// host's CPUs count S's histograms meanwhile and the GPU counts R's once it is in, so R is sorted
// while S is copied in. The runs stay where they were sorted, and the join is one merge join over
// them, its output written to pinned host memory. Skew that would overfill a GPU falls back to the
// paper's plan.
// Deviation from the paper, for the SPMD model (every rank holds its own slice of host memory):
// the sort's splitters are global, not per chunkset. The most-significant-bit histograms of every
// chunk of R and S are counted first (on the host's CPUs) and exchanged (allgather); the buckets
// are then split into g contiguous ranges of near-equal R + S rows, and GPU j receives range j of
// every chunkset of both relations. Its runs and its merged relations therefore hold key range j
// only, so the merge and the join need no data of another rank, and a key's rows are on one GPU.
// The join's parts never split a key's R x S either (its cuts are moved to key boundaries, a key
// too large for a part is joined in disjoint pieces): a hot key is counted once. The cost is
// balance: a range is whole buckets, so one hot bucket weighs on one GPU (the paper refines the
// buckets that span GPUs, which this version does not).
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "core/common/error.hpp"
#include "core/exec/merge_path.hpp"
#include "core/strategies/rank_joins.hpp"

namespace joinlab {

namespace {

struct MgsmjConfig {
  bool merge_sort = false;  // sort = merge (else radix)
  uint64_t chunk_rows = 0;  // 0 = from device memory
  uint32_t bucket_bits = 12;
  uint32_t parts_per_gpu = 3;
  bool resident = true;  // resident = auto: one chunkset's sorted runs stay on the GPUs for the join
  OutputMode output = OutputMode::Direct;
};

void add_mgsmj_options(po::options_description& d) {
  d.add_options()("sort", choice_option("sort", {"radix", "merge"}, "radix"),
                  "multi-GPU sort of a chunkset: radix (scatter by the most significant bits, one all-to-all, "
                  "local sort) or merge (local sort, then merge stages of GPU pairs: pivot search, block swap, local "
                  "merge; needs a power-of-two number of GPUs)")(
      "chunk_rows", int_option("chunk_rows", 0, 0, int64_t(1) << 40),
      "rows of one GPU's chunk of a chunkset; 0 = what half of device memory holds with any skew")(
      "bucket_bits", int_option("bucket_bits", 12, 1, 16),
      "most significant key bits the sort's histograms count: the granularity of the GPUs' key ranges")("parts_per_gpu", int_option("parts_per_gpu", 3, 1, 1 << 20),
                          "fewest merge-path parts a GPU's share of the join is cut into (more when a part would not fit "
                          "a quarter of device memory)")(
      "resident", choice_option("resident", {"auto", "off"}, "auto"),
      "auto: where both relations sort in one chunkset, their histograms are counted on the GPUs after the copy in "
      "and the sorted runs stay in device memory for the join (nothing is copied back or in again); off: the "
      "paper's plan at any size (CPU histograms, runs copied back, the join's parts copied in)");
  add_output_option(d, "direct");
}

MgsmjConfig mgsmj_config(const po::variables_map& vm) {
  MgsmjConfig c;
  c.merge_sort = vm["sort"].as<std::string>() == "merge";
  c.chunk_rows = uint64_t(vm["chunk_rows"].as<int64_t>());
  c.bucket_bits = uint32_t(vm["bucket_bits"].as<int64_t>());
  c.parts_per_gpu = uint32_t(vm["parts_per_gpu"].as<int64_t>());
  c.resident = vm["resident"].as<std::string>() == "auto";
  c.output = output_mode(vm);
  return c;
}

// The merge stages pair up halves of groups of 2, 4, ... GPUs.
void check_merge_sort_ranks(const JoinJob& job, int ranks) {
  if (job.options["sort"].as<std::string>() == "merge" && ranks > 0 && (ranks & (ranks - 1)) != 0)
    throw InputError("mgsmj: sort = merge needs a power-of-two number of GPUs (its merge stages pair up halves of "
                     "groups of 2, 4, 8, ... GPUs), but the run has " +
                     std::to_string(ranks) + "; use sort = radix or 1, 2, 4, 8 GPUs");
}

void check_mgsmj(const JoinJob& job) {
  check_merge_sort_ranks(job, job.ranks);
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
  // Device lanes its sort works in: two where a chunkset is copied in while the one before sorts.
  int lanes() const { return chunks > 1 ? 2 : 1; }
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

// Rows of chunkset c (every rank's chunk) in rank j's key range.
uint64_t received_by(const RelationPlan& p, uint32_t c, const std::vector<uint32_t>& owner_first, int j, int g) {
  uint64_t n = 0;
  for (int i = 0; i < g; ++i) n += p.rows(i, c, owner_first[size_t(j)], owner_first[size_t(j) + 1]);
  return n;
}

// The key and value byte ranges of rows [row, row + n) of t.
std::vector<BufferRange> column_ranges(const Tuples& t, uint64_t row, uint64_t n) {
  const TupleFormat f = t.fmt;
  return {{t.keys, (t.offset + row) * f.key_bytes, n * f.key_bytes}, {t.vals, (t.offset + row) * f.val_bytes, n * f.val_bytes}};
}

// Rows [src_row, src_row + n) of src to rows [dst_row, dst_row + n) of dst, both columns, on st.
std::vector<Event> copy_rows(Rank& rank, Stream st, const Tuples& dst, uint64_t dst_row, const Tuples& src,
                             uint64_t src_row, uint64_t n) {
  const std::vector<BufferRange> to = column_ranges(dst, dst_row, n), from = column_ranges(src, src_row, n);
  std::vector<Event> done;
  for (size_t col = 0; col < 2; ++col)
    done.push_back(rank.copy(st, to[col].buf, to[col].off, from[col].buf, from[col].off, from[col].bytes));
  return done;
}

// Streams of the sort.
// Copies back have a stream of their own: S's chunks go in while R's sorted runs come back.
struct SortStreams {
  Stream compute{0}, send{1}, recv{2}, copy{3}, copy_back{4};
};

// One all-to-all over the peer links: rows [send_first[j], send_first[j + 1]) of src go to rank
// j, rank i's rows land at [recv_first[i], recv_first[i + 1]) of dst. In round k to rank me + k,
// from rank me - k (round 0 a local copy on the compute stream). Returns the transfers' events.
std::vector<Event> all_to_all(Rank& rank, const SortStreams& st, const Tuples& src, const std::vector<uint64_t>& send_first,
                              const Tuples& dst, const std::vector<uint64_t>& recv_first) {
  const int g = rank.size(), me = rank.id();
  std::vector<Event> moved;
  for (int k = 0; k < g; ++k) {
    const int to = (me + k) % g, from = (me - k + g) % g;
    const uint64_t ns = send_first[size_t(to) + 1] - send_first[size_t(to)];
    const uint64_t nr = recv_first[size_t(from) + 1] - recv_first[size_t(from)];
    if (k == 0) {
      if (ns)
        for (const Event& e : copy_rows(rank, st.compute, dst, recv_first[size_t(me)], src, send_first[size_t(me)], ns))
          moved.push_back(e);
      continue;
    }
    if (nr) moved.push_back(rank.recv_v(st.recv, from, column_ranges(dst, recv_first[size_t(from)], nr), 0));
    if (ns) moved.push_back(rank.send_v(st.send, to, column_ranges(src, send_first[size_t(to)], ns), 0));
  }
  return moved;
}

// The merge-based multi-GPU sort of one chunkset (maltenberger2025 3.1.1, after Tanasic et al.):
// every GPU has sorted its chunk (rows[i] rows on GPU i; a stage keeps every GPU's rows); the
// stages bring them into one order across the GPUs. A group of c GPUs is merged by sorting its
// halves (recursively), one merge stage between the halves, and sorting the halves again: g - 1
// stages in all (1, 3, 7 for 2, 4, 8 GPUs), the groups of a stage side by side.
// A merge stage: the halves L and R are each sorted across their GPUs. The pivot p is the fewest
// rows such that swapping L's last p rows with R's first p leaves every key of L below every key
// of R: the first j with L[|L| - 1 - j] <= R[j]. The Rank interface has no peer reads, so the
// binary search runs in rounds: kProbes positions of the current interval are probed (each GPU
// gathers the keys it holds, GatherOp, and sends them to the group), every GPU of the group finds
// the first probe that holds (PivotSearchOp, the same answer on each), and the interval shrinks
// to the gap before it: a round per factor kProbes of the chunk size (2 or 3 rounds). Then the
// blocks swap over the peer links (both directions at once) and each GPU merges the rows it kept
// with the rows it received (MergeOp): its chunk is sorted again.
// Without data (the simulator) the pivot comes from every GPU's rows by bucket, which the
// histograms give and the stages' swaps move (exact integers: a run's first rows are its lowest
// buckets' rows); only inside the bucket where the pivot falls does it take L's and R's rows in
// proportion to their counts. The probe rounds run as on the GPUs, each choosing the probe that
// brackets that pivot, so the simulated stage does the same operators and messages.
class MergeStages {
 public:
  static constexpr uint64_t kProbes = 1024;
  // Device bytes a relation's stages take besides its lanes.
  static uint64_t device_bytes(TupleFormat f) { return 3 * kProbes * f.key_bytes; }
  MergeStages(Rank& rank, const SortStreams& st, TupleFormat f, const std::string& tag) : rank_(rank), st_(st), f_(f) {
    ids_ = rank.alloc(MemSpace::Pinned, kProbes * 8, tag + ".probe_ids");
    mine_ = rank.alloc(MemSpace::Device, kProbes * f.key_bytes, tag + ".probes");
    x_ = rank.alloc(MemSpace::Device, kProbes * f.key_bytes, tag + ".probes_left");
    y_ = rank.alloc(MemSpace::Device, kProbes * f.key_bytes, tag + ".probes_right");
  }

  // cur: this GPU's sorted chunk (rows[me] rows), left sorted across the GPUs; alt: scratch of
  // the same size. rows: every GPU's rows. buckets: every GPU's rows by bucket (used where the rank
  // has no data; their sums are rows).
  void sort(const Tuples& cur, const Tuples& alt, const std::vector<uint64_t>& rows,
            std::vector<std::vector<uint64_t>> buckets) {
    rows_ = rows;
    buckets_ = std::move(buckets);
    cur_ = cur, alt_ = alt;
    run(int(rows.size()));
  }

 private:
  void run(int c) {  // merges the group of c GPUs this rank is in, its halves sorted or not
    if (c < 2) return;
    run(c / 2);
    stage(c);
    run(c / 2);
  }

  // GPUs [first, first + n) as one sequence: where GPU i's rows start in it.
  uint64_t start(int first, int i) const {
    uint64_t s = 0;
    for (int k = first; k < i; ++k) s += rows_[size_t(k)];
    return s;
  }

  void stage(int c) {
    const int me = rank_.id(), base = me / c * c, h = c / 2;
    const bool left = me < base + h;
    const uint64_t nl = start(base, base + h), nr = start(base + h, base + c);
    const uint64_t mine_at = left ? start(base, me) : start(base + h, me), n = rows_[size_t(me)];
    const Event sorted = rank_.record(st_.compute);
    rank_.stream_wait(st_.send, sorted);
    rank_.stream_wait(st_.recv, sorted);
    std::vector<uint64_t> l, r;  // without data: L's and R's rows by bucket (the pivot, then every GPU's)
    if (!rank_.has_data()) l = sum_buckets(base, h), r = sum_buckets(base + h, h);
    const uint64_t known = rank_.has_data() ? 0 : pivot_of_buckets(l, r, nl, std::min(nl, nr));
    const uint64_t p = pivot(base, h, nl, std::min(nl, nr), left, mine_at, rank_.has_data() ? nullptr : &known);
    if (!rank_.has_data()) swap_buckets(l, r, base, h, nl, p);
    if (p == 0) return;
    // L row nl - p + u swaps with R row u, u < p.
    std::vector<Event> moved;
    uint64_t kept_first = 0, kept_rows = n, got = 0;  // this GPU's kept rows in cur, rows received
    for (int k = 0; k < h; ++k) {
      const int peer = left ? base + h + k : base + k;
      const uint64_t peer_at = left ? start(base + h, peer) : start(base, peer), peer_n = rows_[size_t(peer)];
      // The swapped u of this GPU and of the peer, intersected.
      const uint64_t l_at = left ? mine_at : peer_at, l_n = left ? n : peer_n;
      const uint64_t r_at = left ? peer_at : mine_at, r_n = left ? peer_n : n;
      const uint64_t lo = std::max(l_at + l_n > nl - p ? std::max(l_at, nl - p) - (nl - p) : p, r_at);
      const uint64_t hi = std::min({l_at + l_n > nl - p ? l_at + l_n - (nl - p) : 0, r_at + r_n, p});
      if (lo >= hi) continue;
      const uint64_t row = left ? lo + (nl - p) - l_at : lo - r_at;  // this GPU's row of u = lo
      moved.push_back(rank_.recv_v(st_.recv, peer, column_ranges(alt_, row, hi - lo), 2));
      moved.push_back(rank_.send_v(st_.send, peer, column_ranges(cur_, row, hi - lo), 2));
      got += hi - lo;
    }
    if (!got) return;
    if (left) kept_rows = n - got;  // its first rows stay, the received ones follow
    else kept_first = got, kept_rows = n - got;  // the received rows come first
    if (kept_rows) copy_rows(rank_, st_.compute, alt_, kept_first, cur_, kept_first, kept_rows);
    for (const Event& e : moved) rank_.stream_wait(st_.compute, e);  // cur is read until the sends are done
    const uint64_t split = left ? kept_rows : got;
    rank_.launch(st_.compute, MergeOp{alt_.slice(0, split), alt_.slice(split, n - split), cur_});
  }

  // The first j in [0, jmax) with L[nl - 1 - j] <= R[j], else jmax: the rows to swap. `known`
  // (without data): that answer, which each round's probes then bracket.
  uint64_t pivot(int base, int h, uint64_t nl, uint64_t jmax, bool left, uint64_t mine_at, const uint64_t* known) {
    const int me = rank_.id();
    uint64_t lo = 0, hi = jmax;  // the answer lies in [lo, hi]
    while (lo < hi) {
      const uint64_t m = std::min(kProbes, hi - lo);
      auto probe = [&](uint64_t t) { return lo + t * (hi - lo) / m; };  // ascending, probe(0) = lo
      // The probes t whose key GPU i holds: [first, last) (L GPUs hold row nl - 1 - j, R GPUs row j).
      auto held = [&](int i) {
        const bool l = i < base + h;
        const uint64_t at = l ? start(base, i) : start(base + h, i), rows = rows_[size_t(i)];
        uint64_t first = 0, last = 0;
        for (uint64_t t = 0; t < m; ++t) {  // m <= kProbes: a scan of positions, no data
          const uint64_t pos = l ? nl - 1 - probe(t) : probe(t);
          const bool in = pos >= at && pos < at + rows;
          if (in && first == last) first = t, last = t + 1;
          else if (in) last = t + 1;
        }
        return std::pair{first, last};
      };
      const auto [first, last] = held(me);
      if (uint64_t* ids = data_of<uint64_t>(ids_))
        for (uint64_t t = first; t < last; ++t) ids[t - first] = (left ? nl - 1 - probe(t) : probe(t)) - mine_at + cur_.offset;
      std::vector<Event> moved;
      if (last > first) {
        rank_.launch(st_.compute, GatherOp{ids_, 8, cur_.keys, f_.key_bytes, 0, last - first, mine_});
        const Buffer& own = left ? x_ : y_;
        moved.push_back(rank_.copy(st_.compute, own, first * f_.key_bytes, mine_, 0, (last - first) * f_.key_bytes));
        rank_.stream_wait(st_.send, rank_.record(st_.compute));
      }
      for (int i = base; i < base + 2 * h; ++i) {
        if (i == me) continue;
        const auto [f, l] = held(i);
        if (l > f) moved.push_back(rank_.recv(st_.recv, i, i < base + h ? x_ : y_, f * f_.key_bytes, (l - f) * f_.key_bytes, 1));
        if (last > first) moved.push_back(rank_.send(st_.send, i, mine_, 0, (last - first) * f_.key_bytes, 1));
      }
      for (const Event& e : moved) rank_.stream_wait(st_.compute, e);
      uint64_t t = rank_.launch(st_.compute, PivotSearchOp{x_, y_, f_.key_bytes, m}).get().count;
      if (known) {  // the first probe at or above the answer, as the search over the keys finds
        t = 0;
        while (t < m && probe(t) < *known) ++t;
      }
      const uint64_t new_lo = t == 0 ? lo : probe(t - 1) + 1, new_hi = t < m ? probe(t) : hi;
      lo = new_lo, hi = new_hi;
    }
    return lo;
  }

  // The rows by bucket of GPUs [first, first + n) as one sequence.
  std::vector<uint64_t> sum_buckets(int first, int n) const {
    std::vector<uint64_t> sum(buckets_[size_t(first)].size(), 0);
    for (int i = first; i < first + n; ++i)
      for (size_t b = 0; b < sum.size(); ++b) sum[b] += buckets_[size_t(i)][b];
    return sum;
  }

  // Rows [x, y) of a sorted sequence with `counts` rows per bucket, by bucket (added into `into`).
  static void add_range(const std::vector<uint64_t>& counts, uint64_t x, uint64_t y, std::vector<uint64_t>& into) {
    uint64_t at = 0;
    for (size_t b = 0; b < counts.size() && at < y; at += counts[b], ++b) {
      const uint64_t lo = std::max(x, at), hi = std::min(y, at + counts[b]);
      if (hi > lo) into[b] += hi - lo;
    }
  }

  // The pivot from L's and R's rows by bucket (l, r): R's rows among the nl smallest of L and R.
  // Below the bucket where the nl-th row falls, all of R's; in it, R's share of what is left (the
  // keys of L and R in one bucket taken as alike), kept where that bucket's rows of each side allow.
  static uint64_t pivot_of_buckets(const std::vector<uint64_t>& l, const std::vector<uint64_t>& r, uint64_t nl,
                                   uint64_t jmax) {
    uint64_t below = 0, r_below = 0;  // rows of L and R, and of R, in the buckets before b
    for (size_t b = 0; b < l.size(); ++b) {
      if (below + l[b] + r[b] <= nl) {
        below += l[b] + r[b], r_below += r[b];
        continue;
      }
      const uint64_t rem = nl - below;  // rows of bucket b among the nl smallest
      const uint64_t share = uint64_t(std::llround(double(rem) * double(r[b]) / double(l[b] + r[b])));
      const uint64_t least = rem > l[b] ? rem - l[b] : 0, most = std::min(rem, r[b]);
      return std::min(jmax, r_below + std::clamp(share, least, most));
    }
    return std::min(jmax, r_below);
  }

  // After a stage's swap of L's last p rows with R's first p rows: every GPU's rows by bucket (l, r:
  // L's and R's before the swap). L and R are each sorted across their GPUs, GPU i holding its
  // rows' stretch of the sequence.
  void swap_buckets(const std::vector<uint64_t>& l, const std::vector<uint64_t>& r, int base, int h, uint64_t nl,
                    uint64_t p) {
    for (int i = base; i < base + 2 * h; ++i) {
      const bool in_l = i < base + h;
      const uint64_t a = in_l ? start(base, i) : start(base + h, i), e = a + rows_[size_t(i)];
      std::vector<uint64_t> now(l.size(), 0);
      if (in_l) {  // keeps L's rows before nl - p, receives R's row u for L's row nl - p + u
        add_range(l, a, std::min(e, nl - p), now);
        if (e > nl - p) add_range(r, std::max(a, nl - p) - (nl - p), e - (nl - p), now);
      } else {  // keeps R's rows from p on, receives L's row nl - p + u for its row u < p
        add_range(r, std::max(a, p), std::max(e, p), now);
        if (a < p) add_range(l, nl - p + a, nl - p + std::min(e, p), now);
      }
      buckets_[size_t(i)] = std::move(now);
    }
  }

  Rank& rank_;
  SortStreams st_;
  TupleFormat f_;
  Buffer ids_, mine_, x_, y_;
  std::vector<uint64_t> rows_;
  std::vector<std::vector<uint64_t>> buckets_;  // per GPU, its rows by bucket (without data)
  Tuples cur_, alt_;
};

// A relation's sort lane: radix: in -> part (scattered) -> recv (exchanged) -> sorted. merge: in
// -> part (sorted, then merged through the stages, `in` their scratch) -> recv (re-cut at the
// owners' key ranges: the pieces arrive in order, so they need no sort) -> copied back from recv.
struct SortLane {
  Tuples in, part, recv, sorted;
};
// The device buffers a relation's queued sort works in: they live until the sort phase's end.
struct SortBuffers {
  SortLane lanes[2];
  std::optional<MergeStages> stages;
};

// The sort phase of one relation, queued (not waited for): this rank's k sorted runs, one after
// the other in one pinned buffer (run c at first[c]); a resident run (k = 1) stays in its lane's
// device buffer instead.
struct Runs {
  Tuples all;
  std::vector<uint64_t> first;  // k + 1 row offsets
  std::unique_ptr<SortBuffers> buffers;
};
// R's first chunk, copied in while the host counts the histograms: the sort's first input lane,
// where the histograms kept the chunk count it was cut for.
struct Prefetch {
  uint32_t chunks = 0;
  Tuples in;
  Event copied;
};

Runs sort_chunksets(Rank& rank, const Tuples& host, const RelationPlan& p, const std::vector<uint32_t>& owner_first,
                    PartitionFn fn, bool merge_sort, const Prefetch* pre, bool resident) {
  const int g = rank.size(), me = rank.id();
  const SortStreams st;
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
  if (!resident) runs.all = rank.alloc_tuples(MemSpace::Pinned, runs.first.back(), f, "mgsmj." + p.name + ".runs");

  runs.buffers = std::make_unique<SortBuffers>();
  SortLane* lanes = runs.buffers->lanes;
  const bool prefetched = pre && pre->chunks == p.chunks;
  for (int l = 0; l < p.lanes(); ++l) {
    const std::string t = "mgsmj." + p.name + ".lane" + std::to_string(l);
    lanes[l] = {l == 0 && prefetched ? pre->in : rank.alloc_tuples(MemSpace::Device, max_in, f, t + ".in"),
                rank.alloc_tuples(MemSpace::Device, max_in, f, t + (merge_sort ? ".sorted" : ".partitioned")),
                rank.alloc_tuples(MemSpace::Device, max_recv, f, t + ".recv"),
                merge_sort ? Tuples{} : rank.alloc_tuples(MemSpace::Device, max_recv, f, t + ".sorted")};
  }
  std::optional<MergeStages>& stages = runs.buffers->stages;
  if (merge_sort && g > 1) stages.emplace(rank, st, f, "mgsmj." + p.name);
  Event copied[2], free_again[2];  // chunk in the lane's input; the lane's last chunkset copied back
  auto copy_in = [&](uint32_t c) {
    const int l = int(c % 2);
    if (c == 0 && prefetched) {
      copied[0] = pre->copied;
      return;
    }
    if (free_again[l].impl()) rank.stream_wait(st.copy, free_again[l]);
    copy_rows(rank, st.copy, lanes[l].in, 0, host, p.bounds[c], p.bounds[c + 1] - p.bounds[c]);
    copied[l] = rank.record(st.copy);
  };
  copy_in(0);
  for (uint32_t c = 0; c < p.chunks; ++c) {
    const int l = int(c % 2);
    SortLane& lane = lanes[l];
    if (c + 1 < p.chunks) copy_in(c + 1);  // overlaps this chunkset's sort
    const uint64_t n = p.bounds[c + 1] - p.bounds[c];
    rank.stream_wait(st.compute, copied[l]);
    std::vector<uint64_t> send_first(size_t(g) + 1, 0), recv_first(size_t(g) + 1, 0);
    if (!merge_sort) {
      // Scatter by bucket: GPU j's buckets are contiguous, so its rows are too.
      rank.launch(st.compute, PartitionOp{lane.in.slice(0, n), {}, fn, lane.part});
      for (int j = 0; j < g; ++j) {
        send_first[size_t(j) + 1] = send_first[size_t(j)] + dest_rows(me, c, j);
        recv_first[size_t(j) + 1] = recv_first[size_t(j)] + dest_rows(j, c, me);
      }
    } else {
      rank.launch(st.compute, SortOp{lane.in.slice(0, n), lane.part, SortAlgo::Radix, fn});
      std::vector<uint64_t> rows(size_t(g), 0);
      for (int i = 0; i < g; ++i) rows[size_t(i)] = p.rows(i, c, 0, p.F);
      std::vector<std::vector<uint64_t>> buckets;  // the simulator's pivots come from them
      if (!rank.has_data())
        for (int i = 0; i < g; ++i)
          buckets.emplace_back(p.hist.begin() + long((size_t(i) * p.chunks + c) * p.F),
                               p.hist.begin() + long((size_t(i) * p.chunks + c + 1) * p.F));
      if (stages) stages->sort(lane.part.slice(0, n), lane.in, rows, std::move(buckets));  // one GPU: sorted already
      // GPU i holds rows [at[i], at[i + 1]) of the sorted chunkset, owner j its key range, rows
      // [cut[j], cut[j + 1]) (the histograms' counts of the buckets below the range).
      const std::vector<uint64_t> at = prefix(rows);
      std::vector<uint64_t> cut(size_t(g) + 1, 0);
      for (int j = 0; j < g; ++j) cut[size_t(j) + 1] = cut[size_t(j)] + received_by(p, c, owner_first, j, g);
      auto clamp = [](uint64_t v, uint64_t lo, uint64_t hi) { return std::min(std::max(v, lo), hi) - lo; };
      for (int j = 0; j <= g; ++j) {
        send_first[size_t(j)] = clamp(cut[size_t(j)], at[size_t(me)], at[size_t(me) + 1]);
        recv_first[size_t(j)] = clamp(at[size_t(j)], cut[size_t(me)], cut[size_t(me) + 1]);
      }
    }
    const Event ready = rank.record(st.compute);
    rank.stream_wait(st.send, ready);
    if (free_again[l].impl()) rank.stream_wait(st.recv, free_again[l]);  // lane.recv was copied back or sorted from
    for (const Event& e : all_to_all(rank, st, lane.part, send_first, lane.recv, recv_first)) rank.stream_wait(st.compute, e);
    const Tuples& done = merge_sort ? lane.recv : lane.sorted;
    if (!merge_sort) rank.launch(st.compute, SortOp{lane.recv.slice(0, received[c]), lane.sorted, SortAlgo::Radix});
    if (resident) {  // one chunkset: its run is the relation, sorted, where the join will read it
      runs.all = done.slice(0, received[c]);
      continue;
    }
    rank.stream_wait(st.copy_back, rank.record(st.compute));
    copy_rows(rank, st.copy_back, runs.all, runs.first[c], done, 0, received[c]);
    free_again[l] = rank.record(st.copy_back);
  }
  return runs;
}

// Device bytes of one relation's sort lanes (input, scattered copy, what this GPU receives and its
// sorted copy; two lanes where there are several chunksets): both relations' lanes fit three
// quarters of device memory less the merge stages' buffers, 3/8 each (S's are filled while R's are
// copied back; the rest is the sorts' scratch).
uint64_t lane_bytes_per_relation(uint64_t device, const MgsmjConfig& cfg, int g, TupleFormat r, TupleFormat s) {
  uint64_t room = device;
  if (cfg.merge_sort && g > 1)
    for (TupleFormat f : {r, s}) room -= std::min(room, MergeStages::device_bytes(f));
  return room * 3 / 8;
}

// A relation's chunk rows before its histograms are counted: chunk_rows, or what a quarter of its
// lanes holds (a GPU's received rows taken as its own chunk's, uniform keys), halved where the
// slice takes several chunks (two lanes).
uint64_t first_chunk_rows(const MgsmjConfig& cfg, uint64_t lane_bytes, TupleFormat f, uint64_t slice) {
  if (cfg.chunk_rows) return cfg.chunk_rows;
  const uint64_t chunk = std::max<uint64_t>(1, lane_bytes / 4 / f.tuple_bytes());
  return chunk < slice ? std::max<uint64_t>(1, chunk / 2) : chunk;
}

// Whether that first guess cuts a relation into several chunksets (uniform keys: skew can only add
// more); not known where neither chunk_rows nor the device memory is.
std::optional<bool> several_chunksets(const JoinJob& job, const MgsmjConfig& cfg, int g) {
  if (!cfg.chunk_rows && !job.device_memory) return std::nullopt;
  const Workload& w = job.workload;
  const uint64_t lanes = lane_bytes_per_relation(job.device_memory, cfg, g, tuple_format(w.r), tuple_format(w.s));
  for (const RelationSpec* s : {&w.r, &w.s}) {
    const uint64_t slice = (s->rows + uint64_t(g) - 1) / uint64_t(g);
    if (slice > first_chunk_rows(cfg, lanes, tuple_format(*s), slice)) return true;
  }
  return false;
}

void run_mgsmj(Rank& rank, const JoinJob& job) {
  check_mgsmj(job);
  check_merge_sort_ranks(job, rank.size());
  const MgsmjConfig cfg = mgsmj_config(job.options);
  if (rank.streams() < 5)
    throw RuntimeError("mgsmj: the " + rank.backend() + " backend gives a rank " + std::to_string(rank.streams()) +
                       " streams, the plan needs 5 (compute, send, receive, copies in, copies back)");
  Inputs in = generate_inputs(rank, job, MemSpace::Pinned, MemSpace::Pinned);
  const int g = rank.size();
  const PartitionFn fn = msb_buckets(job.workload, cfg.bucket_bits);
  const uint32_t F = fn.fanout();
  const uint64_t device = rank.capacity(MemSpace::Device);

  begin_phase(rank, "histogram");
  RelationData* rels[2] = {&in.r, &in.s};
  RelationPlan plans[2];
  std::vector<uint32_t> owner_first;
  // Chunk rows by default: first_chunk_rows. The histograms say what each GPU receives, and where
  // skew makes that more than its lanes hold, the chunks halve and are counted again.
  const uint64_t per_relation = lane_bytes_per_relation(device, cfg, g, rels[0]->tuples.fmt, rels[1]->tuples.fmt);
  auto slice_of = [&](int i) { return (rels[i]->spec->rows + uint64_t(g) - 1) / uint64_t(g); };
  uint64_t chunk[2];
  for (int i = 0; i < 2; ++i) chunk[i] = first_chunk_rows(cfg, per_relation, rels[i]->tuples.fmt, slice_of(i));
  auto chunks_of = [&](int i) {  // every rank cuts its slice into as many chunks (the exchange pairs them up)
    return uint32_t(std::max<uint64_t>(1, (slice_of(i) + chunk[i] - 1) / chunk[i]));
  };
  // R's first chunk is copied in while the histograms are counted. In the resident plan (both
  // relations one chunkset) that is all of R, and the GPU counts R's histograms once it is in
  // (milliseconds) while the host's CPUs count S's: S is copied in at the sort phase's start, while
  // R is sorted. Otherwise the CPUs count both relations' histograms.
  bool on_device = cfg.resident && chunks_of(0) == 1 && chunks_of(1) == 1;
  Prefetch pre[2];
  auto prefetch = [&](int i) {
    const Tuples& t = rels[i]->tuples;
    pre[i].chunks = chunks_of(i);
    const uint64_t first = chunk_bounds(t.rows, pre[i].chunks)[1];  // the first chunk is the largest
    pre[i].in = rank.alloc_tuples(MemSpace::Device, std::max<uint64_t>(1, first), t.fmt,
                                  "mgsmj." + rels[i]->spec->name + ".lane0.in");
    copy_rows(rank, SortStreams{}.copy, pre[i].in, 0, t, 0, first);
    pre[i].copied = rank.record(SortStreams{}.copy);
  };
  prefetch(0);
  for (;;) {
    std::vector<Launched> counted;  // both relations' counts under way before either is waited for
    for (int i = 0; i < 2; ++i) {
      RelationPlan& p = plans[i];
      const RelationSpec& spec = *rels[i]->spec;
      p = RelationPlan{};
      p.name = spec.name;
      p.fmt = rels[i]->tuples.fmt;
      p.F = F;
      p.chunks = chunks_of(i);
      p.bounds = chunk_bounds(rels[i]->tuples.rows, p.chunks);
      const bool on_gpu = on_device && i == 0;  // R, in device memory
      HistogramOp h{on_gpu ? pre[i].in.slice(0, rels[i]->tuples.rows) : rels[i]->tuples, fn, p.bounds};
      h.placement = on_gpu ? HistogramOp::Placement::Device : HistogramOp::Placement::Host;
      if (on_gpu) rank.stream_wait(Stream{i}, pre[i].copied);
      counted.push_back(rank.launch(Stream{i}, h));
    }
    std::vector<uint64_t> mine;
    for (Launched& l : counted) {
      const std::vector<uint64_t>& v = l.get().values;
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
    owner_first = split_buckets(totals, g);
    // Every rank decides from the same histograms: the same chunks everywhere.
    bool fits = true;
    for (int i = 0; i < 2 && !cfg.chunk_rows; ++i) {
      const RelationPlan& p = plans[i];
      uint64_t most = 1;
      for (uint32_t c = 0; c < p.chunks; ++c)
        for (int j = 0; j < g; ++j)
          most = std::max({most, received_by(p, c, owner_first, j, g), p.bounds[c + 1] - p.bounds[c]});
      if (uint64_t(p.lanes()) * 4 * most * p.fmt.tuple_bytes() > per_relation && chunk[i] > 1) {
        chunk[i] = std::max<uint64_t>(1, std::min(chunk[i], (p.bounds[1] - p.bounds[0])) / 2);
        fits = false;
      }
    }
    if (fits) break;
    on_device = false;  // skew: several chunksets, counted on the host
  }
  const bool resident = on_device;

  begin_phase(rank, "sort");
  // Both relations' sorts queued, then waited for: S's chunks are copied in and sorted while R's
  // runs are copied back (the lanes of both fit three quarters of device memory).
  Runs runs[2];
  if (pre[0].chunks != plans[0].chunks) {  // skew cut R finer: its first chunk is copied again
    rank.sync_all();
    pre[0] = Prefetch{};
  }
  if (resident) prefetch(1);  // before R's sort is queued (the merge sort's pivot search waits on the host)
  for (int i = 0; i < 2; ++i)
    runs[i] = sort_chunksets(rank, rels[i]->tuples, plans[i], owner_first, fn, cfg.merge_sort, &pre[i], resident);
  for (Prefetch& p : pre) p = Prefetch{};  // the lanes hold the buffers now, until the sort phase's end
  rank.sync_all();
  for (int i = 0; i < 2; ++i) {
    runs[i].buffers.reset();
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
  runs[0] = Runs{};
  runs[1] = Runs{};

  begin_phase(rank, "join");
  const Tuples &r = merged[0], &s = merged[1];
  OutputSink sink(rank, MemSpace::Pinned, r.fmt, s.fmt, "mgsmj.out");
  const uint64_t segment_rows = std::max<uint64_t>(direct_output_estimate(0, s.rows), 1);
  const OutputSizing sizing{segment_rows, segment_rows};
  if (resident) {  // the sorted runs are in device memory: one merge join over them
    run_join(rank, Stream{0}, cfg.output, sink, sizing, [&](const JoinOutput& out, uint64_t first, OutputMode mode) -> Op {
      return MergeJoinOp{r, s, out, first, mode};
    });
    report_output(rank, Stream{0}, sink, in.r, in.s, MemSpace::Device);
    return;
  }
  // Parts by merge path: near-equal R + S rows, at least parts_per_gpu of them, each at most what
  // one of two device lanes holds (a quarter of device memory: a lane's R and S buffers are sized
  // by the largest R and the largest S of any part, together at most twice that). The cuts move to
  // key boundaries, so each key's R x S is joined in one part; a key too large for a part is
  // joined in pieces of its R rows against pieces of its S rows (merge_path_parts).
  // count_only needs no payloads: a part's keys alone go to the device, so parts hold more rows.
  const bool keys_only = cfg.output == OutputMode::CountOnly;
  const uint64_t tb = keys_only ? r.fmt.key_bytes : std::max(r.fmt.tuple_bytes(), s.fmt.tuple_bytes());
  const uint64_t part_rows = device / 4 / tb;
  if (part_rows < 2)
    throw RuntimeError("mgsmj: device memory of " + std::to_string(device) + " bytes leaves a join lane " +
                       std::to_string(device / 4) + " bytes, less than an R and an S row of " + std::to_string(tb) +
                       " bytes");
  const std::vector<JoinPiece> parts = rank.merge_path_parts(r, s, cfg.parts_per_gpu, part_rows);
  uint64_t max_r = 1, max_s = 1;
  for (const JoinPiece& p : parts) max_r = std::max(max_r, p.r_rows), max_s = std::max(max_s, p.s_rows);
  struct JoinLane {
    Tuples r, s;
  };
  // Keys only: the key column is also the view's value column (a count reads no values), so the
  // merge join's inputs stay ordinary tuples.
  auto lane_tuples = [&](uint64_t rows, TupleFormat f, const std::string& tag) {
    if (!keys_only) return rank.alloc_tuples(MemSpace::Device, rows, f, tag);
    const Buffer k = rank.alloc(MemSpace::Device, rows * f.key_bytes, tag + ".keys");
    return Tuples{k, k, 0, rows, rows, TupleFormat{f.key_bytes, f.key_bytes}};
  };
  JoinLane lanes[2];
  for (int l = 0; l < 2; ++l) {
    const std::string t = "mgsmj.join.lane" + std::to_string(l);
    lanes[l] = {lane_tuples(max_r, r.fmt, t + ".R"), lane_tuples(max_s, s.fmt, t + ".S")};
  }
  const Stream copy_stream{3};
  Event copied[2], released[2];
  auto copy_in = [&](size_t q) {
    const int l = int(q % 2);
    if (released[l].impl()) rank.stream_wait(copy_stream, released[l]);
    const JoinPiece& p = parts[q];
    for (auto [dst, src] : {std::pair{&lanes[l].r, r.slice(p.r_first, p.r_rows)}, std::pair{&lanes[l].s, s.slice(p.s_first, p.s_rows)}}) {
      const TupleFormat f = src.fmt;
      rank.copy(copy_stream, dst->keys, 0, src.keys, src.offset * f.key_bytes, src.rows * f.key_bytes);
      if (!keys_only) rank.copy(copy_stream, dst->vals, 0, src.vals, src.offset * f.val_bytes, src.rows * f.val_bytes);
    }
    copied[l] = rank.record(copy_stream);
  };
  if (!parts.empty()) copy_in(0);
  for (size_t q = 0; q < parts.size(); ++q) {
    const int l = int(q % 2);
    const Stream st{l};
    const Tuples pr = lanes[l].r.slice(0, parts[q].r_rows), ps = lanes[l].s.slice(0, parts[q].s_rows);
    rank.stream_wait(st, copied[l]);
    run_join(
        rank, st, cfg.output, sink, sizing,
        [&](const JoinOutput& out, uint64_t first, OutputMode mode) -> Op { return MergeJoinOp{pr, ps, out, first, mode}; },
        [&] {
          if (q + 1 < parts.size()) copy_in(q + 1);  // the next part's copy overlaps this join
        });
    released[l] = rank.record(st);
  }
  report_output(rank, Stream{0}, sink, in.r, in.s, MemSpace::Device);
}

// Per GPU, the link each way. The paper's plan: towards the device every tuple twice (the sort's
// copy in, the join's: its keys alone for count_only), towards the host once (the sort's copy
// back) plus the output; and the host's memory for the merge (every tuple read and written once
// when a relation has several chunksets). The phases run one after the other: bound = link +
// merge. The resident plan (one chunkset each): every tuple in once, the output back.
Bound mgsmj_bound(const JoinJob& job, const ClusterShape& shape, const Bandwidths& bw) {
  const Workload& w = job.workload;
  const MgsmjConfig cfg = mgsmj_config(job.options);
  const double g = shape.size();
  const double in = tuple_bytes_total(w.r) + tuple_bytes_total(w.s);
  const double out = bound_output_bytes(w, cfg.output);
  if (bw.h2d <= 0) return memory_bound(in, bw, "inputs once (no link rate known)");
  const bool several = several_chunksets(job, cfg, shape.size()).value_or(false);
  if (cfg.resident && !several)
    return {std::max(in, out) / g / bw.h2d,
            "link " + rate_text(bw.h2d) + " per GPU: tuples in once (sorted runs kept on the GPUs), output back"};
  // The join copies a part's keys alone for count_only.
  const bool keys_only = cfg.output == OutputMode::CountOnly;
  const double join_in = keys_only ? double(w.r.rows) * w.r.key_bytes + double(w.s.rows) * w.s.key_bytes : in;
  const double link = std::max(in + join_in, in + out) / g / bw.h2d;
  const double merge = several && bw.host_mem > 0 ? 2 * in / bw.host_mem : 0.0;
  return {link + merge, "link " + rate_text(bw.h2d) + " per GPU: tuples in twice (the second time keys only for "
                            "count_only) and back once, output" +
                            (merge > 0 ? "; host memory " + rate_text(bw.host_mem) + ": the multiway merge" : "")};
}

}  // namespace

StrategyInfo mgsmj_strategy() {
  StrategyInfo i = strategy_info("mgsmj",
                                 "multi-GPU sort-merge join (maltenberger2025): chunksets sorted across the GPUs, CPU "
                                 "multiway merge, merge join per part",
                                 1, 0, add_mgsmj_options, run_mgsmj, mgsmj_bound);
  i.check = check_mgsmj;
  // Pinned host memory: the slices; the paper's plan also the sorted runs, and with several
  // chunksets the merged relations. The resident plan keeps its runs on the GPUs. Where the
  // device memory is not known, the chunksets are not either: the most.
  i.host_bytes = [](const JoinJob& job, const ClusterShape& shape) {
    const MgsmjConfig cfg = mgsmj_config(job.options);
    const std::optional<bool> several = several_chunksets(job, cfg, shape.size());
    const int copies = several.value_or(true) ? 3 : cfg.resident ? 1 : 2;
    return uint64_t(copies * tuple_bytes_per_rank(job.workload, shape.size()));
  };
  return i;
}

}  // namespace joinlab
