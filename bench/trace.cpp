#include "bench/trace.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace prefixd::bench {

namespace {

using nlohmann::json;

// Sizes in TraceOptions are converted to words with this. Measured with the test models' small
// BPE vocabulary (docs/test-models.md), where a word of this list plus its space and punctuation
// takes about 2.4 tokens; a real 150K-token vocabulary needs about 1.3, so the same options give
// roughly half as many tokens there.
constexpr double kWordsPerToken = 0.42;

int WordsFor(int tokens) { return std::max(1, int(tokens * kWordsPerToken)); }

// SplitMix64: fully specified, so a seed gives the same trace on every platform (unlike the
// standard library's distributions).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t Below(size_t n) { return size_t(Next() % n); }
  bool Percent(int p) { return int(Below(100)) < p; }
  template <typename T, size_t N>
  const T& Pick(const T (&items)[N]) {
    return items[Below(N)];
  }

 private:
  uint64_t state_;
};

const char* const kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "this", "are", "or", "from", "at", "which", "but", "have", "an", "they",
    "you", "were", "there", "one", "all", "we", "their", "been", "has", "would", "when", "will",
    "more", "no", "if", "out", "so", "what", "up", "its", "about", "into", "than", "them",
    "can", "only", "other", "new", "some", "could", "time", "these", "two", "may", "then",
    "first", "any", "now", "such", "like", "our", "over", "even", "most", "made", "after",
    "also", "did", "many", "before", "must", "through", "back", "where", "much", "your", "way",
    "well", "down", "should", "because", "each", "just", "those", "people", "how", "too",
    "little", "state", "good", "very", "make", "world", "still", "own", "see", "work", "long",
    "get", "here", "between", "both", "being", "under", "never", "day", "same", "another",
    "know", "while", "last", "might", "great", "old", "year", "off", "come", "since",
    "against", "go", "right", "used", "take", "three", "few", "use", "during", "without",
    "again", "place", "around", "however", "small", "found", "thought", "part", "once",
    "general", "high", "upon", "every", "does", "until", "always", "away", "something", "fact",
    "though", "less", "public", "put", "think", "almost", "enough", "far", "yet", "system",
    "better", "set", "nothing", "end", "why", "called", "find", "going", "look", "later",
    "point", "next", "program", "business", "give", "group", "let", "side", "given", "present",
    "several", "order", "possible", "rather", "second", "per", "among", "form", "important",
    "often", "things", "early", "case", "become", "large", "need", "within", "along", "best",
    "ever", "least", "power", "development", "light", "thing", "interest", "want", "mind",
    "area", "others", "done", "although", "open", "problem", "certain", "kind", "different",
    "help", "sense", "means", "whole", "matter", "perhaps", "itself", "line", "above", "name",
    "example", "action", "local", "show", "whether", "history", "either", "act", "across",
    "taken", "past", "quite", "anything", "seen", "having", "week", "experience", "word",
    "half", "really", "field", "already", "information", "together", "keep", "sure", "free",
    "real", "behind", "cannot", "question", "making", "known", "result", "change", "position",
    "value", "close", "turn", "true", "full", "seem", "file", "function", "return", "error",
    "test", "build", "cache", "request", "memory", "buffer", "index", "block", "server",
    "option", "config", "module", "header", "output", "input", "thread", "lock", "queue",
    "read", "write", "update", "check", "data", "type", "string", "number", "list", "path"};

const char* const kIdents[] = {
    "value", "result", "buffer", "index", "count", "offset", "length", "config", "options",
    "status", "request", "response", "handler", "context", "session", "block", "cache",
    "entry", "state", "token", "slot", "queue", "writer", "reader", "parser", "node", "tree",
    "item", "key", "hash", "size", "limit", "total", "name", "path", "file", "line", "error"};

const char* const kDirs[] = {"src", "lib", "core", "util", "server", "engine", "store",
                             "tests", "tools", "docs", "net", "io", "cache", "api"};

const char* const kExts[] = {".cpp", ".h", ".py", ".rs", ".go", ".ts", ".md", ".json"};

std::string Capitalize(std::string w) {
  if (!w.empty() && w[0] >= 'a' && w[0] <= 'z') w[0] = char(w[0] - 'a' + 'A');
  return w;
}

// "Some words here, more words." with n_words words.
std::string Sentence(Rng& rng, int n_words) {
  std::string out;
  for (int i = 0; i < n_words; ++i) {
    std::string w = rng.Pick(kWords);
    if (i == 0) w = Capitalize(w);
    if (i > 0) out += (i > 2 && i + 2 < n_words && rng.Percent(8)) ? ", " : " ";
    out += w;
  }
  return out + ".";
}

