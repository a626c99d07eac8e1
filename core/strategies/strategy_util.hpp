// Pieces every strategy shares: option declarations with their checks, generating a rank's
// slice of R and S, sizing join outputs (exact count, or an estimate with retry), and the
// checksum of a rank's output (with late materialization of payload columns).
//
// Everything here is written against Rank and decides from sizes only, so it runs unchanged in
// simulation (no data, modeled operator results).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/strategies/strategy.hpp"

namespace joinlab {

// --- options ---------------------------------------------------------------------------------
// Value checks run as Boost.Program_options notifiers and throw po::error naming the key, the
// value and what is allowed (the runner turns them into InputError).
po::typed_value<std::string>* choice_option(const std::string& key, std::vector<std::string> choices,
                                            const std::string& default_value);
po::typed_value<int64_t>* int_option(const std::string& key, int64_t default_value, int64_t lo, int64_t hi);
// A real in (lo, hi].
po::typed_value<double>* fraction_option(const std::string& key, double default_value, double lo, double hi);

// output: count_then_write | direct | count_only, defaulting to what the strategy's paper does.
void add_output_option(po::options_description& d, const std::string& default_mode);
void add_table_kind_option(po::options_description& d);  // table
void add_table_options(po::options_description& d);      // table, load_factor
OutputMode output_mode(const po::variables_map& vm);
TableKind table_kind(const po::variables_map& vm);
double load_factor(const po::variables_map& vm);
MemSpace mem_space(const std::string& name);  // "device" | "pinned" | "host"

// --- relations as a rank holds them ----------------------------------------------------------
// With one payload column the tuple value is the payload. With more, the value is a row index
// (late materialization): the payload columns are gathered by it once the join is done.
bool late_materialized(const RelationSpec& spec);
uint8_t row_id_bytes(uint64_t rows);  // 4 while row ids fit in 32 bits, else 8
TupleFormat tuple_format(const RelationSpec& spec);
uint64_t payload_bytes_per_row(const RelationSpec& spec);  // all payload columns

struct RelationData {
  const RelationSpec* spec = nullptr;
  Tuples tuples;
  // Late materialization only: payload column c of the rows the values refer to; value v is
  // row v - base_row of every column.
  std::vector<Buffer> payload;
  uint64_t base_row = 0;
  bool late() const { return late_materialized(*spec); }
};

// Generates global rows `rows` of `spec` (keys, values, and the payload columns under late
// materialization) into `space`.
RelationData generate_relation(Rank& rank, Stream s, const RelationSpec& spec, const RelationSpec* referenced,
                               RowRange rows, MemSpace space, const std::string& tag);

struct Inputs {
  RelationData r, s;
};
// Starts the kGeneratePhase phase and generates this rank's slice (rank_slice) of R and S.
Inputs generate_inputs(Rank& rank, const JoinJob& job, MemSpace r_space, MemSpace s_space);

// Syncs every stream (so the previous phase's work is accounted to it), then starts `name`.
void begin_phase(Rank& rank, const std::string& name);

// --- join outputs ----------------------------------------------------------------------------
// Where a rank's join operators write: a list of output segments appended to in order. A
// segment is never reallocated (operators may still be writing into it); when the current one
// is too short a new one is started.
class OutputSink {
 public:
  struct Segment {
    JoinOutput out;
    uint64_t rows = 0;  // rows written and kept
  };
  OutputSink(Rank& rank, MemSpace space, TupleFormat r_fmt, TupleFormat s_fmt, std::string tag);

  // Makes room for `rows` more rows, starting a segment of max(rows, segment_rows) if needed.
  void reserve(uint64_t rows, uint64_t segment_rows = 0);
  // Where the next operator writes, and what it may fill.
  const JoinOutput& current() const { return current_.out; }
  uint64_t next_row() const { return current_.rows; }
  void commit(uint64_t rows);           // the operator at next_row() wrote `rows` rows
  void count_unwritten(uint64_t rows);  // matches counted but not materialized (CountOnly)
  // Takes over another sink's rows and counts (a strategy whose join ran in two parts, e.g.
  // gpj-h's GPU and CPU partitions); its segments stay where they are. Same row formats only.
  void append(const OutputSink& other);

  uint64_t count() const { return count_; }
  bool materialized() const { return unwritten_ == 0; }
  std::vector<Segment> segments() const;  // the written rows, in order
  TupleFormat r_fmt() const { return r_fmt_; }
  TupleFormat s_fmt() const { return s_fmt_; }
  JoinOutput empty_output() const;  // capacity 0, for CountOnly

