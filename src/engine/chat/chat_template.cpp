#include "engine/chat/chat_template.h"

#include <algorithm>
#include <ctime>
#include <exception>

#include "chat.h"
#include "engine/chat/pinned_assets.h"
#include "engine/chat/schema_gaps.h"
#include "json.h"
#include "util/log.h"

namespace prefixd::engine {

struct ChatTemplate::Impl {
  common_chat_templates_ptr templates;
  std::string source;  // as given (common rewrites a few templates' sources it fixes)
  Digest fingerprint{};
};

// The inputs of the full render; prefix renders copy them with fewer messages.
struct ParsedChat::Impl {
  common_chat_templates_inputs inputs;
  common_chat_templates_inputs inputs_without_messages;  // copied cheaply per prefix render
  std::vector<std::string> message_json;
  ChatRenderOptions options;
  std::string render_date;
};

ParsedChat::ParsedChat(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
size_t ParsedChat::n_messages() const { return impl_->inputs.messages.size(); }
const std::string& ParsedChat::message_json(size_t i) const { return impl_->message_json.at(i); }
const ChatRenderOptions& ParsedChat::options() const { return impl_->options; }
const std::string& ParsedChat::render_date() const { return impl_->render_date; }

RenderReuseScope::RenderReuseScope()
    : scope_(std::make_unique<common_chat_render_memo_scope>()) {}
RenderReuseScope::RenderReuseScope(const RenderReuseScope& shared, Share)
    : scope_(std::make_unique<common_chat_render_memo_scope>(*shared.scope_,
                                                             common_chat_render_memo_share{})) {}
RenderReuseScope::~RenderReuseScope() = default;

ChatTemplate::ChatTemplate(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ChatTemplate::~ChatTemplate() = default;

Result<std::unique_ptr<ChatTemplate>> ChatTemplate::Create(const Model& model,
                                                           const std::string& override_template) {
  // The template analysis (llama.cpp's differential autoparser, a dozen probe renders) is a
  // function of the template: made once per template and day, not on every request (patch 0022);
  // the reply's parser and grammar, once per analysis, tools and options (patch 0023).
  common_chat_set_analysis_memo(true);
  auto impl = std::make_unique<Impl>();
  try {
    impl->templates = common_chat_templates_init(model.raw(), override_template);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("chat template: ") + e.what());
  }
  if (!impl->templates) return Status::InvalidArgument("chat template: cannot be parsed");
  impl->source = override_template.empty() ? model.ChatTemplate() : override_template;
  Sha256 h;
  for (const char* variant : {"", "tool_use"}) {
    const std::string source = common_chat_templates_source(impl->templates.get(), variant);
    h.UpdateU64(source.size());
    h.Update(source);
  }
  impl->fingerprint = h.Finish();
  return std::unique_ptr<ChatTemplate>(new ChatTemplate(std::move(impl)));
}

const Digest& ChatTemplate::fingerprint() const { return impl_->fingerprint; }

namespace {

std::string LocalDate(std::chrono::system_clock::time_point now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
  return buf;
}

common_chat_tool_choice ToCommon(ToolChoice c) {
  switch (c) {
    case ToolChoice::kAuto: return COMMON_CHAT_TOOL_CHOICE_AUTO;
    case ToolChoice::kNone: return COMMON_CHAT_TOOL_CHOICE_NONE;
    case ToolChoice::kRequired: return COMMON_CHAT_TOOL_CHOICE_REQUIRED;
  }
  return COMMON_CHAT_TOOL_CHOICE_AUTO;
}

// The options that are not about the messages, as llama-server sets them.
void SetOptions(const ChatRenderOptions& options, common_chat_templates_inputs& inputs) {
  inputs.add_generation_prompt = options.add_generation_prompt;
  inputs.use_jinja = true;
  inputs.tool_choice = ToCommon(options.tool_choice);
  if (!options.tool_name.empty()) inputs.tool_choice = COMMON_CHAT_TOOL_CHOICE_REQUIRED;
  inputs.parallel_tool_calls = options.parallel_tool_calls;
  inputs.json_schema = options.json_schema;
  inputs.chat_template_kwargs = options.template_kwargs;
  inputs.enable_thinking = options.enable_thinking;
  inputs.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
}

// Fills `out` from the messages JSON text: the inputs of the full render and each message's
// JSON text.
Status ParseInputs(const std::string& messages_json, const ChatRenderOptions& options,
                   common_chat_templates_inputs& inputs, std::vector<std::string>& message_json) {
  SetOptions(options, inputs);
  try {
    const common_json messages = common_json::parse(messages_json);
    inputs.messages = common_chat_msgs_parse_oaicompat(messages);
    for (const auto& m : messages) message_json.push_back(m.dump());
    if (!options.tools_json.empty()) {
      inputs.tools = common_chat_tools_parse_oaicompat(common_json::parse(options.tools_json));
    }
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("messages: ") + e.what());
  }
  if (inputs.messages.empty()) return Status::InvalidArgument("messages: empty");
  return Status::OK();
}

Result<common_chat_params> ApplyFull(const common_chat_templates* t,
                                     const common_chat_templates_inputs& inputs) {
  try {
    return common_chat_templates_apply(t, inputs);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("chat template failed: ") + e.what());
  }
}

Result<std::string> Apply(const common_chat_templates* t,
                          const common_chat_templates_inputs& inputs) {
  PREFIXD_ASSIGN_OR_RETURN(common_chat_params p, ApplyFull(t, inputs));
  return std::move(p.prompt);
}

// The prompt alone of a render without a generation prompt (patch 0003: one render instead of
// three, no template analysis, no output parser).
Result<std::string> ApplyPromptOnly(const common_chat_templates* t,
                                    const common_chat_templates_inputs& inputs) {
  try {
    return common_chat_templates_apply_prompt_only(t, inputs);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("chat template failed: ") + e.what());
  }
}

