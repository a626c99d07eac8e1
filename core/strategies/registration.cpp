// Registration of the strategies of core/strategies (called by register_builtin).
#include "core/builtin.hpp"
#include "core/strategies/distributed_joins.hpp"
#include "core/strategies/rank_joins.hpp"

namespace joinlab {

void register_single_gpu_strategies() {
  register_strategy(npj_strategy());
  register_strategy(phj_strategy());
  register_strategy(smj_strategy());
  register_strategy(chunked_strategy());
  register_strategy(triton_strategy());
}

void register_distributed_strategies() {
  register_strategy(shuffle_strategy());
  register_strategy(gpj_strategy());
  register_strategy(gpj_b_strategy());
  register_strategy(gpj_h_strategy());
  register_strategy(crj_strategy());
  register_strategy(mgsmj_strategy());
}

}  // namespace joinlab
