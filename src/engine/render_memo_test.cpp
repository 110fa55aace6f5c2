// The render memo: memoized capture points equal the reference (every prefix
// rendered) on every request of growing agent sessions, for the test models' template and for
// real templates the pinned llama.cpp ships; a continuing request renders a small constant
// times its new messages, also one that adds a user message after a long agent run (the
// template rewrites the turns since the previous one: splits and kept texts prove them); an
// edit in history, misleading kept texts or none still give the reference's points.
#include "engine/chat/render_memo.h"

#include <algorithm>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/chat/capture_points.h"
#include "engine/chat/prefix_renders_ahead.h"
#include "util/process_memory.h"
#include "engine/testgen/test_model.h"
#include "engine/test_temp_dir.h"

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

TEST(RenderMemoTest, SplitKeepsThePlaceholderTailAndProvesTheHead) {
  // A render followed by a placeholder user message "<u></u>", the placeholder alone with the
  // system prompt the template adds to it: the tail starts a character early (">"), harmless.
  const std::string prefix = "<s>sys</s><a>x</a><u></u>";
  const auto split = MakePrefixSplit(prefix, "<s>tools</s><u></u>");
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->tail, "><u></u>");
  EXPECT_EQ(split->at, prefix.size() - 8);
  EXPECT_EQ(split->head_digest, Sha256Of("<s>sys</s><a>x</a"));
  auto by_split = [&](std::string_view full) {
    const uint64_t at = split->at;
    return SharedLengthBySplit(*split, full, PrefixDigests(full, std::span(&at, 1))[0]);
  };
  // A later message follows where the placeholder was: the boundary is its start (+ "<"),
  // exactly what rendering the prefix would give.
  for (std::string full : {"<s>sys</s><a>x</a><a>y", "<s>sys</s><a>x</a><u>q</u>",
                           "<s>sys</s><a>x</a>"}) {
    EXPECT_EQ(by_split(full), std::optional<uint64_t>(MakePrefixRecord(prefix, full).boundary))
        << full;
  }
  EXPECT_EQ(by_split("<s>sys</s><a>x</a><a>y"), std::optional<uint64_t>(split->at + 2));
  EXPECT_EQ(by_split("<s>sys</s><a>z</a><a>y"), std::nullopt);  // the head differs
  // No common suffix, or one too long to keep: no split.
  EXPECT_FALSE(MakePrefixSplit(prefix, "<u></u>x").has_value());
  const std::string long_tail(kMaxSplitTail + 1, 'x');
  EXPECT_FALSE(MakePrefixSplit("a" + long_tail, long_tail).has_value());
}

TEST(RenderMemoTest, EarlierTextProvesABoundaryThatMovedBack) {
  // The plain render of a turn with reasoning, compared with the full render that still showed
  // it; the next full render strips it (a new user message came).
  const std::string prefix = "<s>sys</s><a><think>r</think>x</a>";
  const std::string before = prefix + "<t>out</t>";
  const std::string after = "<s>sys</s><a>x</a><u>q</u>";
  const PrefixRecord r = MakePrefixRecord(prefix, before);
  ASSERT_EQ(r.boundary, prefix.size());
  const uint64_t b = r.boundary;
  const Digest text_digest = PrefixDigests(before, std::span(&b, 1))[0];
  const uint64_t shared = 13;  // LCP(before, after) == "<s>sys</s><a>"
  ASSERT_EQ(before.substr(0, shared), after.substr(0, shared));
  EXPECT_EQ(SharedLengthByText(r, text_digest, shared), std::optional<uint64_t>(shared));
  EXPECT_EQ(MakePrefixRecord(prefix, after).boundary, shared);  // what rendering would give
  // The text must spell the render up to its boundary, and leave the new render before it.
  EXPECT_EQ(SharedLengthByText(r, Sha256Of("something else"), shared), std::nullopt);
  EXPECT_EQ(SharedLengthByText(r, text_digest, b), std::nullopt);
  const PrefixRecord moved = Rebound(r, shared, before[shared], Sha256Of(after.substr(0, shared)));
  EXPECT_EQ(moved.length, r.length);
  EXPECT_EQ(moved.next_char, '<');
  EXPECT_TRUE(Proves(moved, after));
}

