#include "server/http_io.h"

#include <array>

namespace prefixd::server {
namespace {

const std::array<const char*, 22> kRoutes = {
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/tokenize", "/detokenize", "/apply-template",
    "/health",              "/metrics",        "/v1/cache",  "/v1/cache/warm", "/v1/cache/clear",
    "/v1/models/",          "/v1/responses",   "/v1/messages", "/v1/messages/count_tokens",
    "/",                    "/v1/cache/stats", "/v1/cache/entries", "/v1/requests/recent",
    "/v1/chat/completions/render", "/v1/completions/render", "/version"};

thread_local std::chrono::steady_clock::time_point t_request_start =
    std::chrono::steady_clock::now();
thread_local bool t_logged_by_route = false;

}  // namespace

void SendJson(httplib::Response& res, const std::string& json_text) {
  res.status = 200;
  res.set_content(json_text, "application/json");
}

void SendError(httplib::Response& res, const ApiError& error) {
  SendErrorBody(res, error, ErrorBody(error));
}

void SendErrorBody(httplib::Response& res, const ApiError& error, const std::string& body) {
  res.status = HttpStatusOf(error.kind);
  if (int s = RetryAfterSecondsOf(error.kind); s > 0) {
    res.set_header("Retry-After", std::to_string(s));
  }
  res.set_content(body, "application/json");
}

std::string RouteLabel(const std::string& path) {
  for (const char* r : kRoutes) {
    if (path == r) return r;
  }
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (path.rfind("/v1/cache/entries/", 0) == 0) return "/v1/cache/entries/{id}";
  if (path.rfind("/assets/", 0) == 0) return "/assets/{file}";
  return "other";
}

bool IsKnownPath(const std::string& path) { return RouteLabel(path) != "other"; }

void MarkRequestStart() {
  t_request_start = std::chrono::steady_clock::now();
  t_logged_by_route = false;
}
void MarkRequestLoggedByRoute() { t_logged_by_route = true; }
bool RequestLoggedByRoute() { return t_logged_by_route; }
std::chrono::steady_clock::time_point RequestStart() { return t_request_start; }
double SecondsSinceRequestStart() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t_request_start)
      .count();
}

}  // namespace prefixd::server
