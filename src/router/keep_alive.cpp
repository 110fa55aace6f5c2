#include "router/keep_alive.h"

#include <cmath>

namespace prefixd::router {

namespace {

using json = nlohmann::json;

// Seconds -> milliseconds, or false when `s` is not a finite number.
bool SecondsToMs(double seconds, double scale_ms, int64_t* ms) {
  const double v = seconds * scale_ms;
  if (!std::isfinite(v)) return false;
  const double cap = double(kMaxKeepAlive.count()) + 1;
  *ms = v >= cap ? int64_t(cap) : v <= -cap ? -int64_t(cap) : int64_t(v);
  return true;
}

bool ParseDuration(const json& v, int64_t* ms) {
  if (v.is_number()) return SecondsToMs(v.get<double>(), 1000, ms);
  if (!v.is_string()) return false;
  const std::string text = v.get<std::string>();
  if (text.empty() || text.size() > 32) return false;
  size_t used = 0;
  double n = 0;
  try {
    n = std::stod(text, &used);
  } catch (...) {
    return false;
  }
  const std::string unit = text.substr(used);
  const double scale = unit == "" || unit == "s" ? 1000 : unit == "ms" ? 1 : unit == "m" ? 60000
                       : unit == "h" ? 3600000 : -1;
  return scale > 0 && SecondsToMs(n, scale, ms);
}

}  // namespace

Result<KeepAlive> ParseKeepAlive(const json& body) {
  KeepAlive out;
  for (const char* key : {"keep_alive", "ttl"}) {
    if (!body.contains(key) || body[key].is_null()) continue;
    int64_t ms = 0;
    if (!ParseDuration(body[key], &ms) || (std::string(key) == "ttl" && ms < 0)) {
      return Status::InvalidArgument(
          std::string(key) + ": a duration such as 300, \"5m\" or \"1h\" (keep_alive < 0: "
          "keep the model loaded; 0: unload it once idle)");
    }
    const bool forever = ms < 0 || ms > kMaxKeepAlive.count();
    out.kind = forever ? KeepAlive::Kind::kForever : KeepAlive::Kind::kFor;
    out.idle = std::chrono::milliseconds(forever ? 0 : ms);
    return out;
  }
  return out;
}

KeepAlive KeepAliveFor(const KeepAlive& asked, bool admin, std::chrono::milliseconds tenant_max) {
  if (admin || asked.kind == KeepAlive::Kind::kAsConfigured) return asked;
  if (tenant_max.count() <= 0) return KeepAlive{};
  KeepAlive k;
  k.kind = KeepAlive::Kind::kAtLeast;
  k.idle = asked.kind == KeepAlive::Kind::kForever ? tenant_max : std::min(asked.idle, tenant_max);
  return k;
}

}  // namespace prefixd::router
