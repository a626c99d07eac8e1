#include "core/runtime/cpu_streaming.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <string>

#include "core/common/error.hpp"
#include "core/exec/chunk.hpp"
#include "core/runtime/cpu_ops.hpp"
#include "core/runtime/polling.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/streaming_store.hpp"

namespace joinlab {

namespace {

void need_bytes(const char* op, const char* what, const Buffer& b, uint64_t bytes) {
  if (!bytes) return;
  if (!b || !b->ptr)
    throw RuntimeError(std::string(op) + ": " + what + " has no memory (" + std::to_string(bytes) + " bytes needed)");
  if (b->bytes < bytes)
    throw RuntimeError(std::string(op) + ": " + what + " needs " + std::to_string(bytes) + " bytes, but buffer '" +
                       b->tag + "' holds " + std::to_string(b->bytes));
}

// --- pack ------------------------------------------------------------------------------------------

// Rows a chunk is packed by at a time: their keys and values stay in L1/L2 between the checksum
// pass and the copy, so they are read from memory once.
constexpr uint64_t kPackBlockRows = 4096;

// partition_by: the partition and the pack in one pass (kernels/cpu/partition.cpp).
template <class K, class V>
void partition_and_pack(const PackChunksOp& op, int threads, OpResult& result) {
  need_bytes("pack_chunks", "input keys", op.in.keys, (op.in.offset + op.in.rows) * sizeof(K));
  need_bytes("pack_chunks", "input values", op.in.vals, (op.in.offset + op.in.rows) * sizeof(V));
  cpu::ChunkTarget target;
  target.out = static_cast<char*>(op.out ? op.out->ptr : nullptr);
  target.out_bytes = op.out ? op.out->bytes : 0;
  target.slot_rows = op.slot_rows;
  target.first_seq = &op.first_seq;
  target.partition_base = op.partition_base;
  target.relation = op.relation;
  target.epoch = op.epoch;
  const cpu::CountedSlices slices{op.in_slices, op.slice_rows};
  const bool sliced = !op.in_slices.empty() || !op.slice_rows.empty();
  try {
    result.values = cpu::partition_into_chunks(op.in.key_ptr<K>(), op.in.val_ptr<V>(), op.in.rows, *op.partition_by,
                                               op.rows, sliced ? &slices : nullptr, target, threads);
  } catch (const std::invalid_argument& e) {
    throw RuntimeError(std::string("pack_chunks (partitioning ") + (op.relation == 0 ? "R" : "S") + "): " + e.what());
  }
  uint64_t images = 0;
  for (uint64_t rows : op.rows) images += (rows + op.slot_rows - 1) / op.slot_rows;
  result.count = images;
}

template <class K, class V>
void pack(const PackChunksOp& op, int threads, OpResult& result) {
  check_pack_plan(op);
  if (op.partition_by) return partition_and_pack<K, V>(op, threads, result);
  const char* name = "pack_chunks";
  const size_t fanout = op.rows.size();
  // Image index of every partition's first chunk.
  std::vector<uint64_t> first_image(fanout + 1, 0);
  for (size_t p = 0; p < fanout; ++p) first_image[p + 1] = first_image[p] + (op.rows[p] + op.slot_rows - 1) / op.slot_rows;
  need_bytes(name, "input keys", op.in.keys, (op.in.offset + op.in.rows) * sizeof(K));
  need_bytes(name, "input values", op.in.vals, (op.in.offset + op.in.rows) * sizeof(V));
  const uint64_t images = first_image[fanout];
  const uint64_t slot = chunk_slot_bytes(sizeof(K), sizeof(V), op.slot_rows);
  need_bytes(name, "chunk images", op.out, images * slot);
  const K* keys = op.in.key_ptr<K>();
  const V* vals = op.in.val_ptr<V>();
  char* out = static_cast<char*>(op.out ? op.out->ptr : nullptr);
  const uint64_t vals_at = chunk_vals_offset(sizeof(K), op.slot_rows);
  const int team = int(std::max<uint64_t>(1, std::min<uint64_t>(uint64_t(std::max(threads, 1)), images / 4)));
#pragma omp parallel for num_threads(team) schedule(dynamic, 4)
  for (int64_t i = 0; i < int64_t(images); ++i) {
    const size_t p = size_t(std::upper_bound(first_image.begin(), first_image.end(), uint64_t(i)) - first_image.begin() - 1);
    const uint64_t c = uint64_t(i) - first_image[p];
    const uint64_t begin = op.begin[p] + c * op.slot_rows;
    const uint64_t rows = std::min(op.slot_rows, op.begin[p] + op.rows[p] - begin);
    char* image = out + uint64_t(i) * slot;
    ChunkHeader h{};
    h.seq = op.first_seq[p] + c;
    h.partition = op.partition_base + uint32_t(p);
    h.rows = uint32_t(rows);
    h.relation = op.relation;
    h.epoch = op.epoch;
    // Block by block, the checksum terms, then the copy into the image with streaming stores:
    // only the puts read the image (no read-for-ownership of its lines, a third less traffic).
    uint64_t sum = chunk_header_term(h.seq, h.partition, h.rows, h.relation, h.epoch);
    for (uint64_t b = 0; b < rows; b += kPackBlockRows) {
      const uint64_t n = std::min(kPackBlockRows, rows - b);
      sum += cpu::chunk_row_terms(keys + begin + b, vals + begin + b, b, n);
      cpu::stream_copy(image + kChunkHeaderBytes + b * sizeof(K), keys + begin + b, n * sizeof(K));
      cpu::stream_copy(image + vals_at + b * sizeof(V), vals + begin + b, n * sizeof(V));
    }
    h.checksum = sum;
    alignas(64) unsigned char line[kChunkHeaderBytes] = {};  // the padding is zero, not stale bytes
    std::memcpy(line, &h, sizeof h);
    std::memcpy(image, line, sizeof line);
    _mm_sfence();  // the streamed lines are written before the job says it is done
  }
  result.count = images;
}

// --- consume ---------------------------------------------------------------------------------------

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

template <class K, class VR, class VS>
class Consumer {
 public:
  Consumer(const StreamConsumeOp& op, int threads) : op_(op), threads_(std::max(threads, 1)) { check(); }

