#include "sim/sim_rank.hpp"

#include <simgrid/Exception.hpp>
#include <boost/container/small_vector.hpp>
#include <simgrid/kernel/Timer.hpp>
#include <simgrid/s4u.hpp>
#include <xbt/log.h>

#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <deque>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <variant>

#include "core/common/error.hpp"
#include "core/exec/chunk.hpp"
#include "kernels/cpu/codec.hpp"
#include "kernels/cpu/cpu_kernels.hpp"
#include "models/profile.hpp"
#include "sim/key_content.hpp"
#include "sim/platform.hpp"
#include "sim/sim_buffer.hpp"

namespace joinlab::sim {

std::vector<std::pair<std::string, std::string>> sim_cluster_keys() {
  return {
      {"intra", "sim: GPUs inside a node: nvswitch | nvlink_mesh | pcie (default: the profile's)"},
      {"nics", "sim: per_gpu (one NIC per GPU, on its rail) | per_node (default: the profile's)"},
      {"nics_per_node", "sim: NICs a node's GPUs share when nics = per_node"},
      {"fabric", "sim: star (non-blocking) | fat_tree (default: the profile's)"},
      {"levels", "sim: fat tree switch levels, 1..3"},
      {"leaf_nodes", "sim: nodes under one leaf switch (per rail when rail-optimized)"},
      {"oversubscription", "sim: fat tree leaf down/up bandwidth ratio (>= 1 means oversubscribed)"},
      {"sim_flows", "sim: pair (a flow per message) | node (messages between two nodes started together "
                    "merged into one flow: a speed-up, exact on non-blocking fabrics) | auto (node above 256 GPUs "
                    "on a non-blocking fabric)"},
      {"sim_precision", "sim: SimGrid time quantum (surf/precision) in seconds; 1e-4 speeds up skewed shuffles"},
      {"sim_trace", "sim: ranks whose operators and transfers are traced: auto (the first 8) | all | none | N (the first N); "
                   "phases are kept for every rank"},
      {"sim_launch", "sim: processes (a collective is log2(ranks) rounds of messages, as over a network) | threads "
                     "(the twin of a run whose ranks were threads of one process: a collective meets in shared "
                     "memory, one wake-up whatever the ranks)"},
      {"sim_msg", "sim: the backend whose transports' message costs are charged: profile (msg.send, msg.put) | cpu "
                  "(inproc, or cluster.transport) | cuda (NCCL sends, UCX puts); a transport the profile did not "
                  "measure costs nothing, said on stderr"},
  };
}

namespace {

namespace sg4 = simgrid::s4u;

constexpr int kCollectiveTag = INT_MIN;
constexpr size_t kMaxTraceSpans = 4000000;  // over all ranks; beyond it spans are dropped

// --- options ---------------------------------------------------------------------------------

struct Options {
  enum Flows { Pair, Node } flows = Pair;
  // emulate_nodes: the declared nodes share one physical host (as a run with
  // cluster.emulate_nodes on one machine does): the strategy sees the declared shape, the
  // platform is one node of every GPU.
  bool emulate_nodes = false;
  std::string flows_name;
  double precision = 0;
  int trace_ranks = 8;  // operators and transfers of the first node or so; phases are kept for all
  // Spans recorded at most: about twice what a trace file of cfg.trace_bytes holds (a span takes
  // ~270 bytes there): the writer keeps those that began first, and spans end in time order here.
  size_t max_spans = kMaxTraceSpans;
  Topology topo;
  int threads = 0;  // cores a rank's CPU operators use (cluster.threads; 0: its domain's cores over its ranks)
  std::string msg_backend = "profile";  // sim_msg
  std::string transport;                // cluster.transport (the cpu backend's)
  bool threads_launch = false;          // sim_launch = threads
};

[[noreturn]] void bad_option(const std::string& key, const std::string& value, const std::string& why) {
  throw InputError("cluster." + key + " = " + value + ": " + why);
}

long parse_int(const std::string& key, const std::string& v, long lo, long hi) {
  try {
    size_t used = 0;
    long x = std::stol(v, &used);
    if (used == v.size() && x >= lo && x <= hi) return x;
  } catch (...) {
  }
  bad_option(key, v, "expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
}

double parse_real(const std::string& key, const std::string& v, double lo) {
  try {
    size_t used = 0;
    double x = std::stod(v, &used);
    if (used == v.size() && std::isfinite(x) && x >= lo) return x;
  } catch (...) {
  }
  std::ostringstream m;
  m << "expected a number >= " << lo;
  bad_option(key, v, m.str());
}

Options parse_options(const BackendConfig& cfg, const Profile& prof) {
  Options o;
  if (cfg.trace_bytes) o.max_spans = std::min<size_t>(kMaxTraceSpans, std::max<uint64_t>(1024, cfg.trace_bytes / 128));
  o.topo = prof.topology;
  o.threads = cfg.threads_per_rank;
  std::string flows = "auto";
  for (auto& [key, v] : cfg.options) {
    if (key == "intra") {
      if (v == "nvswitch") o.topo.intra = IntraNode::NVSwitch;
      else if (v == "nvlink_mesh") o.topo.intra = IntraNode::NVLinkMesh;
      else if (v == "pcie") o.topo.intra = IntraNode::PCIe;
      else bad_option(key, v, "expected nvswitch, nvlink_mesh or pcie");
    } else if (key == "nics") {
      if (v == "per_gpu") o.topo.nics = NicPlacement::PerGpu;
      else if (v == "per_node") o.topo.nics = NicPlacement::PerNode;
      else bad_option(key, v, "expected per_gpu or per_node");
    } else if (key == "nics_per_node") {
      o.topo.nics_per_node = int(parse_int(key, v, 1, 64));
    } else if (key == "fabric") {
      if (v == "star") o.topo.fabric = Fabric::Star;
      else if (v == "fat_tree") o.topo.fabric = Fabric::FatTree;
      else bad_option(key, v, "expected star or fat_tree");
    } else if (key == "levels") {
      o.topo.levels = int(parse_int(key, v, 1, 3));
    } else if (key == "leaf_nodes") {
      o.topo.leaf_nodes = int(parse_int(key, v, 1, 1 << 20));
    } else if (key == "oversubscription") {
      o.topo.oversubscription = parse_real(key, v, 1e-3);
    } else if (key == "sim_flows") {
      if (v != "pair" && v != "node" && v != "auto") bad_option(key, v, "expected pair, node or auto");
      flows = v;
    } else if (key == "sim_precision") {
      o.precision = parse_real(key, v, 0);
      if (o.precision > 1e-2) bad_option(key, v, "a time quantum above 10 ms would distort every timing");
    } else if (key == "emulate_nodes") {
      if (v == "true" || v == "1" || v == "yes") o.emulate_nodes = true;
      else if (v != "false" && v != "0" && v != "no") bad_option(key, v, "expected true or false");
    } else if (key == "sim_msg") {
      if (v != "profile" && v != "cpu" && v != "cuda") bad_option(key, v, "expected profile, cpu or cuda");
      o.msg_backend = v;
    } else if (key == "sim_launch") {
      if (v != "processes" && v != "threads") bad_option(key, v, "expected processes or threads");
      o.threads_launch = v == "threads";
    } else if (key == "transport") {
      o.transport = v;
    } else if (key == "sim_trace") {
      if (v == "auto") o.trace_ranks = 8;
      else if (v == "all") o.trace_ranks = INT_MAX;
      else if (v == "none") o.trace_ranks = 0;
      else o.trace_ranks = int(parse_int(key, v, 0, INT_MAX));
    }
  }
  // Node-merged flows pool a node's NICs and uplinks: exact where only the NICs can bind (a star
  // or a non-blocking fat tree: with adaptive routing a leaf's uplinks carry at most what its
  // NICs send), so `auto` merges there only, and only where per-GPU flows get slow.
  const int ranks = cfg.shape.size();
  const bool non_blocking = o.topo.fabric == Fabric::Star || o.topo.levels < 2 ||
                            (o.topo.oversubscription <= 1 && (o.topo.levels < 3 || o.topo.spine_oversubscription <= 1));
  // Node-merged flows are one world's: concurrent joins' worlds (simulate) move per-message flows.
  if (flows == "node" && cfg.jobs > 1)
    throw InputError("cluster.sim_flows = node: concurrent joins (experiment.concurrent_joins = " +
                     std::to_string(cfg.jobs) + ") are simulated with per-message flows; use sim_flows = pair or auto");
  o.flows = flows == "node" || (flows == "auto" && ranks > 256 && non_blocking && cfg.jobs == 1) ? Options::Node
                                                                                                 : Options::Pair;
  o.flows_name = o.flows == Options::Node ? "node" : "pair";
  return o;
}

// --- events ----------------------------------------------------------------------------------

// Thrown in a rank's actor when another rank failed: unwinds the strategy (not a std::exception,
// so strategies do not catch it) and ends the actor.
struct SimulationAborted {};

class SimRank;

// Completion of stream work. Only the rank that queued the work waits for it, and waiting runs
// that rank's streams (SimRank::block_until), so an event needs no SimGrid object of its own.
class SimEvent final : public EventImpl {
 public:
  explicit SimEvent(SimRank* owner) : owner_(owner) {}
  void wait() override;
  bool done() override { return done_; }
  void complete() { done_ = true; }

 private:
  SimRank* owner_;
  bool done_ = false;
};
using EventPtr = std::shared_ptr<SimEvent>;

// --- messages --------------------------------------------------------------------------------

// One byte range of a message (a vectored send has several): its size and the key content
// annotated there.
struct Piece {
  uint64_t bytes = 0;
  ContentPtr content;
  PieceRef partition;  // or, unbuilt, one partition of a partitioned buffer (sends only)
  uint32_t key_bytes = 0;
  std::vector<RegionMap::Span> spans;  // or, for a put, the annotated ranges where they lie
  // Compressed buffers (SimBuffer::compressed) that start in the range, by their byte in it: the
  // receiver's DecompressOp gives back the sender's rows.
  std::vector<std::pair<uint64_t, std::pair<uint64_t, ContentPtr>>> compressed;
};

void carry_compressed(Piece& p, const SimBuffer& from, uint64_t off) {
  for (auto it = from.compressed.lower_bound(off); it != from.compressed.end() && it->first < off + p.bytes; ++it)
    p.compressed.push_back({it->first - off, it->second});
}
void land_compressed(const Piece& p, SimBuffer& to, uint64_t off) {
  for (const auto& [at, what] : p.compressed) to.compressed[off + at] = what;
}

struct Message;
using MessagePtr = std::shared_ptr<Message>;
struct Message {
  uint64_t bytes = 0;  // of all its pieces
  boost::container::small_vector<Piece, 4> pieces;  // a shuffle chunk: keys and values of R and S
  bool arrived = false;
  SimRank* waiter = nullptr;  // the receiver blocked on it, woken when it arrives
  SimRank* sender = nullptr;  // its sender, while the send waits for the receive (rendezvous)
  MessagePtr next;            // the next one posted on its channel
};

// The piece of `bytes` from `buf` at byte `off`, carrying the key content annotated there. No
// buffer: a content-free piece.
Piece piece_of(const Buffer& buf, uint64_t off, uint64_t bytes, bool unbuilt = false) {
  Piece p;
  p.bytes = bytes;
  if (!buf) return p;
  const RegionMap& regions = sim_buffer(buf).regions;
  carry_compressed(p, sim_buffer(buf), off);
  if (unbuilt) p.partition = regions.read_piece(off, off + bytes, &p.key_bytes);
  if (!p.partition) p.content = regions.read(off, off + bytes, &p.key_bytes);
  return p;
}

// A message of one piece (a copy, a put), or of the ranges of a (vectored) send.
MessagePtr message_of(const Buffer& buf, uint64_t off, uint64_t bytes) {
  auto m = std::make_shared<Message>();
  m->bytes = bytes;
  m->pieces.push_back(piece_of(buf, off, bytes));
  return m;
}
template <class Ranges>
MessagePtr message_of(const Ranges& ranges) {
  auto m = std::make_shared<Message>();
  m->pieces.reserve(ranges.size());
  for (const BufferRange& r : ranges) {
    m->pieces.push_back(piece_of(r.buf, r.off, r.bytes, true));
    m->bytes += r.bytes;
  }
  return m;
}

struct ChannelKey {
  int src, dst, tag;
  bool operator==(const ChannelKey& o) const { return src == o.src && dst == o.dst && tag == o.tag; }
};
struct ChannelHash {
  size_t operator()(const ChannelKey& k) const {
    return size_t(mix64((uint64_t(uint32_t(k.src)) << 32 | uint32_t(k.dst)) ^ mix64(uint64_t(uint32_t(k.tag)))));
  }
};
// Messages posted and not yet taken, in the order their sends started: a list through
// Message::next (a channel lives for one message or a few; a deque would allocate 600 bytes).
struct Channel {
  MessagePtr head;
  Message* tail = nullptr;
  SimRank* waiter = nullptr;  // a receiver waiting for the next message to be posted
  bool empty() const { return !head; }
  void push(MessagePtr m) {
    Message* last = m.get();
    (tail ? tail->next : head) = std::move(m);
    tail = last;
  }
  MessagePtr pop() {
    MessagePtr m = std::move(head);
    head = std::move(m->next);
    if (!head) tail = nullptr;
    return m;
  }
};

// A transfer in flight: a SimGrid flow of its own (pair mode), or a member of a merged
// node-to-node flow (node mode), done when that flow ends (NodeNetwork::ended).
struct Transfer {
  bool done = false;
  SimRank* rank = nullptr;  // woken when it is done
  int src = 0, dst = 0;
  uint64_t bytes = 0;
  const std::vector<MessagePtr>* messages = nullptr;  // sends: arrive when it is done
};

// --- streams ---------------------------------------------------------------------------------

struct Item {
  enum Kind : uint8_t { Operator, Copy, Wait, Send, Recv, Put, Streaming } kind = Operator;
  EventPtr done;
  std::shared_ptr<Op> op;  // Operator
  std::shared_ptr<StreamingOp> sop;  // Streaming
  std::shared_ptr<OpResult> result;
  Buffer buf, other;       // Put: source. Copy: destination, source
  boost::container::small_vector<BufferRange, 4> ranges;  // Send: sources. Recv: destinations
  uint64_t off = 0, other_off = 0, bytes = 0;  // bytes: of all ranges (Send/Recv)
  int peer = -1, tag = 0;  // Send/Recv/Put
  int window = 0;          // Put
  uint32_t flag = 0;
  uint64_t value = 0;
  bool batched = false;    // Copy: not the first of a copy_v (the first paid the batch's launch)
  EventPtr wait_for;       // Wait
  std::string describe() const {
    static const char* names[] = {"operator", "copy", "wait for an event", "send to", "recv from", "put to", ""};
    if (kind == Operator) return std::string("operator ") + to_string(params_of(*op).kind);
    if (kind == Streaming) return std::string("streaming operator ") + to_string(params_of(*sop).kind);
    if (peer < 0) return names[kind];
    return std::string(names[kind]) + " rank " + std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
  }
};

// Bytes of a stream's running items: one copy, or a batch's copies moving as one transfer.
uint64_t bytes_of(const std::vector<Item>& running) {
  uint64_t bytes = 0;
  for (const Item& x : running) bytes += x.bytes;
  return bytes;
}

// An in-order queue that keeps its storage: a stream's items come and go by the million, and a
// std::deque of items this large allocates a block for each one.
template <class T>
class Fifo {
 public:
  bool empty() const { return head_ == items_.size(); }
  T& front() { return items_[head_]; }
  void push_back(T&& x) { items_.push_back(std::move(x)); }
  void pop_front() {  // after moving the front out
    if (++head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    } else if (head_ >= 64 && 2 * head_ >= items_.size()) {
      items_.erase(items_.begin(), items_.begin() + long(head_));
      head_ = 0;
    }
  }

 private:
  std::vector<T> items_;
  size_t head_ = 0;
};

struct SimStream {
  // Consuming: a StreamConsumeOp runs (SimRank::consume advances it).
  // AwaitReceiver: a send whose receiver has not reached the matching receive yet.
  // AwaitEngine: a copy over PCIe waiting for its direction's copy engine (SimRank::engines_).
  enum State : uint8_t { Idle, Busy, AwaitMessage, AwaitReceiver, AwaitEvent, Consuming, AwaitEngine } state = Idle;
  Fifo<Item> queue;
  std::vector<Item> running;  // one item, or back-to-back sends to one peer
  sg4::ActivityPtr activity;  // the SimGrid activity it waits for (Busy), if any
  Transfer* transfer = nullptr;  // or a node-merged transfer (Busy): &node_transfer
  Transfer node_transfer;
  std::vector<MessagePtr> outgoing;  // messages of the running sends or put
  MessagePtr incoming;        // AwaitMessage: the message of the running recv, once posted
  double begin = 0;
  EventPtr last;
  const char* track = "";     // link track of the running transfer (a literal: set per transfer)
  int cpu_threads = 0;        // threads of the CPU work it runs (counted in its domain's load)
  int engine = -1;            // the copy engine its running copy holds or waits for (0 h2d, 1 d2h)
  // Busy in two steps: once `activity` ends, `next` runs (starts the transfer a message's
  // software cost preceded, or waits for a CPU operator's memory traffic after its compute).
  std::function<void()> next;
};

struct Window {
  Buffer buf;
  std::vector<uint64_t> flags;
};

// --- the node-aggregated network --------------------------------------------------------------

// Transfers between two nodes that start at the same simulated instant travel as one flow
// between the nodes' pooled end points, capped at the bandwidth of the GPU paths they stand for
// (distinct senders or receivers times one GPU's path). Where only the NICs can bind (a star or
// a non-blocking fat tree) and every GPU has one transfer in flight per direction (one sending
// and one receiving stream, rendezvous sends) this is the per-GPU result; under skew all
// transfers of a merged flow end together.
//
// The flows start once everything that happens at that simulated time has happened: a kernel
// timer at the current time, which SimGrid's maestro runs when no actor can run any more, and
// which waits for ranks that a bell will wake later at this instant (SimWorld::waking). Their
// ends are seen in maestro too (Activity::on_completion). So which transfers merge depends only on
// the simulated time they start, not on the order in which SimGrid runs the actors, and no actor
// is switched to for a flow.
class NodeNetwork {
 public:
  // waking: ranks that will still run at this instant (SimWorld::waking).
  NodeNetwork(const Platform& p, uint64_t* flows, const int* waking);
  void add(Transfer* t);  // from a rank: starts with this instant's flows (t lives until it is done)
  void poke();            // a rank that the flows waited for runs: they start once this round ends

 private:
  struct Flow {
    sg4::CommPtr comm;
    std::vector<Transfer*> carried;
  };
  void flush();                        // maestro: the instant's transfers become flows
  void ended(const sg4::Activity& a);  // maestro: a flow ended (or some other activity did)

  const Platform& platform_;
  uint64_t* flows_;
  const int* waking_;
  std::vector<Transfer*> pending_;  // in the order they were added
  bool flush_due_ = false;
  std::deque<Flow> storage_;  // flows in flight, ended ones and free ones (a Flow is its comm's data)
  std::vector<Flow*> ended_, free_;  // ended_: their comms are released at the next flush
  std::vector<int> srcs_, dsts_;
};

// --- ranks -----------------------------------------------------------------------------------

class SimWorld;

class SimRank final : public Rank {
 public:
  SimRank(SimWorld& w, int id, ClusterShape shape);

  std::string backend() const override { return "sim"; }
  bool has_data() const override { return false; }
  int streams() const override;

  Buffer alloc(MemSpace space, uint64_t bytes, const std::string& tag) override;
  uint64_t capacity(MemSpace space) const override { return account_->left(space); }

  Launched launch(Stream s, Op op) override;
  Event copy(Stream s, const Buffer& dst, uint64_t dst_off, const Buffer& src, uint64_t src_off,
             uint64_t bytes) override;
  // The copies as copy() does each (their contents land range by range), one launch for all.
  Event copy_v(Stream s, const std::vector<CopyRange>& copies) override;
  Event record(Stream s) override { return Event(stream(s.id).last); }
  void stream_wait(Stream s, const Event& e) override;
  void sync(Stream s) override;
  // The profile's per-phase host time ([host] phase_seconds), on the host before the phase's work.
  void strategy_phase_began() override;

  Event send(Stream s, int peer, const Buffer& src, uint64_t off, uint64_t bytes, int tag) override;
  Event recv(Stream s, int peer, const Buffer& dst, uint64_t off, uint64_t bytes, int tag) override;
  Event send_v(Stream s, int peer, const std::vector<BufferRange>& ranges, int tag) override;
  Event recv_v(Stream s, int peer, const std::vector<BufferRange>& ranges, int tag) override;
  int expose(const Buffer& buf, uint32_t flags) override;
  Event put(Stream s, int peer, int window, uint64_t remote_off, const Buffer& src, uint64_t off, uint64_t bytes,
            uint32_t flag, uint64_t value) override;
  uint64_t read_flag(int window, uint32_t flag) override;
  Launched launch_streaming(Stream s, StreamingOp op) override;
  void poll_pause() override;

  std::vector<uint64_t> allgather(const std::vector<uint64_t>& mine) override;
  std::vector<uint64_t> alltoall(const std::vector<uint64_t>& mine, size_t per_rank) override;
  // The column's key content, sampled as a CompressOp's size estimate samples it.
  std::vector<std::vector<uint64_t>> codec_sample(Stream, const Buffer& buf, uint64_t first, uint64_t rows,
                                                  uint8_t value_bytes) override {
    ContentPtr c = buf ? sim_buffer(buf).regions.read(first * value_bytes, (first + rows) * value_bytes) : nullptr;
    return rows ? content_sample(c ? *c : *unknown_content(rows), 4, size_t(1) << codec::kDefaultChunkLog2)
                : std::vector<std::vector<uint64_t>>{};
  }
  // Cut at the key boundaries of R's and S's sorted contents (no keys to read).
  std::vector<JoinPiece> merge_path_parts(const Tuples& r, const Tuples& s, uint64_t min_parts,
                                          uint64_t max_rows) override;
  void barrier() override { allgather({}); }

  double now() const override { return sg4::Engine::get_clock(); }
  Bandwidths bandwidths() const override;

  // Runs this rank's streams until pred() holds; blocks the rank's actor (only) in SimGrid while
  // nothing it can do makes progress.
  // `extra`, if given, is waited for too and set to null once it completes.
  void block_until(const std::function<bool()>& pred, const char* what, sg4::ActivityPtr* extra = nullptr);
  // The rank's own host time (an allocation, releases): it waits, its streams run on.
  void wait_host(double seconds, const char* what);
  // Pays the releases of its buffers since the last time (the profile's free models).
  void pay_releases();
  // Another actor made progress possible here (a message arrived, a put landed, a merged flow
  // ended): wake this rank if it is blocked.
  void ring();
  void copied_into_rings(const Item& it);
  void land_put(int window, uint64_t remote_off, uint64_t bytes, const std::vector<RegionMap::Span>& spans, uint32_t flag,
                uint64_t value);
  bool traced() const;
  void span(const std::string& track, OpParams p, double begin, double end);
  std::string waiting() const;
  RankRecord record_of() const;
  bool finished = false;
  bool dirty = true;  // a message was posted to this rank or arrived since pump() last looked
  sg4::ActorPtr actor;  // runs this rank

 private:
  // Streams 0 .. streams()-1 are the strategy's; stream streams() carries collectives.
  SimStream& stream(int s, bool internal = false);
  Event enqueue(int s, Item item, bool internal = false);
  void block(const char* what);
  void pump();                 // starts every stream's next items while they can start
  std::pair<sg4::Host*, sg4::Host*> copy_route(const Item& it) const;
  void start_copy_flow(SimStream& st);
  double gpu_share(const Op& op) const;
  double kernel_seconds(const Op& op, const OpSample& sample) const;
  void start(SimStream& st, int index);
  void finish(SimStream& st, int index);  // the running item(s) of st are done
  bool try_recv(SimStream& st);
  void start_send(SimStream& st);  // the transfer of the running sends (their receiver reached them)
  void start_transfer(SimStream& st, int dst, uint64_t bytes);
  void start_put_transfer(SimStream& st, int peer, uint64_t bytes, bool src_host, bool dst_host);
  // CPU work of this rank on its memory domain: `bytes` of operator `kind` ([cpu] rates) on its
  // cores, `traffic` bytes through the domain's memory; without [cpu], traffic at host.mem_bw.
  void start_cpu_work(SimStream& st, const std::string& kind, double bytes, double traffic);
  // A message's software cost: `seconds` on the stream (a wait that shares nothing) before
  // `start` sends it; none: sent at once.
  void after_software_cost(SimStream& st, double seconds, std::function<void()> start);
  sg4::Host* cpu_host(int rank) const;  // the multicore host of a rank's memory domain
  // `bytes` through `host`'s memory link (its route to itself) at up to `rate`, started.
  sg4::ActivityPtr start_memory_flow(sg4::Host* host, double bytes, double rate);
  // Once the stream's activity ends, it waits for these too (those not finished yet).
  void then_wait(SimStream& st, std::vector<sg4::ActivityPtr> rest);
  void check_peer(int peer, const char* what) const;
  void check_range(const Buffer& b, uint64_t off, uint64_t bytes, const char* what) const;
  // gpj's persistent consumer (StreamConsumeOp) on stream `index`, advanced by pump().
  struct Consumer;
  void start_consumer(SimStream& st, int index);
  bool consume();  // starts what the consumer can start; true once it is done
  void consumer_batch_ended();
  // Waits `seconds` of this rank's CPU time (polls), its streams running on.
  void pay_polls(double seconds);
  // An allgather's dissemination rounds, once every rank deposited `mine`; returns the call.
  int collective(const std::vector<uint64_t>& mine);

  // The physical node of a rank (its CPU and host memory): the declared node, except under
  // emulate_nodes, where every declared node is the one host.
  int host_of(int rank) const;
  SimWorld& world_;
  std::shared_ptr<MemoryAccount> account_;
  std::vector<std::unique_ptr<SimStream>> streams_;
  std::vector<int> active_;  // streams that exist, in the order they were made
  uint64_t live_ = 0;        // bit i: stream i has work queued or running (pump() skips the others)
  // The GPU's copy engines, one per direction over PCIe: copies take them in the order they were
  // issued, one at a time (on an H200, three 16 MB host-to-device copies issued together by three
  // streams ended 0.35, 1.02 and 1.67 ms later), so a stream's copy overlaps the others' kernels.
  // Shared fairly instead, streams that issue copy, then kernels, stay in lockstep: every copy
  // ends together and the link idles while the kernels run.
  struct CopyEngine {
    bool busy = false;
    std::deque<int> waiting;  // streams, in the order their copies were issued
  };
  CopyEngine engines_[2];
  std::vector<sg4::ActivityPtr> wait_set_;  // block_until's, kept to spare allocations
  std::vector<int> wait_who_;
  std::vector<Window> windows_;
  int collectives_ = 0;
  bool blocked_ = false;      // in wait_any
  sg4::ExecPtr bell_;         // suspended 0-flop execution that ring() resumes
  bool rung_ = false;
  bool suspended_ = false;    // blocked as a suspended actor, which ring() resumes
  bool waking_ = false;       // its bell was rung and it has not run since
  const char* blocked_on_ = nullptr;
  bool flag_changed_ = false;  // rung since block_until last looked
  uint64_t changes_ = 0;       // rung, or own work done: what a polling loop waits for
  double poll_debt_ = 0;       // flag reads not yet paid in simulated time
  std::unique_ptr<Consumer> consumer_;
};

void SimEvent::wait() {
  if (!done_) owner_->block_until([this] { return done_; }, "an event of its own streams");
}

// gpj's persistent consumer on one GPU (ops.hpp StreamConsumeOp). Chunks become usable as their
// puts land (the ring window's flag of a ring holds the sequence number of its last landed
// chunk); each batch takes every usable chunk at the time it starts (in ring order, S chunks of a
// partition only once all its R chunks were used) and runs as one execution on the GPU of the
// modeled cost of its chunks: checksum, then chained build (R) or probe (S) of the chunk's rows at
// the partition's table size, without the per-launch constant (the kernel is persistent), and at
// least each partition's rows over its share of the grid (workers). A batch's chunks are released
// (StreamProgress) when it ends. Output rows fill the staging halves; a full half is copied to
// host memory over PCIe while the next fills, and the consumer waits when both are full.
struct SimRank::Consumer {
  StreamConsumeOp op;
  OpResultPtr result;
  int stream = 0;
  int window = -1;                      // the rings' window (-1: copied in)
  std::vector<uint64_t> copied_chunks;  // copied_in: per ring, chunks whose copies landed
  size_t rings = 0;
  std::vector<uint64_t> next;           // per ring: chunks used
  std::vector<uint64_t> r_total, r_done;  // per partition: R chunks over all rings
  std::vector<std::vector<ContentPtr>> r_parts;  // per partition: used R chunks' keys
  std::vector<ContentPtr> r_content;    // per partition: all of R, once complete
  std::vector<std::vector<size_t>> blocked;  // per partition: rings whose next chunk is S
  std::vector<HashTable> tables;        // as built: rows = capacity (the cost's table size)
  std::vector<char> listed;             // per ring: in `look`
  std::vector<size_t> look;             // rings that may have usable chunks
  double worker_total = 0;
  uint64_t remaining = 0;               // chunks not used yet
  double matches = 0;                   // expected matches so far
  uint64_t rows_out = 0;                // output rows so far (rounded matches)
  // The batch in flight.
  std::vector<std::pair<size_t, uint64_t>> batch;  // (ring, chunks used once it ends)
  sg4::ExecPtr exec;
  bool batch_done = false;
  double batch_begin = 0;
  uint64_t batch_chunks = 0, batch_rows = 0;
  // Output: rows in the half being filled, rows of full halves not yet copied, the copy in flight.
  uint64_t staged = 0, full = 0, flushing = 0, copied = 0;
  sg4::CommPtr flush;
  double flush_begin = 0;
  uint64_t out_row_bytes() const { return op.r_fmt.key_bytes + op.r_fmt.val_bytes + op.s_fmt.val_bytes; }
  void list(size_t ring) {
    if (!listed[ring]) {
      listed[ring] = 1;
      look.push_back(ring);
    }
  }
};

// --- the world -------------------------------------------------------------------------------

class SimWorld {
 public:
  SimWorld(const Profile& prof, Options opt, const ClusterShape& shape, uint64_t device_memory)
      : profile(prof), options(std::move(opt)), shape(shape), device_memory(device_memory) {}

  const Profile profile;
  const Options options;
  const ClusterShape shape;
  const uint64_t device_memory;
  Platform platform;
  sg4::Host* timer = nullptr;  // bounded executions on it measure out waits
  std::vector<std::unique_ptr<SimRank>> ranks;
  std::unique_ptr<NodeNetwork> node_net;
  SimStats stats;
  size_t spans = 0;
  int error_kind = 0;
  std::string error;

  // Stops the simulation with an error (the first one wins).
  // Stops the simulation with an error (the first one wins): every rank ends at its next wait.
  void fail(int kind, const std::string& why) {
    if (error.empty()) {
      error_kind = kind;
      error = why;
    }
    aborting = true;
    for (auto& r : ranks) r->ring();
  }
  bool aborting = false;
  int running = 0;  // rank actors not yet ended
  int blocked = 0;  // rank actors waiting in block_until
  int busy = 0;     // streams with work in flight (an activity or a transfer), and timers
  int waking = 0;   // ranks rung through their bell that have not run yet (they run later at this instant)
  // Per CPU domain: threads of the CPU work running there now (of every concurrent join's world).
  std::shared_ptr<std::vector<int>> cpu_threads;
  // Every rank still running waits and nothing is in flight: nothing can ever wake them.
  bool deadlocked() const { return busy == 0 && blocked == running; }
  std::string deadlock_report() const;

  // `seconds` of work alone on `host`; an operator that takes `share` of a GPU (GpuSpec::share)
  // runs at that share of its speed at most, so that others' work fills the rest.
  sg4::ExecPtr start_exec(sg4::Host* host, double seconds, double share = 1.0) {
    auto e = sg4::Exec::init()->set_flops_amount(seconds * share * kWorkPerSecond)->set_host(host);
    if (share < 1.0) e->set_bound(share * kWorkPerSecond);
    e->start();
    return e;
  }
  // A wait of `seconds` that shares nothing: a bounded execution on a host of unlimited speed.
  sg4::ExecPtr start_timer(double seconds) {
    auto e = sg4::Exec::init()->set_flops_amount(seconds * kWorkPerSecond)->set_host(timer)->set_bound(kWorkPerSecond);
    e->start();
    return e;
  }
  const char* link_track(int src, int dst) const {
    if (src == dst) return "link device";
    return platform.shape.node_of(src) == platform.shape.node_of(dst) ? "link nvlink" : "link network";
  }

  Channel& channel(int src, int dst, int tag) { return channels_[ChannelKey{src, dst, tag}]; }
  void post(int src, int dst, int tag, const MessagePtr& m) {
    ranks[size_t(dst)]->dirty = true;
    Channel& ch = channel(src, dst, tag);
    ch.push(m);
    if (ch.waiter) {  // its receiver waits: it takes the message and is woken when it arrives
      m->waiter = ch.waiter;
      ch.waiter = nullptr;
    }
  }
  // The receiver has reached the receive of `m`: a sender waiting for it may start the transfer.
  static void matched(const MessagePtr& m);
  // The next posted message of (src, dst, tag), or null (then `waiter` is told when one is).
  MessagePtr take(int src, int dst, int tag, SimRank* waiter) {
    const ChannelKey key{src, dst, tag};
    auto it = channels_.find(key);
    if (it == channels_.end() || it->second.empty()) {
      channels_[key].waiter = waiter;
      return nullptr;
    }
    MessagePtr m = it->second.pop();
    if (it->second.empty() && !it->second.waiter) channels_.erase(it);
    m->waiter = waiter;
    matched(m);
    return m;
  }

  // --- collectives: contributions by call index ---
  // True once every rank deposited its part of `call`.
  bool deposit(int call, int rank, std::vector<uint64_t> mine) {
    auto& c = collectives_[call];
    if (c.parts.empty()) c.parts.resize(size_t(shape.size()));
    c.parts[size_t(rank)] = std::move(mine);
    return ++c.deposits == shape.size();
  }
  bool complete(int call) const {
    auto it = collectives_.find(call);
    return it != collectives_.end() && it->second.deposits == shape.size();
  }
  // Words [first, first + count) of every rank's contribution, in rank order (all of them:
  // allgather; this rank's: alltoall).
  std::vector<uint64_t> gathered(int call, size_t first = 0, size_t count = SIZE_MAX) {
    auto& c = collectives_[call];
    size_t total = 0;
    for (auto& v : c.parts) total += std::min(count, v.size() - std::min(first, v.size()));
    std::vector<uint64_t> all;
    all.reserve(total);
    for (auto& v : c.parts) {
      const size_t from = std::min(first, v.size());
      all.insert(all.end(), v.begin() + long(from), v.begin() + long(from + std::min(count, v.size() - from)));
    }
    if (++c.reads == shape.size()) collectives_.erase(call);
    return all;
  }

 private:
  struct Collective {
    std::vector<std::vector<uint64_t>> parts;
    int deposits = 0, reads = 0;
  };
  std::unordered_map<ChannelKey, Channel, ChannelHash> channels_;
  std::map<int, Collective> collectives_;
};

// --- node network ------------------------------------------------------------------------------

NodeNetwork::NodeNetwork(const Platform& p, uint64_t* flows, const int* waking)
    : platform_(p), flows_(flows), waking_(waking) {
  sg4::Activity::on_completion_cb([this](const sg4::Activity& a) { ended(a); });
}

void SimWorld::matched(const MessagePtr& m) {
  if (SimRank* s = m->sender) {
    m->sender = nullptr;
    s->ring();
  }
}

void NodeNetwork::add(Transfer* t) {
  pending_.push_back(t);
  poke();
}

void NodeNetwork::poke() {
  if (!flush_due_ && !pending_.empty()) {
    flush_due_ = true;
    simgrid::kernel::timer::Timer::set(sg4::Engine::get_clock(), [this] { flush(); });
  }
}

// A message's last byte is in: its receiver, if waiting, is woken.
void arrive(const MessagePtr& m) {
  m->arrived = true;
  if (m->waiter) m->waiter->ring();
}

void NodeNetwork::ended(const sg4::Activity& a) {
  auto* f = a.get_data<Flow>();  // only flows carry data
  if (!f) return;
  for (Transfer* t : f->carried) {
    t->done = true;
    if (t->messages)  // the receivers learn it now, not once the sender next runs
      for (auto& m : *t->messages) arrive(m);
    t->rank->ring();
  }
  f->carried.clear();
  ended_.push_back(f);
}

}  // namespace
}  // namespace joinlab::sim

// SimGrid 3.32 starts a host-to-host comm (Comm::sendto_init) without the rate given to
// s4u::Comm::set_rate (mailbox comms honor it, but maestro cannot start those); the kernel's
// CommImpl::set_rate, exported by libsimgrid, sets it before the start. Its header is not
// installed, so that one member is declared here.
namespace simgrid::kernel::activity {
class CommImpl {
 public:
  CommImpl& set_rate(double rate);
};
}  // namespace simgrid::kernel::activity

namespace joinlab::sim {
namespace {

void NodeNetwork::flush() {
  flush_due_ = false;
  if (*waking_ > 0) return;  // ranks still run at this instant: the one that runs last pokes
  for (Flow* f : ended_) {  // ended in an earlier round: SimGrid is done with their comms
    f->comm = nullptr;
    free_.push_back(f);
  }
  ended_.clear();
  // One flow per (source node, destination node), in node order, its members in the order they came.
  const auto& shape = platform_.shape;
  std::stable_sort(pending_.begin(), pending_.end(), [&](const Transfer* a, const Transfer* b) {
    const int na = shape.node_of(a->src), nb = shape.node_of(b->src);
    return na != nb ? na < nb : shape.node_of(a->dst) < shape.node_of(b->dst);
  });
  auto distinct = [](std::vector<int>& v) {
    std::sort(v.begin(), v.end());
    return double(std::unique(v.begin(), v.end()) - v.begin());
  };
  for (size_t first = 0, end; first < pending_.size(); first = end) {
    const int src_node = shape.node_of(pending_[first]->src), dst_node = shape.node_of(pending_[first]->dst);
    uint64_t total = 0;
    srcs_.clear();
    dsts_.clear();
    for (end = first; end < pending_.size() && shape.node_of(pending_[end]->src) == src_node &&
                      shape.node_of(pending_[end]->dst) == dst_node;
         ++end) {
      total += pending_[end]->bytes;
      srcs_.push_back(pending_[end]->src);
      dsts_.push_back(pending_[end]->dst);
    }
    Flow* f;
    if (free_.empty()) {
      f = &storage_.emplace_back();
    } else {
      f = free_.back();
      free_.pop_back();
    }
    f->carried.assign(pending_.begin() + long(first), pending_.begin() + long(end));
    const double path = dst_node == src_node ? platform_.intra_node_bw : platform_.inter_node_bw;
    f->comm = sg4::Comm::sendto_init();
    reinterpret_cast<simgrid::kernel::activity::CommImpl*>(f->comm->get_impl())
        ->set_rate(std::min(distinct(srcs_), distinct(dsts_)) * path);
    f->comm->set_payload_size(std::max<uint64_t>(total, 1));
    f->comm->set_data(f);
    f->comm->set_source(platform_.nodes[size_t(src_node)]);
    f->comm->set_destination(platform_.nodes[size_t(dst_node)]);  // starts it
    ++*flows_;
  }
  pending_.clear();
}

// --- operator results from contents ------------------------------------------------------------

ContentPtr content_or_unknown(const Tuples& t) {
  ContentPtr c = read_keys(t);
  return c ? c : unknown_content(t.rows);
}

// Consecutive slices of one batch split by fn (the exchange's and mgsmj's sliced histograms, the
// pack that follows them). Each slice counts what a partition of that slice's rows gives
// (split_counts of its slice_content, whose rows keep their place in the range's: Component::at),
// and these add up to the range's split exactly, as they do on hardware. (Sharing the range's
// split over the slices instead agreed with the sum but not with a partition of one slice: mgsmj's
// chunks were scattered at offsets a row away from their histograms' and sent rows of a bucket to
// the GPU of the next. Splitting each slice on its own, without positions, missed the batch's sum
// by a few rows, and gpj-h, whose materialized partitions are a partition of the whole batch,
// stopped on it.)
struct SlicedSplit {
  std::vector<uint64_t> counts;   // slice-major: slice s's rows of partition p at s * fanout + p
  std::vector<uint64_t> totals;   // each partition's rows of the batch
  std::vector<ContentPtr> parts;  // each partition's content (with contents)
};
SlicedSplit split_slices(const Tuples& t, const PartitionFn& fn, const std::vector<uint64_t>& bounds, bool contents) {
  const size_t F = fn.fanout(), k = bounds.size() - 1;
  const uint64_t b0 = bounds.front(), rows = bounds.back() - b0;
  SlicedSplit out;
  out.counts.assign(k * F, 0);
  out.totals.assign(F, 0);
  if (contents) out.parts.assign(F, nullptr);
  // The batch's annotated ranges in row order, gaps as unknown keys: (first row, content).
  std::vector<std::pair<uint64_t, ContentPtr>> ranges;
  const uint64_t kb = t.fmt.key_bytes;
  uint64_t covered = 0;
  if (t.keys)
    for (auto& sp : sim_buffer(t.keys).regions.spans((t.offset + b0) * kb, (t.offset + b0 + rows) * kb)) {
      const uint64_t first = sp.offset / kb;
      if (first > covered) ranges.push_back({covered, unknown_content(first - covered)});
      ranges.push_back({first, sp.content});
      covered = first + sp.content->rows();
    }
  if (covered < rows) ranges.push_back({covered, unknown_content(rows - covered)});
  for (auto& [r0, content] : ranges) {
    const uint64_t r1 = r0 + content->rows();
    std::vector<uint64_t> w;
    if (contents) {
      const ContentSplit split(*content, fn);
      for (uint32_t p = 0; p < F; ++p) {
        w.push_back(split.rows(p));
        if (!w.back()) continue;
        ContentPtr& into = out.parts[p];
        if (!into) into = split.piece(p);
        else if (!split.absorb_piece(into, p)) into = merge_contents({into, split.piece(p)});
      }
    } else {
      w = split_counts(*content, fn);
    }
    for (size_t p = 0; p < F; ++p) out.totals[p] += w[p];
    for (size_t sl = 0; sl < k; ++sl) {
      const uint64_t lo = std::max(bounds[sl] - b0, r0), hi = std::min(bounds[sl + 1] - b0, r1);
      if (hi <= lo) continue;
      const std::vector<uint64_t> n =
          lo == r0 && hi == r1 ? w : split_counts(*slice_content(content, lo - r0, hi - r0), fn);
      for (size_t p = 0; p < F; ++p) out.counts[sl * F + p] += n[p];
    }
  }
  return out;
}

uint64_t rounded(double x) { return x <= 0 ? 0 : uint64_t(std::llround(x)); }

void join_result(OpResult& r, double expected, const JoinOutput& out, uint64_t out_first, OutputMode mode) {
  r.count = rounded(expected);
  r.overflow = mode != OutputMode::CountOnly && out_first + r.count > out.capacity;
}

// The bytes a CompressOp writes for a column: the real CPU compressor with the column's
// configuration, on a sample of what its rows hold (content_sample: up to 4 windows of a chunk's
// rows, regenerated rows of the workload where they are known to be generated, else drawn from
// the distribution), each window a chunk of its own; the windows' bytes per value scale to the
// column's rows. Its header and chunk offsets follow the column's own chunk count.
// Bytes per value of a sample (compressed bytes less the windows' preambles, per sampled value;
// NaN without values), remembered per sample shape (sample_shape): the hash partitions of one
// relation compress alike, and at 1024 GPUs a shuffle's CompressOps hold 2 M partitions of each
// column, each sample regenerating 4 windows of 64 Ki rows. Each shape's first kShapeSamples
// contents are sampled and keep their own estimate; the mean of theirs stands for the rest. The
// same content always gets the same estimate (a buffer sized by one compress fits the next).
double sampled_bytes_per_value(const KeyContent& c, uint32_t vb, codec::Config cfg, uint32_t chunk_log2) {
  constexpr size_t kShapeSamples = 8;
  static std::mutex mu;
  static std::map<std::tuple<uint64_t, uint32_t, uint8_t, uint8_t, uint32_t>, std::map<uint64_t, double>> seen;
  const uint64_t shape = sample_shape(c), content = sample_shape(c, true);
  const auto key = std::make_tuple(shape, vb, cfg.rle, codec::delta_code(cfg), chunk_log2);
  if (shape) {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = seen.find(key); it != seen.end()) {
      const std::map<uint64_t, double>& sampled = it->second;
      if (auto own = sampled.find(content); own != sampled.end()) return own->second;
      if (sampled.size() >= kShapeSamples) {
        double sum = 0;
        for (auto& [id, per_value] : sampled) sum += per_value;
        return sum / double(sampled.size());
      }
    }
  }
  const std::vector<std::vector<uint64_t>> sample = content_sample(c, 4, size_t(1) << chunk_log2);
  std::vector<std::vector<uint32_t>> narrow(sample.size());
  std::vector<cpu::CodecIn> in;
  uint64_t values = 0, preambles = 0;
  for (size_t w = 0; w < sample.size(); ++w) {
    if (vb == 4) narrow[w].assign(sample[w].begin(), sample[w].end());
    in.push_back({vb == 4 ? static_cast<const void*>(narrow[w].data()) : sample[w].data(), sample[w].size(), cfg});
    values += sample[w].size();
    preambles += codec::preamble_bytes(codec::chunk_count(sample[w].size(), chunk_log2));
  }
  if (!values) return std::nan("");
  const std::vector<uint64_t> off = cpu::codec_compress(in, vb, chunk_log2, nullptr, 0, 1);
  const double per_value = double(off.back() - preambles) / double(values);
  if (shape) {
    std::lock_guard<std::mutex> lock(mu);
    std::map<uint64_t, double>& sampled = seen[key];
    if (sampled.size() < kShapeSamples) sampled.emplace(content, per_value);
  }
  return per_value;
}

uint64_t estimated_compressed_bytes(const KeyContent& c, uint64_t rows, uint32_t vb, codec::Config cfg,
                                    uint32_t chunk_log2) {
  const uint64_t chunks = codec::chunk_count(rows, chunk_log2);
  if (!rows) return codec::preamble_bytes(0);
  const double per_value = sampled_bytes_per_value(c, vb, cfg, chunk_log2);
  if (std::isnan(per_value))
    return codec::preamble_bytes(chunks) + chunks * (codec::chunk_header_bytes(cfg) + 8 * (cfg.rle + 1u));
  const double scaled = per_value * double(rows);
  const uint64_t bytes = codec::preamble_bytes(chunks) +
                         std::max<uint64_t>(chunks * codec::chunk_header_bytes(cfg), uint64_t(std::ceil(scaled)));
  // Never past what the layers can write (another buffer's bytes per value may stand for this one's).
  return std::min((bytes + 7) & ~uint64_t(7), codec::buffer_bound(rows, vb, cfg, chunk_log2));
}

// The share of lineorder rows that pass every step of a query: its expected count over its rows
// (the data is not there; docs/workloads.md says what the simulator checks).
double star_pass_fraction(const StarProbeOp& o) {
  double f = 1;
  for (double p : ssb::step_pass_fractions(o.query, o.scale)) f *= p;
  return f;
}

void evaluate(const Op& op, OpResult& r) {
  std::visit(
      [&](const auto& o) {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GenerateOp>) {
          write_keys(o.out, generated_content(o.spec, o.referenced, o.first_row, o.out.rows));
        } else if constexpr (std::is_same_v<T, HistogramOp>) {
          check_histogram_counts(o);
          const std::vector<RowRange> ranges = histogram_ranges(o);
          if (o.in_segments.empty() && o.in_ranges.empty()) {
            r.values = split_counts(*content_or_unknown(o.in), o.fn);
          } else if (ranges_adjacent(ranges)) {  // slices of one batch, segment-major, adding up to the batch's split
            std::vector<uint64_t> bounds{ranges.front().begin};
            for (const RowRange& g : ranges) bounds.push_back(g.end);
            SlicedSplit split = split_slices(o.in, o.fn, bounds, false);
            // counts_out keeps the counts in the buffer (no contents to hold): the totals return.
            r.values = std::move(o.counts_out ? split.totals : split.counts);
          } else {  // ranges apart: each one's split, segment-major (or their totals with counts_out)
            const size_t F = o.fn.fanout();
            r.values.assign(o.counts_out ? F : ranges.size() * F, 0);
            for (size_t g = 0; g < ranges.size(); ++g) {
              if (!ranges[g].size()) continue;
              const std::vector<uint64_t> c = split_counts(*content_or_unknown(o.in.slice(ranges[g].begin, ranges[g].size())), o.fn);
              for (size_t p = 0; p < F; ++p) r.values[(o.counts_out ? 0 : g * F) + p] += c[p];
            }
          }
        } else if constexpr (std::is_same_v<T, PartitionOp>) {
          if (o.out.capacity < o.in.rows)
            throw RuntimeError("partition: output holds " + std::to_string(o.out.capacity) + " rows, input has " +
                               std::to_string(o.in.rows));
          std::vector<uint64_t> seg = o.in_segments.empty() ? std::vector<uint64_t>{0, o.in.rows} : o.in_segments;
          auto layout = std::make_shared<SplitLayout>();
          layout->fn = o.fn;
          layout->offsets.push_back(0);
          for (size_t s = 0; s + 1 < seg.size(); ++s) {
            ContentPtr parent = content_or_unknown(o.in.slice(seg[s], seg[s + 1] - seg[s]));
            for (uint64_t n : split_counts(*parent, o.fn)) layout->offsets.push_back(layout->offsets.back() + n);
            layout->parents.push_back(std::move(parent));
          }
          r.values = layout->offsets;
          if (o.out.keys)
            sim_buffer(o.out.keys).regions.write_split(o.out.offset * o.out.fmt.key_bytes, o.out.fmt.key_bytes, layout);
        } else if constexpr (std::is_same_v<T, BuildOp>) {
          o.table->rows = o.in.rows;
          const Buffer& tb = o.table->kind == TableKind::HashRowId ? o.table->heads : o.table->keys;  // the slots
          if (tb) sim_buffer(tb).table = content_or_unknown(o.in);
        } else if constexpr (std::is_same_v<T, ProbeOp>) {
          const Buffer& tb = o.table->kind == TableKind::HashRowId ? o.table->heads : o.table->keys;
          ContentPtr t = tb ? sim_buffer(tb).table : nullptr;
          join_result(r, t ? expected_matches(*t, *content_or_unknown(o.probe)) : 0.0, o.out, o.out_first, o.mode);
        } else if constexpr (std::is_same_v<T, PartitionedJoinOp>) {
          auto whole = [](const Partitioned& p) {
            return p.offsets.empty() ? p.all : p.all.slice(p.offsets.front(), p.offsets.back() - p.offsets.front());
          };
          // Matching keys share a partition, so the sum over partition pairs is the whole join.
          join_result(r, expected_matches(*content_or_unknown(whole(o.r)), *content_or_unknown(whole(o.s))), o.out,
                      o.out_first, o.mode);
        } else if constexpr (std::is_same_v<T, SortOp>) {
          Tuples out = o.out;
          out.rows = o.in.rows;
          write_keys(out, sorted_content(content_or_unknown(o.in), o.buckets));
        } else if constexpr (std::is_same_v<T, MergeJoinOp>) {
          join_result(r, expected_matches(*content_or_unknown(o.r), *content_or_unknown(o.s)), o.out, o.out_first, o.mode);
        } else if constexpr (std::is_same_v<T, ChecksumOp>) {
          r.count = o.rows;
          r.checksum = 0;
        } else if constexpr (std::is_same_v<T, LinkAccessOp>) {
          check_link_access(o);
          r.count = o.bytes * (o.access == LinkAccess::Both ? 2 : 1);
        } else if constexpr (std::is_same_v<T, ChunkPartitionOp>) {
          check_chunk_partition(o);
          // offsets_on_device: the partitions' starts in the cache (all chunks are cached), below.
          if (o.offsets_on_device) r.values.assign(size_t(o.fn.fanout()) + 1, 0);
          // Each output is partition-major over its chunks: the split of their union, in one region.
          // Offsets from the host or a scan on the device give the same layout.
          for (const bool cached : {true, false}) {
            const size_t b = cached ? 0 : o.cached_chunks, e = cached ? o.cached_chunks : o.chunks.size();
            if (b == e) continue;
            std::vector<ContentPtr> parts;
            for (size_t c = b; c < e; ++c) parts.push_back(content_or_unknown(o.chunks[c]));
            auto layout = std::make_shared<SplitLayout>();
            layout->fn = o.fn;
            layout->parents.push_back(merge_contents(parts));
            layout->offsets.push_back(0);
            for (uint64_t n : split_counts(*layout->parents[0], o.fn)) layout->offsets.push_back(layout->offsets.back() + n);
            const Tuples& out = cached ? o.cache : o.spill;
            if (out.capacity < layout->offsets.back())
              throw RuntimeError(std::string("chunk partition: ") + (cached ? "the cache" : "the spill buffer") + " holds " +
                                 std::to_string(out.capacity) + " rows, " + std::to_string(layout->offsets.back()) +
                                 " are written");
            if (out.keys) sim_buffer(out.keys).regions.write_split(out.offset * out.fmt.key_bytes, out.fmt.key_bytes, layout);
            r.count += layout->offsets.back();
            if (o.offsets_on_device) r.values = layout->offsets;
          }
        } else if constexpr (std::is_same_v<T, MultiwayMergeOp>) {
          std::vector<ContentPtr> parts;
          Tuples out = o.out;
          out.rows = 0;
          for (const Tuples& t : o.runs) parts.push_back(content_or_unknown(t)), out.rows += t.rows;
          if (out.capacity < out.rows)
            throw RuntimeError("multiway merge: out holds " + std::to_string(out.capacity) + " rows, the runs have " +
                               std::to_string(out.rows));
          if (!parts.empty()) write_keys(out, merge_sorted(parts));
          r.count = out.rows;
        } else if constexpr (std::is_same_v<T, MergeOp>) {
          Tuples out = o.out;
          out.rows = o.a.rows + o.b.rows;
          write_keys(out, merge_sorted({content_or_unknown(o.a), content_or_unknown(o.b)}));
          r.count = out.rows;
        } else if constexpr (std::is_same_v<T, CompressOp>) {
          check_compress(o);
          const uint32_t vb = o.value_bytes;
          r.values.assign(1, 0);
          std::vector<std::pair<uint64_t, ContentPtr>> kept;
          for (size_t i = 0; i < o.in.size(); ++i) {
            const CodecColumn& c = o.in[i];
            // A column without key content (values) stays without it where it is decompressed.
            ContentPtr content = c.buf ? sim_buffer(c.buf).regions.read(c.first * vb, (c.first + c.rows) * vb) : nullptr;
            r.values.push_back(r.values.back() + estimated_compressed_bytes(content ? *content : *unknown_content(c.rows),
                                                                             c.rows, vb, o.configs[i], o.chunk_log2));
            kept.push_back({c.rows, std::move(content)});
          }
          r.count = r.values.back();
          if (o.out)
            for (size_t i = 0; i < kept.size(); ++i) sim_buffer(o.out).compressed[r.values[i]] = kept[i];
        } else if constexpr (std::is_same_v<T, StarGenerateOp>) {
          write_keys(o.out, unknown_content(o.out.rows));  // lineorder keys hash evenly over partitions
          r.count = o.out.rows;
        } else if constexpr (std::is_same_v<T, StarProbeOp>) {
          check_star_probe(o);
          r.count = rounded(double(o.in.rows) * star_pass_fraction(o));
        } else if constexpr (std::is_same_v<T, DecompressOp>) {
          check_decompress(o);
          r.values.clear();
          r.count = 0;
          for (size_t b = 0; b < o.out.size(); ++b) {
            const auto& map = sim_buffer(o.in).compressed;
            auto it = map.find(o.offsets[b]);
            if (it == map.end())
              throw RuntimeError("decompress: buffer " + std::to_string(b) + " (byte " + std::to_string(o.offsets[b]) +
                                 "): the simulator saw no CompressOp write it into this buffer, nor a message or "
                                 "copy bring it");
            const auto& [rows, content] = it->second;
            if (rows > o.out[b].rows) throw RuntimeError(cpu::codec_error_message(codec::kNoRoom, b, 0, rows));
            if (o.out[b].buf && rows && content)
              sim_buffer(o.out[b].buf).regions.write(o.out[b].first * o.value_bytes, o.value_bytes, content);
            r.values.push_back(rows);
            r.count += rows;
          }
        }
      },
      op);
}

// How a probe's (a merge join's) lookups spread over the table's (R's) keys: the probe side's
// content, for the cost models' cache terms (skewed keys hit a few hot, cached ones).
KeyAccess lookup_access(const Op& op) {
  if (auto* p = std::get_if<ProbeOp>(&op)) return key_access(*content_or_unknown(p->probe));
  if (auto* m = std::get_if<MergeJoinOp>(&op)) return key_access(*content_or_unknown(m->s));
  if (auto* so = std::get_if<SortOp>(&op)) return key_access(*content_or_unknown(so->in));  // MSD sort's hot partitions
  return {};
}

bool in_host_memory(const Buffer& b) { return b && b->space != MemSpace::Device; }
// Where a table's inserts and lookups land: a chained table's heads, an open-addressing one's keys.
Buffer table_slots(const HashTable* t) { return !t ? Buffer{} : t->kind == TableKind::Chained ? t->heads : t->keys; }

// Where an operator runs: on the node's CPU when the data it writes (or reads) is host memory.
bool on_host(const Op& op) {
  auto pageable = [](const Buffer& b) { return b && b->space == MemSpace::Host; };
  auto on_device = [](const HashTable* t) {
    const Buffer b = table_slots(t);
    return b && b->space == MemSpace::Device;
  };
  return std::visit(
      [&](const auto& o) -> bool {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GenerateOp>) return in_host_memory(o.out.keys);
        else if constexpr (std::is_same_v<T, GeneratePayloadOp>) return in_host_memory(o.out);
        else if constexpr (std::is_same_v<T, ChunkPartitionOp> || std::is_same_v<T, LinkAccessOp>)
          return false;  // a kernel, over the link
        else if constexpr (std::is_same_v<T, MultiwayMergeOp>) return true;  // the host's CPUs on every backend
        else if constexpr (std::is_same_v<T, HistogramOp>)
          return o.placement == HistogramOp::Placement::Auto ? in_host_memory(o.in.keys)
                                                             : o.placement == HistogramOp::Placement::Host;
        // A table's build and probe run where a GPU would run them (cuda_ops.hpp runs_on_host):
        // on the host's CPUs over pageable memory, as a kernel over device or pinned memory (a
        // pinned table or input is reached over the link: link_bytes).
        else if constexpr (std::is_same_v<T, BuildOp>) return pageable(o.in.keys) && !on_device(o.table);
        else if constexpr (std::is_same_v<T, ProbeOp>) return pageable(o.probe.keys) && !on_device(o.table);
        else if constexpr (std::is_same_v<T, HistogramOp> || std::is_same_v<T, PartitionOp> || std::is_same_v<T, SortOp>)
          return in_host_memory(o.in.keys);
        else if constexpr (std::is_same_v<T, PartitionedJoinOp>) return in_host_memory(o.s.all.keys);
        else if constexpr (std::is_same_v<T, MergeJoinOp>) return in_host_memory(o.s.keys);
        else if constexpr (std::is_same_v<T, GatherOp>) return in_host_memory(o.out);
        else if constexpr (std::is_same_v<T, ChecksumOp>) return in_host_memory(o.keys);
        else if constexpr (std::is_same_v<T, MergeOp>) return in_host_memory(o.out.keys);
        else if constexpr (std::is_same_v<T, PivotSearchOp>) return in_host_memory(o.x);
        else if constexpr (std::is_same_v<T, CompressOp>) return in_host_memory(o.out);
        else if constexpr (std::is_same_v<T, DecompressOp>) return in_host_memory(o.in);
        else if constexpr (std::is_same_v<T, StarGenerateOp>) return in_host_memory(o.out.keys);
        else if constexpr (std::is_same_v<T, StarProbeOp>) return in_host_memory(o.in.keys) && in_host_memory(o.groups);
        else return in_host_memory(o.in);
      },
      op);
}



