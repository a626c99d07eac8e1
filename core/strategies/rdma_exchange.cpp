#include "core/strategies/rdma_exchange.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>

#include "core/common/error.hpp"
#include "core/exec/chunk.hpp"

namespace joinlab {

namespace {

// Streams of one rank in the exchange.
constexpr Stream kCompute{0};   // partition and pack (the sender CPUs)
constexpr Stream kPuts{1};      // data puts, in order (a flag's value counts every earlier put)
constexpr Stream kCredits{2};   // flag-only puts returning ring slots to the senders
constexpr Stream kConsumer{3};  // the persistent consumer
constexpr Stream kLanded{4};    // copies of chunks landed in host memory into the consumer's rings

// Per global partition, per sender: what the histogram allgather carries.
enum Count : size_t { kRRows, kSRows, kRChunks, kSChunks, kCounts };

uint32_t ceil_log2(uint64_t x) {
  uint32_t b = 0;
  while ((1ULL << b) < x) ++b;
  return b;
}

// Where the partitions of one receiver go, computed the same way by every rank from the global
// histogram and the receiver's placement.
struct ReceiverLayout {
  std::vector<uint64_t> streamed;      // global partitions, in ring order
  std::vector<int64_t> ring_index;     // per partition of the receiver: index in `streamed`, or -1
  // Materialized partitions: the rows of sender s in partition q start at row r_at[q][s] (s_at).
  std::vector<std::vector<uint64_t>> r_at, s_at;
  uint64_t r_rows = 0, s_rows = 0;
};

class Exchange {
 public:
  Exchange(Rank& rank, const Inputs& in, const OverPartitioning& parts, const ExchangeConfig& cfg)
      : rank_(rank), in_(in), parts_(parts), cfg_(cfg), n_(rank.size()), me_(rank.id()),
        rf_(in.r.tuples.fmt), sf_(in.s.tuples.fmt) {
    const int needed = cfg_.lands_apart() ? kLanded.id + 1 : kConsumer.id + 1;
    if (rank.streams() < needed)
      throw RuntimeError("the one-sided exchange needs " + std::to_string(needed) +
                         " streams per rank (partition/pack, puts, credits, consumer" +
                         (cfg_.lands_apart() ? ", copies of landed chunks" : "") + "); the " + rank.backend() +
                         " backend gives " + std::to_string(rank.streams()) + " (cluster.streams)");
    slot_rows_ = chunk_rows(cfg, rf_, sf_);
    slot_bytes_ = slot_bytes(cfg, rf_, sf_);
  }

  ExchangeResult run(const PlacementFn& place, uint64_t stream_out_rows) {
    // The exchange starts once every rank holds its input (its generation, queued on the
    // streams, is complete): a rank whose input took longer to make would otherwise hold the
    // others in the histogram's allgather, and the join's time (which leaves input generation
    // out) would count that wait (0.6 s of gpj's 1.9 s at 2^28 rows per GPU on 2x H200).
    rank_.sync_all();
    rank_.barrier();
    begin_phase(rank_, "histogram");
    histograms();
    placement(place);
    const ReceiverLayout& mine = layouts_[size_t(me_)];
    ExchangeResult res(OutputSink(rank_, cfg_.stream_out_space, rf_, sf_, "gpj.out"));
    res.streamed_partitions = mine.streamed.size();
    res.materialized_partitions = (parts_.first_of(me_ + 1) - parts_.first_of(me_)) - mine.streamed.size();
    begin_phase(rank_, "setup");  // receive buffers, tables, windows; send buffers
    setup_receiver(res);
    setup_sender();
    // "stream" when the join runs in the exchange (gpj), on every rank alike.
    const bool streams = std::find(streamed_.begin(), streamed_.end(), 1u) != streamed_.end();
    begin_phase(rank_, streams ? "stream" : "exchange");
    std::unique_ptr<CancelOnExit> cancel;
    Launched consumer;
    if (!mine.streamed.empty()) {
      consumer = launch_consumer(res, stream_out_rows);
      cancel = std::make_unique<CancelOnExit>(progress_);
    }
    send_batches(consumer);
    // Return the last credits and wait for everything sent here.
    moved();
    while (!consumer.done.done() || !materialized_complete()) {
      if (pump_credits()) moved();
      if (consumer.done.done() && consumer.result) consumer.get();  // rethrows its error
      waited([] { return std::string("the chunks and materialized rows sent to this rank"); });
    }
    if (consumer.result) finish_consumer(consumer.get(), res);
    for (size_t i = 0; i < partitioned_.size(); ++i) check_partitioned(i);
    if (cancel) cancel->disarm();
    rank_.sync(kPuts);
    rank_.sync(kCredits);
    if (cfg_.lands_apart()) rank_.sync(kLanded);
    rank_.barrier();  // nobody puts into this rank's windows any more
    return res;
  }

 private:
  struct CancelOnExit {
    explicit CancelOnExit(std::shared_ptr<StreamProgress> p) : progress(std::move(p)) {}
    ~CancelOnExit() {
      if (progress) progress->cancel();  // the strategy failed: stop the polling consumer
    }
    void disarm() { progress.reset(); }
    std::shared_ptr<StreamProgress> progress;
  };

  struct Batch {
    int relation = 0;  // 0 = R, 1 = S
    uint64_t first = 0, rows = 0;
    // Where each partition's rows start in the batch's partitioned copy (fanout + 1 offsets), from
    // the histogram pass: the sender plans a batch's chunks and puts before it is partitioned.
    std::vector<uint64_t> offsets;
    // The histogram pass counts the batch in slices (bounds: k + 1 rows from 0; counts: k * fanout),
    // so that partitioning it straight into chunk images needs no counting pass of its own.
    std::vector<uint64_t> slices, slice_counts;
  };

  const Tuples& input(int relation) const { return relation == 0 ? in_.r.tuples : in_.s.tuples; }

  // --- 1. histograms, placement, layouts -------------------------------------------------------------

