// The shared tier's flags, declared the same way by `serve` and `cache stats`:
// --remote-cache redis://HOST:PORT[/DB] and --remote-cache-password-file FILE.
#pragma once

#include <string>

#include "util/flags.h"
#include "util/status.h"

namespace prefixd::cli {

struct RemoteCacheFlags {
  std::string url;            // "" : no shared tier
  std::string password_file;  // "" : no AUTH

  void Declare(Flags& flags);
  // The password: the file's first line (a trailing newline and CR are dropped); "" without a
  // file. IOError when the file cannot be read, InvalidArgument when it is empty.
  Result<std::string> Password() const;
};

}  // namespace prefixd::cli
