// prefixd_prepare_bench: times the work a chat request costs before the model sees it — the
// full render, tokenization and the capture points — on one agent conversation that grows
// request by request (a system prompt with tools, a user task, then assistant turns with
// reasoning_content and tool_calls, each followed by its tool result, and now and then a final
// answer and a new user message), from a few thousand to ~64K tokens. Prints one line per
// request, with the memoized capture points PrepareChat uses and, every n-th request, the
// reference (every prefix rendered) for comparison. No model evaluation happens: a tiny
// generated test model supplies the vocabulary and the chat template. See docs/bench.md.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/trace.h"
#include "engine/chat/capture_points.h"
#include "engine/chat/prefix_renders_ahead.h"
#include "engine/chat/chat_template.h"
#include "engine/chat/token_memo.h"
#include "engine/model/model.h"
#include "engine/chat/render_memo.h"
#include "engine/testgen/test_model.h"
#include "util/flags.h"

namespace prefixd::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using engine::Token;

struct PrepareArgs {
  std::string arch = "qwen35";
  std::string model;  // an existing GGUF instead of a generated one
  std::string work_dir = "/tmp/prefixd-prepare-bench";
  int64_t system_tokens = 4000;
  int64_t tool_tokens = 500;
  int64_t think_tokens = 80;
  int64_t user_every = 12;       // tool steps between new user messages
  int64_t max_prompt_tokens = 65536;
  int64_t reference_every = 0;   // also time the reference every n-th request (0: never)
  int64_t seed = 1;
};

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Times one call, adding its milliseconds to *ms.
template <typename F>
auto Timed(double* ms, F f) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = f();
  *ms += MsSince(t0);
  return r;
}

Result<std::string> ResolveModel(const PrepareArgs& a) {
  if (!a.model.empty()) return a.model;
  fs::create_directories(a.work_dir);
  const std::string path = a.work_dir + "/model-" + a.arch + "-tiny.gguf";
  if (fs::exists(path)) return path;
  PREFIXD_RETURN_IF_ERROR(engine::MakeTestModel({a.arch, "tiny", 1}, path));
  return path;
}

// The growing conversation: its messages so far and the tools every request sends.
struct Conversation {
  json messages = json::array();
  std::string tools_json;
  uint64_t seed = 0;
  int step = 0;
};

Result<Conversation> StartConversation(const PrepareArgs& a) {
  TraceOptions o;
  o.seed = uint64_t(a.seed);
  o.n_sessions = 1;
  o.turns_per_session = 1;
  o.system_tokens = int(a.system_tokens);
  o.branch = false;
  o.restart = false;
  PREFIXD_ASSIGN_OR_RETURN(std::vector<TraceRequest> trace, GenerateTrace(o));
  Conversation c;
  c.tools_json = trace[0].tools_json;
  c.seed = uint64_t(a.seed) * 1000003;
  c.messages.push_back(json::parse(trace[0].messages_json)[0]);  // the system message
  c.messages.push_back({{"role", "user"}, {"content", WordSalad(c.seed++, 60)}});
  return c;
}

// Appends one tool step (assistant reasoning + tool call, then the tool's result); every
// user_every steps also a final answer and a new user message.
void Advance(Conversation& c, const PrepareArgs& a) {
  const std::string id = "call_" + std::to_string(c.step);
  const std::string args = json{{"path", "src/file_" + std::to_string(c.step) + ".cc"}}.dump();
  json call = {{"id", id}, {"type", "function"},
               {"function", {{"name", "read_file"}, {"arguments", args}}}};
  c.messages.push_back({{"role", "assistant"},
                        {"reasoning_content", WordSalad(c.seed++, int(a.think_tokens))},
                        {"content", WordSalad(c.seed++, 12)},
                        {"tool_calls", json::array({call})}});
  c.messages.push_back({{"role", "tool"}, {"tool_call_id", id},
                        {"content", WordSalad(c.seed++, int(a.tool_tokens))}});
  if (++c.step % a.user_every == 0) {
    c.messages.push_back({{"role", "assistant"},
                          {"reasoning_content", WordSalad(c.seed++, int(a.think_tokens))},
                          {"content", WordSalad(c.seed++, 40)}});
    c.messages.push_back({{"role", "user"}, {"content", WordSalad(c.seed++, 40)}});
  }
}