// What a kernel moves over the link to and from host memory: bytes read from pinned inputs and
// written to pinned outputs, each scaled by the link's full rate over its rate at the kernel's
// access granularity (small scattered accesses occupy the link as long as the same bytes at that
// rate would); writes also take the other direction for write_reverse_cost's bytes each, which
// slows host-to-device copies beside them. Partitioners read their chunks in order; their writes
// run at their measured rate (or are their flushes).
struct LinkBytes {
  double read = 0, written = 0;
};
LinkBytes link_bytes(const Op& op, const OpResult& result, const LinkSpec& h2d, const LinkSpec& d2h) {
  auto slowdown = [](const LinkSpec& l, double granule) {
    const double rate = l.access_rate(granule);
    return rate > 0 && l.bw > 0 ? l.bw / rate : 1.0;
  };
  const double sequential_read = slowdown(h2d, kLinkSequentialGranule);
  LinkBytes l;
  auto write = [&](double bytes, double granule) {
    l.written += bytes * slowdown(d2h, granule);
    l.read += bytes * write_reverse_cost(h2d, d2h, granule);
  };
  if (auto* h = std::get_if<HistogramOp>(&op); h && h->placement == HistogramOp::Placement::Device && in_host_memory(h->in.keys))
    l.read = double(histogram_rows(*h)) * h->in.fmt.key_bytes * sequential_read;
  if (auto* c = std::get_if<ChunkPartitionOp>(&op)) {
    // Its writes: accesses of the granule that runs at the partitioner's measured rate into pinned
    // memory at its fanout (the profile's table), else of its flushes' size.
    const double rate = fanout_rate(d2h.partitioner_rate[c->partitioner == Partitioner::Hierarchical ? 1 : 0],
                                    c->fn.fanout());
    const double granule = rate > 0 ? equivalent_granule(d2h, rate) : link_write_granule(*c);
    for (size_t i = 0; i < c->chunks.size(); ++i) {
      const double bytes = double(c->chunks[i].rows) * c->chunks[i].fmt.tuple_bytes();
      if (in_host_memory(c->chunks[i].keys)) l.read += bytes * sequential_read;
      if (in_host_memory(i < c->cached_chunks ? c->cache.keys : c->spill.keys)) write(bytes, granule);
    }
  }
  // A hash table in host memory: each insert writes, each lookup reads, a slot's key and value
  // (columns apart: accesses of their widths) at a random position; inputs are read in order.
  auto table_bytes = [&](const HashTable* t, const Tuples& in, bool build) {
    const Buffer b = table_slots(t);
    if (in_host_memory(in.keys)) l.read += double(in.rows) * in.fmt.tuple_bytes() * sequential_read;
    if (!in_host_memory(b)) return;
    const double bytes = double(in.rows) * t->fmt.tuple_bytes();
    if (build) write(bytes, t->fmt.key_bytes);
    else l.read += bytes * slowdown(h2d, t->fmt.key_bytes);
  };
  // A join kernel writing its rows into pinned memory (mgsmj's row ranges, triton's and chunked's
  // pinned output) moves them over the link, in order: each of its `count` rows, key and values.
  auto output_bytes = [&](const JoinOutput& out, OutputMode mode) {
    if (mode == OutputMode::CountOnly || !in_host_memory(out.keys)) return;
    write(double(result.count) * (out.r_fmt.key_bytes + out.r_fmt.val_bytes + out.s_fmt.val_bytes),
          kLinkSequentialGranule);
  };
  if (auto* j = std::get_if<ProbeOp>(&op)) output_bytes(j->out, j->mode);
  if (auto* j = std::get_if<PartitionedJoinOp>(&op)) output_bytes(j->out, j->mode);
  if (auto* j = std::get_if<MergeJoinOp>(&op)) output_bytes(j->out, j->mode);
  if (auto* b = std::get_if<BuildOp>(&op)) table_bytes(b->table, b->in, true);
  if (auto* p = std::get_if<ProbeOp>(&op)) table_bytes(p->table, p->probe, false);
  if (auto* a = std::get_if<LinkAccessOp>(&op); a && in_host_memory(a->host)) {
    const double granule = a->random ? double(a->granule) : kLinkSequentialGranule;
    if (a->access != LinkAccess::Write) l.read += double(a->bytes) * slowdown(h2d, granule);
    if (a->access != LinkAccess::Read) write(double(a->bytes), granule);
  }
  return l;
}

