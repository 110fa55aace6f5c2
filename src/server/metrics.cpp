#include "server/metrics.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

#include "util/process_memory.h"

namespace prefixd::server {
namespace {

const std::vector<double>& LatencyBounds() {
  static const std::vector<double> kBounds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                              1,     2.5,  5,     10,   30,  60,  120, 300};
  return kBounds;
}

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void Header(const char* name, const char* type, const char* help, std::string* out) {
  *out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void Sample(const std::string& name, const std::string& labels, double v, std::string* out) {
  *out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + Num(v) + "\n";
}

// Label values are route names, tiers and miss reasons chosen by code; escape anyway.
std::string Label(const std::string& key, const std::string& value) {
  std::string v;
  for (char c : value) {
    if (c == '\\' || c == '"') v += '\\';
    if (c == '\n') { v += "\\n"; continue; }
    v += c;
  }
  return key + "=\"" + v + "\"";
}

void Counter(const char* name, const char* help, uint64_t v, std::string* out) {
  Header(name, "counter", help, out);
  Sample(name, "", double(v), out);
}

void Gauge(const char* name, const char* help, double v, std::string* out) {
  Header(name, "gauge", help, out);
  Sample(name, "", v, out);
}

void ByLabel(const char* name, const char* type, const char* help, const char* key,
             const std::map<std::string, uint64_t>& values, std::string* out) {
  Header(name, type, help, out);
  for (const auto& [k, v] : values) Sample(name, Label(key, k), double(v), out);
}

// The shared tier (--remote-cache): its state and what it did, by outcome.
void RenderRemote(const engine::RemoteTierStats& r, std::string* out) {
  Gauge("prefixd_remote_up", "1 when the shared tier (Redis) answered last, else 0.",
        r.up ? 1 : 0, out);
  Counter("prefixd_remote_down_total", "Times the shared tier became unreachable.", r.downs, out);
  Gauge("prefixd_remote_queue_depth", "Records waiting to be written to the shared tier.",
        double(r.queue_depth), out);
  ByLabel("prefixd_remote_puts_total", "counter", "Records sent to the shared tier, by outcome.",
          "outcome",
          {{"written", r.puts_written}, {"queue_full", r.put_drop_queue_full},
           {"down", r.put_drop_down}, {"rejected", r.put_fail_rejected},
           {"io_error", r.put_fail_io}},
          out);
  ByLabel("prefixd_remote_gets_total", "counter", "Record reads from the shared tier, by outcome.",
          "outcome",
          {{"hit", r.get_hits}, {"not_found", r.get_not_found}, {"corrupt", r.get_corrupt},
           {"error", r.get_errors}},
          out);
  Counter("prefixd_remote_skipped_down_total",
          "Shared-tier reads and lookups not sent because it was down.", r.skipped_down, out);
  ByLabel("prefixd_remote_bytes_total", "counter", "Record bytes moved to and from the shared tier.",
          "direction", {{"written", r.bytes_written}, {"read", r.bytes_read}}, out);
}

// The payload buffers kept beyond the RAM tier's budget (util/buffer_pool.h): memory the
// process holds that prefixd_cache_bytes does not count, and whether captures found it present.
void RenderBufferPool(const BufferPoolStats& p, std::string* out) {
  Gauge("prefixd_buffer_pool_bytes",
        "Payload buffers kept for reuse, beyond the RAM tier's budget.", double(p.kept_bytes), out);
  Gauge("prefixd_buffer_pool_limit_bytes", "The most the buffer pool may keep.", double(p.limit),
        out);
  Gauge("prefixd_buffer_pool_noted_bytes",
        "Payload sizes taken and not refilled yet: what the idle engine warms next.",
        double(p.noted_bytes), out);
  ByLabel("prefixd_buffer_pool_takes_total", "counter",
          "Payload buffers taken, by whether a kept one served (reused) or fresh memory did.",
          "outcome", {{"reused", p.reused}, {"fresh", p.takes - p.reused}}, out);
  Counter("prefixd_buffer_pool_warmed_bytes_total",
          "Bytes the idle engine made present for the next request's payloads.", p.warmed_bytes,
          out);
  Counter("prefixd_buffer_pool_dropped_total",
          "Buffers given back and freed for want of room in the pool.", p.dropped, out);
}

uint64_t TierBytes(const engine::EngineStats& s, engine::CacheTier tier) {
  auto it = s.bytes_by_tier.find(tier);
  return it == s.bytes_by_tier.end() ? 0 : it->second;
}

// What the process holds (docs/http-api.md, "Memory over weeks"): its resident size, the
// allocator's heap, the memory of each long-lived owner, and the disk tier's files.
void RenderMemory(const engine::EngineStats& s, std::string* out) {
  const ProcessMemory m = ReadProcessMemory();
  Gauge("prefixd_process_resident_bytes", "The process's resident memory (RSS).",
        double(m.resident_bytes), out);
  ByLabel("prefixd_process_heap_bytes", "gauge",
          "glibc malloc's heap: arena bytes in use, arena bytes freed but kept, and large blocks "
          "mapped on their own (at their full size, touched or not).",
          "state",
          {{"in_use", m.heap_in_use_bytes}, {"free", m.heap_free_bytes},
           {"mapped", m.heap_mapped_bytes}},
          out);
  Gauge("prefixd_process_heap_arenas", "glibc malloc arenas in use.", m.heap_arenas, out);
  Counter("prefixd_allocator_trims_total",
          "Times the idle server gave the allocator's free memory back to the kernel.", m.trims,
          out);
  Counter("prefixd_allocator_trimmed_bytes_total", "Resident bytes those trims gave back.",
          m.trimmed_bytes, out);
  std::map<std::string, uint64_t> owners;
  for (const auto& [owner, bytes] : MemoryOwnersOf(s)) owners[owner] = bytes;
  ByLabel("prefixd_memory_bytes", "gauge", "Memory held by each long-lived owner.", "owner",
          owners, out);
  // The budget beside what it bounds: an operator (and the soak bench) checks ram_tier
  // against it without knowing the flags the server was started with.
  Gauge("prefixd_cache_ram_budget_bytes", "--ram-budget: the most the RAM tier may hold.",
        double(s.ram_budget_bytes), out);
  if (s.disk_quota_bytes == 0) return;
  Gauge("prefixd_cache_disk_index_bytes",
        "The disk tier's index log (its records are prefixd_cache_bytes{tier=\"disk\"}).",
        double(s.disk_index_bytes), out);
  Gauge("prefixd_cache_disk_footprint_bytes",
        "The disk tier's files, records and index: what --disk-quota bounds.",
        double(TierBytes(s, engine::CacheTier::kDisk) + s.disk_index_bytes), out);
  Gauge("prefixd_cache_disk_quota_bytes", "--disk-quota.", double(s.disk_quota_bytes), out);
}

void RenderEngine(const engine::EngineStats& s, std::string* out) {
  Counter("prefixd_completions_total", "Completions the engine ran.", s.requests, out);
  Counter("prefixd_prompt_tokens_total", "Prompt tokens of all completions.", s.prompt_tokens,
          out);
  Counter("prefixd_cached_tokens_total", "Prompt tokens restored from the cache.",
          s.cached_tokens, out);
  Counter("prefixd_evaluated_tokens_total", "Prompt tokens evaluated (prefilled).",
          s.evaluated_tokens, out);
  Counter("prefixd_generated_tokens_total", "Tokens generated.", s.generated_tokens, out);
  if (s.reads_images) {
    Counter("prefixd_images_total", "Images read from requests (--mmproj).", s.images_prepared,
            out);
    Counter("prefixd_images_encoded_total",
            "Images the projector encoded (the rest came from the encoder cache or had their "
            "rows restored by the prompt cache).",
            s.images_encoded, out);
    ByLabel("prefixd_image_encoder_hits_total", "counter",
            "Image embeddings found in the encoder cache, by tier.", "tier",
            {{"ram", s.image_encoder_hits}, {"disk", s.image_encoder_hits_disk},
             {"remote", s.image_encoder_hits_remote}},
            out);
    Counter("prefixd_image_tokens_restored_total",
            "Image rows the prompt cache restored (their images not decoded again).",
            s.image_tokens_restored, out);
    Gauge("prefixd_image_encoder_bytes", "Bytes of image embeddings the encoder cache holds.",
          double(s.image_encoder_bytes), out);
  }
  Counter("prefixd_draft_tokens_total", "Tokens drafted and verified (speculative decoding).",
          s.draft_tokens, out);
  Counter("prefixd_draft_accepted_total", "Drafted tokens the model took.", s.draft_accepted,
          out);
  Counter("prefixd_draft_steps_total", "Verification steps of speculative decoding.",
          s.draft_steps, out);
  Counter("prefixd_draft_prefill_tokens_total",
          "History tokens the draft model decoded to catch up with the model's sequences.",
          s.draft_prefill_tokens, out);
  Counter("prefixd_draft_restored_tokens_total",
          "History tokens the draft model's sequences got from the cache instead.",
          s.draft_restored_tokens, out);
  ByLabel("prefixd_cache_hits_total", "counter", "Completions that restored a prefix, by tier.",
          "tier",
          {{"slot", s.hits_slot}, {"ram", s.hits_ram}, {"disk", s.hits_disk},
           {"remote", s.hits_remote}},
          out);
  Counter("prefixd_restored_bytes_total",
          "State bytes set into sequences by restores (0 when a slot already held the prefix).",
          s.restored_bytes, out);
  Counter("prefixd_cache_misses_total", "Completions that restored nothing.", s.misses, out);
  ByLabel("prefixd_cache_misses_by_reason_total", "counter", "Cache misses by reason.", "reason",
          engine::CountsByName(s.misses_by_reason, cache::MissReasonName), out);
  ByLabel("prefixd_cache_bytes", "gauge", "Bytes held by the cache, by tier.", "tier",
          engine::CountsByName(s.bytes_by_tier, cache::TierName), out);
  ByLabel("prefixd_cache_evictions_total", "counter", "Cache entries evicted, by tier.", "tier",
          engine::CountsByName(s.evictions_by_tier, cache::TierName), out);
  Gauge("prefixd_slots_busy", "Slots running a request now.", s.slots_busy, out);
  Gauge("prefixd_queue_depth", "Requests waiting for a slot now.", s.queue_depth, out);
  RenderBufferPool(s.buffer_pool, out);
  RenderMemory(s, out);
  if (s.remote) RenderRemote(*s.remote, out);
}

// One gauge under vLLM's name, with the labels vLLM gives it.
void VllmGauge(const char* name, const char* help, const std::string& labels, double v,
               std::string* out) {
  Header(name, "gauge", help, out);
  Sample(name, labels, v, out);
}

// vLLM's names for the numbers prefixd already has, with vLLM's meanings, for the routers that
// read them (the Inference Gateway's endpoint picker, SMG's load monitor, llm-d, AIBrix).
// cache_config_info sizes the KV cells in prefixd's cache Blocks, the unit its prefix cache
// reuses by, as vLLM's blocks are; kv_cache_size_tokens gives the cells exactly.
void RenderVllm(const engine::EngineStats& s, const ServedModel& model, std::string* out) {
  const std::string labels = Label("model_name", model.name) + "," + Label("engine", "0");
  VllmGauge("vllm:num_requests_running", "Number of requests in model execution batches.",
            labels, s.slots_busy, out);
  VllmGauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels,
            s.queue_depth, out);
  VllmGauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels,
            KvCacheUsage(s, model.n_ctx_per_slot), out);
  Header("vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.", out);
  Sample("vllm:prefix_cache_queries_total", labels, double(s.prompt_tokens), out);
  Header("vllm:prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.", out);
  Sample("vllm:prefix_cache_hits_total", labels, double(s.cached_tokens), out);
  const uint64_t cells = uint64_t(s.slots.size()) * model.n_ctx_per_slot;
  const uint32_t block = std::max<uint32_t>(s.block_size, 1);
  const std::string info =
      labels + "," + Label("block_size", std::to_string(block)) + "," +
      Label("num_gpu_blocks", std::to_string(cells / block)) + "," +
      Label("kv_cache_size_tokens", std::to_string(cells)) + "," +
      Label("cache_dtype", s.cache_type_k) + "," +
      Label("enable_prefix_caching", s.cache_on ? "True" : "False");
  VllmGauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", info, 1, out);
}

}  // namespace

