#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace prefixd::server {

int HttpStatusOf(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidRequest:
    case ErrorKind::kContextExceeded: return 400;
    case ErrorKind::kUnauthorized: return 401;
    case ErrorKind::kForbidden: return 403;
    case ErrorKind::kNotFound:
    case ErrorKind::kModelNotFound: return 404;
    case ErrorKind::kMethodNotAllowed: return 405;
    case ErrorKind::kConflict: return 409;
    case ErrorKind::kPayloadTooLarge: return 413;
    case ErrorKind::kUnsupportedMediaType: return 415;
    case ErrorKind::kTooManyConnections: return 429;
    case ErrorKind::kOverloaded: return 503;
    case ErrorKind::kInternal: return 500;
    case ErrorKind::kBadGateway: return 502;
  }
  return 500;
}

const char* ErrorTypeOf(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUnauthorized: return "authentication_error";
    case ErrorKind::kForbidden: return "permission_error";
    case ErrorKind::kNotFound:
    case ErrorKind::kModelNotFound: return "not_found_error";
    case ErrorKind::kTooManyConnections: return "rate_limit_error";
    case ErrorKind::kOverloaded: return "overloaded_error";
    case ErrorKind::kInternal:
    case ErrorKind::kBadGateway: return "server_error";
    default: return "invalid_request_error";
  }
}

int RetryAfterSecondsOf(ErrorKind kind) {
  return kind == ErrorKind::kOverloaded || kind == ErrorKind::kTooManyConnections ? 1 : 0;
}

std::string ErrorBody(const ApiError& error) {
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json() : nlohmann::json(s); };
  nlohmann::json body = {{"error",
                          {{"message", error.message},
                           {"type", ErrorTypeOf(error.kind)},
                           {"param", or_null(error.param)},
                           {"code", or_null(error.code)}}}};
  // Replace invalid UTF-8 (a message may quote client input) instead of throwing.
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError ApiError::ContextExceeded(int64_t n_prompt, int64_t n_ctx, std::string param) {
  const std::string p = std::to_string(n_prompt), c = std::to_string(n_ctx);
  return {ErrorKind::kContextExceeded,
          "prompt is too long: " + p + " tokens > " + c + " maximum. This model's maximum "
          "context length is " + c + " tokens, but the prompt has " + p + " tokens: shorten or "
          "compact the conversation.",
          std::move(param), "context_length_exceeded"};
}

ApiError ApiErrorFromStatus(const Status& status) {
  switch (status.code()) {
    case Status::Code::kInvalidArgument: {
      bool context = status.message().find("context") != std::string::npos;
      if (context) {
        return {ErrorKind::kContextExceeded, status.message(), "messages",
                "context_length_exceeded"};
      }
      return ApiError::Invalid(status.message());
    }
    case Status::Code::kResourceExhausted:
      return {ErrorKind::kOverloaded, "the server is busy: " + status.message(), "",
              "server_overloaded"};
    case Status::Code::kNotFound: return {ErrorKind::kNotFound, status.message(), "", ""};
    default: return {ErrorKind::kInternal, status.ToString(), "", "internal_error"};
  }
}

}  // namespace prefixd::server