// The [cpu] rate an operator on host memory runs at.
const char* cpu_op_kind(const Op& op) {
  return std::visit(
      [](const auto& o) -> const char* {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, GenerateOp> || std::is_same_v<T, GeneratePayloadOp> ||
                      std::is_same_v<T, StarGenerateOp>)
          return "generate";
        else if constexpr (std::is_same_v<T, HistogramOp>) return "histogram";
        else if constexpr (std::is_same_v<T, PartitionOp>) return "partition";
        else if constexpr (std::is_same_v<T, BuildOp>) return "build";
        else if constexpr (std::is_same_v<T, ProbeOp> || std::is_same_v<T, StarProbeOp>) return "probe";
        else if constexpr (std::is_same_v<T, PartitionedJoinOp>) return "join";
        else if constexpr (std::is_same_v<T, SortOp>) return "sort";
        else if constexpr (std::is_same_v<T, MergeJoinOp>) return "merge";
        else if constexpr (std::is_same_v<T, GatherOp>) return "gather";
        else if constexpr (std::is_same_v<T, ChecksumOp>) return "checksum";
        else if constexpr (std::is_same_v<T, ChunkPartitionOp>) return "partition";
        else if constexpr (std::is_same_v<T, MultiwayMergeOp> || std::is_same_v<T, MergeOp>) return "multiway_merge";
        else return "scan";  // the scan, pivot search and (de)compression: a pass over the bytes
      },
      op);
}

