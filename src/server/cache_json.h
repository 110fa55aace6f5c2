// The engine's cache counters as JSON: the body of GET /v1/cache, and the "totals" of
// GET /v1/cache/stats (docs/http-api.md).
#pragma once

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace prefixd::server {

nlohmann::json CacheCountersJson(const engine::EngineStats& s);

}  // namespace prefixd::server
