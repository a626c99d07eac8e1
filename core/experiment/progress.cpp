#include "core/experiment/progress.hpp"

#include <algorithm>
#include <cstdio>

namespace joinlab {

std::mutex& console_mutex() {
  static std::mutex mu;
  return mu;
}

double seconds_left(double elapsed_s, int done, int total) {
  return done > 0 ? elapsed_s / done * (total - done) : -1;
}

ProgressTicker::ProgressTicker(std::ostream& err, bool enabled, std::chrono::milliseconds delay,
                               std::chrono::milliseconds interval)
    : err_(err), delay_(delay), interval_(interval) {
  if (enabled) thread_ = std::thread([this] { loop(); });
}

ProgressTicker::~ProgressTicker() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressTicker::point(int index, int count, const std::string& label) {
  std::lock_guard<std::mutex> g(mu_);
  point_ = index;
  points_ = count;
  label_ = label;
  repeat_ = 0;
  repeats_ = 1;
  point_start_ = Clock::now();
}

void ProgressTicker::repeat(int index, int count) {
  std::lock_guard<std::mutex> g(mu_);
  repeat_ = index;
  repeats_ = count;
}

std::string ProgressTicker::line() const {
  auto secs = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  char buf[200];
  const double in_point = secs(Clock::now() - point_start_);
  int at = std::snprintf(buf, sizeof buf, "joinlab: point %d/%d, repeat %d/%d, elapsed %.1f s (this point %.1f s)",
                         point_ + 1, points_, repeat_ + 1, repeats_, secs(Clock::now() - start_), in_point);
  const double left = seconds_left(secs(point_start_ - start_), point_, points_);
  if (left >= 0 && at > 0 && size_t(at) < sizeof buf)
    std::snprintf(buf + at, sizeof buf - size_t(at), ", about %.0f s left", std::max(left - in_point, 0.0));
  return label_.empty() ? std::string(buf) : std::string(buf) + ": " + label_;
}

void ProgressTicker::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  auto next = start_ + delay_;
  while (!wake_.wait_until(lock, next, [this] { return stop_; })) {
    std::string text = line();
    lock.unlock();
    {
      std::lock_guard<std::mutex> console(console_mutex());
      err_ << text << "\n" << std::flush;
    }
    lock.lock();
    next += interval_;
  }
}

}  // namespace joinlab
