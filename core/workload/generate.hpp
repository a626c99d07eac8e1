// Host-side construction of generators from specs, and a plain sequential generator used by
// the expectation code and tests. The backends' Generate operators use the same KeyGen.
#pragma once
#include <cstdint>
#include <vector>

#include "core/workload/keygen.hpp"
#include "core/workload/relation.hpp"

namespace joinlab {

// The relation's seed salted with its name, so R and S of one seed differ.
uint64_t relation_seed(const RelationSpec& spec);
// `referenced` is required for ForeignKey (the relation whose keys it draws).
KeyGen make_keygen(const RelationSpec& spec, const RelationSpec* referenced);

// Global rows [range.begin, range.end): keys and payload column `column` (widened to 64 bits).
std::vector<uint64_t> generate_keys(const RelationSpec& spec, const RelationSpec* referenced, RowRange range);
std::vector<uint64_t> generate_payload(const RelationSpec& spec, int column, RowRange range);

}  // namespace joinlab
