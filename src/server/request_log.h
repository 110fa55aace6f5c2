// One structured line per HTTP request on stderr, in logfmt (key=value, values with spaces or
// quotes quoted), e.g.
//   prefixd request id=chatcmpl-… route=/v1/chat/completions status=200 tenant=- stream=1
//     prompt_tokens=812 cached=768 evaluated=44 completion=32 tier=ram finish=stop
//     queue_ms=0.1 prefill_ms=35.2 decode_ms=410.7 total_ms=447.9
// A miss adds miss_reason=…; a request that diverged from the longest cached path adds
// diverged_at=N and diverged="…before⟨|⟩after…" with a few tokens of context on each side.
// Thread-safety: WriteLogLine() may be called from any thread; lines never interleave.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"

namespace prefixd::server {

class Backend;

// A value longer than this is cut (whole UTF-8 characters) with a note of what was left out:
// a client's 4 MB string costs the log a few hundred bytes.
inline constexpr size_t kMaxLoggedValueBytes = 512;
std::string BoundForLog(const std::string& value);

class LogLine {
 public:
  explicit LogLine(const std::string& event) : text_("prefixd " + event) {}
  // Adds key=value, the value bounded (BoundForLog) and quoted as logfmt needs.
  LogLine& Add(const std::string& key, const std::string& value);
  LogLine& Add(const std::string& key, long long value);
  LogLine& Add(const std::string& key, double value);
  // Adds the cache and usage fields of a finished completion.
  LogLine& AddCompletion(const engine::CompletionResult& result);
  // Adds diverged_at and the text around it when the engine reported a divergence.
  LogLine& AddDivergence(const Backend& backend, const std::vector<engine::Token>& prompt,
                         int32_t diverged_at);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// The text of a few tokens either side of `at` in `prompt`, joined by "⟨|⟩"; "" when `at` is
// outside the prompt.
std::string DivergenceText(const Backend& backend, const std::vector<engine::Token>& prompt,
                           int32_t at);

// Quotes a logfmt value when it needs it; control characters are escaped.
std::string LogfmtValue(const std::string& value);

void WriteLogLine(const LogLine& line);
// Turns request logging off (tests); on by default.
void SetRequestLogEnabled(bool enabled);

}  // namespace prefixd::server
