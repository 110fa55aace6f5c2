#include "engine/chat/chat_output.h"

#include <exception>
#include <random>

#include "chat.h"

namespace prefixd::engine {

namespace {

std::string NewToolCallId() {
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof kChars - 1)];
  return id;
}

ChatMessage ToMessage(const common_chat_msg& m) {
  ChatMessage out;
  out.content = m.content;
  out.reasoning_content = m.reasoning_content;
  for (const auto& tc : m.tool_calls) out.tool_calls.push_back({tc.id, tc.name, tc.arguments});
  return out;
}

ChatDelta ToDelta(const common_chat_msg_diff& d) {
  ChatDelta out;
  out.reasoning_content = d.reasoning_content_delta;
  out.content = d.content_delta;
  if (d.tool_call_index != std::string::npos) {
    out.tool_index = d.tool_call_index;
    out.tool_call = {d.tool_call_delta.id, d.tool_call_delta.name, d.tool_call_delta.arguments};
  }
  return out;
}

}  // namespace

struct ChatOutputParser::Impl {
  common_chat_parser_params params;
  common_chat_msg msg;            // the last successful parse
  std::vector<std::string> ids;   // tool call ids, by index
  ChatMessage message;
  bool failed = false;            // the text left the format: plain content from here on
  size_t raw_sent = 0;            // with failed: content bytes of the raw text already sent

  std::vector<ChatDelta> Fallback(const std::string& text);
};

ChatOutputParser::ChatOutputParser(const OutputFormat& f) : impl_(std::make_unique<Impl>()) {
  common_chat_parser_params& p = impl_->params;
  p.format = common_chat_format(f.chat_format);
  p.generation_prompt = f.generation_prompt;
  p.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
  p.parse_tool_calls = f.parse_tool_calls;
  try {
    if (!f.parser.empty()) p.parser.load(f.parser);
  } catch (const std::exception&) {
    impl_->failed = true;  // an unreadable parser: the reply is plain content
  }
}

ChatOutputParser::~ChatOutputParser() = default;

const ChatMessage& ChatOutputParser::message() const { return impl_->message; }

// The text no longer parses: whatever was not yet sent as content goes out as content.
std::vector<ChatDelta> ChatOutputParser::Impl::Fallback(const std::string& text) {
  if (!failed) {
    failed = true;
    raw_sent = text.compare(0, msg.content.size(), msg.content) == 0 ? msg.content.size() : 0;
    if (msg.content.empty() && msg.reasoning_content.empty() && msg.tool_calls.empty()) {
      raw_sent = 0;
    }
  }
  message = ChatMessage{};
  message.content = text;
  std::vector<ChatDelta> out;
  if (text.size() > raw_sent) {
    ChatDelta d;
    d.content = text.substr(raw_sent);
    out.push_back(std::move(d));
    raw_sent = text.size();
  }
  return out;
}

std::vector<ChatDelta> ChatOutputParser::Update(const std::string& text, bool is_final) {
  Impl& m = *impl_;
  if (m.failed) return m.Fallback(text);
  std::vector<ChatDelta> out;
  try {
    common_chat_msg next = common_chat_parse(text, !is_final, m.params);
    if (next.empty()) return out;
    next.set_tool_call_ids(m.ids, NewToolCallId);
    for (const auto& d : common_chat_msg_diff::compute_diffs(m.msg, next)) {
      out.push_back(ToDelta(d));
    }
    m.msg = std::move(next);
    m.message = ToMessage(m.msg);
  } catch (const std::exception&) {
    return m.Fallback(text);
  }
  return out;
}

ChatMessage ParseChatOutput(const OutputFormat& format, const std::string& text) {
  ChatOutputParser parser(format);
  parser.Update(text, /*is_final=*/true);
  return parser.message();
}

}  // namespace prefixd::engine