// PackChunksOp without data: chunk image i gets, at its first byte, the keys of its rows (the
// slice of its partition), which its put carries to the receiver's ring slot.
void evaluate_pack(const PackChunksOp& op, OpResult& r) {
  check_pack_plan(op);
  const size_t fanout = op.rows.size();
  const uint64_t slot = chunk_slot_bytes(op.in.fmt, op.slot_rows);
  // partition_by: the rows of partition p are its pieces of the input's split, as PartitionOp
  // would write them, which the images are cut from; with in_slices, each slice's rows of it are
  // the sliced histogram's (split_slices, as HistogramOp::in_segments counts them).
  std::vector<ContentPtr> partitions;
  std::vector<uint64_t> totals;
  if (op.partition_by) {
    std::vector<uint64_t> slices{0, op.in.rows};
    if (!op.in_slices.empty()) slices = op.in_slices;
    if (op.partition_by->fanout() != fanout)
      throw RuntimeError("pack_chunks: " + std::to_string(fanout) + " row counts for a fanout of " +
                         std::to_string(op.partition_by->fanout()));
    SlicedSplit split = split_slices(op.in, *op.partition_by, slices, true);
    if (!op.in_slices.empty())
      for (size_t i = 0; i < split.counts.size(); ++i)
        if (split.counts[i] != op.slice_rows[i])
          throw RuntimeError("pack_chunks: slice " + std::to_string(i / fanout) + " has " +
                             std::to_string(split.counts[i]) + " rows of partition " + std::to_string(i % fanout) +
                             ", its counts say " + std::to_string(op.slice_rows[i]));
    partitions = std::move(split.parts);
    totals = std::move(split.totals);
    r.values.assign(1, 0);
    for (size_t p = 0; p < fanout; ++p) {
      if (totals[p] != op.rows[p])
        throw RuntimeError("pack_chunks: partition " + std::to_string(p) + " has " + std::to_string(totals[p]) +
                           " rows of the input, the plan says " + std::to_string(op.rows[p]));
      r.values.push_back(r.values.back() + totals[p]);
    }
  }
  uint64_t image = 0;
  for (size_t p = 0; p < fanout; ++p) {
    for (uint64_t first = 0; first < op.rows[p]; first += op.slot_rows, ++image) {
      const uint64_t n = std::min(op.slot_rows, op.rows[p] - first);
      const uint64_t at = image * slot;
      if (!op.out || at + chunk_bytes(op.in.fmt.key_bytes, op.in.fmt.val_bytes, op.slot_rows, n) > op.out->bytes)
        throw RuntimeError("pack_chunks: chunk image " + std::to_string(image) + " does not fit buffer '" +
                           (op.out ? op.out->tag : "null") + "' of " + std::to_string(op.out ? op.out->bytes : 0) +
                           " bytes");
      ContentPtr keys = op.partition_by ? slice_content(partitions[p], first, first + n)
                        : op.in.keys ? read_keys(op.in.slice(op.begin[p] + first, n)) : nullptr;
      sim_buffer(op.out).regions.write(at, op.in.fmt.key_bytes, keys ? keys : unknown_content(n));
    }
  }
  r.count = image;
}

