// ApiError: every error the HTTP server answers, in the OpenAI error shape
//   {"error": {"message": "...", "type": "...", "param": "..." | null, "code": "..." | null}}
//
// The HTTP status of an error is chosen in exactly one place, HttpStatusOf(ErrorKind); nothing
// else in the server picks a status for an error. Engine Statuses become ApiErrors through
// ApiErrorFromStatus(). Pure functions; thread-safe.
#pragma once

#include <string>

#include "util/status.h"

namespace prefixd::server {

enum class ErrorKind {
  kInvalidRequest,    // 400: malformed JSON, wrong types, out-of-range parameters
  kContextExceeded,   // 400: the prompt does not fit the context
  kUnauthorized,      // 401: missing or unknown API key
  kForbidden,         // 403: a valid key without the right to the route (admin routes)
  kNotFound,          // 404: no such route
  kModelNotFound,     // 404: the request names a model this server does not serve
  kMethodNotAllowed,  // 405
  kConflict,          // 409: the target is busy (a model with requests in flight)
  kPayloadTooLarge,   // 413: the body is over --max-body
  kUnsupportedMediaType,  // 415: a POST without Content-Type: application/json (browser_guard.h)
  kTooManyConnections,  // 429 + Retry-After: the client's address has its connections open
  kOverloaded,        // 503 + Retry-After: the request queue is full
  kInternal,          // 500
  kBadGateway,        // 502: a model's own server (the router's) answered nothing
};

struct ApiError {
  ErrorKind kind = ErrorKind::kInvalidRequest;
  std::string message;
  std::string param;  // "" -> null
  std::string code;   // "" -> null

  static ApiError Invalid(std::string message, std::string param = "") {
    return {ErrorKind::kInvalidRequest, std::move(message), std::move(param), ""};
  }
  // A prompt of n_prompt tokens past a window of n_ctx, worded so that each client family
  // recognises it and compacts: Anthropic's "prompt is too long: N tokens > M maximum" (Claude
  // Code reads the numbers), OpenAI's code context_length_exceeded and its "maximum context
  // length" sentence (Codex, opencode).
  static ApiError ContextExceeded(int64_t n_prompt, int64_t n_ctx, std::string param);
};

// The HTTP status for an error kind. The only place an error's status is chosen.
int HttpStatusOf(ErrorKind kind);
// The OpenAI "type" for an error kind ("invalid_request_error", "server_error", ...).
const char* ErrorTypeOf(ErrorKind kind);
// Seconds a client should wait before retrying, or 0 when retrying won't help.
int RetryAfterSecondsOf(ErrorKind kind);

// The response body: {"error": {...}} as compact JSON text.
std::string ErrorBody(const ApiError& error);

// Maps an engine Status (not OK) to an ApiError: InvalidArgument -> 400 (context_length_exceeded
// when the message says the prompt does not fit), ResourceExhausted -> 503, else 500.
ApiError ApiErrorFromStatus(const Status& status);

}  // namespace prefixd::server