  void histograms() {
    const uint64_t fanout = parts_.fanout();
    for (int rel = 0; rel < 2; ++rel) {
      const Tuples& t = input(rel);
      for (uint64_t first = 0; first < t.rows; first += cfg_.batch_rows)
        batches_.push_back({rel, first, std::min(cfg_.batch_rows, t.rows - first), {}, {}, {}});
    }
    // Slices of at least min_slice_rows rows (small batches are counted whole). One operator per
    // batch counts all its slices (HistogramOp::in_segments): per slice, it would be k operators
    // of one parallel region each (512 per rank at 16 slices in gpj's 2^28-row bar, ~20 ms).
    std::vector<Launched> hist(batches_.size());
    for (size_t i = 0; i < batches_.size(); ++i) {
      Batch& b = batches_[i];
      const uint64_t min_rows = std::max<uint64_t>(1, cfg_.min_slice_rows);
      const uint64_t k = std::max<uint64_t>(1, std::min<uint64_t>(cfg_.count_slices, b.rows / min_rows));
      for (uint64_t sl = 0; sl <= k; ++sl) b.slices.push_back(b.rows * sl / k);
      HistogramOp h{input(b.relation).slice(b.first, b.rows), parts_.fn()};
      if (k > 1) h.in_segments = b.slices;
      hist[i] = rank_.launch(kCompute, h);
    }
    // Rows and chunks per partition: a batch's rows of a partition go in chunks of their own.
    std::vector<uint64_t> mine(fanout * kCounts + 1, 0);
    for (size_t i = 0; i < batches_.size(); ++i) {
      hist[i].get();
      // Kept (not copied) for the batch's pack: hundreds of MB where many ranks share a process.
      batches_[i].slice_counts = std::move(hist[i].result->values);
      const std::vector<uint64_t>& c = batches_[i].slice_counts;  // slice-major: k * fanout
      const uint64_t k = batches_[i].slices.size() - 1;
      if (c.size() != k * fanout)
        throw RuntimeError("gpj exchange: the histogram of a batch in " + std::to_string(k) + " slices returned " +
                           std::to_string(c.size()) + " counts for a fanout of " + std::to_string(fanout));
      std::vector<uint64_t> h(fanout, 0);
      for (uint64_t j = 0; j < c.size(); ++j) h[j % fanout] += c[j];
      const bool r = batches_[i].relation == 0;
      std::vector<uint64_t>& offsets = batches_[i].offsets;
      offsets.assign(fanout + 1, 0);
      for (uint64_t q = 0; q < fanout; ++q) {
        const uint64_t rows = h[q];
        offsets[q + 1] = offsets[q] + rows;
        mine[q * kCounts + (r ? kRRows : kSRows)] += rows;
        mine[q * kCounts + (r ? kRChunks : kSChunks)] += (rows + slot_rows_ - 1) / slot_rows_;
      }
      if (offsets[fanout] != batches_[i].rows)
        throw RuntimeError("gpj exchange: the histogram of a batch of " + std::to_string(batches_[i].rows) +
                           " rows counts " + std::to_string(offsets[fanout]));
    }
    // The exchange's epoch: rank 0's, different for every exchange in this process and its clock.
    static std::atomic<uint64_t> exchanges{0};  // ranks (and concurrent joins) as threads
    mine.back() = mix64(uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^ ++exchanges);
    all_counts_ = rank_.allgather(mine);
    if (all_counts_.size() != size_t(n_) * mine.size())
      throw RuntimeError("gpj exchange: the histogram allgather returned " + std::to_string(all_counts_.size()) +
                         " words, expected " + std::to_string(size_t(n_) * mine.size()));
    epoch_ = uint32_t(all_counts_[mine.size() - 1]) | 1u;  // never 0: a zeroed slot is no chunk
  }

  uint64_t count(int sender, uint64_t q, Count c) const {
    return all_counts_[size_t(sender) * (parts_.fanout() * kCounts + 1) + q * kCounts + c];
  }
  uint64_t total(uint64_t q, Count c) const {
    uint64_t t = 0;
    for (int s = 0; s < n_; ++s) t += count(s, q, c);
    return t;
  }

  void placement(const PlacementFn& place) {
    const uint64_t first = parts_.first_of(me_), last = parts_.first_of(me_ + 1);
    std::vector<uint64_t> r_rows, s_rows;
    for (uint64_t q = first; q < last; ++q) {
      r_rows.push_back(total(q, kRRows));
      s_rows.push_back(total(q, kSRows));
    }
    const std::vector<Placement> p = place(r_rows, s_rows);
    if (p.size() != r_rows.size())
      throw RuntimeError("gpj exchange: the placement gave " + std::to_string(p.size()) + " decisions for " +
                         std::to_string(r_rows.size()) + " partitions");
    std::vector<uint64_t> mine;
    for (Placement x : p) mine.push_back(x == Placement::Stream ? 1 : 0);
    const std::vector<uint64_t> all = rank_.allgather(mine);  // every receiver's, in partition order
    if (all.size() != parts_.fanout())
      throw RuntimeError("gpj exchange: placements of " + std::to_string(all.size()) + " partitions, expected " +
                         std::to_string(parts_.fanout()));
    streamed_.assign(all.begin(), all.end());
    for (int j = 0; j < n_; ++j) layouts_.push_back(layout_of(j));
  }

  ReceiverLayout layout_of(int j) const {
    ReceiverLayout l;
    const uint64_t first = parts_.first_of(j), last = parts_.first_of(j + 1);
    l.ring_index.assign(last - first, -1);
    l.r_at.resize(last - first);
    l.s_at.resize(last - first);
    for (uint64_t q = first; q < last; ++q) {
      if (streamed_[q]) {
        l.ring_index[q - first] = int64_t(l.streamed.size());
        l.streamed.push_back(q);
        continue;
      }
      for (int s = 0; s < n_; ++s) {
        l.r_at[q - first].push_back(l.r_rows);
        l.s_at[q - first].push_back(l.s_rows);
        l.r_rows += count(s, q, kRRows);
        l.s_rows += count(s, q, kSRows);
      }
    }
    return l;
  }

  // --- receiver side: windows, tables, the consumer ------------------------------------------------------

