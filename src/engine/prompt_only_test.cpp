// Patch 0003 (docs/llama-patches.md): common_chat_templates_apply_prompt_only() gives exactly
// the prompt common_chat_templates_apply() gives, for every chat template the pinned source
// ships and every prefix render the capture points make (ChatTemplate::RenderPrefix): each
// prefix of an agent conversation with tools, tool calls, tool results and reasoning, plain and
// followed by each placeholder. A template that refuses a render refuses it both ways.
// Also: patch 0002 (the Jinja engine without table copies) renders as the unpatched engine
// does — checked here on what it must not change: the renders are compared with the full
// apply's, which runs the same engine, so this test pins the prompt-only path; the engine's
// own equality is llama.cpp's test-jinja, run by scripts/setup-llama.sh.
// And patch 0022: the template analysis kept gives what it gives made anew.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "chat.h"
#include "engine/chat/pinned_assets.h"
#include "json.h"

namespace prefixd::engine {
namespace {

const char* const kTools = R"([
  {"type":"function","function":{"name":"read_file","description":"Read a file",
   "parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}},
  {"type":"function","function":{"name":"run","description":"Run a command",
   "parameters":{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"]}}}])";

const char* const kMessages = R"([
  {"role":"system","content":"You are a coding agent."},
  {"role":"user","content":"Fix the failing test in src/a.cpp."},
  {"role":"assistant","content":"","reasoning_content":"I should read the file first.",
   "tool_calls":[{"id":"call_1","type":"function",
                  "function":{"name":"read_file","arguments":"{\"path\":\"src/a.cpp\"}"}}]},
  {"role":"tool","tool_call_id":"call_1","content":"int main() { return 1; }"},
  {"role":"assistant","content":"","reasoning_content":"It returns 1; run the test.",
   "tool_calls":[{"id":"call_2","type":"function",
                  "function":{"name":"run","arguments":"{\"cmd\":\"make test\"}"}}]},
  {"role":"tool","tool_call_id":"call_2","content":"FAILED: a_test"},
  {"role":"assistant","content":"main returns 1; it should return 0.",
   "reasoning_content":"The fix is clear."},
  {"role":"user","content":"Go ahead."},
  {"role":"assistant","content":"","reasoning_content":"Edit and rerun.",
   "tool_calls":[{"id":"call_3","type":"function",
                  "function":{"name":"run","arguments":"{\"cmd\":\"make test\"}"}}]},
  {"role":"tool","tool_call_id":"call_3","content":"PASSED"}])";

// The placeholders RenderPrefix appends (chat_template.cpp), by variant.
std::vector<std::vector<common_chat_msg>> Placeholders(const std::string& tool) {
  common_chat_msg user;
  user.role = "user";
  common_chat_msg assistant;
  assistant.role = "assistant";
  common_chat_msg call = assistant;
  call.tool_calls.push_back({tool, "{}", "call_0"});
  call.reasoning_content = "Ok.";
  common_chat_msg answer = assistant;
  answer.content = "Ok.";
  return {{}, {user}, {assistant, user}, {call}, {answer}};
}

struct Outcome {
  bool ok = false;
  std::string text;  // the prompt, or the error
};

template <typename F>
Outcome RenderOutcome(F&& render) {
  Outcome o;
  try {
    o.text = render();
    o.ok = true;
  } catch (const std::exception& e) {
    o.text = e.what();
  }
  return o;
}

// The pinned template NAME's templates, or null when llama-common cannot parse it.
// `suffix` is appended to the template's source (a Jinja comment: the same renders under
// another source, so under another key of the analysis memo).
common_chat_templates_ptr InitTemplate(const std::string& name, const std::string& suffix = "") {
  auto source = LoadTemplateSource(name);
  EXPECT_TRUE(source.ok()) << name;
  if (!source.ok()) return nullptr;
  try {
    return common_chat_templates_init(nullptr, source.value() + suffix, "<s>", "</s>");
  } catch (const std::exception&) {
    return nullptr;
  }
}

TEST(PromptOnlyTest, EqualsTheFullApplyForEveryPinnedTemplate) {
  const std::vector<common_chat_msg> messages =
      common_chat_msgs_parse_oaicompat(common_json::parse(kMessages));
  const std::vector<common_chat_tool> tools =
      common_chat_tools_parse_oaicompat(common_json::parse(kTools));
  const std::vector<std::string> names = PinnedTemplateNames();
  ASSERT_GE(names.size(), 60u);
  int compared = 0, refused = 0;
  for (const std::string& name : names) {
    common_chat_templates_ptr tmpls = InitTemplate(name);
    if (!tmpls) continue;  // a template the engine cannot parse is not served either
    for (bool with_tools : {true, false}) {
      common_chat_templates_inputs base;
      base.use_jinja = true;
      base.add_generation_prompt = false;
      base.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
      if (with_tools) base.tools = tools;
      for (const auto& tail : Placeholders("read_file")) {
        for (size_t n = 1; n <= messages.size(); ++n) {
          common_chat_templates_inputs in = base;
          in.messages.assign(messages.begin(), messages.begin() + long(n));
          in.messages.insert(in.messages.end(), tail.begin(), tail.end());
          const Outcome full = RenderOutcome([&] { return common_chat_templates_apply(tmpls.get(), in).prompt; });
          const Outcome only =
              RenderOutcome([&] { return common_chat_templates_apply_prompt_only(tmpls.get(), in); });
          if (!full.ok && full.text.find("Unable to generate parser") != std::string::npos) {
            // The full apply failed making the reply's parser, which a prefix render does not
            // need: the prompt-only render stands on its own.
            continue;
          }
          ASSERT_EQ(full.ok, only.ok)
              << name << " n=" << n << ": full: " << full.text << "\nprompt only: " << only.text;
          if (!full.ok) {
            ++refused;
            continue;
          }
          ASSERT_EQ(full.text, only.text) << name << " n=" << n << " tools=" << with_tools;
          ++compared;
        }
      }
    }
  }
  std::printf("  %zu templates: %d renders equal, %d refused both ways\n", names.size(), compared,
              refused);
  EXPECT_GT(compared, 3000);
}

// The agent conversation with a generation prompt (`in`) and without (`plain`), and what the
// template makes of them outside any render memo; nullopt when the template refuses it.
struct Reference {
  common_chat_templates_inputs in, plain;
  common_chat_params full;
  std::string plain_prompt;
};
std::optional<Reference> RenderOutsideMemo(const common_chat_templates* tmpls, bool with_tools) {
  Reference r;
  r.in.use_jinja = true;
  r.in.add_generation_prompt = true;
  r.in.reasoning_format = COMMON_REASONING_FORMAT_DEEPSEEK;
  r.in.messages = common_chat_msgs_parse_oaicompat(common_json::parse(kMessages));
  if (with_tools) r.in.tools = common_chat_tools_parse_oaicompat(common_json::parse(kTools));
  r.plain = r.in;
  r.plain.add_generation_prompt = false;
  try {
    r.full = common_chat_templates_apply(tmpls, r.in);
    r.plain_prompt = common_chat_templates_apply_prompt_only(tmpls, r.plain);
  } catch (const std::exception&) {
    return std::nullopt;  // a template that refuses this conversation
  }
  return r;
}

// Inside a common_chat_render_memo_scope (what PrepareChat holds), the full apply with a
// generation prompt and the prompt-only render of the whole conversation give what they give
// outside one: the prompt, the generation prompt and the parser, for every pinned template.
TEST(PromptOnlyTest, RenderMemoScopeChangesNoResult) {
  int compared = 0;
  for (const std::string& name : PinnedTemplateNames()) {
    common_chat_templates_ptr tmpls = InitTemplate(name);
    if (!tmpls) continue;  // a template the engine cannot parse is not served either
    const std::optional<Reference> ref = RenderOutsideMemo(tmpls.get(), /*with_tools=*/true);
    if (!ref) continue;
    common_chat_render_memo_scope scope;
    const common_chat_params inside = common_chat_templates_apply(tmpls.get(), ref->in);
    const std::string inside_plain = common_chat_templates_apply_prompt_only(tmpls.get(), ref->plain);
    EXPECT_EQ(ref->full.prompt, inside.prompt) << name;
    EXPECT_EQ(ref->full.generation_prompt, inside.generation_prompt) << name;
    EXPECT_EQ(ref->full.parser, inside.parser) << name;
    EXPECT_EQ(ref->plain_prompt, inside_plain) << name;
    ++compared;
  }
  EXPECT_GT(compared, 50);
}

// Two threads sharing one memo (patch 0004: PrepareChat renders the conversation without a
// generation prompt on a second thread while the full apply runs) get what each gets alone:
// every pinned template, the second thread's render begun before, during and after the first
// thread's diff asks for it.
TEST(PromptOnlyTest, SharedRenderMemoChangesNoResult) {
  int compared = 0;
  for (const std::string& name : PinnedTemplateNames()) {
    common_chat_templates_ptr tmpls = InitTemplate(name);
    if (!tmpls) continue;
    const std::optional<Reference> ref = RenderOutsideMemo(tmpls.get(), /*with_tools=*/false);
    if (!ref) continue;
    for (int round = 0; round < 3; ++round) {
      common_chat_render_memo_scope scope;
      std::string other_plain;
      std::thread other([&] {
        common_chat_render_memo_scope shared(scope, common_chat_render_memo_share{});
        for (int i = 0; i < round; ++i) std::this_thread::yield();
        other_plain = common_chat_templates_apply_prompt_only(tmpls.get(), ref->plain);
      });
      const common_chat_params inside = common_chat_templates_apply(tmpls.get(), ref->in);
      other.join();
      const std::string inside_plain =
          common_chat_templates_apply_prompt_only(tmpls.get(), ref->plain);
      EXPECT_EQ(ref->full.prompt, inside.prompt) << name;
      EXPECT_EQ(ref->full.generation_prompt, inside.generation_prompt) << name;
      EXPECT_EQ(ref->plain_prompt, other_plain) << name;
      EXPECT_EQ(ref->plain_prompt, inside_plain) << name;
    }
    ++compared;
  }
  EXPECT_GT(compared, 50);
}

// A render that fails on one thread of a shared memo fails on the other too, which renders
// itself instead of waiting for a result that never comes.
TEST(PromptOnlyTest, SharedRenderMemoPassesFailuresOn) {
  common_chat_templates_ptr tmpls = common_chat_templates_init(
      nullptr, "{{ raise_exception('refused') }}");
  ASSERT_TRUE(tmpls);
  common_chat_templates_inputs plain;
  plain.use_jinja = true;
  plain.messages = common_chat_msgs_parse_oaicompat(common_json::parse(kMessages));
  common_chat_render_memo_scope scope;
  int failed = 0;
  std::thread other([&] {
    common_chat_render_memo_scope shared(scope, common_chat_render_memo_share{});
    try {
      common_chat_templates_apply_prompt_only(tmpls.get(), plain);
    } catch (const std::exception&) {
      ++failed;
    }
  });
  bool failed_here = false;
  try {
    common_chat_templates_apply_prompt_only(tmpls.get(), plain);
  } catch (const std::exception&) {
    failed_here = true;
  }
  other.join();
  EXPECT_TRUE(failed_here);
  EXPECT_EQ(failed, 1);
}

// Patches 0022 and 0023: with the template analysis and the reply's parser kept
// (common_chat_set_analysis_memo, which ChatTemplate::Create turns on),
// common_chat_templates_apply gives every field it gives with both made on each call
// (llama.cpp's way), for every pinned template, with tools and without; and a template's
// second call analyses nothing and builds no parser. Each source gets a comment of this
// test's own, so that no other test of the process has analysed it before.
TEST(AnalysisMemoTest, AKeptAnalysisChangesNoResultAndIsMadeOnce) {
  int compared = 0, kept = 0, kept_outputs = 0;
  for (const std::string& name : PinnedTemplateNames()) {
    common_chat_templates_ptr tmpls = InitTemplate(name, "{# AnalysisMemoTest #}");
    if (!tmpls) continue;
    for (bool with_tools : {true, false}) {
      common_chat_set_analysis_memo(false);
      const std::optional<Reference> ref = RenderOutsideMemo(tmpls.get(), with_tools);
      common_chat_set_analysis_memo(true);
      if (!ref) continue;
      const size_t made = common_chat_analysis_memo_made();
      const size_t outputs = common_chat_output_memo_made();
      const common_chat_params first = common_chat_templates_apply(tmpls.get(), ref->in);
      const size_t made_first = common_chat_analysis_memo_made();
      const size_t outputs_first = common_chat_output_memo_made();
      const common_chat_params again = common_chat_templates_apply(tmpls.get(), ref->in);
      EXPECT_EQ(common_chat_analysis_memo_made(), made_first) << name << ": analysed again";
      EXPECT_EQ(common_chat_output_memo_made(), outputs_first) << name << ": parser built again";
      if (made_first > made) ++kept;
      if (outputs_first > outputs) ++kept_outputs;
      for (const common_chat_params* p : {&first, &again}) {
        const common_chat_params& off = ref->full;
        EXPECT_EQ(off.format, p->format) << name;
        EXPECT_EQ(off.prompt, p->prompt) << name;
        EXPECT_EQ(off.grammar, p->grammar) << name;
        EXPECT_EQ(off.grammar_lazy, p->grammar_lazy) << name;
        EXPECT_EQ(off.generation_prompt, p->generation_prompt) << name;
        EXPECT_EQ(off.supports_thinking, p->supports_thinking) << name;
        EXPECT_EQ(off.thinking_start_tag, p->thinking_start_tag) << name;
        EXPECT_EQ(off.thinking_end_tags, p->thinking_end_tags) << name;
        ASSERT_EQ(off.grammar_triggers.size(), p->grammar_triggers.size()) << name;
        for (size_t i = 0; i < off.grammar_triggers.size(); ++i) {
          EXPECT_EQ(off.grammar_triggers[i].type, p->grammar_triggers[i].type) << name;
          EXPECT_EQ(off.grammar_triggers[i].value, p->grammar_triggers[i].value) << name;
        }
        EXPECT_EQ(off.preserved_tokens, p->preserved_tokens) << name;
        EXPECT_EQ(off.additional_stops, p->additional_stops) << name;
        EXPECT_EQ(off.parser, p->parser) << name;
      }
      ++compared;
    }
  }
  std::printf("  %d applies equal, %d analyses kept, %d parsers kept\n", compared, kept,
              kept_outputs);
  EXPECT_GT(compared, 100);
  EXPECT_GT(kept, 20);  // the autoparser's templates (the others have a parser of their own)
  EXPECT_GT(kept_outputs, 2 * 20);  // theirs, with tools and without
}

}  // namespace
}  // namespace prefixd::engine
