#include "router/model_pool.h"

#include <sys/stat.h>

#include <algorithm>
#include <thread>

#include "server/request_log.h"

namespace prefixd::router {

namespace {

uint64_t FileBytes(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? uint64_t(st.st_size) : 0;
}

// What its server maps from disk: the model's file and its projector's.
uint64_t SpecBytes(const ModelSpec& spec) {
  return FileBytes(spec.path) + (spec.mmproj.empty() ? 0 : FileBytes(spec.mmproj));
}

std::string MiB(uint64_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20) + " MiB"; }

// `ids` ordered by `when` (least recent first): the eviction order.
template <typename TimePoint>
std::vector<size_t> OldestFirst(std::vector<std::pair<TimePoint, size_t>> by_time) {
  std::sort(by_time.begin(), by_time.end());
  std::vector<size_t> out;
  for (const auto& [when, index] : by_time) out.push_back(index);
  return out;
}

void LogUnload(const std::string& id, const char* reason) {
  server::WriteLogLine(server::LogLine("model_unloaded").Add("model", id).Add("reason", reason));
}

}  // namespace

const char* ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kUnloaded: return "unloaded";
    case ModelState::kLoading: return "loading";
    case ModelState::kLoaded: return "loaded";
    case ModelState::kUnloading: return "unloading";
    case ModelState::kFailed: return "failed";
  }
  return "unloaded";
}

struct ModelPool::Entry {
  ModelState state = ModelState::kUnloaded;
  std::unique_ptr<ModelProcess> process;  // while kLoaded (and during kUnloading)
  int in_flight = 0;
  Clock::time_point last_used{};
  uint64_t memory_bytes = 0;  // last measured; 0: never loaded
  int64_t loads = 0;
  std::string last_error;
  KeepAlive keep_alive;  // the last request's, if it asked
  int64_t n_ctx = 0;     // its server's, as the last load said
};

ModelPool::ModelPool(std::vector<ModelSpec> specs, ModelLauncher* launcher, PoolOptions options)
    : options_(options), launcher_(launcher), entries_(specs.size()), specs_(std::move(specs)) {}

ModelPool::~ModelPool() {
  StopAll();
  // Forwarding threads still hold leases until their upstream requests end, which the stops
  // bring about: wait for them (bounded), so that no Release() outlives the pool.
  MutexLock lock(&mu_);
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    int held = 0;
    for (const Entry& e : entries_) held += e.in_flight;
    if (held == 0 || !cv_.WaitUntil(lock, deadline)) break;
  }
}

void ModelPool::StopAll() {
  MutexLock lock(&mu_);
  stopped_ = true;
  std::vector<size_t> running;
  for (size_t i = 0; i < entries_.size(); ++i) {
    if (entries_[i].state == ModelState::kLoaded) running.push_back(i);
  }
  StopEntries(running);  // each server flushes its disk tier and exits, in turn
}

ModelPool::Lease::Lease(Lease&& other) noexcept { *this = std::move(other); }

ModelPool::Lease& ModelPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    if (pool_) pool_->Release(index_);
    pool_ = std::exchange(other.pool_, nullptr);
    index_ = other.index_;
    id_ = std::move(other.id_);
    port_ = other.port_;
  }
  return *this;
}

ModelPool::Lease::~Lease() {
  if (pool_) pool_->Release(index_);
}

size_t ModelPool::IndexOf(const std::string& id) const {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].id == id) return i;
  }
  return specs_.size();
}

std::optional<std::chrono::milliseconds> ModelPool::TtlOf(size_t index) const {
  const KeepAlive& k = entries_[index].keep_alive;
  if (k.kind == KeepAlive::Kind::kForever) return std::nullopt;
  if (k.kind == KeepAlive::Kind::kFor) return k.idle;
  const ModelSpec& s = specs_[index];
  const int ttl_s = s.ttl_s >= 0 ? s.ttl_s : options_.default_ttl_s;
  if (ttl_s == 0) return std::nullopt;
  const std::chrono::milliseconds configured(int64_t(ttl_s) * 1000);
  return k.kind == KeepAlive::Kind::kAtLeast ? std::max(configured, k.idle) : configured;
}

