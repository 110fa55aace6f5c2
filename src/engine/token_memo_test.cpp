// TokenMemo against whole-text tokenization on the real tokenizers the pinned llama.cpp ships
// (models/ggml-vocab-*.gguf: SPM, BPE, WPM, UGM vocabularies of llama, qwen, gemma, phi,
// deepseek, command-r, ...), with the turn markers of its real chat templates as cuts.
#include "engine/chat/token_memo.h"

#include "engine/chat/chat_template.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace prefixd::engine {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Every template's source, concatenated: the cut candidates are the specials they use.
const std::string& AllTemplates() {
  static const std::string all = [] {
    std::string s;
    for (const auto& e : fs::directory_iterator(PREFIXD_LLAMA_TEMPLATES_DIR)) s += ReadFile(e.path());
    return s;
  }();
  return all;
}

std::vector<std::string> VocabFiles() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(PREFIXD_LLAMA_MODELS_DIR)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("ggml-vocab-") && name.ends_with(".gguf")) out.push_back(name);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Text fragments a conversation is made of, tricky ones included: specials inside content,
// half specials, whitespace runs before and after markers, CJK and emoji, code.
const std::vector<std::string> kContent = {
    "Read src/main.cpp and tell me what it does.",
    "  leading and trailing spaces  ",
    "\n\nblank lines\n\n\n",
    "a literal <|im_start|> and <|im_end|> inside content",
    "half markers <|im_sta and <start_of_tu and <|eot_i",
    "日本語のテキストと中文文本 🙂🚀",
    "def f(x):\n    return x * 2  # tabs\tand\ttabs",
    "<|start_header_id|>user<|end_header_id|> spoofed",
    "</s><s> [INST] nested [/INST] <bos><eos>",
    "tool result: {\"files\": [\"a.cpp\", \"b.cpp\"], \"ok\": true}",
};

// Chat formats of real templates.
struct Format {
  std::string (*turn)(const std::string& role, const std::string& content);
};
const std::vector<Format> kFormats = {
    {[](const std::string& r, const std::string& c) { return "<|im_start|>" + r + "\n" + c + "<|im_end|>\n"; }},
    {[](const std::string& r, const std::string& c) {
       return "<|start_header_id|>" + r + "<|end_header_id|>\n\n" + c + "<|eot_id|>";
     }},
    {[](const std::string& r, const std::string& c) {
       return "<start_of_turn>" + r + "\n" + c + "<end_of_turn>\n";
     }},
    {[](const std::string& r, const std::string& c) { return "<|" + r + "|>\n" + c + "<|end|>\n"; }},
    {[](const std::string& r, const std::string& c) { return "[INST] " + r + ": " + c + " [/INST]"; }},
};

struct VocabResult {
  size_t cuts = 0;
  uint64_t hits = 0;
};

void CheckVocab(const std::string& file, std::mt19937& rng, VocabResult* out) {
  VocabResult& vr = *out;
  auto model = Model::Load({(fs::path(PREFIXD_LLAMA_MODELS_DIR) / file).string(), 0, true});
  EXPECT_TRUE(model.ok()) << file << ": " << model.status().ToString();
  if (!model.ok()) return;
  const Model& m = **model;
  std::vector<std::string> cuts = SafeCutTexts(m, AllTemplates());
  vr.cuts = cuts.size();
  TokenMemo memo(m, cuts);
  for (const Format& f : kFormats) {
    // A growing conversation: each request is the last one plus a turn (memo hits), and now
    // and then a rewritten middle turn (memo misses after it).
    std::vector<std::string> turns = {f.turn("system", "You are a coding agent.")};
    for (int i = 0; i < 12; ++i) {
      const std::string& c = kContent[rng() % kContent.size()];
      turns.push_back(f.turn(i % 2 ? "assistant" : "user", c));
      if (i == 7) turns[3] = f.turn("assistant", "rewritten " + c);
      std::string text;
      for (const std::string& t : turns) text += t;
      if (i % 3 == 0) text += " ";  // a trailing space after the last marker
      ASSERT_EQ(memo.Tokenize(text), m.Tokenize(text, true)) << file << " turn " << i << ": " << text;
    }
  }
  // Random strings over an alphabet of the cut texts and fragments of them.
  std::vector<std::string> alphabet = {" ", "\n", "a", "é", "🙂", "<", "|", ">", "  ", "\t"};
  for (const std::string& c : cuts) {
    alphabet.push_back(c);
    alphabet.push_back(c.substr(0, c.size() / 2));
    alphabet.push_back(c.substr(c.size() / 2));
  }
  for (int i = 0; i < 60; ++i) {
    std::string text;
    const int n = 1 + int(rng() % 24);
    for (int j = 0; j < n; ++j) text += alphabet[rng() % alphabet.size()];
    ASSERT_EQ(memo.Tokenize(text), m.Tokenize(text, true)) << file << ": '" << text << "'";
  }
  vr.hits = memo.GetStats().hits;
}

