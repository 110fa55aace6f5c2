// Small pieces of the server: SSE framing and UTF-8 carry, error mapping, metrics, auth, logs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/admission.h"
#include "server/api_error.h"
#include "server/auth.h"
#include "server/connection_guard.h"
#include "server/metrics.h"
#include "server/request_log.h"
#include "server/response_json.h"
#include "server/sse.h"

namespace prefixd::server {
namespace {

TEST(ResponseJson, ChatMessageWithToolCalls) {
  ResponseMeta meta{Endpoint::kChat, "chatcmpl-1", 1, "m"};
  engine::CompletionResult r;
  r.finish_reason = engine::FinishReason::kStop;
  engine::ChatMessage m;
  m.reasoning_content = "think";
  m.tool_calls.push_back({"call_1", "f", R"({"a":1})"});
  nlohmann::json body = FinalJson(meta, r, &m);
  const auto& choice = body["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  EXPECT_EQ(choice["message"]["reasoning_content"], "think");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["type"], "function");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"a":1})");
  r.finish_reason = engine::FinishReason::kLength;  // cut off: not a finished call
  EXPECT_EQ(FinalJson(meta, r, &m)["choices"][0]["finish_reason"], "length");
  engine::ChatMessage plain;
  plain.content = "hi";
  r.finish_reason = engine::FinishReason::kStop;
  nlohmann::json p = FinalJson(meta, r, &plain)["choices"][0];
  EXPECT_EQ(p["message"]["content"], "hi");
  EXPECT_FALSE(p["message"].contains("tool_calls"));
  EXPECT_FALSE(p["message"].contains("reasoning_content"));
}

TEST(ResponseJson, ChatDeltas) {
  ResponseMeta meta{Endpoint::kChat, "chatcmpl-1", 1, "m"};
  engine::ChatDelta d;
  d.tool_index = 1;
  d.tool_call = {"call_9", "f", "{\"a\""};
  nlohmann::json delta = ChatDeltaJson(meta, d, /*first=*/true, false)["choices"][0]["delta"];
  EXPECT_EQ(delta["role"], "assistant");
  EXPECT_FALSE(delta.contains("content"));
  EXPECT_EQ(delta["tool_calls"][0]["index"], 1);
  EXPECT_EQ(delta["tool_calls"][0]["id"], "call_9");
  EXPECT_EQ(delta["tool_calls"][0]["type"], "function");
  EXPECT_EQ(delta["tool_calls"][0]["function"]["name"], "f");
  EXPECT_EQ(delta["tool_calls"][0]["function"]["arguments"], "{\"a\"");
  engine::ChatDelta more;
  more.tool_index = 1;
  more.tool_call.arguments = ":1}";
  delta = ChatDeltaJson(meta, more, false, false)["choices"][0]["delta"];
  EXPECT_FALSE(delta["tool_calls"][0].contains("id"));
  EXPECT_FALSE(delta["tool_calls"][0]["function"].contains("name"));
  engine::ChatDelta r;
  r.reasoning_content = "hm";
  delta = ChatDeltaJson(meta, r, false, false)["choices"][0]["delta"];
  EXPECT_EQ(delta["reasoning_content"], "hm");
  EXPECT_FALSE(delta.contains("content"));
}

TEST(Sse, Framing) {
  EXPECT_EQ(SseData("{}"), "data: {}\n\n");
  EXPECT_EQ(SseDone(), "data: [DONE]\n\n");
}

TEST(Utf8Carry, HoldsBackUnfinishedCharacters) {
  Utf8Carry c;
  EXPECT_EQ(c.Take("a\xE2"), "a");
  EXPECT_EQ(c.Take("\x82"), "");
  EXPECT_EQ(c.Take("\xAC" "b"), "\xE2\x82\xAC" "b");
  EXPECT_EQ(c.Take("\xF0\x9F\x98"), "");
  EXPECT_EQ(c.Take("\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(c.Take("\xC3"), "");
  EXPECT_EQ(c.Flush(), "\xC3");
  EXPECT_EQ(c.Flush(), "");
  EXPECT_EQ(c.Take("\x80x"), "\x80x");  // a stray continuation byte is passed on
}

TEST(ApiError, StatusChosenInOnePlace) {
  EXPECT_EQ(HttpStatusOf(ErrorKind::kInvalidRequest), 400);
  EXPECT_EQ(HttpStatusOf(ErrorKind::kContextExceeded), 400);
  EXPECT_EQ(HttpStatusOf(ErrorKind::kUnauthorized), 401);
  EXPECT_EQ(HttpStatusOf(ErrorKind::kModelNotFound), 404);
  EXPECT_EQ(HttpStatusOf(ErrorKind::kPayloadTooLarge), 413);
  EXPECT_EQ(HttpStatusOf(ErrorKind::kOverloaded), 503);
  EXPECT_EQ(RetryAfterSecondsOf(ErrorKind::kOverloaded), 1);
  EXPECT_EQ(ApiErrorFromStatus(Status::ResourceExhausted("queue")).kind, ErrorKind::kOverloaded);
  EXPECT_EQ(ApiErrorFromStatus(Status::InvalidArgument("prompt exceeds the context")).code,
            "context_length_exceeded");
  EXPECT_EQ(ApiErrorFromStatus(Status::IOError("disk")).kind, ErrorKind::kInternal);
  auto body = nlohmann::json::parse(ErrorBody(ApiError::Invalid("bad \xFF", "x")));
  EXPECT_EQ(body["error"]["param"], "x");
  EXPECT_TRUE(body["error"]["code"].is_null());
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
}

TEST(AddressCounts, CapsEachAddressAlone) {
  AddressCounts counts(2);
  EXPECT_TRUE(counts.Acquire("10.0.0.1"));
  EXPECT_TRUE(counts.Acquire("10.0.0.1"));
  EXPECT_FALSE(counts.Acquire("10.0.0.1")) << "a third connection from the address";
  EXPECT_EQ(counts.open("10.0.0.1"), 2u);
  EXPECT_TRUE(counts.Acquire("10.0.0.2")) << "another address is not counted with it";
  counts.Release("10.0.0.1");
  EXPECT_TRUE(counts.Acquire("10.0.0.1"));
  counts.Release("10.0.0.9");  // never acquired: nothing happens
  EXPECT_EQ(counts.open("10.0.0.9"), 0u);
  AddressCounts uncapped(0);
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(uncapped.Acquire("10.0.0.1"));
}

TEST(ApiError, TooManyConnectionsIs429WithRetryAfter) {
  EXPECT_EQ(HttpStatusOf(ErrorKind::kTooManyConnections), 429);
  EXPECT_EQ(RetryAfterSecondsOf(ErrorKind::kTooManyConnections), 1);
  EXPECT_STREQ(ErrorTypeOf(ErrorKind::kTooManyConnections), "rate_limit_error");
}

TEST(Metrics, HistogramIsCumulative) {
  Histogram h({1, 2});
  h.Observe(0.5);
  h.Observe(1.5);
  h.Observe(9);
  std::string out;
  h.Render("x", "a=\"b\"", &out);
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"2\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{a=\"b\",le=\"+Inf\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count{a=\"b\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum{a=\"b\"} 11\n"), std::string::npos) << out;
}

TEST(Metrics, RendersEngineCounters) {
  ServerMetrics m;
  m.RecordRequest("/health", 200, 0.001);
  m.RecordCancelled();
  engine::EngineStats s;
  s.hits_disk = 4;
  s.misses_by_reason[engine::CacheMiss::kDiverged] = 2;
  s.evictions_by_tier[engine::CacheTier::kDisk] = 3;
  std::string page = m.Render(s, ServedModel{"m", 16});
  for (const char* line :
       {"prefixd_http_requests_total{route=\"/health\",status=\"200\"} 1\n",
        "prefixd_cache_hits_total{tier=\"disk\"} 4\n",
        "prefixd_cache_misses_by_reason_total{reason=\"diverged\"} 2\n",
        "prefixd_cache_evictions_total{tier=\"disk\"} 3\n",
        "prefixd_requests_cancelled_total 1\n", "# TYPE prefixd_cache_bytes gauge\n"}) {
    EXPECT_NE(page.find(line), std::string::npos) << line;
  }
}

TEST(Auth, SaltIsHmacSha256OfTheKeyUnderTheSecret) {
  // The salt format of every release so far: HMAC-SHA256(secret, "prefixd tenant salt v1\n" +
  // key) in hex (the value below was computed independently, with Python's hmac module), so
  // disk caches written before the switch to OpenSSL's HMAC keep their keys.
  EXPECT_EQ(TenantAuth::SaltOf("secret", "key-a"),
            "6ffffa29450adc82a11ec5fbac4affc276c6db910e7262240bf5ae31101fc040");
  std::string a = TenantAuth::SaltOf("secret", "key-a");
  EXPECT_EQ(a.size(), 64u);
  EXPECT_NE(a, TenantAuth::SaltOf("secret", "key-b"));
  EXPECT_NE(a, TenantAuth::SaltOf("secret2", "key-a"));
}

TEST(Auth, PresentedKeyFromEitherHeader) {
  EXPECT_EQ(PresentedKey("", ""), "");
  EXPECT_EQ(PresentedKey("Bearer k1", ""), "k1");
  EXPECT_EQ(PresentedKey("bearer  k1 ", ""), "k1");
  EXPECT_EQ(PresentedKey("BEARER k1", ""), "k1");
  EXPECT_EQ(PresentedKey("Basic k1", ""), "");
  EXPECT_EQ(PresentedKey("Bearer", ""), "");
  EXPECT_EQ(PresentedKey("", "k2"), "k2");
  EXPECT_EQ(PresentedKey("", " k2 "), "k2");
  EXPECT_EQ(PresentedKey("Bearer k1", "k1"), "k1");
  EXPECT_EQ(PresentedKey("Bearer k1", "k2"), std::nullopt);
  EXPECT_EQ(PresentedKey("Basic zzz", "k2"), "k2");
}

TEST(Auth, AdminKeysAndFailures) {
  auto dir = std::filesystem::temp_directory_path() / "prefixd-auth-test3";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "keys") << "k1\nboth\n";
  std::ofstream(dir / "admin") << "adm\nboth\n";
  auto auth = TenantAuth::Create(
      Env::Default(), AuthOptions{(dir / "keys").string(), (dir / "admin").string(), dir.string()});
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  EXPECT_TRUE((*auth)->has_admin_keys());
  auto k1 = (*auth)->Check("Bearer k1", "");
  ASSERT_TRUE(k1.tenant);
  EXPECT_FALSE(k1.tenant->admin);
  auto adm = (*auth)->Check("", "adm");
  ASSERT_TRUE(adm.tenant);
  EXPECT_TRUE(adm.tenant->admin);
  EXPECT_EQ(adm.tenant->salt, TenantAuth::SaltOf(
                                  std::string((*LoadOrCreateServerSecret(Env::Default(),
                                                                         dir.string()))),
                                  "adm"));
  auto both = (*auth)->Check("Bearer both", "");
  ASSERT_TRUE(both.tenant);
  EXPECT_TRUE(both.tenant->admin) << "a key in both files is one tenant with admin rights";
  EXPECT_EQ((*auth)->Check("", "").failure, AuthFailure::kMissingKey);
  EXPECT_EQ((*auth)->Check("Bearer k2", "").failure, AuthFailure::kUnknownKey);
  EXPECT_EQ((*auth)->Check("Bearer k1", "adm").failure, AuthFailure::kConflicting);
  std::ofstream(dir / "empty") << "# nothing\n";
  auto bad = TenantAuth::Create(Env::Default(), AuthOptions{"", (dir / "empty").string(), ""});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("admin key file"), std::string::npos)
      << bad.status().ToString();
  auto keys_only = TenantAuth::Create(Env::Default(), (dir / "keys").string(), dir.string());
  ASSERT_TRUE(keys_only.ok());
  EXPECT_FALSE((*keys_only)->has_admin_keys());
  EXPECT_FALSE((*keys_only)->Authenticate("Bearer k1")->admin);
  auto open = TenantAuth::Create(Env::Default(), AuthOptions{});
  ASSERT_TRUE(open.ok());
  EXPECT_TRUE((*open)->Authenticate("", "")->admin) << "without keys the local user is admin";
  std::filesystem::remove_all(dir);
}

