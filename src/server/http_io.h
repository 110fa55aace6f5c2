// Small helpers every route uses to answer: JSON bodies, OpenAI-shaped errors (the status comes
// from HttpStatusOf, never from the caller), and the route label used in metrics and logs.
#pragma once

#include <httplib.h>

#include <chrono>
#include <string>

#include "server/api_error.h"

namespace prefixd::server {

void SendJson(httplib::Response& res, const std::string& json_text);
// Sets the status, the body and, for 503, Retry-After.
void SendError(httplib::Response& res, const ApiError& error);
// The same with another API's error body for `error`.
void SendErrorBody(httplib::Response& res, const ApiError& error, const std::string& body);

// The route pattern a path belongs to (for metrics labels), or "other".
std::string RouteLabel(const std::string& path);
// True when `path` is served by some route (with another method, maybe).
bool IsKnownPath(const std::string& path);

// The time the current request arrived: set by the pre-routing handler on the thread that
// serves the request and read on that same thread.
void MarkRequestStart();
std::chrono::steady_clock::time_point RequestStart();
double SecondsSinceRequestStart();
// Whether the current request's log line is written by its route (completions) rather than by
// the server's generic response logger. Reset by MarkRequestStart().
void MarkRequestLoggedByRoute();
bool RequestLoggedByRoute();

}  // namespace prefixd::server
