// shuffle: gao2021's distributed repartitioned hash join (Algorithm 1), and its two-level
// variant (Algorithm 2). Each rank hash-partitions its slice of R and S by murmur3 of the key
// into one partition per destination, the ranks exchange sizes (alltoall) and then tuples
// (all-to-all in scheduled rounds of bounded chunks), and every rank joins what it received
// (npj or phj, with a hash seed of its own).
//
// levels = 2 first exchanges among the ranks with the same local index on every node (one rail
// of the inter-node network), then within each node (NVLink), with a different hash seed per
// level. Works for any rank count; a level whose group is a single rank is skipped.
//
// Payloads: with one payload column the tuples carry it. With more, the tuples carry a row
// index; before each exchange the payload columns are gathered into partition order and shipped
// beside the keys (gao2021 ships every column), and on arrival the value becomes the row's
// index in what was received, so the output's values index the received payload columns.
#include <algorithm>
#include <array>
#include <deque>

#include "core/common/error.hpp"
#include "core/strategies/rank_joins.hpp"

namespace joinlab {

namespace {

struct ShuffleConfig {
  int levels = 1;
  bool local_phj = false;
  HashJoinConfig join;  // the npj local join (and table kind / output of a phj one)
  uint64_t chunk_rows = 1 << 20;
  int inflight = 8;
  std::array<uint64_t, 2> level_seed{};
};

void add_shuffle_options(po::options_description& d) {
  d.add_options()("levels", int_option("levels", 1, 1, 2),
                  "1: one all-to-all among all ranks; 2: first among the ranks of one local index across "
                  "nodes, then within each node (gao2021 two-level shuffle)")(
      "local_join", choice_option("local_join", {"npj", "phj"}, "npj"),
      "join of the received tuples: npj (one hash table at load_factor) or phj (radix partitioned)")(
      "chunk_rows", int_option("chunk_rows", int64_t(1) << 20, 1, int64_t(1) << 40),
      "rows per message: a partition bigger than this goes in several chunks")(
      "inflight", int_option("inflight", 8, 1, 1 << 16),
      "messages a rank keeps posted and unfinished (sends and receives); beyond it, it waits for the oldest")(
      "seed", int_option("seed", 0x5eed, 0, int64_t(1) << 62),
      "hash seed; level 1, level 2 and the local join each use their own seed derived from it");
  add_hash_join_options(d, "count_then_write");  // gao2021 3.3: probe to count, then to write
}

ShuffleConfig shuffle_config(const po::variables_map& vm) {
  ShuffleConfig c;
  c.levels = int(vm["levels"].as<int64_t>());
  c.local_phj = vm["local_join"].as<std::string>() == "phj";
  c.join = hash_join_config(vm);
  c.chunk_rows = uint64_t(vm["chunk_rows"].as<int64_t>());
  c.inflight = int(vm["inflight"].as<int64_t>());
  // mix64 is a bijection, so the three seeds differ whatever `seed` is.
  const uint64_t seed = uint64_t(vm["seed"].as<int64_t>());
  c.level_seed = {mix64(seed + 1), mix64(seed + 2)};
  c.join.seed = mix64(seed + 3);
  return c;
}

// A phj local join: radix bits from the received sizes, the npj options' table kind and output.
PhjConfig local_phj_config(const ShuffleConfig& cfg) {
  PhjConfig phj;
  phj.table = cfg.join.table;
  phj.output = cfg.join.output;
  return phj;
}

// The ranks one exchange runs among, and this rank's index among them.
struct Group {
  std::vector<int> ranks;
  int me = 0;
  int size() const { return int(ranks.size()); }
};

// One group per exchange level (Algorithm 2: same local index across nodes, then within the
// node); groups of one rank are left out.
std::vector<std::pair<Group, int>> exchange_levels(const ClusterShape& shape, int rank, int levels) {
  std::vector<std::pair<Group, int>> out;
  auto add = [&](Group g, int level) {
    if (g.size() > 1) out.push_back({std::move(g), level});
  };
  if (levels == 1) {
    Group g;
    for (int r = 0; r < shape.size(); ++r) g.ranks.push_back(r);
    g.me = rank;
    add(g, 0);
    return out;
  }
  Group rail, node;
  for (int n = 0; n < shape.nodes; ++n) rail.ranks.push_back(n * shape.per_node + shape.local_of(rank));
  rail.me = shape.node_of(rank);
  for (int l = 0; l < shape.per_node; ++l) node.ranks.push_back(shape.node_of(rank) * shape.per_node + l);
  node.me = shape.local_of(rank);
  add(rail, 0);
  add(node, 1);
  return out;
}

// Hash buckets -> group members. The partition fanout is a power of two: the group size itself
// when it is one, else 32x the next power of two, with member j taking a contiguous run of
// buckets (a member gets at most 1/32 more than its share).
struct Destinations {
  uint32_t bits = 0;
  uint64_t fanout = 1;
  int members = 1;
  explicit Destinations(int g) : members(g) {
    while ((1ULL << bits) < uint64_t(g)) ++bits;
    if ((1ULL << bits) != uint64_t(g)) bits += 5;
    fanout = 1ULL << bits;
  }
  uint64_t first_bucket(int member) const {
    return (uint64_t(member) * fanout + uint64_t(members) - 1) / uint64_t(members);
  }
};

// Rows of one relation this rank sends to / receives from each member, at row offsets of the
// partitioned (send) and received tuples.
struct Traffic {
  std::vector<uint64_t> send_first, send_rows, recv_first, recv_rows;
  uint64_t received() const { return recv_first.empty() ? 0 : recv_first.back() + recv_rows.back(); }
};

std::vector<uint64_t> exclusive_prefix(const std::vector<uint64_t>& v) {
  std::vector<uint64_t> out(v.size(), 0);
  for (size_t i = 1; i < v.size(); ++i) out[i] = out[i - 1] + v[i - 1];
  return out;
}

// One column of one relation in an exchange: sent from `send`, received into `recv`.
struct Column {
  Buffer send, recv;
  uint32_t bytes = 4;
};

// The all-to-all of one level: in round k this rank sends to member me+k and receives from
// member me-k (round 0 is a local copy, on the otherwise idle compute stream so that it overlaps
// the sends of round 1), each partition in chunks of chunk_rows. A chunk's columns of R and S
// (keys, values, payload columns) travel as one vectored message (Rank::send_v): the receiver
// expects the same ranges, since it knows the sender's row counts (the alltoall). At most
// `inflight` buffers' worth of messages are posted and unfinished (a vectored message counts
// its ranges, so the bound means the same operations on backends that issue one per range).
// Posting in (round, chunk) order, with sends and receives on streams of their own, cannot
// deadlock: the oldest message anyone waits for has its peer's matching message posted already.
void exchange(Rank& rank, const Group& g, int level, const std::vector<Traffic>& traffic,
              const std::vector<std::vector<Column>>& columns, const ShuffleConfig& cfg) {
  const Stream copy_stream{0}, send_stream{1}, recv_stream{2};
  std::deque<std::pair<Event, size_t>> posted;  // and the ranges each one moves
  size_t in_flight = 0;
  auto post = [&](Event e, size_t ranges) {
    posted.push_back({std::move(e), ranges});
    in_flight += ranges;
    while (in_flight > size_t(cfg.inflight) && posted.size() > 1) {  // never the one just posted
      posted.front().first.wait();
      in_flight -= posted.front().second;
      posted.pop_front();
    }
  };
  const uint64_t cr = cfg.chunk_rows;
  const int tag = level;
  std::vector<BufferRange> sends, recvs;
  std::vector<Event> local;  // round 0's copies: nothing to pace, so outside the window (they overlap round 1)
  for (int k = 0; k < g.size(); ++k) {
    const int to = (g.me + k) % g.size(), from = (g.me - k + g.size()) % g.size();
    uint64_t chunks = 0;
    for (const Traffic& t : traffic)
      chunks = std::max(chunks, (std::max(t.send_rows[size_t(to)], t.recv_rows[size_t(from)]) + cr - 1) / cr);
    for (uint64_t c = 0; c < chunks; ++c) {
      const uint64_t off = c * cr;
      sends.clear();
      recvs.clear();
      for (size_t rel = 0; rel < traffic.size(); ++rel) {
        const Traffic& t = traffic[rel];
        const uint64_t n_send = t.send_rows[size_t(to)], n_recv = t.recv_rows[size_t(from)];
        const uint64_t recv_n = off < n_recv ? std::min(cr, n_recv - off) : 0;
        const uint64_t send_n = off < n_send ? std::min(cr, n_send - off) : 0;
        for (const Column& x : columns[rel]) {
          if (recv_n) recvs.push_back({x.recv, (t.recv_first[size_t(from)] + off) * x.bytes, recv_n * x.bytes});
          if (send_n) sends.push_back({x.send, (t.send_first[size_t(to)] + off) * x.bytes, send_n * x.bytes});
        }
      }
      if (k == 0) {  // to == from == me: the "receive" ranges are where the sent ones go
        for (size_t i = 0; i < sends.size(); ++i)
          local.push_back(rank.copy(copy_stream, recvs[i].buf, recvs[i].off, sends[i].buf, sends[i].off, sends[i].bytes));
        continue;
      }
      if (!recvs.empty()) post(rank.recv_v(recv_stream, g.ranks[size_t(from)], recvs, tag), recvs.size());
      if (!sends.empty()) post(rank.send_v(send_stream, g.ranks[size_t(to)], sends, tag), sends.size());
    }
  }
  for (auto& e : posted) e.first.wait();
  for (auto& e : local) e.wait();
}

// Values 0 .. n-1: GenerateOp with value_is_rowid writes each row's index, which makes it the
// vocabulary's iota (its keys go to a scratch buffer).
Buffer row_indexes(Rank& rank, Stream st, uint64_t n, uint8_t bytes, MemSpace space) {
  GenerateOp gen;
  gen.spec.name = "row_index";
  gen.spec.rows = std::max<uint64_t>(n, 1);
  gen.spec.dist = KeyDist::UniqueSparse;
  gen.spec.payload_bytes = {bytes};
  gen.value_is_rowid = true;
  gen.out.rows = gen.out.capacity = n;
  gen.out.fmt = TupleFormat{4, bytes};
  gen.out.keys = rank.alloc(space, n * 4, "shuffle.row_index.scratch");
  gen.out.vals = rank.alloc(space, n * bytes, "shuffle.row_index");
  rank.launch(st, gen);
  return gen.out.vals;
}

// One level: partition R and S by the level's hash into the group's members, learn what every
// member sends here, exchange. Replaces each relation's data with what this rank received.
void shuffle_level(Rank& rank, const Group& g, int level, const ShuffleConfig& cfg, MemSpace space,
                   std::array<RelationData*, 2> rels) {
  const Stream compute{0};
  const std::string suffix = level == 0 ? "" : "_node";
  begin_phase(rank, "partition" + suffix);
  const Destinations dest(g.size());
  const PartitionFn fn{PartitionFn::Hash, dest.bits, 0, cfg.level_seed[size_t(level)]};

  std::vector<Launched> histograms;
  for (auto* rel : rels) histograms.push_back(rank.launch(compute, HistogramOp{rel->tuples, fn}));
  std::vector<Traffic> traffic(2);
  std::vector<Launched> partitions;
  std::vector<Tuples> partitioned;
  // Rows this rank sends to each rank, R and S: the alltoall's words (ranks outside the group: 0).
  std::vector<uint64_t> mine(2 * size_t(rank.size()), 0);
  for (size_t i = 0; i < 2; ++i) {
    const std::vector<uint64_t>& buckets = histograms[i].get().values;
    Traffic& t = traffic[i];
    for (int j = 0; j < g.size(); ++j) {
      uint64_t rows = 0;
      for (uint64_t b = dest.first_bucket(j); b < dest.first_bucket(j + 1); ++b) rows += buckets[b];
      t.send_rows.push_back(rows);
    }
    t.send_first = exclusive_prefix(t.send_rows);
    for (int j = 0; j < g.size(); ++j) mine[2 * size_t(g.ranks[size_t(j)]) + i] = t.send_rows[size_t(j)];
    // The scatter runs while the sizes are exchanged below.
    PartitionOp p;
    p.in = rels[i]->tuples;
    p.fn = fn;
    p.out = rank.alloc_tuples(space, p.in.rows, p.in.fmt, "shuffle." + rels[i]->spec->name + ".partitioned");
    partitioned.push_back(p.out);
    partitions.push_back(rank.launch(compute, p));
  }
  {
    const std::vector<uint64_t> got = rank.alltoall(mine, 2);  // what every rank sends here
    for (size_t i = 0; i < 2; ++i) {
      for (int j = 0; j < g.size(); ++j) traffic[i].recv_rows.push_back(got[2 * size_t(g.ranks[size_t(j)]) + i]);
      traffic[i].recv_first = exclusive_prefix(traffic[i].recv_rows);
    }
  }

  std::vector<std::vector<Column>> columns(2);
  for (size_t i = 0; i < 2; ++i) {
    RelationData& rel = *rels[i];
    const std::vector<uint64_t>& offsets = partitions[i].get().values;
    if (rank.has_data())  // the sends cut the partitioned tuples where the histogram says
      for (int j = 0; j < g.size(); ++j)
        if (offsets.at(dest.first_bucket(j)) != traffic[i].send_first[size_t(j)])
          throw RuntimeError("shuffle: partition offsets of " + rel.spec->name + " disagree with its histogram");
    const Tuples& part = partitioned[i];
    const uint64_t received = traffic[i].received();
    columns[i].push_back(
        {part.keys, rank.alloc(space, received * part.fmt.key_bytes, "shuffle.recv.keys"), part.fmt.key_bytes});
    if (!rel.late()) {
      columns[i].push_back(
          {part.vals, rank.alloc(space, received * part.fmt.val_bytes, "shuffle.recv.vals"), part.fmt.val_bytes});
      continue;
    }
    // Late materialization: bring the payload columns into partition order to ship them.
    for (size_t c = 0; c < rel.payload.size(); ++c) {
      GatherOp gather;
      gather.row_ids = part.vals;
      gather.id_bytes = part.fmt.val_bytes;
      gather.column = rel.payload[c];
      gather.col_bytes = rel.spec->payload_bytes[c];
      gather.base_row = rel.base_row;
      gather.rows = part.rows;
      gather.out = rank.alloc(space, part.rows * gather.col_bytes, "shuffle.send.payload");
      rank.launch(compute, gather);
      columns[i].push_back(
          {gather.out, rank.alloc(space, received * gather.col_bytes, "shuffle.recv.payload"), gather.col_bytes});
    }
  }
  for (auto* rel : rels) rel->tuples = Tuples{};  // the unpartitioned input is no longer needed

  // Every rank partitioned and allocated before anyone exchanges: the exchange phase times the
  // all-to-all alone, not the wait for the slowest partition, and no allocation (which waits for
  // the GPU's earlier work) meets a receive a peer parked already (cuda_fabric.hpp, Gates).
  rank.sync_all();
  rank.barrier();
  begin_phase(rank, "shuffle" + suffix);
  exchange(rank, g, level, traffic, columns, cfg);

  for (size_t i = 0; i < 2; ++i) {
    RelationData& rel = *rels[i];
    Tuples& t = rel.tuples;
    t.fmt = partitioned[i].fmt;
    t.rows = t.capacity = traffic[i].received();
    t.offset = 0;
    t.keys = columns[i][0].recv;
    if (!rel.late()) {
      t.vals = columns[i][1].recv;
      continue;
    }
    rel.payload.clear();
    for (size_t c = 1; c < columns[i].size(); ++c) rel.payload.push_back(columns[i][c].recv);
    rel.base_row = 0;
    t.vals = row_indexes(rank, compute, t.rows, t.fmt.val_bytes, space);
  }
}

void run_shuffle(Rank& rank, const JoinJob& job) {
  const ShuffleConfig cfg = shuffle_config(job.options);
  const auto levels = exchange_levels(rank.shape(), rank.id(), cfg.levels);
  if (!levels.empty() && rank.streams() < 3)
    throw RuntimeError("shuffle needs 3 streams per rank (compute, send, receive); the " + rank.backend() +
                       " backend gives " + std::to_string(rank.streams()));
  const MemSpace space = job.data_space;
  Inputs in = generate_inputs(rank, job, space, space);
  for (const auto& [group, level] : levels) shuffle_level(rank, group, level, cfg, space, {&in.r, &in.s});

  OutputSink out = cfg.local_phj
                       ? phj_join(rank, Stream{0}, in.r.tuples, in.s.tuples, local_phj_config(cfg), space, "local_")
                       : npj_join(rank, Stream{0}, in.r.tuples, in.s.tuples, cfg.join, space, "local_");
  report_output(rank, Stream{0}, out, in.r, in.s, space);
}

// Per rank (the slowest one's share, assuming balanced partitions):
//  * device memory: per level, one partition pass (read + write) of the rank's R and S tuples
//    and, for late materialization, its payload columns; then the local join on the rank's share
//    (npj_memory_bytes or phj_memory_bytes); over bw.mem.
//  * links: the bytes it ships (keys + payload columns). levels=1: the (n - per_node)/n part
//    leaving the node over bw.net and the (per_node - 1)/n part inside it over bw.p2p, which
//    run at once (the larger counts); levels=2: (nodes - 1)/nodes over bw.net, then
//    (per_node - 1)/per_node over bw.p2p, one after the other (they add).
// Bound = max(memory, links); a link whose bandwidth is unknown (0) is left out.
Bound shuffle_bound(const JoinJob& job, const ClusterShape& shape, const Bandwidths& bw) {
  const Workload& w = job.workload;
  const ShuffleConfig cfg = shuffle_config(job.options);
  const double n = shape.size(), per_node = shape.per_node, nodes = shape.nodes;
  const double shipped = (full_row_bytes_total(w.r) + full_row_bytes_total(w.s)) / n;
  const uint64_t r_rows = uint64_t(double(w.r.rows) / n), s_rows = uint64_t(double(w.s.rows) / n);
  const TupleFormat rf = tuple_format(w.r), sf = tuple_format(w.s);
  const double out = bound_output_bytes(w, cfg.join.output) / n;

  const int exchanges = int(exchange_levels(shape, 0, cfg.levels).size());
  const double mem =
      exchanges * 2.0 * shipped + (cfg.local_phj ? phj_memory_bytes(r_rows, s_rows, rf, sf, local_phj_config(cfg), out)
                                                 : npj_memory_bytes(r_rows, s_rows, rf, sf, cfg.join.load_factor, out));
  Bound best = memory_bound(mem, bw, "partition pass(es) and local join");

  auto link_time = [](double bytes, double rate) { return bytes > 0 && rate > 0 ? bytes / rate : 0.0; };
  double net, p2p, links;
  if (cfg.levels == 1) {
    net = link_time(shipped * (n - per_node) / n, bw.net);
    p2p = link_time(shipped * (per_node - 1) / n, bw.p2p);
    links = std::max(net, p2p);
  } else {
    net = link_time(shipped * (nodes - 1) / nodes, bw.net);
    p2p = link_time(shipped * (per_node - 1) / per_node, bw.p2p);
    links = net + p2p;
  }
  if (links > best.seconds)
    best = {links, "network " + rate_text(bw.net) + " / peer " + rate_text(bw.p2p) + ": " +
                       (cfg.levels == 1 ? "all-to-all" : "two-level all-to-all") + " of R and S"};
  return best;
}

}  // namespace

StrategyInfo shuffle_strategy() {
  return strategy_info("shuffle",
                       "distributed repartitioned hash join (gao2021): murmur3 hash partition, all-to-all, local "
                       "join",
                       1, 0, add_shuffle_options, run_shuffle, shuffle_bound);
}

}  // namespace joinlab