  void setup_receiver(ExchangeResult& res) {
    const ReceiverLayout& mine = layouts_[size_t(me_)];
    const uint64_t rings = uint64_t(n_) * mine.streamed.size();
    check_device_memory(mine, rings);
    const uint64_t ring_bytes = std::max<uint64_t>(1, rings * cfg_.slots * slot_bytes_);
    rings_ = rank_.alloc(cfg_.ring_space, ring_bytes, "gpj.rings");
    if (cfg_.lands_apart()) landed_ = rank_.alloc(cfg_.landing_space, ring_bytes, "gpj.rings.landed");
    credit_buffer_ = rank_.alloc(MemSpace::Host, 8, "gpj.credits");
    res.r = rank_.alloc_tuples(cfg_.materialize_space, mine.r_rows, rf_, "gpj.materialized.R");
    res.s = rank_.alloc_tuples(cfg_.materialize_space, mine.s_rows, sf_, "gpj.materialized.S");
    // Collective, in the same order on every rank.
    ring_window_ = rank_.expose(cfg_.lands_apart() ? landed_ : rings_, uint32_t(std::max<uint64_t>(1, rings)));
    credit_window_ = rank_.expose(credit_buffer_, uint32_t(parts_.fanout()));
    mat_windows_ = {rank_.expose(res.r.keys, uint32_t(n_)), rank_.expose(res.r.vals, uint32_t(n_)),
                    rank_.expose(res.s.keys, uint32_t(n_)), rank_.expose(res.s.vals, uint32_t(n_))};
    // Bytes every sender will have written into each materialized window.
    const uint64_t first = parts_.first_of(me_);
    expected_.assign(4, std::vector<uint64_t>(size_t(n_), 0));
    for (int s = 0; s < n_; ++s)
      for (uint64_t q = first; q < parts_.first_of(me_ + 1); ++q) {
        if (streamed_[q]) continue;
        expected_[0][size_t(s)] += count(s, q, kRRows) * rf_.key_bytes;
        expected_[1][size_t(s)] += count(s, q, kRRows) * rf_.val_bytes;
        expected_[2][size_t(s)] += count(s, q, kSRows) * sf_.key_bytes;
        expected_[3][size_t(s)] += count(s, q, kSRows) * sf_.val_bytes;
      }
    returned_.assign(rings, 0);
    forwarded_.assign(rings, 0);
    progress_ = std::make_shared<StreamProgress>(rings);
  }

  // Says, before anything is allocated, when this receiver's share does not fit its GPU memory.
  void check_device_memory(const ReceiverLayout& mine, uint64_t rings) {
    uint64_t need = rings * cfg_.slots * slot_bytes_;
    if (cfg_.lands_apart() && need > rank_.capacity(cfg_.landing_space))
      throw RuntimeError("rank " + std::to_string(me_) + ": its landing rings need " + std::to_string(need) +
                         " bytes of " + to_string(cfg_.landing_space) + " memory, but " +
                         std::to_string(rank_.capacity(cfg_.landing_space)) + " are left (gpudirect = off)");
    uint64_t s_rows = 0;
    for (uint64_t q : mine.streamed) {
      need += hash_table_bytes(TableKind::Chained, rf_, total(q, kRRows), cfg_.load_factor);
      s_rows += total(q, kSRows);
    }
    if (!mine.streamed.empty() && cfg_.output != OutputMode::CountOnly)
      need += 2 * std::min(cfg_.staging_rows, std::max<uint64_t>(s_rows, 1)) * (rf_.tuple_bytes() + sf_.val_bytes);
    if (cfg_.materialize_space == cfg_.ring_space)
      need += mine.r_rows * rf_.tuple_bytes() + mine.s_rows * sf_.tuple_bytes();
    const uint64_t left = rank_.capacity(cfg_.ring_space);
    if (need > left)
      throw RuntimeError("rank " + std::to_string(me_) + ": its partitions need " + std::to_string(need) + " bytes of " +
                         to_string(cfg_.ring_space) + " memory (" + std::to_string(mine.streamed.size()) +
                         " streamed: chained tables and rings" +
                         (cfg_.materialize_space == cfg_.ring_space ? ", and every partition materialized" : "") +
                         "), but " + std::to_string(left) +
                         " are left: gpj-h places what fits on the GPU and joins the rest on the CPU");
  }

  Launched launch_consumer(ExchangeResult& res, uint64_t out_rows) {
    const ReceiverLayout& mine = layouts_[size_t(me_)];
    StreamConsumeOp op;
    op.rings = rings_;
    op.sources = uint32_t(n_);
    op.parts = uint32_t(mine.streamed.size());
    op.slots = cfg_.slots;
    op.slot_rows = slot_rows_;
    op.slot_bytes = slot_bytes_;
    op.epoch = epoch_;
    op.r_fmt = rf_;
    op.s_fmt = sf_;
    uint64_t s_rows = 0, all_rows = 0;
    for (uint64_t q : mine.streamed) all_rows += total(q, kRRows) + total(q, kSRows);
    for (int s = 0; s < n_; ++s)
      for (uint64_t q : mine.streamed) {
        op.r_chunks.push_back(count(s, q, kRChunks));
        op.s_chunks.push_back(count(s, q, kSChunks));
      }
    const uint64_t table_seed = mix64(cfg_.seed + 3);
    for (uint64_t q : mine.streamed) {
      op.partition_ids.push_back(uint32_t(q));
      op.tables.push_back(rank_.alloc_table(cfg_.ring_space, TableKind::Chained, rf_, total(q, kRRows),
                                            cfg_.load_factor, table_seed, "gpj.table." + std::to_string(q)));
      // Histogram-sized grids: the partition's share of the consumer's parallelism.
      const uint64_t rows = total(q, kRRows) + total(q, kSRows);
      const double share = all_rows ? double(rows) / double(all_rows) : 0.0;
      op.workers.push_back(uint32_t(std::max<uint64_t>(1, uint64_t(share * double(cfg_.grid_blocks) + 0.5))));
      s_rows += total(q, kSRows);
    }
    op.mode = cfg_.output == OutputMode::CountOnly ? OutputMode::CountOnly : OutputMode::Direct;
    if (op.mode == OutputMode::Direct) {
      const uint64_t capacity = out_rows ? out_rows : std::max<uint64_t>(s_rows, 1);
      res.streamed.reserve(capacity);
      op.out = res.streamed.current();
      op.out_first = res.streamed.next_row();
      op.staging_rows = std::max<uint64_t>(1, std::min(cfg_.staging_rows, capacity));
      op.staging = rank_.alloc_output(cfg_.ring_space, 2 * op.staging_rows, rf_, sf_, "gpj.staging");
    }
    if (cfg_.star) op.star = *cfg_.star;
    op.progress = progress_;
    op.chunk_timeout_s = cfg_.chunk_timeout_s;
    op.idle_timeout_s = cfg_.idle_timeout_s;
    op.copied_in = cfg_.lands_apart();
    return rank_.launch_streaming(kConsumer, op);
  }