  void run(OpResult& result) {
    using Clock = std::chrono::steady_clock;
    const size_t rings = size_t(op_.sources) * op_.parts;
    std::vector<uint64_t> next(rings, 0);
    std::vector<Clock::time_point> mismatch_since(rings);
    std::vector<bool> mismatching(rings, false);
    std::vector<uint64_t> r_total(op_.parts, 0), r_done(op_.parts, 0);
    uint64_t remaining = 0;
    for (size_t ring = 0; ring < rings; ++ring) {
      r_total[ring % op_.parts] += op_.r_chunks[ring];
      remaining += op_.r_chunks[ring] + op_.s_chunks[ring];
    }
    for (auto& t : tables_) cpu::clear_table(t, threads_);

    Backoff backoff;
    auto last_use = Clock::now();
    while (remaining > 0) {
      bool used = false;
      for (size_t ring = 0; ring < rings; ++ring) {
        const uint64_t k = next[ring];
        if (k == op_.r_chunks[ring] + op_.s_chunks[ring]) continue;
        const size_t q = ring % op_.parts;
        const bool is_r = k < op_.r_chunks[ring];
        if (!is_r && r_done[q] < r_total[q]) continue;  // probes wait for the whole table
        const char* slot = slot_of(ring, k);
        if (__atomic_load_n(reinterpret_cast<const uint64_t*>(slot), __ATOMIC_ACQUIRE) != k + 1) continue;
        ChunkHeader h;
        std::memcpy(&h, slot, sizeof h);
        if (h.epoch != op_.epoch) continue;  // an older exchange's chunk, or a torn header
        if (!verified(h, slot, is_r)) {
          if (!mismatching[ring]) {
            mismatching[ring] = true;
            mismatch_since[ring] = Clock::now();
          } else if (seconds_since(mismatch_since[ring]) > op_.chunk_timeout_s) {
            throw RuntimeError(describe(ring, k, is_r) + " failed its checksum for " + seconds_text(op_.chunk_timeout_s) +
                               " (header: " + std::to_string(h.rows) + " rows, checksum " + std::to_string(h.checksum) +
                               "; its bytes give " + std::to_string(computed(h, slot, is_r)) +
                               "): it was corrupted in flight");
          }
          continue;
        }
        mismatching[ring] = false;
        if (h.partition != op_.partition_ids[q] || h.relation != (is_r ? 0u : 1u))
          throw RuntimeError(describe(ring, k, is_r) + " carries partition " + std::to_string(h.partition) + " of " +
                             (h.relation == 0 ? "R" : "S") + ": the sender and the receiver disagree on the plan");
        if (is_r) {
          build(q, h, slot);
          ++r_done[q];
        } else {
          probe(q, h, slot);
        }
        next[ring] = k + 1;
        op_.progress->release(ring, k + 1);
        --remaining;
        used = true;
      }
      if (used) {
        last_use = Clock::now();
        backoff.reset();
        continue;
      }
      if (op_.progress->cancelled())
        throw RuntimeError("gpj consumer: cancelled (the rank's strategy failed) with " + std::to_string(remaining) +
                           " chunks outstanding");
      if (seconds_since(last_use) > op_.idle_timeout_s) throw RuntimeError(stalled(next, r_done, r_total));
      backoff.pause();
    }
    flush();
    result.count = matches_;
    result.overflow = overflow_;
  }