// --- SimRank ---------------------------------------------------------------------------------

SimRank::SimRank(SimWorld& w, int id, ClusterShape shape) : Rank(id, shape), world_(w) {
  const uint64_t device = w.device_memory ? w.device_memory : uint64_t(w.profile.gpu.memory);
  const uint64_t host = uint64_t(w.profile.host.memory / std::max(1, shape.per_node));
  account_ = std::make_shared<MemoryAccount>(id, device, host);
}

int SimRank::streams() const { return world_.profile.gpu.streams; }
int SimRank::host_of(int rank) const { return world_.platform.shape.node_of(rank); }

SimStream& SimRank::stream(int s, bool internal) {
  if (s < 0 || s > streams() || (s == streams() && !internal))
    throw RuntimeError("rank " + std::to_string(id()) + ": stream " + std::to_string(s) + " does not exist (the sim backend gives " +
                       std::to_string(streams()) + " streams, 0.." + std::to_string(streams() - 1) + ")");
  if (s >= 64) throw RuntimeError("the sim backend keeps at most 63 streams per rank");
  if (size_t(s) >= streams_.size()) streams_.resize(size_t(s) + 1);
  if (!streams_[size_t(s)]) {
    active_.push_back(s);
    streams_[size_t(s)] = std::make_unique<SimStream>();
    streams_[size_t(s)]->last = std::make_shared<SimEvent>(this);
    streams_[size_t(s)]->last->complete();
  }
  return *streams_[size_t(s)];
}

// Work is only queued here; it starts when the rank next waits (at the same simulated time),
// which lets back-to-back sends to one peer leave as one transfer.
Event SimRank::enqueue(int s, Item item, bool internal) {
  SimStream& st = stream(s, internal);
  item.done = std::make_shared<SimEvent>(this);
  st.last = item.done;
  Event e(item.done);
  st.queue.push_back(std::move(item));
  live_ |= uint64_t(1) << s;
  return e;
}

void SimRank::ring() {
  flag_changed_ = true;
  changes_++;
  dirty = true;
  if (!blocked_ || (!suspended_ && (!bell_ || rung_))) return;
  // Runnable from now on (deadlock accounting), before the resume: from another actor, resuming
  // is a simcall, during which this rank may run and block again.
  blocked_ = false;
  world_.blocked--;
  if (suspended_) {
    suspended_ = false;
    actor->resume();
  } else {
    rung_ = true;
    waking_ = true;  // it runs in a later round of this instant (once the bell's execution ends)
    world_.waking++;
    bell_->resume();
  }
}

// Counts this rank as blocked; nothing in flight anywhere and every rank blocked is a deadlock.
void SimRank::block(const char* what) {
  blocked_ = true;
  blocked_on_ = what;
  world_.blocked++;
  if (world_.deadlocked()) {
    world_.fail(1, world_.deadlock_report());
    throw SimulationAborted{};
  }
  world_.stats.waits++;
}

void SimRank::block_until(const std::function<bool()>& pred, const char* what, sg4::ActivityPtr* extra) {
  for (;;) {
    if (world_.aborting) throw SimulationAborted{};
    flag_changed_ = false;
    pump();
    if (pred()) return;
    std::vector<sg4::ActivityPtr>& set = wait_set_;
    std::vector<int>& who = wait_who_;  // stream index, or -1 for the bell, -2 for `extra`
    set.clear();
    who.clear();
    for (int i : active_)
      if ((live_ >> i & 1) && streams_[size_t(i)]->state == SimStream::Busy && streams_[size_t(i)]->activity) {
        set.push_back(streams_[size_t(i)]->activity);
        who.push_back(i);
      }
    const bool own = !set.empty() || (extra && *extra) || (consumer_ && (consumer_->exec || consumer_->flush));
    if (!own && !bell_) {
      // Nothing of its own in flight: the actor suspends itself until another one (or maestro:
      // a merged flow ended) rings. One simcall, where a bell takes three and the ringer's one.
      // (Suspending an actor suspends its activities, hence only when it has none: a leftover
      // bell is waited for below.)
      block(what);
      suspended_ = true;
      sg4::this_actor::suspend();
      blocked_on_ = nullptr;
      continue;
    }
    if (!bell_) {  // published only once suspended: a ring before that would be lost
      sg4::ExecPtr bell = sg4::Exec::init()->set_flops_amount(0)->set_host(world_.platform.gpus[size_t(id())]);
      bell->start();
      bell->suspend();
      rung_ = false;
      bell_ = bell;
    }
    if (flag_changed_) continue;  // rung while the bell was being set up
    set.push_back(bell_);
    who.push_back(-1);
    if (extra && *extra) {
      set.push_back(*extra);
      who.push_back(-2);
    }
    if (consumer_ && consumer_->exec) {
      set.push_back(consumer_->exec);
      who.push_back(-3);
    }
    if (consumer_ && consumer_->flush) {
      set.push_back(consumer_->flush);
      who.push_back(-4);
    }
    block(what);
    const ssize_t i = sg4::Activity::wait_any(set);
    if (waking_) {  // it runs: transfers of this instant that waited for it can leave
      waking_ = false;
      world_.waking--;
      if (world_.node_net) world_.node_net->poke();
    }
    if (blocked_) {
      blocked_ = false;
      world_.blocked--;
    }
    blocked_on_ = nullptr;
    const int fired = who[size_t(i)];
    set.clear();
    if (fired == -1) {
      bell_ = nullptr;
    } else if (fired == -2) {
      *extra = nullptr;
    } else if (fired == -3) {  // a consumer batch ended: pump() releases its chunks
      consumer_->exec = nullptr;
      consumer_->batch_done = true;
      world_.busy--;
    } else if (fired == -4) {  // a staging half reached host memory
      Consumer& c = *consumer_;
      c.flush = nullptr;
      world_.busy--;
      if (traced()) {
        OpParams p;
        p.kind = OpKind::Copy;
        p.bytes = std::min(c.flushing, c.op.out.capacity) * c.out_row_bytes();
        p.mem_src = int(MemSpace::Device);
        p.mem_dst = int(c.op.out.keys ? c.op.out.keys->space : MemSpace::Pinned);
        p.detail = "gpj output: staging -> host";
        span("link pcie d2h", p, c.flush_begin, sg4::Engine::get_clock());
      }
      c.copied += c.flushing;
      c.flushing = 0;
    } else {
      SimStream& st = *streams_[size_t(fired)];
      st.activity = nullptr;
      if (st.next) {
        auto next = std::move(st.next);
        st.next = nullptr;
        next();
      }
      // A continuation may leave the stream waiting for a receiver (a rendezvous send).
      if (!st.activity && !st.transfer && st.state == SimStream::Busy) finish(st, fired);
    }
  }
}

void SimRank::pump() {
  for (bool progress = true; progress || dirty;) {
    progress = false;
    // Receives wait for other ranks: look at them only when a message was posted or arrived.
    const bool messages = dirty;
    dirty = false;
    for (int i : active_) {
      if (!(live_ >> i & 1)) continue;
      SimStream* st = streams_[size_t(i)].get();
      if (st->state == SimStream::AwaitReceiver && st->outgoing.front()->waiter) {
        start_send(*st);
        progress = true;
      }
      if (st->state == SimStream::AwaitEngine) {
        CopyEngine& e = engines_[st->engine];
        if (!e.busy && e.waiting.front() == i) {
          e.busy = true;
          e.waiting.pop_front();
          start_copy_flow(*st);
          progress = true;
        }
      }
      if ((st->state == SimStream::AwaitEvent && st->running.front().wait_for->done()) ||
          (messages && st->state == SimStream::AwaitMessage && try_recv(*st)) ||
          (st->state == SimStream::Consuming && consume()) ||
          (st->state == SimStream::Busy && st->transfer && st->transfer->done)) {
        finish(*st, i);
        progress = true;
      }
      while (st->state == SimStream::Idle && !st->queue.empty()) {
        start(*st, i);
        progress = true;
      }
      if (st->state == SimStream::Idle) live_ &= ~(uint64_t(1) << i);
    }
  }
}

void SimRank::start_send(SimStream& st) {
  uint64_t total = 0;
  for (auto& s : st.running) total += s.bytes;
  st.begin = sg4::Engine::get_clock();
  start_transfer(st, st.running.front().peer, total);
  if (st.transfer) st.transfer->messages = &st.outgoing;
}

void SimRank::start_transfer(SimStream& st, int dst, uint64_t bytes) {
  world_.stats.transfers++;
  st.state = SimStream::Busy;
  world_.busy++;
  st.track = world_.link_track(id(), dst);
  if (dst == id()) {  // a rank's message to itself is a copy inside its memory
    st.activity = world_.start_exec(world_.platform.gpus[size_t(id())],
                                    world_.profile.ops.seconds(device_copy_sample(bytes)));
  } else if (world_.node_net) {
    st.node_transfer = Transfer{false, this, id(), dst, bytes, nullptr};
    st.transfer = &st.node_transfer;
    world_.node_net->add(st.transfer);
  } else {
    world_.stats.flows++;
    st.activity = sg4::Comm::sendto_async(world_.platform.gpus[size_t(id())], world_.platform.gpus[size_t(dst)],
                                          std::max<uint64_t>(bytes, 1));
  }
}

// A put inside a node whose source or window is host memory goes over PCIe (or stays in host
// memory), not over NVLink; between nodes it leaves through the rank's NIC as any transfer.
void SimRank::start_put_transfer(SimStream& st, int peer, uint64_t bytes, bool src_host, bool dst_host) {
  if (!src_host && !dst_host) return start_transfer(st, peer, bytes);
  if (host_of(peer) != host_of(id())) {
    start_transfer(st, peer, bytes);
    // The NIC's DMA reads (writes) host memory: with [cpu] and per-pair flows, the bytes also
    // cross the memory link of each host end, at up to the NIC's rate, so they take their share
    // of the roof from the CPU operators there (the put ends when the network and they are done).
    if (!world_.profile.cpu.present() || !st.activity) return;
    std::vector<sg4::ActivityPtr> dma;
    for (int end : {src_host ? id() : -1, dst_host ? peer : -1})
      if (end >= 0) dma.push_back(start_memory_flow(cpu_host(end), double(bytes), world_.profile.nic.bw));
    return then_wait(st, std::move(dma));
  }
  const Platform& pf = world_.platform;
  world_.stats.transfers++;
  if (src_host && dst_host) {
    st.track = "link host memory";
    return start_cpu_work(st, "copy", double(bytes), 2.0 * double(bytes));
  }
  st.state = SimStream::Busy;
  world_.busy++;
  st.track = src_host ? "link pcie h2d" : "link pcie d2h";
  world_.stats.flows++;
  // The host side is the memory domain of the GPU end (the one with a PCIe route to it).
  st.activity = sg4::Comm::sendto_async(src_host ? cpu_host(peer) : pf.gpus[size_t(id())],
                                        dst_host ? cpu_host(id()) : pf.gpus[size_t(peer)],
                                        std::max<uint64_t>(bytes, 1));
}

sg4::Host* SimRank::cpu_host(int rank) const { return world_.platform.cpus[size_t(world_.platform.cpu_of(rank))]; }

sg4::ActivityPtr SimRank::start_memory_flow(sg4::Host* host, double bytes, double rate) {
  world_.stats.flows++;
  sg4::CommPtr m = sg4::Comm::sendto_init();
  // 3.32 ignores s4u::Comm::set_rate for host-to-host comms: the kernel's CommImpl::set_rate (above).
  reinterpret_cast<simgrid::kernel::activity::CommImpl*>(m->get_impl())->set_rate(rate);
  m->set_payload_size(std::max<uint64_t>(uint64_t(bytes), 1));
  m->set_source(host);
  m->set_destination(host);  // starts it
  return m;
}

void SimRank::after_software_cost(SimStream& st, double seconds, std::function<void()> start) {
  if (seconds <= 0) return start();
  st.state = SimStream::Busy;
  world_.busy++;
  st.activity = world_.start_timer(seconds);
  st.next = [this, start = std::move(start)] {
    world_.busy--;  // the transfer counts itself
    start();
  };
}

// With [cpu]: an execution of the operator's compute (bytes / per-core rate, on `threads` cores of
// the domain's multicore host, which its concurrent operators share) and, at once, a flow of its
// memory traffic over the domain's memory link (its route to itself), capped at the rate its
// compute alone would draw, so that a compute-bound operator spreads its traffic over its whole
// time; other operators' flows and PCIe DMA share that link (max-min). It ends when both end:
// max(compute on its cores, traffic over its share of the roof).
void SimRank::start_cpu_work(SimStream& st, const std::string& kind, double bytes, double traffic) {
  st.state = SimStream::Busy;
  world_.busy++;
  const CpuSpec& cpu = world_.profile.cpu;
  sg4::Host* host = cpu_host(id());
  if (!cpu.present()) {
    st.activity = world_.start_exec(host, traffic / world_.profile.host.mem_bw);
    return;
  }
  const Platform& pf = world_.platform;
  const int cores = host->get_core_count(), ranks_here = std::max(1, pf.ranks_in_domain(pf.cpu_of(id())));
  int threads = std::clamp(world_.options.threads > 0 ? world_.options.threads : cores / ranks_here, 1, cores);
  // A copy in host memory (a put between CPU ranks, a host copy) is the cpu backend's
  // parallel_copy: one thread per MiB up to the rank's threads (a chunk's put is one memcpy).
  if (kind == "copy") threads = cpu::copy_team(uint64_t(bytes), threads);
  // Each thread at the per-core rate for the domain's load: the domain's ranks run their
  // operators at once (they run the same phases), so at least threads x ranks of the domain are
  // busy, and more where other CPU work runs beside it (a put's copy while the senders partition
  // on every core runs at the loaded rate, not at the rate of its few threads alone). A copy
  // takes the copy rate of that many threads (CpuSpec::copy_rate, measured with every thread
  // copying): on a 64-core host crj's puts ran at a third of their rate alone while the senders
  // partitioned on every core, and at their own threads' rate once the partitions were done.
  const size_t domain = size_t(pf.cpu_of(id()));
  int& domain_threads = (*world_.cpu_threads)[domain];
  const bool copy = kind == "copy";
  const int busy = std::min(cores, std::max(threads * ranks_here, threads + domain_threads));
  domain_threads += threads;
  st.cpu_threads = threads;
  const double core_seconds = bytes / (copy ? cpu.copy_thread_rate(busy, cores) : cpu.per_thread_rate(kind, busy, cores, threads));
  // A parallel operator's region (start, join, its slowest thread) on top (CpuSpec::op_overhead).
  const double overhead = copy ? 0.0 : cpu.operator_overhead(threads);
  // A threaded execution's amount is each thread's (SimGrid runs thread_count x amount at up to
  // thread_count cores).
  auto exec = sg4::Exec::init()
                  ->set_flops_amount((core_seconds / threads + overhead) * kWorkPerSecond)
                  ->set_host(host)
                  ->set_thread_count(threads);
  exec->start();
  st.activity = exec;
  then_wait(st, {start_memory_flow(host, traffic, traffic / (core_seconds / threads))});
}

void SimRank::then_wait(SimStream& st, std::vector<sg4::ActivityPtr> rest) {
  st.next = [this, &st, rest = std::move(rest)]() mutable {
    while (!rest.empty() && rest.back()->get_state() == sg4::Activity::State::FINISHED) rest.pop_back();
    if (rest.empty()) return;
    st.activity = rest.back();
    rest.pop_back();
    then_wait(st, std::move(rest));
  };
}

// A copy's ends: a GPU, or a host side's memory domain, that of the GPU at the other end (its
// PCIe route), else its owner's.
std::pair<sg4::Host*, sg4::Host*> SimRank::copy_route(const Item& it) const {
  const Platform& pf = world_.platform;
  const bool src_dev = it.other->space == MemSpace::Device, dst_dev = it.buf->space == MemSpace::Device;
  sg4::Host* from = src_dev ? pf.gpus[size_t(it.other->owner)] : cpu_host(dst_dev ? it.buf->owner : it.other->owner);
  sg4::Host* to = dst_dev ? pf.gpus[size_t(it.buf->owner)] : cpu_host(src_dev ? it.other->owner : it.buf->owner);
  return {from, to};
}

// The running copy's transfer between its ends (over PCIe once it holds its copy engine).
void SimRank::start_copy_flow(SimStream& st) {
  const auto [from, to] = copy_route(st.running.front());
  world_.stats.flows++;
  st.activity = sg4::Comm::sendto_async(from, to, bytes_of(st.running));
  st.state = SimStream::Busy;
  world_.busy++;
}

