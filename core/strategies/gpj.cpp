// gpj, gpj-b, gpj-h: thostrup2023's distributed GPU joins over one-sided RDMA. The input is in
// host memory; sender CPUs hash-partition it into over-partitioned partitions and ship them with
// one-sided puts (rdma_exchange.hpp). On the CPU backend the "GPU memory" is the rank's Device
// budget ([cluster] device_memory) and the persistent consumer is a polling stream worker.
//
//  gpj    section 4, the pipelined join: every partition is streamed in checksummed chunks into
//         ring buffers in the receiver's GPU memory, where one persistent consumer builds a
//         chained hash table per partition (sized from the global histogram) and probes it while
//         the shuffle goes on; the result streams to host memory through double buffers. With
//         gpudirect = off (a NIC that cannot write GPU memory) the rings lie in pinned host memory
//         and the receiver copies each arrived chunk to its GPU, pipelined with the consumer.
//  gpj-b  the blocking variant the paper compares with: shuffle everything into GPU memory, then
//         join (the single-GPU partitioned join, phj, on each rank).
//  gpj-h  section 5, the hybrid join for build sides larger than the GPUs' memory: the fanout grows
//         until 16 partitions' tables fill a GPU on average; each receiver places its partitions
//         on its GPU by the global histogram (most tuples per byte of table first) until its
//         memory is full, streams those as gpj does, and materializes the rest in host memory,
//         joined by the CPU radix join (phj on host memory) once the shuffle is done.
// With an SSB query (workload.query, star_query.hpp) gpj and gpj-b ship lineorder alone: gpj's
// consumer probes each chunk through the dimensions every rank built (section 6.3's chained
// processing); gpj-b probes what landed once the shuffle is done.
#include <algorithm>
#include <numeric>

#include "core/common/error.hpp"
#include "core/exec/chunk.hpp"
#include "core/strategies/distributed_joins.hpp"
#include "core/strategies/rank_joins.hpp"
#include "core/strategies/rdma_exchange.hpp"
#include "core/strategies/star_query.hpp"