 private:
  void check() {
    const char* name = "stream_consume";
    const size_t rings = size_t(op_.sources) * op_.parts;
    if (!op_.progress || op_.progress->rings() != rings)
      throw RuntimeError(std::string(name) + ": needs a StreamProgress of " + std::to_string(rings) + " rings");
    if (op_.r_chunks.size() != rings || op_.s_chunks.size() != rings)
      throw RuntimeError(std::string(name) + ": chunk counts for " + std::to_string(op_.r_chunks.size()) + " / " +
                         std::to_string(op_.s_chunks.size()) + " rings, expected " + std::to_string(rings));
    if (op_.partition_ids.size() != op_.parts || op_.tables.size() != op_.parts || op_.workers.size() != op_.parts)
      throw RuntimeError(std::string(name) + ": partition ids, tables and workers must have one entry per local partition");
    if (op_.slots == 0 || op_.slot_rows == 0) throw RuntimeError(std::string(name) + ": no ring slots");
    const uint64_t need = std::max(chunk_slot_bytes(sizeof(K), sizeof(VR), op_.slot_rows),
                                   chunk_slot_bytes(sizeof(K), sizeof(VS), op_.slot_rows));
    if (op_.slot_bytes < need)
      throw RuntimeError(std::string(name) + ": slots of " + std::to_string(op_.slot_bytes) + " bytes cannot hold " +
                         std::to_string(op_.slot_rows) + " rows (" + std::to_string(need) + " bytes)");
    need_bytes(name, "ring buffers", op_.rings, uint64_t(rings) * op_.slots * op_.slot_bytes);
    for (size_t q = 0; q < op_.parts; ++q) {
      const HashTable& t = op_.tables[q];
      if (t.kind != TableKind::Chained)
        throw RuntimeError(std::string(name) + ": partition " + std::to_string(q) + "'s table is not chained");
      cpu::ChainedTable<K, VR> c;
      c.buckets = t.slots;
      c.capacity = t.next ? t.next->bytes / sizeof(uint32_t) : 0;
      need_bytes(name, "table heads", t.heads, t.slots * sizeof(uint32_t));
      need_bytes(name, "table keys", t.keys, c.capacity * sizeof(K));
      need_bytes(name, "table values", t.vals, c.capacity * sizeof(VR));
      c.heads = data_of<uint32_t>(t.heads);
      c.next = data_of<uint32_t>(t.next);
      c.keys = data_of<K>(t.keys);
      c.vals = data_of<VR>(t.vals);
      c.seed = t.hash_seed;
      tables_.push_back(c);
      present_.push_back(0);
    }
    if (op_.star) {
      check_star_probe(*op_.star);
      if (sizeof(K) != 8 || sizeof(VS) != 8 || op_.mode != OutputMode::CountOnly)
        throw RuntimeError(std::string(name) + ": chained probes take 8-byte lineorder keys and values and output nothing");
      star_dims_ = dim_table_refs(*op_.star);
    }
    if (op_.mode == OutputMode::Direct) {
      if (op_.staging_rows == 0) throw RuntimeError(std::string(name) + ": Direct output needs staging rows");
      need_bytes(name, "staging keys", op_.staging.keys, 2 * op_.staging_rows * sizeof(K));
      need_bytes(name, "staging R values", op_.staging.rvals, 2 * op_.staging_rows * sizeof(VR));
      need_bytes(name, "staging S values", op_.staging.svals, 2 * op_.staging_rows * sizeof(VS));
      need_bytes(name, "output keys", op_.out.keys, op_.out.capacity * sizeof(K));
      need_bytes(name, "output R values", op_.out.rvals, op_.out.capacity * sizeof(VR));
      need_bytes(name, "output S values", op_.out.svals, op_.out.capacity * sizeof(VS));
    } else if (op_.mode != OutputMode::CountOnly) {
      throw RuntimeError(std::string(name) + ": output mode must be Direct or CountOnly");
    }
  }