 private:
  Rank* rank_;
  MemSpace space_;
  TupleFormat r_fmt_, s_fmt_;
  std::string tag_;
  std::vector<Segment> done_;
  Segment current_;
  uint64_t count_ = 0, unwritten_ = 0;
};

// Builds the join operator writing into `out` from row `out_first` in `mode`.
using JoinOpFactory = std::function<Op(const JoinOutput& out, uint64_t out_first, OutputMode mode)>;

// Runs one join operator under the output policy and appends its rows to `sink`; returns its
// match count.
//  * CountOnly: one counting run, nothing written.
//  * CountThenWrite: a counting run sizes the output exactly, then the operator writes.
//  * Direct: the operator writes into what the sink has (an empty sink first gets a segment of
//    `sizing.direct_rows`); on overflow the sink grows to the reported count and it reruns.
// A segment the sink starts holds at least sizing.min_segment_rows (operators that append many
// small outputs, like chunked's, share one segment instead of each allocating its own).
// `while_running`, if set, is called once the first run is queued, before waiting for it (to
// queue independent work behind it, e.g. the next chunk's copy).
struct OutputSizing {
  uint64_t direct_rows = 1;
  uint64_t min_segment_rows = 0;
};
uint64_t run_join(Rank& rank, Stream s, OutputMode policy, OutputSink& sink, OutputSizing sizing,
                  const JoinOpFactory& make_op, const std::function<void()>& while_running = {});

// Output rows to allocate for Direct before anything is known: a primary-key join emits at
// most one row per probe tuple; other joins may overflow it and rerun.
uint64_t direct_output_estimate(uint64_t r_rows, uint64_t s_rows);

// Rows of the output segments of a join whose probe side has s_rows rows: one match per probe
// row (all of a primary-key join's output, direct_output_estimate) unless that would take more
// than half of what `space` has left, and at least `at_least`.
uint64_t output_segment_rows(Rank& rank, MemSpace space, TupleFormat r_fmt, TupleFormat s_fmt, uint64_t s_rows,
                             uint64_t at_least);

// A new sink in `space` filled by one run_join of the operator joining r and s.
OutputSink join_into_new_output(Rank& rank, Stream st, OutputMode policy, MemSpace space, const Tuples& r,
                                const Tuples& s, const std::string& tag, const JoinOpFactory& make_op);

// Phases "materialize" (late materialization: gathers the payload columns by the output's row
// indexes, join work) and kVerifyPhase (the checksum of the output rows: verification, left out
// of the measured time like generation); then reports this rank's count and checksum. A
// CountOnly output has no rows to checksum and is reported with has_checksum = false.
void report_output(Rank& rank, Stream s, const OutputSink& sink, const RelationData& r, const RelationData& s_rel,
                   MemSpace scratch);

// --- strategies from functions ---------------------------------------------------------------
using StrategyBody = void (*)(Rank&, const JoinJob&);
std::function<std::unique_ptr<Strategy>()> strategy_factory(StrategyBody body);
using BoundFn = Bound (*)(const JoinJob&, const ClusterShape&, const Bandwidths&);
StrategyInfo strategy_info(const std::string& name, const std::string& description, int min_ranks, int max_ranks,
                           std::function<void(po::options_description&)> add_options, StrategyBody body, BoundFn bound);

// --- analytic bounds -------------------------------------------------------------------------
// Bytes of a relation's tuples as strategies carry them (key + value), and with every payload
// column (what a shuffle ships).
double tuple_bytes_total(const RelationSpec& spec);
double full_row_bytes_total(const RelationSpec& spec);
// One rank's share of R's and S's tuples (tuple_bytes_total of both over `ranks`).
double tuple_bytes_per_rank(const Workload& w, double ranks);
// Output bytes the bound counts as written (rows of key + R value + S value): |S| * match rate
// rows for a foreign-key S (exact for a primary-key join), else 0 (unknown, so not counted: the
// bound stays a lower bound); 0 for CountOnly.
double bound_output_bytes(const Workload& w, OutputMode mode);
// "3.00 TB/s" style text for the bound's resource description.
std::string rate_text(double bytes_per_second);
// `bytes` through device memory at bw.mem: "device memory 3.00 TB/s: <what>".
Bound memory_bound(double bytes, const Bandwidths& bw, const std::string& what);

}  // namespace joinlab