// Sentences of 6-18 words until about n_words words are written.
std::string Prose(Rng& rng, int n_words) {
  std::string out;
  while (n_words > 0) {
    const int n = std::min(n_words, 6 + int(rng.Below(13)));
    if (!out.empty()) out += " ";
    out += Sentence(rng, n);
    n_words -= n;
  }
  return out;
}

std::string Ident(Rng& rng) {
  std::string a = rng.Pick(kIdents);
  if (rng.Percent(50)) a += std::string("_") + rng.Pick(kIdents);
  return a;
}

std::string FilePath(Rng& rng) {
  std::string p = rng.Pick(kDirs);
  p += std::string("/") + rng.Pick(kDirs);
  return p + "/" + Ident(rng) + rng.Pick(kExts);
}

// Code-like lines (a file's contents) of about n_words words.
std::string FileContents(Rng& rng, int n_words) {
  std::string out;
  int line = 0;
  while (n_words > 0) {
    std::string l;
    switch (rng.Below(6)) {
      case 0: l = "// " + Prose(rng, 8); n_words -= 8; break;
      case 1: l = "int " + Ident(rng) + "(const " + Ident(rng) + "& " + Ident(rng) + ") {"; break;
      case 2: l = "  if (" + Ident(rng) + " == nullptr) return " + Ident(rng) + ";"; break;
      case 3: l = "  " + Ident(rng) + " += " + Ident(rng) + "[" + Ident(rng) + "];"; break;
      case 4: l = "  return " + Ident(rng) + "." + Ident(rng) + "();"; break;
      default: l = "}"; break;
    }
    out += (line++ ? "\n" : "") + l;
    n_words -= 5;
  }
  return out;
}

// Command output: compiler diagnostics, test results and grep hits, about n_words words.
std::string CommandOutput(Rng& rng, int n_words) {
  std::string out;
  int line = 0;
  while (n_words > 0) {
    std::string l = FilePath(rng) + ":" + std::to_string(1 + rng.Below(900)) + ": ";
    switch (rng.Below(3)) {
      case 0: l += "warning: " + Sentence(rng, 7); break;
      case 1: l += "error: " + Sentence(rng, 6); break;
      default: l = "[ RUN      ] " + Capitalize(Ident(rng)) + "Test." + Capitalize(Ident(rng)); break;
    }
    out += (line++ ? "\n" : "") + l;
    n_words -= 10;
  }
  return out;
}

struct ToolSpec {
  const char* name;
  const char* arg;
};
const ToolSpec kTools[] = {{"read_file", "path"},     {"run_command", "command"},
                           {"search_code", "query"},  {"write_file", "path"},
                           {"list_directory", "path"}, {"fetch_url", "url"}};

json ToolSchema(Rng& rng, const ToolSpec& t, int n_words) {
  json params = {{"type", "object"},
                 {"properties",
                  {{t.arg, {{"type", "string"}, {"description", Prose(rng, n_words / 4)}}},
                   {"limit", {{"type", "integer"}, {"description", Sentence(rng, 8)}}}}},
                 {"required", json::array({t.arg})}};
  return {{"type", "function"},
          {"function",
           {{"name", t.name}, {"description", Prose(rng, n_words / 2)}, {"parameters", params}}}};
}

// The shared system prompt (text) and tools (JSON).
struct SystemPart {
  std::string text;
  std::string tools_json;
};

// The JSON structure of one tool schema plus its share of the template's tool header, in
// tokens of the test models' vocabulary (measured): the part of the budget that is not prose.
constexpr int kToolOverheadTokens = 150;

// An eighth of the prose goes into the tool descriptions, the rest into the rules; budgets
// below the tool schemas' own size (~1000 tokens) give a short rules section.
// The first n_tools of kTools are offered.
SystemPart MakeSystem(Rng& rng, int n_tokens, int n_tools = int(std::size(kTools))) {
  const int prose_tokens = std::max(100, n_tokens - n_tools * kToolOverheadTokens);
  const int tool_words = WordsFor(prose_tokens / 8) / n_tools;
  json tools = json::array();
  for (int i = 0; i < n_tools; ++i) tools.push_back(ToolSchema(rng, kTools[i], tool_words));
  std::string text =
      "You are a coding agent working in a software repository. Use the tools to read files, "
      "run commands and search the code, then answer the user.\n\n# Rules\n";
  int left = WordsFor(prose_tokens - prose_tokens / 8);
  for (int i = 1; left > 0; ++i) {
    const int n = std::min(left, 20 + int(rng.Below(40)));
    text += std::to_string(i) + ". " + Prose(rng, n) + "\n";
    left -= n;
  }
  return {text, tools.dump()};
}

