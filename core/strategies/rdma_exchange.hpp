// The one-sided exchange shared by gpj, gpj-b, gpj-h and crj (thostrup2023 sections 4 and 5;
// the distributed radix join of Barthels et al. that is the papers' CPU baseline).
//
// Every rank holds its slice of R and S in host memory and is both a sender and a receiver:
//  1. histogram: the senders hash-partition (murmur3) their input, batch by batch (gpj: each batch
//     in count_slices slices, whose counts spare the exchange's partition its own counting pass),
//     into an over-partitioned fanout (parts_per_receiver partitions per receiver, contiguous runs), and
//     tell every receiver the rows and chunks of its partitions (point-to-point, so no rank holds
//     the whole n x fanout histogram). A receiver now knows its global histogram, places each of
//     its partitions - streamed into its (GPU) memory, or materialized - and tells every sender
//     where its rows of the materialized partitions go.
//  2. exchange, batch by batch (planned from the histogram pass, and queued without waiting: the
//     partition and pack of one batch overlap the puts of the one before), the sender CPUs
//     partition into pinned buffers - where every partition streams (gpj), straight into the
//     chunk images, one pass (PackChunksOp with partition_by); else into a partitioned copy - and
//     * for streamed partitions pack fixed-size chunks (header with a checksum, ops.hpp
//       PackChunksOp) and put them into slots of the receiver's ring for (sender, partition) -
//       consecutive chunks into consecutive slots in one put - once the receiver returned a
//       credit for those slots. One persistent consumer per receiver
//       (StreamConsumeOp) checks each chunk, builds a chained hash table per partition and probes
//       it, streaming the result to host memory: the pipelined join.
//     * for materialized partitions put the rows straight to their final place in the receiver's
//       memory (offsets from the global histogram), each put setting the receiver's flag for this
//       sender to the bytes written so far.
//     While it waits for credits, every rank returns credits for the chunks its own consumer is
//     done with (flag-only puts), so senders and receivers never wait on each other in a cycle:
//     R chunks are always consumable, and S chunks of a partition become so once every sender
//     sent its R (senders send all of R before any S).
//
// Decisions come from sizes only (histograms, capacities), so the same code runs in simulation.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/strategies/strategy_util.hpp"

