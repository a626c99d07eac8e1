// Maps each Op of core/exec/ops.hpp onto the typed kernels of kernels.hpp: checks its buffers,
// queues its kernels on a stream, and turns the result words into an OpResult.
#pragma once
#include <cstdint>
#include <memory>

#include "core/exec/ops.hpp"
#include "kernels/cuda/kernels.hpp"

namespace joinlab::cuda {

// Result values the operator reports (Histogram: fanout; Partition: segments * fanout + 1).
size_t result_value_count(const Op& op);
// True for operators that CudaRank runs on its CPUs with the CPU kernels (core/runtime/cpu_ops.hpp):
// those with data in pageable host memory (MemSpace::Host), which kernels cannot reach, and none in
// device memory (pinned buffers are readable by both). gpj's senders, gpj-h's CPU join and crj.
bool runs_on_host(const Op& op);
// PackChunksOp always (the senders are CPUs); StreamConsumeOp when its rings, tables or output
// are in pageable host memory (the CPU consumer polls them).
bool runs_on_host(const StreamingOp& op);
void run_on_host(const Op& op);
// Checks the operator's buffers and sizes (RuntimeError naming the operator, buffer and sizes),
// applies its immediate effects (Build sets table->rows), and queues its kernels. d_words has
// kFirstValueWord + result_value_count(op) zeroed words.
void queue_op(KernelContext& ctx, const Op& op, uint64_t* d_words);
// Fills `result` from the completed words; throws RuntimeError for errors kernels reported.
void finish_op(const Op& op, const uint64_t* words, OpResult& result);

// gpj's persistent consumer (StreamConsumeOp, kernels/cuda/stream_consume.cu): checks the operator,
// clears its tables and queues one kernel that runs until every ring delivered its chunks (or an
// error, a timeout or the cancel word stops it). The host copies `nwords` words from d_words once
// it ended; `keep` holds what must outlive the kernel (the progress words' host registration).
struct ConsumeLaunch {
  uint64_t* d_words = nullptr;
  size_t nwords = 0;
  std::shared_ptr<void> keep;
};
ConsumeLaunch queue_stream_consume(KernelContext& ctx, const StreamConsumeOp& op);
// The count and overflow from the copied words; throws the consumer's error (RuntimeError naming
// the chunk, as the CPU consumer does).
void finish_stream_consume(const StreamConsumeOp& op, const uint64_t* words, OpResult& result);

}  // namespace joinlab::cuda
