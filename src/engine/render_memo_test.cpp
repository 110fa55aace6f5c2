// The render memo (issue 10): memoized capture points equal the reference (every prefix
// rendered) on every request of growing agent sessions, for the test models' template and for
// real templates the pinned llama.cpp ships; a continuing request renders a small constant
// times its new messages; an edit in history still gives the reference's points.
#include "engine/render_memo.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/capture_points.h"
#include "engine/test_model.h"

namespace prefixd::engine {
namespace {

using json = nlohmann::json;

// --- RenderMemo and its proof, on plain strings -------------------------------------------

PrefixRecord RecordAgainst(std::string_view prefix, std::string_view full) {
  return MakePrefixRecord(prefix, full);
}

bool Proves(const PrefixRecord& r, std::string_view full) {
  if (r.boundary > full.size()) return false;
  const uint64_t b = r.boundary;
  return ProvesSharedLength(r, full, PrefixDigests(full, std::span<const uint64_t>(&b, 1))[0]);
}

TEST(RenderMemoTest, RecordHoldsBoundaryCharAndDigest) {
  PrefixRecord r = RecordAgainst("<s>sys</s><u>", "<s>sys</s><a>hi");
  EXPECT_EQ(r.length, 13u);
  EXPECT_EQ(r.boundary, 11u);
  EXPECT_EQ(r.next_char, 'u');
  EXPECT_EQ(r.head_digest, Sha256Of("<s>sys</s><"));
}

TEST(RenderMemoTest, ProofHoldsOnlyWhenTheSharedLengthIsExactlyTheSame) {
  const PrefixRecord whole = RecordAgainst("<s>sys</s>", "<s>sys</s><u>q");
  EXPECT_TRUE(Proves(whole, "<s>sys</s><u>q</u><a>"));  // the conversation grew
  EXPECT_TRUE(Proves(whole, "<s>sys</s>"));             // b == |full|
  EXPECT_FALSE(Proves(whole, "<s>SYS</s><u>q"));        // an earlier change
  EXPECT_FALSE(Proves(whole, "<s>sys</"));              // too short

  const PrefixRecord part = RecordAgainst("<s>sys</s><u>", "<s>sys</s><a>hi");
  EXPECT_TRUE(Proves(part, "<s>sys</s><a>bye"));  // still parts at 'a' != 'u'
  EXPECT_TRUE(Proves(part, "<s>sys</s><"));        // ends at the boundary
  EXPECT_FALSE(Proves(part, "<s>sys</s><u>"));     // would share more: must render
}

TEST(RenderMemoTest, PrefixDigestsInAnyOrderWithRepeats) {
  const std::string text = "abcdefgh";
  const std::vector<uint64_t> at = {5, 0, 8, 5, 2};
  const std::vector<Digest> d = PrefixDigests(text, at);
  ASSERT_EQ(d.size(), at.size());
  for (size_t i = 0; i < at.size(); ++i) EXPECT_EQ(d[i], Sha256Of(text.substr(0, at[i]))) << i;
}

PrefixKey KeyOf(int i) {
  return Sha256Of(std::to_string(i));
}

TEST(RenderMemoTest, FindPutReplaceAndLruBound) {
  RenderMemo memo({/*max_entries=*/3});
  std::vector<std::pair<PrefixKey, PrefixRecord>> put;
  for (int i = 0; i < 3; ++i) put.push_back({KeyOf(i), PrefixRecord{false, uint64_t(i), 0, 0, {}}});
  memo.Put(put);
  EXPECT_EQ(memo.size(), 3u);
  const std::vector<PrefixKey> k0 = {KeyOf(0)};
  ASSERT_TRUE(memo.Find(k0)[0].has_value());  // 0 is now the most recent
  const std::pair<PrefixKey, PrefixRecord> k3 = {KeyOf(3), PrefixRecord{false, 3, 0, 0, {}}};
  memo.Put(std::span(&k3, 1));  // evicts 1
  const std::vector<PrefixKey> all = {KeyOf(0), KeyOf(1), KeyOf(2), KeyOf(3)};
  auto found = memo.Find(all);
  EXPECT_TRUE(found[0].has_value());
  EXPECT_FALSE(found[1].has_value());
  EXPECT_TRUE(found[2].has_value());
  ASSERT_TRUE(found[3].has_value());
  EXPECT_EQ(found[3]->length, 3u);
  const std::pair<PrefixKey, PrefixRecord> k3b = {KeyOf(3), PrefixRecord{false, 30, 0, 0, {}}};
  memo.Put(std::span(&k3b, 1));
  EXPECT_EQ(memo.size(), 3u);
  EXPECT_EQ(memo.Find(std::span(&k3.first, 1))[0]->length, 30u);
  memo.Clear();
  EXPECT_EQ(memo.size(), 0u);
}

// --- Capture points: memoized against the reference ---------------------------------------

const Model& TestModel() {
  static std::unique_ptr<Model> model = [] {
    auto dir = std::filesystem::temp_directory_path() /
               ("prefixd-render-memo-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "qwen35.gguf").string();
    Status st = MakeTestModel({"qwen35", "tiny", 7}, path);
    EXPECT_TRUE(st.ok()) << st.ToString();
    auto m = Model::Load({path, 0});
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return std::move(m).value();
  }();
  return *model;
}

std::string Words(int seed, int n) {
  static const char* kWords[] = {"alpha", "build", "cache", "delta", "entry", "flush",
                                 "graph", "hash",  "index", "join",  "kernel", "layer"};
  std::string out;
  uint64_t x = uint64_t(seed) * 2654435761u + 1;
  for (int i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out += (i ? " " : "") + std::string(kWords[(x >> 33) % 12]);
  }
  return out;
}

const char* kTools = R"([{"type":"function","function":{"name":"read_file",
  "description":"Reads a file.","parameters":{"type":"object",
  "properties":{"path":{"type":"string","description":"the path"}},"required":["path"]}}}])";

