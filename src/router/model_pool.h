// ModelPool: which of the router's models are loaded, and the rules for loading and unloading
// them. Pure policy over a ModelLauncher (model_process.h); the router's HTTP side (router.h)
// holds a Lease for every request it forwards.
//
// Rules:
//  - A request's model (its id or an alias) is loaded on first use, once: requests that arrive
//    while it loads wait for that load, and all of them get its error if it fails. A request
//    that finds a failed model tries the load again (the file may have been fixed).
//  - Room: at most `max_loaded` models and `memory_budget` bytes (the loaded servers' resident
//    memory, measured; a model not yet measured counts its file size plus the least any
//    server has held beyond its file just after loading). Loading past either
//    unloads the least recently used model that is idle (no request in flight) and not
//    pinned. With no such model the request waits for one, up to `wait_limit`, then 503s. A
//    model that cannot fit even alone, or beside the pinned ones, is an error at once.
//  - A model with a request in flight is never unloaded: Unload() refuses (Aborted),
//    eviction skips it, the idle timer waits for it.
//  - Memory grows after a load (a RAM tier fills): Tick() measures, and while the total is over
//    the budget unloads the least recently used idle unpinned models.
//  - Idle timeout: a model idle for its ttl (the spec's, else `default_ttl_s`; 0: never) is
//    unloaded by Tick(). Pinned models are loaded at Start() and never unloaded but by Unload().
//  - A server that exits by itself (a crash) is noticed at the next Acquire() or Tick(): the
//    model is unloaded and loads again on its next request.
// Unloading stops the model's server, which flushes its disk tier first: its cache stays on
// disk and its next load restores the same prefixes.
//
// Thread-safety: every method may be called from any thread. Launches and stops happen outside
// the pool's lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "router/model_process.h"
#include "router/models_config.h"
#include "util/mutex.h"
#include "util/status.h"

namespace prefixd::router {

enum class ModelState { kUnloaded, kLoading, kLoaded, kUnloading, kFailed };
const char* ModelStateName(ModelState state);

struct PoolOptions {
  size_t max_loaded = 0;       // 0: no limit on the count
  uint64_t memory_budget = 0;  // bytes; 0: no limit
  int default_ttl_s = 0;       // 0: idle models stay loaded
  std::chrono::milliseconds wait_limit{120000};
};

// One model as /v1/models shows it.
struct ModelView {
  std::string id;
  std::vector<std::string> aliases;
  std::string path;
  ModelState state = ModelState::kUnloaded;
  bool pinned = false;
  int64_t ttl_s = 0;          // -1: forever; as configured or as the last request asked
  int in_flight = 0;
  uint64_t memory_bytes = 0;  // measured while loaded; the last measurement after
  int port = 0;               // while loaded
  int64_t loads = 0;
  int64_t idle_ms = 0;        // since its last request ended (loaded, idle)
  std::string last_error;     // the last failed load or server end, kept after later loads
  int64_t n_ctx = 0;          // its server's context per slot, as it said; kept after unload;
                              // 0: never loaded, or it did not say
};

// How long a model stays loaded once idle, as a request asks (Ollama's keep_alive, LM Studio's
// ttl): it replaces the model's ttl until the next request that asks.
// kAtLeast is a tenant's ask: `idle` only where it is longer than the configured ttl, so a
// tenant can keep a model longer (within the router's bound) but never unload it sooner.
struct KeepAlive {
  enum class Kind { kAsConfigured, kForever, kFor, kAtLeast } kind = Kind::kAsConfigured;
  std::chrono::milliseconds idle{0};  // kFor: 0 unloads it as soon as it is idle
};

struct PoolCounters {
  int64_t loads = 0;
  int64_t load_failures = 0;
  int64_t evictions = 0;     // unloaded to make room
  int64_t idle_unloads = 0;  // unloaded by the ttl
  int64_t crashes = 0;       // servers found ended
};

class ModelPool {
 public:
  // REQUIRES: launcher outlives the pool; specs as MergeSpecs() returns them.
  ModelPool(std::vector<ModelSpec> specs, ModelLauncher* launcher, PoolOptions options);
  // Stops every server (StopAll) and waits, bounded, for the leases still held.
  ~ModelPool();

