#include "kernels/cuda/host_lane.hpp"

#include <cuda.h>  // the types of cuStreamWaitValue32 (called through the runtime's entry point)

#include <atomic>
#include <chrono>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_rank.hpp"
#include "kernels/cuda/driver_entry.hpp"

namespace joinlab::cuda {

namespace {

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
using WriteValue64 = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

// Stream memory operations (driver_entry: null where the driver has none).
WaitValue32 wait_value32() {
  static const WaitValue32 fn = driver_entry<WaitValue32>("cuStreamWaitValue32");
  return fn;
}
WriteValue32 write_value32() {
  static const WriteValue32 fn = driver_entry<WriteValue32>("cuStreamWriteValue32");
  return fn;
}
// Null also once a call was refused (a device without 64-bit stream memory operations).
std::atomic<bool> no_write_value64{false};
WriteValue64 write_value64() {
  static const WriteValue64 fn = driver_entry<WriteValue64>("cuStreamWriteValue64");
  return no_write_value64.load(std::memory_order_relaxed) ? nullptr : fn;
}

// The fallbacks: one thread writes the word after the stream's earlier work, or polls it
// (wrap-around safe, like CU_STREAM_WAIT_VALUE_GEQ).
__global__ void write_word_kernel(volatile uint32_t* word, uint32_t ticket) {
  __threadfence_system();
  *word = ticket;
}
__global__ void write_word64_kernel(volatile uint64_t* word, uint64_t value) {
  __threadfence_system();
  *word = value;
}
__global__ void wait_word_kernel(const volatile uint32_t* word, uint32_t ticket) {
  while (int32_t(*word - ticket) < 0) __nanosleep(2000);
}

uint32_t load(const uint32_t* w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }

template <class T>
T* device_address(const T* word) {
  void* d = nullptr;
  JL_CUDA_CHECK(cudaHostGetDevicePointer(&d, const_cast<T*>(word), 0));
  return static_cast<T*>(d);
}

}  // namespace

// --- stream operations on mapped words -----------------------------------------------------------------

void stream_write_word(cudaStream_t st, uint32_t* word, uint32_t value) {
  uint32_t* d = device_address(word);
  if (WriteValue32 write = write_value32()) {
    if (write(reinterpret_cast<CUstream>(st), CUdeviceptr(d), value, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS)
      throw RuntimeError("queuing a word write on a CUDA stream: cuStreamWriteValue32 failed");
    return;
  }
  write_word_kernel<<<1, 1, 0, st>>>(d, value);
  JL_CUDA_LAUNCHED("write_word_kernel");
}

void stream_write_word64(cudaStream_t st, uint64_t* word, uint64_t value) {
  uint64_t* d = device_address(word);
  if (WriteValue64 write = write_value64()) {
    if (write(reinterpret_cast<CUstream>(st), CUdeviceptr(d), value, CU_STREAM_WRITE_VALUE_DEFAULT) == CUDA_SUCCESS)
      return;
    no_write_value64.store(true, std::memory_order_relaxed);  // refused: the kernel from now on
  }
  write_word64_kernel<<<1, 1, 0, st>>>(d, value);
  JL_CUDA_LAUNCHED("write_word64_kernel");
}

void stream_wait_word(cudaStream_t st, const uint32_t* word, uint32_t value) {
  uint32_t* d = device_address(word);
  cudaError_t queued = cudaSuccess;
  if (WaitValue32 wait = wait_value32()) {
    if (wait(reinterpret_cast<CUstream>(st), CUdeviceptr(d), value, CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
      queued = cudaErrorUnknown;
  } else {
    wait_word_kernel<<<1, 1, 0, st>>>(d, value);
    queued = cudaGetLastError();
  }
  if (queued != cudaSuccess)
    throw_cuda_error(queued, "making a CUDA stream wait for a word (cuStreamWaitValue32)", __FILE__, __LINE__);
}

// --- HostJobEvent ----------------------------------------------------------------------------------

HostJobEvent::HostJobEvent() { JL_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
HostJobEvent::~HostJobEvent() {
  if (event_) cudaEventDestroy(event_);
}
void HostJobEvent::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> g(mu_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}
void HostJobEvent::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}
bool HostJobEvent::done() {
  std::lock_guard<std::mutex> g(mu_);
  if (done_ && error_) std::rethrow_exception(error_);
  return done_;
}

// --- HostLane ----------------------------------------------------------------------------------------

HostLane::HostLane(cudaStream_t stream) : stream_(stream) {
  words_ = static_cast<uint32_t*>(pinned_block_get(4096));
  __atomic_store_n(&words_[0], 0u, __ATOMIC_RELEASE);
  __atomic_store_n(&words_[1], 0u, __ATOMIC_RELEASE);
  thread_ = std::thread([this] { loop(); });
}

HostLane::~HostLane() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  pinned_block_put(words_, 4096);
}

void HostLane::check() const {
  std::lock_guard<std::mutex> g(mu_);
  if (failed_) std::rethrow_exception(failed_);
}

Event HostLane::submit(std::function<void()> run) {
  check();
  Job job;
  job.run = std::move(run);
  job.done = std::make_shared<HostJobEvent>();
  job.ticket = issued_ + 1;
  // The stream says when it reached the job; nothing waits on that yet, so a failure here leaves
  // the stream as it was.
  stream_write_word(stream_, &words_[0], job.ticket);
  // The stream waits for the job; from here on the job must run (or at least say it is done).
  stream_wait_word(stream_, &words_[1], job.ticket);
  issued_ = job.ticket;
  const cudaError_t after = cudaEventRecord(job.done->event(), stream_);
  Event e(job.done);
  {
    std::lock_guard<std::mutex> g(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  JL_CUDA_CHECK(after);
  return e;
}

bool HostLane::wait_started(uint32_t ticket) {
  for (int idle = 0; int32_t(load(&words_[0]) - ticket) < 0; ++idle) {
    if (idle < 64) {
      std::this_thread::yield();
      continue;
    }
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stop_) return false;  // the rank is going away (its streams failed)
    }
    std::this_thread::sleep_for(std::chrono::microseconds(idle < 1024 ? 20 : 200));
  }
  return true;
}

void HostLane::loop() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    std::exception_ptr error;
    if (!wait_started(job.ticket)) {
      error = std::make_exception_ptr(
          RuntimeError("host work on a CUDA stream: the rank shut down before the stream reached it"));
    } else {
      std::lock_guard<std::mutex> g(mu_);
      error = failed_;  // after a failure, later jobs fail with it
    }
    if (!error) {
      try {
        job.run();
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (error) {
      std::lock_guard<std::mutex> g(mu_);
      if (!failed_) failed_ = error;
    }
    __atomic_store_n(&words_[1], job.ticket, __ATOMIC_RELEASE);
    job.done->finish(error);
  }
}

}  // namespace joinlab::cuda
