// How join kernels (probe, partitioned join, merge join) hand out their result rows, in the three
// output modes of core/exec/ops.hpp. A join is split into tasks (probe chunks, partitions, merge
// ranges) run by a thread team; each task calls emit(key, r_value, s_value) per match, and
// run_join_tasks turns that into:
//   CountOnly       a per-thread counter;
//   Direct          per-thread batches of kBatch rows whose output positions come from one atomic
//                   cursor (rui2017's direct output buffer); rows at or past capacity are dropped;
//   CountThenWrite  two passes over the tasks: the first counts each task's rows, a prefix sum
//                   gives every task its exact output range, the second writes there (rows in
//                   task order, deterministic); on overflow the second pass does not run. Tasks
//                   must emit the same rows both times.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cpu/parallel.hpp"
#include "kernels/cpu/streaming_store.hpp"

namespace joinlab::cpu {

template <class K, class VR, class VS>
struct CountEmitter {
  uint64_t n = 0;
  void operator()(K, VR, VS) { ++n; }
};

// Large outputs are written with streaming stores (streaming_store.hpp).
template <class K, class VR, class VS>
class DirectEmitter {
 public:
  static constexpr uint32_t kBatch = 512;
  DirectEmitter(const JoinSink<K, VR, VS>& sink, std::atomic<uint64_t>* cursor)
      : sink_(sink), cursor_(cursor),
        stream_(sink.capacity * (sizeof(K) + sizeof(VR) + sizeof(VS)) >= kStreamingBytes) {}
  void operator()(K k, VR rv, VS sv) {
    keys_[n_] = k;
    rvals_[n_] = rv;
    svals_[n_] = sv;
    if (++n_ == kBatch) flush();
  }
  void flush() {
    if (!n_) return;
    const uint64_t at = cursor_->fetch_add(n_, std::memory_order_relaxed);
    const uint64_t fit = at >= sink_.capacity ? 0 : std::min<uint64_t>(n_, sink_.capacity - at);
    if (fit && stream_) {
      stream_copy(sink_.keys + at, keys_, fit * sizeof(K));
      stream_copy(sink_.rvals + at, rvals_, fit * sizeof(VR));
      stream_copy(sink_.svals + at, svals_, fit * sizeof(VS));
    } else if (fit) {
      std::memcpy(sink_.keys + at, keys_, fit * sizeof(K));
      std::memcpy(sink_.rvals + at, rvals_, fit * sizeof(VR));
      std::memcpy(sink_.svals + at, svals_, fit * sizeof(VS));
    }
    n_ = 0;
  }
  // Call once, after the last row.
  void finish() {
    flush();
    if (stream_) _mm_sfence();
  }

 private:
  JoinSink<K, VR, VS> sink_;
  std::atomic<uint64_t>* cursor_;
  bool stream_;
  uint32_t n_ = 0;
  K keys_[kBatch];
  VR rvals_[kBatch];
  VS svals_[kBatch];
};

// Writes rows one after another from a position known in advance.
template <class K, class VR, class VS>
struct PositionedEmitter {
  K* keys;
  VR* rvals;
  VS* svals;
  uint64_t at;
  void operator()(K k, VR rv, VS sv) {
    keys[at] = k;
    rvals[at] = rv;
    svals[at] = sv;
    ++at;
  }
};

// Runs task(t, emit) for t in [0, tasks) on up to `threads` threads (dynamic schedule) and
// delivers the rows to `sink`. `task` must be callable with each emitter type above.
template <class K, class VR, class VS, class Task>
JoinCount run_join_tasks(uint64_t tasks, const JoinSink<K, VR, VS>& sink, int threads, Task&& task) {
  JoinCount result;
  const int team = int(std::max<uint64_t>(1, std::min<uint64_t>(uint64_t(threads), tasks)));
  const int64_t ntasks = int64_t(tasks);
  RegionErrors errors;
  switch (sink.mode) {
    case OutputMode::CountOnly: {
      uint64_t total = 0;
#pragma omp parallel num_threads(team) reduction(+ : total)
      {
        CountEmitter<K, VR, VS> emit;
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t t = 0; t < ntasks; ++t) errors.run([&] { task(uint64_t(t), emit); });
        total += emit.n;
      }
      result.count = total;
      break;
    }
    case OutputMode::Direct: {
      std::atomic<uint64_t> cursor{sink.first};
      std::vector<std::unique_ptr<DirectEmitter<K, VR, VS>>> emitters;  // allocated outside the region
      for (int t = 0; t < team; ++t) emitters.push_back(std::make_unique<DirectEmitter<K, VR, VS>>(sink, &cursor));
#pragma omp parallel num_threads(team)
      {
        DirectEmitter<K, VR, VS>& emit = *emitters[size_t(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t t = 0; t < ntasks; ++t) errors.run([&] { task(uint64_t(t), emit); });
        emit.finish();
      }
      result.count = cursor.load() - sink.first;
      break;
    }
    case OutputMode::CountThenWrite: {
      std::vector<uint64_t> at(tasks + 1, 0);  // counts, then each task's first output row
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
      for (int64_t t = 0; t < ntasks; ++t)
        errors.run([&] {
          CountEmitter<K, VR, VS> count;
          task(uint64_t(t), count);
          at[size_t(t)] = count.n;
        });
      errors.rethrow();
      uint64_t total = 0;
      for (uint64_t t = 0; t < tasks; ++t) {
        const uint64_t n = at[t];
        at[t] = sink.first + total;
        total += n;
      }
      result.count = total;
      if (sink.first + total > sink.capacity) break;  // overflow: nothing written
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
      for (int64_t t = 0; t < ntasks; ++t)
        errors.run([&] {
          PositionedEmitter<K, VR, VS> write{sink.keys, sink.rvals, sink.svals, at[size_t(t)]};
          task(uint64_t(t), write);
        });
      break;
    }
  }
  errors.rethrow();
  result.overflow = sink.mode != OutputMode::CountOnly && sink.first + result.count > sink.capacity;
  return result;
}

}  // namespace joinlab::cpu