TEST(RenderMemoTest, TextsAreBoundedDedupedAndTheClosestIsFound) {
  RenderMemo memo({/*max_entries=*/16, /*max_text_bytes=*/30});
  EXPECT_FALSE(memo.FindClosestText("abc").text);
  memo.PutText("0123456789");
  memo.PutText("abcdefghij");
  memo.PutText("abcdefghij");  // kept once
  EXPECT_EQ(memo.n_texts(), 2u);
  ClosestText c = memo.FindClosestText("abcdXYZ");
  ASSERT_TRUE(c.text);
  EXPECT_EQ(*c.text, "abcdefghij");
  EXPECT_EQ(c.shared, 4u);
  memo.PutText(std::string(31, 'z'));  // larger than the bound: not kept
  EXPECT_EQ(memo.n_texts(), 2u);
  memo.FindClosestText("0123");        // "0123456789" is now the most recent
  memo.PutText("ABCDEFGHIJKLMNO");     // 35 bytes: the least recent goes
  EXPECT_EQ(memo.n_texts(), 2u);
  EXPECT_EQ(memo.FindClosestText("abcd").shared, 0u);
  EXPECT_EQ(memo.FindClosestText("ABC").shared, 3u);
  EXPECT_EQ(memo.FindClosestText("0123").shared, 4u);
  memo.Clear();
  EXPECT_EQ(memo.n_texts(), 0u);
}

// A growing conversation keeps its latest render only: each turn's render is a prefix of the
// next one's, and the longer one shares at least as much with any later text.
TEST(RenderMemoTest, ATextReplacesTheKeptTextsThatArePrefixesOfIt) {
  RenderMemo memo({/*max_entries=*/16, /*max_text_bytes=*/1000});
  memo.PutText("sys|u1");
  memo.PutText("other|u1");
  memo.PutText("sys|u1|a1|u2");
  EXPECT_EQ(memo.n_texts(), 2u) << "sys|u1 went: a prefix of the new text";
  memo.PutText("sys|u1|a1");  // a prefix of a kept text is kept (it may be the one resent)
  EXPECT_EQ(memo.n_texts(), 3u);
  ClosestText c = memo.FindClosestText("sys|u1|a1|u2|a2|u3");
  ASSERT_TRUE(c.text);
  EXPECT_EQ(*c.text, "sys|u1|a1|u2");
  EXPECT_EQ(c.shared, 12u);
  EXPECT_EQ(memo.FindClosestText("other|u1|x").shared, 8u);
}

PrefixKey KeyOf(int i) {
  return Sha256Of(std::to_string(i));
}

// A record's split tail (up to kMaxSplitTail characters) is most of its memory: the memo
// counts it, reports it as render_memo, and evicts the least recent records past
// max_record_bytes however few they are.
TEST(RenderMemoTest, SplitTailsCountAndBoundTheRecordsMemory) {
  auto render_memo_bytes = [] {
    for (const auto& [owner, bytes] : MemoryByOwner()) {
      if (owner == "render_memo") return bytes;
    }
    return uint64_t(0);
  };
  const uint64_t before = render_memo_bytes();
  {
    RenderMemo memo({/*max_entries=*/1000, /*max_text_bytes=*/0, /*max_record_bytes=*/8000});
    auto with_tail = [](int i) {
      PrefixRecord r{false, uint64_t(i), 0, 0, {}};
      r.split = PrefixSplit{0, {}, std::string(kMaxSplitTail, 'x')};
      return std::pair<PrefixKey, PrefixRecord>{KeyOf(i), r};
    };
    for (int i = 0; i < 5; ++i) {
      const auto one = with_tail(i);
      memo.Put(std::span(&one, 1));
    }
    EXPECT_GE(render_memo_bytes() - before, 5u * kMaxSplitTail) << "the tails are counted";
    for (int i = 5; i < 20; ++i) {
      const auto one = with_tail(i);
      memo.Put(std::span(&one, 1));
    }
    EXPECT_LT(memo.size(), 8u) << "8000 bytes hold fewer than 8 records of 1 KB tails";
    EXPECT_GE(memo.size(), 4u);
    EXPECT_LE(render_memo_bytes() - before, 8000u);
    const PrefixKey last = KeyOf(19);
    EXPECT_TRUE(memo.Find(std::span(&last, 1))[0].has_value()) << "the most recent stays";
  }
  EXPECT_EQ(render_memo_bytes(), before) << "a destroyed memo gives its bytes back";
}