namespace joinlab {

namespace {

// direct and count_then_write both materialize the streamed output (it cannot be counted first:
// the chunks are gone once probed); count_only counts.
void add_gpj_options(po::options_description& d) {
  add_exchange_options(d);
  add_gpudirect_option(d);
  add_output_option(d, "direct");
  // 64 slices: the sender threads take a batch's slices dynamically, so a thread delayed while
  // the others work costs the batch at most one slice. With one slice per thread (16 slices, 16
  // threads per rank on the 2x H200 host) one late thread delayed every batch by its whole share
  // (620 vs 480 ms of sender CPU on the two ranks of the bar); 64 give each of 16 threads 4 (each
  // of 32 threads 2). Counting them costs nothing extra: one operator per batch
  // (HistogramOp::in_segments; 2^24 8-byte keys, 1 thread of this project's 2-core EPYC: 8.9 -
  // 9.1 ms in 64 or 256 segments, 9.0 whole). Every slice costs the scatter two partly filled
  // lines per partition (plain stores, a read for ownership each): 2^24 16-byte tuples, fanout
  // 32, 1 thread: 76 - 80 ms from 2 to 64 slices, 77 - 84 ms from 256 (64 Ki rows each), 80 - 113
  // ms from 1024 (16 Ki rows): hence min_slice_rows = 64 Ki (gpj's 16 Mi-row batches: 64 slices
  // of 256 Ki rows; the default 1 Mi-row ones: 16 of 64 Ki). Fixed, not derived from the rank's
  // threads: the strategy does not see them, and 64 suits 8 - 32 threads.
  d.add_options()("count_slices", int_option("count_slices", 64, 1, 1 << 12),
                  "slices the histogram pass counts each batch in (one operator per batch): the senders then "
                  "partition a batch straight into chunk images without counting it again, their threads taking "
                  "whole slices (several per thread balance a late one; 1: the partition counts each batch itself)")(
      "min_slice_rows", int_option("min_slice_rows", 1 << 16, 1, int64_t(1) << 40),
      "rows a counted slice holds at least (batches of fewer than twice this are counted whole): every slice "
      "costs the scatter a partly filled line per partition at each end");
}

ExchangeConfig gpj_config(const po::variables_map& vm, int ranks, const Workload& w) {
  ExchangeConfig c = exchange_config(vm, ranks, w);
  c.count_slices = uint64_t(vm["count_slices"].as<int64_t>());
  c.min_slice_rows = uint64_t(vm["min_slice_rows"].as<int64_t>());
  c.output = output_mode(vm) == OutputMode::CountOnly ? OutputMode::CountOnly : OutputMode::Direct;
  c.landing_space = landing_space(vm, c.ring_space);
  return c;
}

PlacementFn place_all(Placement p) {
  return [p](const std::vector<uint64_t>& r_rows, const std::vector<uint64_t>&) {
    return std::vector<Placement>(r_rows.size(), p);
  };
}

// An SSB query: lineorder streams once; each receiver's consumer probes every chunk through the
// dimensions it built before the stream (thostrup2023 section 6.3).
void run_gpj_star(Rank& rank, const JoinJob& job) {
  ExchangeConfig cfg = gpj_config(job.options, rank.size(), job.workload);
  StarInputs si = generate_star_inputs(rank, job, cfg.ring_space);
  const StarProbeOp chain = si.tables.probe(Tuples{});
  cfg.star = &chain;
  cfg.output = OutputMode::CountOnly;
  const auto parts = OverPartitioning::make(cfg.parts_per_receiver, rank.size(), cfg.seed);
  ExchangeResult res = run_exchange_sized(rank, si.in, parts, cfg, place_all(Placement::Stream));
  report_star(rank, Stream{0}, si.tables, res.streamed.count());
}

void run_gpj(Rank& rank, const JoinJob& job) {
  if (job.workload.is_ssb()) return run_gpj_star(rank, job);
  const ExchangeConfig cfg = gpj_config(job.options, rank.size(), job.workload);
  Inputs in = generate_inputs(rank, job, MemSpace::Host, MemSpace::Host);
  const auto parts = OverPartitioning::make(cfg.parts_per_receiver, rank.size(), cfg.seed);
  ExchangeResult res = run_exchange_sized(rank, in, parts, cfg, place_all(Placement::Stream));
  report_output(rank, Stream{0}, res.streamed, in.r, in.s, cfg.stream_out_space);
}

// --- gpj-h -------------------------------------------------------------------------------------------

void add_gpj_h_options(po::options_description& d) {
  add_gpj_options(d);
  d.add_options()("gpu_fill", fraction_option("gpu_fill", 0.9, 0.0, 1.0),
                  "share of the GPU memory left at the start (capacity(Device)) the placed partitions may fill");
}

// Bytes a streamed partition occupies on its receiver: its chained table and its rings.
struct GpuCost {
  TupleFormat rf;
  double load_factor;
  uint64_t ring_bytes;  // all senders' rings of one partition
  uint64_t operator()(uint64_t r_rows) const {
    return hash_table_bytes(TableKind::Chained, rf, r_rows, load_factor) + ring_bytes;
  }
};

void run_gpj_h(Rank& rank, const JoinJob& job) {
  ExchangeConfig cfg = gpj_config(job.options, rank.size(), job.workload);
  const double fill = job.options["gpu_fill"].as<double>();
  Inputs in = generate_inputs(rank, job, MemSpace::Host, MemSpace::Host);
  const TupleFormat rf = in.r.tuples.fmt, sf = in.s.tuples.fmt;
  const int n = rank.size();

  // The GPU memory every rank may fill (the smallest, so that every rank plans the same fanout),
  // less the consumer's output double buffer (no larger than a rank's share of S).
  const std::vector<uint64_t> caps = rank.allgather({rank.capacity(MemSpace::Device)});
  const uint64_t staging_rows = std::min<uint64_t>(cfg.staging_rows, job.workload.s.rows / uint64_t(n) + 1);
  const uint64_t staging =
      cfg.output == OutputMode::CountOnly ? 0 : 2 * staging_rows * (rf.tuple_bytes() + sf.val_bytes);
  const double budget = std::max(0.0, double(*std::min_element(caps.begin(), caps.end())) * fill - double(staging));
  GpuCost cost{rf, cfg.load_factor, uint64_t(n) * cfg.slots * slot_bytes(cfg, rf, sf)};
  // Fanout: 16 (parts_per_receiver) partitions per GPU on average when R's tables fit; more when
  // they do not, so that the average partition's table is 1/16 of a GPU (thostrup2023 section 5).
  const double table_per_rank =
      double(hash_table_bytes(TableKind::Chained, rf, job.workload.r.rows / uint64_t(n) + 1, cfg.load_factor));
  uint64_t per_receiver = cfg.parts_per_receiver;
  while (budget > 0 && table_per_rank / double(per_receiver) > budget / double(cfg.parts_per_receiver) &&
         per_receiver < (1u << 16))
    per_receiver *= 2;
  const auto parts = OverPartitioning::make(per_receiver, n, cfg.seed);

  // On each receiver: the partitions with the most tuples per byte of GPU memory first, while
  // they fit; the rest stays in host memory for the CPU join.
  const PlacementFn place = [&](const std::vector<uint64_t>& r_rows, const std::vector<uint64_t>& s_rows) {
    std::vector<size_t> order(r_rows.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return double(r_rows[a] + s_rows[a]) / double(cost(r_rows[a])) > double(r_rows[b] + s_rows[b]) / double(cost(r_rows[b]));
    });
    std::vector<Placement> p(r_rows.size(), Placement::Materialize);
    double left = budget;
    for (size_t q : order) {
      const double need = double(cost(r_rows[q]));
      if (need > left) continue;
      left -= need;
      p[q] = Placement::Stream;
    }
    return p;
  };
  ExchangeResult res = run_exchange_sized(rank, in, parts, cfg, place);

