// What keeps other web pages from driving a server on this machine. With keys off (the
// default) any page the user visits can reach 127.0.0.1 from the browser:
//  - DNS rebinding: a page on evil.example that re-resolves its own name to 127.0.0.1 talks to
//    the server as its own origin and reads every answer; its requests say
//    `Host: evil.example`. CheckHost admits IP literals, `localhost` (and names under
//    `.localhost`), and the names given with `serve --allowed-host`.
//  - cross-site "simple" requests: a page may POST a form or text/plain to any origin without
//    asking first, and the server would act on it (clear the cache, run a request). A POST must
//    say `Content-Type: application/json`, which a page can send to another origin only after a
//    CORS preflight, which this server never grants, unless it carries an API key (which a
//    cross-site page cannot add without a preflight either).
// The page itself is served with a Content-Security-Policy of its own origin only,
// `X-Frame-Options: DENY` and `nosniff` (PageHeaders).
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/api_error.h"

namespace prefixd::server {

// nullopt when `host_header` (the request's Host, with or without a port; "" when absent) is
// one this server answers to; else the 403 to send.
std::optional<ApiError> CheckHost(const std::string& host_header,
                                  const std::vector<std::string>& allowed_hosts);

// nullopt when a request of `method` with `content_type` (its Content-Type header, "" when
// absent) may run; `has_key`: it carries an Authorization or x-api-key header.
std::optional<ApiError> CheckContentType(const std::string& method,
                                         const std::string& content_type, bool has_key);

// The headers the web page and its assets go out with.
std::vector<std::pair<std::string, std::string>> PageHeaders();

// CORS for the origins the operator names (`serve --cors-origin`; none by default, so no other
// origin's page may read an answer or send JSON). For a request from one of them: the headers
// that let its page read the answer, and for a preflight (OPTIONS) the methods and headers it
// may send. Empty for any other origin, or none.
std::vector<std::pair<std::string, std::string>> CorsHeaders(
    const std::string& origin, const std::vector<std::string>& allowed_origins, bool preflight);

}  // namespace prefixd::server
