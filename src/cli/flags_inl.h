#pragma once
#include <cstdio>

namespace prefixd::cli {

template <typename Body>
int RunWithFlags(Flags& flags, int argc, char** argv, Body body, int first) {
  Status st = flags.Parse(argc, argv, first);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n\n%s", st.message().c_str(), flags.Help().c_str());
    return 2;
  }
  return body();
}

}  // namespace prefixd::cli
