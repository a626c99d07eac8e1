// PLACEHOLDER: replaced by the CPU backend work.
#include "core/builtin.hpp"
namespace joinlab { void register_cpu_backend() {} }
