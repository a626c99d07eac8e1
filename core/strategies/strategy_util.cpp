#include "core/strategies/strategy_util.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/common/error.hpp"

namespace joinlab {

// --- options ---------------------------------------------------------------------------------

po::typed_value<std::string>* choice_option(const std::string& key, std::vector<std::string> choices,
                                            const std::string& default_value) {
  return po::value<std::string>()->default_value(default_value)->notifier([key, choices](const std::string& v) {
    if (std::find(choices.begin(), choices.end(), v) != choices.end()) return;
    std::string allowed;
    for (auto& c : choices) allowed += (allowed.empty() ? "" : ", ") + c;
    throw po::error(key + " = '" + v + "': expected one of " + allowed);
  });
}

po::typed_value<int64_t>* int_option(const std::string& key, int64_t default_value, int64_t lo, int64_t hi) {
  return po::value<int64_t>()->default_value(default_value)->notifier([key, lo, hi](int64_t v) {
    if (v >= lo && v <= hi) return;
    throw po::error(key + " = " + std::to_string(v) + ": must be in [" + std::to_string(lo) + ", " +
                    std::to_string(hi) + "]");
  });
}

po::typed_value<double>* fraction_option(const std::string& key, double default_value, double lo, double hi) {
  return po::value<double>()->default_value(default_value)->notifier([key, lo, hi](double v) {
    if (v > lo && v <= hi) return;
    std::ostringstream m;
    m << key << " = " << v << ": must be in (" << lo << ", " << hi << "]";
    throw po::error(m.str());
  });
}

void add_output_option(po::options_description& d, const std::string& default_mode) {
  d.add_options()("output", choice_option("output", {"count_then_write", "direct", "count_only"}, default_mode),
                  "join output: count_then_write (count the matches, allocate exactly, write), direct (write "
                  "into an estimated buffer; on overflow grow to the reported count and rerun), count_only "
                  "(count, materialize nothing; the result is verified on its count only)");
}

void add_table_kind_option(po::options_description& d) {
  d.add_options()("table", choice_option("table", {"linear", "chained"}, "linear"),
                  "hash table: linear (open addressing, linear probing) or chained (bucket heads + chain array)");
}

void add_table_options(po::options_description& d) {
  // Global tables (one per rank) may also be hash + row-id tables; per-partition ones (phj) not.
  d.add_options()("table", choice_option("table", {"linear", "chained", "hash_rowid"}, "linear"),
                  "hash table: linear (open addressing, linear probing), chained (bucket heads + chain array) "
                  "or hash_rowid (linear probing over 4-byte hash + 4-byte row id slots, gao2021)");
  d.add_options()("load_factor", fraction_option("load_factor", 0.5, 0.0, 0.9),
                  "rows / slots of the hash table (slots rounded up to a power of two); 0.5 as in gao2021");
}

OutputMode output_mode(const po::variables_map& vm) {
  const std::string& v = vm["output"].as<std::string>();
  if (v == "direct") return OutputMode::Direct;
  if (v == "count_only") return OutputMode::CountOnly;
  return OutputMode::CountThenWrite;
}

TableKind table_kind(const po::variables_map& vm) {
  const std::string& v = vm["table"].as<std::string>();
  if (v == "hash_rowid") return TableKind::HashRowId;
  return v == "chained" ? TableKind::Chained : TableKind::LinearProbing;
}

double load_factor(const po::variables_map& vm) { return vm["load_factor"].as<double>(); }

MemSpace mem_space(const std::string& name) {
  if (name == "pinned") return MemSpace::Pinned;
  if (name == "host") return MemSpace::Host;
  return MemSpace::Device;
}

// --- relations -------------------------------------------------------------------------------

bool late_materialized(const RelationSpec& spec) { return spec.payload_bytes.size() > 1; }

uint8_t row_id_bytes(uint64_t rows) { return rows <= (1ULL << 32) ? 4 : 8; }

TupleFormat tuple_format(const RelationSpec& spec) {
  TupleFormat f;
  f.key_bytes = spec.key_bytes;
  f.val_bytes = late_materialized(spec) ? row_id_bytes(spec.rows) : spec.payload_bytes[0];
  return f;
}

uint64_t payload_bytes_per_row(const RelationSpec& spec) {
  uint64_t b = 0;
  for (auto p : spec.payload_bytes) b += p;
  return b;
}

RelationData generate_relation(Rank& rank, Stream s, const RelationSpec& spec, const RelationSpec* referenced,
                               RowRange rows, MemSpace space, const std::string& tag) {
  RelationData d;
  d.spec = &spec;
  d.tuples = rank.alloc_tuples(space, rows.size(), tuple_format(spec), tag);
  GenerateOp gen;
  gen.spec = spec;
  gen.referenced = referenced;
  gen.first_row = rows.begin;
  gen.value_is_rowid = d.late();
  gen.out = d.tuples;
  rank.launch(s, gen);
  if (d.late()) {
    d.base_row = rows.begin;
    for (size_t c = 0; c < spec.payload_bytes.size(); ++c) {
      GeneratePayloadOp p;
      p.spec = spec;
      p.column = int(c);
      p.first_row = rows.begin;
      p.rows = rows.size();
      p.out = rank.alloc(space, rows.size() * spec.payload_bytes[c], tag + ".payload" + std::to_string(c));
      d.payload.push_back(p.out);
      rank.launch(s, p);
    }
  }
  return d;
}

Inputs generate_inputs(Rank& rank, const JoinJob& job, MemSpace r_space, MemSpace s_space) {
  begin_phase(rank, kGeneratePhase);
  const Workload& w = job.workload;
  const RelationSpec* referenced = w.referenced_by_s();
  Inputs in;
  in.r = generate_relation(rank, Stream{0}, w.r, nullptr, rank_slice(w.r.rows, rank.id(), rank.size()), r_space, "R");
  in.s =
      generate_relation(rank, Stream{0}, w.s, referenced, rank_slice(w.s.rows, rank.id(), rank.size()), s_space, "S");
  return in;
}

void begin_phase(Rank& rank, const std::string& name) {
  rank.sync_all();
  rank.phase(name);
  rank.strategy_phase_began();
}

// --- join outputs ----------------------------------------------------------------------------

OutputSink::OutputSink(Rank& rank, MemSpace space, TupleFormat r_fmt, TupleFormat s_fmt, std::string tag)
    : rank_(&rank), space_(space), r_fmt_(r_fmt), s_fmt_(s_fmt), tag_(std::move(tag)) {
  current_.out = empty_output();
}

JoinOutput OutputSink::empty_output() const {
  JoinOutput o;
  o.r_fmt = r_fmt_;
  o.s_fmt = s_fmt_;
  return o;
}

void OutputSink::reserve(uint64_t rows, uint64_t segment_rows) {
  if (current_.out.capacity - current_.rows >= rows) return;
  if (current_.rows > 0) done_.push_back(current_);
  uint64_t cap = std::max(rows, segment_rows);
  current_ = Segment{};
  current_.out = rank_->alloc_output(space_, cap, r_fmt_, s_fmt_, tag_ + "." + std::to_string(done_.size()));
}

void OutputSink::commit(uint64_t rows) {
  if (current_.rows + rows > current_.out.capacity)
    throw RuntimeError(tag_ + ": " + std::to_string(rows) + " output rows committed past the capacity of " +
                       std::to_string(current_.out.capacity - current_.rows));
  current_.rows += rows;
  count_ += rows;
}

void OutputSink::count_unwritten(uint64_t rows) {
  count_ += rows;
  unwritten_ += rows;
}

void OutputSink::append(const OutputSink& other) {
  if (other.r_fmt_.tuple_bytes() != r_fmt_.tuple_bytes() || other.s_fmt_.tuple_bytes() != s_fmt_.tuple_bytes() ||
      other.r_fmt_.key_bytes != r_fmt_.key_bytes)
    throw RuntimeError(tag_ + ": cannot append output '" + other.tag_ + "' of other row formats");
  if (current_.rows > 0) done_.push_back(current_);
  current_ = Segment{};
  current_.out = empty_output();
  for (const Segment& seg : other.segments()) done_.push_back(seg);
  count_ += other.count_;
  unwritten_ += other.unwritten_;
}

std::vector<OutputSink::Segment> OutputSink::segments() const {
  std::vector<Segment> all = done_;
  if (current_.rows > 0) all.push_back(current_);
  return all;
}

uint64_t run_join(Rank& rank, Stream s, OutputMode policy, OutputSink& sink, OutputSizing sizing,
                  const JoinOpFactory& make_op, const std::function<void()>& while_running) {
  auto started = [&] {
    if (while_running) while_running();
  };
  if (policy == OutputMode::CountOnly || policy == OutputMode::CountThenWrite) {
    Launched counted = rank.launch(s, make_op(sink.empty_output(), 0, OutputMode::CountOnly));
    started();
    uint64_t matches = counted.get().count;
    if (policy == OutputMode::CountOnly) {
      sink.count_unwritten(matches);
      return matches;
    }
    sink.reserve(matches, sizing.min_segment_rows);
    const OpResult written = rank.launch(s, make_op(sink.current(), sink.next_row(), OutputMode::CountThenWrite)).get();
    // Both runs see the same data; in simulation both counts are modeled, so only real runs check.
    if (rank.has_data() && (written.overflow || written.count != matches))
      throw RuntimeError("join output: the counting run found " + std::to_string(matches) +
                         " matches but the writing run " + std::to_string(written.count) +
                         (written.overflow ? " and overflowed its exactly sized output" : ""));
    sink.commit(matches);
    return matches;
  }
  // Direct: write into what there is (a fresh sink gets an estimated segment).
  if (sink.current().capacity == sink.next_row())
    sink.reserve(1, std::max(sizing.direct_rows, sizing.min_segment_rows));
  Launched first = rank.launch(s, make_op(sink.current(), sink.next_row(), OutputMode::Direct));
  started();
  OpResult r = first.get();
  if (r.overflow) {
    sink.reserve(r.count, sizing.min_segment_rows);
    const uint64_t expected = r.count;
    r = rank.launch(s, make_op(sink.current(), sink.next_row(), OutputMode::Direct)).get();
    if (rank.has_data() && (r.overflow || r.count != expected))
      throw RuntimeError("join output: rerun after overflow wrote " + std::to_string(r.count) + " rows, expected " +
                         std::to_string(expected) + (r.overflow ? " (overflowed again)" : ""));
    r.count = expected;
  }
  sink.commit(r.count);
  return r.count;
}

uint64_t direct_output_estimate(uint64_t r_rows, uint64_t s_rows) { return std::max<uint64_t>({r_rows, s_rows, 1}); }

uint64_t output_segment_rows(Rank& rank, MemSpace space, TupleFormat r_fmt, TupleFormat s_fmt, uint64_t s_rows,
                             uint64_t at_least) {
  const uint64_t row_bytes = uint64_t(r_fmt.key_bytes) + r_fmt.val_bytes + s_fmt.val_bytes;
  return std::max(std::min(direct_output_estimate(0, s_rows), rank.capacity(space) / 2 / row_bytes), at_least);
}

OutputSink join_into_new_output(Rank& rank, Stream st, OutputMode policy, MemSpace space, const Tuples& r,
                                const Tuples& s, const std::string& tag, const JoinOpFactory& make_op) {
  OutputSink sink(rank, space, r.fmt, s.fmt, tag);
  run_join(rank, st, policy, sink, {direct_output_estimate(r.rows, s.rows)}, make_op);
  return sink;
}

namespace {

// The value columns the checksum reads for one side of every output row: the output's value
// column itself, or the payload columns gathered by it (late materialization).
std::vector<Buffer> side_columns(Rank& rank, Stream s, const RelationData& rel, const Buffer& values,
                                 uint8_t value_bytes, uint64_t rows, MemSpace scratch, const std::string& tag,
                                 std::vector<uint8_t>& widths) {
  const RelationSpec& spec = *rel.spec;
  if (!rel.late()) {
    widths.push_back(value_bytes);
    return {values};
  }
  std::vector<Buffer> cols;
  for (size_t c = 0; c < spec.payload_bytes.size(); ++c) {
    GatherOp g;
    g.row_ids = values;
    g.id_bytes = value_bytes;
    g.column = rel.payload[c];
    g.col_bytes = spec.payload_bytes[c];
    g.base_row = rel.base_row;
    g.rows = rows;
    g.out = rank.alloc(scratch, rows * g.col_bytes, tag + "." + spec.name + std::to_string(c));
    rank.launch(s, g);
    cols.push_back(g.out);
    widths.push_back(g.col_bytes);
  }
  return cols;
}

}  // namespace

void report_output(Rank& rank, Stream s, const OutputSink& sink, const RelationData& r, const RelationData& s_rel,
                   MemSpace scratch) {
  if (!sink.materialized()) {
    // The join's phases end here, as they do before a materialized output's checksum: what the
    // rank frees after its report (gigabytes of buffers) is not join time.
    begin_phase(rank, kVerifyPhase);
    rank.report({sink.count(), 0, false});
    return;
  }
  auto segments = sink.segments();
  const bool late = r.late() || s_rel.late();
  if (late) begin_phase(rank, "materialize");
  std::vector<ChecksumOp> sums;
  for (size_t i = 0; i < segments.size(); ++i) {
    const auto& seg = segments[i];
    const std::string tag = "materialized." + std::to_string(i);
    ChecksumOp c;
    c.keys = seg.out.keys;
    c.key_bytes = seg.out.r_fmt.key_bytes;
    auto rc = side_columns(rank, s, r, seg.out.rvals, seg.out.r_fmt.val_bytes, seg.rows, scratch, tag, c.column_bytes);
    auto sc =
        side_columns(rank, s, s_rel, seg.out.svals, seg.out.s_fmt.val_bytes, seg.rows, scratch, tag, c.column_bytes);
    c.columns = rc;
    c.columns.insert(c.columns.end(), sc.begin(), sc.end());
    c.first = 0;
    c.rows = seg.rows;
    sums.push_back(std::move(c));
  }
  begin_phase(rank, kVerifyPhase);  // excluded from the measured time (timed_phase)
  std::vector<Launched> launched;
  for (auto& c : sums) launched.push_back(rank.launch(s, c));
  RankResult result;
  result.has_checksum = rank.has_data();
  for (auto& l : launched) {
    result.count += l.get().count;
    result.checksum += l.get().checksum;  // a wrapping sum over rows, so segments add up
  }
  if (rank.has_data() && result.count != sink.count())
    throw RuntimeError("rank " + std::to_string(rank.id()) + ": the checksum counted " + std::to_string(result.count) +
                       " output rows but the join reported " + std::to_string(sink.count()));
  result.count = sink.count();  // the same on real runs; in simulation the join's modeled count
  rank.report(result);
}

// --- strategies from functions ---------------------------------------------------------------

namespace {
class FunctionStrategy : public Strategy {
 public:
  explicit FunctionStrategy(StrategyBody body) : body_(body) {}
  void run(Rank& rank, const JoinJob& job) override { body_(rank, job); }

