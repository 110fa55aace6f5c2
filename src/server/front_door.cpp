#include "server/front_door.h"

#include <algorithm>

#include "server/browser_guard.h"

namespace prefixd::server {

FrontDoor::FrontDoor(const TenantAuth* auth, FrontDoorOptions options, RouteRights rights,
                     ErrorWriter write_error)
    : auth_(auth), options_(std::move(options)), rights_(std::move(rights)),
      write_error_(std::move(write_error)) {}

FrontDoor::Verdict FrontDoor::Check(const httplib::Request& req, httplib::Response& res) const {
  bool answered = false;
  std::optional<ApiError> refusal = Refusal(req, res, &answered);
  if (refusal) {
    write_error_(req, res, *refusal);
    return Verdict::kAnswered;
  }
  return answered ? Verdict::kAnswered : Verdict::kPass;
}

std::optional<ApiError> FrontDoor::Refusal(const httplib::Request& req, httplib::Response& res,
                                           bool* answered) const {
  if (auto e = CheckHost(req.get_header_value("Host"), options_.allowed_hosts)) return e;
  const std::string origin = req.get_header_value("Origin");
  const bool preflight = req.method == "OPTIONS";
  for (const auto& [name, value] : CorsHeaders(origin, options_.cors_origins, preflight)) {
    res.set_header(name, value);
  }
  if (preflight) {  // allowed or not, a preflight is answered here; only an allowed one opens
    if (!res.has_header("Access-Control-Allow-Origin")) {
      return ApiError{ErrorKind::kForbidden,
                      "cross-origin requests from '" + origin.substr(0, 200) +
                          "' are not allowed: start prefixd serve with --cors-origin ORIGIN",
                      "", "origin_not_allowed"};
    }
    res.status = 204;
    *answered = true;
    return std::nullopt;
  }
  if (auto e = CheckCrossSite(req)) return e;
  if (rights_.is_open(req.path)) return std::nullopt;
  const bool has_key = req.has_header("Authorization") || req.has_header("x-api-key");
  if (auto e = CheckContentType(req.method, req.get_header_value("Content-Type"), has_key)) {
    return e;
  }
  return CheckKeys(req);
}

// Browsers say where a request comes from (Fetch Metadata); other clients send nothing, and a
// page cannot forge the header. An allowed origin's page is let in as CORS lets it.
std::optional<ApiError> FrontDoor::CheckCrossSite(const httplib::Request& req) const {
  const std::string site = req.get_header_value("Sec-Fetch-Site");
  if (site != "cross-site" && site != "same-site") return std::nullopt;
  const std::string origin = req.get_header_value("Origin");
  const auto& allowed = options_.cors_origins;
  if (!origin.empty() && std::find(allowed.begin(), allowed.end(), origin) != allowed.end()) {
    return std::nullopt;
  }
  const bool navigation = req.method == "GET" &&
                          req.get_header_value("Sec-Fetch-Mode") == "navigate" &&
                          rights_.is_open(req.path);
  if (navigation) return std::nullopt;
  return ApiError{ErrorKind::kForbidden,
                  "requests from another site's page are not allowed (Sec-Fetch-Site: " + site +
                      "): start prefixd serve with --cors-origin ORIGIN for a page you trust",
                  "", "cross_site_request"};
}

std::optional<ApiError> FrontDoor::CheckKeys(const httplib::Request& req) const {
  if (!auth_->enabled()) return std::nullopt;
  TenantAuth::Outcome outcome =
      auth_->Check(req.get_header_value("Authorization"), req.get_header_value("x-api-key"));
  if (!outcome.tenant) return UnauthorizedError(outcome.failure);
  if (!outcome.tenant->admin && rights_.is_admin(req.method, req.path)) {
    return ForbiddenError(*auth_, req.path);
  }
  return std::nullopt;
}

Tenant FrontDoor::TenantOf(const httplib::Request& req) const {
  auto t = auth_->Authenticate(req.get_header_value("Authorization"),
                               req.get_header_value("x-api-key"));
  return t ? *t : Tenant{};
}

}  // namespace prefixd::server