void RenderKvEvents(const KvEventTotals& totals, std::string* out) {
  Header("prefixd_kv_events_total", "counter",
         "Cache events the KV-event stream sent (published) or dropped (queue full or socket "
         "refused).", out);
  Sample("prefixd_kv_events_total", Label("outcome", "published"), double(totals.published), out);
  Sample("prefixd_kv_events_total", Label("outcome", "dropped"), double(totals.dropped), out);
}

double KvCacheUsage(const engine::EngineStats& s, uint32_t n_ctx_per_slot) {
  const uint64_t cells = uint64_t(s.slots.size()) * n_ctx_per_slot;
  if (cells == 0) return 0;
  uint64_t held = 0;
  for (const engine::SlotView& v : s.slots) {
    if (v.busy) held += std::min<uint64_t>(v.n_tokens, n_ctx_per_slot);
  }
  return double(held) / double(cells);
}

std::vector<std::pair<std::string, uint64_t>> MemoryOwnersOf(const engine::EngineStats& s) {
  std::vector<std::pair<std::string, uint64_t>> owners = MemoryByOwner();
  owners.emplace_back("ram_tier", TierBytes(s, engine::CacheTier::kRam));
  owners.emplace_back("buffer_pool", s.buffer_pool.kept_bytes);
  std::sort(owners.begin(), owners.end());
  return owners;
}