// One request's timings, split as PrepareChat spends them.
struct Split {
  size_t tokens = 0;
  size_t points = 0;
  double parse_ms = 0;     // parsing the messages once
  double render_ms = 0;    // the full render
  double tokenize_ms = 0;  // tokenizing the full render through the TokenMemo (as PrepareChat)
  double whole_tokenize_ms = 0;  // measured apart: tokenizing it whole (the memo's reference)
  bool memo_equal = true;        // and whether both give the same tokens
  double points_ms = 0;    // ChatCapturePoints with the memo, of which:
  engine::CapturePointStats stats;  // prefix renders (count and ms)
  double pieces_ms = 0;    // measured apart: one TokenPiece per prompt token
  double ref_ms = -1;      // the reference ChatCapturePoints (every prefix), when timed
  bool ref_equal = true;   // and whether its points equal the memo's
};

double TimePieces(const engine::Model& model, const std::vector<Token>& tokens,
                  const std::string& text) {
  double ms = 0;
  size_t chars = Timed(&ms, [&] {
    size_t n = 0;
    for (Token t : tokens) n += model.TokenPiece(t, true).size();
    return n;
  });
  if (chars != text.size()) std::fprintf(stderr, "note: tokens do not spell the text back\n");
  return ms;
}

// The work Engine::PrepareChat does, timed step by step.
Result<Split> PrepareOnce(const engine::Model& model, const engine::ChatTemplate& tmpl,
                          engine::RenderMemo& memo, const engine::TokenMemo& token_memo,
                          const Conversation& c, bool reference) {
  Split s;
  engine::ChatRenderOptions ro;
  ro.tools_json = c.tools_json;
  const std::string messages = c.messages.dump();
  std::optional<engine::RenderReuseScope> reuse;  // as PrepareChat holds one
  reuse.emplace();
  PREFIXD_ASSIGN_OR_RETURN(engine::ParsedChat chat,
                           Timed(&s.parse_ms, [&] { return tmpl.Parse(messages, ro); }));
  std::optional<engine::PrefixRendersAhead> ahead;
  PREFIXD_ASSIGN_OR_RETURN(engine::ChatRender render, Timed(&s.render_ms, [&] {
                             ahead.emplace(tmpl, chat, memo, *reuse);
                             return tmpl.RenderWithOutput(chat);
                           }));
  const std::string& text = render.prompt;
  std::vector<Token> tokens = Timed(&s.tokenize_ms, [&] { return token_memo.Tokenize(text); });
  PREFIXD_ASSIGN_OR_RETURN(std::vector<int32_t> points, Timed(&s.points_ms, [&] {
    return engine::ChatCapturePoints(model, tmpl, chat, text, tokens, memo, &s.stats, &*ahead);
  }));
  ahead.reset();
  // Timed apart, after the points (the renders begun ahead would otherwise run beside it).
  std::vector<Token> whole =
      Timed(&s.whole_tokenize_ms, [&] { return model.Tokenize(text, true); });
  s.memo_equal = whole == tokens;
  s.pieces_ms = TimePieces(model, tokens, text);
  s.tokens = tokens.size();
  s.points = points.size();
  reuse.reset();
  if (reference) {
    s.ref_ms = 0;
    PREFIXD_ASSIGN_OR_RETURN(std::vector<int32_t> ref, Timed(&s.ref_ms, [&] {
      return engine::ChatCapturePoints(model, tmpl, messages, ro, text, tokens);
    }));
    s.ref_equal = ref == points;
  }
  return s;
}

void PrintHeader(const PrepareArgs& a) {
  std::printf("# prefixd_prepare_bench arch=%s system=%lld tool=%lld think=%lld user_every=%lld\n",
              a.arch.c_str(), (long long)a.system_tokens, (long long)a.tool_tokens,
              (long long)a.think_tokens, (long long)a.user_every);
  std::printf("# total = parse + render + tokenize + points (memoized); prefix = the prefix "
              "renders inside points; split/text = prefixes whose boundary the memo moved by a "
              "split / an earlier full render instead of rendering them; pieces = a TokenPiece "
              "loop over the prompt, timed apart; reference = the old ChatCapturePoints (every "
              "prefix rendered); whole_tok = tokenizing the render whole, timed apart (DIFFER: not the "
              "memo's tokens)\n");
  std::printf("%4s %5s %7s %6s %9s %8s %9s %9s %9s %7s %9s %5s %4s %9s %12s %s\n", "req", "msgs",
              "tokens", "points", "total_ms", "parse_ms", "render_ms", "tokens_ms", "points_ms",
              "renders", "prefix_ms", "split", "text", "pieces_ms", "reference_ms", "whole_tok");
}