Result<std::string> ModelPool::Resolve(const std::string& name) const {
  for (const ModelSpec& s : specs_) {
    if (s.id == name) return s.id;
  }
  for (const ModelSpec& s : specs_) {
    if (SpecMatches(s, name)) return s.id;
  }
  std::string ids;
  for (const ModelSpec& s : specs_) ids += (ids.empty() ? "" : ", ") + s.id;
  return Status::NotFound("model '" + name + "' is not served here; the models are: " + ids);
}

uint64_t ModelPool::EstimateLocked(size_t index) const {
  const Entry& e = entries_[index];
  return e.memory_bytes > 0 ? e.memory_bytes : SpecBytes(specs_[index]) + overhead_bytes_;
}

Result<std::vector<size_t>> ModelPool::Victims(size_t index, bool* wait) const {
  *wait = false;
  const uint64_t need = EstimateLocked(index);
  const uint64_t budget = options_.memory_budget;
  if (budget > 0 && need > budget) {
    return Status::ResourceExhausted("model " + specs_[index].id + " needs about " + MiB(need) +
                                     ", more than the models' memory budget (" + MiB(budget) + ")");
  }
  size_t count = 0, pinned_count = 0;
  uint64_t bytes = 0, pinned_bytes = 0;
  std::vector<std::pair<Clock::time_point, size_t>> idle;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (i == index || (e.state != ModelState::kLoaded && e.state != ModelState::kLoading &&
                       e.state != ModelState::kUnloading)) {
      continue;
    }
    const uint64_t m = e.state == ModelState::kLoading ? EstimateLocked(i) : e.memory_bytes;
    ++count;
    bytes += m;
    if (specs_[i].pinned && e.state != ModelState::kUnloading) {
      ++pinned_count;
      pinned_bytes += m;
    } else if (e.state == ModelState::kLoaded && e.in_flight == 0) {
      idle.emplace_back(e.last_used, i);
    }
  }
  auto over = [&](size_t c, uint64_t b) {
    return (options_.max_loaded > 0 && c + 1 > options_.max_loaded) ||
           (budget > 0 && b + need > budget);
  };
  if (over(pinned_count, pinned_bytes)) {
    return Status::ResourceExhausted("no room for model " + specs_[index].id +
                                     " beside the pinned models");
  }
  std::vector<size_t> victims;
  for (size_t v : OldestFirst(std::move(idle))) {
    if (!over(count, bytes)) break;
    victims.push_back(v);
    --count;
    bytes -= entries_[v].memory_bytes;
  }
  if (over(count, bytes)) {
    *wait = true;
    victims.clear();
  }
  return victims;
}

void ModelPool::StopEntries(const std::vector<size_t>& victims) {
  if (victims.empty()) return;
  std::vector<std::unique_ptr<ModelProcess>> stopping;
  for (size_t v : victims) {
    entries_[v].state = ModelState::kUnloading;
    stopping.push_back(std::move(entries_[v].process));
  }
  mu_.unlock();  // the caller's `lock` holds it again when this returns
  stopping.clear();  // SIGTERM each: its server flushes its disk tier and exits
  mu_.lock();
  for (size_t v : victims) entries_[v].state = ModelState::kUnloaded;
  cv_.notify_all();
}

