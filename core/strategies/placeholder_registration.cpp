// PLACEHOLDER: replaced by the strategies work.
#include "core/builtin.hpp"
namespace joinlab { void register_single_gpu_strategies() {} void register_distributed_strategies() {} }
