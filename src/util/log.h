// Where library code (store, cache, engine) sends its messages: one process-wide LogSink,
// stderr unless a program or a test installs another. Library code never writes to stderr
// itself; it calls Log() / Logf(). (Request lines of the HTTP server are its own: request_log.h.)
//
// Thread safety: Log() and SetLogSink() may be called from any thread. A sink's Write() may
// be called from several threads at once.
#pragma once

#include <cstdint>
#include <string_view>

namespace prefixd {

enum class LogLevel : uint8_t {
  kInfo,     // what the process did (a tier opened, a mode chosen)
  kWarning,  // something was refused or turned off; the process carries on
};

class LogSink {
 public:
  virtual ~LogSink() = default;
  // `message` carries no "prefixd: " prefix and no trailing newline.
  virtual void Write(LogLevel level, std::string_view message) = 0;
};

// Writes "prefixd: <message>\n" to stderr as one write. Lives for the whole process.
LogSink& StderrLogSink();

// Installs `sink` for every later Log() (nullptr: StderrLogSink()) and returns the one it
// replaces. REQUIRES: `sink` outlives its installation.
LogSink* SetLogSink(LogSink* sink);

void Log(LogLevel level, std::string_view message);
void Logf(LogLevel level, const char* format, ...) __attribute__((format(printf, 2, 3)));

// Installs a sink for its own lifetime, then puts back the one before (tests).
class ScopedLogSink {
 public:
  explicit ScopedLogSink(LogSink* sink) : previous_(SetLogSink(sink)) {}
  ~ScopedLogSink() { SetLogSink(previous_); }
  ScopedLogSink(const ScopedLogSink&) = delete;
  ScopedLogSink& operator=(const ScopedLogSink&) = delete;

 private:
  LogSink* previous_;
};

}  // namespace prefixd
