// Chat: renders OpenAI-style message lists to prompt text with the model's Jinja template
// (llama.cpp common's engine), and finds the message boundaries the cache captures at.
// Thread-safe after construction.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/chat/chat_output.h"
#include "engine/model/model.h"
#include "util/hash.h"
#include "util/status.h"

struct common_chat_render_memo_scope;  // llama-common chat.h (patch 0003)

namespace prefixd::engine {

enum class ToolChoice : uint8_t { kAuto, kNone, kRequired };

// Everything besides the messages that a render takes. All of it goes into every prefix render
// of the capture points too, and RenderOptionsKey() into the render memo's keys.
struct ChatRenderOptions {
  bool add_generation_prompt = true;
  std::string tools_json;  // OpenAI "tools" array as JSON text, or ""
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_name;   // a named function (tool_choice {"type":"function",...}): the reply
                           // is a call of this tool only; "" otherwise
  bool parallel_tool_calls = false;
  std::string json_schema;  // a JSON schema the reply must follow (JSON text), or ""
  std::map<std::string, std::string> template_kwargs;  // name -> value as JSON text
  bool enable_thinking = true;
  // Whose memo entries this render's are (the tenant's salt; "" for none): prefix renders and
  // tokens are remembered per scope, so their timing tells one tenant nothing of another's.
  std::string memo_scope;
  // The image files of the conversation, in the order their kImageMarker stands in the
  // messages (engine/vision/image_prompt.h); read by the engine's projector, never rendered.
  std::vector<std::string> images;
};

// Everything in `options` that can change a prefix render, as one string (the render memo's
// keys). add_generation_prompt is left out: prefix renders never add one.
std::string RenderOptionsKey(const ChatRenderOptions& options);

// A full render: the prompt text and how its reply is constrained and read. The output's
// special_tokens are left empty and its triggers hold words (the engine resolves them against
// the vocabulary: ResolveOutputTokens).
struct ChatRender {
  std::string prompt;
  OutputFormat output;
  std::vector<std::string> preserved_tokens;  // control tokens the parser needs, as text
};

// Which render of a prefix messages[:i] the capture points compare with the full render: the
// prefix as it is, followed by an empty user message, followed by an empty assistant
// message, or followed by an assistant message that calls a tool (see RenderPrefixes).
enum class PrefixVariant : uint8_t {
  kPlain = 0,
  kFollowedByUser = 1,
  kFollowedByAssistant = 2,
  kFollowedByToolCall = 3,
  kFollowedByAnswer = 4,
};

// A messages array parsed once, so that the whole conversation and many of its prefixes can be
// rendered without parsing it again. Every render from one ParsedChat uses the same clock
// reading (templates that print today's date print the same date). Immutable; copies share
// the parsed messages; any thread may use it.
class ParsedChat {
 public:
  size_t n_messages() const;
  // Message i as JSON text (re-serialized, no whitespace), for keys that name a prefix.
  // REQUIRES: i < n_messages().
  const std::string& message_json(size_t i) const;
  const ChatRenderOptions& options() const;
  // The local date of the clock reading, "YYYY-MM-DD" (the finest unit templates print).
  const std::string& render_date() const;

 private:
  friend class ChatTemplate;
  struct Impl;
  explicit ParsedChat(std::shared_ptr<const Impl> impl);
  std::shared_ptr<const Impl> impl_;
};

// While one lives on a thread, identical renders on that thread (the same template, messages
// and options) are made once (patch 0003, docs/llama-patches.md): PrepareChat holds one across
// the full render, whose generation-prompt diff renders the conversation twice more, and the
// capture points' prefix renders, one of which is that diff's render without a generation
// prompt. Renders are dropped when the outermost scope ends. Not copyable.
// A scope made from another with kShareRenders, on another thread, shares its renders (patch
// 0004): a render either thread has begun is made once, the other waiting for it, so the two
// threads can make different renders of one request at the same time.
class RenderReuseScope {
 public:
  enum Share { kShareRenders };
  RenderReuseScope();
  RenderReuseScope(const RenderReuseScope& shared, Share);
  ~RenderReuseScope();
  RenderReuseScope(const RenderReuseScope&) = delete;
  RenderReuseScope& operator=(const RenderReuseScope&) = delete;