TEST(Auth, SecretPersistsInTheCacheDir) {
  auto dir = std::filesystem::temp_directory_path() / "prefixd-auth-test";
  std::filesystem::remove_all(dir);
  auto s1 = LoadOrCreateServerSecret(Env::Default(), dir.string());
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->size(), 32u);
  auto s2 = LoadOrCreateServerSecret(Env::Default(), dir.string());
  ASSERT_TRUE(s2.ok());
  EXPECT_EQ(*s1, *s2);
  auto perms = std::filesystem::status(dir / "server-secret").permissions();
  EXPECT_EQ(perms & std::filesystem::perms::others_read, std::filesystem::perms::none);
  std::filesystem::remove_all(dir);
}

TEST(Auth, KeyFile) {
  auto dir = std::filesystem::temp_directory_path() / "prefixd-auth-test2";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "keys") << "# c\n\nk1\n k2 \n";
  auto auth = TenantAuth::Create(Env::Default(), (dir / "keys").string(), dir.string());
  ASSERT_TRUE(auth.ok());
  EXPECT_TRUE((*auth)->enabled());
  EXPECT_FALSE((*auth)->Authenticate(""));
  EXPECT_FALSE((*auth)->Authenticate("Bearer k3"));
  EXPECT_FALSE((*auth)->Authenticate("k1"));
  auto t1 = (*auth)->Authenticate("Bearer k1");
  auto t2 = (*auth)->Authenticate("Bearer k2");
  ASSERT_TRUE(t1 && t2);
  EXPECT_NE(t1->salt, t2->salt);
  EXPECT_EQ(t1->label.size(), 8u);
  EXPECT_EQ(t1->label.find(t1->salt.substr(0, 8)), std::string::npos);
  std::ofstream(dir / "empty") << "# nothing\n";
  EXPECT_FALSE(TenantAuth::Create(Env::Default(), (dir / "empty").string(), dir.string()).ok());
  EXPECT_FALSE(TenantAuth::Create(Env::Default(), (dir / "missing").string(), dir.string()).ok());
  auto open = TenantAuth::Create(Env::Default(), "", "");
  ASSERT_TRUE(open.ok());
  EXPECT_FALSE((*open)->enabled());
  EXPECT_EQ((*open)->Authenticate("")->salt, "");
  std::filesystem::remove_all(dir);
}

