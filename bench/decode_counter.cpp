// A bench instrument, preloaded into a server under test (LD_PRELOAD): it interposes llama.cpp's
// llama_decode and appends one line per call to the file named by PREFIXD_DECODE_LOG,
//   "<tokens in the batch> <ubatches> <outputs>\n"
// where ubatches = ceil(tokens / llama_n_ubatch(ctx)) (llama.cpp splits a one-sequence batch
// into that many forward passes) and outputs counts the rows whose logits the caller asked for
// (a decode step asks for its one row; a prefill call that does not end the prompt, for none).
// prefixd and llama-server are counted by the same code, so the bench can put the ubatches of
// one request side by side (`prefixd bench --decode-log`).
//
// It adds a write(2) per call; the call is forwarded unchanged.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "llama.h"

namespace {

using DecodeFn = int32_t (*)(llama_context*, llama_batch);
using NUbatchFn = uint32_t (*)(const llama_context*);

int LogFd() {
  static const int fd = [] {
    const char* path = std::getenv("PREFIXD_DECODE_LOG");
    return path ? open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : -1;
  }();
  return fd;
}

}  // namespace

extern "C" int32_t llama_decode(llama_context* ctx, llama_batch batch) {
  static const auto real = reinterpret_cast<DecodeFn>(dlsym(RTLD_NEXT, "llama_decode"));
  static const auto n_ubatch = reinterpret_cast<NUbatchFn>(dlsym(RTLD_NEXT, "llama_n_ubatch"));
  if (!real) std::abort();
  const int fd = LogFd();
  if (fd >= 0 && batch.n_tokens > 0) {
    const uint32_t u = n_ubatch ? n_ubatch(ctx) : 0;
    const long ubatches = u > 0 ? (batch.n_tokens + long(u) - 1) / long(u) : 1;
    int outputs = batch.logits ? 0 : 1;  // without flags llama.cpp outputs the last row
    for (int i = 0; batch.logits && i < batch.n_tokens; ++i) outputs += batch.logits[i] != 0;
    char line[96];
    const int n =
        std::snprintf(line, sizeof line, "%d %ld %d\n", batch.n_tokens, ubatches, outputs);
    if (n > 0 && write(fd, line, size_t(n)) != n) {
      // A bench instrument: a lost line shows as a short count, never as a failed decode.
    }
  }
  return real(ctx, batch);
}
