// The web page and the JSON it reads (docs/http-api.md, "Web page"):
//   GET /, GET /assets/{name}          the embedded page (web_assets.h); open without a key
//   GET /v1/cache/stats                model, slots, tiers, counters (a tenant: its own)
//   GET /v1/cache/entries              the cached prefix trees (the caller's domain; admins: all)
//   DELETE /v1/cache/entries/{domain}/{root}   evicts one tree (an admin route)
//   GET /v1/requests/recent[?after=N]  the last completions (the caller's; admins: everyone's)
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "engine/codec/types.h"
#include "server/browser_guard.h"
#include "server/cache_json.h"
#include "server/http_io.h"
#include "server/request_log.h"
#include "server/routes.h"
#include "server/web_assets.h"
#include "util/process_memory.h"

namespace prefixd::server {

using json = nlohmann::json;

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json ModelJson(const RouteContext& ctx, const engine::EngineStats& s) {
  return {{"id", ctx.model_id},
          {"memory_layout", s.memory_layout},
          {"devices", s.devices},
          {"cache_type_k", s.cache_type_k},
          {"cache_type_v", s.cache_type_v},
          {"cache", s.cache_on ? engine::StateModeName(s.state_mode) : "off"},
          {"chunking_invariant", s.chunking_invariant},
          {"capture_in_call", s.capture_in_call},
          {"memory_warming", engine::MemoryWarmingName(s.memory_warming)},
          {"snapshot_spacing", s.snapshot_spacing},
          {"n_ctx_per_slot", ctx.backend->n_ctx_per_slot()},
          {"n_vocab", ctx.backend->n_vocab()},
          {"block_size", s.block_size},
          {"reads_images", s.reads_images}};
}

// Every slot; whether it is busy and what it holds (its session and length) only when it is
// the caller's, or to an admin: another tenant's slot is shown idle and empty, since its
// session, prompt length and busy time are that tenant's traffic.
json SlotsJson(const engine::EngineStats& s, const std::string* own_domain) {
  json slots = json::array();
  for (size_t i = 0; i < s.slots.size(); ++i) {
    const engine::SlotView& v = s.slots[i];
    const bool mine = own_domain == nullptr || v.domain == *own_domain;
    slots.push_back({{"index", i}, {"busy", mine && v.busy}, {"n_tokens", mine ? v.n_tokens : 0},
                     {"session", !mine || v.session.empty() ? json(nullptr) : json(v.session)}});
  }
  return slots;
}

uint64_t At(const std::map<engine::CacheTier, uint64_t>& m, engine::CacheTier key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

// "shared": the tier shared between servers, null until one is configured; when present it
// has the disk tier's shape (used_bytes, quota_bytes, records, evictions).
json TiersJson(const engine::EngineStats& s) {
  json ram = {{"used_bytes", At(s.bytes_by_tier, engine::CacheTier::kRam)}, {"budget_bytes", s.ram_budget_bytes},
              {"blocks", s.ram_blocks}, {"snapshots", s.ram_snapshots}, {"tails", s.ram_tails},
              {"evictions", At(s.evictions_by_tier, engine::CacheTier::kRam)}};
  json disk = nullptr;
  if (s.disk_quota_bytes > 0) {
    const uint64_t records_bytes = At(s.bytes_by_tier, engine::CacheTier::kDisk);
    disk = {{"used_bytes", records_bytes}, {"quota_bytes", s.disk_quota_bytes},
            {"index_bytes", s.disk_index_bytes},
            {"footprint_bytes", records_bytes + s.disk_index_bytes},
            {"records", s.disk_records},
            {"records_by_kind", engine::CountsByName(s.disk_records_by_kind, engine::RecordKindName)},
            {"evictions", At(s.evictions_by_tier, engine::CacheTier::kDisk)}};
  }
  return {{"ram", ram}, {"disk", disk}, {"shared", nullptr}};
}

// A tenant's share of the tiers: what its own prefix trees hold in each (as GET
// /v1/cache/entries lists them) against the tier's size; evictions are every tenant's (null).
json TenantTiersJson(const engine::EngineStats& s, const std::vector<engine::CachedPrefix>& own) {
  engine::PrefixTierView ram, disk;
  for (const engine::CachedPrefix& p : own) {
    for (auto [sum, v] : {std::pair{&ram, &p.ram}, std::pair{&disk, &p.disk}}) {
      sum->blocks += v->blocks;
      sum->snapshots += v->snapshots;
      sum->tails += v->tails;
      sum->bytes += v->bytes;
    }
  }
  json ram_json = {{"used_bytes", ram.bytes}, {"budget_bytes", s.ram_budget_bytes},
                   {"blocks", ram.blocks}, {"snapshots", ram.snapshots}, {"tails", ram.tails},
                   {"evictions", nullptr}};
  json disk_json = nullptr;
  if (s.disk_quota_bytes > 0) {
    json by_kind = json::object();
    for (auto [kind, n] : {std::pair{engine::RecordKind::kBlockRows, disk.blocks},
                           std::pair{engine::RecordKind::kSnapshot, disk.snapshots},
                           std::pair{engine::RecordKind::kTail, disk.tails}}) {
      if (n > 0) by_kind[engine::RecordKindName(kind)] = n;
    }
    disk_json = {{"used_bytes", disk.bytes}, {"quota_bytes", s.disk_quota_bytes},
                 {"records", disk.blocks + disk.snapshots + disk.tails},
                 {"records_by_kind", by_kind}, {"evictions", nullptr}};
  }
  return {{"ram", ram_json}, {"disk", disk_json}, {"shared", nullptr}};
}

// The counters (GET /v1/cache's view for this caller) and the share of prompt tokens the cache
// served of them.
json TotalsJson(json counters) {
  const double prompt = counters["prompt_tokens"].get<double>();
  counters["token_hit_ratio"] =
      prompt == 0 ? 0.0 : counters["cached_tokens"].get<double>() / prompt;
  return counters;
}

// The process's memory: its resident size, the allocator's heap and each long-lived owner's
// bytes (the names /metrics gives as prefixd_memory_bytes{owner}).
json MemoryJson(const engine::EngineStats& s) {
  const ProcessMemory m = ReadProcessMemory();
  json owners = json::object();
  for (const auto& [owner, bytes] : MemoryOwnersOf(s)) owners[owner] = bytes;
  return {{"resident_bytes", m.resident_bytes}, {"heap_in_use_bytes", m.heap_in_use_bytes},
          {"heap_free_bytes", m.heap_free_bytes}, {"heap_mapped_bytes", m.heap_mapped_bytes},
          {"heap_arenas", m.heap_arenas},
          {"owners", owners}};
}

// An admin sees the whole server. A tenant sees the model, its own slots, its own share of the
// tiers and its own counters; the queue's depth and the process's memory are every tenant's
// (null).
void Stats(const RouteContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const engine::EngineStats s = ctx.backend->GetStats();
  const Tenant t = ctx.TenantOf(req);
  json caller = {{"tenant", t.label}, {"admin", t.admin}};
  if (t.admin) {
    return SendJson(res, Dump({{"model", ModelJson(ctx, s)}, {"caller", caller},
                               {"slots", SlotsJson(s, nullptr)},
                               {"queue_depth", s.queue_depth},
                               {"tiers", TiersJson(s)},
                               {"memory", MemoryJson(s)},
                               {"totals", TotalsJson(CacheCountersJson(s))}}));
  }
  const std::string own = ctx.backend->DomainIdOf(t.salt);
  const RequestCounters mine = ctx.metrics->TenantUsage(t.salt);
  SendJson(res, Dump({{"model", ModelJson(ctx, s)}, {"caller", caller},
                      {"slots", SlotsJson(s, &own)},
                      {"queue_depth", nullptr},
                      {"tiers", TenantTiersJson(s, ctx.backend->ListCachedPrefixes(&t.salt))},
                      {"memory", nullptr},
                      {"totals", TotalsJson(TenantCacheCountersJson(s, mine))}}));
}

json TierViewJson(const engine::PrefixTierView& v) {
  if (!v.held) return nullptr;
  return {{"blocks", v.blocks}, {"snapshots", v.snapshots}, {"tails", v.tails},
          {"bytes", v.bytes}};
}

json PrefixJson(const engine::CachedPrefix& p) {
  return {{"id", p.domain + "/" + p.root},
          {"role", engine::PrefixRoleName(p.role)},
          {"of_domain", p.of_domain.empty() ? json(nullptr) : json(p.of_domain)},
          {"domain", p.domain},
          {"root", p.root},
          {"n_tokens", p.n_tokens},
          {"created_unix_ms", p.created_unix_ms == 0 ? json(nullptr) : json(p.created_unix_ms)},
          {"used_unix_ms", p.used_unix_ms},
          {"ram", TierViewJson(p.ram)},
          {"disk", TierViewJson(p.disk)}};
}

void Entries(const RouteContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Tenant t = ctx.TenantOf(req);
  json entries = json::array();
  const std::string* only = t.admin ? nullptr : &t.salt;
  for (const engine::CachedPrefix& p : ctx.backend->ListCachedPrefixes(only)) {
    entries.push_back(PrefixJson(p));
  }
  SendJson(res, Dump({{"scope", t.admin ? "all" : "tenant"}, {"entries", entries}}));
}

void Evict(const RouteContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string domain = req.matches[1], root = req.matches[2];
  auto r = ctx.backend->EvictCachedPrefix(domain, root);
  if (!r.ok()) {
    if (r.status().IsNotFound()) {
      return SendError(res, {ErrorKind::kNotFound, r.status().message(), "", ""});
    }
    return SendError(res, ApiErrorFromStatus(r.status()));
  }
  WriteLogLine(LogLine("cache_evicted").Add("id", domain + "/" + root)
                   .Add("ram_entries", (long long)r->ram_entries)
                   .Add("disk_records", (long long)r->disk_records));
  SendJson(res, Dump({{"evicted", domain + "/" + root}, {"ram_entries", r->ram_entries},
                      {"disk_records", r->disk_records}}));
}

json RecordJson(const RequestRecord& r) {
  auto ms = [](double v) { return v < 0 ? json(nullptr) : json(v); };
  auto text = [](const std::string& v) { return v.empty() ? json(nullptr) : json(v); };
  return {{"seq", r.seq}, {"time_unix_ms", r.time_unix_ms}, {"id", r.id}, {"route", r.route},
          {"tenant", r.tenant}, {"session", r.session}, {"status", r.status}, {"stream", r.stream},
          {"cancelled", r.cancelled}, {"finish", r.finish},
          {"prompt_tokens", r.prompt_tokens}, {"cached_tokens", r.cached_tokens},
          {"evaluated_tokens", r.evaluated_tokens}, {"completion_tokens", r.completion_tokens},
          {"draft_tokens", r.draft_tokens}, {"draft_accepted", r.draft_accepted},
          {"tier", r.tier}, {"miss_reason", text(r.miss_reason)},
          {"diverged_at", r.diverged_at > 0 ? json(r.diverged_at) : json(nullptr)},
          {"diverged", r.diverged_at > 0 ? json(r.diverged) : json(nullptr)},
          {"ttft_ms", ms(r.ttft_ms)}, {"queue_ms", r.queue_ms}, {"prefill_ms", r.prefill_ms},
          {"restore_ms", r.restore_ms}, {"prompt_eval_ms", r.prompt_eval_ms},
          {"saved_ms", r.saved_ms}, {"total_ms", r.total_ms}};
}

void Recent(const RouteContext& ctx, const httplib::Request& req, httplib::Response& res) {
  uint64_t after = 0;
  if (req.has_param("after")) {
    const std::string v = req.get_param_value("after");
    char* end = nullptr;
    after = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0') {
      return SendError(res, ApiError::Invalid("'after' must be a request seq number", "after"));
    }
  }
  const Tenant t = ctx.TenantOf(req);
  json requests = json::array();
  for (const RequestRecord& r : ctx.recent->Since(after, t.admin ? nullptr : &t.salt)) {
    requests.push_back(RecordJson(r));
  }
  SendJson(res, Dump({{"scope", t.admin ? "all" : "tenant"}, {"requests", requests}}));
}

void Asset(const httplib::Request& req, httplib::Response& res) {
  const WebAsset* a = FindWebAsset(req.path);
  if (a == nullptr) {
    return SendError(res, {ErrorKind::kNotFound, "no such file: " + req.path, "", ""});
  }
  res.set_content(reinterpret_cast<const char*>(a->data), a->size, a->content_type);
  res.set_header("Cache-Control", "no-cache");
  for (const auto& [name, value] : PageHeaders()) res.set_header(name, value);
}

}  // namespace

bool IsOpenRoute(const std::string& path) {
  return path == "/health" || path == "/" || path.rfind("/assets/", 0) == 0;
}

void RegisterWebRoutes(httplib::Server& http, const RouteContext& ctx) {
  auto asset = [](const httplib::Request& req, httplib::Response& res) { Asset(req, res); };
  http.Get("/", asset);
  http.Get("/assets/[^/]+", asset);
  http.Get("/v1/cache/stats", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Stats(ctx, req, res);
  });
  http.Get("/v1/cache/entries", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Entries(ctx, req, res);
  });
  http.Delete("/v1/cache/entries/([0-9a-f]+)/([0-9a-f]+)",
              [&ctx](const httplib::Request& req, httplib::Response& res) {
                Evict(ctx, req, res);
              });
  http.Get("/v1/requests/recent", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Recent(ctx, req, res);
  });
}

}  // namespace prefixd::server