namespace joinlab {

// Global partitions (2^bits, by a hash of the key) in contiguous runs per receiver.
struct OverPartitioning {
  uint32_t bits = 0;
  int receivers = 1;
  uint64_t seed = 0;
  uint64_t fanout() const { return 1ULL << bits; }
  uint64_t first_of(int receiver) const;  // first global partition of a receiver
  int receiver_of(uint64_t partition) const;
  PartitionFn fn() const { return {PartitionFn::Hash, bits, 0, seed}; }
  // At least parts_per_receiver partitions for every receiver (the fanout is a power of two).
  static OverPartitioning make(uint64_t parts_per_receiver, int receivers, uint64_t seed);
};

enum class Placement : uint8_t { Stream, Materialize };

struct ExchangeConfig {
  uint64_t parts_per_receiver = 16;  // thostrup2023: 16 per GPU was the most robust
  // 0: from the cluster (exchange_geometry).
  uint64_t batch_rows = 0;           // rows a sender partitions and ships at a time
  uint64_t chunk_bytes = 0;          // bytes of tuples in one streamed chunk (one put)
  uint32_t slots = 0;                // ring slots per (sender, partition)
  uint64_t chunks_per_put = 8;       // consecutive chunks of a partition one put carries (<= slots / 2)
  // Slices the histogram pass counts each batch in (gpj's option count_slices; the strategies that
  // materialize everything count whole batches): where every partition streams, a batch is then
  // partitioned straight into chunk images without a counting pass of its own.
  uint64_t count_slices = 1;
  uint64_t min_slice_rows = 1 << 16;  // rows a counted slice holds at least (gpj's option min_slice_rows)
  uint64_t seed = 0x5eed;            // partitioning hash seed (the tables use their own)
  double load_factor = 0.5;          // chained tables: buckets = next power of two of rows / lf
  uint64_t grid_blocks = 264;        // consumer parallelism spread over partitions by size
  uint64_t staging_rows = 1 << 16;   // half of the consumer's output double buffer
  OutputMode output = OutputMode::Direct;  // consumer output: Direct or CountOnly
  double chunk_timeout_s = 10, idle_timeout_s = 120;
  MemSpace ring_space = MemSpace::Device;         // rings, tables, staging (the GPU's memory)
  // Where the streamed chunks' puts land: ring_space (GPUDirect RDMA), or rings of the same
  // geometry in pinned host memory from which the receiver copies each arrived chunk into its
  // ring_space slot (gpj's option gpudirect = off).
  MemSpace landing_space = MemSpace::Device;
  bool lands_apart() const { return landing_space != ring_space; }  // gpudirect = off
  MemSpace stream_out_space = MemSpace::Pinned;   // the streamed join result (host memory)
  MemSpace materialize_space = MemSpace::Host;    // materialized partitions
  // The senders' partitioned batches and chunk images, the puts' sources: pinned, so that a put
  // is a DMA copy queued behind the CPU work (from pageable memory a CUDA copy is staged by the
  // calling thread, synchronously). Option send_buffers = pinned | pageable.
  MemSpace send_space = MemSpace::Pinned;
  // An SSB query (gpj): the consumer probes every S chunk through these dimension tables
  // (StreamConsumeOp::star) and outputs nothing (output = CountOnly).
  const StarProbeOp* star = nullptr;
};
// Every key of ExchangeConfig but the memory spaces, of which send_space is option send_buffers.
void add_exchange_options(po::options_description& d);
// The options, with the geometry left at 0 sized for `ranks` and the workload (exchange_geometry).
ExchangeConfig exchange_config(const po::variables_map& vm, int ranks, const Workload& w);
// gpj's option gpudirect (on | off): where ExchangeConfig::landing_space is.
void add_gpudirect_option(po::options_description& d);
MemSpace landing_space(const po::variables_map& vm, MemSpace ring_space);
// Most bytes of rings a receiver holds when the geometry follows the cluster.
constexpr uint64_t kRingBudget = uint64_t(4) << 30;
// Chunk bytes, slots and batch rows left at 0: 1 MiB chunks and 16 slots, fewer slots (to 4) and
// then smaller chunks (to 64 KiB) while a receiver's rings (ranks x partitions per receiver x
// slots x chunk bytes) pass kRingBudget, and while a chunk is more than half, a ring more than
// all, of the bytes a sender has per partition (bytes_per_rank / partitions); batches of 16Mi
// rows, more (to 256Mi) until each partition gets 4 chunks of 16-byte tuples per batch.
void exchange_geometry(ExchangeConfig& c, int ranks, uint64_t bytes_per_rank);
// Host memory of a sender's buffers: two batches' partitioned copies and chunk images.
uint64_t sender_buffer_bytes(const ExchangeConfig& c, const Workload& w, int ranks);

// Decides, on a receiver, the placement of each of its partitions from their global rows.
using PlacementFn = std::function<std::vector<Placement>(const std::vector<uint64_t>& r_rows,
                                                         const std::vector<uint64_t>& s_rows)>;

struct ExchangeResult {
  explicit ExchangeResult(OutputSink out) : streamed(std::move(out)) {}
  OutputSink streamed;      // the consumer's join output (nothing when no partition streamed here)
  bool overflow = false;    // the streamed output needed more rows than given: count is exact
  Tuples r, s;              // the materialized partitions that arrived here (partition-major)
  uint64_t streamed_partitions = 0, materialized_partitions = 0;
};

// Runs phases "histogram" and "exchange" ("stream" when something streams here). Consumes
// nothing: the inputs may be exchanged again (a rerun after an overflow). stream_out_rows is the
// capacity of the streamed output (0: the S rows streamed here, exact for a primary-key R).
ExchangeResult run_exchange(Rank& rank, const Inputs& in, const OverPartitioning& parts, const ExchangeConfig& cfg,
                            const PlacementFn& place, uint64_t stream_out_rows = 0);

// gpj's rerun policy: exchanges, and if any rank's streamed output overflowed, exchanges again
// with every rank's output sized to its exact count.
ExchangeResult run_exchange_sized(Rank& rank, const Inputs& in, const OverPartitioning& parts,
                                  const ExchangeConfig& cfg, const PlacementFn& place);

// The chunk rows of a slot for R and S tuples of these formats (the same for both).
uint64_t chunk_rows(const ExchangeConfig& cfg, TupleFormat r, TupleFormat s);
// The bytes of a ring slot: a chunk of chunk_rows of the wider of the two.
uint64_t slot_bytes(const ExchangeConfig& cfg, TupleFormat r, TupleFormat s);

// The least time the exchange takes on one rank (the slowest, with balanced partitions): its
// bytes over the links - the part that leaves the node over bw.net while the rest goes over
// bw.p2p - or the host memory traffic of the senders over bw.host_mem: their one partition pass
// (read, write: straight into chunk images where everything streams) and the puts reading what it
// wrote, whichever is longer.
Bound exchange_bound(const Workload& w, const ClusterShape& shape, const Bandwidths& bw);

// InputError unless every relation carries its payload in the tuple (one payload column): the
// exchange ships (key, value) tuples only.
void require_tuple_payloads(const Workload& w, const std::string& strategy);

}  // namespace joinlab
