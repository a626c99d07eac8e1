// The streaming operators of gpj (core/exec/ops.hpp, StreamingOp) on CPU threads: packing chunk
// images on the senders, and the persistent consumer on the receivers - on the CPU backend the
// ring buffers are host memory and the consumer is the stream worker thread that polls them.
// CpuRank::launch_streaming runs these on a stream worker; tests call them directly.
#pragma once
#include "core/exec/ops.hpp"

namespace joinlab {

// Bad arguments (views past their buffers, rings that do not fit, mismatched widths) throw
// RuntimeError naming the operator; the consumer's chunk errors name the chunk (ops.hpp).
void execute_cpu_streaming_op(const StreamingOp& op, int threads, OpResult& result);

}  // namespace joinlab
