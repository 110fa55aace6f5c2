#include "cli/remote_flags.h"

#include "util/env.h"

namespace prefixd::cli {

void RemoteCacheFlags::Declare(Flags& flags) {
  flags.String("--remote-cache", &url,
               "shared cache tier on Redis, redis://HOST:PORT[/DB], used by every server given "
               "the same URL (docs/deployment.md); no TLS (Debian's hiredis has none)");
  flags.String("--remote-cache-password-file", &password_file,
               "file whose first line is the Redis password (AUTH)");
}

Result<std::string> RemoteCacheFlags::Password() const {
  if (password_file.empty()) return std::string();
  PREFIXD_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, Env::Default()->ReadFile(password_file));
  std::string text(bytes.begin(), bytes.end());
  text = text.substr(0, text.find('\n'));
  if (!text.empty() && text.back() == '\r') text.pop_back();
  if (text.empty()) {
    return Status::InvalidArgument("--remote-cache-password-file " + password_file + " is empty");
  }
  return text;
}

}  // namespace prefixd::cli
