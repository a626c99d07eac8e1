// Columnar (key, value) tuple sets, the unit every operator consumes and produces.
// `value` is the relation's payload when it has one payload column, otherwise the global row
// id (late materialization: payload columns are gathered at the end).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/common/error.hpp"
#include "core/exec/buffer.hpp"

namespace joinlab {

struct TupleFormat {
  uint8_t key_bytes = 4;  // 4 or 8
  uint8_t val_bytes = 4;  // 4 or 8
  uint32_t tuple_bytes() const { return key_bytes + val_bytes; }
  bool operator==(const TupleFormat& o) const { return key_bytes == o.key_bytes && val_bytes == o.val_bytes; }
};

struct Tuples {
  Buffer keys, vals;   // element i of this view is keys[offset + i], vals[offset + i]
  uint64_t offset = 0; // in elements
  uint64_t rows = 0;
  uint64_t capacity = 0;  // elements available from offset (>= rows)
  TupleFormat fmt;

  Tuples slice(uint64_t first, uint64_t n) const {
    Tuples t = *this;
    t.offset = offset + first;
    t.rows = n;
    t.capacity = n;
    return t;
  }
  uint64_t bytes() const { return rows * fmt.tuple_bytes(); }
  template <class K> K* key_ptr() const { return data_of<K>(keys, offset); }
  template <class V> V* val_ptr() const { return data_of<V>(vals, offset); }
};

// Partition offsets (fanout + 1 entries, host side), shared rather than copied: phj's join
// operator, its retries and the partition operator's result all reference one vector (2^16
// partitions are 512 KB; copying them twice per relation kept the H100 idle for 0.15 ms).
class SharedOffsets {
 public:
  using Vector = std::vector<uint64_t>;
  SharedOffsets() : v_(std::make_shared<const Vector>()) {}
  SharedOffsets(Vector v) : v_(std::make_shared<const Vector>(std::move(v))) {}
  SharedOffsets(std::initializer_list<uint64_t> l) : SharedOffsets(Vector(l)) {}
  explicit SharedOffsets(std::shared_ptr<const Vector> v) : v_(v ? std::move(v) : std::make_shared<const Vector>()) {}
  operator const Vector&() const { return *v_; }
  const Vector& vec() const { return *v_; }
  size_t size() const { return v_->size(); }
  bool empty() const { return v_->empty(); }
  uint64_t front() const { return v_->front(); }
  uint64_t back() const { return v_->back(); }
  uint64_t operator[](size_t i) const { return (*v_)[i]; }
  Vector::const_iterator begin() const { return v_->begin(); }
  Vector::const_iterator end() const { return v_->end(); }

 private:
  std::shared_ptr<const Vector> v_;
};

// Offsets that must not descend (partition or segment starts): a RuntimeError names the first
// index where they do, as "<what> offsets are not ascending at index i".
inline void check_ascending(const std::vector<uint64_t>& off, const std::string& what) {
  for (size_t i = 1; i < off.size(); ++i)
    if (off[i] < off[i - 1]) throw RuntimeError(what + " offsets are not ascending at index " + std::to_string(i));
}

// A partitioned tuple set: partition p is rows [offsets[p], offsets[p+1]) of `all`.
struct Partitioned {
  Tuples all;
  SharedOffsets offsets;  // fanout + 1 entries, host side
  // Optional: the same offsets as 64-bit words in the rank's memory (PartitionOp::offsets_out),
  // so that a backend reads them where its kernels run, without a host round trip.
  Buffer offsets_copy{};
  uint32_t fanout() const { return offsets.empty() ? 0 : uint32_t(offsets.size() - 1); }
  uint64_t count(uint32_t p) const { return offsets[p + 1] - offsets[p]; }
  Tuples part(uint32_t p) const { return all.slice(offsets[p], count(p)); }
};

// Join output: materialized (key, R value, S value) rows, written by probe/join operators.
enum class OutputMode : uint8_t {
  CountThenWrite,  // count matches, size exactly, then write
  Direct,          // write into a preallocated buffer; pages acquired atomically (rui2017)
  CountOnly,       // no materialization (used by count passes and aggregation benchmarks)
};
struct JoinOutput {
  Buffer keys, rvals, svals;
  uint64_t capacity = 0;  // rows the buffers hold
  TupleFormat r_fmt, s_fmt;
};

}  // namespace joinlab
