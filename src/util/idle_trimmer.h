// IdleTrimmer: gives the allocator's free memory back to the kernel once a server has gone
// idle after work (TrimAllocator, util/process_memory.h). glibc keeps what a request freed in
// its arenas for the next one; between bursts of work that memory is RSS nobody uses, and on a
// long-running server it is where RSS creeps. Trimming per request would cost milliseconds
// each; trimming once the work stops costs them only when nothing waits.
//
// A thread of its own polls `activity` every `poll`: once the value has changed since the
// last trim and then stayed the same for one whole poll while `busy` said false, it trims
// once, and waits for the next change.
//
// Thread-safety: trims() and trimmed_bytes() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

#include "util/mutex.h"

namespace prefixd {

class IdleTrimmer {
 public:
  struct Options {
    std::chrono::milliseconds poll{1000};
    // A number that changes whenever work was done (requests finished, say). REQUIRES: set.
    std::function<uint64_t()> activity;
    // True while work is under way (a request running or queued). REQUIRES: set.
    std::function<bool()> busy;
    // What trims; default TrimAllocator. Returns the bytes it gave back.
    std::function<uint64_t()> trim;
  };
  explicit IdleTrimmer(Options options);
  // Stops the thread (it may be in one trim: milliseconds).
  ~IdleTrimmer();
  IdleTrimmer(const IdleTrimmer&) = delete;
  IdleTrimmer& operator=(const IdleTrimmer&) = delete;

  uint64_t trims() const { return trims_.load(); }
  uint64_t trimmed_bytes() const { return trimmed_bytes_.load(); }

 private:
  void Loop(uint64_t start);

  const Options options_;
  Mutex mu_;
  CondVar cv_;
  bool stop_ PREFIXD_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> trims_{0};
  std::atomic<uint64_t> trimmed_bytes_{0};
  std::thread thread_;
};

}  // namespace prefixd
