// FrontDoor: the checks every listening process of prefixd runs on a request before it does
// anything with it — before a route parses a body, loads or unloads a model, or forwards the
// request to a model's server. The single server (server.cpp) and the router (router.cpp) hold
// one each; ConnectionGuardedServer takes it at construction and runs it as httplib's
// pre-routing step, which no listener can replace, so a new entry point cannot forget it.
//
// In order, each refusal answered at once:
//  1. Host: DNS rebinding (CheckHost, browser_guard.h) — 403 host_not_allowed.
//  2. CORS: the allowed origins' headers; a preflight (OPTIONS) is answered here, 204 for an
//     allowed origin, else 403 origin_not_allowed.
//  3. Cross-site: a browser that says the request comes from another site (`Sec-Fetch-Site:
//     cross-site` or `same-site`) is refused with 403 cross_site_request unless its Origin is
//     an allowed one. This stops what Content-Type cannot: a GET from an <img> tag or a link,
//     which needs no preflight (it would load a model on a router). A top-level navigation to
//     an open route (the web page) is let through: a user may follow a link to the dashboard.
//  4. Open routes (RouteRights::is_open) need nothing more.
//  5. Content-Type: a POST without a key must say application/json (415; CheckContentType).
//  6. Keys (401) and admin rights (403; RouteRights::is_admin), as TenantAuth says.
// Body size is httplib's limit (413) and body depth is each parser's (api_json::DepthWithin);
// admission (admission.h) is per listener.
//
// Thread-safety: Check() may be called from any thread; the object is immutable.
#pragma once

#include <httplib.h>

#include <functional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/auth.h"

namespace prefixd::server {

// Which routes of a listener need no key, and which need an admin key (when keys are on).
struct RouteRights {
  std::function<bool(const std::string& path)> is_open;
  std::function<bool(const std::string& method, const std::string& path)> is_admin;
};

struct FrontDoorOptions {
  std::vector<std::string> allowed_hosts;  // serve --allowed-host
  std::vector<std::string> cors_origins;   // serve --cors-origin
};

// How a refusal is written: each listener answers in the shape of the API the request spoke.
using ErrorWriter =
    std::function<void(const httplib::Request&, httplib::Response&, const ApiError&)>;

class FrontDoor {
 public:
  // REQUIRES: auth outlives the door; rights' functions are set.
  FrontDoor(const TenantAuth* auth, FrontDoorOptions options, RouteRights rights,
            ErrorWriter write_error);

  enum class Verdict { kPass, kAnswered };
  // Runs the checks above. kPass: the route may run (CORS headers are set on `res`);
  // kAnswered: `res` holds the refusal or the preflight's answer.
  Verdict Check(const httplib::Request& req, httplib::Response& res) const;

  // The request's tenant when it passed Check(): the single tenant with keys off.
  // REQUIRES: Check() returned kPass for `req` on a route that is not open.
  Tenant TenantOf(const httplib::Request& req) const;

  const TenantAuth& auth() const { return *auth_; }

 private:
  std::optional<ApiError> Refusal(const httplib::Request& req, httplib::Response& res,
                                  bool* answered) const;
  std::optional<ApiError> CheckCrossSite(const httplib::Request& req) const;
  std::optional<ApiError> CheckKeys(const httplib::Request& req) const;

  const TenantAuth* const auth_;
  const FrontDoorOptions options_;
  const RouteRights rights_;
  const ErrorWriter write_error_;
};

}  // namespace prefixd::server
