// Executes one operator of core/exec/ops.hpp with the CPU kernels (kernels/cpu), synchronously
// on the calling thread plus `threads` OpenMP threads. CpuRank runs it on its stream workers;
// tests call it directly. Bad arguments (views past their buffers, mismatched widths, a full
// table) throw RuntimeError naming the operator and the buffer.
#pragma once
#include <cstdint>
#include <string>

#include "core/common/error.hpp"
#include "core/common/key_width.hpp"
#include "core/exec/ops.hpp"

namespace joinlab {

void execute_cpu_op(const Op& op, int threads, OpResult& result);

// The checks params_of(op) needs (tables present); throws RuntimeError.
void check_op_pointers(const Op& op);

}  // namespace joinlab