// The inputs with only the tool named `name` (the reply is constrained to call it).
Result<common_chat_templates_inputs> OnlyTool(const common_chat_templates_inputs& inputs,
                                              const std::string& name) {
  common_chat_templates_inputs only = inputs;
  only.tools.clear();
  for (const auto& t : inputs.tools) {
    if (t.name == name) only.tools.push_back(t);
  }
  if (only.tools.empty()) {
    return Status::InvalidArgument("tool_choice names function '" + name +
                                   "', which is not among the tools");
  }
  only.tool_choice = COMMON_CHAT_TOOL_CHOICE_REQUIRED;
  return only;
}

GrammarTrigger ToTrigger(const common_grammar_trigger& t) {
  GrammarTrigger out;
  switch (t.type) {
    case COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN: out.type = GrammarTrigger::Type::kToken; break;
    case COMMON_GRAMMAR_TRIGGER_TYPE_WORD: out.type = GrammarTrigger::Type::kWord; break;
    case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN: out.type = GrammarTrigger::Type::kPattern; break;
    case COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL:
      out.type = GrammarTrigger::Type::kPatternFull;
      break;
  }
  out.value = t.value;
  out.token = t.token;
  return out;
}

// What the template says about the reply. The preserved tokens stay as text (`preserved`).
OutputFormat ToOutput(const common_chat_params& p, const common_chat_templates_inputs& in,
                      std::vector<std::string>* preserved) {
  OutputFormat out;
  out.chat_format = int(p.format);
  out.parser = p.parser;
  out.generation_prompt = p.generation_prompt;
  out.parse_tool_calls = !in.tools.empty() && in.tool_choice != COMMON_CHAT_TOOL_CHOICE_NONE;
  out.additional_stops = p.additional_stops;
  // The thinking tags with or without a grammar: a reasoning budget needs them either way.
  out.grammar.generation_prompt = p.generation_prompt;
  out.grammar.thinking_start = p.thinking_start_tag;
  out.grammar.thinking_end = p.thinking_end_tags;
  if (!p.grammar.empty()) {
    out.grammar.kind = GrammarKind::kToolCalls;  // as llama-server marks template grammars
    out.grammar.gbnf = p.grammar;
    out.grammar.lazy = p.grammar_lazy;
    for (const auto& t : p.grammar_triggers) out.grammar.triggers.push_back(ToTrigger(t));
  }
  *preserved = p.preserved_tokens;
  return out;
}

}  // namespace

Result<ParsedChat> ChatTemplate::Parse(const std::string& messages_json,
                                       const ChatRenderOptions& options) const {
  auto impl = std::make_shared<ParsedChat::Impl>();
  PREFIXD_RETURN_IF_ERROR(ParseInputs(messages_json, options, impl->inputs, impl->message_json));
  impl->inputs_without_messages = impl->inputs;
  impl->inputs_without_messages.messages.clear();
  impl->options = options;
  impl->render_date = LocalDate(impl->inputs.now);
  return ParsedChat(std::move(impl));
}

