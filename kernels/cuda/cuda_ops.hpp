// Maps each Op of core/exec/ops.hpp onto the typed kernels of kernels.hpp: checks its buffers,
// queues its kernels on a stream, and turns the result words into an OpResult.
#pragma once
#include <cstdint>

#include "core/exec/ops.hpp"
#include "kernels/cuda/kernels.hpp"

namespace joinlab::cuda {

// Result values the operator reports (Histogram: fanout; Partition: segments * fanout + 1).
size_t result_value_count(const Op& op);
// True for operators that run on the host (generation into pageable host memory).
bool runs_on_host(const Op& op);
void run_on_host(const Op& op);
// Checks the operator's buffers and sizes (RuntimeError naming the operator, buffer and sizes),
// applies its immediate effects (Build sets table->rows), and queues its kernels. d_words has
// kFirstValueWord + result_value_count(op) zeroed words.
void queue_op(KernelContext& ctx, const Op& op, uint64_t* d_words);
// Fills `result` from the completed words; throws RuntimeError for errors kernels reported.
void finish_op(const Op& op, const uint64_t* words, OpResult& result);

}  // namespace joinlab::cuda
