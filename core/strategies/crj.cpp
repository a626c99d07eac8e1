// crj: the distributed CPU radix join the papers compare with (thostrup2023's CRJ, the DFI-based
// radix join; Barthels et al.'s RDMA radix join). Sender threads hash-partition their input and
// write every partition with one-sided puts straight to its final place in the receiver's host
// memory (offsets from the global histogram); once the shuffle is done, every rank joins what
// it received with the CPU radix join (phj on host memory: cache-sized partitions, write-combine
// buffers, all cores). On a GPU backend it still runs on the host CPUs: its data stays in host
// memory.
#include "core/strategies/distributed_joins.hpp"
#include "core/strategies/rdma_exchange.hpp"

namespace joinlab {

StrategyInfo crj_strategy() {
  StrategyInfo i = strategy_info(
      "crj", "distributed CPU radix join (the papers' CPU baseline): one-sided shuffle into host memory, then phj", 1,
      0, add_materialized_join_options, [](Rank& rank, const JoinJob& job) { run_materialized_join(rank, job, MemSpace::Host, MemSpace::Host); },
      [](const JoinJob& job, const ClusterShape& shape, const Bandwidths& bw) {
        return materialized_join_bound(job, shape, bw, true);
      });
  i.check = [](const JoinJob& job) { require_tuple_payloads(job.workload, "crj"); };
  // Its input, what it receives, the local radix join's partitioned copy and the senders'
  // buffers: all host memory.
  i.host_bytes = [](const JoinJob& job, const ClusterShape& shape) {
    const Workload& w = job.workload;
    return uint64_t(3 * tuple_bytes_per_rank(w, shape.size())) +
           sender_buffer_bytes(exchange_config(job.options, shape.size(), w), w, shape.size());
  };
  return i;  // host memory only: no device working set
}

}  // namespace joinlab