  void finish_consumer(const OpResult& r, ExchangeResult& res) {
    if (cfg_.output == OutputMode::CountOnly) {
      res.streamed.count_unwritten(r.count);
    } else if (r.overflow) {
      res.overflow = true;
      res.streamed.count_unwritten(r.count);  // the true count, for the rerun's sizing
    } else {
      res.streamed.commit(r.count);
    }
  }

  // Called between puts and in every wait: copies the chunks that landed in host memory to the
  // consumer's rings, and returns credits. Returns whether it did either.
  bool pump_credits() {
    const bool copied = copy_landed();
    return return_credits() || copied;
  }

  // A put into a ring that lands apart sets the ring's flag to its last chunk's sequence number
  // (high word) and that chunk's bytes (low word), so that the receiver copies no more than arrived.
  static uint64_t landed_flag(uint64_t last_seq, uint64_t last_bytes) { return last_seq << 32 | last_bytes; }

  // Without GPUDirect: every chunk that landed in the host rings since the last scan is copied,
  // queued on kLanded, into the same slot of the consumer's rings, consecutive slots in one copy.
  // A slot is rewritten only once the consumer used its chunk, so no copy reads a slot being
  // written, nor writes one being read. The rings are scanned again once the copies queued at
  // the last scan are done: what landed meanwhile then goes at once (the consumer gets chunks of
  // many partitions together), and the senders' thread, which calls this between puts, does not
  // read every ring's flag each time.
  bool copy_landed() {
    if (!cfg_.lands_apart() || !progress_ || !copies_.done()) return false;
    bool any = false;
    for (size_t ring = 0; ring < forwarded_.size(); ++ring) {
      const uint64_t flag = rank_.read_flag(ring_window_, uint32_t(ring));
      const uint64_t seq = flag >> 32, tail = flag & 0xffffffffu;
      for (uint64_t next = forwarded_[ring] + 1; next <= seq;) {
        const uint64_t at = (next - 1) % cfg_.slots;
        const uint64_t n = std::min(seq - next + 1, cfg_.slots - at);
        const uint64_t off = (ring * cfg_.slots + at) * slot_bytes_;
        // Only the last put's last chunk has a known size: earlier chunks are copied whole slots
        // (a partial chunk ends a batch's rows of a partition).
        const uint64_t bytes = (n - 1) * slot_bytes_ + (next + n - 1 == seq ? tail : slot_bytes_);
        rank_.copy(kLanded, rings_, off, landed_, off, bytes);
        next += n;
      }
      any = any || seq > forwarded_[ring];
      forwarded_[ring] = std::max(forwarded_[ring], seq);
    }
    if (any) copies_ = rank_.record(kLanded);
    return any;
  }

  // Flag-only puts telling each sender how many chunks of its rings the consumer is done with.
  // Returns whether there were any.
  bool return_credits() {
    if (!progress_) return false;
    // Nothing released since the last scan: nothing to return (the senders call this between
    // puts and in every wait, and a scan reads every ring).
    const uint64_t releases = progress_->releases();
    if (releases != 0 && releases == scanned_releases_) return false;
    scanned_releases_ = releases;
    bool any = false;
    const ReceiverLayout& mine = layouts_[size_t(me_)];
    const size_t per_sender = mine.streamed.size();
    for (size_t ring = 0; ring < returned_.size(); ++ring) {
      const uint64_t done = progress_->consumed(ring);
      if (done == returned_[ring]) continue;
      returned_[ring] = done;
      rank_.put(kCredits, int(ring / per_sender), credit_window_, 0, Buffer{}, 0, 0,
                uint32_t(mine.streamed[ring % per_sender]), done);
      any = true;
    }
    return any;
  }

  bool materialized_complete() {
    for (size_t w = 0; w < 4; ++w)
      for (int s = 0; s < n_; ++s)
        if (rank_.read_flag(mat_windows_[w], uint32_t(s)) != expected_[w][size_t(s)]) return false;
    return true;
  }

  // One pause of a polling loop, bounded by idle_timeout_s since the last change it saw (moved()).
  // `what()` names what it waits for, made only for the error (the loops pause millions of times).
  template <class What>
  void waited(const What& what) {
    rank_.poll_pause();
    const double now = rank_.now();
    if (polls_since_ < 0) polls_since_ = now;
    if (now - polls_since_ > cfg_.idle_timeout_s)
      throw RuntimeError("rank " + std::to_string(me_) + ": waited " + std::to_string(int(cfg_.idle_timeout_s)) +
                         " s for " + what());
  }
  void moved() { polls_since_ = -1; }

  // --- sender side ---------------------------------------------------------------------------------------
  //
  // The sender's CPU work (partition, pack) runs on stream kCompute - host CPU threads that keep
  // the stream's order - and its puts on stream kPuts. With send buffers in pinned memory
  // (send_space Pinned, the default) every batch is queued without waiting: the partitioned copy
  // and the chunk images are planned from the histogram pass, the puts are DMA copies that wait
  // on their stream for the pack, and the next batch's partition waits on its stream for the puts
  // that read its buffers. This thread only waits for ring slots, returning this rank's credits
  // meanwhile, so partitioning, packing, the copies and the consumer all overlap. A CUDA copy
  // from or into pageable memory is done by the calling thread rather than by the stream's DMA,
  // so with pageable send buffers (send_space Host), or puts into pageable windows (crj's and
  // gpj-h's materialized partitions), each batch's partition and pack are waited for before its
  // puts, as one would without pinned buffers.

