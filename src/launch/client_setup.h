// How each agent client is started against a running prefixd: `prefixd launch claude|codex|
// opencode` (cli/cmd_launch.cpp) asks the server's /v1/models for the model and its window,
// and PlanLaunch() says what to set so that the client talks to prefixd, names the model the
// server serves (for every model name the client asks for), and knows the real window and an
// output cap, so that it compacts its conversation before the server refuses it.
//
// Nothing of the user's own configuration is edited:
//  - Claude Code: environment variables only (ANTHROPIC_BASE_URL, ANTHROPIC_AUTH_TOKEN, the
//    model names, CLAUDE_CODE_MAX_CONTEXT_TOKENS, CLAUDE_CODE_MAX_OUTPUT_TOKENS, gateway
//    model discovery on, non-essential traffic off).
//  - Codex: `-c key=value` overrides on its command line (a provider "prefixd", the model,
//    model_context_window, model_auto_compact_token_limit, model_max_output_tokens); the key
//    in PREFIXD_API_KEY.
//  - opencode: a config file of its own (OPENCODE_CONFIG, merged over the user's), with the
//    provider, the model and its `limit: {context, input, output}` and `compaction.reserved`
//    (so it compacts where Codex does); the key stays in PREFIXD_API_KEY ({env:...} in the
//    file), never in the file.
// A window below the client's minimum (MinWindowOf) is refused with the reason.
// Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "util/status.h"

namespace prefixd::launch {

enum class Client { kClaude, kCodex, kOpencode };

// "claude" (or "claude-code"), "codex", "opencode"; InvalidArgument naming the three else.
Result<Client> ParseClient(const std::string& name);
const char* ClientName(Client client);
// The program started for the client ("claude", "codex", "opencode").
const char* ClientProgram(Client client);

// What the server says about one model (/v1/models: max_input_tokens and max_tokens, or
// meta.n_ctx_per_slot from an older server).
struct ServedModel {
  std::string id;
  int64_t context = 0;
  int64_t max_output = 0;
};

// The model `wanted` names in a /v1/models body ("" -> the first entry). NotFound listing the
// ids; InvalidArgument when the entry says no window.
Result<ServedModel> PickModel(const nlohmann::json& models, const std::string& wanted);

// The smallest window each client works in: 16K, and 48K for Codex. Each client's own
// instructions and tools take 9-13K tokens of it (Claude Code 12.8K, Codex 10.4K, opencode
// 9.3K, measured with the pinned versions), and it keeps its output cap free below the window.
// Codex also carries the user's latest messages, up to 20K tokens, past every compaction: in a
// smaller window a session of long messages is refused after its first compaction.
int64_t MinWindowOf(Client client);

struct LaunchTarget {
  std::string url;          // the server's root, "http://127.0.0.1:8080"
  std::string key;          // "" -> none
  ServedModel model;
  std::string profile_dir;  // where a client's own config file goes (opencode)
};

struct LaunchPlan {
  std::string program;
  std::vector<std::string> args;  // before the user's own arguments
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::pair<std::string, std::string>> files;  // path, content: written first
};

// NotSupported when the window is below MinWindowOf(client), saying why and what to do.
Result<LaunchPlan> PlanLaunch(Client client, const LaunchTarget& target);

// The plan as a shell user would set it by hand (for `prefixd launch --config`).
std::string DescribePlan(const LaunchPlan& plan);

}  // namespace prefixd::launch