Result<std::string> ChatTemplate::Render(const ParsedChat& chat) const {
  return Apply(impl_->templates.get(), chat.impl_->inputs);
}

// The text a call of this template starts with: the word its lazy grammar (tool_choice auto)
// waits for. A forced call's grammar has no trigger, and still lets the reply write text
// before the call. The template's analysis does not depend on the conversation: one user
// message stands in for it. Empty when the template starts calls by a pattern, or not at all.
static std::string CallMarker(const common_chat_templates* t, const common_chat_templates_inputs& in) {
  common_chat_templates_inputs probe = in;
  probe.tool_choice = COMMON_CHAT_TOOL_CHOICE_AUTO;
  probe.messages.assign(1, common_chat_msg{});
  probe.messages[0].role = "user";
  probe.messages[0].content = "call";
  Result<common_chat_params> p = ApplyFull(t, probe);
  if (!p.ok()) return "";
  for (const common_grammar_trigger& g : p->grammar_triggers) {
    if (g.type == COMMON_GRAMMAR_TRIGGER_TYPE_WORD || g.type == COMMON_GRAMMAR_TRIGGER_TYPE_TOKEN) {
      return g.value;
    }
  }
  return "";
}

static size_t CommonPrefix(const std::string& a, const std::string& b) {
  const size_t n = std::min(a.size(), b.size());
  return size_t(std::mismatch(a.begin(), a.begin() + long(n), b.begin()).first - a.begin());
}

// How the template writes a call up to its arguments: the text two renders of one assistant
// call share after the generation prompt (calls of two tools when the model must choose the
// name, else two argument objects of the one tool), from the call marker where the template has
// one. Templates whose generators start calls by a pattern (Llama 3.x JSON, Harmony) have no
// marker: their header starts where the generation prompt ends. Ids are 9 letters and digits,
// the one shape every template accepts (Mistral's insist). The sampler decodes only the part
// the grammar accepts; the marker alone when the renders do not line up.
static std::string CallHeader(const common_chat_templates* t, const common_chat_templates_inputs& in,
                              const std::string& marker, const std::string& generation_prompt) {
  if (in.tools.empty()) return marker;
  // Prompt-only renders (one template pass each, no parser): a forced request with many tools
  // makes three per tool. The stand-in asked with the request's generation prompt is `asked`.
  common_chat_templates_inputs probe = in;
  probe.messages.assign(1, common_chat_msg{});
  probe.messages[0].role = "user";
  probe.messages[0].content = "call";
  probe.add_generation_prompt = false;
  Result<std::string> asked = ApplyPromptOnly(t, probe);
  if (!asked.ok()) return marker;
  auto render_call = [&](const std::string& name, const std::string& args) -> Result<std::string> {
    common_chat_templates_inputs c = probe;
    common_chat_msg m;
    m.role = "assistant";
    m.tool_calls.push_back({name, args, "a1b2c3d4e"});
    c.messages.push_back(m);
    return ApplyPromptOnly(t, c);
  };
  const std::string& first = probe.tools.front().name;
  Result<std::string> a = render_call(first, "{\"a\": 1}");
  Result<std::string> b = probe.tools.size() > 1 ? render_call(probe.tools[1].name, "{\"a\": 1}")
                                                 : render_call(first, "{}");
  if (!a.ok() || !b.ok()) return marker;
  const size_t shared = CommonPrefix(*a, *b);
  const std::string gen = *asked + generation_prompt;
  size_t from = CommonPrefix(gen, *a);
  if (!marker.empty()) {
    from = a->find(marker, from);
  } else if (from < gen.size()) {
    return marker;
  }
  if (from == std::string::npos || from >= shared) return marker;
  return a->substr(from, shared - from);
}

// The forced call's start: with one tool its whole header; with several, the header they all
// share, and each one's rest (its name and what follows it). Each tool's header comes from
// renders with that tool alone, which write its call as the full tool list does.
static void SetCallStart(const common_chat_templates* t, const common_chat_templates_inputs& in,
                         const std::string& marker, GrammarSpec* g) {
  constexpr size_t kMostTools = 64;  // three small renders a tool; more fall back to the shared part
  if (in.tools.size() <= 1 || in.tools.size() > kMostTools) {
    g->forced_call = CallHeader(t, in, marker, g->generation_prompt);
    return;
  }
  std::vector<std::string> headers;
  for (const common_chat_tool& tool : in.tools) {
    common_chat_templates_inputs one = in;
    one.tools.assign(1, tool);
    headers.push_back(CallHeader(t, one, marker, g->generation_prompt));
  }
  size_t shared = headers.front().size();
  for (const std::string& h : headers) shared = std::min(shared, CommonPrefix(headers.front(), h));
  g->forced_call = headers.front().substr(0, shared);
  for (const std::string& h : headers) g->forced_call_rests.push_back(h.substr(shared));
}

