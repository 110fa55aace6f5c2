// The web page's routes over a FakeBackend: the embedded page and assets (open without a key),
// /v1/cache/stats, /v1/cache/entries and its admin-only eviction, /v1/requests/recent, and
// what a tenant sees of them.
#include <gtest/gtest.h>
#include <httplib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/fake_backend.h"
#include "server/request_log.h"
#include "server/server.h"

namespace prefixd::server {
namespace {

using json = nlohmann::json;

class WebRoutesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetRequestLogEnabled(getenv("PREFIXD_TEST_LOG") != nullptr);
    dir_ = std::filesystem::temp_directory_path() /
           ("prefixd-web-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (thread_.joinable()) thread_.join();
    std::filesystem::remove_all(dir_);
  }

  // Keys on: tenants "tenant-a", "tenant-b" (or `tenant_keys`, one a line); admin "admin-1".
  // Else no keys.
  void Start(bool keys, const std::string& tenant_keys = "tenant-a\ntenant-b\n") {
    AuthOptions ao{"", "", dir_.string()};
    if (keys) {
      ao.key_file = WriteFile("keys", tenant_keys);
      ao.admin_key_file = WriteFile("admin", "admin-1\n");
    }
    auto auth = TenantAuth::Create(Env::Default(), ao);
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    auth_ = std::move(*auth);
    ServerOptions opts;
    opts.port = 0;
    server_ = std::make_unique<HttpServer>(&backend_, auth_.get(), opts);
    auto port = server_->Bind();
    ASSERT_TRUE(port.ok());
    port_ = *port;
    thread_ = std::thread([this] { (void)server_->Serve(); });
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  httplib::Client Client() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c;
  }
  static httplib::Headers Key(const std::string& key) {
    return key.empty() ? httplib::Headers{} : httplib::Headers{{"Authorization", "Bearer " + key}};
  }
  json GetJson(const std::string& path, const std::string& key = "") {
    auto r = Client().Get(path, Key(key));
    EXPECT_TRUE(r);
    if (!r) return nullptr;
    EXPECT_EQ(r->status, 200) << path << ": " << r->body;
    return json::parse(r->body);
  }
  void Chat(const std::string& content, const std::string& key = "") {
    json body = {{"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 3}};
    auto r = Client().Post("/v1/chat/completions", Key(key), body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }

  FakeBackend backend_;
  std::unique_ptr<TenantAuth> auth_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::filesystem::path dir_;
  int port_ = 0;
};

TEST_F(WebRoutesTest, ServesThePageAndAssetsWithoutAKey) {
  Start(/*keys=*/true);
  auto page = Client().Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_NE(page->body.find("/assets/app.js"), std::string::npos);
  auto js = Client().Get("/assets/app.js");
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_NE(js->body.find("/v1/cache/stats"), std::string::npos);
  EXPECT_EQ(Client().Get("/assets/app.css")->status, 200);
  EXPECT_EQ(Client().Get("/assets/missing.js")->status, 404);
  // The data is not open.
  EXPECT_EQ(Client().Get("/v1/cache/stats")->status, 401);
  EXPECT_EQ(Client().Get("/v1/cache/entries")->status, 401);
  EXPECT_EQ(Client().Get("/v1/requests/recent")->status, 401);
  // The open prefix opens nothing else.
  for (const char* sneaky : {"/assets/../v1/cache/stats", "/assets/%2e%2e/v1/cache/entries"}) {
    auto r = Client().Get(sneaky);
    ASSERT_TRUE(r);
    EXPECT_NE(r->status, 200) << sneaky << ": " << r->body;
  }
}

TEST_F(WebRoutesTest, StatsShowModelSlotsTiersAndTotals) {
  Start(/*keys=*/false);
  Chat("hello");
  json s = GetJson("/v1/cache/stats");
  EXPECT_EQ(s["model"]["id"], "fake-model");
  EXPECT_EQ(s["model"]["memory_layout"], "attention");
  EXPECT_EQ(s["model"]["block_size"], 16);
  EXPECT_EQ(s["caller"]["admin"], true);
  ASSERT_EQ(s["slots"].size(), 2u);
  EXPECT_EQ(s["slots"][0]["busy"], true);
  EXPECT_EQ(s["slots"][0]["session"], "00000000000000aa");
  EXPECT_TRUE(s["slots"][1]["session"].is_null());
  EXPECT_EQ(s["tiers"]["ram"]["used_bytes"], 1234);
  EXPECT_EQ(s["tiers"]["ram"]["budget_bytes"], 4096);
  EXPECT_EQ(s["tiers"]["disk"]["quota_bytes"], 8192);
  EXPECT_EQ(s["tiers"]["disk"]["records"], 3);
  EXPECT_EQ(s["tiers"]["disk"]["records_by_kind"]["rows"], 2);
  EXPECT_EQ(s["tiers"]["disk"]["records_by_kind"]["snap"], 1);
  EXPECT_EQ(s["tiers"]["disk"]["index_bytes"], 500);
  EXPECT_EQ(s["tiers"]["disk"]["footprint_bytes"], 7500);
  EXPECT_GT(s["memory"]["resident_bytes"].get<uint64_t>(), 1u << 20);
  EXPECT_EQ(s["memory"]["owners"]["ram_tier"], 1234);
  EXPECT_TRUE(s["memory"].contains("heap_free_bytes"));
  EXPECT_TRUE(s["tiers"].contains("shared"));
  EXPECT_TRUE(s["tiers"]["shared"].is_null());
  EXPECT_EQ(s["totals"]["requests"], 1);
  EXPECT_EQ(s["totals"]["misses_by_reason"]["no_entry"], 1);
}

TEST_F(WebRoutesTest, RecentRequestsRecordCachedTokensAndPageWithAfter) {
  Start(/*keys=*/false);
  Chat("a long first message");
  Chat("a long first message, continued");
  json all = GetJson("/v1/requests/recent");
  EXPECT_EQ(all["scope"], "all");
  ASSERT_EQ(all["requests"].size(), 2u);
  const json& first = all["requests"][0];
  const json& second = all["requests"][1];
  EXPECT_EQ(first["route"], "/v1/chat/completions");
  EXPECT_EQ(first["cached_tokens"], 0);
  EXPECT_EQ(first["tier"], "none");
  EXPECT_EQ(first["miss_reason"], "no_entry");
  EXPECT_GT(second["seq"].get<int>(), first["seq"].get<int>());
  EXPECT_GT(second["cached_tokens"].get<int>(), 0);
  EXPECT_EQ(second["tier"], "ram");
  EXPECT_EQ(second["prompt_tokens"].get<int>(),
            second["cached_tokens"].get<int>() + second["evaluated_tokens"].get<int>());
  EXPECT_TRUE(second["ttft_ms"].is_number());
  EXPECT_GE(second["saved_ms"].get<double>(), 0.0);
  json later = GetJson("/v1/requests/recent?after=" + first["seq"].dump());
  ASSERT_EQ(later["requests"].size(), 1u);
  EXPECT_EQ(later["requests"][0]["seq"], second["seq"]);
  EXPECT_EQ(Client().Get("/v1/requests/recent?after=x")->status, 400);
}

TEST_F(WebRoutesTest, ATenantSeesOnlyItsOwnRequestsAndEntries) {
  Start(/*keys=*/true);
  Chat("from tenant a", "tenant-a");
  Chat("from tenant b", "tenant-b");
  json a = GetJson("/v1/requests/recent", "tenant-a");
  EXPECT_EQ(a["scope"], "tenant");
  ASSERT_EQ(a["requests"].size(), 1u);
  json everyone = GetJson("/v1/requests/recent", "admin-1");
  EXPECT_EQ(everyone["scope"], "all");
  EXPECT_EQ(everyone["requests"].size(), 2u);

  json ea = GetJson("/v1/cache/entries", "tenant-a");
  EXPECT_EQ(ea["scope"], "tenant");
  ASSERT_EQ(ea["entries"].size(), 1u);
  EXPECT_EQ(GetJson("/v1/cache/entries", "admin-1")["entries"].size(), 2u);
}

TEST_F(WebRoutesTest, OnlyAdminsEvictAnEntry) {
  Start(/*keys=*/true);
  Chat("something to cache", "tenant-a");
  json entries = GetJson("/v1/cache/entries", "admin-1")["entries"];
  ASSERT_EQ(entries.size(), 1u);
  const json& e = entries[0];
  EXPECT_EQ(e["id"], e["domain"].get<std::string>() + "/" + e["root"].get<std::string>());
  EXPECT_TRUE(e["ram"].is_object());
  EXPECT_TRUE(e["disk"].is_null());
  const std::string path = "/v1/cache/entries/" + e["id"].get<std::string>();

  auto denied = Client().Delete(path, Key("tenant-a"));
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 403);
  EXPECT_EQ(json::parse(denied->body)["error"]["code"], "admin_key_required");
  EXPECT_EQ(Client().Delete(path)->status, 401);

  auto evicted = Client().Delete(path, Key("admin-1"));
  ASSERT_EQ(evicted->status, 200) << evicted->body;
  EXPECT_EQ(json::parse(evicted->body)["evicted"], e["id"]);
  EXPECT_EQ(json::parse(evicted->body)["ram_entries"], 1);
  EXPECT_TRUE(GetJson("/v1/cache/entries", "admin-1")["entries"].empty());
  EXPECT_EQ(Client().Delete(path, Key("admin-1"))->status, 404);
}

// With keys on, a tenant's /v1/cache/stats is its own: its slots, its share of the tiers, its
// counters. Nothing in it moves when another tenant sends requests; an admin's view does.
TEST_F(WebRoutesTest, ATenantsStatsDoNotMoveWithAnotherTenantsRequests) {
  Start(/*keys=*/true);
  Chat("from tenant b", "tenant-b");
  const json b_before = GetJson("/v1/cache/stats", "tenant-b");
  EXPECT_EQ(b_before["caller"]["admin"], false);
  EXPECT_EQ(b_before["totals"]["requests"], 1);
  EXPECT_TRUE(b_before["queue_depth"].is_null());
  EXPECT_TRUE(b_before["memory"].is_null()) << "the process is every tenant's";
  // The fake's busy slot 0 is the keyless tenant's: B sees it idle and empty.
  EXPECT_EQ(b_before["slots"][0]["busy"], false);
  EXPECT_EQ(b_before["slots"][0]["n_tokens"], 0);
  // B's share of RAM is its one prompt's tree (the fake holds a byte per token), not the
  // tier's 1234 bytes; evictions are everyone's.
  EXPECT_EQ(b_before["tiers"]["ram"]["used_bytes"], b_before["totals"]["prompt_tokens"]);
  EXPECT_EQ(b_before["tiers"]["ram"]["budget_bytes"], 4096);
  EXPECT_TRUE(b_before["tiers"]["ram"]["evictions"].is_null());
  EXPECT_EQ(b_before["tiers"]["disk"]["records"], 0);
  EXPECT_FALSE(b_before["totals"].contains("bytes_by_tier"));

  Chat("from tenant a", "tenant-a");
  Chat("from tenant a, again", "tenant-a");
  EXPECT_EQ(GetJson("/v1/cache/stats", "tenant-b"), b_before) << "B's view moved with A's";
  const json a = GetJson("/v1/cache/stats", "tenant-a");
  EXPECT_EQ(a["totals"]["requests"], 2);
  EXPECT_GT(a["totals"]["token_hit_ratio"].get<double>(), 0.0);
  EXPECT_EQ(a["tiers"]["ram"]["blocks"], 2);
  const json all = GetJson("/v1/cache/stats", "admin-1");
  EXPECT_EQ(all["totals"]["requests"], 3);
  EXPECT_EQ(all["slots"][0]["busy"], true);
  EXPECT_EQ(all["tiers"]["ram"]["used_bytes"], 1234);
  EXPECT_EQ(all["queue_depth"], 0);
}

// Two keys whose 32-bit log labels collide: under the server secret below, "tenant-17198" and
// "tenant-20660" are both tenant 21e90f31 in the logs (found by a birthday search). Each sees
// its own recent requests alone, numbered by its own count, never the other's.
TEST_F(WebRoutesTest, RecentRequestsAreScopedByTheTenantNotItsLabel) {
  WriteFile("server-secret", "label-collision-test-secret-0032");
  Start(/*keys=*/true, "tenant-17198\ntenant-20660\n");
  const std::string a = "tenant-17198", b = "tenant-20660";
  ASSERT_EQ(GetJson("/v1/cache/stats", a)["caller"]["tenant"], "21e90f31");
  ASSERT_EQ(GetJson("/v1/cache/stats", b)["caller"]["tenant"], "21e90f31");

  Chat("from b", b);
  Chat("from a", a);
  Chat("from a, again", a);
  const json mine = GetJson("/v1/requests/recent", b)["requests"];
  ASSERT_EQ(mine.size(), 1u) << mine.dump();
  EXPECT_EQ(mine[0]["seq"], 1);
  const json theirs = GetJson("/v1/requests/recent", a)["requests"];
  ASSERT_EQ(theirs.size(), 2u) << theirs.dump();
  EXPECT_EQ(theirs[1]["seq"], 2);
  // B's next request is its second, whatever A sent meanwhile; `after` pages B's numbers.
  Chat("from b, again", b);
  const json next = GetJson("/v1/requests/recent?after=1", b)["requests"];
  ASSERT_EQ(next.size(), 1u) << next.dump();
  EXPECT_EQ(next[0]["seq"], 2);
  EXPECT_EQ(GetJson("/v1/cache", b)["requests"], 2);
  const json all = GetJson("/v1/requests/recent", "admin-1");
  EXPECT_EQ(all["scope"], "all");
  ASSERT_EQ(all["requests"].size(), 4u);
  EXPECT_EQ(all["requests"][3]["seq"], 4);
}

}  // namespace
}  // namespace prefixd::server
