#include "util/parallel.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace prefixd {

void ParallelFor(size_t n, size_t max_threads, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  const size_t helpers = std::min(n, std::max<size_t>(max_threads, 1)) - 1;
  if (helpers == 0) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<size_t> next{1};
  auto drain = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> threads;
  threads.reserve(helpers);
  for (size_t t = 0; t < helpers; ++t) threads.emplace_back(drain);
  fn(0);
  drain();
  for (std::thread& t : threads) t.join();
}

size_t SpareThreads(size_t cap) {
  const size_t hw = std::thread::hardware_concurrency();
  return std::clamp<size_t>(hw, 1, std::max<size_t>(cap, 1));
}

}  // namespace prefixd