void RequestCounters::Add(const engine::CompletionResult& r) {
  requests++;
  prompt_tokens += uint64_t(r.usage.prompt_tokens);
  cached_tokens += uint64_t(r.usage.cached_tokens);
  evaluated_tokens += uint64_t(r.usage.evaluated_tokens);
  generated_tokens += uint64_t(r.usage.completion_tokens);
  draft_tokens += uint64_t(r.usage.draft_tokens);
  draft_accepted += uint64_t(r.usage.draft_accepted);
  restored_bytes += r.usage.restored_bytes;
  switch (r.cache.tier) {
    case engine::CacheTier::kSlot: hits_slot++; break;
    case engine::CacheTier::kRam: hits_ram++; break;
    case engine::CacheTier::kDisk: hits_disk++; break;
    case engine::CacheTier::kRemote: hits_remote++; break;
    case engine::CacheTier::kNone:
      misses++;
      misses_by_reason[r.cache.miss == engine::CacheMiss::kNotMissed ? engine::CacheMiss::kDisabled
                                                                     : r.cache.miss]++;
      break;
  }
}

RequestCounters RequestCountersOf(const engine::EngineStats& s) {
  RequestCounters c;
  c.requests = s.requests;
  c.prompt_tokens = s.prompt_tokens;
  c.cached_tokens = s.cached_tokens;
  c.evaluated_tokens = s.evaluated_tokens;
  c.generated_tokens = s.generated_tokens;
  c.draft_tokens = s.draft_tokens;
  c.draft_accepted = s.draft_accepted;
  c.hits_slot = s.hits_slot;
  c.hits_ram = s.hits_ram;
  c.hits_disk = s.hits_disk;
  c.hits_remote = s.hits_remote;
  c.restored_bytes = s.restored_bytes;
  c.misses = s.misses;
  c.misses_by_reason = s.misses_by_reason;
  return c;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& labels,
                       std::string* out) const {
  std::string sep = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    std::string le = i < bounds_.size() ? Num(bounds_[i]) : "+Inf";
    Sample(name + "_bucket", sep + Label("le", le), double(cumulative), out);
  }
  Sample(name + "_sum", labels, sum_, out);
  Sample(name + "_count", labels, double(count_), out);
}

