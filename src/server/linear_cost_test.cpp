// A request's conversion costs time linear in its size, whatever its shape: a conversation
// sent as many small pieces that the conversion merges (leading system messages, system
// messages folded into a user turn, consecutive assistant or reasoning items) converts about as
// fast as the same text sent already joined. Each test builds both bodies (a few MB), times the
// conversion the route runs (XToChat, then ParseChatRequest; no HTTP), checks that both give
// the same messages, and bounds the ratio of the times. Merging by re-copying the growing text
// (`text = text + piece`) makes the ratio grow with the number of pieces: tens to hundreds here.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "server/api_messages.h"
#include "server/api_responses.h"
#include "server/request_parse.h"

namespace prefixd::server {
namespace {

using json = nlohmann::json;
using Convert = std::function<std::string(const std::string& body)>;  // body -> messages JSON

// Many pieces may cost this many times the joined text; linear code measures 1-3x.
constexpr double kMaxRatio = 8.0;
// Times below this are rounded up to it, so that a very fast control measures no noise.
constexpr double kMinSeconds = 0.005;

std::string ChatMessages(const std::string& body) {
  ChatRequest r;
  auto e = ParseChatRequest(body, ParseLimits{}, &r);
  EXPECT_FALSE(e) << e->message;
  return r.messages_json;
}

std::string ResponsesMessages(const std::string& body) {
  std::string chat;
  auto e = ResponsesToChat(body, &chat);
  EXPECT_FALSE(e) << e->message;
  return e ? "" : ChatMessages(chat);
}

std::string AnthropicMessages(const std::string& body) {
  std::string chat;
  auto e = MessagesToChat(body, MessagesCall::kCreate, &chat);
  EXPECT_FALSE(e) << e->message;
  return e ? "" : ChatMessages(chat);
}

double SecondsOf(const std::function<void()>& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Converts both bodies (the fastest of up to three runs each, the noise of a shared machine
// being only ever slower), expects the same messages and a bounded ratio.
void ExpectLinear(const char* shape, const std::string& many, const std::string& joined,
                  const Convert& convert) {
  std::string out_many, out_joined;
  double t_joined = 1e9, t_many = 1e9;
  for (int run = 0; run < 3; ++run) {
    t_joined = std::min(t_joined, SecondsOf([&] { out_joined = convert(joined); }));
  }
  for (int run = 0; run < 3; ++run) {
    t_many = std::min(t_many, SecondsOf([&] { out_many = convert(many); }));
    if (t_many < kMaxRatio * std::max(t_joined, kMinSeconds)) break;
    if (t_many > 4 * kMaxRatio * std::max(t_joined, kMinSeconds)) break;  // not noise
  }
  const double ratio = t_many / std::max(t_joined, kMinSeconds);
  std::printf("[ linear   ] %s: many pieces %.3f s (%zu bytes), joined %.3f s (%zu bytes), "
              "ratio %.1f\n",
              shape, t_many, many.size(), t_joined, joined.size(), ratio);
  EXPECT_FALSE(out_joined.empty());
  EXPECT_TRUE(out_many == out_joined) << shape << ": the pieces converted to other messages";
  EXPECT_LT(ratio, kMaxRatio) << shape << ": many pieces cost " << ratio << "x the joined text";
}

// Pieces long enough that the cost of a piece's own JSON object does not dominate the ratio
// (one-character pieces measure 20-30x with linear code: an object costs ~1 us, a byte ~5 ns).
constexpr size_t kPieceBytes = 128;
constexpr size_t kPieces = 16 * 1024;  // ~2 MB of text, ~2.6 MB of messages

std::string Piece(size_t i) { return std::string(kPieceBytes, char('a' + i % 26)); }

// The pieces' texts joined by `sep`.
std::string Joined(size_t n, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += (i ? sep : "") + Piece(i);
  return s;
}

json Msg(const char* role, json content) { return {{"role", role}, {"content", std::move(content)}}; }
json TextPart(const char* type, const std::string& text) { return {{"type", type}, {"text", text}}; }

std::string ChatBody(json messages) { return json{{"messages", std::move(messages)}}.dump(); }

// Codex sends several developer messages first: the leading run becomes one system message.
TEST(LinearCost, ChatLeadingSystemMessages) {
  json many = json::array();
  for (size_t i = 0; i < kPieces; ++i) many.push_back(Msg("system", Piece(i)));
  many.push_back(Msg("user", "u"));
  json joined = json::array({Msg("system", Joined(kPieces, "\n\n")), Msg("user", "u")});
  ExpectLinear("chat: leading system messages", ChatBody(many), ChatBody(joined), ChatMessages);
}

// The same run with content as text parts: the parts are gathered into one array. Fewer: the
// old code copied the gathered parts for each message, ~1 s for 2K messages.
TEST(LinearCost, ChatLeadingSystemMessagesOfParts) {
  constexpr size_t kParts = 2 * 1024;
  json many = json::array(), parts = json::array();
  for (size_t i = 0; i < kParts; ++i) {
    many.push_back(Msg("system", json::array({TextPart("text", Piece(i))})));
    parts.push_back(TextPart("text", Piece(i)));
  }
  many.push_back(Msg("user", "u"));
  json joined = json::array({Msg("system", parts), Msg("user", "u")});
  ExpectLinear("chat: leading system messages of parts", ChatBody(many), ChatBody(joined),
               ChatMessages);
}

// System messages after a user turn are folded into it.
TEST(LinearCost, ChatSystemMessagesFoldedIntoTheUserTurn) {
  json many = json::array({Msg("user", "u")});
  for (size_t i = 0; i < kPieces; ++i) many.push_back(Msg("system", Piece(i)));
  json joined = json::array({Msg("user", "u\n\n" + Joined(kPieces, "\n\n"))});
  ExpectLinear("chat: system messages folded into a user turn", ChatBody(many), ChatBody(joined),
               ChatMessages);
}

// After an assistant turn a system message opens a user turn, which the next ones join.
TEST(LinearCost, ChatSystemMessagesAfterAnAssistantTurn) {
  json many = json::array({Msg("user", "u"), Msg("assistant", "a")});
  for (size_t i = 0; i < kPieces; ++i) many.push_back(Msg("system", Piece(i)));
  json joined =
      json::array({Msg("user", "u"), Msg("assistant", "a"), Msg("user", Joined(kPieces, "\n\n"))});
  ExpectLinear("chat: system messages after an assistant turn", ChatBody(many), ChatBody(joined),
               ChatMessages);
}

std::string ResponsesBody(json input) { return json{{"input", std::move(input)}}.dump(); }

json AssistantItem(const std::string& text) {
  return {{"type", "message"}, {"role", "assistant"},
          {"content", json::array({TextPart("output_text", text)})}};
}

json ReasoningItem(const std::string& text) {
  return {{"type", "reasoning"}, {"summary", json::array()},
          {"content", json::array({TextPart("reasoning_text", text)})}};
}

// The items of one assistant turn merge into one assistant message.
TEST(LinearCost, ResponsesConsecutiveAssistantItems) {
  json many = json::array({Msg("user", "u")});
  for (size_t i = 0; i < kPieces; ++i) many.push_back(AssistantItem(Piece(i)));
  json joined = json::array({Msg("user", "u"), AssistantItem(Joined(kPieces, ""))});
  ExpectLinear("responses: consecutive assistant items", ResponsesBody(many),
               ResponsesBody(joined), ResponsesMessages);
}

// Consecutive reasoning items merge into one reasoning_content.
TEST(LinearCost, ResponsesConsecutiveReasoningItems) {
  json many = json::array({Msg("user", "u")});
  for (size_t i = 0; i < kPieces; ++i) many.push_back(ReasoningItem(Piece(i)));
  json joined = json::array({Msg("user", "u"), ReasoningItem(Joined(kPieces, ""))});
  ExpectLinear("responses: consecutive reasoning items", ResponsesBody(many),
               ResponsesBody(joined), ResponsesMessages);
}

// Leading developer items become one system message (through the chat path).
TEST(LinearCost, ResponsesLeadingDeveloperItems) {
  json many = json::array();
  for (size_t i = 0; i < kPieces; ++i) {
    many.push_back({{"type", "message"}, {"role", "developer"}, {"content", Piece(i)}});
  }
  many.push_back(Msg("user", "u"));
  json joined = json::array({Msg("system", Joined(kPieces, "\n\n")), Msg("user", "u")});
  ExpectLinear("responses: leading developer items", ResponsesBody(many), ResponsesBody(joined),
               ResponsesMessages);
}

std::string AnthropicBody(json system, json messages) {
  json body = {{"max_tokens", 16}, {"messages", std::move(messages)}};
  if (!system.is_null()) body["system"] = std::move(system);
  return body.dump();
}

// Claude Code's environment as system messages inside the conversation, folded into the turn.
TEST(LinearCost, AnthropicSystemMessagesInTheConversation) {
  json many = json::array({Msg("user", "u")});
  for (size_t i = 0; i < kPieces; ++i) many.push_back(Msg("system", Piece(i)));
  json joined = json::array({Msg("user", "u\n\n" + Joined(kPieces, "\n\n"))});
  ExpectLinear("anthropic: system messages in the conversation", AnthropicBody(nullptr, many),
               AnthropicBody(nullptr, joined), AnthropicMessages);
}

// The system prompt as many text blocks, joined into one system message.
TEST(LinearCost, AnthropicSystemBlocks) {
  json blocks = json::array();
  for (size_t i = 0; i < kPieces; ++i) blocks.push_back(TextPart("text", Piece(i)));
  const json user = json::array({Msg("user", "u")});
  ExpectLinear("anthropic: system blocks", AnthropicBody(blocks, user),
               AnthropicBody(Joined(kPieces, "\n\n"), user), AnthropicMessages);
}

// An assistant turn of many thinking and text blocks: one reasoning_content, one content.
TEST(LinearCost, AnthropicThinkingAndTextBlocks) {
  json blocks = json::array();
  for (size_t i = 0; i < kPieces / 2; ++i) {
    blocks.push_back({{"type", "thinking"}, {"thinking", Piece(i)}, {"signature", ""}});
  }
  for (size_t i = 0; i < kPieces / 2; ++i) blocks.push_back(TextPart("text", Piece(i)));
  json joined = json::array({{{"type", "thinking"}, {"thinking", Joined(kPieces / 2, "")},
                              {"signature", ""}},
                             TextPart("text", Joined(kPieces / 2, ""))});
  const json u = Msg("user", "u");
  ExpectLinear("anthropic: thinking and text blocks",
               AnthropicBody(nullptr, json::array({u, Msg("assistant", blocks)})),
               AnthropicBody(nullptr, json::array({u, Msg("assistant", joined)})),
               AnthropicMessages);
}

}  // namespace
}  // namespace prefixd::server