  const char* slot_of(size_t ring, uint64_t k) const {
    return static_cast<const char*>(op_.rings->ptr) + (ring * op_.slots + k % op_.slots) * op_.slot_bytes;
  }
  const K* keys_of(const char* slot) const { return reinterpret_cast<const K*>(slot + kChunkHeaderBytes); }
  template <class V>
  const V* vals_of(const char* slot) const {
    return reinterpret_cast<const V*>(slot + chunk_vals_offset(sizeof(K), op_.slot_rows));
  }

  uint64_t computed(const ChunkHeader& h, const char* slot, bool is_r) const {
    if (h.rows > op_.slot_rows) return ~h.checksum;  // a torn header: cannot be right
    return is_r ? chunk_checksum(h, keys_of(slot), vals_of<VR>(slot)) : chunk_checksum(h, keys_of(slot), vals_of<VS>(slot));
  }
  bool verified(const ChunkHeader& h, const char* slot, bool is_r) const { return computed(h, slot, is_r) == h.checksum; }

  int team(size_t q, uint64_t rows) const {
    return int(std::max<uint64_t>(1, std::min<uint64_t>({uint64_t(threads_), op_.workers[q], rows / 2048 + 1})));
  }

  void build(size_t q, const ChunkHeader& h, const char* slot) {
    try {
      cpu::build(tables_[q], present_[q], keys_of(slot), vals_of<VR>(slot), h.rows, team(q, h.rows));
    } catch (const std::exception& e) {
      throw RuntimeError("gpj consumer: partition " + std::to_string(op_.partition_ids[q]) + ": " + e.what() +
                         " (its table was sized from the global histogram)");
    }
    present_[q] += h.rows;
  }

  // Probes into the current half of the staging double buffer; a full half goes to `out`.
  void probe(size_t q, const ChunkHeader& h, const char* slot) {
    if (op_.star) {  // an SSB query: the chained probes, no output (check(): 8-byte keys and values)
      matches_ += cpu::star_probe(op_.star->query, star_dims_.data(), reinterpret_cast<const uint64_t*>(keys_of(slot)),
                                  reinterpret_cast<const uint64_t*>(vals_of<VS>(slot)), h.rows,
                                  data_of<uint64_t>(op_.star->groups), team(q, h.rows));
      return;
    }
    cpu::JoinSink<K, VR, VS> sink;
    if (op_.mode == OutputMode::CountOnly) {
      sink.mode = OutputMode::CountOnly;
      matches_ += cpu::probe(tables_[q], keys_of(slot), vals_of<VS>(slot), h.rows, sink, team(q, h.rows)).count;
      return;
    }
    for (int attempt = 0;; ++attempt) {
      const uint64_t half_end = (half_ + 1) * op_.staging_rows;
      sink = staging_sink(cursor_, half_end);
      if (attempt == 2) sink = out_sink();  // bigger than a whole half: straight to the output
      const cpu::JoinCount c = cpu::probe(tables_[q], keys_of(slot), vals_of<VS>(slot), h.rows, sink, team(q, h.rows));
      if (attempt == 2) {
        written_ += c.count;
        matches_ += c.count;
        overflow_ = overflow_ || written_ > room();
        return;
      }
      if (cursor_ + c.count <= half_end) {
        cursor_ += c.count;
        matches_ += c.count;
        return;
      }
      flush();  // the rows that did fit are written again into the fresh half
    }
  }

  cpu::JoinSink<K, VR, VS> staging_sink(uint64_t first, uint64_t capacity) const {
    cpu::JoinSink<K, VR, VS> s;
    s.keys = data_of<K>(op_.staging.keys);
    s.rvals = data_of<VR>(op_.staging.rvals);
    s.svals = data_of<VS>(op_.staging.svals);
    s.first = first;
    s.capacity = capacity;
    s.mode = OutputMode::Direct;
    return s;
  }
  uint64_t room() const { return op_.out.capacity > op_.out_first ? op_.out.capacity - op_.out_first : 0; }
  cpu::JoinSink<K, VR, VS> out_sink() const {
    cpu::JoinSink<K, VR, VS> s;
    s.keys = data_of<K>(op_.out.keys);
    s.rvals = data_of<VR>(op_.out.rvals);
    s.svals = data_of<VS>(op_.out.svals);
    s.first = op_.out_first + written_;
    s.capacity = op_.out.capacity;
    s.mode = OutputMode::Direct;
    return s;
  }

