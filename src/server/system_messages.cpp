#include "server/system_messages.h"

#include <string>

namespace prefixd::server {
namespace {

using json = nlohmann::json;

bool IsSystem(const json& msg) {
  const std::string role = msg.value("role", "");
  return role == "system" || role == "developer";
}

// The content as text parts, so two contents can be joined whatever their form.
json AsParts(const json& content) {
  if (content.is_array()) return content;
  if (content.is_string()) return json::array({{{"type", "text"}, {"text", content}}});
  return json::array();
}

// `base` followed by `more`, a blank line between; strings stay strings.
json JoinContent(const json& base, const json& more) {
  if (base.is_string() && more.is_string()) {
    const std::string a = base.get<std::string>(), b = more.get<std::string>();
    return a.empty() ? b : b.empty() ? a : a + "\n\n" + b;
  }
  json parts = AsParts(base);
  for (const json& p : AsParts(more)) parts.push_back(p);
  return parts;
}

json ContentOf(const json& msg) { return msg.contains("content") ? msg["content"] : json(""); }

}  // namespace

json PlaceSystemMessages(const json& messages) {
  json out = json::array();
  size_t i = 0;
  for (; i < messages.size() && IsSystem(messages[i]); ++i) {
    if (out.empty()) {
      out.push_back(messages[i]);
    } else {
      out[0]["content"] = JoinContent(ContentOf(out[0]), ContentOf(messages[i]));
      out[0]["role"] = "system";
    }
  }
  bool open_fold = false;  // out.back() is a user message a folded system message opened
  for (; i < messages.size(); ++i) {
    const json& msg = messages[i];
    const bool user = msg.value("role", "") == "user";
    if (IsSystem(msg)) {
      if (!out.empty() && out.back().value("role", "") == "user") {
        out.back()["content"] = JoinContent(ContentOf(out.back()), ContentOf(msg));
      } else {
        out.push_back({{"role", "user"}, {"content", ContentOf(msg)}});
        open_fold = true;
      }
      continue;
    }
    if (user && open_fold) {
      out.back()["content"] = JoinContent(ContentOf(out.back()), ContentOf(msg));
    } else {
      out.push_back(msg);
    }
    open_fold = false;
  }
  return out;
}

}  // namespace prefixd::server