  struct BatchBuffers {
    Tuples part;
    Buffer images;
    Event puts_done;
  };

  // Two sets of send buffers: one batch is partitioned and packed while the other's puts run.
  // Where every partition streams, the batches are partitioned straight into the chunk images
  // and need no partitioned copy.
  void setup_sender() {
    uint64_t max_batch = 0;
    for (const Batch& b : batches_) max_batch = std::max(max_batch, b.rows);
    const TupleFormat widest{std::max(rf_.key_bytes, sf_.key_bytes), std::max(rf_.val_bytes, sf_.val_bytes)};
    const uint64_t max_images = max_batch / slot_rows_ + parts_.fanout();
    const bool streams = std::find(streamed_.begin(), streamed_.end(), 1u) != streamed_.end();
    for (auto& b : send_) {
      if (!packs_while_partitioning())
        b.part = rank_.alloc_tuples(cfg_.send_space, max_batch, widest, "gpj.send.partitioned");
      if (streams)
        b.images = rank_.alloc(cfg_.send_space, std::max<uint64_t>(1, max_images * slot_bytes_), "gpj.send.chunks");
    }
  }

  // Every partition streams (gpj): a batch goes from the input straight into chunk images, one
  // pass (PackChunksOp with partition_by). Otherwise it is partitioned into a copy, whose
  // materialized partitions are put from there and whose streamed ones are packed from there.
  bool packs_while_partitioning() const {
    return std::find(streamed_.begin(), streamed_.end(), 0u) == streamed_.end();
  }

  void send_batches(const Launched& consumer) {
    const uint64_t fanout = parts_.fanout();
    const bool materializes = std::find(streamed_.begin(), streamed_.end(), 0u) != streamed_.end();
    const bool streams = std::find(streamed_.begin(), streamed_.end(), 1u) != streamed_.end();
    const bool queued = cfg_.send_space != MemSpace::Host && !(streams && cfg_.ring_space == MemSpace::Host) &&
                        !(materializes && cfg_.materialize_space == MemSpace::Host);
    std::vector<uint64_t> sent(fanout, 0);          // chunks put per partition (its ring's seq)
    std::vector<uint64_t> mat_rows(fanout * 2, 0);  // rows put per materialized partition, R and S
    std::vector<uint64_t> mat_bytes(size_t(n_) * 4, 0);  // per receiver and window: bytes put
    partitioned_.clear();
    for (size_t i = 0; i < batches_.size(); ++i) {
      Batch& batch = batches_[i];
      const std::vector<uint64_t>& offsets = batch.offsets;
      BatchBuffers& bb = send_[i % 2];
      // The puts of two batches ago read these buffers.
      if (queued)
        rank_.stream_wait(kCompute, bb.puts_done);
      else
        wait_pumping(bb.puts_done);
      const Tuples& t = input(batch.relation);
      // Chunk images of the streamed partitions.
      PackChunksOp pack;
      pack.relation = uint32_t(batch.relation);
      pack.epoch = epoch_;
      pack.slot_rows = slot_rows_;
      pack.out = bb.images;
      for (uint64_t q = 0; q < fanout; ++q) {
        pack.rows.push_back(streamed_[q] ? offsets[q + 1] - offsets[q] : 0);
        pack.first_seq.push_back(sent[q] + 1);
      }
      PartitionOp part;
      if (packs_while_partitioning()) {
        // The histogram pass's counts are the plan; the operator checks its input against them
        // and returns the offsets a partition would have (checked as a partition's are).
        pack.in = t.slice(batch.first, batch.rows);
        pack.partition_by = parts_.fn();
        if (batch.slices.size() > 2) {  // one slice would leave the operator a single thread
          pack.in_slices = batch.slices;
          pack.slice_rows = std::move(batch.slice_counts);  // the batch needs them no more
        }
        partitioned_.push_back(rank_.launch_streaming(kCompute, pack));
        if (!queued) check_partitioned(partitioned_.size() - 1);
      } else {
        part.in = t.slice(batch.first, batch.rows);
        part.fn = parts_.fn();
        part.out = bb.part;
        part.out.fmt = t.fmt;
        part.out.rows = batch.rows;
        partitioned_.push_back(rank_.launch(kCompute, part));
        if (!queued) check_partitioned(partitioned_.size() - 1);
        pack.in = part.out;
        bool any_streamed = false;
        for (uint64_t q = 0; q < fanout; ++q) {
          pack.begin.push_back(offsets[q]);
          any_streamed = any_streamed || pack.rows[q] > 0;
        }
        if (any_streamed) {
          const Launched packed = rank_.launch_streaming(kCompute, pack);
          if (!queued) wait_pumping(packed.done);
        }
      }
      rank_.stream_wait(kPuts, rank_.record(kCompute));
      // The images hold the streamed partitions' chunks in partition order.
      std::vector<uint64_t> first_image(fanout + 1, 0);
      for (uint64_t q = 0; q < fanout; ++q)
        first_image[q + 1] = first_image[q] + (streamed_[q] ? (offsets[q + 1] - offsets[q] + slot_rows_ - 1) / slot_rows_ : 0);
      // Every sender starts with the partitions of the next receiver after itself and goes round:
      // walked in the same order by all, every sender would put into one receiver at a time
      // (incast on its link, the others idle).
      const uint64_t start = parts_.first_of((me_ + 1) % n_);
      for (uint64_t step = 0; step < fanout; ++step) {
        const uint64_t q = (start + step) % fanout;
        const uint64_t rows = offsets[q + 1] - offsets[q];
        if (!rows) continue;
        const int j = parts_.receiver_of(q);
        if (streamed_[q]) {
          put_chunks(j, q, sent[q], bb.images, first_image[q], rows, t.fmt, consumer);
          sent[q] += first_image[q + 1] - first_image[q];
        } else {
          put_rows(j, q, batch.relation, part.out.slice(offsets[q], rows), mat_rows, mat_bytes);
        }
        pump_credits();
      }
      bb.puts_done = rank_.record(kPuts);
    }
  }

