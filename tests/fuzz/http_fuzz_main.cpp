// prefixd-http-fuzz: runs the HTTP fuzzer (http_fuzz.h) against a server on 127.0.0.1.
// Usage: prefixd-http-fuzz --port N [--seed S] [--requests N] [--seconds T] [--threads N]
//                          [--model ID] [--api-key KEY] [--max-messages N]
//                          [--answer-timeout-ms MS]
// Prints a summary; exits 1 on any violation or when the server stops serving, 2 on bad flags.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "http_fuzz.h"

int main(int argc, char** argv) {
  prefixd::fuzz::FuzzOptions o;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--port") o.port = std::atoi(value.c_str());
    else if (flag == "--seed") o.seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--requests") o.n_requests = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--seconds") o.max_seconds = std::atof(value.c_str());
    else if (flag == "--threads") o.n_threads = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--model") o.model = value;
    else if (flag == "--api-key") o.api_key = value;
    else if (flag == "--max-messages") o.max_messages = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--answer-timeout-ms") o.answer_timeout_ms = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "prefixd-http-fuzz: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  if (o.port <= 0 || argc % 2 == 0) {
    std::fprintf(stderr, "usage: prefixd-http-fuzz --port N [--seed S] [--requests N] "
                         "[--seconds T] [--threads N] [--model ID] [--api-key KEY] [--max-messages N] "
                         "[--answer-timeout-ms MS]\n");
    return 2;
  }
  prefixd::fuzz::FuzzReport report = prefixd::fuzz::RunFuzz(o);
  std::printf("prefixd-http-fuzz seed=%llu %s\n", (unsigned long long)o.seed,
              report.Summary().c_str());
  std::string why;
  if (!prefixd::fuzz::ServerStillServes(o, &why)) {
    std::printf("prefixd-http-fuzz: the server no longer serves: %s\n", why.c_str());
    return 1;
  }
  return report.n_violations == 0 ? 0 : 1;
}