void PrintRow(int req, const Conversation& c, const Split& s) {
  char ref[32] = "-";
  if (s.ref_ms >= 0) {
    std::snprintf(ref, sizeof ref, "%.1f%s", s.ref_ms, s.ref_equal ? "" : " DIFFER");
  }
  std::printf("%4d %5zu %7zu %6zu %9.1f %8.1f %9.1f %9.1f %9.1f %7zu %9.1f %5zu %4zu %9.1f %12s %.1f%s\n",
              req, c.messages.size(), s.tokens, s.points,
              s.parse_ms + s.render_ms + s.tokenize_ms + s.points_ms, s.parse_ms, s.render_ms,
              s.tokenize_ms, s.points_ms, s.stats.renders, s.stats.render_ms, s.stats.by_split,
              s.stats.by_text, s.pieces_ms, ref, s.whole_tokenize_ms, s.memo_equal ? "" : " DIFFER");
  std::fflush(stdout);
}

Status Main(const PrepareArgs& a) {
  if (a.reference_every < 0 || a.user_every < 1) {
    return Status::InvalidArgument("--reference-every must be >= 0 and --user-every >= 1");
  }
  PREFIXD_ASSIGN_OR_RETURN(std::string path, ResolveModel(a));
  PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<engine::Model> model, engine::Model::Load({path, 0}));
  PREFIXD_ASSIGN_OR_RETURN(std::unique_ptr<engine::ChatTemplate> tmpl,
                           engine::ChatTemplate::Create(*model));
  PREFIXD_ASSIGN_OR_RETURN(Conversation c, StartConversation(a));
  engine::RenderMemo memo;
  std::unique_ptr<engine::TokenMemo> token_memo = engine::TokenMemo::ForModel(*model);
  PrintHeader(a);
  bool all_equal = true;
  for (int req = 0;; ++req) {
    const bool reference = a.reference_every > 0 && req % a.reference_every == 0;
    PREFIXD_ASSIGN_OR_RETURN(Split s, PrepareOnce(*model, *tmpl, memo, *token_memo, c, reference));
    PrintRow(req, c, s);
    all_equal = all_equal && s.ref_equal && s.memo_equal;
    if (int64_t(s.tokens) >= a.max_prompt_tokens) break;
    Advance(c, a);
  }
  if (!all_equal) return Status::Internal("memoized capture points or tokens differ from the reference");
  return Status::OK();
}

}  // namespace
}  // namespace prefixd::bench

int main(int argc, char** argv) {
  prefixd::bench::PrepareArgs a;
  prefixd::Flags flags(
      "prefixd_prepare_bench",
      "Times render, tokenization and capture points of a chat request on one growing agent "
      "conversation.");
  flags.String("--arch", &a.arch, "test-model architecture to generate (ignored with --model)");
  flags.String("--model", &a.model, "use this GGUF instead of generating a test model");
  flags.String("--work-dir", &a.work_dir, "where the generated test model is kept");
  flags.Int("--system-tokens", &a.system_tokens, "system prompt + tool schemas, approx tokens");
  flags.Int("--tool-tokens", &a.tool_tokens, "one tool result, approx tokens");
  flags.Int("--think-tokens", &a.think_tokens, "one assistant turn's reasoning, approx tokens");
  flags.Int("--user-every", &a.user_every, "tool steps between new user messages");
  flags.Int("--max-prompt-tokens", &a.max_prompt_tokens, "stop after a prompt this long");
  flags.Int("--reference-every", &a.reference_every,
            "also time the reference capture points (and compare) every n-th request; 0: never");
  flags.Int("--seed", &a.seed, "conversation seed");
  return prefixd::RunWithFlags(flags, argc, argv, [&] {
    prefixd::Status st = prefixd::bench::Main(a);
    if (!st.ok()) std::fprintf(stderr, "prefixd_prepare_bench: %s\n", st.ToString().c_str());
    return st.ok() ? 0 : 1;
  }, 1);
}