// One session's state while the trace is generated.
struct Session {
  int id = 0;
  bool structured = true;  // tool_calls + "tool" messages; else text calls + user results
  json messages = json::array();
  Rng rng{0};
};

std::string ToolResult(Rng& rng, const ToolSpec& tool, int n_tokens) {
  const int n_words = WordsFor(n_tokens);
  if (std::string(tool.name) == "read_file") return FileContents(rng, n_words);
  return CommandOutput(rng, n_words);
}

std::string Think(Rng& rng, int n_tokens) {
  return "<think>\n" + Prose(rng, WordsFor(n_tokens)) + "\n</think>\n\n";
}

// Appends the fixed assistant turn that calls a tool, then the tool's result.
// What one tool step adds: the tool called, its sizes.
struct ToolStepSizes {
  int n_tools = int(std::size(kTools));  // picks among the first n_tools of kTools
  int think_tokens = 60;
  int result_tokens = 200;
};

void AppendToolStep(Session& s, int turn, const ToolStepSizes& z) {
  const ToolSpec& tool = kTools[s.rng.Below(size_t(z.n_tools))];
  const std::string arg_value = tool.arg == std::string("path") ? FilePath(s.rng) : Ident(s.rng);
  const std::string args = json{{tool.arg, arg_value}}.dump();
  const std::string content = Think(s.rng, z.think_tokens) + Sentence(s.rng, 10);
  const std::string result = ToolResult(s.rng, tool, z.result_tokens);
  if (s.structured) {
    const std::string id = "call_" + std::to_string(s.id) + "_" + std::to_string(turn);
    json call = {{"id", id},
                 {"type", "function"},
                 {"function", {{"name", tool.name}, {"arguments", args}}}};
    s.messages.push_back(
        {{"role", "assistant"}, {"content", content}, {"tool_calls", json::array({call})}});
    s.messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
  } else {
    const std::string call = json{{"name", tool.name}, {"arguments", json::parse(args)}}.dump();
    s.messages.push_back(
        {{"role", "assistant"}, {"content", content + "\n<tool_call>\n" + call + "\n</tool_call>"}});
    s.messages.push_back(
        {{"role", "user"}, {"content", "<tool_response>\n" + result + "\n</tool_response>"}});
  }
}

// Appends a fixed final answer, then the user's follow-up question.
void AppendAnswerStep(Session& s, int think_tokens, int user_tokens) {
  s.messages.push_back({{"role", "assistant"},
                        {"content", Think(s.rng, think_tokens) + Prose(s.rng, 40)}});
  s.messages.push_back(
      {{"role", "user"}, {"content", Prose(s.rng, WordsFor(user_tokens))}});
}

// After request `turn`, the history grows by one step: every third step (turn 1, 4, …) is a
// final answer and a new user message, the others a tool call and its result.
void Advance(Session& s, int turn, const TraceOptions& o) {
  if (turn % 3 == 1) {
    AppendAnswerStep(s, o.think_tokens, o.user_tokens);
  } else {
    AppendToolStep(s, turn, {int(std::size(kTools)), o.think_tokens, o.tool_tokens});
  }
}

// The session's current messages with the last user message edited (its last sentence
// replaced) and everything after it dropped.
json BranchMessages(Session& s) {
  json msgs = s.messages;
  size_t last_user = 0;
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i]["role"] == "user") last_user = i;
  }
  msgs.erase(msgs.begin() + long(last_user) + 1, msgs.end());
  std::string content = msgs[last_user]["content"];
  const size_t cut = content.rfind(". ");
  content = (cut == std::string::npos ? "" : content.substr(0, cut + 2)) + "Edited: " +
            Sentence(s.rng, 12);
  msgs[last_user]["content"] = content;
  return msgs;
}

Status Validate(const TraceOptions& o) {
  if (o.n_sessions < 1 || o.turns_per_session < 1 || o.system_tokens < 1 ||
      o.tool_tokens < 1 || o.user_tokens < 1 || o.think_tokens < 1 || o.max_tokens < 1) {
    return Status::InvalidArgument("trace: sessions, turns, sizes and max_tokens must be >= 1");
  }
  return Status::OK();
}

// Moves the restart flag to the first request at or after the middle that carries no flag.
void PlaceRestart(std::vector<TraceRequest>& trace) {
  for (size_t i = trace.size() / 2; i < trace.size(); ++i) {
    if (i > 0 && trace[i].flags == 0) {
      trace[i].flags |= kTraceRestart;
      return;
    }
  }
}

}  // namespace

