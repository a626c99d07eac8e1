// Executes one operator of core/exec/ops.hpp with the CPU kernels (kernels/cpu), synchronously
// on the calling thread plus `threads` OpenMP threads. CpuRank runs it on its stream workers;
// tests call it directly. Bad arguments (views past their buffers, mismatched widths, a full
// table) throw RuntimeError naming the operator and the buffer.
#pragma once
#include <cstdint>
#include <string>

#include "core/common/error.hpp"
#include "core/exec/ops.hpp"

namespace joinlab {

void execute_cpu_op(const Op& op, int threads, OpResult& result);

// Calls f(T{}) with T = uint32_t or uint64_t for a width of 4 or 8 bytes (the kernels' types).
template <class F>
void with_width(uint32_t bytes, const char* what, F&& f) {
  if (bytes == 4)
    f(uint32_t{});
  else if (bytes == 8)
    f(uint64_t{});
  else
    throw RuntimeError(std::string(what) + " is " + std::to_string(bytes) + " bytes wide (4 or 8 expected)");
}
// The checks params_of(op) needs (tables present); throws RuntimeError.
void check_op_pointers(const Op& op);

}  // namespace joinlab