Status ModelPool::LoadLocked(MutexLock& lock, size_t index, Clock::time_point deadline) {
  std::vector<size_t> victims;
  for (;;) {
    bool wait = false;
    PREFIXD_ASSIGN_OR_RETURN(victims, Victims(index, &wait));
    if (!wait) break;
    if (!cv_.WaitUntil(lock, deadline)) {
      return Status::ResourceExhausted("no room to load model " + specs_[index].id +
                                       ": the loaded models are busy");
    }
    const ModelState s = entries_[index].state;
    if (s != ModelState::kUnloaded && s != ModelState::kFailed) return Status::OK();
  }
  Entry& e = entries_[index];
  e.state = ModelState::kLoading;
  counters_.evictions += int64_t(victims.size());
  for (size_t v : victims) LogUnload(specs_[v].id, "room");
  StopEntries(victims);
  mu_.unlock();
  const Clock::time_point start = Clock::now();
  Result<std::unique_ptr<ModelProcess>> proc = launcher_->Launch(specs_[index]);
  const uint64_t memory = proc.ok() ? (*proc)->MemoryBytes() : 0;
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  mu_.lock();
  cv_.notify_all();
  if (!proc.ok()) {
    e.state = ModelState::kFailed;
    e.last_error = proc.status().message();
    ++counters_.load_failures;
    server::WriteLogLine(server::LogLine("model_load_failed")
                             .Add("model", specs_[index].id)
                             .Add("error", e.last_error));
    return proc.status();
  }
  e.process = std::move(*proc);
  e.state = ModelState::kLoaded;
  e.memory_bytes = memory;
  if (const int64_t n_ctx = e.process->n_ctx(); n_ctx > 0) e.n_ctx = n_ctx;
  // A server's memory beyond its file, just after its load: the least seen is what a model not
  // loaded yet is assumed to add to its file's size.
  const uint64_t file = SpecBytes(specs_[index]);
  const uint64_t overhead = memory > file ? memory - file : 0;
  overhead_bytes_ = counters_.loads == 0 ? overhead : std::min(overhead_bytes_, overhead);
  e.last_used = Clock::now();
  ++e.loads;
  ++counters_.loads;
  server::WriteLogLine(server::LogLine("model_loaded")
                           .Add("model", specs_[index].id)
                           .Add("port", (long long)e.process->port())
                           .Add("load_ms", ms)
                           .Add("memory_bytes", (long long)memory));
  return Status::OK();
}

bool ModelPool::NoticeEndLocked(size_t index) {
  Entry& e = entries_[index];
  if (e.state != ModelState::kLoaded || e.process->Alive()) return false;
  e.last_error = "its server " + e.process->ExitText();
  e.process.reset();
  e.state = ModelState::kUnloaded;
  ++counters_.crashes;
  server::WriteLogLine(server::LogLine("model_ended").Add("model", specs_[index].id).Add(
      "why", e.last_error));
  cv_.notify_all();
  return true;
}

Result<ModelPool::Lease> ModelPool::Acquire(const std::string& name, KeepAlive keep_alive) {
  PREFIXD_ASSIGN_OR_RETURN(std::string id, Resolve(name));
  const size_t index = IndexOf(id);
  const Clock::time_point deadline = Clock::now() + options_.wait_limit;
  MutexLock lock(&mu_);
  bool waited_for_load = false;
  for (;;) {
    if (stopped_) return Status::ResourceExhausted("the server is stopping");
    Entry& e = entries_[index];
    switch (e.state) {
      case ModelState::kLoaded:
        if (NoticeEndLocked(index)) continue;
        ++e.in_flight;
        e.last_used = Clock::now();
        if (keep_alive.kind != KeepAlive::Kind::kAsConfigured) e.keep_alive = keep_alive;
        return Lease(this, index, id, e.process->port());
      case ModelState::kFailed:
        if (waited_for_load) return Status::Internal(e.last_error);
        [[fallthrough]];
      case ModelState::kUnloaded:
        PREFIXD_RETURN_IF_ERROR(LoadLocked(lock, index, deadline));
        continue;
      case ModelState::kLoading:
      case ModelState::kUnloading:
        waited_for_load = waited_for_load || e.state == ModelState::kLoading;
        if (!cv_.WaitUntil(lock, deadline)) {
          return Status::ResourceExhausted("model " + id + " is still " +
                                           ModelStateName(e.state));
        }
        continue;
    }
  }
}

Status ModelPool::Load(const std::string& name) {
  PREFIXD_ASSIGN_OR_RETURN(Lease lease, Acquire(name));
  return Status::OK();
}