Result<std::vector<TraceRequest>> GenerateTrace(const TraceOptions& o) {
  PREFIXD_RETURN_IF_ERROR(Validate(o));
  Rng rng(o.seed);
  const SystemPart system = MakeSystem(rng, o.system_tokens);
  std::vector<Session> sessions(size_t(o.n_sessions));
  for (int i = 0; i < o.n_sessions; ++i) {
    Session& s = sessions[size_t(i)];
    s.id = i;
    s.structured = i % 2 == 0;
    s.rng = Rng(rng.Next());
    s.messages.push_back({{"role", "system"}, {"content", system.text}});
    s.messages.push_back({{"role", "user"},
                          {"content", "Please look at " + FilePath(s.rng) + ". " +
                                          Prose(s.rng, WordsFor(o.user_tokens))}});
  }
  std::vector<TraceRequest> trace;
  auto emit = [&](Session& s, int turn, uint32_t flags, const json& msgs) {
    trace.push_back({s.id, turn, msgs.dump(), system.tools_json, o.max_tokens, flags});
  };
  auto step = [&](Session& s, int turn, uint32_t flags) {
    emit(s, turn, flags, s.messages);
    if (s.id == 0 && turn == o.turns_per_session - 1 && o.branch) {
      emit(s, turn, kTraceBranch, BranchMessages(s));
    }
    Advance(s, turn, o);
  };
  // The last session leaves after its first turn and returns when the others are done.
  const bool has_return = o.n_sessions >= 2 && o.turns_per_session >= 2;
  const int returning = has_return ? o.n_sessions - 1 : -1;
  for (int turn = 0; turn < o.turns_per_session; ++turn) {
    for (Session& s : sessions) {
      if (s.id != returning || turn == 0) step(s, turn, 0);
    }
  }
  for (int turn = 1; has_return && turn < o.turns_per_session; ++turn) {
    step(sessions[size_t(returning)], turn, turn == 1 ? uint32_t(kTraceReturn) : 0u);
  }
  if (o.restart) PlaceRestart(trace);
  return trace;
}

namespace {

Status ValidateLong(const LongSessionOptions& o) {
  if (o.n_tools < 1 || o.n_tools > int(std::size(kTools))) {
    return Status::InvalidArgument("long session: n_tools must be 1.." +
                                   std::to_string(std::size(kTools)));
  }
  if (o.start_tokens < 500 || o.step_tokens < 300 || o.think_tokens < 1 ||
      o.user_tokens < 1 || o.user_every < 1 || o.max_tokens < 1) {
    return Status::InvalidArgument(
        "long session: start_tokens >= 500, step_tokens >= 300, other sizes >= 1");
  }
  if (o.max_context_tokens < o.start_tokens + o.max_tokens) {
    return Status::InvalidArgument("long session: max_context_tokens below the first request");
  }
  return Status::OK();
}

// Code and command output (tool results, pastes) take about 1.6 times the tokens that
// WordsFor's prose calibration predicts with the test models' tokenizer (measured on a 64K
// session); the long session scales their budgets by this so that its sizes hold. (The agent
// trace keeps its historical sizes.)
constexpr double kCodeTokenScale = 0.62;

int CodeBudget(int tokens) { return std::max(50, int(tokens * kCodeTokenScale)); }

// The approximate tokens that a tool step adds besides its result: the assistant's sentence,
// the call and the template's tags around the call and the result.
constexpr int kToolStepOverheadTokens = 70;
// The final answer's prose (40 words) and the tags around it and the user message.
constexpr int kAnswerStepOverheadTokens = 110;

// A final answer, then the user's next message: a question and pasted command output of about
// paste_tokens.
void AppendUserStep(Session& s, const LongSessionOptions& o, int paste_tokens) {
  s.messages.push_back({{"role", "assistant"},
                        {"content", Think(s.rng, o.think_tokens) + Prose(s.rng, 40)}});
  const std::string text = Prose(s.rng, WordsFor(o.user_tokens)) + " Here is what I see:\n\n" +
                           CommandOutput(s.rng, WordsFor(paste_tokens));
  s.messages.push_back({{"role", "user"}, {"content", text}});
}

}  // namespace

int LongSessionRequests(const LongSessionOptions& o) {
  if (!ValidateLong(o).ok()) return 0;
  const int64_t room = int64_t(o.max_context_tokens) - o.max_tokens - o.start_tokens;
  return 1 + int(room / o.step_tokens);
}

