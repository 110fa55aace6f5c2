// Admission: a cheap early 503 for generation requests when the server is saturated.
//
// A request that does work (the routes wrapped in Admitted, routes.h: generation, and
// tokenizing or rendering on the HTTP thread) is parsed and its chat rendered on its HTTP thread
// before the engine's queue can refuse it; under a flood of clients, that work for requests
// that end in 503 anyway took the CPU from the admitted ones (64 clients on 2 slots and a queue
// of 8 got 16 results a minute, p50 53 s; docs/bench.md, "Load test"). Admission counts these
// requests from the moment their body has been read to the end of their handler (parsing,
// rendering, waiting in the engine's queue, running — a stream until its first text), and
// refuses more than `limit` of them at once before any parsing. The engine's own queue limit
// still decides exactly; this only sheds load early. With limit = slots + max queue, a refused
// request is one the engine would have refused or made wait behind a full queue.
//
// Each HTTP thread serves one request at a time, so a thread remembers whether its current
// request holds a place: Release() on the same thread frees it (idempotent), and Admit() first
// frees a place a previous request on this thread failed to release.
//
// Thread-safety: every method may be called from any HTTP thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

namespace prefixd::server {

class Admission {
 public:
  // `limit` 0: no limit (every request is admitted, nothing is counted).
  explicit Admission(size_t limit) : limit_(limit) {}
  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // Takes a place for the calling thread's request; false (nothing taken) when all are held.
  bool Admit();
  // Frees the calling thread's place, if it holds one of this Admission's.
  void Release();

  size_t n_admitted() const { return n_admitted_.load(); }
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  std::atomic<size_t> n_admitted_{0};
};


}  // namespace prefixd::server
