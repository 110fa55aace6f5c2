#include "util/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <string>

namespace prefixd {

namespace {

class StderrSink final : public LogSink {
 public:
  void Write(LogLevel, std::string_view message) override {
    std::fprintf(stderr, "prefixd: %.*s\n", int(message.size()), message.data());
  }
};

std::atomic<LogSink*> g_sink{nullptr};

}  // namespace

LogSink& StderrLogSink() {
  static StderrSink sink;
  return sink;
}

LogSink* SetLogSink(LogSink* sink) {
  return g_sink.exchange(sink);
}

void Log(LogLevel level, std::string_view message) {
  LogSink* sink = g_sink.load();
  (sink != nullptr ? *sink : StderrLogSink()).Write(level, message);
}

void Logf(LogLevel level, const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, format, copy);
  va_end(copy);
  std::string message(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(message.data(), message.size() + 1, format, args);
  va_end(args);
  Log(level, message);
}

}  // namespace prefixd