  // The partitions left in host memory: the CPU radix join.
  PhjConfig cpu;
  cpu.output = cfg.output == OutputMode::CountOnly ? OutputMode::CountOnly : OutputMode::Direct;
  OutputSink out = res.streamed;
  out.append(phj_join(rank, Stream{0}, res.r, res.s, cpu, MemSpace::Host, "cpu_"));
  report_output(rank, Stream{0}, out, in.r, in.s, MemSpace::Host);
}

// --- bounds ------------------------------------------------------------------------------------------

// Device memory of the streamed join per rank: the chained tables built (R written into the
// chain arrays, bucket heads), S read, one chain entry read per S tuple, the output written.
double streamed_join_bytes(const Workload& w, const ClusterShape& shape, OutputMode out) {
  const double n = shape.size();
  const TupleFormat rf = tuple_format(w.r), sf = tuple_format(w.s);
  const double r = double(w.r.rows) / n, s = double(w.s.rows) / n;
  return r * (rf.tuple_bytes() + 4) + double(hash_table_slots(uint64_t(r), 0.5)) * 4 + s * sf.tuple_bytes() +
         s * (rf.tuple_bytes() + 4) + bound_output_bytes(w, out) / n;
}

// Every tuple that arrives crosses PCIe once more, from the host memory it landed in to the GPU.
Bound landed_copy_bound(const Workload& w, const ClusterShape& shape, const Bandwidths& bw) {
  if (bw.h2d <= 0) return {0, ""};
  return {tuple_bytes_per_rank(w, shape.size()) / bw.h2d, "host-to-device " + rate_text(bw.h2d) + ": the landed R and S"};
}

// Pipelined: the exchange, the copies of what landed in host memory (gpudirect = off) and the
// join overlap, so the longest of them.
Bound gpj_bound(const JoinJob& job, const ClusterShape& shape, const Bandwidths& bw) {
  const ExchangeConfig cfg = gpj_config(job.options, shape.size(), job.workload);
  Bound b = exchange_bound(job.workload, shape, bw);
  // An SSB query's probes read each tuple and walk small cached tables.
  const Bound join = job.workload.is_ssb()
                         ? memory_bound(tuple_bytes_per_rank(job.workload, shape.size()), bw,
                                        "chained probes of the streamed lineorder")
                         : memory_bound(streamed_join_bytes(job.workload, shape, cfg.output), bw,
                                        "chained build and probe of the streamed partitions, output");
  if (join.seconds > b.seconds) b = join;
  if (cfg.lands_apart()) {
    const Bound copy = landed_copy_bound(job.workload, shape, bw);
    if (copy.seconds > b.seconds) b = copy;
  }
  return b;
}

// Bytes of the rings a receiver holds with balanced partitions: every sender's for each of its
// partitions (in GPU memory, and as many in host memory where the puts land apart).
uint64_t gpj_ring_bytes(const ExchangeConfig& cfg, const Workload& w, uint64_t n) {
  const uint64_t parts = OverPartitioning::make(cfg.parts_per_receiver, int(n), cfg.seed).fanout() / n;
  return n * parts * cfg.slots * slot_bytes(cfg, tuple_format(w.r), tuple_format(w.s));
}

// A rank's share with balanced partitions: the chained tables of R, the rings, and the output
// double buffer.
uint64_t gpj_working_set(const JoinJob& job, const ClusterShape& shape) {
  const Workload& w = job.workload;
  const ExchangeConfig cfg = gpj_config(job.options, shape.size(), job.workload);
  const uint64_t n = uint64_t(shape.size());
  const TupleFormat rf = tuple_format(w.r), sf = tuple_format(w.s);
  const uint64_t parts = OverPartitioning::make(cfg.parts_per_receiver, int(n), cfg.seed).fanout() / n;
  const uint64_t tables = parts * hash_table_bytes(TableKind::Chained, rf, w.r.rows / n / parts + 1, cfg.load_factor);
  const uint64_t staging = cfg.output == OutputMode::CountOnly || w.is_ssb()
                               ? 0
                               : 2 * std::min(cfg.staging_rows, w.s.rows / n + 1) * (rf.tuple_bytes() + sf.val_bytes);
  return tables + gpj_ring_bytes(cfg, w, n) + staging + star_dimension_bytes(w);
}

// Where gpj-b's shuffle lands: in GPU memory (GPUDirect RDMA), or in pinned host memory (what a NIC
// can write into without GPUDirect) and copied to the GPU over PCIe before the join
// (thostrup2023's blocking baseline without GPUDirect): landing = host, or gpudirect = off as gpj
// says it.
bool lands_on_host(const po::variables_map& vm) {
  return (vm.count("landing") && vm["landing"].as<std::string>() == "host") ||
         (vm.count("gpudirect") && vm["gpudirect"].as<std::string>() == "off");
}

// A relation that arrived in one memory, copied into `space` on stream `st` (queued).
Tuples copy_landed(Rank& rank, Stream st, const Tuples& t, MemSpace space, const std::string& tag) {
  Tuples d = rank.alloc_tuples(space, t.rows, t.fmt, tag);
  rank.copy(st, d.keys, 0, t.keys, t.offset * t.fmt.key_bytes, t.rows * t.fmt.key_bytes);
  rank.copy(st, d.vals, 0, t.vals, t.offset * t.fmt.val_bytes, t.rows * t.fmt.val_bytes);
  return d;
}

// gpj-b's SSB query: lineorder shuffled and materialized, then the chained probes as a phase of
// their own.
void run_materialized_star(Rank& rank, const JoinJob& job, MemSpace space, MemSpace landing) {
  ExchangeConfig cfg = exchange_config(job.options, rank.size(), job.workload);
  cfg.materialize_space = landing;
  StarInputs si = generate_star_inputs(rank, job, space);
  const auto parts = OverPartitioning::make(cfg.parts_per_receiver, rank.size(), cfg.seed);
  ExchangeResult res = run_exchange(rank, si.in, parts, cfg, place_all(Placement::Materialize));
  Tuples lineorder = res.s;
  if (landing != space) {
    begin_phase(rank, "copy_in");
    lineorder = copy_landed(rank, Stream{0}, res.s, space, "gpj.landed.lineorder");
    res.s = Tuples{};
  }
  begin_phase(rank, "chained_probes");
  const uint64_t count = rank.launch(Stream{0}, si.tables.probe(lineorder)).get().count;
  report_star(rank, Stream{0}, si.tables, count);
}

}  // namespace