// The device time of a GPU operator (its link bytes are costed apart). A link access has no
// device work of its own to model. A first pass's chunk partition into device memory (pieces of
// kDevicePieceRows) runs at the rate calibrate measured for that geometry by fanout
// (GpuSpec::chunk_partition_rate) where the profile has one; other operators by their models.
double SimRank::kernel_seconds(const Op& op, const OpSample& sample) const {
  if (std::holds_alternative<LinkAccessOp>(op)) return 0.0;
  const auto* c = std::get_if<ChunkPartitionOp>(&op);
  if (!c || c->chunks.empty() || in_host_memory(c->cache.keys) || c->cached_chunks < c->chunks.size())
    return world_.profile.ops.seconds(sample);
  double bytes = 0, rows = 0;
  for (const Tuples& t : c->chunks) bytes += double(t.rows) * t.fmt.tuple_bytes(), rows += double(t.rows);
  const double rate = fanout_rate(world_.profile.gpu.chunk_partition_rate, c->fn.fanout());
  if (rate <= 0 || rows > double(c->chunks.size()) * double(kDevicePieceRows))  // not the first pass's pieces
    return world_.profile.ops.seconds(sample);
  return bytes / rate;
}

// The share of the GPU the operator takes while it runs (GpuSpec::share, by its input bytes).
double SimRank::gpu_share(const Op& op) const {
  const OpParams p = params_of(op);
  return op_share(world_.profile.gpu, to_string(p.kind), double(p.rows_in) * (p.key_bytes + p.val_bytes));
}

void SimRank::start(SimStream& st, int index) {
  st.running.clear();
  st.running.push_back(std::move(st.queue.front()));
  st.queue.pop_front();
  st.begin = sg4::Engine::get_clock();
  Item& it = st.running.front();
  const Platform& pf = world_.platform;
  switch (it.kind) {
    case Item::Operator: {
      try {
        evaluate(*it.op, *it.result);
      } catch (const std::exception& e) {
        throw RuntimeError("rank " + std::to_string(id()) + ": " + it.describe() + ": " + e.what());
      }
      const KeyAccess access = lookup_access(*it.op);
      const OpSample sample = op_sample(*it.op, *it.result, access.empty() ? nullptr : &access);
      world_.stats.operators++;
      if (on_host(*it.op)) {
        // Host memory bandwidth counts bytes read + written: a partition pass reads and writes its input.
        const double bytes = sample_bytes(sample);
        const double traffic = bytes * (std::holds_alternative<PartitionOp>(*it.op) ? 2 : 1);
        if (traffic <= 0) return finish(st, index);
        // A multiway merge of more runs costs more per byte (CpuSpec::merge_runs).
        double work = bytes;
        if (const auto* m = std::get_if<MultiwayMergeOp>(&*it.op)) {
          int runs = 0;
          for (const Tuples& r : m->runs) runs += r.rows > 0;
          work *= world_.profile.cpu.merge_runs_factor(runs);
        }
        return start_cpu_work(st, cpu_op_kind(*it.op), work, traffic);
      }
      const double seconds = kernel_seconds(*it.op, sample);
      const LinkBytes link = link_bytes(*it.op, *it.result, world_.profile.h2d, world_.profile.d2h);
      if (seconds <= 0 && link.read + link.written <= 0) return finish(st, index);
      st.activity = world_.start_exec(pf.gpus[size_t(id())], std::max(seconds, 0.0), gpu_share(*it.op));
      st.state = SimStream::Busy;
      world_.busy++;
      // A kernel that reads or writes pinned host memory moves those bytes over the link while it
      // runs: it ends when its work and its transfers are done.
      std::vector<sg4::ActivityPtr> flows;
      if (link.read > 0) flows.push_back(sg4::Comm::sendto_async(cpu_host(id()), pf.gpus[size_t(id())], uint64_t(link.read)));
      if (link.written > 0)
        flows.push_back(sg4::Comm::sendto_async(pf.gpus[size_t(id())], cpu_host(id()), uint64_t(link.written)));
      world_.stats.flows += flows.size();
      if (!flows.empty()) then_wait(st, std::move(flows));
      return;
    }
    case Item::Copy: {  // buf = destination, other = source
      const bool src_dev = it.other->space == MemSpace::Device, dst_dev = it.buf->space == MemSpace::Device;
      const auto [from, to] = copy_route(it);
      // The rest of a batch (copy_v) between the same ends goes with it as one transfer: the copy
      // engine runs a batch's copies back to back (an H200 moved batches of 138 runs of ~120 KB
      // from pinned memory at 41 GB/s, where one copy each ran at 18); inside a GPU's memory the
      // batch is one kernel (CudaRank::copy_v).
      while ((from != to || (src_dev && dst_dev)) && !st.queue.empty() && st.queue.front().kind == Item::Copy &&
             st.queue.front().batched &&
             copy_route(st.queue.front()) == std::pair{from, to}) {
        st.running.push_back(std::move(st.queue.front()));
        st.queue.pop_front();
      }
      st.outgoing.clear();
      for (const Item& x : st.running) st.outgoing.push_back(message_of(x.other, x.other_off, x.bytes));
      const bool batched = st.running.front().batched;  // `it` moved when running grew
      const uint64_t bytes = bytes_of(st.running);
      world_.stats.transfers++;
      if (from == to && !src_dev) {  // inside host memory: the CPUs read and write it
        st.track = "link host memory";
        if (bytes == 0) return finish(st, index);
        return start_cpu_work(st, "copy", double(bytes), 2.0 * double(bytes));
      }
      if (from == to) {  // inside device memory: the copy reads and writes it
        st.track = "link device";
        const double seconds = world_.profile.ops.seconds(device_copy_sample(bytes));
        if (seconds <= 0) return finish(st, index);
        st.activity = world_.start_exec(from, seconds, op_share(world_.profile.gpu, "copy.device", double(bytes)));
      } else {
        if (bytes == 0) return finish(st, index);
        st.track = !src_dev ? "link pcie h2d" : !dst_dev ? "link pcie d2h" : "link p2p";
        // The copy engine's launch (msg.copy_seconds; a batch's once), then its turn on the
        // engine (pump() starts the transfer), across PCIe; between GPUs the transfer at once.
        const double launch = batched ? 0.0 : world_.profile.msg.copy_seconds;
        if (src_dev && dst_dev) return after_software_cost(st, launch, [this, &st] { start_copy_flow(st); });
        st.engine = src_dev ? 1 : 0;
        return after_software_cost(st, launch, [this, &st, index] {
          st.state = SimStream::AwaitEngine;
          engines_[st.engine].waiting.push_back(index);
          dirty = true;
        });
      }
      st.state = SimStream::Busy;
      world_.busy++;
      return;
    }
    case Item::Wait:
      if (it.wait_for->done()) return finish(st, index);
      st.state = SimStream::AwaitEvent;
      return;
    case Item::Streaming: {
      if (std::holds_alternative<StreamConsumeOp>(*it.sop)) return start_consumer(st, index);
      const PackChunksOp& pack = std::get<PackChunksOp>(*it.sop);
      try {
        evaluate_pack(pack, *it.result);
      } catch (const std::exception& e) {
        throw RuntimeError("rank " + std::to_string(id()) + ": " + it.describe() + ": " + e.what());
      }
      // The sender CPUs read the tuples (partitioned or not: partition_by scatters them straight
      // into the images) and write the images: one pass each way over host memory, whose
      // bandwidth the node's ranks share (their executions share its CPU host).
      const double bytes = double(pack.in.rows) * pack.in.fmt.tuple_bytes();
      world_.stats.operators++;
      if (bytes <= 0) return finish(st, index);
      return start_cpu_work(st, "pack", bytes, 2.0 * bytes);
    }
    case Item::Send: {
      // Back-to-back sends to one peer leave as one transfer of their sum.
      const int peer = it.peer;  // `it` moves when running grows
      while (!st.queue.empty() && st.queue.front().kind == Item::Send && st.queue.front().peer == peer &&
             st.running.size() < 64) {
        st.running.push_back(std::move(st.queue.front()));
        st.queue.pop_front();
      }
      uint64_t total = 0;
      st.outgoing.clear();
      for (auto& s : st.running) {
        MessagePtr m = message_of(s.ranges);
        world_.post(id(), s.peer, s.tag, m);
        st.outgoing.push_back(std::move(m));
        total += s.bytes;
      }
      // Rendezvous: the bytes move once the receiver runs the matching receive (NCCL's
      // send/recv, UCX's and MPI's rendezvous protocol for large messages), so a receiver takes
      // one sender's data at a time on each of its receiving streams.
      auto go = [this, &st, peer] {
        if (peer != id() && !st.outgoing.front()->waiter) {
          st.outgoing.front()->sender = this;
          st.state = SimStream::AwaitReceiver;
          return;
        }
        start_send(st);
      };
      // Each send's software cost (posting, progress, completion) before the bytes move.
      const MsgCost c = world_.profile.msg.of(world_.profile.msg.send, "send");
      return after_software_cost(st, double(st.running.size()) * c.seconds + double(total) * c.per_byte, go);
    }
    case Item::Recv:
      st.incoming = nullptr;
      st.state = SimStream::AwaitMessage;
      if (try_recv(st)) finish(st, index);
      return;
    case Item::Put: {
      // Back-to-back puts to one peer (chunks of its partitions, credits) leave as one transfer of
      // at most kPutBatchBytes and land in order when it ends: an RDMA NIC pipelines them on the
      // same path, and a receiver still sees the first ones land while later ones are in flight.
      // A put carries the keys annotated in its range (a chunk image: the keys between header and
      // values).
      constexpr uint64_t kPutBatchBytes = 1 << 20;
      const int peer = it.peer, window = it.window;
      const auto& peer_windows = world_.ranks[size_t(peer)]->windows_;
      auto space = [&](const Item& x) { return peer_windows[size_t(x.window)].buf->space; };
      const MemSpace dst_space = space(it);
      uint64_t batch = it.bytes;
      while (!st.queue.empty() && st.queue.front().kind == Item::Put && st.queue.front().peer == peer &&
             space(st.queue.front()) == dst_space && st.running.size() < 64 &&
             batch + st.queue.front().bytes <= kPutBatchBytes) {
        batch += st.queue.front().bytes;
        st.running.push_back(std::move(st.queue.front()));
        st.queue.pop_front();
      }
      uint64_t total = 0;
      st.outgoing.clear();
      for (auto& p : st.running) {
        if (!p.bytes) {  // flag-only (gpj's credits, millions): nothing lands but the flag
          st.outgoing.push_back(nullptr);
          continue;
        }
        auto m = std::make_shared<Message>();
        m->bytes = p.bytes;
        m->pieces.emplace_back().bytes = p.bytes;
        if (p.bytes && p.buf) m->pieces.back().spans = sim_buffer(p.buf).regions.spans(p.off, p.off + p.bytes);
        st.outgoing.push_back(std::move(m));
        total += p.bytes;
      }
      const Buffer& src = st.running.front().buf;
      const Buffer& dst = world_.ranks[size_t(peer)]->windows_[size_t(window)].buf;
      const bool src_host = !src || src->space != MemSpace::Device, dst_host = !dst || dst->space != MemSpace::Device;
      auto go = [this, &st, peer, total, src_host, dst_host] { start_put_transfer(st, peer, total, src_host, dst_host); };
      const MsgCost c = world_.profile.msg.of(world_.profile.msg.put, "put");
      return after_software_cost(st, double(st.running.size()) * c.seconds + double(total) * c.per_byte, go);
    }
  }
}

bool SimRank::try_recv(SimStream& st) {
  const Item& it = st.running.front();
  if (!st.incoming) st.incoming = world_.take(it.peer, id(), it.tag, this);
  if (!st.incoming || !st.incoming->arrived) return false;
  const Message& m = *st.incoming;
  auto sizes = [](const auto& v) {
    std::string s;
    for (auto& x : v) s += (s.empty() ? "" : " + ") + std::to_string(x.bytes);
    return s + " bytes";
  };
  bool same = m.pieces.size() == it.ranges.size();
  for (size_t i = 0; same && i < m.pieces.size(); ++i) same = m.pieces[i].bytes == it.ranges[i].bytes;
  if (!same)
    throw RuntimeError("rank " + std::to_string(id()) + ": the message from rank " + std::to_string(it.peer) + " tag " +
                       std::to_string(it.tag) + " has " + sizes(m.pieces) + " but the receive expects " +
                       sizes(it.ranges));
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    RegionMap& to = sim_buffer(it.ranges[i].buf).regions;
    land_compressed(m.pieces[i], sim_buffer(it.ranges[i].buf), it.ranges[i].off);
    if (m.pieces[i].partition) to.write_merging(it.ranges[i].off, m.pieces[i].key_bytes, m.pieces[i].partition);
    else if (m.pieces[i].content) to.write_merging(it.ranges[i].off, m.pieces[i].key_bytes, m.pieces[i].content);
  }
  return true;
}

void SimRank::finish(SimStream& st, int index) {
  const double end = sg4::Engine::get_clock();
  if (st.engine >= 0) {  // the copy engine's next copy may start
    engines_[st.engine].busy = false;
    st.engine = -1;
    dirty = true;
  }
  if (st.cpu_threads) {
    const size_t domain = size_t(world_.platform.cpu_of(id()));
    (*world_.cpu_threads)[domain] -= st.cpu_threads;
    st.cpu_threads = 0;
  }
  Item& it = st.running.front();
  const bool trace = traced();
  const std::string track = trace ? "stream " + std::to_string(index) : std::string();
  switch (it.kind) {
    case Item::Operator:
      if (trace) {
        OpParams p = params_of(*it.op);
        if (p.kind == OpKind::Probe || p.kind == OpKind::PartitionedJoin || p.kind == OpKind::MergeJoin)
          p.rows_out = it.result->count;
        if (on_host(*it.op)) p.detail += p.detail.empty() ? "on host" : ", on host";
        span(track, std::move(p), st.begin, end);
      }
      break;
    case Item::Copy: {
      for (size_t i = 0; i < st.running.size(); ++i) {  // one copy, or a batch's
        const Item& x = st.running[i];
        const Piece& m = st.outgoing[i]->pieces.front();
        uint32_t kb = 0;
        if (consumer_ && consumer_->op.copied_in && x.buf == consumer_->op.rings)
          copied_into_rings(x);
        else if (auto layout = sim_buffer(x.other).regions.split_at(x.other_off, x.other_off + x.bytes, &kb))
          sim_buffer(x.buf).regions.write_split(x.off, kb, std::move(layout));
        else if (m.content)
          sim_buffer(x.buf).regions.write(x.off, m.key_bytes, m.content);
        land_compressed(m, sim_buffer(x.buf), x.off);
      }
      if (trace) {
        OpParams p;
        p.kind = OpKind::Copy;
        p.bytes = bytes_of(st.running);
        p.mem_src = int(it.other->space);
        p.mem_dst = int(it.buf->space);
        p.detail = std::string(to_string(it.other->space)) + " -> " + to_string(it.buf->space);
        if (st.running.size() > 1) p.detail += ", " + std::to_string(st.running.size()) + " copies in a batch";
        span(track, p, st.begin, end);
        if (*st.track) span(st.track, p, st.begin, end);
      }
      break;
    }
    case Item::Send:
      for (auto& m : st.outgoing)
        if (!m->arrived) arrive(m);
      if (trace)
        for (size_t i = 0; i < st.running.size(); ++i) {
          OpParams p;
          p.kind = OpKind::Send;
          p.bytes = st.running[i].bytes;
          p.detail = "to rank " + std::to_string(it.peer) + " tag " + std::to_string(st.running[i].tag);
          if (st.running[i].ranges.size() > 1) p.detail += ", " + std::to_string(st.running[i].ranges.size()) + " ranges";
          if (st.running.size() > 1) p.detail += " (" + std::to_string(st.running.size()) + " sends in one transfer)";
          span(track, p, st.begin, end);
          if (i == 0) span(st.track, p, st.begin, end);
        }
      break;
    case Item::Recv:
      if (trace) {
        OpParams p;
        p.kind = OpKind::Recv;
        p.bytes = it.bytes;
        p.detail = "from rank " + std::to_string(it.peer) + " tag " + std::to_string(it.tag);
        if (it.ranges.size() > 1) p.detail += ", " + std::to_string(it.ranges.size()) + " ranges";
        span(track, p, st.begin, end);
      }
      break;
    case Item::Put:
      for (size_t i = 0; i < st.running.size(); ++i) {
        const Item& x = st.running[i];
        static const std::vector<RegionMap::Span> kNone;
        const std::vector<RegionMap::Span>& spans = st.outgoing[i] ? st.outgoing[i]->pieces.front().spans : kNone;
        world_.ranks[size_t(x.peer)]->land_put(x.window, x.other_off, x.bytes, spans, x.flag, x.value);
        if (trace) {
          OpParams p;
          p.kind = OpKind::Put;
          p.bytes = x.bytes;
          p.detail = "to rank " + std::to_string(x.peer) + " flag " + std::to_string(x.flag);
          if (st.running.size() > 1) p.detail += " (" + std::to_string(st.running.size()) + " puts in one transfer)";
          span(track, p, st.begin, end);
          if (i == 0) span(st.track, p, st.begin, end);
        }
      }
      break;
    case Item::Streaming:
      if (trace) {
        OpParams p = params_of(*it.sop);
        if (std::holds_alternative<PackChunksOp>(*it.sop)) p.detail += ", on host";
        else p.rows_out = it.result->count;
        span(track, std::move(p), st.begin, end);
      }
      break;
    case Item::Wait:
      break;
  }
  for (auto& r : st.running) r.done->complete();
  changes_++;
  if (st.state == SimStream::Busy) world_.busy--;
  st.running.clear();
  st.outgoing.clear();
  st.incoming = nullptr;
  st.transfer = nullptr;
  st.activity = nullptr;
  st.state = SimStream::Idle;
}

