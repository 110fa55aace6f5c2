#include "server/session_key.h"

#include <nlohmann/json.hpp>

namespace prefixd::server {
namespace {

using nlohmann::json;

constexpr const char* kSessionHeaders[] = {"session-id", "session_id", "x-session-id",
                                           "x-session-affinity", "x-claude-code-session-id"};

bool SafeByte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == ':' || c == '@' || c == '+' || c == '=' || c == '/' ||
         c == '-';
}

// Claude Code's metadata.user_id is "user_<hash>_account_<uuid>_session_<uuid>": the session's
// part is what its X-Claude-Code-Session-Id header says.
std::string SessionOfUserId(const std::string& user_id) {
  const std::string marker = "_session_";
  const size_t at = user_id.rfind(marker);
  return at == std::string::npos ? user_id : user_id.substr(at + marker.size());
}

std::string StringField(const json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

SessionKey FromBody(const std::string& body) {
  // Most bodies name none of the fields: parse only those that might.
  if (body.empty() || body.front() != '{') return {};
  const bool might = body.find("\"prompt_cache_key\"") != std::string::npos ||
                     body.find("\"metadata\"") != std::string::npos ||
                     body.find("\"user\":") != std::string::npos ||
                     body.find("\"user\" :") != std::string::npos;
  if (!might) return {};
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return {};
  if (std::string id = StringField(j, "prompt_cache_key"); !id.empty()) {
    return {CleanSessionId(id), SessionSource::kPromptCacheKey};
  }
  if (auto m = j.find("metadata"); m != j.end() && m->is_object()) {
    if (std::string id = StringField(*m, "user_id"); !id.empty()) {
      return {CleanSessionId(SessionOfUserId(id)), SessionSource::kMetadata};
    }
  }
  if (std::string id = StringField(j, "user"); !id.empty()) {
    return {CleanSessionId(id), SessionSource::kUser};
  }
  return {};
}

}  // namespace

const char* SessionSourceName(SessionSource source) {
  switch (source) {
    case SessionSource::kNone: return "none";
    case SessionSource::kHeader: return "header";
    case SessionSource::kPromptCacheKey: return "prompt_cache_key";
    case SessionSource::kMetadata: return "metadata";
    case SessionSource::kUser: return "user";
  }
  return "none";
}

std::string CleanSessionId(const std::string& raw) {
  std::string out = raw.substr(0, kMaxSessionIdBytes);
  for (char& c : out) {
    if (!SafeByte(c)) c = '_';
  }
  return out;
}

SessionKey SessionKeyOf(const httplib::Request& req) {
  for (const char* name : kSessionHeaders) {
    const std::string v = req.get_header_value(name);
    if (!v.empty()) return {CleanSessionId(v), SessionSource::kHeader};
  }
  return FromBody(req.body);
}

}  // namespace prefixd::server