  // A request's hold on a loaded model: the model is not unloaded while one exists.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    const std::string& id() const { return id_; }
    int port() const { return port_; }
    explicit operator bool() const { return pool_ != nullptr; }

   private:
    friend class ModelPool;
    Lease(ModelPool* pool, size_t index, std::string id, int port)
        : pool_(pool), index_(index), id_(std::move(id)), port_(port) {}
    ModelPool* pool_ = nullptr;
    size_t index_ = 0;
    std::string id_;
    int port_ = 0;
  };

  // The id of the model `name` names, or NotFound listing the ids.
  Result<std::string> Resolve(const std::string& name) const;
  // Loads the model `name` names if needed and holds it. NotFound (unknown name), Internal
  // (its load failed: the message says why), ResourceExhausted (no room within wait_limit, or
  // never: the message says which).
  Result<Lease> Acquire(const std::string& name, KeepAlive keep_alive = KeepAlive());
  // Loads it (as Acquire, holding nothing after).
  Status Load(const std::string& name);
  // The model's server on `port` gave a request no answer: whether it has ended (a crash that
  // Acquire and Tick had not seen yet), waiting up to `wait` for the process to be reaped. True
  // when it has, or when that server is gone already (another request noticed it, or a new one
  // was loaded): the next Acquire loads it again. False while it still runs.
  bool NoticeEnd(const std::string& name, int port, std::chrono::milliseconds wait);
  // Unloads it. Aborted while a request holds it; OK when it was not loaded.
  Status Unload(const std::string& name);
  // Stops every model's server (each flushes its disk tier first) and loads nothing more: the
  // server is stopping. Requests in flight end as their servers do.
  void StopAll();
  // Loads the pinned models (in order; a failure is logged and leaves the model failed).
  void Start();
  // Unloads idle models past their ttl, notices ended servers, measures memory. Call every
  // second or so.
  void Tick();

  std::vector<ModelView> List() const;
  PoolCounters counters() const;

 private:
  struct Entry;
  using Clock = std::chrono::steady_clock;

  void Release(size_t index);
  Status LoadLocked(MutexLock& lock, size_t index, Clock::time_point deadline)
      PREFIXD_REQUIRES(mu_);
  // The models to unload so that `index` fits; an error when it never can; an empty list with
  // `wait` set when it can once requests end.
  Result<std::vector<size_t>> Victims(size_t index, bool* wait) const PREFIXD_REQUIRES(mu_);
  // Stops the victims' servers, letting mu_ go while they stop.
  void StopEntries(const std::vector<size_t>& victims) PREFIXD_REQUIRES(mu_);
  bool NoticeEndLocked(size_t index) PREFIXD_REQUIRES(mu_);
  // Idle unpinned models to unload, least recently used first, while the measured total is
  // over the budget (a model's RAM tier grows after its load).
  std::vector<size_t> OverBudgetLocked() const PREFIXD_REQUIRES(mu_);
  uint64_t EstimateLocked(size_t index) const PREFIXD_REQUIRES(mu_);
  // How long the model stays loaded idle; nullopt: forever.
  std::optional<std::chrono::milliseconds> TtlOf(size_t index) const PREFIXD_REQUIRES(mu_);
  size_t IndexOf(const std::string& id) const;

  const PoolOptions options_;
  ModelLauncher* const launcher_;
  mutable Mutex mu_;
  CondVar cv_;  // signalled when a state or an in-flight count changes
  std::vector<Entry> entries_ PREFIXD_GUARDED_BY(mu_);
  std::vector<ModelSpec> specs_;  // immutable; entries_[i] is specs_[i]
  PoolCounters counters_ PREFIXD_GUARDED_BY(mu_);
  uint64_t overhead_bytes_ PREFIXD_GUARDED_BY(mu_) = 0;  // see LoadLocked
  bool stopped_ PREFIXD_GUARDED_BY(mu_) = false;        // StopAll() was called
};

}  // namespace prefixd::router
