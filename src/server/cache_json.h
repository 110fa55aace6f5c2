// The cache's counters as JSON: the body of GET /v1/cache, and the "totals" of
// GET /v1/cache/stats (docs/http-api.md).
//
// Two views. An admin's (or everyone's with keys off: one local user) is the engine's, every
// tenant's traffic together. A tenant's holds the cache's settings and the counters of its own
// requests only: no figure that moves with another tenant's traffic (tier bytes, evictions,
// slots busy, queue depth, the draft model's history).
#pragma once

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/metrics.h"

namespace prefixd::server {

// The admin's view: the engine's counters and gauges.
nlohmann::json CacheCountersJson(const engine::EngineStats& s);
// A tenant's view: `s`'s settings, `own`'s counters, and "scope": "tenant".
nlohmann::json TenantCacheCountersJson(const engine::EngineStats& s, const RequestCounters& own);

}  // namespace prefixd::server
