#include "core/exec/rank.hpp"

#include <chrono>
#include <thread>

#include "core/common/error.hpp"
#include "core/workload/keygen.hpp"
#include "kernels/cpu/codec.hpp"

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

namespace {

// Completes when every one of its events has (the default vectored send / receive).
class AllOf final : public EventImpl {
 public:
  explicit AllOf(std::vector<Event> parts) : parts_(std::move(parts)) {}
  void wait() override {
    for (auto& e : parts_) e.wait();
  }
  bool done() override {
    for (auto& e : parts_)
      if (!e.done()) return false;
    return true;
  }

 private:
  std::vector<Event> parts_;
};

template <class One>
Event each_range(const std::vector<BufferRange>& ranges, One one) {
  std::vector<Event> parts;
  parts.reserve(ranges.size());
  for (const BufferRange& r : ranges) parts.push_back(one(r));
  if (parts.size() == 1) return parts.front();
  return Event(std::make_shared<AllOf>(std::move(parts)));
}

}  // namespace

Event Rank::send_v(Stream s, int peer, const std::vector<BufferRange>& ranges, int tag) {
  return each_range(ranges, [&](const BufferRange& r) { return send(s, peer, r.buf, r.off, r.bytes, tag); });
}

Event Rank::copy_v(Stream s, const std::vector<CopyRange>& copies) {
  Event last;
  for (const CopyRange& c : copies) last = copy(s, c.dst, c.dst_off, c.src, c.src_off, c.bytes);
  return copies.empty() ? record(s) : last;  // one stream: the last completes after the others
}

Event Rank::recv_v(Stream s, int peer, const std::vector<BufferRange>& ranges, int tag) {
  return each_range(ranges, [&](const BufferRange& r) { return recv(s, peer, r.buf, r.off, r.bytes, tag); });
}

std::vector<JoinPiece> Rank::merge_path_parts(const Tuples& r, const Tuples& s, uint64_t min_parts, uint64_t max_rows) {
  return joinlab::merge_path_parts(r, s, min_parts, max_rows);
}

std::vector<std::vector<uint64_t>> Rank::codec_sample(Stream s, const Buffer& buf, uint64_t first, uint64_t rows,
                                                     uint8_t value_bytes) {
  const auto windows = cpu::codec_sample_windows(rows);
  uint64_t total = 0;
  for (const auto& w : windows) total += w.second;
  std::vector<std::vector<uint64_t>> out;
  if (!total) return out;
  const Buffer host = alloc(MemSpace::Pinned, total * value_bytes, "codec.sample");  // a DMA target on GPUs
  uint64_t at = 0;
  for (const auto& [w_first, len] : windows) {
    copy(s, host, at * value_bytes, buf, (first + w_first) * value_bytes, len * value_bytes);
    at += len;
  }
  sync(s);
  at = 0;
  for (const auto& w : windows) {
    out.emplace_back(w.second);
    for (uint64_t i = 0; i < w.second; ++i, ++at)
      out.back()[i] = value_bytes == 4 ? data_of<uint32_t>(host)[at] : data_of<uint64_t>(host)[at];
  }
  return out;
}

std::vector<uint64_t> Rank::alltoall(const std::vector<uint64_t>& mine, size_t per_rank) {
  const size_t n = size_t(size());
  if (mine.size() != n * per_rank)
    throw RuntimeError("alltoall: " + std::to_string(mine.size()) + " words for " + std::to_string(n) + " ranks of " +
                       std::to_string(per_rank));
  const std::vector<uint64_t> all = allgather(mine);
  std::vector<uint64_t> out;
  out.reserve(n * per_rank);
  for (size_t r = 0; r < n; ++r) {
    const auto from = all.begin() + long(r * mine.size() + size_t(id()) * per_rank);
    out.insert(out.end(), from, from + long(per_rank));
  }
  return out;
}

void Rank::poll_pause() { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

}  // namespace joinlab
