// Progress of a long `joinlab run`: a ticker thread prints "point i/N, repeat j/M, elapsed, about
// T s left" lines to stderr once the run has gone on for a few seconds, then every few seconds. Lines are
// written whole under console_mutex(), which the results table on stdout also holds, so the two
// never interleave on a terminal.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>

namespace joinlab {

std::mutex& console_mutex();

// Seconds left at the mean pace of the points done so far (elapsed_s over done of total); negative
// when none is done yet. Points differ in cost, so it is an estimate that improves as they finish.
double seconds_left(double elapsed_s, int done, int total);

class ProgressTicker {
 public:
  // Prints nothing when !enabled; otherwise the first line after `delay`, then every `interval`.
  ProgressTicker(std::ostream& err, bool enabled, std::chrono::milliseconds delay = std::chrono::seconds(3),
                 std::chrono::milliseconds interval = std::chrono::seconds(5));
  ~ProgressTicker();
  ProgressTicker(const ProgressTicker&) = delete;
  ProgressTicker& operator=(const ProgressTicker&) = delete;

  void point(int index, int count, const std::string& label);  // 0-based index
  void repeat(int index, int count);                           // 0-based index

 private:
  void loop();
  std::string line() const;  // under mu_

  using Clock = std::chrono::steady_clock;
  std::ostream& err_;
  std::chrono::milliseconds delay_, interval_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  Clock::time_point start_ = Clock::now(), point_start_ = Clock::now();
  int point_ = 0, points_ = 1, repeat_ = 0, repeats_ = 1;
  std::string label_;
  std::thread thread_;
};

}  // namespace joinlab
