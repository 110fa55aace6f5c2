// Stopwatch: wall time in milliseconds on the steady clock, in laps.
#pragma once

#include <chrono>

namespace prefixd {

class Stopwatch {
 public:
  Stopwatch() : last_(std::chrono::steady_clock::now()) {}

  // Milliseconds since construction or the previous Lap(); starts the next lap.
  double Lap() {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
    return ms;
  }

 private:
  std::chrono::steady_clock::time_point last_;
};

}  // namespace prefixd
