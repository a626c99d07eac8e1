// What a join of a generated workload must return: computed without running a join where the
// build (or probe) side is unique, by walking the other side and inverting the unique key
// generator; otherwise by a simple reference hash join (small inputs only).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/workload/relation.hpp"

namespace joinlab {

struct JoinDigest {
  uint64_t count = 0;
  uint64_t checksum = 0;
  bool operator==(const JoinDigest& o) const { return count == o.count && checksum == o.checksum; }
};

struct ExpectedResult {
  JoinDigest digest;
  std::string method;  // "closed form (R unique)", "reference join"
};

// Largest |R| + |S| the reference hash join accepts (memory and time on a 2-core machine).
constexpr uint64_t kReferenceJoinMaxRows = 1ULL << 27;

bool can_verify(const Workload& w);
// Throws InputError when the workload cannot be verified (neither side unique and too large).
ExpectedResult expected_result(const Workload& w, int threads = 0);

// The match count alone (digest.checksum 0), for runs without a checksum (count-only output,
// simulation): by the cheapest exact form. S tpch_lineitem: |S| (each row has its order). S
// foreign keys into R: |S| when every row matches, else the rows whose match word hits
// (KeyGen::hits, one word per row, no key); otherwise the count of expected_result. Throws InputError as expected_result does.
ExpectedResult expected_count(const Workload& w, int threads = 0);

// An SSB query (workload.query): the reference evaluation over the generated lineorder
// (ssb::reference): the qualifying rows and the checksum of the groups' revenue sums.
ExpectedResult expected_star_result(const Workload& w, int threads = 0);
// Simulation, which has no data: the expected count of qualifying rows (lineorder rows x the
// product of the generated dimensions' pass fractions, ssb::expected_qualifying), and the
// tolerance a simulated count is held to: half a row per rank, what rounding each rank's
// expectation to whole rows may leave. A VerificationError says what differed.
void check_star_expected_count(uint64_t got, const Workload& w, int ranks, const std::string& what);

// Reference join of explicit tuples (tests): every (r, s) pair with equal keys.
JoinDigest reference_join(const std::vector<uint64_t>& r_keys, const std::vector<uint64_t>& r_vals,
                          const std::vector<uint64_t>& s_keys, const std::vector<uint64_t>& s_vals);

// Compares and throws VerificationError saying what differed.
void check_result(const JoinDigest& got, const ExpectedResult& want, const std::string& what);

}  // namespace joinlab