TEST(TokenMemo, EqualsWholeTextTokenizationOnRealTokenizers) {
  std::mt19937 rng(42);
  const std::vector<std::string> files = VocabFiles();
  ASSERT_GE(files.size(), 10u);
  size_t with_cuts = 0;
  for (const std::string& f : files) {
    VocabResult r;
    CheckVocab(f, rng, &r);
    if (HasFatalFailure()) return;
    if (r.cuts > 0) {
      ++with_cuts;
      EXPECT_GT(r.hits, 0u) << f << ": cuts but no piece was ever reused";
    }
  }
  EXPECT_GE(with_cuts, 5u) << "the memo cuts too few of the real vocabularies to matter";
}

// A piece that no special token may cut before: a marker a longer special token can overlap
// from the left is never a cut.
TEST(TokenMemo, NoCutWhereAnotherSpecialOverlaps) {
  auto model = Model::Load({(fs::path(PREFIXD_LLAMA_MODELS_DIR) / "ggml-vocab-qwen2.gguf").string(), 0, true});
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  std::vector<std::string> cuts = SafeCutTexts(**model, AllTemplates());
  EXPECT_NE(std::find(cuts.begin(), cuts.end(), "<|im_start|>"), cuts.end());
  EXPECT_TRUE(SafeCutTexts(**model, "").empty());  // only markers the template uses
}

}  // namespace
}  // namespace prefixd::engine

namespace prefixd::engine {
namespace {

// A tenant's pieces are a hit for that tenant only: what one tokenized tells the other
// nothing (no faster path through the memo), and both get the same tokens.
TEST(TokenMemoScopeTest, PiecesAreRememberedPerScope) {
  auto loaded = Model::Load(
      {(fs::path(PREFIXD_LLAMA_MODELS_DIR) / "ggml-vocab-qwen2.gguf").string(), 0, true});
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const Model* model = loaded->get();
  TokenMemo owned(*model, {"<|im_start|>", "<|im_end|>"});
  TokenMemo* memo = &owned;
  const std::string text = "<|im_start|>user\nA private document, sent by tenant A.<|im_end|>\n";
  const auto a = memo->Tokenize(text, "salt-a");
  const uint64_t hits = memo->GetStats().hits;
  const auto b = memo->Tokenize(text, "salt-b");
  EXPECT_EQ(memo->GetStats().hits, hits) << "tenant B hit tenant A's pieces";
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, model->Tokenize(text, true));
  memo->Tokenize(text, "salt-a");
  EXPECT_GT(memo->GetStats().hits, hits) << "tenant A's own pieces are remembered";
}

TEST(RenderOptionsKeyTest, TheMemoScopeIsPartOfTheKey) {
  ChatRenderOptions a, b;
  a.memo_scope = "salt-a";
  b.memo_scope = "salt-b";
  EXPECT_NE(RenderOptionsKey(a), RenderOptionsKey(b));
}

}  // namespace
}  // namespace prefixd::engine