ServerMetrics::ServerMetrics()
    : ttft_(LatencyBounds()), prefill_(LatencyBounds()), queue_wait_(LatencyBounds()) {}

void ServerMetrics::RecordRequest(const std::string& route, int status, double seconds) {
  MutexLock lock(&mu_);
  ++requests_[{route, status}];
  auto it = duration_by_route_.try_emplace(route, LatencyBounds()).first;
  it->second.Observe(seconds);
}

void ServerMetrics::RecordCompletion(const engine::CompletionResult& result,
                                     double ttft_seconds) {
  MutexLock lock(&mu_);
  if (ttft_seconds >= 0) ttft_.Observe(ttft_seconds);
  prefill_.Observe(result.usage.prefill_ms / 1000.0);
  queue_wait_.Observe(result.usage.queue_ms / 1000.0);
}

void ServerMetrics::RecordTenantUsage(const std::string& tenant_salt,
                                      const engine::CompletionResult& result) {
  MutexLock lock(&mu_);
  by_tenant_[tenant_salt].Add(result);
}

RequestCounters ServerMetrics::TenantUsage(const std::string& tenant_salt) const {
  MutexLock lock(&mu_);
  auto it = by_tenant_.find(tenant_salt);
  return it == by_tenant_.end() ? RequestCounters{} : it->second;
}