Buffer SimRank::alloc(MemSpace space, uint64_t bytes, const std::string& tag) {
  account_->reserve(space, bytes, tag);
  // The rank waits for its allocation (profiles without an allocation model: free); its
  // streams keep running meanwhile.
  const OpSample cost = alloc_sample(space, bytes);
  if (world_.profile.ops.has(cost.model)) wait_host(world_.profile.ops.seconds(cost), "an allocation");
  auto b = std::make_shared<SimBuffer>();
  b->bytes = bytes;
  b->space = space;
  b->owner = id();
  b->tag = tag;
  b->account = account_;
  return b;
}

void SimRank::strategy_phase_began() { wait_host(world_.profile.host.phase_seconds, "starting a phase"); }

void SimRank::wait_host(double seconds, const char* what) {
  if (seconds <= 0) return;
  sg4::ActivityPtr timer = world_.start_timer(seconds);
  world_.busy++;
  block_until([&] { return !timer; }, what, &timer);
  world_.busy--;
}

// A buffer dropped by the strategy (or by a finished operator holding its last reference) is
// paid at the rank's next synchronization: on the CUDA backend a release waits for the device
// (give_back_block), so a strategy that drops its inputs at the end of a phase pays that before
// the next phase starts, as here. Profiles without free models: nothing.
void SimRank::pay_releases() {
  for (;;) {
    const MemoryAccount::Released r = account_->take_released();
    double seconds = 0;
    for (int p = 0; p < 2; ++p) {
      if (!r.count[p]) continue;
      OpSample cost = free_sample(p == 0 ? MemSpace::Device : MemSpace::Host, r.bytes[p]);
      if (!world_.profile.ops.has(cost.model)) continue;
      cost.x[0] = double(r.count[p]);  // the constant once per release (the model is linear)
      seconds += world_.profile.ops.seconds(cost);
    }
    if (seconds <= 0) return;
    wait_host(seconds, "releasing buffers");  // streams finishing meanwhile may release more
  }
}

void SimRank::sync(Stream s) {
  record(s).wait();
  pay_releases();
}

void SimRank::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= size())
    throw RuntimeError("rank " + std::to_string(id()) + ": " + what + " peer " + std::to_string(peer) +
                       " does not exist (" + std::to_string(size()) + " ranks)");
}

void SimRank::check_range(const Buffer& b, uint64_t off, uint64_t bytes, const char* what) const {
  if (!b || off + bytes > b->bytes)
    throw RuntimeError("rank " + std::to_string(id()) + ": " + what + " of bytes [" + std::to_string(off) + ", " +
                       std::to_string(off + bytes) + ") outside buffer '" + (b ? b->tag : "null") + "' of " +
                       std::to_string(b ? b->bytes : 0) + " bytes");
}

Launched SimRank::launch(Stream s, Op op) {
  Item it;
  it.kind = Item::Operator;
  it.op = std::make_shared<Op>(std::move(op));
  it.result = std::make_shared<OpResult>();
  auto result = it.result;
  Event e = enqueue(s.id, std::move(it));
  return {e, result};
}

Event SimRank::copy(Stream s, const Buffer& dst, uint64_t dst_off, const Buffer& src, uint64_t src_off, uint64_t bytes) {
  return copy_v(s, {CopyRange{dst, dst_off, src, src_off, bytes}});
}

Event SimRank::copy_v(Stream s, const std::vector<CopyRange>& copies) {
  if (copies.empty()) return record(s);
  for (const CopyRange& c : copies) {
    check_range(c.src, c.src_off, c.bytes, "copy source");
    check_range(c.dst, c.dst_off, c.bytes, "copy destination");
  }
  Event last;
  for (size_t i = 0; i < copies.size(); ++i) {
    const CopyRange& c = copies[i];
    Item it;
    it.kind = Item::Copy;
    it.buf = c.dst;
    it.off = c.dst_off;
    it.other = c.src;
    it.other_off = c.src_off;
    it.bytes = c.bytes;
    it.batched = i > 0;
    last = enqueue(s.id, std::move(it));
  }
  return last;
}

void SimRank::stream_wait(Stream s, const Event& e) {
  if (e.done()) return;
  auto ev = std::dynamic_pointer_cast<SimEvent>(e.impl());
  if (!ev) throw RuntimeError("stream_wait: an event that is not from the sim backend");
  Item it;
  it.kind = Item::Wait;
  it.wait_for = ev;
  enqueue(s.id, std::move(it));
}

// A send or receive of the given ranges (one message).
Item message_item(Item::Kind kind, int peer, int tag, const std::vector<BufferRange>& ranges) {
  Item it;
  it.kind = kind;
  it.peer = peer;
  it.tag = tag;
  it.ranges.assign(ranges.begin(), ranges.end());
  for (const BufferRange& r : ranges) it.bytes += r.bytes;
  return it;
}

Event SimRank::send(Stream s, int peer, const Buffer& src, uint64_t off, uint64_t bytes, int tag) {
  return send_v(s, peer, {{src, off, bytes}}, tag);
}

Event SimRank::recv(Stream s, int peer, const Buffer& dst, uint64_t off, uint64_t bytes, int tag) {
  return recv_v(s, peer, {{dst, off, bytes}}, tag);
}

Event SimRank::send_v(Stream s, int peer, const std::vector<BufferRange>& ranges, int tag) {
  check_peer(peer, "send to");
  for (const BufferRange& r : ranges) check_range(r.buf, r.off, r.bytes, "send");
  return enqueue(s.id, message_item(Item::Send, peer, tag, ranges));
}

Event SimRank::recv_v(Stream s, int peer, const std::vector<BufferRange>& ranges, int tag) {
  check_peer(peer, "receive from");
  for (const BufferRange& r : ranges) check_range(r.buf, r.off, r.bytes, "recv");
  return enqueue(s.id, message_item(Item::Recv, peer, tag, ranges));
}

int SimRank::expose(const Buffer& buf, uint32_t flags) {
  Window win;
  win.buf = buf;
  win.flags.assign(flags, 0);
  windows_.push_back(std::move(win));
  barrier();  // every rank's window exists before anyone puts into it
  return int(windows_.size()) - 1;
}

Event SimRank::put(Stream s, int peer, int window, uint64_t remote_off, const Buffer& src, uint64_t off, uint64_t bytes,
                   uint32_t flag, uint64_t value) {
  check_peer(peer, "put to");
  if (bytes) check_range(src, off, bytes, "put");  // a flag-only put needs no source
  if (window < 0 || window >= int(windows_.size()))
    throw RuntimeError("rank " + std::to_string(id()) + ": put into window " + std::to_string(window) +
                       ", which was never exposed");
  Item it;
  it.kind = Item::Put;
  it.peer = peer;
  it.tag = int(flag);
  it.buf = src;
  it.off = off;
  it.bytes = bytes;
  it.window = window;
  it.other_off = remote_off;
  it.flag = flag;
  it.value = value;
  return enqueue(s.id, std::move(it));
}

// A copy into a copied-in consumer's rings lands its chunks' keys where they lie (as a put
// does) and makes its slots' chunks usable: a copy covers consecutive slots of one ring.
void SimRank::copied_into_rings(const Item& it) {
  Consumer& c = *consumer_;
  const uint64_t ring_bytes = uint64_t(c.op.slots) * c.op.slot_bytes;
  const size_t ring = size_t(it.off / ring_bytes);
  if (ring >= c.rings || (it.off % ring_bytes) % c.op.slot_bytes != 0 ||
      it.off % ring_bytes + it.bytes > ring_bytes)
    throw RuntimeError("rank " + std::to_string(id()) + ": a copy of " + std::to_string(it.bytes) + " bytes to byte " +
                       std::to_string(it.off) + " of the consumer's rings is not slots of one ring");
  sim_buffer(it.buf).regions.land(it.off, it.bytes, sim_buffer(it.other).regions.spans(it.other_off, it.other_off + it.bytes));
  c.copied_chunks[ring] += (it.bytes + c.op.slot_bytes - 1) / c.op.slot_bytes;
  c.list(ring);
}

void SimRank::land_put(int window, uint64_t remote_off, uint64_t bytes, const std::vector<RegionMap::Span>& spans,
                       uint32_t flag, uint64_t value) {
  Window& win = windows_[size_t(window)];
  if (flag >= win.flags.size())
    throw RuntimeError("put sets flag " + std::to_string(flag) + " of rank " + std::to_string(id()) + "'s window " +
                       std::to_string(window) + ", which has " + std::to_string(win.flags.size()) + " flags");
  if (remote_off > win.buf->bytes)
    throw RuntimeError("put lands at byte " + std::to_string(remote_off) + " past rank " + std::to_string(id()) +
                       "'s window of " + std::to_string(win.buf->bytes) + " bytes");
  if (bytes) sim_buffer(win.buf).regions.land(remote_off, bytes, spans);
  win.flags[flag] = value;
  if (consumer_ && window == consumer_->window && flag < consumer_->rings) consumer_->list(flag);
  ring();
}

uint64_t SimRank::read_flag(int window, uint32_t flag) {
  if (window < 0 || window >= int(windows_.size()) || flag >= windows_[size_t(window)].flags.size())
    throw RuntimeError("rank " + std::to_string(id()) + ": read_flag(" + std::to_string(window) + ", " +
                       std::to_string(flag) + ") outside the exposed windows");
  // A read costs one poll of the rank's CPU time, paid at its next poll_pause or once 64 are due
  // (a timer per read would cost more to simulate than the reads cost the real CPU).
  const double poll = world_.profile.host.poll_seconds;
  poll_debt_ += poll;
  if (poll_debt_ >= 64 * poll) pay_polls(poll_debt_);
  return windows_[size_t(window)].flags[flag];
}

// A polling loop found nothing new: it pays its reads (at least one poll) and then waits until
// something it could be polling for happens on this rank (a put landed, a message arrived, its
// own stream work or consumer progressed). Nothing in flight anywhere is the deadlock error.
void SimRank::poll_pause() {
  const uint64_t seen = changes_;
  pay_polls(std::max(poll_debt_, world_.profile.host.poll_seconds));
  if (changes_ != seen) return;
  block_until([&] { return changes_ != seen; }, "a flag or counter it polls to change");
}

void SimRank::pay_polls(double seconds) {
  poll_debt_ = 0;
  if (seconds <= 0) return;
  sg4::ActivityPtr timer = world_.start_timer(seconds);
  world_.busy++;  // the timer will wake this rank
  block_until([&] { return !timer; }, "its polling", &timer);
  world_.busy--;
}

Launched SimRank::launch_streaming(Stream s, StreamingOp op) {
  Item it;
  it.kind = Item::Streaming;
  it.sop = std::make_shared<StreamingOp>(std::move(op));
  it.result = std::make_shared<OpResult>();
  auto result = it.result;
  Event e = enqueue(s.id, std::move(it));
  return {e, result};
}

void SimRank::start_consumer(SimStream& st, int index) {
  Item& it = st.running.front();
  const std::string me = "rank " + std::to_string(id()) + ": stream_consume: ";
  if (consumer_) throw RuntimeError(me + "a second consumer while one runs");
  auto c = std::make_unique<Consumer>();
  c->op = std::get<StreamConsumeOp>(*it.sop);
  c->result = it.result;
  c->stream = index;
  const StreamConsumeOp& op = c->op;
  const size_t parts = op.parts, rings = size_t(op.sources) * parts;
  if (!op.progress || op.progress->rings() != rings)
    throw RuntimeError(me + "needs a StreamProgress of " + std::to_string(rings) + " rings");
  if (op.r_chunks.size() != rings || op.s_chunks.size() != rings)
    throw RuntimeError(me + "chunk counts for " + std::to_string(op.r_chunks.size()) + " / " +
                       std::to_string(op.s_chunks.size()) + " rings, expected " + std::to_string(rings));
  if (op.partition_ids.size() != parts || op.tables.size() != parts || op.workers.size() != parts)
    throw RuntimeError(me + "partition ids, tables and workers must have one entry per local partition");
  if (op.slots == 0 || op.slot_rows == 0) throw RuntimeError(me + "no ring slots");
  if (op.mode == OutputMode::Direct && op.staging_rows == 0) throw RuntimeError(me + "Direct output needs staging rows");
  for (size_t w = 0; w < windows_.size() && !op.copied_in; ++w)
    if (windows_[w].buf == op.rings) c->window = int(w);
  if (c->window < 0 && !op.copied_in)
    throw RuntimeError(me + "its ring buffer '" + (op.rings ? op.rings->tag : "null") + "' was never exposed");
  c->copied_chunks.assign(op.copied_in ? rings : 0, 0);
  if (c->window >= 0 && windows_[size_t(c->window)].flags.size() < rings)
    throw RuntimeError(me + "the rings' window has " + std::to_string(windows_[size_t(c->window)].flags.size()) +
                       " flags for " + std::to_string(rings) + " rings");
  c->rings = rings;
  c->next.assign(rings, 0);
  c->listed.assign(rings, 0);
  c->r_total.assign(parts, 0);
  c->r_done.assign(parts, 0);
  c->r_parts.resize(parts);
  c->r_content.resize(parts);
  c->blocked.resize(parts);
  for (size_t ring = 0; ring < rings; ++ring) {
    c->r_total[ring % parts] += op.r_chunks[ring];
    c->remaining += op.r_chunks[ring] + op.s_chunks[ring];
    c->list(ring);
  }
  for (size_t q = 0; q < parts; ++q) {
    HashTable t = op.tables[q];  // its size once built: the cost models' segment variable
    t.rows = t.next ? t.next->bytes / sizeof(uint32_t) : 0;
    c->tables.push_back(t);
    c->worker_total += std::max<uint32_t>(1, op.workers[q]);
    if (c->r_total[q] == 0) c->r_content[q] = std::make_shared<KeyContent>();
  }
  st.state = SimStream::Consuming;
  consumer_ = std::move(c);
}

bool SimRank::consume() {
  Consumer& c = *consumer_;
  const StreamConsumeOp& op = c.op;
  const Platform& pf = world_.platform;
  if (c.batch_done) consumer_batch_ended();
  // The copy engine takes every full staging half not yet copied (rows past the output's
  // capacity are counted, not written).
  auto start_flush = [&] {
    if (c.flush || c.full == 0) return;
    c.flushing = c.full;
    c.full = 0;
    const uint64_t room = op.out.capacity > op.out_first + c.copied ? op.out.capacity - op.out_first - c.copied : 0;
    const uint64_t bytes = std::min(c.flushing, room) * c.out_row_bytes();
    if (bytes == 0) {
      c.copied += c.flushing;
      c.flushing = 0;
      return;
    }
    const MemSpace to = op.out.keys ? op.out.keys->space : MemSpace::Pinned;
    world_.stats.transfers++;
    world_.stats.flows++;
    c.flush_begin = sg4::Engine::get_clock();
    c.flush = sg4::Comm::sendto_async(pf.gpus[size_t(id())], to == MemSpace::Device ? pf.gpus[size_t(id())] : cpu_host(id()),
                                      bytes);
    world_.busy++;
  };
  start_flush();
  // A new batch unless both staging halves are full (one is being copied, the other waits).
  if (!c.exec && c.remaining > 0 && c.full == 0) {
    const size_t parts = op.parts;
    const SimBuffer& rings = sim_buffer(op.rings);
    const OpModels& models = world_.profile.ops;
    std::vector<double> cost(parts, 0.0);
    std::vector<size_t> look;
    look.swap(c.look);
    for (size_t ring : look) c.listed[ring] = 0;
    c.batch.clear();
    c.batch_chunks = c.batch_rows = 0;
    for (size_t ring : look) {
      const size_t q = ring % parts;
      const uint64_t total = op.r_chunks[ring] + op.s_chunks[ring];
      const uint64_t arrived = op.copied_in ? c.copied_chunks[ring] : windows_[size_t(c.window)].flags[ring];
      const uint64_t landed = std::min(arrived, total);
      uint64_t k = c.next[ring];
      for (; k < landed; ++k) {
        const bool is_r = k < op.r_chunks[ring];
        if (!is_r && c.r_done[q] < c.r_total[q]) {  // probes wait for the whole table
          c.blocked[q].push_back(ring);
          break;
        }
        ContentPtr keys = rings.regions.at((ring * op.slots + k % op.slots) * op.slot_bytes);
        if (!keys) keys = unknown_content(0);
        const uint64_t rows = keys->rows();
        const TupleFormat fmt = is_r ? op.r_fmt : op.s_fmt;
        Tuples chunk;
        chunk.rows = chunk.capacity = rows;
        chunk.fmt = fmt;
        ChecksumOp check;
        check.key_bytes = fmt.key_bytes;
        check.column_bytes = {fmt.val_bytes};
        check.rows = rows;
        OpSample verify = op_sample(check, OpResult{});
        OpSample use;
        if (is_r) {
          use = op_sample(BuildOp{chunk, &c.tables[q]}, OpResult{});
          c.r_parts[q].push_back(keys);
        } else if (op.star) {  // an SSB query: its chained probes, the expected share of rows passing
          StarProbeOp chain = *op.star;
          chain.in = chunk;
          const double m = double(rows) * star_pass_fraction(chain);
          c.matches += m;
          OpResult r;
          r.count = rounded(m);
          use = op_sample(chain, r);
        } else {
          const double m = expected_matches(*c.r_content[q], *keys);
          c.matches += m;
          OpResult r;
          r.count = rounded(m);
          JoinOutput out = op.out;
          out.r_fmt = op.r_fmt;
          out.s_fmt = op.s_fmt;
          use = op_sample(ProbeOp{&c.tables[q], chunk, out, 0, op.mode}, r);
        }
        verify.x[0] = use.x[0] = 0;  // a persistent kernel: no launch per chunk
        cost[q] += models.seconds(verify) + models.seconds(use);
        c.batch_chunks++;
        c.batch_rows += rows;
      }
      if (k > c.next[ring]) c.batch.push_back({ring, k});
    }
    if (!c.batch.empty()) {
      // The whole GPU's rate, and no partition faster than its share of the grid.
      double sum = 0, slowest = 0;
      for (size_t q = 0; q < parts; ++q) {
        sum += cost[q];
        slowest = std::max(slowest, cost[q] * c.worker_total / std::max<uint32_t>(1, op.workers[q]));
      }
      c.batch_begin = sg4::Engine::get_clock();
      c.exec = world_.start_exec(pf.gpus[size_t(id())], std::max(sum, slowest) + world_.profile.host.poll_seconds);
      world_.stats.operators++;
      world_.busy++;
    }
  }
  if (c.remaining > 0 || c.exec) return false;
  if (op.mode == OutputMode::Direct && c.staged > 0) {  // the last, partly filled half
    c.full += c.staged;
    c.staged = 0;
    start_flush();
  }
  if (c.flush || c.full > 0) return false;
  c.result->count = c.rows_out;
  c.result->overflow = op.mode != OutputMode::CountOnly && op.out_first + c.rows_out > op.out.capacity;
  consumer_.reset();
  return true;
}

