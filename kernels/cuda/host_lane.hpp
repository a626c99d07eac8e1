// Host work ordered with a CUDA stream: what CudaRank runs on its CPUs (operators whose data is in
// pageable host memory: gpj's senders, gpj-h's CPU join, crj) keeps the order of the stream it
// was launched on, as if it were a kernel.
//
// One lane per stream: a worker thread runs the lane's jobs in order. At submission the stream gets
// two operations: write the job's ticket into a mapped pinned word `started` (cuStreamWriteValue32:
// when the stream's earlier work is complete), then wait until the mapped word `done` reaches the
// ticket (cuStreamWaitValue32); where the driver lacks stream memory operations, one-thread kernels
// do both. The worker polls `started`, runs the job, and writes the ticket into `done`, whether the
// job succeeded or threw: the stream never waits for a job that will not come. The worker makes no
// CUDA call (a thread that queues a copy from pageable memory may hold the driver until the stream
// reaches the copy, i.e. until the job is done), and no host work runs inside a CUDA callback.
#pragma once
#include <cuda_runtime.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "core/exec/rank.hpp"

namespace joinlab::cuda {

// A stream's write of / wait for a 32-bit word of mapped pinned memory (`word`: its host address),
// in the stream's order: cuStreamWriteValue32 (after the stream's earlier work, fenced like
// __threadfence_system) and cuStreamWaitValue32 (until int32_t(*word - value) >= 0); one-thread
// kernels where the driver has no stream memory operations. The lanes' tickets and the fabric's
// gates (cuda_fabric.cu) use them.
void stream_write_word(cudaStream_t st, uint32_t* word, uint32_t value);
void stream_wait_word(cudaStream_t st, const uint32_t* word, uint32_t value);
// The same for a 64-bit word (cuStreamWriteValue64, or a one-thread kernel where the device has
// no 64-bit stream memory operations): the peer fabric's completion flags, set in the stream's
// order after a put's copy with no host thread involved.
void stream_write_word64(cudaStream_t st, uint64_t* word, uint64_t value);

// Completion of one host job: the host waits for the job itself (and gets its error); streams
// wait for `event`, recorded on the lane's stream after the stream's wait for the job.
class HostJobEvent : public EventImpl {
 public:
  HostJobEvent();
  ~HostJobEvent() override;
  void wait() override;  // rethrows the job's error
  bool done() override;  // likewise, once it ended
  cudaEvent_t event() const { return event_; }

 private:
  friend class HostLane;
  void finish(std::exception_ptr error);
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  cudaEvent_t event_ = nullptr;
};

class HostLane {
 public:
  explicit HostLane(cudaStream_t stream);
  ~HostLane();  // runs the jobs still queued, then stops
  HostLane(const HostLane&) = delete;
  HostLane& operator=(const HostLane&) = delete;

  // Queues `job` after the stream's work so far; the stream's later work waits for it. The call
  // must come from the thread that queues the stream's work (the stream order is the call order).
  Event submit(std::function<void()> job);
  // Rethrows the first error of a job on this lane (later work of the stream would build on
  // what it did not do, as after a sticky CUDA error).
  void check() const;

 private:
  struct Job {
    uint32_t ticket = 0;
    std::function<void()> run;
    std::shared_ptr<HostJobEvent> done;
  };
  void loop();
  bool wait_started(uint32_t ticket);  // false: the lane is stopping

  cudaStream_t stream_;
  uint32_t* words_ = nullptr;  // mapped pinned: [0] the ticket the stream reached, [1] the last job done
  uint32_t issued_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::exception_ptr failed_;
  std::thread thread_;  // last: starts after everything above
};

}  // namespace joinlab::cuda
