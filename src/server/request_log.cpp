#include "server/request_log.h"

#include <atomic>
#include <cstdio>

#include "server/backend.h"
#include "util/mutex.h"

namespace prefixd::server {
namespace {

constexpr int kContextTokens = 4;
std::atomic<bool> g_enabled{true};

bool NeedsQuotes(const std::string& v) {
  if (v.empty()) return true;
  for (unsigned char c : v) {
    if (c <= ' ' || c == '"' || c == '=' || c == '\\' || c == 0x7f) return true;
  }
  return false;
}

}  // namespace

std::string LogfmtValue(const std::string& value) {
  if (!NeedsQuotes(value)) return value;
  std::string out = "\"";
  for (unsigned char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < ' ' || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

LogLine& LogLine::Add(const std::string& key, const std::string& value) {
  text_ += " " + key + "=" + LogfmtValue(BoundForLog(value));
  return *this;
}

std::string BoundForLog(const std::string& value) {
  if (value.size() <= kMaxLoggedValueBytes) return value;
  size_t cut = kMaxLoggedValueBytes;
  while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) --cut;  // whole UTF-8
  return value.substr(0, cut) + "...(" + std::to_string(value.size() - cut) + " more bytes)";
}

LogLine& LogLine::Add(const std::string& key, long long value) {
  text_ += " " + key + "=" + std::to_string(value);
  return *this;
}

LogLine& LogLine::Add(const std::string& key, double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", value);
  text_ += " " + key + "=" + buf;
  return *this;
}

LogLine& LogLine::AddCompletion(const engine::CompletionResult& r) {
  const engine::Usage& u = r.usage;
  Add("prompt_tokens", (long long)u.prompt_tokens).Add("cached", (long long)u.cached_tokens);
  Add("evaluated", (long long)u.evaluated_tokens).Add("completion", (long long)u.completion_tokens);
  Add("tier", cache::TierName(r.cache.tier));
  if (r.cache.miss != engine::CacheMiss::kNotMissed) {
    Add("miss_reason", cache::MissReasonName(r.cache.miss));
  }
  Add("finish", engine::FinishReasonName(r.finish_reason));
  Add("queue_ms", u.queue_ms).Add("prefetch_ms", u.prefetch_ms);  // the second part of the first
  Add("prefill_ms", u.prefill_ms).Add("decode_ms", u.decode_ms);
  Add("restore_ms", u.restore_ms).Add("restored_bytes", (long long)u.restored_bytes);
  Add("eval_ms", u.prompt_eval_ms).Add("chunks", (long long)u.prefill_chunks);
  Add("captures", (long long)u.captures).Add("capture_ms", u.capture_ms);
  Add("publish_ms", u.publish_ms);
  if (u.draft_steps > 0) {
    Add("drafted", (long long)u.draft_tokens).Add("draft_accepted", (long long)u.draft_accepted);
    if (u.cached_tokens > 0) Add("mtp_cached", (long long)u.mtp_restored_tokens);
  }
  return *this;
}

std::string DivergenceText(const Backend& backend, const std::vector<engine::Token>& prompt,
                           int32_t at) {
  if (at < 0 || size_t(at) > prompt.size()) return "";
  size_t lo = at >= kContextTokens ? size_t(at - kContextTokens) : 0;
  size_t hi = std::min(prompt.size(), size_t(at) + kContextTokens);
  std::vector<engine::Token> before(prompt.begin() + lo, prompt.begin() + at);
  std::vector<engine::Token> after(prompt.begin() + at, prompt.begin() + hi);
  return backend.Detokenize(before) + "\u27e8|\u27e9" + backend.Detokenize(after);
}

LogLine& LogLine::AddDivergence(const Backend& backend, const std::vector<engine::Token>& prompt,
                                int32_t at) {
  if (at < 0 || size_t(at) > prompt.size()) return *this;
  Add("diverged_at", (long long)at);
  return Add("diverged", DivergenceText(backend, prompt, at));
}

void WriteLogLine(const LogLine& line) {
  if (!g_enabled) return;
  static Mutex mu;  // keeps lines whole on stderr (it guards no field)
  MutexLock lock(&mu);
  std::fprintf(stderr, "%s\n", line.text().c_str());
  std::fflush(stderr);
}

void SetRequestLogEnabled(bool enabled) { g_enabled = enabled; }

}  // namespace prefixd::server