// An agent session: system, user, then tool steps (assistant with reasoning_content and a
// tool call, then the tool's result); every third step a final answer and a new user message.
struct Session {
  json messages = json::array();
  int step = 0;
  // Appends one step; returns the number of messages it added.
  size_t Advance() {
    const size_t before = messages.size();
    const std::string id = "call_" + std::to_string(step);
    json call = {{"id", id}, {"type", "function"},
                 {"function", {{"name", "read_file"},
                               {"arguments", json{{"path", "f" + std::to_string(step)}}.dump()}}}};
    if (step % 3 == 2) {
      messages.push_back({{"role", "assistant"}, {"reasoning_content", Words(step, 12)},
                          {"content", Words(step + 100, 20)}});
      messages.push_back({{"role", "user"}, {"content", Words(step + 200, 15)}});
    } else {
      messages.push_back({{"role", "assistant"}, {"reasoning_content", Words(step, 12)},
                          {"content", Words(step + 300, 6)}, {"tool_calls", json::array({call})}});
      messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"name", "read_file"},
                          {"content", Words(step + 400, 40)}});
    }
    ++step;
    return messages.size() - before;
  }
  bool ends_with_user() const { return messages.back()["role"] == "user"; }
};

Session StartSession() {
  Session s;
  s.messages.push_back({{"role", "system"}, {"content", "You are an agent. " + Words(1, 30)}});
  s.messages.push_back({{"role", "user"}, {"content", Words(2, 20)}});
  return s;
}

struct Prepared {
  std::vector<int32_t> reference;
  std::vector<int32_t> memoized;
  CapturePointStats stats;
};

Prepared Prepare(const ChatTemplate& tmpl, RenderMemo& memo, const json& messages) {
  const Model& model = TestModel();
  ChatRenderOptions ro;
  ro.tools_json = kTools;
  Prepared p;
  auto chat = tmpl.Parse(messages.dump(), ro);
  EXPECT_TRUE(chat.ok()) << chat.status().ToString();
  auto text = tmpl.Render(chat.value());
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  if (!chat.ok() || !text.ok()) return p;
  const std::vector<Token> tokens = model.Tokenize(text.value(), true);
  auto ref = ChatCapturePoints(model, tmpl, messages.dump(), ro, text.value(), tokens);
  auto got = ChatCapturePoints(model, tmpl, chat.value(), text.value(), tokens, memo, &p.stats);
  EXPECT_TRUE(ref.ok() && got.ok());
  if (ref.ok()) p.reference = ref.value();
  if (got.ok()) p.memoized = got.value();
  return p;
}

// Real templates from the pinned llama.cpp: Qwen3-style (strips reasoning before the last user
// message), gpt-oss (channels), Llama 3.1 (tools in the first user message), DeepSeek-R1.
const char* kRealTemplates[] = {"Qwen-Qwen3-0.6B.jinja", "openai-gpt-oss-120b.jinja",
                                "meta-llama-Llama-3.1-8B-Instruct.jinja",
                                "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
                                "Qwen3-Coder.jinja"};

