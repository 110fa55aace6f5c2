#include "launch/client_setup.h"

namespace prefixd::launch {

namespace {

using json = nlohmann::json;
using Env = std::vector<std::pair<std::string, std::string>>;

// Where a client compacts: its output cap and a quarter of the window stay free, so that the
// next turn's input fits too (Codex compacts only after a turn, on the tokens it used; a turn
// that then does not fit fails instead of compacting).
int64_t CompactAt(const ServedModel& m) { return m.context - m.max_output - m.context / 4; }

// A TOML basic string, as Codex's `-c key=value` parses the value.
std::string TomlString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

LaunchPlan ClaudePlan(const LaunchTarget& t) {
  const std::string& id = t.model.id;
  LaunchPlan p;
  p.program = ClientProgram(Client::kClaude);
  p.env = {{"ANTHROPIC_BASE_URL", t.url},
           {"ANTHROPIC_AUTH_TOKEN", t.key.empty() ? "prefixd" : t.key},
           {"ANTHROPIC_API_KEY", ""},
           {"ANTHROPIC_MODEL", id},
           // Every model name Claude Code would ask for is the served model.
           {"ANTHROPIC_SMALL_FAST_MODEL", id},
           {"ANTHROPIC_DEFAULT_HAIKU_MODEL", id},
           {"ANTHROPIC_DEFAULT_SONNET_MODEL", id},
           {"ANTHROPIC_DEFAULT_OPUS_MODEL", id},
           {"CLAUDE_CODE_SUBAGENT_MODEL", id},
           {"CLAUDE_CODE_MAX_CONTEXT_TOKENS", std::to_string(t.model.context)},
           {"CLAUDE_CODE_MAX_OUTPUT_TOKENS", std::to_string(t.model.max_output)},
           {"CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY", "1"},
           {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"}};
  return p;
}

LaunchPlan CodexPlan(const LaunchTarget& t) {
  LaunchPlan p;
  p.program = ClientProgram(Client::kCodex);
  const std::vector<std::pair<std::string, std::string>> config = {
      {"model", TomlString(t.model.id)},
      {"model_provider", TomlString("prefixd")},
      {"model_providers.prefixd.name", TomlString("prefixd")},
      {"model_providers.prefixd.base_url", TomlString(t.url + "/v1")},
      {"model_providers.prefixd.wire_api", TomlString("responses")},
      {"model_providers.prefixd.env_key", TomlString("PREFIXD_API_KEY")},
      {"model_context_window", std::to_string(t.model.context)},
      {"model_auto_compact_token_limit", std::to_string(CompactAt(t.model))},
      {"model_max_output_tokens", std::to_string(t.model.max_output)}};
  for (const auto& [key, value] : config) {
    p.args.push_back("-c");
    p.args.push_back(key + "=" + value);
  }
  p.env = {{"PREFIXD_API_KEY", t.key.empty() ? "prefixd" : t.key}};
  return p;
}

LaunchPlan OpencodePlan(const LaunchTarget& t) {
  const std::string& id = t.model.id;
  // opencode compacts once a turn's tokens pass limit.input − compaction.reserved: the same
  // point as Codex's, so that the next turn's input fits too.
  const json model = {{"name", id},
                      {"limit",
                       {{"context", t.model.context},
                        {"input", t.model.context},
                        {"output", t.model.max_output}}}};
  const json config = {
      {"$schema", "https://opencode.ai/config.json"},
      {"model", "prefixd/" + id},
      {"small_model", "prefixd/" + id},
      {"compaction", {{"reserved", t.model.context - CompactAt(t.model)}}},
      {"provider",
       {{"prefixd",
         {{"npm", "@ai-sdk/openai-compatible"},
          {"name", "prefixd"},
          {"options", {{"baseURL", t.url + "/v1"}, {"apiKey", "{env:PREFIXD_API_KEY}"}}},
          {"models", {{id, model}}}}}}}};
  LaunchPlan p;
  p.program = ClientProgram(Client::kOpencode);
  const std::string file = t.profile_dir + "/opencode.json";
  p.files = {{file, config.dump(2) + "\n"}};
  p.env = {{"OPENCODE_CONFIG", file}, {"PREFIXD_API_KEY", t.key.empty() ? "prefixd" : t.key}};
  return p;
}

// What the client keeps of a session through a compaction: its own first request before the
// user's words (measured with the pinned versions and Qwen3.5's tokenizer), and for Codex the
// user's own latest messages, up to 20,000 of its estimated tokens (4 bytes each: codex-rs
// compact.rs, COMPACT_USER_MESSAGE_MAX_TOKENS), which it carries past the summary.
const char* KeptOf(Client client) {
  switch (client) {
    case Client::kClaude: return "its own instructions and tools take about 12.8K tokens";
    case Client::kCodex:
      return "its own instructions and tools take about 10.4K tokens, and it keeps up to 20K "
             "tokens of your latest messages through a compaction";
    case Client::kOpencode: return "its own instructions and tools take about 9.3K tokens";
  }
  return "";
}

// A shell word: quoted unless plainly safe.
std::string ShellWord(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-./:=,@+") == std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Result<Client> ParseClient(const std::string& name) {
  if (name == "claude" || name == "claude-code") return Client::kClaude;
  if (name == "codex") return Client::kCodex;
  if (name == "opencode") return Client::kOpencode;
  return Status::InvalidArgument("launch which client? claude, codex or opencode (got '" +
                                 name.substr(0, 40) + "')");
}

const char* ClientName(Client client) {
  switch (client) {
    case Client::kClaude: return "Claude Code";
    case Client::kCodex: return "Codex";
    case Client::kOpencode: return "opencode";
  }
  return "?";
}

const char* ClientProgram(Client client) {
  switch (client) {
    case Client::kClaude: return "claude";
    case Client::kCodex: return "codex";
    case Client::kOpencode: return "opencode";
  }
  return "?";
}

Result<ServedModel> PickModel(const json& models, const std::string& wanted) {
  const json* data = models.is_object() && models.contains("data") ? &models["data"] : nullptr;
  if (data == nullptr || !data->is_array() || data->empty()) {
    return Status::NotFound("the server lists no model (GET /v1/models)");
  }
  std::string ids;
  for (const json& m : *data) {
    const std::string id = m.value("id", "");
    if (!wanted.empty() && id != wanted) {
      ids += (ids.empty() ? "" : ", ") + id;
      continue;
    }
    ServedModel out;
    out.id = id;
    out.context = m.value("max_input_tokens", int64_t(0));
    if (out.context <= 0 && m.contains("meta") && m["meta"].is_object()) {
      out.context = m["meta"].value("n_ctx_per_slot", int64_t(0));
    }
    if (out.context <= 0) {
      return Status::InvalidArgument("the server does not say model " + id +
                                     "'s window: give it with --ctx N");
    }
    out.max_output = m.value("max_tokens", int64_t(0));
    if (out.max_output <= 0) out.max_output = std::max<int64_t>(out.context / 8, 1);
    return out;
  }
  return Status::NotFound("the server has no model '" + wanted + "' (it lists: " + ids + ")");
}

int64_t MinWindowOf(Client client) { return client == Client::kCodex ? 49152 : 16384; }

Result<LaunchPlan> PlanLaunch(Client client, const LaunchTarget& target) {
  const int64_t min = MinWindowOf(client);
  if (target.model.context < min) {
    return Status::NotSupported(
        std::string(ClientName(client)) + " needs a window of at least " + std::to_string(min) +
        " tokens (" + KeptOf(client) + ", and it keeps room for the answer); model " + target.model.id + " has " + std::to_string(target.model.context) +
        ": serve it with --ctx " + std::to_string(min) + " or more");
  }
  switch (client) {
    case Client::kClaude: return ClaudePlan(target);
    case Client::kCodex: return CodexPlan(target);
    case Client::kOpencode: return OpencodePlan(target);
  }
  return Status::InvalidArgument("unknown client");
}

std::string DescribePlan(const LaunchPlan& plan) {
  std::string out;
  for (const auto& [path, content] : plan.files) {
    out += "# " + path + "\n" + content;
  }
  for (const auto& [name, value] : plan.env) {
    const bool secret = name == "ANTHROPIC_AUTH_TOKEN" || name == "PREFIXD_API_KEY";
    out += "export " + name + "=" + (secret && value != "prefixd" ? "<your key>" : ShellWord(value)) +
           "\n";
  }
  out += plan.program;
  for (const std::string& a : plan.args) out += " " + ShellWord(a);
  return out + "\n";
}

}  // namespace prefixd::launch
