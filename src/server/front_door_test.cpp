// The front door's table: each check on its own, in the order FrontDoor runs them, with keys
// off (any page's request) and on (tenants and admins).
#include "server/front_door.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace prefixd::server {
namespace {

struct Outcome {
  FrontDoor::Verdict verdict;
  int status;
  std::string body;
};

class FrontDoorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("prefixd-door-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "keys") << "key-t\n";
    std::ofstream(dir_ / "admins") << "key-a\n";
    open_ = TenantAuth::Create(Env::Default(), AuthOptions{}).value();
    keyed_ = TenantAuth::Create(Env::Default(), AuthOptions{(dir_ / "keys").string(),
                                                             (dir_ / "admins").string(), ""}).value();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static FrontDoor Door(const TenantAuth* auth) {
    return FrontDoor(
        auth, FrontDoorOptions{{"prefixd.lan"}, {"http://localhost:3000"}},
        RouteRights{[](const std::string& p) { return p == "/" || p == "/health"; },
                    [](const std::string& m, const std::string& p) {
                      return m == "POST" && p == "/admin";
                    }},
        [](const httplib::Request&, httplib::Response& res, const ApiError& e) {
          res.status = HttpStatusOf(e.kind);
          res.body = e.code;
        });
  }
  static Outcome Run(const FrontDoor& door, const std::string& method, const std::string& path,
                     httplib::Headers headers) {
    httplib::Request req;
    req.method = method;
    req.path = path;
    req.headers = std::move(headers);
    if (!req.has_header("Host")) req.headers.emplace("Host", "127.0.0.1:8080");
    httplib::Response res;
    const FrontDoor::Verdict v = door.Check(req, res);
    return {v, res.status, res.body};
  }

  std::filesystem::path dir_;
  std::unique_ptr<TenantAuth> open_, keyed_;
};

constexpr auto kPass = FrontDoor::Verdict::kPass;
constexpr auto kAnswered = FrontDoor::Verdict::kAnswered;
const httplib::Headers kJson = {{"Content-Type", "application/json"}};

TEST_F(FrontDoorTest, RefusesRebindingPagesByHost) {
  const FrontDoor door = Door(open_.get());
  for (const char* host : {"evil.example", "evil.example:8080", "127.0.0.1.evil.example"}) {
    const Outcome o = Run(door, "GET", "/v1/models", {{"Host", host}});
    EXPECT_EQ(o.verdict, kAnswered) << host;
    EXPECT_EQ(o.status, 403) << host;
    EXPECT_EQ(o.body, "host_not_allowed") << host;
  }
  EXPECT_EQ(Run(door, "GET", "/v1/models", {{"Host", "PREFIXD.LAN"}}).verdict, kPass);
  EXPECT_EQ(Run(door, "GET", "/health", {{"Host", "evil.example"}}).status, 403)
      << "open routes are no exception";
}

TEST_F(FrontDoorTest, RefusesCrossSiteRequestsThatNeedNoPreflight) {
  const FrontDoor door = Door(open_.get());
  const Outcome img = Run(door, "GET", "/x.png",
                          {{"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Mode", "no-cors"}});
  EXPECT_EQ(img.status, 403);
  EXPECT_EQ(img.body, "cross_site_request");
  EXPECT_EQ(Run(door, "GET", "/v1/models", {{"Sec-Fetch-Site", "same-site"}}).status, 403);
  // A link to the dashboard is followed; an allowed origin's page is let in.
  EXPECT_EQ(Run(door, "GET", "/", {{"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Mode", "navigate"}})
                .verdict,
            kPass);
  EXPECT_EQ(Run(door, "GET", "/v1/models",
                {{"Sec-Fetch-Site", "cross-site"}, {"Sec-Fetch-Mode", "navigate"}})
                .status,
            403)
      << "a navigation opens the page, not the API";
  EXPECT_EQ(Run(door, "GET", "/v1/models",
                {{"Sec-Fetch-Site", "cross-site"}, {"Origin", "http://localhost:3000"}})
                .verdict,
            kPass);
  EXPECT_EQ(Run(door, "GET", "/v1/models", {{"Sec-Fetch-Site", "same-origin"}}).verdict, kPass);
}

TEST_F(FrontDoorTest, AnswersPreflightsAndOnlyAllowedOnesOpen) {
  const FrontDoor door = Door(keyed_.get());  // a preflight carries no key, keys on or off
  const Outcome ok = Run(door, "OPTIONS", "/v1/chat/completions",
                         {{"Origin", "http://localhost:3000"}});
  EXPECT_EQ(ok.verdict, kAnswered);
  EXPECT_EQ(ok.status, 204);
  const Outcome other = Run(door, "OPTIONS", "/v1/chat/completions",
                            {{"Origin", "http://evil.example"}});
  EXPECT_EQ(other.status, 403);
  EXPECT_EQ(other.body, "origin_not_allowed");
}

TEST_F(FrontDoorTest, APostWithoutAKeyMustBeJson) {
  const FrontDoor door = Door(open_.get());
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded", ""}) {
    const Outcome o = Run(door, "POST", "/v1/models/m/load", {{"Content-Type", type}});
    EXPECT_EQ(o.status, 415) << type;
  }
  EXPECT_EQ(Run(door, "POST", "/v1/chat/completions", kJson).verdict, kPass);
  EXPECT_EQ(Run(door, "POST", "/v1/chat/completions", {{"x-api-key", "k"}}).verdict, kPass);
}

TEST_F(FrontDoorTest, KeysAndAdminRights) {
  const FrontDoor door = Door(keyed_.get());
  EXPECT_EQ(Run(door, "POST", "/chat", kJson).status, 401);
  EXPECT_EQ(Run(door, "GET", "/health", {}).verdict, kPass) << "open routes need no key";
  httplib::Headers tenant = {{"Authorization", "Bearer key-t"}};
  httplib::Headers admin = {{"Authorization", "Bearer key-a"}};
  EXPECT_EQ(Run(door, "POST", "/chat", tenant).verdict, kPass);
  EXPECT_EQ(Run(door, "POST", "/admin", tenant).status, 403);
  EXPECT_EQ(Run(door, "POST", "/admin", admin).verdict, kPass);
  EXPECT_EQ(Run(door, "POST", "/admin", {{"Authorization", "Bearer nope"}}).status, 401);
  // Keys off: the one local user has every right.
  EXPECT_EQ(Run(Door(open_.get()), "POST", "/admin", kJson).verdict, kPass);
}

TEST_F(FrontDoorTest, TellsTheTenant) {
  const FrontDoor door = Door(keyed_.get());
  httplib::Request req;
  req.headers.emplace("Authorization", "Bearer key-a");
  EXPECT_TRUE(door.TenantOf(req).admin);
  req.headers = {{"x-api-key", "key-t"}};
  EXPECT_FALSE(door.TenantOf(req).admin);
  EXPECT_EQ(door.TenantOf(req).salt.size(), 64u);
}

}  // namespace
}  // namespace prefixd::server
