#include "server/browser_guard.h"

#include <algorithm>
#include <cctype>

namespace prefixd::server {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The host name of a Host header: without its port, brackets kept off an IPv6 literal.
std::string HostName(const std::string& header, bool* ipv6) {
  *ipv6 = !header.empty() && header[0] == '[';
  if (*ipv6) {
    const size_t close = header.find(']');
    return close == std::string::npos ? "" : header.substr(1, close - 1);
  }
  return Lower(header.substr(0, header.find(':')));
}

bool IsIpv4Literal(const std::string& name) {
  int dots = 0;
  size_t digits = 0;
  for (char c : name) {
    if (c == '.') {
      if (digits == 0) return false;
      ++dots;
      digits = 0;
    } else if (std::isdigit(static_cast<unsigned char>(c)) && ++digits <= 3) {
    } else {
      return false;
    }
  }
  return dots == 3 && digits > 0;
}

bool EndsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::optional<ApiError> CheckHost(const std::string& host_header,
                                  const std::vector<std::string>& allowed_hosts) {
  if (host_header.empty()) return std::nullopt;  // HTTP/1.0: no browser sends that
  bool ipv6 = false;
  const std::string name = HostName(host_header, &ipv6);
  if (ipv6 || IsIpv4Literal(name) || name == "localhost" || EndsWith(name, ".localhost")) {
    return std::nullopt;
  }
  for (const std::string& a : allowed_hosts) {
    if (Lower(a) == name) return std::nullopt;
  }
  return ApiError{ErrorKind::kForbidden,
                  "Host '" + host_header.substr(0, 200) +
                      "' is not one this server answers to (a page that re-resolved its name "
                      "to this machine?): use an IP address or localhost, or start prefixd "
                      "serve with --allowed-host NAME",
                  "", "host_not_allowed"};
}

std::optional<ApiError> CheckContentType(const std::string& method,
                                         const std::string& content_type, bool has_key) {
  if (method != "POST" || has_key) return std::nullopt;
  const std::string type = Lower(content_type.substr(0, content_type.find(';')));
  const size_t end = type.find_last_not_of(" \t");
  if (end != std::string::npos && type.substr(0, end + 1) == "application/json") {
    return std::nullopt;
  }
  return ApiError{ErrorKind::kUnsupportedMediaType,
                  "a POST must send Content-Type: application/json (got '" +
                      content_type.substr(0, 100) + "'), so that no other web page can send it",
                  "", "unsupported_media_type"};
}

std::vector<std::pair<std::string, std::string>> PageHeaders() {
  return {{"Content-Security-Policy",
           "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; "
           "form-action 'self'"},
          {"X-Frame-Options", "DENY"},
          {"X-Content-Type-Options", "nosniff"},
          {"Referrer-Policy", "no-referrer"}};
}

std::vector<std::pair<std::string, std::string>> CorsHeaders(
    const std::string& origin, const std::vector<std::string>& allowed_origins, bool preflight) {
  if (origin.empty() ||
      std::find(allowed_origins.begin(), allowed_origins.end(), origin) == allowed_origins.end()) {
    return {};
  }
  std::vector<std::pair<std::string, std::string>> out = {{"Access-Control-Allow-Origin", origin},
                                                           {"Vary", "Origin"}};
  if (preflight) {
    out.push_back({"Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"});
    out.push_back({"Access-Control-Allow-Headers",
                   "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta"});
    out.push_back({"Access-Control-Max-Age", "600"});
  }
  return out;
}

}  // namespace prefixd::server
