// The Rank interface: everything a strategy may do. A strategy is the SPMD program one rank
// (one GPU, or one CPU worker) runs; it calls only this interface, so the same strategy runs
// on CpuRank (core/runtime), CudaRank (kernels/cuda) and SimRank (sim/).
//
// All data work is asynchronous: it is queued on a Stream (an in-order queue, like a CUDA
// stream) and returns an Event. Pipelining (chunks in flight, copies overlapped with compute)
// is written in the strategy with several streams and events, and is therefore the same in
// reality and in simulation. Host collectives and barrier are blocking.
//
// Strategies decide only from sizes (histogram counts, match counts, buffer capacities), never
// from tuple values, so that SimRank can run them without data.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/exec/merge_path.hpp"
#include "core/exec/ops.hpp"
#include "core/exec/trace.hpp"

namespace joinlab {

struct Stream {
  int id = 0;
};

class EventImpl {
 public:
  virtual ~EventImpl() = default;
  virtual void wait() = 0;
  virtual bool done() = 0;
};
class Event {
 public:
  Event() = default;
  explicit Event(std::shared_ptr<EventImpl> impl) : impl_(std::move(impl)) {}
  void wait() const { if (impl_) impl_->wait(); }
  bool done() const { return !impl_ || impl_->done(); }
  const std::shared_ptr<EventImpl>& impl() const { return impl_; }
 private:
  std::shared_ptr<EventImpl> impl_;  // empty = already complete
};

// An operator in flight: wait on `done`, then read `result`.
struct Launched {
  Event done;
  OpResultPtr result;
  const OpResult& get() const { done.wait(); return *result; }
  // Its values (a Partition's offsets) once done, shared with the result rather than copied.
  SharedOffsets values() const {
    done.wait();
    return SharedOffsets(std::shared_ptr<const std::vector<uint64_t>>(result, &result->values));
  }
};

// Nodes x ranks per node. Rank r sits on node r / per_node as local index r % per_node.
struct ClusterShape {
  int nodes = 1;
  int per_node = 1;
  int size() const { return nodes * per_node; }
  int node_of(int rank) const { return rank / per_node; }
  int local_of(int rank) const { return rank % per_node; }
};

// Measured bandwidths (bytes/s) of the resources a strategy's analytic bound is made of.
struct Bandwidths {
  double mem = 0;       // device memory copy, counting bytes read + written
  double host_mem = 0;  // host memory copy, read + written
  double h2d = 0;       // host (pinned) to device
  double p2p = 0;       // between two devices of a node
  double net = 0;       // per-rank network injection
  std::string source;   // "measured <date>", "profile h100", ...
};

// A byte range of a buffer: one piece of a vectored message (Rank::send_v / recv_v).
struct BufferRange {
  Buffer buf;
  uint64_t off = 0;
  uint64_t bytes = 0;
};

// One copy of a vectored copy (Rank::copy_v): `bytes` from src at src_off to dst at dst_off.
struct CopyRange {
  Buffer dst;
  uint64_t dst_off = 0;
  Buffer src;
  uint64_t src_off = 0;
  uint64_t bytes = 0;
};

// What a rank reports at the end: its share of the join result.
struct RankResult {
  uint64_t count = 0;
  uint64_t checksum = 0;
  bool has_checksum = true;  // false in simulation: no data, no checksum
  uint64_t sent_bytes = 0;   // sent to other ranks in messages (Rank::count_sent)
};

class Rank {
 public:
  Rank(int id, ClusterShape shape) : id_(id), shape_(shape) {}
  virtual ~Rank() = default;
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;

  int id() const { return id_; }
  int size() const { return shape_.size(); }
  const ClusterShape& shape() const { return shape_; }
  int node() const { return shape_.node_of(id_); }
  int local() const { return shape_.local_of(id_); }
  // The join this rank runs among BackendConfig::jobs concurrent ones (0 ..): ranks of different
  // joins with the same id share that rank's GPU, host, links and cores, never its messages.
  int job() const { return job_; }
  void set_job(int job) { job_ = job; }
  virtual std::string backend() const = 0;  // "cpu", "cuda", "sim"
  virtual bool has_data() const { return true; }  // false in simulation
  virtual int streams() const = 0;          // streams 0 .. streams()-1 exist
  // A stream whose kernels run on share `part` of `parts` equal, disjoint shares of the device's
  // SMs (numbered after the others; streams() counts it from then on), where the backend can
  // confine kernels so (cuda: green contexts); else none, and streams share the device. Made on
  // the first call for `parts`, which must come before work is queued on the rank's streams.
  virtual std::optional<Stream> sm_share_stream(int part, int parts) { return std::nullopt; }

  // --- memory ---
  // Throws RuntimeError naming the tag, the size asked and the space left when it does not fit.
  virtual Buffer alloc(MemSpace space, uint64_t bytes, const std::string& tag) = 0;
  virtual uint64_t capacity(MemSpace space) const = 0;  // bytes this rank may still allocate
  Tuples alloc_tuples(MemSpace space, uint64_t rows, TupleFormat fmt, const std::string& tag);
  JoinOutput alloc_output(MemSpace space, uint64_t rows, TupleFormat r_fmt, TupleFormat s_fmt,
                          const std::string& tag);
  HashTable alloc_table(MemSpace space, TableKind kind, TupleFormat fmt, uint64_t rows,
                        double load_factor, uint64_t hash_seed, const std::string& tag);