 private:
  std::unique_ptr<common_chat_render_memo_scope> scope_;
};

class ChatTemplate {
 public:
  // Uses the model's template, or `override_template` when not empty.
  static Result<std::unique_ptr<ChatTemplate>> Create(const Model& model,
                                                      const std::string& override_template = "");
  ~ChatTemplate();

  // Renders an OpenAI "messages" array given as JSON text. Bad messages (not an array, unknown
  // role, wrong types) give InvalidArgument naming the problem.
  Result<std::string> Render(const std::string& messages_json,
                             const ChatRenderOptions& options) const;

  // Parses an OpenAI "messages" array given as JSON text, with the errors Render() gives.
  Result<ParsedChat> Parse(const std::string& messages_json,
                           const ChatRenderOptions& options) const;
  // Renders the whole parsed conversation with its options.
  Result<std::string> Render(const ParsedChat& chat) const;
  // The same render with what the template says about the reply (format, parser, grammar,
  // triggers, preserved tokens, stops). InvalidArgument when the template cannot honour the
  // options (e.g. a tool_name that is not among the tools).
  Result<ChatRender> RenderWithOutput(const ParsedChat& chat) const;
  // Renders messages[:n_messages] without a generation prompt; kFollowedByUser appends an empty
  // user message first (with n_messages == 0: the placeholder alone, as splits need it),
  // kFollowedByAssistant an empty assistant message and an empty user message (the answer as
  // history), kFollowedByToolCall an assistant message calling the first tool (or "tool") with
  // no arguments, after a line of reasoning (ignored by templates without reasoning),
  // kFollowedByAnswer an assistant message with a short answer as the last turn (templates
  // that close the turn before differently when content follows it).
  // REQUIRES: n_messages <= chat.n_messages(), and 1 <= n_messages for kPlain. InvalidArgument
  // when the template refuses (some refuse a conversation that ends on an assistant turn).
  Result<std::string> RenderPrefix(const ParsedChat& chat, size_t n_messages,
                                   PrefixVariant variant) const;
  // SHA-256 of the template source; with the model's own tokens (one ChatTemplate serves one
  // model) it decides what given messages render to.
  const Digest& fingerprint() const;

  // Renders messages[:i] without a generation prompt for i = 1 .. n-1 and i = n when the full
  // render adds one (the tail), and for i < n also messages[:i] followed by an empty user
  // message (so that templates which strip reasoning before the last user message render the
  // prefix as the full conversation does), and all n messages followed by an empty user or
  // assistant message or a tool call (what the next request appends: templates that close the
  // last message,
  // or open the next, differently by what follows it — a tool block closed only before a user
  // turn, a trailing system turn — share with the next request only up to where that begins).
  // Used to find message boundaries.
  Result<std::vector<std::string>> RenderPrefixes(const std::string& messages_json,
                                                  const ChatRenderOptions& options) const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One prefix render the capture points compare with the full render.
struct PrefixRender {
  size_t n_messages = 0;
  PrefixVariant variant = PrefixVariant::kPlain;
};

// The prefix renders RenderPrefixes() makes for `chat` of n messages, in its order: for
// i = 1 .. n-1 (plain, followed by user), then (n, plain) when the full render adds a
// generation prompt, then n followed by user, by assistant and by a tool call.
std::vector<PrefixRender> PrefixesToCompare(const ParsedChat& chat);

// Fills what needs the vocabulary: the preserved tokens that are one token each become
// output.special_tokens, and word triggers that are such a token become token triggers (as
// llama-server does).
void ResolveOutputTokens(const Model& model, const std::vector<std::string>& preserved,
                         OutputFormat* output);

}  // namespace prefixd::engine