std::string ReadTemplate(const std::string& name) {
  std::ifstream in(std::string(PREFIXD_LLAMA_TEMPLATES_DIR) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class RenderMemoTemplateTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string source;
    if (GetParam() != "test-model") {
      source = ReadTemplate(GetParam());
      if (source.empty()) GTEST_SKIP() << "no template " << GetParam();
    }
    auto t = ChatTemplate::Create(TestModel(), source);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tmpl_ = std::move(t).value();
  }
  std::unique_ptr<ChatTemplate> tmpl_;
};

TEST_P(RenderMemoTemplateTest, GrowingSessionGivesReferencePointsWithFewRenders) {
  RenderMemo memo;
  Session s = StartSession();
  size_t added = s.messages.size();
  size_t since_user = 0;  // messages after the last user message, before this request
  for (int req = 0; req < 14; ++req) {
    Prepared p = Prepare(*tmpl_, memo, s.messages);
    EXPECT_EQ(p.memoized, p.reference) << "request " << req;
    EXPECT_FALSE(p.reference.empty()) << "request " << req;
    if (req > 0) {
      // New messages, plus the turns a template rewrites when a user message closes them.
      const size_t rewritten = s.ends_with_user() ? since_user : 0;
      EXPECT_LE(p.stats.renders, 2 * (added + rewritten) + 2)
          << "request " << req << " of " << s.messages.size() << " messages";
    }
    since_user = s.ends_with_user() ? 0 : since_user + added;
    added = s.Advance();
  }
}

TEST_P(RenderMemoTemplateTest, RepeatedRequestRendersNothing) {
  RenderMemo memo;
  Session s = StartSession();
  for (int i = 0; i < 4; ++i) s.Advance();
  Prepared first = Prepare(*tmpl_, memo, s.messages);
  Prepared again = Prepare(*tmpl_, memo, s.messages);
  EXPECT_EQ(first.stats.renders, first.stats.prefixes);
  EXPECT_EQ(again.stats.renders, 0u);
  EXPECT_EQ(again.memoized, again.reference);
}

TEST_P(RenderMemoTemplateTest, EditedHistoryGivesReferencePoints) {
  RenderMemo memo;
  Session s = StartSession();
  for (int i = 0; i < 6; ++i) s.Advance();
  Prepared before = Prepare(*tmpl_, memo, s.messages);
  EXPECT_EQ(before.memoized, before.reference);
  for (size_t at : {size_t(3), size_t(1), s.messages.size() - 1}) {
    json edited = s.messages;
    edited[at]["content"] = Words(int(at) + 999, 25);
    Prepared p = Prepare(*tmpl_, memo, edited);
    EXPECT_EQ(p.memoized, p.reference) << "edited message " << at;
    EXPECT_GT(p.stats.renders, 0u);
  }
  // A shorter history (a branch that drops the last turns) and then the original again.
  json branch = s.messages;
  branch.erase(branch.end() - 3, branch.end());
  Prepared b = Prepare(*tmpl_, memo, branch);
  EXPECT_EQ(b.memoized, b.reference);
  Prepared back = Prepare(*tmpl_, memo, s.messages);
  EXPECT_EQ(back.memoized, back.reference);
}

TEST_P(RenderMemoTemplateTest, ConcurrentSessionsShareOneMemo) {
  RenderMemo memo({/*max_entries=*/64});  // small: evictions while threads run
  std::vector<std::thread> threads;
  std::vector<int> mismatches(3, 0);
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      Session s = StartSession();
      for (int i = 0; i < t; ++i) s.Advance();  // sessions at different lengths
      for (int req = 0; req < 6; ++req) {
        Prepared p = Prepare(*tmpl_, memo, s.messages);
        if (p.memoized != p.reference) ++mismatches[size_t(t)];
        s.Advance();
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(3, 0));
  EXPECT_LE(memo.size(), 64u);
}

std::vector<std::string> TemplateNames() {
  std::vector<std::string> names = {"test-model"};
  for (const char* n : kRealTemplates) names.push_back(n);
  return names;
}

INSTANTIATE_TEST_SUITE_P(Templates, RenderMemoTemplateTest, ::testing::ValuesIn(TemplateNames()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace prefixd::engine
