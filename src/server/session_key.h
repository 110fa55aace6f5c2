// The session a request belongs to, as the agents and the OpenAI API say it: a load balancer in
// front of several servers hashes the same key to keep a session where its prefix is in RAM
// (deploy/haproxy.cfg), and the logs, the web page and the metrics name it.
//
// Where it is looked for, first found wins (the same order deploy/haproxy.cfg hashes on):
//   headers  session-id, session_id (Codex), x-session-id, x-session-affinity (opencode),
//            x-claude-code-session-id (Claude Code);
//   body     prompt_cache_key (OpenAI's field for cache routing; Codex sends its session id),
//            metadata.user_id (Anthropic's; Claude Code's carries "..._session_<id>": the id),
//            user (OpenAI's end-user id).
// Pure; thread-safe.
#pragma once

#include <httplib.h>

#include <string>

namespace prefixd::server {

enum class SessionSource : uint8_t { kNone, kHeader, kPromptCacheKey, kMetadata, kUser };
// "none", "header", "prompt_cache_key", "metadata", "user": the names metrics use.
const char* SessionSourceName(SessionSource source);

struct SessionKey {
  std::string id;  // "" when none; at most kMaxSessionIdBytes of [A-Za-z0-9._:@+=/-]
  SessionSource source = SessionSource::kNone;
};

inline constexpr size_t kMaxSessionIdBytes = 128;

// The body is parsed only when no header names the session and it holds one of the fields.
SessionKey SessionKeyOf(const httplib::Request& req);

// `raw` made safe to log and to show: other bytes become '_', cut at kMaxSessionIdBytes.
std::string CleanSessionId(const std::string& raw);

}  // namespace prefixd::server