  // Batch i's partition wrote its partitions where the histogram pass said (its chunks and puts
  // were planned from that); waits for it.
  void check_partitioned(size_t i) {
    wait_pumping(partitioned_[i].done);
    const std::vector<uint64_t>& got = partitioned_[i].result->values;
    if (got != batches_[i].offsets)
      throw RuntimeError("gpj exchange: rank " + std::to_string(me_) + " partitioned batch " + std::to_string(i) +
                         " differently from its histogram (" + std::to_string(got.size()) + " offsets, ending at " +
                         std::to_string(got.empty() ? 0 : got.back()) + " of " + std::to_string(batches_[i].rows) +
                         " rows): the input changed during the exchange");
  }

  // Waits for e, returning this rank's credits meanwhile (a sender that waits without doing so
  // would hold up the senders that wait for this rank's consumer).
  void wait_pumping(const Event& e) {
    moved();
    while (!e.done()) {
      if (pump_credits()) moved();
      waited([] { return std::string("the sender's own partitioning, packing and puts"); });
    }
  }

  // Puts the `rows` rows of partition q that this batch packed into images [image, ...) of
  // `images`, after the partition's `sent` earlier chunks: consecutive chunks that land in
  // consecutive slots of the ring go in one put (up to chunks_per_put, and at most half the ring,
  // so that the consumer works on one half while the other is written), each put once receiver j
  // returned every slot it writes. Where the images of this relation's tuples lie closer together
  // than the ring's slots (R and S of different widths), one put per chunk.
  void put_chunks(int j, uint64_t q, uint64_t sent, const Buffer& images, uint64_t image, uint64_t rows, TupleFormat fmt,
                  const Launched& consumer) {
    const uint64_t image_bytes = chunk_slot_bytes(fmt, slot_rows_);
    const uint64_t most = image_bytes == slot_bytes_ ? max_chunks_per_put() : 1;
    const uint64_t chunks = (rows + slot_rows_ - 1) / slot_rows_;
    const ReceiverLayout& l = layouts_[size_t(j)];
    const uint64_t ring = uint64_t(me_) * l.streamed.size() + uint64_t(l.ring_index[q - parts_.first_of(j)]);
    for (uint64_t c = 0; c < chunks;) {
      const uint64_t first_seq = sent + c + 1;
      const uint64_t at = (first_seq - 1) % cfg_.slots;
      const uint64_t n = std::min({most, chunks - c, cfg_.slots - at});
      const uint64_t last_seq = first_seq + n - 1;
      const uint64_t last_rows = std::min(slot_rows_, rows - (c + n - 1) * slot_rows_);
      wait_for_slot(j, q, last_seq, consumer);
      // Images lie as far apart as PackChunksOp put them for this relation's tuples.
      const uint64_t last_bytes = chunk_bytes(fmt.key_bytes, fmt.val_bytes, slot_rows_, last_rows);
      rank_.put(kPuts, j, ring_window_, (ring * cfg_.slots + at) * slot_bytes_, images, (image + c) * image_bytes,
                (n - 1) * slot_bytes_ + last_bytes, uint32_t(ring),
                cfg_.lands_apart() ? landed_flag(last_seq, last_bytes) : last_seq);
      c += n;
    }
  }

  uint64_t max_chunks_per_put() const {
    return std::max<uint64_t>(1, std::min<uint64_t>(cfg_.chunks_per_put, cfg_.slots / 2));
  }

  // Waits until receiver j returned the slot of chunk `seq` of partition q (every chunk up to
  // seq - slots was consumed).
  void wait_for_slot(int j, uint64_t q, uint64_t seq, const Launched& consumer) {
    moved();
    while (seq > rank_.read_flag(credit_window_, uint32_t(q)) + cfg_.slots) {
      if (pump_credits()) moved();
      if (consumer.result && consumer.done.done()) consumer.get();  // our consumer failed: stop
      waited([&] { return "a free ring slot for partition " + std::to_string(q) + " on rank " + std::to_string(j); });
    }
    moved();
  }

  // this sender counts the bytes put so far.
  void put_rows(int j, uint64_t q, int relation, const Tuples& rows, std::vector<uint64_t>& mat_rows,
                std::vector<uint64_t>& mat_bytes) {
    const ReceiverLayout& l = layouts_[size_t(j)];
    const size_t local = size_t(q - parts_.first_of(j));
    const uint64_t at = (relation == 0 ? l.r_at : l.s_at)[local][size_t(me_)] + mat_rows[q * 2 + size_t(relation)];
    mat_rows[q * 2 + size_t(relation)] += rows.rows;
    const int key_window = relation * 2, val_window = relation * 2 + 1;
    for (int w : {key_window, val_window}) {
      const bool keys = w == key_window;
      const uint32_t width = keys ? rows.fmt.key_bytes : rows.fmt.val_bytes;
      uint64_t& done = mat_bytes[size_t(j) * 4 + size_t(w)];
      done += rows.rows * width;
      rank_.put(kPuts, j, mat_windows_[size_t(w)], at * width, keys ? rows.keys : rows.vals, rows.offset * width,
                rows.rows * width, uint32_t(me_), done);
    }
  }