 private:
  StrategyBody body_;
};
}  // namespace

std::function<std::unique_ptr<Strategy>()> strategy_factory(StrategyBody body) {
  return [body] { return std::make_unique<FunctionStrategy>(body); };
}

StrategyInfo strategy_info(const std::string& name, const std::string& description, int min_ranks, int max_ranks,
                           std::function<void(po::options_description&)> add_options, StrategyBody body,
                           BoundFn bound) {
  StrategyInfo i;
  i.name = name;
  i.description = description;
  i.min_ranks = min_ranks;
  i.max_ranks = max_ranks;
  i.add_options = std::move(add_options);
  i.make = strategy_factory(body);
  i.bound = bound;
  return i;
}

// --- analytic bounds -------------------------------------------------------------------------

double tuple_bytes_total(const RelationSpec& spec) { return double(spec.rows) * tuple_format(spec).tuple_bytes(); }

double tuple_bytes_per_rank(const Workload& w, double ranks) {
  return (tuple_bytes_total(w.r) + tuple_bytes_total(w.s)) / ranks;
}

double full_row_bytes_total(const RelationSpec& spec) { return double(spec.rows) * double(spec.tuple_bytes()); }

double bound_output_bytes(const Workload& w, OutputMode mode) {
  if (mode == OutputMode::CountOnly || !w.s.references_r()) return 0;
  const double matching = w.s.dist == KeyDist::ForeignKey ? w.s.match_rate : 1.0;  // every lineitem has its order
  return double(w.s.rows) * matching *
         (double(w.r.key_bytes) + tuple_format(w.r).val_bytes + tuple_format(w.s).val_bytes);
}

std::string rate_text(double bytes_per_second) {
  char buf[64];
  if (bytes_per_second >= 1e12)
    std::snprintf(buf, sizeof buf, "%.2f TB/s", bytes_per_second / 1e12);
  else
    std::snprintf(buf, sizeof buf, "%.1f GB/s", bytes_per_second / 1e9);
  return buf;
}

Bound memory_bound(double bytes, const Bandwidths& bw, const std::string& what) {
  if (bw.mem <= 0) return {0, "device memory bandwidth unknown (" + what + ")"};
  return {bytes / bw.mem, "device memory " + rate_text(bw.mem) + ": " + what};
}

}  // namespace joinlab
