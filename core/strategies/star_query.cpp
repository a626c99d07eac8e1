#include "core/strategies/star_query.hpp"

#include <cstring>

#include "core/common/error.hpp"

namespace joinlab {

namespace {

constexpr TupleFormat kDimensionFormat{4, 4}, kLineorderFormat{8, 8};
constexpr double kDimensionLoadFactor = 0.5;

// A buffer of `bytes` zeros in `space`, copied from zeroed host memory (no backend clears
// memory: the cpu backend reuses freed blocks).
Buffer zeroed(Rank& rank, Stream st, MemSpace space, uint64_t bytes, const std::string& tag) {
  Buffer zeros = rank.alloc(MemSpace::Host, bytes, tag + ".zeros");
  if (zeros->ptr) std::memset(zeros->ptr, 0, bytes);
  Buffer b = rank.alloc(space, bytes, tag);
  rank.copy(st, b, 0, zeros, 0, bytes);
  rank.sync(st);
  return b;
}

}  // namespace

ssb::Scale star_scale(const Workload& w) { return ssb::scale_at(w.s.scale_factor, w.s.seed); }
ssb::StarQuery star_plan(const Workload& w) { return ssb::plan(w.query, star_scale(w)); }

uint64_t star_dimension_bytes(const Workload& w) {
  if (!w.is_ssb()) return 0;
  const ssb::Scale scale = star_scale(w);
  const ssb::StarQuery q = ssb::plan(w.query, scale);
  uint64_t bytes = uint64_t(q.groups) * 8;
  for (int i = 0; i < q.steps; ++i) {
    const uint64_t rows = scale.rows(ssb::Table(q.table[i]));
    bytes += rows * kDimensionFormat.tuple_bytes() + hash_table_bytes(TableKind::Chained, kDimensionFormat, rows, kDimensionLoadFactor);
  }
  return bytes;
}

StarProbeOp StarTables::probe(const Tuples& in) const {
  StarProbeOp op;
  op.scale = scale;
  op.query = query;
  for (const HashTable& t : dims) op.dims.push_back(&t);
  op.in = in;
  op.groups = groups;
  return op;
}

StarInputs generate_star_inputs(Rank& rank, const JoinJob& job, MemSpace space) {
  begin_phase(rank, kGeneratePhase);
  const Workload& w = job.workload;
  StarInputs si;
  StarTables& t = si.tables;
  t.scale = star_scale(w);
  t.query = ssb::plan(w.query, t.scale);
  const Stream st{0};
  si.in.r.spec = &w.r;
  si.in.r.tuples.fmt = kLineorderFormat;  // no rows: the dimensions are every rank's own
  si.in.s.spec = &w.s;
  const RowRange mine = rank_slice(t.scale.lineorders, rank.id(), rank.size());
  si.in.s.tuples = rank.alloc_tuples(MemSpace::Host, mine.size(), kLineorderFormat, "ssb.lineorder");
  rank.launch(st, StarGenerateOp{t.scale, t.query, ssb::Table::Lineorder, mine.begin, si.in.s.tuples});
  std::vector<Tuples> rows;
  for (int i = 0; i < t.query.steps; ++i) {
    const ssb::Table table = ssb::Table(t.query.table[i]);
    Tuples d = rank.alloc_tuples(space, t.scale.rows(table), kDimensionFormat, std::string("ssb.") + ssb::to_string(table));
    rank.launch(st, StarGenerateOp{t.scale, t.query, table, 0, d});
    rows.push_back(d);
  }
  t.groups = zeroed(rank, st, space, uint64_t(t.query.groups) * 8, "ssb.groups");
  begin_phase(rank, "dimensions");
  t.dims.reserve(rows.size());  // the builds hold pointers into it
  for (size_t i = 0; i < rows.size(); ++i) {
    t.dims.push_back(rank.alloc_table(space, TableKind::Chained, kDimensionFormat, rows[i].rows, kDimensionLoadFactor,
                                      mix64(w.s.seed + i), std::string("ssb.table.") + ssb::to_string(ssb::Table(t.query.table[i]))));
    rank.launch(st, BuildOp{rows[i], &t.dims.back()});
  }
  rank.sync(st);  // the rows go: each table holds its own copy
  return si;
}

void report_star(Rank& rank, Stream st, const StarTables& t, uint64_t count) {
  begin_phase(rank, kVerifyPhase);
  if (!rank.has_data()) {
    RankResult r;
    r.count = count;
    r.has_checksum = false;
    rank.report(r);
    return;
  }
  const uint64_t bytes = uint64_t(t.query.groups) * 8;
  Buffer host = rank.alloc(MemSpace::Host, bytes, "ssb.groups.host");
  rank.copy(st, host, 0, t.groups, 0, bytes);
  rank.sync(st);
  const uint64_t* mine = data_of<uint64_t>(host);
  const std::vector<uint64_t> all = rank.allgather(std::vector<uint64_t>(mine, mine + t.query.groups));
  ssb::QueryResult total;
  total.sums.assign(t.query.groups, 0);
  for (size_t i = 0; i < all.size(); ++i) total.sums[i % t.query.groups] += all[i];
  RankResult r;
  r.count = count;
  r.checksum = rank.id() == 0 ? total.checksum() : 0;
  rank.report(r);
}

void check_star_support(const Workload& w, const std::string& strategy, bool supported) {
  if (w.is_ssb() && !supported)
    throw InputError(std::string("workload.query = ") + ssb::to_string(w.query) + ": strategy " + strategy +
                     " does not run Star Schema Benchmark queries (gpj and gpj-b do)");
}

}  // namespace joinlab
