#include "server/system_messages.h"

#include <optional>
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

// Joins contents one after another, each after a blank line: strings while all are strings
// (an empty one adds nothing), else text parts (a string becomes one part, empty or not). The
// text and the parts only grow at their end, so joining n contents costs their total size, not
// n times it.
class ContentJoiner {
 public:
  explicit ContentJoiner(const json& first) {
    if (first.is_string()) {
      text_ = first.get<std::string>();
    } else {
      parts_ = AsParts(first);
      is_parts_ = true;
    }
  }

  void Add(const json& more) {
    if (!is_parts_ && more.is_string()) {
      const std::string& b = more.get_ref<const std::string&>();
      if (text_.empty()) {
        text_ = b;
      } else if (!b.empty()) {
        text_ += "\n\n";
        text_ += b;
      }
      return;
    }
    if (!is_parts_) {
      parts_ = AsParts(json(std::move(text_)));
      is_parts_ = true;
    }
    for (const json& p : AsParts(more)) parts_.push_back(p);
  }

  // REQUIRES: Add() was called at least once (the first content alone is not rewritten).
  json Take() { return is_parts_ ? std::move(parts_) : json(std::move(text_)); }

 private:
  bool is_parts_ = false;
  std::string text_;
  json parts_;
};

json ContentOf(const json& msg) { return msg.contains("content") ? msg["content"] : json(""); }

// The placed messages. Contents joined onto the last message wait in `joiner_` and are
// written into it once, when another message follows or at the end.
class Placer {
 public:
  void Push(const json& msg) {
    Flush();
    out_.push_back(msg);
  }

  // Joins `content` onto the last message's content. REQUIRES: a message was pushed.
  void JoinOntoLast(const json& content) {
    if (!joiner_) joiner_.emplace(ContentOf(out_.back()));
    joiner_->Add(content);
  }

  bool Empty() const { return out_.empty(); }
  json& Last() { return out_.back(); }
  bool LastIsUser() const { return !out_.empty() && out_.back().value("role", "") == "user"; }

  json Take() {
    Flush();
    return std::move(out_);
  }

 private:
  void Flush() {
    if (!joiner_) return;
    out_.back()["content"] = joiner_->Take();
    joiner_.reset();
  }

  json out_ = json::array();
  std::optional<ContentJoiner> joiner_;
};

}  // namespace

json PlaceSystemMessages(const json& messages) {
  Placer out;
  size_t i = 0;
  for (; i < messages.size() && IsSystem(messages[i]); ++i) {
    if (out.Empty()) {
      out.Push(messages[i]);
    } else {
      out.JoinOntoLast(ContentOf(messages[i]));
      out.Last()["role"] = "system";
    }
  }
  bool open_fold = false;  // the last message is a user message a folded system message opened
  for (; i < messages.size(); ++i) {
    const json& msg = messages[i];
    const bool user = msg.value("role", "") == "user";
    if (IsSystem(msg)) {
      if (out.LastIsUser()) {
        out.JoinOntoLast(ContentOf(msg));
      } else {
        out.Push({{"role", "user"}, {"content", ContentOf(msg)}});
        open_fold = true;
      }
      continue;
    }
    if (user && open_fold) {
      out.JoinOntoLast(ContentOf(msg));
    } else {
      out.Push(msg);
    }
    open_fold = false;
  }
  return out.Take();
}

}  // namespace prefixd::server