// The template as a user can look it up: the pinned template(s) it is, or what it is not.
static std::string TemplateName(const std::string& source) {
  const std::vector<std::string> names = PinnedTemplatesMatching(source);
  if (names.empty()) return "this model's chat template (none of the pinned templates)";
  std::string out = "chat template " + names.front();
  for (size_t i = 1; i < names.size(); ++i) out += " (also " + names[i] + ")";
  return out;
}

// A forced call (required, or a named function) must come out as one: the template must have
// a tool format (a grammar for its calls), and the reply starts at its call header.
static Status ForceCall(const common_chat_templates* t, const std::string& source,
                        const common_chat_templates_inputs& in, OutputFormat* out) {
  if (in.tools.empty() || in.tool_choice != COMMON_CHAT_TOOL_CHOICE_REQUIRED) return Status::OK();
  if (out->grammar.empty()) {
    return Status::InvalidArgument(
        TemplateName(source) + " has no tool-call format: a forced tool call (tool_choice required, "
        "a named function, any or tool) cannot be honoured; use tool_choice auto, or serve the "
        "model with --chat-template set to a template that has one");
  }
  SetCallStart(t, in, CallMarker(t, in), &out->grammar);
  return Status::OK();
}

// Says, once per tool of a request whose reply may call one, what of its schema no grammar holds.
static void LogSchemaGaps(const common_chat_templates_inputs& in) {
  if (in.tool_choice == COMMON_CHAT_TOOL_CHOICE_NONE) return;
  for (const common_chat_tool& t : in.tools) {
    const std::string message = SchemaGapsMessage(t.name, SchemaGaps(t.parameters));
    if (!message.empty()) Log(LogLevel::kWarning, message);
  }
}

Result<ChatRender> ChatTemplate::RenderWithOutput(const ParsedChat& chat) const {
  const common_chat_templates_inputs& in = chat.impl_->inputs;
  PREFIXD_ASSIGN_OR_RETURN(common_chat_params full, ApplyFull(impl_->templates.get(), in));
  LogSchemaGaps(in);
  ChatRender out;
  out.prompt = std::move(full.prompt);
  const std::string& name = chat.options().tool_name;
  if (name.empty()) {
    out.output = ToOutput(full, in, &out.preserved_tokens);
    PREFIXD_RETURN_IF_ERROR(ForceCall(impl_->templates.get(), impl_->source, in, &out.output));
    return out;
  }
  // The prompt shows every tool (as the conversation's other turns do); the reply is held to
  // the named one.
  PREFIXD_ASSIGN_OR_RETURN(common_chat_templates_inputs only, OnlyTool(in, name));
  PREFIXD_ASSIGN_OR_RETURN(common_chat_params one, ApplyFull(impl_->templates.get(), only));
  out.output = ToOutput(one, only, &out.preserved_tokens);
  PREFIXD_RETURN_IF_ERROR(ForceCall(impl_->templates.get(), impl_->source, only, &out.output));
  return out;
}

Result<std::string> ChatTemplate::Render(const std::string& messages_json,
                                         const ChatRenderOptions& options) const {
  PREFIXD_ASSIGN_OR_RETURN(ParsedChat chat, Parse(messages_json, options));
  return Render(chat);
}