// Blocking: the exchange into `landing`, then phj on the materialized partitions in `space` (gpj-b:
// device memory, landed there or copied in from host memory; crj: host memory).
void run_materialized_join(Rank& rank, const JoinJob& job, MemSpace space, MemSpace landing) {
  if (job.workload.is_ssb()) return run_materialized_star(rank, job, space, landing);
  ExchangeConfig cfg = exchange_config(job.options, rank.size(), job.workload);
  cfg.materialize_space = landing;
  const PhjConfig local = phj_config(job.options);
  Inputs in = generate_inputs(rank, job, MemSpace::Host, MemSpace::Host);
  const auto parts = OverPartitioning::make(cfg.parts_per_receiver, rank.size(), cfg.seed);
  ExchangeResult res = run_exchange(rank, in, parts, cfg, place_all(Placement::Materialize));
  Tuples r = res.r, s = res.s;
  if (landing != space) {
    begin_phase(rank, "copy_in");
    r = copy_landed(rank, Stream{0}, res.r, space, "gpj.landed.R");
    s = copy_landed(rank, Stream{0}, res.s, space, "gpj.landed.S");
    res.r = res.s = Tuples{};  // the landed copies go once the copies that read them are done
  }
  OutputSink out = phj_join(rank, Stream{0}, r, s, local, space, "local_");
  report_output(rank, Stream{0}, out, in.r, in.s, space);
}

