#include "util/pool_warmer.h"

namespace prefixd {

PoolWarmer::PoolWarmer(BufferPool& pool) : pool_(pool), thread_([this] { Run(); }) {}

PoolWarmer::~PoolWarmer() {
  stop_.store(true);
  pool_.Interrupt();
  thread_.join();
}

void PoolWarmer::Run() {
  const auto stop = [this] { return stop_.load(std::memory_order_relaxed); };
  while (pool_.AwaitNoted(stop_)) pool_.WarmOne(stop);
}

}  // namespace prefixd
