#include "core/exec/rank.hpp"

#include <chrono>
#include <thread>

#include "core/common/error.hpp"
#include "core/workload/keygen.hpp"

namespace joinlab {

Tuples Rank::alloc_tuples(MemSpace space, uint64_t rows, TupleFormat fmt, const std::string& tag) {
  Tuples t;
  t.fmt = fmt;
  t.rows = rows;
  t.capacity = rows;
  t.keys = alloc(space, rows * fmt.key_bytes, tag + ".keys");
  t.vals = alloc(space, rows * fmt.val_bytes, tag + ".vals");
  return t;
}

JoinOutput Rank::alloc_output(MemSpace space, uint64_t rows, TupleFormat r_fmt, TupleFormat s_fmt,
                              const std::string& tag) {
  JoinOutput o;
  o.capacity = rows;
  o.r_fmt = r_fmt;
  o.s_fmt = s_fmt;
  o.keys = alloc(space, rows * r_fmt.key_bytes, tag + ".keys");
  o.rvals = alloc(space, rows * r_fmt.val_bytes, tag + ".rvals");
  o.svals = alloc(space, rows * s_fmt.val_bytes, tag + ".svals");
  return o;
}

HashTable Rank::alloc_table(MemSpace space, TableKind kind, TupleFormat fmt, uint64_t rows,
                            double load_factor, uint64_t hash_seed, const std::string& tag) {
  HashTable t;
  t.kind = kind;
  t.fmt = fmt;
  t.hash_seed = hash_seed;
  t.slots = hash_table_slots(rows, load_factor);
  if (kind == TableKind::LinearProbing) {
    t.keys = alloc(space, t.slots * fmt.key_bytes, tag + ".keys");
    t.vals = alloc(space, t.slots * fmt.val_bytes, tag + ".vals");
  } else if (kind == TableKind::HashRowId) {
    t.heads = alloc(space, t.slots * sizeof(uint64_t), tag + ".slots");  // keys/vals: set by Build
  } else {
    uint64_t cap = rows ? rows : 1;
    t.heads = alloc(space, t.slots * sizeof(uint32_t), tag + ".heads");
    t.next = alloc(space, cap * sizeof(uint32_t), tag + ".next");
    t.keys = alloc(space, cap * fmt.key_bytes, tag + ".keys");
    t.vals = alloc(space, cap * fmt.val_bytes, tag + ".vals");
  }
  return t;
}

void Rank::phase(const std::string& name) {
  double t = now();
  if (!phases_.empty() && phases_.back().end < phases_.back().begin) phases_.back().end = t;
  phases_.push_back({name, t, -1});
}

void Rank::end_phases() {
  if (!phases_.empty() && phases_.back().end < phases_.back().begin) phases_.back().end = now();
}

Launched Rank::launch_streaming(Stream, StreamingOp op) {
  throw RuntimeError(std::string("backend ") + backend() + " does not implement the streaming operator " +
                     to_string(params_of(op).kind) + " (needed by gpj)");
}

void Rank::poll_pause() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

}  // namespace joinlab