Result<std::string> ChatTemplate::RenderPrefix(const ParsedChat& chat, size_t n_messages,
                                               PrefixVariant variant) const {
  const common_chat_templates_inputs& full = chat.impl_->inputs;
  common_chat_templates_inputs part = chat.impl_->inputs_without_messages;
  part.add_generation_prompt = false;
  part.messages.assign(full.messages.begin(), full.messages.begin() + long(n_messages));
  // Templates that strip reasoning from assistant turns before the last user message render
  // messages[:i] differently when a user message follows; a placeholder user message makes
  // the prefix render as it does inside the full conversation.
  // The next request appends the answer after the last message; a placeholder assistant
  // message shows how the template closes that message when an answer follows.
  if (variant != PrefixVariant::kPlain) {
    common_chat_msg placeholder;
    placeholder.role = variant == PrefixVariant::kFollowedByUser ? "user" : "assistant";
    if (variant == PrefixVariant::kFollowedByToolCall) {
      // An agent's tool call comes with its reasoning where thinking is on, and templates keep
      // the reasoning of the turns since the last user message: the turn shares with the
      // generation prompt up to where that reasoning begins (templates without reasoning
      // ignore it).
      const std::string name = part.tools.empty() ? "tool" : part.tools.front().name;
      placeholder.tool_calls.push_back({name, "{}", "call_0"});
      placeholder.reasoning_content = "Ok.";
    }
    if (variant == PrefixVariant::kFollowedByAnswer) placeholder.content = "Ok.";
    part.messages.push_back(placeholder);
  }
  // An answer is followed by the user's next message sooner or later, and templates render it
  // then as history (its reasoning stripped): the turn shares with the generation prompt only
  // up to where its reasoning would begin.
  if (variant == PrefixVariant::kFollowedByAssistant) {
    common_chat_msg user;
    user.role = "user";
    part.messages.push_back(user);
  }
  return ApplyPromptOnly(impl_->templates.get(), part);
}

namespace {

// Appends `value` length-prefixed, so that no two option sets give the same key.
void AddKeyField(std::string& key, std::string_view value) {
  key += std::to_string(value.size());
  key += ':';
  key += value;
}

}  // namespace

std::string RenderOptionsKey(const ChatRenderOptions& o) {
  std::string key = "render-options-v1;";
  AddKeyField(key, o.tools_json);
  AddKeyField(key, std::to_string(int(o.tool_choice)));
  AddKeyField(key, o.tool_name);
  AddKeyField(key, o.parallel_tool_calls ? "p" : "-");
  AddKeyField(key, o.json_schema);
  AddKeyField(key, o.enable_thinking ? "t" : "-");
  AddKeyField(key, o.memo_scope);
  AddKeyField(key, std::to_string(o.template_kwargs.size()));
  for (const auto& [name, value] : o.template_kwargs) {
    AddKeyField(key, name);
    AddKeyField(key, value);
  }
  return key;
}

void ResolveOutputTokens(const Model& model, const std::vector<std::string>& preserved,
                         OutputFormat* output) {
  for (const std::string& text : preserved) {
    std::vector<Token> ids = model.Tokenize(text, /*parse_special=*/true, /*allow_bos=*/false);
    if (ids.size() == 1) output->special_tokens.push_back(ids[0]);
  }
  const auto& special = output->special_tokens;
  for (GrammarTrigger& t : output->grammar.triggers) {
    if (t.type != GrammarTrigger::Type::kWord) continue;
    std::vector<Token> ids = model.Tokenize(t.value, true, false);
    if (ids.size() == 1 && std::find(special.begin(), special.end(), ids[0]) != special.end()) {
      t.type = GrammarTrigger::Type::kToken;
      t.token = ids[0];
    }
  }
}

std::vector<PrefixRender> PrefixesToCompare(const ParsedChat& chat) {
  const size_t n_messages = chat.n_messages();
  std::vector<PrefixRender> out;
  for (size_t i = 1; i < n_messages; ++i) {
    out.push_back({i, PrefixVariant::kPlain});
    out.push_back({i, PrefixVariant::kFollowedByUser});
  }
  if (chat.options().add_generation_prompt) out.push_back({n_messages, PrefixVariant::kPlain});
  out.push_back({n_messages, PrefixVariant::kFollowedByUser});
  out.push_back({n_messages, PrefixVariant::kFollowedByAssistant});
  out.push_back({n_messages, PrefixVariant::kFollowedByToolCall});
  out.push_back({n_messages, PrefixVariant::kFollowedByAnswer});
  return out;
}

Result<std::vector<std::string>> ChatTemplate::RenderPrefixes(
    const std::string& messages_json, const ChatRenderOptions& options) const {
  PREFIXD_ASSIGN_OR_RETURN(ParsedChat chat, Parse(messages_json, options));
  std::vector<std::string> out;
  for (const PrefixRender& p : PrefixesToCompare(chat)) {
    auto rendered = RenderPrefix(chat, p.n_messages, p.variant);
    if (rendered.ok()) out.push_back(std::move(rendered).value());  // a template may refuse
  }
  return out;
}

}  // namespace prefixd::engine