void add_materialized_join_options(po::options_description& d) {
  add_exchange_options(d);
  add_phj_options(d);
}

namespace {

void add_gpj_b_options(po::options_description& d) {
  add_materialized_join_options(d);
  d.add_options()("landing", choice_option("landing", {"device", "host"}, "device"),
                  "where the shuffle lands: device (one-sided puts into GPU memory, GPUDirect RDMA) or host (into "
                  "host memory, then copied to the GPU over PCIe before the join)");
  d.add_options()("gpudirect", choice_option("gpudirect", {"on", "off"}, "on"),
                  "the same as landing in gpj's terms (thostrup2023's GPJ-B with or without GPUDirect): off = landing host");
}

// landing and gpudirect say the same: given both, they must agree.
void check_gpj_b_landing(const po::variables_map& vm) {
  if (vm["landing"].defaulted() || vm["gpudirect"].defaulted()) return;
  const std::string landing = vm["landing"].as<std::string>(), gpudirect = vm["gpudirect"].as<std::string>();
  if ((landing == "host") != (gpudirect == "off"))
    throw InputError("strategy gpj-b: landing = " + landing + " and gpudirect = " + gpudirect +
                     " contradict each other (gpudirect = off is landing = host): give one of them");
}

}  // namespace

Bound materialized_join_bound(const JoinJob& job, const ClusterShape& shape, const Bandwidths& bw, bool on_host) {
  const Workload& w = job.workload;
  const double n = shape.size();
  const PhjConfig local = phj_config(job.options);
  const TupleFormat rf = tuple_format(w.r), sf = tuple_format(w.s);
  // An SSB query reads each landed tuple once for its chained probes (its tables are small).
  const double join_bytes = w.is_ssb() ? tuple_bytes_per_rank(w, n)
                                       : phj_memory_bytes(uint64_t(double(w.r.rows) / n), uint64_t(double(w.s.rows) / n),
                                                          rf, sf, local, bound_output_bytes(w, local.output) / n);
  const double rate = on_host ? bw.host_mem : bw.mem;
  const Bound ex = exchange_bound(w, shape, bw);
  const double join = rate > 0 ? join_bytes / rate : 0;
  // Landed in host memory: every arrived tuple crosses PCIe once more before the join.
  const Bound copy = !on_host && lands_on_host(job.options) ? landed_copy_bound(w, shape, bw) : Bound{0, ""};
  return {ex.seconds + copy.seconds + join,
          ex.resource + (copy.seconds > 0 ? ", then " + copy.resource : "") + ", then " + (on_host ? "host" : "device") +
              " memory " + rate_text(rate) + (w.is_ssb() ? ": the chained probes" : ": the local radix join") +
              " (the phases do not overlap)"};
}

