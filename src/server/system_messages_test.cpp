#include "server/system_messages.h"

#include <gtest/gtest.h>

namespace prefixd::server {
namespace {

using json = nlohmann::json;

json Msg(const char* role, json content) { return {{"role", role}, {"content", content}}; }

TEST(PlaceSystemMessagesTest, LeavesAnOrdinaryChatAlone) {
  const json chat = json::array({Msg("system", "s"), Msg("user", "u"), Msg("assistant", "a"),
                                 Msg("user", "v")});
  EXPECT_EQ(PlaceSystemMessages(chat), chat);
}

TEST(PlaceSystemMessagesTest, JoinsTheLeadingRunIntoOneSystemMessage) {
  const json chat = json::array({Msg("developer", "d1"), Msg("system", "s2"), Msg("user", "u")});
  EXPECT_EQ(PlaceSystemMessages(chat),
            json::array({Msg("system", "d1\n\ns2"), Msg("user", "u")}));
}

// Claude Code's shape: a user turn of text blocks, then the environment as a system message.
TEST(PlaceSystemMessagesTest, FoldsALaterSystemMessageIntoTheUserTurnBefore) {
  const json parts = json::array({{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}});
  const json chat = json::array({Msg("system", "s"), Msg("user", parts), Msg("system", "env")});
  json want_parts = parts;
  want_parts.push_back({{"type", "text"}, {"text", "env"}});
  EXPECT_EQ(PlaceSystemMessages(chat), json::array({Msg("system", "s"), Msg("user", want_parts)}));
}

TEST(PlaceSystemMessagesTest, AfterAnAnswerOpensAUserTurnTheNextUserMessageJoins) {
  const json chat = json::array({Msg("user", "u"), Msg("assistant", "a"), Msg("system", "note"),
                                 Msg("user", "v"), Msg("assistant", "b")});
  EXPECT_EQ(PlaceSystemMessages(chat),
            json::array({Msg("user", "u"), Msg("assistant", "a"), Msg("user", "note\n\nv"),
                         Msg("assistant", "b")}));
  const json tool = {{"role", "tool"}, {"tool_call_id", "c"}, {"content", "r"}};
  const json after_tool = json::array({Msg("user", "u"), tool, Msg("developer", "d")});
  EXPECT_EQ(PlaceSystemMessages(after_tool),
            json::array({Msg("user", "u"), tool, Msg("user", "d")}));
}

// The prefix stays: what a message renders as never depends on the messages after it, so a
// conversation that grows keeps every earlier message's placed form.
TEST(PlaceSystemMessagesTest, AGrowingConversationKeepsItsPlacedPrefix) {
  const json full = json::array({Msg("system", "s"), Msg("user", "u"), Msg("system", "env"),
                                 Msg("assistant", "a"), Msg("system", "n"), Msg("user", "v"),
                                 Msg("assistant", "b"), Msg("user", "w")});
  const json placed_full = PlaceSystemMessages(full);
  for (size_t n = 1; n <= full.size(); ++n) {
    json head = json::array();
    for (size_t i = 0; i < n; ++i) head.push_back(full[i]);
    const json placed = PlaceSystemMessages(head);
    ASSERT_LE(placed.size(), placed_full.size());
    for (size_t i = 0; i + 1 < placed.size(); ++i) EXPECT_EQ(placed[i], placed_full[i]) << n;
    // The last placed message may still grow at its end (a fold waits for the next user
    // message); its role is already the one it keeps.
    EXPECT_EQ(placed.back()["role"], placed_full[placed.size() - 1]["role"]) << n;
  }
}

}  // namespace
}  // namespace prefixd::server