Result<std::vector<TraceRequest>> GenerateLongSession(const LongSessionOptions& o) {
  PREFIXD_RETURN_IF_ERROR(ValidateLong(o));
  Rng rng(o.seed);
  const SystemPart system = MakeSystem(rng, o.start_tokens - o.user_tokens, o.n_tools);
  Session s;
  s.rng = Rng(rng.Next());
  s.messages.push_back({{"role", "system"}, {"content", system.text}});
  s.messages.push_back({{"role", "user"},
                        {"content", "Please look at " + FilePath(s.rng) + ". " +
                                        Prose(s.rng, WordsFor(o.user_tokens))}});
  const int n = LongSessionRequests(o);
  const int answer_tokens = o.think_tokens + o.user_tokens + kAnswerStepOverheadTokens;
  std::vector<TraceRequest> trace;
  for (int turn = 0; turn < n; ++turn) {
    trace.push_back({0, turn, s.messages.dump(), system.tools_json, o.max_tokens, 0});
    // Every request adds about step_tokens: one tool step, or every user_every requests a
    // final answer and a new user message that pastes command output.
    if ((turn + 1) % o.user_every == 0) {
      AppendUserStep(s, o, CodeBudget(o.step_tokens - answer_tokens));
    } else {
      const int result_tokens = o.step_tokens - o.think_tokens - kToolStepOverheadTokens;
      AppendToolStep(s, turn, {o.n_tools, o.think_tokens, CodeBudget(result_tokens)});
    }
  }
  return trace;
}

std::string WordSalad(uint64_t seed, int n_tokens) {
  Rng rng(seed);
  return Prose(rng, WordsFor(n_tokens));
}

std::string TraceFlagsToString(uint32_t flags) {
  std::string out;
  auto add = [&](uint32_t bit, const char* name) {
    if (flags & bit) out += (out.empty() ? "" : ",") + std::string(name);
  };
  add(kTraceBranch, "branch");
  add(kTraceReturn, "return");
  add(kTraceRestart, "restart");
  return out;
}

namespace {

json FlagsToJson(uint32_t flags) {
  json out = json::array();
  if (flags & kTraceBranch) out.push_back("branch");
  if (flags & kTraceReturn) out.push_back("return");
  if (flags & kTraceRestart) out.push_back("restart");
  return out;
}

Result<uint32_t> FlagsFromJson(const json& j) {
  uint32_t flags = 0;
  for (const json& f : j) {
    const std::string name = f.get<std::string>();
    if (name == "branch") flags |= kTraceBranch;
    else if (name == "return") flags |= kTraceReturn;
    else if (name == "restart") flags |= kTraceRestart;
    else return Status::InvalidArgument("unknown trace flag \"" + name + "\"");
  }
  return flags;
}

Result<TraceRequest> ParseLine(const std::string& line) {
  TraceRequest r;
  try {
    const json j = json::parse(line);
    r.messages_json = j.at("messages").dump();
    if (j.contains("tools") && !j["tools"].is_null()) r.tools_json = j["tools"].dump();
    r.max_tokens = j.value("max_tokens", 16);
    const json meta = j.value("prefixd_trace", json::object());
    r.session = meta.value("session", 0);
    r.turn = meta.value("turn", 0);
    PREFIXD_ASSIGN_OR_RETURN(r.flags, FlagsFromJson(meta.value("flags", json::array())));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(e.what());
  }
  return r;
}

}  // namespace

std::string TraceRequestToJsonLine(const TraceRequest& r, size_t index, const std::string& model) {
  json j = {{"model", model},
            {"messages", json::parse(r.messages_json)},
            {"max_tokens", r.max_tokens},
            {"temperature", 0},
            {"stream", false},
            {"prefixd_trace",
             {{"index", index}, {"session", r.session}, {"turn", r.turn},
              {"flags", FlagsToJson(r.flags)}}}};
  if (!r.tools_json.empty()) j["tools"] = json::parse(r.tools_json);
  return j.dump();
}

Status WriteTraceJsonl(const std::string& path, const std::vector<TraceRequest>& trace,
                       const std::string& model) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IOError("cannot open " + path + " for writing");
  for (size_t i = 0; i < trace.size(); ++i) out << TraceRequestToJsonLine(trace[i], i, model) << "\n";
  out.flush();
  if (!out) return Status::IOError("write failed: " + path);
  return Status::OK();
}

Result<std::vector<TraceRequest>> ReadTraceJsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot open " + path);
  std::vector<TraceRequest> trace;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    auto r = ParseLine(line);
    if (!r.ok()) return r.status().WithContext(path + ":" + std::to_string(n));
    trace.push_back(std::move(r).value());
  }
  return trace;
}

}  // namespace prefixd::bench