// The senders' input stays in host memory (thostrup2023: the data starts in the nodes' memory).
uint64_t senders_host_bytes(const JoinJob& job, const ClusterShape& shape) {
  return uint64_t(tuple_bytes_per_rank(job.workload, shape.size())) +
         sender_buffer_bytes(exchange_config(job.options, shape.size(), job.workload), job.workload, shape.size());
}

namespace {

// gpj's and gpj-h's host memory: the senders', and the landing rings where the puts land apart.
uint64_t gpj_host_bytes(const JoinJob& job, const ClusterShape& shape) {
  const ExchangeConfig cfg = gpj_config(job.options, shape.size(), job.workload);
  return senders_host_bytes(job, shape) +
         (cfg.lands_apart() ? gpj_ring_bytes(cfg, job.workload, uint64_t(shape.size())) : 0);
}

}  // namespace

StrategyInfo gpj_strategy() {
  StrategyInfo i = strategy_info("gpj",
                                 "pipelined distributed GPU join (thostrup2023): checksummed chunks streamed by one-sided "
                                 "puts into GPU ring buffers (or host ring buffers, copied to the GPU: gpudirect = off), "
                                 "a persistent consumer builds and probes chained tables",
                                 1, 0, add_gpj_options, run_gpj, gpj_bound);
  i.check = [](const JoinJob& job) { require_tuple_payloads(job.workload, "gpj"); };
  i.star_queries = true;
  i.working_set_bytes = gpj_working_set;
  i.host_bytes = gpj_host_bytes;
  return i;
}

StrategyInfo gpj_b_strategy() {
  StrategyInfo i = strategy_info(
      "gpj-b",
      "blocking distributed GPU join (thostrup2023's GPJ-B): one-sided shuffle into GPU memory (or host memory, then "
      "PCIe: landing = host), then phj",
      1,
      0, add_gpj_b_options,
      [](Rank& rank, const JoinJob& job) {
        run_materialized_join(rank, job, MemSpace::Device, lands_on_host(job.options) ? MemSpace::Pinned : MemSpace::Device);
      },
      [](const JoinJob& job, const ClusterShape& shape, const Bandwidths& bw) {
        return materialized_join_bound(job, shape, bw, false);
      });
  i.check = [](const JoinJob& job) {
    require_tuple_payloads(job.workload, "gpj-b");
    check_gpj_b_landing(job.options);
  };
  i.star_queries = true;
  // Landed in host memory: what arrives stays there (until the join's end) beside the senders' input.
  i.host_bytes = [](const JoinJob& job, const ClusterShape& shape) {
    const Workload& w = job.workload;
    return senders_host_bytes(job, shape) +
           (lands_on_host(job.options) ? uint64_t(tuple_bytes_per_rank(w, shape.size())) : 0);
  };
  // What arrives (R and S), and the local phj's partitioned copy of it, and its output.
  i.working_set_bytes = [](const JoinJob& job, const ClusterShape& shape) {
    const Workload& w = job.workload;
    const double n = shape.size();
    if (w.is_ssb()) return uint64_t(tuple_bytes_per_rank(w, n)) + star_dimension_bytes(w);  // probed where it lands
    return uint64_t(2 * tuple_bytes_per_rank(w, n) + bound_output_bytes(w, OutputMode::Direct) / n);
  };
  return i;
}

StrategyInfo gpj_h_strategy() {
  StrategyInfo i = strategy_info("gpj-h",
                                 "hybrid GPU/CPU join (thostrup2023 section 5): partitions placed on GPUs by the histogram "
                                 "until memory is full, pipelined there; the rest joined by the CPU radix join",
                                 1, 0, add_gpj_h_options, run_gpj_h, gpj_bound);
  i.check = [](const JoinJob& job) { require_tuple_payloads(job.workload, "gpj-h"); };
  i.host_bytes = gpj_host_bytes;
  return i;  // no working set to check: it places what fits
}

}  // namespace joinlab