  // --- operators and copies on streams ---
  virtual Launched launch(Stream s, Op op) = 0;
  virtual Event copy(Stream s, const Buffer& dst, uint64_t dst_off, const Buffer& src,
                     uint64_t src_off, uint64_t bytes) = 0;
  // Several copies issued as one, in stream order as a whole (a partition's runs scattered over
  // chunk regions). The default is one copy() each; the CUDA backend issues one batch
  // (cudaMemcpyBatchAsync): thousands of 100-KB copies issued one by one, each between its own
  // events, ran at a third of the link's rate. Its event completes when all of them did.
  virtual Event copy_v(Stream s, const std::vector<CopyRange>& copies);
  virtual Event record(Stream s) = 0;
  virtual void stream_wait(Stream s, const Event& e) = 0;  // later work on s waits for e
  virtual void sync(Stream s) = 0;
  void sync_all() { for (int i = 0; i < streams(); ++i) sync(Stream{i}); }

  // --- two-sided messages, matched in order per (peer, tag) ---
  virtual Event send(Stream s, int peer, const Buffer& src, uint64_t off, uint64_t bytes, int tag) = 0;
  virtual Event recv(Stream s, int peer, const Buffer& dst, uint64_t off, uint64_t bytes, int tag) = 0;
  // Vectored: several byte ranges (a partition's key and value columns, R's and S's chunks of
  // one round) to / from one peer as one message. A send_v matches a recv_v of the same tag
  // whose ranges have the same sizes in the same order. The default is a group of send / recv
  // calls on s, one per range (what NCCL, UCX and the in-process transports do with it); its
  // event completes when all of them did. The simulator moves one message.
  virtual Event send_v(Stream s, int peer, const std::vector<BufferRange>& ranges, int tag);
  virtual Event recv_v(Stream s, int peer, const std::vector<BufferRange>& ranges, int tag);

  // --- the cascaded codec's selector (kernels/cpu/codec.hpp) ---
  // Values [first, first + rows) of a column of value_bytes, sampled on the host: the windows
  // codec_sample_windows names. The default copies them into pinned memory on s and waits; the
  // simulator samples the column's key content.
  virtual std::vector<std::vector<uint64_t>> codec_sample(Stream s, const Buffer& buf, uint64_t first, uint64_t rows,
                                                          uint8_t value_bytes);

  // --- merge-path cuts of key-sorted relations (core/exec/merge_path.hpp) ---
  // The default reads the keys on the host (r and s in host-readable memory); the simulator cuts
  // at the key boundaries of their sorted contents.
  virtual std::vector<JoinPiece> merge_path_parts(const Tuples& r, const Tuples& s, uint64_t min_parts,
                                                  uint64_t max_rows);

  // --- one-sided puts into remote slots with completion flags ---
  // Collective: every rank exposes a buffer and `flags` completion words; returns the window id.
  virtual int expose(const Buffer& buf, uint32_t flags) = 0;
  // Write bytes into peer's window at remote_off, then (ordered after the data) set its flag
  // `flag` to `value`.
  virtual Event put(Stream s, int peer, int window, uint64_t remote_off, const Buffer& src,
                    uint64_t off, uint64_t bytes, uint32_t flag, uint64_t value) = 0;
  virtual uint64_t read_flag(int window, uint32_t flag) = 0;  // this rank's own window

  // --- streaming operators (gpj: ops.hpp, StreamingOp) ---
  // Launches PackChunksOp / StreamConsumeOp. The default throws RuntimeError naming the backend.
  virtual Launched launch_streaming(Stream s, StreamingOp op);
  // Polling loops (read_flag, StreamProgress) call this when nothing changed: it pauses briefly
  // and throws RuntimeError once the job failed (a peer died or aborted), so they end promptly.
  // Real backends sleep a few microseconds; the simulator advances its clock.
  virtual void poll_pause();

  // --- host collectives (blocking) ---
  virtual std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) = 0;  // rank order
  // Every rank sends per_rank words to each rank: `mine` holds size() * per_rank words, rank r's
  // at [r * per_rank, (r + 1) * per_rank). Returns the words each rank sent to this one, in rank
  // order. The default is the allgather of `mine`, keeping this rank's words; the simulator moves
  // the same messages without building every rank's copy of the whole table.
  virtual std::vector<uint64_t> alltoall(const std::vector<uint64_t>& mine, size_t per_rank);
  virtual void barrier() = 0;

  // --- time, phases, results ---
  virtual double now() const = 0;  // seconds on the backend's clock (simulated clock in sim)
  virtual Bandwidths bandwidths() const = 0;
  // Ends the current phase (if any) and starts `name`. Strategies sync before switching where
  // phase boundaries must be exact.
  void phase(const std::string& name);
  void end_phases();
  // A strategy's phase began (begin_phase, after the synchronization and phase()): the simulator
  // charges the host time a phase spends outside its operators; the hardware backends spend it.
  virtual void strategy_phase_began() {}
  // Keeps the bytes counted so far (count_sent) and adds r's (a rank rebuilt from its record).
  void report(const RankResult& r) {
    const uint64_t sent = result_.sent_bytes;
    result_ = r;
    result_.sent_bytes += sent;
  }
  // Bytes a strategy sent to other ranks in messages (the results' sent_bytes; strategies that
  // count them: shuffle, whose compressed exchange sends the compressed bytes).
  void count_sent(uint64_t bytes) { result_.sent_bytes += bytes; }

  const RankResult& result() const { return result_; }
  const std::vector<PhaseRecord>& phases() const { return phases_; }
  TraceLog& trace() { return trace_; }

 protected:
  TraceLog trace_;
  // For backends that rebuild a finished rank's record in another process (process ranks whose
  // results are gathered to rank 0).
  void restore_phases(std::vector<PhaseRecord> phases) { phases_ = std::move(phases); }

 private:
  int id_;
  int job_ = 0;
  ClusterShape shape_;
  std::vector<PhaseRecord> phases_;
  RankResult result_;
};

}  // namespace joinlab