// The gauge is the heap the records take (their nodes and tails as malloc's chunks), not the
// sizes asked for: a soak reads RSS less the owners, and an owner counted short shows as growth
// nobody owns. 20,000 records, a third with tails of 40 to 400 characters.
TEST(RenderMemoTest, TheGaugeIsTheHeapTheRecordsTake) {
  if (ReadProcessMemory().heap_in_use_bytes == 0) GTEST_SKIP() << "not glibc's malloc";
  auto render_memo_bytes = [] {
    for (const auto& [owner, bytes] : MemoryByOwner()) {
      if (owner == "render_memo") return bytes;
    }
    return uint64_t(0);
  };
  std::vector<std::pair<PrefixKey, PrefixRecord>> records;
  for (int i = 0; i < 20000; ++i) {
    PrefixRecord r{false, uint64_t(i), 0, 0, {}};
    if (i % 3 == 0) r.split = PrefixSplit{0, {}, std::string(40 + i % 361, 'x')};
    records.emplace_back(KeyOf(i), std::move(r));
  }
  RenderMemo memo({/*max_entries=*/size_t(1) << 16, /*max_text_bytes=*/0,
                   /*max_record_bytes=*/size_t(64) << 20});
  const uint64_t gauge_before = render_memo_bytes();
  const uint64_t heap_before = ReadProcessMemory().heap_in_use_bytes;
  memo.Put(records);
  const double heap = double(ReadProcessMemory().heap_in_use_bytes - heap_before);
  const double gauge = double(render_memo_bytes() - gauge_before);
  ASSERT_EQ(memo.size(), records.size());
  EXPECT_GT(gauge, 0.93 * heap) << "gauge " << gauge << " heap " << heap;
  EXPECT_LT(gauge, 1.07 * heap) << "gauge " << gauge << " heap " << heap;
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
    std::filesystem::create_directories(testing::RemoveAtExit(dir.string()));
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
  int user_every = 3;  // steps per user turn
  // Appends one step; returns the number of messages it added.
  size_t Advance() {
    const size_t before = messages.size();
    const std::string id = "call_" + std::to_string(step);
    json call = {{"id", id}, {"type", "function"},
                 {"function", {{"name", "read_file"},
                               {"arguments", json{{"path", "f" + std::to_string(step)}}.dump()}}}};
    if (step % user_every == user_every - 1) {
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

Session StartSession(int user_every = 3) {
  Session s;
  s.user_every = user_every;
  s.messages.push_back({{"role", "system"}, {"content", "You are an agent. " + Words(1, 30)}});
  s.messages.push_back({{"role", "user"}, {"content", Words(2, 20)}});
  return s;
}

struct Prepared {
  std::vector<int32_t> reference;
  std::vector<int32_t> memoized;
  CapturePointStats stats;
};

// With `ahead`, the prefix renders begin before the full render, as PrepareChat begins them.
Prepared Prepare(const ChatTemplate& tmpl, RenderMemo& memo, const json& messages,
                 bool ahead = false) {
  const Model& model = TestModel();
  ChatRenderOptions ro;
  ro.tools_json = kTools;
  Prepared p;
  auto chat = tmpl.Parse(messages.dump(), ro);
  EXPECT_TRUE(chat.ok()) << chat.status().ToString();
  if (!chat.ok()) return p;
  RenderReuseScope scope;
  std::optional<PrefixRendersAhead> renders;
  if (ahead) renders.emplace(tmpl, chat.value(), memo, scope);
  auto text = tmpl.Render(chat.value());
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  if (!text.ok()) return p;
  const std::vector<Token> tokens = model.Tokenize(text.value(), true);
  auto ref = ChatCapturePoints(model, tmpl, messages.dump(), ro, text.value(), tokens);
  auto got = ChatCapturePoints(model, tmpl, chat.value(), text.value(), tokens, memo, &p.stats,
                               renders ? &*renders : nullptr);
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

// Every request of a growing session, also one that adds a user message (when templates rewrite
// the turns since the previous one), renders about 2 prefixes per new message.
void ExpectReferencePointsWithFewRenders(const ChatTemplate& tmpl, int user_every,
                                         int n_requests) {
  RenderMemo memo;
  Session s = StartSession(user_every);
  size_t added = s.messages.size();
  int user_requests = 0;
  for (int req = 0; req < n_requests; ++req) {
    Prepared p = Prepare(tmpl, memo, s.messages);
    EXPECT_EQ(p.memoized, p.reference) << "request " << req;
    EXPECT_FALSE(p.reference.empty()) << "request " << req;
    if (req > 0) {
      // Two per new message, the tail, the last message followed by an answer or a tool call.
      EXPECT_LE(p.stats.renders, 2 * added + 3)
          << "request " << req << " of " << s.messages.size() << " messages"
          << (s.ends_with_user() ? " (adds a user message)" : "");
      if (s.ends_with_user()) ++user_requests;
    }
    added = s.Advance();
  }
  EXPECT_GE(user_requests, 2);
}

TEST_P(RenderMemoTemplateTest, GrowingSessionGivesReferencePointsWithFewRenders) {
  ExpectReferencePointsWithFewRenders(*tmpl_, /*user_every=*/3, /*n_requests=*/14);
}

TEST_P(RenderMemoTemplateTest, NewUserMessageAfterLongAgentRunRendersOnlyNewMessages) {
  ExpectReferencePointsWithFewRenders(*tmpl_, /*user_every=*/6, /*n_requests=*/20);
}

// The prefix renders begun ahead of the full render (PrepareChat's order) give the same points
// with the same renders as those made after it, on a growing session, and stay bounded on a
// long conversation seen for the first time.
TEST_P(RenderMemoTemplateTest, RendersBegunAheadGiveTheSamePointsAndRenders) {
  RenderMemo after_memo;
  RenderMemo ahead_memo;
  Session s = StartSession(3);
  for (int req = 0; req < 12; ++req) {
    Prepared after = Prepare(*tmpl_, after_memo, s.messages);
    Prepared ahead = Prepare(*tmpl_, ahead_memo, s.messages, /*ahead=*/true);
    EXPECT_EQ(ahead.memoized, after.memoized) << "request " << req;
    EXPECT_EQ(ahead.memoized, ahead.reference) << "request " << req;
    EXPECT_EQ(ahead.stats.renders, after.stats.renders) << "request " << req;
    EXPECT_EQ(ahead.stats.skipped, after.stats.skipped) << "request " << req;
    s.Advance();
  }
  RenderMemo fresh;
  for (int i = 0; i < 30; ++i) s.Advance();
  Prepared first = Prepare(*tmpl_, fresh, s.messages, /*ahead=*/true);
  EXPECT_EQ(first.stats.renders, kMaxPrefixRenders);
  EXPECT_EQ(first.stats.renders + first.stats.skipped, first.stats.prefixes);
}

// Texts that share much with the requests but differ somewhere (other branches, corrupted
// copies) and a memo that keeps no texts: still the reference's points.
TEST_P(RenderMemoTemplateTest, MisleadingOrMissingTextsGiveReferencePoints) {
  RenderMemo memo;
  RenderMemo no_texts({/*max_entries=*/size_t(1) << 16, /*max_text_bytes=*/0});
  Session s = StartSession(4);
  for (int req = 0; req < 12; ++req) {
    const std::string text = tmpl_->Render(s.messages.dump(), {true, kTools}).value();
    for (size_t at : {text.size() / 3, text.size() / 2, text.size() - 5}) {
      std::string wrong = text;
      wrong[at] = wrong[at] == 'x' ? 'y' : 'x';
      memo.PutText(wrong.substr(0, at + 100));
    }
    Prepared p = Prepare(*tmpl_, memo, s.messages);
    EXPECT_EQ(p.memoized, p.reference) << "request " << req;
    Prepared q = Prepare(*tmpl_, no_texts, s.messages);
    EXPECT_EQ(q.memoized, q.reference) << "request " << req << " (no texts kept)";
    EXPECT_EQ(q.stats.by_text, 0u);
    s.Advance();
  }
}

// A long conversation seen for the first time (after a restart, a new client): a bounded number
// of renders instead of 2 per message; the points it finds are the reference's, the first
// message's and the last messages' among them; the session then goes on as usual.
TEST_P(RenderMemoTemplateTest, LongConversationSeenFirstRendersABoundedNumber) {
  RenderMemo memo;
  Session s = StartSession();
  for (int i = 0; i < 40; ++i) s.Advance();  // ~82 messages, ~163 prefixes
  Prepared first = Prepare(*tmpl_, memo, s.messages);
  EXPECT_EQ(first.stats.renders, kMaxPrefixRenders);
  EXPECT_EQ(first.stats.renders + first.stats.skipped, first.stats.prefixes);
  for (int32_t p : first.memoized) {
    EXPECT_TRUE(std::binary_search(first.reference.begin(), first.reference.end(), p)) << p;
  }
  ASSERT_GE(first.memoized.size(), 4u);
  ASSERT_GE(first.reference.size(), 4u);
  EXPECT_EQ(first.memoized.front(), first.reference.front());  // the first message's end
  EXPECT_TRUE(std::equal(first.reference.end() - 3, first.reference.end(),
                         first.memoized.end() - 3));  // the last messages'
  Prepared again = Prepare(*tmpl_, memo, s.messages);
  EXPECT_EQ(again.stats.renders, 0u);
  EXPECT_EQ(again.memoized, first.memoized);
  const size_t added = s.Advance();
  Prepared next = Prepare(*tmpl_, memo, s.messages);
  EXPECT_LE(next.stats.renders, 2 * added + 3);
  EXPECT_TRUE(std::equal(next.reference.end() - 3, next.reference.end(),
                         next.memoized.end() - 3));
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
