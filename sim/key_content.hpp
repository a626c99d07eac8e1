// What a range of rows holds, without the rows: the simulator's stand-in for tuple data.
//
// Strategies decide from sizes (histograms, partition offsets, match counts), so SimRank must
// answer those from the workload's distribution. A KeyContent describes a set of rows as
// components, each:
//  * heavy keys: explicit (key, rows) pairs, the top of a Zipf or skewed foreign-key
//    distribution (key values from the same generator as the real data), partitioned exactly;
//  * light rows: spread uniformly over a key universe (an interval such as 1..|R| for dense
//    keys, or a scattered set such as sparse unique keys) restricted by the partitionings the
//    rows went through (constraints: partition function + partition index).
// Partitioning splits components exactly for heavy keys and in expectation for light rows, with
// the expectations rounded to integers that sum to the rows (largest remainder; ties in index
// order from a point that depends on the rows split), so histograms and partition offsets are exact integers and deterministic. Joins estimate
// matches from two contents: heavy x heavy exactly, light x anything by density over the
// shared universe (an R slice of unique keys has density = its share of R).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/common/hashing.hpp"
#include "core/workload/keygen.hpp"
#include "core/workload/relation.hpp"
#include "models/op_model.hpp"

namespace joinlab::sim {

struct KeyUniverse {
  enum Kind : uint8_t { Interval, Scattered };
  Kind kind = Interval;
  uint64_t lo = 0, hi = 0;  // Interval: keys lo..hi. Scattered: keys drawn from 0..hi
  double size = 0;          // number of distinct keys in the set
  uint64_t id = 0;          // equal nonzero ids = the same key set (a relation's unique keys)
  uint64_t disjoint_from = 0;  // id of a set it shares no key with (a foreign key's misses vs R)
  bool exact_members = false;  // members.row_of_key() decides membership exactly
  KeyGen members;
  std::string what;         // "R keys", "zipf domain of S", ... (diagnostics)
};
using UniversePtr = std::shared_ptr<const KeyUniverse>;

struct Constraint {
  PartitionFn fn;
  uint32_t part = 0;
};

// The generated relation a component's rows came from (rows [first_row, first_row + rows) of it),
// kept through slices and partitionings: what the rows actually hold, in generation order, for
// estimates that depend on the values and their order (the compressed size of a column).
struct GeneratedRows {
  KeyGen gen;
  uint64_t first_row = 0, rows = 0;
};

struct Component {
  UniversePtr universe;
  std::vector<Constraint> constraints;             // canonical order
  uint64_t light = 0;                              // rows spread over universe ∩ constraints
  // Light rows of a relation's unique keys: how many of the relation's rows they were taken from
  // (0: not such rows). Its keys are that share of every partition's keys (cover / universe
  // size), whatever the partitionings: the pieces of a partition from every rank's slice add up
  // to the whole relation, so a join with a complete partition counts each probe row of its
  // keys exactly once, not by the densities of two expected row counts.
  uint64_t cover = 0;
  // The light rows are rows [at, at + light) of `of` light rows in a fixed order (of = 0: they are
  // their own sequence), over the same keys and constraints: a generated relation's, or those of
  // the component a slice or a split took them from. A split apportions the whole sequence and
  // gives a range the difference of two house-monotone shares (dhondt), so the splits of
  // consecutive ranges add up to the split of their union, as histograms of slices add up on
  // hardware. of_cover: the cover of all `of` rows, which a range's cover is the share of by
  // position, so the pieces of a partition from every slice add up to it even where a slice's
  // piece rounds to no rows.
  uint64_t at = 0, of = 0, of_cover = 0;
  double light_zipf = 0;  // cost models only: the light rows follow Zipf(light_zipf) by rank, after the heavy keys
  std::vector<std::pair<uint64_t, uint64_t>> heavy;  // (key, rows), sorted by key
  std::shared_ptr<const GeneratedRows> source;       // null: not (known to be) generated rows
  uint64_t rows() const;
};

struct KeyOrder;
struct KeyContent {
  std::vector<Component> parts;
  // Set when the rows are in key order (a sorted buffer): parts stay what they were before the
  // sort (whole reads count and cost as before), and a row range holds a key range (slice_content).
  std::shared_ptr<const KeyOrder> order;
  uint64_t rows() const;
};
using ContentPtr = std::shared_ptr<const KeyContent>;

// Sorted rows as consecutive pieces: piece i holds the keys of partition part[i] of a radix
// function over the keys' top bits (order_fn), its rows [first[i], first[i + 1]). Within a piece
// the keys are a distribution again, so a row range that ends inside a piece takes a share of it.
struct KeyOrder {
  PartitionFn fn;
  std::vector<uint32_t> part;  // ascending
  std::vector<ContentPtr> pieces;
  std::vector<uint64_t> first;  // pieces.size() + 1 row offsets
  uint64_t key_begin(size_t i) const { return uint64_t(part[i]) << fn.shift; }  // piece i's first key
};

// Rows [first_row, first_row + rows) of a generated relation.
ContentPtr generated_content(const RelationSpec& spec, const RelationSpec* referenced, uint64_t first_row,
                             uint64_t rows);
// Rows of unknown keys (a buffer the strategy never filled): uniform, matching nothing.
ContentPtr unknown_content(uint64_t rows);

// Splits `c` by `fn`: per-partition contents whose rows sum to c's rows exactly.
std::vector<ContentPtr> split_content(const KeyContent& c, const PartitionFn& fn);
// The same split, kept as row counts and built one partition at a time: a partitioned buffer is
// read partition by partition (a message each), and holding every partition's content of every
// rank (a million at 1024 ranks) would cost far more memory than the counts.
class ContentSplit {
 public:
  ContentSplit(const KeyContent& c, const PartitionFn& fn);
  ContentPtr piece(uint32_t p) const;  // split_content(c, fn)[p]
  uint64_t rows(uint32_t p) const;     // split_counts(c, fn)[p]
  uint32_t fanout() const { return fn_.fanout(); }
  // absorb_uniform(into, *piece(p)), without building piece p.
  bool absorb_piece(ContentPtr& into, uint32_t p) const;

