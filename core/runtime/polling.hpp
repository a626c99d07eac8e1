// Bounded polling waits (transports, the gpj consumer): spin briefly, then sleep with a
// growing pause (2 cores may carry 4 ranks with their progress threads: a waiting rank must
// leave the cores to the ones that work), and give up at a deadline.
#pragma once
#include <chrono>
#include <iomanip>
#include <sstream>
#include <string>
#include <thread>

namespace joinlab {

class Backoff {
 public:
  void reset() { idle_ = 0; }
  void pause() {
    if (++idle_ < 16) {
      std::this_thread::yield();
      return;
    }
    const int us = idle_ < 64 ? 10 : idle_ < 256 ? 100 : 500;
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  }

 private:
  int idle_ = 0;
};

class Deadline {
 public:
  explicit Deadline(double seconds)
      : at_(std::chrono::steady_clock::now() +
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds))) {}
  bool passed() const { return std::chrono::steady_clock::now() >= at_; }

 private:
  std::chrono::steady_clock::time_point at_;
};

inline std::string seconds_text(double s) {
  std::ostringstream o;
  o << std::setprecision(s < 10 ? 2 : 3) << s << " s";
  return o.str();
}

}  // namespace joinlab
