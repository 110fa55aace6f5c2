// The web page's files (web/ in the source tree), embedded in the binary at build time by
// cmake/embed_web_assets.cmake: served by GET / and GET /assets/{name} (routes_web.cpp),
// nothing to install beside the binary, nothing fetched from elsewhere.
#pragma once

#include <cstddef>
#include <string_view>

namespace prefixd::server {

struct WebAsset {
  const char* path;          // "/assets/app.js"; index.html also as "/"
  const char* content_type;
  const unsigned char* data;
  size_t size;
};

// The asset served at `path`, or null. The data lives as long as the program.
const WebAsset* FindWebAsset(std::string_view path);

}  // namespace prefixd::server