 private:
  struct Share {
    Component base;  // c's component without rows and constraints
    std::vector<Constraint> constraints;  // its constraints
    std::vector<uint64_t> light;  // per partition (empty: none)
    std::vector<uint64_t> before, whole;  // a positioned component's (Component::at): its sequence's split
    void light_piece(Component& piece, uint32_t p) const;  // partition p's light rows, placed
    std::vector<std::pair<uint32_t, std::pair<uint64_t, uint64_t>>> heavy;  // (partition, (key, rows)), by partition
  };
  PartitionFn fn_;
  std::vector<Share> shares_;
  mutable std::vector<Constraint> scratch_;  // absorb_piece's constraints of piece p
};
// One partition of a split, not built: what a message of a partitioned buffer's partition
// carries, since its receiver most often only adds its rows to a region it extends.
struct PieceRef {
  std::shared_ptr<const ContentSplit> split;
  uint32_t part = 0;
  uint64_t rows = 0;  // split->rows(part), known to the reader (its partition offsets)
  explicit operator bool() const { return bool(split); }
};
// Only the row counts of split_content (the same numbers, without building contents).
std::vector<uint64_t> split_counts(const KeyContent& c, const PartitionFn& fn);
// Rows [first, end) of c's rows (end <= c.rows()). Sorted c: the pieces in the range, the
// partial ones at its ends sliced as below (a key range, sorted). Otherwise every component in
// proportion, and the rows
// of the components (heavy and light rows of each) in consecutive ranges add up to c's exactly:
// a component's rows among the first x rows are a house-monotone apportionment of x (D'Hondt),
// so those of [first, end) are the difference of two; so are a component's heavy keys' rows, and
// its light rows keep their position (Component::at), so splits of consecutive ranges add up to
// the split of c.
ContentPtr slice_content(const ContentPtr& c, uint64_t first, uint64_t end);
// The union of contents (components over the same keys and constraints are combined), in no
// order.
ContentPtr merge_contents(const std::vector<ContentPtr>& parts);
// The radix function a sorted content's pieces follow when its rows went through none over
// their top bits: 2^12 partitions over the top bits of the largest key c may hold (at least 64
// keys a partition, so pieces are rarely empty by rounding).
PartitionFn order_fn(const KeyContent& c);
// c's rows in key order (a sort): c itself when sorted, else sorted as merge_sorted({c}) sorts.
// `buckets` (bits > 0, over the keys' top bits): the pieces are its partitions.
ContentPtr sorted_content(const ContentPtr& c, const PartitionFn& buckets = {});
// The sorted union of runs (a merge of sorted runs). Its pieces are the partitions of one radix
// function over the keys' top bits: the coarsest one some component already went through
// (mgsmj's scatter by the most significant bits), else order_fn of the union. Components not
// partitioned by it are split by it from their unsorted rows, so every row of a relation goes
// through the same splits whichever run it is in (the pieces of a partition then add up to the
// relation's, cover included); runs already in its pieces are merged piece by piece. `buckets`
// (bits > 0 and ordering the keys): the pieces are its partitions instead.
ContentPtr merge_sorted(const std::vector<ContentPtr>& runs, const PartitionFn& buckets = {});
// Sorted contents one after the other (rows of consecutive ranges of a buffer), read as one: sorted
// where every part is, by one order function, each one's partitions at or above the last one's
// (the pieces of a shared partition become one); else their union in no order.
ContentPtr concat_contents(const std::vector<ContentPtr>& parts);
// Rows of sorted c below key x, where x is the first key of a partition of c's order function (or
// above every key): c's pieces lie wholly on one side of it.
uint64_t rows_below_key(const KeyOrder& order, uint64_t x);
// Adds b's rows to `into` when both are light rows only, of one universe under the same
// constraints (false otherwise, `into` unchanged). Rows of such a content are interchangeable,
// so any range of the union holds what the same range of the two side by side holds. `into` is
// updated in place when nothing else holds it, else replaced by a new content.
bool absorb_uniform(ContentPtr& into, const KeyContent& b);
// Windows of up to window_rows of c's keys each (at most `windows`), every window in the order its
// rows hold them, for estimates that depend on the values and their order (the compressed size of
// a column: kernels/cpu/codec.hpp). Rows from a generated relation (source) are regenerated:
// windows of consecutive rows spread over the rows it came from, keeping those in the component's
// partitions (a partition keeps its rows' generation order). Other rows are drawn from the
// distribution (heavy keys by weight, light rows from the universe, within the partitions) in
// random order. Deterministic for a content.
std::vector<std::vector<uint64_t>> content_sample(const KeyContent& c, size_t windows, size_t window_rows);
// What content_sample's windows look like, up to which hash partition the rows fell into: equal
// for contents whose samples are alike (the same generated relation or key set, the same partition
// functions, the same radix partitions, heavy keys and order), so a sampled estimate of one stands
// for the others. exact: also which hash partition and which rows (equal for the same content).
// 0 for a content with no such shape (sorted rows).
uint64_t sample_shape(const KeyContent& c, bool exact = false);
// Expected number of (r, s) row pairs with equal keys.
double expected_matches(const KeyContent& r, const KeyContent& s);

// How lookups of c's rows spread over their keys (the cost models' cache terms, op_model.hpp).
KeyAccess key_access(const KeyContent& c);

// Largest-remainder rounding of non-negative weights to integers summing to `total`, ties
// going in index order from `first` (then round). The one rounding rule used everywhere, so
// counts stay consistent.
std::vector<uint64_t> apportion(const std::vector<double>& weights, uint64_t total, size_t first = 0);

// D'Hondt's apportionment of x seats (x <= the sum of w) to integer weights w: floor(x w / sum)
// each, then the next seat to the largest w / (seats + 1), ties to the lower index. At x = sum
// it gives w; each count grows with x, so counts of [x, y) are differences of two.
std::vector<uint64_t> dhondt(const std::vector<uint64_t>& w, uint64_t x);

// Zipf(z) probability of rank k (1-based) over n ranks.
double zipf_pmf(double z, uint64_t n, uint64_t k);

}  // namespace joinlab::sim
