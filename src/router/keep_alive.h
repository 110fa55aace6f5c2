// A request's keep_alive (Ollama: a duration; negative: forever; 0: unload once idle) or ttl
// (LM Studio: seconds), read from its JSON body and held to the asker's rights.
//
// Durations: a number of seconds, or a string "250ms", "30s", "5m", "1h" (a bare number in a
// string is seconds). Anything longer than kMaxKeepAlive (366 days) is read as forever, so no
// duration overflows a clock (a value past it used to wrap to a negative time and unload the
// model at once).
//
// Rights: model lifetime is an admin's (keys off: everybody is). A tenant's ask is KeepAlive's
// kAtLeast, capped at the router's bound (`serve --models-keep-alive-max`): it can keep a
// model loaded longer than configured, up to the bound, but never unload it sooner — 0 or a
// short duration from a tenant changes nothing. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <string>

#include "router/model_pool.h"
#include "util/status.h"

namespace prefixd::router {

inline constexpr std::chrono::milliseconds kMaxKeepAlive{int64_t(366) * 24 * 3600 * 1000};

// The body's keep_alive (or ttl), as asked; kAsConfigured when it has neither. InvalidArgument
// naming the field when it is malformed.
Result<KeepAlive> ParseKeepAlive(const nlohmann::json& body);

// What `asked` becomes for a tenant: admin -> as asked; else kAtLeast capped at `tenant_max`
// (0: a tenant's ask is ignored).
KeepAlive KeepAliveFor(const KeepAlive& asked, bool admin, std::chrono::milliseconds tenant_max);

}  // namespace prefixd::router