// The batch's chunks are used: release their slots, complete the tables whose last R chunk it
// was, and stage its output rows.
void SimRank::consumer_batch_ended() {
  Consumer& c = *consumer_;
  const StreamConsumeOp& op = c.op;
  c.batch_done = false;
  for (auto& [ring, upto] : c.batch) {
    const size_t q = ring % op.parts;
    const uint64_t r_used = std::min(upto, op.r_chunks[ring]) - std::min(c.next[ring], op.r_chunks[ring]);
    c.remaining -= upto - c.next[ring];
    c.next[ring] = upto;
    op.progress->release(ring, upto);
    c.list(ring);  // more may have landed meanwhile
    c.r_done[q] += r_used;
    if (r_used && c.r_done[q] == c.r_total[q]) {  // the table of q is complete: its probes may start
      c.r_content[q] = c.r_parts[q].empty() ? std::make_shared<KeyContent>() : merge_contents(c.r_parts[q]);
      c.r_parts[q].clear();
      for (size_t waiting : c.blocked[q]) c.list(waiting);
      c.blocked[q].clear();
    }
  }
  const uint64_t rows = rounded(c.matches);
  const uint64_t added = rows > c.rows_out ? rows - c.rows_out : 0;
  c.rows_out += added;
  if (op.mode == OutputMode::Direct) {
    c.staged += added;
    const uint64_t halves = c.staged / op.staging_rows;
    c.full += halves * op.staging_rows;
    c.staged -= halves * op.staging_rows;
  }
  if (traced()) {
    OpParams p;
    p.kind = OpKind::StreamConsume;
    p.rows_in = c.batch_rows;
    p.rows_out = added;
    p.detail = "batch of " + std::to_string(c.batch_chunks) + " chunks";
    span("stream " + std::to_string(c.stream) + " batches", std::move(p), c.batch_begin, sg4::Engine::get_clock());
  }
  c.batch.clear();
  changes_++;  // the strategy returns credits for what was released
}

std::vector<uint64_t> SimRank::allgather(const std::vector<uint64_t>& mine) { return world_.gathered(collective(mine)); }

// The messages of the default alltoall (an allgather of `mine`), without building the table.
std::vector<uint64_t> SimRank::alltoall(const std::vector<uint64_t>& mine, size_t per_rank) {
  if (mine.size() != size_t(size()) * per_rank)
    throw RuntimeError("alltoall: " + std::to_string(mine.size()) + " words for " + std::to_string(size()) +
                       " ranks of " + std::to_string(per_rank));
  return world_.gathered(collective(mine), size_t(id()) * per_rank, per_rank);
}

int SimRank::collective(const std::vector<uint64_t>& mine) {
  const int call = collectives_++, n = size(), me = id();
  const bool last = world_.deposit(call, me, mine);
  // Dissemination: in round k = 1, 2, 4, ... (below `reach`) every rank forwards what it holds
  // to rank + k.
  int reach = n;
  if (world_.options.threads_launch) {
    // Ranks as threads meet in shared memory (the cpu and cuda backends' in-process worlds): the
    // last to arrive wakes the others, who pay one wake-up (one round's message) at any rank count.
    if (last)
      for (auto& r : world_.ranks) r->ring();
    block_until([&] { return world_.complete(call); }, "a collective (allgather or barrier) that another rank has not reached");
    reach = std::min(n, 2);
  }
  for (int k = 1; k < reach; k <<= 1) {
    const int to = (me + k) % n, from = (me - k + n) % n;
    const uint64_t bytes = 8 * (mine.size() + 1) * uint64_t(std::min(k, n - k));
    Event sent = enqueue(streams(), message_item(Item::Send, to, kCollectiveTag, {{nullptr, 0, bytes}}), true);
    MessagePtr got;
    block_until(
        [&] {
          if (!got) got = world_.take(from, me, kCollectiveTag, this);
          return sent.done() && got && got->arrived;
        },
        "a collective (allgather or barrier) that another rank has not reached");
  }
  return call;
}

// The key boundaries sorted R and S share: the first keys of the coarser order's partitions
// (orders are radix functions over top bits, so those start partitions of the finer one too), as
// cuts of R's and S's rows.
std::vector<CoRank> shared_key_cuts(const KeyContent& r, const KeyContent& s) {
  KeyOrder none;  // an input without rows
  none.first = {0};
  for (const KeyContent* c : {&r, &s})
    if (c->rows() && !c->order)
      throw RuntimeError("merge-path parts: the simulator knows no key order of an input that was not sorted");
  const KeyOrder& ro = r.rows() ? *r.order : none;
  const KeyOrder& so = s.rows() ? *s.order : none;
  const uint32_t shift = std::max(ro.fn.shift, so.fn.shift);
  std::vector<uint64_t> keys{0};
  for (const KeyOrder* o : {&ro, &so})
    for (size_t i = 0; i < o->pieces.size(); ++i) keys.push_back(o->key_begin(i) >> shift << shift);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<CoRank> cuts;
  for (uint64_t x : keys) cuts.push_back({rows_below_key(ro, x), rows_below_key(so, x)});
  cuts.push_back({r.rows(), s.rows()});
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

std::vector<JoinPiece> SimRank::merge_path_parts(const Tuples& r, const Tuples& s, uint64_t min_parts,
                                                 uint64_t max_rows) {
  return joinlab::merge_path_parts(shared_key_cuts(*content_or_unknown(r), *content_or_unknown(s)), min_parts,
                                   max_rows);
}

Bandwidths SimRank::bandwidths() const {
  const Profile& p = world_.profile;
  Bandwidths b;
  b.mem = p.gpu.mem_bw;
  b.host_mem = p.host.mem_bw;
  b.h2d = p.h2d.bw;
  b.p2p = world_.platform.intra_node_bw;
  b.net = world_.options.topo.nics == NicPlacement::PerGpu
              ? p.nic.bw
              : p.nic.bw * world_.options.topo.nics_per_node / std::max(1, world_.platform.shape.per_node);
  b.source = "profile " + p.name + (p.status.empty() ? "" : " (" + p.status + ")");
  return b;
}

bool SimRank::traced() const { return id() < world_.options.trace_ranks && world_.spans < world_.options.max_spans; }

void SimRank::span(const std::string& track, OpParams p, double begin, double end) {
  if (id() >= world_.options.trace_ranks) return;
  if (world_.spans >= world_.options.max_spans) {
    world_.stats.spans_dropped++;
    return;
  }
  world_.spans++;
  trace_.add({id(), track, std::move(p), begin, end});
}

std::string SimRank::waiting() const {
  std::string s = blocked_on_ ? std::string("waits for ") + blocked_on_ : "";
  for (size_t i = 0; i < streams_.size(); ++i) {
    const SimStream* st = streams_[i].get();
    if (!st || st->state == SimStream::Idle) continue;
    s += (s.empty() ? "" : "; ") + std::string("stream ") + std::to_string(i) + " is at " +
         st->running.front().describe();
    if (st->state == SimStream::AwaitMessage)
      s += st->incoming ? ", whose message is on its way" : ": that message was never sent";
    if (st->state == SimStream::AwaitReceiver) s += ": its receiver never reached the matching receive";
  }
  return s.empty() ? "waits" : s;
}

std::string SimWorld::deadlock_report() const {
  std::ostringstream m;
  m << "simulation deadlocked at t = " << sg4::Engine::get_clock() << " s: every running rank waits and nothing is in "
    << "flight (a receive, collective or event that can never complete):";
  int shown = 0;
  for (auto& r : ranks)
    if (!r->finished && shown++ < 8) m << "\n  rank " << r->id() << " " << r->waiting();
  if (shown > 8) m << "\n  ... (" << shown << " ranks)";
  return m.str();
}

RankRecord SimRank::record_of() const {
  RankRecord r;
  r.id = id();
  r.job = job();
  r.result = result();
  r.result.has_checksum = false;
  r.phases = phases();
  r.spans = const_cast<SimRank*>(this)->trace().take();  // the simulation is over
  r.bandwidths = bandwidths();
  return r;
}

// Transparent huge pages for the heap: a large simulation touches millions of small objects
// at random (ranks' state, messages, SimGrid's activities), and with 4 KiB pages TLB misses cost
// a fifth of its time at 512 ranks. The heap is grown now by a block that it keeps (the trim
// threshold is 1 GiB), and that range is advised; where THP is off ("never") this does nothing.
void advise_huge_heap() {
  constexpr size_t kReserve = size_t(768) << 20, kHuge = size_t(2) << 20;
  char* const before = static_cast<char*>(sbrk(0));
  void* block = malloc(kReserve);
  char* const after = static_cast<char*>(sbrk(0));
  free(block);
  char* const from = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(before) + kHuge - 1) & ~(kHuge - 1));
  if (block && after > from + kHuge) madvise(from, size_t(after - from) & ~(kHuge - 1), MADV_HUGEPAGE);
}

// The profile a run simulates: the named one (or the default) with the run's overrides.
Profile profile_of(const BackendConfig& cfg) {
  return load_profile(resolve_profile_path(cfg.profile.empty() ? kDefaultProfile : cfg.profile, cfg.profile_dir),
                      cfg.profile_overrides);
}

}  // namespace

void check_config(const BackendConfig& cfg) { parse_options(cfg, profile_of(cfg)); }

SimOutcome simulate(const BackendConfig& cfg, const std::function<void(Rank&)>& body) {
  SimOutcome out;
  const auto wall0 = std::chrono::steady_clock::now();
  Profile prof;
  Options opt;
  try {
    prof = profile_of(cfg);
    opt = parse_options(cfg, prof);
    // The simulated twin of a run on another backend pays that backend's transports.
    if (opt.msg_backend != "profile")
      for (auto [kind, choice] : {std::pair<const char*, std::string*>{"send", &prof.msg.send}, {"put", &prof.msg.put}}) {
        const std::string t = backend_transport(opt.msg_backend, kind, prof.msg, opt.transport);
        if (t.empty())
          std::cerr << "sim: profile " << prof.name << " has no measured cost of " << kind << "s over the "
                    << opt.msg_backend << " backend's transport"
                    << (opt.msg_backend == "cpu" ? " (" + (opt.transport.empty() ? std::string("inproc") : opt.transport) + ")" : "")
                    << ": charged nothing (joinlab calibrate --backend " << opt.msg_backend << " measures it)\n";
        *choice = t.empty() ? "none" : t;
      }
  } catch (const InputError& e) {
    out.error_kind = 2;
    out.error = e.what();
    return out;
  }
  xbt_log_control_set("root.thresh:critical");
  char name[] = "joinlab-sim";
#ifdef JOINLAB_SANITIZE
  // ASan does not see SimGrid's own stack switches (Debian's libsimgrid is built without ASan's
  // fiber annotations): an exception thrown in an actor reads as a stack-buffer-overflow. Threads
  // it follows. The factory is chosen when the engine starts, so it goes on the command line.
  char factory[] = "--cfg=contexts/factory:thread";
  char* argv[] = {name, factory, nullptr};
#else
  char* argv[] = {name, nullptr};
#endif
  int argc = int(sizeof(argv) / sizeof(argv[0])) - 1;
  sg4::Engine engine(&argc, argv);
  sg4::Engine::set_config("network/model:CM02");
  sg4::Engine::set_config("network/crosstraffic:0");
  // No TCP window bound: it would cap a flow at 4 MiB / (2 x latency), below NVLink and below
  // merged node-to-node flows. Bandwidths come from the profile only. CM02 bounds a flow by
  // min(its rate, gamma / (2 x latency)), and gamma = 0 leaves every flow unbounded: that drops
  // the rate caps of merged flows, and 3.32 then ends one of two flows that start together on a
  // shared link too early (README.md, "The platform"). A gamma this large never binds.
  sg4::Engine::set_config("network/TCP-gamma", 1e30);
  sg4::Engine::set_config("contexts/stack-size:256");
  sg4::Engine::set_config("contexts/guard-size:0");
  if (opt.precision > 0) sg4::Engine::set_config("surf/precision", opt.precision);

  // Concurrent joins: a world each (messages, windows, collectives, deadlock detection), all on
  // one platform, their ranks with one id on that rank's GPU and host.
  const ClusterShape physical = opt.emulate_nodes ? ClusterShape{1, cfg.shape.size()} : cfg.shape;
  const Platform platform = build_platform(prof, physical, opt.topo);
  const auto cpu_threads = std::make_shared<std::vector<int>>(platform.cpus.size(), 0);
  std::vector<std::unique_ptr<SimWorld>> worlds;
  for (int j = 0; j < cfg.jobs; ++j) {
    worlds.push_back(std::make_unique<SimWorld>(prof, opt, cfg.shape, cfg.device_memory));
    SimWorld& world = *worlds.back();
    world.platform = platform;
    world.timer = platform.timer;
    world.cpu_threads = cpu_threads;
    world.stats.platform = platform.describe();
    world.stats.flows_mode = opt.flows_name;
    if (opt.flows == Options::Node) world.node_net = std::make_unique<NodeNetwork>(world.platform, &world.stats.flows, &world.waking);
    for (int r = 0; r < cfg.shape.size(); ++r) {
      world.ranks.push_back(std::make_unique<SimRank>(world, r, cfg.shape));
      world.ranks.back()->set_job(j);
    }
    for (int r = 0; r < cfg.shape.size(); ++r) {
      SimRank* rank = world.ranks[size_t(r)].get();
      SimWorld* w = &world;
      world.running++;
      const std::string name = "rank" + std::to_string(r) + (cfg.jobs > 1 ? "-join" + std::to_string(j) : "");
      rank->actor = sg4::Actor::create(name, platform.gpus[size_t(r)], [rank, w, &body] {
        try {
          body(*rank);
          rank->finished = true;
        } catch (const SimulationAborted&) {
        } catch (const InputError& e) {
          w->fail(2, e.what());
        } catch (const std::exception& e) {
          w->fail(1, e.what());
        }
        --w->running;
      });
    }
  }
  // Large blocks (collectives' tables, big vectors) from the heap rather than fresh mmaps: a
  // simulation allocates and frees them by the thousand, and page faults would dominate. Set
  // once the actors exist: their stacks (256 KiB each, zeroed) stay fresh mmaps, whose pages
  // cost nothing until used (from the heap, 1280 actors' stacks would be 320 MiB written).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  advise_huge_heap();
  engine.run();

  out.stats = worlds.front()->stats;
  for (size_t j = 1; j < worlds.size(); ++j) {
    const SimStats& s = worlds[j]->stats;
    out.stats.operators += s.operators;
    out.stats.transfers += s.transfers;
    out.stats.flows += s.flows;
    out.stats.waits += s.waits;
    out.stats.spans_dropped += s.spans_dropped;
  }
  out.stats.simulated_seconds = sg4::Engine::get_clock();
  out.stats.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  for (auto& world : worlds)
    if (!world->error.empty()) {
      out.error_kind = world->error_kind;
      out.error = (cfg.jobs > 1 ? "join " + std::to_string(world->ranks.front()->job() + 1) + ": " : "") + world->error;
      return out;
    }
  std::ostringstream stuck;
  int n_stuck = 0;
  for (auto& world : worlds)
    for (auto& r : world->ranks)
      if (!r->finished) {
        if (n_stuck < 8)
          stuck << "\n  rank " << r->id() << (cfg.jobs > 1 ? " of join " + std::to_string(r->job() + 1) : "") << " "
                << r->waiting();
        ++n_stuck;
      }
  if (n_stuck) {
    out.error_kind = 1;
    out.error = "simulation deadlocked at t = " + std::to_string(out.stats.simulated_seconds) + " s: " +
                std::to_string(n_stuck) + " rank(s) never finished (a send/recv or collective that never matched):" +
                stuck.str() + (n_stuck > 8 ? "\n  ..." : "");
    return out;
  }
  for (auto& world : worlds)
    for (auto& r : world->ranks) out.ranks.push_back(r->record_of());
  return out;
}

}  // namespace joinlab::sim
