// The distributed joins over one-sided puts (rdma_exchange.hpp): thostrup2023's gpj, gpj-b and
// gpj-h (gpj.cpp) and the papers' CPU baseline crj (crj.cpp); and maltenberger2025's multi-GPU
// sort-merge join (mgsmj.cpp).
#pragma once
#include <string>

#include "core/strategies/strategy_util.hpp"

namespace joinlab {

StrategyInfo gpj_strategy();
StrategyInfo gpj_b_strategy();
StrategyInfo gpj_h_strategy();
StrategyInfo crj_strategy();
StrategyInfo mgsmj_strategy();  // mgsmj.cpp: the GPUs of one node

// The blocking join shared by gpj-b (in device memory) and crj (in host memory): the one-sided
// exchange materializes every partition on its receiver, then phj joins them there.
void add_materialized_join_options(po::options_description& d);  // exchange + phj options
// The exchange lands in `landing`; the local join runs in `space` (a copy first where they differ).
void run_materialized_join(Rank& rank, const JoinJob& job, MemSpace space, MemSpace landing);
Bound materialized_join_bound(const JoinJob& job, const ClusterShape& shape, const Bandwidths& bw, bool on_host);

}  // namespace joinlab
