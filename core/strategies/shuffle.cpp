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
//
// compression (gao2021 section 4): cascaded compresses, before each level's exchange, every 4- or
// 8-byte column (keys, values, payload columns) per destination with the layers the selector
// (codec_select) picks on a sample of the column: one CompressOp per column width for all
// destinations, the compressed sizes exchanged like the row counts, the compressed bytes sent
// instead of the rows and one DecompressOp per width for everything received. auto does the same
// for the columns whose sampled ratio pays for the level's link (compression_pays), and sends
// the others as they are; each sender decides for its own columns, and says so with the sizes.
#include <algorithm>
#include <array>
#include <deque>
#include <memory>
#include <optional>

#include "core/common/error.hpp"
#include "core/strategies/rank_joins.hpp"
#include "kernels/cpu/codec.hpp"

namespace joinlab {

namespace {

enum class Compression { Off, Cascaded, Auto };

struct ShuffleConfig {
  int levels = 1;
  Compression compression = Compression::Off;
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
      "hash seed; level 1, level 2 and the local join each use their own seed derived from it")(
      "compression", choice_option("compression", {"off", "cascaded", "auto"}, "off"),
      "columns sent in each exchange: off (as they are), cascaded (compressed, the selector's layers per column), "
      "auto (compressed where the sampled ratio pays for the link, docs/design.md)");
  add_hash_join_options(d, "count_then_write");  // gao2021 3.3: probe to count, then to write
}

ShuffleConfig shuffle_config(const po::variables_map& vm) {
  ShuffleConfig c;
  c.levels = int(vm["levels"].as<int64_t>());
  const std::string comp = vm["compression"].as<std::string>();
  c.compression = comp == "cascaded" ? Compression::Cascaded : comp == "auto" ? Compression::Auto : Compression::Off;
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

// What one buffer sends to and receives from each member: byte offsets and sizes, in messages of
// at most chunk_bytes each.
struct Lane {
  Buffer send, recv;
  std::vector<uint64_t> send_off, send_bytes, recv_off, recv_bytes;
  uint64_t chunk_bytes = 1;
};

// A column's lane: its relation's rows at the column's width, in chunks of chunk_rows rows.
Lane column_lane(const Column& x, const Traffic& t, uint64_t chunk_rows) {
  Lane l{x.send, x.recv, {}, {}, {}, {}, chunk_rows * x.bytes};
  for (size_t j = 0; j < t.send_rows.size(); ++j) {
    l.send_off.push_back(t.send_first[j] * x.bytes);
    l.send_bytes.push_back(t.send_rows[j] * x.bytes);
    l.recv_off.push_back(t.recv_first[j] * x.bytes);
    l.recv_bytes.push_back(t.recv_rows[j] * x.bytes);
  }
  return l;
}

// The all-to-all of one level: in round k this rank sends to member me+k and receives from
// member me-k (round 0 is a local copy, on the otherwise idle compute stream so that it overlaps
// the sends of round 1), each lane's bytes in chunks of its chunk_bytes. A chunk's ranges of every
// lane (keys, values, payload columns of R and S, or their compressed bytes) travel as one
// vectored message (Rank::send_v): the receiver expects the same ranges, since it knows the
// sender's sizes (the alltoall). At most `inflight` buffers' worth of messages are posted and
// unfinished (a vectored message counts its ranges, so the bound means the same operations on
// backends that issue one per range). Posting in (round, chunk) order, with sends and receives on
// streams of their own, cannot deadlock: the oldest message anyone waits for has its peer's
// matching message posted already.
void exchange(Rank& rank, const Group& g, int level, const std::vector<Lane>& lanes, const ShuffleConfig& cfg) {
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
  const int tag = level;
  std::vector<BufferRange> sends, recvs;
  std::vector<Event> local;  // round 0's copies: nothing to pace, so outside the window (they overlap round 1)
  for (int k = 0; k < g.size(); ++k) {
    const size_t to = size_t((g.me + k) % g.size()), from = size_t((g.me - k + g.size()) % g.size());
    uint64_t chunks = 0;
    for (const Lane& l : lanes)
      chunks = std::max(chunks, (std::max(l.send_bytes[to], l.recv_bytes[from]) + l.chunk_bytes - 1) / l.chunk_bytes);
    for (uint64_t c = 0; c < chunks; ++c) {
      sends.clear();
      recvs.clear();
      for (const Lane& l : lanes) {
        const uint64_t off = c * l.chunk_bytes, n_send = l.send_bytes[to], n_recv = l.recv_bytes[from];
        if (off < n_recv) recvs.push_back({l.recv, l.recv_off[from] + off, std::min(l.chunk_bytes, n_recv - off)});
        if (off < n_send) sends.push_back({l.send, l.send_off[to] + off, std::min(l.chunk_bytes, n_send - off)});
      }
      if (k == 0) {  // to == from == me: the "receive" ranges are where the sent ones go
        for (size_t i = 0; i < sends.size(); ++i)
          local.push_back(rank.copy(copy_stream, recvs[i].buf, recvs[i].off, sends[i].buf, sends[i].off, sends[i].bytes));
        continue;
      }
      if (!recvs.empty()) post(rank.recv_v(recv_stream, g.ranks[from], recvs, tag), recvs.size());
      if (sends.empty()) continue;
      for (const BufferRange& r : sends) rank.count_sent(r.bytes);
      post(rank.send_v(send_stream, g.ranks[to], sends, tag), sends.size());
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

// Whether compressing a column pays for the level's link (compression = auto): the link time of
// the bytes it saves, (1 - 1/ratio) / link per byte, exceeds the codec's time, 1 / (mem / 16) to
// compress plus 1 / (mem / 8) to decompress per byte (the cascaded codec's rates on an H200 are
// about those fractions of its memory copy rate, docs/design.md). With no link or memory rate
// known: a sampled ratio of at least 1.5.
bool compression_pays(double ratio, double link, double mem) {
  if (link <= 0 || mem <= 0) return ratio >= 1.5;
  return (1.0 - 1.0 / ratio) / link > 24.0 / mem;
}

// The link a level's bytes mostly cross: the network for the one-level exchange of a multi-node
// cluster and the first level of the two-level one, else NVLink (the peer rate).
double level_link(const Bandwidths& bw, const ClusterShape& shape, int levels, int level) {
  const bool net = levels == 1 ? shape.nodes > 1 : level == 0;
  return net ? bw.net : bw.p2p;
}

// One level's compressed exchange. Each 4- or 8-byte column this rank compresses (cascaded: all;
// auto: those compression_pays) is compressed per destination, one CompressOp per width with the
// buffers destination-major, so one destination's streams are one byte range (a lane per width).
// Every column keeps its lane of rows, empty where its sender compressed it: a sender tells in the
// sizes' alltoall, per destination and column, the compressed bytes (0: sent as rows).
class CompressedExchange {
 public:
  std::vector<Lane> lanes;

  CompressedExchange(Rank& rank, const Group& g, int level, const ShuffleConfig& cfg, MemSpace space,
                     const std::vector<Traffic>& traffic, const std::vector<std::vector<Column>>& columns)
      : members_(size_t(g.size())) {
    const Stream compute{0};
    const Bandwidths bw = rank.bandwidths();
    const double link = level_link(bw, rank.shape(), cfg.levels, level);
    for (size_t i = 0; i < 2; ++i)
      for (size_t c = 0; c < columns[i].size(); ++c) cols_.push_back({i, c});
    std::vector<codec::Config> config(cols_.size());
    std::vector<bool> mine(cols_.size(), false);
    for (size_t k = 0; k < cols_.size(); ++k) {
      const Column& x = column(columns, k);
      if (x.bytes != 4 && x.bytes != 8) continue;  // the codec's widths
      const uint64_t rows = traffic[cols_[k].first].send_first.back() + traffic[cols_[k].first].send_rows.back();
      double ratio = 1;
      config[k] = cpu::codec_select_windows(rank.codec_sample(compute, x.send, 0, rows, uint8_t(x.bytes)), x.bytes, &ratio);
      mine[k] = cfg.compression == Compression::Cascaded || compression_pays(ratio, link, bw.mem);
    }
    // One CompressOp per width, buffers destination-major; both run before either's sizes are read.
    std::array<std::vector<size_t>, 2> which;  // the columns of each width this rank compresses
    std::array<std::optional<Launched>, 2> compressed;
    for (uint32_t w : {4u, 8u}) {
      for (size_t k = 0; k < cols_.size(); ++k)
        if (mine[k] && column(columns, k).bytes == w) which[w == 8].push_back(k);
      if (which[w == 8].empty()) continue;
      CompressOp op;
      op.value_bytes = uint8_t(w);
      for (size_t j = 0; j < members_; ++j)
        for (size_t k : which[w == 8]) {
          const Traffic& t = traffic[cols_[k].first];
          op.in.push_back({column(columns, k).send, t.send_first[j], t.send_rows[j]});
          op.configs.push_back(config[k]);
        }
      op.out = rank.alloc(space, compress_bound(op), "shuffle.send.compressed");
      coded_lanes_[w == 8] = Lane{op.out, nullptr, {}, {}, {}, {}, cfg.chunk_rows * w};
      compressed[w == 8] = rank.launch(compute, op);
    }
    std::vector<uint64_t> sizes(size_t(rank.size()) * cols_.size(), 0);  // the alltoall's words
    for (size_t wi = 0; wi < 2; ++wi) {
      if (!compressed[wi]) continue;
      const std::vector<uint64_t> off = compressed[wi]->get().values;
      const size_t n = which[wi].size();
      Lane& l = coded_lanes_[wi];
      for (size_t j = 0; j < members_; ++j) {
        l.send_off.push_back(off[j * n]);
        l.send_bytes.push_back(off[(j + 1) * n] - off[j * n]);
        for (size_t c = 0; c < n; ++c)
          sizes[size_t(g.ranks[j]) * cols_.size() + which[wi][c]] = off[j * n + c + 1] - off[j * n + c];
      }
    }
    got_ = rank.alltoall(sizes, cols_.size());
    for (size_t k = 0; k < cols_.size(); ++k) {  // the columns sent as rows
      const Column& x = column(columns, k);
      Lane l = column_lane(x, traffic[cols_[k].first], cfg.chunk_rows);
      for (size_t j = 0; j < members_; ++j) {
        if (mine[k]) l.send_bytes[j] = 0;
        if (word(g, j, k)) l.recv_bytes[j] = 0;
      }
      lanes.push_back(std::move(l));
    }
    for (uint32_t w : {4u, 8u}) {  // the compressed bytes, received from-major
      Lane& l = coded_lanes_[w == 8];
      if (l.send_off.empty()) l = Lane{nullptr, nullptr, std::vector<uint64_t>(members_, 0),
                                       std::vector<uint64_t>(members_, 0), {}, {}, cfg.chunk_rows * w};
      Decompress& d = decompress_[w == 8];
      d.op.value_bytes = uint8_t(w);
      d.op.offsets.push_back(0);
      for (size_t j = 0; j < members_; ++j) {
        l.recv_off.push_back(d.op.offsets.back());
        for (size_t k = 0; k < cols_.size(); ++k)
          if (word(g, j, k) && column(columns, k).bytes == w) {
            d.op.offsets.push_back(d.op.offsets.back() + word(g, j, k));
            d.from.push_back({j, k});
          }
        l.recv_bytes.push_back(d.op.offsets.back() - l.recv_off.back());
      }
      if (d.op.offsets.back()) l.recv = d.op.in = rank.alloc(space, d.op.offsets.back(), "shuffle.recv.compressed");
      lanes.push_back(l);
    }
    g_ranks_ = g.ranks;
  }

  // One DecompressOp per width for everything received, into the columns' receive buffers; the
  // rows each buffer held must be the rows its sender announced.
  void decompress(Rank& rank, const std::vector<Traffic>& traffic, const std::vector<std::vector<Column>>& columns) {
    std::vector<Launched> launched;
    for (Decompress& d : decompress_) {
      if (d.from.empty()) continue;
      for (const auto& [j, k] : d.from) {
        const Traffic& t = traffic[cols_[k].first];
        d.op.out.push_back({column(columns, k).recv, t.recv_first[j], t.recv_rows[j]});
      }
      launched.push_back(rank.launch(Stream{0}, d.op));
    }
    size_t n = 0;
    for (Decompress& d : decompress_) {
      if (d.from.empty()) continue;
      const std::vector<uint64_t> rows = launched[n++].get().values;
      for (size_t b = 0; b < rows.size(); ++b)
        if (rows[b] != d.op.out[b].rows)
          throw RuntimeError("shuffle: a compressed column from rank " + std::to_string(g_ranks_[d.from[b].first]) +
                             " holds " + std::to_string(rows[b]) + " rows, " + std::to_string(d.op.out[b].rows) +
                             " were announced");
    }
  }

 private:
  struct Decompress {
    DecompressOp op;
    std::vector<std::pair<size_t, size_t>> from;  // (member, column) of each buffer
  };
  size_t members_;
  std::vector<std::pair<size_t, size_t>> cols_;  // (relation, column) of every column, in order
  std::vector<uint64_t> got_;
  std::vector<int> g_ranks_;
  std::array<Lane, 2> coded_lanes_;     // 4- and 8-byte widths
  std::array<Decompress, 2> decompress_;

  const Column& column(const std::vector<std::vector<Column>>& columns, size_t k) const {
    return columns[cols_[k].first][cols_[k].second];
  }
  // Compressed bytes member j sends here of column k (0: sent as rows).
  uint64_t word(const Group& g, size_t j, size_t k) const { return got_[size_t(g.ranks[j]) * cols_.size() + k]; }
};

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

  std::vector<Lane> lanes;
  std::unique_ptr<CompressedExchange> coded;
  if (cfg.compression == Compression::Off) {
    for (size_t i = 0; i < 2; ++i)
      for (const Column& x : columns[i]) lanes.push_back(column_lane(x, traffic[i], cfg.chunk_rows));
  } else {
    rank.sync_all();
    rank.barrier();
    begin_phase(rank, "compress" + suffix);
    coded = std::make_unique<CompressedExchange>(rank, g, level, cfg, space, traffic, columns);
    lanes = coded->lanes;
  }

  // Every rank partitioned and allocated before anyone exchanges: the exchange phase times the
  // all-to-all alone, not the wait for the slowest partition, and no allocation (which waits for
  // the GPU's earlier work) meets a receive a peer parked already (cuda_fabric.hpp, Gates).
  rank.sync_all();
  rank.barrier();
  begin_phase(rank, "shuffle" + suffix);
  exchange(rank, g, level, lanes, cfg);
  if (coded) {
    begin_phase(rank, "decompress" + suffix);
    coded->decompress(rank, traffic, columns);
  }

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
// Bound = max(memory, links); a link whose bandwidth is unknown (0) is left out. With compression
// on, the links' bytes depend on the data's ratio (known only once sampled): the bound is the
// memory term alone, still a lower bound (the compressed run partitions and joins all the same),
// and the bytes a run sent are in its results (sent_bytes).
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
  if (cfg.compression == Compression::Off && links > best.seconds)
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