void ServerMetrics::RecordCancelled() {
  MutexLock lock(&mu_);
  ++cancelled_;
}

void ServerMetrics::RecordSession(SessionSource source) {
  MutexLock lock(&mu_);
  ++sessions_by_source_[source];
}

void ServerMetrics::RecordConnectionRefused() {
  MutexLock lock(&mu_);
  ++connections_refused_;
}

void ServerMetrics::RecordReadDeadlineCut() {
  MutexLock lock(&mu_);
  ++read_deadline_cuts_;
}

void ServerMetrics::RenderServer(std::string* out) const {
  Header("prefixd_http_requests_total", "counter", "HTTP requests by route and status.", out);
  for (const auto& [key, n] : requests_) {
    Sample("prefixd_http_requests_total",
           Label("route", key.first) + "," + Label("status", std::to_string(key.second)),
           double(n), out);
  }
  Header("prefixd_http_request_duration_seconds", "histogram",
         "HTTP request latency, by route.", out);
  for (const auto& [route, h] : duration_by_route_) {
    h.Render("prefixd_http_request_duration_seconds", Label("route", route), out);
  }
  Header("prefixd_time_to_first_token_seconds", "histogram",
         "From request arrival to the first generated text.", out);
  ttft_.Render("prefixd_time_to_first_token_seconds", "", out);
  Header("prefixd_prefill_seconds", "histogram", "Prompt evaluation time per completion.", out);
  prefill_.Render("prefixd_prefill_seconds", "", out);
  Header("prefixd_queue_wait_seconds", "histogram", "Time waiting for a slot per completion.",
         out);
  queue_wait_.Render("prefixd_queue_wait_seconds", "", out);
  Counter("prefixd_requests_cancelled_total",
          "Completions cancelled because the client went away or the server stopped.",
          cancelled_, out);
  Header("prefixd_completions_by_session_source_total", "counter",
         "Completions by where their session key was found (none: no key).", out);
  for (const auto& [source, n] : sessions_by_source_) {
    Sample("prefixd_completions_by_session_source_total",
           Label("source", SessionSourceName(source)), double(n), out);
  }
  Counter("prefixd_http_connections_refused_total",
          "Connections answered 429 because their address had --max-connections-per-address open.",
          connections_refused_, out);
  Counter("prefixd_http_read_deadline_cuts_total",
          "Requests whose headers and body did not arrive within --request-read-timeout.",
          read_deadline_cuts_, out);
}

std::string ServerMetrics::Render(const engine::EngineStats& engine,
                                  const ServedModel& model) const {
  std::string out;
  {
    MutexLock lock(&mu_);
    RenderServer(&out);
  }
  RenderEngine(engine, &out);
  RenderVllm(engine, model, &out);
  return out;
}

}  // namespace prefixd::server