  // Copies the filled part of the current half to the output and switches halves (on the GPU the
  // copy runs while the other half fills; here the consumer thread does it).
  void flush() {
    if (op_.mode != OutputMode::Direct) return;
    const uint64_t start = half_ * op_.staging_rows, rows = cursor_ - start;
    const uint64_t fit = written_ >= room() ? 0 : std::min(rows, room() - written_);
    if (fit) {
      const uint64_t at = op_.out_first + written_;
      std::memcpy(data_of<K>(op_.out.keys, at), data_of<K>(op_.staging.keys, start), fit * sizeof(K));
      std::memcpy(data_of<VR>(op_.out.rvals, at), data_of<VR>(op_.staging.rvals, start), fit * sizeof(VR));
      std::memcpy(data_of<VS>(op_.out.svals, at), data_of<VS>(op_.staging.svals, start), fit * sizeof(VS));
    }
    overflow_ = overflow_ || fit < rows;
    written_ += rows;
    half_ ^= 1;
    cursor_ = half_ * op_.staging_rows;
  }

  std::string describe(size_t ring, uint64_t k, bool is_r) const { return "gpj consumer: " + chunk_name(ring, k, is_r); }
  std::string chunk_name(size_t ring, uint64_t k, bool is_r) const {
    const size_t q = ring % op_.parts;
    const uint64_t number = is_r ? k : k - op_.r_chunks[ring];
    return "chunk " + std::to_string(number) + " of " + (is_r ? "R" : "S") + " partition " +
           std::to_string(op_.partition_ids[q]) + " from rank " + std::to_string(ring / op_.parts) + " (ring " +
           std::to_string(ring) + ", slot " + std::to_string(k % op_.slots) + ")";
  }

  std::string stalled(const std::vector<uint64_t>& next, const std::vector<uint64_t>& r_done,
                      const std::vector<uint64_t>& r_total) const {
    std::string waiting;
    int shown = 0;
    for (size_t ring = 0; ring < next.size() && shown < 4; ++ring) {
      const uint64_t k = next[ring];
      if (k == op_.r_chunks[ring] + op_.s_chunks[ring]) continue;
      const bool is_r = k < op_.r_chunks[ring];
      if (!is_r && r_done[ring % op_.parts] < r_total[ring % op_.parts]) continue;
      waiting += (shown++ ? "; " : "") + chunk_name(ring, k, is_r);
    }
    return "gpj consumer: nothing arrived for " + seconds_text(op_.idle_timeout_s) + " (waiting for " +
           (waiting.empty() ? std::string("R chunks") : waiting) + "): a sender stalled or died";
  }

  const StreamConsumeOp& op_;
  std::vector<ssb::DimTableRef> star_dims_;
  const int threads_;
  std::vector<cpu::ChainedTable<K, VR>> tables_;
  std::vector<uint64_t> present_;
  uint64_t half_ = 0, cursor_ = 0;  // staging: current half, next row
  uint64_t written_ = 0;            // rows handed to `out`
  uint64_t matches_ = 0;
  bool overflow_ = false;
};

}  // namespace

void execute_cpu_streaming_op(const StreamingOp& op, int threads, OpResult& result) {
  if (auto* pack_op = std::get_if<PackChunksOp>(&op)) {
    with_width(pack_op->in.fmt.key_bytes, "pack_chunks key", [&](auto k) {
      with_width(pack_op->in.fmt.val_bytes, "pack_chunks value", [&](auto v) {
        pack<decltype(k), decltype(v)>(*pack_op, threads, result);
      });
    });
    return;
  }
  const auto& c = std::get<StreamConsumeOp>(op);
  if (c.r_fmt.key_bytes != c.s_fmt.key_bytes)
    throw RuntimeError("stream_consume: R keys are " + std::to_string(c.r_fmt.key_bytes) + " bytes, S keys " +
                       std::to_string(c.s_fmt.key_bytes));
  with_width(c.r_fmt.key_bytes, "stream_consume key", [&](auto k) {
    with_width(c.r_fmt.val_bytes, "stream_consume R value", [&](auto vr) {
      with_width(c.s_fmt.val_bytes, "stream_consume S value", [&](auto vs) {
        Consumer<decltype(k), decltype(vr), decltype(vs)>(c, threads).run(result);
      });
    });
  });
}

}  // namespace joinlab
