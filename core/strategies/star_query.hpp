// Star Schema Benchmark queries on a rank (thostrup2023 section 6.3): lineorder is this rank's
// slice in host memory, shipped like S; every rank builds every dimension of the query, filtered
// (ssb.hpp's dimension_value), as a chained hash table in its GPU memory before the stream, and
// probes each lineorder row through them one after another (StarProbeOp), summing the revenue
// of each group.
#pragma once
#include <vector>

#include "core/strategies/strategy_util.hpp"

namespace joinlab {

struct StarTables {
  ssb::Scale scale;
  ssb::StarQuery query;
  std::vector<HashTable> dims;  // one per step of the plan
  Buffer groups;                // query.groups revenue sums, zeroed
  // The probe operator over `in` (or a consumer's template: `in` empty).
  StarProbeOp probe(const Tuples& in) const;
};

// The query's scale and plan (InputError naming workload.scale_factor or workload.query).
ssb::Scale star_scale(const Workload& w);
ssb::StarQuery star_plan(const Workload& w);

// Starts kGeneratePhase: this rank's slice of lineorder in host memory as S (R empty), and the
// dimensions' rows in `space`; then phase "dimensions": their tables built there.
struct StarInputs {
  Inputs in;
  StarTables tables;
};
StarInputs generate_star_inputs(Rank& rank, const JoinJob& job, MemSpace space);

// Bytes of the query's dimensions on a rank: their generated rows and chained tables.
uint64_t star_dimension_bytes(const Workload& w);

// kVerifyPhase: this rank's `count`, and on rank 0 the checksum of the groups summed over every
// rank (ssb::QueryResult::checksum); without data the count alone.
void report_star(Rank& rank, Stream st, const StarTables& t, uint64_t count);

// InputError unless the strategy runs SSB queries (workload.query names the query).
void check_star_support(const Workload& w, const std::string& strategy, bool supported);

}  // namespace joinlab