bool ModelPool::NoticeEnd(const std::string& name, int port, std::chrono::milliseconds wait) {
  Result<std::string> id = Resolve(name);
  if (!id.ok()) return false;
  const size_t index = IndexOf(*id);
  const Clock::time_point deadline = Clock::now() + wait;
  for (;;) {
    {
      MutexLock lock(&mu_);
      Entry& e = entries_[index];
      if (e.state != ModelState::kLoaded || e.process->port() != port) return true;
      if (NoticeEndLocked(index)) return true;
    }
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status ModelPool::Unload(const std::string& name) {
  PREFIXD_ASSIGN_OR_RETURN(std::string id, Resolve(name));
  const size_t index = IndexOf(id);
  const Clock::time_point deadline = Clock::now() + options_.wait_limit;
  MutexLock lock(&mu_);
  Entry& e = entries_[index];
  while (e.state == ModelState::kLoading || e.state == ModelState::kUnloading) {
    if (!cv_.WaitUntil(lock, deadline)) {
      return Status::ResourceExhausted("model " + id + " is still " + ModelStateName(e.state));
    }
  }
  if (e.state != ModelState::kLoaded || NoticeEndLocked(index)) return Status::OK();
  if (e.in_flight > 0) {
    return Status::Aborted("model " + id + " has " + std::to_string(e.in_flight) +
                                      " request(s) in flight; unload it once they end");
  }
  LogUnload(id, "request");
  StopEntries({index});
  return Status::OK();
}

void ModelPool::Release(size_t index) {
  MutexLock lock(&mu_);
  --entries_[index].in_flight;
  entries_[index].last_used = Clock::now();
  cv_.notify_all();
}

void ModelPool::Start() {
  for (const ModelSpec& s : specs_) {
    if (!s.pinned) continue;
    Status st = Load(s.id);
    if (!st.ok()) {
      server::WriteLogLine(server::LogLine("warning").Add(
          "message", "pinned model " + s.id + " did not load: " + st.message()));
    }
  }
}

void ModelPool::Tick() {
  MutexLock lock(&mu_);
  const Clock::time_point now = Clock::now();
  std::vector<size_t> idle;
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (e.state != ModelState::kLoaded || NoticeEndLocked(i)) continue;
    e.memory_bytes = e.process->MemoryBytes();
    const std::optional<std::chrono::milliseconds> ttl = TtlOf(i);
    if (!specs_[i].pinned && e.in_flight == 0 && ttl && now - e.last_used >= *ttl) {
      idle.push_back(i);
    }
  }
  counters_.idle_unloads += int64_t(idle.size());
  for (size_t v : idle) LogUnload(specs_[v].id, "ttl");
  StopEntries(idle);
  const std::vector<size_t> over = OverBudgetLocked();
  counters_.evictions += int64_t(over.size());
  for (size_t v : over) LogUnload(specs_[v].id, "memory");
  StopEntries(over);
}

std::vector<size_t> ModelPool::OverBudgetLocked() const {
  if (options_.memory_budget == 0) return {};
  uint64_t total = 0;
  std::vector<std::pair<Clock::time_point, size_t>> idle;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (e.state != ModelState::kLoaded && e.state != ModelState::kLoading) continue;
    total += e.state == ModelState::kLoaded ? e.memory_bytes : EstimateLocked(i);
    if (e.state == ModelState::kLoaded && e.in_flight == 0 && !specs_[i].pinned) {
      idle.emplace_back(e.last_used, i);
    }
  }
  std::vector<size_t> victims;
  for (size_t v : OldestFirst(std::move(idle))) {
    if (total <= options_.memory_budget) break;
    victims.push_back(v);
    total -= entries_[v].memory_bytes;
  }
  return victims;
}

std::vector<ModelView> ModelPool::List() const {
  MutexLock lock(&mu_);
  const Clock::time_point now = Clock::now();
  std::vector<ModelView> out;
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    const ModelSpec& s = specs_[i];
    ModelView v;
    v.id = s.id;
    v.aliases = s.aliases;
    v.path = s.path;
    v.state = e.state;
    v.pinned = s.pinned;
    const std::optional<std::chrono::milliseconds> ttl = TtlOf(i);
    v.ttl_s = ttl ? (ttl->count() + 999) / 1000 : -1;
    v.in_flight = e.in_flight;
    v.memory_bytes = e.memory_bytes;
    v.port = e.state == ModelState::kLoaded ? e.process->port() : 0;
    v.loads = e.loads;
    if (e.state == ModelState::kLoaded && e.in_flight == 0) {
      v.idle_ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - e.last_used).count();
    }
    v.last_error = e.last_error;
    v.n_ctx = e.n_ctx;
    out.push_back(std::move(v));
  }
  return out;
}

PoolCounters ModelPool::counters() const {
  MutexLock lock(&mu_);
  return counters_;
}

}  // namespace prefixd::router
