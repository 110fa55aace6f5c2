#include "server/session_key.h"

#include <gtest/gtest.h>

namespace prefixd::server {
namespace {

httplib::Request With(std::initializer_list<std::pair<const char*, const char*>> headers,
                      std::string body = "") {
  httplib::Request req;
  for (const auto& [k, v] : headers) req.set_header(k, v);
  req.body = std::move(body);
  return req;
}

TEST(SessionKeyTest, EachAgentsHeaderNamesTheSession) {
  for (const char* h : {"session-id", "Session_Id", "x-session-id", "X-Session-Affinity",
                        "X-Claude-Code-Session-Id"}) {
    SessionKey k = SessionKeyOf(With({{h, "abc-123"}}));
    EXPECT_EQ(k.id, "abc-123") << h;
    EXPECT_EQ(k.source, SessionSource::kHeader) << h;
  }
}

TEST(SessionKeyTest, AHeaderWinsOverTheBody) {
  SessionKey k = SessionKeyOf(With({{"session-id", "h"}}, R"({"prompt_cache_key":"b"})"));
  EXPECT_EQ(k.id, "h");
}

TEST(SessionKeyTest, BodyFieldsInOrder) {
  EXPECT_EQ(SessionKeyOf(With({}, R"({"user":"u","prompt_cache_key":"p"})")).id, "p");
  SessionKey m = SessionKeyOf(With(
      {}, R"({"metadata":{"user_id":"user_9f_account_1c_session_5f3c-aa"},"user":"u"})"));
  EXPECT_EQ(m.id, "5f3c-aa");
  EXPECT_EQ(m.source, SessionSource::kMetadata);
  SessionKey u = SessionKeyOf(With({}, R"({"messages":[{"role":"user"}],"user":"alice"})"));
  EXPECT_EQ(u.id, "alice");
  EXPECT_EQ(u.source, SessionSource::kUser);
}

TEST(SessionKeyTest, NoKeyIsNone) {
  SessionKey k = SessionKeyOf(With({}, R"({"messages":[{"role":"user","content":"hi"}]})"));
  EXPECT_EQ(k.id, "");
  EXPECT_EQ(k.source, SessionSource::kNone);
  EXPECT_EQ(SessionKeyOf(With({}, "not json {")).source, SessionSource::kNone);
  EXPECT_EQ(SessionKeyOf(With({}, R"({"prompt_cache_key":7})")).source, SessionSource::kNone);
}

TEST(SessionKeyTest, IdsAreMadeSafeToLogAndBounded) {
  EXPECT_EQ(CleanSessionId("a b\n\"c\x01"), "a_b__c_");
  EXPECT_EQ(CleanSessionId(std::string(500, 'x')).size(), kMaxSessionIdBytes);
  EXPECT_EQ(SessionKeyOf(With({{"x-session-id", "id\twith tab"}})).id, "id_with_tab");
}

}  // namespace
}  // namespace prefixd::server