  Rank& rank_;
  const Inputs& in_;
  const OverPartitioning& parts_;
  const ExchangeConfig& cfg_;
  const int n_, me_;
  const TupleFormat rf_, sf_;
  uint64_t slot_rows_ = 0, slot_bytes_ = 0;
  uint32_t epoch_ = 1;
  std::vector<Batch> batches_;
  std::vector<Launched> partitioned_;  // each batch's partition, checked against its histogram
  BatchBuffers send_[2];
  std::vector<uint64_t> all_counts_;
  std::vector<uint64_t> streamed_;  // per global partition: 1 = streamed, 0 = materialized
  std::vector<ReceiverLayout> layouts_;
  Buffer rings_, credit_buffer_;
  Buffer landed_;  // the rings the puts land in, when they land apart (gpudirect = off)
  int ring_window_ = -1, credit_window_ = -1;  // ring_window_: where the chunks' puts land
  std::vector<uint64_t> forwarded_;  // per ring: chunks copied from landed_ (gpudirect = off)
  Event copies_;                     // the copies of landed chunks queued at the last scan
  std::vector<int> mat_windows_;
  std::vector<std::vector<uint64_t>> expected_;
  std::vector<uint64_t> returned_;
  std::shared_ptr<StreamProgress> progress_;
  uint64_t scanned_releases_ = 0;  // progress_->releases() at the last scan of every ring
  double polls_since_ = -1;
};

}  // namespace

uint64_t OverPartitioning::first_of(int receiver) const {
  return (uint64_t(receiver) * fanout() + uint64_t(receivers) - 1) / uint64_t(receivers);
}

int OverPartitioning::receiver_of(uint64_t partition) const { return int(partition * uint64_t(receivers) / fanout()); }

OverPartitioning OverPartitioning::make(uint64_t parts_per_receiver, int receivers, uint64_t seed) {
  OverPartitioning p;
  p.receivers = std::max(1, receivers);
  p.bits = ceil_log2(std::max<uint64_t>(1, parts_per_receiver) * uint64_t(p.receivers));
  p.seed = seed;
  if (p.bits > 24)
    throw InputError("the exchange would need 2^" + std::to_string(p.bits) +
                     " partitions (parts_per_receiver x ranks): at most 2^24");
  return p;
}

void add_exchange_options(po::options_description& d) {
  d.add_options()("parts_per_receiver", int_option("parts_per_receiver", 16, 1, 1 << 16),
                  "partitions per receiving rank (over-partitioning; thostrup2023 found 16 per GPU most robust)")(
      "batch_rows", int_option("batch_rows", 0, 0, int64_t(1) << 40),
      "rows a sender partitions and ships at a time (the next batch is partitioned while this one is sent; "
      "0: from the cluster, exchange_geometry)")(
      "chunk_bytes",
      po::value<int64_t>()->default_value(0)->notifier([](int64_t v) {
        if (v == 0 || (v >= 64 && v <= (int64_t(1) << 30))) return;
        throw po::error("chunk_bytes = " + std::to_string(v) + ": must be 0 (from the cluster) or in [64, " +
                        std::to_string(int64_t(1) << 30) + "]");
      }),
      "bytes of tuples in one streamed chunk, i.e. one one-sided put into a ring slot (0: from the cluster)")(
      "slots", int_option("slots", 0, 0, 1 << 16),
      "ring slots per (sender, partition) on every receiver (0: from the cluster)")(
      "seed", int_option("seed", 0x5eed, 0, int64_t(1) << 62),
      "hash seed of the partitioning (the hash tables use their own, derived from it)")(
      "load_factor", fraction_option("load_factor", 0.5, 0.0, 1.0),
      "rows / buckets of the chained hash tables (buckets rounded up to a power of two)")(
      "grid_blocks", int_option("grid_blocks", 264, 1, 1 << 20),
      "consumer parallelism (GPU thread blocks) spread over the partitions by their share of the histogram")(
      "staging_rows", int_option("staging_rows", 1 << 16, 1, int64_t(1) << 32),
      "rows of each half of the consumer's output double buffer")(
      "chunk_timeout_s", fraction_option("chunk_timeout_s", 10, 0.0, 1e6),
      "a chunk whose checksum does not match for this long was corrupted: the run fails naming it")(
      "idle_timeout_s", fraction_option("idle_timeout_s", 120, 0.0, 1e6),
      "a receiver that gets nothing, or a sender that gets no free slot, for this long fails the run")(
      "chunks_per_put", int_option("chunks_per_put", 8, 1, 1 << 16),
      "consecutive chunks of a partition one put carries into consecutive ring slots (at most half the slots)")(
      "send_buffers", choice_option("send_buffers", {"pinned", "pageable"}, "pinned"),
      "the senders' partitioned copy and chunk images: pinned host memory (puts are DMA copies queued behind "
      "the CPU work, which overlaps them) or pageable (each batch partitioned and packed, then put)");
}

void add_gpudirect_option(po::options_description& d) {
  d.add_options()("gpudirect", choice_option("gpudirect", {"on", "off"}, "on"),
                  "on: the chunks' one-sided puts land in the receiver's GPU ring buffers (GPUDirect RDMA); off: "
                  "in ring buffers in pinned host memory, from which the receiver copies each arrived chunk to its "
                  "GPU over PCIe (queued beside the consumer, which builds and probes it once it is there)");
}

MemSpace landing_space(const po::variables_map& vm, MemSpace ring_space) {
  return vm["gpudirect"].as<std::string>() == "off" ? MemSpace::Pinned : ring_space;
}

ExchangeConfig exchange_config(const po::variables_map& vm, int ranks, const Workload& w) {
  ExchangeConfig c;
  c.parts_per_receiver = uint64_t(vm["parts_per_receiver"].as<int64_t>());
  c.batch_rows = uint64_t(vm["batch_rows"].as<int64_t>());
  c.chunk_bytes = uint64_t(vm["chunk_bytes"].as<int64_t>());
  c.slots = uint32_t(vm["slots"].as<int64_t>());
  c.seed = uint64_t(vm["seed"].as<int64_t>());
  c.load_factor = vm["load_factor"].as<double>();
  c.grid_blocks = uint64_t(vm["grid_blocks"].as<int64_t>());
  c.staging_rows = uint64_t(vm["staging_rows"].as<int64_t>());
  c.chunk_timeout_s = vm["chunk_timeout_s"].as<double>();
  c.idle_timeout_s = vm["idle_timeout_s"].as<double>();
  c.chunks_per_put = uint64_t(vm["chunks_per_put"].as<int64_t>());
  c.send_space = vm["send_buffers"].as<std::string>() == "pageable" ? MemSpace::Host : MemSpace::Pinned;
  const uint64_t widest = std::max(tuple_format(w.r).tuple_bytes(), tuple_format(w.s).tuple_bytes());
  exchange_geometry(c, ranks, uint64_t(double(w.r.rows + w.s.rows) / std::max(1, ranks) * double(widest)));
  return c;
}

void exchange_geometry(ExchangeConfig& c, int ranks, uint64_t bytes_per_rank) {
  // The geometry measured best on 2x H200 (experiments/multi-gpu/run_gpj_overlap.sh, 2026-11-22,
  // experiments/results/2xh200/gpj-overlap*.csv): 1 MiB chunks, 16 slots, 16Mi-row batches.
  const bool slots = c.slots == 0, chunk = c.chunk_bytes == 0;
  if (slots) c.slots = 16;
  if (chunk) c.chunk_bytes = 1 << 20;
  // Every receiver holds a ring per sender and partition: fewer slots, then smaller chunks, until
  // they fit kRingBudget (at 1024 ranks of 16 partitions each: 4 slots of 64 KiB).
  const uint64_t n = uint64_t(std::max(1, ranks));
  const uint64_t fanout = OverPartitioning::make(c.parts_per_receiver, ranks, c.seed).fanout();
  const uint64_t rings = n * ((fanout + n - 1) / n);  // per sender, the receiver's most partitions
  auto ring_bytes = [&] { return rings * c.slots * c.chunk_bytes; };
  while (slots && c.slots > 4 && ring_bytes() > kRingBudget) c.slots /= 2;
  while (chunk && c.chunk_bytes > (64 << 10) && ring_bytes() > kRingBudget) c.chunk_bytes /= 2;
  // And no larger than what a sender has for a partition: half of it per chunk, a ring of slots
  // no longer than all of it (a small join gets small chunks, not gigabytes of rings).
  const uint64_t per_ring = bytes_per_rank / std::max<uint64_t>(1, fanout);
  while (chunk && c.chunk_bytes > (64 << 10) && 2 * c.chunk_bytes > per_ring) c.chunk_bytes /= 2;
  while (slots && c.slots > 4 && c.slots * c.chunk_bytes > per_ring) c.slots /= 2;
  while (chunk && c.chunk_bytes > (64 << 10) && c.slots * c.chunk_bytes > per_ring) c.chunk_bytes /= 2;
  // Batches of at least 4 chunks of 16-byte tuples per partition: a batch's last chunk of each
  // partition is a partly filled put (at 10 nodes of 16 partitions, 16Mi-row batches reached 64%
  // of gpj's bound in simulation, 64Mi-row ones 78%, as 8 nodes do at 16Mi).
  if (c.batch_rows == 0) {
    uint64_t b = uint64_t(16) << 20;
    while (b < 4 * fanout * (c.chunk_bytes / 16) && b < (uint64_t(256) << 20)) b *= 2;
    c.batch_rows = b;
  }
}

uint64_t sender_buffer_bytes(const ExchangeConfig& c, const Workload& w, int ranks) {
  const TupleFormat rf = tuple_format(w.r), sf = tuple_format(w.s);
  const TupleFormat widest{std::max(rf.key_bytes, sf.key_bytes), std::max(rf.val_bytes, sf.val_bytes)};
  const uint64_t n = uint64_t(std::max(1, ranks));
  const uint64_t batch = std::min(c.batch_rows, std::max(w.r.rows, w.s.rows) / n + 1);
  const uint64_t slot_rows = chunk_rows(c, rf, sf);
  const uint64_t fanout = OverPartitioning::make(c.parts_per_receiver, ranks, c.seed).fanout();
  const uint64_t slot = slot_bytes(c, rf, sf);
  // Two batches in flight, each a partitioned copy and its chunk images (setup_sender).
  return 2 * (batch * widest.tuple_bytes() + (batch / slot_rows + fanout) * slot);
}

uint64_t chunk_rows(const ExchangeConfig& cfg, TupleFormat r, TupleFormat s) {
  const uint64_t widest = std::max(r.tuple_bytes(), s.tuple_bytes());
  return std::max<uint64_t>(1, cfg.chunk_bytes / widest);
}

uint64_t slot_bytes(const ExchangeConfig& cfg, TupleFormat r, TupleFormat s) {
  const uint64_t rows = chunk_rows(cfg, r, s);
  return std::max(chunk_slot_bytes(r, rows), chunk_slot_bytes(s, rows));
}

ExchangeResult run_exchange(Rank& rank, const Inputs& in, const OverPartitioning& parts, const ExchangeConfig& cfg,
                            const PlacementFn& place, uint64_t stream_out_rows) {
  Exchange ex(rank, in, parts, cfg);
  return ex.run(place, stream_out_rows);
}

ExchangeResult run_exchange_sized(Rank& rank, const Inputs& in, const OverPartitioning& parts,
                                  const ExchangeConfig& cfg, const PlacementFn& place) {
  ExchangeResult res = run_exchange(rank, in, parts, cfg, place);
  const std::vector<uint64_t> overflowed = rank.allgather({res.overflow ? 1u : 0u});
  if (std::find(overflowed.begin(), overflowed.end(), 1u) == overflowed.end()) return res;
  // Some rank's output was too small (a join that is not primary key - foreign key): every rank
  // exchanges again, each with its output sized to the count it now knows.
  const uint64_t exact = res.streamed.count();
  return run_exchange(rank, in, parts, cfg, place, std::max<uint64_t>(exact, 1));
}

Bound exchange_bound(const Workload& w, const ClusterShape& shape, const Bandwidths& bw) {
  const double n = shape.size(), per_node = shape.per_node;
  const double shipped = tuple_bytes_per_rank(w, n);
  auto over = [](double bytes, double rate) { return bytes > 0 && rate > 0 ? bytes / rate : 0.0; };
  const double links = std::max(over(shipped * (n - per_node) / n, bw.net), over(shipped * (per_node - 1) / n, bw.p2p));
  const double cpu = over(3 * shipped, bw.host_mem);  // partition: read + write; the puts read it
  if (links >= cpu)
    return {links, "network " + rate_text(bw.net) + " / peer " + rate_text(bw.p2p) + ": one-sided exchange of R and S"};
  return {cpu, "host memory " + rate_text(bw.host_mem) + ": senders partition R and S, puts read them"};
}

void require_tuple_payloads(const Workload& w, const std::string& strategy) {
  for (const RelationSpec* r : {&w.r, &w.s})
    if (late_materialized(*r))
      throw InputError("strategy " + strategy + " ships (key, payload) tuples: relation " + r->name + " has " +
                       std::to_string(r->payload_bytes.size()) +
                       " payload columns (workload." + (r == &w.r ? "r" : "s") +
                       ".payload_bytes must be one width; shuffle ships several)");
}

}  // namespace joinlab