TEST(Admission, LimitsPlacesPerThreadAndFreesThem) {
  Admission a(2);
  EXPECT_TRUE(a.Admit());
  EXPECT_EQ(a.n_admitted(), 1u);
  EXPECT_TRUE(a.Admit()) << "a second Admit on one thread first frees the thread's place";
  EXPECT_EQ(a.n_admitted(), 1u);
  std::thread([&] { EXPECT_TRUE(a.Admit()); }).join();  // that thread never releases
  EXPECT_EQ(a.n_admitted(), 2u);
  std::thread([&] { EXPECT_FALSE(a.Admit()); a.Release(); }).join();
  EXPECT_EQ(a.n_admitted(), 2u) << "a refused thread holds nothing to release";
  a.Release();
  a.Release();
  EXPECT_EQ(a.n_admitted(), 1u);
  Admission open(0);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(open.Admit());
  EXPECT_EQ(open.n_admitted(), 0u);
}

TEST(RequestLog, LogfmtQuoting) {
  EXPECT_EQ(LogfmtValue("plain"), "plain");
  EXPECT_EQ(LogfmtValue(""), "\"\"");
  EXPECT_EQ(LogfmtValue("a b"), "\"a b\"");
  EXPECT_EQ(LogfmtValue("q\"\n"), "\"q\\\"\\n\"");
  LogLine line("request");
  line.Add("k", std::string("v")).Add("n", 3LL).Add("ms", 1.25);
  EXPECT_EQ(line.text(), "prefixd request k=v n=3 ms=1.2");
}

}  // namespace
}  // namespace prefixd::server
