#include "launch/client_setup.h"

#include <gtest/gtest.h>

#include <map>

namespace prefixd::launch {
namespace {

using json = nlohmann::json;

std::map<std::string, std::string> EnvOf(const LaunchPlan& p) {
  return {p.env.begin(), p.env.end()};
}

const json kModels = json::parse(R"({"object":"list","data":[
  {"id":"q35","max_input_tokens":16384,"max_tokens":2048,"meta":{"n_ctx_per_slot":16384}},
  {"id":"old","meta":{"n_ctx_per_slot":32768}},
  {"id":"none"}]})");

LaunchTarget Target(int64_t context = 16384, std::string key = "sk-1") {
  return {"http://127.0.0.1:8080", std::move(key), {"q35", context, 2048}, "/tmp/p"};
}

TEST(ClientSetupTest, PicksTheModelAndItsWindow) {
  auto first = PickModel(kModels, "");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->id, "q35");
  EXPECT_EQ(first->context, 16384);
  EXPECT_EQ(first->max_output, 2048);
  auto old = PickModel(kModels, "old");  // an older server: meta.n_ctx_per_slot
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->context, 32768);
  EXPECT_EQ(old->max_output, 4096);
  EXPECT_EQ(PickModel(kModels, "none").status().code(), Status::Code::kInvalidArgument);
  auto missing = PickModel(kModels, "gpt");
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_NE(missing.status().message().find("q35, old, none"), std::string::npos);
  EXPECT_FALSE(PickModel(json::object(), "").ok());
}

TEST(ClientSetupTest, ClaudeCodeLearnsTheWindowAndNamesOnlyTheServedModel) {
  auto plan = PlanLaunch(Client::kClaude, Target());
  ASSERT_TRUE(plan.ok());
  auto env = EnvOf(*plan);
  EXPECT_EQ(plan->program, "claude");
  EXPECT_EQ(env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:8080");
  EXPECT_EQ(env["ANTHROPIC_AUTH_TOKEN"], "sk-1");
  EXPECT_EQ(env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"], "16384");
  EXPECT_EQ(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"], "2048");
  for (const char* name : {"ANTHROPIC_MODEL", "ANTHROPIC_SMALL_FAST_MODEL",
                           "ANTHROPIC_DEFAULT_HAIKU_MODEL", "ANTHROPIC_DEFAULT_SONNET_MODEL",
                           "ANTHROPIC_DEFAULT_OPUS_MODEL"}) {
    EXPECT_EQ(env[name], "q35") << name;
  }
  EXPECT_TRUE(plan->files.empty()) << "nothing of the user's is written";
}

TEST(ClientSetupTest, CodexGetsAProviderAndItsCompactionLimitOnItsCommandLine) {
  auto plan = PlanLaunch(Client::kCodex, Target(65536));
  ASSERT_TRUE(plan.ok());
  std::map<std::string, std::string> config;
  for (size_t i = 0; i + 1 < plan->args.size(); i += 2) {
    ASSERT_EQ(plan->args[i], "-c");
    const std::string& kv = plan->args[i + 1];
    config[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
  EXPECT_EQ(config["model"], "\"q35\"");
  EXPECT_EQ(config["model_provider"], "\"prefixd\"");
  EXPECT_EQ(config["model_providers.prefixd.base_url"], "\"http://127.0.0.1:8080/v1\"");
  EXPECT_EQ(config["model_providers.prefixd.wire_api"], "\"responses\"");
  EXPECT_EQ(config["model_context_window"], "65536");
  const int64_t limit = std::stoll(config["model_auto_compact_token_limit"]);
  EXPECT_LT(limit, 65536 - 2048);
  EXPECT_GT(limit, 65536 / 2);
  EXPECT_EQ(EnvOf(*plan)["PREFIXD_API_KEY"], "sk-1");
}

TEST(ClientSetupTest, OpencodeGetsAProfileOfItsOwnWithTheLimitsAndNoKey) {
  auto plan = PlanLaunch(Client::kOpencode, Target(16384, "sk-secret"));
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->files.size(), 1u);
  EXPECT_EQ(plan->files[0].first, "/tmp/p/opencode.json");
  EXPECT_EQ(plan->files[0].second.find("sk-secret"), std::string::npos);
  const json config = json::parse(plan->files[0].second);
  EXPECT_EQ(config["model"], "prefixd/q35");
  const json& model = config["provider"]["prefixd"]["models"]["q35"];
  EXPECT_EQ(model["limit"]["context"], 16384);
  EXPECT_EQ(model["limit"]["output"], 2048);
  EXPECT_EQ(model["limit"]["input"], 16384);
  // Compacts where Codex does: output cap and a quarter of the window kept free.
  EXPECT_EQ(config["compaction"]["reserved"], 2048 + 16384 / 4);
  auto env = EnvOf(*plan);
  EXPECT_EQ(env["OPENCODE_CONFIG"], "/tmp/p/opencode.json");
  EXPECT_EQ(env["PREFIXD_API_KEY"], "sk-secret");
}

TEST(ClientSetupTest, AWindowTooSmallForTheClientIsRefusedWithTheReason) {
  auto claude = PlanLaunch(Client::kClaude, Target(8192));
  ASSERT_FALSE(claude.ok());
  EXPECT_NE(claude.status().message().find("--ctx 16384"), std::string::npos);
  auto codex = PlanLaunch(Client::kCodex, Target(32768));
  ASSERT_FALSE(codex.ok());
  EXPECT_NE(codex.status().message().find("10.4K"), std::string::npos);
  EXPECT_NE(codex.status().message().find("up to 20K tokens of your latest messages"),
            std::string::npos) << codex.status().message();
  EXPECT_NE(codex.status().message().find("--ctx 49152"), std::string::npos);
  EXPECT_TRUE(PlanLaunch(Client::kCodex, Target(49152)).ok());
  EXPECT_TRUE(PlanLaunch(Client::kOpencode, Target(16384)).ok());
}

TEST(ClientSetupTest, TheDescriptionHidesTheKey) {
  auto plan = PlanLaunch(Client::kClaude, Target(16384, "sk-secret"));
  ASSERT_TRUE(plan.ok());
  const std::string text = DescribePlan(*plan);
  EXPECT_EQ(text.find("sk-secret"), std::string::npos);
  EXPECT_NE(text.find("export CLAUDE_CODE_MAX_CONTEXT_TOKENS=16384"), std::string::npos);
  EXPECT_TRUE(ParseClient("claude-code").ok());
  EXPECT_FALSE(ParseClient("cursor").ok());
}

}  // namespace
}  // namespace prefixd::launch
