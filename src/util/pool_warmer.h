// PoolWarmer: a thread that makes the sizes a BufferPool notes present as soon as they are
// noted (BufferPool::WarmOne), where the engine's own warming waits until it is idle.
//
// For a process whose model leaves a host core free while it computes: its layers on a GPU
// (the host waits on the device for most of a prefill), or fewer model threads than cores.
// A growing session's captures and publishes take fresh memory every request (the RAM tier
// evicts nothing to reuse yet), and a client that sends the next request as soon as the last
// answer ends leaves the engine no idle time to warm it; this thread refills the pool while the
// model runs, so the next captures land in present memory. Where every core runs the model it
// would take one from it: the engine then warms only while idle (MemoryWarming, engine/options.h).
//
// Several warmers on one pool (one per engine of a process) share its notes: WarmOne takes each
// noted size once, whichever warmer runs it.
//
// Thread-safety: constructed and destroyed on one thread; nothing else to call.
#pragma once

#include <atomic>
#include <thread>

#include "util/buffer_pool.h"

namespace prefixd {

class PoolWarmer {
 public:
  // Starts the thread. REQUIRES: `pool` outlives the warmer.
  explicit PoolWarmer(BufferPool& pool);
  // Stops the thread (a buffer being warmed is freed, its size stays noted) and joins it.
  ~PoolWarmer();
  PoolWarmer(const PoolWarmer&) = delete;
  PoolWarmer& operator=(const PoolWarmer&) = delete;

 private:
  void Run();

  BufferPool& pool_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace prefixd
